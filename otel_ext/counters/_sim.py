"""The simulated accelerator source, and a small built-in simulated device model.

The simulated cluster (``otel_ext.sim``) plugs in here: any object with
``read(now_ns) -> list[Sample]`` (the :class:`CounterModel` protocol) becomes a counter
source through :class:`SimulatedSource`, exactly like NVML or sysfs. Counters must be
returned as the hardware would show them (cumulative, possibly wrapping: set
``Sample.wrap_bits``); the bridge unfolds and derives.

:class:`BuiltinSimModel` is a stand-alone model so that ``otel-ext exporter --source sim``
works without the cluster: N chips on one host with plausible, slowly varying counters
(32-bit cycle counters that wrap every few seconds, a throttled chip, ring links, tokens,
a collective-duration histogram). With ``varying=False`` every rate is constant and known,
so derived metrics have exact expected values (:meth:`BuiltinSimModel.expected`).

>>> m = BuiltinSimModel(chips=2, varying=False)
>>> src = SimulatedSource(m, clock=iter(range(0, 10**10, 10**9)).__next__)
>>> first = src.sample(); second = src.sample()
>>> sorted({s.metric for s in second})[:3]
['accel.collective.duration', 'accel.device.clock.frequency', 'accel.device.cycles.active']
>>> round(m.expected("host0/chip1")["accel.device.utilization"], 6)
0.45
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from otel_ext.counters._source import BaseSource, HistogramValue, Sample, SeriesDescription
from otel_ext.semconv.attributes import (
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_MODEL,
    ACCEL_HOST_ID,
    ACCEL_LINK_ID,
    GEN_AI_TOKEN_TYPE,
    HW_ID,
    HW_MODEL,
    HW_STATE,
    HW_TYPE,
    HW_VENDOR,
    NETWORK_IO_DIRECTION,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_COLLECTIVE_DURATION,
    METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY,
    METRIC_ACCEL_DEVICE_CYCLES_ACTIVE,
    METRIC_ACCEL_DEVICE_CYCLES_ELAPSED,
    METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE,
    METRIC_ACCEL_DEVICE_OPERATIONS,
    METRIC_ACCEL_DEVICE_THROTTLE_REASONS,
    METRIC_ACCEL_INFERENCE_TOKENS,
    METRIC_ACCEL_LINK_IO,
    METRIC_ACCEL_MEMORY_IO_READ,
    METRIC_ACCEL_MEMORY_IO_WRITTEN,
    METRIC_HW_ENERGY,
    METRIC_HW_GPU_MEMORY_LIMIT,
    METRIC_HW_GPU_MEMORY_USAGE,
    METRIC_HW_GPU_UTILIZATION,
    METRIC_HW_POWER,
    METRIC_HW_STATUS,
    METRIC_HW_TEMPERATURE,
)
from otel_ext.semconv.registry import device_specs

__all__ = ["BuiltinSimModel", "CounterModel", "SimulatedSource"]

CLOCK_SIM = "sim.host"
_HIST_BOUNDS = (0.001, 0.002, 0.005, 0.01, 0.05, 0.1)


@runtime_checkable
class CounterModel(Protocol):
    """What the simulated cluster implements to feed the counter bridge.

    ``read(now_ns)`` returns the current counter values of every simulated device and link
    as :class:`Sample` objects (cumulative counters as the hardware would show them).
    """

    def read(self, now_ns: int) -> list[Sample]: ...


class SimulatedSource(BaseSource):
    """A counter source over a simulated model.

    Args:
        model: a :class:`CounterModel`, or a plain callable ``now_ns -> list[Sample]``.
        name: the source name (``sim``).
        clock: the clock passed to the model, in nanoseconds (``time.time_ns``).
    """

    def __init__(
        self,
        model: CounterModel | Callable[[int], list[Sample]],
        *,
        name: str = "sim",
        clock: Callable[[], int] = time.time_ns,
    ):
        self.name = name
        self._read = model.read if isinstance(model, CounterModel) else model
        self._model = model
        self._clock = clock

    def describe(self) -> list[SeriesDescription]:
        describe = getattr(self._model, "describe", None)
        return list(describe()) if callable(describe) else []

    def sample(self) -> list[Sample]:
        return list(self._read(self._clock()))


class BuiltinSimModel:
    """N simulated chips on one host with plausible counters.

    Args:
        chips: number of chips.
        host: the host name (device ids are ``HOST/chipN``).
        model: the device model (a row of the device-spec table).
        varying: when false, every rate is constant (exact expected derived values).
        throttled_chip: index of a chip whose clock runs at 80 % (throttle reason bit 4),
            ``None`` for none.
        cycle_counter_bits: width of the cycle counters (they wrap around).
    """

    def __init__(
        self,
        *,
        chips: int = 8,
        host: str = "host0",
        model: str = "sim-accel-v1",
        varying: bool = True,
        throttled_chip: int | None = 3,
        cycle_counter_bits: int = 32,
    ):
        self.chips = chips
        self.host = host
        self.model = model
        self.varying = varying
        self.throttled_chip = (
            throttled_chip if (throttled_chip is not None and throttled_chip < chips) else None
        )
        self.bits = cycle_counter_bits
        self.spec = device_specs(model)
        self._last_ns: int | None = None
        self._t0: int | None = None
        self._acc: dict[tuple[str, str], float] = {}
        self._hist: dict[str, list[int]] = {}
        self._hist_sum: dict[str, float] = {}

    def device(self, i: int) -> str:
        return f"{self.host}/chip{i}"

    def link(self, i: int) -> str:
        return f"{self.host}/chip{i}-chip{(i + 1) % self.chips}"

    # The rates, as functions of chip and time (t in seconds since the first read).
    def _wobble(self, i: int, t: float, amp: float) -> float:
        return amp * math.sin(0.7 * t + i) if self.varying else 0.0

    def rates(self, i: int, t: float = 0.0) -> dict[str, float]:
        """Per-second rates and gauge values of chip ``i`` at time ``t``."""
        sp = self.spec
        clock_ratio = 0.8 if i == self.throttled_chip else 1.0
        freq = sp["max_clock"] * clock_ratio
        util = min(0.99, 0.40 + 0.05 * (i % 8) + self._wobble(i, t, 0.05))
        mfu = 0.25 + 0.02 * (i % 8) + self._wobble(i, t, 0.02)
        mbu = 0.50 + 0.03 * (i % 8) + self._wobble(i, t, 0.03)
        power = 250.0 + 20.0 * (i % 8) + self._wobble(i, t, 10.0)
        return {
            "elapsed": freq,
            "active": freq * util,
            "tensor": freq * util * 0.8,
            "ops": mfu * sp["peak_flops_bf16"],
            "rd": mbu * sp["memory_bandwidth"] * 2 / 3,
            "wr": mbu * sp["memory_bandwidth"] / 3,
            "freq": freq,
            "power": power,
            "temp": 50.0 + 2.0 * (i % 8) + self._wobble(i, t, 1.0),
            "link": (0.30 + 0.05 * (i % 8)) * sp["link_bandwidth"],
            "mem_used": 0.5 * sp["memory_size"],
            "collective_s": 0.002 + 0.0005 * (i % 8) + abs(self._wobble(i, t, 0.001)),
        }

    def expected(self, device_id: str) -> dict[str, float]:
        """Exact derived values of a chip when ``varying`` is false (by derived metric)."""
        i = int(device_id.rsplit("chip", 1)[1])
        r, sp = self.rates(i), self.spec
        return {
            "accel.device.utilization": r["active"] / r["elapsed"],
            "accel.device.tensor.utilization": r["tensor"] / r["elapsed"],
            "accel.device.clock.ratio": r["freq"] / sp["max_clock"],
            "accel.device.flops.achieved": r["ops"],
            "accel.device.mfu": r["ops"] / sp["peak_flops_bf16"],
            "accel.memory.bandwidth": r["rd"] + r["wr"],
            "accel.device.mbu": (r["rd"] + r["wr"]) / sp["memory_bandwidth"],
            "accel.device.arithmetic_intensity": r["ops"] / (r["rd"] + r["wr"]),
            "accel.device.power.ratio": r["power"] / sp["power_limit"],
            "accel.link.bandwidth": r["link"],
            "accel.link.bandwidth.utilization": r["link"] / sp["link_bandwidth"],
        }

    def _add(self, key: tuple[str, str], inc: float) -> float:
        v = self._acc.get(key, 0.0) + inc
        self._acc[key] = v
        return v

    def describe(self) -> list[SeriesDescription]:
        dev = (ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_DEVICE_MODEL)
        hw = (*dev, HW_ID, HW_TYPE, HW_VENDOR, HW_MODEL)
        return [
            SeriesDescription(METRIC_ACCEL_DEVICE_CYCLES_ELAPSED, dev, f"wraps at 2**{self.bits}"),
            SeriesDescription(METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, dev, f"wraps at 2**{self.bits}"),
            SeriesDescription(
                METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE, dev, f"wraps at 2**{self.bits}"
            ),
            SeriesDescription(METRIC_ACCEL_DEVICE_OPERATIONS, dev),
            SeriesDescription(METRIC_ACCEL_MEMORY_IO_READ, dev),
            SeriesDescription(METRIC_ACCEL_MEMORY_IO_WRITTEN, dev),
            SeriesDescription(METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, dev),
            SeriesDescription(METRIC_ACCEL_DEVICE_THROTTLE_REASONS, dev),
            SeriesDescription(METRIC_HW_GPU_UTILIZATION, hw, "active / elapsed cycles"),
            SeriesDescription(METRIC_HW_POWER, hw),
            SeriesDescription(METRIC_HW_ENERGY, hw),
            SeriesDescription(METRIC_HW_TEMPERATURE, hw),
            SeriesDescription(METRIC_HW_GPU_MEMORY_USAGE, hw),
            SeriesDescription(METRIC_HW_GPU_MEMORY_LIMIT, hw),
            SeriesDescription(METRIC_HW_STATUS, (*hw, HW_STATE), "always ok"),
            SeriesDescription(
                METRIC_ACCEL_LINK_IO,
                (ACCEL_LINK_ID, *dev, NETWORK_IO_DIRECTION),
            ),
            SeriesDescription(METRIC_ACCEL_INFERENCE_TOKENS, (ACCEL_HOST_ID, GEN_AI_TOKEN_TYPE)),
            SeriesDescription(
                METRIC_ACCEL_COLLECTIVE_DURATION,
                (ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_COLLECTIVE_GROUP),
            ),
        ]

    def read(self, now_ns: int) -> list[Sample]:
        """The counters at ``now_ns`` (integrating the rates since the previous read)."""
        if self._t0 is None:
            self._t0 = now_ns
        dt = 0.0 if self._last_ns is None else max(0.0, (now_ns - self._last_ns) / 1e9)
        self._last_ns = now_ns
        t = (now_ns - self._t0) / 1e9
        out: list[Sample] = []
        host = self.host
        for i in range(self.chips):
            dev = self.device(i)
            r = self.rates(i, t)
            attrs = {ACCEL_DEVICE_ID: dev, ACCEL_HOST_ID: host, ACCEL_DEVICE_MODEL: self.model}
            hw = {
                **attrs,
                HW_ID: f"sim-{host}-{i}",
                HW_TYPE: "gpu",
                HW_VENDOR: str(self.spec.get("vendor", "sim")).upper(),
                HW_MODEL: self.model,
            }
            out.extend(self._device_samples(i, attrs, r, dt, now_ns))
            out.extend(self._hardware_samples(dev, hw, r, dt, now_ns))
            if self.chips > 1:
                out.extend(self._link_samples(i, r, dt, now_ns))
            out.append(self._collective_histogram(dev, r, dt, now_ns))
        for ttype, rate in (("output", 1000.0 * self.chips), ("input", 4000.0 * self.chips)):
            v = self._add((host, ttype), rate * dt)
            out.append(
                Sample(
                    METRIC_ACCEL_INFERENCE_TOKENS,
                    {ACCEL_HOST_ID: host, GEN_AI_TOKEN_TYPE: ttype},
                    v,
                    now_ns,
                    CLOCK_SIM,
                )
            )
        return out

    def _device_samples(
        self, i: int, attrs: dict[str, str], r: dict[str, float], dt: float, now_ns: int
    ) -> list[Sample]:
        """Chip ``i``'s device counters: cycles (wrapping at ``bits``), operations, memory
        bytes, clock frequency, throttle reasons."""
        dev = attrs[ACCEL_DEVICE_ID]
        wrap = 2**self.bits
        out: list[Sample] = []
        for metric, k in (
            (METRIC_ACCEL_DEVICE_CYCLES_ELAPSED, "elapsed"),
            (METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, "active"),
            (METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE, "tensor"),
        ):
            v = self._add((dev, k), r[k] * dt)
            out.append(Sample(metric, attrs, float(int(v) % wrap), now_ns, CLOCK_SIM, self.bits))
        for metric, k in (
            (METRIC_ACCEL_DEVICE_OPERATIONS, "ops"),
            (METRIC_ACCEL_MEMORY_IO_READ, "rd"),
            (METRIC_ACCEL_MEMORY_IO_WRITTEN, "wr"),
        ):
            out.append(Sample(metric, attrs, self._add((dev, k), r[k] * dt), now_ns, CLOCK_SIM))
        out.append(Sample(METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, attrs, r["freq"], now_ns, CLOCK_SIM))
        reasons = 4.0 if i == self.throttled_chip else 0.0  # 0x4: software power cap
        out.append(Sample(METRIC_ACCEL_DEVICE_THROTTLE_REASONS, attrs, reasons, now_ns, CLOCK_SIM))
        return out

    def _hardware_samples(
        self, dev: str, hw: dict[str, str], r: dict[str, float], dt: float, now_ns: int
    ) -> list[Sample]:
        """A chip's ``hw.*`` series: utilization, status (always ok), power, energy,
        temperature, memory in use and its limit."""
        util = r["active"] / r["elapsed"] if r["elapsed"] else 0.0
        out = [Sample(METRIC_HW_GPU_UTILIZATION, hw, util, now_ns, CLOCK_SIM)]
        for state in ("ok", "degraded", "failed"):
            status = {**hw, HW_STATE: state}
            ok = 1.0 if state == "ok" else 0.0
            out.append(Sample(METRIC_HW_STATUS, status, ok, now_ns, CLOCK_SIM))
        energy = self._add((dev, "energy"), r["power"] * dt)
        memory_size = float(self.spec["memory_size"])
        out += [
            Sample(METRIC_HW_POWER, hw, r["power"], now_ns, CLOCK_SIM),
            Sample(METRIC_HW_ENERGY, hw, energy, now_ns, CLOCK_SIM),
            Sample(METRIC_HW_TEMPERATURE, hw, r["temp"], now_ns, CLOCK_SIM),
            Sample(METRIC_HW_GPU_MEMORY_USAGE, hw, r["mem_used"], now_ns, CLOCK_SIM),
            Sample(METRIC_HW_GPU_MEMORY_LIMIT, hw, memory_size, now_ns, CLOCK_SIM),
        ]
        return out

    def _link_samples(self, i: int, r: dict[str, float], dt: float, now_ns: int) -> list[Sample]:
        """Chip ``i``'s ring link to its successor: bytes each way."""
        out: list[Sample] = []
        for direction in ("transmit", "receive"):
            la = {
                ACCEL_LINK_ID: self.link(i),
                ACCEL_DEVICE_ID: self.device(i),
                ACCEL_HOST_ID: self.host,
                ACCEL_DEVICE_MODEL: self.model,
                NETWORK_IO_DIRECTION: direction,
            }
            v = self._add((self.link(i), direction), r["link"] * dt)
            out.append(Sample(METRIC_ACCEL_LINK_IO, la, v, now_ns, CLOCK_SIM))
        return out

    def _collective_histogram(
        self, dev: str, r: dict[str, float], dt: float, now_ns: int
    ) -> Sample:
        """A chip's ``accel.collective.duration`` histogram, one observation per read that
        moved time forward."""
        counts = self._hist.setdefault(dev, [0] * (len(_HIST_BOUNDS) + 1))
        obs = r["collective_s"]
        if dt > 0:
            idx = next((j for j, b in enumerate(_HIST_BOUNDS) if obs <= b), len(_HIST_BOUNDS))
            counts[idx] += 1
            self._hist_sum[dev] = self._hist_sum.get(dev, 0.0) + obs
        return Sample(
            METRIC_ACCEL_COLLECTIVE_DURATION,
            {ACCEL_DEVICE_ID: dev, ACCEL_HOST_ID: self.host, ACCEL_COLLECTIVE_GROUP: "tp0"},
            HistogramValue(
                _HIST_BOUNDS,
                tuple(counts),
                self._hist_sum.get(dev, 0.0),
                obs if dt > 0 else None,
            ),
            now_ns,
            CLOCK_SIM,
        )
