"""Cross-rank analyses against ground truth: matching, alignment, stragglers, critical path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.alignment import align_ranks, count_violations
from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.counter_evidence import change_point, correlate_counters
from otel_ext.analysis.cross.critical_path import critical_path, straggler_saving
from otel_ext.analysis.cross.imbalance import load_imbalance
from otel_ext.analysis.cross.link_stats import link_stats
from otel_ext.analysis.cross.stragglers import find_stragglers
from otel_ext.analysis.loaders import MetricPoints
from otel_ext.analysis.rank.roofline import roofline
from otel_ext.analysis.serving.requests import request_latency
from otel_ext.analysis.table import Category, EventTable

BASE = 1_700_000_000_000_000_000  # epoch-scale times: float64 would lose nanoseconds here


def _collective_run(
    n_ranks: int,
    n_coll: int,
    offsets: list[int],
    *,
    late_rank: int | None = None,
    late_ns: int = 0,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[tuple[int, int], int]]:
    """Ranks meeting at ``n_coll`` all-reduces; true arrivals random, exits simultaneous."""
    rng = np.random.default_rng(seed)
    rows = []
    arrivals = {}
    t = BASE
    for k in range(n_coll):
        arr = t + rng.integers(0, 50_000, size=n_ranks)
        if late_rank is not None:
            arr[late_rank] = arr.max() + late_ns
        end = int(arr.max()) + 20_000
        for r in range(n_ranks):
            arrivals[(k, r)] = int(arr[r])
            rows.append(dict(start_ns=int(arr[r]) + offsets[r], end_ns=end + offsets[r], rank=r,
                             stream=3, category=Category.KERNEL_COMM, coll_op="allreduce",
                             coll_group="world", coll_seq=k, coll_bytes=1 << 20,
                             device=f"h{r // 4}/chip{r % 4}"))  # fmt: skip
        t = end + 100_000
    return rows, arrivals


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_ranks=st.integers(2, 6),
    offsets=st.lists(st.integers(-(10**9), 10**9), min_size=6, max_size=6),
    seed=st.integers(0, 1000),
)
def test_offsets_recovered_and_causality_repaired(
    n_ranks: int, offsets: list[int], seed: int
) -> None:
    offsets = [0, *offsets[1:n_ranks]]
    rows, _ = _collective_run(n_ranks, 12, offsets, seed=seed)
    a = align_ranks(EventTable.from_rows(rows))
    for r in range(n_ranks):
        assert a.offsets_ns[r] == pytest.approx(offsets[r], abs=1)
    assert a.violations_after == 0
    # aligned exits coincide again
    m = a.match
    assert int(m.end_skew_ns.max()) <= 2


@settings(max_examples=20, deadline=None)
@given(shift=st.integers(-(10**12), 10**12), seed=st.integers(0, 100))
def test_alignment_invariant_to_a_common_offset(shift: int, seed: int) -> None:
    offsets = [0, 3_000_000, -7_000_000]
    rows, _ = _collective_run(3, 10, offsets, seed=seed)
    shifted = [
        {**r, "start_ns": r["start_ns"] + shift, "end_ns": r["end_ns"] + shift} for r in rows
    ]
    a = align_ranks(EventTable.from_rows(rows))
    b = align_ranks(EventTable.from_rows(shifted))
    assert a.offsets_ns == pytest.approx(b.offsets_ns, abs=1)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_matching_invariant_to_row_order(seed: int) -> None:
    rows, arrivals = _collective_run(4, 8, [0, 0, 0, 0], seed=seed)
    perm = np.random.default_rng(seed).permutation(len(rows))
    a = match_collectives(EventTable.from_rows(rows))
    b = match_collectives(EventTable.from_rows([rows[i] for i in perm]))
    assert a.n_instances == b.n_instances == 8
    assert sorted(a.wait_ns.tolist()) == sorted(b.wait_ns.tolist())
    # ground truth: wait = last arrival − own arrival
    for k in range(8):
        last = max(arrivals[(k, r)] for r in range(4))
        want = sorted(last - arrivals[(k, r)] for r in range(4))
        got = sorted(a.wait_ns[a.member_instance == k].tolist())
        assert got == want


def test_transfer_and_bus_bandwidth() -> None:
    rows = [dict(start_ns=s, end_ns=1_000_000, rank=r, category=Category.KERNEL_COMM,
                 coll_op="all_reduce", coll_seq=0, coll_bytes=4_000_000)
            for r, s in enumerate([0, 100_000, 200_000, 500_000])]  # fmt: skip
    m = match_collectives(EventTable.from_rows(rows))
    assert int(m.transfer_ns[0]) == 500_000
    assert m.algbw[0] == pytest.approx(4_000_000 / 0.0005)
    assert m.busbw[0] == pytest.approx(m.algbw[0] * 2 * 3 / 4)
    assert int(m.start_skew_ns[0]) == 500_000 and int(m.last_rank[0]) == 3


def test_ordinal_matching_without_sequence_numbers() -> None:
    rows = []
    for r in range(3):
        for k in range(5):
            rows.append(dict(start_ns=k * 1000 + r, end_ns=k * 1000 + 500, rank=r,
                             category=Category.KERNEL_COMM, name="ncclDevKernel_AllGather_RING"))  # fmt: skip
    m = match_collectives(EventTable.from_rows(rows))
    assert m.source == "ordinal" and m.n_instances == 5
    assert set(m.op) == {"allgather"}
    assert all(int(x) == 2 for x in m.last_rank)


def test_violations_counted_on_raw_clocks() -> None:
    rows, _ = _collective_run(2, 5, [0, 10**9])
    m = match_collectives(EventTable.from_rows(rows))
    assert count_violations(m) == 5


@pytest.mark.parametrize("late", [0, 1, 3])
def test_straggler_is_top_and_its_lateness_exact(late: int) -> None:
    rows, arrivals = _collective_run(4, 16, [0, 0, 0, 0], late_rank=late, late_ns=300_000)
    t = EventTable.from_rows(rows)
    m = match_collectives(t)
    s = find_stragglers(t, m, windows=4)
    top = s.rows[0]
    assert top["rank"] == late
    assert top["last_arrivals"] == 16 and top["persistence"] == 1.0
    # others lost (gap to second-last) × 3 per collective; the straggler is blamed for the
    # share its own doing explains (its gap since its previous exit against the others'),
    # which here is all of it but for the jitter of the previous exits (sub-µs of 300 µs)
    want = 0
    for k in range(16):
        others = sorted(arrivals[(k, r)] for r in range(4) if r != late)
        want += (arrivals[(k, late)] - others[-1]) * 3
    assert top["waiting_ns"] == want
    assert 0.999 * want <= top["blame_ns"] <= want
    assert straggler_saving(m, late) > 16 * 300_000 - 1


def test_critical_path_crosses_to_the_last_arrival() -> None:
    C = Category
    rows = [
        dict(start_ns=0, end_ns=100, rank=0, stream=1, category=C.KERNEL_COMPUTE, name="a"),
        dict(start_ns=0, end_ns=700, rank=1, stream=1, category=C.KERNEL_COMPUTE, name="slow"),
        dict(start_ns=100, end_ns=900, rank=0, stream=2, category=C.KERNEL_COMM, coll_seq=0),
        dict(start_ns=700, end_ns=900, rank=1, stream=2, category=C.KERNEL_COMM, coll_seq=0),
        dict(start_ns=950, end_ns=1200, rank=0, stream=1, category=C.KERNEL_COMPUTE, name="b"),
    ]
    t = EventTable.from_rows(rows)
    cp = critical_path(t, match_collectives(t), straggler_rank=1)
    cats = [(s["rank"], s["category"], s["start_ns"], s["end_ns"]) for s in cp.segments]
    assert cats == [
        (1, "compute", 0, 700),
        (0, "communication", 700, 900),
        (0, "idle", 900, 950),
        (0, "compute", 950, 1200),
    ]
    assert cp.length_ns == 1200 == sum(cp.by_category.values())
    assert cp.by_rank == {1: 700, 0: 500}
    # arriving at the median of the two arrivals (100 and 700) saves 700 - 400
    assert cp.straggler is not None and cp.straggler["saved_ns"] == 300


def test_link_stats_ground_truth() -> None:
    rows = []
    for i in range(5):
        for link, bw in [
            ("h0/chip0-chip1", 100e9),
            ("h0/chip1-chip2", 20e9),
            ("h0/chip2-chip3", 100e9),
            ("h0/chip3-chip0", 100e9),
        ]:
            d = int(1e6 / bw * 1e9)
            rows.append(dict(start_ns=i * 10**6, end_ns=i * 10**6 + d, device=link,
                             category=Category.LINK_TRANSFER, coll_bytes=10**6))  # fmt: skip
    stats = {s["link"]: s for s in link_stats(EventTable.from_rows(rows))}
    assert stats["h0/chip1-chip2"]["slowness"] == pytest.approx(5.0, rel=1e-3)
    assert stats["h0/chip0-chip1"]["slowness"] == pytest.approx(1.0, rel=1e-3)
    assert stats["h0/chip1-chip2"]["median_bw"] == pytest.approx(20e9, rel=1e-3)


@settings(max_examples=30, deadline=None)
@given(durs=st.lists(st.integers(1, 10**9), min_size=2, max_size=8))
def test_imbalance_per_step(durs: list[int]) -> None:
    rows = [dict(start_ns=0, end_ns=d, rank=r, category=Category.STEP, name="step1")
            for r, d in enumerate(durs)]  # fmt: skip
    s = load_imbalance(EventTable.from_rows(rows))["steps"][0]
    assert s["imbalance"] == pytest.approx(max(durs) / np.mean(durs) - 1, abs=1e-6)
    assert s["imbalance"] >= 0 and durs[s["max_rank"]] == max(durs)


def test_roofline_from_registry_specs() -> None:
    # 1 ms layer, 1e12 FLOP over 1e9 bytes on an H100 (989 TFLOP/s, 3.35 TB/s)
    t = EventTable.from_rows([dict(start_ns=0, end_ns=10**6, category=Category.LAYER,
                                   name="attn", flops=5e11, bytes_accessed=1e9)])  # fmt: skip
    r = roofline(t, device_model="H100-SXM5-80GB")[0]
    assert r["intensity"] == 500.0
    assert r["bound"] == "compute"  # ridge 989e12 / 3.35e12 = 295 FLOP/byte
    assert r["roof_flops"] == pytest.approx(989e12)
    assert r["pct_of_roof"] == pytest.approx(100 * 5e14 / 989e12, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(
    q=st.integers(0, 10**6),
    p=st.integers(1, 10**6),
    steps=st.lists(st.integers(1, 10**5), min_size=2, max_size=6),
)
def test_request_ttft_and_tpot(q: int, p: int, steps: list[int]) -> None:
    rows = [dict(start_ns=BASE, end_ns=BASE + q + p + sum(steps), category=Category.REQUEST,
                 trace_id="ab" * 16, name="accel.request"),
            dict(start_ns=BASE, end_ns=BASE + q, category=Category.PHASE, trace_id="ab" * 16, name="queue"),
            dict(start_ns=BASE + q, end_ns=BASE + q + p, category=Category.PHASE, trace_id="ab" * 16, name="prefill")]  # fmt: skip
    t = BASE + q + p
    for d in steps:
        rows.append(
            dict(
                start_ns=t, end_ns=t + d, category=Category.PHASE, trace_id="ab" * 16, name="decode"
            )
        )
        t += d
    r = request_latency(EventTable.from_rows(rows))["requests"][0]
    assert r["ttft_ns"] == q + p
    assert r["tpot_ns"] == sum(steps) // len(steps)
    assert (r["queue_ns"], r["prefill_ns"], r["decode_ns"]) == (q, p, sum(steps))


def test_request_attribution_by_time() -> None:
    C = Category
    rows = [dict(start_ns=0, end_ns=1000, category=C.REQUEST, trace_id="aa", name="r"),
            dict(start_ns=0, end_ns=100, category=C.PHASE, trace_id="aa", name="queue"),
            dict(start_ns=100, end_ns=600, category=C.PHASE, trace_id="aa", name="prefill"),
            dict(start_ns=200, end_ns=400, category=C.LAYER, rank=0, name="l0"),
            dict(start_ns=300, end_ns=450, category=C.LAYER, rank=1, name="l0"),
            dict(start_ns=450, end_ns=550, category=C.KERNEL_COMM, rank=0, device="h/c0"),
            dict(start_ns=500, end_ns=900, category=C.KERNEL_COMPUTE, rank=1, device="h/c1")]  # fmt: skip
    r = request_latency(EventTable.from_rows(rows))["requests"][0]
    assert r["attribution"] == "time"
    assert r["ttft_layers_ns"] == 250  # union of [200,400] and [300,450]
    assert r["ttft_collectives_ns"] == 100
    assert r["ttft_devices_ns"] == {"h/c0": 100, "h/c1": 100}


@settings(max_examples=30, deadline=None)
@given(n1=st.integers(2, 40), n2=st.integers(2, 40), a=st.floats(1, 1e9), b=st.floats(1, 1e9))
def test_change_point_finds_a_step(n1: int, n2: int, a: float, b: float) -> None:
    if abs(a - b) < 1e-3 * max(a, b):
        return
    v = np.r_[np.full(n1, a), np.full(n2, b)]
    cp = change_point(np.arange(n1 + n2) * 10, v)
    assert cp is not None and cp[0] == n1 * 10
    assert cp[1] == pytest.approx(a) and cp[2] == pytest.approx(b)


def test_link_counters_as_rates() -> None:
    rows = []
    for k in range(10):
        for link, rate in (("h0/chip0-chip1", 1e9), ("h0/chip1-chip2", 2e8)):
            for direction in ("transmit", "receive"):
                rows.append(dict(name="accel.link.io", kind="sum", time_ns=k * 10**9,
                                 value=rate * k, link=link, attrs=direction))  # fmt: skip
    c = correlate_counters(MetricPoints.from_rows(rows), "h0/chip1-chip2")
    s = c["series"]["accel.link.io"]
    assert c["kind"] == "link"
    assert s["median"] == pytest.approx(2 * 2e8)
    assert s["peer_median"] == pytest.approx(2 * 1e9)
