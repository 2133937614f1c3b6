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
* **slow-link**: transfers over one chip-to-chip link are slower than over the other links
  (bandwidth below its peers'), while no rank computes slowly; the link's counters are shown.
* **slow-nic**: transfers through one host's network port (inter-host, KV-cache, cross-host
  collectives) are slower than through the other hosts' ports.
* **exposed-communication**: communication not hidden behind computation takes a large share
  of the device time.
* **host-bound**: devices wait for the host to launch work (HTA's host-wait idle).
* **load-imbalance**: ranks do unequal work per step or per layer (``max/mean − 1``).

A chip whose clock-frequency counter drops part-way while its peers' does not is a throttle
finding even when the traces show it little (it may have had little work left).

Ranking: root causes (straggler, throttle, slow-link, slow-nic) before the symptoms they
produce (exposed communication, imbalance, idle), each group by ``impact_ns``; a cause with
an impact under ``min_cause_pct`` ranks with the symptoms unless counters show it directly.

Impact of a slow rank: the run time saved if it arrived at the median pace (see
:func:`otel_ext.analysis.critical_path.straggler_saving`); of a slow link or port: the time
its transfers took beyond the median link's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_ext.analysis.collectives import CollectiveMatch
from otel_ext.analysis.counters import correlate_counters
from otel_ext.analysis.critical_path import straggler_saving
from otel_ext.analysis.stragglers import StragglerReport
from semantic_conventions import metrics as M

__all__ = ["CAUSE_KINDS", "Finding", "Thresholds", "build_findings"]

CAUSE_KINDS = ("straggler", "throttle", "slow-link", "slow-nic")


@dataclass
class Thresholds:
    """Where a number becomes a finding (all documented in docs/analysis.md)."""

    slow_compute_ratio: float = 1.08  # a rank's compute this much slower than the median
    straggler_blame_share: float = 0.5  # or: this share of all waiting is for one rank
    straggler_score: float = 0.5
    throttle_freq_drop: float = 0.92  # frequency after / before the change point
    onset_ratio_early: float = 1.04  # compute ratio before a throttle's onset at most
    link_slowness: float = 1.3  # a link this much slower than the median link of its kind
    exposed_comm_pct: float = 10.0
    host_wait_pct: float = 20.0
    imbalance: float = 0.1
    min_cause_pct: float = 0.5  # below this impact a cause ranks with the symptoms


@dataclass
class Finding:
    kind: str
    target: str
    impact_ns: int
    impact_pct: float
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "impact_ns": int(self.impact_ns),
            "impact_pct": round(float(self.impact_pct), 4),
            "summary": self.summary,
            "evidence": self.evidence,
        }


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _freq_evidence(counters: dict[str, Any], th: Thresholds) -> tuple[bool, dict[str, Any]]:
    """Whether a chip's counters show a throttle, and the numbers."""
    s = counters.get("series", {}).get(M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY)
    if not s or "before" not in s or not s["before"]:
        return False, {}
    ratio = s["after"] / s["before"]
    ev = {
        "clock_before_hz": s["before"],
        "clock_after_hz": s["after"],
        "clock_change_ns": s["change_ns"],
        "clock_ratio": round(ratio, 4),
        "peer_clock_hz": s.get("peer_median"),
    }
    temp = counters["series"].get(M.METRIC_HW_TEMPERATURE)
    if temp and "before" in temp:
        ev["temperature_before_c"] = temp["before"]
        ev["temperature_after_c"] = temp["after"]
        ev["peer_temperature_c"] = temp.get("peer_median")
    return ratio <= th.throttle_freq_drop, ev


def _onset(by_window: Sequence[float | None], th: Thresholds) -> int | None:
    """Index of the first slow window after normal ones (a part-way slowdown), else None."""
    vals = [v for v in by_window if v is not None]
    if len(vals) < 3:
        return None
    idx = [i for i, v in enumerate(by_window) if v is not None]
    for k in range(1, len(vals)):
        early, late = vals[:k], vals[k:]
        if (
            max(early) <= th.onset_ratio_early
            and min(late) >= th.slow_compute_ratio
            and len(late) >= 1
        ):
            return idx[k]
    return None


def _slow_ranks(stragglers: StragglerReport, th: Thresholds) -> list[dict[str, Any]]:
    rows = stragglers.rows
    if len(rows) < 2:
        return []
    ratios = [r["compute_ratio"] for r in rows if r["compute_ratio"] is not None]
    med_ratio = float(np.median(ratios)) if ratios else 1.0
    total_blame = sum(r["blame_ns"] for r in rows)
    out = []
    for r in rows:
        wins = [v for v in r["compute_ratio_by_window"] if v is not None]
        slowdown = max(r["compute_ratio"] or 0.0, float(np.percentile(wins, 75)) if wins else 0.0)
        slow_compute = slowdown / max(med_ratio, 1e-9) >= th.slow_compute_ratio
        share = r["blame_ns"] / total_blame if total_blame else 0.0
        late = share >= th.straggler_blame_share and r["score"] >= th.straggler_score
        if slow_compute or late:
            out.append({**r, "slowdown": float(slowdown), "blame_share": share})
    # the slowest compute first; keep only ranks clearly apart from the rest
    out.sort(key=lambda x: (-x["slowdown"], -x["blame_share"]))
    return out


def build_findings(
    *,
    match: CollectiveMatch,
    stragglers: StragglerReport,
    links: list[dict[str, Any]],
    metrics: Any = None,
    overlap: Sequence[dict[str, Any]] = (),
    temporal: Sequence[dict[str, Any]] = (),
    idle: Sequence[dict[str, Any]] = (),
    imbalance: dict[str, Any] | None = None,
    run_ns: int = 0,
    rank_names: dict[int, tuple[str, str]] | None = None,
    thresholds: Thresholds | None = None,
) -> list[dict[str, Any]]:
    """Turn the analyses' outputs into ranked findings.

    Args:
        match: collectives matched across ranks (aligned).
        stragglers: :func:`~otel_ext.analysis.stragglers.find_stragglers`'s report.
        links: :func:`~otel_ext.analysis.collectives.link_stats`'s rows.
        metrics: the loaded metric points (for counter evidence), or None.
        overlap, temporal, idle: part A's per-rank rows as dicts.
        imbalance: :func:`~otel_ext.analysis.imbalance.load_imbalance`'s output.
        run_ns: the run's length (for ``impact_pct``).
        rank_names: rank -> (host, device) names.
        thresholds: where numbers become findings.

    Returns:
        Finding dicts, ranked (see the module docstring).

    >>> from otel_ext.analysis.collectives import match_collectives
    >>> from otel_ext.analysis.stragglers import find_stragglers
    >>> from otel_ext.analysis.table import EventTable
    >>> t = EventTable.empty()
    >>> build_findings(match=match_collectives(t), stragglers=find_stragglers(
    ...     t, match_collectives(t)), links=[])
    []
    """
    th = thresholds or Thresholds()
    names = rank_names or {}
    findings: list[Finding] = []

    def pct(ns: float) -> float:
        return 100.0 * ns / run_ns if run_ns > 0 else 0.0

    def device_of(rank: int) -> str:
        host, dev = names.get(rank, ("", ""))
        return dev or (f"{host}/rank{rank}" if host else f"rank{rank}")

    have_metrics = metrics is not None and len(metrics) > 0
    # ---- slow ranks: straggler or throttle -------------------------------------------
    n_inst = max(match.n_instances, 1)
    compute_ns = {int(t["rank"]): int(t.get("compute_ns", 0)) for t in temporal}
    for r in _slow_ranks(stragglers, th):
        rank = int(r["rank"])
        target = device_of(rank)
        saved = straggler_saving(match, rank)
        if saved == 0 and r["slowdown"] > 1.0:
            # no collectives to wait at: the extra compute time itself
            saved = int(compute_ns.get(rank, 0) * (1.0 - 1.0 / r["slowdown"]))
        evidence: dict[str, Any] = {
            "rank": rank,
            "compute_ratio": r["compute_ratio"],
            "compute_ratio_by_window": r["compute_ratio_by_window"],
            "late_ns": r["late_ns"],
            "blame_ns": r["blame_ns"],
            "blame_share": round(r["blame_share"], 4),
            "last_arrivals": r["last_arrivals"],
            "collectives": int(np.count_nonzero(match.member_rank == rank)),
            "persistence": round(r["persistence"], 4),
            "score": round(r["score"], 4),
        }
        throttled = False
        if have_metrics:
            counters = correlate_counters(metrics, target)
            throttled, fev = _freq_evidence(counters, th)
            evidence.update(fev)
            evidence["counters"] = counters
        onset = _onset(r["compute_ratio_by_window"], th)
        if onset is not None and len(stragglers.window_edges_ns) > onset:
            evidence["onset_ns"] = stragglers.window_edges_ns[onset]
        if have_metrics and evidence.get("clock_ratio") is not None:
            kind = "throttle" if throttled else "straggler"
        else:
            kind = "throttle" if onset is not None else "straggler"
        own = int(np.count_nonzero(match.member_rank == rank)) or n_inst
        last_pct = 100.0 * r["last_arrivals"] / own
        if kind == "throttle":
            why = (
                f"clock {evidence['clock_before_hz'] / 1e9:.2f} -> "
                f"{evidence['clock_after_hz'] / 1e9:.2f} GHz part-way"
                if "clock_before_hz" in evidence
                else "compute slowed part-way through the run"
            )
            summary = (
                f"{target} throttled: {why}; last at {last_pct:.0f}% of collectives; "
                f"the others waited {_ms(r['blame_ns'])} for it"
            )
        else:
            summary = (
                f"{target} is a straggler: compute {r['slowdown']:.2f}x the median rank, last "
                f"at {last_pct:.0f}% of collectives; the others waited {_ms(r['blame_ns'])}"
            )
        findings.append(Finding(kind, target, saved, pct(saved), summary, evidence))
    # ---- chips whose clock dropped while their peers' did not (counter evidence) --------
    if have_metrics:
        found = {f.target for f in findings}
        by_device = {dev: r for r, (_, dev) in names.items()}
        for dev in metrics.strings.get("device", []):
            if not dev or dev in found or dev not in by_device:
                continue
            counters = correlate_counters(metrics, dev)
            throttled, fev = _freq_evidence(counters, th)
            peer = fev.get("peer_clock_hz")
            if not throttled or (peer and fev["clock_after_hz"] >= th.throttle_freq_drop * peer):
                continue
            rank = by_device[dev]
            saved = straggler_saving(match, rank)
            evidence = {"rank": rank, **fev, "counters": counters}
            summary = (
                f"{dev} throttled: clock {fev['clock_before_hz'] / 1e9:.2f} -> "
                f"{fev['clock_after_hz'] / 1e9:.2f} GHz part-way while its peers stayed at "
                f"{(peer or 0) / 1e9:.2f} GHz"
            )
            f = Finding("throttle", dev, saved, pct(saved), summary, evidence)
            f.evidence["direct_counter_evidence"] = True
            findings.append(f)
    slow_rank_found = bool(findings)
    # ---- links and network ports -------------------------------------------------------
    for s in links:
        if s.get("slowness") is None or s["slowness"] < th.link_slowness:
            continue
        link = s["link"]
        extra = max(0.0, (s["median_ns"] - (s["peer_median_ns"] or 0)) * s["transfers"])
        evidence = {
            "link": link,
            "transfers": s["transfers"],
            "median_transfer_ns": s["median_ns"],
            "median_link_transfer_ns": s["peer_median_ns"],
            "median_bw": s["median_bw"],
            "slowness": s["slowness"],
        }
        if s["kind"] == "nic":
            kind, target = "slow-nic", s["host"] or link
            summary = (
                f"{target}'s network port ({link}) is {s['slowness']:.2f}x slower than the "
                f"other hosts' ports over {s['transfers']} transfers"
            )
        else:
            kind, target = "slow-link", link
            summary = (
                f"link {link} is {s['slowness']:.2f}x slower than the median link over "
                f"{s['transfers']} transfers"
                + ("" if slow_rank_found else "; no rank computes slowly")
            )
        if have_metrics:
            evidence["counters"] = correlate_counters(metrics, target)
        findings.append(Finding(kind, target, int(extra), pct(extra), summary, evidence))
    # ---- symptoms --------------------------------------------------------------------
    if overlap:
        rows = [o for o in overlap if o.get("exposed_comm_ns") is not None]
        if rows:
            worst = max(rows, key=lambda o: o["exposed_comm_ns"])
            mean_pct = float(np.mean([o.get("exposed_comm_pct_of_window", 0.0) for o in rows]))
            if mean_pct >= th.exposed_comm_pct:
                exposed = float(np.mean([o["exposed_comm_ns"] for o in rows]))
                findings.append(
                    Finding(
                        "exposed-communication",
                        device_of(int(worst["rank"])),
                        int(exposed),
                        pct(exposed),
                        f"communication not hidden by compute: {mean_pct:.1f}% of device time "
                        f"on average; most on {device_of(int(worst['rank']))}",
                        {
                            "mean_exposed_pct": round(mean_pct, 4),
                            "per_rank": [
                                {
                                    "rank": o["rank"],
                                    "exposed_comm_ns": o["exposed_comm_ns"],
                                    "overlap_pct": o.get("overlap_pct"),
                                }
                                for o in rows
                            ],
                        },
                    )
                )
    if idle and temporal:
        # device idle (the rank's kernel window) that its busiest stream spent waiting for
        # the host to launch work
        for t in temporal:
            rank = int(t["rank"])
            streams = [row for row in idle if row["rank"] == rank]
            if not streams or not t.get("kernel_window_ns"):
                continue
            busiest = min(streams, key=lambda row: row.get("idle_ns", 0))
            host_share = busiest.get("host_wait_pct", 0.0) / 100.0
            idle_pct = float(t.get("idle_pct", 0.0))
            if idle_pct < th.host_wait_pct or host_share < 0.5:
                continue
            hw = int(t.get("idle_ns", 0) * host_share)
            host, _ = names.get(rank, ("", ""))
            findings.append(
                Finding(
                    "host-bound",
                    host or device_of(rank),
                    hw,
                    pct(hw),
                    f"{device_of(rank)} is idle {idle_pct:.1f}% of its kernel window, "
                    f"{100 * host_share:.0f}% of it waiting for the host to launch work",
                    {
                        "rank": rank,
                        "idle_pct": idle_pct,
                        "host_wait_share": round(host_share, 4),
                        "stream": busiest.get("stream"),
                    },
                )
            )
    if imbalance:
        worst_step = max(imbalance.get("steps") or [], key=lambda x: x["imbalance"], default=None)
        for what, row in (("step", worst_step), ("layer", _first(imbalance.get("layers")))):
            if row is None or row["imbalance"] < th.imbalance:
                continue
            extra = row["max_ns"] - row["mean_ns"]
            findings.append(
                Finding(
                    "load-imbalance",
                    device_of(row["max_rank"]),
                    int(extra),
                    pct(extra),
                    f"{what} {row['name']}: the slowest rank takes "
                    f"{100 * row['imbalance']:.1f}% longer than the mean",
                    {what: row["name"], **{k: row[k] for k in ("imbalance", "max_ns", "mean_ns")}},
                )
            )

    def key(f: Finding) -> tuple[int, float]:
        direct = bool(f.evidence.get("direct_counter_evidence")) or "clock_ratio" in f.evidence
        cause = f.kind in CAUSE_KINDS and (f.impact_pct >= th.min_cause_pct or direct)
        tier = 0 if cause else 1
        return (tier, -f.impact_ns)

    findings.sort(key=key)
    return [f.as_dict() for f in findings]


def _first(rows: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    return rows[0] if rows else None
