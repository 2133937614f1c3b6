"""OTLP-JSON file exporters and reader: round trip, Collector encoding, rotation, gzip, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from otel_ext.errors import InputError
from otel_ext.exporters import (
    OtlpJsonFileMetricExporter,
    OtlpJsonFileSpanExporter,
    read_metrics,
    read_otlp_json,
    read_spans,
)

_KINDS = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}

keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
scalars = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
values = st.one_of(
    scalars,
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4).map(tuple),
    st.lists(st.text(max_size=5), max_size=4).map(tuple),
)
attribute_dicts = st.dictionaries(keys, values, max_size=6)
span_specs = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.text(max_size=30),
            "start": st.integers(min_value=0, max_value=2**62),
            "duration": st.integers(min_value=0, max_value=10**12),
            "attributes": attribute_dicts,
            "kind": st.sampled_from(list(_KINDS)),
            "events": st.lists(
                st.tuples(st.text(max_size=10), st.integers(0, 2**62), attribute_dicts), max_size=3
            ),
            "error": st.booleans(),
            "child": st.booleans(),
        }
    ),
    min_size=1,
    max_size=8,
)


def _emit(specs, exporter) -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "rt", "accel.host.id": "host0"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope.name", "1.2.3")
    previous = None
    for spec in specs:
        links = [Link(previous.get_span_context(), {"why": "prev"})] if previous is not None else []
        span = tracer.start_span(
            spec["name"],
            kind=spec["kind"],
            attributes=spec["attributes"],
            start_time=spec["start"],
            links=links,
        )
        for name, time_ns, attrs in spec["events"]:
            span.add_event(name, attrs, timestamp=time_ns)
        if spec["error"]:
            span.set_status(Status(StatusCode.ERROR, "broke"))
        if spec["child"]:
            from opentelemetry.trace import set_span_in_context

            child = tracer.start_span(
                "child", context=set_span_in_context(span), start_time=spec["start"]
            )
            child.end(end_time=spec["start"] + 1)
        span.end(end_time=spec["start"] + spec["duration"])
        previous = span
    provider.shutdown()
    return list(memory.get_finished_spans())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs=span_specs, gz=st.booleans())
def test_round_trip_gives_back_the_same_spans(tmp_path_factory, specs, gz):
    folder = tmp_path_factory.mktemp("rt")
    exporter = OtlpJsonFileSpanExporter(folder / "traces.jsonl", gzip=gz, max_bytes=2000)
    sent = _emit(specs, exporter)
    got = {record.span_id: record for record in read_spans(exporter.path)}
    assert len(got) == len(sent)
    for span in sent:
        record = got[format(span.context.span_id, "016x")]
        assert record.trace_id == format(span.context.trace_id, "032x")
        assert record.parent_span_id == (
            format(span.parent.span_id, "016x") if span.parent else None
        )
        assert record.name == span.name
        assert record.kind == _KINDS[span.kind]
        assert (record.start_ns, record.end_ns) == (span.start_time, span.end_time)
        assert record.attributes == dict(span.attributes)
        assert record.resource == dict(span.resource.attributes)
        assert (record.scope_name, record.scope_version) == ("scope.name", "1.2.3")
        assert [(e.name, e.time_ns, e.attributes) for e in record.events] == [
            (e.name, e.timestamp, dict(e.attributes)) for e in span.events
        ]
        assert [(link.trace_id, link.span_id, link.attributes) for link in record.links] == [
            (
                format(link.context.trace_id, "032x"),
                format(link.context.span_id, "016x"),
                dict(link.attributes),
            )
            for link in span.links
        ]
        assert (
            record.status_code
            == {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}[span.status.status_code]
        )
        assert record.status_message == (span.status.description or "")


def test_encoding_is_the_collector_file_exporter_encoding(tmp_path):
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
    (span,) = _emit(
        [
            {
                "name": "k",
                "start": 1_700_000_000_123_456_789,
                "duration": 5,
                "attributes": {"n": 7},
                "kind": SpanKind.CLIENT,
                "events": [],
                "error": True,
                "child": False,
            }
        ],
        exporter,
    )
    (line,) = (tmp_path / "traces.jsonl").read_text().splitlines()
    request = json.loads(line)
    encoded = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert encoded["traceId"] == format(span.context.trace_id, "032x")
    assert encoded["spanId"] == format(span.context.span_id, "016x")
    assert encoded["startTimeUnixNano"] == "1700000000123456789"
    assert encoded["endTimeUnixNano"] == "1700000000123456794"
    assert encoded["kind"] == 3
    assert encoded["status"] == {"code": 2, "message": "broke"}
    assert encoded["attributes"] == [{"key": "n", "value": {"intValue": "7"}}]
    assert request["resourceSpans"][0]["scopeSpans"][0]["scope"] == {
        "name": "scope.name",
        "version": "1.2.3",
    }


# A line as the OpenTelemetry Collector's file exporter writes it (pdata JSON marshaler).
COLLECTOR_LINE = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},'
    '"scopeSpans":[{"scope":{"name":"io.opentelemetry.contrib"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",'
    '"spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173","name":"I\'m a server span",'
    '"kind":2,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000",'
    '"attributes":[{"key":"my.span.attr","value":{"stringValue":"some value"}}],'
    '"events":[{"timeUnixNano":"1544712660500000000","name":"ev"}],'
    '"links":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b170"}],'
    '"status":{"code":1}}]}]}]}'
)


def test_reads_collector_written_files_and_base64_ids(tmp_path):
    (tmp_path / "collector.json").write_text(COLLECTOR_LINE + "\n")
    base64_line = COLLECTOR_LINE.replace(
        '"5b8efff798038103d269b633813fc60c"', '"W47/95gDgQPSabYzgT/GDA=="'
    )
    with gzip.open(tmp_path / "other.jsonl.gz", "wt") as handle:
        handle.write(base64_line + "\n")
    records = list(read_spans(tmp_path))
    assert len(records) == 2
    for record in records:
        assert record.trace_id == "5b8efff798038103d269b633813fc60c"
        assert record.parent_span_id == "eee19b7ec3c1b173"
        assert record.kind == 2 and record.status_code == 1
        assert record.start_ns == 1544712660000000000
        assert record.attributes == {"my.span.attr": "some value"}
        assert record.resource == {"service.name": "api"}
        assert record.events[0].time_ns == 1544712660500000000
        assert record.links[0].span_id == "eee19b7ec3c1b170"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json\n", "not JSON"),
        ('{"something":1}\n', "not an OTLP request"),
        (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x"}]}]}]}\n',
            "missing field 'traceId'",
        ),
        (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"00"}]}]}]}\n',
            "neither hex nor base64",
        ),
    ],
)
def test_malformed_input_names_file_line_and_problem(tmp_path, content, problem):
    file = tmp_path / "bad.jsonl"
    file.write_text(COLLECTOR_LINE + "\n\n" + content)
    with pytest.raises(InputError) as info:
        list(read_spans(file))
    message = str(info.value)
    assert str(file) in message and "line 3" in message and problem in message


def test_missing_input_raises(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        list(read_otlp_json(tmp_path / "nothing.jsonl"))


def test_rotation_partial_files_and_final_names(tmp_path):
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl", max_bytes=1500)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for index in range(31):
        with tracer.start_as_current_span(f"s{index}", attributes={"pad": "x" * 100}):
            pass
    # While running: complete numbered files plus one growing partial file.
    names = sorted(p.name for p in tmp_path.iterdir())
    partials = [n for n in names if n.endswith(".partial")]
    assert len(partials) <= 1 and all(n.startswith("traces.jsonl.") for n in partials)
    numbered = [n for n in names if not n.endswith(".partial")]
    assert numbered and all(n.startswith("traces.") and n.endswith(".jsonl") for n in numbered)
    assert "traces.jsonl" not in names
    seen_while_running = [r.name for r in read_spans(tmp_path / "traces.jsonl")]
    with_partial = [r.name for r in read_spans(tmp_path / "traces.jsonl", include_partial=True)]
    assert set(seen_while_running) < set(with_partial) or not partials
    provider.shutdown()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert (tmp_path / "traces.jsonl").exists() == bool(partials)
    assert sorted(r.name for r in read_spans(tmp_path / "traces.jsonl")) == sorted(
        s.name for s in memory.get_finished_spans()
    )
    for file in tmp_path.iterdir():
        assert file.stat().st_size < 1500 + 1000


def test_an_earlier_run_is_never_overwritten(tmp_path):
    for run in range(2):
        exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
        _emit(
            [
                {
                    "name": f"run{run}",
                    "start": 1,
                    "duration": 1,
                    "attributes": {},
                    "kind": SpanKind.INTERNAL,
                    "events": [],
                    "error": False,
                    "child": False,
                }
            ],
            exporter,
        )
    assert sorted(r.name for r in read_spans(tmp_path / "traces.jsonl")) == ["run0", "run1"]


def test_gzip_partial_file_is_readable_up_to_its_last_line(tmp_path):
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl", gzip=True)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("one"):
        pass
    assert [r.name for r in read_spans(tmp_path, include_partial=True)] == ["one"]
    provider.shutdown()
    assert exporter.path.name == "traces.jsonl.gz"
    assert [r.name for r in read_spans(exporter.path)] == ["one"]


def test_metrics_round_trip_with_exemplar_ids(tmp_path):
    exporter = OtlpJsonFileMetricExporter(tmp_path / "metrics.jsonl")
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource({"accel.host.id": "h"}), metric_readers=[reader])
    meter = provider.get_meter("m", "0.1")
    meter.create_counter("c", unit="{item}").add(5, {"k": "v"})
    meter.create_histogram("h", unit="s").record(0.3)
    meter.create_gauge("g").set(2.5)
    tracer_provider = TracerProvider()
    with tracer_provider.get_tracer("t").start_as_current_span("with-exemplar") as span:
        meter.create_histogram("h2").record(7)
        span_id = format(span.get_span_context().span_id, "016x")
    data = reader.get_metrics_data()
    exporter.export(data)
    exporter.shutdown()
    points = {p.name: p for p in read_metrics(tmp_path / "metrics.jsonl")}
    assert points["c"].value == 5 and points["c"].kind == "sum" and points["c"].is_monotonic
    assert points["c"].attributes == {"k": "v"} and points["c"].unit == "{item}"
    assert points["c"].resource == {"accel.host.id": "h"} and points["c"].scope_name == "m"
    assert points["g"].value == 2.5 and points["g"].kind == "gauge"
    assert points["h"].count == 1 and points["h"].sum == pytest.approx(0.3)
    assert sum(points["h"].bucket_counts) == 1 and points["h"].explicit_bounds
    assert [e.span_id for e in points["h2"].exemplars] == [span_id]
    provider.shutdown()
    tracer_provider.shutdown()


def test_export_failure_is_reported_not_raised(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    exporter = OtlpJsonFileSpanExporter(blocker / "traces.jsonl")  # parent is a file: cannot write
    from opentelemetry.sdk.trace.export import SpanExportResult

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span("x"):
        pass
    assert exporter.export(memory.get_finished_spans()) is SpanExportResult.FAILURE
    exporter.shutdown()


def test_files_folder_reading_skips_perfetto_and_sorts_naturally(tmp_path: Path):
    for name in ("traces.10.jsonl", "traces.2.jsonl", "traces.jsonl"):
        (tmp_path / name).write_text(COLLECTOR_LINE.replace("I'm a server span", name) + "\n")
    (tmp_path / "trace.perfetto.json").write_text('{"traceEvents":[]}')
    assert [r.name for r in read_spans(tmp_path)] == [
        "traces.2.jsonl",
        "traces.10.jsonl",
        "traces.jsonl",
    ]
    assert [r.name for r in read_spans(tmp_path / "traces.jsonl")] == [
        "traces.2.jsonl",
        "traces.10.jsonl",
        "traces.jsonl",
    ]


# -- the direct encoder against the reference (protobuf + MessageToDict) -------------------
#
# Spans and metrics are built directly as SDK objects, so they can carry everything the
# reference encoder accepts: nested arrays and maps, bytes, None, NaN and infinities,
# remote parents, trace state, dropped counts, resources and scopes shared or merely equal.

from enum import IntEnum  # noqa: E402

from opentelemetry.attributes import BoundedAttributes  # noqa: E402
from opentelemetry.sdk.metrics._internal.exemplar import Exemplar  # noqa: E402
from opentelemetry.sdk.metrics._internal.point import Buckets  # noqa: E402
from opentelemetry.sdk.metrics.export import (  # noqa: E402
    AggregationTemporality,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.trace import Event, ReadableSpan  # noqa: E402
from opentelemetry.sdk.util import BoundedList  # noqa: E402
from opentelemetry.sdk.util.instrumentation import InstrumentationScope  # noqa: E402
from opentelemetry.trace import SpanContext, TraceFlags, TraceState  # noqa: E402

from otel_ext.exporters._fast_json import UnsupportedValue, metrics_to_json, spans_to_json  # noqa: E402
from otel_ext.exporters._otlp_json import (  # noqa: E402
    encode_metrics_json,
    encode_spans_json,
    reference_encode_metrics_json,
    reference_encode_spans_json,
    reference_metrics_to_otlp_dict,
    reference_spans_to_otlp_dict,
)

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_u64 = st.integers(min_value=0, max_value=2**64 - 1)
_doubles = st.one_of(
    st.floats(), st.sampled_from([0.0, -0.0, 1.0, 1e300, 5e-324, float("inf"), float("-inf")])
)
_any_scalars = st.one_of(_text, st.booleans(), _i64, _doubles, st.binary(max_size=6), st.none())
_any_values = st.recursive(
    _any_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_text, inner, max_size=3),
    ),
    max_leaves=8,
)
_attribute_maps = st.one_of(
    st.none(),
    st.dictionaries(_text, _any_values, max_size=4),
    # SDK-cleaned attributes, some dropped at the limit
    st.builds(
        lambda items, limit: BoundedAttributes(maxlen=limit, attributes=items, immutable=False),
        st.dictionaries(
            st.text(min_size=1, max_size=6),
            st.one_of(_text, _i64, _doubles, st.lists(_i64, max_size=3).map(tuple)),
            max_size=5,
        ),
        st.integers(0, 5),
    ),
)
_resources = st.builds(
    Resource, st.dictionaries(_text, _any_scalars, max_size=3), st.sampled_from([None, "", "s/1"])
)
_scopes = st.one_of(
    st.none(),
    st.builds(
        InstrumentationScope,
        _text,
        st.sampled_from([None, "", "1.2"]),
        st.sampled_from([None, "", "https://s/1"]),
        st.one_of(st.none(), st.dictionaries(_text, _any_scalars, max_size=2)),
    ),
)
_trace_states = st.sampled_from(
    [None, TraceState(), TraceState([("a", "1")]), TraceState([("vendor@x", "v-1"), ("b", "2")])]
)
_contexts = st.builds(
    lambda trace_id, span_id, remote, state: SpanContext(
        trace_id, span_id, is_remote=remote, trace_flags=TraceFlags(1), trace_state=state
    ),
    st.integers(0, 2**128 - 1),
    _u64,
    st.booleans(),
    _trace_states,
)
_times = st.one_of(st.none(), st.just(0), _u64)


def _bounded_list(items, limit):
    bounded = BoundedList(limit)
    bounded.extend(items)
    return bounded


def _sequences(elements):
    return st.one_of(
        st.lists(elements, max_size=3).map(tuple),
        st.builds(_bounded_list, st.lists(elements, max_size=4), st.integers(0, 3)),
    )


_events = st.builds(Event, _text, _attribute_maps, _u64)
_links = st.builds(Link, _contexts, _attribute_maps)
_statuses = st.one_of(
    st.builds(Status, st.sampled_from(list(StatusCode)), st.one_of(st.none(), _text)),
)


@st.composite
def _span_batches(draw):
    resources = draw(st.lists(_resources, min_size=1, max_size=3))
    # an equal but distinct resource object must share its group, as in the SDK encoder
    resources.append(Resource(dict(resources[0].attributes), resources[0].schema_url))
    scopes = draw(st.lists(_scopes, min_size=1, max_size=3))
    spans = []
    for _ in range(draw(st.integers(0, 6))):
        spans.append(
            ReadableSpan(
                name=draw(_text),
                context=draw(_contexts),
                parent=draw(st.one_of(st.none(), _contexts)),
                resource=draw(st.sampled_from(resources)),
                attributes=draw(_attribute_maps),
                events=draw(_sequences(_events)),
                links=draw(_sequences(_links)),
                kind=draw(st.sampled_from(list(SpanKind))),
                status=draw(_statuses),
                start_time=draw(_times),
                end_time=draw(_times),
                instrumentation_scope=draw(st.sampled_from(scopes)),
            )
        )
    return spans


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(spans=_span_batches())
def test_direct_span_encoding_is_the_reference_encoding(spans):
    fast = spans_to_json(spans)  # the direct path itself, no fallback
    reference = reference_encode_spans_json(spans)
    assert json.loads(fast) == json.loads(reference)
    assert (fast + "\n").encode("utf-8") == reference  # same bytes, key order included
    assert reference_spans_to_otlp_dict(spans) == json.loads(fast)


def test_memoised_attributes_keep_types_and_signed_zeros_apart():
    """The encoder's memo of repeated attribute values (str, bool, int) never answers for an
    equal value of another type (``True == 1``), and floats stay out of it (``0.0 == -0.0``
    print differently): the same spans encoded twice, memo warm, are the reference's bytes."""
    ctx = SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(1))
    maps = [{"k": True}, {"k": 1}, {"k": 1.0}, {"k": "1"}, {"k": 0.0}, {"k": -0.0}, {"k": False},
            {"k": 0}, {"k": [1, True]}, {"j": 1, "k": 1}]  # fmt: skip
    spans = [
        ReadableSpan(name="s", context=ctx, attributes=m, start_time=1, end_time=2) for m in maps
    ]
    for _ in range(2):
        assert (spans_to_json(spans) + "\n").encode("utf-8") == reference_encode_spans_json(spans)


def _points(draw, make):
    return draw(st.lists(st.builds(make), max_size=3))


_exemplars = st.lists(
    st.builds(
        Exemplar,
        _attribute_maps,
        st.one_of(_i64, _doubles),
        _u64,
        st.one_of(st.none(), _u64),
        st.one_of(st.none(), st.integers(0, 2**128 - 1)),
    ),
    max_size=2,
)
_number_points = st.builds(
    NumberDataPoint, _attribute_maps, _u64, _u64, st.one_of(_i64, _doubles), _exemplars
)
_optional_double = st.one_of(st.none(), _doubles, st.integers(-(2**40), 2**40))
_histogram_points = st.builds(
    HistogramDataPoint,
    _attribute_maps,
    _u64,
    _u64,
    _u64,
    _optional_double,
    st.lists(_u64, max_size=4),
    st.lists(st.one_of(_doubles, st.integers(-100, 100)), max_size=4),
    _optional_double,
    _optional_double,
    _exemplars,
)
_buckets = st.builds(Buckets, st.integers(-(2**31), 2**31 - 1), st.lists(_u64, max_size=3))
_exponential_points = st.builds(
    ExponentialHistogramDataPoint,
    _attribute_maps,
    _u64,
    _u64,
    _u64,
    _optional_double,
    st.integers(-(2**31), 2**31 - 1),
    _u64,
    _buckets,
    _buckets,
    st.integers(0, 2**32 - 1),
    _optional_double,
    _optional_double,
    _exemplars,
)
_temporalities = st.sampled_from(list(AggregationTemporality))
_metric_data = st.one_of(
    st.builds(Gauge, st.lists(_number_points, max_size=3)),
    st.builds(Sum, st.lists(_number_points, max_size=3), _temporalities, st.booleans()),
    st.builds(Histogram, st.lists(_histogram_points, max_size=2), _temporalities),
    st.builds(ExponentialHistogram, st.lists(_exponential_points, max_size=2), _temporalities),
)
_metrics = st.builds(
    Metric, _text, st.one_of(st.none(), _text), st.one_of(st.none(), _text), _metric_data
)
_non_null_scopes = _scopes.filter(lambda scope: scope is not None)


@st.composite
def _metrics_data(draw):
    resources = draw(st.lists(_resources, min_size=1, max_size=2))
    resources.append(resources[0])  # a repeated resource replaces the earlier entry's data
    scopes = draw(st.lists(_non_null_scopes, min_size=1, max_size=2))
    return MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=draw(st.sampled_from(resources)),
                scope_metrics=[
                    ScopeMetrics(
                        scope=draw(st.sampled_from(scopes)),
                        metrics=draw(st.lists(_metrics, max_size=3)),
                        schema_url=draw(st.sampled_from(["", "ignored"])),
                    )
                    for _ in range(draw(st.integers(0, 2)))
                ],
                schema_url="ignored",
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(data=_metrics_data())
def test_direct_metrics_encoding_is_the_reference_encoding(data):
    fast = metrics_to_json(data)  # the direct path itself, no fallback
    reference = reference_encode_metrics_json(data)
    assert json.loads(fast) == json.loads(reference)
    assert (fast + "\n").encode("utf-8") == reference
    assert reference_metrics_to_otlp_dict(data) == json.loads(fast)


class _Color(IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, _Color.RED, bytearray(b"ab"), {1: "non-string key"}, (1, 2**70)],
    ids=["u64", "below-i64", "int-enum", "bytearray", "int-key", "big-in-array"],
)
def test_unsupported_values_fall_back_to_the_reference(value, caplog):
    span = ReadableSpan(
        name="s",
        context=SpanContext(1, 2, is_remote=False),
        resource=Resource({"r": 1}),
        attributes={"odd": value, "ok": "yes"},
        start_time=1,
        end_time=2,
        instrumentation_scope=InstrumentationScope("scope"),
    )
    with pytest.raises(UnsupportedValue):
        spans_to_json([span])
    assert encode_spans_json([span]) == reference_encode_spans_json([span])
    assert json.loads(encode_spans_json([span]))["resourceSpans"][0]["scopeSpans"][0]["spans"][0][
        "attributes"
    ][-1] == {"key": "ok", "value": {"stringValue": "yes"}}


def test_metrics_that_the_reference_rejects_still_fail_the_export(tmp_path):
    bad = Metric("m", None, None, Gauge([NumberDataPoint(None, 0, 1, "not a number")]))
    data = MetricsData(
        [ResourceMetrics(Resource({}), [ScopeMetrics(InstrumentationScope("s"), [bad], "")], "")]
    )
    with pytest.raises(UnsupportedValue):
        metrics_to_json(data)
    with pytest.raises(Exception):  # noqa: B017 - whatever the SDK encoder raises
        encode_metrics_json(data)
    exporter = OtlpJsonFileMetricExporter(tmp_path / "metrics.jsonl")
    assert exporter.export(data).name == "FAILURE"
    exporter.shutdown()


def test_sdk_pipeline_spans_encode_identically_on_both_paths(tmp_path):
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
    spans = _emit(
        [
            {
                "name": f"s{i}",
                "start": 1_700_000_000_000_000_000 + i,
                "duration": 10,
                "attributes": {"i": i, "f": 0.5, "b": True, "a": ("x", "y")},
                "kind": kind,
                "events": [("e", 1_700_000_000_000_000_005, {"k": 1.5})],
                "error": i % 2 == 0,
                "child": True,
            }
            for i, kind in enumerate(_KINDS)
        ],
        exporter,
    )
    assert encode_spans_json(spans) == reference_encode_spans_json(spans)
    lines = (tmp_path / "traces.jsonl").read_bytes().splitlines(keepends=True)
    assert b"".join(lines) == b"".join(reference_encode_spans_json([s]) for s in spans)


def test_sdk_pipeline_metrics_encode_identically_on_both_paths():
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource({"accel.host.id": "h"}), metric_readers=[reader])
    meter = provider.get_meter("m", "0.1")
    histogram = meter.create_histogram("h", unit="s")
    counter = meter.create_counter("c")
    for index in range(5):  # several points share one histogram's bounds object
        histogram.record(0.5 * index, {"chip": index})
        counter.add(index, {"chip": index})
    meter.create_up_down_counter("u").add(-2.5)
    meter.create_gauge("g").set(7)
    data = reader.get_metrics_data()
    provider.shutdown()
    fast = metrics_to_json(data)
    assert (fast + "\n").encode("utf-8") == reference_encode_metrics_json(data)
    (histogram_metric,) = [
        m
        for m in json.loads(fast)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        if m["name"] == "h"
    ]
    assert len(histogram_metric["histogram"]["dataPoints"]) == 5
