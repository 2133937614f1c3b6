"""The simulated multi-host accelerator cluster: a labelled backend with injectable faults.

Hosts × chips (model ``sim-accel-v1``), each chip with its own wandering, wrapping 32-bit
timer and each host with its own drifting clock; chip-to-chip links (ring or mesh) and a NIC
per host; a tensor-parallel transformer serving Poisson-arriving requests with continuous
batching (optionally disaggregated: prefill and decode on different hosts, the KV cache over
the NIC). Telemetry flows only through the public instrumentation, clock, counter and
exporter interfaces; the ground truth goes to a separate ``truth.json``.

>>> import tempfile
>>> result = run_simulation(SimConfig(hosts=2, chips=2, requests=4, seed=3,
...                                   faults=(parse_fault("straggler@host0/chip1"),)),
...                         tempfile.mkdtemp(), timeline=False)
>>> result.requests, result.spans > 0
(4, True)

The command line is ``otel-ext simulate`` (:mod:`otel_ext.sim.cli`).
"""

from __future__ import annotations

from otel_ext.sim._clocks import EPOCH_NS, host_ns_from_truth, ticks_from_truth
from otel_ext.sim._config import FAULT_KINDS, Fault, ModelSpec, SimConfig, parse_fault
from otel_ext.sim._counters import SimCounterModel
from otel_ext.sim._run import OUTPUT_FILES, LiveCounters, SimResult, run_simulation

__all__ = [
    "EPOCH_NS",
    "FAULT_KINDS",
    "OUTPUT_FILES",
    "Fault",
    "LiveCounters",
    "ModelSpec",
    "SimConfig",
    "SimCounterModel",
    "SimResult",
    "host_ns_from_truth",
    "parse_fault",
    "run_simulation",
    "ticks_from_truth",
]
