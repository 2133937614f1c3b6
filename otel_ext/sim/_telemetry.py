"""From simulated events to telemetry, through the same public interfaces a real workload uses.

* Spans come from :mod:`otel_ext.instrumentation.api` (``layer``, ``collective``,
  ``request``, ``phase``, ``record_device_activity``, ``record_link_transfer``), one
  OpenTelemetry ``TracerProvider`` per host (its own resource and a seeded id generator, so
  ids are reproducible).
* Device activity (kernels, all-reduce kernels, link transfers) is timestamped in the chip's
  own ticks and buffered, as a profiler's activity buffers are; every flush interval a
  :class:`otel_ext.clocks.ClockSampler` per chip (reading the simulated chip timer and host
  clock through a virtual read path with asymmetric delays and outliers) fits a mapping, and
  the buffered activity is recorded through it: spans carry the raw ticks and the mapping's
  error bound.
* Counters are read from :class:`~otel_ext.sim._counters.SimCounterModel` at every counter
  interval and written, with the clock fits (``accel.clock.*``) and the TTFT/TPOT/duration
  histograms, as OTLP metric points stamped with the reading host's clock.
* Every all-reduce (traced step or not) adds each member's duration (enter to exit) to
  ``accel.collective.duration`` and its lateness (enter after the first member's) to
  ``accel.collective.arrival.lateness``, per chip; on traced steps the exemplar is that
  chip's ``accel.collective`` span.

Nothing here names a fault: the telemetry shows only what the hardware and the serving
engine would show.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import AttributeValue

from otel_ext.clocks import ClockSampler, ClockSyncSpanEmitter
from otel_ext.counters import HistogramValue, Sample
from otel_ext.instrumentation.api import (
    collective,
    collective_attributes,
    layer,
    phase,
    record_device_activity,
    record_link_transfer,
    request,
)
from otel_ext.instrumentation.collectives import COLLECTIVE_DURATION_BOUNDS_S
from otel_ext.instrumentation.inference import (
    DURATION_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    RequestAccounting,
    engine_step,
)
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_COUNTER_BITS,
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_REFERENCE,
    ACCEL_CLOCK_TICKS_PER_SECOND,
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_OP,
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_KIND,
    ACCEL_DEVICE_MODEL,
    ACCEL_HOST_ID,
    ACCEL_LINK_BYTES,
    ACCEL_LINK_DST,
    ACCEL_LINK_ID,
    ACCEL_LINK_KIND,
    ACCEL_LINK_SRC,
    ACCEL_PARALLEL_DP_RANK,
    ACCEL_PARALLEL_TP_RANK,
    ACCEL_RANK,
    ACCEL_REQUEST_DEVICE_TIME_NS,
    ACCEL_REQUEST_ID,
    ACCEL_WORLD_SIZE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    HOST_NAME,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_CLOCK_BOUND,
    METRIC_ACCEL_CLOCK_DRIFT,
    METRIC_ACCEL_CLOCK_OFFSET,
    METRIC_ACCEL_CLOCK_SAMPLES,
    METRIC_ACCEL_COLLECTIVE_ARRIVAL_LATENESS,
    METRIC_ACCEL_COLLECTIVE_DURATION,
    METRIC_GEN_AI_SERVER_REQUEST_DURATION,
    METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
    METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
    METRIC_SPECS,
)
from otel_ext.semconv.spans import SPAN_ACCEL_LINK_TRANSFER
from otel_ext.sim._clocks import COUNTER_BITS, EPOCH_NS, TICKS_PER_SECOND, ChipClock, HostClock
from otel_ext.sim._config import SimConfig, chip_name, host_name, nic_name
from otel_ext.sim._counters import SimCounterModel
from otel_ext.sim._engine import Engine, GroupRecord, KvTransfer, Request, StepRecord

__all__ = ["OrderedBatchSpanProcessor", "SeededIdGenerator", "SimTelemetry"]

SCOPE_NAME = "otel_ext.sim"
_OPERATION = "text_completion"
# explicit bucket boundaries advised by the OpenTelemetry gen_ai semantic conventions: the
# same ones the inference instrumentation gives its histograms
_TTFT_BOUNDS = TTFT_BUCKETS
_TPOT_BOUNDS = TPOT_BUCKETS
_DURATION_BOUNDS = DURATION_BUCKETS
#: device activity buffers are flushed (and aligned) this often, in virtual ns
_FLUSH_NS = 500_000_000
#: clock brackets kept for a fit (virtual s); under half the 32-bit counter period
_CLOCK_WINDOW_S = 1.5


class SeededIdGenerator(IdGenerator):
    """Trace and span ids from a seeded generator, so a simulated run's ids are reproducible.

    >>> a, b = SeededIdGenerator("x"), SeededIdGenerator("x")
    >>> a.generate_trace_id() == b.generate_trace_id()
    True
    """

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1


class OrderedBatchSpanProcessor(SpanProcessor):
    """Exports ended spans in batches of ``max_batch``, synchronously, in the order they ended.

    The simulation runs in virtual time on one thread, so there is no workload to protect from
    export latency; batching on the caller's thread keeps the files byte-for-byte
    reproducible (a background thread would cut batches at timing-dependent places).
    The exporter is not shut down with the processor (several providers share it).
    """

    def __init__(self, exporter: SpanExporter, *, max_batch: int = 2048) -> None:
        self._exporter = exporter
        self._max = max_batch
        self._batch: list[ReadableSpan] = []
        self.exported = 0

    def on_end(self, span: ReadableSpan) -> None:
        self._batch.append(span)
        if len(self._batch) >= self._max:
            self._export()

    def _export(self) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            self._exporter.export(batch)
            self.exported += len(batch)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._export()
        return True

    def shutdown(self) -> None:
        self._export()


class _ReadPath:
    """The virtual host-read / device-read / host-read sequence a sampler sees.

    Delays are asymmetric (the device read is slower to return than to start) with
    exponential tails, and 2 % of reads are hit by a long interruption on one side.
    """

    def __init__(self, chip: ChipClock, host: HostClock, rng: random.Random) -> None:
        self.chip, self.host, self.rng = chip, host, rng
        self.cursor = EPOCH_NS
        self._before = True
        self.true_reads: list[int] = []

    def _delay(self, base: float, tail: float) -> int:
        d = base + self.rng.expovariate(1.0 / tail)
        if self.rng.random() < 0.01:
            d += self.rng.uniform(30_000.0, 400_000.0)
        return int(d)

    def host_clock(self) -> int:
        value = self.host.read(self.cursor)
        if self._before:
            self.cursor += self._delay(700.0, 250.0)
        else:
            self.cursor += 2_000
        self._before = not self._before
        return value

    def reader(self) -> int:
        self.true_reads.append(self.cursor)
        ticks = self.chip.read(self.cursor)
        self.cursor += self._delay(2_600.0, 900.0)
        return ticks


class _AlignedTicks:
    """A clock mapping's answers for a batch of ticks, computed in one vectorised call.

    Behaves like the mapping for :func:`record_device_activity` (``to_host_ns``,
    ``bound_ns``); ticks outside the batch fall through to the mapping itself.
    """

    def __init__(self, mapping: Any, ticks: Sequence[int], near_host_ns: Sequence[int]) -> None:
        self._mapping = mapping
        host, bound = mapping.align(
            np.asarray(ticks, dtype=np.int64), near_host_ns=np.asarray(near_host_ns, dtype=np.int64)
        )
        self._host = dict(zip(ticks, (int(h) for h in host)))
        self._bound = dict(zip(ticks, (float(b) for b in bound)))

    def to_host_ns(self, ticks: int, near_host_ns: int | None = None) -> int:
        value = self._host.get(ticks)
        if value is None:
            return int(self._mapping.to_host_ns(ticks, near_host_ns=near_host_ns))
        return value

    def bound_ns(self, ticks: int) -> float:
        value = self._bound.get(ticks)
        if value is None:
            return float(self._mapping.bound_ns(ticks))
        return value


@dataclass
class _Activity:
    kind: str  # "kernel" or "link"
    chip: int  # host-major chip index
    start_true: int
    end_true: int
    name: str
    attrs: dict[str, Any]
    context: Context
    extra: dict[str, Any]


class _Hist:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")
        self.exemplars: dict[int, tuple[float, int, int, int]] = {}

    def record(self, value: float, time_ns: int, trace_id: int | None, span_id: int | None) -> None:
        """Add ``value``; it becomes its bucket's exemplar when a span is given."""
        i = HistogramValue(self.bounds, tuple(self.counts), 0.0).bucket_of(value)
        self.counts[i] += 1
        self.sum += value
        self.min, self.max = min(self.min, value), max(self.max, value)
        if trace_id is not None and span_id is not None:
            self.exemplars[i] = (value, time_ns, trace_id, span_id)


class SimTelemetry:
    """The engine's sink: turns steps, transfers and requests into spans and metric points.

    Args:
        config: the validated configuration.
        engine: the engine (for fault-free facts: topology, roles).
        host_clocks: one per host.
        chip_clocks: one per chip, host-major.
        counters: the counter model read at every sample.
        span_exporter: where spans go (shared by the per-host providers).
        metric_exporter: where metric points go.
        on_slice: called after every counter sample with (true ns, samples).
    """

    def __init__(
        self,
        config: SimConfig,
        engine: Engine,
        host_clocks: list[HostClock],
        chip_clocks: list[ChipClock],
        counters: SimCounterModel,
        span_exporter: SpanExporter,
        metric_exporter: MetricExporter,
        *,
        on_slice: Callable[[int, list[Sample]], None] | None = None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.host_clocks = host_clocks
        self.chip_clocks = chip_clocks
        self.counters = counters
        self.metric_exporter = metric_exporter
        self.on_slice = on_slice
        self.world = config.hosts * config.chips
        self.resources = [self._host_resource(h) for h in range(config.hosts)]
        self.processors: list[OrderedBatchSpanProcessor] = []
        self.providers: list[TracerProvider] = []
        self._make_providers(span_exporter)
        self.scope = InstrumentationScope(SCOPE_NAME)
        # clock sampling: one sampler per chip, reading through a virtual read path
        self.read_paths: list[_ReadPath] = []
        self.samplers: list[ClockSampler] = []
        self._next_bracket: list[int] = []
        self._bracket_interval = int(config.clock_sample_interval_ms * 1e6)
        self._make_clock_samplers()
        # the brackets and fitted mappings go out as accel.clock.sync spans (in virtual time),
        # so the analysis can re-fit every chip's clock offline from traces.jsonl
        self.clock_emitters = [
            ClockSyncSpanEmitter(
                sampler,
                tracer_provider=self.providers[i // config.chips],
                reference=host_name(i // config.chips),
            )
            for i, sampler in enumerate(self.samplers)
        ]
        self._buffer: list[_Activity] = []
        self._next_flush = EPOCH_NS + _FLUSH_NS
        self._step_roots: dict[tuple[int, int], trace.SpanContext] = {}
        # each request's share of the steps' device time, online, as a serving process would
        # keep it; its total goes on the request span
        self._accounting = RequestAccounting()
        self._hists: list[dict[str, _Hist]] = [
            self._request_histograms() for _ in range(config.hosts)
        ]
        # per host: (metric, chip) -> (point attributes, histogram), in creation order
        self._coll_hists: list[dict[tuple[str, int], tuple[dict[str, Any], _Hist]]] = [
            {} for _ in range(config.hosts)
        ]
        self._clock_points: list[list[Sample]] = [[] for _ in range(config.hosts)]
        self.device_spans = 0
        self.metric_points = 0
        self.samples_taken = 0
        # take the brackets of the second before the run starts (the sampler runs before work)
        self._sample_clocks(EPOCH_NS)

    def _host_resource(self, h: int) -> Resource:
        """Host ``h``'s resource: the simulated server, its host and device identity."""
        config = self.config
        return Resource.create(
            {
                SERVICE_NAME: "sim-inference-server",
                # the SDK would add a random instance id; a seeded run names its own so
                # that the same seed gives byte-identical files in any process
                SERVICE_INSTANCE_ID: f"sim-seed{config.seed}-{host_name(h)}",
                HOST_NAME: host_name(h),
                ACCEL_HOST_ID: host_name(h),
                ACCEL_DEVICE_KIND: "sim",
                ACCEL_DEVICE_MODEL: config.device_model,
                ACCEL_WORLD_SIZE: config.hosts * config.chips,
                ACCEL_CLOCK_COUNTER_BITS: COUNTER_BITS,
                ACCEL_CLOCK_TICKS_PER_SECOND: TICKS_PER_SECOND,
            }
        )

    def _make_providers(self, span_exporter: SpanExporter) -> None:
        """One tracer provider per host (seeded ids), each with its ordered batch processor."""
        config = self.config
        for h in range(config.hosts):
            provider = TracerProvider(
                resource=self.resources[h], id_generator=SeededIdGenerator(f"{config.seed}:{h}")
            )
            proc = OrderedBatchSpanProcessor(span_exporter)
            provider.add_span_processor(proc)
            self.providers.append(provider)
            self.processors.append(proc)

    def _make_clock_samplers(self) -> None:
        """One clock sampler per chip, reading through a seeded virtual read path, with its
        first bracket time staggered across the chips."""
        config, chip_clocks = self.config, self.chip_clocks
        interval = self._bracket_interval
        for i, chip in enumerate(chip_clocks):
            h = i // config.chips
            path = _ReadPath(chip, self.host_clocks[h], random.Random(f"reads:{config.seed}:{i}"))
            self.read_paths.append(path)
            self.samplers.append(
                ClockSampler(
                    path.reader,
                    domain=chip.domain,
                    counter_bits=COUNTER_BITS,
                    ticks_per_second=TICKS_PER_SECOND,
                    host_clock=path.host_clock,
                    burst=1,
                    window_s=_CLOCK_WINDOW_S,
                )
            )
            self._next_bracket.append(
                EPOCH_NS - 1_000_000_000 + (i * interval) // max(1, len(chip_clocks))
            )

    @staticmethod
    def _request_histograms() -> dict[str, _Hist]:
        """A host's request-latency histograms (time to first token, per output token, total)."""
        return {
            METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN: _Hist(_TTFT_BOUNDS),
            METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN: _Hist(_TPOT_BOUNDS),
            METRIC_GEN_AI_SERVER_REQUEST_DURATION: _Hist(_DURATION_BOUNDS),
        }

    # -- helpers --------------------------------------------------------------------------
    def _host_ns(self, host: int, true_ns: int) -> int:
        return self.host_clocks[host].read(true_ns)

    def _device_attrs(self, host: int, chip: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            ACCEL_DEVICE_ID: chip_name(host, chip),
            ACCEL_HOST_ID: host_name(host),
            ACCEL_RANK: host * self.config.chips + chip,
            ACCEL_PARALLEL_TP_RANK: chip,
        }
        if self.engine.mode == "replicas":
            attrs[ACCEL_PARALLEL_DP_RANK] = host
        return attrs

    def _sample_clocks(self, until_true_ns: int) -> None:
        for i, sampler in enumerate(self.samplers):
            path = self.read_paths[i]
            while self._next_bracket[i] <= until_true_ns:
                path.cursor = self._next_bracket[i]
                sampler.sample_burst()
                self.samples_taken += 1
                self._next_bracket[i] += self._bracket_interval

    # -- engine sink ----------------------------------------------------------------------
    def _collective_histograms(
        self, record: StepRecord, spans: dict[tuple[int, int], trace.SpanContext]
    ) -> None:
        """Each member's duration and arrival lateness of the step's all-reduces."""
        n = self.config.chips
        if n < 2:
            return
        h = record.host
        group = f"{host_name(h)}/tp"
        hists = self._coll_hists[h]
        for g in record.groups:
            first = min(g.compute_end_ns)
            at = self._host_ns(h, g.ar_end_ns)
            for c in range(n):
                enter = g.compute_end_ns[c]
                ctx = spans.get((g.index, c))
                trace_id = ctx.trace_id if ctx is not None else None
                span_id = ctx.span_id if ctx is not None else None
                for metric, value in (
                    (METRIC_ACCEL_COLLECTIVE_DURATION, (g.ar_end_ns - enter) / 1e9),
                    (METRIC_ACCEL_COLLECTIVE_ARRIVAL_LATENESS, (enter - first) / 1e9),
                ):
                    entry = hists.get((metric, c))
                    if entry is None:
                        attrs: dict[str, Any] = {
                            ACCEL_DEVICE_ID: chip_name(h, c),
                            ACCEL_HOST_ID: host_name(h),
                            ACCEL_COLLECTIVE_GROUP: group,
                        }
                        if metric == METRIC_ACCEL_COLLECTIVE_DURATION:
                            attrs[ACCEL_COLLECTIVE_OP] = "all_reduce"
                        entry = hists[(metric, c)] = (attrs, _Hist(COLLECTIVE_DURATION_BOUNDS_S))
                    entry[1].record(value, at, trace_id, span_id)

    def on_step(self, record: StepRecord) -> None:
        """One engine step: its per-request accounting and, every ``trace_step_interval``
        steps, each chip's layer, kernel, collective and link spans; the collective
        histograms always."""
        self._record_engine_step(record)
        coll_spans: dict[tuple[int, int], trace.SpanContext] = {}
        if (record.step - 1) % self.config.trace_step_interval:
            self._collective_histograms(record, coll_spans)
            return
        for c in range(self.config.chips):
            self._trace_chip_step(record, c, coll_spans)
        self._collective_histograms(record, coll_spans)

    def _record_engine_step(self, record: StepRecord) -> None:
        """The ``engine_step`` span naming the requests the step served and their tokens, and
        each request's share of the step's device time."""
        served = [(r.request_id, chunk, 0) for r, chunk in record.prefill]
        served += [(r.request_id, 0, 1) for r in record.decode]
        engine_step(
            record.step,
            served,
            start_time=self._host_ns(record.host, record.start_ns),
            end_time=self._host_ns(record.host, record.end_ns),
            device_time_ns=record.device_ns,
            chips=self.config.chips,
            attributes={ACCEL_HOST_ID: host_name(record.host)},
            tracer_provider=self.providers[record.host],
            context=Context(),
        )
        self._accounting.step(served, device_time_ns=record.device_ns)

    def _trace_chip_step(
        self,
        record: StepRecord,
        c: int,
        coll_spans: dict[tuple[int, int], trace.SpanContext],
    ) -> None:
        """Chip ``c``'s ``model`` layer span of the step, with each layer group inside it."""
        cfg = self.config
        h = record.host
        dev = self._device_attrs(h, c)
        with layer(
            "model",
            index=0,
            layer_type=cfg.model.name,
            depth=0,
            flops=sum(g.flops_per_chip for g in record.groups),
            nbytes=sum(g.bytes_per_chip for g in record.groups),
            attributes=dev,
            tracer_provider=self.providers[h],
            context=Context(),
            start_time=self._host_ns(h, record.start_ns),
            end_time=self._host_ns(h, record.end_ns),
        ) as root:
            root_ctx = trace.set_span_in_context(root.span)
            if c == 0:
                self._step_roots[(h, record.step)] = root.span.get_span_context()
            for g in record.groups:
                self._trace_layer_group(h, c, g, dev, root_ctx, coll_spans)

    def _trace_layer_group(
        self,
        h: int,
        c: int,
        g: GroupRecord,
        dev: dict[str, AttributeValue],
        root_ctx: Context,
        coll_spans: dict[tuple[int, int], trace.SpanContext],
    ) -> None:
        """One layer group on chip ``c``: its layer span and compute kernel, then (with more
        than one chip) its all-reduce span, communication kernel and link transfers."""
        cfg = self.config
        n = cfg.chips
        layers_per_group = cfg.model.layers / cfg.layer_groups
        lo = int(g.index * layers_per_group)
        hi = int((g.index + 1) * layers_per_group) - 1
        with layer(
            f"model.layers.{lo}-{hi}",
            index=g.index,
            layer_type="DecoderLayerGroup",
            depth=1,
            flops=g.flops_per_chip,
            nbytes=g.bytes_per_chip,
            attributes=dev,
            tracer_provider=self.providers[h],
            context=root_ctx,
            start_time=self._host_ns(h, g.start_ns),
            end_time=self._host_ns(h, g.ar_end_ns),
        ) as grp:
            grp_ctx = trace.set_span_in_context(grp.span)
        compute = {
            "kind": "compute",
            "stream": 7,
            "flops": g.flops_per_chip,
            "nbytes": g.bytes_per_chip,
        }
        chip_index = h * n + c
        self._buffer.append(
            _Activity(
                "kernel",
                chip_index,
                g.start_ns,
                g.compute_end_ns[c],
                "sim_gemm_bf16",
                dev,
                grp_ctx,
                compute,
            )
        )
        if n < 2:
            return
        coll_ctx = self._trace_all_reduce(h, c, g, dev, grp_ctx, coll_spans)
        if cfg.trace_link_transfers:
            self._buffer_link_transfers(h, c, g, dev, coll_ctx)

    def _trace_all_reduce(
        self,
        h: int,
        c: int,
        g: GroupRecord,
        dev: dict[str, AttributeValue],
        grp_ctx: Context,
        coll_spans: dict[tuple[int, int], trace.SpanContext],
    ) -> Context:
        """Chip ``c``'s all-reduce span of a layer group and its communication kernel; the
        span's context (parent of the link transfers)."""
        cfg = self.config
        n = cfg.chips
        group_name = f"{host_name(h)}/tp"
        with collective(
            "all_reduce",
            group=group_name,
            group_size=n,
            rank=c,
            seq=g.seq,
            nbytes=g.ar_bytes,
            dtype="bfloat16",
            attributes=dev,
            tracer_provider=self.providers[h],
            context=grp_ctx,
            start_time=self._host_ns(h, g.compute_end_ns[c]),
            end_time=self._host_ns(h, g.ar_end_ns),
        ) as coll:
            coll_ctx = trace.set_span_in_context(coll.span)
            coll_spans[(g.index, c)] = coll.span.get_span_context()
        comm_attrs = dict(dev)
        comm_attrs.update(
            collective_attributes(
                "all_reduce",
                group=group_name,
                group_size=n,
                rank=c,
                seq=g.seq,
                nbytes=g.ar_bytes,
            )
        )
        self._buffer.append(
            _Activity(
                "kernel",
                h * n + c,
                g.compute_end_ns[c],
                g.ar_end_ns,
                "sim_allreduce_ring_bf16" if cfg.topology == "ring" else "sim_allreduce_mesh_bf16",
                comm_attrs,
                coll_ctx,
                {"kind": "communication", "stream": 9, "flops": None, "nbytes": None},
            )
        )
        return coll_ctx

    def _buffer_link_transfers(
        self, h: int, c: int, g: GroupRecord, dev: dict[str, AttributeValue], coll_ctx: Context
    ) -> None:
        """The link transfers chip ``c`` sends in a layer group's all-reduce (on a ring of more
        than two chips, those to its successor; with two chips, chip 0's only)."""
        n = self.config.chips
        ring = self.config.topology == "ring"
        for tr in g.transfers:
            if tr.src_chip != c or (n > 2 and ring and tr.dst_chip != (c + 1) % n):
                continue
            if n == 2 and tr.src_chip != 0:
                continue
            self._buffer.append(
                _Activity(
                    "link",
                    h * n + c,
                    tr.start_ns,
                    tr.end_ns,
                    tr.link,
                    dev,
                    coll_ctx,
                    {
                        "nbytes": tr.nbytes,
                        "src": chip_name(h, tr.src_chip),
                        "dst": chip_name(h, tr.dst_chip),
                    },
                )
            )

    def on_kv_transfer(self, transfer: KvTransfer) -> None:
        """Nothing to do at once: the transfer is traced with its request."""

    def on_request_done(self, req: Request) -> None:
        """A finished request's spans (the request, its queue, prefill, KV transfer and
        decode phases) and its latency histograms, on the prefill and decode hosts' clocks."""
        end_true = req.done_ns + 40_000
        root_ctx, root_span_ctx = self._trace_request_root(req, end_true)
        self._trace_prefill_phases(req, root_ctx)
        if self.engine.mode == "disaggregated":
            self._trace_kv_transfer(req, root_ctx)
        if self.engine.mode == "disaggregated" and req.decode_steps:
            self._trace_decode_handover(req, root_ctx)
        if req.output_tokens > 1 and req.decode_steps:
            dh = req.decode_host
            with phase(
                "decode",
                step=None,
                batch_size=max(1, round(req.batch_sizes / req.decode_steps)),
                attributes={ACCEL_HOST_ID: host_name(dh), ACCEL_REQUEST_ID: req.request_id},
                tracer_provider=self.providers[dh],
                context=root_ctx,
                start_time=self._host_ns(dh, req.decode_start_ns),
                end_time=self._host_ns(dh, req.done_ns),
            ):
                pass
        self._record_request_latency(req, root_span_ctx, end_true)

    def _trace_request_root(self, req: Request, end_true: int) -> tuple[Context, trace.SpanContext]:
        """The request's root span on the prefill host (with its share of device time); its
        context (the phases' parent) and span context (the histograms' exemplar)."""
        ph = req.prefill_host
        model_attrs: dict[str, Any] = {ACCEL_HOST_ID: host_name(ph)}
        share = self._accounting.pop(req.request_id)
        if share is not None:
            model_attrs[ACCEL_REQUEST_DEVICE_TIME_NS] = round(share[0])
        with request(
            req.request_id,
            model=self.config.model.name,
            operation=_OPERATION,
            input_tokens=req.prompt_tokens,
            output_tokens=req.output_tokens,
            attributes=model_attrs,
            tracer_provider=self.providers[ph],
            context=Context(),
            start_time=self._host_ns(ph, req.arrival_ns),
            end_time=self._host_ns(ph, end_true),
        ) as root:
            root_ctx = trace.set_span_in_context(root.span)
            root_span_ctx = root.span.get_span_context()
        return root_ctx, root_span_ctx

    def _trace_prefill_phases(self, req: Request, root_ctx: Context) -> None:
        """The ``queue`` and ``prefill`` phases on the prefill host; the prefill linked to the
        first and last engine steps it ran in (when they were traced)."""
        ph = req.prefill_host
        front = self.providers[ph]
        hn = self._host_ns
        with phase(
            "queue",
            attributes={ACCEL_HOST_ID: host_name(ph), ACCEL_REQUEST_ID: req.request_id},
            tracer_provider=front,
            context=root_ctx,
            start_time=hn(ph, req.arrival_ns),
            end_time=hn(ph, req.prefill_start_ns),
        ):
            pass
        links: list[Link] = []
        for step in (req.prefill_steps[0], req.prefill_steps[-1]):
            ctx = self._step_roots.get((ph, step))
            if ctx is not None and all(link.context != ctx for link in links):
                links.append(Link(ctx))
        with phase(
            "prefill",
            step=req.prefill_steps[-1],
            batch_size=None,
            attributes={ACCEL_HOST_ID: host_name(ph), ACCEL_REQUEST_ID: req.request_id},
            tracer_provider=front,
            context=root_ctx,
            start_time=hn(ph, req.prefill_start_ns),
            end_time=hn(ph, req.first_token_ns),
        ) as pre:
            for link in links:
                pre.span.add_link(link.context)

    def _trace_kv_transfer(self, req: Request, root_ctx: Context) -> None:
        """Disaggregated serving: the ``kv_transfer`` phase and its NIC link transfer span from
        the prefill host to the decode host."""
        ph, dh = req.prefill_host, req.decode_host
        front = self.providers[ph]
        hn = self._host_ns
        with phase(
            "kv_transfer",
            attributes={ACCEL_HOST_ID: host_name(ph), ACCEL_REQUEST_ID: req.request_id},
            tracer_provider=front,
            context=root_ctx,
            start_time=hn(ph, req.first_token_ns),
            end_time=hn(ph, req.kv_end_ns),
        ) as kv:
            kv_ctx = trace.set_span_in_context(kv.span)
        span = trace.get_tracer(SCOPE_NAME, tracer_provider=front).start_span(
            SPAN_ACCEL_LINK_TRANSFER,
            context=kv_ctx,
            kind=SpanKind.CLIENT,
            attributes={
                ACCEL_LINK_ID: nic_name(ph),
                ACCEL_LINK_KIND: "nic",
                ACCEL_LINK_BYTES: req.prompt_tokens * self.config.model.kv_bytes_per_token,
                ACCEL_LINK_SRC: host_name(ph),
                ACCEL_LINK_DST: host_name(dh),
                ACCEL_HOST_ID: host_name(ph),
                ACCEL_REQUEST_ID: req.request_id,
            },
            start_time=hn(ph, req.kv_start_ns),
        )
        span.end(end_time=hn(ph, req.kv_end_ns))

    def _trace_decode_handover(self, req: Request, root_ctx: Context) -> None:
        """Disaggregated serving, on the decode engine's clock: waiting for a batch slot once
        the KV cache is there (``decode_queue``), then the step that streams the first token
        to the client (``first_decode_step``)."""
        dh = req.decode_host
        dec_attrs = {ACCEL_HOST_ID: host_name(dh), ACCEL_REQUEST_ID: req.request_id}
        with phase(
            "decode_queue",
            attributes=dec_attrs,
            tracer_provider=self.providers[dh],
            context=root_ctx,
            start_time=self._host_ns(dh, req.kv_end_ns),
            end_time=self._host_ns(dh, req.decode_start_ns),
        ):
            pass
        with phase(
            "first_decode_step",
            attributes=dec_attrs,
            tracer_provider=self.providers[dh],
            context=root_ctx,
            start_time=self._host_ns(dh, req.decode_start_ns),
            end_time=self._host_ns(dh, req.first_decode_end_ns),
        ):
            pass

    def _record_request_latency(
        self, req: Request, root_span_ctx: trace.SpanContext, end_true: int
    ) -> None:
        """The request's time to first token, time per output token (more than one token) and
        duration, in the prefill host's histograms with the request span as exemplar."""
        ph = req.prefill_host
        hists = self._hists[ph]
        trace_id, span_id = root_span_ctx.trace_id, root_span_ctx.span_id
        done_host = self._host_ns(ph, end_true)
        ttft = (req.first_token_ns - req.arrival_ns) / 1e9
        hists[METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN].record(ttft, done_host, trace_id, span_id)
        if req.output_tokens > 1:
            tpot = (req.done_ns - req.first_token_ns) / 1e9 / (req.output_tokens - 1)
            hists[METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN].record(
                tpot, done_host, trace_id, span_id
            )
        dur = (end_true - req.arrival_ns) / 1e9
        hists[METRIC_GEN_AI_SERVER_REQUEST_DURATION].record(dur, done_host, trace_id, span_id)

    def on_sample(self, now_ns: int) -> None:
        self._sample_clocks(now_ns)
        if now_ns >= self._next_flush:
            self.flush_device_activity(now_ns)
            self._next_flush = now_ns + _FLUSH_NS
        samples = self.counters.read(now_ns)
        self._export_metrics(now_ns, samples)
        if self.on_slice is not None:
            self.on_slice(now_ns, samples)

    # -- device activity --------------------------------------------------------------------
    def flush_device_activity(self, now_ns: int) -> None:
        """Align and record the buffered device activity with fresh clock fits."""
        self._sample_clocks(now_ns)
        for emitter in self.clock_emitters:
            emitter.emit()
        buffer, self._buffer = self._buffer, []
        by_chip: dict[int, list[_Activity]] = {}
        for act in buffer:
            by_chip.setdefault(act.chip, []).append(act)
        for chip_index in range(len(self.chip_clocks)):
            sampler = self.samplers[chip_index]
            mapping = sampler.mapping()
            h = chip_index // self.config.chips
            if mapping is not None:
                self._clock_metrics(h, chip_index, mapping, now_ns)
            acts = by_chip.get(chip_index)
            if not acts or mapping is None:
                continue
            clock = self.chip_clocks[chip_index]
            ticks: list[int] = []
            near: list[int] = []
            raw: list[tuple[int, int]] = []
            for act in acts:
                s, e = clock.read(act.start_true), clock.read(act.end_true)
                raw.append((s, e))
                ticks.extend((s, e))
                # the host knows roughly when it launched the work
                hint = self._host_ns(h, act.start_true)
                near.extend((hint, hint))
            aligned = _AlignedTicks(mapping, ticks, near)
            provider = self.providers[h]
            domain = clock.domain
            for act, (s, e) in zip(acts, raw):
                attrs = act.attrs
                if act.kind == "kernel":
                    record_device_activity(
                        act.name,
                        start_ticks=s,
                        end_ticks=e,
                        mapping=aligned,
                        clock_domain=domain,
                        kind=act.extra["kind"],
                        stream=act.extra["stream"],
                        flops=act.extra["flops"],
                        nbytes=act.extra["nbytes"],
                        attributes=attrs,
                        tracer_provider=provider,
                        context=act.context,
                    )
                else:
                    record_link_transfer(
                        act.name,
                        start_ticks=s,
                        end_ticks=e,
                        mapping=aligned,
                        clock_domain=domain,
                        nbytes=act.extra["nbytes"],
                        src=act.extra["src"],
                        dst=act.extra["dst"],
                        attributes=attrs,
                        tracer_provider=provider,
                        context=act.context,
                    )
                self.device_spans += 1

    def _clock_metrics(self, host: int, chip_index: int, mapping: Any, now_ns: int) -> None:
        domain = self.chip_clocks[chip_index].domain
        attrs = {ACCEL_CLOCK_DOMAIN: domain, ACCEL_CLOCK_REFERENCE: host_name(host)}
        ts = self._host_ns(host, now_ns)
        points = self._clock_points[host]
        points.append(Sample(METRIC_ACCEL_CLOCK_OFFSET, attrs, float(mapping.offset_ns()), ts))
        points.append(
            Sample(METRIC_ACCEL_CLOCK_DRIFT, attrs, float(np.asarray(mapping.drift_ppm())), ts)
        )
        points.append(Sample(METRIC_ACCEL_CLOCK_BOUND, attrs, float(mapping.median_bound_ns()), ts))
        points.append(
            Sample(
                METRIC_ACCEL_CLOCK_SAMPLES,
                {ACCEL_CLOCK_DOMAIN: domain},
                float(self.samplers[chip_index].samples_taken),
                ts,
            )
        )

    # -- metrics ----------------------------------------------------------------------------
    def _export_metrics(self, now_ns: int, samples: list[Sample]) -> None:
        by_host: dict[int, list[Sample]] = {h: [] for h in range(self.config.hosts)}
        for s in samples:
            host_id = s.attributes.get(ACCEL_HOST_ID)
            h = int(str(host_id)[4:]) if host_id else 0
            by_host[h].append(s)
        resource_metrics = []
        for h in range(self.config.hosts):
            start = self._host_ns(h, EPOCH_NS)
            ts = self._host_ns(h, now_ns)
            host_samples = by_host[h] + self._clock_points[h]
            self._clock_points[h] = []
            metrics = _samples_to_metrics(host_samples, start)
            for name, hist in self._hists[h].items():
                if sum(hist.counts) == 0:
                    continue
                metrics.append(_histogram_metric(name, hist, start, ts, self.config.model.name))
            metrics.extend(_histogram_series(self._coll_hists[h], start, ts))
            self.metric_points += sum(len(m.data.data_points) for m in metrics)
            resource_metrics.append(
                ResourceMetrics(
                    resource=self.resources[h],
                    scope_metrics=[ScopeMetrics(scope=self.scope, metrics=metrics, schema_url="")],
                    schema_url="",
                )
            )
        self.metric_exporter.export(MetricsData(resource_metrics=resource_metrics))

    def shutdown(self) -> None:
        """Flush every provider (the exporters are shut down by the caller)."""
        for emitter in self.clock_emitters:
            emitter.emit()
        for provider in self.providers:
            provider.force_flush()
            provider.shutdown()


def _samples_to_metrics(samples: list[Sample], start_ns: int) -> list[Metric]:
    grouped: dict[str, list[Sample]] = {}
    for s in samples:
        grouped.setdefault(s.metric, []).append(s)
    out = []
    for name in sorted(grouped):
        spec = METRIC_SPECS[name]
        points = [
            NumberDataPoint(
                attributes=dict(s.attributes),
                start_time_unix_nano=start_ns,
                time_unix_nano=s.timestamp_ns,
                value=_number(s.value),
            )
            for s in grouped[name]
        ]
        data: Any
        if spec["instrument"] == "gauge":
            data = Gauge(data_points=points)
        else:
            data = Sum(
                data_points=points,
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
                is_monotonic=spec["instrument"] == "counter",
            )
        out.append(Metric(name=name, description="", unit=spec["unit"], data=data))
    return out


def _number(value: object) -> int | float:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value  # type: ignore[return-value]


def _histogram_metric(name: str, hist: _Hist, start_ns: int, ts: int, model: str) -> Metric:
    point = _histogram_point(
        {GEN_AI_REQUEST_MODEL: model, GEN_AI_OPERATION_NAME: _OPERATION}, hist, start_ns, ts
    )
    return Metric(
        name=name,
        description="",
        unit=METRIC_SPECS[name]["unit"],
        data=Histogram(
            data_points=[point], aggregation_temporality=AggregationTemporality.CUMULATIVE
        ),
    )


def _histogram_series(
    hists: dict[tuple[str, int], tuple[dict[str, Any], _Hist]], start_ns: int, ts: int
) -> list[Metric]:
    """One metric per name, one point per series (in creation order), for series with data."""
    points: dict[str, list[HistogramDataPoint]] = {}
    for (name, _), (attrs, hist) in hists.items():
        if sum(hist.counts):
            points.setdefault(name, []).append(_histogram_point(attrs, hist, start_ns, ts))
    return [
        Metric(
            name=name,
            description="",
            unit=METRIC_SPECS[name]["unit"],
            data=Histogram(
                data_points=pts, aggregation_temporality=AggregationTemporality.CUMULATIVE
            ),
        )
        for name, pts in sorted(points.items())
    ]


def _histogram_point(
    attributes: dict[str, Any], hist: _Hist, start_ns: int, ts: int
) -> HistogramDataPoint:
    from opentelemetry.sdk.metrics import Exemplar

    exemplars = [
        Exemplar(
            filtered_attributes={},
            value=value,
            time_unix_nano=time_ns,
            span_id=span_id,
            trace_id=trace_id,
        )
        for _, (value, time_ns, trace_id, span_id) in sorted(hist.exemplars.items())
    ]
    return HistogramDataPoint(
        attributes=dict(attributes),
        start_time_unix_nano=start_ns,
        time_unix_nano=ts,
        count=sum(hist.counts),
        sum=hist.sum,
        bucket_counts=list(hist.counts),
        explicit_bounds=list(hist.bounds),
        min=hist.min,
        max=hist.max,
        exemplars=exemplars,
    )
