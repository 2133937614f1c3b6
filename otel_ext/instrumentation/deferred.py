"""Deferred span recording: the workload thread only writes timestamps; spans are made later.

A bare SDK span costs the workload thread about ten microseconds; a model traced per layer
pays that hundreds of times per step. :class:`DeferredSpanRecorder` moves that cost off the
workload thread. On the hot path a record is ``(layer id, start, end, parent index)`` written
by index into a preallocated per-thread ring of lists, and nothing else: no span, no
attribute dictionary, no context object. :meth:`~DeferredSpanRecorder.wrap` returns a
callable that records around each call of a function with every step inlined (the cheapest
form, what ``TorchLayerInstrumentor`` puts in place of a module's ``forward``);
:meth:`~DeferredSpanRecorder.begin` / :meth:`~DeferredSpanRecorder.end` do the same as two
calls. :meth:`~DeferredSpanRecorder.add_estimate` credits work (FLOPs, bytes) to the innermost
open record; when a record ends its total is carried to its parent, so every span carries the
inclusive total of what ran inside it.

When the outermost record of a tree ends, the tree is handed to a background thread, which
materialises real spans with the recorded start and end times, the layer's attributes (from
a table registered up front, plus the record's estimates and extra attributes) and the
recorded parent (an explicit parent context), under the OpenTelemetry context that was
current when the tree began. The result is the same span tree, with the same attributes,
that eager recording gives; only the span ids are drawn later.

Threading and blocking contract: the hot path never blocks and never raises; each thread
has its own ring, so several workload threads may record at once. When a ring is full (the
materialiser is behind), new records are dropped and counted (:attr:`dropped`); the
workload is never slowed down. ``flush()`` blocks until every handed-over tree is
materialised. The materialiser is a Python thread: it needs the GIL while it builds spans,
so it runs while the workload waits in native code (kernels, I/O) or between steps.

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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.trace import TracerProvider as ApiTracerProvider

from otel_ext.instrumentation._common import get_tracer, log_once
from otel_ext.instrumentation.provider_drain import register as register_drain
from otel_ext.semconv.attributes import ACCEL_LAYER_BYTES, ACCEL_LAYER_FLOPS

__all__ = ["BoundedHandoff", "DeferredSpanRecorder"]

R = TypeVar("R")

_time_ns = time.time_ns
_get_current = otel_context.get_current


class _Ring:
    """One thread's preallocated record buffer (power-of-two capacity).

    ``lid``, ``parent``, ``start``, ``end`` are written by index ``n & mask`` (``n`` counts
    records ever written); ``est`` (``n -> [flops, bytes]``) and ``extra``
    (``n -> attributes``) are sparse, filled only for records that have them.
    """

    __slots__ = (
        "consumed",
        "end",
        "est",
        "extra",
        "first",
        "lid",
        "n",
        "parent",
        "root_ctx",
        "stack",
        "start",
    )

    def __init__(self, capacity: int):
        self.lid = [0] * capacity
        self.start = [0] * capacity
        self.end = [0] * capacity
        self.parent = [-1] * capacity
        self.est: dict[int, list[float]] = {}
        self.extra: dict[int, Mapping[str, Any]] = {}
        self.n = 0  # records written, ever
        self.consumed = 0  # records materialised (or skipped), ever
        self.first = 0
        self.root_ctx: Context | None = None
        self.stack: list[int] = []  # open records (-1: dropped)


def _carry(est: dict[int, list[float]], n: int, stack: list[int]) -> None:
    """Add record ``n``'s (inclusive) estimate to its parent, the innermost open record."""
    e = est.get(n)
    if e is None or not stack:
        return
    p = stack[-1]
    if p < 0:
        return
    pe = est.get(p)
    if pe is None:
        est[p] = [e[0], e[1]]
    else:
        pe[0] += e[0]
        pe[1] += e[1]


class DeferredSpanRecorder:
    """Record nested spans cheaply on the workload thread; materialise them on a background thread.

    Args:
        tracer_provider: where the materialised spans go (the global provider when ``None``).
        capacity: records per thread ring; rounded up to a power of two.
        estimate_attributes: the attribute names of the two :meth:`add_estimate` totals.
        interval: seconds between the materialiser's polls for finished trees (it is also
            woken at once when a ring is more than half full, and by :meth:`flush`).
    """

    def __init__(
        self,
        *,
        tracer_provider: ApiTracerProvider | None = None,
        capacity: int = 1 << 16,
        estimate_attributes: tuple[str, str] = (ACCEL_LAYER_FLOPS, ACCEL_LAYER_BYTES),
        interval: float = 0.05,
    ):
        self._tracer = get_tracer(tracer_provider)
        self._capacity = 1 << max(int(capacity) - 1, 1).bit_length()
        self._half = self._capacity >> 1
        self._interval = interval
        self._est_names = estimate_attributes
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
        #: the tracer provider's force_flush()/shutdown() drain this recorder first
        self._drain = register_drain(self, tracer_provider)

    # -- setup ---------------------------------------------------------------------------
    def register(self, name: str, attributes: Mapping[str, Any]) -> int:
        """Declare a span kind (name and fixed attributes); returns its id for recording."""
        self._names.append(name)
        self._attrs.append(dict(attributes))
        return len(self._names) - 1

    @property
    def dropped(self) -> int:
        """Records dropped because a ring was full."""
        return self._dropped

    def wrap(
        self, fn: Callable[..., R], layer_id: int, *, bypass: Callable[[], bool] | None = None
    ) -> Callable[..., R]:
        """A callable that calls ``fn`` and records one ``layer_id`` record around each call.

        The record ends when ``fn`` returns or raises (its exception propagates unchanged).
        Everything the hot path does is inlined here, with the ring's lists bound to locals.
        When ``bypass()`` is true the call is not recorded (``torch.compiler.is_compiling``:
        a compiler tracing the callable sees only ``fn``).

        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> rec = DeferredSpanRecorder(tracer_provider=TracerProvider(), capacity=8)
        >>> double = rec.wrap(lambda x: 2 * x, rec.register("accel.layer", {}))
        >>> double(21), rec.flush()
        (42, True)
        >>> rec.shutdown()
        """
        tls = self._tls
        new_ring = self._ring
        capacity = self._capacity
        mask = capacity - 1
        hand_over = self._hand_over
        time_ns = _time_ns
        get_current = _get_current
        lid = layer_id

        def recorded(*args: Any, **kwargs: Any) -> R:
            if bypass is not None and bypass():
                return fn(*args, **kwargs)
            try:
                r = tls.ring
            except AttributeError:
                r = new_ring()
            stack = r.stack
            n = r.n
            if stack:
                parent = stack[-1]
            else:
                r.first = n
                r.root_ctx = get_current()
                parent = -1
            if n - r.consumed < capacity:
                i = n & mask
                r.lid[i] = lid
                r.parent[i] = parent
                r.n = n + 1
                stack.append(n)
                r.start[i] = time_ns()
            else:
                self._dropped += 1
                stack.append(-1)
            try:
                return fn(*args, **kwargs)
            finally:
                t = time_ns()
                n = stack.pop()
                if n >= 0:
                    r.end[n & mask] = t
                    if r.est:
                        _carry(r.est, n, stack)
                if not stack:
                    hand_over(r)

        return recorded

    def hooks(
        self, layer_id: int, *, bypass: Callable[[], bool] | None = None
    ) -> tuple[Callable[..., None], Callable[..., None]]:
        """``(pre, post)`` callables that ignore their arguments: ``pre`` begins a
        ``layer_id`` record, ``post`` ends the innermost one (shaped for hook APIs such as
        PyTorch's forward pre/post hooks).

        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> rec = DeferredSpanRecorder(tracer_provider=TracerProvider(), capacity=8)
        >>> pre, post = rec.hooks(rec.register("accel.layer", {}))
        >>> pre("module", ()); post("module", (), "output"); rec.flush()
        True
        >>> rec.shutdown()
        """
        begin, end = self.begin, self.end
        if bypass is not None:
            skip = bypass

            def checked_pre(*_: Any) -> None:
                if not skip():
                    begin(layer_id)

            def checked_post(*_: Any) -> None:
                if not skip():
                    end()

            return checked_pre, checked_post

        def pre(*_: Any) -> None:
            begin(layer_id)

        def post(*_: Any) -> None:
            end()

        return pre, post

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
        stack = r.stack
        n = r.n
        if stack:
            parent = stack[-1]
        else:
            r.first = n
            r.root_ctx = _get_current()
            parent = -1
        if n - r.consumed >= self._capacity:
            self._dropped += 1
            stack.append(-1)
            return
        i = n & (self._capacity - 1)
        r.lid[i] = layer_id
        r.parent[i] = parent
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
            r.end[n & (self._capacity - 1)] = t
            if extra is not None:
                r.extra[n] = extra
            if r.est:
                _carry(r.est, n, stack)
        if not stack:
            self._hand_over(r)

    def add_estimate(self, flops: float, nbytes: float) -> None:
        """Credit work to the innermost open record (ignored when none is open)."""
        try:
            r = self._tls.ring
            n = r.stack[-1]
        except (AttributeError, IndexError):
            return
        if n < 0:
            return
        e = r.est.get(n)
        if e is None:
            r.est[n] = [flops, nbytes]
        else:
            e[0] += flops
            e[1] += nbytes

    def current_estimate(self) -> tuple[float, float] | None:
        """The estimate credited so far to the innermost open record (children included)."""
        try:
            r = self._tls.ring
            e = r.est.get(r.stack[-1])
        except (AttributeError, IndexError):
            return None
        return None if e is None else (e[0], e[1])

    def _hand_over(self, r: _Ring) -> None:
        if self._closed:  # a wrapper outlived shutdown(): discard
            r.est.clear()
            r.extra.clear()
            r.consumed = r.n
            return
        self._handed += 1
        self._pending.append((r, r.first, r.n, r.root_ctx))
        if not self._drain.bound:  # once per tree: the global provider may be set by now
            self._drain.ensure()
        # Waking the materialiser per tree costs the workload thread about 1 us per record
        # here (the woken thread contends for the GIL); it polls every ``interval`` instead,
        # and is woken at once only when a ring is more than half full.
        if r.n - r.consumed > self._half:
            self._wake.set()

    # -- background ----------------------------------------------------------------------
    def _materialise(self, r: _Ring, first: int, last: int, root_ctx: Context | None) -> None:
        spans: dict[int, Span] = {}
        ends: list[tuple[int, int]] = []
        tracer = self._tracer
        mask = self._capacity - 1
        flops_name, bytes_name = self._est_names
        est, extras = r.est, r.extra
        for n in range(first, last):
            i = n & mask
            lid = r.lid[i]
            parent = r.parent[i]
            parent_span = spans.get(parent)
            ctx = trace.set_span_in_context(parent_span) if parent_span is not None else root_ctx
            attrs = self._attrs[lid]
            e = est.pop(n, None) if est else None
            extra = extras.pop(n, None) if extras else None
            if e is not None or extra:
                attrs = dict(attrs)
                if e is not None:
                    attrs[flops_name] = e[0]
                    attrs[bytes_name] = e[1]
                if extra:
                    attrs.update(extra)
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
            self._wake.wait(self._interval)
            self._wake.clear()
            if not self._drain.bound:
                self._drain.ensure()  # the global provider may have been set since
            while self._pending:
                r, first, last, root_ctx = self._pending.popleft()
                try:
                    self._materialise(r, first, last, root_ctx)
                except Exception as exc:
                    log_once("deferred.materialise", "%s: %s", type(exc).__name__, exc)
                    for n in range(first, last):
                        r.est.pop(n, None)
                        r.extra.pop(n, None)
                r.consumed = last
                with self._done:
                    self._finished += 1
                    self._done.notify_all()
            if self._closed and not self._pending:
                return

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until every tree handed over so far is materialised; False on timeout.

        Never raises (a failure is logged once, counted, and returns False).
        """
        try:
            target = self._handed
            self._wake.set()
            with self._done:
                return self._done.wait_for(lambda: self._finished >= target, timeout)
        except Exception as exc:
            log_once("deferred.flush", "%s: %s", type(exc).__name__, exc)
            return False

    def pending(self) -> int:
        """Trees handed over and not yet materialised."""
        return max(self._handed - self._finished, 0)

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Materialise what is pending and stop the background thread (idempotent; never
        raises)."""
        try:
            self.flush(timeout)
            self._closed = True
            self._wake.set()
            self._worker.join(timeout)
        except Exception as exc:
            log_once("deferred.shutdown", "%s: %s", type(exc).__name__, exc)
        finally:
            self._drain.close()


class BoundedHandoff:
    """A bounded, drop-counting handoff from workload threads to one background consumer.

    :meth:`put` is the hot path: a capacity check and a ``SimpleQueue.put`` (a C call, no
    lock taken in Python), never blocking, never raising; past ``capacity`` items waiting,
    the item is refused (``False``) and counted in :attr:`dropped`. The consumer thread calls
    ``consume(batch)`` with the items in the order they were put: at once for each item when
    ``interval`` is ``None`` (latency matters: the consumer must see an item within
    microseconds), else every ``interval`` seconds with everything that arrived (batching:
    the consumer does not contend for the GIL per item; with ``tick=True`` it is also called
    with an empty batch when nothing arrived, for work it retries). ``consume`` must not raise (a raise
    is logged once and the batch counted as dropped).

    >>> seen = []
    >>> handoff = BoundedHandoff(seen.extend, capacity=2, name="demo")
    >>> handoff.put(1), handoff.flush(), seen
    (True, True, [1])
    >>> handoff.close()
    """

    def __init__(
        self,
        consume: Callable[[list[Any]], None],
        *,
        capacity: int,
        name: str,
        interval: float | None = None,
        tick: bool = False,
    ):
        import queue

        self._consume = consume
        self._capacity = int(capacity)
        self._interval = interval
        self._tick = tick and interval is not None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._put = self._queue.put
        self._in = 0  # items accepted, ever (hot path)
        self._out = 0  # items consumed, ever (consumer)
        self.dropped = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, item: Any) -> bool:
        """Hand ``item`` over; ``False`` (and counted) when ``capacity`` items are waiting."""
        if self._in - self._out >= self._capacity or self._closed:
            self.dropped += 1
            return False
        self._in += 1
        self._put(item)
        return True

    @property
    def waiting(self) -> int:
        """Items handed over and not yet consumed."""
        return self._in - self._out

    def _run(self) -> None:
        import queue

        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            if self._interval is None:
                batch = [get()]
            else:
                try:
                    batch = [get(timeout=self._interval)]
                except queue.Empty:
                    batch = []
            while True:
                try:
                    batch.append(get_nowait())
                except queue.Empty:
                    break
            items = [b for b in batch if not isinstance(b, _Marker)]
            if items or self._tick:
                try:
                    self._consume(items)
                except Exception as exc:
                    log_once("deferred.handoff", "%s: %s", type(exc).__name__, exc)
                self._out += len(items)
            stop = False
            for b in batch:
                if isinstance(b, _Marker):
                    b.event.set()
                    stop = stop or b.stop
            if stop:
                return

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until every item put so far has been consumed; False on timeout."""
        if not self._thread.is_alive():
            return self._in == self._out
        marker = _Marker(stop=False)
        self._put(marker)
        return marker.event.wait(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Consume what is waiting, then stop the consumer thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            marker = _Marker(stop=True)
            self._put(marker)
            marker.event.wait(timeout)
            self._thread.join(timeout)


class _Marker:
    __slots__ = ("event", "stop")

    def __init__(self, *, stop: bool):
        self.event = threading.Event()
        self.stop = stop
