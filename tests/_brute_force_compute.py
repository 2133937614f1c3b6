"""Test oracle: the compute-kernel statistics, computed row by row from their definitions.

What :func:`~otel_ext.analysis.cross.stragglers.compute_ratio_stats`,
:func:`~otel_ext.analysis.rank.compute_samples.ratio_stats` and
:meth:`~otel_ext.analysis.rank.compute_samples.ComputeSamples.rank_totals` (the compute part of
:func:`~otel_ext.analysis.cross.imbalance.load_imbalance`) compute, written the obvious slow
way: plain loops over the table's rows, dicts keyed by decoded strings, and
:func:`statistics.median`. They share no grouping, encoding or median code with the library,
so an error in its vectorised passes shows as a difference. Not part of the library.

The definitions:

* the *ratio rows* are the compute kernels with a rank (``rank >= 0``), or the layer spans
  with a rank when the table has no such kernel;
* a row's *window* is the slice ``[edges[i], edges[i + 1])`` holding its start (before the
  first edge: window 0; at or after the last: the last window);
* the *same work* is one name, on one host ('' is a host too), in one run, in one window;
* work counts when it ran on at least two ranks and the median of its durations (over every
  rank's rows) is above zero; each of its rows then has the *ratio* duration / that median;
* per rank: the median of its ratios (overall, and in each window: ``None`` where it has
  none), how many are above 1 (slower) and below 1 (faster); ranks without ratios are left
  out;
* a rank's *compute total* is the sum of its compute kernels' durations (ns) and their count
  (no layer fallback).

>>> from otel_ext.analysis.table import Category, EventTable
>>> t = EventTable.from_rows([dict(start_ns=s, end_ns=s + d, rank=r, name="gemm",
...     category=Category.KERNEL_COMPUTE) for r, s, d in [(0, 0, 10), (1, 0, 30), (1, 60, 5)]])
>>> r = compute_ratio_stats_brute_force(t, [0, 50, 100], {0: 0, 1: 0})
>>> r.overall, r.by_window, r.slower, r.faster
({0: 0.5, 1: 1.5}, {0: [0.5, None], 1: [1.5, None]}, {0: 0, 1: 1}, {0: 1, 1: 0})
>>> rank_compute_totals_brute_force(t)
{0: (10, 1), 1: (35, 2)}
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import NamedTuple

from otel_ext.analysis.rank.compute_samples import ComputeRatios
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "RatioOfRow",
    "WorkRow",
    "compute_ratio_stats_brute_force",
    "rank_compute_ratio_brute_force",
    "rank_compute_ratio_by_window_brute_force",
    "rank_compute_totals_brute_force",
    "rank_sign_test_counts_brute_force",
    "ratio_of_each_row_brute_force",
    "ratio_rows_brute_force",
    "rows_of_category_brute_force",
    "window_of_start_brute_force",
]


class WorkRow(NamedTuple):
    """One row with a rank, its strings decoded."""

    rank: int
    name: str
    host: str
    start_ns: int
    duration_ns: int


class RatioOfRow(NamedTuple):
    """One row's duration over the median duration of the same work."""

    rank: int
    window: int
    ratio: float


def rows_of_category_brute_force(table: EventTable, category: Category) -> list[WorkRow]:
    """The table's rows of ``category`` that have a rank (``rank >= 0``), one at a time."""
    out = []
    for i in range(len(table)):
        rank = int(table["rank"][i])
        if int(table["category"][i]) != category or rank < 0:
            continue
        start = int(table["start_ns"][i])
        out.append(
            WorkRow(
                rank=rank,
                name=table.string("name", i),
                host=table.string("host", i),
                start_ns=start,
                duration_ns=int(table["end_ns"][i]) - start,
            )
        )
    return out


def ratio_rows_brute_force(table: EventTable) -> list[WorkRow]:
    """The compute kernels with a rank; the layer spans with a rank when there are none."""
    rows = rows_of_category_brute_force(table, Category.KERNEL_COMPUTE)
    return rows or rows_of_category_brute_force(table, Category.LAYER)


def window_of_start_brute_force(start_ns: int, edges: Sequence[int]) -> int:
    """The window ``i`` whose slice ``[edges[i], edges[i + 1])`` holds ``start_ns``; 0 before
    the first edge, the last window at or after the last edge (one window with < 2 edges)."""
    edges = [int(e) for e in edges]
    n_windows = max(len(edges) - 1, 1)
    if len(edges) < 2 or start_ns < edges[0]:
        return 0
    for i in range(n_windows):
        if edges[i] <= start_ns < edges[i + 1]:
            return i
    return n_windows - 1


def ratio_of_each_row_brute_force(
    rows: Sequence[WorkRow], edges: Sequence[int], runs: dict[int, int]
) -> list[RatioOfRow]:
    """Each row's duration over the median duration of the same work (name, host, run,
    window), for the rows whose work ran on two ranks or more with a median above zero."""
    windows = [window_of_start_brute_force(row.start_ns, edges) for row in rows]
    keys = [(row.name, row.host, runs[row.rank], w) for row, w in zip(rows, windows, strict=True)]
    durations: dict[tuple[str, str, int, int], list[int]] = {}
    ranks: dict[tuple[str, str, int, int], set[int]] = {}
    for row, key in zip(rows, keys, strict=True):
        durations.setdefault(key, []).append(row.duration_ns)
        ranks.setdefault(key, set()).add(row.rank)
    out = []
    for row, key, window in zip(rows, keys, windows, strict=True):
        median = statistics.median(durations[key])
        if len(ranks[key]) >= 2 and median > 0:
            out.append(RatioOfRow(row.rank, window, row.duration_ns / median))
    return out


def rank_compute_ratio_brute_force(ratios: Sequence[RatioOfRow]) -> dict[int, float]:
    """Per rank with ratios: the median of its ratios."""
    by_rank: dict[int, list[float]] = {}
    for r in ratios:
        by_rank.setdefault(r.rank, []).append(r.ratio)
    return {rank: float(statistics.median(v)) for rank, v in sorted(by_rank.items())}


def rank_compute_ratio_by_window_brute_force(
    ratios: Sequence[RatioOfRow], n_windows: int
) -> dict[int, list[float | None]]:
    """Per rank with ratios: the median of its ratios in each window (``None`` where none)."""
    cells: dict[int, list[list[float]]] = {}
    for r in ratios:
        cells.setdefault(r.rank, [[] for _ in range(n_windows)])[r.window].append(r.ratio)
    return {
        rank: [float(statistics.median(c)) if c else None for c in windows]
        for rank, windows in sorted(cells.items())
    }


def rank_sign_test_counts_brute_force(
    ratios: Sequence[RatioOfRow],
) -> tuple[dict[int, int], dict[int, int]]:
    """Per rank with ratios: how many are above 1 (slower) and how many below 1 (faster)."""
    slower: dict[int, int] = {}
    faster: dict[int, int] = {}
    for r in ratios:
        slower[r.rank] = slower.get(r.rank, 0) + (r.ratio > 1.0)
        faster[r.rank] = faster.get(r.rank, 0) + (r.ratio < 1.0)
    return dict(sorted(slower.items())), dict(sorted(faster.items()))


def compute_ratio_stats_brute_force(
    table: EventTable, edges: Sequence[int], runs: dict[int, int]
) -> ComputeRatios:
    """The per-rank compute ratios of ``table`` (``runs``: rank -> run), in one container."""
    ratios = ratio_of_each_row_brute_force(ratio_rows_brute_force(table), edges, runs)
    slower, faster = rank_sign_test_counts_brute_force(ratios)
    return ComputeRatios(
        overall=rank_compute_ratio_brute_force(ratios),
        by_window=rank_compute_ratio_by_window_brute_force(ratios, max(len(edges) - 1, 1)),
        slower=slower,
        faster=faster,
    )


def rank_compute_totals_brute_force(table: EventTable) -> dict[int, tuple[int, int]]:
    """Per rank with compute kernels: (summed kernel duration in ns, kernel count)."""
    totals: dict[int, tuple[int, int]] = {}
    for row in rows_of_category_brute_force(table, Category.KERNEL_COMPUTE):
        total, count = totals.get(row.rank, (0, 0))
        totals[row.rank] = (total + row.duration_ns, count + 1)
    return dict(sorted(totals.items()))
