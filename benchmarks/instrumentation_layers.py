"""Layer-span cost: per-layer span vs a bare SDK span, deferred mode, forward-pass overhead.

Run: ``python benchmarks/instrumentation_layers.py [--layers 200] [--repeat 30] [--runs 3]``.
Prints tables with ratios against baselines measured in the same run; every figure is the
median over ``--runs`` interleaved runs of the median over ``--repeat`` passes:

* per-layer cost of ``TorchLayerInstrumentor`` (eager) vs a bare SDK span with the same
  attributes made current (``start_as_current_span``); target <= 1.3x;
* per-layer cost on the workload thread in deferred mode (target <= 2 us), for each way of
  attaching (forward wrapper, per-module hooks, global hooks), with the materialiser flushed
  between passes outside the timing, and once with it running concurrently;
* what PyTorch's own hook dispatch costs (an empty hook pair, per-module and global) next to
  an empty forward wrapper, and what the recorder alone costs;
* forward pass of a small transformer on CPU: uninstrumented vs layer-instrumented (eager,
  deferred) vs ``torch.profiler`` on the same model.

``--compile``: instead, ``torch.compile`` (inductor) of a small transformer, uninstrumented
vs ``TorchLayerInstrumentor`` eager vs deferred, each in a fresh interpreter with the
inductor caches off (so every first step compiles from scratch): the first compiled step
(compile + run), the steady step (median of ``--repeat``), and the graph breaks dynamo
counted, with ratios against the uninstrumented run.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from torch import nn

from otel_ext.instrumentation.torch import TorchLayerInstrumentor
from otel_ext.semconv import attributes as A
from otel_ext.semconv.spans import SPAN_ACCEL_LAYER


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=1 << 20))
    return provider


def _median(
    fn: Callable[[], object], repeat: int, between: Callable[[], object] | None = None
) -> float:
    """Median wall time of ``fn``; ``between`` runs after each call, outside the timing."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if between is not None:
            between()
    return statistics.median(times)


def _noop_hooks(flat: nn.Sequential, kind: str) -> list[Any]:
    """Register a no-op hook pair (or forward wrapper); returns the handles."""
    from torch.nn.modules import module as mod

    handles: list[Any] = []
    if kind == "global":
        handles.append(mod.register_module_forward_pre_hook(lambda m, a: None))
        handles.append(mod.register_module_forward_hook(lambda m, a, o: None, always_call=True))
    elif kind == "module":
        for m in flat:
            handles.append(m.register_forward_pre_hook(lambda m, a: None))
            handles.append(m.register_forward_hook(lambda m, a, o: None, always_call=True))
    else:  # an empty forward wrapper, bound like TorchLayerInstrumentor's

        class _Undo:
            def __init__(self, m: nn.Module):
                self.m = m

            def remove(self) -> None:
                del vars(self.m)["forward"]

        for m in flat:
            fn = type(m).forward

            def wrapper(self: nn.Module, *a: Any, _fn: Any = fn, **k: Any) -> Any:
                try:
                    return _fn(self, *a, **k)
                finally:
                    pass

            m.forward = types.MethodType(wrapper, m)  # type: ignore[method-assign]
            handles.append(_Undo(m))
    return handles


def _layer_costs(n: int, repeat: int, runs: int) -> list[tuple[str, float, float]]:
    """(what, us per layer, ratio to a bare SDK span); medians over ``runs`` interleaved runs."""
    flat = nn.Sequential(*[nn.Identity() for _ in range(n)])
    x = torch.zeros(1)
    inst = TorchLayerInstrumentor()
    provider = _provider()
    tracer = provider.get_tracer("bench")
    attrs: dict[str, Any] = {
        A.ACCEL_LAYER_NAME: "layers.17", A.ACCEL_LAYER_INDEX: 17, A.ACCEL_LAYER_TYPE: "Identity",
        A.ACCEL_LAYER_DEPTH: 1, A.ACCEL_LAYER_PASS: "forward", A.ACCEL_LAYER_PARAMETERS: 0,
        A.ACCEL_HOST_ID: "h", A.ACCEL_DEVICE_ID: "h/cpu",
    }  # fmt: skip

    def bare_spans() -> None:
        for _ in range(n):
            with tracer.start_as_current_span(SPAN_ACCEL_LAYER, attributes=attrs):
                pass

    def forward() -> None:
        flat(x)

    def instrumented(*, steady: bool = False, **options: Any) -> Callable[[], float]:
        """Deferred: ``inst.flush()`` between passes, untimed, unless ``steady`` (then the
        materialiser competes for the GIL with the timed passes)."""

        def measure() -> float:
            inst.instrument(tracer_provider=provider, host_id="h", **options)
            try:
                if options.get("deferred") and not steady:
                    return _median(forward, repeat, inst.flush)
                return _median(forward, repeat)
            finally:
                inst.flush()
                inst.uninstrument()

        return measure

    def with_materialisation() -> float:
        """Mean pass time including the final flush: the process's whole cost (spans too)."""
        inst.instrument(tracer_provider=provider, host_id="h", model=flat, deferred=True)
        try:
            inst.flush()
            t0 = time.perf_counter()
            for _ in range(repeat):
                forward()
            inst.flush()
            return (time.perf_counter() - t0) / repeat
        finally:
            inst.uninstrument()

    def noop(kind: str) -> Callable[[], float]:
        def measure() -> float:
            handles = _noop_hooks(flat, kind)
            try:
                return _median(forward, repeat)
            finally:
                for h in handles:
                    h.remove()

        return measure

    from otel_ext.instrumentation.deferred import DeferredSpanRecorder

    rec = DeferredSpanRecorder(tracer_provider=provider, capacity=1 << 16)
    lid = rec.register(SPAN_ACCEL_LAYER, attrs)

    def begin_end() -> float:
        def body() -> None:
            rec.begin(lid)
            for _ in range(n - 1):
                rec.begin(lid)
                rec.end()
            rec.end()

        return _median(body, repeat, rec.flush)

    wrapped_noop = rec.wrap(lambda: None, lid)

    def wrap_only() -> float:
        def body() -> None:
            rec.begin(lid)
            for _ in range(n - 1):
                wrapped_noop()
            rec.end()

        plain = _median(lambda: [None for _ in range(n - 1)], repeat)
        return _median(body, repeat, rec.flush) - plain

    # (label, measure, subtract the bare forward?)
    cases: list[tuple[str, Callable[[], float], bool]] = [
        ("bare SDK span (current, 8 attrs)", lambda: _median(bare_spans, repeat), False),
        ("eager, forward wrapper (default)", instrumented(model=flat), True),
        ("eager, module hooks", instrumented(model=flat, patch_forward=False), True),
        ("deferred, forward wrapper (default)", instrumented(model=flat, deferred=True), True),
        (
            "deferred, module hooks",
            instrumented(model=flat, deferred=True, patch_forward=False),
            True,
        ),
        ("deferred, global hooks", instrumented(deferred=True), True),
        (
            "deferred, wrapper, materialiser running",
            instrumented(model=flat, deferred=True, steady=True),
            True,
        ),
        ("deferred, wrapper, + materialising (mean)", with_materialisation, True),
        ("empty forward wrapper (no recording)", noop("wrapper"), True),
        ("empty module hook pair (torch dispatch)", noop("module"), True),
        ("empty global hook pair (torch dispatch)", noop("global"), True),
        ("recorder begin() + end() calls only", begin_end, False),
        ("recorder wrap() around a no-op only", wrap_only, False),
    ]
    results: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    for _ in range(runs):
        for label, measure, minus_bare in cases:
            bare_fwd = _median(forward, repeat) if minus_bare else 0.0
            results[label].append((measure() - bare_fwd) / n)
    rec.shutdown()
    provider.shutdown()
    bare_span = statistics.median(results[cases[0][0]])
    rows = []
    for label, _, _ in cases:
        cost = statistics.median(results[label])
        rows.append((label, cost * 1e6, cost / bare_span))
    return rows


def _compile_child(mode: str, repeat: int) -> None:
    """One fresh interpreter: compile the model (instrumented per ``mode``), print JSON."""
    import json

    from torch._dynamo.utils import counters

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    inp = torch.randn(4, 32, 64)
    provider = _provider()
    inst = TorchLayerInstrumentor()
    if mode != "uninstrumented":
        inst.instrument(tracer_provider=provider, model=model, deferred=mode == "deferred")
    compiled = torch.compile(model)
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(inp)
        first = time.perf_counter() - t0
        steps = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            compiled(inp)
            steps.append(time.perf_counter() - t0)
    breaks = sum(counters["graph_break"].values())
    print(json.dumps({"first": first, "steady": statistics.median(steps), "breaks": breaks}))


def _compile_table(repeat: int, runs: int) -> None:
    import json
    import os
    import subprocess
    import sys
    import tempfile

    samples: dict[str, list[dict[str, float]]] = {}
    for _ in range(runs):  # interleaved, so a load spike hits one sample, not one mode
        for mode in ("uninstrumented", "eager", "deferred"):
            with tempfile.TemporaryDirectory() as cache:
                env = {
                    **os.environ,
                    "TORCHINDUCTOR_CACHE_DIR": cache,
                    "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                    "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
                }
                out = subprocess.run(
                    [sys.executable, __file__, "--compile-child", mode, "--repeat", str(repeat)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            samples.setdefault(mode, []).append(json.loads(out.strip().splitlines()[-1]))
    rows = {
        mode: {k: statistics.median(r[k] for r in rs) for k in ("first", "steady", "breaks")}
        for mode, rs in samples.items()
    }
    base = rows["uninstrumented"]
    print(
        "torch.compile (inductor), TransformerEncoder 2x(d=64), batch 4x32, CPU, fresh caches; "
        f"median of {runs} interleaved runs"
    )
    print(f"{'what':16s} {'first step s':>13s} {'vs bare':>8s} {'steady ms':>10s} {'vs bare':>8s}"
          f" {'graph breaks':>13s}")  # fmt: skip
    for mode, r in rows.items():
        print(
            f"{mode:16s} {r['first']:13.2f} {r['first'] / base['first']:7.2f}x"
            f" {r['steady'] * 1e3:10.3f} {r['steady'] / base['steady']:7.2f}x {int(r['breaks']):13d}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="the torch.compile comparison")
    parser.add_argument("--compile-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile_child:
        _compile_child(args.compile_child, args.repeat)
        return
    if args.compile:
        _compile_table(args.repeat, args.runs)
        return
    torch.set_num_threads(1)
    n = args.layers
    inst = TorchLayerInstrumentor()
    provider = _provider()
    rows = _layer_costs(n, args.repeat, args.runs)
    print(
        f"per-layer cost, {n} nn.Identity layers "
        f"(median of {args.runs} runs x median of {args.repeat} passes)"
    )
    print(f"{'what':44s} {'us/layer':>9s} {'vs bare':>8s}")
    for name, us, ratio in rows:
        print(f"{name:44s} {us:9.2f} {ratio:7.2f}x")

    # Forward pass of a small transformer.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False).eval()
    inp = torch.randn(8, 64, 128)
    repeat = max(args.repeat // 3, 5)

    def fwd() -> None:
        with torch.no_grad():
            model(inp)

    def traced(**options: Any) -> Callable[[], float]:
        def measure() -> float:
            inst.instrument(tracer_provider=provider, model=model, host_id="h", **options)
            try:
                fwd()
                return _median(fwd, repeat)
            finally:
                inst.flush()
                inst.uninstrument()

        return measure

    def profiled() -> None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            fwd()

    fwd()
    profiled()
    cases: list[tuple[str, Callable[[], float]]] = [
        ("uninstrumented", lambda: _median(fwd, repeat)),
        ("TorchLayerInstrumentor eager", traced()),
        ("TorchLayerInstrumentor eager, module hooks", traced(patch_forward=False)),
        ("TorchLayerInstrumentor deferred", traced(deferred=True)),
        (
            "TorchLayerInstrumentor deferred, module hooks",
            traced(deferred=True, patch_forward=False),
        ),
        ("torch.profiler (CPU activities)", lambda: _median(profiled, repeat)),
    ]
    results: dict[str, list[float]] = {label: [] for label, _ in cases}
    for _ in range(args.runs):
        for label, measure in cases:
            results[label].append(measure())
    base = statistics.median(results["uninstrumented"])
    print(
        f"\nforward pass, TransformerEncoder 4x(d=128), batch 8x64, CPU "
        f"(median of {args.runs} runs x median of {repeat} passes; deferred: materialiser running)"
    )
    print(f"{'what':46s} {'ms':>9s} {'vs bare':>8s}")
    for label, _ in cases:
        t = statistics.median(results[label])
        print(f"{label:46s} {t * 1e3:9.3f} {t / base:7.2f}x")
    provider.shutdown()


if __name__ == "__main__":
    main()
