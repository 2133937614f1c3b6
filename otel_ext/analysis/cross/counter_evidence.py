"""Counter correlation: what an implicated chip's or link's counters did at the time.

A finding says *which* chip or link; its counters say *why*. For a chip (``host1/chip2``) we
read its compute clock frequency, temperature, power and utilization; for a chip-to-chip link
(``host0/chip1-chip2``) its byte counter (as a rate), bandwidth gauge, errors and replays; for
a host's network port (``host1`` or ``host1/nic0``) the host's network bytes and NIC
bandwidth. Each series is summarised over the window asked (min, median, max, first, last, a
change point with the means before and after it) and set against the same metric on the
chip's or link's peers, so "the clock fell from 1.8 GHz to 1.2 GHz at t, while the other
chips stayed at 1.8 GHz" reads straight off the evidence.

Input is the loaders' :class:`~otel_ext.analysis.loaders.metrics.MetricPoints` (one row per
OTLP data point, with ``device``, ``host`` and ``link`` columns). Monotonic counters
(``sum`` points) become rates between consecutive points (a reset, i.e. a drop, is skipped).

>>> from otel_ext.analysis.loaders.metrics import MetricPoints
>>> rows = [dict(name="accel.device.clock.frequency", kind="gauge", time_ns=t * 10**9,
...              value=(1.8e9 if (d != "h0/chip1" or t < 5) else 1.2e9), device=d)
...         for t in range(10) for d in ("h0/chip0", "h0/chip1")]
>>> c = correlate_counters(MetricPoints.from_rows(rows), "h0/chip1")
>>> s = c["series"]["accel.device.clock.frequency"]
>>> s["before"], s["after"], s["change_ns"], s["peer_median"]
(1800000000.0, 1200000000.0, 5000000000, 1800000000.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np

from otel_ext._arrays import median
from otel_ext.semconv import metrics as M

if TYPE_CHECKING:
    from otel_ext.analysis.loaders.metrics import MetricPoints

__all__ = [
    "DEVICE_METRICS",
    "LINK_METRICS",
    "NIC_METRICS",
    "READ_METRICS",
    "CounterEvidence",
    "SeriesSummary",
    "change_point",
    "correlate_counters",
    "series_of",
]

#: what to read for a chip
DEVICE_METRICS = (
    M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY,
    M.METRIC_HW_TEMPERATURE,
    M.METRIC_HW_POWER,
    M.METRIC_ACCEL_DEVICE_UTILIZATION,
    M.METRIC_HW_GPU_UTILIZATION,
    M.METRIC_ACCEL_DEVICE_THROTTLE_REASONS,
    M.METRIC_ACCEL_MEMORY_BANDWIDTH,
)
#: what to read for a chip-to-chip link
LINK_METRICS = (
    M.METRIC_ACCEL_LINK_IO,
    M.METRIC_ACCEL_LINK_BANDWIDTH,
    M.METRIC_ACCEL_LINK_BANDWIDTH_UTILIZATION,
    M.METRIC_ACCEL_LINK_ERRORS,
    M.METRIC_ACCEL_LINK_REPLAYS,
)
#: what to read for a host's network port
NIC_METRICS = (
    M.METRIC_HW_NETWORK_IO,
    M.METRIC_ACCEL_NIC_BANDWIDTH,
    M.METRIC_HW_ERRORS,
)
_COUNTS = (M.METRIC_ACCEL_LINK_ERRORS, M.METRIC_ACCEL_LINK_REPLAYS, M.METRIC_HW_ERRORS)

#: every metric an analysis reads the points of: the counter correlation's (chips, links,
#: network ports; a port's errors for the findings) and the energy accounting's cumulative
#: energy (:func:`~otel_ext.analysis.serving.requests.step_energy`). Only these travel from a
#: cluster's workers (:meth:`~otel_ext.analysis.loaders.metrics.MetricPoints.only_names`);
#: the others are counted.
#: what the network-path findings read of the hosts' Ethernet/RoCE ports (nic_stats)
NET_PORT_METRICS = (
    M.METRIC_HW_NETWORK_IO,
    M.METRIC_HW_NETWORK_PACKETS,
    M.METRIC_HW_ERRORS,
    M.METRIC_HW_NETWORK_BANDWIDTH_LIMIT,
    M.METRIC_HW_NETWORK_UP,
)

READ_METRICS = frozenset(
    {*DEVICE_METRICS, *LINK_METRICS, *NIC_METRICS, *NET_PORT_METRICS, M.METRIC_HW_ENERGY}
)


class SeriesSummary(TypedDict):
    """One metric of a target over the window: its levels, its change point, its peers'."""

    points: int
    min: float
    median: float
    max: float
    first: float
    last: float
    change_ns: NotRequired[int]  # the change point (at least 4 points): when, and the means
    before: NotRequired[float]  # ... before it
    after: NotRequired[float]  # ... and after it
    peer_median: NotRequired[float | None]  # the same metric's median over the peers
    values: NotRequired[list[list[float]]]  # downsampled ``[time_ns, value]`` pairs


class CounterEvidence(TypedDict):
    """What a chip's, link's or network port's counters did (:func:`correlate_counters`)."""

    target: str
    kind: str  # the column the target is found in: "device", "link" or "host"
    series: dict[str, SeriesSummary]  # per metric read


#: per value of a column: its whole-series median and how often the value appears
_OwnMedians = dict[str, tuple[float, int]]


def change_point(t: np.ndarray, v: np.ndarray) -> tuple[int, float, float] | None:
    """The single split of a series that best separates two levels (least squares).

    Returns ``(time_ns, mean_before, mean_after)``, or None for fewer than 4 points.

    >>> change_point(np.arange(6), np.array([5.0, 5, 5, 2, 2, 2]))
    (3, 5.0, 2.0)
    """
    n = len(v)
    if n < 4:
        return None
    raw = v
    v = v - float(median(v))  # centred: the sums below then cancel less
    c = np.cumsum(v)
    c2 = np.cumsum(v * v)
    k = np.arange(1, n)  # split after k points
    left_sse = c2[k - 1] - c[k - 1] ** 2 / k
    right_n = n - k
    right_sum = c[-1] - c[k - 1]
    right_sse = (c2[-1] - c2[k - 1]) - right_sum**2 / right_n
    best = int(np.argmin(left_sse + right_sse)) + 1
    return int(t[best]), float(np.mean(raw[:best])), float(np.mean(raw[best:]))


def _rate(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dt = np.diff(t) / 1e9
    dv = np.diff(v)
    ok = (dt > 0) & (dv >= 0)
    return t[1:][ok], dv[ok] / dt[ok]


class _SeriesIndex:
    """The rows of one :class:`MetricPoints` grouped by (metric name, ``column`` value), once:
    one stable sort by (name, value, time), then each series is a slice found by binary
    search. A series is built at most once (memoised), so the peers every target shares are
    not rebuilt per target.
    """

    def __init__(self, points: MetricPoints, column: str) -> None:
        self.points = points
        name_c = points.codes["name"].astype(np.int64)
        col_c = points.codes[column].astype(np.int64)
        self.width = max(len(points.strings[column]), 1)
        self.order = np.lexsort((points.time_ns, col_c, name_c))
        self.keys = (name_c * self.width + col_c)[self.order]
        self.name_code = {s: i for i, s in enumerate(points.strings["name"])}
        self.col_code = {s: i for i, s in enumerate(points.strings[column])}
        self.memo: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        #: (metric, link class) -> the whole-series medians of every value, sorted, and each
        #: value's median with how often the value appears (see :func:`_peer_median`)
        self.medians: dict[tuple[str, bool | None], tuple[np.ndarray, _OwnMedians]] = {}

    def series(self, name: str, value: str) -> tuple[np.ndarray, np.ndarray]:
        got = self.memo.get((name, value))
        if got is None:
            got = self.memo[(name, value)] = self._build(name, value)
        return got

    def _build(self, name: str, value: str) -> tuple[np.ndarray, np.ndarray]:
        n, c = self.name_code.get(name), self.col_code.get(value)
        if n is None or c is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        key = n * self.width + c
        a, b = np.searchsorted(self.keys, [key, key + 1])
        if a == b:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        rows = self.order[a:b]  # sorted by time; equal times in file order
        p = self.points
        t = p.time_ns[rows]
        v = p.values[rows]
        first = int(rows.min())  # the series' kind is its first point's, in file order
        is_sum = p.strings["kind"][int(p.codes["kind"][first])] == "sum"
        # several series (attribute sets) at one timestamp: add them up, in file order
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        ut = t[starts]
        agg = np.zeros(len(ut))
        np.add.at(agg, np.repeat(np.arange(len(ut)), np.diff(np.r_[starts, len(t)])), v)
        if is_sum and name not in _COUNTS:
            return _rate(ut, agg)
        return ut, agg


def _index(points: MetricPoints, column: str) -> _SeriesIndex:
    """The series index of ``points`` for ``column``, built on first use and kept with it."""
    cache = points.__dict__.setdefault("_series_index", {})
    idx = cache.get(column)
    if idx is None:
        idx = cache[column] = _SeriesIndex(points, column)
    return idx  # type: ignore[no-any-return]


def series_of(
    points: MetricPoints, name: str, column: str, value: str
) -> tuple[np.ndarray, np.ndarray]:
    """The time-sorted series of ``name`` whose ``column`` equals ``value``; sums summed over
    their other attributes (both directions of a link's bytes, say) and made rates.

    The points are grouped by series once (:class:`_SeriesIndex`); each call is then a
    binary search and the work on that series' own rows.
    """
    return _index(points, column).series(name, value)


def _summary(t: np.ndarray, v: np.ndarray, window: tuple[int, int] | None) -> SeriesSummary:
    """The levels and change point of one series, over ``window`` when it holds 2 points."""
    if window is not None:
        keep = (t >= window[0]) & (t <= window[1])
        if keep.sum() >= 2:
            t, v = t[keep], v[keep]
    out: SeriesSummary = {
        "points": len(v),
        "min": float(v.min()),
        "median": float(median(v)),
        "max": float(v.max()),
        "first": float(v[0]),
        "last": float(v[-1]),
    }
    cp = change_point(t, v)
    if cp is not None:
        out["change_ns"], out["before"], out["after"] = cp
    return out


def _target_column(points: MetricPoints | None, target: str) -> tuple[str, str, tuple[str, ...]]:
    """Which column and metrics describe ``target``: a link, a NIC (host) or a device."""
    last = target.rsplit("/", 1)[-1]
    if "/" not in target or last.startswith("nic"):
        host = target.split("/", 1)[0]
        return "host", host, NIC_METRICS
    if "-" in last:
        return "link", target, LINK_METRICS
    return "device", target, DEVICE_METRICS


def _peers(points: MetricPoints, column: str, value: str, nic_class: bool | None) -> list[str]:
    """The values of ``column`` that are ``value``'s peers: every other non-empty one (for a
    link, only links of its kind: network ports with network ports)."""
    return [
        p
        for p in points.strings[column]
        if p and p != value and (nic_class is None or ("nic" in p.rsplit("/", 1)[-1]) == nic_class)
    ]


def _peer_median(
    points: MetricPoints, name: str, column: str, value: str, nic_class: bool | None
) -> float | None:
    """The median, over ``value``'s peers (:func:`_peers`) with points of metric ``name``, of
    each peer's whole-series median; None without such peers.

    Every value's median is computed once per metric and kept sorted, so each target costs a
    binary search instead of a pass over its peers (a pass per target is quadratic in the
    chips): the target's own median is left out of the sorted medians by index arithmetic,
    which picks the same middle values, so the result equals the median of the peers' list.

    >>> from otel_ext.analysis.loaders.metrics import MetricPoints
    >>> rows = [dict(name="hw.power", kind="gauge", time_ns=t, value=float(w + t % 2),
    ...              device=f"h0/chip{w}") for t in range(4) for w in range(4)]
    >>> pts = MetricPoints.from_rows(rows)
    >>> [_peer_median(pts, "hw.power", "device", f"h0/chip{w}", None) for w in range(4)]
    [2.5, 2.5, 1.5, 1.5]
    """
    idx = _index(points, column)
    got = idx.medians.get((name, nic_class))
    if got is None:
        vals: list[float] = []
        own: _OwnMedians = {}
        for p in _peers(points, column, "", nic_class):
            _pt, pv = idx.series(name, p)
            if len(pv):
                m = float(median(pv))
                vals.append(m)
                prev = own.get(p)
                own[p] = (m, 1 if prev is None else prev[1] + 1)
        got = idx.medians[(name, nic_class)] = (np.sort(np.asarray(vals, dtype=np.float64)), own)
    ordered, own = got
    n = len(ordered)
    mine = own.get(value)
    drop_nan = drop = 0
    at = n
    if mine is not None:
        if np.isnan(mine[0]):
            drop_nan = mine[1]
        else:
            drop, at = mine[1], int(np.searchsorted(ordered, mine[0], side="left"))
    m = n - drop - drop_nan
    if m <= 0:
        return None
    nans = n - int(np.searchsorted(ordered, np.inf, side="right"))  # np.sort puts NaN last
    if nans - drop_nan > 0:
        return float("nan")

    def nth(r: int) -> float:  # the r-th smallest peer median, the target's own left out
        return float(ordered[r if r < at else r + drop])

    half = m // 2
    if m % 2:
        return float(np.mean(np.asarray([nth(half)])))
    return float(np.mean(np.asarray([nth(half - 1), nth(half)])))


def correlate_counters(
    points: MetricPoints | None,
    target: str,
    *,
    window: tuple[int, int] | None = None,
    series_points: int = 120,
) -> CounterEvidence:
    """Summarise the counters of ``target`` (a chip, a link or a host's NIC) and its peers.

    Args:
        points: the loaded metric points (``LoadResult.metrics``).
        target: ``host1/chip2``, ``host0/chip1-chip2`` or ``host1`` (its network port).
        window: ``(start_ns, end_ns)`` to summarise over; the whole run when None.
        series_points: at most this many (time, value) pairs kept per series for plotting.

    Returns:
        ``{"target", "kind", "series": {metric: summary}}``; a summary holds points, min,
        median, max, first, last, change_ns/before/after, peer_median (the median of the same
        metric over the peers) and ``values`` (downsampled ``[time_ns, value]`` pairs).
    """
    column, value, names = _target_column(points, target)
    out: CounterEvidence = {"target": target, "kind": column, "series": {}}
    if points is None or len(points) == 0:
        return out
    nic_class = ("nic" in value.rsplit("/", 1)[-1]) if column == "link" else None
    for name in names:
        t, v = series_of(points, name, column, value)
        if len(v) == 0:
            continue
        s = _summary(t, v, window)
        if window is None:
            s["peer_median"] = _peer_median(points, name, column, value, nic_class)
        else:
            peer_medians = []
            for p in _peers(points, column, value, nic_class):
                pt, pv = series_of(points, name, column, p)
                if len(pv):
                    keep = (pt >= window[0]) & (pt <= window[1])
                    pv = pv[keep] if keep.sum() else pv
                    peer_medians.append(float(median(pv)))
            s["peer_median"] = float(median(peer_medians)) if peer_medians else None
        step = max(1, len(v) // series_points)
        s["values"] = [[int(a), float(b)] for a, b in zip(t[::step], v[::step])]
        out["series"][name] = s
    return out
