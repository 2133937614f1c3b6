"""Attribute names of the otel-ext registry (and the OpenTelemetry ones it reuses).

Generated from the registry by ``otel-ext semconv generate``. Do not edit.
"""

# fmt: off
__all__ = [
    "ACCEL_CLOCK_BRACKETS_DROPPED",
    "ACCEL_CLOCK_COUNTER_BITS",
    "ACCEL_CLOCK_DEVICE_TICKS",
    "ACCEL_CLOCK_DOMAIN",
    "ACCEL_CLOCK_HOST_AFTER_NS",
    "ACCEL_CLOCK_HOST_BEFORE_NS",
    "ACCEL_CLOCK_KNOT_TICK_REF",
    "ACCEL_CLOCK_KNOTS_BOUND_NS",
    "ACCEL_CLOCK_KNOTS_CURVATURE",
    "ACCEL_CLOCK_KNOTS_HOST_NS",
    "ACCEL_CLOCK_KNOTS_TICKS",
    "ACCEL_CLOCK_QUALITY",
    "ACCEL_CLOCK_RAW_END_TICKS",
    "ACCEL_CLOCK_RAW_START_TICKS",
    "ACCEL_CLOCK_REFERENCE",
    "ACCEL_CLOCK_TICKS_PER_SECOND",
    "ACCEL_CLOCK_UNCERTAINTY_NS",
    "ACCEL_COLLECTIVE_ALGBW",
    "ACCEL_COLLECTIVE_ASYNC",
    "ACCEL_COLLECTIVE_BUSBW",
    "ACCEL_COLLECTIVE_BYTES",
    "ACCEL_COLLECTIVE_DTYPE",
    "ACCEL_COLLECTIVE_ENQUEUE_END_NS",
    "ACCEL_COLLECTIVE_ENQUEUE_START_NS",
    "ACCEL_COLLECTIVE_GROUP",
    "ACCEL_COLLECTIVE_GROUP_SIZE",
    "ACCEL_COLLECTIVE_ID",
    "ACCEL_COLLECTIVE_OP",
    "ACCEL_COLLECTIVE_PEER",
    "ACCEL_COLLECTIVE_RANK",
    "ACCEL_COLLECTIVE_SEQ",
    "ACCEL_COLLECTIVE_TIMING",
    "ACCEL_COUNTERS_METRIC",
    "ACCEL_DEVICE_ID",
    "ACCEL_DEVICE_INDEX",
    "ACCEL_DEVICE_KIND",
    "ACCEL_DEVICE_MODEL",
    "ACCEL_DEVICE_UUID",
    "ACCEL_ENGINE_STEP_CHIPS",
    "ACCEL_ENGINE_STEP_DECODE_TOKENS",
    "ACCEL_ENGINE_STEP_DEVICE_TIME_NS",
    "ACCEL_ENGINE_STEP_INDEX",
    "ACCEL_ENGINE_STEP_PREFILL_TOKENS",
    "ACCEL_ENGINE_STEP_REQUEST_IDS",
    "ACCEL_HOST_ID",
    "ACCEL_KERNEL_BYTES",
    "ACCEL_KERNEL_CORRELATION_ID",
    "ACCEL_KERNEL_FLOPS",
    "ACCEL_KERNEL_KIND",
    "ACCEL_KERNEL_NAME",
    "ACCEL_KERNEL_STREAM",
    "ACCEL_LAYER_BYTES",
    "ACCEL_LAYER_DEPTH",
    "ACCEL_LAYER_FLOPS",
    "ACCEL_LAYER_INDEX",
    "ACCEL_LAYER_INPUT_DTYPES",
    "ACCEL_LAYER_INPUT_SHAPES",
    "ACCEL_LAYER_NAME",
    "ACCEL_LAYER_OUTPUT_DTYPES",
    "ACCEL_LAYER_OUTPUT_SHAPES",
    "ACCEL_LAYER_PARAMETERS",
    "ACCEL_LAYER_PASS",
    "ACCEL_LAYER_TYPE",
    "ACCEL_LINK_BYTES",
    "ACCEL_LINK_DST",
    "ACCEL_LINK_ID",
    "ACCEL_LINK_KIND",
    "ACCEL_LINK_SRC",
    "ACCEL_LOCAL_RANK",
    "ACCEL_PARALLEL_DP_RANK",
    "ACCEL_PARALLEL_EP_RANK",
    "ACCEL_PARALLEL_PP_RANK",
    "ACCEL_PARALLEL_TP_RANK",
    "ACCEL_RANK",
    "ACCEL_REQUEST_BATCH_SIZE",
    "ACCEL_REQUEST_DEVICE_TIME_NS",
    "ACCEL_REQUEST_ENERGY",
    "ACCEL_REQUEST_ID",
    "ACCEL_REQUEST_PHASE",
    "ACCEL_REQUEST_STEP",
    "ACCEL_SOURCE",
    "ACCEL_TELEMETRY_COMPONENT",
    "ACCEL_TELEMETRY_REASON",
    "ACCEL_TELEMETRY_SIGNAL",
    "ACCEL_WORLD_SIZE",
    "CPU_MODE",
    "ERROR_TYPE",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_TOKEN_TYPE",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "HOST_NAME",
    "HW_ID",
    "HW_MODEL",
    "HW_STATE",
    "HW_TYPE",
    "HW_VENDOR",
    "K8S_CONTAINER_NAME",
    "K8S_NAMESPACE_NAME",
    "K8S_NODE_NAME",
    "K8S_POD_NAME",
    "K8S_POD_UID",
    "NETWORK_INTERFACE_NAME",
    "NETWORK_IO_DIRECTION",
    "PROCESS_PID",
    "SERVICE_NAME",
    "SYSTEM_MEMORY_STATE",
]

#: Brackets of this domain that left the sampler's window unexported since the previous clock sync span.
ACCEL_CLOCK_BRACKETS_DROPPED = 'accel.clock.brackets_dropped'
#: Width of the device timestamp counter; it wraps at 2^bits.
ACCEL_CLOCK_COUNTER_BITS = 'accel.clock.counter_bits'
#: The device counter as read for each bracket (raw, wrapped at 2^counter_bits; values of 2^63 and above as two's complement).
ACCEL_CLOCK_DEVICE_TICKS = 'accel.clock.device_ticks'
#: The clock a span's raw timestamps were read from (a chip's timer, a host's monotonic clock).
ACCEL_CLOCK_DOMAIN = 'accel.clock.domain'
#: Host time read just after each device counter read of the batch, in nanoseconds (one per bracket).
ACCEL_CLOCK_HOST_AFTER_NS = 'accel.clock.host_after_ns'
#: Host time read just before each device counter read of the batch, in nanoseconds (one per bracket).
ACCEL_CLOCK_HOST_BEFORE_NS = 'accel.clock.host_before_ns'
#: Raw device counter value (wrapped, two's complement above 2^63) from which `accel.clock.knots_ticks` count.
ACCEL_CLOCK_KNOT_TICK_REF = 'accel.clock.knot_tick_ref'
#: Bound on the fitted mapping's absolute error at each knot, in nanoseconds (rounding of the knot times included).
ACCEL_CLOCK_KNOTS_BOUND_NS = 'accel.clock.knots_bound_ns'
#: Bound on the curvature of the true mapping on each segment between knots (host ns per tick squared).
ACCEL_CLOCK_KNOTS_CURVATURE = 'accel.clock.knots_curvature'
#: Host time the fitted mapping gives at each knot, in nanoseconds (rounded).
ACCEL_CLOCK_KNOTS_HOST_NS = 'accel.clock.knots_host_ns'
#: Knots of the fitted piecewise-linear mapping, in unwrapped ticks counted from `accel.clock.knot_tick_ref`.
ACCEL_CLOCK_KNOTS_TICKS = 'accel.clock.knots_ticks'
#: Quality flag of a fitted clock mapping; `low` when the fit had too few or too wide brackets.
ACCEL_CLOCK_QUALITY = 'accel.clock.quality'
#: The span's end as read from its device clock, in ticks, before alignment (wrapped as read).
ACCEL_CLOCK_RAW_END_TICKS = 'accel.clock.raw_end_ticks'
#: The span's start as read from its device clock, in ticks, before alignment (wrapped as read).
ACCEL_CLOCK_RAW_START_TICKS = 'accel.clock.raw_start_ticks'
#: The clock domain an aligned time is expressed in.
ACCEL_CLOCK_REFERENCE = 'accel.clock.reference'
#: Nominal tick rate of the device clock.
ACCEL_CLOCK_TICKS_PER_SECOND = 'accel.clock.ticks_per_second'
#: Bound on the absolute error of the span's aligned start and end times, in nanoseconds.
ACCEL_CLOCK_UNCERTAINTY_NS = 'accel.clock.uncertainty_ns'
#: Algorithm bandwidth, payload bytes divided by duration, in bytes per second.
ACCEL_COLLECTIVE_ALGBW = 'accel.collective.algbw'
#: Whether the call was asynchronous (the span ends when the work completes).
ACCEL_COLLECTIVE_ASYNC = 'accel.collective.async'
#: Bus bandwidth, algorithm bandwidth times the op's correction factor (NCCL-tests convention), in bytes per second.
ACCEL_COLLECTIVE_BUSBW = 'accel.collective.busbw'
#: Payload bytes of this member's buffer (input for reductions, output for gathers).
ACCEL_COLLECTIVE_BYTES = 'accel.collective.bytes'
#: Element type of the payload.
ACCEL_COLLECTIVE_DTYPE = 'accel.collective.dtype'
#: Host time (ns since the epoch) when the issuing call returned (the collective was enqueued; on NCCL it may not have run yet).
ACCEL_COLLECTIVE_ENQUEUE_END_NS = 'accel.collective.enqueue_end_ns'
#: Host time (ns since the epoch) when the call that issued the collective began; with device timing the span's own start is the device's.
ACCEL_COLLECTIVE_ENQUEUE_START_NS = 'accel.collective.enqueue_start_ns'
#: Name of the process group.
ACCEL_COLLECTIVE_GROUP = 'accel.collective.group'
#: Number of ranks in the group.
ACCEL_COLLECTIVE_GROUP_SIZE = 'accel.collective.group_size'
#: Deterministic id of one collective across its members, derived from group and sequence.
ACCEL_COLLECTIVE_ID = 'accel.collective.id'
#: The operation.
ACCEL_COLLECTIVE_OP = 'accel.collective.op'
#: Peer rank of a point-to-point operation.
ACCEL_COLLECTIVE_PEER = 'accel.collective.peer'
#: This member's rank within the group.
ACCEL_COLLECTIVE_RANK = 'accel.collective.rank'
#: Per-group sequence number; (group, seq) names one collective on every member.
ACCEL_COLLECTIVE_SEQ = 'accel.collective.seq'
#: Where the span's start and end came from, `device` (events on the collective's stream, or the backend's own per-work timing) `host` (host clock, the call to its completion) or `enqueue` (the backend reports no completion, so the span covers the issuing call only).
ACCEL_COLLECTIVE_TIMING = 'accel.collective.timing'
#: The metric a counter-bridge statistic (such as dropped series) refers to.
ACCEL_COUNTERS_METRIC = 'accel.counters.metric'
#: Cluster-unique name of the device, `HOST/CHIP` (or the runtime's device name).
ACCEL_DEVICE_ID = 'accel.device.id'
#: Index of the device on its host (driver enumeration order).
ACCEL_DEVICE_INDEX = 'accel.device.index'
#: The kind of processor; `sim` for the simulated backend.
ACCEL_DEVICE_KIND = 'accel.device.kind'
#: Product model of the device; keys the device-spec table.
ACCEL_DEVICE_MODEL = 'accel.device.model'
#: Vendor UUID of the device, when the driver exposes one.
ACCEL_DEVICE_UUID = 'accel.device.uuid'
#: Number of chips that ran the step (its tensor-parallel group).
ACCEL_ENGINE_STEP_CHIPS = 'accel.engine.step.chips'
#: Tokens the step generated for each request (aligned with `accel.engine.step.request_ids`).
ACCEL_ENGINE_STEP_DECODE_TOKENS = 'accel.engine.step.decode_tokens'
#: Device busy time of the step summed over the chips that ran it (from device timers, e.g. CUDA events around the forward), in nanoseconds.
ACCEL_ENGINE_STEP_DEVICE_TIME_NS = 'accel.engine.step.device_time_ns'
#: The engine's iteration number on its host.
ACCEL_ENGINE_STEP_INDEX = 'accel.engine.step.index'
#: Prompt tokens the step computed for each request (aligned with `accel.engine.step.request_ids`).
ACCEL_ENGINE_STEP_PREFILL_TOKENS = 'accel.engine.step.prefill_tokens'
#: Server-side ids of the requests the step served (aligned with the token lists).
ACCEL_ENGINE_STEP_REQUEST_IDS = 'accel.engine.step.request_ids'
#: Name of the host the device is attached to, as the cluster names it.
ACCEL_HOST_ID = 'accel.host.id'
#: Estimated memory bytes moved by the activity.
ACCEL_KERNEL_BYTES = 'accel.kernel.bytes'
#: Id linking the host-side launch to the device activity.
ACCEL_KERNEL_CORRELATION_ID = 'accel.kernel.correlation_id'
#: Estimated floating-point operations of the activity.
ACCEL_KERNEL_FLOPS = 'accel.kernel.flops'
#: What the activity does.
ACCEL_KERNEL_KIND = 'accel.kernel.kind'
#: Name of the kernel or activity.
ACCEL_KERNEL_NAME = 'accel.kernel.name'
#: Stream or queue the activity ran on.
ACCEL_KERNEL_STREAM = 'accel.kernel.stream'
#: Estimated memory bytes read and written by this call (weights, inputs, outputs).
ACCEL_LAYER_BYTES = 'accel.layer.bytes'
#: Nesting depth of the module below the model root (root is 0).
ACCEL_LAYER_DEPTH = 'accel.layer.depth'
#: Estimated floating-point operations of this call.
ACCEL_LAYER_FLOPS = 'accel.layer.flops'
#: Index of the layer in its parent container, or in the model's block list.
ACCEL_LAYER_INDEX = 'accel.layer.index'
#: Dtypes of the tensor inputs, when recorded.
ACCEL_LAYER_INPUT_DTYPES = 'accel.layer.input_dtypes'
#: Shapes of the tensor inputs, when recorded.
ACCEL_LAYER_INPUT_SHAPES = 'accel.layer.input_shapes'
#: Qualified path of the module in the model.
ACCEL_LAYER_NAME = 'accel.layer.name'
#: Dtypes of the tensor outputs, when recorded.
ACCEL_LAYER_OUTPUT_DTYPES = 'accel.layer.output_dtypes'
#: Shapes of the tensor outputs, when recorded.
ACCEL_LAYER_OUTPUT_SHAPES = 'accel.layer.output_shapes'
#: Number of parameters the module holds (itself and its children).
ACCEL_LAYER_PARAMETERS = 'accel.layer.parameters'
#: Whether the span covers the forward or the backward pass.
ACCEL_LAYER_PASS = 'accel.layer.pass'
#: The layer's class name.
ACCEL_LAYER_TYPE = 'accel.layer.type'
#: Bytes moved by a link transfer.
ACCEL_LINK_BYTES = 'accel.link.bytes'
#: Destination device of a transfer.
ACCEL_LINK_DST = 'accel.link.dst'
#: Name of the link, `HOST/CHIPA-CHIPB` for chip-to-chip, `HOST/nicN` for a NIC port.
ACCEL_LINK_ID = 'accel.link.id'
#: The kind of link.
ACCEL_LINK_KIND = 'accel.link.kind'
#: Source device of a transfer.
ACCEL_LINK_SRC = 'accel.link.src'
#: Rank of the process among those on the same host.
ACCEL_LOCAL_RANK = 'accel.local_rank'
#: Data-parallel replica index.
ACCEL_PARALLEL_DP_RANK = 'accel.parallel.dp_rank'
#: Rank within the expert-parallel group.
ACCEL_PARALLEL_EP_RANK = 'accel.parallel.ep_rank'
#: Pipeline-parallel stage index.
ACCEL_PARALLEL_PP_RANK = 'accel.parallel.pp_rank'
#: Rank within the tensor-parallel group.
ACCEL_PARALLEL_TP_RANK = 'accel.parallel.tp_rank'
#: Global rank of the process driving the device in the distributed job.
ACCEL_RANK = 'accel.rank'
#: Number of requests in the engine step that served this phase.
ACCEL_REQUEST_BATCH_SIZE = 'accel.request.batch_size'
#: Device time the request's share of the engine steps that served it took, summed over their chips (each step's device time split by the request's tokens at their measured cost), in nanoseconds.
ACCEL_REQUEST_DEVICE_TIME_NS = 'accel.request.device_time_ns'
#: Device energy the request's share of the engine steps that served it took, in joules (same split as `accel.request.device_time_ns`).
ACCEL_REQUEST_ENERGY = 'accel.request.energy'
#: Server-side id of an inference request.
ACCEL_REQUEST_ID = 'accel.request.id'
#: Phase of an inference request (`decode_queue`, on the decode engine of a disaggregated server, from the KV cache's arrival to the request's admission into a decode batch; `first_decode_step`, that engine's first step for the request, which streams its first token).
ACCEL_REQUEST_PHASE = 'accel.request.phase'
#: Engine iteration (continuous-batching step) number.
ACCEL_REQUEST_STEP = 'accel.request.step'
#: The counter source a metric point was read from.
ACCEL_SOURCE = 'accel.source'
#: The otel-ext component that dropped telemetry (its guard's name).
ACCEL_TELEMETRY_COMPONENT = 'accel.telemetry.component'
#: Why the component dropped telemetry (a short snake_case cause or call site).
ACCEL_TELEMETRY_REASON = 'accel.telemetry.reason'
#: The telemetry signal a drop or export statistic refers to.
ACCEL_TELEMETRY_SIGNAL = 'accel.telemetry.signal'
#: Number of ranks in the distributed job.
ACCEL_WORLD_SIZE = 'accel.world_size'
#: CPU mode (OpenTelemetry `cpu.*`).
CPU_MODE = 'cpu.mode'
#: Class of error (OpenTelemetry `error.*`).
ERROR_TYPE = 'error.type'
#: The generative-AI operation (OpenTelemetry `gen_ai.*`).
GEN_AI_OPERATION_NAME = 'gen_ai.operation.name'
#: Model name the request asked for (OpenTelemetry `gen_ai.*`).
GEN_AI_REQUEST_MODEL = 'gen_ai.request.model'
#: Token type (OpenTelemetry `gen_ai.*`).
GEN_AI_TOKEN_TYPE = 'gen_ai.token.type'
#: Tokens in the request's prompt (OpenTelemetry `gen_ai.*`).
GEN_AI_USAGE_INPUT_TOKENS = 'gen_ai.usage.input_tokens'
#: Tokens generated for the request (OpenTelemetry `gen_ai.*`).
GEN_AI_USAGE_OUTPUT_TOKENS = 'gen_ai.usage.output_tokens'
#: Name of the host (OpenTelemetry `host.*`).
HOST_NAME = 'host.name'
#: Identifier of the hardware component (OpenTelemetry `hw.*`).
HW_ID = 'hw.id'
#: Descriptive model name of the hardware component, as the driver names it (OpenTelemetry `hw.*`).
HW_MODEL = 'hw.model'
#: The state of the component that `hw.status` reports (OpenTelemetry `hw.*`).
HW_STATE = 'hw.state'
#: Type of the hardware component (OpenTelemetry `hw.*`).
HW_TYPE = 'hw.type'
#: Vendor name of the hardware component (OpenTelemetry `hw.*`).
HW_VENDOR = 'hw.vendor'
#: Kubernetes container name within the pod (OpenTelemetry `k8s.*`); the node agent's `container` label.
K8S_CONTAINER_NAME = 'k8s.container.name'
#: Kubernetes namespace of the pod (OpenTelemetry `k8s.*`); the node agent's `namespace` label (dcgm-exporter's name) or, with `--k8s-labels otel`, this attribute.
K8S_NAMESPACE_NAME = 'k8s.namespace.name'
#: Kubernetes node name (OpenTelemetry `k8s.*`).
K8S_NODE_NAME = 'k8s.node.name'
#: Kubernetes pod name (OpenTelemetry `k8s.*`).
K8S_POD_NAME = 'k8s.pod.name'
#: Kubernetes pod UID (OpenTelemetry `k8s.*`); joins a process's cgroup to its pod.
K8S_POD_UID = 'k8s.pod.uid'
#: Name of the network interface, as the kernel names it (OpenTelemetry `network.*`).
NETWORK_INTERFACE_NAME = 'network.interface.name'
#: Direction of network traffic (OpenTelemetry `network.*`).
NETWORK_IO_DIRECTION = 'network.io.direction'
#: Process identifier (OpenTelemetry `process.*`).
PROCESS_PID = 'process.pid'
#: Logical name of the service (OpenTelemetry `service.*`); carried in the active-span record with the pod identity.
SERVICE_NAME = 'service.name'
#: Memory state (OpenTelemetry `system.*`).
SYSTEM_MEMORY_STATE = 'system.memory.state'
