"""Which ranks are slow: the straggler test every slow-rank finding (and the what-if) rests on.

A rank is *late* when it joined at least ``min_collectives`` collectives, was last in more of
them than chance allows (``p_last`` ≤ ``alpha``, adjusted for the ranks tested), its median
self-caused lateness is at least ``lateness_effect`` times the spread of every member's, it
carries ``straggler_blame_share`` of the waiting and its score clears ``straggler_score``. Its
compute is *slow* when its median ratio to the same work elsewhere is ``slow_compute_ratio``
over the median rank's and the sign test clears ``alpha``; slow compute alone is a verdict only
where no collective could show the others waiting (the rank joined none), or where it slowed
part-way (a throttle).

>>> from otel_ext.analysis.findings.finding import Thresholds
>>> onset([1.0, 1.01, 1.2, 1.3], Thresholds()), onset([1.2, 1.2, 1.3], Thresholds())
(2, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from otel_ext._arrays import median
from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.stragglers import StragglerReport
from otel_ext.analysis.findings.evidence import StragglerEvidence
from otel_ext.analysis.findings.finding import Thresholds

__all__ = ["StragglerVerdict", "onset", "straggler_verdicts"]


class StragglerVerdict(TypedDict):
    """A rank whose evidence clears the thresholds, with the test it passed.

    ``rank`` is the rank (the engine asks the critical path's what-if of the first);
    ``row`` its :class:`~otel_ext.analysis.findings.evidence.StragglerEvidence`.
    """

    rank: int
    row: StragglerEvidence
    relative_compute: float  # its compute ratio over the median rank's
    blame_share: float  # of the self-caused waiting
    waiting_share: float  # of all the waiting at collectives
    late: bool
    slow_compute: bool
    onset: int | None  # the window its compute slowed from (a part-way slowdown)


def onset(by_window: Sequence[float | None], th: Thresholds) -> int | None:
    """Index of the first slow window after normal ones (a part-way slowdown), else None."""
    vals = [v for v in by_window if v is not None]
    if len(vals) < 3:
        return None
    idx = [i for i, v in enumerate(by_window) if v is not None]
    for k in range(1, len(vals)):
        early, late = vals[:k], vals[k:]
        if (
            max(early) <= th.onset_ratio_early
            and min(late) >= th.slow_compute_ratio
            and len(late) >= 1
        ):
            return idx[k]
    return None


def _is_late(r: StragglerEvidence, share: float, of_waiting: float, th: Thresholds) -> bool:
    """Whether a rank is late at collectives: significant by its last arrivals (pooled) or by
    the order of its self-caused lateness at one site (or pooled), with the effect of the test
    that carries it, and carrying enough of the waiting."""
    effect = r.get("lateness_effect")
    by_last = r.get("p_last", 1.0) <= th.alpha and (effect is None or effect >= th.lateness_effect)
    site_effect = r.get("site_effect")
    by_site = r.get("site_p", 1.0) <= th.alpha and (
        site_effect is None or site_effect >= th.lateness_effect
    )
    return (
        r.get("collectives", 0) >= th.min_collectives
        and (by_last or by_site)
        and share >= th.straggler_blame_share
        and of_waiting >= th.straggler_waiting_share
        and r["score"] >= th.straggler_score
    )


def _verdict(
    r: StragglerEvidence, med_ratio: float, total_blame: float, waiting: float, th: Thresholds
) -> StragglerVerdict | None:
    """One rank's verdict: late, slow alone (it joined no collective) or slowed part-way;
    None when none of the three."""
    ratio = r["compute_ratio"]
    rel = (ratio or 0.0) / max(med_ratio, 1e-9)
    compute_sig = r.get("compute_p", 1.0) <= th.alpha
    slow_compute = ratio is not None and rel >= th.slow_compute_ratio and compute_sig
    at = onset(r["compute_ratio_by_window"], th)
    part_way = at is not None and compute_sig
    share = r["blame_ns"] / total_blame if total_blame else 0.0
    of_waiting = r["blame_ns"] / waiting if waiting else 0.0
    late = _is_late(r, share, of_waiting, th)
    alone = slow_compute and r.get("collectives", 0) == 0
    if not (late or alone or part_way):
        return None
    return StragglerVerdict(
        rank=r["rank"],
        row=r,
        relative_compute=rel,
        blame_share=share,
        waiting_share=of_waiting,
        late=late,
        slow_compute=slow_compute,
        onset=at,
    )


def straggler_verdicts(
    stragglers: StragglerReport, th: Thresholds, match: CollectiveMatch
) -> list[StragglerVerdict]:
    """The ranks whose evidence clears the thresholds (module docstring), late ones first,
    then by their share of the waiting and their relative compute.

    Args:
        stragglers: :func:`~otel_ext.analysis.cross.stragglers.find_stragglers`'s report.
        th: the thresholds.
        match: the matched collectives (unused; kept for the callers).

    Returns:
        One :class:`StragglerVerdict` per slow rank.
    """
    rows: Sequence[StragglerEvidence] = stragglers.rows
    if len(rows) < 2:
        return []
    ratios = [r["compute_ratio"] for r in rows if r["compute_ratio"] is not None]
    med_ratio = float(median(ratios)) if ratios else 1.0
    # the share of all the waiting at collectives its own lateness explains
    # of the waiting some rank caused by its own doing, and of all the waiting at collectives
    total_blame = sum(r["blame_ns"] for r in rows)
    waiting = max(max(r.get("waiting_ns", 0) for r in rows), total_blame)
    out = [v for r in rows if (v := _verdict(r, med_ratio, total_blame, waiting, th)) is not None]
    out.sort(key=lambda x: (not x["late"], -x["blame_share"], -x["relative_compute"]))
    return out
