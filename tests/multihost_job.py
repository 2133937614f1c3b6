"""A real two-host torch.distributed gloo job with known faults (multi-host truth-harness helper).

Not a test. :func:`record_runs` emulates two hosts on this machine and runs a 4-rank gloo
job across them, two ranks per host:

* **hosts** are network namespaces (``ip netns``), one per host, joined by a veth pair whose
  two ends carry the only addresses of a small test subnet (:data:`ADDRESSES`); every rank
  process runs in its host's namespace and in a UTS namespace of its own whose host name is
  the host's (:data:`HOSTS`), so the profiler's file names and otel-ext's ``accel.host.id``
  name the emulated host. ``MASTER_ADDR`` is host A's veth address, ``GLOO_SOCKET_IFNAME``
  the veth end in each namespace: every byte between the hosts crosses the veth, bytes
  within a host stay on its loopback.
* **a slow link** is a token-bucket filter (``tc qdisc ... tbf``; ``netem`` is not on every
  kernel) on both veth ends at the run's rate.
* **clocks**: every rank runs under libfaketime (``LD_PRELOAD``, Debian ``faketime``) with
  ``FAKETIME_DONT_FAKE_MONOTONIC=1``: only the real-time clock is shifted, host A's by 0,
  host B's by the run's offset. Both recordings are real-time based: ``torch.profiler``'s
  Kineto timestamps are Unix-epoch microseconds (its approximate clock is converted to
  ``CLOCK_REALTIME``), otel-ext's span times are ``time.time_ns()``. Host B's ranks
  wait before each run until their real-time clock has moved against the (unfaked) monotonic
  one by exactly the change of offset (within 0.5 ms), and check the shift against the
  kernel's own file times (:func:`_clock_shift_ms`, within a tick).
* **processes are reused**: one launch records several runs one after the other; before each,
  the first rank of each host sets its veth's qdisc and host B's writes the new offset into
  the file libfaketime reads (``FAKETIME_TIMESTAMP_FILE``, re-read each second).

One step of a run: ``matmuls`` square matmuls (a layer the layer instrumentor traces) then
an ``all_reduce``; a ring of ``p2p_bytes`` point-to-point transfers (``isend`` to rank+1,
``irecv`` from rank-1: 1→2 and 3→0 cross the hosts); ``matmuls`` more, then an
``all_gather``. A slow-rank run gives one rank ``extra`` more matmuls before each
all-reduce. Each run is recorded twice, in one folder::

    RUN/truth.json            the ground truth (the analysis never reads it)
    RUN/kineto/HOST_PID.*.pt.trace.json   torch.profiler, one per rank (ProfilerStep#N)
    RUN/spans/rankR/traces.jsonl          otel-ext: configure() with the file exporter,
                                          TorchDistributedInstrumentor, TorchLayerInstrumentor

:func:`visibility` reads both back with the standard library only (no otel-ext) and says
whether the injected fault shows in the raw data, so that a wrong verdict is the analysis'
fault and not the data's.

>>> run = MultiHostRun.draw("slow-link", 7)
>>> run.kind, run.slow_rank, 80 <= run.link_mbit <= 200, 20 <= abs(run.offset_ms) <= 80
('slow-link', None, True, True)
>>> host_of(1), host_of(2), [cross_host(r) for r in range(WORLD)]
('hostA', 'hostB', [True, False, True, False])
>>> MultiHostRun(name="x", kind="nap")
Traceback (most recent call last):
...
ValueError: MultiHostRun 'x': kind must be one of healthy, slow-rank, slow-link, not 'nap'
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = [
    "ADDRESSES",
    "CLOCK_TOLERANCE_MS",
    "HOSTS",
    "KINDS",
    "WORLD",
    "JobError",
    "MultiHostRun",
    "TwoHostNetwork",
    "cross_host",
    "exit_gap_ms",
    "host_of",
    "kineto_arrivals",
    "kineto_files",
    "libfaketime_path",
    "missing_parts",
    "record_runs",
    "span_files",
    "span_records",
    "visibility",
]

KINDS = ("healthy", "slow-rank", "slow-link")
WORLD = 4
RANKS_PER_HOST = 2
HOSTS = ("hostA", "hostB")
#: the veth ends' addresses (a /30 of their own, inside the two namespaces only)
ADDRESSES = ("10.213.7.1", "10.213.7.2")
PREFIX = 30
MASTER_PORT = 29500  # free by construction: nothing else listens in a fresh namespace
NS_PREFIX = "otelmh"  # namespaces otelmh<PID>a / otelmh<PID>b, veths omh<PID>a / omh<PID>b
LIBFAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
CLOCK_TOLERANCE_MS = 12.0  # the kernel's file times are coarse (a tick), writes can lag


class JobError(RuntimeError):
    """The job did not finish: a rank failed, timed out, or a run's files are missing."""


def host_of(rank: int) -> str:
    """The emulated host of ``rank`` (two ranks per host, in rank order)."""
    return HOSTS[rank // RANKS_PER_HOST]


def cross_host(rank: int) -> bool:
    """Whether ``rank`` receives its ring transfer from the other host (from ``rank - 1``)."""
    return host_of(rank) != host_of((rank - 1) % WORLD)


@dataclass(frozen=True)
class MultiHostRun:
    """One recorded run of the two-host job and its ground truth.

    Attributes:
        name: the run's folder name.
        kind: ``healthy``, ``slow-rank`` or ``slow-link``.
        seed: the seed the run was drawn from (:meth:`draw`); seeds the tensors too.
        slow_rank: the rank doing ``extra`` more matmuls before each all-reduce (slow-rank).
        extra: the slow rank's extra matmuls (the fault's magnitude).
        link_mbit: the veth's token-bucket rate in Mbit/s, both ways (slow-link), else None
            (no qdisc: the veth runs at memory speed).
        offset_ms: host B's real-time clock minus host A's, in milliseconds.
        steps: profiled steps (one warm-up step before them is not recorded).
        matmuls: matmuls every rank does before each all-reduce and before each all-gather.
        size: the matmuls' square size.
        elements: float32 elements per rank in the all-reduce and all-gather.
        p2p_bytes: bytes each rank sends to the next in the ring each step.
    """

    name: str
    kind: str = "healthy"
    seed: int = 0
    slow_rank: int | None = None
    extra: int = 0
    link_mbit: float | None = None
    offset_ms: float = 0.0
    steps: int = 8
    matmuls: int = 2
    size: int = 256
    elements: int = 1024
    p2p_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"MultiHostRun {self.name!r}: kind must be one of {', '.join(KINDS)}, "
                f"not {self.kind!r}"
            )
        if (self.kind == "slow-rank") != (self.slow_rank is not None and self.extra > 0):
            raise ValueError(
                f"MultiHostRun {self.name!r}: a slow rank and extra matmuls go with slow-rank only"
            )
        if self.slow_rank is not None and not 0 <= self.slow_rank < WORLD:
            raise ValueError(f"MultiHostRun {self.name!r}: slow_rank outside 0..{WORLD - 1}")
        if (self.kind == "slow-link") != (self.link_mbit is not None):
            raise ValueError(f"MultiHostRun {self.name!r}: a link rate goes with slow-link only")
        if self.link_mbit is not None and not self.link_mbit > 0:
            raise ValueError(f"MultiHostRun {self.name!r}: link_mbit must be > 0")
        if self.steps < 2 or self.matmuls < 0 or self.p2p_bytes % 4:
            raise ValueError(
                f"MultiHostRun {self.name!r}: steps >= 2, matmuls >= 0, p2p_bytes a multiple of 4"
            )

    @classmethod
    def draw(cls, kind: str, seed: int, *, name: str | None = None, steps: int = 8) -> MultiHostRun:
        """A run of ``kind`` with its random parts drawn from ``seed``.

        Host B's offset: ±20–80 ms (every kind); slow-rank: a random rank, 60–140 extra
        256x256 matmuls before each all-reduce; slow-link: 80–200 Mbit/s.

        >>> MultiHostRun.draw("slow-rank", 3) == MultiHostRun.draw("slow-rank", 3)
        True
        >>> MultiHostRun.draw("healthy", 3).name
        'healthy-s3'
        """
        rng = random.Random(f"{kind}/{seed}")
        offset = rng.choice((-1.0, 1.0)) * round(rng.uniform(20.0, 80.0), 3)
        slow_rank, extra, link = None, 0, None
        if kind == "slow-rank":
            slow_rank, extra = rng.randrange(WORLD), rng.randint(60, 140)
        elif kind == "slow-link":
            link = round(rng.uniform(80.0, 200.0), 1)
        return cls(
            name=name or f"{kind}-s{seed}",
            kind=kind,
            seed=seed,
            slow_rank=slow_rank,
            extra=extra,
            link_mbit=link,
            offset_ms=offset,
            steps=steps,
        )

    def truth(self) -> dict[str, Any]:
        """The ground truth written to ``truth.json`` (the analysis never reads it).

        >>> t = MultiHostRun.draw("slow-link", 1).truth()
        >>> t["kind"], t["slow_link"]["hosts"], t["hosts"]["2"]
        ('slow-link', ['hostA', 'hostB'], 'hostB')
        """
        return {
            "harness": "tests/multihost_job.py",
            "kind": self.kind,
            "seed": self.seed,
            "slow_rank": self.slow_rank,
            "magnitude": (
                {"extra_matmuls": self.extra, "matmul_size": self.size, "before": "all_reduce"}
                if self.kind == "slow-rank"
                else None
            ),
            "slow_link": (
                {
                    "rate_mbit": self.link_mbit,
                    "hosts": list(HOSTS),
                    "rank_pairs": [[(r - 1) % WORLD, r] for r in range(WORLD) if cross_host(r)],
                }
                if self.kind == "slow-link"
                else None
            ),
            "clock_offsets_ms": {HOSTS[0]: 0.0, HOSTS[1]: self.offset_ms},
            "reference_host": HOSTS[0],
            "hosts": {str(r): host_of(r) for r in range(WORLD)},
            "addresses": dict(zip(HOSTS, ADDRESSES)),
            "spec": asdict(self),
        }


# --------------------------------------------------------------------------- environment


def libfaketime_path() -> str | None:
    """The libfaketime shared object to preload, or None when it is not installed."""
    for candidate in LIBFAKETIME_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    return None


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise JobError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def missing_parts() -> list[str]:
    """What this machine lacks to emulate the hosts (empty when everything is there).

    Needs root, ``ip``, ``tc``, ``unshare`` and ``hostname`` executables, libfaketime, and a
    kernel that lets a network namespace be made (tried with a probe namespace, removed).
    """
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    for exe in ("ip", "tc", "unshare", "hostname"):
        if shutil.which(exe) is None:
            missing.append(f"executable {exe!r}")
    if libfaketime_path() is None:
        missing.append("libfaketime (Debian package faketime)")
    if not missing:
        probe = f"{NS_PREFIX}{os.getpid()}probe"
        made = _run(["ip", "netns", "add", probe], check=False)
        if made.returncode != 0:
            missing.append(f"network namespaces: {made.stderr.strip()}")
        else:
            _run(["ip", "netns", "del", probe], check=False)
    return missing


def _remove_stale_namespaces() -> None:
    """Delete this harness's namespaces left by processes that no longer exist."""
    listed = _run(["ip", "netns", "list"], check=False).stdout
    for line in listed.splitlines():
        m = re.match(rf"({NS_PREFIX}(\d+)[a-z]+)\b", line.strip())
        if m and not Path(f"/proc/{m.group(2)}").exists():
            _run(["ip", "netns", "del", m.group(1)], check=False)


class TwoHostNetwork:
    """Two network namespaces joined by a veth pair; removed on exit, whatever happened.

    Names carry this process' id (two harnesses can run at once). Use as a context manager:
    the namespaces (and with them the veth ends) are deleted on exit, even when setting
    them up failed half-way.
    """

    def __init__(self) -> None:
        pid = os.getpid()
        self.namespaces = (f"{NS_PREFIX}{pid}a", f"{NS_PREFIX}{pid}b")
        self.interfaces = (f"omh{pid}a", f"omh{pid}b")

    def __enter__(self) -> TwoHostNetwork:
        _remove_stale_namespaces()
        try:
            self._create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _create(self) -> None:
        a, b = self.namespaces
        va, vb = self.interfaces
        for ns in self.namespaces:
            _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", va, "type", "veth", "peer", "name", vb])
        for ns, veth, addr in zip((a, b), (va, vb), ADDRESSES):
            _run(["ip", "link", "set", veth, "netns", ns])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", veth])
            _run(["ip", "-n", ns, "link", "set", veth, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def remove(self) -> None:
        """Delete both namespaces (their veth ends go with them); missing ones are fine."""
        for ns in self.namespaces:
            _run(["ip", "netns", "del", ns], check=False)
        # the veth may still be in the root namespace when moving it failed
        _run(["ip", "link", "del", self.interfaces[0]], check=False)


# --------------------------------------------------------------------------- launching


def record_runs(
    root: Path,
    runs: Sequence[MultiHostRun],
    *,
    timeout_s: float = 300.0,
) -> dict[str, Path]:
    """Record ``runs`` in one launch of the two-host job; return ``{run.name: folder}``.

    Args:
        root: folder that receives one sub-folder per run (``root / run.name``).
        runs: the runs, in order; names must be distinct.
        timeout_s: the whole launch's limit; past it every rank is killed.

    Returns:
        Each run's folder: ``truth.json``, ``kineto/`` (one trace per rank) and ``spans/``
        (one ``rankR/traces.jsonl`` per rank).

    Raises:
        JobError: the machine cannot emulate the hosts (:func:`missing_parts`), a rank
            failed or timed out (the message carries the ranks' stderr tails), or a run's
            folder lacks a rank's file.
        ValueError: duplicate run names.
    """
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be distinct: {names}")
    missing = missing_parts()
    if missing:
        raise JobError("cannot emulate two hosts here: " + "; ".join(missing))
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    for run in runs:
        folder = root / run.name
        if folder.exists():
            shutil.rmtree(folder)
        (folder / "kineto").mkdir(parents=True)
        (folder / "spans").mkdir()
    with TwoHostNetwork() as net:
        _launch(root, runs, net, timeout_s=timeout_s)
    out = {}
    for run in runs:
        folder = root / run.name
        truth = run.truth()
        truth["measured"] = _measurements(folder)
        (folder / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        shutil.rmtree(folder / ".meta", ignore_errors=True)
        found = len(kineto_files(folder))
        lacking = [] if found == WORLD else [f"{found} Kineto files (expected {WORLD})"]
        lacking += [f"spans of rank {r}" for r in range(WORLD) if not span_files(folder, r)]
        if lacking:
            raise JobError(f"run {run.name!r} in {folder}: " + ", ".join(lacking))
        out[run.name] = folder
    return out


def _measurements(folder: Path) -> dict[str, Any]:
    """What the ranks measured during the run (their host name, the clock shift they saw)."""
    out = {}
    for path in sorted((folder / ".meta").glob("rank*.json")):
        meta = json.loads(path.read_text())
        out[str(meta["rank"])] = meta
    return out


def _launch(
    root: Path, runs: Sequence[MultiHostRun], net: TwoHostNetwork, *, timeout_s: float
) -> None:
    faketime = libfaketime_path()
    assert faketime is not None  # missing_parts() checked it
    clock_dir = root / ".clock"
    clock_dir.mkdir(exist_ok=True)
    clock_file = clock_dir / f"{net.namespaces[1]}.faketime"
    clock_file.write_text(_faketime_spec(runs[0].offset_ms))
    log_dir = root / ".logs" / net.namespaces[0].removesuffix("a")
    log_dir.mkdir(parents=True, exist_ok=True)
    spec_json = json.dumps([asdict(r) for r in runs])
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for rank in range(WORLD):
            h = rank // RANKS_PER_HOST
            env = dict(
                os.environ,
                OMP_NUM_THREADS="1",
                MKL_NUM_THREADS="1",
                RANK=str(rank),
                WORLD_SIZE=str(WORLD),
                LOCAL_RANK=str(rank % RANKS_PER_HOST),
                MASTER_ADDR=ADDRESSES[0],
                MASTER_PORT=str(MASTER_PORT),
                GLOO_SOCKET_IFNAME=net.interfaces[h],
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                NO_FAKE_STAT="1",  # file times stay the kernel's: the shift is measured on them
                OTEL_EXT_ACTIVE_SPANS="false",
            )
            env.pop("FAKETIME", None)
            env.pop("FAKETIME_TIMESTAMP_FILE", None)
            if h == 0:
                env["FAKETIME"] = "+0"  # host A: the reference clock, same preload cost
            else:
                env["FAKETIME_TIMESTAMP_FILE"] = str(clock_file)
                env["FAKETIME_CACHE_DURATION"] = "1"
            cmd = ["ip", "netns", "exec", net.namespaces[h], "unshare", "--uts", "--"]
            cmd += ["sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh", HOSTS[h]]
            cmd += ["env", f"LD_PRELOAD={faketime}", sys.executable, __file__]
            cmd += ["--rank", str(rank), "--iface", net.interfaces[h], "--root", str(root)]
            cmd += ["--clock-file", str(clock_file), "--runs", spec_json]
            log = log_dir / f"rank{rank}.stderr"
            with log.open("wb") as err:
                proc = subprocess.Popen(
                    cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True
                )
            procs.append((proc, log))
        deadline = time.monotonic() + timeout_s
        timed_out = False

        def exits() -> list[str]:
            return [
                f"rank {rank}: exit {proc.returncode}"
                for rank, (proc, _) in enumerate(procs)
                if proc.poll() not in (None, 0)
            ]

        # the first rank to fail ends the launch (the others would wait in gloo for it)
        while any(proc.poll() is None for proc, _ in procs) and not exits():
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.2)
        failed = exits() + ([f"timed out after {timeout_s:.0f} s"] if timed_out else [])
        if failed:
            _stop(procs)
            tails = []
            for rank, (_, log) in enumerate(procs):
                text = log.read_text(errors="replace").strip().splitlines()[-10:]
                tails.append(f"--- rank {rank} stderr ---\n" + "\n".join(text))
            raise JobError("two-host job failed: " + "; ".join(failed) + "\n" + "\n".join(tails))
    finally:
        _stop(procs)


def _stop(procs: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """Kill what is left of the launch (each rank's own process group), and reap it."""
    for proc, _ in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _faketime_spec(offset_ms: float) -> str:
    """libfaketime's relative offset in seconds.

    >>> _faketime_spec(-37.5), _faketime_spec(20)
    ('-0.037500\\n', '+0.020000\\n')
    """
    return f"{offset_ms / 1000:+.6f}\n"


# --------------------------------------------------------------------------- reading back


def kineto_files(folder: Path) -> list[Path]:
    """A run's Kineto files (``kineto/*.pt.trace.json``), sorted by name."""
    return sorted((Path(folder) / "kineto").glob("*.pt.trace.json"))


def span_files(folder: Path, rank: int | None = None) -> list[Path]:
    """A run's otel-ext span files (all ranks, or one rank's), sorted."""
    spans = Path(folder) / "spans"
    pattern = "rank*/traces*.jsonl" if rank is None else f"rank{rank}/traces*.jsonl"
    return sorted(spans.glob(pattern))


def _kineto_rank(trace: dict[str, Any]) -> int:
    return int(trace["distributedInfo"]["rank"])


def kineto_arrivals(folder: Path, offsets_ms: dict[str, float]) -> dict[int, dict[str, Any]]:
    """Per rank, from its Kineto file: host (file name), collective calls and receive times.

    Times are moved onto the reference host's clock by the *known* offsets (ground truth:
    this reads the data to check the harness, not to test an estimate).

    Returns:
        ``{rank: {"host", "calls": [(c10d op, start µs)], "recv_us": [duration µs]}}``:
        the ``c10d::*`` CPU ops on the rank's calling thread in start order, and the
        duration of each ring receive, from the ``irecv`` call to the end of the wait
        (``recv_us``; in gloo's CPU traces a receive's data arrive inside ``wait``).
    """
    out: dict[int, dict[str, Any]] = {}
    for path in kineto_files(folder):
        trace = json.loads(path.read_text())
        host = path.name.split("_")[0]
        shift = offsets_ms.get(host, 0.0) * 1000.0
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        calls = sorted(
            (str(e["name"]), float(e["ts"]) - shift)
            for e in events
            if e.get("cat") == "cpu_op" and str(e["name"]).startswith("c10d::")
        )
        calls.sort(key=lambda c: c[1])
        recvs = sorted(
            (
                float(e["ts"])
                for e in events
                if e.get("cat") == "cpu_op" and e["name"] == "c10d::recv_"
            ),
        )
        waits = sorted(
            (float(e["ts"]) + float(e["dur"]) for e in events if e["name"] == "ring_wait"),
        )
        out[_kineto_rank(trace)] = {
            "host": host,
            "calls": calls,
            "recv_us": [end - start for start, end in zip(recvs, waits)],
        }
    return out


def span_records(folder: Path, rank: int) -> list[dict[str, Any]]:
    """One rank's spans from its OTLP-JSON lines: name, times (ns), attributes, resource."""
    out = []
    for path in span_files(folder, rank):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for rs in json.loads(line).get("resourceSpans", []):
                resource = _attributes(rs.get("resource", {}).get("attributes", []))
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        out.append(
                            {
                                "name": span["name"],
                                "start": int(span["startTimeUnixNano"]),
                                "end": int(span["endTimeUnixNano"]),
                                "attributes": _attributes(span.get("attributes", [])),
                                "resource": resource,
                            }
                        )
    return sorted(out, key=lambda s: s["start"])


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        value = item.get("value", {})
        for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if key in value:
                v = value[key]
                out[item["key"]] = int(v) if key == "intValue" else v
    return out


def exit_gap_ms(folder: Path, recording: str) -> float:
    """Median over the all-reduces of host B's mean exit minus host A's, raw clocks, in ms.

    Members of a collective leave it within a few milliseconds of each other, so on raw
    times this is host B's clock offset plus that spread: the shift shows in the data when
    it is near the true offset. Kineto: the end of each ``gloo:all_reduce`` run on the
    rank's gloo thread; spans: the end of each ``all_reduce`` collective span.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for rank, host, end in ((0, "hostA", 10), (2, "hostB", 40)):
    ...         p = Path(tmp) / "kineto" / f"{host}_{rank}.1.pt.trace.json"
    ...         p.parent.mkdir(exist_ok=True)
    ...         ev = [{"ph": "X", "name": "gloo:all_reduce", "ts": end * 1e3 - 5, "dur": 5}]
    ...         _ = p.write_text(json.dumps({"distributedInfo": {"rank": rank},
    ...                                      "traceEvents": ev}))
    ...     exit_gap_ms(Path(tmp), "kineto")
    30.0
    """
    exits: dict[str, list[list[float]]] = {h: [] for h in HOSTS}
    if recording == "kineto":
        for path in kineto_files(folder):
            trace = json.loads(path.read_text())
            ends = sorted(
                (float(e["ts"]) + float(e["dur"])) / 1e3
                for e in trace["traceEvents"]
                if e.get("ph") == "X" and e.get("name") == "gloo:all_reduce"
            )
            exits[host_of(_kineto_rank(trace))].append(ends)
    else:
        for rank in range(WORLD):
            ends = [
                s["end"] / 1e6
                for s in span_records(folder, rank)
                if s["attributes"].get("accel.collective.op") == "all_reduce"
            ]
            exits[host_of(rank)].append(ends)
    n = min(len(e) for per_host in exits.values() for e in per_host)
    return statistics.median(
        statistics.fmean(e[k] for e in exits[HOSTS[1]])
        - statistics.fmean(e[k] for e in exits[HOSTS[0]])
        for k in range(n)
    )


def _lateness(arrivals: dict[int, list[float]]) -> tuple[list[int], dict[int, float]]:
    """Per instance the last rank, and per rank its mean lateness (own arrival − earliest).

    >>> _lateness({0: [1.0, 5.0], 1: [3.0, 4.0]})
    ([1, 0], {0: 0.5, 1: 1.0})
    """
    ranks = sorted(arrivals)
    n = min(len(v) for v in arrivals.values())
    last = [max(ranks, key=lambda r: arrivals[r][k]) for k in range(n)]
    late = {
        r: statistics.fmean(arrivals[r][k] - min(arrivals[q][k] for q in ranks) for k in range(n))
        for r in ranks
    }
    return last, late


def visibility(folder: Path) -> dict[str, Any]:
    """Whether the run's injected fault shows in its raw data (standard library only).

    From the truth file and both recordings: the all-reduce arrivals per rank (on host A's
    clock by the known offset), the last rank at each all-reduce and each rank's mean
    lateness there; the ring receives' durations, cross-host against within a host.

    Returns:
        ``{"kineto": {...}, "spans": {...}, "visible": bool, "why": str}``: a slow-rank run
        is visible when, in both recordings, the slow rank is last at half the all-reduces
        or more, at more of them than any other rank, and its mean lateness (arrival minus
        the earliest arrival) is at least twice any other rank's; a slow-link
        run when, in both, the slowest cross-host receive median is at least 5 times the
        slowest within-host one; a healthy run always (nothing to show).
    """
    truth = json.loads((Path(folder) / "truth.json").read_text())
    offsets = {h: float(v) for h, v in truth["clock_offsets_ms"].items()}
    kin = kineto_arrivals(folder, offsets)
    views: dict[str, dict[str, Any]] = {}
    views["kineto"] = _view(
        {r: [t for name, t in v["calls"] if name == "c10d::allreduce_"] for r, v in kin.items()},
        {r: v["recv_us"] for r, v in kin.items()},
        unit=1e3,
    )
    span_arr: dict[int, list[float]] = {}
    span_recv: dict[int, list[float]] = {}
    for rank in range(WORLD):
        spans = span_records(folder, rank)
        host = spans[0]["resource"].get("accel.host.id", "") if spans else ""
        shift = offsets.get(str(host), 0.0) * 1e6
        colls = [s for s in spans if "accel.collective.op" in s["attributes"]]
        span_arr[rank] = [
            s["start"] - shift
            for s in colls
            if s["attributes"]["accel.collective.op"] == "all_reduce"
        ]
        span_recv[rank] = [
            float(s["end"] - s["start"])
            for s in colls
            if s["attributes"]["accel.collective.op"] == "recv"
        ]
    views["spans"] = _view(span_arr, span_recv, unit=1e6)
    kind = truth["kind"]
    why = []
    for name, v in views.items():
        if kind == "slow-rank":
            r = int(truth["slow_rank"])
            counts = {q: v["last"].count(q) for q in range(WORLD)}
            others = max(v["lateness_ms"][q] for q in v["lateness_ms"] if q != r)
            most = counts[r] * 2 >= len(v["last"]) and all(
                counts[r] > c for q, c in counts.items() if q != r
            )
            if not (most and v["lateness_ms"][r] >= 2 * others):
                why.append(
                    f"{name}: slow rank {r} last at {counts[r]} of {len(v['last'])} "
                    f"all-reduces (others: {max(c for q, c in counts.items() if q != r)} at "
                    f"most), mean lateness {v['lateness_ms'][r]:.2f} ms vs others' max "
                    f"{others:.2f}"
                )
        elif kind == "slow-link" and v["recv_ratio"] < 5:
            why.append(
                f"{name}: cross-host receives only {v['recv_ratio']:.1f}x the within-host ones"
            )
    return {**views, "visible": not why, "why": "; ".join(why)}


def _view(
    arrivals: dict[int, list[float]], recv: dict[int, list[float]], *, unit: float
) -> dict[str, Any]:
    last, late = _lateness(arrivals)
    median = {r: statistics.median(v) / unit if v else float("nan") for r, v in recv.items()}
    cross = max(median[r] for r in median if cross_host(r))
    within = max(median[r] for r in median if not cross_host(r))
    return {
        "allreduces": min(len(v) for v in arrivals.values()),
        "last": last,
        "lateness_ms": {r: v / unit for r, v in late.items()},
        "recv_median_ms": median,
        "recv_ratio": cross / within if within > 0 else float("inf"),
    }


# --------------------------------------------------------------------------- rank process


def _relative_sleep(seconds: float) -> None:
    """``time.sleep`` without an absolute monotonic deadline.

    libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` turns the absolute
    ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` that Python 3.11's ``time.sleep``
    uses into an invalid request (EINVAL; wolfcw/libfaketime issue 426); ``select`` with a
    relative timeout is not rewritten. Installed in the rank processes only.
    """
    import select

    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while True:
        select.select((), (), (), max(0.0, deadline - time.monotonic()))
        if time.monotonic() >= deadline:
            return


def _clock_shift_ms(probe: Path) -> float:
    """This process' real-time clock minus the kernel's, in ms (coarse: one tick).

    A file's modification time is stamped by the kernel (libfaketime leaves it alone under
    ``NO_FAKE_STAT=1``); the gap between the clock read just before writing the
    file and the file's time, median of a few tries, is the shift, within a tick.
    """
    gaps = []
    for _ in range(5):
        before = time.time_ns()
        probe.write_bytes(b"")
        gaps.append((before - probe.stat().st_mtime_ns) / 1e6)
    return statistics.median(gaps)


def _set_link(iface: str, rate_mbit: float | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if rate_mbit is None:
        subprocess.run(["tc", "qdisc", "del", "dev", iface, "root"], env=env, capture_output=True)
        return
    cmd = ["tc", "qdisc", "replace", "dev", iface, "root", "tbf", "rate", f"{rate_mbit}mbit"]
    cmd += ["burst", "64kb", "latency", "200ms"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise JobError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def _log(rank: int, what: str) -> None:
    """One line on the rank's stderr (the launch keeps it in ``ROOT/.logs``)."""
    print(f"multihost_job rank {rank} {time.monotonic():.3f}: {what}", file=sys.stderr, flush=True)


def _store_barrier(store: Any, key: str, rank: int) -> None:
    """Every rank reaches ``key`` before any goes on (no c10d op: nothing records it)."""
    store.set(f"{key}/{rank}", b"1")
    store.wait([f"{key}/{r}" for r in range(WORLD)])


def _realtime_minus_monotonic_ns() -> int:
    """``CLOCK_REALTIME`` minus ``CLOCK_MONOTONIC`` as this process reads them (the pair read
    closest together of a few)."""
    best = None
    for _ in range(20):
        m0 = time.monotonic_ns()
        r = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, r - (m0 + m1) // 2)
    assert best is not None
    return best[1]


def _run_one(
    rank: int,
    root: Path,
    spec: dict[str, Any],
    clock_file: Path,
    iface: str,
    store: Any,
    *,
    previous_ms: float,
) -> float:
    """Record one run; return the clock offset this rank's process now has (ms)."""
    import socket

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.profiler import (
        ProfilerActivity,
        profile,
        record_function,
        schedule,
        tensorboard_trace_handler,
    )

    import otel_ext
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor, TorchLayerInstrumentor

    run = MultiHostRun(**spec)
    folder = root / run.name
    _log(rank, f"run {run.name}: setting up")
    local = rank % RANKS_PER_HOST
    on_b = host_of(rank) == HOSTS[1]
    expected = run.offset_ms if on_b else 0.0
    # real time minus monotonic time moves by exactly the change of the offset (libfaketime
    # leaves the monotonic clock alone): measured before anyone writes the new offset
    before = _realtime_minus_monotonic_ns()
    dist.barrier()
    # the host's part of the run's setup: its veth end's qdisc, host B's clock
    if local == 0:
        _set_link(iface, run.link_mbit)
        if on_b:
            clock_file.write_text(_faketime_spec(run.offset_ms))
    change_ms = expected - previous_ms
    deadline = time.monotonic() + 6.0
    moved_ms = (_realtime_minus_monotonic_ns() - before) / 1e6
    while abs(moved_ms - change_ms) > 0.5:
        if time.monotonic() > deadline:
            raise JobError(
                f"rank {rank} on {socket.gethostname()}: real-time clock moved by "
                f"{moved_ms:.3f} ms, expected {change_ms:.3f} ms (libfaketime not re-reading "
                f"{clock_file}?)"
            )
        time.sleep(0.05)
        moved_ms = (_realtime_minus_monotonic_ns() - before) / 1e6
    # and against the kernel's own clock (coarse): the shift is there at all
    meta_dir = folder / ".meta"
    meta_dir.mkdir(exist_ok=True)
    probe = meta_dir / f"clock-probe-{rank}"
    shift = _clock_shift_ms(probe)
    probe.unlink()
    if abs(shift - expected) > CLOCK_TOLERANCE_MS:
        raise JobError(
            f"rank {rank} on {socket.gethostname()}: real-time clock shifted by "
            f"{shift:.1f} ms against the kernel's file times, expected {expected:.1f} ms "
            f"(libfaketime not in effect?)"
        )
    _log(rank, f"clock shift {shift:.3f} ms (expected {expected:.3f}, moved {moved_ms:.3f})")
    (meta_dir / f"rank{rank}.json").write_text(
        json.dumps({"rank": rank, "host": socket.gethostname(), "clock_shift_ms": shift})
    )
    dist.barrier()

    class MatmulBlock(nn.Module):
        """``count`` rounds of ``tanh(x @ w)``: the compute a rank does between exchanges."""

        def __init__(self, size: int) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(size, size) / size**0.5, requires_grad=False)

        def forward(self, x: torch.Tensor, count: int) -> torch.Tensor:
            for _ in range(count):
                x = torch.tanh(x @ self.w)
            return x

    torch.manual_seed(run.seed * 1000 + rank)
    block = MatmulBlock(run.size)
    x = torch.randn(run.size, run.size) / run.size**0.5
    grad = torch.randn(run.elements)
    gathered = [torch.empty(run.elements) for _ in range(WORLD)]
    out_buf = torch.full((run.p2p_bytes // 4,), float(rank))
    in_buf = torch.empty(run.p2p_bytes // 4)
    extra = run.extra if run.slow_rank == rank else 0
    nxt, prev = (rank + 1) % WORLD, (rank - 1) % WORLD

    telemetry = otel_ext.configure(
        service_name="multihost-truth-job",
        resource_attributes={"host.name": socket.gethostname()},
        traces_exporter="file",
        metrics_exporter="none",
        file_dir=folder / "spans" / f"rank{rank}",
        publish_active_spans=False,
        set_global=False,
    )
    comms = TorchDistributedInstrumentor()
    layers = TorchLayerInstrumentor()
    tracer = telemetry.tracer_provider.get_tracer("multihost_job")

    def one_step(x: torch.Tensor) -> torch.Tensor:
        x = block(x, run.matmuls + extra)
        dist.all_reduce(grad)
        grad.div_(WORLD)
        works = [dist.isend(out_buf, dst=nxt), dist.irecv(in_buf, src=prev)]
        with record_function("ring_wait"):
            for w in works:
                w.wait()
        x = block(x, run.matmuls)
        dist.all_gather(gathered, grad)
        return x

    try:
        with (
            torch.no_grad(),
            profile(
                activities=[ProfilerActivity.CPU],
                schedule=schedule(wait=0, warmup=1, active=run.steps, repeat=1),
                on_trace_ready=tensorboard_trace_handler(str(folder / "kineto")),
            ) as prof,
        ):
            # the profiler's warm-up step (not recorded) also sets up gloo's pair connections;
            # otel-ext records the same steps as the profiler: instrumented after it
            x = one_step(x)
            prof.step()
            comms.instrument(tracer_provider=telemetry.tracer_provider)
            layers.instrument(tracer_provider=telemetry.tracer_provider, model=block, rank=rank)
            # instrumenting takes each rank its own time: start the recorded steps together,
            # through the store (a dist.barrier() would be recorded by both)
            _store_barrier(store, f"{run.name}/instrumented", rank)
            _log(rank, "instrumented, profiling")
            for step in range(1, run.steps + 1):
                with tracer.start_as_current_span(f"step {step}"):
                    x = one_step(x)
                prof.step()
        _log(rank, "steps done")
    finally:
        layers.uninstrument()
        comms.uninstrument()
        telemetry.shutdown()
    dist.barrier()
    _log(rank, "telemetry shut down")
    return expected


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of the two-host gloo job")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--iface", required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--clock-file", type=Path, required=True)
    parser.add_argument("--runs", required=True, help="JSON list of MultiHostRun fields")
    args = parser.parse_args(argv)
    if "faketime" in os.environ.get("LD_PRELOAD", ""):
        time.sleep = _relative_sleep
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    timeout = timedelta(seconds=90)
    dist.init_process_group("gloo", rank=args.rank, world_size=WORLD, timeout=timeout)
    store = dist.TCPStore(ADDRESSES[0], MASTER_PORT + 1, WORLD, args.rank == 0, timeout=timeout)
    try:
        known = {f.name for f in fields(MultiHostRun)}
        specs = json.loads(args.runs)
        # the launch starts with the first run's offset in the file libfaketime reads
        offset = float(specs[0]["offset_ms"]) if host_of(args.rank) == HOSTS[1] else 0.0
        for spec in specs:
            run = {k: v for k, v in spec.items() if k in known}
            offset = _run_one(
                args.rank, args.root, run, args.clock_file, args.iface, store, previous_ms=offset
            )
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
