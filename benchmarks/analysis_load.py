"""Benchmark: load + core analyses (otel-ext) vs Holistic Trace Analysis 0.5.0, same files.

    python benchmarks/analysis_load.py [--ranks64-events 20000] [--scale-ranks 100] [--full]

Each measurement runs in a fresh subprocess (wall time of the whole process, imports
included, and peak RSS from ``resource.getrusage``). HTA runs from its own virtual
environment (``OTEL_EXT_HTA_VENV``, default ``/tmp/otel-ext-hta-venv``) when it exists.
Prints one table with ratios measured in the same run. ``--full`` runs the scaling case at
1,000 ranks × 20,000 events.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces" / "pytorch-profiler"
HTA_PY = Path(os.environ.get("OTEL_EXT_HTA_VENV", "/tmp/otel-ext-hta-venv")) / "bin" / "python"

OURS = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.breakdown import (temporal_breakdown, idle_breakdown, kernel_breakdown,
    launch_stats, drop_last_step)
from otel_ext.analysis.overlap import comm_comp_overlap
t = drop_last_step(load_paths(sys.argv[1:]).table)
tb = temporal_breakdown(t); idle_breakdown(t); comm_comp_overlap(t); kernel_breakdown(t); launch_stats(t)
print(json.dumps({"seconds": time.perf_counter() - t0, "events": len(t),
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""

SCALE = r"""
import json, resource, sys, time
import numpy as np
from otel_ext.analysis.table import EventTable, NUMERIC_COLUMNS, STRING_COLUMNS
from otel_ext.analysis.breakdown import temporal_breakdown, idle_breakdown, launch_stats
from otel_ext.analysis.overlap import comm_comp_overlap
ranks, per = int(sys.argv[1]), int(sys.argv[2])
n = ranks * per
rng = np.random.default_rng(0)
cols = {k: np.full(n, d, dtype=t) for k, (t, d) in NUMERIC_COLUMNS.items()}
cols["rank"] = np.repeat(np.arange(ranks, dtype=np.int32), per)
start = np.cumsum(rng.integers(1_000, 20_000, n)).astype(np.int64)
cols["start_ns"] = start
cols["end_ns"] = start + rng.integers(500, 30_000, n)
cols["category"] = rng.choice(np.array([3, 3, 3, 4, 5], dtype=np.int8), n)
cols["stream"] = rng.choice(np.array([7, 13, 21]), n)
for s in STRING_COLUMNS:
    cols[s] = np.zeros(n, dtype=np.int32)
t = EventTable(cols, {s: [""] for s in STRING_COLUMNS})
t0 = time.perf_counter()
temporal_breakdown(t); idle_breakdown(t); comm_comp_overlap(t); launch_stats(t)
print(json.dumps({"seconds": time.perf_counter() - t0, "events": n,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        return {"error": out.stderr[-300:], "wall": wall}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["wall"] = wall
    return res


def make_64_ranks(src: Path, dest: Path, events: int) -> list[Path]:
    """64 rank files cut from a real trace (its first ``events`` events), one rank each."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"][:events] if events else doc["traceEvents"]
    files = []
    for r in range(64):
        doc2 = {k: v for k, v in doc.items() if k != "traceEvents"}
        doc2["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": 64}
        doc2["traceEvents"] = evs
        f = dest / f"rank{r}.json.gz"
        f.write_bytes(gzip.compress(json.dumps(doc2).encode(), compresslevel=1))
        files.append(f)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks64-events", type=int, default=0, help="0: the whole source file")
    ap.add_argument("--scale-ranks", type=int, default=100)
    ap.add_argument("--scale-events", type=int, default=20_000)
    ap.add_argument("--full", action="store_true", help="scaling at 1,000 ranks x 20,000 events")
    ap.add_argument(
        "--cases",
        nargs="*",
        default=[
            "two_rank",
            "a100_train",
            "v100_train",
            "diff_a100_vs_v100",
            "deepseek_v3_train_ep64",
        ],
    )
    args = ap.parse_args()
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1")
    have_hta = HTA_PY.exists()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(c, [TRACES / c]) for c in args.cases if (TRACES / c).exists()]
        src = TRACES / "two_rank" / "sampled_rank-0.json.gz"
        if src.exists():
            d64 = Path(tmp) / "ranks64"
            d64.mkdir()
            make_64_ranks(src, d64, args.ranks64_events)
            cases.append(("64 ranks (copies of two_rank rank 0)", [d64]))
        for name, paths in cases:
            ours = run([sys.executable, "-c", OURS, *map(str, paths)])
            hta = (
                run([str(HTA_PY), str(ROOT / "benchmarks" / "hta_runner.py"), str(paths[0])], env)
                if have_hta
                else {}
            )
            rows.append((name, ours, hta))
    print(
        f"{'case':45} {'ours s':>8} {'HTA s':>8} {'speed-up':>9} {'ours MB':>8} {'HTA MB':>8} {'mem ratio':>9}"
    )
    for name, o, h in rows:
        omb = max(o.get("maxrss_kb", 0), o.get("children_kb", 0)) / 1024
        hmb = h.get("maxrss_kb", 0) / 1024
        hs = h.get("wall")
        sp = f"{hs / o['wall']:.1f}x" if hs and "error" not in h else "-"
        mr = f"{omb / hmb:.2f}" if hmb else "-"
        print(f"{name:45} {o['wall']:8.2f} {hs or 0:8.2f} {sp:>9} {omb:8.0f} {hmb:8.0f} {mr:>9}")
    ranks = 1000 if args.full else args.scale_ranks
    for r in sorted({max(1, ranks // 10), ranks}):
        s = run([sys.executable, "-c", SCALE, str(r), str(args.scale_events)])
        print(
            f"scaling: {r} ranks x {args.scale_events} events: analyses {s.get('seconds', 0):.2f} s, "
            f"peak {s.get('maxrss_kb', 0) / 1024:.0f} MB, {s.get('error', '')}"
        )


if __name__ == "__main__":
    main()
