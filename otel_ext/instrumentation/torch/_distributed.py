"""``TorchDistributedInstrumentor``: one ``accel.collective`` span per ``torch.distributed`` op.

Wraps all_reduce, all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor,
all_to_all, all_to_all_single, broadcast, reduce, barrier, send, recv, isend, irecv and
batch_isend_irecv (and all_gather_single / reduce_scatter_single where torch has them), in both ``torch.distributed`` and ``torch.distributed.distributed_c10d``.

* Synchronous calls: the span covers the call.
* ``async_op=True`` (and ``isend``/``irecv``): the span ends when the work completes. Where the
  backend gives the work a future, a completion callback ends it (the true completion time)
  and the work is returned untouched; otherwise (gloo point-to-point) the work is returned
  inside a ``Work`` subclass that ends the span when ``wait()`` returns or
  ``is_completed()`` first reports true (an upper bound on the completion time).
* Attributes: op, group name (``default_pg`` for the default group, else the group's name,
  identical on every member), group size, rank in group, per-group sequence number,
  collective id (``group:seq``; point-to-point: ``group:src->dst:seq`` per ordered pair, so a
  send and its receive share it), payload bytes of this member's buffer (input for
  reductions, output for gathers), dtype, peer (group rank, p2p), ``async``, and at the end
  algbw and busbw (NCCL-tests factors). ``link_provider(op, group, seq)`` may return span
  links to the other members' spans where their contexts are known.
* Metrics (from ``meter_provider``, the global one by default), per completed op with
  ``accel.collective.op``, ``accel.collective.group`` and ``accel.device.id``:
  ``accel.collective.io`` (payload bytes), ``accel.collective.bus.io`` (payload times the
  op's bus-bandwidth factor) and ``accel.collective.time`` (seconds, counters), and the
  ``accel.collective.duration`` histogram, recorded in the collective span's context so the
  SDK's exemplars point at it. An op that fails is not counted. ``batch_isend_irecv`` is
  counted through its ``isend``/``irecv`` members only. ``accel.collective.wait.time``
  (waiting for the last member) needs every member's arrival: the analysis computes it from
  the spans (and the simulated cluster, which knows the true arrivals, emits it).
* Wrappers never change what the op does or returns: telemetry failures are logged once and
  counted; the op's own exceptions propagate unchanged (the span records them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import Link, Status, StatusCode

from otel_ext.instrumentation._common import (
    INSTRUMENTATION_NAME,
    device_attributes,
    get_tracer,
    log_once,
)
from otel_ext.instrumentation.api import collective_attributes
from otel_ext.instrumentation.collectives import (
    COLLECTIVE_DURATION_BOUNDS_S,
    SequenceCounter,
    bandwidths,
    bus_factor,
)
from semantic_conventions.attributes import (
    ACCEL_COLLECTIVE_ALGBW,
    ACCEL_COLLECTIVE_ASYNC,
    ACCEL_COLLECTIVE_BUSBW,
    ACCEL_COLLECTIVE_BYTES,
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_GROUP_SIZE,
    ACCEL_COLLECTIVE_OP,
    ACCEL_COLLECTIVE_RANK,
    ACCEL_DEVICE_ID,
    ERROR_TYPE,
)
from semantic_conventions.metrics import (
    METRIC_ACCEL_COLLECTIVE_BUS_IO,
    METRIC_ACCEL_COLLECTIVE_DURATION,
    METRIC_ACCEL_COLLECTIVE_IO,
    METRIC_ACCEL_COLLECTIVE_TIME,
    METRIC_SPECS,
)
from semantic_conventions.spans import SPAN_ACCEL_COLLECTIVE

__all__ = ["DEFAULT_GROUP_NAME", "WRAPPED_OPS", "TorchDistributedInstrumentor"]

#: The ``accel.collective.group`` of the default process group.
DEFAULT_GROUP_NAME = "default_pg"

# op -> (buffer param (index, name), buffer role, group param, async param)
# role: "in"/"out" = a tensor, "in_list"/"out_list" = a list of tensors, None = no payload.
_SPECS: dict[
    str, tuple[tuple[int, str] | None, str | None, tuple[int, str], tuple[int, str] | None]
] = {
    "all_reduce": ((0, "tensor"), "t", (2, "group"), (3, "async_op")),
    "all_gather": ((0, "tensor_list"), "list", (2, "group"), (3, "async_op")),
    "all_gather_into_tensor": ((0, "output_tensor"), "t", (2, "group"), (3, "async_op")),
    "reduce_scatter": ((1, "input_list"), "list", (3, "group"), (4, "async_op")),
    "reduce_scatter_tensor": ((1, "input"), "t", (3, "group"), (4, "async_op")),
    "all_gather_single": ((0, "output_tensor"), "t", (2, "group"), (3, "async_op")),
    "reduce_scatter_single": ((1, "input"), "t", (3, "group"), (4, "async_op")),
    "all_to_all": ((1, "input_tensor_list"), "list", (2, "group"), (3, "async_op")),
    "all_to_all_single": ((1, "input"), "t", (4, "group"), (5, "async_op")),
    "broadcast": ((0, "tensor"), "t", (2, "group"), (3, "async_op")),
    "reduce": ((0, "tensor"), "t", (3, "group"), (4, "async_op")),
    "barrier": (None, None, (0, "group"), (1, "async_op")),
    "send": ((0, "tensor"), "t", (2, "group"), None),
    "recv": ((0, "tensor"), "t", (2, "group"), None),
    "isend": ((0, "tensor"), "t", (2, "group"), None),
    "irecv": ((0, "tensor"), "t", (2, "group"), None),
}
#: Every op the instrumentor wraps.
WRAPPED_OPS = (*_SPECS, "batch_isend_irecv")
_P2P_PEER = {"send": (1, "dst", 4, "group_dst"), "isend": (1, "dst", 4, "group_dst"),
             "recv": (1, "src", 4, "group_src"), "irecv": (1, "src", 4, "group_src")}  # fmt: skip


def _arg(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    where: tuple[int, str] | None,
    default: Any = None,
) -> Any:
    if where is None:
        return default
    index, name = where
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _payload(value: Any, role: str | None) -> tuple[int, str | None]:
    if role is None or value is None:
        return 0, None
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size(), str(value.dtype).removeprefix("torch.")
    tensors = [t for t in value if isinstance(t, torch.Tensor)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    return nbytes, (str(tensors[0].dtype).removeprefix("torch.") if tensors else None)


class _Metrics:
    """The collective instruments, from one meter; :meth:`record` never raises."""

    def __init__(self, meter_provider: Any):
        meter = metrics.get_meter(INSTRUMENTATION_NAME, "0.1.0", meter_provider=meter_provider)

        def unit(name: str) -> str:
            return str(METRIC_SPECS[name]["unit"])

        self.io = meter.create_counter(
            METRIC_ACCEL_COLLECTIVE_IO,
            unit=unit(METRIC_ACCEL_COLLECTIVE_IO),
            description="Payload bytes of completed collectives.",
        )
        self.bus = meter.create_counter(
            METRIC_ACCEL_COLLECTIVE_BUS_IO,
            unit=unit(METRIC_ACCEL_COLLECTIVE_BUS_IO),
            description="Payload bytes times the op's bus-bandwidth factor.",
        )
        self.time = meter.create_counter(
            METRIC_ACCEL_COLLECTIVE_TIME,
            unit=unit(METRIC_ACCEL_COLLECTIVE_TIME),
            description="Time spent inside collectives (enter to exit).",
        )
        self.duration = meter.create_histogram(
            METRIC_ACCEL_COLLECTIVE_DURATION,
            unit=unit(METRIC_ACCEL_COLLECTIVE_DURATION),
            description="Duration of one member's part in a collective.",
            explicit_bucket_boundaries_advisory=list(COLLECTIVE_DURATION_BOUNDS_S),
        )
        self._attrs: dict[tuple[str, str, str | None], dict[str, Any]] = {}

    def attributes(self, op: str, group: str, device: str | None) -> dict[str, Any]:
        """The (cached) metric attributes of ``op`` on ``group`` from ``device``."""
        key = (op, group, device)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = {ACCEL_COLLECTIVE_OP: op, ACCEL_COLLECTIVE_GROUP: group}
            if device is not None:
                attrs[ACCEL_DEVICE_ID] = device
            self._attrs[key] = attrs
        return attrs

    def record(self, finish: _Finisher, duration_ns: int) -> None:
        """Count one completed op, in its span's context (exemplars link to the span)."""
        attrs = finish.metric_attrs
        if attrs is None:
            return
        ctx = trace.set_span_in_context(finish.span)
        seconds = duration_ns / 1e9
        self.io.add(finish.nbytes, attrs, context=ctx)
        self.bus.add(finish.nbytes * bus_factor(finish.op, finish.group_size), attrs, context=ctx)
        self.time.add(seconds, attrs, context=ctx)
        self.duration.record(seconds, attrs, context=ctx)


class _Finisher:
    """Ends one span once (from a callback, a ``wait()`` or the sync path), with bandwidths."""

    __slots__ = (
        "_lock",
        "done",
        "group_size",
        "metric_attrs",
        "metrics",
        "nbytes",
        "on_done",
        "op",
        "span",
        "start_ns",
    )

    def __init__(
        self,
        span: Any,
        op: str,
        nbytes: int,
        group_size: int,
        start_ns: int,
        *,
        metrics: _Metrics | None = None,
        metric_attrs: dict[str, Any] | None = None,
    ):
        self.span = span
        self.op = op
        self.nbytes = nbytes
        self.group_size = group_size
        self.start_ns = start_ns
        self.metrics = metrics
        self.metric_attrs = metric_attrs
        self.done = False
        self.on_done: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def __call__(self, error: BaseException | None = None) -> None:
        with self._lock:
            if self.done:
                return
            self.done = True
        try:
            end = time.time_ns()
            algbw, busbw = bandwidths(self.op, self.nbytes, end - self.start_ns, self.group_size)
            self.span.set_attribute(ACCEL_COLLECTIVE_ALGBW, algbw)
            self.span.set_attribute(ACCEL_COLLECTIVE_BUSBW, busbw)
            if error is not None:
                self.span.set_attribute(ERROR_TYPE, type(error).__qualname__)
                self.span.set_status(Status(StatusCode.ERROR, str(error)))
            self.span.end(end_time=end)
            if error is None and self.metrics is not None:
                self.metrics.record(self, end - self.start_ns)
        except Exception as exc:
            log_once("torch.distributed.finish", "%s: %s", type(exc).__name__, exc)
        if self.on_done is not None:
            try:
                self.on_done()
            except Exception as exc:
                log_once("torch.distributed.on_done", "%s: %s", type(exc).__name__, exc)


class _TracedWork(dist.Work):  # type: ignore[misc]
    """A ``Work`` that ends its span when the wrapped work is seen complete."""

    def __init__(self, inner: Any, finish: Callable[..., None]):
        super().__init__()
        self._inner = inner
        self._finish = finish

    def wait(self, timeout: Any = None) -> bool:
        try:
            result = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        except BaseException as exc:
            self._finish(exc)
            raise
        self._finish()
        return bool(result)

    def is_completed(self) -> bool:
        completed = bool(self._inner.is_completed())
        if completed:
            self._finish()
        return completed

    def is_success(self) -> bool:
        return bool(self._inner.is_success())

    def exception(self) -> Any:
        return self._inner.exception()

    def source_rank(self) -> int:
        return int(self._inner.source_rank())

    def result(self) -> Any:
        return self._inner.result()

    def synchronize(self) -> None:
        self._inner.synchronize()

    def get_future(self) -> Any:
        return self._inner.get_future()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)


class _State:
    def __init__(
        self,
        *,
        tracer_provider: Any,
        meter_provider: Any,
        link_provider: Callable[[str, str, int], Sequence[Link]] | None,
        device: str | None,
        host_id: str | None,
    ):
        self.tracer = get_tracer(tracer_provider)
        self.metrics = _Metrics(meter_provider)
        self.link_provider = link_provider
        self.device = device
        self.host_id = host_id
        self.seqs = SequenceCounter()
        self.groups: dict[int, tuple[Any, str, int, int]] = {}
        self.identity: dict[str, dict[str, Any]] = {}
        self.tls = threading.local()
        self.originals: dict[str, Callable[..., Any]] = {}

    def group_info(self, group: Any) -> tuple[str, int, int]:
        """``(name, size, rank in group)`` of ``group`` (``None``: the default group)."""
        pg = group if group is not None else c10d._get_default_group()
        cached = self.groups.get(id(pg))
        if cached is not None and cached[0] is pg:
            return cached[1], cached[2], cached[3]
        name = DEFAULT_GROUP_NAME if pg is c10d._get_default_group() else str(pg.group_name)
        info = (pg, name, dist.get_world_size(pg), dist.get_rank(pg))
        self.groups[id(pg)] = info
        return info[1], info[2], info[3]

    def identity_for(self, tensor: Any) -> dict[str, Any]:
        device = self.device or (str(tensor.device) if isinstance(tensor, torch.Tensor) else "cpu")
        attrs = self.identity.get(device)
        if attrs is None:
            rank = dist.get_rank() if dist.is_initialized() else None
            attrs = self.identity[device] = device_attributes(
                device, host_id=self.host_id, rank=rank
            )
        return attrs

    def peer_of(
        self, op: str, group: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> int | None:
        i, name, gi, gname = _P2P_PEER[op]
        group_peer = _arg(args, kwargs, (gi, gname))
        if group_peer is not None:
            return int(group_peer)
        peer = _arg(args, kwargs, (i, name))
        if peer is None:
            return None
        pg = group if group is not None else c10d._get_default_group()
        return (
            int(dist.get_group_rank(pg, peer)) if pg is not c10d._get_default_group() else int(peer)
        )

    def depth(self) -> int:
        return getattr(self.tls, "depth", 0)

    def wrap(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        buf_at, role, group_at, async_at = _SPECS[op]
        p2p = op in _P2P_PEER
        always_async = op in ("isend", "irecv")
        state = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if state.depth() > 0 and not getattr(state.tls, "allow_nested", False):
                return original(*args, **kwargs)
            started = state._start(
                op, buf_at, role, group_at, async_at, p2p, always_async, args, kwargs
            )
            if started is None:
                return original(*args, **kwargs)
            finish, is_async, late_recv = started
            state.tls.depth = state.depth() + 1
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                finish(exc)
                raise
            finally:
                state.tls.depth -= 1
            return state._complete(finish, result, is_async, late_recv)

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(original, "__name__", op)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper

    def _start(
        self,
        op: str,
        buf_at: tuple[int, str] | None,
        role: str | None,
        group_at: tuple[int, str],
        async_at: tuple[int, str] | None,
        p2p: bool,
        always_async: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[_Finisher, bool, tuple[str, int] | None] | None:
        try:
            group = _arg(args, kwargs, group_at)
            gname, gsize, grank = self.group_info(group)
            if grank < 0:  # not a member: the op is a no-op here
                return None
            buf = _arg(args, kwargs, buf_at)
            nbytes, dtype = _payload(buf, role)
            is_async = always_async or bool(_arg(args, kwargs, async_at, False))
            peer = self.peer_of(op, group, args, kwargs) if p2p else None
            late_recv = None
            attrs: dict[str, Any]
            if p2p and peer is None:  # recv from any source: sequenced at completion
                attrs = {
                    ACCEL_COLLECTIVE_OP: op,
                    ACCEL_COLLECTIVE_GROUP: gname,
                    ACCEL_COLLECTIVE_GROUP_SIZE: gsize,
                    ACCEL_COLLECTIVE_RANK: grank,
                    ACCEL_COLLECTIVE_BYTES: nbytes,
                    ACCEL_COLLECTIVE_ASYNC: is_async,
                }
                late_recv = (gname, grank)
                seq = -1
            else:
                if p2p:
                    sending = op in ("send", "isend")
                    key: Any = (gname, grank, peer) if sending else (gname, peer, grank)
                else:
                    key = gname
                seq = self.seqs.next(key)
                attrs = collective_attributes(
                    op, group=gname, group_size=gsize, rank=grank, seq=seq, nbytes=nbytes,
                    dtype=dtype, peer=peer, is_async=is_async,
                )  # fmt: skip
            attrs.update(self.identity_for(buf if isinstance(buf, torch.Tensor) else None))
            links = self.link_provider(op, gname, seq) if self.link_provider and seq >= 0 else ()
            start = time.time_ns()
            span = self.tracer.start_span(
                SPAN_ACCEL_COLLECTIVE, attributes=attrs, links=links, start_time=start
            )
            metric_attrs = self.metrics.attributes(op, gname, attrs.get(ACCEL_DEVICE_ID))
            finish = _Finisher(
                span, op, nbytes, gsize, start, metrics=self.metrics, metric_attrs=metric_attrs
            )
            return finish, is_async, late_recv
        except Exception as exc:
            log_once(f"torch.distributed.{op}", "%s: %s", type(exc).__name__, exc)
            return None

    def _complete(
        self, finish: _Finisher, result: Any, is_async: bool, late_recv: tuple[str, int] | None
    ) -> Any:
        try:
            if late_recv is not None and not is_async and isinstance(result, int):
                self._sequence_recv(finish, late_recv, result)
            if not is_async or result is None:
                finish()
                return result
            if late_recv is None:
                try:
                    fut = result.get_future()
                except Exception:
                    fut = None
                if fut is not None:
                    fut.then(lambda f: finish(_future_error(f)))
                    return result
            return _TracedWork(result, finish)
        except Exception as exc:
            log_once("torch.distributed.complete", "%s: %s", type(exc).__name__, exc)
            finish()
            return result

    def _sequence_recv(self, finish: _Finisher, late: tuple[str, int], src_global: int) -> None:
        gname, grank = late
        peer = src_global
        seq = self.seqs.next((gname, peer, grank))
        attrs = collective_attributes(
            "recv", group=gname, group_size=finish.group_size, rank=grank, seq=seq,
            nbytes=finish.nbytes, peer=peer,
        )  # fmt: skip
        finish.span.set_attributes(attrs)

    def wrap_batch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        state = self

        def batch_isend_irecv(p2p_op_list: list[Any]) -> Any:
            if state.depth() > 0:
                return original(p2p_op_list)
            finish = None
            try:
                gname, gsize, grank = state.group_info(p2p_op_list[0].group)
                nbytes = sum(o.tensor.numel() * o.tensor.element_size() for o in p2p_op_list)
                attrs: dict[str, Any] = {
                    ACCEL_COLLECTIVE_OP: "batch_isend_irecv",
                    ACCEL_COLLECTIVE_GROUP: gname,
                    ACCEL_COLLECTIVE_GROUP_SIZE: gsize,
                    ACCEL_COLLECTIVE_RANK: grank,
                    ACCEL_COLLECTIVE_BYTES: nbytes,
                    ACCEL_COLLECTIVE_ASYNC: True,
                    **state.identity_for(p2p_op_list[0].tensor),
                }
                start = time.time_ns()
                span = state.tracer.start_span(
                    SPAN_ACCEL_COLLECTIVE, attributes=attrs, start_time=start
                )
                finish = _Finisher(span, "batch_isend_irecv", nbytes, gsize, start)
                ctx_token = _attach_span(span)
            except Exception as exc:
                log_once("torch.distributed.batch_isend_irecv", "%s: %s", type(exc).__name__, exc)
                return original(p2p_op_list)
            state.tls.allow_nested = True
            try:
                works = original(p2p_op_list)
            except BaseException as exc:
                finish(exc)
                raise
            finally:
                state.tls.allow_nested = False
                _detach(ctx_token)
            try:
                if not works:
                    finish()
                    return works
                remaining = [len(works)]
                lock = threading.Lock()

                def one_done(error: BaseException | None = None) -> None:
                    with lock:
                        remaining[0] -= 1
                        last = remaining[0] == 0
                    if last:
                        finish(error)

                return [_TracedWork(w, _Once(one_done)) for w in works]
            except Exception as exc:
                log_once("torch.distributed.batch_complete", "%s: %s", type(exc).__name__, exc)
                finish()
                return works

        batch_isend_irecv.__wrapped__ = original  # type: ignore[attr-defined]
        return batch_isend_irecv


class _Once:
    __slots__ = ("_done", "_func")

    def __init__(self, func: Callable[..., None]):
        self._func = func
        self._done = False

    def __call__(self, error: BaseException | None = None) -> None:
        if not self._done:
            self._done = True
            self._func(error)


def _future_error(fut: Any) -> BaseException | None:
    try:
        fut.value()
    except Exception as exc:
        return exc
    return None


def _attach_span(span: Any) -> Any:
    from opentelemetry import context, trace

    return context.attach(trace.set_span_in_context(span))


def _detach(token: Any) -> None:
    from opentelemetry import context

    try:
        context.detach(token)
    except Exception:  # pragma: no cover
        pass


class TorchDistributedInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Spans for ``torch.distributed`` collectives and point-to-point ops (a singleton).

    ``instrument(**options)`` options: ``tracer_provider``; ``meter_provider`` (the
    ``accel.collective.io``, ``.bus.io``, ``.time`` counters and ``.duration`` histogram; the
    global provider by default); ``link_provider`` (a callable ``(op, group, seq) -> links``);
    ``device`` and ``host_id`` (identity; derived when omitted).
    Sequence numbers restart at 0 with each ``instrument()``; instrument on every rank before
    the first collective so they agree.

    >>> inst = TorchDistributedInstrumentor()
    >>> list(inst.instrumentation_dependencies())
    ['torch >= 2.0']
    """

    _state: _State | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The instrumented library: PyTorch 2 or later."""
        return ("torch >= 2.0",)

    def _instrument(self, **kwargs: Any) -> None:
        state = _State(
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            link_provider=kwargs.get("link_provider"),
            device=kwargs.get("device"),
            host_id=kwargs.get("host_id"),
        )
        for op in WRAPPED_OPS:
            original = getattr(c10d, op, None)
            if original is None:  # an op this torch version does not have
                continue
            state.originals[op] = original
            wrapped = (
                state.wrap_batch(original)
                if op == "batch_isend_irecv"
                else state.wrap(op, original)
            )
            setattr(c10d, op, wrapped)
            setattr(dist, op, wrapped)
        self._state = state

    def _uninstrument(self, **kwargs: Any) -> None:
        state, self._state = self._state, None
        if state is None:
            return
        for op, original in state.originals.items():
            for module in (c10d, dist):
                current = getattr(module, op, None)
                if getattr(current, "__wrapped__", None) is original:
                    setattr(module, op, original)

    @property
    def sequences(self) -> SequenceCounter | None:
        """The per-group sequence counters (``None`` when uninstrumented)."""
        return None if self._state is None else self._state.seqs
