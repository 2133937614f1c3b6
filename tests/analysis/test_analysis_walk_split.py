"""The critical path's walk where the rows are, after the alignment decided elsewhere.

The runtime calls stay where the per-rank phase ran (in process, or on the Dask worker that
keeps a partition): only the critical path's walk reads them, and it runs there after the
client's alignment, on rows moved by the same clock correction and taking the event-level
repair's times (``docs/analysis.md``, "Per-rank and cross-rank passes"). Differential
property tests: random multi-rank runs whose clocks are off by offsets the alignment applies
(and jitter that leaves causality violations for the repair), the ranks split into random
partitions; against the one-table way (align the whole table, walk it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.alignment import align_ranks
from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.critical_path import (
    WalkPieces,
    critical_path,
    peer_edges,
    stitch,
    walk_mask,
)
from otel_ext.analysis.rank.per_rank import (
    RepairedRows,
    WalkShares,
    aligned_walk,
    per_rank_tables,
    walk_of,
    walk_of_aligned,
)
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable


class _Picks:
    """What the generator draws: from hypothesis, or from a seeded numpy generator."""

    def __init__(self, draw: Any = None, rng: np.random.Generator | None = None) -> None:
        self.draw, self.rng = draw, rng

    def int(self, lo: int, hi: int) -> int:
        if self.rng is not None:
            return int(self.rng.integers(lo, hi + 1))
        return int(self.draw(st.integers(lo, hi)))

    def choice(self, values: list[int]) -> int:
        return values[self.int(0, len(values) - 1)]


def _run(pick: _Picks) -> EventTable:
    """Ranks that launch kernels from a host thread and meet at collectives; each rank's
    clock off by an offset (none, or one the alignment applies), exits jittered."""
    n_ranks = pick.int(2, 4)
    n_coll = pick.int(2, 6)
    offsets = [0] + [
        pick.choice([0, 3_000_000, -40_000_000, 2 * 10**9]) for _ in range(n_ranks - 1)
    ]
    rows: list[dict[str, Any]] = []
    for r in range(n_ranks):
        host_t = pick.int(0, 2_000)
        dev_t = host_t
        corr = 0
        mine: list[dict[str, Any]] = []
        for k in range(n_coll):
            for _ in range(pick.int(0, 3)):
                corr += 1
                call = pick.int(50, 400)
                mine.append(dict(start_ns=host_t, end_ns=host_t + call, category=C.RUNTIME,
                                 name="cudaLaunchKernel", correlation=corr, tid=1))  # fmt: skip
                dev_t = max(dev_t, host_t + call) + pick.int(0, 300)
                dur = pick.int(100, 5_000)
                mine.append(dict(start_ns=dev_t, end_ns=dev_t + dur, category=C.KERNEL_COMPUTE,
                                 name="gemm", correlation=corr, stream=7))  # fmt: skip
                dev_t += dur
                host_t += call + pick.int(0, 500)
            if pick.int(0, 1):  # a blocking call: waits for the device
                end = max(host_t + 100, dev_t)
                mine.append(dict(start_ns=host_t, end_ns=end, category=C.RUNTIME,
                                 name="cudaStreamSynchronize", tid=1))  # fmt: skip
                host_t = end + 10
            corr += 1
            mine.append(dict(start_ns=host_t, end_ns=host_t + 80, category=C.RUNTIME,
                             name="cudaLaunchKernel", correlation=corr, tid=1))  # fmt: skip
            arrive = max(dev_t, host_t + 80)
            mine.append(dict(start_ns=arrive, end_ns=arrive, category=C.KERNEL_COMM,
                             name="ncclAllReduce", correlation=corr, stream=9, coll_seq=k,
                             coll_group="g", coll_op="allreduce"))  # fmt: skip
            host_t += 80
        for row in mine:
            row["rank"] = r
        rows.extend(mine)
    # the collectives end together (nobody leaves before the last arrival), jittered
    comm = [row for row in rows if row["category"] == C.KERNEL_COMM]
    for k in range(n_coll):
        members = [row for row in comm if row["coll_seq"] == k]
        leave = max(m["start_ns"] for m in members) + 1_000
        for m in members:
            m["end_ns"] = max(leave + pick.int(-1_500, 1_500), m["start_ns"])
    for row in rows:
        off = offsets[row["rank"]]
        row["start_ns"] += off
        row["end_ns"] += off
        row["source"] = f"/run/rank{row['rank']}.json"
    return EventTable.from_rows(rows)


@st.composite
def runs(draw: Any) -> EventTable:
    return _run(_Picks(draw=draw))


def _walked_by_partition(table: EventTable, parts: list[list[int]]) -> tuple[Any, Any, Any]:
    """The per-rank phase per partition (its rows only, keyed by their row numbers in the
    whole table), the alignment over the joined reduced rows, the walk per partition: the
    alignment, the partitions' shares and each partition's pieces."""
    results = []
    for ranks in parts:
        rows = np.flatnonzero(np.isin(table["rank"], ranks))
        results.append(per_rank_tables(table.select(rows), positions=rows.astype(np.int64)))
    keys = np.concatenate([r.reduced_positions[0] for r in results])
    order = np.argsort(keys, kind="stable")
    reduced = EventTable.concat([r.reduced[0] for r in results]).select(order)
    keys = keys[order]
    alignment = align_ranks(reduced, match_collectives(reduced))
    rep = alignment.repaired_rows
    aligned = alignment.table
    repaired = RepairedRows(keys[rep], aligned["start_ns"][rep], aligned["end_ns"][rep])
    peers = peer_edges(aligned, alignment.match, keys)
    shares = WalkShares(keys, aligned["rank"], repaired, peers)  # each partition its share
    walked = []
    for r, ranks in zip(results, parts):
        rep, sub = shares.of(ranks)
        if r.walk_travels:  # walked where the reduced rows are, as the client does
            walked.append(walk_of_aligned(aligned, keys, sub, ranks=ranks))
        else:
            walked.append(walk_of(r, alignment.clocks, rep, sub))
    return alignment, shares, walked


def _pieces_by_partition(table: EventTable, parts: list[list[int]]) -> tuple[Any, Any]:
    """:func:`_walked_by_partition`'s alignment and every partition's pieces joined."""
    alignment, _, walked = _walked_by_partition(table, parts)
    return alignment, WalkPieces.join(walked)


@settings(max_examples=150, deadline=None)
@given(runs(), st.data())
def test_walk_rows_moved_as_the_aligned_table(table: EventTable, data: Any) -> None:
    whole = align_ranks(table, match_collectives(table))
    per = per_rank_tables(table, positions=np.arange(len(table), dtype=np.int64))
    reduced, keys = per.reduced[0], per.reduced_positions[0]
    alignment = align_ranks(reduced, match_collectives(reduced))
    assert alignment.offsets_ns == whole.offsets_ns
    rep = alignment.repaired_rows
    aligned = alignment.table
    repaired = RepairedRows(keys[rep], aligned["start_ns"][rep], aligned["end_ns"][rep])
    if per.walk_travels:  # every walk row is a reduced row: walked from the aligned ones
        assert per.walk is None
        on = np.flatnonzero(walk_mask(aligned))
        moved, moved_keys = aligned.select(on), keys[on]
    else:
        assert per.walk is not None and per.walk_keys is not None
        moved = aligned_walk(per.walk, per.walk_keys, alignment.clocks, repaired)
        moved_keys = per.walk_keys
    rows = np.flatnonzero(walk_mask(table))
    assert moved_keys.tolist() == rows.tolist()
    for column in ("start_ns", "end_ns"):
        assert moved[column].tolist() == whole.table[column][rows].tolist(), column


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(runs(), st.data())
def test_walk_per_partition_gives_the_one_table_path(table: EventTable, data: Any) -> None:
    ranks = sorted({int(r) for r in table["rank"].tolist()})
    cut = data.draw(st.lists(st.booleans(), min_size=len(ranks) - 1, max_size=len(ranks) - 1))
    parts: list[list[int]] = [[ranks[0]]]
    for r, new in zip(ranks[1:], cut):
        if new:
            parts.append([r])
        else:
            parts[-1].append(r)
    whole = align_ranks(table, match_collectives(table))
    want = critical_path(whole.table, whole.match, straggler_rank=ranks[-1], steps=3)
    alignment, pieces = _pieces_by_partition(table, parts)
    got = stitch(pieces, alignment.match, straggler_rank=ranks[-1], steps=3)
    assert got.as_dict(max_segments=10**9) == want.as_dict(max_segments=10**9)


def test_some_runs_have_offsets_applied() -> None:
    """The generator reaches what the tests are about: offsets the alignment applies (the
    walk rows then move by the correction, not as recorded)."""
    applied = 0
    for seed in range(40):
        table = _run(_Picks(rng=np.random.default_rng(seed)))
        alignment = align_ranks(table, match_collectives(table))
        applied += any(s == "applied" for s in alignment.status.values())
    assert applied >= 10, applied


@settings(max_examples=100, deadline=None)
@given(runs(), st.data())
def test_repaired_rows_take_the_repairs_times(table: EventTable, data: Any) -> None:
    """The event-level repair moves device rows beyond the clocks' bounds; it is rare (a
    violation the bounds do not cover, between constraints that agree: none of the real sets
    and none of the generated runs has one), so its rows are drawn here: the walk rows with
    those keys take the given times, the others the correction's."""
    per = per_rank_tables(table, positions=np.arange(len(table), dtype=np.int64))
    assume(not per.walk_travels)  # else the walk reads the aligned (repaired) rows themselves
    reduced, keys = per.reduced[0], per.reduced_positions[0]
    alignment = align_ranks(reduced, match_collectives(reduced))
    dev = np.flatnonzero(np.isin(reduced["category"], [int(C.KERNEL_COMPUTE), int(C.KERNEL_COMM)]))
    picked = np.asarray(sorted(set(data.draw(st.lists(st.sampled_from(dev.tolist()))))), np.int64)
    shift = np.asarray(data.draw(st.lists(st.integers(1, 10**6), min_size=len(picked),
                                          max_size=len(picked))), dtype=np.int64)  # fmt: skip
    aligned = alignment.table
    repaired = RepairedRows(
        keys[picked], aligned["start_ns"][picked] + shift, aligned["end_ns"][picked] + 2 * shift
    )
    assert per.walk is not None and per.walk_keys is not None
    moved = aligned_walk(per.walk, per.walk_keys, alignment.clocks, repaired)
    plain = aligned_walk(per.walk, per.walk_keys, alignment.clocks, RepairedRows.none())
    at = {int(k): i for i, k in enumerate(per.walk_keys.tolist())}
    want_start = plain["start_ns"].copy()
    want_end = plain["end_ns"].copy()
    for k, s0, e0 in zip(repaired.keys.tolist(), repaired.start_ns.tolist(),
                         repaired.end_ns.tolist()):  # fmt: skip
        want_start[at[k]], want_end[at[k]] = s0, e0
    assert moved["start_ns"].tolist() == want_start.tolist()
    assert moved["end_ns"].tolist() == want_end.tolist()


def _second_run(table: EventTable, *, rank_shift: int, time_shift: int) -> EventTable:
    """``table`` as another, unconnected run: its ranks renumbered, its times moved, its
    collective group and files renamed (no collective joins it to the first)."""
    columns = dict(table.columns)
    columns["rank"] = table["rank"] + rank_shift
    columns["start_ns"] = table["start_ns"] + time_shift
    columns["end_ns"] = table["end_ns"] + time_shift
    strings = dict(table.strings)
    strings["coll_group"] = [s and f"{s}-b" for s in table.strings["coll_group"]]
    strings["source"] = [s and f"{s}.b" for s in table.strings["source"]]
    return EventTable(columns, strings, dict(table.meta))


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(runs(), runs(), st.integers(-(10**9), 10**9), st.data())
def test_only_the_reachable_ranks_pieces_are_needed(
    first: EventTable, second: EventTable, shift: int, data: Any
) -> None:
    """Two runs no collective joins (a cluster's client fetches only the pieces of the
    partitions the path can reach, ``DaskCluster.walk_phase``): the ranks the peer edges lead
    to from the global start are one run's, and their partitions' pieces alone stitch the
    path every partition's pieces give."""
    from otel_ext.analysis.scaleout.dask_cluster import _global_start_rank

    table = EventTable.concat([first, _second_run(second, rank_shift=10, time_shift=shift)])
    ranks = sorted({int(r) for r in table["rank"].tolist()})
    parts: list[list[int]] = [[ranks[0]]]
    for r in ranks[1:]:
        if data.draw(st.booleans()):
            parts.append([r])
        else:
            parts[-1].append(r)
    alignment, shares, walked = _walked_by_partition(table, parts)
    start = _global_start_rank(walked, [])
    reach = shares.reachable(start)
    assert reach <= ({r for r in ranks if r < 10} if start < 10 else {r for r in ranks if r >= 10})
    wanted = [w for w, p in zip(walked, parts) if reach & set(p)]
    want = stitch(WalkPieces.join(walked), alignment.match)
    got = stitch(WalkPieces.join(wanted), alignment.match)
    assert got.as_dict(max_segments=10**9) == want.as_dict(max_segments=10**9)


@settings(max_examples=150, deadline=None)
@given(runs(), st.lists(st.tuples(st.integers(0, 60_000), st.integers(0, 20_000)), max_size=6))
def test_held_device_busy_moved_is_the_aligned_rows_busy(
    table: EventTable, windows: list[tuple[int, int]]
) -> None:
    """The device rows a partition holds travel as each device's union of intervals per rank
    (``RankTables.device_busy``); moved by the clock correction (``RankClocks.move``) and
    joined with the rows that travelled, they give every window the busy time the aligned
    table's device rows give (the correction is one increasing function per rank: a union
    of unions is the union)."""
    from otel_ext.analysis.serving.requests import _Coverage

    per = per_rank_tables(table, positions=np.arange(len(table), dtype=np.int64), hold=True)
    reduced = per.reduced[0]
    # as a cluster's client aligns when partitions hold rows: the event-level repair, which
    # reads every device row, is left out; when it is called for, the held rows are fetched
    # and the intervals are not used
    alignment = align_ranks(reduced, match_collectives(reduced), repair=False)
    assume(not alignment.repair_skipped)
    whole = align_ranks(table, match_collectives(table))
    assert alignment.offsets_ns == whole.offsets_ns and whole.repaired_events == 0
    dev = np.isin(whole.table["category"], [int(C.KERNEL_COMPUTE), int(C.KERNEL_COMM)])
    want = _Coverage(whole.table["start_ns"][dev], whole.table["end_ns"][dev])
    sent = alignment.table
    sdev = np.isin(sent["category"], [int(C.KERNEL_COMPUTE), int(C.KERNEL_COMM)])
    starts, ends = [sent["start_ns"][sdev]], [sent["end_ns"][sdev]]
    for spans in per.device_busy.values():
        for rank, s, e in spans:
            starts.append(alignment.clocks.move(rank, s))
            ends.append(alignment.clocks.move(rank, e))
    got = _Coverage(np.concatenate(starts), np.concatenate(ends))
    base = int(whole.table["start_ns"].min())
    a = np.asarray([base + w for w, _ in windows], dtype=np.int64)
    b = np.asarray([base + w + d for w, d in windows], dtype=np.int64)
    assert got.within_many(a, b).tolist() == want.within_many(a, b).tolist()
    assert got.within(base - 10**12, base + 10**13) == want.within(base - 10**12, base + 10**13)
