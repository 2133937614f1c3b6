"""Serving engines' own telemetry (vLLM, SGLang) read as inputs and joined with otel-ext's.

vLLM and SGLang already emit OpenTelemetry spans; read from the files an SRE already has (a
Collector's file exporter: OTLP-JSON, one export request a line; or a Jaeger JSON export) by
:func:`otel_ext.analysis.loaders.serving_inputs.read_serving_spans`, this module turns each
engine request into otel-ext's request model (an ``accel.request``
row with ``accel.request.phase`` rows: ``queue``, ``prefill``, ``kv_transfer``,
``decode_queue``, ``decode``) and joins it with otel-ext's spans and device activity: **by
trace context** when otel-ext rows share the request's trace id (the engine propagated
``traceparent`` to instrumentation running inside it), else **by time and host** (otel-ext
device activity on the request's host during the request).

What each engine emits, as their sources define it (versions in ``docs/analysis.md``):

* **vLLM**: one ``llm_request`` span (kind SERVER) per finished request, from its arrival,
  with ``gen_ai.request.id``, ``gen_ai.usage.prompt_tokens``, ``gen_ai.usage.completion_tokens``
  and latencies in seconds: ``gen_ai.latency.time_in_queue`` (queued to scheduled),
  ``gen_ai.latency.time_to_first_token``, ``gen_ai.latency.time_in_model_prefill`` (scheduled
  to first token), ``gen_ai.latency.time_in_model_decode`` (first to last token),
  ``gen_ai.latency.time_in_model_inference`` and ``gen_ai.latency.e2e``. Phases are laid out
  from the arrival: queue, then prefill, then decode.
* **SGLang**: a span tree per request: a root ``Req <rid>`` span (attributes ``rid``,
  ``bootstrap_room``), one span per process thread that served it (``thread_label``,
  ``tp_rank``, ``host_id``, ``pid``; one per TP rank, and per prefill and decode server under
  disaggregation, sharing the root's trace through propagated context) and, below them, slice
  spans named by request stage. Stages map to phases: ``prefill_waiting`` → queue,
  ``prefill_forward`` / ``chunked_prefill`` → prefill, ``prefill_transfer_kv_cache`` →
  kv_transfer, ``decode_waiting`` / ``decode_transferred`` → decode_queue, ``decode_loop`` →
  decode; other stages (tokenize, dispatch, bootstrap) are left out of the phases. Where
  several TP ranks record the same stage, the phase spans the earliest start to the latest end.

>>> from otel_ext.analysis.serving.engine_telemetry import ServingSpan, serving_rows
>>> s = ServingSpan("ab" * 16, 1, 0, "llm_request", 0, 9_000_000_000, {
...     "gen_ai.request.id": "cmpl-1", "gen_ai.latency.time_in_queue": 0.5,
...     "gen_ai.latency.time_in_model_prefill": 1.0, "gen_ai.latency.time_in_model_decode": 7.0,
...     "gen_ai.usage.prompt_tokens": 12}, {})
>>> [(r["name"], r["start_ns"], r["end_ns"]) for r in serving_rows([s])]
[('cmpl-1', 0, 9000000000), ('queue', 0, 500000000), ('prefill', 500000000, 1500000000), ('decode', 1500000000, 8500000000)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np
from opentelemetry.util.types import AnyValue

from otel_ext.analysis.intervals import union_length
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

__all__ = [
    "SGLANG_STAGE_PHASES",
    "VLLM_REQUEST_SPAN",
    "JoinedRequest",
    "ServingJoin",
    "ServingRow",
    "ServingSpan",
    "join_serving",
    "serving_rows",
    "with_serving_requests",
]

#: vLLM's per-request span name
VLLM_REQUEST_SPAN = "llm_request"
#: SGLang request stages (slice span names) -> otel-ext request phases
SGLANG_STAGE_PHASES: dict[str, str] = {
    "prefill_waiting": "queue",
    "prefill_forward": "prefill",
    "chunked_prefill": "prefill",
    "prefill_transfer_kv_cache": "kv_transfer",
    "decode_waiting": "decode_queue",
    "decode_transferred": "decode_queue",
    "decode_loop": "decode",
}
_VLLM_LATENCY = "gen_ai.latency."


@dataclass(frozen=True)
class ServingSpan:
    """One span of a serving engine, format-neutral (times in ns since the epoch)."""

    trace_id: str  # 32 hex digits
    span_id: int
    parent_span_id: int
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AnyValue]
    resource: dict[str, AnyValue]


class ServingRow(TypedDict):
    """An event-table row of an engine request (``accel.request``) or of one of its phases
    (``accel.request.phase``, under the request's span)."""

    trace_id: str
    host: str
    #: the engine (``vllm``, ``sglang``)
    source: str
    start_ns: int
    end_ns: int
    category: Category
    name: str
    span_id: NotRequired[int]
    parent_span_id: NotRequired[int]


class JoinedRequest(TypedDict):
    """One engine request joined with otel-ext's rows (:func:`join_serving`)."""

    request: str
    engine: str
    trace_id: str
    host: str
    #: ``trace``, ``time`` or None (no otel-ext row joined)
    joined_by: str | None
    otel_ext_rows: int
    #: per device, its busy time inside the request (union)
    device_busy_ns: dict[str, int]
    collective_ns: int


class ServingJoin(TypedDict):
    """The report's ``serving`` section: the engine requests and how they joined."""

    requests: int
    joined_by_trace: int
    joined_by_time: int
    rows: list[JoinedRequest]


def _seconds(attrs: dict[str, AnyValue], key: str) -> int | None:
    v = attrs.get(_VLLM_LATENCY + key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        return None
    return round(float(v) * 1e9)


def _host_of(span: ServingSpan) -> str:
    for key in ("accel.host.id", "host.name", "host_id"):
        v = span.resource.get(key) or span.attributes.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def _request_row(root: ServingSpan, host: str, engine: str, name: str) -> ServingRow:
    """The ``accel.request`` row of the request whose span is ``root``."""
    return {"trace_id": root.trace_id, "host": host, "source": engine, "start_ns": root.start_ns,
            "end_ns": root.end_ns, "category": Category.REQUEST, "name": name,
            "span_id": root.span_id}  # fmt: skip


def _phase_row(request: ServingRow, phase: str, start_ns: int, end_ns: int) -> ServingRow:
    """A phase row of ``request``, under its span."""
    return {"trace_id": request["trace_id"], "host": request["host"],
            "source": request["source"], "start_ns": start_ns, "end_ns": end_ns,
            "category": Category.PHASE, "name": phase,
            "parent_span_id": request["span_id"]}  # fmt: skip


def _vllm_rows(span: ServingSpan) -> list[ServingRow]:
    """A vLLM request span's request row and its phases, laid out from its arrival."""
    a = span.attributes
    rid = str(a.get("gen_ai.request.id") or span.span_id)
    rows = [_request_row(span, _host_of(span), "vllm", rid)]
    t = span.start_ns
    for phase, key in (("queue", "time_in_queue"), ("prefill", "time_in_model_prefill"),
                       ("decode", "time_in_model_decode")):  # fmt: skip
        d = _seconds(a, key)
        if d is None:
            continue
        rows.append(_phase_row(rows[0], phase, t, t + d))
        t += d
    return rows


def _sglang_rows(root: ServingSpan, members: list[ServingSpan]) -> list[ServingRow]:
    """An SGLang request's row (its root span) and a phase per stage group of its spans."""
    threads = {s.span_id: s for s in members if "thread_label" in s.attributes}
    host = ""
    for th in threads.values():
        h = th.attributes.get("host_id")
        if isinstance(h, str) and h:
            host = h
            break
    host = _host_of(root) or host
    rows = [_request_row(root, host, "sglang", str(root.attributes.get("rid", root.name)))]
    spans_of: dict[str, list[ServingSpan]] = {}
    for s in members:
        phase = SGLANG_STAGE_PHASES.get(s.name)
        if phase is not None:
            spans_of.setdefault(phase, []).append(s)
    for phase, group in spans_of.items():
        start_ns, end_ns = min(s.start_ns for s in group), max(s.end_ns for s in group)
        rows.append(_phase_row(rows[0], phase, start_ns, end_ns))
    return rows


def serving_rows(spans: Sequence[ServingSpan]) -> list[ServingRow]:
    """Event-table rows (``accel.request`` and phases) for the engines' requests in ``spans``."""
    rows: list[ServingRow] = []
    by_trace: dict[str, list[ServingSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    for s in spans:
        if s.name == VLLM_REQUEST_SPAN and "gen_ai.request.id" in s.attributes:
            rows.extend(_vllm_rows(s))
        elif "rid" in s.attributes and s.parent_span_id == 0:
            rows.extend(_sglang_rows(s, by_trace[s.trace_id]))
    return rows


def join_serving(table: EventTable, serving: EventTable) -> ServingJoin:
    """Each engine request joined with otel-ext's rows.

    By trace context: the otel-ext rows (layers, collectives, kernels) that share the
    request's trace id. Otherwise by time and host: the device activity of otel-ext rows on the
    request's host (every host when the engine names none) inside the request's span.

    Returns:
        ``{"requests", "joined_by_trace", "joined_by_time", "rows"}``; per request ``request``,
        ``engine``, ``trace_id``, ``host``, ``joined_by`` (``trace``, ``time`` or None),
        ``otel_ext_rows``, ``device_busy_ns`` (per device, union inside the request) and
        ``collective_ns``.
    """
    cat = serving["category"]
    req = np.flatnonzero(cat == Category.REQUEST)
    names = serving.strings["name"]
    t_trace = table.strings["trace_id"]
    code_of = {s: i for i, s in enumerate(t_trace) if s}
    start, end = table["start_ns"], table["end_ns"]
    tcat = table["category"]
    is_dev = np.isin(tcat, [int(c) for c in DEVICE_CATEGORIES])
    is_coll = (tcat == Category.COLLECTIVE) | (tcat == Category.KERNEL_COMM)
    hosts = table.strings["host"]
    host_code = {h: i for i, h in enumerate(hosts) if h}
    # the rows of each trace from one stable sort (a mask per request would be quadratic)
    t_codes = table["trace_id"]
    order = np.argsort(t_codes, kind="stable")
    sorted_t = t_codes[order]
    out: list[JoinedRequest] = []
    for r in req.tolist():
        tid = serving.strings["trace_id"][int(serving["trace_id"][r])]
        host = serving.strings["host"][int(serving["host"][r])]
        a, b = int(serving["start_ns"][r]), int(serving["end_ns"][r])
        code = code_of.get(tid)
        # the request's rows, ascending: its trace's, else the device and collective rows on
        # its host inside its span
        idx = np.zeros(0, dtype=np.int64)
        if code is not None:
            lo, hi = np.searchsorted(sorted_t, [code, code + 1])
            idx = order[lo:hi]
        how: str | None = "trace" if len(idx) else None
        if how is None:
            mine = (start < b) & (end > a) & (is_dev | is_coll)
            if host and host in host_code:
                mine &= table["host"] == host_code[host]
            elif host:
                mine &= False
            idx = np.flatnonzero(mine)
            how = "time" if len(idx) else None
        busy: dict[str, int] = {}
        dev_rows = idx[is_dev[idx]]
        for d in np.unique(table["device"][dev_rows]).tolist():
            rows = dev_rows[table["device"][dev_rows] == d]
            s_, e_ = np.clip(start[rows], a, b), np.clip(end[rows], a, b)
            busy[table.strings["device"][int(d)] or "?"] = union_length(s_, e_)
        crow = idx[is_coll[idx]]

        out.append(
            {
                "request": names[int(serving["name"][r])],
                "engine": serving.strings["source"][int(serving["source"][r])],
                "trace_id": tid,
                "host": host,
                "joined_by": how,
                "otel_ext_rows": len(idx),
                "device_busy_ns": dict(sorted(busy.items())),
                "collective_ns": union_length(np.clip(start[crow], a, b), np.clip(end[crow], a, b)),
            }
        )
    return {
        "requests": len(out),
        "joined_by_trace": sum(1 for x in out if x["joined_by"] == "trace"),
        "joined_by_time": sum(1 for x in out if x["joined_by"] == "time"),
        "rows": out,
    }


def with_serving_requests(
    table: EventTable, spans: Sequence[ServingSpan]
) -> tuple[EventTable, ServingJoin | None]:
    """``table`` with the engine requests among ``spans`` (the loaded span files' spans,
    :func:`~otel_ext.analysis.loaders.serving_inputs.read_serving_spans`) appended, and
    their join (:func:`join_serving`); ``table`` unchanged and None when the spans hold no
    vLLM or SGLang request.

    >>> t, joined = with_serving_requests(EventTable.from_rows([]), [])
    >>> len(t), joined
    (0, None)
    """
    serving = EventTable.from_rows(serving_rows(spans))
    if not len(serving):
        return table, None
    return EventTable.concat([table, serving]), join_serving(table, serving)
