"""Accelerator resource attributes: which host, device and rank this process is.

Detected, in order of trust: an initialised ``torch.distributed`` process group (only if
``torch`` is already imported; importing it here would cost seconds), then the launcher's
``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` variables (torchrun, ``torch.multiprocessing``
launchers, MPI wrappers that set them). The device is named ``HOST/chipN`` after the
local rank, the usual one-process-per-device layout; an explicit ``accel.device.id`` in
``OTEL_RESOURCE_ATTRIBUTES`` or in code wins over it.

>>> attrs = accelerator_attributes(env={"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"},
...                                hostname="node7", use_torch=False)
>>> attrs == {"accel.host.id": "node7", "accel.rank": 5, "accel.world_size": 8,
...           "accel.local_rank": 1, "accel.device.id": "node7/chip1"}
True

:class:`AcceleratorResourceDetector` offers the same attributes to any OpenTelemetry SDK
setup, as the ``otel_ext_accelerator`` resource detector entry point
(``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=otel_ext_accelerator``).

>>> AcceleratorResourceDetector(env={"LOCAL_RANK": "0"}, hostname="n1").detect().attributes[
...     "accel.device.id"]
'n1/chip0'
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource, ResourceDetector

from otel_ext import config
from otel_ext.semconv.attributes import (
    ACCEL_DEVICE_ID,
    ACCEL_HOST_ID,
    ACCEL_LOCAL_RANK,
    ACCEL_RANK,
    ACCEL_WORLD_SIZE,
)

__all__ = ["AcceleratorResourceDetector", "accelerator_attributes"]

_log = logging.getLogger(__name__)


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        _log.warning("%s=%r is not an integer; ignoring it", name, raw)
        return None


def _torch_distributed() -> tuple[int, int] | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        return None
    return None


def accelerator_attributes(
    *,
    env: Mapping[str, str] | None = None,
    hostname: str | None = None,
    use_torch: bool = True,
) -> dict[str, Any]:
    """The accelerator resource attributes of this process.

    Args:
        env: the environment (defaults to ``os.environ``).
        hostname: the host name (defaults to ``OTEL_EXT_HOST_ID``, then the machine's host name).
        use_torch: consult ``torch.distributed`` when it is imported and initialised.

    Returns:
        ``accel.host.id`` always; ``accel.rank``, ``accel.world_size``,
        ``accel.local_rank`` and ``accel.device.id`` when known.
    """
    env = os.environ if env is None else env
    host = config.host_id(hostname)
    attrs: dict[str, Any] = {ACCEL_HOST_ID: host}
    rank = _env_int(env, "RANK")
    world = _env_int(env, "WORLD_SIZE")
    local = _env_int(env, "LOCAL_RANK")
    if use_torch:
        found = _torch_distributed()
        if found is not None:
            rank, world = found
    if rank is not None:
        attrs[ACCEL_RANK] = rank
    if world is not None:
        attrs[ACCEL_WORLD_SIZE] = world
    if local is not None:
        attrs[ACCEL_LOCAL_RANK] = local
        attrs[ACCEL_DEVICE_ID] = f"{host}/chip{local}"
    return attrs


class AcceleratorResourceDetector(ResourceDetector):
    """An SDK resource detector for :func:`accelerator_attributes`.

    Args:
        env: the environment (defaults to ``os.environ`` at detection time).
        hostname: the host name (defaults to ``OTEL_EXT_HOST_ID``, then the machine's).
        raise_on_error: the SDK's detector option (nothing here raises).
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        hostname: str | None = None,
        raise_on_error: bool = False,
    ):
        super().__init__(raise_on_error=raise_on_error)
        self._env = env
        self._hostname = hostname

    def detect(self) -> Resource:
        """The accelerator attributes of this process as a resource."""
        return Resource(accelerator_attributes(env=self._env, hostname=self._hostname))
