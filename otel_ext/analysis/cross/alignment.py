"""Cross-rank clock alignment without clock samples, and causality before and after repair.

Each rank's trace is stamped by its own host clock. Holistic Trace Analysis aligns ranks by
subtracting one global minimum, which leaves every offset between the hosts in place. We use
what collectives guarantee instead: the members of one collective leave it at nearly the same
instant (nobody can leave before the last one arrives, and the data then flows at once), so
``end[k, r] = E[k] + offset[r] (+ drift[r] · t)`` for every matched collective ``k`` and rank
``r``. A robust fit (alternating medians, then a drift slope when it is significant) gives each
rank's offset, drift and a bound (the largest residual of that rank's exits): aligned time =
raw time − offset − drift · (raw time − reference time).

Causality: no member of a collective can leave before the last member arrives. A violation is
a member whose (aligned) end precedes the (aligned) last arrival. We count them on the raw
times and after alignment and repair. Repair first uses the per-rank corrections above; what
remains (noise below the bound) is fixed event by event, moving the offending end forward to
the last arrival and pushing later events of the same stream just enough to keep their order
(a controlled-logical-clock forward pass). When :mod:`otel_ext.clocks` offers its
collective-based estimator and causality repair, those are used; the fallbacks here follow
the same contract.

>>> from otel_ext.analysis.table import Category, EventTable
>>> rows = []
>>> for k in range(5):
...     for r, off in [(0, 0), (1, 7_000)]:
...         rows.append(dict(start_ns=k * 1000 + off + 10 * r, end_ns=k * 1000 + 500 + off,
...                          rank=r, category=Category.KERNEL_COMM, coll_op="allreduce",
...                          coll_seq=k, coll_group="g"))
>>> a = align_ranks(EventTable.from_rows(rows))
>>> a.offsets_ns, a.violations_before, a.violations_after
({0: 0.0, 1: 7000.0}, 5, 0)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_ext._arrays import distinct, distinct_rows, median
from otel_ext.analysis.cross.collective_match import CollectiveMatch, match_collectives
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable
from otel_ext.errors import OtelExtError

__all__ = [
    "Alignment",
    "RankClocks",
    "align_ranks",
    "clock_groups",
    "count_violations",
    "estimate_rank_offsets",
    "parse_host_of",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankClocks:
    """The clock correction :func:`align_ranks` applied, as a function of any table of the
    same ranks: what moves the rows a worker kept (a rank's runtime calls) exactly as the
    aligned table's rows were moved (one increasing function of time per clock domain,
    element by element; the event-level repair is not in it, see
    :attr:`Alignment.repaired_rows`).

    Attributes:
        rank_domain: rank -> its clock domain.
        applied: the domains whose shift was applied (the others keep their times).
        estimate: the estimator's result (its ``to_reference_ns``), None when nothing moved.
        base: the time the estimate is relative to (ns).
    """

    rank_domain: dict[int, int] = field(default_factory=dict)
    applied: frozenset[int] = frozenset()
    estimate: Any = None
    base: int = 0

    def move(self, rank: int, times: np.ndarray) -> np.ndarray:
        """Times of rows of ``rank``, moved as :meth:`apply` moves that rank's rows."""
        if self.estimate is None or self.rank_domain.get(rank) not in self.applied:
            return times
        dom = np.full(len(times), self.rank_domain[rank], dtype=np.int64)
        out = np.array(times, dtype=np.int64)  # assigned into, as _apply_domains' columns
        out[:] = self.estimate.to_reference_ns(dom, out - self.base) + self.base
        return out

    def apply(self, table: EventTable) -> EventTable:
        """``table`` with the rows of the applied domains' ranks moved (a copy of the two time
        columns; the same table when nothing moves)."""
        if self.estimate is None or not self.applied:
            return table
        return _apply_domains(table, self.rank_domain, self.estimate, self.base, set(self.applied))


@dataclass
class Alignment:
    """The outcome of :func:`align_ranks`.

    Attributes:
        table: the aligned and repaired copy of the input table (same rows, same order).
        match: the collectives matched, with aligned times.
        offsets_ns, drift_ppm, bounds_ns: per rank; aligned = raw − offset − drift·(t − t0).
        method: ``"collectives"``, ``"clocks"`` (the clocks package's estimator) or
            ``"none"`` (nothing to align by: one rank, or no shared collective).
        violations_before, violations_after: collective members leaving before the last
            arrival, on the raw times and after alignment and repair.
        repaired_events, max_repair_shift_ns: what the event-level repair moved.
        clocks: the per-domain correction, to move other rows of the same ranks alike.
        repaired_rows: the rows of the input table whose times the event-level repair changed
            (after :attr:`clocks`): ``table``'s times there are the repair's.
        repair_skipped: violations beyond the bounds called for the event-level repair, and
            ``repair=False`` left it out (a caller without every device row asks again with
            them).
    """

    table: EventTable
    match: CollectiveMatch
    offsets_ns: dict[int, float]
    drift_ppm: dict[int, float]
    bounds_ns: dict[int, float]
    method: str
    violations_before: int
    violations_after: int
    repaired_events: int = 0
    max_repair_shift_ns: int = 0
    reference_ns: dict[int, int] = field(default_factory=dict)
    estimate_ns: dict[int, float] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)
    clock_of: dict[int, str] = field(default_factory=dict)
    violations_within_bound: int = 0
    moved_by_rank: dict[int, tuple[int, int]] = field(default_factory=dict)
    consistent: bool = True
    clocks: RankClocks = field(default_factory=RankClocks)
    repaired_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    repair_skipped: bool = False

    def causality(self) -> dict[str, Any]:
        """The JSON ``causality`` object."""
        return {
            "violations_before": self.violations_before,
            "violations_within_bound": self.violations_within_bound,
            "violations_after": self.violations_after,
            "repaired_events": self.repaired_events,
            "max_repair_shift_ns": self.max_repair_shift_ns,
            "method": self.method,
            "constraints_consistent": self.consistent,
            "per_rank": [
                {"rank": r, "moved_events": n, "max_shift_ns": m}
                for r, (n, m) in sorted(self.moved_by_rank.items())
                if n
            ],
        }


def count_violations(
    match: CollectiveMatch, *, tolerance_ns: int = 0, slack_ns: np.ndarray | None = None
) -> int:
    """Members of a collective whose end precedes the last member's arrival.

    With ``slack_ns`` (one value per member: its clock's uncertainty), a member violates only
    when its end plus its slack precedes the latest member arrival less that member's slack.

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> t = EventTable.from_rows([dict(start_ns=0, end_ns=5, rank=0, coll_seq=0,
    ...     category=Category.KERNEL_COMM), dict(start_ns=9, end_ns=12, rank=1, coll_seq=0,
    ...     category=Category.KERNEL_COMM)])
    >>> count_violations(match_collectives(t))
    1
    """
    if match.n_instances == 0:
        return 0
    if slack_ns is None:
        last = match.last_arrival_ns[match.member_instance]
        return int(np.count_nonzero(match.member_end_ns + tolerance_ns < last))
    latest = np.full(match.n_instances, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, match.member_instance, match.member_start_ns - slack_ns)
    late = match.member_end_ns + slack_ns + tolerance_ns < latest[match.member_instance]
    return int(np.count_nonzero(late))


def estimate_rank_offsets(
    rank: np.ndarray,
    instance: np.ndarray,
    end_ns: np.ndarray,
    *,
    iterations: int = 6,
    fit_drift: bool = True,
) -> tuple[dict[int, float], dict[int, float], dict[int, float], dict[int, int]]:
    """Per-rank clock offset, drift and bound from collective exit times.

    Args:
        rank, instance, end_ns: one entry per collective member (same length).
        iterations: rounds of the alternating-median fit.
        fit_drift: also fit a linear drift per rank when it is significant.

    Returns:
        ``(offsets_ns, drift_ppm, bounds_ns, reference_ns)``, each keyed by rank; the lowest
        rank is the reference (offset 0, drift 0).

    >>> off, drift, bound, _ = estimate_rank_offsets(
    ...     np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), np.array([100, 350, 200, 450]))
    >>> off, bound
    ({0: 0.0, 1: 250.0}, {0: 0.0, 1: 0.0})
    """
    ranks = distinct(rank)
    if len(ranks) == 0:
        return {}, {}, {}, {}
    rpos = np.searchsorted(ranks, rank)
    _, ipos = np.unique(instance, return_inverse=True)
    ipos = ipos.reshape(-1)
    n_inst = int(ipos.max()) + 1 if len(ipos) else 0
    base = int(end_ns.min())
    e = (end_ns - base).astype(np.float64)  # relative: float64 keeps every nanosecond
    t0 = np.array([e[rpos == i].min() for i in range(len(ranks))])
    off = np.zeros(len(ranks))
    drift = np.zeros(len(ranks))

    def corrected() -> np.ndarray:
        return e - off[rpos] - drift[rpos] * (e - t0[rpos])

    def inst_median(v: np.ndarray) -> np.ndarray:
        order = np.lexsort((v, ipos))
        counts = np.bincount(ipos, minlength=n_inst)
        starts = np.r_[0, np.cumsum(counts)[:-1]]
        lo = v[order[starts + (counts - 1) // 2]]
        hi = v[order[starts + counts // 2]]
        return (lo + hi) / 2

    def rank_median(v: np.ndarray) -> np.ndarray:
        return np.array([median(v[rpos == i]) for i in range(len(ranks))])

    for _ in range(iterations):
        ek = inst_median(corrected())
        off = rank_median(e - drift[rpos] * (e - t0[rpos]) - ek[ipos])
        off -= off[0]
    if fit_drift:
        ek = inst_median(corrected())
        for i in range(1, len(ranks)):
            sel = rpos == i
            if sel.sum() < 8:
                continue
            x = e[sel] - t0[i]
            if np.ptp(x) <= 0:
                continue
            y = e[sel] - ek[ipos[sel]] - off[i]
            slope = np.polyfit(x, y, 1)[0]
            resid_before = median(np.abs(y - median(y)))
            y2 = y - slope * x
            resid_after = median(np.abs(y2 - median(y2)))
            if resid_after < 0.5 * resid_before and abs(slope) * np.ptp(x) > 3 * resid_after:
                drift[i] = slope
        for _ in range(iterations):
            ek = inst_median(corrected())
            off = rank_median(e - drift[rpos] * (e - t0[rpos]) - ek[ipos])
            off -= off[0]
    resid = corrected() - inst_median(corrected())[ipos]
    bounds = np.zeros(len(ranks))
    for i in range(len(ranks)):
        if i == 0:
            continue
        r = resid[rpos == i]
        # the reference's own residual noise counts too
        bounds[i] = float(np.abs(r).max() + np.abs(resid[rpos == 0]).max()) if len(r) else 0.0
    keys = [int(r) for r in ranks]
    return (
        {k: float(off[i]) for i, k in enumerate(keys)},
        {k: float(drift[i] * 1e6) for i, k in enumerate(keys)},
        {k: float(bounds[i]) for i, k in enumerate(keys)},
        {k: int(t0[i]) + base for i, k in enumerate(keys)},
    )


def parse_host_of(spec: str) -> dict[int, str]:
    """Ranks per clock from ``--host-of``: ``RANKS=NAME`` items separated by ``;``, RANKS a
    comma list of ranks and ``A-B`` ranges.

    >>> parse_host_of("0-3=hostA;4,5,7=hostB")
    {0: 'hostA', 1: 'hostA', 2: 'hostA', 3: 'hostA', 4: 'hostB', 5: 'hostB', 7: 'hostB'}
    >>> parse_host_of("0-3")
    Traceback (most recent call last):
    ...
    otel_ext.errors.OtelExtError: --host-of '0-3': expected RANKS=NAME items separated by ';'
    """
    out: dict[int, str] = {}
    for item in filter(None, (x.strip() for x in spec.split(";"))):
        ranks, sep, name = item.partition("=")
        if not sep or not name.strip():
            raise OtelExtError(f"--host-of {spec!r}: expected RANKS=NAME items separated by ';'")
        for part in filter(None, (x.strip() for x in ranks.split(","))):
            a, dash, b = part.partition("-")
            try:
                lo, hi = int(a), int(b) if dash else int(a)
            except ValueError:
                raise OtelExtError(
                    f"--host-of {spec!r}: {part!r} is not a rank or A-B range"
                ) from None
            if hi < lo:
                raise OtelExtError(f"--host-of {spec!r}: range {part!r} runs backwards")
            for r in range(lo, hi + 1):
                out[r] = name.strip()
    return out


def clock_groups(table: EventTable, clock_of: dict[int, str] | None = None) -> dict[str, list[int]]:
    """Ranks grouped by the clock their times are on: one group per host.

    Every span time in a table is on its host's clock (device activity is mapped onto the
    host clock when it is recorded), so ranks of one host share a timeline. A rank whose host
    is unknown (a profiler trace without host identity) is a group of its own, unless
    ``clock_of`` (rank -> clock name, from ``--same-clock`` or ``--host-of``) says which clock
    it shares; ``clock_of`` wins over the table's hosts.

    >>> from otel_ext.analysis.table import EventTable
    >>> t = EventTable.from_rows([dict(rank=0, host="h0"), dict(rank=1, host="h0"),
    ...                           dict(rank=2, host="h1"), dict(rank=3)])
    >>> clock_groups(t)
    {'h0': [0, 1], 'h1': [2], 'rank3': [3]}
    """
    rank = table["rank"]
    host = table["host"]
    names = table.strings["host"]
    groups: dict[str, list[int]] = {}
    sel = (rank >= 0) & (host != 0)
    pairs = distinct_rows(np.stack([rank[sel].astype(np.int64), host[sel].astype(np.int64)], 1))
    hosts_of: dict[int, list[int]] = {}
    for r, h in pairs.tolist():
        hosts_of.setdefault(r, []).append(h)
    for r in sorted(int(x) for x in distinct(rank) if x >= 0):
        if clock_of and r in clock_of:
            key = f"clock:{clock_of[r]}"
        else:
            codes = hosts_of.get(r, [])
            key = names[int(codes[0])] if len(codes) == 1 else f"rank{r}"
        groups.setdefault(key, []).append(r)
    return groups


#: slack standing for "no bound at all" (a clock nothing constrains): about 18 minutes
_UNBOUNDED_NS = 1 << 40


def _domain_estimate(
    match: CollectiveMatch,
    domain_of_member: np.ndarray,
    *,
    fit_drift: bool,
    uncertainty_ns: np.ndarray | None = None,
) -> tuple[Any, int] | None:
    """The clocks package's collective-based estimator, one offset per clock domain;
    ``uncertainty_ns`` per member (its spans' stated clock uncertainty) loosens the causal
    limits."""
    from otel_ext.clocks import estimate_offsets_from_collectives

    base = int(match.member_start_ns.min())
    try:
        est = estimate_offsets_from_collectives(
            domain_of_member,
            match.member_instance,
            match.member_start_ns - base,  # relative: float64 keeps every nanosecond
            match.member_end_ns - base,
            fit_drift=None if fit_drift else False,
            uncertainty_ns=uncertainty_ns,
        )
    except OtelExtError as exc:
        _log.info("clocks estimator declined (%s); using the built-in fit", exc)
        return None
    return est, base


def _member_uncertainty(table: EventTable, match: CollectiveMatch) -> np.ndarray | None:
    """Per collective member, the largest clock uncertainty its rows state (None when no row
    states one, as in profiler traces)."""
    if "clock_uncertainty_ns" not in table.columns or match.n_instances == 0:
        return None
    u = table["clock_uncertainty_ns"][match.row_index]
    if not (u > 0).any():
        return None
    out = np.zeros(len(match.member_instance))
    np.maximum.at(out, match.row_member, u)
    return out


def _apply_domains(
    table: EventTable, rank_domain: dict[int, int], est: Any, base: int, applied: set[int]
) -> EventTable:
    """Rows of ranks whose clock domain's shift is applied, moved onto the reference's
    timeline; every other row kept as recorded."""
    if not applied:
        return table
    rank = table["rank"]
    ranks_moved = np.array(sorted(r for r, d in rank_domain.items() if d in applied), np.int64)
    sel = np.isin(rank, ranks_moved)
    lut_r = np.array(sorted(rank_domain), dtype=np.int64)
    lut_d = np.array([rank_domain[r] for r in lut_r.tolist()], dtype=np.int64)
    dom = lut_d[np.searchsorted(lut_r, rank[sel])]
    cols = dict(table.columns)
    for name in ("start_ns", "end_ns"):
        col = table[name].copy()
        col[sel] = est.to_reference_ns(dom, col[sel] - base) + base
        cols[name] = col
    return EventTable(cols, table.strings, dict(table.meta))


def _clocks_repair(
    table: EventTable, match: CollectiveMatch, slack_of_rank: dict[int, int]
) -> tuple[EventTable, int, int] | None:
    """The clocks package's causality repair over every device event of the ranks, with each
    rank's clock uncertainty as the slack its collective constraints allow."""
    from otel_ext.clocks import repair_causality

    cat = table["category"]
    rank = table["rank"]
    dev = (rank >= 0) & (
        np.isin(cat, [int(c) for c in DEVICE_CATEGORIES]) | (cat == Category.COLLECTIVE)
    )
    dev[match.row_index] = True
    rows = np.flatnonzero(dev)
    coll = np.full(len(table), -1, dtype=np.int64)
    coll[match.row_index] = match.member_instance[match.row_member]
    base = int(table["start_ns"][rows].min()) if len(rows) else 0
    lut_r = np.array(sorted(slack_of_rank), dtype=np.int64)
    lut_s = np.array([slack_of_rank[r] for r in lut_r.tolist()], dtype=np.int64)
    rr = rank[rows]
    pos = np.clip(np.searchsorted(lut_r, rr), 0, max(len(lut_r) - 1, 0))
    slack = np.where(lut_r[pos] == rr, lut_s[pos], 0) if len(lut_r) else np.zeros(len(rr), np.int64)
    try:
        rep = repair_causality(
            rr,
            table["start_ns"][rows] - base,
            table["end_ns"][rows] - base,
            collective=coll[rows],
            slack_ns=slack,
            domain_offsets=False,  # offsets were estimated, with their bounds, before
        )
    except OtelExtError as exc:
        _log.info("clocks repair declined (%s); using the built-in repair", exc)
        return None
    start = table["start_ns"].copy()
    end = table["end_ns"].copy()
    start[rows] = rep.start_ns + base
    end[rows] = rep.end_ns + base
    cols = dict(table.columns)
    cols["start_ns"], cols["end_ns"] = start, end
    shifts = np.abs(np.r_[rep.shift_start_ns, rep.shift_end_ns, 0])
    return EventTable(cols, table.strings, dict(table.meta)), len(rep.shifted), int(shifts.max())


def _moved_by_rank(before: EventTable, after: EventTable) -> dict[int, tuple[int, int]]:
    """Per rank: rows whose times the repair changed, and the largest change (ns)."""
    rank = before["rank"]
    ds = np.abs(after["start_ns"] - before["start_ns"])
    de = np.abs(after["end_ns"] - before["end_ns"])
    moved = ((ds > 0) | (de > 0)) & (rank >= 0)
    if not moved.any():
        return {}
    r = rank[moved].astype(np.int64)
    shift = np.maximum(ds[moved], de[moved])
    ur, inv = np.unique(r, return_inverse=True)
    counts = np.bincount(inv.reshape(-1), minlength=len(ur))
    top = np.zeros(len(ur), dtype=np.int64)
    np.maximum.at(top, inv.reshape(-1), shift)
    return {int(x): (int(c), int(m)) for x, c, m in zip(ur.tolist(), counts.tolist(), top.tolist())}


def align_ranks(
    table: EventTable,
    match: CollectiveMatch | None = None,
    *,
    repair: bool = True,
    fit_drift: bool = True,
    clock_of: dict[int, str] | None = None,
) -> Alignment:
    """Align ranks' timelines where the collectives they share identify the offsets.

    Ranks on one clock (one host; or as ``clock_of`` says) form one clock domain with one
    correction. Each domain's offset (and drift) against the lowest rank's domain is
    estimated from collective exits, with a bound (statistical, capped by what causality
    allows). A shift is applied only when it exceeds its own bound; otherwise the domain keeps
    its recorded times and its status says the offset is unidentifiable. Causality repair then
    counts a collective member leaving before the last arrival only beyond the two clocks'
    uncertainty, and moves events only by what exceeds it (no repair runs when nothing does).

    Args:
        table: all ranks' events, each on its own clock.
        match: the collectives matched on ``table`` (computed when not given).
        repair: also repair the causality violations beyond the clocks' bounds.
        fit_drift: fit a per-domain drift besides the offset (when significant).
        clock_of: rank -> clock name for ranks known to share a clock.

    Returns:
        An :class:`Alignment` holding the aligned table and the per-rank corrections.
    """
    if match is None:
        match = match_collectives(table)
    before = count_violations(match)
    ranks = sorted(int(r) for r in distinct(table["rank"]) if r >= 0)
    groups = clock_groups(table, clock_of)
    clock_name = {r: name for name, members in groups.items() for r in members}
    zero = {r: 0.0 for r in ranks}
    if match.n_instances == 0 or len(distinct(match.member_rank)) < 2:
        status = {r: "no shared collective" for r in ranks}
        return Alignment(
            table, match, zero, dict(zero), dict(zero), "none", before, before,
            estimate_ns=dict(zero), status=status, clock_of=clock_name,
            violations_within_bound=0,
        )  # fmt: skip
    names = sorted(groups, key=lambda g: min(groups[g]))  # the lowest rank's clock first
    rank_domain = {r: i for i, g in enumerate(names) for r in groups[g]}
    lut_r = np.array(sorted(rank_domain), dtype=np.int64)
    lut_d = np.array([rank_domain[r] for r in lut_r.tolist()], dtype=np.int64)
    member_domain = lut_d[np.searchsorted(lut_r, match.member_rank)]
    got = _domain_estimate(
        match, member_domain, fit_drift=fit_drift, uncertainty_ns=_member_uncertainty(table, match)
    )
    offsets, drift, bounds, estimate, status = dict(zero), dict(zero), {}, dict(zero), {}
    applied: set[int] = set()
    ref_time: dict[int, int] = {}
    aligned = table
    clocks = RankClocks(dict(rank_domain))
    method = "none"
    consistent = True
    if got is not None:
        est, base = got
        method = "collectives"
        consistent = bool(est.consistent)
        dom_ids = [int(d) for d in est.ranks]
        ref_dom = int(est.reference_rank)
        per_dom: dict[int, tuple[float, float, float]] = {
            d: (float(est.offset_ns[i]), float(est.drift_ppm[i]), float(est.bound_ns[i]))
            for i, d in enumerate(dom_ids)
        }
        for d, (o, _dr, b) in per_dom.items():
            if d != ref_dom and np.isfinite(b) and abs(o) > b:
                applied.add(d)
        clocks = RankClocks(dict(rank_domain), frozenset(applied), est, base)
        aligned = clocks.apply(table)
        for r in ranks:
            d = rank_domain[r]
            if d not in per_dom:
                status[r] = "no shared collective"
                bounds[r] = float("inf")
                continue
            o, dr, b = per_dom[d]
            estimate[r] = o
            bounds[r] = b
            ref_time[r] = int(est.reference_time_ns) + base
            if d == ref_dom:
                status[r] = "reference"
            elif d in applied:
                offsets[r], drift[r] = o, dr
                status[r] = "applied"
            else:
                status[r] = "unidentifiable"
        if any(len(m) > 1 for m in groups.values()):
            method += "+shared-clock"
    else:
        bounds = {r: float("inf") for r in ranks}
        status = {r: "unidentifiable" for r in ranks}
    # each rank's remaining clock uncertainty: its bound, plus the estimate it did not apply
    slack_of_rank = {
        r: int(
            min(
                _UNBOUNDED_NS,
                np.ceil(
                    bounds.get(r, 0.0) + abs(estimate.get(r, 0.0)) * (status.get(r) != "applied")
                ),
            )
        )
        if np.isfinite(bounds.get(r, 0.0))
        else _UNBOUNDED_NS
        for r in ranks
    }
    amatch = match.retime(aligned)
    member_slack = np.array(
        [slack_of_rank.get(int(r), 0) for r in amatch.member_rank.tolist()], dtype=np.int64
    )
    after_align = count_violations(amatch)
    beyond = count_violations(amatch, slack_ns=member_slack)
    moved = max_shift = 0
    by_rank: dict[int, tuple[int, int]] = {}
    repaired_rows = np.zeros(0, dtype=np.int64)
    if repair and beyond and consistent:
        # (constraints that contradict each other, which no clock offsets can satisfy, are
        # no evidence of a clock error: members matched by order that are not one collective,
        # or a kernel that is not the collective's arrival; nothing is moved on them)
        fixed = _clocks_repair(aligned, amatch, slack_of_rank)
        if fixed is not None:
            repaired, moved, max_shift = fixed
            by_rank = _moved_by_rank(aligned, repaired)
            repaired_rows = np.flatnonzero(
                (repaired["start_ns"] != aligned["start_ns"])
                | (repaired["end_ns"] != aligned["end_ns"])
            ).astype(np.int64)
            aligned = repaired
            amatch = match.retime(aligned)
    after = count_violations(amatch, slack_ns=member_slack)
    return Alignment(
        aligned, amatch, offsets, drift, {r: bounds.get(r, 0.0) for r in ranks}, method,
        before, after, moved, max_shift, ref_time,
        estimate_ns=estimate, status=status, clock_of=clock_name,
        violations_within_bound=max(after_align - beyond, 0), moved_by_rank=by_rank,
        consistent=consistent, clocks=clocks, repaired_rows=repaired_rows,
        repair_skipped=bool(beyond and consistent and not repair),
    )  # fmt: skip
