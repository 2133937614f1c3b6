"""OpenTelemetry spans (OTLP-JSON files, Jaeger JSON exports) to event-table rows.

Both formats carry the same spans; only the envelope differs. ``accel.*`` attributes (names
from :mod:`otel_ext.semconv.attributes`) map to table columns: rank, host, device, the
collective's op/group/seq/bytes/group size, the kernel's stream and correlation id, clock
domain and raw device ticks, FLOP and byte estimates. The span name (from
:mod:`otel_ext.semconv.spans`) gives the category.

OTLP-JSON (``traces.jsonl``, our file exporter and the Collector's): one
``ExportTraceServiceRequest`` per line, ids in hex (the OTLP/JSON encoding) or base64 (the
protobuf JSON mapping), times as decimal strings of nanoseconds. The compiled extractor
reads chunks of whole lines, on threads (:func:`load_otlp_traces_pieces`,
:mod:`otel_ext.analysis.loaders._otlp_fast`); the lines it is not sure of (and every line
where it is not built) are decoded by the project's one OTLP-JSON decoder
(:mod:`otel_ext.exporters.otlp_format`) into typed records whose columns are pulled out whole
(``map``/``attrgetter`` and numpy). Either way there is no Python code per span:
:class:`OtlpSpanColumns`. A line the typed decoder rejects is re-read one span at a time, so
a bad span costs that span (named), not the line.
Jaeger exports (:mod:`otel_ext.analysis.loaders.jaeger`) are read span by span through
:class:`SpanRows`, the reference the OTLP columns are tested against.

Rows are named for what they are: a kernel by its kernel name, a layer by its layer name, a
request phase by its phase (``queue``, ``prefill``, ``decode``, ``kv_transfer``), a link
transfer by its endpoints (``host0->host1``, ``host0/chip1->host0/chip2``; the link itself,
``accel.link.id``, goes to the ``device`` column and its bytes to ``coll_bytes``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import cache
from itertools import chain, repeat
from operator import attrgetter
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from opentelemetry.util.types import AnyValue

from otel_ext.analysis.classify import classify_kernel
from otel_ext.analysis.loaders._common import ColumnBuilder, LoadContext, int_or_none, ns_or_none
from otel_ext.analysis.table import (
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    Category,
    EventTable,
    constant_column,
)
from otel_ext.exporters.otlp_format import (
    RequestError,
    Span,
    any_value,
    careful_items,
    decode_traces,
    id_to_hex,
)

if TYPE_CHECKING:
    from otel_ext.analysis.loaders._otlp_fast import ScannedChunk

__all__ = [
    "OtlpSpanColumns",
    "SpanRows",
    "iter_lines",
    "load_otlp_traces_lines",
    "load_otlp_traces_pieces",
    "otlp_value",
]

try:  # optional compiled extractor (setup.py builds it where a C compiler is found)
    from otel_ext.analysis.loaders import _cscan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised only where it was not built
    _cscan = None
if _cscan is not None and not hasattr(_cscan, "scan_otlp_lines"):  # pragma: no cover - stale build
    _cscan = None

_NUMERIC = [
    "start_ns", "end_ns", "category", "rank", "stream", "coll_seq", "coll_bytes",
    "coll_group_size", "correlation", "span_id", "parent_span_id", "raw_start_ticks",
    "raw_end_ticks", "flops", "bytes_accessed", "clock_uncertainty_ns",
]  # fmt: skip
_STRINGS = [
    "name", "host", "device", "coll_op", "coll_group", "coll_id", "trace_id", "clock_domain",
    "source",
]  # fmt: skip
_LIM = 2**62


class _SpanNames(TypedDict):
    """The registry's names the span loaders read (:func:`_names`)."""

    A: ModuleType
    span_category: dict[str, Category]
    kernel_span: str
    kernel_kind: dict[str, Category]
    not_events: frozenset[str]


@cache
def _names() -> _SpanNames:
    """Attribute and span names from the generated registry (imported on first use)."""
    from otel_ext.semconv import attributes as A
    from otel_ext.semconv import spans as S

    kind = {
        "compute": Category.KERNEL_COMPUTE,
        "communication": Category.KERNEL_COMM,
        "memcpy": Category.MEMCPY,
        "dma": Category.MEMCPY,
        "memset": Category.MEMSET,
        "other": Category.OTHER,
    }
    return {
        "A": A,
        "span_category": {
            S.SPAN_ACCEL_LAYER: Category.LAYER,
            S.SPAN_ACCEL_COLLECTIVE: Category.COLLECTIVE,
            S.SPAN_ACCEL_LINK_TRANSFER: Category.LINK_TRANSFER,
            S.SPAN_ACCEL_REQUEST: Category.REQUEST,
            S.SPAN_ACCEL_REQUEST_PHASE: Category.PHASE,
        },
        "kernel_span": S.SPAN_ACCEL_KERNEL,
        "kernel_kind": kind,
        # clock telemetry, not workload events: kept out of the event table (the clocks
        # package re-fits from them: otel_ext.clocks.refit_from_otlp)
        "not_events": frozenset({S.SPAN_ACCEL_CLOCK_SYNC}),
    }


def otlp_value(v: Any) -> Any:
    """The Python value of an OTLP ``AnyValue`` (``{"intValue": "3"}`` -> 3).

    >>> otlp_value({"intValue": "3"}), otlp_value({"stringValue": "x"})
    (3, 'x')
    >>> otlp_value({"arrayValue": {"values": [{"boolValue": True}]}})
    [True]
    """
    return any_value(v)


def _uncertainty(value: float) -> float:
    """A span's clock uncertainty as the table keeps it: finite and not negative, else 0."""
    return value if 0.0 < value < 1e18 else 0.0


def _uncertainties(values: np.ndarray) -> np.ndarray:
    """:func:`_uncertainty` of every row (absent rows read as -1: 0)."""
    ok = np.isfinite(values) & (values > 0) & (values < 1e18)
    return np.where(ok, values, 0.0)


def _num(value: Any, default: float = -1.0) -> float:
    if isinstance(value, bool) or value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else str(v))


def _int_attr(v: Any) -> int:
    i = int_or_none(v)
    return -1 if i is None or not -_LIM < i < _LIM else i


def _category(name: str, kind: Any, kname: Any) -> int:
    """The category of a span from its name (and a kernel's kind or kernel name)."""
    n = _names()
    category = n["span_category"].get(name)
    if category is None:
        if name == n["kernel_span"]:
            category = n["kernel_kind"].get(kind) if isinstance(kind, str) else None
            if category is None:
                category = classify_kernel(kname if isinstance(kname, str) else name)
        else:
            category = Category.OTHER
    return int(category)


def _display(name: str, category: int, attrs: dict[str, AnyValue]) -> tuple[str, Any]:
    """The row's name and device given the span's attributes (see the module docstring)."""
    A = _names()["A"]
    display = attrs.get(A.ACCEL_KERNEL_NAME) if name == _names()["kernel_span"] else None
    if not isinstance(display, str):
        display = attrs.get(A.ACCEL_LAYER_NAME) if category == Category.LAYER else None
    if not isinstance(display, str) and category == Category.PHASE:
        display = attrs.get(A.ACCEL_REQUEST_PHASE)
    device = attrs.get(A.ACCEL_DEVICE_ID)
    if category == Category.LINK_TRANSFER:
        device = attrs.get(A.ACCEL_LINK_ID) or device
        src, dst = attrs.get(A.ACCEL_LINK_SRC), attrs.get(A.ACCEL_LINK_DST)
        if isinstance(src, str) and isinstance(dst, str) and src and dst:
            display = f"{src}->{dst}"
    return (display if isinstance(display, str) and display else name), device


class SpanRows:
    """Accumulates spans one at a time (Jaeger; the reference of the OTLP columns)."""

    def __init__(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        self.b = ColumnBuilder(_NUMERIC, _STRINGS)
        self.n = _names()

    def add(
        self,
        *,
        record: str,
        name: Any,
        start_ns: int | None,
        end_ns: int | None,
        attrs: dict[str, AnyValue],
        trace_id: str,
        span_id: int,
        parent_span_id: int,
    ) -> None:
        """Add one span (attributes already merged with its resource's)."""
        if not isinstance(name, str):
            self.ctx.bad(record, "span name is missing or not a string")
            return
        if name in self.n["not_events"]:
            return
        if start_ns is None or end_ns is None:
            self.ctx.bad(record, "start or end time is missing, not an integer or out of range")
            return
        if end_ns < start_ns:
            self.ctx.bad(record, f"negative duration ({end_ns} < {start_ns})")
            return
        A = self.n["A"]
        category = _category(name, attrs.get(A.ACCEL_KERNEL_KIND), attrs.get(A.ACCEL_KERNEL_NAME))
        display, device = _display(name, category, attrs)
        rank = int_or_none(attrs.get(A.ACCEL_RANK))
        i = _int_attr
        lf = A.ACCEL_LAYER_FLOPS if A.ACCEL_LAYER_FLOPS in attrs else A.ACCEL_KERNEL_FLOPS
        lb = A.ACCEL_LAYER_BYTES if A.ACCEL_LAYER_BYTES in attrs else A.ACCEL_KERNEL_BYTES
        self.b.add(
            start_ns=start_ns,
            end_ns=end_ns,
            category=category,
            rank=-1 if rank is None or not -1 <= rank < 2**31 else rank,
            stream=i(attrs.get(A.ACCEL_KERNEL_STREAM)),
            coll_seq=i(attrs.get(A.ACCEL_COLLECTIVE_SEQ)),
            coll_bytes=i(
                attrs.get(
                    A.ACCEL_LINK_BYTES
                    if category == Category.LINK_TRANSFER
                    else A.ACCEL_COLLECTIVE_BYTES
                )
            ),
            coll_group_size=max(-1, min(i(attrs.get(A.ACCEL_COLLECTIVE_GROUP_SIZE)), 2**31 - 1)),
            correlation=i(attrs.get(A.ACCEL_KERNEL_CORRELATION_ID)),
            span_id=span_id,
            parent_span_id=parent_span_id,
            raw_start_ticks=i(attrs.get(A.ACCEL_CLOCK_RAW_START_TICKS)),
            raw_end_ticks=i(attrs.get(A.ACCEL_CLOCK_RAW_END_TICKS)),
            clock_uncertainty_ns=_uncertainty(_num(attrs.get(A.ACCEL_CLOCK_UNCERTAINTY_NS), 0.0)),
            flops=_num(attrs.get(lf)),
            bytes_accessed=_num(attrs.get(lb)),
            name=display,
            host=_s(attrs.get(A.ACCEL_HOST_ID)),
            device=_s(device),
            coll_op=_s(attrs.get(A.ACCEL_COLLECTIVE_OP)),
            coll_group=_s(attrs.get(A.ACCEL_COLLECTIVE_GROUP)),
            coll_id=_s(attrs.get(A.ACCEL_COLLECTIVE_ID)),
            trace_id=trace_id.lower() if isinstance(trace_id, str) else "",
            clock_domain=_s(attrs.get(A.ACCEL_CLOCK_DOMAIN)),
            source=self.ctx.path,
        )

    def build(self, meta: dict[str, Any]) -> EventTable:
        return self.b.build(meta)


def otlp_attrs(items: Any) -> dict[str, AnyValue]:
    """An OTLP attribute list (typed :class:`~otel_ext.exporters.otlp_format.KeyValue` records or
    generic ``[{"key", "value"}]``) as a dict."""
    out: dict[str, AnyValue] = {}
    if isinstance(items, list):
        for kv in items:
            if isinstance(kv, dict):
                if isinstance(kv.get("key"), str):
                    out[kv["key"]] = any_value(kv.get("value"))
            elif hasattr(kv, "key"):
                out[kv.key] = any_value(kv.value)
    return out


# ------------------------------------------------------------------ OTLP: whole columns

_ATTRS = attrgetter("attributes")
_KEY = attrgetter("key")
_VALUE = attrgetter("value")


class _Strings:
    """A string dictionary (code 0 is the empty string)."""

    def __init__(self) -> None:
        self.lookup: dict[str, int] = {"": 0}

    def encode(self, values: list[str]) -> np.ndarray:
        lookup = self.lookup
        for s in dict.fromkeys(values):
            if s not in lookup:
                lookup[s] = len(lookup)
        return np.fromiter(map(lookup.__getitem__, values), np.int32, count=len(values))


#: attribute -> (column, kind): kinds ``i`` integer, ``s`` string, ``f`` float, ``v`` any
@cache
def _wanted() -> dict[str, int]:
    A = _names()["A"]
    keys = [
        A.ACCEL_RANK, A.ACCEL_KERNEL_STREAM, A.ACCEL_COLLECTIVE_SEQ, A.ACCEL_COLLECTIVE_BYTES,
        A.ACCEL_LINK_BYTES, A.ACCEL_COLLECTIVE_GROUP_SIZE, A.ACCEL_KERNEL_CORRELATION_ID,
        A.ACCEL_CLOCK_RAW_START_TICKS, A.ACCEL_CLOCK_RAW_END_TICKS, A.ACCEL_LAYER_FLOPS,
        A.ACCEL_KERNEL_FLOPS, A.ACCEL_LAYER_BYTES, A.ACCEL_KERNEL_BYTES, A.ACCEL_HOST_ID,
        A.ACCEL_DEVICE_ID, A.ACCEL_COLLECTIVE_OP, A.ACCEL_COLLECTIVE_GROUP,
        A.ACCEL_COLLECTIVE_ID, A.ACCEL_CLOCK_DOMAIN, A.ACCEL_KERNEL_KIND, A.ACCEL_KERNEL_NAME,
        A.ACCEL_LAYER_NAME, A.ACCEL_REQUEST_PHASE, A.ACCEL_LINK_ID, A.ACCEL_LINK_SRC,
        A.ACCEL_LINK_DST, A.ACCEL_CLOCK_UNCERTAINTY_NS,
    ]  # fmt: skip
    return {k: i for i, k in enumerate(keys)}


_MISSING = object()


class _Attr:
    """One attribute over the rows of a group of spans: where it is set, and its values."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rows: np.ndarray = np.zeros(0, np.int64)
        self.values: list[Any] = []  # AnyValue records (or None)
        self.res: Any = _MISSING  # the resource's value (any_value'd) when set there

    def present(self) -> np.ndarray:
        m = np.zeros(self.n, bool)
        if self.res is not _MISSING:
            m[:] = True
        m[self.rows] = True
        return m

    def py(self) -> list[Any]:
        """Per-row Python value (None where absent): the slow, exact form."""
        out: list[Any] = [None if self.res is _MISSING else self.res] * self.n
        for r, v in zip(self.rows.tolist(), self.values):
            out[r] = any_value(v)
        return out

    def ints(self) -> np.ndarray:
        """int64 per row (-1 where absent, unreadable or beyond +-2**62), as ``_int_attr``."""
        base = -1 if self.res is _MISSING else _int_attr(self.res)
        out = np.full(self.n, base, np.int64)
        if not len(self.rows):
            return out
        try:
            raw = list(map(attrgetter("intValue"), self.values))
            if not {int, str}.issuperset(map(type, raw)):
                raise TypeError
            arr = np.fromiter(map(int, raw), np.int64, count=len(raw))
        except (TypeError, ValueError, OverflowError, AttributeError):
            arr = np.fromiter(map(_int_attr, map(any_value, self.values)), np.int64,
                              count=len(self.values))  # fmt: skip
        arr[(arr <= -_LIM) | (arr >= _LIM)] = -1
        out[self.rows] = arr
        return out

    def floats(self) -> np.ndarray:
        """float64 per row (-1.0 where absent or unreadable), as ``_num``."""
        base = -1.0 if self.res is _MISSING else _num(self.res)
        out = np.full(self.n, base, np.float64)
        if not len(self.rows):
            return out
        try:
            raw = list(map(attrgetter("doubleValue"), self.values))
            if not {float, int}.issuperset(map(type, raw)):
                raise TypeError
            arr = np.fromiter(raw, np.float64, count=len(raw))
        except (TypeError, ValueError, AttributeError):
            arr = np.fromiter(map(_num, map(any_value, self.values)), np.float64,
                              count=len(self.values))  # fmt: skip
        out[self.rows] = arr
        return out

    def strict(self) -> list[str | None]:
        """str per row where the value is a string, None elsewhere (absent or another type)."""
        base = self.res if isinstance(self.res, str) else None
        out: list[Any] = [base] * self.n
        if not len(self.rows):
            return out
        try:
            raw = list(map(attrgetter("stringValue"), self.values))
        except AttributeError:
            raw = list(map(any_value, self.values))
        # a value given otherwise (bytes: their base64 text) reads as the reference reads it
        raw = [
            v if type(v) is str else _str_or_none(any_value(x)) for v, x in zip(raw, self.values)
        ]
        arr = np.array(out, dtype=object)
        arr[self.rows] = raw
        return arr.tolist()  # type: ignore[no-any-return]

    def strs(self) -> list[str]:
        """str per row ('' where absent), as ``_s``."""
        base = "" if self.res is _MISSING else _s(self.res)
        out = [base] * self.n
        if not len(self.rows):
            return out
        try:
            raw = list(map(attrgetter("stringValue"), self.values))
            if set(map(type, raw)) != {str}:
                raise TypeError
        except (TypeError, AttributeError):
            raw = list(map(_s, map(any_value, self.values)))
        arr = np.array(out, dtype=object)
        arr[self.rows] = raw
        return arr.tolist()  # type: ignore[no-any-return]


class OtlpSpanColumns:
    """The columns of every OTLP span of a file, built a request (line) at a time."""

    def __init__(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        self.parts: list[dict[str, np.ndarray]] = []
        self.dicts = {c: _Strings() for c in _STRINGS}
        self.spans_seen = 0

    def add_groups(
        self, lineno: int, groups: list[tuple[dict[str, AnyValue], list[Span], int]]
    ) -> None:
        """Spans of one line: ``(resource attributes, spans, number of the first span)``."""
        for res, spans, first in groups:
            if spans:
                self._add(lineno, res, spans, first)

    def _add(self, lineno: int, res: dict[str, AnyValue], spans: list[Span], first: int) -> None:
        ctx, nm = self.ctx, _names()
        n = len(spans)
        names = list(map(attrgetter("name"), spans))
        keep = np.ones(n, bool)
        if set(map(type, names)) != {str}:
            for k, s in enumerate(names):
                if type(s) is not str:
                    ctx.bad(
                        f"line {lineno} span {first + k}", "span name is missing or not a string"
                    )
                    keep[k] = False
                    names[k] = ""
        not_events = nm["not_events"]
        if not_events.intersection(names):
            keep &= np.fromiter(map(not_events.__contains__, names), bool, count=n) == 0
        start = _ns_column(list(map(attrgetter("startTimeUnixNano"), spans)))
        end = _ns_column(list(map(attrgetter("endTimeUnixNano"), spans)))
        bad_t = keep & ((start == _NONE) | (end == _NONE))
        for k in np.flatnonzero(bad_t).tolist():
            ctx.bad(f"line {lineno} span {first + k}",
                    "start or end time is missing, not an integer or out of range")  # fmt: skip
        keep &= ~bad_t
        neg = keep & (end < start)
        for k in np.flatnonzero(neg).tolist():
            ctx.bad(f"line {lineno} span {first + k}",
                    f"negative duration ({int(end[k])} < {int(start[k])})")  # fmt: skip
        keep &= ~neg
        ids, ok_id = _span_ids(list(map(attrgetter("spanId"), spans)))
        parents, ok_parent = _span_ids(list(map(attrgetter("parentSpanId"), spans)))
        traces = list(map(attrgetter("traceId"), spans))
        trace_hex, ok_trace = _trace_ids(traces)
        bad_id = keep & ~(ok_id & ok_parent & ok_trace)
        for k in np.flatnonzero(bad_id).tolist():
            s = spans[k]
            ctx.bad(f"line {lineno} span {first + k}",
                    "trace, span or parent id is neither hex nor base64: "
                    f"{s.traceId!r:.40}, {s.spanId!r:.40}, {s.parentSpanId!r:.40}")  # fmt: skip
        keep &= ~bad_id
        if not keep.all():
            sel = np.flatnonzero(keep)
            spans = [spans[k] for k in sel.tolist()]
            names = [names[k] for k in sel.tolist()]
            start, end, ids, parents = start[sel], end[sel], ids[sel], parents[sel]
            trace_hex = [trace_hex[k] for k in sel.tolist()]
            n = len(spans)
            if n == 0:
                return
        self._columns(names, start, end, ids, parents, trace_hex, self._attributes(spans, res))

    def add_chunk(self, c: ScannedChunk, buf: Any, n_span: int) -> int:
        """The spans of a chunk of lines as ``_cscan.scan_otlp_lines`` read them, the lines it
        left to the typed decoder read in their places; returns the spans read so far."""
        nm = _names()
        keep = np.ones(c.n, bool)
        not_events = nm["not_events"]
        if not_events.intersection(c.names):
            ne = np.fromiter(map(not_events.__contains__, c.names), bool, count=len(c.names))
            keep &= ~ne[c.name_codes]
        neg = keep & (c.end < c.start)
        keep &= ~neg
        kept = np.flatnonzero(keep) if not keep.all() else None
        part = self._chunk_columns(c if kept is None else c.select(kept)) if keep.any() else None

        def emit(a: int, b: int, first: int) -> None:
            for k in np.flatnonzero(neg[a:b]).tolist():
                self.ctx.bad(f"line {int(c.line_of[a + k])} span {first + k}",
                             f"negative duration ({int(c.end[a + k])} < {int(c.start[a + k])})")  # fmt: skip
            if part is None:
                return
            ka, kb = (a, b) if kept is None else np.searchsorted(kept, [a, b]).tolist()
            if kb > ka:
                self.parts.append({k: v[ka:kb] for k, v in part.items()})

        prev = 0
        for lineno, a, b in c.fallback.tolist():
            i = int(np.searchsorted(c.line_of, lineno))
            emit(prev, i, n_span)
            n_span += i - prev
            prev = i
            n_span = decode_line(self, lineno, bytes(buf[a:b]), n_span)
        emit(prev, c.n, n_span)
        return n_span + c.n - prev

    def _chunk_columns(self, c: ScannedChunk) -> dict[str, np.ndarray]:
        from otel_ext.analysis.loaders._otlp_fast import (
            Slots,
            categories,
            display_and_device,
            encode,
        )

        nm = _names()
        A = nm["A"]
        wanted = _wanted()

        def slot(key: str) -> Slots:
            return Slots(c, wanted[key])

        kspan = nm["kernel_span"]
        cat = categories(c, slot(A.ACCEL_KERNEL_KIND), slot(A.ACCEL_KERNEL_NAME), _category, kspan)
        disp, device = display_and_device(c, cat, slot, A, kspan)
        link = cat == Category.LINK_TRANSFER

        def ints(key: str) -> np.ndarray:
            return slot(key).ints(_int_attr)

        rank = ints(A.ACCEL_RANK)
        rank[(rank < -1) | (rank >= 2**31)] = -1
        gsize = np.clip(ints(A.ACCEL_COLLECTIVE_GROUP_SIZE), -1, 2**31 - 1)
        cbytes = np.where(link, ints(A.ACCEL_LINK_BYTES), ints(A.ACCEL_COLLECTIVE_BYTES))
        lf, kf = slot(A.ACCEL_LAYER_FLOPS), slot(A.ACCEL_KERNEL_FLOPS)
        lb, kb = slot(A.ACCEL_LAYER_BYTES), slot(A.ACCEL_KERNEL_BYTES)
        flops = np.where(lf.present(), lf.floats(_num), kf.floats(_num))
        nbytes = np.where(lb.present(), lb.floats(_num), kb.floats(_num))
        texts = {
            "host": slot(A.ACCEL_HOST_ID).str_codes(),
            "coll_op": slot(A.ACCEL_COLLECTIVE_OP).str_codes(),
            "coll_group": slot(A.ACCEL_COLLECTIVE_GROUP).str_codes(),
            "coll_id": slot(A.ACCEL_COLLECTIVE_ID).str_codes(),
            "clock_domain": slot(A.ACCEL_CLOCK_DOMAIN).str_codes(),
            "name": disp,
            "device": device,
        }
        d = self.dicts
        out = {
            "start_ns": c.start, "end_ns": c.end, "category": cat,
            "rank": rank.astype(np.int32),
            "stream": ints(A.ACCEL_KERNEL_STREAM),
            "coll_seq": ints(A.ACCEL_COLLECTIVE_SEQ),
            "coll_bytes": cbytes,
            "coll_group_size": gsize.astype(np.int32),
            "correlation": ints(A.ACCEL_KERNEL_CORRELATION_ID),
            "span_id": c.span_id, "parent_span_id": c.parent,
            "raw_start_ticks": ints(A.ACCEL_CLOCK_RAW_START_TICKS),
            "raw_end_ticks": ints(A.ACCEL_CLOCK_RAW_END_TICKS),
            "clock_uncertainty_ns": _uncertainties(
                slot(A.ACCEL_CLOCK_UNCERTAINTY_NS).floats(_num)
            ),
            "flops": flops, "bytes_accessed": nbytes,
            "trace_id": encode(d["trace_id"].lookup, c.traces, c.trace_codes),
        }  # fmt: skip
        for col, codes in texts.items():
            out[col] = encode(d[col].lookup, c.texts, codes)
        return out

    def _columns(
        self,
        names: list[str],
        start: np.ndarray,
        end: np.ndarray,
        ids: np.ndarray,
        parents: np.ndarray,
        trace_hex: list[str],
        attrs: dict[str, _Attr],
    ) -> None:
        nm = _names()
        A = nm["A"]
        n = len(names)
        g = attrs.__getitem__
        # category once per distinct (name, kernel kind, kernel name)
        kind = g(A.ACCEL_KERNEL_KIND).py() if nm["kernel_span"] in names else [None] * n
        kname = g(A.ACCEL_KERNEL_NAME).strict()
        triples = list(zip(names, kind, kname))
        try:
            distinct = dict.fromkeys(triples)
        except TypeError:  # a list or an object as a kernel's kind
            triples = list(zip(names, map(_hashable, kind), kname))
            distinct = dict.fromkeys(triples)
        cats = {t: _category(t[0], t[1], t[2]) for t in distinct}
        category = np.fromiter(map(cats.__getitem__, triples), np.int8, count=n)
        display = list(names)
        is_kernel = np.fromiter(map(nm["kernel_span"].__eq__, names), bool, count=n)
        if is_kernel.any():
            for k in np.flatnonzero(is_kernel).tolist():
                if kn := kname[k]:
                    display[k] = kn
        _rename(display, category == Category.LAYER, g(A.ACCEL_LAYER_NAME))
        _rename(display, category == Category.PHASE, g(A.ACCEL_REQUEST_PHASE))
        device = g(A.ACCEL_DEVICE_ID).strs()
        link = category == Category.LINK_TRANSFER
        if link.any():
            link_id = g(A.ACCEL_LINK_ID).py()
            src, dst = g(A.ACCEL_LINK_SRC).py(), g(A.ACCEL_LINK_DST).py()
            for k in np.flatnonzero(link).tolist():
                if link_id[k]:  # a truthy link id, as ``attrs.get(link id) or device``
                    device[k] = _s(link_id[k])
                s, d = src[k], dst[k]
                if isinstance(s, str) and isinstance(d, str) and s and d:
                    display[k] = f"{s}->{d}"
        rank = g(A.ACCEL_RANK).ints()
        rank[(rank < -1) | (rank >= 2**31)] = -1
        gsize = np.clip(g(A.ACCEL_COLLECTIVE_GROUP_SIZE).ints(), -1, 2**31 - 1)
        cbytes = np.where(link, g(A.ACCEL_LINK_BYTES).ints(), g(A.ACCEL_COLLECTIVE_BYTES).ints())
        lf, kf = g(A.ACCEL_LAYER_FLOPS), g(A.ACCEL_KERNEL_FLOPS)
        lb, kb = g(A.ACCEL_LAYER_BYTES), g(A.ACCEL_KERNEL_BYTES)
        flops = np.where(lf.present(), lf.floats(), kf.floats())
        nbytes = np.where(lb.present(), lb.floats(), kb.floats())
        d = self.dicts
        self.parts.append({
            "start_ns": start, "end_ns": end, "category": category,
            "rank": rank.astype(np.int32),
            "stream": g(A.ACCEL_KERNEL_STREAM).ints(),
            "coll_seq": g(A.ACCEL_COLLECTIVE_SEQ).ints(),
            "coll_bytes": cbytes,
            "coll_group_size": gsize.astype(np.int32),
            "correlation": g(A.ACCEL_KERNEL_CORRELATION_ID).ints(),
            "span_id": ids.astype(np.uint64), "parent_span_id": parents.astype(np.uint64),
            "raw_start_ticks": g(A.ACCEL_CLOCK_RAW_START_TICKS).ints(),
            "raw_end_ticks": g(A.ACCEL_CLOCK_RAW_END_TICKS).ints(),
            "clock_uncertainty_ns": _uncertainties(g(A.ACCEL_CLOCK_UNCERTAINTY_NS).floats()),
            "flops": flops, "bytes_accessed": nbytes,
            "name": d["name"].encode(display),
            "host": d["host"].encode(g(A.ACCEL_HOST_ID).strs()),
            "device": d["device"].encode(device),
            "coll_op": d["coll_op"].encode(g(A.ACCEL_COLLECTIVE_OP).strs()),
            "coll_group": d["coll_group"].encode(g(A.ACCEL_COLLECTIVE_GROUP).strs()),
            "coll_id": d["coll_id"].encode(g(A.ACCEL_COLLECTIVE_ID).strs()),
            "trace_id": d["trace_id"].encode(trace_hex),
            "clock_domain": d["clock_domain"].encode(g(A.ACCEL_CLOCK_DOMAIN).strs()),
        })  # fmt: skip

    def _attributes(self, spans: list[Span], res: dict[str, AnyValue]) -> dict[str, _Attr]:
        n = len(spans)
        wanted = _wanted()
        out = {k: _Attr(n) for k in wanted}
        for k, v in res.items():
            if k in out:
                out[k].res = v
        lists = list(map(_ATTRS, spans))
        lens = np.fromiter(map(len, lists), np.int64, count=n)
        kvs = list(chain.from_iterable(lists))
        if not kvs:
            return out
        codes = np.fromiter(map(wanted.get, map(_KEY, kvs), repeat(-1)), np.int16, count=len(kvs))
        rows = np.repeat(np.arange(n), lens)
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        bounds = np.searchsorted(sc, np.arange(len(wanted) + 1))
        getter = kvs.__getitem__
        for key, c in wanted.items():
            a, b = bounds[c], bounds[c + 1]
            if a == b:
                continue
            idx = order[a:b]
            att = out[key]
            att.rows = rows[idx]
            att.values = list(map(_VALUE, map(getter, idx.tolist())))
        return out

    def build(self, meta: dict[str, Any]) -> EventTable:
        n = sum(len(p["start_ns"]) for p in self.parts)
        columns: dict[str, np.ndarray] = {}
        for name, (dtype, default) in NUMERIC_COLUMNS.items():
            if name in _NUMERIC:
                columns[name] = (
                    np.concatenate([p[name] for p in self.parts]).astype(dtype, copy=False)
                    if self.parts
                    else np.zeros(0, dtype)
                )
            else:
                columns[name] = constant_column(default, dtype, n)
        strings: dict[str, list[str]] = {}
        for name in STRING_COLUMNS:
            if name == "source":
                columns[name] = constant_column(1, np.int32, n)
                strings[name] = ["", self.ctx.path]
            elif name in _STRINGS:
                columns[name] = (
                    np.concatenate([p[name] for p in self.parts])
                    if self.parts
                    else np.zeros(0, np.int32)
                )
                strings[name] = list(self.dicts[name].lookup)
            else:
                columns[name] = constant_column(0, np.int32, n)
                strings[name] = [""]
        return EventTable(columns, strings, dict(meta)).compact()


def _str_or_none(v: Any) -> str | None:
    return v if type(v) is str else None


def _rename(display: list[str], mask: np.ndarray, att: _Attr) -> None:
    if not mask.any():
        return
    vals = att.strict()
    for k in np.flatnonzero(mask).tolist():
        if vals[k]:
            display[k] = str(vals[k])


def _hashable(v: Any) -> Any:
    return v if isinstance(v, str | int | float | bool) or v is None else repr(v)


_NONE = np.int64(-(2**63))


def _ns_column(values: list[Any]) -> np.ndarray:
    """Integer ns (JSON ints or digit strings, as ``ns_or_none``); ``_NONE`` where invalid."""
    n = len(values)
    types = set(map(type, values))
    try:
        if types == {str} and all(map(str.isdigit, values)) and all(map(str.isascii, values)):
            if max(map(len, values)) < 20:
                arr = np.fromiter(map(int, values), np.int64, count=n)
                arr[(arr >= _LIM)] = _NONE
                return arr
        elif types == {int}:
            arr = np.fromiter(values, np.int64, count=n)
            arr[(arr <= -_LIM) | (arr >= _LIM)] = _NONE
            return arr
    except (ValueError, OverflowError):
        pass
    return np.fromiter(
        (_NONE if (v := ns_or_none(x)) is None else v for x in values), np.int64, count=n
    )


_HEX16 = re.compile(r"0[0-9a-fA-F]{16}|0").fullmatch
_HEX32 = re.compile(r"[0-9a-f]{32}|").fullmatch


def _span_ids(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Span ids (hex or base64; ``""`` is 0) as uint64, and which were valid."""
    n = len(values)
    if set(map(type, values)) == {str}:
        padded = list(map(str.__add__, repeat("0"), values))  # "" -> "0"; hex unchanged
        if all(map(_HEX16, padded)):
            return (np.fromiter(map(int, padded, repeat(16)), np.uint64, count=n),
                    np.ones(n, bool))  # fmt: skip
    out = np.zeros(n, np.uint64)
    ok = np.ones(n, bool)
    for k, v in enumerate(values):
        try:
            h = id_to_hex(v)
        except ValueError:
            ok[k] = False
            continue
        out[k] = int(h[-16:], 16) if h else 0
    return out, ok


def _trace_ids(values: list[Any]) -> tuple[list[str], np.ndarray]:
    """Trace ids as 32 lowercase hex digits (``""`` when absent), and which were valid."""
    n = len(values)
    if set(map(type, values)) == {str}:
        lower = list(map(str.lower, values))
        if all(map(_HEX32, lower)):
            return lower, np.ones(n, bool)
    out = [""] * n
    ok = np.ones(n, bool)
    for k, v in enumerate(values):
        try:
            out[k] = id_to_hex(v)
        except ValueError:
            ok[k] = False
    return out, ok


def _resource_attrs(resource: Any) -> dict[str, AnyValue]:
    return otlp_attrs(resource.attributes) if resource is not None else {}


def load_otlp_traces_lines(lines: Iterable[tuple[int, bytes]], *, ctx: LoadContext) -> EventTable:
    """Spans of an OTLP-JSON traces file given as ``(line number, line bytes)``.

    Each line is read by the compiled extractor where it is built and sure of the line
    (:meth:`OtlpSpanColumns.add_chunk`), else by the typed decoder; a line that decoder
    rejects is re-read span by span (:func:`~otel_ext.exporters.otlp_format.careful_items`) so that
    only the bad spans (or containers) are reported, each named ``line N span K`` (or by its
    JSON path).
    """
    cols = OtlpSpanColumns(ctx)
    n_span = 0
    if _cscan is None:
        for lineno, line in lines:
            n_span = decode_line(cols, lineno, line, n_span)
    else:
        from otel_ext.analysis.loaders._otlp_fast import ScannedChunk

        keys = tuple(k.encode() for k in _wanted())
        for lineno, line in lines:
            res = _cscan.scan_otlp_lines(line, keys, lineno, len(line))
            n_span = cols.add_chunk(ScannedChunk(res, len(keys), 0), line, n_span)
    return cols.build({"format": "otlp-traces", "path": ctx.path, "rank": -1})


def load_otlp_traces_pieces(
    pieces: Iterable[bytes] | bytes,
    *,
    ctx: LoadContext,
    max_line: int,
    threads: int | None = None,
    chunk_bytes: int | None = None,
) -> EventTable:
    """Spans of an OTLP-JSON traces file given as byte pieces (any cut) or whole: the
    compiled extractor reads chunks of whole lines on ``threads`` threads (default: the
    cores, at most 4) in chunks of about ``chunk_bytes`` (default
    :data:`~otel_ext.analysis.loaders._otlp_fast.CHUNK_BYTES`); without it, or for the lines
    it leaves, the typed decoder does (:func:`load_otlp_traces_lines`). The same table
    whatever the threads, chunks and pieces.

    Raises:
        InputError: a line longer than ``max_line`` bytes (``path`` unset), or a bad span
            when ``ctx`` does not keep going.
    """
    whole = isinstance(pieces, bytes | bytearray)
    if _cscan is None:
        parts = [pieces] if whole else pieces
        return load_otlp_traces_lines(iter_lines(parts, max_line=max_line), ctx=ctx)  # type: ignore[arg-type]
    from otel_ext.analysis.loaders._otlp_fast import (
        LineTooLong,
        ScannedChunk,
        chunks_of,
        line_too_long,
        scan_chunks,
    )

    keys = tuple(k.encode() for k in _wanted())
    scan_lines = _cscan.scan_otlp_lines

    def scan(chunk: Any) -> tuple[Any, ...]:
        return scan_lines(chunk, keys, 1, max_line)  # type: ignore[no-any-return]

    cols = OtlpSpanColumns(ctx)
    n_span = 0
    offset = 0  # lines before the chunk
    chunks = chunks_of(pieces, max_line=max_line, chunk_bytes=chunk_bytes)
    try:
        for chunk, res in scan_chunks(chunks, scan, threads=threads):
            scanned = ScannedChunk(res, len(keys), offset)
            n_span = cols.add_chunk(scanned, chunk, n_span)
            if scanned.long_line:
                raise line_too_long(max_line, scanned.long_line)
            offset = scanned.last_line
    except LineTooLong:
        raise line_too_long(max_line, offset + 1) from None
    return cols.build({"format": "otlp-traces", "path": ctx.path, "rank": -1})


def decode_line(cols: OtlpSpanColumns, lineno: int, line: bytes, n_span: int) -> int:
    """One line's spans through the typed decoder (span by span when it rejects the line);
    returns the number of spans read so far in the file."""
    try:
        req = decode_traces(line)
    except RequestError as e:
        return _careful_line(cols, lineno, line, n_span, e)
    groups = []
    for rs in req.resourceSpans:
        res = _resource_attrs(rs.resource)
        for ss in rs.scopeSpans or rs.instrumentationLibrarySpans:
            groups.append((res, ss.spans, n_span))
            n_span += len(ss.spans)
    cols.add_groups(lineno, groups)
    return n_span


def _careful_line(
    cols: OtlpSpanColumns, lineno: int, line: bytes, n_span: int, first_error: RequestError
) -> int:
    ctx = cols.ctx
    try:
        items = list(careful_items(line, "resourceSpans"))
    except RequestError as e:
        ctx.bad(f"line {lineno}", str(e))
        return n_span
    groups: list[tuple[dict[str, AnyValue], list[Span], int]] = []
    last_res: Any = _MISSING
    for where, resource, span, err in items:
        is_span = where.rpartition(".")[2].startswith("spans[")
        record = f"line {lineno} span {n_span}" if is_span else f"line {lineno} {where}".rstrip()
        if is_span:
            n_span += 1
        if err is not None:
            ctx.bad(record, f"{err} (at {where})" if is_span else str(err))
            continue
        if resource is not last_res or not groups:
            groups.append((_resource_attrs(resource), [], n_span - 1))
            last_res = resource
        groups[-1][1].append(span)
    cols.add_groups(lineno, groups)
    return n_span


def iter_lines(pieces: Iterable[bytes], *, max_line: int) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` of the non-blank lines of a stream of byte pieces.

    A line longer than ``max_line`` bytes raises :class:`~otel_ext.errors.InputError` before
    it is held whole (memory stays bounded by the limit).
    """
    from otel_ext.errors import InputError

    parts: list[bytes] = []
    size = 0
    number = 0
    for piece in pieces:
        start = 0
        while True:
            nl = piece.find(b"\n", start)
            if nl < 0:
                rest = piece[start:]
                if rest:
                    parts.append(rest)
                    size += len(rest)
                if size > max_line:
                    raise InputError(
                        f"a line longer than {max_line} bytes (OTEL_EXT_MAX_RECORD_BYTES)",
                        record=f"line {number + 1}",
                    )
                break
            number += 1
            if size + nl - start > max_line:
                raise InputError(
                    f"a line longer than {max_line} bytes (OTEL_EXT_MAX_RECORD_BYTES)",
                    record=f"line {number}",
                )
            if parts:
                parts.append(piece[start:nl])
                line = b"".join(parts)
                parts.clear()
                size = 0
            else:
                line = piece[start:nl]
            if line and not line.isspace():
                yield number, line
            start = nl + 1
    line = b"".join(parts)
    if line and not line.isspace():
        yield number + 1, line
