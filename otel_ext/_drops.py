"""One guard for telemetry failures on the workload's path: log once, count, export.

Every component that must never raise into the workload (the instrumentations' wrappers and
background threads, the exporters, the counter bridge, the clock sampler and processor)
reports a failure the same way: ``ledger.drop(component, reason, ...)``. The contract:

* **never raises** (a broken log handler or meter included);
* **counts** ``count`` items under ``(component, reason[, signal])``, thread-safe;
* **logs** the first drop of each ``(component, reason)`` once, then only counts (a ledger
  made with ``relog_s`` logs the same message again at most once per ``relog_s``: the
  exporters, whose failures come and go with the collector);
* **exports** every count as the ``accel.telemetry.dropped`` counter with the attributes
  ``accel.telemetry.component`` and ``accel.telemetry.reason`` (and ``accel.telemetry.signal``
  when the drop is of one signal's items) through every meter provider it was bound to
  (:meth:`DropLedger.bind`; an observable counter, so binding costs nothing per drop).

:data:`LEDGER` is the process's ledger; the exporters' per-``configure()`` drop counter is a
ledger of its own (so :meth:`~otel_ext.exporters.Telemetry.dropped` counts that set-up's
drops only), bound to the same meter provider.

>>> ledger = DropLedger()
>>> ledger.drop("demo", "queue_full", 3)
>>> ledger.drop("demo", "queue_full")
>>> ledger.totals()
{('demo', 'queue_full', None): 4}
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from otel_ext.semconv.attributes import (
    ACCEL_TELEMETRY_COMPONENT,
    ACCEL_TELEMETRY_REASON,
    ACCEL_TELEMETRY_SIGNAL,
)
from otel_ext.semconv.metrics import METRIC_ACCEL_TELEMETRY_DROPPED

__all__ = ["LEDGER", "DropKey", "DropLedger"]

_log = logging.getLogger("otel_ext")

#: (component, reason, signal or None)
DropKey = tuple[str, str, str | None]


class DropLedger:
    """Counts, logs once and exports the telemetry items a component could not deliver.

    Args:
        logger: where the first drop of each ``(component, reason)`` is logged.
        relog_s: log the same ``(component, reason)`` again after this many seconds
            (``None``: once per ledger's life).
        clock: a monotonic clock in seconds (injected in tests).
        exclude_components: components this ledger does not export (their own ledger does).
        meter_name: the instrumentation scope of its counter (two ledgers bound to one
            meter provider need two scopes: one scope has one instrument of a name).
    """

    def __init__(
        self,
        logger: logging.Logger = _log,
        *,
        relog_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        exclude_components: Iterable[str] = (),
        meter_name: str = "otel_ext",
    ) -> None:
        self._meter_name = meter_name
        self._logger = logger
        self._relog_s = relog_s
        self._clock = clock
        self._lock = threading.Lock()
        self._totals: dict[DropKey, int] = {}
        self._logged: dict[tuple[str, str, object], float] = {}
        self._exclude = frozenset(exclude_components)
        self._bound: weakref.WeakSet[Any] = weakref.WeakSet()
        self._bound_ids: set[int] = set()

    def drop(
        self,
        component: str,
        reason: str,
        count: int = 1,
        *,
        message: str | None = None,
        args: tuple[object, ...] = (),
        signal: str | None = None,
        exc_info: bool = False,
        logger: logging.Logger | None = None,
        quiet: bool = False,
        once_per: object = None,
    ) -> None:
        """Count ``count`` items of ``component`` lost for ``reason``; log the first time.

        ``message % args`` is what the log line says (default: the component, the reason and
        the count); ``count`` 0 logs without counting (a failure that lost nothing yet);
        ``quiet`` counts without logging (the caller logged in its own words); ``once_per``
        (an object: a sampler, a bridge; or a string or tuple key) logs once per
        ``(component, reason)`` *and* that object or key, as a component with several
        instances did before it used the ledger.
        Never raises.
        """
        try:
            now = self._clock()
            scope = (
                once_per if isinstance(once_per, (str, tuple)) or once_per is None else id(once_per)
            )
            key = (component, reason, scope)
            with self._lock:
                if count > 0:
                    full = (component, reason, signal)
                    self._totals[full] = self._totals.get(full, 0) + int(count)
                last = self._logged.get(key)
                log = not quiet and (
                    last is None or (self._relog_s is not None and now - last >= self._relog_s)
                )
                if log:
                    self._logged[key] = now
            if not log:
                return
            text = message if message is not None else "%d item(s) dropped"
            values = args if message is not None else (count,)
            where = (component,) if reason == message else (component, reason)
            (logger or self._logger).warning(
                ("otel-ext %s: " if len(where) == 1 else "otel-ext %s (%s): ") + text,
                *where,
                *values,
                exc_info=exc_info,
            )
        except Exception:  # a broken handler or a bad format must not reach the workload
            pass

    def failed(
        self, component: str, reason: str, exc: BaseException, count: int = 1, **kw: Any
    ) -> None:
        """:meth:`drop` for an exception: its class and text are the message."""
        self.drop(
            component,
            reason,
            count,
            message="%s: %s",
            args=(type(exc).__name__, exc),
            **kw,
        )

    def totals(self) -> dict[DropKey, int]:
        """A copy of the counts, per ``(component, reason, signal)``."""
        with self._lock:
            return dict(self._totals)

    def of(self, component: str) -> dict[str, int]:
        """The counts of one component, per reason (signals summed)."""
        out: dict[str, int] = {}
        for (c, reason, _), n in self.totals().items():
            if c == component:
                out[reason] = out.get(reason, 0) + n
        return out

    def reset(self) -> None:
        """Forget every count and every "already logged" (tests)."""
        with self._lock:
            self._totals.clear()
            self._logged.clear()

    def forget(self, component: str) -> None:
        """Forget one component's counts and logs (tests)."""
        with self._lock:
            for key in [k for k in self._totals if k[0] == component]:
                del self._totals[key]
            for lkey in [k for k in self._logged if k[0] == component]:
                del self._logged[lkey]

    def bind(self, meter_provider: Any) -> bool:
        """Export the counts through ``meter_provider`` from now on (once per provider).

        Returns:
            True when bound now, False when it already was or cannot be (never raises).
        """
        try:
            if meter_provider is None or id(meter_provider) in self._bound_ids:
                return False
            try:
                if meter_provider in self._bound:
                    return False
                self._bound.add(meter_provider)
            except TypeError:  # not weak-referenceable: remember its id
                self._bound_ids.add(id(meter_provider))
            meter = meter_provider.get_meter(self._meter_name)
            meter.create_observable_counter(
                METRIC_ACCEL_TELEMETRY_DROPPED,
                callbacks=[self._observe],
                unit="{item}",
                description="Telemetry items otel-ext could not deliver, per component and reason.",
            )
            return True
        except Exception:
            return False

    def _observe(self, _options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        out = []
        for (component, reason, signal), n in self.totals().items():
            if component in self._exclude:
                continue
            attrs = {ACCEL_TELEMETRY_COMPONENT: component, ACCEL_TELEMETRY_REASON: reason}
            if signal is not None:
                attrs[ACCEL_TELEMETRY_SIGNAL] = signal
            out.append(Observation(n, attrs))
        return out


#: the process's ledger (the exporters' drops are exported by each configure()'s own ledger)
LEDGER = DropLedger(exclude_components=("exporters",))
