"""Framework-free instrumentation: layer, collective, request and phase spans, device activity.

For runtimes otel-ext does not wrap (a custom ASIC runtime, a C++ serving engine with Python
glue). :func:`layer`, :func:`collective`, :func:`request` and :func:`phase` return a
:class:`SpanScope`, usable as a context manager (the span is current inside the block) or as
a decorator (one span per call). :func:`record_device_activity` and
:func:`record_link_transfer` create a span after the fact from device-clock timestamps,
mapped to host time through a clock mapping, with the raw ticks and the mapping's error bound
kept as attributes.

Every option that a simulation needs is explicit: ``start_time=``/``end_time=`` (ns since the
epoch) and ``context=`` (the parent). Providers are injected (``tracer_provider=``) and default
to the global one. Nothing here raises into the workload: a failing tracer, processor or
exporter is logged once and counted.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> with layer("blocks.0", index=0, layer_type="Block", tracer_provider=provider):
...     with collective("all_reduce", group="tp0", group_size=4, rank=1, nbytes=4096,
...                     seq=7, start_time=1_000, end_time=2_000, tracer_provider=provider):
...         pass
>>> coll, lay = exporter.get_finished_spans()
>>> coll.parent.span_id == lay.context.span_id
True
>>> coll.attributes["accel.collective.id"], coll.attributes["accel.collective.busbw"]
('tp0:7', 6144000000.0)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace import TracerProvider as ApiTracerProvider

from otel_ext.instrumentation._common import get_tracer, guarded, log_once
from otel_ext.instrumentation.collectives import (
    COLLECTIVE_OPS,
    SequenceCounter,
    bandwidths,
    collective_id,
    p2p_id,
)
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
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_GROUP_SIZE,
    ACCEL_COLLECTIVE_ID,
    ACCEL_COLLECTIVE_OP,
    ACCEL_COLLECTIVE_PEER,
    ACCEL_COLLECTIVE_RANK,
    ACCEL_COLLECTIVE_SEQ,
    ACCEL_KERNEL_BYTES,
    ACCEL_KERNEL_CORRELATION_ID,
    ACCEL_KERNEL_FLOPS,
    ACCEL_KERNEL_KIND,
    ACCEL_KERNEL_NAME,
    ACCEL_KERNEL_STREAM,
    ACCEL_LAYER_BYTES,
    ACCEL_LAYER_DEPTH,
    ACCEL_LAYER_FLOPS,
    ACCEL_LAYER_INDEX,
    ACCEL_LAYER_NAME,
    ACCEL_LAYER_PARAMETERS,
    ACCEL_LAYER_PASS,
    ACCEL_LAYER_TYPE,
    ACCEL_LINK_BYTES,
    ACCEL_LINK_DST,
    ACCEL_LINK_ID,
    ACCEL_LINK_KIND,
    ACCEL_LINK_SRC,
    ACCEL_REQUEST_BATCH_SIZE,
    ACCEL_REQUEST_ID,
    ACCEL_REQUEST_PHASE,
    ACCEL_REQUEST_STEP,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)
from otel_ext.semconv.spans import (
    SPAN_ACCEL_COLLECTIVE,
    SPAN_ACCEL_KERNEL,
    SPAN_ACCEL_LAYER,
    SPAN_ACCEL_LINK_TRANSFER,
    SPAN_ACCEL_REQUEST,
    SPAN_ACCEL_REQUEST_PHASE,
)

__all__ = [
    "SEQUENCES",
    "ClockMappingLike",
    "SpanScope",
    "collective",
    "collective_attributes",
    "layer",
    "phase",
    "record_device_activity",
    "record_link_transfer",
    "request",
]

F = TypeVar("F", bound=Callable[..., Any])
Attributes = Mapping[str, Any]

#: The process-wide per-group sequence numbers used when :func:`collective` gets no ``seq``.
SEQUENCES = SequenceCounter()


@runtime_checkable
class ClockMappingLike(Protocol):
    """What :func:`record_device_activity` needs from a clock mapping (``otel_ext.clocks``)."""

    def to_host_ns(self, ticks: int, near_host_ns: int | None = None) -> int:
        """Host time (ns since the epoch) of device timestamp ``ticks``."""
        ...

    def bound_ns(self, ticks: int) -> float:
        """A bound on the absolute error of :meth:`to_host_ns` at ``ticks``, in ns."""
        ...


class SpanScope:
    """One span, current while a ``with`` block or a decorated call runs.

    Used as a decorator, each call gets its own span (a fresh scope with the same options).
    On an exception the span gets status ``ERROR`` and ``error.type``; the exception
    propagates unchanged. Telemetry failures never propagate.

    Args:
        name: the span name (a constant from ``otel_ext.semconv.spans``).
        attributes: the attributes known at start.
        tracer_provider: where the span goes (the global provider when ``None``).
        kind: the span kind.
        context: the parent context (the current one when ``None``).
        start_time: explicit start, ns since the epoch (now when ``None``).
        end_time: explicit end, ns since the epoch (the exit time when ``None``).
        links: span links.
        on_end: called with the scope just before the span ends (to add attributes that
            need the duration); failures are logged once and counted.
    """

    __slots__ = (
        "_attributes",
        "_context",
        "_end_time",
        "_kind",
        "_links",
        "_name",
        "_on_end",
        "_provider",
        "_start_time",
        "_token",
        "end_ns",
        "span",
        "start_ns",
    )

    def __init__(
        self,
        name: str,
        attributes: Attributes,
        *,
        tracer_provider: ApiTracerProvider | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        context: Context | None = None,
        start_time: int | None = None,
        end_time: int | None = None,
        links: Sequence[Link] = (),
        on_end: Callable[[SpanScope], None] | None = None,
    ):
        self._name = name
        self._attributes = dict(attributes)
        self._provider = tracer_provider
        self._kind = kind
        self._context = context
        self._start_time = start_time
        self._end_time = end_time
        self._links = tuple(links)
        self._on_end = on_end
        self._token: object | None = None
        self.span: Span = INVALID_SPAN
        self.start_ns = 0
        self.end_ns = 0

    def _fresh(self) -> SpanScope:
        return SpanScope(
            self._name,
            self._attributes,
            tracer_provider=self._provider,
            kind=self._kind,
            context=self._context,
            start_time=self._start_time,
            end_time=self._end_time,
            links=self._links,
            on_end=self._on_end,
        )

    @property
    def attributes(self) -> dict[str, Any]:
        """The attributes the span was started with (mutable until the span starts)."""
        return self._attributes

    def set_attribute(self, key: str, value: Any) -> None:
        """Set an attribute on the live span (never raises)."""
        guarded("span.set_attribute", self.span.set_attribute, key, value)

    def end_at(self, end_time: int) -> None:
        """Use ``end_time`` (ns since the epoch) as the span's end instead of the exit time."""
        self._end_time = end_time

    def __enter__(self) -> SpanScope:
        self.start_ns = self._start_time if self._start_time is not None else time.time_ns()
        try:
            tracer = get_tracer(self._provider)
            self.span = tracer.start_span(
                self._name,
                context=self._context,
                kind=self._kind,
                attributes=self._attributes,
                links=self._links,
                start_time=self.start_ns,
            )
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
        except Exception as exc:
            log_once("span.start", "%s: %s", type(exc).__name__, exc)
            self.span = INVALID_SPAN
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.end_ns = self._end_time if self._end_time is not None else time.time_ns()
        try:
            if exc is not None:
                self.span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
                self.span.set_status(Status(StatusCode.ERROR, str(exc)))
            if self._on_end is not None:
                self._on_end(self)
        except Exception as err:
            log_once("span.on_end", "%s: %s", type(err).__name__, err)
        try:
            self.span.end(end_time=self.end_ns)
        except Exception as err:
            log_once("span.end", "%s: %s", type(err).__name__, err)
        if self._token is not None:
            try:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            except Exception as err:  # pragma: no cover - detach logs rather than raises
                log_once("span.detach", "%s: %s", type(err).__name__, err)
            self._token = None

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def _merge(base: dict[str, Any], extra: Attributes | None) -> dict[str, Any]:
    if extra:
        base.update(extra)
    return {k: v for k, v in base.items() if v is not None}


def layer(
    name: str,
    *,
    index: int | None = None,
    layer_type: str | None = None,
    depth: int | None = None,
    backward: bool = False,
    parameters: int | None = None,
    flops: float | None = None,
    nbytes: float | None = None,
    attributes: Attributes | None = None,
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
    start_time: int | None = None,
    end_time: int | None = None,
) -> SpanScope:
    """A model-layer span (``accel.layer``).

    Args:
        name: qualified path of the layer in the model (``blocks.3.attn``).
        index: index in its parent container or block list.
        layer_type: the layer's class name.
        depth: nesting depth below the model root.
        backward: whether the span covers the backward pass.
        parameters: parameter count.
        flops: estimated floating-point operations of the call.
        nbytes: estimated memory bytes read and written by the call.
        attributes: more attributes (device identity: ``device_attributes(...)``).
        tracer_provider: where the span goes; the global provider when ``None``.
        context: the parent context; the current one when ``None``.
        start_time: explicit start in ns since the epoch.
        end_time: explicit end in ns since the epoch.

    Returns:
        A :class:`SpanScope` (context manager and decorator).

    >>> layer("blocks.0.mlp", index=0, layer_type="MLP").attributes["accel.layer.pass"]
    'forward'
    """
    attrs = _merge(
        {
            ACCEL_LAYER_NAME: name,
            ACCEL_LAYER_INDEX: index,
            ACCEL_LAYER_TYPE: layer_type,
            ACCEL_LAYER_DEPTH: depth,
            ACCEL_LAYER_PASS: "backward" if backward else "forward",
            ACCEL_LAYER_PARAMETERS: parameters,
            ACCEL_LAYER_FLOPS: None if flops is None else float(flops),
            ACCEL_LAYER_BYTES: None if nbytes is None else float(nbytes),
        },
        attributes,
    )
    return SpanScope(
        SPAN_ACCEL_LAYER,
        attrs,
        tracer_provider=tracer_provider,
        context=context,
        start_time=start_time,
        end_time=end_time,
    )


def _set_bandwidth(op: str, nbytes: int, group_size: int) -> Callable[[SpanScope], None]:
    def on_end(scope: SpanScope) -> None:
        algbw, busbw = bandwidths(op, nbytes, scope.end_ns - scope.start_ns, group_size)
        scope.span.set_attribute(ACCEL_COLLECTIVE_ALGBW, algbw)
        scope.span.set_attribute(ACCEL_COLLECTIVE_BUSBW, busbw)

    return on_end


def collective_attributes(
    op: str,
    *,
    group: str,
    group_size: int,
    rank: int,
    seq: int,
    nbytes: int,
    dtype: str | None = None,
    peer: int | None = None,
    is_async: bool = False,
) -> dict[str, Any]:
    """The attributes of one member's part in a collective (or p2p transfer), known at start.

    For point-to-point ops (``peer`` given) the id names the ordered pair:
    ``group:src->dst:seq``, so a send and its receive carry the same id.

    >>> collective_attributes("send", group="g", group_size=2, rank=0, seq=3, nbytes=8, peer=1)[
    ...     "accel.collective.id"]
    'g:0->1:3'
    """
    if peer is not None and op not in COLLECTIVE_OPS:
        sending = op in ("send", "isend")
        src, dst = (rank, peer) if sending else (peer, rank)
        cid = p2p_id(group, src, dst, seq)
    else:
        cid = collective_id(group, seq)
    attrs: dict[str, Any] = {
        ACCEL_COLLECTIVE_OP: op,
        ACCEL_COLLECTIVE_GROUP: group,
        ACCEL_COLLECTIVE_GROUP_SIZE: int(group_size),
        ACCEL_COLLECTIVE_RANK: int(rank),
        ACCEL_COLLECTIVE_SEQ: int(seq),
        ACCEL_COLLECTIVE_ID: cid,
        ACCEL_COLLECTIVE_BYTES: int(nbytes),
        ACCEL_COLLECTIVE_ASYNC: bool(is_async),
    }
    if dtype is not None:
        attrs[ACCEL_COLLECTIVE_DTYPE] = dtype
    if peer is not None:
        attrs[ACCEL_COLLECTIVE_PEER] = int(peer)
    return attrs


def collective(
    op: str,
    *,
    group: str,
    group_size: int,
    rank: int,
    nbytes: int = 0,
    seq: int | None = None,
    dtype: str | None = None,
    peer: int | None = None,
    is_async: bool = False,
    links: Sequence[Link] = (),
    attributes: Attributes | None = None,
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
    start_time: int | None = None,
    end_time: int | None = None,
) -> SpanScope:
    """A collective-communication span (``accel.collective``) with bandwidths set at its end.

    Args:
        op: the operation (``all_reduce``, ``all_gather``, ``send``, ...).
        group: process-group name.
        group_size: ranks in the group.
        rank: this member's rank in the group.
        nbytes: payload bytes of this member's buffer (input for reductions, output for
            gathers).
        seq: per-group sequence number; taken from :data:`SEQUENCES` when ``None`` (per
            group for collectives, per ordered pair for point-to-point ops).
        dtype: element type of the payload.
        peer: the peer's group rank for point-to-point ops.
        is_async: whether the call was asynchronous.
        links: links to the other members' spans, where their contexts are known.
        attributes: more attributes (device identity).
        tracer_provider: where the span goes; the global provider when ``None``.
        context: the parent context; the current one when ``None``.
        start_time: explicit start in ns since the epoch.
        end_time: explicit end in ns since the epoch.

    Returns:
        A :class:`SpanScope`; ``accel.collective.algbw`` and ``.busbw`` are set when it ends.

    >>> scope = collective("all_gather", group="dp", group_size=2, rank=0, seq=0, nbytes=64)
    >>> scope.attributes["accel.collective.id"]
    'dp:0'
    """
    if seq is None:
        if peer is not None and op not in COLLECTIVE_OPS:
            sending = op in ("send", "isend")
            key: Any = (group, rank, peer) if sending else (group, peer, rank)
        else:
            key = group
        seq = SEQUENCES.next(key)
    attrs = _merge(
        collective_attributes(
            op,
            group=group,
            group_size=group_size,
            rank=rank,
            seq=seq,
            nbytes=nbytes,
            dtype=dtype,
            peer=peer,
            is_async=is_async,
        ),
        attributes,
    )
    return SpanScope(
        SPAN_ACCEL_COLLECTIVE,
        attrs,
        tracer_provider=tracer_provider,
        context=context,
        start_time=start_time,
        end_time=end_time,
        links=links,
        on_end=_set_bandwidth(op, int(nbytes), group_size),
    )


def request(
    request_id: str,
    *,
    model: str | None = None,
    operation: str = "text_completion",
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    attributes: Attributes | None = None,
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
    start_time: int | None = None,
    end_time: int | None = None,
) -> SpanScope:
    """An inference-request span (``accel.request``, kind ``SERVER``, ``gen_ai.*`` attributes).

    For the full lifecycle with TTFT/TPOT histograms use
    :class:`otel_ext.instrumentation.inference.InferenceInstrumentation`.

    >>> request("req-1", model="tiny", input_tokens=12).attributes["gen_ai.usage.input_tokens"]
    12
    """
    attrs = _merge(
        {
            ACCEL_REQUEST_ID: request_id,
            GEN_AI_OPERATION_NAME: operation,
            GEN_AI_REQUEST_MODEL: model,
            GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
            GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        },
        attributes,
    )
    return SpanScope(
        SPAN_ACCEL_REQUEST,
        attrs,
        tracer_provider=tracer_provider,
        kind=SpanKind.SERVER,
        context=context,
        start_time=start_time,
        end_time=end_time,
    )


def phase(
    name: str,
    *,
    step: int | None = None,
    batch_size: int | None = None,
    attributes: Attributes | None = None,
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
    start_time: int | None = None,
    end_time: int | None = None,
) -> SpanScope:
    """A request-phase span (``accel.request.phase``): ``queue``, ``prefill``, ``decode``, ``kv_transfer``.

    >>> phase("decode", step=812, batch_size=16).attributes["accel.request.step"]
    812
    """
    attrs = _merge(
        {ACCEL_REQUEST_PHASE: name, ACCEL_REQUEST_STEP: step, ACCEL_REQUEST_BATCH_SIZE: batch_size},
        attributes,
    )
    return SpanScope(
        SPAN_ACCEL_REQUEST_PHASE,
        attrs,
        tracer_provider=tracer_provider,
        context=context,
        start_time=start_time,
        end_time=end_time,
    )


def _tick_value(ticks: int) -> int | str:
    # OTLP integers are signed 64-bit; a wider raw counter value is kept exactly as text.
    return int(ticks) if -(2**63) <= ticks < 2**63 else str(ticks)


def _record_ticks(
    span_name: str,
    attrs: dict[str, Any],
    *,
    start_ticks: int,
    end_ticks: int,
    mapping: ClockMappingLike,
    clock_domain: str,
    near_host_ns: int | None,
    tracer_provider: ApiTracerProvider | None,
    context: Context | None,
    links: Sequence[Link],
) -> Span | None:
    start_ns = int(mapping.to_host_ns(start_ticks, near_host_ns=near_host_ns))
    end_ns = int(mapping.to_host_ns(end_ticks, near_host_ns=start_ns))
    end_ns = max(end_ns, start_ns)
    uncertainty = max(float(mapping.bound_ns(start_ticks)), float(mapping.bound_ns(end_ticks)))
    attrs.update(
        {
            ACCEL_CLOCK_DOMAIN: clock_domain,
            ACCEL_CLOCK_RAW_START_TICKS: _tick_value(start_ticks),
            ACCEL_CLOCK_RAW_END_TICKS: _tick_value(end_ticks),
            ACCEL_CLOCK_UNCERTAINTY_NS: round(uncertainty),
        }
    )
    span = get_tracer(tracer_provider).start_span(
        span_name, context=context, attributes=attrs, links=links, start_time=start_ns
    )
    span.end(end_time=end_ns)
    return span


def record_device_activity(
    name: str,
    *,
    start_ticks: int,
    end_ticks: int,
    mapping: ClockMappingLike,
    clock_domain: str,
    kind: str = "compute",
    stream: int | None = None,
    correlation_id: int | None = None,
    flops: float | None = None,
    nbytes: float | None = None,
    near_host_ns: int | None = None,
    attributes: Attributes | None = None,
    links: Sequence[Link] = (),
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
) -> Span | None:
    """Record device activity (kernel, memcpy, DMA) that already happened, from device ticks.

    The span's times are ``mapping.to_host_ns(ticks)``; the raw ticks are kept
    (``accel.clock.raw_start_ticks``/``raw_end_ticks``) with the clock domain and the larger
    of the two error bounds (``accel.clock.uncertainty_ns``), so a later pass can re-align.

    Args:
        name: kernel or activity name.
        start_ticks: device timestamp of the start, as read (wrapped counters allowed).
        end_ticks: device timestamp of the end, as read.
        mapping: device-to-host clock mapping (``to_host_ns``, ``bound_ns``).
        clock_domain: the device clock's name.
        kind: ``compute``, ``communication``, ``memcpy``, ``memset``, ``dma`` or ``other``.
        stream: stream or queue.
        correlation_id: id linking the host launch to this activity.
        flops: estimated floating-point operations.
        nbytes: estimated memory bytes moved.
        near_host_ns: a host time near the start, to resolve counter wrap-around.
        attributes: more attributes (device identity).
        links: span links (the host-side launch span, for instance).
        tracer_provider: where the span goes; the global provider when ``None``.
        context: the parent context; the current one when ``None``.

    Returns:
        The ended span, or ``None`` when recording failed (logged once, counted).

    >>> class Shifted:
    ...     def to_host_ns(self, ticks, near_host_ns=None): return 1_000 + ticks
    ...     def bound_ns(self, ticks): return 25.0
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> span = record_device_activity("gemm", start_ticks=10, end_ticks=50, mapping=Shifted(),
    ...                               clock_domain="host0/chip1", tracer_provider=TracerProvider())
    >>> span.start_time, span.end_time, span.attributes["accel.clock.uncertainty_ns"]
    (1010, 1050, 25)
    """
    attrs = _merge(
        {
            ACCEL_KERNEL_NAME: name,
            ACCEL_KERNEL_KIND: kind,
            ACCEL_KERNEL_STREAM: stream,
            ACCEL_KERNEL_CORRELATION_ID: correlation_id,
            ACCEL_KERNEL_FLOPS: None if flops is None else float(flops),
            ACCEL_KERNEL_BYTES: None if nbytes is None else float(nbytes),
        },
        attributes,
    )
    return guarded(
        "record_device_activity",
        _record_ticks,
        SPAN_ACCEL_KERNEL,
        attrs,
        start_ticks=start_ticks,
        end_ticks=end_ticks,
        mapping=mapping,
        clock_domain=clock_domain,
        near_host_ns=near_host_ns,
        tracer_provider=tracer_provider,
        context=context,
        links=links,
    )


def record_link_transfer(
    link_id: str,
    *,
    start_ticks: int,
    end_ticks: int,
    mapping: ClockMappingLike,
    clock_domain: str,
    nbytes: int,
    src: str | None = None,
    dst: str | None = None,
    link_kind: str = "chip_to_chip",
    near_host_ns: int | None = None,
    attributes: Attributes | None = None,
    links: Sequence[Link] = (),
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
) -> Span | None:
    """Record a transfer over a link (``accel.link.transfer``) from device ticks.

    Same clock handling as :func:`record_device_activity`.

    Args:
        link_id: ``HOST/CHIPA-CHIPB`` or ``HOST/nicN``.
        start_ticks: device timestamp of the start.
        end_ticks: device timestamp of the end.
        mapping: device-to-host clock mapping.
        clock_domain: the device clock's name.
        nbytes: bytes moved.
        src: source device.
        dst: destination device.
        link_kind: ``chip_to_chip``, ``nic`` or ``pcie``.
        near_host_ns: a host time near the start, to resolve counter wrap-around.
        attributes: more attributes.
        links: span links.
        tracer_provider: where the span goes; the global provider when ``None``.
        context: the parent context; the current one when ``None``.

    Returns:
        The ended span, or ``None`` when recording failed.

    >>> class Identity:
    ...     def to_host_ns(self, ticks, near_host_ns=None): return ticks
    ...     def bound_ns(self, ticks): return 0
    >>> record_link_transfer("h0/chip0-chip1", start_ticks=5, end_ticks=9, mapping=Identity(),
    ...                      clock_domain="h0/chip0", nbytes=1024) is not None
    True
    """
    attrs = _merge(
        {
            ACCEL_LINK_ID: link_id,
            ACCEL_LINK_KIND: link_kind,
            ACCEL_LINK_BYTES: int(nbytes),
            ACCEL_LINK_SRC: src,
            ACCEL_LINK_DST: dst,
        },
        attributes,
    )
    return guarded(
        "record_link_transfer",
        _record_ticks,
        SPAN_ACCEL_LINK_TRANSFER,
        attrs,
        start_ticks=start_ticks,
        end_ticks=end_ticks,
        mapping=mapping,
        clock_domain=clock_domain,
        near_host_ns=near_host_ns,
        tracer_provider=tracer_provider,
        context=context,
        links=links,
    )
