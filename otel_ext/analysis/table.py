"""The columnar event table every loader produces and every analysis consumes.

One row per event (a kernel, a CPU op, a runtime call, a span). Numeric columns are numpy
arrays; string-valued columns are dictionary-encoded (``int32`` codes into a per-table
``list[str]``), so a million kernels named alike cost four bytes each, not a Python string.

Times are integer nanoseconds on the file's own timeline (``start_ns``, ``end_ns``); the
clock-alignment step writes aligned copies, it never edits a loaded table in place.

A column whose rows all hold one value (most of a profiler trace's: span ids, device ticks,
FLOP estimates, trace ids, ...) is stored as a *constant column*: a read-only
``np.broadcast_to`` view of one element, costing nothing per row. It reads like any array;
:meth:`EventTable.select` and :meth:`EventTable.concat` keep it constant, and code that writes
into a column in place asks :meth:`EventTable.writable` for it first.

>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=10, category=Category.KERNEL_COMPUTE, rank=0, name="gemm"),
...     dict(start_ns=5, end_ns=20, category=Category.KERNEL_COMM, rank=0, name="ncclDevKernel_AllReduce"),
... ])
>>> len(t), t.string("name", 1)
(2, 'ncclDevKernel_AllReduce')
>>> int(t.duration_ns().sum())
25
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

__all__ = [
    "NUMERIC_COLUMNS",
    "STRING_COLUMNS",
    "Category",
    "EventTable",
    "concat_columns",
    "constant_column",
    "is_constant",
    "pack_columns",
    "unpack_columns",
]


class Category(IntEnum):
    """What an event is. Stored as ``int8`` in the ``category`` column."""

    OTHER = 0
    CPU_OP = 1  # host-side operator (aten::*, user annotation, python function)
    RUNTIME = 2  # runtime API call on the host (cudaLaunchKernel, hipMemcpyAsync, ...)
    KERNEL_COMPUTE = 3  # device kernel doing computation
    KERNEL_COMM = 4  # device kernel doing communication (NCCL, RCCL, DeepEP, ...)
    MEMCPY = 5  # device memory copy
    MEMSET = 6  # device memory set
    COLLECTIVE = 7  # a collective-communication span (host or device side)
    LAYER = 8  # a model-layer span
    REQUEST = 9  # an inference request span
    PHASE = 10  # a request phase: queue, prefill, decode
    LINK_TRANSFER = 11  # a chip-to-chip or NIC transfer
    STEP = 12  # a step / iteration annotation (ProfilerStep#N, engine step)


#: device-side categories (the "GPU events" of HTA's temporal breakdown)
DEVICE_CATEGORIES = (
    Category.KERNEL_COMPUTE,
    Category.KERNEL_COMM,
    Category.MEMCPY,
    Category.MEMSET,
)

#: column name -> numpy dtype and the value a row gets when it does not say
NUMERIC_COLUMNS: dict[str, tuple[type, int]] = {
    "start_ns": (np.int64, 0),
    "end_ns": (np.int64, 0),
    "category": (np.int8, int(Category.OTHER)),
    "rank": (np.int32, -1),
    "stream": (np.int64, -1),  # stream / queue id; -1 when host-side
    "tid": (np.int64, -1),  # host thread id; -1 when device-side
    "coll_seq": (np.int64, -1),  # per-group sequence number of a collective
    "coll_bytes": (np.int64, -1),
    "correlation": (np.int64, -1),  # launch <-> kernel correlation id
    "span_id": (np.uint64, 0),
    "parent_span_id": (np.uint64, 0),
    "raw_start_ticks": (np.int64, -1),  # device-clock ticks when the event came from a device clock
    "raw_end_ticks": (np.int64, -1),
    "flops": (np.float64, -1),  # FLOP estimate (layer spans), -1 unknown
    "bytes_accessed": (np.float64, -1),  # memory bytes estimate, -1 unknown
    "external_id": (np.int64, -1),  # profiler "External id": host op <-> its launches/kernels
    "coll_group_size": (np.int32, -1),  # ranks in the collective's group, -1 unknown
    # a point-to-point operation's peer (global rank: a send's destination, a receive's
    # source; PyTorch's "Dst Rank" / "Src Rank"), -1 unknown or not point-to-point
    "coll_peer": (np.int32, -1),
    # a device row's data dependency (from an Execution Trace): the correlation id of the
    # producer's device row on the same rank it waited for, -1 none
    "data_dep": (np.int64, -1),
    # how far the span's recorded times may be from the true ones (accel.clock.uncertainty_ns:
    # e.g. half a poller's bracket around an asynchronous end); 0 when the span does not say
    "clock_uncertainty_ns": (np.float64, 0),
}

#: dictionary-encoded string columns; code 0 is always the empty string
STRING_COLUMNS: tuple[str, ...] = (
    "name",
    "host",
    "device",  # e.g. "host0/chip3" or "cuda:0"
    "coll_op",
    "coll_group",
    "coll_id",
    "trace_id",  # 32 hex digits
    "clock_domain",
    "source",  # the file the row was loaded from
)


def constant_column(value: Any, dtype: Any, n: int) -> np.ndarray:
    """A read-only column of ``n`` rows all holding ``value``, stored as one element.

    >>> c = constant_column(-1, np.int64, 4)
    >>> c.tolist(), c.dtype.name, c.flags.writeable, is_constant(c)
    ([-1, -1, -1, -1], 'int64', False, True)
    """
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def is_constant(column: np.ndarray) -> bool:
    """Whether ``column`` is a constant column (a read-only zero-stride view of one element).

    >>> is_constant(np.zeros(3)), is_constant(constant_column(0.0, np.float64, 3))
    (False, True)
    """
    return column.ndim == 1 and column.strides[0] == 0 and not column.flags.writeable


def _compact(column: np.ndarray) -> np.ndarray:
    """``column`` as a constant column when all its rows are equal (else itself)."""
    n = column.shape[0]
    if n == 0 or column.ndim != 1 or is_constant(column):
        return column
    first = column[0]
    if column[-1] != first or column[n // 2] != first:  # the usual case, decided at once
        return column
    if column.min() != first or column.max() != first:
        return column
    return constant_column(first, column.dtype, n)


def pack_columns(columns: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``columns`` ready to pickle: each constant column as its value, not ``n`` copies
    (numpy would pickle a broadcast view whole). :func:`unpack_columns` undoes it.

    >>> import pickle
    >>> cols = {"a": constant_column(7, np.int32, 10**6), "b": np.arange(3)}
    >>> len(pickle.dumps(pack_columns(cols))) < 1000
    True
    >>> back = unpack_columns(pickle.loads(pickle.dumps(pack_columns(cols))))
    >>> is_constant(back["a"]), back["a"].dtype.name, len(back["a"]), back["b"].tolist()
    (True, 'int32', 1000000, [0, 1, 2])
    """
    return {
        k: _Const(v[0].item(), v.dtype.str, len(v)) if is_constant(v) and len(v) else v
        for k, v in columns.items()
    }


def unpack_columns(packed: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The columns :func:`pack_columns` packed."""
    return {
        k: constant_column(v.value, np.dtype(v.dtype), v.n) if isinstance(v, _Const) else v
        for k, v in packed.items()
    }


class _Const:
    """A constant column in a pickle: its value, dtype and length (not ``n`` copies)."""

    __slots__ = ("dtype", "n", "value")

    def __init__(self, value: Any, dtype: str, n: int) -> None:
        self.value, self.dtype, self.n = value, dtype, n

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Const, (self.value, self.dtype, self.n))


@dataclass
class EventTable:
    """A columnar table of events. Build with :meth:`from_rows` or :meth:`concat`."""

    columns: dict[str, np.ndarray]
    strings: dict[str, list[str]] = field(default_factory=dict)
    #: free-form per-table metadata (rank, host, source file, ...)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.columns["start_ns"].shape[0])

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def string(self, column: str, row: int) -> str:
        """The decoded string of ``column`` at ``row``."""
        return self.strings[column][int(self.columns[column][row])]

    def decoded(self, column: str) -> np.ndarray:
        """The whole string column decoded (an object array; for output, not hot loops)."""
        return np.asarray(self.strings[column], dtype=object)[self.columns[column]]

    def code_of(self, column: str, value: str) -> int:
        """The code of ``value`` in ``column``, or -1 when absent."""
        try:
            return self.strings[column].index(value)
        except ValueError:
            return -1

    def duration_ns(self) -> np.ndarray:
        return self.columns["end_ns"] - self.columns["start_ns"]

    def select(self, mask: np.ndarray) -> EventTable:
        """A new table of the rows where ``mask`` is true (string dictionaries shared).

        ``mask`` may also be an index array or a slice; constant columns stay constant.

        >>> t = EventTable.from_rows([dict(start_ns=i, name="k") for i in range(4)])
        >>> s = t.select(t["start_ns"] >= 2)
        >>> len(s), s["start_ns"].tolist(), is_constant(s["name"]), s["name"].tolist()
        (2, [2, 3], True, [1, 1])
        """
        out: dict[str, np.ndarray] = {}
        n: int | None = None
        for k, v in self.columns.items():
            if not is_constant(v):
                out[k] = v[mask]
                n = len(out[k])
        if n is None:  # every column constant: only the length is wanted
            n = len(np.empty(len(self), np.bool_)[mask])
        columns = {
            k: out[k] if k in out else constant_column(v[0], v.dtype, n) if len(v) else v[mask]
            for k, v in self.columns.items()
        }
        return EventTable(columns, dict(self.strings), dict(self.meta))

    def writable(self, column: str) -> np.ndarray:
        """``column`` as an array this table alone owns, safe to write into in place.

        A constant column (or a view of another array) is replaced by a private copy first;
        other tables sharing the data are left as they were.

        >>> t = EventTable.from_rows([dict(start_ns=0), dict(start_ns=5)])
        >>> s = t.select(slice(None))
        >>> t.writable("rank")[:] = 3
        >>> t["rank"].tolist(), s["rank"].tolist()
        ([3, 3], [-1, -1])
        """
        col = self.columns[column]
        if not (col.flags.writeable and col.flags.owndata):
            col = self.columns[column] = np.array(col)
        return col

    def compact(self) -> EventTable:
        """Store every column whose rows all hold one value as a constant column (in place).

        >>> t = EventTable(dict(start_ns=np.array([1, 2]), rank=np.array([7, 7], np.int32)))
        >>> [k for k, v in t.compact().columns.items() if is_constant(v)]
        ['rank']
        """
        self.columns = {k: _compact(v) for k, v in self.columns.items()}
        return self

    def nbytes(self) -> int:
        """Bytes the columns hold (a constant column counts one element)."""
        return sum(v.itemsize if is_constant(v) else v.nbytes for v in self.columns.values())

    def __getstate__(self) -> dict[str, Any]:  # constants travel as one value, not n copies
        return {"columns": pack_columns(self.columns), "strings": self.strings, "meta": self.meta}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.columns = unpack_columns(state["columns"])
        self.strings = state["strings"]
        self.meta = state["meta"]

    @classmethod
    def empty(cls) -> EventTable:
        return cls.from_rows([])

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> EventTable:
        """Build a table from dictionaries; missing columns take their default value."""
        rows = list(rows)
        builder = TableBuilder()
        for r in rows:
            builder.append(r)
        return builder.build()

    @classmethod
    def concat(cls, tables: Sequence[EventTable]) -> EventTable:
        """Concatenate tables, re-encoding string columns into one dictionary each."""
        if not tables:
            return cls.empty()
        columns: dict[str, np.ndarray] = {}
        for name in NUMERIC_COLUMNS:
            columns[name] = concat_columns([t.columns[name] for t in tables], None)
        strings: dict[str, list[str]] = {}
        for name in STRING_COLUMNS:
            merged: dict[str, int] = {"": 0}
            parts = []
            for t in tables:
                lookup = np.fromiter(
                    (merged.setdefault(s, len(merged)) for s in t.strings[name]),
                    dtype=np.int32,
                    count=len(t.strings[name]),
                )
                col = t.columns[name]
                if is_constant(col) and len(col):
                    parts.append(constant_column(lookup[col[0]], np.int32, len(col)))
                else:
                    parts.append(lookup[col])
            columns[name] = concat_columns(parts, np.int32)
            strings[name] = list(merged)
        return cls(columns, strings, {"parts": [t.meta for t in tables]})


def concat_columns(parts: Sequence[np.ndarray], dtype: Any = None) -> np.ndarray:
    """The parts end to end (cast to ``dtype`` when given); a constant column when every
    non-empty part is a constant column of the same value.

    >>> c = concat_columns([constant_column(2, np.int64, 3), constant_column(2, np.int64, 1)])
    >>> c.tolist(), is_constant(c)
    ([2, 2, 2, 2], True)
    >>> concat_columns([constant_column(2, np.int64, 1), np.array([3])]).tolist()
    [2, 3]
    """
    full = [p for p in parts if len(p)]
    if full and all(map(is_constant, full)):
        value = full[0][0]
        if all(p[0] == value and p.dtype == full[0].dtype for p in full[1:]):
            return constant_column(value, dtype or full[0].dtype, sum(map(len, full)))
    out = np.concatenate(parts)
    return out if dtype is None else out.astype(dtype, copy=False)


class TableBuilder:
    """Append rows one at a time (dictionaries), then :meth:`build` the columnar table."""

    def __init__(self) -> None:
        self._num: dict[str, list[Any]] = {k: [] for k in NUMERIC_COLUMNS}
        self._str: dict[str, list[int]] = {k: [] for k in STRING_COLUMNS}
        self._dicts: dict[str, dict[str, int]] = {k: {"": 0} for k in STRING_COLUMNS}

    def append(self, row: Mapping[str, Any]) -> None:
        for name, (_, default) in NUMERIC_COLUMNS.items():
            v = row.get(name)
            self._num[name].append(default if v is None else v)
        for name in STRING_COLUMNS:
            s = row.get(name)
            d = self._dicts[name]
            self._str[name].append(0 if not s else d.setdefault(str(s), len(d)))

    def build(self, meta: dict[str, Any] | None = None) -> EventTable:
        columns: dict[str, np.ndarray] = {
            name: np.asarray(self._num[name], dtype=dtype)
            for name, (dtype, _) in NUMERIC_COLUMNS.items()
        }
        for name in STRING_COLUMNS:
            columns[name] = np.asarray(self._str[name], dtype=np.int32)
        strings = {name: list(self._dicts[name]) for name in STRING_COLUMNS}
        return EventTable(columns, strings, dict(meta or {})).compact()
