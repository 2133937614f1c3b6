"""The one interface every counter source implements, and the sample it yields.

A source reads base signals (hardware, host or link counters) and returns them as
:class:`Sample` objects: a registry metric name, its attributes, the value, the timestamp in
nanoseconds and the clock domain that timestamp belongs to. A new chip generation adds a
source (and a row in the registry's device-spec table), nothing else.

>>> from otel_ext.semconv.metrics import METRIC_HW_POWER
>>> s = Sample(METRIC_HW_POWER, {"accel.device.id": "host0/gpu0"}, 312.5, 1_000, CLOCK_HOST_REALTIME)
>>> s.key()
('hw.power', (('accel.device.id', 'host0/gpu0'),))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "CLOCK_HOST_MONOTONIC",
    "CLOCK_HOST_REALTIME",
    "AttributeValue",
    "BaseSource",
    "CounterSource",
    "HistogramValue",
    "Sample",
    "SeriesDescription",
    "SeriesKey",
]

#: Timestamps taken with ``time.time_ns()`` on the sampling host.
CLOCK_HOST_REALTIME = "host.realtime"
#: Timestamps taken with ``time.monotonic_ns()`` on the sampling host.
CLOCK_HOST_MONOTONIC = "host.monotonic"

AttributeValue = str | int | float | bool
SeriesKey = tuple[str, tuple[tuple[str, AttributeValue], ...]]


@dataclass(frozen=True, slots=True)
class HistogramValue:
    """A cumulative explicit-bucket histogram read from a source.

    Attributes:
        bounds: the buckets' upper bounds, ascending (the ``+Inf`` bucket is implied).
        counts: per-bucket (not cumulative) counts, ``len(bounds) + 1`` of them.
        sum: the sum of all observations.
        last_observation: the most recent observation, if the source knows it; the bridge
            attaches the active span's exemplar to the bucket it fell in.

    >>> h = HistogramValue((0.1, 1.0), (2, 1, 0), 0.9)
    >>> h.count, h.cumulative()
    (3, [2, 3, 3])
    """

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float
    last_observation: float | None = None

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[int]:
        out, acc = [], 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out

    def bucket_of(self, value: float) -> int:
        """Index of the bucket ``value`` falls in (``le`` semantics).

        >>> HistogramValue((0.1, 1.0), (0, 0, 0), 0.0).bucket_of(0.5)
        1
        """
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                return i
        return len(self.bounds)


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one series.

    Attributes:
        metric: the registry metric name (a ``otel_ext.semconv.metrics`` constant).
        attributes: the series' attributes (registry attribute names as keys).
        value: a number, or a :class:`HistogramValue` for histogram metrics.
        timestamp_ns: when the value was read, in ``clock_domain``'s nanoseconds.
        clock_domain: the clock the timestamp belongs to (``host.realtime``, a chip's
            domain...).
        wrap_bits: for a counter that wraps around, its width in bits (the value runs from 0
            to ``2**wrap_bits - 1``); ``None`` for counters that only reset.
    """

    metric: str
    attributes: Mapping[str, AttributeValue]
    value: float | HistogramValue
    timestamp_ns: int
    clock_domain: str = CLOCK_HOST_REALTIME
    wrap_bits: int | None = None

    def key(self) -> SeriesKey:
        """The series identity: the metric name and its sorted attributes."""
        return (self.metric, tuple(sorted(self.attributes.items())))


@dataclass(frozen=True)
class SeriesDescription:
    """A series family a source offers: a metric and the attribute keys it sets.

    >>> SeriesDescription("hw.power", ("accel.device.id",)).metric
    'hw.power'
    """

    metric: str
    attributes: tuple[str, ...] = ()
    note: str = ""


@runtime_checkable
class CounterSource(Protocol):
    """What the bridge needs from a source.

    ``open()`` does the I/O of starting (loading a driver, checking a folder) and raises
    :class:`~otel_ext.errors.SourceUnavailableError` with a one-line message when the source
    cannot work here. ``sample()`` runs on the sampling thread; it may raise (the bridge
    counts the failure, marks the source down and keeps going), but should rather drop what
    it cannot read (a lost device) and return the rest.
    """

    name: str

    def open(self) -> None: ...

    def describe(self) -> list[SeriesDescription]: ...

    def sample(self) -> list[Sample]: ...

    def close(self) -> None: ...


class BaseSource:
    """Convenience base: a ``name`` and no-op ``open``/``close``.

    Subclasses implement :meth:`describe` and :meth:`sample`.
    """

    name = "source"

    def open(self) -> None:
        """Start the source (no-op by default)."""

    def close(self) -> None:
        """Release the source (no-op by default)."""

    def describe(self) -> list[SeriesDescription]:
        """The series this source offers (none by default)."""
        return []

    def sample(self) -> list[Sample]:  # pragma: no cover - abstract
        raise NotImplementedError
