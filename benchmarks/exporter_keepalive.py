"""Benchmark: scrape latency of the exposition server, keep-alive against a new connection.

Prometheus keeps its connection to a target open between scrapes. A server that writes the
headers and the body in two small writes makes such a client wait for a delayed ACK (about
40 ms on Linux) on every scrape. Measured in the same run, over loopback, median of
``--scrapes`` scrapes of a ``--size``-byte exposition:

* baseline: the stdlib ``http.server`` handler as the exposition server had it before issue 18
  (``send_response`` ... ``end_headers`` then ``wfile.write(body)``), keep-alive;
* ours (``PrometheusExpositionServer``), keep-alive;
* ours, a new connection per scrape;

and the slowest of ``--burst`` connects opened at once, against each server (the stdlib's
listen backlog of 5 drops SYNs in a burst: the client retries after a second).

    python benchmarks/exporter_keepalive.py [--scrapes 200] [--size 20000] [--burst 200]
"""

from __future__ import annotations

import argparse
import http.client
import select
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from otel_ext.exporters._http_server import LISTEN_BACKLOG
from otel_ext.exporters.prometheus import PrometheusExpositionServer


class _Body:
    def __init__(self, size: int):
        self.body = b"otel_ext_bench_up 1\n" * max(size // 20, 1)

    def render(self, *, openmetrics: bool) -> bytes:
        return self.body


def two_write_server(body: bytes) -> tuple[ThreadingHTTPServer, int]:
    """The baseline: headers and body in two writes (the pre-issue-18 handler)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


def keep_alive(port: int, scrapes: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    conn.getresponse().read()
    times = []
    for _ in range(scrapes):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        conn.getresponse().read()
        times.append(time.perf_counter() - t0)
    conn.close()
    return statistics.median(times)


def new_connections(port: int, scrapes: int) -> float:
    times = []
    for _ in range(scrapes):
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        conn.getresponse().read()
        conn.close()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def connect_burst(port: int, count: int) -> float:
    """Open ``count`` connections at once; the slowest connect in seconds (a full listen
    backlog drops SYNs, and the client retries after 1 s)."""
    socks = []
    started = time.perf_counter()
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        socks.append(sock)
    waiting = set(socks)
    slowest = 0.0
    deadline = started + 10
    while waiting and time.perf_counter() < deadline:
        _, ready, _ = select.select([], list(waiting), [], 0.5)
        now = time.perf_counter()
        for sock in ready:
            waiting.discard(sock)
            slowest = max(slowest, now - started)
    for sock in socks:
        sock.close()
    return slowest if not waiting else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--size", type=int, default=20_000)
    ap.add_argument("--burst", type=int, default=200, help="connections opened at once")
    args = ap.parse_args()
    exposer = _Body(args.size)

    baseline, base_port = two_write_server(exposer.body)
    ours = PrometheusExpositionServer([exposer], port=0)
    _, port = ours.start()
    try:
        base_ka = keep_alive(base_port, max(args.scrapes // 4, 10))  # slow: fewer scrapes
        ours_ka = keep_alive(port, args.scrapes)
        ours_new = new_connections(port, args.scrapes)
        base_burst = connect_burst(base_port, args.burst)
        ours_burst = connect_burst(port, args.burst)
    finally:
        ours.stop()
        baseline.shutdown()
        baseline.server_close()

    print(f"{len(exposer.body)}-byte exposition over loopback, median per scrape")
    print(f"{'case':58} {'ms':>8} {'ratio':>7}")
    for name, t in (
        ("baseline: stdlib handler, two writes, keep-alive", base_ka),
        ("ours: one write, keep-alive", ours_ka),
        ("ours: new connection per scrape", ours_new),
    ):
        print(f"{name:58} {t * 1e3:8.3f} {t / base_ka:7.3f}")
    print(f"ours keep-alive / ours new connection: {ours_ka / ours_new:.2f}")
    print(
        f"{args.burst} connects at once, slowest: baseline (backlog 5) {base_burst * 1e3:.1f} ms, "
        f"ours (backlog {LISTEN_BACKLOG}) {ours_burst * 1e3:.1f} ms, ratio {ours_burst / base_burst:.3f}"
    )


if __name__ == "__main__":
    main()
