"""configure(): precedence of code, environment and defaults; resource; exporter choice."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otlp_receivers import http_receiver  # noqa: F401 (fixture)

from otel_ext.errors import ConfigError
from otel_ext.exporters import (
    accelerator_attributes,
    configure,
    read_metrics,
    read_spans,
    register_metrics_exporter,
)
from otel_ext.exporters._configure import _otlp
from otel_ext.semconv.attributes import (
    ACCEL_DEVICE_ID,
    ACCEL_HOST_ID,
    ACCEL_LOCAL_RANK,
    ACCEL_RANK,
    ACCEL_WORLD_SIZE,
)


def test_env_selects_file_exporters_under_the_file_dir(tmp_path):
    env = {
        "OTEL_TRACES_EXPORTER": "file",
        "OTEL_METRICS_EXPORTER": "file",
        "OTEL_EXT_FILE_DIR": str(tmp_path),
        "OTEL_SERVICE_NAME": "trainer",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,service.name=ignored,team=ml%20infra",
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
    }
    telemetry = configure(set_global=False, env=env)
    with telemetry.tracer_provider.get_tracer("t").start_as_current_span("step"):
        pass
    telemetry.meter_provider.get_meter("m").create_counter("items").add(2)
    assert telemetry.shutdown(timeout_s=10)
    (span,) = read_spans(tmp_path / "traces.jsonl")
    host = span.resource[ACCEL_HOST_ID]
    expected = {
        "service.name": "trainer",
        "deployment.environment": "test",
        "team": "ml infra",
        ACCEL_HOST_ID: host,
        ACCEL_RANK: 3,
        ACCEL_WORLD_SIZE: 8,
        ACCEL_LOCAL_RANK: 1,
        ACCEL_DEVICE_ID: f"{host}/chip1",
    }
    assert {k: span.resource[k] for k in expected} == expected
    points = [p for p in read_metrics(tmp_path / "metrics.jsonl") if p.name == "items"]
    assert points and points[-1].value == 2


def test_code_arguments_win_over_the_environment(tmp_path):
    env = {
        "OTEL_SERVICE_NAME": "from-env",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_EXT_FILE_DIR": "/nonexistent",
    }
    telemetry = configure(
        service_name="from-code",
        resource_attributes={ACCEL_RANK: 7},
        traces_exporter="file",
        metrics_exporter="none",
        file_dir=tmp_path,
        set_global=False,
        env=env,
    )
    assert telemetry.resource.attributes["service.name"] == "from-code"
    assert telemetry.resource.attributes[ACCEL_RANK] == 7
    assert list(telemetry.span_exporters) == ["file"]
    assert telemetry.shutdown()


def test_option_objects_and_single_keywords_configure_the_same(tmp_path):
    from otel_ext.exporters import ActiveSpanOptions, ExportOptions, FileOptions, OtlpOptions

    common = {"traces_exporter": "file", "metrics_exporter": "none", "set_global": False}
    flat = configure(
        **common,
        endpoint="http://collector:4318",
        compression="gzip",
        file_dir=tmp_path,
        file_gzip=True,
        max_queue_size=64,
        export_timeout_s=3.0,
        publish_active_spans=False,
        env={},
    )
    grouped = configure(
        **common,
        otlp=OtlpOptions(endpoint="http://collector:4318", compression="gzip"),
        files=FileOptions(dir=tmp_path, gzip=True),
        export=ExportOptions(max_queue_size=64, timeout_s=3.0),
        active_spans=ActiveSpanOptions(publish=False),
        env={},
    )
    mixed = configure(**common, files=FileOptions(dir=tmp_path), file_gzip=True, env={})
    try:
        # what the drain process is given: the single keywords, whichever way they came
        assert grouped.arguments == flat.arguments
        assert flat.arguments["file_dir"] == str(tmp_path)
        assert flat.arguments["max_queue_size"] == 64
        assert mixed.arguments["file_gzip"] is True
        assert grouped.processors[0]._max_queue_size == flat.processors[0]._max_queue_size == 64
        assert grouped.shutdown_timeout_s == flat.shutdown_timeout_s == 3.0
        assert grouped.active_spans is None and flat.active_spans is None
    finally:
        for telemetry in (flat, grouped, mixed):
            assert telemetry.shutdown()
    with pytest.raises(ConfigError, match="given twice"):
        configure(**common, files=FileOptions(dir=tmp_path), file_dir=tmp_path, env={})


def test_otlp_settings_from_the_standard_variables():
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/",
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret,x-tenant=a%20b",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://metrics:9000/custom",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem",
    }
    args = dict(
        protocol=None,
        endpoint=None,
        headers={"x-tenant": "code"},
        insecure=None,
        certificate_file=None,
        client_key_file=None,
        client_certificate_file=None,
        compression=None,
        timeout_s=3.0,
    )
    traces = _otlp(env, "traces", **args)
    assert traces.protocol == "http/protobuf"
    assert traces.endpoint == "https://collector:4318/v1/traces"
    assert traces.headers == {"api-key": "secret", "x-tenant": "code"}
    assert (
        traces.insecure is False
        and traces.compression == "gzip"
        and traces.certificate_file == "/ca.pem"
    )
    metrics = _otlp(env, "metrics", **args)
    assert metrics.endpoint == "http://metrics:9000/custom"
    grpc = _otlp({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "traces", **args)
    assert (grpc.endpoint, grpc.insecure) == ("http://localhost:4317", True)
    with pytest.raises(ConfigError, match="protocol"):
        _otlp({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "traces", **args)


def test_default_is_otlp_as_the_specification_says(tmp_path):
    telemetry = configure(set_global=False, env={}, export_timeout_s=0.5)
    assert list(telemetry.span_exporters) == ["otlp"] and list(telemetry.metric_readers) == ["otlp"]
    assert telemetry.shutdown(timeout_s=3)
    telemetry = configure(
        traces_exporter="file", metrics_exporter="file", file_dir=tmp_path, set_global=False, env={}
    )
    assert list(telemetry.span_exporters) == ["file"] and list(telemetry.metric_readers) == ["file"]
    telemetry.shutdown()


def _unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_no_collector_one_line_counted_drops_and_shutdown_within_the_setting(protocol, caplog):
    import logging
    import time

    endpoint = f"http://127.0.0.1:{_unused_port()}"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_BSP_EXPORT_TIMEOUT": "4000",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16",
    }
    caplog.set_level(logging.DEBUG)
    telemetry = configure(
        set_global=False, env=env, metrics_exporter="none", publish_active_spans=False
    )
    assert telemetry.shutdown_timeout_s == 4.0
    tracer = telemetry.tracer_provider.get_tracer("test")
    for i in range(100):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    started = time.monotonic()
    assert telemetry.shutdown()
    took = time.monotonic() - started
    assert took < 4.0  # bounded by OTEL_BSP_EXPORT_TIMEOUT, not retried until it
    assert telemetry.dropped() == {"traces": 100}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert endpoint.removeprefix("http://") in warnings[0]
    assert "OTEL_TRACES_EXPORTER=file" in warnings[0]
    assert not [r for r in caplog.records if "Transient error" in r.getMessage()]


def test_collector_lost_mid_run_is_noticed_and_shutdown_stays_bounded(http_receiver, caplog):  # noqa: F811
    import logging
    import time

    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint,
        "OTEL_BSP_EXPORT_TIMEOUT": "5000",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
    }
    telemetry = configure(
        set_global=False, env=env, metrics_exporter="none", publish_active_spans=False
    )
    tracer = telemetry.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("before"):
        pass
    assert telemetry.force_flush(timeout_s=5) and http_receiver.wait_for_spans({"before"})
    http_receiver.stop()
    caplog.set_level(logging.WARNING)
    for i in range(10):
        with tracer.start_as_current_span(f"during{i}"):
            pass
    started = time.monotonic()
    telemetry.shutdown()
    assert time.monotonic() - started < 5.0
    assert telemetry.dropped() == {"traces": 10}
    assert not [r for r in caplog.records if "Transient error" in r.getMessage()]
    assert any("no OTLP collector" in r.getMessage() for r in caplog.records)


def test_configure_publishes_active_spans_of_device_spans(tmp_path):
    from otel_ext.instrumentation import device_attributes, layer
    from otel_ext.instrumentation.active_span_record import decode_record

    folder = tmp_path / "spans"
    telemetry = configure(
        traces_exporter="none",
        metrics_exporter="none",
        set_global=False,
        env={"OTEL_EXT_ACTIVE_SPAN_DIR": str(folder)},
    )
    provider = telemetry.tracer_provider
    with layer(
        "blocks.0",
        index=0,
        attributes=device_attributes("chip3", host_id="h"),
        tracer_provider=provider,
    ) as scope:
        (path,) = folder.iterdir()
        snap = decode_record(path.read_bytes())
        assert snap.device_id == "h/chip3"
        assert [e.span_id for e in snap.open] == [scope.span.get_span_context().span_id]
    snap = decode_record(path.read_bytes())
    assert snap.open == [] and [e.span_id for e in snap.ring] == [
        scope.span.get_span_context().span_id
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    assert not folder.stat().st_mode & 0o002
    telemetry.shutdown()
    assert list(folder.iterdir()) == []
    off = configure(
        traces_exporter="none",
        metrics_exporter="none",
        set_global=False,
        env={"OTEL_EXT_ACTIVE_SPAN_DIR": str(folder), "OTEL_EXT_ACTIVE_SPANS": "false"},
    )
    assert off.active_spans is None
    off.shutdown()


def test_disabled_sdk_gives_no_op_providers():
    telemetry = configure(set_global=False, env={"OTEL_SDK_DISABLED": "true"})
    assert isinstance(telemetry.tracer_provider, trace_api.NoOpTracerProvider)
    assert telemetry.shutdown()


def test_unknown_and_contradictory_exporters_raise():
    with pytest.raises(ConfigError, match="unknown exporter 'zipkinz'"):
        configure(traces_exporter="zipkinz", set_global=False, env={})
    with pytest.raises(ConfigError, match="'none' cannot be combined"):
        configure(traces_exporter="none,file", set_global=False, env={})


def test_registered_metrics_exporters_plug_in():
    created = []

    def factory(settings):
        created.append(settings.resource.attributes["service.name"])
        return InMemoryMetricReader()

    register_metrics_exporter("test-memory", factory)
    telemetry = configure(
        traces_exporter="none",
        metrics_exporter="test-memory",
        service_name="s",
        set_global=False,
        env={},
    )
    telemetry.meter_provider.get_meter("m").create_counter("c").add(1)
    reader = telemetry.metric_readers["test-memory"]
    assert [
        m.name
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    ] == ["c"]
    assert created == ["s"]
    telemetry.shutdown()


def test_perfetto_exporter_writes_spans_and_counters(tmp_path):
    telemetry = configure(
        traces_exporter="file,perfetto",
        metrics_exporter="perfetto",
        file_dir=tmp_path,
        set_global=False,
        env={},
    )
    with telemetry.tracer_provider.get_tracer("t").start_as_current_span(
        "step", attributes={ACCEL_RANK: 0}
    ):
        pass
    telemetry.meter_provider.get_meter("m").create_gauge("accel.power").set(100.0)
    assert telemetry.shutdown()
    trace = json.loads((tmp_path / "trace.perfetto.json").read_text())
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X", "C"}
    assert [r.name for r in read_spans(tmp_path)] == ["step"]


def test_accelerator_attributes_prefer_an_initialised_process_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1
    )
    try:
        attrs = accelerator_attributes(env={"RANK": "4", "WORLD_SIZE": "9"}, hostname="h")
    finally:
        dist.destroy_process_group()
    assert attrs == {ACCEL_HOST_ID: "h", ACCEL_RANK: 0, ACCEL_WORLD_SIZE: 1}
    assert accelerator_attributes(env={"RANK": "4", "WORLD_SIZE": "9"}, hostname="h") == {
        ACCEL_HOST_ID: "h",
        ACCEL_RANK: 4,
        ACCEL_WORLD_SIZE: 9,
    }
