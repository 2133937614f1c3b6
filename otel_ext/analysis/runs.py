"""Which ranks belong to one run: files of separate jobs given together are told apart.

Profiler traces carry host wall-clock times (epoch-based), and the ranks of one job cover the
same steps, within the hosts' clock differences (milliseconds with NTP, seconds without).
Ranks whose time spans lie more than :data:`RUN_GAP_NS` apart are from separate runs (two
captures compared side by side, such as an A100 run and a V100 run): their collectives are
not one collective, and aligning one run's clock to the other's would move it by days.
Collectives are therefore matched within a run only (:mod:`otel_ext.analysis.cross.collective_match`),
and the report lists the runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otel_ext.analysis.table import EventTable, is_constant

__all__ = ["RUN_GAP_NS", "rank_runs", "runs_summary"]

#: ranks further apart in time than this are separate runs (10 minutes)
RUN_GAP_NS = 600 * 10**9


def _rank_spans(table: EventTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rank = table["rank"]
    empty = np.zeros(0, dtype=np.int64)
    if len(rank) == 0:
        return empty, empty, empty
    if is_constant(rank):  # one file: one rank (or none)
        if rank[0] < 0:
            return empty, empty, empty
        one = np.array([int(rank[0])], dtype=np.int64)
        start, end = table["start_ns"], table["end_ns"]
        return one, np.array([start.min()], np.int64), np.array([end.max()], np.int64)
    sel = rank >= 0
    if not sel.any():
        return empty, empty, empty
    r = rank[sel].astype(np.intp)
    top = int(r.max()) + 1
    direct = top <= 4 * r.size + 1024  # rank numbers index the spans directly (no sort)
    if direct:
        ranks, inv = np.arange(top, dtype=np.int64), r
    else:
        ranks, inv = np.unique(r, return_inverse=True)
    lo = np.full(ranks.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(ranks.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inv, table["start_ns"][sel])
    np.maximum.at(hi, inv, table["end_ns"][sel])
    if direct:
        present = hi != np.iinfo(np.int64).min
        return ranks[present], lo[present], hi[present]
    return ranks.astype(np.int64), lo, hi


def rank_runs(table: EventTable, gap_ns: int = RUN_GAP_NS) -> dict[int, int]:
    """Run index of each rank (0 for the earliest run): ranks whose spans overlap or lie
    within ``gap_ns`` of each other, transitively, are one run.

    >>> from otel_ext.analysis.table import Category as C
    >>> day = 86_400 * 10**9
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=10, rank=0, category=C.KERNEL_COMPUTE),
    ...     dict(start_ns=5, end_ns=20, rank=1, category=C.KERNEL_COMPUTE),
    ...     dict(start_ns=9 * day, end_ns=9 * day + 10, rank=3, category=C.KERNEL_COMPUTE)])
    >>> rank_runs(t)
    {0: 0, 1: 0, 3: 1}
    """
    return {r: run["run"] for run in runs_summary(table, gap_ns) for r in run["ranks"]}


def runs_summary(table: EventTable, gap_ns: int = RUN_GAP_NS) -> list[dict[str, Any]]:
    """One record per run, earliest first: ``run``, ``ranks`` (ascending), ``start_ns``,
    ``end_ns``. Runs assigned by :func:`~otel_ext.analysis.captures.separate_captures`
    (``table.meta["rank_runs"]``) are kept; else ranks further apart than ``gap_ns`` are
    separate runs."""
    ranks, lo, hi = _rank_spans(table)
    assigned = table.meta.get("rank_runs")
    if assigned:
        by_run: dict[int, dict[str, Any]] = {}
        for r, a, b in zip(ranks.tolist(), lo.tolist(), hi.tolist()):
            k = int(assigned.get(r, -1))
            if k < 0:
                continue
            rec = by_run.setdefault(k, {"run": k, "ranks": [], "start_ns": a, "end_ns": b})
            rec["ranks"].append(r)
            rec["start_ns"], rec["end_ns"] = min(rec["start_ns"], a), max(rec["end_ns"], b)
        ordered = sorted(by_run.values(), key=lambda x: (x["start_ns"], x["run"]))
        for i, rec in enumerate(ordered):  # numbered earliest first, as the gap rule numbers
            rec["run"] = i
            rec["ranks"].sort()
        return ordered
    out: list[dict[str, Any]] = []
    for i in np.argsort(lo, kind="stable").tolist():
        if not out or int(lo[i]) > out[-1]["end_ns"] + gap_ns:
            out.append({"run": len(out), "ranks": [], "start_ns": int(lo[i]), "end_ns": 0})
        run = out[-1]
        run["ranks"].append(int(ranks[i]))
        run["end_ns"] = max(run["end_ns"], int(hi[i]))
    for run in out:
        run["ranks"].sort()
    return out
