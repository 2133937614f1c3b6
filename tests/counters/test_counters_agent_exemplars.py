"""Integration: the node agent's exemplars link to spans of workloads in other processes.

Real processes only: ``otel-ext exporter --source sim --host-id H`` (the agent), workload
processes creating layer and collective spans on ``H/chip0`` under ``otel_ext.configure()``
(file exporter), and a real Prometheus (exemplar storage on) scraping the agent. The
trace and span ids Prometheus returns through ``query_exemplars`` must be spans the
workloads exported, from the workload running at that time, with the agent started after
a workload, restarted while it runs, and started before the next one. ``H/chip1`` runs no
span, so it must get no exemplar.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port, require_binary, start_prometheus

from otel_ext.exporters import read_spans

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HOST = "H"
PHASE_DEADLINE_S = 40.0
METRICS = ("accel_device_cycles_active_total", "accel_collective_duration_seconds_bucket")

WORKLOAD = """
import sys, time
from pathlib import Path
import otel_ext
from otel_ext.instrumentation import collective, device_attributes, layer

out, host, stop = sys.argv[1], sys.argv[2], Path(sys.argv[3])
telemetry = otel_ext.configure(traces_exporter="file", metrics_exporter="none",
                               file_dir=out, schedule_delay_s=0.1)
attrs = device_attributes("chip0", host_id=host)
print("ready", flush=True)
i = 0
while not stop.exists():
    with layer(f"blocks.{i % 4}", index=i % 4, attributes=attrs):
        time.sleep(0.02)  # the layer's own compute
        with collective("all_reduce", group="tp0", group_size=2, rank=0, nbytes=1 << 20,
                        seq=i, attributes=attrs):
            time.sleep(0.06)  # the collective
    i += 1
print("spans", 2 * i, flush=True)
telemetry.shutdown()
"""


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def poll(what: str, fn, deadline_s: float = PHASE_DEADLINE_S):
    """Call ``fn`` until it returns something truthy (polling external servers)."""
    deadline = time.monotonic() + deadline_s
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except OSError as exc:
            last_exc = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_exc})")


class Workload:
    def __init__(self, tmp: Path, name: str, env: dict[str, str]):
        self.out = tmp / name
        self.stop_file = tmp / f"{name}.stop"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKLOAD, str(self.out), HOST, str(self.stop_file)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        assert line.strip() == "ready", self.proc.stderr.read() if self.proc.stderr else line
        self.ready = time.time()

    def stop(self) -> set[tuple[str, str]]:
        self.stop_file.touch()
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        spans = list(read_spans(self.out / "traces.jsonl"))
        assert len(spans) == int(out.split()[-1])  # every span it made was exported
        assert {s.attributes["accel.device.id"] for s in spans} == {f"{HOST}/chip0"}
        return {(s.trace_id, s.span_id) for s in spans}


def start_agent(port: int, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_ext.cli",
            "exporter",
            "--source",
            "sim",
            "--sim-chips",
            "2",
            "--host-id",
            HOST,
            "--listen",
            f"127.0.0.1:{port}",
            "--interval",
            "0.25",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_agent(agent: subprocess.Popen) -> str:
    agent.terminate()
    out = agent.communicate(timeout=20)[0]
    assert agent.returncode == 0, out
    return out


def test_agent_exemplars_are_the_workloads_spans(tmp_path: Path) -> None:
    prom = require_binary("prometheus")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_EXT_ACTIVE_SPAN_DIR": str(tmp_path / "spans"),
    }
    aport = free_port()
    promproc, api = start_prometheus(prom, tmp_path, {"agent": aport}, exemplars=True)
    t_begin = time.time()

    def exemplars(since: float) -> list[tuple[str, str, str, float, str]]:
        q = urllib.parse.quote('{__name__=~"' + "|".join(METRICS) + '",job="agent"}')
        data = get_json(
            f"{api}/query_exemplars?query={q}&start={t_begin - 5}&end={time.time() + 5}"
        )
        return [
            (
                d["seriesLabels"]["__name__"],
                d["seriesLabels"].get("accel_device_id", ""),
                e["labels"]["trace_id"],
                float(e["timestamp"]),
                e["labels"]["span_id"],
            )
            for d in data["data"]
            for e in d["exemplars"]
            if float(e["timestamp"]) > since
        ]

    workload_a = workload_b = agent = None
    banner = ""
    try:
        # 1. the agent starts after workload A
        workload_a = Workload(tmp_path, "a", env)
        agent = start_agent(aport, env)
        assert agent.stdout is not None
        banner = agent.stdout.readline()
        t_agent1 = time.time()
        poll("exemplars from the first agent", lambda: exemplars(t_agent1))
        # 2. the agent restarts while A runs
        stop_agent(agent)
        agent = start_agent(aport, env)
        t_agent2 = time.time()
        poll("exemplars after the agent restarted", lambda: exemplars(t_agent2))
        # 3. A stops (its records go), then B starts with the agent already running
        spans_a = workload_a.stop()
        t_a_stopped = time.time()
        workload_b = Workload(tmp_path, "b", env)
        t_b = workload_b.ready
        poll(
            "exemplars of workload B on both metrics",
            lambda: {name for name, *_ in exemplars(t_b)} == set(METRICS),
        )
        spans_b = workload_b.stop()
        everything = exemplars(t_begin - 5)
    finally:
        for w in (workload_a, workload_b):
            if w is not None and w.proc.poll() is None:
                w.stop_file.touch()
                w.proc.kill()
        if agent is not None and agent.poll() is None:
            stop_agent(agent)
        promproc.terminate()
        promproc.wait(10)

    assert "sources: sim (asked, SIMULATED counters)" in banner
    assert str(tmp_path / "spans") in banner
    assert {dev for _, dev, *_ in everything} == {f"{HOST}/chip0"}  # chip1 ran nothing
    during_a = {(t, s) for _, _, t, ts, s in everything if t_agent1 < ts < t_a_stopped}
    during_b = {(t, s) for _, _, t, ts, s in everything if ts > t_b}
    assert during_a and during_a <= spans_a
    assert during_b and during_b <= spans_b
    assert {(t, s) for _, _, t, _, s in everything} <= spans_a | spans_b
    assert list((tmp_path / "spans").iterdir()) == []  # both workloads cleaned up at exit
