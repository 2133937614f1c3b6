"""The deploy stack's queries against a real Prometheus scraping live otel-ext processes.

One module-wide stack: ``otel-ext exporter --source sim`` (the node agent's built-in
simulated chips: node0, chip3 throttled) and ``deploy/sim/sim_endpoint.py`` (the simulated
cluster, 2 hosts x 2 chips, with ``--fault throttle@host1/chip1``: its node counters
through the counter bridge and its TTFT/TPOT/clock metrics with exemplars), both scraped
every second by a real ``prometheus --enable-feature=exemplar-storage`` started on a free
port with the deploy configuration (targets and rule paths rewritten, rule groups evaluated
every second and ``for:`` set to 0 so alerts can fire within the test; the unshortened
``for:`` durations are covered by ``promtool test rules`` in test_deploy_config.py).

Checks: every dashboard panel query returns data; every template variable has values;
every recording rule produces series; throttling alerts fire exactly for the two throttled
chips and every other alert stays silent; TTFT exemplars carry trace ids of request spans
the simulated cluster wrote.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, free_port, require_binary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180), pytest.mark.slow]

DEPLOY = REPO_ROOT / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yaml"))
#: Grafana macros and template variables, as Grafana would expand them for "All"
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$host": ".*",
    "$model": ".*",
    "$group": ".*",
    "$pod": ".*",
}
#: Panels on registry metrics that no otel-ext producer emits yet (strict xfail: the test
#: fails as soon as one gets data, so the list cannot go stale).
NO_PRODUCER_YET: dict[str, str] = {}
#: every chip the stack throttles: the exporter's built-in chip3 and the injected fault
THROTTLED = {"node0/chip3", "host1/chip1"}
DEADLINE_S = 75.0


def _expand(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unexpanded Grafana variable in {expr!r}"
    return expr


def panel_targets() -> list[Any]:
    """(dashboard, panel title, expr) for every panel target, as pytest params."""
    out: list[Any] = []
    last: list[Any] = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                marks = []
                if panel["title"] in NO_PRODUCER_YET:
                    marks.append(
                        pytest.mark.xfail(reason=NO_PRODUCER_YET[panel["title"]], strict=True)
                    )
                # panels expected empty run last, when every producer has had time to export
                (last if marks else out).append(
                    pytest.param(
                        path.stem,
                        panel["title"],
                        target["expr"],
                        marks=marks,
                        id=f"{path.stem}:{panel['title']}:{target['refId']}",
                    )
                )
    return out + last


def variables() -> list[Any]:
    out = []
    for path in DASHBOARDS:
        for var in json.loads(path.read_text())["templating"]["list"]:
            m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", var["definition"])
            assert m, var["definition"]
            out.append(pytest.param(m.group(1), m.group(2), id=f"{path.stem}:{var['name']}"))
    return out


def recording_rules() -> list[str]:
    names = []
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            names += [r["record"] for r in group["rules"] if "record" in r]
    return sorted(set(names))


def alert_names() -> list[str]:
    names = []
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            names += [r["alert"] for r in group["rules"] if "alert" in r]
    return names


@dataclass
class Stack:
    url: str
    sim_out: Path
    started: float

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def poll(
        self, what: str, fn: Any, *, deadline_s: float = DEADLINE_S, from_now: bool = False
    ) -> Any:
        """Call ``fn`` until it returns something truthy or the deadline passes.

        The deadline counts from the stack's start, or from now with ``from_now``.
        """
        end = (time.monotonic() if from_now else self.started) + deadline_s
        while True:
            got = fn()
            if got:
                return got
            if time.monotonic() > end:
                pytest.fail(f"no data for {what} within {deadline_s:.0f} s of the stack starting")
            time.sleep(0.25)  # polling interval of a deadline loop, not a synchronisation


def _test_rules(tmp: Path) -> list[Path]:
    """Copies of the deploy rules evaluated every second, with ``for:`` set to 0."""
    out = []
    for path in RULES:
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            group["interval"] = "1s"
            for rule in group["rules"]:
                if "alert" in rule:
                    rule["for"] = "0s"
        copy = tmp / path.name
        copy.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(copy)
    return out


def _prometheus_config(tmp: Path, targets: dict[str, str]) -> Path:
    """The deploy prometheus.yml with the test's targets, rules and a 1 s interval."""
    doc = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    doc["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    doc["rule_files"] = [str(p) for p in _test_rules(tmp)]
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    doc["scrape_configs"] = []
    for name, target in targets.items():
        job = jobs[name]
        job["static_configs"] = [{"targets": [target]}]
        doc["scrape_configs"].append(job)
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_binary("prometheus")
    promtool = require_binary("promtool")
    tmp = tmp_path_factory.mktemp("deploy-stack")
    p_exporter, p_sim, p_prom = free_port(), free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # a collective-state record as an instrumented workload publishes it (this process is its
    # live writer): one member waiting 30 s in an all-reduce, so the agent's pending and
    # last-seq series exist for the "Pending collectives" panels (the real-job test of the
    # same series and of AccelCollectiveHang is tests/instrumentation/test_collective_hang.py)
    from otel_ext.instrumentation.collective_state_record import CollectiveStateRecord, GroupState

    records = tmp / "records"
    records.mkdir(mode=0o750)
    waiting = CollectiveStateRecord(records, host="node0", rank=0)
    waiting.publish(
        [GroupState("default_pg", 2, 0, "node0/chip0", "all_reduce", 5, 4096,
                    time.time_ns() - 30 * 10**9, 4)]
    )  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    logs = {name: open(tmp / f"{name}.log", "wb") for name in ("exporter", "sim", "prometheus")}  # noqa: SIM115
    try:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "otel_ext.cli",
                    "exporter",
                    "--source",
                    "sim",
                    "--sim-chips",
                    "4",
                    "--sim-constant",
                    "--host-id",
                    "node0",
                    "--interval",
                    "0.5",
                    "--listen",
                    f"127.0.0.1:{p_exporter}",
                    "--active-span-dir",
                    str(records),
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=logs["exporter"],
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(DEPLOY / "sim" / "sim_endpoint.py"),
                    "--out",
                    str(tmp / "sim"),
                    "--listen",
                    f"127.0.0.1:{p_sim}",
                    "--hosts",
                    "2",
                    "--chips",
                    "2",
                    "--requests",
                    "150",
                    "--rate",
                    "10",
                    "--seed",
                    "7",
                    "--fault",
                    "throttle@host1/chip1",
                    "--interval",
                    "0.5",
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=logs["sim"],
                stderr=subprocess.STDOUT,
            )
        )
        config = _prometheus_config(
            tmp,
            {"otel-ext-exporter": f"127.0.0.1:{p_exporter}", "otel-ext-sim": f"127.0.0.1:{p_sim}"},
        )
        check = subprocess.run(
            [promtool, "check", "config", str(config)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        procs.append(
            subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{p_prom}",
                    "--enable-feature=exemplar-storage",
                    "--storage.tsdb.retention.time=1h",
                ],
                cwd=tmp,
                stdout=logs["prometheus"],
                stderr=subprocess.STDOUT,
            )
        )
        st = Stack(f"http://127.0.0.1:{p_prom}", tmp / "sim", time.monotonic())

        def targets_up() -> bool:
            for proc in procs:
                assert proc.poll() is None, f"a stack process exited; logs in {tmp}"
            try:
                active = st.api("targets")["activeTargets"]
            except OSError:
                return False
            return len(active) == 2 and all(t["health"] == "up" for t in active)

        st.poll("both scrape targets up", targets_up, deadline_s=30)
        yield st
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for log in logs.values():
            log.close()
        waiting.close()


@pytest.mark.parametrize(("board", "title", "expr"), panel_targets())
def test_panel_query_returns_data(stack: Stack, board: str, title: str, expr: str) -> None:
    expr = _expand(expr)
    if title in NO_PRODUCER_YET:  # expected empty: wait for every other panel, then a little
        result = stack.poll(
            f"{board} / {title}: {expr}", lambda: stack.query(expr), deadline_s=5, from_now=True
        )
    else:
        result = stack.poll(f"{board} / {title}: {expr}", lambda: stack.query(expr))
    assert any(r["value"][1] not in ("NaN", "+Inf", "-Inf") for r in result), result


@pytest.mark.parametrize(("metric", "label"), variables())
def test_template_variable_has_values(stack: Stack, metric: str, label: str) -> None:
    values = stack.poll(
        f"label_values({metric}, {label})",
        lambda: stack.api(f"label/{label}/values", **{"match[]": metric}),
    )
    assert all(isinstance(v, str) and v for v in values)


@pytest.mark.parametrize("record", recording_rules())
def test_recording_rule_produces_series(stack: Stack, record: str) -> None:
    result = stack.poll(record, lambda: stack.query(record))
    assert all(r["metric"]["__name__"] == record for r in result)


def test_throttle_alert_fires_only_for_throttled_chips(stack: Stack) -> None:
    def firing() -> set[str]:
        got = {
            r["metric"]["accel_device_id"]
            for r in stack.query('ALERTS{alertname="AccelChipThrottled",alertstate="firing"}')
        }
        return got if got >= THROTTLED else set()

    assert stack.poll("AccelChipThrottled for " + ", ".join(sorted(THROTTLED)), firing) == THROTTLED
    # every other chip of both sources runs at full clock and does not alert
    healthy = {
        r["metric"]["accel_device_id"] for r in stack.query("accel_device_clock_ratio >= 0.9")
    }
    assert healthy == {
        "node0/chip0",
        "node0/chip1",
        "node0/chip2",
        "host0/chip0",
        "host0/chip1",
        "host1/chip0",
    }


def test_other_alerts_stay_silent(stack: Stack) -> None:
    # wait until the throttle fault has fired, so the rules have run over the whole fault
    stack.poll("AccelChipThrottled", lambda: stack.query('ALERTS{alertname="AccelChipThrottled"}'))
    others = [a for a in alert_names() if a != "AccelChipThrottled"]
    assert len(others) >= 8

    def last_evaluation() -> str:
        groups = stack.api("rules", type="alert")["groups"]
        return max(g["lastEvaluation"] for g in groups)

    seen = last_evaluation()
    for _ in range(3):  # across three fresh evaluations of the alert group
        seen = stack.poll(
            "a new alert evaluation",
            lambda before=seen: (t := last_evaluation()) != before and t,
            from_now=True,
            deadline_s=15,
        )
        got = stack.query('ALERTS{alertname!="AccelChipThrottled"}')
        assert got == [], [r["metric"] for r in got]
        # and the inputs the silent alerts watch are present and healthy
        assert stack.query("accel_counters_source_up_ratio == 1")
        assert stack.query("accel_clock_bound_nanoseconds < 100000")


def test_ttft_exemplars_link_to_request_traces(stack: Stack) -> None:
    from otel_ext.exporters import read_spans

    metric = "gen_ai_server_time_to_first_token_seconds_bucket"

    def exemplars() -> list[dict[str, Any]]:
        now = time.time()
        data = stack.api("query_exemplars", query=metric, start=str(now - 600), end=str(now + 60))
        return [e for series in data for e in series["exemplars"]]

    found = stack.poll("TTFT exemplars", exemplars)
    ids = {(e["labels"]["trace_id"], e["labels"]["span_id"]) for e in found}
    assert all(
        re.fullmatch(r"[0-9a-f]{32}", t) and re.fullmatch(r"[0-9a-f]{16}", s) for t, s in ids
    )

    def spans() -> dict[tuple[str, str], Any]:
        try:
            got = {
                (s.trace_id, s.span_id): s
                for s in read_spans(stack.sim_out / "traces.jsonl", include_partial=True)
            }
        except Exception:
            return {}
        return got if ids <= set(got) else {}

    by_id = stack.poll("the exemplars' spans in the simulated cluster's traces", spans)
    for key in ids:
        span = by_id[key]
        assert span.parent_span_id in (None, ""), (
            f"exemplar {key} is not a request's root span: {span.name}"
        )
