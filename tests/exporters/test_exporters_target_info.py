"""The SDK /metrics reader exposes the resource once as ``target_info``."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest

from otel_ext.exporters.prometheus import PrometheusMetricReader
from otel_ext.semconv.attributes import ACCEL_HOST_ID, ACCEL_RANK


def test_resource_attributes_are_exposed_as_target_info() -> None:
    reader = PrometheusMetricReader()
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({ACCEL_HOST_ID: "host3", ACCEL_RANK: 5, "service.name": "srv"}),
    )
    provider.get_meter("t").create_counter("accel.device.kernels", unit="{kernel}").add(2)
    registry = CollectorRegistry()
    registry.register(reader.collector())
    text = generate_latest(registry).decode()
    provider.shutdown()
    info = [line for line in text.splitlines() if line.startswith("target_info{")]
    assert len(info) == 1, text
    assert 'accel_host_id="host3"' in info[0]
    assert 'accel_rank="5"' in info[0]
    assert 'service_name="srv"' in info[0]
    assert info[0].endswith(" 1.0") or info[0].endswith(" 1")
    assert "# TYPE target info" in text
