"""OTLP over gRPC and HTTP against real receivers, including a receiver outage."""

from __future__ import annotations

import pytest
from otlp_receivers import GrpcOtlpReceiver, HttpOtlpReceiver, grpc_receiver, http_receiver  # noqa: F401

from otel_ext.exporters import configure
from otel_ext.semconv.attributes import (
    ACCEL_TELEMETRY_COMPONENT,
    ACCEL_TELEMETRY_REASON,
    ACCEL_TELEMETRY_SIGNAL,
)
from otel_ext.semconv.metrics import METRIC_ACCEL_TELEMETRY_DROPPED

pytestmark = pytest.mark.integration


def _configure(receiver, protocol: str, **kwargs):
    return configure(
        traces_exporter="otlp",
        metrics_exporter="otlp",
        endpoint=receiver.endpoint,
        protocol=protocol,
        export_timeout_s=2.0,
        metric_export_interval_s=3600.0,
        schedule_delay_s=0.05,
        set_global=False,
        env={},
        **kwargs,
    )


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_spans_and_metrics_reach_a_real_receiver(protocol, grpc_receiver, http_receiver):  # noqa: F811
    receiver = grpc_receiver if protocol == "grpc" else http_receiver
    telemetry = _configure(receiver, protocol, service_name="svc")
    tracer = telemetry.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("outer"), tracer.start_as_current_span("inner"):
        pass
    telemetry.meter_provider.get_meter("test").create_counter("test.items").add(4)
    assert telemetry.force_flush(timeout_s=10)
    assert receiver.wait_for_spans({"outer", "inner"})
    assert receiver.wait_for_metric("test.items")
    request = receiver.store.trace_requests[0]
    resource = {
        kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "svc"
    assert telemetry.shutdown(timeout_s=5)
    assert telemetry.dropped() == {}


@pytest.mark.parametrize("kind", ["grpc", "http/protobuf"])
def test_receiver_outage_counts_drops_and_recovers(kind):
    receiver: GrpcOtlpReceiver | HttpOtlpReceiver = (
        GrpcOtlpReceiver() if kind == "grpc" else HttpOtlpReceiver()
    )
    receiver.start()
    telemetry = _configure(receiver, kind, max_queue_size=64, max_export_batch_size=16)
    tracer = telemetry.tracer_provider.get_tracer("test")
    try:
        with tracer.start_as_current_span("before"):
            pass
        assert telemetry.force_flush(timeout_s=10)
        assert receiver.wait_for_spans({"before"})

        receiver.stop()
        # The workload keeps running while nobody listens: no exception, no unbounded wait.
        for index in range(500):
            with tracer.start_as_current_span(f"during-{index}"):
                pass
        telemetry.force_flush(timeout_s=10)
        dropped = telemetry.dropped().get("traces", 0)
        assert dropped > 0
        assert dropped <= 500

        receiver.start()
        with tracer.start_as_current_span("after"):
            pass
        # The exporter may still be backing off from the outage: flush until it lands.
        for _ in range(10):
            telemetry.force_flush(timeout_s=5)
            if receiver.wait_for_spans({"after"}, timeout_s=2):
                break
        assert "after" in receiver.span_names()
        # The drop count is itself exported, with the signal attribute.
        telemetry.meter_provider.force_flush()
        assert receiver.wait_for_metric(METRIC_ACCEL_TELEMETRY_DROPPED)
        exports = [
            [
                (dp.as_int, {kv.key: kv.value.string_value for kv in dp.attributes})
                for rm in request.resource_metrics
                for sm in rm.scope_metrics
                for metric in sm.metrics
                if metric.name == METRIC_ACCEL_TELEMETRY_DROPPED
                for dp in metric.sum.data_points
            ]
            for request in receiver.store.metric_requests
        ]
        last = [points for points in exports if points][-1]  # cumulative: the latest counts
        traces = {
            attrs[ACCEL_TELEMETRY_REASON]: n
            for n, attrs in last
            if attrs.get(ACCEL_TELEMETRY_SIGNAL) == "traces"
            and attrs[ACCEL_TELEMETRY_COMPONENT] == "exporters"
        }
        # every dropped span counted once, under the reason it was dropped for
        assert sum(traces.values()) == dropped and set(traces) <= {
            "queue_full",
            "collector_unreachable",
            "export_failed",
            "export_raised",
        }
    finally:
        assert telemetry.shutdown(timeout_s=10)
        receiver.stop()
