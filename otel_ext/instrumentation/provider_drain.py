"""The tracer provider's ``force_flush()`` and ``shutdown()`` drain otel-ext's background spans first.

otel-ext makes some spans off the workload thread, after the work they describe: the
collective drain (a thread, or a drain process of its own), the deferred layer recorder, the
CUDA-event device spans, the collective timer's device intervals. OpenTelemetry's contract is
that ``TracerProvider.force_flush()`` exports every span of work done before it and that
``shutdown()`` loses none; a span that is still a record in one of those queues when the
exporter's processor flushes is not exported by that flush (and after ``shutdown()`` it is
lost: the SDK logs "Already shutdown, dropping span").

:class:`BackgroundSpanDrain` is a span processor registered once per tracer provider (the one
an instrumentor was given, else the global one): it does nothing per span, and its
``force_flush``/``shutdown`` first *drain* every background producer registered with it
(:func:`register`), so that their spans reach the exporters' processors before those flush.

**Order.** The SDK's ``SynchronousMultiSpanProcessor`` (the default) flushes and shuts down its
processors in the order they were added, and the OpenTelemetry API has no public way to add a
processor in front. The drain must run before the ``BatchSpanProcessor``/``SimpleSpanProcessor``
already there, so it is put at the front of the provider's ``_active_span_processor.
_span_processors`` tuple, under that object's own lock (the same lock and the same tuple
replacement ``add_span_processor`` uses). A provider without that tuple gets the drain through
``add_span_processor`` (last: a flush exports what was drained only by the next flush), and a
``ConcurrentMultiSpanProcessor`` flushes its processors in parallel, so no order holds there:
both are logged once. This is the one private reach-in of the module; it is tested against
the SDK version the project pins (``tests/instrumentation/test_flush_contract.py``).

**Time.** ``force_flush(timeout_millis)`` spends at most three quarters of the caller's
timeout draining (the rest is left to the exporters); ``shutdown()`` (the SDK gives no
timeout) at most ``OTEL_EXT_EXPORT_TIMEOUT_S``. Whatever is still a record when the time is
up is counted as dropped (``accel.telemetry.dropped{component="instrumentation",
reason="flush_timeout"|"shutdown_timeout"}``; after a ``force_flush`` those spans still come,
later) and the call returns ``False``; the exporters' processors are flushed anyway.

**At interpreter exit** the SDK's ``atexit`` hook calls ``TracerProvider.shutdown()``, which
runs this drain first, whichever of the provider and the instrumentors was made first.

Threading and blocking contract: ``on_start``/``on_end`` do nothing; ``force_flush`` and
``shutdown`` block the calling thread for at most their bound, may be called from any thread
(a call from inside a drain, on the same thread, returns at once) and never raise.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
>>> class Queue:
...     def flush(self, timeout=None): return True
...     def pending(self): return 0
>>> queue = Queue()
>>> binding = register(queue, provider)
>>> type(provider._active_span_processor._span_processors[0]).__name__
'BackgroundSpanDrain'
>>> provider.force_flush()
True
>>> binding.close()
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Protocol

from opentelemetry import trace

from otel_ext import config
from otel_ext._drops import LEDGER
from otel_ext.instrumentation._common import COMPONENT, log_once

__all__ = ["BackgroundSpanDrain", "DrainBinding", "Drainable", "drain_provider", "register"]

#: share of a force_flush's timeout the drain may spend (the rest is the exporters')
FLUSH_SHARE = 0.75


class Drainable(Protocol):
    """A background span producer: :meth:`flush` turns every record so far into spans."""

    def flush(self, timeout: float | None = ...) -> bool:
        """Block until every record so far is a span; False when out of time."""
        ...

    def pending(self) -> int:
        """Records not yet made into spans (what a timeout would cost)."""
        ...


_DRAINS: weakref.WeakKeyDictionary[Any, BackgroundSpanDrain] = weakref.WeakKeyDictionary()
_DRAINS_LOCK = threading.Lock()
_local = threading.local()


class BackgroundSpanDrain:
    """A span processor whose flush and shutdown drain otel-ext's background producers.

    Implements the SDK's ``SpanProcessor`` interface by duck typing (the instrumentations
    depend on the OpenTelemetry API only); see the module docstring for its contract.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: list[weakref.ref[Any]] = []
        self._shut = False

    # -- the SDK's per-span calls: nothing to do ------------------------------------------
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing."""

    def _on_ending(self, span: Any) -> None:
        """Nothing."""

    def on_end(self, span: Any) -> None:
        """Nothing."""

    # -- producers -------------------------------------------------------------------------
    def add(self, target: Drainable) -> None:
        """Drain ``target`` from now on (held weakly)."""
        with self._lock:
            self._targets = [r for r in self._targets if r() is not None] + [weakref.ref(target)]

    def remove(self, target: Drainable) -> None:
        """Stop draining ``target``."""
        with self._lock:
            self._targets = [r for r in self._targets if r() not in (None, target)]

    def targets(self) -> list[Drainable]:
        """The producers drained now."""
        with self._lock:
            refs = list(self._targets)
        return [t for t in (r() for r in refs) if t is not None]

    def drain(self, timeout_s: float | None, *, reason: str = "flush_timeout") -> bool:
        """Flush every producer within ``timeout_s`` in all; count what did not make it.

        Returns:
            True when every record became a span in time. Never raises.
        """
        if getattr(_local, "draining", False):
            return True  # called from inside a drain: the outer one does the work
        _local.draining = True
        try:
            deadline = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
            ok = True
            for target in self.targets():
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                try:
                    done = bool(target.flush(left))
                except Exception as exc:
                    log_once("drain.flush", "%s: %s", type(exc).__name__, exc)
                    done = False
                if not done:
                    ok = False
                    try:
                        lost = int(target.pending())
                    except Exception:
                        lost = 0
                    LEDGER.drop(
                        COMPONENT,
                        reason,
                        lost,
                        message="%s: %d record(s) not made into spans in time",
                        args=(type(target).__name__, lost),
                    )
            return ok
        finally:
            _local.draining = False

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Drain the producers within three quarters of ``timeout_millis``."""
        if self._shut:
            return True
        return self.drain(max(timeout_millis, 0) / 1000 * FLUSH_SHARE, reason="flush_timeout")

    def shutdown(self) -> None:
        """Drain the producers within ``OTEL_EXT_EXPORT_TIMEOUT_S``, once."""
        if self._shut:
            return
        try:
            bound = float(config.resolve(config.EXPORT_TIMEOUT_S))
        except Exception:
            bound = 10.0
        self.drain(bound, reason="shutdown_timeout")
        self._shut = True


def _sdk_processors(provider: Any) -> Any:
    active = getattr(provider, "_active_span_processor", None)
    procs = getattr(active, "_span_processors", None)
    lock = getattr(active, "_lock", None)
    if isinstance(procs, tuple) and lock is not None:
        return active
    return None


def _drain_of(provider: Any) -> BackgroundSpanDrain | None:
    """The provider's drain processor, made and put in front on first use; ``None`` for a
    provider that is not the SDK's (a proxy, a no-op one)."""
    if provider is None or not hasattr(provider, "add_span_processor"):
        return None
    with _DRAINS_LOCK:
        try:
            drain = _DRAINS.get(provider)
        except TypeError:  # not weak-referenceable: no registration
            return None
        if drain is not None:
            return drain
        drain = BackgroundSpanDrain()
        active = _sdk_processors(provider)
        if active is not None:
            with active._lock:
                active._span_processors = (drain, *active._span_processors)
            if type(active).__name__ == "ConcurrentMultiSpanProcessor":
                log_once(
                    "drain.order",
                    "the tracer provider flushes its processors in parallel: background spans "
                    "drained by a force_flush() are exported by the next one",
                    exc_info=False,
                )
        else:
            provider.add_span_processor(drain)
            log_once(
                "drain.order",
                "%s has no processor tuple to put the drain in front of: background spans "
                "drained by a force_flush() are exported by the next one",
                type(provider).__name__,
                exc_info=False,
            )
        _DRAINS[provider] = drain
        return drain


class DrainBinding:
    """One producer's registration with a tracer provider's drain (see :func:`register`).

    When the producer was given no provider and the global one is still OpenTelemetry's
    proxy, the registration waits: :meth:`ensure` (one attribute test when bound; the
    producers call it from their background loops and flushes) binds once the global
    provider is an SDK one.
    """

    def __init__(self, target: Drainable, tracer_provider: Any) -> None:
        self._target = weakref.ref(target)
        self._given = tracer_provider
        self._drain: BackgroundSpanDrain | None = None
        self._closed = False
        self.ensure()

    @property
    def bound(self) -> bool:
        """Whether the producer is drained by a provider now."""
        return self._drain is not None

    def ensure(self) -> None:
        """Bind to the provider's drain if not bound yet; never raises."""
        if self._drain is not None or self._closed:
            return
        try:
            provider = self._given if self._given is not None else trace.get_tracer_provider()
            drain = _drain_of(provider)
            target = self._target()
            if drain is not None and target is not None:
                drain.add(target)
                self._drain = drain
        except Exception as exc:
            log_once("drain.register", "%s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        """Stop draining the producer (its own shutdown drained it); idempotent."""
        self._closed = True
        drain, self._drain = self._drain, None
        target = self._target()
        if drain is not None and target is not None:
            drain.remove(target)


def register(target: Drainable, tracer_provider: Any = None) -> DrainBinding:
    """Have ``tracer_provider``'s ``force_flush()``/``shutdown()`` drain ``target`` first.

    Args:
        target: the producer (held weakly).
        tracer_provider: the provider its spans go to; the global one when ``None``.

    Returns:
        The binding; :meth:`DrainBinding.close` it when the producer shuts down.
    """
    return DrainBinding(target, tracer_provider)


def drain_provider(
    tracer_provider: Any, timeout_s: float | None, *, reason: str = "flush_timeout"
) -> bool:
    """Drain the producers registered with ``tracer_provider`` (True when there are none).

    For code that flushes a provider's processors one by one (``Telemetry.force_flush``)
    rather than through the provider. Never raises.
    """
    try:
        with _DRAINS_LOCK:
            drain = _DRAINS.get(tracer_provider)
    except TypeError:
        return True
    return True if drain is None else drain.drain(timeout_s, reason=reason)
