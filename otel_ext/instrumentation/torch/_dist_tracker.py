"""The collective instrumentation's Python path: records sequenced in issue order, works
polled to completion, spans and metrics materialised.

:class:`CollectiveTracker` is the layer of the recording state that the Python recording
kernels feed (one bounded put per call, see :mod:`._dist_hooks`): its *tracker* thread takes
each record's group, sequence number and payload (:class:`_Entry`), its *poller* brackets a
host-timed work's completion, and its *materialiser* makes the span and metrics (the device's
interval when a ``collective_timer`` resolved one). The native drain (:mod:`._dist_drain`)
shares its span path for its reference output.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from opentelemetry.trace import Link, Status, StatusCode

from otel_ext.instrumentation._common import (
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
from otel_ext.instrumentation.torch._device_timing import CollectiveTimer, DeviceTiming
from otel_ext.instrumentation.torch._dist_ops import _first_tensor, _Op, _tensors
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

_POLL_S = 0.0005
_DEVICE_DEADLINE_NS = 120 * 10**9
_GIVE_UP_NS = 300 * 10**9


class _NativeFailure(NamedTuple):
    """A failure the native kernel saw: the Python class name it surfaces as, and its text."""

    type: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(slots=True, eq=False)
class _Entry:
    """One collective between the tracker and the materialiser (its span's attributes, the
    call's context and times, and what completes it: a ``Work`` to poll or a timer's handle).
    """

    attrs: dict[str, Any]
    ctx: Any
    op: str
    group: str
    size: int
    nbytes: int
    seq: int
    start: int
    t1: int
    device: str | None
    end: int = 0
    enqueue_only: bool = False
    error: BaseException | _NativeFailure | str | None = None
    uncertainty: float | None = None
    handle: Any = None
    work: Any = None

    @classmethod
    def of(
        cls,
        *,
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
        call_attributes(attrs, dtype, peer, async_op, t0, t1)
        attrs.update(identity)
        return cls(
            attrs=attrs,
            ctx=ctx,
            op=op,
            group=group,
            size=size,
            nbytes=nbytes,
            seq=seq,
            start=t0,
            t1=t1,
            device=attrs.get(ACCEL_DEVICE_ID),
        )


class CollectiveTracker:
    """The Python hook's path, and what both paths share: records sequenced in issue order
    (the *tracker* thread), host-timed works polled to completion (the *poller*), spans and
    metrics made in batches (the *materialiser*); the span writer, metrics and identities.

    A layer of :class:`~otel_ext.instrumentation.torch._distributed._CollectiveRecording`,
    which sets up the state below (:meth:`_start_background` starts the threads).
    """

    tracer: Any
    metrics: CollectiveMetrics
    link_provider: Callable[[str, str, int], Sequence[Link]] | None
    timer: CollectiveTimer | None
    capacity: int
    drain_interval_s: float  # how often the materialiser (and the native drain) runs
    identities: DeviceIdentities
    #: the drain's records to spans and metrics; the Python hook's spans use its writer
    emitter: NativeRecordEmitter
    spans: Any
    closed: bool
    seqs: SequenceCounter
    #: raw group name -> (span group name, size, rank in group)
    groups: dict[str, tuple[str, int, int]]
    issued: int
    #: records the full queue dropped, sequenced in order later: (n, op, group, peer)
    gaps: collections.deque[tuple[int, _Op, Any, Any]]
    gaps_lost: int
    open: int  # entries waiting for completion
    open_lock: threading.Condition
    polled: list[_Entry]
    poll_lock: threading.Lock
    # (issued before, from): flush() gives up on works issued before it began that are
    # still open _FLUSH_GRACE_NS later; otherwise after _GIVE_UP_NS.
    give_up: tuple[int, int]
    poll_wake: threading.Event
    device_pending: list[tuple[_Entry, int]]
    materialiser: BoundedHandoff  # of _Entry
    tracker: BoundedHandoff  # of the recording kernels' tuples
    poller: threading.Thread
    #: the tracer provider's force_flush()/shutdown() drain the records first
    drain_binding: Any

    def _init_tracking(self) -> None:
        """The tracker's, poller's and materialiser's state (no thread yet)."""
        self.seqs = SequenceCounter()
        self.groups = {}
        self.closed = False
        self.issued = 0
        self.gaps = collections.deque(maxlen=self.capacity)
        self.gaps_lost = 0
        self.open = 0
        self.open_lock = threading.Condition()
        self.polled = []
        self.poll_lock = threading.Lock()
        self.give_up = (0, 0)
        self.poll_wake = threading.Event()
        self.device_pending = []

    def _start_background(self) -> None:
        """Start the materialiser, tracker and poller threads."""
        self.materialiser = BoundedHandoff(
            self._materialise,
            capacity=self.capacity,
            name="otel-ext-collective-spans",
            interval=self.drain_interval_s,
            tick=True,
        )
        self.tracker = BoundedHandoff(
            self._track, capacity=self.capacity, name="otel-ext-collective-tracker"
        )
        self.poller = threading.Thread(
            target=self._poll, name="otel-ext-collective-poll", daemon=True
        )
        self.poller.start()

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
            op=spec.op,
            group=gname,
            size=gsize,
            rank=grank,
            nbytes=nbytes,
            seq=seq,
            cid=cid,
            dtype=str(tensors[0].dtype).removeprefix("torch.") if tensors else None,
            peer=None if peer is None else int(peer),
            async_op=async_op,
            t0=t0,
            t1=t1,
            ctx=ctx,
            identity=self.identity_for(tensors[0] if tensors else _first_tensor(args)),
        )
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
