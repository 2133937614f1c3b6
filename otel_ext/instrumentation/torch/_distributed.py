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
future, see :meth:`_State._poll`); on devices a :class:`CollectiveTimer` times (CUDA) the
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
"""

from __future__ import annotations

import atexit
import collections
import contextvars
import threading
import time
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry import trace as otel_trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import Link, Status, StatusCode

from otel_ext.errors import ConfigError
from otel_ext.instrumentation._common import (
    bind_drops,
    get_tracer,
    log_once,
    pause,
)
from otel_ext.instrumentation.collective_records import (
    DEFAULT_GROUP_NAME,
    CollectiveMetrics,
    DeviceIdentities,
    NativeRecordEmitter,
    _Template,
    call_attributes,
)
from otel_ext.instrumentation.collectives import (
    SequenceCounter,
    bandwidths,
    collective_id,
    p2p_id,
)
from otel_ext.instrumentation.deferred import BoundedHandoff
from otel_ext.instrumentation.provider_drain import register as register_drain
from otel_ext.instrumentation.torch._device_timing import CollectiveTimer, DeviceTiming
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_RAW_END_TICKS,
    ACCEL_CLOCK_RAW_START_TICKS,
    ACCEL_CLOCK_UNCERTAINTY_NS,
    ACCEL_COLLECTIVE_ALGBW,
    ACCEL_COLLECTIVE_BUSBW,
    ACCEL_COLLECTIVE_BYTES,
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_GROUP_SIZE,
    ACCEL_COLLECTIVE_ID,
    ACCEL_COLLECTIVE_OP,
    ACCEL_COLLECTIVE_PEER,
    ACCEL_COLLECTIVE_RANK,
    ACCEL_COLLECTIVE_SEQ,
    ACCEL_COLLECTIVE_TIMING,
    ACCEL_DEVICE_ID,
    ERROR_TYPE,
)
from otel_ext.semconv.spans import SPAN_ACCEL_COLLECTIVE

__all__ = ["DEFAULT_GROUP_NAME", "HOOKED_OPS", "TorchDistributedInstrumentor"]

#: the per-record metrics and attributes now live beside the emitter (torch-free)
_Metrics = CollectiveMetrics
_call_attributes = call_attributes
_POLL_S = 0.0005
_DEVICE_DEADLINE_NS = 120 * 10**9
_GIVE_UP_NS = 300 * 10**9
_FLUSH_GRACE_NS = 200 * 10**6


class _Op(NamedTuple):
    """How to read one ``c10d`` dispatcher op's arguments."""

    op: str  # accel.collective.op
    pg: int  # argument index of the process group
    payload: int | None  # argument index of the payload
    role: str  # "t" tensor, "list" tensors, "lists" lists of tensors, "" none
    async_at: int | None  # argument index of async_op (collectives)
    peer_at: int | None  # argument index of the peer group rank (p2p)
    send: bool = False


#: ``c10d`` dispatcher op -> how to read it (schemas of torch 2.13).
_OPS: dict[str, _Op] = {
    "allreduce_": _Op("all_reduce", 1, 0, "list", 4, None),
    "allreduce_coalesced_": _Op("all_reduce_coalesced", 1, 0, "list", 3, None),
    "allgather_": _Op("all_gather", 2, 0, "lists", 3, None),
    "_allgather_base_": _Op("all_gather_into_tensor", 2, 0, "t", 3, None),
    "allgather_coalesced_": _Op("all_gather_coalesced", 2, 0, "lists", 3, None),
    "allgather_into_tensor_coalesced_": _Op(
        "all_gather_into_tensor_coalesced", 2, 0, "list", 3, None
    ),
    "reduce_scatter_": _Op("reduce_scatter", 2, 1, "lists", 4, None),
    "_reduce_scatter_base_": _Op("reduce_scatter_tensor", 2, 1, "t", 4, None),
    "reduce_scatter_tensor_coalesced_": _Op(
        "reduce_scatter_tensor_coalesced", 2, 1, "list", 4, None
    ),
    "alltoall_": _Op("all_to_all", 2, 1, "list", 3, None),
    "alltoall_base_": _Op("all_to_all_single", 2, 1, "t", 5, None),
    "broadcast_": _Op("broadcast", 1, 0, "list", 4, None),
    "reduce_": _Op("reduce", 1, 0, "list", 5, None),
    "gather_": _Op("gather", 2, 1, "list", 4, None),
    "scatter_": _Op("scatter", 2, 0, "list", 4, None),
    "barrier": _Op("barrier", 1, None, "", 3, None),
    "send": _Op("send", 1, 0, "list", None, 2, send=True),
    "recv_": _Op("recv", 1, 0, "list", None, 2),
    "recv_any_source_": _Op("recv", 1, 0, "list", None, None),
}
#: The ``c10d`` dispatcher ops the instrumentor hooks.
HOOKED_OPS = tuple(_OPS)


class _SymmOp(NamedTuple):
    """How to read one ``symm_mem`` op (symmetric memory; the group is named by a string)."""

    op: str  # accel.collective.op
    payload: int  # argument index of the payload tensor
    group_name: int  # argument index of ``str group_name``


#: The symmetric-memory collectives (``torch.distributed._symmetric_memory``; CUDA kernels),
#: hooked by the native kernels where this torch has them. They return no ``Work``: the
#: collective runs on the issuing stream, and its span covers the issuing call (timing
#: ``enqueue``).
_SYMM_MEM_OPS: dict[str, _SymmOp] = {
    "one_shot_all_reduce": _SymmOp("all_reduce", 0, 2),
    "one_shot_all_reduce_out": _SymmOp("all_reduce", 0, 2),
    "one_shot_all_reduce_copy": _SymmOp("all_reduce", 1, 3),
    "one_shot_all_reduce_copy_out": _SymmOp("all_reduce", 1, 3),
    "two_shot_all_reduce_": _SymmOp("all_reduce", 0, 2),
    "two_shot_all_reduce_out": _SymmOp("all_reduce", 0, 2),
    "multimem_all_reduce_": _SymmOp("all_reduce", 0, 2),
    "multimem_one_shot_all_reduce": _SymmOp("all_reduce", 0, 2),
    "multimem_one_shot_all_reduce_out": _SymmOp("all_reduce", 0, 2),
    "multimem_all_gather_out": _SymmOp("all_gather_into_tensor", 2, 1),
    "reduce_scatter_out": _SymmOp("reduce_scatter_tensor", 0, 1),
}
#: Dispatch keys of the ``symm_mem`` recording kernels (their kernels are CUDA-only).
_SYMM_MEM_KEYS: tuple[str, ...] = ("AutogradCUDA",)
#: The recording kernels sit at the autograd keys, above the backends' kernels: from there
#: ``redispatch`` continues with the GIL released. (A kernel at the ``CPU`` key would have to
#: call the original with ``get_kernel(...).call_boxed``, which keeps the GIL across the
#: backend's enqueue; gloo's worker frees a finished work's tensors under the lock enqueue
#: takes, and that needs the GIL: a deadlock, seen in the benchmark.)
_DISPATCH_KEYS = ("AutogradCPU", "AutogradCUDA")


_ROLES = {"": 0, "t": 1, "list": 2, "lists": 3}
_DRAIN_WAIT_S = 0.05
#: how long the exit hook waits for collectives in flight to become spans
_EXIT_FLUSH_S = 2.0
_DRAIN_BATCH = 4096
#: the drain gives the GIL away after this many records (about 0.3 ms of span work)
_DRAIN_YIELD_EVERY = 16


class _NativeFailure(NamedTuple):
    """A failure the native kernel saw: the Python class name it surfaces as, and its text."""

    type: str
    message: str

    def __str__(self) -> str:
        return self.message


def _native_device_timing(record: tuple[Any, ...]) -> DeviceTiming | None:
    """A native record's device interval (CUDA per-work events), as ``CudaCollectiveTimer``.

    The end is the middle of the completion bracket the C++ poller observed, the start the
    end minus the device duration, ``accel.clock.uncertainty_ns`` half the bracket.
    """
    device_ns, end, uncertainty, device = record[20], record[14], record[15], record[10]
    if device_ns is None or device_ns < 0 or uncertainty is None:
        return None
    return DeviceTiming(
        start_ns=end - device_ns,
        end_ns=end,
        uncertainty_ns=uncertainty,
        domain=f"{device}/nccl-work-events",
        raw_start_ticks=0,
        raw_end_ticks=device_ns,
    )


def _otel_context_var() -> Any:
    """The ``ContextVar`` holding OpenTelemetry's current context, or ``None``.

    The native kernel reads it directly (``PyContextVar_Get``); with another runtime context
    implementation (``OTEL_PYTHON_CONTEXT``) it has none and spans get no parent.
    """
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, contextvars.ContextVar) else None


def _functional_ops() -> list[str]:
    """The ``_c10d_functional`` ops that issue a collective (every one but ``wait_tensor``)."""
    names = []
    for full in torch._C._dispatch_get_all_op_names():
        if full.startswith("_c10d_functional::"):
            name = full.split("::", 1)[1].split(".", 1)[0]
            if name != "wait_tensor" and name not in names:
                names.append(name)
    return names


def _pass_through(op: Any) -> Callable[..., Any]:
    redispatch = op.redispatch
    below = torch._C._after_autograd_keyset

    def functional_kernel(keyset: Any, *args: Any) -> Any:
        return redispatch(keyset & below, *args)

    return functional_kernel


def _tensors(value: Any, role: str) -> list[torch.Tensor]:
    if role == "t":
        return [value] if isinstance(value, torch.Tensor) else []
    if role == "list":
        return [t for t in value if isinstance(t, torch.Tensor)]
    if role == "lists":
        return [t for inner in value for t in inner if isinstance(t, torch.Tensor)]
    return []


def _first_tensor(args: tuple[Any, ...]) -> Any:
    first = args[0] if args else None
    if isinstance(first, list):
        first = first[0] if first else None
        if isinstance(first, list):
            first = first[0] if first else None
    return first


class _Entry:
    """One collective between the tracker and the materialiser."""

    __slots__ = (
        "attrs",
        "ctx",
        "device",
        "end",
        "enqueue_only",
        "error",
        "group",
        "handle",
        "nbytes",
        "op",
        "seq",
        "size",
        "start",
        "t1",
        "uncertainty",
        "work",
    )

    attrs: dict[str, Any]
    ctx: Any
    device: str | None
    group: str
    nbytes: int
    op: str
    seq: int
    size: int
    start: int
    t1: int

    def __init__(self) -> None:
        self.end = 0
        self.enqueue_only = False
        self.error: BaseException | _NativeFailure | str | None = None
        self.uncertainty: float | None = None
        self.handle: Any = None
        self.work: Any = None

    @classmethod
    def of(
        cls,
        op: str,
        group: str,
        size: int,
        rank: int,
        nbytes: int,
        seq: int,
        cid: str | None,
        dtype: str | None,
        peer: int | None,
        async_op: bool | None,
        t0: int,
        t1: int,
        ctx: Any,
        identity: dict[str, Any],
    ) -> _Entry:
        """An entry with the span's attributes, the same whichever path recorded the call
        (the native kernels or the Python hook): ``seq`` < 0 (a receive from any source,
        sequenced at completion) has no seq and id yet, ``None`` leaves an attribute out."""
        attrs: dict[str, Any] = {
            ACCEL_COLLECTIVE_OP: op,
            ACCEL_COLLECTIVE_GROUP: group,
            ACCEL_COLLECTIVE_GROUP_SIZE: size,
            ACCEL_COLLECTIVE_RANK: rank,
            ACCEL_COLLECTIVE_BYTES: nbytes,
        }
        if seq >= 0:
            attrs[ACCEL_COLLECTIVE_SEQ] = seq
            attrs[ACCEL_COLLECTIVE_ID] = cid
        _call_attributes(attrs, dtype, peer, async_op, t0, t1)
        attrs.update(identity)
        e = cls()
        e.attrs, e.ctx, e.start, e.t1, e.op = attrs, ctx, t0, t1, op
        e.group, e.size, e.nbytes, e.seq = group, size, nbytes, seq
        e.device = attrs.get(ACCEL_DEVICE_ID)
        return e


class _State:
    """Everything one ``instrument()`` call set up; dropped by ``uninstrument()``."""

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
        #: the drain process (drain="process", once started; else None)
        self.drain_process: Any = None
        self.markers = 0
        self.drain_interval_s = drain_interval_s
        self.metrics = _Metrics(meter_provider)
        self.link_provider = link_provider
        self.device = device
        self.host_id = host_id
        self.timer = timer
        self.seqs = SequenceCounter()
        self.groups: dict[str, tuple[str, int, int]] = {}
        #: the identity attributes per raw device name (rank asked for at first use)
        self.identities = DeviceIdentities(
            device, host_id, lambda: dist.get_rank() if dist.is_initialized() else None
        )
        self.libraries: list[Any] = []
        self.capacity = capacity
        self.native: Any = None  # the native Hook when the C++ kernels are installed
        self.native_install: Any = None
        self.native_specs: list[_Op] = []
        self.native_ops: list[str] = []  # "namespace::op" of each native recording kernel
        #: what :meth:`set_native_kernels` re-registers: (module, ops with their keys, functional)
        self.native_registration: tuple[Any, list[tuple[str, str, list[str]]], list[str]] | None
        self.native_registration = None
        #: the drain's records to spans and metrics (its templates: :attr:`templates`)
        self.emitter = NativeRecordEmitter(
            self.tracer,
            self.metrics,
            op_of=lambda idx: self.native_specs[idx].op,
            default_name=None,  # set below (default_name)
            identity=self._identity_by_name,
            link_provider=link_provider,
        )
        self.spans = self.emitter.spans  # the Python hook's spans: the same short path
        #: False: native records go through :meth:`_native_entry` and :meth:`_emit` (the
        #: Python hook's path, kept as the reference the drain's output is tested against)
        self.native_templates = True
        self.drainer: threading.Thread | None = None
        self.drain_lock = threading.Lock()
        self.drain_wake = threading.Event()  # set by close(): the drain stops waiting
        self.issued = 0
        self.gaps: collections.deque[tuple[int, _Op, Any, Any]] = collections.deque(maxlen=capacity)
        self.gaps_lost = 0
        self.open = 0  # entries waiting for completion
        self.open_lock = threading.Condition()
        self.polled: list[_Entry] = []
        self.poll_lock = threading.Lock()
        # (issued before, from): flush() gives up on works issued before it began that are
        # still open _FLUSH_GRACE_NS later; otherwise after _GIVE_UP_NS.
        self.give_up = (0, 0)
        self.poll_wake = threading.Event()
        self.device_pending: list[tuple[_Entry, int]] = []
        self.closed = False
        try:
            self.default_name = str(dist.distributed_c10d._get_default_group().group_name)
        except Exception:
            self.default_name = None
        self.materialiser = BoundedHandoff(
            self._materialise,
            capacity=capacity,
            name="otel-ext-collective-spans",
            interval=drain_interval_s,
            tick=True,
        )
        self.tracker = BoundedHandoff(
            self._track, capacity=capacity, name="otel-ext-collective-tracker"
        )
        self.poller = threading.Thread(
            target=self._poll, name="otel-ext-collective-poll", daemon=True
        )
        self.poller.start()
        #: the tracer provider's force_flush()/shutdown() drain the records first
        self.drain_binding = register_drain(self, tracer_provider)
        bind_drops(meter_provider)

    # -- hot path --------------------------------------------------------------------------
    def kernel(self, spec: _Op, op: Any) -> Callable[..., Any]:
        """The recording kernel for one op (``with_keyset=True`` signature).

        Registered at the autograd keys; it continues the dispatch below autograd with
        ``OpOverload.redispatch``, which releases the GIL while the original kernel runs.
        """
        redispatch = op.redispatch
        below = torch._C._after_autograd_keyset
        put = self.tracker.put
        time_ns = time.time_ns
        get_current = otel_context.get_current
        timer = self.timer
        state = self

        def recording_kernel(keyset: Any, *args: Any) -> Any:
            t0 = time_ns()
            token = None
            if timer is not None:
                try:
                    token = timer.begin(_first_tensor(args))
                except Exception as exc:
                    log_once("torch.distributed.timer.begin", "%s: %s", type(exc).__name__, exc)
            try:
                out = redispatch(keyset & below, *args)
            except BaseException as exc:
                state.issued += 1
                put((spec, args, None, t0, time_ns(), get_current(), None, state.issued, exc))
                raise
            t1 = time_ns()
            if token is not None:
                try:
                    token = timer.end(token, out[1] if type(out) is tuple else out)  # type: ignore[union-attr]
                except Exception as exc:
                    log_once("torch.distributed.timer.end", "%s: %s", type(exc).__name__, exc)
                    token = None
            state.issued += 1
            n = state.issued
            if not put((spec, args, out, t0, t1, get_current(), token, n, None)):
                peer = args[spec.peer_at] if spec.peer_at is not None else None
                state.gaps.append((n, spec, args[spec.pg], peer))
            return out

        return recording_kernel

    def install_native(self) -> bool:
        """Register the native recording kernels if they load; whether they did.

        Used when no ``collective_timer`` was injected (a timer's ``begin``/``end`` are
        Python calls on the workload thread, which only the Python kernels make).
        """
        return self.timer is None and self._install_native()

    def install_python(self) -> None:
        """Register the Python recording kernels (the fallback; see the module doc)."""
        lib = torch.library.Library("c10d", "IMPL")
        self.libraries.append(lib)
        for name, spec in _OPS.items():
            op = getattr(getattr(torch.ops.c10d, name, None), "default", None)
            if op is None:  # an op this torch version does not have
                continue
            kernel = self.kernel(spec, op)
            for key in _DISPATCH_KEYS:
                with warnings.catch_warnings():
                    # "Overriding a previously registered kernel" (the autograd fallback)
                    warnings.simplefilter("ignore")
                    lib.impl(name, kernel, key, with_keyset=True)
        # The functional collectives (DTensor, TP, compiled code) call the process group
        # from their kernel, which the autograd fallback runs with autograd excluded: a
        # pass-through at the autograd keys lets those nested calls reach the kernels above.
        functional = torch.library.Library("_c10d_functional", "IMPL")
        self.libraries.append(functional)
        for name in _functional_ops():
            op = getattr(getattr(torch.ops._c10d_functional, name, None), "default", None)
            if op is None:
                continue
            for key in _DISPATCH_KEYS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    functional.impl(name, _pass_through(op), key, with_keyset=True)

    def _install_native(self) -> bool:
        from otel_ext.instrumentation.torch import _c10d_native

        module = _c10d_native.load()
        if module is None:
            return False
        specs = []
        names: list[tuple[str, str, list[str]]] = []
        for name, spec in _OPS.items():
            if getattr(getattr(torch.ops.c10d, name, None), "default", None) is None:
                continue
            names.append(("c10d", name, list(_DISPATCH_KEYS)))
            specs.append(
                (
                    spec.pg,
                    -1 if spec.payload is None else spec.payload,
                    _ROLES[spec.role],
                    -1 if spec.async_at is None else spec.async_at,
                    -1 if spec.peer_at is None else spec.peer_at,
                    spec.send,
                    spec.op in ("send", "recv"),
                    -1,
                )
            )
            self.native_specs.append(spec)
        for name, symm in _SYMM_MEM_OPS.items():
            if getattr(getattr(torch.ops.symm_mem, name, None), "default", None) is None:
                continue
            names.append(("symm_mem", name, list(_SYMM_MEM_KEYS)))
            specs.append((-1, symm.payload, _ROLES["t"], -1, -1, False, False, symm.group_name))
            self.native_specs.append(_Op(symm.op, -1, symm.payload, "t", None, None))
        try:
            hook = module.Hook(specs, self.capacity, _otel_context_var())
            if self.drain_mode == "process":
                self._start_drain_process(hook)
            self.native_install = module.Installation(
                hook, names, _functional_ops(), list(_DISPATCH_KEYS)
            )
            self.native_ops = [f"{ns}::{name}" for ns, name, _ in names]
            self.native_registration = (module, names, _functional_ops())
        except Exception as exc:
            log_once("torch.distributed.native", "%s: %s", type(exc).__name__, exc)
            self.native_specs.clear()
            return False
        self.native = hook
        if self.drain_process is None:
            self.drainer = threading.Thread(
                target=self._drain_loop, name="otel-ext-collective-drain", daemon=True
            )
            self.drainer.start()
        self.watch = self._start_watch(hook)
        # Before the interpreter finalises: the records still in flight become spans (while
        # the SDK, whose own exit hook runs after this one, can still export them), and the
        # drain thread stops. A daemon thread still inside the native drain at finalisation
        # is torn down by the interpreter in the middle of C++ code, which aborts the process.
        atexit.register(self.close_at_exit)
        return True

    def _start_watch(self, hook: Any) -> Any:
        """The collective watch (in-flight state for the node agent, hang watchdog): a
        background thread; ``None`` when this torch build's hook has no watch state."""
        from otel_ext import config
        from otel_ext.instrumentation.torch._collective_watch import start_watch

        if not hasattr(hook, "watch_state"):
            return None
        return start_watch(
            hook,
            op_of=lambda idx: self.native_specs[idx].op,
            group_name=lambda g: DEFAULT_GROUP_NAME if g == self.default_name else g,
            identity=self._identity_by_name,
            tracer=self.tracer,
            tracer_provider=self.tracer_provider_given or otel_trace.get_tracer_provider(),
            host=self.host_id or config.host_id(),
            rank=dist.get_rank() if dist.is_initialized() else None,
            rank_of=lambda: dist.get_rank() if dist.is_initialized() else None,
        )

    def _start_drain_process(self, hook: Any) -> None:
        """drain="process": start the drain process and point the hook's completed records at
        it; when it cannot start, say why (once) and drain in this process."""
        from opentelemetry.trace.propagation import _SPAN_KEY

        from otel_ext.instrumentation.collective_drain_process import (
            DrainProcess,
            DrainProcessError,
            drain_configuration,
            telemetry_of,
        )

        provider = self.tracer_provider_given or otel_trace.get_tracer_provider()
        telemetry = self.telemetry or telemetry_of(provider)
        meters = self.meter_provider or metrics.get_meter_provider()
        try:
            if telemetry is None or telemetry.tracer_provider is not provider:
                raise DrainProcessError(
                    "drain='process' needs the tracer provider of an otel_ext.configure() "
                    "Telemetry (the drain process builds the same providers); "
                    "pass telemetry= or configure() first"
                )
            config = drain_configuration(
                telemetry,
                metrics=meters is telemetry.meter_provider,
                ops=[spec.op for spec in self.native_specs],
                default_name=self.default_name,
                device=self.device,
                host_id=self.host_id,
                rank=dist.get_rank() if dist.is_initialized() else None,
                drain_interval_s=self.drain_interval_s,
            )
            process = DrainProcess.start(config)
        except DrainProcessError as exc:
            log_once("torch.distributed.drain_process", "%s; draining in this process", exc)
            return
        try:
            hook.set_sink(process.descriptor(), _SPAN_KEY, max(self.capacity, 1024) * 256)
        except Exception as exc:  # never leave a drain process nobody sends to
            process.kill()
            log_once(
                "torch.distributed.drain_process",
                "%s: %s; draining in this process",
                type(exc).__name__,
                exc,
            )
            return
        self.drain_process = process

    def close_at_exit(self) -> None:
        """:meth:`close` with a short bound, once (the interpreter is exiting)."""
        if not self.closed:
            try:
                self.close(timeout=_EXIT_FLUSH_S)
            except Exception as exc:  # telemetry never fails the workload's exit
                log_once("torch.distributed.exit", "%s: %s", type(exc).__name__, exc)

    # -- native drain (background) ---------------------------------------------------------
    def _drain_loop(self) -> None:
        hook = self.native
        while not self.closed and hook is not None:
            try:
                if not self.drain_binding.bound:
                    self.drain_binding.ensure()  # the global provider may be set since
                self._wait_for_drain(hook)
                self._drain_once(0.0)
            except Exception as exc:
                log_once("torch.distributed.drain", "%s: %s", type(exc).__name__, exc)

    def _wait_for_drain(self, hook: Any) -> None:
        """Until ``drain_interval_s`` has passed, a quarter of the capacity is waiting, or
        :meth:`close` (looked at every 50 ms at most); without the drain lock, so a
        :meth:`flush` never waits for it."""
        deadline = time.monotonic() + self.drain_interval_s
        enough = max(self.capacity // 4, 1)
        while not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.drain_wake.wait(min(left, _DRAIN_WAIT_S))
            if hook.in_flight() >= enough:
                return

    def _drain_once(self, wait_s: float) -> int:
        hook = self.native
        if hook is None or self.drain_process is not None:
            return 0
        emit = self._emit_native if self.native_templates else self._emit_native_entry
        with self.drain_lock:
            self.emitter.begin()
            batch = hook.drain(_DRAIN_BATCH, wait_s)
            for i, record in enumerate(batch):
                if i % _DRAIN_YIELD_EVERY == _DRAIN_YIELD_EVERY - 1:
                    # let a workload thread that waits for the GIL (the recording kernel's
                    # context read) take it now, not at the 5 ms switch interval
                    pause(0)
                try:
                    emit(record)
                except Exception as exc:
                    log_once("torch.distributed.native.emit", "%s: %s", type(exc).__name__, exc)
            self._add_counted()
        return len(batch)

    @property
    def default_name(self) -> str | None:
        """The raw name of the default process group (``default_pg`` in spans)."""
        return self.emitter.default_name

    @default_name.setter
    def default_name(self, raw: str | None) -> None:
        self.emitter.default_name = raw

    @property
    def templates(self) -> dict[tuple[Any, ...], _Template]:
        """The drain's per-(op, group, size, rank, device) templates."""
        return self.emitter.templates

    def _emit_native(self, record: tuple[Any, ...]) -> None:
        """One native record's span and metrics (:meth:`NativeRecordEmitter.emit`)."""
        self.emitter.emit(record)

    def _emit_native_entry(self, record: tuple[Any, ...]) -> None:
        """A native record through the Python hook's path (:class:`_Entry`, :meth:`_emit`)."""
        self._emit(self._native_entry(record), _native_device_timing(record))

    def _native_entry(self, record: tuple[Any, ...]) -> _Entry:
        (
            idx, raw, gsize, grank, seq, src, dst, peer, nbytes, dtype, device,
            async_op, t0, t1, end, uncertainty, enqueue_only, err_type, err_msg, ctx, _,
        ) = record  # fmt: skip
        spec = self.native_specs[idx]
        gname = DEFAULT_GROUP_NAME if raw == self.default_name else raw
        cid = None
        if seq >= 0:
            cid = p2p_id(gname, src, dst, seq) if src is not None else collective_id(gname, seq)
        e = _Entry.of(
            spec.op, gname, gsize, grank, nbytes, seq, cid, dtype, peer, async_op, t0, t1, ctx,
            self._identity_by_name(device or "cpu"),
        )  # fmt: skip
        e.end, e.uncertainty, e.enqueue_only = end, uncertainty, enqueue_only
        if err_type is not None:
            e.error = _NativeFailure(err_type, err_msg or "")
        return e

    def set_native_kernels(self, installed: bool) -> None:
        """Take the native recording kernels out of the dispatcher (the original kernels run:
        nothing is recorded or sequenced) or put them back, keeping the hook, its threads and
        what waits in its ring. For ``benchmarks/instrumentation_collectives.py --paired``,
        which alternates short bare and instrumented windows in one process; a rank that
        calls collectives while another has the kernels out loses the id agreement."""
        if self.native is None or self.native_registration is None:
            raise RuntimeError("the native recording kernels are not installed")
        if not installed:
            if self.native_install is not None:
                self.native_install.uninstall()
                self.native_install = None
            return
        if self.native_install is None:
            module, names, functional = self.native_registration
            self.native_install = module.Installation(
                self.native, names, functional, list(_DISPATCH_KEYS)
            )

    def uninstall(self) -> None:
        if self.native_install is not None:
            self.native_install.uninstall()
            self.native_install = None
        for lib in self.libraries:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lib._destroy()
        self.libraries.clear()

    # -- tracker (background, in issue order) ----------------------------------------------
    def group_info(self, pg_obj: Any) -> tuple[str, int, int]:
        pg = pg_obj if isinstance(pg_obj, dist.ProcessGroup) else dist.ProcessGroup.unbox(pg_obj)
        raw = str(pg.group_name)
        info = self.groups.get(raw)
        if info is None:
            name = DEFAULT_GROUP_NAME if raw == self.default_name else raw
            info = self.groups[raw] = (name, int(pg.size()), int(pg.rank()))
            if self.timer is not None and hasattr(self.timer, "enable_for"):
                try:
                    self.timer.enable_for(pg)
                except Exception as exc:
                    log_once("torch.distributed.timer.enable", "%s: %s", type(exc).__name__, exc)
        return info

    def _sequence(self, spec: _Op, gname: str, grank: int, peer: Any) -> tuple[int, str]:
        if spec.peer_at is None and spec.op in ("send", "recv"):
            return -1, ""  # recv from any source: sequenced at completion
        if spec.peer_at is not None:
            peer = int(peer)
            src, dst = (grank, peer) if spec.send else (peer, grank)
            seq = self.seqs.next((gname, src, dst))
            return seq, p2p_id(gname, src, dst, seq)
        seq = self.seqs.next(gname)
        return seq, collective_id(gname, seq)

    def _apply_gaps(self, before: int) -> None:
        gaps = self.gaps
        while gaps and gaps[0][0] < before:
            _, spec, pg_obj, peer = gaps.popleft()
            try:
                gname, _, grank = self.group_info(pg_obj)
                self._sequence(spec, gname, grank, peer)
            except Exception as exc:
                log_once("torch.distributed.gap", "%s: %s", type(exc).__name__, exc)

    def identity_for(self, tensor: Any) -> dict[str, Any]:
        raw = str(tensor.device) if isinstance(tensor, torch.Tensor) else "cpu"
        return self._identity_by_name(raw)

    def _identity_by_name(self, raw: str) -> dict[str, Any]:
        return self.identities(raw)

    def _track(self, batch: list[tuple[Any, ...]]) -> None:
        for record in batch:
            try:
                self._track_one(*record)
            except Exception as exc:
                log_once("torch.distributed.track", "%s: %s", type(exc).__name__, exc)

    def _track_one(
        self,
        spec: _Op,
        args: tuple[Any, ...],
        out: Any,
        t0: int,
        t1: int,
        ctx: Any,
        handle: Any,
        n: int,
        error: BaseException | None,
    ) -> None:
        if self.gaps:
            self._apply_gaps(n)
        gname, gsize, grank = self.group_info(args[spec.pg])
        peer = args[spec.peer_at] if spec.peer_at is not None and len(args) > spec.peer_at else None
        seq, cid = self._sequence(spec, gname, grank, peer)
        tensors = (
            _tensors(args[spec.payload], spec.role)
            if spec.payload is not None and len(args) > spec.payload
            else []
        )
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        async_op = None
        if spec.async_at is not None:
            async_op = bool(args[spec.async_at]) if len(args) > spec.async_at else True
        e = _Entry.of(
            spec.op, gname, gsize, grank, nbytes, seq, cid,
            str(tensors[0].dtype).removeprefix("torch.") if tensors else None,
            None if peer is None else int(peer), async_op, t0, t1, ctx,
            self.identity_for(tensors[0] if tensors else _first_tensor(args)),
        )  # fmt: skip
        if error is not None:
            e.end, e.error = t1, error
            self.materialiser.put(e)
            return
        if handle is not None:
            e.handle = handle
            self.materialiser.put(e)
            return
        work = out[1] if type(out) is tuple else out
        e.work = work if isinstance(work, dist.Work) else dist.Work.unbox(work)
        e.end = t1  # the last look that found it not complete
        with self.open_lock:
            self.open += 1
        with self.poll_lock:
            self.polled.append(e)
        self.poll_wake.set()

    def _hand_over(self, e: _Entry) -> None:
        if e.seq < 0 and e.error is None and e.work is not None:
            self._sequence_any_source(e)
        e.work = None
        self.materialiser.put(e)
        with self.open_lock:
            self.open -= 1
            self.open_lock.notify_all()

    def _sequence_any_source(self, e: _Entry) -> None:
        try:
            src = int(e.work._source_rank())
        except Exception:
            return
        grank = e.attrs[ACCEL_COLLECTIVE_RANK]
        seq = self.seqs.next((e.group, src, grank))
        e.seq = seq
        e.attrs[ACCEL_COLLECTIVE_SEQ] = seq
        e.attrs[ACCEL_COLLECTIVE_ID] = p2p_id(e.group, src, grank, seq)
        e.attrs[ACCEL_COLLECTIVE_PEER] = src

    def _poll(self) -> None:
        """Host-timed works: completion observed by polling ``is_completed()``.

        Every 0.5 ms while works are open; a work seen complete gets its end bracketed
        between the last look that said no and the first that said yes (the middle, with
        half the bracket as ``accel.clock.uncertainty_ns``; gloo's point-to-point works
        complete when the workload's own ``wait()`` returns). No Python callback is ever
        attached to a backend's future: the recording kernel holds the GIL while the
        original kernel enqueues, and gloo's worker frees a finished work's future (and
        any Python callable in it, which needs the GIL) under the lock that enqueue takes:
        a deadlock. The poller never calls ``wait()`` either: a gloo receive has one waiter.
        Some works never report completion (gloo's reduce-scatter); one issued before a
        :meth:`flush` and still open 200 ms into it, or open after ``_GIVE_UP_NS``, is
        emitted with timing ``enqueue``: the span covers the issuing call only.
        """
        watching: list[_Entry] = []
        while not self.closed:
            with self.poll_lock:
                watching.extend(self.polled)
                self.polled.clear()
            if not watching:
                self.poll_wake.wait(0.5)
                self.poll_wake.clear()
                continue
            pause(_POLL_S)
            now = time.time_ns()
            before, after = self.give_up
            give_up = max(before if now >= after else 0, now - _GIVE_UP_NS)
            keep = []
            for e in watching:
                try:
                    done = bool(e.work.is_completed())
                except Exception:
                    done = True
                if done:
                    before = e.end
                    e.end, e.uncertainty = (before + now) // 2, (now - before) / 2.0
                    self._failure(e)
                elif e.start < give_up:
                    e.end, e.enqueue_only = e.t1, True
                else:
                    e.end = now  # the last look that found it not complete
                    keep.append(e)
                    continue
                self._hand_over(e)
            watching = keep

    @staticmethod
    def _failure(e: _Entry) -> None:
        try:
            failure = e.work.exception()
        except Exception as exc:
            failure = exc
        if failure is not None:
            e.error = failure

    # -- materialiser (background, batched) ------------------------------------------------
    def _materialise(self, batch: list[_Entry]) -> None:
        binding = getattr(self, "drain_binding", None)
        if binding is not None and not binding.bound:
            binding.ensure()  # the global provider may have been set since
        pending = self.device_pending
        now = time.time_ns()
        if pending or any(e.handle is not None for e in batch):
            still = []
            for e, since in pending + [(e, now) for e in batch if e.handle is not None]:
                timing = self._resolve(e)
                if timing is None and now - since < _DEVICE_DEADLINE_NS and not self.closed:
                    still.append((e, since))
                    continue
                self._emit(e, timing)
            self.device_pending = still
        for e in batch:
            if e.handle is None:
                self._emit(e, None)
        self._add_counted()

    def _add_counted(self) -> None:
        try:
            self.metrics.add_counted()
        except Exception as exc:
            log_once("torch.distributed.metrics", "%s: %s", type(exc).__name__, exc)

    def _resolve(self, e: _Entry) -> DeviceTiming | None:
        try:
            return self.timer.resolve(e.handle) if self.timer is not None else None
        except Exception as exc:
            log_once("torch.distributed.timer.resolve", "%s: %s", type(exc).__name__, exc)
            return None

    def _emit(self, e: _Entry, timing: DeviceTiming | None) -> None:
        try:
            attrs = e.attrs
            if timing is not None:
                start, end = timing.start_ns, timing.end_ns
                attrs[ACCEL_COLLECTIVE_TIMING] = "device"
                attrs[ACCEL_CLOCK_DOMAIN] = timing.domain
                attrs[ACCEL_CLOCK_UNCERTAINTY_NS] = float(timing.uncertainty_ns)
                attrs[ACCEL_CLOCK_RAW_START_TICKS] = int(timing.raw_start_ticks)
                attrs[ACCEL_CLOCK_RAW_END_TICKS] = int(timing.raw_end_ticks)
            else:
                start, end = e.start, max(e.end or e.t1, e.start)
                attrs[ACCEL_COLLECTIVE_TIMING] = "enqueue" if e.enqueue_only else "host"
                if e.uncertainty is not None:
                    attrs[ACCEL_CLOCK_UNCERTAINTY_NS] = float(e.uncertainty)
            algbw, busbw = bandwidths(e.op, e.nbytes, end - start, e.size)
            attrs[ACCEL_COLLECTIVE_ALGBW] = algbw
            attrs[ACCEL_COLLECTIVE_BUSBW] = busbw
            if e.error is not None:
                if isinstance(e.error, _NativeFailure):
                    attrs[ERROR_TYPE] = e.error.type
                elif isinstance(e.error, BaseException):
                    attrs[ERROR_TYPE] = type(e.error).__qualname__
                else:
                    attrs[ERROR_TYPE] = "Error"
            links = (
                self.link_provider(e.op, e.group, e.seq)
                if self.link_provider is not None and e.seq >= 0
                else ()
            )
            span = self.spans.write(
                SPAN_ACCEL_COLLECTIVE,
                context=e.ctx,
                attributes=attrs,
                links=links,
                start_ns=start,
                end_ns=end,
                status=None if e.error is None else Status(StatusCode.ERROR, str(e.error)),
            )
            if e.error is None:
                self.metrics.record(span, e.op, e.group, e.device, e.nbytes, e.size, end - start)
        except Exception as exc:
            log_once("torch.distributed.emit", "%s: %s", type(exc).__name__, exc)

    # -- flush / close ---------------------------------------------------------------------
    def flush(self, timeout: float | None = 30.0) -> bool:
        """Every op issued so far made into spans within ``timeout``; never raises (a
        failure is logged once, counted, and returns False)."""
        try:
            self.drain_binding.ensure()
            return self._flush(timeout)
        except Exception as exc:
            log_once("torch.distributed.flush", "%s: %s", type(exc).__name__, exc)
            return False

    def pending(self) -> int:
        """Records not yet made into spans (what a flush out of time leaves behind)."""
        try:
            native = 0
            if self.native is not None and self.drain_process is None:
                native = int(self.native.in_flight())
            return (
                native
                + self.tracker.waiting
                + self.materialiser.waiting
                + max(self.open, 0)
                + len(self.device_pending)
            )
        except Exception:
            return 0

    def _flush(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(deadline - time.monotonic(), 0.0)

        ok = self.tracker.flush(left())
        if self.native is not None:
            ok = self._flush_native(left) and ok
        began = time.time_ns()
        self.give_up = (began, began + _FLUSH_GRACE_NS)
        self.poll_wake.set()
        with self.open_lock:
            ok = self.open_lock.wait_for(lambda: self.open <= 0, left()) and ok
        ok = self.materialiser.flush(left()) and ok
        while self.device_pending and (deadline is None or time.monotonic() < deadline):
            pause(0.001)
            ok = self.materialiser.flush(left()) and ok
        if self.gaps:
            self._apply_gaps(self.issued + 1)
        return ok and not self.device_pending

    def _flush_native(self, left: Callable[[], float | None]) -> bool:
        hook = self.native
        assert hook is not None
        if hook.forked():  # a forked child: no poller here, and nothing recorded
            return False
        began = time.time_ns()
        hook.flush_window(began, began + _FLUSH_GRACE_NS)
        if self.drain_process is not None:
            return self._flush_drain_process(hook, left)
        while True:
            if self._drain_once(0.0) == 0:
                if hook.in_flight() <= 0:
                    return True
                remaining = left()
                if remaining is not None and remaining <= 0:
                    return False
                pause(0.001)

    def _flush_drain_process(self, hook: Any, left: Callable[[], float | None]) -> bool:
        """Every record completed, sent, made into spans and metrics by the drain process and
        flushed by its providers (its acknowledgement of a marker sent after them)."""
        while hook.in_flight() > 0:
            remaining = left()
            if (remaining is not None and remaining <= 0) or hook.sink_broken():
                return False
            pause(0.001)
        with self.drain_lock:  # one marker and one reader of the answers at a time
            if hook.sink_broken() or not self.drain_process.alive():
                return False
            self.markers += 1
            hook.request_marker(self.markers)
            return bool(self.drain_process.wait_ack(self.markers, left()))

    def close(self, timeout: float | None = 30.0) -> None:
        """:meth:`flush`, then stop the background threads; never raises."""
        try:
            self._close(timeout)
        except Exception as exc:
            log_once("torch.distributed.close", "%s: %s", type(exc).__name__, exc)
        finally:
            self.drain_binding.close()

    def _close(self, timeout: float | None) -> None:
        atexit.unregister(self.close_at_exit)
        self.flush(timeout)
        self.closed = True
        self.drain_wake.set()
        if getattr(self, "watch", None) is not None:
            self.watch.stop()
        if self.native is not None:
            if self.drainer is not None and self.drainer.is_alive():
                self.drainer.join(timeout)
            with self.drain_lock:
                self.native.shutdown()
            if self.drain_process is not None and not self.drain_process.close(timeout):
                log_once(
                    "torch.distributed.drain_process.exit",
                    "the collective drain process did not finish cleanly",
                )
        self.poll_wake.set()
        self.tracker.close(timeout)
        self.materialiser.close(timeout)
        self.poller.join(timeout)


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

    _state: _State | None = None

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
    def _make_state(kwargs: dict[str, Any], timer: CollectiveTimer | None) -> _State:
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
        return _State(
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
