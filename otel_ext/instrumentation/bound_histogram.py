"""A histogram bound to one attribute set: ``record(value, context)`` with the lookups made once.

The OpenTelemetry API has no bound instruments: every ``Histogram.record(value, attributes,
context=...)`` of the SDK copies the attributes, hashes them (a recursive walk and a sort) to
find the attribute set's aggregation, and goes through the meter's consumer and each reader's
storage: about a third of the 9–10 µs a record costs on this project's VM. The collective
drain records one value per collective with one of a few attribute sets, under the GIL of
the workload's process. :class:`BoundHistogram` keeps the SDK's own measurement (the same
``Measurement`` with its cleaned attributes and time, the same exemplar filter decision) and
hands it to the aggregation the SDK would find, found by the key the SDK computes, once.

It does that only where the result is the same, and otherwise calls ``record``:

* the SDK is a version these tests ran against
  (:data:`~otel_ext.instrumentation.sdk_versions.CHECKED_SDK`: the short cut reads
  the SDK's private parts, and a later SDK may change what they mean while keeping their
  names), and the histogram is the SDK's, with the parts this relies on (checked at
  construction: the measurement consumer, its readers' storages, the exemplar filter, the
  SDK's attribute hash, ``Measurement`` a dataclass of the five fields it has in SDK 1.45);
  else every call goes to ``record``;
* per call, for each reader's view of the instrument: a view that filters attribute keys,
  one that resets its aggregations on collection (delta temporality, where the SDK holds its
  lock while aggregating), or an attribute set without its aggregation yet (the first value,
  the cardinality limit's overflow) goes through that view's own ``consume_measurement``;
* a value that is not finite or is negative, and a disabled instrument, go to ``record``
  (which warns or ignores, as it does).

``tests/instrumentation/test_bound_histogram.py`` records the same values both ways over cumulative and delta
readers, views with attribute keys and a cardinality limit, and compares every point.

>>> from opentelemetry.sdk.metrics import MeterProvider
>>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
>>> reader = InMemoryMetricReader()
>>> histogram = MeterProvider(metric_readers=[reader]).get_meter("doc").create_histogram("d")
>>> bound = BoundHistogram(histogram, {"op": "all_reduce"})
>>> bound.bound
True
>>> for v in (0.5, 1.5, 2.5):
...     bound.record(v)
>>> point = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0]
>>> (dict(point.attributes), point.count, point.sum)
({'op': 'all_reduce'}, 3, 4.5)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from time import time_ns
from typing import Any

from opentelemetry.context import Context, get_current

from otel_ext.instrumentation.sdk_versions import sdk_checked

__all__ = ["BoundHistogram"]

_new = object.__new__


_MEASUREMENT_FIELDS = ["value", "time_unix_nano", "instrument", "context", "attributes"]


def _sdk_parts(histogram: Any) -> tuple[Any, Any, Any, Any] | None:
    """(measurement class, consumer, exemplar filter, attribute hash) or ``None``."""
    if not sdk_checked():
        return None
    try:
        from opentelemetry.sdk.metrics._internal import _view_instrument_match as vim
        from opentelemetry.sdk.metrics._internal.instrument import _Histogram
        from opentelemetry.sdk.metrics._internal.measurement import Measurement
    except ImportError:
        return None
    if type(histogram) is not _Histogram:
        return None
    consumer = getattr(histogram, "_measurement_consumer", None)
    config = getattr(consumer, "_sdk_config", None)
    exemplar_filter = getattr(config, "exemplar_filter", None)
    hash_attributes = getattr(vim, "_hash_attributes", None)
    if (
        exemplar_filter is None
        or hash_attributes is None
        or not isinstance(getattr(consumer, "_reader_storages", None), Mapping)
        or not hasattr(histogram, "_is_enabled")
        or not dataclasses.is_dataclass(Measurement)
        or [f.name for f in dataclasses.fields(Measurement)] != _MEASUREMENT_FIELDS
        or "__slots__" in vars(Measurement)
    ):
        return None
    return Measurement, consumer, exemplar_filter, hash_attributes


def _plain(match: Any) -> bool:
    """Whether a view's match aggregates a measurement's attributes as they are, in
    aggregations it keeps (no attribute-key filter, no reset on collection): fixed when the
    match is made, so looked at once per match."""
    return (
        getattr(match, "_reset_on_collect", True) is False
        and getattr(getattr(match, "_view", None), "_attribute_keys", 0) is None
        and isinstance(getattr(match, "_attributes_aggregation", None), dict)
    )


class BoundHistogram:
    """``histogram.record(value, attributes, context=context)`` for one ``attributes``.

    Args:
        histogram: any OpenTelemetry histogram (the short cut only for the SDK's).
        attributes: the attribute set every value is recorded with (not modified; kept).
    """

    def __init__(self, histogram: Any, attributes: Mapping[str, Any]) -> None:
        self.histogram = histogram
        self.attributes = attributes
        parts = _sdk_parts(histogram)
        self._parts = parts
        self._key: Any = None
        self._cleaned: Any = None
        self._plain: dict[Any, bool] = {}  # per view match: see _plain
        if parts is not None:
            measurement = parts[0](0.0, 0, histogram, Context(), attributes)
            self._cleaned = measurement.attributes  # what the SDK keeps, cleaned once
            self._key = parts[3](dict(measurement.attributes or {}))

    @property
    def bound(self) -> bool:
        """Whether the SDK short cut is used (see the module doc)."""
        return self._parts is not None

    def record(self, value: float, context: Context | None = None) -> None:
        """Record ``value`` as ``histogram.record`` would, in ``context`` (exemplars)."""
        parts = self._parts
        histogram = self.histogram
        if parts is None or not math.isfinite(value) or value < 0 or not histogram._is_enabled():
            histogram.record(value, self.attributes, context=context)
            return
        measurement_class, consumer, exemplar_filter, _ = parts
        # the SDK's Measurement with the attributes it would clean from ``attributes``,
        # cleaned once (a frozen dataclass: its fields set as its __init__ would)
        measurement = _new(measurement_class)
        now, context = time_ns(), context or get_current()
        fields = measurement.__dict__
        fields["value"] = value
        fields["time_unix_nano"] = now
        fields["instrument"] = histogram
        fields["context"] = context
        fields["attributes"] = cleaned = self._cleaned
        sample = exemplar_filter.should_sample(value, now, cleaned, context)
        key, plain = self._key, self._plain
        for storage in consumer._reader_storages.values():
            matches = getattr(storage, "_instrument_view_instrument_matches", None)
            matches = None if matches is None else matches.get(histogram)
            if matches is None:  # not seen the instrument yet, or an SDK that keeps it elsewhere
                storage.consume_measurement(measurement, sample)
                continue
            for match in matches:
                is_plain = plain.get(match)
                if is_plain is None:
                    is_plain = plain[match] = _plain(match)
                aggregation = match._attributes_aggregation.get(key) if is_plain else None
                if aggregation is None:
                    match.consume_measurement(measurement, sample)
                else:
                    aggregation.aggregate(measurement, sample)
