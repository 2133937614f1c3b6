"""Benchmark: the whole default analysis at 64, 512 and 4,096 ranks, a fixed work per rank.

    python benchmarks/analysis_scale.py [--ranks 64,512,4096] [--collectives 200]
                                        [--steps 10] [--kernels 20] [--repeat 1]
                                        [--timeout 300] [--phases] [--memory] [--profile]
                                        [--floor] [--chip-skew-us 0] [--group-size 0]

Each size is a synthetic multi-rank :class:`~otel_ext.analysis.table.EventTable` built in
memory from numpy arrays (no row dictionaries, no files): per rank ``--steps`` profiler steps,
each with ``--kernels`` compute kernels on one stream and ``--collectives / --steps``
all-reduces (communication kernels with ``coll_group="world"``, ``coll_seq``, ``coll_bytes``,
``coll_group_size`` = the rank count) on another; every kernel has its launch (a runtime call
with the kernel's correlation id inside a CPU op, on the rank's host thread) and a blocking
``cudaStreamSynchronize`` ends each step (the last step is dropped by the analysis, as HTA
does). Ranks sit 8 to a
host (``host{h}``, device ``host{h}/chip{c}``); each host's clock is off by a few
milliseconds (``--chip-skew-us``: each chip's times off its host's clock too, which leaves
causality violations for the repair pass); one rank (the straggler) computes 25 % slower and
so arrives last at every collective. Every member of a collective leaves at one common exit
after the last arrival (``--group-size 8``: the all-reduces run in groups of 8 ranks instead,
one group per host, each group its own sequence numbers and exit).

Each size runs ``otel_ext.analysis.engine.analyze(table)`` in a fresh subprocess (so its
memory is its own: the process's peak RSS), under ``--timeout`` seconds (``--repeat`` runs,
the best times kept), after a warm-up on 16 ranks (imports, numpy's first calls). Printed per
size: rows, the table's bytes, the analysis's wall and CPU seconds, the process's peak RSS
and its growth above the RSS before the table was built, and each against linear scaling
from the smallest size: ``(x(n) / x(n0)) / (n / n0)``, so 1.0 = linear, 2.0 = twice what
linear growth predicts. On a shared machine the CPU seconds are the steadier measure.

``--phases`` also times each step the engine calls (every otel-ext function the engine's
module calls, and the breakdown and overlap functions; a step called inside another is
counted in the outer one), with the same ratios. ``--memory`` adds each step's peak of
traced allocations (``tracemalloc``, which slows the run; its times are not the plain
ones). ``--profile`` runs each size under ``cProfile`` once more and lists the functions
whose own CPU time grows faster than linear from the smallest to the largest size that
finished. ``--floor`` times numpy's building blocks (sorts, gathers, searches) at the
smallest and largest row counts: what a pass linear in its rows can reach per row once its
arrays no longer fit in the caches.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from otel_ext.analysis.table import (  # noqa: E402
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    Category,
    EventTable,
    constant_column,
)

CHIPS_PER_HOST = 8
COMPUTE_STREAM, COMM_STREAM = 7, 13
EPOCH_NS = 1_764_000_000 * 10**9  # host wall-clock times, as profiler traces hold them
US = 1_000
COMPUTE_NAMES = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
    "flash_fwd_kernel",
    "void at::native::reduce_kernel<512, 1>",
)
COMM_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def make_table(
    ranks: int,
    *,
    collectives: int = 200,
    steps: int = 10,
    kernels: int = 20,
    straggler: int | None = None,
    chip_skew_ns: int = 0,
    group_size: int = 0,
    seed: int = 0,
) -> EventTable:
    """A synthetic ``ranks``-rank table with the same work on every rank (see the module text).

    Args:
        ranks: the number of ranks (8 per host).
        collectives: all-reduces per rank (a multiple of ``steps``).
        steps: profiler steps per rank.
        kernels: compute kernels per step.
        straggler: the rank that computes 25 % slower (default: the third-last).
        chip_skew_ns: each chip's times off its host's clock by up to this much (uniform),
            so that collectives leave causality violations for the repair pass.
        group_size: the all-reduces run in groups of this many consecutive ranks
            (``tp0``, ``tp1``, ...; each its own sequence numbers); 0: one group of all ranks.
        seed: the random generator's seed.

    Returns:
        The table, rank after rank, each rank's rows in time order.

    >>> t = make_table(16, collectives=4, steps=2, kernels=2)
    >>> len(t), sorted(set(t["rank"].tolist())) == list(range(16))
    (448, True)
    >>> t.strings["device"][int(t["device"][-1])], int(t["coll_group_size"].max())
    ('host1/chip7', 16)
    """
    group = group_size or ranks
    if ranks % group:
        raise SystemExit(f"--group-size ({group}) must divide the rank count ({ranks})")
    if collectives % steps:
        raise SystemExit(f"--collectives ({collectives}) must be a multiple of --steps ({steps})")
    rng = np.random.default_rng(seed)
    strag = ranks - 3 if straggler is None else straggler
    per_step = collectives // steps
    # one step's items in program order: compute kernels spread between the all-reduces
    # (True: an all-reduce; the step's last item is one, its gradient sync)
    total = kernels + per_step
    kinds = np.zeros(total, dtype=bool)
    kinds[(np.arange(1, per_step + 1) * total) // per_step - 1] = True
    kinds = np.tile(kinds, steps)
    n_items = kinds.size
    step_of = np.repeat(np.arange(steps), kernels + per_step)
    # true-time simulation, vectorised over ranks, item by item
    slow = np.ones(ranks)
    slow[strag] = 1.25
    base_dur = rng.uniform(100 * US, 400 * US, n_items)
    nbytes = np.where(kinds, rng.choice([8, 16, 32, 64], n_items) * 2**20, -1).astype(np.int64)
    transfer = 150 * US + nbytes / 200e9 * 1e9  # ~200 GB/s bus
    start = np.empty((ranks, n_items), dtype=np.int64)
    end = np.empty((ranks, n_items), dtype=np.int64)
    cur = np.zeros(ranks)
    step_first = np.r_[True, step_of[1:] != step_of[:-1]]
    for i in range(n_items):
        # a step's first kernel waits for the host's return from the previous step's sync
        gap = (
            rng.uniform(45 * US, 55 * US, ranks)
            if step_first[i]
            else rng.uniform(5 * US, 15 * US, ranks)
        )
        if kinds[i]:
            arrive = cur + gap
            # one exit per group: its last arrival plus the transfer
            exit_ = np.repeat(arrive.reshape(-1, group).max(axis=1), group) + transfer[i]
            start[:, i] = arrive
            end[:, i] = exit_ + rng.uniform(0, 2 * US, ranks)  # leave together (ns jitter)
            cur = exit_
        else:
            dur = base_dur[i] * slow * rng.lognormal(0.0, 0.02, ranks)
            start[:, i] = cur + gap
            end[:, i] = start[:, i] + dur
            cur = end[:, i].astype(np.float64)
    # each host's clock offset (host 0 the reference)
    hosts = (ranks + CHIPS_PER_HOST - 1) // CHIPS_PER_HOST
    host_off = np.r_[0, rng.uniform(-5e6, 5e6, hosts - 1)].astype(np.int64)
    rank_ids = np.arange(ranks)
    local = EPOCH_NS + host_off[rank_ids // CHIPS_PER_HOST][:, None]
    if chip_skew_ns:  # device times mapped onto the host clock with an error per chip
        local = local + rng.integers(-chip_skew_ns, chip_skew_ns + 1, ranks)[:, None]
    k_start, k_end = start + local, end + local
    # launches on the host thread: CPU op [ks-30us, ks-8us] around runtime [ks-25us, ks-12us]
    op_start, op_end = k_start - 30 * US, k_start - 8 * US
    rt_start, rt_end = k_start - 25 * US, k_start - 12 * US
    # each step ends in a blocking cudaStreamSynchronize that returns when its last kernel
    # (the gradient all-reduce) ends; the step row spans its CPU ops and that sync
    first = np.flatnonzero(step_first)
    last = np.r_[first[1:], n_items] - 1
    sy_start, sy_end = op_end[:, last] + 2 * US, k_end[:, last] + US
    st_start, st_end = op_start[:, first] - 5 * US, sy_end + US
    # per rank: steps, syncs, then per item (CPU op, runtime, kernel); 3 rows per item
    head = 2 * steps
    per_rank = head + 3 * n_items
    n = ranks * per_rank

    def lay(steps_v: Any, sync_v: Any, op_v: Any, rt_v: Any, k_v: Any, dtype: Any) -> np.ndarray:
        m = np.empty((ranks, per_rank), dtype=dtype)
        m[:, :steps] = steps_v
        m[:, steps:head] = sync_v
        m[:, head::3] = op_v
        m[:, head + 1 :: 3] = rt_v
        m[:, head + 2 :: 3] = k_v
        return m

    s_m = lay(st_start, sy_start, op_start, rt_start, k_start, np.int64)
    e_m = lay(st_end, sy_end, op_end, rt_end, k_end, np.int64)
    order = np.argsort(s_m, axis=1, kind="stable")  # each rank's rows in time order
    take = np.take_along_axis

    def col(m: np.ndarray) -> np.ndarray:
        return take(m, order, axis=1).reshape(n)

    comm = np.broadcast_to(kinds, (ranks, n_items))
    cat_k = np.where(kinds, int(Category.KERNEL_COMM), int(Category.KERNEL_COMPUTE))
    item = np.arange(n_items)
    corr = item + 1  # per file (rank), as a profiler numbers them
    seq = np.cumsum(kinds) - 1
    # string dictionaries
    names = ["", *(f"ProfilerStep#{s}" for s in range(steps)), *COMPUTE_NAMES, COMM_NAME]
    names += ["cudaLaunchKernel", "aten::mm", "c10d::allreduce_", "cudaStreamSynchronize"]
    code = {s: i for i, s in enumerate(names)}
    k_name = np.where(kinds, code[COMM_NAME], code[COMPUTE_NAMES[0]] + item % len(COMPUTE_NAMES))
    op_name = np.where(kinds, code["c10d::allreduce_"], code["aten::mm"])
    strings = {s: [""] for s in STRING_COLUMNS}
    strings["name"] = names
    strings["host"] = ["", *(f"host{h}" for h in range(hosts))]
    strings["device"] = ["", *(f"host{r // 8}/chip{r % 8}" for r in range(ranks))]
    strings["coll_op"] = ["", "allreduce"]
    n_groups = ranks // group
    strings["coll_group"] = (
        ["", "world"] if n_groups == 1 else ["", *(f"tp{g}" for g in range(n_groups))]
    )
    strings["source"] = ["", *(f"rank{r}.pt.trace.json" for r in range(ranks))]
    minus = -1
    step_c, runtime_c = int(Category.STEP), int(Category.RUNTIME)
    columns: dict[str, np.ndarray] = {}
    columns["start_ns"] = col(s_m)
    columns["end_ns"] = col(e_m)
    cpu_c = int(Category.CPU_OP)
    columns["category"] = col(lay(step_c, runtime_c, cpu_c, runtime_c, cat_k, np.int8))
    columns["rank"] = np.repeat(rank_ids.astype(np.int32), per_rank)
    columns["stream"] = col(
        lay(minus, minus, minus, minus, np.where(kinds, COMM_STREAM, COMPUTE_STREAM), np.int64)
    )
    tid = 4_000 + rank_ids[:, None] % CHIPS_PER_HOST
    columns["tid"] = col(lay(tid, tid, tid, tid, minus, np.int64))
    comm_only = functools.partial(lay, minus, minus, minus, minus)
    columns["coll_seq"] = col(comm_only(np.where(kinds, seq, minus), np.int64))
    columns["coll_bytes"] = col(comm_only(nbytes, np.int64))
    columns["coll_group_size"] = col(comm_only(np.where(kinds, group, minus), np.int32))
    sync_corr = n_items + 1 + np.arange(steps)
    columns["correlation"] = col(lay(minus, sync_corr, minus, corr, corr, np.int64))
    columns["external_id"] = col(lay(minus, minus, corr, corr, corr, np.int64))
    columns["name"] = col(
        lay(
            1 + np.arange(steps),
            code["cudaStreamSynchronize"],
            op_name,
            code["cudaLaunchKernel"],
            k_name,
            np.int32,
        )
    )
    columns["host"] = np.repeat((1 + rank_ids // CHIPS_PER_HOST).astype(np.int32), per_rank)
    columns["device"] = np.repeat((1 + rank_ids).astype(np.int32), per_rank)
    columns["source"] = columns["device"].copy()
    columns["coll_op"] = col(lay(0, 0, 0, 0, comm.astype(np.int32), np.int32))
    group_code = (1 + rank_ids // group)[:, None] * comm
    columns["coll_group"] = col(lay(0, 0, 0, 0, group_code.astype(np.int32), np.int32))
    for name, (dtype, default) in NUMERIC_COLUMNS.items():
        columns.setdefault(name, constant_column(default, dtype, n))
    for name in STRING_COLUMNS:
        columns.setdefault(name, constant_column(0, np.int32, n))
    ordered = {k: columns[k] for k in (*NUMERIC_COLUMNS, *STRING_COLUMNS)}
    truth = {"ranks": ranks, "straggler": strag, "host_offset_ns": host_off.tolist()}
    return EventTable(ordered, strings, {"synthetic": truth})


# --- the measured child process ---------------------------------------------------------------


def _instrument_engine(memory: bool) -> dict[str, list[float]]:
    """Wrap every otel-ext function the engine calls with a timer (outermost call counted).

    Returns ``{step name: [seconds, calls, peak traced bytes, CPU seconds]}``, filled as the
    engine runs.
    """
    import functools
    import inspect
    import tracemalloc

    from otel_ext.analysis import engine
    from otel_ext.analysis.cross import collective_match as collectives
    from otel_ext.analysis.rank import breakdown, overlap

    phases: dict[str, list[float]] = {}
    depth = [0]

    def wrap(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0] += 1
            if memory:
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                rec = phases.setdefault(name, [0.0, 0, 0, 0.0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                if memory:
                    rec[2] = max(rec[2], tracemalloc.get_traced_memory()[1] - base)
                rec[3] += time.process_time() - c0
                depth[0] -= 1

        return timed

    for mod in (engine,):
        for name, obj in list(vars(mod).items()):
            if name == "analyze" or not inspect.isfunction(obj):
                continue
            if getattr(obj, "__module__", "").startswith("otel_ext"):
                setattr(mod, name, wrap(name, obj))
    for mod in (breakdown, overlap):
        for name, obj in list(vars(mod).items()):
            own = inspect.isfunction(obj) and obj.__module__ == mod.__name__
            if own and not name.startswith("_"):
                setattr(mod, name, wrap(name, obj))
    cls = collectives.CollectiveMatch
    for meth in ("summary", "rows"):
        setattr(cls, meth, wrap(f"CollectiveMatch.{meth}", getattr(cls, meth)))
    return phases


def child(args: argparse.Namespace) -> None:
    """Build one size's table, analyse it, print one JSON line."""
    import resource

    from otel_ext.analysis.engine import analyze

    # warm-up on 16 ranks: lazy imports and numpy's first calls are not the analysis's cost
    analyze(make_table(16, collectives=args.steps, steps=args.steps, kernels=2))
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    table = make_table(
        args.child,
        collectives=args.collectives,
        steps=args.steps,
        kernels=args.kernels,
        chip_skew_ns=int(args.chip_skew_us * 1000),
        group_size=args.group_size,
    )
    build_s = time.perf_counter() - t0
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    phases = _instrument_engine(args.memory) if (args.phases or args.memory) else {}
    if args.memory:
        import tracemalloc

        tracemalloc.start()
    prof = None
    if args.profile_out:
        import cProfile

        prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
        prof.enable()
    t1, c1 = time.perf_counter(), time.process_time()
    doc = analyze(table)
    seconds, cpu = time.perf_counter() - t1, time.process_time() - c1
    if prof is not None:
        prof.disable()
        _dump_profile(prof, args.profile_out)
        prof.dump_stats(args.profile_out + ".pstats")
    top = doc["stragglers"][0] if doc["stragglers"] else {}
    print(
        json.dumps(
            {
                "ranks": args.child,
                "rows": len(table),
                "table_mb": table.nbytes() / 2**20,
                "build_s": build_s,
                "seconds": seconds,
                "cpu_s": cpu,
                "rss_start_kb": rss_start,
                "rss_built_kb": rss_built,
                "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "collectives": doc["collectives"]["count"],
                "findings": len(doc["findings"]),
                "top_straggler": top.get("rank"),
                "straggler": table.meta["synthetic"]["straggler"],
                "causality": {
                    k: v for k, v in doc["causality"].items() if isinstance(v, (int, str))
                },
                "phases": phases,
            }
        )
    )


def _dump_profile(prof: Any, path: str) -> None:
    """Own time per function (``file:line(name)``: calls, own s, cumulative s); a built-in
    (numpy's sort, ``np.isin``'s C part, ...) is split by the function that called it."""
    import pstats

    def short(key: tuple[str, int, str]) -> str:
        file, line, func = key
        if "/otel_ext/" in file:
            file = file.split("/otel_ext/", 1)[1]
        elif "/benchmarks/" in file:
            file = "benchmarks/" + Path(file).name
        else:
            file = Path(file).name
        return f"{file}:{line}({func})"

    st = pstats.Stats(prof)
    out: dict[str, list[float]] = {}
    for key, (_cc, nc, tt, ct, callers) in st.stats.items():  # type: ignore[attr-defined]
        if key[0] == "~" and callers:
            for caller, (_ccc, cnc, ctt, cct) in callers.items():
                if ctt >= 1e-4:
                    out[f"{short(key)} <- {short(caller)}"] = [cnc, ctt, cct]
        elif tt >= 1e-4 or ct >= 1e-3:
            out[short(key)] = [nc, tt, ct]
    Path(path).write_text(json.dumps(out))


# --- the parent: one fresh process per size ------------------------------------------------------


def run_size(args: argparse.Namespace, ranks: int, *, profile_out: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", str(ranks)]
    cmd += ["--collectives", str(args.collectives), "--steps", str(args.steps)]
    cmd += ["--kernels", str(args.kernels), "--chip-skew-us", str(args.chip_skew_us)]
    cmd += ["--group-size", str(args.group_size)]
    if args.phases:
        cmd.append("--phases")
    if args.memory:
        cmd.append("--memory")
    if profile_out:
        cmd += ["--profile-out", profile_out]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"ranks": ranks, "error": f"timed out after {args.timeout} s"}
    if out.returncode != 0:
        return {"ranks": ranks, "error": out.stderr.strip()[-400:] or f"rc {out.returncode}"}
    res: dict = json.loads(out.stdout.strip().splitlines()[-1])
    res["wall"] = time.perf_counter() - t0
    return res


def _best(runs: list[dict]) -> dict:
    """Each time its best run's (the machine is shared), memory its largest; errors win."""
    errors = [r for r in runs if "error" in r]
    if errors:
        return errors[0]
    best = dict(min(runs, key=lambda r: r["seconds"]))
    best["cpu_s"] = min(r["cpu_s"] for r in runs)
    best["maxrss_kb"] = max(r["maxrss_kb"] for r in runs)
    best["rss_start_kb"] = min(r["rss_start_kb"] for r in runs)
    phases: dict[str, list[float]] = {}
    for r in runs:
        for k, v in r["phases"].items():
            old = phases.get(k)
            phases[k] = (
                list(v)
                if old is None
                else [min(old[0], v[0]), v[1], max(old[2], v[2]), min(old[3], v[3])]
            )
    best["phases"] = phases
    return best


def _vs_linear(value: float, base: float, n: int, n0: int) -> float:
    return (value / base) / (n / n0) if base > 0 else float("nan")


def print_sizes(results: list[dict]) -> None:
    ok = [r for r in results if "error" not in r]
    print(
        "| ranks | rows | table MB | analyze s | CPU s | peak RSS MB | above start MB |"
        " time vs linear | CPU vs linear | memory vs linear | collectives |"
        " top straggler (true) |"
    )
    print("|---" * 12 + "|")
    b = ok[0] if ok else None
    for r in results:
        if "error" not in r:
            assert b is not None
            n, n0 = r["ranks"], b["ranks"]
            tr = _vs_linear(r["seconds"], b["seconds"], n, n0)
            cr = _vs_linear(r["cpu_s"], b["cpu_s"], n, n0)
            above = r["maxrss_kb"] - r["rss_start_kb"]
            mr = _vs_linear(above, b["maxrss_kb"] - b["rss_start_kb"], n, n0)
            print(
                f"| {n:,} | {r['rows']:,} | {r['table_mb']:.0f} | {r['seconds']:.2f} |"
                f" {r['cpu_s']:.2f} | {r['maxrss_kb'] / 1024:.0f} | {above / 1024:.0f} |"
                f" {tr:.2f} | {cr:.2f} | {mr:.2f} | {r['collectives']} |"
                f" {r['top_straggler']} ({r['straggler']}) |"
            )
        else:
            print(f"| {r['ranks']:,} | – | – | {r['error']} |" + " – |" * 8)


def print_phases(results: list[dict]) -> None:
    ok = [r for r in results if "error" not in r and r.get("phases")]
    if not ok:
        return
    b = ok[0]
    names = sorted(
        {k for r in ok for k in r["phases"]},
        key=lambda k: -ok[-1]["phases"].get(k, [0.0, 0, 0, 0.0])[3],
    )
    mem = any(v[2] for r in ok for v in r["phases"].values())
    heads = ["step (CPU s)", *(f"{r['ranks']:,}" for r in ok)]
    heads += [f"vs linear {r['ranks']:,}" for r in ok[1:]]
    if mem:
        heads += [f"{r['ranks']:,} MB" for r in ok]
    print("| " + " | ".join(heads) + " |")
    print("|---" * len(heads) + "|")
    for k in [*names, "(engine, outside the steps)"]:
        if k.startswith("("):
            vals = [r["cpu_s"] - sum(v[3] for v in r["phases"].values()) for r in ok]
            mems = [0.0 for _ in ok]
        else:
            vals = [r["phases"].get(k, [0.0, 0, 0, 0.0])[3] for r in ok]
            mems = [r["phases"].get(k, [0, 0, 0])[2] / 2**20 for r in ok]
        cells = [f"{v:.3f}" for v in vals]
        cells += [
            f"{_vs_linear(v, vals[0], r['ranks'], b['ranks']):.2f}"
            for v, r in zip(vals[1:], ok[1:])
        ]
        if mem:
            cells += [f"{m:.0f}" for m in mems]
        print(f"| {k} | " + " | ".join(cells) + " |")


def print_profile(profiles: list[tuple[int, dict]], min_share: float = 0.004) -> None:
    """Functions whose own time grows faster than linear from the first to the last size."""
    if len(profiles) < 2:
        return
    (n0, p0), (n1, p1) = profiles[0], profiles[-1]
    total1 = sum(v[1] for v in p1.values())
    rows = []
    for k, (nc, tt, ct) in p1.items():
        if tt < min_share * total1:
            continue
        base = p0.get(k, [0, 0.0, 0.0])
        ratio = _vs_linear(tt, base[1], n1, n0) if base[1] > 0 else float("inf")
        calls = _vs_linear(nc, base[0], n1, n0) if base[0] > 0 else float("inf")
        rows.append((ratio, k, tt, base[1], nc, base[0], calls, ct))
    rows.sort(reverse=True)
    print(
        f"\nOwn time (cProfile) of functions with ≥ {min_share:.1%} of the {n1:,}-rank total,"
        f" vs linear from {n0:,} ranks:"
    )
    print(
        f"| function | {n0:,} s | {n1:,} s | time vs linear | calls {n0:,} | calls {n1:,} |"
        " calls vs linear | cumulative s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for ratio, k, tt, t0, nc, c0, calls, ct in rows:
        print(
            f"| `{k}` | {t0:.3f} | {tt:.3f} | {ratio:.2f} | {c0} | {nc} | {calls:.2f} | {ct:.3f} |"
        )


def print_floor(rows_small: int, rows_large: int) -> None:
    """Per-element cost of numpy's building blocks at the smallest and largest row counts.

    A pass linear in its rows still slows per row once its arrays leave the caches: sorts,
    random gathers and searches over all rows pay for it; a pass over rank-major rows (the
    order the loaders build) or over one rank at a time does not. The ratios are the floor a
    whole-table pass of each kind can reach.
    """
    rng = np.random.default_rng(0)

    def best(fn: Any, k: int) -> float:
        out = float("inf")
        for _ in range(k):
            c = time.process_time()
            fn()
            out = min(out, time.process_time() - c)
        return out

    def cases(n: int) -> list[tuple[str, Any]]:
        rand = rng.integers(0, n, n)
        blocks = np.repeat(np.arange(n // 1000 + 1), 1000)[:n] * 10**6 + rng.integers(0, 999, n)
        pairs = rng.integers(0, 4096, (n // 6, 2))
        sorted_ = np.sort(rng.integers(0, 10**12, n))
        query = rng.integers(0, 10**12, n)
        vals = rng.random(n)
        return [
            ("argsort, random int64", lambda: np.argsort(rand, kind="stable")),
            ("argsort, rank-major (sorted blocks)", lambda: np.argsort(blocks, kind="stable")),
            ("lexsort, 4 keys", lambda: np.lexsort((rand, rand % 7, rand % 3, rand // 1220))),
            ("np.unique(axis=0), n/6 pairs", lambda: np.unique(pairs, axis=0)),
            ("np.unique 1-D, return_counts", lambda: np.unique(rand, return_counts=True)),
            ("np.bincount", lambda: np.bincount(rand % 4096)),
            ("gather a[random index]", lambda: vals[rand]),
            ("searchsorted, n into n", lambda: np.searchsorted(sorted_, query)),
        ]

    small, large = cases(rows_small), cases(rows_large)
    print(
        f"\nPer-element cost of numpy building blocks, {rows_small:,} vs {rows_large:,} rows"
        " (CPU, best of 3; 1.0 = the same cost per element):"
    )
    print(f"| operation | {rows_small:,} rows ms | {rows_large:,} rows ms | per element vs small |")
    print("|---|---|---|---|")
    for (name, fs), (_, fl) in zip(small, large):
        ts, tl = best(fs, 3), best(fl, 3)
        ratio = _vs_linear(tl, ts, rows_large, rows_small)
        print(f"| {name} | {ts * 1e3:.2f} | {tl * 1e3:.1f} | {ratio:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", default="64,512,4096", help="comma-separated rank counts")
    ap.add_argument("--collectives", type=int, default=200, help="all-reduces per rank")
    ap.add_argument("--steps", type=int, default=10, help="profiler steps per rank")
    ap.add_argument("--kernels", type=int, default=20, help="compute kernels per step")
    ap.add_argument("--repeat", type=int, default=1, help="fresh runs per size (best kept)")
    ap.add_argument(
        "--chip-skew-us", type=float, default=0.0, help="chip clock error (repair pass)"
    )
    ap.add_argument("--group-size", type=int, default=0, help="ranks per collective group (0: all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per size")
    ap.add_argument("--phases", action="store_true", help="time each engine step")
    ap.add_argument("--memory", action="store_true", help="each step's traced peak (slower)")
    ap.add_argument("--profile", action="store_true", help="cProfile: super-linear functions")
    ap.add_argument("--floor", action="store_true", help="numpy's per-element cost by size")
    ap.add_argument("--profile-dir", help="keep the profiles here (.json, .pstats)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    sizes = [int(x) for x in args.ranks.split(",")]
    print(
        f"per rank: {args.steps} steps x ({args.kernels} compute kernels +"
        f" {args.collectives // args.steps} all-reduces), each kernel with its launch;"
        f" {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    results = []
    for n in sizes:
        res = _best([run_size(args, n) for _ in range(args.repeat)])
        if "error" in res:
            line = res["error"]
        else:
            c = res.get("causality", {})
            line = (
                f"{res['rows']:,} rows, build {res['build_s']:.1f} s,"
                f" analyze {res['seconds']:.2f} s, peak RSS {res['maxrss_kb'] / 1024:.0f} MB;"
                f" causality violations {c.get('violations_before')} ->"
                f" {c.get('violations_after')}, {c.get('repaired_events')} events repaired"
            )
        print(f"  {n:,} ranks: {line}", flush=True)
        results.append(res)
    print()
    print_sizes(results)
    if args.phases or args.memory:
        print()
        print_phases(results)
    ok = [r for r in results if "error" not in r]
    if args.floor and len(ok) >= 2:
        print_floor(ok[0]["rows"], ok[-1]["rows"])
    if args.profile:
        import tempfile

        profiles = []
        with tempfile.TemporaryDirectory() as scratch:
            tmp = args.profile_dir or scratch
            os.makedirs(tmp, exist_ok=True)
            for n in sizes:
                path = os.path.join(tmp, f"{n}.json")
                saved = args.phases, args.memory
                args.phases = args.memory = False
                res = run_size(args, n, profile_out=path)
                args.phases, args.memory = saved
                if "error" in res:
                    print(f"  profile {n:,} ranks: {res['error']}")
                    continue
                profiles.append((n, json.loads(Path(path).read_text())))
        print_profile(profiles)


if __name__ == "__main__":
    main()
