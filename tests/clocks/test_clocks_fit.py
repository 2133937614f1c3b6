"""fit_clock and ClockMapping against simulated clocks with known truth."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_ext.clocks import (
    AmbiguousTicksError,
    ClockFitError,
    ClockMapping,
    InsufficientSamplesError,
    compose,
    fit_clock,
)
from otel_ext.clocks.synthetic import (
    DelayModel,
    SyntheticClock,
    alignment_scenario,
    simulate_brackets,
    simulate_events,
)


def _fit(s, **kw):
    b = s.brackets
    return fit_clock(
        b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=s.clock.counter_bits, **kw
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_issue_scenario_bound_holds_and_error_small(seed: int) -> None:
    s = alignment_scenario(seed=seed, events=20_000)
    m = _fit(s)
    hint = np.rint(
        s.event_true_ns + np.random.default_rng(seed).uniform(-4e8, 4e8, s.event_true_ns.size)
    )
    host, bound = m.align(s.event_ticks, hint.astype(np.int64))
    err = np.abs(host - s.event_true_ns)
    assert np.all(err <= bound)
    assert err.max() <= 1_000.0
    assert np.median(bound) < 5_000.0
    assert m.quality == "good" and m.issues == ()


def test_outliers_do_not_pull_the_fit() -> None:
    clean = alignment_scenario(seed=5, events=5_000, delays=DelayModel(outlier_fraction=0.0))
    dirty = alignment_scenario(seed=5, events=5_000, delays=DelayModel(outlier_fraction=0.2))
    for s in (clean, dirty):
        m = _fit(s)
        host, bound = m.align(s.event_ticks, s.event_true_ns.astype(np.int64))
        err = np.abs(host - s.event_true_ns)
        assert np.all(err <= bound)
        assert err.max() < 1_500.0


def test_knot_spacing_adapts_to_drift_change() -> None:
    steady = alignment_scenario(seed=3, events=10, wander_ppm=0.0)
    wandering = alignment_scenario(seed=3, events=10, wander_ppm=20.0, wander_period_s=30.0)
    assert _fit(wandering).knot_ticks.size > 2 * _fit(steady).knot_ticks.size


def test_64_bit_counter_near_its_top_and_48_bit_wrap() -> None:
    for bits, offset in ((64, (1 << 64) - 3_000_000_000), (48, (1 << 48) - 2_000_000_000)):
        clock = SyntheticClock(offset_ticks=offset, skew_ppm=-35.0, counter_bits=bits)
        reads = np.arange(0.0, 10e9, 1e8)
        b = simulate_brackets(clock, reads, seed=2)
        m = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=bits)
        true_ns, ticks = simulate_events(clock, 1000, 0.0, 10e9, seed=4)
        host, bound = m.align(ticks, true_ns.astype(np.int64))
        assert np.all(np.abs(host - true_ns) <= bound)


def test_wrapped_ticks_need_a_hint_when_ambiguous() -> None:
    s = alignment_scenario(seed=0, events=10)
    m = _fit(s)
    with pytest.raises(AmbiguousTicksError, match="near_host_ns"):
        m.to_host_ns(s.event_ticks)


def test_short_fit_without_hint_unwraps_to_the_fitted_range() -> None:
    s = alignment_scenario(seed=0, duration_s=1.0, events=100)
    m = _fit(s)
    host = m.to_host_ns(s.event_ticks)
    assert np.all(np.abs(host - s.event_true_ns) <= m.bound_ns(s.event_ticks))


def test_to_ticks_inverts_to_host_ns() -> None:
    s = alignment_scenario(seed=1, duration_s=5.0, events=100)
    m = _fit(s)
    host = m.to_host_ns(s.event_ticks, s.event_true_ns.astype(np.int64))
    back = m.to_ticks(host).astype(np.int64) - s.event_ticks.astype(np.int64)
    assert np.all(np.abs(back) <= 2)


def test_extrapolation_bound_grows_and_holds() -> None:
    clock = SyntheticClock(offset_ticks=10, skew_ppm=15.0, wander_ppm=3.0, wander_period_s=100.0)
    b = simulate_brackets(clock, np.arange(0.0, 5e9, 1e8), seed=1)
    m = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns)
    true_ns = np.array([6e9, 8e9, 1.2e10])
    ticks = clock.ticks_at(true_ns)
    host, bound = m.align(ticks)
    assert np.all(np.abs(host - true_ns) <= bound)
    assert np.all(np.diff(bound) > 0)
    assert not m.covers(ticks).any()


def test_degrades_explicitly() -> None:
    t = np.arange(0, 2_000_000_000, 100_000_000)
    with pytest.raises(ClockFitError, match="NaN"):
        fit_clock(np.where(t == t[3], np.nan, t), t, t + 1000.0)
    with pytest.raises(InsufficientSamplesError):
        fit_clock(t[:1], t[:1], t[:1] + 100)
    with pytest.raises(InsufficientSamplesError):
        fit_clock(t, t, t)  # every bracket has zero width
    with pytest.raises(ClockFitError, match="one length"):
        fit_clock(t, t[:-1], t + 10)
    few = fit_clock(t[:4] - 500, t[:4], t[:4] + 500)
    assert few.quality == "low" and "only 4" in few.issues[0]
    zero = t + 1000
    zero[5] = t[5] - 2000  # non-monotonic host reads in one bracket
    m = fit_clock(t - 1000, t, zero)
    assert (
        m.quality == "low"
        and m.samples_rejected == 1
        and "host_after <= host_before" in m.issues[0]
    )
    back = t.copy()
    back[7] = back[6] - 50_000  # device ticks ran backwards
    m = fit_clock(t - 1000, back, t + 1000)
    assert m.quality == "low" and any("backwards" in i for i in m.issues)


def test_serialisation_round_trip() -> None:
    s = alignment_scenario(seed=2, duration_s=3.0, events=50)
    m = _fit(s, domain="host0/chip3")
    again = ClockMapping.from_dict(m.to_dict())
    hint = s.event_true_ns.astype(np.int64)
    assert np.array_equal(again.to_host_ns(s.event_ticks, hint), m.to_host_ns(s.event_ticks, hint))
    assert again.domain == "host0/chip3"
    with pytest.raises(ClockFitError, match="malformed"):
        ClockMapping.from_dict({"knot_ticks": [0]})


def test_composition_device_host_reference() -> None:
    dev = SyntheticClock(offset_ticks=123, skew_ppm=20.0, counter_bits=64)
    host_b = SyntheticClock(offset_ticks=7_000_000, skew_ppm=-10.0, ticks_per_second=1e9)
    reads = np.arange(0.0, 5e9, 1e8)
    # device read against host B's clock: brackets in host-B time
    b = simulate_brackets(dev, reads, seed=1)
    hb_b = host_b.ticks_at(b.host_before_ns).astype(np.int64)
    ha_b = host_b.ticks_at(b.host_after_ns).astype(np.int64) + 1
    dev_to_b = fit_clock(hb_b, b.device_ticks, ha_b)
    b_brackets = simulate_brackets(host_b, reads, seed=2)
    b_to_ref = fit_clock(
        b_brackets.host_before_ns, b_brackets.device_ticks, b_brackets.host_after_ns
    )
    chain = compose(dev_to_b, b_to_ref)
    true_ns, ticks = simulate_events(dev, 500, 1e8, 4.8e9, seed=3)
    host, bound = chain.align(ticks)
    assert np.all(np.abs(host - true_ns) <= bound)
    assert np.array_equal(host, dev_to_b.then(b_to_ref).to_host_ns(ticks))


# -- properties -------------------------------------------------------------------------
_settings = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clocks(draw: st.DrawFn) -> tuple[SyntheticClock, int]:
    bits = draw(st.sampled_from([32, 48, 64]))
    clock = SyntheticClock(
        offset_ticks=draw(st.integers(0, (1 << 64) - 1)),
        skew_ppm=draw(st.floats(-100, 100)),
        wander_ppm=draw(st.floats(0, 10)),
        wander_period_s=draw(st.floats(20, 200)),
        wander_phase_rad=draw(st.floats(0, 6.3)),
        counter_bits=bits,
    )
    return clock, draw(st.integers(0, 2**16))


@_settings
@given(clocks(), st.integers(0, (1 << 64) - 1))
def test_constant_raw_offset_changes_nothing(cs: tuple[SyntheticClock, int], shift: int) -> None:
    clock, seed = cs
    b = simulate_brackets(clock, np.arange(0.0, 6e9, 1e8), seed=seed)
    true_ns, ticks = simulate_events(clock, 200, 0.0, 6e9, seed=seed)
    mask = (1 << clock.counter_bits) - 1
    moved = lambda t: (t.astype(np.uint64) + np.uint64(shift & mask)) & np.uint64(mask)  # noqa: E731
    bits = clock.counter_bits
    m1 = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=bits)
    m2 = fit_clock(b.host_before_ns, moved(b.device_ticks), b.host_after_ns, counter_bits=bits)
    hint = true_ns.astype(np.int64)
    assert np.array_equal(m1.to_host_ns(ticks, hint), m2.to_host_ns(moved(ticks), hint))
    assert np.array_equal(m1.bound_ns(ticks, hint), m2.bound_ns(moved(ticks), hint))


@_settings
@given(clocks(), st.randoms(use_true_random=False))
def test_input_order_does_not_matter(cs: tuple[SyntheticClock, int], rnd) -> None:
    clock, seed = cs
    b = simulate_brackets(clock, np.arange(0.0, 3e9, 1e8), seed=seed)
    perm = np.arange(b.device_ticks.size)
    rnd.shuffle(perm)
    bits = clock.counter_bits
    m1 = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=bits)
    m2 = fit_clock(
        b.host_before_ns[perm], b.device_ticks[perm], b.host_after_ns[perm], counter_bits=bits
    )
    true_ns, ticks = simulate_events(clock, 100, 0.0, 3e9, seed=seed)
    assert np.array_equal(
        m1.to_host_ns(ticks, true_ns.astype(np.int64)),
        m2.to_host_ns(ticks, true_ns.astype(np.int64)),
    )


@_settings
@given(clocks(), st.floats(0.0, 0.3))
def test_monotonic_and_bound_holds_on_every_event(
    cs: tuple[SyntheticClock, int], outliers: float
) -> None:
    clock, seed = cs
    delays = DelayModel(outlier_fraction=outliers)
    b = simulate_brackets(clock, np.arange(0.0, 8e9, 1e8), delays=delays, seed=seed)
    m = fit_clock(
        b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=clock.counter_bits
    )
    true_ns, ticks = simulate_events(clock, 2_000, -1e8, 8.1e9, seed=seed + 1)
    host, bound = m.align(ticks, true_ns.astype(np.int64))
    assert np.all(np.abs(host - true_ns) <= bound)
    assert np.all(np.diff(host) >= 0)  # events are sorted by true time


@_settings
@given(clocks(), st.integers(-(10**12), 10**12))
def test_constant_host_offset_shifts_output_by_that_constant(
    cs: tuple[SyntheticClock, int], c: int
) -> None:
    clock, seed = cs
    b = simulate_brackets(clock, np.arange(0.0, 3e9, 1e8), seed=seed)
    bits = clock.counter_bits
    m1 = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns, counter_bits=bits)
    m2 = fit_clock(b.host_before_ns + c, b.device_ticks, b.host_after_ns + c, counter_bits=bits)
    true_ns, ticks = simulate_events(clock, 50, 0.0, 3e9, seed=seed)
    hint = true_ns.astype(np.int64)
    assert np.array_equal(m1.to_host_ns(ticks, hint) + c, m2.to_host_ns(ticks, hint + c))


# -- hostile brackets: torn reads, counter resets (issue 18) -----------------------------
def _torn(ticks: np.ndarray, k: int, sign: int, bits: int) -> np.ndarray:
    """Bracket ``k`` read with one 32-bit half from the other side of a carry."""
    out = ticks.copy()
    out[k] = np.uint64((int(out[k]) + sign * (1 << 32)) % (1 << bits))
    return out


def test_torn_read_costs_one_bracket_named_in_the_issues() -> None:
    clock = SyntheticClock(offset_ticks=10**12, skew_ppm=20.0)
    b = simulate_brackets(clock, np.arange(0.0, 10e9, 1e8), seed=1)
    clean = fit_clock(b.host_before_ns, b.device_ticks, b.host_after_ns)
    for sign in (1, -1):
        m = fit_clock(b.host_before_ns, _torn(b.device_ticks, 40, sign, 64), b.host_after_ns)
        assert m.samples_rejected == clean.samples_rejected + 1
        assert any("torn" in i and "bracket 40" in i for i in m.issues), m.issues
        true_ns, ticks = simulate_events(clock, 500, 0.0, 10e9, seed=2)
        host, bound = m.align(ticks, true_ns.astype(np.int64))
        assert np.all(np.abs(host - true_ns) <= bound)


def test_spike_does_not_cost_the_good_bracket_after_it() -> None:
    t = np.arange(0, 2_000_000_000, 100_000_000)
    ticks = t.copy()
    ticks[7] += 5_000_000_000  # a spike: 5 s ahead for one read
    m = fit_clock(t - 1000, ticks, t + 1000)
    assert m.samples_rejected == 1 and m.samples_used == t.size - 1
    assert "bracket 7" in m.issues[0]
    assert abs(int(m.to_host_ns(ticks[8])[()]) - int(t[8])) <= 1000  # bracket 8 was kept


def test_dropping_the_first_brackets_keeps_the_mapping_on_its_clocks() -> None:
    # brackets 0 and 20 claim host times 50-76 µs off: the counter agrees (within 1000 ppm),
    # the self-check drops them and their neighbours; ticks and host times still count from
    # the first bracket read, so the kept brackets' reads are mapped within their bound
    t = np.arange(0, 4_000_000_000, 100_000_000)
    ticks = 7_000 + t + t // 50_000
    hb, ha = t - 900, t + 1_500
    for k, shift in ((0, -49_586), (20, -76_025)):
        hb[k] += shift
        ha[k] += shift
    m = fit_clock(hb, ticks, ha)
    assert m.samples_rejected > 2 and m.samples_used < t.size - 2
    assert any("inconsistent" in i for i in m.issues), m.issues
    kept = np.setdiff1d(np.arange(t.size), [0, 1, 2, 3, 4, 16, 17, 18, 19, 20, 21, 22, 23, 24])
    host, bound = m.align(ticks[kept])
    assert np.all(np.abs(host - t[kept]) <= bound)


def test_counter_reset_fits_the_epoch_after_it() -> None:
    clock = SyntheticClock(offset_ticks=10**12, skew_ppm=-30.0)
    b = simulate_brackets(clock, np.arange(0.0, 10e9, 1e8), seed=3)
    jump = np.uint64(int(b.device_ticks[60]) - 1_000)  # the counter restarts near 1000
    ticks = b.device_ticks.copy()
    ticks[60:] -= jump
    m = fit_clock(b.host_before_ns, ticks, b.host_after_ns, domain="host0/chip1")
    assert m.samples_used <= 40 and m.samples_rejected >= 60
    assert any("reset" in i and "bracket 60" in i for i in m.issues), m.issues
    true_ns, before = simulate_events(clock, 500, 6.1e9, 10e9, seed=4)
    host, bound = m.align(before - jump, true_ns.astype(np.int64))
    assert np.all(np.abs(host - true_ns) <= bound)
    assert float(np.median(bound)) < 5_000.0


def test_no_two_brackets_agree_is_one_clear_error() -> None:
    t = np.arange(0, 400_000_000, 100_000_000)
    ticks = np.array([0, 10**13, 5, 10**15], dtype=np.uint64)  # nothing agrees with anything
    with pytest.raises(InsufficientSamplesError, match="agree") as err:
        fit_clock(t - 1000, ticks, t + 1000, domain="host0/chip2")
    assert "host0/chip2" in str(err.value)


@st.composite
def hostile_runs(draw: st.DrawFn) -> tuple[SyntheticClock, int, int, int, int]:
    bits = draw(st.sampled_from([48, 64]))
    clock = SyntheticClock(
        offset_ticks=draw(st.integers(0, (1 << 64) - 1)),
        skew_ppm=draw(st.floats(-100, 100)),
        wander_ppm=draw(st.floats(0, 5)),
        wander_period_s=draw(st.floats(20, 200)),
        counter_bits=bits,
    )
    n = 60
    return (
        clock,
        draw(st.integers(0, n - 1)),
        draw(st.sampled_from([1, -1])),
        n,
        draw(st.integers(0, 2**16)),
    )


_hostile_settings = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_hostile_settings
@given(hostile_runs())
def test_one_torn_read_anywhere_costs_one_bracket(run) -> None:
    clock, k, sign, n, seed = run
    bits = clock.counter_bits
    b = simulate_brackets(
        clock, np.arange(0.0, n * 1e8, 1e8), delays=DelayModel(outlier_fraction=0.0), seed=seed
    )
    m = fit_clock(
        b.host_before_ns, _torn(b.device_ticks, k, sign, bits), b.host_after_ns, counter_bits=bits
    )
    assert m.samples_rejected == 1 and f"bracket {k}" in " ".join(m.issues)
    true_ns, ticks = simulate_events(clock, 300, 0.0, (n - 1) * 1e8, seed=seed + 1)
    host, bound = m.align(ticks, true_ns.astype(np.int64))
    assert np.all(np.abs(host - true_ns) <= bound)


@_hostile_settings
@given(hostile_runs(), st.integers(10**10, 2**47))
def test_counter_reset_anywhere_splits_the_fit_there(run, jump: int) -> None:
    clock, k, _, n, seed = run
    k = min(max(k, 2), n - 3)
    bits = clock.counter_bits
    mask = np.uint64((1 << bits) - 1)
    b = simulate_brackets(
        clock, np.arange(0.0, n * 1e8, 1e8), delays=DelayModel(outlier_fraction=0.0), seed=seed
    )
    ticks = b.device_ticks.copy()
    ticks[k:] = (ticks[k:] - np.uint64(jump)) & mask
    m = fit_clock(b.host_before_ns, ticks, b.host_after_ns, counter_bits=bits)
    assert m.samples_used == n - k and f"from bracket {k}" in " ".join(m.issues)
    true_ns, after = simulate_events(clock, 300, (k + 0.5) * 1e8, (n - 1) * 1e8, seed=seed + 1)
    host, bound = m.align((after - np.uint64(jump)) & mask, true_ns.astype(np.int64))
    assert np.all(np.abs(host - true_ns) <= bound)
