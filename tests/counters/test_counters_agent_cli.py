"""``otel-ext exporter``: real sources by default, what it serves printed, ``sim`` labelled."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

from conftest import REPO_ROOT

from otel_ext.counters import InfinibandSource, NetDevSource, NvmlSource
from otel_ext.errors import SourceUnavailableError


def _opens(source: object) -> bool:
    try:
        source.open()  # type: ignore[attr-defined]
    except SourceUnavailableError:
        return False
    source.close()  # type: ignore[attr-defined]
    return True


def _serve(*args: str) -> tuple[str, str]:
    """Start the agent, read its banner and one scrape, stop it; (banner, exposition)."""
    agent = subprocess.Popen(
        [sys.executable, "-m", "otel_ext.cli", "exporter", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert agent.stdout is not None
        banner = agent.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", banner)
        assert found, banner
        with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/metrics", timeout=10) as r:
            body = r.read().decode()
    finally:
        agent.terminate()
        rest = agent.communicate(timeout=20)[0]
    assert agent.returncode == 0, banner + rest
    return banner, body


def test_default_sources_are_what_the_machine_has(tmp_path) -> None:
    expected = ["host"]
    if _opens(NetDevSource()):
        expected.insert(0, "net")
    if _opens(InfinibandSource()):
        expected.insert(0, "infiniband")
    if _opens(NvmlSource()):
        expected.insert(0, "nvml")
    banner, body = _serve("--active-span-dir", str(tmp_path))
    assert f"(sources: {', '.join(expected)} (detected)" in banner
    if "nvml" not in expected:
        assert "; nvml: " in banner  # says why it is not served
    (info,) = [line for line in body.splitlines() if line.startswith("target_info")]
    assert f'accel_source="{",".join(sorted(expected))}"' in info
    assert "accel_device_kind" not in info
    assert "sim" not in banner.split("(sources:")[1].split(")")[0]


def test_sim_only_when_asked_and_labelled(tmp_path) -> None:
    banner, body = _serve("--source", "sim", "--host-id", "H", "--active-span-dir", str(tmp_path))
    assert "(sources: sim (asked, SIMULATED counters)" in banner
    (info,) = [line for line in body.splitlines() if line.startswith("target_info")]
    assert info == (
        'target_info{accel_device_kind="sim",accel_host_id="H",accel_source="sim",'
        'service_name="otel-ext-exporter"} 1.0'
    )
    assert 'accel_device_id="H/chip0"' in body


def test_daemonset_and_workload_share_the_active_span_folder() -> None:

    import yaml

    root = REPO_ROOT / "deploy" / "kubernetes"
    docs = list(yaml.safe_load_all((root / "exporter-daemonset.yaml").read_text()))
    agent_pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    workload_pod = yaml.safe_load((root / "workload-example.yaml").read_text())["spec"]["template"][
        "spec"
    ]

    def folder(pod: dict, container: dict) -> tuple[str, str, bool]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        path = env["OTEL_EXT_ACTIVE_SPAN_DIR"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == path]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        return path, volume["hostPath"]["path"], bool(mount.get("readOnly"))

    (agent,) = agent_pod["containers"]
    (workload,) = workload_pod["containers"]
    agent_dir, agent_host, agent_ro = folder(agent_pod, agent)
    work_dir, work_host, work_ro = folder(workload_pod, workload)
    assert agent_dir == work_dir and agent_host == work_host and agent_ro and not work_ro
    # a group both are in may read (agent) and write (workload) the records, nobody else
    (init,) = agent_pod["initContainers"]
    assert "chmod 2770" in init["command"][-1] and "chown 0:2000" in init["command"][-1]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert 2000 in agent_pod["securityContext"]["supplementalGroups"]
    assert 2000 in workload_pod["securityContext"]["supplementalGroups"]
    env = {e["name"]: e.get("value") for e in workload["env"]}
    assert env["OTEL_EXT_HOST_ID"] == "$(NODE_NAME)"  # device ids name the node, as the agent's
