"""What the cross-rank passes still read: the per-rank phase's reduced rows, by category.

    python benchmarks/cross_rank_rows.py [PATH ...]
    python benchmarks/cross_rank_rows.py --cost PATH --baseline-tree DIR [--alternations 2]

For each path (a folder or file; default: DLRM, every real profiler trace and the simulated
4×8 run ``benchmarks/analysis_dask.py`` writes), in process: the rows of the per-rank
phase's table, the reduced rows (what a cluster sends to the client: its partitions hold
the device rows unless a file has request or serving rows) and those by category,
the rows the critical path's walk reads where the per-rank phase ran (device rows and
runtime calls: they stay there), and three baselines computed in the same run: the reduction
keeping the device rows (as in process, and on a cluster before they stayed), keeping the
runtime calls too (the rule before the walk moved to the workers) and keeping also the
rows of no category (the rule before those stayed behind). A reduction of the cross-rank
passes is worth what its category holds here.

``--cost PATH --baseline-tree DIR``: what a change costs in process: ``analyze(PATH)`` in a
fresh process per run, with this tree's otel-ext and with the one in ``DIR`` (a checkout of
an earlier revision, e.g. ``git worktree add DIR REV``, its compiled scanner built or copied
when ``_cscan.c`` is the same), alternated; each run's wall and CPU seconds, peak RSS and the
SHA-256 of its JSON report (the same report: the same digest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import numpy as np

from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.rank import per_rank
from otel_ext.analysis.rank.per_rank import cross_rank_mask, per_rank_tables
from otel_ext.analysis.runs import separate_captures
from otel_ext.analysis.steps import DEFAULT_STEPS, select_steps
from otel_ext.analysis.table import Category, EventTable

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "pytorch-profiler"
SIM = Path("/tmp/otel-ext-bench/sim-4x8-300")


def _keeping_runtime(table: EventTable) -> np.ndarray:
    return cross_rank_mask(table) | (table["category"] == Category.RUNTIME)


def _keeping_uncategorised(table: EventTable) -> np.ndarray:
    return _keeping_runtime(table) | (table["category"] == Category.OTHER)


def census(paths: list[Path]) -> None:
    load = load_paths(paths, keep_going=True, workers=1)
    formats = {i.get("path", ""): i.get("format", "") for i in load.inputs}
    whole, _ = separate_captures(load.table, formats=formats, one_run=False)
    whole, _ = select_steps(whole, DEFAULT_STEPS)
    per = per_rank_tables(whole, hold=True)  # as a cluster's partitions: device rows held
    reduced = per.reduced[0]
    walk = 0 if per.walk is None else len(per.walk)
    device = len(per_rank_tables(whole).reduced[0])
    with mock.patch.object(per_rank, "cross_rank_mask", _keeping_runtime):
        runtime = len(per_rank.per_rank_tables(whole).reduced[0])
    print_held = per.held_rows
    with mock.patch.object(per_rank, "cross_rank_mask", _keeping_uncategorised):
        before = len(per_rank.per_rank_tables(whole).reduced[0])
    name = paths[0].name if len(paths) == 1 else f"{len(paths)} paths"
    print(f"{name}: {len(whole)} rows; reduced {len(reduced)} ({len(reduced) / len(whole):.3f})")
    print(f"  walk rows (stay where the per-rank phase ran): {walk}")
    print(
        f"  keeping the device rows (before they stayed; in process): {device}; held "
        f"{print_held} ({print_held / max(device, 1):.1%})"
    )
    print(
        f"  keeping the runtime calls (before the walk split): {runtime}; saved "
        f"{runtime - len(reduced)} ({(runtime - len(reduced)) / max(runtime, 1):.1%})"
    )
    print(f"  keeping also the rows of no category: {before}; saved "
          f"{before - len(reduced)} ({(before - len(reduced)) / max(before, 1):.1%})")  # fmt: skip
    cats, counts = np.unique(reduced["category"], return_counts=True)
    for c, n in sorted(zip(cats.tolist(), counts.tolist()), key=lambda x: -x[1]):
        print(f"  {Category(c).name:16s} {n:9d}  {n / len(reduced):6.1%}")


def _one_analysis(path: str, workers: int | None) -> None:
    """One ``analyze`` in this (fresh) process: wall, CPU, peak RSS, report digest."""
    import hashlib
    import resource
    import time

    from otel_ext.analysis.engine import analyze, to_json

    wall, cpu = time.perf_counter(), time.process_time()
    doc = to_json(analyze(path, workers=workers))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    digest = hashlib.sha256(doc.encode()).hexdigest()[:16]
    print(f"wall {wall:.3f} s  CPU {cpu:.3f} s  peak RSS {rss} MB  report {digest}")


#: run in a fresh process: otel-ext imported from the tree given first (the editable
#: install's finder left out), then one analysis
_RUNNER = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()
                    and "editable" not in type(f).__name__.lower()]
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import otel_ext, cross_rank_rows
assert otel_ext.__file__.startswith(sys.argv[1]), otel_ext.__file__
cross_rank_rows._one_analysis(sys.argv[3], None if sys.argv[4] == "-" else int(sys.argv[4]))
"""


def cost(path: Path, *, baseline: Path, alternations: int, workers: int | None) -> None:
    import subprocess

    here = Path(__file__).resolve().parents[1]
    print(f"{path}: analyze in a fresh process, {baseline} (before) / {here} (now) alternated")
    for _ in range(alternations):
        for mode, tree in (("before", baseline.resolve()), ("now", here)):
            cmd = [sys.executable, "-c", _RUNNER, str(tree), str(here / "benchmarks"),
                   str(path), "-" if workers is None else str(workers)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd="/")
            print(f"  {mode:6s} {out.stdout.strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--cost", type=Path, help="time and memory in process, before and now")
    ap.add_argument("--baseline-tree", type=Path, help="the earlier revision's checkout")
    ap.add_argument("--alternations", type=int, default=2)
    ap.add_argument("--workers", type=int, default=None, help="loader processes")
    args = ap.parse_args()
    if args.cost:
        if args.baseline_tree is None:
            ap.error("--cost needs --baseline-tree DIR (a checkout of the earlier revision)")
        cost(args.cost, baseline=args.baseline_tree, alternations=args.alternations,
             workers=args.workers)  # fmt: skip
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
