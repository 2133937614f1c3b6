"""The analysis document's sections as the reports read them, typed.

The engine (:func:`otel_ext.analysis.engine.analyze`) builds the document; the text, HTML
and timeline reports read it. These ``TypedDict`` classes name the keys they read and the
types of their values. Every key is optional (``total=False``): a report reads a section
with ``.get`` where the engine leaves a key out.

>>> row: StragglerView = {"rank": 3, "score": 0.8, "late_ns": 5_000}
>>> row["rank"]
3
"""

from __future__ import annotations

from typing import TypeAlias, TypedDict

from otel_ext.analysis.loaders import JsonValue

__all__ = [
    "AccountingView",
    "BreakdownRow",
    "CallsByOp",
    "CallsSection",
    "CategoryTimeView",
    "CausalityRank",
    "CausalitySection",
    "CollectiveSummaryRow",
    "CollectivesView",
    "CriticalPathView",
    "Evidence",
    "FindingEntry",
    "GraphReplayView",
    "InputEntry",
    "JsonValue",
    "LinkView",
    "NetworkPath",
    "NetworkView",
    "OverlapView",
    "RankTimeView",
    "RankView",
    "RequestAccountingView",
    "RequestSummary",
    "RequestsSection",
    "RunEntry",
    "RunView",
    "Segment",
    "SkippedEntry",
    "StragglerView",
    "TimelineSection",
    "UnpairedTransfers",
    "WhatIf",
]


#: a finding's evidence: the statistics it rests on, by name (their keys vary by finding kind)
Evidence: TypeAlias = "dict[str, JsonValue]"


class RunView(TypedDict, total=False):
    """``run``: the whole run's size."""

    events: int
    metric_points: int
    duration_ns: int


class InputEntry(TypedDict, total=False):
    """One of ``inputs``: a file and what became of it."""

    path: str
    status: str
    note: str
    unfinished: bool


class RunEntry(TypedDict, total=False):
    """One of ``runs``: the ranks of one separate run."""

    ranks: list[int]


class FindingEntry(TypedDict, total=False):
    """One of ``findings``, most important first."""

    kind: str
    target: str
    impact_ns: float
    impact_pct: float
    summary: str
    evidence: Evidence


class RankView(TypedDict, total=False):
    """One of ``ranks``: a rank's device and how its clock was treated."""

    rank: int
    host: str
    device: str
    clock_offset_ns: float
    clock_bound_ns: float | None
    clock_status: str
    clock_offset_estimate_ns: float
    clock: str
    clock_drift_ppm: float | None


class BreakdownRow(TypedDict, total=False):
    """One of ``temporal_breakdown``: a rank's time by kind, in percent."""

    rank: int
    device: str
    idle_pct: float
    compute_pct: float
    non_compute_pct: float


class OverlapView(TypedDict, total=False):
    """One of ``comm_comp_overlap``."""

    rank: int
    overlap_pct: float


class StragglerView(TypedDict, total=False):
    """One of ``stragglers``, most likely first."""

    rank: int
    device: str
    score: float
    late_ns: float
    blame_ns: float
    last_arrivals: int
    collectives: int
    expected_last: float
    p_last: float
    site: str | None
    site_p: float
    compute_ratio: float | None


class CollectiveSummaryRow(TypedDict, total=False):
    """One of ``collectives.summary``: an operation on a group."""

    op: str
    group: str
    count: int
    total_wait_ns: float
    median_transfer_ns: float
    median_busbw: float | None


class CallsByOp(TypedDict, total=False):
    """One of ``collectives.calls.by_op``."""

    op: str
    calls: int
    bytes_total: float
    bytes_known: bool


class CallsSection(TypedDict, total=False):
    """``collectives.calls``: collective calls that were not matched across ranks."""

    count: int
    by_op: list[CallsByOp]


class CollectivesView(TypedDict, total=False):
    """``collectives``: the collectives matched across ranks."""

    count: int
    matched_by: str
    total_wait_ns: float
    summary: list[CollectiveSummaryRow]
    calls: CallsSection
    wait_heatmap: dict[str, JsonValue] | None


class LinkView(TypedDict, total=False):
    """One of ``links``."""

    link: str
    transfers: int
    median_ns: float
    slowness: float


class NetworkPath(TypedDict, total=False):
    """One of ``network.paths``: a host path's transfers."""

    path: str
    transfers: int
    median_transfer_ns: float
    median_bw: float | None
    slowness: float
    slow: bool
    reference: str
    reference_bw: float


class UnpairedTransfers(TypedDict, total=False):
    """One of ``network.unpaired``: a rank's sends or receives, when no peer is named."""

    rank: int
    host: str
    direction: str
    count: int
    median_ns: float
    ratio: float
    slow: bool


class CollectiveTransferView(TypedDict, total=False):
    """One of ``network.collective_transfer``: collectives' transfer phase per host set."""

    host_set: str
    op: str
    size_class_bytes: int
    instances: int
    median_busbw: float
    ratio: float


class NetworkView(TypedDict, total=False):
    """``network``: the network model."""

    paths: list[NetworkPath]
    unpaired: list[UnpairedTransfers]
    collective_transfer: list[CollectiveTransferView]


class CategoryTimeView(TypedDict):
    """One of ``critical_path.by_category``."""

    category: str
    ns: float


class RankTimeView(TypedDict):
    """One of ``critical_path.by_rank``."""

    rank: int
    ns: float


class GraphReplayView(TypedDict, total=False):
    """One of ``critical_path.graph_replays``: many kernels queued by one launch."""

    kernels: int
    launch: str
    on_path_ns: float


class WhatIf(TypedDict, total=False):
    """``critical_path.straggler_what_if``."""

    rank: int
    saved_ns: float
    saved_pct: float
    saved_run_ns: float
    sampled_fraction: float


class Segment(TypedDict, total=False):
    """One of ``critical_path.segments`` (aligned times)."""

    rank: int
    start_ns: int
    end_ns: int
    category: str
    name: str


class CriticalPathView(TypedDict, total=False):
    """``critical_path``."""

    length_ns: float
    by_category: list[CategoryTimeView]
    by_rank: list[RankTimeView]
    graph_replays: list[GraphReplayView]
    straggler_what_if: WhatIf | None
    segments: list[Segment]


class CausalityRank(TypedDict, total=False):
    """One of ``causality.per_rank``."""

    rank: int
    moved_events: int
    max_shift_ns: float


class CausalitySection(TypedDict, total=False):
    """``causality``: violations before and after the alignment and repair."""

    violations_before: int
    violations_within_bound: int
    violations_after: int
    repaired_events: int
    constraints_consistent: bool
    max_repair_shift_ns: float
    per_rank: list[CausalityRank]


class RequestSummary(TypedDict, total=False):
    """``requests.summary``: latency percentiles and where the time to first token went."""

    ttft_p50_ns: float
    ttft_p99_ns: float
    tpot_p50_ns: float
    tpot_p99_ns: float
    ttft_queue_pct: float
    ttft_prefill_pct: float
    ttft_layers_pct: float
    ttft_collectives_pct: float


class AccountingView(TypedDict, total=False):
    """``requests.accounting.summary``: accelerator time and energy per request."""

    accelerator_ms_p50: float
    accelerator_ms_p99: float
    joules_p50: float | None
    joules_p99: float | None


class RequestAccountingView(TypedDict, total=False):
    """``requests.accounting``."""

    summary: AccountingView | None


class RequestsSection(TypedDict, total=False):
    """``requests``: serving requests."""

    count: int
    summary: RequestSummary
    accounting: RequestAccountingView | None


class SkippedEntry(TypedDict, total=False):
    """One of ``skipped``: a file or record left out."""

    path: str
    record: str
    reason: str
    count: int


class TimelineSection(TypedDict, total=False):
    """``timeline``: the merged timeline written beside the report."""

    path: str
    link: str
    events: int
