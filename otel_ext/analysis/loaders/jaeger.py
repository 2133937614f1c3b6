"""Jaeger JSON exports (``{"data": [{"traceID", "spans", "processes"}]}``) to event-table rows.

Times are integer (or decimal) microseconds; process tags are merged into span tags; ids are
hex (1 to 32 digits, as Jaeger writes them). The document is read a trace at a time
(:mod:`~otel_ext.analysis.loaders._jsonstream`), so a trace that is malformed, too deep or of
the wrong shape costs that trace (with ``keep_going``, reading resumes at the next one), and
every container is type-checked (``processes`` an object of objects, ``processID`` a
string, ``tags`` and ``references`` lists): a bad one costs its span, named
``trace T span S``. Rows are built by :class:`~otel_ext.analysis.loaders.spans.SpanRows`.

>>> from otel_ext.analysis.loaders._common import LoadContext
>>> doc = ('{"data": [{"traceID": "ab", "processes": {"p": {"tags": []}}, "spans": ['
...        '{"spanID": "0a", "operationName": "accel.layer", "startTime": 5, "duration": 2,'
...        ' "processID": "p"}]}]}')
>>> t = load_jaeger_text(doc, ctx=LoadContext("j.json"))
>>> len(t), int(t["span_id"][0]), int(t["end_ns"][0] - t["start_ns"][0])
(1, 10, 2000)
"""

from __future__ import annotations

import re
from typing import Any

from otel_ext.analysis.loaders._common import JsonValue, LoadContext, int_or_none
from otel_ext.analysis.loaders.spans import SpanRows, _num
from otel_ext.analysis.table import EventTable

__all__ = ["load_jaeger_text"]


def load_jaeger_text(
    text: str, *, ctx: LoadContext, bad_positions: list[int] | None = None
) -> EventTable:
    """Spans of a Jaeger JSON export (``{"data": [{"traceID", "spans", "processes"}]}``).

    Read a trace at a time (:mod:`~otel_ext.analysis.loaders._jsonstream`): a trace that is
    malformed, too deep or of the wrong shape costs that trace (or span), named.
    """
    from otel_ext.analysis.loaders._jsonstream import JsonSyntaxError, iter_object

    rows = SpanRows(ctx)
    counter = [0]
    seen_data = False
    try:
        for key, value in iter_object(
            text, stream_key="data", keep_going=ctx.keep_going, on_skip=ctx.bad, label="trace",
            looks_like=_is_dict, bad_positions=bad_positions,
        ):  # fmt: skip
            if key != "data":
                continue
            seen_data = True
            if not hasattr(value, "__next__"):
                ctx.bad("data", "Jaeger export has no 'data' list")
                continue
            for ti, trace in enumerate(value):
                _jaeger_trace(rows, ctx, ti, trace, counter)
    except JsonSyntaxError as e:
        record = e.record or (f"trace {e.index}" if e.index is not None else "file")
        ctx.bad(record, f"malformed JSON: {e}")
        seen_data = True
    if not seen_data:
        ctx.bad("data", "Jaeger export has no 'data' list")
    return rows.build({"format": "jaeger", "path": ctx.path, "rank": -1})


def _jaeger_trace(
    rows: SpanRows, ctx: LoadContext, ti: int, trace: Any, counter: list[int]
) -> None:
    from otel_ext.analysis.loaders._common import us_to_ns

    if not isinstance(trace, dict):
        ctx.bad(f"trace {ti}", "trace is not an object")
        return
    procs = trace.get("processes")
    if procs is None:
        procs = {}
    if not isinstance(procs, dict):
        ctx.bad(f"trace {ti} processes", "processes is not an object")
        procs = {}
    spans = trace.get("spans")
    if spans is None:
        spans = []
    if not isinstance(spans, list):
        ctx.bad(f"trace {ti} spans", "spans is not a list")
        return
    for span in spans:
        record = f"trace {ti} span {counter[0]}"
        counter[0] += 1
        if not isinstance(span, dict):
            ctx.bad(record, "span is not an object")
            continue
        attrs: dict[str, JsonValue] = {}
        pid = span.get("processID")
        proc = procs.get(pid) if isinstance(pid, str) else None
        problem = None
        if pid is not None and not isinstance(pid, str):
            problem = f"processID is not a string: {pid!r:.40}"
        elif proc is not None and not isinstance(proc, dict):
            problem = f"process {pid!r:.40} is not an object"
        else:
            for tags in ((proc or {}).get("tags"), span.get("tags")):
                if tags is None:
                    continue
                if not isinstance(tags, list):
                    problem = "tags is not a list"
                    break
                for tag in tags:
                    if isinstance(tag, dict) and isinstance(tag.get("key"), str):
                        attrs[tag["key"]] = _jaeger_tag(tag)
        refs = span.get("references")
        parent: int | None = 0
        if problem is None and refs is not None and not isinstance(refs, list):
            problem = "references is not a list"
        ids: list[int | None] = []
        if problem is None:
            ids.append(_jaeger_id(span.get("spanID")))
            for ref in refs or []:
                if isinstance(ref, dict) and ref.get("refType") == "CHILD_OF":
                    parent = _jaeger_id(ref.get("spanID"))
                    if parent is None:
                        break
            if None in ids or parent is None:
                problem = f"span or parent id is not hex: {span.get('spanID')!r:.40}"
        if problem is not None:
            ctx.bad(record, problem)
            continue
        tid = span.get("traceID", trace.get("traceID"))
        if tid is None or tid == "":
            tid_hex = ""
        elif isinstance(tid, str) and 0 < len(tid) <= 32 and _is_hex(tid):
            tid_hex = tid.lower().rjust(32, "0")
        else:
            ctx.bad(record, f"trace id is not hex: {tid!r:.40}")
            continue
        start = us_to_ns(span.get("startTime"))
        dur = us_to_ns(span.get("duration"))
        rows.add(
            record=record,
            name=span.get("operationName"),
            start_ns=start,
            end_ns=None if start is None or dur is None else start + dur,
            attrs=attrs,
            trace_id=tid_hex,
            span_id=ids[0] or 0,
            parent_span_id=parent or 0,
        )


_HEX = re.compile(r"[0-9a-fA-F]+").fullmatch


def _is_dict(v: Any) -> bool:
    return isinstance(v, dict)


def _is_hex(s: str) -> bool:
    return s.isascii() and _HEX(s) is not None


def _jaeger_id(v: Any) -> int | None:
    """A Jaeger span id (1 to 16 hex digits; 32 keeps the low 64 bits); 0 if absent."""
    if v is None or v == "":
        return 0
    if isinstance(v, str) and len(v) <= 32 and _is_hex(v):
        return int(v[-16:], 16)
    return None


def _jaeger_tag(tag: dict[str, JsonValue]) -> JsonValue:
    v = tag.get("value")
    t = tag.get("type")
    if t in ("int64", "int32"):
        return int_or_none(v)
    if t in ("float64", "float32"):
        return _num(v, default=float("nan"))
    return v
