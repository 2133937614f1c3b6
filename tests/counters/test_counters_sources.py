"""Counter sources: NVML (fake pynvml module), /proc and sysfs (recorded trees)."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from otel_ext.counters import CounterBridge, HostSource, InfinibandSource, NvmlSource
from otel_ext.counters._host import parse_meminfo, parse_pid_stat, parse_proc_stat
from otel_ext.errors import SourceUnavailableError

PROC = FIXTURES / "proc"
IB = FIXTURES / "sysfs" / "class" / "infiniband"


# ---- a fake pynvml module ---------------------------------------------------------------
class FakeNVMLError(Exception):
    def __init__(self, value):
        self.value = value

    def __str__(self):
        return {12: "NVML Shared Library Not Found", 15: "GPU is lost", 3: "Not Supported"}.get(
            self.value, "err"
        )


def fake_nvml(*, gpus=2, init_error=None):
    """A module object with the pynvml calls NvmlSource makes; state in ``m.state``."""
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    consts = dict(
        NVML_ERROR_GPU_IS_LOST=15,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_FUNCTION_NOT_FOUND=13,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_FI_DEV_NVLINK_LINK_COUNT=91,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=138,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=139,
        NVML_FI_DEV_PCIE_COUNT_TX_BYTES=197,
        NVML_FI_DEV_PCIE_COUNT_RX_BYTES=198,
    )
    for k, v in consts.items():
        setattr(m, k, v)
    m.state = {
        "lost": set(),
        "energy_mj": [1_000_000, 2_000_000],
        "calls": {"shutdown": 0},
        "no_ecc": {1},
    }

    def check(h):
        if h in m.state["lost"]:
            raise FakeNVMLError(15)

    def init():
        if init_error is not None:
            raise FakeNVMLError(init_error)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.state["calls"].__setitem__(
        "shutdown", m.state["calls"]["shutdown"] + 1
    )
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-0000-{h}"
    mem = types.SimpleNamespace(total=85_520_809_984, used=40_000_000_000, free=45_520_809_984)

    def memory(h):
        check(h)
        return mem

    def util(h):
        check(h)
        return types.SimpleNamespace(gpu=87, memory=40)

    def clock(h, kind):
        check(h)
        return 1980 if kind == 1 else 2619

    def power(h):
        check(h)
        return 412_345  # mW

    def energy(h):
        check(h)
        return m.state["energy_mj"][h]

    def temp(h, sensor):
        check(h)
        return 61

    def pcie(h, counter):
        check(h)
        return 1000 if counter == 0 else 2000  # KB/s

    def ecc(h, etype, counter):
        check(h)
        if h in m.state["no_ecc"]:
            raise FakeNVMLError(3)
        return 5 if etype == 0 else 0

    def throttle(h):
        check(h)
        return 0x4

    def fields(h, ids):
        check(h)
        out = []
        for fid in ids:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            value = {91: 2, 138: 100 + scope, 139: 200 + scope, 197: 10_000, 198: 20_000}[fid]
            out.append(
                types.SimpleNamespace(
                    fieldId=fid,
                    scopeId=scope,
                    timestamp=1_700_000_000_000_000,
                    valueType=3,
                    nvmlReturn=0,
                    value=types.SimpleNamespace(ullVal=value),
                )
            )
        return out

    m.nvmlDeviceGetMemoryInfo = memory
    m.nvmlDeviceGetUtilizationRates = util
    m.nvmlDeviceGetClockInfo = clock
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetTemperature = temp
    m.nvmlDeviceGetPcieThroughput = pcie
    m.nvmlDeviceGetTotalEccErrors = ecc
    m.nvmlDeviceGetCurrentClocksEventReasons = throttle
    m.nvmlDeviceGetFieldValues = fields
    return m


def by_metric(samples):
    out = {}
    for s in samples:
        out.setdefault(s.metric, []).append(s)
    return out


def test_nvml_reads_and_converts_units():
    nv = fake_nvml(gpus=1)
    src = NvmlSource(nvml=nv, host="node-a", clock=lambda: 5)
    src.open()
    got = by_metric(src.sample())
    (power,) = got["hw.power"]
    assert power.value == 412.345
    assert dict(power.attributes) == {
        "accel.device.id": "node-a/gpu0",
        "accel.host.id": "node-a",
        "accel.device.model": "H100-SXM5-80GB",
        "accel.device.index": 0,
        "hw.id": "GPU-0000-0",
        "hw.type": "gpu",
        "hw.vendor": "NVIDIA",
        "hw.model": "NVIDIA H100 80GB HBM3",
    }
    assert got["hw.energy"][0].value == 1000.0  # mJ -> J
    assert got["hw.gpu.utilization"][0].value == 0.87
    assert got["hw.gpu.memory.utilization"][0].value == 0.40
    assert got["accel.device.clock.frequency"][0].value == 1.98e9
    assert got["accel.device.memory.clock.frequency"][0].value == 2.619e9
    assert got["hw.temperature"][0].value == 61
    assert got["hw.gpu.memory.limit"][0].value == 85_520_809_984
    assert {
        s.attributes["network.io.direction"]: s.value for s in got["accel.pcie.throughput"]
    } == {"transmit": 1024_000.0, "receive": 2048_000.0}
    assert {s.attributes["network.io.direction"]: s.value for s in got["accel.pcie.io"]} == {
        "transmit": 10_000.0,
        "receive": 20_000.0,
    }
    links = {
        (s.attributes["accel.link.id"], s.attributes["network.io.direction"]): s.value
        for s in got["accel.link.io"]
    }
    assert links == {
        ("node-a/gpu0-nvlink0", "transmit"): 100 * 1024.0,
        ("node-a/gpu0-nvlink0", "receive"): 200 * 1024.0,
        ("node-a/gpu0-nvlink1", "transmit"): 101 * 1024.0,
        ("node-a/gpu0-nvlink1", "receive"): 201 * 1024.0,
    }
    assert got["accel.link.io"][0].timestamp_ns == 1_700_000_000_000_000_000  # field timestamp (us)
    assert {s.attributes["error.type"]: s.value for s in got["hw.errors"]} == {
        "corrected": 5,
        "uncorrected": 0,
    }
    assert {s.attributes["hw.type"] for s in got["hw.errors"]} == {"gpu"}
    # only uncorrected errors degrade a GPU
    assert {s.attributes["hw.state"]: s.value for s in got["hw.status"]} == {
        "ok": 1.0,
        "degraded": 0.0,
        "failed": 0.0,
    }
    assert got["accel.device.throttle.reasons"][0].value == 4
    src.close()
    src.close()
    assert nv.state["calls"]["shutdown"] == 1


def test_nvml_without_driver_is_one_line_error():
    src = NvmlSource(nvml=fake_nvml(init_error=12))
    with pytest.raises(SourceUnavailableError) as err:
        src.open()
    assert "\n" not in str(err.value) and "NVML Shared Library Not Found" in str(err.value)


def test_nvml_unsupported_reading_is_skipped_for_that_gpu_only():
    src = NvmlSource(nvml=fake_nvml(gpus=2), host="h", clock=lambda: 5)
    src.open()
    ecc = by_metric(src.sample())["hw.errors"]
    assert {s.attributes["accel.device.id"] for s in ecc} == {"h/gpu0"}


def test_nvml_lost_gpu_goes_stale_and_the_bridge_keeps_running():
    nv = fake_nvml(gpus=2)
    t = [0]

    def clock():
        t[0] += 10**9
        return t[0]

    src = NvmlSource(nvml=nv, host="h", clock=clock)
    bridge = CounterBridge([src], clock=clock)
    bridge.open()
    bridge.sample_once()
    nv.state["energy_mj"][0] += 500_000  # 500 J in one second
    bridge.sample_once()
    assert {s.attributes["accel.device.id"] for s in bridge.families()["hw.power"]} == {
        "h/gpu0",
        "h/gpu1",
    }
    nv.state["lost"].add(1)
    bridge.sample_once()
    fams = bridge.families()
    assert {s.attributes["accel.device.id"] for s in fams["hw.power"]} == {"h/gpu0"}
    assert all(
        s.attributes.get("accel.device.id") != "h/gpu1"
        for metric, fam in fams.items()
        if metric != "hw.status"
        for s in fam
    )
    # the lost GPU's one remaining series is its status: failed
    assert {
        s.attributes["hw.state"]: s.value
        for s in fams["hw.status"]
        if s.attributes["accel.device.id"] == "h/gpu1"
    } == {"ok": 0.0, "degraded": 0.0, "failed": 1.0}
    assert bridge.health()["sources"]["nvml"]["up"]
    power_ratio = {
        s.attributes["accel.device.id"]: s.value for s in fams["accel.device.power.ratio"]
    }
    assert power_ratio == {"h/gpu0": pytest.approx(412.345 / 700.0)}


def test_nvml_model_matching_picks_nearest_memory():
    from otel_ext.counters import match_device_model
    from otel_ext.semconv.registry import load_registry

    table = load_registry().device_specs
    assert match_device_model("NVIDIA H200", 150e9, table) == "H200-SXM-141GB"
    assert match_device_model("NVIDIA A100-SXM4-80GB", 85e9, table) == "A100-SXM4-80GB"
    assert match_device_model("NVIDIA GeForce RTX 4090", 24e9, table) == "NVIDIA GeForce RTX 4090"


# ---- host ---------------------------------------------------------------------------------
def _pid(root: Path) -> int:
    return int(next(p.name for p in root.iterdir() if p.name.isdigit()))


def test_host_source_against_recorded_proc():
    pid = _pid(PROC / "t0")
    clock = iter([10**9, 2 * 10**9]).__next__
    src = HostSource(
        proc_root=PROC / "t0", pid=pid, host="node-a", ticks_per_second=100, clock=clock
    )
    src.open()
    first = by_metric(src.sample())
    stat0 = parse_proc_stat((PROC / "t0" / "stat").read_text())
    assert {s.attributes["cpu.mode"]: s.value for s in first["system.cpu.time"]} == {
        m: v / 100 for m, v in stat0.items()
    }
    mem = parse_meminfo((PROC / "t0" / "meminfo").read_text())
    assert first["system.memory.limit"][0].value == mem["MemTotal"]
    states = {s.attributes["system.memory.state"]: s.value for s in first["system.memory.usage"]}
    assert sum(states.values()) == mem["MemTotal"]
    assert "system.cpu.utilization" not in first  # needs two samples
    src.root = PROC / "t1"
    second = by_metric(src.sample())
    stat1 = parse_proc_stat((PROC / "t1" / "stat").read_text())
    idle = (stat1["idle"] + stat1["iowait"]) - (stat0["idle"] + stat0["iowait"])
    busy = 1 - idle / (sum(stat1.values()) - sum(stat0.values()))
    assert second["system.cpu.utilization"][0].value == pytest.approx(busy)
    u0, _s0 = parse_pid_stat((PROC / "t0" / str(pid) / "stat").read_text())
    u1, s1 = parse_pid_stat((PROC / "t1" / str(pid) / "stat").read_text())
    proc = {s.attributes["cpu.mode"]: s.value for s in second["process.cpu.time"]}
    assert proc == {"user": u1 / 100, "system": s1 / 100}
    assert u1 - u0 >= 80  # the recorded workload was spinning for the second between


def test_host_source_workload_exit_drops_process_series(tmp_path):
    root = tmp_path / "proc"
    shutil.copytree(PROC / "t0", root)
    pid = _pid(root)
    src = HostSource(proc_root=root, pid=pid, host="h", ticks_per_second=100)
    assert "process.cpu.time" in by_metric(src.sample())
    shutil.rmtree(root / str(pid))
    got = by_metric(src.sample())
    assert "process.cpu.time" not in got and "system.cpu.time" in got


def test_host_source_missing_proc_is_unavailable(tmp_path):
    with pytest.raises(SourceUnavailableError, match="not readable"):
        HostSource(proc_root=tmp_path).open()


@given(
    st.text(
        alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
        max_size=20,
    ),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
)
def test_parse_pid_stat_handles_any_process_name(name, utime, stime):
    line = f"77 ({name}) R 1 2 3 4 5 6 7 8 9 10 {utime} {stime} 0 0 20 0 1 0 5"
    assert parse_pid_stat(line) == (utime, stime)


# ---- InfiniBand -----------------------------------------------------------------------------
def test_infiniband_reads_recorded_tree_words_to_bytes():
    src = InfinibandSource(root=IB, host="node-a", clock=lambda: 7)
    src.open()
    got = by_metric(src.sample())
    io = {
        (s.attributes["accel.link.id"], s.attributes["network.io.direction"]): s.value
        for s in got["hw.network.io"]
    }
    assert io == {
        ("node-a/mlx5_0:1", "transmit"): 1234567890123 * 4,
        ("node-a/mlx5_0:1", "receive"): 987654321098 * 4,
        ("node-a/mlx5_1:1", "transmit"): 55555555555 * 4,
        ("node-a/mlx5_1:1", "receive"): 44444444444 * 4,
    }
    pk = {
        (s.attributes["accel.link.id"], s.attributes["network.io.direction"]): s.value
        for s in got["hw.network.packets"]
    }
    assert pk[("node-a/mlx5_0:1", "transmit")] == 4567890123
    errs = {
        (s.attributes["accel.link.id"], s.attributes["error.type"]): s.value
        for s in got["hw.errors"]
    }
    assert (
        errs[("node-a/mlx5_0:1", "symbol_error")] == 3
        and errs[("node-a/mlx5_1:1", "link_downed")] == 1
    )


def test_infiniband_bandwidth_and_unplugged_port(tmp_path):
    root = tmp_path / "infiniband"
    shutil.copytree(IB, root)
    now = [10**9]

    def clock():
        return now[0]

    bridge = CounterBridge([InfinibandSource(root=root, host="n", clock=clock)], clock=clock)
    bridge.open()
    bridge.sample_once()
    data = root / "mlx5_0" / "ports" / "1" / "counters" / "port_xmit_data"
    data.write_text(str(1234567890123 + 2_500_000_000) + "\n")  # 10 GB in 2 s
    now[0] += 2 * 10**9
    bridge.sample_once()
    bw = {
        (s.attributes["accel.link.id"], s.attributes["network.io.direction"]): s.value
        for s in bridge.families()["accel.nic.bandwidth"]
    }
    assert bw[("n/mlx5_0:1", "transmit")] == 5e9 and bw[("n/mlx5_0:1", "receive")] == 0.0
    shutil.rmtree(root / "mlx5_1")
    now[0] += 2 * 10**9
    bridge.sample_once()
    links = {s.attributes["accel.link.id"] for s in bridge.families()["hw.network.io"]}
    assert links == {"n/mlx5_0:1"}


def test_infiniband_absent_is_unavailable(tmp_path):
    with pytest.raises(SourceUnavailableError, match="no InfiniBand"):
        InfinibandSource(root=tmp_path / "nope").open()
