"""Counter bridge core: rates, derived metrics, staleness, guards, exposition text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as om_latest

from otel_ext.counters import (
    BaseSource,
    BuiltinSimModel,
    CounterBridge,
    CounterCollector,
    CounterTracker,
    HistogramValue,
    Sample,
    SimulatedSource,
    counter_delta,
)
from otel_ext.exporters._prometheus_mapping import (
    map_unit,
    prometheus_name,
    sanitize_label,
    sanitize_name,
)
from otel_ext.semconv.attributes import ACCEL_DEVICE_ID, ACCEL_DEVICE_MODEL, ACCEL_HOST_ID
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_COLLECTIVE_DURATION,
    METRIC_ACCEL_DEVICE_CYCLES_ACTIVE,
    METRIC_ACCEL_DEVICE_CYCLES_ELAPSED,
    METRIC_ACCEL_DEVICE_UTILIZATION,
    METRIC_HW_POWER,
)


def ticking(start: int = 10**18, step: int = 10**9):
    t = [start - step]

    def clock() -> int:
        t[0] += step
        return t[0]

    return clock


class ListSource(BaseSource):
    """Returns the next prepared round on each sample (raises if the round is an exception)."""

    def __init__(self, rounds, name="fixed"):
        self.name = name
        self.rounds = list(rounds)

    def sample(self):
        r = self.rounds.pop(0) if len(self.rounds) > 1 else self.rounds[0]
        if isinstance(r, Exception):
            raise r
        return r


# ---- rates ------------------------------------------------------------------------------
@given(st.lists(st.integers(0, 2**20), min_size=2, max_size=50), st.integers(8, 24))
@settings(max_examples=200, deadline=None)
def test_wrapping_counter_unfolds_to_true_total(increments, bits):
    """A counter that wraps at 2**bits, read at least once per wrap, unfolds exactly."""
    span = 2**bits
    increments = [i % (span - 1) for i in increments]
    tracker = CounterTracker(wrap_bits=bits)
    true_total = 0
    for n, inc in enumerate(increments):
        true_total += inc
        tracker.update(true_total % span, n * 10**9)
    assert tracker.total == increments[0] % span + sum(increments[1:])
    r = tracker.rate()
    assert r is not None and r.rate >= 0


@given(st.lists(st.floats(-1e12, 1e12, allow_nan=False), min_size=2, max_size=40))
def test_rate_never_negative_whatever_the_readings(values):
    tracker = CounterTracker()
    for n, v in enumerate(values):
        tracker.update(v, n * 10**9)
        r = tracker.rate()
        assert r is None or r.rate >= 0
        assert tracker.last_delta >= 0


def test_reset_counts_from_zero_and_rate_stays_right():
    t = CounterTracker()
    t.update(1000, 0)
    t.update(1500, 10**9)
    t.update(200, 2 * 10**9)  # device reset: 200 since the reset
    assert (t.total, t.resets, t.rate().rate) == (1700, 1, 200.0)


def test_counter_delta_cases():
    assert counter_delta(10, 30) == 20
    assert counter_delta(2**32 - 10, 5, wrap_bits=32) == 15
    assert counter_delta(500, 20) == 20
    assert counter_delta(5, 3, wrap_bits=2) == 3  # out of range for 2 bits: a reset


def test_windowed_rate_spans_the_window():
    t = CounterTracker(window_ns=3 * 10**9)
    for n in range(10):
        t.update(n * 100.0 + (50 if n >= 8 else 0), n * 10**9)
    r = t.rate()
    assert r.window_s == 3.0 and r.increase == pytest.approx(350.0)


# ---- derived ----------------------------------------------------------------------------
def test_derived_metrics_match_ground_truth_of_constant_sim():
    model = BuiltinSimModel(chips=4, varying=False)
    bridge = CounterBridge([SimulatedSource(model, clock=ticking(step=700_000_000))])
    bridge.open()
    for _ in range(8):  # 32-bit cycle counters wrap every ~2.9 s at 1.5 GHz
        bridge.sample_once()
    fams = bridge.families()
    checked = 0
    for metric, fam in fams.items():
        for s in fam:
            dev = s.attributes.get(ACCEL_DEVICE_ID)
            if s.source != "derived" or dev is None:
                continue
            expected = model.expected(str(dev)).get(metric)
            if expected is not None:
                assert s.value == pytest.approx(expected, rel=1e-9), (metric, dev)
                checked += 1
    # every device-level derived metric of every chip, and (link series carry the chip they
    # leave) the two link metrics of each chip's link in both directions
    assert checked == 4 * 9 + 4 * 2 * 2
    link = [s for s in fams["accel.link.bandwidth.utilization"]]
    assert len(link) == 8
    for s in link:
        i = int(str(s.attributes["accel.link.id"]).split("chip")[1].rstrip("-"))
        assert s.value == pytest.approx(
            model.expected(f"host0/chip{i}")["accel.link.bandwidth.utilization"]
        )


def test_derived_point_carries_provenance():
    bridge = CounterBridge(
        [SimulatedSource(BuiltinSimModel(chips=1, varying=False), clock=ticking())]
    )
    bridge.open()
    bridge.sample_once()
    bridge.sample_once()
    (mbu,) = bridge.families()["accel.device.mbu"]
    p = mbu.provenance
    assert p.formula == "(rate(rd) + rate(wr)) / spec.memory_bandwidth"
    assert [i[:2] for i in p.inputs] == [
        ("rd", "accel.memory.io.read"),
        ("wr", "accel.memory.io.written"),
    ]
    assert p.window_s == 1.0 and p.device_model == "sim-accel-v1"


def test_tokens_per_joule_fans_out_over_token_type():
    model = BuiltinSimModel(chips=2, varying=False)
    bridge = CounterBridge([SimulatedSource(model, clock=ticking())])
    bridge.open()
    bridge.sample_once()
    bridge.sample_once()
    got = {
        s.attributes["gen_ai.token.type"]: s.value
        for s in bridge.families()["accel.inference.tokens_per_joule"]
    }
    joules_per_s = model.rates(0)["power"] + model.rates(1)["power"]
    assert got == {
        "output": pytest.approx(2000 / joules_per_s),
        "input": pytest.approx(8000 / joules_per_s),
    }


def test_unknown_device_model_skips_spec_formulas_only():
    attrs = {ACCEL_DEVICE_ID: "h/x", ACCEL_HOST_ID: "h", ACCEL_DEVICE_MODEL: "no-such-chip"}
    rounds = [
        [
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ELAPSED, attrs, 0, 0),
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, attrs, 0, 0),
            Sample(METRIC_HW_POWER, attrs, 100.0, 0),
        ],
        [
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ELAPSED, attrs, 1000, 10**9),
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, attrs, 250, 10**9),
            Sample(METRIC_HW_POWER, attrs, 100.0, 10**9),
        ],
    ]
    bridge = CounterBridge([ListSource(rounds)])
    bridge.open()
    bridge.sample_once()
    bridge.sample_once()
    fams = bridge.families()
    assert fams[METRIC_ACCEL_DEVICE_UTILIZATION][0].value == 0.25
    assert "accel.device.power.ratio" not in fams


# ---- failures, staleness, guard ---------------------------------------------------------
def test_source_that_raises_is_counted_and_others_go_on():
    good = SimulatedSource(BuiltinSimModel(chips=1), clock=ticking())
    bad = ListSource([RuntimeError("boom")], name="broken")
    now = ticking()
    bridge = CounterBridge([good, bad], stale_after_s=5, clock=now)
    bridge.open()
    bridge.sample_once()
    bridge.sample_once()
    h = bridge.health()
    assert h["ok"] and h["sources"]["broken"] == {"up": False, "errors": 2, "series": 0}
    fams = bridge.families()
    up = {s.attributes["accel.source"]: s.value for s in fams["accel.counters.source.up"]}
    errors = {s.attributes["accel.source"]: s.value for s in fams["accel.counters.source.errors"]}
    assert up == {"sim": 1.0, "broken": 0.0} and errors == {"sim": 0.0, "broken": 2.0}


def test_failing_source_series_expire_after_stale_after():
    attrs = {ACCEL_DEVICE_ID: "h/c", ACCEL_HOST_ID: "h"}
    src = ListSource([[Sample(METRIC_HW_POWER, attrs, 1.0, 0)], OSError("gone"), OSError("gone")])
    bridge = CounterBridge([src], stale_after_s=1.5, clock=ticking())
    bridge.open()
    bridge.sample_once()
    bridge.sample_once()  # 1 s later: kept
    assert METRIC_HW_POWER in bridge.families()
    bridge.sample_once()  # 2 s later: stale, dropped
    assert METRIC_HW_POWER not in bridge.families()


def test_vanished_device_series_disappear_at_once():
    a = {ACCEL_DEVICE_ID: "h/c0", ACCEL_HOST_ID: "h"}
    b = {ACCEL_DEVICE_ID: "h/c1", ACCEL_HOST_ID: "h"}
    src = ListSource(
        [
            [Sample(METRIC_HW_POWER, a, 1.0, 0), Sample(METRIC_HW_POWER, b, 2.0, 0)],
            [Sample(METRIC_HW_POWER, a, 1.5, 1)],
        ]
    )
    bridge = CounterBridge([src])
    bridge.open()
    bridge.sample_once()
    assert len(bridge.families()[METRIC_HW_POWER]) == 2
    bridge.sample_once()
    assert [s.attributes[ACCEL_DEVICE_ID] for s in bridge.families()[METRIC_HW_POWER]] == ["h/c0"]


def test_cardinality_guard_drops_and_counts():
    samples = [Sample(METRIC_HW_POWER, {ACCEL_DEVICE_ID: f"h/c{i}"}, 1.0, 0) for i in range(7)]
    bridge = CounterBridge([ListSource([samples])], max_series_per_metric=5)
    bridge.open()
    bridge.sample_once()
    bridge.sample_once()
    fams = bridge.families()
    assert len(fams[METRIC_HW_POWER]) == 5
    (dropped,) = fams["accel.counters.series.dropped"]
    assert (
        dict(dropped.attributes) == {"accel.counters.metric": METRIC_HW_POWER}
        and dropped.value == 2.0
    )


# ---- names and exposition ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "unit", "instrument", "family", "sample"),
    [
        ("hw.power", "W", "gauge", "hw_power_watts", "hw_power_watts"),
        ("hw.energy", "J", "counter", "hw_energy_joules", "hw_energy_joules_total"),
        ("hw.temperature", "Cel", "gauge", "hw_temperature_celsius", "hw_temperature_celsius"),
        (
            "accel.device.clock.frequency",
            "Hz",
            "gauge",
            "accel_device_clock_frequency_hertz",
            "accel_device_clock_frequency_hertz",
        ),
        (
            "accel.collective.time",
            "s",
            "counter",
            "accel_collective_time_seconds",
            "accel_collective_time_seconds_total",
        ),
        (
            "accel.device.cycles.elapsed",
            "{cycle}",
            "counter",
            "accel_device_cycles_elapsed",
            "accel_device_cycles_elapsed_total",
        ),
        (
            "accel.memory.bandwidth",
            "By/s",
            "gauge",
            "accel_memory_bandwidth_bytes_per_second",
            "accel_memory_bandwidth_bytes_per_second",
        ),
        ("accel.device.mfu", "1", "gauge", "accel_device_mfu_ratio", "accel_device_mfu_ratio"),
        (
            "hw.gpu.memory.usage",
            "By",
            "updowncounter",
            "hw_gpu_memory_usage_bytes",
            "hw_gpu_memory_usage_bytes",
        ),
        (
            "accel.collective.duration",
            "s",
            "histogram",
            "accel_collective_duration_seconds",
            "accel_collective_duration_seconds",
        ),
        ("x.bytes", "By", "gauge", "x_bytes", "x_bytes"),
    ],
)
def test_prometheus_name_mapping(name, unit, instrument, family, sample):
    pn = prometheus_name(name, unit, instrument)
    assert (pn.family, pn.sample) == (family, sample)


def test_mapping_helpers():
    assert sanitize_name("a.b-c__d") == "a_b_c_d"
    assert sanitize_label("0dev.id") == "_dev_id"
    assert map_unit("{token}/J") == "per_joules" and map_unit("KiBy") == "kibibytes"
    assert map_unit("{request}") == ""


def _tiny_bridge():
    dev = {ACCEL_DEVICE_ID: 'h0/c"0', ACCEL_HOST_ID: "h0"}
    rounds = [
        [
            Sample(METRIC_HW_POWER, dev, 300.0, 0),
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, dev, 10.0, 0),
            Sample(
                METRIC_ACCEL_COLLECTIVE_DURATION,
                dev,
                HistogramValue((0.01, 0.1), (1, 0, 0), 0.005),
                0,
            ),
        ],
        [
            Sample(METRIC_HW_POWER, dev, 310.5, 10**9),
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, dev, 25.0, 10**9),
            Sample(
                METRIC_ACCEL_COLLECTIVE_DURATION,
                dev,
                HistogramValue((0.01, 0.1), (1, 2, 0), 0.105, 0.05),
                10**9,
            ),
        ],
    ]
    bridge = CounterBridge(
        [ListSource(rounds)], derive=False, clock=lambda: 1_700_000_000_000_000_000
    )
    bridge.open()
    ctx = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, False, TraceFlags(1))
    bridge.sample_once()
    bridge.active_spans.set_active('h0/c"0', ctx)
    bridge.sample_once()
    return bridge


GOLDEN_OM = """\
# HELP accel_collective_duration_seconds Duration of one member's part in a collective.
# TYPE accel_collective_duration_seconds histogram
# UNIT accel_collective_duration_seconds seconds
accel_collective_duration_seconds_bucket{accel_device_id="h0/c\\"0",accel_host_id="h0",le="0.01"} 1.0
accel_collective_duration_seconds_bucket{accel_device_id="h0/c\\"0",accel_host_id="h0",le="0.1"} 3.0 # {span_id="00f067aa0ba902b7",trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.05 1700000000.0
accel_collective_duration_seconds_bucket{accel_device_id="h0/c\\"0",accel_host_id="h0",le="+Inf"} 3.0
accel_collective_duration_seconds_count{accel_device_id="h0/c\\"0",accel_host_id="h0"} 3.0
accel_collective_duration_seconds_sum{accel_device_id="h0/c\\"0",accel_host_id="h0"} 0.105
# HELP accel_counters_source_errors Samples of a counter source that failed (the source raised or lost a device).
# TYPE accel_counters_source_errors counter
accel_counters_source_errors_total{accel_source="fixed"} 0.0
# HELP accel_counters_source_up_ratio 1 when the counter source's last sample succeeded, 0 when it failed.
# TYPE accel_counters_source_up_ratio gauge
# UNIT accel_counters_source_up_ratio ratio
accel_counters_source_up_ratio{accel_source="fixed"} 1.0
# HELP accel_device_cycles_active Cycles during which at least one compute unit had work.
# TYPE accel_device_cycles_active counter
accel_device_cycles_active_total{accel_device_id="h0/c\\"0",accel_host_id="h0"} 25.0 # {span_id="00f067aa0ba902b7",trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 15.0 1700000000.0
# HELP hw_power_watts Instantaneous power drawn by the component (OpenTelemetry `hw.*`).
# TYPE hw_power_watts gauge
# UNIT hw_power_watts watts
hw_power_watts{accel_device_id="h0/c\\"0",accel_host_id="h0"} 310.5
# EOF
"""


def test_golden_openmetrics_text():
    assert CounterCollector(_tiny_bridge()).render(openmetrics=True).decode() == GOLDEN_OM


def test_golden_text_format_has_no_exemplars():
    text = CounterCollector(_tiny_bridge()).render(openmetrics=False).decode()
    assert "# TYPE accel_device_cycles_active_total counter\n" in text
    assert (
        'accel_device_cycles_active_total{accel_device_id="h0/c\\"0",accel_host_id="h0"} 25.0\n'
        in text
    )
    assert "trace_id" not in text and "# EOF" not in text and "# UNIT" not in text


@pytest.mark.parametrize("om", [False, True])
def test_fast_render_equals_prometheus_client_encoders(om):
    bridge = CounterBridge([SimulatedSource(BuiltinSimModel(chips=3), clock=ticking())])
    bridge.open()
    bridge.active_spans.set_active("host0/chip2", SpanContext(7, 9, False, TraceFlags(1)))
    for _ in range(3):
        bridge.sample_once()
    collector = CounterCollector(bridge)
    registry = CollectorRegistry()
    registry.register(collector)
    expected = om_latest(registry) if om else generate_latest(registry)
    assert collector.render(openmetrics=om) == expected
    assert b"trace_id" in expected if om else b"trace_id" not in expected
