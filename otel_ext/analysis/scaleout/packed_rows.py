"""Lossless packing of what the Dask workers send the client: reduced rows, metric points,
busy intervals, the walk's pieces and held samples.

:class:`PackedTable` packs an :class:`~otel_ext.analysis.table.EventTable` category by
category: a column holding one value once, integers at the narrowest width their spread
needs, start times as steps from the previous row and ends as durations, parent span ids as
references to the parent row (and integer columns relative to the parent's where narrower),
whole floats as integers and other floats by their distinct bit patterns, long string
dictionaries compressed. :class:`PackedPoints` packs metric points the same way (their string
codes as one index into their series), :func:`packed_busy` the per-device busy intervals,
:class:`PackedFields` any object's array fields. Each ``unpack`` gives back the same values and
dtypes (``tests/analysis/test_analysis_packed_rows.py``), so no pass on the client changes;
:mod:`otel_ext.analysis.scaleout.per_rank_jobs` and :mod:`otel_ext.analysis.scaleout.dask_cluster` use them.
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from otel_ext.analysis.table import EventTable, constant_column

__all__ = ["PackedFields", "PackedPoints", "PackedTable", "packed_busy", "unpacked_busy"]


#: the widths an integer column may travel at, narrowest first (its values less their least)
_WIDTHS = (np.uint8, np.uint16, np.uint32)


@dataclass(frozen=True)
class _Offsets:
    """An integer column as its least value and each value's excess over it, at the
    narrowest width that holds them; with ``first``, the column's first value and the
    steps from each value to the next (their least and excesses), which a running sum in
    64-bit arithmetic undoes exactly (wrapping as the steps did), the few steps too long
    for 32 bits (from one rank's rows to the next's) apart: at ``patch_at``, ``patch``."""

    dtype: str
    least: int
    excess: np.ndarray
    first: int | None = None
    patch_at: np.ndarray | None = None
    patch: np.ndarray | None = None

    def unpack(self) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        values = self.excess.astype(dtype) + np.asarray(self.least).astype(dtype)
        if self.first is None:
            return values
        if self.patch_at is not None and self.patch is not None:
            values[self.patch_at] = self.patch
        return np.cumsum(np.r_[np.asarray(self.first, dtype=dtype), values], dtype=dtype)


#: at most this share of an int64 column's steps may be too long for 32 bits (each costs
#: 16 bytes apart) for the steps to travel at 32 bits
_PATCH_SHARE = 0.01


def _offsets(column: np.ndarray, *, delta: bool = False) -> np.ndarray | _Offsets:
    """``column`` (integers, two or more) at the narrowest width its spread allows (with
    ``delta``, an int64 column's steps'), or as it is."""
    first = at = patch = None
    values = column
    if delta:
        first = int(column[0])
        with np.errstate(over="ignore"):
            values = np.diff(column)
        fits = (values >= -(2**31)) & (values < 2**31)
        if not fits.all() and (~fits).sum() <= _PATCH_SHARE * len(values):
            at = np.flatnonzero(~fits)
            patch = values[at]
            values = np.where(fits, values, 0)
    least, most = int(values.min()), int(values.max())
    for width in _WIDTHS:
        if most - least <= np.iinfo(width).max:
            excess = (values - np.asarray(least).astype(values.dtype)).astype(width)
            return _Offsets(column.dtype.str, least, excess, first, at, patch)
    return column


def _packed_column(column: np.ndarray, *, delta: bool = False) -> PackedColumn:
    """One column of rows of one category, as it travels: one value when they all hold it,
    integers at the width their spread needs (floats that are all whole numbers below
    2**53, none a negative zero, as such integers), or as their distinct values and an index
    (other floats by their bit patterns), else as it is."""
    n = len(column)
    if n == 0:
        return column
    first = column[0]
    if column.dtype.kind == "f":
        whole = np.isfinite(column).all() and (np.abs(column) < 2.0**53).all()
        if (
            whole
            and (np.trunc(column) == column).all()
            and not np.signbit(column[column == 0]).any()
        ):
            ints = column.astype(np.int64)
            if (ints == first).all():
                return _Same(first.item(), column.dtype.str, n)
            return _Whole(column.dtype.str, _packed_column(ints))
        if len(column) < 2 * 256:
            return column
        if column.dtype != np.float64:
            return column
        bits = _distinct(np.ascontiguousarray(column).view(np.uint64))
        return column if isinstance(bits, np.ndarray) else _Bits(column.dtype.str, bits)
    if (column == first).all():
        return _Same(first.item(), column.dtype.str, n)
    if column.dtype.kind in "iu" and column.dtype.itemsize > 1:
        packed = _offsets(column, delta=delta and column.dtype == np.int64)
        if isinstance(packed, _Offsets) or len(column) < 2 * 256:
            return packed
        return _distinct(column)
    return column


def _distinct(column: np.ndarray) -> np.ndarray | _Distinct:
    """``column`` as its distinct values and each row's index among them (one or two bytes
    a row), when that is smaller (a few far-apart values: 0 and epoch times; the FLOP counts
    of a few hundred layer shapes), else as it is."""
    values, index = np.unique(column, return_inverse=True)
    width = np.uint8 if len(values) <= 256 else np.uint16
    if len(values) > 65536 or values.nbytes + len(column) * np.dtype(width).itemsize >= (
        column.nbytes
    ):
        return column
    return _Distinct(values, index.reshape(-1).astype(width))


@dataclass(frozen=True)
class _Distinct:
    """A column as its distinct values and each row's index among them."""

    values: np.ndarray
    index: np.ndarray

    def unpack(self) -> np.ndarray:
        return self.values[self.index]


@dataclass(frozen=True)
class _Same:
    """A column whose rows all hold one value."""

    value: Any
    dtype: str
    n: int

    def unpack(self) -> np.ndarray:
        return np.full(self.n, self.value, dtype=np.dtype(self.dtype))


@dataclass(frozen=True)
class _Whole:
    """A float column whose values are all whole numbers below 2**53, as integers."""

    dtype: str
    ints: PackedColumn

    def unpack(self) -> np.ndarray:
        return _unpacked(self.ints).astype(np.dtype(self.dtype))


@dataclass(frozen=True)
class _Bits:
    """A float column as its values' bit patterns (distinct: NaN, -0.0 kept as they are)."""

    dtype: str
    bits: _Distinct

    def unpack(self) -> np.ndarray:
        return _unpacked(self.bits).view(np.dtype(self.dtype))


@dataclass(frozen=True)
class _Zipped:
    """A string dictionary, pickled and compressed (a run's trace ids, attribute texts)."""

    data: bytes

    def unpack(self) -> list[str]:

        out: list[str] = pickle.loads(zlib.decompress(self.data))
        return out


#: string dictionaries of more entries than this travel compressed
_ZIP_ENTRIES = 64

#: ... but for these: the kernel statistics that travel with the rows name kernels by the
#: same string objects, which one pickle of both sends once (compressed here, they would
#: travel twice)
_ZIP_SKIP = frozenset({"name"})


#: one column as it travels (:func:`_packed_column`): as it is, or packed
PackedColumn = np.ndarray | _Offsets | _Same | _Whole | _Bits | _Distinct

#: a table's string dictionaries as they travel: each as it is, or pickled and compressed
PackedStrings = dict[str, list[str] | _Zipped]

#: the held rows' busy intervals as they travel (:func:`packed_busy`): per device name, per
#: rank, the starts (as steps) and the lengths
PackedBusy = dict[str, list[tuple[int, PackedColumn, PackedColumn]]]


def _packed_strings(strings: dict[str, list[str]]) -> PackedStrings:

    return {
        k: _Zipped(zlib.compress(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), 1))
        if len(v) > _ZIP_ENTRIES and k not in _ZIP_SKIP
        else v
        for k, v in strings.items()
    }


def _unpacked_strings(strings: PackedStrings) -> dict[str, list[str]]:
    return {k: v.unpack() if isinstance(v, _Zipped) else v for k, v in strings.items()}


def _parent_rows(
    span: np.ndarray, parent: np.ndarray
) -> tuple[np.ndarray, tuple[PackedColumn, PackedColumn] | None]:
    """``parent`` (span ids) as references to the rows of ``span`` that hold them: each
    row's distance back to such a row (int64), and, apart, the rows whose parent no row
    holds (positions, values)."""
    n = len(span)
    order = np.argsort(span, kind="stable")
    at = np.clip(np.searchsorted(span[order], parent), 0, n - 1)
    ref = order[at]
    found = span[ref] == parent
    rel = np.where(found, np.arange(n, dtype=np.int64) - ref, 0).astype(np.int64)
    lost = np.flatnonzero(~found)
    patch = (_packed_column(lost, delta=True), _packed_column(parent[lost])) if len(lost) else None
    return rel, patch


def _unpacked(packed: PackedColumn) -> np.ndarray:
    return packed if isinstance(packed, np.ndarray) else packed.unpack()


@dataclass(frozen=True)
class PackedTable:
    """A table of reduced rows as it travels to the client, category by category: in each
    category's rows, a column they all hold one value of travels as that value, an integer
    column at the width its spread needs (start times as the steps from one row to the
    next, end times as durations), a float column of whole numbers as integers; a column
    constant in the whole table as one value, as :class:`EventTable` pickles it. Lossless:
    :meth:`unpack` gives the table back, value for value and dtype for dtype (the
    constant columns constant), so every pass on the client reads what it would have read.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(start_ns=10**12 + 7 * i, end_ns=10**12 + 7 * i + 3,
    ...     category=C.LAYER if i % 2 else C.COLLECTIVE, rank=i % 4, flops=2.0e9 * i,
    ...     name="mlp") for i in range(1000)])
    >>> p = PackedTable.of(t)
    >>> back = p.unpack()
    >>> all(np.array_equal(back[k], t[k]) and back[k].dtype == t[k].dtype for k in t.columns)
    True
    >>> import pickle
    >>> len(pickle.dumps(p)) < len(pickle.dumps(t)) / 2
    True
    """

    n: int
    order: tuple[str, ...]
    category: np.ndarray
    blocks: dict[int, dict[str, PackedColumn | _FromParent]]
    constant: dict[str, tuple[Any, str]]
    strings: PackedStrings
    meta: dict[str, Any]
    empty: EventTable | None = None
    #: parent span ids as references to rows: the rows whose parent no row holds
    #: (positions, values), or None when they travel as themselves
    parents: tuple[PackedColumn, PackedColumn] | tuple[()] | None = None
    #: the rows whose parent row is in the table (no cycle leads back to them), as bits:
    #: their integer columns may travel as differences from the parent row's
    children: np.ndarray | None = None

    @classmethod
    def of(cls, table: EventTable) -> PackedTable:

        from otel_ext.analysis.table import is_constant

        n = len(table)
        if n == 0:
            return cls(0, (), table["category"], {}, {}, {}, {}, empty=table)
        category = np.asarray(table["category"])
        constant = {
            k: (v[0].item(), v.dtype.str)
            for k, v in table.columns.items()
            if n and is_constant(v) and k != "category"
        }
        columns = dict(table.columns)
        parents: tuple[PackedColumn, PackedColumn] | tuple[()] | None = None
        child = np.zeros(n, dtype=bool)
        ref = np.arange(n, dtype=np.int64)
        if (
            "parent_span_id" in columns
            and "parent_span_id" not in constant
            and columns.get("span_id", np.zeros(0)).dtype == columns["parent_span_id"].dtype
        ):
            columns["parent_span_id"], parents = _parent_rows(
                table["span_id"], table["parent_span_id"]
            )
            ref = ref - columns["parent_span_id"]
            child = _acyclic_children(ref, parents)
            parents = parents or ()
        blocks: dict[int, dict[str, PackedColumn | _FromParent]] = {}
        for code in np.unique(category).tolist():
            for kid in (False, True):
                rows = np.flatnonzero((category == code) & (child == kid))
                if len(rows) == 0:
                    continue
                block: dict[str, PackedColumn | _FromParent] = {}
                for k, v in columns.items():
                    if k in constant or k == "category":
                        continue
                    if k == "end_ns":  # durations: narrower than the ends
                        with np.errstate(over="ignore"):
                            v = v - table["start_ns"]
                    packed: PackedColumn | _FromParent = _packed_column(
                        v[rows], delta=k == "start_ns"
                    )
                    if kid and v.dtype.kind in "iu" and k not in _NOT_RELATIVE:
                        with np.errstate(over="ignore"):
                            diff = _packed_column(v[rows] - v[ref[rows]])
                        if len(pickle.dumps(diff)) < len(pickle.dumps(packed)):
                            packed = _FromParent(diff)
                    block[k] = packed
                blocks[2 * int(code) + kid] = block
        order = tuple(table.columns)
        strings = _packed_strings(table.strings)
        kids = np.packbits(child) if child.any() else None
        return cls(
            n, order, category.copy(), blocks, constant, strings, table.meta, None, parents, kids
        )  # fmt: skip

    def unpack(self) -> EventTable:
        if self.empty is not None:
            return self.empty
        child = np.zeros(self.n, dtype=bool)
        if self.children is not None:
            child = np.unpackbits(self.children, count=self.n).astype(bool)
        columns: dict[str, np.ndarray] = {}
        for k, (value, dtype) in self.constant.items():
            columns[k] = constant_column(value, np.dtype(dtype), self.n)
        relative: dict[str, list[np.ndarray]] = {}
        for key, block in self.blocks.items():
            code, kid = divmod(key, 2)
            rows = np.flatnonzero((self.category == code) & (child == bool(kid)))
            for k, packed in block.items():
                if isinstance(packed, _FromParent):
                    relative.setdefault(k, []).append(rows)
                    packed = packed.diff
                values = _unpacked(packed)
                if k not in columns:
                    columns[k] = np.empty(self.n, dtype=values.dtype)
                columns[k][rows] = values
        if relative:  # each from its parent row's, parents first
            ref = np.arange(self.n, dtype=np.int64) - columns["parent_span_id"]
            for k, rows_of in relative.items():
                _from_parents(columns[k], ref, np.concatenate(rows_of))
        if "end_ns" in columns and "end_ns" not in self.constant:
            with np.errstate(over="ignore"):
                columns["end_ns"] = columns["end_ns"] + columns["start_ns"]
        if self.parents is not None:  # each row's parent: the span id of the row it names
            ref = np.arange(self.n, dtype=np.int64) - columns["parent_span_id"]
            parent = np.asarray(columns["span_id"])[ref]
            if self.parents:
                lost_at, lost_values = self.parents
                parent[_unpacked(lost_at)] = _unpacked(lost_values)
            columns["parent_span_id"] = parent
        columns["category"] = self.category
        strings = _unpacked_strings(self.strings)
        return EventTable({k: columns[k] for k in self.order}, strings, self.meta)

    def category_bytes(self) -> dict[int, int]:
        """Per category, the pickled bytes of its rows' columns (for the benchmark)."""

        out: dict[int, int] = {}
        for key, b in self.blocks.items():
            size = len(pickle.dumps(b, protocol=pickle.HIGHEST_PROTOCOL))
            out[key // 2] = out.get(key // 2, 0) + size
        return out


#: columns that never travel as differences from the parent row's: the references
#: themselves, the ends (durations already), the category (the blocks')
_NOT_RELATIVE = frozenset({"span_id", "parent_span_id", "end_ns", "category"})


@dataclass(frozen=True)
class _FromParent:
    """A child block's column as each row's difference from its parent row's value."""

    diff: PackedColumn


#: a row this many parents or more below a row without one travels as itself (each level
#: costs the client one pass over the table's rows)
_MAX_DEPTH = 32


def _acyclic_children(
    ref: np.ndarray, lost: tuple[PackedColumn, PackedColumn] | tuple[()] | None
) -> np.ndarray:
    """The rows whose parent row is another row of the table and whose chain of parents
    ends, within :data:`_MAX_DEPTH` rows, at a row without one (none in a cycle): what may
    travel relative to its parent."""
    n = len(ref)
    found = np.ones(n, dtype=bool)
    if lost:
        found[_unpacked(lost[0])] = False
    child = found & (ref != np.arange(n))
    resolved = ~child
    for _ in range(_MAX_DEPTH):
        ready = child & ~resolved & resolved[ref]
        if not ready.any():
            break
        resolved |= ready
    return child & resolved


def _from_parents(column: np.ndarray, ref: np.ndarray, rows: np.ndarray) -> None:
    """``column``'s ``rows`` hold differences from their parent rows' values: add those,
    each row after its parent (a parent that is itself among ``rows`` first)."""
    pending = np.zeros(len(column), dtype=bool)
    pending[rows] = True
    for _ in range(len(rows) + 1):
        ready = pending & ~pending[ref]
        if not ready.any():
            break
        at = np.flatnonzero(ready)
        with np.errstate(over="ignore"):
            column[at] = column[at] + column[ref[at]]
        pending[at] = False
    if pending.any():
        raise ValueError("a packed table's parent references form a cycle")


@dataclass(frozen=True)
class _JointCodes:
    """Metric points' string codes as one index per point into their distinct combinations
    (a point's series: a few hundred for thousands of points)."""

    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    combos: np.ndarray
    index: PackedColumn

    @classmethod
    def of(cls, codes: dict[str, np.ndarray]) -> _JointCodes | None:
        names = tuple(codes)
        if not names or len(codes[names[0]]) == 0:
            return None
        columns = [np.asarray(codes[k]).astype(np.int64) for k in names]
        combos, index = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
        if len(combos) > 65536:
            return None
        dtypes = tuple(codes[k].dtype.str for k in names)
        return cls(names, dtypes, combos, _packed_column(index.reshape(-1).astype(np.int64)))

    def unpack(self) -> dict[str, np.ndarray]:
        rows = self.combos[_unpacked(self.index)]
        return {
            k: rows[:, i].astype(np.dtype(d))
            for i, (k, d) in enumerate(zip(self.names, self.dtypes))
        }


@dataclass(frozen=True)
class PackedPoints:
    """Metric points as they travel to the client: each column as :class:`PackedTable`
    packs one category's (lossless: :meth:`unpack` gives the points back, value for value
    and dtype for dtype).

    >>> from otel_ext.analysis.loaders import MetricPoints
    >>> m = MetricPoints.from_rows([dict(name="hw.power", time_ns=10**18 + 5 * i,
    ...     value=300.5 + i, device=f"d{i % 3}") for i in range(600)])
    >>> back = PackedPoints.of(m).unpack()
    >>> np.array_equal(back.time_ns, m.time_ns), back.codes["device"].dtype.name
    (True, 'int32')
    """

    arrays: dict[str, PackedColumn]
    codes: dict[str, PackedColumn | _JointCodes]
    strings: PackedStrings
    left_out: int

    @classmethod
    def of(cls, points: Any) -> PackedPoints:

        arrays = {
            k: _packed_column(getattr(points, k), delta=k == "time_ns")
            for k in ("time_ns", "start_time_ns", "values", "count")
        }
        codes: dict[str, PackedColumn | _JointCodes] = {
            k: _packed_column(v) for k, v in points.codes.items()
        }
        joint = _JointCodes.of(points.codes)
        if joint is not None and len(pickle.dumps(joint)) < len(pickle.dumps(codes)):
            codes = {"": joint}
        return cls(arrays, codes, _packed_strings(points.strings), points.left_out)

    def unpack(self) -> Any:
        from otel_ext.analysis.loaders import MetricPoints

        a = {k: _unpacked(v) for k, v in self.arrays.items()}
        joint = self.codes.get("")
        if isinstance(joint, _JointCodes):
            codes = joint.unpack()
        else:
            codes = {
                k: _unpacked(v) for k, v in self.codes.items() if not isinstance(v, _JointCodes)
            }
        return MetricPoints(
            a["time_ns"], a["start_time_ns"], a["values"], a["count"], codes,
            _unpacked_strings(self.strings), self.left_out,
        )  # fmt: skip


@dataclass(frozen=True)
class PackedFields:
    """A dataclass of numpy arrays (the critical path's
    :class:`~otel_ext.analysis.cross.critical_path_walk.WalkPieces`, the held rows'
    :class:`~otel_ext.analysis.rank.compute_samples.ComputeSamples`) as it travels: each
    one-dimensional integer or float array packed as :class:`PackedTable` packs a column
    (integer arrays as steps when that is narrower), the other fields as they are;
    :meth:`unpack` gives the object back as unpickling it would (its fields set, no
    ``__init__`` run), value for value and dtype for dtype.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Two:
    ...     key: np.ndarray
    ...     names: list
    >>> x = Two(np.arange(10**12, 10**12 + 5000, 3), ["a"])
    >>> back = PackedFields.of(x).unpack()
    >>> np.array_equal(back.key, x.key), back.key.dtype == x.key.dtype, back.names
    (True, True, ['a'])
    """

    cls: type
    fields: dict[str, Any]

    @classmethod
    def of(cls, obj: Any) -> PackedFields:
        return cls(type(obj), {k: _packed_field(v) for k, v in vars(obj).items()})

    def unpack(self) -> Any:
        obj: Any = object.__new__(self.cls)
        for k, v in self.fields.items():
            packed = isinstance(v, (_Offsets, _Same, _Whole, _Bits, _Distinct))
            obj.__dict__[k] = _unpacked(v) if packed else v
        return obj


def _packed_field(v: Any) -> Any:
    """One field of an object :class:`PackedFields` packs: a one-dimensional integer or
    float array packed as a column (an int64 array as steps when that is narrower), any
    other value as it is."""
    if not (isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iuf" and len(v)):
        return v
    packed = _packed_column(v)
    if v.dtype == np.int64 and len(v) > 1:  # steps, when narrower
        steps = _packed_column(v, delta=True)
        if len(pickle.dumps(steps)) < len(pickle.dumps(packed)):
            packed = steps
    return packed


def packed_busy(busy: dict[str, list[tuple[int, np.ndarray, np.ndarray]]]) -> PackedBusy:
    """The held rows' busy intervals (:attr:`~otel_ext.analysis.rank.per_rank.RankTables.device_busy`)
    as they travel: per device and rank the starts as steps, the ends as lengths, each at
    the width it needs; :func:`unpacked_busy` gives them back exactly.

    >>> busy = {"d": [(0, np.array([10**18, 10**18 + 50]), np.array([10**18 + 7, 10**18 + 60]))]}
    >>> back = unpacked_busy(packed_busy(busy))
    >>> [(r, s.tolist(), e.tolist()) for r, s, e in back["d"]] == [
    ...     (r, s.tolist(), e.tolist()) for r, s, e in busy["d"]]
    True
    """
    out: PackedBusy = {}
    for name, spans in busy.items():
        packed = []
        for rank, start, end in spans:
            with np.errstate(over="ignore"):
                length = end - start
            packed.append((rank, _packed_column(start, delta=True), _packed_column(length)))
        out[name] = packed
    return out


def unpacked_busy(packed: PackedBusy) -> dict[str, list[tuple[int, np.ndarray, np.ndarray]]]:
    """The busy intervals :func:`packed_busy` packed."""
    out: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for name, spans in packed.items():
        got = []
        for rank, start, length in spans:
            s = _unpacked(start)
            with np.errstate(over="ignore"):
                got.append((rank, s, s + _unpacked(length)))
        out[name] = got
    return out
