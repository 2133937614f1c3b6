"""The collective watch: what is in flight, published for the node agent, and a hang watchdog.

A background thread of the instrumented process (never the workload's) that, every
``interval_s``, copies the native hook's watch state (per process group: the oldest
collective still in flight and the last sequence number completed, kept by the hook's C++
poller) into the process's collective-state record
(:mod:`otel_ext.instrumentation.collective_state_record`), beside the active-span records,
where the node agent reads it. A collective pending longer than ``hang_s``
(``OTEL_EXT_COLLECTIVE_HANG_S``) is exported once as an ``accel.collective.pending`` span
(start: when it was issued; end: now) and the tracer provider's span processors are flushed
at once, so the files of a job killed in the hang still name it. The provider's own
``force_flush`` is not used for that: it would first drain the collective records and give up
on the very collective that hangs.

Threading and blocking contract: :meth:`CollectiveWatch.tick` runs on the watch thread; it
takes the GIL for the copy (microseconds) and, when the watchdog fires, for the span and the
flush. It never raises: failures are logged once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from otel_ext import config
from otel_ext.instrumentation._common import log_once
from otel_ext.instrumentation.active_span_record import prepare_directory, record_directory
from otel_ext.instrumentation.collective_state_record import CollectiveStateRecord, GroupState
from otel_ext.instrumentation.provider_drain import BackgroundSpanDrain, _sdk_processors
from otel_ext.semconv.attributes import (
    ACCEL_COLLECTIVE_BYTES,
    ACCEL_COLLECTIVE_GROUP,
    ACCEL_COLLECTIVE_GROUP_SIZE,
    ACCEL_COLLECTIVE_ID,
    ACCEL_COLLECTIVE_OP,
    ACCEL_COLLECTIVE_RANK,
    ACCEL_COLLECTIVE_SEQ,
    ACCEL_DEVICE_ID,
)
from otel_ext.semconv.spans import SPAN_ACCEL_COLLECTIVE_PENDING

__all__ = ["CollectiveWatch", "flush_exporters", "start_watch"]

_FLUSH_MS = 5_000


def flush_exporters(tracer_provider: Any, timeout_ms: int = _FLUSH_MS) -> bool:
    """Flush the provider's span processors except otel-ext's background drain; never raises."""
    active = _sdk_processors(tracer_provider)
    if active is None:
        return False
    ok = True
    for proc in active._span_processors:
        if isinstance(proc, BackgroundSpanDrain):
            continue
        try:
            ok = bool(proc.force_flush(timeout_ms)) and ok
        except Exception as exc:
            log_once("torch.distributed.watch.flush", "%s: %s", type(exc).__name__, exc)
            ok = False
    return ok


class CollectiveWatch:
    """Publishes the native hook's watch state and exports hangs (see the module doc).

    Args:
        hook: the native ``Hook`` (``watch_state()``).
        op_of: the ``accel.collective.op`` of an op index.
        group_name: the group name spans use for a raw c10d group name.
        identity: the identity attributes (device id, host, rank) of a raw device name.
        record: where the state is published (``None``: not published).
        tracer: the tracer of the watchdog's spans.
        tracer_provider: flushed when the watchdog fires (``None``: not flushed).
        hang_s: the watchdog's threshold in seconds (0 or less: no watchdog).
        interval_s: seconds between two looks.
        clock: real-time clock in ns.
        rank_of: the global rank, asked while the record has none.
    """

    def __init__(
        self,
        hook: Any,
        *,
        op_of: Callable[[int], str],
        group_name: Callable[[str], str],
        identity: Callable[[str], dict[str, Any]],
        record: CollectiveStateRecord | None,
        tracer: Any,
        tracer_provider: Any,
        hang_s: float,
        interval_s: float = 0.25,
        clock: Callable[[], int] = time.time_ns,
        rank_of: Callable[[], int | None] | None = None,
    ):
        self.hook, self.op_of, self.group_name, self.identity = hook, op_of, group_name, identity
        self.record, self.tracer, self.tracer_provider = record, tracer, tracer_provider
        self.hang_ns = int(hang_s * 1e9) if hang_s > 0 else 0
        self.interval_s = interval_s
        self.clock = clock
        self.rank_of = rank_of
        #: (group, seq) pairs the watchdog exported
        self.reported: set[tuple[str, int]] = set()
        self._identities: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watch thread."""
        self._thread = threading.Thread(
            target=self._run, name="otel-ext-collective-watch", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def states(self) -> list[GroupState]:
        """The hook's watch state as :class:`GroupState` rows (group names as spans show)."""
        out = []
        for group, op, size, grank, seq, nbytes, since, device, last in self.hook.watch_state():
            ident = self.identity(device) if device else {}
            dev_id = ident.get(ACCEL_DEVICE_ID)
            self._identities[self.group_name(group)] = ident
            pending = op >= 0 and seq >= 0
            out.append(
                GroupState(
                    group=self.group_name(group),
                    group_size=int(size),
                    group_rank=int(grank),
                    device=dev_id,
                    op=self.op_of(op) if pending else None,
                    seq=int(seq) if pending else None,
                    bytes=int(nbytes) if pending else None,
                    since_ns=int(since) if pending else None,
                    last_seq=int(last),
                )
            )
        return out

    def tick(self) -> None:
        """One look: publish, and export what hangs. Never raises."""
        try:
            states = self.states()
            if self.record is not None:
                if self.record.rank is None and self.rank_of is not None:
                    self.record.rank = self.rank_of()  # instrument() before init_process_group
                self.record.publish(states)
            if self.hang_ns:
                now = self.clock()
                hung = [
                    g
                    for g in states
                    if g.seq is not None
                    and g.since_ns is not None
                    and now - g.since_ns >= self.hang_ns
                    and (g.group, g.seq) not in self.reported
                ]
                if hung:
                    self._export(hung, now)
        except Exception as exc:
            log_once("torch.distributed.watch", "%s: %s", type(exc).__name__, exc)

    def _export(self, hung: list[GroupState], now: int) -> None:
        for g in hung:
            self.reported.add((g.group, g.seq))  # type: ignore[arg-type]
            attrs: dict[str, Any] = {
                ACCEL_COLLECTIVE_OP: g.op,
                ACCEL_COLLECTIVE_GROUP: g.group,
                ACCEL_COLLECTIVE_GROUP_SIZE: g.group_size,
                ACCEL_COLLECTIVE_RANK: g.group_rank,
                ACCEL_COLLECTIVE_SEQ: g.seq,
                ACCEL_COLLECTIVE_ID: f"{g.group}:{g.seq}",
                ACCEL_COLLECTIVE_BYTES: g.bytes,
            }
            for key, value in self._identities.get(g.group, {}).items():
                attrs.setdefault(key, value)
            span = self.tracer.start_span(
                SPAN_ACCEL_COLLECTIVE_PENDING, start_time=g.since_ns, attributes=attrs
            )
            span.end(end_time=max(now, g.since_ns or now))
        if self.tracer_provider is not None:
            flush_exporters(self.tracer_provider)

    def stop(self, *, unlink: bool = True) -> None:
        """Stop the thread and remove the record; never raises."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        if self.record is not None:
            self.record.close(unlink=unlink)


def start_watch(
    hook: Any,
    *,
    op_of: Callable[[int], str],
    group_name: Callable[[str], str],
    identity: Callable[[str], dict[str, Any]],
    tracer: Any,
    tracer_provider: Any,
    host: str,
    rank: int | None,
    rank_of: Callable[[], int | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> CollectiveWatch | None:
    """Start the watch of ``hook``: its record in the active-span records' folder (unless
    ``OTEL_EXT_ACTIVE_SPANS`` is false, or the folder cannot be used: said once) and the
    watchdog (``OTEL_EXT_COLLECTIVE_HANG_S``); ``None`` when neither is wanted. Never raises."""
    try:
        record = None
        if config.resolve(config.ACTIVE_SPANS, env=env):
            folder = record_directory(env=env)
            default = (
                not (os.environ if env is None else env)
                .get(config.ACTIVE_SPAN_DIR.name, "")
                .strip()
            )
            try:
                prepare_directory(folder, default=default)
                record = CollectiveStateRecord(folder, host=host, rank=rank)
            except OSError as exc:
                log_once(
                    "torch.distributed.watch.record",
                    "collectives in flight are not published for the node agent (%s); set "
                    "OTEL_EXT_ACTIVE_SPAN_DIR to a folder this process may write",
                    exc,
                )
        hang_s = config.resolve(config.COLLECTIVE_HANG_S, env=env)
        if record is None and hang_s <= 0:
            return None
        watch = CollectiveWatch(
            hook,
            op_of=op_of,
            group_name=group_name,
            identity=identity,
            record=record,
            tracer=tracer,
            tracer_provider=tracer_provider,
            hang_s=hang_s,
            rank_of=rank_of,
        )
        watch.start()
        return watch
    except Exception as exc:
        log_once("torch.distributed.watch.start", "%s: %s", type(exc).__name__, exc)
        return None
