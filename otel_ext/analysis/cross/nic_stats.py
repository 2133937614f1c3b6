"""What each host's network ports did over a time window, from their counters.

A slow network path found in the traces (``hostA->hostB`` transfers far below the others)
says *where*; the ports' counters say what the hardware saw meanwhile: the throughput each
port achieved against its link speed, the errors and drops it counted, whether its link
went down. This module reads the node agent's port counters (:class:`NetDevSource` for
Ethernet/RoCE interfaces, :class:`InfinibandSource` for InfiniBand/RoCE ports, the
simulation's NICs) from the loaded metric points and returns, per host and interface:

* ``rx_bytes_per_s`` / ``tx_bytes_per_s`` and the packet rates: the increase of
  ``hw.network.io`` / ``hw.network.packets`` (per ``network.io.direction``) over the time
  between the first and last point used, divided by that time;
* ``errors`` and ``drops``: the increase of ``hw.errors`` over the same points, split by
  ``error.type`` (drops: :data:`DROP_TYPES`; every other type is an error), with their rates;
* ``speed_bytes_per_s``: the last ``hw.network.bandwidth.limit`` (bytes/s per direction) and
  ``utilization`` = the busier direction's rate over it;
* ``up``: the last ``hw.network.up`` and how many points in the window said *down*.

**The window.** Counters are read every sampling interval, so a window rarely starts and ends
on a point: the rates use the last point at or before its start through the first point at or
after its end (the smallest stretch of samples that covers it), and ``from_ns``/``to_ns`` say
which stretch that was. Without a window, every point. Gauges (speed, state) are those inside
the window, else the last one before it.

**Counters.** Points are the OTLP cumulative sums the agent exports. A point below the one
before it is a reset (an interface made again, a driver reloaded): the increase across it is
counted from zero, never negative (as the counter bridge does,
:func:`~otel_ext.counters.counter_delta`). A new start time alone is not: the agent's totals
start from the kernel's counter, so after an agent restart the series goes on from where the
kernel is, and counting the whole value again would invent traffic.

The function is pure: points in, rows out; it opens no file.

>>> import json
>>> from otel_ext.analysis.loaders.metrics import MetricPoints
>>> port = {"accel.link.id": "hB/eth0", "accel.host.id": "hB", "network.interface.name": "eth0"}
>>> def pt(name, t_s, v, **more):
...     attrs = json.dumps({**port, **more}, sort_keys=True)
...     return dict(name=name, kind="sum", time_ns=t_s * 10**9, value=v, host="hB",
...                 link="hB/eth0", attrs=attrs)
>>> rows = [pt("hw.network.io", t, 1e6 + 12.5e6 * t, **{"network.io.direction": "receive"})
...         for t in range(11)]
>>> rows += [pt("hw.errors", t, 4 * t, **{"error.type": "rx_dropped"}) for t in range(11)]
>>> rows += [dict(pt("hw.network.bandwidth.limit", t, 1.25e9), kind="gauge") for t in range(11)]
>>> (s,) = nic_stats(MetricPoints.from_rows(rows), window=(2 * 10**9, 6 * 10**9))
>>> s.host, s.interface, s.rx_bytes_per_s, s.drops, s.drops_per_s, s.utilization
('hB', 'eth0', 12500000.0, 16.0, 4.0, 0.01)
>>> s.describe()
'hB/eth0: rx 12.5 MB/s, tx -, of 1.25 GB/s (1.0 %), 0 errors, 16 drops over 4 s'
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypedDict

import numpy as np

from otel_ext.semconv import attributes as A
from otel_ext.semconv import metrics as M

if TYPE_CHECKING:
    from otel_ext.analysis.loaders.metrics import MetricPoints

__all__ = [
    "DROP_TYPES",
    "NIC_STATS_METRICS",
    "NicStat",
    "NicStatJson",
    "PathNicEvidence",
    "nic_stats",
    "path_nic_evidence",
]

#: ``error.type`` values of ``hw.errors`` that count dropped packets, not packets in error:
#: the kernel's ``rx_dropped``/``tx_dropped``/``rx_missed_errors`` (a full receive ring) and
#: InfiniBand's ``port_xmit_discards``
DROP_TYPES = frozenset({"rx_dropped", "tx_dropped", "rx_missed_errors", "port_xmit_discards"})
#: the metrics :func:`nic_stats` reads
NIC_STATS_METRICS = frozenset(
    {
        M.METRIC_HW_NETWORK_IO,
        M.METRIC_HW_NETWORK_PACKETS,
        M.METRIC_HW_ERRORS,
        M.METRIC_HW_NETWORK_BANDWIDTH_LIMIT,
        M.METRIC_HW_NETWORK_UP,
    }
)
_DIRECTIONS = {"receive": "rx", "transmit": "tx"}


class NicStatJson(TypedDict):
    """:meth:`NicStat.as_dict`: one port's row, JSON-ready."""

    host: str
    interface: str
    link: str
    from_ns: int | None
    to_ns: int | None
    rx_bytes_per_s: float | None
    tx_bytes_per_s: float | None
    rx_packets_per_s: float | None
    tx_packets_per_s: float | None
    errors: float
    drops: float
    errors_per_s: float | None
    drops_per_s: float | None
    error_types: dict[str, float]
    speed_bytes_per_s: float | None
    utilization: float | None
    up: bool | None
    down_points: int
    resets: int


class PathNicEvidence(TypedDict):
    """:func:`path_nic_evidence`: both ends' port counters of a network path."""

    src_host: str
    dst_host: str
    ports: list[NicStatJson]
    sent_bytes_per_s: float | None
    received_bytes_per_s: float | None
    errors: float
    drops: float
    summary: str


@dataclass(frozen=True)
class NicStat:
    """One network port over a window (see the module for how each figure is taken).

    Rates are per second, ``None`` where fewer than two points covered the window; byte and
    packet rates are per direction; ``errors``/``drops`` are counts over ``from_ns``..``to_ns``.
    """

    host: str
    interface: str
    link: str
    from_ns: int | None
    to_ns: int | None
    rx_bytes_per_s: float | None
    tx_bytes_per_s: float | None
    rx_packets_per_s: float | None
    tx_packets_per_s: float | None
    errors: float
    drops: float
    errors_per_s: float | None
    drops_per_s: float | None
    error_types: dict[str, float] = field(default_factory=dict)
    speed_bytes_per_s: float | None = None
    utilization: float | None = None
    up: bool | None = None
    down_points: int = 0
    resets: int = 0

    def as_dict(self) -> NicStatJson:
        """The row as JSON-ready values."""
        return {
            "host": self.host,
            "interface": self.interface,
            "link": self.link,
            "from_ns": self.from_ns,
            "to_ns": self.to_ns,
            "rx_bytes_per_s": self.rx_bytes_per_s,
            "tx_bytes_per_s": self.tx_bytes_per_s,
            "rx_packets_per_s": self.rx_packets_per_s,
            "tx_packets_per_s": self.tx_packets_per_s,
            "errors": self.errors,
            "drops": self.drops,
            "errors_per_s": self.errors_per_s,
            "drops_per_s": self.drops_per_s,
            "error_types": dict(self.error_types),
            "speed_bytes_per_s": self.speed_bytes_per_s,
            "utilization": self.utilization,
            "up": self.up,
            "down_points": self.down_points,
            "resets": self.resets,
        }

    def describe(self) -> str:
        """One line: the port, its rates against its speed, errors, drops, state."""
        speed = ""
        if self.speed_bytes_per_s:
            speed = f", of {_bytes_rate(self.speed_bytes_per_s)}"
            if self.utilization is not None:
                speed += f" ({100 * self.utilization:.1f} %)"
        span = ""
        if self.from_ns is not None and self.to_ns is not None:
            span = f" over {(self.to_ns - self.from_ns) / 1e9:.3g} s"
        state = ""
        if self.up is False:
            state = ", link down"
        elif self.down_points:
            state = f", link down at {self.down_points} points"
        return (
            f"{self.host}/{self.interface}: rx {_bytes_rate(self.rx_bytes_per_s)}, "
            f"tx {_bytes_rate(self.tx_bytes_per_s)}{speed}, {self.errors:.0f} errors, "
            f"{self.drops:.0f} drops{span}{state}"
        )


def _bytes_rate(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} B/s"


@dataclass
class _Port:
    host: str
    interface: str
    link: str
    rates: dict[str, float] = field(default_factory=dict)  # "rx_bytes" -> per second
    counts: dict[str, float] = field(default_factory=dict)  # error.type -> increase
    count_rates: dict[str, float] = field(default_factory=dict)  # error.type -> per second
    span: list[int] = field(default_factory=list)  # every (from, to) end used
    speed: tuple[int, float] | None = None
    up: tuple[int, float] | None = None
    down_points: int = 0
    resets: int = 0


def _covering(t: np.ndarray, window: tuple[int, int] | None) -> tuple[int, int]:
    """Indices ``(i0, i1)`` of the points whose stretch covers ``window`` (inclusive)."""
    n = len(t)
    if window is None:
        return 0, n - 1
    i0 = max(int(np.searchsorted(t, window[0], side="right")) - 1, 0)
    i1 = min(int(np.searchsorted(t, window[1], side="left")), n - 1)
    return i0, i1


def _increase(v: np.ndarray) -> tuple[float, int]:
    """The reset-aware increase along a counter's points and how many resets it crossed.

    >>> _increase(np.array([5.0, 7.0, 2.0, 4.0]))
    (6.0, 1)
    """
    d = np.diff(v)
    down = d < 0  # a reset: counted from zero (counter_delta without a wrap width)
    return float(np.where(down, np.maximum(v[1:], 0.0), d).sum()), int(down.sum())


class _PointAttrs(NamedTuple):
    """The attributes of a point this module reads, as text ("" when absent or empty)."""

    link: str
    interface: str
    hw_id: str
    host: str
    error_type: str
    direction: str

    @classmethod
    def parse(cls, text: str) -> _PointAttrs:
        """From a point's attributes as JSON (anything but an object reads as none)."""
        try:
            got = json.loads(text or "{}")
        except ValueError:
            got = {}
        if not isinstance(got, dict):
            got = {}
        keys = (
            A.ACCEL_LINK_ID,
            A.NETWORK_INTERFACE_NAME,
            A.HW_ID,
            A.ACCEL_HOST_ID,
            A.ERROR_TYPE,
            A.NETWORK_IO_DIRECTION,
        )
        return cls(*(str(got.get(k) or "") for k in keys))


def _port_of(host_col: str, link_col: str, attrs: _PointAttrs) -> tuple[str, str, str] | None:
    """``(host, interface, link)`` of a point, or None when it names no port."""
    link = link_col or attrs.link
    iface = attrs.interface
    if not iface and "/" in link:
        iface = link.split("/", 1)[1]
    if not iface:
        iface = attrs.hw_id
    host = host_col or attrs.host
    if not host and "/" in link:
        host = link.split("/", 1)[0]
    if not iface or not host:
        return None
    return host, iface, link or f"{host}/{iface}"


def nic_stats(
    points: MetricPoints | None,
    *,
    window: tuple[int, int] | None = None,
    hosts: Iterable[str] | None = None,
) -> list[NicStat]:
    """Per host and network interface: throughput, errors, drops, speed and state.

    Args:
        points: the loaded metric points (``LoadResult.metrics``, a
            :class:`~otel_ext.analysis.loaders.metrics.MetricPoints`); None or empty gives
            no rows.
        window: ``(start_ns, end_ns)`` on the points' clock (Unix ns); the whole run when
            None.
        hosts: only the ports of these hosts (``accel.host.id``); every host when None.

    Returns:
        One :class:`NicStat` per port with points of :data:`NIC_STATS_METRICS`, sorted by
        host and interface.

    Raises:
        ValueError: a window that ends before it starts.

    A port's byte rate over the window (12.5 MB/s from 2 s to 6 s):

    >>> import json
    >>> from otel_ext.analysis.loaders.metrics import MetricPoints
    >>> attrs = json.dumps({"network.io.direction": "transmit"})
    >>> rows = [dict(name="hw.network.io", kind="sum", time_ns=t * 10**9, value=12.5e6 * t,
    ...              host="hA", link="hA/nic0", attrs=attrs) for t in range(8)]
    >>> [(s.interface, s.tx_bytes_per_s) for s in nic_stats(MetricPoints.from_rows(rows))]
    [('nic0', 12500000.0)]
    """
    if window is not None and window[1] < window[0]:
        raise ValueError(f"window ends before it starts: {window}")
    if points is None or len(points) == 0:
        return []
    strings = points.strings
    name_codes = {s: i for i, s in enumerate(strings["name"]) if s in NIC_STATS_METRICS}
    if not name_codes:
        return []
    rows = np.flatnonzero(np.isin(points.codes["name"], list(name_codes.values())))
    wanted = ({hosts} if isinstance(hosts, str) else set(hosts)) if hosts is not None else None
    # one series per (metric, host, link, attributes); sorted by time within each
    keys = np.stack(
        [points.codes[c][rows].astype(np.int64) for c in ("name", "host", "link", "attrs")]
    )
    order = np.lexsort((points.time_ns[rows], keys[3], keys[2], keys[1], keys[0]))
    rows, keys = rows[order], keys[:, order]
    bounds = np.flatnonzero(np.r_[True, np.any(keys[:, 1:] != keys[:, :-1], axis=0)])
    ends = np.r_[bounds[1:], len(rows)]
    parsed: dict[int, _PointAttrs] = {}
    ports: dict[tuple[str, str], _Port] = {}
    for b, e in zip(bounds.tolist(), ends.tolist()):
        name_c, host_c, link_c, attrs_c = (int(x) for x in keys[:, b])
        attrs = parsed.get(attrs_c)
        if attrs is None:
            attrs = parsed[attrs_c] = _PointAttrs.parse(strings["attrs"][attrs_c])
        who = _port_of(strings["host"][host_c], strings["link"][link_c], attrs)
        if who is None or (wanted is not None and who[0] not in wanted):
            continue
        port = ports.get(who[:2])
        if port is None:
            port = ports[who[:2]] = _Port(*who)
        r = rows[b:e]
        t = points.time_ns[r]
        keep = np.r_[True, t[1:] != t[:-1]]  # one point per timestamp (the first)
        r, t = r[keep], t[keep]
        v = points.values[r]
        _add_series(port, strings["name"][name_c], attrs, t, v, window)
    return [_row(ports[k]) for k in sorted(ports)]


def _add_series(
    port: _Port,
    name: str,
    attrs: _PointAttrs,
    t: np.ndarray,
    v: np.ndarray,
    window: tuple[int, int] | None,
) -> None:
    if name in (M.METRIC_HW_NETWORK_BANDWIDTH_LIMIT, M.METRIC_HW_NETWORK_UP):
        inside = np.ones(len(t), dtype=bool)
        if window is not None:
            inside = (t >= window[0]) & (t <= window[1])
            if not inside.any():
                inside = t <= window[0]
                if not inside.any():
                    return
                inside[: int(np.flatnonzero(inside)[-1])] = False  # the last one before
        last = int(np.flatnonzero(inside)[-1])
        point = (int(t[last]), float(v[last]))
        if name == M.METRIC_HW_NETWORK_UP:
            if port.up is None or point[0] >= port.up[0]:
                port.up = point
            port.down_points += int((v[inside] < 0.5).sum())
        elif port.speed is None or point[0] >= port.speed[0]:
            port.speed = point
        return
    i0, i1 = _covering(t, window)
    if i1 <= i0:
        return
    inc, resets = _increase(v[i0 : i1 + 1])
    dt = (int(t[i1]) - int(t[i0])) / 1e9
    port.resets += resets
    port.span += [int(t[i0]), int(t[i1])]
    if name == M.METRIC_HW_ERRORS:
        etype = attrs.error_type or "unknown"
        port.counts[etype] = port.counts.get(etype, 0.0) + inc
        port.count_rates[etype] = port.count_rates.get(etype, 0.0) + inc / dt
        return
    side = _DIRECTIONS.get(attrs.direction)
    if side is None:
        return
    what = "bytes" if name == M.METRIC_HW_NETWORK_IO else "packets"
    key = f"{side}_{what}"
    port.rates[key] = port.rates.get(key, 0.0) + inc / dt


def _row(p: _Port) -> NicStat:
    drops = sum(c for k, c in p.counts.items() if k in DROP_TYPES)
    errors = sum(c for k, c in p.counts.items() if k not in DROP_TYPES)
    has_drops = any(k in DROP_TYPES for k in p.count_rates)
    has_errors = any(k not in DROP_TYPES for k in p.count_rates)
    speed = p.speed[1] if p.speed is not None and p.speed[1] > 0 else None
    busiest = max((p.rates[k] for k in ("rx_bytes", "tx_bytes") if k in p.rates), default=None)
    return NicStat(
        host=p.host,
        interface=p.interface,
        link=p.link,
        from_ns=min(p.span) if p.span else None,
        to_ns=max(p.span) if p.span else None,
        rx_bytes_per_s=p.rates.get("rx_bytes"),
        tx_bytes_per_s=p.rates.get("tx_bytes"),
        rx_packets_per_s=p.rates.get("rx_packets"),
        tx_packets_per_s=p.rates.get("tx_packets"),
        errors=errors,
        drops=drops,
        errors_per_s=(
            sum(r for k, r in p.count_rates.items() if k not in DROP_TYPES) if has_errors else None
        ),
        drops_per_s=(
            sum(r for k, r in p.count_rates.items() if k in DROP_TYPES) if has_drops else None
        ),
        error_types=dict(sorted(p.counts.items())),
        speed_bytes_per_s=speed,
        utilization=busiest / speed if busiest is not None and speed else None,
        up=None if p.up is None else p.up[1] >= 0.5,
        down_points=p.down_points,
        resets=p.resets,
    )


def path_nic_evidence(
    points: MetricPoints | None,
    src_host: str,
    dst_host: str,
    *,
    window: tuple[int, int] | None = None,
) -> PathNicEvidence:
    """The port counters of both ends of a network path, for a finding's evidence.

    Args:
        points: the loaded metric points (see :func:`nic_stats`).
        src_host: the sending host (``PathStat.src_host``).
        dst_host: the receiving host (``PathStat.dst_host``).
        window: ``(start_ns, end_ns)`` of the path's transfers; the whole run when None.

    Returns:
        ``{"src_host", "dst_host", "ports": [NicStat.as_dict()...], "sent_bytes_per_s"
        (the source's ports' transmit rates added), "received_bytes_per_s" (the
        destination's receive rates), "errors", "drops" (both ends), "summary"}``; ports and
        rates are empty/None when no counters of those hosts were loaded.

    >>> from otel_ext.analysis.loaders.metrics import MetricPoints
    >>> path_nic_evidence(MetricPoints.from_rows([]), "hA", "hB")["summary"]
    'no port counters of hA or hB loaded'
    """
    rows = nic_stats(points, window=window, hosts=(src_host, dst_host))
    src = [r for r in rows if r.host == src_host]
    dst = [r for r in rows if r.host == dst_host]

    def added(rs: list[NicStat], attr: str) -> float | None:
        vals = [getattr(r, attr) for r in rs if getattr(r, attr) is not None]
        return float(sum(vals)) if vals else None

    if rows:
        summary = "; ".join(r.describe() for r in rows)
    else:
        summary = f"no port counters of {src_host} or {dst_host} loaded"
    return {
        "src_host": src_host,
        "dst_host": dst_host,
        "ports": [r.as_dict() for r in rows],
        "sent_bytes_per_s": added(src, "tx_bytes_per_s"),
        "received_bytes_per_s": added(dst, "rx_bytes_per_s"),
        "errors": float(sum(r.errors for r in rows)),
        "drops": float(sum(r.drops for r in rows)),
        "summary": summary,
    }
