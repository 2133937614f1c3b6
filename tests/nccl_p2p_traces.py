"""Synthetic PyTorch profiler (Kineto) traces of an NCCL point-to-point job, ground truth known.

Not a test: :func:`write_nccl_p2p_job` writes one Kineto JSON file per rank of a job that,
each step, passes a message around a ring (rank ``r`` sends to ``(r + 1) % world``). Ranks
are spread over two hosts in blocks (4 ranks: 0, 1 on ``hostA``; 2, 3 on ``hostB``), so the
ring has within-host transfers and one transfer each way between the hosts.

What each file holds, as recent PyTorch writes it (``torch/csrc/profiler/util.cpp``,
``saveNcclMeta``; ``ProcessGroupNCCL::send``/``recv``):

* the header: ``distributedInfo`` (``backend`` ``nccl``, ``rank``, ``world_size``),
  ``hostname``, ``baseTimeNanoseconds`` 0;
* per step, a ``ProfilerStep#N`` CPU op;
* per send and per receive, a ``record_param_comms`` CPU op (``cat`` ``cpu_op``) whose
  ``args`` are ``Collective name`` (``send``/``recv``), ``In msg nelems``/``Out msg nelems``,
  ``dtype`` ``Float``, ``Group size``, ``Process Group Name`` ``"0"``, ``Process Group
  Description`` ``default_pg``, ``Process Group Ranks``, ``Rank`` (the peer's rank in the
  group, as PyTorch passes it for point-to-point), ``Seq`` (the group's collective sequence
  number + 1, as ``ProcessGroupNCCL`` passes it), ``External id``, and the peer: ``Dst Rank``
  on a send, ``Src Rank`` on a receive (left out with ``peer_fields=False``, as older
  PyTorch writes);
* its ``cudaLaunchKernel`` (``cat`` ``cuda_runtime``, ``correlation``, ``External id``);
* its kernel ``ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)`` (``cat``
  ``kernel``, ``correlation``, ``External id``, ``stream``: 20 for sends, 24 for receives,
  ``device``), with the same comms metadata in its ``args`` when ``kernel_meta`` (recent
  PyTorch) and none otherwise (it inherits the CPU op's by its external id);
* with ``allreduces``, per step an all-reduce within each host and one across the hosts
  (``record_param_comms`` and ``ncclDevKernel_AllReduce_*`` kernels, no peer), for the
  collectives' transfer phase per host set.

Timing: every rank posts its send and its receive near the step's start (a few microseconds
of launch jitter); a transfer starts when both its kernels have started and takes
``bytes / rate`` (rate ``intra_bw`` within a host, ``inter_bw`` between hosts, ``inter_bw /
slowdown`` on the slow direction ``slow``), times a lognormal jitter (``noise``); the send
kernel ends with the transfer, the receive kernel a little after. Every rank's clock is the
same (one timeline).

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:
...     truth = write_nccl_p2p_job(Path(d), slow=("hostA", "hostB"), steps=3)
...     names = sorted(p.name for p in Path(d).iterdir())
>>> names
['rank0.json', 'rank1.json', 'rank2.json', 'rank3.json']
>>> truth.transfers, truth.slow_path, truth.host_of_rank[2]
(12, 'hostA->hostB', 'hostB')
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

#: the kernel NCCL runs for point-to-point operations (2.19+)
SENDRECV_KERNEL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class NcclP2pTruth:
    """What was planted: the job's shape and the slow direction (None: healthy)."""

    world: int
    steps: int
    transfers: int  # sends written, each with its receive
    nbytes: int  # per transfer
    slow_path: str | None  # "hostA->hostB"
    host_of_rank: dict[int, str] = field(default_factory=dict)
    bytes_by_pair: dict[str, int] = field(default_factory=dict)  # "0->1" -> bytes sent


def _comms_args(
    *, op: str, peer: int, world: int, nelems: int, seq: int, peer_fields: bool
) -> dict[str, object]:
    """The comms metadata PyTorch writes for one send or receive."""
    args: dict[str, object] = {
        "Collective name": op,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "dtype": "Float",
        "Group size": world,
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": str(list(range(world))),
        "Rank": peer,
        "Seq": seq,
    }
    if peer_fields:
        args["Dst Rank" if op == "send" else "Src Rank"] = peer
    return args


@dataclass
class _RankEvents:
    """One rank's trace events being written, with its running ids."""

    rank: int
    events: list[dict[str, object]] = field(default_factory=list)
    next_id: int = 1

    def op(
        self,
        start_ns: int,
        end_ns: int,
        args: dict[str, object],
        *,
        stream: int,
        kernel_meta: bool,
        kernel: str = SENDRECV_KERNEL,
    ) -> None:
        """A comms CPU op, its launch and its kernel (the kernel from ``start_ns`` to
        ``end_ns``; the CPU op and launch a little before)."""
        ext = corr = self.next_id
        self.next_id += 1
        host_start = start_ns - 8_000
        self.events.append(_x("cpu_op", "record_param_comms", host_start, 6_000, 1,
                              {**args, "External id": ext}))  # fmt: skip
        self.events.append(_x("cuda_runtime", "cudaLaunchKernel", host_start + 1_000, 4_000, 1,
                              {"correlation": corr, "External id": ext}))  # fmt: skip
        kargs: dict[str, object] = {"correlation": corr, "External id": ext, "stream": stream,
                                    "device": self.rank % 2}  # fmt: skip
        if kernel_meta:
            kargs.update(args)
        self.events.append(_x("kernel", kernel, start_ns, end_ns - start_ns, 0, kargs))


def _x(
    cat: str, name: str, ts_ns: int, dur_ns: int, pid: int, args: dict[str, object]
) -> dict[str, object]:
    """A complete event (times in microseconds with three decimals)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 7 if pid else 20,
            "ts": round(ts_ns / 1000, 3), "dur": round(dur_ns / 1000, 3), "args": args}  # fmt: skip


def _allreduces(
    ranks: list[_RankEvents],
    hosts: dict[int, str],
    rng: random.Random,
    last_exit: dict[int, int],
    step: int,
    nbytes: int,
    intra_bw: float,
    inter_bw: float,
) -> None:
    """One step's all-reduces: within each host (groups ``"1"`` on ``hostA``, ``"3"`` on
    ``hostB``), then of every rank (group ``"2"``). A member arrives 5 ms (its compute) after
    its own previous exit (``last_exit``, updated), so a rank whose receive ended late arrives
    late, a victim; each all-reduce ends ``2(n-1)/n × bytes / rate`` after its last member
    arrived (the rate the network's when it crosses hosts)."""
    on_a = [r for r, h in hosts.items() if h == "hostA"]
    on_b = [r for r, h in hosts.items() if h == "hostB"]
    for group, members in (("1", on_a), ("3", on_b), ("2", sorted(hosts))):
        if len(members) < 2:
            continue
        n = len(members)
        crosses = len({hosts[r] for r in members}) > 1
        took = int(2 * (n - 1) / n * nbytes / (inter_bw if crosses else intra_bw) * 1e9)
        starts = {r: last_exit[r] + 5_000_000 + rng.randint(0, 20_000) for r in members}
        done = max(starts.values()) + took
        for r in members:
            args: dict[str, object] = {
                "Collective name": "allreduce", "In msg nelems": nbytes // 4,
                "Out msg nelems": nbytes // 4, "dtype": "Float", "Group size": n,
                "Process Group Name": group, "Process Group Ranks": str(members),
                "Rank": members.index(r), "Seq": step + 1,
            }  # fmt: skip
            last_exit[r] = done + rng.randint(0, 2_000)
            ranks[r].op(starts[r], last_exit[r], args, stream=7, kernel_meta=True,
                        kernel=ALLREDUCE_KERNEL)  # fmt: skip


@dataclass
class _Ring:
    """The ring's point-to-point transfers, written one step at a time."""

    ranks: list[_RankEvents]
    hosts: dict[int, str]
    rng: random.Random
    nbytes: int
    intra_bw: float
    inter_bw: float
    slow: tuple[str, str] | None
    slowdown: float
    noise: float
    peer_fields: bool
    kernel_meta: bool
    by_pair: dict[str, int] = field(default_factory=dict)  # "0->1" -> bytes sent

    def step(self, k: int, t0: int) -> dict[int, int]:
        """Step ``k``'s sends (rank r to r + 1) and receives from ``t0``; returns each rank's
        last exit (its last kernel's end)."""
        world = len(self.ranks)
        last_exit = dict.fromkeys(range(world), t0)
        for src in range(world):
            dst = (src + 1) % world
            if dst == src:
                continue
            ha, hb = self.hosts[src], self.hosts[dst]
            rate = self.intra_bw if ha == hb else self.inter_bw
            if self.slow is not None and (ha, hb) == self.slow:
                rate /= self.slowdown
            s0 = t0 + self.rng.randint(0, 20_000)
            r0 = t0 + self.rng.randint(0, 20_000)
            took = int(self.nbytes / rate * 1e9 * self.rng.lognormvariate(0.0, self.noise))
            done = max(s0, r0) + took
            send, recv = (
                _comms_args(op=op, peer=peer, world=world, nelems=self.nbytes // 4, seq=k + 1,
                            peer_fields=self.peer_fields)
                for op, peer in (("send", dst), ("recv", src))
            )  # fmt: skip
            self.ranks[src].op(s0, done, send, stream=20, kernel_meta=self.kernel_meta)
            self.ranks[dst].op(r0, done + 2_000, recv, stream=24, kernel_meta=self.kernel_meta)
            last_exit[src] = max(last_exit[src], done)
            last_exit[dst] = max(last_exit[dst], done + 2_000)
            self.by_pair[f"{src}->{dst}"] = self.by_pair.get(f"{src}->{dst}", 0) + self.nbytes
        return last_exit


def write_nccl_p2p_job(
    out: Path,
    *,
    world: int = 4,
    steps: int = 12,
    nbytes: int = 4 << 20,
    intra_bw: float = 50e9,
    inter_bw: float = 12.5e9,
    slow: tuple[str, str] | None = None,
    slowdown: float = 8.0,
    noise: float = 0.1,
    peer_fields: bool = True,
    kernel_meta: bool = True,
    allreduces: bool = False,
    seed: int = 0,
) -> NcclP2pTruth:
    """Write ``rank{r}.json`` for each rank of the ring job into ``out`` (module docstring).

    Args:
        out: an existing folder.
        world: ranks (2-4; the first half on ``hostA``, the rest on ``hostB``).
        steps: profiler steps, one ring pass each.
        nbytes: bytes per message.
        intra_bw: bytes/s within a host.
        inter_bw: bytes/s between hosts.
        slow: the slow direction ``(source host, destination host)``, or None.
        slowdown: how many times slower the slow direction is.
        noise: sigma of the lognormal jitter of each transfer's time.
        peer_fields: write ``Dst Rank``/``Src Rank``.
        kernel_meta: write the comms metadata on the kernels too.
        allreduces: also, each step, an all-reduce of ``nbytes`` within each host (process
            groups ``"1"`` and ``"3"``) and one of every rank (group ``"2"``, across them).
        seed: the jitter's seed.

    Returns:
        :class:`NcclP2pTruth`.
    """
    rng = random.Random(seed)
    hosts = {r: "hostA" if r < (world + 1) // 2 else "hostB" for r in range(world)}
    ranks = [_RankEvents(r) for r in range(world)]
    ring = _Ring(ranks, hosts, rng, nbytes=nbytes, intra_bw=intra_bw, inter_bw=inter_bw,
                 slow=slow, slowdown=slowdown, noise=noise, peer_fields=peer_fields,
                 kernel_meta=kernel_meta)  # fmt: skip
    step_ns = 50_000_000
    for k in range(steps):
        t0 = 1_000_000 + k * step_ns
        for r in ranks:
            r.events.append(_x("user_annotation", f"ProfilerStep#{k}", t0 - 50_000,
                               step_ns - 100_000, 1, {}))  # fmt: skip
        last_exit = ring.step(k, t0)
        if allreduces:
            _allreduces(ranks, hosts, rng, last_exit, k, nbytes, intra_bw, inter_bw)
    by_pair = ring.by_pair
    for r in ranks:
        doc = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": r.rank, "world_size": world},
            "hostname": hosts[r.rank],
            "baseTimeNanoseconds": 0,
            "traceEvents": r.events,
        }
        (out / f"rank{r.rank}.json").write_text(json.dumps(doc))
    return NcclP2pTruth(
        world=world,
        steps=steps,
        transfers=sum(by_pair.values()) // nbytes,
        nbytes=nbytes,
        slow_path=None if slow is None else f"{slow[0]}->{slow[1]}",
        host_of_rank=hosts,
        bytes_by_pair=by_pair,
    )
