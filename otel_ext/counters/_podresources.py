"""The kubelet's PodResources API (v1 ``List``): which pod and container hold which device.

The kubelet serves ``v1.PodResourcesLister`` on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``); its ``List`` call answers, for every pod
on the node, each container's devices by resource (``nvidia.com/gpu`` with GPU UUIDs such
as ``GPU-5f3c...``, ``GPU-5f3c...::1`` for a time-sliced share, ``MIG-...`` for a MIG
instance; ``amd.com/gpu`` with the AMD plugin's ids). dcgm-exporter and AMD's
device-metrics-exporter read the same call for their ``pod``/``namespace``/``container``
labels.

The messages are decoded here from the protobuf wire format, by the field numbers of the
published ``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``::

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources       { string name = 1; string namespace = 2;
                         repeated ContainerResources containers = 3; }
    ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ... }
    ContainerDevices   { string resource_name = 1; repeated string device_ids = 2; ... }

(other fields: CPU ids, memory, dynamic resources, topology, are skipped). The transport is
``grpcio`` (the ``k8s`` extra: ``pip install 'otel-ext[k8s]'``), imported only when a
socket is there.

>>> body = bytes.fromhex(  # pod q1/svc, container c, nvidia.com/gpu GPU-abcd
...     "0a2a0a03737663120271311a1f0a0163121a0a0e6e76696469612e636f6d2f67707512084750552d61626364")
>>> [(d.namespace, d.pod, d.container, d.resource_name, d.device_id)
...  for d in decode_list_response(body)]
[('q1', 'svc', 'c', 'nvidia.com/gpu', 'GPU-abcd')]
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from otel_ext.errors import OtelExtError

__all__ = [
    "DEFAULT_SOCKET",
    "LIST_METHOD",
    "AllocatedDevice",
    "PodResourcesClient",
    "PodResourcesError",
    "decode_list_response",
]

#: where the kubelet serves the API
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: the gRPC method path of ``List``
LIST_METHOD = "/v1.PodResourcesLister/List"
_MAX_MESSAGE = 16 << 20  # the kubelet's own limit on a response


class PodResourcesError(OtelExtError):
    """The PodResources API could not be asked, or answered something that is not a v1
    ``ListPodResourcesResponse``; the message names the socket or the field."""


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device the kubelet allocated to one container.

    Attributes:
        namespace: the pod's namespace.
        pod: the pod's name.
        container: the container's name.
        resource_name: the extended resource (``nvidia.com/gpu``).
        device_id: the device plugin's id for it (a GPU UUID for NVIDIA's plugin).
    """

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_id: str


# ---- protobuf wire format ------------------------------------------------------------------
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: bytes, i: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf):
            raise PodResourcesError(f"{where}: truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift >= 70:
            raise PodResourcesError(f"{where}: varint longer than 10 bytes")


def _fields(buf: bytes, where: str) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of a message; LEN values as bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i, where)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise PodResourcesError(f"{where}: field number 0")
        value: int | bytes
        if wire == _VARINT:
            value, i = _varint(buf, i, where)
        elif wire == _LEN:
            size, i = _varint(buf, i, where)
            if i + size > len(buf):
                raise PodResourcesError(f"{where}: field {number} runs past the message")
            value, i = buf[i : i + size], i + size
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            if i + width > len(buf):
                raise PodResourcesError(f"{where}: field {number} runs past the message")
            value, i = buf[i : i + width], i + width
        else:
            raise PodResourcesError(f"{where}: field {number} has wire type {wire}")
        yield number, wire, value


def _text(value: Any, wire: int, where: str) -> str:
    if wire != _LEN:
        raise PodResourcesError(f"{where}: a string with wire type {wire}")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise PodResourcesError(f"{where}: not UTF-8") from None


def _message(value: Any, wire: int, where: str) -> bytes:
    if wire != _LEN:
        raise PodResourcesError(f"{where}: a message with wire type {wire}")
    return bytes(value)


def decode_list_response(data: bytes) -> list[AllocatedDevice]:
    """The devices of a ``ListPodResourcesResponse`` (wire bytes), in the order given.

    Raises:
        PodResourcesError: the bytes are not such a message (naming the field).
    """
    out: list[AllocatedDevice] = []
    for number, wire, value in _fields(bytes(data), "ListPodResourcesResponse"):
        if number != 1:
            continue
        name = namespace = ""
        containers: list[bytes] = []
        where = f"ListPodResourcesResponse.pod_resources[{len(out)}]"
        for n, w, v in _fields(_message(value, wire, where), where):
            if n == 1:
                name = _text(v, w, f"{where}.name")
            elif n == 2:
                namespace = _text(v, w, f"{where}.namespace")
            elif n == 3:
                containers.append(_message(v, w, f"{where}.containers"))
        for ci, cont in enumerate(containers):
            cwhere = f"{where}.containers[{ci}] of pod {namespace}/{name}"
            cname = ""
            devices: list[bytes] = []
            for n, w, v in _fields(cont, cwhere):
                if n == 1:
                    cname = _text(v, w, f"{cwhere}.name")
                elif n == 2:
                    devices.append(_message(v, w, f"{cwhere}.devices"))
            for dev in devices:
                resource = ""
                ids: list[str] = []
                for n, w, v in _fields(dev, f"{cwhere}.devices"):
                    if n == 1:
                        resource = _text(v, w, f"{cwhere}.devices.resource_name")
                    elif n == 2:
                        ids.append(_text(v, w, f"{cwhere}.devices.device_ids"))
                out.extend(AllocatedDevice(namespace, name, cname, resource, d) for d in ids)
    return out


# ---- the client ------------------------------------------------------------------------------
class PodResourcesClient:
    """Asks the kubelet's PodResources API (``List``) over its unix socket.

    Args:
        socket_path: the socket (default :data:`DEFAULT_SOCKET`).
        timeout_s: the deadline of one call.

    The gRPC channel is made on the first call and kept (it reconnects by itself after the
    kubelet restarts).
    """

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_s: float = 2.0):
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: Any = None
        self._call: Any = None

    def present(self) -> bool:
        """Whether the socket exists (the node runs a kubelet that serves the API)."""
        try:
            return stat.S_ISSOCK(os.stat(self.socket_path).st_mode)
        except OSError:
            return False

    def list(self) -> list[AllocatedDevice]:
        """Every device allocated to a container on this node.

        Raises:
            PodResourcesError: grpcio missing, the call failed, or a malformed answer.
        """
        if self._call is None:
            try:
                import grpc
            except ImportError:
                raise PodResourcesError(
                    f"{self.socket_path}: grpcio is not installed (pip install 'otel-ext[k8s]')"
                ) from None
            self._channel = grpc.insecure_channel(
                "unix://" + os.path.abspath(self.socket_path),
                options=[("grpc.max_receive_message_length", _MAX_MESSAGE)],
            )
            self._call = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
        try:
            raw = self._call(b"", timeout=self.timeout_s)  # an empty ListPodResourcesRequest
        except Exception as exc:
            code = getattr(exc, "code", None)
            details = getattr(exc, "details", None)
            what = (
                f"{code().name}: {details() if callable(details) else ''}"
                if callable(code)
                else repr(exc)
            )
            raise PodResourcesError(f"{self.socket_path}: List failed ({what})") from None
        try:
            return decode_list_response(raw)
        except PodResourcesError as exc:
            raise PodResourcesError(f"{self.socket_path}: {exc}") from None

    def close(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            self._channel.close()
        self._channel = self._call = None
