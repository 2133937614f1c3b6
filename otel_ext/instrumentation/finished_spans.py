"""Spans written after they ended, straight to an SDK tracer's span processors.

Some spans are only known once they are over: the collective drain learns a collective's
whole life (name, parent context, attributes, links, start, end, status) at once, in the
background. The API path for that, ``tracer.start_span(...)`` then ``span.end(...)``, builds
a live span first (a lock, attribute validation and copies, ``on_start`` and ``on_end``):
about 25 µs a span on this project's 2-vCPU VM, taken under the GIL from the process that
runs the workload. For a tracer of the OpenTelemetry SDK, :class:`FinishedSpans` makes the
same exported span (same sampler decision, ids, parent, flags, resource, scope, attributes,
links, status and times) as a :class:`~opentelemetry.sdk.trace.ReadableSpan` handed to the
processors' ``on_end``: 6.5 µs, or 4 µs through a batch writer (:meth:`FinishedSpans.writer`:
the checks below once per batch), against 37 µs for the API path in the same run (``python
benchmarks/finished_spans.py``). For the SDK's default sampler (``parentbased_always_on``) and
``ALWAYS_ON`` it makes the sampler's decision itself (see :func:`_follows_parent`); any other
sampler is called.

It takes the short path only where the result is the same; otherwise it calls the API:

* the SDK is a version the tests passed on
  (:data:`~otel_ext.instrumentation.sdk_versions.CHECKED_SDK`: this reads its private parts),
  and the tracer is the SDK's, with the attributes this relies on (checked once it is known:
  at construction, or when a proxy tracer resolves: ``sampler``, ``id_generator``,
  ``resource``, ``span_processor``, the scope), and the SDK's own span metrics
  (``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED``) are off;
* every span processor either has the SDK's no-op ``on_start`` (the batch and simple
  export processors, and subclasses that keep theirs) or says with
  ``ended_spans_need_on_start = False`` that ``on_end`` alone is right for a span written
  after it ended (otel-ext's active-span publisher and bounded batch processor). A
  processor that enriches spans in ``on_start`` (baggage, resource detectors) keeps the API
  path, also when it is added to the provider later (the processors are looked at again
  whenever they change);
* the span is within the tracer's limits (attribute count and value length, link count) and
  its links have valid contexts, so the SDK would have dropped nothing.

Attribute values must already be valid OpenTelemetry values (``str``, ``bool``, ``int``,
``float`` or sequences of one of them): the short path does not clean them.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> spans = FinishedSpans(provider.get_tracer("doc"))
>>> spans.short_path
True
>>> span = spans.write("accel.collective", attributes={"accel.collective.op": "all_reduce"},
...                    start_ns=1_000, end_ns=3_000)
>>> [(s.name, s.end_time - s.start_time, dict(s.attributes)) for s in exporter.get_finished_spans()]
[('accel.collective', 2000, {'accel.collective.op': 'all_reduce'})]
>>> span.get_span_context().trace_id == exporter.get_finished_spans()[0].context.trace_id
True
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    TraceFlags,
    TraceState,
)
from opentelemetry.util.types import AttributeValue

from otel_ext.instrumentation.sdk_versions import sdk_checked

__all__ = ["FinishedSpans", "SpanWriter"]

#: ``(name, context, attributes, links, start_ns, end_ns, status) -> span``: what
#: :meth:`FinishedSpans.writer` returns.
SpanWriter = Callable[
    [str, "Context | None", dict[str, Any], Sequence[Link], int, int, "Status | None"], trace.Span
]

_SDK_METRICS_ENV = "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED"
_TRACER_NEEDS = ("sampler", "id_generator", "resource", "span_processor", "instrumentation_info")
_UNSET = Status()  # immutable: one for every span without a status
_PARENT_BASED_DELEGATES = (
    "_remote_parent_sampled",
    "_remote_parent_not_sampled",
    "_local_parent_sampled",
    "_local_parent_not_sampled",
)


def _follows_parent(sampler: Any) -> bool:
    """Whether ``sampler`` decides by the parent alone, as the SDK's default does.

    True for ``ParentBased(ALWAYS_ON)`` with its default delegates (the SDK's default
    sampler, ``parentbased_always_on``) or ``ALWAYS_ON``: a root span is sampled, a child is
    sampled exactly when its parent is, the attributes pass unchanged and the trace state is
    the parent's. Then :meth:`FinishedSpans.write` makes that decision itself instead of
    calling ``should_sample`` (3 µs a span, mostly result objects). False for anything
    else, also a subclass or an SDK whose ``ParentBased`` keeps its delegates elsewhere (the
    sampler is called then).

    >>> from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased
    >>> _follows_parent(ParentBased(ALWAYS_ON)), _follows_parent(ALWAYS_ON)
    (True, True)
    >>> _follows_parent(ParentBased(ALWAYS_OFF)), _follows_parent(ParentBased(ALWAYS_ON, ALWAYS_OFF))
    (False, False)
    """
    from opentelemetry.sdk.trace import sampling

    on, off = getattr(sampling, "ALWAYS_ON", None), getattr(sampling, "ALWAYS_OFF", None)
    static = getattr(sampling, "StaticSampler", None)
    if static is None or type(on) is not static or type(off) is not static:
        return False
    decision = getattr(sampling, "Decision", None)
    if decision is None or getattr(on, "_decision", None) is not decision.RECORD_AND_SAMPLE:
        return False
    if getattr(off, "_decision", None) is not decision.DROP:
        return False
    if sampler is on:
        return True
    if type(sampler) is not sampling.ParentBased or getattr(sampler, "_root", None) is not on:
        return False
    got = [getattr(sampler, name, None) for name in _PARENT_BASED_DELEGATES]
    return all(a is b for a, b in zip(got, (on, off, on, off), strict=True))


def _valid(links: Sequence[Link]) -> bool:
    return all(link.context is not None and link.context.is_valid for link in links)


def _processors_need_no_start(span_processor: Any) -> bool:
    """Whether every processor under ``span_processor`` is right with ``on_end`` alone."""
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    no_op = (SpanProcessor.on_start, SimpleSpanProcessor.on_start, BatchSpanProcessor.on_start)
    inner = getattr(span_processor, "_span_processors", None)
    if inner is None:
        return False  # an SDK composite we do not know: keep the API path
    for p in inner:
        if hasattr(p, "_span_processors"):
            if not _processors_need_no_start(p):
                return False
        elif type(p).on_start not in no_op and getattr(p, "ended_spans_need_on_start", True):
            return False
    return True


class FinishedSpans:
    """Writes ended spans for ``tracer``: the short path where it is the same, else the API.

    Args:
        tracer: any OpenTelemetry tracer (a proxy tracer is followed to the SDK tracer it
            resolved to; until it resolves, and for a no-op tracer, the API path is used).
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self._sdk: Any = None  # the SDK tracer, once found (the processors checked apart)
        self._limits: Any = None
        self._readable: Any = None
        self._random_flag = 0
        self._unresolved_proxy = isinstance(tracer, trace.ProxyTracer)
        self._checked: Any = None  # the processors tuple last checked, and its answer
        self._processors_ok = False
        self._sampler: Any = None  # the sampler last looked at, and how it decides
        self._sampler_mode = 0  # 0: call it, 1: always on, 2: by the parent (see _follows_parent)
        self._flags: dict[int, TraceFlags] = {}
        self._resolve()

    @property
    def short_path(self) -> bool:
        """Whether spans go straight to the processors now (see the module doc)."""
        return self._short() is not None

    def _short(self) -> Any:
        """The SDK tracer when the short path applies, else ``None``. A proxy tracer is
        looked at again until it resolves; the processors again whenever the provider's
        set of them changed (the SDK replaces its tuple on ``add_span_processor``)."""
        if self._sdk is None and self._unresolved_proxy:
            self._resolve()
        tracer = self._sdk
        if tracer is None:
            return None
        processors = getattr(tracer.span_processor, "_span_processors", None)
        if processors is not self._checked:
            self._checked = processors
            self._processors_ok = _processors_need_no_start(tracer.span_processor)
        sampler = tracer.sampler
        if sampler is not self._sampler:
            self._sampler = sampler
            from opentelemetry.sdk.trace.sampling import ParentBased

            follows = _follows_parent(sampler)
            self._sampler_mode = 0 if not follows else 2 if type(sampler) is ParentBased else 1
        return tracer if self._processors_ok else None

    def _resolve(self) -> None:
        from opentelemetry.sdk.trace import Tracer as SdkTracer

        tracer: Any = self.tracer
        if not isinstance(tracer, SdkTracer):
            tracer = getattr(tracer, "_real_tracer", None)  # a resolved ProxyTracer
            if tracer is None:
                return
            self._unresolved_proxy = False
        if not isinstance(tracer, SdkTracer):
            return
        if any(not hasattr(tracer, a) for a in _TRACER_NEEDS):
            return
        limits = getattr(tracer, "_span_limits", None)
        if limits is None or not hasattr(tracer, "_instrumentation_scope"):
            return
        if os.environ.get(_SDK_METRICS_ENV, "").strip().lower() == "true":
            return
        if not sdk_checked():  # an SDK whose private parts this was not tested on
            return
        from opentelemetry.sdk.trace import ReadableSpan

        self._readable = ReadableSpan
        self._random_flag = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))
        self._sdk, self._limits = tracer, limits

    def _fits(self, attributes: Mapping[str, Any], links: Sequence[Link]) -> bool:
        limits = self._limits
        n_attrs, n_links = limits.max_span_attributes, limits.max_links
        if n_attrs is not None and len(attributes) > n_attrs:
            return False
        if n_links is not None and len(links) > n_links:
            return False
        longest = limits.max_span_attribute_length
        if longest is not None:
            for v in attributes.values():
                if isinstance(v, str) and len(v) > longest:
                    return False
        return not links or all(
            link.context is not None and link.context.is_valid for link in links
        )

    def write(
        self,
        name: str,
        *,
        context: Context | None = None,
        attributes: dict[str, Any],
        links: Sequence[Link] = (),
        start_ns: int,
        end_ns: int,
        status: Status | None = None,
        owned: bool = False,
    ) -> trace.Span:
        """Write one ended span (a child of the span current in ``context``).

        ``owned=True``: ``attributes`` is the span's from now on (the short path keeps it
        instead of a copy; the caller does not change it after).

        Returns:
            A span for its context (for exemplars and links): the recording one, or a
            non-recording span when the sampler dropped it.
        """
        write = self.writer(owned=owned)
        return write(name, context, attributes, links, start_ns, end_ns, status)

    def writer(self, *, owned: bool = False) -> SpanWriter:
        """:meth:`write` for a batch of spans written now, with what they share looked up once.

        The returned function takes ``(name, context, attributes, links, start_ns, end_ns,
        status)`` positionally and writes as :meth:`write` does; whether the short path
        applies (the tracer, its processors and sampler, whether it is enabled) is decided
        here, once, so a processor added while the batch is written gets ``on_end`` without
        ``on_start`` for the batch's remaining spans, as the SDK does for spans live when it
        is added. Use one per batch, from one thread.

        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> write = FinishedSpans(TracerProvider().get_tracer("doc")).writer(owned=True)
        >>> write("a", None, {"k": 1}, (), 10, 20, None).get_span_context().is_valid
        True
        """
        tracer = self._short()
        if tracer is None or not tracer._is_enabled():
            return self._api_write
        return self._short_writer(tracer, owned)

    def _api_write(
        self,
        name: str,
        context: Context | None,
        attributes: dict[str, Any],
        links: Sequence[Link],
        start_ns: int,
        end_ns: int,
        status: Status | None,
    ) -> trace.Span:
        span = self.tracer.start_span(
            name, context=context, attributes=attributes, links=links, start_time=start_ns
        )
        if status is not None:
            span.set_status(status)
        span.end(end_time=end_ns)
        return span

    def _short_writer(self, tracer: Any, owned: bool) -> SpanWriter:
        """The short path's writer for ``tracer``: what it needs looked up once, then per
        span the limits check, the parent, the ids, the sampler's decision and the flags,
        and one ``ReadableSpan`` handed to the processors' ``on_end``."""
        ids = tracer.id_generator
        on_end = tracer.span_processor.on_end
        readable = self._readable
        resource, info = tracer.resource, tracer.instrumentation_info
        scope = tracer._instrumentation_scope
        api_write = self._api_write
        beyond_limits = self._beyond_limits()
        parent_of = _parent_lookup()
        decide = self._sampling(tracer.sampler, owned)
        trace_flags = self._trace_flags_of()
        internal = SpanKind.INTERNAL

        def write_short(
            name: str,
            context: Context | None,
            attributes: dict[str, Any],
            links: Sequence[Link],
            start_ns: int,
            end_ns: int,
            status: Status | None,
        ) -> trace.Span:
            if beyond_limits(attributes, links):  # what the SDK would cut or drop: see _fits
                return api_write(name, context, attributes, links, start_ns, end_ns, status)
            parent = parent_of(context)
            if parent is None:
                trace_id = ids.generate_trace_id()
                random_id = ids.is_trace_id_random()
            else:
                trace_id = parent.trace_id
                random_id = getattr(parent.trace_flags, "random_trace_id", False)
            sampled, recording, trace_state, span_attributes = decide(
                name, context, trace_id, parent, attributes, links
            )
            span_context = SpanContext(
                trace_id,
                ids.generate_span_id(),
                is_remote=False,
                trace_flags=trace_flags(sampled, random_id),
                trace_state=trace_state,
            )
            if recording:
                on_end(
                    readable(
                        name,
                        span_context,
                        parent,
                        resource,
                        span_attributes,
                        (),
                        tuple(links),
                        internal,
                        info,
                        status if status is not None else _UNSET,
                        start_ns,
                        end_ns,
                        scope,
                    )
                )
            return NonRecordingSpan(span_context)

        return write_short

    def _beyond_limits(self) -> Callable[[_Attributes, Sequence[Link]], bool]:
        """Whether a span exceeds the tracer's limits (attribute count, link count, attribute
        length) or has an invalid link: what the SDK would cut or drop."""
        limits = self._limits
        n_attrs, n_links = limits.max_span_attributes, limits.max_links
        n_attrs = n_attrs if n_attrs is not None else 1 << 62
        n_links = n_links if n_links is not None else 1 << 62
        fits = self._fits if limits.max_span_attribute_length is not None else None

        def beyond_limits(attributes: _Attributes, links: Sequence[Link]) -> bool:
            return bool(
                len(attributes) > n_attrs
                or (links and (len(links) > n_links or not _valid(links)))
                or (fits is not None and not fits(attributes, links))
            )

        return beyond_limits

    def _sampling(self, sampler: Any, owned: bool) -> Callable[..., _Decision]:
        """The sampling decision for a span: made here for the samplers that follow the
        parent or always sample (see :func:`_follows_parent`), without the sampler's
        objects; else the sampler's own."""
        mode = self._sampler_mode
        internal = SpanKind.INTERNAL

        def decide(
            name: str,
            context: Context | None,
            trace_id: int,
            parent: SpanContext | None,
            attributes: _Attributes,
            links: Sequence[Link],
        ) -> _Decision:
            if mode:
                sampled = mode == 1 or parent is None or parent.trace_flags.sampled
                trace_state = None if parent is None else parent.trace_state
                return sampled, sampled, trace_state, attributes if owned else dict(attributes)
            result = sampler.should_sample(context, trace_id, name, internal, attributes, links)
            decision = result.decision
            return (
                decision.is_sampled(),
                decision.is_recording(),
                result.trace_state,
                dict(result.attributes),
            )

        return decide

    def _trace_flags_of(self) -> Callable[[bool, bool], TraceFlags]:
        """The span's trace flags (sampled, random trace id), one cached object per value."""
        random_flag, flags_cache = self._random_flag, self._flags

        def trace_flags(sampled: bool, random_id: bool) -> TraceFlags:
            flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
            if random_id:
                flags |= random_flag
            found = flags_cache.get(flags)
            if found is None:
                found = flags_cache[flags] = TraceFlags(flags)
            return found

        return trace_flags


#: a span's attributes (valid OpenTelemetry values already: the short path does not clean them)
_Attributes = dict[str, AttributeValue]
#: a sampling decision: sampled, recording, the trace state, the span's attributes
_Decision = tuple[bool, bool, TraceState | None, _Attributes]


def _parent_lookup() -> Callable[[Context | None], SpanContext | None]:
    """The valid parent span context of a context (``None`` for a root), the last one
    remembered: a context is immutable, the same one has the same parent."""
    last: list[Any] = [None, None]

    def parent_of(context: Context | None) -> SpanContext | None:
        if context is not None and last[0] is context:
            parent: SpanContext | None = last[1]
            return parent
        parent = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
        last[0], last[1] = context, parent
        return parent

    return parent_of
