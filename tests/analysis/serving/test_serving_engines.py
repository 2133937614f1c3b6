"""vLLM's and SGLang's own spans as inputs, joined with otel-ext's telemetry.

The fixtures are made here with the real OpenTelemetry SDK, with the span names and attributes
the engines' sources define (vLLM's ``llm_request`` span and ``SpanAttributes``; SGLang's
request / thread / stage-slice tree), and written as a Collector's file exporter writes them
(OTLP-JSON lines, by the project's file exporter) and as a Jaeger JSON export.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from otel_ext.analysis.loaders.serving_inputs import (
    read_serving_spans,
    serving_span_paths,
    serving_table,
)
from otel_ext.analysis.serving.engine_telemetry import (
    join_serving,
    serving_rows,
    with_serving_requests,
)
from otel_ext.analysis.serving.requests import request_latency
from otel_ext.analysis.table import Category, EventTable
from otel_ext.errors import InputError
from otel_ext.exporters import OtlpJsonFileSpanExporter

S = 1_000_000_000
T0 = 1_760_000_000 * S


def _vllm_request(tracer, rid: str, at: int, queue: float, prefill: float, decode: float):
    """One finished request as vLLM's output processor records it: an ``llm_request`` SERVER
    span from the arrival, its latencies in seconds."""
    span = tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=at)
    span.set_attributes({
        "gen_ai.request.id": rid,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.0,
        "gen_ai.request.top_p": 1.0,
        "gen_ai.request.n": 1,
        "gen_ai.usage.prompt_tokens": 512,
        "gen_ai.usage.completion_tokens": 33,
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.latency.time_to_first_token": queue + prefill,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.time_in_model_inference": prefill + decode,
        "gen_ai.latency.e2e": queue + prefill + decode,
    })  # fmt: skip
    return span


@pytest.fixture
def vllm_file(tmp_path: Path) -> Path:
    path = tmp_path / "vllm-traces.jsonl"
    exporter = OtlpJsonFileSpanExporter(path)
    provider = TracerProvider(
        resource=Resource.create({"service.name": "vllm", "host.name": "node-a"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vllm.entrypoints")
    for k in range(3):
        at = T0 + k * S
        span = _vllm_request(tracer, f"cmpl-{k}", at, 0.010 * (k + 1), 0.050, 0.400)
        if k == 0:
            # otel-ext's layer instrumentation inside the engine, in the request's context
            ctx = trace.set_span_in_context(span)
            child = tracer.start_span("accel.layer", context=ctx, start_time=at + 20_000_000,
                                      attributes={"accel.layer.name": "model.layers.0"})  # fmt: skip
            child.end(end_time=at + 40_000_000)
        span.end(end_time=at + int((0.010 * (k + 1) + 0.450) * S))
    provider.shutdown()
    return path


def _jaeger(spans: list[ReadableSpan]) -> dict:
    """A Jaeger ``/api/traces`` JSON document of ``spans`` (times in microseconds)."""
    procs: dict[str, dict] = {}
    traces: dict[str, list] = {}
    for s in spans:
        key = f"p{len(procs)}"
        procs[key] = {"serviceName": s.resource.attributes.get("service.name", ""), "tags": []}
        refs = []
        if s.parent is not None:
            refs.append({"refType": "CHILD_OF", "traceID": f"{s.context.trace_id:032x}",
                         "spanID": f"{s.parent.span_id:016x}"})  # fmt: skip
        tags = [{"key": k, "type": "string" if isinstance(v, str) else "int64", "value": v}
                for k, v in (s.attributes or {}).items()]  # fmt: skip
        traces.setdefault(f"{s.context.trace_id:032x}", []).append({
            "traceID": f"{s.context.trace_id:032x}", "spanID": f"{s.context.span_id:016x}",
            "operationName": s.name, "references": refs, "startTime": s.start_time // 1000,
            "duration": (s.end_time - s.start_time) // 1000, "tags": tags, "processID": key,
        })  # fmt: skip
    return {"data": [{"traceID": t, "spans": sp, "processes": procs} for t, sp in traces.items()]}


@pytest.fixture
def sglang_file(tmp_path: Path) -> Path:
    """One request through SGLang prefill/decode disaggregation: a root ``Req`` span, thread
    spans per TP rank on the prefill and the decode server, stage slices below them."""
    mem = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "sglang"}))
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("sglang server")
    ms = 1_000_000
    root = tracer.start_span("Req 7f3a9c21", start_time=T0)
    root.set_attributes({"rid": "7f3a9c21e0", "bootstrap_room": 4242})
    root_ctx = trace.set_span_in_context(root)
    stages = {
        "prefill": [("prefill_waiting", 0, 5), ("prefill_forward", 5, 30),
                    ("prefill_transfer_kv_cache", 30, 34)],
        "decode": [("decode_waiting", 34, 36), ("decode_loop", 36, 90)],
    }  # fmt: skip
    for server, slices in stages.items():
        for tp in (0, 1):
            thread = tracer.start_span(
                f"Scheduler [TP {tp}] (host:node-b | pid:{100 + tp})", context=root_ctx,
                start_time=T0 + slices[0][1] * ms,
                attributes={"tp_rank": tp, "host_id": "node-b", "pid": 100 + tp,
                            "thread_label": f"{server} scheduler"},
            )  # fmt: skip
            th_ctx = trace.set_span_in_context(thread)
            for name, a, b in slices:
                sl = tracer.start_span(name, context=th_ctx, start_time=T0 + (a + tp) * ms)
                sl.end(end_time=T0 + (b + tp) * ms)
            thread.end(end_time=T0 + (slices[-1][2] + tp) * ms)
    root.end(end_time=T0 + 95 * ms)
    provider.shutdown()
    path = tmp_path / "sglang-jaeger.json"
    path.write_text(json.dumps(_jaeger(list(mem.get_finished_spans()))), encoding="utf-8")
    return path


def _request_ids(table: EventTable) -> dict[str, str]:
    """trace id -> the engine's request id, from the request rows."""
    rows = (table["category"] == Category.REQUEST).nonzero()[0]
    return {
        table.strings["trace_id"][int(table["trace_id"][r])]: table.strings["name"][
            int(table["name"][r])
        ]
        for r in rows
    }


def test_vllm_requests_load_with_phases_from_their_latencies(vllm_file: Path) -> None:
    table = serving_table([vllm_file])
    doc = request_latency(table)
    assert doc["count"] == 3
    by_id = {_request_ids(table)[r["request"]]: r for r in doc["requests"]}
    r1 = by_id["cmpl-1"]
    assert (r1["queue_ns"], r1["prefill_ns"], r1["decode_ns"]) == (
        20_000_000,
        50_000_000,
        400_000_000,
    )
    # TTFT from the phases equals the span's own gen_ai.latency.time_to_first_token
    assert r1["ttft_ns"] == 70_000_000


def test_sglang_span_tree_maps_stages_to_phases(sglang_file: Path) -> None:
    table = serving_table([sglang_file])
    doc = request_latency(table)
    (r,) = doc["requests"]
    assert _request_ids(table)[r["request"]] == "7f3a9c21e0"
    ms = 1_000_000
    # TP ranks 0 and 1 both record each stage (rank 1 a millisecond later): earliest to latest
    assert r["queue_ns"] == 6 * ms and r["prefill_ns"] == 26 * ms
    assert r["ttft_ns"] == 31 * ms
    host = {table.strings["host"][int(h)] for h in table["host"]}
    assert host == {"node-b"}


def test_join_by_trace_context_and_by_time_and_host(vllm_file: Path, sglang_file: Path) -> None:
    from otel_ext.analysis.loaders import load_paths

    ours = load_paths([vllm_file]).table  # the otel-ext layer span rode in vLLM's trace
    kernels = EventTable.from_rows([
        dict(start_ns=T0 + 10_000_000, end_ns=T0 + 60_000_000, category=Category.KERNEL_COMPUTE,
             host="node-b", device="node-b/gpu0", rank=0, stream=7),
        dict(start_ns=T0 + 50_000_000, end_ns=T0 + 200_000_000, category=Category.KERNEL_COMM,
             host="node-b", device="node-b/gpu0", rank=0, stream=9),
        dict(start_ns=T0, end_ns=T0 + 90_000_000, category=Category.KERNEL_COMPUTE,
             host="node-c", device="node-c/gpu0", rank=1, stream=7),
    ])  # fmt: skip
    table = EventTable.concat([ours, kernels])
    serving = serving_table([vllm_file, sglang_file])
    joined = join_serving(table, serving)
    rows = {r["request"]: r for r in joined["rows"]}
    assert rows["cmpl-0"]["joined_by"] == "trace" and rows["cmpl-0"]["otel_ext_rows"] >= 1
    sg = rows["7f3a9c21e0"]
    assert sg["joined_by"] == "time" and sg["engine"] == "sglang"
    # only node-b's device, clipped to the request [T0, T0 + 95 ms]
    assert sg["device_busy_ns"] == {"node-b/gpu0": 85_000_000}
    assert sg["collective_ns"] == 45_000_000
    assert joined["joined_by_trace"] >= 1 and joined["joined_by_time"] >= 1


def test_not_a_span_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"resourceSpans": []}\nnot json\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 2"):
        read_serving_spans([bad])


def test_engine_metric_map_targets_registry_metrics_and_rules_are_current() -> None:
    import importlib.util

    import yaml

    from otel_ext.semconv.metrics import METRIC_SPECS

    deploy = REPO_ROOT / "deploy" / "prometheus"
    table = yaml.safe_load((deploy / "engine-metrics.yaml").read_text())
    assert {m["engine"] for m in table["metrics"]} == {"vllm", "sglang"}
    for m in table["metrics"]:
        assert m["maps_to"] in METRIC_SPECS, m
        assert m["source"].startswith(m["engine"] + ":")
    spec = importlib.util.spec_from_file_location(
        "build_engine_rules", deploy / "build_engine_rules.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0
    rules = yaml.safe_load((deploy / "rules" / "otel-ext-serving-engines.yaml").read_text())
    exprs = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
    for m in table["metrics"]:
        assert f"rate({m['source']}_bucket[1m])" in exprs


@given(
    st.lists(
        st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 5.0), st.floats(0.0, 60.0)),
        min_size=1,
        max_size=6,
    )
)
@settings(max_examples=25, deadline=None)
def test_otlp_lines_and_jaeger_give_the_same_requests(latencies) -> None:
    """The same vLLM spans, exported as OTLP-JSON lines and as a Jaeger document, load as the
    same requests and phases (Jaeger keeps microseconds: compared at that resolution)."""
    import tempfile

    mem = InMemorySpanExporter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(path)))
        provider.add_span_processor(SimpleSpanProcessor(mem))
        tracer = provider.get_tracer("vllm")
        for k, (q, p, d) in enumerate(latencies):
            at = T0 + k * 100 * S
            span = _vllm_request(tracer, f"r{k}", at, q, p, d)
            span.end(end_time=at + int((q + p + d) * S) + 1000)
        provider.shutdown()
        jaeger = Path(tmp) / "t.json"
        jaeger.write_text(json.dumps(_jaeger(list(mem.get_finished_spans()))), encoding="utf-8")

        def rows(p: Path) -> list[tuple]:
            out = []
            for r in serving_rows(read_serving_spans([p])):
                out.append((r["name"], r["trace_id"], r["start_ns"] // 1000, r["end_ns"] // 1000))
            return sorted(out)

        a, b = rows(path), rows(jaeger)
    assert len(a) == len(b) >= len(latencies)
    for x, y in zip(a, b):
        assert x[:2] == y[:2] and abs(x[2] - y[2]) <= 1 and abs(x[3] - y[3]) <= 1


def test_with_serving_requests_appends_engine_requests_after_loading(vllm_file: Path) -> None:
    from otel_ext.analysis.loaders import load_paths

    load = load_paths([vllm_file])
    spans = read_serving_spans(serving_span_paths(load.inputs))
    table, joined = with_serving_requests(load.table, spans)
    assert joined is not None and joined["requests"] == 3
    assert int((table["category"] == Category.REQUEST).sum()) == 3
    assert len(table) == len(load.table) + 3 + 9  # three requests, three phases each


def test_analyze_reads_engine_requests_and_reports_the_join(vllm_file: Path) -> None:
    from otel_ext.analysis.engine import analyze

    doc = analyze([vllm_file], workers=1)
    assert doc["serving"] is not None and doc["serving"]["requests"] == 3
    assert doc["requests"]["count"] >= 3
