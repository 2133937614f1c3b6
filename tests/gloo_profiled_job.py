"""A real multi-process torch.distributed gloo job, profiled on every rank (truth-harness helper).

Not a test: :func:`record_runs` starts ``world`` processes (one per rank, plain subprocesses
of this file, gloo on loopback with a free port) that run one or more *runs* one after the
other. Each run is a few training-like steps under ``torch.profiler.profile`` with a
schedule (so ``ProfilerStep#N`` annotations exist) and
``on_trace_ready=tensorboard_trace_handler(folder)``: the run's folder receives one Kineto
JSON per rank, named as the profiler names them (``HOST_PID.TIMESTAMP.pt.trace.json``), the
rank only inside the file (``distributedInfo.rank``).

One step of a run: ``matmuls`` square matmuls, then an ``all_reduce``; ``matmuls`` more,
then an ``all_gather`` (``all_gather=True``). A run with ``slow_rank=R`` makes rank R, before
*each* collective, either sleep ``extra`` milliseconds (``mode="sleep"``) or do ``extra``
additional matmuls (``mode="matmul"``); every other rank, and every rank of a healthy run, does
the same work. The known slow rank is the ground truth the truth harness checks
``otel_ext.analysis.analyze`` against. :func:`collective_calls` and :func:`last_arrivals`
read the traces back with the standard library only (no otel-ext), to check that the
injected delay shows in the data.

Several runs in one launch share the processes (torch is imported once per rank, not once
per run); each run has its own profiler session and folder and starts after a barrier.

>>> spec = RunSpec(name="sleep-r1", slow_rank=1, mode="sleep", extra=5.0)
>>> spec.is_healthy, RunSpec(name="ok").is_healthy
(False, True)
>>> RunSpec(name="bad", mode="nap")
Traceback (most recent call last):
...
ValueError: RunSpec 'bad': mode must be 'sleep' or 'matmul', not 'nap'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

__all__ = [
    "JobError",
    "RunSpec",
    "collective_calls",
    "event_inventory",
    "last_arrivals",
    "persistently_last",
    "record_job",
    "record_runs",
    "record_until_visible",
    "trace_files",
    "truth_visible",
]

MODES = ("sleep", "matmul")
KINDS = ("steps", "ops")
#: what one step calls: ``ar_ag`` an all-reduce then an all-gather (the slow rank's extra work
#: before each); ``ddp`` four bucketed all-reduces with compute between them (extra work only
#: before the first, as a slow forward pass); ``mixed`` an all-reduce, a ring of 1 MiB
#: isend/irecv to the next rank, an all-gather (extra work only before the all-reduce)
PATTERNS = ("ar_ag", "ddp", "mixed")
#: collective calls per step, and which of them follow the slow rank's extra work
SLOW_SITE = {"ar_ag": (2, (0, 1)), "ddp": (4, (0,)), "mixed": (2, (0,))}
SUB_GROUP_DESC = "probe_sub"  # the sub-group of an ``ops`` run


class JobError(RuntimeError):
    """The gloo job did not finish: a rank failed or ran past its timeout."""


@dataclass(frozen=True)
class RunSpec:
    """One profiled run of the job.

    Attributes:
        name: the run's folder name under the launch's root.
        slow_rank: the rank made slow before each collective, or None for a healthy run.
        mode: ``"sleep"`` (sleep ``extra`` ms) or ``"matmul"`` (``extra`` more matmuls).
        extra: milliseconds to sleep, or the number of extra matmuls.
        steps: profiled steps (one warm-up step before them is not recorded).
        matmuls: matmuls every rank does before each collective.
        size: the matmuls' square size.
        elements: float32 elements per rank in each collective.
        all_gather: also an ``all_gather`` in each step, after the ``all_reduce``.
        seed: seeds the tensors' values (``seed * 1000 + rank``).
        kind: ``"steps"`` (the training-like steps above) or ``"ops"``: one call of each
            collective kind instead (all-reduce on the default group, on a sub-group
            ``probe_sub`` and async; broadcast, barrier, reduce-scatter, all-to-all,
            all-gather into a tensor and into a list; send/recv between rank pairs), without
            a schedule, to inventory the events PyTorch writes (:func:`event_inventory`).
        record_shapes: the profiler's ``record_shapes``.
        pattern: what one step calls (:data:`PATTERNS`).
    """

    name: str
    slow_rank: int | None = None
    mode: str = "sleep"
    extra: float = 5.0
    steps: int = 6
    matmuls: int = 2
    size: int = 256
    elements: int = 1024
    all_gather: bool = True
    seed: int = 0
    kind: str = "steps"
    record_shapes: bool = False
    pattern: str = "ar_ag"

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(
                f"RunSpec {self.name!r}: pattern must be one of {PATTERNS}, not {self.pattern!r}"
            )
        if self.mode not in MODES:
            raise ValueError(
                f"RunSpec {self.name!r}: mode must be 'sleep' or 'matmul', not {self.mode!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(
                f"RunSpec {self.name!r}: kind must be 'steps' or 'ops', not {self.kind!r}"
            )
        if self.steps < 1 or self.matmuls < 0 or self.extra < 0:
            raise ValueError(f"RunSpec {self.name!r}: steps >= 1, matmuls >= 0, extra >= 0")

    @property
    def is_healthy(self) -> bool:
        """Whether no rank is made slow."""
        return self.slow_rank is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trace_files(folder: Path) -> list[Path]:
    """The Kineto files of one run's folder, sorted by name.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "vm_12.17.pt.trace.json").write_text("{}")
    ...     [p.name for p in trace_files(Path(tmp))]
    ['vm_12.17.pt.trace.json']
    """
    return sorted(Path(folder).glob("*.pt.trace.json"))


def collective_calls(folder: Path) -> dict[int, list[tuple[str, float]]]:
    """Per rank (``distributedInfo.rank``), its ``c10d::*`` CPU ops as (name, start µs), in order
    (point-to-point ``c10d::send``/``recv_`` left out: they are not collectives).

    The ``c10d::*`` op is the rank's call of the collective on its main thread (its arrival).

    >>> import tempfile
    >>> ev = [{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 5.5, "dur": 1},
    ...       {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 6, "dur": 9}]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "h_1.2.pt.trace.json").write_text(json.dumps(
    ...         {"distributedInfo": {"rank": 3}, "traceEvents": ev}))
    ...     collective_calls(Path(tmp))
    {3: [('c10d::allreduce_', 5.5)]}
    """
    out: dict[int, list[tuple[str, float]]] = {}
    for path in trace_files(folder):
        trace = json.loads(path.read_text())
        calls = [
            (str(e["name"]), float(e["ts"]))
            for e in trace["traceEvents"]
            if e.get("ph") == "X"
            and e.get("cat") == "cpu_op"
            and e["name"].startswith("c10d::")
            and e["name"] not in ("c10d::send", "c10d::recv_")
        ]
        out[int(trace["distributedInfo"]["rank"])] = sorted(calls, key=lambda c: c[1])
    return out


def last_arrivals(calls: dict[int, list[tuple[str, float]]]) -> list[int]:
    """The rank that called each collective last (k-th call of every rank = one collective).

    Valid for ranks on one host, whose traces share its monotonic clock (this job's case).

    >>> last_arrivals({0: [("a", 1.0), ("b", 9.0)], 1: [("a", 2.0), ("b", 3.0)]})
    [1, 0]
    """
    ranks = sorted(calls)
    n = min(len(c) for c in calls.values()) if calls else 0
    return [max(ranks, key=lambda r: calls[r][k][1]) for k in range(n)]


def persistently_last(last: Sequence[int], world: int, *, alpha: float = 0.05) -> list[int]:
    """Ranks last at more collectives than chance allows (one-sided binomial, ``p < alpha``).

    On a shared machine a *healthy* run can have a rank the scheduler keeps late; this names
    it from the raw arrivals alone, so a check of "no straggler on a healthy run" can tell an
    analysis' false alarm from a real, environment-made straggler. Uncorrected and one-sided
    on purpose: it flags more than a significance test over all ranks would.

    >>> persistently_last([2] * 7 + [0, 1, 3, 0, 1], 4)  # 7 of 12 where chance is 3
    [2]
    >>> persistently_last([0, 1, 2, 3] * 3, 4)
    []
    """
    n = len(last)
    chance = 1.0 / world
    out = []
    for rank in range(world):
        k = list(last).count(rank)
        tail = sum(math.comb(n, i) * chance**i * (1 - chance) ** (n - i) for i in range(k, n + 1))
        if n and tail < alpha:
            out.append(rank)
    return out


def slow_site(spec: RunSpec, last: Sequence[int]) -> list[int]:
    """The last arrivals at the collectives that follow the slow rank's extra work (every
    collective for ``ar_ag``, the first of each step's for ``ddp`` and ``mixed``).

    >>> slow_site(RunSpec(name="d", pattern="ddp"), [1, 0, 2, 3, 1, 3, 0, 2])
    [1, 1]
    """
    per_step, sites = SLOW_SITE[spec.pattern]
    return [r for k, r in enumerate(last) if k % per_step in sites]


def truth_visible(spec: RunSpec, last: Sequence[int], world: int) -> bool:
    """Whether a run's raw last arrivals show its ground truth, so it can judge an analysis.

    A slow run: its slow rank called last at more than half of the collectives (chance is
    ``1/world``), significantly so (binomial, 0.01 after adjusting for the ranks). A healthy run: no rank last beyond chance (:func:`persistently_last`). On a
    loaded machine either can fail: the scheduler delays ranks by more than the injected
    fault, or makes a straggler nobody injected.

    >>> truth_visible(RunSpec(name="s", slow_rank=1), [1] * 9 + [0, 2, 3], 4)
    True
    >>> truth_visible(RunSpec(name="s", slow_rank=1), [1, 1, 1, 0], 4)  # too few to tell
    False
    >>> truth_visible(RunSpec(name="h"), [2] * 8, 4)
    False
    """
    if spec.kind == "ops":
        return True  # an inventory, no ground truth to show
    if spec.slow_rank is None:
        return not persistently_last(last, world)
    # the evidence the analysis' own verdict needs: last at more than half of the collectives
    # its extra work precedes, and beyond chance at its family-wise level (0.01 over ``world``
    # ranks), else the fault is not in the data
    last = slow_site(spec, last)
    k, n = list(last).count(spec.slow_rank), len(last)
    p0 = 1.0 / world
    tail = sum(math.comb(n, i) * p0**i * (1 - p0) ** (n - i) for i in range(k, n + 1))
    return bool(last) and k > n / 2 and tail * world < 0.01


def event_inventory(folder: Path) -> dict[int, dict[str, Any]]:
    """Per rank, what its trace holds about collectives (standard library only).

    Returns ``{rank: {"groups": pg_config, "events": [...]}}`` with, for each ``c10d::*``,
    ``gloo:*`` or ``record_param_comms`` event in start order: ``name``, ``cat``, ``tid``,
    ``on_caller`` (on the thread that made the ``c10d::`` calls), ``args`` (the event's).

    >>> import tempfile
    >>> ev = [{"ph": "X", "cat": "cpu_op", "name": "c10d::barrier", "ts": 1, "dur": 1, "tid": 7},
    ...       {"ph": "X", "cat": "user_annotation", "name": "gloo:barrier", "ts": 2, "dur": 3,
    ...        "tid": 9, "args": {"External id": 513}}]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "h_1.2.pt.trace.json").write_text(json.dumps(
    ...         {"distributedInfo": {"rank": 0, "pg_config": []}, "traceEvents": ev}))
    ...     [(e["name"], e["on_caller"]) for e in event_inventory(Path(tmp))[0]["events"]]
    [('c10d::barrier', True), ('gloo:barrier', False)]
    """
    out: dict[int, dict[str, Any]] = {}
    for path in trace_files(folder):
        trace = json.loads(path.read_text())
        info = trace["distributedInfo"]
        events = sorted(
            (
                e
                for e in trace["traceEvents"]
                if e.get("ph") == "X"
                and str(e.get("name", "")).startswith(("c10d::", "gloo:", "record_param_comms"))
            ),
            key=lambda e: float(e["ts"]),
        )
        caller = {e["tid"] for e in events if e["name"].startswith("c10d::")}
        out[int(info["rank"])] = {
            "groups": info.get("pg_config", []),
            "events": [
                {
                    "name": e["name"],
                    "cat": e.get("cat"),
                    "tid": e["tid"],
                    "on_caller": e["tid"] in caller,
                    "args": e.get("args", {}),
                }
                for e in events
            ],
        }
    return out


def record_until_visible(
    root: Path,
    runs: Sequence[RunSpec],
    *,
    world: int = 4,
    launches: int = 3,
    recheck_healthy: bool = False,
    timeout_s: float = 180.0,
) -> tuple[dict[str, Path], dict[str, int]]:
    """:func:`record_runs`, then record again (up to ``launches`` in all) each slow run whose
    raw traces do not show its ground truth (:func:`truth_visible`), and each healthy run
    with a rank last beyond chance too if ``recheck_healthy`` (off by default: on a loaded
    machine that is a third of healthy runs, and a caller can judge them as they are).

    Returns:
        ``({spec.name: folder}, {spec.name: recordings})``: the last recording of each run
        (visible or not: callers check) and how many recordings it took.
    """
    folders = record_runs(root, runs, world=world, timeout_s=timeout_s)
    tries = {r.name: 1 for r in runs}

    def invisible() -> list[RunSpec]:
        return [
            r
            for r in runs
            if (recheck_healthy or not r.is_healthy)
            and not truth_visible(r, last_arrivals(collective_calls(folders[r.name])), world)
        ]

    for launch in range(2, launches + 1):
        again = invisible()
        if not again:
            break
        retry = [replace(r, name=f"{r.name}.try{launch}") for r in again]
        got = record_runs(root, retry, world=world, timeout_s=timeout_s)
        for r, rr in zip(again, retry):
            folders[r.name] = got[rr.name]
            tries[r.name] = launch
    return folders, tries


def record_runs(
    root: Path,
    runs: Sequence[RunSpec],
    *,
    world: int = 4,
    timeout_s: float = 180.0,
    attempts: int = 2,
) -> dict[str, Path]:
    """Run a ``world``-rank gloo job that records ``runs`` one after the other.

    Args:
        root: folder that receives one sub-folder per run (``root / spec.name``).
        runs: the runs, in order; names must be distinct.
        world: number of ranks (processes).
        timeout_s: the whole launch's limit; past it every rank is killed.
        attempts: launches tried (a fresh port each) before giving up; a loopback port taken
            between choosing and binding it is the usual cause of a first failure.

    Returns:
        ``{spec.name: folder}``, each folder holding ``world`` Kineto files.

    Raises:
        JobError: a rank exited with an error, the launch timed out, or a run's folder does
            not hold one trace per rank; the message carries the ranks' stderr tails.
        ValueError: bad arguments (duplicate names, a slow rank outside the world).
    """
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be distinct: {names}")
    for r in runs:
        if r.slow_rank is not None and not 0 <= r.slow_rank < world:
            raise ValueError(f"RunSpec {r.name!r}: slow_rank {r.slow_rank} outside 0..{world - 1}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    spec_json = json.dumps([asdict(r) for r in runs])
    error: JobError | None = None
    for attempt in range(attempts):
        log_dir = root / f".logs{attempt}"
        log_dir.mkdir(exist_ok=True)
        try:
            _launch(root, spec_json, world=world, timeout_s=timeout_s, log_dir=log_dir)
        except JobError as exc:
            error = exc
            for name in names:
                for f in trace_files(root / name):
                    f.unlink()
            continue
        out = {name: root / name for name in names}
        for name, folder in out.items():
            found = trace_files(folder)
            if len(found) != world:
                raise JobError(
                    f"run {name!r}: {len(found)} trace files in {folder}, expected {world}"
                )
        return out
    assert error is not None
    raise error


def record_job(
    out_dir: Path,
    *,
    world: int = 4,
    steps: int = 6,
    slow_rank: int | None = None,
    mode: str = "sleep",
    extra: float = 5.0,
    seed: int = 0,
    timeout_s: float = 180.0,
) -> list[Path]:
    """Record one run into ``out_dir`` (see :func:`record_runs`); return its trace files."""
    out_dir = Path(out_dir)
    spec = RunSpec(
        name=out_dir.name, slow_rank=slow_rank, mode=mode, extra=extra, steps=steps, seed=seed
    )
    folders = record_runs(out_dir.parent, [spec], world=world, timeout_s=timeout_s)
    return trace_files(folders[spec.name])


def _launch(root: Path, spec_json: str, *, world: int, timeout_s: float, log_dir: Path) -> None:
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    for rank in range(world):
        log = log_dir / f"rank{rank}.stderr"
        with log.open("wb") as err:
            cmd = [sys.executable, __file__, "--rank", str(rank), "--world", str(world)]
            cmd += ["--port", str(port), "--root", str(root), "--runs", spec_json]
            procs.append(
                (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env), log)
            )
    deadline = time.monotonic() + timeout_s
    failed: list[str] = []
    for rank, (proc, _log) in enumerate(procs):
        try:
            rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = None
        if rc != 0:
            failed.append(f"rank {rank}: {'timed out' if rc is None else f'exit {rc}'}")
    if failed:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        tails = []
        for rank, (_, log) in enumerate(procs):
            text = log.read_text(errors="replace").strip().splitlines()[-8:]
            tails.append(f"--- rank {rank} stderr ---\n" + "\n".join(text))
        raise JobError("gloo job failed: " + "; ".join(failed) + "\n" + "\n".join(tails))


# --------------------------------------------------------------------------- rank process


def _run_ops(rank: int, world: int, root: Path, spec: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    sub = dist.new_group(list(range(world)), group_desc=SUB_GROUP_DESC)
    n = 8 * world
    t = torch.ones(n)
    dist.barrier()
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=spec["record_shapes"],
        on_trace_ready=tensorboard_trace_handler(str(root / spec["name"])),
    ):
        dist.all_reduce(t)
        dist.all_reduce(t, group=sub)
        dist.all_reduce(t, async_op=True).wait()
        dist.broadcast(t, src=0)
        dist.barrier()
        dist.reduce_scatter_tensor(torch.empty(n // world), t)
        dist.all_to_all_single(torch.empty(n), t)
        dist.all_gather_into_tensor(torch.empty(n * world), t)
        dist.all_gather([torch.empty(n) for _ in range(world)], t)
        if rank % 2 == 0 and rank + 1 < world:
            dist.send(t, dst=rank + 1)
        elif rank % 2 == 1:
            dist.recv(t, src=rank - 1)
    dist.barrier()
    dist.destroy_process_group(sub)


def _run_rank(rank: int, world: int, root: Path, spec: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    if spec["kind"] == "ops":
        _run_ops(rank, world, root, spec)
        return
    torch.manual_seed(spec["seed"] * 1000 + rank)
    n = spec["size"]
    a = torch.randn(n, n) / n**0.5
    b = torch.randn(n, n) / n**0.5
    grad = torch.randn(spec["elements"])
    gathered = [torch.empty(spec["elements"]) for _ in range(world)]
    buckets = [torch.randn(spec["elements"] * (b + 1)) for b in range(4)]
    ring_out = torch.randn(256 * 1024)  # 1 MiB of float32
    ring_in = torch.empty_like(ring_out)
    slow = spec["slow_rank"] == rank
    extra_matmuls = int(spec["extra"]) if slow and spec["mode"] == "matmul" else 0
    sleep_s = spec["extra"] / 1000.0 if slow and spec["mode"] == "sleep" else 0.0

    def compute(count: int) -> None:
        nonlocal a
        for _ in range(count):
            a = torch.tanh(a @ b)

    def before_collective() -> None:
        compute(spec["matmuls"] + extra_matmuls)
        if sleep_s:
            time.sleep(sleep_s)

    folder = root / spec["name"]
    dist.barrier()
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=spec["record_shapes"],
        schedule=schedule(wait=0, warmup=1, active=spec["steps"], repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(folder)),
    ) as prof:
        for _ in range(spec["steps"] + 1):
            pattern = spec.get("pattern", "ar_ag")
            before_collective()
            if pattern == "ddp":
                # backward: four gradient buckets, each reduced when its compute is done
                for bucket in range(4):
                    if bucket:
                        compute(spec["matmuls"])
                    dist.all_reduce(buckets[bucket])
            else:
                dist.all_reduce(grad)
                grad.div_(world)
            if pattern == "mixed":
                reqs = [
                    dist.isend(ring_out, (rank + 1) % world),
                    dist.irecv(ring_in, (rank - 1) % world),
                ]
                for req in reqs:
                    req.wait()
            if spec["all_gather"] and pattern != "ddp":
                if pattern == "ar_ag":
                    before_collective()
                else:
                    compute(spec["matmuls"])
                dist.all_gather(gathered, grad)
            prof.step()
    dist.barrier()


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of the profiled gloo job")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--runs", required=True, help="JSON list of RunSpec fields")
    args = parser.parse_args(argv)
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=60),
    )
    try:
        for spec in json.loads(args.runs):
            _run_rank(args.rank, args.world, args.root, spec)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
