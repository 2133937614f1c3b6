"""Running a simulation end to end: build the cluster, run the engine, write the files.

:func:`run_simulation` writes, into one folder:

* ``traces.jsonl`` and ``metrics.jsonl``: OTLP/JSON, written by the project's file exporters;
* ``timeline.json``: the Perfetto timeline of both, streamed by the exporters' Perfetto
  exporter from the same batches;
* ``truth.json``: the injected faults, the true clock parameters and the true event times
  (never read by the analysis).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ext.counters import Sample
from otel_ext.errors import ConfigError
from otel_ext.semconv.registry import device_specs
from otel_ext.sim._clocks import EPOCH_NS, ChipClock, HostClock
from otel_ext.sim._config import SimConfig, chip_name, host_name
from otel_ext.sim._counters import SimCounterModel
from otel_ext.sim._engine import Engine
from otel_ext.sim._telemetry import SimTelemetry

__all__ = ["OUTPUT_FILES", "LiveCounters", "SimResult", "run_simulation"]

#: the files a run writes into its output folder
OUTPUT_FILES = ("traces.jsonl", "metrics.jsonl", "timeline.json", "truth.json")

ProgressFn = Callable[[int, int, float], None]
SliceFn = Callable[[int, list[Sample]], None]


def _span_exporter(path: Path) -> Any:
    from otel_ext.exporters import OtlpJsonFileSpanExporter

    return OtlpJsonFileSpanExporter(path)


def _metric_exporter(path: Path) -> Any:
    from otel_ext.exporters import OtlpJsonFileMetricExporter

    return OtlpJsonFileMetricExporter(path)


def _perfetto_exporter(path: Path) -> Any:
    from otel_ext.exporters import PerfettoTraceExporter

    # time zero one second before the run: host clocks sit within a millisecond of it
    return PerfettoTraceExporter(path, time_origin_ns=EPOCH_NS - 1_000_000_000, overwrite=True)


class _TeeSpanExporter(SpanExporter):
    """Hands every batch to several span exporters (OTLP/JSON file and Perfetto timeline)."""

    def __init__(self, exporters: list[SpanExporter]) -> None:
        self.exporters = exporters

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.SUCCESS
        for exporter in self.exporters:
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                result = SpanExportResult.FAILURE
        return result

    def shutdown(self) -> None:
        for exporter in self.exporters:
            exporter.shutdown()


class _TeeMetricExporter(MetricExporter):
    """Hands every batch of points to several metric exporters."""

    def __init__(self, exporters: list[MetricExporter]) -> None:
        super().__init__()
        self.exporters = exporters

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        result = MetricExportResult.SUCCESS
        for exporter in self.exporters:
            if exporter.export(metrics_data) is not MetricExportResult.SUCCESS:
                result = MetricExportResult.FAILURE
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return all(e.force_flush() for e in self.exporters)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        for exporter in self.exporters:
            exporter.shutdown()


class LiveCounters:
    """A read-only view of a running simulation's counters, for a live ``/metrics`` endpoint.

    ``read(now_ns)`` returns the counters as of the latest simulated time slice (whatever
    ``now_ns`` is: the simulation, not the wall clock, decides what time it is), so it can
    be handed to ``otel_ext.counters.SimulatedSource`` without disturbing the run.
    """

    def __init__(self, model: SimCounterModel) -> None:
        self.model = model

    def read(self, now_ns: int) -> list[Sample]:
        """The latest reading (empty before the first slice)."""
        return self.model.latest()

    def describe(self) -> list[Any]:
        """The series the model offers."""
        return self.model.describe()


@dataclass
class SimResult:
    """What a run produced.

    Attributes:
        out_dir: the output folder.
        files: output name -> path.
        config: the validated configuration.
        requests: requests served.
        steps: engine steps simulated.
        collectives: all-reduces simulated.
        spans: spans written.
        metric_points: metric data points written.
        virtual_seconds: simulated time from the first arrival to the last sample.
        wall_seconds: real time the run took.
        counters: a live view of the counter model (see :class:`LiveCounters`).
    """

    out_dir: Path
    files: dict[str, Path]
    config: SimConfig
    requests: int
    steps: int
    collectives: int
    spans: int
    metric_points: int
    virtual_seconds: float
    wall_seconds: float
    counters: LiveCounters | None = field(default=None, repr=False)

    @property
    def events(self) -> int:
        """Telemetry events generated: spans plus metric points."""
        return self.spans + self.metric_points


def _clear_outputs(out_dir: Path) -> None:
    for entry in os.scandir(out_dir):
        name = entry.name
        stem = name.split(".")[0]
        if name in OUTPUT_FILES or (
            stem in ("traces", "metrics") and (name.endswith(".jsonl") or name.endswith(".partial"))
        ):
            os.unlink(entry.path)


def run_simulation(
    config: SimConfig,
    out_dir: str | os.PathLike[str],
    *,
    progress: ProgressFn | None = None,
    on_slice: SliceFn | None = None,
    on_start: Callable[[LiveCounters], None] | None = None,
    timeline: bool = True,
) -> SimResult:
    """Simulate the cluster and write its telemetry and ground truth into ``out_dir``.

    Args:
        config: what to simulate (validated here).
        out_dir: output folder (created; earlier outputs of a run in it are replaced).
        progress: called now and then with (requests done, requests total, virtual s).
        on_slice: called after every counter sample with (true virtual ns, the samples),
            e.g. to serve live counters.
        on_start: called once before the run with the live counter view (hand it to
            ``otel_ext.counters.SimulatedSource`` to serve ``/metrics`` while it runs).
        timeline: also write the Perfetto ``timeline.json``.

    Returns:
        A :class:`SimResult`.

    Raises:
        ConfigError: the configuration is invalid, or the output folder is unusable.

    >>> import tempfile
    >>> from otel_ext.sim import SimConfig
    >>> result = run_simulation(SimConfig(hosts=1, chips=2, requests=3, seed=1), tempfile.mkdtemp(),
    ...                         timeline=False)
    >>> result.requests, sorted(result.files)
    (3, ['metrics.jsonl', 'traces.jsonl', 'truth.json'])
    """
    started = time.perf_counter()
    cfg = config.validated()
    out = _prepare_out_dir(out_dir)
    specs = device_specs(cfg.device_model)
    host_clocks, chip_clocks = _make_clocks(cfg)
    engine = Engine(cfg, specs, sink=None, counters=None, progress=progress)  # type: ignore[arg-type]
    counters = _counter_model(cfg, specs, engine, host_clocks)
    live = LiveCounters(counters)
    engine.counters = counters
    span_exporter, metric_exporter = _exporters(out, timeline=timeline)
    telemetry = SimTelemetry(
        cfg,
        engine,
        host_clocks,
        chip_clocks,
        counters,
        span_exporter,
        metric_exporter,
        on_slice=on_slice,
    )
    engine.sink = telemetry
    if on_start is not None:
        on_start(live)
    _run_to_end(engine, telemetry, span_exporter, metric_exporter)
    spans = sum(p.exported for p in telemetry.processors)
    truth = _truth(cfg, engine, host_clocks, chip_clocks, spans, telemetry.metric_points)
    text = json.dumps(truth, separators=(",", ":")) + "\n"
    (out / "truth.json").write_text(text, encoding="utf-8")
    return SimResult(
        out_dir=out,
        files=_output_files(out, timeline=timeline),
        config=cfg,
        requests=engine.done,
        steps=sum(h.step for h in engine.hosts),
        collectives=len(engine.collectives),
        spans=spans,
        metric_points=telemetry.metric_points,
        virtual_seconds=(engine.end_ns - EPOCH_NS) / 1e9,
        wall_seconds=time.perf_counter() - started,
        counters=live,
    )


def _run_to_end(
    engine: Engine,
    telemetry: SimTelemetry,
    span_exporter: SpanExporter,
    metric_exporter: MetricExporter,
) -> None:
    """Run the engine to its end and record the device activity still buffered; the
    telemetry and exporters shut down (files complete) whatever happens."""
    try:
        engine.run()
        telemetry.flush_device_activity(engine.end_ns)
    finally:
        telemetry.shutdown()
        span_exporter.shutdown()
        metric_exporter.shutdown()


def _output_files(out: Path, *, timeline: bool) -> dict[str, Path]:
    """The run's output files by name (the timeline when one is written)."""
    names = ["traces.jsonl", "metrics.jsonl", "truth.json"]
    if timeline:
        names.append("timeline.json")
    return {name: out / name for name in names}


def _prepare_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """The output folder, created, with an earlier run's outputs removed.

    Raises:
        ConfigError: the folder cannot be created or cleared.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _clear_outputs(out)
    except OSError as exc:
        raise ConfigError(
            f"cannot use output folder: {exc.strerror or exc}", path=str(out)
        ) from None
    return out


def _make_clocks(cfg: SimConfig) -> tuple[list[HostClock], list[ChipClock]]:
    """Each host's clock (host 0 the reference) and each chip's counter clock, host-major,
    drawn from one generator seeded by the run's seed."""
    rng = random.Random(f"clocks:{cfg.seed}")
    host_clocks = [
        HostClock.random(host_name(h), rng, reference=(h == 0)) for h in range(cfg.hosts)
    ]
    expected_ns = int(cfg.requests / cfg.arrival_rate * 1e9) + 2_000_000_000
    chip_clocks = [
        ChipClock.random(chip_name(h, c), rng, run_ns=expected_ns)
        for h in range(cfg.hosts)
        for c in range(cfg.chips)
    ]
    return host_clocks, chip_clocks


def _counter_model(
    cfg: SimConfig, specs: dict[str, float], engine: Engine, host_clocks: list[HostClock]
) -> SimCounterModel:
    """The counter model: samples stamped with their host's clock, chips at the engine's
    clock ratio, the model's weights and KV cache in device memory."""
    model = cfg.model
    return SimCounterModel(
        cfg,
        specs,
        host_clock=lambda h, t: host_clocks[h].read(t),
        clock_ratio=engine.clock_ratio,
        cooling_failed_at=engine.cooling_failed_at,
        weights_bytes_per_chip=model.parameters * model.bytes_per_param / cfg.chips,
        kv_bytes_per_token=model.kv_bytes_per_token,
    )


def _exporters(out: Path, *, timeline: bool) -> tuple[_TeeSpanExporter, _TeeMetricExporter]:
    """The span and metric exporters: OTLP JSON lines files, and the Perfetto timeline."""
    span_exporters: list[SpanExporter] = [_span_exporter(out / "traces.jsonl")]
    metric_exporters: list[MetricExporter] = [_metric_exporter(out / "metrics.jsonl")]
    if timeline:
        perfetto = _perfetto_exporter(out / "timeline.json")
        span_exporters.append(perfetto)
        metric_exporters.append(perfetto.metric_exporter())
    return _TeeSpanExporter(span_exporters), _TeeMetricExporter(metric_exporters)


def _truth(
    cfg: SimConfig,
    engine: Engine,
    host_clocks: list[HostClock],
    chip_clocks: list[ChipClock],
    spans: int,
    metric_points: int,
) -> dict[str, Any]:
    throttles = {
        chip_name(h, c): {"cooling_failure_ns": t0, "clock_drop_ns": t1, "clock_ratio": ratio}
        for (h, c), (t0, t1, ratio) in sorted(engine.throttle.items())
    }
    return {
        "format": "otel-ext-sim-truth/1",
        "config": {
            "hosts": cfg.hosts,
            "chips": cfg.chips,
            "requests": cfg.requests,
            "seed": cfg.seed,
            "mode": cfg.resolved_mode(),
            "topology": cfg.topology,
            "layer_groups": cfg.layer_groups,
            "arrival_rate": cfg.arrival_rate,
            "model": cfg.model.name,
            "device_model": cfg.device_model,
        },
        "faults": [f.to_dict() for f in cfg.faults],
        "epoch_ns": EPOCH_NS,
        "end_ns": engine.end_ns,
        "clocks": {
            "hosts": {c.host: c.to_truth() for c in host_clocks},
            "chips": {c.domain: c.to_truth() for c in chip_clocks},
        },
        "throttles": throttles,
        "requests": [
            {
                "id": r.request_id,
                "prefill_host": host_name(r.prefill_host),
                "decode_host": host_name(r.decode_host),
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
                "arrival_ns": r.arrival_ns,
                "prefill_start_ns": r.prefill_start_ns,
                "first_token_ns": r.first_token_ns,
                "kv_start_ns": r.kv_start_ns or None,
                "kv_end_ns": r.kv_end_ns or None,
                "decode_start_ns": r.decode_start_ns or None,
                "first_decode_end_ns": r.first_decode_end_ns or None,
                "client_first_token_ns": _client_first_token(cfg, r),
                "accelerator_ns": round(r.accel_ns),
                "energy_j": round(r.energy_j, 6),
                "done_ns": r.done_ns,
            }
            for r in engine.requests
        ],
        "collectives": [
            {
                "id": c.collective_id,
                "host": host_name(c.host),
                "start_ns": c.start_ns,
                "end_ns": c.end_ns,
                "arrivals_ns": c.arrivals_ns,
                "bytes": c.nbytes,
            }
            for c in engine.collectives
        ],
        "counts": {"spans": spans, "metric_points": metric_points},
    }


def _client_first_token(cfg: SimConfig, r: Any) -> int:
    """When the client sees the first token: the end of prefill when one engine serves the
    request; under disaggregation, the end of the first decode step on the decode host (the
    decode engine streams the tokens; a one-token request ends with its prefill)."""
    if cfg.resolved_mode() == "disaggregated" and r.first_decode_end_ns:
        return int(r.first_decode_end_ns)
    return int(r.first_token_ns)
