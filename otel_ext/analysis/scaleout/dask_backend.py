"""The per-rank back-end on a Dask cluster: :class:`~otel_ext.analysis.per_rank_backend.PerRankBackend`
over a connected :class:`~otel_ext.analysis.scaleout.dask_cluster.DaskCluster`.

Paths are loaded and kept on the workers, which run the per-rank passes and the critical
path's walk of their ranks (:meth:`DaskCluster.per_rank_phase`, :meth:`DaskCluster.walk_phase`);
rows already loaded (an :class:`~otel_ext.analysis.table.EventTable` or a
:class:`~otel_ext.analysis.loaders.LoadResult`) go through the in-process per-rank phase,
and only the files read again run on the workers. Either way the cross-rank phase gets the
same :class:`~otel_ext.analysis.per_rank_backend.PerRankOutcome`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from otel_ext.analysis.per_rank_backend import (
    InProcessBackend,
    PerRankOptions,
    PerRankOutcome,
    Source,
    is_paths,
    source_paths,
    walk_inputs,
)

if TYPE_CHECKING:
    from otel_ext.analysis.cross.alignment import Alignment
    from otel_ext.analysis.cross.critical_path_walk import WalkPieces
    from otel_ext.analysis.rank.compute_samples import ComputeSamples
    from otel_ext.analysis.rank.per_rank import RankTables
    from otel_ext.analysis.scaleout.dask_cluster import DaskCluster, PerRankPhase
    from otel_ext.analysis.table import EventTable

__all__ = ["DaskBackend"]

T = TypeVar("T")


class DaskBackend:
    """The per-rank phase, the walk and the files read again on ``cluster``'s workers.

    Args:
        cluster: a connected cluster (the caller owns it).
    """

    def __init__(self, cluster: DaskCluster) -> None:
        self.cluster = cluster
        #: the workers' per-rank phase (None when the rows were loaded here)
        self.phase: PerRankPhase | None = None
        self._here = InProcessBackend()

    def per_rank(self, source: Source, options: PerRankOptions) -> PerRankOutcome:
        """Paths loaded and kept on the workers, their per-rank passes run there; rows
        already loaded, in process.

        Raises:
            InputError: a bad input file or record (unless ``keep_going``).
            OtelExtError: a bad ``steps``; a worker died, or cannot import otel-ext.
        """
        if not is_paths(source):
            return self._here.per_rank(source, options)
        phase = self.cluster.per_rank_phase(
            source_paths(source),
            keep_going=options.keep_going,
            progress=options.progress,
            steps=options.steps,
            one_run=options.one_run,
        )
        self.phase = phase
        return PerRankOutcome(
            phase.load, phase.captures, phase.steps, phase.ranks, phase.reduced, phase.keys
        )

    def holds(self) -> bool:
        """Whether some partition kept device rows back on its worker."""
        return self.phase is not None and self.phase.holds

    def restore_held(self) -> tuple[EventTable, np.ndarray]:
        """The reduced rows and keys with every partition's held rows back
        (:meth:`DaskCluster.restore_held`); the per-rank results' busy intervals of the held
        rows are dropped (every device row is here now).

        Raises:
            RuntimeError: the rows were not loaded on the workers.
        """
        if self.phase is None:
            raise RuntimeError("no rows are held: the per-rank phase ran in process")
        reduced, keys = self.cluster.restore_held(self.phase)
        self.phase.ranks.device_busy = {}
        return reduced, np.asarray(keys)

    def walk(
        self, alignment: Alignment, keys: np.ndarray, ranks: RankTables, *, edges: np.ndarray
    ) -> tuple[WalkPieces, ComputeSamples | None]:
        """Each partition's walk on the worker that keeps its rows
        (:meth:`DaskCluster.walk_phase`), stitched here later; when partitions hold compute
        rows, the samples of every compute row on the aligned timeline (the held rows' from
        the workers, the reduced rows' from here), else None."""
        if self.phase is None:
            return self._here.walk(alignment, keys, ranks, edges=edges)
        from otel_ext.analysis.rank.compute_samples import ComputeSamples, samples_of
        from otel_ext.analysis.runs import rank_runs

        holds = self.phase.holds
        aligned = alignment.table
        peers, repaired = walk_inputs(alignment, keys)
        runs = rank_runs(aligned)
        sizes = Counter(runs.values())
        pieces, held = self.cluster.walk_phase(
            self.phase, alignment.clocks, repaired, peers, aligned=aligned, keys=keys, edges=edges,
            alone=frozenset(r for r, run in runs.items() if sizes[run] == 1),
        )  # fmt: skip
        if not holds:
            return pieces, None
        return pieces, ComputeSamples.join([samples_of(aligned, edges), *held])

    def map_files(self, fn: Callable[[list[str]], list[T]], paths: list[str]) -> list[T]:
        """``fn(paths)``, one job per path on the workers (where the files are)."""
        if not paths:
            return fn(paths)
        return self.cluster.map_files(fn, paths)
