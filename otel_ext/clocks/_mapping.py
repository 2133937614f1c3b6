"""Fitted clock mappings: device ticks to host nanoseconds, with an error bound.

A :class:`ClockMapping` is a continuous, strictly increasing, piecewise-linear map from one
clock domain's counter (ticks, possibly wrapping at ``2**counter_bits``) to a host clock
(integer nanoseconds). Every knot carries a bound on the absolute error of the mapping there;
between knots the bound interpolates and adds the model (curvature) error of a straight segment.

Mappings compose (device → host → reference host) with :func:`compose` or
:meth:`ClockMapping.then`; a composition is a :class:`ComposedMapping` with the same methods.

>>> import numpy as np
>>> m = ClockMapping(
...     knot_ticks=np.array([0, 1_000_000]), knot_host_ns=np.array([0.0, 2_000_000.0]),
...     knot_bound_ns=np.array([10.0, 10.0]), segment_curvature=np.array([0.0]),
...     tick_raw_ref=500, host_ref_ns=1_000, counter_bits=32, ticks_per_second=5e8)
>>> int(m.to_host_ns(500_500)[()])
1001001
>>> float(m.bound_ns(500_500)[()])
11.5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from otel_ext._arrays import median
from otel_ext.clocks._errors import AmbiguousTicksError, ClockFitError

__all__ = ["ClockMapping", "ClockMappingDict", "ComposedMapping", "TimeMapping", "compose"]

#: largest rate of the second mapping's slope assumed when bounding a composition
_SLOPE_TOLERANCE = 1e-3


class ClockMappingDict(TypedDict):
    """A fitted mapping as JSON (:meth:`ClockMapping.to_dict`); :meth:`ClockMapping.from_dict`
    reads it back, the keys marked ``NotRequired`` taking their defaults when absent."""

    domain: NotRequired[str | None]
    counter_bits: int
    ticks_per_second: float
    tick_raw_ref: int
    host_ref_ns: int
    knot_ticks: list[int]
    knot_host_ns: list[float]
    knot_bound_ns: list[float]
    segment_curvature: list[float]
    quality: NotRequired[str]
    issues: NotRequired[list[str]]
    samples_used: NotRequired[int]
    samples_rejected: NotRequired[int]


@runtime_checkable
class TimeMapping(Protocol):
    """What every mapping offers: times and bounds on a host timeline."""

    def to_host_ns(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.int64]: ...

    def bound_ns(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.float64]: ...

    def align(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]: ...


def _as_u64(values: ArrayLike) -> NDArray[np.uint64]:
    """Raw counter values as ``uint64`` (negative int64 values wrap, as a counter would)."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ClockFitError("device ticks contain NaN or infinity")
        return np.rint(arr).astype(np.int64).astype(np.uint64)
    if arr.dtype.kind == "O":
        return np.array([int(v) % (1 << 64) for v in arr.ravel()], dtype=np.uint64).reshape(
            arr.shape
        )
    if arr.dtype.kind not in "iub":
        raise ClockFitError(f"device ticks must be integers, got dtype {arr.dtype}")
    return arr.astype(np.uint64)


class ClockMapping:
    """A fitted map from one clock domain's ticks to host nanoseconds, with error bounds.

    Built by :func:`otel_ext.clocks.fit_clock` (or :meth:`from_dict`); immutable.

    Args:
        knot_ticks: knot positions, unwrapped ticks relative to ``tick_raw_ref`` (strictly
            increasing, at least two).
        knot_host_ns: mapped host time at each knot, ns relative to ``host_ref_ns``.
        knot_bound_ns: bound on the absolute mapping error at each knot.
        segment_curvature: bound on the second derivative of the true map on each segment
            (host ns per tick squared); gives the model error between knots.
        tick_raw_ref: the raw counter value that relative ticks count from.
        host_ref_ns: the host time that relative host times count from.
        counter_bits: the counter wraps at ``2**counter_bits``.
        ticks_per_second: nominal tick rate.
        quality: ``"good"`` or ``"low"`` (too few brackets, dropped brackets, gaps).
        issues: what made the quality low, one sentence each.
        samples_used: brackets the fit kept.
        samples_rejected: brackets the fit dropped.
        domain: the clock domain's name, if known.
    """

    __slots__ = (
        "_kb",
        "_kk",
        "_kx",
        "_ky",
        "_mask",
        "_period",
        "counter_bits",
        "domain",
        "host_ref_ns",
        "issues",
        "quality",
        "samples_rejected",
        "samples_used",
        "tick_raw_ref",
        "ticks_per_second",
    )

    def __init__(
        self,
        *,
        knot_ticks: ArrayLike,
        knot_host_ns: ArrayLike,
        knot_bound_ns: ArrayLike,
        segment_curvature: ArrayLike,
        tick_raw_ref: int,
        host_ref_ns: int,
        counter_bits: int = 64,
        ticks_per_second: float = 1e9,
        quality: str = "good",
        issues: Sequence[str] = (),
        samples_used: int = 0,
        samples_rejected: int = 0,
        domain: str | None = None,
    ) -> None:
        kx = np.asarray(knot_ticks, dtype=np.int64)
        ky = np.asarray(knot_host_ns, dtype=np.float64)
        kb = np.asarray(knot_bound_ns, dtype=np.float64)
        kk = np.asarray(segment_curvature, dtype=np.float64)
        if kx.ndim != 1 or kx.size < 2 or ky.shape != kx.shape or kb.shape != kx.shape:
            raise ClockFitError("a mapping needs at least two knots with a value and bound each")
        if kk.shape != (kx.size - 1,):
            raise ClockFitError("a mapping needs one curvature per segment")
        if np.any(np.diff(kx) <= 0) or np.any(np.diff(ky) <= 0):
            raise ClockFitError("mapping knots must be strictly increasing in ticks and host time")
        if not (1 <= counter_bits <= 64):
            raise ClockFitError(f"counter_bits must be in 1..64, got {counter_bits}")
        if not ticks_per_second > 0:
            raise ClockFitError(f"ticks_per_second must be positive, got {ticks_per_second}")
        self._kx, self._ky, self._kb, self._kk = kx, ky, kb, kk
        self.tick_raw_ref = int(tick_raw_ref) % (1 << counter_bits)
        self.host_ref_ns = int(host_ref_ns)
        self.counter_bits = int(counter_bits)
        self.ticks_per_second = float(ticks_per_second)
        self._period = 1 << self.counter_bits
        self._mask = np.uint64(self._period - 1)
        self.quality = quality
        self.issues = tuple(issues)
        self.samples_used = int(samples_used)
        self.samples_rejected = int(samples_rejected)
        self.domain = domain

    # -- introspection -------------------------------------------------------------------
    @property
    def knot_ticks(self) -> NDArray[np.int64]:
        """Knot positions (relative unwrapped ticks); a copy."""
        return self._kx.copy()

    @property
    def knot_host_ns(self) -> NDArray[np.float64]:
        """Absolute host time of each knot (float ns); a copy."""
        return self._ky + self.host_ref_ns

    @property
    def knot_bound_ns(self) -> NDArray[np.float64]:
        """Error bound at each knot; a copy."""
        return self._kb.copy()

    @property
    def host_range_ns(self) -> tuple[int, int]:
        """First and last host time the fit covers (interpolation inside, extrapolation outside)."""
        return (self.host_ref_ns + int(self._ky[0]), self.host_ref_ns + int(self._ky[-1]))

    @property
    def tick_ns(self) -> float:
        """Nominal duration of one tick in nanoseconds."""
        return 1e9 / self.ticks_per_second

    def drift_ppm(
        self, ticks: ArrayLike | None = None, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """Device rate error against the host, in ppm (positive: the device counts fast).

        Args:
            ticks: where to evaluate; the newest segment when ``None``.
            near_host_ns: coarse host-time hint for wrapped ticks.
        """
        slope = np.diff(self._ky) / np.diff(self._kx).astype(np.float64)
        if ticks is None:
            idx = np.array(slope.size - 1)
        else:
            idx = self._segment(self._rel_ticks(ticks, near_host_ns))
        return (1e9 / (slope[idx] * self.ticks_per_second) - 1.0) * 1e6

    def offset_ns(self) -> float:
        """Device time minus host time at the newest knot (raw counter as read, in ns)."""
        raw = (self.tick_raw_ref + int(self._kx[-1])) % self._period
        return raw * self.tick_ns - (self.host_ref_ns + float(self._ky[-1]))

    def median_bound_ns(self) -> float:
        """Median knot bound: a one-number summary of the fit's quality."""
        return float(median(self._kb)) + self._resolution_ns()

    # -- mapping ------------------------------------------------------------------------
    def unwrap(self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None) -> NDArray[np.int64]:
        """Raw (wrapped) ticks to unwrapped ticks relative to ``tick_raw_ref``.

        Args:
            ticks: raw counter values, as read.
            near_host_ns: a coarse host time of each event (scalar or array), within a
                quarter of the counter period; required when the fit spans more than half
                a counter period and the counter has fewer than 64 bits.

        Raises:
            AmbiguousTicksError: the placement is ambiguous and no hint was given.
        """
        return self._rel_ticks(ticks, near_host_ns)

    def _rel_ticks(self, ticks: ArrayLike, near_host_ns: ArrayLike | None) -> NDArray[np.int64]:
        raw = _as_u64(ticks)
        delta = raw - np.uint64(self.tick_raw_ref)
        if self.counter_bits == 64:
            return delta.view(np.int64)
        d = (delta & self._mask).astype(np.int64)
        if near_host_ns is None:
            if self._kx[-1] - self._kx[0] >= self._period // 2:
                raise AmbiguousTicksError(
                    f"counter of {self.counter_bits} bits wraps every "
                    f"{self._period * self.tick_ns / 1e9:.3g} s but the mapping spans "
                    f"{(self._kx[-1] - self._kx[0]) * self.tick_ns / 1e9:.3g} s; pass near_host_ns",
                    record=self.domain,
                )
            pred: Any = np.float64((self._kx[0] + self._kx[-1]) / 2.0)
        else:
            pred = self._host_to_rel_ticks(np.asarray(near_host_ns))
        k = np.rint((pred - d) / float(self._period)).astype(np.int64)
        return d + k * np.int64(self._period)

    def _segment(self, x: NDArray[np.int64]) -> NDArray[np.intp]:
        idx = np.searchsorted(self._kx, x, side="right") - 1
        return np.clip(idx, 0, self._kx.size - 2)

    def _resolution_ns(self) -> float:
        # half a tick (the event lies within one tick of its counter value) + rounding to ns
        return 0.5 * self.tick_ns + 0.5

    def _eval(self, x: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        idx = self._segment(x)
        xa = self._kx[idx]
        length = (self._kx[idx + 1] - xa).astype(np.float64)
        dx = (x - xa).astype(np.float64)
        lam = dx / length
        ya, yb = self._ky[idx], self._ky[idx + 1]
        y = ya + (yb - ya) * lam + 0.5 * self.tick_ns
        bound = (
            np.abs(1.0 - lam) * self._kb[idx]
            + np.abs(lam) * self._kb[idx + 1]
            + self._kk[idx] * np.abs(dx) * np.abs(length - dx) / 2.0
            + self._resolution_ns()
        )
        return y, bound

    def align(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Map raw ticks to host ns and return the bound too (one unwrap for both).

        Args:
            ticks: raw counter values, as read (wrapped).
            near_host_ns: coarse host-time hint (see :meth:`unwrap`).

        Returns:
            ``(host_ns, bound_ns)``: int64 host times and float bounds, input-shaped.
        """
        x = self._rel_ticks(ticks, near_host_ns)
        y, bound = self._eval(np.atleast_1d(x))
        host = np.rint(y).astype(np.int64) + np.int64(self.host_ref_ns)
        return host.reshape(np.shape(x)), bound.reshape(np.shape(x))

    def to_host_ns(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.int64]:
        """Map raw device ticks to host nanoseconds (int64), unwrapping the counter.

        Args:
            ticks: raw counter values, as read (wrapped).
            near_host_ns: coarse host-time hint (see :meth:`unwrap`).

        Returns:
            Host times, int64 ns, shaped like ``ticks``.

        Raises:
            AmbiguousTicksError: wrapped ticks without the hint they need.
        """
        return self.align(ticks, near_host_ns)[0]

    def bound_ns(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """Bound on ``|to_host_ns(ticks) - true host time|`` in ns, shaped like ``ticks``.

        Inside the fitted range it interpolates the knot bounds and adds the curvature
        term; outside it grows with the distance (extrapolation).
        """
        return self.align(ticks, near_host_ns)[1]

    def covers(self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None) -> NDArray[np.bool_]:
        """Whether each tick lies inside the fitted range (interpolation, not extrapolation)."""
        x = self._rel_ticks(ticks, near_host_ns)
        return (x >= self._kx[0]) & (x <= self._kx[-1])

    def _host_to_rel_ticks(self, host_ns: NDArray[Any]) -> NDArray[np.float64]:
        h = (np.asarray(host_ns).astype(np.int64) - np.int64(self.host_ref_ns)).astype(np.float64)
        idx = np.clip(np.searchsorted(self._ky, h, side="right") - 1, 0, self._ky.size - 2)
        ya, yb = self._ky[idx], self._ky[idx + 1]
        xa, xb = self._kx[idx].astype(np.float64), self._kx[idx + 1].astype(np.float64)
        return xa + (h - ya) * (xb - xa) / (yb - ya)

    def to_ticks(self, host_ns: ArrayLike) -> NDArray[np.uint64]:
        """The inverse map: host ns to raw (wrapped) device ticks, as ``uint64``."""
        x = np.rint(self._host_to_rel_ticks(np.asarray(host_ns))).astype(np.int64)
        raw = x.astype(np.uint64) + np.uint64(self.tick_raw_ref)
        return raw & self._mask if self.counter_bits < 64 else raw

    def then(self, other: TimeMapping) -> ComposedMapping:
        """This mapping followed by ``other`` (e.g. host → reference host)."""
        return ComposedMapping(self, other)

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> ClockMappingDict:
        """A JSON-ready description; :meth:`from_dict` rebuilds the same mapping."""
        return {
            "domain": self.domain,
            "counter_bits": self.counter_bits,
            "ticks_per_second": self.ticks_per_second,
            "tick_raw_ref": self.tick_raw_ref,
            "host_ref_ns": self.host_ref_ns,
            "knot_ticks": [int(v) for v in self._kx],
            "knot_host_ns": [float(v) for v in self._ky],
            "knot_bound_ns": [float(v) for v in self._kb],
            "segment_curvature": [float(v) for v in self._kk],
            "quality": self.quality,
            "issues": list(self.issues),
            "samples_used": self.samples_used,
            "samples_rejected": self.samples_rejected,
        }

    @classmethod
    def from_dict(cls, data: ClockMappingDict) -> ClockMapping:
        """Rebuild a mapping written by :meth:`to_dict`.

        Raises:
            ClockFitError: a field is missing or malformed.
        """
        try:
            return cls(
                knot_ticks=data["knot_ticks"],
                knot_host_ns=data["knot_host_ns"],
                knot_bound_ns=data["knot_bound_ns"],
                segment_curvature=data["segment_curvature"],
                tick_raw_ref=int(data["tick_raw_ref"]),
                host_ref_ns=int(data["host_ref_ns"]),
                counter_bits=int(data["counter_bits"]),
                ticks_per_second=float(data["ticks_per_second"]),
                quality=str(data.get("quality", "good")),
                issues=tuple(data.get("issues", ())),
                samples_used=int(data.get("samples_used", 0)),
                samples_rejected=int(data.get("samples_rejected", 0)),
                domain=data.get("domain"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ClockFitError(f"malformed mapping description: {exc}") from exc

    def max_slope(self) -> float:
        """Largest host-ns-per-tick slope of any segment."""
        return float(np.max(np.diff(self._ky) / np.diff(self._kx).astype(np.float64)))

    def __repr__(self) -> str:
        lo, hi = self.host_range_ns
        return (
            f"ClockMapping(domain={self.domain!r}, knots={self._kx.size}, host_range_ns=({lo}, {hi}), "
            f"median_bound_ns={self.median_bound_ns():.0f}, quality={self.quality!r})"
        )


class ComposedMapping:
    """Two mappings in sequence: ``second(first(ticks))``, bounds added with slope allowance.

    The bound is ``first.bound * (max slope of second) * (1 + 1e-3) + second.bound``.
    ``near_host_ns`` is passed to ``first`` (it is coarse, so either host timeline will do).

    >>> import numpy as np
    >>> a = ClockMapping(knot_ticks=[0, 10**9], knot_host_ns=[0.0, 1e9],
    ...     knot_bound_ns=[100.0, 100.0], segment_curvature=[0.0], tick_raw_ref=0, host_ref_ns=0)
    >>> b = ClockMapping(knot_ticks=[0, 10**9], knot_host_ns=[0.0, 1e9],
    ...     knot_bound_ns=[50.0, 50.0], segment_curvature=[0.0], tick_raw_ref=0, host_ref_ns=5000)
    >>> ab = compose(a, b)
    >>> int(ab.to_host_ns(1000)[()]), round(float(ab.bound_ns(1000)[()]))
    (6000, 152)
    """

    def __init__(self, first: TimeMapping, second: TimeMapping) -> None:
        self.first = first
        self.second = second
        slope = second.max_slope() if isinstance(second, (ClockMapping, ComposedMapping)) else 1.0
        self._gain = slope * (1.0 + _SLOPE_TOLERANCE)

    def max_slope(self) -> float:
        """Upper bound of the composition's slope."""
        s1 = (
            self.first.max_slope()
            if isinstance(self.first, (ClockMapping, ComposedMapping))
            else 1.0
        )
        return s1 * self._gain

    def align(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """As :meth:`ClockMapping.align`, through both mappings."""
        h1, b1 = self.first.align(ticks, near_host_ns)
        h2, b2 = self.second.align(h1, h1)
        return h2, b1 * self._gain + b2

    def to_host_ns(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.int64]:
        """As :meth:`ClockMapping.to_host_ns`, through both mappings."""
        return self.align(ticks, near_host_ns)[0]

    def bound_ns(
        self, ticks: ArrayLike, near_host_ns: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """As :meth:`ClockMapping.bound_ns`, through both mappings."""
        return self.align(ticks, near_host_ns)[1]

    def then(self, other: TimeMapping) -> ComposedMapping:
        """This composition followed by ``other``."""
        return ComposedMapping(self, other)


def compose(first: TimeMapping, *rest: TimeMapping) -> TimeMapping:
    """Chain mappings: ``compose(device_to_host, host_to_reference, ...)``.

    Args:
        first: the mapping applied first (to raw ticks).
        rest: mappings applied next, each taking the previous one's host ns as its ticks.

    Returns:
        ``first`` alone, or a :class:`ComposedMapping`.
    """
    out: TimeMapping = first
    for m in rest:
        out = ComposedMapping(out, m)
    return out
