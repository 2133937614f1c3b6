"""Rates from monotonic counters, with reset and wrap-around handling (never negative).

A hardware counter either wraps around at ``2**bits`` (a 32-bit cycle counter) or resets to
zero (a driver reload, a device reset). :func:`counter_delta` turns two consecutive readings
into the non-negative increase between them; :class:`CounterTracker` keeps, per series, the
monotonic total (the first reading plus every delta since) and a short history so that a
rate can be taken over a window.

>>> counter_delta(10, 25)
15
>>> counter_delta(2**32 - 6, 4, wrap_bits=32)   # wrapped: 6 to the top, then 4
10
>>> counter_delta(1_000, 7)                      # reset: counted from zero again
7
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["CounterTracker", "RatePoint", "counter_delta"]


def counter_delta(previous: float, current: float, *, wrap_bits: int | None = None) -> float:
    """The non-negative increase of a counter between two readings.

    Args:
        previous: the earlier reading.
        current: the later reading.
        wrap_bits: the counter's width when it wraps around at ``2**wrap_bits``; ``None``
            when it can only reset.

    Returns:
        ``current - previous`` when the counter did not go down; when it went down, the
        wrapped distance if the counter wraps (a wrapping counter read at least once per
        wrap period can only have wrapped) and ``current`` (counted again from zero)
        otherwise. Never negative.

    >>> counter_delta(5, 5)
    0
    >>> counter_delta(200, 3, wrap_bits=8)   # 256 - 200 + 3
    59
    >>> counter_delta(-5, -9)                # nonsense in, still not negative out
    0
    """
    if current >= previous:
        return current - previous
    if wrap_bits is not None and 0 <= current < 2**wrap_bits and 0 <= previous < 2**wrap_bits:
        return current + 2**wrap_bits - previous
    return max(current, 0)


@dataclass(frozen=True, slots=True)
class RatePoint:
    """A rate over a window.

    Attributes:
        rate: increase per second over the window (never negative).
        increase: the increase over the window.
        window_s: the window's length in seconds.
    """

    rate: float
    increase: float
    window_s: float


@dataclass(slots=True)
class CounterTracker:
    """Per-series state of one monotonic counter.

    Args:
        window_ns: the window rates are taken over; ``0`` means "since the previous
            reading".
        wrap_bits: see :func:`counter_delta`.

    >>> t = CounterTracker()
    >>> t.update(100, 0)
    >>> t.update(300, 2_000_000_000)
    >>> t.total, t.rate()
    (300, RatePoint(rate=100.0, increase=200, window_s=2.0))
    """

    window_ns: int = 0
    wrap_bits: int | None = None
    total: float = 0.0
    last_raw: float | None = None
    last_delta: float = 0.0
    resets: int = 0
    history: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=4096))

    def update(self, raw: float, timestamp_ns: int, *, wrap_bits: int | None = None) -> None:
        """Account for a new raw reading (non-decreasing timestamps expected).

        A reading whose timestamp is not after the previous one is ignored (never a
        division by zero, never a negative window).
        """
        bits = wrap_bits if wrap_bits is not None else self.wrap_bits
        if self.last_raw is None:
            self.total = raw
            self.last_delta = 0.0
        else:
            if self.history and timestamp_ns <= self.history[-1][0]:
                return
            if raw < self.last_raw:
                self.resets += 1
            delta = counter_delta(self.last_raw, raw, wrap_bits=bits)
            self.total += delta
            self.last_delta = delta
        self.last_raw = raw
        self.history.append((timestamp_ns, self.total))
        # Keep one point at or before the window's start, drop the older ones.
        if self.window_ns > 0:
            start = timestamp_ns - self.window_ns
            while len(self.history) > 2 and self.history[1][0] <= start:
                self.history.popleft()
        else:
            while len(self.history) > 2:
                self.history.popleft()

    def rate(self) -> RatePoint | None:
        """The rate over the window, or ``None`` before two readings."""
        if len(self.history) < 2:
            return None
        t0, v0 = self.history[0]
        t1, v1 = self.history[-1]
        dt = (t1 - t0) / 1e9
        if dt <= 0:
            return None
        increase = max(v1 - v0, 0)
        return RatePoint(increase / dt, increase, dt)
