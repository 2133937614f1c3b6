"""Counter bridge: hardware, host and interconnect counters to Prometheus and OTLP.

Sources (one interface, :class:`CounterSource`; each :class:`Sample` carries metric,
attributes, value, timestamp and clock domain): :class:`NvmlSource` (NVIDIA GPUs),
:class:`HostSource` (``/proc``), :class:`InfinibandSource` (sysfs port counters),
:class:`NetDevSource` (Ethernet/RoCE interfaces, ``/sys/class/net``),
:class:`SimulatedSource` (any :class:`CounterModel`; :class:`BuiltinSimModel` stands
alone). :class:`CounterBridge` samples them, unfolds counters (reset and wrap-around),
evaluates the registry's derived metrics with provenance, and guards cardinality;
:class:`CounterCollector` exposes it to Prometheus (OpenMetrics with exemplars from the
:class:`ActiveSpanRegistry`, which in the node agent reads the workloads' shared records
through :class:`SharedActiveSpanReader`), :class:`OtlpCounterBridge` to OpenTelemetry;
:class:`PodAttributor` labels a device's series with the Kubernetes pod on it (the
workloads' records, the kubelet's PodResources API, the processes' cgroups);
:class:`TargetInfoCollector` says what the agent serves.
``otel-ext exporter`` (:mod:`otel_ext.counters.cli`) is the node daemon.

>>> bridge = CounterBridge([SimulatedSource(BuiltinSimModel(chips=2))])
>>> bridge.open()
['sim']
"""

from __future__ import annotations

from otel_ext.counters._active_span_reader import SharedActiveSpanReader, best_span, running_time
from otel_ext.counters._bridge import CounterBridge, Exemplar, SeriesState
from otel_ext.counters._collective_state import CollectiveStateSource
from otel_ext.counters._derived import DerivedEvaluator, DerivedPoint, InputSeries, Provenance
from otel_ext.counters._exemplars import ActiveSpanRegistry, ExemplarRef, current_span_ref
from otel_ext.counters._host import HostSource
from otel_ext.counters._infiniband import InfinibandSource
from otel_ext.counters._k8s import PodAttributor, PodRef, pod_of_cgroup
from otel_ext.counters._net import NetDevSource
from otel_ext.counters._nvml import NvmlSource, match_device_model
from otel_ext.counters._otlp import OtlpCounterBridge
from otel_ext.counters._podresources import (
    AllocatedDevice,
    PodResourcesClient,
    PodResourcesError,
    decode_list_response,
)
from otel_ext.counters._prometheus import CounterCollector
from otel_ext.counters._rates import CounterTracker, RatePoint, counter_delta
from otel_ext.counters._sim import BuiltinSimModel, CounterModel, SimulatedSource
from otel_ext.counters._source import (
    CLOCK_HOST_MONOTONIC,
    CLOCK_HOST_REALTIME,
    BaseSource,
    CounterSource,
    HistogramValue,
    Sample,
    SeriesDescription,
)
from otel_ext.counters._target_info import TargetInfoCollector

__all__ = [
    "CLOCK_HOST_MONOTONIC",
    "CLOCK_HOST_REALTIME",
    "ActiveSpanRegistry",
    "AllocatedDevice",
    "BaseSource",
    "BuiltinSimModel",
    "CollectiveStateSource",
    "CounterBridge",
    "CounterCollector",
    "CounterModel",
    "CounterSource",
    "CounterTracker",
    "DerivedEvaluator",
    "DerivedPoint",
    "Exemplar",
    "ExemplarRef",
    "HistogramValue",
    "HostSource",
    "InfinibandSource",
    "InputSeries",
    "NetDevSource",
    "NvmlSource",
    "OtlpCounterBridge",
    "PodAttributor",
    "PodRef",
    "PodResourcesClient",
    "PodResourcesError",
    "Provenance",
    "RatePoint",
    "Sample",
    "SeriesDescription",
    "SeriesState",
    "SharedActiveSpanReader",
    "SimulatedSource",
    "TargetInfoCollector",
    "best_span",
    "counter_delta",
    "current_span_ref",
    "decode_list_response",
    "match_device_model",
    "pod_of_cgroup",
    "running_time",
]
