"""The same samples as OpenTelemetry observable instruments (for OTLP export).

:class:`OtlpCounterBridge` creates one observable instrument per metric the bridge holds
(counters -> observable counters carrying the monotonic total, up-down counters ->
observable up-down counters, gauges and derived metrics -> observable gauges) on an
injected ``MeterProvider``; each callback reports the bridge's current series. The
exemplar span rides in the observation's context, so the SDK's trace-based exemplar filter
attaches it. Histogram samples are Prometheus-only (the instrumentation records its
histograms directly).

>>> from opentelemetry.sdk.metrics import MeterProvider
>>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
>>> from otel_ext.counters._bridge import CounterBridge
>>> from otel_ext.counters._sim import SimulatedSource, BuiltinSimModel
>>> reader = InMemoryMetricReader(); provider = MeterProvider(metric_readers=[reader])
>>> bridge = CounterBridge([SimulatedSource(BuiltinSimModel(chips=1))])
>>> _ = bridge.open(); otlp = OtlpCounterBridge(bridge, meter_provider=provider)
>>> bridge.sample_once(); bridge.sample_once()
>>> names = {m.name for rm in reader.get_metrics_data().resource_metrics
...          for sm in rm.scope_metrics for m in sm.metrics}
>>> {"hw.power", "accel.device.utilization"} <= names
True
>>> provider.shutdown()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_ext import __version__
from otel_ext.counters._bridge import CounterBridge, Exemplar
from otel_ext.counters._prometheus import help_text
from otel_ext.counters._source import HistogramValue

__all__ = ["OtlpCounterBridge"]

_log = logging.getLogger(__name__)


def _context_of(ex: Exemplar | None) -> Context | None:
    if ex is None:
        return None
    ctx = SpanContext(
        int(ex.ref.trace_id, 16),
        int(ex.ref.span_id, 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(ctx))


class OtlpCounterBridge:
    """Expose a :class:`CounterBridge` through OpenTelemetry observable instruments.

    Args:
        bridge: the counter bridge.
        meter_provider: where the instruments live (default: the global provider).
    """

    def __init__(self, bridge: CounterBridge, *, meter_provider: MeterProvider | None = None):
        self.bridge = bridge
        provider = meter_provider or metrics.get_meter_provider()
        self.meter = provider.get_meter("otel_ext.counters", __version__)
        self._instruments: dict[str, Any] = {}
        self._lock = threading.Lock()
        bridge.on_round.append(self._ensure_instruments)
        self._ensure_instruments(bridge)

    def _ensure_instruments(self, bridge: CounterBridge) -> None:
        for metric, series in bridge.families().items():
            if metric in self._instruments or not series:
                continue
            if isinstance(series[0].value, HistogramValue):
                continue
            with self._lock:
                if metric in self._instruments:
                    continue
                spec = bridge.metric_specs.get(metric, {})
                unit = str(spec.get("unit", ""))
                kind = series[0].instrument
                cb = self._callback(metric)
                desc = help_text(metric)
                inst: Any
                if kind == "counter" and spec.get("monotonic", True):
                    inst = self.meter.create_observable_counter(
                        metric, [cb], unit=unit, description=desc
                    )
                elif kind in ("updowncounter", "counter"):
                    inst = self.meter.create_observable_up_down_counter(
                        metric, [cb], unit=unit, description=desc
                    )
                else:
                    inst = self.meter.create_observable_gauge(
                        metric, [cb], unit=unit, description=desc
                    )
                self._instruments[metric] = inst

    def _callback(self, metric: str) -> Any:
        bridge = self.bridge

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            try:
                series = bridge.read(lambda fams: list(fams.get(metric, {}).values()))
            except Exception as exc:  # never raise into the SDK's collection
                _log.warning("reading series of %s failed: %r", metric, exc)
                return []
            out = []
            for st in series:
                if isinstance(st.value, HistogramValue):
                    continue
                out.append(
                    Observation(float(st.value), dict(st.attributes), _context_of(st.exemplar))
                )
            return out

        return observe
