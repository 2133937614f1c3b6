"""Shared plumbing of the instrumentations: never-raise guards, device identity, tracers.

Everything here runs on (or next to) the workload's hot path, so nothing raises: a failure
is logged once per call site and counted in :data:`DROPS` (the process's drop ledger,
:mod:`otel_ext._drops`, exported as ``accel.telemetry.dropped{component="instrumentation",
reason=<site>}``).

>>> DROPS.reset()
>>> guarded("demo", lambda: 1 / 0) is None
True
>>> DROPS.totals()
{'demo': 1}
>>> DROPS.reset()
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from opentelemetry import metrics, trace
from opentelemetry.trace import Tracer, TracerProvider

from otel_ext import config
from otel_ext._drops import LEDGER
from otel_ext.semconv.attributes import ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_RANK

__all__ = [
    "DROPS",
    "INSTRUMENTATION_NAME",
    "DropTally",
    "bind_drops",
    "device_attributes",
    "get_tracer",
    "guarded",
    "local_device",
    "log_once",
    "pause",
]

INSTRUMENTATION_NAME = "otel_ext.instrumentation"
#: the ``accel.telemetry.component`` of the instrumentations' drops
COMPONENT = "instrumentation"
_log = logging.getLogger(INSTRUMENTATION_NAME)
T = TypeVar("T")


class DropTally:
    """The instrumentation's view of the process's drop ledger (:data:`otel_ext._drops.LEDGER`,
    component ``instrumentation``): counts per call site (the ``accel.telemetry.reason``).

    Thread-safe; :meth:`add` never raises. Exported as ``accel.telemetry.dropped`` wherever
    the ledger is bound (``otel_ext.configure()``'s meter provider, or the meter provider an
    instrumentor was given).
    """

    component = COMPONENT

    def add(self, site: str, count: int = 1) -> None:
        """Count ``count`` drops at ``site`` (without logging)."""
        LEDGER.drop(self.component, site, count, quiet=True)

    def totals(self) -> dict[str, int]:
        """A copy of the drop counts per site."""
        return LEDGER.of(self.component)

    def reset(self) -> None:
        """Forget every count, and that a site was logged (tests)."""
        LEDGER.forget(self.component)


DROPS = DropTally()


def log_once(site: str, message: str, *args: object, exc_info: bool = True) -> None:
    """Log ``message`` the first time ``site`` fails; later failures are only counted."""
    LEDGER.drop(
        COMPONENT,
        site,
        1,
        message=message,
        args=args,
        exc_info=exc_info,
        logger=_log,
    )


def bind_drops(meter_provider: Any) -> None:
    """Export the process's drop counts through ``meter_provider`` (an SDK one; the global
    one when ``None``); once per provider, never raises."""
    try:
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        if hasattr(provider, "_all_metric_readers") or hasattr(provider, "_sdk_config"):
            LEDGER.bind(provider)
    except Exception:  # pragma: no cover - the API does not raise here
        pass


def pause(seconds: float) -> None:
    """``time.sleep`` that never raises: a clock-shifting ``LD_PRELOAD`` or a signal can make
    the sleep fail (``OSError: [Errno 22]``); then the thread only yields, the failure is
    logged once and counted (reason ``sleep_failed``), and the caller's loop goes on."""
    try:
        time.sleep(seconds)
    except Exception as exc:
        LEDGER.failed(COMPONENT, "sleep_failed", exc, 0, logger=_log)
        try:
            os.sched_yield()
        except Exception:  # pragma: no cover - sched_yield does not fail on Linux
            pass


def guarded(site: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """Call ``func(*args, **kwargs)``; on any exception log once, count, return ``None``."""
    try:
        return func(*args, **kwargs)
    except Exception as exc:
        log_once(site, "%s: %s", type(exc).__name__, exc)
        return None


def get_tracer(tracer_provider: TracerProvider | None = None, version: str = "0.1.0") -> Tracer:
    """The instrumentation's tracer from ``tracer_provider`` (the global one when ``None``).

    >>> get_tracer() is not None
    True
    """
    return trace.get_tracer(INSTRUMENTATION_NAME, version, tracer_provider=tracer_provider)


def device_attributes(
    device: str | None = None, *, host_id: str | None = None, rank: int | None = None
) -> dict[str, Any]:
    """The identity attributes every span carries: ``accel.device.id``, ``accel.host.id``, ``accel.rank``.

    Args:
        device: the chip on this host (``cuda:0``, ``chip2``, ``cpu``); ``None`` leaves
            ``accel.device.id`` out.
        host_id: the host name as the cluster names it; defaults to this machine's name.
        rank: global rank in the distributed job, when there is one.

    Returns:
        A new attribute dictionary; the device id is ``HOST/CHIP``.

    >>> device_attributes("chip2", host_id="host1", rank=5)
    {'accel.host.id': 'host1', 'accel.device.id': 'host1/chip2', 'accel.rank': 5}
    """
    host = config.host_id(host_id)
    attrs: dict[str, Any] = {ACCEL_HOST_ID: host}
    if device is not None:
        attrs[ACCEL_DEVICE_ID] = device if "/" in device else f"{host}/{device}"
    if rank is not None:
        attrs[ACCEL_RANK] = int(rank)
    return attrs


def local_device(fallback: str | None, *, env: Mapping[str, str] | None = None) -> str | None:
    """The device name spans carry when none is given: ``chipN`` from ``LOCAL_RANK``, else ``fallback``.

    The resource (``exporters``' accelerator attributes) names this process's device
    ``HOST/chip{LOCAL_RANK}`` when the launcher sets ``LOCAL_RANK``; spans use the same rule
    so that a span's ``accel.device.id`` agrees with its resource's.

    >>> local_device("cpu", env={"LOCAL_RANK": "3"}), local_device("cpu", env={})
    ('chip3', 'cpu')
    """
    env = os.environ if env is None else env
    raw = env.get("LOCAL_RANK", "").strip()
    if raw.isdecimal():
        return f"chip{int(raw)}"
    return fallback
