"""OTLP/JSON file exporters: the embedded default, complete telemetry on disk without a Collector.

Each export call writes one line: one ``ExportTraceServiceRequest`` (spans) or
``ExportMetricsServiceRequest`` (metrics) in exactly the encoding the OpenTelemetry
Collector's file exporter writes (see :mod:`otel_ext.exporters._otlp_json`), so
:func:`otel_ext.exporters.read_otlp_json` reads files from either. Files rotate by size, can be
gzip-compressed, and get their final name atomically (see :mod:`otel_ext.exporters._files` for
what a reader sees while the process runs).

>>> import tempfile, pathlib
>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> exporter = OtlpJsonFileSpanExporter(folder / "traces.jsonl")
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> with provider.get_tracer("doc").start_as_current_span("step"):
...     pass
>>> provider.shutdown()
>>> [p.name for p in folder.iterdir()]
['traces.jsonl']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.view import Aggregation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ext.exporters._files import FileSeries
from otel_ext.exporters._guard import RateLimitedLog
from otel_ext.exporters._otlp_json import encode_metrics_json, encode_spans_json

__all__ = ["OtlpJsonFileMetricExporter", "OtlpJsonFileSpanExporter"]

_log = RateLimitedLog()


class OtlpJsonFileSpanExporter(SpanExporter):
    """Write spans as OTLP/JSON lines (one ``ExportTraceServiceRequest`` per export).

    Never raises from :meth:`export`: a failed write logs (rate-limited) and returns
    ``FAILURE`` so the batch processor counts the spans as dropped.

    Args:
        path: final file name, e.g. ``DIR/traces.jsonl``.
        max_bytes: rotate at this size (``0``: never).
        gzip: compress (the name gets ``.gz``).

    Attributes:
        series: the underlying :class:`~otel_ext.exporters._files.FileSeries` (its ``path`` and
            ``completed`` list tell where data went).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 0, gzip: bool = False
    ) -> None:
        self.series = FileSeries(path, max_bytes=max_bytes, gzip=gzip)

    @property
    def path(self) -> Path:
        """The final file name."""
        return self.series.path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append one request line holding ``spans``."""
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            self.series.write(encode_spans_json(spans))
        except Exception:
            _log.warning("cannot write spans to %s", self.series.path, exc_info=True)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: every export reaches the kernel before it returns."""
        return True

    def shutdown(self) -> None:
        """Give the current file its final name."""
        try:
            self.series.close()
        except Exception:
            _log.warning("cannot finish %s", self.series.path, exc_info=True)


class OtlpJsonFileMetricExporter(MetricExporter):
    """Write metrics as OTLP/JSON lines (one ``ExportMetricsServiceRequest`` per export).

    Args:
        path: final file name, e.g. ``DIR/metrics.jsonl``.
        max_bytes: rotate at this size (``0``: never).
        gzip: compress (the name gets ``.gz``).
        preferred_temporality: as for any SDK metric exporter (default cumulative).
        preferred_aggregation: as for any SDK metric exporter.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = 0,
        gzip: bool = False,
        preferred_temporality: dict[type, AggregationTemporality] | None = None,
        preferred_aggregation: dict[type, Aggregation] | None = None,
    ) -> None:
        super().__init__(
            preferred_temporality=preferred_temporality,
            preferred_aggregation=preferred_aggregation,
        )
        self.series = FileSeries(path, max_bytes=max_bytes, gzip=gzip)

    @property
    def path(self) -> Path:
        """The final file name."""
        return self.series.path

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        """Append one request line holding ``metrics_data``."""
        if not metrics_data.resource_metrics:
            return MetricExportResult.SUCCESS
        try:
            self.series.write(encode_metrics_json(metrics_data))
        except Exception:
            _log.warning("cannot write metrics to %s", self.series.path, exc_info=True)
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered: every export reaches the kernel before it returns."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        """Give the current file its final name."""
        try:
            self.series.close()
        except Exception:
            _log.warning("cannot finish %s", self.series.path, exc_info=True)
