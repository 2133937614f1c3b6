"""Cross-rank clock alignment without clock samples, and causality before and after repair.

Each rank's trace is stamped by its own host clock. Holistic Trace Analysis aligns ranks by
subtracting one global minimum, which leaves every offset between the hosts in place. We use
what collectives guarantee instead: the members of one collective leave it at nearly the same
instant (nobody can leave before the last one arrives, and the data then flows at once), so
``end[k, r] = E[k] + offset[r] (+ drift[r] · t)`` for every matched collective ``k`` and rank
``r``. The clocks package's collective-based estimator
(:func:`otel_ext.clocks.estimate_offsets_from_collectives`) fits one offset (and drift, when
significant) per clock domain with a bound: aligned time = raw time − offset −
drift · (raw time − reference time). When it declines (no collective two domains share), the
ranks keep their recorded times.

Causality: no member of a collective can leave before the last member arrives. A violation is
a member whose (aligned) end precedes the (aligned) last arrival. We count them on the raw
times and after alignment and repair. What remains beyond the clocks' bounds after the
per-domain corrections is fixed event by event by the clocks package's causality repair
(:func:`otel_ext.clocks.repair_causality`), moving the offending end forward to the last
arrival and pushing later events of the same stream just enough to keep their order (a
controlled-logical-clock forward pass). When it declines, the violations stay as counted.

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
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from otel_ext._arrays import distinct, distinct_rows
from otel_ext.analysis.cross.collective_match import CollectiveMatch, match_collectives
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable
from otel_ext.errors import OtelExtError

if TYPE_CHECKING:
    from otel_ext.clocks import CollectiveOffsets

__all__ = [
    "Alignment",
    "CausalityJson",
    "RankClocks",
    "RankRepairJson",
    "align_ranks",
    "clock_groups",
    "count_violations",
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
    estimate: CollectiveOffsets | None = None
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


class RankRepairJson(TypedDict):
    """One rank the event-level repair moved: how many rows, and the largest shift."""

    rank: int
    moved_events: int
    max_shift_ns: int


class CausalityJson(TypedDict):
    """The report's ``causality`` object (:meth:`Alignment.causality`)."""

    violations_before: int
    violations_within_bound: int
    violations_after: int
    repaired_events: int
    max_repair_shift_ns: int
    method: str
    constraints_consistent: bool
    per_rank: list[RankRepairJson]


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

    def causality(self) -> CausalityJson:
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
) -> tuple[CollectiveOffsets, int] | None:
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
        _log.info("clocks estimator declined (%s); ranks keep their recorded times", exc)
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
    table: EventTable,
    rank_domain: dict[int, int],
    est: CollectiveOffsets,
    base: int,
    applied: set[int],
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
        _log.info("clocks repair declined (%s); violations left unrepaired", exc)
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


@dataclass
class _DomainFit:
    """Per rank, what the per-domain clock estimate said and what :func:`align_ranks` applies.

    ``offsets``/``drift`` hold the applied corrections (0 where none applies), ``estimate`` the
    estimated offset whether applied or not, ``bounds`` its bound (inf: no estimate).
    """

    offsets: dict[int, float]
    drift: dict[int, float]
    bounds: dict[int, float]
    estimate: dict[int, float]
    status: dict[int, str]
    ref_time: dict[int, int]
    clocks: RankClocks
    method: str = "none"
    consistent: bool = True


@dataclass
class _Repair:
    """The aligned table and match after the event-level causality repair (unchanged when it
    did not run or declined), with what it moved."""

    table: EventTable
    match: CollectiveMatch
    moved: int = 0
    max_shift_ns: int = 0
    by_rank: dict[int, tuple[int, int]] = field(default_factory=dict)
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _rank_domains(groups: dict[str, list[int]]) -> dict[int, int]:
    """Rank -> clock domain index, the lowest rank's clock first (domain 0)."""
    names = sorted(groups, key=lambda g: min(groups[g]))
    return {r: i for i, g in enumerate(names) for r in groups[g]}


def _fit_domains(
    table: EventTable,
    match: CollectiveMatch,
    groups: dict[str, list[int]],
    ranks: list[int],
    *,
    fit_drift: bool,
) -> _DomainFit:
    """Estimate each clock domain's offset from the matched collectives and decide, per
    domain, whether its shift is applied (it exceeds its own bound)."""
    rank_domain = _rank_domains(groups)
    lut_r = np.array(sorted(rank_domain), dtype=np.int64)
    lut_d = np.array([rank_domain[r] for r in lut_r.tolist()], dtype=np.int64)
    member_domain = lut_d[np.searchsorted(lut_r, match.member_rank)]
    got = _domain_estimate(
        match, member_domain, fit_drift=fit_drift, uncertainty_ns=_member_uncertainty(table, match)
    )
    zero = {r: 0.0 for r in ranks}
    if got is None:
        return _DomainFit(
            offsets=dict(zero),
            drift=dict(zero),
            bounds={r: float("inf") for r in ranks},
            estimate=dict(zero),
            status={r: "unidentifiable" for r in ranks},
            ref_time={},
            clocks=RankClocks(dict(rank_domain)),
        )
    est, base = got
    shared = any(len(m) > 1 for m in groups.values())
    return _fit_from_estimate(est, base, rank_domain, ranks, shared_clock=shared)


def _fit_from_estimate(
    est: CollectiveOffsets,
    base: int,
    rank_domain: dict[int, int],
    ranks: list[int],
    *,
    shared_clock: bool,
) -> _DomainFit:
    """Per rank, the estimator's offset, drift and bound of its domain, applied where the
    offset exceeds its bound (the reference domain is never moved)."""
    ref_dom = int(est.reference_rank)
    per_dom: dict[int, tuple[float, float, float]] = {
        int(d): (float(est.offset_ns[i]), float(est.drift_ppm[i]), float(est.bound_ns[i]))
        for i, d in enumerate(est.ranks)
    }
    applied = {
        d for d, (o, _dr, b) in per_dom.items() if d != ref_dom and np.isfinite(b) and abs(o) > b
    }
    zero = {r: 0.0 for r in ranks}
    fit = _DomainFit(
        offsets=dict(zero),
        drift=dict(zero),
        bounds={},
        estimate=dict(zero),
        status={},
        ref_time={},
        clocks=RankClocks(dict(rank_domain), frozenset(applied), est, base),
        method="collectives+shared-clock" if shared_clock else "collectives",
        consistent=bool(est.consistent),
    )
    for r in ranks:
        d = rank_domain[r]
        if d not in per_dom:
            fit.status[r] = "no shared collective"
            fit.bounds[r] = float("inf")
            continue
        o, dr, b = per_dom[d]
        fit.estimate[r] = o
        fit.bounds[r] = b
        fit.ref_time[r] = int(est.reference_time_ns) + base
        if d == ref_dom:
            fit.status[r] = "reference"
        elif d in applied:
            fit.offsets[r], fit.drift[r] = o, dr
            fit.status[r] = "applied"
        else:
            fit.status[r] = "unidentifiable"
    return fit


def _slack_of_rank(fit: _DomainFit, ranks: list[int]) -> dict[int, int]:
    """Each rank's remaining clock uncertainty (ns): its bound, plus the estimated offset it
    did not apply; :data:`_UNBOUNDED_NS` where nothing bounds it."""
    return {
        r: int(
            min(
                _UNBOUNDED_NS,
                np.ceil(
                    fit.bounds.get(r, 0.0)
                    + abs(fit.estimate.get(r, 0.0)) * (fit.status.get(r) != "applied")
                ),
            )
        )
        if np.isfinite(fit.bounds.get(r, 0.0))
        else _UNBOUNDED_NS
        for r in ranks
    }


def _repair_beyond_bounds(
    aligned: EventTable,
    amatch: CollectiveMatch,
    match: CollectiveMatch,
    slack_of_rank: dict[int, int],
) -> _Repair:
    """The clocks package's event-level repair of the violations beyond the clocks' bounds,
    with the rows it moved; the aligned table unchanged when it declines."""
    fixed = _clocks_repair(aligned, amatch, slack_of_rank)
    if fixed is None:
        return _Repair(aligned, amatch)
    repaired, moved, max_shift = fixed
    rows = np.flatnonzero(
        (repaired["start_ns"] != aligned["start_ns"]) | (repaired["end_ns"] != aligned["end_ns"])
    ).astype(np.int64)
    return _Repair(
        repaired,
        match.retime(repaired),
        moved,
        max_shift,
        _moved_by_rank(aligned, repaired),
        rows,
    )


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
    if match.n_instances == 0 or len(distinct(match.member_rank)) < 2:
        zero = {r: 0.0 for r in ranks}
        status = {r: "no shared collective" for r in ranks}
        return Alignment(
            table, match, zero, dict(zero), dict(zero), "none", before, before,
            estimate_ns=dict(zero), status=status, clock_of=clock_name,
            violations_within_bound=0,
        )  # fmt: skip
    fit = _fit_domains(table, match, groups, ranks, fit_drift=fit_drift)
    aligned = fit.clocks.apply(table)
    slack_of_rank = _slack_of_rank(fit, ranks)
    amatch = match.retime(aligned)
    member_slack = np.array(
        [slack_of_rank.get(int(r), 0) for r in amatch.member_rank.tolist()], dtype=np.int64
    )
    after_align = count_violations(amatch)
    beyond = count_violations(amatch, slack_ns=member_slack)
    fixed = _Repair(aligned, amatch)
    if repair and beyond and fit.consistent:
        # (constraints that contradict each other, which no clock offsets can satisfy, are
        # no evidence of a clock error: members matched by order that are not one collective,
        # or a kernel that is not the collective's arrival; nothing is moved on them)
        fixed = _repair_beyond_bounds(aligned, amatch, match, slack_of_rank)
    after = count_violations(fixed.match, slack_ns=member_slack)
    return Alignment(
        fixed.table, fixed.match, fit.offsets, fit.drift,
        {r: fit.bounds.get(r, 0.0) for r in ranks}, fit.method,
        before, after, fixed.moved, fixed.max_shift_ns, fit.ref_time,
        estimate_ns=fit.estimate, status=fit.status, clock_of=clock_name,
        violations_within_bound=max(after_align - beyond, 0), moved_by_rank=fixed.by_rank,
        consistent=fit.consistent, clocks=fit.clocks, repaired_rows=fixed.rows,
        repair_skipped=bool(beyond and fit.consistent and not repair),
    )  # fmt: skip
