"""What the cross-rank passes still read: the per-rank phase's reduced rows, by category.

    python benchmarks/cross_rank_rows.py [PATH ...]
    python benchmarks/cross_rank_rows.py --cost PATH [--alternations 2] [--workers N]

For each path (a folder or file; default: DLRM, every real profiler trace and the simulated
4×8 run ``benchmarks/analysis_dask.py`` writes), in process: the rows of the per-rank
phase's table, the reduced rows (what a cluster sends to the client) and those by category,
and the same reduction keeping the rows of no category (the rule before they stayed behind),
so that the rows saved are printed against a baseline computed in the same run. A reduction
of the cross-rank passes is worth what its category holds here.

``--cost PATH``: what leaving the rows of no category out costs in process: ``analyze(PATH)``
in a fresh process per run, the rule before and now alternated, each run's wall and CPU
seconds, peak RSS and the SHA-256 of its JSON report (the same report: the same digest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import numpy as np

from otel_ext.analysis import per_rank
from otel_ext.analysis.captures import separate_captures
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.per_rank import cross_rank_mask, per_rank_tables
from otel_ext.analysis.steps import DEFAULT_STEPS, select_steps
from otel_ext.analysis.table import Category, EventTable

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "pytorch-profiler"
SIM = Path("/tmp/otel-ext-bench/sim-4x8-300")


def _keeping_uncategorised(table: EventTable) -> np.ndarray:
    return cross_rank_mask(table) | (table["category"] == Category.OTHER)


def census(paths: list[Path]) -> None:
    load = load_paths(paths, keep_going=True, workers=1)
    formats = {i.get("path", ""): i.get("format", "") for i in load.inputs}
    whole, _ = separate_captures(load.table, formats=formats, one_run=False)
    whole, _ = select_steps(whole, DEFAULT_STEPS)
    reduced = per_rank_tables(whole).reduced[0]
    with mock.patch.object(per_rank, "cross_rank_mask", _keeping_uncategorised):
        before = len(per_rank.per_rank_tables(whole).reduced[0])
    name = paths[0].name if len(paths) == 1 else f"{len(paths)} paths"
    print(f"{name}: {len(whole)} rows; reduced {len(reduced)} ({len(reduced) / len(whole):.3f})")
    print(f"  keeping the rows of no category (before): {before}; saved "
          f"{before - len(reduced)} ({(before - len(reduced)) / before:.1%})")  # fmt: skip
    cats, counts = np.unique(reduced["category"], return_counts=True)
    for c, n in sorted(zip(cats.tolist(), counts.tolist()), key=lambda x: -x[1]):
        print(f"  {Category(c).name:16s} {n:9d}  {n / len(reduced):6.1%}")


def _one_analysis(mode: str, path: str, workers: int | None) -> None:
    """One ``analyze`` in this (fresh) process: wall, CPU, peak RSS, report digest."""
    import hashlib
    import resource
    import time

    from otel_ext.analysis.engine import analyze, to_json

    wall, cpu = time.perf_counter(), time.process_time()
    if mode == "before":
        with mock.patch.object(per_rank, "cross_rank_mask", _keeping_uncategorised):
            doc = to_json(analyze(path, workers=workers))
    else:
        doc = to_json(analyze(path, workers=workers))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    digest = hashlib.sha256(doc.encode()).hexdigest()[:16]
    print(f"  {mode:6s} wall {wall:.3f} s  CPU {cpu:.3f} s  peak RSS {rss} MB  report {digest}")


def cost(path: Path, *, alternations: int, workers: int | None) -> None:
    import subprocess

    print(f"{path}: analyze in a fresh process, before / now alternated")
    for _ in range(alternations):
        for mode in ("before", "now"):
            cmd = [sys.executable, __file__, "--one", mode, str(path)]
            if workers is not None:
                cmd += ["--workers", str(workers)]
            subprocess.run(cmd, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--cost", type=Path, help="time and memory in process, before and now")
    ap.add_argument("--alternations", type=int, default=2)
    ap.add_argument("--workers", type=int, default=None, help="loader processes")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        _one_analysis(args.one[0], args.one[1], args.workers)
        return 0
    if args.cost:
        cost(args.cost, alternations=args.alternations, workers=args.workers)
        return 0
    sets = [[p] for p in args.paths] or [
        [TRACES / "param_dlrm_v100_8rank"],
        sorted(p for p in TRACES.iterdir() if p.is_dir()),
        [SIM],
    ]
    for paths in sets:
        if all(p.exists() for p in paths):
            census(paths)
        else:
            print(f"{paths[0]}: missing (the simulated run: run benchmarks/analysis_dask.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
