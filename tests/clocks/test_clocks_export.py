"""Clock brackets and mappings as ``accel.clock.sync`` spans, and offline re-fits from files.

Round trips go through the real OpenTelemetry SDK and the real OTLP/JSON file exporter and
reader; ground truth comes from :mod:`otel_ext.clocks.synthetic`.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_ext.clocks import (
    ClockFitError,
    ClockMapping,
    ClockRegistry,
    ClockSampler,
    ClockSyncSpanEmitter,
    InsufficientSamplesError,
    brackets_from_span_records,
    emit_clock_sync_spans,
    fit_clock,
    mapping_attributes,
    mappings_from_span_records,
    refit_from_spans,
)
from otel_ext.clocks.synthetic import (
    Brackets,
    SyntheticClock,
    alignment_scenario,
    simulate_brackets,
)
from otel_ext.exporters import OtlpJsonFileSpanExporter, read_spans
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_BRACKETS_DROPPED,
    ACCEL_CLOCK_COUNTER_BITS,
    ACCEL_CLOCK_DEVICE_TICKS,
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_HOST_AFTER_NS,
    ACCEL_CLOCK_HOST_BEFORE_NS,
    ACCEL_CLOCK_KNOTS_TICKS,
    ACCEL_CLOCK_REFERENCE,
    ACCEL_CLOCK_TICKS_PER_SECOND,
    ACCEL_DEVICE_ID,
)
from otel_ext.semconv.spans import SPAN_ACCEL_CLOCK_SYNC

EPOCH = 1_718_000_000_000_000_000  # host clock of the brackets: a realistic Unix time in ns
DOMAIN = "host0/chip1"


def _scenario(seed: int = 3) -> tuple[Brackets, SyntheticClock, np.ndarray, np.ndarray]:
    """The issue's 60 s scenario (32-bit counter, wander, outliers), on an epoch host clock."""
    s = alignment_scenario(duration_s=60.0, events=20_000, seed=seed)
    b = Brackets(
        s.brackets.host_before_ns + EPOCH,
        s.brackets.device_ticks,
        s.brackets.host_after_ns + EPOCH,
        s.brackets.true_read_ns,
    )
    return b, s.clock, s.event_true_ns, s.event_ticks


def _provider(exporter: Any, *, batch: bool = False) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    )
    return provider


def _assert_bound_holds(mapping: Any, true_ns: np.ndarray, ticks: np.ndarray) -> float:
    hint = (true_ns + EPOCH + 1_000_000).astype(np.int64)  # a coarse host hint, 1 ms off
    host, bound = mapping.align(ticks, hint)
    err = np.abs(host.astype(np.float64) - (true_ns + EPOCH))
    assert np.all(err <= bound), f"bound violated on {int(np.sum(err > bound))} events"
    return float(np.max(err))


class ReplayReads:
    """A sampler's read path that replays given brackets: host, device, host per burst."""

    def __init__(self, b: Brackets) -> None:
        self.b = b
        self.i = 0
        self.before = True

    def host_clock(self) -> int:
        value = self.b.host_before_ns[self.i] if self.before else self.b.host_after_ns[self.i]
        if not self.before:
            self.i += 1
        self.before = not self.before
        return int(value)

    def reader(self) -> int:
        return int(self.b.device_ticks[self.i])


# -- end to end: synthetic clock -> spans -> OTLP/JSON file -> re-fit ---------------------------
def test_arrays_to_file_refit_equals_online_fit_and_bound_holds(tmp_path: Path) -> None:
    b, _, true_ns, ticks = _scenario()
    online = fit_clock(
        b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=32, domain=DOMAIN
    )
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
    provider = _provider(exporter)
    spans = emit_clock_sync_spans(
        provider.get_tracer("test"),
        b.host_before_ns,
        b.device_ticks,
        b.host_after_ns,
        domain=DOMAIN,
        counter_bits=32,
        ticks_per_second=1e9,
        reference="host0",
        mapping=online,
    )
    provider.shutdown()
    assert spans == 3  # 600 brackets, at most 256 per span

    refit = refit_from_spans(
        read_spans(tmp_path / "traces.jsonl"), source=str(tmp_path / "traces.jsonl")
    )
    assert list(refit) == [DOMAIN]
    assert refit[DOMAIN].to_dict() == online.to_dict()
    max_err = _assert_bound_holds(refit[DOMAIN], true_ns, ticks)
    assert max_err < 1_000.0  # the target: max error <= 1 us

    # the mapping fitted online travels too, as knots: equal within the 1 ns of rounding
    exported = mappings_from_span_records(read_spans(tmp_path))[DOMAIN]
    hint = (true_ns + EPOCH).astype(np.int64)
    h0, b0 = online.align(ticks, hint)
    h1, b1 = exported.align(ticks, hint)
    assert int(np.max(np.abs(h1 - h0))) <= 1
    assert np.all(b1 >= b0) and np.all(b1 <= b0 + 1.0)
    _assert_bound_holds(exported, true_ns, ticks)


def test_sampler_emitter_batch_processor_file_round_trip(tmp_path: Path) -> None:
    b, _, true_ns, ticks = _scenario(seed=11)
    reads = ReplayReads(b)
    sampler = ClockSampler(
        reads.reader,
        domain=DOMAIN,
        counter_bits=32,
        host_clock=reads.host_clock,
        burst=1,
        window_s=3600.0,
    )
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
    provider = _provider(exporter, batch=True)
    emitter = ClockSyncSpanEmitter(
        sampler,
        tracer_provider=provider,
        reference="host0",
        attributes={DOMAIN: {ACCEL_DEVICE_ID: DOMAIN}},
    )
    emitted = 0
    for chunk in np.array_split(np.arange(b.device_ticks.size), 7):  # emit every ~8.6 s
        for _ in chunk:
            assert sampler.sample_burst()
        emitted += emitter.emit()
    provider.shutdown()
    assert (emitter.brackets_emitted, emitter.brackets_dropped, emitter.errors) == (600, 0, 0)
    assert emitted == emitter.spans_emitted == 7

    online = sampler.mapping()
    assert online is not None
    records = [r for r in read_spans(tmp_path) if r.name == SPAN_ACCEL_CLOCK_SYNC]
    assert len(records) == 7
    assert all(r.parent_span_id is None and r.kind == 1 for r in records)
    assert all(r.attributes[ACCEL_DEVICE_ID] == DOMAIN for r in records)
    got = brackets_from_span_records(records)[DOMAIN]
    np.testing.assert_array_equal(got.host_before_ns, b.host_before_ns)
    np.testing.assert_array_equal(got.device_ticks, b.device_ticks)
    np.testing.assert_array_equal(got.host_after_ns, b.host_after_ns)
    refit = refit_from_spans(read_spans([tmp_path / "traces.jsonl"]), source="traces.jsonl")[DOMAIN]
    assert refit.to_dict() == online.to_dict()
    _assert_bound_holds(refit, true_ns, ticks)
    # the newest span's knots are the online mapping of the whole window
    exported = mappings_from_span_records(records)[DOMAIN]
    assert np.allclose(exported.host_range_ns, online.host_range_ns, rtol=0, atol=1)
    assert np.array_equal(exported.knot_ticks, online.knot_ticks)


def test_span_shape_times_and_attributes() -> None:
    exporter = InMemorySpanExporter()
    provider = _provider(exporter)
    before = np.array([EPOCH + 300, EPOCH + 100, EPOCH + 200, EPOCH + 400, EPOCH + 500])
    after = before + np.array([50, 900, 20, 30, 10])  # the second is an interrupted read
    ticks = np.array([3, 1, 2, (1 << 64) - 1, 5], dtype=np.uint64)
    n = emit_clock_sync_spans(
        provider.get_tracer("t"),
        before,
        ticks,
        after,
        domain=DOMAIN,
        counter_bits=64,
        ticks_per_second=2e9,
        reference="host0",
        brackets_dropped=4,
        max_batch=2,
    )
    spans = exporter.get_finished_spans()
    assert n == len(spans) == 3
    assert [s.name for s in spans] == [SPAN_ACCEL_CLOCK_SYNC] * 3
    assert [((s.start_time or 0) - EPOCH, (s.end_time or 0) - EPOCH) for s in spans] == [
        (100, 1000),  # sorted by host_before; ends at the latest host_after of the batch
        (300, 430),
        (500, 510),
    ]
    assert len({s.context.trace_id for s in spans}) == 3 and all(s.parent is None for s in spans)
    common = {
        ACCEL_CLOCK_DOMAIN: DOMAIN,
        ACCEL_CLOCK_REFERENCE: "host0",
        ACCEL_CLOCK_COUNTER_BITS: 64,
        ACCEL_CLOCK_TICKS_PER_SECOND: 2e9,
    }
    assert dict(spans[0].attributes or {}) == {
        **common,
        ACCEL_CLOCK_HOST_BEFORE_NS: (EPOCH + 100, EPOCH + 200),
        ACCEL_CLOCK_DEVICE_TICKS: (1, 2),
        ACCEL_CLOCK_HOST_AFTER_NS: (EPOCH + 1000, EPOCH + 220),
        ACCEL_CLOCK_BRACKETS_DROPPED: 4,
    }
    assert dict(spans[1].attributes or {}) == {
        **common,
        ACCEL_CLOCK_HOST_BEFORE_NS: (EPOCH + 300, EPOCH + 400),
        ACCEL_CLOCK_DEVICE_TICKS: (3, -1),  # 2**64 - 1 as two's complement
        ACCEL_CLOCK_HOST_AFTER_NS: (EPOCH + 350, EPOCH + 430),
    }
    got = brackets_from_span_records(spans)[DOMAIN]
    assert got.device_ticks.tolist() == [1, 2, 3, (1 << 64) - 1, 5]
    assert (got.counter_bits, got.ticks_per_second) == (64, 2e9)


def test_64_bit_ticks_above_2_63_survive_the_json_file(tmp_path: Path) -> None:
    clock = SyntheticClock(offset_ticks=(1 << 64) - 3_000_000_000, skew_ppm=-40.0)
    reads = np.arange(0, 8_000_000_000, 100_000_000) + 1_000_000
    b = simulate_brackets(clock, reads, seed=4)  # the counter wraps past 2**64 at ~3 s
    before, after = b.host_before_ns + EPOCH, b.host_after_ns + EPOCH
    provider = _provider(OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl"))
    emit_clock_sync_spans(
        provider.get_tracer("t"), before, b.device_ticks, after, domain="c", counter_bits=64
    )
    provider.shutdown()
    line = json.loads((tmp_path / "traces.jsonl").read_text().splitlines()[0])
    values = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    ticks_json = next(a for a in values if a["key"] == ACCEL_CLOCK_DEVICE_TICKS)
    assert any(int(v["intValue"]) < 0 for v in ticks_json["value"]["arrayValue"]["values"])
    got = brackets_from_span_records(read_spans(tmp_path))["c"]
    np.testing.assert_array_equal(got.device_ticks, b.device_ticks)
    refit = refit_from_spans(read_spans(tmp_path), source=str(tmp_path))["c"]
    direct = fit_clock(before, b.device_ticks, after, counter_bits=64, domain="c")
    assert refit.to_dict() == direct.to_dict()
    _assert_bound_holds(refit, b.true_read_ns, b.device_ticks)


# -- properties of the offline side -----------------------------------------------------------
_PROVIDER_EXPORTER = InMemorySpanExporter()
_PROVIDER = _provider(_PROVIDER_EXPORTER)

_bracket_rows = st.lists(
    st.tuples(
        st.integers(0, 1 << 62),
        st.integers(0, (1 << 64) - 1),
        st.integers(1, 1 << 20),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_bracket_rows, batch=st.integers(1, 70), seed=st.integers(0, 2**32 - 1))
def test_spans_give_back_the_brackets_whatever_the_batching_order_or_duplicates(
    rows: list[tuple[int, int, int]], batch: int, seed: int
) -> None:
    _PROVIDER_EXPORTER.clear()
    before = np.array([r[0] for r in rows], dtype=np.int64)
    ticks = np.array([r[1] for r in rows], dtype=np.uint64)
    after = before + np.array([r[2] for r in rows], dtype=np.int64)
    emit_clock_sync_spans(
        _PROVIDER.get_tracer("p"), before, ticks, after, domain="d", max_batch=batch
    )
    spans = list(_PROVIDER_EXPORTER.get_finished_spans())
    assert len(spans) == -(-len(rows) // batch)
    got = brackets_from_span_records(spans)["d"]
    expected = sorted(set(zip(before.tolist(), ticks.tolist(), after.tolist(), strict=True)))
    assert (
        list(
            zip(
                got.host_before_ns.tolist(),
                got.device_ticks.tolist(),
                got.host_after_ns.tolist(),
                strict=True,
            )
        )
        == expected
    )
    # record order and records exported twice do not matter
    rng = np.random.default_rng(seed)
    shuffled = [spans[i] for i in rng.permutation(len(spans))] + spans[: len(spans) // 2 + 1]
    again = brackets_from_span_records(shuffled)["d"]
    for a, b in zip(again[:3], got[:3], strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=25, deadline=None)
@given(
    offset=st.integers(0, (1 << 32) - 1),
    skew=st.floats(-80.0, 80.0),
    split=st.integers(1, 5),
)
def test_refit_from_records_is_the_fit_of_the_brackets(
    offset: int, skew: float, split: int
) -> None:
    clock = SyntheticClock(offset_ticks=offset, skew_ppm=skew, wander_ppm=3.0, counter_bits=32)
    b = simulate_brackets(clock, np.arange(40) * 200_000_000.0 + 1e6, seed=offset % 97)
    before, after = b.host_before_ns + EPOCH, b.host_after_ns + EPOCH
    _PROVIDER_EXPORTER.clear()
    tracer = _PROVIDER.get_tracer("p")
    for part in np.array_split(np.arange(40), split):  # several emissions, e.g. several files
        emit_clock_sync_spans(
            tracer, before[part], b.device_ticks[part], after[part], domain="d", counter_bits=32
        )
    got = brackets_from_span_records(_PROVIDER_EXPORTER.get_finished_spans())["d"]
    refit = fit_clock(*got[:3], counter_bits=32, domain="d")
    direct = fit_clock(before, b.device_ticks, after, counter_bits=32, domain="d")
    assert refit.to_dict() == direct.to_dict()


# -- the emitter ------------------------------------------------------------------------------
class Counting:
    """Host and device reads of a simple 25 ppm-fast 64-bit clock, one bracket per burst."""

    def __init__(self) -> None:
        self.now = EPOCH

    def host(self) -> int:
        self.now += 400
        return self.now

    def device(self) -> int:
        self.now += 300
        return (self.now - EPOCH) + (self.now - EPOCH) // 40_000 + 12_345

    def gap(self, ns: int = 50_000_000) -> None:
        self.now += ns


def _n_ticks(span: Any) -> int:
    return len((span.attributes or {})[ACCEL_CLOCK_DEVICE_TICKS])


def _sampler(reads: Counting, domain: str = DOMAIN, window_s: float = 120.0) -> ClockSampler:
    return ClockSampler(
        reads.device, domain=domain, host_clock=reads.host, burst=1, window_s=window_s
    )


def _take(sampler: ClockSampler, reads: Counting, n: int) -> None:
    for _ in range(n):
        assert sampler.sample_burst()
        reads.gap()


def test_emitter_emits_each_bracket_once_and_counts_window_drops() -> None:
    exporter = InMemorySpanExporter()
    reads = Counting()
    sampler = _sampler(reads, window_s=0.2)  # keeps about 4 brackets
    emitter = ClockSyncSpanEmitter(sampler, tracer_provider=_provider(exporter), max_batch=3)
    _take(sampler, reads, 3)
    assert emitter.emit() == 1
    _take(sampler, reads, 10)  # 6 of these leave the window before the next emission
    assert emitter.emit() == 2
    assert emitter.emit() == 0
    spans = exporter.get_finished_spans()
    sizes = [_n_ticks(s) for s in spans]
    assert sizes == [3, 3, 1]
    assert (spans[1].attributes or {})[ACCEL_CLOCK_BRACKETS_DROPPED] == 6
    assert (emitter.brackets_emitted, emitter.brackets_dropped, emitter.spans_emitted) == (7, 6, 3)
    # knots only on the newest span of each emission
    assert [ACCEL_CLOCK_KNOTS_TICKS in (s.attributes or {}) for s in spans] == [True, False, True]
    got = brackets_from_span_records(spans)[DOMAIN]
    assert got.host_before_ns.size == 7 and np.all(np.diff(got.host_before_ns) > 0)


def test_emitter_over_registry_new_samplers_and_fixed_mappings() -> None:
    exporter = InMemorySpanExporter()
    reads = Counting()
    registry = ClockRegistry()
    a = _sampler(reads, "host0/chip0")
    registry.add_sampler(a)
    emitter = ClockSyncSpanEmitter(registry, tracer_provider=_provider(exporter), reference="h0")
    _take(a, reads, 12)
    assert emitter.emit() == 1
    b = _sampler(reads, "host0/chip1")
    registry.add_sampler(b)
    fixed = fit_clock(*a.brackets(), domain="host1")
    registry.set_mapping("host1", fixed)
    _take(b, reads, 12)
    assert emitter.emit() == 2  # chip1's brackets, host1's knots
    assert emitter.emit() == 0  # the fixed mapping is emitted once
    registry.set_mapping("host1", fit_clock(*a.brackets(), domain="host1"))
    assert emitter.emit() == 1  # a new mapping is emitted again
    spans = exporter.get_finished_spans()
    assert [(s.attributes or {})[ACCEL_CLOCK_DOMAIN] for s in spans] == [
        "host0/chip0",
        "host0/chip1",
        "host1",
        "host1",
    ]
    knots_only = spans[2]
    assert ACCEL_CLOCK_DEVICE_TICKS not in (knots_only.attributes or {})
    lo, hi = fixed.host_range_ns
    assert (knots_only.start_time, knots_only.end_time) == (lo, hi)
    assert sorted(brackets_from_span_records(spans)) == ["host0/chip0", "host0/chip1"]
    rebuilt = mappings_from_span_records(spans)
    assert sorted(rebuilt) == ["host0/chip0", "host0/chip1", "host1"]
    probe = a.brackets()[1][3:9]
    assert np.all(np.abs(rebuilt["host1"].to_host_ns(probe) - fixed.to_host_ns(probe)) <= 1)


def test_emitter_background_thread_and_concurrent_emits_lose_and_repeat_nothing() -> None:
    exporter = InMemorySpanExporter()
    reads = Counting()
    sampler = _sampler(reads)
    emitter = ClockSyncSpanEmitter(
        sampler, tracer_provider=_provider(exporter), interval_s=0.001, include_mapping=False
    )
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def feed_and_emit() -> None:
        barrier.wait()
        for _ in range(50):
            with lock:  # the read path is one shared virtual clock
                _take(sampler, reads, 1)
            emitter.emit()

    with emitter:
        threads = [threading.Thread(target=feed_and_emit) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # stop() emitted what was left
    got = brackets_from_span_records(exporter.get_finished_spans())[DOMAIN]
    assert got.host_before_ns.size == 200 == emitter.brackets_emitted
    total = sum(_n_ticks(s) for s in exporter.get_finished_spans())
    assert total == 200  # nothing emitted twice


class BrokenTracerProvider(TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        class Broken:
            def start_span(self, *a: Any, **k: Any) -> Any:
                raise RuntimeError("exporter pipeline is down")

        return Broken()


def test_emitter_never_raises_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    reads = Counting()
    sampler = _sampler(reads)
    emitter = ClockSyncSpanEmitter(sampler, tracer_provider=BrokenTracerProvider())
    with caplog.at_level(logging.WARNING, logger="otel_ext.clocks.runtime._export"):
        for _ in range(3):
            _take(sampler, reads, 2)
            assert emitter.emit() == 0
    assert emitter.errors == 3 and emitter.spans_emitted == 0
    assert len([r for r in caplog.records if "logged once" in r.getMessage()]) == 1


# -- errors -----------------------------------------------------------------------------------
def _record(**attrs: Any) -> Any:
    base = {
        ACCEL_CLOCK_DOMAIN: "d",
        ACCEL_CLOCK_COUNTER_BITS: 32,
        ACCEL_CLOCK_TICKS_PER_SECOND: 1e9,
        ACCEL_CLOCK_HOST_BEFORE_NS: (1, 5),
        ACCEL_CLOCK_DEVICE_TICKS: (10, 14),
        ACCEL_CLOCK_HOST_AFTER_NS: (3, 7),
    }
    base.update(attrs)

    class Rec:
        name = SPAN_ACCEL_CLOCK_SYNC
        span_id = "00f067aa0ba902b7"
        attributes: ClassVar[dict[str, Any]] = {k: v for k, v in base.items() if v is not None}

    return Rec()


@pytest.mark.parametrize(
    ("attrs", "problem"),
    [
        ({ACCEL_CLOCK_DOMAIN: None}, "without accel.clock.domain"),
        ({ACCEL_CLOCK_COUNTER_BITS: None}, "needs accel.clock.counter_bits"),
        ({ACCEL_CLOCK_HOST_AFTER_NS: (3,)}, "different lengths: 2, 2, 1"),
        ({ACCEL_CLOCK_DEVICE_TICKS: (10.0, 14.0)}, "must be an array of ints"),
        ({ACCEL_CLOCK_COUNTER_BITS: 0}, "bad counter shape"),
    ],
)
def test_malformed_sync_spans_name_the_span_and_problem(
    attrs: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ClockFitError, match=problem) as info:
        brackets_from_span_records([_record(**attrs)])
    assert "span 00f067aa0ba902b7" in str(info.value)


def test_one_domain_with_two_counter_shapes_is_an_error() -> None:
    with pytest.raises(ClockFitError, match=r"counter shape 48 bits .* differs from 32 bits"):
        brackets_from_span_records([_record(), _record(**{ACCEL_CLOCK_COUNTER_BITS: 48})])


def test_refit_names_the_file_and_domain_and_can_skip_unfittable(tmp_path: Path) -> None:
    reads = Counting()
    good = _sampler(reads, "good")
    _take(good, reads, 20)
    provider = _provider(OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl"))
    tracer = provider.get_tracer("t")
    emit_clock_sync_spans(tracer, *good.brackets(), domain="good")
    emit_clock_sync_spans(tracer, [EPOCH], [5], [EPOCH + 900], domain="lonely")
    provider.shutdown()
    path = tmp_path / "traces.jsonl"
    with pytest.raises(InsufficientSamplesError) as info:
        refit_from_spans(read_spans(path), source=str(path))
    assert str(path) in str(info.value) and "domain lonely" in str(info.value)
    assert list(refit_from_spans(read_spans(path), source=str(path), strict=False)) == ["good"]
    with pytest.raises(ClockFitError, match="may not set counter_bits"):
        refit_from_spans(read_spans(path), source=str(path), fit_options={"counter_bits": 32})
    relaxed = refit_from_spans(
        read_spans(path),
        source=str(path),
        strict=False,
        fit_options={"target_model_error_ns": 20.0},
    )
    assert (
        relaxed["good"].to_dict()
        == fit_clock(*good.brackets(), domain="good", target_model_error_ns=20.0).to_dict()
    )


def test_emit_rejects_mismatched_arrays() -> None:
    tracer = _PROVIDER.get_tracer("t")
    with pytest.raises(ClockFitError, match="one length"):
        emit_clock_sync_spans(tracer, [1, 2], [3], [4, 5], domain="d")
    with pytest.raises(ClockFitError, match="NaN"):
        emit_clock_sync_spans(tracer, [1.0, float("nan")], [3, 4], [4, 5], domain="d")
    with pytest.raises(ClockFitError, match="max_batch"):
        emit_clock_sync_spans(tracer, [1], [3], [4], domain="d", max_batch=0)


def test_mapping_attributes_round_trip_keeps_a_bound_that_holds() -> None:
    b, _, true_ns, ticks = _scenario(seed=5)
    m = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=32)
    attrs = {
        **mapping_attributes(m),
        ACCEL_CLOCK_COUNTER_BITS: 32,
        ACCEL_CLOCK_TICKS_PER_SECOND: 1e9,
        ACCEL_CLOCK_DOMAIN: "x",
    }

    class Rec:
        name = SPAN_ACCEL_CLOCK_SYNC
        attributes = attrs
        end_ns = 0

    rebuilt = mappings_from_span_records([Rec()])["x"]
    assert isinstance(rebuilt, ClockMapping)
    assert rebuilt.knot_ticks.size == m.knot_ticks.size
    _assert_bound_holds(rebuilt, true_ns, ticks)
