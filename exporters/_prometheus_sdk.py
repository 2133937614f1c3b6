"""OpenTelemetry SDK metrics -> Prometheus metric families (with exemplars).

:class:`PrometheusExpositionReader` is a pull ``MetricReader``: on each scrape its
:meth:`~PrometheusExpositionReader.collect_families` asks the SDK to collect and turns the
points into ``prometheus_client`` families: monotonic sums -> counters (exemplars from the
points), gauges and non-monotonic sums -> gauges, explicit-bucket histograms ->
histograms (each exemplar on the bucket its value falls in). Names, units and labels are
mapped by :mod:`otel_ext.exporters._prometheus_mapping`. Temporality is cumulative. The resource's
attributes are exposed once as ``target_info`` (value 1), as the OpenTelemetry
specification's Prometheus compatibility asks, so a point joins to its host, rank and device.

>>> from opentelemetry.sdk.metrics import MeterProvider
>>> reader = PrometheusExpositionReader()
>>> provider = MeterProvider(metric_readers=[reader])
>>> provider.get_meter("doc").create_counter("accel.link.io", unit="By").add(5, {"accel.link.id": "h/a-b"})
>>> [(f.name, f.type, f.samples[0].value) for f in reader.collect_families()]
[('target', 'info', 1), ('accel_link_io_bytes', 'counter', 5.0)]
>>> provider.shutdown()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    HistogramDataPoint,
    MetricReader,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from prometheus_client.metrics_core import (
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from otel_ext.exporters._prometheus_family import new_family
from otel_ext.exporters._prometheus_mapping import prometheus_name, sanitize_label

__all__ = ["PrometheusExpositionReader", "PrometheusMetricReader"]

_log = logging.getLogger(__name__)
_CUMULATIVE = {
    k: AggregationTemporality.CUMULATIVE
    for k in (
        Counter,
        UpDownCounter,
        Histogram,
        ObservableCounter,
        ObservableUpDownCounter,
        ObservableGauge,
    )
}


def _exemplar(ex: Any) -> Exemplar | None:
    if getattr(ex, "trace_id", None) is None or getattr(ex, "span_id", None) is None:
        return None
    return Exemplar(
        {"trace_id": format(ex.trace_id, "032x"), "span_id": format(ex.span_id, "016x")},
        float(ex.value),
        ex.time_unix_nano / 1e9,
    )


class PrometheusExpositionReader(MetricReader):
    """A pull metric reader for Prometheus.

    Register :meth:`collector` in a ``CollectorRegistry`` (or serve the reader with
    :class:`otel_ext.exporters.prometheus.PrometheusExpositionServer`); each scrape collects the SDK.
    """

    def __init__(self) -> None:
        MetricReader.__init__(self, preferred_temporality=_CUMULATIVE)  # type: ignore[arg-type]
        self._data: MetricsData | None = None
        self._lock = threading.Lock()

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> None:
        self._data = metrics_data

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing to flush (pull)."""

    def collector(self) -> Collector:
        """A ``prometheus_client`` collector whose ``collect()`` scrapes this reader."""
        return _FamiliesCollector(self)

    def collect_families(self) -> list[Metric]:
        """Collect the SDK now and return the Prometheus families (never raises)."""
        with self._lock:
            try:
                self.collect()
            except Exception as exc:
                _log.warning("collecting SDK metrics failed: %r", exc)
                return []
            data, self._data = self._data, None
        if data is None:
            return []
        out: list[Metric] = []
        info = InfoMetricFamily("target", "Target metadata: the OpenTelemetry resource")
        seen: set[tuple[tuple[str, str], ...]] = set()
        for rm in data.resource_metrics:
            labels = tuple(
                sorted(
                    (sanitize_label(str(k)), str(v))
                    for k, v in (rm.resource.attributes or {}).items()
                )
            )
            if labels and labels not in seen:
                seen.add(labels)
                info.add_metric([], dict(labels))
        if info.samples:
            out.append(info)
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    try:
                        fam = self._family(m)
                    except Exception as exc:
                        _log.warning("cannot expose SDK metric %s: %r", m.name, exc)
                        continue
                    if fam is not None:
                        out.append(fam)
        return out

    def _family(self, m: Any) -> Metric | None:
        data = m.data
        doc = m.description or m.name
        if isinstance(data, Sum):
            kind = "counter" if data.is_monotonic else "updowncounter"
        elif isinstance(data, Gauge):
            kind = "gauge"
        elif isinstance(data, HistogramData):
            kind = "histogram"
        else:
            return None
        pn = prometheus_name(m.name, m.unit or "", kind)
        fam = new_family(pn, doc)
        for p in data.data_points:
            labels = {sanitize_label(k): str(v) for k, v in (p.attributes or {}).items()}
            fam._labelnames = tuple(labels)
            vals = list(labels.values())
            exemplars = [e for e in (_exemplar(x) for x in getattr(p, "exemplars", ()) or ()) if e]
            if isinstance(p, HistogramDataPoint):
                bounds = list(p.explicit_bounds)
                by_bucket: dict[int, Exemplar] = {}
                for e in exemplars:
                    idx = next((i for i, b in enumerate(bounds) if e.value <= b), len(bounds))
                    by_bucket[idx] = e
                acc = 0
                buckets: list[Any] = []
                for i, c in enumerate(p.bucket_counts):
                    acc += c
                    le = floatToGoString(bounds[i]) if i < len(bounds) else "+Inf"
                    buckets.append(
                        (le, float(acc), by_bucket[i]) if i in by_bucket else (le, float(acc))
                    )
                fam.add_metric(vals, buckets, float(p.sum))
            elif pn.type == "counter":
                fam.add_metric(vals, float(p.value), exemplar=exemplars[-1] if exemplars else None)
            else:
                fam.add_metric(vals, float(p.value))
        fam._labelnames = ()
        return fam


class _FamiliesCollector(Collector):
    """Adapter: a ``prometheus_client`` collector over a reader's families."""

    def __init__(self, reader: PrometheusExpositionReader):
        self.reader = reader

    def collect(self) -> Iterator[Metric]:
        yield from self.reader.collect_families()

    def describe(self) -> list[Metric]:
        return []


#: Deprecated alias (one release): the old name collides with
#: ``opentelemetry.exporter.prometheus.PrometheusMetricReader``.
PrometheusMetricReader = PrometheusExpositionReader
