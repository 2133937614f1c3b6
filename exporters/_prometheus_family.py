"""An empty Prometheus metric family of the type a :class:`PrometheusName` says.

Shared by the SDK metric reader's collector (``otel_ext.exporters._prometheus_sdk``) and the counter
bridge's collector (``otel_ext.counters._prometheus``), which fill it with their samples.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from otel_ext.exporters._prometheus_mapping import PrometheusName

__all__ = ["new_family"]


def new_family(pn: PrometheusName, doc: str) -> Any:
    """A counter, histogram or gauge family named and typed as ``pn``, with no samples yet.

    >>> from otel_ext.exporters._prometheus_mapping import prometheus_name
    >>> type(new_family(prometheus_name("hw.energy", "J", "counter"), "energy")).__name__
    'CounterMetricFamily'
    """
    if pn.type == "counter":
        return CounterMetricFamily(pn.family, doc, labels=(), unit=pn.unit)
    if pn.type == "histogram":
        return HistogramMetricFamily(pn.family, doc, labels=(), unit=pn.unit)
    return GaugeMetricFamily(pn.family, doc, labels=(), unit=pn.unit)
