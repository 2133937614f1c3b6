"""deploy/sim/sim_endpoint.py's exposition of an OTLP/JSON metrics file, against the real SDK.

A histogram recorded by the OpenTelemetry SDK inside a span, written by otel-ext's own
OTLP/JSON file exporter, must come out of :class:`OtlpJsonMetricsCollector` as the
OpenMetrics the Collector's prometheus exporter would write: registry name mapped with its
unit, resource attributes as labels, cumulative buckets, the span's ids as the exemplar of
the bucket holding the value.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest

from otel_ext.exporters import OtlpJsonFileMetricExporter
from otel_ext.semconv.attributes import ACCEL_HOST_ID, GEN_AI_REQUEST_MODEL
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_INFERENCE_REQUESTS,
    METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
)


def _module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "sim_endpoint", REPO_ROOT / "deploy" / "sim" / "sim_endpoint.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path) -> tuple[str, str]:
    resource = Resource.create({"service.name": "srv", ACCEL_HOST_ID: "h0"})
    reader = PeriodicExportingMetricReader(
        OtlpJsonFileMetricExporter(path), export_interval_millis=3_600_000
    )
    view = View(
        instrument_name=METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
        aggregation=ExplicitBucketHistogramAggregation((0.1, 1.0)),
    )
    meters = MeterProvider(resource=resource, metric_readers=[reader], views=[view])
    meter = meters.get_meter("t")
    ttft = meter.create_histogram(METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN, unit="s")
    requests = meter.create_counter(METRIC_ACCEL_INFERENCE_REQUESTS, unit="{request}")
    tracer = TracerProvider(resource=resource).get_tracer("t")
    ttft.record(0.05, {GEN_AI_REQUEST_MODEL: "m"})
    with tracer.start_as_current_span("accel.request") as span:
        ttft.record(0.5, {GEN_AI_REQUEST_MODEL: "m"})
        requests.add(3, {ACCEL_HOST_ID: "h0"})
        ctx = span.get_span_context()
    meters.shutdown()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def test_histogram_with_exemplar_and_counter(tmp_path: Path) -> None:
    trace_id, span_id = _write(tmp_path / "metrics.jsonl")
    collector = _module().OtlpJsonMetricsCollector(tmp_path / "metrics.jsonl")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    name = "gen_ai_server_time_to_first_token_seconds"
    # a simulated workload without k8s.* attributes runs in its host's simulated pod
    pod = 'namespace="otel-ext-sim",pod="sim-h0"'
    model = 'accel_host_id="h0",container="engine",gen_ai_request_model="m"'
    base = f"{model},{pod}"

    def bucket(le: str) -> str:  # the exposition sorts the labels
        return f'{name}_bucket{{{model},le="{le}",{pod},service_name="srv"}}'

    assert f"# TYPE {name} histogram\n# UNIT {name} seconds\n" in text
    assert f"{bucket('0.1')} 1.0\n" in text
    assert f'{bucket("1.0")} 2.0 # {{span_id="{span_id}",trace_id="{trace_id}"}} 0.5\n' in text
    assert f"{bucket('+Inf')} 2.0\n" in text
    assert f'{name}_count{{{base},service_name="srv"}} 2.0\n' in text
    assert f'{name}_sum{{{base},service_name="srv"}} 0.55\n' in text
    requests = f'accel_inference_requests_total{{accel_host_id="h0",container="engine",{pod},'
    assert requests + 'service_name="srv"} 3.0\n' in text


def test_workload_pod_from_its_kubernetes_resource(tmp_path: Path) -> None:
    """A workload whose resource names its pod (the downward API) is labelled with it, under
    the names the collector's resource/pod-labels processor gives (dcgm-exporter's)."""
    resource = {
        "k8s.pod.name": "serve-0",
        "k8s.namespace.name": "inference",
        "k8s.container.name": "server",
        ACCEL_HOST_ID: "h0",
    }
    labels = _module()._workload_pod(resource)
    assert labels == {"pod": "serve-0", "namespace": "inference", "container": "server"}
    assert _module()._workload_pod({"service.name": "x"}) == {}


def test_skipped_metrics_and_missing_file(tmp_path: Path) -> None:
    collector = _module().OtlpJsonMetricsCollector(tmp_path / "metrics.jsonl")
    assert list(collector.collect()) == []  # nothing written yet: empty, no error
    _write(tmp_path / "metrics.jsonl")
    skip = frozenset({METRIC_ACCEL_INFERENCE_REQUESTS})
    names = {
        m.name
        for m in _module().OtlpJsonMetricsCollector(tmp_path / "metrics.jsonl", skip=skip).collect()
    }
    assert names == {"gen_ai_server_time_to_first_token_seconds"}
    assert {m.name for m in collector.collect()} == {
        "gen_ai_server_time_to_first_token_seconds",
        "accel_inference_requests",
    }
