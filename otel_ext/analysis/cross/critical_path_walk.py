"""The critical path's walk inside a rank: its edges and the pieces it leaves.

Every edge of the walk (:mod:`otel_ext.analysis.cross.critical_path` lists them) is inside one rank
but the **peer** edge, from a collective member to the last arriver's row. So the walk is cut
there: :func:`peer_edges` gives the cross-rank edges from the match (where the match is: the
client); :func:`walk_pieces` walks a table holding every walk row (:func:`walk_mask`) of some
ranks from each place a walk can enter a rank (its last event; every row a peer edge targets)
until it leaves it through a peer edge or ends, memoising walk states so that walks that meet
share the rest (its Python loop: :mod:`otel_ext.analysis.cross._walk_loop`);
:class:`WalkPieces` holds the result (per step its segments and graph-replay steps) and joins
across disjoint ranks. :func:`~otel_ext.analysis.cross.critical_path.stitch` joins
the pieces into the path. Keys are opaque int64 row identities that sort like the rows of the
whole table (row numbers in process, positions in the whole set of files on a cluster).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.cross._walk_loop import (
    LABEL_CODE,
    PIECE_CONTINUE,
    PIECE_END,
    PIECE_EXIT,
    SEGMENT_LABELS,
    DeviceBusy,
    Entry,
    WalkColumns,
    WalkSteps,
    rank_slices,
    seq,
    walk,
)
from otel_ext.analysis.cross.collective_match import CollectiveMatch
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
    for _r, idx in rank_slices(rank, is_dev):
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
    walk over the whole table uses: members whose row and target are walk rows; a member that is its own
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
    # the last listing of a row wins (as an assignment over the whole table does)
    _, first_of_reversed = np.unique(rows[::-1], return_index=True)
    last = rows.shape[0] - 1 - first_of_reversed
    rows, target = rows[last], target[last]
    ok = (target >= 0) & (target != rows)
    ok[ok] = sel[target[ok]]
    rows, target = rows[ok], target[ok]
    release = np.asarray(table["start_ns"][target], dtype=np.int64)
    return PeerEdges(keys[rows], keys[target], release)


#: an entry whose row has no peer edge: the allow_peer flag it is entered with does not matter
ANY_FLAG = 2


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
    walked = walk(walk_entries, follow, _columns(rows, table, launch, peer, device_bound_share))
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
    by_cat = np.full(256, LABEL_CODE["other"], dtype=np.int64)  # int8 categories, offset by 128
    for c, lab in _LABEL.items():
        by_cat[int(c) + 128] = LABEL_CODE[lab]
    label = by_cat[rcat.astype(np.int64) + 128]
    rt_codes = name_codes[is_rt].astype(np.int64)
    if rt_codes.shape[0]:
        by_name = np.zeros(int(rt_codes.max()) + 1, dtype=np.int64)
        for c in distinct(rt_codes).tolist():
            by_name[c] = LABEL_CODE[runtime_label(names[int(c)])]
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


def _entries(
    rank: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    rkeys: np.ndarray,
    peer: _PeerColumns,
    mode: str,
) -> tuple[list[Entry], dict[int, list[Entry]] | None]:
    """The entries to walk from, and those to follow (by target key) when an exit reaches
    them: ``"every"`` walks each rank's start (its walk row that ends last; ties: the first)
    and each peer target's entries (both ``allow_peer`` states where the target has a peer
    edge itself), following none; ``"reachable"`` the start that ends last, following the
    targets' entries.

    Raises:
        ValueError: ``mode`` is neither.
    """
    starts: list[Entry] = []
    for _r, idx in rank_slices(rank, np.ones(len(rank), dtype=bool)):
        i = int(idx[np.argmax(end[idx])])  # the first of the largest ends: the smallest key
        starts.append((i, int(end[i]), True, -1))
    by_target: dict[int, list[Entry]] = {}
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
) -> WalkColumns:
    """The walk rows' columns and edges as the walk's loop reads them.

    The columns as memoryviews of the arrays: indexed as fast as lists, each item a Python
    int or bool made when read, 8 bytes a row, not a list's 40; four edge
    sequences, not one of tuples (tuples of every row cost more than the walk).
    """
    rcat = table["category"][rows]
    dprev = with_data_dependencies(rows, table, _device_prev(rows, table))  # recorded ones win
    fanned = launch.fanned
    return WalkColumns(
        start=seq(table["start_ns"][rows]),
        end=seq(table["end_ns"][rows]),
        rank=seq(table["rank"][rows]),
        label=seq(_labels(rows, table)),
        name=seq(table["name"][rows]),
        graph=seq(launch.graph),
        runtime=seq(rcat == Category.RUNTIME),
        fanned=seq(fanned),
        prev=seq(_lane_prev(rows, table)),
        launch=seq(launch.launch),
        device=seq(dprev),
        sync=seq(_sync_pred(rows, table, launch.launch, rcat)),
        has_peer=seq(peer.has_peer),
        launch_row=dict(zip(np.flatnonzero(fanned).tolist(), launch.launch_row[fanned].tolist())),
        peer_key=peer.key,
        peer_rel=peer.release,
        busy=DeviceBusy(rows, table),
        share=share,
    )


def _pieces_of(
    w: WalkSteps,
    entries: list[Entry],
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
    dev_of = dict(rank_slices(rank, is_dev))
    empty = np.zeros(0, dtype=np.int64)
    for r, c_r in rank_slices(rank, call_mask):
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
