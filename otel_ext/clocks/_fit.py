"""Fitting a device clock to a host clock from brackets, with a bound that holds.

A bracket is ``(host_before_ns, device_ticks, host_after_ns)``: the host clock read, the
device counter read, the host clock read again. The device read happened somewhere inside
``[host_before, host_after]``, so the true map ``g`` (ticks → host ns) satisfies
``lo_i <= g(x_i) <= hi_i`` at every bracket. The fit works with these intervals, never
with midpoints, so asymmetric read delays do not bias the bound and a bracket stretched by
an interrupted read (an outlier) only loosens its own constraint; it cannot pull the fit.

The estimate, in four steps (pure numpy):

1. **Unwrap** the counter along the bracket sequence, using the host gap between brackets
   to count the wraps; drop zero/negative-width brackets; raise on NaN. Then keep the
   brackets that agree with their neighbours on the counter
   (:func:`~otel_ext.clocks._bracket_runs.counter_epochs`): a torn 64-bit read, a corrupt
   or a backward read costs its own bracket, never the good one after it; a counter reset
   splits the brackets into epochs and the last epoch (the counter as it runs now) is
   fitted. Each dropped bracket is named in ``issues``.
2. **Local feasible intervals.** If ``|g''| <= kappa`` near a point ``x_k``, then for any
   brackets ``i < k < j``, ``g(x_k)`` lies within the interpolation of their intervals
   widened by the chord error ``kappa (x_k - x_i)(x_j - x_k) / 2``. Intersecting over all
   nearby pairs gives a guaranteed interval ``[G_lo, G_hi]`` for ``g(x_k)``: the narrowest
   brackets win automatically.
3. **Curvature and knots.** A first pass with a prior curvature gives rough values; their
   second divided differences (plus their own uncertainty, times a safety factor) bound the
   local curvature. Knots are placed so that each segment's model error
   ``kappa L^2 / 8`` stays under a target: spacing adapts to how fast the drift changes.
4. **Knot values and bounds.** Each knot takes the centre of its feasible interval; its bound
   is the half-width. Between knots the bound interpolates and adds ``kappa (x-a)(b-x)/2``;
   half a tick and the rounding to integer ns are added on top.

A final self-check requires every bracket to be consistent with the fitted mapping within
its bound; inconsistent brackets are dropped (and the mapping flagged ``quality="low"``),
and a curvature that proves too small is raised and the fit repeated.

>>> import numpy as np
>>> t = np.arange(0, 2_000_000_000, 100_000_000)          # a bracket every 100 ms
>>> ticks = 7_000 + t + t // 50_000                         # device 20 ppm fast
>>> m = fit_clock(t - 900, ticks, t + 1_500)
>>> int(m.to_host_ns(7_000 + 1_000_020_000)[()]) - 1_000_000_000
300
>>> m.quality, bool(m.bound_ns(7_000 + 1_000_020_000)[()] < 2_000)
('good', True)
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import ArrayLike, NDArray

from otel_ext.clocks._bracket_runs import counter_epochs
from otel_ext.clocks._errors import ClockFitError, InsufficientSamplesError
from otel_ext.clocks._mapping import ClockMapping, _as_u64

__all__ = ["fit_clock"]

#: neighbours on each side used for the local feasible interval of a knot
_PAIR_NEIGHBOURS = 24
#: factor applied to the estimated curvature before it is used in a bound
_CURVATURE_SAFETY = 1.5


def _as_host(values: ArrayLike, name: str) -> NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ClockFitError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            raise ClockFitError(
                f"{name} is NaN or infinite", record=f"bracket {int(np.argmax(bad))}"
            )
        return np.rint(arr).astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ClockFitError(f"{name} must be numeric, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _brackets(positions: ArrayLike, most: int = 8) -> str:
    """``"bracket 4"`` / ``"brackets 3, 9 (+2 more)"``: input indices, for messages."""
    where = sorted(int(i) for i in np.asarray(positions).ravel())
    if len(where) == 1:
        return f"bracket {where[0]}"
    more = f" (+{len(where) - most} more)" if len(where) > most else ""
    return "brackets " + ", ".join(map(str, where[:most])) + more


def _unwrap_sequence(
    raw: NDArray[np.uint64], mid: NDArray[np.int64], bits: int, tps: float
) -> NDArray[np.int64]:
    """Unwrapped ticks relative to ``raw[0]``, counting wraps from host gaps."""
    d = np.diff(raw)
    if bits == 64:
        dx = d.view(np.int64)
    else:
        period = 1 << bits
        dm = (d & np.uint64(period - 1)).astype(np.int64)
        pred = np.diff(mid).astype(np.float64) * (tps / 1e9)
        k = np.rint((pred - dm) / float(period)).astype(np.int64)
        dx = dm + k * np.int64(period)
    return np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(dx)])


def _intervals(
    xs: NDArray[np.float64],
    lo: NDArray[np.float64],
    hi: NDArray[np.float64],
    knots: NDArray[np.intp],
    kappa: NDArray[np.float64],
    neighbours: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Guaranteed interval for ``g(xs[k])`` at each knot index ``k`` (see module doc).

    Every pair of neighbouring brackets (both sides, or one side: then it extrapolates)
    gives a line through their intervals; with ``|g''| <= kappa`` the truth at the knot is
    within that line's range plus ``kappa |x_k - x_i| |x_k - x_j| / 2``.
    """
    n = xs.size
    offs = np.concatenate([-np.arange(neighbours, 0, -1), np.arange(1, neighbours + 1)])
    k = knots[:, None]
    nb = k + offs
    valid_nb = (nb >= 0) & (nb < n)
    nb = np.clip(nb, 0, n - 1)
    xk = xs[knots][:, None, None]
    base = lo[knots][:, None, None]
    xi, xj = xs[nb][:, :, None], xs[nb][:, None, :]
    loi, loj = lo[nb][:, :, None] - base, lo[nb][:, None, :] - base
    hii, hij = hi[nb][:, :, None] - base, hi[nb][:, None, :] - base
    tri = np.triu(np.ones((offs.size, offs.size), dtype=bool), 1)
    valid = valid_nb[:, :, None] & valid_nb[:, None, :] & tri[None, :, :] & (xj > xi)
    span = np.where(valid, xj - xi, 1.0)
    wi = (xj - xk) / span
    wj = (xk - xi) / span
    err = kappa[knots][:, None, None] * np.abs(xk - xi) * np.abs(xk - xj) / 2.0
    lo_pair = wi * np.where(wi >= 0, loi, hii) + wj * np.where(wj >= 0, loj, hij) - err
    hi_pair = wi * np.where(wi >= 0, hii, loi) + wj * np.where(wj >= 0, hij, loj) + err
    g_lo = np.max(np.where(valid, lo_pair, -np.inf), axis=(1, 2)) + base[:, 0, 0]
    g_hi = np.min(np.where(valid, hi_pair, np.inf), axis=(1, 2)) + base[:, 0, 0]
    return np.maximum(lo[knots], g_lo), np.minimum(hi[knots], g_hi)


def _curvature(
    xs: NDArray[np.float64],
    centre: NDArray[np.float64],
    half: NDArray[np.float64],
    prior: float,
) -> tuple[NDArray[np.float64], int]:
    """Upper estimate of ``|g''|`` at each bracket, and the stride it was measured at."""
    n = xs.size
    m = int(np.clip(n // 6, 1, 64))
    if n < 2 * m + 1 or n < 5:
        return np.full(n, prior), m
    i = np.arange(m, n - m)
    dr = xs[i + m] - xs[i]
    dl = xs[i] - xs[i - m]
    tot = xs[i + m] - xs[i - m]
    dd = 2.0 * ((centre[i + m] - centre[i]) / dr - (centre[i] - centre[i - m]) / dl) / tot
    noise = 2.0 * ((half[i + m] + half[i]) / dr + (half[i] + half[i - m]) / dl) / tot
    up = np.abs(dd) + noise
    # every bracket takes the largest estimate of any window within two strides
    padded = np.concatenate([np.full(m, up[0]), up, np.full(m, up[-1])])
    w = 2 * m + 1
    cs = np.lib.stride_tricks.sliding_window_view(np.pad(padded, m, mode="edge"), w)
    local = cs.max(axis=1)[:n]
    return local * _CURVATURE_SAFETY, m


def _place_knots(
    xs: NDArray[np.float64], kappa: NDArray[np.float64], target_ns: float
) -> NDArray[np.intp]:
    """Knot indices: each segment keeps ``max kappa * L^2 / 8 <= target``."""
    n = xs.size
    knots = [0]
    a = 0
    while a < n - 1:
        k = kappa[a]
        b = a + 1
        for _ in range(4):
            length = np.sqrt(8.0 * target_ns / max(k, 1e-300))
            b = max(a + 1, int(np.searchsorted(xs, xs[a] + length, side="right")) - 1)
            b = min(b, n - 1)
            kmax = float(kappa[a : b + 1].max())
            if kmax <= k * 1.0001:
                break
            k = kmax
        knots.append(b)
        a = b
    return np.asarray(knots, dtype=np.intp)


def fit_clock(
    host_before_ns: ArrayLike,
    device_ticks: ArrayLike,
    host_after_ns: ArrayLike,
    *,
    counter_bits: int = 64,
    ticks_per_second: float = 1e9,
    domain: str | None = None,
    host_resolution_ns: float = 1.0,
    target_model_error_ns: float = 50.0,
    min_samples: int = 8,
    max_rate_error_ppm: float = 1000.0,
    prior_drift_change_ppm_per_s: float = 1.0,
) -> ClockMapping:
    """Fit a device clock to the host clock from brackets (see the module doc for how).

    Args:
        host_before_ns: host time read just before each device read (int ns).
        device_ticks: the device counter as read (raw, wrapped at ``2**counter_bits``).
        host_after_ns: host time read just after each device read.
        counter_bits: counter width; it wraps at ``2**counter_bits``.
        ticks_per_second: nominal tick rate.
        domain: the clock domain's name (kept on the mapping, used in messages).
        host_resolution_ns: resolution of the host clock reads.
        target_model_error_ns: largest curvature error allowed between two knots.
        min_samples: fewer usable brackets than this give ``quality="low"``.
        max_rate_error_ppm: largest rate error assumed when counting wraps over a gap.
        prior_drift_change_ppm_per_s: drift change rate assumed before it is measured (and
            for fits too short to measure it).

    Returns:
        The :class:`ClockMapping`; ``quality == "low"`` (with ``issues``) when brackets
        were dropped, too few, or separated by gaps too long to unwrap safely.

    Raises:
        ClockFitError: NaN/infinite values, mismatched lengths, bad arguments.
        InsufficientSamplesError: fewer than two usable brackets.
    """
    record = f"domain {domain}" if domain else None
    hb = _as_host(host_before_ns, "host_before_ns")
    ha = _as_host(host_after_ns, "host_after_ns")
    raw = _as_u64(device_ticks)
    if raw.ndim != 1 or not (hb.size == raw.size == ha.size):
        raise ClockFitError(
            f"brackets need three 1-D arrays of one length, got {hb.size}, {raw.size}, {ha.size}",
            record=record,
        )
    if not (1 <= counter_bits <= 64) or not ticks_per_second > 0:
        raise ClockFitError(
            f"counter_bits must be 1..64 and ticks_per_second positive, got {counter_bits}, {ticks_per_second}",
            record=record,
        )
    if counter_bits < 64:
        raw = raw & np.uint64((1 << counter_bits) - 1)
    n_in = hb.size
    issues: list[str] = []
    keep = ha > hb
    if not keep.all():
        first = int(np.argmin(keep))
        issues.append(
            f"{int((~keep).sum())} brackets with host_after <= host_before dropped "
            f"(zero-width or non-monotonic host reads; first at bracket {first})"
        )
    idx = np.flatnonzero(keep)
    idx = idx[np.lexsort((raw[idx], ha[idx], hb[idx]))]
    tick_ns = 1e9 / ticks_per_second
    period = 1 << counter_bits

    # 1. unwrap, then keep the brackets that agree with their neighbours on the counter: a
    #    torn, corrupt or backward read is dropped alone (never the good bracket after it);
    #    after a counter reset the brackets split into epochs and the last one is fitted
    if idx.size >= 2:
        mid = (hb[idx] + ha[idx]) // 2
        x = _unwrap_sequence(raw[idx], mid, counter_bits, ticks_per_second)
        runs = counter_epochs(
            x,
            hb[idx],
            ha[idx],
            ticks_per_second=ticks_per_second,
            max_rate_error_ppm=max_rate_error_ppm,
            host_resolution_ns=host_resolution_ns,
        )
        if runs.outliers.size:
            issues.append(
                f"{runs.outliers.size} brackets whose device ticks disagree with their "
                f"neighbours dropped (torn, corrupt or backwards reads): "
                f"{_brackets(idx[runs.outliers])}"
            )
        if not runs.epochs:
            raise InsufficientSamplesError(
                f"no two of {n_in} brackets agree on the device counter "
                f"(ticks against host time off by more than {max_rate_error_ppm:g} ppm)",
                record=record,
            )
        last = runs.epochs[-1]
        if len(runs.epochs) > 1:
            earlier = sum(int(e.size) for e in runs.epochs[:-1])
            issues.append(
                f"device counter reset or jumped {len(runs.epochs) - 1} time(s): fitted the "
                f"last counter epoch, from bracket {int(idx[last[0]])} ({last.size} brackets); "
                f"{earlier} brackets of earlier epochs not used"
            )
        idx = idx[last]
    if idx.size < 2:
        raise InsufficientSamplesError(
            f"need at least 2 usable brackets, got {idx.size} of {n_in}", record=record
        )
    mid = (hb[idx] + ha[idx]) // 2
    x = _unwrap_sequence(raw[idx], mid, counter_bits, ticks_per_second)
    if counter_bits < 64:
        gaps = np.diff(x).astype(np.float64) * max_rate_error_ppm * 1e-6
        if np.any(gaps >= period / 4):
            issues.append("gap between brackets too long to count counter wraps safely")
    # overlapping brackets with equal (or, within a tick, backward) ticks: of each clash,
    # drop the wider bracket
    repeated: list[int] = []
    while idx.size >= 2 and np.any(np.diff(x) <= 0):
        clash = int(np.flatnonzero(np.diff(x) <= 0)[0])
        widths = ha[idx[clash : clash + 2]] - hb[idx[clash : clash + 2]]
        drop = clash + 1 if widths[1] >= widths[0] else clash
        repeated.append(int(idx[drop]))
        idx, x = np.delete(idx, drop), np.delete(x, drop)
    if repeated:
        issues.append(
            f"{len(repeated)} brackets with repeated device ticks dropped: {_brackets(repeated)}"
        )
        if idx.size < 2:
            raise InsufficientSamplesError(
                "need at least 2 brackets with distinct ticks", record=record
            )

    h0 = int(hb[idx[0]])
    r0 = int(raw[idx[0]])
    xs = x.astype(np.float64)
    lo = (hb[idx] - h0).astype(np.float64) - tick_ns * (1.0 + max_rate_error_ppm * 1e-6)
    hi = (ha[idx] - h0).astype(np.float64) + host_resolution_ns
    slope0 = tick_ns
    prior = prior_drift_change_ppm_per_s * 1e-6 * slope0 / ticks_per_second
    rejected_inconsistent = 0
    boost = 1.0
    mapping: ClockMapping | None = None
    for _attempt in range(6):
        n = xs.size
        all_idx = np.arange(n)
        k1 = np.full(n, prior * boost)
        g_lo, g_hi = _intervals(xs, lo, hi, all_idx, k1, min(4, n))
        empty = g_lo > g_hi
        centre = np.where(empty, (lo + hi) / 2.0, (g_lo + g_hi) / 2.0)
        half = np.where(empty, (hi - lo) / 2.0, (g_hi - g_lo) / 2.0)
        kappa, stride = _curvature(xs, centre, half, prior)
        kappa = np.maximum(kappa * boost, prior * 0.01)
        if n < min_samples:
            kappa = np.maximum(kappa, prior)
        knots = _place_knots(xs, kappa, target_model_error_ns)
        neighbours = max(2, min(_PAIR_NEIGHBOURS, 2 * stride))
        k_lo, k_hi = _intervals(xs, lo, hi, knots, kappa, neighbours)
        seg_kappa = np.array([kappa[a : b + 1].max() for a, b in itertools.pairwise(knots)])
        if np.any(k_lo > k_hi) or np.any(np.diff((k_lo + k_hi) / 2.0) <= 0):
            if boost < 16.0:
                boost *= 4.0
                continue
            bad = empty.copy()
            if not bad.any():
                bad[knots[k_lo > k_hi]] = True
            if not bad.any():
                break
            rejected_inconsistent += int(bad.sum())
            keep_b = ~bad
            idx, x, xs, lo, hi = idx[keep_b], x[keep_b], xs[keep_b], lo[keep_b], hi[keep_b]
            if idx.size < 2:
                raise InsufficientSamplesError("fewer than 2 consistent brackets", record=record)
            continue
        try:
            mapping = ClockMapping(
                knot_ticks=x[knots],
                knot_host_ns=(k_lo + k_hi) / 2.0,
                knot_bound_ns=(k_hi - k_lo) / 2.0,
                segment_curvature=seg_kappa,
                tick_raw_ref=r0,
                host_ref_ns=h0,
                counter_bits=counter_bits,
                ticks_per_second=ticks_per_second,
                domain=domain,
            )
        except ClockFitError as exc:  # a safety net: name the brackets at the knots
            raise ClockFitError(
                f"{exc} (knots at {_brackets(idx[knots])})", record=record
            ) from None
        # self-check: every bracket must be consistent with the mapping within its bound
        y, b = mapping._eval(x)
        y = y - 0.5 * tick_ns
        bad = (y + b < lo) | (y - b > hi)
        if not bad.any():
            break
        if boost < 16.0:
            boost *= 4.0
            mapping = None
            continue
        rejected_inconsistent += int(bad.sum())
        keep_b = ~bad
        idx, x, xs, lo, hi = idx[keep_b], x[keep_b], xs[keep_b], lo[keep_b], hi[keep_b]
        mapping = None
        if idx.size < 2:
            raise InsufficientSamplesError("fewer than 2 consistent brackets", record=record)
    if mapping is None:
        raise ClockFitError(
            "brackets are mutually inconsistent (device reads outside their host brackets?); "
            f"{idx.size} left: {_brackets(idx)}",
            record=record,
        )
    if rejected_inconsistent:
        issues.append(
            f"{rejected_inconsistent} brackets inconsistent with their neighbours dropped"
        )
    if boost > 1.0:
        issues.append(f"curvature estimate raised {boost:g}x to make brackets consistent")
    if idx.size < min_samples:
        issues.append(f"only {idx.size} usable brackets (fewer than {min_samples})")
    mapping.quality = "low" if issues else "good"
    mapping.issues = tuple(issues)
    mapping.samples_used = int(idx.size)
    mapping.samples_rejected = int(n_in - idx.size)
    return mapping
