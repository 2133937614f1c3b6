"""The columnar event table every loader produces and every analysis consumes.

One row per event (a kernel, a CPU op, a runtime call, a span). Numeric columns are numpy
arrays; string-valued columns are dictionary-encoded (``int32`` codes into a per-table
``list[str]``), so a million kernels named alike cost four bytes each, not a Python string.

Times are integer nanoseconds on the file's own timeline (``start_ns``, ``end_ns``); the
clock-alignment step writes aligned copies, it never edits a loaded table in place.

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

__all__ = ["NUMERIC_COLUMNS", "STRING_COLUMNS", "Category", "EventTable"]


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
        """A new table of the rows where ``mask`` is true (string dictionaries shared)."""
        return EventTable(
            {k: v[mask] for k, v in self.columns.items()}, dict(self.strings), dict(self.meta)
        )

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
            columns[name] = np.concatenate([t.columns[name] for t in tables])
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
                parts.append(lookup[t.columns[name]])
            columns[name] = np.concatenate(parts).astype(np.int32)
            strings[name] = list(merged)
        return cls(columns, strings, {"parts": [t.meta for t in tables]})


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
        return EventTable(columns, strings, dict(meta or {}))
