"""The Prometheus side of the bridge: a ``prometheus_client`` collector and a fast renderer.

:class:`CounterCollector` is a ``prometheus_client`` custom collector: every ``collect()``
builds fresh metric families from the bridge's current series (counters with exemplars,
gauges, histograms with bucket exemplars), names and units mapped by
:mod:`otel_ext.exporters.prometheus`. Register it in any ``CollectorRegistry``.

:meth:`CounterCollector.render` writes the same exposition text directly, without building
``Metric``/``Sample`` objects, with each series' label string cached; it is what the
exposition server calls on a scrape. Its output is byte-for-byte what
``prometheus_client``'s encoders produce from :meth:`CounterCollector.collect` (tested), in
both the Prometheus text format 0.0.4 and OpenMetrics 1.0 (exemplars appear only in
OpenMetrics).

Never raises on a scrape: a family that fails to render is logged once and skipped.

>>> from otel_ext.counters._bridge import CounterBridge
>>> from otel_ext.counters._sim import SimulatedSource, BuiltinSimModel
>>> bridge = CounterBridge([SimulatedSource(BuiltinSimModel(chips=1))], derive=False)
>>> _ = bridge.open(); bridge.sample_once()
>>> text = CounterCollector(bridge).render(openmetrics=True).decode()
>>> "# TYPE hw_power_watts gauge" in text, text.endswith("# EOF\\n")
(True, True)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import (
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar as PromExemplar
from prometheus_client.utils import floatToGoString

from otel_ext._drops import LEDGER
from otel_ext.counters._bridge import CounterBridge, SeriesState
from otel_ext.counters._source import HistogramValue, SeriesKey
from otel_ext.exporters.prometheus import (
    PrometheusName,
    new_family,
    prometheus_name,
    sanitize_label,
)
from otel_ext.semconv.metrics import METRIC_SPECS

__all__ = ["CounterCollector", "help_text"]

_log = logging.getLogger(__name__)
_BRIEFS: dict[str, str] | None = None


def help_text(metric: str) -> str:
    """The registry's one-line description of ``metric`` (its ``brief``), or the name."""
    global _BRIEFS
    if _BRIEFS is None:
        try:
            from otel_ext.semconv.registry import load_registry

            _BRIEFS = {m.name: m.brief for m in load_registry().metrics.values()}
        except Exception as exc:  # the registry is packaged; never fail a scrape over it
            _log.warning("cannot load the registry for HELP texts: %r", exc)
            _BRIEFS = {}
    return _BRIEFS.get(metric) or metric


def _esc_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _esc_help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", r"\\").replace("\n", r"\n")
    return text.replace('"', r"\"") if openmetrics else text


class CounterCollector(Collector):
    """A ``prometheus_client`` collector over a :class:`CounterBridge`.

    Args:
        bridge: the bridge whose series are exposed.
        metric_specs: registry table for units and instruments (``METRIC_SPECS``).
    """

    def __init__(
        self, bridge: CounterBridge, *, metric_specs: Mapping[str, Mapping[str, Any]] = METRIC_SPECS
    ):
        self.bridge = bridge
        self._specs = metric_specs
        self._names: dict[tuple[str, str], PrometheusName] = {}
        self._headers: dict[tuple[str, str, bool], str] = {}

    def describe(self) -> list[Metric]:
        """Nothing up front: the series set changes (and registering must not sample)."""
        return []

    def name_of(self, metric: str, instrument: str) -> PrometheusName:
        """The Prometheus naming of a registry metric (cached)."""
        key = (metric, instrument)
        got = self._names.get(key)
        if got is None:
            spec = self._specs.get(metric, {})
            unit = str(spec.get("unit", ""))
            monotonic = bool(spec.get("monotonic", instrument == "counter"))
            got = self._names[key] = prometheus_name(metric, unit, instrument, monotonic=monotonic)
        return got

    # ---- prometheus_client path --------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        """Fresh metric families from the bridge's current series."""
        for metric, series in self.bridge.families().items():
            if not series:
                continue
            try:
                yield self._family(metric, series)
            except Exception as exc:
                self._warn(metric, exc)

    def _warn(self, metric: str, exc: Exception) -> None:
        """Logged once per collector and metric, counted and exported (the drop ledger)."""
        LEDGER.drop(
            "counters",
            "prometheus_expose_failed",
            message="cannot expose metric %s: %r",
            args=(metric, exc),
            logger=_log,
            once_per=(id(self), metric),
        )

    def _family(self, metric: str, series: list[SeriesState]) -> Metric:
        pn = self.name_of(metric, series[0].instrument)
        doc = help_text(metric)
        fam = new_family(pn, doc)
        for st in series:
            labels = {sanitize_label(k): str(v) for k, v in st.attributes.items()}
            fam._labelnames = tuple(labels)
            values = list(labels.values())
            ex = st.exemplar
            if pn.type == "counter":
                pex = (
                    PromExemplar(ex.ref.labels(), ex.value, ex.timestamp_s)
                    if ex is not None
                    else None
                )
                fam.add_metric(values, float(st.value), exemplar=pex)  # type: ignore[arg-type]
            elif pn.type == "histogram" and isinstance(st.value, HistogramValue):
                h = st.value
                buckets: list[Any] = []
                bounds = [floatToGoString(b) for b in h.bounds] + ["+Inf"]
                for i, (le, c) in enumerate(zip(bounds, h.cumulative())):
                    if ex is not None and ex.bucket == i:
                        buckets.append(
                            (le, float(c), PromExemplar(ex.ref.labels(), ex.value, ex.timestamp_s))
                        )
                    else:
                        buckets.append((le, float(c)))
                fam.add_metric(values, buckets, float(h.sum))
            else:
                fam.add_metric(values, float(st.value))  # type: ignore[arg-type]
        fam._labelnames = ()
        return fam

    # ---- fast path ---------------------------------------------------------------------
    def _header(self, metric: str, pn: PrometheusName, openmetrics: bool) -> str:
        key = (metric, pn.family, openmetrics)
        got = self._headers.get(key)
        if got is None:
            doc = _esc_help(help_text(metric), openmetrics)
            if openmetrics:
                got = f"# HELP {pn.family} {doc}\n# TYPE {pn.family} {pn.type}\n"
                if pn.unit:
                    got += f"# UNIT {pn.family} {pn.unit}\n"
            else:
                name = pn.sample if pn.type == "counter" else pn.family
                got = f"# HELP {name} {doc}\n# TYPE {name} {pn.type}\n"
            self._headers[key] = got
        return got

    @staticmethod
    def _labels(st: SeriesState) -> tuple[str, str, str]:
        """(``{labels}`` or ``""``, labels sorting before ``le``, those after), cached."""
        got = st.cache.get("labels")
        if got is None:
            pairs = sorted(
                (sanitize_label(k), _esc_value(str(v))) for k, v in st.attributes.items()
            )
            body = ",".join(f'{k}="{v}"' for k, v in pairs)
            before = "".join(f'{k}="{v}",' for k, v in pairs if k < "le")
            after = "".join(f',{k}="{v}"' for k, v in pairs if k > "le")
            got = st.cache["labels"] = ("{" + body + "}" if body else "", before, after)
        return got

    def render(self, *, openmetrics: bool = False) -> bytes:
        """The exposition text of the current series (what ``generate_latest`` would give).

        Args:
            openmetrics: OpenMetrics 1.0 (with exemplars and ``# EOF``) instead of the
                Prometheus text format 0.0.4.
        """
        return self.bridge.read(lambda fams: self._render(fams, openmetrics)).encode("utf-8")

    def _render(self, fams: Mapping[str, Mapping[SeriesKey, SeriesState]], om: bool) -> str:
        out: list[str] = []
        fmt = floatToGoString
        for metric in sorted(fams):
            table = fams[metric]
            if not table:
                continue
            series = list(table.values())
            mark = len(out)
            try:
                pn = self.name_of(metric, series[0].instrument)
                out.append(self._header(metric, pn, om))
                if pn.type == "histogram":
                    self._render_histograms(out, pn, series, om)
                    continue
                name = pn.sample
                for st in series:
                    labels = self._labels(st)[0]
                    ex = st.exemplar
                    if om and ex is not None and pn.type == "counter":
                        out.append(
                            f"{name}{labels} {fmt(st.value)} # "
                            f'{{span_id="{ex.ref.span_id}",trace_id="{ex.ref.trace_id}"}} '
                            f"{fmt(ex.value)} {ex.timestamp_s}\n"
                        )
                    else:
                        out.append(f"{name}{labels} {fmt(st.value)}\n")
            except Exception as exc:
                del out[mark:]
                self._warn(metric, exc)
        if om:
            out.append("# EOF\n")
        return "".join(out)

    def _render_histograms(
        self, out: list[str], pn: PrometheusName, series: list[SeriesState], om: bool
    ) -> None:
        fmt = floatToGoString
        name = pn.family
        for st in series:
            h = st.value
            if not isinstance(h, HistogramValue):
                continue
            labels, before, after = self._labels(st)
            ex = st.exemplar
            bounds = [fmt(b) for b in h.bounds] + ["+Inf"]
            cum = h.cumulative()
            for i, (le, c) in enumerate(zip(bounds, cum)):
                line = f'{name}_bucket{{{before}le="{le}"{after}}} {fmt(c)}'
                if om and ex is not None and ex.bucket == i:
                    line += (
                        f' # {{span_id="{ex.ref.span_id}",trace_id="{ex.ref.trace_id}"}} '
                        f"{fmt(ex.value)} {ex.timestamp_s}"
                    )
                out.append(line + "\n")
            out.append(f"{name}_count{labels} {fmt(cum[-1])}\n")
            out.append(f"{name}_sum{labels} {fmt(h.sum)}\n")
