"""Read OTLP/JSON files (ours or the Collector's) back: requests, flat spans, flat points.

:func:`read_otlp_json` yields each line's request dict; :func:`read_spans` and
:func:`read_metrics` flatten them into one record per span or data point with the
resource and scope folded in. Inputs may be plain or gzip, a single file, a rotated series
or a folder. Trace and span ids come back as lowercase hex whether the file holds hex (the
Collector, us) or base64 (the generic protobuf JSON mapping): the records and ids are decoded by the
project's one OTLP-JSON decoder (:mod:`otel_ext.exporters.otlp_format`), the one the analysis
loaders use, and the files through the project's one bounded gzip reader
(:mod:`otel_ext._gzip`, gzip bombs refused). Malformed input raises
:class:`~otel_ext.errors.InputError` naming the file, the line and the problem.

Which files a path means:

* a folder: every ``*.jsonl``, ``*.jsonl.gz``, ``*.json`` and ``*.json.gz`` in it, sorted
  by name (``*.partial`` files only with ``include_partial=True``; Perfetto timelines,
  ``*.perfetto.json``, never);
* a file ``DIR/traces.jsonl``: its rotated siblings (``traces.N.jsonl``, ours, and
  ``traces-TIMESTAMP.jsonl``, the Collector's) then the file itself; the file may be
  missing while the writing process still runs, and then only the siblings are read.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> line = ('{"resourceSpans":[{"scopeSpans":[{"scope":{"name":"s"},"spans":[{'
...         '"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",'
...         '"name":"step","kind":1,"startTimeUnixNano":"100","endTimeUnixNano":"250",'
...         '"attributes":[{"key":"accel.rank","value":{"intValue":"3"}}]}]}]}]}')
>>> _ = (folder / "traces.jsonl").write_text(line + "\\n")
>>> [(s.name, s.end_ns - s.start_ns, s.attributes) for s in read_spans(folder)]
[('step', 150, {'accel.rank': 3})]
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from otel_ext._gzip import iter_file_bytes
from otel_ext.errors import InputError
from otel_ext.exporters._files import split_name
from otel_ext.exporters._otlp_decode import (
    MetricsRequest,
    RequestError,
    TracesRequest,
    decode_metrics,
    decode_traces,
    id_to_hex,
)

__all__ = [
    "EventRecord",
    "ExemplarRecord",
    "LinkRecord",
    "MetricPoint",
    "SpanRecord",
    "any_value",
    "attributes",
    "otlp_json_files",
    "read_metrics",
    "read_otlp_json",
    "read_spans",
]

AttributeValue = Any
_UNSET: Any = msgspec.UNSET
_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
_SPAN_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_TEMPORALITIES = {
    "AGGREGATION_TEMPORALITY_UNSPECIFIED": 0,
    "AGGREGATION_TEMPORALITY_DELTA": 1,
    "AGGREGATION_TEMPORALITY_CUMULATIVE": 2,
}


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A span event: name, time and attributes."""

    name: str
    time_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LinkRecord:
    """A span link to another span context."""

    trace_id: str
    span_id: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span with its resource and scope folded in.

    ``kind`` and ``status_code`` are the OTLP enum numbers (kind: 1 internal, 2 server,
    3 client, 4 producer, 5 consumer; status: 0 unset, 1 ok, 2 error). ``parent_span_id``
    is ``None`` for a root span.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    resource: dict[str, AttributeValue]
    scope_name: str
    scope_version: str
    events: tuple[EventRecord, ...] = ()
    links: tuple[LinkRecord, ...] = ()
    status_code: int = 0
    status_message: str = ""
    trace_state: str = ""
    flags: int = 0


@dataclass(frozen=True, slots=True)
class ExemplarRecord:
    """An exemplar: a measurement kept with the trace context it was recorded in."""

    time_ns: int
    value: float | int
    trace_id: str
    span_id: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One metric data point with its metric, resource and scope folded in.

    ``kind`` is ``gauge``, ``sum``, ``histogram``, ``exponential_histogram`` or
    ``summary``. Number points (gauge, sum) carry ``value``; histograms carry ``count``,
    ``sum``, ``bucket_counts`` and ``explicit_bounds`` (exponential ones ``scale``,
    ``zero_count``, ``positive`` and ``negative`` as ``(offset, counts)``); summaries
    ``quantiles`` as ``(quantile, value)`` pairs.
    """

    name: str
    kind: str
    time_ns: int
    attributes: dict[str, AttributeValue]
    resource: dict[str, AttributeValue]
    scope_name: str
    scope_version: str = ""
    unit: str = ""
    description: str = ""
    start_ns: int | None = None
    value: float | int | None = None
    is_monotonic: bool | None = None
    temporality: int = 0
    count: int | None = None
    sum: float | None = None
    min: float | None = None
    max: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    scale: int | None = None
    zero_count: int | None = None
    positive: tuple[int, tuple[int, ...]] | None = None
    negative: tuple[int, tuple[int, ...]] | None = None
    quantiles: tuple[tuple[float, float], ...] = ()
    exemplars: tuple[ExemplarRecord, ...] = ()


# -- files ---------------------------------------------------------------------------------
def _is_data_file(name: str, include_partial: bool) -> bool:
    if ".perfetto." in name:
        return False
    if name.endswith(".partial"):
        return include_partial
    return name.endswith(_SUFFIXES)


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def otlp_json_files(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    include_partial: bool = False,
) -> list[Path]:
    """The files a path (or several) stands for, in reading order (see the module docstring).

    Raises:
        InputError: a path names nothing readable.
    """
    single = isinstance(path, (str, os.PathLike))
    paths = [Path(path)] if single else [Path(p) for p in path]  # type: ignore[arg-type,union-attr]
    files: list[Path] = []
    for item in paths:
        if item.is_dir():
            found = [
                p for p in item.iterdir() if p.is_file() and _is_data_file(p.name, include_partial)
            ]
            files.extend(sorted(found, key=_natural_key))
            continue
        stem, ext = split_name(item.name)
        pattern = re.compile(re.escape(stem) + r"(\.\d+|-[0-9T:.\-]+)" + re.escape(ext) + "$")
        siblings: list[Path] = []
        if item.parent.is_dir():
            siblings = [p for p in item.parent.iterdir() if pattern.match(p.name) and p != item]
            if include_partial:
                siblings += [
                    p
                    for p in item.parent.iterdir()
                    if p.name.startswith(item.name + ".") and p.name.endswith(".partial")
                ]
        if not siblings and not item.is_file():
            raise InputError("no such file or folder", path=str(item))
        files.extend(sorted(siblings, key=_natural_key))
        if item.is_file():
            files.append(item)
    unique: dict[Path, None] = {}
    for file in files:
        unique.setdefault(file, None)
    return list(unique)


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` of every line, the file read through the project's bounded gzip
    reader (:func:`otel_ext._gzip.iter_file_bytes`: members concatenated, gzip bombs
    refused); a gzip stream without its end (a file still being written) ends quietly."""
    number = 0
    parts: list[bytes] = []
    try:
        for piece in iter_file_bytes(path, truncated_ok=True):
            start = 0
            while (nl := piece.find(b"\n", start)) >= 0:
                number += 1
                if parts:
                    parts.append(piece[start:nl])
                    line = b"".join(parts)
                    parts.clear()
                else:
                    line = piece[start:nl]
                yield number, line
                start = nl + 1
            if start < len(piece):
                parts.append(piece[start:])
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from exc
    rest = b"".join(parts)
    if rest.strip():
        yield number + 1, rest


def _with_last(lines: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes, bool]]:
    previous: tuple[int, bytes] | None = None
    for item in lines:
        if previous is not None:
            yield previous[0], previous[1], False
        previous = item
    if previous is not None:
        yield previous[0], previous[1], True


def _raw_requests(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], include_partial: bool
) -> Iterator[tuple[Path, int, bytes, bool]]:
    """``(file, line number, line, tolerant)`` of every non-blank line; ``tolerant`` marks the
    last line of a ``*.partial`` file, which may be cut short by the writer."""
    for file in otlp_json_files(path, include_partial=include_partial):
        partial = file.name.endswith(".partial")
        for number, raw, is_last in _with_last(_lines(file)):
            if raw.strip():
                yield file, number, raw, partial and is_last


def _not_a_request(file: Path, number: int) -> InputError:
    return InputError(
        "not an OTLP request (no resourceSpans, resourceMetrics or resourceLogs)",
        path=str(file),
        record=f"line {number}",
    )


def _requests(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], include_partial: bool
) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    for file, number, raw, tolerant in _raw_requests(path, include_partial):
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            if tolerant:
                continue
            raise InputError(f"not JSON: {exc}", path=str(file), record=f"line {number}") from exc
        if not isinstance(obj, dict) or not (
            "resourceSpans" in obj or "resourceMetrics" in obj or "resourceLogs" in obj
        ):
            raise _not_a_request(file, number)
        yield file, number, obj


def read_otlp_json(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    include_partial: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield every OTLP/JSON request (trace, metrics or logs) in ``path``, line by line.

    Args:
        path: a file, a rotated series (give the final name) or a folder, or several.
        include_partial: also read ``*.partial`` files still being written (an incomplete
            last line there is skipped, not an error).

    Yields:
        Each line's request dict, as written (ids untouched).

    Raises:
        InputError: a line is not JSON or not an OTLP request (names file and line).
    """
    for _file, _number, obj in _requests(path, include_partial):
        yield obj


# -- values --------------------------------------------------------------------------------
def any_value(value: Mapping[str, Any]) -> AttributeValue:
    """Decode an OTLP ``AnyValue`` dict into a Python value (arrays become tuples).

    >>> any_value({"intValue": "7"}), any_value({"arrayValue": {"values": [{"boolValue": True}]}})
    (7, (True,))
    """
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(any_value(v) for v in value["arrayValue"].get("values", ()))
    if "kvlistValue" in value:
        return attributes(value["kvlistValue"].get("values", ()))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if not value:
        return None
    raise ValueError(f"unknown value type {sorted(value)}")


def attributes(items: Iterable[Mapping[str, Any]]) -> dict[str, AttributeValue]:
    """Decode a list of OTLP ``KeyValue`` dicts into a dict."""
    return {item["key"]: any_value(item.get("value", {})) for item in items}


def _enum(value: Any, names: Mapping[str, int]) -> int:
    if isinstance(value, str) and not value.isdigit():
        return names[value]
    return int(value)


def _int(value: Any, default: int = 0) -> int:
    return default if value is None else int(value)


def _value(v: Any) -> AttributeValue:
    """An :class:`~otel_ext.exporters._otlp_decode.AnyValue` record as :func:`any_value` decodes it."""
    if v is None:
        return None
    return any_value({k: getattr(v, k) for k in v.__struct_fields__ if getattr(v, k) is not _UNSET})


def _kv(items: Iterable[Any]) -> dict[str, AttributeValue]:
    return {kv.key: _value(kv.value) for kv in items}


def _required_id(value: str, what: str) -> str:
    if not value:
        raise KeyError(what)
    return id_to_hex(value)


def _spans_of(request: TracesRequest) -> Iterator[SpanRecord]:
    for resource_spans in request.resourceSpans:
        res = resource_spans.resource
        resource = _kv(res.attributes) if res is not None else {}
        for scope_spans in resource_spans.scopeSpans or resource_spans.instrumentationLibrarySpans:
            scope = scope_spans.scope
            for span in scope_spans.spans:
                status = span.status
                parent = span.parentSpanId or None
                yield SpanRecord(
                    trace_id=_required_id(span.traceId, "traceId"),
                    span_id=_required_id(span.spanId, "spanId"),
                    parent_span_id=id_to_hex(parent) if parent else None,
                    name=span.name if isinstance(span.name, str) else "",
                    kind=_enum(span.kind, _SPAN_KINDS),
                    start_ns=_int(span.startTimeUnixNano),
                    end_ns=_int(span.endTimeUnixNano),
                    attributes=_kv(span.attributes),
                    resource=resource,
                    scope_name=scope.name if scope is not None else "",
                    scope_version=scope.version if scope is not None else "",
                    events=tuple(
                        EventRecord(
                            e.get("name", ""),
                            _int(e.get("timeUnixNano")),
                            attributes(e.get("attributes", ())),
                        )
                        for e in span.events
                    ),
                    links=tuple(
                        LinkRecord(
                            id_to_hex(link["traceId"]),
                            id_to_hex(link["spanId"]),
                            attributes(link.get("attributes", ())),
                        )
                        for link in span.links
                    ),
                    status_code=_enum(status.get("code", 0), _STATUS_CODES),
                    status_message=status.get("message", ""),
                    trace_state=span.traceState,
                    flags=_int(span.flags),
                )


def _number(point: Mapping[str, Any]) -> float | int | None:
    if "asInt" in point:
        return int(point["asInt"])
    if "asDouble" in point:
        return float(point["asDouble"])
    return None


def _exemplars(point: Mapping[str, Any]) -> tuple[ExemplarRecord, ...]:
    out = []
    for e in point.get("exemplars", ()):
        value = _number(e)
        out.append(
            ExemplarRecord(
                time_ns=_int(e.get("timeUnixNano")),
                value=0 if value is None else value,
                trace_id=id_to_hex(e.get("traceId", "")),
                span_id=id_to_hex(e.get("spanId", "")),
                attributes=attributes(e.get("filteredAttributes", ())),
            )
        )
    return tuple(out)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _points_of(request: MetricsRequest) -> Iterator[MetricPoint]:
    for resource_metrics in request.resourceMetrics:
        res = resource_metrics.resource
        resource = _kv(res.attributes) if res is not None else {}
        for scope_metrics in resource_metrics.scopeMetrics:
            scope = scope_metrics.scope
            for metric in scope_metrics.metrics:
                common: dict[str, Any] = {
                    "name": metric.name,
                    "unit": metric.unit,
                    "description": metric.description,
                    "resource": resource,
                    "scope_name": scope.name if scope is not None else "",
                    "scope_version": scope.version if scope is not None else "",
                }
                for key, kind in (
                    ("gauge", "gauge"),
                    ("sum", "sum"),
                    ("histogram", "histogram"),
                    ("exponentialHistogram", "exponential_histogram"),
                    ("summary", "summary"),
                ):
                    data = getattr(metric, key)
                    if data is None:
                        continue
                    temporality = _enum(data.aggregationTemporality, _TEMPORALITIES)
                    for p in data.dataPoints:
                        start = p.startTimeUnixNano
                        extra: dict[str, Any] = {}
                        if kind in ("gauge", "sum"):
                            extra["value"] = (
                                int(p.asInt) if p.asInt is not None
                                else None if p.asDouble is None else float(p.asDouble)
                            )  # fmt: skip
                        if kind == "sum":
                            extra["is_monotonic"] = bool(data.isMonotonic)
                        if kind in ("histogram", "exponential_histogram", "summary"):
                            extra["count"] = _int(p.count)
                            extra["sum"] = _opt_float(p.sum)
                        if kind in ("histogram", "exponential_histogram"):
                            extra["min"] = _opt_float(p.min)
                            extra["max"] = _opt_float(p.max)
                        if kind == "histogram":
                            extra["bucket_counts"] = tuple(int(c) for c in p.bucketCounts)
                            extra["explicit_bounds"] = tuple(float(b) for b in p.explicitBounds)
                        if kind == "exponential_histogram":
                            extra["scale"] = _int(p.scale)
                            extra["zero_count"] = _int(p.zeroCount)
                            for side in ("positive", "negative"):
                                buckets = getattr(p, side) or {}
                                extra[side] = (
                                    _int(buckets.get("offset")),
                                    tuple(int(c) for c in buckets.get("bucketCounts", ())),
                                )
                        if kind == "summary":
                            extra["quantiles"] = tuple(
                                (float(q.get("quantile", 0.0)), float(q.get("value", 0.0)))
                                for q in p.quantileValues
                            )
                        yield MetricPoint(
                            kind=kind,
                            time_ns=_int(p.timeUnixNano),
                            start_ns=None if start is None else int(start),
                            attributes=_kv(p.attributes),
                            temporality=temporality,
                            exemplars=_exemplars({"exemplars": p.exemplars}),
                            **common,
                            **extra,
                        )


def _flatten(path: Any, include_partial: bool, key: str, flatten: Any) -> Iterator[Any]:
    """Every record of ``key`` requests, decoded by the project's one OTLP-JSON decoder."""
    decode = decode_traces if key == "resourceSpans" else decode_metrics
    for file, number, raw, tolerant in _raw_requests(path, include_partial):
        try:
            request = decode(raw)
        except RequestError as exc:
            if tolerant:
                continue
            if exc.where:
                problem = f"malformed {key}: {exc}"
            elif str(exc).startswith("malformed JSON"):
                problem = f"not JSON: {exc}"
            else:
                problem = str(exc)
            raise InputError(problem, path=str(file), record=f"line {number}") from exc
        if key.encode() not in raw:
            if not any(
                k in raw for k in (b'"resourceSpans"', b'"resourceMetrics"', b'"resourceLogs"')
            ):
                raise _not_a_request(file, number)
            continue
        try:
            yield from flatten(request)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise InputError(
                f"malformed {key}: {problem}", path=str(file), record=f"line {number}"
            ) from exc


def read_spans(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    include_partial: bool = False,
) -> Iterator[SpanRecord]:
    """Yield every span in ``path`` as a flat :class:`SpanRecord`.

    Args:
        path: as for :func:`read_otlp_json`.
        include_partial: as for :func:`read_otlp_json`.

    Raises:
        InputError: malformed input (names file, request and problem).
    """
    return _flatten(path, include_partial, "resourceSpans", _spans_of)


def read_metrics(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    include_partial: bool = False,
) -> Iterator[MetricPoint]:
    """Yield every metric data point in ``path`` as a flat :class:`MetricPoint`.

    Args:
        path: as for :func:`read_otlp_json`.
        include_partial: as for :func:`read_otlp_json`.

    Raises:
        InputError: malformed input (names file, request and problem).

    >>> import tempfile, pathlib
    >>> file = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
    >>> _ = file.write_text('{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"accel.power",'
    ...     '"gauge":{"dataPoints":[{"timeUnixNano":"5","asDouble":312.5}]}}]}]}]}\\n')
    >>> [(p.name, p.kind, p.value) for p in read_metrics(file)]
    [('accel.power', 'gauge', 312.5)]
    """
    return _flatten(path, include_partial, "resourceMetrics", _points_of)
