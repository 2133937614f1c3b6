"""Metric names and specifications of the otel-ext registry.

Generated from the registry by ``otel-ext semconv generate``. Do not edit.
"""

# fmt: off
from typing import Any

__all__ = [
    "METRIC_SPECS",
    "METRIC_ACCEL_CLOCK_BOUND",
    "METRIC_ACCEL_CLOCK_DRIFT",
    "METRIC_ACCEL_CLOCK_OFFSET",
    "METRIC_ACCEL_CLOCK_SAMPLES",
    "METRIC_ACCEL_COLLECTIVE_ARRIVAL_LATENESS",
    "METRIC_ACCEL_COLLECTIVE_BUS_IO",
    "METRIC_ACCEL_COLLECTIVE_BUSBW",
    "METRIC_ACCEL_COLLECTIVE_DURATION",
    "METRIC_ACCEL_COLLECTIVE_EXPOSED_RATIO",
    "METRIC_ACCEL_COLLECTIVE_IO",
    "METRIC_ACCEL_COLLECTIVE_LAST_SEQ",
    "METRIC_ACCEL_COLLECTIVE_PENDING_DURATION",
    "METRIC_ACCEL_COLLECTIVE_TIME",
    "METRIC_ACCEL_COLLECTIVE_WAIT_RATIO",
    "METRIC_ACCEL_COLLECTIVE_WAIT_TIME",
    "METRIC_ACCEL_COUNTERS_SERIES_DROPPED",
    "METRIC_ACCEL_COUNTERS_SOURCE_ERRORS",
    "METRIC_ACCEL_COUNTERS_SOURCE_UP",
    "METRIC_ACCEL_DEVICE_ARITHMETIC_INTENSITY",
    "METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY",
    "METRIC_ACCEL_DEVICE_CLOCK_RATIO",
    "METRIC_ACCEL_DEVICE_CYCLES_ACTIVE",
    "METRIC_ACCEL_DEVICE_CYCLES_ELAPSED",
    "METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE",
    "METRIC_ACCEL_DEVICE_FLOPS_ACHIEVED",
    "METRIC_ACCEL_DEVICE_KERNELS",
    "METRIC_ACCEL_DEVICE_MBU",
    "METRIC_ACCEL_DEVICE_MEMORY_CLOCK_FREQUENCY",
    "METRIC_ACCEL_DEVICE_MFU",
    "METRIC_ACCEL_DEVICE_OPERATIONS",
    "METRIC_ACCEL_DEVICE_POWER_RATIO",
    "METRIC_ACCEL_DEVICE_TENSOR_UTILIZATION",
    "METRIC_ACCEL_DEVICE_THROTTLE_REASONS",
    "METRIC_ACCEL_DEVICE_UTILIZATION",
    "METRIC_ACCEL_INFERENCE_QUEUE_DEPTH",
    "METRIC_ACCEL_INFERENCE_REQUESTS",
    "METRIC_ACCEL_INFERENCE_THROUGHPUT",
    "METRIC_ACCEL_INFERENCE_TOKENS",
    "METRIC_ACCEL_INFERENCE_TOKENS_PER_JOULE",
    "METRIC_ACCEL_LINK_BANDWIDTH",
    "METRIC_ACCEL_LINK_BANDWIDTH_UTILIZATION",
    "METRIC_ACCEL_LINK_ERRORS",
    "METRIC_ACCEL_LINK_IO",
    "METRIC_ACCEL_LINK_REPLAYS",
    "METRIC_ACCEL_MEMORY_BANDWIDTH",
    "METRIC_ACCEL_MEMORY_ECC_ERRORS",
    "METRIC_ACCEL_MEMORY_IO_READ",
    "METRIC_ACCEL_MEMORY_IO_WRITTEN",
    "METRIC_ACCEL_NIC_BANDWIDTH",
    "METRIC_ACCEL_PCIE_IO",
    "METRIC_ACCEL_PCIE_THROUGHPUT",
    "METRIC_ACCEL_TELEMETRY_DROPPED",
    "METRIC_GEN_AI_SERVER_REQUEST_DURATION",
    "METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN",
    "METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN",
    "METRIC_HW_ENERGY",
    "METRIC_HW_ERRORS",
    "METRIC_HW_GPU_MEMORY_LIMIT",
    "METRIC_HW_GPU_MEMORY_USAGE",
    "METRIC_HW_GPU_MEMORY_UTILIZATION",
    "METRIC_HW_GPU_UTILIZATION",
    "METRIC_HW_NETWORK_BANDWIDTH_LIMIT",
    "METRIC_HW_NETWORK_IO",
    "METRIC_HW_NETWORK_PACKETS",
    "METRIC_HW_NETWORK_UP",
    "METRIC_HW_POWER",
    "METRIC_HW_STATUS",
    "METRIC_HW_TEMPERATURE",
    "METRIC_PROCESS_CPU_TIME",
    "METRIC_SYSTEM_CPU_TIME",
    "METRIC_SYSTEM_CPU_UTILIZATION",
    "METRIC_SYSTEM_MEMORY_LIMIT",
    "METRIC_SYSTEM_MEMORY_USAGE",
]

#: Current alignment error bound of a clock domain.
METRIC_ACCEL_CLOCK_BOUND = 'accel.clock.bound'
#: Fitted rate error of a clock domain against its reference, in parts per million.
METRIC_ACCEL_CLOCK_DRIFT = 'accel.clock.drift'
#: Fitted offset of a clock domain from its reference clock at the sample time.
METRIC_ACCEL_CLOCK_OFFSET = 'accel.clock.offset'
#: Clock brackets taken for a clock domain.
METRIC_ACCEL_CLOCK_SAMPLES = 'accel.clock.samples'
#: How long after the first member this member entered the collective.
METRIC_ACCEL_COLLECTIVE_ARRIVAL_LATENESS = 'accel.collective.arrival.lateness'
#: Payload bytes times the op's bus-bandwidth factor, for completed collectives.
METRIC_ACCEL_COLLECTIVE_BUS_IO = 'accel.collective.bus.io'
#: Bus bandwidth achieved by completed collectives over the window.
METRIC_ACCEL_COLLECTIVE_BUSBW = 'accel.collective.busbw'
#: Duration of one member's part in a collective.
METRIC_ACCEL_COLLECTIVE_DURATION = 'accel.collective.duration'
#: Fraction of wall time spent in collectives (communication not hidden behind compute on a serial stream).
METRIC_ACCEL_COLLECTIVE_EXPOSED_RATIO = 'accel.collective.exposed.ratio'
#: Payload bytes of completed collectives.
METRIC_ACCEL_COLLECTIVE_IO = 'accel.collective.io'
#: The last sequence number of a process group that completed on this member (-1 before the first); a member that stopped before a collective stays below the sequence number the others wait in.
METRIC_ACCEL_COLLECTIVE_LAST_SEQ = 'accel.collective.last_seq'
#: How long the oldest collective still in flight on a process group has been pending on this member (exported by the node agent from the instrumentation's collective-state records, once it has waited past the agent's minimum).
METRIC_ACCEL_COLLECTIVE_PENDING_DURATION = 'accel.collective.pending.duration'
#: Time spent inside collectives (enter to exit).
METRIC_ACCEL_COLLECTIVE_TIME = 'accel.collective.time'
#: Fraction of wall time a member spent waiting inside collectives for late members.
METRIC_ACCEL_COLLECTIVE_WAIT_RATIO = 'accel.collective.wait.ratio'
#: Time a member spent in collectives waiting for the last member to arrive.
METRIC_ACCEL_COLLECTIVE_WAIT_TIME = 'accel.collective.wait.time'
#: Label sets dropped by the counter bridge's per-metric cardinality guard.
METRIC_ACCEL_COUNTERS_SERIES_DROPPED = 'accel.counters.series.dropped'
#: Samples of a counter source that failed (the source raised or lost a device).
METRIC_ACCEL_COUNTERS_SOURCE_ERRORS = 'accel.counters.source.errors'
#: 1 when the counter source's last sample succeeded, 0 when it failed.
METRIC_ACCEL_COUNTERS_SOURCE_UP = 'accel.counters.source.up'
#: Floating-point operations per byte of device memory traffic.
METRIC_ACCEL_DEVICE_ARITHMETIC_INTENSITY = 'accel.device.arithmetic_intensity'
#: Current compute (SM) clock frequency.
METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY = 'accel.device.clock.frequency'
#: Current compute clock as a fraction of the device's maximum clock (below 1 when throttled).
METRIC_ACCEL_DEVICE_CLOCK_RATIO = 'accel.device.clock.ratio'
#: Cycles during which at least one compute unit had work.
METRIC_ACCEL_DEVICE_CYCLES_ACTIVE = 'accel.device.cycles.active'
#: Clock cycles elapsed on the device's compute clock.
METRIC_ACCEL_DEVICE_CYCLES_ELAPSED = 'accel.device.cycles.elapsed'
#: Cycles during which the tensor (matrix) pipes were busy.
METRIC_ACCEL_DEVICE_CYCLES_TENSOR_ACTIVE = 'accel.device.cycles.tensor_active'
#: Achieved floating-point operations per second.
METRIC_ACCEL_DEVICE_FLOPS_ACHIEVED = 'accel.device.flops.achieved'
#: Kernels launched on the device.
METRIC_ACCEL_DEVICE_KERNELS = 'accel.device.kernels'
#: Memory-bandwidth utilization, achieved memory bandwidth over the device's peak.
METRIC_ACCEL_DEVICE_MBU = 'accel.device.mbu'
#: Current memory clock frequency.
METRIC_ACCEL_DEVICE_MEMORY_CLOCK_FREQUENCY = 'accel.device.memory.clock.frequency'
#: Model FLOP utilization, achieved FLOP/s over the device's dense peak for its compute dtype.
METRIC_ACCEL_DEVICE_MFU = 'accel.device.mfu'
#: Floating-point operations executed (from instrumentation estimates or hardware counters).
METRIC_ACCEL_DEVICE_OPERATIONS = 'accel.device.operations'
#: Power draw as a fraction of the device's power limit.
METRIC_ACCEL_DEVICE_POWER_RATIO = 'accel.device.power.ratio'
#: Fraction of cycles with the tensor pipes busy.
METRIC_ACCEL_DEVICE_TENSOR_UTILIZATION = 'accel.device.tensor.utilization'
#: Bitmask of active clock-throttle reasons as the driver reports them (0 = none).
METRIC_ACCEL_DEVICE_THROTTLE_REASONS = 'accel.device.throttle.reasons'
#: Fraction of cycles with any compute unit busy.
METRIC_ACCEL_DEVICE_UTILIZATION = 'accel.device.utilization'
#: Requests waiting to be scheduled.
METRIC_ACCEL_INFERENCE_QUEUE_DEPTH = 'accel.inference.queue.depth'
#: Inference requests completed.
METRIC_ACCEL_INFERENCE_REQUESTS = 'accel.inference.requests'
#: Tokens generated per second.
METRIC_ACCEL_INFERENCE_THROUGHPUT = 'accel.inference.throughput'
#: Tokens processed by the inference engine, by type (input = prefilled, output = generated).
METRIC_ACCEL_INFERENCE_TOKENS = 'accel.inference.tokens'
#: Tokens generated per joule of device energy.
METRIC_ACCEL_INFERENCE_TOKENS_PER_JOULE = 'accel.inference.tokens_per_joule'
#: Achieved bandwidth of a chip-to-chip link, per direction.
METRIC_ACCEL_LINK_BANDWIDTH = 'accel.link.bandwidth'
#: Achieved link bandwidth over the link's peak per-direction bandwidth.
METRIC_ACCEL_LINK_BANDWIDTH_UTILIZATION = 'accel.link.bandwidth.utilization'
#: Link-level errors (CRC, symbol) on a chip-to-chip link or NIC port.
METRIC_ACCEL_LINK_ERRORS = 'accel.link.errors'
#: Bytes moved over a chip-to-chip link, per direction.
METRIC_ACCEL_LINK_IO = 'accel.link.io'
#: Link-level replays (retransmissions) on a chip-to-chip link.
METRIC_ACCEL_LINK_REPLAYS = 'accel.link.replays'
#: Achieved device-memory bandwidth (read plus write).
METRIC_ACCEL_MEMORY_BANDWIDTH = 'accel.memory.bandwidth'
#: Deprecated: corrected and uncorrected ECC errors of device memory. The NVML source exports them as the standard hw.errors (hw.type gpu, error.type corrected or uncorrected) since issue 32; kept for other sources' use, no dashboard or rule reads it.
METRIC_ACCEL_MEMORY_ECC_ERRORS = 'accel.memory.ecc.errors'
#: Bytes read from device memory.
METRIC_ACCEL_MEMORY_IO_READ = 'accel.memory.io.read'
#: Bytes written to device memory.
METRIC_ACCEL_MEMORY_IO_WRITTEN = 'accel.memory.io.written'
#: Achieved bandwidth of a host network port, per direction.
METRIC_ACCEL_NIC_BANDWIDTH = 'accel.nic.bandwidth'
#: Bytes moved over the device's PCIe link.
METRIC_ACCEL_PCIE_IO = 'accel.pcie.io'
#: PCIe throughput of the device as the driver samples it over a short window, per direction.
METRIC_ACCEL_PCIE_THROUGHPUT = 'accel.pcie.throughput'
#: Telemetry items (spans, metric points, records) otel-ext could not deliver, per component and reason (an exporter slow or unreachable, a queue full, a flush out of time).
METRIC_ACCEL_TELEMETRY_DROPPED = 'accel.telemetry.dropped'
#: Time from request arrival to its last token (OpenTelemetry `gen_ai.*`).
METRIC_GEN_AI_SERVER_REQUEST_DURATION = 'gen_ai.server.request.duration'
#: Time per output token after the first (OpenTelemetry `gen_ai.*`).
METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN = 'gen_ai.server.time_per_output_token'
#: Time from request arrival to the first output token (OpenTelemetry `gen_ai.*`).
METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN = 'gen_ai.server.time_to_first_token'
#: Energy consumed by the component (OpenTelemetry `hw.*`).
METRIC_HW_ENERGY = 'hw.energy'
#: Errors encountered by the component (OpenTelemetry `hw.*`); for a network port, packets in error or dropped, error.type naming the kernel's or the port's counter; for a GPU (hw.type gpu), its memory's volatile ECC errors, error.type corrected or uncorrected.
METRIC_HW_ERRORS = 'hw.errors'
#: Device memory size (OpenTelemetry `hw.gpu.*`).
METRIC_HW_GPU_MEMORY_LIMIT = 'hw.gpu.memory.limit'
#: Device memory in use (OpenTelemetry `hw.gpu.*`).
METRIC_HW_GPU_MEMORY_USAGE = 'hw.gpu.memory.usage'
#: Fraction of time device memory was being read or written, as the driver reports it (OpenTelemetry `hw.gpu.*`; NVML's utilization.memory / 100).
METRIC_HW_GPU_MEMORY_UTILIZATION = 'hw.gpu.memory.utilization'
#: Fraction of time the GPU was busy, as the driver reports it (OpenTelemetry `hw.gpu.*`).
METRIC_HW_GPU_UTILIZATION = 'hw.gpu.utilization'
#: Link speed of a network port, per direction of a full-duplex link (OpenTelemetry `hw.network.*`).
METRIC_HW_NETWORK_BANDWIDTH_LIMIT = 'hw.network.bandwidth.limit'
#: Bytes through a network port, per direction (OpenTelemetry `hw.*`).
METRIC_HW_NETWORK_IO = 'hw.network.io'
#: Packets through a network port, per direction (OpenTelemetry `hw.*`).
METRIC_HW_NETWORK_PACKETS = 'hw.network.packets'
#: Link status of a network port, 1 (up) or 0 (down) (OpenTelemetry `hw.network.*`).
METRIC_HW_NETWORK_UP = 'hw.network.up'
#: Instantaneous power drawn by the component (OpenTelemetry `hw.*`).
METRIC_HW_POWER = 'hw.power'
#: Operational status of the component: 1 for the state it is in, 0 for the others, one series per hw.state (OpenTelemetry `hw.*`). A GPU is failed when the driver reports it lost, degraded when its memory had uncorrected ECC errors since the driver loaded, else ok.
METRIC_HW_STATUS = 'hw.status'
#: Temperature of the component (OpenTelemetry `hw.*`).
METRIC_HW_TEMPERATURE = 'hw.temperature'
#: CPU time of the workload process (OpenTelemetry `process.*`).
METRIC_PROCESS_CPU_TIME = 'process.cpu.time'
#: CPU time by state (OpenTelemetry `system.*`).
METRIC_SYSTEM_CPU_TIME = 'system.cpu.time'
#: CPU utilization (OpenTelemetry `system.*`).
METRIC_SYSTEM_CPU_UTILIZATION = 'system.cpu.utilization'
#: Total host memory (OpenTelemetry `system.*`).
METRIC_SYSTEM_MEMORY_LIMIT = 'system.memory.limit'
#: Host memory in use by state (OpenTelemetry `system.*`).
METRIC_SYSTEM_MEMORY_USAGE = 'system.memory.usage'

#: name -> class, instrument, unit, monotonic, scope, formula, inputs
METRIC_SPECS: dict[str, dict[str, Any]] = {
    'accel.clock.bound': {'class': 'base', 'instrument': 'gauge', 'unit': 'ns', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.clock.domain', 'accel.clock.reference']},
    'accel.clock.drift': {'class': 'base', 'instrument': 'gauge', 'unit': '[ppm]', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.clock.domain', 'accel.clock.reference']},
    'accel.clock.offset': {'class': 'base', 'instrument': 'gauge', 'unit': 'ns', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.clock.domain', 'accel.clock.reference']},
    'accel.clock.samples': {'class': 'base', 'instrument': 'counter', 'unit': '{sample}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.clock.domain']},
    'accel.collective.arrival.lateness': {'class': 'base', 'instrument': 'histogram', 'unit': 's', 'monotonic': False, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.group', 'accel.device.id']},
    'accel.collective.bus.io': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.op', 'accel.collective.group', 'accel.device.id']},
    'accel.collective.busbw': {'class': 'derived', 'instrument': 'gauge', 'unit': 'By/s', 'monotonic': False, 'scope': 'collective', 'formula': 'rate(bus) / rate(t)', 'inputs': {'bus': 'accel.collective.bus.io', 't': 'accel.collective.time'}, 'attributes': []},
    'accel.collective.duration': {'class': 'base', 'instrument': 'histogram', 'unit': 's', 'monotonic': False, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.op', 'accel.collective.group', 'accel.device.id']},
    'accel.collective.exposed.ratio': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'collective', 'formula': 'rate(t)', 'inputs': {'t': 'accel.collective.time'}, 'attributes': []},
    'accel.collective.io': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.op', 'accel.collective.group', 'accel.device.id']},
    'accel.collective.last_seq': {'class': 'base', 'instrument': 'gauge', 'unit': '{seq}', 'monotonic': False, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.group', 'accel.rank', 'accel.device.id', 'accel.host.id']},
    'accel.collective.pending.duration': {'class': 'base', 'instrument': 'gauge', 'unit': 's', 'monotonic': False, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.op', 'accel.collective.group', 'accel.collective.seq', 'accel.rank', 'accel.device.id', 'accel.host.id']},
    'accel.collective.time': {'class': 'base', 'instrument': 'counter', 'unit': 's', 'monotonic': True, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.op', 'accel.collective.group', 'accel.device.id']},
    'accel.collective.wait.ratio': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'collective', 'formula': 'rate(wait)', 'inputs': {'wait': 'accel.collective.wait.time'}, 'attributes': []},
    'accel.collective.wait.time': {'class': 'base', 'instrument': 'counter', 'unit': 's', 'monotonic': True, 'scope': 'collective', 'formula': None, 'inputs': {}, 'attributes': ['accel.collective.group', 'accel.device.id']},
    'accel.counters.series.dropped': {'class': 'base', 'instrument': 'counter', 'unit': '{series}', 'monotonic': True, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.counters.metric']},
    'accel.counters.source.errors': {'class': 'base', 'instrument': 'counter', 'unit': '{error}', 'monotonic': True, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.source']},
    'accel.counters.source.up': {'class': 'base', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.source']},
    'accel.device.arithmetic_intensity': {'class': 'derived', 'instrument': 'gauge', 'unit': '{flop}/By', 'monotonic': False, 'scope': 'device', 'formula': 'rate(ops) / (rate(rd) + rate(wr))', 'inputs': {'ops': 'accel.device.operations', 'rd': 'accel.memory.io.read', 'wr': 'accel.memory.io.written'}, 'attributes': []},
    'accel.device.clock.frequency': {'class': 'base', 'instrument': 'gauge', 'unit': 'Hz', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.clock.ratio': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': 'freq / spec.max_clock', 'inputs': {'freq': 'accel.device.clock.frequency'}, 'attributes': []},
    'accel.device.cycles.active': {'class': 'base', 'instrument': 'counter', 'unit': '{cycle}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.cycles.elapsed': {'class': 'base', 'instrument': 'counter', 'unit': '{cycle}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.cycles.tensor_active': {'class': 'base', 'instrument': 'counter', 'unit': '{cycle}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.flops.achieved': {'class': 'derived', 'instrument': 'gauge', 'unit': '{flop}/s', 'monotonic': False, 'scope': 'device', 'formula': 'rate(ops)', 'inputs': {'ops': 'accel.device.operations'}, 'attributes': []},
    'accel.device.kernels': {'class': 'base', 'instrument': 'counter', 'unit': '{kernel}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.mbu': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': '(rate(rd) + rate(wr)) / spec.memory_bandwidth', 'inputs': {'rd': 'accel.memory.io.read', 'wr': 'accel.memory.io.written'}, 'attributes': []},
    'accel.device.memory.clock.frequency': {'class': 'base', 'instrument': 'gauge', 'unit': 'Hz', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.mfu': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': 'rate(ops) / spec.peak_flops_bf16', 'inputs': {'ops': 'accel.device.operations'}, 'attributes': []},
    'accel.device.operations': {'class': 'base', 'instrument': 'counter', 'unit': '{flop}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.power.ratio': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': 'power / spec.power_limit', 'inputs': {'power': 'hw.power'}, 'attributes': []},
    'accel.device.tensor.utilization': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': 'rate(tensor) / rate(elapsed)', 'inputs': {'elapsed': 'accel.device.cycles.elapsed', 'tensor': 'accel.device.cycles.tensor_active'}, 'attributes': []},
    'accel.device.throttle.reasons': {'class': 'base', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.device.utilization': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': 'rate(active) / rate(elapsed)', 'inputs': {'active': 'accel.device.cycles.active', 'elapsed': 'accel.device.cycles.elapsed'}, 'attributes': []},
    'accel.inference.queue.depth': {'class': 'base', 'instrument': 'gauge', 'unit': '{request}', 'monotonic': False, 'scope': 'request', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
    'accel.inference.requests': {'class': 'base', 'instrument': 'counter', 'unit': '{request}', 'monotonic': True, 'scope': 'request', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
    'accel.inference.throughput': {'class': 'derived', 'instrument': 'gauge', 'unit': '{token}/s', 'monotonic': False, 'scope': 'request', 'formula': 'rate(tokens)', 'inputs': {'tokens': 'accel.inference.tokens'}, 'attributes': []},
    'accel.inference.tokens': {'class': 'base', 'instrument': 'counter', 'unit': '{token}', 'monotonic': True, 'scope': 'request', 'formula': None, 'inputs': {}, 'attributes': ['gen_ai.token.type', 'accel.host.id']},
    'accel.inference.tokens_per_joule': {'class': 'derived', 'instrument': 'gauge', 'unit': '{token}/J', 'monotonic': False, 'scope': 'device', 'formula': 'rate(tokens) / rate(energy)', 'inputs': {'energy': 'hw.energy', 'tokens': 'accel.inference.tokens'}, 'attributes': []},
    'accel.link.bandwidth': {'class': 'derived', 'instrument': 'gauge', 'unit': 'By/s', 'monotonic': False, 'scope': 'link', 'formula': 'rate(io)', 'inputs': {'io': 'accel.link.io'}, 'attributes': []},
    'accel.link.bandwidth.utilization': {'class': 'derived', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'link', 'formula': 'rate(io) / spec.link_bandwidth', 'inputs': {'io': 'accel.link.io'}, 'attributes': []},
    'accel.link.errors': {'class': 'base', 'instrument': 'counter', 'unit': '{error}', 'monotonic': True, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id']},
    'accel.link.io': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id', 'network.io.direction']},
    'accel.link.replays': {'class': 'base', 'instrument': 'counter', 'unit': '{replay}', 'monotonic': True, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id']},
    'accel.memory.bandwidth': {'class': 'derived', 'instrument': 'gauge', 'unit': 'By/s', 'monotonic': False, 'scope': 'device', 'formula': 'rate(rd) + rate(wr)', 'inputs': {'rd': 'accel.memory.io.read', 'wr': 'accel.memory.io.written'}, 'attributes': []},
    'accel.memory.ecc.errors': {'class': 'base', 'instrument': 'counter', 'unit': '{error}', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id', 'error.type']},
    'accel.memory.io.read': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.memory.io.written': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id']},
    'accel.nic.bandwidth': {'class': 'derived', 'instrument': 'gauge', 'unit': 'By/s', 'monotonic': False, 'scope': 'link', 'formula': 'rate(io)', 'inputs': {'io': 'hw.network.io'}, 'attributes': []},
    'accel.pcie.io': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id', 'network.io.direction']},
    'accel.pcie.throughput': {'class': 'base', 'instrument': 'gauge', 'unit': 'By/s', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'accel.host.id', 'network.io.direction']},
    'accel.telemetry.dropped': {'class': 'base', 'instrument': 'counter', 'unit': '{item}', 'monotonic': True, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.telemetry.component', 'accel.telemetry.reason', 'accel.telemetry.signal']},
    'gen_ai.server.request.duration': {'class': 'base', 'instrument': 'histogram', 'unit': 's', 'monotonic': False, 'scope': 'request', 'formula': None, 'inputs': {}, 'attributes': ['gen_ai.request.model', 'gen_ai.operation.name']},
    'gen_ai.server.time_per_output_token': {'class': 'base', 'instrument': 'histogram', 'unit': 's', 'monotonic': False, 'scope': 'request', 'formula': None, 'inputs': {}, 'attributes': ['gen_ai.request.model', 'gen_ai.operation.name']},
    'gen_ai.server.time_to_first_token': {'class': 'base', 'instrument': 'histogram', 'unit': 's', 'monotonic': False, 'scope': 'request', 'formula': None, 'inputs': {}, 'attributes': ['gen_ai.request.model', 'gen_ai.operation.name']},
    'hw.energy': {'class': 'base', 'instrument': 'counter', 'unit': 'J', 'monotonic': True, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.errors': {'class': 'base', 'instrument': 'counter', 'unit': '{error}', 'monotonic': True, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.device.id', 'accel.host.id', 'error.type', 'network.io.direction', 'network.interface.name', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.gpu.memory.limit': {'class': 'base', 'instrument': 'updowncounter', 'unit': 'By', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.gpu.memory.usage': {'class': 'base', 'instrument': 'updowncounter', 'unit': 'By', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.gpu.memory.utilization': {'class': 'base', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.gpu.utilization': {'class': 'base', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.network.bandwidth.limit': {'class': 'base', 'instrument': 'updowncounter', 'unit': 'By/s', 'monotonic': False, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id', 'network.interface.name', 'hw.id']},
    'hw.network.io': {'class': 'base', 'instrument': 'counter', 'unit': 'By', 'monotonic': True, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id', 'network.io.direction', 'network.interface.name', 'hw.id']},
    'hw.network.packets': {'class': 'base', 'instrument': 'counter', 'unit': '{packet}', 'monotonic': True, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id', 'network.io.direction', 'network.interface.name', 'hw.id']},
    'hw.network.up': {'class': 'base', 'instrument': 'updowncounter', 'unit': '1', 'monotonic': False, 'scope': 'link', 'formula': None, 'inputs': {}, 'attributes': ['accel.link.id', 'accel.host.id', 'network.interface.name', 'hw.id']},
    'hw.power': {'class': 'base', 'instrument': 'gauge', 'unit': 'W', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'hw.status': {'class': 'base', 'instrument': 'updowncounter', 'unit': '1', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model', 'hw.state']},
    'hw.temperature': {'class': 'base', 'instrument': 'gauge', 'unit': 'Cel', 'monotonic': False, 'scope': 'device', 'formula': None, 'inputs': {}, 'attributes': ['accel.device.id', 'hw.id', 'hw.type', 'hw.vendor', 'hw.model']},
    'process.cpu.time': {'class': 'base', 'instrument': 'counter', 'unit': 's', 'monotonic': True, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
    'system.cpu.time': {'class': 'base', 'instrument': 'counter', 'unit': 's', 'monotonic': True, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
    'system.cpu.utilization': {'class': 'base', 'instrument': 'gauge', 'unit': '1', 'monotonic': False, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
    'system.memory.limit': {'class': 'base', 'instrument': 'updowncounter', 'unit': 'By', 'monotonic': False, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
    'system.memory.usage': {'class': 'base', 'instrument': 'updowncounter', 'unit': 'By', 'monotonic': False, 'scope': 'host', 'formula': None, 'inputs': {}, 'attributes': ['accel.host.id']},
}
