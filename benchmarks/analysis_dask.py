"""Benchmark: ``otel-ext analyze`` in process against ``--scheduler local:N`` on the same sets.

    python benchmarks/analysis_dask.py [--sets dlrm,corpus,sim] [--sim 4x8] [--requests 300]
                                       [--workers 2] [--repeat 1] [--dir DIR]

Sets: ``dlrm`` (the real 8-rank DLRM job, ``../shared/traces/pytorch-profiler/
param_dlrm_v100_8rank``), ``corpus`` (every real profiler trace under
``../shared/traces/pytorch-profiler``, with ``--keep-going``: 40 MB of gzip, many separate
captures), ``folders`` (each folder of those traces alone, in process and through the cluster:
only whether the reports are the same) and ``sim`` (``otel-ext simulate --hosts H --chips C --requests R --no-timeline``,
written to ``--dir`` and reused).

Printed per set:

* ``same``: the JSON report through Dask equals the in-process one, text for text (True/False);
* wall seconds in process (``analyze(paths)``: the local process pool as the CLI uses it), on
  Dask with a cluster already running (``warm``: ``scheduler=ADDRESS``) and with
  ``local:N`` started and stopped around the analysis (``cold``, what the CLI's ``local:N``
  costs), each the median of ``--repeat``, and the ratios against in process;
* bytes to the client, pickled (what Dask serialises, before any compression, which is off
  without ``lz4``), against the input on disk and inflated: *now* what the workers send
  (each file's summary: record, skipped records, metric points, step record, a two-rows-per-
  rank sketch; then each partition's per-rank tables and the rows the cross-rank passes
  read), measured on the warm run; *loaded tables* what the loading-only backend sent
  before (each file's whole decoded table, metric points and skipped records), and the
  ratio now / loaded tables;
* the per-rank round packed against its answers unpacked (what they weighed before the
  packing, pickled on the workers in the same run) and by kind (each kind pickled alone, so a
  dictionary two kinds share counts in each), the walk round packed and unpacked, and the
  packing's own cost on the set's reduced rows in process;
* worker memory: each worker's peak RSS growth over its RSS once the loaders are imported
  (``VmHWM`` after a reset through ``/proc/self/clear_refs``; a fresh ``LocalCluster`` per
  set), the larger of the workers, per GB of the set's largest inflated file (a worker
  decodes one file per thread at a time; the client fetches each finished table at once) and
  per GB of the whole inflated set.

On a machine with as many cores as workers the Dask run cannot be faster than the local pool
(the same cores, plus the transfers and the scheduler): the overhead is what this measures.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRACES = ROOT.parent / "shared" / "traces" / "pytorch-profiler"


def _local_cluster(distributed: Any, workers: int) -> Any:
    """A quiet local cluster of ``workers`` one-thread worker processes."""
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.CRITICAL,
    )


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _worker_reset_peak() -> int:
    """Run on a worker: import what the loading imports, reset the peak RSS to the current
    (``/proc/self/clear_refs``), and answer the current RSS (KiB)."""
    import otel_ext.analysis.loaders
    import otel_ext.analysis.serving.requests  # noqa: F401

    Path("/proc/self/clear_refs").write_text("5")
    return _status_kb("VmRSS")


def _worker_peak() -> int:
    """Run on a worker: its peak RSS (KiB) since the last reset."""
    return _status_kb("VmHWM")


def _inflated(path: Path) -> int:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            n = 0
            while chunk := f.read(1 << 20):
                n += len(chunk)
            return n
    return path.stat().st_size


def _client_bytes(files: list[Path], keep_going: bool) -> int:
    from otel_ext.analysis.loaders import load_file
    from otel_ext.errors import InputError

    total = 0
    for f in files:
        try:
            total += len(pickle.dumps(load_file(f, keep_going=keep_going), protocol=5))
        except InputError:
            continue
    return total


def _timed(fn: Any, repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _sim(folder: Path, size: str, requests: int) -> Path:
    hosts, chips = (int(x) for x in size.lower().split("x"))
    out = folder / f"sim-{hosts}x{chips}-{requests}"
    if not (out / "truth.json").is_file():
        cmd = [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", str(hosts),
               "--chips", str(chips), "--requests", str(requests), "--no-timeline", "--quiet",
               "--out", str(out)]  # fmt: skip
        subprocess.run(cmd, check=True)
    return out


def _pack_cost(paths: list[Path], keep_going: bool) -> str:
    """The packing's own cost on the set's reduced rows as one partition leaves them (in
    process, best of 5): ``PackedTable.of`` and ``unpack``, against pickling them."""
    import numpy as np

    from otel_ext.analysis.loaders import load_paths
    from otel_ext.analysis.rank.per_rank import per_rank_tables
    from otel_ext.analysis.runs import separate_captures
    from otel_ext.analysis.scaleout.packed_rows import PackedTable
    from otel_ext.analysis.steps import select_steps

    load = load_paths(paths, keep_going=keep_going, workers=1)
    formats = {i.get("path", ""): i.get("format", "") for i in load.inputs}
    whole, _ = separate_captures(load.table, formats=formats, one_run=False)
    whole, _ = select_steps(whole, "complete")
    (rows,) = per_rank_tables(whole, positions=np.arange(len(whole)), hold=True).reduced

    def best(fn: Any) -> float:
        out = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return min(out)

    packed = PackedTable.of(rows)
    return (
        f"{len(rows)} rows: pack {best(lambda: PackedTable.of(rows)) * 1e3:.1f} ms, unpack "
        f"{best(packed.unpack) * 1e3:.1f} ms (pickling them unpacked "
        f"{best(lambda: pickle.dumps(rows, protocol=5)) * 1e3:.1f} ms)"
    )


def run_set(name: str, paths: list[Path], *, workers: int, repeat: int, keep_going: bool) -> None:
    import distributed

    from otel_ext.analysis.engine import analyze, to_json
    from otel_ext.analysis.scaleout import dask_cluster as dask_backend

    t_local, doc_local = _timed(lambda: analyze(paths, keep_going=keep_going, scheduler=""), repeat)
    local_text = to_json(doc_local)
    files = [Path(i["path"]) for i in doc_local["inputs"] if i["status"] == "loaded"]
    disk = sum(f.stat().st_size for f in files)
    inflated = [_inflated(f) for f in files]

    cluster = _local_cluster(distributed, workers)
    try:
        with dask_backend.connect(cluster.scheduler_address) as dc:
            dc.measure = True
            base = dc.client.run(_worker_reset_peak)
            t_warm, doc_warm = _timed(
                lambda: analyze(paths, keep_going=keep_going, scheduler=dc), repeat
            )
            peak = dc.client.run(_worker_peak)
            received = dc.received_bytes
            rounds = dict(dc.received_by_round)
            by_kind = {k: list(v) for k, v in dc.received_by_category.items()}
            unpacked = dc.unpacked_round_bytes
            walk_unpacked = dc.unpacked_walk_bytes
            reduced_rows = dc.reduced_rows
            walked = (dc.pieces_fetched, dc.walked_partitions)
    finally:
        cluster.close()
    t_cold, doc_cold = _timed(
        lambda: analyze(paths, keep_going=keep_going, scheduler=f"local:{workers}"), repeat
    )
    same = to_json(doc_warm) == local_text and to_json(doc_cold) == local_text
    sent = _client_bytes(files, keep_going)
    growth_mb = max(peak[w] - base[w] for w in peak) / 1024
    largest_gb = max(inflated) / 1e9
    print(
        f"{name}: {len(files)} files, {disk / 1e6:.1f} MB on disk, {sum(inflated) / 1e6:.1f} MB "
        f"inflated (largest file {max(inflated) / 1e6:.1f} MB), "
        f"{doc_local['run']['events']} events, {doc_local['run']['metric_points']} metric points"
    )
    print(f"  same report: {same}")
    print(
        f"  rows the cross-rank passes read (sent): {reduced_rows} of "
        f"{doc_local['run']['events']} events; critical-path pieces from {walked[0]} of "
        f"{walked[1]} partitions walked on the workers (those the path can reach)"
    )
    print(
        f"  in process {t_local:.2f} s; Dask local:{workers} warm {t_warm:.2f} s "
        f"(x{t_warm / t_local:.2f}), cold {t_cold:.2f} s (x{t_cold / t_local:.2f})"
    )
    by_round = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in rounds.items())
    print(
        f"  to the client now: {received / 1e6:.2f} MB [{by_round}] ({received / disk:.2f}x on disk, "
        f"{received / sum(inflated):.3f}x inflated); loaded tables (before): "
        f"{sent / 1e6:.1f} MB ({sent / sum(inflated):.2f}x inflated); now / before "
        f"{received / sent:.3f}"
    )
    print(
        "  per-rank round by kind (rows, MB; each kind pickled alone): "
        + ", ".join(
            f"{k} {n} {b / 1e6:.3f}"
            for k, (n, b) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])
        )
    )
    per_rank = rounds.get("per-rank", 0)
    walk = rounds.get("walk", 0)
    print(
        f"  packed / unpacked (before the packing, measured in this run): per-rank round "
        f"{per_rank / 1e6:.2f} / {unpacked / 1e6:.2f} MB ({per_rank / max(unpacked, 1):.3f}), "
        f"walk round {walk / 1e6:.2f} / {walk_unpacked / 1e6:.2f} MB "
        f"({walk / max(walk_unpacked, 1):.3f})"
    )
    print(f"  the packing alone, in process: {_pack_cost(paths, keep_going)}")
    print(
        f"  worker peak RSS growth: {growth_mb:.0f} MB (largest of {workers}); "
        f"{growth_mb / largest_gb / 1000:.2f} GB per GB of the largest file, "
        f"{growth_mb / (sum(inflated) / 1e9) / 1000:.2f} GB per GB of the set"
    )
    sys.stdout.flush()


def run_folders(*, workers: int) -> None:
    """Every folder under the real traces analysed alone, in process and on one running
    cluster: the same report (True/False) per folder."""
    import distributed

    from otel_ext.analysis.engine import analyze, to_json
    from otel_ext.analysis.scaleout import dask_cluster as dask_backend

    cluster = _local_cluster(distributed, workers)
    same = 0
    folders = sorted(p for p in TRACES.iterdir() if p.is_dir())
    try:
        with dask_backend.connect(cluster.scheduler_address) as dc:
            for folder in folders:
                here = to_json(analyze([folder], workers=1, scheduler=""))
                there = to_json(analyze([folder], scheduler=dc))
                same += here == there
                print(f"  {folder.name}: same report: {here == there}")
    finally:
        cluster.close()
    print(f"folders: {same} of {len(folders)} the same report through local:{workers}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="dlrm,corpus,sim")
    ap.add_argument("--sim", default="4x8", help="simulated HOSTSxCHIPS")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "otel-ext-bench")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    for name in args.sets.split(","):
        if name == "folders":
            run_folders(workers=args.workers)
            continue
        if name == "dlrm":
            paths, keep_going = [TRACES / "param_dlrm_v100_8rank"], False
        elif name == "corpus":
            paths, keep_going = [TRACES], True
        elif name == "sim":
            paths, keep_going = [_sim(args.dir, args.sim, args.requests)], False
            name = f"sim {args.sim} ({args.requests} requests)"
        else:
            raise SystemExit(f"unknown set {name!r}")
        run_set(name, paths, workers=args.workers, repeat=args.repeat, keep_going=keep_going)
    return 0


if __name__ == "__main__":
    sys.exit(main())
