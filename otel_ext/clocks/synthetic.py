"""Simulated clocks with known truth: for tests, benchmarks and the simulated cluster.

A :class:`SyntheticClock` counts ticks against a reference (true) time in nanoseconds:
an offset, a skew in ppm, a sinusoidal wander of the rate, a counter that wraps. A
:class:`DelayModel` describes how long the host reads before and after a device read take
(a base plus an exponential tail each, and a fraction of reads hit by a long interruption).
Everything is seeded; nothing reads a real clock.

>>> clock = SyntheticClock(offset_ticks=5, skew_ppm=100.0, counter_bits=64)
>>> int(clock.ticks_at(1_000_000_000)[()])
1000100005
>>> round(float(clock.host_at_elapsed(1_000_100_000.0)[()]))
1000000000
>>> b = simulate_brackets(clock, [0, 100_000_000], seed=1)
>>> bool(np.all(b.host_before_ns < b.true_read_ns)), bool(np.all(b.true_read_ns < b.host_after_ns))
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "AlignmentScenario",
    "Brackets",
    "DelayModel",
    "SyntheticClock",
    "alignment_scenario",
    "simulate_brackets",
    "simulate_events",
]


@dataclass(frozen=True)
class SyntheticClock:
    """A device counter against true time (ns), with known offset, skew and wander.

    Attributes:
        offset_ticks: counter value at true time 0, before wrapping.
        ticks_per_second: nominal tick rate.
        skew_ppm: constant rate error (positive: counts fast).
        wander_ppm: amplitude of the sinusoidal rate wander.
        wander_period_s: its period in seconds.
        wander_phase_rad: its phase at time 0.
        counter_bits: the counter wraps at ``2**counter_bits``.
    """

    offset_ticks: int = 0
    ticks_per_second: float = 1e9
    skew_ppm: float = 0.0
    wander_ppm: float = 0.0
    wander_period_s: float = 120.0
    wander_phase_rad: float = 0.0
    counter_bits: int = 64

    def elapsed_ticks(self, true_ns: ArrayLike) -> NDArray[np.float64]:
        """Unwrapped (fractional) ticks counted since true time 0."""
        t = np.asarray(true_ns, dtype=np.float64) / 1e9
        w = 2.0 * np.pi / self.wander_period_s
        phase = t * (1.0 + self.skew_ppm * 1e-6) + self.wander_ppm * 1e-6 / w * (
            np.cos(self.wander_phase_rad) - np.cos(w * t + self.wander_phase_rad)
        )
        return phase * self.ticks_per_second

    def rate(self, true_ns: ArrayLike) -> NDArray[np.float64]:
        """Ticks per true second divided by the nominal rate."""
        t = np.asarray(true_ns, dtype=np.float64) / 1e9
        w = 2.0 * np.pi / self.wander_period_s
        return 1.0 + 1e-6 * (
            self.skew_ppm + self.wander_ppm * np.sin(w * t + self.wander_phase_rad)
        )

    def ticks_at(self, true_ns: ArrayLike) -> NDArray[np.uint64]:
        """The raw counter (floor, wrapped) at each true time."""
        whole = np.floor(self.elapsed_ticks(true_ns)).astype(np.int64)
        raw = whole.astype(np.uint64) + np.uint64(self.offset_ticks % (1 << 64))
        if self.counter_bits < 64:
            raw = raw & np.uint64((1 << self.counter_bits) - 1)
        return raw

    def host_at_elapsed(self, elapsed: ArrayLike) -> NDArray[np.float64]:
        """True time (ns) at which the unwrapped count reached ``elapsed`` (Newton's method)."""
        target = np.asarray(elapsed, dtype=np.float64)
        t = target / self.ticks_per_second * 1e9 / (1.0 + self.skew_ppm * 1e-6)
        for _ in range(6):
            t = t - (self.elapsed_ticks(t) - target) / (self.ticks_per_second * 1e-9 * self.rate(t))
        return t


@dataclass(frozen=True)
class DelayModel:
    """Host-read delays around a device read, in ns (defaults: the issue's scenario).

    The host's *before* read happens ``before_base_ns + Exp(before_exp_mean_ns)`` before the
    device read, its *after* read ``after_base_ns + Exp(after_exp_mean_ns)`` after it; a
    fraction ``outlier_fraction`` of brackets gets an extra uniform delay in
    ``[outlier_min_ns, outlier_max_ns]`` on one side (chosen at random).
    """

    before_base_ns: float = 800.0
    before_exp_mean_ns: float = 300.0
    after_base_ns: float = 1200.0
    after_exp_mean_ns: float = 900.0
    outlier_fraction: float = 0.02
    outlier_min_ns: float = 20_000.0
    outlier_max_ns: float = 500_000.0


@dataclass(frozen=True)
class Brackets:
    """Simulated brackets and the true time of each device read."""

    host_before_ns: NDArray[np.int64]
    device_ticks: NDArray[np.uint64]
    host_after_ns: NDArray[np.int64]
    true_read_ns: NDArray[np.float64]


def simulate_brackets(
    clock: SyntheticClock,
    read_ns: ArrayLike,
    *,
    delays: DelayModel | None = None,
    seed: int = 0,
) -> Brackets:
    """Brackets for device reads at the given true times; the host clock is true time.

    Args:
        clock: the device clock.
        read_ns: true time of each device read (ns).
        delays: the read-delay model (default :class:`DelayModel`).
        seed: random seed.

    Returns:
        The :class:`Brackets`; host times are integer ns (floored, as a clock reads).
    """
    d = delays or DelayModel()
    rng = np.random.default_rng(seed)
    t = np.asarray(read_ns, dtype=np.float64)
    n = t.size
    before = (
        d.before_base_ns + rng.exponential(d.before_exp_mean_ns, n)
        if d.before_exp_mean_ns > 0
        else np.full(n, d.before_base_ns)
    )
    after = (
        d.after_base_ns + rng.exponential(d.after_exp_mean_ns, n)
        if d.after_exp_mean_ns > 0
        else np.full(n, d.after_base_ns)
    )
    hit = rng.random(n) < d.outlier_fraction
    extra = rng.uniform(d.outlier_min_ns, d.outlier_max_ns, n) * hit
    side = rng.random(n) < 0.5
    before = before + np.where(side, extra, 0.0)
    after = after + np.where(side, 0.0, extra)
    return Brackets(
        host_before_ns=np.floor(t - before).astype(np.int64),
        device_ticks=clock.ticks_at(t),
        host_after_ns=np.floor(t + after).astype(np.int64),
        true_read_ns=t,
    )


def simulate_events(
    clock: SyntheticClock, n: int, start_ns: float, end_ns: float, *, seed: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.uint64]]:
    """``n`` events at uniform random true times: ``(true_ns, raw_ticks)``."""
    rng = np.random.default_rng(seed)
    true_ns = np.sort(rng.uniform(start_ns, end_ns, n))
    return true_ns, clock.ticks_at(true_ns)


@dataclass(frozen=True)
class AlignmentScenario:
    """The clock-alignment benchmark's scenario (benchmarks/clock_alignment.py), with its truth."""

    clock: SyntheticClock
    brackets: Brackets
    event_true_ns: NDArray[np.float64]
    event_ticks: NDArray[np.uint64]


def alignment_scenario(
    *,
    duration_s: float = 60.0,
    interval_s: float = 0.1,
    events: int = 100_000,
    counter_bits: int = 32,
    skew_ppm: float = 20.0,
    wander_ppm: float = 5.0,
    wander_period_s: float = 120.0,
    delays: DelayModel | None = None,
    seed: int = 0,
) -> AlignmentScenario:
    """The issue's scenario: 60 s, 32-bit 1 GHz counter, 20 ± 5 ppm, a bracket every 100 ms.

    >>> s = alignment_scenario(duration_s=1.0, events=10)
    >>> s.brackets.device_ticks.size, s.event_ticks.size
    (10, 10)
    """
    rng = np.random.default_rng(seed)
    clock = SyntheticClock(
        offset_ticks=int(rng.integers(0, 1 << 62)),
        ticks_per_second=1e9,
        skew_ppm=skew_ppm,
        wander_ppm=wander_ppm,
        wander_period_s=wander_period_s,
        wander_phase_rad=float(rng.uniform(0, 2 * np.pi)),
        counter_bits=counter_bits,
    )
    reads = np.arange(0.0, duration_s * 1e9, interval_s * 1e9) + 5_000_000.0
    brackets = simulate_brackets(clock, reads, delays=delays, seed=seed + 1)
    true_ns, ticks = simulate_events(clock, events, 0.0, duration_s * 1e9, seed=seed + 2)
    return AlignmentScenario(clock, brackets, true_ns, ticks)
