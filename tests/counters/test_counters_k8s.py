"""The node agent in a Kubernetes cluster: every series of a device labelled with its pod.

The three places a device's pod comes from, each against a real counterpart:

(a) the workload's resource in its active-span record: real workload processes whose
    ``OTEL_RESOURCE_ATTRIBUTES`` carry the downward API's ``k8s.*`` values, a real agent
    (``otel-ext exporter``), and a real Prometheus scraping it;
(b) the kubelet's PodResources API: a real gRPC server on a unix socket answering ``List``
    with messages built by the protobuf library from the published v1 field numbers (the
    agent decodes the wire format itself, so the two sides share no code);
(c) the processes' cgroups: recorded ``/proc/PID/cgroup`` files (``tests/fixtures/k8s_proc``)
    and NVML's process lists (the fake ``pynvml`` of the source tests).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES as TEST_FIXTURES
from conftest import REPO_ROOT, free_port, require, require_binary, start_prometheus
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.counters import (
    AllocatedDevice,
    BuiltinSimModel,
    CounterBridge,
    NvmlSource,
    PodAttributor,
    PodRef,
    PodResourcesClient,
    PodResourcesError,
    SharedActiveSpanReader,
    SimulatedSource,
    decode_list_response,
    pod_of_cgroup,
)
from otel_ext.counters._podresources import LIST_METHOD
from otel_ext.instrumentation.active_span_record import (
    RECORD_BYTES,
    ActiveSpanRecord,
    decode_resource,
    encode_resource,
)

FIXTURES = TEST_FIXTURES / "k8s_proc"
UID_A = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"  # pid 4101
UID_B = "7d2c6a1e-93b4-4f0e-8a51-c2d3e4f5a6b7"  # pid 4102
UID_C = "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"  # pid 4105


# ---- the PodResources v1 messages, built by protobuf from the published field numbers ---------
def _message_classes() -> dict[str, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="otel_ext_test_podresources.proto", package="v1")

    def msg(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            field = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name

    opt, rep = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    msg("ListPodResourcesRequest")
    msg("TopologyInfo", ("nodes", 1, f.TYPE_MESSAGE, rep, ".v1.NUMANode"))
    msg("NUMANode", ("ID", 1, f.TYPE_INT64, opt, ""))
    msg(
        "ContainerDevices",
        ("resource_name", 1, f.TYPE_STRING, opt, ""),
        ("device_ids", 2, f.TYPE_STRING, rep, ""),
        ("topology", 3, f.TYPE_MESSAGE, opt, ".v1.TopologyInfo"),
    )
    msg(
        "ContainerResources",
        ("name", 1, f.TYPE_STRING, opt, ""),
        ("devices", 2, f.TYPE_MESSAGE, rep, ".v1.ContainerDevices"),
        ("cpu_ids", 3, f.TYPE_INT64, rep, ""),
    )
    msg(
        "PodResources",
        ("name", 1, f.TYPE_STRING, opt, ""),
        ("namespace", 2, f.TYPE_STRING, opt, ""),
        ("containers", 3, f.TYPE_MESSAGE, rep, ".v1.ContainerResources"),
    )
    msg("ListPodResourcesResponse", ("pod_resources", 1, f.TYPE_MESSAGE, rep, ".v1.PodResources"))
    fdp.message_type[4].field[2].options.packed = True  # cpu_ids, as proto3 packs them
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{m.name}"))
        for m in fdp.message_type
    }


PB = _message_classes()
Pods = list[tuple[str, str, list[tuple[str, list[tuple[str, list[str]]]]]]]


def encode_pods(pods: Pods) -> bytes:
    """A ``ListPodResourcesResponse``: ``[(namespace, pod, [(container, [(resource, ids)])])]``."""
    resp = PB["ListPodResourcesResponse"]()
    for ns, name, containers in pods:
        pod = resp.pod_resources.add(name=name, namespace=ns)
        for cname, devices in containers:
            cont = pod.containers.add(name=cname, cpu_ids=[2, 3])
            for resource, ids in devices:
                dev = cont.devices.add(resource_name=resource, device_ids=ids)
                dev.topology.nodes.add(ID=0)
    return resp.SerializeToString()


def flatten(pods: Pods) -> list[AllocatedDevice]:
    return [
        AllocatedDevice(ns, name, cname, resource, d)
        for ns, name, containers in pods
        for cname, devices in containers
        for resource, ids in devices
        for d in ids
    ]


_text = st.text(min_size=0, max_size=12)
_pods = st.lists(
    st.tuples(
        _text,
        _text,
        st.lists(
            st.tuples(_text, st.lists(st.tuples(_text, st.lists(_text, max_size=3)), max_size=3)),
            max_size=3,
        ),
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(_pods)
def test_list_response_decodes_what_protobuf_encodes(pods: Pods) -> None:
    assert decode_list_response(encode_pods(pods)) == flatten(pods)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_hostile_list_response_is_a_named_error_or_a_list(data: bytes) -> None:
    try:
        got = decode_list_response(data)
    except PodResourcesError as exc:
        assert "ListPodResourcesResponse" in str(exc)
    else:
        assert all(isinstance(d, AllocatedDevice) for d in got)


def test_truncated_list_response_names_the_field() -> None:
    body = encode_pods([("ns", "p", [("c", [("nvidia.com/gpu", ["GPU-1"])])])])
    with pytest.raises(PodResourcesError, match=r"pod_resources\[0\]|runs past"):
        decode_list_response(body[:-3])


# ---- (b) a real gRPC server on a unix socket ------------------------------------------------
class PodResourcesServer:
    """A gRPC server speaking ``v1.PodResourcesLister/List`` on a unix socket."""

    def __init__(self, path: Path, pods: Pods):
        import grpc

        self.path = path
        self.pods = pods
        self.calls = 0

        def handle(request: bytes, context: Any) -> bytes:
            self.calls += 1
            PB["ListPodResourcesRequest"].FromString(request)  # an empty request
            return encode_pods(self.pods)

        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    handle,
                    request_deserializer=lambda b: b,
                    response_serializer=lambda b: b,
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        assert self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


@pytest.fixture
def grpc_module() -> Any:
    try:
        import grpc
    except ImportError:  # pragma: no cover - the test extra installs it
        require(False, "grpcio")
    return grpc


def test_list_method_path_is_the_published_one() -> None:
    assert LIST_METHOD == "/v1.PodResourcesLister/List"


def test_pod_resources_labels_follow_the_kubelet(tmp_path: Path, grpc_module: Any) -> None:
    sock = tmp_path / "kubelet.sock"
    pods: Pods = [
        ("inference", "serve-0", [("server", [("nvidia.com/gpu", ["sim-h-0"])])]),
        # a time-sliced GPU shared by two pods: both get a copy of chip1's series
        ("batch", "train-7", [("trainer", [("nvidia.com/gpu", ["sim-h-1::0"])])]),
        ("batch", "train-8", [("trainer", [("nvidia.com/gpu", ["sim-h-1::1"])])]),
        ("other", "cpu-only", [("main", [])]),
    ]
    server = PodResourcesServer(sock, pods)
    t = [10**9]
    bridge = CounterBridge(
        [SimulatedSource(BuiltinSimModel(chips=3, host="h"), clock=lambda: t[0])],
        clock=lambda: t[0],
        labeller=PodAttributor(pod_resources=PodResourcesClient(str(sock)), hold_s=1.0),
        derive=False,
    )
    bridge.open()

    def pods_of(metric: str = "hw.power") -> dict[str, list[tuple[str, str, str]]]:
        out: dict[str, list[tuple[str, str, str]]] = {}
        for s in bridge.families()[metric]:
            a = s.attributes
            out.setdefault(str(a["accel.device.id"]), []).append(
                (str(a.get("namespace", "")), str(a.get("pod", "")), str(a.get("container", "")))
            )
        return {k: sorted(v) for k, v in out.items()}

    try:
        bridge.sample_once()
        assert pods_of() == {
            "h/chip0": [("inference", "serve-0", "server")],
            "h/chip1": [("batch", "train-7", "trainer"), ("batch", "train-8", "trainer")],
            "h/chip2": [("", "", "")],  # a free device carries no pod label
        }
        # every series of chip0 carries its pod (links and histograms too)
        chip0 = [
            s
            for fam in bridge.families().values()
            for s in fam
            if s.attributes.get("accel.device.id") == "h/chip0"
        ]
        assert chip0 and all(s.attributes.get("pod") == "serve-0" for s in chip0)
        # the pod leaves: its labels go at the next round
        server.pods = pods[1:]
        t[0] += 10**9
        bridge.sample_once()
        assert pods_of()["h/chip0"] == [("", "", "")]
        # the kubelet stops answering: the last answer is held for hold_s, then dropped
        server.stop()
        t[0] += 5 * 10**8
        bridge.sample_once()
        assert len(pods_of()["h/chip1"]) == 2
        t[0] += 10**9
        bridge.sample_once()
        assert pods_of()["h/chip1"] == [("", "", "")]
    finally:
        server.stop()
        bridge.stop()


def test_pod_resources_client_errors_name_the_socket(tmp_path: Path, grpc_module: Any) -> None:
    sock = tmp_path / "kubelet.sock"
    client = PodResourcesClient(str(sock), timeout_s=0.5)
    assert not client.present()
    with pytest.raises(PodResourcesError, match=re.escape(str(sock))):
        client.list()
    # a server that answers with something that is not a ListPodResourcesResponse
    server = PodResourcesServer(sock, [])
    try:
        server.pods = None  # type: ignore[assignment]
        with pytest.raises(PodResourcesError, match=re.escape(str(sock))):
            client.list()
    finally:
        server.stop()
        client.close()


# ---- (c) recorded /proc cgroup trees ----------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.uuids(),
    st.binary(min_size=32, max_size=32),
    st.sampled_from(["", "burstable", "besteffort"]),
    st.sampled_from(["cgroupfs", "systemd"]),
    st.sampled_from(["cri-containerd", "docker", "crio"]),
    st.booleans(),
)
def test_pod_of_cgroup_reads_every_kubelet_layout(
    uid: Any, cid: bytes, qos: str, driver: str, runtime: str, v2: bool
) -> None:
    u, c = str(uid), cid.hex()
    if driver == "cgroupfs":
        path = "/kubepods" + (f"/{qos}" if qos else "") + f"/pod{u}/{c}"
    else:
        slice_ = "kubepods" + (f"-{qos}" if qos else "")
        path = (
            "/kubepods.slice/"
            + (f"{slice_}.slice/" if qos else "")
            + f"{slice_}-pod{u.replace('-', '_')}.slice/{runtime}-{c}.scope"
        )
    text = f"0::{path}\n" if v2 else f"12:memory:{path}\n4:devices:{path}\n0::/\n"
    assert pod_of_cgroup(text) == (u, c)


def test_pod_of_cgroup_recorded_tree() -> None:
    got = {
        p.name: pod_of_cgroup((p / "cgroup").read_text()) for p in FIXTURES.iterdir() if p.is_dir()
    }
    assert got == {
        "4101": (UID_A, "3c1d5e7f9a0b2c4d6e8f0a1b3c5d7e9f1a2b4c6d8e0f2a3b5c7d9e1f3a4b6c8d"),
        "4102": (UID_B, "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"),
        "4103": None,
        "4105": (UID_C, "d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5"),
    }


def test_processes_pods_named_by_the_records(tmp_path: Path) -> None:
    """(c) and (a) together: a process's pod UID named by a record of another device."""
    folder = tmp_path / "spans"
    folder.mkdir()
    # pod A's workload publishes on h/chip9 (say, its other GPU) with its full identity
    rec = ActiveSpanRecord(
        "h/chip9",
        folder,
        resource={
            "k8s.pod.name": "serve-0",
            "k8s.namespace.name": "inference",
            "k8s.container.name": "server",
            "k8s.pod.uid": UID_A,
            "service.name": "llm",
        },
    )
    procs = {"h/chip0": [4101, 4103, 4104], "h/chip1": [4102], "h/chip2": [4103], "x/gpu": [4105]}
    reader = SharedActiveSpanReader(folder)
    attributor = PodAttributor(records=reader, processes=lambda: procs, proc_root=FIXTURES)
    from otel_ext.counters import Sample

    samples = [Sample("hw.power", {"accel.device.id": f"h/chip{i}"}, 1.0, 0) for i in range(4)]
    samples.append(Sample("hw.power", {"accel.device.id": "h/chip9"}, 1.0, 0))
    try:
        attributor.refresh(samples, 0)
        assert attributor.pods == {
            "h/chip0": [PodRef("inference", "serve-0", "server", UID_A, "cgroup")],
            "h/chip1": [PodRef(uid=UID_B, source="cgroup")],  # no record names pod B
            "h/chip9": [PodRef("inference", "serve-0", "server", UID_A, "record")],
        }
        assert attributor.label_sets({"accel.device.id": "h/chip1"}) == ({"pod_uid": UID_B},)
        assert attributor.label_sets({"accel.device.id": "h/chip2"}) == ()
        assert attributor.label_sets({"accel.device.id": "h/chip3"}) == ()
        # the workload leaves: the record's identity goes at once
        rec.close()
        attributor.refresh(samples, 1)
        assert attributor.pods["h/chip0"] == [PodRef(uid=UID_A, source="cgroup")]
        assert "h/chip9" not in attributor.pods
    finally:
        rec.close()
        reader.close()


def test_a_killed_workloads_record_names_no_pod(tmp_path: Path) -> None:
    """A record left by a killed writer (nobody holds its lock) is no workload."""
    folder = tmp_path / "spans"
    folder.mkdir()
    code = (
        "import os, sys\n"
        "from otel_ext.instrumentation.active_span_record import ActiveSpanRecord\n"
        "r = ActiveSpanRecord('h/chip0', sys.argv[1], resource={'k8s.pod.name': 'p',"
        " 'k8s.namespace.name': 'n'})\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "os._exit(0)  # no clean-up: the record stays behind\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    reader = SharedActiveSpanReader(folder)
    try:
        assert reader.resources(["h/chip0"]) == {
            "h/chip0": [{"k8s.pod.name": "p", "k8s.namespace.name": "n"}]
        }
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(10) == 0
        assert len(list(folder.iterdir())) == 1  # still there
        assert reader.resources(["h/chip0"]) == {}
    finally:
        reader.close()


def test_nvml_device_pids() -> None:
    from test_counters_sources import fake_nvml

    nv = fake_nvml(gpus=2)
    import types

    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=4101 + h, usedGpuMemory=1)
    ]
    nv.nvmlDeviceGetGraphicsRunningProcesses = lambda h: [types.SimpleNamespace(pid=4101)]
    src = NvmlSource(nvml=nv, host="h")
    src.open()
    assert src.device_pids() == {"h/gpu0": [4101], "h/gpu1": [4101, 4102]}
    src.close()


# ---- the record's resource trailer ---------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["k8s.pod.name", "k8s.namespace.name", "k8s.container.name", "k8s.pod.uid", "x.y"]
        ),
        st.text(min_size=1, max_size=300),
    )
)
def test_resource_trailer_round_trip(attrs: dict[str, str]) -> None:
    want = {k: v[:253] for k, v in attrs.items() if k != "x.y"}
    assert decode_resource(encode_resource(attrs)) == want


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_hostile_resource_trailer_is_empty(data: bytes) -> None:
    got = decode_resource(b"OTXRES01" + data)
    assert isinstance(got, dict) and all(isinstance(v, str) for v in got.values())


def test_record_with_resource_is_still_a_record(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("h/chip0", tmp_path, resource={"k8s.pod.name": "p"})
    try:
        assert rec.path.stat().st_size > RECORD_BYTES
        reader = SharedActiveSpanReader(tmp_path)
        rec.started(0xA, 0x1, time.time_ns())
        assert reader.covering("h/chip0", 0, time.time_ns()) is not None
        assert reader.resources(["h/chip0"]) == {"h/chip0": [{"k8s.pod.name": "p"}]}
        reader.close()
    finally:
        rec.close()


def test_k8s_label_style() -> None:
    a = PodAttributor(processes=lambda: {"h/gpu0": [4101]}, proc_root=FIXTURES, style="k8s")
    from otel_ext.counters import Sample

    a.refresh([Sample("hw.power", {"accel.device.id": "h/gpu0"}, 1.0, 0)], 0)
    assert a.label_sets({"accel.device.id": "h/gpu0"}) == ({"k8s.pod.uid": UID_A},)
    from otel_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="pod label style 'kube'"):
        PodAttributor(style="kube")


# ---- (a) + (b) end to end: real agent, real workloads, real Prometheus ---------------------------
HOST = "H"
INTERVAL_S = 0.5
WORKLOAD = """
import sys, time
from pathlib import Path
import otel_ext
from otel_ext.instrumentation import device_attributes, layer

out, host, stop = sys.argv[1], sys.argv[2], Path(sys.argv[3])
telemetry = otel_ext.configure(traces_exporter="file", metrics_exporter="none",
                               file_dir=out, schedule_delay_s=0.1)
attrs = device_attributes("chip0", host_id=host)
with layer("blocks.0", index=0, attributes=attrs):
    print("ready", flush=True)
    while not stop.exists():
        time.sleep(0.02)
telemetry.shutdown()
"""
RESOURCE = (
    "k8s.pod.name=serve-0,k8s.namespace.name=inference,k8s.container.name=server,"
    "k8s.pod.uid=" + UID_A + ",service.name=llm-serve"
)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def _poll(what: str, fn: Any, deadline_s: float = 40.0) -> Any:
    deadline = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def _device_series(text: str, device: str) -> list[str]:
    """The exposition lines of ``device`` (by its ``accel_device_id`` label)."""
    return [
        line
        for line in text.splitlines()
        if not line.startswith("#") and f'accel_device_id="{device}"' in line
    ]


@pytest.mark.integration
def test_agent_labels_every_series_of_a_workloads_device(tmp_path: Path, grpc_module: Any) -> None:
    prom = require_binary("prometheus")
    sock = tmp_path / "kubelet.sock"
    kubelet = PodResourcesServer(
        sock, [("batch", "train-7", [("trainer", [("nvidia.com/gpu", [f"sim-{HOST}-1"])])])]
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_EXT_ACTIVE_SPAN_DIR": str(tmp_path / "spans"),
    }
    aport = free_port()
    promproc, api = start_prometheus(prom, tmp_path, {"agent": aport})
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "otel_ext.cli", "exporter", "--source", "sim",
            "--sim-chips", "3", "--host-id", HOST, "--listen", f"127.0.0.1:{aport}",
            "--interval", str(INTERVAL_S), "--pod-resources-socket", str(sock),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    stop_file = tmp_path / "stop"
    workload = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(tmp_path / "out"), HOST, str(stop_file)],
        env={**env, "OTEL_RESOURCE_ATTRIBUTES": RESOURCE},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = f"http://127.0.0.1:{aport}/metrics"
    try:
        assert workload.stdout is not None
        assert workload.stdout.readline().strip() == "ready"

        def labelled() -> str | None:
            text = _get(metrics).decode()
            return text if 'pod="serve-0"' in text and 'pod="train-7"' in text else None

        text = _poll("pod labels on the agent's /metrics", labelled)
        chip0, chip1, chip2 = (_device_series(text, f"{HOST}/chip{i}") for i in range(3))
        assert len(chip0) >= 20 and len(chip2) >= 20
        assert all(
            'pod="serve-0"' in line
            and 'namespace="inference"' in line
            and 'container="server"' in line
            for line in chip0
        ), [line for line in chip0 if 'pod="serve-0"' not in line]
        assert all('pod="train-7"' in line and 'namespace="batch"' in line for line in chip1)
        assert not any(re.search(r'\b(pod|namespace|container)="', line) for line in chip2)
        # the standard hardware names are there, for the labelled device too
        for family in (
            "hw_gpu_utilization_ratio",
            "hw_gpu_memory_usage_bytes",
            "hw_gpu_memory_limit_bytes",
            "hw_energy_joules_total",
            "hw_power_watts",
            "hw_temperature_celsius",
            "hw_status_ratio",
        ):
            assert any(line.startswith(family + "{") for line in chip0), family

        # Prometheus stored them: every series of chip0 it holds carries the pod
        def prom_series() -> list[dict[str, str]] | None:
            q = urllib.parse.quote(f'{{accel_device_id="{HOST}/chip0",job="agent"}}')
            got = json.loads(_get(f"{api}/series?match[]={q}&start={time.time() - 60}"))
            rows = got["data"]
            return rows if any(r.get("pod") for r in rows) else None

        rows = _poll("chip0's series in Prometheus", prom_series)
        names = {r["__name__"] for r in rows if r.get("pod") == "serve-0"}
        assert {"hw_power_watts", "hw_gpu_utilization_ratio", "hw_status_ratio"} <= names
        assert all(r.get("namespace") == "inference" for r in rows if r.get("pod"))

        # the workload leaves: its labels are gone within two of the agent's rounds
        def rounds() -> int:
            return int(json.loads(_get(f"http://127.0.0.1:{aport}/healthz"))["rounds"])

        stop_file.touch()
        assert workload.wait(30) == 0
        exited_at = rounds()
        _poll(
            "chip0 without pod labels",
            lambda: (
                not any(
                    "pod=" in line
                    for line in _device_series(_get(metrics).decode(), f"{HOST}/chip0")
                )
            ),
        )
        gone_by = rounds()
        assert gone_by - exited_at <= 2, (exited_at, gone_by)
        # while chip1's pod (the kubelet's) stays
        assert 'pod="train-7"' in _get(metrics).decode()
    finally:
        if workload.poll() is None:
            stop_file.touch()
            workload.kill()
        agent.terminate()
        out = agent.communicate(timeout=20)[0]
        promproc.terminate()
        promproc.wait(10)
        kubelet.stop()
    assert agent.returncode == 0, out
    assert kubelet.calls >= 2


def test_derived_metrics_of_a_shared_device_are_labelled_not_doubled(tmp_path: Path) -> None:
    """Two pods on one device: each gets a copy of the device's derived series, with the value
    the device has alone (the copies are not added up as if they were two devices)."""
    import itertools

    def identity(pod: str) -> dict[str, str]:
        return {"k8s.pod.name": pod, "k8s.namespace.name": "ns", "k8s.container.name": "c"}

    recs = [ActiveSpanRecord("h/chip1", tmp_path, resource=identity(p)) for p in ("a", "b")]
    reader = SharedActiveSpanReader(tmp_path)
    model = BuiltinSimModel(chips=2, host="h", varying=False)
    ticks = itertools.count(10**9, 700_000_000)
    bridge = CounterBridge(
        [SimulatedSource(model, clock=lambda: next(ticks))],
        labeller=PodAttributor(records=reader),
    )
    try:
        bridge.open()
        for _ in range(4):
            bridge.sample_once()
        fams = bridge.families()
        for metric in ("accel.device.utilization", "accel.device.mfu", "accel.device.power.ratio"):
            got = sorted(
                (str(s.attributes["accel.device.id"]), str(s.attributes.get("pod", "")), s.value)
                for s in fams[metric]
            )
            assert [g[:2] for g in got] == [("h/chip0", ""), ("h/chip1", "a"), ("h/chip1", "b")]
            for dev, _, value in got:
                assert value == pytest.approx(model.expected(dev)[metric], rel=1e-9), metric
        # a pod's base series are copies too: each with the device's value
        power = {str(s.attributes.get("pod", "")): s.value for s in fams["hw.power"]}
        assert set(power) == {"", "a", "b"} and power["a"] == power["b"]
    finally:
        for r in recs:
            r.close()
        reader.close()
        bridge.stop()


# ---- deploy/ -----------------------------------------------------------------------------------
def test_daemonset_mounts_the_pod_resources_socket_read_only() -> None:
    import argparse

    import yaml

    from otel_ext.counters import cli as exporter_cli

    deploy = REPO_ROOT / "deploy" / "kubernetes"
    docs = list(yaml.safe_load_all((deploy / "exporter-daemonset.yaml").read_text()))
    (ds,) = [d for d in docs if d and d.get("kind") == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    parser = argparse.ArgumentParser()
    exporter_cli.add_arguments(parser)
    args = parser.parse_args(container["args"][1:])
    assert args.pod_labels == "dcgm"
    mount = {m["mountPath"]: m for m in container["volumeMounts"]}[
        os.path.dirname(args.pod_resources_socket)
    ]
    assert mount["readOnly"] is True
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    # the workload example hands its pod identity to the records (source (a))
    (deployment,) = [
        d
        for d in yaml.safe_load_all((deploy / "workload-example.yaml").read_text())
        if d and d.get("kind") == "Deployment"
    ]
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    attrs = dict(kv.split("=", 1) for kv in env["OTEL_RESOURCE_ATTRIBUTES"]["value"].split(","))
    assert attrs["k8s.pod.name"] == "$(POD_NAME)"
    assert attrs["k8s.namespace.name"] == "$(POD_NAMESPACE)"
    assert attrs["k8s.pod.uid"] == "$(POD_UID)"
    assert (
        attrs["k8s.container.name"]
        == deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    )
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
