"""The per-rank phase split across partitions gives what it gives over the whole table.

Differential property tests (the shape of polars' "streaming equals batch"): random sets of
files (ranks, some in several files; rows of no rank; host operators, kernels, runtime calls,
collectives), the ranks split into partitions and each file cut into its partitions' pieces
(the cluster's jobs, run here), per-rank passes per partition and merged, each file's
reduced rows put back together, against the same passes over all the files joined; the ranks decided from the files' sketches against
``separate_captures`` over the whole table; the steps selected per file against the whole
table's selection. And on the real sets: the rows the cross-rank passes read give the same
report as the whole table (``test_reduced_rows_give_the_whole_report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.rank import breakdown, overlap
from otel_ext.analysis.rank.per_rank import (
    HELD_CATEGORIES,
    cross_rank_mask,
    held_samples,
    merge_rank_tables,
    name_counts,
    per_rank_tables,
)
from otel_ext.analysis.runs import separate_captures
from otel_ext.analysis.scaleout.per_rank_jobs import (
    KeptFile,
    RankDecision,
    decide_ranks,
    for_client,
    partition_pass,
    piece_of,
    rank_partitions,
    reassemble,
    sketch,
)
from otel_ext.analysis.steps import merge_step_records, select_steps
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable

DAY = 86_400 * 10**9

_CATS = [C.CPU_OP, C.RUNTIME, C.KERNEL_COMPUTE, C.KERNEL_COMM, C.MEMCPY, C.STEP, C.COLLECTIVE]
_NAMES = ["aten::mm", "gemm", "c10d::allreduce_", "nccl:all_reduce", "copy", "ProfilerStep#1",
          "ProfilerStep#2", "ProfilerStep#3", "k2"]  # fmt: skip


@st.composite
def file_sets(draw: Any) -> list[EventTable]:
    """One to five files; each one rank (possibly shared with another file, or none)."""
    n_files = draw(st.integers(1, 5))
    files = []
    for i in range(n_files):
        rank = draw(st.sampled_from([-1, 0, 1, 2, 3]))
        base = draw(st.sampled_from([0, 10_000, 3 * DAY]))
        rows = []
        for _ in range(draw(st.integers(0, 25))):
            start = base + draw(st.integers(0, 5_000))
            cat = draw(st.sampled_from(_CATS))
            name = draw(st.sampled_from(_NAMES))
            if cat == C.STEP:
                name = draw(st.sampled_from(_NAMES[5:8]))
            rows.append(
                dict(start_ns=start, end_ns=start + draw(st.integers(0, 900)), category=cat,
                     rank=rank, name=name, stream=draw(st.sampled_from([-1, 7, 9])),
                     correlation=draw(st.integers(-1, 4)), source=f"/set/f{i}.json",
                     device=draw(st.sampled_from(["", "cuda:0", "cuda:1"])),
                     host=draw(st.sampled_from(["", "h0", "h1"])))
            )  # fmt: skip
        files.append(EventTable.from_rows(rows))
    return files


def _split(
    files: list[EventTable], parts: int, *, hold: bool = False, restore: bool = False
) -> tuple[Any, Any]:
    """The cluster's per-rank phase without the cluster: the files' ranks in ``parts``
    partitions, each file's rows of a partition taken as a piece, the per-rank passes per
    partition (holding device rows with ``hold``; put back with ``restore``, as the client
    fetches them), merged; each file's reduced rows reassembled from its pieces."""
    from otel_ext.analysis.loaders import FileResult

    whole = EventTable.concat(files)
    offsets = np.cumsum([0] + [len(f) for f in files]).tolist()
    ranks = {i: {int(r) for r in np.unique(f["rank"]) if r >= 0} for i, f in enumerate(files)}
    decision = RankDecision([], {}, {}, ranks)
    kept = [KeptFile(FileResult(f"/set/f{i}.json", "kineto", f), {}, None, None)
            for i, f in enumerate(files)]  # fmt: skip
    plan = rank_partitions(decision, list(range(len(files))), parts=parts)
    holders = {i: sum(i in p.files for p in plan) for i in range(len(files))}
    results = [
        partition_pass(
            [piece_of(kept[i], {}, p.ranks, i in p.owned, offsets[i]) for i in p.files],
            split=[holders[i] > 1 for i in p.files],
            owned=[i in p.owned for i in p.files],
            hold=hold,
        )
        for p in plan
    ]
    if restore:
        results = [
            for_client(
                r.with_held(),
                split=[holders[i] > 1 for i in p.files],
                owned=[i in p.owned for i in p.files],
            )
            for p, r in zip(plan, results)
        ]
    codes = {s: i for i, s in enumerate(whole.strings["source"])}
    merged = merge_rank_tables(results, source_code=codes)
    by_file: dict[int, list[Any]] = {}
    for p, r in zip(plan, results):
        for i, t, w in zip(p.files, r.reduced, r.reduced_positions):
            if i in p.owned:  # the owner's piece first: it carries the dictionaries
                by_file.setdefault(i, []).insert(0, (t, w))
            elif len(t):
                by_file.setdefault(i, []).append((t, w))
    assert sorted(by_file) == list(range(len(files)))  # every file's dictionaries came back
    merged.reduced = [reassemble(by_file[i]) for i in sorted(by_file)]
    return whole, merged


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(file_sets(), st.integers(1, 4))
def test_partitions_merge_to_the_whole(files: list[EventTable], parts: int) -> None:
    whole, merged = _split(files, parts)
    ref = per_rank_tables(whole)
    assert merged.temporal == breakdown.temporal_breakdown(whole) == ref.temporal
    assert merged.idle == breakdown.idle_breakdown(whole)
    assert merged.overlap == overlap.comm_comp_overlap(whole)
    assert merged.launch == breakdown.launch_stats(whole)
    assert merged.kernels.breakdown(top=3) == ref.kernels.breakdown(top=3)
    assert merged.kernels.breakdown() == breakdown.kernel_breakdown(whole)
    assert merged.names == name_counts(whole)
    assert merged.events == len(whole)
    joined = EventTable.concat(merged.reduced)
    mine = ref.reduced[0]
    assert joined.strings == mine.strings  # whole dictionaries: the same codes
    for column in mine.columns:
        assert joined[column].tolist() == mine[column].tolist(), column


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(file_sets(), st.integers(1, 4))
def test_held_rows_put_back_give_the_whole(files: list[EventTable], parts: int) -> None:
    """Partitions that hold their device rows, the held rows put back (what the client
    fetches for the causality repair): the reduced rows of the whole, code for code."""
    whole, merged = _split(files, parts, hold=True, restore=True)
    joined = EventTable.concat(merged.reduced)
    mine = per_rank_tables(whole).reduced[0]
    assert joined.strings == mine.strings
    for column in mine.columns:
        assert joined[column].tolist() == mine[column].tolist(), column


_HELD = [int(c) for c in HELD_CATEGORIES]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(file_sets(), st.integers(1, 4))
def test_held_rows_stay_and_each_ranks_span_travels(files: list[EventTable], parts: int) -> None:
    """What partitions that hold send: no device row of a rank but each file's and rank's
    first and last, every other cross-rank row, each rank's span; the held rows and the
    sent ones are the whole's reduced rows."""
    whole, merged = _split(files, parts, hold=True)
    sent = EventTable.concat(merged.reduced)
    ref = per_rank_tables(whole).reduced[0]
    assert merged.held_rows == len(ref) - len(sent)
    held = np.isin(ref["category"], _HELD) & (ref["rank"] >= 0)
    other = cross_rank_mask(ref) & ~held
    assert int(
        (cross_rank_mask(sent) & ~(np.isin(sent["category"], _HELD) & (sent["rank"] >= 0))).sum()
    ) == int(other.sum())
    device = np.isin(sent["category"], _HELD) & (sent["rank"] >= 0)
    pairs = np.stack([sent["source"][device], sent["rank"][device]], 1) if device.any() else None
    if pairs is not None:  # at most the first and the last row of each file and rank
        _, counts = np.unique(pairs.astype(np.int64), axis=0, return_counts=True)
        assert counts.max() <= 2
    for r in np.unique(whole["rank"]).tolist():
        w, k = whole["rank"] == r, sent["rank"] == r
        assert whole["start_ns"][w].min() == sent["start_ns"][k].min()
        assert whole["end_ns"][w].max() == sent["end_ns"][k].max()


@settings(max_examples=100, deadline=None)
@given(file_sets(), st.integers(1, 4), st.integers(1, 8))
def test_held_samples_and_the_sent_rows_samples_are_the_wholes(
    files: list[EventTable], parts: int, windows: int
) -> None:
    """The samples of the partitions' held compute rows (taken where they are) joined with
    the samples of the compute rows that travelled: the samples of every compute row."""
    from otel_ext.analysis.cross.alignment import RankClocks
    from otel_ext.analysis.loaders import FileResult
    from otel_ext.analysis.rank.compute_samples import ComputeSamples, samples_of

    whole = EventTable.concat(files)
    lo, hi = int(whole["start_ns"].min(initial=0)), int(whole["end_ns"].max(initial=1))
    edges = np.linspace(lo, max(hi, lo + 1), windows + 1).astype(np.int64)
    ranks = {i: {int(r) for r in np.unique(f["rank"]) if r >= 0} for i, f in enumerate(files)}
    decision = RankDecision([], {}, {}, ranks)
    offsets = np.cumsum([0] + [len(f) for f in files]).tolist()
    kept = [KeptFile(FileResult(f"/set/f{i}.json", "kineto", f), {}, None, None)
            for i, f in enumerate(files)]  # fmt: skip
    plan = rank_partitions(decision, list(range(len(files))), parts=parts)
    results = [
        partition_pass(
            [piece_of(kept[i], {}, p.ranks, i in p.owned, offsets[i]) for i in p.files],
            hold=True,
        )
        for p in plan
    ]
    # held: named by codes of their file's dictionary, which the client has (the file's)
    held = [
        h.resolved(files[p.files[h.part]].strings["name"])
        for p, r in zip(plan, results)
        for h in held_samples(r, RankClocks(), edges)
    ]
    sent = [samples_of(t, edges) for r in results for t in r.reduced]
    assert ComputeSamples.join(held + sent) == samples_of(whole, edges)


@settings(max_examples=150, deadline=None)
@given(file_sets())
def test_reduced_rows_keep_every_cross_rank_row_and_each_ranks_span(
    files: list[EventTable],
) -> None:
    whole = EventTable.concat(files)
    kept = per_rank_tables(whole).reduced[0]
    assert int(cross_rank_mask(kept).sum()) == int(cross_rank_mask(whole).sum())
    for r in np.unique(whole["rank"]).tolist():
        w, k = whole["rank"] == r, kept["rank"] == r
        assert whole["start_ns"][w].min() == kept["start_ns"][k].min()
        assert whole["end_ns"][w].max() == kept["end_ns"][k].max()


@settings(max_examples=150, deadline=None)
@given(file_sets(), st.booleans())
def test_ranks_decided_from_sketches(files: list[EventTable], one_run: bool) -> None:
    whole = EventTable.concat(files)
    formats = {f"/set/f{i}.json": "kineto" if i % 2 else "otlp-traces" for i in range(len(files))}
    table, captures = separate_captures(whole, formats=formats, one_run=one_run)
    decision = decide_ranks([sketch(f) for f in files], formats=formats, one_run=one_run)
    assert decision.captures == captures
    assert decision.rank_runs == table.meta.get("rank_runs", {})
    at = 0
    for i, f in enumerate(files):
        old = f["rank"].tolist()
        new = table["rank"][at : at + len(f)].tolist()
        assert [decision.renumber[i].get(o, o) for o in old] == new
        at += len(f)


@settings(max_examples=150, deadline=None)
@given(file_sets(), st.sampled_from(["complete", "all", "2", "1-2", "3-3", "5-9"]))
def test_steps_selected_per_file(files: list[EventTable], spec: str) -> None:
    whole = EventTable.concat(files)
    per_file = [select_steps(f, spec, none_ok=True) for f in files]
    try:
        kept, record = select_steps(whole, spec)
    except Exception as e:
        with pytest.raises(type(e), match="no file has profiler steps"):
            merge_step_records(spec, [r for _, r in per_file])
        return
    assert merge_step_records(spec, [r for _, r in per_file]) == record
    joined = EventTable.concat([t for t, _ in per_file])
    assert joined["start_ns"].tolist() == kept["start_ns"].tolist()
    assert joined["name"].tolist() == kept["name"].tolist()


@pytest.mark.parametrize("folder", ["param_dlrm_v100_8rank", "two_rank", "hta_extra"])
def test_reduced_rows_are_fewer_on_profiler_traces(shared_traces: Path, folder: str) -> None:
    """Host operators are most of a profiler trace; the cross-rank passes read few of them."""
    from otel_ext.analysis.loaders import load_paths

    table = load_paths([shared_traces / folder], workers=1).table
    per = per_rank_tables(table)
    reduced = per.reduced[0]
    cpu = table["category"] == C.CPU_OP
    assert per.events == len(table)
    assert len(reduced) < len(table)
    # what is left of the host operators: collectives, and two per file and rank at most
    left = reduced["category"] == C.CPU_OP
    names = [reduced.strings["name"][c] for c in reduced["name"][left].tolist()]
    spans = sum(1 for n in names if not n.startswith(("c10d::", "gloo:", "nccl:", "record_param")))
    pairs = np.unique(np.stack([table["source"], table["rank"]], axis=1), axis=0)
    assert spans <= 2 * len(pairs)
    assert int(left.sum()) < int(cpu.sum())


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 5_000), max_size=300), st.integers(0, 10**12))
def test_packed_positions_unpack_to_the_positions(rows: set[int], offset: int) -> None:
    from otel_ext.analysis.scaleout.per_rank_jobs import PackedPositions

    positions = np.asarray(sorted(rows), dtype=np.int64) + offset
    packed = PackedPositions.of(positions)
    assert packed.unpack().tolist() == positions.tolist()
    assert packed.count == len(positions)
    if len(positions):  # one bit a row of the span they cover
        assert len(packed.bits) == (int(positions[-1] - positions[0]) + 8) // 8
