"""Drop accounting and rate-limited failure logging for the export path.

Exporting must never hurt the workload, so export failures are not raised: they are
counted, exported as the ``accel.telemetry.dropped`` counter (attribute
``accel.telemetry.signal``), and logged at most once per interval per message.

>>> counter = DropCounter()
>>> counter.add(3, signal="traces")
>>> counter.totals()
{'traces': 3}
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from opentelemetry.metrics import Counter, MeterProvider

from otel_ext.semconv.attributes import ACCEL_TELEMETRY_SIGNAL
from otel_ext.semconv.metrics import METRIC_ACCEL_TELEMETRY_DROPPED

__all__ = ["DropCounter", "RateLimitedLog"]

_log = logging.getLogger("otel_ext.exporters")


class RateLimitedLog:
    """Log each distinct message at most once per ``interval_s`` (never raises).

    Args:
        logger: where to log.
        interval_s: the shortest time between two records of the same message.
        clock: a monotonic clock in seconds (injected in tests).
    """

    def __init__(
        self,
        logger: logging.Logger = _log,
        *,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def warning(self, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``message % args`` unless it was logged within the interval; True if logged."""
        now = self._clock()
        with self._lock:
            last = self._last.get(message)
            if last is not None and now - last < self._interval_s:
                return False
            self._last[message] = now
        try:
            self._logger.warning(message, *args, exc_info=exc_info)
        except Exception:  # pragma: no cover - a broken handler must not reach the caller
            pass
        return True


class DropCounter:
    """Counts telemetry items dropped on the way out, per signal, and exports the count.

    :meth:`add` is safe to call from any thread, including a workload thread, and never
    raises.

    Args:
        meter_provider: where the ``accel.telemetry.dropped`` counter lives; ``None`` keeps
            the totals in memory only.
    """

    def __init__(self, meter_provider: MeterProvider | None = None):
        self._lock = threading.Lock()
        self._totals: dict[str, int] = {}
        self._counter: Counter | None = None
        if meter_provider is not None:
            self.bind(meter_provider)

    def bind(self, meter_provider: MeterProvider) -> None:
        """Export the counts through ``meter_provider`` from now on."""
        meter = meter_provider.get_meter("otel_ext.exporters")
        self._counter = meter.create_counter(
            METRIC_ACCEL_TELEMETRY_DROPPED,
            unit="{item}",
            description="Telemetry items dropped because an exporter was slow or unreachable.",
        )

    def add(self, count: int, *, signal: str) -> None:
        """Record ``count`` items of ``signal`` (``traces``, ``metrics``, ``logs``) dropped."""
        if count <= 0:
            return
        with self._lock:
            self._totals[signal] = self._totals.get(signal, 0) + count
        counter = self._counter
        if counter is not None:
            try:
                counter.add(count, {ACCEL_TELEMETRY_SIGNAL: signal})
            except Exception:  # pragma: no cover - the SDK does not raise here
                pass

    def totals(self) -> dict[str, int]:
        """The items dropped so far, per signal."""
        with self._lock:
            return dict(self._totals)
