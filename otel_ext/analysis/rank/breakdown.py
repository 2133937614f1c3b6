"""Where device time goes: temporal, idle and kernel breakdowns, launch delay and queues.

Definitions follow Holistic Trace Analysis (HTA) so that numbers compare, with two
differences where HTA is wrong: communication is recognised by
:mod:`otel_ext.analysis.classify` (metadata, launch context, names of every library), not by the
``^nccl.*Kernel`` pattern; and times are integer nanoseconds, never rounded to microseconds.

Per rank (rows with ``rank == -1`` are grouped per source file instead):

* **kernel window** = last device-event end − first device-event start, over all streams
  (device events: compute and communication kernels, memcpy, memset);
* **idle** = window − length of the union of all device intervals;
* **compute** = length of the union of compute-kernel intervals;
* **non-compute** = window − compute − idle (communication and memory not hidden under compute).

Idle breakdown, per stream (HTA's three classes): each gap before a kernel is **host wait**
when the kernel's launch call started after the previous kernel on the stream had ended (the
host was late), **kernel wait** when it is shorter than ``kernel_wait_threshold_ns`` (the
launch overhead of back-to-back kernels; HTA's default of 30 µs), **other** otherwise. A
fourth class HTA does not have: **graph wait**, a gap between two kernels of one graph replay
(CUDA/HIP graph launch: one runtime call, many kernels sharing its correlation id). The host
submitted the whole graph at once, so such a gap is neither a late host nor a launch
overhead; it is the graph's own dependency structure.

Graph replays (:func:`launch_fanout`): a runtime call whose correlation id is shared by two or
more device rows launched all of them. Only the first kernel of a replay waited for its launch;
the others were queued by it. Launch statistics therefore measure the launch delay of direct
launches and of each replay's first kernel, count the replays and the kernels they queued,
and keep every kernel in the queue length (each was queued at the replay's launch).

>>> from otel_ext.analysis.table import Category, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=60, category=Category.KERNEL_COMPUTE, rank=0, stream=7),
...     dict(start_ns=40, end_ns=80, category=Category.KERNEL_COMM, rank=0, stream=9),
...     dict(start_ns=90, end_ns=100, category=Category.MEMCPY, rank=0, stream=7),
... ])
>>> r = temporal_breakdown(t)[0]
>>> (r.idle_ns, r.compute_ns, r.non_compute_ns, r.idle_pct)
(10, 60, 30, 10.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np

from otel_ext._arrays import distinct, percentile
from otel_ext.analysis.intervals import group_slices, union_length
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

__all__ = [
    "CategoryTime",
    "GraphReplay",
    "GraphReplays",
    "IdleBreakdownDict",
    "IdleBreakdownRow",
    "KernelBreakdown",
    "KernelBreakdownDoc",
    "KernelStats",
    "LaunchStatsDict",
    "LaunchStatsRow",
    "NameTime",
    "TemporalBreakdownDict",
    "TemporalBreakdownRow",
    "device_mask",
    "drop_last_step",
    "graph_replays",
    "idle_breakdown",
    "kernel_breakdown",
    "kernel_stats",
    "launch_fanout",
    "launch_rows",
    "launch_stats",
    "rank_groups",
    "temporal_breakdown",
]

_KERNEL_LABELS = {
    Category.KERNEL_COMPUTE: "compute",
    Category.KERNEL_COMM: "communication",
    Category.MEMCPY: "memcpy",
    Category.MEMSET: "memset",
}

#: HTA's ``consecutive_kernel_delay`` default (30, compared with microsecond gaps)
DEFAULT_KERNEL_WAIT_NS = 30_000


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 4) if whole > 0 else 0.0


def device_mask(table: EventTable) -> np.ndarray:
    """Rows that are device activity (kernels, memcpy, memset)."""
    return np.isin(table["category"], np.asarray(DEVICE_CATEGORIES, dtype=np.int8))


def rank_groups(
    table: EventTable, mask: np.ndarray | None = None, *, by_start: bool = False
) -> list[tuple[int, str, np.ndarray]]:
    """``(rank, source, rows)`` per rank; rows of unknown rank (-1) grouped per source file.

    ``source`` is empty for known ranks. With ``by_start``, each group's rows come in order of
    start time, so that interval unions over them (and over any subset of them) sort nothing:
    numpy's stable sort of sorted data is a linear pass.
    """
    rows = np.arange(len(table)) if mask is None else np.flatnonzero(mask)
    if by_start:
        rows = rows[np.argsort(table["start_ns"][rows], kind="stable")]
    rank = table["rank"][rows].astype(np.int64)
    src = table["source"][rows].astype(np.int64)
    key = np.where(rank >= 0, rank, -1 - src)
    order, keys, slices = group_slices(key)
    out = []
    for k, sl in zip(keys.tolist(), slices):
        r = rows[order[sl]]
        if k >= 0:
            out.append((int(k), "", r))
        else:
            out.append((-1, table.strings["source"][-1 - k], r))
    return out


class TemporalBreakdownDict(TypedDict):
    """A :class:`TemporalBreakdownRow` as the report's JSON row."""

    rank: int
    source: str
    kernel_window_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    comm_ns: int
    memory_ns: int
    idle_pct: float
    compute_pct: float
    non_compute_pct: float


@dataclass(frozen=True)
class TemporalBreakdownRow:
    """One rank's temporal breakdown (times in ns, percentages of the kernel window)."""

    rank: int
    source: str
    kernel_window_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    comm_ns: int
    memory_ns: int
    idle_pct: float
    compute_pct: float
    non_compute_pct: float

    def as_dict(self) -> TemporalBreakdownDict:
        """The row as the report's JSON row (fields in order)."""
        return {
            "rank": self.rank,
            "source": self.source,
            "kernel_window_ns": self.kernel_window_ns,
            "idle_ns": self.idle_ns,
            "compute_ns": self.compute_ns,
            "non_compute_ns": self.non_compute_ns,
            "comm_ns": self.comm_ns,
            "memory_ns": self.memory_ns,
            "idle_pct": self.idle_pct,
            "compute_pct": self.compute_pct,
            "non_compute_pct": self.non_compute_pct,
        }


def temporal_breakdown(table: EventTable) -> list[TemporalBreakdownRow]:
    """Idle, compute and non-compute time per rank (see the module docstring).

    ``comm_ns`` and ``memory_ns`` are the unions of communication kernels and of memory
    activity (they may overlap compute and each other). Ranks without device events are left
    out.
    """
    dev = device_mask(table)
    start, end, cat = table["start_ns"], table["end_ns"], table["category"]
    out = []
    for rank, source, rows in rank_groups(table, dev, by_start=True):
        s, e, c = start[rows], end[rows], cat[rows]
        window = int(e.max() - s.min())
        busy = union_length(s, e)
        comp = c == Category.KERNEL_COMPUTE
        compute = union_length(s[comp], e[comp])
        comm = c == Category.KERNEL_COMM
        mem = (c == Category.MEMCPY) | (c == Category.MEMSET)
        idle = window - busy
        non_compute = window - compute - idle
        out.append(
            TemporalBreakdownRow(
                rank=rank,
                source=source,
                kernel_window_ns=window,
                idle_ns=idle,
                compute_ns=compute,
                non_compute_ns=non_compute,
                comm_ns=union_length(s[comm], e[comm]),
                memory_ns=union_length(s[mem], e[mem]),
                idle_pct=_pct(idle, window),
                compute_pct=_pct(compute, window),
                non_compute_pct=_pct(non_compute, window),
            )
        )
    return out


def launch_rows(table: EventTable) -> np.ndarray:
    """For each row, the row of the runtime call that launched it (same file, same rank, same
    correlation id), or -1. The rank is part of the match: a file that holds several ranks
    (an OTLP export) may repeat a correlation id on two ranks, and a kernel is launched by a
    call of its own rank.

    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=5, category=Category.RUNTIME, correlation=9, source="a"),
    ...     dict(start_ns=8, end_ns=20, category=Category.KERNEL_COMPUTE, correlation=9, source="a"),
    ...     dict(start_ns=8, end_ns=9, category=Category.KERNEL_COMPUTE, correlation=9, source="a",
    ...          rank=1),
    ... ])
    >>> launch_rows(t).tolist()
    [-1, 0, -1]
    """
    n = len(table)
    out = np.full(n, -1, dtype=np.int64)
    corr = table["correlation"]
    ok = (corr >= 0) & (corr < (1 << 40))
    rt = np.flatnonzero(ok & (table["category"] == Category.RUNTIME))
    want = np.flatnonzero(ok & device_mask(table))
    if not rt.shape[0] or not want.shape[0]:
        return out
    # the calls and the device rows keyed by (file, rank, correlation id) in one int64: a
    # small code per (file, rank) among them above the id's 40 bits
    rows = np.concatenate([rt, want])
    rank = table["rank"][rows].astype(np.int64) + 1
    owner = table["source"][rows].astype(np.int64) * (int(rank.max()) + 1) + rank
    _, code = np.unique(owner, return_inverse=True)
    key = (code.reshape(-1).astype(np.int64) << 40) | corr[rows].astype(np.int64)
    order = np.argsort(key[: len(rt)], kind="stable")
    rt, rkeys = rt[order], key[: len(rt)][order]
    wkeys = key[len(rt) :]
    pos = np.searchsorted(rkeys, wkeys)
    posc = np.minimum(pos, rkeys.shape[0] - 1)
    hit = rkeys[posc] == wkeys
    out[want[hit]] = rt[posc[hit]]
    return out


def launch_fanout(table: EventTable, launch: np.ndarray | None = None) -> np.ndarray:
    """For each row, how many device rows its launch call launched (0 without a launch).

    A value above 1 marks a kernel of a graph replay.

    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=5, category=Category.RUNTIME, correlation=9, name="hipGraphLaunch"),
    ...     dict(start_ns=2, end_ns=20, category=Category.KERNEL_COMPUTE, correlation=9, stream=3),
    ...     dict(start_ns=20, end_ns=30, category=Category.KERNEL_COMPUTE, correlation=9, stream=3),
    ... ])
    >>> launch_fanout(t).tolist()
    [0, 2, 2]
    """
    lr = launch_rows(table) if launch is None else launch
    out = np.zeros(len(table), dtype=np.int64)
    has = lr >= 0
    if has.any():
        counts = np.bincount(lr[has], minlength=len(table))
        out[has] = counts[lr[has]]
    return out


def _first_of_launch(table: EventTable, launch: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Of ``rows`` (launched rows), those that start first among their launch's rows on their
    stream (ties: table order)."""
    lr = launch[rows]
    order = np.lexsort((rows, table["start_ns"][rows], table["stream"][rows], lr))
    key_l, key_s = lr[order], table["stream"][rows][order]
    first = np.r_[True, (key_l[1:] != key_l[:-1]) | (key_s[1:] != key_s[:-1])]
    out = np.zeros(len(rows), dtype=bool)
    out[order] = first
    return out


class GraphReplay(TypedDict):
    """One graph replay: a launch and the device rows it queued."""

    rank: int
    source: str
    launch: str
    launch_start_ns: int
    kernels: int
    streams: int
    first_kernel_start_ns: int
    last_kernel_end_ns: int
    busy_ns: int


class GraphReplays(TypedDict):
    """The graph replays of a table (:func:`graph_replays`)."""

    count: int
    kernels: int
    replays: list[GraphReplay]


def graph_replays(table: EventTable, *, limit: int = 50) -> GraphReplays:
    """The graph replays of ``table``: launches that each launched two or more device rows.

    Returns:
        ``{"count", "kernels", "replays"}``: the number of replays, the device rows they
        launched, and per replay (longest first, at most ``limit``) its ``rank``, ``source``,
        ``launch`` (the runtime call's name), ``launch_start_ns``, ``kernels``, ``streams``,
        ``first_kernel_start_ns``, ``last_kernel_end_ns`` and ``busy_ns`` (the union of its
        device rows).

    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=5, category=Category.RUNTIME, correlation=9, name="hipGraphLaunch", rank=0),
    ...     dict(start_ns=2, end_ns=20, category=Category.KERNEL_COMPUTE, correlation=9, stream=3, rank=0),
    ...     dict(start_ns=25, end_ns=30, category=Category.KERNEL_COMPUTE, correlation=9, stream=3, rank=0),
    ... ])
    >>> g = graph_replays(t)
    >>> g["count"], g["kernels"], g["replays"][0]["busy_ns"], g["replays"][0]["launch"]
    (1, 2, 23, 'hipGraphLaunch')
    """
    launch = launch_rows(table)
    fan = launch_fanout(table, launch)
    rows = np.flatnonzero(fan > 1)
    if not rows.shape[0]:
        return {"count": 0, "kernels": 0, "replays": []}
    start, end = table["start_ns"], table["end_ns"]
    order, keys, slices = group_slices(launch[rows])
    names = table.strings["name"]
    out: list[GraphReplay] = []
    for lrow, sl in zip(keys.tolist(), slices):
        r = rows[order[sl]]
        r = r[np.argsort(start[r], kind="stable")]
        out.append(
            {
                "rank": int(table["rank"][lrow]),
                "source": table.strings["source"][int(table["source"][lrow])],
                "launch": names[int(table["name"][lrow])],
                "launch_start_ns": int(start[lrow]),
                "kernels": int(r.shape[0]),
                "streams": len(distinct(table["stream"][r])),
                "first_kernel_start_ns": int(start[r].min()),
                "last_kernel_end_ns": int(end[r].max()),
                "busy_ns": union_length(start[r], end[r]),
            }
        )
    out.sort(
        key=lambda g: (
            -(g["last_kernel_end_ns"] - g["first_kernel_start_ns"]),
            g["launch_start_ns"],
        )
    )
    return {"count": len(out), "kernels": int(rows.shape[0]), "replays": out[:limit]}


class IdleBreakdownDict(TypedDict):
    """An :class:`IdleBreakdownRow` as the report's JSON row."""

    rank: int
    source: str
    stream: int
    idle_ns: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int
    host_wait_pct: float
    kernel_wait_pct: float
    other_pct: float
    graph_wait_ns: int
    graph_wait_pct: float


@dataclass(frozen=True)
class IdleBreakdownRow:
    """Idle time of one stream of one rank, by cause (ns, and shares of the stream's idle)."""

    rank: int
    source: str
    stream: int
    idle_ns: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int
    host_wait_pct: float
    kernel_wait_pct: float
    other_pct: float
    graph_wait_ns: int = 0
    graph_wait_pct: float = 0.0

    def as_dict(self) -> IdleBreakdownDict:
        """The row as the report's JSON row (fields in order)."""
        return {
            "rank": self.rank,
            "source": self.source,
            "stream": self.stream,
            "idle_ns": self.idle_ns,
            "host_wait_ns": self.host_wait_ns,
            "kernel_wait_ns": self.kernel_wait_ns,
            "other_ns": self.other_ns,
            "host_wait_pct": self.host_wait_pct,
            "kernel_wait_pct": self.kernel_wait_pct,
            "other_pct": self.other_pct,
            "graph_wait_ns": self.graph_wait_ns,
            "graph_wait_pct": self.graph_wait_pct,
        }


def idle_breakdown(
    table: EventTable, *, kernel_wait_threshold_ns: int = DEFAULT_KERNEL_WAIT_NS
) -> list[IdleBreakdownRow]:
    """Idle time per rank and stream: host wait, kernel wait, other (HTA's classes), and
    graph wait (a gap between two kernels of one graph replay).

    Args:
        table: the events.
        kernel_wait_threshold_ns: gaps shorter than this (and not host waits) are kernel waits.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=1, category=C.RUNTIME, correlation=1, rank=0),
    ...     dict(start_ns=10, end_ns=20, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
    ...     dict(start_ns=30, end_ns=31, category=C.RUNTIME, correlation=2, rank=0),
    ...     dict(start_ns=40, end_ns=50, category=C.KERNEL_COMPUTE, correlation=2, rank=0, stream=7),
    ...     dict(start_ns=45, end_ns=46, category=C.RUNTIME, correlation=3, rank=0),
    ...     dict(start_ns=55, end_ns=60, category=C.KERNEL_COMPUTE, correlation=3, rank=0, stream=7),
    ... ])
    >>> r = idle_breakdown(t, kernel_wait_threshold_ns=10)[0]
    >>> (r.stream, r.idle_ns, r.host_wait_ns, r.kernel_wait_ns, r.other_ns)
    (7, 25, 20, 5, 0)
    >>> g = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=1, category=C.RUNTIME, correlation=1, rank=0),
    ...     dict(start_ns=5, end_ns=10, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
    ...     dict(start_ns=50, end_ns=60, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
    ... ])
    >>> r = idle_breakdown(g, kernel_wait_threshold_ns=10)[0]
    >>> (r.idle_ns, r.graph_wait_ns, r.other_ns)
    (40, 40, 0)
    """
    dev = device_mask(table)
    launch = launch_rows(table)
    start, end, stream = table["start_ns"], table["end_ns"], table["stream"]
    out = []
    for rank, source, rows in rank_groups(table, dev, by_start=True):
        order, streams, slices = group_slices(stream[rows])
        for st, sl in zip(streams.tolist(), slices):
            r = rows[order[sl]]  # stable: still in order of start
            s, e = start[r], end[r]
            if s.shape[0] < 2:
                out.append(IdleBreakdownRow(rank, source, int(st), 0, 0, 0, 0, 0.0, 0.0, 0.0))
                continue
            prev_end = e[:-1]
            gap = s[1:] - prev_end
            lr = launch[r[1:]]
            has = lr >= 0
            launch_start = np.where(has, start[np.maximum(lr, 0)], np.iinfo(np.int64).min)
            graph = has & (lr == launch[r[:-1]])  # both kernels queued by one graph launch
            host = has & ~graph & (launch_start > prev_end)
            kwait = ~host & ~graph & (gap < kernel_wait_threshold_ns)
            other = ~host & ~graph & ~kwait
            hw, kw, ot = int(gap[host].sum()), int(gap[kwait].sum()), int(gap[other].sum())
            gw = int(gap[graph].sum())
            idle = hw + kw + ot + gw
            out.append(
                IdleBreakdownRow(
                    rank,
                    source,
                    int(st),
                    idle,
                    hw,
                    kw,
                    ot,
                    _pct(hw, idle),
                    _pct(kw, idle),
                    _pct(ot, idle),
                    gw,
                    _pct(gw, idle),
                )
            )
    return out


class CategoryTime(TypedDict):
    """Device time of one category (``compute``, ``communication``, ``memcpy``, ``memset``)."""

    category: str
    count: int
    total_ns: int
    mean_ns: float
    max_ns: int
    pct: float


class NameTime(TypedDict):
    """Device time of one kernel name (or of the names past the top: ``others``)."""

    name: str
    category: str
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    pct: float


class KernelBreakdownDoc(TypedDict):
    """The report's ``kernel_breakdown`` section (``launch`` added by the engine)."""

    by_category: list[CategoryTime]
    by_name: list[NameTime]
    launch: NotRequired[list[LaunchStatsDict]]


@dataclass(frozen=True)
class KernelBreakdown:
    """Device time by category and by name (ns; shares of the summed device time)."""

    by_category: list[CategoryTime]
    by_name: list[NameTime]

    def as_dict(self) -> KernelBreakdownDoc:
        """The report's section (without ``launch``)."""
        return {"by_category": self.by_category, "by_name": self.by_name}


def kernel_breakdown(table: EventTable, *, top: int = 30) -> KernelBreakdown:
    """Summed device time by category, and by name (the ``top`` names, the rest as "others").

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=30, category=C.KERNEL_COMPUTE, name="gemm", rank=0),
    ...     dict(start_ns=0, end_ns=10, category=C.KERNEL_COMM, name="ncclDevKernel_AllReduce", rank=0),
    ... ])
    >>> kb = kernel_breakdown(t)
    >>> [(r["category"], r["total_ns"], r["pct"]) for r in kb.by_category]
    [('compute', 30, 75.0), ('communication', 10, 25.0)]
    """
    return kernel_stats(table).breakdown(top=top)


@dataclass
class KernelStats:
    """Device time by name and by category, mergeable across tables.

    Attributes:
        by_name: name -> ``[category, first, count, total_ns, min_ns, max_ns]`` with
            ``first`` the position of the name's first row (the category is that row's).
        by_category: category -> ``[count, total_ns, max_ns]``.
    """

    by_name: dict[str, list[Any]] = field(default_factory=dict)
    by_category: dict[int, list[int]] = field(default_factory=dict)

    def merge(self, other: KernelStats) -> None:
        """Add ``other``'s rows (of other ranks) to these."""
        for name, (cat, first, n, tot, lo, hi) in other.by_name.items():
            mine = self.by_name.get(name)
            if mine is None:
                self.by_name[name] = [cat, first, n, tot, lo, hi]
                continue
            if first < mine[1]:
                mine[0], mine[1] = cat, first
            mine[2] += n
            mine[3] += tot
            mine[4], mine[5] = min(mine[4], lo), max(mine[5], hi)
        for c, (n, tot, hi) in other.by_category.items():
            mine_c = self.by_category.setdefault(c, [0, 0, hi])
            mine_c[0] += n
            mine_c[1] += tot
            mine_c[2] = max(mine_c[2], hi)

    def breakdown(self, *, top: int = 30) -> KernelBreakdown:
        """:func:`~otel_ext.analysis.rank.breakdown.kernel_breakdown` of the rows counted.

        The means are the sums over the counts: numpy's mean of integer nanoseconds sums them
        exactly in float64 (below 2**53 ns, 104 days) and divides once, as this does.
        """
        total = sum(tot for _, tot, _ in self.by_category.values())
        pct = _pct
        by_cat: list[CategoryTime] = [
            {"category": label, "count": n, "total_ns": tot, "mean_ns": tot / n,
             "max_ns": hi, "pct": pct(tot, total)}
            for c, label in _KERNEL_LABELS.items()
            if c in self.by_category
            for n, tot, hi in [self.by_category[c]]
        ]  # fmt: skip
        by_cat.sort(key=lambda r: -r["total_ns"])
        rows: list[NameTime] = [
            {"name": name, "category": _KERNEL_LABELS[Category(cat)], "count": n, "total_ns": tot,
             "mean_ns": tot / n, "min_ns": lo, "max_ns": hi, "pct": pct(tot, total)}
            for name, (cat, _, n, tot, lo, hi) in self.by_name.items()
        ]  # fmt: skip
        rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
        if len(rows) > top:
            rest = rows[top:]
            rest_total = sum(r["total_ns"] for r in rest)
            count = sum(r["count"] for r in rest)
            others: NameTime = {
                "name": "others", "category": "mixed", "count": count, "total_ns": rest_total,
                "mean_ns": rest_total / max(1, count), "min_ns": min(r["min_ns"] for r in rest),
                "max_ns": max(r["max_ns"] for r in rest), "pct": pct(rest_total, total),
            }  # fmt: skip
            rows = [*rows[:top], others]
        return KernelBreakdown(by_cat, rows)


def kernel_stats(table: EventTable, *, positions: np.ndarray | None = None) -> KernelStats:
    """Device time per name and category of ``table``'s device rows.

    Args:
        table: the events.
        positions: each row's position in the whole set (default: its row number), which
            decides whose category a name takes when its rows disagree.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=30, category=C.KERNEL_COMPUTE, name="gemm", rank=0),
    ...     dict(start_ns=0, end_ns=10, category=C.KERNEL_COMPUTE, name="gemm", rank=1)])
    >>> s = kernel_stats(t)
    >>> s.by_name["gemm"][2:], s.by_category
    ([2, 40, 10, 30], {3: [2, 40, 30]})
    """
    dev = np.flatnonzero(device_mask(table))
    dur = (table["end_ns"] - table["start_ns"])[dev]
    cat = table["category"][dev]
    pos = dev if positions is None else positions[dev]
    out = KernelStats()
    for c in _KERNEL_LABELS:
        m = cat == c
        if m.any():
            d = dur[m]
            out.by_category[int(c)] = [int(m.sum()), int(d.sum()), int(d.max())]
    order, codes, slices = group_slices(table["name"][dev].astype(np.int64))
    names = table.strings["name"]
    for code, sl in zip(codes.tolist(), slices):
        idx = order[sl]
        d = dur[idx]
        first = int(np.argmin(pos[idx]))
        out.by_name[names[code]] = [
            int(cat[idx[first]]), int(pos[idx[first]]), int(d.shape[0]), int(d.sum()),
            int(d.min()), int(d.max()),
        ]  # fmt: skip
    return out


class LaunchStatsDict(TypedDict):
    """A :class:`LaunchStatsRow` as the report's JSON row."""

    rank: int
    source: str
    kernels: int
    launched: int
    delay_mean_ns: float
    delay_p50_ns: float
    delay_p90_ns: float
    delay_p99_ns: float
    delay_max_ns: int
    before_launch: int
    queue_max: int
    queue_mean: float
    delayed: int
    graph_launches: int
    graph_kernels: int


@dataclass(frozen=True)
class LaunchStatsRow:
    """Launch delay (kernel start − launch start) and launch-queue length of one rank.

    ``delayed`` kernels are those the delay statistics cover: direct launches and the first
    kernel of each graph replay; ``graph_launches`` replays queued ``graph_kernels`` kernels.
    """

    rank: int
    source: str
    kernels: int
    launched: int
    delay_mean_ns: float
    delay_p50_ns: float
    delay_p90_ns: float
    delay_p99_ns: float
    delay_max_ns: int
    before_launch: int
    queue_max: int
    queue_mean: float
    delayed: int = 0
    graph_launches: int = 0
    graph_kernels: int = 0

    def as_dict(self) -> LaunchStatsDict:
        """The row as the report's JSON row (fields in order)."""
        return {
            "rank": self.rank,
            "source": self.source,
            "kernels": self.kernels,
            "launched": self.launched,
            "delay_mean_ns": self.delay_mean_ns,
            "delay_p50_ns": self.delay_p50_ns,
            "delay_p90_ns": self.delay_p90_ns,
            "delay_p99_ns": self.delay_p99_ns,
            "delay_max_ns": self.delay_max_ns,
            "before_launch": self.before_launch,
            "queue_max": self.queue_max,
            "queue_mean": self.queue_mean,
            "delayed": self.delayed,
            "graph_launches": self.graph_launches,
            "graph_kernels": self.graph_kernels,
        }


def launch_stats(table: EventTable) -> list[LaunchStatsRow]:
    """Launch delay and queue statistics per rank.

    ``before_launch`` counts kernels that start before their own launch call (a clock or
    causality problem; zero in a sound trace). The queue is the number of device operations
    launched and not yet finished; ``queue_mean`` is its time-weighted mean over the span
    from the first launch to the last end.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=1, category=C.RUNTIME, correlation=1, rank=0),
    ...     dict(start_ns=2, end_ns=3, category=C.RUNTIME, correlation=2, rank=0),
    ...     dict(start_ns=10, end_ns=20, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
    ...     dict(start_ns=20, end_ns=40, category=C.KERNEL_COMPUTE, correlation=2, rank=0, stream=7),
    ... ])
    >>> r = launch_stats(t)[0]
    >>> (r.launched, r.delay_mean_ns, r.delay_max_ns, r.queue_max, r.before_launch)
    (2, 14.0, 18, 2, 0)

    A graph replay's later kernels were queued, not delayed:

    >>> g = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=1, category=C.RUNTIME, correlation=1, rank=0),
    ...     dict(start_ns=3, end_ns=9, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
    ...     dict(start_ns=9, end_ns=90, category=C.KERNEL_COMPUTE, correlation=1, rank=0, stream=7),
    ... ])
    >>> r = launch_stats(g)[0]
    >>> (r.launched, r.delayed, r.delay_max_ns, r.graph_launches, r.graph_kernels, r.queue_max)
    (2, 1, 3, 1, 2, 2)
    """
    dev = device_mask(table)
    launch = launch_rows(table)
    fan = launch_fanout(table, launch)
    start, end = table["start_ns"], table["end_ns"]
    out = []
    for rank, source, rows in rank_groups(table, dev):
        lr = launch[rows]
        has = lr >= 0
        k = rows[has]
        ls = start[lr[has]]
        graph = fan[k] > 1
        direct = ~graph
        if graph.any():
            direct[graph] = _first_of_launch(table, launch, k[graph])
        n_graph_launches = len(distinct(launch[k[graph]])) if graph.any() else 0
        delay = start[k[direct]] - ls[direct]
        if delay.shape[0]:
            p50, p90, p99 = (float(x) for x in percentile(delay, [50, 90, 99]))
            times = np.concatenate([ls, end[k]])
            steps = np.concatenate([np.ones(ls.shape[0], np.int64), -np.ones(k.shape[0], np.int64)])
            o = np.lexsort((steps, times))  # at equal times, ends (-1) before launches (+1)
            times, q = times[o], np.cumsum(steps[o])
            span = int(times[-1] - times[0])
            qmean = float((q[:-1] * np.diff(times)).sum() / span) if span > 0 else 0.0
            qmax = int(q.max())
            mean_d, max_d, before = float(delay.mean()), int(delay.max()), int((delay < 0).sum())
        else:
            p50 = p90 = p99 = mean_d = qmean = 0.0
            qmax = max_d = before = 0
        before += int((start[k[~direct]] < ls[~direct]).sum())
        out.append(
            LaunchStatsRow(rank, source, int(rows.shape[0]), int(k.shape[0]), mean_d, p50, p90,
                           p99, max_d, before, qmax, qmean, int(direct.sum()), n_graph_launches,
                           int(graph.sum()))
        )  # fmt: skip
    return out


def drop_last_step(table: EventTable) -> EventTable:
    """HTA's default trimming, for comparisons with it: per file with two or more
    ``ProfilerStep`` rows, keep host rows that start before the last step, and device rows
    launched (by correlation) from one of those; files with fewer steps are kept whole.
    """
    keep = np.ones(len(table), dtype=bool)
    cat, start, src = table["category"], table["start_ns"], table["source"]
    dev = device_mask(table)
    launch = launch_rows(table)
    for code in distinct(src).tolist():
        in_file = src == code
        steps = in_file & (cat == Category.STEP)
        if steps.sum() < 2:
            continue
        last = start[steps].max()
        host_keep = in_file & ~dev & (start < last)
        keep[in_file & ~dev] = host_keep[in_file & ~dev]
        d = in_file & dev
        lr = launch[d]
        ok = lr >= 0
        kept = np.zeros(d.sum(), dtype=bool)
        kept[ok] = host_keep[lr[ok]]
        keep[d] = kept
    return table.select(keep)
