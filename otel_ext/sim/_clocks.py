"""The simulation's true clocks: host clocks that drift, chip timers that wander and wrap.

Virtual *true* time is integer nanoseconds since the Unix epoch (the run starts at
:data:`EPOCH_NS`). Every host and chip reads its own clock:

* a host clock reads ``t + offset_ns + floor((t - EPOCH_NS) * drift_ppm / 1e6)``;
* a chip timer counts at a nominal 1 GHz with a rate error of tens of ppm that wanders
  (a random walk, constant on segments), and wraps at ``2**32``. On segment ``k``
  (``start_ns[k] <= t < start_ns[k+1]``) the unwrapped count is
  ``ticks[k] + floor((t - start_ns[k]) * (1 + ppm[k] / 1e6))``; the raw value read is that
  modulo ``2**32``.

These formulas, with the parameters written to ``truth.json``, reproduce every raw tick in
the traces (:func:`ticks_from_truth` is the reference implementation).

>>> import random
>>> clock = ChipClock.random("host0/chip0", random.Random(1), run_ns=2_000_000_000)
>>> raw = clock.read(EPOCH_NS + 1_000_000)
>>> raw == ticks_from_truth(clock.to_truth(), EPOCH_NS + 1_000_000)
True
>>> 0 <= raw < 2**32
True
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COUNTER_BITS",
    "EPOCH_NS",
    "TICKS_PER_SECOND",
    "Bracket",
    "ChipClock",
    "HostClock",
    "host_ns_from_truth",
    "ticks_from_truth",
]

#: true time at which every simulated run starts (2024-01-01T00:00:00Z)
EPOCH_NS = 1_704_067_200_000_000_000
#: chip timer width and nominal rate
COUNTER_BITS = 32
TICKS_PER_SECOND = 1e9
_MASK = (1 << COUNTER_BITS) - 1
#: the wander of a chip timer's rate changes every this many ns
_SEGMENT_NS = 250_000_000


@dataclass(frozen=True)
class HostClock:
    """A host's clock (``CLOCK_REALTIME`` as the host's NTP/PTP keeps it): offset and drift.

    Attributes:
        host: the host's name.
        offset_ns: reading minus true time at :data:`EPOCH_NS`.
        drift_ppm: rate error against true time.
    """

    host: str
    offset_ns: int
    drift_ppm: float

    @classmethod
    def random(cls, host: str, rng: random.Random, *, reference: bool = False) -> HostClock:
        """A host clock with an offset of up to a few hundred microseconds and drift of a few ppm.

        The ``reference`` host is close to true time but not exact (it is disciplined too).
        """
        if reference:
            return cls(host, rng.randint(-2_000, 2_000), rng.uniform(-0.2, 0.2))
        sign = rng.choice((-1, 1))
        return cls(host, sign * rng.randint(80_000, 900_000), rng.uniform(-8.0, 8.0))

    def read(self, true_ns: int) -> int:
        """What the host clock reads at ``true_ns``."""
        return true_ns + self.offset_ns + math.floor((true_ns - EPOCH_NS) * self.drift_ppm / 1e6)

    def to_truth(self) -> dict[str, Any]:
        """The parameters, as written to ``truth.json``."""
        return {"offset_ns": self.offset_ns, "drift_ppm": self.drift_ppm}


def host_ns_from_truth(params: Mapping[str, Any], true_ns: int) -> int:
    """A host clock's reading at ``true_ns`` from its ``truth.json`` parameters.

    >>> host_ns_from_truth({"offset_ns": 5, "drift_ppm": 0.0}, EPOCH_NS + 10)
    1704067200000000015
    """
    return (
        true_ns
        + int(params["offset_ns"])
        + math.floor((true_ns - EPOCH_NS) * float(params["drift_ppm"]) / 1e6)
    )


@dataclass(frozen=True)
class Bracket:
    """One clock sample as a sampler takes it: host time before, device ticks, host time after."""

    host_before_ns: int
    device_ticks: int
    host_after_ns: int


class ChipClock:
    """A chip's 32-bit, nominally 1 GHz timer whose rate error wanders on segments.

    Args:
        domain: the clock domain's name (the chip's ``accel.device.id``).
        start_ns: segment start times (true ns), the first at or before :data:`EPOCH_NS`.
        ticks: unwrapped count at each segment start.
        ppm: rate error on each segment.
        rng: draws the wander of segments added later (none: the last rate holds).
    """

    def __init__(
        self,
        domain: str,
        start_ns: list[int],
        ticks: list[int],
        ppm: list[float],
        *,
        rng: random.Random | None = None,
    ):
        self.domain = domain
        self._rng = rng
        self._start = start_ns
        self._ticks = ticks
        self._ppm = ppm
        self._rate = [1.0 + p / 1e6 for p in ppm]

    @classmethod
    def random(cls, domain: str, rng: random.Random, *, run_ns: int) -> ChipClock:
        """A timer with a random start count, a base rate error of up to 40 ppm, and a wander.

        Args:
            domain: the clock domain's name.
            rng: the random source.
            run_ns: how long the segments must cover (more is added on demand).
        """
        base = rng.uniform(-40.0, 40.0)
        start_ticks = rng.randrange(0, 1 << 44)
        clock = cls(domain, [EPOCH_NS], [start_ticks], [base], rng=random.Random(rng.random()))
        clock._extend(EPOCH_NS + run_ns)
        return clock

    def _extend(self, until_ns: int) -> None:
        rng = self._rng
        while self._start[-1] + _SEGMENT_NS <= until_ns:
            last_start, last_ticks, last_ppm = self._start[-1], self._ticks[-1], self._ppm[-1]
            nxt = last_start + _SEGMENT_NS
            self._ticks.append(last_ticks + math.floor(_SEGMENT_NS * self._rate[-1]))
            self._start.append(nxt)
            step = rng.gauss(0.0, 0.6) if rng is not None else 0.0
            ppm = max(-60.0, min(60.0, last_ppm + step))
            self._ppm.append(ppm)
            self._rate.append(1.0 + ppm / 1e6)

    def unwrapped(self, true_ns: int) -> int:
        """The unwrapped count at ``true_ns``."""
        if true_ns >= self._start[-1] + _SEGMENT_NS:
            self._extend(true_ns)
        k = bisect.bisect_right(self._start, true_ns) - 1
        if k < 0:
            k = 0
        return self._ticks[k] + math.floor((true_ns - self._start[k]) * self._rate[k])

    def read(self, true_ns: int) -> int:
        """The raw 32-bit value read at ``true_ns``."""
        return self.unwrapped(true_ns) & _MASK

    def ppm_at(self, true_ns: int) -> float:
        """The true rate error at ``true_ns``."""
        k = max(0, bisect.bisect_right(self._start, true_ns) - 1)
        return self._ppm[k]

    def to_truth(self) -> dict[str, Any]:
        """The parameters, as written to ``truth.json`` (see the module docstring)."""
        return {
            "counter_bits": COUNTER_BITS,
            "ticks_per_second": TICKS_PER_SECOND,
            "segments": {
                "start_ns": list(self._start),
                "ticks": list(self._ticks),
                "ppm": list(self._ppm),
            },
        }


def ticks_from_truth(params: Mapping[str, Any], true_ns: int) -> int:
    """A chip timer's raw reading at ``true_ns`` from its ``truth.json`` parameters.

    The reference implementation of the formula in the module docstring; tests use it to
    check that the truth file reproduces the raw ticks in the traces.
    """
    seg = params["segments"]
    starts = seg["start_ns"]
    k = max(0, bisect.bisect_right(starts, true_ns) - 1)
    rate = 1.0 + float(seg["ppm"][k]) / 1e6
    unwrapped = int(seg["ticks"][k]) + math.floor((true_ns - int(starts[k])) * rate)
    return unwrapped % (1 << int(params["counter_bits"]))
