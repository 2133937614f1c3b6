"""Integration: a real Prometheus server scrapes the exporter daemon and an in-process bridge.

The daemon is ``otel-ext exporter --source sim --sim-constant`` in a subprocess (derived
metrics have exact expected values); the in-process bridge's exemplars come from spans of
an in-memory-exported tracer, and Prometheus' ``/api/v1/query_exemplars`` must return
those spans' trace ids.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from conftest import free_port, require_binary, start_prometheus

from otel_ext.counters import BuiltinSimModel, CounterBridge, CounterCollector, SimulatedSource
from otel_ext.exporters.prometheus import PrometheusExpositionServer

pytestmark = pytest.mark.integration
DEADLINE_S = 30.0


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def poll(what: str, fn, deadline: float):
    """Call ``fn`` until it returns something truthy or the deadline passes."""
    last_exc = None
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except OSError as exc:
            last_exc = exc
        time.sleep(0.2)  # polling an external server (not synchronising our own threads)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_exc})")


def test_prometheus_scrapes_daemon_and_exemplars_point_to_exported_spans(tmp_path, span_exporter):
    prom = require_binary("prometheus")
    provider, exporter = span_exporter
    tracer = provider.get_tracer("test")
    deadline = time.monotonic() + DEADLINE_S

    # the daemon, in a subprocess
    dport = free_port()
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_ext.cli",
            "exporter",
            "--source",
            "sim",
            "--sim-constant",
            "--sim-chips",
            "4",
            "--listen",
            f"127.0.0.1:{dport}",
            "--interval",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    # an in-process bridge whose exemplars come from real spans
    model = BuiltinSimModel(chips=2, host="inproc", varying=True)
    bridge = CounterBridge([SimulatedSource(model)], interval_s=0.25)
    bridge.open()
    server = PrometheusExpositionServer([CounterCollector(bridge)], port=0)
    _, iport = server.start()
    promproc, api = start_prometheus(
        prom, tmp_path, {"daemon": dport, "inproc": iport}, exemplars=True
    )
    trace_ids: set[str] = set()
    try:
        poll(
            "daemon /healthz", lambda: get_json(f"http://127.0.0.1:{dport}/healthz")["ok"], deadline
        )
        bridge.start()

        def query(q: str) -> list:
            return get_json(f"{api}/query?query={urllib.parse.quote(q)}")["data"]["result"]

        def spans_and_exemplars():
            for dev in ("inproc/chip0", "inproc/chip1"):
                span = tracer.start_span("accel.layer")
                bridge.active_spans.set_active(dev, span)
                trace_ids.add(format(span.get_span_context().trace_id, "032x"))
                span.end()
            now = time.time()
            q = urllib.parse.quote(
                '{__name__=~"accel_device_cycles_active_total|accel_collective_duration_seconds_bucket",job="inproc"}'
            )
            data = get_json(f"{api}/query_exemplars?query={q}&start={now - 60}&end={now + 5}")[
                "data"
            ]
            names = {d["seriesLabels"]["__name__"] for d in data if d["exemplars"]}
            return (
                data
                if names
                == {"accel_device_cycles_active_total", "accel_collective_duration_seconds_bucket"}
                else None
            )

        exemplar_data = poll("exemplars in Prometheus", spans_and_exemplars, deadline)
        util = poll(
            "daemon utilization series",
            lambda: (
                (r := query('accel_device_utilization_ratio{job="daemon"}')) and len(r) == 4 and r
            ),
            deadline,
        )
        mfu = query('accel_device_mfu_ratio{job="daemon"}')
        ratio = query('accel_device_clock_ratio{job="daemon"}')
        power = query('hw_power_watts{job="daemon"}')
    finally:
        promproc.terminate()
        daemon.terminate()
        bridge.stop()
        server.stop()
        promproc.wait(10)
        out = daemon.communicate(timeout=10)[0].decode()
    assert daemon.returncode == 0, out  # clean SIGTERM shutdown
    assert "stopped" in out

    truth = BuiltinSimModel(chips=4, varying=False)
    for name, result in (
        ("accel.device.utilization", util),
        ("accel.device.mfu", mfu),
        ("accel.device.clock.ratio", ratio),
    ):
        got = {r["metric"]["accel_device_id"]: float(r["value"][1]) for r in result}
        assert got == {
            d: pytest.approx(truth.expected(d)[name], rel=1e-6)
            for d in (f"host0/chip{i}" for i in range(4))
        }, name
    assert {float(r["value"][1]) for r in power} == {truth.rates(i)["power"] for i in range(4)}

    exported = {format(s.context.trace_id, "032x") for s in exporter.get_finished_spans()}
    seen = {e["labels"]["trace_id"] for d in exemplar_data for e in d["exemplars"]}
    assert seen and seen <= exported and seen <= trace_ids
    for d in exemplar_data:
        for e in d["exemplars"]:
            assert len(e["labels"]["span_id"]) == 16
