"""``target_info`` for the node agent: what the exporter serves, and whether it is simulated.

The OpenTelemetry specification's Prometheus compatibility exposes a target's resource as
one ``target_info`` series (value 1). The agent's says which host it reads
(``accel_host_id``), which sources it serves (``accel_source``, comma-separated, sorted) and,
when the simulated source is among them, ``accel_device_kind="sim"``: a dashboard or an
alert can then tell simulated counters from real ones.

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> reg = CollectorRegistry()
>>> reg.register(TargetInfoCollector(host_id="node7", sources=["sim"]))
>>> [line for line in generate_latest(reg).decode().splitlines() if line.startswith("target")]
['target_info{accel_device_kind="sim",accel_host_id="node7",accel_source="sim",service_name="otel-ext-exporter"} 1.0']
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from opentelemetry.sdk.resources import SERVICE_NAME
from prometheus_client.metrics_core import InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from otel_ext.exporters.prometheus import sanitize_label
from otel_ext.semconv.attributes import ACCEL_DEVICE_KIND, ACCEL_HOST_ID, ACCEL_SOURCE

__all__ = ["SIMULATED_SOURCES", "TargetInfoCollector"]

#: source names whose counters are simulated
SIMULATED_SOURCES = frozenset({"sim"})


class TargetInfoCollector(Collector):
    """One ``target_info`` series describing the agent.

    Args:
        host_id: ``accel.host.id`` of the host read.
        sources: the names of the sources served.
        service_name: ``service.name``.
    """

    def __init__(
        self, *, host_id: str, sources: Sequence[str], service_name: str = "otel-ext-exporter"
    ):
        labels = {
            SERVICE_NAME: service_name,
            ACCEL_HOST_ID: host_id,
            ACCEL_SOURCE: ",".join(sorted(set(sources))),
        }
        if SIMULATED_SOURCES & set(sources):
            labels[ACCEL_DEVICE_KIND] = "sim"
        self.labels = {sanitize_label(k): v for k, v in sorted(labels.items())}

    def describe(self) -> list[Metric]:
        """Nothing up front (registering must not collect)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The ``target_info`` family."""
        family = InfoMetricFamily("target", "Target metadata")
        family.add_metric([], self.labels)
        yield family
