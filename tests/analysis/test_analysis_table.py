"""The event table's constant columns: same values and same analysis results as full columns,
kept constant through select, concat and pickling, and safe to write through ``writable``."""

from __future__ import annotations

import gzip
import json
import pickle
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.loaders import _kineto_fast, load_file, load_paths
from otel_ext.analysis.loaders._common import LoadContext
from otel_ext.analysis.loaders.kineto import load_kineto_careful
from otel_ext.analysis.rank.breakdown import temporal_breakdown
from otel_ext.analysis.rank.overlap import comm_comp_overlap
from otel_ext.analysis.table import (
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    Category,
    EventTable,
    concat_columns,
    constant_column,
    is_constant,
)


def _materialised(t: EventTable) -> EventTable:
    """The same table with every column a full, writable array."""
    return EventTable({k: np.array(v) for k, v in t.columns.items()}, dict(t.strings), dict(t.meta))


def _same_columns(a: EventTable, b: EventTable) -> None:
    assert list(a.columns) == list(b.columns)
    for k in a.columns:
        assert a[k].dtype == b[k].dtype, k
        assert np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k
    assert a.strings == b.strings


def _rows(n: int, **const: Any) -> list[dict[str, Any]]:
    return [dict(start_ns=10 * i, end_ns=10 * i + 5, category=3, name=f"k{i % 3}", **const)
            for i in range(n)]  # fmt: skip


def test_built_tables_store_uniform_columns_as_constants() -> None:
    t = EventTable.from_rows(_rows(5, rank=2, host="h0"))
    const = {k for k, v in t.columns.items() if is_constant(v)}
    # every default column, and rank/host (one value in every row); not the varying ones
    assert {"span_id", "flops", "trace_id", "coll_seq", "rank", "host", "category"} <= const
    assert not {"start_ns", "end_ns", "name"} & const
    assert t["rank"].tolist() == [2] * 5 and t.string("host", 4) == "h0"
    assert t["flops"].dtype == np.float64 and t["flops"].tolist() == [-1.0] * 5
    assert t.nbytes() < _materialised(t).nbytes()
    for k, (dtype, _) in NUMERIC_COLUMNS.items():
        assert t[k].dtype == dtype, k
    for k in STRING_COLUMNS:
        assert t[k].dtype == np.int32, k


@pytest.mark.parametrize("mask", ["bool", "index", "slice", "none"])
def test_constant_columns_survive_select(mask: str) -> None:
    t = EventTable.from_rows(_rows(6, rank=3))
    m: Any = {
        "bool": np.array([True, False, True, True, False, False]),
        "index": np.array([5, 0, 2]),
        "slice": slice(1, 4),
        "none": np.zeros(6, bool),
    }[mask]
    s = t.select(m)
    want = _materialised(t).select(m)
    _same_columns(s, want)
    assert is_constant(s["rank"]) and is_constant(s["span_id"])
    assert len(s) == len(want) == len(np.arange(6)[m])


def test_select_of_an_all_constant_table_has_the_right_length() -> None:
    t = EventTable.from_rows([dict(start_ns=1, end_ns=2)] * 4)
    assert all(is_constant(v) for v in t.columns.values())
    s = t.select(np.array([True, False, True, False]))
    assert len(s) == 2 and s["end_ns"].tolist() == [2, 2]


def test_constant_columns_survive_concat() -> None:
    a = EventTable.from_rows(_rows(3, rank=1, host="h"))
    b = EventTable.from_rows(_rows(4, rank=1, host="h"))
    c = EventTable.from_rows(_rows(2, rank=2, host="other"))
    ab = EventTable.concat([a, b])
    assert is_constant(ab["rank"]) and ab["rank"].tolist() == [1] * 7
    assert is_constant(ab["host"]) and ab.decoded("host").tolist() == ["h"] * 7
    assert is_constant(ab["span_id"]) and is_constant(ab["coll_op"])
    abc = EventTable.concat([a, b, c, EventTable.empty()])  # values differ: materialised
    assert not is_constant(abc["rank"]) and abc["rank"].tolist() == [1] * 7 + [2] * 2
    assert abc.decoded("host").tolist() == ["h"] * 7 + ["other"] * 2
    assert is_constant(abc["span_id"])
    _same_columns(abc, EventTable.concat([_materialised(x) for x in (a, b, c)]))


def test_concat_columns_values_and_dtypes() -> None:
    parts = [constant_column(-1, np.int64, 3), np.array([4, 5], np.int64)]
    assert concat_columns(parts).tolist() == [-1, -1, -1, 4, 5]
    same = concat_columns([constant_column(7, np.int32, 2), np.zeros(0, np.int32)], np.int32)
    assert is_constant(same) and same.tolist() == [7, 7] and same.dtype == np.int32


def test_constant_columns_are_read_only() -> None:
    t = EventTable.from_rows(_rows(3))
    with pytest.raises(ValueError, match="read-only"):
        t["span_id"][0] = 5


def test_writable_materialises_and_leaves_sharing_tables_alone() -> None:
    t = EventTable.from_rows(_rows(4, rank=1))
    sel = t.select(np.ones(4, bool))  # its own constant
    view = t.select(slice(None))  # views of t's full columns
    pickled = pickle.loads(pickle.dumps(t))
    col = t.writable("rank")
    assert col.flags.writeable and not is_constant(col) and col is t["rank"]
    col[1] = 9
    t.writable("start_ns")[0] = -3  # a full column: written in place, owned by t alone
    v = view.writable("end_ns")  # a view: copied first
    v[:] = 0
    assert t["rank"].tolist() == [1, 9, 1, 1] and t["start_ns"][0] == -3
    assert t["end_ns"].tolist() == [5, 15, 25, 35]
    for other in (sel, view, pickled):
        assert other["rank"].tolist() == [1, 1, 1, 1] and is_constant(other["rank"])
    assert view["start_ns"][0] == -3  # a view sees its base; sel and pickled own copies
    assert sel["start_ns"][0] == 0 and pickled["start_ns"][0] == 0
    assert t.writable("rank") is col  # already owned: no second copy


def test_pickle_sends_constants_as_one_value() -> None:
    n = 200_000
    t = EventTable.from_rows([dict(start_ns=1, end_ns=4, name="k", rank=0)] * 2)
    t = t.select(np.zeros(n, np.intp))  # n rows, every column constant, none materialised
    blob = pickle.dumps(t)
    assert len(blob) < 10_000  # full columns would be ~150 bytes a row
    back = pickle.loads(blob)
    assert all(is_constant(v) for v in back.columns.values())
    _same_columns(back, t)
    mixed = EventTable.from_rows(_rows(50, rank=4))
    _same_columns(pickle.loads(pickle.dumps(mixed)), mixed)


def _kineto_doc(n: int, *, rank: int, base: int, same_times: bool = False) -> dict[str, Any]:
    events = [{"ph": "X", "cat": "kernel", "name": f"gemm{i % 2}", "pid": 0, "tid": 7,
               "ts": 5 if same_times else i * 10, "dur": 3,
               "args": {"stream": 7, "correlation": i + 1, "device": 0}}
              for i in range(n)]  # fmt: skip
    return {"distributedInfo": {"rank": rank, "world_size": 8},
            "baseTimeNanoseconds": base, "traceEvents": events}  # fmt: skip


@pytest.mark.parametrize("same_times", [False, True])
@pytest.mark.parametrize("fast", [True, False])
def test_loaded_kineto_table_uses_constants(tmp_path: Path, fast: bool, same_times: bool) -> None:
    """Defaults, rank, host and source are constant; base time still added (in place, to a
    column that may itself have been constant); fast and careful paths give one table."""
    f = tmp_path / "r.json.gz"
    doc = _kineto_doc(6, rank=5, base=1_000_000_000, same_times=same_times)
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    if fast:
        assert _kineto_fast.decode_fast(json.dumps(doc).encode()) is not None  # it really ran
        t = load_file(f).table
    else:
        t = load_kineto_careful(
            gzip.decompress(f.read_bytes()), path=str(f), ctx=LoadContext(str(f))
        )
    assert t is not None
    starts = [1_000_005_000] * 6 if same_times else [1_000_000_000 + 10_000 * i for i in range(6)]
    assert t["start_ns"].tolist() == starts
    assert t["end_ns"].tolist() == [s + 3000 for s in starts]
    assert t["rank"].tolist() == [5] * 6 and is_constant(t["rank"])
    for c in ("span_id", "raw_start_ticks", "flops", "trace_id", "coll_seq", "source"):
        assert is_constant(t[c]), c
    assert t.decoded("source").tolist() == [str(f)] * 6


def test_collective_inheritance_writes_into_constant_columns(tmp_path: Path) -> None:
    """A kernel inside a collective host op takes its metadata: the collective columns, all
    constant before, are materialised for the write."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 0,
         "dur": 100, "args": {"External id": 4, "Collective name": "allreduce", "Seq": 3,
                              "Process Group Name": "0", "Group size": 2, "dtype": "Float",
                              "In msg nelems": 8, "Out msg nelems": 8}},
        {"ph": "X", "cat": "kernel", "name": "some_kernel", "pid": 0, "tid": 7, "ts": 10,
         "dur": 50, "args": {"stream": 7, "correlation": 1, "External id": 4}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 70,
         "dur": 5, "args": {"stream": 7, "correlation": 2, "External id": 9}},
    ]  # fmt: skip
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": events}))
    t = load_file(f).table
    assert t is not None
    k = int(np.flatnonzero(t.decoded("name") == "some_kernel")[0])
    g = int(np.flatnonzero(t.decoded("name") == "gemm")[0])
    assert t["category"][k] == Category.KERNEL_COMM and t["category"][g] == Category.KERNEL_COMPUTE
    assert t["coll_seq"][k] == 3 and t["coll_seq"][g] == -1
    assert t.string("coll_op", k) == "allreduce" and t.string("coll_op", g) == ""


# ---- analyses: constant columns give the very results of full columns -------------------

_ROW_FIELDS = ("start_ns", "dur", "category", "stream", "coll_seq", "coll_op", "coll_group",
               "coll_bytes")  # fmt: skip
_row = st.fixed_dictionaries(
    {
        "start_ns": st.integers(0, 400),
        "dur": st.integers(0, 60),
        "category": st.sampled_from([int(c) for c in Category]),
        "stream": st.integers(-1, 2),
        "coll_seq": st.integers(-1, 3),
        "coll_op": st.sampled_from(["", "allreduce", "allgather"]),
        "coll_group": st.sampled_from(["", "pg0"]),
        "coll_bytes": st.integers(-1, 4096),
    }
)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[EventTable, EventTable]:
    """A table of 1–4 parts (files), each with its own rank, concatenated and maybe selected
    from; columns often uniform within a part (so constant), and sometimes across parts.
    With it, the same table built alike from parts whose columns are all materialised."""
    parts = []
    uniform = draw(st.sets(st.sampled_from(_ROW_FIELDS), max_size=8))
    for part in range(draw(st.integers(1, 4))):
        rank = draw(st.sampled_from([part, 0, -1]))
        rows = draw(st.lists(_row, min_size=1, max_size=25))
        for k in uniform:
            for r in rows[1:]:
                r[k] = rows[0][k]
        parts.append(
            EventTable.from_rows(
                {
                    **r,
                    "end_ns": r["start_ns"] + r.pop("dur"),
                    "rank": rank,
                    "name": "k",
                    "source": f"f{part}",
                }
                for r in rows
            )
        )
    every = draw(st.integers(1, 4))
    out = []
    for ps in (parts, [_materialised(p) for p in parts]):
        t = EventTable.concat(ps)
        if every > 1:  # and a selection of it
            t = t.select(np.arange(len(t)) % every != 0)
        out.append(t)
    return out[0], out[1]


def _same_match(a: Any, b: Any) -> None:
    """Every attribute alike: the fields and what ``_derive`` computed from them."""
    assert {f.name for f in fields(a)} <= set(vars(a)) and set(vars(a)) == set(vars(b))
    for name, x in vars(a).items():
        y = getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
        else:
            assert x == y, name


@settings(max_examples=120, deadline=None)
@given(_tables())
def test_constant_columns_give_identical_analyses(case: tuple[EventTable, EventTable]) -> None:
    t, full = case
    assert not any(is_constant(v) for v in full.columns.values())
    assert any(is_constant(v) for v in t.columns.values())  # the defaults at least
    _same_columns(t, full)
    assert [r.as_dict() for r in temporal_breakdown(t)] == [
        r.as_dict() for r in temporal_breakdown(full)
    ]
    assert [r.as_dict() for r in comm_comp_overlap(t)] == [
        r.as_dict() for r in comm_comp_overlap(full)
    ]
    _same_match(match_collectives(t), match_collectives(full))


def test_property_tables_exercise_collective_matching() -> None:
    """Guard for the property test: its kind of table does match collectives across ranks."""
    rows = [dict(start_ns=10 * s + r, end_ns=10 * s + 5, category=Category.KERNEL_COMM,
                 coll_seq=s, coll_op="allreduce", coll_group="pg0", rank=r, stream=1)
            for r in range(2) for s in range(3)]  # fmt: skip
    parts = [EventTable.from_rows([x for x in rows if x["rank"] == r]) for r in range(2)]
    t = EventTable.concat(parts)
    assert is_constant(t["coll_op"]) and is_constant(t["category"])
    m = match_collectives(t)
    assert m.n_instances == 3
    _same_match(m, match_collectives(_materialised(t)))


def test_parallel_load_keeps_constants(tmp_path: Path) -> None:
    """Tables sent back from pool workers arrive with their constant columns still constant."""
    for r in range(3):
        doc = _kineto_doc(4000, rank=r, base=0)
        (tmp_path / f"r{r}.json").write_text(json.dumps(doc))
    par = load_paths([tmp_path], workers=2).table
    ser = load_paths([tmp_path], workers=1).table
    _same_columns(par, ser)
    for c in ("span_id", "flops", "trace_id", "coll_seq", "coll_op", "host"):
        assert is_constant(par[c]), c
    assert par["rank"].tolist() == [0] * 4000 + [1] * 4000 + [2] * 4000


@given(
    st.lists(
        st.tuples(st.integers(-1, 6), st.integers(0, 5 * 10**12), st.integers(0, 10**9)),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([0, 7, 10**6]),
)
def test_rank_runs_are_the_overlap_components(
    rows: list[tuple[int, int, int]], rank_base: int
) -> None:
    """Runs are the connected components of 'spans within the gap', against a pairwise
    reference; rank numbers far apart (sorted path) and close (direct path) alike."""
    from otel_ext.analysis.runs import RUN_GAP_NS, rank_runs

    t = EventTable.from_rows(
        [
            dict(
                start_ns=s,
                end_ns=s + d,
                rank=r + rank_base if r >= 0 else -1,
                category=Category.KERNEL_COMPUTE,
            )
            for r, s, d in rows
        ]
    )
    spans: dict[int, list[int]] = {}
    for r, s, d in rows:
        if r >= 0:
            lo, hi = spans.setdefault(r + rank_base, [s, s + d])
            spans[r + rank_base] = [min(lo, s), max(hi, s + d)]
    near = {a: {b for b in spans if spans[b][0] <= spans[a][1] + RUN_GAP_NS
                and spans[a][0] <= spans[b][1] + RUN_GAP_NS} for a in spans}  # fmt: skip
    comp: dict[int, int] = {}
    for a in sorted(spans, key=lambda k: spans[k][0]):
        if a in comp:
            continue
        todo, comp[a] = [a], len(set(comp.values()))
        while todo:
            for b in near[todo.pop()]:
                if b not in comp:
                    comp[b] = comp[a]
                    todo.append(b)
    got = rank_runs(t)
    assert set(got) == set(spans)
    assert {frozenset(k for k in got if got[k] == v) for v in got.values()} == {
        frozenset(k for k in comp if comp[k] == v) for v in comp.values()
    }
