"""The reduced rows and metric points as they travel to a Dask client
(:class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable`,
:class:`~otel_ext.analysis.scaleout.packed_rows.PackedPoints`): lossless, value for value and dtype
for dtype, whatever the columns hold (extremes, wrapping steps, negative zeros, NaN), and
smaller than the rows as :class:`EventTable` pickles them on a real simulated run."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.scaleout.packed_rows import PackedFields, PackedPoints, PackedTable
from otel_ext.analysis.table import (
    NUMERIC_COLUMNS,
    Category,
    EventTable,
    constant_column,
    is_constant,
)

INT64 = st.integers(-(2**63), 2**63 - 1)


def _same_table(back: EventTable, table: EventTable) -> None:
    assert list(back.columns) == list(table.columns)
    for k, v in table.columns.items():
        got = back[k]
        assert got.dtype == v.dtype, k
        # constant columns stay constant (an empty one travels as EventTable pickles it)
        assert is_constant(got) == is_constant(v) or len(v) == 0, k
        if v.dtype.kind == "f":  # NaN in the same places, zeros with their signs
            assert np.array_equal(got, v, equal_nan=True), k
            assert np.array_equal(np.signbit(got), np.signbit(v)), k
        else:
            assert np.array_equal(got, v), k
    assert back.strings == table.strings
    assert back.meta == table.meta


def _column(draw: st.DrawFn, dtype: np.dtype, n: int) -> np.ndarray:
    """A column of ``n`` values of ``dtype``: anything the dtype holds, clustered values,
    a few far-apart ones, sorted runs, or one value throughout."""
    kind = draw(st.sampled_from(["any", "near", "few", "runs", "same"]))
    if dtype.kind == "f":
        special = st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -1.0, 2.0**53, 1.5])
        whole = st.integers(-(2**60), 2**60).map(float)
        base = st.one_of(whole, st.floats(allow_nan=True), special)
        values = [draw(base) for _ in range(n)] if kind == "any" else None
        if values is None:
            pool = [draw(st.one_of(whole, special)) for _ in range(draw(st.integers(1, 4)))]
            values = [pool[draw(st.integers(0, len(pool) - 1))] for _ in range(n)]
        return np.asarray(values, dtype=dtype)
    info = np.iinfo(dtype)
    ints = st.integers(int(info.min), int(info.max))
    if kind == "same":
        return np.full(n, draw(ints), dtype=dtype)
    if kind == "few":
        pool = [draw(ints) for _ in range(draw(st.integers(1, 5)))]
        return np.asarray([pool[draw(st.integers(0, len(pool) - 1))] for _ in range(n)], dtype)
    if kind in ("near", "runs"):
        centre = draw(ints)
        spread = draw(st.sampled_from([1, 200, 60_000, 2**31, 2**40]))
        lo, hi = max(int(info.min), centre - spread), min(int(info.max), centre + spread)
        values = sorted(draw(st.integers(lo, hi)) for _ in range(n))
        if kind == "runs" and n > 2:  # a sorted run per rank: a long step back between
            cut = draw(st.integers(1, n - 1))
            values = values[cut:] + values[:cut]
        return np.asarray(values, dtype=dtype)
    return np.asarray([draw(ints) for _ in range(n)], dtype=dtype)


@st.composite
def tables(draw: st.DrawFn) -> EventTable:
    n = draw(st.integers(0, 1200))
    categories = draw(st.lists(st.sampled_from(list(Category)), min_size=1, max_size=4))
    columns: dict[str, np.ndarray] = {}
    for name, (dtype, default) in NUMERIC_COLUMNS.items():
        if name == "category":
            picks = [int(categories[draw(st.integers(0, len(categories) - 1))]) for _ in range(n)]
            columns[name] = np.asarray(picks, dtype=np.int8)
        elif draw(st.integers(0, 3)) == 0:
            columns[name] = constant_column(default, dtype, n)
        else:
            columns[name] = _column(draw, np.dtype(dtype), n)
    if n and draw(st.booleans()):  # parents that are other rows' spans, and some not
        span = columns["span_id"]
        picks = np.asarray([draw(st.integers(0, n - 1)) for _ in range(n)])
        parent = np.asarray(span)[picks].copy()
        lost = [draw(st.integers(0, n - 1)) for _ in range(draw(st.integers(0, 5)))]
        parent[lost] = [draw(st.integers(0, 2**64 - 1)) for _ in lost]
        columns["parent_span_id"] = parent
    names = ["", *(f"k{i}" for i in range(draw(st.integers(0, 300))))]
    strings = {"name": names, "trace_id": ["", "\udc80", "\x00 a"]}
    return EventTable(columns, strings, {"rank_runs": {0: 0}})


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(tables())
def test_a_packed_table_unpacks_to_the_table(table: EventTable) -> None:
    packed = PackedTable.of(table)
    _same_table(pickle.loads(pickle.dumps(packed)).unpack(), table)


@settings(max_examples=200, deadline=None)
@given(st.lists(INT64, min_size=2, max_size=400), st.integers(0, 2**40))
def test_steps_that_wrap_unpack_exactly(values: list[int], shift: int) -> None:
    """Start times whose steps overflow 64 bits (a -1 next to an epoch time) or 32 bits
    (one rank's rows after another's) come back exactly."""
    start = np.asarray(sorted(values), dtype=np.int64)
    start = np.r_[start, start[:1] + np.int64(shift % 2**62)]
    t = EventTable(
        {"start_ns": start, "end_ns": start.copy(), "category": np.zeros(len(start), np.int8)},
        {},
        {},
    )
    _same_table(PackedTable.of(t).unpack(), t)


def test_long_steps_are_patched_not_widened() -> None:
    """Sorted runs of 32 ranks, 10 s each: 31 steps back too long for 32 bits, each kept
    apart; the others travel at 4 bytes."""
    rng = np.random.default_rng(0)
    runs = [np.sort(rng.integers(0, 10**10, 1000)) + 10**18 for _ in range(32)]
    start = np.concatenate(runs).astype(np.int64)
    n = len(start)
    t = EventTable(
        {"start_ns": start, "end_ns": start + 5, "category": np.full(n, 8, np.int8)}, {}, {}
    )
    packed = PackedTable.of(t)
    _same_table(packed.unpack(), t)
    assert len(pickle.dumps(packed.blocks[2 * 8]["start_ns"])) < 4.2 * n  # layers, no parent


@st.composite
def points(draw: st.DrawFn) -> object:
    from otel_ext.analysis.loaders import MetricPoints

    n = draw(st.integers(0, 800))
    i64, i32 = np.dtype(np.int64), np.dtype(np.int32)
    codes = {k: _column(draw, i32, n) for k in ("name", "kind", "device", "host", "link")}
    return MetricPoints(
        _column(draw, i64, n),
        _column(draw, i64, n),
        _column(draw, np.dtype(np.float64), n),
        _column(draw, i64, n),
        codes,
        {"name": ["", "hw.power"]},
        draw(st.integers(0, 10)),
    )


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(points())
def test_packed_points_unpack_to_the_points(p: object) -> None:
    back = pickle.loads(pickle.dumps(PackedPoints.of(p))).unpack()
    for k in ("time_ns", "start_time_ns", "values", "count"):
        a, b = getattr(back, k), getattr(p, k)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), k
        assert np.array_equal(np.signbit(a), np.signbit(b)), k
    assert set(back.codes) == set(p.codes)  # type: ignore[attr-defined]
    for k, v in p.codes.items():  # type: ignore[attr-defined]
        assert back.codes[k].dtype == v.dtype and np.array_equal(back.codes[k], v), k
    assert back.strings == p.strings and back.left_out == p.left_out  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from otel_ext.cli import main

    out = tmp_path_factory.mktemp("packed-sim") / "run"
    args = ["simulate", "--hosts", "2", "--chips", "4", "--requests", "60", "--seed", "5",
            "--no-timeline", "--out", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    return out


def test_a_simulated_runs_reduced_rows_pack_to_under_half(simulated: Path) -> None:
    """An OTLP run's reduced rows (layers, collectives, communication kernels, links,
    requests, phases: nearly every row) as they leave a partition: the same rows back, in
    under half the bytes; its metric points too."""
    from otel_ext.analysis.cross.counter_evidence import READ_METRICS
    from otel_ext.analysis.loaders import load_paths
    from otel_ext.analysis.rank.per_rank import per_rank_tables

    load = load_paths([simulated], workers=1)
    per = per_rank_tables(load.table, hold=True)
    (rows,) = per.reduced
    cats = set(np.unique(rows["category"]).tolist())
    assert {int(Category.LAYER), int(Category.COLLECTIVE), int(Category.LINK_TRANSFER)} <= cats
    packed = PackedTable.of(rows)
    _same_table(pickle.loads(pickle.dumps(packed)).unpack(), rows)
    assert len(pickle.dumps(packed)) < 0.5 * len(pickle.dumps(rows))
    metrics = load.metrics.only_names(READ_METRICS)
    assert len(metrics) > 0
    assert len(pickle.dumps(PackedPoints.of(metrics))) < 0.5 * len(pickle.dumps(metrics))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_packed_fields_unpack_to_the_object(data: st.DataObject) -> None:
    """The walk's pieces and the held samples travel as :class:`PackedFields`: every array
    back value for value and dtype for dtype, the other fields untouched."""
    from otel_ext.analysis.cross.critical_path_walk import WalkPieces

    pieces = WalkPieces.empty()
    for name, value in list(vars(pieces).items()):
        if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
            n = data.draw(st.integers(0, 120))
            setattr(pieces, name, _drawn(data, value, n))
    back = pickle.loads(pickle.dumps(PackedFields.of(pieces))).unpack()
    assert type(back) is WalkPieces
    assert set(vars(back)) == set(vars(pieces))
    for name, value in vars(pieces).items():
        got = getattr(back, name)
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype, name
            assert np.array_equal(got, value, equal_nan=value.dtype.kind == "f"), name
            if value.dtype.kind == "f":
                assert np.array_equal(np.signbit(got), np.signbit(value)), name
        else:
            assert got == value, name


def _drawn(data: st.DataObject, like: np.ndarray, n: int) -> np.ndarray:
    return data.draw(st.composite(lambda draw: _column(draw, like.dtype, n))())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(INT64, INT64), max_size=300), st.integers(-1, 4096))
def test_packed_busy_intervals_unpack_exactly(pairs: list[tuple[int, int]], rank: int) -> None:
    """The held rows' busy intervals: starts as steps, ends as lengths (wrapping where the
    values are extremes), back exactly."""
    from otel_ext.analysis.scaleout.packed_rows import packed_busy, unpacked_busy

    start = np.asarray([a for a, _ in pairs], dtype=np.int64)
    end = np.asarray([b for _, b in pairs], dtype=np.int64)
    busy = {"h0/chip1": [(rank, start, end)], "": [(rank, np.sort(start), np.sort(end))]}
    back = unpacked_busy(pickle.loads(pickle.dumps(packed_busy(busy))))
    assert list(back) == list(busy)
    for name, spans in busy.items():
        for (r, s, e), (r2, s2, e2) in zip(spans, back[name]):
            assert r2 == r and s2.dtype == s.dtype and e2.dtype == e.dtype
            assert s2.tolist() == s.tolist() and e2.tolist() == e.tolist()


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 600), st.integers(0, 2**32), st.data())
def test_children_relative_to_their_parents_unpack_exactly(
    n: int, seed: int, data: st.DataObject
) -> None:
    """Rows whose parent row is in the table (chains of them, some rows in a cycle, some
    pointing at themselves) travel as differences from the parent's values where that is
    narrower: the parents are resolved first, the rows in cycles travel as themselves."""
    from otel_ext.analysis.scaleout import packed_rows

    rng = np.random.default_rng(seed)
    span = rng.integers(1, 2**62, size=n, dtype=np.int64).astype(np.uint64)
    ref = np.asarray([data.draw(st.integers(0, max(0, i - 1))) for i in range(n)])
    ref[0] = 0  # a root pointing at itself
    if n > 3 and data.draw(st.booleans()):  # a cycle: 1 -> 2 -> 1
        ref[1], ref[2] = 2, 1
    parent = span[ref]
    rank = np.empty(n, np.int32)
    start = np.empty(n, np.int64)
    for i in range(n):  # children like their parents: the same rank, starting just after
        p = ref[i]
        rank[i] = rank[p] if p < i else rng.integers(-1, 4096)
        start[i] = start[p] + rng.integers(0, 1000) if p < i else rng.integers(0, 2**62)
    category = rng.choice([int(Category.LAYER), int(Category.KERNEL_COMM)], n).astype(np.int8)
    t = EventTable(
        {
            "start_ns": start,
            "end_ns": start + rng.integers(0, 10**6, n),
            "category": category,
            "rank": rank,
            "span_id": span,
            "parent_span_id": parent,
        },
        {},
        {},
    )
    packed = packed_rows.PackedTable.of(t)
    _same_table(pickle.loads(pickle.dumps(packed)).unpack(), t)


def test_kernels_travel_from_their_collectives() -> None:
    """Communication kernels under collective spans of random ranks and times: their ranks
    and starts travel as differences from their parents' (zero, and a few microseconds),
    narrower than the values; exact."""
    from otel_ext.analysis.scaleout import packed_rows

    rng = np.random.default_rng(7)
    m = 500
    span = rng.integers(1, 2**62, 2 * m).astype(np.uint64)
    start = np.r_[rng.integers(0, 2**50, m), np.zeros(m, np.int64)].astype(np.int64)
    start[m:] = start[:m] + rng.integers(0, 5000, m)
    rank = np.r_[rng.integers(0, 4096, m), np.zeros(m)].astype(np.int32)
    rank[m:] = rank[:m]
    parent = np.r_[np.zeros(m, np.uint64), span[:m]]
    category = np.r_[np.full(m, int(Category.COLLECTIVE)), np.full(m, int(Category.KERNEL_COMM))]
    t = EventTable(
        {"start_ns": start, "end_ns": start + 40_000, "category": category.astype(np.int8),
         "rank": rank, "span_id": span, "parent_span_id": parent},
        {},
        {},
    )  # fmt: skip
    packed = packed_rows.PackedTable.of(t)
    _same_table(packed.unpack(), t)
    kernels = packed.blocks[2 * int(Category.KERNEL_COMM) + 1]
    assert isinstance(kernels["rank"], packed_rows._FromParent)
    assert isinstance(kernels["start_ns"], packed_rows._FromParent)


def test_a_deep_chain_of_parents_is_bounded() -> None:
    """A chain of 100 nested spans: the first 32 below the root travel from their parents,
    the deeper ones as themselves (the client resolves at most 32 levels); all exact."""
    from otel_ext.analysis.scaleout import packed_rows

    n = 100
    span = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(2**40 + 7)
    parent = np.r_[np.uint64(0), span[:-1]]
    start = np.arange(n, dtype=np.int64) * 3 + 10**18
    rank = np.full(n, 5, np.int32)
    rank[::7] = 6
    t = EventTable(
        {"start_ns": start, "end_ns": start + 100, "category": np.full(n, 8, np.int8),
         "rank": rank, "span_id": span, "parent_span_id": parent},
        {},
        {},
    )  # fmt: skip
    packed = packed_rows.PackedTable.of(t)
    _same_table(packed.unpack(), t)
    assert packed.children is not None
    assert int(np.unpackbits(packed.children, count=n).sum()) == packed_rows._MAX_DEPTH
