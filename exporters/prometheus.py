"""The Prometheus exposition server: ``/metrics`` (text 0.0.4 or OpenMetrics) and ``/healthz``.

:class:`PrometheusExpositionServer` serves any number of exposers: objects with
``render(openmetrics=...) -> bytes`` (the counter bridge's
:class:`~otel_ext.counters.CounterCollector`), ``prometheus_client`` registries, or a
:class:`PrometheusMetricReader` (SDK metrics). Content negotiation: a scraper that accepts
``application/openmetrics-text`` gets OpenMetrics 1.0 (the only format with exemplars),
others the text format 0.0.4. It binds ``127.0.0.1`` unless told otherwise, optionally
serves TLS and requires HTTP basic auth on ``/metrics`` (``/healthz`` stays open for probes).

Importing this module registers the ``prometheus`` metrics exporter for
``otel_ext.exporters.configure(metrics_exporter="prometheus")``: a :class:`PrometheusMetricReader`
served on ``OTEL_EXT_PROMETHEUS_LISTEN``.

>>> from prometheus_client import CollectorRegistry, Counter
>>> reg = CollectorRegistry()
>>> Counter("doc_events", "Events.", registry=reg).inc()
>>> server = PrometheusExpositionServer([reg], port=0)
>>> host, port = server.start()
>>> import urllib.request
>>> body = urllib.request.urlopen(f"http://{host}:{port}/metrics").read().decode()
>>> "doc_events_total 1.0" in body
True
>>> server.stop()
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import ssl
import threading
from collections.abc import Callable, Sequence
from email.message import Message
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OM_CONTENT_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as om_latest

from otel_ext import config
from otel_ext.errors import ConfigError
from otel_ext.exporters._http_server import HardenedHTTPServer, HttpResponse
from otel_ext.exporters._prometheus_family import new_family
from otel_ext.exporters._prometheus_mapping import (
    PrometheusName,
    map_unit,
    prometheus_name,
    prometheus_type,
    sanitize_label,
    sanitize_name,
)
from otel_ext.exporters._prometheus_sdk import PrometheusExpositionReader, PrometheusMetricReader

__all__ = [
    "PrometheusExpositionReader",
    "PrometheusExpositionServer",
    "PrometheusMetricReader",
    "PrometheusName",
    "basic_auth_matches",
    "map_unit",
    "new_family",
    "parse_basic_auth",
    "parse_listen",
    "prometheus_metrics_reader",
    "prometheus_name",
    "prometheus_type",
    "sanitize_label",
    "sanitize_name",
    "wants_openmetrics",
]

_log = logging.getLogger(__name__)
_EOF = b"# EOF\n"


def parse_listen(text: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``, or ``[v6]:PORT``) -> ``(host, port)``.

    Raises:
        ConfigError: not ``HOST:PORT`` with a port in 0..65535.

    >>> parse_listen("0.0.0.0:9400"), parse_listen(":9400"), parse_listen("[::1]:80")
    (('0.0.0.0', 9400), ('127.0.0.1', 9400), ('::1', 80))
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        raise ConfigError(f"listen address {text!r} is not HOST:PORT")
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"listen address {text!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"listen address {text!r}: port out of range")
    return host, number


def parse_basic_auth(value: str) -> tuple[str, str]:
    """``USER:PASS``, or the path of a file holding ``USER:PASS`` -> ``(user, password)``.

    Raises:
        ConfigError: neither a readable file nor ``USER:PASS``.

    >>> parse_basic_auth("prom:s3cret")
    ('prom', 's3cret')
    """
    text = value
    path = Path(value)
    if path.is_file():
        try:
            text = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read basic-auth file: {exc.strerror}", path=value) from None
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise ConfigError("basic auth must be USER:PASS (or a file holding it)")
    return user, password


def basic_auth_matches(header: str | None, credentials: bytes) -> bool:
    """Whether an ``Authorization`` header carries ``credentials`` (``b"user:pass"``).

    The scheme name is case-insensitive (RFC 7617); the comparison takes constant time.

    >>> basic_auth_matches("basic cHJvbTpwdw==", b"prom:pw"), basic_auth_matches("Basic x", b"a:b")
    (True, False)
    >>> basic_auth_matches("Bearer cHJvbTpwdw==", b"prom:pw"), basic_auth_matches(None, b"a:b")
    (False, False)
    """
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, credentials)


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for OpenMetrics (over the 0.0.4 text format).

    >>> wants_openmetrics("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.4")
    True
    >>> wants_openmetrics("text/plain;version=0.0.4"), wants_openmetrics(None)
    (False, False)
    """
    best_om, best_text = -1.0, -1.0
    for part in (accept or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        q = 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if fields[0] == "application/openmetrics-text":
            best_om = max(best_om, q)
        elif fields[0] in ("text/plain", "*/*"):
            best_text = max(best_text, q)
    return best_om > 0 and best_om >= best_text


def _strip_eof(body: bytes) -> bytes:
    return body[: -len(_EOF)] if body.endswith(_EOF) else body


class PrometheusExpositionServer:
    """An HTTP server for ``/metrics`` and ``/healthz``.

    Args:
        exposers: what to serve: objects with ``render(openmetrics=bool) -> bytes``,
            ``prometheus_client`` registries/collectors, or :class:`PrometheusMetricReader`.
        host: the address to bind (``127.0.0.1``: only this host can scrape).
        port: the port (0: any free port; :meth:`start` returns the one bound).
        certfile, keyfile: PEM files to serve HTTPS.
        basic_auth: ``(user, password)`` required on ``/metrics``.
        health: returns the ``/healthz`` JSON body (its ``ok`` decides 200 or 503).
        timeout_s: limit on each read, write and TLS handshake of a connection.
        idle_timeout_s: how long a kept-alive connection may wait for its next scrape.
        max_connections: connections served at once; more are answered 503 or closed.

    The transport is :class:`otel_ext.exporters._http_server.HardenedHTTPServer`: see its limits.
    """

    def __init__(
        self,
        exposers: Sequence[Any],
        *,
        host: str = "127.0.0.1",
        port: int = 9464,
        certfile: str | None = None,
        keyfile: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        health: Callable[[], dict[str, Any]] | None = None,
        timeout_s: float = 10.0,
        idle_timeout_s: float = 90.0,
        max_connections: int = 64,
    ):
        self.exposers = list(exposers)
        self.host = host
        self.port = port
        self.certfile = certfile
        self.keyfile = keyfile
        self._credentials = (
            f"{basic_auth[0]}:{basic_auth[1]}".encode() if basic_auth is not None else None
        )
        self.health = health
        self.timeout_s = timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self._httpd: HardenedHTTPServer | None = None
        self._lock = threading.Lock()
        self.scrapes = 0

    @property
    def http(self) -> HardenedHTTPServer | None:
        """The running transport (its ``refused``/``client_errors`` counts), or ``None``."""
        return self._httpd

    @property
    def scheme(self) -> str:
        return "https" if self.certfile else "http"

    def render(self, *, openmetrics: bool) -> bytes:
        """The concatenated exposition of every exposer (one ``# EOF`` in OpenMetrics)."""
        parts: list[bytes] = []
        for ex in self.exposers:
            try:
                if hasattr(ex, "render"):
                    body = ex.render(openmetrics=openmetrics)
                else:
                    target = ex.collector() if isinstance(ex, PrometheusMetricReader) else ex
                    if not isinstance(target, CollectorRegistry):
                        reg = CollectorRegistry(auto_describe=False)
                        reg.register(target)
                        target = reg
                    body = om_latest(target) if openmetrics else text_latest(target)
            except Exception as exc:  # one broken exposer must not fail the scrape
                _log.warning("exposer %r failed: %r", ex, exc)
                continue
            parts.append(_strip_eof(body) if openmetrics else body)
        if openmetrics:
            parts.append(_EOF)
        return b"".join(parts)

    def respond(self, method: str, path: str, headers: Message) -> HttpResponse:
        """The response to one request (``method`` is ``GET`` or ``HEAD``)."""
        path = path.split("?", 1)[0]
        if path == "/healthz":
            status = self.health() if self.health else {"ok": True}
            body = json.dumps(status, sort_keys=True).encode()
            return HttpResponse(200 if status.get("ok") else 503, body, "application/json")
        if path != "/metrics":
            return HttpResponse(404, b"not found: try /metrics or /healthz\n", "text/plain")
        if self._credentials is not None and not basic_auth_matches(
            headers.get("Authorization"), self._credentials
        ):
            return HttpResponse(
                401,
                b"unauthorized\n",
                "text/plain",
                (("WWW-Authenticate", 'Basic realm="otel-ext"'),),
            )
        om = wants_openmetrics(headers.get("Accept"))
        body = self.render(openmetrics=om)
        with self._lock:
            self.scrapes += 1
        return HttpResponse(200, body, OM_CONTENT_TYPE if om else CONTENT_TYPE_PLAIN_0_0_4)

    def start(self) -> tuple[str, int]:
        """Bind and serve on a daemon thread; return the bound ``(host, port)``.

        Raises:
            ConfigError: the address cannot be bound or the TLS files cannot be loaded.
        """
        ctx = None
        if self.certfile:
            try:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(self.certfile, self.keyfile)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"cannot load TLS certificate/key: {exc}", path=self.certfile
                ) from None
        try:
            httpd = HardenedHTTPServer(
                (self.host, self.port),
                self.respond,
                ssl_context=ctx,
                timeout_s=self.timeout_s,
                idle_timeout_s=self.idle_timeout_s,
                max_connections=self.max_connections,
            )
        except OSError as exc:
            raise ConfigError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        self._httpd = httpd
        self.port = httpd.start()[1]
        return self.host, self.port

    def stop(self) -> None:
        """Stop serving and close the socket and open connections (idempotent)."""
        if self._httpd is not None:
            self._httpd.stop()
            self._httpd = None


class _ServedReader(PrometheusMetricReader):
    """A reader that owns its exposition server (the ``prometheus`` exporter)."""

    def __init__(self, host: str, port: int):
        super().__init__()
        self.server = PrometheusExpositionServer([self], host=host, port=port)
        self.server.start()

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.server.stop()


def prometheus_metrics_reader(
    settings: Any = None, *, listen: str | None = None
) -> PrometheusMetricReader:
    """The ``prometheus`` metrics exporter: an SDK reader served on ``/metrics``.

    Args:
        settings: the ``ExporterSettings`` of ``otel_ext.exporters.configure`` (its ``env`` is read).
        listen: ``HOST:PORT``; default ``OTEL_EXT_PROMETHEUS_LISTEN``.
    """
    env = getattr(settings, "env", None)
    host, port = parse_listen(config.resolve(config.PROMETHEUS_LISTEN, listen, env=env))
    return _ServedReader(host, port)


def _register() -> None:
    try:
        from otel_ext.exporters import register_metrics_exporter
    except ImportError:  # the exporters package is being built in parallel
        return
    register_metrics_exporter("prometheus", prometheus_metrics_reader)


_register()
