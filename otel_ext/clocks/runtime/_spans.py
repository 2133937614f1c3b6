"""Device spans on the aligned timeline: a reconciling span processor and a span helper.

Device spans carry their raw device timestamps (``accel.clock.raw_start_ticks``,
``accel.clock.raw_end_ticks``) and ``accel.clock.domain``. OpenTelemetry SDK spans are
immutable once ended, so alignment never edits them:

* :func:`record_device_span` creates a span whose explicit start and end times are already
  aligned (when the mapping is known at recording time);
* :class:`ClockReconcilingSpanProcessor` holds device spans back briefly (until the domain's
  mapping covers them, so it interpolates, or until ``hold_back_s`` passes) and hands
  *corrected copies* (new ``ReadableSpan`` objects with aligned times and
  ``accel.clock.uncertainty_ns``) to the next processor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.util.types import AttributeValue

from otel_ext._drops import LEDGER
from otel_ext.clocks._errors import COMPONENT
from otel_ext.clocks._mapping import ClockMapping, TimeMapping
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_COUNTER_BITS,
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_RAW_END_TICKS,
    ACCEL_CLOCK_RAW_START_TICKS,
    ACCEL_CLOCK_TICKS_PER_SECOND,
    ACCEL_CLOCK_UNCERTAINTY_NS,
)

__all__ = ["ClockReconcilingSpanProcessor", "record_device_span"]

_log = logging.getLogger(__name__)

MappingLookup = Callable[[str], TimeMapping | None]


def _signed(ticks: int) -> int:
    """A raw counter value as an OpenTelemetry int attribute (two's complement above 2**63)."""
    return int(np.array([int(ticks) % (1 << 64)], dtype=np.uint64).view(np.int64)[0])


def _aligned(
    mapping: TimeMapping, start_ticks: int, end_ticks: int, hints: tuple[int | None, int | None]
) -> tuple[int, int, float]:
    ticks = np.array([int(start_ticks) % (1 << 64), int(end_ticks) % (1 << 64)], dtype=np.uint64)
    hint = (
        None
        if hints[0] is None
        else np.array([hints[0], hints[1] if hints[1] is not None else hints[0]])
    )
    host, bound = mapping.align(ticks, hint)
    start, end = int(host[0]), int(host[1])
    return start, max(start, end), float(np.max(bound))


def record_device_span(
    tracer: trace.Tracer,
    name: str,
    *,
    domain: str,
    start_ticks: int,
    end_ticks: int,
    mapping: TimeMapping,
    near_host_ns: int | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
    context: otel_context.Context | None = None,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
) -> trace.Span:
    """Record an ended device span with explicit aligned start and end times.

    Args:
        tracer: where to create the span.
        name: the span name (``SPAN_ACCEL_KERNEL`` for device activity).
        domain: the clock domain of the ticks.
        start_ticks: raw device ticks at the start, as read.
        end_ticks: raw device ticks at the end.
        mapping: the domain's mapping (from :func:`fit_clock` or a registry).
        near_host_ns: a coarse host time of the activity (needed for wrapping counters).
        attributes: more attributes (device id, rank, ...).
        context: the parent context.
        kind: the span kind.

    Returns:
        The ended span; its attributes keep the raw ticks and add ``accel.clock.uncertainty_ns``.

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from otel_ext.clocks import ClockMapping
    >>> m = ClockMapping(knot_ticks=[0, 10**9], knot_host_ns=[0.0, 1e9], knot_bound_ns=[80.0, 80.0],
    ...     segment_curvature=[0.0], tick_raw_ref=0, host_ref_ns=10**12)
    >>> span = record_device_span(TracerProvider().get_tracer("t"), "accel.kernel",
    ...     domain="host0/chip0", start_ticks=1_000, end_ticks=5_000, mapping=m)
    >>> span.start_time - 10**12, span.end_time - 10**12, span.attributes["accel.clock.uncertainty_ns"]
    (1000, 5000, 81.0)
    """
    start, end, bound = _aligned(mapping, start_ticks, end_ticks, (near_host_ns, near_host_ns))
    attrs: dict[str, AttributeValue] = dict(attributes or {})
    attrs[ACCEL_CLOCK_DOMAIN] = domain
    attrs[ACCEL_CLOCK_RAW_START_TICKS] = _signed(start_ticks)
    attrs[ACCEL_CLOCK_RAW_END_TICKS] = _signed(end_ticks)
    attrs[ACCEL_CLOCK_UNCERTAINTY_NS] = bound
    if isinstance(mapping, ClockMapping):
        attrs[ACCEL_CLOCK_COUNTER_BITS] = mapping.counter_bits
        attrs[ACCEL_CLOCK_TICKS_PER_SECOND] = mapping.ticks_per_second
    span = tracer.start_span(name, context=context, kind=kind, attributes=attrs, start_time=start)
    span.end(end_time=end)
    return span


class _DomainQueue:
    """The held spans of one clock domain, its lock and its counts."""

    __slots__ = ("aligned", "dropped", "lock", "pending", "unaligned")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: deque[tuple[int, ReadableSpan]] = deque()
        self.aligned = 0
        self.unaligned = 0
        self.dropped = 0


class ClockReconcilingSpanProcessor(SpanProcessor):
    """Hands device spans to ``next_processor`` as aligned copies, after a short hold-back.

    A span with ``accel.clock.domain`` and both raw-tick attributes is held until its
    domain's mapping covers its end ticks (so times are interpolated, not extrapolated) or
    until ``hold_back_s`` has passed; then a new ``ReadableSpan`` with aligned start/end and
    ``accel.clock.uncertainty_ns`` goes to ``next_processor.on_end``. Other spans pass
    through at once. Spans whose domain has no mapping by the deadline pass through
    unchanged (counted in ``unaligned``).

    Threading and blocking: ``on_start``/``on_end`` may be called from any thread, and no
    lock is shared by all span ends: a span without clock attributes goes straight to
    ``next_processor.on_end`` (which the SDK requires to be thread-safe); a device span is
    appended to its own clock domain's queue under that domain's lock (the domains are an
    immutable snapshot read without a lock, replaced under a lock when a new domain first
    appears). Spans beyond ``max_pending`` held in all domains together pass through
    uncorrected and are counted in ``dropped`` (concurrent span ends may overshoot the bound
    by at most one span each). With ``background=True`` a daemon thread
    releases held spans every ``hold_back_s / 4``; otherwise :meth:`release_ready` does (it
    is also called by ``force_flush``, which releases everything). Nothing here raises into
    the caller: errors are logged once and the original span is forwarded.

    Args:
        next_processor: where corrected spans go (e.g. a ``BatchSpanProcessor``).
        mappings: domain → mapping lookup (a :class:`~otel_ext.clocks.ClockRegistry`, a
            ``dict.get``, any callable).
        hold_back_s: longest time a span is held.
        clock: monotonic clock in ns for the hold-back (injectable for tests).
        max_pending: bound of the hold-back queue.
        background: run the releasing thread.
    """

    def __init__(
        self,
        next_processor: SpanProcessor,
        mappings: MappingLookup,
        *,
        hold_back_s: float = 0.5,
        clock: Callable[[], int] = time.monotonic_ns,
        max_pending: int = 10_000,
        background: bool = True,
    ) -> None:
        self.next = next_processor
        self.mappings = mappings
        self.hold_back_ns = int(hold_back_s * 1e9)
        self.clock = clock
        self.max_pending = max_pending
        self._domains_lock = threading.Lock()  # taken only to add a domain
        self._domains: Mapping[str, _DomainQueue] = MappingProxyType({})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="clock-reconciler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        wait = max(self.hold_back_ns / 4e9, 0.001)
        while not self._stop.wait(wait):
            self.release_ready()

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Forward to the next processor."""
        try:
            self.next.on_start(span, parent_context=parent_context)
        except Exception as exc:
            self._log_once(exc)

    def _is_device(self, span: ReadableSpan) -> bool:
        attrs = span.attributes or {}
        return (
            ACCEL_CLOCK_DOMAIN in attrs
            and ACCEL_CLOCK_RAW_START_TICKS in attrs
            and ACCEL_CLOCK_RAW_END_TICKS in attrs
        )

    @property
    def aligned(self) -> int:
        """Device spans forwarded with aligned times."""
        return sum(q.aligned for q in self._domains.values())

    @property
    def unaligned(self) -> int:
        """Device spans forwarded unchanged: no mapping for their domain by the deadline."""
        return sum(q.unaligned for q in self._domains.values())

    @property
    def dropped(self) -> int:
        """Device spans forwarded uncorrected because the hold-back queue was full."""
        return sum(q.dropped for q in self._domains.values())

    def _queue(self, domain: str) -> _DomainQueue:
        queue = self._domains.get(domain)  # lock-free: the mapping is never mutated
        if queue is not None:
            return queue
        with self._domains_lock:
            queue = self._domains.get(domain)
            if queue is None:
                queue = _DomainQueue()
                self._domains = MappingProxyType({**self._domains, domain: queue})
            return queue

    def on_end(self, span: ReadableSpan) -> None:
        """Hold a device span back, or forward any other span at once; never raises."""
        try:
            if not self._is_device(span):
                self._forward(span)
                return
            queue = self._queue(str((span.attributes or {})[ACCEL_CLOCK_DOMAIN]))
            held = sum(len(q.pending) for q in self._domains.values())
            with queue.lock:
                full = held >= self.max_pending
                if full:
                    queue.dropped += 1
                else:
                    queue.pending.append((self.clock() + self.hold_back_ns, span))
            if full:
                self._forward(span)
        except Exception as exc:
            self._log_once(exc)

    def release_ready(self, *, everything: bool = False) -> int:
        """Forward held spans that are covered or past their deadline; returns how many."""
        now = self.clock()
        released = 0
        for domain, queue in self._domains.items():
            with queue.lock:
                held = list(queue.pending)
                queue.pending.clear()
            if not held:
                continue
            try:
                mapping = self.mappings(domain)
            except Exception as exc:
                self._log_once(exc)
                mapping = None
            keep: list[tuple[int, ReadableSpan]] = []
            aligned = unaligned = 0
            for deadline, span in held:
                final = everything or now >= deadline
                try:
                    out = self._correct(span, mapping, final=final)
                except Exception as exc:
                    self._log_once(exc)
                    out = span
                if out is None:
                    keep.append((deadline, span))
                    continue
                if out is span:
                    unaligned += mapping is None
                else:
                    aligned += 1
                self._forward(out)
                released += 1
            with queue.lock:
                queue.aligned += aligned
                queue.unaligned += unaligned
                if keep:
                    queue.pending.extendleft(reversed(keep))
        return released

    def _correct(
        self, span: ReadableSpan, mapping: TimeMapping | None, *, final: bool
    ) -> ReadableSpan | None:
        """An aligned copy of ``span``; ``span`` itself when final without a mapping; ``None``
        to keep holding it."""
        attrs = span.attributes or {}
        start_ticks = int(attrs[ACCEL_CLOCK_RAW_START_TICKS])  # type: ignore[arg-type]
        end_ticks = int(attrs[ACCEL_CLOCK_RAW_END_TICKS])  # type: ignore[arg-type]
        hints = (span.start_time, span.end_time)
        if mapping is None:
            return span if final else None
        if not final and isinstance(mapping, ClockMapping):
            hint = None if hints[1] is None else np.array([hints[1]])
            if not bool(
                mapping.covers(np.array([end_ticks % (1 << 64)], dtype=np.uint64), hint)[0]
            ):
                return None
        start, end, bound = _aligned(mapping, start_ticks, end_ticks, hints)
        new_attrs: dict[str, AttributeValue] = dict(attrs)
        new_attrs[ACCEL_CLOCK_UNCERTAINTY_NS] = bound
        return ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=new_attrs,
            events=span.events,
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=start,
            end_time=end,
            instrumentation_scope=span.instrumentation_scope,
        )

    def _forward(self, span: ReadableSpan) -> None:
        self.next.on_end(span)

    def _log_once(self, exc: BaseException) -> None:
        LEDGER.drop(
            COMPONENT,
            "reconciling_processor_error",
            message="ClockReconcilingSpanProcessor error (logged once): %r",
            args=(exc,),
            logger=_log,
            once_per=self,
        )

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Release every held span (with the mapping there is), then flush the next processor."""
        try:
            self.release_ready(everything=True)
            return self.next.force_flush(timeout_millis)
        except Exception as exc:
            self._log_once(exc)
            return False

    def shutdown(self) -> None:
        """Stop the thread, release everything, shut the next processor down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        try:
            self.release_ready(everything=True)
            self.next.shutdown()
        except Exception as exc:
            self._log_once(exc)
