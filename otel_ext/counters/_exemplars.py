"""Which span is running on which device right now: the hook exemplars come from.

The instrumentation (or the simulated cluster) tells the bridge "device D is running span S
now" through :class:`ActiveSpanRegistry`; when the bridge samples a counter of device D it
attaches that span's ``trace_id`` and ``span_id`` as the exemplar. A node agent in another
process reads the workloads' shared records instead (``shared=``, a
``SharedActiveSpanReader``: the span that ran for most of the sampling interval). When
sampling in-process and no device entry exists, the span current in the OpenTelemetry
context is used instead.

Threading: every method is thread-safe and O(1); nothing here raises.

>>> from opentelemetry.trace import SpanContext, TraceFlags
>>> reg = ActiveSpanRegistry()
>>> ctx = SpanContext(0xABC, 0x12, is_remote=False, trace_flags=TraceFlags(1))
>>> reg.set_active("host0/chip1", ctx)
>>> reg.lookup("host0/chip1").trace_id
'00000000000000000000000000000abc'
>>> reg.clear("host0/chip1")
>>> reg.lookup("host0/chip1") is None
True
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext

__all__ = ["ActiveSpanRegistry", "ExemplarRef", "SharedSpans", "current_span_ref"]


@dataclass(frozen=True, slots=True)
class ExemplarRef:
    """The ids of a span, as the hex strings exemplars carry.

    Attributes:
        trace_id: 32 lowercase hex digits.
        span_id: 16 lowercase hex digits.
    """

    trace_id: str
    span_id: str

    @classmethod
    def of(cls, ctx: SpanContext) -> ExemplarRef:
        """The ref of a span context."""
        return cls(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"))

    def labels(self) -> dict[str, str]:
        """The exemplar label set (``trace_id``, ``span_id``)."""
        return {"trace_id": self.trace_id, "span_id": self.span_id}


def current_span_ref() -> ExemplarRef | None:
    """The span current in the OpenTelemetry context, if it is valid and sampled."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    return ExemplarRef.of(ctx)


class SharedSpans(Protocol):
    """Where spans of other processes come from (``SharedActiveSpanReader``)."""

    def covering(self, device_id: str, start_ns: int, end_ns: int) -> ExemplarRef | None:
        """The span that ran for most of ``[start_ns, end_ns]`` on ``device_id``."""
        ...


class ActiveSpanRegistry:
    """Device (or link) id -> the span active on it now.

    Args:
        use_current_context: when no entry exists for a device, fall back to the span
            current in the sampling thread's OpenTelemetry context.
        shared: records published by other processes on this host (the node agent's
            ``SharedActiveSpanReader``), asked when this process has no entry.
    """

    def __init__(self, *, use_current_context: bool = True, shared: SharedSpans | None = None):
        self._lock = threading.Lock()
        self._active: dict[str, tuple[SpanContext, ExemplarRef]] = {}
        self.use_current_context = use_current_context
        self.shared = shared

    def set_active(self, device_id: str, span: Span | SpanContext) -> None:
        """Record that ``span`` is running on ``device_id`` now (replacing the previous one)."""
        ctx = span.get_span_context() if isinstance(span, Span) else span
        if not ctx.is_valid:
            return
        with self._lock:
            self._active[device_id] = (ctx, ExemplarRef.of(ctx))

    def clear(self, device_id: str, span: Span | SpanContext | None = None) -> None:
        """Forget the span on ``device_id`` (only if it is ``span``, when given)."""
        with self._lock:
            if span is not None:
                cur = self._active.get(device_id)
                ctx = span.get_span_context() if isinstance(span, Span) else span
                if cur is None or cur[0].span_id != ctx.span_id:
                    return
            self._active.pop(device_id, None)

    @contextmanager
    def activate(self, device_id: str, span: Span | SpanContext) -> Iterator[None]:
        """Mark ``span`` active on ``device_id`` for the ``with`` block."""
        self.set_active(device_id, span)
        try:
            yield
        finally:
            self.clear(device_id, span)

    def lookup(self, device_id: str) -> ExemplarRef | None:
        """The span active on ``device_id``, else (optionally) the current context's span."""
        entry = self._active.get(device_id)
        if entry is not None:
            return entry[1]
        if self.use_current_context:
            return current_span_ref()
        return None

    def covering(self, device_id: str, start_ns: int, end_ns: int) -> ExemplarRef | None:
        """The span to show for ``device_id`` over the sampling interval ``[start_ns, end_ns]``.

        An entry set in this process wins; else the span that ran for most of the interval
        in another process (the :attr:`shared` records, read by the node agent); else, when
        ``use_current_context``, the current context's span.
        """
        entry = self._active.get(device_id)
        if entry is not None:
            return entry[1]
        if self.shared is not None:
            ref = self.shared.covering(device_id, start_ns, end_ns)
            if ref is not None:
                return ref
        if self.use_current_context:
            return current_span_ref()
        return None

    def span_context(self, device_id: str) -> SpanContext | None:
        """The raw span context active on ``device_id`` (for OTLP observation contexts)."""
        entry = self._active.get(device_id)
        if entry is not None:
            return entry[0]
        if self.use_current_context:
            ctx = trace.get_current_span().get_span_context()
            return ctx if ctx.is_valid else None
        return None
