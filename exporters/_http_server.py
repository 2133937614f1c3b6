"""A small hardened HTTP/1.1 server: the transport of the Prometheus exposition server.

:class:`HardenedHTTPServer` serves ``GET`` and ``HEAD`` through one ``responder`` callable
(method, path, headers -> :class:`HttpResponse`), one thread per connection, with these limits:

* **Timeouts.** A request must arrive whole within ``timeout_s`` of its first byte (a client
  trickling bytes cannot hold it open longer), a response must leave within ``timeout_s``,
  a TLS handshake must finish within ``timeout_s``; a new connection must start its first
  request within ``timeout_s`` and a kept-alive one its next within ``idle_timeout_s``.
* **A connection cap.** At most ``max_connections`` connections are served at once; one more
  is answered ``503`` (plain HTTP) or closed (TLS) on the accepting thread, without reading
  from it, and counted in :attr:`HardenedHTTPServer.refused`.
* **Listen backlog** of :data:`LISTEN_BACKLOG` (a burst of connects does not stall).
* **TLS handshakes** run on the connection's own thread, so a client that never sends its
  ClientHello blocks only its own connection, never the accepting thread.
* **One write per response**: status line, headers and body leave in one ``sendall`` with
  ``TCP_NODELAY``, so a keep-alive client does not wait on Nagle and a delayed ACK.
* **Client failures are not errors**: a client that goes away (broken pipe, reset, timeout,
  TLS alert) is logged at debug level and counted in :attr:`HardenedHTTPServer.client_errors`,
  never printed as a traceback.

>>> import urllib.request
>>> server = HardenedHTTPServer(
...     ("127.0.0.1", 0), lambda method, path, headers: HttpResponse(200, b"hi\\n", "text/plain")
... )
>>> host, port = server.start()
>>> urllib.request.urlopen(f"http://{host}:{port}/").read()
b'hi\\n'
>>> server.stop()
"""

from __future__ import annotations

import io
import logging
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LISTEN_BACKLOG", "HardenedHTTPServer", "HttpResponse", "Responder"]

_log = logging.getLogger(__name__)

#: The listen backlog (``listen(2)``; the kernel caps it at ``net.core.somaxconn``): connects
#: queued while the accepting thread is busy.
LISTEN_BACKLOG = 1024

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 26\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many open connections\n"
)


@dataclass(frozen=True)
class HttpResponse:
    """One response: status, body, content type and extra headers (``(name, value)`` pairs)."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


#: ``responder(method, path, headers) -> HttpResponse``; ``method`` is ``GET`` or ``HEAD``.
Responder = Callable[[str, str, Message], HttpResponse]


class _DeadlineReader(io.RawIOBase):
    """Socket reads that fail once ``deadline`` (monotonic s) has passed: a client trickling
    one byte per timeout cannot hold a request open for longer than that."""

    def __init__(self, sock: socket.socket):
        super().__init__()
        self._sock = sock
        self.deadline = time.monotonic()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HardenedHTTPServer
    timeout = None  # the server set the socket's timeout before the handshake: keep it

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the makefile reader: replaced by one that keeps a deadline
        self._reader = _DeadlineReader(self.connection)
        self._buffered = io.BufferedReader(self._reader, 65536)
        self.rfile = self._buffered

    def handle(self) -> None:
        """Serve requests until the client closes, asks to close, or idles out.

        The first request must start within ``timeout_s`` of the connection, later ones
        within ``idle_timeout_s`` of the previous response; each request must arrive whole
        within ``timeout_s`` of its first byte.
        """
        wait = self.server.timeout_s
        while True:
            self._reader.deadline = time.monotonic() + wait
            try:
                if not self._buffered.peek(1):  # the client closed between requests
                    return
            except TimeoutError:
                return
            self._reader.deadline = time.monotonic() + self.server.timeout_s
            self.close_connection = True
            self.handle_one_request()
            if self.close_connection:
                return
            wait = self.server.idle_timeout_s

    def do_GET(self) -> None:
        try:
            response = self.server.responder(self.command, self.path, self.headers)
        except Exception as exc:  # a broken responder answers 500, never kills the server
            _log.warning("responder failed on %s %s: %r", self.command, self.path, exc)
            response = HttpResponse(500, b"internal error\n", "text/plain")
        self._write(response)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _write(self, response: HttpResponse) -> None:
        reason = self.responses.get(response.status, ("",))[0]
        lines = [
            f"{self.protocol_version} {response.status} {reason}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.connection.settimeout(self.server.timeout_s)  # sendall: a total, not per chunk
        self.wfile.write(head if self.command == "HEAD" else head + response.body)
        self.log_request(response.status, len(response.body))

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.client_address[0], *args)


class HardenedHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP/1.1 server with timeouts, a connection cap and off-thread TLS.

    Args:
        address: ``(host, port)`` to bind; port 0 binds any free port.
        responder: answers each request.
        ssl_context: serve HTTPS with this server-side context.
        timeout_s: the deadline of each request (from its first byte), each response and each
            TLS handshake, and of a new connection's first request.
        idle_timeout_s: how long a kept-alive connection may wait for its next request.
        max_connections: connections served at once; more are refused (counted).

    Raises:
        OSError: the address cannot be bound.
    """

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        responder: Responder,
        *,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        idle_timeout_s: float = 90.0,
        max_connections: int = 64,
    ):
        if timeout_s <= 0 or idle_timeout_s <= 0 or max_connections < 1:
            raise ValueError("timeouts must be positive and max_connections at least 1")
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.responder = responder
        self.ssl_context = ssl_context
        self.timeout_s = timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.refused = 0
        self.client_errors = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        super().__init__(address, _Handler)

    @property
    def active_connections(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._open)

    def start(self) -> tuple[str, int]:
        """Serve on a daemon thread; return the bound ``(host, port)``."""
        self._thread = threading.Thread(
            target=self.serve_forever, name="otel-ext-http-accept", daemon=True
        )
        self._thread.start()
        host, port = self.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        """Stop accepting, close the listening socket and every open connection."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.server_close()
        with self._lock:
            open_now = list(self._open)
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- on the accepting thread: no reads, no handshakes, nothing that can block --
    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = len(self._open) >= self.max_connections
            if full:
                self.refused += 1
            else:
                self._open.add(request)
        if full:
            _log.debug("refused a connection from %s: %d open", client_address[0], len(self._open))
            if self.ssl_context is None:
                try:
                    request.setblocking(False)
                    request.send(_REFUSED)
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:  # cannot start a thread: refuse this one
            self._forget(request)
            self.shutdown_request(request)
            raise

    # -- on the connection's thread --
    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.timeout_s)
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.ssl_context is None:
            _Handler(request, client_address, self)
            return
        conn = self.ssl_context.wrap_socket(
            request, server_side=True, do_handshake_on_connect=False
        )
        with self._lock:
            self._open.discard(request)  # wrap_socket detached it: track the TLS socket
            self._open.add(conn)
        try:
            self._handshake(conn)  # here, on this connection's thread, within timeout_s
            _Handler(conn, client_address, self)
        finally:
            self._forget(conn)
            conn.close()

    def _handshake(self, conn: ssl.SSLSocket) -> None:
        """The TLS handshake, finished within ``timeout_s`` in all (not per read)."""
        deadline = time.monotonic() + self.timeout_s
        conn.setblocking(False)
        try:
            while True:
                try:
                    conn.do_handshake()
                    return
                except ssl.SSLWantReadError:
                    want: tuple[list[ssl.SSLSocket], list[ssl.SSLSocket]] = ([conn], [])
                except ssl.SSLWantWriteError:
                    want = ([], [conn])
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not any(select.select(*want, [], remaining)[:2]):
                    raise TimeoutError("TLS handshake deadline passed")
        finally:
            conn.settimeout(self.timeout_s)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # BrokenPipe, reset, timeout, TLS alerts: the client's doing
            with self._lock:
                self.client_errors += 1
            _log.debug("connection from %s ended: %r", client_address[0], exc)
        else:
            _log.warning("connection from %s failed: %r", client_address[0], exc)

    def _forget(self, sock: Any) -> None:
        with self._lock:
            self._open.discard(sock)
