"""Benchmark: compute kernels as samples, against the row passes they replace.

For each set: loads every file into its own table (its own string dictionaries, as a worker
has it), joins them, and on the joined table (unaligned: the cost does not depend on the
times) measures, best of ``--repeats`` in the same process:

* ``rows``: the row passes before the samples, the baseline (kept in this file:
  :func:`compute_ratio_stats_before_samples` and :func:`compute_totals_before_samples`);
* ``samples``: :func:`~otel_ext.analysis.rank.compute_samples.samples_of` per file,
  :meth:`~otel_ext.analysis.rank.compute_samples.ComputeSamples.join`, then
  :func:`~otel_ext.analysis.rank.compute_samples.ratio_stats` and ``rank_totals`` (the whole work,
  wherever it runs);
* ``client``: the client's share (join, ratio stats, totals);

checks the samples give the same ratios, and prints the ratios of the times and the travel:
the compute-kernel rows against the sample rows, their column bytes (the kernel rows' columns
that are not constant against the samples' six columns) and their pickled bytes with the
string dictionaries (each file's kernel rows as an ``EventTable`` with that file's whole
dictionaries, against each file's samples with only the strings they use).

Run: ``.venv/bin/python benchmarks/compute_samples.py [--repeats 5] FOLDER...``
(folders of profiler files, such as ``../shared/traces/pytorch-profiler/v100_train``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import best_of  # noqa: E402

from otel_ext._arrays import distinct, distinct_rows, group_median  # noqa: E402
from otel_ext.analysis.cross.stragglers import window_edges  # noqa: E402
from otel_ext.analysis.loaders import load_file  # noqa: E402
from otel_ext.analysis.rank.compute_samples import (  # noqa: E402
    ComputeRatios,
    ComputeSamples,
    ratio_stats,
    samples_of,
)
from otel_ext.analysis.runs import rank_runs  # noqa: E402
from otel_ext.analysis.table import Category, EventTable  # noqa: E402


def compute_ratio_stats_before_samples(table: EventTable, edges: np.ndarray) -> ComputeRatios:
    """The pre-samples baseline of the compute ratios: ``compute_ratio_stats`` of
    ``otel_ext/analysis/cross/stragglers.py`` as it was at commit ``62aa174``, one vectorised
    pass over the table's rows (today's is :func:`ratio_stats` over :func:`samples_of`). Kept
    here, unchanged, only to be timed against the samples; the tests check the library against
    ``tests/_brute_force_compute.py`` instead."""
    empty = ComputeRatios({}, {}, {}, {})
    cat = table["category"]
    sel = (cat == Category.KERNEL_COMPUTE) & (table["rank"] >= 0)
    if not sel.any():
        sel = (cat == Category.LAYER) & (table["rank"] >= 0)
    rows = np.flatnonzero(sel)
    if len(rows) == 0:
        return empty
    # same-named work is compared among ranks of the same host when hosts are known (the
    # chips of a host form a tensor-parallel group; other hosts may run other phases)
    # ... and in the same time window (the work behind a name may change over the run)
    n_win = max(len(edges) - 1, 1)
    win = np.clip(np.searchsorted(edges, table["start_ns"][rows], side="right") - 1, 0, None)
    win = np.minimum(win, n_win - 1)
    host = table["host"][rows].astype(np.int64)
    # ... and only among ranks of one run: separate captures never ran together
    runs = rank_runs(table)
    if len(set(runs.values())) > 1:
        rk = np.array(sorted(runs), dtype=np.int64)
        rv = np.array([runs[r] for r in rk.tolist()], dtype=np.int64)
        r_rows = table["rank"][rows].astype(np.int64)
        run_of = rv[np.clip(np.searchsorted(rk, r_rows), 0, len(rk) - 1)]
        host = host + (len(table.strings["host"]) + 1) * run_of
    n_host = int(host.max()) + 1 if len(host) else 1
    name = (table["name"][rows].astype(np.int64) * n_host + host) * n_win + win
    dur = (table["end_ns"][rows] - table["start_ns"][rows]).astype(np.float64)
    rank = table["rank"][rows].astype(np.int64)
    uname, pos = np.unique(name, return_inverse=True)
    pos = pos.reshape(-1)
    med_of_row = group_median(dur, pos, len(uname))[pos]
    # names seen on at least two ranks
    pair = distinct_rows(np.stack([pos.astype(np.int64), rank], axis=1))
    ranks_per_name = np.bincount(pair[:, 0], minlength=len(uname))
    usable = (med_of_row > 0) & (ranks_per_name[pos] >= 2)
    ratio = np.where(usable, dur / np.where(med_of_row > 0, med_of_row, 1), np.nan)
    ranks = distinct(rank)
    rpos = np.searchsorted(ranks, rank)
    finite = np.isfinite(ratio)
    overall_m = group_median(ratio, rpos, len(ranks))
    by_w = group_median(ratio, rpos * n_win + win, len(ranks) * n_win).reshape(len(ranks), n_win)
    slower = np.bincount(rpos[finite & (ratio > 1.0)], minlength=len(ranks))
    faster = np.bincount(rpos[finite & (ratio < 1.0)], minlength=len(ranks))
    out = ComputeRatios({}, {}, {}, {})
    for i, r in enumerate(ranks.tolist()):
        if np.isnan(overall_m[i]):
            continue
        out.overall[r] = float(overall_m[i])
        out.by_window[r] = [None if np.isnan(v) else float(v) for v in by_w[i].tolist()]
        out.slower[r] = int(slower[i])
        out.faster[r] = int(faster[i])
    return out


def compute_totals_before_samples(table: EventTable) -> tuple[np.ndarray, np.ndarray] | None:
    """The pre-samples baseline of the compute totals: the ranks (``ur``) and summed kernel
    times (``tot``, float64) of ``load_imbalance`` in ``otel_ext/analysis/cross/imbalance.py``
    at commit ``62aa174`` (None with no kernels); kept here only to be timed."""
    sel = (table["category"] == Category.KERNEL_COMPUTE) & (table["rank"] >= 0)
    if sel.any():
        r = table["rank"][sel]
        d = (table["end_ns"] - table["start_ns"])[sel].astype(np.float64)
        ur, inv = np.unique(r, return_inverse=True)
        tot = np.zeros(len(ur))
        np.add.at(tot, inv.reshape(-1), d)
        return ur, tot
    return None


def _rows(table: EventTable, edges: Any) -> Any:
    return compute_ratio_stats_before_samples(table, edges), compute_totals_before_samples(table)


def _per_file(parts: list[EventTable], edges: Any) -> list[ComputeSamples]:
    return [samples_of(p, edges) for p in parts]


def _client(samples: list[ComputeSamples], runs: dict[int, int], n_win: int) -> Any:
    joined = ComputeSamples.join(samples)
    return ratio_stats(joined, runs, n_win), joined.rank_totals()


def _kernels(table: EventTable) -> EventTable:
    return table.select((table["category"] == Category.KERNEL_COMPUTE) & (table["rank"] >= 0))


def _column_bytes(s: ComputeSamples) -> int:
    return sum(c.nbytes for c in (s.name, s.host, s.rank, s.window, s.duration_ns, s.count))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for folder in args.folders:
        loaded = [load_file(f).table for f in sorted(folder.iterdir()) if f.is_file()]
        parts = [t for t in loaded if t is not None]
        table = EventTable.concat(parts)
        edges = window_edges(table, 8)
        runs, n_win = rank_runs(table), max(len(edges) - 1, 1)

        t_rows, (want, _) = best_of(args.repeats, partial(_rows, table, edges))
        t_files, samples = best_of(args.repeats, partial(_per_file, parts, edges))
        t_client, (got, _) = best_of(args.repeats, partial(_client, samples, runs, n_win))
        if got != want:
            raise SystemExit(f"{folder}: the samples' ratios differ from the rows'")
        kernels = [_kernels(p) for p in parts]
        n_rows = sum(len(k) for k in kernels)
        n_samples = sum(len(s.count) for s in samples)
        b_rows = sum(len(pickle.dumps(k)) for k in kernels)
        b_samples = sum(len(pickle.dumps(s)) for s in samples)
        c_rows = sum(k.nbytes() for k in kernels)
        c_samples = sum(_column_bytes(s) for s in samples)
        print(
            f"{folder.name}: {n_rows} kernel rows -> {n_samples} sample rows "
            f"({n_samples / max(n_rows, 1):.3f}); columns {c_rows} -> {c_samples} B "
            f"({c_samples / max(c_rows, 1):.3f}); pickled with dictionaries {b_rows} -> "
            f"{b_samples} B ({b_samples / max(b_rows, 1):.3f}); time rows "
            f"{t_rows * 1e3:.2f} ms, samples {(t_files + t_client) * 1e3:.2f} ms "
            f"({(t_files + t_client) / t_rows:.2f}x), client {t_client * 1e3:.2f} ms "
            f"({t_client / t_rows:.2f}x)"
        )


if __name__ == "__main__":
    main()
