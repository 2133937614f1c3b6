"""``TorchLayerInstrumentor``: one ``accel.layer`` span per module call, nested as modules nest.

Forward pre/post hooks open and close a span per traced module; the span is current while the
module runs, so anything inside (a collective, a user span) nests under it. Attributes:
``accel.layer.name`` (qualified module path; the root gets ``root_name``), ``.index``,
``.type``, ``.depth``, ``.pass``, ``.parameters``, the device identity, FLOP and byte
estimates (inclusive: a layer counts the estimated work of everything it ran, so a block
traced without its children still gets its total), and input/output shapes and dtypes when
``record_shapes=True``.

With ``model=`` each traced module's ``forward`` is replaced by a recording wrapper (a method
bound to the module, removed by ``uninstrument()``): ``Module.__call__`` then keeps its
no-hook fast path, which saves PyTorch's hook dispatch (about 1.4 us per call);
``patch_forward=False`` uses forward pre/post hooks instead, as does a module whose
``forward`` someone else already replaced. Without ``model=``, global module hooks trace every
module call (what ``opentelemetry-instrument`` gets). With ``deferred=True`` the workload
thread only writes timestamps (and the FLOP/byte estimates of estimable layers) into a
:class:`~otel_ext.instrumentation.deferred.DeferredSpanRecorder`, which materialises the same
spans on a background thread. With ``backward=True`` full backward hooks add
``accel.layer.pass = backward`` spans. On CUDA, each traced layer also records a pair of CUDA
events; a background thread turns their elapsed times into ``accel.kernel`` device-activity
children (clock domain ``<device>/cuda-events``, uncertainty = the bound on when the anchor
event ran).

>>> import torch
>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
>>> inst = TorchLayerInstrumentor()
>>> inst.instrument(tracer_provider=provider, model=model, host_id="h0")
>>> _ = model(torch.zeros(2, 4))
>>> inst.uninstrument()
>>> [s.attributes["accel.layer.name"] for s in exporter.get_finished_spans()]
['0', '1', 'Sequential']
"""

from __future__ import annotations

import fnmatch
import threading
import time
import types
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from torch import nn
from torch.utils.hooks import RemovableHandle

from otel_ext.instrumentation._common import (
    bind_drops,
    device_attributes,
    get_tracer,
    local_device,
    log_once,
    pause,
)
from otel_ext.instrumentation.deferred import BoundedHandoff, DeferredSpanRecorder
from otel_ext.instrumentation.estimators import BACKWARD_FLOP_FACTOR
from otel_ext.instrumentation.provider_drain import register as register_drain
from otel_ext.instrumentation.torch._flops import (
    Estimator,
    local_numel,
    module_estimator,
    sdpa_estimate,
)
from otel_ext.semconv.attributes import (
    ACCEL_CLOCK_DOMAIN,
    ACCEL_CLOCK_RAW_END_TICKS,
    ACCEL_CLOCK_RAW_START_TICKS,
    ACCEL_CLOCK_UNCERTAINTY_NS,
    ACCEL_DEVICE_ID,
    ACCEL_KERNEL_KIND,
    ACCEL_KERNEL_NAME,
    ACCEL_LAYER_BYTES,
    ACCEL_LAYER_DEPTH,
    ACCEL_LAYER_FLOPS,
    ACCEL_LAYER_INDEX,
    ACCEL_LAYER_INPUT_DTYPES,
    ACCEL_LAYER_INPUT_SHAPES,
    ACCEL_LAYER_NAME,
    ACCEL_LAYER_OUTPUT_DTYPES,
    ACCEL_LAYER_OUTPUT_SHAPES,
    ACCEL_LAYER_PARAMETERS,
    ACCEL_LAYER_PASS,
    ACCEL_LAYER_TYPE,
    ACCEL_RANK,
)
from otel_ext.semconv.spans import SPAN_ACCEL_KERNEL, SPAN_ACCEL_LAYER

__all__ = ["TorchLayerInstrumentor"]

_time_ns = time.time_ns
#: ``torch.compile`` understands this call (constant ``True`` while it traces), so every
#: recording step below is skipped inside compiled regions: no graph break, no ContextVar.
_is_compiling = torch.compiler.is_compiling
_attach = otel_context.attach
_detach = otel_context.detach
_set_span = trace.set_span_in_context


class _Meta:
    """What is fixed about one module: its name, attributes, estimator, whether it is traced."""

    __slots__ = (
        "attrs",
        "attrs_bwd",
        "cuda",
        "depth",
        "estimator",
        "lean",
        "lid",
        "name",
        "traced",
    )

    def __init__(self, name: str, attrs: dict[str, Any], estimator: Estimator | None, traced: bool):
        self.name = name
        self.attrs = attrs
        self.attrs_bwd = {**attrs, ACCEL_LAYER_PASS: "backward"}
        self.estimator = estimator
        self.traced = traced
        self.depth = attrs[ACCEL_LAYER_DEPTH]
        self.lid = -1
        self.cuda = False
        self.lean = False  # deferred, traced, nothing to compute: timestamps only


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, torch.Tensor)]
    if isinstance(value, Mapping):
        return [v for v in value.values() if isinstance(v, torch.Tensor)]
    return []


def _shapes(tensors: Iterable[torch.Tensor]) -> tuple[list[str], list[str]]:
    shapes, dtypes = [], []
    for t in tensors:
        shapes.append(str(list(t.shape)))
        dtypes.append(str(t.dtype).removeprefix("torch."))
    return shapes, dtypes


def _shape_attributes(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any, extra: dict[str, Any] | None
) -> dict[str, Any]:
    extra = extra or {}
    ins, in_dtypes = _shapes(_tensors(args) + _tensors(kwargs))
    outs, out_dtypes = _shapes(_tensors(output))
    extra[ACCEL_LAYER_INPUT_SHAPES] = ins
    extra[ACCEL_LAYER_INPUT_DTYPES] = in_dtypes
    extra[ACCEL_LAYER_OUTPUT_SHAPES] = outs
    extra[ACCEL_LAYER_OUTPUT_DTYPES] = out_dtypes
    return extra


def _module_device(module: nn.Module) -> torch.device | None:
    for p in module.parameters():
        return p.device
    for b in module.buffers():
        return b.device
    return None


class _Frame:
    __slots__ = ("bytes", "cuda", "estimated", "flops", "meta", "span", "token")

    def __init__(self, meta: _Meta, span: Any, token: Any):
        self.meta = meta
        self.span = span
        self.token = token
        self.bytes = 0.0
        self.flops = 0.0
        self.estimated = False
        self.cuda: Any = None


class _ForwardPatch:
    """Removes a recording ``forward`` wrapper from a module (the handle of a patch)."""

    __slots__ = ("method", "module")

    def __init__(self, module: nn.Module, method: types.MethodType):
        self.module = weakref.ref(module)
        self.method = method

    def remove(self) -> None:
        module = self.module()
        if module is not None and vars(module).get("forward") is self.method:
            del vars(module)["forward"]


class _CudaTimer:
    """CUDA events per traced layer, resolved to ``accel.kernel`` spans off the workload thread.

    The events wait in a :class:`~otel_ext.instrumentation.deferred.BoundedHandoff` of
    ``capacity`` layers: when the resolver is behind, new layers' events are dropped and
    counted (:attr:`dropped`), never queued without bound.
    """

    def __init__(
        self, tracer: trace.Tracer, *, capacity: int = 1 << 14, tracer_provider: Any = None
    ):
        self._tracer = tracer
        self._handoff = BoundedHandoff(
            self._resolve, capacity=capacity, name="otel-ext-cuda-events", interval=0.05
        )
        #: the tracer provider's force_flush()/shutdown() resolve the events first
        self._drain = register_drain(self, tracer_provider)

    @property
    def dropped(self) -> int:
        """Layers whose events were dropped because the queue was full."""
        return self._handoff.dropped

    def start(self) -> tuple[Any, int]:
        ev = torch.cuda.Event(enable_timing=True)
        host_ns = _time_ns()
        ev.record()
        return ev, host_ns

    def stop(self, started: tuple[Any, int], name: str, device: str, span: Any) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._handoff.put((started[0], started[1], end, name, device, span.get_span_context()))

    def _resolve(self, batch: list[tuple[Any, ...]]) -> None:  # pragma: no cover - needs CUDA
        for start, host_ns, end, name, device, parent in batch:
            try:
                # The start event ran after it was recorded (host_ns) and before we saw it
                # complete: that window bounds its device time.
                while not start.query():
                    pause(0.0005)
                seen_ns = _time_ns()
                end.synchronize()
                dur_ns = int(start.elapsed_time(end) * 1e6)
                span = self._tracer.start_span(
                    SPAN_ACCEL_KERNEL,
                    context=_set_span(trace.NonRecordingSpan(parent)),
                    attributes={
                        ACCEL_KERNEL_NAME: name,
                        ACCEL_KERNEL_KIND: "compute",
                        ACCEL_CLOCK_DOMAIN: f"{device}/cuda-events",
                        ACCEL_CLOCK_RAW_START_TICKS: 0,
                        ACCEL_CLOCK_RAW_END_TICKS: dur_ns,
                        ACCEL_CLOCK_UNCERTAINTY_NS: seen_ns - host_ns,
                    },
                    start_time=host_ns,
                )
                span.end(end_time=host_ns + dur_ns)
            except Exception as exc:
                log_once("torch.layers.cuda", "%s: %s", type(exc).__name__, exc)

    def flush(self, timeout: float | None = 30.0) -> bool:
        self._drain.ensure()
        return self._handoff.flush(timeout)

    def pending(self) -> int:
        """Layers whose events are not yet spans."""
        return self._handoff.waiting

    def close(self) -> None:
        self._handoff.close(10.0)
        self._drain.close()


class _LayerInstrumentation:
    """The layer tracing one ``instrument()`` call set up (tracer, options, module hooks and
    their per-module metadata, the deferred recorder and CUDA timer); dropped by
    ``uninstrument()``."""

    def __init__(
        self,
        *,
        tracer_provider: Any,
        max_depth: int | None,
        include: Sequence[str] | None,
        exclude: Sequence[str],
        record_shapes: bool,
        estimate: bool,
        backward: bool,
        deferred: bool,
        deferred_capacity: int,
        patch_forward: bool,
        root_name: str | None,
        device: str | None,
        host_id: str | None,
        rank: int | None,
    ):
        self.tracer = get_tracer(tracer_provider)
        self.max_depth = max_depth
        self.include = tuple(include) if include is not None else None
        self.exclude = tuple(exclude)
        self.record_shapes = record_shapes
        self.estimate = estimate
        self.backward = backward
        self.root_name = root_name
        self.device = device
        self.host_id = host_id
        if rank is None and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = torch.distributed.get_rank()
        self.rank = rank
        self.recorder = (
            DeferredSpanRecorder(tracer_provider=tracer_provider, capacity=deferred_capacity)
            if deferred
            else None
        )
        self.tls = threading.local()
        self.metas: weakref.WeakKeyDictionary[nn.Module, _Meta] = weakref.WeakKeyDictionary()
        self.est_cache: dict[tuple[Any, ...], tuple[float, float]] = {}
        self.handles: list[RemovableHandle | _ForwardPatch] = []
        self.global_kwargs_ids: list[int] = []
        self.hooked: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.patch_forward = patch_forward
        self.cuda = (
            _CudaTimer(self.tracer, tracer_provider=tracer_provider)
            if torch.cuda.is_available() and not deferred
            else None
        )
        bind_drops(None)  # the drops are exported by the global meter provider, if an SDK one

    # -- metadata ------------------------------------------------------------------------
    def _traced(self, name: str, depth: int) -> bool:
        if self.max_depth is not None and depth > self.max_depth:
            return False
        if self.include is not None and not any(fnmatch.fnmatchcase(name, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in self.exclude)

    def build(
        self, root: nn.Module, *, depth0: int = 0, prefix: str = ""
    ) -> list[tuple[nn.Module, _Meta]]:
        """Compute (and remember) the metadata of every module under ``root``."""
        index: dict[int, int] = {id(root): 0}
        for _, parent in root.named_modules():
            for i, (cname, child) in enumerate(parent.named_children()):
                index.setdefault(id(child), int(cname) if cname.isdecimal() else i)
        root_label = prefix or self.root_name or type(root).__name__
        out = []
        for qual, module in root.named_modules():
            if module in self.metas:
                out.append((module, self.metas[module]))
                continue
            name = f"{prefix}.{qual}" if prefix and qual else (qual or root_label)
            depth = depth0 + (qual.count(".") + 1 if qual else 0)
            dev = _module_device(module)
            device = self.device or local_device(str(dev) if dev is not None else "cpu")
            attrs: dict[str, Any] = {
                ACCEL_LAYER_NAME: name,
                ACCEL_LAYER_INDEX: index.get(id(module), 0),
                ACCEL_LAYER_TYPE: type(module).__name__,
                ACCEL_LAYER_DEPTH: depth,
                ACCEL_LAYER_PASS: "forward",
                ACCEL_LAYER_PARAMETERS: sum(local_numel(p) for p in module.parameters()),
                **device_attributes(device, host_id=self.host_id, rank=self.rank),
            }
            if self.rank is None:
                attrs.pop(ACCEL_RANK, None)
            est = module_estimator(module) if self.estimate else None
            meta = _Meta(name, attrs, est, self._traced(name, depth))
            meta.cuda = dev is not None and dev.type == "cuda" and self.cuda is not None
            if self.recorder is not None and meta.traced:
                meta.lid = self.recorder.register(SPAN_ACCEL_LAYER, attrs)
                meta.lean = est is None and not self.record_shapes and not self.backward
            self.metas[module] = meta
            out.append((module, meta))
        return out

    def lookup(self, module: nn.Module) -> _Meta:
        meta = self.metas.get(module)
        if meta is not None:
            return meta
        stack = self.stack()
        if stack:
            parent = stack[-1].meta
            self.build(
                module, depth0=parent.depth + 1, prefix=f"{parent.name}.{type(module).__name__}"
            )
        else:
            self.build(module)
        return self.metas[module]

    def stack(self) -> list[_Frame]:
        try:
            return self.tls.stack  # type: ignore[no-any-return]
        except AttributeError:
            self.tls.stack = []
            self.tls.bstack = []
            self.tls.est_depth = 0
            return self.tls.stack  # type: ignore[no-any-return]

    # -- estimates -----------------------------------------------------------------------
    def _estimate(
        self,
        meta: _Meta,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        output: Any,
    ) -> tuple[float, float] | None:
        key: tuple[Any, ...] = (id(meta),)
        for t in _tensors(args) + _tensors(kwargs):
            key += (t.shape, t.dtype)
        cached = self.est_cache.get(key)
        if cached is None:
            assert meta.estimator is not None
            cached = meta.estimator(module, args, kwargs, output)
            if len(self.est_cache) < 65536:
                self.est_cache[key] = cached
        return cached

    def add_functional(self, flops: float, nbytes: float) -> None:
        """Credit a functional op's estimate to the innermost layer, unless an estimator covers it."""
        stack = self.stack()
        if self.tls.est_depth != 0:
            return
        if self.recorder is not None:
            self.recorder.add_estimate(flops, nbytes)
        elif stack:
            frame = stack[-1]
            frame.flops += flops
            frame.bytes += nbytes
            frame.estimated = True

    # -- forward hooks -------------------------------------------------------------------
    def pre(self, meta: _Meta, module: nn.Module, args: tuple[Any, ...]) -> None:
        if _is_compiling():
            return
        stack = self.stack()
        try:
            if meta.estimator is not None:
                self.tls.est_depth += 1
            if not meta.traced:
                return
            if self.recorder is not None:
                self.recorder.begin(meta.lid)
                return
            span = self.tracer.start_span(SPAN_ACCEL_LAYER, attributes=meta.attrs)
        except Exception as exc:  # no span, nothing attached: post() finds no frame
            log_once("torch.layers.pre", "%s: %s", type(exc).__name__, exc)
            return
        try:
            frame = _Frame(meta, span, _attach(_set_span(span)))
        except Exception as exc:  # pragma: no cover - the context API does not raise here
            log_once("torch.layers.attach", "%s: %s", type(exc).__name__, exc)
            return
        stack.append(frame)
        if meta.cuda and self.cuda is not None:
            try:
                frame.cuda = self.cuda.start()
            except Exception as exc:
                log_once("torch.layers.cuda.start", "%s: %s", type(exc).__name__, exc)

    def post(
        self,
        meta: _Meta,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        output: Any,
    ) -> None:
        if _is_compiling():
            return
        try:
            stack = self.stack()
            est = None
            if meta.estimator is not None:
                self.tls.est_depth -= 1
                est = self._estimate(meta, module, args, kwargs, output)
            if self.recorder is not None:
                self._post_deferred(meta, args, kwargs, output, est)
                return
            if not meta.traced:
                if est is not None and stack:
                    top = stack[-1]
                    top.flops += est[0]
                    top.bytes += est[1]
                    top.estimated = True
                return
            # This module's frame; absent when its start failed, and then the ancestors'
            # frames must stay open. Frames above it are children whose post never ran.
            at = len(stack) - 1
            while at >= 0 and stack[at].meta is not meta:
                at -= 1
            if at < 0:
                return
            while len(stack) > at + 1:
                self._close(stack.pop(), None)
            frame = stack.pop()
            if est is not None:
                frame.flops += est[0]
                frame.bytes += est[1]
                frame.estimated = True
            if stack and frame.estimated:
                parent = stack[-1]
                parent.flops += frame.flops
                parent.bytes += frame.bytes
                parent.estimated = True
            extra: dict[str, Any] | None = None
            if frame.estimated:
                extra = {ACCEL_LAYER_FLOPS: frame.flops, ACCEL_LAYER_BYTES: frame.bytes}
            if self.record_shapes:
                extra = _shape_attributes(args, kwargs, output, extra)
            if self.backward and frame.estimated:
                self.last_forward_flops(meta, frame.flops)
            self._close(frame, extra)
        except Exception as exc:
            log_once("torch.layers.post", "%s: %s", type(exc).__name__, exc)

    def _post_deferred(
        self,
        meta: _Meta,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        output: Any,
        est: tuple[float, float] | None,
    ) -> None:
        """Deferred mode: estimates go to the recorder, which sums them up the tree."""
        recorder = self.recorder
        assert recorder is not None
        if est is not None:
            # Traced: this module's own record is the innermost open one; untraced: the
            # nearest traced ancestor's.
            recorder.add_estimate(est[0], est[1])
        if not meta.traced:
            return
        extra = _shape_attributes(args, kwargs, output, None) if self.record_shapes else None
        if self.backward:
            total = recorder.current_estimate()
            if total is not None:
                self.last_forward_flops(meta, total[0])
        recorder.end(extra)

    def last_forward_flops(self, meta: _Meta, flops: float) -> None:
        fwd = getattr(self.tls, "fwd", None)
        if fwd is None:
            fwd = self.tls.fwd = {}
        fwd[id(meta)] = flops

    def _close(self, frame: _Frame, extra: dict[str, Any] | None) -> None:
        """End the frame's span and detach its context; the detach happens whatever raises
        (a processor raising in ``on_end`` must not leave the layer's span current)."""
        span = frame.span
        try:
            if extra:
                span.set_attributes(extra)
            if frame.cuda is not None and self.cuda is not None:
                self.cuda.stop(
                    frame.cuda, frame.meta.name, frame.meta.attrs.get(ACCEL_DEVICE_ID, ""), span
                )
            span.end()
        finally:
            try:
                _detach(frame.token)
            except Exception:  # pragma: no cover - context detach failures are logged by the API
                pass

    # -- backward hooks ------------------------------------------------------------------
    def bwd_pre(self, meta: _Meta, module: nn.Module, grad_output: Any) -> None:
        if _is_compiling():
            return
        try:
            if not meta.traced:
                return
            self.stack()
            bstack = self.tls.bstack
            parent = _set_span(bstack[-1][1]) if bstack else None
            attrs = meta.attrs_bwd
            fwd = getattr(self.tls, "fwd", {}).get(id(meta))
            if fwd is not None:
                attrs = {**attrs, ACCEL_LAYER_FLOPS: fwd * BACKWARD_FLOP_FACTOR}
            span = self.tracer.start_span(SPAN_ACCEL_LAYER, context=parent, attributes=attrs)
            bstack.append((meta, span))
        except Exception as exc:
            log_once("torch.layers.bwd_pre", "%s: %s", type(exc).__name__, exc)

    def bwd_post(self, meta: _Meta, module: nn.Module, grad_input: Any, grad_output: Any) -> None:
        if _is_compiling():
            return
        try:
            if not meta.traced:
                return
            self.stack()
            bstack = self.tls.bstack
            for i in range(len(bstack) - 1, -1, -1):
                if bstack[i][0] is meta:
                    _, span = bstack.pop(i)
                    span.end()
                    return
        except Exception as exc:
            log_once("torch.layers.bwd_post", "%s: %s", type(exc).__name__, exc)

    # -- wiring --------------------------------------------------------------------------
    def hook_modules(self, model: nn.Module) -> None:
        for module, meta in self.build(model):
            if not meta.traced and meta.estimator is None:
                continue
            if module in self.hooked:  # shared by several models given to instrument()
                continue
            self.hooked.add(module)
            if self.patch_forward and self._patch_forward(module, meta):
                pass
            elif meta.lean and self.recorder is not None:
                pre, post = self.recorder.hooks(meta.lid, bypass=_is_compiling)
                self.handles.append(module.register_forward_pre_hook(pre))
                self.handles.append(module.register_forward_hook(post, always_call=True))
            else:
                self.handles.append(module.register_forward_pre_hook(partial(self.pre, meta)))
                self.handles.append(
                    module.register_forward_hook(
                        partial(self.post, meta), with_kwargs=True, always_call=True
                    )
                )
            if self.backward and meta.traced:
                self.handles.append(
                    module.register_full_backward_pre_hook(partial(self.bwd_pre, meta))
                )
                self.handles.append(
                    module.register_full_backward_hook(partial(self.bwd_post, meta))
                )

    def _patch_forward(self, module: nn.Module, meta: _Meta) -> bool:
        """Put a recording wrapper in place of ``module.forward``; False if it cannot be done.

        ``Module.__call__`` then takes its no-hook fast path straight into the wrapper,
        which skips PyTorch's hook dispatch (about 1.4 us per call here). The wrapper is a
        method bound to the module, so a ``copy.deepcopy`` of the model calls the copy's own
        ``forward``.
        """
        if "forward" in vars(module):  # someone else already replaced it: use hooks
            return False
        fn = getattr(type(module), "forward", None)
        if not isinstance(fn, types.FunctionType):
            return False
        if meta.lean and self.recorder is not None:
            recorded = self.recorder.wrap(fn, meta.lid, bypass=_is_compiling)  # timestamps only
        else:
            pre, post = self.pre, self.post

            def recorded(mod: nn.Module, *args: Any, **kwargs: Any) -> Any:
                if _is_compiling():  # inside torch.compile: the compiler sees the module only
                    return fn(mod, *args, **kwargs)
                pre(meta, mod, args)
                out = None
                try:
                    out = fn(mod, *args, **kwargs)
                    return out
                finally:
                    post(meta, mod, args, kwargs, out)

        recorded.__wrapped__ = fn  # type: ignore[attr-defined]
        method = types.MethodType(recorded, module)
        module.forward = method  # type: ignore[method-assign]
        self.handles.append(_ForwardPatch(module, method))
        return True

    def hook_global(self) -> None:
        from torch.nn.modules import module as mod

        metas_get = self.metas.get
        recorder = self.recorder
        begin = recorder.begin if recorder is not None else None
        end = recorder.end if recorder is not None else None

        def pre(module: nn.Module, args: tuple[Any, ...]) -> None:
            if _is_compiling():
                return
            meta = metas_get(module)
            if meta is None:
                try:
                    meta = self.lookup(module)
                except Exception as exc:
                    log_once("torch.layers.lookup", "%s: %s", type(exc).__name__, exc)
                    return
            if meta.lean and begin is not None:
                begin(meta.lid)
            else:
                self.pre(meta, module, args)

        def post(
            module: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], output: Any
        ) -> None:
            if _is_compiling():
                return
            meta = metas_get(module)
            if meta is None:
                return
            if meta.lean and end is not None:
                end()
            else:
                self.post(meta, module, args, kwargs, output)

        self.handles.append(mod.register_module_forward_pre_hook(pre))
        handle = mod.register_module_forward_hook(post, with_kwargs=True, always_call=True)
        self.handles.append(handle)
        # PyTorch's handle does not remove its ``with_kwargs`` flag: left behind, it makes
        # every later ``torch.compile(module)`` warn about global hooks. Removed in close().
        self.global_kwargs_ids.append(handle.id)
        if self.backward:

            def bpre(module: nn.Module, grad_output: Any) -> None:
                meta = self.metas.get(module)
                if meta is not None:
                    self.bwd_pre(meta, module, grad_output)

            def bpost(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
                meta = self.metas.get(module)
                if meta is not None:
                    self.bwd_post(meta, module, grad_input, grad_output)

            self.handles.append(mod.register_module_full_backward_pre_hook(bpre))
            self.handles.append(mod.register_module_full_backward_hook(bpost))

    def close(self) -> None:
        try:
            self._remove_everything()
        except Exception as exc:  # uninstrument() never raises into the workload
            log_once("torch.layers.close", "%s: %s", type(exc).__name__, exc)

    def _remove_everything(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if self.global_kwargs_ids:
            from torch.nn.modules import module as mod

            for hid in self.global_kwargs_ids:
                mod._global_forward_hooks_with_kwargs.pop(hid, None)
            self.global_kwargs_ids.clear()
        if self.recorder is not None:
            self.recorder.shutdown()
        if self.cuda is not None:
            self.cuda.close()


class TorchLayerInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Spans for PyTorch module calls (an OpenTelemetry ``BaseInstrumentor``; a singleton).

    ``instrument(**options)`` options (all keyword, all optional):

    * ``tracer_provider`` — where spans go (the global provider by default);
    * ``model`` — a module, or several, to hook; ``None`` hooks every module globally;
    * ``max_depth`` — trace modules at most this deep (root is 0);
    * ``include`` / ``exclude`` — ``fnmatch`` patterns on ``accel.layer.name``;
    * ``record_shapes`` — add input/output shapes and dtypes;
    * ``estimate`` — FLOP/byte estimates (default on), including
      ``F.scaled_dot_product_attention`` calls inside a layer;
    * ``backward`` — also trace backward passes (full backward hooks);
    * ``deferred`` — record on the hot path only, materialise spans on a background thread
      (``deferred_capacity`` records per thread ring);
    * ``patch_forward`` — with ``model=``, wrap each module's ``forward`` (default, cheapest)
      rather than registering forward pre/post hooks;
    * ``root_name`` — the root module's ``accel.layer.name`` (its class name by default);
    * ``device``, ``host_id``, ``rank`` — device identity (derived when omitted).

    ``uninstrument()`` removes every hook and restores ``scaled_dot_product_attention``.
    """

    _state: _LayerInstrumentation | None = None
    _sdpa_original: Callable[..., Any] | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The instrumented library: PyTorch 2 or later."""
        return ("torch >= 2.0",)

    def _instrument(self, **kwargs: Any) -> None:
        state = _LayerInstrumentation(
            tracer_provider=kwargs.get("tracer_provider"),
            max_depth=kwargs.get("max_depth"),
            include=kwargs.get("include"),
            exclude=kwargs.get("exclude", ()),
            record_shapes=bool(kwargs.get("record_shapes", False)),
            estimate=bool(kwargs.get("estimate", True)),
            backward=bool(kwargs.get("backward", False)),
            deferred=bool(kwargs.get("deferred", False)),
            deferred_capacity=int(kwargs.get("deferred_capacity", 1 << 16)),
            patch_forward=bool(kwargs.get("patch_forward", True)),
            root_name=kwargs.get("root_name"),
            device=kwargs.get("device"),
            host_id=kwargs.get("host_id"),
            rank=kwargs.get("rank"),
        )
        model = kwargs.get("model")
        if model is None:
            state.hook_global()
        else:
            for m in [model] if isinstance(model, nn.Module) else list(model):
                state.hook_modules(m)
        if state.estimate:
            self._patch_sdpa(state)
        self._state = state

    def _patch_sdpa(self, state: _LayerInstrumentation) -> None:
        original = F.scaled_dot_product_attention

        def scaled_dot_product_attention(
            query: Any, key: Any, value: Any, *args: Any, **kwargs: Any
        ) -> Any:
            out = original(query, key, value, *args, **kwargs)
            if _is_compiling():
                return out
            try:
                state.add_functional(*sdpa_estimate(query, key, value))
            except Exception as exc:
                log_once("torch.layers.sdpa", "%s: %s", type(exc).__name__, exc)
            return out

        scaled_dot_product_attention.__wrapped__ = original  # type: ignore[attr-defined]
        self._sdpa_original = original
        F.scaled_dot_product_attention = scaled_dot_product_attention  # type: ignore[assignment]

    def _uninstrument(self, **kwargs: Any) -> None:
        state, self._state = self._state, None
        if self._sdpa_original is not None:
            if getattr(F.scaled_dot_product_attention, "__wrapped__", None) is self._sdpa_original:
                F.scaled_dot_product_attention = self._sdpa_original  # type: ignore[assignment]
            self._sdpa_original = None
        if state is not None:
            state.close()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until deferred spans are materialised (True at once in eager mode)."""
        state = self._state
        if state is None:
            return True
        try:
            ok = state.cuda.flush(timeout) if state.cuda is not None else True
            return (state.recorder.flush(timeout) if state.recorder is not None else True) and ok
        except Exception as exc:  # never raises into the workload
            log_once("torch.layers.flush", "%s: %s", type(exc).__name__, exc)
            return False

    @property
    def hook_count(self) -> int:
        """Hooks and forward wrappers currently in place (0 when uninstrumented)."""
        return 0 if self._state is None else len(self._state.handles)
