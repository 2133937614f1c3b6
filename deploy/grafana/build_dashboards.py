"""Generate the Grafana dashboards of the otel-ext stack from the metric registry.

``python deploy/grafana/build_dashboards.py`` writes ``deploy/grafana/dashboards/*.json``;
``--check`` exits 1 when a checked-in dashboard differs from what it would write.

Every query names its metrics through the registry constants
(``otel_ext.semconv.metrics``) mapped by the counter bridge's pure mapping functions
(``otel_ext.exporters._prometheus_mapping.prometheus_name`` and ``sanitize_label``), or through the
recording rules of ``deploy/prometheus/rules/otel-ext-recording.yaml``, so a renamed metric
changes the dashboards instead of silently emptying a panel. Grafana 11 JSON model; the
Prometheus data source has uid ``prometheus`` (see ``provisioning/datasources``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from otel_ext.counters._k8s import LABEL_STYLES
from otel_ext.exporters._prometheus_mapping import prometheus_name, sanitize_label
from otel_ext.semconv import attributes as A
from otel_ext.semconv import metrics as M

__all__ = ["DASHBOARDS", "build", "label", "main", "metric"]

OUT = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "prometheus"}
RATE = "$__rate_interval"


def metric(name: str, suffix: str = "") -> str:
    """The Prometheus sample name of registry metric ``name`` (``suffix``: ``_bucket``...)."""
    spec = M.METRIC_SPECS[name]
    pn = prometheus_name(name, spec["unit"], spec["instrument"], monotonic=spec["monotonic"])
    return (pn.family + suffix) if suffix else pn.sample


def label(attribute: str) -> str:
    """The Prometheus label of registry attribute ``attribute``."""
    return sanitize_label(attribute)


HOST, DEVICE, LINK, DIRECTION = (
    label(A.ACCEL_HOST_ID),
    label(A.ACCEL_DEVICE_ID),
    label(A.ACCEL_LINK_ID),
    label(A.NETWORK_IO_DIRECTION),
)
GROUP, MODEL, DOMAIN = (
    label(A.ACCEL_COLLECTIVE_GROUP),
    label(A.GEN_AI_REQUEST_MODEL),
    label(A.ACCEL_CLOCK_DOMAIN),
)
REFERENCE, SIGNAL, SOURCE = (
    label(A.ACCEL_CLOCK_REFERENCE),
    label(A.ACCEL_TELEMETRY_SIGNAL),
    label(A.ACCEL_SOURCE),
)
TOKEN_TYPE = label(A.GEN_AI_TOKEN_TYPE)
#: the node agent's pod label (dcgm-exporter's name, its default ``--pod-labels dcgm``)
POD = LABEL_STYLES["dcgm"]["pod"]

# recording rules (deploy/prometheus/rules/otel-ext-recording.yaml)
R_TTFT_Q = "model:" + metric(M.METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN, "") + ":quantile_rate1m"
R_TPOT_Q = "model:" + metric(M.METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN, "") + ":quantile_rate1m"
R_COLL_MEAN = "device:" + metric(M.METRIC_ACCEL_COLLECTIVE_DURATION, "") + ":mean_rate1m"
R_COLL_WAIT = "device:accel_collective_wait_seconds:estimate_rate1m"
R_SKEW_S = "group:accel_collective_skew_seconds:rate1m"
R_SKEW_RATIO = "group:accel_collective_skew:ratio_rate1m"
R_LINK_PEERS = "link:accel_link_bandwidth:ratio_to_peers"
R_HOST_POWER = "host:" + metric(M.METRIC_HW_POWER) + ":sum"
R_TOKENS = "cluster:accel_inference_tokens:rate1m"
R_CLOCK_MAX = "host:" + metric(M.METRIC_ACCEL_CLOCK_BOUND) + ":max"


def _target(
    expr: str, legend: str, ref: str, *, exemplar: bool = False, fmt: str = "time_series"
) -> dict[str, Any]:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "refId": ref,
        "exemplar": exemplar,
        "format": fmt,
    }


class _Board:
    """Lays panels out on Grafana's 24-column grid, two or three to a row."""

    def __init__(self, uid: str, title: str, description: str, variables: list[dict[str, Any]]):
        self.uid, self.title, self.description, self.variables = uid, title, description, variables
        self.panels: list[dict[str, Any]] = []
        self._x = self._y = 0

    def row(self, title: str) -> None:
        if self._x:
            self._x, self._y = 0, self._y + 8
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": len(self.panels) + 1,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
                "panels": [],
            }
        )
        self._y += 1

    def panel(
        self,
        title: str,
        targets: list[tuple[str, str]],
        *,
        unit: str,
        kind: str = "timeseries",
        width: int = 12,
        exemplar: bool = False,
        description: str = "",
        fmt: str = "time_series",
    ) -> None:
        if self._x + width > 24:
            self._x, self._y = 0, self._y + 8
        panel: dict[str, Any] = {
            "id": len(self.panels) + 1,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"h": 8, "w": width, "x": self._x, "y": self._y},
            "targets": [
                _target(expr, legend, chr(ord("A") + i), exemplar=exemplar, fmt=fmt)
                for i, (expr, legend) in enumerate(targets)
            ],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
        }
        if kind == "heatmap":
            panel["options"] = {
                "calculate": False,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "yAxis": {"axisPlacement": "left", "unit": unit},
                "rowsFrame": {"layout": "auto"},
                "tooltip": {"mode": "single", "yHistogram": True},
                "legend": {"show": True},
            }
        self.panels.append(panel)
        self._x += width

    def json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["otel-ext"],
            "timezone": "browser",
            "schemaVersion": 39,
            "version": 1,
            "editable": True,
            "graphTooltip": 1,
            "refresh": "10s",
            "time": {"from": "now-30m", "to": "now"},
            "timepicker": {},
            "templating": {"list": self.variables},
            "annotations": {"list": []},
            "links": [
                {
                    "title": "otel-ext",
                    "type": "dashboards",
                    "tags": ["otel-ext"],
                    "asDropdown": True,
                }
            ],
            "panels": self.panels,
        }


def _variable(name: str, metric_name: str, label_name: str, title: str) -> dict[str, Any]:
    query = f"label_values({metric_name}, {label_name})"
    return {
        "name": name,
        "label": title,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def _hist(name: str, sel: str, by: str = "") -> str:
    grouping = f"le, {by}" if by else "le"
    return f"sum by ({grouping}) (rate({metric(name, '_bucket')}{{{sel}}}[{RATE}]))"


def cluster() -> dict[str, Any]:
    # a device's series carry the pod using it (none when free: "All" is ".*", which also
    # matches no label); per-host series (recording rules, tokens per joule) have no pod
    hh = f'{HOST}=~"$host"'
    h = f'{hh},{POD}=~"$pod"'
    b = _Board(
        "otel-ext-cluster",
        "otel-ext / Cluster",
        "Per-chip utilization and derived metrics, per-link bandwidth, power and temperature; "
        "the pod variable keeps the chips a pod uses.",
        [
            _variable("host", metric(M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY), HOST, "Host"),
            _variable("pod", metric(M.METRIC_HW_POWER), POD, "Pod"),
        ],
    )
    dev = f"{{{{{DEVICE}}}}} {{{{{POD}}}}}"
    b.row("Compute")
    b.panel(
        "Chip utilization",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_UTILIZATION)}{{{h}}}", dev)],
        unit="percentunit",
        width=8,
    )
    b.panel(
        "Model FLOP utilization (MFU)",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_MFU)}{{{h}}}", dev)],
        unit="percentunit",
        width=8,
    )
    b.panel(
        "Tensor-pipe utilization",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_TENSOR_UTILIZATION)}{{{h}}}", dev)],
        unit="percentunit",
        width=8,
    )
    b.panel(
        "Achieved FLOP/s",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_FLOPS_ACHIEVED)}{{{h}}}", dev)],
        unit="short",
        width=8,
    )
    b.panel(
        "Memory bandwidth",
        [(f"{metric(M.METRIC_ACCEL_MEMORY_BANDWIDTH)}{{{h}}}", dev)],
        unit="Bps",
        width=8,
    )
    b.panel(
        "Memory-bandwidth utilization (MBU)",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_MBU)}{{{h}}}", dev)],
        unit="percentunit",
        width=8,
    )
    b.panel(
        "Arithmetic intensity (FLOP/byte)",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_ARITHMETIC_INTENSITY)}{{{h}}}", dev)],
        unit="short",
        width=8,
    )
    b.panel(
        "Compute clock / maximum (below 1: throttled)",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_CLOCK_RATIO)}{{{h}}}", dev)],
        unit="percentunit",
        width=8,
    )
    b.panel(
        "Device memory in use",
        [
            (
                f"{metric(M.METRIC_HW_GPU_MEMORY_USAGE)}{{{h}}} / {metric(M.METRIC_HW_GPU_MEMORY_LIMIT)}{{{h}}}",
                dev,
            )
        ],
        unit="percentunit",
        width=8,
    )
    b.row("Links")
    link = f"{{{{{LINK}}}}} {{{{{DIRECTION}}}}}"
    b.panel(
        "Link bandwidth utilization (per link)",
        [(f"{metric(M.METRIC_ACCEL_LINK_BANDWIDTH_UTILIZATION)}{{{h}}}", link)],
        unit="percentunit",
        kind="heatmap",
    )
    b.panel(
        "Link bandwidth (per link)",
        [(f"{metric(M.METRIC_ACCEL_LINK_BANDWIDTH)}{{{h}}}", link)],
        unit="Bps",
        kind="heatmap",
    )
    b.panel(
        "Link bandwidth / host's mean (below 0.5: degraded)",
        [(f"{R_LINK_PEERS}{{{hh}}}", link)],
        unit="percentunit",
    )
    b.panel("NIC bandwidth", [(f"{metric(M.METRIC_ACCEL_NIC_BANDWIDTH)}{{{h}}}", link)], unit="Bps")
    b.row("Power and temperature")
    b.panel("Power", [(f"{metric(M.METRIC_HW_POWER)}{{{h}}}", dev)], unit="watt", width=8)
    b.panel(
        "Power / power limit",
        [(f"{metric(M.METRIC_ACCEL_DEVICE_POWER_RATIO)}{{{h}}}", dev)],
        unit="percentunit",
        width=8,
    )
    b.panel(
        "Temperature", [(f"{metric(M.METRIC_HW_TEMPERATURE)}{{{h}}}", dev)], unit="celsius", width=8
    )
    b.panel("Host power", [(f"{R_HOST_POWER}{{{hh}}}", f"{{{{{HOST}}}}}")], unit="watt", width=8)
    b.panel(
        "Tokens per joule",
        [(f"{metric(M.METRIC_ACCEL_INFERENCE_TOKENS_PER_JOULE)}{{{hh}}}", f"{{{{{HOST}}}}}")],
        unit="short",
        width=8,
    )
    b.panel(
        "Counter sources up",
        [(f"{metric(M.METRIC_ACCEL_COUNTERS_SOURCE_UP)}", f"{{{{instance}}}} {{{{{SOURCE}}}}}")],
        unit="short",
        width=8,
        kind="stat",
    )
    return b.json()


def inference() -> dict[str, Any]:
    # the workload's series carry its pod (the collector's resource/pod-labels processor);
    # the recorded per-model quantiles aggregate pods away and keep the model selection only
    by_model = f'{MODEL}=~"$model"'
    sel = f'{by_model},{POD}=~"$pod"'
    ttft_count = metric(M.METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN, "_count")
    b = _Board(
        "otel-ext-inference",
        "otel-ext / Inference latency",
        "Time to first token and time per output token: distributions, quantiles, and exemplars "
        "that open the request's trace in Jaeger; the pod variable keeps a pod's requests "
        "(recorded per-model panels: all pods).",
        [
            _variable("model", ttft_count, MODEL, "Model"),
            _variable("pod", ttft_count, POD, "Pod"),
        ],
    )
    ttft, tpot = (
        M.METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
        M.METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
    )
    b.row("Time to first token")
    b.panel(
        "TTFT distribution (click an exemplar for its trace)",
        [(_hist(ttft, sel), "{{le}}")],
        unit="s",
        kind="heatmap",
        exemplar=True,
        fmt="heatmap",
    )
    b.panel(
        "TTFT quantiles",
        [
            (f"histogram_quantile({q}, {_hist(ttft, sel)})", f"p{int(float(q) * 100)}")
            for q in ("0.5", "0.9", "0.99")
        ],
        unit="s",
        exemplar=True,
    )
    b.panel(
        "TTFT p99 per model (recorded)",
        [(f'{R_TTFT_Q}{{{by_model},quantile="0.99"}}', f"{{{{{MODEL}}}}}")],
        unit="s",
    )
    b.panel(
        # vLLM's and SGLang's own histograms, mapped by rules/otel-ext-serving-engines.yaml
        "TTFT p99 per serving engine (vLLM, SGLang mapped to gen_ai.server)",
        [
            (
                f'max by (engine, {MODEL}) ({R_TTFT_Q}{{quantile="0.99"}})',
                f"{{{{engine}}}} {{{{{MODEL}}}}}",
            )
        ],
        unit="s",
    )
    b.panel(
        "TTFT p99 per host",
        [(f"histogram_quantile(0.99, {_hist(ttft, sel, HOST)})", f"{{{{{HOST}}}}}")],
        unit="s",
        exemplar=True,
    )
    b.row("Time per output token")
    b.panel(
        "TPOT distribution (click an exemplar for its trace)",
        [(_hist(tpot, sel), "{{le}}")],
        unit="s",
        kind="heatmap",
        exemplar=True,
        fmt="heatmap",
    )
    b.panel(
        "TPOT quantiles",
        [
            (f"histogram_quantile({q}, {_hist(tpot, sel)})", f"p{int(float(q) * 100)}")
            for q in ("0.5", "0.9", "0.99")
        ],
        unit="s",
        exemplar=True,
    )
    b.panel(
        "TPOT p99 per model (recorded)",
        [(f'{R_TPOT_Q}{{{by_model},quantile="0.99"}}', f"{{{{{MODEL}}}}}")],
        unit="s",
    )
    b.panel(
        "TPOT p99 per serving engine (vLLM, SGLang mapped to gen_ai.server)",
        [
            (
                f'max by (engine, {MODEL}) ({R_TPOT_Q}{{quantile="0.99"}})',
                f"{{{{engine}}}} {{{{{MODEL}}}}}",
            )
        ],
        unit="s",
    )
    b.panel(
        "Request duration quantiles",
        [
            (
                f"histogram_quantile({q}, {_hist(M.METRIC_GEN_AI_SERVER_REQUEST_DURATION, sel)})",
                f"p{int(float(q) * 100)}",
            )
            for q in ("0.5", "0.99")
        ],
        unit="s",
        exemplar=True,
    )
    b.row("Load")
    b.panel("Tokens per second", [(f"{R_TOKENS}", f"{{{{{TOKEN_TYPE}}}}}")], unit="short", width=8)
    b.panel(
        "Requests per second",
        [
            (
                f"sum by ({HOST}) (rate({metric(M.METRIC_ACCEL_INFERENCE_REQUESTS)}[{RATE}]))",
                f"{{{{{HOST}}}}}",
            )
        ],
        unit="reqps",
        width=8,
    )
    b.panel(
        "Queue depth",
        [(metric(M.METRIC_ACCEL_INFERENCE_QUEUE_DEPTH), f"{{{{{HOST}}}}}")],
        unit="short",
        width=8,
    )
    return b.json()


def collectives() -> dict[str, Any]:
    # raw series carry the member's pod; the recorded wait, skew and mean aggregate it away
    gg = f'{GROUP}=~"$group"'
    g = f'{gg},{POD}=~"$pod"'
    count = metric(M.METRIC_ACCEL_COLLECTIVE_DURATION, "_count")
    b = _Board(
        "otel-ext-collectives",
        "otel-ext / Collectives and stragglers",
        "Time in collectives per member, the wait for the last arrival, skew per group and bus "
        "bandwidth; the pod variable keeps a pod's members (recorded panels: every pod).",
        [_variable("group", count, GROUP, "Group"), _variable("pod", count, POD, "Pod")],
    )
    dev = f"{{{{{GROUP}}}}} {{{{{DEVICE}}}}}"
    dur = M.METRIC_ACCEL_COLLECTIVE_DURATION
    b.row("Wait and skew")
    b.panel(
        "Wait per rank (extra time over the group's fastest member)",
        [(f"{R_COLL_WAIT}{{{gg}}}", dev)],
        unit="s",
        description="The member with the least wait arrived last: that is the straggler.",
    )
    b.panel("Skew per group", [(f"{R_SKEW_S}{{{gg}}}", f"{{{{{GROUP}}}}}")], unit="s")
    b.panel(
        "Skew / slowest member (alert above 0.5)",
        [(f"{R_SKEW_RATIO}{{{gg}}}", f"{{{{{GROUP}}}}}")],
        unit="percentunit",
    )
    b.panel(
        "Measured wait per rank",
        [
            (
                f"sum by ({GROUP}, {DEVICE}) (rate({metric(M.METRIC_ACCEL_COLLECTIVE_WAIT_TIME)}{{{g}}}[{RATE}]))",
                dev,
            )
        ],
        unit="percentunit",
        description="Fraction of time each member waited inside collectives, from instrumented "
        "collectives (accel.collective.wait.time).",
    )
    b.row("Durations and bandwidth")
    b.panel("Mean time in a collective per member", [(f"{R_COLL_MEAN}{{{gg}}}", dev)], unit="s")
    b.panel(
        "Collective duration distribution",
        [(_hist(dur, g), "{{le}}")],
        unit="s",
        kind="heatmap",
        exemplar=True,
        fmt="heatmap",
    )
    b.panel(
        "p99 collective duration per member",
        [(f"histogram_quantile(0.99, {_hist(dur, g, DEVICE)})", f"{{{{{DEVICE}}}}}")],
        unit="s",
        exemplar=True,
    )
    b.panel(
        "Bus bandwidth",
        [(f"{metric(M.METRIC_ACCEL_COLLECTIVE_BUSBW)}{{{g}}}", dev)],
        unit="Bps",
        description="accel.collective.busbw, derived by the counter bridge from accel.collective.bus.io and "
        "accel.collective.time.",
    )
    b.row("Pending collectives (hangs)")
    pending = metric(M.METRIC_ACCEL_COLLECTIVE_PENDING_DURATION)
    rank, op, seq = label(A.ACCEL_RANK), label(A.ACCEL_COLLECTIVE_OP), label(A.ACCEL_COLLECTIVE_SEQ)
    b.panel(
        "Pending collectives per group",
        [
            (
                f"max by ({GROUP}, {op}, {seq}, {rank}) ({pending}{{{g}}})",
                f"{{{{{GROUP}}}}} {{{{{op}}}}} #{{{{{seq}}}}} rank {{{{{rank}}}}}",
            )
        ],
        unit="s",
        description="How long each member has waited in its oldest collective in flight "
        "(accel.collective.pending.duration, shown once past the agent's 1 s minimum). Members "
        "of a group missing here while the others wait are the ones AccelCollectiveHang names.",
    )
    b.panel(
        "Last completed sequence number per rank",
        [
            (
                f"max by ({GROUP}, {rank}) ({metric(M.METRIC_ACCEL_COLLECTIVE_LAST_SEQ)}{{{g}}})",
                f"{{{{{GROUP}}}}} rank {{{{{rank}}}}}",
            )
        ],
        unit="none",
        description="accel.collective.last_seq: a rank that stopped stays below the sequence "
        "number the others wait in.",
    )
    return b.json()


def clocks() -> dict[str, Any]:
    r = f'{REFERENCE}=~"$host"'
    b = _Board(
        "otel-ext-clocks",
        "otel-ext / Clock health",
        "How well each clock domain (a chip's timer) is aligned to its host: the error bound that every "
        "aligned timestamp carries, offset, drift and sampling.",
        [_variable("host", metric(M.METRIC_ACCEL_CLOCK_BOUND), REFERENCE, "Reference clock")],
    )
    dom = f"{{{{{DOMAIN}}}}}"
    b.panel(
        "Alignment bound per clock domain (alert above 100 µs)",
        [(f"{metric(M.METRIC_ACCEL_CLOCK_BOUND)}{{{r}}}", dom)],
        unit="ns",
        width=24,
    )
    b.panel(
        "Worst bound per reference clock",
        [(f"{R_CLOCK_MAX}{{{r}}}", f"{{{{{REFERENCE}}}}}")],
        unit="ns",
    )
    b.panel(
        "Offset from the reference",
        [(f"{metric(M.METRIC_ACCEL_CLOCK_OFFSET)}{{{r}}}", dom)],
        unit="ns",
    )
    b.panel("Drift", [(f"{metric(M.METRIC_ACCEL_CLOCK_DRIFT)}{{{r}}}", dom)], unit="ppm")
    b.panel(
        "Clock brackets per second",
        [(f"rate({metric(M.METRIC_ACCEL_CLOCK_SAMPLES)}[{RATE}])", dom)],
        unit="short",
    )
    return b.json()


DASHBOARDS = {
    "cluster.json": cluster,
    "inference-latency.json": inference,
    "collectives.json": collectives,
    "clock-health.json": clocks,
}


def build() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {
        name: json.dumps(fn(), indent=2, ensure_ascii=False) + "\n"
        for name, fn in DASHBOARDS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files are out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in build().items():
        path = OUT / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(
            "out of date (run python deploy/grafana/build_dashboards.py): " + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
