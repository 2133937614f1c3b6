"""InfiniBand and RoCE port counters from sysfs.

Reads ``ROOT/<hca>/ports/<port>/counters/*`` (``ROOT`` = ``/sys/class/infiniband`` by
default, injectable; the tests read a recorded tree). ``port_xmit_data`` and
``port_rcv_data`` count 4-byte words (the InfiniBand PMA convention): they are multiplied
by 4 into ``hw.network.io`` bytes per direction. Packets go to ``hw.network.packets``, the
error counters to ``hw.errors`` with ``error.type`` = the counter file name.

A port is named ``HOST/<hca>:<port>`` (``accel.link.id``, as ``ibstat`` writes it). A port
whose folder disappears (hot-unplug, driver reload) drops its series; the others go on.

>>> from pathlib import Path
>>> root = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs" / "class" / "infiniband"
>>> src = InfinibandSource(root=root, host="node-a", clock=lambda: 1)
>>> src.open()
>>> [p[:2] for p in src.ports()]
[('mlx5_0', '1'), ('mlx5_1', '1')]
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from otel_ext import config
from otel_ext._drops import LEDGER
from otel_ext.counters._source import CLOCK_HOST_REALTIME, BaseSource, Sample, SeriesDescription
from otel_ext.errors import SourceUnavailableError
from otel_ext.semconv.attributes import (
    ACCEL_HOST_ID,
    ACCEL_LINK_ID,
    ERROR_TYPE,
    NETWORK_IO_DIRECTION,
)
from otel_ext.semconv.metrics import (
    METRIC_HW_ERRORS,
    METRIC_HW_NETWORK_IO,
    METRIC_HW_NETWORK_PACKETS,
)

__all__ = ["InfinibandSource"]

_log = logging.getLogger(__name__)
#: counter file -> (metric, direction or error type, multiplier)
_COUNTERS: dict[str, tuple[str, str, int]] = {
    "port_xmit_data": (METRIC_HW_NETWORK_IO, "transmit", 4),
    "port_rcv_data": (METRIC_HW_NETWORK_IO, "receive", 4),
    "port_xmit_packets": (METRIC_HW_NETWORK_PACKETS, "transmit", 1),
    "port_rcv_packets": (METRIC_HW_NETWORK_PACKETS, "receive", 1),
}
_ERRORS = (
    "symbol_error",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "link_error_recovery",
    "link_downed",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
)


class InfinibandSource(BaseSource):
    """Port counters of the host's InfiniBand / RoCE adapters.

    Args:
        root: the ``/sys/class/infiniband`` folder (injectable).
        host: ``accel.host.id`` (default: the host name).
        clock: timestamps in nanoseconds.
    """

    name = "infiniband"

    def __init__(
        self,
        *,
        root: str | os.PathLike[str] = "/sys/class/infiniband",
        host: str | None = None,
        clock: Callable[[], int] = time.time_ns,
    ):
        self.root = Path(root)
        self.host = config.host_id(host)
        self._clock = clock

    def ports(self) -> list[tuple[str, str, Path]]:
        """``(hca, port, counters folder)`` of every port present now, sorted."""
        out: list[tuple[str, str, Path]] = []
        if not self.root.is_dir():
            return out
        for hca in sorted(p for p in self.root.iterdir() if (p / "ports").is_dir()):
            for port in sorted((hca / "ports").iterdir(), key=lambda p: p.name):
                counters = port / "counters"
                if counters.is_dir():
                    out.append((hca.name, port.name, counters))
        return out

    def open(self) -> None:
        """Check that some port has counters.

        Raises:
            SourceUnavailableError: no ``ROOT/*/ports/*/counters`` folder.
        """
        if not self.ports():
            raise SourceUnavailableError(f"no InfiniBand/RoCE port counters under {self.root}")

    def describe(self) -> list[SeriesDescription]:
        link = (ACCEL_LINK_ID, ACCEL_HOST_ID)
        return [
            SeriesDescription(
                METRIC_HW_NETWORK_IO, (*link, NETWORK_IO_DIRECTION), "port_{xmit,rcv}_data x 4"
            ),
            SeriesDescription(METRIC_HW_NETWORK_PACKETS, (*link, NETWORK_IO_DIRECTION)),
            SeriesDescription(METRIC_HW_ERRORS, (*link, ERROR_TYPE)),
        ]

    def sample(self) -> list[Sample]:
        out: list[Sample] = []
        for hca, port, folder in self.ports():
            now = self._clock()
            base = {ACCEL_LINK_ID: f"{self.host}/{hca}:{port}", ACCEL_HOST_ID: self.host}
            for fname, (metric, direction, mult) in _COUNTERS.items():
                v = self._read(folder / fname)
                if v is not None:
                    out.append(
                        Sample(
                            metric,
                            {**base, NETWORK_IO_DIRECTION: direction},
                            float(v * mult),
                            now,
                            CLOCK_HOST_REALTIME,
                        )
                    )
            for fname in _ERRORS:
                v = self._read(folder / fname)
                if v is not None:
                    out.append(
                        Sample(
                            METRIC_HW_ERRORS,
                            {**base, ERROR_TYPE: fname},
                            float(v),
                            now,
                            CLOCK_HOST_REALTIME,
                        )
                    )
        return out

    def _read(self, path: Path) -> int | None:
        try:
            return int(path.read_text().split()[0])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, IndexError) as exc:
            LEDGER.drop(
                "counters",
                "infiniband_read_failed",
                message="cannot read %s: %s",
                args=(path, exc),
                logger=_log,
                once_per=(id(self), str(path)),
            )
            return None
