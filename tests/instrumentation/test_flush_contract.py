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
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, free_port
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext._drops import LEDGER
from otel_ext.semconv.attributes import (
    ACCEL_TELEMETRY_COMPONENT,
    ACCEL_TELEMETRY_REASON,
)
from otel_ext.semconv.metrics import METRIC_ACCEL_TELEMETRY_DROPPED

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")

ROOT = REPO_ROOT
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


def _job(scenarios: list[str], out: Path, timeout: float = 90) -> list[dict[str, Any]]:
    """Run both ranks through ``scenarios``; each must exit as the last one says; per rank,
    scenario -> its JSON line, and ``stderr``."""
    port = str(free_port())
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


# -- the drain processor, in this process ----------------------------------------------------
class _Producer:
    """A background producer: ``flush`` makes its records into spans (or runs out of time)."""

    def __init__(self, provider: TracerProvider, records: int, *, in_time: bool = True):
        self.tracer = provider.get_tracer("producer")
        self.records = records
        self.in_time = in_time
        self.flushes = 0

    def flush(self, timeout: float | None = None) -> bool:
        self.flushes += 1
        if not self.in_time:
            return False
        for _ in range(self.records):
            self.tracer.start_span("late").end()
        self.records = 0
        return True

    def pending(self) -> int:
        return self.records


def _with_batch() -> tuple[TracerProvider, InMemorySpanExporter]:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    # a schedule far longer than the test: only a flush exports
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    return provider, exporter


def test_the_drain_runs_before_the_exporters_flush_and_only_once_registered() -> None:
    from otel_ext.instrumentation.provider_drain import BackgroundSpanDrain, register

    provider, exporter = _with_batch()
    producers = [_Producer(provider, 3), _Producer(provider, 2)]
    bindings = [register(p, provider) for p in producers]
    procs = provider._active_span_processor._span_processors
    assert [type(p).__name__ for p in procs] == ["BackgroundSpanDrain", "BatchSpanProcessor"]
    assert isinstance(procs[0], BackgroundSpanDrain)
    assert provider.force_flush(5_000) is True
    assert len(exporter.get_finished_spans()) == 5  # made by the drain, exported by this flush
    bindings[0].close()
    producers[0].records = 4
    assert provider.force_flush(5_000) is True
    assert [p.flushes for p in producers] == [1, 2]  # a closed binding is not drained
    provider.shutdown()


def test_a_drain_out_of_time_counts_what_is_left_and_the_exporters_still_flush() -> None:
    from otel_ext.instrumentation.provider_drain import register

    LEDGER.forget("instrumentation")
    provider, exporter = _with_batch()
    stuck = _Producer(provider, 6, in_time=False)
    binding = register(stuck, provider)
    provider.get_tracer("t").start_span("on time").end()
    assert provider.force_flush(1_000) is False
    assert [s.name for s in exporter.get_finished_spans()] == ["on time"]
    assert LEDGER.of("instrumentation") == {"flush_timeout": 6}
    provider.shutdown()  # the SDK gives shutdown no timeout: the drain's own bound
    assert LEDGER.of("instrumentation") == {"flush_timeout": 6, "shutdown_timeout": 6}
    binding.close()
    LEDGER.forget("instrumentation")


def test_a_producer_whose_flush_raises_costs_one_log_line_and_a_false(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from otel_ext.instrumentation.provider_drain import register

    class Raising(_Producer):
        def flush(self, timeout: float | None = None) -> bool:
            raise OSError(22, "Invalid argument")

    LEDGER.forget("instrumentation")
    provider, _ = _with_batch()
    producer = Raising(provider, 2)
    binding = register(producer, provider)
    with caplog.at_level(logging.WARNING):
        assert provider.force_flush(1_000) is False
        assert provider.force_flush(1_000) is False
    lines = [r.getMessage() for r in caplog.records if "drain.flush" in r.getMessage()]
    assert lines == ["otel-ext instrumentation (drain.flush): OSError: [Errno 22] Invalid argument"]
    assert LEDGER.of("instrumentation") == {"drain.flush": 2, "flush_timeout": 4}
    binding.close()
    provider.shutdown()
    LEDGER.forget("instrumentation")


def test_deferred_layers_are_drained_by_the_providers_flush_in_process() -> None:
    from otel_ext.instrumentation.deferred import DeferredSpanRecorder

    provider, exporter = _with_batch()
    # a materialiser that polls once a minute: only a drain makes the spans in time
    recorder = DeferredSpanRecorder(tracer_provider=provider, capacity=64, interval=60.0)
    outer = recorder.register("accel.layer", {"accel.layer.name": "model"})
    inner = recorder.register("accel.layer", {"accel.layer.name": "model.0"})
    for _ in range(3):
        recorder.begin(outer)
        recorder.begin(inner)
        recorder.end()
        recorder.end()
    assert provider.force_flush(5_000) is True
    assert len(exporter.get_finished_spans()) == 6
    recorder.shutdown()
    provider.shutdown()


# -- drops of every component, exported ------------------------------------------------------
def _dropped(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != METRIC_ACCEL_TELEMETRY_DROPPED:
                    continue
                for p in metric.data.data_points:
                    a = p.attributes
                    key = (a[ACCEL_TELEMETRY_COMPONENT], a[ACCEL_TELEMETRY_REASON])
                    out[key] = out.get(key, 0) + p.value
    return out


def test_every_components_drops_are_exported_with_component_and_reason() -> None:
    from opentelemetry.sdk.trace.export import SpanExporter

    from otel_ext.clocks import ClockSampler
    from otel_ext.counters import CounterBridge
    from otel_ext.counters._source import BaseSource
    from otel_ext.exporters import BoundedBatchSpanProcessor, DropCounter
    from otel_ext.instrumentation._common import guarded

    for component in ("instrumentation", "clocks", "counters"):
        LEDGER.forget(component)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    drops = DropCounter(meters)  # configure()'s counter: binds the process's ledger too

    # exporters: an exporter that raises loses its batch
    class Raising(SpanExporter):
        def export(self, spans: Any) -> Any:
            raise RuntimeError("collector exploded")

    processor = BoundedBatchSpanProcessor(Raising(), max_queue_size=8, drops=drops)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for _ in range(3):
        provider.get_tracer("t").start_span("s").end()
    processor.force_flush(5_000)
    processor.shutdown()
    # instrumentation: a telemetry call that fails on the hot path
    assert guarded("span.end", lambda: 1 / 0) is None
    # clocks: a device clock reader that fails
    sampler = ClockSampler(lambda: 1 // 0, domain="host0/chip9")
    assert sampler.sample_burst() is False

    # counters: a source that fails
    class Broken(BaseSource):
        name = "broken"

        def sample(self) -> list[Any]:
            raise OSError("device lost")

    bridge = CounterBridge([Broken()], derive=False)
    bridge.sample_once()

    points = _dropped(reader)
    assert points == {
        ("exporters", "export_raised"): 3,
        ("instrumentation", "span.end"): 1,
        ("clocks", "reader_failed"): 1,
        ("counters", "source_failed"): 1,
    }
    assert drops.totals() == {"traces": 3}
    for component in ("instrumentation", "clocks", "counters"):
        LEDGER.forget(component)
    meters.shutdown()


def test_a_failing_log_handler_or_meter_never_reaches_the_caller() -> None:
    from otel_ext._drops import DropLedger

    class Broken(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise RuntimeError("handler down")

    logger = logging.getLogger("test_flush_contract.broken")
    logger.addHandler(Broken())
    logger.propagate = False
    ledger = DropLedger(logger)
    ledger.drop("c", "r", 2, message="%d %s", args=("not a number",))  # bad format too
    ledger.failed("c", "r", OSError(5, "EIO"))
    assert ledger.totals() == {("c", "r", None): 3}
    assert ledger.bind(object()) is False  # not a meter provider: refused, not raised


# -- configuration ---------------------------------------------------------------------------
def test_configure_has_its_real_signature_and_import_otel_ext_stays_light() -> None:
    import inspect

    import otel_ext
    from otel_ext.exporters import configure

    assert str(inspect.signature(otel_ext.configure)) == str(inspect.signature(configure))
    assert (
        "traces_exporter" in (otel_ext.configure.__doc__ or "")
        or inspect.signature(otel_ext.configure).parameters["traces_exporter"].kind
        is inspect.Parameter.KEYWORD_ONLY
    )
    probe = (
        "import sys, otel_ext; "
        "print([m for m in sys.modules if m.split('.')[0] == 'torch' "
        "or m.startswith(('opentelemetry.sdk', 'otel_ext.exporters'))])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_a_file_dir_without_a_file_exporter_is_one_warning_naming_both_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_ext.exporters import configure

    LEDGER.forget("config")
    env = {"OTEL_EXT_FILE_DIR": str(tmp_path), "OTEL_TRACES_EXPORTER": "console",
           "OTEL_METRICS_EXPORTER": "none"}  # fmt: skip
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            configure(env=env, set_global=False, detect_accelerator=False).shutdown(1.0)
        used = configure(
            traces_exporter="file", metrics_exporter="none", env=env, set_global=False,
            detect_accelerator=False,
        )  # fmt: skip
        used.tracer_provider.get_tracer("t").start_span("kept").end()
        used.shutdown(1.0)
    warned = [r.getMessage() for r in caplog.records if "file_dir_unused" in r.getMessage()]
    assert len(warned) == 1
    assert "OTEL_EXT_FILE_DIR" in warned[0] and "OTEL_TRACES_EXPORTER=file" in warned[0]
    assert "traces: console" in warned[0]
    assert list(tmp_path.glob("traces.jsonl"))  # the file exporter uses it when it is on
    LEDGER.forget("config")


def test_device_spans_drained_into_the_clock_reconciling_processor_are_exported_by_one_flush() -> (
    None
):
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_ext.clocks import ClockReconcilingSpanProcessor
    from otel_ext.instrumentation.provider_drain import register
    from otel_ext.semconv.attributes import (
        ACCEL_CLOCK_DOMAIN,
        ACCEL_CLOCK_RAW_END_TICKS,
        ACCEL_CLOCK_RAW_START_TICKS,
    )

    exporter = InMemorySpanExporter()
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=600_000)
    # device spans held back a minute (no mapping yet): only a flush releases them
    clocks = ClockReconcilingSpanProcessor(batch, {}.get, hold_back_s=60.0, background=False)
    provider = TracerProvider()
    provider.add_span_processor(clocks)

    class DeviceSpans(_Producer):
        def flush(self, timeout: float | None = None) -> bool:
            for i in range(self.records):
                attrs = {
                    ACCEL_CLOCK_DOMAIN: "host0/chip0",
                    ACCEL_CLOCK_RAW_START_TICKS: 10 * i,
                    ACCEL_CLOCK_RAW_END_TICKS: 10 * i + 5,
                }
                self.tracer.start_span("accel.kernel", attributes=attrs).end()
            self.records = 0
            return True

    producer = DeviceSpans(provider, 4)
    binding = register(producer, provider)
    assert provider.force_flush(5_000) is True
    assert [s.name for s in exporter.get_finished_spans()] == ["accel.kernel"] * 4
    assert clocks.unaligned == 4  # no mapping by the flush: forwarded as recorded, counted
    binding.close()
    provider.shutdown()


def test_a_producer_made_before_the_global_provider_is_drained_by_it() -> None:
    """OpenTelemetry's global provider is set once per process: checked in a fresh one."""
    probe = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from otel_ext.instrumentation.deferred import DeferredSpanRecorder

        recorder = DeferredSpanRecorder(capacity=64, interval=60.0)  # the proxy provider now
        layer = recorder.register("accel.layer", {"accel.layer.name": "model"})
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
        trace.set_tracer_provider(provider)
        for _ in range(3):
            recorder.begin(layer); recorder.end()
        print(provider.force_flush(5_000), len(exporter.get_finished_spans()))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["True", "3"], out.stderr[-2000:]


def test_a_killed_processs_gzip_partial_file_is_read_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = textwrap.dedent(
        f"""
        import os, signal
        from otel_ext.exporters import configure
        tel = configure(traces_exporter="file", metrics_exporter="none", file_dir={str(tmp_path)!r},
                        file_gzip=True, env={{}}, set_global=False, detect_accelerator=False)
        tracer = tel.tracer_provider.get_tracer("job")
        for i in range(50):
            tracer.start_span(f"s{{i}}").end()
        tel.force_flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", job], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert len(list(tmp_path.glob("traces.jsonl.gz.*.partial"))) == 1  # a gzip never ended
    doc = json.loads(_analyze(tmp_path, "json", capsys))
    assert [(i["status"], i["unfinished"]) for i in doc["inputs"]] == [("loaded", True)]
    assert doc["run"]["events"] == 50
