"""The one decoder of OTLP-JSON requests: typed records, ids in hex or base64, bounded input.

Every reader of OTLP-JSON files in the project goes through here: the analysis loaders
(:mod:`otel_ext.analysis.loaders.spans`, ``.metrics``, which turn the records into columns)
and :func:`otel_ext.exporters.read_spans` / :func:`otel_ext.exporters.read_metrics` (which flatten them into
records). One place decides what a request may hold:

* each line is decoded by ``msgspec`` into small typed records holding only the fields that
  are read; a member of the wrong JSON type (a ``resource`` that is a list, ``spans`` that is
  a string, a ``count`` of ``"12.5"``) is a :class:`RequestError` whose ``where`` is the JSON
  path of the offending member, never a crash deep in a loop;
* nesting deeper than the decoder's limit is a :class:`RequestError` too (``nested too
  deeply``), not a ``RecursionError``;
* :func:`careful_items` re-reads a rejected request one span (or data point) at a time, so
  that ``--keep-going`` loses only the bad record, and names it;
* trace and span ids are accepted as hex (the OTLP/JSON encoding: 32 and 16 hex digits) and
  as base64 (the generic protobuf JSON mapping: 24 and 12 characters) and decoded the same
  way everywhere (:func:`id_to_hex`, :func:`span_id_int`).

>>> req = decode_traces(b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":'
...     b'"AAAAAAAAAAAAAAAAAAAAAQ==","spanId":"AAAAAAAAAAI=","name":"s",'
...     b'"startTimeUnixNano":"5","endTimeUnixNano":"7"}]}]}]}')
>>> span = req.resourceSpans[0].scopeSpans[0].spans[0]
>>> id_to_hex(span.traceId), span_id_int(span.spanId), span.name
('00000000000000000000000000000001', 2, 's')
>>> try:
...     decode_traces(b'{"resourceSpans":[{"resource":[1]}]}')
... except RequestError as e:
...     print(e)
Expected `object | null`, got `array` - at `$.resourceSpans[0].resource`
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from typing import Any

import msgspec

from otel_ext._otlp_scalars import is_int_text

__all__ = [
    "AnyValue",
    "DataPoint",
    "KeyValue",
    "MetricsRequest",
    "RequestError",
    "Span",
    "TracesRequest",
    "any_value",
    "careful_items",
    "decode_metrics",
    "decode_metrics_lean",
    "decode_traces",
    "id_to_hex",
    "raw_attributes",
    "span_id_int",
]

_U: Any = msgspec.UNSET


class RequestError(ValueError):
    """A request (one line) that is not valid OTLP-JSON; ``where`` is the JSON path."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


class AnyValue(msgspec.Struct, gc=False):
    """An OTLP ``AnyValue``: exactly one member is set (``UNSET`` for the others)."""

    stringValue: Any = _U
    intValue: Any = _U
    doubleValue: Any = _U
    boolValue: Any = _U
    arrayValue: Any = _U
    kvlistValue: Any = _U
    bytesValue: Any = _U


class KeyValue(msgspec.Struct, gc=False):
    """An attribute: ``key`` and its value."""

    key: str = ""
    value: AnyValue | None = None


class Resource(msgspec.Struct, gc=False):
    attributes: list[KeyValue] = []


class Scope(msgspec.Struct, gc=False):
    name: str = ""
    version: str = ""


class Span(msgspec.Struct, gc=False):
    """The span members the readers use (the others are skipped by the decoder)."""

    traceId: str = ""
    spanId: str = ""
    parentSpanId: str = ""
    name: Any = _U
    kind: int | str = 0
    startTimeUnixNano: int | str | None = None
    endTimeUnixNano: int | str | None = None
    attributes: list[KeyValue] = []
    events: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    status: dict[str, Any] = {}
    traceState: str = ""
    flags: int | None = None


class ScopeSpans(msgspec.Struct, gc=False):
    scope: Scope | None = None
    spans: list[Span] = []


class ResourceSpans(msgspec.Struct, gc=False):
    resource: Resource | None = None
    scopeSpans: list[ScopeSpans] = []
    #: the pre-1.0 name of ``scopeSpans`` (old Collectors)
    instrumentationLibrarySpans: list[ScopeSpans] = []


class TracesRequest(msgspec.Struct, gc=False):
    """An ``ExportTraceServiceRequest``."""

    resourceSpans: list[ResourceSpans] = []


class DataPoint(msgspec.Struct, gc=False):
    """A number, histogram or summary data point (the members of all three)."""

    timeUnixNano: int | str | None = None
    startTimeUnixNano: int | str | None = None
    asDouble: float | str | None = None
    asInt: int | str | None = None
    count: int | str | None = None
    sum: float | str | None = None
    min: float | str | None = None
    max: float | str | None = None
    attributes: list[KeyValue] = []
    exemplars: list[dict[str, Any]] = []
    bucketCounts: list[int | str] = []
    explicitBounds: list[float | str] = []
    scale: int | None = None
    zeroCount: int | str | None = None
    positive: dict[str, Any] | None = None
    negative: dict[str, Any] | None = None
    quantileValues: list[dict[str, Any]] = []


class LeanPoint(msgspec.Struct, gc=False):
    """A data point for the analysis: its attributes kept as their raw JSON text (points of
    one series share it, so it is decoded once per distinct text: :func:`raw_attributes`)."""

    timeUnixNano: int | str | None = None
    startTimeUnixNano: int | str | None = None
    asDouble: float | str | None = None
    asInt: int | str | None = None
    count: int | str | None = None
    sum: float | str | None = None
    attributes: msgspec.Raw = msgspec.Raw(b"[]")


class MetricBody(msgspec.Struct, gc=False):
    dataPoints: list[DataPoint] = []
    aggregationTemporality: int | str = 0
    isMonotonic: bool = False


class Metric(msgspec.Struct, gc=False):
    name: str = ""
    unit: str = ""
    description: str = ""
    gauge: MetricBody | None = None
    sum: MetricBody | None = None
    histogram: MetricBody | None = None
    exponentialHistogram: MetricBody | None = None
    summary: MetricBody | None = None


class ScopeMetrics(msgspec.Struct, gc=False):
    scope: Scope | None = None
    metrics: list[Metric] = []


class ResourceMetrics(msgspec.Struct, gc=False):
    resource: Resource | None = None
    scopeMetrics: list[ScopeMetrics] = []


class MetricsRequest(msgspec.Struct, gc=False):
    """An ``ExportMetricsServiceRequest``."""

    resourceMetrics: list[ResourceMetrics] = []


class LeanBody(msgspec.Struct, gc=False):
    dataPoints: list[LeanPoint] = []


class LeanMetric(msgspec.Struct, gc=False):
    name: str = ""
    gauge: LeanBody | None = None
    sum: LeanBody | None = None
    histogram: LeanBody | None = None
    exponentialHistogram: LeanBody | None = None
    summary: LeanBody | None = None


class LeanScopeMetrics(msgspec.Struct, gc=False):
    metrics: list[LeanMetric] = []


class LeanResourceMetrics(msgspec.Struct, gc=False):
    resource: Resource | None = None
    scopeMetrics: list[LeanScopeMetrics] = []


class LeanMetricsRequest(msgspec.Struct, gc=False):
    """An ``ExportMetricsServiceRequest`` with the fields the analysis reads."""

    resourceMetrics: list[LeanResourceMetrics] = []


_TRACES = msgspec.json.Decoder(TracesRequest)
_LEAN_METRICS = msgspec.json.Decoder(LeanMetricsRequest)
_KV_LIST = msgspec.json.Decoder(list[KeyValue])
_METRICS = msgspec.json.Decoder(MetricsRequest)
_ANY = msgspec.json.Decoder()


def _decode(decoder: Any, data: bytes | memoryview) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as e:
        msg = str(e)
        where = msg.rpartition(" - at `")[2].rstrip("`") if " - at `" in msg else ""
        raise RequestError(msg, where) from None
    except msgspec.DecodeError as e:
        raise RequestError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise RequestError("nested too deeply (JSON nesting beyond the decoder's limit)") from None


def decode_traces(data: bytes | memoryview) -> TracesRequest:
    """One ``ExportTraceServiceRequest`` (one line of a traces file), typed.

    Raises:
        RequestError: malformed JSON, too deep, or a member of the wrong type.
    """
    return _decode(_TRACES, data)  # type: ignore[no-any-return]


def decode_metrics(data: bytes | memoryview) -> MetricsRequest:
    """One ``ExportMetricsServiceRequest`` (one line of a metrics file), typed.

    Raises:
        RequestError: as :func:`decode_traces`.
    """
    return _decode(_METRICS, data)  # type: ignore[no-any-return]


def decode_metrics_lean(data: bytes | memoryview) -> LeanMetricsRequest:
    """One metrics request with each point's attributes as raw JSON (:class:`LeanPoint`).

    Raises:
        RequestError: as :func:`decode_traces` (the attributes are checked by
            :func:`raw_attributes`).
    """
    return _decode(_LEAN_METRICS, data)  # type: ignore[no-any-return]


def raw_attributes(raw: msgspec.Raw | bytes) -> list[KeyValue]:
    """A point's raw attribute text as typed records.

    Raises:
        RequestError: not a list of ``KeyValue`` objects, or too deep.
    """
    return _decode(_KV_LIST, raw)  # type: ignore[no-any-return]


def _convert(obj: Any, kind: Any) -> Any:
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as e:
        raise RequestError(str(e)) from None
    except RecursionError:
        raise RequestError("nested too deeply") from None


def careful_items(
    data: bytes | memoryview, key: str
) -> Iterator[tuple[str, Any, Any, Exception | None]]:
    """Re-read a request that :func:`decode_traces` / :func:`decode_metrics` rejected, one
    record at a time: yields ``(where, resource, record, error)``.

    ``key`` is ``resourceSpans`` (records are :class:`Span`) or ``resourceMetrics`` (records
    are :class:`Metric`, each validated whole, its points included). ``where`` names the record
    (``resourceSpans[0].scopeSpans[1].spans[7]``); ``error`` is None for a good record, else
    the problem, with ``record`` None. ``resource`` is the record's :class:`Resource` (None
    when absent or bad). A request that is not even an object with a ``key`` list yields one
    error for the whole request (``where`` empty).

    Raises:
        RequestError: the line is not JSON at all, or nested too deeply.

    >>> bad = b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"a"},{"name":"b","spanId":3}]}]}]}'
    >>> [(w, r is None, e is None) for w, _, r, e in careful_items(bad, "resourceSpans")]
    [('resourceSpans[0].scopeSpans[0].spans[0]', False, True), ('resourceSpans[0].scopeSpans[0].spans[1]', True, False)]
    """
    req = _decode(_ANY, data)
    if not isinstance(req, dict) or not isinstance(req.get(key, []), list):
        yield "", None, None, RequestError(f"not an OTLP request (no {key} list)")
        return
    inner, leaf, kind = (
        ("scopeSpans", "spans", Span)
        if key == "resourceSpans"
        else ("scopeMetrics", "metrics", Metric)
    )
    for ri, rs in enumerate(req.get(key, [])):
        where_r = f"{key}[{ri}]"
        if not isinstance(rs, dict):
            yield where_r, None, None, RequestError(f"{key} entry is not an object")
            continue
        resource = None
        res_error = None
        try:
            resource = _convert(rs.get("resource"), Resource | None)
        except RequestError as e:
            res_error = RequestError(f"resource: {e}")
        scopes = rs.get(inner)
        if scopes is None and key == "resourceSpans":
            scopes = rs.get("instrumentationLibrarySpans")
        if scopes is None:
            scopes = []
        if res_error is not None:
            yield f"{where_r}.resource", None, None, res_error
        if not isinstance(scopes, list):
            yield f"{where_r}.{inner}", None, None, RequestError(f"{inner} is not a list")
            continue
        for si, ss in enumerate(scopes):
            where_s = f"{where_r}.{inner}[{si}]"
            if not isinstance(ss, dict):
                yield where_s, None, None, RequestError(f"{inner} entry is not an object")
                continue
            items = ss.get(leaf, [])
            if not isinstance(items, list):
                yield f"{where_s}.{leaf}", None, None, RequestError(f"{leaf} is not a list")
                continue
            for k, item in enumerate(items):
                where = f"{where_s}.{leaf}[{k}]"
                try:
                    rec = _convert(item, kind)
                except RequestError as e:
                    yield where, None, None, e
                    continue
                if res_error is not None:  # the resource's attributes are unknown
                    yield where, None, None, RequestError("its resource is malformed")
                    continue
                yield where, resource, rec, None


_HEX_ID = re.compile(r"[0-9a-fA-F]{16}|[0-9a-fA-F]{32}").fullmatch


def id_to_hex(value: Any) -> str:
    """A trace or span id as lowercase hex, given hex (OTLP/JSON) or base64 (protobuf JSON).

    Hex ids are 32 (trace) or 16 (span) hex digits; base64 ids are 24 or 12 characters. Any
    other string raises ``ValueError``; ``""`` stays ``""``.

    >>> id_to_hex("AAAAAAAAAAI="), id_to_hex("00F067AA0BA902B7")
    ('0000000000000002', '00f067aa0ba902b7')
    >>> id_to_hex("-1")
    Traceback (most recent call last):
    ValueError: id '-1' is neither hex nor base64 of 8 or 16 bytes
    """
    if value == "":
        return ""
    if not isinstance(value, str):
        raise ValueError(f"id {value!r:.40} is not a string")
    n = len(value)
    if _HEX_ID(value) is not None:
        return value.lower()
    if n in (12, 24):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) in (8, 16):
            return raw.hex()
    raise ValueError(f"id {value!r:.40} is neither hex nor base64 of 8 or 16 bytes")


def span_id_int(value: Any) -> int:
    """A span id (hex or base64, as :func:`id_to_hex`) as an unsigned 64-bit integer; the
    low 64 bits for a 16-byte value, 0 for ``""``.

    >>> span_id_int("00f067aa0ba902b7"), span_id_int(""), span_id_int("AAAAAAAAAAI=")
    (67667974448284343, 0, 2)
    """
    h = id_to_hex(value)
    return int(h[-16:], 16) if h else 0


def any_value(v: Any) -> Any:
    """The Python value of an :class:`AnyValue` (or of its generic JSON form): strings,
    bools, ints (from ``intValue`` text), floats, lists, dicts; None when unreadable.

    >>> any_value(AnyValue(intValue="3")), any_value({"stringValue": "x"})
    (3, 'x')
    >>> any_value({"arrayValue": {"values": [{"boolValue": True}]}})
    [True]
    """
    if isinstance(v, AnyValue):
        for key in ("stringValue", "intValue", "doubleValue", "boolValue", "arrayValue",
                    "kvlistValue", "bytesValue"):  # fmt: skip
            val = getattr(v, key)
            if val is not _U:
                return _scalar(key, val, 0)
        return None
    return _generic(v, 0)


_MAX_VALUE_DEPTH = 64


def _generic(v: Any, depth: int) -> Any:
    if not isinstance(v, dict) or depth > _MAX_VALUE_DEPTH:
        return None
    for key, val in v.items():
        return _scalar(key, val, depth)
    return None


def _scalar(key: str, val: Any, depth: int) -> Any:
    if key == "stringValue":
        return val if isinstance(val, str) else None
    if key == "boolValue":
        return val if isinstance(val, bool) else None
    if key == "intValue":
        if type(val) is int or (isinstance(val, str) and is_int_text(val)):
            i = int(val)
            return i if -(2**63) <= i < 2**63 else None
        return None
    if key == "doubleValue":
        if isinstance(val, bool):
            return None
        try:
            return float(val)
        except (TypeError, ValueError):
            return None
    if key == "arrayValue":
        vals = val.get("values", []) if isinstance(val, dict) else None
        return [_generic(x, depth + 1) for x in vals] if isinstance(vals, list) else None
    if key == "kvlistValue":
        vals = val.get("values", []) if isinstance(val, dict) else None
        if not isinstance(vals, list):
            return None
        return {
            kv["key"]: _generic(kv.get("value"), depth + 1)
            for kv in vals
            if isinstance(kv, dict) and isinstance(kv.get("key"), str)
        }
    if key == "bytesValue":
        return val if isinstance(val, str) else None
    return None
