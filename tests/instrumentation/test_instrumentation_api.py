"""Framework-free API, collective arithmetic, deferred recorder and inference requests."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext.instrumentation import (
    DROPS,
    collective,
    layer,
    phase,
    record_device_activity,
    request,
)
from otel_ext.instrumentation.collectives import bandwidths, bus_factor
from otel_ext.instrumentation.deferred import DeferredSpanRecorder
from otel_ext.instrumentation.inference import (
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    InferenceInstrumentation,
    extract_context,
)


@pytest.fixture
def pipeline() -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


class LinearClock:
    """A device clock at ``rate`` ticks per ns, ``offset`` ns behind the host, ``bound`` ns error."""

    def __init__(self, offset: int, rate: float, bound: float):
        self.offset, self.rate, self.bound = offset, rate, bound

    def to_host_ns(self, ticks: int, near_host_ns: int | None = None) -> int:
        return round(ticks / self.rate) + self.offset

    def bound_ns(self, ticks: int) -> float:
        return self.bound


def test_layer_collective_request_phase_nest_and_carry_attributes(pipeline: Any) -> None:
    provider, exporter = pipeline
    with request("r1", model="m", input_tokens=3, tracer_provider=provider, start_time=100) as req:
        with phase(  # noqa: SIM117 - one nesting level per span reads as the tree
            "prefill", step=4, batch_size=2, tracer_provider=provider, start_time=110, end_time=150
        ):
            with layer("blocks.0", index=0, layer_type="Block", depth=1, flops=1e6, nbytes=2e3,
                       tracer_provider=provider, start_time=120, end_time=140):  # fmt: skip
                with collective("all_reduce", group="tp", group_size=4, rank=2, seq=9, nbytes=1000,
                                dtype="bfloat16", tracer_provider=provider, start_time=125, end_time=135):  # fmt: skip
                    pass
        req.end_at(200)
    coll, lay, ph, rq = exporter.get_finished_spans()
    assert dict(coll.attributes) == {
        "accel.collective.op": "all_reduce",
        "accel.collective.group": "tp",
        "accel.collective.group_size": 4,
        "accel.collective.rank": 2,
        "accel.collective.seq": 9,
        "accel.collective.id": "tp:9",
        "accel.collective.bytes": 1000,
        "accel.collective.async": False,
        "accel.collective.dtype": "bfloat16",
        "accel.collective.algbw": 1000 / 10e-9,
        "accel.collective.busbw": 1000 / 10e-9 * 1.5,
    }
    assert dict(lay.attributes) == {
        "accel.layer.name": "blocks.0",
        "accel.layer.index": 0,
        "accel.layer.type": "Block",
        "accel.layer.depth": 1,
        "accel.layer.pass": "forward",
        "accel.layer.flops": 1e6,
        "accel.layer.bytes": 2e3,
    }
    assert dict(ph.attributes) == {
        "accel.request.phase": "prefill",
        "accel.request.step": 4,
        "accel.request.batch_size": 2,
    }
    assert rq.kind == trace.SpanKind.SERVER and (rq.start_time, rq.end_time) == (100, 200)
    assert coll.parent.span_id == lay.context.span_id
    assert lay.parent.span_id == ph.context.span_id
    assert ph.parent.span_id == rq.context.span_id


def test_decorator_makes_one_span_per_call_and_records_errors(pipeline: Any) -> None:
    provider, exporter = pipeline

    @layer("fn", tracer_provider=provider)
    def work(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x * 2

    assert work(2) == 4 and work(3) == 6
    with pytest.raises(ValueError, match="negative"):
        work(-1)
    spans = exporter.get_finished_spans()
    assert len(spans) == 3 and len({s.context.span_id for s in spans}) == 3
    assert spans[2].status.status_code == trace.StatusCode.ERROR
    assert spans[2].attributes["error.type"] == "ValueError"


def test_collective_sequences_per_group_and_pair(pipeline: Any) -> None:
    provider, exporter = pipeline
    for _ in range(2):
        with collective("all_gather", group="gA", group_size=2, rank=0, tracer_provider=provider):
            pass
    with collective("send", group="gA", group_size=2, rank=0, peer=1, tracer_provider=provider):
        pass
    ids = [s.attributes["accel.collective.id"] for s in exporter.get_finished_spans()]
    assert ids == ["gA:0", "gA:1", "gA:0->1:0"]


@settings(max_examples=200)
@given(
    op=st.sampled_from(
        ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send"]
    ),
    n=st.integers(1, 1024),
    nbytes=st.integers(0, 2**40),
    dur=st.integers(1, 10**12),
)
def test_bandwidths_follow_nccl_tests(op: str, n: int, nbytes: int, dur: int) -> None:
    algbw, busbw = bandwidths(op, nbytes, dur, n)
    assert algbw == pytest.approx(nbytes / (dur / 1e9))
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "send": 1.0}.get(op, (n - 1) / n)
    assert busbw == pytest.approx(algbw * factor)
    assert 0 <= bus_factor(op, n) < 2


@settings(max_examples=100, deadline=None)
@given(
    offset=st.integers(-(10**15), 10**15),
    rate=st.floats(0.5, 3.0),
    start=st.integers(0, 10**12),
    length=st.integers(0, 10**9),
    bound=st.floats(0, 10**6),
)
def test_device_activity_times_come_from_the_mapping(
    offset: int, rate: float, start: int, length: int, bound: float
) -> None:
    clock = LinearClock(offset + 2 * 10**15, rate, bound)
    span = record_device_activity(
        "k", start_ticks=start, end_ticks=start + length, mapping=clock, clock_domain="h/chip0",
        tracer_provider=TracerProvider(),
    )  # fmt: skip
    assert span is not None
    assert span.start_time == clock.to_host_ns(start)
    assert span.end_time == clock.to_host_ns(start + length)
    assert dict(span.attributes) == {
        "accel.kernel.name": "k",
        "accel.kernel.kind": "compute",
        "accel.clock.domain": "h/chip0",
        "accel.clock.raw_start_ticks": start,
        "accel.clock.raw_end_ticks": start + length,
        "accel.clock.uncertainty_ns": round(bound),
    }


def test_api_never_raises_into_the_workload() -> None:
    class Broken:
        def to_host_ns(self, ticks: int, near_host_ns: int | None = None) -> int:
            raise ArithmeticError("no fit")

        def bound_ns(self, ticks: int) -> float:
            return 0.0

    class Raising(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            raise RuntimeError("down")

    class BadProcessor(SimpleSpanProcessor):
        def on_end(self, span: Any) -> None:
            raise RuntimeError("broken")

    provider = TracerProvider()
    provider.add_span_processor(BadProcessor(Raising()))
    DROPS.reset()
    assert (
        record_device_activity("k", start_ticks=0, end_ticks=1, mapping=Broken(), clock_domain="d")
        is None
    )
    with layer("x", tracer_provider=provider):
        value = 41 + 1
    assert value == 42
    assert DROPS.totals() == {"record_device_activity": 1, "span.end": 1}
    DROPS.reset()


def test_deferred_recorder_threads_overflow_and_context(pipeline: Any) -> None:
    provider, exporter = pipeline
    rec = DeferredSpanRecorder(tracer_provider=provider, capacity=16)
    lid = rec.register("accel.layer", {"accel.layer.name": "L"})
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("step") as step:
        for _ in range(3):
            rec.begin(lid)
            for _ in range(3):
                rec.begin(lid)
                rec.end({"accel.layer.flops": 1.0})
            rec.end()
    assert rec.flush()

    def worker() -> None:
        rec.begin(lid)
        rec.end()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rec.flush()
    spans = [s for s in exporter.get_finished_spans() if s.name == "accel.layer"]
    assert len(spans) == 3 * 4 + 4
    roots = [s for s in spans if s.parent and s.parent.span_id == step.get_span_context().span_id]
    assert len(roots) == 3
    children = [s for s in spans if s.attributes.get("accel.layer.flops") == 1.0]
    assert len(children) == 9 and all(
        c.parent.span_id in {r.context.span_id for r in roots} for c in children
    )
    assert rec.dropped == 0
    # A ring of 16 overflows when 18 records are open at once: the rest are dropped, counted.
    for _ in range(18):
        rec.begin(lid)
    for _ in range(18):
        rec.end()
    assert rec.flush() and rec.dropped == 2
    rec.shutdown()


def test_inference_request_spans_histograms_and_exemplars(pipeline: Any) -> None:
    provider, exporter = pipeline
    reader = InMemoryMetricReader()
    inst = InferenceInstrumentation(
        model="tiny",
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    ms = 1_000_000
    req = inst.start_request("r7", input_tokens=11, start_time=0)
    req.queued(end_time=5 * ms)
    req.prefill(start_time=5 * ms, end_time=45 * ms, batch_size=3)
    req.token(time=45 * ms)
    for step in range(4):
        req.decode_step(
            start_time=(45 + 20 * step) * ms,
            end_time=(65 + 20 * step) * ms,
            step=step,
            batch_size=3,
        )
    req.finish(end_time=125 * ms)
    spans = exporter.get_finished_spans()
    root = spans[-1]
    assert dict(root.attributes) == {
        "accel.request.id": "r7",
        "gen_ai.request.model": "tiny",
        "gen_ai.operation.name": "text_completion",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 5,
    }
    phases = [s.attributes["accel.request.phase"] for s in spans[:-1]]
    assert phases == ["queue", "prefill", "decode", "decode", "decode", "decode"]
    assert all(s.parent.span_id == root.context.span_id for s in spans[:-1])
    metrics = {
        m.name: m.data.data_points[0]
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    ttft = metrics["gen_ai.server.time_to_first_token"]
    tpot = metrics["gen_ai.server.time_per_output_token"]
    assert (
        tuple(ttft.explicit_bounds) == TTFT_BUCKETS and tuple(tpot.explicit_bounds) == TPOT_BUCKETS
    )
    assert ttft.sum == pytest.approx(0.045) and tpot.sum == pytest.approx(0.020)
    assert metrics["gen_ai.server.request.duration"].sum == pytest.approx(0.125)
    for point in (ttft, tpot):
        (ex,) = point.exemplars
        assert ex.trace_id == root.context.trace_id and ex.span_id == root.context.span_id


def test_request_across_engines_keeps_one_trace(pipeline: Any) -> None:
    provider, exporter = pipeline
    prefill_engine = InferenceInstrumentation(
        model="m", tracer_provider=provider, meter_provider=MeterProvider()
    )
    decode_engine = InferenceInstrumentation(
        model="m", tracer_provider=provider, meter_provider=MeterProvider()
    )
    a = prefill_engine.start_request("r", input_tokens=4)
    a.prefill()
    a.token()
    headers = a.carrier()
    a.kv_transfer()
    a.finish()
    b = decode_engine.start_request("r", carrier=headers)
    b.decode_step()
    b.finish()
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    assert extract_context(headers) is not None
    requests = [s for s in spans if s.name == "accel.request"]
    assert requests[1].parent.span_id == requests[0].context.span_id
