"""OTLP-JSON span columns against the SDK's protobuf messages they were encoded from.

The files are built with the real OpenTelemetry SDK and its protobuf encoder, and written as
our exporter writes them (hex ids), as ``google.protobuf.json_format`` writes them (base64
ids) and as that mapping with hex ids, lines of each kind mixed in one file. The reference is
read from the protobuf messages themselves, not from the JSON. The table must be the same
whatever the chunk size, the pieces the bytes arrive in, the threads, and with or without
the compiled extractor; bad input gives the same records named on every path.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import require
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_ext.analysis.loaders.spans as spans_mod
from otel_ext.analysis.loaders import load_file
from otel_ext.analysis.loaders._common import LoadContext
from otel_ext.analysis.loaders.spans import SpanRows, load_otlp_traces_pieces
from otel_ext.analysis.table import NUMERIC_COLUMNS, STRING_COLUMNS, EventTable
from otel_ext.errors import InputError
from otel_ext.exporters import read_spans
from otel_ext.semconv import attributes as A
from otel_ext.semconv import spans as S

_KEYS = [A.ACCEL_RANK, A.ACCEL_KERNEL_STREAM, A.ACCEL_COLLECTIVE_SEQ, A.ACCEL_COLLECTIVE_BYTES,
         A.ACCEL_LINK_BYTES, A.ACCEL_DEVICE_ID, A.ACCEL_HOST_ID, A.ACCEL_COLLECTIVE_OP,
         A.ACCEL_LAYER_FLOPS, A.ACCEL_KERNEL_BYTES, A.ACCEL_KERNEL_NAME, A.ACCEL_KERNEL_KIND,
         A.ACCEL_LAYER_NAME, A.ACCEL_REQUEST_PHASE, A.ACCEL_LINK_ID, A.ACCEL_LINK_SRC,
         A.ACCEL_LINK_DST, A.ACCEL_COLLECTIVE_GROUP_SIZE, A.ACCEL_CLOCK_DOMAIN,
         "other.key"]  # fmt: skip
_NAMES = [S.SPAN_ACCEL_LAYER, S.SPAN_ACCEL_KERNEL, S.SPAN_ACCEL_COLLECTIVE,
          S.SPAN_ACCEL_LINK_TRANSFER, S.SPAN_ACCEL_REQUEST_PHASE, S.SPAN_ACCEL_CLOCK_SYNC,
          "user.span"]  # fmt: skip
#: SDK attribute values: every type the SDK takes (arrays of each scalar type included)
_SDK_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["compute", "memcpy", "communication", "gemm_kernel", "nccl_allreduce"]),
    st.booleans(),
    st.lists(st.integers(-5, 5), max_size=3).map(tuple),
    st.lists(st.text(max_size=3), max_size=2).map(tuple),
    st.lists(st.booleans(), max_size=2).map(tuple),
    st.lists(st.floats(-1e3, 1e3), max_size=2).map(tuple),
)
#: values the SDK cannot make, set on the protobuf message: a key-value list, bytes, nothing
_PB_ONLY = st.sampled_from(["kvlist", "bytes", "empty"])


def _pb_value(v: AnyValue) -> Any:
    """The Python value of a protobuf AnyValue, as the loaders give it (bytes: their base64
    text; arrays: lists; key-value lists: dicts)."""
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, which)


def _messages(
    specs: list[tuple[str, dict[str, Any], str | None]],
    resource: dict[str, Any],
    n_lines: int,
) -> list[tuple[Any, list[Any], bool]]:
    """``n_lines`` export requests of SDK spans made from ``specs``: (protobuf message, the
    SDK spans, whether a value the SDK cannot make was put on the message)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    t = 1_700_000_000_000_000_000
    with tracer.start_as_current_span("root", start_time=t, end_on_exit=False) as root:
        for i, (name, attrs, _odd) in enumerate(specs):
            span = tracer.start_span(name, attributes=attrs, start_time=t + i)
            span.end(end_time=t + 2 * i + 10)
        root.end(end_time=t + 10_000)
    provider.shutdown()
    finished = list(exporter.get_finished_spans())
    out = []
    for k in range(n_lines):
        part = finished[k::n_lines]
        if part:
            out.append((encode_spans(part), part, False))
    # values the SDK cannot make, put on the messages' spans in order
    extra = [s[2] for s in specs]
    i = 0
    for j, (msg, part, _) in enumerate(out):
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    kind = extra[i % len(extra)] if extra else None
                    i += 1
                    if kind is None:
                        continue
                    value = AnyValue()
                    if kind == "kvlist":
                        value.kvlist_value.values.append(
                            KeyValue(key="a", value=AnyValue(int_value=7))
                        )
                    elif kind == "bytes":
                        value.bytes_value = b"\x00\xffid"
                    sp.attributes.append(KeyValue(key=_KEYS[i % len(_KEYS)], value=value))
                    out[j] = (msg, part, True)
    return out


def _to_hex(d: dict[str, Any]) -> dict[str, Any]:
    for rs in d.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for f in ("traceId", "spanId", "parentSpanId"):
                    if f in sp:
                        sp[f] = base64.b64decode(sp[f]).hex()
    return d


def _line(msg: Any, encoding: str) -> bytes:
    d = MessageToDict(msg)
    if encoding == "hex":
        d = _to_hex(d)
    return json.dumps(d, separators=(",", ":")).encode()


def _expected(msgs: list[Any], path: str) -> EventTable:
    """The table read from the protobuf messages (the reference, span by span)."""
    rows = SpanRows(LoadContext(path))
    for msg in msgs:
        for rs in msg.resource_spans:
            res = {kv.key: _pb_value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    attrs = {**res, **{kv.key: _pb_value(kv.value) for kv in sp.attributes}}
                    rows.add(record="r", name=sp.name, attrs=attrs,
                             start_ns=sp.start_time_unix_nano, end_ns=sp.end_time_unix_nano,
                             trace_id=sp.trace_id.hex(),
                             span_id=int.from_bytes(sp.span_id, "big"),
                             parent_span_id=int.from_bytes(sp.parent_span_id, "big"))  # fmt: skip
    return rows.build({})


def _same(a: EventTable, b: EventTable) -> None:
    assert len(a) == len(b)
    for c in NUMERIC_COLUMNS:
        assert np.array_equal(a[c], b[c]), c
    for c in STRING_COLUMNS:
        if c != "source":
            assert a.decoded(c).tolist() == b.decoded(c).tolist(), c


def _pieces_load(data: bytes, *, cut: int, chunk: int, threads: int, whole: bool) -> Any:
    ctx = LoadContext("f", keep_going=True)
    src: Any = data if whole else [data[i : i + cut] for i in range(0, len(data), cut)]
    t = load_otlp_traces_pieces(src, ctx=ctx, max_line=1 << 30, threads=threads,
                                chunk_bytes=chunk)  # fmt: skip
    return t, [(s.record, s.reason) for s in ctx.skipped]


def _without_extension(data: bytes) -> Any:
    saved = spans_mod._cscan
    spans_mod._cscan = None
    try:
        return _pieces_load(data, cut=len(data) + 1, chunk=1 << 20, threads=1, whole=False)
    finally:
        spans_mod._cscan = saved


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(_NAMES),
            st.dictionaries(st.sampled_from(_KEYS), _SDK_VALUES, max_size=6),
            st.none() | _PB_ONLY,
        ),
        min_size=1,
        max_size=10,
    ),
    resource=st.dictionaries(
        st.sampled_from([A.ACCEL_RANK, A.ACCEL_HOST_ID, A.ACCEL_DEVICE_ID, A.ACCEL_KERNEL_NAME]),
        st.one_of(st.integers(-3, 40), st.text(max_size=5)),
        max_size=3,
    ),
    n_lines=st.integers(1, 4),
    encodings=st.lists(st.sampled_from(["ours", "base64", "hex"]), min_size=4, max_size=4),
    blank=st.booleans(),
    cut=st.integers(1, 5000),
    chunk=st.integers(1, 4000),
    threads=st.integers(1, 3),
)
def test_tables_equal_the_protobuf_messages(
    specs: list[tuple[str, dict[str, Any], str | None]],
    resource: dict[str, Any],
    n_lines: int,
    encodings: list[str],
    blank: bool,
    cut: int,
    chunk: int,
    threads: int,
) -> None:
    from otel_ext.exporters._otlp_json import encode_spans_json

    made = _messages(specs, resource, n_lines)
    msgs = [m for m, _, _ in made]
    lines = []
    for k, (msg, part, changed) in enumerate(made):
        enc = encodings[k]
        if enc == "ours" and not changed:  # our exporter, from the SDK spans themselves
            lines.append(encode_spans_json(part).rstrip(b"\n"))
            continue
        lines.append(_line(msg, "base64" if enc == "base64" else "hex"))
    data = (b"\n \n" if blank else b"\n").join(lines) + b"\n"
    expected = _expected(msgs, "f")
    whole, whole_skipped = _pieces_load(data, cut=len(data), chunk=1 << 30, threads=1, whole=True)
    _same(whole, expected)
    assert whole_skipped == []
    for is_whole in (True, False):
        got, skipped = _pieces_load(data, cut=cut, chunk=chunk, threads=threads, whole=is_whole)
        _same(got, expected)
        assert skipped == []
    ref, ref_skipped = _without_extension(data)
    _same(ref, expected)
    assert ref_skipped == []


def test_our_exporter_lines_read_by_the_extractor(tmp_path: Path) -> None:
    """Our exporter's own output takes the compiled path (hex ids) and equals the messages."""
    from otel_ext.exporters._otlp_json import encode_spans_json

    require(spans_mod._cscan is not None, "the compiled extractor (pip install -e .)")
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({A.ACCEL_HOST_ID: "h0"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for i in range(5):
        with tracer.start_as_current_span(
            S.SPAN_ACCEL_KERNEL,
            attributes={
                A.ACCEL_KERNEL_NAME: f"gemm{i}",
                A.ACCEL_RANK: i,
                A.ACCEL_KERNEL_FLOPS: 1.5 * i,
            },
        ):
            pass  # fmt: skip
    spans = list(exporter.get_finished_spans())
    line = encode_spans_json(spans)
    keys = tuple(k.encode() for k in spans_mod._wanted())
    res = spans_mod._cscan.scan_otlp_lines(line, keys, 1, 1 << 30)
    assert res[0] == 5 and res[13] == b""  # five spans read, no line left to the typed path
    got, _ = _pieces_load(line, cut=len(line), chunk=1 << 20, threads=1, whole=True)
    _same(got, _expected([encode_spans(spans)], "f"))
    f = tmp_path / "traces.jsonl"
    f.write_bytes(line)
    records = {int(r.span_id, 16): r for r in read_spans(f)}
    for i in range(len(got)):  # the exporters' reader and the table agree
        r = records[int(got["span_id"][i])]
        assert got.string("trace_id", i) == r.trace_id
        assert got.string("name", i) == r.attributes[A.ACCEL_KERNEL_NAME]
        assert int(got["start_ns"][i]) == r.start_ns and int(got["end_ns"][i]) == r.end_ns


def _span(i: int, start: int = 100, end: int = 200, span_id: str | None = None) -> dict[str, Any]:
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": span_id if span_id is not None else f"{i + 1:016x}",
        "name": S.SPAN_ACCEL_LAYER,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": A.ACCEL_RANK, "value": {"intValue": str(i)}}],
    }


def _req(spans: list[Any]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def _bad_file() -> bytes:
    """Good spans, a negative duration on a line the extractor reads, a bad id on a line it
    leaves to the typed decoder, a line that is not JSON, then good spans again."""
    return b"\n".join([
        _req([_span(0), _span(1)]),
        _req([_span(2), _span(3, start=300, end=250), _span(4)]),
        _req([_span(5), _span(6, span_id="not-an-id!")]),
        b'{"resourceSpans": [oops',
        _req([_span(7), _span(8)]),
    ]) + b"\n"  # fmt: skip


@pytest.mark.parametrize("chunk", [1, 64, 1 << 20])
@pytest.mark.parametrize("threads", [1, 2])
def test_bad_records_named_alike_on_every_path(tmp_path: Path, chunk: int, threads: int) -> None:
    data = _bad_file()
    ref_t, ref_skipped = _without_extension(data)
    assert [r for r, _ in ref_skipped] == ["line 2 span 3", "line 3 span 6", "line 4"]
    for whole in (True, False):
        t, skipped = _pieces_load(data, cut=37, chunk=chunk, threads=threads, whole=whole)
        assert skipped == ref_skipped
        _same(t, ref_t)
    f = tmp_path / "traces.jsonl"
    f.write_bytes(data)
    with pytest.raises(InputError) as info:  # strict: the first bad record, file and record
        load_file(f)
    assert info.value.path == str(f) and info.value.record == "line 2 span 3"
    assert "negative duration (250 < 300)" in str(info.value)
    assert len(load_file(f, keep_going=True).table) == 7


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("extension", [True, False])
def test_a_line_too_long_is_named(whole: bool, extension: bool) -> None:
    lines = [_req([_span(0)]), _req([_span(1)] * 40), _req([_span(2)])]
    data = b"\n".join(lines) + b"\n"
    limit = len(lines[0]) + 10
    saved = spans_mod._cscan
    if not extension:
        spans_mod._cscan = None
    try:
        src: Any = data if whole else [data[i : i + 50] for i in range(0, len(data), 50)]
        with pytest.raises(InputError) as info:
            load_otlp_traces_pieces(src, ctx=LoadContext("f"), max_line=limit, chunk_bytes=60)
    finally:
        spans_mod._cscan = saved
    assert info.value.record == "line 2" and "OTEL_EXT_MAX_RECORD_BYTES" in str(info.value)


def test_the_line_chunks_hold_whole_lines() -> None:
    from otel_ext.analysis.loaders._otlp_fast import buffer_chunks, line_chunks

    data = b"".join(b"x" * (i % 7) + b"\n" for i in range(200)) + b"tail"
    for target in (1, 5, 33, 1000):
        got = list(buffer_chunks(data, target=target))
        assert b"".join(got) == data
        assert all(bytes(c).endswith(b"\n") for c in got[:-1])
        for cut in (1, 3, 64):
            pieces = [data[i : i + cut] for i in range(0, len(data), cut)]
            chunks = list(line_chunks(pieces, max_line=100, target=target))
            assert b"".join(chunks) == data
            assert all(c.endswith(b"\n") for c in chunks[:-1])


# ------------------------------------------------------------------ metric points


def _metric_messages(
    series: list[tuple[str, str, dict[str, Any], list[float]]], resource: dict[str, Any]
) -> tuple[Any, Any]:
    """(the SDK's MetricsData, its protobuf request) for ``series`` of (name, instrument,
    attributes, values)."""
    from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import (
        encode_metrics,
    )
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource.create(resource), metric_readers=[reader])
    meter = provider.get_meter("m")
    instruments: dict[tuple[str, str], Any] = {}
    for name, kind, attrs, values in series:
        inst = instruments.get((name, kind))
        if inst is None:
            make = {
                "counter": meter.create_counter,
                "gauge": meter.create_gauge,
                "histogram": meter.create_histogram,
                "updown": meter.create_up_down_counter,
            }
            inst = instruments[(name, kind)] = make[kind](f"{name}.{kind}")  # fmt: skip
        for v in values:
            if kind == "gauge":
                inst.set(v, attrs)
            elif kind == "histogram":
                inst.record(abs(v), attrs)
            else:
                inst.add(abs(v) if kind == "counter" else v, attrs)
    data = reader.get_metrics_data()
    provider.shutdown()
    return data, encode_metrics(data)


def _expected_points(req: Any, path: str) -> Any:
    """The points read from the protobuf request (the reference, point by point)."""
    from otel_ext.analysis.loaders.metrics import MetricPoints

    rows = []
    keys = (A.ACCEL_DEVICE_ID, A.ACCEL_HOST_ID, A.ACCEL_LINK_ID)
    for rm in req.resource_metrics:
        res = {kv.key: _pb_value(kv.value) for kv in rm.resource.attributes}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                kind = "exponentialHistogram" if kind == "exponential_histogram" else kind
                for p in getattr(m, m.WhichOneof("data")).data_points:
                    attrs = {**res, **{kv.key: _pb_value(kv.value) for kv in p.attributes}}
                    if kind in ("gauge", "sum"):
                        value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                        count = -1
                    else:
                        value, count = (p.sum if p.HasField("sum") else float("nan")), p.count
                    rows.append(dict(
                        name=m.name, kind=kind, time_ns=p.time_unix_nano,
                        start_time_ns=p.start_time_unix_nano, value=value, count=count,
                        device=attrs.get(keys[0]), host=attrs.get(keys[1]),
                        link=attrs.get(keys[2]), source=path,
                        attrs=json.dumps(attrs, sort_keys=True, default=str),
                    ))  # fmt: skip
    return MetricPoints.from_rows(rows)


def _same_points(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for c in ("time_ns", "start_time_ns", "count"):
        assert np.array_equal(getattr(a, c), getattr(b, c)), c
    assert np.array_equal(a.values, b.values, equal_nan=True)
    for c in ("name", "kind", "device", "host", "link", "attrs"):
        assert [a.string(c, i) for i in range(len(a))] == [b.string(c, i) for i in range(len(b))]
        assert sorted(a.strings[c]) == sorted(b.strings[c]), c


def _metric_load(data: bytes, *, cut: int, chunk: int, threads: int, whole: bool) -> Any:
    from otel_ext.analysis.loaders.metrics import load_otlp_metrics_pieces

    ctx = LoadContext("f", keep_going=True)
    src: Any = data if whole else [data[i : i + cut] for i in range(0, len(data), cut)]
    m = load_otlp_metrics_pieces(src, ctx=ctx, max_line=1 << 30, threads=threads,
                                 chunk_bytes=chunk)  # fmt: skip
    return m, [(s.record, s.reason) for s in ctx.skipped]


def _metric_without_extension(data: bytes) -> Any:
    saved = spans_mod._cscan
    spans_mod._cscan = None
    try:
        return _metric_load(data, cut=len(data) + 1, chunk=1 << 20, threads=1, whole=False)
    finally:
        spans_mod._cscan = saved


_SERIES = st.lists(
    st.tuples(
        st.sampled_from(["accel.power", "accel.bytes", "x"]),
        st.sampled_from(["counter", "gauge", "histogram", "updown"]),
        st.dictionaries(
            st.sampled_from([A.ACCEL_DEVICE_ID, A.ACCEL_HOST_ID, A.ACCEL_LINK_ID, "k"]),
            st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans(), st.floats(-9, 9)),
            max_size=3,
        ),
        st.lists(st.one_of(st.integers(-(2**40), 2**40), st.floats(-1e9, 1e9)), min_size=1,
                 max_size=3),
    ),
    min_size=1,
    max_size=8,
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    series=_SERIES,
    resource=st.dictionaries(
        st.sampled_from([A.ACCEL_HOST_ID, A.ACCEL_DEVICE_ID, "r"]),
        st.one_of(st.text(max_size=4), st.integers(0, 9)),
        max_size=2,
    ),
    copies=st.integers(1, 3),
    cut=st.integers(1, 3000),
    chunk=st.integers(1, 3000),
    threads=st.integers(1, 3),
)
def test_metric_points_equal_the_protobuf_request(
    series: list[Any], resource: dict[str, Any], copies: int, cut: int, chunk: int,
    threads: int,
) -> None:  # fmt: skip
    from otel_ext.exporters._otlp_json import encode_metrics_json

    sdk_data, req = _metric_messages(series, resource)
    ours = encode_metrics_json(sdk_data).rstrip(b"\n")
    pb = json.dumps(MessageToDict(req)).encode()
    data = b"\n".join([ours, pb] * copies) + b"\n"
    one = _expected_points(req, "f")
    from otel_ext.analysis.loaders.metrics import MetricPoints

    expected = MetricPoints.concat([one] * (2 * copies))
    for whole in (True, False):
        got, skipped = _metric_load(data, cut=cut, chunk=chunk, threads=threads, whole=whole)
        _same_points(got, expected)
        assert skipped == []
    ref, ref_skipped = _metric_without_extension(data)
    _same_points(ref, expected)
    assert ref_skipped == []


_POINT_FIELDS = ["timeUnixNano", "startTimeUnixNano", "asDouble", "asInt", "count", "sum",
                 "attributes"]  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    series=_SERIES,
    where=st.sampled_from(["point", "metric", "body", "resource", "scope"]),
    field=st.sampled_from([*_POINT_FIELDS, "name", "gauge", "sum", "histogram", "attributes"]),
    odd=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64),
                  st.floats(allow_nan=False), st.text(max_size=5),
                  st.sampled_from(["12", "-3", "1e3", "", "4611686018427387904"])),
        lambda inner: st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["key", "value", "stringValue", "a"]), inner,
                          max_size=2),
        max_leaves=4,
    ),
)  # fmt: skip
def test_metric_extractor_equals_the_typed_path(
    series: list[Any], where: str, field: str, odd: Any
) -> None:
    """A member set to an odd value anywhere: the points and the records named are those of
    the typed path (the extractor reads the line exactly so, or hands it back)."""
    _, req = _metric_messages(series, {A.ACCEL_HOST_ID: "h0"})
    d = MessageToDict(req)
    rm = d["resourceMetrics"][0]
    metric = rm["scopeMetrics"][0]["metrics"][0]
    body_key = next(k for k in ("gauge", "sum", "histogram") if k in metric)
    if where == "point":
        metric[body_key]["dataPoints"][0][field] = odd
    elif where == "metric":
        metric[field] = odd
    elif where == "body":
        metric[body_key][field if field != "name" else "dataPoints"] = odd
    elif where == "resource":
        rm["resource"] = odd if field == "name" else {"attributes": odd}
    else:
        rm["scopeMetrics"][0]["scope"] = odd
    line = json.dumps(d).encode() + b"\n" + json.dumps(MessageToDict(req)).encode()
    a, a_skipped = _metric_load(line, cut=len(line), chunk=1 << 20, threads=1, whole=True)
    b, b_skipped = _metric_without_extension(line)
    _same_points(a, b)
    assert a_skipped == b_skipped


def test_metric_extractor_equals_typed_path_on_byte_mutations() -> None:
    import random

    require(spans_mod._cscan is not None, "the compiled extractor (pip install -e .)")
    _, req = _metric_messages(
        [("accel.power", "gauge", {A.ACCEL_DEVICE_ID: "h0/c\u00e91"}, [3.5]),
         ("accel.bytes", "counter", {A.ACCEL_LINK_ID: "l0"}, [7]),
         ("x", "histogram", {"k": True}, [1.5, 2.5])],
        {A.ACCEL_HOST_ID: "h0"},
    )  # fmt: skip
    line = json.dumps(MessageToDict(req), separators=(",", ":")).encode()
    rnd = random.Random(5)
    compared = 0
    for _ in range(1500):
        m = bytearray(line)
        for _ in range(rnd.randint(1, 2)):
            m[rnd.randrange(len(m))] = rnd.choice(b'0123456789" \\{}[],:-.eEn\xc3\xa9')
        res = spans_mod._cscan.scan_otlp_metrics_lines(bytes(m), 1, 1 << 30)
        if res[14]:  # handed back: the typed path reads it, nothing to compare
            continue
        a, a_skip = _metric_load(bytes(m), cut=len(m), chunk=1 << 20, threads=1, whole=True)
        b, b_skip = _metric_without_extension(bytes(m))
        _same_points(a, b)
        assert a_skip == b_skip
        compared += 1
    assert compared > 100


def test_bad_metric_points_named_alike(tmp_path: Path) -> None:
    good = json.dumps(
        {
            "resourceMetrics": [
                {
                    "scopeMetrics": [
                        {
                            "metrics": [
                                {
                                    "name": "g",
                                    "gauge": {
                                        "dataPoints": [{"timeUnixNano": "5", "asDouble": 1.5}]
                                    },
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    )
    bad_attrs = json.dumps(
        {
            "resourceMetrics": [
                {
                    "scopeMetrics": [
                        {
                            "metrics": [
                                {
                                    "name": "g",
                                    "gauge": {
                                        "dataPoints": [
                                            {"timeUnixNano": "6", "asDouble": 2.5},
                                            {
                                                "timeUnixNano": "7",
                                                "asDouble": 3.5,
                                                "attributes": [{"key": 3}],
                                            },
                                        ]
                                    },
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    )
    no_time = good.replace('"timeUnixNano": "5", ', "")  # fmt: skip
    data = "\n".join([good, bad_attrs, no_time, good]).encode() + b"\n"
    ref, ref_skipped = _metric_without_extension(data)
    assert [r for r, _ in ref_skipped] == ["line 2 metric g point 1", "line 3 metric g point 0"]
    for chunk in (1, 1 << 20):
        for threads in (1, 2):
            got, skipped = _metric_load(data, cut=13, chunk=chunk, threads=threads, whole=False)
            assert skipped == ref_skipped
            _same_points(got, ref)
    f = tmp_path / "metrics.jsonl"
    f.write_bytes(data)
    with pytest.raises(InputError) as info:
        load_file(f)
    assert info.value.path == str(f) and info.value.record == "line 2 metric g point 1"
    assert len(load_file(f, keep_going=True).metrics) == 3


@pytest.mark.parametrize(
    ("body", "point", "value", "count"),
    [
        ("sum", {"asInt": 7}, 7.0, -1),
        ("sum", {"asInt": "-7"}, -7.0, -1),
        ("sum", {"asInt": "123456789012345678"}, 123456789012345678.0, -1),
        ("gauge", {"asDouble": 2}, 2.0, -1),
        ("gauge", {"asDouble": -2.5e-3, "asInt": "9"}, -2.5e-3, -1),
        ("gauge", {"asDouble": None, "asInt": 4}, 4.0, -1),
        ("histogram", {"count": 3, "sum": 4.5}, 4.5, 3),
        ("histogram", {"count": "3"}, float("nan"), 3),
        ("summary", {"sum": 1}, 1.0, 0),
    ],
)
def test_metric_value_forms(body: str, point: dict[str, Any], value: float, count: int) -> None:
    require(spans_mod._cscan is not None, "the compiled extractor (pip install -e .)")
    p = {"timeUnixNano": 5, "startTimeUnixNano": None, **point}
    line = json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "m", body: {"dataPoints": [p]}}]}]}]}).encode()  # fmt: skip
    assert spans_mod._cscan.scan_otlp_metrics_lines(line, 1, 1 << 30)[0] == 1  # compiled path
    got, skipped = _metric_load(line, cut=len(line), chunk=1 << 20, threads=1, whole=True)
    ref, _ = _metric_without_extension(line)
    _same_points(got, ref)
    assert skipped == [] and np.array_equal(got.values, [value], equal_nan=True)
    assert got.count.tolist() == [count] and got.time_ns.tolist() == [5]
    assert got.start_time_ns.tolist() == [0]


def test_a_kernel_name_given_as_bytes_reads_as_the_reference_reads_it() -> None:
    """Found by the property test: bytes where a kernel's name belongs (their base64 text is
    the name, as on the span-by-span path) on every path."""
    specs: list[tuple[str, dict[str, Any], str | None]] = [(S.SPAN_ACCEL_LAYER, {}, None)] * 9
    specs.append((S.SPAN_ACCEL_KERNEL, {}, "bytes"))
    made = _messages(specs, {}, 1)
    assert _KEYS[10] == A.ACCEL_KERNEL_NAME  # where _messages puts the tenth span's value
    data = _line(made[0][0], "hex") + b"\n"
    expected = _expected([made[0][0]], "f")
    assert "AP9pZA==" in expected.decoded("name").tolist()
    got, _ = _pieces_load(data, cut=1, chunk=1, threads=1, whole=True)
    _same(got, expected)
    ref, _ = _without_extension(data)
    _same(ref, expected)
