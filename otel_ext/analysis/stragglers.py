"""Stragglers: which rank the others wait for, how persistently, and what it costs them.

For every collective matched across ranks, each member's *lateness* is its arrival minus the
median member's arrival. Per rank:

* ``late_ns``: the sum of its positive lateness;
* ``blame_ns``: the time the others lost waiting for it alone: in each collective it arrived
  last, ``(last − second-last arrival) × (members − 1)``;
* ``persistence``: the fraction of time windows (``windows`` equal slices of the run) in which
  it was the latest rank on average;
* ``score`` in [0, 1]: the mean of its share of all blame and its persistence. A rank that
  holds everyone back all run scores near 1; ranks late by chance share the score out.

Each rank's compute speed relative to the others is measured too: for every compute kernel
(or layer span when there are no kernels) the ratio of its duration to the median duration of
kernels with the same name on all ranks; ``compute_ratio`` is the rank's median ratio, and
``compute_ratio_by_window`` the same per window, which tells a chip slow all run (a
straggler) from one that slows part-way (a throttle).

>>> from otel_ext.analysis.collectives import match_collectives
>>> from otel_ext.analysis.table import Category, EventTable
>>> rows = [dict(start_ns=k * 1000 + (300 if r == 2 else 10 * r), end_ns=k * 1000 + 500,
...              rank=r, category=Category.KERNEL_COMM, coll_seq=k, coll_group="g")
...         for k in range(6) for r in range(4)]
>>> t = EventTable.from_rows(rows)
>>> s = find_stragglers(t, match_collectives(t), windows=3)
>>> s.rows[0]["rank"], round(s.rows[0]["score"], 2), s.rows[0]["blame_ns"]
(2, 1.0, 4860)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otel_ext._arrays import distinct, distinct_rows, median
from otel_ext.analysis.collectives import CollectiveMatch
from otel_ext.analysis.table import Category, EventTable

__all__ = ["StragglerReport", "compute_ratios", "find_stragglers", "rank_devices"]


@dataclass
class StragglerReport:
    """Per-rank straggler rows (most likely first) and the window edges used."""

    rows: list[dict[str, Any]]
    window_edges_ns: list[int]

    def top(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None


def rank_devices(table: EventTable) -> dict[int, tuple[str, str]]:
    """Each rank's most frequent (host, device) names.

    >>> t = EventTable.from_rows([dict(rank=0, host="h0", device="h0/chip0")])
    >>> rank_devices(t)
    {0: ('h0', 'h0/chip0')}
    """
    rank = table["rank"]
    out: dict[int, tuple[str, str]] = {}
    cat = table["category"]
    for r in distinct(rank[rank >= 0]):
        sel = rank == r
        dev_sel = sel & (cat != Category.LINK_TRANSFER)
        dev = table["device"][dev_sel]
        host = table["host"][sel]
        dev = dev[dev > 0]
        host = host[host > 0]
        d = table.strings["device"][int(np.bincount(dev).argmax())] if len(dev) else ""
        h = table.strings["host"][int(np.bincount(host).argmax())] if len(host) else ""
        if not h and "/" in d:
            h = d.split("/", 1)[0]
        out[int(r)] = (h, d)
    return out


def compute_ratios(
    table: EventTable, edges: np.ndarray
) -> tuple[dict[int, float], dict[int, list[float | None]]]:
    """Per rank: median duration ratio vs same-named compute work on all ranks, overall and per window.

    Same-named work is compared among the ranks of one host when hosts are named (the
    chips of a host form a tensor-parallel group; other hosts may serve other phases), in
    the same time window.

    Args:
        table: the (aligned) event table.
        edges: window edges in ns (``len(edges) - 1`` windows).

    Returns:
        ``(overall, by_window)`` keyed by rank; a window with no work is ``None``.
    """
    cat = table["category"]
    sel = (cat == Category.KERNEL_COMPUTE) & (table["rank"] >= 0)
    if not sel.any():
        sel = (cat == Category.LAYER) & (table["rank"] >= 0)
    rows = np.flatnonzero(sel)
    if len(rows) == 0:
        return {}, {}
    # same-named work is compared among ranks of the same host when hosts are known (the
    # chips of a host form a tensor-parallel group; other hosts may run other phases)
    # ... and in the same time window (the work behind a name may change over the run)
    win = np.clip(np.searchsorted(edges, table["start_ns"][rows], side="right") - 1, 0, None)
    win = np.minimum(win, max(len(edges) - 2, 0))
    host = table["host"][rows].astype(np.int64)
    n_win = max(len(edges) - 1, 1)
    name = (
        table["name"][rows].astype(np.int64) * (len(table.strings["host"]) + 1) + host
    ) * n_win + win
    dur = (table["end_ns"][rows] - table["start_ns"][rows]).astype(np.float64)
    rank = table["rank"][rows]
    order = np.lexsort((dur, name))
    uname, first, counts = np.unique(name[order], return_index=True, return_counts=True)
    med = (dur[order][first + (counts - 1) // 2] + dur[order][first + counts // 2]) / 2
    pos = np.searchsorted(uname, name)
    med_of_row = med[pos]
    # names seen on at least two ranks
    pair = distinct_rows(np.stack([name, rank.astype(np.int64)], axis=1))
    ranks_per_name = np.bincount(np.searchsorted(uname, pair[:, 0]), minlength=len(uname))
    usable = (med_of_row > 0) & (ranks_per_name[pos] >= 2)
    ratio = np.where(usable, dur / np.where(med_of_row > 0, med_of_row, 1), np.nan)
    overall: dict[int, float] = {}
    by_window: dict[int, list[float | None]] = {}
    for r in distinct(rank):
        rs = (rank == r) & np.isfinite(ratio)
        if not rs.any():
            continue
        overall[int(r)] = float(median(ratio[rs]))
        vals: list[float | None] = []
        for w in range(max(len(edges) - 1, 1)):
            ws = rs & (win == w)
            vals.append(float(median(ratio[ws])) if ws.any() else None)
        by_window[int(r)] = vals
    return overall, by_window


def _self_lateness(
    inst: np.ndarray, rank: np.ndarray, start: np.ndarray, end: np.ndarray, raw: np.ndarray
) -> np.ndarray:
    """Each member's lateness that it caused itself.

    A member arrives late either because its own work since its previous collective took
    longer (a slow chip) or because it left that previous collective late (some collectives,
    such as a ring over host processes, release their members one after another). Only the
    first is the member's doing: its *gap* (arrival minus its own previous exit) against the
    median gap of the collective's members. Members with no previous collective keep their
    raw lateness (arrival minus the median arrival).
    """
    out = raw.astype(np.float64)
    order = np.lexsort((start, rank))
    same = np.r_[False, rank[order][1:] == rank[order][:-1]]
    gap = np.full(len(start), np.nan)
    gap[order[same]] = (start[order][same] - end[order][:-1][same[1:]]).astype(np.float64)
    ok = np.isfinite(gap)
    if not ok.any():
        return out
    n = int(inst.max()) + 1
    med = np.full(n, np.nan)
    for k in distinct(inst[ok]):
        g = gap[ok & (inst == k)]
        if len(g) >= 2:
            med[k] = float(median(g))
    use = ok & np.isfinite(med[inst])
    out[use] = gap[use] - med[inst[use]]
    return out


def _culprits(inst: np.ndarray, rank: np.ndarray, late: np.ndarray, n: int) -> np.ndarray:
    """Per collective instance, the member rank with the largest self-caused lateness."""
    culprit = np.full(n, -1, dtype=np.int64)
    best = np.full(n, -np.inf)
    for i in range(len(inst)):
        k = inst[i]
        if late[i] > best[k]:
            best[k] = late[i]
            culprit[k] = rank[i]
    return culprit


def find_stragglers(
    table: EventTable,
    match: CollectiveMatch,
    *,
    windows: int = 8,
) -> StragglerReport:
    """Score every rank as a straggler candidate.

    Args:
        table: the aligned event table (for names and compute ratios).
        match: collectives matched on the aligned table.
        windows: how many equal time slices persistence and compute ratios are measured over.

    Returns:
        A :class:`StragglerReport`, rows sorted most likely first.
    """
    ranks = sorted(int(r) for r in distinct(table["rank"]) if r >= 0)
    devices = rank_devices(table)
    dev_rows = table["rank"] >= 0
    if dev_rows.any():
        lo = int(table["start_ns"][dev_rows].min())
        hi = int(table["end_ns"][dev_rows].max())
    else:
        lo = hi = 0
    edges = np.linspace(lo, max(hi, lo + 1), windows + 1).astype(np.int64)
    ratio, ratio_w = compute_ratios(table, edges)
    late = {r: 0 for r in ranks}
    blame = {r: 0 for r in ranks}
    last_count = {r: 0 for r in ranks}
    med_late = {r: 0.0 for r in ranks}
    persistence = {r: 0.0 for r in ranks}
    if match.n_instances:
        inst = match.member_instance
        start = match.member_start_ns
        # median start per instance
        order = np.lexsort((start, inst))
        counts = np.bincount(inst, minlength=match.n_instances)
        firsts = np.r_[0, np.cumsum(counts)[:-1]]
        lo_s, hi_s = start[order[firsts + (counts - 1) // 2]], start[order[firsts + counts // 2]]
        med = lo_s + (hi_s - lo_s) // 2  # integer: a float64 loses ns at epoch times
        mrank = match.member_rank
        lateness = _self_lateness(inst, mrank, start, match.member_end_ns, start - med[inst])
        gap = match.last_arrival_ns - match.second_last_arrival_ns
        inst_blame = gap * (match.n_ranks - 1)
        # the wait of a collective is blamed on the member that made itself late (its compute
        # since its previous collective took longest), which is the last arrival unless that
        # one only left its previous collective last
        culprit = _culprits(inst, mrank, lateness, match.n_instances)
        win = np.clip(np.searchsorted(edges, match.first_arrival_ns, side="right") - 1, 0, None)
        win = np.minimum(win, windows - 1)
        present_windows = distinct(win)
        for r in ranks:
            sel = mrank == r
            if not sel.any():
                continue
            lr = lateness[sel]
            late[r] = int(np.clip(lr, 0, None).sum())
            med_late[r] = float(median(lr))
            last_count[r] = int((match.last_rank == r).sum())
            blame[r] = int(inst_blame[culprit == r].sum())
        # persistence: per window, the rank with the largest mean lateness
        mwin = win[inst]
        wins_led = {r: 0 for r in ranks}
        for w in present_windows:
            ws = mwin == w
            rr = mrank[ws]
            ll = lateness[ws]
            ur = distinct(rr)
            means = np.array([ll[rr == x].mean() for x in ur])
            if len(means) and means.max() > 0:
                wins_led[int(ur[int(means.argmax())])] += 1
        for r in ranks:
            persistence[r] = wins_led[r] / max(len(present_windows), 1)
    total_blame = sum(blame.values())
    rows: list[dict[str, Any]] = []
    for r in ranks:
        share = blame[r] / total_blame if total_blame > 0 else 0.0
        host, device = devices.get(r, ("", ""))
        rows.append(
            {
                "rank": r,
                "host": host,
                "device": device,
                "score": 0.5 * share + 0.5 * persistence[r],
                "late_ns": late[r],
                "blame_ns": blame[r],
                "last_arrivals": last_count[r],
                "median_lateness_ns": med_late[r],
                "persistence": persistence[r],
                "compute_ratio": ratio.get(r),
                "compute_ratio_by_window": ratio_w.get(r, []),
            }
        )
    rows.sort(key=lambda x: (-x["score"], -x["blame_ns"], -x["late_ns"], x["rank"]))
    return StragglerReport(rows, [int(e) for e in edges])
