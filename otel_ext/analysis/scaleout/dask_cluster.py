"""The analysis' per-rank phase on a Dask distributed cluster (``otel-ext analyze --scheduler``).

Reading the telemetry is most of an analysis' time and all of its memory that grows with the
raw size of the set; the cross-rank passes need far less than every row. So on a cluster the
workers (which see the files, through a shared file system) load the files and keep them,
and run every per-rank pass; the client decides what needs every file and runs the
cross-rank passes (:mod:`otel_ext.analysis.scaleout.per_rank_jobs` has the jobs):

* on the workers, one job per file: finding its format, inflating and decoding it into its
  columnar :class:`~otel_ext.analysis.table.EventTable` or
  :class:`~otel_ext.analysis.loaders.MetricPoints`, selecting its profiler steps; the result
  stays in the worker's memory;
* to the client: each file's record, skipped records, metric points, step record and a
  sketch of its table (two rows per rank); the client separates the captures (the rank of
  every trace, the runs) and cuts the ranks into partitions;
* on the workers, one job per file and partition of ranks, where the file is kept: its rows
  of those ranks, renumbered; then one job per partition on those pieces: the per-rank
  passes (:func:`~otel_ext.analysis.rank.per_rank.per_rank_tables`: temporal, idle and overlap
  breakdowns, launch and kernel statistics, the names of each rank's device);
* to the client: those per-rank tables and the rows the cross-rank passes read (device
  activity, runtime calls, collectives, layers, requests, links; not the host operators);
  then the client runs matching, alignment, stragglers, critical path, imbalance, roofline,
  requests and findings over them, as in process (which runs the same two phases): the
  report is the same document. The rows, the metric points, the busy intervals, the walk's
  pieces and the held samples travel packed (:class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable`
  and its kin: lossless, unpacked on arrival to what was packed). The few passes that read a file again (engine steps of OTLP
  span files, vLLM/SGLang request spans, collective-call sizes of small profiler files) run
  on the workers too, one job per file.

``ADDRESS`` is ``local:N`` (a :class:`distributed.LocalCluster` of ``N`` worker processes,
one thread each, started and stopped around the analysis), the address of a running scheduler
(``tcp://HOST:PORT``, also ``tls://``, ``ws://``, ``wss://``, ``ucx://``), or the path of a
scheduler file (``dask scheduler --scheduler-file``, as dask-jobqueue and ``dask-mpi`` write
it). The workers need the same otel-ext version installed and the same paths readable.

>>> parse_scheduler("local:4")
SchedulerAddress(kind='local', target='', workers=4)
>>> parse_scheduler("tcp://10.0.0.5:8786")
SchedulerAddress(kind='remote', target='tcp://10.0.0.5:8786', workers=0)
>>> parse_scheduler("local:0")
Traceback (most recent call last):
...
otel_ext.errors.ConfigError: --scheduler local:0: a local cluster needs at least 1 worker
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from otel_ext.errors import ConfigError, OtelExtError

if TYPE_CHECKING:
    from otel_ext.analysis.cross.alignment import RankClocks
    from otel_ext.analysis.cross.critical_path_walk import PeerEdges, WalkPieces
    from otel_ext.analysis.loaders import LoadResult, ProgressCallback
    from otel_ext.analysis.rank.compute_samples import ComputeSamples
    from otel_ext.analysis.rank.per_rank import RankTables, RepairedRows, WalkShares
    from otel_ext.analysis.runs import Capture
    from otel_ext.analysis.scaleout.per_rank_jobs import FileSummary, Partition, RankDecision
    from otel_ext.analysis.steps import StepSelection
    from otel_ext.analysis.table import EventTable

__all__ = [
    "INSTALL_HINT",
    "DaskCluster",
    "DaskUnavailableError",
    "PerRankPhase",
    "SchedulerAddress",
    "connect",
    "parse_scheduler",
    "require_distributed",
]

#: what to run when the extra is missing
INSTALL_HINT = "pip install 'otel-ext[dask]'"

#: how long the client waits for a running scheduler to answer and for its first worker
CONNECT_TIMEOUT_S = 30.0

_REMOTE = re.compile(r"^(tcp|tls|ws|wss|ucx)://\S+$")
_LOCAL = re.compile(r"^local:(-?\d+)$")

T = TypeVar("T")


class DaskUnavailableError(ConfigError):
    """``--scheduler`` was asked for and ``dask.distributed`` is not installed."""


@dataclass(frozen=True)
class SchedulerAddress:
    """A parsed ``--scheduler`` value.

    Attributes:
        kind: ``local`` (start a local cluster), ``remote`` (a scheduler's address) or
            ``file`` (a scheduler file).
        target: the address or the file ("" for ``local``).
        workers: worker processes of a local cluster (0 otherwise).
    """

    kind: str
    target: str
    workers: int = 0


def parse_scheduler(text: str) -> SchedulerAddress:
    """A ``--scheduler`` value: ``local:N``, ``tcp://HOST:PORT`` or a scheduler file's path.

    Raises:
        ConfigError: anything else.

    >>> parse_scheduler("tls://sched:8786").kind
    'remote'
    """
    value = text.strip()
    m = _LOCAL.match(value)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise ConfigError(f"--scheduler {value}: a local cluster needs at least 1 worker")
        return SchedulerAddress("local", "", n)
    if _REMOTE.match(value):
        return SchedulerAddress("remote", value)
    if value.endswith(".json"):
        return SchedulerAddress("file", value)
    raise ConfigError(
        f"--scheduler {value!r}: expected local:N, tcp://HOST:PORT or a scheduler file (.json)"
    )


def require_distributed() -> Any:
    """The ``distributed`` module.

    Raises:
        DaskUnavailableError: it is not installed (the message says how to install it).
    """
    try:
        import distributed
    except ImportError:
        raise DaskUnavailableError(
            f"--scheduler needs dask.distributed, which is not installed: {INSTALL_HINT}"
        ) from None
    return distributed


@dataclass(frozen=True)
class _Raised:
    """A job's :class:`OtelExtError`, returned as a value: bad input is an answer, not a
    worker failure (no "Compute Failed" in the worker's log, no retry)."""

    error: OtelExtError


def _answer_or_error(fn: Callable[..., Any], *args: Any) -> Any:
    """Run on a worker: ``fn(*args)``, or its :class:`OtelExtError` as a :class:`_Raised`."""
    try:
        return fn(*args)
    except OtelExtError as e:
        return _Raised(e)


def _settle(local: Future[Any], done: Any, received: Callable[[Any], None] | None = None) -> None:
    """Settle the client's ``local`` future from the cluster's ``done`` one: cancelled,
    failed, a worker's :class:`OtelExtError` raised again, or the answer (given to
    ``received`` first); nothing if ``local`` was cancelled here first."""
    if local.done():
        return
    if done.cancelled():
        local.cancel()
        local.set_running_or_notify_cancel()
        return
    exc = done.exception()
    if exc is not None:
        local.set_exception(exc)
        return
    answer = done.result()
    if isinstance(answer, _Raised):
        local.set_exception(answer.error)
        return
    if received is not None:
        received(answer)
    local.set_result(answer)


class _JobExecutor(concurrent.futures.Executor):
    """Jobs on a Dask client whose :class:`OtelExtError` is raised again on the client, from
    the future's ``result()``, as a local pool's would be."""

    def __init__(self, client: Any) -> None:
        self._inner = client.get_executor(pure=False)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if kwargs:
            raise TypeError("keyword arguments are not passed to the cluster's jobs")
        remote = self._inner.submit(_answer_or_error, fn, *args)
        local: Future[T] = Future()

        def settle(done: Future[Any]) -> None:
            _settle(local, done)

        def forward_cancel(f: Future[Any]) -> None:
            if f.cancelled():
                remote.cancel()

        local.add_done_callback(forward_cancel)
        remote.add_done_callback(settle)
        return local

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._inner.shutdown(wait=wait)


def _summary_or_raised(kept: Any) -> Any:
    """Run on a worker: the client's view of a kept file (or the job's error, passed on)."""
    from otel_ext.analysis.scaleout.per_rank_jobs import summary_of

    return kept if isinstance(kept, _Raised) else summary_of(kept)


def _pieces_pass(
    pieces: list[Any], split: list[bool], owned: list[bool], hold: bool, busy: bool
) -> Any:
    """Run on a worker: the per-rank passes over a partition's pieces (or the first piece's
    error, passed on)."""
    from otel_ext.analysis.scaleout.per_rank_jobs import partition_pass

    for p in pieces:
        if isinstance(p, _Raised):
            return p
    try:
        return partition_pass(pieces, split=split, owned=owned, hold=hold, busy=busy)
    except OtelExtError as e:
        return _Raised(e)


def _tables_of(kept: Any, measure: bool = False) -> Any:
    """Run on a worker: a partition's per-rank results without the walk rows, which stay
    there for the critical path, with the reduced rows' positions and the rows themselves
    packed (:class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable`: lossless), or the
    partition's error, passed on. With ``measure``, also what the answer weighs unpacked
    (the results with the rows as they are and the packed positions, pickled here: their
    shared strings once, as one pickle of them keeps them), else 0."""
    from dataclasses import replace

    from otel_ext.analysis.scaleout.packed_rows import PackedTable, packed_busy
    from otel_ext.analysis.scaleout.per_rank_jobs import PackedPositions

    if isinstance(kept, _Raised):
        return kept
    out = kept.without_walk()
    packed = [PackedPositions.of(w) for w in out.reduced_positions]
    unpacked = _pickled_size((replace(out, reduced_positions=[]), packed)) if measure else 0
    # the packed rows and intervals in the results' place: one object, which Dask pickles
    # as one (the elements of a tuple it pickles apart), so that the strings the rows and the
    # kernel statistics share travel once
    out.reduced = [PackedTable.of(t) for t in out.reduced]
    out.device_busy = packed_busy(out.device_busy)
    out.reduced_positions = []
    return out, packed, unpacked


def _walk_pass(
    kept: Any,
    clocks: Any,
    repaired: Any,
    peers: Any,
    device_bound_share: float,
    edges: Any,
    alone: Any = (),
) -> Any:
    """Run on the worker that keeps a partition's walk rows: its ranks' critical-path
    pieces, and (with ``edges``) the samples of its held compute work on the aligned
    timeline (:func:`~otel_ext.analysis.rank.per_rank.held_samples`), or None."""
    from otel_ext.analysis.rank.per_rank import held_samples, walk_of

    pieces = walk_of(kept, clocks, repaired, peers, device_bound_share=device_bound_share)
    held = None
    if edges is not None and kept.holds:
        held = held_samples(kept, clocks, edges, alone=alone)
    return pieces, held


def _walk_starts(walked: Any) -> Any:
    """Run where a partition's walk is kept: its ranks' starts and its held samples, packed
    (the pieces stay until the client knows whether the path can reach its ranks)."""
    from dataclasses import replace

    from otel_ext.analysis.scaleout.packed_rows import PackedFields

    pieces, held = walked
    if held is None:
        return pieces.starts(), None
    return pieces.starts(), [(replace(h, samples=None), PackedFields.of(h.samples)) for h in held]


def _walk_pieces_of(walked: Any) -> Any:
    """Run where a partition's walk is kept: its pieces, packed
    (:class:`~otel_ext.analysis.scaleout.packed_rows.PackedFields`)."""
    from otel_ext.analysis.scaleout.packed_rows import PackedFields

    return PackedFields.of(walked[0])


def _unpacked_held(packed: Any) -> Any:
    """The held samples :func:`_walk_starts` packed."""
    if packed is None:
        return None
    from dataclasses import replace

    return [replace(h, samples=samples.unpack()) for h, samples in packed]


def _held_pass(kept: Any, split: list[bool], owned: list[bool]) -> Any:
    """Run on the worker that keeps a partition: its reduced rows with the held rows back,
    as :func:`_tables_of` sends them."""
    from otel_ext.analysis.scaleout.packed_rows import PackedTable
    from otel_ext.analysis.scaleout.per_rank_jobs import PackedPositions, for_client

    out = for_client(kept.with_held(), split=split, owned=owned)
    return (
        [PackedPositions.of(w) for w in out.reduced_positions],
        [PackedTable.of(t) for t in out.reduced],
    )


def _pickled_size(value: Any) -> int:
    import pickle

    return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _count_rows(into: dict[str, list[int]], tables: Sequence[Any]) -> None:
    """Add the rows and pickled bytes of each category of ``tables`` (packed reduced rows,
    :class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable`) and of their string
    dictionaries to ``into`` (name -> [rows, bytes])."""
    from otel_ext.analysis.table import Category

    for t in tables:
        counts = dict(zip(*np.unique(t.category, return_counts=True)))
        for code, size in t.category_bytes().items():
            got = into.setdefault(Category(code).name.lower(), [0, 0])
            got[0] += int(counts.get(code, 0))
            got[1] += size
        rest = _pickled_size(t) - sum(t.category_bytes().values())
        into.setdefault("rows' strings and category", [0, 0])[1] += rest


class _KeepingExecutor(concurrent.futures.Executor):
    """Loader jobs whose results stay on the workers: each job's answer there is the file's
    :class:`~otel_ext.analysis.scaleout.per_rank_jobs.KeptFile` (its steps selected); the client's
    future answers its :class:`~otel_ext.analysis.scaleout.per_rank_jobs.FileSummary`, and
    :attr:`kept` holds, in the order of submission, the cluster's future of each kept file."""

    def __init__(self, client: Any, steps: str, *, measure: bool) -> None:
        self._client = client
        self._steps = steps
        self._measure = measure
        self.kept: list[Any] = []
        self.summaries: list[Future[Any]] = []
        self.received_bytes = 0
        self.metric_bytes = 0
        self.unpacked_point_bytes = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        from otel_ext.analysis.scaleout.per_rank_jobs import load_and_keep

        if kwargs or len(args) != 1:
            raise TypeError("a loader job takes one argument")
        kept = self._client.submit(
            _answer_or_error, load_and_keep, fn, args[0], self._steps, pure=False
        )
        summary = self._client.submit(_summary_or_raised, kept, pure=False)
        local: Future[T] = Future()

        def settle(done: Any) -> None:
            _settle(local, done, self._count if self._measure else None)

        def forward_cancel(f: Future[Any]) -> None:
            if f.cancelled():
                summary.cancel()
                kept.cancel()

        local.add_done_callback(forward_cancel)
        summary.add_done_callback(settle)
        self.kept.append(kept)
        self.summaries.append(local)
        return local

    def _count(self, answer: Any) -> None:
        self.received_bytes += _pickled_size(answer)
        from otel_ext.analysis.scaleout.packed_rows import PackedPoints

        if answer.metrics is not None:  # as they travelled (packed), and as they would have
            self.metric_bytes += _pickled_size(PackedPoints.of(answer.metrics))
            self.unpacked_point_bytes += _pickled_size(answer.metrics)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


def _summaries(executor: _KeepingExecutor) -> list[FileSummary | None]:
    """The client's view of every file the executor loaded, in order (None for a file whose
    job failed: a bad file, skipped with ``keep_going``)."""
    out: list[FileSummary | None] = []
    for f in executor.summaries:
        ok = f.done() and not f.cancelled() and f.exception() is None
        out.append(f.result() if ok else None)
    return out


@dataclass
class _PartitionPlan:
    """The client's decisions between loading and the per-rank passes.

    Attributes:
        decision: the rank of every (file, trace rank), the runs.
        steps: the step selection's record, every file's merged.
        offsets: per file with events (by index), its first row's position in the set.
        partitions: the partitions of ranks.
        hold: the partitions hold their device rows back (no file joins rows by time).
        busy: ... and send those rows' busy intervals (some file has requests).
    """

    decision: RankDecision
    steps: StepSelection
    offsets: dict[int, int]
    partitions: list[Partition]
    hold: bool
    busy: bool


@dataclass
class PerRankPhase:
    """What the workers' per-rank phase gives the client.

    Attributes:
        load: the files' records, skipped records and metric points (its ``table`` is the
            files' sketches, not their events).
        captures: :func:`~otel_ext.analysis.runs.separate_captures`' records.
        steps: the step selection's record.
        ranks: the per-rank results (:class:`~otel_ext.analysis.rank.per_rank.RankTables`).
        reduced: the rows the cross-rank passes read, every file's, joined in file order.
        keys: each reduced row's position in the whole set (ascending).
        received_bytes: what travelled to the client, pickled (0 unless measured).
        walks: per partition, its ranks, the cluster's future of its per-rank results with
            the walk rows, kept on the worker for :meth:`DaskCluster.walk_phase`, and whether
            its walk rows all travelled with the reduced rows (then the client walks them).
        holds: some partition kept device rows back (:attr:`RankTables.full`): they are
            sampled in :meth:`DaskCluster.walk_phase`, or fetched by
            :meth:`DaskCluster.restore_held`.
        name_strings: each file's name dictionary (as its reduced rows brought it), which
            the held rows' samples name their work by.
        joining: what joins the partitions' reduced rows again (their files, owners and
            the rank decision), for :meth:`DaskCluster.restore_held`.
    """

    load: LoadResult
    captures: list[Capture]
    steps: StepSelection
    ranks: RankTables
    reduced: EventTable
    keys: Any
    received_bytes: int = 0
    walks: list[tuple[frozenset[int], Any, bool]] = field(default_factory=list)
    holds: bool = False
    joining: Any = None
    name_strings: dict[int, list[str]] = field(default_factory=dict)


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _missing_module(error: BaseException) -> str | None:
    """The module a worker could not import, from its error (an ``ImportError``, or the
    generic exception Dask raises when a job's function cannot be unpickled there)."""
    if isinstance(error, ImportError) and error.name:
        return error.name
    m = _NO_MODULE.search(str(error))
    return m.group(1) if m else None


def _cannot_import(address: str, module: str) -> OtelExtError:
    return OtelExtError(
        f"a Dask worker of {address} cannot import {module}: install the same otel-ext on "
        "every worker (pip install 'otel-ext[dask]')"
    )


def _worker_version() -> str:
    """Run on each worker: the otel-ext version it imports (and proof that it imports it)."""
    from otel_ext import __version__

    return __version__


def _global_start_rank(
    pieces: Sequence[WalkPieces], starts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> int:
    """The rank the critical path starts at (:func:`~otel_ext.analysis.cross.critical_path.start_of`
    over every rank's start: those of ``pieces`` walked here and the workers' ``starts``);
    -1 without ranks."""
    from otel_ext.analysis.cross.critical_path import start_of

    every = [p.starts() for p in pieces] + list(starts)
    rank = np.concatenate([r for r, _, _ in every] or [np.zeros(0, np.int64)])
    if len(rank) == 0:
        return -1
    key = np.concatenate([k for _, k, _ in every])
    end = np.concatenate([e for _, _, e in every])
    return int(rank[start_of(key, end)])


def _joined(
    joining: Any, parts: Sequence[tuple[list[EventTable], list[np.ndarray]]]
) -> tuple[EventTable, np.ndarray]:
    """The partitions' reduced rows (one table per piece, with the pieces' positions) as one
    table in file order, and its rows' keys (ascending)."""
    from otel_ext.analysis.scaleout import per_rank_jobs as jobs
    from otel_ext.analysis.table import EventTable

    plan, rank_runs = joining
    by_file: dict[int, list[tuple[EventTable, Any]]] = {}
    for part, (tables, positions) in zip(plan, parts):
        for i, t, where in zip(part.files, tables, positions):
            if i in part.owned:  # the owner's piece (first) carries the dictionaries
                by_file.setdefault(i, []).insert(0, (t, where))
            elif len(t):
                by_file.setdefault(i, []).append((t, where))
    files = [jobs.reassemble(by_file[i]) for i in sorted(by_file)]
    keys = np.concatenate(
        [np.sort(np.concatenate([w for _, w in by_file[i]])) for i in sorted(by_file)]
        or [np.zeros(0, dtype=np.int64)]
    ).astype(np.int64)
    joined = EventTable.concat(files) if files else EventTable.empty()
    meta = dict(joined.meta)
    if rank_runs:
        meta["rank_runs"] = rank_runs
    return EventTable(dict(joined.columns), joined.strings, meta), keys


class DaskCluster:
    """The per-file jobs of one analysis on a connected Dask client.

    Args:
        client: a ``distributed.Client`` (the caller owns it).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.executor = _JobExecutor(client)
        self.address = str(client.scheduler.address)
        #: measure what travels to the client (pickled bytes) in :meth:`per_rank_phase`
        self.measure = False
        #: what travelled to the client in the last analysis (when measured), in all and
        #: by round: "per-rank" (the files' summaries, the per-rank tables and reduced
        #: rows), "walk" (starts, samples, pieces), "restore" (held rows fetched)
        self.received_bytes = 0
        self.received_by_round: dict[str, int] = {}
        #: of the last per-rank round (when measured), what travelled by kind: name ->
        #: [rows, pickled bytes]: "summaries" (files' records, sketches, metric points),
        #: "metric points" (of the summaries), "per-rank results" (breakdowns, kernel
        #: statistics), "busy intervals", "positions", and each category of reduced rows
        self.received_by_category: dict[str, list[int]] = {}
        #: of the last per-rank round (when measured), what its answers weigh unpacked (the
        #: rows as :class:`~otel_ext.analysis.table.EventTable` pickles them, the metric
        #: points as :class:`~otel_ext.analysis.loaders.MetricPoints` does: how they
        #: travelled before :class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable` and its
        #: kin); the kinds of :attr:`received_by_category` are pickled one by one, so a
        #: dictionary two kinds share counts in each
        self.unpacked_round_bytes = 0
        #: of the last walk round (when measured), what its answers weighed unpacked
        self.unpacked_walk_bytes = 0
        #: the reduced rows (what the cross-rank passes read) of the last per-rank phase
        self.reduced_rows = 0
        #: of the last :meth:`walk_phase`: the partitions walked on the workers, and those
        #: whose pieces the path can reach (only theirs travelled)
        self.walked_partitions = 0
        self.pieces_fetched = 0

    @property
    def slots(self) -> int:
        """Worker threads in the cluster (jobs that run at once)."""
        return max(1, sum(self.client.nthreads().values()))

    def per_rank_phase(
        self,
        paths: Sequence[str | Path],
        *,
        keep_going: bool = False,
        progress: ProgressCallback | None = None,
        steps: str,
        one_run: bool,
    ) -> PerRankPhase:
        """Load the files on the workers and keep them there, decide ranks and steps here,
        run the per-rank passes there (:mod:`otel_ext.analysis.scaleout.per_rank_jobs`); only
        summaries and the per-rank tables travel here.

        Raises:
            InputError: the first bad file or record, unless ``keep_going`` (as in process).
            OtelExtError: a bad ``steps``; a worker died, or cannot import otel-ext.
        """
        from otel_ext.analysis.loaders import load_paths
        from otel_ext.analysis.steps import parse_steps

        executor = _KeepingExecutor(self.client, steps, measure=self.measure)
        self.received_by_category = {}
        self.unpacked_round_bytes = 0
        try:
            with self._worker_errors():
                load = load_paths(
                    paths, keep_going=keep_going, progress=progress, workers=1, executor=executor
                )
            parse_steps(steps)
            summaries = _summaries(executor)
            rounds = self._partition_plan(load, summaries, steps=steps, one_run=one_run)
            with self._worker_errors():
                kept_parts = self._submit_partitions(executor, rounds)
                parts, answers_bytes = self._received_partitions(kept_parts)
            walks = [(r, k, p.walk_travels) for (r, k), p in zip(kept_parts, parts)]
        finally:
            for k in executor.kept:  # the workers let the kept files go
                k.release()
        received = self._count_round(executor, summaries, answers_bytes)
        return self._phase_of(load, rounds, parts, walks, received)

    def _partition_plan(
        self, load: LoadResult, summaries: list[FileSummary | None], *, steps: str, one_run: bool
    ) -> _PartitionPlan:
        """The client's decisions once every file is loaded: the ranks (captures separated on
        the files' sketches), the step record, each file's first row's position, and the
        partitions of ranks (files of one rank each: a partition each, as joining files costs
        a copy and partitions cost nothing; else no more partitions than files, at most four
        per worker thread: a file is cut only where files share ranks)."""
        from otel_ext.analysis.scaleout import per_rank_jobs as jobs
        from otel_ext.analysis.steps import merge_step_records

        with_table = [i for i, s in enumerate(summaries) if s is not None and s.table is not None]
        have = [s for s in summaries if s is not None and s.table is not None]
        formats = {i.get("path", ""): i.get("format", "") for i in load.inputs}
        decision = jobs.decide_ranks(
            [s.table if s is not None else None for s in summaries],
            formats=formats,
            one_run=one_run,
        )
        record = merge_step_records(steps, [s.steps for s in have if s.steps is not None])
        starts = np.cumsum([0] + [s.rows for s in have])[:-1].tolist()
        one_each = all(len(decision.ranks_of.get(i, ())) <= 1 for i in with_table)
        n_parts = len(with_table) if one_each else min(4 * self.slots, len(with_table))
        return _PartitionPlan(
            decision=decision,
            steps=record,
            offsets=dict(zip(with_table, starts)),
            partitions=jobs.rank_partitions(decision, with_table, parts=max(1, n_parts)),
            # device rows stay on the workers unless a pass joins other rows with them by time
            hold=not any(s.joins_by_time for s in have),
            # ... and their busy intervals travel only for request latency
            busy=any(s.requests for s in have),
        )

    def _submit_partitions(
        self, executor: _KeepingExecutor, rounds: _PartitionPlan
    ) -> list[tuple[frozenset[int], Any]]:
        """Per partition: each file's rows of its ranks, taken where the file is kept
        (:func:`~otel_ext.analysis.scaleout.per_rank_jobs.piece_of`), and the per-rank passes
        over those pieces, kept on the worker; returns each partition's ranks and the
        cluster's future of its kept results (every reduced row's position comes back: the
        keys of the walk)."""
        from otel_ext.analysis.scaleout import per_rank_jobs as jobs

        out = []
        for part in rounds.partitions:
            pieces = [
                self.client.submit(
                    _answer_or_error,
                    jobs.piece_of,
                    executor.kept[i],
                    rounds.decision.renumber.get(i, {}),
                    part.ranks,
                    i in part.owned,
                    rounds.offsets[i],
                    pure=False,
                )
                for i in part.files
            ]
            owned = [i in part.owned for i in part.files]
            kept_part = self.client.submit(
                _pieces_pass, pieces, [True] * len(pieces), owned, rounds.hold, rounds.busy,
                pure=False,
            )  # fmt: skip
            out.append((part.ranks, kept_part))
        return out

    def _received_partitions(
        self, kept_parts: list[tuple[frozenset[int], Any]]
    ) -> tuple[list[RankTables], int]:
        """Each partition's per-rank results, sent here packed (:func:`_tables_of`) and
        unpacked; with :attr:`measure`, what they weighed (in all, returned, and by kind)."""
        from otel_ext.analysis.scaleout.packed_rows import unpacked_busy

        futures = [
            self.client.submit(_tables_of, k, self.measure, pure=False) for _, k in kept_parts
        ]
        parts = []
        answers_bytes = 0
        for f in futures:
            answer = f.result()
            if isinstance(answer, _Raised):
                raise answer.error
            tables, packed, unpacked = answer
            if self.measure:
                answers_bytes += _pickled_size(answer)
                self._count_tables(tables, packed)
            tables.reduced_positions = [p.unpack() for p in packed]
            tables.reduced = [t.unpack() for t in tables.reduced]
            tables.device_busy = unpacked_busy(tables.device_busy)
            self.unpacked_round_bytes += unpacked
            parts.append(tables)
        return parts, answers_bytes

    def _count_tables(self, tables: RankTables, packed: Any) -> None:
        """Add what a partition's packed answer weighs, by kind, to
        :attr:`received_by_category`."""
        from dataclasses import replace

        by = self.received_by_category
        _count_rows(by, tables.reduced)
        results = replace(tables, reduced=[], device_busy={})
        by.setdefault("per-rank results", [0, 0])[1] += _pickled_size(results)
        by.setdefault("positions", [0, 0])[1] += _pickled_size(packed)
        by.setdefault("busy intervals", [0, 0])[1] += _pickled_size(tables.device_busy)

    def _count_round(
        self, executor: _KeepingExecutor, summaries: list[FileSummary | None], answers_bytes: int
    ) -> int:
        """What travelled here in the per-rank round (the summaries, and with :attr:`measure`
        the partitions' answers), recorded in :attr:`received_bytes` and its kinds."""
        received = executor.received_bytes
        if self.measure:
            received += answers_bytes
            self.received_by_category["summaries"] = [len(summaries), executor.received_bytes]
            self.received_by_category["metric points (of the summaries)"] = [
                sum(len(s.metrics) for s in summaries if s is not None and s.metrics is not None),
                executor.metric_bytes,
            ]
            self.unpacked_round_bytes += (
                executor.received_bytes - executor.metric_bytes + executor.unpacked_point_bytes
            )
        self.received_bytes = received
        self.received_by_round = {"per-rank": received}
        return received

    def _phase_of(
        self,
        load: LoadResult,
        rounds: _PartitionPlan,
        parts: list[RankTables],
        walks: list[tuple[frozenset[int], Any, bool]],
        received: int,
    ) -> PerRankPhase:
        """The partitions' results as one: their reduced rows joined in file order with
        their keys, their per-rank tables merged, each file's name dictionary."""
        from otel_ext.analysis.rank.per_rank import merge_rank_tables, per_rank_tables
        from otel_ext.analysis.table import EventTable

        plan = rounds.partitions
        joining = (plan, rounds.decision.rank_runs)
        sent = [(t.reduced, t.reduced_positions) for t in parts]
        reduced, keys = _joined(joining, sent)
        name_strings = {
            i: t.strings["name"]
            for part, (tables, _) in zip(plan, sent)
            for i, t in zip(part.files, tables)
            if i in part.owned
        }
        self.reduced_rows = len(reduced)
        codes = {s: i for i, s in enumerate(reduced.strings["source"])}
        if parts:
            ranks = merge_rank_tables(parts, source_code=codes)
        else:
            ranks = per_rank_tables(EventTable.empty())
        return PerRankPhase(
            load, rounds.decision.captures, rounds.steps, ranks, reduced, keys, received,
            walks=walks, holds=any(p.held_rows for p in parts), joining=joining,
            name_strings=name_strings,
        )  # fmt: skip

    def restore_held(self, phase: PerRankPhase) -> tuple[EventTable, Any]:
        """The reduced rows and their keys with every partition's held rows back: what the
        per-rank phase gives without holding, for the passes that read every device row
        (the causality repair, the request and serving joins). The partitions' held rows
        stay where they are (their walk still runs there); only their samples are not
        asked for afterwards (``phase.holds`` becomes False).
        """
        plan, _ = phase.joining
        futures = []
        with self._worker_errors():
            for part, (_, kept, _) in zip(plan, phase.walks):
                owned = [i in part.owned for i in part.files]
                futures.append(
                    self.client.submit(
                        _held_pass, kept, [True] * len(part.files), owned, pure=False
                    )
                )
            answers = [f.result() for f in futures]
        if self.measure:
            got = sum(_pickled_size(a) for a in answers)
            self.received_bytes += got
            self.received_by_round["restore"] = self.received_by_round.get("restore", 0) + got
        reduced, keys = _joined(
            phase.joining,
            [
                ([t.unpack() for t in rows], [p.unpack() for p in packed])
                for packed, rows in answers
            ],
        )
        self.reduced_rows = len(reduced)
        phase.reduced, phase.keys, phase.holds = reduced, keys, False
        return reduced, keys

    def walk_phase(
        self,
        phase: PerRankPhase,
        clocks: RankClocks,
        repaired: RepairedRows,
        peers: PeerEdges,
        *,
        aligned: EventTable,
        keys: Any,
        device_bound_share: float = 0.9,
        edges: Any = None,
        alone: frozenset[int] = frozenset(),
    ) -> tuple[WalkPieces, list[ComputeSamples]]:
        """The critical path's walk of every partition, on the worker that keeps its walk
        rows; each partition gets the clock correction and only its ranks' repaired rows and
        peer edges (those of its members and those into its rows). A partition whose walk
        rows all came with its reduced rows (an OTLP run: no runtime calls) is walked here,
        from the aligned rows, and its pieces do not travel. The other pieces stay on the
        workers at first: each partition sends its ranks' starts, and only the partitions
        holding a rank the path can reach from the global start
        (:meth:`~otel_ext.analysis.rank.per_rank.WalkShares.reachable`) send their pieces
        (:attr:`walked_partitions`, :attr:`pieces_fetched`). The walk rows are let go after.

        Returns the pieces of the partitions the path can reach (a stitch of them is the
        stitch of every partition's pieces).

        Args:
            phase: the per-rank phase (its kept partitions).
            clocks, repaired, peers: what the alignment and the match decided here.
            aligned: the aligned reduced rows, ``keys`` their keys (ascending).
            edges: the stragglers' time windows: with them, the partitions that hold
                compute rows send those rows' samples on the aligned timeline too.
            alone: the ranks alone in their run, whose compute rows are sent in total only.

        Returns:
            The pieces, and the held rows' samples (one per partition that sent some).
        """
        from otel_ext.analysis.cross.critical_path_walk import WalkPieces
        from otel_ext.analysis.rank.per_rank import WalkShares

        shares = WalkShares(keys, aligned["rank"], repaired, peers)
        here = self._walked_here(phase, shares, aligned, keys, device_bound_share)
        parts = list(here)
        try:
            with self._worker_errors():
                walks = self._submit_walks(
                    phase, shares, clocks, device_bound_share, edges=edges, alone=alone
                )
                # first the ranks' starts: the path reaches only the ranks the peer edges
                # lead to from the global start, and only their pieces travel
                starts = [self.client.submit(_walk_starts, w, pure=False) for _, _, w in walks]
                packed_answers = [f.result() for f in starts]
                answers = [(a, _unpacked_held(h)) for a, h in packed_answers]
                reach = shares.reachable(_global_start_rank(parts, [a for a, _ in answers]))
                wanted = [w for _, ranks, w in walks if reach & set(ranks)]
                fetched = [self.client.submit(_walk_pieces_of, w, pure=False) for w in wanted]
                self.walked_partitions, self.pieces_fetched = len(walks), len(wanted)
                packed_pieces = [f.result() for f in fetched]
                parts.extend(p.unpack() for p in packed_pieces)
        finally:
            phase.walks = []  # the workers let the walk rows go
        if self.measure:
            self._count_walk(packed_answers, packed_pieces, answers, parts[len(here) :])
        samples = [  # the names from the files' dictionaries, which came with the rows
            h.resolved(phase.name_strings[part.files[h.part]])
            for (part, _, _), (_, held) in zip(walks, answers)
            for h in held or ()
        ]
        return WalkPieces.join(parts), samples

    def _walked_here(
        self,
        phase: PerRankPhase,
        shares: WalkShares,
        aligned: EventTable,
        keys: Any,
        device_bound_share: float,
    ) -> list[WalkPieces]:
        """The pieces of the ranks whose walk rows all travelled with the reduced rows,
        walked here from the aligned rows (none: ``[]``)."""
        from otel_ext.analysis.rank.per_rank import walk_of_aligned

        here = sorted({r for ranks, _, travels in phase.walks if travels for r in ranks})
        if not here:
            return []
        _, sub = shares.of(here)
        return [
            walk_of_aligned(aligned, keys, sub, ranks=here, device_bound_share=device_bound_share)
        ]

    def _submit_walks(
        self,
        phase: PerRankPhase,
        shares: WalkShares,
        clocks: RankClocks,
        device_bound_share: float,
        *,
        edges: Any,
        alone: frozenset[int],
    ) -> list[tuple[Partition, frozenset[int], Any]]:
        """The walk of every partition whose walk rows stayed on its worker, submitted
        there (:func:`_walk_pass`) with its share of the repaired rows and peer edges; per
        partition, its ranks and the cluster's future of its walk."""
        plan, _ = phase.joining
        walks = []
        for part, (ranks, kept, travels) in zip(plan, phase.walks):
            if travels:
                continue
            rep, sub = shares.of(ranks)
            walked = self.client.submit(
                _walk_pass, kept, clocks, rep, sub, device_bound_share,
                edges if phase.holds else None, frozenset(alone & set(ranks)),
                pure=False,
            )  # fmt: skip
            walks.append((part, ranks, walked))
        return walks

    def _count_walk(
        self,
        packed_answers: list[Any],
        packed_pieces: list[Any],
        answers: list[Any],
        pieces: list[WalkPieces],
    ) -> None:
        """Record what the walk round sent here (packed) and what it would have weighed
        unpacked (:attr:`unpacked_walk_bytes`)."""
        got = sum(_pickled_size(a) for a in packed_answers)
        got += sum(_pickled_size(p) for p in packed_pieces)
        self.received_bytes += got
        self.received_by_round["walk"] = got
        # the reference: what they weighed as they travelled unpacked
        self.unpacked_walk_bytes = sum(_pickled_size(a) for a in answers)
        self.unpacked_walk_bytes += sum(_pickled_size(p) for p in pieces)

    def map_files(self, fn: Callable[[list[str]], list[T]], paths: Sequence[str]) -> list[T]:
        """``fn(paths)`` computed one path per job on the workers: for functions whose answer
        for several paths is their answers for each path, concatenated in order."""
        with self._worker_errors():
            futures = [self.executor.submit(fn, [p]) for p in paths]
            out: list[T] = []
            for f in futures:
                out.extend(f.result())
        return out

    @contextmanager
    def _worker_errors(self) -> Iterator[None]:
        distributed = require_distributed()
        try:
            yield
        except OtelExtError:
            raise
        except distributed.KilledWorker as e:
            raise OtelExtError(
                f"a Dask worker of {self.address} died running {e.task} (out of memory? see "
                "the memory each worker needs per GB of trace in docs/analysis.md)"
            ) from None
        except Exception as e:
            missing = _missing_module(e)
            if missing is None:
                raise
            raise _cannot_import(self.address, missing) from None


@contextmanager
def connect(address: str) -> Iterator[DaskCluster]:
    """A :class:`DaskCluster` on ``address`` (see :func:`parse_scheduler`), closed on exit;
    a local cluster is started here and stopped on exit.

    Raises:
        DaskUnavailableError: ``dask.distributed`` is not installed.
        ConfigError: a malformed address.
        OtelExtError: the scheduler does not answer, has no worker, or its workers run
            another otel-ext.
    """
    where = parse_scheduler(address)
    distributed = require_distributed()
    from otel_ext import __version__

    cluster = None
    try:
        if where.kind == "local":
            cluster = distributed.LocalCluster(
                n_workers=where.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # a free port: never clashes with a running cluster
                silence_logs=logging.CRITICAL,  # errors reach the client as one line
            )
            client = distributed.Client(cluster)
        elif where.kind == "file":
            if not Path(where.target).is_file():
                raise ConfigError(f"--scheduler {where.target}: no such scheduler file")
            client = distributed.Client(
                scheduler_file=where.target, timeout=f"{CONNECT_TIMEOUT_S}s"
            )
        else:
            client = distributed.Client(where.target, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError) as e:
        if cluster is not None:
            cluster.close()
        raise OtelExtError(
            f"cannot reach the Dask scheduler at {where.target or address}: {e}"
        ) from None
    try:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise OtelExtError(
                f"the Dask scheduler at {client.scheduler.address} has no worker "
                f"(none joined in {CONNECT_TIMEOUT_S:.0f} s)"
            ) from None
        try:
            versions = client.run(_worker_version)
        except Exception as e:
            missing = _missing_module(e)
            if missing is None:
                raise
            raise _cannot_import(str(client.scheduler.address), missing) from None
        other = {w: v for w, v in versions.items() if v != __version__}
        if other:
            worker, version = next(iter(sorted(other.items())))
            raise OtelExtError(
                f"Dask worker {worker} runs otel-ext {version}, this client {__version__}: "
                "install the same version everywhere"
            )
        yield DaskCluster(client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
