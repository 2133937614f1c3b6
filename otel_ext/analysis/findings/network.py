"""Rules for slow transfers: ``slow-link``, ``slow-nic``, ``slow-network-path`` and
``slow-transfers`` findings.

* **slow-link**: one chip-to-chip link's transfers are the slowest of the collectives they
  serve (same bytes, same moment) in most of them; impact: the time its collectives waited
  for it beyond their next-slowest link, over the traced share of its group's collectives.
* **slow-nic**: transfers through one host's network port run well below the port's expected
  rate, and that port explains the slow transfers better than any other; when two ports
  crossed exactly the same transfers the finding says it is ambiguous, unless one port's
  error counter settles it. Impact: its slow transfers' time beyond the healthy rate.
* **slow-network-path**: a host pair's transfers (either direction) run well below a
  reference bandwidth.
* **slow-transfers**: a trace without peers shows slow receives that no late sender explains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NotRequired, TypedDict

from otel_ext.analysis.cross.counter_evidence import (
    CounterEvidence,
    correlate_counters,
    series_of,
)
from otel_ext.analysis.cross.nic_stats import path_nic_evidence
from otel_ext.analysis.findings._context import RuleContext, bandwidth, ms, p_text
from otel_ext.analysis.findings.evidence import LinkEvidence, PathRow, PortRow, UnpairedRow
from otel_ext.analysis.findings.finding import Finding
from otel_ext.analysis.loaders.metrics import MetricPoints
from otel_ext.semconv import metrics as M

__all__ = [
    "PortResolution",
    "SlowLinkEvidence",
    "network_path_findings",
    "slow_link_findings",
    "slow_nic_findings",
    "unpaired_transfer_findings",
]


class SlowLinkEvidence(TypedDict):
    """A slow link's numbers (its row of :func:`~otel_ext.analysis.cross.link_stats.link_stats`
    renamed as the finding shows them), and its counters when any were loaded."""

    link: str
    basis: str | None
    transfers: int
    collectives: int | None
    slowness: float | None
    slowest_share: float | None
    median_transfer_ns: float
    peer_median_transfer_ns: float | None
    median_bw: float | None
    peers: int | None
    traced_wait_ns: int
    sampled_fraction: float
    counters: NotRequired[CounterEvidence]


def _slow_link_finding(s: LinkEvidence, ctx: RuleContext, *, slow_rank_found: bool) -> Finding:
    """One slow chip-to-chip link's finding, with its counters when any were loaded."""
    link = s["link"]
    frac = ctx.covered(s.get("group"))
    extra = s.get("wait_ns", 0) / frac
    evidence: SlowLinkEvidence = {
        "link": link,
        "basis": s.get("basis"),
        "transfers": s["transfers"],
        "collectives": s.get("collectives"),
        "slowness": s["slowness"],
        "slowest_share": s.get("slowest_share"),
        "median_transfer_ns": s["median_ns"],
        "peer_median_transfer_ns": s["peer_median_ns"],
        "median_bw": s["median_bw"],
        "peers": s.get("peers"),
        "traced_wait_ns": s.get("wait_ns", 0),
        "sampled_fraction": frac,
    }
    summary = (
        f"link {link} is {s['slowness']:.2f}x slower than the other links of the same "
        f"all-reduces (same bytes, same moment) and finished last in "
        f"{100 * (s.get('slowest_share') or 0):.0f}% of {s.get('collectives')}; its "
        f"collectives waited {ms(extra)} for it"
        + ("" if slow_rank_found else "; no rank computes slowly")
    )
    if ctx.metrics is not None:
        evidence["counters"] = correlate_counters(ctx.metrics, link)
    return Finding("slow-link", link, int(extra), ctx.pct(extra), summary, {**evidence})


def slow_link_findings(
    links: Sequence[LinkEvidence], ctx: RuleContext, *, slow_rank_found: bool
) -> list[Finding]:
    """A ``slow-link`` finding per slow chip-to-chip link (network ports: :func:`slow_nic_findings`).

    Args:
        links: :func:`~otel_ext.analysis.cross.link_stats.link_stats`'s rows (a chip link's
            ``group``, when set, is the collective group its transfers served).
        ctx: the run's facts.
        slow_rank_found: whether a slow rank was found (else the summary says none was).
    """
    return [
        _slow_link_finding(s, ctx, slow_rank_found=slow_rank_found)
        for s in links
        if s["kind"] == "chip" and s.get("slow")
    ]


def _port_errors(metrics: MetricPoints, host: str) -> float:
    """Errors a host's network ports counted over the run (``hw.errors`` on its NIC links)."""
    total = 0.0
    for link in metrics.strings.get("link", []):
        if link.split("/", 1)[0] != host or "nic" not in link.rsplit("/", 1)[-1]:
            continue
        _, v = series_of(metrics, M.METRIC_HW_ERRORS, "link", link)
        if len(v) >= 2:
            total += max(0.0, float(v[-1] - v[0]))
    return total


class PortResolution(TypedDict):
    """How an ambiguous port verdict was settled: by which counter, and each port's count."""

    by: str
    errors: dict[str, float]


def _resolve_port(p: PortRow, metrics: MetricPoints | None) -> tuple[str, PortResolution | None]:
    """The port a slow-transfer verdict names: its own, or, when the transfers cannot tell the
    ports apart, the one candidate that counted errors (with how it was resolved)."""
    if not p["ambiguous"] or metrics is None:
        return p["host"], None
    errs = {c: _port_errors(metrics, c) for c in p["candidates"]}
    worst = max(errs, key=lambda c: errs[c])
    if errs[worst] > 0 and sum(1 for v in errs.values() if v > 0) == 1:
        return worst, PortResolution(by=M.METRIC_HW_ERRORS, errors=errs)
    return p["host"], None


def _slow_nic_finding(p: PortRow, ctx: RuleContext) -> Finding:
    """One implicated network port's finding, with its counters when any were loaded."""
    target, resolved = _resolve_port(p, ctx.metrics)
    ambiguous = p["ambiguous"] and resolved is None
    evidence = {
        "port": target,
        "transfers": p["transfers"],
        "slow_transfers": p["slow_transfers"],
        "slow_share": p["slow_share"],
        "median_bw": p["median_bw"],
        "reference_bw": p["reference_bw"],
        "reference": p["reference"],
        "slowness": p["slowness"],
        "healthy_bw": p["healthy_bw"],
        "extra_transfer_ns": p["extra_ns"],
        "partners": p["partners"],
        "candidates": p["candidates"],
        "ambiguous": ambiguous,
    }
    if resolved is not None:
        evidence["resolved"] = resolved
    also = [c for c in p["candidates"] if c != target] if ambiguous else []
    summary = (
        f"{target}'s network port moves data at {(p['median_bw'] or 0) / 1e9:.2f} GB/s, "
        f"{p['slowness']:.1f}x below the {p['reference_bw'] / 1e9:.2f} GB/s expected "
        f"({p['reference']}); {p['slow_transfers']} of its {p['transfers']} transfers slow, "
        f"{ms(p['extra_ns'])} extra transfer time"
        + (
            f"; every slow transfer also crossed {', '.join(also)}'s port, which the "
            "telemetry cannot tell apart from this one"
            if also
            else ""
        )
    )
    if ctx.metrics is not None:
        evidence["counters"] = correlate_counters(ctx.metrics, target)
    extra = p["extra_ns"]
    return Finding("slow-nic", target, extra, ctx.pct(extra), summary, evidence)


def slow_nic_findings(ports: Sequence[PortRow], ctx: RuleContext) -> list[Finding]:
    """A ``slow-nic`` finding per port :func:`~otel_ext.analysis.cross.link_stats.port_stats`
    chose (``chosen``): the port that explains the slow transfers best."""
    return [_slow_nic_finding(p, ctx) for p in ports if p.get("chosen")]


def _path_finding(
    a: str, b: str, rows: list[PathRow], pct: Callable[[float], float], metrics: MetricPoints | None
) -> Finding:
    """One host pair's finding: its slow directions, the larger one's extra time."""
    target = rows[0]["path"] if len(rows) == 1 else f"{a}<->{b}"
    # the two directions' transfers run at the same time: the larger one's extra time
    extra = max(int(r["extra_ns"]) for r in rows)
    parts = [
        f"{r['path']} transfers at {bandwidth(r['median_bw'])} (median of {r['transfers']}, "
        f"ranks {', '.join(r['rank_pairs'])}), {r['slowness']:.1f}x below the "
        f"{bandwidth(r['reference_bw'])} of {r['reference']}; {r['slower']} of {r['transfers']} "
        f"more than {r['threshold']:g}x below it (p={p_text(r['p'])})"
        for r in rows
    ]
    evidence = {
        "hosts": [a, b],
        "directions": [dict(r) for r in rows],
        "extra_transfer_ns": extra,
        "test": (
            "one-sided Fisher exact test: the share of its transfers more than the threshold "
            "below the reference against that share among the reference's own transfers "
            "(a sign test against a nominal rate); Bonferroni over the paths tested"
        ),
    }
    nic: list[str] = []
    if metrics is not None:  # both ends' port counters (node agent's net/ib sources)
        ends = [path_nic_evidence(metrics, r["src_host"], r["dst_host"]) for r in rows]
        evidence["nic"] = ends
        nic = [e["summary"] for e in ends if e.get("ports")]
    summary = (
        "; ".join(parts)
        + f"; {ms(extra)} spent beyond the slowest rate that is not slow; the ranks "
        "waiting on these transfers are their victims, not stragglers"
        + (f"; ports: {'; '.join(nic)}" if nic else "")
    )
    return Finding("slow-network-path", target, extra, pct(extra), summary, evidence)


def network_path_findings(
    paths: Sequence[PathRow], pct: Callable[[float], float], metrics: MetricPoints | None = None
) -> list[Finding]:
    """One ``slow-network-path`` finding per host pair with a slow direction (both directions
    in one finding when both are slow), from :func:`~otel_ext.analysis.cross.network_paths.path_stats`.

    Args:
        paths: the host paths' rows (as dicts).
        pct: nanoseconds -> percent of the run.
        metrics: the loaded metric points (both ends' port counters), or None.

    >>> row = dict(path="hA->hB", src_host="hA", dst_host="hB", slow=True, transfers=12,
    ...     slower=12, p=2.9e-3, median_bw=12e6, reference_bw=1e9, slowness=83.3,
    ...     reference="the fastest within-host path", threshold=10.0, extra_ns=900_000_000, rank_pairs=["1->2"],
    ...     median_transfer_ns=87e6, bytes=12 << 20, inter_host=True)
    >>> f = network_path_findings([row], lambda ns: 0.0)[0]
    >>> f.kind, f.target
    ('slow-network-path', 'hA->hB')
    """
    by_pair: dict[tuple[str, str], list[PathRow]] = {}
    for p in paths:
        if p.get("slow"):
            a, b = sorted((p["src_host"], p["dst_host"]))
            by_pair.setdefault((a, b), []).append(p)
    return [_path_finding(a, b, rows, pct, metrics) for (a, b), rows in sorted(by_pair.items())]


def _say(rows: list[UnpairedRow], what: str) -> str:
    """One direction's slow calls: the ranks, and the least slow one's numbers."""
    ranks = ", ".join(
        f"rank {u['rank']} ({u['host']})" if u["host"] else f"rank {u['rank']}" for u in rows
    )
    worst = min(rows, key=lambda u: u["ratio"])
    return (
        f"{what} on {ranks} take {ms(worst['median_ns'])} or more (median), "
        f"{worst['ratio']:.0f}x the other ranks' {ms(worst['peer_median_ns'])} "
        f"({worst['slower']} of {worst['count']} slower, p={p_text(worst['p'])})"
    )


def _unpaired_why(sends: list[UnpairedRow], recvs: list[UnpairedRow]) -> str:
    """Why slow receives are slow transfers: both ends slow, or no sender was late."""
    if sends:
        return (
            f"{_say(sends, 'sends')}; {_say(recvs, 'receives')}: both ends of these transfers "
            "are slow, so the path between them is, not a late peer"
        )
    shares = ", ".join(f"{u.get('late_sender_share'):.0%}" for u in recvs)
    return (
        f"{_say(recvs, 'receives')}; another rank called a send in the second half of "
        f"{shares} of them, so no sender was late: the transfers into these ranks are "
        "slow, not a peer"
    )


def unpaired_transfer_findings(
    unpaired: Sequence[UnpairedRow], pct: Callable[[float], float], *, late_share: float = 0.25
) -> list[Finding]:
    """A ``slow-transfers`` finding when a trace without peers shows slow receives on some
    ranks and either slow sends on others (both ends busy for the whole transfer) or, for
    every rank with slow receives, at most ``late_share`` of them with another rank calling a
    send in their second half (no late sender): the transfers themselves (a network path into
    those ranks) are slow, not a peer. Slow receives that late senders explain are no finding.

    >>> rows = [dict(rank=1, host="hA", direction="send", slow=True, count=12, median_ns=8e7,
    ...              peer_median_ns=6e5, ratio=133.0, slower=12, p=1e-3),
    ...         dict(rank=2, host="hB", direction="recv", slow=True, count=12, median_ns=8e7,
    ...              peer_median_ns=6e5, ratio=133.0, slower=12, p=1e-3)]
    >>> f = unpaired_transfer_findings(rows, lambda ns: 0.0)[0]
    >>> f.kind, f.target
    ('slow-transfers', 'hA->hB')
    >>> late = [dict(rows[1], late_sender_share=0.9)]  # each slow receive had a late sender
    >>> unpaired_transfer_findings(late, lambda ns: 0.0)
    []
    """
    sends = [u for u in unpaired if u.get("slow") and u["direction"] == "send"]
    recvs = [u for u in unpaired if u.get("slow") and u["direction"] == "recv"]
    unexplained = [
        u for u in recvs if (s := u.get("late_sender_share")) is not None and s <= late_share
    ]
    if not recvs or not (sends or len(unexplained) == len(recvs)):
        return []
    src = sorted({u["host"] or f"rank{u['rank']}" for u in sends}) or ["*"]
    dst = sorted({u["host"] or f"rank{u['rank']}" for u in recvs})
    target = f"{','.join(src)}->{','.join(dst)}"
    # the receiving ranks wait at the same time: the largest one's extra time
    extra = int(max((u["median_ns"] - u["peer_median_ns"]) * u["count"] for u in recvs))
    summary = (
        _unpaired_why(sends, recvs) + "; the trace names no peers, so the path is not named exactly"
    )
    evidence = {
        "peers_known": False,
        "sends": [dict(u) for u in sends],
        "receives": [dict(u) for u in recvs],
        "late_sender_share_max": late_share,
        "extra_transfer_ns": extra,
    }
    return [Finding("slow-transfers", target, extra, pct(extra), summary, evidence)]
