"""``BoundHistogram.record`` gives the points ``Histogram.record`` gives, or is not bound.

The same values (finite, zero, negative, infinite, NaN), attribute sets and exemplar contexts
are recorded both ways, with collections in between, into two meter providers built the same
way: cumulative and delta readers, two readers at once, a view that keeps only some attribute
keys, a view with other buckets, and a cardinality limit that the attribute sets overflow.
Every point (attributes, count, sum, min, max, buckets, exemplars' values, ids and filtered
attributes) must be equal; only the times differ.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_ext.instrumentation.bound_histogram import BoundHistogram
from otel_ext.instrumentation.sdk_versions import sdk_checked

ATTRS = [
    {"op": "all_reduce", "group": "default_pg", "device": "h/cpu"},
    {"op": "broadcast", "group": "default_pg"},
    {"op": "send", "group": "tp", "device": "h/cuda:1", "n": 3},
    {},
]


def _provider(setup: str) -> tuple[MeterProvider, list[InMemoryMetricReader]]:
    delta = {Histogram: AggregationTemporality.DELTA}
    readers = [InMemoryMetricReader(preferred_temporality=delta if setup == "delta" else None)]
    views: list[View] = []
    if setup == "two readers":
        readers.append(InMemoryMetricReader(preferred_temporality=delta))
    elif setup == "attribute keys":
        views.append(View(instrument_name="d", attribute_keys={"op"}))
    elif setup == "buckets":
        views.append(
            View(instrument_name="d", aggregation=ExplicitBucketHistogramAggregation([0.1, 1.0]))
        )
    elif setup == "cardinality":
        readers = [InMemoryMetricReader(cardinality_limits={Histogram: 2})]
    return MeterProvider(metric_readers=readers, views=views), readers


def _points(readers: list[InMemoryMetricReader]) -> list[Any]:
    out = []
    for reader in readers:
        data = reader.get_metrics_data()
        rows = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.data.data_points:
                        row = {k: v for k, v in vars(p).items() if "time" not in k}
                        row["attributes"] = dict(p.attributes)
                        row["exemplars"] = [
                            (e.value, e.span_id, e.trace_id, dict(e.filtered_attributes or {}))
                            for e in p.exemplars
                        ]
                        rows.append((metric.name, row))
        rows.sort(key=lambda r: (r[0], sorted(r[1]["attributes"].items())))
        out.append(rows)
    return out


SETUPS = ["cumulative", "delta", "two readers", "attribute keys", "buckets", "cardinality"]
_value = st.one_of(
    st.floats(min_value=0, max_value=1e3, allow_nan=False),
    st.sampled_from([0.0, -1.0, float("inf"), float("nan"), 1e-9]),
)
_step = st.one_of(
    st.tuples(st.just("record"), st.integers(0, len(ATTRS) - 1), _value, st.integers(0, 3)),
    st.just(("collect",)),
)


def _contexts() -> list[Any]:
    out: list[Any] = [None]
    for i, sampled in ((1, True), (2, False), (3, True)):
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        span = NonRecordingSpan(SpanContext(i * 1000, i * 7, is_remote=False, trace_flags=flags))
        out.append(trace.set_span_in_context(span))
    return out


@settings(max_examples=80, deadline=None)
@given(
    setup=st.sampled_from(SETUPS),
    steps=st.lists(_step, max_size=40),
)
def test_bound_records_what_record_records(setup: str, steps: list[Any]) -> None:
    contexts = _contexts()
    public_mp, public_readers = _provider(setup)
    bound_mp, bound_readers = _provider(setup)
    public = public_mp.get_meter("m").create_histogram("d", unit="s")
    histogram = bound_mp.get_meter("m").create_histogram("d", unit="s")
    bound = [BoundHistogram(histogram, attrs) for attrs in ATTRS]
    assert all(b.bound is sdk_checked() for b in bound)
    for step in steps:
        if step[0] == "collect":
            assert _points(bound_readers) == _points(public_readers)
            continue
        _, which, value, ctx = step
        public.record(value, ATTRS[which], context=contexts[ctx])
        bound[which].record(value, contexts[ctx])
    assert _points(bound_readers) == _points(public_readers)
    public_mp.shutdown()
    bound_mp.shutdown()


def test_a_histogram_not_of_the_sdk_is_recorded_through_its_api() -> None:
    histogram = NoOpMeterProvider().get_meter("m").create_histogram("d")
    bound = BoundHistogram(histogram, {"op": "x"})
    assert not bound.bound
    bound.record(1.0)  # the no-op's record: nothing to see, nothing raised


def test_an_sdk_version_not_checked_is_recorded_through_its_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The short cut reads the SDK's private parts: only on versions the tests passed on."""
    from otel_ext.instrumentation import bound_histogram

    reader = InMemoryMetricReader()
    histogram = MeterProvider(metric_readers=[reader]).get_meter("m").create_histogram("d")
    assert BoundHistogram(histogram, {"op": "x"}).bound is sdk_checked()
    monkeypatch.setattr(bound_histogram, "sdk_checked", lambda: False)
    bound = BoundHistogram(histogram, {"op": "x"})
    assert not bound.bound
    bound.record(2.0)
    point = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0]
    assert point.data.data_points[0].count == 1


@pytest.mark.skipif(not sdk_checked(), reason="the short cut is off on an SDK not checked")
def test_the_first_value_creates_the_attribute_sets_aggregation() -> None:
    reader = InMemoryMetricReader()
    histogram = MeterProvider(metric_readers=[reader]).get_meter("m").create_histogram("d")
    bound = BoundHistogram(histogram, {"op": "x"})
    bound.record(2.0)  # no aggregation for the set yet: the view's own path makes it
    storage = next(iter(histogram._measurement_consumer._reader_storages.values()))
    (match,) = storage._instrument_view_instrument_matches[histogram]
    seen = []
    match.consume_measurement = lambda m, sample=True: seen.append(m)  # type: ignore[method-assign]
    bound.record(3.0)  # then the short cut: straight to the aggregation
    assert seen == []
    data = reader.get_metrics_data()
    assert data is not None
    (point,) = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert (dict(point.attributes), point.count, point.sum, point.min, point.max) == (
        {"op": "x"},
        2,
        5.0,
        2.0,
        3.0,
    )
