"""The critical path across ranks: the chain of work that set the run's length.

Holistic Trace Analysis builds a critical path inside one rank. With several ranks the path
crosses between them at collectives: a collective cannot finish before its last member
arrives, so the path into a collective comes from the last arriver. Edges considered:

* **program order**: the previous event on the same device stream (or host thread for
  runtime calls);
* **launch → kernel**: the runtime call that launched a kernel (same rank, correlation id);
* **cross-stream**: the same rank's device event that ended last before a device event
  started (stream-to-stream waits are not in traces; this is the dependency they imply);
* **cross-rank collective**: a member of a collective depends on the last member's arrival.

The path is found backwards from the event that ends last: at each event the predecessor
that released it latest is the one it waited for. The time between that release and the
event's start is on the path as ``idle`` (before a device event) or ``host`` (before a
launch call: host-side work the trace does not break down); a collective entered early contributes only the part after
the last arrival (the rest was waiting, off the path). The result is a list of segments
``(rank, category, start, end)``, its composition by rank and category, and the time the run
would save if the top straggler ran at the median rank's pace (its lateness, capped by the
gap to the second-last arrival, summed over the collectives it arrived last at).

>>> from otel_ext.analysis.collectives import match_collectives
>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=100, rank=0, stream=1, category=C.KERNEL_COMPUTE, name="a"),
...     dict(start_ns=0, end_ns=300, rank=1, stream=1, category=C.KERNEL_COMPUTE, name="b"),
...     dict(start_ns=100, end_ns=400, rank=0, stream=2, category=C.KERNEL_COMM, coll_seq=0),
...     dict(start_ns=300, end_ns=400, rank=1, stream=2, category=C.KERNEL_COMM, coll_seq=0)])
>>> cp = critical_path(t, match_collectives(t))
>>> [(s["rank"], s["category"], s["start_ns"], s["end_ns"]) for s in cp.segments]
[(1, 'compute', 0, 300), (0, 'communication', 300, 400)]
>>> dict(sorted(cp.by_rank.items()))
{0: 100, 1: 300}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.collectives import CollectiveMatch
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

__all__ = ["CriticalPath", "critical_path", "straggler_saving"]

_LABEL = {
    Category.KERNEL_COMPUTE: "compute",
    Category.KERNEL_COMM: "communication",
    Category.COLLECTIVE: "communication",
    Category.MEMCPY: "memory",
    Category.MEMSET: "memory",
    Category.RUNTIME: "launch",
}


@dataclass
class CriticalPath:
    """Segments of the critical path (time order) and its composition."""

    segments: list[dict[str, Any]]
    length_ns: int
    by_rank: dict[int, int]
    by_category: dict[str, int]
    straggler: dict[str, Any] | None

    def as_dict(self, *, max_segments: int = 2000) -> dict[str, Any]:
        return {
            "length_ns": self.length_ns,
            "by_rank": [{"rank": r, "ns": ns} for r, ns in sorted(self.by_rank.items())],
            "by_category": [
                {"category": c, "ns": ns}
                for c, ns in sorted(self.by_category.items(), key=lambda x: -x[1])
            ],
            "straggler_what_if": self.straggler,
            "segments": self.segments[-max_segments:],
            "segments_total": len(self.segments),
        }


def _lane_prev(rows: np.ndarray, table: EventTable) -> np.ndarray:
    """For each of ``rows``, the previous row (by start) in its lane, or -1."""
    cat = table["category"][rows]
    is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    stream = table["stream"][rows]
    # device rows without a stream id share one lane per device name
    lane = np.where(
        is_dev,
        np.where(stream >= 0, stream, -2 - table["device"][rows].astype(np.int64)),
        table["tid"][rows],
    )
    kind = is_dev.astype(np.int64)
    order = np.lexsort((table["start_ns"][rows], lane, kind, table["rank"][rows]))
    r_sorted = table["rank"][rows][order]
    same = np.r_[False, (r_sorted[1:] == r_sorted[:-1])]
    same &= np.r_[False, lane[order][1:] == lane[order][:-1]]
    same &= np.r_[False, kind[order][1:] == kind[order][:-1]]
    prev = np.full(len(rows), -1, dtype=np.int64)
    prev_sorted = np.where(same, np.r_[-1, order[:-1]], -1)
    prev[order] = prev_sorted
    return prev


def _device_prev(rows: np.ndarray, table: EventTable) -> np.ndarray:
    """For each device row, the same rank's device row (any stream) that ended last at or
    before its start, or -1: the cross-stream dependency a trace does not record."""
    cat = table["category"][rows]
    is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    out = np.full(len(rows), -1, dtype=np.int64)
    rank = table["rank"][rows]
    start = table["start_ns"][rows]
    end = table["end_ns"][rows]
    for r in distinct(rank[is_dev]):
        idx = np.flatnonzero(is_dev & (rank == r))
        by_end = idx[np.argsort(end[idx], kind="stable")]
        pos = np.searchsorted(end[by_end], start[idx], side="right") - 1
        ok = pos >= 0
        out[idx[ok]] = by_end[pos[ok]]
    out[out == np.arange(len(rows))] = -1
    return out


def straggler_saving(match: CollectiveMatch, rank: int) -> int:
    """Time saved if ``rank`` arrived at the median pace where it arrived last (ns).

    >>> from otel_ext.analysis.collectives import match_collectives
    >>> from otel_ext.analysis.table import Category as C, EventTable
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=500, rank=r, coll_seq=0,
    ...     category=C.KERNEL_COMM) for r, s in [(0, 100), (1, 120), (2, 400)]])
    >>> straggler_saving(match_collectives(t), 2)
    280
    """
    if match.n_instances == 0:
        return 0
    inst = match.member_instance
    start = match.member_start_ns
    order = np.lexsort((start, inst))
    counts = np.bincount(inst, minlength=match.n_instances)
    firsts = np.r_[0, np.cumsum(counts)[:-1]]
    med = (start[order[firsts + (counts - 1) // 2]] + start[order[firsts + counts // 2]]) // 2
    last = match.last_rank == rank
    gap = match.last_arrival_ns - match.second_last_arrival_ns
    lateness = match.last_arrival_ns - med
    return int(np.minimum(gap, lateness)[last].clip(0).sum())


def critical_path(
    table: EventTable,
    match: CollectiveMatch,
    *,
    straggler_rank: int | None = None,
    steps: int | None = None,
    max_steps: int = 2_000_000,
) -> CriticalPath:
    """The cross-rank critical path of ``table``.

    Args:
        table: the aligned event table.
        match: its collectives matched across ranks (aligned times).
        straggler_rank: the rank to evaluate "what if it ran at the median" for.
        steps: the number of steps in the run (for a per-step saving), if known.
        max_steps: a safety cap on the walk's length.

    Returns:
        A :class:`CriticalPath`.
    """
    cat = table["category"]
    sel = (table["rank"] >= 0) & (
        np.isin(cat, [int(c) for c in DEVICE_CATEGORIES]) | (cat == Category.RUNTIME)
    )
    rows = np.flatnonzero(sel)
    if len(rows) == 0:
        return CriticalPath([], 0, {}, {}, None)
    pos_of = np.full(len(table), -1, dtype=np.int64)
    pos_of[rows] = np.arange(len(rows))
    start = table["start_ns"][rows]
    end = table["end_ns"][rows]
    rank = table["rank"][rows]
    rcat = cat[rows]
    prev = _lane_prev(rows, table)
    dprev = _device_prev(rows, table)
    launch = np.full(len(rows), -1, dtype=np.int64)
    try:
        from otel_ext.analysis.breakdown import launch_rows

        lr = launch_rows(table)[rows]
        ok = lr >= 0
        launch[ok] = pos_of[lr[ok]]
    except ImportError:  # pragma: no cover - part of the same package
        pass
    peer = np.full(len(rows), -1, dtype=np.int64)
    if match.n_instances:
        inst = match.member_instance
        order = np.lexsort((match.member_start_ns, inst))
        counts = np.bincount(inst, minlength=match.n_instances)
        last_member = order[np.cumsum(counts) - 1]
        last_row = match.member_row[last_member]
        member_inst = inst[match.row_member]
        prow = pos_of[match.row_index]
        ok = prow >= 0
        target = pos_of[last_row[member_inst]]
        peer[prow[ok]] = target[ok]
        peer[peer == np.arange(len(rows))] = -1
    i = int(np.argmax(end))
    seg_end = int(end[i])
    segments: list[dict[str, Any]] = []
    names = table.strings["name"]
    name_codes = table["name"][rows]
    allow_peer = True
    walked = 0
    while walked < max_steps:
        walked += 1
        best, release, via = -1, np.iinfo(np.int64).min, ""
        for cand, kind in (
            (prev[i], "stream"),
            (launch[i], "launch"),
            (dprev[i], "device"),
            (peer[i], "peer"),
        ):
            if cand < 0 or (kind == "peer" and not allow_peer):
                continue
            rel = int(start[cand]) if kind == "peer" else int(end[cand])
            if rel <= seg_end and rel > release:
                best, release, via = int(cand), rel, kind
        label = _LABEL.get(Category(int(rcat[i])), "other")
        s_i = min(int(start[i]), seg_end)
        name = names[name_codes[i]]
        if via == "peer" and release > s_i:
            # waited in the collective for the last arrival: only the rest is on the path
            segments.append(_seg(rank[i], label, release, seg_end, name))
            i, seg_end, allow_peer = best, release, False
            continue
        segments.append(_seg(rank[i], label, s_i, seg_end, name))
        if best < 0:
            break
        if release < s_i:
            # a gap before a device event is device idle; before a launch, host-side work
            gap = "host" if rcat[i] == Category.RUNTIME else "idle"
            segments.append(_seg(rank[i], gap, release, s_i, ""))
        i, seg_end, allow_peer = best, min(release, s_i), True
    segments.reverse()
    segments = [s for s in segments if s["end_ns"] > s["start_ns"]]
    by_rank: dict[int, int] = {}
    by_cat: dict[str, int] = {}
    for s in segments:
        d = s["end_ns"] - s["start_ns"]
        by_rank[s["rank"]] = by_rank.get(s["rank"], 0) + d
        by_cat[s["category"]] = by_cat.get(s["category"], 0) + d
    length = (segments[-1]["end_ns"] - segments[0]["start_ns"]) if segments else 0
    what_if = None
    if straggler_rank is not None:
        saved = straggler_saving(match, straggler_rank)
        what_if = {
            "rank": straggler_rank,
            "saved_ns": saved,
            "saved_pct": round(100.0 * saved / length, 4) if length else 0.0,
            "saved_per_step_ns": int(saved / steps) if steps else None,
        }
    return CriticalPath(segments, int(length), by_rank, by_cat, what_if)


def _seg(rank: Any, category: str, start: int, end: int, name: str) -> dict[str, Any]:
    return {
        "rank": int(rank),
        "category": category,
        "start_ns": int(start),
        "end_ns": int(end),
        "name": name,
    }
