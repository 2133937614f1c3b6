"""Findings: a ranked list of what holds the workload back, each with its evidence.

Every finding has a ``kind``, a ``target`` named as telemetry names it (``host1/chip2`` for a
chip, ``host0/chip1-chip2`` for a chip-to-chip link, ``host1`` for a host and its network
port), ``impact_ns`` (run time it costs), ``impact_pct`` (of the run), ``evidence`` (the
numbers it rests on) and a one-line ``summary``. The kinds, and how they are told apart:

* **straggler**: one rank arrives last at collectives, persistently, and its compute work
  runs slower than the same work on the other ranks *all run long*; its clock frequency (if
  counters were recorded) is normal.
* **throttle**: the same lateness, but it starts part-way: compute ratios are normal in the
  early windows and high later, and the chip's clock frequency drops (temperature up) at
  about that time.
* **slow-link**: one chip-to-chip link's transfers are the slowest of the collectives they
  serve (compared with the other links of the same collective: same bytes, same moment),
  in most of them, while no rank computes slowly; the link's counters are shown.
* **slow-nic**: transfers through one host's network port (KV-cache, inter-host) run well
  below the port's expected rate, and that port explains the slow transfers better than
  any other (see :func:`~otel_ext.analysis.cross.link_stats.port_stats`; when two ports crossed
  exactly the same transfers the finding says it is ambiguous, unless one port's error
  counter settles it).
* **exposed-communication**: communication not hidden behind computation takes a large share
  of the device time.
* **host-bound**: devices wait for the host to launch work (HTA's host-wait idle).
* **load-imbalance**: one rank is the slowest in more steps (or layers) than chance allows
  (binomial over every step, adjusted for the ranks) and the median step's imbalance
  (``max/mean − 1``) clears the threshold.
* **collective-mismatch**: members matched as one collective disagree: different sizes for
  an operation where every member passes the same, or (matched by order) ranks that
  recorded different numbers of one operation — a desync, or calls that are not one
  collective.

Every cross-rank verdict (straggler, throttle, imbalance) rests on a test against chance at
``alpha`` (family-wise, see :mod:`otel_ext.analysis.significance`) and an effect size; below
either it is not a finding, and the report shows the closest candidate in its table.

The rules live in one module per subject, each a function from typed evidence
(:mod:`otel_ext.analysis.findings.evidence`) to :class:`~otel_ext.analysis.findings.finding.Finding`
objects: slow ranks (:mod:`~otel_ext.analysis.findings.slow_ranks`, on the verdicts of
:mod:`~otel_ext.analysis.findings.verdicts`), slow transfers
(:mod:`~otel_ext.analysis.findings.network`), mismatches and symptoms
(:mod:`~otel_ext.analysis.findings.symptoms`); :func:`build_findings` runs them in that order
and hands their findings to the ranking step (:mod:`otel_ext.analysis.findings.ranking`:
root causes before the symptoms they produce, each group by ``impact_ns``). Each rule's module
says how its impact is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.stragglers import StragglerReport
from otel_ext.analysis.findings._context import RuleContext
from otel_ext.analysis.findings.evidence import (
    IdleRow,
    ImbalanceReport,
    LinkEvidence,
    OverlapEvidence,
    PathRow,
    PortRow,
    TemporalRow,
    UnpairedRow,
)
from otel_ext.analysis.findings.finding import CAUSE_KINDS, Finding, Thresholds
from otel_ext.analysis.findings.network import (
    network_path_findings,
    slow_link_findings,
    slow_nic_findings,
    unpaired_transfer_findings,
)
from otel_ext.analysis.findings.ranking import rank_findings
from otel_ext.analysis.findings.slow_ranks import clock_drop_findings, slow_rank_findings
from otel_ext.analysis.findings.symptoms import (
    collective_mismatch_findings,
    exposed_communication_findings,
    host_bound_findings,
    load_imbalance_findings,
)
from otel_ext.analysis.findings.verdicts import straggler_verdicts
from otel_ext.analysis.loaders.metrics import MetricPoints

# CAUSE_KINDS, Finding, Thresholds, straggler_verdicts and the network rules are importable from
# here as before this module was split (the engine, the hang pass and tests import them so)
__all__ = [
    "CAUSE_KINDS",
    "Finding",
    "Thresholds",
    "build_findings",
    "network_path_findings",
    "straggler_verdicts",
    "unpaired_transfer_findings",
]


def build_findings(
    *,
    match: CollectiveMatch,
    stragglers: StragglerReport,
    links: Sequence[LinkEvidence],
    ports: Sequence[PortRow] = (),
    coverage: dict[str, float] | None = None,
    metrics: MetricPoints | None = None,
    overlap: Sequence[OverlapEvidence] = (),
    temporal: Sequence[TemporalRow] = (),
    idle: Sequence[IdleRow] = (),
    imbalance: ImbalanceReport | None = None,
    run_ns: int = 0,
    rank_names: dict[int, tuple[str, str]] | None = None,
    thresholds: Thresholds | None = None,
    run_ns_of_rank: dict[int, int] | None = None,
    run_of_rank: dict[int, int] | None = None,
    paths: Sequence[PathRow] = (),
    unpaired: Sequence[UnpairedRow] = (),
) -> list[dict[str, Any]]:
    """Turn the analyses' outputs into ranked findings.

    Args:
        match: collectives matched across ranks (aligned).
        stragglers: :func:`~otel_ext.analysis.cross.stragglers.find_stragglers`'s report.
        links: :func:`~otel_ext.analysis.cross.link_stats.link_stats`'s rows (a chip link's
            ``group``, when set, is the collective group its transfers served).
        ports: :func:`~otel_ext.analysis.cross.link_stats.port_stats`'s rows.
        coverage: per collective group, the share of its collectives traced
            (:func:`~otel_ext.analysis.cross.collective_match.sampled_fraction`): costs measured on
            traced collectives are divided by it to estimate the whole run's.
        metrics: the loaded metric points (for counter evidence), or None.
        overlap, temporal, idle: part A's per-rank rows as dicts.
        imbalance: :func:`~otel_ext.analysis.cross.imbalance.load_imbalance`'s output.
        run_ns: the run's length (for ``impact_pct``).
        run_ns_of_rank: the length of each rank's run: a finding about one rank is rated
            against its own run when the input holds several (never above 100 %).
        run_of_rank: each rank's run: ranks sharing a verdict are one finding per run.
        rank_names: rank -> (host, device) names.
        thresholds: where numbers become findings.
        paths: :func:`~otel_ext.analysis.cross.network_paths.path_stats`'s rows (as dicts).
        unpaired: :func:`~otel_ext.analysis.cross.network_paths.unpaired_transfer_stats`'s rows.

    Returns:
        The findings' JSON objects, ranked (:mod:`otel_ext.analysis.findings.ranking`).

    >>> from otel_ext.analysis.cross.collective_match import match_collectives
    >>> from otel_ext.analysis.cross.stragglers import find_stragglers
    >>> from otel_ext.analysis.table import EventTable
    >>> t = EventTable.empty()
    >>> build_findings(match=match_collectives(t), stragglers=find_stragglers(
    ...     t, match_collectives(t)), links=[])
    []
    """
    th = thresholds or Thresholds()
    have_metrics = metrics is not None and metrics.total > 0  # some may be left out
    ctx = RuleContext(names=rank_names or {}, run_ns=run_ns, thresholds=th, coverage=coverage,
                      metrics=metrics if have_metrics else None)  # fmt: skip
    findings = slow_rank_findings(
        straggler_verdicts(stragglers, th, match),
        ctx,
        match=match,
        window_edges_ns=stragglers.window_edges_ns,
        compute_ns={int(t["rank"]): int(t.get("compute_ns", 0)) for t in temporal},
    )
    findings += clock_drop_findings(ctx, match, found={f.target for f in findings})
    findings += slow_link_findings(links, ctx, slow_rank_found=bool(findings))
    findings += slow_nic_findings(ports, ctx)
    findings += network_path_findings(paths, ctx.pct, ctx.metrics)
    findings += unpaired_transfer_findings(unpaired, ctx.pct, late_share=th.late_sender_share)
    findings += collective_mismatch_findings(match)
    findings += exposed_communication_findings(overlap, ctx)
    findings += host_bound_findings(idle, temporal, ctx)
    findings += load_imbalance_findings(imbalance, ctx)
    ranked = rank_findings(findings, th, pct=ctx.pct, run_of_rank=run_of_rank or {},
                           run_ns_of_rank=run_ns_of_rank or {})  # fmt: skip
    return [f.as_dict() for f in ranked]
