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

from exporters import (
    OtlpJsonFileMetricExporter,
    OtlpJsonFileSpanExporter,
    read_metrics,
    read_otlp_json,
    read_spans,
)
from otel_ext.errors import InputError

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
