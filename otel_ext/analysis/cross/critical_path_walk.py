"""The critical path's walk inside a rank: its edges and the pieces it leaves.

Every edge of the walk (:mod:`otel_ext.analysis.cross.critical_path` lists them) is inside one rank
but the **peer** edge, from a collective member to the last arriver's row. So the walk is cut
there: :func:`peer_edges` gives the cross-rank edges from the match (where the match is: the
client); :func:`walk_pieces` walks a table holding every walk row (:func:`walk_mask`) of some
ranks from each place a walk can enter a rank (its last event; every row a peer edge targets)
until it leaves it through a peer edge or ends, memoising walk states so that walks that meet
share the rest; :class:`WalkPieces` holds the result (per step its segments and graph-replay
steps) and joins across disjoint ranks. :func:`~otel_ext.analysis.cross.critical_path.stitch` joins
the pieces into the path. Keys are opaque int64 row identities that sort like the rows of the
whole table (row numbers in process, positions in the whole set of files on a cluster).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.intervals import merge_intervals
from otel_ext.analysis.rank.data_deps import with_data_dependencies
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

__all__ = [
    "ANY_FLAG",
    "PIECE_CONTINUE",
    "PIECE_END",
    "PIECE_EXIT",
    "SEGMENT_LABELS",
    "PeerEdges",
    "WalkPieces",
    "peer_edges",
    "runtime_label",
    "walk_mask",
    "walk_pieces",
]


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
    before its start, or -1: the cross-stream dependency a trace does not record.

    Neither the row itself nor a row that starts at the same instant and comes later in the
    row order is its predecessor (both can only be zero-length rows at that instant): two
    such rows would be each other's, and a walk would go round them instead of on to what
    ended before. The one before them in end order is taken instead.

    >>> from otel_ext.analysis.table import Category as C, EventTable
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=e, rank=0, stream=k,
    ...     category=C.KERNEL_COMPUTE) for s, e, k in [(0, 900, 9), (1000, 1000, 7),
    ...                                                (1000, 1000, 7)]])
    >>> _device_prev(np.arange(3), t).tolist()
    [-1, 0, 1]
    """
    cat = table["category"][rows]
    is_dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    out = np.full(len(rows), -1, dtype=np.int64)
    rank = table["rank"][rows]
    start = table["start_ns"][rows]
    end = table["end_ns"][rows]
    for _r, idx in _rank_slices(rank, is_dev):
        by_end = idx[np.argsort(end[idx], kind="stable")]
        pos = np.searchsorted(end[by_end], start[idx], side="right") - 1
        cand = by_end[np.maximum(pos, 0)]
        bad = (pos >= 0) & (start[cand] == start[idx]) & (cand >= idx)
        for k in np.flatnonzero(bad).tolist():  # zero-length rows at one instant: rare
            i, p = int(idx[k]), int(pos[k])
            while p >= 0 and start[by_end[p]] == start[i] and by_end[p] >= i:
                p -= 1
            pos[k] = p
        ok = pos >= 0
        out[idx[ok]] = by_end[pos[ok]]
    return out


def walk_mask(table: EventTable) -> np.ndarray:
    """Rows the walk reads: rank >= 0 and a device category or RUNTIME.

    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=5, rank=0, category=Category.RUNTIME),
    ...     dict(start_ns=0, end_ns=5, rank=0, category=Category.LAYER),
    ...     dict(start_ns=0, end_ns=5, rank=-1, category=Category.KERNEL_COMPUTE),
    ...     dict(start_ns=0, end_ns=5, rank=1, category=Category.MEMCPY)])
    >>> walk_mask(t).tolist()
    [True, False, False, True]
    """
    cat = table["category"]
    return (table["rank"] >= 0) & (
        np.isin(cat, [int(c) for c in DEVICE_CATEGORIES]) | (cat == Category.RUNTIME)
    )


@dataclass
class PeerEdges:
    """The walk's cross-rank edges, computed where the match is (the client)."""

    member_key: np.ndarray  # int64, ascending: key of a collective member row (a walk row)
    target_key: np.ndarray  # int64: key of the last-arriving member's row (a walk row)
    release_ns: np.ndarray  # int64: that target row's (aligned) start

    def of_rows(self, keys: np.ndarray) -> PeerEdges:
        """The edges :func:`walk_pieces` reads over rows of ``keys`` (ascending): those whose
        member or target is one of them (a worker needs no others).

        >>> e = PeerEdges(np.array([1, 2, 5]), np.array([9, 9, 2]), np.array([70, 70, 30]))
        >>> e.of_rows(np.array([2, 3])).member_key.tolist()
        [2, 5]
        >>> e.of_rows(np.array([1])).member_key.tolist()
        [1]
        """
        k = _i64(keys)
        keep = (_positions(k, _i64(self.member_key)) >= 0) | (
            _positions(k, _i64(self.target_key)) >= 0
        )
        return PeerEdges(self.member_key[keep], self.target_key[keep], self.release_ns[keep])

    def nbytes(self) -> int:
        """What the edges weigh."""
        return int(self.member_key.nbytes + self.target_key.nbytes + self.release_ns.nbytes)


def _keys_of(table: EventTable, keys: np.ndarray) -> np.ndarray:
    out = np.asarray(keys, dtype=np.int64)
    if out.shape != (len(table),):
        raise ValueError(
            f"keys: {out.shape[0] if out.ndim == 1 else out.shape} for {len(table)} rows"
        )
    if out.shape[0] > 1 and not bool((out[1:] > out[:-1]).all()):
        raise ValueError("keys: not strictly increasing with the row order")
    return out


def _positions(sorted_keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each of ``query``, its position in ``sorted_keys`` (ascending), or -1."""
    if sorted_keys.shape[0] == 0:
        return np.full(query.shape[0], -1, dtype=np.int64)
    pos = np.searchsorted(sorted_keys, query)
    at = np.minimum(pos, sorted_keys.shape[0] - 1)
    return np.where((pos < sorted_keys.shape[0]) & (sorted_keys[at] == query), at, -1)


def peer_edges(table: EventTable, match: CollectiveMatch, keys: np.ndarray) -> PeerEdges:
    """The peer edges of the walk: each collective member row depends on the row of its
    collective's last-arriving member, released at that row's start.

    From the aligned ``table`` the match refers to (``match.row_index`` are its row indices)
    and each row's key (int64, strictly increasing with the row order). Exactly the edges the
    one-loop walk used: members whose row and target are walk rows; a member that is its own
    target has none; a row the match lists twice keeps its last listing's target.

    >>> from otel_ext.analysis.cross.collective_match import match_collectives
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=500, rank=r, coll_seq=0,
    ...     category=Category.KERNEL_COMM) for r, s in [(0, 100), (1, 400), (2, 120)]])
    >>> e = peer_edges(t, match_collectives(t), np.array([10, 20, 30]))
    >>> e.member_key.tolist(), e.target_key.tolist(), e.release_ns.tolist()
    ([10, 30], [20, 20], [400, 400])
    """
    keys = _keys_of(table, keys)
    none = np.zeros(0, dtype=np.int64)
    if match.n_instances == 0:
        return PeerEdges(none, none.copy(), none.copy())
    sel = walk_mask(table)
    inst = match.member_instance
    order = np.lexsort((match.member_start_ns, inst))
    counts = np.bincount(inst, minlength=match.n_instances)
    last_member = order[np.cumsum(counts) - 1]
    last_row = np.asarray(match.member_row, dtype=np.int64)[last_member]
    rows = np.asarray(match.row_index, dtype=np.int64)
    target = last_row[inst[match.row_member]]
    keep = sel[rows]
    rows, target = rows[keep], target[keep]
    if rows.shape[0] == 0:
        return PeerEdges(none, none.copy(), none.copy())
    # the last listing of a row wins (as the one-loop walk's assignment did)
    _, first_of_reversed = np.unique(rows[::-1], return_index=True)
    last = rows.shape[0] - 1 - first_of_reversed
    rows, target = rows[last], target[last]
    ok = (target >= 0) & (target != rows)
    ok[ok] = sel[target[ok]]
    rows, target = rows[ok], target[ok]
    release = np.asarray(table["start_ns"][target], dtype=np.int64)
    return PeerEdges(keys[rows], keys[target], release)


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

_CODE = {lab: k for k, lab in enumerate(SEGMENT_LABELS)}

#: how a piece ends: the walk ended; it left the rank through a peer edge; it reached a state
#: an earlier walk of the same call visited (it continues there)
PIECE_END, PIECE_EXIT, PIECE_CONTINUE = 0, 1, 2

#: an entry whose row has no peer edge: the allow_peer flag it is entered with does not matter
ANY_FLAG = 2

#: which edge released a row, in the order ties are broken (the first wins)
_V_NONE, _V_STREAM, _V_LAUNCH, _V_DEVICE, _V_PEER, _V_SYNC = range(6)

#: earlier than any release time
_LOWEST = -(1 << 62)


def _i64(values: Any = ()) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@dataclass
class WalkPieces:
    """The critical-path walk of some ranks, cut at the peer edges: what travels.

    A *step* is one turn of the walk (one row visited, one or two segments). The steps are
    stored piece after piece; a *piece* is the run of steps of one walk from an entry until it
    leaves the rank through a peer edge (an exit: the target row's key and the ``allow_peer``
    flag it is entered with; the target's start is where that walk goes on), ends, or reaches a
    state an earlier walk visited (it goes on at that global step). Segments of zero length are
    not stored (the path drops them), but the steps that made them are counted.

    *Entries*: per rank its start (the walk row that ends last; ties: the first) and every
    row of it some peer edge targets. :func:`stitch` walks the pieces from the global start.
    Joinable (:meth:`join`) across disjoint sets of ranks (each rank's pieces from one call:
    a rank in two parts would have two starts and two entries per target), picklable, numpy
    arrays plus one list of names.
    """

    names: list[str]  # segment and launch names; codes below index it
    seg_rank: np.ndarray  # int32, per stored segment, in walk order (backwards in time)
    seg_label: np.ndarray  # int8: index into SEGMENT_LABELS
    seg_start: np.ndarray  # int64
    seg_end: np.ndarray  # int64
    seg_name: np.ndarray  # int32: index into names
    step_seg: np.ndarray  # int64, steps + 1: step s's segments are [step_seg[s], step_seg[s+1])
    piece_step: np.ndarray  # int64, pieces + 1: piece p's steps are [piece_step[p], ...[p+1])
    piece_next: np.ndarray  # int8: PIECE_END, PIECE_EXIT or PIECE_CONTINUE
    piece_to: np.ndarray  # int64: exit: the peer target's key; continue: the global step
    piece_allow: np.ndarray  # bool: exit: allow_peer of the state it enters
    entry_key: np.ndarray  # int64: a peer target row's key
    entry_allow: np.ndarray  # int8: the allow_peer flag of the entry state (0, 1 or ANY_FLAG)
    entry_step: np.ndarray  # int64: the global step its walk starts at
    start_rank: np.ndarray  # int32, per rank: its start entry
    start_key: np.ndarray  # int64
    start_end: np.ndarray  # int64
    start_step: np.ndarray  # int64
    graph_step: np.ndarray  # int64, ascending: the steps at a graph replay's kernel
    graph_launch: np.ndarray  # int64: index into the launch_* arrays
    graph_ns: np.ndarray  # int64: that step's time on the path
    launch_key: np.ndarray  # int64, per graph launch row the steps name
    launch_rank: np.ndarray  # int32
    launch_name: np.ndarray  # int32: index into names
    launch_start: np.ndarray  # int64
    launch_kernels: np.ndarray  # int64: the launch's fan-out over its rank

    @staticmethod
    def empty() -> WalkPieces:
        """No ranks."""
        z = _i64()
        return WalkPieces(
            [""], z.astype(np.int32), z.astype(np.int8), z, z, z.astype(np.int32), _i64([0]),
            _i64([0]), z.astype(np.int8), z, z.astype(bool), z, z.astype(np.int8), z,
            z.astype(np.int32), z, z, z, z, z, z, z, z.astype(np.int32), z.astype(np.int32), z, z,
        )  # fmt: skip

    def starts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each rank's start: (rank, key, end), what the global start is chosen from."""
        return self.start_rank, self.start_key, self.start_end

    @property
    def n_steps(self) -> int:
        """Steps stored over all pieces."""
        return int(self.step_seg.shape[0]) - 1

    @property
    def n_pieces(self) -> int:
        return int(self.piece_step.shape[0]) - 1

    def nbytes(self) -> int:
        """Roughly what the pieces weigh: their arrays and names (UTF-8)."""
        arrays = sum(int(v.nbytes) for v in vars(self).values() if isinstance(v, np.ndarray))
        return arrays + sum(len(s.encode("utf-8")) + 8 for s in self.names)

    @staticmethod
    def join(parts: Sequence[WalkPieces]) -> WalkPieces:
        """The pieces of disjoint sets of ranks as one (steps, segments and names renumbered).

        >>> WalkPieces.join([WalkPieces.empty(), WalkPieces.empty()]).n_steps
        0
        """
        parts = list(parts)
        if not parts:
            return WalkPieces.empty()
        merged: dict[str, int] = {}
        remaps = [
            _i64([merged.setdefault(s, len(merged)) for s in p.names]).astype(np.int32)
            for p in parts
        ]
        steps = np.cumsum([0] + [p.n_steps for p in parts])
        segs = np.cumsum([0] + [int(p.seg_start.shape[0]) for p in parts])
        launches = np.cumsum([0] + [int(p.launch_key.shape[0]) for p in parts])

        def cat(name: str, shift: Any = None) -> np.ndarray:
            cols = [getattr(p, name) for p in parts]
            if shift is not None:
                cols = [c + s for c, s in zip(cols, shift)]
            return np.concatenate(cols)

        def offsets(name: str, shift: np.ndarray) -> np.ndarray:
            cols = [getattr(p, name)[:-1] + s for p, s in zip(parts, shift[:-1])]
            return np.concatenate([*cols, _i64([shift[-1]])])

        nexts = cat("piece_next")
        to = cat("piece_to")
        step_base = np.repeat(steps[:-1], [p.n_pieces for p in parts])
        to = np.where(nexts == PIECE_CONTINUE, to + step_base, to)
        return WalkPieces(
            names=list(merged),
            seg_rank=cat("seg_rank"),
            seg_label=cat("seg_label"),
            seg_start=cat("seg_start"),
            seg_end=cat("seg_end"),
            seg_name=np.concatenate([m[p.seg_name] for m, p in zip(remaps, parts)]),
            step_seg=offsets("step_seg", segs),
            piece_step=offsets("piece_step", steps),
            piece_next=nexts,
            piece_to=to,
            piece_allow=cat("piece_allow"),
            entry_key=cat("entry_key"),
            entry_allow=cat("entry_allow"),
            entry_step=cat("entry_step", steps[:-1]),
            start_rank=cat("start_rank"),
            start_key=cat("start_key"),
            start_end=cat("start_end"),
            start_step=cat("start_step", steps[:-1]),
            graph_step=cat("graph_step", steps[:-1]),
            graph_launch=cat("graph_launch", launches[:-1]),
            graph_ns=cat("graph_ns"),
            launch_key=cat("launch_key"),
            launch_rank=cat("launch_rank"),
            launch_name=np.concatenate([m[p.launch_name] for m, p in zip(remaps, parts)]),
            launch_start=cat("launch_start"),
            launch_kernels=cat("launch_kernels"),
        )


def walk_pieces(
    table: EventTable,
    keys: np.ndarray,
    peers: PeerEdges,
    *,
    device_bound_share: float = 0.9,
    entries: str = "every",
) -> WalkPieces:
    """Every piece of every rank in ``table``: the rank-local part of the walk.

    ``table`` holds all walk rows of the ranks it has, already aligned (other rows may be
    present and are ignored); ``keys`` per row of ``table``. ``peers`` may hold edges of other
    ranks too (those whose member is not here are ignored). The walk from each entry follows
    the rank-local edges (program order, launch, cross-stream, sync release, device-bound host
    gap) and the peer edge (its release time comes with the edge) until it leaves the rank
    through a peer edge or ends; the walk states ``(row, seg_end, allow_peer)`` are shared by
    all walks of the call, so walks that meet store the rest once.

    ``entries``: ``"every"`` walks from every entry (each rank's start and every row a peer
    edge targets: what a worker holding some of the ranks computes); ``"reachable"`` only from
    the table's own start and the targets the walk reaches (the table holds every rank, as
    in process: the path is the same, walked once).

    >>> from otel_ext.analysis.cross.collective_match import match_collectives
    >>> from otel_ext.analysis.cross.critical_path import stitch
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=100, rank=0, stream=1, category=Category.KERNEL_COMPUTE),
    ...     dict(start_ns=0, end_ns=300, rank=1, stream=1, category=Category.KERNEL_COMPUTE),
    ...     dict(start_ns=100, end_ns=400, rank=0, stream=2, category=Category.KERNEL_COMM,
    ...          coll_seq=0),
    ...     dict(start_ns=300, end_ns=400, rank=1, stream=2, category=Category.KERNEL_COMM,
    ...          coll_seq=0)])
    >>> keys = np.arange(4)
    >>> peers = peer_edges(t, match_collectives(t), keys)
    >>> rank0 = walk_pieces(t.select(t["rank"] == 0), keys[:4:2], peers)
    >>> rank1 = walk_pieces(t.select(t["rank"] == 1), keys[1::2], peers)
    >>> cp = stitch(WalkPieces.join([rank0, rank1]), match_collectives(t))
    >>> [(s["rank"], s["category"], s["start_ns"], s["end_ns"]) for s in cp.segments]
    [(1, 'compute', 0, 300), (0, 'communication', 300, 400)]
    """
    keys = _keys_of(table, keys)
    rows = np.flatnonzero(walk_mask(table))
    if len(rows) == 0:
        return WalkPieces.empty()
    start, end, rank = table["start_ns"][rows], table["end_ns"][rows], table["rank"][rows]
    launch = _launch_edges(rows, table)
    peer = _peer_columns(keys[rows], start, peers)
    walk_entries, follow = _entries(rank, start, end, keys[rows], peer, entries)
    walked = _walk(walk_entries, follow, _columns(rows, table, launch, peer, device_bound_share))
    return _pieces_of(walked, walk_entries, rows, table, keys, launch.kernels)


class _LaunchEdges(NamedTuple):
    """Each walk row's launch edge, and the graph replays it belongs to."""

    launch: np.ndarray  # int64: position of the launching call; -1: none, or queued by a replay
    graph: np.ndarray  # bool: a kernel of a graph replay (its launch launched several rows)
    fanned: np.ndarray  # bool: its launch launched several rows
    launch_row: np.ndarray  # int64: the launching call's row of the table, or -1
    kernels: np.ndarray  # int64, per row of the table: how many rows its launch launched


def _launch_edges(rows: np.ndarray, table: EventTable) -> _LaunchEdges:
    """The launch edges of the walk ``rows`` of ``table``: each row's launching runtime call
    (correlation id); a graph replay's first kernel on each stream waits for the launch, the
    rest are queued (no launch edge)."""
    from otel_ext.analysis.rank.breakdown import launch_fanout, launch_rows

    pos_of = np.full(len(table), -1, dtype=np.int64)
    pos_of[rows] = np.arange(len(rows))
    lr_all = launch_rows(table)
    fan = launch_fanout(table, lr_all)[rows]
    launch = np.full(len(rows), -1, dtype=np.int64)
    lr = lr_all[rows]
    ok = lr >= 0
    launch[ok] = pos_of[lr[ok]]
    graph = (fan > 1) & (launch >= 0)
    if graph.any():
        g = np.flatnonzero(graph)
        stream = table["stream"][rows][g]
        o = np.lexsort((table["start_ns"][rows][g], stream, launch[g]))
        gl, gs = launch[g][o], stream[o]
        first = np.r_[True, (gl[1:] != gl[:-1]) | (gs[1:] != gs[:-1])]
        launch[g[o[~first]]] = -1
    kernels = np.bincount(lr_all[lr_all >= 0], minlength=len(table))
    return _LaunchEdges(launch, graph, fan > 1, lr, kernels)


def _labels(rows: np.ndarray, table: EventTable) -> np.ndarray:
    """Each walk row's segment label code (an index into :data:`SEGMENT_LABELS`): by its
    category; a runtime call's by its name (:func:`runtime_label`)."""
    rcat = table["category"][rows]
    names = table.strings["name"]
    name_codes = table["name"][rows]
    is_rt = rcat == Category.RUNTIME
    by_cat = np.full(256, _CODE["other"], dtype=np.int64)  # int8 categories, offset by 128
    for c, lab in _LABEL.items():
        by_cat[int(c) + 128] = _CODE[lab]
    label = by_cat[rcat.astype(np.int64) + 128]
    rt_codes = name_codes[is_rt].astype(np.int64)
    if rt_codes.shape[0]:
        by_name = np.zeros(int(rt_codes.max()) + 1, dtype=np.int64)
        for c in distinct(rt_codes).tolist():
            by_name[c] = _CODE[runtime_label(names[int(c)])]
        label[is_rt] = by_name[rt_codes]
    return label


class _PeerColumns(NamedTuple):
    """The peer edges of some walk rows, and the rows they target."""

    has_peer: np.ndarray  # bool, per walk row: a member with a peer edge
    key: dict[int, int]  # walk row (position) -> the key of its edge's target row
    release: dict[int, int]  # walk row (position) -> its edge's release time
    targets: list[int]  # the walk rows (positions) some edge targets, ascending


def _peer_columns(rkeys: np.ndarray, start: np.ndarray, peers: PeerEdges) -> _PeerColumns:
    """The edges of ``peers`` whose member is one of the walk rows of keys ``rkeys``, and the
    rows that some edge targets; a target's release time must be its start here.

    Raises:
        ValueError: a target row's start is not its edge's release time (edges and rows
            aligned differently).
    """
    member_key = _i64(peers.member_key)
    target_key = _i64(peers.target_key)
    release_ns = _i64(peers.release_ns)
    at = _positions(rkeys, member_key)
    here = at >= 0
    has_peer = np.zeros(len(rkeys), dtype=bool)
    has_peer[at[here]] = True
    tat = _positions(rkeys, target_key)
    there = tat >= 0
    off = np.flatnonzero(there)[start[tat[there]] != release_ns[there]]
    if off.shape[0]:
        k = int(off[0])
        raise ValueError(
            f"peer edges: the release time of target row key {int(target_key[k])} "
            f"({int(release_ns[k])} ns) is not its start in this table "
            f"({int(start[tat[k]])} ns): edges and rows aligned differently"
        )
    members = at[here].tolist()
    return _PeerColumns(
        has_peer,
        dict(zip(members, target_key[here].tolist())),
        dict(zip(members, release_ns[here].tolist())),
        distinct(tat[there]).tolist(),
    )


#: a walk entry: (row, seg_end, allow_peer, what); what is -1 for a rank's start, else the
#: entry_allow code of a peer target
_Entry = tuple[int, int, bool, int]


def _entries(
    rank: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    rkeys: np.ndarray,
    peer: _PeerColumns,
    mode: str,
) -> tuple[list[_Entry], dict[int, list[_Entry]] | None]:
    """The entries to walk from, and those to follow (by target key) when an exit reaches
    them: ``"every"`` walks each rank's start (its walk row that ends last; ties: the first)
    and each peer target's entries (both ``allow_peer`` states where the target has a peer
    edge itself), following none; ``"reachable"`` the start that ends last, following the
    targets' entries.

    Raises:
        ValueError: ``mode`` is neither.
    """
    starts: list[_Entry] = []
    for _r, idx in _rank_slices(rank, np.ones(len(rank), dtype=bool)):
        i = int(idx[np.argmax(end[idx])])  # the first of the largest ends: the smallest key
        starts.append((i, int(end[i]), True, -1))
    by_target: dict[int, list[_Entry]] = {}
    for t in peer.targets:
        s_t = int(start[t])
        if peer.has_peer[t]:  # not from the match (a target's peer is itself); walk both states
            by_target[int(rkeys[t])] = [(t, s_t, True, 1), (t, s_t, False, 0)]
        else:
            by_target[int(rkeys[t])] = [(t, s_t, True, ANY_FLAG)]
    if mode == "every":
        return starts + [e for group in by_target.values() for e in group], None
    if mode == "reachable":
        return [max(starts, key=lambda e: (end[e[0]], -e[0]))], by_target
    raise ValueError(f"entries: {mode!r} (every or reachable)")


def _columns(
    rows: np.ndarray, table: EventTable, launch: _LaunchEdges, peer: _PeerColumns, share: float
) -> _WalkColumns:
    """The walk rows' columns and edges as the walk's loop reads them.

    The columns as memoryviews of the arrays: indexed as fast as lists, each item a Python
    int or bool made when read, 8 bytes a row, not a list's 40 (issue 30); four edge
    sequences, not one of tuples (tuples of every row cost more than the walk).
    """
    rcat = table["category"][rows]
    dprev = with_data_dependencies(rows, table, _device_prev(rows, table))  # recorded ones win
    fanned = launch.fanned
    return _WalkColumns(
        start=_seq(table["start_ns"][rows]),
        end=_seq(table["end_ns"][rows]),
        rank=_seq(table["rank"][rows]),
        label=_seq(_labels(rows, table)),
        name=_seq(table["name"][rows]),
        graph=_seq(launch.graph),
        runtime=_seq(rcat == Category.RUNTIME),
        fanned=_seq(fanned),
        prev=_seq(_lane_prev(rows, table)),
        launch=_seq(launch.launch),
        device=_seq(dprev),
        sync=_seq(_sync_pred(rows, table, launch.launch, rcat)),
        has_peer=_seq(peer.has_peer),
        launch_row=dict(zip(np.flatnonzero(fanned).tolist(), launch.launch_row[fanned].tolist())),
        peer_key=peer.key,
        peer_rel=peer.release,
        busy=_DeviceBusy(rows, table),
        share=share,
    )


def _pieces_of(
    w: _WalkSteps,
    entries: list[_Entry],
    rows: np.ndarray,
    table: EventTable,
    keys: np.ndarray,
    kernels: np.ndarray,
) -> WalkPieces:
    """The walk's lists as :class:`WalkPieces`: names local to them, the entries split into
    the ranks' starts and the peer targets' entries, the graph launches the steps name."""
    rkeys, rank, end = keys[rows], table["rank"][rows], table["end_ns"][rows]
    g_rows = _i64(w.graph_row)
    launch_rows_used = distinct(g_rows)
    names, seg_name, launch_name = _local_names(table, _i64(w.seg_name), launch_rows_used)
    start_pos = _i64([e[0] for e in entries if e[3] < 0])
    return WalkPieces(
        names=names,
        seg_rank=np.asarray(w.seg_rank, dtype=np.int32),
        seg_label=np.asarray(w.seg_label, dtype=np.int8),
        seg_start=_i64(w.seg_start),
        seg_end=_i64(w.seg_end),
        seg_name=seg_name,
        step_seg=_i64(w.step_seg),
        piece_step=_i64(w.piece_step),
        piece_next=np.asarray(w.piece_next, dtype=np.int8),
        piece_to=_i64(w.piece_to),
        piece_allow=np.asarray(w.piece_allow, dtype=bool),
        entry_key=rkeys[_i64([e[0] for e in entries if e[3] >= 0])],
        entry_allow=np.asarray([e[3] for e in entries if e[3] >= 0], dtype=np.int8),
        entry_step=_i64([g for e, g in zip(entries, w.entry_step) if e[3] >= 0]),
        start_rank=np.asarray(rank[start_pos], dtype=np.int32),
        start_key=rkeys[start_pos],
        start_end=_i64(end[start_pos]),
        start_step=_i64([g for e, g in zip(entries, w.entry_step) if e[3] < 0]),
        graph_step=_i64(w.graph_step),
        graph_launch=np.searchsorted(launch_rows_used, g_rows).astype(np.int64),
        graph_ns=_i64(w.graph_ns),
        launch_key=keys[launch_rows_used],
        launch_rank=np.asarray(table["rank"][launch_rows_used], dtype=np.int32),
        launch_name=launch_name,
        launch_start=_i64(table["start_ns"][launch_rows_used]),
        launch_kernels=_i64(kernels[launch_rows_used]),
    )


def _local_names(
    table: EventTable, seg_codes: np.ndarray, launch_rows: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The names the segments (name codes of ``table``; -1 for a gap: "") and the graph
    launch ``rows`` carry, as a list local to them ("" first), and both as int32 indices
    into it."""
    launch_codes = _i64(table["name"][launch_rows])
    used = distinct(np.concatenate([seg_codes[seg_codes >= 0], launch_codes]))
    names = table.strings["name"]

    def local(codes: np.ndarray) -> np.ndarray:
        out = np.zeros(codes.shape[0], dtype=np.int32)
        ok = codes >= 0
        out[ok] = np.searchsorted(used, codes[ok]) + 1
        return out

    return ["", *(names[int(c)] for c in used)], local(seg_codes), local(launch_codes)


def _seq(a: np.ndarray) -> Sequence[Any]:
    """``a`` as a sequence of Python scalars read on indexing (a memoryview of a contiguous
    copy only when ``a`` is not contiguous): as fast to index as a list, without a Python
    object per row held.

    >>> s = _seq(np.array([3, -1], dtype=np.int64))
    >>> s[0] + s[1], _seq(np.array([True]))[0] is True, len(s)
    (2, True, 2)
    """
    return np.ascontiguousarray(a).data


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
        self._by_rank: dict[int, tuple[Sequence[int], ...]] = {}
        for r, idx in _rank_slices(rank, is_dev):
            by_end = idx[np.argsort(end[idx], kind="stable")]
            ms, me = merge_intervals(start[idx], end[idx])
            cum = np.r_[0, np.cumsum(me - ms)]
            self._by_rank[int(r)] = (
                _seq(by_end),
                _seq(end[by_end]),
                _seq(ms),
                _seq(me),
                _seq(cum),
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


class _WalkColumns(NamedTuple):
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
    busy: _DeviceBusy
    share: float  # device_bound_share


class _WalkSteps(NamedTuple):
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
    def new() -> _WalkSteps:
        """No step yet."""
        return _WalkSteps([], [], [], [], [], [0], [], [], [], [0], [], [], [], [])

    def end_piece(self, how: int, to: int, allow: bool) -> None:
        """The current piece ends ``how`` (PIECE_END, PIECE_EXIT, PIECE_CONTINUE)."""
        self.piece_next.append(how)
        self.piece_to.append(to)
        self.piece_allow.append(allow)


class _Visited:
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


def _walk(
    entries: list[_Entry], follow: dict[int, list[_Entry]] | None, cols: _WalkColumns
) -> _WalkSteps:
    """The walk from each of ``entries`` (one piece each, unless its state was visited), the
    states shared; with ``follow``, the entries of each peer target a piece exits to are
    walked too (``entries`` grows)."""
    out = _WalkSteps.new()
    seen = _Visited(len(cols.start))
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
    c: _WalkColumns, out: _WalkSteps, seen: _Visited, i: int, seg_end: int, allow: bool
) -> int | None:
    """One piece: the one-loop walk's steps from state ``(i, seg_end, allow)`` until the walk
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
    host, queue, idle, lowest = _CODE["host"], _CODE["queue"], _CODE["idle"], _LOWEST
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
        best, release, via, is_graph = -1, lowest, _V_NONE, graph[i]
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
