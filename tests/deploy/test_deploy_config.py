"""The deploy/ configuration: it parses, references only files that exist, uses the ports
and names the code uses, and passes the real validators available without Docker
(``promtool check config``, ``promtool check rules``, ``promtool test rules``,
``kubectl kustomize``).

The Collector configurations are validated structurally (every pipeline component is
defined, connectors are used on both sides): no Collector binary is available here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, require_binary

from otel_ext import config
from otel_ext.counters import cli as exporter_cli
from otel_ext.exporters._prometheus_mapping import prometheus_name
from otel_ext.exporters.prometheus import parse_listen
from otel_ext.semconv import attributes, spans
from otel_ext.semconv.metrics import METRIC_SPECS

DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yaml"))
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
COLLECTOR_CONFIGS = [
    DEPLOY / "collector" / "collector.yaml",
    *sorted((DEPLOY / "kubernetes" / "collector").glob("*.yaml")),
]
K8S = DEPLOY / "kubernetes"
OTLP_GRPC, OTLP_HTTP = 4317, 4318
NODE_AGENT_PORT = parse_listen(config.PROMETHEUS_LISTEN.default)[1]
ATTRIBUTE_NAMES = {v for k, v in vars(attributes).items() if k.isupper() and isinstance(v, str)}


def _yaml_docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _compose() -> dict[str, Any]:
    return dict(_load(COMPOSE))


def _sim_command() -> list[str]:
    """The sim service's shell command as words (the run folder's date stamp fixed)."""
    return (
        str(_compose()["services"]["sim"]["command"][0])
        .replace("$$(date +%s)", "1700000000")
        .split()
    )


# --------------------------------------------------------------------------- names
def prometheus_names() -> set[str]:
    """Every Prometheus series name the registry's metrics map to."""
    out = set()
    for name, spec in METRIC_SPECS.items():
        pn = prometheus_name(name, spec["unit"], spec["instrument"], monotonic=spec["monotonic"])
        out |= {pn.family, pn.sample}
        if pn.type == "histogram":
            out |= {pn.family + s for s in ("_bucket", "_count", "_sum")}
    return out


def engine_metric_names() -> set[str]:
    """Serving engines' histogram series mapped onto gen_ai.server (engine-metrics.yaml)."""
    table = _load(DEPLOY / "prometheus" / "engine-metrics.yaml")
    return {m["source"] + s for m in table["metrics"] for s in ("_bucket", "_count", "_sum")}


def recording_rule_names() -> set[str]:
    return {
        r["record"] for p in RULES for g in _load(p)["groups"] for r in g["rules"] if "record" in r
    }


_PROMQL_WORDS = {
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "by",
    "on",
    "without",
    "ignoring",
    "group_left",
    "group_right",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "label_values",
    "label_replace",
    "vector",
    "topk",
    "bottomk",
    "quantile",
    "stddev",
    "abs",
    "clamp_min",
    "clamp_max",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "ALERTS",
    "Inf",
    "NaN",
    "inf",
}


def metric_names_in(expr: str) -> set[str]:
    """The series names a PromQL expression selects (labels, functions, keywords removed)."""
    text = re.sub(r"label_values\((\w+),\s*\w+\)", r"\1", expr)  # Grafana: (metric, label)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text))
    return {
        w for w in words if w not in _PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]?|e\d*", w)
    }


def dashboard_exprs() -> list[tuple[str, str, str]]:
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            out += [(path.name, panel["title"], t["expr"]) for t in panel.get("targets", [])]
        out += [
            (path.name, "variable " + v["name"], v["definition"])
            for v in board["templating"]["list"]
        ]
    return out


def rule_exprs() -> list[tuple[str, str, str]]:
    return [
        (p.name, r.get("record") or r["alert"], r["expr"])
        for p in RULES
        for g in _load(p)["groups"]
        for r in g["rules"]
    ]


def test_metric_name_extraction() -> None:
    expr = 'histogram_quantile(0.99, sum by (le, accel_host_id) (rate(x_bucket{a=~"$m",b="c d"}[5m]))) / on (g) group_left () y:z:w > 0.5'
    assert metric_names_in(expr) == {"x_bucket", "y:z:w"}
    assert metric_names_in("label_values(a_total, accel_host_id)") == {"a_total"}


def test_template_variables_use_registry_labels() -> None:
    labels = {v.replace(".", "_") for v in ATTRIBUTE_NAMES}
    # and the node agent's pod labels (dcgm-exporter's names, docs/counters.md)
    from otel_ext.counters._k8s import LABEL_STYLES

    labels |= set(LABEL_STYLES["dcgm"].values())
    for _, what, expr in dashboard_exprs():
        if what.startswith("variable "):
            label = re.fullmatch(r"label_values\(\w+, *(\w+)\)", expr).group(1)  # type: ignore[union-attr]
            assert label in labels, expr


@pytest.mark.parametrize(("where", "what", "expr"), dashboard_exprs() + rule_exprs())
def test_queries_use_registry_metric_names(where: str, what: str, expr: str) -> None:
    names = metric_names_in(expr.replace("$__rate_interval", "1m"))
    assert names, f"{where} / {what}: no metric in {expr!r}"
    unknown = names - prometheus_names() - recording_rule_names() - engine_metric_names()
    assert not unknown, (
        f"{where} / {what}: {sorted(unknown)} are neither registry metrics nor recording rules"
    )


# --------------------------------------------------------------------------- dashboards
def _builder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "build_dashboards", DEPLOY / "grafana" / "build_dashboards.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dashboards_are_generated_and_up_to_date() -> None:
    built = _builder().build()
    assert sorted(built) == sorted(p.name for p in DASHBOARDS)
    for path in DASHBOARDS:
        assert path.read_text() == built[path.name], (
            f"{path.name} is stale: run python deploy/grafana/build_dashboards.py"
        )


def test_dashboards_cover_the_issue() -> None:
    boards = {json.loads(p.read_text())["title"]: json.loads(p.read_text()) for p in DASHBOARDS}
    assert set(boards) == {
        "otel-ext / Cluster",
        "otel-ext / Inference latency",
        "otel-ext / Collectives and stragglers",
        "otel-ext / Clock health",
    }
    uids = [b["uid"] for b in boards.values()]
    assert len(set(uids)) == len(uids)
    titles = {b: [p["title"] for p in boards[b]["panels"] if p["type"] != "row"] for b in boards}
    exprs = {
        b: " ".join(t["expr"] for p in boards[b]["panels"] for t in p.get("targets", []))
        for b in boards
    }
    cluster = exprs["otel-ext / Cluster"]
    for metric in (
        "accel_device_utilization_ratio",
        "accel_device_mfu_ratio",
        "accel_link_bandwidth_bytes_per_second",
        "hw_power_watts",
        "hw_temperature_celsius",
    ):
        assert metric in cluster
    heatmaps = [p for p in boards["otel-ext / Cluster"]["panels"] if p["type"] == "heatmap"]
    assert all("accel_link" in p["targets"][0]["expr"] for p in heatmaps) and len(heatmaps) == 2
    latency = boards["otel-ext / Inference latency"]["panels"]
    for metric in (
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "gen_ai_server_time_per_output_token_seconds_bucket",
    ):
        with_exemplars = [
            p
            for p in latency
            for t in p.get("targets", [])
            if metric in t["expr"] and t["exemplar"]
        ]
        assert any(p["type"] == "heatmap" for p in with_exemplars)
        assert any("histogram_quantile" in p["targets"][0]["expr"] for p in with_exemplars)
    assert any("wait" in t.lower() for t in titles["otel-ext / Collectives and stragglers"])
    assert any("skew" in t.lower() for t in titles["otel-ext / Collectives and stragglers"])
    assert (
        "accel_collective_busbw_bytes_per_second" in exprs["otel-ext / Collectives and stragglers"]
    )
    assert "accel_clock_bound_nanoseconds" in exprs["otel-ext / Clock health"]
    for board in boards.values():
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}


# --------------------------------------------------------------------------- grafana provisioning
def test_grafana_datasources_link_exemplars_to_jaeger() -> None:
    sources = {
        d["uid"]: d
        for d in _load(DEPLOY / "grafana/provisioning/datasources/datasources.yaml")["datasources"]
    }
    prom, jaeger = sources["prometheus"], sources["jaeger"]
    assert prom["type"] == "prometheus" and prom["url"] == "http://prometheus:9090"
    (dest,) = prom["jsonData"]["exemplarTraceIdDestinations"]
    # the exemplar label our exposition and the Collector's prometheus exporter write
    assert dest == {"name": "trace_id", "datasourceUid": "jaeger"}
    assert jaeger["type"] == "jaeger" and jaeger["url"] == "http://jaeger:16686"
    t2m = jaeger["jsonData"]["tracesToMetrics"]
    assert t2m["datasourceUid"] == "prometheus"
    assert {t["key"] for t in t2m["tags"]} <= ATTRIBUTE_NAMES
    for q in t2m["queries"]:
        assert metric_names_in(q["query"].replace("$$__tags", "")) <= prometheus_names()


def test_grafana_dashboard_provider_points_at_the_mounted_folder() -> None:
    (provider,) = _load(DEPLOY / "grafana/provisioning/dashboards/dashboards.yaml")["providers"]
    mounts = dict(v.split(":")[:2] for v in _compose()["services"]["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"


# --------------------------------------------------------------------------- compose
def test_compose_images_pinned_and_volumes_exist() -> None:
    services = _compose()["services"]
    assert {"collector", "jaeger", "prometheus", "grafana", "sim", "exporter"} <= set(services)
    for name, svc in services.items():
        image = svc.get("image", "")
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image), (
            f"{name}: image {image!r} not pinned to a version"
        )
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: volume source {source} missing"
            elif source.startswith("/"):  # a host folder: only the agent's read-only view
                assert name == "exporter" and volume.endswith(":ro"), f"{name}: {volume}"
            else:
                assert source in _compose()["volumes"], f"{name}: named volume {source} undeclared"
        if "build" in svc:
            context = (DEPLOY / svc["build"]["context"]).resolve()
            dockerfile = context / svc["build"]["dockerfile"]
            assert dockerfile.is_file()
            for line in dockerfile.read_text().splitlines():
                if line.startswith("COPY "):
                    for src in line.split()[1:-1]:
                        assert (context / src).exists(), f"Dockerfile COPY source {src} missing"
    assert "--enable-feature=exemplar-storage" in services["prometheus"]["command"]


def test_compose_agent_reads_the_hosts_active_span_folder_like_the_daemonset() -> None:
    agent = _compose()["services"]["exporter"]
    folder = agent["environment"][config.ACTIVE_SPAN_DIR.name]
    assert f"{folder}:{folder}:ro" in agent["volumes"]
    pod = _k8s_docs()[("DaemonSet", "otel-ext-exporter")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[config.ACTIVE_SPAN_DIR.name] == folder


def test_compose_ports_match_the_code() -> None:
    services = _compose()["services"]
    collector_ports = {int(p.split(":")[1]) for p in services["collector"]["ports"]}
    assert {OTLP_GRPC, OTLP_HTTP} <= collector_ports
    # the node agent: the CLI parses its command, and it serves on the code's default port
    parser = argparse.ArgumentParser()
    exporter_cli.add_arguments(parser)
    args = parser.parse_args(services["exporter"]["command"][1:])
    assert services["exporter"]["command"][0] == "exporter"
    assert parse_listen(args.listen)[1] == NODE_AGENT_PORT
    assert f"{NODE_AGENT_PORT}:{NODE_AGENT_PORT}" in services["exporter"]["ports"]
    # the simulated cluster's endpoint: its script parses the command
    sim_cmd = _sim_command()
    assert sim_cmd[:3] == ["exec", "python", "/opt/otel-ext/deploy/sim/sim_endpoint.py"]
    listen = sim_cmd[sim_cmd.index("--listen") + 1]
    sim_port = parse_listen(listen)[1]
    # Prometheus scrapes exactly those ports, and the Collector's prometheus exporter
    targets = {
        job["job_name"]: job["static_configs"][0]["targets"][0]
        for job in _load(PROMETHEUS_YML)["scrape_configs"]
    }
    collector = _load(DEPLOY / "collector" / "collector.yaml")
    assert targets["otel-ext-exporter"] == f"exporter:{NODE_AGENT_PORT}"
    assert targets["otel-ext-sim"] == f"sim:{sim_port}"
    assert (
        targets["otel-collector"]
        == "collector:" + collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    )
    assert (
        targets["otel-collector-self"]
        == "collector:" + collector["service"]["telemetry"]["metrics"]["address"].rsplit(":", 1)[1]
    )
    # the Collector reads the sim's files where the sim writes them
    sim_mount = next(v for v in services["sim"]["volumes"] if v.startswith("sim-data:")).split(":")[
        1
    ]
    assert sim_cmd[sim_cmd.index("--out") + 1].startswith(sim_mount + "/")
    assert collector["receivers"]["otlpjsonfile/sim"]["include"][0].startswith(sim_mount + "/")


def test_sim_endpoint_options_parse() -> None:
    spec = importlib.util.spec_from_file_location(
        "sim_endpoint", DEPLOY / "sim" / "sim_endpoint.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module._parse(_sim_command()[3:])
    assert args.hosts == 2 and args.fault == ["throttle@host1/chip2"]


# --------------------------------------------------------------------------- collector
@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_collector_pipelines_reference_defined_components(path: Path) -> None:
    cfg = _load(path)
    service = cfg["service"]
    for ext in service.get("extensions", []):
        assert ext in cfg["extensions"]
    connectors = cfg.get("connectors", {})
    used_as_exporter, used_as_receiver = set(), set()
    for name, pipe in service["pipelines"].items():
        assert pipe["receivers"] and pipe["exporters"], name
        for r in pipe["receivers"]:
            assert r in cfg.get("receivers", {}) or r in connectors, (
                f"{name}: receiver {r} undefined"
            )
            used_as_receiver |= {r} & set(connectors)
        for p in pipe.get("processors", []):
            assert p in cfg["processors"], f"{name}: processor {p} undefined"
        assert pipe.get("processors", ["memory_limiter"])[0] == "memory_limiter", (
            f"{name}: memory_limiter first"
        )
        for e in pipe["exporters"]:
            assert e in cfg.get("exporters", {}) or e in connectors, (
                f"{name}: exporter {e} undefined"
            )
            used_as_exporter |= {e} & set(connectors)
    assert used_as_exporter == used_as_receiver == set(connectors)
    for proto in cfg["receivers"].get("otlp", {}).get("protocols", {}).values():
        assert int(proto["endpoint"].rsplit(":", 1)[1]) in (OTLP_GRPC, OTLP_HTTP)


def test_scaled_topology_routes_by_trace_id_to_tail_sampling() -> None:
    gateway = _load(K8S / "collector" / "gateway.yaml")
    sampler = _load(K8S / "collector" / "sampler.yaml")
    lb = gateway["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    assert gateway["service"]["pipelines"]["traces"]["exporters"] == ["loadbalancing"]
    assert "batch" not in gateway["service"]["pipelines"]["traces"]["processors"]
    policies = {p["type"]: p for p in sampler["processors"]["tail_sampling"]["policies"]}
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    assert policies["latency"]["latency"]["threshold_ms"] > 0
    (cond,) = policies["ottl_condition"]["ottl_condition"]["span"]
    assert f'name == "{spans.SPAN_ACCEL_COLLECTIVE}"' in cond
    assert "tail_sampling" in sampler["service"]["pipelines"]["traces"]["processors"]
    # the gateway's DNS resolver names the samplers' headless Service, on the OTLP port
    docs = {
        (d["kind"], d["metadata"]["name"]): d for d in _yaml_docs(K8S / "collector-gateway.yaml")
    }
    headless = docs[("Service", "otel-sampler-headless")]
    assert headless["spec"]["clusterIP"] == "None"
    host = lb["resolver"]["dns"]["hostname"]
    assert host == f"otel-sampler-headless.{headless['metadata']['namespace']}.svc.cluster.local"
    assert lb["resolver"]["dns"]["port"] == headless["spec"]["ports"][0]["port"] == OTLP_GRPC
    sts = docs[("StatefulSet", "otel-sampler")]
    assert sts["spec"]["serviceName"] == "otel-sampler-headless"


# --------------------------------------------------------------------------- kubernetes
def _k8s_docs() -> dict[tuple[str, str], Any]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _yaml_docs(path):
            if "kind" in doc and "metadata" in doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_kustomization_references_existing_files() -> None:
    kust = _load(K8S / "kustomization.yaml")
    for res in kust["resources"]:
        assert (K8S / res).is_file(), res
    for gen in kust["configMapGenerator"]:
        for f in gen["files"]:
            assert (K8S / f).is_file(), f
    generated = {g["name"]: Path(g["files"][0]).name for g in kust["configMapGenerator"]}
    docs = _k8s_docs()
    for kind, name in (("Deployment", "otel-gateway"), ("StatefulSet", "otel-sampler")):
        pod = docs[(kind, name)]["spec"]["template"]["spec"]
        cm = pod["volumes"][0]["configMap"]["name"]
        (container,) = pod["containers"]
        mount = container["volumeMounts"][0]["mountPath"]
        assert container["args"] == [f"--config={mount}/{generated[cm]}"]


def test_exporter_daemonset_is_locked_down_and_scraped() -> None:
    docs = _k8s_docs()
    ds = docs[("DaemonSet", "otel-ext-exporter")]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["limits"] and container["resources"]["requests"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert {"/sys/class/infiniband", "/usr/local/nvidia", "/proc"} <= set(host_paths.values())
    assert all(m["readOnly"] for m in container["volumeMounts"])
    # the CLI accepts the arguments; paths it reads are the mounted ones
    parser = argparse.ArgumentParser()
    exporter_cli.add_arguments(parser)
    assert container["args"][0] == "exporter"
    args = parser.parse_args(container["args"][1:])
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert args.proc_root in mounts and args.sysfs_root in mounts
    assert set(args.sources) == {"nvml", "host", "infiniband"}
    port = parse_listen(args.listen)[1]
    assert port == NODE_AGENT_PORT
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert {e["name"] for e in container["env"]} >= {config.HOST_ID.name}
    labels = ds["spec"]["template"]["metadata"]["labels"]
    svc = docs[("Service", "otel-ext-exporter")]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = docs[("ServiceMonitor", "otel-ext-exporter")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]


def test_workload_example_points_at_the_gateway() -> None:
    docs = _k8s_docs()
    pod = docs[("Deployment", "inference-example")]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    svc = docs[("Service", "otel-gateway")]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
        f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local:{OTLP_GRPC}"
    )
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert attributes.ACCEL_HOST_ID + "=" in env["OTEL_RESOURCE_ATTRIBUTES"]


@pytest.mark.integration
def test_kubectl_kustomize_renders() -> None:
    kubectl = require_binary("kubectl")
    out = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout) if d)
    assert kinds == sorted(
        [
            "Namespace",
            "ConfigMap",
            "ConfigMap",
            "Service",
            "Service",
            "Service",
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ServiceMonitor",
        ]
    )


# --------------------------------------------------------------------------- promtool
@pytest.mark.integration
def test_promtool_check_rules() -> None:
    promtool = require_binary("promtool")
    out = subprocess.run(
        [promtool, "check", "rules", *map(str, RULES)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_promtool_rule_unit_tests() -> None:
    promtool = require_binary("promtool")
    tests = DEPLOY / "prometheus" / "tests" / "alerts_test.yaml"
    out = subprocess.run(
        [promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # every alert of the rules files has a firing and a silent case there
    tested = [
        t["alertname"] for case in _load(tests)["tests"] for t in case.get("alert_rule_test", [])
    ]
    alerts = {
        r["alert"] for p in RULES for g in _load(p)["groups"] for r in g["rules"] if "alert" in r
    }
    for alert in alerts:
        cases = [
            t
            for case in _load(tests)["tests"]
            for t in case.get("alert_rule_test", [])
            if t["alertname"] == alert
        ]
        assert any(t["exp_alerts"] for t in cases), f"{alert}: no firing case"
        assert alert in tested


def test_every_alert_has_a_runbook() -> None:
    for path in RULES:
        for group in _load(path)["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    ann = rule["annotations"]
                    assert ann["runbook"] and "\n" not in ann["runbook"], rule["alert"]
                    anchor = ann["runbook_url"].rsplit("#", 1)[1]
                    assert f'id="{anchor}"' in (REPO_ROOT / "docs" / "deploy.md").read_text(), (
                        anchor
                    )


@pytest.mark.integration
def test_promtool_check_config(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    doc = _load(PROMETHEUS_YML)
    (pattern,) = doc["rule_files"]
    assert pattern == "/etc/prometheus/rules/*.yaml"  # where compose mounts deploy/prometheus/rules
    doc["rule_files"] = [str(DEPLOY / "prometheus" / "rules" / "*.yaml")]
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [promtool, "check", "config", str(config_file)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(RULES)} rule files found" in out.stdout + out.stderr
