"""Cost of writing an ended span: the SDK's API path against the short path.

Run: ``python benchmarks/finished_spans.py [--spans 5000] [--repeat 7]``.

Both write the collective drain's span (22 attributes: the collective's 13 and the identity's)
to an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` and an in-memory exporter, in the
context of a parent span, alternating repeat by repeat; the figure is the calling thread's
CPU per span (``time.thread_time_ns``), the median over repeats, and the ratio between them.
Also the drain's batch writer (``FinishedSpans.writer()``: the checks once per batch, the
attribute dict taken without a copy), and the duration histogram's ``record`` with an exemplar
context against the drain's ``BoundHistogram`` (the per-collective metric work; the three
counters are added once per drain batch).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext.instrumentation.bound_histogram import BoundHistogram
from otel_ext.instrumentation.finished_spans import FinishedSpans

ATTRS = {
    "accel.collective.op": "all_reduce",
    "accel.collective.group": "default_pg",
    "accel.collective.group.size": 8,
    "accel.collective.rank": 3,
    "accel.collective.bytes": 1 << 20,
    "accel.collective.seq": 1234,
    "accel.collective.id": "default_pg:1234",
    "accel.collective.dtype": "float32",
    "accel.collective.async": False,
    "accel.collective.enqueue_start_ns": 1_700_000_000_000_000_000,
    "accel.collective.enqueue_end_ns": 1_700_000_000_000_010_000,
    "accel.collective.timing": "host",
    "accel.clock.uncertainty_ns": 250.0,
    "accel.collective.algbw": 12.5,
    "accel.collective.busbw": 21.9,
    "accel.host.id": "node17",
    "accel.device.id": "node17/chip3",
    "accel.rank": 3,
    "accel.device.kind": "gpu",
    "accel.device.vendor": "nvidia",
    "accel.device.model": "H200",
    "accel.device.index": 3,
}


def _per_span(fn: Callable[[], object], n: int) -> float:
    c0 = time.thread_time_ns()
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - c0) / n / 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 20))
    tracer = provider.get_tracer("otel_ext.instrumentation", "0.1.0")
    short = FinishedSpans(tracer)
    assert short.short_path, "the short path is not available with this SDK"
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench")
    hist = meter.create_histogram("accel.collective.duration", unit="s")
    with tracer.start_as_current_span("step"):
        ctx = trace.set_span_in_context(trace.get_current_span())

    def api() -> None:
        span = tracer.start_span(
            "accel.collective", context=ctx, attributes=dict(ATTRS), start_time=1_000
        )
        span.end(end_time=2_000)

    def fast() -> None:
        short.write(
            "accel.collective", context=ctx, attributes=dict(ATTRS), start_ns=1_000, end_ns=2_000
        )

    metric_attrs = {k: ATTRS[k] for k in ("accel.collective.op", "accel.collective.group")}
    bound = BoundHistogram(hist, metric_attrs)
    assert bound.bound, "the bound histogram's short cut is not available with this SDK"
    batch = short.writer(owned=True)

    def histogram() -> None:
        hist.record(1e-5, metric_attrs, context=ctx)

    def bound_histogram() -> None:
        bound.record(1e-5, ctx)

    def writer() -> None:
        batch("accel.collective", ctx, dict(ATTRS), (), 1_000, 2_000, None)

    fns = {
        "API path": api,
        "short path": fast,
        "batch writer": writer,
        "histogram": histogram,
        "bound histogram": bound_histogram,
    }
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.repeat):
        for name, fn in fns.items():
            samples[name].append(_per_span(fn, args.spans))
            provider.force_flush()
            exporter.clear()
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{args.spans} spans x {args.repeat} repeats, thread-CPU per span (median):")
    for k, v in med.items():
        print(f"  {k:15s} {v:6.2f} us")
    print(f"  short path / API path: {med['short path'] / med['API path']:.2f}x")
    print(f"  batch writer / API path: {med['batch writer'] / med['API path']:.2f}x")
    print(f"  bound histogram / histogram: {med['bound histogram'] / med['histogram']:.2f}x")
    provider.shutdown()


if __name__ == "__main__":
    main()
