"""Rules for slow ranks: ``straggler`` and ``throttle`` findings.

A rank with a straggler verdict (:mod:`otel_ext.analysis.findings.verdicts`) is a
*straggler* when it runs slow all run, a *throttle* when it slows part-way; when counters
were recorded its clock frequency decides (a drop is a throttle). A chip whose clock drops
part-way while its peers' does not is a throttle finding even when the traces show it little
(it may have had little work left): :func:`clock_drop_findings`.

Impact: the run time saved if the rank arrived at the median pace (see
:func:`otel_ext.analysis.cross.critical_path.straggler_saving`), divided by the traced share
of its group's collectives (sampled traces); a rank that joined no collective costs its extra
compute time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NotRequired, TypedDict

from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.counter_evidence import CounterEvidence, correlate_counters
from otel_ext.analysis.cross.critical_path import straggler_saving
from otel_ext.analysis.findings._context import RuleContext, group_of, ms, p_text
from otel_ext.analysis.findings.finding import Finding, Thresholds
from otel_ext.analysis.findings.verdicts import StragglerVerdict
from otel_ext.semconv import metrics as M

__all__ = [
    "ClockEvidence",
    "RankEvidence",
    "clock_drop_findings",
    "clock_evidence",
    "slow_rank_findings",
]


class ClockEvidence(TypedDict):
    """What a chip's clock-frequency (and temperature) counters did, as a finding shows it."""

    clock_before_hz: float
    clock_after_hz: float
    clock_change_ns: int
    clock_ratio: float
    peer_clock_hz: float | None
    temperature_before_c: NotRequired[float]
    temperature_after_c: NotRequired[float]
    peer_temperature_c: NotRequired[float | None]


def clock_evidence(counters: CounterEvidence, th: Thresholds) -> tuple[bool, ClockEvidence | None]:
    """Whether a chip's counters show a throttle (its clock after the change point at most
    ``throttle_freq_drop`` of before), and the numbers; None without a clock change."""
    s = counters["series"].get(M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY)
    if not s or "before" not in s or not s["before"]:
        return False, None
    ratio = s["after"] / s["before"]
    ev = ClockEvidence(
        clock_before_hz=s["before"],
        clock_after_hz=s["after"],
        clock_change_ns=s["change_ns"],
        clock_ratio=round(ratio, 4),
        peer_clock_hz=s.get("peer_median"),
    )
    temp = counters["series"].get(M.METRIC_HW_TEMPERATURE)
    if temp and "before" in temp:
        ev["temperature_before_c"] = temp["before"]
        ev["temperature_after_c"] = temp["after"]
        ev["peer_temperature_c"] = temp.get("peer_median")
    return ratio <= th.throttle_freq_drop, ev


def _saving(v: StragglerVerdict, traced: int, frac: float, compute_ns: int) -> int:
    """The run time the rank costs: the others' saved waiting over the traced share; with no
    collectives to wait at, the extra compute time itself."""
    saved = int(traced / frac)
    rel = v["relative_compute"]
    if saved == 0 and v["slow_compute"] and rel > 1.0:
        saved = int(compute_ns * (1.0 - 1.0 / rel))
    return saved


class RankEvidence(TypedDict):
    """A slow rank's verdict numbers, first in its finding's evidence (then its counters,
    its onset and its site test)."""

    rank: int
    compute_ratio: float | None
    relative_compute: float
    compute_ratio_by_window: Sequence[float | None]
    compute_slower: int
    compute_faster: int
    compute_p: float
    late_ns: int
    blame_ns: int
    blame_share: float
    waiting_share: float
    last_arrivals: int
    collectives: int
    expected_last: float
    p_last: float
    median_lateness_ns: float
    lateness_effect: float | None
    persistence: float
    score: float
    traced_saving_ns: int
    sampled_fraction: float
    test: str  # what carries the verdict: "late", "part-way" or "compute"


def _rank_evidence(v: StragglerVerdict, traced: int, frac: float) -> RankEvidence:
    """The verdict's numbers, as the finding's evidence lists them."""
    r = v["row"]
    test = "late" if v["late"] else ("part-way" if v["onset"] is not None else "compute")
    return {
        "rank": int(r["rank"]),
        "compute_ratio": r["compute_ratio"],
        "relative_compute": round(v["relative_compute"], 4),
        "compute_ratio_by_window": r["compute_ratio_by_window"],
        "compute_slower": r.get("compute_slower", 0),
        "compute_faster": r.get("compute_faster", 0),
        "compute_p": r.get("compute_p", 1.0),
        "late_ns": r["late_ns"],
        "blame_ns": r["blame_ns"],
        "blame_share": round(v["blame_share"], 4),
        "waiting_share": round(v["waiting_share"], 4),
        "last_arrivals": r["last_arrivals"],
        "collectives": r.get("collectives", 0),
        "expected_last": r.get("expected_last", 0.0),
        "p_last": r.get("p_last", 1.0),
        "median_lateness_ns": r.get("median_lateness_ns", 0.0),
        "lateness_effect": r.get("lateness_effect"),
        "persistence": round(r["persistence"], 4),
        "score": round(r["score"], 4),
        "traced_saving_ns": int(traced),
        "sampled_fraction": frac,
        "test": test,
    }


def _by_site(v: StragglerVerdict, th: Thresholds) -> bool:
    """Whether the rank's lateness rests on its site test (more significant than its last
    arrivals) rather than on its last arrivals."""
    r = v["row"]
    return (
        v["late"]
        and r.get("site_test") is not None
        and r.get("site_p", 1.0) <= min(th.alpha, r.get("p_last", 1.0))
    )


def _lateness_text(v: StragglerVerdict, by_site: bool) -> str:
    """How late the rank is: at its site (with its overall record), overall, or not at all."""
    r = v["row"]
    joined = r.get("collectives", 0)
    overall = (
        f"last at {r['last_arrivals']} of {joined} collectives (chance "
        f"{r.get('expected_last', 0.0):.1f}, p={p_text(r.get('p_last', 1.0))})"
    )
    site = r.get("site_test")
    if by_site and site is not None:
        nxt = site.get("next_lateness_ns")
        # "over all its collectives": "at all its collectives" read as "at every one"
        where = "over all its collectives" if site["site"] == "all" else f"at {site['site']}"
        p_site = site["p_adjusted"]  # set: the site test carries the verdict
        return (
            f"latest by its own doing {where}: last in {site['last']} of "
            f"{site['instances']} (order test p={p_text(p_site if p_site is not None else 1.0)}), median "
            f"{ms(site['median_lateness_ns'])} late"
            + (f" (next: rank {site.get('next_rank')}, {ms(nxt)})" if nxt is not None else "")
            + f"; {overall}"
        )
    return overall if joined else "joined no collective"


def _summary(
    kind: str, target: str, v: StragglerVerdict, clock: ClockEvidence | None, lateness: str
) -> str:
    """The finding's one line: why it is slow, how late, and what the others waited."""
    r = v["row"]
    waited = ms(r["blame_ns"])
    if kind == "throttle":
        why = (
            f"clock {clock['clock_before_hz'] / 1e9:.2f} -> "
            f"{clock['clock_after_hz'] / 1e9:.2f} GHz part-way"
            if clock is not None
            else "compute slowed part-way through the run"
        )
        return f"{target} throttled: {why}; {lateness}; the others waited {waited} for it"
    slower, faster = r.get("compute_slower", 0), r.get("compute_faster", 0)
    ratio = r["compute_ratio"]
    compute = (
        f"compute {ratio:.2f}x the same work elsewhere (slower in {slower} of "
        f"{slower + faster}, p={p_text(r.get('compute_p', 1.0))})"
        if ratio is not None
        else "no comparable compute"
    )
    return f"{target} is a straggler: {lateness}; {compute}; the others waited {waited}"


def _slow_rank_finding(
    v: StragglerVerdict,
    ctx: RuleContext,
    match: CollectiveMatch,
    edges: Sequence[int],
    compute_ns: int,
) -> Finding:
    """One slow rank's ``straggler`` or ``throttle`` finding."""
    th = ctx.thresholds
    rank = int(v["rank"])
    target = ctx.device_of(rank)
    traced = straggler_saving(match, rank)
    frac = ctx.covered(group_of(match, rank))
    saved = _saving(v, traced, frac, compute_ns)
    evidence = {**_rank_evidence(v, traced, frac)}
    throttled, clock = False, None
    if ctx.metrics is not None:
        counters = correlate_counters(ctx.metrics, target)
        throttled, clock = clock_evidence(counters, th)
        evidence.update(clock or {})
        evidence["counters"] = counters
    at = v["onset"]
    if at is not None and len(edges) > at:
        evidence["onset_ns"] = edges[at]
    if clock is not None:
        kind = "throttle" if throttled else "straggler"
    else:
        kind = "throttle" if at is not None else "straggler"
    r, by_site = v["row"], _by_site(v, th)
    evidence.update(site=r.get("site"), site_p=r.get("site_p", 1.0),
                    site_effect=r.get("site_effect"), site_test=r.get("site_test"),
                    sites=r.get("sites", []), basis="site" if by_site else "last-arrivals")  # fmt: skip
    # the waits are measured on the traced collectives; say so when a schedule sampled
    in_traced = f" in the traced {frac:.0%} of the run" if frac < 0.999 else ""
    summary = _summary(kind, target, v, clock, _lateness_text(v, by_site)) + in_traced
    return Finding(kind, target, saved, ctx.pct(saved), summary, evidence, rank=rank,
                   devices=(target,), counter_backed=clock is not None)  # fmt: skip


def slow_rank_findings(
    verdicts: Sequence[StragglerVerdict],
    ctx: RuleContext,
    *,
    match: CollectiveMatch,
    window_edges_ns: Sequence[int],
    compute_ns: dict[int, int],
) -> list[Finding]:
    """A ``straggler`` or ``throttle`` finding per straggler verdict.

    Args:
        verdicts: :func:`~otel_ext.analysis.findings.verdicts.straggler_verdicts`.
        ctx: the run's facts.
        match: collectives matched across ranks (aligned).
        window_edges_ns: the straggler windows' edges (a throttle's onset is one).
        compute_ns: each rank's compute time (the cost of a rank that waits at nothing).
    """
    return [
        _slow_rank_finding(v, ctx, match, window_edges_ns, compute_ns.get(int(v["rank"]), 0))
        for v in verdicts
    ]


def clock_drop_findings(
    ctx: RuleContext, match: CollectiveMatch, *, found: set[str]
) -> list[Finding]:
    """A ``throttle`` finding per chip (not already in ``found``) whose clock-frequency
    counter drops part-way while its peers' does not; none without counters."""
    if ctx.metrics is None:
        return []
    th = ctx.thresholds
    by_device = {dev: r for r, (_, dev) in ctx.names.items()}
    out = []
    for dev in ctx.metrics.strings.get("device", []):
        if not dev or dev in found or dev not in by_device:
            continue
        counters = correlate_counters(ctx.metrics, dev)
        throttled, fev = clock_evidence(counters, th)
        if fev is None or not throttled:
            continue
        peer = fev["peer_clock_hz"]
        if peer and fev["clock_after_hz"] >= th.throttle_freq_drop * peer:
            continue
        rank = by_device[dev]
        frac = ctx.covered(group_of(match, rank))
        saved = int(straggler_saving(match, rank) / frac)
        evidence = {"rank": rank, **fev, "sampled_fraction": frac, "counters": counters,
                    "direct_counter_evidence": True}  # fmt: skip
        summary = (
            f"{dev} throttled: clock {fev['clock_before_hz'] / 1e9:.2f} -> "
            f"{fev['clock_after_hz'] / 1e9:.2f} GHz part-way while its peers stayed at "
            f"{(peer or 0) / 1e9:.2f} GHz"
        )
        out.append(Finding("throttle", dev, saved, ctx.pct(saved), summary, evidence,
                           rank=rank, devices=(dev,), counter_backed=True))  # fmt: skip
    return out
