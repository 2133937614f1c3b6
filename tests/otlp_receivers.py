"""Real OTLP receivers for tests: a gRPC server and an HTTP server, both protobuf.

:class:`GrpcOtlpReceiver` implements the OTLP ``TraceService`` and ``MetricsService`` from
``opentelemetry-proto`` on a grpcio server; :class:`HttpOtlpReceiver` accepts protobuf
``POST /v1/traces`` and ``/v1/metrics``. Both keep what they received, can be stopped and
restarted on the same port, and let a test wait for data without sleeping
(:meth:`wait_for_spans`). Use them through the ``grpc_receiver`` / ``http_receiver``
fixtures (import them into a test module or a conftest).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from concurrent import futures

import pytest
from conftest import free_port
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

__all__ = ["GrpcOtlpReceiver", "HttpOtlpReceiver", "grpc_receiver", "http_receiver"]


class _Store:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.trace_requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metric_requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def add_traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.cond:
            self.trace_requests.append(request)
            self.cond.notify_all()

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.cond:
            self.metric_requests.append(request)
            self.cond.notify_all()

    def span_names(self) -> list[str]:
        with self.cond:
            return [
                span.name
                for request in self.trace_requests
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            ]

    def metric_names(self) -> list[str]:
        with self.cond:
            return [
                metric.name
                for request in self.metric_requests
                for rm in request.resource_metrics
                for sm in rm.scope_metrics
                for metric in sm.metrics
            ]

    def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout_s)


class _Receiver:
    endpoint: str

    def __init__(self) -> None:
        self.store = _Store()
        self.port = free_port()

    def span_names(self) -> list[str]:
        """Names of every span received so far."""
        return self.store.span_names()

    def metric_names(self) -> list[str]:
        """Names of every metric received so far (one per metric per request)."""
        return self.store.metric_names()

    def wait_for_spans(self, names: set[str], timeout_s: float = 20.0) -> bool:
        """Block until every span name in ``names`` has arrived (True) or the timeout."""
        return self.store.wait(lambda: names <= set(self.store.span_names()), timeout_s)

    def wait_for_metric(self, name: str, timeout_s: float = 20.0) -> bool:
        """Block until a metric called ``name`` has arrived (True) or the timeout."""
        return self.store.wait(lambda: name in self.store.metric_names(), timeout_s)


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: _Store):
        self.store = store

    def Export(self, request, context):
        self.store.add_traces(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, store: _Store):
        self.store = store

    def Export(self, request, context):
        self.store.add_metrics(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcOtlpReceiver(_Receiver):
    """An OTLP/gRPC receiver (TraceService and MetricsService) on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = None

    def start(self) -> None:
        """Start serving on this receiver's port (again after :meth:`stop`)."""
        import grpc

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self.store), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _MetricsService(self.store), server
        )
        bound = server.add_insecure_port(f"127.0.0.1:{self.port}")
        if bound != self.port:
            raise RuntimeError(f"could not bind port {self.port}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving now (clients see UNAVAILABLE)."""
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None


class _Handler(http.server.BaseHTTPRequestHandler):
    store: _Store

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
        if self.path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.store.add_traces(request)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            metrics_request = metrics_service_pb2.ExportMetricsServiceRequest()
            metrics_request.ParseFromString(body)
            self.store.add_metrics(metrics_request)
            reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:
        pass


class HttpOtlpReceiver(_Receiver):
    """An OTLP/HTTP protobuf receiver (``/v1/traces``, ``/v1/metrics``) on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start serving on this receiver's port (again after :meth:`stop`)."""
        handler = type("Handler", (_Handler,), {"store": self.store})
        http.server.ThreadingHTTPServer.allow_reuse_address = True
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (clients see connection refused)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcOtlpReceiver]:
    """A started :class:`GrpcOtlpReceiver`, stopped after the test."""
    receiver = GrpcOtlpReceiver()
    receiver.start()
    yield receiver
    receiver.stop()


@pytest.fixture
def http_receiver() -> Iterator[HttpOtlpReceiver]:
    """A started :class:`HttpOtlpReceiver`, stopped after the test."""
    receiver = HttpOtlpReceiver()
    receiver.start()
    yield receiver
    receiver.stop()
