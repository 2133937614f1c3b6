"""The short path for ended spans exports what the SDK's API path exports, or is not taken.

:mod:`otel_ext.instrumentation.finished_spans` hands a ``ReadableSpan`` to the processors'
``on_end`` instead of building a live span; these tests write the same spans both ways (with
the same id sequence) and compare every exported field, over generated attributes, parents,
links, statuses and samplers, and check that each condition the short path needs sends the
span down the API path instead.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from otel_ext.instrumentation.active_span import (
    ActiveSpanPublisher,
    ActiveSpanPublishingProcessor,
)
from otel_ext.instrumentation.active_span_record import decode_record
from otel_ext.instrumentation.finished_spans import FinishedSpans
from otel_ext.instrumentation.sdk_versions import sdk_checked


class _Counting(IdGenerator):
    """Ids from a counter: the two paths draw the same ids in the same order."""

    def __init__(self) -> None:
        self.n = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self.n) * 0x9E3779B97F4A7C15 % (1 << 64) or 1

    def generate_trace_id(self) -> int:
        return next(self.n) * 0x9E3779B97F4A7C15F39CC0605CEDC835 % (1 << 128) or 1


def _provider(sampler: Any, **kw: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        sampler=sampler,
        resource=Resource.create({"service.name": "finished-spans-test"}),
        id_generator=_Counting(),
        **kw,
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _fields(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "context": span.context,
        "parent": span.parent,
        "kind": span.kind,
        "attributes": dict(span.attributes),
        "links": [(link.context, dict(link.attributes or {})) for link in span.links],
        "events": list(span.events),
        "status": (span.status.status_code, span.status.description),
        "start": span.start_time,
        "end": span.end_time,
        "resource": dict(span.resource.attributes),
        "scope": (span.instrumentation_scope.name, span.instrumentation_scope.version),
        "dropped": (span.dropped_attributes, span.dropped_links),
    }


def _api(tracer: Any, name: str, ctx: Context | None, attrs: dict[str, Any], links: Any,
         start: int, end: int, status: Status | None) -> trace.Span:  # fmt: skip
    span = tracer.start_span(name, context=ctx, attributes=attrs, links=links, start_time=start)
    if status is not None:
        span.set_status(status)
    span.end(end_time=end)
    return span


_SAMPLERS = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "parent_on": ParentBased(ALWAYS_ON),
    "parent_off": ParentBased(ALWAYS_OFF),
    "ratio": TraceIdRatioBased(0.5),
}
_keys = st.text(alphabet="abcdefghij._", min_size=1, max_size=12)
_values = st.one_of(
    st.text(max_size=20),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.tuples(st.text(max_size=5), st.text(max_size=5)),
)
_ids = st.integers(min_value=1, max_value=(1 << 64) - 1)
_parents = st.one_of(
    st.none(),
    st.tuples(st.integers(min_value=1, max_value=(1 << 128) - 1), _ids, st.booleans()),
)


@settings(max_examples=120, deadline=None)
@given(
    sampler=st.sampled_from(sorted(_SAMPLERS)),
    attrs=st.dictionaries(_keys, _values, max_size=12),
    parent=_parents,
    links=st.lists(st.tuples(_ids, st.dictionaries(_keys, st.integers(), max_size=2)), max_size=3),
    error=st.one_of(st.none(), st.text(max_size=10)),
    start=st.integers(min_value=0, max_value=2**62),
    length=st.integers(min_value=0, max_value=10**12),
)
def test_the_short_path_exports_what_the_api_exports(
    sampler: str,
    attrs: dict[str, Any],
    parent: tuple[int, int, bool] | None,
    links: list[tuple[int, dict[str, int]]],
    error: str | None,
    start: int,
    length: int,
) -> None:
    ctx = None
    if parent is not None:
        tid, sid, sampled = parent
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        ctx = trace.set_span_in_context(
            NonRecordingSpan(SpanContext(tid, sid, is_remote=True, trace_flags=flags))
        )
    link_objs = [
        Link(SpanContext(7, sid, is_remote=True, trace_flags=TraceFlags(1)), la)
        for sid, la in links
    ]
    status = None if error is None else Status(StatusCode.ERROR, error)
    api_provider, api_out = _provider(_SAMPLERS[sampler])
    short_provider, short_out = _provider(_SAMPLERS[sampler])
    short = FinishedSpans(short_provider.get_tracer("otel_ext.test", "1.2"))
    assert short.short_path is sdk_checked()
    a = _api(api_provider.get_tracer("otel_ext.test", "1.2"), "accel.collective", ctx,
             dict(attrs), link_objs, start, start + length, status)  # fmt: skip
    b = short.write("accel.collective", context=ctx, attributes=dict(attrs), links=link_objs,
                    start_ns=start, end_ns=start + length, status=status)  # fmt: skip
    assert a.get_span_context() == b.get_span_context()
    got_api = [_fields(s) for s in api_out.get_finished_spans()]
    got_short = [_fields(s) for s in short_out.get_finished_spans()]
    assert got_short == got_api
    assert len(got_api) == (1 if a.get_span_context().trace_flags.sampled else 0)


def test_a_span_current_in_the_context_is_the_parent() -> None:
    provider, out = _provider(ALWAYS_ON)
    tracer = provider.get_tracer("t")
    spans = FinishedSpans(tracer)
    with tracer.start_as_current_span("step") as step:
        ctx = otel_context.get_current()
    spans.write("accel.collective", context=ctx, attributes={"k": 1}, start_ns=5, end_ns=9)
    child = next(s for s in out.get_finished_spans() if s.name == "accel.collective")
    assert child.parent == step.get_span_context()
    assert child.context.trace_id == step.get_span_context().trace_id


class _Enriching(SpanProcessor):
    """A processor that adds an attribute when a span starts (as baggage processors do)."""

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        span.set_attribute("enriched", True)


def test_a_processor_that_acts_on_start_keeps_the_api_path() -> None:
    provider, out = _provider(ALWAYS_ON)
    provider.add_span_processor(_Enriching())
    spans = FinishedSpans(provider.get_tracer("t"))
    assert not spans.short_path
    spans.write("s", attributes={"k": 1}, start_ns=1, end_ns=2)
    assert dict(out.get_finished_spans()[0].attributes) == {"k": 1, "enriched": True}


def test_processors_that_need_no_start_keep_the_short_path(tmp_path: Any) -> None:
    provider, _ = _provider(ALWAYS_ON)
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    publisher = ActiveSpanPublisher(str(tmp_path))
    provider.add_span_processor(ActiveSpanPublishingProcessor(publisher))
    spans = FinishedSpans(provider.get_tracer("otel_ext.instrumentation"))
    assert spans.short_path is sdk_checked()
    span = spans.write(
        "accel.collective", attributes={"accel.device.id": "h/chip0"}, start_ns=10, end_ns=20
    )
    # the publisher saw the ended span through on_end alone: in the ring, not open
    (rec,) = publisher.records()
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None and not snap.open
    assert [(e.span_id, e.start_ns, e.end_ns) for e in snap.ring] == [
        (span.get_span_context().span_id, 10, 20)
    ]
    provider.shutdown()


def _cut(span: Any) -> bool:
    """Whether the SDK cut something of ``span`` (an attribute, a link, a long value)."""
    long_value = any(v == "lon" for v in span.attributes.values())
    return span.dropped_attributes > 0 or span.dropped_links > 0 or long_value


@pytest.mark.parametrize(
    ("limits", "attrs", "links"),
    [
        (SpanLimits(max_span_attributes=2), {"a": 1, "b": 2, "c": 3}, 0),
        (SpanLimits(max_attribute_length=3), {"a": "long value"}, 0),
        (SpanLimits(max_links=1), {"a": 1}, 2),
    ],
)
def test_what_the_sdk_would_cut_goes_the_api_way(
    limits: SpanLimits, attrs: Any, links: int
) -> None:
    link_objs = [Link(SpanContext(7, i + 1, False, TraceFlags(1))) for i in range(links)]
    api_provider, api_out = _provider(ALWAYS_ON, span_limits=limits)
    short_provider, short_out = _provider(ALWAYS_ON, span_limits=limits)
    _api(api_provider.get_tracer("t"), "s", None, dict(attrs), link_objs, 1, 2, None)
    spans = FinishedSpans(short_provider.get_tracer("t"))
    assert spans.short_path is sdk_checked()
    spans.write("s", attributes=dict(attrs), links=link_objs, start_ns=1, end_ns=2)
    (got,) = short_out.get_finished_spans()
    assert _cut(got)
    assert [_fields(got)] == [_fields(s) for s in api_out.get_finished_spans()]


def test_an_invalid_link_goes_the_api_way() -> None:
    invalid = [Link(SpanContext(0, 0, False))]
    api_provider, api_out = _provider(ALWAYS_ON)
    short_provider, short_out = _provider(ALWAYS_ON)
    _api(api_provider.get_tracer("t"), "s", None, {"a": 1}, invalid, 1, 2, None)
    FinishedSpans(short_provider.get_tracer("t")).write(
        "s", attributes={"a": 1}, links=invalid, start_ns=1, end_ns=2
    )
    assert [_fields(s) for s in short_out.get_finished_spans()] == [
        _fields(s) for s in api_out.get_finished_spans()
    ]


def test_sdk_span_metrics_on_keeps_the_api_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    provider, _ = _provider(ALWAYS_ON)
    assert not FinishedSpans(provider.get_tracer("t")).short_path


def test_an_sdk_version_not_checked_keeps_the_api_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_ext.instrumentation import finished_spans

    provider, _ = _provider(ALWAYS_ON)
    assert FinishedSpans(provider.get_tracer("t")).short_path is sdk_checked()
    monkeypatch.setattr(finished_spans, "sdk_checked", lambda: False)
    assert not FinishedSpans(provider.get_tracer("t")).short_path


def test_no_op_and_proxy_tracers() -> None:
    noop = FinishedSpans(trace.NoOpTracer())
    assert not noop.short_path
    span = noop.write("s", attributes={"a": 1}, start_ns=1, end_ns=2)
    assert not span.get_span_context().is_valid
    provider, out = _provider(ALWAYS_ON)
    proxy = trace.ProxyTracer("t")
    proxy._real_tracer = provider.get_tracer("t")  # what a resolved proxy holds
    spans = FinishedSpans(proxy)
    assert spans.short_path is sdk_checked()
    spans.write("s", attributes={"a": 1}, start_ns=1, end_ns=2)
    assert [s.name for s in out.get_finished_spans()] == ["s"]


def test_a_processor_added_later_is_seen() -> None:
    provider, out = _provider(ALWAYS_ON)
    spans = FinishedSpans(provider.get_tracer("t"))
    assert spans.short_path is sdk_checked()
    provider.add_span_processor(_Enriching())
    assert not spans.short_path
    spans.write("s", attributes={"k": 1}, start_ns=1, end_ns=2)
    assert dict(out.get_finished_spans()[0].attributes) == {"k": 1, "enriched": True}


def test_a_proxy_tracer_that_resolves_later_takes_the_short_path() -> None:
    provider, out = _provider(ALWAYS_ON)
    proxy = trace.ProxyTracer("t")
    spans = FinishedSpans(proxy)
    assert not spans.short_path  # not resolved yet: the API path (a no-op tracer now)
    proxy._real_tracer = provider.get_tracer("t")  # what the proxy holds once resolved
    assert spans.short_path is sdk_checked()
    spans.write("s", attributes={"a": 1}, start_ns=1, end_ns=2)
    assert [s.name for s in out.get_finished_spans()] == ["s"]
