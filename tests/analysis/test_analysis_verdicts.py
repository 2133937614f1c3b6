"""Cross-rank verdicts: significance, collectives done right, linear passes, runs and steps."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SHARED_TRACES, require
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.collective_match import bus_factor, match_collectives
from otel_ext.analysis.engine import analyze
from otel_ext.analysis.runs import separate_captures
from otel_ext.analysis.significance import binomial_upper_tail
from otel_ext.analysis.steps import select_steps
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable
from otel_ext.clocks import estimate_offsets_from_collectives, repair_causality
from otel_ext.clocks._collectives import pair_indices


# ---- significance -----------------------------------------------------------------------
@given(n=st.integers(1, 60), p=st.floats(0.01, 0.99), k=st.integers(0, 60))
def test_binomial_tail_matches_the_definition(n: int, p: float, k: int) -> None:
    from math import comb

    want = sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)) if k <= n else 0.0
    got = float(binomial_upper_tail([k], [n], [p])[0])
    assert got == pytest.approx(min(want, 1.0), rel=1e-9, abs=1e-12)


def _ring(n_ranks: int, n_coll: int, late: dict[int, int], seed: int = 0) -> EventTable:
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n_coll):
        t = k * 1_000_000
        arrive = {r: t + int(rng.integers(0, 50_000)) + late.get(r, 0) for r in range(n_ranks)}
        exit_ = max(arrive.values()) + 20_000
        for r in range(n_ranks):
            rows.append(dict(start_ns=arrive[r], end_ns=exit_, rank=r, category=C.KERNEL_COMM,
                             coll_op="allreduce", coll_group="g", coll_seq=k, coll_bytes=1 << 20,
                             coll_group_size=n_ranks))  # fmt: skip
            rows.append(dict(start_ns=arrive[r] - 400_000, end_ns=arrive[r] - 10_000, rank=r,
                             category=C.KERNEL_COMPUTE, name="gemm", stream=1))  # fmt: skip
    return EventTable.from_rows(rows)


def test_chance_leader_is_no_straggler() -> None:
    # equally fast ranks: someone is last at every collective, nobody is a straggler
    for seed in range(5):
        doc = analyze(_ring(8, 40, {}, seed))
        assert not [f for f in doc["findings"] if f["kind"] in ("straggler", "throttle")]
        assert doc["stragglers"][0]["p_last"] > 0.01


def test_persistently_late_rank_is_a_straggler_with_its_statistic() -> None:
    doc = analyze(_ring(8, 40, {5: 200_000}))
    f = next(f for f in doc["findings"] if f["kind"] == "straggler")
    assert f["evidence"]["rank"] == 5
    assert f["evidence"]["last_arrivals"] == 40
    assert f["evidence"]["p_last"] < 1e-6
    assert "last at 40 of 40 collectives" in f["summary"]


# ---- collectives ---------------------------------------------------------------------------
def test_busbw_uses_the_group_size_not_the_ranks_loaded() -> None:
    rows = [dict(start_ns=0, end_ns=1_000_000, rank=r, category=C.KERNEL_COMM, coll_op="allreduce",
                 coll_group="g", coll_seq=0, coll_bytes=8 << 20, coll_group_size=8)
            for r in (0, 1)]  # fmt: skip
    m = match_collectives(EventTable.from_rows(rows))
    assert int(m.effective_group_size[0]) == 8 and m.group_size_known[0]
    assert m.busbw[0] == pytest.approx(m.algbw[0] * bus_factor("allreduce", 8))
    assert m.rows()[0]["group_size_from"] == "metadata"
    for r in rows:
        r["coll_group_size"] = -1
    m2 = match_collectives(EventTable.from_rows(rows))
    assert m2.busbw[0] == pytest.approx(m2.algbw[0] * bus_factor("allreduce", 2))
    assert m2.rows()[0]["group_size_from"] == "ranks seen"


def test_members_that_disagree_are_a_finding() -> None:
    rows = []
    for k in range(6):
        for r in range(4):
            nbytes = 4096 if not (k == 3 and r == 2) else 8192
            rows.append(dict(start_ns=k * 10_000 + r, end_ns=k * 10_000 + 5_000, rank=r,
                             category=C.KERNEL_COMM, coll_op="allreduce", coll_group="g",
                             coll_seq=k, coll_bytes=nbytes))  # fmt: skip
    doc = analyze(EventTable.from_rows(rows))
    mm = doc["collectives"]["mismatches"]
    assert mm == [{"kind": "bytes", "key": "g#3", "op": "allreduce", "group": "g",
                   "bytes_min": 4096, "bytes_max": 8192}]  # fmt: skip
    assert doc["findings"][0]["kind"] == "collective-mismatch"


def test_ordinal_matching_reports_ranks_with_a_different_call_count() -> None:
    rows = [dict(start_ns=k * 10_000, end_ns=k * 10_000 + 500, rank=r, category=C.KERNEL_COMM,
                 name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
            for r in range(3) for k in range(5 if r != 1 else 4)]  # fmt: skip
    mm = match_collectives(EventTable.from_rows(rows)).mismatches()
    assert mm == [{"kind": "count", "op": "allreduce", "group": "", "typical_calls": 5,
                   "ranks": {"1": 4}}]  # fmt: skip


def test_cpu_only_job_matches_its_host_side_collectives() -> None:
    rows = []
    for r in range(3):
        for k in range(4):
            t = k * 10_000
            # the caller's c10d op is the arrival; the gloo worker's op ends at completion
            rows.append(dict(start_ns=t + 30 * r, end_ns=t + 40 * r + 50, rank=r,
                             category=C.CPU_OP, name="c10d::allreduce_", tid=1))  # fmt: skip
            rows.append(dict(start_ns=t + 300 - 50 * r, end_ns=t + 900 + r, rank=r,
                             category=C.CPU_OP, name="gloo:all_reduce", tid=2))  # fmt: skip
            rows.append(dict(start_ns=t + 1000, end_ns=t + 1100, rank=r, category=C.CPU_OP,
                             name="c10d::send", tid=1))  # fmt: skip
    m = match_collectives(EventTable.from_rows(rows))
    assert m.n_instances == 4 and set(m.op) == {"allreduce"}  # point-to-point left out
    assert m.last_rank.tolist() == [2, 2, 2, 2]  # the latest caller, not the latest worker
    assert m.member_end_ns[m.member_instance == 0].tolist() == [900, 901, 902]


# ---- linear passes equal the all-pairs definitions ------------------------------------------
def _all_pairs_interval(rank, key, ent, ext, nr, ref):
    lim = np.full((nr, nr), np.inf)
    i, j = pair_indices(key)
    np.minimum.at(lim, (rank[i], rank[j]), ext[i] - ent[j])
    d = lim.copy()
    np.fill_diagonal(d, np.minimum(np.diag(d), 0.0))
    for k in range(nr):
        d = np.minimum(d, d[:, k : k + 1] + d[k : k + 1, :])
    if np.any(np.diag(d) < 0):
        return None
    return d[:, ref], -d[ref, :]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), nr=st.integers(2, 6), nk=st.integers(1, 8))
def test_causal_interval_through_collective_nodes_equals_all_pairs(seed, nr, nk) -> None:
    rng = np.random.default_rng(seed)
    rank, key, ent, ext = [], [], [], []
    off = rng.integers(-10_000, 10_000, size=nr)
    for k in range(nk):
        members = rng.choice(nr, size=int(rng.integers(2, nr + 1)), replace=False)
        t = k * 100_000
        last = t + int(rng.integers(0, 5_000))
        for r in members:
            rank.append(r)
            key.append(k)
            ent.append(t + int(rng.integers(0, last - t + 1)) + off[r])
            ext.append(last + int(rng.integers(0, 3_000)) + off[r])
    rank, key = np.array(rank), np.array(key)
    ent, ext = np.array(ent, float), np.array(ext, float)
    if len(np.unique(rank)) < nr:
        return
    est = estimate_offsets_from_collectives(rank, key, ent, ext, fit_drift=False)
    want = _all_pairs_interval(rank, key, ent, ext, nr, 0)
    assert est.consistent == (want is not None)
    if want is not None:
        np.testing.assert_allclose(est.upper_ns, np.where(np.arange(nr) == 0, 0, want[0]))
        np.testing.assert_allclose(est.lower_ns, np.where(np.arange(nr) == 0, 0, want[1]))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), slack=st.integers(0, 5_000))
def test_repair_moves_nothing_within_the_slack_and_only_the_excess_beyond(seed, slack) -> None:
    rng = np.random.default_rng(seed)
    n_coll, nr = 5, 3
    dom, start, end, coll = [], [], [], []
    for k in range(n_coll):
        for r in range(nr):
            s = k * 100_000 + int(rng.integers(0, 4_000))
            dom.append(r)
            start.append(s)
            end.append(k * 100_000 + int(rng.integers(0, 8_000)) + 1)
            end[-1] = max(end[-1], s)
            coll.append(k)
    s0, e0 = np.array(start), np.array(end)
    c = np.array(coll)
    rep = repair_causality(dom, s0, e0, collective=c, slack_ns=np.full(len(s0), slack),
                           domain_offsets=False, backward=False)  # fmt: skip
    latest = np.array([s0[c == k].max() for k in range(n_coll)])
    excess = np.maximum(latest[c] - 2 * slack - e0, 0)
    assert rep.violations_after == 0
    if not excess.any():
        assert not rep.shifted.size  # every violation within the clocks' uncertainty: untouched
    # an end moves forward by what exceeds the slack, and the start of the same event never
    assert np.all(rep.end_ns - e0 >= excess)


# ---- runs, ranks and steps ------------------------------------------------------------------
def test_separate_captures_of_one_folder_are_separate_runs() -> None:
    folder = SHARED_TRACES / "tracelens_vllm_mi300x"
    require(folder.is_dir(), f"real traces folder {folder}")
    doc = analyze([folder], workers=1)
    assert len(doc["runs"]) == 4
    assert sorted(c["trace_rank"] for c in doc["captures"]) == [0, 0, 0, 0]
    assert len({c["rank"] for c in doc["captures"]}) == 4
    longest = max(r["end_ns"] - r["start_ns"] for r in doc["runs"])
    assert longest < 10**9  # each capture well under a second, not the 251 s between them
    assert all(f["impact_pct"] <= 100.0 for f in doc["findings"])


def test_trace_without_rank_is_rank_zero_of_its_own_run() -> None:
    rows = [dict(start_ns=0, end_ns=1000, category=C.KERNEL_COMPUTE, source="x.json", stream=7)]
    table, caps = separate_captures(EventTable.from_rows(rows), formats={"x.json": "kineto"})
    assert caps[0]["rank"] == 0 and caps[0]["trace_rank"] is None
    assert table["rank"].tolist() == [0]
    doc = analyze(table)
    assert len(doc["ranks"]) == 1 and doc["run"]["duration_ns"] == 1000


@pytest.mark.parametrize("name", ["two_rank", "a100_train"])
def test_default_steps_are_what_hta_keeps(name: str) -> None:
    from otel_ext.analysis.loaders import load_paths
    from otel_ext.analysis.rank.breakdown import drop_last_step, temporal_breakdown

    folder = SHARED_TRACES / name
    require(folder.is_dir(), f"real traces folder {folder}")
    table = load_paths([folder], workers=1).table
    doc = analyze([folder], workers=1)
    assert doc["run"]["steps"]["selection"] == "complete"
    want = {t.rank: t.idle_pct for t in temporal_breakdown(drop_last_step(table))}
    got = {t["rank"]: t["idle_pct"] for t in doc["temporal_breakdown"]}
    assert got == pytest.approx(want, abs=1e-6)
    every = analyze([folder], workers=1, steps="all")
    assert every["run"]["steps"]["dropped_rows"] == 0
    assert every["run"]["events"] > doc["run"]["events"]


def test_step_range_keeps_only_those_steps() -> None:
    rows = [dict(start_ns=i * 100, end_ns=i * 100 + 90, category=C.STEP, name=f"ProfilerStep#{i}",
                 source="f", rank=0) for i in range(1, 6)]  # fmt: skip
    rows += [dict(start_ns=i * 100 + 5, end_ns=i * 100 + 9, category=C.CPU_OP, name="aten::mm",
                  source="f", rank=0) for i in range(1, 6)]  # fmt: skip
    kept, rec = select_steps(EventTable.from_rows(rows), "2-3")
    assert rec["kept_steps"] == [2, 3]
    assert sorted(kept["start_ns"].tolist()) == [200, 205, 300, 305]


def test_compute_of_separate_runs_is_never_compared() -> None:
    # five models on two vendors: ten captures of unrelated work, not ten ranks of one job
    folder = SHARED_TRACES / "tracelens_hf_models_h100_vs_mi300x"
    require(folder.is_dir(), f"real traces folder {folder}")
    doc = analyze([folder], workers=1)
    assert len(doc["runs"]) == 10
    assert not [f for f in doc["findings"] if f["kind"] in ("straggler", "throttle")]
    assert all(s["compute_ratio"] in (None, 1.0) for s in doc["stragglers"])


def test_ranks_sharing_a_verdict_are_one_finding_with_the_spread() -> None:
    folder = SHARED_TRACES / "param_dlrm_v100_8rank"
    require(folder.is_dir(), f"real traces folder {folder}")
    doc = analyze([folder], workers=1)
    hb = [f for f in doc["findings"] if f["kind"] == "host-bound"]
    assert len(hb) == 1
    ev = hb[0]["evidence"]
    assert sorted(ev["ranks"]) == list(range(8))
    idle = [t["idle_pct"] for t in doc["temporal_breakdown"]]
    assert ev["idle_pct_min"] == pytest.approx(min(idle))
    assert ev["idle_pct_max"] == pytest.approx(max(idle))


def test_single_rank_collective_calls_with_sizes_from_input_shapes() -> None:
    # vLLM TP8 on B200, rank 0 only: 73 symmetric-memory all-reduces without metadata
    folder = SHARED_TRACES / "tracelens_vllm_tp8_b200"
    require(folder.is_dir(), f"real traces folder {folder}")
    doc = analyze([folder], workers=1)
    by_op = {r["op"]: r for r in doc["collectives"]["calls"]["by_op"]}
    assert by_op["allreduce"]["calls"] == 73 and by_op["allreduce"]["bytes_known"] == 73
    assert by_op["allgather"]["calls"] == 1
    assert doc["collectives"]["count"] == 0  # one rank: nothing to match across ranks


def test_findings_of_separate_runs_are_not_one_pattern() -> None:
    folder = SHARED_TRACES / "hta_extra"  # ten unrelated captures
    require(folder.is_dir(), f"real traces folder {folder}")
    doc = analyze([folder], workers=1)
    hb = [f for f in doc["findings"] if f["kind"] == "host-bound"]
    assert hb and all("ranks" not in f["evidence"] for f in hb)
    assert all(f["impact_pct"] <= 100.0 for f in doc["findings"])
