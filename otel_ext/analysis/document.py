"""The sections of the analysis document the engine assembles itself, typed.

Every pass returns its own section; the engine's document phase
(:mod:`otel_ext.analysis.engine`) assembles the run's extent, the ranks' table (names, clock
alignment, runs), the collectives' section and the network model's section from the passes'
results. These are pure functions of those results, with the sections' shapes as
:class:`~typing.TypedDict`\\ s (the keys ``docs/analysis.md`` documents, in the document's
order).

>>> from otel_ext.analysis.table import EventTable
>>> t = EventTable.from_rows([dict(start_ns=0, end_ns=10, rank=0),
...                           dict(start_ns=50, end_ns=70, rank=1)])
>>> run_extent(t, [])
RunExtent(start_ns=0, end_ns=70, duration_ns=70)
>>> run_extent(t, [{"run": 0, "ranks": [0], "start_ns": 0, "end_ns": 10},
...                {"run": 1, "ranks": [1], "start_ns": 50, "end_ns": 70}])
RunExtent(start_ns=0, end_ns=70, duration_ns=30)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, NotRequired, TypedDict

import numpy as np

from otel_ext._arrays import distinct

if TYPE_CHECKING:
    from otel_ext.analysis.cross.alignment import Alignment, CausalityJson
    from otel_ext.analysis.cross.collective_host_sets import HostSetBandwidthJson
    from otel_ext.analysis.cross.collective_match import (
        CollectiveMatch,
        CollectiveMismatch,
        CollectiveRow,
        CollectiveSummary,
    )
    from otel_ext.analysis.cross.critical_path import CriticalPath, CriticalPathSection
    from otel_ext.analysis.cross.imbalance import LoadImbalance
    from otel_ext.analysis.cross.link_stats import LinkStat, PortStat
    from otel_ext.analysis.cross.network_paths import PathStatJson, RankTransferJson
    from otel_ext.analysis.cross.stragglers import StragglerReport, StragglerRow
    from otel_ext.analysis.rank.breakdown import (
        IdleBreakdownDict,
        KernelBreakdownDoc,
        TemporalBreakdownDict,
    )
    from otel_ext.analysis.rank.comm_calls import CollectiveCalls
    from otel_ext.analysis.rank.memory import MemorySection
    from otel_ext.analysis.rank.overlap import OverlapDict
    from otel_ext.analysis.rank.roofline import RooflineRow
    from otel_ext.analysis.report.timeline import TimelineSummary
    from otel_ext.analysis.runs import Capture, RunRecord
    from otel_ext.analysis.serving.engine_telemetry import ServingJoin
    from otel_ext.analysis.serving.requests import RequestLatency
    from otel_ext.analysis.steps import StepSelection
    from otel_ext.analysis.table import EventTable

__all__ = [
    "AnalysisDocument",
    "CollectivesSection",
    "CrossRankResults",
    "NetworkSection",
    "PassSections",
    "RankEntry",
    "RankedFindings",
    "RunExtent",
    "RunSection",
    "WaitHeatmap",
    "collectives_section",
    "rank_entries",
    "run_extent",
    "wait_heatmap",
]


class RunSection(TypedDict):
    """The document's ``run``: the analysed span of time and what was read."""

    start_ns: int
    end_ns: int
    duration_ns: int
    events: int
    metric_points: int
    device_model: str | None
    steps: StepSelection


class RankEntry(TypedDict):
    """One entry of the document's ``ranks``: names, clock alignment and run."""

    rank: int
    host: str
    device: str
    clock_offset_ns: float
    clock_drift_ppm: float
    clock_bound_ns: float | None
    clock_offset_estimate_ns: float
    clock_status: str
    clock: str
    trace_rank: int | None
    run: int


class WaitHeatmap(TypedDict):
    """Collective wait per rank and time bin: ``wait_ns[i][j]`` is ``ranks[i]``'s wait in
    collectives that began in bin ``j`` (bins from ``edges_ns``)."""

    ranks: list[int]
    edges_ns: list[int]
    wait_ns: list[list[int]]


class CollectivesSection(TypedDict):
    """The document's ``collectives``: the match, its instances and the calls per rank."""

    matched_by: str
    count: int
    total_wait_ns: int
    summary: list[CollectiveSummary]
    mismatches: list[CollectiveMismatch]
    instances: list[CollectiveRow]
    wait_heatmap: WaitHeatmap
    calls: CollectiveCalls


class NetworkSection(TypedDict):
    """The document's ``network``: per host path from matched transfers, or per rank
    against its peers where the trace names no peers."""

    peers_known: bool
    paths: list[PathStatJson]
    unpaired: list[RankTransferJson]
    #: collectives' transfer phase per host set, only where some ran both within a host and
    #: across hosts (:mod:`otel_ext.analysis.cross.collective_host_sets`)
    collective_transfer: NotRequired[list[HostSetBandwidthJson]]


class AnalysisDocument(TypedDict):
    """The analysis document (schema ``otel-ext.analysis/1``), its keys in order; each
    section as its pass or the engine gives it (``docs/analysis.md`` documents them)."""

    schema: str
    inputs: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    run: RunSection
    captures: list[Capture]
    ranks: list[RankEntry]
    runs: list[RunRecord]
    temporal_breakdown: list[TemporalBreakdownDict]
    idle_breakdown: list[IdleBreakdownDict]
    comm_comp_overlap: list[OverlapDict]
    kernel_breakdown: KernelBreakdownDoc
    collectives: CollectivesSection
    links: list[LinkStat]
    ports: list[PortStat]
    network: NetworkSection
    stragglers: list[StragglerRow]
    critical_path: CriticalPathSection
    causality: CausalityJson
    load_imbalance: LoadImbalance
    roofline: list[RooflineRow]
    requests: RequestLatency
    serving: ServingJoin | None
    findings: list[dict[str, Any]]
    memory: NotRequired[MemorySection]
    timeline: NotRequired[TimelineSummary]


class RunExtent(NamedTuple):
    """The analysed time: first device row's start, last one's end, and the duration
    (separate runs: the sum of their own spans, not the days between them)."""

    start_ns: int
    end_ns: int
    duration_ns: int


@dataclass
class PassSections:
    """What the cross-rank phase hands the document phase: each pass's result.

    Attributes:
        temporal, idle, overlap: the per-rank breakdowns' rows (as the document has them;
            the findings read the same rows).
        stragglers: :func:`~otel_ext.analysis.cross.stragglers.find_stragglers`' report.
        critical_path: the stitched critical path (its what-if with the whole-run estimate).
        links, ports: link and port statistics (NIC links with their port's verdict).
        network: the network model's section.
        runs: the runs (:func:`~otel_ext.analysis.runs.runs_summary`).
        extent: the analysed time.
        load_imbalance: :func:`~otel_ext.analysis.cross.imbalance.load_imbalance`'s section.
        roofline: :func:`~otel_ext.analysis.rank.roofline.roofline`'s rows.
        requests: request latency, with the engine steps' accounting.
        device_model: the registry's device model the peaks and capacities come from.
    """

    temporal: list[TemporalBreakdownDict]
    idle: list[IdleBreakdownDict]
    overlap: list[OverlapDict]
    stragglers: StragglerReport
    critical_path: CriticalPath
    links: list[LinkStat]
    ports: list[PortStat]
    network: NetworkSection
    runs: list[RunRecord]
    extent: RunExtent
    load_imbalance: LoadImbalance
    roofline: list[RooflineRow]
    requests: RequestLatency
    device_model: str | None


@dataclass
class RankedFindings:
    """The findings over the passes' results, ranked (a hang first), and the memory
    timelines' section they include (None without memory timelines)."""

    findings: list[dict[str, Any]]
    memory: MemorySection | None


class CrossRankResults(NamedTuple):
    """What the cross-rank phase hands the document phase."""

    passes: PassSections
    verdicts: RankedFindings
    calls: CollectiveCalls


def run_extent(table: EventTable, runs: Sequence[RunRecord]) -> RunExtent:
    """The :class:`RunExtent` of ``table``'s rows of ranks (aligned) and its runs
    (:func:`~otel_ext.analysis.runs.runs_summary`)."""
    dev = table["rank"] >= 0
    start = int(table["start_ns"][dev].min()) if dev.any() else 0
    end = int(table["end_ns"][dev].max()) if dev.any() else 0
    duration = end - start
    if len(runs) > 1:  # separate runs: their own spans, not the days between them
        duration = sum(r["end_ns"] - r["start_ns"] for r in runs)
    return RunExtent(start, end, duration)


def wait_heatmap(match: CollectiveMatch, *, bins: int = 60) -> WaitHeatmap:
    """Collective wait per rank and time bin (for the report's heatmap).

    Returns ``{"ranks", "edges_ns", "wait_ns"}`` with ``wait_ns[i][j]`` the wait of
    ``ranks[i]`` in collectives that began in bin ``j``.
    """
    if match.n_instances == 0:
        return {"ranks": [], "edges_ns": [], "wait_ns": []}
    lo = int(match.member_start_ns.min())
    hi = int(match.member_start_ns.max()) + 1
    edges = np.linspace(lo, hi, bins + 1)
    ranks = distinct(match.member_rank)
    b = np.clip(np.searchsorted(edges, match.member_start_ns, side="right") - 1, 0, bins - 1)
    r = np.searchsorted(ranks, match.member_rank)
    grid = np.zeros((len(ranks), bins), dtype=np.int64)
    np.add.at(grid, (r, b), match.wait_ns)
    return {
        "ranks": [int(x) for x in ranks],
        "edges_ns": [int(e) for e in edges],
        "wait_ns": grid.tolist(),
    }


def collectives_section(
    match: CollectiveMatch, calls: CollectiveCalls, *, max_collectives: int
) -> CollectivesSection:
    """The ``collectives`` section of the aligned match (at most ``max_collectives``
    instances listed, most waited for) and the calls per rank
    (:func:`~otel_ext.analysis.rank.comm_calls.collective_calls`)."""
    return {
        "matched_by": match.source,
        "count": match.n_instances,
        "total_wait_ns": int(match.wait_ns.sum()) if match.n_instances else 0,
        "summary": match.summary(),
        "mismatches": match.mismatches(),
        "instances": match.rows(limit=max_collectives),
        "wait_heatmap": wait_heatmap(match),
        "calls": calls,
    }


def _finite(x: float) -> float | None:
    """A bound as JSON has it: rounded, ``None`` when nothing bounds it."""
    return round(float(x), 3) if np.isfinite(x) else None


def rank_entries(
    names: dict[int, tuple[str, str]],
    alignment: Alignment,
    captures: Sequence[Capture],
    runs: Sequence[RunRecord],
) -> list[RankEntry]:
    """The ``ranks`` section: per rank (ascending) its host and device (``names``), its
    clock alignment, its rank in its own trace (``captures``) and its run."""
    trace_rank = {c["rank"]: c["trace_rank"] for c in captures}
    run_of = {r: run["run"] for run in runs for r in run["ranks"]}
    out: list[RankEntry] = []
    for r in sorted(names):
        host, device = names[r]
        out.append(
            {
                "rank": r,
                "host": host,
                "device": device,
                "clock_offset_ns": round(alignment.offsets_ns.get(r, 0.0), 3),
                "clock_drift_ppm": round(alignment.drift_ppm.get(r, 0.0), 6),
                "clock_bound_ns": _finite(alignment.bounds_ns.get(r, 0.0)),
                "clock_offset_estimate_ns": round(alignment.estimate_ns.get(r, 0.0), 3),
                "clock_status": alignment.status.get(r, "none"),
                "clock": alignment.clock_of.get(r, f"rank{r}"),
                "trace_rank": trace_rank.get(r, r),
                "run": run_of.get(r, 0),
            }
        )
    return out
