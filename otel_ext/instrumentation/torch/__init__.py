"""PyTorch instrumentation: ``TorchLayerInstrumentor`` and ``TorchDistributedInstrumentor``.

Both are OpenTelemetry ``BaseInstrumentor`` subclasses (``instrument(tracer_provider=...)``,
``uninstrument()``), registered as ``opentelemetry_instrumentor`` entry points
(``otel_ext_torch_layers``, ``otel_ext_torch_distributed``) so ``opentelemetry-instrument``
can enable them. ``CollectiveTimer`` is the interface of the device-timing provider the
distributed instrumentor takes (``collective_timer=``); ``CudaCollectiveTimer`` is the CUDA
one. Importing this package imports PyTorch.
"""

from __future__ import annotations

from otel_ext.instrumentation.torch._device_timing import (
    CollectiveTimer,
    CudaCollectiveTimer,
    DeviceTiming,
)
from otel_ext.instrumentation.torch._distributed import TorchDistributedInstrumentor
from otel_ext.instrumentation.torch._layers import TorchLayerInstrumentor

__all__ = [
    "CollectiveTimer",
    "CudaCollectiveTimer",
    "DeviceTiming",
    "TorchDistributedInstrumentor",
    "TorchLayerInstrumentor",
]
