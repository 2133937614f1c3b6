"""Clock brackets as ``accel.clock.sync`` spans: emission cost, file size, offline re-fit.

For each duration (issue 4's scenario: a bracket every 100 ms on a 32-bit 1 GHz counter), the
brackets go through the real SDK (BatchSpanProcessor) into an OTLP/JSON file, and
``refit_from_spans(read_spans(...))`` fits them back. The baseline is ``fit_clock`` on the same brackets in
memory, measured in the same run; the re-fit must equal it exactly.

    python benchmarks/clock_export.py [--durations 60 600] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_ext.clocks import emit_clock_sync_spans, fit_clock, refit_from_spans
from otel_ext.clocks.synthetic import alignment_scenario
from otel_ext.exporters import OtlpJsonFileSpanExporter, read_spans

EPOCH = 1_718_000_000_000_000_000


def _best(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(duration_s: float, repeat: int) -> dict[str, float]:
    b = alignment_scenario(duration_s=duration_s, events=10).brackets
    hb, ha, ticks = b.host_before_ns + EPOCH, b.host_after_ns + EPOCH, b.device_ticks
    t_fit, mapping = _best(
        lambda: fit_clock(hb, ticks, ha, counter_bits=32, domain="host0/chip0"), repeat
    )
    folder = Path(tempfile.mkdtemp())
    exporter = OtlpJsonFileSpanExporter(folder / "traces.jsonl")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=8192))
    tracer = provider.get_tracer("bench")
    t0 = time.perf_counter()
    spans = emit_clock_sync_spans(
        tracer, hb, ticks, ha, domain="host0/chip0", counter_bits=32, mapping=mapping
    )
    t_emit = time.perf_counter() - t0
    provider.shutdown()
    size = os.path.getsize(folder / "traces.jsonl")
    t_refit, refit = _best(
        lambda: refit_from_spans(
            read_spans(folder / "traces.jsonl"), source=str(folder / "traces.jsonl")
        ),
        repeat,
    )
    if refit["host0/chip0"].to_dict() != mapping.to_dict():
        raise SystemExit("re-fit differs from the in-memory fit")
    return {
        "brackets": hb.size,
        "spans": spans,
        "emit_ms": t_emit * 1e3,
        "emit_us_per_bracket": t_emit / hb.size * 1e6,
        "bytes_per_bracket": size / hb.size,
        "fit_ms": t_fit * 1e3,
        "refit_ms": t_refit * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", type=float, nargs="+", default=[60.0, 600.0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'duration':>9} {'brackets':>8} {'spans':>5} {'emit':>9} {'per bracket':>11} "
        f"{'B/bracket':>9} {'fit (mem)':>10} {'refit file':>10} {'ratio':>6}"
    )
    for d in args.durations:
        r = run(d, args.repeat)
        print(
            f"{d:8.0f}s {r['brackets']:8d} {r['spans']:5d} {r['emit_ms']:7.1f}ms "
            f"{r['emit_us_per_bracket']:9.2f}µs {r['bytes_per_bracket']:9.0f} "
            f"{r['fit_ms']:8.1f}ms {r['refit_ms']:8.1f}ms {r['refit_ms'] / r['fit_ms']:6.2f}"
        )


if __name__ == "__main__":
    main()
