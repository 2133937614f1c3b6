"""Deferred span recording: the workload thread only writes timestamps; spans are made later.

A bare SDK span costs the workload thread about ten microseconds; a model traced per layer
pays that hundreds of times per step. :class:`DeferredSpanRecorder` moves that cost off the
workload thread. On the hot path, :meth:`~DeferredSpanRecorder.begin` and
:meth:`~DeferredSpanRecorder.end` write ``(layer id, start, end, parent index, extra)`` into a
preallocated per-thread ring buffer and nothing else. When the outermost record of a tree
ends, the tree is handed to a background thread, which materialises real spans with the
recorded start and end times, the layer's attributes (from a table registered up front, plus
the record's extra attributes) and the recorded parent (an explicit parent context), under
the OpenTelemetry context that was current when the tree began. The result is the same span
tree, with the same attributes, that eager recording gives; only the span ids are drawn later.

Threading and blocking contract: ``begin``/``end`` never block and never raise; each thread
has its own ring, so several workload threads may record at once. When a ring is full (the
materialiser is behind), new records are dropped and counted (:attr:`dropped`); the
workload is never slowed down. ``flush()`` blocks until every handed-over tree is
materialised.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> recorder = DeferredSpanRecorder(tracer_provider=provider, capacity=64)
>>> outer = recorder.register("accel.layer", {"accel.layer.name": "model"})
>>> inner = recorder.register("accel.layer", {"accel.layer.name": "model.0"})
>>> recorder.begin(outer); recorder.begin(inner); recorder.end(); recorder.end()
>>> recorder.flush()
True
>>> child, parent = exporter.get_finished_spans()
>>> child.parent.span_id == parent.context.span_id, child.attributes["accel.layer.name"]
(True, 'model.0')
>>> recorder.shutdown()
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.trace import TracerProvider as ApiTracerProvider

from otel_ext.instrumentation._common import get_tracer, log_once

__all__ = ["DeferredSpanRecorder"]

_time_ns = time.time_ns
_get_current = otel_context.get_current


class _Ring:
    """One thread's preallocated record buffer (power-of-two capacity)."""

    __slots__ = (
        "capacity",
        "consumed",
        "end",
        "extra",
        "first",
        "lid",
        "mask",
        "n",
        "parent",
        "root_ctx",
        "stack",
        "start",
    )

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.mask = capacity - 1
        self.lid = [0] * capacity
        self.start = [0] * capacity
        self.end = [0] * capacity
        self.parent = [-1] * capacity
        self.extra: list[Mapping[str, Any] | None] = [None] * capacity
        self.n = 0  # records written, ever
        self.consumed = 0  # records materialised (or skipped), ever
        self.first = 0
        self.root_ctx: Context | None = None
        self.stack: list[int] = []


class DeferredSpanRecorder:
    """Record nested spans cheaply on the workload thread; materialise them on a background thread.

    Args:
        tracer_provider: where the materialised spans go (the global provider when ``None``).
        capacity: records per thread ring; rounded up to a power of two.
    """

    def __init__(
        self, *, tracer_provider: ApiTracerProvider | None = None, capacity: int = 1 << 16
    ):
        self._tracer = get_tracer(tracer_provider)
        self._capacity = 1 << max(int(capacity) - 1, 1).bit_length()
        self._tls = threading.local()
        self._names: list[str] = []
        self._attrs: list[dict[str, Any]] = []
        self._pending: collections.deque[tuple[_Ring, int, int, Context | None]] = (
            collections.deque()
        )
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._handed = 0
        self._finished = 0
        self._dropped = 0
        self._closed = False
        self._worker = threading.Thread(
            target=self._run, name="otel-ext-deferred-spans", daemon=True
        )
        self._worker.start()

    # -- setup ---------------------------------------------------------------------------
    def register(self, name: str, attributes: Mapping[str, Any]) -> int:
        """Declare a span kind (name and fixed attributes); returns its id for :meth:`begin`."""
        self._names.append(name)
        self._attrs.append(dict(attributes))
        return len(self._names) - 1

    @property
    def dropped(self) -> int:
        """Records dropped because a ring was full."""
        return self._dropped

    # -- hot path ------------------------------------------------------------------------
    def _ring(self) -> _Ring:
        ring = _Ring(self._capacity)
        self._tls.ring = ring
        return ring

    def begin(self, layer_id: int) -> None:
        """Open a record of span kind ``layer_id`` now, nested in the innermost open record."""
        try:
            r = self._tls.ring
        except AttributeError:
            r = self._ring()
        n = r.n
        stack = r.stack
        if not stack:
            r.first = n
            r.root_ctx = _get_current()
            parent = -1
        else:
            parent = stack[-1]
        if n - r.consumed >= r.capacity:
            self._dropped += 1
            stack.append(-1)
            return
        i = n & r.mask
        r.lid[i] = layer_id
        r.parent[i] = parent
        r.extra[i] = None
        r.n = n + 1
        stack.append(n)
        r.start[i] = _time_ns()

    def end(self, extra: Mapping[str, Any] | None = None) -> None:
        """Close the innermost open record now; ``extra`` attributes are added to its span."""
        t = _time_ns()
        try:
            r = self._tls.ring
            stack = r.stack
            n = stack.pop()
        except (AttributeError, IndexError):
            return
        if n >= 0:
            i = n & r.mask
            r.end[i] = t
            if extra is not None:
                r.extra[i] = extra
        if not stack:
            self._handed += 1
            self._pending.append((r, r.first, r.n, r.root_ctx))
            self._wake.set()

    # -- background ----------------------------------------------------------------------
    def _materialise(self, r: _Ring, first: int, last: int, root_ctx: Context | None) -> None:
        spans: dict[int, Span] = {}
        ends: list[tuple[int, int]] = []
        tracer = self._tracer
        for n in range(first, last):
            i = n & r.mask
            lid = r.lid[i]
            parent = r.parent[i]
            parent_span = spans.get(parent)
            ctx = trace.set_span_in_context(parent_span) if parent_span is not None else root_ctx
            attrs = self._attrs[lid]
            extra = r.extra[i]
            if extra:
                attrs = {**attrs, **extra}
            start = r.start[i]
            spans[n] = tracer.start_span(
                self._names[lid], context=ctx, attributes=attrs, start_time=start
            )
            ends.append((max(r.end[i], start), n))
        ends.sort()
        for end, n in ends:
            spans[n].end(end_time=end)

    def _run(self) -> None:
        while True:
            self._wake.wait(0.5)
            self._wake.clear()
            while self._pending:
                r, first, last, root_ctx = self._pending.popleft()
                try:
                    self._materialise(r, first, last, root_ctx)
                except Exception as exc:
                    log_once("deferred.materialise", "%s: %s", type(exc).__name__, exc)
                r.consumed = last
                with self._done:
                    self._finished += 1
                    self._done.notify_all()
            if self._closed and not self._pending:
                return

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until every tree handed over so far is materialised; False on timeout."""
        target = self._handed
        self._wake.set()
        with self._done:
            return self._done.wait_for(lambda: self._finished >= target, timeout)

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Materialise what is pending and stop the background thread (idempotent)."""
        self.flush(timeout)
        self._closed = True
        self._wake.set()
        self._worker.join(timeout)
