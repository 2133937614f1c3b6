"""Test helper: the compute-kernel passes as they were before compute samples (issue 15, item 4).

Verbatim copies from commit ``62aa174`` (HEAD when compute samples began): today's
``compute_ratio_stats`` of ``otel_ext/analysis/cross/stragglers.py`` and the per-rank totals of the
``compute`` part of ``otel_ext/analysis/cross/imbalance.py::load_imbalance`` (its lines up to the
peer-group loop, wrapped in a function that returns ``ur`` and ``tot``). The oracle of
``tests/test_analysis_compute_samples.py``; not part of the library; do not edit (only this
docstring, the imports and the wrapper's ``def``/``return`` lines are new).
"""

from __future__ import annotations

import numpy as np

from otel_ext._arrays import distinct, distinct_rows, group_median
from otel_ext.analysis.rank.compute_samples import ComputeRatios
from otel_ext.analysis.runs import rank_runs
from otel_ext.analysis.table import Category, EventTable

__all__ = ["compute_ratio_stats", "compute_totals"]


def compute_ratio_stats(table: EventTable, edges: np.ndarray) -> ComputeRatios:
    """:func:`compute_ratios` with the sign-test counts, in one linear pass."""
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


def compute_totals(table: EventTable) -> tuple[np.ndarray, np.ndarray] | None:
    """``load_imbalance``'s ``ur`` (ranks) and ``tot`` (float64 sums), None with no kernels."""
    sel = (table["category"] == Category.KERNEL_COMPUTE) & (table["rank"] >= 0)
    compute = None  # noqa: F841  (verbatim: the loop that reads it is not copied)
    if sel.any():
        r = table["rank"][sel]
        d = (table["end_ns"] - table["start_ns"])[sel].astype(np.float64)
        ur, inv = np.unique(r, return_inverse=True)
        tot = np.zeros(len(ur))
        np.add.at(tot, inv.reshape(-1), d)
        return ur, tot
    return None
