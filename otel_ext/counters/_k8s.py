"""Pod labels for a device's series: which Kubernetes pod runs on each device.

:class:`PodAttributor` is the bridge's labeller (:class:`~otel_ext.counters.CounterBridge`
``labeller=``). Every round it learns the devices from the samples (``accel.device.id``,
with ``hw.id``, the GPU UUID, and ``accel.device.index`` where a source gives them) and finds
the pods on each device from three places, each optional:

(a) **the workloads' active-span records**: a workload whose resource carries
    ``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.container.name`` and ``k8s.pod.uid`` (the
    downward API into ``OTEL_RESOURCE_ATTRIBUTES``) writes them into its record of the device
    (:mod:`otel_ext.instrumentation.active_span_record`); a record counts while its writer
    lives (holds the record's lock);
(b) **the kubelet's PodResources API** (:mod:`otel_ext.counters._podresources`), when its
    socket is there: the containers a device is allocated to, matched by GPU UUID (also a
    time-sliced share ``UUID::N``) or by index (a plugin configured with index ids); a MIG
    instance (``MIG-<uuid>``, or the pre-R470 form ``MIG-GPU-<uuid>/<gi>/<ci>``) counts for
    its parent GPU (``mig_parents``: NVML's MIG-to-GPU map,
    :meth:`~otel_ext.counters.NvmlSource.mig_parents`), whose series carry the pod of every
    instance in use, one copy per pod as for a shared GPU;
(c) **the processes using the device** (``processes``: NVML's compute and graphics process
    lists, :meth:`~otel_ext.counters.NvmlSource.device_pids`): the pod UID in each one's
    ``/proc/PID/cgroup`` (:func:`pod_of_cgroup`), named through the records' ``k8s.pod.uid``;
    a UID no record names is labelled ``pod_uid`` alone.

The labels are dcgm-exporter's, ``pod``, ``namespace`` and ``container`` (``style="k8s"``:
the OpenTelemetry attributes ``k8s.pod.name``, ``k8s.namespace.name``,
``k8s.container.name``, exposed as ``k8s_pod_name``...). A device shared by several pods
gets one copy of each series per pod (as dcgm-exporter does for shared GPUs); a device
without a workload gets none. The labels follow each round: a workload that exits takes its
labels with it at the next round (its record is removed, or its writer no longer holds the
lock; the kubelet drops the pod; NVML no longer lists its processes). When the PodResources
call fails, its last answer is kept for ``hold_s`` (then dropped).

Never raises into the bridge: a failing part is logged once (per kind of failure) and the
others go on.

>>> import pathlib, tempfile
>>> proc = pathlib.Path(tempfile.mkdtemp())
>>> (proc / "1").mkdir()
>>> _ = (proc / "1" / "cgroup").write_text(
...     "0::/kubepods/burstable/pod7d2c6a1e-93b4-4f0e-8a51-c2d3e4f5a6b7/" + "c" * 64)
>>> a = PodAttributor(processes=lambda: {"h/gpu0": [1]}, proc_root=proc)
>>> from otel_ext.counters._source import Sample
>>> a.refresh([Sample("hw.power", {"accel.device.id": "h/gpu0"}, 1.0, 0)], 0)
>>> a.label_sets({"accel.device.id": "h/gpu0"})
({'pod_uid': '7d2c6a1e-93b4-4f0e-8a51-c2d3e4f5a6b7'},)
>>> a.label_sets({"accel.device.id": "h/gpu1"})
()
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from otel_ext.counters._active_span_reader import SharedActiveSpanReader
from otel_ext.counters._podresources import AllocatedDevice, PodResourcesClient
from otel_ext.counters._source import AttributeValue, Sample
from otel_ext.errors import ConfigError
from otel_ext.semconv.attributes import (
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_INDEX,
    HW_ID,
    K8S_CONTAINER_NAME,
    K8S_NAMESPACE_NAME,
    K8S_POD_NAME,
    K8S_POD_UID,
)

__all__ = [
    "LABEL_STYLES",
    "PodAttributor",
    "PodRef",
    "mig_parent",
    "pod_labels",
    "pod_of_cgroup",
]

_log = logging.getLogger(__name__)

#: label names by style: dcgm-exporter's, or the OpenTelemetry ``k8s.*`` attributes
LABEL_STYLES: dict[str, dict[str, str]] = {
    "dcgm": {"pod": "pod", "namespace": "namespace", "container": "container", "uid": "pod_uid"},
    "k8s": {
        "pod": K8S_POD_NAME,
        "namespace": K8S_NAMESPACE_NAME,
        "container": K8S_CONTAINER_NAME,
        "uid": K8S_POD_UID,
    },
}

_UID = r"[0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12}"
_POD_IN_CGROUP = re.compile(
    rf"(?:^|[/-])pod(?P<uid>{_UID})(?:\.slice)?"
    rf"(?:/(?:[a-z0-9]+(?:-[a-z0-9]+)*-)?(?P<cid>[0-9a-f]{{64}})(?:\.scope)?)?(?:/|$)"
)


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    """A pod (and container) found on a device.

    Attributes:
        namespace, pod, container: its names (``""`` where unknown).
        uid: its UID (``""`` where unknown).
        source: where it was found: ``record``, ``podresources`` or ``cgroup``.
    """

    namespace: str = ""
    pod: str = ""
    container: str = ""
    uid: str = ""
    source: str = ""


def pod_of_cgroup(text: str) -> tuple[str, str] | None:
    """``(pod UID, container id)`` of a process from its ``/proc/PID/cgroup`` text.

    Reads the kubelet's layouts: cgroupfs (``/kubepods/burstable/pod<UID>/<ID>``) and
    systemd (``kubepods-burstable-pod<UID with _>.slice/cri-containerd-<ID>.scope``), cgroup
    v1 and v2; ``None`` for a process outside a pod. The container id is ``""`` when the
    path stops at the pod.

    >>> pod_of_cgroup("0::/kubepods.slice/kubepods-besteffort.slice/"
    ...     "kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/"
    ...     "cri-containerd-" + "ab" * 32 + ".scope")[0]
    '0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b'
    >>> pod_of_cgroup("0::/user.slice/user-1000.slice/session-2.scope") is None
    True
    """
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        found = _POD_IN_CGROUP.search(path)
        if found is not None:
            return found.group("uid").replace("_", "-"), found.group("cid") or ""
    return None


def pod_labels(ref: PodRef, style: str = "dcgm") -> dict[str, str]:
    """The labels of ``ref`` in ``style`` (names known, else the UID alone).

    >>> pod_labels(PodRef("ns", "serve-0", "server", "u1"))
    {'pod': 'serve-0', 'namespace': 'ns', 'container': 'server'}
    >>> pod_labels(PodRef(uid="u1"), "k8s")
    {'k8s.pod.uid': 'u1'}
    """
    names = LABEL_STYLES[style]
    if not ref.pod:
        return {names["uid"]: ref.uid} if ref.uid else {}
    out = {names["pod"]: ref.pod, names["namespace"]: ref.namespace}
    if ref.container:
        out[names["container"]] = ref.container
    return {k: v for k, v in out.items() if v}


class PodAttributor:
    """The pods on each device, as labels for the device's series (see the module docs).

    Args:
        records: the active-span records' reader (a).
        pod_resources: the kubelet API's client (b); asked only while its socket exists.
        processes: ``accel.device.id`` -> pids of the processes using it (c).
        proc_root: where ``PID/cgroup`` is read (the host's ``/proc``).
        style: ``dcgm`` (``pod``, ``namespace``, ``container``) or ``k8s``.
        hold_s: how long a failed PodResources call keeps its last answer.
        mig_parents: MIG instance UUID -> its parent GPU's UUID (NVML), asked in a round
            whose allocations name a MIG instance.

    Raises:
        ConfigError: an unknown ``style``.
    """

    def __init__(
        self,
        *,
        records: SharedActiveSpanReader | None = None,
        pod_resources: PodResourcesClient | None = None,
        processes: Callable[[], Mapping[str, Sequence[int]]] | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
        style: str = "dcgm",
        hold_s: float = 0.0,
        mig_parents: Callable[[], Mapping[str, str]] | None = None,
    ):
        if style not in LABEL_STYLES:
            raise ConfigError(f"pod label style {style!r}: expected one of {sorted(LABEL_STYLES)}")
        self.records = records
        self.pod_resources = pod_resources
        self.processes = processes
        self.proc_root = os.fspath(proc_root)
        self.style = style
        #: the label names it adds (the bridge derives without them)
        self.label_keys = frozenset(LABEL_STYLES[style].values())
        self.hold_ns = int(hold_s * 1e9)
        self.mig_parents = mig_parents
        #: ``accel.device.id`` -> the pods found on it in the last round
        self.pods: dict[str, list[PodRef]] = {}
        self._labels: dict[str, tuple[dict[str, AttributeValue], ...]] = {}
        self._allocations: list[AllocatedDevice] = []
        self._allocations_ns = 0
        self._warned: set[str] = set()

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning("pod labels: %s", message)

    # ---- the round ---------------------------------------------------------------------------
    def refresh(self, samples: Sequence[Sample], now_ns: int) -> None:
        """Find the pods of every device in ``samples`` (the bridge calls it every round)."""
        uuids: dict[str, str] = {}
        indices: dict[str, str] = {}
        for s in samples:
            dev = s.attributes.get(ACCEL_DEVICE_ID)
            if dev is None:
                continue
            dev = str(dev)
            uuids.setdefault(dev, "")
            hw = s.attributes.get(HW_ID)
            if hw and not uuids[dev]:
                uuids[dev] = str(hw)
            index = s.attributes.get(ACCEL_DEVICE_INDEX)
            if index is not None:
                indices[dev] = str(index)
        found: dict[str, list[PodRef]] = {dev: [] for dev in uuids}
        named_by_uid: dict[str, PodRef] = {}
        for dev, ref in self._from_records(list(uuids)):
            found[dev].append(ref)
            if ref.uid:
                named_by_uid.setdefault(ref.uid, ref)
        for dev, ref in self._from_pod_resources(uuids, indices, now_ns):
            found[dev].append(ref)
        for dev, uid in self._from_processes(set(uuids)):
            named = named_by_uid.get(uid)
            found[dev].append(
                replace(named, source="cgroup") if named else PodRef(uid=uid, source="cgroup")
            )
        self.pods = {dev: _merge(refs) for dev, refs in found.items() if refs}
        self._labels = {
            dev: tuple(dict(labels) for ref in refs if (labels := pod_labels(ref, self.style)))
            for dev, refs in self.pods.items()
        }

    def label_sets(
        self, attributes: Mapping[str, AttributeValue]
    ) -> Sequence[Mapping[str, AttributeValue]]:
        """The extra labels of a series of the device in ``attributes`` (one set per pod)."""
        dev = attributes.get(ACCEL_DEVICE_ID)
        if dev is None:
            return ()
        return self._labels.get(str(dev), ())

    # ---- the three places ----------------------------------------------------------------------
    def _from_records(self, devices: list[str]) -> list[tuple[str, PodRef]]:
        if self.records is None or not devices:
            return []
        out = []
        for dev, resources in self.records.resources(devices).items():
            for r in resources:
                if r.get(K8S_POD_NAME):
                    out.append(
                        (
                            dev,
                            PodRef(
                                r.get(K8S_NAMESPACE_NAME, ""),
                                r[K8S_POD_NAME],
                                r.get(K8S_CONTAINER_NAME, ""),
                                r.get(K8S_POD_UID, ""),
                                "record",
                            ),
                        )
                    )
        return out

    def _from_pod_resources(
        self, uuids: Mapping[str, str], indices: Mapping[str, str], now_ns: int
    ) -> list[tuple[str, PodRef]]:
        client = self.pod_resources
        if client is None:
            return []
        if client.present():
            try:
                self._allocations = client.list()
                self._allocations_ns = now_ns
            except Exception as exc:  # PodResourcesError, or a failure of grpc itself
                self._warn(f"podresources:{type(exc).__name__}", str(exc))
        # no answer this round (an error, or the socket gone while the kubelet restarts):
        # the last one holds for hold_s
        if now_ns - self._allocations_ns > self.hold_ns:
            self._allocations = []
        parents = self._mig_parents()
        out = []
        for alloc in self._allocations:
            device_id = mig_parent(alloc.device_id, parents) or alloc.device_id
            for dev, uuid in uuids.items():
                if (uuid and (device_id == uuid or device_id.startswith(uuid + "::"))) or (
                    device_id.isdigit() and indices.get(dev) == device_id
                ):
                    out.append(
                        (
                            dev,
                            PodRef(alloc.namespace, alloc.pod, alloc.container, "", "podresources"),
                        )
                    )
        return out

    def _mig_parents(self) -> Mapping[str, str]:
        """NVML's MIG-to-GPU map, asked only when an allocation names a MIG instance."""
        if self.mig_parents is None or not any(
            a.device_id.startswith("MIG-") for a in self._allocations
        ):
            return {}
        try:
            return self.mig_parents()
        except Exception as exc:
            self._warn("mig", f"the MIG instances' parent GPUs cannot be read: {exc!r}")
            return {}

    def _from_processes(self, devices: set[str]) -> list[tuple[str, str]]:
        if self.processes is None:
            return []
        try:
            by_device = self.processes()
        except Exception as exc:
            self._warn("processes", f"the device process lists cannot be read: {exc!r}")
            return []
        out = []
        for dev, pids in by_device.items():
            if dev not in devices:
                continue
            for pid in pids:
                try:
                    with open(os.path.join(self.proc_root, str(int(pid)), "cgroup")) as f:
                        text = f.read()
                except (OSError, ValueError):
                    continue  # gone, or not ours to read
                got = pod_of_cgroup(text)
                if got is not None:
                    out.append((dev, got[0]))
        return out


def mig_parent(device_id: str, parents: Mapping[str, str]) -> str | None:
    """The parent GPU UUID of a MIG instance id, ``None`` for an id that is not one.

    The pre-R470 form names its parent (``MIG-GPU-<uuid>/<gi>/<ci>``); the current form
    (``MIG-<uuid>``) is looked up in ``parents`` (NVML's map).

    >>> mig_parent("MIG-GPU-5f3c0a1e-0000-0000-0000-000000000001/1/0", {})
    'GPU-5f3c0a1e-0000-0000-0000-000000000001'
    >>> mig_parent("MIG-8e0a", {"MIG-8e0a": "GPU-5f3c"})
    'GPU-5f3c'
    >>> mig_parent("GPU-5f3c", {}) is None, mig_parent("MIG-unknown", {}) is None
    (True, True)
    """
    if device_id.startswith("MIG-") and "/" in device_id:  # MIG-<parent>/<gi>/<ci>
        return device_id[len("MIG-") :].split("/", 1)[0]
    if device_id.startswith("MIG-"):
        return parents.get(device_id)
    return None


def _merge(refs: list[PodRef]) -> list[PodRef]:
    """One ref per (namespace, pod, container), UIDs filled in; a UID-only ref is kept only
    when no named ref has its UID."""
    named: dict[tuple[str, str, str], PodRef] = {}
    for ref in refs:
        if not ref.pod:
            continue
        key = (ref.namespace, ref.pod, ref.container)
        old = named.get(key)
        if old is None:
            named[key] = ref
        elif not old.uid and ref.uid:
            named[key] = replace(old, uid=ref.uid)
    # a pod known by name with its container: a container-less ref of it says nothing more
    with_container = {(ns, pod) for ns, pod, cont in named if cont}
    kept = [r for k, r in named.items() if k[2] or (k[0], k[1]) not in with_container]
    uids = {r.uid for r in kept if r.uid}
    for ref in refs:
        if not ref.pod and ref.uid and ref.uid not in uids:
            uids.add(ref.uid)
            kept.append(ref)
    return sorted(kept)
