"""Clock health as OpenTelemetry metrics: bound, offset, drift and samples per domain.

:class:`ClockTelemetry` registers observable instruments on an injected meter provider
(default: the global one). On each collection it reads the current mapping of every domain
in a :class:`~otel_ext.clocks.ClockRegistry`:

* ``accel.clock.bound`` (gauge, ns): the bound at the newest knot;
* ``accel.clock.offset`` (gauge, ns): device time (raw counter, in ns) minus host time there;
* ``accel.clock.drift`` (gauge, ppm): rate error of the newest segment;
* ``accel.clock.samples`` (counter): brackets taken by the domain's sampler.

Every observation carries ``accel.clock.domain`` and ``accel.clock.reference``. Callbacks
never raise: a failing domain is skipped and logged once. The raw brackets and the fitted
mappings themselves export as ``accel.clock.sync`` spans
(:class:`~otel_ext.clocks.ClockSyncSpanEmitter`), for offline re-fits
(:func:`~otel_ext.clocks.refit_from_spans`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from otel_ext._drops import LEDGER
from otel_ext.clocks._errors import COMPONENT
from otel_ext.clocks._mapping import ClockMapping
from otel_ext.clocks.runtime._sampler import ClockRegistry
from otel_ext.semconv.attributes import ACCEL_CLOCK_DOMAIN, ACCEL_CLOCK_REFERENCE
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_CLOCK_BOUND,
    METRIC_ACCEL_CLOCK_DRIFT,
    METRIC_ACCEL_CLOCK_OFFSET,
    METRIC_ACCEL_CLOCK_SAMPLES,
)

__all__ = ["ClockTelemetry"]

_log = logging.getLogger(__name__)


class ClockTelemetry:
    """Observable ``accel.clock.*`` instruments over a :class:`ClockRegistry`.

    Args:
        registry: the domains to report.
        meter_provider: where to register (default: the global meter provider).
        reference: the reference clock's name (``accel.clock.reference``).
    """

    def __init__(
        self,
        registry: ClockRegistry,
        *,
        meter_provider: MeterProvider | None = None,
        reference: str = "host",
    ) -> None:
        self.registry = registry
        self.reference = reference
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("otel_ext.clocks")
        meter.create_observable_gauge(
            METRIC_ACCEL_CLOCK_BOUND,
            [self._make(lambda m: float(m.knot_bound_ns[-1]) + 0.5 * m.tick_ns + 0.5)],
            unit="ns",
            description="Current alignment error bound of a clock domain.",
        )
        meter.create_observable_gauge(
            METRIC_ACCEL_CLOCK_OFFSET,
            [self._make(lambda m: m.offset_ns())],
            unit="ns",
            description="Device time minus host time at the newest clock sample.",
        )
        meter.create_observable_gauge(
            METRIC_ACCEL_CLOCK_DRIFT,
            [self._make(lambda m: float(m.drift_ppm()))],
            unit="[ppm]",
            description="Rate error of a clock domain against its reference.",
        )
        meter.create_observable_counter(
            METRIC_ACCEL_CLOCK_SAMPLES,
            [self._samples],
            unit="{sample}",
            description="Clock brackets taken for a clock domain.",
        )

    def _attrs(self, domain: str) -> dict[str, str]:
        return {ACCEL_CLOCK_DOMAIN: domain, ACCEL_CLOCK_REFERENCE: self.reference}

    def _make(
        self, value: Callable[[ClockMapping], float]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            out = []
            for domain in self.registry.domains():
                try:
                    m = self.registry.mapping(domain)
                    if isinstance(m, ClockMapping):
                        out.append(Observation(value(m), self._attrs(domain)))
                except Exception as exc:
                    self._log_once(exc)
            return out

        return callback

    def _samples(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for domain in self.registry.domains():
            sampler = self.registry.sampler(domain)
            if sampler is not None:
                out.append(Observation(sampler.samples_taken, {ACCEL_CLOCK_DOMAIN: domain}))
        return out

    def _log_once(self, exc: BaseException) -> None:
        LEDGER.drop(
            COMPONENT,
            "telemetry_callback_failed",
            message="clock telemetry callback failed (logged once): %r",
            args=(exc,),
            logger=_log,
            once_per=self,
        )
