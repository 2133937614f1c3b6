"""Benchmark: scrape latency and sampling CPU of the counter bridge, 64 devices x 50 counters.

Baseline, measured in the same run: the naive exporter, one ``prometheus_client.Gauge``
per counter (labelled by device) set on each round and scraped with ``generate_latest``.
Target: our scrape at most half the naive scrape time. Also reports the sampling cost per
second at 10 Hz (one round = every source read, counters unfolded, derived metrics).

    python benchmarks/counters_scrape.py [--devices 64] [--counters 50] [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from otel_ext.counters import BaseSource, CounterBridge, CounterCollector, Sample
from otel_ext.exporters._prometheus_mapping import prometheus_name, sanitize_label
from otel_ext.semconv.attributes import (
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_MODEL,
    ACCEL_HOST_ID,
    ERROR_TYPE,
)
from otel_ext.semconv.metrics import METRIC_SPECS


def counter_set(n: int) -> list[tuple[str, str]]:
    """``n`` (metric, variant) pairs from the registry's base scalar metrics."""
    base = sorted(
        m
        for m, s in METRIC_SPECS.items()
        if s["class"] == "base" and s["instrument"] != "histogram"
    )
    return [(base[i % len(base)], f"v{i // len(base)}") for i in range(n)]


class SyntheticSource(BaseSource):
    name = "synthetic"

    def __init__(self, devices: int, counters: list[tuple[str, str]]):
        self.devices = [
            {
                ACCEL_DEVICE_ID: f"host0/chip{d}",
                ACCEL_HOST_ID: "host0",
                ACCEL_DEVICE_MODEL: "sim-accel-v1",
            }
            for d in range(devices)
        ]
        self.counters = counters
        self.t = 0

    def sample(self) -> list[Sample]:
        self.t += 100_000_000
        t = self.t
        out = []
        for d, attrs in enumerate(self.devices):
            for k, (metric, variant) in enumerate(self.counters):
                out.append(
                    Sample(
                        metric, {**attrs, ERROR_TYPE: variant}, float(t // 1000 * (d + k + 1)), t
                    )
                )
        return out


def timed(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--counters", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    counters = counter_set(args.counters)

    # ours
    src = SyntheticSource(args.devices, counters)
    bridge = CounterBridge([src], max_series_per_metric=100_000)
    bridge.open()
    collector = CounterCollector(bridge)
    sample_ours = timed(bridge.sample_once, args.repeat)
    scrape_text = timed(lambda: collector.render(openmetrics=False), args.repeat)
    scrape_om = timed(lambda: collector.render(openmetrics=True), args.repeat)
    reg_ours = CollectorRegistry(auto_describe=False)
    reg_ours.register(collector)
    scrape_collect = timed(lambda: generate_latest(reg_ours), args.repeat)
    series = sum(len(f) for f in bridge.families().values())

    # naive: one Gauge per counter
    reg = CollectorRegistry()
    gauges: dict[str, Gauge] = {}
    labelnames = [
        sanitize_label(k) for k in (ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_DEVICE_MODEL, ERROR_TYPE)
    ]
    for metric, variant in counters:
        spec = METRIC_SPECS[metric]
        name = prometheus_name(metric, spec["unit"], "gauge").family + "_" + variant
        gauges[metric + variant] = Gauge(name, metric, labelnames, registry=reg)
    naive_src = SyntheticSource(args.devices, counters)

    def naive_round() -> None:
        for s in naive_src.sample():
            a = s.attributes
            gauges[s.metric + str(a[ERROR_TYPE])].labels(
                a[ACCEL_DEVICE_ID], a[ACCEL_HOST_ID], a[ACCEL_DEVICE_MODEL], a[ERROR_TYPE]
            ).set(s.value)

    sample_naive = timed(naive_round, args.repeat)
    scrape_naive = timed(lambda: generate_latest(reg), args.repeat)

    rows = [
        ("naive Gauge per counter: scrape (text 0.0.4)", scrape_naive, 1.0),
        ("bridge render (text 0.0.4)", scrape_text, scrape_text / scrape_naive),
        ("bridge render (OpenMetrics)", scrape_om, scrape_om / scrape_naive),
        ("bridge collector via prometheus_client", scrape_collect, scrape_collect / scrape_naive),
        ("naive: one sampling round (set 3200 gauges)", sample_naive, 1.0),
        ("bridge: one sampling round (+unfold, derive)", sample_ours, sample_ours / sample_naive),
    ]
    print(
        f"{args.devices} devices x {args.counters} counters = {args.devices * args.counters} input series "
        f"({series} exposed incl. derived), median of {args.repeat}"
    )
    print(f"{'case':52} {'ms':>9} {'ratio':>7}")
    for name, t, ratio in rows:
        print(f"{name:52} {t * 1e3:9.2f} {ratio:7.2f}")
    print(
        f"sampling cost at 10 Hz: bridge {sample_ours * 10 * 100:.1f} % of one core, "
        f"naive {sample_naive * 10 * 100:.1f} %"
    )
    print(
        f"target scrape <= 0.5 x naive: {'met' if scrape_text <= 0.5 * scrape_naive else 'NOT met'} "
        f"({scrape_text / scrape_naive:.2f})"
    )


if __name__ == "__main__":
    main()
