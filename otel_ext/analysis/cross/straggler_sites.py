"""Straggler evidence per collective *site*, with blame that follows the waits.

A slow rank is late where its extra work sits: at the collective that follows it (the
all-reduce after a rank's extra matmuls), not at the all-gather or the exchange after that,
where it has caught up. Pooling every collective a job issues dilutes that evidence, so this
module tests each rank at each *site* separately and combines the tests with a multiple-testing
correction.

**Sites.** A collective's site is its operation, process group and size (``bytes``; point-to-
point transfers also their direction ``src->dst``), and its position among the collectives of
that kind within its profiler step (the first, second, ... bucketed all-reduce of a step) when
the trace annotates steps. A site label reads ``allreduce g=0 1048576B #0``.

**Self-caused lateness (blame follows the waits).** A member's lateness is its arrival minus
the median member's; but a rank that arrives late because it was *waiting* (inside a receive,
an earlier collective, a blocking transfer) did not cause it. Each member's *gap* is its arrival
minus the last time it came out of a wait on its own rank: the end of its previous collective,
or of a point-to-point operation (``c10d::send``/``recv_``, ``gloo:send``/``recv``, send/recv
spans) that ended before it arrived, whichever is later. Its self-caused lateness is its gap
minus the median gap of the collective's members: the wait-for graph over matched operations,
followed one hop back per member, in linear time (one sort of the rank's exits and one
``searchsorted``). A receiver that came out of a slow transfer late is not late by its own
doing; the peer that kept it waiting is late at *its* next collective.

**The test.** Per instance the members are ordered by self-caused lateness: a position from 0
(earliest) to ``k - 1`` (latest), ties sharing the mean position. Under the null that no rank is
slower than the others the members are exchangeable, so each rank's position is uniform on
``0 .. k - 1`` in each instance, independently across instances (a permutation test over the
ranks of each instance). The statistic is the sum of a rank's positions at a site; its null
distribution is the sum of discrete uniforms, whose upper tail is computed exactly (a
convolution) for the best candidates and by the normal approximation with a continuity
correction otherwise. A rank last at 10 of 12 four-member all-reduces and second-last at the
other two has a sum of 34 against a null mean of 18 (``p = 5.4e-6`` exactly: 91 of the 4^12 equally likely outcomes), where the last-arrival
count alone over 24 pooled collectives is not significant.

The order ignores how late: a rank 100 ms late at 7 of 11 all-reduces and second (by a hair)
at the other 4 ranks no better than one a hair late at 7. So each test also has a
*lateness-sum* statistic: the rank's self-caused lateness summed over the site's instances,
against the same permutation null (one member's value drawn uniformly from each instance,
independently), its tail estimated from seeded draws (10,000, then 200,000 for a candidate;
the +1-corrected estimate is a valid p-value). A test's p-value is twice the smaller of the
two (Bonferroni over the statistics). Ranks are tested at every site with
at least ``min_instances`` instances and once pooled over all of their collectives; the family
of tests is corrected with Tarone's refinement of Bonferroni (a test that cannot reach the level
even at its most extreme outcome does not count; Tarone 1990).

**Effect size.** At a rank's best site: its median self-caused lateness minus the median of its
peers' there, over the peers' robust spread (1.4826 × MAD, at least 1 µs), and the ratio of its
median lateness to the next-latest rank's there.

>>> import numpy as np
>>> inst = np.repeat(np.arange(12), 4); rank = np.tile(np.arange(4), 12)
>>> late = np.where(rank == 2, 5.0e6, 0.0) + rank * 1e3
>>> tests = site_tests(inst, rank, late, np.zeros(12, dtype=np.int64), ["allreduce"])
>>> best = min(tests, key=lambda t: t.p)
>>> best.rank, best.site, best.instances, f"{best.p:.1e}"
(2, 'allreduce', 12, '1.2e-07')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, TypedDict

import numpy as np

from otel_ext._arrays import group_median
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "SiteTest",
    "SiteTestRecord",
    "adjust_tarone",
    "collective_sites",
    "self_caused_lateness",
    "site_tests",
    "uniform_sum_upper_tail",
    "wait_rows",
]

#: point-to-point operation names: host-side (gloo, c10d) and normalised span/kernel ops
_P2P_NAMES = ("c10d::send", "c10d::recv_", "c10d::recv_any_source_", "gloo:send", "gloo:recv")
_P2P_OPS = ("send", "recv", "sendrecv")
#: below this, the exact tail is computed (a convolution of ``n`` uniforms on ``k`` values)
_EXACT_CELLS = 4_000_000
#: the smallest robust spread of lateness an effect is measured against (ns)
MIN_SPREAD_NS = 1_000.0


@dataclass(frozen=True)
class SiteTest:
    """One rank tested at one site (or pooled over all its collectives: ``site == "all"``)."""

    rank: int
    site: str
    instances: int
    last: int  # instances where it was the latest by its own doing
    position_sum: float
    expected: float
    z: float
    lateness_sum_ns: float  # its self-caused lateness summed over the site's instances
    expected_sum_ns: float  # ... and that sum's mean under the null (instances' means)
    p_order: float  # the order test's one-sided tail (exact for the candidates)
    p_sum: float  # the lateness-sum permutation test's tail (drawn for the candidates)
    p: float  # one-sided, unadjusted: 2 × the smaller of the two
    p_adjusted: float
    median_lateness_ns: float
    peer_median_lateness_ns: float
    peer_spread_ns: float
    effect: float
    next_rank: int | None
    next_lateness_ns: float | None

    def as_dict(self) -> SiteTestRecord:
        """The test as the document holds it: non-finite statistics as None."""
        return {
            "rank": self.rank,
            "site": self.site,
            "instances": self.instances,
            "last": self.last,
            "position_sum": _finite(self.position_sum),
            "expected": _finite(self.expected),
            "z": _finite(self.z),
            "lateness_sum_ns": _finite(self.lateness_sum_ns),
            "expected_sum_ns": _finite(self.expected_sum_ns),
            "p_order": _finite(self.p_order),
            "p_sum": _finite(self.p_sum),
            "p": _finite(self.p),
            "p_adjusted": _finite(self.p_adjusted),
            "median_lateness_ns": self.median_lateness_ns,
            "peer_median_lateness_ns": self.peer_median_lateness_ns,
            "peer_spread_ns": self.peer_spread_ns,
            "effect": _finite(self.effect),
            "next_rank": self.next_rank,
            "next_lateness_ns": self.next_lateness_ns,
        }


class SiteTestRecord(TypedDict):
    """:meth:`SiteTest.as_dict`: a :class:`SiteTest` as the document holds it."""

    rank: int
    site: str
    instances: int
    last: int
    position_sum: float | None
    expected: float | None
    z: float | None
    lateness_sum_ns: float | None
    expected_sum_ns: float | None
    p_order: float | None
    p_sum: float | None
    p: float | None
    p_adjusted: float | None
    median_lateness_ns: float
    peer_median_lateness_ns: float
    peer_spread_ns: float
    effect: float | None
    next_rank: int | None
    next_lateness_ns: float | None


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


#: permutation draws of the lateness-sum test: a first round, and the most for a candidate
_FIRST_DRAWS = 10_000
_MAX_DRAWS = 200_000


def _sum_permutation_p(
    pool: np.ndarray, first: np.ndarray, size: np.ndarray, observed: float, *, seed: int
) -> float:
    """``P(S* >= observed)`` for ``S*`` the sum of one uniformly drawn member value from each of
    the instances (``pool[first[i] : first[i] + size[i]]``), estimated from draws with the
    usual +1 correction (a valid p-value): 10,000 draws, 200,000 when fewer than 20 reach the
    observed sum. Seeded: the same data give the same p.

    >>> pool = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])  # three instances of two members
    >>> p = _sum_permutation_p(pool, np.array([0, 2, 4]), np.array([2, 2, 2]), 3.0, seed=1)
    >>> abs(p - 1 / 8) < 0.01  # exactly 1/8: the largest member in each of three pairs
    True
    """
    rng = np.random.default_rng(seed)
    hits = drawn = 0
    n = len(first)
    chunk = max(1, 250_000 // max(n, 1))  # bounded memory: a few MB a round
    target = _FIRST_DRAWS
    while drawn < target:
        b = min(chunk, target - drawn)
        idx = first + (rng.random((b, n)) * size).astype(np.int64)
        hits += int((pool[idx].sum(axis=1) >= observed - 1e-6 * abs(observed)).sum())
        drawn += b
        if drawn >= target and target == _FIRST_DRAWS and hits < 20:
            target = _MAX_DRAWS
    return (hits + 1) / (drawn + 1)


def uniform_sum_upper_tail(total: float, n: int, k: int) -> float:
    """``P(S >= total)`` for ``S`` the sum of ``n`` independent uniforms on ``0 .. k - 1``.

    Exact (``n`` convolutions of the probability masses) when ``n · k · (n · (k - 1) + 1)`` is
    small, else the normal approximation with a
    continuity correction. A non-integer ``total`` (mean positions of ties) is rounded down,
    which keeps the tail conservative.

    >>> round(uniform_sum_upper_tail(34, 12, 4), 8)  # last at 10 of 12, second-last at 2
    5.42e-06
    >>> uniform_sum_upper_tail(0, 5, 3), uniform_sum_upper_tail(11, 5, 3)
    (1.0, 0.0)
    """
    if n <= 0 or k <= 1:
        return 1.0 if total <= 0 else 0.0
    top = n * (k - 1)
    t = math.floor(total + 1e-9)
    if t <= 0:
        return 1.0
    if t > top:
        return 0.0
    if n * k * (top + 1) <= _EXACT_CELLS:
        dist = np.ones(1)
        step = np.full(k, 1.0 / k)
        for _ in range(n):
            dist = np.convolve(dist, step)
        return float(min(1.0, dist[t:].sum()))
    mean = n * (k - 1) / 2.0
    sd = math.sqrt(n * (k * k - 1) / 12.0)
    return 0.5 * math.erfc((t - 0.5 - mean) / (sd * math.sqrt(2.0)))


def adjust_tarone(p: np.ndarray, min_p: np.ndarray, alpha: float) -> np.ndarray:
    """Bonferroni-adjusted p-values over the tests that can reach ``alpha`` (Tarone 1990).

    ``min_p[i]`` is the smallest p-value test ``i`` could give (its most extreme outcome). The
    family size is the smallest ``m`` such that at most ``m`` tests have ``min_p <= alpha / m``;
    tests that cannot reach that level keep their p-value times ``m`` too (never below it).

    >>> adjust_tarone(np.array([0.001, 0.5, 0.2]), np.array([1e-4, 0.1, 0.1]), 0.01).tolist()
    [0.001, 0.5, 0.2]
    >>> adjust_tarone(np.array([0.001, 0.5]), np.array([1e-4, 1e-4]), 0.01).tolist()
    [0.002, 1.0]
    """
    n = len(p)
    if n == 0:
        return p.astype(np.float64)
    ordered = np.sort(min_p)
    m = 1  # count(min_p <= alpha / m) only falls as m grows: one sorted pass
    while m < n and int(np.searchsorted(ordered, alpha / m, side="right")) > m:
        m += 1
    return np.minimum(1.0, p * m)


def wait_rows(table: EventTable, exclude: np.ndarray) -> np.ndarray:
    """Rows where a rank waits on a peer outside the matched collectives: point-to-point
    operations (host-side gloo/c10d ops, send/recv spans and communication kernels) not in
    ``exclude`` (the matched rows).

    >>> t = EventTable.from_rows([dict(rank=0, category=Category.CPU_OP, name="gloo:recv"),
    ...     dict(rank=0, category=Category.CPU_OP, name="aten::mm"),
    ...     dict(rank=1, category=Category.COLLECTIVE, name="send", coll_op="send")])
    >>> wait_rows(t, np.zeros(0, dtype=np.int64)).tolist()
    [0, 2]
    """
    cat = table["category"]
    ranked = table["rank"] >= 0
    names = table.strings["name"]
    ops = table.strings["coll_op"]
    name_p2p = np.array([n in _P2P_NAMES for n in names], dtype=bool)
    op_p2p = np.array([o.lower() in _P2P_OPS for o in ops], dtype=bool)
    comm = (cat == Category.COLLECTIVE) | (cat == Category.KERNEL_COMM)
    sel = ranked & (
        ((cat == Category.CPU_OP) & name_p2p[table["name"]])
        | (comm & (op_p2p[table["coll_op"]] | name_p2p[table["name"]]))
    )
    rows = np.flatnonzero(sel)
    if len(exclude):
        rows = rows[~np.isin(rows, exclude)]
    return rows


def self_caused_lateness(
    inst: np.ndarray,
    rank: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    raw: np.ndarray,
    *,
    wait_rank: np.ndarray | None = None,
    wait_end: np.ndarray | None = None,
) -> np.ndarray:
    """Each member's lateness that it caused itself (see the module docstring).

    ``raw`` is the fallback (arrival minus the median arrival) for members with no earlier
    exit on their rank or whose collective has fewer than two such members. Linear: one sort
    of every exit (members' ends and waits' ends) by (rank, time), one ``searchsorted``, one
    grouped median.

    >>> inst = np.array([0, 0, 1, 1]); rank = np.array([0, 1, 0, 1])
    >>> start = np.array([0, 0, 200, 900]); end = np.array([100, 100, 1000, 1000])
    >>> raw = np.array([0, 0, -350, 350])
    >>> self_caused_lateness(inst, rank, start, end, raw).tolist()  # rank 1's gap is its own
    [0.0, 0.0, -350.0, 350.0]
    >>> self_caused_lateness(inst, rank, start, end, raw, wait_rank=np.array([1]),
    ...                      wait_end=np.array([880])).tolist()  # it was in a receive
    [0.0, 0.0, 40.0, -40.0]
    """
    out = raw.astype(np.float64)
    m = len(start)
    if m == 0:
        return out
    er = rank.astype(np.int64)
    et = end.astype(np.int64)
    if wait_rank is not None and wait_end is not None and len(wait_rank):
        er = np.r_[er, wait_rank.astype(np.int64)]
        et = np.r_[et, wait_end.astype(np.int64)]
    ranks = np.unique(np.r_[er, rank])
    t0 = int(min(int(et.min()), int(start.min())))
    span = int(max(int(et.max()), int(start.max()))) - t0 + 2
    if span * (len(ranks) + 1) >= 2**62:  # cannot key (rank, time) in one int64: per rank
        gap = np.full(m, np.nan)
        for r in ranks.tolist():
            mine = rank == r
            ex = np.sort(et[er == r])
            pos = np.searchsorted(ex, start[mine], side="right") - 1
            g = np.full(int(mine.sum()), np.nan)
            ok = pos >= 0
            g[ok] = (start[mine][ok] - ex[pos[ok]]).astype(np.float64)
            gap[mine] = g
    else:
        rp_e = np.searchsorted(ranks, er)
        rp_m = np.searchsorted(ranks, rank)
        key_e = np.sort(rp_e * span + (et - t0))
        key_m = rp_m * span + (start.astype(np.int64) - t0)
        # the latest exit on the member's rank at or before its arrival
        pos = np.searchsorted(key_e, key_m, side="right") - 1
        ok = pos >= 0
        ok[ok] = key_e[pos[ok]] >= rp_m[ok] * span
        gap = np.full(m, np.nan)
        gap[ok] = (key_m[ok] - key_e[pos[ok]]).astype(np.float64)
    ok = np.isfinite(gap)
    if not ok.any():
        return out
    n = int(inst.max()) + 1
    med = group_median(gap, inst, n)
    have = np.bincount(inst[ok], minlength=n)
    med[have < 2] = np.nan
    use = ok & np.isfinite(med[inst])
    out[use] = gap[use] - med[inst[use]]
    return out


def collective_sites(
    op: list[str],
    group: list[str],
    key: list[str],
    nbytes: np.ndarray,
    first_arrival_ns: np.ndarray,
    *,
    step_of_instance: np.ndarray | None = None,
) -> tuple[np.ndarray, list[str]]:
    """Each instance's site code, and the site labels (see the module docstring).

    ``step_of_instance`` (-1 where unknown) adds the position among the instances of the same
    kind within their step.

    >>> code, labels = collective_sites(["allreduce"] * 4, ["0"] * 4, ["a", "b", "c", "d"],
    ...     np.array([64, 128, 64, 128]), np.array([0, 1, 2, 3]),
    ...     step_of_instance=np.array([0, 0, 1, 1]))
    >>> code.tolist(), labels
    ([0, 1, 0, 1], ['allreduce g=0 64B #0', 'allreduce g=0 128B #0'])
    """
    n = len(op)
    kinds: dict[tuple[str, str, str, int], int] = {}
    kind = np.empty(n, dtype=np.int64)
    for i in range(n):
        direction = ""
        if "->" in key[i]:  # a point-to-point transfer: its direction is part of the site
            direction = key[i].rsplit(":", 1)[0].rsplit(":", 1)[-1]
        kind[i] = kinds.setdefault((op[i], group[i], direction, int(nbytes[i])), len(kinds))
    pos = np.zeros(n, dtype=np.int64)
    if step_of_instance is not None and (step_of_instance >= 0).any():
        order = np.lexsort((first_arrival_ns, step_of_instance, kind))
        k, s = kind[order], step_of_instance[order]
        new = np.r_[True, (k[1:] != k[:-1]) | (s[1:] != s[:-1])]
        idx = np.arange(n)
        first = np.maximum.accumulate(np.where(new, idx, 0))
        pos[order] = np.where(s >= 0, idx - first, 0)
    names = {v: k for k, v in kinds.items()}
    sites: dict[tuple[int, int], int] = {}
    code = np.empty(n, dtype=np.int64)
    labels: list[str] = []
    for i in range(n):
        c = sites.get((int(kind[i]), int(pos[i])))
        if c is None:
            o, g, d, b = names[int(kind[i])]
            label = o + (f" g={g}" if g else "") + (f" {d}" if d else "")
            label += (f" {b}B" if b > 0 else "") + f" #{int(pos[i])}"
            c = sites[(int(kind[i]), int(pos[i]))] = len(labels)
            labels.append(label)
        code[i] = c
    return code, labels


def _positions(inst: np.ndarray, late: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each member's position (0 = earliest) by lateness within its instance, ties sharing
    the mean position; and each member's instance size."""
    m = len(inst)
    order = np.lexsort((late, inst))
    si, sl = inst[order], late[order]
    counts = np.bincount(inst)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    idx = np.arange(m)
    # runs of equal (instance, lateness): the mean of their positions
    new = np.r_[True, (si[1:] != si[:-1]) | (sl[1:] != sl[:-1])]
    run = np.cumsum(new) - 1
    run_first = idx[new]
    run_len = np.bincount(run)
    mean_pos = run_first[run] + (run_len[run] - 1) / 2.0 - starts[si]
    pos = np.empty(m)
    pos[order] = mean_pos
    return pos, counts[inst]


def site_tests(
    inst: np.ndarray,
    rank: np.ndarray,
    late: np.ndarray,
    site_of_instance: np.ndarray,
    site_labels: list[str],
    *,
    min_instances: int = 4,
    alpha: float = 0.01,
    pooled: bool = True,
) -> list[SiteTest]:
    """Every rank tested at every site with ``min_instances`` instances (and pooled).

    Args:
        inst, rank, late: per member, its instance, rank and self-caused lateness (ns).
        site_of_instance, site_labels: :func:`collective_sites`'s output.
        min_instances: a site needs at least this many instances of a rank to be tested.
        alpha: the family-wise level Tarone's family size is chosen for.
        pooled: also test each rank over all its collectives (``site == "all"``).

    Returns:
        One :class:`SiteTest` per (rank, site) tested, ``p_adjusted`` over all of them.
    """
    if len(inst) == 0:
        return []
    members = _Members.of(inst, rank, late, site_of_instance[inst])
    labels = list(site_labels)
    groups = [(members.site, labels)]
    if pooled and len(labels) > 1:
        groups.append((np.zeros(len(inst), dtype=np.int64), ["all"]))
    cells: list[_Cell] = []
    tops: dict[tuple[bool, int], list[tuple[float, int]]] = {}
    for s_code, s_labels in groups:
        cells += _cells(members, s_code, s_labels, min_instances, tops)
    if not cells:
        return []
    tails = [_tails(c, members) for c in cells]
    p_adj = adjust_tarone(np.array([t[2] for t in tails]), np.array([t[3] for t in tails]), alpha)
    spreads = _site_spreads(members)
    ranks_all = np.unique(rank)
    tests = []
    for c, (p_order, p_sum, p, _), p_a in zip(cells, tails, p_adj.tolist()):
        peer_med, spread = _peer_spread(c, members, spreads, peers=p_a <= alpha)
        nxt = next(((v, j) for v, j in tops[(c.pooled, c.site_code)] if j != c.r), None)
        tests.append(
            SiteTest(
                rank=c.rank,
                site=c.site,
                instances=c.n,
                last=c.last,
                position_sum=c.psum,
                expected=c.mean,
                z=c.z,
                lateness_sum_ns=c.lsum,
                expected_sum_ns=c.lmean,
                p_order=float(p_order),
                p_sum=float(p_sum),
                p=float(p),
                p_adjusted=p_a,
                median_lateness_ns=c.median,
                peer_median_lateness_ns=peer_med,
                peer_spread_ns=spread,
                effect=(c.median - peer_med) / spread,
                next_rank=None if nxt is None else int(ranks_all[nxt[1]]),
                next_lateness_ns=None if nxt is None else nxt[0],
            )
        )
    return tests


class _Members(NamedTuple):
    """The collective members the tests read, and their instances' null moments and draws."""

    inst: np.ndarray
    rank: np.ndarray
    late: np.ndarray
    site: np.ndarray  # each member's site code
    pos: np.ndarray  # its position by lateness in its instance (ties: the mean position)
    size: np.ndarray  # its instance's size
    inst_mean: np.ndarray  # per instance: its members' lateness, mean
    inst_var: np.ndarray  # ... and (population) variance: the null moments of one draw
    inst_first: np.ndarray  # per instance: its first member in the draws' pool
    inst_count: np.ndarray  # per instance: its members (at least 1)
    pool: np.ndarray  # the members' lateness grouped by instance, sorted within
    by_rank: np.ndarray  # the members by rank (stable)
    rank_sorted: np.ndarray  # their ranks

    @staticmethod
    def of(inst: np.ndarray, rank: np.ndarray, late: np.ndarray, site: np.ndarray) -> _Members:
        """The members of instances ``inst`` (per member its rank, lateness and site)."""
        pos, size = _positions(inst, late)
        n_inst = int(inst.max()) + 1
        cnt = np.maximum(np.bincount(inst, minlength=n_inst), 1)
        inst_mean = np.bincount(inst, weights=late, minlength=n_inst) / cnt
        inst_var = np.bincount(inst, weights=(late - inst_mean[inst]) ** 2, minlength=n_inst) / cnt
        by_inst = np.lexsort((late, inst))  # canonical: the draws do not depend on row order
        inst_first = np.r_[0, np.cumsum(np.bincount(inst, minlength=n_inst))[:-1]]
        by_rank = np.argsort(rank, kind="stable")
        return _Members(
            inst=inst,
            rank=rank,
            late=late,
            site=site,
            pos=pos,
            size=size,
            inst_mean=inst_mean,
            inst_var=inst_var,
            inst_first=inst_first,
            inst_count=cnt,
            pool=late[by_inst],
            by_rank=by_rank,
            rank_sorted=rank[by_rank],
        )


class _Cell(NamedTuple):
    """One rank at one site (or pooled): its test statistics before the p-values."""

    cell: int  # site code × ranks + the rank's index
    rank: int
    site: str
    site_code: int
    n: int  # instances
    last: int  # instances where it was the latest
    psum: float  # the sum of its positions
    mean: float  # ... and that sum's null mean
    z: float  # the position sum's standard score
    k: int  # the instances' size when they are all that size, else -1
    kmin: int  # the smallest instance size
    median: float  # its median lateness there
    lsum: float  # its lateness summed
    lmean: float  # ... and that sum's null mean
    zsum: float  # the lateness sum's standard score
    pooled: bool
    r: int  # the rank's index among the ranks


def _cells(
    m: _Members,
    s_code: np.ndarray,
    s_labels: list[str],
    min_instances: int,
    tops: dict[tuple[bool, int], list[tuple[float, int]]],
) -> list[_Cell]:
    """The cells (rank × site of ``s_code``) with ``min_instances`` instances, from grouped
    sums; into ``tops``, per site, the two ranks with the largest median lateness (the "next"
    rank of each test is the first of them that is not its own): one pass, not one per test."""
    ranks = np.unique(m.rank)
    cell = s_code * len(ranks) + np.searchsorted(ranks, m.rank)
    ncell = len(s_labels) * len(ranks)
    n = np.bincount(cell, minlength=ncell)
    psum = np.bincount(cell, weights=m.pos, minlength=ncell)
    lasts = np.bincount(cell, weights=(m.pos >= m.size - 1), minlength=ncell)
    mean = np.bincount(cell, weights=(m.size - 1) / 2.0, minlength=ncell)
    var = np.bincount(cell, weights=(m.size * m.size - 1) / 12.0, minlength=ncell)
    kmax = np.zeros(ncell, dtype=np.int64)
    np.maximum.at(kmax, cell, m.size)
    kmin = np.full(ncell, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(kmin, cell, m.size)
    med = group_median(m.late, cell, ncell)
    lsum = np.bincount(cell, weights=m.late, minlength=ncell)
    lmean = np.bincount(cell, weights=m.inst_mean[m.inst], minlength=ncell)
    lvar = np.bincount(cell, weights=m.inst_var[m.inst], minlength=ncell)
    out = []
    for c in np.flatnonzero(n >= min_instances).tolist():
        s, r = divmod(c, len(ranks))
        z = (psum[c] - mean[c]) / math.sqrt(var[c]) if var[c] > 0 else 0.0
        zsum = float((lsum[c] - lmean[c]) / math.sqrt(lvar[c])) if lvar[c] > 0 else 0.0
        out.append(
            _Cell(
                cell=c,
                rank=int(ranks[r]),
                site=s_labels[s],
                site_code=s,
                n=int(n[c]),
                last=int(lasts[c]),
                psum=float(psum[c]),
                mean=float(mean[c]),
                z=float(z),
                k=int(kmax[c]) if kmax[c] == kmin[c] else -1,
                kmin=int(kmin[c]),
                median=float(med[c]),
                lsum=float(lsum[c]),
                lmean=float(lmean[c]),
                zsum=zsum,
                pooled=s_labels == ["all"],
                r=r,
            )
        )
    for s in range(len(s_labels)):
        meds_s = med[s * len(ranks) : (s + 1) * len(ranks)]
        ok = np.flatnonzero(np.isfinite(meds_s))
        best = ok[np.argsort(-meds_s[ok], kind="stable")[:2]]
        tops[(s_labels == ["all"], s)] = [(float(meds_s[j]), int(j)) for j in best]
    return out


def _tails(c: _Cell, m: _Members) -> tuple[float, float, float, float]:
    """A cell's p-values: the order test's tail (normal, exact for a candidate), the
    lateness-sum test's (drawn for a candidate), both together (Bonferroni over the two) and
    the smallest that could be (Tarone's refinement reads it)."""
    k = c.k if c.k > 1 else c.kmin
    p_order = 0.5 * math.erfc(c.z / math.sqrt(2.0)) if c.z > 0 else 1.0
    if c.k > 1 and p_order < 0.05:  # a candidate: its exact tail
        p_order = uniform_sum_upper_tail(c.psum, c.n, c.k)
    p_sum = 1.0
    if c.zsum > 2.0:  # a candidate: its permutation tail, drawn
        lo, hi = np.searchsorted(m.rank_sorted, [c.rank, c.rank + 1])
        mine = m.by_rank[lo:hi]  # the rank's members, without a pass over every member
        if not c.pooled:
            mine = mine[m.site[mine] == c.site_code]
        ids = np.sort(m.inst[mine])
        p_sum = _sum_permutation_p(
            m.pool, m.inst_first[ids], m.inst_count[ids], c.lsum, seed=c.cell * 7919 + c.rank
        )
    order_floor = float(k) ** (-c.n) if k > 1 else 1.0
    p = min(1.0, 2.0 * min(p_order, p_sum))
    return p_order, p_sum, p, min(1.0, 2.0 * min(order_floor, 1.0 / (_MAX_DRAWS + 1)))


def _site_spreads(m: _Members) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per site code, then pooled: the median and the median absolute deviation of every
    member's lateness (one grouped pass each)."""
    out = []
    for codes in (m.site, np.zeros(len(m.inst), dtype=np.int64)):
        nc = int(codes.max()) + 1
        med = group_median(m.late, codes, nc)
        mad = group_median(np.abs(m.late - med[codes]), codes, nc)
        out.append((med, mad))
    return out


def _peer_spread(
    c: _Cell, m: _Members, spreads: list[tuple[np.ndarray, np.ndarray]], *, peers: bool
) -> tuple[float, float]:
    """The median lateness and robust spread (1.4826 × MAD, at least ``MIN_SPREAD_NS``) a
    cell's effect is measured against: every member's at its site; with ``peers`` (a test
    that clears the level), its peers' there (without its own rank)."""
    which = 1 if c.site == "all" else 0
    med, mad = spreads[which]
    peer_med, spread = float(med[c.site_code]), 1.4826 * float(mad[c.site_code])
    if peers:
        here = (m.site == c.site_code) if which == 0 else np.ones(len(m.inst), dtype=bool)
        peer_late = m.late[here & (m.rank != c.rank)]
        if len(peer_late):
            peer_med = float(np.median(peer_late))
            spread = 1.4826 * float(np.median(np.abs(peer_late - peer_med)))
    return peer_med, max(spread, MIN_SPREAD_NS)


def step_of_instances(
    table: EventTable, inst: np.ndarray, rank: np.ndarray, start: np.ndarray, n_instances: int
) -> np.ndarray:
    """Each instance's profiler step (the ``STEP`` row holding its lowest rank's arrival on that
    rank), -1 where the trace annotates no step there.

    >>> t = EventTable.from_rows([dict(rank=0, category=Category.STEP, name="ProfilerStep#1",
    ...     start_ns=0, end_ns=100), dict(rank=0, category=Category.STEP,
    ...     name="ProfilerStep#2", start_ns=100, end_ns=200)])
    >>> step_of_instances(t, np.array([0, 1, 2]), np.array([0, 0, 0]),
    ...     np.array([50, 150, 250]), 3).tolist()
    [0, 1, -1]
    """
    out = np.full(n_instances, -1, dtype=np.int64)
    steps = np.flatnonzero((table["category"] == Category.STEP) & (table["rank"] >= 0))
    if len(steps) == 0 or len(inst) == 0:
        return out
    # the lowest-rank member of each instance
    order = np.lexsort((rank, inst))
    first = np.r_[True, inst[order][1:] != inst[order][:-1]]
    rep = order[first]
    r_rep, t_rep, i_rep = rank[rep], start[rep], inst[rep]
    s_rank = table["rank"][steps].astype(np.int64)
    s_start = table["start_ns"][steps]
    s_end = table["end_ns"][steps]
    for r in np.unique(r_rep).tolist():
        mine = s_rank == r
        if not mine.any():
            continue
        o = np.argsort(s_start[mine], kind="stable")
        st, en = s_start[mine][o], s_end[mine][o]
        q = r_rep == r
        pos = np.searchsorted(st, t_rep[q], side="right") - 1
        ok = (pos >= 0) & (t_rep[q] < en[np.maximum(pos, 0)])
        out[i_rep[q][ok]] = pos[ok]
    return out
