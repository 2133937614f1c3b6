"""Clock alignment: device and host clocks onto one timeline, with bounds that hold.

Two layers. The estimation math, here in :mod:`otel_ext.clocks` (pure numpy: no I/O, no
threads, no spans or metrics): fitting, composition, ping-pong, offsets from collectives,
causality repair, the conversion of mappings to span attributes and the offline re-fits.
The runtime, in :mod:`otel_ext.clocks.runtime` (sampler thread, span processor, clock
telemetry, sync-span emission), calls it. Every public name of both is importable from
here:

* :func:`fit_clock` → :class:`ClockMapping` (``to_host_ns``, ``bound_ns``), composable with
  :func:`compose` (device → host → reference host);
* (runtime) :class:`ClockSampler` collects brackets from any device-timestamp reader on a
  background thread; :class:`ClockRegistry` holds the sampler or mapping of each clock domain;
* :func:`align_hosts` fits one host's clock to another's from ping-pong exchanges;
* :func:`estimate_offsets_from_collectives` aligns ranks that have no clock samples;
* :func:`repair_causality` shifts events minimally so no message is received before it is sent;
* (runtime) :class:`ClockReconcilingSpanProcessor` and :func:`record_device_span` put device
  spans on the aligned timeline; :class:`ClockTelemetry` exports clock health under
  ``accel.clock.*``;
* (runtime) :class:`ClockSyncSpanEmitter` and :func:`emit_clock_sync_spans` export brackets
  and fitted mappings as ``accel.clock.sync`` spans (:func:`mapping_attributes` writes the
  knots, :func:`mapping_from_attributes` reads them back); :func:`refit_from_spans` and
  :func:`brackets_from_span_records` re-fit them offline;
* :mod:`otel_ext.clocks.synthetic` simulates clocks with known truth.

>>> import numpy as np
>>> t = np.arange(0, 1_000_000_000, 50_000_000)
>>> m = fit_clock(t - 500, 1_000 + t, t + 700)
>>> int(m.to_host_ns(1_000 + 500_000_000)[()])
500000100
"""

from otel_ext.clocks._causality import (
    CausalityRepair,
    DomainOffsetRecord,
    EventShiftRecord,
    count_violations,
    repair_causality,
)
from otel_ext.clocks._collectives import CollectiveOffsets, estimate_offsets_from_collectives
from otel_ext.clocks._errors import AmbiguousTicksError, ClockFitError, InsufficientSamplesError
from otel_ext.clocks._fit import fit_clock
from otel_ext.clocks._mapping import (
    ClockMapping,
    ClockMappingDict,
    ComposedMapping,
    TimeMapping,
    compose,
)
from otel_ext.clocks._offline import (
    ClockBrackets,
    brackets_from_span_records,
    mappings_from_span_records,
    refit_from_spans,
)
from otel_ext.clocks._pingpong import align_hosts, pingpong_brackets, pingpong_offset
from otel_ext.clocks._sync_attributes import mapping_attributes, mapping_from_attributes

# the runtime (threads, span processors, metrics) last: it builds on the math above
from otel_ext.clocks.runtime import (
    ClockReconcilingSpanProcessor,
    ClockRegistry,
    ClockSampler,
    ClockSyncSpanEmitter,
    ClockTelemetry,
    emit_clock_sync_spans,
    record_device_span,
)

__all__ = [
    "AmbiguousTicksError",
    "CausalityRepair",
    "ClockBrackets",
    "ClockFitError",
    "ClockMapping",
    "ClockMappingDict",
    "ClockReconcilingSpanProcessor",
    "ClockRegistry",
    "ClockSampler",
    "ClockSyncSpanEmitter",
    "ClockTelemetry",
    "CollectiveOffsets",
    "ComposedMapping",
    "DomainOffsetRecord",
    "EventShiftRecord",
    "InsufficientSamplesError",
    "TimeMapping",
    "align_hosts",
    "brackets_from_span_records",
    "compose",
    "count_violations",
    "emit_clock_sync_spans",
    "estimate_offsets_from_collectives",
    "fit_clock",
    "mapping_attributes",
    "mapping_from_attributes",
    "mappings_from_span_records",
    "pingpong_brackets",
    "pingpong_offset",
    "record_device_span",
    "refit_from_spans",
    "repair_causality",
]
