"""Ethernet/RoCE interfaces: ``NetDevSource`` on a recorded ``/sys/class/net`` tree and on
this machine's, the agent's detection, and ``nic_stats`` (port counters over a window)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.nic_stats import NicStat, nic_stats, path_nic_evidence
from otel_ext.analysis.loaders.metrics import MetricPoints
from otel_ext.counters import CounterBridge, CounterCollector, NetDevSource
from otel_ext.counters import cli as agent_cli
from otel_ext.counters._net import link_is_up
from otel_ext.errors import SourceUnavailableError

NET = FIXTURES / "sysfs" / "class" / "net"
T0 = 1_700_000_000 * 10**9


@pytest.fixture
def net_root(tmp_path: Path) -> Path:
    root = tmp_path / "net"
    shutil.copytree(NET, root)
    return root


def _by(samples, metric, *keys):
    return {tuple(s.attributes[k] for k in keys): s.value for s in samples if s.metric == metric}


# ---- the recorded tree ----------------------------------------------------------------------
def test_reads_the_recorded_tree_whole() -> None:
    src = NetDevSource(root=NET, host="node-a", interfaces=["ens1f0np0"], clock=lambda: 7)
    src.open()
    got = {(s.metric, tuple(sorted(s.attributes.items()))): s.value for s in src.sample()}
    port = {
        "accel.link.id": "node-a/ens1f0np0",
        "accel.host.id": "node-a",
        "network.interface.name": "ens1f0np0",
        "hw.id": "ens1f0np0",
    }

    def key(metric, **more):
        return (metric, tuple(sorted({**port, **more}.items())))

    rx, tx = {"network.io.direction": "receive"}, {"network.io.direction": "transmit"}
    assert got == {
        key("hw.network.io", **rx): 918273645546.0,
        key("hw.network.io", **tx): 1029384756102.0,
        key("hw.network.packets", **rx): 712345678.0,
        key("hw.network.packets", **tx): 812345678.0,
        key("hw.errors", **rx, **{"error.type": "rx_errors"}): 2.0,
        key("hw.errors", **tx, **{"error.type": "tx_errors"}): 0.0,
        key("hw.errors", **rx, **{"error.type": "rx_dropped"}): 17.0,
        key("hw.errors", **tx, **{"error.type": "tx_dropped"}): 0.0,
        key("hw.errors", **rx, **{"error.type": "rx_missed_errors"}): 5.0,
        key("hw.network.bandwidth.limit"): 100_000 * 125_000.0,  # 100 Gbit/s in bytes/s
        key("hw.network.up"): 1.0,
    }
    assert {s.timestamp_ns for s in src.sample()} == {7}
    described = {d.metric: set(d.attributes) for d in src.describe()}
    for s in src.sample():
        assert set(s.attributes) == described[s.metric], s.metric


def test_a_link_that_is_down_has_no_speed_and_says_down() -> None:
    src = NetDevSource(root=NET, host="n", interfaces=["ens1f1np1"])
    got = src.sample()
    assert _by(got, "hw.network.up", "hw.id") == {("ens1f1np1",): 0.0}
    assert _by(got, "hw.network.bandwidth.limit", "hw.id") == {}  # speed -1: unknown


def test_which_interfaces_are_read() -> None:
    def names(**kw):
        return NetDevSource(root=NET, host="n", **kw).interface_names()

    assert names() == ["eno1", "ens1f0np0", "ens1f1np1"]  # physical only, no loopback
    assert names(include_virtual=True) == [
        "docker0", "eno1", "ens1f0np0", "ens1f1np1", "tun0", "veth0a",
    ]  # fmt: skip
    assert names(interfaces=["veth*", "lo"]) == ["lo", "veth0a"]  # named: read whatever
    assert names(interfaces=["ens*"], include_virtual=True) == ["ens1f0np0", "ens1f1np1"]


def test_tun_without_operstate_is_up_by_its_carrier() -> None:
    got = NetDevSource(root=NET, host="n", interfaces=["tun0", "lo", "docker0"]).sample()
    assert _by(got, "hw.network.up", "hw.id") == {("docker0",): 0.0, ("lo",): 1.0, ("tun0",): 1.0}


@pytest.mark.parametrize(
    ("operstate", "carrier", "up"),
    [("up", None, True), ("up\n", "0", True), ("unknown", "1\n", True), ("unknown", "0", False),
     ("unknown", None, False), ("down", "1", False), ("dormant", "1", False), ("", "1", False),
     (None, None, False)],
)  # fmt: skip
def test_link_is_up(operstate, carrier, up) -> None:
    assert link_is_up(operstate, carrier) is up


def test_unavailable_says_what_is_there(tmp_path: Path, net_root: Path) -> None:
    with pytest.raises(SourceUnavailableError, match="no physical network interface under"):
        NetDevSource(root=tmp_path / "nope").open()
    for phys in ("eno1", "ens1f0np0", "ens1f1np1"):
        shutil.rmtree(net_root / phys)
    with pytest.raises(SourceUnavailableError) as err:
        NetDevSource(root=net_root).open()
    assert "virtual ones: docker0, tun0, veth0a; --net-virtual reads them" in str(err.value)
    NetDevSource(root=net_root, include_virtual=True).open()  # then it works
    with pytest.raises(SourceUnavailableError, match=r"matches eth9 \(present: docker0, lo,"):
        NetDevSource(root=net_root, interfaces=["eth9"]).open()


def test_unreadable_values_are_dropped_and_logged_once(net_root: Path, caplog) -> None:
    stats = net_root / "eno1" / "statistics"
    (stats / "rx_bytes").write_text("not a number\n")
    (stats / "tx_dropped").write_text("")
    (net_root / "eno1" / "speed").unlink()
    (net_root / "eno1" / "speed").mkdir()  # read fails with EISDIR: logged, not raised
    src = NetDevSource(root=net_root, host="n", interfaces=["eno1"])
    with caplog.at_level(logging.WARNING, logger="otel_ext.counters._net"):
        first = src.sample()
        second = src.sample()
    assert _by(first, "hw.network.io", "network.io.direction") == {("transmit",): 1122334455.0}
    assert ("tx_dropped",) not in _by(first, "hw.errors", "error.type")
    assert _by(first, "hw.network.bandwidth.limit", "hw.id") == {}
    assert len(second) == len(first)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3 and all(m.startswith("cannot read ") for m in warned), warned


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4),
    pad=st.sampled_from(["", "\n", " \n", "\t"]),
)
def test_any_64_bit_counter_reads_back(tmp_path_factory, values, pad) -> None:
    root = tmp_path_factory.mktemp("net")
    stats = root / "eth0" / "statistics"
    stats.mkdir(parents=True)
    (root / "eth0" / "device").mkdir()
    for name, v in zip(("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"), values):
        (stats / name).write_text(f"{v}{pad}")
    got = NetDevSource(root=root, host="h").sample()
    io = _by(got, "hw.network.io", "network.io.direction")
    pk = _by(got, "hw.network.packets", "network.io.direction")
    assert io == {("receive",): float(values[0]), ("transmit",): float(values[1])}
    assert pk == {("receive",): float(values[2]), ("transmit",): float(values[3])}


# ---- through the bridge: rates, resets, a vanished interface, the exposition ---------------
def _bridge(root: Path, now: list[int], **kw) -> CounterBridge:
    def clock() -> int:
        return now[0]

    bridge = CounterBridge([NetDevSource(root=root, host="node-a", clock=clock, **kw)], clock=clock)
    bridge.open()
    return bridge


def test_bandwidth_reset_and_vanished_interface(net_root: Path) -> None:
    now = [T0]
    bridge = _bridge(net_root, now)
    bridge.sample_once()
    stats = net_root / "ens1f0np0" / "statistics"
    (stats / "rx_bytes").write_text(str(918273645546 + 30 * 10**9) + "\n")  # 30 GB in 2 s
    now[0] += 2 * 10**9
    bridge.sample_once()

    def bw():
        return {
            (s.attributes["accel.link.id"], s.attributes["network.io.direction"]): s.value
            for s in bridge.families()["accel.nic.bandwidth"]
        }

    got = bw()
    assert got[("node-a/ens1f0np0", "receive")] == 15e9
    assert got[("node-a/ens1f0np0", "transmit")] == 0.0
    assert got[("node-a/eno1", "receive")] == 0.0
    # the interface is made again: its counters start from zero; a reset, not a negative rate
    (stats / "rx_bytes").write_text("4000000000\n")
    now[0] += 2 * 10**9
    bridge.sample_once()
    assert bw()[("node-a/ens1f0np0", "receive")] == 2e9
    totals = {
        s.attributes["network.io.direction"]: s.value
        for s in bridge.families()["hw.network.io"]
        if s.attributes["accel.link.id"] == "node-a/ens1f0np0"
    }
    assert totals["receive"] == 918273645546 + 30 * 10**9 + 4 * 10**9  # monotonic total
    shutil.rmtree(net_root / "eno1")
    now[0] += 2 * 10**9
    bridge.sample_once()
    links = {s.attributes["accel.link.id"] for s in bridge.families()["hw.network.io"]}
    assert links == {"node-a/ens1f0np0", "node-a/ens1f1np1"}


GOLDEN = """\
# HELP accel_counters_source_errors Samples of a counter source that failed (the source raised or lost a device).
# TYPE accel_counters_source_errors counter
accel_counters_source_errors_total{accel_source="net"} 0.0
# HELP accel_counters_source_up_ratio 1 when the counter source's last sample succeeded, 0 when it failed.
# TYPE accel_counters_source_up_ratio gauge
# UNIT accel_counters_source_up_ratio ratio
accel_counters_source_up_ratio{accel_source="net"} 1.0
# HELP accel_nic_bandwidth_bytes_per_second Achieved bandwidth of a host network port, per direction.
# TYPE accel_nic_bandwidth_bytes_per_second gauge
# UNIT accel_nic_bandwidth_bytes_per_second bytes_per_second
accel_nic_bandwidth_bytes_per_second{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1",network_io_direction="receive"} 0.0
accel_nic_bandwidth_bytes_per_second{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1",network_io_direction="transmit"} 1.25e+08
# HELP hw_errors Errors encountered by the component (OpenTelemetry `hw.*`); for a network port, packets in error or dropped, error.type naming the kernel's or the port's counter; for a GPU (hw.type gpu), its memory's volatile ECC errors, error.type corrected or uncorrected.
# TYPE hw_errors counter
hw_errors_total{accel_host_id="node-a",accel_link_id="node-a/eno1",error_type="rx_errors",hw_id="eno1",network_interface_name="eno1",network_io_direction="receive"} 0.0
hw_errors_total{accel_host_id="node-a",accel_link_id="node-a/eno1",error_type="tx_errors",hw_id="eno1",network_interface_name="eno1",network_io_direction="transmit"} 1.0
hw_errors_total{accel_host_id="node-a",accel_link_id="node-a/eno1",error_type="rx_dropped",hw_id="eno1",network_interface_name="eno1",network_io_direction="receive"} 5.0
hw_errors_total{accel_host_id="node-a",accel_link_id="node-a/eno1",error_type="tx_dropped",hw_id="eno1",network_interface_name="eno1",network_io_direction="transmit"} 0.0
hw_errors_total{accel_host_id="node-a",accel_link_id="node-a/eno1",error_type="rx_missed_errors",hw_id="eno1",network_interface_name="eno1",network_io_direction="receive"} 0.0
# HELP hw_network_bandwidth_limit_bytes_per_second Link speed of a network port, per direction of a full-duplex link (OpenTelemetry `hw.network.*`).
# TYPE hw_network_bandwidth_limit_bytes_per_second gauge
# UNIT hw_network_bandwidth_limit_bytes_per_second bytes_per_second
hw_network_bandwidth_limit_bytes_per_second{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1"} 1.25e+08
# HELP hw_network_io_bytes Bytes through a network port, per direction (OpenTelemetry `hw.*`).
# TYPE hw_network_io_bytes counter
# UNIT hw_network_io_bytes bytes
hw_network_io_bytes_total{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1",network_io_direction="receive"} 5.566778899e+09
hw_network_io_bytes_total{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1",network_io_direction="transmit"} 1.372334455e+09
# HELP hw_network_packets Packets through a network port, per direction (OpenTelemetry `hw.*`).
# TYPE hw_network_packets counter
hw_network_packets_total{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1",network_io_direction="receive"} 6.677889e+06
hw_network_packets_total{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1",network_io_direction="transmit"} 2.233445e+06
# HELP hw_network_up_ratio Link status of a network port, 1 (up) or 0 (down) (OpenTelemetry `hw.network.*`).
# TYPE hw_network_up_ratio gauge
# UNIT hw_network_up_ratio ratio
hw_network_up_ratio{accel_host_id="node-a",accel_link_id="node-a/eno1",hw_id="eno1",network_interface_name="eno1"} 1.0
# EOF
"""


def test_golden_openmetrics_text(net_root: Path) -> None:
    """eno1 (1 Gbit/s) sends 250 MB in 2 s (125 MB/s, its whole speed) and drops 5."""
    now = [T0]
    bridge = _bridge(net_root, now, interfaces=["eno1"])
    bridge.sample_once()
    stats = net_root / "eno1" / "statistics"
    (stats / "tx_bytes").write_text(str(1122334455 + 250_000_000) + "\n")
    (stats / "rx_dropped").write_text("5\n")
    now[0] += 2 * 10**9
    bridge.sample_once()
    assert CounterCollector(bridge).render(openmetrics=True).decode() == GOLDEN


# ---- this machine ---------------------------------------------------------------------------
def _proc_net_dev() -> dict[str, list[int]]:
    """/proc/net/dev: interface -> [rx bytes, rx packets, ..., tx bytes, tx packets, ...]."""
    out = {}
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        out[name.strip()] = [int(x) for x in rest.split()]
    return out


@pytest.mark.skipif(
    not (Path("/sys/class/net").is_dir() and Path("/proc/net/dev").is_file()),
    reason="no Linux /sys/class/net here",
)
def test_this_machines_interfaces_agree_with_proc_net_dev() -> None:
    """The kernel's other view of the same counters (/proc/net/dev) lies between two reads."""
    src = NetDevSource(host="me", interfaces=["*"])
    before = src.sample()
    table = _proc_net_dev()
    after = src.sample()
    names = {s.attributes["network.interface.name"] for s in before}
    assert names == set(table) and "lo" in names
    for metric, rx_col, tx_col in (("hw.network.io", 0, 8), ("hw.network.packets", 1, 9)):
        lo = _by(before, metric, "network.interface.name", "network.io.direction")
        hi = _by(after, metric, "network.interface.name", "network.io.direction")
        for name, cols in table.items():
            for direction, col in (("receive", rx_col), ("transmit", tx_col)):
                k = (name, direction)
                assert lo[k] <= cols[col] <= hi[k], (metric, k, lo[k], cols[col], hi[k])
    physical = NetDevSource(host="me").interface_names()
    for name in physical:
        assert os.path.exists(f"/sys/class/net/{name}/device")
        assert not os.path.realpath(f"/sys/class/net/{name}").startswith("/sys/devices/virtual/")
    assert "lo" not in physical


# ---- the agent ------------------------------------------------------------------------------
def _agent_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_agent_detects_net_by_default_and_passes_its_options() -> None:
    assert agent_cli.AUTO_SOURCES == ("nvml", "infiniband", "net", "host")
    (net,) = [s for s in agent_cli.build_sources(_agent_args()) if s.name == "net"]
    assert (net.root, net.include_virtual, net.patterns) == (Path("/sys/class/net"), False, None)
    (net,) = agent_cli.build_sources(
        _agent_args("--source", "net", "--net-sysfs-root", str(NET), "--net-virtual",
                    "--net-interface", "veth*", "--net-interface", "eno1", "--host-id", "H")
    )  # fmt: skip
    assert net.interface_names() == ["eno1", "veth0a"] and net.include_virtual
    assert {s.attributes["accel.host.id"] for s in net.sample()} == {"H"}


# ---- nic_stats: port counters over a window ---------------------------------------------------
def _port_rows(host, iface, times_s, *, rx=None, tx=None, drops=None, errors=None, speed=None,
               up=None, start_ns=0):  # fmt: skip
    """Rows as the loader makes them from the agent's OTLP points."""
    base = {"accel.link.id": f"{host}/{iface}", "accel.host.id": host,
            "network.interface.name": iface, "hw.id": iface}  # fmt: skip
    rows = []

    def add(name, kind, t, v, **more):
        rows.append(dict(name=name, kind=kind, time_ns=T0 + int(t * 1e9), value=float(v),
                         start_time_ns=start_ns, host=host, link=f"{host}/{iface}",
                         attrs=json.dumps({**base, **more}, sort_keys=True)))  # fmt: skip

    for i, t in enumerate(times_s):
        if rx is not None:
            add("hw.network.io", "sum", t, rx[i], **{"network.io.direction": "receive"})
        if tx is not None:
            add("hw.network.io", "sum", t, tx[i], **{"network.io.direction": "transmit"})
        if drops is not None:
            add("hw.errors", "sum", t, drops[i], **{"error.type": "rx_dropped"})
        if errors is not None:
            add("hw.errors", "sum", t, errors[i], **{"error.type": "rx_errors"})
        if speed is not None:
            add("hw.network.bandwidth.limit", "sum", t, speed)
        if up is not None:
            add("hw.network.up", "sum", t, up[i])
    return rows


def test_nic_stats_rates_errors_drops_speed_state() -> None:
    ts = list(range(0, 21))
    rows = _port_rows("hA", "eno1", ts, tx=[5e6 * t for t in ts], rx=[1e3 * t for t in ts],
                      errors=[0] * 21, speed=1.25e8, up=[1] * 21)  # fmt: skip
    rows += _port_rows("hB", "eno1", ts, rx=[4.5e6 * t for t in ts], tx=[0] * 21,
                       drops=[0] * 10 + [30] * 11, errors=[2] * 21, speed=1.25e8,
                       up=[1] * 12 + [0] * 3 + [1] * 6)  # fmt: skip
    rows += _port_rows("hC", "eno1", ts, rx=[9e6 * t for t in ts])
    got = nic_stats(MetricPoints.from_rows(rows), window=(T0 + 5 * 10**9, T0 + 15 * 10**9),
                    hosts=["hA", "hB"])  # fmt: skip
    a, b = got
    assert (a.host, a.interface, a.link, b.host) == ("hA", "eno1", "hA/eno1", "hB")
    assert [r.host for r in nic_stats(MetricPoints.from_rows(rows), hosts="hC")] == ["hC"]
    assert a.from_ns == T0 + 5 * 10**9 and a.to_ns == T0 + 15 * 10**9
    assert a.tx_bytes_per_s == pytest.approx(5e6) and a.rx_bytes_per_s == pytest.approx(1e3)
    assert a.utilization == pytest.approx(0.04) and a.speed_bytes_per_s == 1.25e8
    assert (a.errors, a.drops, a.errors_per_s, a.drops_per_s) == (0.0, 0.0, 0.0, None)
    assert a.up is True and a.down_points == 0
    assert b.rx_bytes_per_s == pytest.approx(4.5e6) and b.tx_bytes_per_s == 0.0
    assert b.drops == 30.0 and b.drops_per_s == pytest.approx(3.0) and b.errors == 0.0
    assert b.error_types == {"rx_dropped": 30.0, "rx_errors": 0.0}
    assert b.up is True and b.down_points == 3
    assert b.describe() == (
        "hB/eno1: rx 4.5 MB/s, tx 0 B/s, of 125 MB/s (3.6 %), 0 errors, 30 drops over 10 s, "
        "link down at 3 points"
    )
    assert NicStat(**b.as_dict()) == b
    json.dumps(b.as_dict())


def test_nic_stats_window_between_samples_uses_the_covering_stretch() -> None:
    ts = [0, 10, 20, 30]
    rows = _port_rows("h", "eth0", ts, rx=[0, 1e9, 3e9, 6e9], speed=1.25e9, up=[1, 0, 0, 1])
    (s,) = nic_stats(MetricPoints.from_rows(rows), window=(T0 + 12 * 10**9, T0 + 14 * 10**9))
    assert (s.from_ns, s.to_ns) == (T0 + 10 * 10**9, T0 + 20 * 10**9)
    assert s.rx_bytes_per_s == pytest.approx(2e8)
    assert s.up is False and s.down_points == 1  # the last state before the window: down
    # a window after the last point: nothing to rate
    (late,) = nic_stats(MetricPoints.from_rows(rows), window=(T0 + 40 * 10**9, T0 + 50 * 10**9))
    assert late.rx_bytes_per_s is None and late.from_ns is None and late.up is True


def test_nic_stats_counts_resets_from_zero() -> None:
    ts = [0, 1, 2, 3]
    rows = _port_rows("h", "eth0", ts[:2], rx=[5e9, 6e9], start_ns=1)
    rows += _port_rows("h", "eth0", ts[2:], rx=[0.5e9, 1.5e9], start_ns=T0 + 2 * 10**9)
    (s,) = nic_stats(MetricPoints.from_rows(rows))
    assert s.resets == 1 and s.rx_bytes_per_s == pytest.approx((1e9 + 0.5e9 + 1e9) / 3)
    # an agent restart (a new start time) goes on from the kernel's counter: no reset
    rows = _port_rows("h", "eth0", ts[:2], rx=[1e9, 2e9], start_ns=1)
    rows += _port_rows("h", "eth0", ts[2:], rx=[3e9, 4e9], start_ns=T0 + 2 * 10**9)
    (s,) = nic_stats(MetricPoints.from_rows(rows))
    assert s.resets == 0 and s.rx_bytes_per_s == pytest.approx(1e9)


def test_nic_stats_reads_infiniband_and_simulated_ports() -> None:
    """Ports named only by their link id (InfiniBand ``HOST/hca:port``; the simulation's
    ``hostN/nic0``, whose errors carry no host attribute) are read alike."""
    rows = []
    for t in range(3):
        for link, host in (("n1/mlx5_0:1", "n1"), ("host1/nic0", "")):
            attrs = json.dumps({"network.io.direction": "transmit"})
            rows.append(dict(name="hw.network.io", kind="sum", time_ns=t * 10**9,
                             value=1e9 * t, host=host, link=link, attrs=attrs))  # fmt: skip
            rows.append(dict(name="hw.errors", kind="sum", time_ns=t * 10**9, value=t,
                             link=link, attrs=json.dumps({"error.type": "retransmit"})))  # fmt: skip
    got = {(s.host, s.interface): (s.tx_bytes_per_s, s.errors) for s in
           nic_stats(MetricPoints.from_rows(rows))}  # fmt: skip
    assert got == {("host1", "nic0"): (1e9, 2.0), ("n1", "mlx5_0:1"): (1e9, 2.0)}


def test_nic_stats_nothing_and_bad_window() -> None:
    assert nic_stats(None) == [] and nic_stats(MetricPoints.from_rows([])) == []
    other = MetricPoints.from_rows([dict(name="hw.power", time_ns=1, value=3.0, device="d")])
    assert nic_stats(other) == []
    with pytest.raises(ValueError, match="window ends before it starts"):
        nic_stats(other, window=(5, 4))


def test_path_nic_evidence_names_both_ends() -> None:
    ts = list(range(11))
    rows = _port_rows("hA", "eno1", ts, tx=[11e6 * t for t in ts], speed=1.25e8)
    rows += _port_rows("hB", "eno1", ts, rx=[10.5e6 * t for t in ts], drops=[t for t in ts])
    rows += _port_rows("hC", "eno1", ts, rx=[99e6 * t for t in ts])
    ev = path_nic_evidence(MetricPoints.from_rows(rows), "hA", "hB")
    assert [p["host"] for p in ev["ports"]] == ["hA", "hB"]
    assert ev["sent_bytes_per_s"] == pytest.approx(11e6)
    assert ev["received_bytes_per_s"] == pytest.approx(10.5e6)
    assert (ev["errors"], ev["drops"]) == (0.0, 10.0)
    assert ev["summary"].startswith("hA/eno1: rx -, tx 11 MB/s, of 125 MB/s (8.8 %)")
    json.dumps(ev)


# ---- nic_stats properties ---------------------------------------------------------------------
_series = st.lists(st.integers(0, 10**12), min_size=2, max_size=12)


@settings(max_examples=80, deadline=None)
@given(
    increments=_series,
    gaps=st.lists(st.integers(3, 5 * 10**9), min_size=11, max_size=11),
    shift=st.integers(-(10**15), 10**15),
    seed=st.integers(0, 2**32 - 1),
    cut=st.integers(1, 10),
)
def test_nic_stats_properties(increments, gaps, shift, seed, cut) -> None:
    """The increase rated is the counter's true increase (never negative), whatever the row
    order, a constant clock shift (window shifted alike), or loading the rows in two parts."""
    t = np.cumsum([0, *gaps[: len(increments) - 1]]).astype(np.int64)
    v = np.cumsum(increments).astype(np.float64)

    def rows_at(offset):
        attrs = json.dumps({"network.io.direction": "receive"})
        return [dict(name="hw.network.io", kind="sum", time_ns=int(a + offset), value=float(b),
                     host="h", link="h/eth0", attrs=attrs) for a, b in zip(t, v)]  # fmt: skip

    rows = rows_at(T0)
    (s,) = nic_stats(MetricPoints.from_rows(rows))
    span_s = (int(t[-1]) - int(t[0])) / 1e9
    assert s.rx_bytes_per_s is not None and s.rx_bytes_per_s >= 0
    assert s.rx_bytes_per_s * span_s == pytest.approx(v[-1] - v[0], rel=1e-9, abs=1e-3)
    shuffled = list(rows)
    np.random.default_rng(seed).shuffle(shuffled)
    assert nic_stats(MetricPoints.from_rows(shuffled)) == [s]
    k = min(cut, len(rows) - 1)
    parts = MetricPoints.concat(
        [MetricPoints.from_rows(rows[:k]), MetricPoints.from_rows(rows[k:])]
    )
    assert nic_stats(parts) == [s]
    window = (T0 + int(t[0]) + 1, T0 + int(t[-1]) - 1)
    (w,) = nic_stats(MetricPoints.from_rows(rows), window=window)
    (ws,) = nic_stats(
        MetricPoints.from_rows(rows_at(T0 + shift)), window=(window[0] + shift, window[1] + shift)
    )
    assert ws.rx_bytes_per_s == pytest.approx(w.rx_bytes_per_s, rel=1e-9)
    assert (ws.to_ns - ws.from_ns) == (w.to_ns - w.from_ns)


# ---- end to end: the agent's OTLP file, loaded, joined ----------------------------------------
def test_agent_file_loaded_gives_the_injected_traffic(net_root: Path, tmp_path: Path) -> None:
    """The bridge's OTLP points, written by the OTLP-JSON file exporter and read by the
    analysis loader, give back through ``nic_stats`` the bytes and drops put into the tree
    (rates are over the SDK's own collection times, so the check is rate × span)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from otel_ext.analysis.loaders import load_paths
    from otel_ext.counters import OtlpCounterBridge
    from otel_ext.exporters import OtlpJsonFileMetricExporter

    path = tmp_path / "metrics.jsonl"
    reader = PeriodicExportingMetricReader(
        OtlpJsonFileMetricExporter(path), export_interval_millis=10**9
    )
    provider = MeterProvider(metric_readers=[reader])
    now = [T0]
    bridge = _bridge(net_root, now, interfaces=["eno1", "ens1f0np0"])
    OtlpCounterBridge(bridge, meter_provider=provider)
    stats = net_root / "eno1" / "statistics"
    sent, dropped = 1122334455, 3
    for _ in range(4):
        bridge.sample_once()
        assert provider.force_flush()
        sent += 40_000_000
        dropped += 7
        (stats / "tx_bytes").write_text(f"{sent}\n")
        (stats / "rx_dropped").write_text(f"{dropped}\n")
        now[0] += 10**9
    provider.shutdown()
    load = load_paths([path], workers=1)
    eno1, ens = nic_stats(load.metrics)
    assert (eno1.host, eno1.interface, ens.interface) == ("node-a", "eno1", "ens1f0np0")
    span_s = (eno1.to_ns - eno1.from_ns) / 1e9
    # four reads: the three changes between them are seen, the last one never read
    assert eno1.tx_bytes_per_s * span_s == pytest.approx(3 * 40e6, rel=1e-9)
    assert eno1.drops == 3 * 7 and eno1.rx_bytes_per_s == 0.0 and ens.tx_bytes_per_s == 0.0
    assert eno1.speed_bytes_per_s == 1.25e8 and ens.speed_bytes_per_s == 12.5e9
    assert eno1.up is True and eno1.error_types["tx_errors"] == 0.0


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.integers(0, 2**53), min_size=2, max_size=30))
def test_nic_stats_increase_equals_the_bridges_counter_delta(values) -> None:
    """Any sequence, resets included: the increase rated is the sum of the bridge's own
    ``counter_delta`` steps (the reference), never negative."""
    from otel_ext.counters import counter_delta

    attrs = json.dumps({"network.io.direction": "transmit"})
    rows = [dict(name="hw.network.io", kind="sum", time_ns=T0 + i * 10**9, value=float(v),
                 host="h", link="h/eth0", attrs=attrs) for i, v in enumerate(values)]  # fmt: skip
    (s,) = nic_stats(MetricPoints.from_rows(rows))
    want = sum(counter_delta(float(a), float(b)) for a, b in pairwise(values))
    assert s.tx_bytes_per_s is not None and s.tx_bytes_per_s >= 0
    assert s.tx_bytes_per_s * (len(values) - 1) == pytest.approx(want, rel=1e-12, abs=1e-6)
    assert s.resets == sum(b < a for a, b in pairwise(values))
