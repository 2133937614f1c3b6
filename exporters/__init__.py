"""Where telemetry leaves the process: OTLP setup, OTLP-JSON files, Perfetto timelines.

* :func:`configure` — one-call tracer and meter provider setup from code arguments (single
  keywords, or grouped in :class:`OtlpOptions`, :class:`FileOptions`, :class:`ExportOptions`,
  :class:`ActiveSpanOptions`) and the
  standard ``OTEL_*`` variables, with accelerator resource attributes; returns a
  :class:`Telemetry` handle whose ``shutdown()`` flushes within a bounded time.
* :class:`OtlpJsonFileSpanExporter`, :class:`OtlpJsonFileMetricExporter` — OTLP/JSON lines,
  exactly as the Collector's file exporter writes them; rotation, gzip, atomic names.
* :func:`read_otlp_json`, :func:`read_spans`, :func:`read_metrics` — read them back (ours
  or the Collector's).
* :class:`PerfettoTraceExporter`, :func:`otlp_json_to_perfetto` — timelines for the
  Perfetto UI and ``chrome://tracing``.
* :func:`accelerator_attributes`, :class:`AcceleratorResourceDetector` — which host,
  device and rank this process is (the detector is also the ``otel_ext_accelerator``
  resource detector entry point).
* :class:`BoundedBatchSpanProcessor`, :class:`GuardedMetricExporter`,
  :class:`DropCounter` — telemetry that never hurts the workload (bounded memory, counted
  drops exported as ``accel.telemetry.dropped``, fork safety).

The Prometheus exposition server lives in :mod:`otel_ext.exporters.prometheus` and plugs in through
:func:`register_metrics_exporter`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from otel_ext.exporters._batch import BoundedBatchSpanProcessor, GuardedMetricExporter
    from otel_ext.exporters._configure import (
        ActiveSpanOptions,
        ExporterSettings,
        ExportOptions,
        FileOptions,
        OtlpOptions,
        OtlpSettings,
        Telemetry,
        configure,
        register_metrics_exporter,
        register_span_exporter,
    )
    from otel_ext.exporters._file_exporters import (
        OtlpJsonFileMetricExporter,
        OtlpJsonFileSpanExporter,
    )
    from otel_ext.exporters._guard import DropCounter
    from otel_ext.exporters._perfetto import PerfettoTraceExporter, otlp_json_to_perfetto
    from otel_ext.exporters._reader import (
        EventRecord,
        ExemplarRecord,
        LinkRecord,
        MetricPoint,
        SpanRecord,
        read_metrics,
        read_otlp_json,
        read_spans,
    )
    from otel_ext.exporters._resource import AcceleratorResourceDetector, accelerator_attributes

#: public name -> the private module that defines it; importing ``exporters`` (as the
#: analysis' OTLP decoder does) loads none of the SDK until a name is used
_WHERE = {
    "AcceleratorResourceDetector": "_resource",
    "accelerator_attributes": "_resource",
    "BoundedBatchSpanProcessor": "_batch",
    "GuardedMetricExporter": "_batch",
    "DropCounter": "_guard",
    "ActiveSpanOptions": "_configure",
    "ExportOptions": "_configure",
    "ExporterSettings": "_configure",
    "FileOptions": "_configure",
    "OtlpOptions": "_configure",
    "OtlpSettings": "_configure",
    "Telemetry": "_configure",
    "configure": "_configure",
    "register_metrics_exporter": "_configure",
    "register_span_exporter": "_configure",
    "OtlpJsonFileMetricExporter": "_file_exporters",
    "OtlpJsonFileSpanExporter": "_file_exporters",
    "PerfettoTraceExporter": "_perfetto",
    "otlp_json_to_perfetto": "_perfetto",
    "EventRecord": "_reader",
    "ExemplarRecord": "_reader",
    "LinkRecord": "_reader",
    "MetricPoint": "_reader",
    "SpanRecord": "_reader",
    "read_metrics": "_reader",
    "read_otlp_json": "_reader",
    "read_spans": "_reader",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_ext.exporters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"otel_ext.exporters.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AcceleratorResourceDetector",
    "ActiveSpanOptions",
    "BoundedBatchSpanProcessor",
    "DropCounter",
    "EventRecord",
    "ExemplarRecord",
    "ExportOptions",
    "ExporterSettings",
    "FileOptions",
    "GuardedMetricExporter",
    "LinkRecord",
    "MetricPoint",
    "OtlpJsonFileMetricExporter",
    "OtlpJsonFileSpanExporter",
    "OtlpOptions",
    "OtlpSettings",
    "PerfettoTraceExporter",
    "SpanRecord",
    "Telemetry",
    "accelerator_attributes",
    "configure",
    "otlp_json_to_perfetto",
    "read_metrics",
    "read_otlp_json",
    "read_spans",
    "register_metrics_exporter",
    "register_span_exporter",
]
