"""Instrumentation: model-layer, collective, device-activity and inference-request spans.

* :mod:`otel_ext.instrumentation.api` — framework-free context managers and decorators
  (:func:`layer`, :func:`collective`, :func:`request`, :func:`phase`) and after-the-fact device
  activity from device-clock timestamps (:func:`record_device_activity`);
* :mod:`otel_ext.instrumentation.torch` — ``TorchLayerInstrumentor`` and
  ``TorchDistributedInstrumentor`` (import it explicitly; it needs PyTorch);
* :mod:`otel_ext.instrumentation.inference` — request spans and TTFT/TPOT histograms;
* :mod:`otel_ext.instrumentation.deferred` — the deferred span recorder (hot path records,
  a background thread materialises spans);
* :mod:`otel_ext.instrumentation.collectives` — bus-bandwidth factors, ids, sequences;
* :mod:`otel_ext.instrumentation.estimators` — FLOP and byte estimates per layer kind.

Everything depends on the OpenTelemetry API only; providers are injected.
"""

from __future__ import annotations

from otel_ext.instrumentation._common import DROPS, device_attributes
from otel_ext.instrumentation.api import (
    ClockMappingLike,
    SpanScope,
    collective,
    layer,
    phase,
    record_device_activity,
    record_link_transfer,
    request,
)

__all__ = [
    "DROPS",
    "ClockMappingLike",
    "SpanScope",
    "collective",
    "device_attributes",
    "layer",
    "phase",
    "record_device_activity",
    "record_link_transfer",
    "request",
]
