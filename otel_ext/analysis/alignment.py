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

from otel_ext._arrays import distinct, median
from otel_ext.analysis.collectives import CollectiveMatch, match_collectives
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable
from otel_ext.errors import OtelExtError

__all__ = [
    "Alignment",
    "align_ranks",
    "clock_groups",
    "count_violations",
    "estimate_rank_offsets",
]

_log = logging.getLogger(__name__)


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

    def causality(self) -> dict[str, Any]:
        """The JSON ``causality`` object."""
        return {
            "violations_before": self.violations_before,
            "violations_after": self.violations_after,
            "repaired_events": self.repaired_events,
            "max_repair_shift_ns": self.max_repair_shift_ns,
            "method": self.method,
        }


def count_violations(match: CollectiveMatch, *, tolerance_ns: int = 0) -> int:
    """Members of a collective whose end precedes the last member's arrival.

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> t = EventTable.from_rows([dict(start_ns=0, end_ns=5, rank=0, coll_seq=0,
    ...     category=Category.KERNEL_COMM), dict(start_ns=9, end_ns=12, rank=1, coll_seq=0,
    ...     category=Category.KERNEL_COMM)])
    >>> count_violations(match_collectives(t))
    1
    """
    if match.n_instances == 0:
        return 0
    last = match.last_arrival_ns[match.member_instance]
    return int(np.count_nonzero(match.member_end_ns + tolerance_ns < last))


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


def _apply(
    table: EventTable,
    offsets: dict[int, float],
    drift_ppm: dict[int, float],
    reference: dict[int, int],
) -> EventTable:
    rank = table["rank"]
    cols = dict(table.columns)
    start = table["start_ns"].copy()
    end = table["end_ns"].copy()
    for r, off in offsets.items():
        d = drift_ppm.get(r, 0.0) * 1e-6
        if off == 0.0 and d == 0.0:
            continue
        sel = rank == r
        t0 = reference.get(r, 0)
        for col in (start, end):
            v = col[sel]
            col[sel] = v - np.rint(off + d * (v - t0).astype(np.float64)).astype(np.int64)
    cols["start_ns"], cols["end_ns"] = start, end
    return EventTable(cols, table.strings, dict(table.meta))


def _repair(table: EventTable, match: CollectiveMatch) -> tuple[EventTable, int, int]:
    """Move each violating member's end to the last arrival; keep stream order (CLC forward)."""
    if match.n_instances == 0:
        return table, 0, 0
    last = match.last_arrival_ns[match.member_instance]
    bad = np.flatnonzero(match.member_end_ns < last)
    if len(bad) == 0:
        return table, 0, 0
    start = table["start_ns"].copy()
    end = table["end_ns"].copy()
    rank, stream, tid = table["rank"], table["stream"], table["tid"]
    moved = 0
    max_shift = 0
    for m in bad:
        # every row merged into this member whose end is too early
        rows = match.row_index[match.row_member == m]
        target = int(last[m])
        for row in rows:
            if end[row] < target:
                shift = target - int(end[row])
                end[row] = target
                moved += 1
                max_shift = max(max_shift, shift)
                _push_stream(start, end, rank, stream, tid, int(row))
    cols = dict(table.columns)
    cols["start_ns"], cols["end_ns"] = start, end
    return EventTable(cols, table.strings, dict(table.meta)), moved, max_shift


def _push_stream(
    start: np.ndarray,
    end: np.ndarray,
    rank: np.ndarray,
    stream: np.ndarray,
    tid: np.ndarray,
    row: int,
) -> None:
    """Shift the events after ``row`` on its stream that now overlap it (forward pass)."""
    if stream[row] >= 0:
        same = np.flatnonzero((rank == rank[row]) & (stream == stream[row]))
    else:
        same = np.flatnonzero((rank == rank[row]) & (tid == tid[row]) & (stream < 0))
    later = same[start[same] > start[row]]
    later = later[np.argsort(start[later], kind="stable")]
    prev_end = end[row]
    for j in later:
        if start[j] >= prev_end:
            break
        delta = prev_end - start[j]
        start[j] += delta
        end[j] += delta
        prev_end = end[j]


def clock_groups(table: EventTable) -> dict[str, list[int]]:
    """Ranks grouped by the clock their times are on: one group per host.

    Every span time in a table is on its host's clock (device activity is mapped onto the
    host clock when it is recorded), so ranks of one host share a timeline. A rank whose host
    is unknown (a profiler trace without host identity) is a group of its own.

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
    for r in sorted(int(x) for x in distinct(rank) if x >= 0):
        codes = distinct(host[rank == r])
        codes = codes[codes != 0]
        key = names[int(codes[0])] if len(codes) == 1 else f"rank{r}"
        groups.setdefault(key, []).append(r)
    return groups


def _shared_corrections(
    groups: dict[str, list[int]], offsets: dict[int, float], drift: dict[int, float]
) -> tuple[dict[int, float], dict[int, float]]:
    """One offset and drift per clock group (the median of its members' estimates), with the
    reference (lowest) rank's group at zero."""
    off: dict[int, float] = {}
    dr: dict[int, float] = {}
    for members in groups.values():
        o = float(median([offsets.get(r, 0.0) for r in members]))
        d = float(median([drift.get(r, 0.0) for r in members]))
        for r in members:
            off[r], dr[r] = o, d
    if off:
        ref = min(off)
        o0, d0 = off[ref], dr[ref]
        off = {r: v - o0 for r, v in off.items()}
        dr = {r: v - d0 for r, v in dr.items()}
    return off, dr


def _clocks_estimate(
    match: CollectiveMatch, *, fit_drift: bool
) -> tuple[dict[int, float], dict[int, float], dict[int, float], Any, int] | None:
    """The clocks package's collective-based estimator on the matched members, or None."""
    try:
        from otel_ext.clocks import estimate_offsets_from_collectives
    except ImportError:  # pragma: no cover - the package ships with otel-ext
        return None
    base = int(match.member_start_ns.min())
    try:
        est = estimate_offsets_from_collectives(
            match.member_rank,
            match.member_instance,
            match.member_start_ns - base,  # relative: float64 keeps every nanosecond
            match.member_end_ns - base,
            fit_drift=None if fit_drift else False,
        )
    except OtelExtError as exc:
        _log.info("clocks estimator declined (%s); using the built-in fit", exc)
        return None
    keys = [int(r) for r in est.ranks]
    return (
        {k: float(est.offset_ns[i]) for i, k in enumerate(keys)},
        {k: float(est.drift_ppm[i]) for i, k in enumerate(keys)},
        {k: float(est.bound_ns[i]) for i, k in enumerate(keys)},
        est,
        base,
    )


def _apply_estimate(table: EventTable, est: Any, base: int) -> EventTable:
    """Rows of the estimated ranks moved onto the reference rank's timeline."""
    rank = table["rank"]
    sel = np.isin(rank, est.ranks)
    cols = dict(table.columns)
    for name in ("start_ns", "end_ns"):
        col = table[name].copy()
        col[sel] = est.to_reference_ns(rank[sel], col[sel] - base) + base
        cols[name] = col
    return EventTable(cols, table.strings, dict(table.meta))


def _clocks_repair(table: EventTable, match: CollectiveMatch) -> tuple[EventTable, int, int] | None:
    """The clocks package's causality repair over every device event of the ranks."""
    try:
        from otel_ext.clocks import repair_causality
    except ImportError:  # pragma: no cover
        return None
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
    try:
        rep = repair_causality(
            rank[rows],
            table["start_ns"][rows] - base,
            table["end_ns"][rows] - base,
            collective=coll[rows],
        )
    except OtelExtError as exc:
        _log.info("clocks repair declined (%s); using the built-in repair", exc)
        return None
    start = table["start_ns"].copy()
    end = table["end_ns"].copy()
    # phase-1 domain offsets move every row of the rank; phase-2 shifts only the events given
    for d, off in zip(rep.domains, rep.domain_offset_ns):
        if off:
            same = rank == int(d)
            start[same] += int(off)
            end[same] += int(off)
    start[rows] = rep.start_ns + base
    end[rows] = rep.end_ns + base
    cols = dict(table.columns)
    cols["start_ns"], cols["end_ns"] = start, end
    moved = len(rep.shifted) + int(np.count_nonzero(rep.domain_offset_ns))
    shifts = np.abs(np.r_[rep.shift_start_ns, rep.shift_end_ns, 0])
    return EventTable(cols, table.strings, dict(table.meta)), moved, int(shifts.max())


def align_ranks(
    table: EventTable,
    match: CollectiveMatch | None = None,
    *,
    repair: bool = True,
    fit_drift: bool = True,
) -> Alignment:
    """Align every rank's timeline to the lowest rank's, from the collectives they share.

    Args:
        table: all ranks' events, each on its own clock.
        match: the collectives matched on ``table`` (computed when not given).
        repair: also repair the causality violations that alignment leaves.
        fit_drift: fit a per-rank drift besides the offset.

    Returns:
        An :class:`Alignment` holding the aligned table and the per-rank corrections.
    """
    if match is None:
        match = match_collectives(table)
    before = count_violations(match)
    ranks = sorted(int(r) for r in distinct(table["rank"]) if r >= 0)
    if match.n_instances == 0 or len(distinct(match.member_rank)) < 2:
        zero = {r: 0.0 for r in ranks}
        return Alignment(table, match, zero, dict(zero), dict(zero), "none", before, before)
    got = _clocks_estimate(match, fit_drift=fit_drift)
    if got is not None:
        offsets, drift, bounds, est, base = got
        method = "clocks"
        aligned = _apply_estimate(table, est, base)
        ref: dict[int, int] = {r: int(est.reference_time_ns) + base for r in offsets}
    else:
        offsets, drift, bounds, ref = estimate_rank_offsets(
            match.member_rank, match.member_instance, match.member_end_ns, fit_drift=fit_drift
        )
        method = "collectives"
        aligned = _apply(table, offsets, drift, ref)
    for r in ranks:  # ranks sharing no collective keep their own clock
        offsets.setdefault(r, 0.0)
        drift.setdefault(r, 0.0)
        bounds.setdefault(r, 0.0)
    groups = clock_groups(table)
    if any(len(members) > 1 for members in groups.values()):
        # ranks stamped by one host clock share one correction: a per-rank fit would take a
        # rank's steady lateness (a straggler) for a clock offset and hide it
        offsets, drift = _shared_corrections(groups, offsets, drift)
        aligned = _apply(table, offsets, drift, ref)
        method += "+shared-host-clock"
    amatch = match.retime(aligned)
    moved = max_shift = 0
    if repair and count_violations(amatch):
        fixed = _clocks_repair(aligned, amatch)
        if fixed is None:
            fixed = _repair(aligned, amatch)
        aligned, moved, max_shift = fixed
        amatch = match.retime(aligned)
        if count_violations(amatch):
            # constraints the clocks repair found cyclic (e.g. sampled point-to-point pairs):
            # finish event by event
            aligned, moved2, shift2 = _repair(aligned, amatch)
            moved, max_shift = moved + moved2, max(max_shift, shift2)
            amatch = match.retime(aligned)
    after = count_violations(amatch)
    return Alignment(
        aligned, amatch, offsets, drift, bounds, method, before, after, moved, max_shift, ref
    )
