"""Benchmark: OTLP-JSON loading against Kineto loading, side by side; bounded memory on a
streaming set; counter correlation grouped once against a scan per series; gzip limits.

    python benchmarks/analysis_otlp_vs_kineto.py [--repeat 3] [--copies 24] [--skip-memory]

* **events/s**: ``load_file`` on the OTLP-JSON traces and metrics of ``otel-ext simulate
  --hosts 2 --chips 8 --requests 50`` (spans on one thread and on one per core, metric
  points on one) and on real profiler traces (``a100_train``, ``v100_train``; events), all plain
  files (neither pays gunzip), timed in turn each round, best of ``--repeat`` rounds in this
  process. Prints each OTLP rate over the Kineto one (target >= 0.5) and per MB/s.
* **memory**: one fresh process loads a folder of ``--copies`` copies of the simulated
  traces (at least 20 times the largest file) in-process and reports its peak RSS against the
  largest file and the whole set.
* **counters**: ``correlate_counters`` for every chip, link and host of the simulated run,
  grouped once (ours) and with the former scan per series (the baseline, same run).
* **gzip bomb**: the time and peak RSS to refuse a 1 GiB gzip bomb.
* **whitespace runs**: a gzipped trace holding 8 and 32 MiB of whitespace (linear time).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces" / "pytorch-profiler"
KINETO = ["a100_train/rank0.json.gz", "v100_train/df_index_resolver.json.gz"]


def _best(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def events_per_second(work: Path, repeat: int) -> None:
    """OTLP spans and metric points against Kineto events, ``load_file`` in this process,
    the inputs timed in turn within each round (a busy machine slows all alike), best of
    ``repeat`` rounds. OTLP spans twice: on one thread and on one thread per core (the
    extractor decodes chunks of one file in parallel; Kineto here is one thread); metric
    points on one thread."""
    from otel_ext.analysis.loaders import _otlp_fast, load_file

    cores = _otlp_fast._cores()
    print(f"cores {cores}, load average {os.getloadavg()[0]:.1f}: the loader's default now "
          f"{_otlp_fast._threads()} thread(s) per file")  # fmt: skip

    def on_threads(n: int) -> Any:
        def run(p: Path) -> Any:
            saved = _otlp_fast._threads
            _otlp_fast._threads = lambda: n  # type: ignore[assignment]
            try:
                return load_file(p)
            finally:
                _otlp_fast._threads = saved

        return run

    otlp = work / "sim" / "traces.jsonl"
    metrics = work / "sim" / "metrics.jsonl"
    cases: list[tuple[str, str, Path, Any]] = [
        ("otlp spans, 1 thread", otlp.name, otlp, on_threads(1)),
        (f"otlp spans, {cores} threads", otlp.name, otlp, on_threads(cores)),
        ("otlp metric points", metrics.name, metrics, on_threads(1)),
    ]
    for rel in KINETO:
        src = TRACES / rel
        if not src.exists():
            continue
        plain = work / (src.name[: -len(".gz")])
        plain.write_bytes(gzip.decompress(src.read_bytes()))
        cases.append(("kineto events", rel, plain, load_file))
    best = [float("inf")] * len(cases)
    counts = [0] * len(cases)
    for _ in range(repeat):
        for i, (_label, _name, path, fn) in enumerate(cases):
            t = time.perf_counter()
            r = fn(path)
            best[i] = min(best[i], time.perf_counter() - t)
            counts[i] = len(r.table) if r.table is not None else len(r.metrics)
    print(f"{'input':<24} {'file':<40} {'events':>8} {'s':>7} {'events/s':>10} {'MB/s':>7}")
    rates = {}
    for (label, name, path, _), secs, n in zip(cases, best, counts):
        mb = path.stat().st_size / 1e6
        rates.setdefault(label, []).append((n / secs, mb / secs))
        print(f"{label:<24} {name:<40} {n:>8} {secs:>7.3f} {n / secs:>10,.0f} {mb / secs:>7.1f}")
    kin = rates.get("kineto events")
    if not kin:
        return
    k = float(np.median([e for e, _ in kin]))
    k_mb = float(np.median([m for _, m in kin]))
    for label, ((ev, mbs),) in ((lb, v) for lb, v in rates.items() if lb.startswith("otlp")):
        print(f"{label} over Kineto events/s (median of {len(kin)} traces): "
              f"{ev / k:.2f} (target >= 0.5); per MB/s {mbs / k_mb:.2f}")  # fmt: skip


#: peak RSS of this process (VmHWM: unlike ru_maxrss it is not inherited across exec)
_HWM = (
    "def hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            return int(line.split()[1])\n"
)
_CHILD = (
    _HWM
    + r"""
import sys, time
from pathlib import Path
from otel_ext.analysis.loaders import load_paths
base = hwm()
t = time.perf_counter()
r = load_paths([sys.argv[1]], workers=1)
secs = time.perf_counter() - t
print(len(r.table), r.table.nbytes(), base, hwm(), secs)
"""
)


def streaming_memory(work: Path, copies: int) -> None:
    src = work / "sim" / "traces.jsonl"
    folder = work / "stream"
    folder.mkdir()
    for i in range(copies):
        shutil.copyfile(src, folder / f"traces-{i:03d}.jsonl")
    largest = src.stat().st_size
    total = largest * copies
    out = subprocess.run([sys.executable, "-c", _CHILD, str(folder)], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout.split()  # fmt: skip
    n, table_bytes, base_kb, peak_kb, secs = (
        int(out[0]),
        int(out[1]),
        int(out[2]),
        int(out[3]),
        float(out[4]),
    )
    grown = (peak_kb - base_kb) * 1024
    print(f"streaming set: {copies} files, largest {largest / 1e6:.1f} MB, total {total / 1e6:.0f} MB "
          f"({total / largest:.0f}x the largest), {n:,} spans in {secs:.1f} s")  # fmt: skip
    print(f"  peak RSS {peak_kb / 1024:.0f} MB (after imports {base_kb / 1024:.0f} MB); growth "
          f"{grown / 1e6:.0f} MB = {grown / largest:.1f}x the largest file, "
          f"{grown / total:.2f}x the set; the table itself {table_bytes / 1e6:.0f} MB")  # fmt: skip


def counter_correlation(work: Path, repeat: int) -> None:
    from otel_ext.analysis.cross import counter_evidence as counters
    from otel_ext.analysis.loaders import load_file

    m = load_file(work / "sim" / "metrics.jsonl").metrics
    targets = [
        *m.strings["device"][1:],
        *m.strings["link"][1:],
        *sorted(set(m.strings["host"][1:])),
    ]

    def scan(points: Any, name: str, column: str, value: str) -> tuple[np.ndarray, np.ndarray]:
        mask = points.where("name", name) & points.where(column, value)
        if not mask.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        t, v = points.time_ns[mask], points.values[mask]
        is_sum = points.strings["kind"][int(points.codes["kind"][mask][0])] == "sum"
        ut, inv = np.unique(t, return_inverse=True)
        agg = np.zeros(len(ut))
        np.add.at(agg, inv.reshape(-1), v)
        return counters._rate(ut, agg) if is_sum and name not in counters._COUNTS else (ut, agg)

    def ours() -> Any:
        m.__dict__.pop("_series_index", None)  # build the index inside the timing
        return [counters.correlate_counters(m, t) for t in targets]

    ours_s, a = _best(ours, repeat)
    real = counters.series_of
    counters.series_of = scan  # type: ignore[assignment]
    try:
        scan_s, b = _best(lambda: [counters.correlate_counters(m, t) for t in targets], repeat)
    finally:
        counters.series_of = real
    print(f"counters: {len(targets)} targets, {len(m):,} points: grouped once {ours_s:.3f} s, "
          f"scan per series {scan_s:.3f} s ({scan_s / ours_s:.1f}x); same results: {a == b}")  # fmt: skip


def gzip_bomb(work: Path) -> None:
    bomb = work / "bomb.json.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = b" " * (1 << 20)
    with bomb.open("wb") as f:
        f.write(c.compress(b'{"traceEvents": ['))
        for _ in range(1024):
            f.write(c.compress(piece))
        f.write(c.compress(b"]}") + c.flush())
    code = _HWM + (
        "import time,sys\nfrom otel_ext.analysis.loaders import load_paths\n"
        "t=time.perf_counter()\nr=load_paths([sys.argv[1]],workers=1,keep_going=True)\n"
        "print(time.perf_counter()-t, hwm())\n"
        "print(r.skipped[0].reason)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.splitlines()  # fmt: skip
    secs, kb = out[0].split()
    print(f"gzip bomb: {bomb.stat().st_size / 1e6:.1f} MB inflating to 1 GiB refused in "
          f"{float(secs):.2f} s, peak RSS {int(kb) / 1024:.0f} MB: {out[1][:90]}")  # fmt: skip


def whitespace_runs(work: Path) -> None:
    """Load time of a gzipped trace holding a long run of whitespace, at 8 and 32 MiB: linear
    time gives a ratio near 4 (the former loader, commit 4498955: 0.54 s and 7.12 s, 13.1)."""
    from otel_ext.analysis.loaders import load_paths

    ev = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 1.0, "dur": 2.0}'
    times = []
    for mib in (8, 32):
        f = work / f"ws{mib}.json.gz"
        text = '{"traceEvents": [' + ev + "," + " " * (mib << 20) + ev + "]}"
        f.write_bytes(gzip.compress(text.encode(), 1))
        secs, r = _best(lambda f=f: load_paths([f], workers=1), 2)
        assert len(r.table) == 2
        times.append(secs)
    print(f"whitespace run: 8 MiB {times[0]:.2f} s, 32 MiB {times[1]:.2f} s "
          f"(ratio {times[1] / times[0]:.1f}; linear is 4)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--copies", type=int, default=24)
    ap.add_argument("--skip-memory", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", "2", "--chips", "8",
             "--requests", "50", "--no-timeline", "--quiet", "--out", str(work / "sim")],
            check=True, cwd=ROOT,
        )  # fmt: skip
        events_per_second(work, args.repeat)
        counter_correlation(work, args.repeat)
        if not args.skip_memory:
            streaming_memory(work, args.copies)
            gzip_bomb(work)
            whitespace_runs(work)


if __name__ == "__main__":
    main()
