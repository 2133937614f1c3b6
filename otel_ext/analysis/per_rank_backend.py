"""Where the analysis' per-rank phase runs: one interface, in process or on a cluster.

The engine (:mod:`otel_ext.analysis.engine`) reads as phases: load, per-rank, align,
cross-rank, document. The load and per-rank phases, the critical path's walk of each rank's
rows and the few files read again by the passes that need more than the loaded rows run on
a :class:`PerRankBackend`: :class:`InProcessBackend` here, or
:class:`~otel_ext.analysis.scaleout.dask_backend.DaskBackend`, whose workers load the files
and keep them (``docs/analysis.md``, "Per-rank and cross-rank passes"). Both hand the
cross-rank phase the same :class:`PerRankOutcome`, so the document is the same.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> rows = [dict(start_ns=k * 100, end_ns=k * 100 + 50, rank=0, category=C.KERNEL_COMPUTE)
...         for k in range(4)]
>>> out = InProcessBackend().per_rank(EventTable.from_rows(rows), PerRankOptions())
>>> len(out.reduced), out.keys.tolist(), out.ranks.events
(4, [0, 1, 2, 3], 4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

import numpy as np

from otel_ext.analysis.loaders import LoadResult, ProgressCallback
from otel_ext.analysis.rank.per_rank import RankTables, RepairedRows, per_rank_tables
from otel_ext.analysis.runs import Capture, separate_captures
from otel_ext.analysis.steps import DEFAULT_STEPS, StepSelection, select_steps
from otel_ext.analysis.table import EventTable

if TYPE_CHECKING:
    from otel_ext.analysis.cross.alignment import Alignment
    from otel_ext.analysis.cross.critical_path_walk import PeerEdges, WalkPieces
    from otel_ext.analysis.rank.compute_samples import ComputeSamples

__all__ = [
    "InProcessBackend",
    "PerRankBackend",
    "PerRankOptions",
    "PerRankOutcome",
    "Source",
    "is_paths",
    "load_source",
    "source_paths",
    "walk_inputs",
]

T = TypeVar("T")

#: what :func:`~otel_ext.analysis.engine.analyze` takes: paths (files or folders), a
#: :class:`~otel_ext.analysis.loaders.LoadResult` or an :class:`EventTable`
Source = str | Path | Sequence[str | Path] | LoadResult | EventTable


@dataclass(frozen=True)
class PerRankOptions:
    """The options of the load and per-rank phases.

    Attributes:
        keep_going: load what is valid and list what was skipped.
        progress: ``progress(done, total, path)`` after each file loaded.
        workers: loader processes (default: one per core).
        steps: profiler steps analysed (:mod:`otel_ext.analysis.steps`).
        one_run: every file one run (:func:`~otel_ext.analysis.runs.separate_captures`).
        keep_rows: keep every analysed row for the merged timeline (in process: parked on
            disk, :func:`~otel_ext.analysis.report.timeline.park_rows`).
    """

    keep_going: bool = False
    progress: ProgressCallback | None = None
    workers: int | None = None
    steps: str = DEFAULT_STEPS
    one_run: bool = False
    keep_rows: bool = False


@dataclass
class PerRankOutcome:
    """What the load and per-rank phases hand the cross-rank phase.

    Attributes:
        load: the files' records, skipped records and metric points (its ``table`` holds no
            events once the per-rank phase has them).
        captures: :func:`~otel_ext.analysis.runs.separate_captures`' records.
        steps: the step selection's record (:func:`~otel_ext.analysis.steps.select_steps`).
        ranks: the per-rank results (:class:`~otel_ext.analysis.rank.per_rank.RankTables`).
        reduced: the rows the cross-rank passes read.
        keys: each reduced row's position in the whole set (ascending).
        kept: every analysed row, for the timeline (in process, with ``keep_rows``), else
            None.
    """

    load: LoadResult
    captures: list[Capture]
    steps: StepSelection
    ranks: RankTables
    reduced: EventTable
    keys: np.ndarray
    kept: EventTable | None = None


class PerRankBackend(Protocol):
    """Where the per-rank phase, the walk and the re-reads of files run."""

    def per_rank(self, source: Source, options: PerRankOptions) -> PerRankOutcome:
        """The load and per-rank phases over ``source``."""
        ...

    def holds(self) -> bool:
        """Whether device rows were held back where the per-rank phase ran (then
        :meth:`restore_held` fetches them)."""
        ...

    def restore_held(self) -> tuple[EventTable, np.ndarray]:
        """The reduced rows and their keys with the held device rows back."""
        ...

    def walk(
        self, alignment: Alignment, keys: np.ndarray, ranks: RankTables, *, edges: np.ndarray
    ) -> tuple[WalkPieces, ComputeSamples | None]:
        """The critical path's pieces of every rank on the aligned timeline, and the held
        compute rows' samples in the stragglers' windows ``edges`` (None when none were
        held)."""
        ...

    def map_files(self, fn: Callable[[list[str]], list[T]], paths: list[str]) -> list[T]:
        """``fn(paths)`` where the files are: ``fn`` answers for several paths with its
        per-path answers in order."""
        ...


def is_paths(source: Source) -> bool:
    """Whether ``source`` is paths (not loaded rows).

    >>> is_paths("a.json"), is_paths(EventTable.empty())
    (True, False)
    """
    return not isinstance(source, EventTable) and not (
        hasattr(source, "table") and hasattr(source, "inputs")
    )


def source_paths(source: Source) -> list[str | Path]:
    """The paths ``source`` names (one path, or several).

    Raises:
        TypeError: ``source`` is loaded rows, not paths.

    >>> source_paths("a.json"), source_paths(["a", "b"])
    (['a.json'], ['a', 'b'])
    """
    if isinstance(source, (str, Path)):
        return [source]
    if isinstance(source, (EventTable, LoadResult)) or not is_paths(source):
        raise TypeError("loaded rows are not paths")
    return list(source)


def load_source(source: Source, options: PerRankOptions) -> LoadResult:
    """The load phase in process: ``source`` loaded (:func:`~otel_ext.analysis.loaders.load_paths`),
    or taken as it is.

    Raises:
        InputError: a bad input file or record (unless ``keep_going``).
    """
    from otel_ext.analysis.loaders import MetricPoints, load_paths

    if isinstance(source, EventTable):
        return LoadResult(source, [], [], MetricPoints.from_rows([]))
    if isinstance(source, LoadResult):
        return source
    if hasattr(source, "table") and hasattr(source, "inputs"):  # a load result's look-alike
        return cast(LoadResult, source)
    return load_paths(
        source_paths(source),
        keep_going=options.keep_going,
        progress=options.progress,
        workers=options.workers,
    )


def walk_inputs(alignment: Alignment, keys: np.ndarray) -> tuple[PeerEdges, RepairedRows]:
    """What the walk takes from the alignment decided on the reduced rows: the peer edges
    of the matched collectives and the rows the causality repair moved, by key."""
    from otel_ext.analysis.cross.critical_path import peer_edges

    aligned = alignment.table
    peers = peer_edges(aligned, alignment.match, keys)
    rep = alignment.repaired_rows
    repaired = RepairedRows(keys[rep], aligned["start_ns"][rep], aligned["end_ns"][rep])
    return peers, repaired


class InProcessBackend:
    """The per-rank phase in this process: load, separate the captures, select the steps,
    run the per-rank passes (:func:`~otel_ext.analysis.rank.per_rank.per_rank_tables`) over
    every row; the walk from the rows kept here; files read here."""

    def per_rank(self, source: Source, options: PerRankOptions) -> PerRankOutcome:
        """The load and per-rank phases here. Loaded here, the events are dropped from the
        load result: from the captures on, one copy of the rows is held.

        Raises:
            InputError: a bad input file or record (unless ``keep_going``).
            OtelExtError: a bad ``steps``.
        """
        load = load_source(source, options)
        formats = {i.get("path", ""): i.get("format", "") for i in load.inputs}
        whole, captures = separate_captures(load.table, formats=formats, one_run=options.one_run)
        if is_paths(source):
            load = LoadResult(EventTable.empty(), load.inputs, load.skipped, load.metrics)
        whole, step_record = select_steps(whole, options.steps)
        ranks = per_rank_tables(whole, positions=np.arange(len(whole), dtype=np.int64))
        kept = None
        if options.keep_rows:  # every row, for the timeline: parked on disk meanwhile
            from otel_ext.analysis.report.timeline import park_rows

            kept = park_rows(whole)
        reduced, keys = ranks.reduced[0], ranks.reduced_positions[0]
        return PerRankOutcome(load, captures, step_record, ranks, reduced, keys, kept)

    def holds(self) -> bool:
        """Nothing is held in process."""
        return False

    def restore_held(self) -> tuple[EventTable, np.ndarray]:
        """Never needed in process (nothing is held).

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError("no rows are held in process")

    def walk(
        self, alignment: Alignment, keys: np.ndarray, ranks: RankTables, *, edges: np.ndarray
    ) -> tuple[WalkPieces, ComputeSamples | None]:
        """Every rank's walk here: from the aligned rows when the walk rows all travelled
        with them, else from the per-rank results' walk rows; no held samples."""
        from otel_ext.analysis.rank.per_rank import walk_of, walk_of_aligned

        peers, repaired = walk_inputs(alignment, keys)
        if ranks.walk_travels:  # the walk rows are the aligned rows here
            return walk_of_aligned(alignment.table, keys, peers, every_rank=True), None
        return walk_of(ranks, alignment.clocks, repaired, peers, every_rank=True), None

    def map_files(self, fn: Callable[[list[str]], list[T]], paths: list[str]) -> list[T]:
        """``fn(paths)`` here."""
        return fn(paths)
