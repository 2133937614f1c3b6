"""Layer-span cost: per-layer span vs a bare SDK span, deferred mode, forward-pass overhead.

Run: ``python benchmarks/instrumentation_layers.py [--layers 200] [--repeat 30]``. Prints a
table with ratios against baselines measured in the same run:

* per-layer cost of ``TorchLayerInstrumentor`` (eager) vs a bare SDK span with the same
  attributes made current (``start_as_current_span``); target <= 1.3x;
* per-layer cost on the workload thread in deferred mode; target <= 2 us;
* forward pass of a small transformer on CPU: uninstrumented vs layer-instrumented (eager,
  deferred) vs ``torch.profiler`` on the same model.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from torch import nn

from otel_ext.instrumentation.torch import TorchLayerInstrumentor


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 20))
    return provider


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.layers
    flat = nn.Sequential(*[nn.Identity() for _ in range(n)])
    x = torch.zeros(1)
    inst = TorchLayerInstrumentor()
    rows: list[tuple[str, float, str]] = []

    bare_fwd = _best(lambda: flat(x), args.repeat)
    provider = _provider()
    tracer = provider.get_tracer("bench")
    attrs = {
        "accel.layer.name": "layers.17", "accel.layer.index": 17, "accel.layer.type": "Identity",
        "accel.layer.depth": 1, "accel.layer.pass": "forward", "accel.layer.parameters": 0,
        "accel.host.id": "h", "accel.device.id": "h/cpu",
    }  # fmt: skip

    def bare_spans() -> None:
        for _ in range(n):
            with tracer.start_as_current_span("accel.layer", attributes=attrs):
                pass

    bare_span = _best(bare_spans, args.repeat) / n
    rows.append(("bare SDK span (current, 8 attrs)", bare_span * 1e6, "1.00x"))

    inst.instrument(tracer_provider=provider, model=flat, host_id="h")
    eager = (_best(lambda: flat(x), args.repeat) - bare_fwd) / n
    inst.uninstrument()
    rows.append(("layer span, eager (hook + span)", eager * 1e6, f"{eager / bare_span:.2f}x"))

    inst.instrument(tracer_provider=provider, model=flat, host_id="h", deferred=True)
    deferred = (_best(lambda: flat(x), args.repeat) - bare_fwd) / n
    inst.flush()
    inst.uninstrument()
    rows.append(
        ("layer span, deferred (workload thread)", deferred * 1e6, f"{deferred / bare_span:.2f}x")
    )

    handles = []
    for m in flat:
        handles.append(m.register_forward_pre_hook(lambda mod, a: None))
        handles.append(
            m.register_forward_hook(lambda mod, a, k, o: None, with_kwargs=True, always_call=True)
        )
    noop = (_best(lambda: flat(x), args.repeat) - bare_fwd) / n
    for h in handles:
        h.remove()
    rows.append(("torch hook dispatch alone (no-op hooks)", noop * 1e6, f"{noop / bare_span:.2f}x"))

    from otel_ext.instrumentation.deferred import DeferredSpanRecorder

    rec = DeferredSpanRecorder(tracer_provider=provider, capacity=1 << 16)
    lid = rec.register("accel.layer", attrs)

    def recorder_only() -> None:
        rec.begin(lid)
        for _ in range(n - 1):
            rec.begin(lid)
            rec.end()
        rec.end()

    rec_cost = _best(recorder_only, args.repeat) / n
    rec.shutdown()
    rows.append(
        ("deferred recorder begin+end only", rec_cost * 1e6, f"{rec_cost / bare_span:.2f}x")
    )

    print(f"per-layer cost, {n} layers (median of {args.repeat})")
    print(f"{'what':42s} {'us/layer':>9s} {'vs bare':>8s}")
    for name, us, ratio in rows:
        print(f"{name:42s} {us:9.2f} {ratio:>8s}")

    # Forward pass of a small transformer.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False).eval()
    inp = torch.randn(8, 64, 128)
    repeat = max(args.repeat // 3, 5)

    def fwd() -> None:
        with torch.no_grad():
            model(inp)

    fwd()
    base = _best(fwd, repeat)
    inst.instrument(tracer_provider=provider, model=model, host_id="h")
    fwd()
    eager_f = _best(fwd, repeat)
    inst.uninstrument()
    inst.instrument(tracer_provider=provider, model=model, host_id="h", deferred=True)
    fwd()
    deferred_f = _best(fwd, repeat)
    inst.flush()
    inst.uninstrument()

    def profiled() -> None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            fwd()

    profiled()
    prof = _best(profiled, repeat)
    print(f"\nforward pass, TransformerEncoder 4x(d=128), batch 8x64, CPU (median of {repeat})")
    print(f"{'what':42s} {'ms':>9s} {'vs bare':>8s}")
    for name, t in (
        ("uninstrumented", base),
        ("TorchLayerInstrumentor eager", eager_f),
        ("TorchLayerInstrumentor deferred", deferred_f),
        ("torch.profiler (CPU activities)", prof),
    ):
        print(f"{name:42s} {t * 1e3:9.3f} {t / base:7.2f}x")
    provider.shutdown()


if __name__ == "__main__":
    main()
