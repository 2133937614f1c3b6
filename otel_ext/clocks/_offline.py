"""Offline re-fits: clock brackets back from ``accel.clock.sync`` spans, and fits over them.

The analysis side of :mod:`otel_ext.clocks._export`:

* :func:`brackets_from_span_records` gathers the brackets of every clock domain from span
  records (:class:`otel_ext.exporters.SpanRecord` from :func:`otel_ext.exporters.read_spans`, or SDK
  ``ReadableSpan`` objects): merged across spans and files, duplicates (a span exported
  twice) removed, sorted by host time;
* :func:`mappings_from_span_records` rebuilds the mapping that was fitted online (the knots
  of each domain's newest span);
* :func:`refit_from_spans` fits every domain with :func:`~otel_ext.clocks.fit_clock` over
  all its brackets.

The clocks package does no I/O: the caller reads the spans, e.g.
``refit_from_spans(read_spans(paths), source=...)`` with
:func:`otel_ext.exporters.read_spans` for OTLP/JSON trace files.

Nothing here is on a hot path: malformed records raise
:class:`~otel_ext.clocks.ClockFitError` (an :class:`~otel_ext.errors.InputError`) naming
the span and the problem, and the ``source`` (the files) the caller names.

>>> from types import SimpleNamespace as Rec
>>> rec = Rec(name="accel.clock.sync", span_id="ab", attributes={
...     "accel.clock.domain": "host0/chip0", "accel.clock.counter_bits": 32,
...     "accel.clock.ticks_per_second": 1e9, "accel.clock.host_before_ns": (100, 300),
...     "accel.clock.device_ticks": (5_000, 5_200), "accel.clock.host_after_ns": (140, 330)})
>>> b = brackets_from_span_records([rec, rec])["host0/chip0"]
>>> b.host_before_ns.tolist(), b.device_ticks.tolist(), b.counter_bits
([100, 300], [5000, 5200], 32)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from otel_ext._arrays import distinct_rows
from otel_ext.clocks._errors import ClockFitError
from otel_ext.clocks._fit import fit_clock
from otel_ext.clocks._mapping import ClockMapping
from otel_ext.clocks._sync_attributes import mapping_from_attributes
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_COUNTER_BITS,
    ACCEL_CLOCK_DEVICE_TICKS,
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_HOST_AFTER_NS,
    ACCEL_CLOCK_HOST_BEFORE_NS,
    ACCEL_CLOCK_TICKS_PER_SECOND,
)
from otel_ext.semconv.spans import SPAN_ACCEL_CLOCK_SYNC

__all__ = [
    "ClockBrackets",
    "brackets_from_span_records",
    "mappings_from_span_records",
    "refit_from_spans",
]


class ClockBrackets(NamedTuple):
    """The brackets of one clock domain, sorted by host time, with its counter's shape."""

    host_before_ns: NDArray[np.int64]
    device_ticks: NDArray[np.uint64]
    host_after_ns: NDArray[np.int64]
    counter_bits: int
    ticks_per_second: float


def _span_name(record: Any) -> str:
    span_id = getattr(record, "span_id", None)
    if span_id is None:
        context = getattr(record, "context", None)
        span_id = getattr(context, "span_id", None)
    if isinstance(span_id, int):
        span_id = f"{span_id:016x}"
    return f"span {span_id}" if span_id else "span (no id)"


def _ints(attrs: Mapping[str, Any], key: str, where: str) -> list[int]:
    value = attrs.get(key)
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ClockFitError(f"{key} must be an array of ints, got {value!r:.60}", record=where)
    return list(value)


def brackets_from_span_records(records: Iterable[Any]) -> dict[str, ClockBrackets]:
    """The brackets of every clock domain in ``accel.clock.sync`` span records.

    Other spans are ignored; so are sync spans without brackets (knots only).

    Args:
        records: objects with ``name`` and ``attributes`` (``SpanRecord``, ``ReadableSpan``).

    Returns:
        Per domain (sorted by name): :class:`ClockBrackets` ``(host_before_ns, device_ticks,
        host_after_ns, counter_bits, ticks_per_second)``, duplicates removed, sorted by
        ``host_before_ns`` (then ticks, then ``host_after_ns``); device ticks as ``uint64`` (two's complement undone).

    Raises:
        ClockFitError: a sync span without a domain or counter shape, arrays that are not
            int arrays of one length, or one domain with two counter shapes.
    """
    rows: dict[str, list[NDArray[np.int64]]] = {}
    shape: dict[str, tuple[int, float, str]] = {}
    for record in records:
        if getattr(record, "name", None) != SPAN_ACCEL_CLOCK_SYNC:
            continue
        attrs: Mapping[str, Any] = getattr(record, "attributes", None) or {}
        if ACCEL_CLOCK_HOST_BEFORE_NS not in attrs and ACCEL_CLOCK_DEVICE_TICKS not in attrs:
            continue
        where = _span_name(record)
        domain = attrs.get(ACCEL_CLOCK_DOMAIN)
        if not isinstance(domain, str) or not domain:
            raise ClockFitError(f"clock sync span without {ACCEL_CLOCK_DOMAIN}", record=where)
        where = f"{where} (domain {domain})"
        try:
            bits = int(attrs[ACCEL_CLOCK_COUNTER_BITS])
            rate = float(attrs[ACCEL_CLOCK_TICKS_PER_SECOND])
        except (KeyError, TypeError, ValueError) as exc:
            raise ClockFitError(
                f"clock sync span needs {ACCEL_CLOCK_COUNTER_BITS} and "
                f"{ACCEL_CLOCK_TICKS_PER_SECOND}: {exc!r}",
                record=where,
            ) from exc
        if not 1 <= bits <= 64 or not rate > 0:
            raise ClockFitError(f"bad counter shape {bits} bits at {rate} ticks/s", record=where)
        before = _ints(attrs, ACCEL_CLOCK_HOST_BEFORE_NS, where)
        ticks = _ints(attrs, ACCEL_CLOCK_DEVICE_TICKS, where)
        after = _ints(attrs, ACCEL_CLOCK_HOST_AFTER_NS, where)
        if not len(before) == len(ticks) == len(after):
            raise ClockFitError(
                f"bracket arrays of different lengths: {len(before)}, {len(ticks)}, {len(after)}",
                record=where,
            )
        first = shape.setdefault(domain, (bits, rate, where))
        if first[:2] != (bits, rate):
            raise ClockFitError(
                f"counter shape {bits} bits at {rate:g} ticks/s differs from {first[0]} bits "
                f"at {first[1]:g} ticks/s in {first[2]}",
                record=where,
            )
        try:
            block = np.empty((len(before), 3), dtype=np.int64)
            block[:, 0] = before
            block[:, 1] = [t - (1 << 64) if t >= 1 << 63 else t for t in ticks]
            block[:, 2] = after
        except OverflowError as exc:
            raise ClockFitError(f"bracket value out of 64-bit range: {exc}", record=where) from exc
        rows.setdefault(domain, []).append(block)
    out: dict[str, ClockBrackets] = {}
    for domain in sorted(rows):
        table = distinct_rows(np.concatenate(rows[domain]))
        hb = np.ascontiguousarray(table[:, 0])
        dt = np.ascontiguousarray(table[:, 1]).view(np.uint64)
        ha = np.ascontiguousarray(table[:, 2])
        order = np.lexsort((ha, dt, hb))  # by host time, then unsigned ticks
        bits, rate, _ = shape[domain]
        out[domain] = ClockBrackets(hb[order], dt[order], ha[order], bits, rate)
    return out


def mappings_from_span_records(records: Iterable[Any]) -> dict[str, ClockMapping]:
    """The mapping fitted online, per domain: the knots of its newest sync span (by end time).

    Raises:
        ClockFitError: malformed knot attributes (names the span).
    """
    newest: dict[str, tuple[int, ClockMapping]] = {}
    for record in records:
        if getattr(record, "name", None) != SPAN_ACCEL_CLOCK_SYNC:
            continue
        attrs: Mapping[str, Any] = getattr(record, "attributes", None) or {}
        domain = attrs.get(ACCEL_CLOCK_DOMAIN)
        if not isinstance(domain, str):
            continue
        end = getattr(record, "end_ns", None)
        if end is None:
            end = getattr(record, "end_time", None) or 0
        try:
            mapping = mapping_from_attributes(attrs, domain=domain)
        except ClockFitError as exc:
            raise ClockFitError(exc.message, record=_span_name(record)) from exc
        if mapping is not None and (domain not in newest or int(end) >= newest[domain][0]):
            newest[domain] = (int(end), mapping)
    return {d: newest[d][1] for d in sorted(newest)}


def refit_from_spans(
    records: Iterable[Any],
    *,
    fit_options: Mapping[str, Any] | None = None,
    strict: bool = True,
    source: str = "",
) -> dict[str, ClockMapping]:
    """Re-fit every clock domain from ``accel.clock.sync`` span records.

    Args:
        records: span records (as :func:`otel_ext.exporters.read_spans` gives them for
            OTLP/JSON trace files, or SDK ``ReadableSpan`` objects); other spans are skipped.
        fit_options: keyword options for :func:`~otel_ext.clocks.fit_clock` (the counter
            shape and domain come from the spans).
        strict: raise when a domain cannot be fitted; with ``False`` it is left out.
        source: where the records came from (the files), named in every error.

    Returns:
        Per domain (sorted by name), the mapping fitted over all its brackets.

    Raises:
        InputError: malformed sync spans (names the source and the span).
        ClockFitError: a domain that cannot be fitted (with ``strict``), naming it.
    """
    where = source or None

    options = dict(fit_options or {})
    clash = sorted({"counter_bits", "ticks_per_second", "domain"} & set(options))
    if clash:
        raise ClockFitError(f"fit_options may not set {', '.join(clash)}: the spans give them")
    try:
        found = brackets_from_span_records(records)
    except ClockFitError as exc:
        raise ClockFitError(exc.message, path=where, record=exc.record) from exc
    out: dict[str, ClockMapping] = {}
    for domain, b in found.items():
        try:
            out[domain] = fit_clock(
                b.host_before_ns,
                b.device_ticks,
                b.host_after_ns,
                counter_bits=b.counter_bits,
                ticks_per_second=b.ticks_per_second,
                domain=domain,
                **options,
            )
        except ClockFitError as exc:
            if strict:
                raise type(exc)(exc.message, path=where, record=f"domain {domain}") from exc
    return out
