"""Benchmark: the workload's cost of publishing active spans for the node agent.

Three figures, each the best of ``--repeats`` runs of ``--spans`` spans:

* one record update pair (``ActiveSpanRecord.started`` + ``ended``) on its own, in ns;
* the cost per span of a real SDK pipeline (``TracerProvider`` + ``BoundedBatchSpanProcessor``
  to an exporter that drops the batches) for spans carrying ``accel.device.id``, with the
  publishing processor off and on, and their difference and ratio;
* the same through the framework-free API (``otel_ext.instrumentation.layer``).

Run: ``.venv/bin/python benchmarks/active_span_publish.py [--spans 20000] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from exporters import BoundedBatchSpanProcessor
from otel_ext.instrumentation import device_attributes, layer
from otel_ext.instrumentation._active_span import (
    ActiveSpanPublisher,
    ActiveSpanPublishingProcessor,
)
from otel_ext.instrumentation.active_span_record import ActiveSpanRecord


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _best(fn: Callable[[int], None], n: int, repeats: int) -> float:
    """Best time per iteration in ns over ``repeats`` runs of ``n`` iterations."""
    fn(min(n, 1000))  # warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
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

        def updates(k: int) -> None:
            started, ended = rec.started, rec.ended
            for i in range(1, k + 1):
                started(0xABC, i, i)
                ended(0xABC, i, i, i + 1)

        pair_ns = _best(updates, n, repeats)
        rec.close()

        attrs = {**device_attributes("chip0", host_id="bench"), "accel.layer.name": "blocks.0"}
        results: dict[str, float] = {}
        for label, use in (("off", None), ("on", folder)):
            provider, _ = _provider(use)
            tracer = provider.get_tracer("otel_ext.instrumentation")

            def sdk_spans(k: int, tracer=tracer) -> None:
                for _ in range(k):
                    with tracer.start_as_current_span("accel.layer", attributes=attrs):
                        pass

            def api_spans(k: int, provider=provider) -> None:
                for i in range(k):
                    with layer("blocks.0", index=i, attributes=attrs, tracer_provider=provider):
                        pass

            results[f"sdk {label}"] = _best(sdk_spans, n, repeats)
            results[f"api {label}"] = _best(api_spans, n, repeats)
            provider.shutdown()

    print(f"active-span record: started+ended pair {pair_ns:.0f} ns ({pair_ns / 2:.0f} ns/update)")
    for kind in ("sdk", "api"):
        off, on = results[f"{kind} off"], results[f"{kind} on"]
        print(
            f"{kind:>3} span: publishing off {off:.0f} ns, on {on:.0f} ns, "
            f"+{on - off:.0f} ns per span, ratio on/off {on / off:.2f}"
        )


if __name__ == "__main__":
    main()
