"""Findings on synthetic multi-rank runs with each fault pattern: the right kind and target.

The generator below is a small, exact model of a tensor-parallel step loop: every chip runs
its layers' compute kernels, then an all-reduce with the other chips of its host over a ring
of chip-to-chip links (each link carries the same bytes; the all-reduce ends when the slowest
link's transfer ends after the last arrival), and each host sends a KV-cache transfer over its
network port. Faults change only what they should: a straggler's compute is slower all run;
a throttled chip's compute slows from mid-run and its clock-frequency counter drops; a slow
link's transfers take longer; a slow port's transfers take longer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from otel_ext.analysis.engine import analyze
from otel_ext.analysis.findings.finding import Finding, Thresholds
from otel_ext.analysis.findings.ranking import one_per_pattern, rank_findings
from otel_ext.analysis.loaders import LoadResult, MetricPoints
from otel_ext.analysis.table import Category, EventTable
from otel_ext.semconv import metrics as M

HOSTS, CHIPS, STEPS, LAYERS = 2, 4, 40, 3
LAYER_NS = 200_000
LINK_BW = 100e9  # bytes/s
NIC_BW = 25e9
AR_BYTES = 8_000_000
KV_BYTES = 4_000_000


def _run(fault: str | None, target: str | None, *, seed: int = 0) -> LoadResult:
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    t = {(h, c): 1_000_000 for h in range(HOSTS) for c in range(CHIPS)}
    mid = STEPS // 2
    for step in range(STEPS):
        arrivals = {}
        for h in range(HOSTS):
            for c in range(CHIPS):
                dev = f"host{h}/chip{c}"
                rank = h * CHIPS + c
                slow = 1.0
                if fault == "straggler" and dev == target:
                    slow = 1.3
                if fault == "throttle" and dev == target and step >= mid:
                    slow = 1.45
                now = t[(h, c)]
                for layer in range(LAYERS):
                    d = int(LAYER_NS * slow * (1 + 0.01 * rng.standard_normal()))
                    rows.append(dict(start_ns=now, end_ns=now + d, rank=rank, host=f"host{h}",
                                     device=dev, stream=7, category=Category.KERNEL_COMPUTE,
                                     name=f"layer{layer}_gemm"))  # fmt: skip
                    now += d + 2_000
                arrivals[(h, c)] = now
        for h in range(HOSTS):
            last = max(arrivals[(h, c)] for c in range(CHIPS))
            link_end = []
            for c in range(CHIPS):
                link = f"host{h}/chip{c}-chip{(c + 1) % CHIPS}"
                bw = LINK_BW / 4 if fault == "slow-link" and link == target else LINK_BW
                d = int(AR_BYTES / bw * 1e9)
                rows.append(dict(start_ns=last, end_ns=last + d, host=f"host{h}", device=link,
                                 category=Category.LINK_TRANSFER, coll_bytes=AR_BYTES,
                                 name="accel.link.transfer"))  # fmt: skip
                link_end.append(last + d)
            end = max(link_end) + 5_000
            for c in range(CHIPS):
                rank = h * CHIPS + c
                rows.append(dict(start_ns=arrivals[(h, c)], end_ns=end, rank=rank,
                                 host=f"host{h}", device=f"host{h}/chip{c}", stream=9,
                                 category=Category.KERNEL_COMM, coll_op="allreduce",
                                 coll_group=f"tp{h}", coll_seq=step, coll_bytes=AR_BYTES,
                                 name="allreduce"))  # fmt: skip
                t[(h, c)] = end + 3_000
            # the host's KV-cache transfer over its network port
            nic = f"host{h}/nic0"
            bw = NIC_BW / 4 if fault == "slow-nic" and f"host{h}" == target else NIC_BW
            d = int(KV_BYTES / bw * 1e9)
            rows.append(dict(start_ns=end, end_ns=end + d, host=f"host{h}", device=nic,
                             category=Category.LINK_TRANSFER, coll_bytes=KV_BYTES,
                             name="accel.link.transfer"))  # fmt: skip
    end_all = max(t.values())
    for k in range(50):
        ts = 1_000_000 + (end_all - 1_000_000) * k // 49
        for h in range(HOSTS):
            for c in range(CHIPS):
                dev = f"host{h}/chip{c}"
                throttled = fault == "throttle" and dev == target and k >= 25
                points.append(dict(name=M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, kind="gauge",
                                   time_ns=ts, value=1.2e9 if throttled else 1.8e9, device=dev,
                                   host=f"host{h}"))  # fmt: skip
                points.append(dict(name=M.METRIC_HW_TEMPERATURE, kind="gauge", time_ns=ts,
                                   value=88.0 if throttled else 60.0, device=dev,
                                   host=f"host{h}"))  # fmt: skip
    return LoadResult(EventTable.from_rows(rows), [], [], MetricPoints.from_rows(points))


@pytest.mark.parametrize(
    ("fault", "target"),
    [
        ("straggler", "host1/chip2"),
        ("throttle", "host0/chip3"),
        ("slow-link", "host0/chip1-chip2"),
        ("slow-nic", "host1"),
    ],
)
def test_top_finding_names_the_fault(fault: str, target: str) -> None:
    doc = analyze(_run(fault, target))
    top = doc["findings"][0]
    assert (top["kind"], top["target"]) == (fault, target), doc["findings"][:3]
    assert top["impact_ns"] > 0 and top["impact_pct"] > 0
    assert top["evidence"]
    # no other root cause is reported
    causes = [
        f
        for f in doc["findings"]
        if f["kind"] in ("straggler", "throttle", "slow-link", "slow-nic")
    ]
    assert len(causes) == 1, causes


def test_no_fault_no_root_cause() -> None:
    doc = analyze(_run(None, None))
    kinds = {f["kind"] for f in doc["findings"]}
    assert not kinds & {"straggler", "throttle", "slow-link", "slow-nic"}, doc["findings"]


def test_straggler_evidence_and_counters_normal() -> None:
    doc = analyze(_run("straggler", "host1/chip2"))
    ev = doc["findings"][0]["evidence"]
    assert ev["compute_ratio"] == pytest.approx(1.3, rel=0.03)
    assert ev["clock_ratio"] == pytest.approx(1.0)
    assert ev["last_arrivals"] == STEPS  # last at every all-reduce of its host
    assert doc["stragglers"][0]["device"] == "host1/chip2"
    # what-if: the saving equals the lateness it caused, per step (exact model)
    wi = doc["critical_path"]["straggler_what_if"]
    assert wi["rank"] == 1 * CHIPS + 2 and wi["saved_ns"] == doc["findings"][0]["impact_ns"]


def test_throttle_evidence_shows_the_clock_drop() -> None:
    doc = analyze(_run("throttle", "host0/chip3"))
    ev = doc["findings"][0]["evidence"]
    assert ev["clock_before_hz"] == pytest.approx(1.8e9)
    assert ev["clock_after_hz"] == pytest.approx(1.2e9)
    assert ev["temperature_after_c"] > ev["temperature_before_c"]
    series = ev["counters"]["series"][M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY]
    assert series["peer_median"] == pytest.approx(1.8e9)


def test_throttle_without_counters_found_from_its_onset() -> None:
    run = _run("throttle", "host0/chip3")
    doc = analyze(LoadResult(run.table, [], [], MetricPoints.from_rows([])))
    top = doc["findings"][0]
    assert (top["kind"], top["target"]) == ("throttle", "host0/chip3")
    assert "onset_ns" in top["evidence"]


def test_slow_link_evidence() -> None:
    doc = analyze(_run("slow-link", "host0/chip1-chip2"))
    ev = doc["findings"][0]["evidence"]
    assert ev["slowness"] == pytest.approx(4.0, rel=1e-3)
    assert ev["median_bw"] == pytest.approx(LINK_BW / 4, rel=1e-3)


def _host_bound(rank: int, device: str) -> Finding:
    evidence = {"rank": rank, "idle_pct": 30.0 + rank, "host_wait_share": 1.0, "stream": 7}
    summary = f"a summary that names no device ({rank})"
    return Finding("host-bound", "h0", 5 + rank, 0.0, summary, evidence, rank=rank,
                   devices=(device,))  # fmt: skip


def test_grouped_host_bound_names_the_devices_the_findings_carry() -> None:
    # the devices come from the findings themselves, never parsed out of their summaries
    members = [_host_bound(r, f"h0/gpu {r} is idle") for r in range(3)]
    (g,) = one_per_pattern(members, lambda ns: 0.0, {})
    assert g.summary.startswith("3 ranks are host-bound (h0/gpu 0 is idle, h0/gpu 1 is idle, ")
    assert (g.target, g.impact_ns, g.rank) == ("h0", 7, 2)
    doc = g.as_dict()
    assert set(doc) == {"kind", "target", "impact_ns", "impact_pct", "summary", "evidence"}
    assert doc["evidence"]["ranks"] == [0, 1, 2]
    # ranks of separate runs are separate patterns
    apart = one_per_pattern(members[:2], lambda ns: 0.0, {0: 0, 1: 1})
    assert [f.rank for f in apart] == [0, 1]


def test_causes_rank_before_symptoms_unless_too_small_to_matter() -> None:
    symptom = Finding("host-bound", "h0", 10**9, 50.0, "idle", {})
    small_cause = Finding("straggler", "h0/gpu1", 10, 0.1, "late", {"rank": 1}, rank=1)
    backed = Finding("throttle", "h0/gpu2", 10, 0.1, "clock", {"rank": 2}, rank=2,
                     counter_backed=True)  # fmt: skip
    ranked = rank_findings([symptom, small_cause, backed], Thresholds(), pct=lambda ns: 0.0,
                           run_of_rank={}, run_ns_of_rank={2: 20})  # fmt: skip
    assert [f.kind for f in ranked] == ["throttle", "host-bound", "straggler"]
    assert ranked[0].impact_pct == 50.0  # rated against its own rank's run


def test_a_host_bound_summary_never_rounds_up_to_a_bound() -> None:
    """99.95 % idle, 99.99 % of it waiting for the host: the summary says so, not "100.0%"
    (the real tracelens_vllm_mi300x rank 1 reads 99.9501 % idle)."""
    from otel_ext.analysis.findings._context import RuleContext
    from otel_ext.analysis.findings.symptoms import host_bound_findings

    ctx = RuleContext(names={1: ("", "rank1/gpu2")}, run_ns=60_000_000)
    temporal = [{"rank": 1, "kernel_window_ns": 10**8, "idle_ns": 99_950_100, "idle_pct": 99.9501}]
    idle = [{"rank": 1, "stream": 1, "idle_ns": 99_950_100, "host_wait_pct": 99.994}]
    (f,) = host_bound_findings(idle, temporal, ctx)  # type: ignore[arg-type]
    assert "idle 99.95% of its kernel window, 99.99% of it waiting" in f.summary
    assert "100" not in f.summary
    # the evidence as precise as the summary (four places would store 0.9999)
    assert abs(f.evidence["host_wait_share"] - 0.99994) < 1e-9


def test_a_host_bound_group_says_all_only_when_every_share_is_whole() -> None:
    from otel_ext.analysis.findings.ranking import _host_bound_group

    def member(rank: int, share: float) -> Finding:
        evidence = {"rank": rank, "idle_pct": 50.0, "host_wait_share": share, "stream": 7}
        return Finding("host-bound", "host0", 1000 * (rank + 1), 1.0, "", evidence,
                       rank=rank, devices=(f"gpu{rank}",))  # fmt: skip

    whole = _host_bound_group([member(0, 1.0), member(1, 1.0)], lambda ns: ns / 1e4)
    assert "all of it waiting" in whole.summary
    most = _host_bound_group([member(0, 1.0), member(1, 0.997)], lambda ns: ns / 1e4)
    assert "at least 99.7% of it waiting" in most.summary
