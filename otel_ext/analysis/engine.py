"""The analysis facade: telemetry files in, one stable JSON document out.

:func:`analyze` loads (or takes loaded) telemetry, aligns the ranks' clocks, runs every
analysis and ranks the findings. The document's top-level keys (schema
``"otel-ext.analysis/1"``, documented key by key in ``docs/analysis.md``):

``schema``, ``inputs``, ``skipped``, ``run``, ``ranks``, ``temporal_breakdown``,
``idle_breakdown``, ``comm_comp_overlap``, ``kernel_breakdown``, ``collectives``, ``links``,
``ports``, ``stragglers``, ``critical_path``, ``causality``, ``load_imbalance``, ``roofline``,
``requests``, ``findings``.

The engine reads as its phases (:func:`_analyze`), each a function with typed results:

1. **load** and **per-rank** (:class:`~otel_ext.analysis.per_rank_backend.PerRankBackend`:
   in process, or on a Dask cluster's workers): the files loaded, the captures separated,
   the steps selected, the per-rank passes run over every rank's rows, leaving the compact
   rows the cross-rank passes read; then the serving engines' requests read from their span
   files and appended (:func:`_cross_rank_rows`);
2. **align** (:func:`_align_phase`): collectives matched, the ranks' clocks aligned;
3. **cross-rank** (:func:`_cross_rank_phase`): stragglers and the critical path, links,
   ports and the network model, imbalance, roofline, requests, findings;
4. **document** (:func:`_document_phase`): the sections assembled
   (:mod:`otel_ext.analysis.document`), the timeline written if asked for.

Per-rank breakdowns (temporal, idle, overlap, kernels) are computed on each rank's own clock
(alignment does not change them); everything that compares ranks runs on the aligned times.
No pass opens a file: the few inputs read again (serving spans, engine steps, operator input
sizes) are read by :mod:`otel_ext.analysis.loaders` through the back-end, where the files
are. The text and HTML reports are functions of this document alone.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> rows = [dict(start_ns=k * 1000 + (400 if r == 1 else 0) + 50_000 * r,
...              end_ns=k * 1000 + 600 + 50_000 * r, rank=r, device=f"h0/chip{r}", stream=1,
...              category=C.KERNEL_COMM, coll_seq=k, coll_group="tp") for k in range(20)
...         for r in range(3)]
>>> doc = analyze(EventTable.from_rows(rows))
>>> doc["schema"], [round(r["clock_offset_ns"]) for r in doc["ranks"]]
('otel-ext.analysis/1', [0, 50000, 100000])
>>> doc["stragglers"][0]["rank"], doc["causality"]["violations_after"]
(1, 0)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.cross.alignment import Alignment, align_ranks
from otel_ext.analysis.cross.collective_host_sets import collective_host_set_bandwidth
from otel_ext.analysis.cross.collective_match import (
    CollectiveMatch,
    match_collectives,
    sampled_fraction,
)
from otel_ext.analysis.cross.critical_path import stitch
from otel_ext.analysis.cross.hangs import hang_findings
from otel_ext.analysis.cross.imbalance import load_imbalance
from otel_ext.analysis.cross.link_stats import LinkStat, PortStat, link_stats, port_stats
from otel_ext.analysis.cross.nccl_p2p import all_p2p_transfers
from otel_ext.analysis.cross.network_paths import path_stats, unpaired_transfer_stats
from otel_ext.analysis.cross.stragglers import (
    find_stragglers,
    rank_devices_from_counts,
    window_edges,
)
from otel_ext.analysis.document import (
    AnalysisDocument,
    CrossRankResults,
    NetworkSection,
    PassSections,
    RankedFindings,
    RankEntry,
    RunSection,
    collectives_section,
    rank_entries,
    run_extent,
    wait_heatmap,
)
from otel_ext.analysis.findings.build import Thresholds, build_findings, straggler_verdicts
from otel_ext.analysis.per_rank_backend import (
    InProcessBackend,
    PerRankBackend,
    PerRankOptions,
    PerRankOutcome,
    Source,
    is_paths,
)
from otel_ext.analysis.rank.memory import memory_findings, memory_section
from otel_ext.analysis.rank.per_rank import (
    RankTables,
    merge_name_counts,
    name_counts,
    serving_mark_codes,
)
from otel_ext.analysis.rank.roofline import roofline
from otel_ext.analysis.runs import hosts_from_file_names, runs_summary
from otel_ext.analysis.serving.requests import (
    RequestAccountingSection,
    engine_step_order,
    request_accounting,
    request_latency,
)
from otel_ext.analysis.steps import DEFAULT_STEPS
from otel_ext.analysis.table import Category, EventTable

if TYPE_CHECKING:
    from otel_ext.analysis.cross.critical_path import CriticalPath
    from otel_ext.analysis.cross.stragglers import StragglerReport
    from otel_ext.analysis.loaders import LoadResult, ProgressCallback
    from otel_ext.analysis.rank.comm_calls import CollectiveCalls
    from otel_ext.analysis.rank.compute_samples import ComputeSamples
    from otel_ext.analysis.report.timeline import TimelineInputs, TimelineSummary
    from otel_ext.analysis.runs import RunRecord
    from otel_ext.analysis.scaleout.dask_cluster import DaskCluster
    from otel_ext.analysis.serving.engine_telemetry import ServingJoin

__all__ = ["SCHEMA", "analyze", "to_json", "wait_heatmap"]

SCHEMA = "otel-ext.analysis/1"

#: what the timeline writer is: called once with what the merged timeline needs; what it
#: returns is the document's ``timeline`` key
TimelineWriter = Callable[["TimelineInputs"], "TimelineSummary"]


@dataclass(frozen=True)
class CrossRankOptions:
    """The options of the align, cross-rank and document phases (see :func:`analyze`)."""

    device_model: str | None = None
    thresholds: Thresholds | None = None
    max_collectives: int = 200
    windows: int = 8
    same_clock: bool = False
    clock_of: dict[int, str] | None = None
    timeline: TimelineWriter | None = None


def analyze(
    source: Source,
    *,
    keep_going: bool = False,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
    device_model: str | None = None,
    thresholds: Thresholds | None = None,
    max_collectives: int = 200,
    windows: int = 8,
    steps: str = DEFAULT_STEPS,
    same_clock: bool = False,
    clock_of: dict[int, str] | None = None,
    one_run: bool = False,
    scheduler: str | DaskCluster | None = None,
    timeline: TimelineWriter | None = None,
) -> dict[str, Any]:
    """Analyse telemetry into the stable JSON document.

    Args:
        source: paths (files or folders), a ``LoadResult`` or an ``EventTable``.
        keep_going: load what is valid and list what was skipped (else the first bad record
            raises).
        progress: ``progress(done, total, path)`` after each file loaded.
        workers: loader processes (default: one per core).
        device_model: the registry's device model for roofline peaks (default: from the
            metrics' ``accel.device.model``).
        thresholds: where numbers become findings.
        max_collectives: at most this many collective instances listed (most waited for).
        windows: time windows for persistence and part-way slowdowns.
        steps: profiler steps analysed (:mod:`otel_ext.analysis.steps`): ``complete`` (each
            trace's last step dropped, as HTA does), ``all``, ``N`` or ``N-M``.
        same_clock: every rank's times are on one clock (no per-rank shifts).
        clock_of: rank -> clock name, for ranks known to share a clock.
        one_run: every file one run (default: separate captures are separate runs, see
            :func:`otel_ext.analysis.runs.separate_captures`).
        scheduler: read the files on a Dask cluster (:mod:`otel_ext.analysis.scaleout.dask_cluster`):
            ``local:N``, ``tcp://HOST:PORT`` or a scheduler file (default:
            ``OTEL_EXT_DASK_SCHEDULER``; empty: in process), or a connected
            :class:`~otel_ext.analysis.scaleout.dask_cluster.DaskCluster`. The document is the same.
        timeline: called once with what the merged timeline needs
            (:class:`~otel_ext.analysis.report.timeline.TimelineInputs`), e.g. a
            :class:`~otel_ext.analysis.report.timeline.TimelineFile`; what it returns is the
            document's ``timeline`` key. In process every analysed row is parked for it in a
            temporary folder (:func:`~otel_ext.analysis.report.timeline.park_rows`); on a cluster
            it gets the cross-rank rows, every device row among them.

    Returns:
        The analysis document (plain JSON types).

    Raises:
        InputError: a bad input file or record (unless ``keep_going``).
        OtelExtError: the Dask cluster is unreachable or unusable (``scheduler``).
    """
    per_rank = PerRankOptions(
        keep_going=keep_going, progress=progress, workers=workers, steps=steps,
        one_run=one_run, keep_rows=timeline is not None,
    )  # fmt: skip
    options = CrossRankOptions(
        device_model=device_model, thresholds=thresholds, max_collectives=max_collectives,
        windows=windows, same_clock=same_clock, clock_of=clock_of, timeline=timeline,
    )  # fmt: skip
    with _backend(scheduler, source) as backend:
        doc = _analyze(source, backend, per_rank, options)
    return dict(doc)  # the JSON edge: plain JSON types


@contextmanager
def _backend(scheduler: str | DaskCluster | None, source: Source) -> Iterator[PerRankBackend]:
    """The per-rank back-end: a Dask cluster's (the one given, or one connected to for
    paths when ``scheduler`` or ``OTEL_EXT_DASK_SCHEDULER`` names one), else in process."""
    from otel_ext.config import DASK_SCHEDULER, resolve

    if scheduler is not None and not isinstance(scheduler, str):
        from otel_ext.analysis.scaleout.dask_backend import DaskBackend

        yield DaskBackend(scheduler)
        return
    address = resolve(DASK_SCHEDULER, scheduler).strip()
    if address and is_paths(source):
        from otel_ext.analysis.scaleout import dask_cluster
        from otel_ext.analysis.scaleout.dask_backend import DaskBackend

        with dask_cluster.connect(address) as cluster:
            yield DaskBackend(cluster)
        return
    yield InProcessBackend()


def _analyze(
    source: Source,
    backend: PerRankBackend,
    per_rank: PerRankOptions,
    options: CrossRankOptions,
) -> AnalysisDocument:
    """:func:`analyze` as its phases (``docs/analysis.md``, "Per-rank and cross-rank
    passes"), the per-rank phase on ``backend``."""
    per = backend.per_rank(source, per_rank)  # load and per-rank
    rows = _cross_rank_rows(per, backend)  # load: the serving engines' requests
    aligned = _align_phase(rows, per, backend, options)
    results = _cross_rank_phase(per, rows, aligned, backend, options)
    return _document_phase(per, rows, aligned, results, options)


# --- load: the rows the cross-rank passes read ------------------------------------------


@dataclass
class CrossRankRows:
    """The rows the cross-rank phase reads, on their own clocks.

    Attributes:
        table: the per-rank phase's reduced rows, with the serving engines' request rows
            appended (their keys after every row's).
        keys: each row's position in the whole set (ascending).
        counts: per rank, how many rows name each device and host
            (:func:`~otel_ext.analysis.rank.per_rank.name_counts`).
        events: the events analysed (every row, and the requests' rows).
        serving: the engines' requests joined with otel-ext's rows
            (:func:`~otel_ext.analysis.serving.engine_telemetry.join_serving`), or None.
    """

    table: EventTable
    keys: np.ndarray
    counts: dict[int, dict[str, dict[str, int]]]
    events: int
    serving: ServingJoin | None


def _cross_rank_rows(per: PerRankOutcome, backend: PerRankBackend) -> CrossRankRows:
    """The reduced rows with the serving engines' requests read from their span files and
    appended, named like the others."""
    table, keys = per.reduced, per.keys
    n_reduced = len(table)
    table, serving_join = _serving_requests(table, per.load, backend)
    counts = per.ranks.names
    if len(table) > n_reduced:  # the serving engines' request rows: keys after every row's
        top = int(keys.max()) + 1 if len(keys) else 0
        keys = np.r_[keys, top + np.arange(len(table) - n_reduced, dtype=np.int64)]
        counts = merge_name_counts(
            [counts, name_counts(table.select(np.arange(n_reduced, len(table))))]
        )
    events = per.ranks.events + len(table) - n_reduced
    return CrossRankRows(table, keys, counts, events, serving_join)


def _serving_requests(
    table: EventTable, load: LoadResult, backend: PerRankBackend
) -> tuple[EventTable, ServingJoin | None]:
    """vLLM's and SGLang's request spans as otel-ext requests, joined with otel-ext's rows.

    Only the span files whose loaded rows carry an engine's request or stage names are read
    again for the engines' attributes (:mod:`otel_ext.analysis.loaders.serving_inputs`, where
    the files are); other inputs cost nothing.
    """
    from otel_ext.analysis.loaders.serving_inputs import read_serving_spans, serving_span_paths
    from otel_ext.analysis.serving.engine_telemetry import with_serving_requests

    marks = serving_mark_codes(table)
    if not marks or not len(table):
        return table, None
    src = distinct(table["source"][np.isin(table["name"], np.asarray(marks))])
    paths = {table.strings["source"][int(c)] for c in src.tolist()}
    chosen = [i for i in load.inputs if i.get("path") in paths]
    if not chosen:
        return table, None
    spans = backend.map_files(read_serving_spans, serving_span_paths(chosen))
    return with_serving_requests(table, spans)


# --- align --------------------------------------------------------------------------------


@dataclass
class AlignedRows:
    """The align phase's result.

    Attributes:
        alignment: the clock alignment (its ``table`` the aligned rows, its ``match`` the
            aligned collectives).
        table: the cross-rank rows on their own clocks (every device row among them when
            held rows were fetched for the repair or the timeline).
        keys: their keys (ascending).
        names: rank -> (host, device).
    """

    alignment: Alignment
    table: EventTable
    keys: np.ndarray
    names: dict[int, tuple[str, str]]


def _align_phase(
    rows: CrossRankRows, per: PerRankOutcome, backend: PerRankBackend, options: CrossRankOptions
) -> AlignedRows:
    """Collectives matched and the ranks' clocks aligned. Where the per-rank phase held
    device rows back, the event-level repair runs only if needed: then (or for the
    timeline, which writes every device row) the held rows are fetched and the match and
    alignment run again over every row."""
    clock_of = _clock_names(rows, per, options)
    table, keys = rows.table, rows.keys
    holds = backend.holds()
    alignment = align_ranks(table, match_collectives(table), clock_of=clock_of, repair=not holds)
    if holds and (alignment.repair_skipped or options.timeline is not None):
        table, keys = backend.restore_held()
        alignment = align_ranks(table, match_collectives(table), clock_of=clock_of)
    return AlignedRows(alignment, table, keys, _rank_names(rows.counts, alignment.table))


def _clock_names(
    rows: CrossRankRows, per: PerRankOutcome, options: CrossRankOptions
) -> dict[int, str] | None:
    """Rank -> clock name for ranks known to share a clock: all of them (``same_clock``),
    as given (``clock_of``), else those of one host from profiler files named
    HOSTNAME_PID.* (None when nothing is known)."""
    if options.same_clock:
        return {int(r): "shared" for r in distinct(rows.table["rank"]) if r >= 0}
    if options.clock_of is not None:
        return options.clock_of
    named = {r for r, c in rows.counts.items() if c.get("host")}
    return hosts_from_file_names(rows.table, per.captures, named_ranks=named) or None


def _rank_names(
    counts: dict[int, dict[str, dict[str, int]]], table: EventTable
) -> dict[int, tuple[str, str]]:
    """Rank -> (host, device) from the rows' names counted per rank (``counts``), the
    device made unique where ranks of separate traces share one name."""
    ranks = [int(r) for r in distinct(table["rank"][table["rank"] >= 0]).tolist()]
    names = rank_devices_from_counts(counts, ranks, table.strings)
    seen: dict[str, int] = {}
    for _, dev in names.values():
        seen[dev] = seen.get(dev, 0) + 1
    out = {}
    for r, (host, dev) in names.items():
        if not dev or seen.get(dev, 0) > 1:
            # ranks of separate traces may all call their device "gpu0" (or, from XPlane,
            # "/device:GPU:0": one slash between the rank and the name, not two)
            name = dev.lstrip("/")
            dev = f"rank{r}/{name}" if name else f"rank{r}"
        out[r] = (host, dev)
    return out


# --- cross-rank ---------------------------------------------------------------------------


def _cross_rank_phase(
    per: PerRankOutcome,
    rows: CrossRankRows,
    aligned: AlignedRows,
    backend: PerRankBackend,
    options: CrossRankOptions,
) -> CrossRankResults:
    """Every pass that compares ranks, on the aligned rows (links and ports on each host's
    own clock), the findings ranked over their results, and the collective calls per rank."""
    th = options.thresholds or Thresholds()
    a, amatch = aligned.alignment.table, aligned.alignment.match
    strag, cp, compute = _stragglers_and_path(per, aligned, backend, options.windows, th)
    model = options.device_model or _device_model(per.load)
    links, ports = _links_and_ports(aligned.table, th, nominal_bw=_spec(model, "nic_bandwidth"))
    network = _network(a, amatch, aligned.names, th, nominal_bw=_spec(model, "nic_bandwidth"))
    run_list = runs_summary(a)
    imb = load_imbalance(
        a,
        groups=_comparable_groups(amatch, run_list),
        compute_totals=None if compute is None else compute.rank_totals(),
    )
    reqs = request_latency(a, busy=_held_busy(per.ranks, aligned.alignment))
    reqs["accounting"] = _request_accounting(per.load, backend)
    extent = run_extent(a, run_list)
    sections = PassSections(
        temporal=[r.as_dict() for r in per.ranks.temporal],
        idle=[r.as_dict() for r in per.ranks.idle],
        overlap=[r.as_dict() for r in per.ranks.overlap],
        stragglers=strag, critical_path=cp, links=links, ports=ports, network=network,
        runs=run_list, extent=extent, load_imbalance=imb, roofline=roofline(a, device_model=model),
        requests=reqs, device_model=model,
    )  # fmt: skip
    verdicts = _rank_findings(sections, per, aligned, th)
    calls = _collective_calls(aligned.table, per.load, matched=amatch.n_instances, backend=backend)
    return CrossRankResults(sections, verdicts, calls)


def _stragglers_and_path(
    per: PerRankOutcome,
    aligned: AlignedRows,
    backend: PerRankBackend,
    windows: int,
    th: Thresholds,
) -> tuple[StragglerReport, CriticalPath, ComputeSamples | None]:
    """The stragglers and the critical path: each rank's walk where its rows are (here, or
    on the workers that keep them), stitched here; the what-if asked only of a rank whose
    lateness is a verdict, not of a chance leader. Also the compute samples of the held
    rows, which the stragglers and the imbalance read (None when none were held)."""
    a, amatch = aligned.alignment.table, aligned.alignment.match
    edges = window_edges(a, windows)
    pieces, compute = backend.walk(aligned.alignment, aligned.keys, per.ranks, edges=edges)
    strag = find_stragglers(
        a, amatch, windows=windows, devices=aligned.names, compute=compute, alpha=th.alpha,
        min_effect=th.lateness_effect,
    )  # fmt: skip
    verdicts = straggler_verdicts(strag, th, amatch)
    cp = stitch(
        pieces, amatch, straggler_rank=verdicts[0]["rank"] if verdicts else None,
        steps=_traced_steps(a),
    )  # fmt: skip
    _whole_run_what_if(cp, amatch, aligned.table)
    return strag, cp, compute


def _traced_steps(aligned: EventTable) -> int | None:
    """The profiler steps of the first rank that has any (None without step rows)."""
    step_rows = aligned["category"] == Category.STEP
    if not step_rows.any():
        return None
    r0 = int(aligned["rank"][step_rows].min())
    return len(distinct(aligned["name"][step_rows & (aligned["rank"] == r0)]))


def _whole_run_what_if(cp: CriticalPath, amatch: CollectiveMatch, table: EventTable) -> None:
    """The critical path's what-if (when it has one), measured on the traced collectives,
    with the share of the run traced (a profiler schedule, or the simulator, traces one step
    in N) and the whole-run estimate, as the findings give them."""
    what_if = cp.straggler
    if what_if is None:
        return
    groups = [
        amatch.group[int(i)] for i in amatch.member_instance[amatch.member_rank == what_if["rank"]]
    ]
    coverage = sampled_fraction(table)
    frac = coverage.get(max(set(groups), key=groups.count), 1.0) if groups else 1.0
    what_if["sampled_fraction"] = frac
    what_if["saved_run_ns"] = int(what_if["saved_ns"] / frac) if frac > 0 else what_if["saved_ns"]


def _links_and_ports(
    table: EventTable, th: Thresholds, *, nominal_bw: float | None
) -> tuple[list[LinkStat], list[PortStat]]:
    """Link and port statistics on each host's own clock (alignment shifts whole ranks,
    repairs ends); a NIC link takes its port's verdict (slowness, its basis, slow)."""
    links = link_stats(
        table, paired_ratio=th.link_paired_ratio, slowest_share=th.link_slowest_share
    )
    ports = port_stats(
        table,
        nominal_bw=nominal_bw,
        efficiency=th.nic_efficiency,
        slow_ratio=th.link_slowness,
        slow_share=th.port_slow_share,
    )
    by_host = {p["host"]: p for p in ports}
    for row in links:
        port = by_host.get(row["host"]) if row["kind"] == "nic" else None
        if port is not None:
            row.update(
                {"slowness": port["slowness"], "basis": port["reference"], "slow": port["chosen"]}
            )
    return links, ports


def _network(
    aligned: EventTable,
    amatch: CollectiveMatch,
    names: dict[int, tuple[str, str]],
    th: Thresholds,
    *,
    nominal_bw: float | None = None,
) -> NetworkSection:
    """The network model (:mod:`otel_ext.analysis.cross.network_paths`): bandwidth per host path from
    matched point-to-point transfers (otel-ext's spans, NCCL's paired in profiler traces:
    :mod:`otel_ext.analysis.cross.nccl_p2p`), or, where the trace names no peers, each rank's
    sends and receives against the other ranks'; and, where collectives run both within a
    host and across hosts, their transfer phase per host set
    (:mod:`otel_ext.analysis.cross.collective_host_sets`)."""
    host_of = {r: (h or f"rank{r}") for r, (h, _) in names.items()}
    transfers = all_p2p_transfers(aligned, amatch)
    paths = path_stats(
        transfers,
        host_of,
        slowness=th.path_slowness,
        intra_factor=th.path_intra_factor,
        nominal_bw=nominal_bw,
        alpha=th.alpha,
    )
    unpaired = (
        []
        if len(transfers)
        else unpaired_transfer_stats(aligned, host_of, ratio=th.unpaired_ratio, alpha=th.alpha)
    )
    section: NetworkSection = {
        "peers_known": bool(len(transfers)),
        "paths": [p.as_dict() for p in paths],
        "unpaired": [u.as_dict() for u in unpaired],
    }
    by_host_set = collective_host_set_bandwidth(amatch, {r: h for r, (h, _) in names.items() if h})
    if by_host_set:  # only where it applies: the other documents stay as they were
        section["collective_transfer"] = [b.as_dict() for b in by_host_set]
    return section


def _peer_groups(match: CollectiveMatch) -> dict[int, int]:
    """Ranks that meet at collectives, as connected components: rank -> component id."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    inst, ranks = match.member_instance.tolist(), match.member_rank.tolist()
    first: dict[int, int] = {}
    for i, r in zip(inst, ranks):
        f = first.setdefault(i, r)
        a, b = find(f), find(r)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {r: find(r) for r in parent}


def _comparable_groups(match: CollectiveMatch, runs: list[RunRecord]) -> dict[int, int]:
    """Rank -> group of the ranks the imbalance compares: those that meet at collectives,
    else (no collective, separate runs) those of one run: ranks of separate runs are never
    compared with each other."""
    peers = _peer_groups(match)
    if not peers and len(runs) > 1:
        peers = {r: run["run"] for run in runs for r in run["ranks"]}
    return peers


def _held_busy(
    ranks: RankTables, alignment: Alignment
) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The held device rows' busy intervals per device (their unions, sent by the
    partitions), moved by the clock correction; None when nothing was held."""
    if not ranks.device_busy:
        return None
    out = {}
    for name, spans in ranks.device_busy.items():
        starts = [alignment.clocks.move(r, s) for r, s, _ in spans]
        ends = [alignment.clocks.move(r, e) for r, _, e in spans]
        out[name] = (np.concatenate(starts), np.concatenate(ends))
    return out


def _request_accounting(load: LoadResult, backend: PerRankBackend) -> RequestAccountingSection:
    """Per-request device time and energy (:mod:`otel_ext.analysis.serving.requests`), the
    engine steps read from the OTLP span files where the files are."""
    from otel_ext.analysis.loaders.serving_inputs import engine_steps_from_otlp, otlp_trace_paths

    steps = backend.map_files(engine_steps_from_otlp, otlp_trace_paths(load.inputs))
    steps.sort(key=engine_step_order)  # as one reading of every file orders them
    return request_accounting(steps, metrics=load.metrics)


def _rank_findings(
    sections: PassSections, per: PerRankOutcome, aligned: AlignedRows, th: Thresholds
) -> RankedFindings:
    """The findings over the passes' results, with the memory timelines' section and
    findings, a hung or desynchronised collective (a killed job's watchdog records) first."""
    amatch, runs, extent = aligned.alignment.match, sections.runs, sections.extent
    findings = build_findings(
        match=amatch, stragglers=sections.stragglers, links=sections.links,
        ports=sections.ports, coverage=sampled_fraction(aligned.table),
        metrics=per.load.metrics, overlap=sections.overlap, temporal=sections.temporal,
        idle=sections.idle,
        imbalance=sections.load_imbalance, run_ns=extent.duration_ns,
        run_ns_of_rank={r: int(run["end_ns"] - run["start_ns"]) for run in runs for r in run["ranks"]},
        run_of_rank={r: int(run["run"]) for run in runs for r in run["ranks"]},
        rank_names=aligned.names, thresholds=th, paths=sections.network["paths"],
        unpaired=sections.network["unpaired"],
    )  # fmt: skip
    # memory timelines: their briefs moved from the input records; capacity from the model
    model = sections.device_model
    memory = memory_section(per.load.inputs, capacity_bytes=_spec(model, "memory_size"),
                            capacity_source=f"device model {model}" if model else None)  # fmt: skip
    findings += [f.as_dict() for f in memory_findings(memory)]
    hung = hang_findings(aligned.table, names=aligned.names, run_ns=extent.duration_ns)
    findings[:0] = [f.as_dict() for f in hung]
    return RankedFindings(findings, memory)


#: profiler files re-read for the input sizes of collectives without metadata: at most this
#: many events of them in all (a second parse of large traces would double the analysis)
_CALL_SIZES_MAX_EVENTS = 50_000


def _collective_calls(
    table: EventTable, load: LoadResult, *, matched: int, backend: PerRankBackend
) -> CollectiveCalls:
    """Communication kernels grouped into calls per rank (:mod:`otel_ext.analysis.rank.comm_calls`),
    each call's size from metadata or, for kernels without it (symmetric-memory all-reduces),
    from the launching operation's input shapes: small profiler files that hold such kernels
    are read once more for those shapes (:mod:`otel_ext.analysis.loaders.op_input_bytes`),
    when no collective matched across ranks (a single rank's trace) and they are small
    (:data:`_CALL_SIZES_MAX_EVENTS` in all)."""
    from otel_ext.analysis.rank import comm_calls

    comm = table["category"] == Category.KERNEL_COMM
    if not comm.any():
        return {"count": 0, "by_op": [], "calls": []}
    sizes: dict[tuple[str, int], int] = {}
    unsized = comm & (table["coll_bytes"] <= 0) & (table["external_id"] >= 0)
    if unsized.any() and matched == 0:
        wanted = {table.strings["source"][int(c)] for c in distinct(table["source"][unsized])}
        chosen = [i for i in load.inputs if i.get("path") in wanted and i.get("format") == "kineto"]
        if sum(int(i.get("events") or 0) for i in chosen) <= _CALL_SIZES_MAX_EVENTS:
            for one in backend.map_files(_call_sizes, [str(i["path"]) for i in chosen]):
                sizes.update(one)
    return comm_calls.collective_calls(table, input_bytes=sizes)


def _call_sizes(paths: list[str]) -> list[dict[tuple[str, int], int]]:
    """Each profiler file's collective input sizes by external id (a per-file job)."""
    from otel_ext.analysis.loaders.op_input_bytes import input_bytes_by_external_id

    return [input_bytes_by_external_id(p) for p in paths]


def _device_model(load: LoadResult) -> str | None:
    """The registry's device model the metrics name (``accel.device.model``), or None."""
    from otel_ext.semconv.attributes import ACCEL_DEVICE_MODEL
    from otel_ext.semconv.registry import device_table

    known = set(device_table())
    metrics = getattr(load, "metrics", None)
    if metrics is not None and metrics.total:  # the dictionaries are whole
        for text in metrics.strings.get("attrs", []):
            if ACCEL_DEVICE_MODEL in text:
                try:
                    model = json.loads(text).get(ACCEL_DEVICE_MODEL)
                except ValueError:
                    continue
                if model in known:
                    return str(model)
    return None


def _spec(model: str | None, field: str) -> float | None:
    """A device model's registry value (``nic_bandwidth``, ...), or None."""
    if not model:
        return None
    from otel_ext.semconv.registry import device_table

    value = device_table().get(model, {}).get(field)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


# --- document -----------------------------------------------------------------------------


def _document_phase(
    per: PerRankOutcome,
    rows: CrossRankRows,
    aligned: AlignedRows,
    results: CrossRankResults,
    options: CrossRankOptions,
) -> AnalysisDocument:
    """The document (its keys in ``docs/analysis.md``'s order), the timeline written when
    asked for."""
    alignment, (passes, verdicts, calls) = aligned.alignment, results
    ranks = rank_entries(aligned.names, alignment, per.captures, passes.runs)
    collectives = collectives_section(
        alignment.match, calls, max_collectives=options.max_collectives
    )
    written = None
    if options.timeline is not None:
        inputs = _timeline_inputs(per, aligned, passes.critical_path, verdicts, ranks)
        written = options.timeline(inputs)
    doc: AnalysisDocument = {
        "schema": SCHEMA,
        "inputs": list(per.load.inputs),
        "skipped": [s.as_dict() for s in per.load.skipped],
        "run": _run_section(per, rows, passes),
        "captures": per.captures,
        "ranks": ranks,
        "runs": passes.runs,
        "temporal_breakdown": passes.temporal,
        "idle_breakdown": passes.idle,
        "comm_comp_overlap": passes.overlap,
        "kernel_breakdown": per.ranks.kernel_breakdown(),
        "collectives": collectives,
        "links": passes.links,
        "ports": passes.ports,
        "network": passes.network,
        "stragglers": passes.stragglers.rows,
        "critical_path": passes.critical_path.as_dict(),
        "causality": alignment.causality(),
        "load_imbalance": passes.load_imbalance,
        "roofline": passes.roofline,
        "requests": passes.requests,
        "serving": rows.serving,
        "findings": verdicts.findings,
    }
    if verdicts.memory is not None:
        doc["memory"] = verdicts.memory
    if written is not None:
        doc["timeline"] = written
    return doc


def _run_section(per: PerRankOutcome, rows: CrossRankRows, passes: PassSections) -> RunSection:
    """The ``run`` section: the analysed time, what was read, the device model and the
    step selection."""
    metrics = per.load.metrics
    return {
        "start_ns": passes.extent.start_ns,
        "end_ns": passes.extent.end_ns,
        "duration_ns": passes.extent.duration_ns,
        "events": rows.events,
        "metric_points": metrics.total if metrics is not None else 0,
        "device_model": passes.device_model,
        "steps": per.steps,
    }


def _timeline_inputs(
    per: PerRankOutcome,
    aligned: AlignedRows,
    cp: CriticalPath,
    verdicts: RankedFindings,
    ranks: list[RankEntry],
) -> TimelineInputs:
    """What the timeline writer needs: every analysed row when they were kept here (the
    aligned rows' keys are their positions there), else (on a cluster) the rows aligned:
    the cross-rank rows, every device row among them (host operators stay there)."""
    from otel_ext.analysis.report.timeline import TimelineInputs

    kept, keys, alignment = per.kept, aligned.keys, aligned.alignment
    rest = (verdicts.findings, ranks, per.load.metrics)
    if kept is not None:
        pos = np.where(keys < len(kept), keys, -1)
        return TimelineInputs(kept, pos, alignment, cp, *rest, complete=True)
    every = np.arange(len(aligned.table), dtype=np.int64)
    return TimelineInputs(aligned.table, every, alignment, cp, *rest, complete=False)


def to_json(doc: dict[str, Any]) -> str:
    """The document as JSON text (numpy scalars made plain; key order kept).

    >>> print(to_json({"a": np.int64(3)}))
    {
      "a": 3
    }
    """
    return json.dumps(doc, indent=2, default=_default, allow_nan=False)


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
