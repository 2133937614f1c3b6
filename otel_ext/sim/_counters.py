"""The simulated hardware counters, consistent with the work the engine did.

:class:`SimCounterModel` is fed by the engine (kernels with their FLOPs and bytes,
all-reduce waits, link and NIC transfers, tokens) and, when read at a virtual time, returns
the counters a driver would expose then, as :class:`otel_ext.counters.Sample` objects:
cycle counters (elapsed, active, tensor-active), the core clock frequency, FLOPs, memory
bytes read and written, kernels, power, energy, temperature, memory in use, chip-to-chip
link bytes per direction, NIC bytes per direction, and the serving engine's token, request
and queue counters. Work that straddles a read is counted pro rata, so cumulative counters
grow smoothly and their rates equal the work done.

Each chip's part in each all-reduce is counted too, when the collective completes (the
registry's ``accel.collective.*`` counters are about *completed* collectives):
``accel.collective.io`` (payload bytes), ``accel.collective.bus.io`` (payload bytes times
the op's bus-bandwidth factor, 2(n-1)/n for an all-reduce), ``accel.collective.time`` (enter
to exit) and ``accel.collective.wait.time`` (enter to the last member's arrival), per chip,
group and op. Device, power and link series carry ``accel.device.model`` so that the
counter bridge can evaluate the registry's ratio metrics (MFU, MBU, link utilization).

It is also the *model* the counter bridge's ``SimulatedSource`` reads live: :meth:`read`
advances the model to a virtual time, :meth:`latest` returns the last reading without
advancing, and :meth:`describe` lists the series.

>>> from otel_ext.sim._config import SimConfig
>>> from otel_ext.sim._clocks import EPOCH_NS
>>> spec = {"max_clock": 1.5e9, "power_limit": 500.0, "memory_size": 64e9}
>>> model = SimCounterModel(SimConfig(hosts=1, chips=1), spec)
>>> joules = model.add_compute(0, EPOCH_NS, EPOCH_NS + 1_000_000, flops=1e9, read_bytes=2e6,
...                            written_bytes=1e6, tensor_fraction=0.5, clock_ratio=1.0, kernels=3)
>>> round(joules, 6)  # its dynamic energy: (0.95 x 500 - 90) W x (0.55 + 0.45 x 0.5) x 1 ms
0.298375
>>> half = {s.metric: s.value for s in model.read(EPOCH_NS + 500_000)}
>>> half["accel.device.operations"], half["accel.device.cycles.active"]
(500000000.0, 750000.0)
>>> full = {s.metric: s.value for s in model.read(EPOCH_NS + 2_000_000)}
>>> full["accel.device.operations"], full["accel.device.kernels"]
(1000000000.0, 3.0)

An all-reduce of 1 MB over 2 chips: chip 0 entered at 1 ms and waited 2 ms for chip 1.

>>> model = SimCounterModel(SimConfig(hosts=1, chips=2), spec)
>>> ms = 1_000_000
>>> model.add_collective(0, group="host0/tp", op="all_reduce", group_size=2,
...                      enter_ns=EPOCH_NS + ms, last_arrival_ns=EPOCH_NS + 3 * ms,
...                      exit_ns=EPOCH_NS + 4 * ms, nbytes=1_000_000)
>>> got = {s.metric: s.value for s in model.read(EPOCH_NS + 5 * ms)
...        if s.attributes.get("accel.device.id") == "host0/chip0"
...        and s.metric.startswith("accel.collective.")}
>>> got["accel.collective.io"], got["accel.collective.bus.io"]
(1000000.0, 1000000.0)
>>> round(got["accel.collective.time"], 6), round(got["accel.collective.wait.time"], 6)
(0.003, 0.002)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from otel_ext.counters import Sample, SeriesDescription
from otel_ext.instrumentation.collectives import bus_factor
from otel_ext.semconv.attributes import (
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_OP,
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_MODEL,
    ACCEL_HOST_ID,
    ACCEL_LINK_ID,
    ERROR_TYPE,
    GEN_AI_TOKEN_TYPE,
    HW_ID,
    NETWORK_IO_DIRECTION,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_COLLECTIVE_BUS_IO,
    METRIC_ACCEL_COLLECTIVE_IO,
    METRIC_ACCEL_COLLECTIVE_TIME,
    METRIC_ACCEL_COLLECTIVE_WAIT_TIME,
    METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY,
    METRIC_ACCEL_DEVICE_CYCLES_ACTIVE,
    METRIC_ACCEL_DEVICE_CYCLES_ELAPSED,
    METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE,
    METRIC_ACCEL_DEVICE_KERNELS,
    METRIC_ACCEL_DEVICE_OPERATIONS,
    METRIC_ACCEL_INFERENCE_QUEUE_DEPTH,
    METRIC_ACCEL_INFERENCE_REQUESTS,
    METRIC_ACCEL_INFERENCE_TOKENS,
    METRIC_ACCEL_LINK_IO,
    METRIC_ACCEL_MEMORY_IO_READ,
    METRIC_ACCEL_MEMORY_IO_WRITTEN,
    METRIC_HW_ENERGY,
    METRIC_HW_ERRORS,
    METRIC_HW_GPU_MEMORY_LIMIT,
    METRIC_HW_GPU_MEMORY_USAGE,
    METRIC_HW_NETWORK_IO,
    METRIC_HW_POWER,
    METRIC_HW_TEMPERATURE,
)
from otel_ext.sim._clocks import EPOCH_NS
from otel_ext.sim._config import SimConfig, chip_name, host_name, nic_name

__all__ = ["SimCounterModel"]

_IDLE_POWER_FRACTION = 0.18
_AMBIENT_C = 32.0
_C_PER_WATT = 0.09
_THERMAL_TAU_S = 2.0
_COOLING_FAILURE_C = 38.0
#: the collective counters of a chip, in the order of :attr:`_Collectives.cum`
_COLLECTIVE_METRICS = (
    METRIC_ACCEL_COLLECTIVE_IO,
    METRIC_ACCEL_COLLECTIVE_BUS_IO,
    METRIC_ACCEL_COLLECTIVE_TIME,
    METRIC_ACCEL_COLLECTIVE_WAIT_TIME,
)


@dataclass
class _Work:
    start: int
    end: int
    done_until: int
    totals: tuple[float, ...]


@dataclass
class _Collectives:
    """One chip's counters for one (group, op): payload, bus bytes, time, wait (s)."""

    attrs: dict[str, str]
    cum: list[float] = field(default_factory=lambda: [0.0] * 4)
    pending: list[_Work] = field(default_factory=list)


@dataclass
class _Chip:
    host: int
    chip: int
    attrs: dict[str, str]
    hw_attrs: dict[str, str]
    # cumulative: active cycles, tensor cycles, flops, read, written, kernels, extra joules
    cum: list[float] = field(default_factory=lambda: [0.0] * 7)
    pending: list[_Work] = field(default_factory=list)
    elapsed_cycles: float = 0.0
    energy: float = 0.0
    temperature: float = _AMBIENT_C + 8.0
    power: float = 0.0
    collectives: dict[tuple[str, str], _Collectives] = field(default_factory=dict)


class SimCounterModel:
    """The cluster's counters as a function of virtual time; see the module docstring.

    Args:
        config: the simulation configuration (topology).
        specs: the chip's device-spec row (``max_clock``, ``power_limit``, ``memory_size``).
        host_clock: maps (host index, true ns) to that host's clock reading, the timestamp
            the samples carry; identity when ``None``.
        clock_ratio: (host, chip, true ns) -> core clock fraction (throttling).
        cooling_failed_at: (host, chip) -> true ns when the chip's cooling failed, or None.
        weights_bytes_per_chip: memory the model's weights take on each chip.
        kv_bytes_per_token: KV-cache bytes per token (spread over the host's chips).
    """

    def __init__(
        self,
        config: SimConfig,
        specs: dict[str, float],
        *,
        host_clock: Callable[[int, int], int] | None = None,
        clock_ratio: Callable[[int, int, int], float] | None = None,
        cooling_failed_at: Callable[[int, int], int | None] | None = None,
        weights_bytes_per_chip: float = 0.0,
        kv_bytes_per_token: float = 0.0,
    ) -> None:
        self.config = config
        self.max_clock = float(specs["max_clock"])
        self.power_limit = float(specs["power_limit"])
        self.memory_size = float(specs["memory_size"])
        self.idle_power = self.power_limit * _IDLE_POWER_FRACTION
        self._host_clock = host_clock or (lambda _h, t: t)
        self._ratio = clock_ratio or (lambda _h, _c, _t: 1.0)
        self._cooling = cooling_failed_at or (lambda _h, _c: None)
        self._weights = weights_bytes_per_chip
        self._kv_per_token = kv_bytes_per_token
        self._rng = random.Random(f"counters:{config.seed}")
        self.device_model = config.device_model
        model = self.device_model
        self.chips: list[_Chip] = []
        for h in range(config.hosts):
            for c in range(config.chips):
                dev = chip_name(h, c)
                chip = _Chip(
                    h,
                    c,
                    {ACCEL_DEVICE_ID: dev, ACCEL_HOST_ID: host_name(h), ACCEL_DEVICE_MODEL: model},
                    {
                        ACCEL_DEVICE_ID: dev,
                        HW_ID: dev,
                        ACCEL_HOST_ID: host_name(h),
                        ACCEL_DEVICE_MODEL: model,
                    },
                )
                if config.chips > 1:  # the tensor-parallel group's all-reduces, from the start
                    self._collectives(chip, f"{host_name(h)}/tp", "all_reduce")
                self.chips.append(chip)
        # (link, direction) -> [cumulative bytes, pending]
        self._links: dict[tuple[str, str], tuple[list[float], list[_Work]]] = {}
        self._nics: dict[tuple[int, str], tuple[list[float], list[_Work]]] = {}
        for h in range(config.hosts):
            for direction in ("transmit", "receive"):
                self._nics[(h, direction)] = ([0.0], [])
        # host -> (time counted, errors) of its network port
        self._nic_errors: dict[int, list[tuple[int, int]]] = {h: [] for h in range(config.hosts)}
        self._tokens: dict[tuple[int, str], list[tuple[int, int]]] = {}
        self._requests: dict[int, list[int]] = {h: [] for h in range(config.hosts)}
        self._kv_tokens: dict[int, list[tuple[int, int]]] = {h: [] for h in range(config.hosts)}
        self._queue: dict[int, list[tuple[int, int]]] = {h: [] for h in range(config.hosts)}
        self._now = EPOCH_NS
        self._latest: list[Sample] = []

    # -- feed (from the engine) -----------------------------------------------------------
    def add_compute(
        self,
        chip: int,
        start_ns: int,
        end_ns: int,
        *,
        flops: float,
        read_bytes: float,
        written_bytes: float,
        tensor_fraction: float,
        clock_ratio: float,
        kernels: int,
    ) -> float:
        """A compute kernel (group) on chip number ``chip`` (host-major index); returns the
        dynamic energy it adds (J, above idle power)."""
        dur_s = (end_ns - start_ns) / 1e9
        cycles = dur_s * self.max_clock * clock_ratio
        dyn = (self.power_limit * 0.95 - self.idle_power) * (0.55 + 0.45 * tensor_fraction)
        joules = dyn * clock_ratio**2 * dur_s
        state = self.chips[chip]
        state.pending.append(
            _Work(
                start_ns,
                end_ns,
                start_ns,
                (
                    cycles,
                    cycles * tensor_fraction,
                    flops,
                    read_bytes,
                    written_bytes,
                    float(kernels),
                    joules,
                ),
            )
        )
        return joules

    def add_comm(self, chip: int, start_ns: int, end_ns: int, *, clock_ratio: float) -> float:
        """A communication kernel (an all-reduce, waiting included) on chip ``chip``; returns
        the dynamic energy it adds (J)."""
        dur_s = (end_ns - start_ns) / 1e9
        cycles = dur_s * self.max_clock * clock_ratio
        joules = 0.22 * (self.power_limit - self.idle_power) * dur_s
        state = self.chips[chip]
        state.pending.append(
            _Work(start_ns, end_ns, start_ns, (cycles, 0.0, 0.0, 0.0, 0.0, 1.0, joules))
        )
        return joules

    @staticmethod
    def _collectives(state: _Chip, group: str, op: str) -> _Collectives:
        series = state.collectives.get((group, op))
        if series is None:
            series = state.collectives[(group, op)] = _Collectives(
                {
                    ACCEL_DEVICE_ID: state.attrs[ACCEL_DEVICE_ID],
                    ACCEL_HOST_ID: state.attrs[ACCEL_HOST_ID],
                    ACCEL_COLLECTIVE_GROUP: group,
                    ACCEL_COLLECTIVE_OP: op,
                }
            )
        return series

    def add_collective(
        self,
        chip: int,
        *,
        group: str,
        op: str,
        group_size: int,
        enter_ns: int,
        last_arrival_ns: int,
        exit_ns: int,
        nbytes: int,
    ) -> None:
        """Chip ``chip``'s part in one collective, counted when it completes (``exit_ns``).

        Args:
            chip: host-major chip index.
            group: the group's name (``host0/tp``).
            op: the op (``all_reduce``).
            group_size: members of the group (for the bus-bandwidth factor).
            enter_ns: when this chip entered the collective (its compute ended).
            last_arrival_ns: when the last member entered.
            exit_ns: when the collective completed on this chip.
            nbytes: payload bytes of this chip's buffer.
        """
        series = self._collectives(self.chips[chip], group, op)
        series.pending.append(
            _Work(
                exit_ns,
                exit_ns,
                exit_ns,
                (
                    float(nbytes),
                    nbytes * bus_factor(op, group_size),
                    (exit_ns - enter_ns) / 1e9,
                    max(0, last_arrival_ns - enter_ns) / 1e9,
                ),
            )
        )

    def add_link(self, link: str, direction: str, start_ns: int, end_ns: int, nbytes: int) -> None:
        """Bytes over a chip-to-chip link in one direction."""
        _cum, pending = self._links.setdefault((link, direction), ([0.0], []))
        pending.append(_Work(start_ns, end_ns, start_ns, (float(nbytes),)))

    def add_nic(
        self, host: int, direction: str, start_ns: int, end_ns: int, nbytes: int, *, errors: int = 0
    ) -> None:
        """Bytes through a host's NIC in one direction, and the port errors counted meanwhile."""
        _, pending = self._nics[(host, direction)]
        pending.append(_Work(start_ns, end_ns, start_ns, (float(nbytes),)))
        if errors:
            self._nic_errors[host].append((end_ns, errors))

    def add_tokens(self, host: int, token_type: str, count: int, at_ns: int) -> None:
        """Tokens processed (input) or generated (output) by a host's engine."""
        self._tokens.setdefault((host, token_type), []).append((at_ns, count))

    def add_request_done(self, host: int, at_ns: int) -> None:
        """A request completed (counted by its front-end host)."""
        self._requests[host].append(at_ns)

    def set_kv_tokens(self, host: int, tokens: int, at_ns: int) -> None:
        """Tokens held in a host's KV cache from ``at_ns`` on."""
        self._kv_tokens[host].append((at_ns, tokens))

    def set_queue_depth(self, host: int, depth: int, at_ns: int) -> None:
        """Requests waiting on a host from ``at_ns`` on."""
        self._queue[host].append((at_ns, depth))

    # -- reading ----------------------------------------------------------------------------
    @staticmethod
    def _advance(pending: list[_Work], cum: list[float], now: int) -> None:
        keep = []
        for work in pending:
            if work.start >= now:
                keep.append(work)
                continue
            upto = min(now, work.end)
            span = work.end - work.start
            frac = 1.0 if span <= 0 else (upto - work.done_until) / span
            if frac > 0:
                for i, total in enumerate(work.totals):
                    cum[i] += total * frac
            work.done_until = upto
            if work.end > now:
                keep.append(work)
        pending[:] = keep

    @staticmethod
    def _last_at(series: list[tuple[int, int]], now: int) -> int:
        value = 0
        for at, v in series:
            if at > now:
                break
            value = v
        return value

    def describe(self) -> list[SeriesDescription]:
        """The series :meth:`read` yields."""
        dev = (ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_DEVICE_MODEL)
        hw = (ACCEL_DEVICE_ID, HW_ID, ACCEL_HOST_ID, ACCEL_DEVICE_MODEL)
        link = (ACCEL_LINK_ID, ACCEL_HOST_ID, NETWORK_IO_DIRECTION, ACCEL_DEVICE_MODEL)
        nic = (ACCEL_LINK_ID, ACCEL_HOST_ID, NETWORK_IO_DIRECTION)
        coll = (ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_COLLECTIVE_GROUP, ACCEL_COLLECTIVE_OP)
        return [
            *(
                SeriesDescription(m, dev)
                for m in (
                    METRIC_ACCEL_DEVICE_CYCLES_ELAPSED,
                    METRIC_ACCEL_DEVICE_CYCLES_ACTIVE,
                    METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE,
                    METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY,
                    METRIC_ACCEL_DEVICE_OPERATIONS,
                    METRIC_ACCEL_DEVICE_KERNELS,
                    METRIC_ACCEL_MEMORY_IO_READ,
                    METRIC_ACCEL_MEMORY_IO_WRITTEN,
                )
            ),
            *(
                SeriesDescription(m, hw)
                for m in (
                    METRIC_HW_POWER,
                    METRIC_HW_ENERGY,
                    METRIC_HW_TEMPERATURE,
                    METRIC_HW_GPU_MEMORY_USAGE,
                    METRIC_HW_GPU_MEMORY_LIMIT,
                )
            ),
            *(
                SeriesDescription(m, coll)
                for m in _COLLECTIVE_METRICS
                if any(state.collectives for state in self.chips)
            ),
            SeriesDescription(METRIC_ACCEL_LINK_IO, link),
            SeriesDescription(METRIC_HW_NETWORK_IO, nic),
            SeriesDescription(METRIC_HW_ERRORS, (ACCEL_LINK_ID, ERROR_TYPE)),
            SeriesDescription(METRIC_ACCEL_INFERENCE_TOKENS, (GEN_AI_TOKEN_TYPE, ACCEL_HOST_ID)),
            SeriesDescription(METRIC_ACCEL_INFERENCE_REQUESTS, (ACCEL_HOST_ID,)),
            SeriesDescription(METRIC_ACCEL_INFERENCE_QUEUE_DEPTH, (ACCEL_HOST_ID,)),
        ]

    def latest(self) -> list[Sample]:
        """The samples of the last :meth:`read` (empty before the first)."""
        return list(self._latest)

    def read(self, now_ns: int) -> list[Sample]:
        """Advance the model to virtual time ``now_ns`` and read every counter.

        Reads must not go back in time; a read at or before the previous one returns the
        previous reading.

        Args:
            now_ns: true virtual time of the read.

        Returns:
            One :class:`~otel_ext.counters.Sample` per series, timestamped with the reading
            host's clock (``host.realtime`` domain).
        """
        if now_ns <= self._now and self._latest:
            return list(self._latest)
        dt_s = max(0.0, (now_ns - self._now) / 1e9)
        prev = self._now
        self._now = now_ns
        out: list[Sample] = []
        host_ts = {h: self._host_clock(h, now_ns) for h in range(self.config.hosts)}
        kv_by_host = {
            h: self._last_at(self._kv_tokens[h], now_ns) for h in range(self.config.hosts)
        }
        for state in self.chips:
            self._advance(state.pending, state.cum, now_ns)
            ratio = self._ratio(state.host, state.chip, (prev + now_ns) // 2)
            self._advance_physics(state, ratio, dt_s, now_ns)
            ts = host_ts[state.host]
            out.extend(self._chip_samples(state, ratio, kv_by_host[state.host], ts))
            for _key, series in sorted(state.collectives.items()):
                self._advance(series.pending, series.cum, now_ns)
                out.extend(
                    Sample(metric, series.attrs, float(value), ts)
                    for metric, value in zip(_COLLECTIVE_METRICS, series.cum)
                )
        out.extend(self._network_samples(now_ns, host_ts))
        for h in range(self.config.hosts):
            out.extend(self._host_samples(h, now_ns, host_ts[h]))
        self._latest = out
        return list(out)

    def _advance_physics(self, state: _Chip, ratio: float, dt_s: float, now_ns: int) -> None:
        """A chip's elapsed cycles at its clock ratio, its energy (idle plus work), and over
        ``dt_s`` its power and temperature (first-order towards the power's equilibrium, hotter
        once its cooling failed)."""
        state.elapsed_cycles += dt_s * self.max_clock * ratio
        energy = self.idle_power * (now_ns - EPOCH_NS) / 1e9 + state.cum[6]
        if dt_s > 0:
            state.power = (energy - state.energy) / dt_s
            target = _AMBIENT_C + _C_PER_WATT * state.power
            failed = self._cooling(state.host, state.chip)
            if failed is not None and now_ns >= failed:
                target += _COOLING_FAILURE_C
            state.temperature += (target - state.temperature) * (
                1.0 - math.exp(-dt_s / _THERMAL_TAU_S)
            )
        state.energy = energy

    def _chip_samples(
        self, state: _Chip, ratio: float, kv_tokens: int, ts: int
    ) -> tuple[Sample, ...]:
        """A chip's device counters (cycles, clock, operations, kernels, memory traffic) and
        hardware readings (power, energy, a noisy temperature, memory in use and its limit)."""
        a, hw = state.attrs, state.hw_attrs
        temp = round(state.temperature + self._rng.gauss(0.0, 0.15), 2)
        memory = self._weights + kv_tokens * self._kv_per_token / self.config.chips
        return (
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ELAPSED, a, float(int(state.elapsed_cycles)), ts),
            Sample(METRIC_ACCEL_DEVICE_CYCLES_ACTIVE, a, float(int(state.cum[0])), ts),
            Sample(METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE, a, float(int(state.cum[1])), ts),
            Sample(METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, a, self.max_clock * ratio, ts),
            Sample(METRIC_ACCEL_DEVICE_OPERATIONS, a, float(state.cum[2]), ts),
            Sample(METRIC_ACCEL_DEVICE_KERNELS, a, float(round(state.cum[5])), ts),
            Sample(METRIC_ACCEL_MEMORY_IO_READ, a, float(int(state.cum[3])), ts),
            Sample(METRIC_ACCEL_MEMORY_IO_WRITTEN, a, float(int(state.cum[4])), ts),
            Sample(METRIC_HW_POWER, hw, round(state.power, 3), ts),
            Sample(METRIC_HW_ENERGY, hw, round(state.energy, 6), ts),
            Sample(METRIC_HW_TEMPERATURE, hw, temp, ts),
            Sample(METRIC_HW_GPU_MEMORY_USAGE, hw, float(int(memory)), ts),
            Sample(METRIC_HW_GPU_MEMORY_LIMIT, hw, self.memory_size, ts),
        )

    def _network_samples(self, now_ns: int, host_ts: dict[int, int]) -> list[Sample]:
        """The chip-to-chip links' and NICs' bytes per direction, and the NICs' retransmits."""
        out: list[Sample] = []
        for (link, direction), (cum, pending) in sorted(self._links.items()):
            self._advance(pending, cum, now_ns)
            host = int(link.split("/")[0][4:])
            attrs = {
                ACCEL_LINK_ID: link,
                ACCEL_HOST_ID: host_name(host),
                NETWORK_IO_DIRECTION: direction,
                ACCEL_DEVICE_MODEL: self.device_model,
            }
            out.append(Sample(METRIC_ACCEL_LINK_IO, attrs, float(int(cum[0])), host_ts[host]))
        for (host, direction), (cum, pending) in sorted(self._nics.items()):
            self._advance(pending, cum, now_ns)
            attrs = {
                ACCEL_LINK_ID: nic_name(host),
                ACCEL_HOST_ID: host_name(host),
                NETWORK_IO_DIRECTION: direction,
            }
            out.append(Sample(METRIC_HW_NETWORK_IO, attrs, float(int(cum[0])), host_ts[host]))
        for host, counted in sorted(self._nic_errors.items()):
            errs = sum(n for at, n in counted if at <= now_ns)
            attrs = {ACCEL_LINK_ID: nic_name(host), ERROR_TYPE: "retransmit"}
            out.append(Sample(METRIC_HW_ERRORS, attrs, float(errs), host_ts[host]))
        return out

    def _host_samples(self, h: int, now_ns: int, ts: int) -> list[Sample]:
        """Host ``h``'s serving counters: input and output tokens, finished requests, queue
        depth."""
        hn = host_name(h)
        out: list[Sample] = []
        for token_type in ("input", "output"):
            total = sum(c for at, c in self._tokens.get((h, token_type), ()) if at <= now_ns)
            out.append(
                Sample(
                    METRIC_ACCEL_INFERENCE_TOKENS,
                    {GEN_AI_TOKEN_TYPE: token_type, ACCEL_HOST_ID: hn},
                    float(total),
                    ts,
                )
            )
        done = sum(1 for at in self._requests[h] if at <= now_ns)
        out.append(Sample(METRIC_ACCEL_INFERENCE_REQUESTS, {ACCEL_HOST_ID: hn}, float(done), ts))
        depth = self._last_at(self._queue[h], now_ns)
        out.append(
            Sample(METRIC_ACCEL_INFERENCE_QUEUE_DEPTH, {ACCEL_HOST_ID: hn}, float(depth), ts)
        )
        return out
