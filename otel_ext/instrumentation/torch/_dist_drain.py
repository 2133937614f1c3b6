"""The collective instrumentation's native drain, and flush and close of all of it.

:class:`CollectiveDrain` is the layer of the recording state that takes the native hook's
completed records (the C++ ring) in batches on a background *drain* thread and makes their
spans and metrics (:class:`~otel_ext.instrumentation.collective_records.NativeRecordEmitter`;
or, with ``drain="process"``, hands them to a drain process); ``flush()`` waits for every
path (the tracker, the native ring, the poller, the materialiser, device timings) and
``close()`` stops the threads.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from typing import Any

from otel_ext.instrumentation._common import (
    bind_drops,
    log_once,
    pause,
)
from otel_ext.instrumentation.collective_records import (
    DEFAULT_GROUP_NAME,
    NativeRecordEmitter,
)
from otel_ext.instrumentation.collectives import (
    collective_id,
    p2p_id,
)
from otel_ext.instrumentation.provider_drain import register as register_drain
from otel_ext.instrumentation.torch._device_timing import DeviceTiming
from otel_ext.instrumentation.torch._dist_ops import _Op
from otel_ext.instrumentation.torch._dist_tracker import (
    CollectiveTracker,
    _Entry,
    _NativeFailure,
)

_FLUSH_GRACE_NS = 200 * 10**6
_DRAIN_WAIT_S = 0.05
#: how long the exit hook waits for collectives in flight to become spans
_EXIT_FLUSH_S = 2.0
_DRAIN_BATCH = 4096
#: the drain gives the GIL away after this many records (about 0.3 ms of span work)
_DRAIN_YIELD_EVERY = 16


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


class CollectiveDrain(CollectiveTracker):
    """The native drain, flush and close (see the module doc)."""

    native: Any  # the native Hook when the C++ kernels are installed
    #: the op of each native record's spec index
    native_specs: list[_Op]
    #: False: native records go through :meth:`_native_entry` and :meth:`_emit` (the
    #: Python hook's path, kept as the reference the drain's output is tested against)
    native_templates: bool
    drainer: threading.Thread | None
    drain_lock: threading.Lock
    drain_wake: threading.Event  # set by close(): the drain stops waiting
    #: the drain process (drain="process", once started; else None)
    drain_process: Any
    markers: int
    watch: Any

    def _init_drain(self) -> None:
        """The native drain's state and the emitter (no thread yet)."""
        self.native = None
        self.native_specs = []
        self.drain_process = None
        self.markers = 0
        self.emitter = NativeRecordEmitter(
            self.tracer,
            self.metrics,
            op_of=lambda idx: self.native_specs[idx].op,
            default_name=None,  # set by the owner (default_name)
            identity=self._identity_by_name,
            link_provider=self.link_provider,
        )
        self.spans = self.emitter.spans  # the Python hook's spans: the same short path
        self.native_templates = True
        self.drainer = None
        self.drain_lock = threading.Lock()
        self.drain_wake = threading.Event()

    def _bind_provider(self, tracer_provider: Any, meter_provider: Any) -> None:
        """Make the tracer provider's ``force_flush()``/``shutdown()`` drain the records first
        (:meth:`flush`), and bind the drop counter to the meter provider."""
        self.drain_binding = register_drain(self, tracer_provider)
        bind_drops(meter_provider)

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
            op=spec.op,
            group=gname,
            size=gsize,
            rank=grank,
            nbytes=nbytes,
            seq=seq,
            cid=cid,
            dtype=dtype,
            peer=peer,
            async_op=async_op,
            t0=t0,
            t1=t1,
            ctx=ctx,
            identity=self._identity_by_name(device or "cpu"),
        )
        e.end, e.uncertainty, e.enqueue_only = end, uncertainty, enqueue_only
        if err_type is not None:
            e.error = _NativeFailure(err_type, err_msg or "")
        return e

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
