"""Site-level straggler tests and the network model, against ground truth and by property.

The estimators here (the order test, Tarone's family size, self-caused lateness, the path
bandwidths) are checked against brute-force enumeration, against synthetic jobs whose slow rank
or slow path is known, and for invariance: to a constant clock offset per rank (durations are
read on each rank's own clock), to the order of the rows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.network_paths import p2p_transfers, path_stats, unpaired_transfer_stats
from otel_ext.analysis.cross.straggler_sites import (
    adjust_tarone,
    collective_sites,
    self_caused_lateness,
    site_tests,
    uniform_sum_upper_tail,
)
from otel_ext.analysis.findings.build import network_path_findings, unpaired_transfer_findings
from otel_ext.analysis.table import Category, EventTable


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(2, 5), data=st.data())
def test_uniform_sum_tail_equals_enumeration(n: int, k: int, data: st.DataObject) -> None:
    total = data.draw(st.integers(-1, n * (k - 1) + 1))
    sums = [sum(c) for c in itertools.product(range(k), repeat=n)]
    expected = sum(1 for s in sums if s >= total) / len(sums)
    assert abs(uniform_sum_upper_tail(total, n, k) - expected) < 1e-12


def test_uniform_sum_tail_normal_branch_close_to_exact() -> None:
    # past the exact size the normal approximation is used: compare it where both exist
    import otel_ext.analysis.cross.straggler_sites as mod

    exact = uniform_sum_upper_tail(140, 40, 8)
    saved = mod._EXACT_CELLS
    try:
        mod._EXACT_CELLS = 0
        approx = uniform_sum_upper_tail(140, 40, 8)
    finally:
        mod._EXACT_CELLS = saved
    assert abs(approx - exact) < 0.2 * exact + 1e-4


def test_tarone_ignores_tests_that_cannot_reach_the_level() -> None:
    p = np.array([0.004, 0.3, 0.3, 0.3])
    # three tests with 2 instances of 2 members: at best p = 1/4, never below alpha
    assert adjust_tarone(p, np.array([1e-6, 0.25, 0.25, 0.25]), 0.01)[0] == p[0]
    # the same four tests all able to reach it: Bonferroni over four
    assert abs(adjust_tarone(p, np.full(4, 1e-6), 0.01)[0] - 0.016) < 1e-12


def _job(
    rng: np.random.Generator,
    *,
    ranks: int = 4,
    steps: int = 12,
    slow: int | None = None,
    delay_ns: float = 0.0,
    noise_ns: float = 200_000.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Members of a job of ``steps`` x (all-reduce, all-gather, all-to-all): the slow rank is
    late only at the all-reduce. Returns inst, rank, lateness, site of instance, labels."""
    inst, rank, late = [], [], []
    site = []
    for s in range(steps):
        for j in range(3):
            k = s * 3 + j
            site.append(j)
            for r in range(ranks):
                inst.append(k)
                rank.append(r)
                x = rng.exponential(noise_ns)  # right-skewed, as scheduler delays are
                if r == slow and j == 0:
                    x += delay_ns
                late.append(x)
    lat = np.array(late)
    inst_a = np.array(inst)
    med = np.array([np.median(lat[inst_a == i]) for i in range(inst_a.max() + 1)])
    return (
        inst_a,
        np.array(rank),
        lat - med[inst_a],
        np.array(site),
        ["allreduce #0", "allgather #0", "alltoall #0"],
    )


def test_slow_rank_found_at_its_site_where_pooling_dilutes() -> None:
    found = 0
    stronger = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        slow = int(rng.integers(4))
        inst, rank, late, site, labels = _job(rng, slow=slow, delay_ns=2_000_000)
        tests = site_tests(inst, rank, late, site, labels)
        best = min(tests, key=lambda t: t.p_adjusted)
        found += best.rank == slow and best.site == "allreduce #0" and best.p_adjusted <= 0.01
        pooled = next(t for t in tests if t.site == "all" and t.rank == slow)
        mine = next(t for t in tests if t.site == "allreduce #0" and t.rank == slow)
        stronger += mine.p_order < pooled.p_order
    assert found == 40
    # the reason for sites: the order of arrivals, pooled, is diluted by the collectives
    # where the slow rank has caught up
    assert stronger >= 36


def test_no_rank_significant_on_exchangeable_ranks() -> None:
    """Specificity on healthy jobs with right-skewed noise: family-wise error ≤ alpha."""
    false = 0
    runs = 300
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        inst, rank, late, site, labels = _job(rng)
        tests = site_tests(inst, rank, late, site, labels)
        false += any(t.p_adjusted <= 0.01 for t in tests)
    assert false <= 0.01 * runs + 3  # binomial slack around the level


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.integers(-(10**9), 10**9))
def test_site_tests_invariant_to_member_order_and_instance_shift(seed: int, shift: int) -> None:
    # the order test reads only the order of members within an instance: shifting one
    # instance's lateness by a constant, or listing members in another order, changes nothing
    rng = np.random.default_rng(seed)
    inst, rank, late, site, labels = _job(rng, slow=1, delay_ns=500_000)
    a = site_tests(inst, rank, late, site, labels)
    perm = rng.permutation(len(inst))
    by_inst = (rng.integers(-3, 4, inst.max() + 1) * shift).astype(np.float64)
    b = site_tests(inst[perm], rank[perm], (late + by_inst[inst])[perm], site, labels)
    key = lambda t: (t.rank, t.site)  # noqa: E731
    for x, y in zip(sorted(a, key=key), sorted(b, key=key)):
        assert (x.rank, x.site, x.instances, x.last) == (y.rank, y.site, y.instances, y.last)
        assert x.p_order == y.p_order
        # the sum test's draws see the same values in the same canonical order: the same
        # estimate but for float rounding of the shifted sums at a draw's exact tie
        assert abs(x.p_sum - y.p_sum) <= 0.002


@settings(max_examples=40, deadline=None)
@given(offsets=st.lists(st.integers(-(10**10), 10**10), min_size=3, max_size=3))
def test_self_caused_lateness_invariant_to_rank_clock_offsets(offsets: list[int]) -> None:
    # a constant offset of one rank's clock moves its arrivals and its exits alike: its
    # gaps, and so its self-caused lateness, do not change
    rng = np.random.default_rng(7)
    n_inst, ranks = 10, 3
    inst = np.repeat(np.arange(n_inst), ranks)
    rank = np.tile(np.arange(ranks), n_inst)
    start = (inst * 1_000_000 + rng.integers(0, 100_000, len(inst))).astype(np.int64)
    end = start + 300_000
    off = np.array(offsets, dtype=np.int64)[rank]
    raw = np.zeros(len(inst))
    a = self_caused_lateness(inst, rank, start, end, raw)
    b = self_caused_lateness(inst, rank, start + off, end + off, raw)
    assert np.allclose(a[inst > 0], b[inst > 0])


def test_waiting_in_a_receive_is_not_self_caused() -> None:
    # after each collective rank 1 receives across a slow path (38 ms), then computes as long
    # as the others (5 ms) and arrives last at the next collective: its raw lateness is the
    # receive, its self-caused lateness is not
    inst, rank, start, end, w_rank, w_end = [], [], [], [], [], []
    release = 0
    for k in range(10):
        arrive = {r: release + 5_000_000 + r * 1000 for r in range(4)}
        if k > 0:
            w_rank.append(1)
            w_end.append(release + 38_000_000)
            arrive[1] = release + 38_000_000 + 5_000_000
        done = max(arrive.values()) + 1_000_000
        for r in range(4):
            inst.append(k)
            rank.append(r)
            start.append(arrive[r])
            end.append(done)
        release = done
    inst_a, rank_a = np.array(inst), np.array(rank)
    start_a, end_a = np.array(start, dtype=np.int64), np.array(end, dtype=np.int64)
    med = np.array([np.median(start_a[inst_a == i]) for i in range(10)])
    raw = start_a - med[inst_a]
    without = self_caused_lateness(inst_a, rank_a, start_a, end_a, raw)
    with_wait = self_caused_lateness(
        inst_a,
        rank_a,
        start_a,
        end_a,
        raw,
        wait_rank=np.array(w_rank),
        wait_end=np.array(w_end, dtype=np.int64),
    )
    ones = (rank_a == 1) & (inst_a > 0)
    assert (without[ones] > 30_000_000).all()
    assert (np.abs(with_wait[ones]) < 10_000).all()


def test_sites_take_the_position_within_the_step() -> None:
    code, labels = collective_sites(
        ["allreduce"] * 6,
        ["0"] * 6,
        [f"k{i}" for i in range(6)],
        np.full(6, -1),
        np.arange(6),
        step_of_instance=np.array([0, 0, 0, 1, 1, 1]),
    )
    assert code.tolist() == [0, 1, 2, 0, 1, 2]
    assert labels == ["allreduce g=0 #0", "allreduce g=0 #1", "allreduce g=0 #2"]


def _p2p_rows(
    rng: np.random.Generator,
    *,
    slow_ns: int | None,
    offsets: dict[int, int] | None = None,
    steps: int = 12,
) -> list[dict]:
    """A ring of 1 MiB transfers over 4 ranks on two hosts (0,1 on hA; 2,3 on hB): 1->2 and
    3->0 cross hosts. Each end's duration: the later end's is the transfer, the earlier end's
    also its wait for the other."""
    offsets = offsets or {}
    rows = []
    for k in range(steps):
        for src in range(4):
            dst = (src + 1) % 4
            cross = (src < 2) != (dst < 2)
            transfer = int(rng.normal(500_000, 30_000))
            if cross and slow_ns is not None:
                transfer = int(rng.normal(slow_ns, slow_ns * 0.05))
            t0 = k * 200_000_000
            ready = {src: t0 + int(rng.integers(0, 50_000)), dst: t0 + int(rng.integers(0, 50_000))}
            done = max(ready.values()) + transfer
            cid = f"pg:{src}->{dst}:{k}"
            for r, op in ((src, "send"), (dst, "recv")):
                o = offsets.get(r, 0)
                rows.append(
                    dict(
                        rank=r,
                        category=Category.COLLECTIVE,
                        coll_op=op,
                        coll_id=cid,
                        coll_bytes=1 << 20,
                        start_ns=ready[r] + o,
                        end_ns=done + o,
                    )
                )
    return rows


HOSTS = {0: "hA", 1: "hA", 2: "hB", 3: "hB"}


def test_slow_inter_host_path_named_healthy_not() -> None:
    for seed in range(20):
        rng = np.random.default_rng(seed)
        t = EventTable.from_rows(_p2p_rows(rng, slow_ns=int(rng.uniform(40e6, 100e6))))
        paths = {p.path: p for p in path_stats(p2p_transfers(t, match_collectives(t)), HOSTS)}
        assert paths["hA->hB"].slow and paths["hB->hA"].slow
        assert not paths["hA->hA"].slow and not paths["hB->hB"].slow
        findings = network_path_findings([p.as_dict() for p in paths.values()], lambda ns: 0.0)
        assert [f.target for f in findings] == ["hA<->hB"]
        healthy = EventTable.from_rows(_p2p_rows(rng, slow_ns=None))
        hp = path_stats(p2p_transfers(healthy, match_collectives(healthy)), HOSTS)
        assert not any(p.slow for p in hp)


@settings(max_examples=30, deadline=None)
@given(offset=st.integers(-(10**11), 10**11), seed=st.integers(0, 1000))
def test_path_bandwidth_invariant_to_a_common_shift_and_row_order(offset: int, seed: int) -> None:
    rows = _p2p_rows(np.random.default_rng(seed), slow_ns=60_000_000)
    a = EventTable.from_rows(rows)
    shifted = [dict(r, start_ns=r["start_ns"] + offset, end_ns=r["end_ns"] + offset) for r in rows]
    order = np.random.default_rng(seed + 1).permutation(len(rows))
    b = EventTable.from_rows([shifted[int(i)] for i in order])
    pa = path_stats(p2p_transfers(a, match_collectives(a)), HOSTS)
    pb = path_stats(p2p_transfers(b, match_collectives(b)), HOSTS)
    assert [(p.path, p.transfers, p.slow, p.median_transfer_ns) for p in pa] == [
        (p.path, p.transfers, p.slow, p.median_transfer_ns) for p in pb
    ]


def test_transfer_time_runs_from_both_ready_to_the_receive_end() -> None:
    # a send that ends at once (buffered) and a receive that waits for the data: the
    # transfer is the receive's end minus the later start, not the shorter duration
    rows = [
        dict(rank=0, category=Category.COLLECTIVE, coll_op="send", coll_id="pg:0->1:0",
             coll_bytes=1 << 20, start_ns=1_000, end_ns=2_000),
        dict(rank=1, category=Category.COLLECTIVE, coll_op="recv", coll_id="pg:0->1:0",
             coll_bytes=1 << 20, start_ns=500, end_ns=90_001_000),
    ]  # fmt: skip
    t = EventTable.from_rows(rows)
    tr = p2p_transfers(t, match_collectives(t))
    assert tr.src_rank.tolist() == [0] and tr.dst_rank.tolist() == [1]
    assert tr.transfer_ns.tolist() == [90_000_000]


def _unpaired_rows(rng: np.random.Generator, *, slow_send: set, slow_recv: set) -> list[dict]:
    rows = []
    for k in range(12):
        for r in range(4):
            for name, slow in (("gloo:send", slow_send), ("gloo:recv", slow_recv)):
                dur = int(rng.normal(80e6, 4e6)) if r in slow else int(rng.normal(6e5, 5e4))
                t0 = k * 300_000_000
                rows.append(
                    dict(rank=r, category=Category.CPU_OP, name=name, start_ns=t0,
                         end_ns=t0 + dur)
                )  # fmt: skip
    return rows


def test_unpaired_slow_sends_and_receives_make_a_slow_transfer_finding() -> None:
    rng = np.random.default_rng(3)
    both = EventTable.from_rows(_unpaired_rows(rng, slow_send={1, 3}, slow_recv={0, 2}))
    stats = [s.as_dict() for s in unpaired_transfer_stats(both, HOSTS)]
    assert {(s["rank"], s["direction"]) for s in stats if s["slow"]} == {
        (1, "send"),
        (3, "send"),
        (0, "recv"),
        (2, "recv"),
    }
    f = unpaired_transfer_findings(stats, lambda ns: 0.0)
    assert [x.kind for x in f] == ["slow-transfers"]
    assert f[0].target == "hA,hB->hA,hB"
    # slow receives alone, their sends called on time: no late sender, still a finding
    on_time = EventTable.from_rows(_unpaired_rows(rng, slow_send=set(), slow_recv={2}))
    stats = [s.as_dict() for s in unpaired_transfer_stats(on_time, HOSTS)]
    assert [x.target for x in unpaired_transfer_findings(stats, lambda ns: 0.0)] == ["*->hB"]


def _ring_without_peers(rng: np.random.Generator, *, late_sender: bool) -> list[dict]:
    """gloo's Kineto rows of a ring (r sends to r+1) without peers: ``c10d::send`` when the
    rank calls it, ``gloo:recv`` until the data arrived. Ranks 0 and 2 receive slowly: either
    the transfers into them take 80 ms (every send called at once), or their senders (3 and 1)
    call their sends 80 ms late."""
    rows = []
    for k in range(12):
        t0 = k * 300_000_000
        for r in range(4):
            src = (r - 1) % 4
            slow = r in (0, 2)
            call = t0 + int(rng.integers(0, 100_000))
            if slow and late_sender:
                call += 80_000_000
            transfer = 80_000_000 if (slow and not late_sender) else 500_000
            recv_start = t0 + int(rng.integers(0, 100_000))
            recv_end = max(call, recv_start) + transfer + int(rng.integers(0, 50_000))
            rows.append(
                dict(
                    rank=src,
                    category=Category.CPU_OP,
                    name="c10d::send",
                    start_ns=call,
                    end_ns=call + 20_000,
                )
            )
            rows.append(
                dict(
                    rank=r,
                    category=Category.CPU_OP,
                    name="gloo:recv",
                    start_ns=recv_start,
                    end_ns=recv_end,
                )
            )
    return rows  # fmt: skip


def test_slow_receives_without_a_late_sender_are_slow_transfers() -> None:
    rng = np.random.default_rng(11)
    slow_path = EventTable.from_rows(_ring_without_peers(rng, late_sender=False))
    stats = [s.as_dict() for s in unpaired_transfer_stats(slow_path, HOSTS)]
    recv = {s["rank"]: s for s in stats if s["direction"] == "recv"}
    assert recv[0]["slow"] and recv[2]["slow"] and not recv[1]["slow"]
    assert recv[0]["late_sender_share"] == 0.0 and recv[2]["late_sender_share"] == 0.0
    f = unpaired_transfer_findings(stats, lambda ns: 0.0)
    assert [x.kind for x in f] == ["slow-transfers"] and f[0].target == "*->hA,hB"
    # the same slow receives because the senders called late: no finding
    late = EventTable.from_rows(_ring_without_peers(rng, late_sender=True))
    stats = [s.as_dict() for s in unpaired_transfer_stats(late, HOSTS)]
    recv = {s["rank"]: s for s in stats if s["direction"] == "recv"}
    assert recv[0]["slow"] and recv[0]["late_sender_share"] == 1.0
    assert unpaired_transfer_findings(stats, lambda ns: 0.0) == []


def test_slow_path_finding_carries_both_ends_port_counters() -> None:
    """With the node agent's port counters loaded, the path finding shows both hosts' NICs
    (rates, errors, drops), as ``nic_stats`` reads them."""
    import json

    from otel_ext.analysis.loaders.metrics import MetricPoints

    t0 = 1_700_000_000 * 10**9
    rows = []
    for host, drops in (("hA", [0, 0, 0]), ("hB", [0, 40, 90])):
        for i, ts in enumerate((0, 10, 20)):
            attrs = {"accel.link.id": f"{host}/eth0", "accel.host.id": host,
                     "network.interface.name": "eth0", "hw.id": "eth0"}  # fmt: skip
            for name, v, more in (
                ("hw.network.io", 12e6 * ts, {"network.io.direction": "transmit"}),
                ("hw.errors", drops[i], {"error.type": "rx_dropped"}),
            ):
                rows.append(dict(name=name, kind="sum", time_ns=t0 + ts * 10**9, value=float(v),
                                 start_time_ns=0, host=host, link=f"{host}/eth0",
                                 attrs=json.dumps({**attrs, **more}, sort_keys=True)))  # fmt: skip
    points = MetricPoints.from_rows(rows)
    rng = np.random.default_rng(5)
    t = EventTable.from_rows(_p2p_rows(rng, slow_ns=80_000_000))
    paths = [p.as_dict() for p in path_stats(p2p_transfers(t, match_collectives(t)), HOSTS)]
    (f,) = network_path_findings(paths, lambda ns: 0.0, points)
    nic = f.evidence["nic"]
    assert [(e["src_host"], e["dst_host"]) for e in nic] == [("hA", "hB"), ("hB", "hA")]
    by_host = {p["host"]: p for e in nic for p in e["ports"]}
    assert by_host["hB"]["drops"] == 90.0 and by_host["hA"]["drops"] == 0.0
    assert abs(by_host["hA"]["tx_bytes_per_s"] - 12e6) < 1.0
    assert "ports:" in f.summary


def test_reports_show_the_network_model() -> None:
    """The text and HTML reports carry the network table: host paths, or per-rank transfers
    when the trace names no peers."""
    from otel_ext.analysis.engine import analyze
    from otel_ext.analysis.report.html import render_html
    from otel_ext.analysis.report.text import render_text

    rng = np.random.default_rng(9)
    doc = analyze(EventTable.from_rows(_p2p_rows(rng, slow_ns=70_000_000)))
    # no hosts named: each rank is its own "host"; the two slow paths stand against the others
    assert [(f["kind"], f["target"]) for f in doc["findings"]][:2] == [
        ("slow-network-path", "rank1->rank2"),
        ("slow-network-path", "rank3->rank0"),
    ]
    text, html = render_text(doc), render_html(doc)
    assert "Network paths:" in text and "SLOW" in text
    assert "<h2>Network paths</h2>" in html and ">slow<" in html
    unpaired = analyze(EventTable.from_rows(_ring_without_peers(rng, late_sender=False)))
    assert "the trace names no peers" in render_text(unpaired)
    assert "Transfers (the trace names no peers)" in render_html(unpaired)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=2, max_size=40))
def test_median_without_each_equals_the_median_of_the_others(values: list[int]) -> None:
    from otel_ext._arrays import median
    from otel_ext.analysis.cross.network_paths import _median_without_each

    v = np.asarray(values, dtype=np.float64)
    want = [float(median(np.delete(v, i))) for i in range(len(v))]
    assert _median_without_each(v).tolist() == want
