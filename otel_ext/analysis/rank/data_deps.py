"""Recorded data dependencies for the critical path's cross-stream edge.

A trace does not record why a device row started when it did on another stream; the critical
path's walk (:mod:`otel_ext.analysis.cross.critical_path_walk`) guesses: the same rank's device row
that ended last before it. An Execution Trace records the operators' data dependencies; its
join to the Kineto trace (:mod:`otel_ext.analysis.loaders.execution_trace`) writes them as
``data_dep``: on a consumer's first device row, the ``correlation`` of the producer's last
device row. Where a row has one, and the producer is found on the same rank and ended by the
row's start, that producer is the row's cross-stream predecessor instead of the guess.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=50, rank=0, stream=1, category=C.KERNEL_COMPUTE, correlation=5),
...     dict(start_ns=0, end_ns=80, rank=0, stream=2, category=C.KERNEL_COMPUTE, correlation=6),
...     dict(start_ns=90, end_ns=99, rank=0, stream=3, category=C.KERNEL_COMPUTE, correlation=7,
...          data_dep=5)])
>>> guessed = np.array([-1, -1, 1])
>>> with_data_dependencies(np.arange(3), t, guessed).tolist()
[-1, -1, 0]
"""

from __future__ import annotations

import numpy as np

from otel_ext.analysis.table import DEVICE_CATEGORIES, EventTable, is_constant

__all__ = ["with_data_dependencies"]


def with_data_dependencies(rows: np.ndarray, table: EventTable, guessed: np.ndarray) -> np.ndarray:
    """``guessed`` (per position in ``rows``: the cross-stream predecessor's position, or -1)
    with each recorded data dependency in place of the guess.

    Args:
        rows: the walk's rows of ``table``.
        table: the table (its ``data_dep``, ``correlation``, ``rank`` columns).
        guessed: the walk's cross-stream predecessors, as positions in ``rows``.

    Returns:
        A new array of positions; ``guessed`` itself is not changed.
    """
    dep_col = table.columns.get("data_dep")
    if dep_col is None or len(rows) == 0 or (is_constant(dep_col) and dep_col[0] < 0):
        return guessed
    dep = dep_col[rows]
    want = np.flatnonzero(dep >= 0)
    if len(want) == 0:
        return guessed
    cat = table["category"][rows]
    is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    dev = np.flatnonzero(is_dev & (table["correlation"][rows] >= 0))
    rank = table["rank"][rows].astype(np.int64)
    corr = table["correlation"][rows]
    # device rows by (rank, correlation): a producer is looked up on the consumer's rank
    order = dev[np.lexsort((corr[dev], rank[dev]))]
    k_rank, k_corr = rank[order], corr[order]
    out = guessed.copy()
    start, end = table["start_ns"][rows], table["end_ns"][rows]
    for i in want.tolist():
        lo = np.searchsorted(k_rank, rank[i], side="left")
        hi = np.searchsorted(k_rank, rank[i], side="right")
        at = lo + np.searchsorted(k_corr[lo:hi], dep[i], side="left")
        if at < hi and k_corr[at] == dep[i]:
            p = int(order[at])
            if p != i and end[p] <= start[i]:
                out[i] = p
    return out
