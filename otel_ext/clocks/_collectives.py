"""Per-rank clock offsets (and drift) from collectives, for traces without clock samples.

All members of one collective leave it at nearly the same instant (the last arrival releases
everyone), so differences between the members' local exit times measure their clock offsets.
A robust alternating least-squares fit solves for each collective's common exit time and
each rank's offset (and, on long traces, drift) against a reference rank.

Causality gives hard limits as well: no member leaves before every member entered, and no
receive ends before its send started. Each such fact is a difference constraint
``o_r - o_s <= w``; shortest paths over them give an interval that must contain the true
offset. The reported bound is the smaller of the statistical bound and what that interval
allows.

>>> import numpy as np
>>> rank = np.array([0, 1, 0, 1, 0, 1])
>>> key = np.array([7, 7, 8, 8, 9, 9])
>>> enter = np.array([100, 5_050, 1_000, 5_900, 2_000, 6_950])   # rank 1 is 5 µs ahead
>>> exit_ = np.array([200, 5_200, 1_100, 6_100, 2_100, 7_100])
>>> est = estimate_offsets_from_collectives(rank, key, enter, exit_)
>>> est.offset_ns.round().tolist()
[0.0, 5000.0]
>>> [int(v) for v in est.to_reference_ns(1, [5_200])]
[200]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from otel_ext._arrays import median
from otel_ext.errors import InputError

__all__ = ["CollectiveOffsets", "estimate_offsets_from_collectives", "pair_indices"]


@dataclass(frozen=True)
class CollectiveOffsets:
    """Per-rank clock estimate: ``local = true + offset + drift * (true - reference_time)``.

    Attributes:
        ranks: the ranks, ascending.
        offset_ns: offset of each rank's clock from the reference rank's, at ``reference_time_ns``.
        drift_ppm: rate error against the reference rank (0 unless drift was fitted).
        bound_ns: bound on the offset error (statistical, capped by the causal interval).
        lower_ns: smallest offset causality allows (``-inf`` when unconstrained).
        upper_ns: largest offset causality allows (``inf`` when unconstrained).
        collectives: collectives each rank took part in.
        reference_rank: the rank whose clock is the reference (offset 0).
        reference_time_ns: where offsets are evaluated when drift is fitted.
        consistent: ``False`` when the causal constraints contradict each other (then
            ``lower_ns``/``upper_ns`` are infinite).
    """

    ranks: NDArray[np.int64]
    offset_ns: NDArray[np.float64]
    drift_ppm: NDArray[np.float64]
    bound_ns: NDArray[np.float64]
    lower_ns: NDArray[np.float64]
    upper_ns: NDArray[np.float64]
    collectives: NDArray[np.int64]
    reference_rank: int
    reference_time_ns: float
    consistent: bool

    def to_reference_ns(self, rank: ArrayLike, local_ns: ArrayLike) -> NDArray[np.int64]:
        """Local times of the given ranks on the reference rank's timeline (int64 ns)."""
        r = np.searchsorted(self.ranks, np.asarray(rank))
        r = np.clip(r, 0, self.ranks.size - 1)
        t = np.asarray(local_ns, dtype=np.float64)
        d = self.drift_ppm[r] * 1e-6
        return np.rint((t - self.offset_ns[r] + d * self.reference_time_ns) / (1.0 + d)).astype(
            np.int64
        )


def pair_indices(groups: NDArray[np.int64]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """All ordered pairs ``(i, j)``, ``i != j``, of rows sharing a group id (ids < 0 skipped).

    >>> i, j = pair_indices(np.array([3, -1, 3, 3]))
    >>> sorted(zip(i.tolist(), j.tolist()))
    [(0, 2), (0, 3), (2, 0), (2, 3), (3, 0), (3, 2)]
    """
    rows = np.flatnonzero(groups >= 0)
    if rows.size == 0:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    rows = rows[np.argsort(groups[rows], kind="stable")]
    g = groups[rows]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    sizes = np.diff(np.concatenate([starts, [rows.size]]))
    member_size = np.repeat(sizes, sizes)
    member_start = np.repeat(starts, sizes)
    total = int(member_size.sum())
    i_pos = np.repeat(np.arange(rows.size), member_size)
    within = np.arange(total) - np.repeat(np.cumsum(member_size) - member_size, member_size)
    j_pos = np.repeat(member_start, member_size) + within
    keep = i_pos != j_pos
    return rows[i_pos[keep]], rows[j_pos[keep]]


def _bellman_ford(
    n: int,
    src: NDArray[np.intp],
    dst: NDArray[np.intp],
    w: NDArray[np.float64],
    source: int,
    *,
    max_rounds: int,
) -> tuple[NDArray[np.float64], bool]:
    """Shortest paths from ``source`` along edges ``src -> dst`` (weights may be negative),
    in vectorised rounds; and whether they settled (False: a negative cycle, or paths
    longer than ``max_rounds`` edges)."""
    d = np.full(n, np.inf)
    d[source] = 0.0
    for _ in range(max_rounds):
        cand = d[src] + w
        new = d.copy()
        np.minimum.at(new, dst, cand)
        if np.array_equal(new, d):
            return d, True
        d = new
    return d, False


def _causal_interval(
    nr: int,
    ref_i: int,
    member_rank: NDArray[np.intp],
    member_key: NDArray[np.intp],
    n_keys: int,
    ent: NDArray[np.float64],
    ext: NDArray[np.float64],
    p2p: tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]] | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], bool]:
    """The interval of offsets (against the reference) that causality allows, per rank.

    Difference constraints ``o_a - o_b <= exit_a - enter_b`` for every pair of members of a
    collective go through one node per collective (``a -> k`` weighing ``exit_a``, ``k -> b``
    weighing ``-enter_b``): every path ``a -> k -> b`` is one pair's constraint, so a collective
    of ``m`` members costs ``2m`` edges, not ``m²``. Upper limits are shortest paths to the
    reference, lower limits minus shortest paths from it (Bellman–Ford in vectorised rounds).
    """
    node = nr + member_key
    src = np.concatenate([member_rank, node]).astype(np.intp)
    dst = np.concatenate([node, member_rank]).astype(np.intp)
    w = np.concatenate([ext, -ent])
    if p2p is not None:
        rr, sr, lim = p2p
        src = np.concatenate([src, rr]).astype(np.intp)
        dst = np.concatenate([dst, sr]).astype(np.intp)
        w = np.concatenate([w, lim])
    n = nr + n_keys
    rounds = min(n + 1, 256)
    to_ref, ok1 = _bellman_ford(n, dst, src, w, ref_i, max_rounds=rounds)  # reversed edges
    from_ref, ok2 = _bellman_ford(n, src, dst, w, ref_i, max_rounds=rounds)
    consistent = ok1 and ok2
    if not consistent:
        return np.full(nr, np.inf), np.full(nr, -np.inf), False
    return to_ref[:nr].copy(), -from_ref[:nr].copy(), True


@dataclass(frozen=True)
class _Participations:
    """The rows (one per rank and collective instance), validated and indexed.

    ``rix``/``gix`` number each row's rank and instance (``ranks``/``keys`` ascending);
    ``use`` marks the rows of instances with two or more members, the only ones that
    measure anything; ``ref_i`` is the reference rank's position in ``ranks``.
    """

    rank: NDArray[np.int64]
    enter: NDArray[np.float64]
    exit: NDArray[np.float64]
    ranks: NDArray[np.int64]
    rix: NDArray[np.intp]
    keys: NDArray[np.int64]
    gix: NDArray[np.intp]
    use: NDArray[np.bool_]
    ref: int
    ref_i: int

    @property
    def nr(self) -> int:
        """How many ranks."""
        return int(self.ranks.size)


def _participations(
    rank: ArrayLike,
    coll_key: ArrayLike,
    enter_ns: ArrayLike,
    exit_ns: ArrayLike,
    reference_rank: int | None,
) -> _Participations:
    """The rows as arrays, or :class:`InputError` (lengths, NaN, nothing to measure,
    a reference rank without collectives)."""
    r = np.asarray(rank, dtype=np.int64)
    key = np.asarray(coll_key, dtype=np.int64)
    ent = np.asarray(enter_ns, dtype=np.float64)
    ext = np.asarray(exit_ns, dtype=np.float64)
    if not (r.shape == key.shape == ent.shape == ext.shape) or r.ndim != 1:
        raise InputError("rank, coll_key, enter_ns and exit_ns must be 1-D arrays of one length")
    if not (np.all(np.isfinite(ent)) and np.all(np.isfinite(ext))):
        raise InputError("collective times contain NaN or infinity")
    ranks, rix = np.unique(r, return_inverse=True)
    keys, gix = np.unique(key, return_inverse=True)
    sizes = np.bincount(gix, minlength=keys.size)
    use = sizes[gix] >= 2
    if not use.any():
        raise InputError("no collective has two or more members; offsets cannot be estimated")
    ref = int(ranks[0]) if reference_rank is None else int(reference_rank)
    if ref not in ranks:
        raise InputError(f"reference rank {ref} has no collectives")
    ref_i = int(np.searchsorted(ranks, ref))
    return _Participations(r, ent, ext, ranks, rix, keys, gix, use, ref, ref_i)


def _common_exits(
    corrected: NDArray[np.float64], gi: NDArray[np.intp], w: NDArray[np.float64], n_keys: int
) -> NDArray[np.float64]:
    """Each instance's common exit time: the weighted mean of its members' corrected exits."""
    wsum = np.bincount(gi, weights=w, minlength=n_keys)
    return np.bincount(gi, weights=w * corrected, minlength=n_keys) / np.maximum(wsum, 1e-300)


def _rank_fit(
    resid: NDArray[np.float64],
    u: NDArray[np.float64],
    ri: NDArray[np.intp],
    w: NDArray[np.float64],
    nr: int,
    d: NDArray[np.float64],
    fit_drift: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each rank's offset (and drift, when fitted; else ``d`` unchanged): weighted least
    squares of its exits' residuals against the common exits (``u``: their time from the
    reference time)."""
    sw = np.bincount(ri, weights=w, minlength=nr)
    sy = np.bincount(ri, weights=w * resid, minlength=nr)
    if not fit_drift:
        return sy / np.maximum(sw, 1e-300), d
    su = np.bincount(ri, weights=w * u, minlength=nr)
    suu = np.bincount(ri, weights=w * u * u, minlength=nr)
    suy = np.bincount(ri, weights=w * u * resid, minlength=nr)
    det = sw * suu - su * su
    ok = det > 1e-12 * np.maximum(sw * suu, 1e-300)
    d = np.where(ok, (sw * suy - su * sy) / np.where(ok, det, 1.0), 0.0)
    o = np.where(ok, (sy - d * su) / np.maximum(sw, 1e-300), sy / np.maximum(sw, 1e-300))
    return o, d


def _downweights(res: NDArray[np.float64]) -> NDArray[np.float64]:
    """Huber-style weights: 1 within three robust sigmas (MAD), falling off beyond."""
    mad = median(np.abs(res)) * 1.4826 + 1e-9
    return np.minimum(1.0, 3.0 * mad / np.maximum(np.abs(res), 1e-300))


def _alternating_fit(
    xe: NDArray[np.float64],
    ri: NDArray[np.intp],
    gi: NDArray[np.intp],
    p: _Participations,
    t_ref: float,
    fit_drift: bool,
    iterations: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The robust alternating least-squares fit: per rank offset and drift (against the
    reference rank), per instance the common exit time; reweighted every round."""
    nr = p.nr
    o = np.zeros(nr)
    d = np.zeros(nr)
    w = np.ones(xe.size)
    for _ in range(iterations):
        corrected = xe - o[ri] - d[ri] * (xe - t_ref)
        tc = _common_exits(corrected, gi, w, p.keys.size)
        o, d = _rank_fit(xe - tc[gi], tc[gi] - t_ref, ri, w, nr, d, fit_drift)
        o, d = o - o[p.ref_i], d - d[p.ref_i]
        w = _downweights(xe - o[ri] - d[ri] * (xe - t_ref) - tc[gi])
    return o, d, tc


def _statistical_bound(
    res: NDArray[np.float64], ri: NDArray[np.intp], per_rank: NDArray[np.intp], ref_i: int
) -> NDArray[np.float64]:
    """Per rank, the statistical bound on its offset from the fit's residuals ``res``."""
    nr = per_rank.size
    sigma = np.sqrt(np.bincount(ri, weights=res**2, minlength=nr) / np.maximum(per_rank, 1))
    # members per collective share the estimate of its exit time: both terms count
    stat = 4.0 * sigma / np.sqrt(np.maximum(per_rank, 1)) + 4.0 * sigma[ref_i] / np.sqrt(
        max(per_rank[ref_i], 1)
    )
    return stat + np.abs(res).max() / np.sqrt(np.maximum(per_rank, 1))


def _drift_corrected(
    d: NDArray[np.float64], t_ref: float, idx: NDArray[np.intp], t: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Local times ``t`` of the ranks at ``idx``, less their fitted drift since ``t_ref``."""
    return t - d[idx] * (t - t_ref)


def _message_limits(
    ranks: NDArray[np.int64],
    d: NDArray[np.float64],
    t_ref: float,
    send_rank: ArrayLike | None,
    send_start_ns: ArrayLike | None,
    recv_rank: ArrayLike | None,
    recv_end_ns: ArrayLike | None,
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]] | None:
    """Point-to-point constraints ``o_recv - o_send <= recv_end - send_start`` (drift
    corrected) between known ranks, as (receiving rank, sending rank, limit); ``None``
    without messages."""
    if send_rank is None or recv_rank is None or send_start_ns is None or recv_end_ns is None:
        return None
    nr = ranks.size
    sr = np.searchsorted(ranks, np.asarray(send_rank, dtype=np.int64))
    rr = np.searchsorted(ranks, np.asarray(recv_rank, dtype=np.int64))
    known = (sr < nr) & (rr < nr)
    sr, rr = np.clip(sr, 0, nr - 1), np.clip(rr, 0, nr - 1)
    known &= (ranks[sr] == np.asarray(send_rank)) & (ranks[rr] == np.asarray(recv_rank))
    ss = np.asarray(send_start_ns, dtype=np.float64)
    re_ = np.asarray(recv_end_ns, dtype=np.float64)
    return (
        rr[known].astype(np.intp),
        sr[known].astype(np.intp),
        _drift_corrected(d, t_ref, rr[known], re_[known])
        - _drift_corrected(d, t_ref, sr[known], ss[known]),
    )


def _loosening(uncertainty_ns: ArrayLike | None, rank: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per row, how far its recorded times may be from the true ones (0 when unknown)."""
    unc = np.zeros(len(rank))
    if uncertainty_ns is not None:
        unc = np.asarray(uncertainty_ns, dtype=np.float64)
        if unc.shape != rank.shape:
            raise InputError("uncertainty_ns must have one value per participation")
        unc = np.where(np.isfinite(unc) & (unc > 0), unc, 0.0)
    return unc


def estimate_offsets_from_collectives(
    rank: ArrayLike,
    coll_key: ArrayLike,
    enter_ns: ArrayLike,
    exit_ns: ArrayLike,
    *,
    send_rank: ArrayLike | None = None,
    send_start_ns: ArrayLike | None = None,
    recv_rank: ArrayLike | None = None,
    recv_end_ns: ArrayLike | None = None,
    reference_rank: int | None = None,
    fit_drift: bool | None = None,
    iterations: int = 12,
    uncertainty_ns: ArrayLike | None = None,
) -> CollectiveOffsets:
    """Estimate each rank's clock offset (and drift) from collective exits.

    Args:
        rank: rank of each collective participation (one row per rank and collective).
        coll_key: id of the collective instance; equal across its members.
        enter_ns: local time each member entered the collective.
        exit_ns: local time each member left it.
        send_rank: for point-to-point messages (optional): the sender's rank ...
        send_start_ns: ... the send's local start time ...
        recv_rank: ... the receiver's rank ...
        recv_end_ns: ... and the receive's local end time (adds causal limits only).
        reference_rank: rank whose clock is the reference (default: the smallest).
        fit_drift: fit a drift per rank; default when the trace spans over 10 s and every
            rank has at least 10 collectives.
        iterations: rounds of the alternating fit.
        uncertainty_ns: per participation, how far its recorded times may be from the true
            ones (a span's ``accel.clock.uncertainty_ns``: e.g. half the bracket a poller saw
            an asynchronous end in). The causal limits hold for the true times, so each is
            loosened by it (an exit up to that much later, an entry that much earlier).

    Returns:
        :class:`CollectiveOffsets`.

    Raises:
        InputError: mismatched lengths, or no collective with two or more members.
    """
    p = _participations(rank, coll_key, enter_ns, exit_ns, reference_rank)
    use, ref_i = p.use, p.ref_i
    ri, gi, xe = p.rix[use], p.gix[use], p.exit[use]
    per_rank = np.bincount(ri, minlength=p.nr)
    t_ref = float(median(xe))
    if fit_drift is None:  # long traces, every rank often measured
        fit_drift = float(xe.max() - xe.min()) > 10e9 and bool(per_rank.min() >= 10)
    o, d, tc = _alternating_fit(xe, ri, gi, p, t_ref, fit_drift, iterations)
    stat = _statistical_bound(xe - o[ri] - d[ri] * (xe - t_ref) - tc[gi], ri, per_rank, ref_i)
    # causal limits on drift-corrected times: o_a - o_b <= local_a(after) - local_b(before)
    p2p = _message_limits(p.ranks, d, t_ref, send_rank, send_start_ns, recv_rank, recv_end_ns)
    unc = _loosening(uncertainty_ns, p.rank)
    upper, lower, consistent = _causal_interval(
        p.nr,
        ref_i,
        ri.astype(np.intp),
        gi.astype(np.intp),
        p.keys.size,
        _drift_corrected(d, t_ref, ri, p.enter[use]) - unc[use],
        _drift_corrected(d, t_ref, ri, xe) + unc[use],
        p2p,
    )
    upper[ref_i] = lower[ref_i] = 0.0
    o = np.clip(o, lower, upper)
    bound = np.minimum(stat, np.maximum(o - lower, upper - o))
    bound[ref_i] = 0.0
    return CollectiveOffsets(
        ranks=p.ranks,
        offset_ns=o,
        drift_ppm=d * 1e6,
        bound_ns=bound,
        lower_ns=lower,
        upper_ns=upper,
        collectives=per_rank.astype(np.int64),
        reference_rank=p.ref,
        reference_time_ns=t_ref,
        consistent=consistent,
    )
