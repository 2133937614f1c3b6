"""Direct OTLP/JSON encoders: SDK spans and metrics straight to the Collector's JSON text.

The reference encoding (:mod:`otel_ext.exporters._otlp_json`) goes SDK object → protobuf message →
``MessageToDict`` → ``json.dumps``; these functions write the same bytes directly from the
SDK objects (about a tenth of the time). They reproduce the protobuf JSON mapping exactly:
keys in field-number order, lowerCamelCase, default values of fields without presence
omitted (``0``, ``""``, empty lists), fields with presence (``oneof`` values, optional
doubles, sub-messages the SDK encoder always sets) kept even when zero, 64-bit integers as
strings, 32-bit integers and enums as numbers, doubles as Python's shortest ``repr`` (and
``"NaN"``, ``"Infinity"``, ``"-Infinity"``), bytes as base64, trace and span ids as hex.

They accept only what they can encode exactly (attribute values of the exact types
``str``, ``bool``, ``int`` within int64, ``float``, ``bytes``, ``None``, and ``tuple``,
``list`` and ``dict`` of those; integers in range for their protobuf field) and raise
:class:`UnsupportedValue` for anything else, so the caller can fall back to the reference
encoder, which then does whatever the SDK's encoder does with it (drop and log one
attribute, or fail the export).

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> from opentelemetry.sdk.resources import Resource
>>> memory = InMemorySpanExporter()
>>> provider = TracerProvider(resource=Resource({"service.name": "doc"}))
>>> provider.add_span_processor(SimpleSpanProcessor(memory))
>>> provider.get_tracer("scope").start_span("step", start_time=5, attributes={"n": 1}).end(9)
>>> text = spans_to_json(memory.get_finished_spans())
>>> text[:60]
'{"resourceSpans":[{"resource":{"attributes":[{"key":"service'
>>> span = json.loads(text)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
>>> span["startTimeUnixNano"], span["endTimeUnixNano"], span["attributes"], span["kind"]
('5', '9', [{'key': 'n', 'value': {'intValue': '1'}}], 1)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.metrics.export import (
    ExponentialHistogram,
    Gauge,
    Histogram,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

__all__ = ["UnsupportedValue", "metrics_to_json", "spans_to_json"]

# ``json.dumps(..., ensure_ascii=False)`` escapes strings with exactly this function
_quote: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
_float_repr = float.__repr__
_b64 = base64.b64encode

_I64_MIN = -(1 << 63)
_I64_END = 1 << 63
_U64_END = 1 << 64
_I32_MIN = -(1 << 31)
_I32_END = 1 << 31
_U32_END = 1 << 32

# SpanFlags: CONTEXT_HAS_IS_REMOTE (0x100), plus CONTEXT_IS_REMOTE (0x200) for a remote parent
_FLAGS_LOCAL = "256"
_FLAGS_REMOTE = "768"

# enum members are singletons; hashing one (or reading ``.value``) runs Python code
_KIND = {
    id(SpanKind.INTERNAL): "1",
    id(SpanKind.SERVER): "2",
    id(SpanKind.CLIENT): "3",
    id(SpanKind.PRODUCER): "4",
    id(SpanKind.CONSUMER): "5",
}
_STATUS_CODE = {id(StatusCode.UNSET): 0, id(StatusCode.OK): 1, id(StatusCode.ERROR): 2}


# spans whose ``attributes`` property is the SDK's (a read-only view of ``_attributes``)
_READABLE_ATTRIBUTES = ReadableSpan.__dict__["attributes"]
_plain_span_types: dict[type, bool] = {}


class UnsupportedValue(ValueError):
    """A value the direct encoder does not encode; use the reference encoder instead."""


# -- scalars -------------------------------------------------------------------------------


def _u64(value: Any) -> int:
    """A fixed64/uint64 field value, checked like protobuf checks it."""
    if type(value) is not int or not 0 <= value < _U64_END:
        raise UnsupportedValue(f"not a uint64: {value!r}")
    return value


def _i64(value: Any) -> int:
    if type(value) is not int or not _I64_MIN <= value < _I64_END:
        raise UnsupportedValue(f"not an int64: {value!r}")
    return value


def _u32(value: Any) -> int:
    if type(value) is not int or not 0 <= value < _U32_END:
        raise UnsupportedValue(f"not a uint32: {value!r}")
    return value


def _double(value: Any) -> str:
    """A double field value as the protobuf JSON mapping and ``json.dumps`` write it."""
    kind = type(value)
    if kind is int:
        value = float(value)
    elif kind is not float:
        raise UnsupportedValue(f"not a double: {value!r}")
    if value - value == 0.0:  # finite
        return _float_repr(value)
    if value != value:
        return '"NaN"'
    return '"Infinity"' if value > 0 else '"-Infinity"'


def _doubles(values: Iterable[Any]) -> str:
    return ",".join([_double(v) for v in values])


def _u64_strings(values: Sequence[Any]) -> str:
    for v in values:
        _u64(v)
    return ",".join([f'"{v}"' for v in values])


def _trace_id(value: int) -> str:
    return value.to_bytes(16, "big").hex()


def _span_id(value: int) -> str:
    return value.to_bytes(8, "big").hex()


# -- attributes ----------------------------------------------------------------------------


def _any_value(value: Any) -> str:
    """An ``AnyValue`` message, as the SDK's ``_encode_value`` builds it."""
    kind = type(value)
    if kind is str:
        return '{"stringValue":' + _quote(value) + "}"
    if kind is int:
        if _I64_MIN <= value < _I64_END:
            return f'{{"intValue":"{value}"}}'
        raise UnsupportedValue(f"integer out of int64 range: {value!r}")
    if kind is float:
        return '{"doubleValue":' + _double(value) + "}"
    if kind is bool:
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if kind is tuple or kind is list:
        if value:
            return '{"arrayValue":{"values":[' + ",".join([_any_value(v) for v in value]) + "]}}"
        return '{"arrayValue":{}}'
    if kind is bytes:
        return '{"bytesValue":"' + _b64(value).decode("ascii") + '"}'
    if value is None:
        return "{}"
    if kind is dict:
        if value:
            return '{"kvlistValue":{"values":[' + _key_values(value) + "]}}"
        return '{"kvlistValue":{}}'
    raise UnsupportedValue(f"attribute value of type {kind.__name__}")


#: encoded ``KeyValue`` messages by (key, value type, value) for ``str``, ``bool`` and ``int``
#: values, which repeat from span to span (op, group, device, sizes); floats are left out
#: (``0.0 == -0.0`` with different text). Bounded: cleared when full.
_KV_MEMO: dict[tuple[Any, type, Any], str] = {}
_KV_MEMO_MAX = 8192


def _key_value(key: Any, value: Any) -> str:
    if type(key) is not str:
        raise UnsupportedValue(f"attribute key of type {type(key).__name__}")
    if key:
        return '{"key":' + _quote(key) + ',"value":' + _any_value(value) + "}"
    return '{"value":' + _any_value(value) + "}"


def _key_values(attributes: Mapping[Any, Any]) -> str:
    """The comma-separated ``KeyValue`` messages of a non-empty attribute mapping."""
    parts = []
    # iterating a BoundedAttributes goes through its lock and __getitem__ once per key
    items = (
        attributes._dict.items() if type(attributes) is BoundedAttributes else attributes.items()
    )
    memo = _KV_MEMO
    for key, value in items:
        kind = type(value)
        if kind is str or kind is int or kind is bool:
            memo_key = (key, kind, value)
            text = memo.get(memo_key)
            if text is None:
                text = _key_value(key, value)
                if len(memo) >= _KV_MEMO_MAX:
                    memo.clear()
                memo[memo_key] = text
            parts.append(text)
        else:
            parts.append(_key_value(key, value))
    return ",".join(parts)


def _attributes_field(name: str, attributes: Mapping[Any, Any] | None) -> str:
    """``,"NAME":[...]`` for a non-empty mapping, else ``""``."""
    if not attributes:
        return ""
    return ',"' + name + '":[' + _key_values(attributes) + "]"


def _object(fields: list[str]) -> str:
    """``{...}`` from fields written with a leading comma each."""
    return "{" + "".join(fields)[1:] + "}"


def _resource(resource: Any) -> str:
    return _object([_attributes_field("attributes", resource.attributes)])


def _scope(scope: Any) -> str:
    if scope is None:
        return "{}"
    fields = []
    if scope.name:
        fields.append(',"name":' + _quote(scope.name))
    if scope.version:
        fields.append(',"version":' + _quote(scope.version))
    fields.append(_attributes_field("attributes", scope.attributes))
    return _object(fields)


def _schema_url(url: Any) -> str:
    return ',"schemaUrl":' + _quote(url) if url else ""


# -- spans ---------------------------------------------------------------------------------


def _event(event: Any) -> str:
    fields = []
    timestamp = event.timestamp
    if timestamp:
        fields.append(f',"timeUnixNano":"{_u64(timestamp)}"')
    if event.name:
        fields.append(',"name":' + _quote(event.name))
    fields.append(_attributes_field("attributes", event.attributes))
    dropped = event.dropped_attributes
    if dropped:
        fields.append(f',"droppedAttributesCount":{_u32(dropped)}')
    return _object(fields)


def _link(link: Any) -> str:
    context = link.context
    parts = [
        '{"traceId":"',
        _trace_id(context.trace_id),
        '","spanId":"',
        _span_id(context.span_id),
        '"',
        _attributes_field("attributes", link.attributes),
    ]
    dropped = link.dropped_attributes
    if dropped:
        parts.append(f',"droppedAttributesCount":{_u32(dropped)}')
    parts.append(',"flags":' + (_FLAGS_REMOTE if context.is_remote else _FLAGS_LOCAL) + "}")
    return "".join(parts)


def _status(status: Any) -> str:
    status_code = status.status_code
    code = _STATUS_CODE.get(id(status_code))
    if code is None:
        code = status_code.value
    description = status.description
    if description:
        if code:
            return ',"status":{"message":' + _quote(description) + f',"code":{code}}}'
        return ',"status":{"message":' + _quote(description) + "}"
    return f',"status":{{"code":{code}}}' if code else ',"status":{}'


def _span(span: ReadableSpan) -> str:
    context: Any = span.get_span_context()
    parts = [
        '{"traceId":"',
        _trace_id(context.trace_id),
        '","spanId":"',
        _span_id(context.span_id),
        '"',
    ]
    trace_state = context.trace_state
    if trace_state is not None:
        state = ",".join([f"{key}={value}" for key, value in trace_state.items()])
        if state:
            parts.append(',"traceState":' + _quote(state))
    parent = span.parent
    flags = _FLAGS_LOCAL
    if parent:
        parts.append(',"parentSpanId":"' + _span_id(parent.span_id) + '"')
        if parent.is_remote:
            flags = _FLAGS_REMOTE
    if span.name:
        parts.append(',"name":' + _quote(span.name))
    kind = _KIND.get(id(span.kind))
    if kind is None:
        raise UnsupportedValue(f"span kind {span.kind!r}")
    parts.append(',"kind":' + kind)
    start = span.start_time
    if start:
        parts.append(f',"startTimeUnixNano":"{_u64(start)}"')
    end = span.end_time
    if end:
        parts.append(f',"endTimeUnixNano":"{_u64(end)}"')
    span_type = type(span)
    plain = _plain_span_types.get(span_type)
    if plain is None:
        plain = _plain_span_types[span_type] = span_type.attributes is _READABLE_ATTRIBUTES
    attributes = span._attributes if plain else span.attributes
    parts.append(_attributes_field("attributes", attributes))
    dropped = span.dropped_attributes
    if dropped:
        parts.append(f',"droppedAttributesCount":{_u32(dropped)}')
    events = span.events
    if events:
        parts.append(',"events":[' + ",".join([_event(e) for e in events]) + "]")
    dropped = span.dropped_events
    if dropped:
        parts.append(f',"droppedEventsCount":{_u32(dropped)}')
    links = span.links
    if links:
        parts.append(',"links":[' + ",".join([_link(link) for link in links]) + "]")
    dropped = span.dropped_links
    if dropped:
        parts.append(f',"droppedLinksCount":{_u32(dropped)}')
    status = span.status
    if status is not None:
        parts.append(_status(status))
    parts.append(',"flags":' + flags + "}")
    return "".join(parts)


def spans_to_json(spans: Sequence[ReadableSpan]) -> str:
    """Encode finished spans as one ``ExportTraceServiceRequest`` in OTLP/JSON.

    Spans are grouped by resource, then by instrumentation scope, in order of first
    appearance, as the SDK's OTLP encoder groups them.

    Args:
        spans: finished SDK spans.

    Returns:
        The JSON text (no trailing newline), byte for byte what
        ``json.dumps(reference_dict, separators=(",", ":"), ensure_ascii=False)`` gives.

    Raises:
        UnsupportedValue: a value outside what this encoder reproduces exactly.
        Exception: whatever reading an unusual span object raises.

    >>> spans_to_json([])
    '{}'
    """
    groups: dict[Any, dict[Any, list[str]]] = {}
    # Resource.__hash__ serialises the attributes: look each object up once per batch
    by_identity: dict[tuple[int, int], list[str]] = {}
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope or None
        identity = (id(resource), id(scope))
        target = by_identity.get(identity)
        if target is None:
            scopes = groups.get(resource)
            if scopes is None:
                scopes = groups[resource] = {}
            target = scopes.get(scope)
            if target is None:
                target = scopes[scope] = []
            by_identity[identity] = target
        target.append(_span(span))
    if not groups:
        return "{}"
    resource_parts = []
    for resource, scopes in groups.items():
        scope_parts = [
            '{"scope":'
            + _scope(scope)
            + ',"spans":['
            + ",".join(encoded)
            + "]"
            + _schema_url(scope.schema_url if scope else None)
            + "}"
            for scope, encoded in scopes.items()
        ]
        resource_parts.append(
            '{"resource":'
            + _resource(resource)
            + ',"scopeSpans":['
            + ",".join(scope_parts)
            + "]"
            + _schema_url(resource.schema_url)
            + "}"
        )
    return '{"resourceSpans":[' + ",".join(resource_parts) + "]}"


# -- metrics -------------------------------------------------------------------------------


def _exemplars(exemplars: Sequence[Any]) -> str:
    """``,"exemplars":[...]`` (or ``""``), as the SDK's ``_encode_exemplars`` builds them."""
    if not exemplars:
        return ""
    encoded = []
    for exemplar in exemplars:
        fields = []
        if exemplar.time_unix_nano:
            fields.append(f',"timeUnixNano":"{_u64(exemplar.time_unix_nano)}"')
        value = exemplar.value
        kind = type(value)
        if kind is float:
            fields.append(',"asDouble":' + _double(value))
        if exemplar.span_id is not None and exemplar.trace_id is not None:
            fields.append(',"spanId":"' + _span_id(exemplar.span_id) + '"')
            fields.append(',"traceId":"' + _trace_id(exemplar.trace_id) + '"')
        if kind is int:
            fields.append(f',"asInt":"{_i64(value)}"')
        elif kind is not float:
            raise UnsupportedValue(f"exemplar value of type {kind.__name__}")
        fields.append(_attributes_field("filteredAttributes", exemplar.filtered_attributes))
        encoded.append(_object(fields))
    return ',"exemplars":[' + ",".join(encoded) + "]"


def _time_fields(point: Any, *, start: bool) -> str:
    text = ""
    if start and point.start_time_unix_nano:
        text = f',"startTimeUnixNano":"{_u64(point.start_time_unix_nano)}"'
    if point.time_unix_nano:
        text += f',"timeUnixNano":"{_u64(point.time_unix_nano)}"'
    return text


def _number_point(point: Any, *, start: bool) -> str:
    value = point.value
    kind = type(value)
    if kind is int:
        value_text = f',"asInt":"{_i64(value)}"'
        return _object(
            [
                _time_fields(point, start=start),
                _exemplars(point.exemplars),
                value_text,
                _attributes_field("attributes", point.attributes),
            ]
        )
    if kind is not float:
        raise UnsupportedValue(f"number data point value of type {kind.__name__}")
    return _object(
        [
            _time_fields(point, start=start),
            ',"asDouble":' + _double(value),
            _exemplars(point.exemplars),
            _attributes_field("attributes", point.attributes),
        ]
    )


def _optional_double(name: str, value: Any) -> str:
    return "" if value is None else ',"' + name + '":' + _double(value)


def _histogram_point(point: Any, bounds_memo: dict[int, tuple[Any, str]]) -> str:
    """One ``HistogramDataPoint``; ``bounds_memo`` keeps the encoding of each bounds object
    (the points of one histogram share theirs) while the caller holds the points."""
    fields = [_time_fields(point, start=True)]
    if point.count:
        fields.append(f',"count":"{_u64(point.count)}"')
    fields.append(_optional_double("sum", point.sum))
    if point.bucket_counts:
        fields.append(',"bucketCounts":[' + _u64_strings(point.bucket_counts) + "]")
    if point.explicit_bounds:
        bounds = point.explicit_bounds
        memo = bounds_memo.get(id(bounds))
        if memo is None or memo[0] is not bounds:
            memo = bounds_memo[id(bounds)] = (
                bounds,
                ',"explicitBounds":[' + _doubles(bounds) + "]",
            )
        fields.append(memo[1])
    fields.append(_exemplars(point.exemplars))
    fields.append(_attributes_field("attributes", point.attributes))
    fields.append(_optional_double("min", point.min))
    fields.append(_optional_double("max", point.max))
    return _object(fields)


def _buckets(name: str, buckets: Any) -> str:
    if not buckets.bucket_counts:
        return ""
    fields = []
    offset = buckets.offset
    if offset:
        if type(offset) is not int or not _I32_MIN <= offset < _I32_END:
            raise UnsupportedValue(f"bucket offset {offset!r}")
        fields.append(f',"offset":{offset}')
    fields.append(',"bucketCounts":[' + _u64_strings(buckets.bucket_counts) + "]")
    return ',"' + name + '":' + _object(fields)


def _exponential_point(point: Any) -> str:
    fields = [_attributes_field("attributes", point.attributes), _time_fields(point, start=True)]
    if point.count:
        fields.append(f',"count":"{_u64(point.count)}"')
    fields.append(_optional_double("sum", point.sum))
    scale = point.scale
    if scale:
        if type(scale) is not int or not _I32_MIN <= scale < _I32_END:
            raise UnsupportedValue(f"scale {scale!r}")
        fields.append(f',"scale":{scale}')
    if point.zero_count:
        fields.append(f',"zeroCount":"{_u64(point.zero_count)}"')
    fields.append(_buckets("positive", point.positive))
    fields.append(_buckets("negative", point.negative))
    if point.flags:
        fields.append(f',"flags":{_u32(point.flags)}')
    fields.append(_exemplars(point.exemplars))
    fields.append(_optional_double("min", point.min))
    fields.append(_optional_double("max", point.max))
    return _object(fields)


def _temporality(value: Any) -> str:
    number = int(value)
    return f',"aggregationTemporality":{number}' if number else ""


def _metric(metric: Any) -> str:
    fields = []
    if metric.name:
        fields.append(',"name":' + _quote(metric.name))
    if metric.description:
        fields.append(',"description":' + _quote(metric.description))
    if metric.unit:
        fields.append(',"unit":' + _quote(metric.unit))
    data = metric.data
    points = data.data_points
    kind = type(data)
    if kind is Gauge:
        if points:
            encoded = ",".join([_number_point(p, start=False) for p in points])
            fields.append(',"gauge":{"dataPoints":[' + encoded + "]}")
    elif kind is Sum:
        if points:
            encoded = ",".join([_number_point(p, start=True) for p in points])
            monotonic = ',"isMonotonic":true' if data.is_monotonic else ""
            fields.append(
                ',"sum":{"dataPoints":['
                + encoded
                + "]"
                + _temporality(data.aggregation_temporality)
                + monotonic
                + "}"
            )
    elif kind is Histogram:
        if points:
            memo: dict[int, tuple[Any, str]] = {}
            encoded = ",".join([_histogram_point(p, memo) for p in points])
            fields.append(
                ',"histogram":{"dataPoints":['
                + encoded
                + "]"
                + _temporality(data.aggregation_temporality)
                + "}"
            )
    elif kind is ExponentialHistogram:
        if points:
            encoded = ",".join([_exponential_point(p) for p in points])
            fields.append(
                ',"exponentialHistogram":{"dataPoints":['
                + encoded
                + "]"
                + _temporality(data.aggregation_temporality)
                + "}"
            )
    else:
        raise UnsupportedValue(f"metric data of type {kind.__name__}")
    return _object(fields)


def metrics_to_json(data: MetricsData) -> str:
    """Encode collected metrics as one ``ExportMetricsServiceRequest`` in OTLP/JSON.

    Args:
        data: what a metric reader collected.

    Returns:
        The JSON text (no trailing newline), byte for byte what the reference encoding
        gives.

    Raises:
        UnsupportedValue: a value outside what this encoder reproduces exactly.
        Exception: whatever reading an unusual metrics object raises.

    >>> metrics_to_json(MetricsData(resource_metrics=[]))
    '{}'
    """
    # as the SDK encoder: a repeated resource (or scope) replaces the earlier entry's
    # content but keeps its place
    by_resource: dict[Any, tuple[Any, dict[Any, str]]] = {}
    for resource_metrics in data.resource_metrics:
        resource = resource_metrics.resource
        scopes: dict[Any, str] = {}
        for scope_metrics in resource_metrics.scope_metrics:
            scope = scope_metrics.scope
            metrics = ",".join([_metric(m) for m in scope_metrics.metrics])
            scopes[scope] = (
                '{"scope":'
                + _scope(scope)
                + (',"metrics":[' + metrics + "]" if metrics else "")
                + _schema_url(scope.schema_url)
                + "}"
            )
        previous = by_resource.get(resource)
        by_resource[resource] = (previous[0] if previous else resource, scopes)
    if not by_resource:
        return "{}"
    parts = []
    for first, scopes in by_resource.values():
        parts.append(
            '{"resource":'
            + _resource(first)
            + (',"scopeMetrics":[' + ",".join(scopes.values()) + "]" if scopes else "")
            + _schema_url(first.schema_url)
            + "}"
        )
    return '{"resourceMetrics":[' + ",".join(parts) + "]}"
