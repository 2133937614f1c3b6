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
from dataclasses import dataclass
from typing import NamedTuple

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


@dataclass(frozen=True)
class _FitOptions:
    """The options of one :func:`fit_clock` call, and what follows from them."""

    counter_bits: int
    ticks_per_second: float
    domain: str | None
    host_resolution_ns: float
    target_model_error_ns: float
    min_samples: int
    max_rate_error_ppm: float
    prior_drift_change_ppm_per_s: float

    @property
    def record(self) -> str | None:
        """What errors name: the clock domain, when known."""
        return f"domain {self.domain}" if self.domain else None

    @property
    def tick_ns(self) -> float:
        """Nominal length of one tick in ns."""
        return 1e9 / self.ticks_per_second

    @property
    def prior_curvature(self) -> float:
        """Curvature assumed before it is measured (from the prior drift change rate)."""
        slope0 = self.tick_ns
        return self.prior_drift_change_ppm_per_s * 1e-6 * slope0 / self.ticks_per_second


class _Brackets(NamedTuple):
    """The input brackets, validated: host reads (int64 ns) and the counter (masked to its
    width), in input order."""

    hb: NDArray[np.int64]
    raw: NDArray[np.uint64]
    ha: NDArray[np.int64]


def _validated(
    host_before_ns: ArrayLike, device_ticks: ArrayLike, host_after_ns: ArrayLike, o: _FitOptions
) -> _Brackets:
    """The brackets as arrays, or :class:`ClockFitError` (NaN, shapes, counter options)."""
    hb = _as_host(host_before_ns, "host_before_ns")
    ha = _as_host(host_after_ns, "host_after_ns")
    raw = _as_u64(device_ticks)
    if raw.ndim != 1 or not (hb.size == raw.size == ha.size):
        raise ClockFitError(
            f"brackets need three 1-D arrays of one length, got {hb.size}, {raw.size}, {ha.size}",
            record=o.record,
        )
    if not (1 <= o.counter_bits <= 64) or not o.ticks_per_second > 0:
        raise ClockFitError(
            f"counter_bits must be 1..64 and ticks_per_second positive, got {o.counter_bits}, {o.ticks_per_second}",
            record=o.record,
        )
    if o.counter_bits < 64:
        raw = raw & np.uint64((1 << o.counter_bits) - 1)
    return _Brackets(hb, raw, ha)


def _host_ordered(b: _Brackets, issues: list[str]) -> NDArray[np.intp]:
    """Input indices of the brackets of positive width, in host order (zero-width or
    reversed brackets dropped, said in ``issues``)."""
    keep = b.ha > b.hb
    if not keep.all():
        first = int(np.argmin(keep))
        issues.append(
            f"{int((~keep).sum())} brackets with host_after <= host_before dropped "
            f"(zero-width or non-monotonic host reads; first at bracket {first})"
        )
    idx = np.flatnonzero(keep)
    return idx[np.lexsort((b.raw[idx], b.ha[idx], b.hb[idx]))]


def _unwrapped(b: _Brackets, idx: NDArray[np.intp], o: _FitOptions) -> NDArray[np.int64]:
    """Unwrapped ticks of the brackets ``idx`` (host order), wraps counted from host gaps."""
    mid = (b.hb[idx] + b.ha[idx]) // 2
    return _unwrap_sequence(b.raw[idx], mid, o.counter_bits, o.ticks_per_second)


def _last_counter_epoch(
    b: _Brackets, idx: NDArray[np.intp], o: _FitOptions, issues: list[str]
) -> NDArray[np.intp]:
    """Step 1: the brackets that agree with their neighbours on the counter, of its last epoch.

    A torn, corrupt or backward read is dropped alone (never the good bracket after it);
    after a counter reset the brackets split into epochs and the last one is fitted.
    """
    runs = counter_epochs(
        _unwrapped(b, idx, o),
        b.hb[idx],
        b.ha[idx],
        ticks_per_second=o.ticks_per_second,
        max_rate_error_ppm=o.max_rate_error_ppm,
        host_resolution_ns=o.host_resolution_ns,
    )
    if runs.outliers.size:
        issues.append(
            f"{runs.outliers.size} brackets whose device ticks disagree with their "
            f"neighbours dropped (torn, corrupt or backwards reads): "
            f"{_brackets(idx[runs.outliers])}"
        )
    if not runs.epochs:
        raise InsufficientSamplesError(
            f"no two of {b.hb.size} brackets agree on the device counter "
            f"(ticks against host time off by more than {o.max_rate_error_ppm:g} ppm)",
            record=o.record,
        )
    last = runs.epochs[-1]
    if len(runs.epochs) > 1:
        earlier = sum(int(e.size) for e in runs.epochs[:-1])
        issues.append(
            f"device counter reset or jumped {len(runs.epochs) - 1} time(s): fitted the "
            f"last counter epoch, from bracket {int(idx[last[0]])} ({last.size} brackets); "
            f"{earlier} brackets of earlier epochs not used"
        )
    return idx[last]


def _distinct_ticks(
    b: _Brackets, idx: NDArray[np.intp], o: _FitOptions, issues: list[str]
) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
    """The brackets with strictly increasing unwrapped ticks, and those ticks.

    Of overlapping brackets with equal (or, within a tick, backward) ticks, the wider is
    dropped; gaps too long to count the wraps of a narrow counter are said in ``issues``.
    """
    if idx.size < 2:
        raise InsufficientSamplesError(
            f"need at least 2 usable brackets, got {idx.size} of {b.hb.size}", record=o.record
        )
    x = _unwrapped(b, idx, o)
    if o.counter_bits < 64:
        gaps = np.diff(x).astype(np.float64) * o.max_rate_error_ppm * 1e-6
        if np.any(gaps >= (1 << o.counter_bits) / 4):
            issues.append("gap between brackets too long to count counter wraps safely")
    repeated: list[int] = []
    while idx.size >= 2 and np.any(np.diff(x) <= 0):
        clash = int(np.flatnonzero(np.diff(x) <= 0)[0])
        widths = b.ha[idx[clash : clash + 2]] - b.hb[idx[clash : clash + 2]]
        drop = clash + 1 if widths[1] >= widths[0] else clash
        repeated.append(int(idx[drop]))
        idx, x = np.delete(idx, drop), np.delete(x, drop)
    if repeated:
        issues.append(
            f"{len(repeated)} brackets with repeated device ticks dropped: {_brackets(repeated)}"
        )
        if idx.size < 2:
            raise InsufficientSamplesError(
                "need at least 2 brackets with distinct ticks", record=o.record
            )
    return idx, x


@dataclass(frozen=True)
class _Feasible:
    """The brackets still in the fit: input indices, unwrapped ticks, and each one's
    interval ``[lo, hi]`` for the true host time of its read, widened by a tick at the
    largest rate error and the host resolution.

    Ticks count from ``tick_raw_ref`` and host times from ``host_ref_ns``: the raw counter
    and ``host_before`` of the first bracket fitted, kept when brackets are dropped."""

    idx: NDArray[np.intp]
    x: NDArray[np.int64]
    xs: NDArray[np.float64]
    lo: NDArray[np.float64]
    hi: NDArray[np.float64]
    tick_raw_ref: int
    host_ref_ns: int

    @staticmethod
    def of(b: _Brackets, idx: NDArray[np.intp], x: NDArray[np.int64], o: _FitOptions) -> _Feasible:
        """The intervals of the brackets ``idx`` (ticks ``x``), relative to the first one."""
        h0 = int(b.hb[idx[0]])
        lo = (b.hb[idx] - h0).astype(np.float64) - o.tick_ns * (1.0 + o.max_rate_error_ppm * 1e-6)
        hi = (b.ha[idx] - h0).astype(np.float64) + o.host_resolution_ns
        return _Feasible(idx, x, x.astype(np.float64), lo, hi, int(b.raw[idx[0]]), h0)

    def without(self, bad: NDArray[np.bool_], o: _FitOptions) -> _Feasible:
        """These brackets less the ``bad`` ones; at least two must remain."""
        keep = ~bad
        out = _Feasible(
            self.idx[keep],
            self.x[keep],
            self.xs[keep],
            self.lo[keep],
            self.hi[keep],
            self.tick_raw_ref,
            self.host_ref_ns,
        )
        if out.idx.size < 2:
            raise InsufficientSamplesError("fewer than 2 consistent brackets", record=o.record)
        return out


class _KnotPass(NamedTuple):
    """One pass of steps 2-4 at one curvature boost: knots and their feasible intervals."""

    empty: NDArray[np.bool_]  # brackets whose first-pass interval is empty
    knots: NDArray[np.intp]
    k_lo: NDArray[np.float64]
    k_hi: NDArray[np.float64]
    seg_kappa: NDArray[np.float64]

    @property
    def infeasible(self) -> bool:
        """A knot's interval is empty, or the knot centres do not increase."""
        return bool(
            np.any(self.k_lo > self.k_hi) or np.any(np.diff((self.k_lo + self.k_hi) / 2.0) <= 0)
        )

    def culprits(self) -> NDArray[np.bool_]:
        """The brackets to drop when boosting the curvature did not help: those with an empty
        first-pass interval, else the knots with an empty interval."""
        bad = self.empty.copy()
        if not bad.any():
            bad[self.knots[self.k_lo > self.k_hi]] = True
        return bad


def _local_curvature(
    f: _Feasible, boost: float, o: _FitOptions
) -> tuple[NDArray[np.float64], int, NDArray[np.bool_]]:
    """Step 3a: curvature bound per bracket (from a first pass at the boosted prior), the
    stride it was measured at, and the brackets whose first-pass interval is empty."""
    n = f.xs.size
    prior = o.prior_curvature
    k1 = np.full(n, prior * boost)
    g_lo, g_hi = _intervals(f.xs, f.lo, f.hi, np.arange(n), k1, min(4, n))
    empty = g_lo > g_hi
    centre = np.where(empty, (f.lo + f.hi) / 2.0, (g_lo + g_hi) / 2.0)
    half = np.where(empty, (f.hi - f.lo) / 2.0, (g_hi - g_lo) / 2.0)
    kappa, stride = _curvature(f.xs, centre, half, prior)
    kappa = np.maximum(kappa * boost, prior * 0.01)
    if n < o.min_samples:
        kappa = np.maximum(kappa, prior)
    return kappa, stride, empty


def _knot_pass(f: _Feasible, boost: float, o: _FitOptions) -> _KnotPass:
    """Steps 2-4 once: curvature, knots placed for the target model error, and the
    guaranteed interval of the map at each knot."""
    kappa, stride, empty = _local_curvature(f, boost, o)
    knots = _place_knots(f.xs, kappa, o.target_model_error_ns)
    neighbours = max(2, min(_PAIR_NEIGHBOURS, 2 * stride))
    k_lo, k_hi = _intervals(f.xs, f.lo, f.hi, knots, kappa, neighbours)
    seg_kappa = np.array([kappa[a : b + 1].max() for a, b in itertools.pairwise(knots)])
    return _KnotPass(empty, knots, k_lo, k_hi, seg_kappa)


def _mapping_at_knots(f: _Feasible, p: _KnotPass, o: _FitOptions) -> ClockMapping:
    """The mapping through the centres of the knots' intervals, bounded by their half-widths."""
    try:
        return ClockMapping(
            knot_ticks=f.x[p.knots],
            knot_host_ns=(p.k_lo + p.k_hi) / 2.0,
            knot_bound_ns=(p.k_hi - p.k_lo) / 2.0,
            segment_curvature=p.seg_kappa,
            tick_raw_ref=f.tick_raw_ref,
            host_ref_ns=f.host_ref_ns,
            counter_bits=o.counter_bits,
            ticks_per_second=o.ticks_per_second,
            domain=o.domain,
        )
    except ClockFitError as exc:  # a safety net: name the brackets at the knots
        raise ClockFitError(
            f"{exc} (knots at {_brackets(f.idx[p.knots])})", record=o.record
        ) from None


def _inconsistent(mapping: ClockMapping, f: _Feasible, o: _FitOptions) -> NDArray[np.bool_]:
    """The self-check: brackets the mapping does not meet within its bound."""
    y, bound = mapping._eval(f.x)
    y = y - 0.5 * o.tick_ns
    return (y + bound < f.lo) | (y - bound > f.hi)


class _Refit(NamedTuple):
    """What the boost-and-drop loop ended with."""

    mapping: ClockMapping | None
    kept: _Feasible
    boost: float
    rejected: int


def _fit_knots(f: _Feasible, o: _FitOptions) -> _Refit:
    """Steps 2-4 until the mapping passes its self-check (at most six passes): when knots
    are infeasible or brackets inconsistent, the curvature is raised (up to 16x), then the
    offending brackets are dropped."""
    rejected = 0
    boost = 1.0
    mapping: ClockMapping | None = None
    for _attempt in range(6):
        p = _knot_pass(f, boost, o)
        if p.infeasible:
            if boost < 16.0:
                boost *= 4.0
                continue
            bad = p.culprits()
            if not bad.any():
                break
            rejected += int(bad.sum())
            f = f.without(bad, o)
            continue
        mapping = _mapping_at_knots(f, p, o)
        bad = _inconsistent(mapping, f, o)
        if not bad.any():
            break
        mapping = None
        if boost < 16.0:
            boost *= 4.0
            continue
        rejected += int(bad.sum())
        f = f.without(bad, o)
    return _Refit(mapping, f, boost, rejected)


def _with_quality(refit: _Refit, issues: list[str], n_in: int, o: _FitOptions) -> ClockMapping:
    """The fitted mapping with its quality, issues and bracket counts; or
    :class:`ClockFitError` when no mapping passed the self-check."""
    mapping, idx = refit.mapping, refit.kept.idx
    if mapping is None:
        raise ClockFitError(
            "brackets are mutually inconsistent (device reads outside their host brackets?); "
            f"{idx.size} left: {_brackets(idx)}",
            record=o.record,
        )
    if refit.rejected:
        issues.append(f"{refit.rejected} brackets inconsistent with their neighbours dropped")
    if refit.boost > 1.0:
        issues.append(f"curvature estimate raised {refit.boost:g}x to make brackets consistent")
    if idx.size < o.min_samples:
        issues.append(f"only {idx.size} usable brackets (fewer than {o.min_samples})")
    mapping.quality = "low" if issues else "good"
    mapping.issues = tuple(issues)
    mapping.samples_used = int(idx.size)
    mapping.samples_rejected = int(n_in - idx.size)
    return mapping


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
    o = _FitOptions(
        counter_bits=counter_bits,
        ticks_per_second=ticks_per_second,
        domain=domain,
        host_resolution_ns=host_resolution_ns,
        target_model_error_ns=target_model_error_ns,
        min_samples=min_samples,
        max_rate_error_ppm=max_rate_error_ppm,
        prior_drift_change_ppm_per_s=prior_drift_change_ppm_per_s,
    )
    b = _validated(host_before_ns, device_ticks, host_after_ns, o)
    issues: list[str] = []
    idx = _host_ordered(b, issues)
    if idx.size >= 2:
        idx = _last_counter_epoch(b, idx, o, issues)
    idx, x = _distinct_ticks(b, idx, o, issues)
    refit = _fit_knots(_Feasible.of(b, idx, x, o), o)
    return _with_quality(refit, issues, b.hb.size, o)
