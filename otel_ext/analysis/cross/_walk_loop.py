"""The critical path walk's Python loop: the walk rows' columns in, its steps out.

:func:`~otel_ext.analysis.cross.critical_path_walk.walk_pieces` prepares the walk rows of
some ranks as columns (:class:`WalkColumns`: every edge of a row precomputed, as memoryviews
read as Python ints); :func:`walk` walks from each entry state, one piece each, with the
states visited shared by all walks of the call (:class:`Visited`), and writes the segments,
steps and pieces as lists (:class:`WalkSteps`). The loop is the walk's hot path: plain ints
and lists bound to locals, no numpy scalars or enum lookups in it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from otel_ext.analysis.intervals import merge_intervals
from otel_ext.analysis.table import DEVICE_CATEGORIES, EventTable

__all__ = [
    "LABEL_CODE",
    "PIECE_CONTINUE",
    "PIECE_END",
    "PIECE_EXIT",
    "SEGMENT_LABELS",
    "DeviceBusy",
    "Entry",
    "Visited",
    "WalkColumns",
    "WalkSteps",
    "rank_slices",
    "seq",
    "walk",
]


#: segment labels, by code (``WalkPieces.seg_label``)
SEGMENT_LABELS = (
    "compute",
    "communication",
    "memory",
    "launch",
    "sync",
    "runtime",
    "other",
    "host",
    "queue",
    "idle",
)

#: segment label -> its code
LABEL_CODE = {lab: k for k, lab in enumerate(SEGMENT_LABELS)}

#: how a piece ends: the walk ended; it left the rank through a peer edge; it reached a state
#: an earlier walk of the same call visited (it continues there)
PIECE_END, PIECE_EXIT, PIECE_CONTINUE = 0, 1, 2

#: which edge released a row, in the order ties are broken (the first wins)
_V_NONE, _V_STREAM, _V_LAUNCH, _V_DEVICE, _V_PEER, _V_SYNC = range(6)

#: earlier than any release time
_LOWEST = -(1 << 62)


#: a walk entry: (row, seg_end, allow_peer, what); what is -1 for a rank's start, else the
#: entry_allow code of a peer target
Entry = tuple[int, int, bool, int]


def rank_slices(rank: np.ndarray, mask: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(rank, rows)`` for each rank among the ``mask`` rows, rows ascending: one stable sort
    of the selected rows by rank, not a mask over every row per rank (ranks × rows)."""
    sel = np.flatnonzero(mask)
    if sel.shape[0] == 0:
        return []
    sel = sel[np.argsort(rank[sel], kind="stable")]
    rk = rank[sel]
    cut = np.flatnonzero(rk[1:] != rk[:-1]) + 1
    return [(int(part[0][0]), part[1]) for part in zip(np.split(rk, cut), np.split(sel, cut))]


def seq(a: np.ndarray) -> Sequence[Any]:
    """``a`` as a sequence of Python scalars read on indexing (a memoryview of a contiguous
    copy only when ``a`` is not contiguous): as fast to index as a list, without a Python
    object per row held.

    >>> s = seq(np.array([3, -1], dtype=np.int64))
    >>> s[0] + s[1], seq(np.array([True]))[0] is True, len(s)
    (2, True, 2)
    """
    return np.ascontiguousarray(a).data


class DeviceBusy:
    """Per rank: the union of device rows (for busy time inside a window) and the device rows
    by end (for the one that ended last before a time); queried from the walk's Python loop,
    so held as lists searched with :mod:`bisect`."""

    def __init__(self, rows: np.ndarray, table: EventTable) -> None:
        cat = table["category"][rows]
        is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
        rank = table["rank"][rows]
        start = table["start_ns"][rows]
        end = table["end_ns"][rows]
        self._by_rank: dict[int, tuple[Sequence[int], ...]] = {}
        for r, idx in rank_slices(rank, is_dev):
            by_end = idx[np.argsort(end[idx], kind="stable")]
            ms, me = merge_intervals(start[idx], end[idx])
            cum = np.r_[0, np.cumsum(me - ms)]
            self._by_rank[int(r)] = (
                seq(by_end),
                seq(end[by_end]),
                seq(ms),
                seq(me),
                seq(cum),
            )

    def last_end_before(self, rank: int, t: int) -> int:
        """Position of the rank's device row that ended last at or before ``t``, or -1."""
        got = self._by_rank.get(rank)
        if got is None:
            return -1
        k = bisect_right(got[1], t) - 1
        return got[0][k] if k >= 0 else -1

    def device_bound(self, rank: int, a: int, b: int, share: float) -> int:
        """Whether the host gap ``[a, b)`` of ``rank`` waited for the device: the rank's
        device row (position) that ended last at or before ``b`` where it ended after ``a``
        and the device was busy for at least ``share`` of the gap, else -1 (``a < b``)."""
        got = self._by_rank.get(rank)
        if got is None:
            return -1
        k = bisect_right(got[1], b) - 1
        if k < 0 or got[1][k] <= a:
            return -1
        return got[0][k] if self.within(rank, a, b) >= share * (b - a) else -1

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


class WalkColumns(NamedTuple):
    """The walk rows' columns as the walk's loop reads them (positions index them): Python
    ints and bools read from memoryviews, and dicts of the few rows with a graph launch or a
    peer edge."""

    start: Sequence[int]
    end: Sequence[int]
    rank: Sequence[int]
    label: Sequence[int]  # index into SEGMENT_LABELS
    name: Sequence[int]  # name code of the table
    graph: Sequence[bool]  # a graph replay's kernel: released by its launch's start
    runtime: Sequence[bool]
    fanned: Sequence[bool]  # its launch launched several rows: the step is a graph step
    prev: Sequence[int]  # program order: the previous row in its lane, or -1
    launch: Sequence[int]  # the launching call, or -1
    device: Sequence[int]  # cross-stream: the device row it waited for, or -1
    sync: Sequence[int]  # a blocking call's device row, or -1
    has_peer: Sequence[bool]
    launch_row: dict[int, int]  # fanned row -> its launch's row of the table
    peer_key: dict[int, int]  # row with a peer edge -> the target's key
    peer_rel: dict[int, int]  # row with a peer edge -> its release time
    busy: DeviceBusy
    share: float  # device_bound_share


class WalkSteps(NamedTuple):
    """What the walk's loop writes, as lists: the segments (stored in walk order), each
    step's first segment, the graph replays' steps, the pieces and each entry's step."""

    seg_rank: list[int]
    seg_label: list[int]
    seg_start: list[int]
    seg_end: list[int]
    seg_name: list[int]  # name code of the table; -1 for a gap
    step_seg: list[int]  # steps + 1
    graph_step: list[int]
    graph_row: list[int]  # the launch's row of the table
    graph_ns: list[int]
    piece_step: list[int]  # pieces + 1
    piece_next: list[int]
    piece_to: list[int]
    piece_allow: list[bool]
    entry_step: list[int]  # per entry walked

    @staticmethod
    def new() -> WalkSteps:
        """No step yet."""
        return WalkSteps([], [], [], [], [], [0], [], [], [], [0], [], [], [], [])

    def end_piece(self, how: int, to: int, allow: bool) -> None:
        """The current piece ends ``how`` (PIECE_END, PIECE_EXIT, PIECE_CONTINUE)."""
        self.piece_next.append(how)
        self.piece_to.append(to)
        self.piece_allow.append(allow)


class Visited:
    """The walk states ``(row, seg_end, allow_peer)`` visited and the step each was first
    at: each row's first state in lists (most rows are visited once), the others in a dict."""

    def __init__(self, n: int) -> None:
        self.first_end: list[int | None] = [None] * n
        self.first_allow = [False] * n
        self.first_step = [0] * n
        self.memo: dict[tuple[int, int, bool], int] = {}

    def step_of(self, i: int, seg_end: int, allow: bool) -> int | None:
        """The step a walk was at in state ``(i, seg_end, allow)``, or None."""
        if self.first_end[i] == seg_end and self.first_allow[i] == allow:
            return self.first_step[i]
        return self.memo.get((i, seg_end, allow))


def walk(
    entries: list[Entry], follow: dict[int, list[Entry]] | None, cols: WalkColumns
) -> WalkSteps:
    """The walk from each of ``entries`` (one piece each, unless its state was visited), the
    states shared; with ``follow``, the entries of each peer target a piece exits to are
    walked too (``entries`` grows)."""
    out = WalkSteps.new()
    seen = Visited(len(cols.start))
    has_peer = cols.has_peer
    for i, seg_end, allow, _what in entries:  # grows while walked when following exits
        got = seen.step_of(i, seg_end, allow or not has_peer[i])
        if got is not None:
            out.entry_step.append(got)
            continue
        out.entry_step.append(len(out.step_seg) - 1)
        to = _walk_piece(cols, out, seen, i, seg_end, allow)
        if to is not None and follow is not None and to in follow:
            entries += follow.pop(to)
        out.piece_step.append(len(out.step_seg) - 1)
    return out


def _walk_piece(
    c: WalkColumns, out: WalkSteps, seen: Visited, i: int, seg_end: int, allow: bool
) -> int | None:
    """One piece: the whole-table walk's steps from state ``(i, seg_end, allow)`` until the walk
    ends, leaves the rank through a peer edge (the target's key is returned) or reaches a
    visited state (it continues at that step). At each step the predecessor that released the
    row latest (ties: the first of stream, launch, device, peer, sync) is the one it waited for.

    A Python loop: plain lists and ints bound to locals, no numpy scalars, enum lookups or
    calls per step but the device-busy search of a host gap.
    """
    (start, end, rank, label, name, graph, runtime, fanned, e_prev, e_launch, e_dev, e_sync,
     has_peer, launch_row, peer_key, peer_rel, busy, share) = c  # fmt: skip
    S_rank, S_label, S_start, S_end, S_name, step_seg, g_step, g_row, g_ns = out[:9]
    first_end, first_allow, first_step, memo = (
        seen.first_end, seen.first_allow, seen.first_step, seen.memo)  # fmt: skip
    host, queue, idle = LABEL_CODE["host"], LABEL_CODE["queue"], LABEL_CODE["idle"]
    lowest = _LOWEST
    n_steps = len(step_seg) - 1
    while True:
        allow_n = allow or not has_peer[i]
        fe = first_end[i]
        got = None
        if fe is None:
            first_end[i], first_allow[i], first_step[i] = seg_end, allow_n, n_steps
        elif fe == seg_end and first_allow[i] == allow_n:
            got = first_step[i]
        elif (got := memo.get(state := (i, seg_end, allow_n))) is None:
            memo[state] = n_steps
        if got is not None:
            out.end_piece(PIECE_CONTINUE, got, False)
            return None
        n_steps += 1
        best, release, via = -1, lowest, _V_NONE
        is_graph = graph[i]
        if (k := e_prev[i]) >= 0 and release < (rel := end[k]) <= seg_end:
            best, release, via = k, rel, _V_STREAM
        if (k := e_launch[i]) >= 0 and release < (rel := start[k] if is_graph else end[k]) <= seg_end:  # fmt: skip
            best, release, via = k, rel, _V_LAUNCH
        if (k := e_dev[i]) >= 0 and release < (rel := end[k]) <= seg_end:
            best, release, via = k, rel, _V_DEVICE
        if allow and has_peer[i] and release < (rel := peer_rel[i]) <= seg_end:
            best, release, via = -1, rel, _V_PEER
        if (k := e_sync[i]) >= 0 and release < (rel := end[k]) <= seg_end:
            best, release, via = k, rel, _V_SYNC
        s_i = seg_end if (s_i := start[i]) > seg_end else s_i
        is_rt, r_i = runtime[i], rank[i]
        if is_rt and release < s_i and (k := busy.device_bound(r_i, release, s_i, share)) >= 0:
            best, release, via = k, end[k], _V_DEVICE
        if fanned[i]:
            g_step.append(n_steps - 1)
            g_row.append(launch_row[i])
            g_ns.append(seg_end - s_i)
        # waited in the collective for the last arrival, or in a blocking call for the
        # device: only the rest is on the path
        waited = via >= _V_PEER and release > s_i
        if seg_end > (lo := release if waited else s_i):
            S_rank.append(r_i)
            S_label.append(label[i])
            S_start.append(lo)
            S_end.append(seg_end)
            S_name.append(name[i])
        if via == _V_NONE:
            step_seg.append(len(S_rank))
            out.end_piece(PIECE_END, -1, False)
            return None
        if release < s_i:
            # a gap before a device event is device idle (queue when a graph launch
            # released it); before a launch, host-side work
            S_rank.append(r_i)
            S_label.append(host if is_rt else queue if via == _V_LAUNCH and is_graph else idle)
            S_start.append(release)
            S_end.append(s_i)
            S_name.append(-1)
        step_seg.append(len(S_rank))
        if via == _V_PEER:
            out.end_piece(PIECE_EXIT, peer_key[i], not waited)
            return peer_key[i]
        i, seg_end, allow = best, release if waited else min(release, s_i), True
