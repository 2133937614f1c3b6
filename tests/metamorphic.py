"""Metamorphic rewrites of real multi-rank traces, for the truth harness (a helper, not tests).

Each rewrite turns a real event table into one whose ground truth is known, consistently for
every later event, so that a verdict can be checked against it:

* :func:`make_late`: one rank arrives late at every collective (an idle gap of a chosen
  length just before it); the others wait for it (their collective ends move to the new last
  arrival plus their own transfer time) and every later event of every rank moves with the
  delay it accumulated;
* :func:`shift_clock`: ranks stamped by one clock that is off by a constant;
* :func:`scale_kernels`: every device kernel shortened (or lengthened) by a factor, in place.

Times move by a per-rank, non-decreasing step function, so order on every rank and every
stream is kept and no duration turns negative.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.table import DEVICE_CATEGORIES, EventTable

__all__ = ["make_late", "scale_kernels", "shift_clock"]


def _with_times(table: EventTable, start: np.ndarray, end: np.ndarray) -> EventTable:
    cols = dict(table.columns)
    cols["start_ns"], cols["end_ns"] = start.astype(np.int64), end.astype(np.int64)
    return EventTable(cols, table.strings, dict(table.meta))


def make_late(table: EventTable, rank: int, delays_ns: Sequence[int]) -> EventTable:
    """``rank`` arrives ``delays_ns[k]`` later at its k-th collective (in time order).

    Args:
        table: a multi-rank table whose collectives match (any key, ordinal included).
        rank: the rank made late.
        delays_ns: one delay per collective instance (cycled when shorter).

    Returns:
        The rewritten table (same rows, same order).
    """
    m = match_collectives(table)
    if m.n_instances == 0:
        raise ValueError("no collective matched: nothing to be late for")
    order = np.argsort(m.first_arrival_ns, kind="stable")
    by_inst: dict[int, list[int]] = {}
    for i, k in enumerate(m.member_instance.tolist()):
        by_inst.setdefault(k, []).append(i)
    ranks = sorted(int(r) for r in np.unique(table["rank"]) if r >= 0)
    shift = dict.fromkeys(ranks, 0)
    points: dict[int, list[tuple[int, int]]] = {r: [] for r in ranks}
    for n, k in enumerate(order.tolist()):
        members = by_inst[k]
        if rank in {int(m.member_rank[i]) for i in members}:
            shift[rank] += int(delays_ns[n % len(delays_ns)])
            i_r = next(i for i in members if int(m.member_rank[i]) == rank)
            points[rank].append((int(m.member_start_ns[i_r]), shift[rank]))
        arrivals = [int(m.member_start_ns[i]) + shift[int(m.member_rank[i])] for i in members]
        last_old = int(m.last_arrival_ns[k])
        last_new = max(arrivals)
        for i in members:
            r = int(m.member_rank[i])
            e = int(m.member_end_ns[i])
            released = last_new + max(e - last_old, 0)  # its own transfer after the last arrival
            shift[r] = max(e + shift[r], released) - e
            points[r].append((e, shift[r]))
    start = table["start_ns"].copy()
    end = table["end_ns"].copy()
    rk = table["rank"]
    for r, pts in points.items():
        if not pts:
            continue
        pts.sort()
        t = np.array([p[0] for p in pts], dtype=np.int64)
        s = np.maximum.accumulate(np.array([p[1] for p in pts], dtype=np.int64))
        sel = rk == r
        for col in (start, end):
            v = col[sel]
            idx = np.searchsorted(t, v, side="right") - 1
            col[sel] = v + np.where(idx >= 0, s[np.maximum(idx, 0)], 0)
    end = np.maximum(end, start)
    return _with_times(table, start, end)


def shift_clock(table: EventTable, ranks: Sequence[int], offset_ns: int) -> EventTable:
    """Every event of ``ranks`` stamped ``offset_ns`` later (one clock that is off)."""
    sel = np.isin(table["rank"], np.asarray(list(ranks)))
    start = table["start_ns"].copy()
    end = table["end_ns"].copy()
    start[sel] += offset_ns
    end[sel] += offset_ns
    return _with_times(table, start, end)


def scale_kernels(table: EventTable, factor: float) -> EventTable:
    """Every device event's duration times ``factor`` (its start kept)."""
    dev = np.isin(table["category"], np.asarray(DEVICE_CATEGORIES, dtype=np.int8))
    start = table["start_ns"]
    end = table["end_ns"].copy()
    dur = (end[dev] - start[dev]).astype(np.float64)
    end[dev] = start[dev] + np.rint(dur * factor).astype(np.int64)
    return _with_times(table, start.copy(), end)
