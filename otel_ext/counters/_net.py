"""Ethernet and RoCE network interfaces from sysfs (``/sys/class/net``).

Reads ``ROOT/<interface>/statistics/*``, ``speed``, ``operstate`` and ``carrier`` (``ROOT`` =
``/sys/class/net`` by default, injectable; the tests read a recorded tree) as the
OpenTelemetry hardware network metrics:

* ``hw.network.io`` (bytes) and ``hw.network.packets``, per ``network.io.direction``, from
  ``{rx,tx}_bytes`` and ``{rx,tx}_packets``;
* ``hw.errors`` with ``error.type`` = the statistics file (``rx_errors``, ``tx_errors``,
  ``rx_dropped``, ``tx_dropped``, ``rx_missed_errors``) and its direction. Only the kernel's
  totals are read: the detailed error counters (``rx_crc_errors``...) are parts of
  ``rx_errors`` and would count twice in a sum; ``rx_missed_errors`` (the device ran out of
  buffers) is counted in neither ``rx_errors`` nor ``rx_dropped``;
* ``hw.network.bandwidth.limit``: ``speed`` (Mbit/s) as bytes/s, per direction of a
  full-duplex link; not emitted while the kernel does not know it (``-1``, or ``EINVAL`` on a
  link that is down);
* ``hw.network.up``: 1 when ``operstate`` is ``up``, or ``unknown`` with a carrier (drivers
  that do not report an operational state: tun, some virtual devices); else 0.

Every series names the interface with ``accel.link.id`` = ``HOST/<interface>`` (as the
InfiniBand source names ``HOST/<hca>:<port>``), ``accel.host.id``,
``network.interface.name`` and ``hw.id`` (the interface name, unique on its host).

**Which interfaces.** The loopback is never read. *Virtual* interfaces, those without a
``device`` entry (the kernel's ``/sys/devices/virtual/net``: veth pairs, bridges,
``docker0``, bonds, VLANs, tun/tap), are skipped by default: their traffic is counted again on
the physical port it leaves through, and a container host has hundreds of them. A host whose
inter-host link *is* virtual (network namespaces joined by a veth pair, as in the test
harness) reads them with ``include_virtual=True`` (``--net-virtual``). Interfaces named in
``interfaces`` (exact names or shell patterns) are read whatever they are, the loopback
included, and only those. A RoCE adapter shows here as its Ethernet interface (the kernel
stack's traffic) and in :class:`~otel_ext.counters.InfinibandSource` (its RDMA port
counters, where RoCE traffic is counted).

Counters are 64-bit; an interface that is deleted and made again (a veth pair recreated)
starts from zero, which the bridge counts as a reset, never as a negative rate. An interface
that disappears drops its series; the others go on.

>>> from pathlib import Path
>>> root = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs" / "class" / "net"
>>> NetDevSource(root=root, host="node-a").interface_names()
['eno1', 'ens1f0np0', 'ens1f1np1']
>>> NetDevSource(root=root, host="node-a", include_virtual=True).interface_names()
['docker0', 'eno1', 'ens1f0np0', 'ens1f1np1', 'tun0', 'veth0a']
"""

from __future__ import annotations

import errno
import fnmatch
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from otel_ext import config
from otel_ext.counters._source import CLOCK_HOST_REALTIME, BaseSource, Sample, SeriesDescription
from otel_ext.errors import SourceUnavailableError
from otel_ext.semconv.attributes import (
    ACCEL_HOST_ID,
    ACCEL_LINK_ID,
    ERROR_TYPE,
    HW_ID,
    NETWORK_INTERFACE_NAME,
    NETWORK_IO_DIRECTION,
)
from otel_ext.semconv.metrics import (
    METRIC_HW_ERRORS,
    METRIC_HW_NETWORK_BANDWIDTH_LIMIT,
    METRIC_HW_NETWORK_IO,
    METRIC_HW_NETWORK_PACKETS,
    METRIC_HW_NETWORK_UP,
)

__all__ = ["NET_ERROR_COUNTERS", "NetDevSource", "link_is_up"]

_log = logging.getLogger(__name__)

#: statistics file -> (metric, direction)
_TRAFFIC: dict[str, tuple[str, str]] = {
    "rx_bytes": (METRIC_HW_NETWORK_IO, "receive"),
    "tx_bytes": (METRIC_HW_NETWORK_IO, "transmit"),
    "rx_packets": (METRIC_HW_NETWORK_PACKETS, "receive"),
    "tx_packets": (METRIC_HW_NETWORK_PACKETS, "transmit"),
}
#: statistics file -> direction, read into ``hw.errors`` with ``error.type`` = the file name
NET_ERROR_COUNTERS: dict[str, str] = {
    "rx_errors": "receive",
    "tx_errors": "transmit",
    "rx_dropped": "receive",
    "tx_dropped": "transmit",
    "rx_missed_errors": "receive",
}
_ARPHRD_LOOPBACK = 772
#: ``speed`` is in Mbit/s: bytes per second per Mbit/s
_BYTES_PER_MBIT = 1_000_000 // 8


def link_is_up(operstate: str | None, carrier: str | None) -> bool:
    """Whether a link is up, from its ``operstate`` and ``carrier`` files' text.

    >>> link_is_up("up", None), link_is_up("unknown", "1"), link_is_up("unknown", None)
    (True, True, False)
    >>> link_is_up("dormant", "1"), link_is_up("lowerlayerdown", "0")
    (False, False)
    """
    state = (operstate or "").strip()
    if state == "up":
        return True
    return state == "unknown" and (carrier or "").strip() == "1"


class NetDevSource(BaseSource):
    """Traffic, errors, drops, speed and state of the host's network interfaces.

    Args:
        root: the ``/sys/class/net`` folder (injectable).
        host: ``accel.host.id`` (default: the host name).
        include_virtual: also read virtual interfaces (veth, bridges...; see the module).
        interfaces: read only these interfaces (names or shell patterns such as
            ``"ens*"``), virtual or loopback included; ``None``: every physical one.
        clock: timestamps in nanoseconds.
    """

    name = "net"

    def __init__(
        self,
        *,
        root: str | os.PathLike[str] = "/sys/class/net",
        host: str | None = None,
        include_virtual: bool = False,
        interfaces: Iterable[str] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ):
        self.root = Path(root)
        self.host = config.host_id(host)
        self.include_virtual = include_virtual
        self.patterns = tuple(interfaces) if interfaces is not None else None
        self._clock = clock
        self._warned: set[str] = set()

    # ---- which interfaces ------------------------------------------------------------------
    def _present(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        try:
            return sorted(
                (p for p in self.root.iterdir() if (p / "statistics").is_dir()),
                key=lambda p: p.name,
            )
        except OSError:
            return []

    def _chosen(self, folder: Path) -> bool:
        if self.patterns is not None:
            return any(fnmatch.fnmatchcase(folder.name, pat) for pat in self.patterns)
        if self._read_int(folder / "type", quiet=True) == _ARPHRD_LOOPBACK:
            return False
        return self.include_virtual or self.is_physical(folder)

    @staticmethod
    def is_physical(folder: Path) -> bool:
        """An interface backed by a device (a ``device`` entry), not a virtual one."""
        return os.path.lexists(folder / "device")

    def interfaces(self) -> list[tuple[str, Path]]:
        """``(interface, folder)`` of every interface read now, sorted by name."""
        return [(p.name, p) for p in self._present() if self._chosen(p)]

    def interface_names(self) -> list[str]:
        """The names of :meth:`interfaces`."""
        return [name for name, _ in self.interfaces()]

    def open(self) -> None:
        """Check that some interface is to be read.

        Raises:
            SourceUnavailableError: no interface under ``root`` passes the selection; the
                message names those that were left out and the option that reads them.
        """
        if self.interfaces():
            return
        present = [p.name for p in self._present()]
        if self.patterns is not None:
            raise SourceUnavailableError(
                f"no network interface under {self.root} matches {', '.join(self.patterns)} "
                f"(present: {', '.join(present) or 'none'})"
            )
        skipped = [n for n in present if n != "lo"]
        hint = f" (virtual ones: {', '.join(skipped)}; --net-virtual reads them)" if skipped else ""
        raise SourceUnavailableError(f"no physical network interface under {self.root}{hint}")

    def describe(self) -> list[SeriesDescription]:
        port = (ACCEL_LINK_ID, ACCEL_HOST_ID, NETWORK_INTERFACE_NAME, HW_ID)
        return [
            SeriesDescription(METRIC_HW_NETWORK_IO, (*port, NETWORK_IO_DIRECTION), "{rx,tx}_bytes"),
            SeriesDescription(
                METRIC_HW_NETWORK_PACKETS, (*port, NETWORK_IO_DIRECTION), "{rx,tx}_packets"
            ),
            SeriesDescription(
                METRIC_HW_ERRORS,
                (*port, ERROR_TYPE, NETWORK_IO_DIRECTION),
                "{rx,tx}_{errors,dropped}, rx_missed_errors",
            ),
            SeriesDescription(METRIC_HW_NETWORK_BANDWIDTH_LIMIT, port, "speed (Mbit/s) / 8"),
            SeriesDescription(METRIC_HW_NETWORK_UP, port, "operstate, carrier"),
        ]

    # ---- reading ---------------------------------------------------------------------------
    def sample(self) -> list[Sample]:
        out: list[Sample] = []
        for iface, folder in self.interfaces():
            now = self._clock()
            base = {
                ACCEL_LINK_ID: f"{self.host}/{iface}",
                ACCEL_HOST_ID: self.host,
                NETWORK_INTERFACE_NAME: iface,
                HW_ID: iface,
            }
            stats = folder / "statistics"
            for fname, (metric, direction) in _TRAFFIC.items():
                v = self._read_int(stats / fname)
                if v is not None:
                    out.append(
                        Sample(
                            metric,
                            {**base, NETWORK_IO_DIRECTION: direction},
                            float(v),
                            now,
                            CLOCK_HOST_REALTIME,
                        )
                    )
            for fname, direction in NET_ERROR_COUNTERS.items():
                v = self._read_int(stats / fname)
                if v is not None:
                    attrs = {**base, ERROR_TYPE: fname, NETWORK_IO_DIRECTION: direction}
                    out.append(Sample(METRIC_HW_ERRORS, attrs, float(v), now, CLOCK_HOST_REALTIME))
            speed = self._read_int(folder / "speed")
            if speed is not None and speed > 0:
                out.append(
                    Sample(
                        METRIC_HW_NETWORK_BANDWIDTH_LIMIT,
                        base,
                        float(speed * _BYTES_PER_MBIT),
                        now,
                        CLOCK_HOST_REALTIME,
                    )
                )
            state = self._read_text(folder / "operstate")
            if state is not None:
                carrier = self._read_text(folder / "carrier", quiet=True)
                up = link_is_up(state, carrier)
                out.append(
                    Sample(METRIC_HW_NETWORK_UP, base, 1.0 if up else 0.0, now, CLOCK_HOST_REALTIME)
                )
        return out

    def _read_text(self, path: Path, *, quiet: bool = False) -> str | None:
        """A file's text; None when absent, or unreadable (``EINVAL``: the kernel does not
        know the value now, as ``speed`` and ``carrier`` of a link that is down). Other
        failures are logged once per file unless ``quiet``."""
        try:
            return path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if not quiet and exc.errno != errno.EINVAL:
                self._warn(path, exc)
            return None

    def _read_int(self, path: Path, *, quiet: bool = False) -> int | None:
        text = self._read_text(path, quiet=quiet)
        if text is None:
            return None
        try:
            return int(text.split()[0])
        except (ValueError, IndexError) as exc:
            if not quiet:
                self._warn(path, exc)
            return None

    def _warn(self, path: Path, exc: Exception) -> None:
        key = str(path)
        if key not in self._warned:
            self._warned.add(key)
            _log.warning("cannot read %s: %s", path, exc)
