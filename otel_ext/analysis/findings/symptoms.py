"""Rules for a fault in the collectives and for the symptoms slow parts produce:
``collective-mismatch``, ``exposed-communication``, ``host-bound`` and ``load-imbalance``.

* **collective-mismatch**: members matched as one collective disagree: different sizes for
  an operation where every member passes the same, or (matched by order) ranks that recorded
  different numbers of one operation — a desync, or calls that are not one collective.
* **exposed-communication**: communication not hidden behind computation takes a large share
  of the device time.
* **host-bound**: devices wait for the host to launch work (HTA's host-wait idle); one
  finding per rank here, one per run once ranked (:mod:`otel_ext.analysis.findings.ranking`).
* **load-imbalance**: one rank is the slowest in more steps (or layers) than chance allows
  (binomial over every step, adjusted for the ranks) and the median step's imbalance
  (``max/mean − 1``) clears the threshold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.findings._context import RuleContext, p_text, pct_text
from otel_ext.analysis.findings.evidence import (
    IdleRow,
    ImbalanceEvidence,
    ImbalanceReport,
    ImbalanceTest,
    OverlapEvidence,
    TemporalRow,
)
from otel_ext.analysis.findings.finding import Finding

__all__ = [
    "collective_mismatch_findings",
    "exposed_communication_findings",
    "host_bound_findings",
    "load_imbalance_findings",
]


def collective_mismatch_findings(match: CollectiveMatch) -> list[Finding]:
    """One ``collective-mismatch`` finding when matched collectives' members disagree (no
    impact to rate: a fault itself)."""
    mism = match.mismatches()
    if not mism:
        return []
    by_kind = {k: [m for m in mism if m.get("kind") == k] for k in ("bytes", "count")}
    parts = []
    if by_kind["bytes"]:
        m0 = by_kind["bytes"][0]
        parts.append(
            f"{len(by_kind['bytes'])} collectives whose members pass different sizes "
            f"(e.g. {m0.get('op')} {m0.get('key')}: {m0.get('bytes_min')} vs "
            f"{m0.get('bytes_max')} bytes)"
        )
    if by_kind["count"]:
        m0 = by_kind["count"][0]
        parts.append(
            f"ranks with different numbers of {m0['op']} calls (typical "
            f"{m0['typical_calls']}; "
            + ", ".join(f"rank {r}: {c}" for r, c in m0["ranks"].items())
            + ")"
        )
    summary = (
        "collectives matched across ranks disagree: "
        + "; ".join(parts)
        + f"; matched by {match.source}: a desync, or calls that are not one collective"
    )
    target = str(mism[0].get("op", "collectives"))
    evidence = {"mismatches": mism[:40], "matched_by": match.source}
    return [Finding("collective-mismatch", target, 0, 0.0, summary, evidence)]


def exposed_communication_findings(
    overlap: Sequence[OverlapEvidence], ctx: RuleContext
) -> list[Finding]:
    """One ``exposed-communication`` finding when the ranks' mean exposed share of the device
    time clears ``exposed_comm_pct``; its target is the rank with the most."""
    rows = [o for o in overlap if o.get("exposed_comm_ns") is not None]
    if not rows:
        return []
    worst = max(rows, key=lambda o: o.get("exposed_comm_ns") or 0)
    mean_pct = float(np.mean([o.get("exposed_comm_pct_of_window", 0.0) for o in rows]))
    if mean_pct < ctx.thresholds.exposed_comm_pct:
        return []
    exposed = float(np.mean([o.get("exposed_comm_ns") for o in rows]))
    device = ctx.device_of(int(worst["rank"]))
    summary = (
        f"communication not hidden by compute: {mean_pct:.1f}% of device time "
        f"on average; most on {device}"
    )
    per_rank = [
        {"rank": o["rank"], "exposed_comm_ns": o.get("exposed_comm_ns"),
         "overlap_pct": o.get("overlap_pct")}
        for o in rows
    ]  # fmt: skip
    evidence = {"mean_exposed_pct": round(mean_pct, 4), "per_rank": per_rank}
    return [
        Finding("exposed-communication", device, int(exposed), ctx.pct(exposed), summary, evidence)
    ]


def _host_bound_finding(t: TemporalRow, streams: list[IdleRow], ctx: RuleContext) -> Finding | None:
    """A rank's ``host-bound`` finding when it is idle ``host_wait_pct`` of its kernel window
    and its busiest stream spent at least half of its idle waiting for the host."""
    rank = int(t["rank"])
    if not streams or not t.get("kernel_window_ns"):
        return None
    busiest = min(streams, key=lambda row: row.get("idle_ns", 0))
    host_share = busiest.get("host_wait_pct", 0.0) / 100.0
    idle_pct = float(t.get("idle_pct", 0.0))
    if idle_pct < ctx.thresholds.host_wait_pct or host_share < 0.5:
        return None
    hw = int(t.get("idle_ns", 0) * host_share)
    host, _ = ctx.names.get(rank, ("", ""))
    device = ctx.device_of(rank)
    summary = (
        f"{device} is idle {pct_text(idle_pct)} of its kernel window, "
        f"{pct_text(100 * host_share, 0)} of it waiting for the host to launch work"
    )
    evidence = {
        "rank": rank,
        "idle_pct": idle_pct,
        "host_wait_share": round(host_share, 6),  # as precise as the summary
        "stream": busiest.get("stream"),
    }
    return Finding("host-bound", host or device, hw, ctx.pct(hw), summary, evidence,
                   rank=rank, devices=(device,))  # fmt: skip


def host_bound_findings(
    idle: Sequence[IdleRow], temporal: Sequence[TemporalRow], ctx: RuleContext
) -> list[Finding]:
    """A ``host-bound`` finding per rank whose device idle (its kernel window) its busiest
    stream spent waiting for the host to launch work, in ``temporal``'s order."""
    if not idle or not temporal:
        return []
    idle_of: dict[int, list[IdleRow]] = {}
    for row in idle:  # one pass: a rank's streams looked up, not searched for per rank
        idle_of.setdefault(int(row["rank"]), []).append(row)
    found = (_host_bound_finding(t, idle_of.get(int(t["rank"]), []), ctx) for t in temporal)
    return [f for f in found if f is not None]


def _imbalance_finding(
    what: str, test: ImbalanceTest, rows: list[ImbalanceEvidence], ctx: RuleContext
) -> Finding:
    """The finding of a persistent slowest rank: the listed row is its worst step (or layer)."""
    mine = [x for x in rows if x["max_rank"] == test["rank"]] or rows
    row = max(mine, key=lambda x: x["imbalance"])
    extra = row["max_ns"] - row["mean_ns"]
    device = ctx.device_of(test["rank"])
    summary = (
        f"{device} is the slowest rank in {test['times_slowest']} of "
        f"{test['rows']} {what}s (chance {test['expected']:.1f}, p={p_text(test['p'])}); "
        f"median {what} imbalance {100 * test['median_imbalance']:.1f}%, worst "
        f"{row['name']}: {100 * row['imbalance']:.1f}% longer than the mean"
    )
    evidence = {
        what: row["name"],
        "imbalance": row["imbalance"],
        "max_ns": row["max_ns"],
        "mean_ns": row["mean_ns"],
        "times_slowest": test["times_slowest"],
        f"{what}s": test["rows"],
        "expected": test["expected"],
        "p": test["p"],
        "median_imbalance": test["median_imbalance"],
    }
    return Finding("load-imbalance", device, int(extra), ctx.pct(extra), summary, evidence)


def load_imbalance_findings(imbalance: ImbalanceReport | None, ctx: RuleContext) -> list[Finding]:
    """A ``load-imbalance`` finding for steps and one for layers where a persistent slowest
    rank (significant against chance) has a typical step imbalanced beyond the threshold.

    Args:
        imbalance: :func:`~otel_ext.analysis.cross.imbalance.load_imbalance`'s output.
        ctx: the run's facts.
    """
    if not imbalance:
        return []
    th = ctx.thresholds
    out = []
    tested = (
        ("step", imbalance.get("steps_test"), imbalance.get("steps")),
        ("layer", imbalance.get("layers_test"), imbalance.get("layers")),
    )
    for what, test, all_rows in tested:
        rows = [x for x in all_rows or [] if test is not None and x["group"] == test["group"]]
        if not test or not rows:
            continue
        if test["p"] > th.alpha or test["median_imbalance"] < th.imbalance:
            continue
        out.append(_imbalance_finding(what, test, rows, ctx))
    return out
