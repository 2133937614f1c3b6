"""The per-rank phase as jobs over files, for a cluster whose workers keep what they load.

Four steps (``docs/analysis.md``, "What runs where, on a cluster"), the first and the last two
on the workers:

1. :func:`load_and_keep` (one job per file): load the file, select its profiler steps (a
   per-file decision, :func:`~otel_ext.analysis.steps.select_steps`), keep the result in the
   worker's memory; :func:`summary_of` gives the client only a :class:`FileSummary`: the
   file's record, its skipped records, its metric points, its step record and a *sketch* of
   its table (per rank the row that starts first and the one that ends last, with the file's
   ``source`` dictionary), which is all :func:`~otel_ext.analysis.runs.separate_captures`
   reads.
2. On the client, :func:`decide_ranks` runs ``separate_captures`` on the joined sketches: the
   rank each (file, trace rank) gets, the runs; :func:`rank_partitions` cuts the ranks into
   partitions (a rank's rows, from however many files, in one).
3. :func:`piece_of` (one job per file and partition, where the file is kept): the file's rows
   of the partition's ranks, renumbered, with their positions in the whole set.
4. :func:`partition_pass` (one job per partition, on its pieces): join them and run
   :func:`~otel_ext.analysis.rank.per_rank.per_rank_tables`; only its
   :class:`~otel_ext.analysis.rank.per_rank.RankTables` travel to the client, which puts each
   file's reduced rows back in order (:func:`reassemble`). The reduced rows travel as a
   :class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable`, the metric points as
   :class:`~otel_ext.analysis.scaleout.packed_rows.PackedPoints`, the busy intervals and the walk's
   pieces packed too (:mod:`otel_ext.analysis.scaleout.packed_rows`: all lossless).

The functions are plain (no Dask here): :mod:`otel_ext.analysis.scaleout.dask_cluster` submits them.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([dict(start_ns=s, end_ns=s + 5, rank=0, source="a",
...     category=C.CPU_OP) for s in (0, 10, 20)])
>>> sk = sketch(t)
>>> len(sk), sk["start_ns"].tolist(), sk["end_ns"].tolist()
(2, [0, 20], [5, 25])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_ext.analysis.intervals import group_slices
from otel_ext.analysis.loaders import FileResult
from otel_ext.analysis.rank.per_rank import RankTables, joins_by_time, per_rank_tables
from otel_ext.analysis.runs import Capture, separate_captures
from otel_ext.analysis.scaleout.packed_rows import PackedPoints
from otel_ext.analysis.steps import StepSelection, parse_steps, select_steps
from otel_ext.analysis.table import STRING_COLUMNS, Category, EventTable, constant_column
from otel_ext.errors import OtelExtError

__all__ = [
    "FileSummary",
    "KeptFile",
    "PackedPositions",
    "Partition",
    "Piece",
    "RankDecision",
    "decide_ranks",
    "load_and_keep",
    "partition_pass",
    "piece_of",
    "rank_partitions",
    "reassemble",
    "sketch",
    "summary_of",
]


def sketch(table: EventTable) -> EventTable:
    """Per rank, the row that starts first and the row that ends last, with the file's
    ``source`` dictionary (its other string columns empty): what
    :func:`~otel_ext.analysis.runs.separate_captures` reads of a table.
    """
    if len(table) == 0:
        rows = np.zeros(0, dtype=np.int64)
    else:
        order, _, slices = group_slices(table["rank"].astype(np.int64))
        start, end = table["start_ns"], table["end_ns"]
        picked = set()
        for sl in slices:
            r = order[sl]
            picked.add(int(r[int(np.argmin(start[r]))]))
            picked.add(int(r[int(np.argmax(end[r]))]))
        rows = np.asarray(sorted(picked), dtype=np.int64)
    small = table.select(rows)
    columns = dict(small.columns)
    strings = {k: [""] for k in STRING_COLUMNS}
    for name in STRING_COLUMNS:
        if name == "source":
            strings[name] = list(small.strings[name])
        else:
            columns[name] = constant_column(0, np.int32, len(rows))
    return EventTable(columns, strings, {})


@dataclass
class KeptFile:
    """What a worker keeps of one file: its load result (the table with the selected steps),
    the file's record as loaded, its step record and the sketch of its table as loaded;
    whether its rows are joined with device rows by time
    (:func:`~otel_ext.analysis.rank.per_rank.joins_by_time`: then no partition holds any), and
    whether it has request or phase rows (then the partitions send their held rows' busy
    intervals)."""

    result: FileResult
    info: dict[str, Any]
    steps: StepSelection | None
    sketch: EventTable | None
    joins_by_time: bool = False
    requests: bool = False


class FileSummary(FileResult):
    """The client's view of a kept file: its record (as :meth:`FileResult.info` gives it),
    skipped records and the points of the metrics an analysis reads
    (:data:`~otel_ext.analysis.cross.counter_evidence.READ_METRICS`; the others counted); ``table`` is the
    file's sketch (:func:`sketch`)."""

    def __init__(self, kept: KeptFile) -> None:
        from otel_ext.analysis.cross.counter_evidence import READ_METRICS

        r = kept.result
        points = None if r.metrics is None else r.metrics.only_names(READ_METRICS)
        super().__init__(r.path, r.format, kept.sketch, points, list(r.skipped), r.note)
        self._info = dict(kept.info)
        self.steps = kept.steps
        self.rows = 0 if r.table is None else len(r.table)
        self.joins_by_time = kept.joins_by_time
        self.requests = kept.requests

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def __getstate__(self) -> dict[str, Any]:  # the metric points travel packed
        state = dict(self.__dict__)
        if self.metrics is not None:
            state["metrics"] = PackedPoints.of(self.metrics)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("metrics"), PackedPoints):
            state = dict(state, metrics=state["metrics"].unpack())
        self.__dict__.update(state)


def load_and_keep(load: Any, args: Any, steps: str) -> KeptFile:
    """Run on a worker: ``load(args)`` (a loader job answering a :class:`FileResult`), its
    table's steps selected (``steps``, see :mod:`otel_ext.analysis.steps`)."""
    result = load(args)
    if not isinstance(result, FileResult):
        raise TypeError(f"a loader job answered {type(result).__name__}, not a file's result")
    info = result.info()  # of the file as loaded (its events before the selection)
    if result.table is None:
        return KeptFile(result, info, None, None)
    before = sketch(result.table)
    try:
        parse_steps(steps)
    except OtelExtError:  # said by the client once every file is loaded, as in process
        return KeptFile(result, info, None, before)
    table, record = select_steps(result.table, steps, none_ok=True)
    kept = FileResult(result.path, result.format, table, result.metrics, result.skipped)
    kept.note = result.note
    cat = table["category"]
    requests = bool(((cat == Category.REQUEST) | (cat == Category.PHASE)).any())
    return KeptFile(kept, info, record, before, joins_by_time(table), requests)


def summary_of(kept: KeptFile) -> FileSummary:
    """Run on a worker: the :class:`FileSummary` of a kept file."""
    return FileSummary(kept)


@dataclass
class RankDecision:
    """The client's decision on ranks: per file (by index), trace rank -> rank; the runs."""

    captures: list[Capture]
    renumber: dict[int, dict[int, int]]
    rank_runs: dict[int, int]
    ranks_of: dict[int, set[int]] = field(default_factory=dict)


def decide_ranks(
    sketches: list[EventTable | None], *, formats: dict[str, str], one_run: bool
) -> RankDecision:
    """:func:`~otel_ext.analysis.runs.separate_captures` on the files' sketches (in
    file order; None for a file without a table)."""
    have = [(i, t) for i, t in enumerate(sketches) if t is not None]
    joined = EventTable.concat([t for _, t in have])
    table, captures = separate_captures(joined, formats=formats, one_run=one_run)
    renumber: dict[int, dict[int, int]] = {}
    ranks_of: dict[int, set[int]] = {}
    at = 0
    for i, t in have:
        n = len(t)
        old = joined["rank"][at : at + n].tolist()
        new = table["rank"][at : at + n].tolist()
        renumber[i] = {int(o): int(w) for o, w in zip(old, new) if o != w}
        ranks_of[i] = {int(w) for w in new if w >= 0}
        at += n
    return RankDecision(captures, renumber, dict(table.meta.get("rank_runs", {})), ranks_of)


@dataclass(frozen=True)
class Partition:
    """A per-rank job's share of the set: some ranks' rows from every file that holds them.

    Attributes:
        ranks: the ranks (after renumbering).
        files: the files (indices, ascending) that hold rows of those ranks, or that this
            partition owns.
        owned: the files whose rows of no rank this partition takes (every file is owned by
            one partition: the one of its lowest rank, else one by its index).
    """

    ranks: frozenset[int]
    files: tuple[int, ...]
    owned: frozenset[int]


def rank_partitions(decision: RankDecision, files: list[int], *, parts: int) -> list[Partition]:
    """The ranks in at most ``parts`` groups of consecutive ranks (as many ranks each, within
    one), each with the files that hold them: a rank's rows, from however many files, are in
    one partition, and a file's rows may be in several.

    >>> d = RankDecision([], {}, {}, {0: {0}, 1: {1}, 2: {0, 2}, 3: set()})
    >>> [(sorted(p.ranks), p.files, sorted(p.owned)) for p in rank_partitions(d, [0, 1, 2, 3], parts=2)]
    [([0, 1], (0, 1, 2), [0, 1, 2]), ([2], (2, 3), [3])]
    """
    ranks = sorted({r for f in files for r in decision.ranks_of.get(f, set())})
    n = max(1, min(parts, len(ranks)))
    size, extra = divmod(len(ranks), n)
    groups: list[list[int]] = []
    at = 0
    for k in range(n):
        take = size + (1 if k < extra else 0)
        groups.append(ranks[at : at + take])
        at += take
    home = {r: k for k, g in enumerate(groups) for r in g}
    owner = {
        f: home[min(decision.ranks_of[f])] if decision.ranks_of.get(f) else f % n for f in files
    }
    out = []
    for k, g in enumerate(groups):
        mine = set(g)
        holding = [f for f in files if owner[f] == k or mine & decision.ranks_of.get(f, set())]
        owned = frozenset(f for f in files if owner[f] == k)
        out.append(Partition(frozenset(g), tuple(holding), owned))
    return out


@dataclass
class Piece:
    """One file's rows of one partition, with their positions in the whole set."""

    table: EventTable
    positions: np.ndarray


def piece_of(
    kept: KeptFile, renumber: dict[int, int], ranks: frozenset[int], owned: bool, offset: int
) -> Piece:
    """Run on the worker that keeps the file: its rows of ``ranks`` (and of no rank when
    ``owned``), the ranks renumbered.

    Args:
        kept: the kept file.
        renumber: trace rank -> rank (:class:`RankDecision`).
        ranks: the partition's ranks.
        owned: whether the partition owns the file (takes its rows of no rank, and answers a
            piece even when it has no rows, for the file's string dictionaries).
        offset: the position of the file's first row in the whole set.
    """
    loaded = kept.result.table
    table = _renumbered(loaded if loaded is not None else EventTable.empty(), renumber)
    rank = table["rank"]
    sel = np.isin(rank, np.asarray(sorted(ranks), dtype=np.int64))
    if owned:
        sel |= rank < 0
    rows = np.flatnonzero(sel)
    piece = table if len(rows) == len(table) else table.select(rows)
    return Piece(piece, rows.astype(np.int64) + offset)


def _renumbered(table: EventTable, renumber: dict[int, int]) -> EventTable:
    if not renumber or len(table) == 0:
        return table
    rank = table["rank"]
    new = rank.copy()
    for old, to in renumber.items():
        new[rank == old] = to
    cols = dict(table.columns)
    cols["rank"] = new.astype(rank.dtype)
    return EventTable(cols, table.strings, dict(table.meta))


@dataclass(frozen=True)
class PackedPositions:
    """Ascending row positions as one bit per row of the span they cover: what a reduced
    table's positions weigh on the way to the client (a profiler file keeps a tenth to a
    third of its rows, an OTLP run nearly all: 8 bytes a kept row as integers, 1/8 byte a
    row of the file as bits).

    >>> p = PackedPositions.of(np.array([5, 6, 9, 20]))
    >>> p.unpack().tolist(), len(p.bits)
    ([5, 6, 9, 20], 2)
    >>> PackedPositions.of(np.zeros(0, dtype=np.int64)).unpack().tolist()
    []
    """

    first: int
    bits: np.ndarray
    count: int

    @classmethod
    def of(cls, positions: np.ndarray) -> PackedPositions:
        if len(positions) == 0:
            return cls(0, np.zeros(0, dtype=np.uint8), 0)
        first = int(positions[0])
        span = np.zeros(int(positions[-1]) - first + 1, dtype=bool)
        span[positions - first] = True
        return cls(first, np.packbits(span), len(positions))

    def unpack(self) -> np.ndarray:
        if self.count == 0:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(np.unpackbits(self.bits)).astype(np.int64) + self.first


def partition_pass(
    pieces: list[Piece],
    *,
    split: Sequence[bool] | None = None,
    owned: Sequence[bool] | None = None,
    hold: bool = False,
    busy: bool = True,
) -> RankTables:
    """Run on a worker: the per-rank passes over a partition's pieces (in file order); the
    reduced rows come back one table per piece.

    Args:
        pieces: the partition's pieces.
        split: for each piece, whether its file is cut into several pieces: only those need
            their reduced rows' positions (default: all come back).
        owned: for each piece, whether this partition owns its file: only the owner's piece
            carries the file's string dictionaries (the others' are empty; the client puts
            the owner's back, :func:`reassemble`); default: all carry them.
        hold: keep the device rows the cross-rank passes take samples of here
            (:func:`~otel_ext.analysis.rank.per_rank.per_rank_tables`' ``hold``); the client
            says no when some file :func:`~otel_ext.analysis.rank.per_rank.joins_by_time`.
        busy: with ``hold``, also the held rows' busy intervals (the client says no when no
            file has request rows).
    """
    tables = [p.table for p in pieces]
    table = tables[0] if len(tables) == 1 else EventTable.concat(tables)
    positions = np.concatenate([p.positions for p in pieces])
    out = per_rank_tables(table, parts=tables, positions=positions, hold=hold, busy=busy)
    return for_client(out, split=split, owned=owned)


def for_client(
    out: RankTables, *, split: Sequence[bool] | None, owned: Sequence[bool] | None
) -> RankTables:
    """``out``'s reduced rows as the client takes them (:func:`partition_pass`' ``split``
    and ``owned``): positions only of pieces of cut files, string dictionaries only in the
    owner's piece. The held rows (:attr:`RankTables.full`) keep theirs, as the worker reads
    them; :meth:`RankTables.with_held` passes through here again before it travels."""
    if split is not None:
        out.reduced_positions = [w if s else w[:0] for w, s in zip(out.reduced_positions, split)]
    if owned is not None:
        out.reduced = [
            t if o else EventTable(t.columns, {k: [] for k in t.strings}, t.meta)
            for t, o in zip(out.reduced, owned)
        ]
    return out


def reassemble(pieces: list[tuple[EventTable, np.ndarray]]) -> EventTable:
    """One file's reduced rows from its pieces (from several partitions), in its row order;
    the first piece (the owner's) carries the file's string dictionaries for all.

    >>> a = EventTable.from_rows([dict(start_ns=s, name="k") for s in (0, 2)])
    >>> one = EventTable.from_rows([dict(start_ns=1, name="k")])
    >>> b = EventTable(one.columns, {k: [] for k in one.strings}, {})
    >>> t = reassemble([(a, np.array([0, 2])), (b, np.array([1]))])
    >>> t["start_ns"].tolist(), [t.string("name", i) for i in range(3)]
    ([0, 1, 2], ['k', 'k', 'k'])
    """
    if len(pieces) == 1:
        return pieces[0][0]
    strings = pieces[0][0].strings
    tables = [EventTable(t.columns, strings, t.meta) for t, _ in pieces]
    joined = EventTable.concat(tables)
    order = np.argsort(np.concatenate([w for _, w in pieces]), kind="stable")
    return joined.select(order)
