"""OpenTelemetry's flush and shutdown contract for every span otel-ext makes in the background.

Two real gloo ranks (two fresh interpreters, TCP rendezvous), each with the set-up the
OpenTelemetry documentation teaches (``TracerProvider`` + ``SimpleSpanProcessor`` or
``BatchSpanProcessor`` + ``InMemorySpanExporter``), ``TorchDistributedInstrumentor`` and the
deferred ``TorchLayerInstrumentor``; 7 forwards, each followed by an all-reduce. Every span of
that work must be exported by ``tracer_provider.force_flush()`` and by ``shutdown()`` alone
(before any ``flush()`` or ``uninstrument()`` of otel-ext's), and kept at a plain exit. A
job killed with SIGKILL leaves ``.partial`` files that ``otel-ext analyze`` reads and says are
from a process that did not finish. A flush whose ``time.sleep`` fails (as under a
clock-shifting ``LD_PRELOAD``) neither raises nor loses spans, and each component's drops are
exported as ``accel.telemetry.dropped{component, reason}``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext._drops import LEDGER
from otel_ext.semconv.attributes import (
    ACCEL_TELEMETRY_COMPONENT,
    ACCEL_TELEMETRY_REASON,
    ACCEL_TELEMETRY_SIGNAL,
)
from otel_ext.semconv.metrics import METRIC_ACCEL_TELEMETRY_DROPPED

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
STEPS = 7
MODULES = 4  # the model below: Sequential(Linear, ReLU, Linear) -> root + 3 children

#: one rank of the job: argv = rank, port, scenarios (comma-separated), output folder. Each
#: scenario instruments afresh with a provider of its own, runs the steps, then does what
#: its name says and prints one JSON line; ``exit`` (last) leaves with the instrumentors on,
#: ``kill`` (last) kills the process.
_RANK = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import torch, torch.distributed as dist
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor)
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_ext._drops import LEDGER
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor, TorchLayerInstrumentor

    rank, port, scenarios, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    coll, layers = TorchDistributedInstrumentor(), TorchLayerInstrumentor()
    real_sleep = time.sleep

    def failing_sleep(seconds):
        raise OSError(22, "Invalid argument")

    for scenario in scenarios.split(","):
        action, _, kind = scenario.partition("/")
        if action == "kill":
            from otel_ext.exporters import configure
            tel = configure(traces_exporter="file", metrics_exporter="none", file_dir=out,
                            service_name="killed", env={}, set_global=False,
                            schedule_delay_s=0.05)
            provider = tel.tracer_provider
        else:
            provider = TracerProvider()
            if action == "exit":
                sink = open(os.path.join(out, f"spans.{rank}.jsonl"), "w")
                exporter = ConsoleSpanExporter(
                    out=sink, formatter=lambda s: json.dumps({"name": s.name}) + "\\n")
            else:
                exporter = InMemorySpanExporter()
            simple = kind == "simple"
            provider.add_span_processor(
                SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter))
        if action == "sleep_fails":  # every sleep of otel-ext's threads and flushes fails
            time.sleep = failing_sleep
        # the Python hook's poller sleeps 0.5 ms between looks while works are open
        coll.instrument(tracer_provider=provider, native=action != "sleep_fails")
        layers.instrument(tracer_provider=provider, model=model, deferred=True)
        x = torch.ones(2, 8)
        for _ in range(STEPS):
            dist.all_reduce(model(x))
        if action in ("force_flush", "sleep_fails"):
            flushed = provider.force_flush()
        elif action == "shutdown":
            provider.shutdown()
            flushed = True
        elif action == "kill":
            provider.force_flush()
            dist.barrier()
            os.kill(os.getpid(), signal.SIGKILL)
        else:  # exit: nothing at all; the interpreter's exit hooks must keep every span
            dist.barrier()
            sys.exit(0)
        time.sleep = real_sleep
        names = [s.name for s in exporter.get_finished_spans()]
        print(json.dumps({"scenario": scenario, "flushed": flushed,
                          "collective": names.count("accel.collective"),
                          "layer": names.count("accel.layer"),
                          "drops": {f"{c}/{r}": n for (c, r, _), n in LEDGER.totals().items()}}))
        sys.stdout.flush()
        coll.uninstrument(); layers.uninstrument()
        dist.barrier()
    dist.destroy_process_group()
    """
).replace("STEPS", str(STEPS))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(scenarios: list[str], out: Path, timeout: float = 90) -> list[dict[str, Any]]:
    """Run both ranks through ``scenarios``; each must exit as the last one says; per rank,
    scenario -> its JSON line, and ``stderr``."""
    port = str(_free_port())
    env = dict(os.environ, PYTHONPATH=str(ROOT), OTEL_SDK_DISABLED="")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, str(rank), port, ",".join(scenarios), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(2)
    ]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        expected = -signal.SIGKILL if scenarios[-1] == "kill" else 0
        assert proc.returncode == expected, stderr[-3000:]
        # the SDK's words for a span that reached a processor after its shutdown
        assert "lready shutdown" not in stderr, stderr[-3000:]
        rows = [json.loads(line) for line in stdout.strip().splitlines()]
        results.append(dict({r["scenario"]: r for r in rows}, stderr=stderr))
    return results


@pytest.fixture(scope="module")
def sdk_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """The job through every SDK set-up, a failing sleep, and a plain exit (one job: the
    ranks' start-up is most of its time)."""
    out = tmp_path_factory.mktemp("sdk-job")
    scenarios = [
        "force_flush/simple",
        "force_flush/batch",
        "shutdown/simple",
        "shutdown/batch",
        "sleep_fails/simple",
        "exit/batch",
    ]
    return _job(scenarios, out), out


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "scenario", ["force_flush/simple", "force_flush/batch", "shutdown/simple", "shutdown/batch"]
)
def test_the_providers_flush_and_shutdown_export_every_background_span(
    sdk_job: tuple[list[dict[str, Any]], Path], scenario: str
) -> None:
    for rank in sdk_job[0]:
        row = rank[scenario]
        assert row["flushed"] is True
        assert (row["collective"], row["layer"]) == (STEPS, STEPS * MODULES), rank["stderr"]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_plain_exit_keeps_every_background_span(
    sdk_job: tuple[list[dict[str, Any]], Path],
) -> None:
    out = sdk_job[1]
    for rank in range(2):
        names = [
            json.loads(line)["name"]
            for line in (out / f"spans.{rank}.jsonl").read_text().splitlines()
        ]
        # the barrier after the steps is a collective too
        assert (names.count("accel.collective"), names.count("accel.layer")) == (
            STEPS + 1,
            STEPS * MODULES,
        )


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_flush_whose_sleep_fails_neither_raises_nor_loses_spans(
    sdk_job: tuple[list[dict[str, Any]], Path],
) -> None:
    for rank in sdk_job[0]:
        row = rank["sleep_fails/simple"]
        assert row["flushed"] is True
        assert (row["collective"], row["layer"]) == (STEPS, STEPS * MODULES)
        # one log line for however many failed sleeps; nothing lost, so nothing counted
        assert rank["stderr"].count("(sleep_failed): OSError: [Errno 22] Invalid argument") == 1
        assert "instrumentation/sleep_failed" not in row["drops"]


def _analyze(folder: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``otel-ext analyze FOLDER --format FMT`` (in this process); its standard output."""
    from otel_ext.cli import main

    capsys.readouterr()
    assert main(["analyze", str(folder), "--format", fmt]) == 0
    return capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_killed_job_leaves_partial_files_that_analyze_reads_and_calls_unfinished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _job(["force_flush/simple", "kill"], tmp_path)
    partials = sorted(tmp_path.glob("traces.jsonl.*.partial"))
    assert len(partials) == 2 and not list(tmp_path.glob("traces.jsonl"))
    # a cut last line, as a kill in the middle of a write leaves it
    with partials[1].open("ab") as f:
        f.write(b'{"resourceSpans": [{"resource": {"attr')
    doc = json.loads(_analyze(tmp_path, "json", capsys))
    inputs = {Path(i["path"]).name: i for i in doc["inputs"]}
    assert {n: (i["status"], i["unfinished"]) for n, i in inputs.items()} == {
        p.name: ("loaded", True) for p in partials
    }
    # 7 collectives and 7 x 4 layers per rank were flushed before the kill
    assert doc["run"]["events"] == 2 * (STEPS + STEPS * MODULES)
    cut = [s for s in doc["skipped"] if s["path"].endswith(partials[1].name)]
    assert [s["record"] for s in cut] == [f"line {len(partials[1].read_bytes().splitlines())}"]
    assert cut[0]["reason"].startswith("cut short")
    for fmt in ("text", "html"):
        assert "2 file(s) from a process that did not finish" in _analyze(tmp_path, fmt, capsys)
