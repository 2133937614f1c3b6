"""Request latency attribution: TTFT and TPOT broken into queue, prefill, decode and below.

Inference requests are ``accel.request`` spans with phase children (``accel.request.phase``:
queue, prefill, decode). Per request:

* ``ttft_ns`` (time to first token) = end of prefill − request start = queue + prefill (+ any
  gap between them);
* ``tpot_ns`` (time per output token) = decode time ÷ decode steps, when each decode step is
  its own phase span (one decode span for all tokens gives no per-token figure: None);
* ``queue_ns``, ``prefill_ns``, ``decode_ns``: summed phase durations.

What the first token waited on, below the phases: the time inside the request's
``[start, first token]`` window during which layer spans, collectives (spans or communication
kernels) and each device were busy, from the rows of the request's own trace when it has any,
else from every rank's activity over that window (a batched server's steps serve many
requests at once). Times are unions, so overlapping work counts once.

The phase is read from the row's name (``queue``, ``prefill``, ``decode`` within it); rows
named only by the span kind take it from their order (queue, prefill, then decode).

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=100, category=C.REQUEST, trace_id="a", name="req"),
...     dict(start_ns=0, end_ns=10, category=C.PHASE, trace_id="a", name="queue"),
...     dict(start_ns=10, end_ns=40, category=C.PHASE, trace_id="a", name="prefill"),
...     dict(start_ns=40, end_ns=70, category=C.PHASE, trace_id="a", name="decode"),
...     dict(start_ns=70, end_ns=100, category=C.PHASE, trace_id="a", name="decode")])
>>> r = request_latency(t)["requests"][0]
>>> r["ttft_ns"], r["tpot_ns"], r["queue_ns"], r["prefill_ns"], r["decode_ns"]
(40, 30, 10, 30, 60)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import msgspec
import numpy as np
from opentelemetry.util.types import AnyValue

from otel_ext._accounting import token_shares
from otel_ext._arrays import distinct, percentile
from otel_ext._otlp_scalars import is_int_text
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable
from otel_ext.errors import InputError
from otel_ext.semconv.attributes import (
    ACCEL_ENGINE_STEP_CHIPS,
    ACCEL_ENGINE_STEP_DECODE_TOKENS,
    ACCEL_ENGINE_STEP_DEVICE_TIME_NS,
    ACCEL_ENGINE_STEP_INDEX,
    ACCEL_ENGINE_STEP_PREFILL_TOKENS,
    ACCEL_ENGINE_STEP_REQUEST_IDS,
    ACCEL_HOST_ID,
)
from otel_ext.semconv.metrics import METRIC_HW_ENERGY
from otel_ext.semconv.spans import SPAN_ACCEL_ENGINE_STEP

__all__ = [
    "TTFT_PARTS",
    "EngineStep",
    "engine_step_from_attributes",
    "engine_step_order",
    "engine_steps_of_line",
    "fit_token_costs",
    "request_accounting",
    "request_latency",
    "step_energy",
    "step_shares",
]

_PHASES = ("queue", "prefill", "decode")


class _Coverage:
    """Union of intervals, queried for its length inside any window in O(log n)."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        if len(start) == 0:
            self.s = self.e = self.cum = np.zeros(0, dtype=np.int64)
            return
        order = np.argsort(start, kind="stable")
        s, e = start[order], end[order]
        cm = np.maximum.accumulate(e)
        brk = np.r_[True, s[1:] > cm[:-1]]
        idx = np.flatnonzero(brk)
        self.s = s[idx]
        self.e = np.maximum.reduceat(e, idx)
        self.cum = np.r_[0, np.cumsum(self.e - self.s)]

    def within(self, a: int, b: int) -> int:
        if len(self.s) == 0 or b <= a:
            return 0
        i = int(np.searchsorted(self.e, a, side="right"))  # first interval ending after a
        j = int(np.searchsorted(self.s, b, side="left"))  # intervals starting before b
        if j <= i:
            return 0
        total = int(self.cum[j] - self.cum[i])
        total -= max(0, a - int(self.s[i]))
        total -= max(0, int(self.e[j - 1]) - b)
        return max(total, 0)

    def within_many(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """:meth:`within` for arrays of windows at once (int64, the same sums).

        >>> c = _Coverage(np.array([0, 5, 20]), np.array([10, 12, 30]))
        >>> c.within_many(np.array([0, 11, 40, 8]), np.array([25, 21, 50, 8])).tolist()
        [17, 2, 0, 0]
        >>> [c.within(0, 25), c.within(11, 21), c.within(40, 50), c.within(8, 8)]
        [17, 2, 0, 0]
        """
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        n = len(self.s)
        if n == 0 or len(a) == 0:
            return np.zeros(len(a), dtype=np.int64)
        i = np.searchsorted(self.e, a, side="right")
        j = np.searchsorted(self.s, b, side="left")
        total = self.cum[j] - self.cum[i]
        total -= np.maximum(0, a - self.s[np.minimum(i, n - 1)])
        total -= np.maximum(0, self.e[np.maximum(j - 1, 0)] - b)
        return np.where((b > a) & (j > i), np.maximum(total, 0), 0)


def union_of(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals ``[start, end)`` as sorted disjoint intervals (the
    coverage :func:`request_latency` queries), their starts and ends.

    >>> [x.tolist() for x in union_of(np.array([5, 0, 20]), np.array([12, 10, 30]))]
    [[0, 20], [12, 30]]
    """
    c = _Coverage(np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64))
    return c.s.copy(), c.e.copy()


def _groups(codes: np.ndarray, rows: np.ndarray) -> dict[int, np.ndarray]:
    """``rows`` grouped by their ``codes`` (each group in ascending row order), in one sort.

    >>> {k: v.tolist() for k, v in _groups(np.array([3, 1, 3, 2]), np.array([5, 6, 7, 8])).items()}
    {1: [6], 2: [8], 3: [5, 7]}
    """
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    bounds = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]]) if len(sc) else np.zeros(0, int)
    ends = np.r_[bounds[1:], len(sc)]
    return {int(sc[b]): rows[order[b:e]] for b, e in zip(bounds.tolist(), ends.tolist())}


#: phases that are none of queue, prefill and decode (disaggregated serving's hand-over)
_OTHER_PHASES = ("kv_transfer", "decode_queue", "first_decode_step")
#: the parts of a disaggregated request's time to first token, in order
TTFT_PARTS = ("queue", "prefill", "kv_transfer", "decode_queue", "first_decode_step")


def _phase_of(name: str) -> str | None:
    low = name.lower()
    if low in _PHASES or low in _OTHER_PHASES:
        return low
    for p in _PHASES:
        if p in low:
            return p
    return None


def _pct(values: list[int], q: float) -> int | None:
    return int(percentile(values, q)) if values else None


class LatencyRow(TypedDict):
    """One request of the ``requests`` section: its latency and what its first token waited
    on (the ``ttft_*`` parts below the phases only when it has a first token)."""

    request: str
    start_ns: int
    duration_ns: int
    ttft_ns: int | None
    tpot_ns: int | None
    queue_ns: int
    prefill_ns: int
    decode_ns: int
    decode_steps: int
    #: a disaggregated request's five parts (:data:`TTFT_PARTS`), each on its host's clock
    ttft_parts_ns: NotRequired[dict[str, int]]
    ttft_client_ns: NotRequired[int]
    ttft_layers_ns: NotRequired[int]
    ttft_collectives_ns: NotRequired[int]
    #: ``trace`` (the request's own rows) or ``time`` (every rank's rows over its window)
    attribution: NotRequired[str]
    #: per device, its busy time inside the window (listed rows only)
    ttft_devices_ns: NotRequired[dict[str, int]]


class LatencySummary(TypedDict):
    """Percentiles of TTFT and TPOT over the requests, and the shares of the summed TTFT."""

    ttft_p50_ns: int | None
    ttft_p90_ns: int | None
    ttft_p99_ns: int | None
    tpot_p50_ns: int | None
    tpot_p99_ns: int | None
    ttft_queue_pct: float | None
    ttft_prefill_pct: float | None
    ttft_layers_pct: float | None
    ttft_collectives_pct: float | None


class TtftBreakdown(TypedDict):
    """Median and p99 of each part of the client-seen TTFT, over the requests with all five."""

    requests: int
    queue_p50_ns: int | None
    queue_p99_ns: int | None
    prefill_p50_ns: int | None
    prefill_p99_ns: int | None
    kv_transfer_p50_ns: int | None
    kv_transfer_p99_ns: int | None
    decode_queue_p50_ns: int | None
    decode_queue_p99_ns: int | None
    first_decode_step_p50_ns: int | None
    first_decode_step_p99_ns: int | None
    client_p50_ns: int | None
    client_p99_ns: int | None
    share_pct: dict[str, float | None]


class RequestLatency(TypedDict):
    """The report's ``requests`` section (``accounting`` added by the engine)."""

    count: int
    summary: LatencySummary | None
    ttft_breakdown: NotRequired[TtftBreakdown | None]
    requests: list[LatencyRow]
    accounting: NotRequired[RequestAccountingSection | None]


def _phases_by_trace(table: EventTable) -> dict[int, list[int]]:
    """The phase rows of each trace (by trace-id code), in row order."""
    trace = table["trace_id"]
    by_trace: dict[int, list[int]] = {}
    for p in np.flatnonzero(table["category"] == Category.PHASE).tolist():
        by_trace.setdefault(int(trace[p]), []).append(p)
    return by_trace


def _device_coverage(
    table: EventTable, busy: Mapping[str, tuple[np.ndarray, np.ndarray]] | None
) -> dict[str, _Coverage]:
    """Each device's busy time as a coverage: its rows in ``table`` joined by union with the
    intervals ``busy`` holds of it."""
    start, end = table["start_ns"], table["end_ns"]
    dev_rows = np.flatnonzero(np.isin(table["category"], [int(c) for c in DEVICE_CATEGORIES]))
    spans: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for code, rows in _groups(table["device"][dev_rows], dev_rows).items():
        spans[table.strings["device"][code] or "?"] = [(start[rows], end[rows])]
    for name, (s, e) in (busy or {}).items():  # rows kept elsewhere, as unions: joined by union
        spans.setdefault(name or "?", []).append((s, e))
    return {
        name: _Coverage(np.concatenate([s for s, _ in got]), np.concatenate([e for _, e in got]))
        for name, got in spans.items()
    }


@dataclass(frozen=True)
class _Below:
    """What first tokens waited on below the phases: every rank's layer and collective rows
    as coverages, and each trace's own layer and collective rows (by trace-id code)."""

    table: EventTable
    layers: _Coverage
    collectives: _Coverage
    rows_of_trace: dict[int, np.ndarray]

    @classmethod
    def of(cls, table: EventTable) -> _Below:
        """The coverages and rows of ``table``."""
        cat, trace = table["category"], table["trace_id"]
        start, end = table["start_ns"], table["end_ns"]
        coll_sel = (cat == Category.COLLECTIVE) | (cat == Category.KERNEL_COMM)
        traced = (trace > 0) & (layer_or_coll := (cat == Category.LAYER) | coll_sel)
        traced_rows = np.flatnonzero(traced) if layer_or_coll.any() else np.zeros(0, np.int64)
        return cls(
            table,
            _Coverage(start[cat == Category.LAYER], end[cat == Category.LAYER]),
            _Coverage(start[coll_sel], end[coll_sel]),
            _groups(trace[traced_rows], traced_rows),
        )

    def within(self, tcode: int, a: int, b: int) -> tuple[int, int, str]:
        """Layer and collective time inside ``[a, b)`` and how it was attributed: from the
        trace's own rows when it has any (``trace``), else from every rank's (``time``)."""
        if tcode not in self.rows_of_trace:
            return self.layers.within(a, b), self.collectives.within(a, b), "time"
        start, end = self.table["start_ns"], self.table["end_ns"]
        own = self.rows_of_trace[tcode]
        own = own[(start[own] < b) & (end[own] > a)]
        oc = self.table["category"][own]
        lc = _Coverage(start[own[oc == Category.LAYER]], end[own[oc == Category.LAYER]])
        cm = (oc == Category.COLLECTIVE) | (oc == Category.KERNEL_COMM)
        cc = _Coverage(start[own[cm]], end[own[cm]])
        return lc.within(a, b), cc.within(a, b), "trace"


def _labelled_phases(table: EventTable, phases: list[int]) -> list[tuple[str, int]]:
    """A request's phase rows in time order, each with its phase: from its name, else from
    its place (queue, prefill, then decode)."""
    start = table["start_ns"]
    names, codes = table.strings["name"], table["name"]
    phases = sorted(phases, key=lambda p: int(start[p]))
    labelled: list[tuple[str, int]] = []
    for k, p in enumerate(phases):
        label = _phase_of(names[int(codes[p])])
        if label is None:
            label = _PHASES[min(k, 2)] if len(phases) >= 3 else _PHASES[1 + min(k, 1)]
        labelled.append((label, p))
    return labelled


def _latency_row(table: EventTable, r: int, phases: list[int]) -> tuple[LatencyRow, int | None]:
    """Request row ``r``'s latency from its phase rows, and the time of its first token
    (the end of its last prefill; None without one)."""
    start, end = table["start_ns"], table["end_ns"]
    labelled = _labelled_phases(table, phases)
    parts = _ttft_parts(labelled, start, end)
    dur = {ph: 0 for ph in _PHASES}
    n_decode = 0
    first_token = None
    for label, p in labelled:
        if label not in _PHASES:
            continue
        dur[label] += int(end[p] - start[p])
        if label == "prefill":
            first_token = int(end[p]) if first_token is None else max(first_token, int(end[p]))
        if label == "decode":
            n_decode += 1
    rs = int(start[r])
    tcode = int(table["trace_id"][r])
    row: LatencyRow = {
        "request": table.strings["trace_id"][tcode] or table.strings["name"][int(table["name"][r])],
        "start_ns": rs,
        "duration_ns": int(end[r] - start[r]),
        "ttft_ns": first_token - rs if first_token is not None else None,
        "tpot_ns": dur["decode"] // n_decode if n_decode > 1 else None,
        "queue_ns": dur["queue"],
        "prefill_ns": dur["prefill"],
        "decode_ns": dur["decode"],
        "decode_steps": n_decode,
    }
    if parts is not None:
        row["ttft_parts_ns"] = parts
        row["ttft_client_ns"] = sum(parts.values())
    return row, first_token


def _latency_summary(rows: list[LatencyRow]) -> LatencySummary:
    """TTFT and TPOT percentiles, and the shares of the summed TTFT spent queued, in
    prefill, in layers and in collectives (over the requests with a TTFT)."""
    ttfts = [x["ttft_ns"] for x in rows if x["ttft_ns"] is not None]
    tpots = [x["tpot_ns"] for x in rows if x["tpot_ns"] is not None]
    total_ttft = sum(ttfts)
    with_ttft = [x for x in rows if x["ttft_ns"]]

    def share(parts: list[int]) -> float | None:
        return round(100.0 * sum(parts) / total_ttft, 4) if total_ttft else None

    return {
        "ttft_p50_ns": _pct(ttfts, 50),
        "ttft_p90_ns": _pct(ttfts, 90),
        "ttft_p99_ns": _pct(ttfts, 99),
        "tpot_p50_ns": _pct(tpots, 50),
        "tpot_p99_ns": _pct(tpots, 99),
        "ttft_queue_pct": share([x["queue_ns"] for x in with_ttft]),
        "ttft_prefill_pct": share([x["prefill_ns"] for x in with_ttft]),
        "ttft_layers_pct": share([x.get("ttft_layers_ns", 0) for x in with_ttft]),
        "ttft_collectives_pct": share([x.get("ttft_collectives_ns", 0) for x in with_ttft]),
    }


def request_latency(
    table: EventTable,
    *,
    limit: int = 200,
    busy: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> RequestLatency:
    """TTFT and TPOT per request, with their breakdown.

    Args:
        table: the (aligned) event table.
        limit: at most this many per-request rows in the output (slowest TTFT first).
        busy: per device name, more busy intervals of it (starts, ends on the table's
            timeline): device rows that are not in ``table`` (a cluster's workers keep them
            and send their union); joined with the table's rows of the device by union.

    Returns:
        ``{"count", "summary", "ttft_breakdown", "requests"}``; an empty table gives
        ``count`` 0 (and no ``ttft_breakdown``).
    """
    req_rows = np.flatnonzero(table["category"] == Category.REQUEST)
    if len(req_rows) == 0:
        return {"count": 0, "summary": None, "requests": []}
    trace, span, parent = table["trace_id"], table["span_id"], table["parent_span_id"]
    by_trace = _phases_by_trace(table)
    below = _Below.of(table)
    out: list[LatencyRow] = []
    #: each row's TTFT window, for the devices' busy time (of the rows listed only)
    window: dict[int, tuple[int, int]] = {}
    for r in req_rows.tolist():
        tcode = int(trace[r])
        phases = [p for p in by_trace.get(tcode, []) if tcode > 0 or parent[p] == span[r]]
        row, first_token = _latency_row(table, r, phases)
        if first_token is not None:
            a, b = row["start_ns"], first_token
            layers, colls, how = below.within(tcode, a, b)
            row["ttft_layers_ns"], row["ttft_collectives_ns"], row["attribution"] = (
                layers,
                colls,
                how,
            )
            window[id(row)] = (a, b)
        out.append(row)
    summary = _latency_summary(out)
    out.sort(key=lambda x: -(x["ttft_ns"] or 0))
    devices = _device_coverage(table, busy)
    _devices_busy([r for r in out[:limit] if id(r) in window], window, devices)
    return {
        "count": len(out),
        "summary": summary,
        "ttft_breakdown": _ttft_breakdown_summary(out),
        "requests": out[:limit],
    }


def _devices_busy(
    rows: list[LatencyRow], window: dict[int, tuple[int, int]], devices: dict[str, _Coverage]
) -> None:
    """Set each row's ``ttft_devices_ns``: every device's busy time inside the row's TTFT
    window (devices not busy left out), one vectorised query per device for all the rows.
    Only the rows listed get it: the devices times the requests would grow as the square of
    the cluster."""
    if not rows:
        return
    a = np.asarray([window[id(r)][0] for r in rows], dtype=np.int64)
    b = np.asarray([window[id(r)][1] for r in rows], dtype=np.int64)
    names = sorted(devices)
    busy = np.stack([devices[d].within_many(a, b) for d in names]) if names else None
    for k, row in enumerate(rows):
        if busy is None:
            row["ttft_devices_ns"] = {}
            continue
        col = busy[:, k]
        row["ttft_devices_ns"] = {names[i]: int(col[i]) for i in np.flatnonzero(col > 0).tolist()}


def _ttft_parts(
    labelled: list[tuple[str, int]], start: np.ndarray, end: np.ndarray
) -> dict[str, int] | None:
    """The five parts of a disaggregated request's client-seen TTFT, each measured on the clock
    of the host that recorded it (so no part spans two hosts' clocks), or None when the
    request lacks one (served by one engine, or a phase not traced)."""
    got: dict[str, int] = {}
    for label, p in labelled:
        if label in TTFT_PARTS and label not in got:
            if label == "queue" and got:
                continue
            got[label] = int(end[p] - start[p])
    if len(got) != len(TTFT_PARTS):
        return None
    return {k: got[k] for k in TTFT_PARTS}


def _ttft_breakdown_summary(rows: list[LatencyRow]) -> TtftBreakdown | None:
    """Medians and p99 of each TTFT part over the requests that have all five."""
    with_parts = [r for r in rows if "ttft_parts_ns" in r]
    if not with_parts:
        return None
    part = {k: [r["ttft_parts_ns"][k] for r in with_parts] for k in TTFT_PARTS}
    client = [r["ttft_client_ns"] for r in with_parts]
    total = sum(client)
    return {
        "requests": len(with_parts),
        "queue_p50_ns": _pct(part["queue"], 50),
        "queue_p99_ns": _pct(part["queue"], 99),
        "prefill_p50_ns": _pct(part["prefill"], 50),
        "prefill_p99_ns": _pct(part["prefill"], 99),
        "kv_transfer_p50_ns": _pct(part["kv_transfer"], 50),
        "kv_transfer_p99_ns": _pct(part["kv_transfer"], 99),
        "decode_queue_p50_ns": _pct(part["decode_queue"], 50),
        "decode_queue_p99_ns": _pct(part["decode_queue"], 99),
        "first_decode_step_p50_ns": _pct(part["first_decode_step"], 50),
        "first_decode_step_p99_ns": _pct(part["first_decode_step"], 99),
        "client_p50_ns": _pct(client, 50),
        "client_p99_ns": _pct(client, 99),
        "share_pct": {
            k: round(100.0 * sum(part[k]) / total, 4) if total else None for k in TTFT_PARTS
        },
    }


# -- per-request accelerator time and energy under continuous batching -----------------------


@dataclass(frozen=True)
class EngineStep:
    """One engine step as its ``accel.engine.step`` span records it (times on its host's
    clock, ns): the requests it served with the prompt and generated tokens it computed for
    each, its device busy time summed over its chips (-1 when not measured)."""

    host: str
    step: int
    start_ns: int
    end_ns: int
    device_ns: int
    chips: int
    request_ids: tuple[str, ...]
    prefill_tokens: tuple[int, ...]
    decode_tokens: tuple[int, ...]


def _int_list(v: Any) -> tuple[int, ...] | None:
    if not isinstance(v, (list, tuple)):
        return None
    out = []
    for x in v:
        try:
            out.append(int(x))
        except (TypeError, ValueError):
            return None
    return tuple(out)


def engine_step_from_attributes(
    attrs: Mapping[str, Any], *, start_ns: int, end_ns: int, where: str = ""
) -> EngineStep:
    """An :class:`EngineStep` from an ``accel.engine.step`` span's attributes.

    Raises:
        InputError: the request and token lists are missing, not lists or not aligned.

    >>> s = engine_step_from_attributes({"accel.engine.step.index": 3,
    ...     "accel.engine.step.request_ids": ["a", "b"], "accel.engine.step.prefill_tokens": [8, 0],
    ...     "accel.engine.step.decode_tokens": [0, 1], "accel.host.id": "h0"}, start_ns=0, end_ns=9)
    >>> s.request_ids, s.prefill_tokens, s.device_ns
    (('a', 'b'), (8, 0), -1)
    """
    ids = attrs.get(ACCEL_ENGINE_STEP_REQUEST_IDS)
    pre = _int_list(attrs.get(ACCEL_ENGINE_STEP_PREFILL_TOKENS))
    dec = _int_list(attrs.get(ACCEL_ENGINE_STEP_DECODE_TOKENS))
    step = attrs.get(ACCEL_ENGINE_STEP_INDEX, -1)
    if not isinstance(ids, (list, tuple)) or pre is None or dec is None:
        raise InputError(
            "an accel.engine.step span needs its request ids and token lists",
            path=where or None,
            record=f"step {step}",
        )
    if not (len(ids) == len(pre) == len(dec)):
        raise InputError(
            f"request ids ({len(ids)}), prefill tokens ({len(pre)}) and decode tokens "
            f"({len(dec)}) are not aligned",
            path=where or None,
            record=f"step {step}",
        )
    dev = attrs.get(ACCEL_ENGINE_STEP_DEVICE_TIME_NS)
    chips = attrs.get(ACCEL_ENGINE_STEP_CHIPS)
    return EngineStep(
        host=str(attrs.get(ACCEL_HOST_ID, "")),
        step=int(step) if isinstance(step, int) else -1,
        start_ns=int(start_ns),
        end_ns=int(end_ns),
        device_ns=int(dev) if isinstance(dev, int) and dev >= 0 else -1,
        chips=int(chips) if isinstance(chips, int) and chips > 0 else 1,
        request_ids=tuple(str(x) for x in ids),
        prefill_tokens=pre,
        decode_tokens=dec,
    )


#: the attributes an engine step is read from (:func:`engine_step_from_attributes`)
_STEP_KEYS = frozenset(
    {
        ACCEL_ENGINE_STEP_REQUEST_IDS,
        ACCEL_ENGINE_STEP_PREFILL_TOKENS,
        ACCEL_ENGINE_STEP_DECODE_TOKENS,
        ACCEL_ENGINE_STEP_INDEX,
        ACCEL_ENGINE_STEP_DEVICE_TIME_NS,
        ACCEL_ENGINE_STEP_CHIPS,
        ACCEL_HOST_ID,
    }
)


class _LeanSpan(msgspec.Struct, gc=False):
    """A span as the engine-step reader needs it: the attributes left undecoded until the
    span turns out to be a step (most spans of a trace file are not)."""

    name: Any = None
    startTimeUnixNano: Any = 0
    endTimeUnixNano: Any = 0
    attributes: msgspec.Raw = msgspec.Raw(b"null")


class _LeanScopeSpans(msgspec.Struct, gc=False):
    spans: list[_LeanSpan] = []


class _LeanResourceSpans(msgspec.Struct, gc=False):
    resource: msgspec.Raw = msgspec.Raw(b"null")
    scopeSpans: list[_LeanScopeSpans] = []


class _LeanRequest(msgspec.Struct, gc=False):
    resourceSpans: list[_LeanResourceSpans] = []


_LEAN = msgspec.json.Decoder(_LeanRequest)


def _step_attrs(items: Any) -> dict[str, AnyValue]:
    """The engine-step attributes among an OTLP attribute list, each value as
    ``otlp_value`` reads it (the loaders' reading; lists of plain strings or integers through
    :func:`_plain_array`)."""
    from otel_ext.analysis.loaders.spans import otlp_value

    out: dict[str, AnyValue] = {}
    if isinstance(items, list):
        for kv in items:
            if isinstance(kv, dict):
                key = kv.get("key")
                if isinstance(key, str) and key in _STEP_KEYS:
                    v = kv.get("value")
                    got = _plain_array(v)
                    out[key] = otlp_value(v) if got is None else got
    return out


_INT64 = (-(2**63), 2**63)


def _plain_array(v: Any) -> list[Any] | None:
    """``otlp_value(v)`` for an ``arrayValue`` whose elements all hold one ``stringValue`` or
    all one ``intValue`` (the request ids and token counts of a step: hundreds of elements),
    without a call per element; None for any other value (read the general way).

    >>> _plain_array({"arrayValue": {"values": [{"intValue": "8"}, {"intValue": 0}]}})
    [8, 0]
    >>> _plain_array({"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": 3}]}})
    ['a', None]
    >>> _plain_array({"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}}) is None
    True
    """
    if type(v) is not dict or len(v) != 1:
        return None
    arr = v.get("arrayValue")
    if type(arr) is not dict:
        return None
    vals = arr.get("values", [])
    if type(vals) is not list or not vals:
        return None
    if not all(type(x) is dict and len(x) == 1 for x in vals):
        return None
    key = next(iter(vals[0]))
    if key not in ("stringValue", "intValue") or not all(key in x for x in vals):
        return None
    raw = [x[key] for x in vals]
    if key == "stringValue":
        return [r if type(r) is str else None for r in raw]
    ints = [int(r) if type(r) is int or (type(r) is str and is_int_text(r)) else None for r in raw]
    lo, hi = _INT64
    return [i if i is None or lo <= i < hi else None for i in ints]


def engine_steps_of_line(line: bytes, where: str) -> list[EngineStep]:
    """The step spans of one OTLP-JSON export request (one line, ``where`` naming it in
    errors): decoded into lean structs (only the step spans' attributes are parsed); a line
    those do not fit is read the generic way. Both give the same steps.

    >>> engine_steps_of_line(b'{"resourceSpans": []}', "f:1")
    []
    """
    try:
        doc = _LEAN.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _steps_of_line_generic(line, where)
    out: list[EngineStep] = []
    for rs in doc.resourceSpans:
        res: dict[str, AnyValue] | None = None
        for ss in rs.scopeSpans:
            for sp in ss.spans:
                if sp.name != SPAN_ACCEL_ENGINE_STEP:
                    continue
                if res is None:
                    res = _step_attrs((msgspec.json.decode(rs.resource) or {}).get("attributes"))
                attrs = {**res, **_step_attrs(msgspec.json.decode(sp.attributes))}
                out.append(
                    engine_step_from_attributes(
                        attrs,
                        start_ns=int(sp.startTimeUnixNano),
                        end_ns=int(sp.endTimeUnixNano),
                        where=where,
                    )
                )
    return out


def _steps_of_line_generic(line: bytes, where: str) -> list[EngineStep]:
    try:
        doc = json.loads(line)
    except ValueError:
        return []  # not an OTLP-JSON line: the loaders report it, not us
    if not isinstance(doc, dict):
        return []
    out: list[EngineStep] = []
    for rs in doc.get("resourceSpans") or []:
        res = _step_attrs((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or []:
            for sp in ss.get("spans") or []:
                if sp.get("name") != SPAN_ACCEL_ENGINE_STEP:
                    continue
                attrs = {**res, **_step_attrs(sp.get("attributes"))}
                out.append(
                    engine_step_from_attributes(
                        attrs,
                        start_ns=int(sp.get("startTimeUnixNano", 0)),
                        end_ns=int(sp.get("endTimeUnixNano", 0)),
                        where=where,
                    )
                )
    return out


def engine_step_order(step: EngineStep) -> tuple[str, int, int]:
    """The order :func:`~otel_ext.analysis.loaders.serving_inputs.engine_steps_from_otlp`
    gives steps in (host, start, step number); the
    steps of several files read one by one, joined in file order and sorted (stably) by it,
    come in the order reading them all at once gives."""
    return (step.host, step.start_ns, step.step)


class TokenCosts(TypedDict):
    """The measured cost of a prefill token, a decode token and a step (device ns), and how
    it was found (``least_squares``, or ``equal`` weights)."""

    prefill_ns_per_token: float
    decode_ns_per_token: float
    step_ns: float
    fit: str


def fit_token_costs(steps: Sequence[EngineStep]) -> TokenCosts:
    """Measured cost of a prefill token, a decode token and a step itself (device ns), by least
    squares of each step's device time on its prefill and decode tokens (steps without a
    measured device time left out; coefficients kept non-negative).

    With fewer than three measured steps, or tokens of one kind only, the tokens are weighted
    equally (``"fit": "equal"``).

    >>> steps = [EngineStep("h", i, 0, 1, 100 + 10 * p + 2 * d, 1, ("r",), (p,), (d,))
    ...          for i, (p, d) in enumerate([(50, 0), (0, 8), (20, 4), (0, 30), (70, 2)])]
    >>> {k: round(v, 3) if isinstance(v, float) else v for k, v in fit_token_costs(steps).items()}
    {'prefill_ns_per_token': 10.0, 'decode_ns_per_token': 2.0, 'step_ns': 100.0, 'fit': 'least_squares'}
    """
    rows = [
        (sum(s.prefill_tokens), sum(s.decode_tokens), s.device_ns)
        for s in steps
        if s.device_ns >= 0
    ]
    equal: TokenCosts = {
        "prefill_ns_per_token": 1.0,
        "decode_ns_per_token": 1.0,
        "step_ns": 0.0,
        "fit": "equal",
    }
    if len(rows) < 3:
        return equal
    a = np.asarray(rows, dtype=np.float64)
    if not (a[:, 0] > 0).any() or not (a[:, 1] > 0).any():
        return equal
    x = np.column_stack([a[:, 0], a[:, 1], np.ones(len(a))])
    y = a[:, 2]
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    # non-negative: refit without a coefficient that came out negative
    for _ in range(3):
        neg = coef < 0
        if not neg.any():
            break
        keep = ~neg
        coef = np.zeros(3)
        coef[keep] = np.linalg.lstsq(x[:, keep], y, rcond=None)[0]
    if coef[0] <= 0 and coef[1] <= 0:
        return equal
    return {
        "prefill_ns_per_token": float(coef[0]),
        "decode_ns_per_token": float(coef[1]),
        "step_ns": float(coef[2]),
        "fit": "least_squares",
    }


def step_shares(step: EngineStep, costs: Mapping[str, Any]) -> np.ndarray:
    """Each request's share of one step (they sum to 1): its prefill and decode tokens at their
    measured cost, plus the step's own cost split by tokens (the rule of
    :func:`otel_ext._accounting.token_shares`, which the online
    :class:`~otel_ext.instrumentation.inference.RequestAccounting` applies too).

    >>> s = EngineStep("h", 1, 0, 1, 100, 1, ("a", "b"), (30, 0), (0, 1))
    >>> step_shares(s, {"prefill_ns_per_token": 2.0, "decode_ns_per_token": 1.0, "step_ns": 0.0}).tolist()
    [0.9836065573770492, 0.01639344262295082]
    """
    return np.asarray(token_shares(step.prefill_tokens, step.decode_tokens, costs))


def _energy_series(metrics: Any) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Per host: each device's cumulative energy counter (``hw.energy``, J) as (times, values)."""
    out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    if metrics is None or not len(metrics):
        return out
    sel = metrics.where("name", METRIC_HW_ENERGY)
    if not sel.any():
        return out
    e = metrics.select(sel)
    dev = e.codes["device"]
    host = e.codes["host"]
    for code in distinct(dev).tolist():
        m = dev == code
        order = np.argsort(e.time_ns[m], kind="stable")
        t, v = e.time_ns[m][order], e.values[m][order].astype(np.float64)
        h = e.strings["host"][int(np.bincount(host[m]).argmax())]
        if len(t) >= 2:
            out.setdefault(h, []).append((t, v))
    return out


def _nonneg_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients that came out negative dropped (refitted at zero)."""
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    for _ in range(x.shape[1]):
        neg = coef < 0
        if not neg.any():
            break
        coef = np.zeros(x.shape[1])
        if (~neg).any():
            coef[~neg] = np.linalg.lstsq(x[:, ~neg], y, rcond=None)[0]
    return coef


def _host_energy(devs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """A host's devices' counters summed at the first device's sample times."""
    t = devs[0][0]
    v = np.zeros(len(t))
    for dt, dv in devs:
        v += np.interp(t, dt, dv)
    return t, v


def step_energy(steps: Sequence[EngineStep], metrics: Any) -> np.ndarray:
    """Each step's energy (J, its host's devices together), from their cumulative energy
    counters (``hw.energy``), which are sampled more coarsely than steps last.

    Per host, each counter interval's energy is modelled as idle power over the interval
    plus, for the time each step overlaps it, an extra power that depends on the step's
    mix of prompt and generated tokens: ``ΔE = chips·(α·Δt + Σ overlap·(β_p·f + β_d·(1−f)))``
    with ``f`` the step's prefill share of tokens; ``α, β_p, β_d`` by least squares over the
    intervals (non-negative). Each interval's measured energy is then split between idle time
    and its steps in proportion to that model, so the steps of an interval never get more
    than it measured. NaN where the host has no energy counter or a step lies outside its
    samples.
    """
    series = _energy_series(metrics)
    out = np.full(len(steps), np.nan)
    by_host: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        by_host.setdefault(s.host, []).append(i)
    for host, idx in by_host.items():
        devs = series.get(host)
        if not devs:
            continue
        t, v = _host_energy(devs)
        if len(t) < 2:
            continue
        de = np.diff(v)
        dt_s = np.diff(t) / 1e9
        chips = np.asarray([steps[i].chips for i in idx], dtype=np.float64)
        st = np.asarray([steps[i].start_ns for i in idx], dtype=np.int64)
        en = np.asarray([steps[i].end_ns for i in idx], dtype=np.int64)
        f = np.asarray(
            [
                sum(steps[i].prefill_tokens)
                / max(1, sum(steps[i].prefill_tokens) + sum(steps[i].decode_tokens))
                for i in idx
            ]
        )
        n_chips = float(np.median(chips))
        # overlap of each step with each interval it touches
        k0 = np.clip(np.searchsorted(t, st, side="right") - 1, 0, len(t) - 2)
        k1 = np.clip(np.searchsorted(t, en, side="left") - 1, 0, len(t) - 2)
        pairs: list[tuple[int, int, float]] = []
        for j in range(len(idx)):
            for k in range(int(k0[j]), int(k1[j]) + 1):
                ov = (min(int(en[j]), int(t[k + 1])) - max(int(st[j]), int(t[k]))) / 1e9
                if ov > 0:
                    pairs.append((j, k, ov))
        if not pairs:
            continue
        pj = np.asarray([p[0] for p in pairs])
        pk = np.asarray([p[1] for p in pairs])
        po = np.asarray([p[2] for p in pairs])
        x = np.zeros((len(de), 3))
        x[:, 0] = n_chips * dt_s
        np.add.at(x[:, 1], pk, chips[pj] * po * f[pj])
        np.add.at(x[:, 2], pk, chips[pj] * po * (1.0 - f[pj]))
        idle_only = (x[:, 1] + x[:, 2]) == 0
        if idle_only.sum() >= 3:
            # intervals without a step measure idle power directly; fit the rest on top of it
            alpha0 = float(np.median(de[idle_only] / x[idle_only, 0]))
            coef = np.zeros(3)
            coef[0] = alpha0
            coef[1:] = _nonneg_lstsq(x[:, 1:], de - alpha0 * x[:, 0])
        else:
            coef = _nonneg_lstsq(x, de)
        alpha, beta_p, beta_d = (float(c) for c in coef)
        # the model's energy of each (step, interval) part, and of each interval
        part = chips[pj] * po * (alpha + beta_p * f[pj] + beta_d * (1.0 - f[pj]))
        model_k = x @ coef
        scale = np.where(model_k > 0, de / np.where(model_k > 0, model_k, 1.0), 0.0)
        e = np.zeros(len(idx))
        np.add.at(e, pj, part * scale[pk])
        inside = (st >= t[0]) & (en <= t[-1])
        out[np.asarray(idx)] = np.where(inside, np.maximum(e, 0.0), np.nan)
    return out


class AccountingRow(TypedDict):
    """One request's device time and energy under continuous batching."""

    request: str
    steps: int
    prefill_tokens: int
    decode_tokens: int
    accelerator_ms: float
    #: None without energy counters
    joules: float | None


class AccountingSummary(TypedDict):
    """Percentiles and totals of the requests' device time and energy."""

    accelerator_ms_p50: float
    accelerator_ms_p99: float
    accelerator_ms_total: float
    joules_p50: float | None
    joules_p99: float | None
    joules_total: float | None


class RequestAccountingSection(TypedDict):
    """The ``requests.accounting`` section (:func:`request_accounting`)."""

    count: int
    steps: int
    rule: str | None
    costs: TokenCosts | None
    conservation_max_error_pct: float | None
    energy_steps: int
    summary: AccountingSummary | None
    requests: list[AccountingRow]


_ACCOUNTING_RULE = (
    "device time and energy of a step split by c_p*prefill + c_d*decode tokens + c_s*token share"
)


@dataclass
class _RequestTotals:
    """Each request's parts summed over the steps that served it (requests in the order
    they first appear), and the worst conservation error of a step (%)."""

    device_ns: dict[str, float] = field(default_factory=dict)
    joules: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    prefill_tokens: dict[str, int] = field(default_factory=dict)
    decode_tokens: dict[str, int] = field(default_factory=dict)
    worst_error_pct: float = 0.0

    def add(self, s: EngineStep, shares: np.ndarray, energy_j: float) -> None:
        """Step ``s``'s device time (and energy, unless NaN) split by ``shares``."""
        parts = shares * s.device_ns
        if s.device_ns > 0:
            err = abs(float(parts.sum()) - s.device_ns) / s.device_ns * 100.0
            self.worst_error_pct = max(self.worst_error_pct, err)
        for i, rid in enumerate(s.request_ids):
            self.device_ns[rid] = self.device_ns.get(rid, 0.0) + float(parts[i])
            if not np.isnan(energy_j):
                self.joules[rid] = self.joules.get(rid, 0.0) + float(shares[i] * energy_j)
            self.steps[rid] = self.steps.get(rid, 0) + 1
            self.prefill_tokens[rid] = self.prefill_tokens.get(rid, 0) + s.prefill_tokens[i]
            self.decode_tokens[rid] = self.decode_tokens.get(rid, 0) + s.decode_tokens[i]

    def rows(self, *, have_energy: bool) -> list[AccountingRow]:
        """One row per request, in the order they first appear."""
        return [
            {
                "request": rid,
                "steps": self.steps[rid],
                "prefill_tokens": self.prefill_tokens[rid],
                "decode_tokens": self.decode_tokens[rid],
                "accelerator_ms": round(ns / 1e6, 6),
                "joules": round(self.joules[rid], 6)
                if have_energy and rid in self.joules
                else None,
            }
            for rid, ns in self.device_ns.items()
        ]


def _accounting_summary(rows: list[AccountingRow]) -> AccountingSummary:
    """Median, p99 and total of the requests' device time (ms) and energy (J)."""
    ms = [r["accelerator_ms"] for r in rows]
    js = [r["joules"] for r in rows if r["joules"] is not None]
    return {
        "accelerator_ms_p50": round(float(percentile(ms, 50)), 6),
        "accelerator_ms_p99": round(float(percentile(ms, 99)), 6),
        "accelerator_ms_total": round(sum(ms), 6),
        "joules_p50": round(float(percentile(js, 50)), 6) if js else None,
        "joules_p99": round(float(percentile(js, 99)), 6) if js else None,
        "joules_total": round(sum(js), 6) if js else None,
    }


def _rounded_costs(costs: TokenCosts) -> TokenCosts:
    """The costs to three decimals, as the report gives them."""
    return {
        "prefill_ns_per_token": round(costs["prefill_ns_per_token"], 3),
        "decode_ns_per_token": round(costs["decode_ns_per_token"], 3),
        "step_ns": round(costs["step_ns"], 3),
        "fit": costs["fit"],
    }


def request_accounting(
    steps: Sequence[EngineStep], *, metrics: Any = None, limit: int = 200
) -> RequestAccountingSection:
    """Device time and energy of each request under continuous batching.

    The rule: every step's measured device time (and energy) is split across the requests it
    served in proportion to ``c_p·p + c_d·d + c_s·(p + d)/T``, where ``p`` and ``d`` are the
    request's prompt and generated tokens in that step, ``T`` the step's tokens, and ``c_p``,
    ``c_d``, ``c_s`` the measured cost of a prefill token, a decode token and a step
    (:func:`fit_token_costs`, over the run's steps). Parts are summed per request. Each step's
    parts add up to its measured value (``conservation_max_error_pct``).

    Args:
        steps: the run's engine steps
            (:func:`~otel_ext.analysis.loaders.serving_inputs.engine_steps_from_otlp`).
        metrics: metric points with the devices' ``hw.energy`` counters (for joules).
        limit: at most this many requests listed (most device time first).

    Returns:
        ``{"count", "steps", "rule", "costs", "conservation_max_error_pct",
        "energy_steps", "summary", "requests"}``; per request ``request``, ``steps``,
        ``prefill_tokens``, ``decode_tokens``, ``accelerator_ms``, ``joules`` (None without
        energy counters). ``summary``: ``accelerator_ms_p50/p99``, ``joules_p50/p99``,
        ``accelerator_ms_total``, ``joules_total``.

    >>> steps = [EngineStep("h", 1, 0, 10, 400, 4, ("a", "b"), (6, 0), (0, 2)),
    ...          EngineStep("h", 2, 10, 20, 200, 4, ("a", "b"), (0, 0), (1, 1))]
    >>> acc = request_accounting(steps)
    >>> [(r["request"], r["accelerator_ms"]) for r in acc["requests"]]
    [('a', 0.0004), ('b', 0.0002)]
    >>> acc["conservation_max_error_pct"] < 1e-9
    True
    """
    measured = [s for s in steps if s.device_ns >= 0]
    if not measured:
        return {"count": 0, "steps": len(steps), "rule": None, "costs": None,
                "conservation_max_error_pct": None, "energy_steps": 0, "summary": None,
                "requests": []}  # fmt: skip
    costs = fit_token_costs(measured)
    energy = step_energy(measured, metrics)
    totals = _RequestTotals()
    for k, s in enumerate(measured):
        totals.add(s, step_shares(s, costs), energy[k])
    rows = totals.rows(have_energy=bool(np.isfinite(energy).any()))
    summary = _accounting_summary(rows)
    rows.sort(key=lambda r: (-r["accelerator_ms"], r["request"]))
    return {
        "count": len(rows),
        "steps": len(measured),
        "rule": _ACCOUNTING_RULE,
        "costs": _rounded_costs(costs),
        "conservation_max_error_pct": totals.worst_error_pct,
        "energy_steps": int(np.isfinite(energy).sum()),
        "summary": summary,
        "requests": rows[:limit],
    }
