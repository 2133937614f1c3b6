"""Clock brackets and fitted mappings as telemetry: ``accel.clock.sync`` spans.

Gauges (:class:`~otel_ext.clocks.ClockTelemetry`) show clock health; they cannot be
re-fitted. An ``accel.clock.sync`` span carries the raw material: a batch of brackets of one
clock domain as three homogeneous int arrays (``accel.clock.host_before_ns``,
``accel.clock.device_ticks``, ``accel.clock.host_after_ns``), the counter's width and rate,
and the domain's fitted mapping as knots (``accel.clock.knot_tick_ref``,
``accel.clock.knots_ticks``, ``accel.clock.knots_host_ns``, ``accel.clock.knots_bound_ns``,
``accel.clock.knots_curvature``, ``accel.clock.quality``, ``accel.clock.uncertainty_ns``).
The span starts at the first bracket's host time and ends at the last one's, so the span
clock is the bracket's host clock (virtual time in a simulation). Each span is a root span
(its own trace) and holds at most ``max_batch`` brackets (default 256, about 20 kB of
OTLP/JSON).

* :func:`emit_clock_sync_spans` emits spans from arrays (simulations with virtual time,
  replays of recorded brackets);
* :class:`ClockSyncSpanEmitter` polls samplers (or a registry) for *new* brackets and emits
  them, by call or on a background thread; it never raises.

The knots and the two's-complement ticks are written by the pure conversions of
:mod:`otel_ext.clocks._sync_attributes` (:func:`~otel_ext.clocks.mapping_attributes`, read
back by :func:`~otel_ext.clocks.mapping_from_attributes`).

>>> import numpy as np
>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> t = 10**18 + np.arange(600) * 100_000_000
>>> emit_clock_sync_spans(provider.get_tracer("doc"), t - 900, t // 2, t + 1_500,
...                       domain="host0/chip0", counter_bits=64, ticks_per_second=5e8)
3
>>> [len(s.attributes["accel.clock.device_ticks"]) for s in exporter.get_finished_spans()]
[256, 256, 88]
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue

from otel_ext._drops import LEDGER
from otel_ext.clocks._errors import COMPONENT, ClockFitError
from otel_ext.clocks._fit import _as_host
from otel_ext.clocks._mapping import ClockMapping, _as_u64
from otel_ext.clocks._sync_attributes import mapping_attributes, signed_ticks
from otel_ext.clocks.runtime._sampler import ClockRegistry, ClockSampler
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_BRACKETS_DROPPED,
    ACCEL_CLOCK_COUNTER_BITS,
    ACCEL_CLOCK_DEVICE_TICKS,
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_HOST_AFTER_NS,
    ACCEL_CLOCK_HOST_BEFORE_NS,
    ACCEL_CLOCK_REFERENCE,
    ACCEL_CLOCK_TICKS_PER_SECOND,
)
from otel_ext.semconv.spans import SPAN_ACCEL_CLOCK_SYNC

__all__ = ["ClockSyncSpanEmitter", "emit_clock_sync_spans"]

_log = logging.getLogger(__name__)

#: default and largest number of brackets in one ``accel.clock.sync`` span
MAX_BATCH = 256
_MAX_BATCH_LIMIT = 4096
#: mappings with more knots than this are not attached (the brackets still are)
MAX_KNOTS = 2048
_SCOPE = "otel_ext.clocks"


def emit_clock_sync_spans(
    tracer: trace.Tracer,
    host_before_ns: ArrayLike,
    device_ticks: ArrayLike,
    host_after_ns: ArrayLike,
    *,
    domain: str,
    counter_bits: int = 64,
    ticks_per_second: float = 1e9,
    reference: str = "host",
    mapping: ClockMapping | None = None,
    brackets_dropped: int = 0,
    max_batch: int = MAX_BATCH,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> int:
    """Emit ``accel.clock.sync`` spans for brackets given as arrays (e.g. in virtual time).

    Brackets are sorted by host time and cut into spans of at most ``max_batch``; each span
    starts at its first bracket's ``host_before_ns`` and ends at its latest
    ``host_after_ns``. ``mapping`` (its knots) goes on the last span only; with no brackets
    and a mapping, one span over the mapping's host range carries just the knots.

    Args:
        tracer: where to create the spans (its provider's resource names the host).
        host_before_ns: host time before each device read (int ns).
        device_ticks: device counter as read (raw, wrapped).
        host_after_ns: host time after each device read.
        domain: the clock domain (``accel.clock.domain``).
        counter_bits: counter width.
        ticks_per_second: nominal tick rate.
        reference: the host clock's name (``accel.clock.reference``).
        mapping: the domain's current fitted mapping, to attach as knots.
        brackets_dropped: brackets lost before export (on the first span).
        max_batch: brackets per span, 1..4096.
        attributes: more attributes for every span (``accel.device.id``, ...).

    Returns:
        The number of spans emitted.

    Raises:
        ClockFitError: arrays of different lengths, NaN or non-integer values, bad options.
    """
    before, ticks, after = _validated_brackets(
        host_before_ns,
        device_ticks,
        host_after_ns,
        domain=domain,
        counter_bits=counter_bits,
        ticks_per_second=ticks_per_second,
        max_batch=max_batch,
    )
    common = _common_attributes(attributes, domain, reference, counter_bits, ticks_per_second)
    knots: dict[str, AttributeValue] = {}
    if mapping is not None and len(mapping.knot_ticks) <= MAX_KNOTS:
        knots = mapping_attributes(mapping)
    if before.size == 0:
        if not knots or mapping is None:
            return 0
        return _knots_span(tracer, common, knots, mapping, brackets_dropped)
    order = np.argsort(before, kind="stable")
    return _bracket_spans(
        tracer,
        (before[order], ticks[order], after[order]),
        common,
        knots,
        int(max_batch),
        brackets_dropped,
    )


def _validated_brackets(
    host_before_ns: ArrayLike,
    device_ticks: ArrayLike,
    host_after_ns: ArrayLike,
    *,
    domain: str,
    counter_bits: int,
    ticks_per_second: float,
    max_batch: int,
) -> tuple[NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64]]:
    """The brackets as arrays, or :class:`ClockFitError` (shapes, values, options)."""
    before = _as_host(host_before_ns, "host_before_ns")
    after = _as_host(host_after_ns, "host_after_ns")
    ticks = _as_u64(device_ticks)
    if not (before.ndim == ticks.ndim == after.ndim == 1) or not (
        before.size == ticks.size == after.size
    ):
        raise ClockFitError(
            f"brackets need three 1-D arrays of one length, got {before.size}, {ticks.size}, "
            f"{after.size}",
            record=f"domain {domain}",
        )
    if not 1 <= int(max_batch) <= _MAX_BATCH_LIMIT:
        raise ClockFitError(f"max_batch must be 1..{_MAX_BATCH_LIMIT}, got {max_batch}")
    if not 1 <= int(counter_bits) <= 64 or not ticks_per_second > 0:
        raise ClockFitError(
            f"counter_bits must be 1..64 and ticks_per_second positive, got {counter_bits}, "
            f"{ticks_per_second}",
            record=f"domain {domain}",
        )
    return before, ticks, after


def _common_attributes(
    attributes: Mapping[str, AttributeValue] | None,
    domain: str,
    reference: str,
    counter_bits: int,
    ticks_per_second: float,
) -> dict[str, AttributeValue]:
    """The attributes every span of the domain carries: the caller's, then the domain, the
    reference clock and the counter's shape."""
    common: dict[str, AttributeValue] = dict(attributes or {})
    common[ACCEL_CLOCK_DOMAIN] = domain
    common[ACCEL_CLOCK_REFERENCE] = reference
    common[ACCEL_CLOCK_COUNTER_BITS] = int(counter_bits)
    common[ACCEL_CLOCK_TICKS_PER_SECOND] = float(ticks_per_second)
    return common


def _knots_span(
    tracer: trace.Tracer,
    common: dict[str, AttributeValue],
    knots: dict[str, AttributeValue],
    mapping: ClockMapping,
    brackets_dropped: int,
) -> int:
    """No brackets: one span over the mapping's host range carries just its knots."""
    lo, hi = mapping.host_range_ns
    if brackets_dropped:
        common[ACCEL_CLOCK_BRACKETS_DROPPED] = int(brackets_dropped)
    _span(tracer, {**common, **knots}, lo, hi)
    return 1


def _bracket_spans(
    tracer: trace.Tracer,
    brackets: tuple[NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64]],
    common: dict[str, AttributeValue],
    knots: dict[str, AttributeValue],
    step: int,
    brackets_dropped: int,
) -> int:
    """Host-ordered brackets in spans of at most ``step``: the dropped count on the first
    span, the knots on the last; returns the spans emitted."""
    before, ticks, after = brackets
    n = before.size
    spans = 0
    for i in range(0, n, step):
        j = min(n, i + step)
        attrs = dict(common)
        attrs[ACCEL_CLOCK_HOST_BEFORE_NS] = tuple(before[i:j].tolist())
        attrs[ACCEL_CLOCK_DEVICE_TICKS] = tuple(signed_ticks(ticks[i:j]))
        attrs[ACCEL_CLOCK_HOST_AFTER_NS] = tuple(after[i:j].tolist())
        if i == 0 and brackets_dropped:
            attrs[ACCEL_CLOCK_BRACKETS_DROPPED] = int(brackets_dropped)
        if j == n:
            attrs.update(knots)
        _span(tracer, attrs, int(before[i]), int(np.max(after[i:j])))
        spans += 1
    return spans


def _span(tracer: trace.Tracer, attrs: dict[str, AttributeValue], start: int, end: int) -> None:
    """One ``accel.clock.sync`` root span from ``start`` to ``end`` (at least ``start``)."""
    span = tracer.start_span(
        SPAN_ACCEL_CLOCK_SYNC,
        context=Context(),  # a root span: clock sync belongs to no request or step
        kind=trace.SpanKind.INTERNAL,
        attributes=attrs,
        start_time=start,
    )
    span.end(end_time=max(start, end))


class ClockSyncSpanEmitter:
    """Emits each new clock bracket once, as ``accel.clock.sync`` spans; never raises.

    Sources are polled: every :meth:`emit` takes the brackets each sampler stored since the
    previous call (:meth:`ClockSampler.brackets_since`) and emits them with the domain's
    current mapping; a registry is re-read on every call, so samplers added later are
    picked up, and a domain with a fixed :class:`ClockMapping` emits its knots once per
    mapping set. Brackets that left a sampler's window before being emitted are counted
    (``brackets_dropped``, also on the next span).

    Threading and blocking: :meth:`emit` may be called from any thread (calls are
    serialised by a lock) and costs one fit per domain with new brackets (the sampler
    caches it) plus the span creation; :meth:`start` calls it every ``interval_s`` on one
    daemon thread until :meth:`stop`; :meth:`force_flush` emits what is pending. Errors
    (a failing sampler, fit or tracer) are counted in ``errors`` and logged once.

    Args:
        source: a :class:`ClockSampler`, a :class:`ClockRegistry`, or several samplers.
        tracer_provider: where to emit (default: the global tracer provider).
        reference: the host clock's name (``accel.clock.reference``).
        max_batch: brackets per span (1..4096).
        include_mapping: attach the fitted mapping's knots to the newest span of a domain.
        interval_s: seconds between emissions on the background thread.
        attributes: more attributes for every span, per domain name (e.g. ``accel.device.id``).

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> host = iter(range(10**12, 10**13, 500))
    >>> ticks = iter(range(0, 10**12, 500))
    >>> s = ClockSampler(lambda: next(ticks), domain="chip0", host_clock=lambda: next(host), burst=1)
    >>> emitter = ClockSyncSpanEmitter(s, tracer_provider=TracerProvider())
    >>> _ = [s.sample_burst() for _ in range(10)]
    >>> emitter.emit(), emitter.emit(), emitter.brackets_emitted
    (1, 0, 10)
    """

    def __init__(
        self,
        source: ClockSampler | ClockRegistry | Iterable[ClockSampler],
        *,
        tracer_provider: trace.TracerProvider | None = None,
        reference: str = "host",
        max_batch: int = MAX_BATCH,
        include_mapping: bool = True,
        interval_s: float = 10.0,
        attributes: Mapping[str, Mapping[str, AttributeValue]] | None = None,
    ) -> None:
        if isinstance(source, ClockSampler | ClockRegistry):
            self._registry: ClockRegistry | None = (
                source if isinstance(source, ClockRegistry) else None
            )
            self._samplers = [source] if isinstance(source, ClockSampler) else []
        else:
            self._registry = None
            self._samplers = list(source)
        if not 1 <= int(max_batch) <= _MAX_BATCH_LIMIT:
            raise ClockFitError(f"max_batch must be 1..{_MAX_BATCH_LIMIT}, got {max_batch}")
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self.reference = reference
        self.max_batch = int(max_batch)
        self.include_mapping = include_mapping
        self.interval_s = float(interval_s)
        self.attributes = {k: dict(v) for k, v in (attributes or {}).items()}
        self._lock = threading.Lock()
        # next bracket number per sampler; the fixed mapping last emitted per domain
        self._seq: weakref.WeakKeyDictionary[ClockSampler, int] = weakref.WeakKeyDictionary()
        self._fixed: dict[str, ClockMapping] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.spans_emitted = 0
        self.brackets_emitted = 0
        self.brackets_dropped = 0
        self.errors = 0

    def _sources(self) -> tuple[list[ClockSampler], list[tuple[str, ClockMapping]]]:
        if self._registry is None:
            return list(self._samplers), []
        samplers: list[ClockSampler] = []
        fixed: list[tuple[str, ClockMapping]] = []
        for domain in self._registry.domains():
            sampler = self._registry.sampler(domain)
            if sampler is not None:
                samplers.append(sampler)
                continue
            mapping = self._registry.mapping(domain)
            if isinstance(mapping, ClockMapping):
                fixed.append((domain, mapping))
        return samplers, fixed

    def emit(self) -> int:
        """Emit every bracket stored since the previous call; returns the spans emitted."""
        emitted = 0
        with self._lock:
            try:
                samplers, fixed = self._sources()
            except Exception as exc:
                self._failed(exc)
                return 0
            for sampler in samplers:
                try:
                    emitted += self._emit_sampler(sampler)
                except Exception as exc:
                    self._failed(exc)
            for domain, mapping in fixed:
                try:
                    if self._fixed.get(domain) is not mapping:
                        self._fixed[domain] = mapping
                        emitted += self._emit(domain, mapping, (), 0, 64, 1e9)
                except Exception as exc:
                    self._failed(exc)
        return emitted

    def _emit_sampler(self, sampler: ClockSampler) -> int:
        next_seq, dropped, brackets = sampler.brackets_since(self._seq.get(sampler, 0))
        self._seq[sampler] = next_seq
        if brackets[0].size == 0 and not dropped:
            return 0
        mapping = sampler.mapping() if self.include_mapping else None
        self.brackets_dropped += dropped
        return self._emit(
            sampler.domain,
            mapping,
            brackets,
            dropped,
            sampler.counter_bits,
            sampler.ticks_per_second,
        )

    def _emit(
        self,
        domain: str,
        mapping: ClockMapping | None,
        brackets: tuple[NDArray[Any], ...] | tuple[()],
        dropped: int,
        counter_bits: int,
        ticks_per_second: float,
    ) -> int:
        if mapping is not None:
            counter_bits, ticks_per_second = mapping.counter_bits, mapping.ticks_per_second
        if brackets:
            before, ticks, after = brackets
        else:
            before = after = np.empty(0, dtype=np.int64)
            ticks = np.empty(0, dtype=np.uint64)
        spans = emit_clock_sync_spans(
            self.tracer,
            before,
            ticks,
            after,
            domain=domain,
            counter_bits=counter_bits,
            ticks_per_second=ticks_per_second,
            reference=self.reference,
            mapping=mapping,
            brackets_dropped=dropped,
            max_batch=self.max_batch,
            attributes=self.attributes.get(domain),
        )
        self.spans_emitted += spans
        self.brackets_emitted += int(before.size)
        return spans

    def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        LEDGER.drop(
            COMPONENT,
            "sync_span_emit_failed",
            message="clock sync span emission failed (logged once): %r",
            args=(exc,),
            logger=_log,
            once_per=self,
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.emit()
        self.emit()

    def start(self) -> None:
        """Emit every ``interval_s`` on a daemon thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="clock-sync-spans", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the background thread after a last emission (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def force_flush(self) -> bool:
        """Emit what is pending now; returns ``True``."""
        self.emit()
        return True

    def __enter__(self) -> ClockSyncSpanEmitter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
