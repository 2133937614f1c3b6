"""Temporal/idle/kernel breakdowns, overlap and launch stats against brute-force ground truth."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.intervals import merge_intervals
from otel_ext.analysis.rank.breakdown import (
    drop_last_step,
    idle_breakdown,
    kernel_breakdown,
    launch_stats,
    temporal_breakdown,
)
from otel_ext.analysis.rank.overlap import comm_comp_overlap
from otel_ext.analysis.table import Category, EventTable

DEV = [Category.KERNEL_COMPUTE, Category.KERNEL_COMM, Category.MEMCPY, Category.MEMSET]

_event = st.tuples(
    st.integers(0, 300),
    st.integers(0, 60),
    st.sampled_from(DEV),
    st.integers(0, 2),
    st.integers(0, 2),
)


def _table(events: list[tuple[int, int, int, int, int]]) -> EventTable:
    return EventTable.from_rows(
        dict(start_ns=s, end_ns=s + d, category=c, stream=stream, rank=rank)
        for s, d, c, stream, rank in events
    )


def _cover(events, pred) -> np.ndarray:
    occ = np.zeros(400, dtype=bool)
    for s, d, c, _, _ in events:
        if pred(c):
            occ[s : s + d] = True
    return occ


@settings(max_examples=150, deadline=None)
@given(st.lists(_event, min_size=1, max_size=40))
def test_temporal_and_overlap_match_brute_force(events) -> None:
    t = _table(events)
    got = {r.rank: r for r in temporal_breakdown(t)}
    ov = {r.rank: r for r in comm_comp_overlap(t)}
    for rank in sorted({e[4] for e in events}):
        ev = [e for e in events if e[4] == rank]
        window = max(s + d for s, d, *_ in ev) - min(s for s, *_ in ev)
        busy = _cover(ev, lambda c: True).sum()
        comp = _cover(ev, lambda c: c == Category.KERNEL_COMPUTE)
        comm = _cover(ev, lambda c: c == Category.KERNEL_COMM)
        r = got[rank]
        assert r.kernel_window_ns == window
        assert r.idle_ns == window - busy
        assert r.compute_ns == comp.sum()
        assert r.non_compute_ns == busy - comp.sum()
        assert r.comm_ns == comm.sum()
        if window:
            assert abs(r.idle_pct + r.compute_pct + r.non_compute_pct - 100) < 1e-3
        o = ov[rank]
        assert o.overlap_ns == (comp & comm).sum()
        assert o.exposed_comm_ns == (comm & ~comp).sum()
        assert (o.overlap_pct is None) == (comm.sum() == 0)


@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 20)), min_size=1, max_size=30))
def test_merge_is_order_invariant_and_disjoint(pairs) -> None:
    s = np.array([p[0] for p in pairs])
    e = s + np.array([p[1] for p in pairs])
    ms, me = merge_intervals(s, e)
    perm = np.random.default_rng(0).permutation(len(s))
    ms2, me2 = merge_intervals(s[perm], e[perm])
    assert ms.tolist() == ms2.tolist() and me.tolist() == me2.tolist()
    assert (ms[1:] > me[:-1]).all()


def test_shift_invariance_and_scale() -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    start = np.sort(rng.integers(0, 10**9, n))
    rows = [
        dict(start_ns=int(s), end_ns=int(s) + int(d), category=int(c), rank=0, stream=7)
        for s, d, c in zip(start, rng.integers(0, 50_000, n), rng.choice([3, 4, 5], n))
    ]
    a = temporal_breakdown(EventTable.from_rows(rows))[0]
    for r in rows:
        r["start_ns"] += 1_700_000_000_000_000_000
        r["end_ns"] += 1_700_000_000_000_000_000
    b = temporal_breakdown(EventTable.from_rows(rows))[0]
    assert (a.idle_ns, a.compute_ns, a.non_compute_ns) == (
        b.idle_ns,
        b.compute_ns,
        b.non_compute_ns,
    )


def test_idle_breakdown_classes() -> None:
    C = Category
    rows = [
        # kernel 1 at 100..200 launched at 0
        dict(start_ns=0, end_ns=5, category=C.RUNTIME, correlation=1, rank=0),
        dict(start_ns=100, end_ns=200, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
        # kernel 2 launched at 150 (before kernel 1 ends), starts at 210: gap 10 -> kernel wait
        dict(start_ns=150, end_ns=155, category=C.RUNTIME, correlation=2, rank=0),
        dict(start_ns=210, end_ns=300, category=C.KERNEL_COMPUTE, correlation=2, rank=0, stream=7),
        # kernel 3 launched at 400 (after kernel 2 ended at 300) -> host wait, gap 110
        dict(start_ns=400, end_ns=405, category=C.RUNTIME, correlation=3, rank=0),
        dict(start_ns=410, end_ns=500, category=C.KERNEL_COMPUTE, correlation=3, rank=0, stream=7),
        # kernel 4 launched early, gap 100 >= threshold -> other
        dict(start_ns=420, end_ns=425, category=C.RUNTIME, correlation=4, rank=0),
        dict(start_ns=600, end_ns=700, category=C.MEMCPY, correlation=4, rank=0, stream=7),
    ]
    (r,) = idle_breakdown(EventTable.from_rows(rows), kernel_wait_threshold_ns=50)
    assert (r.idle_ns, r.host_wait_ns, r.kernel_wait_ns, r.other_ns) == (220, 110, 10, 100)
    (ls,) = launch_stats(EventTable.from_rows(rows))
    assert ls.launched == 4 and ls.delay_max_ns == 180 and ls.before_launch == 0
    assert ls.delay_mean_ns == (100 + 60 + 10 + 180) / 4


def test_kernel_breakdown_totals() -> None:
    C = Category
    rows = [
        dict(start_ns=0, end_ns=10 * (i + 1), category=C.KERNEL_COMPUTE, name=f"k{i}", rank=0)
        for i in range(5)
    ]
    rows.append(
        dict(start_ns=0, end_ns=100, category=C.KERNEL_COMM, name="ncclDevKernel_X", rank=0)
    )
    kb = kernel_breakdown(EventTable.from_rows(rows), top=2)
    assert [r["name"] for r in kb.by_name] == ["ncclDevKernel_X", "k4", "others"]
    assert kb.by_name[-1]["total_ns"] == 10 + 20 + 30 + 40
    assert sum(r["total_ns"] for r in kb.by_name) == 250
    assert {r["category"]: r["total_ns"] for r in kb.by_category} == {
        "communication": 100,
        "compute": 150,
    }


def test_drop_last_step_keeps_what_hta_keeps() -> None:
    C = Category
    rows = [
        dict(start_ns=0, end_ns=100, category=C.STEP, name="ProfilerStep#1", rank=0, source="f"),
        dict(start_ns=100, end_ns=200, category=C.STEP, name="ProfilerStep#2", rank=0, source="f"),
        dict(start_ns=10, end_ns=11, category=C.RUNTIME, correlation=1, rank=0, source="f"),
        dict(start_ns=150, end_ns=151, category=C.RUNTIME, correlation=2, rank=0, source="f"),
        # launched in step 1, runs during step 2: kept
        dict(
            start_ns=120,
            end_ns=130,
            category=C.KERNEL_COMPUTE,
            correlation=1,
            rank=0,
            stream=7,
            source="f",
        ),
        dict(
            start_ns=160,
            end_ns=170,
            category=C.KERNEL_COMPUTE,
            correlation=2,
            rank=0,
            stream=7,
            source="f",
        ),
    ]
    kept = drop_last_step(EventTable.from_rows(rows))
    assert sorted(kept["start_ns"].tolist()) == [0, 10, 120]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 200),
            st.integers(0, 30),
            st.integers(0, 2),
            st.integers(0, 1),
            st.booleans(),
            st.integers(0, 200),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_idle_breakdown_matches_brute_force(events) -> None:
    """Per rank and stream, kernels in start order (ties in table order); each gap a host
    wait when the kernel's launch began after the previous kernel ended, else a kernel wait
    under the threshold, else other."""
    rows = []
    for i, (s, d, stream, rank, launched, ls) in enumerate(events):
        rows.append(dict(start_ns=s, end_ns=s + d, category=Category.KERNEL_COMPUTE,
                         stream=stream, rank=rank, correlation=i if launched else -1))  # fmt: skip
        if launched:
            rows.append(dict(start_ns=ls, end_ns=ls + 1, category=Category.RUNTIME,
                             rank=rank, correlation=i))  # fmt: skip
    got = {(r.rank, r.stream): r for r in idle_breakdown(EventTable.from_rows(rows),
                                                         kernel_wait_threshold_ns=10)}  # fmt: skip
    keys = sorted({(e[3], e[2]) for e in events})
    assert sorted(got) == keys
    for rank, stream in keys:
        ks = sorted(
            (e for e in events if (e[3], e[2]) == (rank, stream)), key=lambda e: e[0]
        )  # Python's sort is stable: ties stay in table order
        hw = kw = ot = 0
        for prev, k in itertools.pairwise(ks):
            gap = k[0] - (prev[0] + prev[1])
            if k[4] and k[5] > prev[0] + prev[1]:
                hw += gap
            elif gap < 10:
                kw += gap
            else:
                ot += gap
        r = got[(rank, stream)]
        assert (r.host_wait_ns, r.kernel_wait_ns, r.other_ns) == (hw, kw, ot)
