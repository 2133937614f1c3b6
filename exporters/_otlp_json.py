"""OTLP/JSON encoding, exactly as the OpenTelemetry Collector's file exporter writes it.

The encoding is the protobuf JSON mapping of ``ExportTraceServiceRequest`` /
``ExportMetricsServiceRequest`` (lowerCamelCase keys, 64-bit integers as strings, enums as
integers, default values omitted) with one OTLP-specific twist: trace and span ids are
lowercase hex strings, not the base64 the generic protobuf mapping produces.

Two encoders produce it. The *reference* (``reference_spans_to_otlp_dict``,
``reference_metrics_to_otlp_dict``) first encodes with the SDK's own OTLP encoders
(``opentelemetry.exporter.otlp.proto.common``), so the JSON carries the same fields the
gRPC and HTTP exporters send, then converts with ``MessageToDict``: exact by construction,
about 170 µs a span. The *direct* encoder (:mod:`otel_ext.exporters._fast_json`) writes the same
bytes straight from the SDK objects, an order of magnitude faster; the public functions
here use it, and fall back to the reference for any value it does not reproduce exactly
(a property test checks the two agree byte for byte).

>>> request = {"resourceSpans": [{"scopeSpans": [{"spans": [
...     {"traceId": "AAAAAAAAAAAAAAAAAAAAAQ==", "spanId": "AAAAAAAAAAI="}]}]}]}
>>> hex_ids_in_traces(request)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
{'traceId': '00000000000000000000000000000001', 'spanId': '0000000000000002'}
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics.export import MetricsData
from opentelemetry.sdk.trace import ReadableSpan

from otel_ext.exporters._fast_json import metrics_to_json, spans_to_json
from otel_ext.exporters._otlp_decode import id_to_hex as _decode_id

__all__ = [
    "encode_metrics_json",
    "encode_spans_json",
    "hex_ids_in_metrics",
    "hex_ids_in_traces",
    "id_to_hex",
    "reference_encode_metrics_json",
    "reference_encode_spans_json",
    "reference_metrics_to_otlp_dict",
    "reference_spans_to_otlp_dict",
]

_logger = logging.getLogger(__name__)

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def id_to_hex(value: str) -> str:
    """Return a trace or span id as lowercase hex, given hex or base64 (protobuf JSON).

    The project's one id decoder (:func:`otel_ext.exporters._otlp_decode.id_to_hex`).

    Args:
        value: the id as the Collector writes it (hex) or as the generic protobuf JSON
            mapping writes it (base64).

    Returns:
        The id in lowercase hex; ``""`` stays ``""``.

    Raises:
        ValueError: the value is neither hex nor base64 of 8 or 16 bytes.

    >>> id_to_hex("AAAAAAAAAAI=")
    '0000000000000002'
    >>> id_to_hex("00F067AA0BA902B7")
    '00f067aa0ba902b7'
    """
    return _decode_id(value)


def _fix_ids(obj: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            obj[key] = id_to_hex(value)


def hex_ids_in_traces(request: dict[str, Any]) -> dict[str, Any]:
    """Turn the span, parent and link ids of a trace request dict into hex, in place.

    Args:
        request: an ``ExportTraceServiceRequest`` as a protobuf-JSON dict.

    Returns:
        The same dict, for chaining.
    """
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _fix_ids(span)
                for link in span.get("links", ()):
                    _fix_ids(link)
    return request


def hex_ids_in_metrics(request: dict[str, Any]) -> dict[str, Any]:
    """Turn the exemplar trace and span ids of a metrics request dict into hex, in place.

    Args:
        request: an ``ExportMetricsServiceRequest`` as a protobuf-JSON dict.

    Returns:
        The same dict, for chaining.
    """
    for resource_metrics in request.get("resourceMetrics", ()):
        for scope_metrics in resource_metrics.get("scopeMetrics", ()):
            for metric in scope_metrics.get("metrics", ()):
                for kind in ("gauge", "sum", "histogram", "exponentialHistogram"):
                    data = metric.get(kind)
                    if not data:
                        continue
                    for point in data.get("dataPoints", ()):
                        for exemplar in point.get("exemplars", ()):
                            _fix_ids(exemplar)
    return request


def reference_spans_to_otlp_dict(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Encode finished spans through protobuf and ``MessageToDict`` (the slow reference).

    Args:
        spans: finished SDK spans.

    Returns:
        The ``ExportTraceServiceRequest`` as the Collector's file exporter would write it
        (hex ids).
    """
    message = encode_spans(spans)
    return hex_ids_in_traces(MessageToDict(message, use_integers_for_enums=True))


def reference_metrics_to_otlp_dict(data: MetricsData) -> dict[str, Any]:
    """Encode collected metrics through protobuf and ``MessageToDict`` (the slow reference).

    Args:
        data: what a metric reader collected.

    Returns:
        The ``ExportMetricsServiceRequest`` as the Collector's file exporter would write
        it (hex exemplar ids).
    """
    message = encode_metrics(data)
    return hex_ids_in_metrics(MessageToDict(message, use_integers_for_enums=True))


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def reference_encode_spans_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP/JSON line for ``spans`` by the reference path; see :func:`encode_spans_json`."""
    return _line(reference_spans_to_otlp_dict(spans))


def reference_encode_metrics_json(data: MetricsData) -> bytes:
    """One OTLP/JSON line for ``data`` by the reference path; see :func:`encode_metrics_json`."""
    return _line(reference_metrics_to_otlp_dict(data))


def encode_spans_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP/JSON ``ExportTraceServiceRequest`` line (ending in ``\\n``) for ``spans``.

    Byte for byte :func:`reference_encode_spans_json`, written by the direct encoder when
    it can (it falls back to the reference for values it does not reproduce exactly).

    Args:
        spans: finished SDK spans.

    Returns:
        The UTF-8 line.

    Raises:
        Exception: whatever the reference encoding raises for these spans.

    >>> encode_spans_json([])
    b'{}\\n'
    """
    try:
        return (spans_to_json(spans) + "\n").encode("utf-8")
    except Exception as exc:
        _logger.debug("direct span encoding fell back to the reference: %s", exc)
        return reference_encode_spans_json(spans)


def encode_metrics_json(data: MetricsData) -> bytes:
    """One OTLP/JSON ``ExportMetricsServiceRequest`` line (ending in ``\\n``) for ``data``.

    Byte for byte :func:`reference_encode_metrics_json`, written by the direct encoder
    when it can (it falls back to the reference for values it does not reproduce exactly).

    Args:
        data: what a metric reader collected.

    Returns:
        The UTF-8 line.

    Raises:
        Exception: whatever the reference encoding raises for these metrics.
    """
    try:
        return (metrics_to_json(data) + "\n").encode("utf-8")
    except Exception as exc:
        _logger.debug("direct metrics encoding fell back to the reference: %s", exc)
        return reference_encode_metrics_json(data)
