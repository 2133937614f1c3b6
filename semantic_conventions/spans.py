"""Span names of the otel-ext registry.

Generated from the registry by ``otel-ext semconv generate``. Do not edit.
"""

# fmt: off
__all__ = [
    "SPAN_ACCEL_CLOCK_SYNC",
    "SPAN_ACCEL_COLLECTIVE",
    "SPAN_ACCEL_COLLECTIVE_PENDING",
    "SPAN_ACCEL_ENGINE_STEP",
    "SPAN_ACCEL_KERNEL",
    "SPAN_ACCEL_LAYER",
    "SPAN_ACCEL_LINK_TRANSFER",
    "SPAN_ACCEL_REQUEST",
    "SPAN_ACCEL_REQUEST_PHASE",
]

#: A batch of clock brackets of one clock domain (start and end are the host times of its first and last bracket), with the domain's fitted mapping; analysis re-fits from them offline.
SPAN_ACCEL_CLOCK_SYNC = 'accel.clock.sync'
#: One rank's part in a collective or point-to-point operation.
SPAN_ACCEL_COLLECTIVE = 'accel.collective'
#: A collective this member has waited on longer than `OTEL_EXT_COLLECTIVE_HANG_S`, exported (and flushed) by the instrumentation's watchdog while it still hangs, so that a job killed in the hang still names it; starts when the collective was issued, ends when the watchdog fired.
SPAN_ACCEL_COLLECTIVE_PENDING = 'accel.collective.pending'
#: One engine step (continuous-batching iteration) with the tokens it computed for each request it served.
SPAN_ACCEL_ENGINE_STEP = 'accel.engine.step'
#: Device activity recorded from device-clock timestamps (kernel, memcpy, DMA).
SPAN_ACCEL_KERNEL = 'accel.kernel'
#: One model layer's forward or backward call.
SPAN_ACCEL_LAYER = 'accel.layer'
#: Bytes moved over a chip-to-chip link or a NIC (KV-cache transfer, p2p).
SPAN_ACCEL_LINK_TRANSFER = 'accel.link.transfer'
#: An inference request from arrival to last token (`gen_ai.*` attributes).
SPAN_ACCEL_REQUEST = 'accel.request'
#: A phase of an inference request (queue wait, prefill, decode, KV transfer).
SPAN_ACCEL_REQUEST_PHASE = 'accel.request.phase'
