"""The collective instrumentation's recording kernels and their registration.

:class:`CollectiveHooks` is the layer of the recording state that puts the recording kernels
in the dispatcher: the native ones (``_c10d_hook.cpp`` through :mod:`._c10d_native`: a C++
ring, poller and, on request, a drain process) or the Python ones (:meth:`CollectiveHooks.kernel`:
two host timestamps, the timer's token and one bounded put per call), the pass-through kernels
of the functional collectives, the collective watch; and takes them out again.
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry import trace as otel_trace

from otel_ext.instrumentation._common import (
    log_once,
)
from otel_ext.instrumentation.collective_records import (
    DEFAULT_GROUP_NAME,
)
from otel_ext.instrumentation.torch._dist_drain import CollectiveDrain
from otel_ext.instrumentation.torch._dist_ops import (
    _DISPATCH_KEYS,
    _OPS,
    _ROLES,
    _SYMM_MEM_KEYS,
    _SYMM_MEM_OPS,
    _first_tensor,
    _functional_ops,
    _Op,
    _otel_context_var,
    _pass_through,
)


class CollectiveHooks(CollectiveDrain):
    """The recording kernels and their registration (see the module doc)."""

    tracer_provider_given: Any
    meter_provider: Any
    telemetry: Any
    drain_mode: str
    device: str | None
    host_id: str | None
    libraries: list[Any]
    native_install: Any
    native_ops: list[str]  # "namespace::op" of each native recording kernel
    #: what :meth:`set_native_kernels` re-registers: (module, ops with their keys, functional)
    native_registration: tuple[Any, list[tuple[str, str, list[str]]], list[str]] | None

    def _init_hooks(self) -> None:
        """No kernel registered yet."""
        self.libraries = []
        self.native_install = None
        self.native_ops = []
        self.native_registration = None

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
