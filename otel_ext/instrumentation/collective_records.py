"""What the native collective records become: spans and metrics, without PyTorch.

The native recording kernels (``torch/_c10d_hook.cpp``) hand over each completed collective as
a plain record: a tuple of op index, group, size, rank, sequence number, peers, bytes, dtype,
device, async flag, host times, end, uncertainty, failure, parent context and device duration
(the layout of ``Hook.drain``). :class:`NativeRecordEmitter` turns records into the
``accel.collective`` span and the collective metrics (:class:`CollectiveMetrics`), with what
records of one op, group and device share made once (a :class:`_Template`). It runs in the
instrumented process (the drain thread of ``TorchDistributedInstrumentor``) or in the drain
process (:mod:`otel_ext.instrumentation.collective_drain_process`), which is why nothing here
imports PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, Status, StatusCode

from otel_ext.instrumentation._common import (
    INSTRUMENTATION_NAME,
    device_attributes,
    local_device,
    log_once,
)
from otel_ext.instrumentation.bound_histogram import BoundHistogram
from otel_ext.instrumentation.collectives import (
    COLLECTIVE_DURATION_BOUNDS_S,
    bus_factor,
    collective_id,
    p2p_id,
)
from otel_ext.instrumentation.finished_spans import FinishedSpans, SpanWriter
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_RAW_END_TICKS,
    ACCEL_CLOCK_RAW_START_TICKS,
    ACCEL_CLOCK_UNCERTAINTY_NS,
    ACCEL_COLLECTIVE_ALGBW,
    ACCEL_COLLECTIVE_ASYNC,
    ACCEL_COLLECTIVE_BUSBW,
    ACCEL_COLLECTIVE_BYTES,
    ACCEL_COLLECTIVE_DTYPE,
    ACCEL_COLLECTIVE_ENQUEUE_END_NS,
    ACCEL_COLLECTIVE_ENQUEUE_START_NS,
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_GROUP_SIZE,
    ACCEL_COLLECTIVE_ID,
    ACCEL_COLLECTIVE_OP,
    ACCEL_COLLECTIVE_PEER,
    ACCEL_COLLECTIVE_RANK,
    ACCEL_COLLECTIVE_SEQ,
    ACCEL_COLLECTIVE_TIMING,
    ACCEL_DEVICE_ID,
    ERROR_TYPE,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_COLLECTIVE_BUS_IO,
    METRIC_ACCEL_COLLECTIVE_DURATION,
    METRIC_ACCEL_COLLECTIVE_IO,
    METRIC_ACCEL_COLLECTIVE_TIME,
    METRIC_SPECS,
)
from otel_ext.semconv.spans import SPAN_ACCEL_COLLECTIVE

__all__ = [
    "DEFAULT_GROUP_NAME",
    "CollectiveMetrics",
    "DeviceIdentities",
    "NativeRecordEmitter",
    "call_attributes",
]

#: The ``accel.collective.group`` of the default process group.
DEFAULT_GROUP_NAME = "default_pg"
#: the templates kept at most (one per op, group, size, rank and device seen)
_TEMPLATES_MAX = 4096


class _MetricSlot(NamedTuple):
    """One (op, group, device)'s metric attributes, bus factor and bound duration histogram
    (:meth:`CollectiveMetrics.slot`)."""

    key: tuple[str, str, str | None]
    attrs: dict[str, Any]
    factor: float
    duration: BoundHistogram


class _Template(NamedTuple):
    """What every native record of one (op, group, group size, rank, device) shares."""

    op: str
    group: str
    head: dict[str, Any]  # op, group, group size, rank: copied, then the record's added
    identity: dict[str, Any]
    factor: float  # bus_factor(op, size)
    metric: _MetricSlot
    domain: str  # accel.clock.domain of a device-timed record


class CollectiveMetrics:
    """The collective instruments, from one meter; :meth:`record` never raises."""

    def __init__(self, meter_provider: Any):
        meter = metrics.get_meter(INSTRUMENTATION_NAME, "0.1.0", meter_provider=meter_provider)

        def unit(name: str) -> str:
            return str(METRIC_SPECS[name]["unit"])

        self.io = meter.create_counter(
            METRIC_ACCEL_COLLECTIVE_IO,
            unit=unit(METRIC_ACCEL_COLLECTIVE_IO),
            description="Payload bytes of completed collectives.",
        )
        self.bus = meter.create_counter(
            METRIC_ACCEL_COLLECTIVE_BUS_IO,
            unit=unit(METRIC_ACCEL_COLLECTIVE_BUS_IO),
            description="Payload bytes times the op's bus-bandwidth factor.",
        )
        self.time = meter.create_counter(
            METRIC_ACCEL_COLLECTIVE_TIME,
            unit=unit(METRIC_ACCEL_COLLECTIVE_TIME),
            description="Time spent in collectives (device time where timed).",
        )
        self.duration = meter.create_histogram(
            METRIC_ACCEL_COLLECTIVE_DURATION,
            unit=unit(METRIC_ACCEL_COLLECTIVE_DURATION),
            description="Duration of one member's part in a collective.",
            explicit_bucket_boundaries_advisory=list(COLLECTIVE_DURATION_BOUNDS_S),
        )
        self._attrs: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        self._bound: dict[tuple[str, str, str | None], BoundHistogram] = {}
        #: per (op, group, device): bytes, bus bytes, seconds, the last span's context
        self._pending: dict[tuple[str, str, str | None], list[Any]] = {}

    def record(
        self, span: Any, op: str, group: str, device: str | None, nbytes: int, size: int, ns: int
    ) -> None:
        """Count one completed op: the duration histogram now, in its span's context
        (exemplars link to the span); the three counters added up until :meth:`add_counted`."""
        key = (op, group, device)
        attrs = self._attributes(key)
        ctx = trace.set_span_in_context(span)
        seconds = ns / 1e9
        self.duration.record(seconds, attrs, context=ctx)
        self._count(key, nbytes, bus_factor(op, size), seconds, ctx)

    def _attributes(self, key: tuple[str, str, str | None]) -> dict[str, Any]:
        """The metric attributes of (op, group, device), made once and shared."""
        attrs = self._attrs.get(key)
        if attrs is None:
            op, group, device = key
            attrs = {ACCEL_COLLECTIVE_OP: op, ACCEL_COLLECTIVE_GROUP: group}
            if device is not None:
                attrs[ACCEL_DEVICE_ID] = device
            self._attrs[key] = attrs
        return attrs

    def _count(self, key: Any, nbytes: int, factor: float, seconds: float, ctx: Any) -> None:
        """Add one op to what :meth:`add_counted` adds next (its context the latest)."""
        sums = self._pending.get(key)
        if sums is None:
            self._pending[key] = [nbytes, nbytes * factor, seconds, ctx]
        else:
            sums[0] += nbytes
            sums[1] += nbytes * factor
            sums[2] += seconds
            sums[3] = ctx

    def slot(self, op: str, group: str, device: str | None, size: int) -> _MetricSlot:
        """What :meth:`record_in` needs for (op, group, device) on ``size`` ranks, made once:
        the same attribute dict :meth:`record` uses (shared) and the bus factor."""
        key = (op, group, device)
        attrs = self._attributes(key)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = BoundHistogram(self.duration, attrs)
        return _MetricSlot(key, attrs, bus_factor(op, size), bound)

    def record_in(self, slot: _MetricSlot, ctx: Any, nbytes: int, ns: int) -> None:
        """:meth:`record` with the lookups done (``slot``) and the span's context made: the
        histogram through its :class:`BoundHistogram` (the same point, a third cheaper)."""
        seconds = ns / 1e9
        slot.duration.record(seconds, ctx)
        self._count(slot.key, nbytes, slot.factor, seconds, ctx)

    def add_counted(self) -> None:
        """Add what :meth:`record` counted since the last call: one ``add`` per counter and
        (op, group, device), in the context of the last span counted (its exemplar)."""
        pending, self._pending = self._pending, {}
        for key, (nbytes, bus, seconds, ctx) in pending.items():
            attrs = self._attrs[key]
            self.io.add(nbytes, attrs, context=ctx)
            self.bus.add(bus, attrs, context=ctx)
            self.time.add(seconds, attrs, context=ctx)


def call_attributes(
    attrs: dict[str, Any], dtype: Any, peer: Any, async_op: Any, t0: int, t1: int
) -> None:
    """The attributes every collective's span takes from its own call (the record's)."""
    if dtype is not None:
        attrs[ACCEL_COLLECTIVE_DTYPE] = dtype
    if peer is not None:
        attrs[ACCEL_COLLECTIVE_PEER] = peer
    if async_op is not None:
        attrs[ACCEL_COLLECTIVE_ASYNC] = async_op
    attrs[ACCEL_COLLECTIVE_ENQUEUE_START_NS] = t0
    attrs[ACCEL_COLLECTIVE_ENQUEUE_END_NS] = t1


class DeviceIdentities:
    """The identity attributes (device id, host, rank) of each raw device name a record
    carries (``cuda:0``, ``cpu``), made once per name: ``device`` when given, else the
    resource's rule (:func:`~otel_ext.instrumentation._common.local_device`).

    Args:
        device: the device name that overrides the record's.
        host_id: the host as the cluster names it (default: this machine's name).
        rank: the global rank, asked for at a name's first use (``None``: none).
    """

    def __init__(
        self, device: str | None, host_id: str | None, rank: Callable[[], int | None]
    ) -> None:
        self.device = device
        self.host_id = host_id
        self.rank = rank
        self._known: dict[str, dict[str, Any]] = {}

    def __call__(self, raw: str) -> dict[str, Any]:
        attrs = self._known.get(raw)
        if attrs is None:
            device = self.device or local_device(raw)
            attrs = device_attributes(device, host_id=self.host_id, rank=self.rank())
            self._known[raw] = attrs
        return attrs


class NativeRecordEmitter:
    """Native records to spans and metrics (see the module doc).

    Args:
        tracer: the tracer the spans are written with (the short path of
            :class:`~otel_ext.instrumentation.finished_spans.FinishedSpans`).
        metrics: the collective instruments.
        op_of: the ``accel.collective.op`` of a record's op index.
        default_name: the raw name of the default process group (``default_pg`` in spans).
        identity: the identity attributes (device id, host, rank) of a record's device name.
        link_provider: ``(op, group, seq) -> links`` for each sequenced span, or ``None``.
    """

    def __init__(
        self,
        tracer: Any,
        metrics: CollectiveMetrics,
        *,
        op_of: Callable[[int], str],
        default_name: str | None,
        identity: Callable[[str], dict[str, Any]],
        link_provider: Callable[[str, str, int], Sequence[Link]] | None = None,
    ):
        self.spans = FinishedSpans(tracer)
        self.metrics = metrics
        self.op_of = op_of
        self.default_name = default_name
        self.identity = identity
        self.link_provider = link_provider
        #: per (op, group, size, rank, device): what its records share (:meth:`template`)
        self.templates: dict[tuple[Any, ...], _Template] = {}
        self.drain_context: Any = None
        self.write_span: SpanWriter = self.spans.writer(owned=True)

    def begin(self) -> None:
        """Start a batch: this thread's context for the metrics' span contexts (nothing in the
        drain attaches one: what ``set_span_in_context(span)`` would copy, looked up once),
        and this batch's span writer (its checks made once)."""
        self.drain_context = otel_context.get_current()
        self.write_span = self.spans.writer(owned=True)

    def add_counted(self) -> None:
        """Add the batch's counter sums (:meth:`CollectiveMetrics.add_counted`); never raises."""
        try:
            self.metrics.add_counted()
        except Exception as exc:
            log_once("torch.distributed.metrics", "%s: %s", type(exc).__name__, exc)

    def template(self, key: tuple[Any, ...]) -> _Template:
        """The template of (op index, raw group name, group size, rank, device), made once."""
        idx, raw, gsize, grank, device = key
        op = self.op_of(idx)
        gname = DEFAULT_GROUP_NAME if raw == self.default_name else raw
        head: dict[str, Any] = {
            ACCEL_COLLECTIVE_OP: op,
            ACCEL_COLLECTIVE_GROUP: gname,
            ACCEL_COLLECTIVE_GROUP_SIZE: gsize,
            ACCEL_COLLECTIVE_RANK: grank,
        }
        identity = self.identity(device or "cpu")
        metric = self.metrics.slot(op, gname, identity.get(ACCEL_DEVICE_ID), gsize)
        tpl = _Template(op, gname, head, identity, bus_factor(op, gsize), metric,
                        f"{device}/nccl-work-events")  # fmt: skip
        if len(self.templates) >= _TEMPLATES_MAX:
            self.templates.clear()
        self.templates[key] = tpl
        return tpl

    def emit(self, record: tuple[Any, ...]) -> None:
        """One native record's span and metrics: what ``CollectiveDrain._emit_native_entry`` makes (the
        same attributes in the same order, ids, times, status, links, histogram point and
        counter sums), with what records of one op, group and device share made once."""
        (
            idx, raw, gsize, grank, seq, src, dst, peer, nbytes, dtype, device,
            async_op, t0, t1, end, uncertainty, enqueue_only, err_type, err_msg, ctx, device_ns,
        ) = record  # fmt: skip
        tpl = self.templates.get((idx, raw, gsize, grank, device))
        if tpl is None:
            tpl = self.template((idx, raw, gsize, grank, device))
        attrs = tpl.head.copy()
        attrs[ACCEL_COLLECTIVE_BYTES] = nbytes
        if seq >= 0:
            attrs[ACCEL_COLLECTIVE_SEQ] = seq
            attrs[ACCEL_COLLECTIVE_ID] = (
                p2p_id(tpl.group, src, dst, seq)
                if src is not None
                else collective_id(tpl.group, seq)
            )
        call_attributes(attrs, dtype, peer, async_op, t0, t1)
        attrs.update(tpl.identity)
        if device_ns is not None and device_ns >= 0 and uncertainty is not None:
            start = end - device_ns  # as _native_device_timing
            attrs[ACCEL_COLLECTIVE_TIMING] = "device"
            attrs[ACCEL_CLOCK_DOMAIN] = tpl.domain
            attrs[ACCEL_CLOCK_UNCERTAINTY_NS] = float(uncertainty)
            attrs[ACCEL_CLOCK_RAW_START_TICKS] = 0
            attrs[ACCEL_CLOCK_RAW_END_TICKS] = int(device_ns)
        else:
            start, end = t0, max(end or t1, t0)
            attrs[ACCEL_COLLECTIVE_TIMING] = "enqueue" if enqueue_only else "host"
            if uncertainty is not None:
                attrs[ACCEL_CLOCK_UNCERTAINTY_NS] = float(uncertainty)
        ns = end - start
        if ns > 0:  # as bandwidths()
            algbw = nbytes * 1e9 / ns
            attrs[ACCEL_COLLECTIVE_ALGBW] = algbw
            attrs[ACCEL_COLLECTIVE_BUSBW] = algbw * tpl.factor
        else:
            attrs[ACCEL_COLLECTIVE_ALGBW] = attrs[ACCEL_COLLECTIVE_BUSBW] = 0.0
        status = None
        if err_type is not None:
            attrs[ERROR_TYPE] = err_type
            status = Status(StatusCode.ERROR, err_msg or "")
        provider = self.link_provider
        links = provider(tpl.op, tpl.group, seq) if provider is not None and seq >= 0 else ()
        span = self.write_span(SPAN_ACCEL_COLLECTIVE, ctx, attrs, links, start, end, status)
        if err_type is None:
            ctx = trace.set_span_in_context(span, self.drain_context)
            self.metrics.record_in(tpl.metric, ctx, nbytes, ns)
