"""Compute work as compact per-rank samples: value counts of (name, host, rank, window, duration).

Two cross-rank passes read compute kernels only through their durations: the compute ratios
of :mod:`otel_ext.analysis.cross.stragglers` (each kernel's duration against the median of the same
work on the other ranks, in the same time window) and the compute part of
:mod:`otel_ext.analysis.cross.imbalance` (each rank's summed kernel time). Both are functions of the
*multiset* of ``(name, host, rank, window, duration)`` keys, so a rank's kernels can be sent
as the distinct keys with how many rows have each (:class:`ComputeSamples`) rather than as
rows. The samples are exact value counts, not sketches: the statistics computed from them
(:func:`ratio_stats`, :meth:`ComputeSamples.rank_totals`) are the same floating-point
operations on the same values as those over the rows, and equal them bit for bit.

Samples of any split of the rows (by rank, by file) add up (:meth:`ComputeSamples.join`) to
the samples of the whole; strings travel in each part's own small dictionaries and are
merged by value.

>>> from otel_ext.analysis.table import Category, EventTable
>>> t = EventTable.from_rows([dict(start_ns=s, end_ns=s + d, rank=r, name="gemm", host="h0",
...     category=Category.KERNEL_COMPUTE)
...     for r, s, d in [(0, 0, 10), (0, 100, 10), (1, 0, 20), (1, 10, 20), (1, 100, 20)]])
>>> s = samples_of(t, np.array([0, 50, 130]))  # two windows: starts 0..49, 50..130
>>> s.rows, len(s.count), s.count.tolist(), s.rank_totals()
(5, 4, [1, 1, 2, 1], {0: (20, 2), 1: (60, 3)})
>>> r = ratio_stats(s, {0: 0, 1: 0}, 2)
>>> r.overall[1], r.slower, r.faster
(1.0, {0: 0, 1: 1}, {0: 2, 1: 0})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from otel_ext._arrays import distinct, distinct_rows, weighted_group_median
from otel_ext.analysis.table import Category, EventTable

__all__ = ["ComputeRatios", "ComputeSamples", "ratio_stats", "samples_of", "window_of"]


@dataclass
class ComputeRatios:
    """Per-rank compute speed against the same work on the other ranks.

    Attributes:
        overall: the rank's median duration ratio.
        by_window: the same per time window (``None`` where it ran nothing comparable).
        slower, faster: how many of its comparable kernels ran slower / faster than the
            median of the same work (the sign test's counts).
    """

    overall: dict[int, float]
    by_window: dict[int, list[float | None]]
    slower: dict[int, int]
    faster: dict[int, int]


@dataclass(eq=False)
class ComputeSamples:
    """Value counts of compute rows: one row per distinct (name, host, rank, window, duration).

    Canonical: ``names`` and ``hosts`` are sorted and hold only the strings used, and the rows
    are sorted by their key, so two samples of the same multiset of rows are equal (``==``)
    whatever split or order they were built from.

    Attributes:
        names, hosts: the strings the ``name`` and ``host`` codes index ('' is an unknown host).
        name, host, rank, window: the key columns (int32).
        duration_ns: the key's duration (end − start, int64).
        count: how many rows have exactly that key (int64, > 0).
        category: the :class:`~otel_ext.analysis.table.Category` the rows came from.
        totals_only: rank -> (summed duration ns, rows) of ranks whose rows are counted here
            only in total: ranks alone in their run, whose work no other rank ran with them
            (no ratio can compare it; :func:`~otel_ext.analysis.rank.per_rank.held_samples`' ``alone``).
            They count in :attr:`rows` and :meth:`rank_totals`, not in :func:`ratio_stats`,
            which would find nothing comparable in them anyway.
    """

    names: list[str]
    hosts: list[str]
    name: np.ndarray
    host: np.ndarray
    rank: np.ndarray
    window: np.ndarray
    duration_ns: np.ndarray
    count: np.ndarray
    category: int
    totals_only: dict[int, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.count)
        cols = (self.name, self.host, self.rank, self.window, self.duration_ns)
        if any(len(c) != n for c in cols):
            raise ValueError("ComputeSamples columns must have one length")

    @classmethod
    def empty(cls, category: int) -> ComputeSamples:
        """No samples of ``category``.

        >>> ComputeSamples.empty(Category.KERNEL_COMPUTE).rows
        0
        """
        i32, i64 = np.zeros(0, np.int32), np.zeros(0, np.int64)
        return cls([], [], i32, i32.copy(), i32.copy(), i32.copy(), i64, i64.copy(), int(category))

    @property
    def rows(self) -> int:
        """How many rows the samples stand for."""
        return int(self.count.sum()) + sum(n for _, n in self.totals_only.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ComputeSamples):
            return NotImplemented
        return (
            self.category == other.category
            and self.totals_only == other.totals_only
            and self.names == other.names
            and self.hosts == other.hosts
            and all(
                np.array_equal(a, b) for a, b in zip(self._columns(), other._columns(), strict=True)
            )
        )

    __hash__ = None  # type: ignore[assignment]  # mutable arrays: not hashable

    def _columns(self) -> tuple[np.ndarray, ...]:
        return (self.name, self.host, self.rank, self.window, self.duration_ns, self.count)

    @classmethod
    def join(cls, parts: Sequence[ComputeSamples]) -> ComputeSamples:
        """The samples of all ``parts``' rows together: equal keys' counts summed.

        The parts may cover disjoint or overlapping row sets (overlapping rows count once per
        part); their strings are merged by value. All parts must be of one category.

        >>> a = ComputeSamples(["k"], ["h"], *[np.array([0], np.int32)] * 4,
        ...                    np.array([5]), np.array([2]), 3)
        >>> b = ComputeSamples(["j", "k"], ["h"], *[np.array([1, 0], np.int32)] + [
        ...     np.array([0, 0], np.int32)] * 3, np.array([5, 5]), np.array([1, 1]), 3)
        >>> j = ComputeSamples.join([a, b])
        >>> j.names, j.name.tolist(), j.count.tolist()
        (['j', 'k'], [0, 1], [1, 3])
        """
        if not parts:
            raise ValueError("ComputeSamples.join needs at least one part")
        category = parts[0].category
        if any(p.category != category for p in parts):
            raise ValueError("ComputeSamples.join: parts of different categories")
        names = sorted({s for p in parts for s in p.names})
        hosts = sorted({s for p in parts for s in p.hosts})
        name_code = {s: i for i, s in enumerate(names)}
        host_code = {s: i for i, s in enumerate(hosts)}

        def lut(strings: list[str], code: dict[str, int]) -> np.ndarray:
            return np.array([code[s] for s in strings] or [0], dtype=np.int32)

        name = np.concatenate([lut(p.names, name_code)[p.name] for p in parts])
        host = np.concatenate([lut(p.hosts, host_code)[p.host] for p in parts])
        rank = np.concatenate([p.rank for p in parts])
        window = np.concatenate([p.window for p in parts])
        duration = np.concatenate([p.duration_ns for p in parts])
        count = np.concatenate([p.count for p in parts]).astype(np.int64)
        out = _reduced(names, hosts, name, host, rank, window, duration, count, category)
        out.totals_only = _added([p.totals_only for p in parts])
        return out

    def rank_totals(self) -> dict[int, tuple[int, int]]:
        """Per rank: (summed duration in ns, row count), ranks ascending.

        >>> s = ComputeSamples([""], [""], *[np.array([0, 0, 0], np.int32)] * 2,
        ...     np.array([0, 2, 2], np.int32), np.array([0, 0, 1], np.int32),
        ...     np.array([7, 7, 1]), np.array([2, 1, 4]), 3)
        >>> s.rank_totals()
        {0: (14, 2), 2: (11, 5)}
        """
        if len(self.count) == 0:
            return dict(sorted(self.totals_only.items()))
        ranks = distinct(self.rank)
        pos = np.searchsorted(ranks, self.rank)
        total = np.zeros(len(ranks), dtype=np.int64)
        rows = np.zeros(len(ranks), dtype=np.int64)
        np.add.at(total, pos, self.duration_ns.astype(np.int64) * self.count)
        np.add.at(rows, pos, self.count)
        sampled = {
            int(r): (int(t), int(n))
            for r, t, n in zip(ranks.tolist(), total.tolist(), rows.tolist(), strict=True)
        }
        return dict(sorted(_added([sampled, self.totals_only]).items()))


def _added(parts: Sequence[dict[int, tuple[int, int]]]) -> dict[int, tuple[int, int]]:
    """Rank totals added together, rank by rank."""
    out: dict[int, tuple[int, int]] = {}
    for p in parts:
        for r, (t, n) in p.items():
            t0, n0 = out.get(r, (0, 0))
            out[r] = (t0 + t, n0 + n)
    return out


def window_of(start_ns: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The time window of each start: the slice of ``edges`` it falls in, clipped to the
    ``max(len(edges) - 1, 1)`` windows (before the first edge: window 0; after the last: the
    last window).

    >>> window_of(np.array([-5, 0, 49, 50, 100, 999]), np.array([0, 50, 100])).tolist()
    [0, 0, 0, 1, 1, 1]
    """
    n_win = max(len(edges) - 1, 1)
    win = np.clip(np.searchsorted(edges, start_ns, side="right") - 1, 0, None)
    return np.minimum(win, n_win - 1)


def _dictionary(codes: np.ndarray, strings: list[str]) -> tuple[list[str], np.ndarray]:
    """The strings ``codes`` use, sorted, and the codes re-encoded into them."""
    used = distinct(codes).astype(np.int64)
    if len(used) == 0:
        return [], codes.astype(np.int32)
    vals = [strings[c] for c in used.tolist()]
    order = sorted(range(len(vals)), key=vals.__getitem__)
    lut = np.zeros(int(used[-1]) + 1, dtype=np.int32)
    lut[used[order]] = np.arange(len(order), dtype=np.int32)
    return [vals[i] for i in order], lut[codes]


def _reduced(
    names: list[str],
    hosts: list[str],
    name: np.ndarray,
    host: np.ndarray,
    rank: np.ndarray,
    window: np.ndarray,
    duration: np.ndarray,
    count: np.ndarray,
    category: int,
) -> ComputeSamples:
    """Rows (with counts) sorted by key and equal keys merged into one row."""
    if len(count) == 0:
        return ComputeSamples.empty(category)
    name, host = name.astype(np.int64), host.astype(np.int64)
    rank, window = rank.astype(np.int64), window.astype(np.int64)
    duration = duration.astype(np.int64)
    # one composite key for (name, host, rank, window) when it fits in int64, so the sort has
    # two keys instead of five; the order is the same (mixed radix, most significant first)
    r_lo = int(rank.min())
    radix = [int(host.max()) + 1, int(rank.max()) - r_lo + 1, int(window.max()) + 1]
    codes_ok = min(int(name.min()), int(host.min()), int(window.min())) >= 0
    if codes_ok and (int(name.max()) + 1) * radix[0] * radix[1] * radix[2] < 2**62:
        key = ((name * radix[0] + host) * radix[1] + (rank - r_lo)) * radix[2] + window
        order = np.lexsort((duration, key))
        k, d = key[order], duration[order]
        new = np.r_[True, (k[1:] != k[:-1]) | (d[1:] != d[:-1])]
    else:
        order = np.lexsort((duration, window, rank, host, name))
        cols = [c[order] for c in (name, host, rank, window, duration)]
        new = np.r_[True, np.any([c[1:] != c[:-1] for c in cols], axis=0)]
    first = np.flatnonzero(new)
    keep = order[first]
    return ComputeSamples(
        names,
        hosts,
        name[keep].astype(np.int32),
        host[keep].astype(np.int32),
        rank[keep].astype(np.int32),
        window[keep].astype(np.int32),
        duration[keep],
        np.add.reduceat(count[order], first).astype(np.int64),
        int(category),
    )


def samples_of(
    table: EventTable,
    edges: np.ndarray,
    *,
    category: Category = Category.KERNEL_COMPUTE,
    rows: np.ndarray | None = None,
) -> ComputeSamples:
    """The samples of ``table``'s rows of ``category`` with a rank (``rank >= 0``).

    Args:
        table: the (aligned) event table.
        edges: the window edges in ns (:func:`otel_ext.analysis.cross.stragglers.window_edges`);
            a row's window is :func:`window_of` its start.
        category: which rows (compute kernels; layer spans for the fallback).
        rows: when given, only the rows at these positions are sampled.

    Returns:
        Canonical :class:`ComputeSamples` (empty when no row qualifies).
    """
    sel = (table["category"] == category) & (table["rank"] >= 0)
    if rows is None:
        pos = np.flatnonzero(sel)
    else:
        rows = np.asarray(rows, dtype=np.intp)
        pos = rows[sel[rows]]
    if len(pos) == 0:
        return ComputeSamples.empty(category)
    start = table["start_ns"][pos]
    names, name = _dictionary(table["name"][pos], table.strings["name"])
    hosts, host = _dictionary(table["host"][pos], table.strings["host"])
    return _reduced(
        names,
        hosts,
        name,
        host,
        table["rank"][pos],
        window_of(start, edges),
        table["end_ns"][pos] - start,
        np.ones(len(pos), dtype=np.int64),
        category,
    )


def ratio_stats(samples: ComputeSamples, runs: dict[int, int], n_windows: int) -> ComputeRatios:
    """Per rank: the median ratio of its work's duration to the same work's median on all ranks.

    Same work: one name on one host (when hosts are named: a host's chips form a
    tensor-parallel group, other hosts may serve other phases), in one time window (the work
    behind a name may change over the run) and one run (separate captures never ran
    together; ``runs`` is :func:`~otel_ext.analysis.runs.rank_runs`, read only when it names
    more than one run). Only work seen on at least two ranks, with a median above zero,
    counts. Per rank, overall and per window, the median of its ratios, and the sign test's
    counts of ratios above and below 1. One linear pass of sorts and grouped reductions.

    Args:
        samples: :func:`samples_of` the rows (joined over the ranks).
        runs: rank -> run index.
        n_windows: how many windows the samples' ``window`` codes index.

    Returns:
        A :class:`ComputeRatios`; ranks with no comparable work are absent.
    """
    out = ComputeRatios({}, {}, {}, {})
    if len(samples.count) == 0:
        return out
    n_win = max(int(n_windows), 1)
    if int(samples.window.max()) >= n_win or int(samples.window.min()) < 0:
        raise ValueError(f"ratio_stats: sample windows outside 0..{n_win - 1}")
    win = samples.window.astype(np.int64)
    rank = samples.rank.astype(np.int64)
    cnt = samples.count
    host = samples.host.astype(np.int64)
    if len(set(runs.values())) > 1:
        rk = np.array(sorted(runs), dtype=np.int64)
        rv = np.array([runs[r] for r in rk.tolist()], dtype=np.int64)
        run_of = rv[np.clip(np.searchsorted(rk, rank), 0, len(rk) - 1)]
        host = host + (len(samples.hosts) + 1) * run_of
    n_host = int(host.max()) + 1
    key = (samples.name.astype(np.int64) * n_host + host) * n_win + win
    ukey, pos = np.unique(key, return_inverse=True)
    pos = pos.reshape(-1)
    dur = samples.duration_ns.astype(np.float64)
    med_of_row = weighted_group_median(dur, cnt, pos, len(ukey))[pos]
    # work seen on at least two ranks
    pair = distinct_rows(np.stack([pos.astype(np.int64), rank], axis=1))
    ranks_per_key = np.bincount(pair[:, 0], minlength=len(ukey))
    usable = (med_of_row > 0) & (ranks_per_key[pos] >= 2)
    ratio = np.where(usable, dur / np.where(med_of_row > 0, med_of_row, 1), np.nan)
    ranks = distinct(rank)
    rpos = np.searchsorted(ranks, rank)
    finite = np.isfinite(ratio)
    overall = weighted_group_median(ratio, cnt, rpos, len(ranks))
    by_w = weighted_group_median(ratio, cnt, rpos * n_win + win, len(ranks) * n_win)
    by_w = by_w.reshape(len(ranks), n_win)
    up, down = finite & (ratio > 1.0), finite & (ratio < 1.0)
    slower = np.bincount(rpos[up], weights=cnt[up], minlength=len(ranks)).astype(np.int64)
    faster = np.bincount(rpos[down], weights=cnt[down], minlength=len(ranks)).astype(np.int64)
    for i, r in enumerate(ranks.tolist()):
        if np.isnan(overall[i]):
            continue
        out.overall[r] = float(overall[i])
        out.by_window[r] = [None if np.isnan(v) else float(v) for v in by_w[i].tolist()]
        out.slower[r] = int(slower[i])
        out.faster[r] = int(faster[i])
    return out
