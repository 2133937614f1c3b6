"""Telemetry never hurts the workload: bounded queue, counted drops, bounded shutdown, fork."""

from __future__ import annotations

import os
import threading
import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext.exporters import BoundedBatchSpanProcessor, DropCounter, configure, read_spans
from otel_ext.semconv.attributes import ACCEL_TELEMETRY_SIGNAL
from otel_ext.semconv.metrics import METRIC_ACCEL_TELEMETRY_DROPPED


class BlockingExporter(SpanExporter):
    """Blocks every export until released; records what it got."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.spans: list = []

    def export(self, spans):
        self.entered.set()
        self.release.wait(30)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


class RaisingExporter(SpanExporter):
    def export(self, spans):
        raise RuntimeError("collector exploded")

    def shutdown(self) -> None:
        raise RuntimeError("and again")


def _dropped_points(reader: InMemoryMetricReader) -> dict[str, int]:
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == METRIC_ACCEL_TELEMETRY_DROPPED:
                    for point in metric.data.data_points:
                        # the exporters' drops name their signal; other components' do not
                        if ACCEL_TELEMETRY_SIGNAL in point.attributes:
                            out[point.attributes[ACCEL_TELEMETRY_SIGNAL]] = point.value
    return out


def test_a_stuck_exporter_costs_bounded_memory_and_counted_drops():
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    drops = DropCounter(meter_provider)
    exporter = BlockingExporter()
    processor = BoundedBatchSpanProcessor(
        exporter, max_queue_size=100, max_export_batch_size=10, drops=drops
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("first"):
        pass
    processor._wake.set()
    assert exporter.entered.wait(10)  # the worker is now stuck inside export
    started = time.perf_counter()
    for index in range(1000):
        with tracer.start_as_current_span(f"s{index}"):
            pass
    elapsed = time.perf_counter() - started
    assert len(processor._queue) == 100
    assert drops.totals() == {"traces": 900}
    assert _dropped_points(reader) == {"traces": 900}
    assert elapsed < 5  # the workload never waited for the exporter
    exporter.release.set()
    assert processor.force_flush(10_000)
    assert len(exporter.spans) == 101
    provider.shutdown()
    meter_provider.shutdown()


def test_shutdown_is_bounded_when_the_exporter_hangs():
    exporter = BlockingExporter()
    exporter.shutdown = lambda: None  # type: ignore[method-assign]  # never releases
    processor = BoundedBatchSpanProcessor(exporter, max_queue_size=50, max_export_batch_size=1)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for index in range(20):
        with provider.get_tracer("t").start_as_current_span(f"s{index}"):
            pass
    assert exporter.entered.wait(10)
    started = time.monotonic()
    assert processor.force_flush(200) is False
    processor.shutdown(timeout_millis=300)
    assert time.monotonic() - started < 2
    assert processor.drops.totals()["traces"] >= 18  # what never left is counted
    exporter.release.set()


def test_exceptions_never_reach_the_application():
    processor = BoundedBatchSpanProcessor(RaisingExporter(), max_export_batch_size=2)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for index in range(5):
        with provider.get_tracer("t").start_as_current_span(f"s{index}"):
            pass
    assert processor.force_flush(5000)
    provider.shutdown()
    assert processor.drops.totals() == {"traces": 5}
    with provider.get_tracer("t").start_as_current_span("after-shutdown"):
        pass


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_keeps_exporting_to_its_own_file(tmp_path):
    telemetry = configure(
        traces_exporter="file",
        metrics_exporter="none",
        file_dir=tmp_path,
        schedule_delay_s=0.05,
        set_global=False,
        env={},
    )
    tracer = telemetry.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("parent-before"):
        pass
    assert telemetry.force_flush(5)
    with tracer.start_as_current_span("parent-queued"):
        pass  # queued, not yet exported, at fork time: the child must not export it
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a gunicorn / torch.multiprocessing worker
        code = 1
        try:
            os.close(read_end)
            with tracer.start_as_current_span("child-span"):
                pass
            ok = telemetry.shutdown(timeout_s=10)
            code = 0 if ok else 2
        finally:
            os.write(write_end, bytes([code]))
            os._exit(code)
    os.close(write_end)
    status = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert status == bytes([0])
    with tracer.start_as_current_span("parent-after"):
        pass
    assert telemetry.shutdown(timeout_s=10)
    names = sorted(r.name for r in read_spans(tmp_path / "traces.jsonl"))
    assert names == ["child-span", "parent-after", "parent-before", "parent-queued"]
    # Two complete files: the parent's and the child's; no partial left behind.
    assert len(list(tmp_path.iterdir())) == 2


class _PreemptedList(list):
    """A flush-request list whose ``append`` is delayed as if the thread were preempted
    between reading the list and appending to it, until the worker has swapped it out."""

    processor: BoundedBatchSpanProcessor | None = None

    def append(self, item):
        deadline = time.monotonic() + 0.5
        while self.processor is not None and self.processor._flush_requests is self:
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)  # the preemption being simulated
        super().append(item)


def test_force_flush_is_never_lost_to_the_worker_swapping_requests():
    processor = BoundedBatchSpanProcessor(
        InMemorySpanExporter(), schedule_delay_s=0.001, max_export_batch_size=4
    )
    try:
        for _ in range(3):
            stale = _PreemptedList()
            stale.processor = processor
            with processor._lock:
                processor._flush_requests = stale
            started = time.monotonic()
            assert processor.force_flush(3_000) is True  # not after its whole timeout
            assert time.monotonic() - started < 2.5
    finally:
        processor.shutdown()


def test_concurrent_flushes_on_an_idle_worker_all_succeed():
    processor = BoundedBatchSpanProcessor(InMemorySpanExporter(), schedule_delay_s=30)
    results: list[bool] = []
    lock = threading.Lock()

    def flush() -> None:
        for _ in range(50):
            ok = processor.force_flush(10_000)
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=flush) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    processor.shutdown()
    assert results == [True] * 400
