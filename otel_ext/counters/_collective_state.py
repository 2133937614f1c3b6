"""The node agent's source of collectives in flight: ``accel.collective.pending.duration``.

:class:`CollectiveStateSource` reads the collective-state records that instrumented
workloads on this host publish beside their active-span records
(:mod:`otel_ext.instrumentation.collective_state_record`) and yields, per process and group,

* ``accel.collective.last_seq`` (gauge): the last sequence number completed on that member,
  with ``accel.collective.group``, ``accel.rank``, ``accel.device.id``, ``accel.host.id``;
* ``accel.collective.pending.duration`` (gauge, s): how long the oldest collective in flight
  has waited, with its ``accel.collective.op`` and ``accel.collective.seq`` too, once it has
  waited ``min_pending_s`` (default 1 s: the collectives of a healthy job, done in
  milliseconds, make no short-lived series).

A rank that stopped before a collective has a ``last_seq`` and no pending series while the
others wait at a higher sequence number: what the ``AccelCollectiveHang`` rule looks for.
Records of processes that are gone (killed) are skipped, and removed when ``reap``. Sampling
never raises.

>>> import tempfile
>>> from otel_ext.instrumentation.collective_state_record import (
...     CollectiveStateRecord, GroupState)
>>> folder = tempfile.mkdtemp()
>>> rec = CollectiveStateRecord(folder, host="h", rank=2)
>>> _ = rec.publish([GroupState("tp0", 4, 2, "h/gpu2", "all_reduce", 7, 64, 0, 6)])
>>> src = CollectiveStateSource([folder], clock=lambda: 3_000_000_000)
>>> sorted((s.metric, s.value) for s in src.sample())
[('accel.collective.last_seq', 6), ('accel.collective.pending.duration', 3.0)]
>>> rec.close()
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from otel_ext.counters._source import BaseSource, Sample, SeriesDescription
from otel_ext.instrumentation.collective_state_record import read_states
from otel_ext.semconv.attributes import (
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_OP,
    ACCEL_COLLECTIVE_SEQ,
    ACCEL_DEVICE_ID,
    ACCEL_HOST_ID,
    ACCEL_RANK,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_COLLECTIVE_LAST_SEQ,
    METRIC_ACCEL_COLLECTIVE_PENDING_DURATION,
)

__all__ = ["CollectiveStateSource"]


class CollectiveStateSource(BaseSource):
    """Collectives in flight on this host, from the workloads' records (see the module doc).

    Args:
        directories: the records' folders (the agent's active-span folders).
        min_pending_s: a pending collective is exported once it has waited this long.
        clock: real-time clock in ns.
        reap: remove the records of processes that are gone.
        discover: called each round, returns further folders to read.
    """

    name = "collectives"

    def __init__(
        self,
        directories: Iterable[str | os.PathLike[str]],
        *,
        min_pending_s: float = 1.0,
        clock: Callable[[], int] = time.time_ns,
        reap: bool = True,
        discover: Callable[[], Iterable[str | os.PathLike[str]]] | None = None,
    ):
        self.directories = [str(d) for d in directories]
        self.min_pending_ns = int(min_pending_s * 1e9)
        self._clock = clock
        self._reap = reap
        self._discover = discover

    def describe(self) -> list[SeriesDescription]:
        """The two series families."""
        common = (ACCEL_COLLECTIVE_GROUP, ACCEL_RANK, ACCEL_DEVICE_ID, ACCEL_HOST_ID)
        return [
            SeriesDescription(
                METRIC_ACCEL_COLLECTIVE_PENDING_DURATION,
                (ACCEL_COLLECTIVE_OP, ACCEL_COLLECTIVE_SEQ, *common),
            ),
            SeriesDescription(METRIC_ACCEL_COLLECTIVE_LAST_SEQ, common),
        ]

    def sample(self) -> list[Sample]:
        """One reading of every live process's groups."""
        folders = list(self.directories)
        if self._discover is not None:
            try:
                folders += [str(d) for d in self._discover()]
            except Exception:
                pass
        now = self._clock()
        out: list[Sample] = []
        for state in read_states(folders, reap=self._reap):
            rank = -1 if state.rank is None else state.rank
            for g in state.groups:
                attrs: dict[str, str | int] = {
                    ACCEL_COLLECTIVE_GROUP: g.group,
                    ACCEL_RANK: rank,
                    ACCEL_DEVICE_ID: g.device or "",
                    ACCEL_HOST_ID: state.host,
                }
                out.append(Sample(METRIC_ACCEL_COLLECTIVE_LAST_SEQ, attrs, g.last_seq, now))
                if g.seq is None or g.since_ns is None or g.op is None:
                    continue
                waited = now - g.since_ns
                if waited < self.min_pending_ns:
                    continue
                pending = {**attrs, ACCEL_COLLECTIVE_OP: g.op, ACCEL_COLLECTIVE_SEQ: g.seq}
                out.append(
                    Sample(METRIC_ACCEL_COLLECTIVE_PENDING_DURATION, pending, waited / 1e9, now)
                )
        return out
