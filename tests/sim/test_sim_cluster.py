"""The simulated cluster end to end: determinism, ground truth, and what each fault changes.

Every run here is small (2 hosts x 4 chips, a few dozen requests) and takes a second or two.
Telemetry is read back with the exporters' reader, exactly as the analysis reads it.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from otel_ext.exporters import read_metrics, read_spans
from otel_ext.sim import (
    EPOCH_NS,
    SimConfig,
    host_ns_from_truth,
    parse_fault,
    run_simulation,
    ticks_from_truth,
)

BASE = dict(hosts=2, chips=4, requests=40, seed=11)
FAULTS = {
    "baseline": (),
    "straggler": ("straggler@host1/chip2",),
    "throttle": ("throttle@host0/chip1",),
    "slow-link": ("slow-link@host1/chip1-chip2",),
    "slow-nic": ("slow-nic@host1",),
}


class Run:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.truth = json.loads((folder / "truth.json").read_text())
        self.spans = list(read_spans(folder / "traces.jsonl"))
        self.points = list(read_metrics(folder / "metrics.jsonl"))

    def spans_named(self, name: str, **attrs: Any) -> list[Any]:
        return [
            s
            for s in self.spans
            if s.name == name
            and all(s.attributes.get(k.replace("_", ".", 2)) == v for k, v in attrs.items())
        ]

    def series(self, metric: str, **attrs: str) -> list[tuple[int, float]]:
        return sorted(
            (p.time_ns, p.value)
            for p in self.points
            if p.name == metric and all(p.attributes.get(k) == v for k, v in attrs.items())
        )

    def collectives(self, host: str) -> list[dict[str, Any]]:
        return [c for c in self.truth["collectives"] if c["host"] == host]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    out = {}
    for name, specs in FAULTS.items():
        folder = tmp_path_factory.mktemp(name)
        cfg = SimConfig(**BASE, faults=tuple(parse_fault(s) for s in specs))
        run_simulation(cfg, folder, timeline=False)
        out[name] = Run(folder)
    return out


def test_same_seed_gives_identical_files_and_another_seed_does_not(tmp_path: Path) -> None:
    cfg = SimConfig(
        hosts=2, chips=2, requests=12, seed=5, faults=(parse_fault("throttle@host0/chip1"),)
    )
    a = run_simulation(cfg, tmp_path / "a")
    b = run_simulation(cfg, tmp_path / "b")
    c = run_simulation(SimConfig(hosts=2, chips=2, requests=12, seed=6), tmp_path / "c")
    names = ("traces.jsonl", "metrics.jsonl", "timeline.json", "truth.json")
    assert sorted(a.files) == sorted(names)
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "traces.jsonl").read_bytes() != (
        tmp_path / "c" / "traces.jsonl"
    ).read_bytes()
    # a rerun into the same folder replaces the outputs (no rotated leftovers)
    run_simulation(cfg, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(names)
    timeline = json.loads((tmp_path / "a" / "timeline.json").read_text())
    assert any(e.get("ph") == "X" for e in timeline["traceEvents"])
    assert a.spans == b.spans and a.requests == 12 and c.requests == 12


@pytest.mark.slow
def test_telemetry_loads_with_the_exporters_reader_and_uses_registry_names(
    runs: dict[str, Run],
) -> None:
    run = runs["baseline"]
    names = {s.name for s in run.spans}
    assert names == {
        "accel.request",
        "accel.request.phase",
        "accel.layer",
        "accel.collective",
        "accel.kernel",
        "accel.link.transfer",
        "accel.clock.sync",
        "accel.engine.step",
    }
    phases = {s.attributes["accel.request.phase"] for s in run.spans_named("accel.request.phase")}
    assert phases == {
        "queue",
        "prefill",
        "kv_transfer",
        "decode",
        "decode_queue",
        "first_decode_step",
    }
    metrics = {p.name for p in run.points}
    for expected in (
        "accel.device.cycles.active",
        "accel.device.cycles.elapsed",
        "accel.device.cycles.tensor_active",
        "accel.device.clock.frequency",
        "hw.power",
        "hw.energy",
        "hw.temperature",
        "accel.memory.io.read",
        "accel.link.io",
        "hw.network.io",
        "accel.clock.offset",
        "accel.clock.drift",
        "accel.clock.bound",
        "gen_ai.server.time_to_first_token",
        "gen_ai.server.time_per_output_token",
    ):
        assert expected in metrics
    assert {s.resource["accel.host.id"] for s in run.spans} == {"host0", "host1"}
    assert all(s.resource["accel.device.model"] == "sim-accel-v1" for s in run.spans)


def test_nothing_in_the_telemetry_hints_at_the_fault(runs: dict[str, Run]) -> None:
    for name in ("straggler", "throttle", "slow-link", "slow-nic"):
        for path in ("traces.jsonl", "metrics.jsonl"):
            text = (runs[name].folder / path).read_text()
            for word in ("straggler", "throttle", "slow-link", "slow-nic", "fault"):
                assert word not in text, (name, path, word)
        assert runs[name].truth["faults"][0]["kind"] == name


def test_one_trace_per_request_across_hosts(runs: dict[str, Run]) -> None:
    run = runs["baseline"]
    requests = run.spans_named("accel.request")
    assert len(requests) == 40
    by_trace = defaultdict(list)
    for s in run.spans:
        by_trace[s.trace_id].append(s)
    for root in requests:
        members = by_trace[root.trace_id]
        assert {m.resource["accel.host.id"] for m in members} == {"host0", "host1"}
        assert sorted(
            m.attributes.get("accel.request.phase", "")
            for m in members
            if m.name == "accel.request.phase"
        ) == ["decode", "decode_queue", "first_decode_step", "kv_transfer", "prefill", "queue"]
        assert root.attributes["gen_ai.usage.input_tokens"] > 0


def test_truth_clock_parameters_reproduce_raw_ticks_and_alignment_bounds_hold(
    runs: dict[str, Run],
) -> None:
    run = runs["baseline"]
    clocks = run.truth["clocks"]
    colls = {c["id"]: c for c in run.truth["collectives"]}
    checked = 0
    for span in run.spans_named("accel.kernel"):
        a = span.attributes
        if a["accel.kernel.kind"] != "communication":
            continue
        coll = colls[a["accel.collective.id"]]
        params = clocks["chips"][a["accel.device.id"]]
        arrival = coll["arrivals_ns"][a["accel.collective.rank"]]
        assert ticks_from_truth(params, arrival) == a["accel.clock.raw_start_ticks"]
        assert ticks_from_truth(params, coll["end_ns"]) == a["accel.clock.raw_end_ticks"]
        # the aligned time is on the host's clock, within the stated uncertainty
        host_true = host_ns_from_truth(clocks["hosts"][a["accel.host.id"]], arrival)
        assert abs(span.start_ns - host_true) <= a["accel.clock.uncertainty_ns"]
        checked += 1
    assert checked > 100
    # host clocks disagree: the same instant reads differently on the two hosts
    h0, h1 = clocks["hosts"]["host0"], clocks["hosts"]["host1"]
    assert abs(host_ns_from_truth(h0, EPOCH_NS) - host_ns_from_truth(h1, EPOCH_NS)) > 50_000
    # raw ticks wrap: 32-bit values
    assert all(
        0 <= s.attributes["accel.clock.raw_end_ticks"] < 2**32
        for s in run.spans_named("accel.kernel")
    )


def _last_arrivals(run: Run, host: str) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for c in run.collectives(host):
        arrivals = c["arrivals_ns"]
        counts[arrivals.index(max(arrivals))] += 1
    return counts


def test_straggler_delays_its_collectives_last_arrival_and_nothing_else(
    runs: dict[str, Run],
) -> None:
    base, fault = runs["baseline"], runs["straggler"]
    last = _last_arrivals(fault, "host1")
    total = sum(last.values())
    assert last[2] >= 0.95 * total
    assert _last_arrivals(base, "host1")[2] < 0.6 * total

    # in the telemetry: chip2's compute kernels are ~1.3x its peers', and it waits least
    def compute(run: Run, dev: str) -> float:
        return statistics.median(
            s.end_ns - s.start_ns
            for s in run.spans_named("accel.kernel", accel_device_id=dev)
            if s.attributes["accel.kernel.kind"] == "compute"
        )

    ratio = compute(fault, "host1/chip2") / compute(fault, "host1/chip0")
    assert 1.2 < ratio < 1.4
    assert 0.95 < compute(base, "host1/chip2") / compute(base, "host1/chip0") < 1.05
    # the other host (prefill pool) is untouched: same collectives at the same times
    assert fault.collectives("host0") == base.collectives("host0")


def test_throttle_shows_in_frequency_and_temperature_counters_only_on_that_chip(
    runs: dict[str, Run],
) -> None:
    base, fault = runs["baseline"], runs["throttle"]
    throttle = fault.truth["throttles"]["host0/chip1"]
    drop_host_ns = host_ns_from_truth(
        fault.truth["clocks"]["hosts"]["host0"], throttle["clock_drop_ns"]
    )
    freq = fault.series("accel.device.clock.frequency", **{"accel.device.id": "host0/chip1"})
    before = [v for t, v in freq if t < drop_host_ns]
    after = [v for t, v in freq if t > drop_host_ns]
    assert before and after
    assert set(before) == {1.5e9} and set(after) == {1.5e9 * 0.6}
    for dev in ("host0/chip0", "host0/chip2", "host1/chip1"):
        assert {
            v for _, v in fault.series("accel.device.clock.frequency", **{"accel.device.id": dev})
        } == {1.5e9}
    temp_fault = fault.series("hw.temperature", **{"accel.device.id": "host0/chip1"})[-1][1]
    temp_base = base.series("hw.temperature", **{"accel.device.id": "host0/chip1"})[-1][1]
    temp_peer = fault.series("hw.temperature", **{"accel.device.id": "host0/chip2"})[-1][1]
    assert temp_fault > temp_base + 15 and temp_fault > temp_peer + 15
    # and the chip is slower from then on: its collectives' last arrivals after the drop
    late = [c for c in fault.collectives("host0") if c["start_ns"] > throttle["clock_drop_ns"]]
    assert late and sum(
        c["arrivals_ns"].index(max(c["arrivals_ns"])) == 1 for c in late
    ) >= 0.9 * len(late)


def test_slow_link_slows_the_all_reduces_of_its_ring(runs: dict[str, Run]) -> None:
    base, fault = runs["baseline"], runs["slow-link"]

    def link_durations(run: Run, host: str) -> dict[str, float]:
        out = defaultdict(list)
        for s in run.spans_named("accel.link.transfer", accel_host_id=host):
            if s.attributes["accel.link.kind"] == "chip_to_chip":
                out[s.attributes["accel.link.id"]].append(s.end_ns - s.start_ns)
        return {k: statistics.median(v) for k, v in out.items()}

    links = link_durations(fault, "host1")
    slow = links.pop("host1/chip1-chip2")
    # every transfer over the degraded link is the slowest of its all-reduce
    assert slow > 1.2 * max(links.values())
    base_links = link_durations(base, "host1")
    assert max(base_links.values()) < 1.05 * min(base_links.values())

    def ar_mean(run: Run, host: str) -> float:
        return statistics.mean(c["end_ns"] - c["start_ns"] for c in run.collectives(host))

    assert ar_mean(fault, "host1") > 1.15 * ar_mean(base, "host1")
    assert fault.collectives("host0") == base.collectives("host0")


def test_slow_nic_slows_the_kv_transfers_only(runs: dict[str, Run]) -> None:
    base, fault = runs["baseline"], runs["slow-nic"]

    def kv(run: Run) -> list[int]:
        return [
            s.end_ns - s.start_ns
            for s in run.spans_named("accel.link.transfer")
            if s.attributes["accel.link.kind"] == "nic"
        ]

    assert statistics.median(kv(fault)) > 5 * statistics.median(kv(base))
    # prefill-side device work is identical; request first tokens too
    assert fault.collectives("host0") == base.collectives("host0")
    assert [r["first_token_ns"] for r in fault.truth["requests"]] == [
        r["first_token_ns"] for r in base.truth["requests"]
    ]
    assert fault.truth["requests"][-1]["done_ns"] > base.truth["requests"][-1]["done_ns"]


def test_counters_are_consistent_with_the_work_done(runs: dict[str, Run]) -> None:
    run = runs["baseline"]
    for dev in ("host0/chip0", "host1/chip3"):
        active = run.series("accel.device.cycles.active", **{"accel.device.id": dev})
        elapsed = run.series("accel.device.cycles.elapsed", **{"accel.device.id": dev})
        values = [v for _, v in active]
        assert values == sorted(values) and values[-1] > 0
        assert all(a[1] <= e[1] + 1 for a, e in zip(active, elapsed))
    # NIC bytes: every KV byte the prefill host sent, the decode host received
    sent = run.series(
        "hw.network.io", **{"accel.link.id": "host0/nic0", "network.io.direction": "transmit"}
    )[-1][1]
    received = run.series(
        "hw.network.io", **{"accel.link.id": "host1/nic0", "network.io.direction": "receive"}
    )[-1][1]
    kv_bytes = sum(
        s.attributes["accel.link.bytes"]
        for s in run.spans_named("accel.link.transfer")
        if s.attributes["accel.link.kind"] == "nic"
    )
    assert sent == received == kv_bytes
    final_tokens = sum(
        run.series("accel.inference.tokens", **{"gen_ai.token.type": "output", "accel.host.id": h})[
            -1
        ][1]
        for h in ("host0", "host1")
    )
    assert final_tokens == sum(r["output_tokens"] for r in run.truth["requests"])


def test_replicas_mode_and_single_chip_work(tmp_path: Path) -> None:
    r = run_simulation(
        SimConfig(hosts=2, chips=2, requests=10, seed=1, mode="replicas"),
        tmp_path / "r",
        timeline=False,
    )
    spans = list(read_spans(tmp_path / "r" / "traces.jsonl"))
    assert {
        s.attributes["accel.request.phase"] for s in spans if s.name == "accel.request.phase"
    } == {"queue", "prefill", "decode"}
    assert r.requests == 10
    one = run_simulation(
        SimConfig(hosts=1, chips=1, requests=5, seed=1), tmp_path / "one", timeline=False
    )
    assert one.requests == 5 and one.collectives == 0


def test_on_slice_and_on_start_hooks(tmp_path: Path) -> None:
    slices: list[int] = []
    started = []
    result = run_simulation(
        SimConfig(hosts=1, chips=2, requests=5, seed=2),
        tmp_path,
        timeline=False,
        on_slice=lambda t, samples: slices.append(t),
        on_start=started.append,
    )
    assert started and started[0] is result.counters
    assert slices == sorted(slices) and slices[0] == EPOCH_NS
    assert result.counters is not None and result.counters.read(0)


def _final(run: Run, metric: str, dev: str) -> Any:
    points = [p for p in run.points if p.name == metric and p.attributes["accel.device.id"] == dev]
    return max(points, key=lambda p: p.time_ns)


def test_collective_counters_match_the_true_all_reduces(runs: dict[str, Run]) -> None:
    run = runs["straggler"]
    for host in ("host0", "host1"):
        colls = run.collectives(host)
        assert colls
        for rank in range(4):
            dev = f"{host}/chip{rank}"
            # ground truth from truth.json: enter = arrival, last arrival = start, exit = end
            time_s = sum((c["end_ns"] - c["arrivals_ns"][rank]) / 1e9 for c in colls)
            wait_s = sum((c["start_ns"] - c["arrivals_ns"][rank]) / 1e9 for c in colls)
            assert _final(run, "accel.collective.time", dev).value == pytest.approx(time_s)
            assert _final(run, "accel.collective.wait.time", dev).value == pytest.approx(
                wait_s, abs=1e-9
            )
            io = _final(run, "accel.collective.io", dev)
            bus = _final(run, "accel.collective.bus.io", dev)
            # every member's payload is the all-reduce's buffer
            assert io.value == sum(c["bytes"] for c in colls)
            # all-reduce on n = 4: bus bytes = payload x 2(n-1)/n
            assert bus.value == pytest.approx(io.value * 2 * (4 - 1) / 4)
            assert io.attributes == {
                "accel.device.id": dev,
                "accel.host.id": host,
                "accel.collective.group": f"{host}/tp",
                "accel.collective.op": "all_reduce",
            }
            assert io.is_monotonic and bus.is_monotonic
            # the histograms hold one observation per all-reduce; durations sum to the time
            dur = _final(run, "accel.collective.duration", dev)
            late = _final(run, "accel.collective.arrival.lateness", dev)
            assert dur.count == late.count == len(colls)
            assert dur.sum == pytest.approx(time_s)
            first = sum((c["arrivals_ns"][rank] - min(c["arrivals_ns"])) / 1e9 for c in colls)
            assert late.sum == pytest.approx(first, abs=1e-9)


def test_straggler_peers_wait_and_the_straggler_does_not(runs: dict[str, Run]) -> None:
    base, fault = runs["baseline"], runs["straggler"]

    def waits(run: Run) -> dict[int, float]:
        return {
            c: _final(run, "accel.collective.wait.time", f"host1/chip{c}").value for c in range(4)
        }

    def series(run: Run, dev: str) -> list[float]:
        return [v for _, v in run.series("accel.collective.wait.time", **{"accel.device.id": dev})]

    w, b = waits(fault), waits(base)
    # each peer of the straggler waits far more than it did without the fault...
    for peer in (0, 1, 3):
        assert w[peer] > 5 * b[peer]
        grows = series(fault, f"host1/chip{peer}")
        assert grows == sorted(grows) and grows[-1] > grows[len(grows) // 2] > 0
    # ...while the straggler itself, last to arrive, waits almost never
    assert w[2] < 0.02 * min(w[0], w[1], w[3])
    # its time in collectives is short: it only transfers (the others wait for it)
    t = {c: _final(fault, "accel.collective.time", f"host1/chip{c}").value for c in range(4)}
    assert t[2] < 0.5 * min(t[0], t[1], t[3])
    # and its arrival lateness is the largest of the group
    late = {
        c: _final(fault, "accel.collective.arrival.lateness", f"host1/chip{c}").sum
        for c in range(4)
    }
    assert max(late, key=late.__getitem__) == 2
    # the prefill host (no fault) is unchanged (the faulty run lasts longer: more samples)
    for c in range(4):
        dev = f"host0/chip{c}"
        assert series(fault, dev)[-1] == series(base, dev)[-1]


def test_collective_histogram_exemplars_are_that_chips_collective_spans(
    runs: dict[str, Run],
) -> None:
    run = runs["baseline"]
    spans = {(s.trace_id, s.span_id): s for s in run.spans_named("accel.collective")}
    # the truth's payloads are the collective spans' bytes
    by_id = {c["id"]: c for c in run.truth["collectives"]}
    assert all(
        by_id[s.attributes["accel.collective.id"]]["bytes"]
        == s.attributes["accel.collective.bytes"]
        for s in spans.values()
    )
    checked = 0
    for dev in ("host0/chip1", "host1/chip3"):
        for metric in ("accel.collective.duration", "accel.collective.arrival.lateness"):
            point = _final(run, metric, dev)
            assert point.explicit_bounds[0] == 1e-6 and point.explicit_bounds[-1] == 10.0
            assert point.exemplars
            for ex in point.exemplars:
                span = spans[(ex.trace_id, ex.span_id)]
                assert span.attributes["accel.device.id"] == dev
                if metric == "accel.collective.duration":
                    # the span runs from the chip's arrival to the all-reduce's end
                    assert ex.value == pytest.approx((span.end_ns - span.start_ns) / 1e9, abs=2e-9)
                checked += 1
    assert checked >= 8


def test_counter_bridge_derives_busbw_wait_ratio_and_ratio_metrics_from_the_live_view(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_ext.counters import CounterBridge, SimulatedSource
    from otel_ext.semconv.registry import device_specs

    bridges: list[CounterBridge] = []

    def on_start(live: Any) -> None:
        bridge = CounterBridge([SimulatedSource(live)], interval_s=1.0, window_s=1.0)
        bridge.open()
        bridges.append(bridge)

    caplog.set_level("WARNING")
    run_simulation(
        SimConfig(
            hosts=1, chips=4, requests=30, seed=3, faults=(parse_fault("straggler@host0/chip1"),)
        ),
        tmp_path,
        timeline=False,
        on_start=on_start,
        on_slice=lambda _t, _s: bridges[0].sample_once(),
    )
    families = bridges[0].families()
    assert not [r for r in caplog.records if "needs accel.device.model" in r.getMessage()]
    busbw = {s.attributes["accel.device.id"]: s.value for s in families["accel.collective.busbw"]}
    link_bw = device_specs("sim-accel-v1")["link_bandwidth"]
    assert set(busbw) == {f"host0/chip{c}" for c in range(4)}
    # a bidirectional ring moves 2(n-1)/n of the buffer in the time a link carries (n-1)/n
    assert all(0 < v <= 2 * link_bw for v in busbw.values())
    wait = {
        s.attributes["accel.device.id"]: s.value for s in families["accel.collective.wait.ratio"]
    }
    assert wait["host0/chip1"] < 0.1 * min(v for d, v in wait.items() if d != "host0/chip1")
    for metric in ("accel.device.mfu", "accel.device.mbu", "accel.link.bandwidth.utilization"):
        assert families.get(metric), metric
        assert all(0 <= s.value <= 1 for s in families[metric])


def test_clock_brackets_in_the_traces_refit_every_chip_offline(runs: dict[str, Run]) -> None:
    """The sync spans carry every chip's brackets: a re-fit from traces.jsonl alone maps each
    kernel's raw start tick to within the two bounds of the time the simulation recorded."""
    import numpy as np

    from otel_ext.clocks import refit_from_spans

    run = runs["baseline"]
    mappings = refit_from_spans(read_spans([run.folder / "traces.jsonl"]), source="traces.jsonl")
    kernels = run.spans_named("accel.kernel")
    assert kernels and {s.attributes["accel.clock.domain"] for s in kernels} <= set(mappings)
    for s in kernels[:500]:
        m = mappings[s.attributes["accel.clock.domain"]]
        assert m.quality == "good"
        ticks = np.array([s.attributes["accel.clock.raw_start_ticks"]], dtype=np.int64)
        hint = np.array([s.start_ns], dtype=np.int64)
        host_ns, bound = m.align(ticks, near_host_ns=hint)
        refit = int(host_ns[0])
        slack = float(bound[0]) + float(s.attributes["accel.clock.uncertainty_ns"])
        assert abs(refit - s.start_ns) <= slack + 1
