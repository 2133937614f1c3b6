"""Sensitivity and specificity of the cross-rank verdicts on real multi-rank traces.

Metamorphic rewrites of real data (see ``tests/metamorphic.py``), one per seed:

* sensitivity: the DLRM 8-rank job with a random rank made 4–10 ms late before each
  collective, with and without random per-rank clock offsets (±3 s): a hit when that rank
  is the first straggler row and the only straggler/throttle finding;
* offset recovery: ranks 4–7 declared one host and shifted by ±(5 ms–2 s): a hit when every
  one of them is shifted, by the truth within its bound, with a bound of at most 5 ms;
* specificity: two_rank (two ranks of a 128-rank job) as recorded and under random per-rank
  clock offsets, a null set: a hit when no straggler, throttle, slow-link or slow-nic finding
  is made.

Usage: ``python benchmarks/truth_dlrm.py [--seeds N]`` (default 50).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from metamorphic import make_late, scale_kernels, shift_clock  # noqa: E402

from otel_ext.analysis.engine import analyze  # noqa: E402
from otel_ext.analysis.loaders import LoadResult, load_paths  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "pytorch-profiler"
SLOW = ("straggler", "throttle")


def _run(base: LoadResult, table, **kw):
    return analyze(LoadResult(table, base.inputs, [], base.metrics), **kw)


def _null_ok(doc) -> bool:
    return not [f for f in doc["findings"] if f["kind"] in (*SLOW, "slow-link", "slow-nic")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    args = ap.parse_args()
    dlrm = load_paths([TRACES / "param_dlrm_v100_8rank"], workers=1)
    pair = load_paths([TRACES / "two_rank"], workers=1)
    t0 = time.perf_counter()
    hits = {"late": 0, "late+offsets": 0, "host offset": 0, "null": 0, "null+offsets": 0}
    hits["late+shorter"] = 0
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        rank = int(rng.integers(0, 8))
        delays = rng.integers(4_000_000, 10_000_001, size=8).tolist()
        late = make_late(dlrm.table, rank, delays)
        for name, table in (("late", late), ("late+offsets", late)):
            if name == "late+offsets":
                for r in range(1, 8):
                    table = shift_clock(table, [r], int(rng.integers(-3 * 10**9, 3 * 10**9)))
            doc = _run(dlrm, table)
            slow = [f["evidence"]["rank"] for f in doc["findings"] if f["kind"] in SLOW]
            hits[name] += int(doc["stragglers"][0]["rank"] == rank and slow == [rank])
        # the same late rank with every kernel shortened by a factor in 0.3-0.9 (as
        # tests/analysis/test_truth_dlrm.py::test_late_rank_survives_shorter_kernels draws it)
        factor = float(np.random.default_rng(seed).uniform(0.3, 0.9))
        doc = _run(dlrm, scale_kernels(late, factor))
        slow = [f["evidence"]["rank"] for f in doc["findings"] if f["kind"] in SLOW]
        hits["late+shorter"] += int(doc["stragglers"][0]["rank"] == rank and slow == [rank])
        off = int(rng.integers(5_000_000, 2_000_000_000)) * (1 if rng.random() < 0.5 else -1)
        hosts = {r: ("A" if r < 4 else "B") for r in range(8)}
        doc = _run(dlrm, shift_clock(dlrm.table, [4, 5, 6, 7], off), clock_of=hosts)
        ok = all(
            r["clock_status"] == "applied"
            and r["clock_bound_ns"] <= 5_000_000
            and abs(r["clock_offset_ns"] - off) <= r["clock_bound_ns"]
            for r in doc["ranks"]
            if r["rank"] >= 4
        )
        hits["host offset"] += int(ok)
        table = shift_clock(pair.table, [1], int(rng.integers(-3 * 10**9, 3 * 10**9)))
        hits["null+offsets"] += int(_null_ok(_run(pair, table)))
    hits["null"] = int(_null_ok(_run(pair, pair.table)))  # as recorded: one case
    secs = time.perf_counter() - t0
    n = args.seeds
    print(f"seeds: {n} ({secs:.1f} s)")
    print(
        f"sensitivity, late rank named first and alone:        {hits['late']}/{n} = {hits['late'] / n:.3f}"
    )
    print(
        f"sensitivity, same under per-rank clock offsets:       {hits['late+offsets']}/{n} = {hits['late+offsets'] / n:.3f}"
    )
    print(
        f"sensitivity, same with kernels shortened 0.3-0.9x:    {hits['late+shorter']}/{n} = {hits['late+shorter'] / n:.3f}"
    )
    print(
        f"host offset recovered within its bound (<= 5 ms):     {hits['host offset']}/{n} = {hits['host offset'] / n:.3f}"
    )
    print(f"specificity, two_rank as recorded (one case):         {hits['null']}/1")
    print(
        f"specificity, two_rank under random clock offsets:      {hits['null+offsets']}/{n} = {hits['null+offsets'] / n:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
