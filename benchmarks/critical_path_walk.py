"""Benchmark: the critical path's walk on real traces, against an earlier version of it.

Loads each trace once, then times :func:`otel_ext.analysis.cross.critical_path.critical_path`
(best of ``--repeats``) for the working tree's module and for the module as it was at
``--baseline`` (a git revision, read with ``git show``), in the same process, and prints the
times, their ratio and each path's top categories.

Run: ``.venv/bin/python benchmarks/critical_path_walk.py [--baseline 8363eba~1] TRACE...``
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from otel_ext.analysis.cross import critical_path as current
from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.loaders import load_paths

ROOT = Path(__file__).resolve().parents[1]


def _module_at(rev: str) -> Any:
    src = subprocess.run(
        ["git", "show", f"{rev}:otel_ext/analysis/cross/critical_path.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "critical_path_baseline.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("critical_path_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--baseline", default="8363eba~1")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    base = _module_at(args.baseline)
    for trace in args.traces:
        table = load_paths([trace]).table
        match = match_collectives(table)
        times, tops = {}, {}
        for name, mod in (("baseline", base), ("current", current)):
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                cp = mod.critical_path(table, match)
                best = min(best, time.perf_counter() - t0)
            times[name] = best
            top = sorted(cp.by_category.items(), key=lambda x: -x[1])[:3]
            tops[name] = ", ".join(f"{c} {100 * ns / cp.length_ns:.1f}%" for c, ns in top)
        print(f"{Path(trace).name}: {len(table)} rows; baseline {times['baseline']:.3f} s "
              f"({tops['baseline']}); current {times['current']:.3f} s ({tops['current']}); "
              f"ratio {times['current'] / times['baseline']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
