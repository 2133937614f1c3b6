"""Compute samples against the compute statistics computed row by row from their definitions.

The oracle is ``tests/_brute_force_compute.py``: the per-rank compute ratios (overall, per
window, the sign test's counts) and compute totals written the slow, obvious way over the
table's rows. Its floats are composed differently (``statistics.median`` of Python floats),
so ratios are compared with a tight relative tolerance (:func:`_assert_same_ratios`); the
counts, the ``None`` of empty windows and the integer totals must be equal. Paths of the
library that run the same operations on the same values (samples of a split joined against
the whole, the samples given to ``find_stragglers`` or ``load_imbalance`` against their own
pass over the rows) must be equal exactly: the analysis report must not change by one byte.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _brute_force_compute import compute_ratio_stats_brute_force, rank_compute_totals_brute_force
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_ext._arrays import group_median, weighted_group_median
from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.imbalance import load_imbalance
from otel_ext.analysis.cross.stragglers import compute_ratio_stats, find_stragglers, window_edges
from otel_ext.analysis.loaders import load_file
from otel_ext.analysis.rank.compute_samples import (
    ComputeRatios,
    ComputeSamples,
    ratio_stats,
    samples_of,
    window_of,
)
from otel_ext.analysis.runs import rank_runs
from otel_ext.analysis.table import Category, EventTable

BASE = 1_700_000_000_000_000_000  # epoch-scale times, as profiler traces have them
RUN_GAP = 700 * 10**9  # more than RUN_GAP_NS: ranks this far apart are separate runs

NAMES = ["gemm", "conv", "relu", "attn", "solo"]
HOSTS = ["", "h0", "h1"]
# repeated and zero durations: equal keys collapse into one sample with a count
DURATIONS = [0, 0, 1, 5, 10, 10, 10, 20, 37, 1000]


@st.composite
def tables(draw: Any) -> tuple[list[dict[str, Any]], int]:
    """Rows of several ranks, hosts and runs (far apart in time), and a window count.

    Compute kernels with repeated names and durations (zero included), names on one rank
    only, layer spans, collectives (so stragglers have matches), rows of no rank; sometimes
    no compute kernel at all (the layer fallback).
    """
    n_ranks = draw(st.integers(1, 6))
    ranks = sorted(draw(st.sets(st.integers(0, 12), min_size=n_ranks, max_size=n_ranks)))
    run_of = {r: draw(st.integers(0, 1)) for r in ranks}
    host_of = {r: draw(st.sampled_from(["h0", "h0", "h1", ""])) for r in ranks}
    with_kernels = draw(st.integers(0, 4)) > 0
    rows: list[dict[str, Any]] = []
    # runs far apart, each spanning several windows when the span is large
    span = draw(st.sampled_from([1, 2_000, 50_000, 400 * 10**9, 400 * 10**9]))
    offset = span + RUN_GAP
    kinds = [Category.KERNEL_COMPUTE] * 4 * with_kernels + [
        Category.LAYER,
        Category.KERNEL_COMM,
        Category.CPU_OP,
    ]
    # a program every rank runs (the same work recurs on several ranks in every time slot),
    # each rank with its own durations and some items left out; plus a few rows of its own
    slot = st.integers(0, 3)
    program = draw(
        st.lists(st.tuples(st.sampled_from(NAMES[:-1]), slot, st.sampled_from(kinds)), max_size=12)
    )
    for r in ranks:
        t0 = BASE + run_of[r] * offset
        own = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(NAMES if r == ranks[0] else NAMES[:-1]),
                    slot,
                    st.sampled_from(kinds),
                ),
                max_size=8,
            )
        )
        for name, at, cat in [p for p in program if draw(st.integers(0, 4))] + own:
            start = t0 + at * (span // 4) + draw(st.integers(0, 3))
            rows.append(
                dict(
                    start_ns=start,
                    end_ns=start + draw(st.sampled_from(DURATIONS)),
                    rank=r,
                    name=name,
                    host=host_of[r] if draw(st.integers(0, 9)) else draw(st.sampled_from(HOSTS)),
                    category=cat,
                )
            )
    for run in (0, 1):
        members = [r for r in ranks if run_of[r] == run]
        for k in range(draw(st.integers(0, 3)) if len(members) >= 2 else 0):
            for r in members:
                start = BASE + run * offset + (k + 1) * span // 4 + draw(st.integers(0, 50))
                rows.append(
                    dict(
                        start_ns=start,
                        end_ns=start + 100,
                        rank=r,
                        category=Category.KERNEL_COMM,
                        coll_seq=k,
                        coll_group=f"g{run}",
                        name="ncclAllReduce",
                    )
                )
    rows.append(dict(start_ns=BASE - 5, end_ns=BASE, category=Category.KERNEL_COMPUTE, name="x"))
    return rows, draw(st.integers(1, 8))


def _split(rows: list[dict[str, Any]], seed: int, parts: int) -> list[list[dict[str, Any]]]:
    """The rows split at random by rank (rows of no rank to the first part)."""
    rng = np.random.default_rng(seed)
    ranks = sorted({r.get("rank", -1) for r in rows})
    part_of = {r: int(rng.integers(0, parts)) for r in ranks}
    out: list[list[dict[str, Any]]] = [[] for _ in range(parts)]
    for row in rows:
        out[part_of[row.get("rank", -1)]].append(row)
    return out


def _joined_samples(
    rows: list[dict[str, Any]], edges: np.ndarray, seed: int, parts: int
) -> ComputeSamples:
    """Samples of each part built on its own table (its own string codes), joined."""
    return ComputeSamples.join(
        [samples_of(EventTable.from_rows(p), edges) for p in _split(rows, seed, parts)]
    )


#: relative tolerance between the library's ratios and the brute force's: both divide the same
#: integer durations by medians of the same values, so they agree to the last bits or so
REL = 1e-9


def _assert_same_ratios(got: ComputeRatios, want: ComputeRatios) -> None:
    """The same ranks, windows and sign-test counts; the ratios within :data:`REL`."""
    assert got.slower == want.slower
    assert got.faster == want.faster
    assert list(got.overall) == list(want.overall)
    for r, v in want.overall.items():
        assert math.isclose(got.overall[r], v, rel_tol=REL), (r, got.overall[r], v)
    assert list(got.by_window) == list(want.by_window)
    for r, cells in want.by_window.items():
        assert [c is None for c in got.by_window[r]] == [c is None for c in cells], r
        for g, w in zip(got.by_window[r], cells, strict=True):
            assert g is None or w is None or math.isclose(g, w, rel_tol=REL), (r, g, w)


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(tables())
def test_ratio_stats_equal_the_brute_force(case: tuple[list[dict[str, Any]], int]) -> None:
    rows, windows = case
    t = EventTable.from_rows(rows)
    edges = window_edges(t, windows)
    runs = rank_runs(t)
    want = compute_ratio_stats_brute_force(t, edges.tolist(), runs)
    samples = samples_of(t, edges)
    if samples.rows == 0:  # the layer fallback, as the definition takes it
        samples = samples_of(t, edges, category=Category.LAYER)
    got = ratio_stats(samples, runs, max(len(edges) - 1, 1))
    _assert_same_ratios(got, want)
    assert compute_ratio_stats(t, edges) == got  # exact: the same pass over the same samples


@SETTINGS
@given(tables(), st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_samples_of_a_split_joined_equal_the_whole(
    case: tuple[list[dict[str, Any]], int], seed: int, parts: int
) -> None:
    rows, windows = case
    t = EventTable.from_rows(rows)
    edges = window_edges(t, windows)
    whole = samples_of(t, edges)
    joined = _joined_samples(rows, edges, seed, parts)
    assert joined == whole
    n_kernels = sum(
        r.get("category") == Category.KERNEL_COMPUTE and r.get("rank", -1) >= 0 for r in rows
    )
    assert whole.rows == n_kernels
    # one row per distinct key, counts positive
    assert len(whole.count) == len(set(zip(*_decoded(whole), strict=True)))
    assert bool((whole.count > 0).all())
    runs, n_win = rank_runs(t), max(len(edges) - 1, 1)
    assert ratio_stats(joined, runs, n_win) == ratio_stats(whole, runs, n_win)
    # positions given: the same rows, in another order, sample the same; and the positions
    # of a split by rank, sampled on the whole table's codes, join to the whole too
    rng = np.random.default_rng(seed)
    assert samples_of(t, edges, rows=rng.permutation(len(t))) == whole
    part_of = rng.integers(0, parts, size=int(t["rank"].max()) + 2)[t["rank"] + 1]
    by_pos = [samples_of(t, edges, rows=np.flatnonzero(part_of == k)) for k in range(parts)]
    assert ComputeSamples.join(by_pos) == whole
    # what travels to the client: a pickled copy is the same samples
    assert pickle.loads(pickle.dumps(joined)) == whole


def _decoded(s: ComputeSamples) -> tuple[list[Any], ...]:
    return (
        [s.names[i] for i in s.name.tolist()],
        [s.hosts[i] for i in s.host.tolist()],
        s.rank.tolist(),
        s.window.tolist(),
        s.duration_ns.tolist(),
    )


@SETTINGS
@given(tables(), st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_rank_totals_equal_the_row_sums(
    case: tuple[list[dict[str, Any]], int], seed: int, parts: int
) -> None:
    rows, windows = case
    t = EventTable.from_rows(rows)
    edges = window_edges(t, windows)
    totals = _joined_samples(rows, edges, seed, parts).rank_totals()
    # integers (summed ns, rows), ranks ascending: exact
    assert list(totals.items()) == list(rank_compute_totals_brute_force(t).items())
    groups = {r.get("rank", -1): r.get("rank", -1) % 2 for r in rows}
    for g in (None, groups):
        assert load_imbalance(t, groups=g, compute_totals=totals) == load_imbalance(t, groups=g)


@SETTINGS
@given(tables(), st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_find_stragglers_from_samples_equal_from_rows(
    case: tuple[list[dict[str, Any]], int], seed: int, parts: int
) -> None:
    rows, windows = case
    t = EventTable.from_rows(rows)
    m = match_collectives(t)
    compute = _joined_samples(rows, window_edges(t, windows), seed, parts)
    want = find_stragglers(t, m, windows=windows)
    got = find_stragglers(t, m, windows=windows, compute=compute)
    # json text: the report's bytes (NaN-safe, floats at full precision)
    assert json.dumps(got.rows, sort_keys=True) == json.dumps(want.rows, sort_keys=True)
    assert got.window_edges_ns == want.window_edges_ns


@SETTINGS
@given(tables(), st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_ranks_alone_in_their_run_counted_in_total_give_the_same(
    case: tuple[list[dict[str, Any]], int], seed: int, parts: int
) -> None:
    """A rank alone in its run has nothing to compare its work with: its kernels travel as
    a total (``held_samples``' ``alone``), and the stragglers and the imbalance are those
    from every row."""
    from otel_ext.analysis.cross.alignment import RankClocks
    from otel_ext.analysis.rank.per_rank import held_samples, per_rank_tables

    rows, windows = case
    t = EventTable.from_rows(rows)
    m = match_collectives(t)
    edges = window_edges(t, windows)
    runs = rank_runs(t)
    alone = {r for r, run in runs.items() if list(runs.values()).count(run) == 1}
    parts_samples = []
    for part in _split(rows, seed, parts):
        pt = EventTable.from_rows(part)
        held = held_samples(per_rank_tables(pt, hold=True), RankClocks(), edges, alone=alone)
        parts_samples += [h.resolved(pt.strings["name"]) for h in held]
        sent = per_rank_tables(pt, hold=True).reduced[0]
        parts_samples.append(samples_of(sent, edges))
    compute = ComputeSamples.join(parts_samples)
    assert compute.rows == samples_of(t, edges).rows
    # only ranks alone in their run are in total only (their first and last rows, which
    # travel, are sampled where they arrive)
    assert set(compute.totals_only) <= alone
    assert compute.rank_totals() == samples_of(t, edges).rank_totals()
    want = find_stragglers(t, m, windows=windows)
    got = find_stragglers(t, m, windows=windows, compute=compute)
    assert json.dumps(got.rows, sort_keys=True) == json.dumps(want.rows, sort_keys=True)
    totals = compute.rank_totals()
    assert load_imbalance(t, compute_totals=totals) == load_imbalance(t)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, -1.0, 0.5, 1.0, 2.0, 3.0, np.nan, 1e300, 7.25]),
            st.integers(0, 4),
            st.integers(0, 5),
        ),
        max_size=40,
    )
)
def test_weighted_group_median_equals_group_median_of_the_copies(
    items: list[tuple[float, int, int]],
) -> None:
    v = np.array([x[0] for x in items], dtype=np.float64)
    w = np.array([x[1] for x in items], dtype=np.int64)
    g = np.array([x[2] for x in items], dtype=np.int64)
    got = weighted_group_median(v, w, g, 6)
    want = group_median(np.repeat(v, w), np.repeat(g, w), 6)
    assert got.tobytes() == want.tobytes()  # bit for bit, NaN where a group is empty


def test_weighted_group_median_picks_the_middle_copies() -> None:
    # an element off by one copy (the first cumulative count reaching p rather than
    # exceeding it) would give 1.0, 1.0 and 2.0 here
    got = weighted_group_median(
        [1.0, 2.0, 1.0, 2.0, 5.0, 9.0], [1, 1, 2, 1, 1, 3], [0, 0, 1, 1, 2, 2], 3
    )
    assert got.tolist() == [1.5, 1.0, 9.0]
    assert weighted_group_median([2.0, 4.0], [2, 2], [0, 0], 1).tolist() == [3.0]


def test_join_counts_overlapping_parts_once_per_part() -> None:
    t = EventTable.from_rows(
        [
            dict(start_ns=0, end_ns=d, rank=r, name="k", category=Category.KERNEL_COMPUTE)
            for r, d in [(0, 3), (1, 3), (1, 4)]
        ]
    )
    edges = window_edges(t, 2)
    s = samples_of(t, edges)
    twice = ComputeSamples.join([s, s])
    assert twice.count.tolist() == [2 * c for c in s.count.tolist()]
    assert twice.rank_totals() == {0: (6, 2), 1: (14, 4)}
    assert ComputeSamples.join([s, ComputeSamples.empty(Category.KERNEL_COMPUTE)]) == s


def test_join_refuses_no_parts_and_mixed_categories() -> None:
    with pytest.raises(ValueError, match="at least one part"):
        ComputeSamples.join([])
    with pytest.raises(ValueError, match="different categories"):
        ComputeSamples.join(
            [ComputeSamples.empty(Category.KERNEL_COMPUTE), ComputeSamples.empty(Category.LAYER)]
        )


def test_ratio_stats_refuses_windows_outside_the_edges() -> None:
    t = EventTable.from_rows(
        [
            dict(start_ns=s, end_ns=s + 5, rank=r, name="k", category=Category.KERNEL_COMPUTE)
            for r in (0, 1)
            for s in (0, 100)
        ]
    )
    s = samples_of(t, window_edges(t, 4))
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        ratio_stats(s, rank_runs(t), 2)


def test_window_of_matches_the_edges() -> None:
    edges = np.array([10, 20, 30, 40])
    assert window_of(np.array([0, 10, 19, 20, 39, 40, 41]), edges).tolist() == [0, 0, 0, 1, 2, 2, 2]
    assert window_of(np.array([5, 50]), np.array([7])).tolist() == [0, 0]


@pytest.mark.parametrize("folder", ["param_dlrm_v100_8rank", "two_rank"])
def test_real_traces_samples_per_file_give_the_same_stragglers_and_imbalance(
    shared_traces: Path, folder: str
) -> None:
    files = sorted((shared_traces / folder).iterdir())
    tables_ = [load_file(f).table for f in files]
    parts = [tb for tb in tables_ if tb is not None]
    t = EventTable.concat(parts)
    m = match_collectives(t)
    edges = window_edges(t, 8)
    # per file, on its own string dictionaries, then joined: what the workers will send
    compute = ComputeSamples.join([samples_of(p, edges) for p in parts])
    assert compute == samples_of(t, edges)
    assert compute.rows > 0
    runs = rank_runs(t)
    want = compute_ratio_stats_brute_force(t, edges.tolist(), runs)
    assert want.overall  # the traces have comparable work
    _assert_same_ratios(ratio_stats(compute, runs, 8), want)
    assert compute.rank_totals() == rank_compute_totals_brute_force(t)
    want = find_stragglers(t, m)
    got = find_stragglers(t, m, compute=compute)
    assert json.dumps(got.rows, sort_keys=True) == json.dumps(want.rows, sort_keys=True)
    totals = compute.rank_totals()
    assert load_imbalance(t, compute_totals=totals) == load_imbalance(t)
