"""ClockSampler, ClockRegistry, the reconciling span processor and clock telemetry (real OTel SDK)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext.clocks import (
    ClockReconcilingSpanProcessor,
    ClockRegistry,
    ClockSampler,
    ClockTelemetry,
    fit_clock,
)
from otel_ext.clocks.synthetic import SyntheticClock
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_RAW_END_TICKS,
    ACCEL_CLOCK_RAW_START_TICKS,
    ACCEL_CLOCK_REFERENCE,
    ACCEL_CLOCK_UNCERTAINTY_NS,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_CLOCK_BOUND,
    METRIC_ACCEL_CLOCK_DRIFT,
    METRIC_ACCEL_CLOCK_SAMPLES,
)

CLOCK = SyntheticClock(offset_ticks=(1 << 32) - 50_000_000, skew_ppm=25.0, counter_bits=32)


class FakeHost:
    """A deterministic host clock: each read advances true time by a fixed step."""

    def __init__(self, start: int = 1_000_000, step: int = 700) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now

    def read_device(self) -> int:
        self.now += 300
        return int(CLOCK.ticks_at(self.now)[()])


def _sampler(host: FakeHost, n: int, gap: int = 100_000_000) -> ClockSampler:
    s = ClockSampler(
        host.read_device, domain="host0/chip0", counter_bits=32, host_clock=host, burst=3
    )
    for _ in range(n):
        assert s.sample_burst()
        host.now += gap
    return s


def test_sampler_collects_brackets_that_fit() -> None:
    host = FakeHost()
    s = _sampler(host, 30)
    before, _ticks, after = s.brackets()
    assert before.size == 30 and np.all(after - before == 1000)
    m = s.mapping()
    assert m is not None and m is s.mapping()  # cached until new brackets arrive
    t = np.array([5e8, 2.5e9])
    assert np.all(
        np.abs(m.to_host_ns(CLOCK.ticks_at(t), t.astype(np.int64)) - t)
        <= m.bound_ns(CLOCK.ticks_at(t), t.astype(np.int64))
    )


def test_sampler_counts_reader_errors_and_runs_on_a_thread() -> None:
    calls = itertools.count()

    def flaky() -> int:
        if next(calls) == 0:
            raise RuntimeError("device busy")
        return 42

    s = ClockSampler(flaky, domain="d", burst=1)
    assert s.sample_burst() is False and s.read_errors == 1
    s.interval_s = 0.001
    with s:
        assert s.wait_for_samples(3, timeout=10)
    assert s.samples_taken >= 3


def _device_span(tracer, host_start: int, true_start: float, true_end: float):
    span = tracer.start_span(
        "accel.kernel",
        start_time=host_start,
        attributes={
            ACCEL_CLOCK_DOMAIN: "host0/chip0",
            ACCEL_CLOCK_RAW_START_TICKS: int(CLOCK.ticks_at(true_start)[()]),
            ACCEL_CLOCK_RAW_END_TICKS: int(CLOCK.ticks_at(true_end)[()]),
            "accel.device.id": "host0/chip0",
        },
    )
    span.end(end_time=host_start + 1_000)
    return span


def test_processor_hands_corrected_copies_after_hold_back() -> None:
    host = FakeHost()
    sampler = _sampler(host, 20)
    registry = ClockRegistry()
    registry.add_sampler(sampler)
    exporter = InMemorySpanExporter()
    now = [0]
    proc = ClockReconcilingSpanProcessor(
        SimpleSpanProcessor(exporter),
        registry,
        hold_back_s=1.0,
        clock=lambda: now[0],
        background=False,
    )
    provider = TracerProvider()
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("host work"):
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["host work"]  # passes at once
    inside = _device_span(tracer, 1_000_000_000, 1.0e9 + 123, 1.0e9 + 50_123)
    beyond_end = host.now + 300_000_000.0
    outside = _device_span(tracer, int(beyond_end), beyond_end, beyond_end + 10_000)
    assert proc.release_ready() == 1  # covered: interpolated at once; the other waits
    now[0] = 2_000_000_000
    assert proc.release_ready() == 1  # deadline passed: extrapolated
    spans = {
        s.attributes[ACCEL_CLOCK_RAW_START_TICKS]: s for s in exporter.get_finished_spans()[1:]
    }
    got = spans[inside.attributes[ACCEL_CLOCK_RAW_START_TICKS]]
    assert got is not inside  # a copy, the original untouched
    assert inside.start_time == 1_000_000_000
    bound = got.attributes[ACCEL_CLOCK_UNCERTAINTY_NS]
    assert (
        abs(got.start_time - (1.0e9 + 123)) <= bound
        and abs(got.end_time - (1.0e9 + 50_123)) <= bound
    )
    assert dict(got.attributes) == {**dict(inside.attributes), ACCEL_CLOCK_UNCERTAINTY_NS: bound}
    assert got.context == inside.context and got.parent == inside.parent
    far = spans[outside.attributes[ACCEL_CLOCK_RAW_START_TICKS]]
    assert far.attributes[ACCEL_CLOCK_UNCERTAINTY_NS] > bound
    assert abs(far.start_time - beyond_end) <= far.attributes[ACCEL_CLOCK_UNCERTAINTY_NS]
    assert proc.aligned == 2
    provider.shutdown()


def test_processor_never_raises_and_passes_unknown_domains_on_flush() -> None:
    exporter = InMemorySpanExporter()

    def broken(domain: str):
        raise RuntimeError("lookup failed")

    proc = ClockReconcilingSpanProcessor(SimpleSpanProcessor(exporter), broken, background=True)
    provider = TracerProvider()
    provider.add_span_processor(proc)
    span = _device_span(provider.get_tracer("t"), 5, 1e9, 1e9 + 5)
    assert provider.force_flush()
    out = exporter.get_finished_spans()[0]
    assert out.context == span.context and out.start_time == span.start_time == 5
    assert ACCEL_CLOCK_UNCERTAINTY_NS not in out.attributes
    none_proc = ClockReconcilingSpanProcessor(
        SimpleSpanProcessor(exporter), {}.get, background=False
    )
    none_proc.on_end(span)
    none_proc.force_flush()
    assert none_proc.unaligned == 1
    provider.shutdown()


def test_clock_telemetry_exports_bound_drift_samples() -> None:
    host = FakeHost()
    registry = ClockRegistry()
    registry.add_sampler(_sampler(host, 40))
    t = np.arange(0, 10**9, 10**8)
    registry.set_mapping("host0/chip1", fit_clock(t - 500, t + t // 100_000, t + 500))
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    ClockTelemetry(registry, meter_provider=provider, reference="host0")
    data = reader.get_metrics_data()
    points = {
        m.name: {
            p.attributes[ACCEL_CLOCK_DOMAIN]: (p.value, dict(p.attributes))
            for p in m.data.data_points
        }
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    bound, attrs = points[METRIC_ACCEL_CLOCK_BOUND]["host0/chip0"]
    assert 0 < bound < 5_000 and attrs == {
        ACCEL_CLOCK_DOMAIN: "host0/chip0",
        ACCEL_CLOCK_REFERENCE: "host0",
    }
    assert abs(points[METRIC_ACCEL_CLOCK_DRIFT]["host0/chip0"][0] - 25.0) < 1.0
    assert abs(points[METRIC_ACCEL_CLOCK_DRIFT]["host0/chip1"][0] - 10.0) < 1.0
    assert points[METRIC_ACCEL_CLOCK_SAMPLES]["host0/chip0"][0] == 40
    assert "host0/chip1" not in points[METRIC_ACCEL_CLOCK_SAMPLES]
    provider.shutdown()


# -- hardening (issue 18) ----------------------------------------------------------------
class GlitchyDevice:
    """A 64-bit device counter read against ``host``: one torn read, then a reset."""

    def __init__(self, host: FakeHost, *, torn_at: int, reset_at: int) -> None:
        self.host, self.torn_at, self.reset_at = host, torn_at, reset_at
        self.reads = 0
        self.base = 0

    def __call__(self) -> int:
        self.host.now += 300
        ticks = 10**12 + self.host.now - self.base
        self.reads += 1
        if self.reads == self.torn_at:
            return ticks + (1 << 32)  # one half read across a carry
        if self.reads == self.reset_at:
            self.base = self.host.now - 5  # the counter restarts near 5
            return 10**12 + 5
        return ticks


def test_sampler_survives_a_torn_read_and_a_counter_reset(caplog) -> None:
    host = FakeHost()
    device = GlitchyDevice(host, torn_at=10, reset_at=30)
    s = ClockSampler(device, domain="host0/chip7", host_clock=host, burst=1)
    for i in range(1, 45):
        assert s.sample_burst()
        host.now += 100_000_000
        m = s.mapping()
        if i >= 2:
            assert m is not None, (i, s.fit_errors)
    assert s.fit_errors <= 1 and "Traceback" not in caplog.text
    m = s.mapping()
    assert m is not None and m.quality == "low"
    assert any("reset" in i for i in m.issues) and any("bracket 9" in i for i in m.issues)
    assert s.brackets()[0].size == 44  # the window kept every bracket
    # the mapping maps the counter as it runs now
    t = host.now - 50_000_000
    ticks = 10**12 + t - device.base
    assert abs(int(m.to_host_ns(ticks)[()]) - t) <= int(m.bound_ns(ticks)[()]) + 1


class BarrierProcessor(SimpleSpanProcessor):
    """Its ``on_end`` waits until ``parties`` threads are inside it at the same time."""

    def __init__(self, parties: int) -> None:
        super().__init__(InMemorySpanExporter())
        self.barrier = threading.Barrier(parties, timeout=5)
        self.met = 0

    def on_end(self, span) -> None:
        self.barrier.wait()  # BrokenBarrierError if span ends are serialised
        self.met += 1


def test_span_ends_are_not_serialised_on_one_lock() -> None:
    nxt = BarrierProcessor(2)
    proc = ClockReconcilingSpanProcessor(nxt, {}.get, background=False)
    tracer = TracerProvider().get_tracer("t")
    spans = [tracer.start_span(f"host {i}") for i in range(2)]
    for s in spans:
        s.end()
    errors: list[BaseException] = []

    def end(span) -> None:
        try:
            proc.on_end(span)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=end, args=(s,)) for s in spans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors and nxt.met == 2 and not nxt.barrier.broken


def test_device_spans_of_two_domains_are_forwarded_concurrently() -> None:
    nxt = BarrierProcessor(2)
    t = np.arange(0, 10**9, 10**8)
    fitted = fit_clock(t - 500, t, t + 500)
    proc = ClockReconcilingSpanProcessor(
        nxt, {"host0/chip0": fitted, "host0/chip1": fitted}.get, background=False
    )
    tracer = TracerProvider().get_tracer("t")
    for domain in ("host0/chip0", "host0/chip1"):
        span = tracer.start_span(
            "accel.kernel",
            start_time=5 * 10**8,
            attributes={
                ACCEL_CLOCK_DOMAIN: domain,
                ACCEL_CLOCK_RAW_START_TICKS: 5 * 10**8,
                ACCEL_CLOCK_RAW_END_TICKS: 5 * 10**8 + 1000,
            },
        )
        span.end(end_time=5 * 10**8 + 1000)
        proc.on_end(span)
    counts: list[int] = []
    threads = [
        threading.Thread(target=lambda: counts.append(proc.release_ready())) for _ in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert sorted(counts) == [1, 1] and nxt.met == 2 and proc.aligned == 2


def test_hold_back_bound_is_over_all_domains() -> None:
    exporter = InMemorySpanExporter()
    proc = ClockReconcilingSpanProcessor(
        SimpleSpanProcessor(exporter), {}.get, max_pending=3, background=False
    )
    tracer = TracerProvider().get_tracer("t")
    for i in range(5):
        span = tracer.start_span(
            "accel.kernel",
            attributes={
                ACCEL_CLOCK_DOMAIN: f"host0/chip{i % 2}",
                ACCEL_CLOCK_RAW_START_TICKS: i,
                ACCEL_CLOCK_RAW_END_TICKS: i + 1,
            },
        )
        span.end()
        proc.on_end(span)
    assert proc.dropped == 2 and len(exporter.get_finished_spans()) == 2  # passed through
    proc.force_flush()
    assert proc.unaligned == 3 and len(exporter.get_finished_spans()) == 5
