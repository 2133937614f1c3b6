"""A batch span processor and a metric-exporter guard that never hurt the workload.

:class:`BoundedBatchSpanProcessor` is the SDK's batching contract made strict:

* the workload thread only appends to a bounded queue (a lock, a length check, an
  append); when the queue is full the span is dropped and counted, never waited for;
* one daemon thread exports batches, with instrumentation suppressed, and counts the
  spans of a failed or raising export as dropped;
* :meth:`~BoundedBatchSpanProcessor.force_flush` and
  :meth:`~BoundedBatchSpanProcessor.shutdown` wait at most their timeout;
* after ``fork()`` the child gets a fresh queue and worker thread, and (when an
  ``exporter_factory`` is given) a fresh exporter, created on the worker thread before its
  first export, so a gRPC channel is never shared with the parent.

:class:`GuardedMetricExporter` wraps a metric exporter with the same rules for the metric
reader's thread: failures are counted as dropped data points, exceptions are swallowed, and
the inner exporter is re-created after fork.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(BoundedBatchSpanProcessor(exporter, max_queue_size=8))
>>> with provider.get_tracer("doc").start_as_current_span("step"):
...     pass
>>> provider.force_flush()
True
>>> [span.name for span in exporter.get_finished_spans()]
['step']
>>> provider.shutdown()
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from collections.abc import Callable

from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ext.exporters._guard import DropCounter, RateLimitedLog

__all__ = ["BoundedBatchSpanProcessor", "GuardedMetricExporter"]

_log = RateLimitedLog()


class BoundedBatchSpanProcessor(SpanProcessor):
    """Batch finished spans to ``exporter`` on a background thread, dropping (and counting)
    rather than blocking when the exporter cannot keep up.

    Threading and blocking contract: :meth:`on_end` runs on the workload thread, takes
    one uncontended lock and never blocks on I/O or raises. Exports run on one daemon
    thread. :meth:`force_flush` and :meth:`shutdown` block the caller for at most their
    timeout.

    Args:
        exporter: where batches go.
        max_queue_size: spans held at most; more are dropped (``OTEL_BSP_MAX_QUEUE_SIZE``).
        schedule_delay_s: longest wait between two exports (``OTEL_BSP_SCHEDULE_DELAY``).
        max_export_batch_size: spans per export call (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``).
        drops: where dropped spans are counted (signal ``traces``).
        exporter_factory: builds a fresh exporter in a forked child.
    """

    #: ``on_start`` does nothing: spans written after they ended (``FinishedSpans``) need
    #: only ``on_end``
    ended_spans_need_on_start = False

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int = 2048,
        schedule_delay_s: float = 5.0,
        max_export_batch_size: int = 512,
        drops: DropCounter | None = None,
        exporter_factory: Callable[[], SpanExporter] | None = None,
    ):
        if max_queue_size <= 0 or max_export_batch_size <= 0 or schedule_delay_s <= 0:
            raise ValueError("queue size, batch size and schedule delay must be positive")
        self._exporter = exporter
        self._factory = exporter_factory
        self._max_queue_size = max_queue_size
        self._batch_size = min(max_export_batch_size, max_queue_size)
        self._delay = schedule_delay_s
        self.drops = drops if drops is not None else DropCounter()
        self._shutdown = False
        self._recreate = False
        self._start()
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def _child() -> None:
                processor = ref()
                if processor is not None:
                    processor._after_fork_in_child()

            os.register_at_fork(after_in_child=_child)

    def _start(self) -> None:
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._flush_requests: list[threading.Event] = []
        self._export_lock = threading.Lock()
        self._pid = os.getpid()
        self._worker = threading.Thread(
            target=self._run, name="otel-ext-batch-span-exporter", daemon=True
        )
        self._worker.start()

    def _after_fork_in_child(self) -> None:
        if self._shutdown:
            return
        # The parent's queued spans are the parent's to export.
        self._recreate = self._factory is not None
        self._start()

    # -- workload side -------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue ``span`` for export, or drop and count it if the queue is full."""
        if self._shutdown:
            self.drops.add(1, signal="traces", reason="after_shutdown")
            return
        with self._lock:
            if len(self._queue) >= self._max_queue_size:
                full = True
            else:
                full = False
                self._queue.append(span)
                wake = len(self._queue) >= self._batch_size
        if full:
            self.drops.add(1, signal="traces", reason="queue_full")
            _log.warning("span queue full (%d); dropping spans", self._max_queue_size)
        elif wake:
            self._wake.set()

    # -- worker side ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            if self._shutdown:
                break
            with self._lock:
                flushing = bool(self._flush_requests)
            self._drain(everything=flushing)
        self._drain(everything=True)

    def _take(self) -> list[ReadableSpan]:
        with self._lock:
            count = min(self._batch_size, len(self._queue))
            return [self._queue.popleft() for _ in range(count)]

    def _drain(self, *, everything: bool) -> None:
        with self._export_lock:
            with self._lock:  # force_flush appends under this lock: no request is lost
                requests, self._flush_requests = self._flush_requests, []
            while True:
                batch = self._take()
                if batch:
                    self._export(batch)
                if not batch or (not everything and len(self._queue) < self._batch_size):
                    break
            for request in requests:
                request.set()

    def _export(self, batch: list[ReadableSpan]) -> None:
        try:
            if self._recreate and self._factory is not None:
                self._recreate = False
                self._exporter = self._factory()
            with suppress_instrumentation():
                result = self._exporter.export(batch)
        except Exception:
            _log.warning("span export raised; %d spans dropped", len(batch), exc_info=True)
            self.drops.add(len(batch), signal="traces", reason="export_raised")
            return
        if result is not SpanExportResult.SUCCESS:
            _log.warning("span export failed; %d spans dropped", len(batch))
            self.drops.add(len(batch), signal="traces", reason="export_failed")

    # -- control -------------------------------------------------------------------------
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued so far; False if that took longer than the timeout."""
        if self._shutdown:
            return False
        done = threading.Event()
        with self._lock:  # the worker takes the list under this lock: never a stale list
            self._flush_requests.append(done)
        self._wake.set()
        if not done.wait(timeout_millis / 1000):
            return False
        try:
            # The SDK's base exporter returns None ("nothing to flush").
            return self._exporter.force_flush(int(timeout_millis)) is not False
        except Exception:
            return False

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Export what is queued, then shut the exporter down, within ``timeout_millis``.

        Spans still queued when the time is up are counted as dropped.
        """
        if self._shutdown:
            return
        deadline = time.monotonic() + timeout_millis / 1000
        self._shutdown = True
        self._wake.set()
        if self._worker.is_alive():
            self._worker.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
        self.drops.add(left, signal="traces", reason="shutdown_timeout")
        try:
            self._exporter.shutdown()
        except Exception:
            _log.warning("span exporter shutdown raised", exc_info=True)


def _count_points(data: MetricsData) -> int:
    count = 0
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                count += len(getattr(metric.data, "data_points", ()))
    return count


class GuardedMetricExporter(MetricExporter):
    """Wrap a metric exporter so that it never raises and counts what it fails to export.

    Args:
        exporter: the exporter doing the work (its temporality and aggregation
            preferences are kept).
        drops: where dropped data points are counted (signal ``metrics``).
        exporter_factory: builds a fresh exporter in a forked child.
    """

    def __init__(
        self,
        exporter: MetricExporter,
        *,
        drops: DropCounter,
        exporter_factory: Callable[[], MetricExporter] | None = None,
    ):
        super().__init__(
            preferred_temporality=exporter._preferred_temporality,
            preferred_aggregation=exporter._preferred_aggregation,
        )
        self.inner = exporter
        self._drops = drops
        self._factory = exporter_factory
        self._pid = os.getpid()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        """Export through the inner exporter; count the points of a failed export."""
        try:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                if self._factory is not None:
                    self.inner = self._factory()
            with suppress_instrumentation():
                result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        except Exception:
            _log.warning("metric export raised; data points dropped", exc_info=True)
            result = MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            _log.warning("metric export failed; data points dropped")
            self._drops.add(_count_points(metrics_data), signal="metrics", reason="export_failed")
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush the inner exporter; False on failure."""
        try:
            return bool(self.inner.force_flush(timeout_millis=timeout_millis))
        except Exception:
            return False

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        """Shut the inner exporter down; never raises."""
        try:
            self.inner.shutdown(timeout_millis=timeout_millis)
        except Exception:
            _log.warning("metric exporter shutdown raised", exc_info=True)
