"""MIG instances in the kubelet's answer attributed to their parent GPU's series.

The PodResources API names a MIG instance (``MIG-<uuid>``, or ``MIG-GPU-<uuid>/<gi>/<ci>``
before driver R470), never its GPU: the node agent maps it through NVML
(``NvmlSource.mig_parents``) so the parent GPU's series carry the pods of its instances.
A real gRPC server speaks the published v1 messages (there is no kubelet here); NVML is the
fake module of test_counters_sources.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from test_counters_k8s import PodResourcesServer, Pods, grpc_module  # noqa: F401 (fixture)
from test_counters_sources import fake_nvml

from otel_ext.counters import (
    BuiltinSimModel,
    CounterBridge,
    NvmlSource,
    PodAttributor,
    PodResourcesClient,
    SimulatedSource,
)

pytestmark = pytest.mark.integration


def _nvml_with_mig(instances: dict[int, list[str | None]]) -> Any:
    """The fake pynvml with MIG: GPU ``h`` holds ``instances[h]`` (``None``: an empty slot)."""
    nv = fake_nvml(gpus=2)

    def max_count(h: Any) -> int:
        if h not in instances:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return len(instances[h])

    def mig_handle(h: Any, slot: int) -> Any:
        uuid = instances[h][slot]
        if uuid is None:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return types.SimpleNamespace(mig=uuid)

    plain_uuid = nv.nvmlDeviceGetUUID
    nv.nvmlDeviceGetMaxMigDeviceCount = max_count
    nv.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    nv.nvmlDeviceGetUUID = lambda h: (
        h.mig.encode() if isinstance(h, types.SimpleNamespace) else plain_uuid(h)
    )
    return nv


def test_nvml_mig_parents_maps_each_instance_to_its_gpu() -> None:
    src = NvmlSource(nvml=_nvml_with_mig({1: ["MIG-aa01", None, "MIG-aa02"]}), host="h")
    src.open()
    try:
        # GPU 0 is not in MIG mode (NOT_SUPPORTED) and the empty slot is skipped
        assert src.mig_parents() == {"MIG-aa01": "GPU-0000-1", "MIG-aa02": "GPU-0000-1"}
    finally:
        src.close()


def test_nvml_without_mig_calls_has_no_instances() -> None:
    src = NvmlSource(nvml=fake_nvml(gpus=2), host="h")
    src.open()
    try:
        assert src.mig_parents() == {}
    finally:
        src.close()


def test_mig_pods_label_the_parent_gpu(tmp_path: Path, grpc_module: Any) -> None:  # noqa: F811
    sock = tmp_path / "kubelet.sock"
    pods: Pods = [
        # two MIG instances of chip1's GPU in two pods; one instance in the old id form on chip0
        ("inference", "small-0", [("server", [("nvidia.com/mig-1g.10gb", ["MIG-bb01"])])]),
        ("inference", "small-1", [("server", [("nvidia.com/mig-1g.10gb", ["MIG-bb02"])])]),
        ("batch", "old-0", [("job", [("nvidia.com/gpu", ["MIG-sim-h-0/1/0"])])]),
        # an instance NVML does not know names no device
        ("batch", "ghost", [("job", [("nvidia.com/mig-1g.10gb", ["MIG-ffff"])])]),
    ]
    server = PodResourcesServer(sock, pods)
    asked = []

    def parents() -> dict[str, str]:
        asked.append(1)
        return {"MIG-bb01": "sim-h-1", "MIG-bb02": "sim-h-1"}

    t = [10**9]
    bridge = CounterBridge(
        [SimulatedSource(BuiltinSimModel(chips=3, host="h"), clock=lambda: t[0])],
        clock=lambda: t[0],
        labeller=PodAttributor(pod_resources=PodResourcesClient(str(sock)), mig_parents=parents),
        derive=False,
    )
    bridge.open()

    def pods_of() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for s in bridge.families()["hw.power"]:
            a = s.attributes
            out.setdefault(str(a["accel.device.id"]), []).append(str(a.get("pod", "")))
        return {k: sorted(v) for k, v in out.items()}

    try:
        bridge.sample_once()
        assert pods_of() == {
            "h/chip0": ["old-0"],
            "h/chip1": ["small-0", "small-1"],
            "h/chip2": [""],
        }
        assert asked, "the MIG map is asked when an allocation names an instance"
        # the instances are released: the parent GPU is free at the next round
        server.pods = [("batch", "plain", [("job", [("nvidia.com/gpu", ["sim-h-2"])])])]
        n = len(asked)
        t[0] += 10**9
        bridge.sample_once()
        assert pods_of() == {"h/chip0": [""], "h/chip1": [""], "h/chip2": ["plain"]}
        assert len(asked) == n, "no MIG instance allocated: NVML is not asked"
    finally:
        server.stop()
        bridge.stop()
