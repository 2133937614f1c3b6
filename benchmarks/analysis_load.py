"""Benchmark: load + core analyses (otel-ext) vs Holistic Trace Analysis 0.5.0, same files.

    python benchmarks/analysis_load.py [--repeat 3] [--ranks64-events 0] [--scale-ranks 100]
                                       [--full] [--no-cscan] [--materialised]
                                       [--cases two_rank ...]

Each measurement runs in a fresh subprocess, ``--repeat`` times, best run kept (the machine
may be shared). Times per tool: ``load + analyses`` (the issue's measure), wall-clock from
after the imports to the answer; ``process``, the whole process as a user sees it
(interpreter start-up and imports included); and ``cpu``, the CPU seconds of the whole
process (and of our pool's workers), which a busy machine disturbs least. ``every
analysis``: our whole report (``analyze``: alignment, causality, collectives, stragglers,
critical path, findings and the rest), load included, in its own fresh process, with its
speed and peak memory against HTA's whole process beside (``speed``, ``MB``, ``mem``; the
case ``v100_train_x8``, eight copies of ``v100_train`` as ranks 0-7, is issue 30's set). Peak memory, alike for both: the larger of the main process's peak RSS and the peak, sampled
every 10 ms, of the process's and its pool workers' PSS together (HTA, too, parses several
files in a process pool). HTA runs from its own
virtual environment (``OTEL_EXT_HTA_VENV``, default ``/tmp/otel-ext-hta-venv``) when it
exists. Prints one table with ratios measured in the same run. ``--full`` runs the scaling
case at 1,000 ranks × 20,000 events (analyses on a generated table). ``--no-cscan`` loads
without the compiled extractor (the ``msgspec`` path alone), for comparison. The scaling case's
table stores its uniform columns as constant columns, as the loaders do (``--materialised``:
every column a full array, as before).
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
import json, os, resource, sys, time
t0 = time.perf_counter()
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
from _pss import start_pss_sampler
peak_kb, stop = start_pss_sampler()  # this process and its pool workers, every 10 ms
paths = sys.argv[1:]
if paths and paths[0] == "--no-cscan":  # the msgspec path alone (pool workers fork from here)
    paths = paths[1:]
    from otel_ext.analysis.loaders import _kineto_fast
    _kineto_fast._cscan = None
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.rank.breakdown import (temporal_breakdown, idle_breakdown, kernel_breakdown,
    launch_stats, drop_last_step)
from otel_ext.analysis.rank.overlap import comm_comp_overlap
t1 = time.perf_counter()
r = load_paths(paths)
t = drop_last_step(r.table)
tb = temporal_breakdown(t); idle_breakdown(t); comm_comp_overlap(t); kernel_breakdown(t); launch_stats(t)
seconds = time.perf_counter() - t1
stop.set()
cpu = sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
          for f in ("ru_utime", "ru_stime"))
print(json.dumps({"seconds": seconds, "imports": t1 - t0, "events": len(t), "cpu": cpu,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "sampled_total_kb": peak_kb[0],
                  "temporal": [x.as_dict() for x in tb]}))
"""

FULL = r"""
import json, os, resource, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
from _pss import start_pss_sampler
peak_kb, stop = start_pss_sampler()  # this process and its pool workers, every 10 ms
from otel_ext.analysis.engine import analyze
t1 = time.perf_counter()
doc = analyze(sys.argv[1:])
seconds = time.perf_counter() - t1
stop.set()
cpu = sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
          for f in ("ru_utime", "ru_stime"))
print(json.dumps({"seconds": seconds, "findings": len(doc["findings"]), "cpu": cpu,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "sampled_total_kb": peak_kb[0]}))
"""

SCALE = r"""
import json, resource, sys, time
import numpy as np
from otel_ext.analysis.table import EventTable, NUMERIC_COLUMNS, STRING_COLUMNS, constant_column
from otel_ext.analysis.rank.breakdown import temporal_breakdown, idle_breakdown, launch_stats
from otel_ext.analysis.rank.overlap import comm_comp_overlap
ranks, per = int(sys.argv[1]), int(sys.argv[2])
n = ranks * per
rng = np.random.default_rng(0)
full = "--materialised" in sys.argv  # else uniform columns constant, as the loaders build them
fill = (lambda v, t: np.full(n, v, dtype=t)) if full else (lambda v, t: constant_column(v, t, n))
cols = {k: fill(d, t) for k, (t, d) in NUMERIC_COLUMNS.items()}
cols["rank"] = np.repeat(np.arange(ranks, dtype=np.int32), per)
start = np.cumsum(rng.integers(1_000, 20_000, n)).astype(np.int64)
cols["start_ns"] = start
cols["end_ns"] = start + rng.integers(500, 30_000, n)
cols["category"] = rng.choice(np.array([3, 3, 3, 4, 5], dtype=np.int8), n)
cols["stream"] = rng.choice(np.array([7, 13, 21]), n)
for s in STRING_COLUMNS:
    cols[s] = np.zeros(n, dtype=np.int32) if full else constant_column(0, np.int32, n)
t = EventTable(cols, {s: [""] for s in STRING_COLUMNS})
t0 = time.perf_counter()
temporal_breakdown(t); idle_breakdown(t); comm_comp_overlap(t); launch_stats(t)
print(json.dumps({"seconds": time.perf_counter() - t0, "events": n,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """One fresh run: the script's JSON plus ``wall`` (the whole process) and ``peak_kb``."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        return {"error": out.stderr[-300:], "wall": wall}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["wall"] = wall
    res["peak_kb"] = _peak_kb(res)
    return res


def _best(runs: list[dict]) -> dict:
    """Each time its best run's, memory its largest peak (errors win: they are reported)."""
    errors = [r for r in runs if "error" in r]
    if errors:
        return errors[0]
    best = dict(min(runs, key=lambda r: r["wall"]))
    for k in ("seconds", "cpu"):
        best[k] = min(r.get(k, 0.0) for r in runs)
    best["peak_kb"] = max(r["peak_kb"] for r in runs)
    return best


def _peak_kb(res: dict) -> int:
    """Peak memory, measured alike for both tools: the larger of the main process's peak RSS
    and the sampled peak of the process's and its pool workers' PSS together (shared pages
    counted once; HTA also parses several files in a process pool)."""
    return max(res.get("maxrss_kb", 0), res.get("sampled_total_kb", 0))


def _agree(ours: dict, hta: dict) -> str:
    """Largest difference (percentage points) of idle/compute/non-compute shares per rank."""
    mine = {r["rank"]: r for r in ours.get("temporal", [])}
    if len(mine) == 1 and -1 in mine:
        mine = {0: mine[-1]}  # HTA calls a file without a rank "rank 0"
    worst = 0.0
    for h in hta.get("temporal", []):
        o = mine.get(h["rank"])
        if o is None:
            return "ranks?"
        for k in ("idle_pct", "compute_pct", "non_compute_pct"):
            worst = max(worst, abs(o[k] - h[k]))
    return f"{worst:.2f}"


def make_64_ranks(src: Path, dest: Path, events: int, ranks: int = 64) -> list[Path]:
    """``ranks`` rank files cut from a real trace (its first ``events`` events), one rank each."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"][:events] if events else doc["traceEvents"]
    files = []
    for r in range(ranks):
        doc2 = {k: v for k, v in doc.items() if k != "traceEvents"}
        doc2["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        doc2["traceEvents"] = evs
        f = dest / f"rank{r}.json.gz"
        f.write_bytes(gzip.compress(json.dumps(doc2).encode(), compresslevel=1))
        files.append(f)
    return files


def _make_ranks_apart(src: Path, dest: Path, events: int, ranks: int) -> None:
    """:func:`make_64_ranks` in a child process: on Linux a child's peak RSS
    (``ru_maxrss``) starts at its parent's RSS when it was forked (``exec`` keeps the high-water
    mark), so a parent that had parsed a whole trace would inflate every measured peak."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'benchmarks'); "
        "from analysis_load import make_64_ranks; "
        "make_64_ranks(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(src), str(dest), str(events), str(ranks)],
        check=True,
        cwd=ROOT,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks64-events", type=int, default=0, help="0: the whole source file")
    ap.add_argument("--scale-ranks", type=int, default=100)
    ap.add_argument("--scale-events", type=int, default=20_000)
    ap.add_argument("--full", action="store_true", help="scaling at 1,000 ranks x 20,000 events")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    ap.add_argument("--no-cscan", action="store_true", help="without the compiled extractor")
    ap.add_argument(
        "--materialised",
        action="store_true",
        help="scaling case with every column a full array (no constant columns)",
    )
    ap.add_argument(
        "--cases",
        nargs="*",
        default=[
            "two_rank",
            "a100_train",
            "v100_train",
            "diff_a100_vs_v100",
            "ns_resolution",
            "nccl_collectives",
            "deepseek_v3_train_ep64",
            "ranks64",
            "v100_train_x8",
        ],
        help="folders of ../shared/traces/pytorch-profiler, and the built sets ranks64 (64 copies"
        " of two_rank rank 0) and v100_train_x8 (8 copies of v100_train)",
    )
    args = ap.parse_args()
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1")
    have_hta = HTA_PY.exists()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(c, [TRACES / c]) for c in args.cases if (TRACES / c).exists()]
        src = TRACES / "two_rank" / "sampled_rank-0.json.gz"
        if "ranks64" in args.cases and src.exists():
            d64 = Path(tmp) / "ranks64"
            d64.mkdir()
            _make_ranks_apart(src, d64, args.ranks64_events, 64)
            cases.append(("64 ranks (copies of two_rank rank 0)", [d64]))
        v100 = TRACES / "v100_train" / "df_index_resolver.json.gz"
        if "v100_train_x8" in args.cases and v100.exists():  # issue 30's 8-rank V100 set
            d8 = Path(tmp) / "v100x8"
            d8.mkdir()
            _make_ranks_apart(v100, d8, 0, 8)
            cases.append(("8 ranks (copies of v100_train)", [d8]))
        for name, paths in cases:
            ours_runs, hta_runs = [], []
            for _ in range(args.repeat):  # interleaved: a busy moment hits both tools alike
                flag = ["--no-cscan"] if args.no_cscan else []
                ours_runs.append(run([sys.executable, "-c", OURS, *flag, *map(str, paths)]))
                if have_hta:
                    hta_cmd = [str(HTA_PY), str(ROOT / "benchmarks" / "hta_runner.py")]
                    hta_runs.append(run([*hta_cmd, str(paths[0])], env))
            full = _best([run([sys.executable, "-c", FULL, *map(str, paths)])
                          for _ in range(args.repeat)])  # fmt: skip
            rows.append((name, _best(ours_runs), _best(hta_runs) if hta_runs else {}, full))
    print(
        "load + analyses: the issue's measure, wall-clock from after the imports to the answer;"
        " process: the whole process (interpreter start-up and imports included); every"
        " analysis: our whole report (alignment, causality, collectives, stragglers, critical"
        " path, findings ...), load included; speed, MB, mem: that whole process against HTA's"
        " (wall ratio, peak memory, memory ratio)"
    )
    print(
        f"{'case':38} {'load+analyses s':>15} {'HTA s':>6} {'ratio':>6} "
        f"{'process s':>9} {'HTA s':>6} {'ratio':>6} {'cpu s':>6} {'HTA cpu':>7} {'ratio':>6} "
        f"{'ours MB':>7} {'HTA MB':>6} {'mem':>5} {'agree':>6} {'every analysis s':>16} "
        f"{'speed':>6} {'MB':>5} {'mem':>5}"
    )
    for name, o, h, full in rows:
        if "error" in o:
            print(f"{name:38} ours failed: {o['error']}")
            continue
        omb = o["peak_kb"] / 1024
        hmb = h.get("peak_kb", 0) / 1024
        ok = h and "error" not in h
        hw, hs = (h["wall"], h["seconds"]) if ok else (0.0, 0.0)
        sp = f"{hw / o['wall']:.1f}x" if ok else "-"
        spw = f"{hs / o['seconds']:.1f}x" if ok else "-"
        mr = f"{omb / hmb:.2f}" if ok and hmb else "-"
        hc = h.get("cpu", 0.0) if ok else 0.0
        spc = f"{hc / o['cpu']:.1f}x" if hc and o.get("cpu") else "-"
        every = f"{full['seconds']:.2f}" if "seconds" in full else full.get("error", "-")[-40:]
        # the whole `analyze` (every analysis, its own process) against HTA's whole process:
        # speed (wall) and peak memory side by side
        fmb = full.get("peak_kb", 0) / 1024
        fsp = f"{hw / full['wall']:.1f}x" if ok and "seconds" in full else "-"
        fmr = f"{fmb / hmb:.2f}" if ok and hmb and fmb else "-"
        print(
            f"{name:38} {o['seconds']:15.3f} {hs:6.2f} {spw:>6} {o['wall']:9.2f} {hw:6.2f} "
            f"{sp:>6} {o.get('cpu', 0):6.2f} {hc:7.2f} {spc:>6} "
            f"{omb:7.0f} {hmb:6.0f} {mr:>5} {_agree(o, h) if ok else '-':>6} {every:>16} "
            f"{fsp:>6} {fmb:5.0f} {fmr:>5}"
        )
    ranks = 1000 if args.full else args.scale_ranks
    for r in sorted({max(1, ranks // 10), ranks}):
        flag = ["--materialised"] if args.materialised else []
        s = run([sys.executable, "-c", SCALE, str(r), str(args.scale_events), *flag])
        per = s.get("seconds", 0) / max(1, r * args.scale_events) * 1e9
        print(
            f"scaling: {r} ranks x {args.scale_events} events: analyses {s.get('seconds', 0):.2f} s "
            f"({per:.0f} ns/event), peak {s.get('maxrss_kb', 0) / 1024:.0f} MB {s.get('error', '')}"
        )


if __name__ == "__main__":
    main()
