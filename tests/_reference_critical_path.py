"""Test helper: the critical-path walk as it was before it was split per rank (issue 15, item 4).

A verbatim copy of ``otel_ext/analysis/cross/critical_path.py`` at commit ``f0d9277`` (HEAD when the
split began): one Python loop over the whole aligned table. The differential tests in
``tests/test_analysis_critical_path_pieces.py`` and ``benchmarks/critical_path_pieces.py``
compare the split walk (per-rank pieces stitched on the client) against it. Not part of the
library; do not edit (only the paragraphs above this line are new), but for two changes made
in the library and here alike after the split, both marked ``# changed after f0d9277``: a row
starting at the same instant later in the row order is no cross-stream predecessor (two
zero-length rows at one instant were each other's, and the walk went round them until
``max_steps`` instead of on to what ended before them), and a walk that comes back to a state
it was in ends there.

The original module docstring follows.

The critical path across ranks: the chain of work that set the run's length.

Holistic Trace Analysis builds a critical path inside one rank. With several ranks the path
crosses between them at collectives: a collective cannot finish before its last member
arrives, so the path into a collective comes from the last arriver. Edges considered:

* **program order**: the previous event on the same device stream (or host thread for
  runtime calls);
* **launch → kernel**: the runtime call that launched a kernel (same rank, correlation id);
* **cross-stream**: the same rank's device event that ended last before a device event
  started (stream-to-stream waits are not in traces; this is the dependency they imply);
* **cross-rank collective**: a member of a collective depends on the last member's arrival;
* **device → host synchronisation**: a blocking runtime call (``cudaDeviceSynchronize``,
  ``cudaStreamSynchronize``, ``cudaEventSynchronize``, a synchronous ``cudaMemcpy`` /
  ``hipMemcpyWithStream`` ...) returns when device work ends: the device row it waited for
  (its own copy, by correlation id, else the rank's device row that ended last before the call
  returned) releases it. The call's time before that release was waiting, off the path; the
  rest is on the path as ``sync``. Where the device is the bottleneck the path so follows the
  device work the host waited for, not the host's blocked call.

**Device-bound host waits.** A host that waits for the device without a blocking runtime call
(DeepEP's dispatch polls a counter the GPU writes; ``.item()`` loops; event queries) shows as
a gap between two runtime calls. Where the rank's device was busy for at least
``device_bound_share`` of such a gap (default 90 %), the host was not what held the work back:
the path goes to the device row that ended last before the host resumed, and only the time from
that end to the host's next call is ``host``. Below that share the gap stays host-side work.

**Graph replays.** A CUDA/HIP graph launch is one runtime call whose correlation id hundreds
of kernels share. Only the replay's first kernel on each stream depends on the launch, and
from the launch's *start* (graph kernels begin while the call is still submitting); the
others depend on the kernel before them (they were queued by the launch, not launched late).
The wait between the launch's start and its first kernel is ``queue``. The path lists the
replays it passes through (``graph_replays``: launch, kernels in the replay, kernels and time
on the path).

Runtime calls on the path are ``launch`` (kernel and graph launches), ``sync`` (blocking
calls) or ``runtime`` (other calls: event records, asynchronous copies' submission ...).

The path is found backwards from the event that ends last: at each event the predecessor
that released it latest is the one it waited for. The time between that release and the
event's start is on the path as ``idle`` (before a device event) or ``host`` (before a
launch call: host-side work the trace does not break down); a collective entered early contributes only the part after
the last arrival (the rest was waiting, off the path). The result is a list of segments
``(rank, category, start, end)``, its composition by rank and category, and the time the run
would save if the top straggler ran at the median rank's pace (its lateness, capped by the
gap to the second-last arrival, summed over the collectives it arrived last at).

>>> from otel_ext.analysis.cross.collective_match import match_collectives
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

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.intervals import merge_intervals
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

__all__ = ["CriticalPath", "critical_path", "runtime_label", "straggler_saving"]

_LABEL = {
    Category.KERNEL_COMPUTE: "compute",
    Category.KERNEL_COMM: "communication",
    Category.COLLECTIVE: "communication",
    Category.MEMCPY: "memory",
    Category.MEMSET: "memory",
    Category.RUNTIME: "launch",
}

#: blocking runtime calls: they return when device work ends
_SYNC_CALL_RE = re.compile(
    r"Synchronize|^(?:cuda|hip|cu)Memcpy(?!\w*Async)\w*$|^(?:cuda|hip|cu)MemcpyWithStream$"
)


def runtime_label(name: str) -> str:
    """The critical-path label of a runtime call: ``launch``, ``sync`` or ``runtime``.

    >>> [runtime_label(n) for n in ("cudaLaunchKernel", "hipGraphLaunch", "hipMemcpyWithStream",
    ...                             "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaEventRecord")]
    ['launch', 'launch', 'sync', 'sync', 'runtime', 'runtime']
    """
    if _SYNC_CALL_RE.search(name):
        return "sync"
    return "launch" if "Launch" in name else "runtime"


@dataclass
class CriticalPath:
    """Segments of the critical path (time order) and its composition."""

    segments: list[dict[str, Any]]
    length_ns: int
    by_rank: dict[int, int]
    by_category: dict[str, int]
    straggler: dict[str, Any] | None
    graph_replays: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self, *, max_segments: int = 2000) -> dict[str, Any]:
        return {
            "length_ns": self.length_ns,
            "by_rank": [{"rank": r, "ns": ns} for r, ns in sorted(self.by_rank.items())],
            "by_category": [
                {"category": c, "ns": ns}
                for c, ns in sorted(self.by_category.items(), key=lambda x: -x[1])
            ],
            "straggler_what_if": self.straggler,
            "graph_replays": self.graph_replays,
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


def _rank_slices(rank: np.ndarray, mask: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(rank, rows)`` for each rank among the ``mask`` rows, rows ascending: one stable sort
    of the selected rows by rank, not a mask over every row per rank (ranks × rows)."""
    sel = np.flatnonzero(mask)
    if sel.shape[0] == 0:
        return []
    sel = sel[np.argsort(rank[sel], kind="stable")]
    rk = rank[sel]
    cut = np.flatnonzero(rk[1:] != rk[:-1]) + 1
    return [(int(part[0][0]), part[1]) for part in zip(np.split(rk, cut), np.split(sel, cut))]


def _device_prev(rows: np.ndarray, table: EventTable) -> np.ndarray:
    """For each device row, the same rank's device row (any stream) that ended last at or
    before its start, or -1: the cross-stream dependency a trace does not record."""
    cat = table["category"][rows]
    is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    out = np.full(len(rows), -1, dtype=np.int64)
    rank = table["rank"][rows]
    start = table["start_ns"][rows]
    end = table["end_ns"][rows]
    for _r, idx in _rank_slices(rank, is_dev):
        by_end = idx[np.argsort(end[idx], kind="stable")]
        pos = np.searchsorted(end[by_end], start[idx], side="right") - 1
        cand = by_end[np.maximum(pos, 0)]  # changed after f0d9277 (see the module docstring)
        bad = (pos >= 0) & (start[cand] == start[idx]) & (cand >= idx)
        for k in np.flatnonzero(bad).tolist():
            i, p = int(idx[k]), int(pos[k])
            while p >= 0 and start[by_end[p]] == start[i] and by_end[p] >= i:
                p -= 1
            pos[k] = p
        ok = pos >= 0
        out[idx[ok]] = by_end[pos[ok]]
    return out


def straggler_saving(match: CollectiveMatch, rank: int) -> int:
    """Time saved if ``rank`` arrived at the median pace where it arrived last (ns).

    >>> from otel_ext.analysis.cross.collective_match import match_collectives
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
    device_bound_share: float = 0.9,
) -> CriticalPath:
    """The cross-rank critical path of ``table``.

    Args:
        table: the aligned event table.
        match: its collectives matched across ranks (aligned times).
        straggler_rank: the rank to evaluate "what if it ran at the median" for.
        steps: the number of steps in the run (for a per-step saving), if known.
        max_steps: a safety cap on the walk's length.
        device_bound_share: a host gap during which the rank's device was busy for at least
            this share is a wait for the device (see the module docstring).

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
    from otel_ext.analysis.rank.breakdown import launch_fanout, launch_rows

    lr_all = launch_rows(table)
    fan_all = launch_fanout(table, lr_all)
    launch = np.full(len(rows), -1, dtype=np.int64)
    lr = lr_all[rows]
    ok = lr >= 0
    launch[ok] = pos_of[lr[ok]]
    fan = fan_all[rows]
    graph = (fan > 1) & (launch >= 0)
    if graph.any():
        # a replay's first kernel on each stream waits for the launch; the rest are queued
        g = np.flatnonzero(graph)
        o = np.lexsort((start[g], table["stream"][rows][g], launch[g]))
        gl, gs = launch[g][o], table["stream"][rows][g][o]
        first = np.r_[True, (gl[1:] != gl[:-1]) | (gs[1:] != gs[:-1])]
        launch[g[o[~first]]] = -1
    sync = _sync_pred(rows, table, launch, rcat)
    busy = _DeviceBusy(rows, table)
    names = table.strings["name"]
    name_codes = table["name"][rows]
    rt_label = {
        int(c): runtime_label(names[int(c)]) for c in distinct(name_codes[rcat == Category.RUNTIME])
    }
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
    graph_on_path: dict[int, list[int]] = {}
    allow_peer = True
    walked = 0
    # the walk is a Python loop: plain lists and ints, no numpy scalars or enum lookups in it
    L_start, L_end, L_rank = start.tolist(), end.tolist(), rank.tolist()
    L_cat, L_name, L_fan, L_lr = rcat.tolist(), name_codes.tolist(), fan.tolist(), lr.tolist()
    L_graph = graph.tolist()
    edges = list(zip(prev.tolist(), launch.tolist(), dprev.tolist(), peer.tolist(), sync.tolist()))
    runtime = int(Category.RUNTIME)
    dev_label = {int(c): lab for c, lab in _LABEL.items()}
    lowest = -(1 << 62)
    visited = set()  # changed after f0d9277 (see the module docstring)
    while walked < max_steps:
        walked += 1
        state = (i, seg_end, allow_peer)
        if state in visited:
            break
        visited.add(state)
        best, release, via = -1, lowest, ""
        c_prev, c_launch, c_dev, c_peer, c_sync = edges[i]
        is_graph = L_graph[i]
        for cand, kind in (
            (c_prev, "stream"),
            (c_launch, "launch"),
            (c_dev, "device"),
            (c_peer, "peer"),
            (c_sync, "sync"),
        ):
            if cand < 0 or (kind == "peer" and not allow_peer):
                continue
            rel = (
                L_start[cand] if kind == "peer" or (kind == "launch" and is_graph) else L_end[cand]
            )
            if release < rel <= seg_end:
                best, release, via = cand, rel, kind
        s_i = min(L_start[i], seg_end)
        is_rt = L_cat[i] == runtime
        if is_rt and release < s_i:
            r_i = L_rank[i]
            d = busy.last_end_before(r_i, s_i)
            if d >= 0 and L_end[d] > release:
                covered = busy.within(r_i, release, s_i)
                if covered >= device_bound_share * (s_i - release):
                    best, release, via = d, L_end[d], "device"
        label = rt_label.get(L_name[i], "launch") if is_rt else dev_label.get(L_cat[i], "other")
        name = names[L_name[i]]
        if L_fan[i] > 1:
            acc = graph_on_path.setdefault(L_lr[i], [0, 0])
            acc[0] += 1
            acc[1] += seg_end - s_i
        if (via == "peer" or via == "sync") and release > s_i:
            # waited in the collective for the last arrival, or in a blocking call for the
            # device: only the rest is on the path
            segments.append(_seg(L_rank[i], label, release, seg_end, name))
            i, seg_end, allow_peer = best, release, via != "peer"
            continue
        segments.append(_seg(L_rank[i], label, s_i, seg_end, name))
        if best < 0:
            break
        if release < s_i:
            # a gap before a device event is device idle (queue when a graph launch released
            # it); before a launch, host-side work
            gap = "host" if is_rt else "queue" if via == "launch" and is_graph else "idle"
            segments.append(_seg(L_rank[i], gap, release, s_i, ""))
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
    replays: list[dict[str, Any]] = []
    for lrow, (k_on, ns_on) in graph_on_path.items():
        replays.append(
            {
                "rank": int(table["rank"][lrow]),
                "launch": names[int(table["name"][lrow])],
                "launch_start_ns": int(table["start_ns"][lrow]),
                "kernels": int(fan_all[np.flatnonzero(lr_all == lrow)[0]]),
                "kernels_on_path": k_on,
                "on_path_ns": int(ns_on),
            }
        )
    replays.sort(key=lambda g: -int(g["on_path_ns"]))
    return CriticalPath(segments, int(length), by_rank, by_cat, what_if, replays)


class _DeviceBusy:
    """Per rank: the union of device rows (for busy time inside a window) and the device rows
    by end (for the one that ended last before a time); queried from the walk's Python loop,
    so held as lists searched with :mod:`bisect`."""

    def __init__(self, rows: np.ndarray, table: EventTable) -> None:
        cat = table["category"][rows]
        is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
        rank = table["rank"][rows]
        start = table["start_ns"][rows]
        end = table["end_ns"][rows]
        self._by_rank: dict[int, tuple[list[int], ...]] = {}
        for r, idx in _rank_slices(rank, is_dev):
            by_end = idx[np.argsort(end[idx], kind="stable")]
            ms, me = merge_intervals(start[idx], end[idx])
            cum = np.r_[0, np.cumsum(me - ms)]
            self._by_rank[int(r)] = (
                by_end.tolist(),
                end[by_end].tolist(),
                ms.tolist(),
                me.tolist(),
                cum.tolist(),
            )

    def last_end_before(self, rank: int, t: int) -> int:
        """Position of the rank's device row that ended last at or before ``t``, or -1."""
        got = self._by_rank.get(rank)
        if got is None:
            return -1
        k = bisect_right(got[1], t) - 1
        return got[0][k] if k >= 0 else -1

    def within(self, rank: int, a: int, b: int) -> int:
        """Device-busy time of ``rank`` inside ``[a, b)``."""
        got = self._by_rank.get(rank)
        if got is None or b <= a:
            return 0
        ms, me, cum = got[2], got[3], got[4]
        i = bisect_right(me, a)
        j = bisect_left(ms, b)
        if j <= i:
            return 0
        total = cum[j] - cum[i] - max(0, a - ms[i]) - max(0, me[j - 1] - b)
        return max(total, 0)


def _sync_pred(
    rows: np.ndarray, table: EventTable, launch: np.ndarray, rcat: np.ndarray
) -> np.ndarray:
    """For each blocking runtime call among ``rows``, the device row (position in ``rows``)
    whose end released it, or -1: its own device activity (correlation id) if any, else the
    rank's device row that ended last at or before the call's end; only where that end falls
    inside the call (the call waited for it)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    rt = np.flatnonzero(rcat == Category.RUNTIME)
    if not rt.shape[0]:
        return out
    names = table.strings["name"]
    codes = table["name"][rows]
    sync_codes = [c for c in distinct(codes[rt]).tolist() if runtime_label(names[c]) == "sync"]
    calls = rt[np.isin(codes[rt], sync_codes)]
    if not calls.shape[0]:
        return out
    start = table["start_ns"][rows]
    end = table["end_ns"][rows]
    rank = table["rank"][rows]
    is_dev = np.isin(rcat, [int(c) for c in DEVICE_CATEGORIES])
    # own device activity: the launched row that ends last
    own = np.full(len(rows), -1, dtype=np.int64)
    d = np.flatnonzero(is_dev & (launch >= 0))
    if d.shape[0]:
        o = d[np.lexsort((end[d], launch[d]))]
        last = np.r_[launch[o][1:] != launch[o][:-1], True]
        own[launch[o][last]] = o[last]
    call_mask = np.zeros(len(rows), dtype=bool)
    call_mask[calls] = True
    dev_of = dict(_rank_slices(rank, is_dev))
    empty = np.zeros(0, dtype=np.int64)
    for r, c_r in _rank_slices(rank, call_mask):
        dev_r = dev_of.get(r, empty)
        cand = own[c_r]
        if dev_r.shape[0]:
            by_end = dev_r[np.argsort(end[dev_r], kind="stable")]
            pos = np.searchsorted(end[by_end], end[c_r], side="right") - 1
            fallback = np.where(pos >= 0, by_end[np.maximum(pos, 0)], -1)
            cand = np.where(cand >= 0, cand, fallback)
        ok = cand >= 0
        inside = np.zeros(len(c_r), dtype=bool)
        inside[ok] = (end[cand[ok]] > start[c_r[ok]]) & (end[cand[ok]] <= end[c_r[ok]])
        out[c_r[inside]] = cand[inside]
    return out


def _seg(rank: Any, category: str, start: int, end: int, name: str) -> dict[str, Any]:
    return {
        "rank": int(rank),
        "category": category,
        "start_ns": int(start),
        "end_ns": int(end),
        "name": name,
    }
