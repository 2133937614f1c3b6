"""The clocks at run time: sampler threads, span alignment, clock telemetry and sync spans.

Everything in :mod:`otel_ext.clocks` that runs beside the workload and touches
OpenTelemetry lives here; the estimation math it calls (:func:`~otel_ext.clocks.fit_clock`,
:class:`~otel_ext.clocks.ClockMapping`, ...) stays pure, in :mod:`otel_ext.clocks`:

* :class:`ClockSampler` takes brackets from a device-timestamp reader on a daemon thread;
  :class:`ClockRegistry` holds the sampler or fixed mapping of each clock domain;
* :class:`ClockReconcilingSpanProcessor` and :func:`record_device_span` put device spans on
  the aligned timeline;
* :class:`ClockTelemetry` exports clock health as ``accel.clock.*`` metrics;
* :class:`ClockSyncSpanEmitter` and :func:`emit_clock_sync_spans` export brackets and fitted
  mappings as ``accel.clock.sync`` spans.

Every name is re-exported by :mod:`otel_ext.clocks`, which is where callers import them.

>>> from otel_ext.clocks import ClockSampler as Public
>>> Public is ClockSampler
True
"""

from otel_ext.clocks.runtime._export import ClockSyncSpanEmitter, emit_clock_sync_spans
from otel_ext.clocks.runtime._sampler import ClockRegistry, ClockSampler
from otel_ext.clocks.runtime._spans import ClockReconcilingSpanProcessor, record_device_span
from otel_ext.clocks.runtime._telemetry import ClockTelemetry

__all__ = [
    "ClockReconcilingSpanProcessor",
    "ClockRegistry",
    "ClockSampler",
    "ClockSyncSpanEmitter",
    "ClockTelemetry",
    "emit_clock_sync_spans",
    "record_device_span",
]
