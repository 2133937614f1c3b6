"""The simulation's true clocks: the truth-file formulas reproduce every reading."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.sim import EPOCH_NS, host_ns_from_truth, ticks_from_truth
from otel_ext.sim._clocks import ChipClock, HostClock

RUN_NS = 12_000_000_000


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32),
    st.lists(st.integers(-(10**9), RUN_NS + 3 * 10**9), min_size=1, max_size=20),
)
def test_truth_parameters_reproduce_chip_ticks_after_a_json_round_trip(
    seed: int, offsets: list[int]
) -> None:
    clock = ChipClock.random("host0/chip0", random.Random(seed), run_ns=RUN_NS)
    reads = [(EPOCH_NS + dt, clock.read(EPOCH_NS + dt)) for dt in offsets]
    truth = json.loads(json.dumps(clock.to_truth()))
    for t, raw in reads:
        assert ticks_from_truth(truth, t) == raw
        assert 0 <= raw < 2**32


@given(st.integers(0, 2**32))
def test_chip_timer_wanders_within_tens_of_ppm_and_wraps(seed: int) -> None:
    clock = ChipClock.random("c", random.Random(seed), run_ns=RUN_NS)
    ppm = clock.to_truth()["segments"]["ppm"]
    assert all(abs(p) <= 60 for p in ppm)
    assert len(set(ppm)) > 1  # it wanders
    # the unwrapped count advances at 1 GHz within the rate error; the raw value wraps
    a, b = clock.unwrapped(EPOCH_NS), clock.unwrapped(EPOCH_NS + 10_000_000_000)
    assert abs((b - a) - 10_000_000_000) <= 10_000_000_000 * 61e-6
    assert (b - a) > 2**32  # at least two wraps over 10 s


@given(st.integers(0, 2**32), st.integers(-(10**9), 10**11))
def test_host_clock_truth_reproduces_readings(seed: int, dt: int) -> None:
    clock = HostClock.random("host1", random.Random(seed))
    assert host_ns_from_truth(
        json.loads(json.dumps(clock.to_truth())), EPOCH_NS + dt
    ) == clock.read(EPOCH_NS + dt)
    assert abs(clock.read(EPOCH_NS) - EPOCH_NS) < 1_000_000
