"""Run the simulated cluster and serve its metrics for Prometheus, as a real deployment would.

``python deploy/sim/sim_endpoint.py --out DIR [--listen HOST:PORT] [--hosts N --chips N
--requests N --seed N --fault KIND@TARGET ...] [--interval S] [--hold S]``

One ``/metrics`` endpoint (OpenMetrics with exemplars when the scraper asks for it) serves
what the two otel-ext parts of a real deployment expose:

* the chips' counters through the counter bridge (``otel_ext.counters``: base and derived
  metrics, the same code as ``otel-ext exporter`` on each node), fed by the running
  simulation's live counter view;
* the workload's own OpenTelemetry metrics (the ``gen_ai.server.*`` TTFT/TPOT/duration
  histograms with trace-id exemplars, the clock-alignment ``accel.clock.*`` gauges), read
  back from the run's OTLP/JSON ``metrics.jsonl`` as it grows. They are named by
  ``otel_ext.exporters._prometheus_mapping`` and labelled with their resource attributes, as the
  Collector's ``prometheus`` exporter does with ``resource_to_telemetry_conversion``.

The run's spans go to ``DIR/traces.jsonl`` (OTLP/JSON); the Collector's ``otlpjsonfile``
receiver forwards them to Jaeger, so an exemplar's trace id opens its trace. The compose
file's ``sim`` service runs this script; the deploy tests run it as the workload.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from otel_ext.counters import CounterBridge, CounterCollector, Sample, SimulatedSource
from otel_ext.errors import OtelExtError
from otel_ext.exporters import MetricPoint, read_metrics
from otel_ext.exporters._prometheus_mapping import prometheus_name, sanitize_label
from otel_ext.exporters.prometheus import PrometheusExpositionServer, parse_listen
from otel_ext.semconv.attributes import (
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_MODEL,
    ACCEL_HOST_ID,
    ACCEL_LINK_ID,
    K8S_CONTAINER_NAME,
    K8S_NAMESPACE_NAME,
    K8S_POD_NAME,
)
from otel_ext.sim import EPOCH_NS, LiveCounters, SimConfig, parse_fault, run_simulation

__all__ = ["NodeCounters", "OtlpJsonMetricsCollector", "main"]

_log = logging.getLogger("otel_ext.deploy.sim")
#: resource attributes that are not worth a label (random or constant per SDK)
_SKIP_RESOURCE = ("telemetry.sdk.", "service.instance.id")


def _labels(point: MetricPoint) -> dict[str, str]:
    """Resource attributes, then point attributes over them, as Prometheus labels, with the
    workload's pod (:func:`_workload_pod`)."""
    out: dict[str, str] = {}
    resource = point.resource or {}
    for key, value in resource.items():
        if not key.startswith(_SKIP_RESOURCE):
            out[sanitize_label(key)] = str(value)
    for key, value in (point.attributes or {}).items():
        out[sanitize_label(key)] = str(value)
    for key, value in _workload_pod(resource).items():
        out.setdefault(key, value)
    return out


def _workload_pod(resource: Mapping[str, Any]) -> dict[str, str]:
    """The workload's pod under dcgm-exporter's label names, as the collector's
    ``resource/pod-labels`` processor gives a real workload's metrics (from its ``k8s.*``
    resource attributes); a simulated workload without them runs in its host's simulated pod
    (:class:`SimulatedPods`), so its series and its chips' series share the pod label."""
    if resource.get(K8S_POD_NAME):
        pairs = {
            "pod": K8S_POD_NAME,
            "namespace": K8S_NAMESPACE_NAME,
            "container": K8S_CONTAINER_NAME,
        }
        return {label: str(resource[key]) for label, key in pairs.items() if resource.get(key)}
    host = resource.get(ACCEL_HOST_ID)
    return SimulatedPods.identity(str(host)) if host else {}


def _exemplar(point: MetricPoint, upper: float, lower: float) -> Exemplar | None:
    """The latest exemplar whose value falls in ``(lower, upper]`` (no timestamp: scrape time)."""
    for ex in reversed(point.exemplars or ()):
        if lower < ex.value <= upper and ex.trace_id:
            return Exemplar({"trace_id": ex.trace_id, "span_id": ex.span_id}, float(ex.value))
    return None


class NodeCounters:
    """The live counters as a node agent reads them: device and link series carry the model.

    A node agent knows its devices' model (NVML reports it), and the registry's derived
    metrics need it for the device's peak figures. The simulated cluster's device, power and
    link series carry it already; this adds it to any device or link series that lacks it.
    """

    def __init__(self, live: LiveCounters, device_model: str):
        self.live = live
        self.device_model = device_model

    def read(self, now_ns: int) -> list[Sample]:
        out = []
        for s in self.live.read(now_ns):
            attrs = s.attributes
            if ACCEL_DEVICE_MODEL not in attrs and (
                ACCEL_DEVICE_ID in attrs or ACCEL_LINK_ID in attrs
            ):
                s = replace(s, attributes={**attrs, ACCEL_DEVICE_MODEL: self.device_model})
            out.append(s)
        return out

    def describe(self) -> list[Any]:
        return self.live.describe()


class OtlpJsonMetricsCollector(Collector):
    """A ``prometheus_client`` collector over the latest points of an OTLP/JSON metrics file.

    Every scrape re-reads the file when it grew (the ``.partial`` file while its writer
    runs) and exposes the latest point of each series. Never raises: an unreadable file
    keeps the previous snapshot.

    Args:
        path: the ``metrics.jsonl`` the workload writes.
        skip: OpenTelemetry metric names not to expose (served by another exposer).
    """

    def __init__(self, path: Path, *, skip: frozenset[str] = frozenset()):
        self.path = path
        self.skip = skip
        self._latest: dict[tuple[str, tuple[tuple[str, str], ...]], MetricPoint] = {}
        self._size = -1
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        stem = self.path.name.split(".")[0]  # metrics.jsonl, metrics.1.jsonl, *.partial
        size = sum(p.stat().st_size for p in self.path.parent.glob(stem + ".*"))
        if size == self._size:
            return
        latest: dict[tuple[str, tuple[tuple[str, str], ...]], MetricPoint] = {}
        for point in read_metrics(self.path, include_partial=True):
            if point.name in self.skip:
                continue
            latest[(point.name, tuple(sorted(_labels(point).items())))] = point
        self._latest, self._size = latest, size

    def collect(self) -> Iterator[Metric]:
        """Fresh families of the latest points."""
        with self._lock:
            try:
                self._refresh()
            except (OSError, OtelExtError) as exc:
                _log.debug("metrics file not readable yet: %s", exc)
            points = list(self._latest.items())
        families: dict[str, Metric] = {}
        for (name, labels), point in points:
            try:
                self._add(families, name, dict(labels), point)
            except Exception as exc:  # one odd point must not fail the scrape
                _log.warning("cannot expose %s: %r", name, exc)
        yield from families.values()

    def describe(self) -> list[Metric]:
        return []

    @staticmethod
    def _add(
        families: dict[str, Metric], name: str, labels: dict[str, str], p: MetricPoint
    ) -> None:
        if p.kind == "histogram":
            instrument = "histogram"
        elif p.kind == "sum":
            instrument = "counter" if p.is_monotonic else "updowncounter"
        else:
            instrument = "gauge"
        pn = prometheus_name(name, p.unit or "", instrument, monotonic=bool(p.is_monotonic))
        fam = families.get(pn.family)
        if fam is None:
            fam = families[pn.family] = Metric(pn.family, p.description or name, pn.type, pn.unit)
        if pn.type == "histogram":
            acc, lower = 0.0, float("-inf")
            bounds = [*p.explicit_bounds, float("inf")]
            for upper, count in zip(bounds, p.bucket_counts):
                acc += count
                le = "+Inf" if upper == float("inf") else floatToGoString(upper)
                fam.add_sample(
                    pn.family + "_bucket",
                    {**labels, "le": le},
                    acc,
                    exemplar=_exemplar(p, upper, lower),
                )
                lower = upper
            fam.add_sample(pn.family + "_count", labels, float(p.count or 0))
            fam.add_sample(pn.family + "_sum", labels, float(p.sum or 0.0))
        else:
            fam.add_sample(pn.sample, labels, float(p.value or 0.0))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sim_endpoint", description=__doc__.split("\n\n")[0])
    defaults = SimConfig()
    parser.add_argument("--out", required=True, help="run folder (traces.jsonl, metrics.jsonl)")
    parser.add_argument("--listen", default="127.0.0.1:9465", help="HOST:PORT of /metrics")
    parser.add_argument("--hosts", type=int, default=defaults.hosts)
    parser.add_argument("--chips", type=int, default=defaults.chips)
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument("--rate", type=float, default=defaults.arrival_rate, help="arrivals per s")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    parser.add_argument("--fault", action="append", default=[], metavar="KIND@TARGET")
    parser.add_argument("--interval", type=float, default=0.5, help="counter bridge interval, s")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="simulated seconds per wall second (0: as fast as possible)",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=None,
        help="seconds to keep serving after the run (default: until SIGTERM)",
    )
    return parser.parse_args(argv)


class SimulatedPods:
    """Simulated pod identity for the stack's simulated chips (there is no kubelet here): every
    chip of simulated host ``H`` serves pod ``sim-H`` of namespace ``otel-ext-sim``, container
    ``engine``, as the node agent's pod attribution labels a real chip (dcgm-exporter's label
    names; ``otel_ext.counters._k8s.PodAttributor`` on a real node), so the dashboards' pod
    variable has values in the demo stack. A series without a device gets none."""

    label_keys = frozenset({"pod", "namespace", "container"})

    def refresh(self, samples: Any, now_ns: int) -> None:
        """Nothing to look up: the identity follows from the device's name."""

    @staticmethod
    def identity(host: str) -> dict[str, str]:
        """The simulated pod of host ``host``."""
        return {"pod": f"sim-{host}", "namespace": "otel-ext-sim", "container": "engine"}

    def label_sets(self, attributes: Any) -> tuple[dict[str, str], ...]:
        dev = attributes.get(ACCEL_DEVICE_ID)
        if dev is None:
            return ()
        return (self.identity(str(dev).split("/", 1)[0]),)


def main(argv: list[str] | None = None) -> int:
    """Run the simulation while serving ``/metrics``; returns the exit status."""
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="sim_endpoint: %(message)s")
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    config = SimConfig(
        hosts=args.hosts,
        chips=args.chips,
        requests=args.requests,
        seed=seed,
        arrival_rate=args.rate,
        faults=tuple(parse_fault(f) for f in args.fault),
    ).validated()
    host, port = parse_listen(args.listen)
    out = Path(args.out)
    stop = threading.Event()
    parts: dict[str, Any] = {}

    def on_start(live: LiveCounters) -> None:
        counters = NodeCounters(live, config.device_model)
        bridge = CounterBridge(
            [SimulatedSource(counters)], interval_s=args.interval, labeller=SimulatedPods()
        )
        bridge.open()
        skip = frozenset(d.metric for d in live.describe())
        server = PrometheusExpositionServer(
            [CounterCollector(bridge), OtlpJsonMetricsCollector(out / "metrics.jsonl", skip=skip)],
            host=host,
            port=port,
            health=bridge.health,
        )
        bound = server.start()
        bridge.start()
        parts.update(bridge=bridge, server=server)
        print(
            f"sim_endpoint: serving http://{bound[0]}:{bound[1]}/metrics (seed {seed})",
            file=sys.stderr,
            flush=True,
        )

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set() or "done" not in parts:
            raise SystemExit(0)  # stop a run in progress too
        stop.set()

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    try:
        started = time.monotonic()

        def pace(now_ns: int, samples: list[Sample]) -> None:
            # keep simulated time in step with the wall clock, so scrapes see it unfold
            if args.speed > 0:
                ahead = (now_ns - EPOCH_NS) / 1e9 / args.speed - (time.monotonic() - started)
                if ahead > 0:
                    stop.wait(ahead)

        result = run_simulation(config, out, on_start=on_start, on_slice=pace, timeline=False)
        print(
            f"sim_endpoint: run done: {result.requests} requests, {result.spans} spans "
            f"in {result.wall_seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        parts["done"] = True
        stop.wait(args.hold)
    finally:
        if "server" in parts:
            parts["server"].stop()
            parts["bridge"].stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
