"""The native drain's templates make the spans and metrics the reference path makes.

The drain turns each native record into a span and metrics with per-(op, group, size, rank,
device) templates (``_CollectiveRecording._emit_native``). The reference is the path every record took
before, and the Python hook's records still take: ``_native_entry`` + ``_emit`` with
``_native_device_timing``, its span written through the SDK's own API path
(``start_span``/``end``) or through ``FinishedSpans``' short path. Generated records (every
field the C++ hook fills: collectives and point-to-point with their group ranks, receives
from any source before they are sequenced, failures, enqueue-only and device-timed records,
parents local or remote, sampled or not, with trace state, links with and without attributes,
some invalid) go through the real ``_drain_once`` of two states with their own providers and
the same id sequence; every exported span field (attributes in order) and every metric point
(counts, sums, buckets, min, max, exemplars' values and ids) must be equal (the SDK's counter
exemplar reservoir draws from ``random``: seeded the same for both). Exact float
equality is right here: both paths compute the same expressions in the same order.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from opentelemetry import trace  # noqa: E402
from opentelemetry.metrics import NoOpMeterProvider  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator  # noqa: E402
from opentelemetry.sdk.trace.sampling import (  # noqa: E402
    ALWAYS_ON,
    DEFAULT_ON,
    ParentBased,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags  # noqa: E402
from opentelemetry.trace.span import TraceState  # noqa: E402

from otel_ext.instrumentation.finished_spans import FinishedSpans  # noqa: E402
from otel_ext.instrumentation.sdk_versions import sdk_checked  # noqa: E402
from otel_ext.instrumentation.torch import _distributed as D  # noqa: E402

SPECS = [
    D._OPS["allreduce_"],
    D._OPS["broadcast_"],
    D._OPS["send"],
    D._OPS["recv_"],
    D._OPS["recv_any_source_"],
    D._OPS["_allgather_base_"],
    D._OPS["barrier"],
]
SAMPLERS = {
    "default": DEFAULT_ON,
    "parent_on": ParentBased(ALWAYS_ON),
    "always_on": ALWAYS_ON,
    "ratio": TraceIdRatioBased(0.5),
}


class _Counting(IdGenerator):
    """Ids from a counter: both paths draw the same ids in the same order."""

    def __init__(self) -> None:
        self.n = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self.n) * 0x9E3779B97F4A7C15 % (1 << 64) or 1

    def generate_trace_id(self) -> int:
        return next(self.n) * 0x9E3779B97F4A7C15F39CC0605CEDC835 % (1 << 128) or 1


class _ApiOnly(trace.Tracer):
    """Forwards to an SDK tracer but is not one: ``FinishedSpans`` takes the API path."""

    def __init__(self, real: Any):
        self.real = real

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.real.start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.real.start_as_current_span(*args, **kwargs)


class _Hook:
    """Stands in for the native hook: ``drain`` hands the records over, in batches."""

    def __init__(self, records: list[tuple[Any, ...]], batch: int):
        self.records, self.batch = list(records), batch

    def drain(self, max_records: int, timeout_s: float) -> list[tuple[Any, ...]]:
        n = min(max_records, self.batch)
        out, self.records = self.records[:n], self.records[n:]
        return out

    def in_flight(self) -> int:
        return len(self.records)


def _links(op: str, group: str, seq: int) -> list[Link]:
    """A link provider: none, one or two links by (op, group, seq); some invalid."""
    n = (seq * 3 + len(op) + len(group)) % 4
    if n == 0:
        return []
    if n == 3:
        return [Link(SpanContext(0, 0, is_remote=True))]  # invalid: the API path
    return [
        Link(
            SpanContext(seq + 11, (seq + i) * 7 + 1, is_remote=True, trace_flags=TraceFlags(1)),
            {"peer.seq": seq, "i": i} if i else None,
        )
        for i in range(n)
    ]


def _state(sampler: str, links: bool, metrics: bool, api: bool) -> tuple[Any, ...]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider(
        sampler=SAMPLERS[sampler],
        resource=Resource.create({"service.name": "drain-identity"}),
        id_generator=_Counting(),
    )
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader]) if metrics else NoOpMeterProvider()
    state = D._CollectiveRecording(
        tracer_provider=tp, meter_provider=mp, link_provider=_links if links else None,
        device=None, host_id="host-a", timer=None, capacity=64,
    )  # fmt: skip
    state.native_specs = SPECS
    state.default_name = "0"
    if api:
        state.spans = FinishedSpans(_ApiOnly(state.tracer))
        assert not state.spans.short_path
    return state, tp, exporter, reader


def _span_fields(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "context": span.context,
        "parent": span.parent,
        "kind": span.kind,
        "attributes": list(span.attributes.items()),
        "links": [(link.context, dict(link.attributes or {})) for link in span.links],
        "events": list(span.events),
        "status": (span.status.status_code, span.status.description),
        "start": span.start_time,
        "end": span.end_time,
        "resource": dict(span.resource.attributes),
        "scope": (span.instrumentation_scope.name, span.instrumentation_scope.version),
        "dropped": (span.dropped_attributes, span.dropped_links),
    }


def _points(reader: InMemoryMetricReader) -> dict[str, Any]:
    """Every metric point without its collection times (exemplars: value, ids, attributes)."""
    data = reader.get_metrics_data()
    out: dict[str, Any] = {}
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                rows = []
                for p in metric.data.data_points:
                    row = {k: v for k, v in vars(p).items() if "time" not in k and k != "exemplars"}
                    row["attributes"] = dict(p.attributes)
                    row["exemplars"] = [
                        (e.value, e.span_id, e.trace_id, dict(e.filtered_attributes or {}))
                        for e in p.exemplars
                    ]
                    rows.append(row)
                rows.sort(key=lambda r: sorted(r["attributes"].items()))
                out[metric.name] = (metric.unit, rows)
    return out


_parents = st.one_of(
    st.none(),
    st.tuples(
        st.integers(min_value=1, max_value=(1 << 128) - 1),
        st.integers(min_value=1, max_value=(1 << 64) - 1),
        st.booleans(),  # sampled
        st.booleans(),  # remote
        st.sampled_from([None, "vendor=a1", "a=1,b=2"]),
    ),
)


@st.composite
def _record(draw: Any, contexts: list[Any]) -> tuple[Any, ...]:
    idx = draw(st.integers(0, len(SPECS) - 1))
    spec = SPECS[idx]
    gsize = draw(st.integers(1, 8))
    grank = draw(st.integers(0, gsize - 1))
    p2p = spec.op in ("send", "recv")
    any_source = p2p and spec.peer_at is None
    seq = -1 if any_source and draw(st.booleans()) else draw(st.integers(0, 10**6))
    src = dst = peer = None
    if p2p and seq >= 0:
        peer = draw(st.integers(0, gsize - 1))
        src, dst = (grank, peer) if spec.send else (peer, grank)
    t0 = draw(st.integers(min_value=1, max_value=2**62))
    t1 = t0 + draw(st.integers(0, 10**7))
    end = draw(
        st.one_of(st.just(0), st.integers(min_value=max(t0 - 10**5, 0), max_value=t1 + 10**9))
    )
    device_ns = draw(st.sampled_from([None, -1, 0]) | st.integers(0, 10**9))
    failed = draw(st.booleans()) and draw(st.booleans())
    return (
        idx,
        draw(st.sampled_from(["0", "3", "tp:1"])),
        gsize,
        grank,
        seq,
        src,
        dst,
        peer,
        draw(st.integers(0, 2**40)),
        draw(st.sampled_from([None, "float32", "bfloat16"])),
        draw(st.sampled_from([None, "cpu", "cuda:1", "meta"])),
        None if p2p else draw(st.one_of(st.none(), st.booleans())),
        t0,
        t1,
        end,
        draw(st.one_of(st.none(), st.floats(0, 1e9, allow_nan=False))),
        draw(st.booleans()),
        "DistBackendError" if failed else None,
        draw(st.sampled_from([None, "", "peer reset"])) if failed else None,
        draw(st.sampled_from(contexts)),
        device_ns,
    )


def _contexts(parents: list[Any]) -> list[Any]:
    out: list[Any] = [None]
    for tid, sid, sampled, remote, state in parents:
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        ts = TraceState.from_header([state]) if state else None
        span = NonRecordingSpan(
            SpanContext(tid, sid, is_remote=remote, trace_flags=flags, trace_state=ts)
        )
        out.append(trace.set_span_in_context(span))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("reference", ["api spans", "short spans"])
def test_templates_make_what_the_reference_path_makes(reference: str, data: Any) -> None:
    parents = data.draw(st.lists(_parents.filter(lambda p: p is not None), max_size=3))
    contexts = _contexts(parents)
    records = data.draw(st.lists(_record(contexts), min_size=1, max_size=30))
    sampler = data.draw(st.sampled_from(sorted(SAMPLERS)))
    links = data.draw(st.booleans())
    batch = data.draw(st.integers(1, 12))  # counters are added once per drain batch
    got = []
    for templates in (False, True):
        state, tp, exporter, reader = _state(
            sampler, links, metrics=True, api=not templates and reference == "api spans"
        )
        state.native_templates = templates
        state.native = _Hook(records, batch)
        random.seed(16)  # the SDK's counter exemplar reservoir samples with random.randrange
        while state._drain_once(0.0):
            pass
        got.append(([_span_fields(s) for s in exporter.get_finished_spans()], _points(reader)))
        state.native = None
        state.close(timeout=5)
        tp.shutdown()
    (ref_spans, ref_points), (spans, points) = got
    assert spans == ref_spans
    assert points == ref_points
    sampled = [s for s in spans if s["context"].trace_flags.sampled]
    if sampler in ("default", "always_on") and all(r[19] is None for r in records):
        assert len(sampled) == len(records)  # roots: every one sampled and exported


def test_the_reference_sees_what_the_templates_see_on_a_fixed_mix() -> None:
    """A fixed mix (one of each kind of record) as a plain check, with its expected spans."""
    ctx = _contexts([(5, 9, True, False, "v=1")])[1]
    records = [
        (0, "0", 4, 1, 3, None, None, None, 4096, "float32", "cpu", True,
         1000, 1500, 5000, 10.0, False, None, None, ctx, -1),
        (2, "3", 2, 0, 7, 0, 1, 1, 64, "float32", "cpu", None,
         2000, 2100, 2600, None, False, None, None, None, -1),
        (0, "0", 4, 1, 4, None, None, None, 8, None, "cuda:1", False,
         3000, 3100, 9000, 20.0, False, None, None, ctx, 4000),
        (1, "0", 4, 1, 5, None, None, None, 8, None, "cpu", False,
         4000, 4200, 4200, None, True, "DistBackendError", "reset", ctx, -1),
        (4, "0", 4, 1, -1, None, None, None, 8, "float32", "cpu", None,
         5000, 5100, 5300, 1.0, False, None, None, None, -1),
    ]  # fmt: skip
    out = []
    for templates in (False, True):
        state, tp, exporter, reader = _state("default", True, metrics=True, api=not templates)
        state.native_templates = templates
        state.native = _Hook(records, 4096)
        random.seed(16)
        assert state._drain_once(0.0) == len(records)
        out.append(([_span_fields(s) for s in exporter.get_finished_spans()], _points(reader)))
        state.native = None
        state.close(timeout=5)
        tp.shutdown()
    assert out[0] == out[1]
    spans = {dict(s["attributes"]).get("accel.collective.id", "any"): s for s in out[1][0]}
    assert sorted(spans) == ["3:0->1:7", "any", "default_pg:3", "default_pg:4", "default_pg:5"]
    dev = dict(spans["default_pg:4"]["attributes"])
    assert (dev["accel.collective.timing"], dev["accel.clock.domain"]) == (
        "device",
        "cuda:1/nccl-work-events",
    )
    assert (spans["default_pg:4"]["start"], spans["default_pg:4"]["end"]) == (5000, 9000)
    failed = spans["default_pg:5"]
    assert failed["status"][1] == "reset" and failed["status"][0].name == "ERROR"
    assert dict(failed["attributes"])["accel.collective.timing"] == "enqueue"
    assert spans["default_pg:3"]["parent"].span_id == 9
    assert spans["default_pg:3"]["context"].trace_state.to_header() == "v=1"
    # the histogram counts every record but the failed one
    unit, rows = out[1][1]["accel.collective.duration"]
    assert unit == "s"
    assert sum(r["count"] for r in rows) == len(records) - 1


def test_the_spans_of_a_configured_provider_take_the_short_path(tmp_path: Any) -> None:
    """``configure()``'s processors (the bounded batch processor, the active-span publisher)
    need no ``on_start`` for a span written after it ended: the drain's spans take the short
    path there too (the batch processor's own no-op ``on_start`` once sent them the API way)."""
    from otel_ext.exporters import configure

    telemetry = configure(
        traces_exporter="file", metrics_exporter="none", file_dir=tmp_path, set_global=False,
        env={},
    )  # fmt: skip
    try:
        spans = FinishedSpans(telemetry.tracer_provider.get_tracer("otel_ext.test"))
        assert spans.short_path is sdk_checked()
    finally:
        telemetry.shutdown()
