"""Benchmark: the workload's cost of publishing active spans for the node agent.

Four figures, each the best of ``--repeats`` interleaved runs of ``--spans`` spans (the
workload thread's CPU time, the garbage collector off while timing; off and on alternate so
that machine load hits both):

* one record update pair (``ActiveSpanRecord.started`` + ``ended``) on its own, in ns
  (the cost of an empty loop iteration, measured in the same run, subtracted);
* the cost per span of a real SDK pipeline (``TracerProvider`` + ``BoundedBatchSpanProcessor``
  to an exporter that drops the batches) for spans carrying ``accel.device.id``, with the
  publishing processor off and on, and their difference and ratio;
* the same through the framework-free API (``otel_ext.instrumentation.layer``);
* the node agent's cost per device per round (:meth:`SharedActiveSpanReader.covering` over
  a full record: folder scan, consistent copy, decode, running-time sweep).

Run: ``.venv/bin/python benchmarks/active_span_publish.py [--spans 20000] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ext.counters import SharedActiveSpanReader
from otel_ext.exporters import BoundedBatchSpanProcessor
from otel_ext.instrumentation import device_attributes, layer
from otel_ext.instrumentation.active_span import (
    ActiveSpanPublisher,
    ActiveSpanPublishingProcessor,
)
from otel_ext.instrumentation.active_span_record import ActiveSpanRecord


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _time(fn: Callable[[int], None], n: int) -> float:
    """CPU time of this thread per iteration in ns, one run of ``n`` iterations (GC off).

    Thread CPU time, not wall time: on a shared machine the wall clock also counts the time
    other processes held the CPU, and the batch exporter's own thread is not the workload's.
    """
    gc.collect()
    gc.disable()
    try:
        t0 = time.thread_time_ns()
        fn(n)
        return (time.thread_time_ns() - t0) / n
    finally:
        gc.enable()


def _best_interleaved(
    fns: dict[str, Callable[[int], None]], n: int, repeats: int
) -> dict[str, float]:
    """Best time per iteration of each function, runs interleaved (load hits all alike)."""
    for fn in fns.values():
        fn(min(n, 1000))  # warm up
    best = {label: float("inf") for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            best[label] = min(best[label], _time(fn, n))
    return best


def _provider(folder: str | None) -> tuple[TracerProvider, ActiveSpanPublishingProcessor | None]:
    provider = TracerProvider()
    provider.add_span_processor(
        BoundedBatchSpanProcessor(_Discard(), max_queue_size=1 << 20, max_export_batch_size=4096)
    )
    publishing = None
    if folder is not None:
        publishing = ActiveSpanPublishingProcessor(ActiveSpanPublisher(folder))
        provider.add_span_processor(publishing)
    return provider, publishing


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    n, repeats = args.spans, args.repeats

    with tempfile.TemporaryDirectory() as folder:
        rec = ActiveSpanRecord("bench/chip0", folder)
        trace_id = 0x5B8AA5A2D2C872E8321CF37308D69DF2

        def updates(k: int) -> None:
            started, ended = rec.started, rec.ended
            for i in range(1, k + 1):
                started(trace_id, i, i)
                ended(trace_id, i, i, i + 1)

        def empty_loop(k: int) -> None:
            for _ in range(1, k + 1):
                pass

        raw = _best_interleaved({"loop": empty_loop, "pair": updates}, n, repeats)
        pair_ns = raw["pair"] - raw["loop"]
        # the agent's side: one device's full record (256 ended spans, one open) per round
        rec.started(trace_id, 1 << 40, n)
        reader = SharedActiveSpanReader(folder)

        def agent_rounds(k: int) -> None:
            for i in range(k):
                reader.covering("bench/chip0", i, n + 2 + i)

        reader_us = _best_interleaved({"agent": agent_rounds}, 200, repeats)["agent"] / 1000
        reader.close()
        rec.close()

        attrs = {**device_attributes("chip0", host_id="bench"), "accel.layer.name": "blocks.0"}
        fns: dict[str, Callable[[int], None]] = {}
        providers = []
        for label, use in (("off", None), ("on", folder)):
            provider, _ = _provider(use)
            providers.append(provider)
            tracer = provider.get_tracer("otel_ext.instrumentation")

            def sdk_spans(k: int, tracer=tracer) -> None:
                for _ in range(k):
                    with tracer.start_as_current_span("accel.layer", attributes=attrs):
                        pass

            def api_spans(k: int, provider=provider) -> None:
                for i in range(k):
                    with layer("blocks.0", index=i, attributes=attrs, tracer_provider=provider):
                        pass

            fns[f"sdk {label}"] = sdk_spans
            fns[f"api {label}"] = api_spans
        results = _best_interleaved(fns, n, repeats)
        for provider in providers:
            provider.shutdown()

    print(f"active-span record: started+ended pair {pair_ns:.0f} ns ({pair_ns / 2:.0f} ns/update)")
    print(f"agent: one device's coverage per round (full record, folder scan) {reader_us:.0f} us")
    for kind in ("sdk", "api"):
        off, on = results[f"{kind} off"], results[f"{kind} on"]
        print(
            f"{kind:>3} span: publishing off {off:.0f} ns, on {on:.0f} ns, "
            f"+{on - off:.0f} ns per span, ratio on/off {on / off:.2f}"
        )


if __name__ == "__main__":
    main()
