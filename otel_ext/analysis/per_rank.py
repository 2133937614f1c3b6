"""The per-rank phase of an analysis and the compact tables it leaves for the cross-rank phase.

An analysis has two kinds of passes (``docs/analysis.md``, "Per-rank and cross-rank
passes"): those that read one rank's rows alone (the temporal, idle and overlap breakdowns,
launch statistics, kernel statistics, the names a rank's rows give its device) and those that
compare ranks (matching, alignment, stragglers, critical path, imbalance, roofline, requests,
links). :func:`per_rank_tables` runs the first kind over a table that holds every row of the
ranks it covers, and keeps for the second kind only the rows it reads
(:func:`cross_rank_mask`): device activity, runtime calls, collectives, layers, steps,
requests and their phases, link transfers, host-side collective operations and the rows
that name a serving engine's requests. The other rows (host operators, which are most of a
profiler trace) are left behind but for two per rank and file: the one that starts first and
the one that ends last, so that every rank's time span (runs, the run's start and end) stays
what the whole table gives.

Per-rank results of tables that hold disjoint sets of ranks (the partitions of a Dask
cluster) join with :func:`merge_rank_tables` into what one table of them all gives: rows in
the order :func:`~otel_ext.analysis.breakdown.rank_groups` gives them, kernel statistics
summed (counts, sums, minima, maxima: exact for integer nanoseconds), the device names'
counts added.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=90, category=C.CPU_OP, rank=0, name="aten::mm"),
...     dict(start_ns=5, end_ns=6, category=C.CPU_OP, rank=0, name="aten::view"),
...     dict(start_ns=10, end_ns=60, category=C.KERNEL_COMPUTE, rank=0, stream=7, name="gemm"),
... ])
>>> tables = per_rank_tables(t)
>>> [(r.rank, r.compute_ns) for r in tables.temporal], tables.events
([(0, 50)], 3)
>>> kept = tables.reduced[0]
>>> [kept.string("name", i) for i in range(len(kept))]
['aten::mm', 'gemm']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_ext.analysis import breakdown, overlap
from otel_ext.analysis._intervals import group_slices
from otel_ext.analysis.collectives import HOST_COLLECTIVE_FAMILIES
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "KernelStats",
    "RankTables",
    "cross_rank_mask",
    "kernel_stats",
    "merge_name_counts",
    "merge_rank_tables",
    "name_counts",
    "per_rank_tables",
]

#: categories a cross-rank pass reads (host operators only where they are collectives)
CROSS_RANK_CATEGORIES = (
    Category.RUNTIME,
    Category.KERNEL_COMPUTE,
    Category.KERNEL_COMM,
    Category.MEMCPY,
    Category.MEMSET,
    Category.COLLECTIVE,
    Category.LAYER,
    Category.REQUEST,
    Category.PHASE,
    Category.LINK_TRANSFER,
    Category.STEP,
)

_LABELS = {
    Category.KERNEL_COMPUTE: "compute",
    Category.KERNEL_COMM: "communication",
    Category.MEMCPY: "memcpy",
    Category.MEMSET: "memset",
}


def _serving_mark(name: str) -> bool:
    """A row name :mod:`otel_ext.analysis.serving` looks for (a request or stage span)."""
    from otel_ext.analysis import serving

    return (
        name == serving.VLLM_REQUEST_SPAN
        or name.startswith("Req ")
        or name in serving.SGLANG_STAGE_PHASES
    )


def cross_rank_mask(table: EventTable) -> np.ndarray:
    """The rows a cross-rank pass reads (see the module docstring).

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(category=C.CPU_OP, name=n, rank=0)
    ...     for n in ("aten::mm", "c10d::allreduce_", "gloo:all_reduce")])
    >>> cross_rank_mask(t).tolist()
    [False, True, True]
    """
    cat = table["category"]
    keep = np.isin(cat, np.asarray([int(c) for c in CROSS_RANK_CATEGORIES], dtype=np.int8))
    names = table.strings["name"]
    wanted = [
        i
        for i, n in enumerate(names)
        if i and (n.startswith(HOST_COLLECTIVE_FAMILIES) or _serving_mark(n))
    ]
    if wanted:
        keep |= np.isin(table["name"], np.asarray(wanted, dtype=np.int32))
    return keep


def _with_envelope(table: EventTable, keep: np.ndarray) -> np.ndarray:
    """``keep`` and, per rank, the left-out row that starts first and the one that ends last."""
    out = keep.copy()
    left = np.flatnonzero(~keep)
    if len(left) == 0:
        return out
    rank = table["rank"][left].astype(np.int64)
    start, end = table["start_ns"][left], table["end_ns"][left]
    order, _, slices = group_slices(rank)
    for sl in slices:
        rows = order[sl]
        out[left[rows[int(np.argmin(start[rows]))]]] = True
        out[left[rows[int(np.argmax(end[rows]))]]] = True
    return out


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

    def breakdown(self, *, top: int = 30) -> breakdown.KernelBreakdown:
        """:func:`~otel_ext.analysis.breakdown.kernel_breakdown` of the rows counted.

        The means are the sums over the counts: numpy's mean of integer nanoseconds sums them
        exactly in float64 (below 2**53 ns, 104 days) and divides once, as this does.
        """
        total = sum(tot for _, tot, _ in self.by_category.values())
        pct = breakdown._pct
        by_cat: list[dict[str, Any]] = [
            {"category": label, "count": n, "total_ns": tot, "mean_ns": tot / n,
             "max_ns": hi, "pct": pct(tot, total)}
            for c, label in _LABELS.items()
            if c in self.by_category
            for n, tot, hi in [self.by_category[c]]
        ]  # fmt: skip
        by_cat.sort(key=lambda r: -r["total_ns"])
        rows: list[dict[str, Any]] = [
            {"name": name, "category": _LABELS[Category(cat)], "count": n, "total_ns": tot,
             "mean_ns": tot / n, "min_ns": lo, "max_ns": hi, "pct": pct(tot, total)}
            for name, (cat, _, n, tot, lo, hi) in self.by_name.items()
        ]  # fmt: skip
        rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
        if len(rows) > top:
            rest = rows[top:]
            rest_total = sum(r["total_ns"] for r in rest)
            count = sum(r["count"] for r in rest)
            others = {
                "name": "others", "category": "mixed", "count": count, "total_ns": rest_total,
                "mean_ns": rest_total / max(1, count), "min_ns": min(r["min_ns"] for r in rest),
                "max_ns": max(r["max_ns"] for r in rest), "pct": pct(rest_total, total),
            }  # fmt: skip
            rows = [*rows[:top], others]
        return breakdown.KernelBreakdown(by_cat, rows)


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
    dev = np.flatnonzero(breakdown.device_mask(table))
    dur = (table["end_ns"] - table["start_ns"])[dev]
    cat = table["category"][dev]
    pos = dev if positions is None else positions[dev]
    out = KernelStats()
    for c in _LABELS:
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


def name_counts(table: EventTable) -> dict[int, dict[str, dict[str, int]]]:
    """Per rank, how many rows name each device and each host (what
    :func:`~otel_ext.analysis.stragglers.rank_devices` takes the most frequent of).

    >>> name_counts(EventTable.from_rows([dict(rank=0, host="h0", device="h0/chip0")] * 2))
    {0: {'device': {'h0/chip0': 2}, 'host': {'h0': 2}}}
    """
    rank = table["rank"]
    out: dict[int, dict[str, dict[str, int]]] = {}
    device_rows = (rank >= 0) & (table["category"] != Category.LINK_TRANSFER)
    for column, sel in (("device", device_rows), ("host", rank >= 0)):
        codes = table[column]
        sel = sel & (codes > 0)
        if not sel.any():
            continue
        c = codes[sel].astype(np.int64)
        width = int(c.max()) + 1
        keys, counts = np.unique(rank[sel].astype(np.int64) * width + c, return_counts=True)
        strings = table.strings[column]
        for key, n in zip(keys.tolist(), counts.tolist()):
            r, c = divmod(key, width)
            by = out.setdefault(int(r), {}).setdefault(column, {})
            by[strings[c]] = by.get(strings[c], 0) + int(n)
    return {r: out[r] for r in sorted(out)}


def merge_name_counts(
    parts: Sequence[dict[int, dict[str, dict[str, int]]]],
) -> dict[int, dict[str, dict[str, int]]]:
    """:func:`name_counts` of several tables added together.

    >>> merge_name_counts([{0: {"host": {"h": 1}}}, {0: {"host": {"h": 2}}, 1: {}}])
    {0: {'host': {'h': 3}}, 1: {}}
    """
    names: dict[int, dict[str, dict[str, int]]] = {}
    for p in parts:
        for r, cols in p.items():
            mine = names.setdefault(r, {})
            for column, counts in cols.items():
                by = mine.setdefault(column, {})
                for s, n in counts.items():
                    by[s] = by.get(s, 0) + n
    return {r: names[r] for r in sorted(names)}


@dataclass
class RankTables:
    """What the per-rank phase leaves: its results and the rows the cross-rank phase reads.

    Attributes:
        temporal, idle, overlap, launch: the per-rank breakdown rows
            (:mod:`otel_ext.analysis.breakdown`, :mod:`otel_ext.analysis.overlap`).
        kernels: kernel statistics (:class:`KernelStats`).
        names: per rank, the rows naming each device and host (:func:`name_counts`).
        events: rows of the table.
        reduced: the rows the cross-rank passes read (:func:`cross_rank_mask`, with each
            rank's first start and last end), one table per input part.
    """

    temporal: list[breakdown.TemporalBreakdownRow]
    idle: list[breakdown.IdleBreakdownRow]
    overlap: list[overlap.OverlapRow]
    launch: list[breakdown.LaunchStatsRow]
    kernels: KernelStats
    names: dict[int, dict[str, dict[str, int]]]
    events: int
    reduced: list[EventTable]


def per_rank_tables(
    table: EventTable,
    *,
    parts: Sequence[EventTable] | None = None,
    positions: np.ndarray | None = None,
) -> RankTables:
    """Run the per-rank passes over ``table`` (every row of the ranks it holds).

    Args:
        table: the events of some ranks (or of all).
        parts: the tables ``table`` is the concatenation of (one per file), whose rows the
            reduced tables keep with those tables' own string dictionaries (so that joining
            them gives the codes the whole set has); default: ``table`` itself.
        positions: each row's position in the whole set (rows numbered through the files in
            order); default: its row number.
    """
    whole = [table] if parts is None else list(parts)
    keep = _with_envelope(table, cross_rank_mask(table))
    reduced = []
    at = 0
    for part in whole:
        n = len(part)
        sel = keep[at : at + n]
        reduced.append(part if sel.all() else part.select(sel))
        at += n
    return RankTables(
        temporal=breakdown.temporal_breakdown(table),
        idle=breakdown.idle_breakdown(table),
        overlap=overlap.comm_comp_overlap(table),
        launch=breakdown.launch_stats(table),
        kernels=kernel_stats(table, positions=positions),
        names=name_counts(table),
        events=len(table),
        reduced=reduced,
    )


def _group_key(row: Any, source_code: Mapping[str, int]) -> int:
    """:func:`~otel_ext.analysis.breakdown.rank_groups`' order: rank, or for rows of no
    rank ``-1 - code`` of their file in the joined table."""
    return int(row.rank) if row.rank >= 0 else -1 - source_code[row.source]


def merge_rank_tables(parts: Sequence[RankTables], *, source_code: Mapping[str, int]) -> RankTables:
    """The per-rank results of partitions with disjoint ranks, as one table of them all
    gives them.

    Args:
        parts: each partition's :class:`RankTables`, in the order of their rows.
        source_code: file path -> its code in the joined table's ``source`` strings.
    """
    if len(parts) == 1:
        return parts[0]

    def rows(attr: str) -> list[Any]:
        every = [r for p in parts for r in getattr(p, attr)]
        return sorted(every, key=lambda r: _group_key(r, source_code))  # stable: streams

    kernels = KernelStats()
    for p in parts:
        kernels.merge(p.kernels)
    return RankTables(
        temporal=rows("temporal"),
        idle=rows("idle"),
        overlap=rows("overlap"),
        launch=rows("launch"),
        kernels=kernels,
        names=merge_name_counts([p.names for p in parts]),
        events=sum(p.events for p in parts),
        reduced=[t for p in parts for t in p.reduced],
    )
