"""OpenTelemetry spans (OTLP-JSON files, Jaeger JSON exports) to event-table rows.

Both formats carry the same spans; only the envelope differs. ``accel.*`` attributes (names
from :mod:`semantic_conventions.attributes`) map to table columns: rank, host, device, the
collective's op/group/seq/bytes/group size, the kernel's stream and correlation id, clock
domain and raw device ticks, FLOP and byte estimates. The span name (from
:mod:`semantic_conventions.spans`) gives the category.

OTLP-JSON (``traces.jsonl``, our file exporter and the Collector's): one
``ExportTraceServiceRequest`` per line, hex ids, times as decimal strings of nanoseconds.
Jaeger (``{"data": [{"traceID", "spans", "processes"}]}``): times in integer microseconds.

Rows are named for what they are: a kernel by its kernel name, a layer by its layer name, a
request phase by its phase (``queue``, ``prefill``, ``decode``, ``kv_transfer``), a link
transfer by its endpoints (``host0->host1``, ``host0/chip1->host0/chip2``; the link itself,
``accel.link.id``, goes to the ``device`` column and its bytes to ``coll_bytes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from otel_ext.analysis.classify import classify_kernel
from otel_ext.analysis.loaders._common import ColumnBuilder, LoadContext, int_or_none, ns_or_none
from otel_ext.analysis.table import Category, EventTable

__all__ = ["SpanRows", "otlp_value"]

_NUMERIC = [
    "start_ns", "end_ns", "category", "rank", "stream", "coll_seq", "coll_bytes",
    "coll_group_size", "correlation", "span_id", "parent_span_id", "raw_start_ticks",
    "raw_end_ticks", "flops", "bytes_accessed",
]  # fmt: skip
_STRINGS = [
    "name", "host", "device", "coll_op", "coll_group", "coll_id", "trace_id", "clock_domain",
    "source",
]  # fmt: skip


@cache
def _names() -> dict[str, Any]:
    """Attribute and span names from the generated registry (imported on first use)."""
    from semantic_conventions import attributes as A
    from semantic_conventions import spans as S

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
    if not isinstance(v, dict):
        return None
    for key, val in v.items():
        if key == "stringValue" or key == "boolValue":
            return val
        if key == "intValue":
            return int_or_none(val)
        if key == "doubleValue":
            try:
                return float(val)
            except (TypeError, ValueError):
                return None
        if key == "arrayValue":
            return [otlp_value(x) for x in (val or {}).get("values", [])]
        if key == "kvlistValue":
            return {
                kv.get("key"): otlp_value(kv.get("value")) for kv in (val or {}).get("values", [])
            }
        if key == "bytesValue":
            return val
    return None


def _hex_id(value: Any) -> int:
    if isinstance(value, str) and value:
        try:
            return int(value[-16:], 16)
        except ValueError:
            return 0
    return 0


def _num(value: Any, default: float = -1.0) -> float:
    if isinstance(value, bool) or value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


class SpanRows:
    """Accumulates spans from either format and builds the table."""

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
        attrs: dict[str, Any],
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
        category = self.n["span_category"].get(name)
        if category is None:
            if name == self.n["kernel_span"]:
                kind = attrs.get(A.ACCEL_KERNEL_KIND)
                category = self.n["kernel_kind"].get(kind) if isinstance(kind, str) else None
                if category is None:
                    kname = attrs.get(A.ACCEL_KERNEL_NAME)
                    category = classify_kernel(kname if isinstance(kname, str) else name)
            else:
                category = Category.OTHER
        display = attrs.get(A.ACCEL_KERNEL_NAME) if name == self.n["kernel_span"] else None
        if not isinstance(display, str):
            display = attrs.get(A.ACCEL_LAYER_NAME) if category == Category.LAYER else None
        if not isinstance(display, str) and category == Category.PHASE:
            # phase rows are named by their phase (queue, prefill, decode, kv_transfer)
            display = attrs.get(A.ACCEL_REQUEST_PHASE)
        rank = int_or_none(attrs.get(A.ACCEL_RANK))
        device = attrs.get(A.ACCEL_DEVICE_ID)
        if category == Category.LINK_TRANSFER:
            # a transfer belongs to its link (host0/chip1-chip2, host1/nic0), not to a chip;
            # it is named by its endpoints (``host0->host1``), which tell the two network
            # ports a transfer crossed apart from the one port its link id names
            device = attrs.get(A.ACCEL_LINK_ID) or device
            src, dst = attrs.get(A.ACCEL_LINK_SRC), attrs.get(A.ACCEL_LINK_DST)
            if isinstance(src, str) and isinstance(dst, str) and src and dst:
                display = f"{src}->{dst}"

        def i(key: str) -> int:
            v = int_or_none(attrs.get(key))
            return -1 if v is None or not -(2**62) < v < 2**62 else v

        flops = _num(attrs.get(A.ACCEL_LAYER_FLOPS, attrs.get(A.ACCEL_KERNEL_FLOPS)))
        nbytes = _num(attrs.get(A.ACCEL_LAYER_BYTES, attrs.get(A.ACCEL_KERNEL_BYTES)))
        self.b.add(
            start_ns=start_ns,
            end_ns=end_ns,
            category=int(category),
            rank=-1 if rank is None or not -1 <= rank < 2**31 else rank,
            stream=i(A.ACCEL_KERNEL_STREAM),
            coll_seq=i(A.ACCEL_COLLECTIVE_SEQ),
            coll_bytes=(
                i(A.ACCEL_LINK_BYTES)
                if category == Category.LINK_TRANSFER
                else i(A.ACCEL_COLLECTIVE_BYTES)
            ),
            coll_group_size=max(-1, min(i(A.ACCEL_COLLECTIVE_GROUP_SIZE), 2**31 - 1)),
            correlation=i(A.ACCEL_KERNEL_CORRELATION_ID),
            span_id=span_id,
            parent_span_id=parent_span_id,
            raw_start_ticks=i(A.ACCEL_CLOCK_RAW_START_TICKS),
            raw_end_ticks=i(A.ACCEL_CLOCK_RAW_END_TICKS),
            flops=flops,
            bytes_accessed=nbytes,
            name=display or name,
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


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else str(v))


def otlp_attrs(items: Any) -> dict[str, Any]:
    """An OTLP attribute list (``[{"key", "value"}]``) as a dict."""
    out: dict[str, Any] = {}
    if isinstance(items, list):
        for kv in items:
            if isinstance(kv, dict) and isinstance(kv.get("key"), str):
                out[kv["key"]] = otlp_value(kv.get("value"))
    return out


def otlp_requests(
    text: str, *, ctx: LoadContext, key: str, what: str
) -> Iterator[tuple[int, list[Any]]]:
    r"""Each line of an OTLP-JSON file (one export request per line) as ``(line, its key list)``.

    Blank lines are skipped; a line that is not JSON, or not a request with a ``key`` list, is
    recorded as a bad record (``ctx.bad``) and skipped.

    >>> ctx = LoadContext("t.jsonl", keep_going=True)
    >>> [n for n, _ in otlp_requests('{"resourceSpans": []}\n\nnot json', ctx=ctx,
    ...                               key="resourceSpans", what="ExportTraceServiceRequest")]
    [1]
    >>> [s.record for s in ctx.skipped]
    ['line 3']
    """
    import json

    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            ctx.bad(f"line {lineno}", f"malformed JSON: {e}")
            continue
        if not isinstance(req, dict) or not isinstance(req.get(key, []), list):
            ctx.bad(f"line {lineno}", f"not an {what} (no {key} list)")
            continue
        yield lineno, req.get(key, [])


def load_otlp_traces_text(text: str, *, ctx: LoadContext) -> EventTable:
    """Spans of an OTLP-JSON traces file (one ``ExportTraceServiceRequest`` per line)."""
    rows = SpanRows(ctx)
    n_span = 0
    for lineno, resource_spans in otlp_requests(
        text, ctx=ctx, key="resourceSpans", what="ExportTraceServiceRequest"
    ):
        for rs in resource_spans:
            if not isinstance(rs, dict):
                ctx.bad(f"line {lineno}", "resourceSpans entry is not an object")
                continue
            res = otlp_attrs((rs.get("resource") or {}).get("attributes"))
            for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
                for span in (ss or {}).get("spans") or []:
                    record = f"line {lineno} span {n_span}"
                    n_span += 1
                    if not isinstance(span, dict):
                        ctx.bad(record, "span is not an object")
                        continue
                    attrs = dict(res)
                    attrs.update(otlp_attrs(span.get("attributes")))
                    rows.add(
                        record=record,
                        name=span.get("name"),
                        start_ns=ns_or_none(span.get("startTimeUnixNano")),
                        end_ns=ns_or_none(span.get("endTimeUnixNano")),
                        attrs=attrs,
                        trace_id=span.get("traceId") or "",
                        span_id=_hex_id(span.get("spanId")),
                        parent_span_id=_hex_id(span.get("parentSpanId")),
                    )
    return rows.build({"format": "otlp-traces", "path": ctx.path, "rank": -1})


def load_jaeger_text(text: str, *, ctx: LoadContext) -> EventTable:
    """Spans of a Jaeger JSON export (``{"data": [{"traceID", "spans", "processes"}]}``)."""
    import json

    from otel_ext.analysis.loaders._common import us_to_ns

    try:
        doc = json.loads(text, parse_float=str)
    except ValueError as e:
        ctx.bad("file", f"malformed JSON: {e}")
        return SpanRows(ctx).build({"format": "jaeger", "path": ctx.path, "rank": -1})
    rows = SpanRows(ctx)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        ctx.bad("data", "Jaeger export has no 'data' list")
        data = []
    n_span = 0
    for ti, trace in enumerate(data):
        if not isinstance(trace, dict):
            ctx.bad(f"trace {ti}", "trace is not an object")
            continue
        procs = trace.get("processes") or {}
        for span in trace.get("spans") or []:
            record = f"trace {ti} span {n_span}"
            n_span += 1
            if not isinstance(span, dict):
                ctx.bad(record, "span is not an object")
                continue
            attrs: dict[str, Any] = {}
            proc = procs.get(span.get("processID")) if isinstance(procs, dict) else None
            for tag in (proc or {}).get("tags") or []:
                if isinstance(tag, dict) and isinstance(tag.get("key"), str):
                    attrs[tag["key"]] = _jaeger_tag(tag)
            for tag in span.get("tags") or []:
                if isinstance(tag, dict) and isinstance(tag.get("key"), str):
                    attrs[tag["key"]] = _jaeger_tag(tag)
            start = us_to_ns(span.get("startTime"))
            dur = us_to_ns(span.get("duration"))
            parent = 0
            for ref in span.get("references") or []:
                if isinstance(ref, dict) and ref.get("refType") == "CHILD_OF":
                    parent = _hex_id(ref.get("spanID"))
            rows.add(
                record=record,
                name=span.get("operationName"),
                start_ns=start,
                end_ns=None if start is None or dur is None else start + dur,
                attrs=attrs,
                trace_id=str(span.get("traceID") or trace.get("traceID") or "").rjust(32, "0"),
                span_id=_hex_id(span.get("spanID")),
                parent_span_id=parent,
            )
    return rows.build({"format": "jaeger", "path": ctx.path, "rank": -1})


def _jaeger_tag(tag: dict[str, Any]) -> Any:
    v = tag.get("value")
    t = tag.get("type")
    if t in ("int64", "int32"):
        return int_or_none(v)
    if t in ("float64", "float32"):
        return _num(v, default=float("nan"))
    return v
