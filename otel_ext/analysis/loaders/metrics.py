"""OTLP-JSON metrics files (``metrics.jsonl``) to a small columnar table of points.

One row per data point: metric name, kind (gauge, sum, histogram), time, value (a histogram
point's value is its sum, with ``count`` beside it), the device/host/link it is about
(``accel.device.id``, ``accel.host.id``, ``accel.link.id`` from the point's or its resource's
attributes) and every attribute as sorted JSON text (``attrs``) for anything else.

>>> m = MetricPoints.from_rows([dict(name="accel.clock.frequency", time_ns=5, value=1.4e9,
...                                  device="host0/chip1")])
>>> len(m), m.string("device", 0), float(m.values[0])
(1, 'host0/chip1', 1400000000.0)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from opentelemetry.util.types import AnyValue

from otel_ext.analysis.loaders._common import LoadContext, ns_or_none
from otel_ext.analysis.loaders.spans import otlp_attrs
from otel_ext.exporters.otlp_format import (
    DataPoint,
    LeanPoint,
    RequestError,
    careful_items,
    decode_metrics_lean,
    raw_attributes,
)

__all__ = ["MetricPoints", "MetricRow", "load_otlp_metrics_lines", "load_otlp_metrics_pieces"]

_STR_COLS = ("name", "kind", "device", "host", "link", "attrs", "source")


@dataclass
class MetricPoints:
    """Metric data points in columns: ``time_ns``, ``start_time_ns``, ``values``, ``count``
    (numpy) and dictionary-encoded ``name``, ``kind``, ``device``, ``host``, ``link``,
    ``attrs``, ``source``; ``left_out``: how many points of the files these came from were
    left where they were read (:meth:`only_names`), counted in :attr:`total`."""

    time_ns: np.ndarray
    start_time_ns: np.ndarray
    values: np.ndarray
    count: np.ndarray
    codes: dict[str, np.ndarray]
    strings: dict[str, list[str]] = field(default_factory=dict)
    left_out: int = 0

    def __len__(self) -> int:
        return int(self.time_ns.shape[0])

    @property
    def total(self) -> int:
        """The points these stand for: those here and those left out."""
        return len(self) + self.left_out

    def only_names(self, names: Iterable[str]) -> MetricPoints:
        """The points of the metrics ``names`` (the others counted in ``left_out``), with
        every string dictionary whole, so that joining them gives the codes joining all the
        points gives.

        >>> p = MetricPoints.from_rows([dict(name=n, time_ns=t) for n, t in
        ...     [("hw.power", 1), ("hw.energy", 2), ("hw.power", 3)]])
        >>> q = p.only_names({"hw.energy"})
        >>> len(q), q.total, q.strings["name"] == p.strings["name"]
        (1, 3, True)
        """
        chosen = set(names)
        wanted = [i for i, s in enumerate(self.strings.get("name", [])) if s in chosen]
        keep = np.isin(self.codes["name"], np.asarray(wanted, dtype=np.int32))
        out = self.select(keep)
        out.left_out = self.left_out + int(len(self) - keep.sum())
        return out

    def string(self, column: str, row: int) -> str:
        return self.strings[column][int(self.codes[column][row])]

    def select(self, mask: np.ndarray) -> MetricPoints:
        """The points where ``mask`` is true."""
        return MetricPoints(
            self.time_ns[mask],
            self.start_time_ns[mask],
            self.values[mask],
            self.count[mask],
            {k: v[mask] for k, v in self.codes.items()},
            dict(self.strings),
            self.left_out,
        )

    def where(self, column: str, value: str) -> np.ndarray:
        """A mask of the rows whose ``column`` equals ``value``."""
        try:
            c = self.strings[column].index(value)
        except ValueError:
            return np.zeros(len(self), dtype=bool)
        return self.codes[column] == c

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> MetricPoints:
        dicts: dict[str, dict[str, int]] = {c: {"": 0} for c in _STR_COLS}
        t: list[int] = []
        st: list[int] = []
        v: list[float] = []
        n: list[int] = []
        codes: dict[str, list[int]] = {c: [] for c in _STR_COLS}
        for r in rows:
            t.append(int(r.get("time_ns", 0)))
            st.append(int(r.get("start_time_ns", 0) or 0))
            v.append(float(r.get("value", float("nan"))))
            n.append(int(r.get("count", -1)))
            for c in _STR_COLS:
                s = r.get(c) or ""
                d = dicts[c]
                codes[c].append(d.setdefault(str(s), len(d)))
        return cls(
            np.asarray(t, dtype=np.int64),
            np.asarray(st, dtype=np.int64),
            np.asarray(v, dtype=np.float64),
            np.asarray(n, dtype=np.int64),
            {c: np.asarray(codes[c], dtype=np.int32) for c in _STR_COLS},
            {c: list(dicts[c]) for c in _STR_COLS},
        )

    @classmethod
    def concat(cls, parts: Sequence[MetricPoints]) -> MetricPoints:
        if not parts:
            return cls.from_rows([])
        strings: dict[str, list[str]] = {}
        codes: dict[str, np.ndarray] = {}
        for c in _STR_COLS:
            merged: dict[str, int] = {"": 0}
            pieces = []
            for p in parts:
                lookup = np.asarray(
                    [merged.setdefault(s, len(merged)) for s in p.strings[c]], dtype=np.int32
                )
                pieces.append(lookup[p.codes[c]])
            codes[c] = np.concatenate(pieces).astype(np.int32)
            strings[c] = list(merged)
        return cls(
            np.concatenate([p.time_ns for p in parts]),
            np.concatenate([p.start_time_ns for p in parts]),
            np.concatenate([p.values for p in parts]),
            np.concatenate([p.count for p in parts]),
            codes,
            strings,
            sum(p.left_out for p in parts),
        )


_KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")
_COUNT_LIMIT = 2**62


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _count(v: Any) -> int | None:
    """A histogram's ``count`` (a JSON integer or digit string, below 2**62), else None."""
    if type(v) is int:
        return v if 0 <= v < _COUNT_LIMIT else None
    if isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 20:
        i = int(v)
        return i if i < _COUNT_LIMIT else None
    return None


class MetricRow(TypedDict):
    """One metric point as a row of :class:`MetricPoints` (the typed decoder's path)."""

    name: str
    kind: str
    time_ns: int
    start_time_ns: int
    value: float
    count: int
    device: AnyValue
    host: AnyValue
    link: AnyValue
    attrs: str
    source: str


class _Rows:
    """The points of a file as rows, and the caches that describe their attributes."""

    def __init__(self, ctx: LoadContext) -> None:
        from otel_ext.semconv import attributes as A

        self.ctx = ctx
        self.rows: list[MetricRow] = []
        self.keys = (A.ACCEL_DEVICE_ID, A.ACCEL_HOST_ID, A.ACCEL_LINK_ID)
        self.n_points = 0
        #: (resource id, raw attribute text) -> (device, host, link, attrs JSON), or the problem
        self.attr_cache: dict[tuple[str, bytes], tuple[Any, Any, Any, str] | str] = {}
        self.res_keys: dict[int, str] = {}  # id of a resource's dict (kept alive) -> its text

    def metric(self, lineno: int, res: dict[str, AnyValue], metric: Any) -> None:
        ctx = self.ctx
        if not metric.name:
            ctx.bad(f"line {lineno}", "metric without a name")
            return
        bodies = [(k, getattr(metric, k)) for k in _KINDS if getattr(metric, k) is not None]
        if not bodies:
            ctx.bad(f"line {lineno} metric {metric.name}", "metric has no data (no gauge, sum, "
                    "histogram, exponentialHistogram or summary)")  # fmt: skip
            return
        for kind, body in bodies:
            for pi, p in enumerate(body.dataPoints):
                self.point(f"line {lineno} metric {metric.name} point {pi}", res, metric.name,
                           kind, p)  # fmt: skip

    def point(
        self, record: str, res: dict[str, AnyValue], name: str, kind: str, p: DataPoint | LeanPoint
    ) -> None:
        ctx = self.ctx
        self.n_points += 1
        t = ns_or_none(p.timeUnixNano)
        if t is None:
            ctx.bad(record, "timeUnixNano missing or not an integer")
            return
        start = 0
        if p.startTimeUnixNano is not None:
            st = ns_or_none(p.startTimeUnixNano)
            if st is None:
                ctx.bad(record, "startTimeUnixNano not an integer")
                return
            start = st
        if kind in ("histogram", "exponentialHistogram", "summary"):
            count = _count(p.count if p.count is not None else 0)
            if count is None:
                ctx.bad(record, f"count is not a non-negative 64-bit integer: {p.count!r:.40}")
                return
            value = _number(p.sum) if p.sum is not None else float("nan")
            if value is None:
                ctx.bad(record, f"sum is not a number: {p.sum!r:.40}")
                return
        else:
            raw = p.asDouble if p.asDouble is not None else p.asInt
            value = _number(raw)
            count = -1
            if value is None:
                ctx.bad(record, "value missing or not a number")
                return
        if isinstance(p, LeanPoint):
            got = self.described(res, bytes(p.attributes))
            if isinstance(got, str):
                ctx.bad(record, got)
                return
        else:
            got = self._describe(res, p.attributes)
        dev, host, link, text = got
        self.rows.append(
            {"name": name, "kind": kind, "time_ns": t, "start_time_ns": start, "value": value,
             "count": count, "device": dev, "host": host, "link": link, "attrs": text,
             "source": ctx.path}
        )  # fmt: skip

    def described(self, res: dict[str, AnyValue], text_b: bytes) -> tuple[Any, Any, Any, str] | str:
        """(device, host, link, attrs JSON) of a point's raw attributes text under ``res``,
        or the problem: once per distinct (resource, text)."""
        rk = self.res_keys.get(id(res))
        if rk is None:  # resources alike across lines share their cache entries
            rk = self.res_keys[id(res)] = json.dumps(res, sort_keys=True, default=str)
        got = self.attr_cache.get((rk, text_b))
        if got is None:
            try:
                kvs = raw_attributes(text_b)
            except RequestError as e:
                got = f"attributes: {e}"
            else:
                got = self._describe(res, kvs)
            self.attr_cache[(rk, text_b)] = got
        return got

    def _describe(self, res: dict[str, AnyValue], kvs: Any) -> tuple[Any, Any, Any, str]:
        attrs = dict(res)
        attrs.update(otlp_attrs(kvs))
        dev, host, link = (attrs.get(k) for k in self.keys)
        return dev, host, link, json.dumps(attrs, sort_keys=True, default=str)


def load_otlp_metrics_lines(
    lines: Iterable[tuple[int, bytes]], *, ctx: LoadContext
) -> MetricPoints:
    """Points of an OTLP-JSON metrics file given as ``(line number, line bytes)``, through
    the typed decoder (:func:`load_otlp_metrics_pieces` is the fast entry).

    Each line is decoded by the project's OTLP-JSON decoder; a line it rejects (a member of
    the wrong type, too deep) is re-read one metric at a time, so that a bad metric costs its
    points (named), not the line.
    """
    out = _Rows(ctx)
    resources: list[dict[str, AnyValue]] = []  # kept alive: the cache keys on their ids
    for lineno, line in lines:
        _typed_line(out, lineno, line, resources)
    return MetricPoints.from_rows(out.rows)


def _typed_line(out: _Rows, lineno: int, line: bytes, resources: list[dict[str, AnyValue]]) -> None:
    """One line's points through the typed decoder, appended to ``out.rows``."""
    ctx = out.ctx
    try:
        req = decode_metrics_lean(line)
    except RequestError:
        try:
            items = list(careful_items(line, "resourceMetrics"))
        except RequestError as e:
            ctx.bad(f"line {lineno}", str(e))
            return
        cache: dict[int, dict[str, AnyValue]] = {}
        for where, resource, metric, err in items:
            if err is not None:
                ctx.bad(f"line {lineno} {where}".rstrip(), str(err))
                continue
            res = cache.get(id(resource))
            if res is None:
                res = cache[id(resource)] = (
                    otlp_attrs(resource.attributes) if resource is not None else {}
                )
                resources.append(res)
            out.metric(lineno, res, metric)
        return
    for rm in req.resourceMetrics:
        res = otlp_attrs(rm.resource.attributes) if rm.resource is not None else {}
        resources.append(res)
        for sm in rm.scopeMetrics:
            for metric in sm.metrics:
                out.metric(lineno, res, metric)


def load_otlp_metrics_pieces(
    pieces: Iterable[bytes] | bytes,
    *,
    ctx: LoadContext,
    max_line: int,
    threads: int | None = None,
    chunk_bytes: int | None = None,
) -> MetricPoints:
    """Points of an OTLP-JSON metrics file given as byte pieces (any cut) or whole.

    The compiled extractor (``_cscan.scan_otlp_metrics_lines``) reads chunks of whole lines
    on ``threads`` threads (as for spans: :mod:`otel_ext.analysis.loaders._otlp_fast`),
    giving each point's name, kind, times, value, count and the raw text of its attributes;
    device, host, link and the attributes' JSON are worked out once per distinct (resource,
    attributes text). The lines it is not sure of, and those whose attributes the typed
    decoder rejects, are read by the typed path (:func:`load_otlp_metrics_lines`) in their
    places: the same points, the same records named.

    Raises:
        InputError: a line longer than ``max_line`` bytes (``path`` unset), or a bad point
            when ``ctx`` does not keep going.
    """
    from otel_ext.analysis.loaders.spans import _cscan, iter_lines

    whole = isinstance(pieces, bytes | bytearray)
    if _cscan is None:
        given = [pieces] if whole else pieces
        return load_otlp_metrics_lines(iter_lines(given, max_line=max_line), ctx=ctx)  # type: ignore[arg-type]
    from otel_ext.analysis.loaders._otlp_fast import (
        LineTooLong,
        chunks_of,
        line_too_long,
        scan_chunks,
    )

    scan_lines = _cscan.scan_otlp_metrics_lines

    def scan(chunk: Any) -> tuple[Any, ...]:
        return scan_lines(chunk, 1, max_line)  # type: ignore[no-any-return]

    out = _Rows(ctx)
    resources: list[dict[str, AnyValue]] = []
    parts: list[MetricPoints] = []
    offset = 0
    chunks = chunks_of(pieces, max_line=max_line, chunk_bytes=chunk_bytes)
    try:
        for chunk, res in scan_chunks(chunks, scan, threads=threads):
            long_line = _add_chunk(out, parts, resources, chunk, res, offset)
            if long_line:
                raise line_too_long(max_line, long_line)
            offset += res[16]
    except LineTooLong:
        raise line_too_long(max_line, offset + 1) from None
    if not parts:
        return MetricPoints.from_rows([])
    return parts[0] if len(parts) == 1 else MetricPoints.concat(parts)


def _add_chunk(
    out: _Rows,
    parts: list[MetricPoints],
    resources: list[dict[str, AnyValue]],
    buf: Any,
    res: tuple[Any, ...],
    offset: int,
) -> int:
    """A chunk's points (the compiled extractor's, the typed path's for the lines it left)
    appended to ``parts`` in file order; returns the number of a line too long, or 0."""
    (n, names, name_codes, kinds, time_b, start_b, values_b, counts_b, attr_b, res_b, line_b,
     _pidx, texts, res_attr_b, fallback_b, long_line, _last) = res  # fmt: skip
    ctx = out.ctx
    line_of = np.frombuffer(line_b, np.int64) + offset
    typed_lines = {int(r[0]) + offset: (int(r[1]), int(r[2]))
                   for r in np.frombuffer(fallback_b, np.int64).reshape(-1, 3).tolist()}  # fmt: skip
    keep = np.ones(n, bool)
    if n:
        attr = np.frombuffer(attr_b, np.int32).astype(np.int64)
        res_of = np.frombuffer(res_b, np.int64)
        res_attr = np.frombuffer(res_attr_b, np.int32)
        width = len(texts)
        u, inv = np.unique(res_of * width + attr, return_inverse=True)
        inv = inv.reshape(-1)
        res_dicts: dict[int, dict[str, AnyValue] | None] = {}
        described: list[tuple[Any, Any, Any, str] | None] = []
        for r, a in zip((u // width).tolist(), (u % width).tolist()):
            if r not in res_dicts:
                try:
                    rd: dict[str, AnyValue] | None = otlp_attrs(raw_attributes(texts[res_attr[r]]))
                except RequestError:
                    rd = None
                res_dicts[r] = rd
                if rd is not None:
                    resources.append(rd)  # kept alive: the cache keys on its id
            rd = res_dicts[r]
            got = out.described(rd, texts[a]) if rd is not None else "resource"
            described.append(None if isinstance(got, str) else got)
        bad = np.fromiter((d is None for d in described), bool, count=len(described))
        if bad.any():  # the typed path reads those lines and names their bad points
            bad_rows = bad[inv]
            for line in np.unique(line_of[bad_rows]).tolist():
                typed_lines[line] = _line_span(buf, line - offset)
            keep = ~np.isin(line_of, list(typed_lines))
    fast = None
    if n and keep.any():
        cols: dict[str, list[str]] = {}
        luts: dict[str, np.ndarray] = {}
        for j, col in enumerate(("device", "host", "link", "attrs")):
            lookup: dict[str, int] = {"": 0}
            codes = []
            for d in described:
                v = "" if d is None else d[j]
                codes.append(lookup.setdefault(str(v or ""), len(lookup)))
            cols[col] = list(lookup)
            luts[col] = np.asarray(codes, np.int32)
        name_of = np.frombuffer(name_codes, np.int32)
        used = np.zeros(len(names), bool)
        used[0] = True
        used[name_of] = True
        name_idx = np.flatnonzero(used)
        name_lut = np.zeros(len(names), np.int32)
        name_lut[name_idx] = np.arange(len(name_idx))
        kind_of = np.frombuffer(kinds, np.uint8)
        present = np.flatnonzero(np.bincount(kind_of, minlength=len(_KINDS)))
        kind_lut = np.zeros(len(_KINDS), np.int32)
        kind_lut[present] = np.arange(1, len(present) + 1)
        kind_strings = ["", *(_KINDS[k] for k in present.tolist())]
        fast = MetricPoints(
            np.frombuffer(time_b, np.int64).copy(),
            np.frombuffer(start_b, np.int64).copy(),
            np.frombuffer(values_b, np.float64).copy(),
            np.frombuffer(counts_b, np.int64).copy(),
            {
                "name": name_lut[name_of],
                "kind": kind_lut[kind_of],
                **{c: luts[c][inv] for c in cols},
                "source": np.ones(n, np.int32),
            },
            {
                "name": [names[i] for i in name_idx.tolist()],
                "kind": kind_strings,
                **cols,
                "source": ["", ctx.path],
            },
        )
    prev = 0
    for line in sorted(typed_lines):
        i = int(np.searchsorted(line_of, line))
        if fast is not None and i > prev:
            parts.append(fast.select(np.arange(prev, i)))
        prev = int(np.searchsorted(line_of, line, side="right"))
        a, b = typed_lines[line]
        _typed_line(out, line, bytes(buf[a:b]), resources)
        if out.rows:
            parts.append(MetricPoints.from_rows(out.rows))
            out.rows = []
    if fast is not None and n > prev:
        parts.append(fast if prev == 0 else fast.select(np.arange(prev, n)))
    return int(long_line) + offset if long_line else 0


def _line_span(buf: Any, number: int) -> tuple[int, int]:
    """(start, stop) of line ``number`` (1 is the first) of a chunk."""
    data = bytes(buf)
    start = 0
    for _ in range(number - 1):
        start = data.index(b"\n", start) + 1
    stop = data.find(b"\n", start)
    return start, len(data) if stop < 0 else stop
