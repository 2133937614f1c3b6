"""Collective-communication arithmetic: bus-bandwidth factors, ids and per-group sequences.

Pure functions (and one small thread-safe counter) shared by the framework-free
:func:`otel_ext.instrumentation.api.collective` and the ``torch.distributed`` wrappers.

Bandwidths follow the NCCL-tests convention: the *algorithm bandwidth* is the payload
bytes of this member's buffer divided by the duration; the *bus bandwidth* multiplies it by
a per-op factor so that it can be compared with the link's peak whatever the op and the
group size.

>>> bus_factor("all_reduce", 4)
1.5
>>> bandwidths("all_reduce", 1_000_000, 1_000_000, 4)
(1000000000.0, 1500000000.0)
>>> collective_id("tp0", 42)
'tp0:42'
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

__all__ = [
    "COLLECTIVE_DURATION_BOUNDS_S",
    "COLLECTIVE_OPS",
    "P2P_OPS",
    "SequenceCounter",
    "bandwidths",
    "bus_factor",
    "collective_id",
    "p2p_id",
]

#: Ops that every member of the group takes part in (they share the per-group sequence).
COLLECTIVE_OPS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_single",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "reduce",
        "barrier",
    }
)
#: Explicit bucket bounds (seconds) of ``accel.collective.duration`` and
#: ``accel.collective.arrival.lateness``: 1 µs to 10 s, three per decade (a small all-reduce
#: on NVLink takes microseconds; a straggler or a cross-host all-to-all, milliseconds to
#: seconds).
COLLECTIVE_DURATION_BOUNDS_S: tuple[float, ...] = (
    *(round(m * 10.0**e, 12) for e in range(-6, 1) for m in (1.0, 2.5, 5.0)),
    10.0,
)
#: Point-to-point ops (sequenced per ordered (source, destination) pair).
P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})

_TWO_N = frozenset({"all_reduce"})
#: the all-gather, reduce-scatter and all-to-all family
_N_MINUS_ONE_OVER_N = COLLECTIVE_OPS - {"all_reduce", "broadcast", "reduce", "barrier"}


def bus_factor(op: str, group_size: int) -> float:
    """The NCCL-tests bus-bandwidth correction factor of ``op`` on ``group_size`` ranks.

    ``all_reduce``: 2(n-1)/n; gathers, reduce-scatters and all-to-alls: (n-1)/n; broadcast,
    reduce, point-to-point and anything else: 1. A group of one moves nothing: 0 for the
    ops whose factor depends on n.

    >>> [bus_factor(op, 8) for op in ("all_reduce", "all_gather", "broadcast", "send")]
    [1.75, 0.875, 1.0, 1.0]
    """
    n = max(int(group_size), 1)
    if op in _TWO_N:
        return 2.0 * (n - 1) / n
    if op in _N_MINUS_ONE_OVER_N:
        return (n - 1) / n
    return 1.0


def bandwidths(op: str, nbytes: int, duration_ns: int, group_size: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in bytes per second; ``(0.0, 0.0)`` when the duration is not positive.

    >>> bandwidths("all_gather", 4096, 0, 4)
    (0.0, 0.0)
    """
    if duration_ns <= 0:
        return 0.0, 0.0
    algbw = nbytes * 1e9 / duration_ns
    return algbw, algbw * bus_factor(op, group_size)


def collective_id(group: str, seq: int) -> str:
    """The deterministic id of collective number ``seq`` of ``group`` (the same on every member)."""
    return f"{group}:{seq}"


def p2p_id(group: str, src: int, dst: int, seq: int) -> str:
    """The id of the ``seq``-th transfer from group rank ``src`` to ``dst`` (same on both ends).

    >>> p2p_id("default_pg", 0, 3, 7)
    'default_pg:0->3:7'
    """
    return f"{group}:{src}->{dst}:{seq}"


class SequenceCounter:
    """Per-key sequence numbers, starting at 0; :meth:`next` is thread-safe.

    >>> seqs = SequenceCounter()
    >>> [seqs.next("tp0"), seqs.next("tp0"), seqs.next("dp0")]
    [0, 1, 0]
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[Hashable, int] = {}

    def next(self, key: Hashable) -> int:
        """Return the next sequence number of ``key``."""
        with self._lock:
            value = self._next.get(key, 0)
            self._next[key] = value + 1
            return value

    def peek(self, key: Hashable) -> int:
        """The number :meth:`next` would return for ``key``, without taking it."""
        with self._lock:
            return self._next.get(key, 0)

    def reset(self) -> None:
        """Start every key again at 0."""
        with self._lock:
            self._next.clear()
