"""The OTLP/JSON format as the project reads it: the one decoder, public.

Every reader of OTLP-JSON files goes through the decoder defined in ``_otlp_decode``:
:func:`otel_ext.exporters.read_spans` / :func:`~otel_ext.exporters.read_metrics` (records)
and the analysis loaders (``otel_ext.analysis.loaders``: columns). This module is where
code outside :mod:`otel_ext.exporters` takes it from, so that both readers decide alike what
a request may hold: typed records (a member of the wrong JSON type is a
:class:`RequestError` naming its JSON path), trace and span ids in hex (the OTLP/JSON
encoding) or base64 (the generic protobuf JSON mapping), ``AnyValue`` values, and a rejected
request re-read one record at a time (:func:`careful_items`).

>>> id_to_hex("AAAAAAAAAAI="), id_to_hex("00F067AA0BA902B7"), span_id_int("AAAAAAAAAAI=")
('0000000000000002', '00f067aa0ba902b7', 2)
>>> any_value({"intValue": "3"})
3
"""

from __future__ import annotations

from otel_ext.exporters._otlp_decode import (
    AnyValue,
    DataPoint,
    KeyValue,
    LeanPoint,
    MetricsRequest,
    RequestError,
    Span,
    TracesRequest,
    any_value,
    careful_items,
    decode_metrics,
    decode_metrics_lean,
    decode_traces,
    id_to_hex,
    raw_attributes,
    span_id_int,
)

__all__ = [
    "AnyValue",
    "DataPoint",
    "KeyValue",
    "LeanPoint",
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
