"""Publish the span running on each device for the node agent: a span processor.

:class:`ActiveSpanPublishingProcessor` watches every span of a tracer provider; a span with
an ``accel.device.id`` attribute (or, for otel-ext's own instrumentation scope, a resource
``accel.device.id``) is written to that device's record on start and on end
(:mod:`otel_ext.instrumentation.active_span_record`). :func:`otel_ext.exporters.configure` installs
it, so the layer, collective, device-activity, request-phase and torch instrumentations and
the framework-free API all publish without any change of their own.

Threading and blocking contract: ``on_start`` and ``on_end`` run on the workload's thread,
never block, never raise; a failure (the folder cannot be used, a device more than
``max_devices``) is logged once and counted in :attr:`ActiveSpanPublisher.failures`. After
``fork()`` the child forgets the parent's records and makes its own. Records are removed at
process exit (``atexit``) or on :meth:`~ActiveSpanPublishingProcessor.shutdown`.

>>> import tempfile
>>> from opentelemetry.sdk.trace import TracerProvider
>>> folder = tempfile.mkdtemp()
>>> provider = TracerProvider()
>>> processor = ActiveSpanPublishingProcessor(ActiveSpanPublisher(folder))
>>> provider.add_span_processor(processor)
>>> with provider.get_tracer("doc").start_as_current_span(
...         "accel.layer", attributes={"accel.device.id": "host0/chip0"}):
...     [rec.device_id for rec in processor.publisher.records()]
['host0/chip0']
>>> provider.shutdown()
>>> processor.publisher.records()
[]
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_ext.instrumentation._common import INSTRUMENTATION_NAME
from otel_ext.instrumentation.active_span_record import (
    ActiveSpanRecord,
    prepare_directory,
    record_directory,
    remove_stale_records,
)
from otel_ext.semconv.attributes import ACCEL_DEVICE_ID

__all__ = ["ActiveSpanPublisher", "ActiveSpanPublishingProcessor", "gpu_uuid"]

_log = logging.getLogger(__name__)
_MAX_LIVE = 65_536


_LOCAL_INDEX = re.compile(r"(?:^|/)(?:cuda:?|gpu|chip)(\d+)$")


def gpu_uuid(device_id: str) -> str:
    """The UUID (``GPU-...``) of a CUDA device this process uses, if PyTorch knows it.

    Only when ``torch`` is already imported and CUDA initialised (never imported here);
    ``""`` otherwise. ``cuda:N``, ``gpuN`` and ``chipN`` name the process's N-th visible
    device.

    >>> gpu_uuid("host0/chip0")  # no CUDA here
    ''
    """
    found = _LOCAL_INDEX.search(device_id)
    torch = sys.modules.get("torch")
    if found is None or torch is None:
        return ""
    try:
        if not torch.cuda.is_initialized():
            return ""
        uuid = torch.cuda.get_device_properties(int(found.group(1))).uuid
    except Exception:
        return ""
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


class ActiveSpanPublisher:
    """This process's records, one per device, created on first use.

    Args:
        directory: the folder (else ``OTEL_EXT_ACTIVE_SPAN_DIR``, else the default one).
        max_devices: records at most; spans on more devices are not published (counted).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, max_devices: int = 64):
        self.directory = record_directory(directory)
        self._default = (
            directory is None and not os.environ.get("OTEL_EXT_ACTIVE_SPAN_DIR", "").strip()
        )
        self.max_devices = max_devices
        self._records: dict[str, ActiveSpanRecord | None] = {}
        self._lock = threading.Lock()
        self._ready: bool | None = None
        self.failures = 0
        self._warned = False
        self._pid = os.getpid()
        self._closed = False
        ref = weakref.ref(self)

        def _close_at_exit() -> None:
            publisher = ref()
            if publisher is not None:
                publisher.close()

        atexit.register(_close_at_exit)
        if hasattr(os, "register_at_fork"):

            def _child() -> None:
                publisher = ref()
                if publisher is not None:
                    publisher._after_fork_in_child()

            os.register_at_fork(after_in_child=_child)

    def _fail(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        if not self._warned:
            self._warned = True
            _log.warning(
                "active spans are not published for the node agent (%s: %s); "
                "set OTEL_EXT_ACTIVE_SPAN_DIR to a folder this process may write, "
                "or OTEL_EXT_ACTIVE_SPANS=false",
                what,
                exc,
            )

    def record(
        self, device_id: str, resource: Mapping[str, object] | None = None
    ) -> ActiveSpanRecord | None:
        """The record of ``device_id`` (created now if needed); ``None`` when unavailable.

        ``resource``: the workload's resource attributes, written into a new record (its pod
        identity, for the agent's pod labels); ignored for a record that exists.
        """
        rec = self._records.get(device_id, False)
        if rec is not False:
            return rec  # type: ignore[return-value]
        if self._closed:
            return None
        with self._lock:
            if device_id in self._records:
                return self._records[device_id]
            made: ActiveSpanRecord | None = None
            if len(self._records) >= self.max_devices:
                self._fail("devices", OverflowError(f"more than {self.max_devices} devices"))
            else:
                try:
                    if self._ready is None:
                        prepare_directory(Path(self.directory), default=self._default)
                        remove_stale_records(self.directory)
                        self._ready = True
                    made = ActiveSpanRecord(
                        device_id, self.directory, uuid=gpu_uuid(device_id), resource=resource
                    )
                except OSError as exc:
                    self._ready = False if self._ready is None else self._ready
                    self._fail(str(self.directory), exc)
            self._records[device_id] = made
            return made

    def records(self) -> list[ActiveSpanRecord]:
        """The open records."""
        return [r for r in list(self._records.values()) if r is not None and not r.closed]

    def close(self) -> None:
        """Remove every record of this process. Never raises."""
        if os.getpid() != self._pid:
            return
        self._closed = True  # no new record after this
        with self._lock:
            records, self._records = list(self._records.values()), {}
        for rec in records:
            if rec is not None:
                rec.close()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        for rec in self._records.values():
            if rec is not None:
                rec.forget_after_fork()
        self._records = {}
        self._pid = os.getpid()


class ActiveSpanPublishingProcessor(SpanProcessor):
    """A span processor that publishes each device's running span (see the module docs).

    Args:
        publisher: the records (a new :class:`ActiveSpanPublisher` on the default folder
            when ``None``).
    """

    #: a span written after it ended (:mod:`otel_ext.instrumentation.finished_spans`) goes
    #: to its device's ring of ended spans by ``on_end`` alone: it was never running "now"
    ended_spans_need_on_start = False

    def __init__(self, publisher: ActiveSpanPublisher | None = None):
        self.publisher = publisher if publisher is not None else ActiveSpanPublisher()
        self._resource_device: dict[int, str | None] = {}
        # span id -> its record, from on_start to on_end (bounded: spans never ended)
        self._live: dict[int, ActiveSpanRecord] = {}
        self.errors = 0

    def _device(self, span: ReadableSpan) -> str | None:
        attrs = span.attributes
        dev = attrs.get(ACCEL_DEVICE_ID) if attrs else None
        if dev is not None:
            return str(dev)
        scope = span.instrumentation_scope
        if scope is None or scope.name != INSTRUMENTATION_NAME:
            return None
        key = id(span.resource)
        if key not in self._resource_device:
            found = span.resource.attributes.get(ACCEL_DEVICE_ID)
            self._resource_device[key] = None if found is None else str(found)
        return self._resource_device[key]

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Open ``span`` in its device's record. Never raises."""
        try:
            dev = self._device(span)
            if dev is None:
                return
            rec = self.publisher.record(dev, span.resource.attributes)
            if rec is not None:
                ctx = span.context
                rec.started(ctx.trace_id, ctx.span_id, span.start_time or 0)
                if len(self._live) < _MAX_LIVE:
                    self._live[ctx.span_id] = rec
        except Exception as exc:
            self.errors += 1
            self.publisher._fail("on_start", exc)

    def on_end(self, span: ReadableSpan) -> None:
        """Move ``span`` to its device's ring of ended spans. Never raises."""
        try:
            ctx = span.context
            rec = self._live.pop(ctx.span_id, None)
            if rec is None:  # not opened here (device set after start, or too many live)
                dev = self._device(span)
                if dev is None:
                    return
                rec = self.publisher.record(dev, span.resource.attributes)
            if rec is not None:
                start = span.start_time or 0
                rec.ended(ctx.trace_id, ctx.span_id, start, span.end_time or start)
        except Exception as exc:
            self.errors += 1
            self.publisher._fail("on_end", exc)

    def shutdown(self) -> None:
        """Remove this process's records."""
        self.publisher.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: records are written as spans start and end."""
        return True
