"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported lazily).

Reads per GPU: utilization and memory utilization (percent -> ratio), SM and memory clocks
(MHz -> Hz), power (mW -> W), total energy (mJ -> J), temperature (Cel), memory used and total
(By), PCIe throughput (KB/s -> By/s) and, where the driver has them, PCIe byte counters and
NVLink data counters through field values (KiB -> By), volatile ECC error counts
(``hw.errors``, ``error.type`` corrected or uncorrected) and the clock throttle (event)
reasons bitmask; and ``hw.status`` (``hw.state`` ok, degraded: uncorrected ECC errors since
the driver loaded, failed: the GPU is lost). The OpenTelemetry ``hw.*`` series carry
``hw.id`` (the UUID), ``hw.type`` (``gpu``), ``hw.vendor`` (``NVIDIA``) and ``hw.model`` (the
product name NVML gives). :meth:`NvmlSource.device_pids` lists the processes on each GPU
(for the node agent's pod labels).

Without the library or the driver, :meth:`NvmlSource.open` raises
:class:`~otel_ext.errors.SourceUnavailableError` with a one-line reason (no traceback). A GPU
that is lost mid-run (``NVML_ERROR_GPU_IS_LOST``) is marked lost: its series go stale and
disappear, the other GPUs keep being read. A reading the GPU does not support
(``NVML_ERROR_NOT_SUPPORTED``) is skipped from then on.

Devices are named ``HOST/gpuN`` (``accel.device.id``) with ``hw.id`` the GPU UUID, and
``accel.device.model`` the device-spec row matched from the NVML product name (the row whose
model token, such as ``H100``, appears in the name, the nearest memory size winning).

Tests inject a fake ``pynvml`` module object (``nvml=``); the suite never needs a GPU.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from otel_ext import config
from otel_ext.counters._source import (
    CLOCK_HOST_REALTIME,
    AttributeValue,
    BaseSource,
    Sample,
    SeriesDescription,
)
from otel_ext.errors import SourceUnavailableError
from otel_ext.semconv.attributes import (
    ACCEL_DEVICE_ID,
    ACCEL_DEVICE_INDEX,
    ACCEL_DEVICE_MODEL,
    ACCEL_HOST_ID,
    ACCEL_LINK_ID,
    ERROR_TYPE,
    HW_ID,
    HW_MODEL,
    HW_STATE,
    HW_TYPE,
    HW_VENDOR,
    NETWORK_IO_DIRECTION,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY,
    METRIC_ACCEL_DEVICE_MEMORY_CLOCK_FREQUENCY,
    METRIC_ACCEL_DEVICE_THROTTLE_REASONS,
    METRIC_ACCEL_LINK_IO,
    METRIC_ACCEL_PCIE_IO,
    METRIC_ACCEL_PCIE_THROUGHPUT,
    METRIC_HW_ENERGY,
    METRIC_HW_ERRORS,
    METRIC_HW_GPU_MEMORY_LIMIT,
    METRIC_HW_GPU_MEMORY_USAGE,
    METRIC_HW_GPU_MEMORY_UTILIZATION,
    METRIC_HW_GPU_UTILIZATION,
    METRIC_HW_POWER,
    METRIC_HW_STATUS,
    METRIC_HW_TEMPERATURE,
)

__all__ = ["NvmlSource", "match_device_model"]

_log = logging.getLogger(__name__)
_KIB = 1024
#: the ``hw.state`` values ``hw.status`` reports for a GPU (one series each)
GPU_STATES = ("ok", "degraded", "failed")


def match_device_model(
    product_name: str, memory_bytes: float | None, table: Mapping[str, Mapping[str, Any]]
) -> str:
    """The device-spec row for an NVML product name, or the name itself when none fits.

    Args:
        product_name: what ``nvmlDeviceGetName`` returns (``NVIDIA H100 80GB HBM3``).
        memory_bytes: the GPU's memory size, to tell variants apart.
        table: model -> spec row (with ``vendor`` and ``memory_size``).

    >>> from otel_ext.semconv.registry import load_registry
    >>> t = load_registry().device_specs
    >>> match_device_model("NVIDIA H100 80GB HBM3", 85e9, t)
    'H100-SXM5-80GB'
    >>> match_device_model("Tesla T4", 16e9, t)
    'Tesla T4'
    """
    best: tuple[float, str] | None = None
    for model, row in table.items():
        if str(row.get("vendor", "")).lower() != "nvidia":
            continue
        token = model.split("-", 1)[0]
        if not re.search(rf"(?<![A-Za-z0-9]){re.escape(token)}(?![0-9])", product_name):
            continue
        size = float(row.get("memory_size", 0.0) or 0.0)
        dist = abs(size - memory_bytes) if memory_bytes else 0.0
        if best is None or dist < best[0]:
            best = (dist, model)
    return best[1] if best else product_name


def _default_table() -> Mapping[str, Mapping[str, Any]]:
    from otel_ext.semconv.registry import device_table

    return device_table()


class _Device:
    __slots__ = ("attrs", "handle", "hw_attrs", "index", "lost", "nvlinks", "unsupported")

    def __init__(
        self, index: int, handle: Any, attrs: dict[str, AttributeValue], uuid: str, name: str = ""
    ):
        self.index = index
        self.handle = handle
        self.attrs = attrs
        self.hw_attrs = {
            **attrs,
            HW_ID: uuid,
            HW_TYPE: "gpu",
            HW_VENDOR: "NVIDIA",
            HW_MODEL: name,
        }
        self.lost = False
        self.unsupported: set[str] = set()
        self.nvlinks: int | None = None


class NvmlSource(BaseSource):
    """Counters of the NVIDIA GPUs of this host.

    Args:
        nvml: the ``pynvml`` module (imported lazily when ``None``; tests pass a fake).
        host: ``accel.host.id`` (default: the host name).
        indices: GPU indices to read (default: all).
        clock: timestamps in nanoseconds (``time.time_ns``, domain ``host.realtime``).
        device_specs: model -> spec row, to name ``accel.device.model`` (the registry's).
    """

    name = "nvml"

    def __init__(
        self,
        *,
        nvml: Any = None,
        host: str | None = None,
        indices: list[int] | None = None,
        clock: Callable[[], int] = time.time_ns,
        device_specs: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        self._nvml = nvml
        self.host = config.host_id(host)
        self._indices = indices
        self._clock = clock
        self._table = device_specs
        self.devices: list[_Device] = []
        self._opened = False

    def _err_code(self, exc: BaseException) -> int | None:
        return getattr(exc, "value", None)

    def open(self) -> None:
        """Load NVML and enumerate the GPUs.

        Raises:
            SourceUnavailableError: ``nvidia-ml-py`` missing, no driver, or no GPU.
        """
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise SourceUnavailableError(
                    "nvidia-ml-py is not installed (pip install 'otel-ext[nvml]')"
                ) from None
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except Exception as exc:
            raise SourceUnavailableError(f"NVML cannot start: {exc} (no NVIDIA driver?)") from None
        self._opened = True
        try:
            count = int(nv.nvmlDeviceGetCount())
            table = self._table if self._table is not None else _default_table()
            wanted = range(count) if self._indices is None else self._indices
            for i in wanted:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(h)
                name = name.decode() if isinstance(name, bytes) else str(name)
                uuid = nv.nvmlDeviceGetUUID(h)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                attrs: dict[str, AttributeValue] = {
                    ACCEL_DEVICE_ID: f"{self.host}/gpu{i}",
                    ACCEL_HOST_ID: self.host,
                    ACCEL_DEVICE_MODEL: match_device_model(name, float(mem.total), table),
                    ACCEL_DEVICE_INDEX: i,
                }
                self.devices.append(_Device(i, h, attrs, uuid, name))
        except Exception as exc:
            self.close()
            raise SourceUnavailableError(f"NVML cannot enumerate GPUs: {exc}") from None
        if not self.devices:
            self.close()
            raise SourceUnavailableError("NVML found no GPU")

    def device_uuids(self) -> dict[str, str]:
        """``accel.device.id`` -> the GPU's UUID (``GPU-...``), for the opened GPUs.

        The node agent matches workloads' active-span records by UUID with it, since a
        container's ``cuda:0`` need not be the host's GPU 0.
        """
        return {str(d.attrs[ACCEL_DEVICE_ID]): str(d.hw_attrs[HW_ID]) for d in self.devices}

    def mig_parents(self) -> dict[str, str]:
        """MIG instance UUID (``MIG-...``) -> its parent GPU's UUID, for the opened GPUs in
        MIG mode (none without MIG; a GPU that cannot be asked is left out).

        The kubelet's PodResources API names a MIG instance, not its GPU; the node agent
        labels the parent GPU's series with the pods of its instances through this map.
        """
        nv = self._nvml
        out: dict[str, str] = {}
        count_fn = getattr(nv, "nvmlDeviceGetMaxMigDeviceCount", None)
        handle_fn = getattr(nv, "nvmlDeviceGetMigDeviceHandleByIndex", None)
        if count_fn is None or handle_fn is None:
            return out
        for dev in self.devices:
            if dev.lost:
                continue
            try:
                slots = int(count_fn(dev.handle))
            except Exception as exc:  # not MIG capable, or MIG disabled
                _log.debug("GPU %s: no MIG instances: %r", dev.attrs[ACCEL_DEVICE_ID], exc)
                continue
            for slot in range(slots):
                try:
                    uuid = nv.nvmlDeviceGetUUID(handle_fn(dev.handle, slot))
                except Exception:
                    continue  # an empty slot
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                out[uuid] = str(dev.hw_attrs[HW_ID])
        return out

    def device_pids(self) -> dict[str, list[int]]:
        """``accel.device.id`` -> the pids of the processes using each GPU (compute and
        graphics), as NVML lists them (host pids); a GPU it cannot ask is left out."""
        nv = self._nvml
        out: dict[str, list[int]] = {}
        for dev in self.devices:
            if dev.lost:
                continue
            pids: list[int] = []
            for getter in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                fn = getattr(nv, getter, None)
                if fn is None:
                    continue
                try:
                    pids += [int(p.pid) for p in fn(dev.handle)]
                except Exception as exc:
                    _log.debug("GPU %s: %s failed: %r", dev.attrs[ACCEL_DEVICE_ID], getter, exc)
            out[str(dev.attrs[ACCEL_DEVICE_ID])] = sorted(set(pids))
        return out

    def close(self) -> None:
        """Shut NVML down (once)."""
        if self._opened and self._nvml is not None:
            self._opened = False
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:
                _log.debug("nvmlShutdown failed: %r", exc)

    def describe(self) -> list[SeriesDescription]:
        dev = (ACCEL_DEVICE_ID, ACCEL_HOST_ID, ACCEL_DEVICE_MODEL, ACCEL_DEVICE_INDEX)
        hw = (*dev, HW_ID, HW_TYPE, HW_VENDOR, HW_MODEL)
        return [
            SeriesDescription(
                METRIC_HW_GPU_UTILIZATION, hw, "nvmlDeviceGetUtilizationRates().gpu / 100"
            ),
            SeriesDescription(METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, dev, "NVML_CLOCK_SM, MHz -> Hz"),
            SeriesDescription(
                METRIC_ACCEL_DEVICE_MEMORY_CLOCK_FREQUENCY, dev, "NVML_CLOCK_MEM, MHz -> Hz"
            ),
            SeriesDescription(METRIC_HW_POWER, hw, "nvmlDeviceGetPowerUsage, mW -> W"),
            SeriesDescription(METRIC_HW_ENERGY, hw, "nvmlDeviceGetTotalEnergyConsumption, mJ -> J"),
            SeriesDescription(METRIC_HW_TEMPERATURE, hw, "NVML_TEMPERATURE_GPU, Cel"),
            SeriesDescription(METRIC_HW_GPU_MEMORY_USAGE, hw, "nvmlDeviceGetMemoryInfo().used"),
            SeriesDescription(METRIC_HW_GPU_MEMORY_LIMIT, hw, "nvmlDeviceGetMemoryInfo().total"),
            SeriesDescription(
                METRIC_ACCEL_PCIE_THROUGHPUT, (*dev, NETWORK_IO_DIRECTION), "KB/s -> By/s"
            ),
            SeriesDescription(
                METRIC_ACCEL_PCIE_IO,
                (*dev, NETWORK_IO_DIRECTION),
                "NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES",
            ),
            SeriesDescription(
                METRIC_ACCEL_LINK_IO,
                (ACCEL_LINK_ID, *dev, NETWORK_IO_DIRECTION),
                "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}, KiB -> By",
            ),
            SeriesDescription(
                METRIC_HW_GPU_MEMORY_UTILIZATION, hw, "nvmlDeviceGetUtilizationRates().memory / 100"
            ),
            SeriesDescription(METRIC_HW_ERRORS, (*hw, ERROR_TYPE), "volatile ECC counts"),
            SeriesDescription(
                METRIC_HW_STATUS, (*hw, HW_STATE), "ok / degraded (uncorrected ECC) / failed (lost)"
            ),
            SeriesDescription(
                METRIC_ACCEL_DEVICE_THROTTLE_REASONS, dev, "clocks event reasons bitmask"
            ),
        ]

    # ---- sampling ----------------------------------------------------------------------
    def sample(self) -> list[Sample]:
        """Read every GPU that is not lost; a GPU lost now is marked and skipped."""
        out: list[Sample] = []
        nv = self._nvml
        lost_code = getattr(nv, "NVML_ERROR_GPU_IS_LOST", 15)
        for dev in self.devices:
            if dev.lost:
                out.extend(_status(dev, "failed", self._clock()))
                continue
            got: list[Sample] = []
            try:
                self._read_device(dev, got)
            except Exception as exc:
                if self._err_code(exc) == lost_code:
                    dev.lost = True
                    _log.warning(
                        "GPU %s is lost; its series are dropped, the others keep going",
                        dev.attrs[ACCEL_DEVICE_ID],
                    )
                    out.extend(_status(dev, "failed", self._clock()))
                    continue
                raise
            out.extend(got)
        return out

    def _try(self, dev: _Device, what: str, fn: Callable[[], Any]) -> Any:
        """Call an NVML getter; ``None`` (and remembered) when not supported."""
        if what in dev.unsupported:
            return None
        nv = self._nvml
        try:
            return fn()
        except Exception as exc:
            code = self._err_code(exc)
            if code == getattr(nv, "NVML_ERROR_GPU_IS_LOST", 15) or not isinstance(
                exc, nv.NVMLError
            ):
                raise
            if code in (
                getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3),
                getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
            ):
                dev.unsupported.add(what)
                _log.info("GPU %s: %s not supported", dev.attrs[ACCEL_DEVICE_ID], what)
            return None

    def _read_device(self, dev: _Device, out: list[Sample]) -> None:
        nv, h, a, hw = self._nvml, dev.handle, dev.attrs, dev.hw_attrs
        now = self._clock()

        def add(
            metric: str, attrs: Mapping[str, AttributeValue], value: float, ts: int = now
        ) -> None:
            out.append(Sample(metric, attrs, float(value), ts, CLOCK_HOST_REALTIME))

        util = self._try(dev, "utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            add(METRIC_HW_GPU_UTILIZATION, hw, util.gpu / 100.0)
            add(METRIC_HW_GPU_MEMORY_UTILIZATION, hw, util.memory / 100.0)
        sm = self._try(dev, "clock.sm", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        if sm is not None:
            add(METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, a, sm * 1e6)
        memclk = self._try(
            dev, "clock.mem", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        )
        if memclk is not None:
            add(METRIC_ACCEL_DEVICE_MEMORY_CLOCK_FREQUENCY, a, memclk * 1e6)
        power = self._try(dev, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
        if power is not None:
            add(METRIC_HW_POWER, hw, power / 1000.0)
        energy = self._try(dev, "energy", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h))
        if energy is not None:
            add(METRIC_HW_ENERGY, hw, energy / 1000.0)
        temp = self._try(
            dev, "temperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        )
        if temp is not None:
            add(METRIC_HW_TEMPERATURE, hw, temp)
        mem = self._try(dev, "memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            add(METRIC_HW_GPU_MEMORY_USAGE, hw, mem.used)
            add(METRIC_HW_GPU_MEMORY_LIMIT, hw, mem.total)
        for direction, counter in (
            ("transmit", "NVML_PCIE_UTIL_TX_BYTES"),
            ("receive", "NVML_PCIE_UTIL_RX_BYTES"),
        ):
            kbs = self._try(
                dev,
                f"pcie.{direction}",
                functools.partial(nv.nvmlDeviceGetPcieThroughput, h, getattr(nv, counter)),
            )
            if kbs is not None:
                add(
                    METRIC_ACCEL_PCIE_THROUGHPUT, {**a, NETWORK_IO_DIRECTION: direction}, kbs * _KIB
                )
        uncorrected = 0.0
        for etype, const in (
            ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
            ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
        ):
            n = self._try(
                dev,
                f"ecc.{etype}",
                functools.partial(
                    nv.nvmlDeviceGetTotalEccErrors, h, getattr(nv, const), nv.NVML_VOLATILE_ECC
                ),
            )
            if n is not None:
                add(METRIC_HW_ERRORS, {**hw, ERROR_TYPE: etype}, n)
                if etype == "uncorrected":
                    uncorrected = float(n)
        getter = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        reasons = self._try(dev, "throttle", lambda: getter(h))
        if reasons is not None:
            add(METRIC_ACCEL_DEVICE_THROTTLE_REASONS, a, reasons)
        out.extend(_status(dev, "degraded" if uncorrected > 0 else "ok", now))
        self._read_fields(dev, out, now)

    def _read_fields(self, dev: _Device, out: list[Sample], now: int) -> None:
        nv, h, a = self._nvml, dev.handle, dev.attrs
        if dev.nvlinks is None:
            res = self._try(
                dev,
                "fields.nvlink_count",
                lambda: nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT]),
            )
            ok = res is not None and res[0].nvmlReturn == 0
            dev.nvlinks = int(_field_value(res[0])) if ok else 0
        ids: list[tuple[int, int]] = [
            (nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
            (nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
        ]
        for link in range(dev.nvlinks):
            ids.append((nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link))
            ids.append((nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link))
        res = self._try(dev, "fields", lambda: nv.nvmlDeviceGetFieldValues(h, ids))
        if res is None:
            return
        tx_ids = (nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
        for fv in res:
            if fv.nvmlReturn != 0:
                continue
            ts = int(fv.timestamp) * 1000 if getattr(fv, "timestamp", 0) else now
            direction = "transmit" if fv.fieldId in tx_ids else "receive"
            value = _field_value(fv)
            if fv.fieldId in (
                nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
            ):
                out.append(
                    Sample(
                        METRIC_ACCEL_PCIE_IO,
                        {**a, NETWORK_IO_DIRECTION: direction},
                        value,
                        ts,
                        CLOCK_HOST_REALTIME,
                    )
                )
            else:
                link_attrs = {
                    **a,
                    ACCEL_LINK_ID: f"{a[ACCEL_DEVICE_ID]}-nvlink{fv.scopeId}",
                    NETWORK_IO_DIRECTION: direction,
                }
                out.append(
                    Sample(METRIC_ACCEL_LINK_IO, link_attrs, value * _KIB, ts, CLOCK_HOST_REALTIME)
                )


def _status(dev: _Device, state: str, now: int) -> list[Sample]:
    """``hw.status`` of a GPU: 1 for ``state``, 0 for the other :data:`GPU_STATES`."""
    return [
        Sample(
            METRIC_HW_STATUS,
            {**dev.hw_attrs, HW_STATE: s},
            1.0 if s == state else 0.0,
            now,
            CLOCK_HOST_REALTIME,
        )
        for s in GPU_STATES
    ]


def _field_value(fv: Any) -> float:
    """The number in an ``nvmlFieldValue_t`` according to its ``valueType``."""
    member = {
        0: "dVal",
        1: "uiVal",
        2: "ulVal",
        3: "ullVal",
        4: "sllVal",
        5: "siVal",
        6: "usVal",
    }.get(int(fv.valueType), "ullVal")
    return float(getattr(fv.value, member))
