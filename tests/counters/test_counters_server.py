"""Exposition server (negotiation, auth, TLS, health), the SDK reader, OTLP bridge and CLI."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request

import pytest
from conftest import make_cert, require_binary
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from otel_ext.cli import main
from otel_ext.counters import (
    BuiltinSimModel,
    CounterBridge,
    CounterCollector,
    OtlpCounterBridge,
    SimulatedSource,
)
from otel_ext.errors import ConfigError
from otel_ext.exporters.prometheus import (
    PrometheusExpositionServer,
    PrometheusMetricReader,
    parse_basic_auth,
    parse_listen,
    prometheus_metrics_reader,
)


def sim_bridge(chips=2):
    t = [10**18]

    def clock():
        t[0] += 10**9
        return t[0]

    bridge = CounterBridge([SimulatedSource(BuiltinSimModel(chips=chips), clock=clock)])
    bridge.open()
    return bridge


def fetch(url, headers=None, context=None):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=5, context=context) as r:
        return r.status, r.headers["Content-Type"], r.read().decode()


def test_content_negotiation_and_health():
    bridge = sim_bridge()
    bridge.sample_once()
    bridge.sample_once()
    server = PrometheusExpositionServer([CounterCollector(bridge)], port=0, health=bridge.health)
    host, port = server.start()
    try:
        assert host == "127.0.0.1"
        _, ctype, text = fetch(f"http://{host}:{port}/metrics")
        assert ctype.startswith("text/plain; version=0.0.4") and "# EOF" not in text
        _, ctype, om = fetch(
            f"http://{host}:{port}/metrics",
            {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"},
        )
        assert ctype.startswith("application/openmetrics-text; version=1.0.0")
        families = {f.name: f for f in text_string_to_metric_families(om)}  # parses strictly
        assert families["accel_device_utilization_ratio"].unit == "ratio"
        status, _, body = fetch(f"http://{host}:{port}/healthz")
        assert status == 200 and json.loads(body)["sources"]["sim"]["up"] is True
        with pytest.raises(urllib.error.HTTPError) as err:
            fetch(f"http://{host}:{port}/nope")
        assert err.value.code == 404
    finally:
        server.stop()


def test_basic_auth_required_on_metrics_only(tmp_path):
    server = PrometheusExpositionServer(
        [CounterCollector(sim_bridge())], port=0, basic_auth=("prom", "pw")
    )
    host, port = server.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            fetch(f"http://{host}:{port}/metrics")
        assert err.value.code == 401 and "Basic" in err.value.headers["WWW-Authenticate"]
        bad = "Basic " + base64.b64encode(b"prom:nope").decode()
        with pytest.raises(urllib.error.HTTPError):
            fetch(f"http://{host}:{port}/metrics", {"Authorization": bad})
        token = base64.b64encode(b"prom:pw").decode()
        for scheme in ("Basic", "basic", "BASIC"):  # RFC 7617: the scheme is case-insensitive
            auth = {"Authorization": f"{scheme} {token}"}
            assert fetch(f"http://{host}:{port}/metrics", auth)[0] == 200
        for wrong in (f"Bearer {token}", f"Basic{token}", "Basic !!!", "basic"):
            with pytest.raises(urllib.error.HTTPError):
                fetch(f"http://{host}:{port}/metrics", {"Authorization": wrong})
        assert fetch(f"http://{host}:{port}/healthz")[0] == 200
    finally:
        server.stop()
    f = tmp_path / "auth"
    f.write_text("u:p:with:colons\n")
    assert parse_basic_auth(str(f)) == ("u", "p:with:colons")
    with pytest.raises(ConfigError):
        parse_basic_auth("nocolon")


@pytest.mark.integration
def test_tls(tmp_path):
    cert, key = make_cert(tmp_path, require_binary("openssl"))
    bridge = sim_bridge()
    bridge.sample_once()
    server = PrometheusExpositionServer(
        [CounterCollector(bridge)], port=0, certfile=str(cert), keyfile=str(key)
    )
    host, port = server.start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        status, _, text = fetch(f"https://{host}:{port}/metrics", context=ctx)
        assert status == 200 and "accel_counters_source_up_ratio" in text
    finally:
        server.stop()
    with pytest.raises(ConfigError, match="TLS"):
        PrometheusExpositionServer(
            [], port=0, certfile=str(tmp_path / "missing.pem"), keyfile=str(key)
        ).start()


def test_parse_listen_errors():
    with pytest.raises(ConfigError):
        parse_listen("9400")
    with pytest.raises(ConfigError):
        parse_listen("h:99999")


def test_sdk_reader_serves_histogram_exemplars(span_exporter):
    provider, _ = span_exporter
    reader = PrometheusMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    hist = mp.get_meter("t").create_histogram("gen_ai.server.time_to_first_token", unit="s")
    with provider.get_tracer("t").start_as_current_span("request") as span:
        hist.record(0.3, {"gen_ai.request.model": "m"})
        tid = format(span.get_span_context().trace_id, "032x")
    server = PrometheusExpositionServer([reader], port=0)
    host, port = server.start()
    try:
        _, _, om = fetch(
            f"http://{host}:{port}/metrics", {"Accept": "application/openmetrics-text"}
        )
    finally:
        server.stop()
        mp.shutdown()
    fams = {f.name: f for f in text_string_to_metric_families(om)}
    buckets = [s for s in fams["gen_ai_server_time_to_first_token_seconds"].samples if s.exemplar]
    assert len(buckets) == 1 and buckets[0].exemplar.labels["trace_id"] == tid
    assert buckets[0].labels["le"] == "5.0"  # SDK default bounds 0, 5, 10...: 0.3 falls in (0, 5]


def test_prometheus_exporter_factory_serves_on_listen():
    reader = prometheus_metrics_reader(listen="127.0.0.1:0")
    mp = MeterProvider(metric_readers=[reader])
    mp.get_meter("t").create_counter("accel.device.kernels").add(3)
    try:
        _, _, text = fetch(f"http://127.0.0.1:{reader.server.port}/metrics")
        assert "accel_device_kernels_total 3.0" in text
    finally:
        mp.shutdown()


def test_otlp_bridge_observations_carry_exemplars(span_exporter):
    provider, _ = span_exporter
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    bridge = sim_bridge(chips=1)
    OtlpCounterBridge(bridge, meter_provider=mp)
    span = provider.get_tracer("t").start_span("accel.layer")
    bridge.active_spans.set_active("host0/chip0", span)
    bridge.sample_once()
    bridge.sample_once()
    span.end()
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = (m, list(m.data.data_points))
    metric, pts = points["accel.device.cycles.active"]
    assert metric.data.is_monotonic and metric.unit == "{cycle}"
    assert pts[0].exemplars and pts[0].exemplars[0].trace_id == span.get_span_context().trace_id
    want = {
        s.attributes["accel.device.id"]: s.value
        for s in bridge.families()["accel.device.utilization"]
    }
    got = {p.attributes["accel.device.id"]: p.value for p in points["accel.device.utilization"][1]}
    assert got == want
    mp.shutdown()


def test_cli_no_source_is_one_line_error(capsys, tmp_path):
    rc = main(
        [
            "exporter",
            "--source",
            "infiniband",
            "--sysfs-root",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1].startswith("otel-ext exporter: error: no counter source could start")
    assert "Traceback" not in "\n".join(err)
    assert main(["exporter", "--listen", "nonsense"]) == 1
