"""Shared pieces of the loaders: compact column building, exact time parsing, bad-record handling.

Columns are built in :mod:`array` buffers (8 bytes an integer, not a Python object per
value), so a loader's memory is the file's text plus the columns, never a tree of dicts.

>>> us_to_ns("1712195495505582.988")
1712195495505582988
>>> us_to_ns(12), us_to_ns("0.0005"), us_to_ns("-1.5")
(12000, 1, -1500)
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, TypeAlias

import numpy as np

from otel_ext.analysis.table import (
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    EventTable,
    constant_column,
)
from otel_ext.errors import InputError

__all__ = [
    "MAX_ABS_NS",
    "ColumnBuilder",
    "JsonValue",
    "LoadContext",
    "SkippedRecord",
    "int_or_none",
    "ns_or_none",
    "us_to_ns",
]

#: a decoded JSON value: what a document's free-form members (a trace's header, a finding's
#: evidence) hold before a reader checks them
JsonValue: TypeAlias = (
    "str | int | float | bool | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)

#: largest magnitude a time may have (about 146 years in ns); beyond it a value is an error
MAX_ABS_NS = 2**62

_TYPECODE = {
    np.dtype(np.int64): "q",
    np.dtype(np.int32): "i",
    np.dtype(np.int8): "b",
    np.dtype(np.uint64): "Q",
    np.dtype(np.float64): "d",
}


@dataclass(frozen=True)
class SkippedRecord:
    """A file or record left out in ``keep_going`` mode (or recognised and not loaded).

    ``count`` is 1, or for the one summary record of a file's unlisted bad records, how many
    it stands for (see :class:`LoadContext`).
    """

    path: str
    record: str
    reason: str
    count: int = 1

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "record": self.record, "reason": self.reason}
        if self.count != 1:
            d["count"] = self.count
        return d


@dataclass
class LoadContext:
    """Where errors go while loading one file: raised, or recorded when ``keep_going``.

    At most ``max_listed`` bad records are listed one by one (default
    ``OTEL_EXT_MAX_SKIPPED_LISTED``); the others are counted (``bad_count``) and summed up
    in one last record, so a file of a million bad records costs a few kilobytes, and every
    bad record is still accounted for.

    >>> ctx = LoadContext("f.json", keep_going=True, max_listed=2)
    >>> for i in range(5):
    ...     ctx.bad(f"event {i}", "bad")
    >>> [s.record for s in ctx.skipped], ctx.bad_count
    (['event 0', 'event 1', 'records after event 1'], 5)
    >>> ctx.skipped[-1].reason
    '3 more bad records not listed (OTEL_EXT_MAX_SKIPPED_LISTED=2); the last: event 4: bad'
    """

    path: str
    keep_going: bool = False
    skipped: list[SkippedRecord] = field(default_factory=list)
    max_listed: int | None = None
    bad_count: int = 0

    def __post_init__(self) -> None:
        if self.max_listed is None:
            from otel_ext.config import MAX_SKIPPED_LISTED, resolve

            self.max_listed = max(1, resolve(MAX_SKIPPED_LISTED))

    def bad(self, record: str, problem: str) -> None:
        """Report a bad record: raise :class:`InputError`, or record it and go on."""
        if not self.keep_going:
            raise InputError(problem, path=self.path, record=record)
        self.bad_count += 1
        limit = self.max_listed or 1
        if self.bad_count <= limit:
            self.skipped.append(SkippedRecord(self.path, record, problem))
            return
        summary = SkippedRecord(
            self.path,
            f"records after {self.skipped[limit - 1].record}",
            f"{self.bad_count - limit} more bad records not listed "
            f"(OTEL_EXT_MAX_SKIPPED_LISTED={limit}); the last: {record}: {problem}"[:500],
            self.bad_count - limit,
        )
        if self.bad_count == limit + 1:
            self.skipped.append(summary)
        else:
            self.skipped[-1] = summary


def us_to_ns(value: Any) -> int | None:
    """Microseconds (a JSON int, or a decimal string kept unparsed) to integer nanoseconds.

    Decimal strings are converted digit by digit, so ``1712195495505582.988`` keeps its last
    nanosecond (a float64 would lose it). Returns None for anything that is not a finite
    number of a sane size (booleans included).
    """
    if type(value) is int:
        ns = value * 1000
    elif type(value) is str:
        ns_or = _decimal_us_to_ns(value)
        if ns_or is None:
            return None
        ns = ns_or
    elif type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            return None
        ns = round(value * 1000)
    else:
        return None
    if -MAX_ABS_NS < ns < MAX_ABS_NS:
        return ns
    return None


def _decimal_us_to_ns(text: str) -> int | None:
    neg = text.startswith("-")
    body = text[1:] if neg else text
    ip, dot, fp = body.partition(".")
    if ip.isdigit() and (not dot or fp.isdigit()) and ip.isascii() and fp.isascii():
        if len(ip) > 20:
            return None
        frac = (fp + "000")[:3]
        ns = int(ip) * 1000 + int(frac)
        rest = fp[3:]
        if rest and rest[0] >= "5":  # round half away from zero below the nanosecond
            ns += 1
        return -ns if neg else ns
    try:
        d = Decimal(text)
        if not d.is_finite() or abs(d) > 10**20:
            return None
        return int((d * 1000).to_integral_value())
    except (InvalidOperation, ValueError):
        return None


def ns_or_none(value: Any) -> int | None:
    """Integer nanoseconds given as a JSON int or a decimal string ("1700000000000000000")."""
    if type(value) is int:
        ns = value
    elif type(value) is str and value.isdigit() and value.isascii() and len(value) < 21:
        ns = int(value)
    else:
        return None
    return ns if -MAX_ABS_NS < ns < MAX_ABS_NS else None


def int_or_none(value: Any) -> int | None:
    """An integer field given as int or digit string (OTLP's intValue); None otherwise."""
    if type(value) is int:
        return value if -(2**63) <= value < 2**63 else None
    if type(value) is str:
        try:
            v = int(value)
        except ValueError:
            return None
        return v if -(2**63) <= v < 2**63 else None
    if type(value) is float and value.is_integer():
        return int(value)
    return None


class ColumnBuilder:
    """Append rows column by column into compact buffers; :meth:`build` the ``EventTable``.

    Only the columns a loader names are kept; the rest take their default when built.

    >>> b = ColumnBuilder(["start_ns", "end_ns", "category"], ["name"])
    >>> b.add(start_ns=0, end_ns=5, category=3, name="gemm")
    >>> t = b.build()
    >>> len(t), t.string("name", 0), int(t["rank"][0])
    (1, 'gemm', -1)
    """

    def __init__(self, numeric: list[str], strings: list[str]) -> None:
        self.num: dict[str, array.array[Any]] = {
            c: array.array(_TYPECODE[np.dtype(NUMERIC_COLUMNS[c][0])]) for c in numeric
        }
        self.str: dict[str, array.array[int]] = {c: array.array("i") for c in strings}
        self.dicts: dict[str, dict[str, int]] = {c: {"": 0} for c in strings}

    def code(self, column: str, value: str) -> int:
        """The dictionary code of ``value`` in string column ``column`` (added if new)."""
        d = self.dicts[column]
        c = d.get(value)
        if c is None:
            c = d[value] = len(d)
        return c

    def add(self, **row: Any) -> None:
        """Append one row given as keyword arguments (slow path, for small loaders)."""
        for c, buf in self.num.items():
            v = row.get(c)
            buf.append(NUMERIC_COLUMNS[c][1] if v is None else v)
        for c, sbuf in self.str.items():
            s = row.get(c)
            sbuf.append(self.code(c, str(s)) if s else 0)

    def __len__(self) -> int:
        for buf in self.num.values():
            return len(buf)
        return 0

    def build(self, meta: dict[str, Any] | None = None) -> EventTable:
        n = len(self)
        columns: dict[str, np.ndarray] = {}
        for name, (dtype, default) in NUMERIC_COLUMNS.items():
            buf = self.num.get(name)
            if buf is not None:
                columns[name] = np.frombuffer(buf, dtype=dtype).copy() if n else np.zeros(0, dtype)
            else:
                columns[name] = constant_column(default, dtype, n)
        strings: dict[str, list[str]] = {}
        for name in STRING_COLUMNS:
            sbuf = self.str.get(name)
            if sbuf is not None:
                columns[name] = (
                    np.frombuffer(sbuf, dtype=np.int32).copy() if n else np.zeros(0, np.int32)
                )
                strings[name] = list(self.dicts[name])
            else:
                columns[name] = constant_column(0, np.int32, n)
                strings[name] = [""]
        return EventTable(columns, strings, dict(meta or {})).compact()
