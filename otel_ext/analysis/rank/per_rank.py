"""The per-rank phase of an analysis and the compact tables it leaves for the cross-rank phase.

An analysis has two kinds of passes (``docs/analysis.md``, "Per-rank and cross-rank
passes"): those that read one rank's rows alone (the temporal, idle and overlap breakdowns,
launch statistics, kernel statistics, the names a rank's rows give its device) and those that
compare ranks (matching, alignment, stragglers, critical path, imbalance, roofline, requests,
links). :func:`per_rank_tables` runs the first kind over a table that holds every row of the
ranks it covers, and keeps for the second kind only the rows it reads
(:func:`cross_rank_mask`): device activity, runtime calls, collectives, layers, steps,
requests and their phases, link transfers, host-side collective operations and the rows
that name a serving engine's requests, without the columns none of them reads
(:data:`UNREAD_COLUMNS`: the raw device-clock ticks and the clock domain). The other rows
(host operators, which are most of a profiler trace, and the rows of no category: an old
trace's host operators, an OTLP run's engine steps and instant events) are left behind but
for two per file and rank: the one that starts first and the one that ends last, so that every rank's time
span (runs, the run's start and end) stays what the whole table gives (the clock alignment
moves a rank's rows by one increasing function of time, so the first and last stay first
and last).

Per-rank results of tables that hold disjoint sets of ranks (the partitions of a Dask
cluster) join with :func:`merge_rank_tables` into what one table of them all gives: rows in
the order :func:`~otel_ext.analysis.rank.breakdown.rank_groups` gives them, kernel statistics
summed (counts, sums, minima, maxima: exact for integer nanoseconds), the device names'
counts added.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=90, category=C.CPU_OP, rank=0, name="aten::mm"),
...     dict(start_ns=5, end_ns=6, category=C.CPU_OP, rank=0, name="aten::view"),
...     dict(start_ns=10, end_ns=60, category=C.KERNEL_COMPUTE, rank=0, stream=7, name="gemm"),
... ])
>>> tables = per_rank_tables(t)
>>> [(r.rank, r.compute_ns) for r in tables.temporal], tables.events
([(0, 50)], 3)
>>> kept = tables.reduced[0]
>>> [kept.string("name", i) for i in range(len(kept))]
['aten::mm', 'gemm']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from otel_ext.analysis.cross.collective_match import HOST_COLLECTIVE_FAMILIES
from otel_ext.analysis.intervals import group_slices
from otel_ext.analysis.rank import breakdown, overlap
from otel_ext.analysis.rank.breakdown import KernelStats, kernel_stats
from otel_ext.analysis.table import NUMERIC_COLUMNS, Category, EventTable, constant_column

if TYPE_CHECKING:
    from otel_ext.analysis.cross.alignment import RankClocks
    from otel_ext.analysis.cross.critical_path_walk import PeerEdges, WalkPieces
    from otel_ext.analysis.rank.compute_samples import ComputeSamples

__all__ = [
    "HeldSamples",
    "RankTables",
    "RepairedRows",
    "WalkShares",
    "aligned_walk",
    "cross_rank_mask",
    "device_busy",
    "held_samples",
    "joins_by_time",
    "merge_name_counts",
    "merge_rank_tables",
    "name_counts",
    "per_rank_tables",
    "serving_mark_codes",
    "walk_of",
    "walk_of_aligned",
    "walk_rows",
]

#: categories a cross-rank pass reads (host operators only where they are collectives; rows
#: of no category, an old trace's host operators or an OTLP run's engine steps, none; the
#: runtime calls only the critical path's walk reads, which runs where the rows are: they are
#: in :attr:`RankTables.walk`, not in the reduced rows)
CROSS_RANK_CATEGORIES = (
    Category.KERNEL_COMPUTE,
    Category.KERNEL_COMM,
    Category.MEMCPY,
    Category.MEMSET,
    Category.COLLECTIVE,
    Category.LAYER,
    Category.REQUEST,
    Category.PHASE,
    Category.LINK_TRANSFER,
    Category.STEP,
)


#: device categories whose rows a partition may keep where it runs (:func:`per_rank_tables`'
#: ``hold``): besides the critical path's walk, which runs there too, only the causality
#: repair, the request and serving joins (which then fetch them: :meth:`RankTables.with_held`)
#: and two passes that take compact samples of them instead
#: (:mod:`otel_ext.analysis.rank.compute_samples`) read them
HELD_CATEGORIES = (Category.KERNEL_COMPUTE, Category.MEMCPY, Category.MEMSET)


def _serving_mark(name: str) -> bool:
    """A row name :mod:`otel_ext.analysis.serving.engine_telemetry` looks for (a request or stage span)."""
    from otel_ext.analysis.serving import engine_telemetry as serving

    return (
        name == serving.VLLM_REQUEST_SPAN
        or name.startswith("Req ")
        or name in serving.SGLANG_STAGE_PHASES
    )


def serving_mark_codes(table: EventTable) -> list[int]:
    """The ``name`` codes of ``table``'s dictionary that name a serving engine's requests or
    stages (:mod:`otel_ext.analysis.serving.engine_telemetry`).

    >>> serving_mark_codes(EventTable.from_rows([dict(name="gemm"), dict(name="Req 7")]))
    [2]
    """
    return [i for i, n in enumerate(table.strings["name"]) if i and _serving_mark(n)]


def joins_by_time(table: EventTable) -> bool:
    """Whether ``table`` has rows that a pass joins with the device rows by time, row by
    row: rows naming a serving engine's requests (the serving join counts the otel-ext rows
    inside each request). Then no partition holds device rows (``hold``). (Request latency
    reads only each device's busy time, which the partitions send as merged intervals:
    :attr:`RankTables.device_busy`.)

    >>> from otel_ext.analysis.table import Category as C
    >>> joins_by_time(EventTable.from_rows([dict(category=C.KERNEL_COMPUTE, name="gemm")]))
    False
    >>> joins_by_time(EventTable.from_rows([dict(category=C.CPU_OP, name="Req 7")]))
    True
    """
    marks = serving_mark_codes(table)
    return bool(marks) and bool(np.isin(table["name"], np.asarray(marks, dtype=np.int32)).any())


def cross_rank_mask(table: EventTable) -> np.ndarray:
    """The rows a cross-rank pass reads (see the module docstring).

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(category=C.CPU_OP, name=n, rank=0)
    ...     for n in ("aten::mm", "c10d::allreduce_", "gloo:all_reduce")])
    >>> cross_rank_mask(t).tolist()
    [False, True, True]
    """
    cat = table["category"]
    keep = np.isin(cat, np.asarray([int(c) for c in CROSS_RANK_CATEGORIES], dtype=np.int8))
    names = table.strings["name"]
    wanted = [
        i
        for i, n in enumerate(names)
        if i and (n.startswith(HOST_COLLECTIVE_FAMILIES) or _serving_mark(n))
    ]
    if wanted:
        keep |= np.isin(table["name"], np.asarray(wanted, dtype=np.int32))
    return keep


#: columns no cross-rank pass reads: constant (as the table has unknown values) in the
#: reduced rows
UNREAD_COLUMNS = ("raw_start_ticks", "raw_end_ticks", "clock_domain")


def _without_unread_columns(table: EventTable) -> EventTable:
    columns = dict(table.columns)
    n = len(table)
    for name in UNREAD_COLUMNS:
        dtype, default = NUMERIC_COLUMNS.get(name, (np.int32, 0))
        columns[name] = constant_column(default, dtype, n)
    strings = dict(table.strings)
    strings["clock_domain"] = [""]
    return EventTable(columns, strings, dict(table.meta))


#: the columns the critical path's walk reads (its edges, labels, names, launches)
WALK_COLUMNS = frozenset(
    {"start_ns", "end_ns", "rank", "category", "stream", "tid", "device", "name", "source",
     "correlation", "data_dep"}
)  # fmt: skip


def walk_rows(table: EventTable, rows: np.ndarray) -> EventTable:
    """``table``'s rows ``rows`` with only the columns the walk reads (:data:`WALK_COLUMNS`);
    the others constant, as the table has unknown values (code 0 of a string column is the
    empty string): what a kept or walked copy of the walk rows weighs.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=s + 1, rank=0, coll_seq=s,
    ...     category=C.KERNEL_COMM, host="h") for s in (0, 5)])
    >>> w = walk_rows(t, np.array([1]))
    >>> w["start_ns"].tolist(), w["coll_seq"].tolist(), w.string("host", 0)
    ([5], [-1], '')
    """
    n = len(rows)
    columns = {}
    for name, column in table.columns.items():
        if name in WALK_COLUMNS:
            columns[name] = column[rows]
        elif name in NUMERIC_COLUMNS:
            dtype, default = NUMERIC_COLUMNS[name]
            columns[name] = constant_column(default, dtype, n)
        else:  # a string column's codes
            columns[name] = constant_column(0, column.dtype, n)
    return EventTable(columns, table.strings, dict(table.meta))


def _with_envelope(table: EventTable, keep: np.ndarray) -> np.ndarray:
    """``keep`` and, per file and rank, the left-out row that starts first and the one that
    ends last (per file: a file's rows are all in one partition)."""
    out = keep.copy()
    left = np.flatnonzero(~keep)
    if len(left) == 0:
        return out
    rank = table["rank"][left].astype(np.int64) + 1
    key = table["source"][left].astype(np.int64) * (int(rank.max()) + 1) + rank
    start, end = table["start_ns"][left], table["end_ns"][left]
    order, _, slices = group_slices(key)
    for sl in slices:
        rows = order[sl]
        out[left[rows[int(np.argmin(start[rows]))]]] = True
        out[left[rows[int(np.argmax(end[rows]))]]] = True
    return out


def name_counts(table: EventTable) -> dict[int, dict[str, dict[str, int]]]:
    """Per rank, how many rows name each device and each host (what
    :func:`~otel_ext.analysis.cross.stragglers.rank_devices` takes the most frequent of).

    >>> name_counts(EventTable.from_rows([dict(rank=0, host="h0", device="h0/chip0")] * 2))
    {0: {'device': {'h0/chip0': 2}, 'host': {'h0': 2}}}
    """
    rank = table["rank"]
    out: dict[int, dict[str, dict[str, int]]] = {}
    device_rows = (rank >= 0) & (table["category"] != Category.LINK_TRANSFER)
    for column, sel in (("device", device_rows), ("host", rank >= 0)):
        codes = table[column]
        sel = sel & (codes > 0)
        if not sel.any():
            continue
        c = codes[sel].astype(np.int64)
        width = int(c.max()) + 1
        keys, counts = np.unique(rank[sel].astype(np.int64) * width + c, return_counts=True)
        strings = table.strings[column]
        for key, n in zip(keys.tolist(), counts.tolist()):
            r, c = divmod(key, width)
            by = out.setdefault(int(r), {}).setdefault(column, {})
            by[strings[c]] = by.get(strings[c], 0) + int(n)
    return {r: out[r] for r in sorted(out)}


def merge_name_counts(
    parts: Sequence[dict[int, dict[str, dict[str, int]]]],
) -> dict[int, dict[str, dict[str, int]]]:
    """:func:`name_counts` of several tables added together.

    >>> merge_name_counts([{0: {"host": {"h": 1}}}, {0: {"host": {"h": 2}}, 1: {}}])
    {0: {'host': {'h': 3}}, 1: {}}
    """
    names: dict[int, dict[str, dict[str, int]]] = {}
    for p in parts:
        for r, cols in p.items():
            mine = names.setdefault(r, {})
            for column, counts in cols.items():
                by = mine.setdefault(column, {})
                for s, n in counts.items():
                    by[s] = by.get(s, 0) + n
    return {r: names[r] for r in sorted(names)}


@dataclass
class RankTables:
    """What the per-rank phase leaves: its results and the rows the cross-rank phase reads.

    Attributes:
        temporal, idle, overlap, launch: the per-rank breakdown rows
            (:mod:`otel_ext.analysis.rank.breakdown`, :mod:`otel_ext.analysis.rank.overlap`).
        kernels: kernel statistics (:class:`KernelStats`).
        names: per rank, the rows naming each device and host (:func:`name_counts`).
        events: rows of the table.
        reduced: the rows the cross-rank passes read (:func:`cross_rank_mask`, with each
            rank's first start and last end), one table per input part.
        reduced_positions: for each reduced table, its rows' positions in the whole set
            (when ``positions`` were given; empty otherwise).
        walk: the rows the critical path's walk reads (every device row and runtime call of
            the ranks, :func:`~otel_ext.analysis.cross.critical_path_walk.walk_mask`), as recorded; they
            stay where the per-rank phase ran (None once the results left it).
        walk_keys: each walk row's position in the whole set (its row number without
            ``positions``): the keys :func:`~otel_ext.analysis.cross.critical_path_walk.walk_pieces`
            takes.
        walk_travels: every walk row is among the reduced rows too (no runtime calls but
            the rank's first and last rows: an OTLP run); then ``walk`` is None and these
            ranks are walked from the aligned reduced rows (:func:`walk_of_aligned`), where
            they are in process and on a cluster's client alike.
        full, full_positions: with ``hold``, when rows were held: the reduced rows as they
            are without holding (one table per part, and their positions), which the held
            rows are the rest of; None otherwise. They stay where the per-rank phase ran.
        held: for each ``full`` table, which of its rows are held (not in ``reduced``).
        held_rows: how many rows were held (it travels; ``full`` does not).
        device_busy: per device name (as the rows say it, '' for none), per rank, the union
            of its held rows' intervals (merged: start and end arrays, as recorded): what
            request latency reads of them (each device's busy time inside a window), exact
            after the clock correction, which moves a rank's times by one increasing
            function (a union of unions is the union; the rows that also travel count
            once). It travels.
    """

    temporal: list[breakdown.TemporalBreakdownRow]
    idle: list[breakdown.IdleBreakdownRow]
    overlap: list[overlap.OverlapRow]
    launch: list[breakdown.LaunchStatsRow]
    kernels: KernelStats
    names: dict[int, dict[str, dict[str, int]]]
    events: int
    reduced: list[EventTable]
    reduced_positions: list[np.ndarray] = field(default_factory=list)
    walk: EventTable | None = None
    walk_keys: np.ndarray | None = None
    walk_travels: bool = False
    full: list[EventTable] | None = None
    full_positions: list[np.ndarray] = field(default_factory=list)
    held: list[np.ndarray] = field(default_factory=list)
    held_rows: int = 0
    device_busy: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        """Whether rows were held back (see ``full``)."""
        return self.full is not None

    def without_walk(self) -> RankTables:
        """These results without the walk rows and the held rows (what travels to the
        client)."""
        return replace(self, walk=None, walk_keys=None, full=None, full_positions=[], held=[])

    def kernel_breakdown(self) -> breakdown.KernelBreakdownDoc:
        """The document's ``kernel_breakdown`` section: the kernel statistics' breakdown,
        with the launch statistics' rows (``launch``)."""
        doc = self.kernels.breakdown().as_dict()
        doc["launch"] = [r.as_dict() for r in self.launch]
        return doc

    def with_held(self) -> RankTables:
        """These results with the held rows back among the reduced rows (what the reduced
        rows are without holding); themselves when nothing was held."""
        if self.full is None:
            return self
        return replace(
            self, reduced=list(self.full), reduced_positions=list(self.full_positions),
            full=None, full_positions=[], held=[], held_rows=0, device_busy={},
        )  # fmt: skip


def per_rank_tables(
    table: EventTable,
    *,
    parts: Sequence[EventTable] | None = None,
    positions: np.ndarray | None = None,
    hold: bool = False,
    busy: bool = True,
) -> RankTables:
    """Run the per-rank passes over ``table`` (every row of the ranks it holds).

    Args:
        table: the events of some ranks (or of all).
        parts: the tables ``table`` is the concatenation of (one per file), whose rows the
            reduced tables keep with those tables' own string dictionaries (so that joining
            them gives the codes the whole set has); default: ``table`` itself.
        positions: each row's position in the whole set (rows numbered through the files in
            order); default: its row number.
        hold: keep the ranks' rows of :data:`HELD_CATEGORIES` out of the reduced rows (each
            file's and rank's first and last rows stay in): what a cluster's partition does,
            so that they do not travel (they stay in :attr:`RankTables.full`); the client
            asks for it unless some file :func:`joins_by_time`. In process nothing
            travels, and nothing is held.
        busy: with ``hold``, also the held rows' busy intervals per device
            (:attr:`RankTables.device_busy`; only request latency reads them: the client
            says no when no file has requests).
    """
    from otel_ext.analysis.cross.critical_path_walk import walk_mask

    whole = [table] if parts is None else list(parts)
    wanted = cross_rank_mask(table)
    keep = _with_envelope(table, wanted)
    full_keep = None
    if hold:
        kept = wanted & ~(
            np.isin(table["category"], _codes(HELD_CATEGORIES)) & (table["rank"] >= 0)
        )
        if not np.array_equal(kept, wanted):
            full_keep, keep = keep, _with_envelope(table, kept)
    intervals = {} if full_keep is None or not busy else device_busy(table, full_keep & ~keep)
    walk = np.flatnonzero(walk_mask(table))
    keys = walk.astype(np.int64) if positions is None else positions[walk].astype(np.int64)
    travels = bool(keep[walk].all())
    cut = _cut_parts(whole, keep, full_keep, positions)
    return RankTables(
        temporal=breakdown.temporal_breakdown(table),
        idle=breakdown.idle_breakdown(table),
        overlap=overlap.comm_comp_overlap(table),
        launch=breakdown.launch_stats(table),
        kernels=kernel_stats(table, positions=positions),
        names=name_counts(table),
        events=len(table),
        reduced=cut.reduced,
        reduced_positions=cut.reduced_positions,
        # walk rows that are all among the reduced rows are walked from those, not kept twice
        walk=None if travels else walk_rows(table, walk),
        walk_keys=None if travels else keys,
        walk_travels=travels,
        full=cut.full,
        full_positions=cut.full_positions,
        held=cut.held,
        held_rows=sum(int(h.sum()) for h in cut.held),
        device_busy=intervals,
    )


@dataclass
class _Cut:
    """Each part's rows kept for the cross-rank passes (and, when rows were held, each
    part's rows as they are without holding and which of them are held)."""

    reduced: list[EventTable] = field(default_factory=list)
    reduced_positions: list[np.ndarray] = field(default_factory=list)
    full: list[EventTable] | None = None
    full_positions: list[np.ndarray] = field(default_factory=list)
    held: list[np.ndarray] = field(default_factory=list)


def _cut_parts(
    whole: Sequence[EventTable],
    keep: np.ndarray,
    full_keep: np.ndarray | None,
    positions: np.ndarray | None,
) -> _Cut:
    """The rows ``keep`` selects (a mask over the parts' rows in order) of each part, with
    their positions (when given) and the columns no cross-rank pass reads dropped; with
    ``full_keep`` (the rows kept without holding), also each part's rows it selects and
    which of them ``keep`` holds back."""
    out = _Cut(full=None if full_keep is None else [])
    at = 0
    for part in whole:
        n = len(part)
        sel = keep[at : at + n]
        if out.full is not None and full_keep is not None:
            every = full_keep[at : at + n]
            whole_part = _without_unread_columns(part if every.all() else part.select(every))
            out.full.append(whole_part)
            out.held.append(~sel[every])
            out.reduced.append(whole_part.select(sel[every]))
            if positions is not None:
                out.full_positions.append(positions[at : at + n][every])
        else:
            out.reduced.append(_without_unread_columns(part if sel.all() else part.select(sel)))
        if positions is not None:
            out.reduced_positions.append(positions[at : at + n][sel])
        at += n
    return out


def device_busy(
    table: EventTable, rows: np.ndarray
) -> dict[str, list[tuple[int, np.ndarray, np.ndarray]]]:
    """Per device name and rank, the union of the intervals of ``table``'s device rows
    (:data:`HELD_CATEGORIES`) among ``rows`` (a mask), as merged intervals
    (:attr:`RankTables.device_busy`).

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=e, rank=0, device="d",
    ...     category=C.KERNEL_COMPUTE) for s, e in [(0, 10), (5, 12), (20, 30)]])
    >>> [(r, s.tolist(), e.tolist()) for r, s, e in device_busy(t, np.ones(3, bool))["d"]]
    [(0, [0, 20], [12, 30])]
    """
    from otel_ext.analysis.serving.requests import union_of

    # device rows only: the held rows can include a file's and rank's first or last row of
    # another kind, which a held device row displaced from the rows that travel
    device = np.isin(table["category"], _codes(HELD_CATEGORIES))
    sel = np.flatnonzero(rows & device & (table["rank"] >= 0))
    out: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    if len(sel) == 0:
        return out
    dev = table["device"][sel].astype(np.int64)
    rank = table["rank"][sel].astype(np.int64)
    key = dev * (int(rank.max()) + 1) + rank
    order, _, slices = group_slices(key)
    start, end, names = table["start_ns"], table["end_ns"], table.strings["device"]
    for sl in slices:
        at = sel[order[sl]]
        s, e = union_of(start[at], end[at])
        out.setdefault(names[int(table["device"][at[0]])], []).append(
            (int(table["rank"][at[0]]), s, e)
        )
    return out


def _codes(categories: Iterable[Category]) -> np.ndarray:
    return np.asarray([int(c) for c in categories], dtype=np.int8)


def _group_key(row: Any, source_code: Mapping[str, int]) -> int:
    """:func:`~otel_ext.analysis.rank.breakdown.rank_groups`' order: rank, or for rows of no
    rank ``-1 - code`` of their file in the joined table."""
    return int(row.rank) if row.rank >= 0 else -1 - source_code[row.source]


def merge_rank_tables(parts: Sequence[RankTables], *, source_code: Mapping[str, int]) -> RankTables:
    """The per-rank results of partitions with disjoint ranks, as one table of them all
    gives them.

    Args:
        parts: each partition's :class:`RankTables`, in the order of their rows.
        source_code: file path -> its code in the joined table's ``source`` strings.
    """
    if len(parts) == 1:
        return parts[0]

    def rows(attr: str) -> list[Any]:
        every = [r for p in parts for r in getattr(p, attr)]
        return sorted(every, key=lambda r: _group_key(r, source_code))  # stable: streams

    kernels = KernelStats()
    for p in parts:
        kernels.merge(p.kernels)
    return RankTables(
        temporal=rows("temporal"),
        idle=rows("idle"),
        overlap=rows("overlap"),
        launch=rows("launch"),
        kernels=kernels,
        names=merge_name_counts([p.names for p in parts]),
        events=sum(p.events for p in parts),
        reduced=[t for p in parts for t in p.reduced],
        reduced_positions=[x for p in parts for x in p.reduced_positions],
        walk_travels=all(p.walk_travels for p in parts),
        held_rows=sum(p.held_rows for p in parts),
        device_busy=_joined_busy(parts),
        **_joined_walks(parts),
    )


def _joined_busy(
    parts: Sequence[RankTables],
) -> dict[str, list[tuple[int, np.ndarray, np.ndarray]]]:
    out: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for p in parts:
        for name, spans in p.device_busy.items():
            out.setdefault(name, []).extend(spans)
    return out


def _joined_walks(parts: Sequence[RankTables]) -> dict[str, Any]:
    """The parts' walk rows joined in key order (none when a part's left it)."""
    walks = [(p.walk, p.walk_keys) for p in parts if p.walk is not None and p.walk_keys is not None]
    if len(walks) < len(parts):
        return {}
    keys = np.concatenate([k for _, k in walks])
    order = np.argsort(keys, kind="stable")
    joined = EventTable.concat([w for w, _ in walks])
    return {"walk": joined.select(order), "walk_keys": keys[order]}


@dataclass
class RepairedRows:
    """Rows the event-level causality repair moved, by key (see :class:`RankTables`'
    ``walk_keys``), with their repaired times: what a worker's walk rows take over from the
    client's aligned table."""

    keys: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray

    @classmethod
    def none(cls) -> RepairedRows:
        empty = np.zeros(0, dtype=np.int64)
        return cls(empty, empty, empty)

    def select(self, mask: np.ndarray) -> RepairedRows:
        return RepairedRows(self.keys[mask], self.start_ns[mask], self.end_ns[mask])


class WalkShares:
    """What a partition's walk needs of the client's decisions: the repaired rows of its
    ranks, and the peer edges of its members and those into its rows (where walks enter it
    from another rank).

    Args:
        keys: the client's reduced rows' keys (ascending), ``rank_of_key`` their ranks.
        repaired, peers: the repair's rows and every peer edge, by key.
    """

    def __init__(
        self, keys: np.ndarray, rank_of_key: np.ndarray, repaired: RepairedRows, peers: PeerEdges
    ) -> None:
        self.repaired, self.peers = repaired, peers
        self._rep_rank = _ranks_at(keys, rank_of_key, repaired.keys)
        self._member_rank = _ranks_at(keys, rank_of_key, peers.member_key)
        self._target_rank = _ranks_at(keys, rank_of_key, peers.target_key)

    def reachable(self, start_rank: int) -> set[int]:
        """The ranks a walk from ``start_rank`` can reach: the walk leaves a rank only
        through a peer edge (a collective member to the last arriver's row), so these are
        the ranks the edges lead to from it, transitively; the critical path needs no other
        rank's pieces.

        >>> from otel_ext.analysis.cross.critical_path_walk import PeerEdges
        >>> keys, ranks = np.arange(4), np.array([0, 1, 2, 3])
        >>> edges = PeerEdges(np.array([0, 1]), np.array([1, 2]), np.array([5, 6]))
        >>> sorted(WalkShares(keys, ranks, RepairedRows.none(), edges).reachable(0))
        [0, 1, 2]
        """
        seen = {int(start_rank)}
        frontier = np.asarray([start_rank], dtype=np.int64)
        while len(frontier):
            led = np.unique(self._target_rank[np.isin(self._member_rank, frontier)])
            frontier = np.asarray([r for r in led.tolist() if r not in seen], dtype=np.int64)
            seen.update(frontier.tolist())
        return seen

    def of(self, ranks: Iterable[int]) -> tuple[RepairedRows, PeerEdges]:
        """The share of a partition of ``ranks``."""
        from otel_ext.analysis.cross.critical_path_walk import PeerEdges

        wanted = np.asarray(sorted(ranks), dtype=np.int64)
        mine = np.isin(self._member_rank, wanted) | np.isin(self._target_rank, wanted)
        p = self.peers
        edges = PeerEdges(p.member_key[mine], p.target_key[mine], p.release_ns[mine])
        return self.repaired.select(np.isin(self._rep_rank, wanted)), edges


def _ranks_at(keys: np.ndarray, rank_of_key: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The ranks of the rows with keys ``wanted`` (each one of ``keys``)."""
    if len(keys) == 0:
        return np.zeros(len(wanted), dtype=np.int64)
    pos = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
    return np.asarray(rank_of_key, dtype=np.int64)[pos]


def aligned_walk(
    walk: EventTable, keys: np.ndarray, clocks: RankClocks, repaired: RepairedRows
) -> EventTable:
    """The walk rows on the aligned timeline: the clock correction the alignment applied
    (:class:`~otel_ext.analysis.cross.alignment.RankClocks`), then the repaired rows' times.

    >>> from otel_ext.analysis.cross.alignment import RankClocks
    >>> from otel_ext.analysis.table import Category as C
    >>> w = EventTable.from_rows([dict(start_ns=s, end_ns=s + 5, rank=0,
    ...     category=C.KERNEL_COMM) for s in (0, 10)])
    >>> moved = aligned_walk(w, np.array([3, 7]), RankClocks(),
    ...     RepairedRows(np.array([7]), np.array([12]), np.array([20])))
    >>> moved["start_ns"].tolist(), moved["end_ns"].tolist()
    ([0, 12], [5, 20])
    """
    moved = clocks.apply(walk)
    if len(repaired.keys) == 0 or len(keys) == 0:
        return moved
    pos = np.clip(np.searchsorted(keys, repaired.keys), 0, len(keys) - 1)
    here = keys[pos] == repaired.keys
    if not here.any():
        return moved
    columns = dict(moved.columns)
    for name, new in (("start_ns", repaired.start_ns), ("end_ns", repaired.end_ns)):
        col = moved[name].copy()
        col[pos[here]] = new[here]
        columns[name] = col
    return EventTable(columns, moved.strings, dict(moved.meta))


def walk_of_aligned(
    aligned: EventTable,
    keys: np.ndarray,
    peers: PeerEdges,
    *,
    ranks: Iterable[int] | None = None,
    device_bound_share: float = 0.9,
    every_rank: bool = False,
) -> WalkPieces:
    """The walk of ``ranks`` (default: all) from the aligned reduced rows, for ranks whose
    walk rows all travelled with them (:attr:`RankTables.walk_travels`); ``keys`` are the
    reduced rows' keys, ``every_rank`` as :func:`walk_of`'s."""
    from otel_ext.analysis.cross.critical_path_walk import walk_mask, walk_pieces

    sel = walk_mask(aligned)
    if ranks is not None:
        sel &= np.isin(aligned["rank"], np.asarray(sorted(ranks), dtype=np.int64))
    rows = np.flatnonzero(sel)
    return walk_pieces(
        walk_rows(aligned, rows),
        keys[rows],
        peers,
        device_bound_share=device_bound_share,
        entries="reachable" if every_rank else "every",
    )


def walk_of(
    tables: RankTables,
    clocks: RankClocks,
    repaired: RepairedRows,
    peers: PeerEdges,
    *,
    device_bound_share: float = 0.9,
    every_rank: bool = False,
) -> WalkPieces:
    """The critical path's walk over the ranks of ``tables`` (where their walk rows are: in
    process, or on the worker that ran their per-rank phase), after the client's alignment:
    the pieces :func:`~otel_ext.analysis.cross.critical_path.stitch` joins across ranks.

    ``every_rank``: ``tables`` holds every rank (in process), so only what the walk from the
    run's last event reaches is walked; a partition walks from every entry its ranks have.
    """
    from otel_ext.analysis.cross.critical_path_walk import walk_pieces

    if tables.walk is None or tables.walk_keys is None:
        raise ValueError("these per-rank results have left their walk rows behind")
    table = aligned_walk(tables.walk, tables.walk_keys, clocks, repaired)
    return walk_pieces(
        table,
        tables.walk_keys,
        peers,
        device_bound_share=device_bound_share,
        entries="reachable" if every_rank else "every",
    )


@dataclass
class HeldSamples:
    """The samples of one part's held compute rows as they travel: their names as codes of
    the part's file's name dictionary, which the client has already (the reduced rows carry
    it), instead of the names themselves (long kernel names would be most of the bytes).

    Attributes:
        part: the part's index among the partition's parts (its files, in order).
        samples: the samples, their ``names`` left empty.
        name_codes: for each of the samples' names (in their order), its code in the file's
            name dictionary.
    """

    part: int
    samples: ComputeSamples
    name_codes: np.ndarray

    def resolved(self, names: Sequence[str]) -> ComputeSamples:
        """The samples with their names, ``names`` the file's name dictionary."""
        return replace(self.samples, names=[names[c] for c in self.name_codes.tolist()])


def held_samples(
    tables: RankTables,
    clocks: RankClocks,
    edges: np.ndarray,
    *,
    alone: Iterable[int] = (),
) -> list[HeldSamples]:
    """The samples (:mod:`otel_ext.analysis.rank.compute_samples`) of ``tables``' held compute
    rows on the aligned timeline (the clock correction the alignment applied; a held row is
    never among the repaired ones: a repair fetches every held row first), in the
    stragglers' time windows ``edges``: one per part that holds some. The rows of ranks in
    ``alone`` (each the only rank of its run: nothing to compare their work with) are
    counted in total only (``ComputeSamples.totals_only``).

    >>> from otel_ext.analysis.cross.alignment import RankClocks
    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=s + 4, rank=0, name=n,
    ...     category=C.KERNEL_COMPUTE) for s, n in [(0, "a"), (9, "b"), (20, "b"), (30, "c")]])
    >>> (h,) = held_samples(per_rank_tables(t, hold=True), RankClocks(), np.array([0, 40]))
    >>> h.resolved(t.strings["name"]).names, h.samples.count.tolist()
    (['b'], [2])
    """
    from otel_ext.analysis.rank.compute_samples import samples_of

    lone = np.asarray(sorted(alone), dtype=np.int64)
    out = []
    for i, (table, held) in enumerate(zip(tables.full or [], tables.held)):
        if not held.any():
            continue
        rows = clocks.apply(table.select(held))
        apart = np.isin(rows["rank"], lone)
        samples = samples_of(rows, edges, rows=np.flatnonzero(~apart) if apart.any() else None)
        if apart.any():
            samples.totals_only = samples_of(rows, edges, rows=np.flatnonzero(apart)).rank_totals()
        if samples.rows == 0:
            continue
        strings = rows.strings["name"]
        code_of = {strings[c]: c for c in np.unique(rows["name"]).tolist()}
        codes = np.asarray([code_of[n] for n in samples.names], dtype=np.int32)
        out.append(HeldSamples(i, replace(samples, names=[]), codes))
    return out
