"""Device timing of collectives: the provider interface, and the CUDA provider.

On NCCL a collective's ``Work`` (and a synchronous call) completes when the collective is
*enqueued* on its stream, not when it ran; host timestamps then measure launch latency. A
:class:`CollectiveTimer` gives a collective its device start and end instead. It is
injected into :class:`~otel_ext.instrumentation.torch.TorchDistributedInstrumentor`
(``collective_timer=``), so the logic is tested with a fake provider without a GPU, and the
real one runs where there is one. Three calls:

* :meth:`CollectiveTimer.begin` (workload thread, before the collective is issued): a token
  for a tensor this provider times, else ``None`` (the host path is used);
* :meth:`CollectiveTimer.end` (workload thread, after the call returned): a handle built
  from the token and the call's ``Work``;
* :meth:`CollectiveTimer.resolve` (background thread): the :class:`DeviceTiming`, or
  ``None`` while the collective has not completed (the caller asks again later).

:class:`CudaCollectiveTimer` uses PyTorch's own per-``Work`` timing (``ProcessGroup.
_enable_collectives_timing()``: ``ProcessGroupNCCL`` records CUDA events around the
collective on its NCCL stream, and ``Work._get_duration()`` returns their elapsed time) and
maps it onto the host timeline by bracketing the completion: the background thread polls
``Work.is_completed()`` (which queries the end event); completion happened after the last
poll that said no and before the one that said yes. The span's end is the middle of that
bracket, its start the end minus the device duration, and ``accel.clock.uncertainty_ns``
is half the bracket. Without per-``Work`` timing the start falls back to an event recorded
on the issuing stream just before the call (the collective's stream waits on it, so it is a
lower bound), with the uncertainty widened accordingly.

>>> t = DeviceTiming(start_ns=100, end_ns=250, uncertainty_ns=10.0, domain="h/cuda:0")
>>> t.duration_ns
150
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["CollectiveTimer", "CudaCollectiveTimer", "DeviceTiming"]


@dataclass(frozen=True, slots=True)
class DeviceTiming:
    """When a collective ran on its device, on the host timeline (ns since the epoch).

    Attributes:
        start_ns: device start, mapped to host time.
        end_ns: device end, mapped to host time.
        uncertainty_ns: bound on the error of ``start_ns`` and ``end_ns``.
        domain: the clock the times came from (``accel.clock.domain``).
        raw_start_ticks: the start as the device clock read it (0 when only a duration).
        raw_end_ticks: the end as the device clock read it (the duration in ns when only a
            duration was read).
    """

    start_ns: int
    end_ns: int
    uncertainty_ns: float
    domain: str
    raw_start_ticks: int = 0
    raw_end_ticks: int = 0

    @property
    def duration_ns(self) -> int:
        """``end_ns - start_ns``."""
        return self.end_ns - self.start_ns


class CollectiveTimer(Protocol):
    """Gives collectives on some devices their device start and end (see the module doc)."""

    def begin(self, tensor: Any) -> Any | None:
        """Workload thread, before the call: a token when this provider times ``tensor``."""

    def end(self, token: Any, work: Any) -> Any:
        """Workload thread, after the call: a handle from ``token`` and the call's ``Work``."""

    def resolve(self, handle: Any) -> DeviceTiming | None:
        """Background thread: the device timing, or ``None`` while not yet complete."""


class CudaCollectiveTimer:
    """:class:`CollectiveTimer` for CUDA (and ROCm) tensors, from PyTorch's per-work timing.

    Args:
        device_name: maps a ``torch.device`` to the ``accel.clock.domain`` prefix (default:
            ``str(device)``).

    Needs a GPU; on a machine without one :meth:`begin` returns ``None`` for every tensor.
    """

    def __init__(self, *, device_name: Any = None):
        self._device_name = device_name or str
        self._timed_groups: set[int] = set()

    def enable_for(self, process_group: Any) -> None:
        """Ask ``process_group`` to time its collectives (once per group; never raises)."""
        key = id(process_group)
        if key in self._timed_groups:
            return
        self._timed_groups.add(key)
        try:
            process_group._enable_collectives_timing()
        except Exception:  # a backend without timing: the fallback start is used
            pass

    def begin(self, tensor: Any) -> Any | None:
        """Record an anchor event on the current stream of ``tensor``'s device."""
        if getattr(tensor, "is_cuda", False) is not True:
            return None
        import torch

        event = torch.cuda.Event(enable_timing=True)
        host_ns = time.time_ns()
        event.record()
        return (event, host_ns, self._device_name(tensor.device))

    def end(self, token: Any, work: Any) -> Any:
        """The handle: ``[anchor event, host ns, domain, work, enqueue end, last poll]``."""
        now = time.time_ns()
        return [token[0], token[1], token[2], work, now, now]

    def resolve(self, handle: Any) -> DeviceTiming | None:  # pragma: no cover - needs CUDA
        """Poll the work; once complete, its device interval on the host timeline."""
        import torch.distributed as dist

        _anchor, host0, domain, work, _enqueued, last_poll = handle
        w = work if isinstance(work, dist.Work) else dist.Work.unbox(work)
        now = time.time_ns()
        if not w.is_completed():
            handle[5] = now
            return None
        end = (last_poll + now) // 2
        half = (now - last_poll) / 2.0
        try:
            duration_ns = int(w._get_duration() * 1e6)  # type: ignore[attr-defined]
        except Exception:
            duration_ns = -1
        if duration_ns >= 0:
            start = end - duration_ns
            return DeviceTiming(
                start_ns=start,
                end_ns=end,
                uncertainty_ns=half,
                domain=f"{domain}/nccl-work-events",
                raw_start_ticks=0,
                raw_end_ticks=duration_ns,
            )
        # No per-work timing: the anchor bounds the start from below.
        return DeviceTiming(
            start_ns=host0,
            end_ns=end,
            uncertainty_ns=max(half, float(end - host0) / 2.0),
            domain=f"{domain}/cuda-events",
        )
