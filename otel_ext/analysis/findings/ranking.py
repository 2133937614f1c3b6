"""Ranking: the rules' findings grouped, rated and ordered, most important first.

Three steps, after every rule has run (:func:`rank_findings`):

1. **one per pattern** (:func:`one_per_pattern`): findings of one kind are kept together, in
   the order their kind (and run) first appears; ranks of one run sharing a grouped verdict
   (``host-bound``) become one finding naming the spread (min/median/max) and the devices.
   Separate captures are never one pattern.
2. **rated** (:func:`rate_against_own_run`): a finding about one rank is rated against that
   rank's own run when the input holds several; never above 100 %.
3. **ordered** (:func:`rank_key`): root causes (straggler, throttle, slow-link, slow-nic, ...)
   before the symptoms they produce (exposed communication, imbalance, idle), each group by
   ``impact_ns``; a cause with an impact under ``min_cause_pct`` ranks with the symptoms unless
   its counters show it directly; a collective mismatch (no impact to rate) is a fault itself.

>>> a = Finding("host-bound", "h0", 5, 0.0, "h0/c0 is idle ...", {"rank": 0, "idle_pct": 40.0,
...             "host_wait_share": 1.0}, rank=0, devices=("h0/c0",))
>>> b = Finding("host-bound", "h0", 9, 0.0, "h0/c1 is idle ...", {"rank": 1, "idle_pct": 50.0,
...             "host_wait_share": 1.0}, rank=1, devices=("h0/c1",))
>>> (f,) = one_per_pattern([a, b], lambda ns: 0.0, {})
>>> f.target, f.impact_ns, f.summary.split(":")[0]
('h0', 9, '2 ranks are host-bound (h0/c0, h0/c1)')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from otel_ext._arrays import median
from otel_ext.analysis.findings._context import pct_text
from otel_ext.analysis.findings.finding import CAUSE_KINDS, Finding, Thresholds

__all__ = ["GROUPED_KINDS", "one_per_pattern", "rank_findings", "rank_key", "rate_against_own_run"]

#: kinds whose findings on several ranks are one pattern: one finding, with the spread
GROUPED_KINDS = ("host-bound",)


def _pattern_of(f: Finding, run_of_rank: dict[int, int]) -> tuple[str, int]:
    """A finding's pattern: its kind and the run of the rank it is about (0 for none)."""
    return f.kind, run_of_rank.get(f.rank, 0) if f.rank is not None else 0


def _host_bound_group(same: list[Finding], pct: Callable[[float], float]) -> Finding:
    """Ranks sharing the host-bound verdict as one finding: the spread of their idle and of
    its share waiting for the host, the devices, and the worst member's impact (ranks run in
    parallel: their idle is not additive), rated against that member's run."""
    idle = [float(f.evidence.get("idle_pct", 0.0)) for f in same]
    share = [float(f.evidence.get("host_wait_share", 0.0)) for f in same]
    worst = max(same, key=lambda f: f.impact_ns)
    targets = sorted({f.target for f in same})
    devices = [d for f in same for d in f.devices]
    where = targets[0] if len(targets) == 1 else f"{len(same)} ranks"
    summary = (
        f"{len(same)} ranks are host-bound ({', '.join(devices[:8])}"
        + (", ..." if len(devices) > 8 else "")
        + f"): idle {min(idle):.1f}–{max(idle):.1f}% of their kernel windows (median "
        f"{float(median(idle)):.1f}%), "
        + ("all" if min(share) >= 1.0 else f"at least {pct_text(100 * min(share), 0)}")
        + " of it waiting for the host to launch work"
    )
    evidence = {
        "rank": worst.rank,  # the worst member: the impact is its
        "ranks": [f.rank for f in same],
        "targets": targets,
        "idle_pct_min": min(idle),
        "idle_pct_median": float(median(idle)),
        "idle_pct_max": max(idle),
        "host_wait_share_min": round(min(share), 6),
        "per_rank": [f.evidence for f in same],
    }
    return Finding(same[0].kind, where, worst.impact_ns, pct(worst.impact_ns), summary,
                   evidence, rank=worst.rank, devices=tuple(devices))  # fmt: skip


def one_per_pattern(
    findings: Sequence[Finding], pct: Callable[[float], float], run_of_rank: dict[int, int]
) -> list[Finding]:
    """Findings kept together per pattern (kind and run), in the order patterns first appear;
    a grouped kind's (:data:`GROUPED_KINDS`) several findings of one run become one."""
    out: list[Finding] = []
    for key in dict.fromkeys(_pattern_of(f, run_of_rank) for f in findings):
        same = [f for f in findings if _pattern_of(f, run_of_rank) == key]
        if key[0] not in GROUPED_KINDS or len(same) < 2:
            out.extend(same)
        else:
            out.append(_host_bound_group(same, pct))
    return out


def rate_against_own_run(findings: Sequence[Finding], run_ns_of_rank: dict[int, int]) -> None:
    """Rate each finding about one rank against that rank's run (in place); never above 100 %."""
    for f in findings:
        own = run_ns_of_rank.get(f.rank) if f.rank is not None else None
        if own:
            f.impact_pct = 100.0 * f.impact_ns / own
        f.impact_pct = min(f.impact_pct, 100.0)


def rank_key(f: Finding, th: Thresholds) -> tuple[int, float]:
    """Causes first (tier 0), then symptoms (tier 1); each tier by impact, largest first."""
    cause = f.kind in CAUSE_KINDS and (f.impact_pct >= th.min_cause_pct or f.counter_backed)
    cause = cause or f.kind == "collective-mismatch"  # no impact to rate: a fault itself
    return (0 if cause else 1, -f.impact_ns)


def rank_findings(
    findings: Sequence[Finding],
    th: Thresholds,
    *,
    pct: Callable[[float], float],
    run_of_rank: dict[int, int],
    run_ns_of_rank: dict[int, int],
) -> list[Finding]:
    """The three steps (module docstring): grouped, rated, ordered (a stable sort)."""
    ranked = one_per_pattern(findings, pct, run_of_rank)
    rate_against_own_run(ranked, run_ns_of_rank)
    ranked.sort(key=lambda f: rank_key(f, th))
    return ranked
