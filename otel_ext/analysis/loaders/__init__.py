"""Loaders: every input format to one columnar :class:`~otel_ext.analysis.table.EventTable`.

Formats are recognised by content (the file name only for ground truth and derived outputs):
PyTorch profiler (Kineto) traces, OTLP-JSON traces and metrics (our file exporters' and the
Collector's), Jaeger JSON exports. :func:`load_paths` takes files and folders, loads files in
parallel, and reports bad records by file and record (or skips them with ``keep_going``).
"""

from otel_ext.analysis.loaders._common import JsonValue, SkippedRecord, us_to_ns
from otel_ext.analysis.loaders._load import (
    DERIVED_FORMATS,
    FileResult,
    LoadResult,
    ProgressCallback,
    detect_format,
    load_file,
    load_paths,
)
from otel_ext.analysis.loaders.kineto import load_kineto_text
from otel_ext.analysis.loaders.metrics import MetricPoints

__all__ = [
    "DERIVED_FORMATS",
    "FileResult",
    "JsonValue",
    "LoadResult",
    "MetricPoints",
    "ProgressCallback",
    "SkippedRecord",
    "detect_format",
    "load_file",
    "load_kineto_text",
    "load_paths",
    "us_to_ns",
]
