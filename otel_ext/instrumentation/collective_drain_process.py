"""The collective drain in a process of its own: spans and metrics made off the workload's GIL.

With ``TorchDistributedInstrumentor().instrument(drain="process")`` (or
``OTEL_EXT_COLLECTIVE_DRAIN=process``) the native recording kernels' C++ poller encodes each
completed collective as a binary frame and sends it, without the GIL and without blocking, on
a Unix socket to a *drain process* started with the instrumentor. That process builds its own
providers with :func:`otel_ext.configure` from the arguments the workload's
:class:`~otel_ext.exporters.Telemetry` was made with (same resource, same exporters), and
makes the same spans and metrics the in-process drain makes
(:class:`~otel_ext.instrumentation.collective_records.NativeRecordEmitter`). The workload
process then spends nothing per collective beyond the recording kernel: no Python object is
made for it, and no thread of it holds the GIL for its span.

What travels per collective: the record (op, group, size, rank, sequence number, peers,
bytes, dtype, device, times, uncertainty, failure, device duration) and the parent span's
context (trace id, span id, flags, remote, trace state), read in the recording kernel's GIL
section once per distinct OpenTelemetry context. Baggage and other context values do not
travel (nothing in the collective span uses them). ``link_provider`` (a Python callable of the
workload) cannot run there, so it needs the in-process drain.

**Protocol** (one ``AF_UNIX`` stream socket pair; the drain process gets its end as an
inherited descriptor, ``python -m otel_ext.exporters.collective_drain FD``):

* workload to drain: first a configuration (``u32`` length, JSON), then frames of ``u32``
  body length and ``u8`` kind: kind 1 a record (:data:`_RECORD`, then six strings of ``u32``
  length and UTF-8 bytes, ``0xffffffff`` for none: group, dtype, device, error type, error
  message, trace state), kind 2 a flush marker (``i64`` token), kind 3 the end (sent by the
  workload's Python side once the native hook has closed its descriptor: a forked child that
  still holds a copy of the socket does not keep the drain process waiting). Native byte
  order (both ends are on one host).
* drain to workload: JSON lines: ``{"ready": true}`` once its providers are built (or
  ``{"error": "..."}`` and exit), ``{"ack": TOKEN}`` once every record before marker TOKEN
  is a span and a metric point and its providers have been flushed.

End: the workload closes its end (``uninstrument()``, or its exit: the instrumentor's exit hook
flushes first); the drain process makes what is left, shuts its providers down (exporting
what they hold) and exits. It also exits when its parent process is gone. A drain process that
died (or a full socket and buffer) costs the workload the dropped records, counted in
``TorchDistributedInstrumentor.dropped``; nothing ever blocks the workload's threads.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import struct
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "DrainProcess",
    "DrainProcessError",
    "decode_frames",
    "drain_configuration",
    "remember_telemetry",
    "run_drain_process",
    "telemetry_of",
]

_LOG = logging.getLogger(__name__)

#: a record frame's fixed part: op index; group size, rank, seq, src, dst, peer, bytes, t0,
#: t1, end, device ns; uncertainty; async (-1 none); enqueue-only, parent valid, trace flags,
#: remote; trace id high and low 64 bits, parent span id
_RECORD = struct.Struct("=i11qdb4B3Q")
_FRAME = struct.Struct("=IB")
_U32 = struct.Struct("=I")
_I64 = struct.Struct("=q")
_NONE = 0xFFFFFFFF
_NONE_INT = -(2**63)  # the C++ side's "no value" (INT64_MIN)
_KIND_RECORD = 1
_KIND_MARKER = 2
_KIND_END = 3
#: what :func:`decode_frames` gives for the end frame
END = "end"
#: socket buffer asked for on both ends (the kernel may grant less)
_SOCKET_BYTES = 4 << 20
#: the longest the drain process may take to start (import, providers) before the
#: instrumentor gives up on it and drains in process
START_TIMEOUT_S = 30.0
#: the drain process's entry point (in the exporters: it builds providers with configure())
_ENTRY = "otel_ext.exporters.collective_drain"


class DrainProcessError(RuntimeError):
    """The drain process could not start (or said why it would not)."""


#: configure()'s handles by their tracer provider (:func:`remember_telemetry`)
_TELEMETRY: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def remember_telemetry(telemetry: Any) -> None:
    """Called by :func:`otel_ext.configure` for each handle it returns, so that
    ``instrument(drain="process")`` finds the arguments its providers were made with."""
    try:
        _TELEMETRY[telemetry.tracer_provider] = telemetry
    except TypeError:  # a provider that cannot be weakly referenced: not found later
        pass


def telemetry_of(tracer_provider: Any) -> Any:
    """The :class:`~otel_ext.exporters.Telemetry` whose tracer provider ``tracer_provider``
    is, when :func:`otel_ext.configure` made it (else ``None``)."""
    try:
        return _TELEMETRY.get(tracer_provider)
    except TypeError:  # not weak-referenceable: not ours
        return None


def _opt(v: int) -> int | None:
    return None if v == _NONE_INT else v


def _same(parent: tuple[Any, ...]) -> Any:
    return parent


def decode_frames(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    parent: Callable[[tuple[Any, ...]], Any] = _same,
) -> tuple[list[Any], int]:
    """The frames in ``buf[start:]``: records as tuples (the layout of the native hook's
    ``drain``, with ``parent((valid, trace_id, span_id, flags, remote, trace_state))`` in
    place of the context: the tuple itself by default), markers as their ``int`` tokens and
    the end as :data:`END`; and the offset of the first incomplete frame (where the next call
    starts).

    Raises:
        ValueError: a frame of an unknown kind or of an impossible length (the stream is
            out of step: nothing after it can be read).
    """
    out: list[Any] = []
    view = memoryview(buf)
    n = len(view)
    pos = start
    while pos + _FRAME.size <= n:
        body, kind = _FRAME.unpack_from(view, pos)
        end = pos + _U32.size + body
        if body < 1 or body > (64 << 20):
            raise ValueError(f"collective frame at byte {pos}: impossible length {body}")
        if end > n:
            break
        at = pos + _FRAME.size
        if kind == _KIND_MARKER:
            out.append(_I64.unpack_from(view, at)[0])
        elif kind == _KIND_END:
            out.append(END)
        elif kind == _KIND_RECORD:
            f = _RECORD.unpack_from(view, at)
            at += _RECORD.size
            texts: list[str | None] = []
            for _ in range(6):
                (length,) = _U32.unpack_from(view, at)
                at += _U32.size
                if length == _NONE:
                    texts.append(None)
                else:
                    texts.append(bytes(view[at : at + length]).decode("utf-8", "replace"))
                    at += length
            if at != end:
                raise ValueError(f"collective frame at byte {pos}: {end - at} bytes left over")
            (op, gsize, grank, seq, src, dst, peer, nbytes, t0, t1, rend, device_ns,
             uncertainty, async_op, enqueue_only, valid, flags, remote, hi, lo, span_id) = f  # fmt: skip
            group, dtype, device, err_type, err_msg, trace_state = texts
            out.append(
                (
                    op, group or "", gsize, grank, seq, _opt(src), _opt(dst), _opt(peer), nbytes,
                    dtype, device, None if async_op < 0 else bool(async_op), t0, t1, rend,
                    None if uncertainty < 0 else uncertainty, bool(enqueue_only), err_type,
                    err_msg,
                    parent((bool(valid), (hi << 64) | lo, span_id, flags, bool(remote),
                            trace_state or "")),
                    device_ns,
                )
            )  # fmt: skip
        else:
            raise ValueError(f"collective frame at byte {pos}: unknown kind {kind}")
        pos = end
    return out, pos


def drain_configuration(
    telemetry: Any,
    *,
    metrics: bool,
    ops: list[str],
    default_name: str | None,
    device: str | None,
    host_id: str | None,
    rank: int | None,
    drain_interval_s: float,
) -> dict[str, Any]:
    """What the drain process needs: :func:`otel_ext.configure`'s arguments as the workload's
    ``telemetry`` was made (its resource, its exporters by name; no Prometheus endpoint, which
    is the workload's port, and no active-span records, which are the workload's devices'),
    and the recording's identity (op names, default group, device, host, rank).

    Raises:
        DrainProcessError: ``telemetry`` was not made by :func:`otel_ext.configure`.
    """
    arguments = getattr(telemetry, "arguments", None)
    if arguments is None:
        raise DrainProcessError(
            "drain='process' needs the providers of an otel_ext.configure() Telemetry "
            "(the drain process builds the same ones); pass telemetry= or use configure()"
        )
    spans = list(telemetry.span_exporters) or ["none"]
    readers = [name for name in telemetry.metric_readers if name != "prometheus"]
    if "prometheus" in telemetry.metric_readers:
        _LOG.warning(
            "drain='process': the collective metrics are not on the workload's Prometheus "
            "endpoint (the drain process exports them with %s)",
            ", ".join(readers) or "no other exporter: they are not exported",
        )
    kwargs = dict(arguments)
    kwargs.update(
        traces_exporter=spans,
        metrics_exporter=(readers or ["none"]) if metrics else ["none"],
        resource_attributes=dict(telemetry.resource.attributes),  # JSON: tuples become lists
        detect_accelerator=False,
        publish_active_spans=False,
        set_global=False,
    )
    return {
        "configure": kwargs,
        "ops": ops,
        "default_name": default_name,
        "device": device,
        "host_id": host_id,
        "rank": rank,
        "drain_interval_s": drain_interval_s,
    }


class DrainProcess:
    """The workload's side of one drain process (see the module doc)."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen[bytes]):
        self.sock = sock
        self.proc = proc
        self._lines = b""
        self._acked = 0

    @classmethod
    def start(cls, config: Mapping[str, Any], timeout_s: float = START_TIMEOUT_S) -> DrainProcess:
        """Start one and wait until it says its providers are ready.

        Raises:
            DrainProcessError: it could not start, said why not, or did not answer in time.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for s in (ours, theirs):
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                try:
                    s.setsockopt(socket.SOL_SOCKET, opt, _SOCKET_BYTES)
                except OSError:
                    pass
        try:
            # the workload's import path, so the drain process imports the otel_ext it runs
            # (a path added in code, not only through PYTHONPATH)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            proc = subprocess.Popen(
                [sys.executable or "python3", "-m", _ENTRY, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            ours.close()
            raise DrainProcessError(f"cannot start the drain process: {exc}") from exc
        finally:
            theirs.close()
        drain = cls(ours, proc)
        try:
            data = json.dumps(dict(config)).encode()
            ours.sendall(_U32.pack(len(data)) + data)
            answer = drain._read_line(time.monotonic() + timeout_s)
        except (OSError, ValueError) as exc:
            drain.kill()
            raise DrainProcessError(f"drain process: {exc}") from exc
        if answer is None or not answer.get("ready"):
            drain.kill()
            why = "no answer" if answer is None else answer.get("error", answer)
            raise DrainProcessError(f"drain process did not start: {why}")
        return drain

    def descriptor(self) -> int:
        """A new descriptor of the workload's end, for the native hook (which closes it)."""
        return os.dup(self.sock.fileno())

    def _read_line(self, deadline: float) -> dict[str, Any] | None:
        while b"\n" not in self._lines:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ValueError("the drain process closed its end")
            self._lines += chunk
        line, _, self._lines = self._lines.partition(b"\n")
        got = json.loads(line)
        if not isinstance(got, dict):
            raise ValueError(f"unexpected answer {line[:100]!r}")
        return got

    def wait_ack(self, token: int, timeout_s: float | None) -> bool:
        """Whether the drain process acknowledged marker ``token`` within ``timeout_s``."""
        deadline = time.monotonic() + (3600.0 if timeout_s is None else timeout_s)
        while self._acked < token:
            try:
                got = self._read_line(deadline)
            except (OSError, ValueError):
                return False
            if got is None:
                return False
            if "ack" in got:
                self._acked = max(self._acked, int(got["ack"]))
        return True

    def alive(self) -> bool:
        """Whether the drain process is still running."""
        return self.proc.poll() is None

    def close(self, timeout_s: float | None) -> bool:
        """Close the workload's end (the drain process then finishes and exits) and wait for
        it; killed when it takes longer than ``timeout_s``. Whether it exited cleanly. Call it
        after the native hook's shutdown (which closes the hook's descriptor)."""
        try:
            self.sock.sendall(_FRAME.pack(1, _KIND_END))
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=timeout_s) == 0
        except subprocess.TimeoutExpired:
            self.kill()
            return False

    def kill(self) -> None:
        """Stop it at once (what it holds is lost)."""
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


# -- the drain process --------------------------------------------------------------------
def _read_config(sock: socket.socket) -> dict[str, Any]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ValueError("the workload closed its end before the configuration")
            data += chunk
        return data

    (length,) = _U32.unpack(exactly(_U32.size))
    got = json.loads(exactly(length))
    if not isinstance(got, dict):
        raise ValueError("the configuration is not an object")
    return got


def _send(sock: socket.socket, message: Mapping[str, Any]) -> None:
    sock.sendall(json.dumps(dict(message)).encode() + b"\n")


class _Contexts:
    """Parent tuples to OpenTelemetry contexts (a non-recording span of that span context),
    made once per distinct parent."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

        self._trace = trace
        self._span = NonRecordingSpan
        self._ctx = SpanContext
        self._flags = TraceFlags
        self._state = TraceState
        self._known: dict[tuple[Any, ...], Any] = {}

    def of(self, parent: tuple[Any, ...]) -> Any:
        ctx = self._known.get(parent)
        if ctx is None and parent[0]:
            _, trace_id, span_id, flags, remote, state = parent
            sc = self._ctx(
                trace_id,
                span_id,
                is_remote=remote,
                trace_flags=self._flags(flags),
                trace_state=self._state.from_header([state]) if state else None,
            )
            ctx = self._trace.set_span_in_context(self._span(sc))
            if len(self._known) >= 4096:
                self._known.clear()
            self._known[parent] = ctx
        return ctx


def _serve(sock: socket.socket, config: dict[str, Any], configure: Callable[..., Any]) -> int:
    from opentelemetry.metrics import NoOpMeterProvider

    from otel_ext.instrumentation._common import get_tracer
    from otel_ext.instrumentation.collective_records import (
        CollectiveMetrics,
        DeviceIdentities,
        NativeRecordEmitter,
    )

    try:
        options = dict(config["configure"])
        metrics_on = options.get("metrics_exporter") != ["none"]
        telemetry = configure(**options)
        ops: list[str] = list(config["ops"])
        rank = config.get("rank")
        identity = DeviceIdentities(config.get("device"), config.get("host_id"), lambda: rank)

        meters = telemetry.meter_provider if metrics_on else NoOpMeterProvider()
        emitter = NativeRecordEmitter(
            get_tracer(telemetry.tracer_provider),
            CollectiveMetrics(meters),
            op_of=ops.__getitem__,
            default_name=config.get("default_name"),
            identity=identity,
        )
        interval = float(config.get("drain_interval_s", 0.05))
    except Exception as exc:  # said to the workload, which drains in process instead
        _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    _send(sock, {"ready": True})
    contexts = _Contexts()
    parent = os.getppid()
    buf = bytearray()
    lost = 0
    while True:
        ready, _, _ = select.select([sock], [], [], 0.5)
        if not ready:
            if os.getppid() != parent:
                break  # the workload is gone without closing: make what arrived, then exit
            continue
        try:
            chunk = sock.recv(4 << 20)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
        try:
            items, used = decode_frames(buf, parent=contexts.of)
        except ValueError as exc:
            _LOG.error("otel-ext collective drain: %s; the rest of the stream is dropped", exc)
            lost += 1
            break
        del buf[:used]
        emitter.begin()
        ended = False
        for item in items:
            if item is END:
                ended = True
                break
            if type(item) is int:
                emitter.add_counted()
                telemetry.force_flush()
                _send(sock, {"ack": item})
                emitter.begin()
                continue
            try:
                emitter.emit(item)
            except Exception as exc:
                _LOG.debug("collective record: %s: %s", type(exc).__name__, exc)
        emitter.add_counted()
        if ended:
            break
        if interval > 0 and not any(type(i) is int for i in items):
            time.sleep(min(interval, 0.2))  # batch: fewer, larger reads
    emitter.add_counted()
    telemetry.shutdown()
    return 0 if not lost else 1


def run_drain_process(argv: list[str] | None, configure: Callable[..., Any]) -> int:
    """The drain process: serve the socket ``FD`` (``argv``'s one argument, inherited from the
    instrumented process) until it ends, with providers from ``configure``
    (:func:`otel_ext.configure`, handed in by ``python -m otel_ext.exporters.collective_drain``:
    the instrumentation does not import the exporters)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdecimal():
        print(
            f"usage: python -m {_ENTRY} FD "
            "(started by TorchDistributedInstrumentor with drain='process')",
            file=sys.stderr,
        )
        return 2
    sock = socket.socket(fileno=int(args[0]))
    try:
        config = _read_config(sock)
    except (OSError, ValueError) as exc:
        print(f"otel-ext collective drain: {exc}", file=sys.stderr)
        return 2
    return _serve(sock, config, configure)
