"""Configuration of the simulated cluster: topology, workload, faults, and how they are named.

Devices, links and NICs are named exactly as the telemetry names them (see
``docs/architecture.md``): a chip is ``host1/chip2``, a chip-to-chip link
``host0/chip1-chip2``, a host's NIC ``host1/nic0``. Faults are given as ``KIND@TARGET``:

>>> parse_fault("straggler@host1/chip2")
Fault(kind='straggler', target='host1/chip2', factor=1.3)
>>> parse_fault("slow-link@host0/chip2-chip1").target  # links are named low-high
'host0/chip1-chip2'
>>> parse_fault("melt@host0")
Traceback (most recent call last):
...
otel_ext.errors.ConfigError: fault 'melt@host0': unknown kind 'melt' (known: straggler, throttle, slow-link, slow-nic)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from otel_ext.errors import ConfigError

__all__ = [
    "DEFAULT_FACTORS",
    "FAULT_KINDS",
    "Fault",
    "ModelSpec",
    "SimConfig",
    "chip_name",
    "host_name",
    "link_name",
    "nic_name",
    "parse_fault",
]

#: fault kind -> default severity: compute slowdown (straggler), clock ratio after the drop
#: (throttle), fraction of nominal bandwidth left (slow-link, slow-nic)
DEFAULT_FACTORS: dict[str, float] = {
    "straggler": 1.3,
    "throttle": 0.6,
    "slow-link": 0.2,
    "slow-nic": 0.1,
}
FAULT_KINDS: tuple[str, ...] = tuple(DEFAULT_FACTORS)

_CHIP = re.compile(r"^(host\d+)/chip(\d+)$")
_LINK = re.compile(r"^(host\d+)/chip(\d+)-chip(\d+)$")
_HOST = re.compile(r"^(host\d+)$")
_NIC = re.compile(r"^(host\d+)/nic0$")


def host_name(host: int) -> str:
    """Telemetry name of host ``host`` (``host0``)."""
    return f"host{host}"


def chip_name(host: int, chip: int) -> str:
    """Telemetry name of a chip (``host0/chip3``), the value of ``accel.device.id``.

    >>> chip_name(1, 2)
    'host1/chip2'
    """
    return f"host{host}/chip{chip}"


def link_name(host: int, chip_a: int, chip_b: int) -> str:
    """Telemetry name of the chip-to-chip link between two chips, lower index first.

    >>> link_name(0, 3, 2)
    'host0/chip2-chip3'
    """
    lo, hi = sorted((chip_a, chip_b))
    return f"host{host}/chip{lo}-chip{hi}"


def nic_name(host: int) -> str:
    """Telemetry name of a host's NIC (``host0/nic0``)."""
    return f"host{host}/nic0"


@dataclass(frozen=True)
class Fault:
    """One injected fault.

    Attributes:
        kind: ``straggler``, ``throttle``, ``slow-link`` or ``slow-nic``.
        target: the chip, link or host, named as in telemetry.
        factor: severity (see :data:`DEFAULT_FACTORS`).
    """

    kind: str
    target: str
    factor: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """The fault as written to ``truth.json``."""
        return {"kind": self.kind, "target": self.target, "factor": self.factor}


def parse_fault(spec: str) -> Fault:
    """Parse ``KIND@TARGET`` (optionally ``KIND@TARGET:FACTOR``) into a :class:`Fault`.

    Args:
        spec: e.g. ``straggler@host1/chip2``, ``throttle@host0/chip0``,
            ``slow-link@host0/chip1-chip2``, ``slow-nic@host1``,
            ``straggler@host0/chip1:1.5``.

    Returns:
        The fault, with the default factor of its kind unless one is given.

    Raises:
        ConfigError: unknown kind, malformed target or factor (one line, naming the spec).

    >>> parse_fault("slow-nic@host1:0.25")
    Fault(kind='slow-nic', target='host1', factor=0.25)
    >>> parse_fault("throttle@host0/nic0")
    Traceback (most recent call last):
    ...
    otel_ext.errors.ConfigError: fault 'throttle@host0/nic0': target 'host0/nic0' is not a chip (expected HOST/CHIP, e.g. host1/chip2)
    """
    where = f"fault {spec!r}"
    kind, at, rest = spec.strip().partition("@")
    if not at:
        raise ConfigError(f"{where}: expected KIND@TARGET, e.g. straggler@host1/chip2")
    if kind not in DEFAULT_FACTORS:
        raise ConfigError(f"{where}: unknown kind {kind!r} (known: {', '.join(FAULT_KINDS)})")
    target, colon, factor_text = rest.partition(":")
    factor = DEFAULT_FACTORS[kind]
    if colon:
        try:
            factor = float(factor_text)
        except ValueError:
            raise ConfigError(f"{where}: factor {factor_text!r} is not a number") from None
        if not factor > 0 or factor != factor or factor == float("inf"):
            raise ConfigError(f"{where}: factor must be a positive finite number")
        if kind != "straggler" and factor > 1:
            raise ConfigError(f"{where}: a {kind} factor is a fraction of nominal, at most 1")
    if kind in ("straggler", "throttle"):
        if not _CHIP.match(target):
            raise ConfigError(
                f"{where}: target {target!r} is not a chip (expected HOST/CHIP, e.g. host1/chip2)"
            )
    elif kind == "slow-link":
        m = _LINK.match(target)
        if not m:
            raise ConfigError(
                f"{where}: target {target!r} is not a link (expected HOST/CHIPA-CHIPB, "
                "e.g. host0/chip1-chip2)"
            )
        a, b = int(m.group(2)), int(m.group(3))
        if a == b:
            raise ConfigError(f"{where}: a link joins two different chips")
        target = link_name(int(m.group(1)[4:]), a, b)
    else:
        m = _HOST.match(target) or _NIC.match(target)
        if not m:
            raise ConfigError(f"{where}: target {target!r} is not a host (expected e.g. host1)")
        target = m.group(1)
    return Fault(kind, target, factor)


@dataclass(frozen=True)
class ModelSpec:
    """The served transformer, at the granularity the simulation needs.

    Attributes:
        name: model name (``gen_ai.request.model``).
        parameters: parameter count.
        layers: transformer blocks.
        hidden: hidden size.
        kv_bytes_per_token: KV-cache bytes one token occupies across all layers.
        bytes_per_param: weight element size (2 for bf16).
    """

    name: str = "sim-llm-34b"
    parameters: float = 34e9
    layers: int = 48
    hidden: int = 8192
    kv_bytes_per_token: int = 2 * 48 * 8 * 128 * 2
    bytes_per_param: int = 2


@dataclass(frozen=True)
class SimConfig:
    """Everything that defines one simulated run; with ``seed`` it determines every output.

    Attributes:
        hosts: number of hosts.
        chips: chips per host (the tensor-parallel group is the chips of one host).
        requests: inference requests to serve.
        seed: seed of every random choice (workload, clocks, jitter, span ids).
        faults: injected faults.
        mode: ``disaggregated`` (prefill on the first half of the hosts, decode on the rest,
            KV cache over the NIC), ``replicas`` (each host serves requests end to end) or
            ``auto`` (disaggregated with two hosts or more).
        topology: ``ring`` or ``mesh`` chip-to-chip links within a host.
        arrival_rate: mean request arrivals per second (Poisson).
        prompt_tokens_mean: mean prompt length (tokens).
        output_tokens_mean: mean generated length (tokens).
        max_batch: most requests in one decode batch.
        prefill_chunk: most prompt tokens in one step.
        layer_groups: transformer blocks are simulated in this many groups per step, each
            one compute kernel and one all-reduce per chip.
        model: the served model.
        device_model: the chip's model in the registry's device-spec table.
        counter_interval_ms: virtual milliseconds between counter samples.
        clock_sample_interval_ms: virtual milliseconds between clock brackets of a chip.
        throttle_at: fraction of the expected run after which a throttle fault starts.
        trace_step_interval: layer, collective and device-activity spans are recorded for
            one engine step in this many on each host (a profiler schedule: every step
            would be hundreds of spans per step); request and phase spans, counters and
            clock samples are always complete.
        trace_link_transfers: emit one ``accel.link.transfer`` span per link and all-reduce.
        link_latency_ns: per-hop latency of a chip-to-chip link.
        nic_latency_ns: latency of a NIC transfer.
    """

    hosts: int = 2
    chips: int = 4
    requests: int = 200
    seed: int = 0
    faults: tuple[Fault, ...] = ()
    mode: str = "auto"
    topology: str = "ring"
    arrival_rate: float = 40.0
    prompt_tokens_mean: int = 192
    output_tokens_mean: int = 48
    max_batch: int = 64
    prefill_chunk: int = 2048
    layer_groups: int = 4
    model: ModelSpec = field(default_factory=ModelSpec)
    device_model: str = "sim-accel-v1"
    counter_interval_ms: float = 100.0
    clock_sample_interval_ms: float = 50.0
    throttle_at: float = 0.4
    trace_step_interval: int = 8
    trace_link_transfers: bool = True
    link_latency_ns: int = 1_000
    nic_latency_ns: int = 10_000

    def resolved_mode(self) -> str:
        """The serving mode after ``auto`` is decided."""
        if self.mode == "auto":
            return "disaggregated" if self.hosts >= 2 else "replicas"
        return self.mode

    def validated(self) -> SimConfig:
        """Check the configuration; return it (with ``mode`` resolved).

        Raises:
            ConfigError: a value out of range, a fault naming a chip, link or host the
                cluster does not have.

        >>> SimConfig(hosts=1, chips=2).validated().mode
        'replicas'
        >>> SimConfig(hosts=1, chips=2, faults=(parse_fault("straggler@host0/chip5"),)).validated()
        Traceback (most recent call last):
        ...
        otel_ext.errors.ConfigError: fault straggler@host0/chip5: no chip host0/chip5 in a cluster of 1 host(s) x 2 chip(s)
        """
        if not 1 <= self.hosts <= 64:
            raise ConfigError(f"--hosts must be in 1..64, got {self.hosts}")
        if not 1 <= self.chips <= 64:
            raise ConfigError(f"--chips must be in 1..64, got {self.chips}")
        if not 1 <= self.requests <= 1_000_000:
            raise ConfigError(f"--requests must be in 1..1000000, got {self.requests}")
        mode = self.resolved_mode()
        if mode not in ("disaggregated", "replicas"):
            raise ConfigError(f"mode must be auto, disaggregated or replicas, got {self.mode!r}")
        if mode == "disaggregated" and self.hosts < 2:
            raise ConfigError("disaggregated serving needs at least 2 hosts")
        if self.topology not in ("ring", "mesh"):
            raise ConfigError(f"topology must be ring or mesh, got {self.topology!r}")
        for name in ("arrival_rate", "counter_interval_ms", "clock_sample_interval_ms"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in (
            "prompt_tokens_mean",
            "output_tokens_mean",
            "max_batch",
            "layer_groups",
            "trace_step_interval",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.layer_groups > self.model.layers:
            raise ConfigError("layer_groups cannot exceed the model's layers")
        if not 0.0 <= self.throttle_at <= 1.0:
            raise ConfigError(f"throttle_at must be in [0, 1], got {self.throttle_at}")
        for fault in self.faults:
            self._check_target(fault)
        return replace(self, mode=mode)

    def _check_target(self, fault: Fault) -> None:
        where = f"fault {fault.kind}@{fault.target}"
        shape = f"a cluster of {self.hosts} host(s) x {self.chips} chip(s)"
        m = _CHIP.match(fault.target) or _LINK.match(fault.target) or _HOST.match(fault.target)
        if m is None:
            raise ConfigError(f"{where}: malformed target")
        host = int(m.group(1)[4:])
        if host >= self.hosts:
            raise ConfigError(f"{where}: no host {m.group(1)} in {shape}")
        chips = [int(g) for g in m.groups()[1:]]
        for chip in chips:
            if chip >= self.chips:
                raise ConfigError(f"{where}: no chip host{host}/chip{chip} in {shape}")
        if len(chips) == 2:
            a, b = chips
            if self.topology == "ring" and (b - a) % self.chips not in (1, self.chips - 1):
                raise ConfigError(f"{where}: chips {a} and {b} are not neighbours on the ring")
            if self.chips < 2:
                raise ConfigError(f"{where}: a single chip has no chip-to-chip links")
