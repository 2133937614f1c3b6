"""``TorchDistributedInstrumentor``: one ``accel.collective`` span per process-group operation.

**Where it hooks.** Every process-group operation in PyTorch, whoever issues it, goes through
one dispatcher op of the ``c10d`` library (``c10d::allreduce_``, ``c10d::_allgather_base_``,
``c10d::send``, ...): the Python wrappers (``torch.distributed.all_reduce`` and references to
it taken before ``instrument()``, coalesced and ``batch_isend_irecv`` calls, FSDP2), the
C++ callers (DDP's reducer, the ``_c10d_functional`` ops behind functional collectives,
DTensor redistributions and tensor-parallel layers, and the code ``torch.compile`` emits for
them). The native kernels also hook the symmetric-memory collectives (``symm_mem::*``
all-reduce, all-gather and reduce-scatter ops, CUDA-only; group named by a string, no
``Work``: timing ``enqueue``). The instrumentor registers a recording kernel for each op at
the ``AutogradCPU`` and ``AutogradCUDA`` dispatch keys, which continues the dispatch below
autograd; pass-through
kernels at the same keys of the ``_c10d_functional`` ops let their nested process-group
calls reach it. ``uninstrument()`` deletes the registrations, which restores the originals.

**Workload thread.** By default the recording kernels are native (``_c10d_hook.cpp``,
compiled once and cached by :mod:`._c10d_native`): the C++ kernel reads the group, payload
bytes, dtype and device from the arguments, redispatches, takes the per-group sequence number
in issue order, reads the current OpenTelemetry context (one short GIL section) and writes one
record into a preallocated bounded ring; a full ring drops the record and counts it
(:attr:`TorchDistributedInstrumentor.dropped`), its sequence number already taken, so ids
stay aligned across ranks. A C++ poller thread watches ``Work::isCompleted()`` without the
GIL; a Python *drain* thread takes completed records in batches and makes the spans and
metrics. Without a compiler (or with a ``collective_timer``, whose ``begin``/``end`` are
Python calls on the workload thread, or ``native=False``) the same kernels are Python
functions (``torch.library``, ``OpOverload.redispatch``): two host timestamps, the timer's
token and one put into a bounded queue
(:class:`~otel_ext.instrumentation.deferred.BoundedHandoff`), with a *tracker* thread that
sequences records in issue order and a Python poller.

**Completion and timing.** On a blocking backend (gloo) completion is observed by polling
``Work.is_completed()`` every 0.5 ms and bracketed (the end is the middle of the bracket,
``accel.clock.uncertainty_ns`` half of it; no Python callback is ever attached to a backend's
future, see :meth:`~._dist_tracker.CollectiveTracker._poll`); on devices a :class:`CollectiveTimer` times (CUDA) the
device interval it resolves, with ``accel.clock.domain`` and ``accel.clock.uncertainty_ns``.
A *materialiser* (or the drain) then makes the span (explicit start and end, the context
current at the call as parent), its algbw/busbw and the metrics, all from the same duration:
the device's when timed.

Attributes: op, group name (``default_pg`` for the default group, else the group's name,
identical on every member), group size, rank in group, per-group sequence number, id
(``group:seq``; point-to-point: ``group:src->dst:seq`` per ordered pair of group ranks),
payload bytes of this member's buffer (input for reductions, output for gathers), dtype,
peer (group rank, p2p), ``async`` (collectives), ``enqueue_start_ns`` / ``enqueue_end_ns``
(the issuing call), ``timing`` (``device`` or ``host``), algbw and busbw. Metrics (from
``meter_provider``), per completed op with op, group and device id: ``accel.collective.io``,
``.bus.io``, ``.time`` and the ``.duration`` histogram, recorded in the span's context (the
SDK's exemplars point at it). A failed op is not counted.

Wrappers never change what the op does or returns: the original kernel runs with the same
arguments and its result or exception is passed back unchanged; telemetry failures are
logged once and counted.

**Layout.** The state one ``instrument()`` sets up is :class:`_CollectiveRecording`, built in
layers, one module each: :mod:`._dist_ops` (the hooked ops and how to read their arguments),
:mod:`._dist_tracker` (the Python path: sequencing, polling, materialising spans),
:mod:`._dist_drain` (the native drain, flush and close), :mod:`._dist_hooks` (the recording
kernels and their registration); this module holds the instrumentor.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
import torch.distributed as dist
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import Link

from otel_ext.errors import ConfigError
from otel_ext.instrumentation._common import get_tracer, log_once
from otel_ext.instrumentation.collective_records import (
    DEFAULT_GROUP_NAME,
    CollectiveMetrics,
    DeviceIdentities,
)
from otel_ext.instrumentation.collectives import SequenceCounter
from otel_ext.instrumentation.torch._device_timing import CollectiveTimer
from otel_ext.instrumentation.torch._dist_drain import _DRAIN_WAIT_S
from otel_ext.instrumentation.torch._dist_drain import (
    _native_device_timing as _native_device_timing,  # re-exported (benchmarks, tests)
)
from otel_ext.instrumentation.torch._dist_hooks import CollectiveHooks

# the op tables the benchmarks and tests read through this module (explicit re-exports)
from otel_ext.instrumentation.torch._dist_ops import _DISPATCH_KEYS as _DISPATCH_KEYS
from otel_ext.instrumentation.torch._dist_ops import _OPS as _OPS
from otel_ext.instrumentation.torch._dist_ops import _ROLES as _ROLES
from otel_ext.instrumentation.torch._dist_ops import _SYMM_MEM_KEYS as _SYMM_MEM_KEYS
from otel_ext.instrumentation.torch._dist_ops import HOOKED_OPS

__all__ = ["DEFAULT_GROUP_NAME", "HOOKED_OPS", "TorchDistributedInstrumentor"]


class _CollectiveRecording(CollectiveHooks):
    """Everything one ``instrument()`` call set up for collectives (options, kernels, ring or
    queues, background threads, span writer and metrics); dropped by ``uninstrument()``.

    Its layers: :class:`~._dist_hooks.CollectiveHooks` (kernels),
    :class:`~._dist_drain.CollectiveDrain` (native drain, flush, close),
    :class:`~._dist_tracker.CollectiveTracker` (the Python path and the shared span path).
    """

    def __init__(
        self,
        *,
        tracer_provider: Any,
        meter_provider: Any,
        link_provider: Callable[[str, str, int], Sequence[Link]] | None,
        device: str | None,
        host_id: str | None,
        timer: CollectiveTimer | None,
        capacity: int,
        drain_interval_s: float = 0.05,
        drain: str = "thread",
        telemetry: Any = None,
    ):
        self.tracer = get_tracer(tracer_provider)
        self.tracer_provider_given = tracer_provider
        self.drain_mode = drain
        self.telemetry = telemetry
        self.meter_provider = meter_provider
        self.drain_interval_s = drain_interval_s
        self.metrics = CollectiveMetrics(meter_provider)
        self.link_provider = link_provider
        self.device = device
        self.host_id = host_id
        self.timer = timer
        #: the identity attributes per raw device name (rank asked for at first use)
        self.identities = DeviceIdentities(device, host_id, _rank)
        self.capacity = capacity
        self._init_hooks()
        self._init_drain()
        self._init_tracking()
        self.default_name = _default_group_name()
        self._start_background()
        self._bind_provider(tracer_provider, meter_provider)


def _rank() -> int | None:
    """This process's rank, once the default process group exists."""
    return dist.get_rank() if dist.is_initialized() else None


def _default_group_name() -> str | None:
    """The raw name of the default process group (``None`` before there is one)."""
    try:
        return str(dist.distributed_c10d._get_default_group().group_name)
    except Exception:
        return None


def _drain_interval(value: Any) -> float:
    """``drain_interval_s`` checked: a positive number of seconds, at most an hour.

    >>> _drain_interval(0.2)
    0.2
    >>> _drain_interval(0)
    Traceback (most recent call last):
    ...
    otel_ext.errors.ConfigError: drain_interval_s=0: must be a number of seconds in (0, 3600]
    """
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds <= 3600:
        raise ConfigError(f"drain_interval_s={value!r}: must be a number of seconds in (0, 3600]")
    return seconds


def _drain_mode(value: Any) -> str:
    """``drain=`` (else ``OTEL_EXT_COLLECTIVE_DRAIN``) checked: ``thread`` or ``process``.

    >>> _drain_mode("process")
    'process'
    >>> _drain_mode("elsewhere")
    Traceback (most recent call last):
    ...
    otel_ext.errors.ConfigError: drain='elsewhere': must be 'thread' or 'process'
    """
    from otel_ext import config

    raw = config.resolve(config.COLLECTIVE_DRAIN, value)
    mode = str(raw).strip().lower()
    if mode not in ("thread", "process"):
        raise ConfigError(f"drain={raw!r}: must be 'thread' or 'process'")
    return mode


class TorchDistributedInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Spans and metrics for every process-group operation (a singleton; see the module doc).

    ``instrument(**options)`` options: ``tracer_provider``; ``meter_provider`` (the global
    one by default; ``NoOpMeterProvider()`` turns the metrics off); ``link_provider`` (a
    callable ``(op, group, seq) -> links``); ``device`` and ``host_id`` (identity; by default
    ``chip{LOCAL_RANK}`` as the resource names it, else the tensor's device); ``collective_timer``
    (a :class:`~otel_ext.instrumentation.torch.CollectiveTimer`; by default
    :class:`~otel_ext.instrumentation.torch.CudaCollectiveTimer` when CUDA is available, else
    none: host timing); ``capacity`` (records waiting at most; default 65536); ``native``
    (``False``: the Python kernels even when the native ones load; see the module doc);
    ``drain_interval_s`` (how often the background thread turns completed records into
    spans and metrics, in seconds; default 0.05: longer batches cost the process less per
    collective and delay the spans more; a quarter of ``capacity`` completed wakes it early);
    ``drain`` (``"thread"``, the default, or ``"process"``: the records become spans and
    metrics in a drain process of their own, off this process's GIL; see
    :mod:`otel_ext.instrumentation.collective_drain_process`; else
    ``OTEL_EXT_COLLECTIVE_DRAIN``); ``telemetry`` (the :class:`~otel_ext.exporters.Telemetry`
    of ``otel_ext.configure()``: its providers, and what the drain process builds; by default
    the one whose tracer provider is in use). Sequence numbers restart at 0 with each ``instrument()``; instrument on every rank before
    the first collective so they agree. :meth:`flush` waits until every op issued so far has
    completed and its span has been made; ``uninstrument()`` flushes first.

    >>> inst = TorchDistributedInstrumentor()
    >>> list(inst.instrumentation_dependencies())
    ['torch >= 2.0']
    """

    _state: _CollectiveRecording | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The instrumented library: PyTorch 2 or later."""
        return ("torch >= 2.0",)

    def _instrument(self, **kwargs: Any) -> None:
        timer = kwargs.get("collective_timer")
        if timer is None and kwargs.get("native") is not False:
            # No injected timer: the native kernels (they time CUDA works themselves, from
            # PyTorch's per-work events).
            state = self._make_state(kwargs, None)
            if state.install_native():
                self._state = state
                return
            state.close(1.0)
            from otel_ext.instrumentation.torch import _c10d_native

            if state.drain_mode == "process":
                log_once(
                    "torch.distributed.drain_process",
                    "drain='process' needs the native kernels; draining in this process",
                )
            log_once(
                "torch.distributed.native",
                "native collective hook unavailable (%s); using the Python hook",
                _c10d_native.STATUS.get("reason", ""),
            )
        if timer is None and torch.cuda.is_available():
            from otel_ext.instrumentation.torch._device_timing import CudaCollectiveTimer

            timer = CudaCollectiveTimer()
        state = self._make_state(kwargs, timer)
        state.install_python()
        self._state = state

    @staticmethod
    def _make_state(kwargs: dict[str, Any], timer: CollectiveTimer | None) -> _CollectiveRecording:
        drain = _drain_mode(kwargs.get("drain"))
        if drain == "process" and kwargs.get("link_provider") is not None:
            raise ConfigError(
                "drain='process' cannot call link_provider (a callable of this process): "
                "use drain='thread'"
            )
        telemetry = kwargs.get("telemetry")
        if telemetry is not None:
            kwargs.setdefault("tracer_provider", telemetry.tracer_provider)
            kwargs.setdefault("meter_provider", telemetry.meter_provider)
        return _CollectiveRecording(
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            link_provider=kwargs.get("link_provider"),
            device=kwargs.get("device"),
            host_id=kwargs.get("host_id"),
            timer=timer,
            capacity=int(kwargs.get("capacity", 1 << 16)),
            drain_interval_s=_drain_interval(kwargs.get("drain_interval_s", _DRAIN_WAIT_S)),
            drain=drain,
            telemetry=telemetry,
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        state, self._state = self._state, None
        if state is None:
            return
        try:
            state.uninstall()
        except Exception as exc:  # uninstrument() never raises into the workload
            log_once("torch.distributed.uninstall", "%s: %s", type(exc).__name__, exc)
        state.close(kwargs.get("timeout", 30.0))

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until every op issued so far has its span (True at once when uninstrumented)."""
        return True if self._state is None else self._state.flush(timeout)

    @property
    def dropped(self) -> int:
        """Records dropped because the queue (ring) was full; their sequence numbers are kept.

        With the native kernels this also counts calls whose arguments could not be read
        (none expected; such a call is not sequenced).
        """
        state = self._state
        if state is None:
            return 0
        native = 0 if state.native is None else state.native.dropped() + state.native.invalid()
        return state.tracker.dropped + state.materialiser.dropped + native

    @property
    def recording_ops(self) -> list[str]:
        """The ops with a recording kernel now (``namespace::op``; empty when uninstrumented).

        The native kernels add the ``symm_mem`` collectives this torch has; the Python hook
        records the ``c10d`` ops only.
        """
        state = self._state
        if state is None:
            return []
        if state.native is not None:
            return list(state.native_ops)
        return [f"c10d::{name}" for name in HOOKED_OPS if hasattr(torch.ops.c10d, name)]

    @property
    def native(self) -> bool:
        """Whether the native (C++) recording kernels are installed (else the Python ones)."""
        return self._state is not None and self._state.native is not None

    @property
    def sequences(self) -> SequenceCounter | None:
        """The Python hook's per-group sequence counters (``None`` when uninstrumented).

        With the native kernels the counters live in C++ and this one stays empty.
        """
        return None if self._state is None else self._state.seqs
