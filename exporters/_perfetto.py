"""Perfetto / ``chrome://tracing`` timelines, streamed to disk from spans and metric points.

The output is Chrome trace-event JSON (the "JSON object format"), which the Perfetto UI
(ui.perfetto.dev) and ``chrome://tracing`` both open:

* one **process track** per device (``accel.device.id``), or per host (``accel.host.id``)
  for spans without a device and for link spans;
* one **thread track** per stream or queue (``accel.kernel.stream``), per link
  (``accel.link.id``) and per rank (``accel.rank``), in that order of preference; spans
  that overlap without nesting on one track are spread over extra lanes
  (``stream 7 #2``) so that every track nests properly;
* spans become complete (``X``) events, metric points counter (``C``) events;
* **flows** (``s``/``f`` pairs) join a kernel launch to its kernel (same
  ``accel.kernel.correlation_id`` on the same host and rank) and chain the participants
  of one collective (same ``accel.collective.id``) in start order. A flow is written
  only when both ends have been seen, so every flow in the file is paired.

Timestamps are microseconds with three decimals (exact nanoseconds) relative to a time
origin, and ``displayTimeUnit`` is ``ns``. The origin is the whole hour before the first
timestamp (minus one hour for the live exporter, whose first span need not be the earliest);
it is written as ``otherData.time_origin_unix_ns``, so absolute time is
``origin + ts * 1000`` ns.

Memory does not grow with the trace: events are written as they come; what is kept is one
entry per track, a bounded window of recent intervals per lane (for the nesting check) and
a bounded table of flow ends waiting for their partner (oldest dropped first).

While the exporter runs the trace is written to ``NAME.<pid>.partial``; it gets its final
name, complete with its closing brackets, when the exporter shuts down.

>>> import json, tempfile, pathlib
>>> from otel_ext.exporters._perfetto import PerfettoWriter, SpanView
>>> out = pathlib.Path(tempfile.mkdtemp()) / "trace.json"
>>> writer = PerfettoWriter(out, time_origin_ns=0)
>>> writer.add_span(SpanView("accel.kernel", 1_000, 2_500, {"accel.device.id": "h0/chip0",
...     "accel.kernel.stream": 7}, "t1", "s1", None))
>>> writer.close()
>>> [(e["ph"], e.get("ts")) for e in json.loads(out.read_text())["traceEvents"]]
[('M', None), ('M', None), ('M', None), ('M', None), ('X', 1.0)]
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ext.exporters._files import FileSeries
from otel_ext.exporters._guard import RateLimitedLog
from otel_ext.exporters._reader import (
    MetricPoint,
    SpanRecord,
    otlp_json_files,
    read_metrics,
    read_spans,
)
from otel_ext.semconv.attributes import (
    ACCEL_COLLECTIVE_ID,
    ACCEL_COLLECTIVE_OP,
    ACCEL_DEVICE_ID,
    ACCEL_HOST_ID,
    ACCEL_KERNEL_CORRELATION_ID,
    ACCEL_KERNEL_NAME,
    ACCEL_KERNEL_STREAM,
    ACCEL_LAYER_NAME,
    ACCEL_LINK_ID,
    ACCEL_RANK,
)

__all__ = ["PerfettoTraceExporter", "PerfettoWriter", "SpanView", "otlp_json_to_perfetto"]

_log = RateLimitedLog()
_HOUR_NS = 3_600_000_000_000
_FLUSH_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class SpanView:
    """What the timeline needs of a span (attributes merged over its resource's)."""

    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    trace_id: str
    span_id: str
    parent_span_id: str | None


def _us(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _json_value(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


class _Lane:
    __slots__ = ("intervals", "max_dur", "tid", "window")

    def __init__(self, tid: int, window: int):
        self.tid = tid
        self.intervals: list[tuple[int, int]] = []
        self.max_dur = 0
        self.window = window

    def fits(self, start: int, end: int) -> bool:
        index = bisect.bisect_left(self.intervals, (end, end))
        while index > 0:
            index -= 1
            s, e = self.intervals[index]
            if s < start - self.max_dur:
                break
            disjoint = e <= start or s >= end
            nested = (s <= start and end <= e) or (start <= s and e <= end)
            if not (disjoint or nested):
                return False
        return True

    def add(self, start: int, end: int) -> None:
        bisect.insort(self.intervals, (start, end))
        self.max_dur = max(self.max_dur, end - start)
        if len(self.intervals) > self.window:
            del self.intervals[: len(self.intervals) - self.window]


class PerfettoWriter:
    """Stream spans and counter samples into one Chrome trace-event JSON file.

    Thread-safe. See the module docstring for the layout.

    Args:
        path: the final file name.
        time_origin_ns: Unix ns that ``ts = 0`` stands for; ``None`` picks it from the
            first timestamp (see the module docstring).
        origin_margin_ns: how far before the first timestamp the picked origin must lie.
        overwrite: replace an existing file at ``path`` on close (else the next numbered
            name is used, as for the OTLP-JSON files).
        lane_window: recent intervals kept per lane for the nesting check.
        max_pending_flows: flow ends kept while waiting for their partner.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        time_origin_ns: int | None = None,
        origin_margin_ns: int = _HOUR_NS,
        overwrite: bool = False,
        lane_window: int = 4096,
        max_pending_flows: int = 65536,
    ):
        self._series = FileSeries(path, overwrite=overwrite)
        self._fixed_origin = time_origin_ns
        self._margin = origin_margin_ns
        self._lane_window = lane_window
        self._max_pending = max_pending_flows
        self._lock = threading.Lock()
        self._reset()

    @property
    def path(self) -> Path:
        """The final file name."""
        return self._series.path

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._origin = self._fixed_origin
        self._started = False
        self._closed = False
        self._buffer: list[str] = []
        self._buffered = 0
        self._processes: dict[str, int] = {}
        self._tracks: dict[tuple[int, str], list[_Lane]] = {}
        self._next_tid = 1
        self._launches: OrderedDict[tuple[Any, ...], tuple[int, int, int, bool]] = OrderedDict()
        self._collectives: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        self._next_flow = 1
        self.events_written = 0

    # -- output --------------------------------------------------------------------------
    def _emit(self, text: str) -> None:
        if not self._started:
            self._started = True
            self._buffer.append('{"displayTimeUnit":"ns","traceEvents":[\n')
        else:
            self._buffer.append(",\n")
        self._buffer.append(text)
        self._buffered += len(text) + 2
        self.events_written += 1

    def _flush(self) -> None:
        if self._buffer:
            data = "".join(self._buffer).encode("utf-8")
            self._buffer = []
            self._buffered = 0
            self._series.write(data)

    def _ts(self, ns: int) -> str:
        if self._origin is None:
            self._origin = ns - ns % _HOUR_NS - (_HOUR_NS if self._margin else 0)
            self._origin -= max(0, self._margin - _HOUR_NS)
        return _us(ns - self._origin)

    # -- tracks --------------------------------------------------------------------------
    def _process(self, label: str) -> int:
        pid = self._processes.get(label)
        if pid is None:
            pid = len(self._processes) + 1
            self._processes[label] = pid
            name = json.dumps(label)
            self._emit(
                f'{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{name}}}}}'
            )
            self._emit(
                f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}'
            )
        return pid

    def _lane(self, pid: int, thread: str, start: int, end: int) -> int:
        lanes = self._tracks.setdefault((pid, thread), [])
        for lane in lanes:
            if lane.fits(start, end):
                lane.add(start, end)
                return lane.tid
        tid = self._next_tid
        self._next_tid += 1
        lane = _Lane(tid, self._lane_window)
        lane.add(start, end)
        lanes.append(lane)
        label = thread if len(lanes) == 1 else f"{thread} #{len(lanes)}"
        name = json.dumps(label)
        self._emit(
            f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{name}}}}}'
        )
        self._emit(
            f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}'
        )
        return tid

    @staticmethod
    def _process_label(attrs: Mapping[str, Any], *, link: bool) -> str:
        host = attrs.get(ACCEL_HOST_ID)
        device = attrs.get(ACCEL_DEVICE_ID)
        if link:
            link_id = str(attrs.get(ACCEL_LINK_ID))
            return str(host) if host is not None else link_id.split("/", 1)[0]
        if device is not None:
            return str(device)
        if host is not None:
            return str(host)
        return "process"

    # -- spans ---------------------------------------------------------------------------
    def add_span(self, span: SpanView) -> None:
        """Write ``span`` as an ``X`` event, and any flow it completes. Never raises."""
        try:
            with self._lock:
                self._check_fork()
                if self._closed:
                    return
                self._add_span(span)
                if self._buffered >= _FLUSH_BYTES:
                    self._flush()
        except Exception:
            _log.warning("cannot write span to %s", self.path, exc_info=True)

    def _add_span(self, span: SpanView) -> None:
        attrs = span.attributes
        stream = attrs.get(ACCEL_KERNEL_STREAM)
        link = attrs.get(ACCEL_LINK_ID)
        rank = attrs.get(ACCEL_RANK)
        on_link = stream is None and link is not None
        pid = self._process(self._process_label(attrs, link=on_link))
        if stream is not None:
            thread = f"stream {stream}"
        elif link is not None:
            thread = f"link {link}"
        elif rank is not None:
            thread = f"rank {rank}"
        else:
            thread = "spans"
        start, end = span.start_ns, max(span.end_ns, span.start_ns)
        tid = self._lane(pid, thread, start, end)
        label = (
            attrs.get(ACCEL_KERNEL_NAME)
            or attrs.get(ACCEL_LAYER_NAME)
            or attrs.get(ACCEL_COLLECTIVE_OP)
            or span.name
        )
        args = {k: _json_value(v) for k, v in attrs.items()}
        args["trace_id"] = span.trace_id
        args["span_id"] = span.span_id
        if span.parent_span_id:
            args["parent_span_id"] = span.parent_span_id
        self._emit(
            f'{{"ph":"X","name":{json.dumps(str(label))},"cat":{json.dumps(span.name)},'
            f'"pid":{pid},"tid":{tid},"ts":{self._ts(start)},"dur":{_us(end - start)},'
            f'"args":{json.dumps(args, default=str)}}}'
        )
        correlation = attrs.get(ACCEL_KERNEL_CORRELATION_ID)
        if correlation is not None:
            host = attrs.get(ACCEL_HOST_ID)
            key = (host, rank, correlation)
            other = self._launches.pop(key, None)
            if other is None:
                self._remember(self._launches, key, (pid, tid, start, stream is not None))
            else:
                mine = (pid, tid, start, stream is not None)
                # The launch is the end not on a stream; else the earlier one.
                if other[3] != mine[3]:
                    source, sink = (other, mine) if mine[3] else (mine, other)
                else:
                    source, sink = (other, mine) if other[2] <= mine[2] else (mine, other)
                self._flow("launch", (source[0], source[1], source[2]), (sink[0], sink[1], sink[2]))
        collective = attrs.get(ACCEL_COLLECTIVE_ID)
        if collective is not None:
            key2 = str(collective)
            previous = self._collectives.pop(key2, None)
            here = (pid, tid, start)
            if previous is not None:
                first, second = (previous, here) if previous[2] <= start else (here, previous)
                self._flow("collective", first, second)
            self._remember(self._collectives, key2, here)

    def _remember(self, table: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        table[key] = value
        while len(table) > self._max_pending:
            table.popitem(last=False)

    def _flow(self, name: str, source: tuple[int, int, int], sink: tuple[int, int, int]) -> None:
        flow = self._next_flow
        self._next_flow += 1
        self._emit(
            f'{{"ph":"s","id":{flow},"name":"{name}","cat":"flow","pid":{source[0]},'
            f'"tid":{source[1]},"ts":{self._ts(source[2])}}}'
        )
        self._emit(
            f'{{"ph":"f","bp":"e","id":{flow},"name":"{name}","cat":"flow","pid":{sink[0]},'
            f'"tid":{sink[1]},"ts":{self._ts(sink[2])}}}'
        )

    # -- counters ------------------------------------------------------------------------
    def add_point(
        self, name: str, time_ns: int, value: float | int, attributes: Mapping[str, Any]
    ) -> None:
        """Write one counter sample on the process track of its device or host. Never raises."""
        try:
            with self._lock:
                self._check_fork()
                if self._closed:
                    return
                pid = self._process(self._process_label(attributes, link=False))
                series = ",".join(
                    f"{k}={v}"
                    for k, v in sorted(attributes.items())
                    if k not in (ACCEL_HOST_ID, ACCEL_DEVICE_ID)
                )
                args = json.dumps({series or "value": value})
                self._emit(
                    f'{{"ph":"C","name":{json.dumps(name)},"pid":{pid},"tid":0,"ts":{self._ts(time_ns)},"args":{args}}}'
                )
                if self._buffered >= _FLUSH_BYTES:
                    self._flush()
        except Exception:
            _log.warning("cannot write counter to %s", self.path, exc_info=True)

    # -- lifecycle -----------------------------------------------------------------------
    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def flush(self) -> None:
        """Hand buffered events to the partial file."""
        with self._lock:
            self._check_fork()
            self._flush()

    def close(self) -> None:
        """Finish the JSON document and give the file its final name. Idempotent."""
        with self._lock:
            self._check_fork()
            if self._closed:
                return
            self._closed = True
            if not self._started:
                self._buffer.append('{"displayTimeUnit":"ns","traceEvents":[')
            origin = json.dumps(str(self._origin if self._origin is not None else 0))
            self._buffer.append(
                f'\n],"otherData":{{"time_origin_unix_ns":{origin},"generator":"otel-ext"}}}}\n'
            )
            self._flush()
            self._series.close()


def _span_view(span: ReadableSpan) -> SpanView:
    attrs: dict[str, Any] = dict(span.resource.attributes) if span.resource else {}
    attrs.update(span.attributes or {})
    context = span.context
    parent = span.parent
    return SpanView(
        span.name,
        span.start_time or 0,
        span.end_time or span.start_time or 0,
        attrs,
        format(context.trace_id, "032x") if context else "",
        format(context.span_id, "016x") if context else "",
        format(parent.span_id, "016x") if parent else None,
    )


class _Shared:
    def __init__(self, writer: PerfettoWriter):
        self.writer = writer
        self.users = 0
        self.lock = threading.Lock()

    def attach(self) -> None:
        with self.lock:
            self.users += 1

    def detach(self) -> None:
        with self.lock:
            self.users -= 1
            last = self.users <= 0
        if last:
            self.writer.close()


class PerfettoTraceExporter(SpanExporter):
    """A span exporter that streams a Perfetto / ``chrome://tracing`` timeline to ``path``.

    :meth:`metric_exporter` gives a metric exporter writing counter tracks into the same
    file; the file is finished when every exporter sharing it has shut down. Never raises
    from :meth:`export`.

    Args:
        path: the final file name, e.g. ``DIR/trace.perfetto.json``.
        time_origin_ns: see :class:`PerfettoWriter`.
        overwrite: see :class:`PerfettoWriter`.

    >>> import json, tempfile, pathlib
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "trace.json"
    >>> provider = TracerProvider()
    >>> provider.add_span_processor(SimpleSpanProcessor(PerfettoTraceExporter(out)))
    >>> with provider.get_tracer("doc").start_as_current_span("step", attributes={"accel.rank": 0}):
    ...     pass
    >>> provider.shutdown()
    >>> sorted({e["ph"] for e in json.loads(out.read_text())["traceEvents"]})
    ['M', 'X']
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        time_origin_ns: int | None = None,
        overwrite: bool = False,
    ) -> None:
        self._shared = _Shared(
            PerfettoWriter(path, time_origin_ns=time_origin_ns, overwrite=overwrite)
        )
        self._shared.attach()
        self._shut = False

    @property
    def writer(self) -> PerfettoWriter:
        """The underlying writer."""
        return self._shared.writer

    @property
    def path(self) -> Path:
        """The final file name."""
        return self._shared.writer.path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` (and the flows they complete)."""
        try:
            for span in spans:
                self.writer.add_span(_span_view(span))
            self.writer.flush()
        except Exception:
            _log.warning("cannot write spans to %s", self.path, exc_info=True)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def metric_exporter(self) -> MetricExporter:
        """A metric exporter writing counter tracks into this exporter's file."""
        return _PerfettoMetricExporter(self._shared)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Hand buffered events to the partial file."""
        try:
            self.writer.flush()
        except Exception:
            return False
        return True

    def shutdown(self) -> None:
        """Finish the file (once every exporter sharing it has shut down)."""
        if not self._shut:
            self._shut = True
            try:
                self._shared.detach()
            except Exception:
                _log.warning("cannot finish %s", self.path, exc_info=True)


class _PerfettoMetricExporter(MetricExporter):
    def __init__(self, shared: _Shared):
        super().__init__()
        self._shared = shared
        self._shared.attach()
        self._shut = False

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        writer = self._shared.writer
        try:
            for rm in metrics_data.resource_metrics:
                resource = dict(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        data = metric.data
                        if isinstance(data, (Gauge, Sum)):
                            for point in data.data_points:
                                if isinstance(point, NumberDataPoint):
                                    attrs = {**resource, **dict(point.attributes or {})}
                                    writer.add_point(
                                        metric.name, point.time_unix_nano, point.value, attrs
                                    )
                        elif isinstance(data, Histogram):
                            for hp in data.data_points:
                                attrs = {**resource, **dict(hp.attributes or {})}
                                writer.add_point(
                                    f"{metric.name}.count", hp.time_unix_nano, hp.count, attrs
                                )
                                writer.add_point(
                                    f"{metric.name}.sum", hp.time_unix_nano, hp.sum, attrs
                                )
            writer.flush()
        except Exception:
            _log.warning("cannot write counters to %s", writer.path, exc_info=True)
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        try:
            self._shared.writer.flush()
        except Exception:
            return False
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        if not self._shut:
            self._shut = True
            try:
                self._shared.detach()
            except Exception:
                _log.warning("cannot finish %s", self._shared.writer.path, exc_info=True)


def _record_view(span: SpanRecord) -> SpanView:
    attrs = dict(span.resource)
    attrs.update(span.attributes)
    return SpanView(
        span.name,
        span.start_ns,
        span.end_ns,
        attrs,
        span.trace_id,
        span.span_id,
        span.parent_span_id,
    )


def _point_value(point: MetricPoint) -> list[tuple[str, float | int]]:
    if point.value is not None:
        return [(point.name, point.value)]
    if point.kind in ("histogram", "exponential_histogram", "summary") and point.count is not None:
        out: list[tuple[str, float | int]] = [(f"{point.name}.count", point.count)]
        if point.sum is not None:
            out.append((f"{point.name}.sum", point.sum))
        return out
    return []


def otlp_json_to_perfetto(
    inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    time_origin_ns: int | None = None,
) -> Path:
    """Convert OTLP/JSON trace and metric files into one Perfetto timeline.

    Reads the inputs twice (once for the earliest timestamp, once to write), so memory
    stays bounded whatever their size.

    Args:
        inputs: files, rotated series or folders, as for :func:`otel_ext.exporters.read_otlp_json`.
        output: the timeline to write (replaced if it exists).
        time_origin_ns: Unix ns that ``ts = 0`` stands for; default: the whole hour
            before the earliest timestamp.

    Returns:
        The path written.

    Raises:
        InputError: an input is malformed (names file, line and problem).

    >>> import json, tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "traces.jsonl").write_text('{"resourceSpans":[{"scopeSpans":[{"spans":[{'
    ...     '"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",'
    ...     '"name":"accel.layer","startTimeUnixNano":"3600000000500","endTimeUnixNano":"3600000002000"}]}]}]}\\n')
    >>> out = otlp_json_to_perfetto(folder, folder / "timeline.json")
    >>> [(e["ts"], e["dur"]) for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    [(0.5, 1.5)]
    """
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    output = Path(output)
    sources = [f for f in otlp_json_files(paths) if f.resolve() != output.resolve()]
    if time_origin_ns is None:
        earliest: int | None = None
        for span in read_spans(sources):
            earliest = span.start_ns if earliest is None else min(earliest, span.start_ns)
        for point in read_metrics(sources):
            earliest = point.time_ns if earliest is None else min(earliest, point.time_ns)
        time_origin_ns = 0 if earliest is None else earliest - earliest % _HOUR_NS
    writer = PerfettoWriter(output, time_origin_ns=time_origin_ns, overwrite=True)
    for span in read_spans(sources):
        writer.add_span(_record_view(span))
    for point in read_metrics(sources):
        attrs = dict(point.resource)
        attrs.update(point.attributes)
        for name, value in _point_value(point):
            writer.add_point(name, point.time_ns, value, attrs)
    writer.close()
    return writer.path
