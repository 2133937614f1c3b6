"""Host-to-host alignment from four-timestamp ping-pong exchanges (PTP/NTP style).

Host A (the reference) sends at ``t1`` (A's clock); host B receives at ``t2`` and replies
at ``t3`` (B's clock); A receives the reply at ``t4`` (A's clock). B's read ``t2`` happened
after ``t1`` and at least ``t3 - t2`` before ``t4``, so each exchange is a bracket on A's
clock for B's "counter" (its nanoseconds):
``(host_before=t1, ticks=t2, host_after=t4 - (t3 - t2))``. Fitting those brackets with
:func:`otel_ext.clocks.fit_clock` gives a drift-aware mapping B → A whose bound holds
whatever the path asymmetry, instead of the classic midpoint estimate that assumes symmetric
paths.

>>> import numpy as np
>>> t1 = np.array([0, 1_000_000_000, 2_000_000_000])
>>> t2 = t1 + 5_000 + 20_000          # B is 5 µs ahead, 20 µs one-way delay
>>> t3 = t2 + 1_000
>>> t4 = t3 - 5_000 + 20_000
>>> offset, delay = pingpong_offset(t1, t2, t3, t4)
>>> offset.tolist(), delay.tolist()
([5000.0, 5000.0, 5000.0], [40000, 40000, 40000])
>>> m = align_hosts(t1, t2, t3, t4)
>>> int(m.to_host_ns(t2[1])[()]) - int(t1[1]), bool(m.bound_ns(t2[1])[()] <= 20_010)
(20001, True)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from otel_ext.clocks._errors import ClockFitError
from otel_ext.clocks._fit import fit_clock
from otel_ext.clocks._mapping import ClockMapping

__all__ = ["align_hosts", "pingpong_brackets", "pingpong_offset"]


def _arrays(*values: ArrayLike) -> list[NDArray[np.int64]]:
    out = [np.asarray(v) for v in values]
    if any(a.ndim != 1 for a in out) or len({a.size for a in out}) != 1:
        raise ClockFitError("t1, t2, t3, t4 must be 1-D arrays of one length")
    for a in out:
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise ClockFitError("ping-pong timestamps contain NaN or infinity")
    return [np.rint(a).astype(np.int64) if a.dtype.kind == "f" else a.astype(np.int64) for a in out]


def pingpong_offset(
    t1: ArrayLike, t2: ArrayLike, t3: ArrayLike, t4: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The classic NTP estimate per exchange: ``(offset of B minus A, round-trip delay)``.

    ``offset = ((t2 - t1) + (t3 - t4)) / 2`` is exact only for symmetric paths; its error is
    at most ``delay / 2``.
    """
    a1, a2, a3, a4 = _arrays(t1, t2, t3, t4)
    return ((a2 - a1) + (a3 - a4)) / 2.0, (a4 - a1) - (a3 - a2)


def pingpong_brackets(
    t1: ArrayLike,
    t2: ArrayLike,
    t3: ArrayLike,
    t4: ArrayLike,
    *,
    max_rate_error_ppm: float = 1000.0,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Exchanges as brackets ``(host_before, ticks, host_after)`` for :func:`fit_clock`.

    B's turnaround ``t3 - t2`` is measured on B's clock; ``max_rate_error_ppm`` of it is
    added to the bracket so a rate difference cannot push the truth outside.
    """
    a1, a2, a3, a4 = _arrays(t1, t2, t3, t4)
    turn = a3 - a2
    if np.any(turn < 0):
        raise ClockFitError("t3 < t2 in an exchange", record=f"exchange {int(np.argmax(turn < 0))}")
    slack = np.ceil(turn * max_rate_error_ppm * 1e-6).astype(np.int64)
    return a1, a2, a4 - turn + slack


def align_hosts(
    t1: ArrayLike,
    t2: ArrayLike,
    t3: ArrayLike,
    t4: ArrayLike,
    *,
    domain: str | None = None,
    min_samples: int = 8,
) -> ClockMapping:
    """Fit host B's clock (ns) to host A's from ping-pong exchanges.

    Args:
        t1: A's send times (A's clock, ns).
        t2: B's receive times (B's clock).
        t3: B's reply times (B's clock).
        t4: A's receive times (A's clock).
        domain: B's clock-domain name.
        min_samples: fewer exchanges give ``quality="low"``.

    Returns:
        A :class:`ClockMapping` taking B's ns (as "ticks", 64-bit, 1e9 per second) to A's ns,
        with a bound that holds for any path asymmetry.

    Raises:
        ClockFitError: malformed timestamps; see :func:`fit_clock`.
    """
    before, ticks, after = pingpong_brackets(t1, t2, t3, t4)
    return fit_clock(
        before,
        ticks.astype(np.uint64),
        after,
        counter_bits=64,
        ticks_per_second=1e9,
        domain=domain,
        min_samples=min_samples,
    )
