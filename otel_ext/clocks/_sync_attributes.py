"""The knots of a fitted clock mapping as ``accel.clock.sync`` span attributes, and back.

A fitted :class:`~otel_ext.clocks.ClockMapping` travels with the clock brackets it was fitted
from (:mod:`otel_ext.clocks.runtime` emits them): :func:`mapping_attributes` turns its knots
into homogeneous attribute arrays (``accel.clock.knot_tick_ref``, ``accel.clock.knots_ticks``,
``accel.clock.knots_host_ns``, ``accel.clock.knots_bound_ns``, ``accel.clock.knots_curvature``,
``accel.clock.quality``, ``accel.clock.uncertainty_ns``); :func:`mapping_from_attributes`
rebuilds the mapping from a span's attributes (offline re-fits, :mod:`otel_ext.clocks._offline`).
Pure conversion: no span is created here.

Device ticks of ``2**63`` and above are written as two's complement (OpenTelemetry ints are
signed 64-bit, :func:`signed_ticks`); readers take them back modulo ``2**64``. Knot host times
are rounded to integer ns and the knot bounds widened by the 0.5 ns this can cost, so a
mapping rebuilt from the attributes still has a bound that holds.

>>> signed_ticks(np.array([1, 2**64 - 1], dtype=np.uint64))
[1, -1]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray
from opentelemetry.util.types import AttributeValue

from otel_ext.clocks._errors import ClockFitError
from otel_ext.clocks._mapping import ClockMapping
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_COUNTER_BITS,
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_KNOT_TICK_REF,
    ACCEL_CLOCK_KNOTS_BOUND_NS,
    ACCEL_CLOCK_KNOTS_CURVATURE,
    ACCEL_CLOCK_KNOTS_HOST_NS,
    ACCEL_CLOCK_KNOTS_TICKS,
    ACCEL_CLOCK_QUALITY,
    ACCEL_CLOCK_TICKS_PER_SECOND,
    ACCEL_CLOCK_UNCERTAINTY_NS,
)

__all__ = ["mapping_attributes", "mapping_from_attributes", "signed_ticks"]


def signed_ticks(ticks: NDArray[np.uint64]) -> list[int]:
    """Raw counter values as OpenTelemetry ints (two's complement above ``2**63``)."""
    return [int(v) for v in np.ascontiguousarray(ticks, dtype=np.uint64).view(np.int64)]


def mapping_attributes(mapping: ClockMapping) -> dict[str, AttributeValue]:
    """The knot attributes of ``accel.clock.sync`` for a fitted mapping.

    Includes ``accel.clock.uncertainty_ns``: the bound at the newest knot (the value of the
    ``accel.clock.bound`` gauge).

    >>> m = ClockMapping(knot_ticks=[0, 10**9], knot_host_ns=[0.0, 1e9 + 0.25],
    ...     knot_bound_ns=[80.0, 90.0], segment_curvature=[0.0], tick_raw_ref=7, host_ref_ns=10**12)
    >>> a = mapping_attributes(m)
    >>> a["accel.clock.knots_host_ns"], a["accel.clock.knots_bound_ns"], a["accel.clock.uncertainty_ns"]
    ((1000000000000, 1001000000000), (80.5, 90.5), 91.0)
    """
    d = mapping.to_dict()
    kx = [int(v) for v in d["knot_ticks"]]
    bits = int(d["counter_bits"])
    host_ref = int(d["host_ref_ns"])
    tick_ref = (int(d["tick_raw_ref"]) + kx[0]) % (1 << bits)
    bounds = [float(b) + 0.5 for b in d["knot_bound_ns"]]  # + rounding of the knot times
    return {
        ACCEL_CLOCK_KNOT_TICK_REF: signed_ticks(np.array([tick_ref], dtype=np.uint64))[0],
        ACCEL_CLOCK_KNOTS_TICKS: tuple(v - kx[0] for v in kx),
        ACCEL_CLOCK_KNOTS_HOST_NS: tuple(host_ref + round(float(v)) for v in d["knot_host_ns"]),
        ACCEL_CLOCK_KNOTS_BOUND_NS: tuple(bounds),
        ACCEL_CLOCK_KNOTS_CURVATURE: tuple(float(c) for c in d["segment_curvature"]),
        ACCEL_CLOCK_QUALITY: str(d["quality"]),
        ACCEL_CLOCK_UNCERTAINTY_NS: float(d["knot_bound_ns"][-1]) + 0.5 * mapping.tick_ns + 0.5,
    }


def mapping_from_attributes(
    attributes: Mapping[str, Any],
    *,
    domain: str | None = None,
    counter_bits: int | None = None,
    ticks_per_second: float | None = None,
) -> ClockMapping | None:
    """Rebuild the mapping an ``accel.clock.sync`` span carries (``None`` if it has none).

    Args:
        attributes: the span's attributes (SDK span or :class:`otel_ext.exporters.SpanRecord`).
        domain: the domain name (default: the span's ``accel.clock.domain``).
        counter_bits: counter width (default: the span's ``accel.clock.counter_bits``).
        ticks_per_second: tick rate (default: the span's ``accel.clock.ticks_per_second``).

    Raises:
        ClockFitError: the knot attributes are malformed or incomplete.

    >>> m = ClockMapping(knot_ticks=[0, 10**9], knot_host_ns=[0.0, 1e9],
    ...     knot_bound_ns=[80.0, 90.0], segment_curvature=[0.0], tick_raw_ref=7, host_ref_ns=10**12)
    >>> r = mapping_from_attributes(mapping_attributes(m), counter_bits=64, ticks_per_second=1e9)
    >>> int(r.to_host_ns(7 + 500)[()]) == int(m.to_host_ns(7 + 500)[()])
    True
    """
    if ACCEL_CLOCK_KNOTS_TICKS not in attributes:
        return None
    name = domain if domain is not None else attributes.get(ACCEL_CLOCK_DOMAIN)
    try:
        bits = int(
            counter_bits if counter_bits is not None else attributes[ACCEL_CLOCK_COUNTER_BITS]
        )
        rate = float(
            ticks_per_second
            if ticks_per_second is not None
            else attributes[ACCEL_CLOCK_TICKS_PER_SECOND]
        )
        kx = [int(v) for v in attributes[ACCEL_CLOCK_KNOTS_TICKS]]
        host = [int(v) for v in attributes[ACCEL_CLOCK_KNOTS_HOST_NS]]
        bound = [float(v) for v in attributes[ACCEL_CLOCK_KNOTS_BOUND_NS]]
        curvature = [float(v) for v in attributes[ACCEL_CLOCK_KNOTS_CURVATURE]]
        tick_ref = int(attributes[ACCEL_CLOCK_KNOT_TICK_REF])
    except (KeyError, TypeError, ValueError) as exc:
        raise ClockFitError(
            f"incomplete or malformed mapping knots: {exc!r}",
            record=f"domain {name}" if name else None,
        ) from exc
    if not host:
        raise ClockFitError("mapping without knots", record=f"domain {name}" if name else None)
    quality = str(attributes.get(ACCEL_CLOCK_QUALITY, "good"))
    return ClockMapping(
        knot_ticks=kx,
        knot_host_ns=[float(h - host[0]) for h in host],
        knot_bound_ns=bound,
        segment_curvature=curvature,
        tick_raw_ref=tick_ref % (1 << 64),
        host_ref_ns=host[0],
        counter_bits=bits,
        ticks_per_second=rate,
        quality=quality,
        issues=("rebuilt from exported knots",) if quality != "good" else (),
        domain=None if name is None else str(name),
    )
