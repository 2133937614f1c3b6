"""Ping-pong host alignment, collective-based offsets and causality repair, with known truth."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.clocks import (
    align_hosts,
    count_violations,
    estimate_offsets_from_collectives,
    pingpong_offset,
    repair_causality,
)
from otel_ext.clocks.synthetic import SyntheticClock
from otel_ext.errors import InputError


def _pingpong(offset_ns: int, skew_ppm: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    b = SyntheticClock(
        offset_ticks=offset_ns, skew_ppm=skew_ppm, wander_ppm=2.0, wander_period_s=60.0
    )
    t1_true = np.arange(n) * 2e8 + 1e6
    fwd = 20_000 + rng.exponential(3_000, n)  # asymmetric paths
    back = 35_000 + rng.exponential(8_000, n)
    turn = 5_000 + rng.exponential(1_000, n)
    t2_true = t1_true + fwd
    t3_true = t2_true + turn
    t4_true = t3_true + back
    t2 = b.ticks_at(t2_true).astype(np.int64)
    t3 = b.ticks_at(t3_true).astype(np.int64)
    return (
        b,
        np.floor(t1_true).astype(np.int64),
        t2,
        t3,
        np.floor(t4_true).astype(np.int64),
        t2_true,
    )


def test_pingpong_known_offset_bound_holds() -> None:
    b, t1, t2, t3, t4, t2_true = _pingpong(3_700_000, 15.0, 200, seed=1)
    m = align_hosts(t1, t2, t3, t4, domain="host1")
    host, bound = m.align(t2)
    assert np.all(np.abs(host - t2_true) <= bound)
    # B's clock at true time 0 read 3.7 ms: the fitted offset recovers it within the bound
    est0 = m.to_ticks(np.array([0])).astype(np.int64)[0]
    assert abs(est0 - 3_700_000) <= float(m.bound_ns(np.array([est0]))[0]) + 2
    # the classic midpoint estimate is biased by half the path asymmetry
    offset, delay = pingpong_offset(t1, t2, t3, t4)
    truth = b.elapsed_ticks(t2_true) + 3_700_000 - t2_true
    assert np.median(offset - truth) < -5_000
    assert np.all(delay > 0)
    assert m.quality == "good"


def _collective_trace(seed: int, ranks: int = 6, n: int = 300, drift: bool = False):
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0.0], rng.uniform(-5e6, 5e6, ranks - 1)])
    drifts = (
        np.concatenate([[0.0], rng.uniform(-30e-6, 30e-6, ranks - 1)]) if drift else np.zeros(ranks)
    )
    starts = np.arange(n) * (2e8 if drift else 1e6) + 1e9
    rows = []
    for c, t in enumerate(starts):
        enter = t + rng.exponential(20_000, ranks)
        release = enter.max() + 3_000
        exit_ = release + rng.uniform(0, 1_000, ranks)  # members leave nearly together
        for r in range(ranks):
            rows.append((r, c, enter[r], exit_[r]))
    arr = np.array(rows)
    rank, key = arr[:, 0].astype(int), arr[:, 1].astype(int)
    t_ref = float(np.median(arr[:, 3]))

    def local(t):
        return t + offsets[rank] + drifts[rank] * (t - t_ref)

    return rank, key, local(arr[:, 2]), local(arr[:, 3]), offsets, drifts, t_ref


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collective_offsets_recover_truth_within_bound(seed: int) -> None:
    rank, key, enter, exit_, offsets, _, _ = _collective_trace(seed)
    est = estimate_offsets_from_collectives(rank, key, enter, exit_)
    err = np.abs(est.offset_ns - offsets)
    assert np.all(err <= est.bound_ns + 1e-6)
    assert err.max() < 2_000
    assert est.consistent
    assert np.all((est.lower_ns <= offsets + 1e-6) & (offsets <= est.upper_ns + 1e-6))


def test_collective_offsets_with_drift() -> None:
    rank, key, enter, exit_, offsets, drifts, t_ref = _collective_trace(3, n=200, drift=True)
    est = estimate_offsets_from_collectives(rank, key, enter, exit_)
    # compare at the estimator's own reference time
    truth = offsets + drifts * (est.reference_time_ns - t_ref)
    assert np.all(np.abs(est.offset_ns - truth) <= est.bound_ns + 1e-6)
    assert np.allclose(est.drift_ppm, drifts * 1e6, atol=0.1)
    aligned = est.to_reference_ns(rank, exit_)
    assert np.all(
        np.abs(aligned.reshape(-1, 6) - aligned.reshape(-1, 6).mean(axis=1, keepdims=True)) < 3_000
    )


def test_collective_offsets_need_collectives() -> None:
    with pytest.raises(InputError, match="two or more members"):
        estimate_offsets_from_collectives([0, 1], [1, 2], [0, 0], [1, 1])


def _exchange(seed: int, n: int = 400):
    """Two devices exchanging messages, one with a 4 µs clock error and 2 ppm drift."""
    rng = np.random.default_rng(seed)
    send_true = np.sort(rng.uniform(0, 1e8, n))
    latency = rng.uniform(500, 5_000, n)
    recv_end_true = send_true + latency
    dur = rng.uniform(200, 2_000, n)
    err_b = 4_000 + 2e-6 * recv_end_true
    start = np.concatenate([send_true, recv_end_true - dur + err_b]).astype(np.int64)
    end = np.concatenate([send_true + dur, recv_end_true + err_b]).astype(np.int64)
    dom = np.repeat([0, 1], n)
    # B → A replies too, so offsets alone cannot fix everything at once
    send = np.arange(n)
    recv = np.arange(n) + n
    return dom, start - 8_000 * dom, end - 8_000 * dom, send, recv


@pytest.mark.parametrize("seed", [0, 1])
def test_repair_removes_every_reversal_and_keeps_order(seed: int) -> None:
    dom, start, end, send, recv = _exchange(seed)
    before = count_violations(start, end, send_event=send, recv_event=recv, min_latency_ns=100)
    rep = repair_causality(dom, start, end, send_event=send, recv_event=recv, min_latency_ns=100)
    assert before > 0 and rep.violations_before == before
    assert rep.violations_after == 0 and rep.unresolved == 0
    for d in (0, 1):
        sel = dom == d
        orig = np.argsort(start[sel], kind="stable")
        assert np.all(np.diff(rep.start_ns[sel][orig]) >= 0)
    assert np.all(rep.end_ns - rep.start_ns >= end - start)
    # every shift is reported
    moved = (rep.shift_start_ns != 0) | (rep.shift_end_ns != 0)
    reported = {r["event"] for r in rep.report() if r["kind"] == "event"}
    offsets = dict(zip(rep.domains.tolist(), rep.domain_offset_ns.tolist()))
    beyond = moved & (
        (rep.shift_start_ns != np.vectorize(offsets.get)(dom))
        | (rep.shift_end_ns != np.vectorize(offsets.get)(dom))
    )
    assert set(np.flatnonzero(beyond).tolist()) <= reported


def test_repair_is_minimal_when_already_causal() -> None:
    dom, start, end, send, recv = _exchange(0)
    fixed = repair_causality(dom, start, end, send_event=send, recv_event=recv, min_latency_ns=100)
    again = repair_causality(
        dom, fixed.start_ns, fixed.end_ns, send_event=send, recv_event=recv, min_latency_ns=100
    )
    assert again.violations_before == 0
    assert not again.shift_start_ns.any() and not again.shift_end_ns.any() and again.report() == []


def test_repair_collectives_members_leave_after_last_entry() -> None:
    dom = np.array([0, 1, 2])
    start = np.array([1_000, 1_500, 5_000])  # rank 2's clock runs 3 µs ahead
    end = np.array([2_000, 2_100, 5_200])
    rep = repair_causality(dom, start, end, collective=np.array([9, 9, 9]))
    assert rep.violations_before == 2 and rep.violations_after == 0
    assert rep.end_ns.min() >= rep.start_ns.max()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(5, 60), st.floats(0.0, 1.0))
def test_repair_property(seed: int, n: int, gamma: float) -> None:
    rng = np.random.default_rng(seed)
    d = 3
    dom = rng.integers(0, d, 4 * n)
    start = rng.integers(0, 1_000_000, 4 * n)
    end = start + rng.integers(0, 50_000, 4 * n)
    send = rng.choice(4 * n, n, replace=False)
    recv = rng.choice(np.setdiff1d(np.arange(4 * n), send), n, replace=False)
    rep = repair_causality(
        dom, start, end, send_event=send, recv_event=recv, min_latency_ns=10, gamma=gamma
    )
    if rep.unresolved == 0:
        assert rep.violations_after == 0
    for k in range(d):
        sel = np.flatnonzero(dom == k)
        order = np.lexsort((sel, start[sel]))
        assert np.all(np.diff(rep.start_ns[sel][order]) >= 0)
    assert np.all(rep.end_ns - rep.start_ns >= end - start)


def test_repair_rejects_bad_input() -> None:
    with pytest.raises(InputError, match="ends before it starts"):
        repair_causality([0], [10], [5])


def _random_problem(seed: int, n: int, ranks: int, colls: int) -> dict:
    """A causal run (messages received after they were sent, collectives whose members all
    arrive before any leaves) seen through ``ranks`` clocks with offsets: the alignment of
    traces whose clocks disagree. Feasible, so the rounds settle."""
    rng = np.random.default_rng(seed)
    m = 4 * n
    dom = rng.integers(0, ranks, m)
    true_start = rng.integers(0, 1_000_000, m)
    dur = rng.integers(0, 50_000, m)
    coll = np.full(m, -1)
    for k in range(colls):  # one member per rank: arrive within 1 µs, leave 2-3 µs later
        at = int(rng.integers(0, 1_000_000))
        for r in range(ranks):
            rows = np.flatnonzero((dom == r) & (coll < 0))
            if rows.size:
                row = rows[np.argmin(np.abs(true_start[rows] - at))]
                coll[row] = k
                true_start[row] = at + rng.integers(0, 1_000)
                dur[row] = 2_000 + rng.integers(0, 1_000)
    true_end = true_start + dur
    send, recv = [], []
    for s in rng.permutation(m)[:n]:  # a receive on another clock that ends late enough
        ok = np.flatnonzero((dom != dom[s]) & (true_end >= true_start[s] + 10))
        if ok.size:
            send.append(int(s))
            recv.append(int(rng.choice(ok)))
    off = rng.integers(-20_000, 20_000, ranks)
    return dict(domain=dom, start_ns=true_start + off[dom], end_ns=true_end + off[dom],
                send_event=np.array(send, dtype=int), recv_event=np.array(recv, dtype=int),
                collective=coll, min_latency_ns=10)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(5, 40), st.integers(2, 4), st.integers(0, 6),
       st.floats(0.0, 1.0))  # fmt: skip
def test_exact_forward_pass_is_the_fixpoint_of_the_rounds(
    seed: int, n: int, ranks: int, colls: int, gamma: float
) -> None:
    """The one-pass forward repair (longest paths in topological order) gives the shifts the
    vectorised rounds converge to, event for event, wherever the rounds converge."""
    p = _random_problem(seed, n, ranks, colls)
    # an acyclic system settles within (constraints + 2) rounds
    cap = 5 * n + colls * ranks * ranks + 2
    rounds = repair_causality(**p, gamma=gamma, max_rounds=cap, domain_offsets=False)
    exact = repair_causality(**p, gamma=gamma, max_rounds=0, domain_offsets=False)
    assert exact.unresolved == 0 and exact.violations_after == 0  # the run was causal
    np.testing.assert_array_equal(exact.start_ns, rounds.start_ns)
    np.testing.assert_array_equal(exact.end_ns, rounds.end_ns)
    assert np.all(exact.end_ns - exact.start_ns >= p["end_ns"] - p["start_ns"])


def test_exact_forward_pass_on_a_long_chain_is_one_pass() -> None:
    """Two clocks whose every collective is out of order by a little: each repair pushes the
    next, a chain as long as the trace (the rounds would need one round per link)."""
    k = 3_000
    base = np.arange(k) * 1_000
    dom = np.r_[np.zeros(k, int), np.ones(k, int)]
    start = np.r_[base + 300, base]  # rank 1's clock 300 ns behind: every end too early
    end = start + 200
    coll = np.r_[np.arange(k), np.arange(k)]
    rep = repair_causality(dom, start, end, collective=coll, domain_offsets=False, gamma=1.0)
    assert rep.violations_before > 0 and rep.violations_after == 0 and rep.unresolved == 0
    assert rep.end_ns[k:].min() >= 0 and np.all(rep.end_ns[k:] >= rep.start_ns[:k])


def test_exact_forward_pass_drops_a_causal_cycle_and_counts_it() -> None:
    """Collectives A and B in opposite orders on two ranks: no shift satisfies both."""
    dom = np.array([0, 0, 1, 1])
    start = np.array([0, 1_000, 0, 1_000])
    end = start + 100
    coll = np.array([0, 1, 1, 0])  # rank 0: A then B; rank 1: B then A
    rep = repair_causality(dom, start, end, collective=coll, domain_offsets=False, max_rounds=0)
    assert rep.unresolved >= 1 and rep.violations_after == rep.unresolved
    assert np.all(np.diff(rep.start_ns[:2]) >= 0) and np.all(np.diff(rep.start_ns[2:]) >= 0)
