"""Perfetto timelines: structural validation on a multi-device trace, conversion, streaming."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_span_in_context

from otel_ext.exporters import (
    OtlpJsonFileSpanExporter,
    PerfettoTraceExporter,
    otlp_json_to_perfetto,
)
from otel_ext.exporters._perfetto import PerfettoWriter, SpanView
from otel_ext.semconv.attributes import (
    ACCEL_COLLECTIVE_ID,
    ACCEL_COLLECTIVE_OP,
    ACCEL_DEVICE_ID,
    ACCEL_HOST_ID,
    ACCEL_KERNEL_CORRELATION_ID,
    ACCEL_KERNEL_STREAM,
    ACCEL_LINK_ID,
    ACCEL_RANK,
)
from otel_ext.semconv.spans import (
    SPAN_ACCEL_COLLECTIVE,
    SPAN_ACCEL_KERNEL,
    SPAN_ACCEL_LAYER,
    SPAN_ACCEL_LINK_TRANSFER,
)


def validate(trace: dict) -> dict[str, int]:
    """Check a Chrome trace-event document structurally; return counts per phase."""
    assert trace["displayTimeUnit"] == "ns"
    events = trace["traceEvents"]
    named_pids, named_tids = set(), set()
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    flows: dict[int, list[dict]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for event in events:
        ph = event["ph"]
        counts[ph] += 1
        assert isinstance(event["pid"], int)
        if ph == "M":
            assert event["name"] in (
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            )
            if event["name"] == "process_name":
                named_pids.add(event["pid"])
            if event["name"] == "thread_name":
                named_tids.add((event["pid"], event["tid"]))
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if ph == "X":
            assert isinstance(event["name"], str) and event["dur"] >= 0
            slices[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
        elif ph == "C":
            assert event["args"] and all(
                isinstance(v, (int, float)) for v in event["args"].values()
            )
        elif ph in ("s", "f"):
            flows[event["id"]].append(event)
        else:
            raise AssertionError(f"unexpected phase {ph}")
        assert event["pid"] in named_pids
        if ph in ("X", "s", "f"):
            assert (event["pid"], event["tid"]) in named_tids
    # X events on one track nest: every pair is disjoint or one contains the other.
    for track, intervals in slices.items():
        intervals.sort(key=lambda i: (i[0], -i[1]))
        stack: list[tuple[float, float]] = []
        for start, end in intervals:
            while stack and stack[-1][1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1][1] + 1e-9, (
                f"overlap on {track}: {stack[-1]} vs {(start, end)}"
            )
            stack.append((start, end))
    # Flows are paired s -> f, and each end sits inside a slice on its track.
    for flow_id, ends in flows.items():
        assert sorted(e["ph"] for e in ends) == ["f", "s"], flow_id
        source = next(e for e in ends if e["ph"] == "s")
        sink = next(e for e in ends if e["ph"] == "f")
        assert source["ts"] <= sink["ts"]
        for end in ends:
            assert any(s <= end["ts"] <= e for s, e in slices[(end["pid"], end["tid"])]), end
    return dict(counts)


def _multi_device_trace(
    provider: TracerProvider, *, hosts: int = 2, chips: int = 2, steps: int = 3
) -> int:
    tracer = provider.get_tracer("sim")
    t0 = 1_700_000_000_000_000_000
    kernels = 0
    for step in range(steps):
        base = t0 + step * 10_000_000
        for host in range(hosts):
            for chip in range(chips):
                device = f"host{host}/chip{chip}"
                rank = host * chips + chip
                common = {ACCEL_HOST_ID: f"host{host}", ACCEL_DEVICE_ID: device, ACCEL_RANK: rank}
                layer = tracer.start_span(SPAN_ACCEL_LAYER, attributes=common, start_time=base)
                ctx = set_span_in_context(layer)
                for k in range(4):
                    corr = step * 100 + k
                    launch = tracer.start_span(
                        "cudaLaunchKernel",
                        context=ctx,
                        attributes={**common, ACCEL_KERNEL_CORRELATION_ID: corr},
                        start_time=base + k * 1000,
                    )
                    launch.end(end_time=base + k * 1000 + 300)
                    # Kernels on two streams; overlapping kernels on one stream get lanes.
                    kernel = tracer.start_span(
                        SPAN_ACCEL_KERNEL,
                        context=ctx,
                        attributes={
                            **common,
                            ACCEL_KERNEL_STREAM: k % 2,
                            ACCEL_KERNEL_CORRELATION_ID: corr,
                        },
                        start_time=base + k * 1000 + 500,
                    )
                    kernel.end(end_time=base + k * 1000 + 2600)
                    kernels += 1
                coll = tracer.start_span(
                    SPAN_ACCEL_COLLECTIVE,
                    context=ctx,
                    attributes={
                        **common,
                        ACCEL_COLLECTIVE_ID: f"allreduce-{step}",
                        ACCEL_COLLECTIVE_OP: "all_reduce",
                        ACCEL_KERNEL_STREAM: 9,
                    },
                    start_time=base + 6000 + rank * 7,
                )
                coll.end(end_time=base + 9000)
                layer.end(end_time=base + 9500)
            link = tracer.start_span(
                SPAN_ACCEL_LINK_TRANSFER,
                attributes={ACCEL_HOST_ID: f"host{host}", ACCEL_LINK_ID: f"host{host}/chip0-chip1"},
                start_time=base + 6100,
            )
            link.end(end_time=base + 8000)
    return kernels


def test_live_exporter_on_a_multi_device_trace_is_well_formed(tmp_path):
    exporter = PerfettoTraceExporter(tmp_path / "trace.perfetto.json")
    provider = TracerProvider(resource=Resource({"service.name": "sim"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(
        metric_readers=[
            PeriodicExportingMetricReader(
                exporter.metric_exporter(), export_interval_millis=3_600_000
            )
        ]
    )
    gauge = meter_provider.get_meter("c").create_gauge("accel.power", unit="W")
    for chip in range(2):
        gauge.set(300.0 + chip, {ACCEL_HOST_ID: "host0", ACCEL_DEVICE_ID: f"host0/chip{chip}"})
    kernels = _multi_device_trace(provider)
    # While running, only the partial file exists.
    assert not exporter.path.exists()
    provider.shutdown()
    assert not exporter.path.exists()  # the metric side still holds the file
    meter_provider.shutdown()
    trace = json.loads(exporter.path.read_text())
    counts = validate(trace)
    assert counts["s"] == counts["f"] == kernels + 3 * (4 - 1)  # launch flows + collective chains
    assert counts["C"] == 2
    names = {
        e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {"host0/chip0", "host0/chip1", "host1/chip0", "host1/chip1", "host0", "host1"}
    threads = {
        e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {
        "stream 0",
        "stream 1",
        "stream 9",
        "link host0/chip0-chip1",
        "rank 0",
        "rank 3",
    } <= threads
    origin = int(trace["otherData"]["time_origin_unix_ns"])
    first_kernel = min(
        e["ts"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == SPAN_ACCEL_KERNEL
    )
    assert origin + round(first_kernel * 1000) == 1_700_000_000_000_000_500


def test_conversion_from_otlp_json_matches_the_live_exporter(tmp_path):
    files = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
    live = PerfettoTraceExporter(
        tmp_path / "live.perfetto.json", time_origin_ns=1_699_999_200_000_000_000
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(files))
    provider.add_span_processor(SimpleSpanProcessor(live))
    _multi_device_trace(provider)
    provider.shutdown()
    out = otlp_json_to_perfetto(tmp_path, tmp_path / "converted.perfetto.json")
    converted = json.loads(out.read_text())
    validate(converted)

    def slices(trace: dict) -> list[tuple]:
        names = {}
        for e in trace["traceEvents"]:
            if e["ph"] == "M" and e["name"] == "process_name":
                names[e["pid"]] = e["args"]["name"]
        origin = int(trace["otherData"]["time_origin_unix_ns"])
        return sorted(
            (names[e["pid"]], e["name"], origin + round(e["ts"] * 1000), round(e["dur"] * 1000))
            for e in trace["traceEvents"]
            if e["ph"] == "X"
        )

    assert slices(converted) == slices(json.loads(live.path.read_text()))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 50), st.integers(0, 20), st.sampled_from([0, 1]), st.integers(0, 3)
        ),
        min_size=1,
        max_size=60,
    )
)
def test_arbitrary_overlaps_still_nest_and_flows_pair(tmp_path_factory, spans):
    out = tmp_path_factory.mktemp("p") / "t.json"
    writer = PerfettoWriter(out, time_origin_ns=0, overwrite=True)
    for index, (start, length, stream, corr) in enumerate(spans):
        attrs = {
            ACCEL_DEVICE_ID: "h/c0",
            ACCEL_KERNEL_STREAM: stream,
            ACCEL_KERNEL_CORRELATION_ID: corr,
        }
        writer.add_span(
            SpanView("k", start * 1000, (start + length) * 1000, attrs, "t", f"{index:016x}", None)
        )
    writer.close()
    counts = validate(json.loads(out.read_text()))
    assert counts["X"] == len(spans)


def test_memory_is_bounded_by_the_lane_window(tmp_path: Path):
    writer = PerfettoWriter(
        tmp_path / "big.json", time_origin_ns=0, lane_window=64, max_pending_flows=16
    )
    for index in range(5000):
        attrs = {
            ACCEL_DEVICE_ID: "h/c0",
            ACCEL_KERNEL_STREAM: 0,
            ACCEL_KERNEL_CORRELATION_ID: index,
        }
        writer.add_span(
            SpanView("k", index * 10, index * 10 + 5, attrs, "t", f"{index:016x}", None)
        )
    lanes = [lane for lanes in writer._tracks.values() for lane in lanes]
    assert len(lanes) == 1 and len(lanes[0].intervals) == 64
    assert len(writer._launches) == 16
    assert writer._buffered < 1 << 17  # events went to disk as they came
    writer.close()
    assert validate(json.loads(writer.path.read_text()))["X"] == 5000
