"""The simulated counter model: cumulative counters equal the work fed in, read at any times."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.counters import SimulatedSource
from otel_ext.semconv.registry import device_specs
from otel_ext.sim import EPOCH_NS, SimConfig, SimCounterModel
from otel_ext.sim._run import LiveCounters

SPEC = device_specs("sim-accel-v1")

work = st.lists(
    st.tuples(
        st.integers(0, 10**9),  # start offset
        st.integers(1, 10**8),  # duration
        st.floats(0, 1e13),  # flops
        st.floats(0, 1e10),  # bytes read
        st.floats(0.0, 1.0),  # tensor fraction
        st.sampled_from([1.0, 0.6]),  # clock ratio
    ),
    max_size=30,
)


def _values(samples, device="host0/chip0"):
    return {
        s.metric: s.value
        for s in samples
        if s.attributes.get("accel.device.id", device) == device
        and "gen_ai.token.type" not in s.attributes
    }


@settings(max_examples=60, deadline=None)
@given(work, st.lists(st.integers(0, 2 * 10**9), max_size=10))
def test_cumulative_counters_are_monotonic_and_end_at_the_work_done(items, reads) -> None:
    model = SimCounterModel(SimConfig(hosts=1, chips=1), SPEC)
    for start, dur, flops, rd, tensor, ratio in items:
        model.add_compute(
            0,
            EPOCH_NS + start,
            EPOCH_NS + start + dur,
            flops=flops,
            read_bytes=rd,
            written_bytes=rd / 2,
            tensor_fraction=tensor,
            clock_ratio=ratio,
            kernels=2,
        )
    previous: dict[str, float] = {}
    monotonic = (
        "accel.device.operations",
        "accel.memory.io.read",
        "accel.device.cycles.active",
        "accel.device.cycles.tensor_active",
        "accel.device.kernels",
        "hw.energy",
        "accel.device.cycles.elapsed",
    )
    for t in [*sorted(reads), 3 * 10**9]:
        values = _values(model.read(EPOCH_NS + t))
        for name in monotonic:
            assert values[name] >= previous.get(name, 0.0) - 1e-6 * abs(values[name]) - 1
        previous = values
    total_flops = sum(i[2] for i in items)
    total_read = sum(i[3] for i in items)
    active = sum(i[1] / 1e9 * SPEC["max_clock"] * i[5] for i in items)
    assert abs(previous["accel.device.operations"] - total_flops) <= 1e-6 * total_flops + 1
    assert abs(previous["accel.memory.io.read"] - total_read) <= 1e-6 * total_read + len(items) + 1
    assert abs(previous["accel.device.cycles.active"] - active) <= 1e-6 * active + len(items) + 1
    assert previous["accel.device.kernels"] == 2 * len(items)
    assert (
        previous["accel.device.cycles.tensor_active"] <= previous["accel.device.cycles.active"] + 1
    )
    # an idle chip draws its idle power; energy is the integral of power
    assert previous["hw.energy"] >= model.idle_power * 3.0 - 1e-6


def test_links_nics_and_serving_counters() -> None:
    model = SimCounterModel(SimConfig(hosts=2, chips=2), SPEC)
    model.add_link("host0/chip0-chip1", "transmit", EPOCH_NS, EPOCH_NS + 100, 1000)
    model.add_nic(1, "receive", EPOCH_NS + 50, EPOCH_NS + 150, 4000)
    model.add_tokens(0, "output", 7, EPOCH_NS + 10)
    model.add_request_done(0, EPOCH_NS + 10)
    model.set_queue_depth(1, 3, EPOCH_NS + 20)
    samples = model.read(EPOCH_NS + 100)
    by_key = {(s.metric, tuple(sorted(s.attributes.items()))): s.value for s in samples}
    link = (
        "accel.link.io",
        (
            ("accel.device.model", "sim-accel-v1"),
            ("accel.host.id", "host0"),
            ("accel.link.id", "host0/chip0-chip1"),
            ("network.io.direction", "transmit"),
        ),
    )
    nic = (
        "hw.network.io",
        (
            ("accel.host.id", "host1"),
            ("accel.link.id", "host1/nic0"),
            ("network.io.direction", "receive"),
        ),
    )
    assert by_key[link] == 1000.0
    assert by_key[nic] == 2000.0  # half the transfer had happened
    assert (
        by_key[
            (
                "accel.inference.tokens",
                (("accel.host.id", "host0"), ("gen_ai.token.type", "output")),
            )
        ]
        == 7.0
    )
    assert by_key[("accel.inference.queue.depth", (("accel.host.id", "host1"),))] == 3.0
    described = {d.metric for d in model.describe()}
    assert {s.metric for s in samples} <= described


def test_live_view_feeds_the_counter_bridge_source_without_advancing_the_model() -> None:
    model = SimCounterModel(SimConfig(hosts=1, chips=1), SPEC)
    live = LiveCounters(model)
    source = SimulatedSource(live, clock=lambda: 10**19)
    assert source.sample() == []
    first = model.read(EPOCH_NS + 10**9)
    assert source.sample() == first  # the wall clock does not move the simulation
    assert model.read(EPOCH_NS + 10**9) == first


collectives = st.lists(
    st.tuples(
        st.integers(0, 10**9),  # enter offset
        st.integers(0, 10**7),  # wait for the last member
        st.integers(1, 10**7),  # transfer after the last arrival
        st.integers(0, 10**9),  # payload bytes
        st.integers(2, 16),  # group size
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(collectives, st.lists(st.integers(0, 2 * 10**9), max_size=8))
def test_collective_counters_count_each_completed_collective_once(items, reads) -> None:
    model = SimCounterModel(SimConfig(hosts=1, chips=2), SPEC)
    for enter, wait, xfer, nbytes, n in items:
        model.add_collective(
            1,
            group="host0/tp",
            op="all_reduce",
            group_size=n,
            enter_ns=EPOCH_NS + enter,
            last_arrival_ns=EPOCH_NS + enter + wait,
            exit_ns=EPOCH_NS + enter + wait + xfer,
            nbytes=nbytes,
        )
    for t in [*sorted(reads), 3 * 10**9]:
        got = {
            s.metric: s.value
            for s in model.read(EPOCH_NS + t)
            if s.attributes.get("accel.device.id") == "host0/chip1"
            and s.metric.startswith("accel.collective.")
        }
        done = [i for i in items if i[0] + i[1] + i[2] < t]  # completed before the read
        assert got["accel.collective.io"] == sum(i[3] for i in done)
        bus = sum(i[3] * 2 * (i[4] - 1) / i[4] for i in done)
        assert abs(got["accel.collective.bus.io"] - bus) <= 1e-9 * bus + 1e-6
        time_s = sum((i[1] + i[2]) / 1e9 for i in done)
        wait_s = sum(i[1] / 1e9 for i in done)
        assert abs(got["accel.collective.time"] - time_s) <= 1e-9
        assert abs(got["accel.collective.wait.time"] - wait_s) <= 1e-9
        assert got["accel.collective.wait.time"] <= got["accel.collective.time"] + 1e-12


def test_collective_and_device_series_are_described_and_carry_their_identity() -> None:
    model = SimCounterModel(SimConfig(hosts=1, chips=2), SPEC)
    samples = model.read(EPOCH_NS + 1000)
    by_metric: dict[str, list[dict[str, object]]] = {}
    for s in samples:
        by_metric.setdefault(s.metric, []).append(dict(s.attributes))
    # every chip's all-reduce counters exist from the first reading, at zero
    assert by_metric["accel.collective.wait.time"] == [
        {
            "accel.device.id": f"host0/chip{c}",
            "accel.host.id": "host0",
            "accel.collective.group": "host0/tp",
            "accel.collective.op": "all_reduce",
        }
        for c in (0, 1)
    ]
    assert {s.value for s in samples if s.metric.startswith("accel.collective.")} == {0.0}
    # the device model rides on device and power series, so ratio metrics can be derived
    for metric in ("accel.device.operations", "accel.memory.io.read", "hw.power"):
        assert {a["accel.device.model"] for a in by_metric[metric]} == {"sim-accel-v1"}
    described = {d.metric: set(d.attributes) for d in model.describe()}
    for s in samples:
        assert set(s.attributes) == described[s.metric], s.metric
    # a single chip has no collective
    single = SimCounterModel(SimConfig(hosts=1, chips=1), SPEC)
    assert not [s for s in single.read(EPOCH_NS + 1000) if s.metric.startswith("accel.coll")]
    assert not [d for d in single.describe() if d.metric.startswith("accel.coll")]
