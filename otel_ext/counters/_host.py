"""Host CPU and memory, and the workload process's CPU time, from ``/proc``.

Reads ``PROC/stat`` (the aggregate ``cpu`` line: time per mode in clock ticks),
``PROC/meminfo`` and, for a workload pid, ``PROC/PID/stat`` (``utime``, ``stime``). The
``/proc`` root is injectable, and the tests read a tree recorded from a real machine.

Series: ``system.cpu.time`` per ``cpu.mode`` (seconds, counter), ``system.cpu.utilization``
(busy fraction between two samples), ``system.memory.limit``, ``system.memory.usage`` per
``system.memory.state`` (``used``, ``free``, ``buffers``, ``cached``), and
``process.cpu.time`` per ``cpu.mode`` (``user``, ``system``) with ``process.pid``. A
workload that exits: its series go away, the host series go on.

>>> from pathlib import Path
>>> fixtures = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "proc" / "t0"
>>> src = HostSource(proc_root=fixtures, host="node-a", clock=lambda: 1)
>>> src.open()
>>> sorted({s.metric for s in src.sample()})
['system.cpu.time', 'system.memory.limit', 'system.memory.usage']
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from otel_ext import config
from otel_ext._drops import LEDGER
from otel_ext.counters._source import (
    CLOCK_HOST_REALTIME,
    AttributeValue,
    BaseSource,
    Sample,
    SeriesDescription,
)
from otel_ext.errors import SourceUnavailableError
from otel_ext.semconv.attributes import (
    ACCEL_HOST_ID,
    CPU_MODE,
    PROCESS_PID,
    SYSTEM_MEMORY_STATE,
)
from otel_ext.semconv.metrics import (
    METRIC_PROCESS_CPU_TIME,
    METRIC_SYSTEM_CPU_TIME,
    METRIC_SYSTEM_CPU_UTILIZATION,
    METRIC_SYSTEM_MEMORY_LIMIT,
    METRIC_SYSTEM_MEMORY_USAGE,
)

__all__ = ["HostSource", "parse_meminfo", "parse_pid_stat", "parse_proc_stat"]

_log = logging.getLogger(__name__)
_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE_MODES = ("idle", "iowait")


def parse_proc_stat(text: str) -> dict[str, int]:
    """Ticks per CPU mode from the aggregate ``cpu`` line of ``/proc/stat``.

    >>> parse_proc_stat("cpu  10 0 5 100 1 0 0 0 0 0\\ncpu0 1 2 3 4\\n")["idle"]
    100
    """
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = line.split()[1:]
            return {m: int(v) for m, v in zip(_CPU_MODES, fields)}
    raise ValueError("no aggregate 'cpu' line")


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as bytes per key.

    >>> parse_meminfo("MemTotal:  1000 kB\\nHugePages_Total: 0\\n")
    {'MemTotal': 1024000, 'HugePages_Total': 0}
    """
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_pid_stat(text: str) -> tuple[int, int]:
    """``(utime, stime)`` in ticks from ``/proc/PID/stat`` (the name may hold spaces).

    >>> parse_pid_stat("42 (a b) S 1 42 42 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 1 0")
    (7, 3)
    """
    rest = text[text.rindex(")") + 2 :].split()
    # fields after the name start at field 3 (state); utime is field 14, stime 15
    return int(rest[11]), int(rest[12])


class HostSource(BaseSource):
    """Host CPU, memory and workload-process CPU from ``/proc``.

    Args:
        proc_root: the ``/proc`` folder (injectable for tests).
        pid: the workload process to follow (none by default).
        host: ``accel.host.id`` (default: the host name).
        ticks_per_second: ``USER_HZ`` (default ``os.sysconf("SC_CLK_TCK")``).
        clock: timestamps in nanoseconds.
    """

    name = "host"

    def __init__(
        self,
        *,
        proc_root: str | os.PathLike[str] = "/proc",
        pid: int | None = None,
        host: str | None = None,
        ticks_per_second: int | None = None,
        clock: Callable[[], int] = time.time_ns,
    ):
        self.root = Path(proc_root)
        self.pid = pid
        self.host = config.host_id(host)
        self.hz = ticks_per_second or int(os.sysconf("SC_CLK_TCK"))
        self._clock = clock
        self._prev: dict[str, int] | None = None

    def open(self) -> None:
        """Check that ``/proc`` is readable.

        Raises:
            SourceUnavailableError: ``stat`` or ``meminfo`` missing or unreadable.
        """
        for name in ("stat", "meminfo"):
            if not (self.root / name).is_file():
                raise SourceUnavailableError(f"{self.root / name} is not readable (not Linux?)")

    def describe(self) -> list[SeriesDescription]:
        h = (ACCEL_HOST_ID,)
        return [
            SeriesDescription(METRIC_SYSTEM_CPU_TIME, (*h, CPU_MODE)),
            SeriesDescription(METRIC_SYSTEM_CPU_UTILIZATION, h),
            SeriesDescription(METRIC_SYSTEM_MEMORY_LIMIT, h),
            SeriesDescription(METRIC_SYSTEM_MEMORY_USAGE, (*h, SYSTEM_MEMORY_STATE)),
            SeriesDescription(METRIC_PROCESS_CPU_TIME, (*h, CPU_MODE, PROCESS_PID)),
        ]

    def sample(self) -> list[Sample]:
        now = self._clock()
        host: dict[str, AttributeValue] = {ACCEL_HOST_ID: self.host}
        out: list[Sample] = []
        ticks = parse_proc_stat((self.root / "stat").read_text())
        for mode, t in ticks.items():
            out.append(
                Sample(
                    METRIC_SYSTEM_CPU_TIME,
                    {**host, CPU_MODE: mode},
                    t / self.hz,
                    now,
                    CLOCK_HOST_REALTIME,
                )
            )
        if self._prev is not None:
            total = sum(ticks.values()) - sum(self._prev.values())
            idle = sum(ticks[m] - self._prev.get(m, 0) for m in _IDLE_MODES if m in ticks)
            if total > 0:
                busy = min(1.0, max(0.0, 1.0 - idle / total))
                out.append(
                    Sample(METRIC_SYSTEM_CPU_UTILIZATION, host, busy, now, CLOCK_HOST_REALTIME)
                )
        self._prev = ticks
        mem = parse_meminfo((self.root / "meminfo").read_text())
        total_b = mem.get("MemTotal", 0)
        free, buffers = mem.get("MemFree", 0), mem.get("Buffers", 0)
        cached = mem.get("Cached", 0) + mem.get("SReclaimable", 0)
        out.append(
            Sample(METRIC_SYSTEM_MEMORY_LIMIT, host, float(total_b), now, CLOCK_HOST_REALTIME)
        )
        for state, value in (
            ("used", max(0, total_b - free - buffers - cached)),
            ("free", free),
            ("buffers", buffers),
            ("cached", cached),
        ):
            out.append(
                Sample(
                    METRIC_SYSTEM_MEMORY_USAGE,
                    {**host, SYSTEM_MEMORY_STATE: state},
                    float(value),
                    now,
                    CLOCK_HOST_REALTIME,
                )
            )
        if self.pid is not None:
            try:
                utime, stime = parse_pid_stat((self.root / str(self.pid) / "stat").read_text())
            except (OSError, ValueError, IndexError) as exc:
                LEDGER.drop(
                    "counters",
                    "workload_pid_unreadable",
                    message="workload pid %s cannot be read (exited?): %s",
                    args=(self.pid, exc),
                    logger=_log,
                    once_per=self,
                )
            else:
                pa: dict[str, AttributeValue] = {**host, PROCESS_PID: self.pid}
                out.append(
                    Sample(
                        METRIC_PROCESS_CPU_TIME,
                        {**pa, CPU_MODE: "user"},
                        utime / self.hz,
                        now,
                        CLOCK_HOST_REALTIME,
                    )
                )
                out.append(
                    Sample(
                        METRIC_PROCESS_CPU_TIME,
                        {**pa, CPU_MODE: "system"},
                        stime / self.hz,
                        now,
                        CLOCK_HOST_REALTIME,
                    )
                )
        return out
