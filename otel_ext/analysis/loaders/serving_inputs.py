"""Serving engines' inputs read again for the passes that need more than the loaded rows.

The loaders turn every file into event rows; two analyses need what those rows leave out:
the vLLM and SGLang request spans with their engines' own attributes
(:mod:`otel_ext.analysis.serving.engine_telemetry`) and otel-ext's ``accel.engine.step`` spans
with their per-request token lists (:mod:`otel_ext.analysis.serving.requests`). The engine's
load phase (or a Dask worker, one job per file) reads them here and hands the passes records,
so that no analysis opens a file. Every file is read through the project's bounded gzip
reader (:func:`otel_ext._gzip.iter_file_bytes`), and a bad file or line raises an
:class:`~otel_ext.errors.InputError` naming the file and the record, as the loaders do.

>>> serving_span_paths([{"path": "a.jsonl", "format": "otlp-traces", "status": "loaded"},
...                     {"path": "b.json", "format": "kineto", "status": "loaded"}])
['a.jsonl']
>>> otlp_trace_paths([{"path": "c.json", "format": "jaeger", "status": "loaded"}])
[]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from otel_ext._gzip import iter_file_bytes
from otel_ext.analysis.loaders.partial import partial_of, whole_lines
from otel_ext.analysis.serving.engine_telemetry import ServingSpan
from otel_ext.analysis.serving.requests import EngineStep, engine_step_order, engine_steps_of_line
from otel_ext.analysis.table import EventTable
from otel_ext.errors import InputError
from otel_ext.semconv.spans import SPAN_ACCEL_ENGINE_STEP

__all__ = [
    "engine_steps_from_otlp",
    "otlp_trace_paths",
    "read_serving_spans",
    "serving_span_paths",
    "serving_table",
]


def serving_span_paths(inputs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The loaded span files (OTLP-JSON traces, Jaeger exports) among ``inputs`` (the
    loader's per-file records): those :func:`read_serving_spans` reads."""
    return [
        str(i["path"])
        for i in inputs
        if i.get("format") in ("otlp-traces", "jaeger") and i.get("status") == "loaded"
    ]


def otlp_trace_paths(inputs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The loaded OTLP-JSON trace files among ``inputs`` (the loader's per-file records):
    those :func:`engine_steps_from_otlp` reads."""
    return [
        str(i["path"])
        for i in inputs
        if i.get("format") == "otlp-traces" and i.get("status") == "loaded"
    ]


def _hex_id(v: Any, width: int) -> str:
    if isinstance(v, int):
        return f"{v:0{width}x}"
    s = str(v or "").strip().lower()
    return s.rjust(width, "0") if s else ""


def _int_id(v: Any) -> int:
    try:
        return int(str(v), 16) if v not in (None, "") else 0
    except ValueError:
        return 0


def _otlp_spans(doc: dict[str, Any]) -> Iterable[ServingSpan]:
    from otel_ext.analysis.loaders.spans import otlp_attrs

    for rs in doc.get("resourceSpans") or []:
        res = otlp_attrs((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or []:
            for sp in ss.get("spans") or []:
                yield ServingSpan(
                    _hex_id(sp.get("traceId"), 32),
                    _int_id(sp.get("spanId")),
                    _int_id(sp.get("parentSpanId")),
                    str(sp.get("name", "")),
                    int(sp.get("startTimeUnixNano", 0)),
                    int(sp.get("endTimeUnixNano", 0)),
                    otlp_attrs(sp.get("attributes")),
                    res,
                )


def _jaeger_spans(doc: dict[str, Any]) -> Iterable[ServingSpan]:
    def tags(items: Any) -> dict[str, Any]:
        return {t["key"]: t.get("value") for t in items or [] if isinstance(t, dict) and "key" in t}

    for tr in doc.get("data") or []:
        procs = tr.get("processes") or {}
        for sp in tr.get("spans") or []:
            parent = 0
            for ref in sp.get("references") or []:
                if ref.get("refType") == "CHILD_OF":
                    parent = _int_id(ref.get("spanID"))
            proc = procs.get(sp.get("processID"), {})
            res = tags(proc.get("tags"))
            if proc.get("serviceName"):
                res["service.name"] = proc["serviceName"]
            start = int(sp.get("startTime", 0)) * 1000
            yield ServingSpan(
                _hex_id(sp.get("traceID"), 32),
                _int_id(sp.get("spanID")),
                parent,
                str(sp.get("operationName", "")),
                start,
                start + int(sp.get("duration", 0)) * 1000,
                tags(sp.get("tags")),
                res,
            )


def _spans_of_text(text: str, path: str) -> list[ServingSpan]:
    """The spans of one file's text: a whole Jaeger export or OTLP-JSON document, else
    OTLP-JSON export requests one a line."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "data" in whole:
        return list(_jaeger_spans(whole))
    if isinstance(whole, dict) and "resourceSpans" in whole:
        return list(_otlp_spans(whole))
    out: list[ServingSpan] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise InputError(
                "neither OTLP-JSON lines nor a Jaeger export", path=path, record=f"line {lineno}"
            ) from None
        if isinstance(doc, dict) and "resourceSpans" in doc:
            out.extend(_otlp_spans(doc))
    return out


def _file_pieces(path: Path) -> Iterator[bytes]:
    """The file's bytes through the bounded gzip reader; a ``.partial`` file of a process that
    did not finish ends early (a gzip stream never closed) and is read up to its last whole
    line, as the loaders read it (which report the cut line)."""
    if partial_of(path) is None:
        return iter_file_bytes(path)
    return whole_lines(iter_file_bytes(path, truncated_ok=True), str(path), [])


def read_serving_spans(paths: Sequence[str | Path]) -> list[ServingSpan]:
    """Every span of OTLP-JSON (one export request a line) and Jaeger JSON files.

    Args:
        paths: the span files (plain or gzip).

    Returns:
        Their spans, file by file in order, format-neutral.

    Raises:
        InputError: an unreadable file, or one that is neither (its path and line named).

    >>> read_serving_spans([])
    []
    """
    out: list[ServingSpan] = []
    for path in paths:
        p = Path(path)
        raw = b"".join(_file_pieces(p))
        text = raw.decode("utf-8", errors="replace").strip()
        if text:
            out.extend(_spans_of_text(text, str(p)))
    return out


def serving_table(paths: Sequence[str | Path]) -> EventTable:
    """The engines' requests in ``paths`` as event-table rows
    (:func:`~otel_ext.analysis.serving.engine_telemetry.serving_rows`).

    Raises:
        InputError: as :func:`read_serving_spans`.
    """
    from otel_ext.analysis.serving.engine_telemetry import serving_rows

    return EventTable.from_rows(serving_rows(read_serving_spans(paths)))


def engine_steps_from_otlp(paths: Sequence[str | Path]) -> list[EngineStep]:
    """The ``accel.engine.step`` spans of OTLP-JSON trace files (one export request a line,
    as our file exporters and the Collector's file exporter write them); other files and
    lines are passed over.

    Each line holding a step span is decoded by
    :func:`~otel_ext.analysis.serving.requests.engine_steps_of_line` (lean structs, the
    other spans' attributes skipped).

    Args:
        paths: the trace files (plain or gzip); paths that are not files are passed over.

    Returns:
        The steps, in :func:`~otel_ext.analysis.serving.requests.engine_step_order`.

    Raises:
        InputError: a step span's lists are malformed, a line is longer than
            ``OTEL_EXT_MAX_RECORD_BYTES`` (file and line named).

    >>> engine_steps_from_otlp(["no/such/file.jsonl"])
    []
    """
    from otel_ext.analysis.loaders.spans import iter_lines
    from otel_ext.config import MAX_RECORD_BYTES, resolve

    needle = SPAN_ACCEL_ENGINE_STEP.encode()
    max_line = resolve(MAX_RECORD_BYTES)
    out: list[EngineStep] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            continue
        try:
            for lineno, line in iter_lines(_file_pieces(p), max_line=max_line):
                if needle in line:
                    out.extend(engine_steps_of_line(line, f"{p}:{lineno}"))
        except InputError as e:
            if e.path is not None:
                raise
            raise InputError(e.message, path=str(p), record=e.record) from None
    out.sort(key=engine_step_order)
    return out
