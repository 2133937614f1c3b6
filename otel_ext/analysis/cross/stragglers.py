"""Stragglers: which rank the others wait for, how persistently, and what it costs them.

For every collective matched across ranks, each member's *lateness* is its arrival minus the
median member's arrival. Per rank:

* ``late_ns``: the sum of its positive lateness;
* ``blame_ns``: the time the others lost waiting for it alone: in each collective where its
  self-caused lateness is the largest, ``(last − second-last arrival) × (members − 1)`` times
  the share of the last arrival's lateness that this self-caused lateness explains (the rest
  was a wait: blame follows the waits, see :mod:`otel_ext.analysis.cross.straggler_sites`);
  ``waiting_ns``: that product summed over every collective (the waiting there was);
* ``persistence``: the fraction of time windows (``windows`` equal slices of the run) in which
  it was the latest rank on average;
* ``score`` in [0, 1]: the mean of its share of all waiting and its persistence. A rank that
  holds everyone back all run scores near 1; ranks late by chance share the score out.

Each rank's compute speed relative to the others is measured too: for every compute kernel
(or layer span when there are no kernels) the ratio of its duration to the median duration of
kernels with the same name on all ranks; ``compute_ratio`` is the rank's median ratio, and
``compute_ratio_by_window`` the same per window, which tells a chip slow all run (a
straggler) from one that slows part-way (a throttle).

>>> from otel_ext.analysis.cross.collective_match import match_collectives
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
from typing import NamedTuple, TypedDict

import numpy as np

from otel_ext._arrays import distinct, group_median, median
from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.straggler_sites import (
    SiteTest,
    SiteTestRecord,
    collective_sites,
    self_caused_lateness,
    site_tests,
    step_of_instances,
    wait_rows,
)
from otel_ext.analysis.rank.compute_samples import (
    ComputeRatios,
    ComputeSamples,
    ratio_stats,
    samples_of,
)
from otel_ext.analysis.runs import rank_runs
from otel_ext.analysis.significance import ALPHA, adjusted, binomial_upper_tail
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "ComputeRatios",
    "StragglerReport",
    "StragglerRow",
    "compute_ratio_stats",
    "compute_ratios",
    "find_stragglers",
    "rank_devices",
    "rank_devices_from_counts",
    "window_edges",
]


class _SiteFields(TypedDict):
    """A rank's site evidence (:mod:`otel_ext.analysis.cross.straggler_sites`) in its row."""

    site: str | None  # the site of its best test
    site_p: float  # that test's adjusted p
    site_effect: float | None
    site_test: SiteTestRecord | None
    sites: list[SiteTestRecord]  # its three most significant single sites


class StragglerRow(_SiteFields):
    """One rank as a straggler candidate (the keys: the module docstring and
    :func:`find_stragglers`)."""

    rank: int
    host: str
    device: str
    score: float
    late_ns: int
    blame_ns: int
    waiting_ns: int
    last_arrivals: int
    collectives: int
    expected_last: float
    p_last: float
    median_lateness_ns: float
    lateness_effect: float | None
    persistence: float
    compute_ratio: float | None
    compute_ratio_by_window: list[float | None]
    compute_slower: int
    compute_faster: int
    compute_p: float


@dataclass
class StragglerReport:
    """Per-rank straggler rows (most likely first) and the window edges used."""

    rows: list[StragglerRow]
    window_edges_ns: list[int]

    def top(self) -> StragglerRow | None:
        """The most likely straggler's row, if any rank."""
        return self.rows[0] if self.rows else None


def rank_devices(table: EventTable) -> dict[int, tuple[str, str]]:
    """Each rank's most frequent (host, device) names.

    One pass over the table (the most frequent code per rank from a sort of (rank, code)
    pairs), however many ranks.

    >>> t = EventTable.from_rows([dict(rank=0, host="h0", device="h0/chip0")])
    >>> rank_devices(t)
    {0: ('h0', 'h0/chip0')}
    """
    rank = table["rank"]
    ranks = distinct(rank[rank >= 0])
    if len(ranks) == 0:
        return {}
    cat = table["category"]
    dev_code = _mode_per_rank(
        rank, table["device"], ranks, (rank >= 0) & (cat != Category.LINK_TRANSFER)
    )
    host_code = _mode_per_rank(rank, table["host"], ranks, rank >= 0)
    out: dict[int, tuple[str, str]] = {}
    for i, r in enumerate(ranks.tolist()):
        d = table.strings["device"][int(dev_code[i])] if dev_code[i] > 0 else ""
        h = table.strings["host"][int(host_code[i])] if host_code[i] > 0 else ""
        if not h and "/" in d:
            h = d.split("/", 1)[0]
        out[int(r)] = (h, d)
    return out


def rank_devices_from_counts(
    counts: dict[int, dict[str, dict[str, int]]],
    ranks: list[int],
    strings: dict[str, list[str]],
) -> dict[int, tuple[str, str]]:
    """:func:`rank_devices` from per-rank counts of the rows naming each device and host
    (:func:`otel_ext.analysis.rank.per_rank.name_counts`): the most frequent, ties to the name
    first in ``strings`` (the table's dictionaries), as :func:`rank_devices` has them.

    >>> rank_devices_from_counts({0: {"device": {"b": 2, "a": 2}}}, [0, 1],
    ...                          {"device": ["", "a", "b"], "host": [""]})
    {0: ('', 'a'), 1: ('', '')}
    """
    code = {col: {s: i for i, s in enumerate(strings[col])} for col in ("device", "host")}

    def mode(r: int, col: str) -> str:
        by = counts.get(r, {}).get(col)
        if not by:
            return ""
        return min(by.items(), key=lambda kv: (-kv[1], code[col][kv[0]]))[0]

    out: dict[int, tuple[str, str]] = {}
    for r in ranks:
        d, h = mode(r, "device"), mode(r, "host")
        if not h and "/" in d:
            h = d.split("/", 1)[0]
        out[int(r)] = (h, d)
    return out


def _mode_per_rank(
    rank: np.ndarray, codes: np.ndarray, ranks: np.ndarray, sel: np.ndarray
) -> np.ndarray:
    """The most frequent non-zero code of each rank (0 when it has none)."""
    out = np.zeros(len(ranks), dtype=np.int64)
    sel = sel & (codes > 0)
    if not sel.any():
        return out
    r = np.searchsorted(ranks, rank[sel]).astype(np.int64)
    c = codes[sel].astype(np.int64)
    width = int(c.max()) + 1
    keys, counts = np.unique(r * width + c, return_counts=True)
    key_r, key_c = keys // width, keys % width
    # per rank, the code seen most often (ties: the smallest code, as bincount's argmax)
    order = np.lexsort((key_c, -counts, key_r))
    best = order[np.r_[True, key_r[order][1:] != key_r[order][:-1]]]
    out[key_r[best]] = key_c[best]
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
    stats = compute_ratio_stats(table, edges)
    return stats.overall, stats.by_window


def compute_ratio_stats(table: EventTable, edges: np.ndarray) -> ComputeRatios:
    """:func:`compute_ratios` with the sign-test counts, in one linear pass.

    The ratios of :func:`~otel_ext.analysis.rank.compute_samples.ratio_stats` over the samples of
    the table's compute kernels (of its layer spans when it has no compute kernels).

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> t = EventTable.from_rows([dict(start_ns=0, end_ns=d, rank=r, name="gemm",
    ...     category=Category.LAYER) for r, d in [(0, 10), (1, 10), (2, 40)]])
    >>> compute_ratio_stats(t, window_edges(t, 1)).overall
    {0: 1.0, 1: 1.0, 2: 4.0}
    """
    samples = samples_of(table, edges)
    if samples.rows == 0:
        samples = samples_of(table, edges, category=Category.LAYER)
    if samples.rows == 0:
        return ComputeRatios({}, {}, {}, {})
    return ratio_stats(samples, rank_runs(table), max(len(edges) - 1, 1))


def window_edges(table: EventTable, windows: int) -> np.ndarray:
    """The edges of ``windows`` equal time slices of the run: from the earliest start to the
    latest end of the rows with a rank (``[0, 1]`` sliced when there are none).

    >>> t = EventTable.from_rows([dict(start_ns=100, end_ns=150, rank=0),
    ...                           dict(start_ns=130, end_ns=300, rank=1), dict(end_ns=900)])
    >>> window_edges(t, 4).tolist()
    [100, 150, 200, 250, 300]
    """
    dev_rows = table["rank"] >= 0
    if dev_rows.any():
        lo = int(table["start_ns"][dev_rows].min())
        hi = int(table["end_ns"][dev_rows].max())
    else:
        lo = hi = 0
    return np.linspace(lo, max(hi, lo + 1), windows + 1).astype(np.int64)


def _site_key(t: SiteTest, alpha: float, min_effect: float) -> tuple[bool, float, float]:
    """Sort key of a rank's site tests: qualifying ones (p ≤ alpha, effect ≥ min_effect)
    first, then by adjusted p, then by effect."""
    qualifies = t.p_adjusted <= alpha and t.effect >= min_effect
    return (not qualifies, t.p_adjusted, -t.effect)


def _site_fields(best: SiteTest | None, sites: list[SiteTest]) -> _SiteFields:
    """A rank's site evidence as row keys: its best test (:func:`_site_key`) and its three
    most significant sites."""
    if best is None:
        return {"site": None, "site_p": 1.0, "site_effect": None, "site_test": None, "sites": []}
    top = sorted(sites, key=lambda t: (t.p_adjusted, -t.effect))[:3]
    return {
        "site": best.site,
        "site_p": best.p_adjusted,
        "site_effect": round(best.effect, 4) if np.isfinite(best.effect) else None,
        "site_test": best.as_dict(),
        "sites": [t.as_dict() for t in top],
    }


def _culprits(inst: np.ndarray, rank: np.ndarray, late: np.ndarray, n: int) -> np.ndarray:
    """Per collective instance, the member rank with the largest self-caused lateness (the
    first member in order on ties)."""
    culprit = np.full(n, -1, dtype=np.int64)
    if len(inst) == 0:
        return culprit
    idx = np.arange(len(inst))
    # per instance: largest lateness, then the earliest member index
    order = np.lexsort((idx, -late, inst))
    first = np.r_[True, inst[order][1:] != inst[order][:-1]]
    best = order[first]
    culprit[inst[best]] = rank[best]
    return culprit


def find_stragglers(
    table: EventTable,
    match: CollectiveMatch,
    *,
    windows: int = 8,
    devices: dict[int, tuple[str, str]] | None = None,
    compute: ComputeSamples | None = None,
    alpha: float = ALPHA,
    min_effect: float = 0.5,
) -> StragglerReport:
    """Score every rank as a straggler candidate, with the statistics a verdict needs.

    Every pass is linear in the collective members and the table's rows (one sort and
    grouped reductions; no loop over ranks or collectives).

    Row keys besides the module docstring's: ``collectives`` (joined), ``expected_last``
    (last arrivals chance alone gives: Σ 1/n over its collectives), ``p_last`` (the binomial
    tail of its last arrivals, adjusted for the ranks tested, see
    :mod:`otel_ext.analysis.significance`), ``lateness_effect`` (its median self-caused
    lateness over the robust spread, 1.4826 × MAD, of every member's), ``compute_slower`` /
    ``compute_faster`` (its kernels slower / faster than the same work's median) and
    ``compute_p`` (the sign test of those counts, adjusted).

    Args:
        table: the aligned event table (for names and compute ratios).
        match: collectives matched on the aligned table.
        windows: how many equal time slices persistence and compute ratios are measured over.
        devices: rank -> (host, device) names when the caller has them (else
            :func:`rank_devices`).
        compute: the compute kernels' samples, joined over the ranks and computed with
            this run's :func:`window_edges` (``windows`` of them), when the caller has
            them (else the table's compute rows are sampled); with no rows in them, the
            table's layer spans are compared instead, as without them.

    Returns:
        A :class:`StragglerReport`, rows sorted most likely first.
    """
    ranks = distinct(table["rank"][table["rank"] >= 0]).astype(np.int64)
    if devices is None:
        devices = rank_devices(table)
    edges = window_edges(table, windows)
    if compute is None:
        cr = compute_ratio_stats(table, edges)
    else:
        if compute.rows == 0:
            compute = samples_of(table, edges, category=Category.LAYER)
        cr = ratio_stats(compute, rank_runs(table), max(len(edges) - 1, 1))
    lat, sites = _RankLateness.none(len(ranks)), _RankSites({}, {})
    if match.n_instances and len(ranks):
        med = _instance_medians(match)
        lateness = _member_lateness(table, match, med)
        lat = _rank_lateness(match, lateness, med, ranks, edges, windows)
        sites = _rank_sites(table, match, lateness, alpha=alpha, min_effect=min_effect)
    rows = _rows(ranks.tolist(), devices, lat, cr, sites)
    rows.sort(key=lambda x: (-x["score"], -x["blame_ns"], -x["late_ns"], x["rank"]))
    return StragglerReport(rows, [int(e) for e in edges])


class _RankLateness(NamedTuple):
    """Per rank (ascending): its lateness at the collectives it joined."""

    late: np.ndarray  # int64: its summed positive self-caused lateness
    blame: np.ndarray  # int64: the others' waiting its own doing explains
    last_count: np.ndarray  # int64: the collectives it arrived last at
    joined: np.ndarray  # int64: the collectives it joined
    expected: np.ndarray  # the last arrivals chance alone gives (Σ 1/n)
    med_late: np.ndarray  # its median self-caused lateness
    persistence: np.ndarray  # the share of windows it led by mean lateness
    effect: np.ndarray  # its median lateness over every member's robust spread
    waiting: int  # every collective's (last − second-last arrival) × (members − 1)

    @staticmethod
    def none(nr: int) -> _RankLateness:
        """``nr`` ranks with no collective."""
        z = np.zeros(nr, dtype=np.int64)
        return _RankLateness(z, z, z, z, np.zeros(nr), np.zeros(nr), np.zeros(nr), np.zeros(nr), 0)


class _RankSites(NamedTuple):
    """Per rank: its best site test (:func:`_site_key`) and its tests at single sites."""

    best: dict[int, SiteTest]
    single: dict[int, list[SiteTest]]


def _instance_medians(match: CollectiveMatch) -> np.ndarray:
    """Each collective instance's median member arrival (int64: a float64 loses ns at epoch
    times)."""
    inst = match.member_instance
    start = match.member_start_ns
    order = np.lexsort((start, inst))
    counts = np.bincount(inst, minlength=match.n_instances)
    firsts = np.r_[0, np.cumsum(counts)[:-1]]
    lo_s, hi_s = start[order[firsts + (counts - 1) // 2]], start[order[firsts + counts // 2]]
    return lo_s + (hi_s - lo_s) // 2


def _member_lateness(table: EventTable, match: CollectiveMatch, med: np.ndarray) -> np.ndarray:
    """Each member's self-caused lateness
    (:func:`~otel_ext.analysis.cross.straggler_sites.self_caused_lateness`): its lateness
    against its instance's median arrival ``med``, less what it spent waiting on its rank."""
    start = match.member_start_ns
    waits = wait_rows(table, match.row_index)
    return self_caused_lateness(
        match.member_instance,
        match.member_rank,
        start,
        match.member_end_ns,
        start - med[match.member_instance],
        wait_rank=table["rank"][waits],
        wait_end=table["end_ns"][waits],
    )


def _rank_sites(
    table: EventTable,
    match: CollectiveMatch,
    lateness: np.ndarray,
    *,
    alpha: float,
    min_effect: float,
) -> _RankSites:
    """Every rank's site tests (:func:`~otel_ext.analysis.cross.straggler_sites.site_tests`):
    the best one, which clears the level with the effect it needs first, then has the
    smallest p (a pooled test can be the most significant with a diluted effect); and those
    at single sites."""
    inst, mrank, start = match.member_instance, match.member_rank, match.member_start_ns
    site_code, site_labels = collective_sites(
        match.op,
        match.group,
        match.key,
        match.bytes,
        match.first_arrival_ns,
        step_of_instance=step_of_instances(table, inst, mrank, start, match.n_instances),
    )
    out = _RankSites({}, {})
    for t in site_tests(inst, mrank, lateness, site_code, site_labels, alpha=alpha):
        held = out.best.get(t.rank)
        if held is None or _site_key(t, alpha, min_effect) < _site_key(held, alpha, min_effect):
            out.best[t.rank] = t
        if t.site != "all":
            out.single.setdefault(t.rank, []).append(t)
    return out


def _rank_lateness(
    match: CollectiveMatch,
    lateness: np.ndarray,
    med: np.ndarray,
    ranks: np.ndarray,
    edges: np.ndarray,
    windows: int,
) -> _RankLateness:
    """Per rank, grouped reductions of its members' self-caused ``lateness`` (``med``: each
    instance's median arrival)."""
    nr = len(ranks)
    inst = match.member_instance
    rpos = np.searchsorted(ranks, match.member_rank)
    med_late = np.nan_to_num(group_median(lateness, rpos, nr))
    spread = 1.4826 * float(median(np.abs(lateness - median(lateness))))
    blame, waiting = _blame(match, lateness, med, ranks)
    return _RankLateness(
        late=np.bincount(rpos, weights=np.clip(lateness, 0, None), minlength=nr).astype(np.int64),
        blame=blame,
        last_count=np.bincount(np.searchsorted(ranks, match.last_rank), minlength=nr),
        joined=np.bincount(rpos, minlength=nr),
        expected=np.bincount(rpos, weights=1.0 / match.n_ranks[inst], minlength=nr) * 1.0,
        med_late=med_late,
        persistence=_persistence(match, lateness, rpos, nr, edges, windows),
        effect=med_late / spread if spread > 0 else np.where(med_late > 0, np.inf, 0.0),
        waiting=waiting,
    )


def _blame(
    match: CollectiveMatch, lateness: np.ndarray, med: np.ndarray, ranks: np.ndarray
) -> tuple[np.ndarray, int]:
    """Per rank, the others' waiting blamed on it (int64), and all the waiting there was.

    The wait of a collective, ``(last − second-last arrival) × (members − 1)``, is blamed on
    the member that made itself late (its compute since its previous collective took
    longest), which is the last arrival unless that one only left its previous collective
    last. Blame follows the waits: the culprit carries the share of the collective's skew
    its own doing explains (its self-caused lateness over the last arrival's raw lateness);
    the rest was a wait (a receive, a slow transfer, a late release) and no rank's.
    """
    inst = match.member_instance
    gap = match.last_arrival_ns - match.second_last_arrival_ns
    inst_blame = gap * (match.n_ranks - 1)
    culprit = _culprits(inst, match.member_rank, lateness, match.n_instances)
    has_culprit = culprit >= 0
    culprit_late = np.full(match.n_instances, -np.inf)
    np.maximum.at(culprit_late, inst, lateness)
    raw_last = (match.last_arrival_ns - med).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(raw_last > 0, np.clip(culprit_late / raw_last, 0.0, 1.0), 0.0)
    blame = np.bincount(
        np.searchsorted(ranks, culprit[has_culprit]),
        weights=(inst_blame * frac)[has_culprit],
        minlength=len(ranks),
    ).astype(np.int64)
    return blame, int(inst_blame.sum())


def _persistence(
    match: CollectiveMatch,
    lateness: np.ndarray,
    rpos: np.ndarray,
    nr: int,
    edges: np.ndarray,
    windows: int,
) -> np.ndarray:
    """Per rank, the share of the windows (with collectives) in which it had the largest
    mean self-caused lateness (a positive one); a collective's window is its first
    arrival's."""
    win = np.clip(np.searchsorted(edges, match.first_arrival_ns, side="right") - 1, 0, None)
    win = np.minimum(win, windows - 1)
    cell = win[match.member_instance] * nr + rpos
    sums = np.bincount(cell, weights=lateness, minlength=windows * nr).reshape(windows, nr)
    cnt = np.bincount(cell, minlength=windows * nr).reshape(windows, nr)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(cnt > 0, sums / np.maximum(cnt, 1), -np.inf)
    present = cnt.sum(axis=1) > 0
    leader = means.argmax(axis=1)
    led = present & (means.max(axis=1) > 0)
    wins_led = np.bincount(leader[led], minlength=nr)
    return wins_led / max(int(present.sum()), 1)


def _rows(
    ranks: list[int],
    devices: dict[int, tuple[str, str]],
    lat: _RankLateness,
    cr: ComputeRatios,
    sites: _RankSites,
) -> list[StragglerRow]:
    """One row per rank (in ``ranks`` order): its scores and the tests of its last arrivals
    (binomial, adjusted for the ranks that joined a collective) and of its compute (the sign
    test, adjusted for the ranks compared)."""
    tested = int(np.count_nonzero(lat.joined >= 1)) or 1
    p_chance = np.where(lat.joined > 0, lat.expected / np.maximum(lat.joined, 1), 0.0)
    p_last = adjusted(binomial_upper_tail(lat.last_count, lat.joined, p_chance), tested)
    slower = np.array([cr.slower.get(r, 0) for r in ranks], dtype=np.int64)
    faster = np.array([cr.faster.get(r, 0) for r in ranks], dtype=np.int64)
    compared = int(np.count_nonzero(slower + faster)) or 1
    compute_p = adjusted(binomial_upper_tail(slower, slower + faster, 0.5), compared)
    total_blame = max(int(lat.blame.sum()), lat.waiting)
    rows: list[StragglerRow] = []
    for i, r in enumerate(ranks):
        share = int(lat.blame[i]) / total_blame if total_blame > 0 else 0.0
        host, device = devices.get(r, ("", ""))
        effect = lat.effect[i]
        rows.append(
            {
                "rank": r,
                "host": host,
                "device": device,
                "score": 0.5 * share + 0.5 * float(lat.persistence[i]),
                "late_ns": int(lat.late[i]),
                "blame_ns": int(lat.blame[i]),
                "waiting_ns": lat.waiting,
                "last_arrivals": int(lat.last_count[i]),
                "collectives": int(lat.joined[i]),
                "expected_last": round(float(lat.expected[i]), 4),
                "p_last": float(p_last[i]),
                "median_lateness_ns": float(lat.med_late[i]),
                "lateness_effect": round(float(effect), 4) if np.isfinite(effect) else None,
                "persistence": float(lat.persistence[i]),
                "compute_ratio": cr.overall.get(r),
                "compute_ratio_by_window": cr.by_window.get(r, []),
                "compute_slower": int(slower[i]),
                "compute_faster": int(faster[i]),
                "compute_p": float(compute_p[i]),
                **_site_fields(sites.best.get(r), sites.single.get(r, [])),
            }
        )
    return rows
