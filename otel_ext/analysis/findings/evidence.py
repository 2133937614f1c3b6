"""The evidence the finding rules read: one TypedDict per row or section another pass produces.

Each type names only the keys a rule reads, with the types the producing pass writes; the
producers' rows carry more (they are the document's JSON rows) and are accepted as they are.
Every key is read-only (:data:`typing_extensions.ReadOnly`), so a producer's own, narrower
TypedDict (``float`` where this says ``float | None``, a key it always writes where this says
``NotRequired``) is accepted too: the rules promise not to change what they are given.

========================  =====================================================================
type                      produced by
========================  =====================================================================
:class:`StragglerEvidence`     :func:`~otel_ext.analysis.cross.stragglers.find_stragglers` (its rows)
:class:`LinkEvidence`          :func:`~otel_ext.analysis.cross.link_stats.link_stats`
:class:`PortRow`          :func:`~otel_ext.analysis.cross.link_stats.port_stats`
:class:`PathRow`          :func:`~otel_ext.analysis.cross.network_paths.path_stats` (as dicts)
:class:`UnpairedRow`      :func:`~otel_ext.analysis.cross.network_paths.unpaired_transfer_stats`
:class:`OverlapEvidence`       the per-rank communication/computation overlap rows
:class:`TemporalRow`      the per-rank temporal breakdown rows
:class:`IdleRow`          the per-stream idle breakdown rows
:class:`ImbalanceReport`  :func:`~otel_ext.analysis.cross.imbalance.load_imbalance`
========================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:  # only the type checker reads these annotations (PEP 563)
    from typing_extensions import ReadOnly

__all__ = [
    "IdleRow",
    "ImbalanceEvidence",
    "ImbalanceReport",
    "ImbalanceTest",
    "LinkEvidence",
    "OverlapEvidence",
    "PathRow",
    "PortRow",
    "SiteTestEvidence",
    "StragglerEvidence",
    "TemporalRow",
    "UnpairedRow",
]


class SiteTestEvidence(TypedDict):
    """The order test of a rank's self-caused lateness at one site (or pooled: ``all``)."""

    site: ReadOnly[str]
    last: ReadOnly[int]
    instances: ReadOnly[int]
    p_adjusted: ReadOnly[float | None]
    median_lateness_ns: ReadOnly[float]
    next_lateness_ns: ReadOnly[NotRequired[float | None]]
    next_rank: ReadOnly[NotRequired[int | None]]


class StragglerEvidence(TypedDict):
    """One rank's lateness at collectives and its compute against the same work elsewhere."""

    rank: ReadOnly[int]
    score: ReadOnly[float]
    late_ns: ReadOnly[int]
    blame_ns: ReadOnly[int]
    waiting_ns: ReadOnly[NotRequired[int]]
    last_arrivals: ReadOnly[int]
    collectives: ReadOnly[NotRequired[int]]
    expected_last: ReadOnly[NotRequired[float]]
    p_last: ReadOnly[NotRequired[float]]
    median_lateness_ns: ReadOnly[NotRequired[float]]
    lateness_effect: ReadOnly[NotRequired[float | None]]
    persistence: ReadOnly[float]
    compute_ratio: ReadOnly[float | None]
    compute_ratio_by_window: ReadOnly[Sequence[float | None]]
    compute_slower: ReadOnly[NotRequired[int]]
    compute_faster: ReadOnly[NotRequired[int]]
    compute_p: ReadOnly[NotRequired[float]]
    site: ReadOnly[NotRequired[str | None]]
    site_p: ReadOnly[NotRequired[float]]
    site_effect: ReadOnly[NotRequired[float | None]]
    site_test: ReadOnly[NotRequired[SiteTestEvidence | None]]
    sites: ReadOnly[NotRequired[Sequence[object]]]


class LinkEvidence(TypedDict):
    """A link's transfers against the other links of the collectives it served."""

    link: ReadOnly[str]
    kind: ReadOnly[str]
    transfers: ReadOnly[int]
    median_ns: ReadOnly[float]
    median_bw: ReadOnly[float | None]
    peers: ReadOnly[NotRequired[int]]
    peer_median_ns: ReadOnly[float | None]
    slowness: ReadOnly[float | None]
    basis: ReadOnly[NotRequired[str | None]]
    collectives: ReadOnly[NotRequired[int]]
    slowest_share: ReadOnly[NotRequired[float | None]]
    wait_ns: ReadOnly[NotRequired[int]]
    slow: ReadOnly[NotRequired[bool]]
    group: ReadOnly[NotRequired[str | None]]


class PortRow(TypedDict):
    """A host's network port: its transfers against the expected rate."""

    host: ReadOnly[str]
    transfers: ReadOnly[int]
    slow_transfers: ReadOnly[int]
    slow_share: ReadOnly[float]
    median_bw: ReadOnly[float | None]
    reference_bw: ReadOnly[float]
    reference: ReadOnly[str]
    slowness: ReadOnly[float | None]
    healthy_bw: ReadOnly[float]
    extra_ns: ReadOnly[int]
    partners: ReadOnly[Sequence[str]]
    chosen: ReadOnly[NotRequired[bool]]
    candidates: ReadOnly[Sequence[str]]
    ambiguous: ReadOnly[bool]


class PathRow(TypedDict):
    """One direction of a host pair: its transfers' bandwidth against a reference."""

    path: ReadOnly[str]
    src_host: ReadOnly[str]
    dst_host: ReadOnly[str]
    slow: ReadOnly[NotRequired[bool]]
    transfers: ReadOnly[int]
    slower: ReadOnly[int]
    p: ReadOnly[float]
    median_bw: ReadOnly[float | None]
    reference_bw: ReadOnly[float | None]
    slowness: ReadOnly[float | None]
    reference: ReadOnly[str]
    threshold: ReadOnly[float | None]
    extra_ns: ReadOnly[int]
    rank_pairs: ReadOnly[Sequence[str]]


class UnpairedRow(TypedDict):
    """One rank's sends or receives against the other ranks' (a trace without peers)."""

    rank: ReadOnly[int]
    host: ReadOnly[str]
    direction: ReadOnly[str]
    count: ReadOnly[int]
    median_ns: ReadOnly[float]
    peer_median_ns: ReadOnly[float]
    ratio: ReadOnly[float]
    slower: ReadOnly[int]
    p: ReadOnly[float]
    slow: ReadOnly[NotRequired[bool]]
    late_sender_share: ReadOnly[NotRequired[float | None]]


class OverlapEvidence(TypedDict):
    """One rank's communication not hidden behind computation."""

    rank: ReadOnly[int]
    exposed_comm_ns: ReadOnly[NotRequired[int | None]]
    exposed_comm_pct_of_window: ReadOnly[NotRequired[float]]
    overlap_pct: ReadOnly[NotRequired[float | None]]


class TemporalRow(TypedDict):
    """One rank's kernel window: its compute and idle time."""

    rank: ReadOnly[int]
    compute_ns: ReadOnly[NotRequired[int]]
    kernel_window_ns: ReadOnly[NotRequired[int]]
    idle_ns: ReadOnly[NotRequired[int]]
    idle_pct: ReadOnly[NotRequired[float]]


class IdleRow(TypedDict):
    """One stream's idle time, with the share spent waiting for the host."""

    rank: ReadOnly[int]
    stream: ReadOnly[NotRequired[object]]
    idle_ns: ReadOnly[NotRequired[int]]
    host_wait_pct: ReadOnly[NotRequired[float]]


class ImbalanceEvidence(TypedDict):
    """One step (or layer) across the ranks of a peer group: its slowest rank and spread."""

    name: ReadOnly[str]
    group: ReadOnly[int]
    imbalance: ReadOnly[float]
    max_rank: ReadOnly[int]
    max_ns: ReadOnly[int]
    mean_ns: ReadOnly[int]


class ImbalanceTest(TypedDict):
    """Whether one rank is the slowest step (or layer) more often than chance allows."""

    group: ReadOnly[int]
    rank: ReadOnly[int]
    times_slowest: ReadOnly[int]
    rows: ReadOnly[int]
    expected: ReadOnly[float]
    p: ReadOnly[float]
    median_imbalance: ReadOnly[float]


class ImbalanceReport(TypedDict):
    """Per-step and per-layer imbalance rows, with the persistence test of each."""

    steps: ReadOnly[NotRequired[Sequence[ImbalanceEvidence] | None]]
    layers: ReadOnly[NotRequired[Sequence[ImbalanceEvidence] | None]]
    steps_test: ReadOnly[NotRequired[ImbalanceTest | None]]
    layers_test: ReadOnly[NotRequired[ImbalanceTest | None]]
