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

A chip whose clock-frequency counter drops part-way while its peers' does not is a throttle
finding even when the traces show it little (it may have had little work left).

Ranking: root causes (straggler, throttle, slow-link, slow-nic) before the symptoms they
produce (exposed communication, imbalance, idle), each group by ``impact_ns``; a cause with
an impact under ``min_cause_pct`` ranks with the symptoms unless counters show it directly.

Impact of a slow rank: the run time saved if it arrived at the median pace (see
:func:`otel_ext.analysis.cross.critical_path.straggler_saving`); of a slow link: the time its
collectives waited for it beyond their next-slowest link; both measured on the traced
collectives and divided by the traced share of the group's collectives (sampled traces).
Of a slow port: its slow transfers' time beyond the healthy rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_ext._arrays import median
from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.counter_evidence import correlate_counters, series_of
from otel_ext.analysis.cross.critical_path import straggler_saving
from otel_ext.analysis.cross.link_stats import LinkStat, PortStat
from otel_ext.analysis.cross.nic_stats import path_nic_evidence
from otel_ext.analysis.cross.stragglers import StragglerReport
from otel_ext.analysis.significance import ALPHA
from otel_ext.semconv import metrics as M

__all__ = ["CAUSE_KINDS", "Finding", "Thresholds", "build_findings", "straggler_verdicts"]

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


def _p(p: float) -> str:
    """A p-value as the report prints it: ``0.0098``, ``<1e-06``, ``1``."""
    if p < 1e-6:
        return "<1e-06"
    return f"{p:.2g}" if p < 0.01 else f"{p:.2f}".rstrip("0").rstrip(".")


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


def _coverage(coverage: dict[str, float] | None, group: str | None) -> float:
    """The traced share of a group's collectives (1.0 when unknown)."""
    if not coverage or group is None:
        return 1.0
    return min(1.0, max(coverage.get(group, 1.0), 1e-3))


def _port_errors(metrics: Any, host: str) -> float:
    """Errors a host's network ports counted over the run (``hw.errors`` on its NIC links)."""
    total = 0.0
    for link in metrics.strings.get("link", []):
        if link.split("/", 1)[0] != host or "nic" not in link.rsplit("/", 1)[-1]:
            continue
        _, v = series_of(metrics, M.METRIC_HW_ERRORS, "link", link)
        if len(v) >= 2:
            total += max(0.0, float(v[-1] - v[0]))
    return total


def _group_of(match: CollectiveMatch, rank: int) -> str | None:
    """The collective group a rank meets its peers in most often."""
    inst = match.member_instance[match.member_rank == rank]
    if len(inst) == 0:
        return None
    groups = [match.group[int(i)] for i in inst]
    return max(set(groups), key=groups.count)


def straggler_verdicts(
    stragglers: StragglerReport, th: Thresholds, match: CollectiveMatch
) -> list[dict[str, Any]]:
    """The ranks whose evidence clears the thresholds, each with the test it passed.

    A rank is *late* when it joined at least ``min_collectives`` collectives, was last in
    more of them than chance allows (``p_last`` ≤ ``alpha``, adjusted for the ranks tested),
    its median self-caused lateness is at least ``lateness_effect`` times the spread of
    every member's, it carries ``straggler_blame_share`` of the waiting and its score clears
    ``straggler_score``. Its compute is *slow* when its median ratio to the same work
    elsewhere is ``slow_compute_ratio`` over the median rank's and the sign test clears
    ``alpha``; slow compute alone is a verdict only where no collective could show the
    others waiting (the rank joined none), or where it slowed part-way (a throttle).
    """
    rows = stragglers.rows
    if len(rows) < 2:
        return []
    ratios = [r["compute_ratio"] for r in rows if r["compute_ratio"] is not None]
    med_ratio = float(median(ratios)) if ratios else 1.0
    # the share of all the waiting at collectives its own lateness explains
    # of the waiting some rank caused by its own doing, and of all the waiting at collectives
    total_blame = sum(r["blame_ns"] for r in rows)
    waiting = max(max(r.get("waiting_ns", 0) for r in rows), total_blame)
    out = []
    for r in rows:
        ratio = r["compute_ratio"]
        rel = (ratio or 0.0) / max(med_ratio, 1e-9)
        compute_sig = r.get("compute_p", 1.0) <= th.alpha
        slow_compute = ratio is not None and rel >= th.slow_compute_ratio and compute_sig
        onset = _onset(r["compute_ratio_by_window"], th)
        part_way = onset is not None and compute_sig
        share = r["blame_ns"] / total_blame if total_blame else 0.0
        of_waiting = r["blame_ns"] / waiting if waiting else 0.0
        effect = r.get("lateness_effect")
        # significant by its last arrivals (pooled) or by the order of its self-caused
        # lateness at one site (or pooled), with the effect of the test that carries it
        by_last = r.get("p_last", 1.0) <= th.alpha and (
            effect is None or effect >= th.lateness_effect
        )
        site_effect = r.get("site_effect")
        by_site = r.get("site_p", 1.0) <= th.alpha and (
            site_effect is None or site_effect >= th.lateness_effect
        )
        late = (
            r.get("collectives", 0) >= th.min_collectives
            and (by_last or by_site)
            and share >= th.straggler_blame_share
            and of_waiting >= th.straggler_waiting_share
            and r["score"] >= th.straggler_score
        )
        alone = slow_compute and r.get("collectives", 0) == 0
        if late or alone or part_way:
            out.append(
                {
                    **r,
                    "relative_compute": rel,
                    "blame_share": share,
                    "waiting_share": of_waiting,
                    "late": late,
                    "slow_compute": slow_compute,
                    "onset": onset,
                }
            )
    out.sort(key=lambda x: (not x["late"], -x["blame_share"], -x["relative_compute"]))
    return out


def build_findings(
    *,
    match: CollectiveMatch,
    stragglers: StragglerReport,
    links: Sequence[LinkStat],
    ports: Sequence[PortStat] = (),
    coverage: dict[str, float] | None = None,
    metrics: Any = None,
    overlap: Sequence[dict[str, Any]] = (),
    temporal: Sequence[dict[str, Any]] = (),
    idle: Sequence[dict[str, Any]] = (),
    imbalance: dict[str, Any] | None = None,
    run_ns: int = 0,
    rank_names: dict[int, tuple[str, str]] | None = None,
    thresholds: Thresholds | None = None,
    run_ns_of_rank: dict[int, int] | None = None,
    run_of_rank: dict[int, int] | None = None,
    paths: Sequence[dict[str, Any]] = (),
    unpaired: Sequence[dict[str, Any]] = (),
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
        Finding dicts, ranked (see the module docstring).

    >>> from otel_ext.analysis.cross.collective_match import match_collectives
    >>> from otel_ext.analysis.cross.stragglers import find_stragglers
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

    have_metrics = metrics is not None and metrics.total > 0  # some may be left out
    # ---- slow ranks: straggler or throttle -------------------------------------------
    compute_ns = {int(t["rank"]): int(t.get("compute_ns", 0)) for t in temporal}
    for r in straggler_verdicts(stragglers, th, match):
        rank = int(r["rank"])
        target = device_of(rank)
        traced = straggler_saving(match, rank)
        frac = _coverage(coverage, _group_of(match, rank))
        saved = int(traced / frac)
        rel = r["relative_compute"]
        if saved == 0 and r["slow_compute"] and rel > 1.0:
            # no collectives to wait at: the extra compute time itself
            saved = int(compute_ns.get(rank, 0) * (1.0 - 1.0 / rel))
        evidence: dict[str, Any] = {
            "rank": rank,
            "compute_ratio": r["compute_ratio"],
            "relative_compute": round(rel, 4),
            "compute_ratio_by_window": r["compute_ratio_by_window"],
            "compute_slower": r.get("compute_slower", 0),
            "compute_faster": r.get("compute_faster", 0),
            "compute_p": r.get("compute_p", 1.0),
            "late_ns": r["late_ns"],
            "blame_ns": r["blame_ns"],
            "blame_share": round(r["blame_share"], 4),
            "waiting_share": round(r["waiting_share"], 4),
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
            "test": "late" if r["late"] else ("part-way" if r["onset"] is not None else "compute"),
        }
        throttled = False
        if have_metrics:
            counters = correlate_counters(metrics, target)
            throttled, fev = _freq_evidence(counters, th)
            evidence.update(fev)
            evidence["counters"] = counters
        onset = r["onset"]
        if onset is not None and len(stragglers.window_edges_ns) > onset:
            evidence["onset_ns"] = stragglers.window_edges_ns[onset]
        if have_metrics and evidence.get("clock_ratio") is not None:
            kind = "throttle" if throttled else "straggler"
        else:
            kind = "throttle" if onset is not None else "straggler"
        # the waits are measured on the traced collectives; say so when a schedule sampled
        in_traced = f" in the traced {frac:.0%} of the run" if frac < 0.999 else ""
        joined = evidence["collectives"]
        site = r.get("site_test")
        by_site = (
            r["late"]
            and site is not None
            and r.get("site_p", 1.0) <= min(th.alpha, r.get("p_last", 1.0))
        )
        evidence.update(
            site=r.get("site"),
            site_p=r.get("site_p", 1.0),
            site_effect=r.get("site_effect"),
            site_test=site,
            sites=r.get("sites", []),
            basis="site" if by_site else "last-arrivals",
        )
        overall = (
            f"last at {r['last_arrivals']} of {joined} collectives (chance "
            f"{evidence['expected_last']:.1f}, p={_p(evidence['p_last'])})"
        )
        if by_site and site is not None:
            nxt = site.get("next_lateness_ns")
            where = "all its collectives" if site["site"] == "all" else site["site"]
            lateness = (
                f"latest by its own doing at {where}: last in {site['last']} of "
                f"{site['instances']} (order test p={_p(site['p_adjusted'])}), median "
                f"{_ms(site['median_lateness_ns'])} late"
                + (f" (next: rank {site['next_rank']}, {_ms(nxt)})" if nxt is not None else "")
                + f"; {overall}"
            )
        elif joined:
            lateness = overall
        else:
            lateness = "joined no collective"
        compute = (
            f"compute {evidence['compute_ratio']:.2f}x the same work elsewhere "
            f"(slower in {evidence['compute_slower']} of "
            f"{evidence['compute_slower'] + evidence['compute_faster']}, "
            f"p={_p(evidence['compute_p'])})"
            if evidence["compute_ratio"] is not None
            else "no comparable compute"
        )
        if kind == "throttle":
            why = (
                f"clock {evidence['clock_before_hz'] / 1e9:.2f} -> "
                f"{evidence['clock_after_hz'] / 1e9:.2f} GHz part-way"
                if "clock_before_hz" in evidence
                else "compute slowed part-way through the run"
            )
            summary = (
                f"{target} throttled: {why}; {lateness}; the others waited "
                f"{_ms(r['blame_ns'])} for it{in_traced}"
            )
        else:
            summary = (
                f"{target} is a straggler: {lateness}; {compute}; the others waited "
                f"{_ms(r['blame_ns'])}{in_traced}"
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
            frac = _coverage(coverage, _group_of(match, rank))
            saved = int(straggler_saving(match, rank) / frac)
            evidence = {"rank": rank, **fev, "sampled_fraction": frac, "counters": counters}
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
        if s["kind"] != "chip" or not s.get("slow"):
            continue
        link = s["link"]
        frac = _coverage(coverage, s.get("group"))
        extra = s.get("wait_ns", 0) / frac
        evidence = {
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
            f"collectives waited {_ms(extra)} for it"
            + ("" if slow_rank_found else "; no rank computes slowly")
        )
        if have_metrics:
            evidence["counters"] = correlate_counters(metrics, link)
        findings.append(Finding("slow-link", link, int(extra), pct(extra), summary, evidence))
    for p in ports:
        if not p.get("chosen"):
            continue
        target = p["host"]
        resolved = None
        if p["ambiguous"] and have_metrics:
            # the transfers cannot tell the ports apart; a port counting errors can
            errs = {c: _port_errors(metrics, c) for c in p["candidates"]}
            worst_port = max(errs, key=lambda c: errs[c])
            if errs[worst_port] > 0 and sum(1 for v in errs.values() if v > 0) == 1:
                target, resolved = worst_port, {"by": M.METRIC_HW_ERRORS, "errors": errs}
                p = {**p, "ambiguous": False}
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
            "ambiguous": p["ambiguous"],
        }
        if resolved is not None:
            evidence["resolved"] = resolved
        also = [c for c in p["candidates"] if c != target] if p["ambiguous"] else []
        summary = (
            f"{target}'s network port moves data at {(p['median_bw'] or 0) / 1e9:.2f} GB/s, "
            f"{p['slowness']:.1f}x below the {p['reference_bw'] / 1e9:.2f} GB/s expected "
            f"({p['reference']}); {p['slow_transfers']} of its {p['transfers']} transfers slow, "
            f"{_ms(p['extra_ns'])} extra transfer time"
            + (
                f"; every slow transfer also crossed {', '.join(also)}'s port, which the "
                "telemetry cannot tell apart from this one"
                if also
                else ""
            )
        )
        if have_metrics:
            evidence["counters"] = correlate_counters(metrics, target)
        findings.append(
            Finding("slow-nic", target, p["extra_ns"], pct(p["extra_ns"]), summary, evidence)
        )
    findings.extend(network_path_findings(paths, pct, metrics if have_metrics else None))
    findings.extend(unpaired_transfer_findings(unpaired, pct, late_share=th.late_sender_share))
    # ---- collectives whose members disagree (a desync, or members that are not one) ----
    mism = match.mismatches()
    if mism:
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
        target = str(mism[0].get("op", "collectives"))
        findings.append(
            Finding(
                "collective-mismatch",
                target,
                0,
                0.0,
                "collectives matched across ranks disagree: "
                + "; ".join(parts)
                + f"; matched by {match.source}: a desync, or calls that are not one collective",
                {"mismatches": mism[:40], "matched_by": match.source},
            )
        )
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
        idle_of: dict[int, list[dict[str, Any]]] = {}
        for row in idle:  # one pass: a rank's streams looked up, not searched for per rank
            idle_of.setdefault(int(row["rank"]), []).append(row)
        for t in temporal:
            rank = int(t["rank"])
            streams = idle_of.get(rank, [])
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
        for what in ("step", "layer"):
            test = imbalance.get(f"{what}s_test")
            rows = [
                x
                for x in imbalance.get(f"{what}s") or []
                if x["group"] == (test or {}).get("group")
            ]
            if not test or not rows:
                continue
            # a persistent slowest rank (significant against chance) whose typical step is
            # imbalanced beyond the threshold; the listed row is its worst
            if test["p"] > th.alpha or test["median_imbalance"] < th.imbalance:
                continue
            mine = [x for x in rows if x["max_rank"] == test["rank"]] or rows
            row = max(mine, key=lambda x: x["imbalance"])
            extra = row["max_ns"] - row["mean_ns"]
            findings.append(
                Finding(
                    "load-imbalance",
                    device_of(test["rank"]),
                    int(extra),
                    pct(extra),
                    f"{device_of(test['rank'])} is the slowest rank in {test['times_slowest']} of "
                    f"{test['rows']} {what}s (chance {test['expected']:.1f}, p={_p(test['p'])}); "
                    f"median {what} imbalance {100 * test['median_imbalance']:.1f}%, worst "
                    f"{row['name']}: {100 * row['imbalance']:.1f}% longer than the mean",
                    {
                        what: row["name"],
                        **{k: row[k] for k in ("imbalance", "max_ns", "mean_ns")},
                        "times_slowest": test["times_slowest"],
                        f"{what}s": test["rows"],
                        "expected": test["expected"],
                        "p": test["p"],
                        "median_imbalance": test["median_imbalance"],
                    },
                )
            )

    findings = _one_per_pattern(findings, pct, run_of_rank or {})
    for f in findings:  # rated against the run the finding is about; never above 100 %
        about = f.evidence.get("rank")
        own = (run_ns_of_rank or {}).get(about) if isinstance(about, int) else None
        if own:
            f.impact_pct = 100.0 * f.impact_ns / own
        f.impact_pct = min(f.impact_pct, 100.0)

    def key(f: Finding) -> tuple[int, float]:
        direct = bool(f.evidence.get("direct_counter_evidence")) or "clock_ratio" in f.evidence
        cause = f.kind in CAUSE_KINDS and (f.impact_pct >= th.min_cause_pct or direct)
        cause = cause or f.kind == "collective-mismatch"  # no impact to rate: a fault itself
        tier = 0 if cause else 1
        return (tier, -f.impact_ns)

    findings.sort(key=key)
    return [f.as_dict() for f in findings]


def _bw(x: float | None) -> str:
    """Bytes per second as the report prints them."""
    if x is None:
        return "-"
    return f"{x / 1e9:.2f} GB/s" if x >= 1e9 else f"{x / 1e6:.1f} MB/s"


def network_path_findings(
    paths: Sequence[dict[str, Any]], pct: Any, metrics: Any = None
) -> list[Finding]:
    """One ``slow-network-path`` finding per host pair with a slow direction (both directions
    in one finding when both are slow), from :func:`~otel_ext.analysis.cross.network_paths.path_stats`.

    >>> row = dict(path="hA->hB", src_host="hA", dst_host="hB", slow=True, transfers=12,
    ...     slower=12, p=2.9e-3, median_bw=12e6, reference_bw=1e9, slowness=83.3,
    ...     reference="the fastest within-host path", threshold=10.0, extra_ns=900_000_000, rank_pairs=["1->2"],
    ...     median_transfer_ns=87e6, bytes=12 << 20, inter_host=True)
    >>> f = network_path_findings([row], lambda ns: 0.0)[0]
    >>> f.kind, f.target
    ('slow-network-path', 'hA->hB')
    """
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in paths:
        if p.get("slow"):
            a, b = sorted((p["src_host"], p["dst_host"]))
            by_pair.setdefault((a, b), []).append(p)
    out = []
    for (a, b), rows in sorted(by_pair.items()):
        target = rows[0]["path"] if len(rows) == 1 else f"{a}<->{b}"
        # the two directions' transfers run at the same time: the larger one's extra time
        extra = max(int(r["extra_ns"]) for r in rows)
        parts = [
            f"{r['path']} transfers at {_bw(r['median_bw'])} (median of {r['transfers']}, "
            f"ranks {', '.join(r['rank_pairs'])}), {r['slowness']:.1f}x below the "
            f"{_bw(r['reference_bw'])} of {r['reference']}; {r['slower']} of {r['transfers']} "
            f"more than {r['threshold']:g}x below it (p={_p(r['p'])})"
            for r in rows
        ]
        evidence: dict[str, Any] = {
            "hosts": [a, b],
            "directions": [dict(r) for r in rows],
            "extra_transfer_ns": extra,
            "test": (
                "one-sided Fisher exact test: the share of its transfers more than the threshold "
                "below the reference against that share among the reference's own transfers "
                "(a sign test against a nominal rate); Bonferroni over the paths tested"
            ),
        }
        if metrics is not None:  # both ends' port counters (node agent's net/ib sources)
            evidence["nic"] = [
                path_nic_evidence(metrics, r["src_host"], r["dst_host"]) for r in rows
            ]
        nic = [e["summary"] for e in evidence.get("nic", []) if e.get("ports")]
        summary = (
            "; ".join(parts)
            + f"; {_ms(extra)} spent beyond the slowest rate that is not slow; the ranks "
            "waiting on these transfers are their victims, not stragglers"
            + (f"; ports: {'; '.join(nic)}" if nic else "")
        )
        out.append(Finding("slow-network-path", target, extra, pct(extra), summary, evidence))
    return out


def unpaired_transfer_findings(
    unpaired: Sequence[dict[str, Any]], pct: Any, *, late_share: float = 0.25
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
        u
        for u in recvs
        if u.get("late_sender_share") is not None and u["late_sender_share"] <= late_share
    ]
    if not recvs or not (sends or len(unexplained) == len(recvs)):
        return []
    src = sorted({u["host"] or f"rank{u['rank']}" for u in sends}) or ["*"]
    dst = sorted({u["host"] or f"rank{u['rank']}" for u in recvs})
    target = f"{','.join(src)}->{','.join(dst)}"
    # the receiving ranks wait at the same time: the largest one's extra time
    extra = int(max((u["median_ns"] - u["peer_median_ns"]) * u["count"] for u in recvs))

    def say(rows: list[dict[str, Any]], what: str) -> str:
        ranks = ", ".join(
            f"rank {u['rank']} ({u['host']})" if u["host"] else f"rank {u['rank']}" for u in rows
        )
        worst = min(rows, key=lambda u: u["ratio"])
        return (
            f"{what} on {ranks} take {_ms(worst['median_ns'])} or more (median), "
            f"{worst['ratio']:.0f}x the other ranks' {_ms(worst['peer_median_ns'])} "
            f"({worst['slower']} of {worst['count']} slower, p={_p(worst['p'])})"
        )

    if sends:
        why = (
            f"{say(sends, 'sends')}; {say(recvs, 'receives')}: both ends of these transfers "
            "are slow, so the path between them is, not a late peer"
        )
    else:
        shares = ", ".join(f"{u['late_sender_share']:.0%}" for u in recvs)
        why = (
            f"{say(recvs, 'receives')}; another rank called a send in the second half of "
            f"{shares} of them, so no sender was late: the transfers into these ranks are "
            "slow, not a peer"
        )
    summary = why + "; the trace names no peers, so the path is not named exactly"
    evidence = {
        "peers_known": False,
        "sends": [dict(u) for u in sends],
        "receives": [dict(u) for u in recvs],
        "late_sender_share_max": late_share,
        "extra_transfer_ns": extra,
    }
    return [Finding("slow-transfers", target, extra, pct(extra), summary, evidence)]


#: kinds whose findings on several ranks are one pattern: one finding, with the spread
_GROUPED = ("host-bound",)


def _one_per_pattern(
    findings: list[Finding], pct: Any, run_of_rank: dict[int, int]
) -> list[Finding]:
    """Ranks of one run sharing a verdict as one finding naming the spread (min/median/max)
    and targets (separate captures are never one pattern).

    The impact is the largest member's (ranks run in parallel: their idle is not additive),
    rated against that member's run.
    """
    out: list[Finding] = []

    def group(f: Finding) -> tuple[str, int]:
        r = f.evidence.get("rank")
        return f.kind, run_of_rank.get(r, 0) if isinstance(r, int) else 0

    for key in dict.fromkeys(group(f) for f in findings):
        kind = key[0]
        same = [f for f in findings if group(f) == key]
        if kind not in _GROUPED or len(same) < 2:
            out.extend(same)
            continue
        idle = [float(f.evidence.get("idle_pct", 0.0)) for f in same]
        share = [float(f.evidence.get("host_wait_share", 0.0)) for f in same]
        worst = max(same, key=lambda f: f.impact_ns)
        targets = sorted({f.target for f in same})
        devices = [f.summary.split(" is idle", 1)[0] for f in same]
        where = targets[0] if len(targets) == 1 else f"{len(same)} ranks"
        summary = (
            f"{len(same)} ranks are host-bound ({', '.join(devices[:8])}"
            + (", ..." if len(devices) > 8 else "")
            + f"): idle {min(idle):.1f}–{max(idle):.1f}% of their kernel windows (median "
            f"{float(median(idle)):.1f}%), "
            + ("all" if min(share) >= 0.995 else f"at least {100 * min(share):.0f}%")
            + " of it waiting for the host to launch work"
        )
        evidence = {
            "rank": worst.evidence.get("rank"),  # the worst member: the impact is its
            "ranks": [f.evidence.get("rank") for f in same],
            "targets": targets,
            "idle_pct_min": min(idle),
            "idle_pct_median": float(median(idle)),
            "idle_pct_max": max(idle),
            "host_wait_share_min": round(min(share), 4),
            "per_rank": [f.evidence for f in same],
        }
        out.append(Finding(kind, where, worst.impact_ns, pct(worst.impact_ns), summary, evidence))
    return out
