"""Drop accounting and rate-limited failure logging for the export path.

Exporting must never hurt the workload, so export failures are not raised: they are
counted and logged through the one guard every otel-ext component uses
(:class:`otel_ext._drops.DropLedger`: never raises, logs the first failure of each kind,
counts, exports ``accel.telemetry.dropped`` with ``accel.telemetry.component``,
``accel.telemetry.reason`` and ``accel.telemetry.signal``). The exporters' ledger logs the same
failure again at most once a minute (a collector comes and goes); each ``configure()`` has its
own :class:`DropCounter`, so :meth:`~otel_ext.exporters.Telemetry.dropped` counts that
set-up's drops only. Binding one also exports the process's other components' drops
(instrumentation, clocks, counters) through the same meter provider.

>>> counter = DropCounter()
>>> counter.add(3, signal="traces", reason="queue_full")
>>> counter.totals()
{'traces': 3}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from opentelemetry.metrics import MeterProvider

from otel_ext._drops import LEDGER, DropLedger

__all__ = ["COMPONENT", "DropCounter", "RateLimitedLog"]

_log = logging.getLogger("otel_ext.exporters")

#: the ``accel.telemetry.component`` of every exporter drop
COMPONENT = "exporters"


class RateLimitedLog:
    """Log each distinct message at most once per ``interval_s`` (never raises).

    A log-only use of the guard: the message is the reason, nothing is counted (what was
    lost is counted by :class:`DropCounter` where it is lost).

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
        self._ledger = DropLedger(logger, relog_s=interval_s, clock=clock)

    def warning(self, message: str, *args: object, exc_info: bool = False) -> None:
        """Log ``message % args`` unless it was logged within the interval."""
        self._ledger.drop(COMPONENT, message, 0, message=message, args=args, exc_info=exc_info)


class DropCounter:
    """Counts telemetry items dropped on the way out, per signal and reason, and exports them.

    :meth:`add` is safe to call from any thread, including a workload thread, and never
    raises.

    Args:
        meter_provider: where the ``accel.telemetry.dropped`` counter is exported; ``None``
            keeps the totals in memory only until :meth:`bind`.
    """

    def __init__(self, meter_provider: MeterProvider | None = None):
        self._ledger = DropLedger(_log, relog_s=60.0, meter_name="otel_ext.exporters")
        if meter_provider is not None:
            self.bind(meter_provider)

    def bind(self, meter_provider: MeterProvider) -> None:
        """Export these counts, and the process's other components' drops, through
        ``meter_provider`` from now on."""
        self._ledger.bind(meter_provider)
        LEDGER.bind(meter_provider)

    def add(self, count: int, *, signal: str, reason: str = "export_failed") -> None:
        """Record ``count`` items of ``signal`` (``traces``, ``metrics``) dropped for ``reason``."""
        if count > 0:
            # logged where the drop happens, with its own words: only counted here
            self._ledger.drop(COMPONENT, reason, count, signal=signal, quiet=True)

    def totals(self) -> dict[str, int]:
        """The items dropped so far, per signal."""
        out: dict[str, int] = {}
        for (_, _, signal), n in self._ledger.totals().items():
            out[str(signal)] = out.get(str(signal), 0) + n
        return out

    def by_reason(self) -> dict[str, int]:
        """The items dropped so far, per reason."""
        return self._ledger.of(COMPONENT)
