"""OTLP without a collector: one clear line, counted drops, no retry storm, a quick shutdown.

When the collector is down (nothing listens at the endpoint), the SDK's OTLP exporters retry
every batch with backoff until the export timeout, log a "Transient error ... Connection
refused" line per attempt, and make ``shutdown()`` wait the whole timeout. The guards here
wrap the OTLP exporters that :func:`otel_ext.exporters.configure` builds:

* :class:`CollectorEndpoint` knows whether the collector's address accepts a TCP
  connection: it asks before the first export, after a failed one and, while the collector
  is down, before each export (a refused connection costs microseconds; an unanswered one
  at most ``probe_timeout_s``, on the exporter thread), so the first batch after the
  collector is back goes through;
* while it is down, :class:`OutageGuardSpanExporter` and :class:`OutageGuardMetricExporter`
  drop each batch at once and count it (``accel.telemetry.dropped``), instead of calling
  the SDK exporter;
* the first time it is found down, one warning names the endpoint and says how to write
  files instead (``OTEL_TRACES_EXPORTER=file``); one line says when it answers again, with
  what was dropped meanwhile; the SDK's per-retry lines are filtered out
  (:func:`quiet_sdk_retry_logs`);
* :meth:`OutageGuardSpanExporter.abort_if_unreachable` lets ``Telemetry.shutdown()`` stop
  an export that is retrying against a dead collector, so shutdown stays within its
  timeout.

Threading: the guards run on the exporter threads; :class:`CollectorEndpoint` is shared by
the signals that export to one address and is thread-safe. Nothing here raises.

>>> import socket
>>> with socket.socket() as s:
...     s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]   # nobody listens here
>>> endpoint = CollectorEndpoint(f"http://127.0.0.1:{port}/v1/traces", signal_var="OTEL_TRACES_EXPORTER")
>>> endpoint.usable()
False
>>> endpoint.state
'down'
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Sequence
from urllib.parse import urlparse

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ext.exporters._guard import DropCounter

__all__ = [
    "CollectorEndpoint",
    "OutageGuardMetricExporter",
    "OutageGuardSpanExporter",
    "quiet_sdk_retry_logs",
]

_log = logging.getLogger("otel_ext.exporters")
_SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
)
_SDK_RETRY_MESSAGES = (
    "Transient error",
    "Failed to export %s batch due to timeout",
    "Failed to export batch due to timeout",
    "Shutdown in progress",
    "Exporter already shutdown",
    "OTLP client already shutdown",
)


class _RetryLineFilter(logging.Filter):
    """Drops the SDK's per-retry and after-shutdown lines (the guards report outages)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        return not msg.startswith(_SDK_RETRY_MESSAGES)


_FILTER = _RetryLineFilter()


def quiet_sdk_retry_logs() -> None:
    """Filter the SDK OTLP exporters' per-retry lines (idempotent)."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def _address(url: str) -> tuple[str, int] | None:
    if "://" not in url:
        url = "http://" + url  # gRPC endpoints may be given as host:port
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https", "grpc", "grpcs") or not parsed.hostname:
        return None
    try:
        port = parsed.port
    except ValueError:
        return None
    if port is None:
        port = 443 if parsed.scheme in ("https", "grpcs") else 80
    return parsed.hostname, port


class CollectorEndpoint:
    """Whether the collector at ``url`` accepts connections; logs outages once each.

    Args:
        url: the exporter's endpoint.
        signal_var: the variable that chooses this signal's exporter, for the hint.
        probe_timeout_s: longest wait for a TCP connection.
    """

    def __init__(
        self,
        url: str,
        *,
        signal_var: str = "OTEL_TRACES_EXPORTER",
        probe_timeout_s: float = 1.0,
    ):
        self.url = url
        self.signal_vars = [signal_var]
        self._address = _address(url)
        self._probe_timeout = probe_timeout_s
        self._lock = threading.Lock()
        self.state = "unknown"
        self.outages = 0
        self.dropped: dict[str, int] = {}

    def _probe(self) -> tuple[bool, str]:
        if self._address is None:
            return True, ""
        try:
            with socket.create_connection(self._address, timeout=self._probe_timeout):
                return True, ""
        except OSError as exc:
            return False, exc.strerror or type(exc).__name__

    def probe(self) -> bool:
        """Look now; True when the collector's address accepts a connection."""
        ok, why = self._probe()
        with self._lock:
            if ok:
                self._up()
            else:
                self._down(why)
        return ok

    def usable(self) -> bool:
        """Whether an export should be tried now (probes unless the collector is up)."""
        return self.state == "up" or self.probe()

    def _down(self, why: str) -> None:
        if self.state == "down":
            return
        self.state = "down"
        self.outages += 1
        self.dropped = {}
        hint = " or ".join(f"{var}=file" for var in self.signal_vars)
        _log.warning(
            "otel-ext: no OTLP collector at %s (%s): telemetry is dropped and counted "
            "(accel.telemetry.dropped) until it answers; set %s to write files instead",
            self.url,
            why,
            hint,
        )

    def _up(self) -> None:
        if self.state == "down":
            lost = ", ".join(f"{n} {signal}" for signal, n in sorted(self.dropped.items()))
            _log.warning(
                "otel-ext: OTLP collector at %s answers again (dropped meanwhile: %s)",
                self.url,
                lost or "nothing",
            )
        self.state = "up"

    def count(self, n: int, signal: str) -> None:
        """Count ``n`` items of ``signal`` dropped during this outage."""
        with self._lock:
            self.dropped[signal] = self.dropped.get(signal, 0) + n


class OutageGuardSpanExporter(SpanExporter):
    """Wraps an OTLP span exporter: drops (and counts) batches while the collector is down.

    Args:
        inner: the SDK exporter.
        endpoint: the collector's reachability.
        drops: where dropped spans are counted (signal ``traces``).
    """

    def __init__(self, inner: SpanExporter, endpoint: CollectorEndpoint, *, drops: DropCounter):
        self.inner = inner
        self.endpoint = endpoint
        self._drops = drops

    def _drop(self, n: int) -> SpanExportResult:
        self._drops.add(n, signal="traces", reason="collector_unreachable")
        self.endpoint.count(n, "spans")
        return SpanExportResult.SUCCESS  # handled: dropped and counted here, logged once

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export through the SDK exporter, or drop at once while the collector is down."""
        if not self.endpoint.usable():
            return self._drop(len(spans))
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            return result
        if not self.endpoint.probe():
            return self._drop(len(spans))
        return result

    def abort_if_unreachable(self) -> bool:
        """Shut the SDK exporter down now if the collector is unreachable (stops retries).

        Returns:
            True when it was unreachable.
        """
        if self.endpoint.state == "down" or not self.endpoint.probe():
            self.shutdown()
            return True
        return False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the SDK exporter."""
        return self.inner.force_flush(timeout_millis) is not False

    def shutdown(self) -> None:
        """Shut the SDK exporter down (once)."""
        if getattr(self, "_shut", False):
            return
        self._shut = True
        self.inner.shutdown()


def _points(data: MetricsData) -> int:
    return sum(
        len(getattr(metric.data, "data_points", ()))
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    )


class OutageGuardMetricExporter(MetricExporter):
    """Wraps an OTLP metric exporter: drops (and counts) exports while the collector is down.

    Args:
        inner: the SDK exporter (its temporality and aggregation preferences are kept).
        endpoint: the collector's reachability.
        drops: where dropped points are counted (signal ``metrics``).
    """

    def __init__(self, inner: MetricExporter, endpoint: CollectorEndpoint, *, drops: DropCounter):
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.endpoint = endpoint
        self._drops = drops

    def _drop(self, data: MetricsData) -> MetricExportResult:
        n = _points(data)
        self._drops.add(n, signal="metrics", reason="collector_unreachable")
        self.endpoint.count(n, "metric points")
        return MetricExportResult.SUCCESS

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object
    ) -> MetricExportResult:
        """Export through the SDK exporter, or drop at once while the collector is down."""
        if not self.endpoint.usable():
            return self._drop(metrics_data)
        result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        if result is MetricExportResult.SUCCESS:
            return result
        if not self.endpoint.probe():
            return self._drop(metrics_data)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush the SDK exporter."""
        return bool(self.inner.force_flush(timeout_millis=timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        """Shut the SDK exporter down."""
        self.inner.shutdown(timeout_millis=timeout_millis)
