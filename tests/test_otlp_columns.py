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
