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

from typing import Any

import numpy as np

from otel_ext._arrays import distinct, percentile
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

__all__ = ["request_latency"]

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


def _phase_of(name: str) -> str | None:
    low = name.lower()
    for p in _PHASES:
        if p in low:
            return p
    return None


def _pct(values: list[int], q: float) -> int | None:
    return int(percentile(values, q)) if values else None


def request_latency(table: EventTable, *, limit: int = 200) -> dict[str, Any]:
    """TTFT and TPOT per request, with their breakdown.

    Args:
        table: the (aligned) event table.
        limit: at most this many per-request rows in the output (slowest TTFT first).

    Returns:
        ``{"count", "summary", "requests"}``; an empty table gives ``count`` 0.
    """
    cat = table["category"]
    req_rows = np.flatnonzero(cat == Category.REQUEST)
    if len(req_rows) == 0:
        return {"count": 0, "summary": None, "requests": []}
    phase_rows = np.flatnonzero(cat == Category.PHASE)
    trace = table["trace_id"]
    span = table["span_id"]
    parent = table["parent_span_id"]
    start, end = table["start_ns"], table["end_ns"]
    names = table.strings["name"]
    by_trace: dict[int, list[int]] = {}
    for p in phase_rows.tolist():
        by_trace.setdefault(int(trace[p]), []).append(p)
    # coverage structures for attribution by time
    layer_cov = _Coverage(start[cat == Category.LAYER], end[cat == Category.LAYER])
    coll_sel = (cat == Category.COLLECTIVE) | (cat == Category.KERNEL_COMM)
    coll_cov = _Coverage(start[coll_sel], end[coll_sel])
    dev_sel = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    devices: dict[str, _Coverage] = {}
    dev_codes = table["device"][dev_sel]
    for code in distinct(dev_codes):
        rows = np.flatnonzero(dev_sel)[dev_codes == code]
        devices[table.strings["device"][int(code)] or "?"] = _Coverage(start[rows], end[rows])
    # rows of each trace, for attribution from the request's own trace
    traced = (trace > 0) & (layer_or_coll := (cat == Category.LAYER) | coll_sel)
    traced_codes = set(distinct(trace[traced]).tolist()) if layer_or_coll.any() else set()
    out = []
    for r in req_rows.tolist():
        tcode = int(trace[r])
        phases = [p for p in by_trace.get(tcode, []) if tcode > 0 or parent[p] == span[r]]
        phases.sort(key=lambda p: int(start[p]))
        labelled: list[tuple[str, int]] = []
        for k, p in enumerate(phases):
            label = _phase_of(names[int(table["name"][p])])
            if label is None:
                label = _PHASES[min(k, 2)] if len(phases) >= 3 else _PHASES[1 + min(k, 1)]
            labelled.append((label, p))
        dur = {ph: 0 for ph in _PHASES}
        n_decode = 0
        first_token = None
        for label, p in labelled:
            dur[label] += int(end[p] - start[p])
            if label == "prefill":
                first_token = int(end[p]) if first_token is None else max(first_token, int(end[p]))
            if label == "decode":
                n_decode += 1
        rs = int(start[r])
        ttft = first_token - rs if first_token is not None else None
        row: dict[str, Any] = {
            "request": table.strings["trace_id"][tcode] or names[int(table["name"][r])],
            "start_ns": rs,
            "duration_ns": int(end[r] - start[r]),
            "ttft_ns": ttft,
            "tpot_ns": dur["decode"] // n_decode if n_decode > 1 else None,
            "queue_ns": dur["queue"],
            "prefill_ns": dur["prefill"],
            "decode_ns": dur["decode"],
            "decode_steps": n_decode,
        }
        if first_token is not None:
            a, b = rs, first_token
            if tcode in traced_codes:
                own = np.flatnonzero((trace == tcode) & (start < b) & (end > a))
                oc = cat[own]
                lc = _Coverage(start[own[oc == Category.LAYER]], end[own[oc == Category.LAYER]])
                cm = (oc == Category.COLLECTIVE) | (oc == Category.KERNEL_COMM)
                cc = _Coverage(start[own[cm]], end[own[cm]])
                row["ttft_layers_ns"] = lc.within(a, b)
                row["ttft_collectives_ns"] = cc.within(a, b)
                row["attribution"] = "trace"
            else:
                row["ttft_layers_ns"] = layer_cov.within(a, b)
                row["ttft_collectives_ns"] = coll_cov.within(a, b)
                row["attribution"] = "time"
            busy = {d: c.within(a, b) for d, c in devices.items()}
            row["ttft_devices_ns"] = {d: v for d, v in sorted(busy.items()) if v > 0}
        out.append(row)
    ttfts = [x["ttft_ns"] for x in out if x["ttft_ns"] is not None]
    tpots = [x["tpot_ns"] for x in out if x["tpot_ns"] is not None]
    total_ttft = sum(ttfts)
    with_ttft = [x for x in out if x["ttft_ns"]]

    def share(key: str) -> float | None:
        if not total_ttft:
            return None
        return round(100.0 * sum(x.get(key, 0) for x in with_ttft) / total_ttft, 4)

    summary = {
        "ttft_p50_ns": _pct(ttfts, 50),
        "ttft_p90_ns": _pct(ttfts, 90),
        "ttft_p99_ns": _pct(ttfts, 99),
        "tpot_p50_ns": _pct(tpots, 50),
        "tpot_p99_ns": _pct(tpots, 99),
        "ttft_queue_pct": share("queue_ns"),
        "ttft_prefill_pct": share("prefill_ns"),
        "ttft_layers_pct": share("ttft_layers_ns"),
        "ttft_collectives_pct": share("ttft_collectives_ns"),
    }
    out.sort(key=lambda x: -(x["ttft_ns"] or 0))
    return {"count": len(out), "summary": summary, "requests": out[:limit]}
