"""The OTLP-JSON loader against the SDK's own encoding: hex and base64 ids, every attribute
value type, chunked and whole decoding, the columnar path against the span-by-span one."""

from __future__ import annotations

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
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.loaders._common import LoadContext, ns_or_none
from otel_ext.analysis.loaders.spans import (
    SpanRows,
    iter_lines,
    load_otlp_traces_lines,
    otlp_attrs,
)
from otel_ext.analysis.table import NUMERIC_COLUMNS, STRING_COLUMNS, EventTable
from otel_ext.exporters import read_spans
from otel_ext.exporters._otlp_json import encode_spans_json
from otel_ext.semconv import attributes as A
from otel_ext.semconv import spans as S

_ATTR_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=3),
)
_KEYS = [A.ACCEL_RANK, A.ACCEL_KERNEL_STREAM, A.ACCEL_COLLECTIVE_SEQ, A.ACCEL_COLLECTIVE_BYTES,
         A.ACCEL_DEVICE_ID, A.ACCEL_HOST_ID, A.ACCEL_COLLECTIVE_OP, A.ACCEL_LAYER_FLOPS,
         A.ACCEL_KERNEL_NAME, A.ACCEL_KERNEL_KIND, A.ACCEL_LAYER_NAME, A.ACCEL_LINK_ID,
         A.ACCEL_LINK_SRC, A.ACCEL_LINK_DST, A.ACCEL_COLLECTIVE_GROUP_SIZE, "other.key"]  # fmt: skip
_NAMES = [S.SPAN_ACCEL_LAYER, S.SPAN_ACCEL_KERNEL, S.SPAN_ACCEL_COLLECTIVE,
          S.SPAN_ACCEL_LINK_TRANSFER, S.SPAN_ACCEL_REQUEST_PHASE, "user.span"]  # fmt: skip


def _sdk_spans(
    specs: list[tuple[str, dict[str, Any]]], resource_attrs: dict[str, Any]
) -> list[Any]:
    from opentelemetry.sdk.resources import Resource

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource_attrs))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    t = 1_700_000_000_000_000_000
    with tracer.start_as_current_span("root", start_time=t, end_on_exit=False) as root:
        for i, (name, attrs) in enumerate(specs):
            span = tracer.start_span(name, attributes=attrs, start_time=t + i)
            span.end(end_time=t + i + 10 + i)
        root.end(end_time=t + 1000)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _same(a: EventTable, b: EventTable) -> None:
    assert len(a) == len(b)
    for c in NUMERIC_COLUMNS:
        assert np.array_equal(a[c], b[c]), c
    for c in STRING_COLUMNS:
        assert a.decoded(c).tolist() == b.decoded(c).tolist(), c


def _span_by_span(lines: list[bytes], path: str) -> EventTable:
    """The table built span by span from the same requests (what the columnar path must give)."""
    from otel_ext.exporters._otlp_decode import span_id_int

    rows = SpanRows(LoadContext(path))
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            res = otlp_attrs((rs.get("resource") or {}).get("attributes"))
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    attrs = {**res, **otlp_attrs(sp.get("attributes"))}
                    rows.add(record="r", name=sp.get("name"), attrs=attrs,
                             start_ns=ns_or_none(sp.get("startTimeUnixNano")),
                             end_ns=ns_or_none(sp.get("endTimeUnixNano")),
                             trace_id=sp.get("traceId", ""),
                             span_id=span_id_int(sp.get("spanId", "")),
                             parent_span_id=span_id_int(sp.get("parentSpanId", "")))  # fmt: skip
    return rows.build({})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(_NAMES),
            st.dictionaries(st.sampled_from(_KEYS), _ATTR_VALUES, max_size=6),
        ),
        min_size=1,
        max_size=8,
    ),
    res=st.dictionaries(
        st.sampled_from([A.ACCEL_RANK, A.ACCEL_HOST_ID, A.ACCEL_DEVICE_ID]),
        st.one_of(st.integers(-3, 40), st.text(max_size=5)),
        max_size=3,
    ),
    piece=st.integers(1, 4096),
)
def test_columns_equal_the_sdk_encoding_in_hex_and_base64(
    specs: list[tuple[str, dict[str, Any]]], res: dict[str, Any], piece: int
) -> None:
    spans = _sdk_spans(specs, res)
    hex_line = encode_spans_json(spans)
    b64_line = (json.dumps(MessageToDict(encode_spans(spans))) + "\n").encode()
    assert b'"spanId":"' in hex_line and b"=" in b64_line  # both encodings really differ
    hex_t = load_otlp_traces_lines(iter_lines([hex_line], max_line=1 << 30), ctx=LoadContext("p"))
    # chunked: the same bytes in pieces of any size
    pieces = [b64_line[i : i + piece] for i in range(0, len(b64_line), piece)]
    b64_t = load_otlp_traces_lines(iter_lines(pieces, max_line=1 << 30), ctx=LoadContext("p"))
    _same(hex_t, b64_t)
    _same(hex_t, _span_by_span([hex_line], "p"))
    # ids equal the SDK's own
    by_id = {s.context.span_id: s for s in spans}
    assert set(hex_t["span_id"].tolist()) == set(by_id)
    for i, sid in enumerate(hex_t["span_id"].tolist()):
        s = by_id[sid]
        assert hex_t.string("trace_id", i) == f"{s.context.trace_id:032x}"
        assert int(hex_t["parent_span_id"][i]) == (s.parent.span_id if s.parent else 0)


def test_exporters_and_analysis_agree_on_base64_ids(tmp_path: Path) -> None:
    spans = _sdk_spans([(S.SPAN_ACCEL_LAYER, {A.ACCEL_RANK: 2})], {})
    f = tmp_path / "traces.jsonl"
    f.write_text(json.dumps(MessageToDict(encode_spans(spans))) + "\n")
    assert '"spanId": "' in f.read_text() and "=" in f.read_text()  # base64
    records = {int(r.span_id, 16): r for r in read_spans(f)}
    t = load_paths([f], workers=1).table
    assert len(t) == len(records) == 2
    for i in range(len(t)):
        r = records[int(t["span_id"][i])]
        assert t.string("trace_id", i) == r.trace_id
        assert int(t["parent_span_id"][i]) == (int(r.parent_span_id, 16) if r.parent_span_id else 0)


# ------------------------------------------------------------------ compiled extractor

_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False),
              st.text(max_size=6), st.sampled_from(["12", "-3", "0001", "1e3", "AAAAAAAAAAI="])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
_SPAN_FIELDS = ["traceId", "spanId", "parentSpanId", "name", "startTimeUnixNano",
                "endTimeUnixNano", "attributes", "kind", "events", "links", "status", "flags"]  # fmt: skip


def _tables_with_and_without_scanner(line: bytes) -> tuple[Any, Any]:
    import otel_ext.analysis.loaders.spans as spans_mod

    def load() -> Any:
        ctx = LoadContext("p", keep_going=True)
        t = load_otlp_traces_lines(iter_lines([line], max_line=1 << 30), ctx=ctx)
        return t, [(s.record, s.reason) for s in ctx.skipped]

    with_scanner = load()
    saved = spans_mod._cscan
    spans_mod._cscan = None
    try:
        without = load()
    finally:
        spans_mod._cscan = saved
    return with_scanner, without


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(_NAMES),
            st.dictionaries(st.sampled_from(_KEYS), _ATTR_VALUES, max_size=5),
        ),
        min_size=1,
        max_size=5,
    ),
    field=st.sampled_from([None, *_SPAN_FIELDS, "resource", "scope", "value", "key"]),
    odd=_JSON_VALUES,
    indent=st.sampled_from([None, 1]),
)
def test_compiled_extractor_equals_the_msgspec_path(
    specs: list[tuple[str, dict[str, Any]]], field: str | None, odd: Any, indent: int | None
) -> None:
    spans = _sdk_spans(specs, {A.ACCEL_HOST_ID: "h0"})
    req = json.loads(encode_spans_json(spans))
    sp = req["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    if field in _SPAN_FIELDS:
        sp[field] = odd
    elif field == "resource":
        req["resourceSpans"][0]["resource"] = odd
    elif field == "scope":
        req["resourceSpans"][0]["scopeSpans"][0]["scope"] = odd
    elif field in ("value", "key") and sp.get("attributes"):
        sp["attributes"][0][field] = odd
    line = json.dumps(req, indent=indent).replace("\n", " ").encode()
    (a, a_skipped), (b, b_skipped) = _tables_with_and_without_scanner(line)
    _same(a, b)
    assert a_skipped == b_skipped


def test_compiled_extractor_reads_our_exports() -> None:
    from otel_ext.analysis.loaders import _cscan

    require(_cscan is not None, "the compiled extractor (pip install -e . with a C compiler)")
    spans = _sdk_spans([(S.SPAN_ACCEL_KERNEL, {A.ACCEL_KERNEL_NAME: "gemm", A.ACCEL_RANK: 3})], {})
    line = encode_spans_json(spans)
    res = _cscan.scan_otlp_lines(line, (A.ACCEL_RANK.encode(),), 1, 1 << 30)
    assert res[13] == b"" and res[0] == 2  # the extractor, not the fallback, read it
    (a, _), (b, _) = _tables_with_and_without_scanner(line)
    _same(a, b)


@pytest.mark.parametrize(
    "values",
    [
        [{"stringValue": "a"}, {"intValue": "3"}],
        [{"intValue": "3"}, {"stringValue": "b"}],
        [{"doubleValue": 2.5}, {"boolValue": True}],
        [{"stringValue": "a"}, {}],
    ],
)
@pytest.mark.parametrize("key", [A.ACCEL_KERNEL_NAME, A.ACCEL_RANK, A.ACCEL_LAYER_FLOPS,
                                 A.ACCEL_DEVICE_ID, A.ACCEL_LINK_ID])  # fmt: skip
def test_duplicate_attributes_the_later_wins_on_both_paths(key: str, values: list[Any]) -> None:
    spans = _sdk_spans([(S.SPAN_ACCEL_KERNEL, {}), (S.SPAN_ACCEL_LINK_TRANSFER, {})],
                       {key: "from-resource"})  # fmt: skip
    req = json.loads(encode_spans_json(spans))
    for sp in req["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        sp["attributes"] = [{"key": key, "value": v} for v in values]
    line = json.dumps(req).encode()
    (a, _), (b, _) = _tables_with_and_without_scanner(line)
    _same(a, b)
    _same(a, _span_by_span([line], "p"))


def test_extractor_equals_msgspec_path_on_byte_mutations() -> None:
    """Bytes flipped in an encoded request: wherever the extractor still reads the line, the
    table and the skipped records are those of the msgspec path."""
    import random

    from otel_ext.analysis.loaders import _cscan

    require(_cscan is not None, "the compiled extractor (pip install -e . with a C compiler)")
    specs = [(S.SPAN_ACCEL_KERNEL, {A.ACCEL_KERNEL_NAME: "gemm\u00e9", A.ACCEL_RANK: 3}),
             (S.SPAN_ACCEL_LAYER, {A.ACCEL_LAYER_NAME: "l0", A.ACCEL_LAYER_FLOPS: 1.5e9}),
             (S.SPAN_ACCEL_LINK_TRANSFER, {A.ACCEL_LINK_ID: "h0/c1-c2", A.ACCEL_LINK_BYTES: 7})]  # fmt: skip
    line = encode_spans_json(_sdk_spans(specs, {A.ACCEL_HOST_ID: "h0"})).rstrip(b"\n")
    from otel_ext.analysis.loaders.spans import _wanted

    keys = tuple(k.encode() for k in _wanted())
    rnd = random.Random(11)
    compared = 0
    for _ in range(1500):
        m = bytearray(line)
        for _ in range(rnd.randint(1, 2)):
            m[rnd.randrange(len(m))] = rnd.choice(b'0123456789abcdefABCDEF" \\{}[],:-.eE\xc3\xa9')
        if _cscan.scan_otlp_lines(bytes(m), keys, 1, 1 << 30)[13]:  # handed back
            continue
        (a, a_skip), (b, b_skip) = _tables_with_and_without_scanner(bytes(m))
        _same(a, b)
        assert a_skip == b_skip
        compared += 1
    assert compared > 100
