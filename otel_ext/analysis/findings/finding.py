"""What a finding is: its fields, the JSON object it becomes, and where numbers become one.

:class:`Finding` is what every rule returns (:mod:`otel_ext.analysis.findings.build` lists
the kinds); :class:`Thresholds` holds every number a rule compares against (all documented in
docs/analysis.md); :data:`CAUSE_KINDS` are the kinds that are root causes, ranked before the
symptoms they produce (:mod:`otel_ext.analysis.findings.ranking`).

>>> f = Finding("slow-link", "host0/chip1-chip2", 2_000_000, 1.23456, "link ...", {"link": "x"})
>>> f.as_dict()["impact_pct"], sorted(f.as_dict())
(1.2346, ['evidence', 'impact_ns', 'impact_pct', 'kind', 'summary', 'target'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from otel_ext.analysis.significance import ALPHA

__all__ = ["CAUSE_KINDS", "Finding", "Thresholds"]

CAUSE_KINDS = (
    "straggler",
    "throttle",
    "slow-link",
    "slow-nic",
    "slow-network-path",
    "slow-transfers",
    "collective-hang",
)


@dataclass
class Thresholds:
    """Where a number becomes a finding (all documented in docs/analysis.md)."""

    alpha: float = ALPHA  # family-wise significance of every cross-rank verdict
    min_collectives: int = 5  # a rank joined at least this many collectives to be judged late
    lateness_effect: float = 0.5  # median self-lateness over the members' lateness spread
    slow_compute_ratio: float = 1.08  # a rank's compute this much slower than the median
    straggler_blame_share: float = 0.5  # this share of the self-caused waiting is one rank's
    straggler_waiting_share: float = 0.2  # ... and this share of all the waiting
    straggler_score: float = 0.5
    throttle_freq_drop: float = 0.92  # frequency after / before the change point
    onset_ratio_early: float = 1.04  # compute ratio before a throttle's onset at most
    link_paired_ratio: float = 1.1  # a link this much slower than its collective's median link
    link_slowest_share: float = 0.75  # ... and the last to finish in this share of them
    link_slowness: float = 1.3  # a network transfer this much below the expected rate is slow
    port_slow_share: float = 0.6  # a port with this share of slow transfers is implicated
    nic_efficiency: float = 0.8  # expected rate: this fraction of the port's nominal bandwidth
    exposed_comm_pct: float = 10.0
    host_wait_pct: float = 20.0
    imbalance: float = 0.1
    min_cause_pct: float = 0.5  # below this impact a cause ranks with the symptoms
    path_slowness: float = 3.0  # a host path this much below its reference bandwidth is slow
    path_intra_factor: float = 10.0  # ... or this much below the fastest within-host path
    late_sender_share: float = 0.25  # slow receives with a late sender at most this share
    unpaired_ratio: float = 5.0  # a rank's sends/receives this much longer than the others'


@dataclass
class Finding:
    """One verdict: what holds the workload back, where, how much it costs, and why.

    The first six fields are the JSON object (:meth:`as_dict`); the rest are for the ranking
    step only and never written: ``rank`` (the rank the finding is about, if one: its impact
    is rated against that rank's run, and findings of one run are grouped), ``devices`` (the
    devices it names, as telemetry names them, for a grouped finding's summary) and
    ``counter_backed`` (its counters show the cause directly, whatever its impact).
    """

    kind: str
    target: str
    impact_ns: int
    impact_pct: float
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None
    devices: tuple[str, ...] = ()
    counter_backed: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The finding as the document writes it (``impact_pct`` to 4 decimals)."""
        return {
            "kind": self.kind,
            "target": self.target,
            "impact_ns": int(self.impact_ns),
            "impact_pct": round(float(self.impact_pct), 4),
            "summary": self.summary,
            "evidence": self.evidence,
        }
