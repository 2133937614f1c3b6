"""The exposition server under hostile clients: timeouts, the connection cap, keep-alive in one
write, TLS handshakes off the accepting thread, quiet client disconnects (issue 18)."""

from __future__ import annotations

import http.client
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from conftest import make_cert, require_binary

from otel_ext.exporters._http_server import LISTEN_BACKLOG, HardenedHTTPServer
from otel_ext.exporters.prometheus import PrometheusExpositionServer


class StaticExposer:
    """An exposer whose body is fixed (``size`` bytes of a valid exposition)."""

    def __init__(self, size: int = 200):
        line = b"otel_ext_test_up 1\n"
        self.body = line * max(size // len(line), 1)

    def render(self, *, openmetrics: bool) -> bytes:
        return self.body


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` until true or ``timeout``: the server offers no event for these."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[PrometheusExpositionServer, str, int]]]:
    servers: list[PrometheusExpositionServer] = []

    def start(exposer=None, **options):
        server = PrometheusExpositionServer([exposer or StaticExposer()], port=0, **options)
        host, port = server.start()
        servers.append(server)
        return server, host, port

    yield start
    for server in servers:
        server.stop()


def test_keep_alive_scrapes_share_one_connection(serve):
    server, host, port = serve()
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        conn.getresponse().read()
        local = conn.sock.getsockname()
        for _ in range(50):
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200 and response.read() == StaticExposer().body
            assert response.getheader("Connection") is None  # kept alive
        assert conn.sock.getsockname() == local  # never reconnected
        assert server.scrapes == 51
    finally:
        conn.close()


def test_each_response_leaves_in_one_write(serve, monkeypatch):
    """Headers and body in two writes cost a keep-alive client a delayed ACK (~40 ms)."""
    writes: list[int] = []
    original = socketserver._SocketWriter.write  # type: ignore[attr-defined]

    def counting(self, data):
        writes.append(len(data))
        return original(self, data)

    monkeypatch.setattr(socketserver._SocketWriter, "write", counting)  # type: ignore[attr-defined]
    _, host, port = serve(StaticExposer(100_000))
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        for _ in range(5):
            conn.request("GET", "/metrics")
            conn.getresponse().read()
        conn.request("HEAD", "/metrics")
        head = conn.getresponse()
        body_size = len(StaticExposer(100_000).body)
        assert head.read() == b"" and int(head.getheader("Content-Length")) == body_size
    finally:
        conn.close()
    assert len(writes) == 6 and all(n > body_size for n in writes[:5]), writes
    assert writes[5] < 1000  # HEAD: the headers alone


def test_half_sent_request_times_out(serve):
    server, host, port = serve(timeout_s=0.3)
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        t0 = time.monotonic()
        assert sock.recv(1024) == b""  # the server gave up and closed
        assert time.monotonic() - t0 < 4.0
    assert wait_until(lambda: server.http is not None and server.http.active_connections == 0)


def test_trickling_client_cannot_hold_a_request_open(serve):
    """One byte every 50 ms never idles a read for long, but the request has a deadline."""
    server, host, port = serve(timeout_s=0.5)
    request = b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 10_000
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.settimeout(0.05)
        t0 = time.monotonic()
        closed = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:  # reset or broken pipe: closed too
                closed = True
                break
        assert closed and time.monotonic() - t0 < 4.0
    assert wait_until(lambda: server.http is not None and server.http.active_connections == 0)


def test_idle_keep_alive_connection_is_closed(serve):
    server, host, port = serve(idle_timeout_s=0.3)
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while not data.endswith(StaticExposer().body):
            data += sock.recv(65536)
        assert data.startswith(b"HTTP/1.1 200")
        assert sock.recv(1024) == b""  # closed after the idle timeout
    assert wait_until(lambda: server.http is not None and server.http.active_connections == 0)


def test_connection_cap_refuses_one_more_and_recovers(serve):
    server, host, port = serve(max_connections=2)
    assert server.http is not None
    held = []
    for _ in range(2):
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", "/metrics")
        assert conn.getresponse().read()  # now served, and kept open
        held.append(conn)
    assert server.http.active_connections == 2
    with socket.create_connection((host, port), timeout=5) as extra:
        try:
            answer = extra.recv(1024)
        except ConnectionResetError:
            answer = b""
        assert answer == b"" or answer.startswith(b"HTTP/1.1 503")
    assert server.http.refused == 1
    held[0].close()
    assert wait_until(lambda: server.http is not None and server.http.active_connections == 1)
    again = http.client.HTTPConnection(host, port, timeout=5)
    again.request("GET", "/metrics")
    assert again.getresponse().status == 200
    again.close()
    held[1].close()


def test_many_half_open_connections_cost_bounded_threads(serve):
    server, host, port = serve(max_connections=8, timeout_s=5)
    before = threading.active_count()
    socks = [socket.create_connection((host, port), timeout=5) for _ in range(40)]
    try:
        for s in socks:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # half-sent
        assert server.http is not None
        assert wait_until(lambda: server.http is not None and server.http.refused == 32)
        assert threading.active_count() - before <= 8
    finally:
        for s in socks:
            s.close()


def test_listen_backlog():
    server = HardenedHTTPServer(("127.0.0.1", 0), lambda m, p, h: None)  # type: ignore[arg-type,return-value]
    try:
        assert server.request_queue_size == LISTEN_BACKLOG >= 128
    finally:
        server.server_close()


def test_client_closing_early_logs_no_traceback(serve, capfd):
    server, host, port = serve(StaticExposer(8_000_000))  # larger than any socket buffer
    for _ in range(3):
        sock = socket.create_connection((host, port), timeout=5)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(1)  # the response has started
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # reset mid-response
    assert wait_until(lambda: server.http is not None and server.http.client_errors >= 3)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err
    # and the server still serves
    conn = http.client.HTTPConnection(host, port, timeout=5)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn.close()


@pytest.mark.integration
def test_idle_tcp_connection_does_not_block_tls_scrapes(serve, tmp_path):
    cert, key = make_cert(tmp_path, require_binary("openssl"))
    server, host, port = serve(certfile=str(cert), keyfile=str(key))
    ctx = ssl.create_default_context(cafile=str(cert))
    silent = [socket.create_connection((host, port), timeout=5) for _ in range(3)]  # no hello
    try:
        for _ in range(5):
            conn = http.client.HTTPSConnection(host, port, timeout=3, context=ctx)
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200 and response.read() == StaticExposer().body
            conn.close()
        # and keep-alive over TLS
        conn = http.client.HTTPSConnection(host, port, timeout=3, context=ctx)
        for _ in range(10):
            conn.request("GET", "/metrics")
            assert conn.getresponse().read() == StaticExposer().body
        conn.close()
    finally:
        for s in silent:
            s.close()
    assert server.scrapes == 15


@pytest.mark.integration
def test_tls_handshake_is_bounded_by_the_timeout(serve, tmp_path):
    cert, key = make_cert(tmp_path, require_binary("openssl"))
    server, host, port = serve(certfile=str(cert), keyfile=str(key), timeout_s=0.3)
    with socket.create_connection((host, port), timeout=5) as silent:
        assert silent.recv(1024) == b""  # closed without a ClientHello
    # a ClientHello trickled one byte per 50 ms (it would take seconds) meets the same deadline
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context(cafile=str(cert)).wrap_bio(
        incoming, outgoing, server_hostname="127.0.0.1"
    )
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    hello = outgoing.read()
    assert len(hello) > 100
    with socket.create_connection((host, port), timeout=5) as slow:
        slow.settimeout(0.05)
        t0 = time.monotonic()
        closed = False
        for byte in hello:
            try:
                slow.sendall(bytes([byte]))
                if slow.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - t0 < 0.05 * len(hello) / 2
    assert wait_until(lambda: server.http is not None and server.http.active_connections == 0)
