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
from typing import Any

import numpy as np

from otel_ext.analysis.loaders._common import LoadContext, ns_or_none
from otel_ext.analysis.loaders.spans import otlp_attrs, otlp_requests

__all__ = ["MetricPoints", "load_otlp_metrics_text"]

_STR_COLS = ("name", "kind", "device", "host", "link", "attrs", "source")


@dataclass
class MetricPoints:
    """Metric data points in columns: ``time_ns``, ``start_time_ns``, ``values``, ``count``
    (numpy) and dictionary-encoded ``name``, ``kind``, ``device``, ``host``, ``link``,
    ``attrs``, ``source``."""

    time_ns: np.ndarray
    start_time_ns: np.ndarray
    values: np.ndarray
    count: np.ndarray
    codes: dict[str, np.ndarray]
    strings: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.time_ns.shape[0])

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
        )


def _point_value(p: dict[str, Any]) -> float | None:
    for key in ("asDouble", "asInt"):
        if key in p:
            try:
                return float(p[key])
            except (TypeError, ValueError):
                return None
    return None


def load_otlp_metrics_text(text: str, *, ctx: LoadContext) -> MetricPoints:
    """Points of an OTLP-JSON metrics file (one ``ExportMetricsServiceRequest`` per line)."""
    from semantic_conventions import attributes as A

    rows: list[dict[str, Any]] = []
    for lineno, resource_metrics in otlp_requests(
        text, ctx=ctx, key="resourceMetrics", what="ExportMetricsServiceRequest"
    ):
        for rm in resource_metrics:
            if not isinstance(rm, dict):
                continue
            res = otlp_attrs((rm.get("resource") or {}).get("attributes"))
            for sm in rm.get("scopeMetrics") or []:
                for metric in (sm or {}).get("metrics") or []:
                    if not isinstance(metric, dict) or not isinstance(metric.get("name"), str):
                        ctx.bad(f"line {lineno}", "metric without a name")
                        continue
                    for kind in ("gauge", "sum", "histogram", "exponentialHistogram"):
                        body = metric.get(kind)
                        if not isinstance(body, dict):
                            continue
                        for pi, p in enumerate(body.get("dataPoints") or []):
                            record = f"line {lineno} metric {metric['name']} point {pi}"
                            if not isinstance(p, dict):
                                ctx.bad(record, "data point is not an object")
                                continue
                            t = ns_or_none(p.get("timeUnixNano"))
                            if t is None:
                                ctx.bad(record, "timeUnixNano missing or not an integer")
                                continue
                            attrs = dict(res)
                            attrs.update(otlp_attrs(p.get("attributes")))
                            if kind in ("histogram", "exponentialHistogram"):
                                value = _point_value({"asDouble": p.get("sum", "nan")})
                                count = int(p.get("count", 0) or 0)
                            else:
                                value = _point_value(p)
                                count = -1
                            if value is None:
                                ctx.bad(record, "value missing or not a number")
                                continue
                            rows.append(
                                dict(
                                    name=metric["name"],
                                    kind=kind,
                                    time_ns=t,
                                    start_time_ns=ns_or_none(p.get("startTimeUnixNano")) or 0,
                                    value=value,
                                    count=count,
                                    device=attrs.get(A.ACCEL_DEVICE_ID),
                                    host=attrs.get(A.ACCEL_HOST_ID),
                                    link=attrs.get(A.ACCEL_LINK_ID),
                                    attrs=json.dumps(attrs, sort_keys=True, default=str),
                                    source=ctx.path,
                                )
                            )
    return MetricPoints.from_rows(rows)
