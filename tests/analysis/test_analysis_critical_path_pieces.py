"""The critical path walked per rank and stitched is the path a brute-force walk finds.

Differential tests against ``tests/_brute_force_critical_path.py`` (each edge found from its
definition by a scan over every row, one step at a time): hypothesis-generated multi-rank tables (streams, threads, runtime calls launching
kernels and graph replays by correlation, blocking calls, zero-length and overlapping rows,
ties, collectives with a rank last at every one), the real DLRM 8-rank and two_rank sets and a
simulated run, each loaded and aligned as the engine does; the pieces computed per partition of the ranks
(the cluster's case: keys are the rows' positions in the whole table) joined and stitched;
``max_steps`` truncation; and the memoisation (steps stored grow linearly when one rank is
last at all K collectives).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _brute_force_critical_path import critical_path_by_brute_force
from _critical_path_inputs import engine_inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross import critical_path as cp_mod
from otel_ext.analysis.cross.collective_match import CollectiveMatch, match_collectives
from otel_ext.analysis.cross.critical_path import (
    PeerEdges,
    WalkPieces,
    critical_path,
    peer_edges,
    stitch,
    walk_mask,
    walk_pieces,
)
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable

ALL = 10**9
#: a cap on the walk's steps for the generated cases, lower than the default (they walk a few
#: hundred steps at most; see ``test_zero_length_rows_at_one_instant_are_no_loop`` for the
#: loop that once needed it)
CAP = 20_000
_RUNTIME_NAMES = ["cudaLaunchKernel", "cudaGraphLaunch", "cudaDeviceSynchronize",
                  "cudaStreamSynchronize", "cudaMemcpy", "cudaMemcpyAsync", "cudaEventRecord",
                  "hipMemcpyWithStream"]  # fmt: skip
_DEVICE = [(C.KERNEL_COMPUTE, "gemm"), (C.KERNEL_COMPUTE, "relu"), (C.MEMCPY, "Memcpy HtoD"),
           (C.MEMSET, "Memset"), (C.KERNEL_COMM, "ncclDevKernel_SendRecv")]  # fmt: skip
_TIMES = st.integers(0, 150).map(lambda t: 10 * t)  # a coarse grid: ties in starts and ends
_DURS = st.sampled_from([0, 0, 10, 20, 50, 100, 300])


@st.composite
def runs(draw: Any) -> EventTable:
    """Two to four ranks, each with runtime calls on one or two threads, device rows on one or
    two streams (or none), correlation ids shared by a call and one or several kernels (graph
    replays), blocking calls, rows of no walk (host operators, rank -1), and collectives by
    ``coll_seq`` on every rank (sometimes one rank last at each, sometimes two rows of a
    member)."""
    n_ranks = draw(st.integers(2, 4))
    ids = sorted(draw(st.sets(st.integers(0, 9), min_size=n_ranks, max_size=n_ranks)))
    last = draw(st.sampled_from([None, ids[0], ids[-1]]))
    n_coll = draw(st.integers(0, 4))
    rows: list[dict[str, Any]] = []
    for r in ids:  # rank numbers need not be 0..n-1
        src = f"/run/rank{r}.json"
        for _ in range(draw(st.integers(0, 14))):
            s = draw(_TIMES)
            corr = draw(st.sampled_from([-1, 1, 2, 3, 4, 5]))
            kind = draw(st.sampled_from(["runtime", "device", "device", "host", "launch"]))
            if kind == "launch":  # a call and the kernels it launched (several: a graph)
                d = draw(_DURS)
                name = draw(st.sampled_from(_RUNTIME_NAMES[:2]))
                fresh = 100 + len(rows)
                rows.append(dict(start_ns=s, end_ns=s + d, category=C.RUNTIME, rank=r, tid=1,
                                 correlation=fresh, source=src, name=name))  # fmt: skip
                for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
                    k0 = s + draw(st.sampled_from([0, 10, 30])) + (0 if name[4] == "G" else d)
                    rows.append(dict(start_ns=k0, end_ns=k0 + draw(_DURS), rank=r,
                                     category=C.KERNEL_COMPUTE, stream=draw(st.sampled_from([7, 9])),
                                     correlation=fresh, source=src,
                                     name="gemm"))  # fmt: skip
            elif kind == "runtime":
                rows.append(dict(start_ns=s, end_ns=s + draw(_DURS), category=C.RUNTIME, rank=r,
                                 tid=draw(st.sampled_from([1, 2])), correlation=corr, source=src,
                                 name=draw(st.sampled_from(_RUNTIME_NAMES))))  # fmt: skip
            elif kind == "device":
                cat, name = draw(st.sampled_from(_DEVICE))
                rows.append(dict(start_ns=s, end_ns=s + draw(_DURS), category=cat, rank=r,
                                 stream=draw(st.sampled_from([-1, 7, 7, 9])), correlation=corr,
                                 device=draw(st.sampled_from(["cuda:0", "cuda:1"])),
                                 source=src, name=name))  # fmt: skip
            else:
                rows.append(dict(start_ns=s, end_ns=s + draw(_DURS), category=C.CPU_OP, rank=r,
                                 tid=1, source=src, name="aten::mm"))  # fmt: skip
        for k in range(n_coll):
            s = 200 + 350 * k + (200 if r == last else draw(st.sampled_from([0, 0, 10, 190])))
            if draw(st.booleans()):  # the kernel whose result it sends ends as it starts
                rows.append(dict(start_ns=s - draw(_DURS), end_ns=s, rank=r, stream=7,
                                 category=C.KERNEL_COMPUTE, source=src, name="gemm"))  # fmt: skip
            for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
                rows.append(dict(start_ns=s, end_ns=s + 150 + draw(_DURS), rank=r, stream=11,
                                 category=C.KERNEL_COMM, coll_seq=k, source=src,
                                 correlation=draw(st.sampled_from([-1, 6])),
                                 name="ncclDevKernel_AllReduce"))  # fmt: skip
    rows.append(dict(start_ns=0, end_ns=5000, category=C.KERNEL_COMPUTE, rank=-1, name="x"))
    order = draw(st.permutations(range(len(rows))))
    return EventTable.from_rows([rows[i] for i in order])


def _brute_force(table: EventTable, match: CollectiveMatch, **kw: Any) -> dict[str, Any]:
    return critical_path_by_brute_force(table, match, **kw)


def _split(
    table: EventTable, match: CollectiveMatch, parts: list[list[int]], **kw: Any
) -> dict[str, Any]:
    """What the cluster does: peer edges on the client, pieces per partition of the ranks
    (that partition's rows only, keys = positions in the whole table), joined, stitched."""
    keys = np.arange(len(table), dtype=np.int64) * 3 + 5  # opaque, not 0..n-1
    peers = peer_edges(table, match, keys)
    pieces = []
    for ranks in parts:
        mask = np.isin(table["rank"], ranks)
        piece = walk_pieces(table.select(mask), keys[mask], peers.of_rows(keys[mask]))
        pieces.append(pickle.loads(pickle.dumps(piece)))  # they travel pickled
    joined = WalkPieces.join(pieces)
    stitch_kw = {k: v for k, v in kw.items() if k != "device_bound_share"}
    return stitch(joined, match, **stitch_kw).as_dict(max_segments=ALL)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.sampled_from([None, 0, 1]), st.sampled_from([None, 3]),
       st.sampled_from([0.9, 0.5, 0.0]))  # fmt: skip
def test_the_walk_is_the_brute_force_path(
    table: EventTable, straggler: Any, steps: Any, share: float
) -> None:
    match = match_collectives(table)
    kw = dict(straggler_rank=straggler, steps=steps, max_steps=CAP, device_bound_share=share)
    want = _brute_force(table, match, **kw)
    assert critical_path(table, match, **kw).as_dict(max_segments=ALL) == want


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.data())
def test_pieces_per_partition_joined_and_stitched(table: EventTable, data: Any) -> None:
    match = match_collectives(table)
    ranks = sorted({int(r) for r in table["rank"].tolist() if r >= 0})
    part_of = data.draw(st.lists(st.integers(0, 2), min_size=len(ranks), max_size=len(ranks)))
    parts = [[r for r, p in zip(ranks, part_of) if p == q] for q in range(3)]
    parts = data.draw(st.permutations(parts))  # the order pieces are joined in is free
    assert _split(table, match, parts, max_steps=CAP) == _brute_force(table, match, max_steps=CAP)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(0, 25))
def test_max_steps_cuts_the_same_segments(table: EventTable, max_steps: int) -> None:
    match = match_collectives(table)
    want = _brute_force(table, match, max_steps=max_steps)
    assert critical_path(table, match, max_steps=max_steps).as_dict(max_segments=ALL) == want
    ranks = sorted({int(r) for r in table["rank"].tolist() if r >= 0})
    assert _split(table, match, [[r] for r in ranks], max_steps=max_steps) == want


def test_zero_length_rows_at_one_instant_are_no_loop() -> None:
    """Two zero-length kernels at one time on one stream: the later one's program-order
    predecessor is the earlier one, and the earlier one's cross-stream predecessor is not the
    later one (it starts at the same instant, later in the order) but what ended before them.
    The walk before this (commit ``f0d9277``) took them as each other's predecessors and went
    round until ``max_steps`` (3.5 s, ``kernels_on_path`` 2,000,000), never reaching the graph
    launch before them."""
    t = EventTable.from_rows([
        dict(start_ns=1000, end_ns=1000, rank=0, stream=7, category=C.KERNEL_COMPUTE, name="x",
             correlation=1, source="f"),
        dict(start_ns=1000, end_ns=1000, rank=0, stream=7, category=C.KERNEL_COMPUTE, name="y",
             correlation=1, source="f"),
        dict(start_ns=990, end_ns=1000, rank=0, tid=1, category=C.RUNTIME, name="cudaGraphLaunch",
             correlation=1, source="f"),
        dict(start_ns=0, end_ns=900, rank=0, stream=9, category=C.KERNEL_COMPUTE, name="z"),
    ])  # fmt: skip
    m = match_collectives(t)
    keys = np.arange(len(t))
    assert walk_pieces(t, keys, peer_edges(t, m, keys)).n_steps <= len(t)
    for cap in (0, 1, 2, 7, 8, 1001, 200_000):
        got = critical_path(t, m, max_steps=cap).as_dict(max_segments=ALL)
        assert got == _brute_force(t, m, max_steps=cap)
    # from the replay's kernels to the graph launch that queued them, which released them at
    # its start: the path is that queue, and one kernel of the replay is on it
    spans = [(seg["category"], seg["start_ns"], seg["end_ns"]) for seg in got["segments"]]
    assert spans == [("queue", 990, 1000)]
    assert got["length_ns"] == 10
    assert got["graph_replays"][0]["kernels_on_path"] == 1


def test_a_blocking_call_is_released_by_the_device_row_ending_as_it_returns() -> None:
    """No device row of its own: the rank's row that ended last at or before the call
    returned releases it, also when that end is the call's end; the call's time before the
    release was waiting, and the path goes on to the kernel."""
    t = EventTable.from_rows([
        dict(start_ns=0, end_ns=100, rank=0, stream=7, category=C.KERNEL_COMPUTE, name="gemm"),
        dict(start_ns=10, end_ns=100, rank=0, tid=1, category=C.RUNTIME,
             name="cudaDeviceSynchronize"),
        dict(start_ns=100, end_ns=110, rank=0, tid=1, category=C.RUNTIME, name="cudaLaunchKernel"),
    ])  # fmt: skip
    m = match_collectives(t)
    got = critical_path(t, m).as_dict(max_segments=ALL)
    assert got == _brute_force(t, m)
    spans = [(seg["category"], seg["start_ns"], seg["end_ns"]) for seg in got["segments"]]
    assert spans == [("compute", 0, 100), ("launch", 100, 110)]


def test_peer_edges_point_at_the_last_arriver() -> None:
    """Each member row depends on the last arriver's row, released at its start; the last
    arriver has no edge; rows that are not walk rows (a collective span) have none."""
    rows = [dict(start_ns=s, end_ns=900, rank=r, coll_seq=0, category=C.KERNEL_COMM, stream=1)
            for r, s in [(0, 100), (1, 700), (2, 300)]]  # fmt: skip
    rows.append(dict(start_ns=0, end_ns=50, rank=0, category=C.LAYER))
    t = EventTable.from_rows(rows)
    e = peer_edges(t, match_collectives(t), np.array([4, 8, 15, 16]))
    assert (e.member_key.tolist(), e.target_key.tolist(), e.release_ns.tolist()) == (
        [4, 15],
        [8, 8],
        [700, 700],
    )
    assert walk_mask(t).tolist() == [True, True, True, False]


def test_a_release_that_is_not_the_targets_start_is_an_error() -> None:
    t = EventTable.from_rows([dict(start_ns=0, end_ns=10, rank=0, category=C.KERNEL_COMPUTE)])
    bad = PeerEdges(np.array([99]), np.array([0]), np.array([5]))
    with pytest.raises(ValueError, match="release time"):
        walk_pieces(t, np.array([0]), bad)


def test_a_missing_rank_is_an_error() -> None:
    """Stitching without the pieces of a rank the path enters names the row it missed."""
    rows = [dict(start_ns=s, end_ns=900, rank=r, coll_seq=0, category=C.KERNEL_COMM, stream=1)
            for r, s in [(0, 100), (1, 700)]]  # fmt: skip
    t = EventTable.from_rows(rows)
    match = match_collectives(t)
    keys = np.arange(2)
    only0 = walk_pieces(t.select(t["rank"] == 0), keys[:1], peer_edges(t, match, keys))
    with pytest.raises(ValueError, match="key 1"):
        stitch(only0, match)


def test_empty_table() -> None:
    t = EventTable.from_rows([dict(start_ns=0, end_ns=10, rank=0, category=C.LAYER)])
    m = match_collectives(t)
    assert critical_path(t, m, straggler_rank=0).as_dict() == _brute_force(t, m, straggler_rank=0)
    assert WalkPieces.join([]).n_steps == 0


def _last_everywhere(k: int, ranks: int = 4) -> EventTable:
    """``ranks`` ranks, ``k`` collectives; rank 0 is last at every one (its compute is slow).
    Each rank: per collective a launch call, its kernel, a sync call, then the comm kernel."""
    rows: list[dict[str, Any]] = []
    for r in range(ranks):
        t = 0
        for j in range(k):
            slow = 500 if r == 0 else 100 + 10 * r
            rows.append(
                dict(
                    start_ns=t,
                    end_ns=t + 20,
                    rank=r,
                    tid=1,
                    category=C.RUNTIME,
                    name="cudaLaunchKernel",
                    correlation=j + 1,
                    source=f"r{r}",
                )
            )
            rows.append(
                dict(
                    start_ns=t + 30,
                    end_ns=t + 30 + slow,
                    rank=r,
                    stream=7,
                    category=C.KERNEL_COMPUTE,
                    name="gemm",
                    correlation=j + 1,
                    source=f"r{r}",
                )
            )
            rows.append(
                dict(
                    start_ns=t + 25,
                    end_ns=t + 40 + slow,
                    rank=r,
                    tid=1,
                    category=C.RUNTIME,
                    name="cudaStreamSynchronize",
                    source=f"r{r}",
                )
            )
            c0 = 2000 * j + 600
            rows.append(
                dict(
                    start_ns=max(c0 - (0 if r == 0 else 400), t + 40 + slow),
                    end_ns=c0 + 300,
                    rank=r,
                    stream=9,
                    category=C.KERNEL_COMM,
                    coll_seq=j,
                    name="ncclDevKernel_AllReduce",
                    source=f"r{r}",
                )
            )
            t = 2000 * (j + 1)
    return EventTable.from_rows(rows)


def test_memoised_steps_grow_linearly_when_one_rank_is_last_everywhere() -> None:
    """Rank 0 is the target of every collective: the walk from each target runs back through
    all of rank 0's earlier collectives, so without sharing walk states the steps stored
    would grow with K²; with them, linearly. Counted, not timed."""
    stored = {}
    for k in (10, 20, 40, 80):
        t = _last_everywhere(k)
        m = match_collectives(t)
        keys = np.arange(len(t))
        pieces = walk_pieces(t, keys, peer_edges(t, m, keys))
        assert int(pieces.entry_key.shape[0]) == k  # every collective's target is an entry
        stored[k] = pieces.n_steps
        assert stitch(pieces, m).as_dict(max_segments=ALL) == _brute_force(t, m)
    # exactly linear: equal increments per added collective
    assert stored[80] - stored[40] == 2 * (stored[40] - stored[20]) == 4 * (stored[20] - stored[10])
    # unshared, the walk from the j-th target would redo rank 0's j earlier collectives
    # (9,963 steps at K = 80, about 1.5 K², counted once with the sharing switched off);
    # shared, fewer steps than the table has rows
    assert stored[80] < len(_last_everywhere(80))


def test_nbytes_is_what_it_weighs() -> None:
    t = _last_everywhere(20)
    m = match_collectives(t)
    keys = np.arange(len(t))
    pieces = walk_pieces(t, keys, peer_edges(t, m, keys))
    pickled = len(pickle.dumps(pieces))
    assert 0.5 * pickled < pieces.nbytes() < 1.5 * pickled


def test_entries_option() -> None:
    t = _last_everywhere(5)
    m = match_collectives(t)
    keys = np.arange(len(t))
    peers = peer_edges(t, m, keys)
    every = walk_pieces(t, keys, peers)
    reach = walk_pieces(t, keys, peers, entries="reachable")
    assert reach.n_steps <= every.n_steps and reach.start_key.shape[0] == 1
    got = [stitch(p, m).as_dict(max_segments=ALL) for p in (reach, every)]
    assert got[0] == got[1] == _brute_force(t, m)
    with pytest.raises(ValueError, match="entries"):
        walk_pieces(t, keys, peers, entries="some")


def test_cp_module_keeps_its_public_names() -> None:
    for name in ("walk_mask", "PeerEdges", "peer_edges", "WalkPieces", "walk_pieces", "stitch"):
        assert name in cp_mod.__all__


# the real sets, loaded and aligned as the engine does


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from otel_ext.cli import main

    out = tmp_path_factory.mktemp("sim_cp")
    args = ["simulate", "--hosts", "2", "--chips", "4", "--requests", "50", "--fault",
            "straggler@host1/chip2", "--no-timeline", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    return out


@pytest.mark.parametrize("folder", ["param_dlrm_v100_8rank", "two_rank", "sim"])
def test_real_sets(folder: str, simulated: Path, request: pytest.FixtureRequest) -> None:
    path = simulated if folder == "sim" else request.getfixturevalue("shared_traces") / folder
    table, match, kw = engine_inputs(path)
    want = _brute_force(table, match, **kw)
    assert want["segments_total"] > 0
    assert critical_path(table, match, **kw).as_dict(max_segments=ALL) == want
    ranks = sorted({int(r) for r in table["rank"].tolist() if r >= 0})
    assert len(ranks) >= 2
    # per rank, and in two partitions (odd and even ranks)
    assert _split(table, match, [[r] for r in ranks], **kw) == want
    assert _split(table, match, [ranks[1::2], ranks[::2]], **kw) == want
    for cap in (1, 7, want["segments_total"] // 2):
        cut = _brute_force(table, match, max_steps=cap)
        assert critical_path(table, match, max_steps=cap).as_dict(max_segments=ALL) == cut
