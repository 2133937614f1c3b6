"""One-call OpenTelemetry setup: providers, resource, exporters, from code then environment.

:func:`configure` builds a ``TracerProvider`` and a ``MeterProvider`` with the
accelerator resource attributes and the chosen exporters, and returns a
:class:`Telemetry` handle whose :meth:`~Telemetry.shutdown` flushes within a bounded time.
Every setting follows the OpenTelemetry order: code argument, then environment variable
(standard ``OTEL_*``, ours ``OTEL_EXT_*``), then default; an empty variable means unset.

Exporters by name (``traces_exporter=`` / ``OTEL_TRACES_EXPORTER``, ``metrics_exporter=``
/ ``OTEL_METRICS_EXPORTER``, comma-separated): ``otlp``, ``file``, ``perfetto``,
``prometheus`` (metrics; provided by :mod:`otel_ext.exporters.prometheus`, looked up on first
use), ``console`` and ``none``; ``otlp`` when none is named, as the specification says
(without a collector: one warning, drops counted, see :mod:`otel_ext.exporters._otlp_outage`). More
can be plugged in with :func:`register_span_exporter` and :func:`register_metrics_exporter`.
Every span with an ``accel.device.id`` is also published for the node agent's exemplars
(``publish_active_spans=``, ``OTEL_EXT_ACTIVE_SPANS``).

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> telemetry = configure(traces_exporter="file", metrics_exporter="none",
...                       file_dir=folder, set_global=False, env={})
>>> with telemetry.tracer_provider.get_tracer("doc").start_as_current_span("step"):
...     pass
>>> telemetry.shutdown()
True
>>> from otel_ext.exporters import read_spans
>>> [span.name for span in read_spans(folder + "/traces.jsonl")]
['step']
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import (
    SERVICE_NAME,
    TELEMETRY_SDK_LANGUAGE,
    TELEMETRY_SDK_NAME,
    TELEMETRY_SDK_VERSION,
    Resource,
)
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter
from opentelemetry.util.re import parse_env_headers

from otel_ext import config
from otel_ext._drops import LEDGER
from otel_ext.errors import ConfigError
from otel_ext.exporters._batch import BoundedBatchSpanProcessor, GuardedMetricExporter
from otel_ext.exporters._file_exporters import OtlpJsonFileMetricExporter, OtlpJsonFileSpanExporter
from otel_ext.exporters._guard import DropCounter
from otel_ext.exporters._otlp_outage import (
    CollectorEndpoint,
    OutageGuardMetricExporter,
    OutageGuardSpanExporter,
    quiet_sdk_retry_logs,
)
from otel_ext.exporters._perfetto import PerfettoTraceExporter
from otel_ext.exporters._resource import accelerator_attributes

__all__ = [
    "ExporterSettings",
    "OtlpSettings",
    "Telemetry",
    "configure",
    "register_metrics_exporter",
    "register_span_exporter",
]

_log = logging.getLogger(__name__)

SpanExporterFactory = Callable[["ExporterSettings"], SpanExporter]
MetricReaderFactory = Callable[["ExporterSettings"], MetricReader]

_SPAN_FACTORIES: dict[str, SpanExporterFactory] = {}
_METRIC_FACTORIES: dict[str, MetricReaderFactory] = {}
_LAZY_MODULES = {"prometheus": "otel_ext.exporters.prometheus"}
_registry_lock = threading.Lock()


def register_span_exporter(name: str, factory: SpanExporterFactory) -> None:
    """Make ``name`` usable in ``traces_exporter=`` / ``OTEL_TRACES_EXPORTER``.

    Args:
        name: the exporter name (lower case).
        factory: builds a span exporter from the resolved :class:`ExporterSettings`.
            :func:`configure` wraps it in a :class:`BoundedBatchSpanProcessor` and calls
            the factory again in a forked child.
    """
    with _registry_lock:
        _SPAN_FACTORIES[name.strip().lower()] = factory


def register_metrics_exporter(name: str, factory: MetricReaderFactory) -> None:
    """Make ``name`` usable in ``metrics_exporter=`` / ``OTEL_METRICS_EXPORTER``.

    Args:
        name: the exporter name (lower case).
        factory: builds a metric *reader* (push exporters wrap theirs in a
            ``PeriodicExportingMetricReader``; pull exporters such as Prometheus are
            readers themselves) from the resolved :class:`ExporterSettings`.

    >>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    >>> register_metrics_exporter("doc-memory", lambda settings: InMemoryMetricReader())
    >>> telemetry = configure(traces_exporter="none", metrics_exporter="doc-memory",
    ...                       set_global=False, env={})
    >>> type(telemetry.metric_readers["doc-memory"]).__name__
    'InMemoryMetricReader'
    >>> telemetry.shutdown()
    True
    """
    with _registry_lock:
        _METRIC_FACTORIES[name.strip().lower()] = factory


@dataclass(frozen=True)
class OtlpSettings:
    """Resolved OTLP exporter settings for one signal."""

    protocol: str
    endpoint: str
    headers: dict[str, str]
    insecure: bool
    certificate_file: str | None
    client_key_file: str | None
    client_certificate_file: str | None
    compression: str | None
    timeout_s: float


@dataclass
class ExporterSettings:
    """Everything an exporter factory may need, resolved once by :func:`configure`.

    Attributes:
        env: the environment configure read.
        resource: the resource of both providers.
        file_dir: folder of the ``file`` and ``perfetto`` exporters.
        file_max_bytes: rotation size of the OTLP-JSON files.
        file_gzip: whether OTLP-JSON files are gzip-compressed.
        export_timeout_s: longest time one export may take.
        metric_export_interval_s: seconds between two metric exports.
        otlp_traces, otlp_metrics: OTLP settings per signal.
        drops: the drop counter (signal ``traces`` / ``metrics``).
        shared: scratch space for factories that share state (the Perfetto file).
    """

    env: Mapping[str, str]
    resource: Resource
    file_dir: Path
    file_max_bytes: int
    file_gzip: bool
    export_timeout_s: float
    metric_export_interval_s: float
    otlp_traces: OtlpSettings
    otlp_metrics: OtlpSettings
    drops: DropCounter
    shared: dict[str, Any] = field(default_factory=dict)


class Telemetry:
    """What :func:`configure` set up; call :meth:`shutdown` (or use ``with``) at exit.

    Attributes:
        tracer_provider: the SDK tracer provider (a no-op one when the SDK is disabled).
        meter_provider: the SDK meter provider (a no-op one when the SDK is disabled).
        resource: the resource both carry.
        span_exporters: exporter name → span exporter.
        metric_readers: exporter name → metric reader.
        drops: the drop counter; :meth:`dropped` reads it.
        active_spans: the processor publishing each device's running span, if on.
        shutdown_timeout_s: the default bound of :meth:`shutdown` (the export timeout).
    """

    def __init__(
        self,
        tracer_provider: Any,
        meter_provider: Any,
        resource: Resource,
        *,
        processors: Sequence[BoundedBatchSpanProcessor] = (),
        span_exporters: Mapping[str, SpanExporter] | None = None,
        metric_readers: Mapping[str, MetricReader] | None = None,
        drops: DropCounter | None = None,
        active_spans: Any = None,
        shutdown_timeout_s: float = 10.0,
    ):
        self.tracer_provider = tracer_provider
        self.active_spans = active_spans
        self.shutdown_timeout_s = shutdown_timeout_s
        self.meter_provider = meter_provider
        self.resource = resource
        self.processors = list(processors)
        self.span_exporters = dict(span_exporters or {})
        self.metric_readers = dict(metric_readers or {})
        self.drops = drops or DropCounter()
        #: configure()'s arguments (JSON values; ``None`` when not made by configure())
        self.arguments: dict[str, Any] | None = None
        self._shut = False

    def dropped(self) -> dict[str, int]:
        """Telemetry items dropped so far, per signal (``traces``, ``metrics``)."""
        return self.drops.totals()

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Export everything pending; False if not done within ``timeout_s``
        (default :attr:`shutdown_timeout_s`)."""
        deadline = time.monotonic() + (self.shutdown_timeout_s if timeout_s is None else timeout_s)
        # otel-ext's background spans (collective drain, deferred layers, device events)
        # first, in a share of the time: then the processors export them in this flush
        ok = _drain_background(self.tracer_provider, deadline, "flush_timeout")
        for processor in self.processors:
            left = max(0.0, deadline - time.monotonic())
            ok = processor.force_flush(int(left * 1000)) and ok
        if isinstance(self.meter_provider, MeterProvider):
            left = max(0.0, deadline - time.monotonic())
            try:
                ok = bool(self.meter_provider.force_flush(int(left * 1000))) and ok
            except Exception:
                ok = False
        return ok and time.monotonic() <= deadline

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Flush and stop every exporter, spending at most about ``timeout_s`` in total.

        Args:
            timeout_s: the bound (default: :attr:`shutdown_timeout_s`, the export timeout
                ``configure`` resolved). An OTLP exporter whose collector is unreachable
                is stopped at once rather than retried until the bound (its spans are
                dropped and counted).

        Returns:
            True when everything finished in time. Never raises.
        """
        if self._shut:
            return True
        self._shut = True
        if timeout_s is None:
            timeout_s = self.shutdown_timeout_s
        deadline = time.monotonic() + timeout_s
        ok = _drain_background(self.tracer_provider, deadline, "shutdown_timeout")
        for exporter in self.span_exporters.values():
            if isinstance(exporter, OutageGuardSpanExporter):
                try:
                    exporter.abort_if_unreachable()
                except Exception:
                    _log.warning("stopping an unreachable OTLP exporter failed", exc_info=True)
        for processor in self.processors:
            processor.shutdown(int(max(0.0, deadline - time.monotonic()) * 1000))
        if isinstance(self.tracer_provider, TracerProvider):
            try:
                self.tracer_provider.shutdown()
            except Exception:
                ok = False
        if isinstance(self.meter_provider, MeterProvider):
            try:
                self.meter_provider.shutdown(int(max(1.0, (deadline - time.monotonic()) * 1000)))
            except Exception:
                ok = False
        return ok and time.monotonic() <= deadline + 0.5

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


#: the exporters that write into ``file_dir``
_FILE_EXPORTERS = ("file", "perfetto")


def _warn_unused_file_dir(
    file_dir: Any, env: Mapping[str, str], span_names: Sequence[str], metric_names: Sequence[str]
) -> bool:
    """One warning (per process) when a folder is named for files and no exporter writes
    files: ``OTEL_EXT_FILE_DIR`` does not choose an exporter (the specification's default,
    ``otlp``, stays), so the user learns the folder is unused and how to use it.

    Returns:
        True when the folder is unused.
    """
    named = file_dir is not None or _get(env, config.FILE_DIR.name) is not None
    used = any(n in _FILE_EXPORTERS for n in [*span_names, *metric_names])
    if not named or used:
        return False
    where = "file_dir=" if file_dir is not None else f"{config.FILE_DIR.name}"
    LEDGER.drop(
        "config",
        "file_dir_unused",
        0,
        message="%s names a folder, but no exporter writes files there (traces: %s, metrics: "
        "%s); set OTEL_TRACES_EXPORTER=file and OTEL_METRICS_EXPORTER=file (or "
        "traces_exporter=/metrics_exporter=) to write OTLP-JSON files into it",
        args=(where, ",".join(span_names) or "none", ",".join(metric_names) or "none"),
        logger=_log,
    )
    return True


def _drain_background(tracer_provider: Any, deadline: float, reason: str) -> bool:
    """Drain the background span producers registered with ``tracer_provider`` within
    three quarters of the time left (see :mod:`otel_ext.instrumentation.provider_drain`)."""
    from otel_ext.instrumentation.provider_drain import FLUSH_SHARE, drain_provider

    left = max(0.0, deadline - time.monotonic()) * FLUSH_SHARE
    return drain_provider(tracer_provider, left, reason=reason)


# -- environment ---------------------------------------------------------------------------
def _get(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        raw = env.get(name, "").strip()
        if raw:
            return raw
    return None


def _number(env: Mapping[str, str], name: str, default: float, *, scale: float = 1.0) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw) * scale
    except ValueError:
        _log.warning("%s=%r is not a number; using the default %r", name, raw, default)
        return default
    if value <= 0:
        _log.warning("%s=%r is not positive; using the default %r", name, raw, default)
        return default
    return value


def _bool(env: Mapping[str, str], *names: str) -> bool | None:
    raw = _get(env, *names)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false"):
        _log.warning("%s=%r is not 'true' or 'false'; treating it as false", names[0], raw)
    return raw.lower() == "true"


def _names(
    value: str | Sequence[str] | None, env: Mapping[str, str], var: str, default: str
) -> list[str]:
    if value is None:
        value = _get(env, var) or default
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [item.strip().lower() for item in items if item.strip()]
    if "none" in names:
        if len(names) > 1:
            raise ConfigError(
                f"'none' cannot be combined with other exporters: {names}", record=var
            )
        return []
    return list(dict.fromkeys(names))


def _parse_resource_attributes(raw: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if not raw:
        return out
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _log.warning("OTEL_RESOURCE_ATTRIBUTES: ignoring %r (not key=value)", item)
            continue
        out[unquote(key.strip())] = unquote(value.strip())
    return out


def _resource(
    env: Mapping[str, str],
    service_name: str | None,
    attributes: Mapping[str, Any] | None,
    detect: bool,
) -> Resource:
    from opentelemetry.sdk.version import __version__ as sdk_version

    attrs: dict[str, Any] = {
        TELEMETRY_SDK_LANGUAGE: "python",
        TELEMETRY_SDK_NAME: "opentelemetry",
        TELEMETRY_SDK_VERSION: sdk_version,
    }
    if detect:
        attrs.update(accelerator_attributes(env=env))
    attrs.update(_parse_resource_attributes(_get(env, "OTEL_RESOURCE_ATTRIBUTES")))
    env_service = _get(env, "OTEL_SERVICE_NAME")
    if env_service:
        attrs[SERVICE_NAME] = env_service
    attrs.update(attributes or {})
    if service_name:
        attrs[SERVICE_NAME] = service_name
    attrs.setdefault(SERVICE_NAME, "unknown_service:python")
    return Resource(attrs)


def _otlp(
    env: Mapping[str, str],
    signal: str,
    *,
    protocol: str | None,
    endpoint: str | None,
    headers: Mapping[str, str] | None,
    insecure: bool | None,
    certificate_file: str | None,
    client_key_file: str | None,
    client_certificate_file: str | None,
    compression: str | None,
    timeout_s: float,
) -> OtlpSettings:
    sig = signal.upper()
    proto = (
        protocol
        or _get(env, f"OTEL_EXPORTER_OTLP_{sig}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).lower()
    if proto not in ("grpc", "http/protobuf"):
        raise ConfigError(
            f"unsupported OTLP protocol {proto!r} (use 'grpc' or 'http/protobuf')",
            record="OTEL_EXPORTER_OTLP_PROTOCOL",
        )
    path = f"/v1/{signal}"
    specific = None if endpoint else _get(env, f"OTEL_EXPORTER_OTLP_{sig}_ENDPOINT")
    if specific:
        url = specific
    else:
        base = endpoint or _get(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
        if base is None:
            base = "http://localhost:4317" if proto == "grpc" else "http://localhost:4318"
        url = base if proto == "grpc" else base.rstrip("/") + path
    header_map: dict[str, str] = {}
    raw_headers = _get(env, "OTEL_EXPORTER_OTLP_HEADERS")
    if raw_headers:
        header_map.update(parse_env_headers(raw_headers, liberal=True))
    raw_headers = _get(env, f"OTEL_EXPORTER_OTLP_{sig}_HEADERS")
    if raw_headers:
        header_map.update(parse_env_headers(raw_headers, liberal=True))
    header_map.update(headers or {})
    scheme = urlparse(url).scheme
    if insecure is None:
        insecure = _bool(env, f"OTEL_EXPORTER_OTLP_{sig}_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE")
    if scheme == "https":
        insecure = False
    elif insecure is None:
        insecure = scheme == "http"
    comp = (
        compression
        or _get(env, f"OTEL_EXPORTER_OTLP_{sig}_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
        or "none"
    ).lower()
    if comp not in ("gzip", "none"):
        raise ConfigError(
            f"unsupported OTLP compression {comp!r} (use 'gzip' or 'none')",
            record="OTEL_EXPORTER_OTLP_COMPRESSION",
        )
    return OtlpSettings(
        protocol=proto,
        endpoint=url,
        headers=header_map,
        insecure=bool(insecure),
        certificate_file=certificate_file
        or _get(env, f"OTEL_EXPORTER_OTLP_{sig}_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"),
        client_key_file=client_key_file
        or _get(env, f"OTEL_EXPORTER_OTLP_{sig}_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
        client_certificate_file=client_certificate_file
        or _get(
            env,
            f"OTEL_EXPORTER_OTLP_{sig}_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        ),
        compression=None if comp == "none" else comp,
        timeout_s=timeout_s,
    )


def _read(path: str | None, what: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what}: {exc.strerror or exc}", path=path) from exc


# -- built-in exporters --------------------------------------------------------------------
def _otlp_exporter(settings: OtlpSettings, signal: str) -> Any:
    if settings.protocol == "grpc":
        import grpc

        credentials = None
        if not settings.insecure and settings.certificate_file:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.certificate_file, "OTLP certificate"),
                private_key=_read(settings.client_key_file, "OTLP client key"),
                certificate_chain=_read(
                    settings.client_certificate_file, "OTLP client certificate"
                ),
            )
        grpc_compression = (
            grpc.Compression.Gzip
            if settings.compression == "gzip"
            else grpc.Compression.NoCompression
        )
        kwargs: dict[str, Any] = {
            "endpoint": settings.endpoint,
            "insecure": settings.insecure,
            "credentials": credentials,
            "headers": dict(settings.headers),
            "timeout": settings.timeout_s,
            "compression": grpc_compression,
            # A restarted Collector is picked up within seconds: a private subchannel
            # (the exporter re-creates its channel on UNAVAILABLE) and a short reconnect
            # backoff instead of gRPC's default of up to two minutes.
            "channel_options": (
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ),
        }
        if signal == "traces":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter(**kwargs)
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(**kwargs)
    from opentelemetry.exporter.otlp.proto.http import Compression

    for path, what in (
        (settings.certificate_file, "OTLP certificate"),
        (settings.client_key_file, "OTLP client key"),
        (settings.client_certificate_file, "OTLP client certificate"),
    ):
        _read(path, what)
    http_kwargs: dict[str, Any] = {
        "endpoint": settings.endpoint,
        "certificate_file": settings.certificate_file,
        "client_key_file": settings.client_key_file,
        "client_certificate_file": settings.client_certificate_file,
        "headers": dict(settings.headers),
        "timeout": settings.timeout_s,
        "compression": Compression.Gzip
        if settings.compression == "gzip"
        else Compression.NoCompression,
    }
    if signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        return HttpSpanExporter(**http_kwargs)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(**http_kwargs)


def _periodic(settings: ExporterSettings, factory: Callable[[], MetricExporter]) -> MetricReader:
    return PeriodicExportingMetricReader(
        GuardedMetricExporter(factory(), drops=settings.drops, exporter_factory=factory),
        export_interval_millis=settings.metric_export_interval_s * 1000,
        export_timeout_millis=settings.export_timeout_s * 1000,
    )


def _perfetto(settings: ExporterSettings) -> PerfettoTraceExporter:
    exporter = settings.shared.get("perfetto")
    if exporter is None:
        exporter = PerfettoTraceExporter(settings.file_dir / "trace.perfetto.json")
        settings.shared["perfetto"] = exporter
    return exporter


def _collector(
    settings: ExporterSettings, otlp: OtlpSettings, signal_var: str
) -> CollectorEndpoint:
    """The reachability of ``otlp``'s collector, shared by the signals sending to one address."""
    table: dict[str, CollectorEndpoint] = settings.shared.setdefault("collectors", {})
    parsed = urlparse(otlp.endpoint if "://" in otlp.endpoint else "http://" + otlp.endpoint)
    key = parsed.netloc or otlp.endpoint
    endpoint = table.get(key)
    if endpoint is None:
        endpoint = table[key] = CollectorEndpoint(
            otlp.endpoint,
            signal_var=signal_var,
            probe_timeout_s=min(1.0, settings.export_timeout_s),
        )
    elif signal_var not in endpoint.signal_vars:
        endpoint.signal_vars.append(signal_var)
    quiet_sdk_retry_logs()
    return endpoint


def _otlp_spans(settings: ExporterSettings) -> SpanExporter:
    return OutageGuardSpanExporter(
        _otlp_exporter(settings.otlp_traces, "traces"),
        _collector(settings, settings.otlp_traces, "OTEL_TRACES_EXPORTER"),
        drops=settings.drops,
    )


def _otlp_metrics(settings: ExporterSettings) -> MetricExporter:
    return OutageGuardMetricExporter(
        _otlp_exporter(settings.otlp_metrics, "metrics"),
        _collector(settings, settings.otlp_metrics, "OTEL_METRICS_EXPORTER"),
        drops=settings.drops,
    )


def _builtin_span(name: str) -> SpanExporterFactory | None:
    return {
        "otlp": _otlp_spans,
        "file": lambda s: OtlpJsonFileSpanExporter(
            s.file_dir / "traces.jsonl", max_bytes=s.file_max_bytes, gzip=s.file_gzip
        ),
        "console": lambda s: ConsoleSpanExporter(),
        "perfetto": _perfetto,
    }.get(name)


def _builtin_metric(name: str) -> MetricReaderFactory | None:
    table: dict[str, MetricReaderFactory] = {
        "otlp": lambda s: _periodic(s, lambda: _otlp_metrics(s)),
        "file": lambda s: _periodic(
            s,
            lambda: OtlpJsonFileMetricExporter(
                s.file_dir / "metrics.jsonl", max_bytes=s.file_max_bytes, gzip=s.file_gzip
            ),
        ),
        "console": lambda s: _periodic(s, ConsoleMetricExporter),
        "perfetto": lambda s: _periodic(s, lambda: _perfetto(s).metric_exporter()),
    }
    return table.get(name)


def _lookup(name: str, table: dict[str, Any], builtin: Callable[[str], Any], var: str) -> Any:
    with _registry_lock:
        factory = table.get(name)
    if factory is None:
        factory = builtin(name)
    if factory is None and name in _LAZY_MODULES:
        try:
            importlib.import_module(_LAZY_MODULES[name])
        except ImportError as exc:
            raise ConfigError(f"exporter {name!r} is not available: {exc}", record=var) from exc
        with _registry_lock:
            factory = table.get(name)
    if factory is None:
        raise ConfigError(f"unknown exporter {name!r}", record=var)
    return factory


def _active_span_processor(
    directory: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> SpanProcessor | None:
    """The processor publishing each device's running span, or ``None`` where it cannot run."""
    try:
        from otel_ext.instrumentation.active_span import (
            ActiveSpanPublisher,
            ActiveSpanPublishingProcessor,
        )
    except ImportError as exc:  # no fcntl/mmap semantics (not a POSIX host)
        _log.warning("active spans are not published for the node agent: %s", exc)
        return None
    if directory is None:
        directory = _get(env, config.ACTIVE_SPAN_DIR.name)
    return ActiveSpanPublishingProcessor(ActiveSpanPublisher(directory))


@dataclass(frozen=True)
class OtlpOptions:
    """The OTLP exporters' settings, for :func:`configure` (``otlp=``); each ``None`` means
    "from the ``OTEL_EXPORTER_OTLP_*`` variables, else the default".

    Attributes:
        endpoint: OTLP endpoint base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``; the signal
            variables ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``... are used as given).
        protocol: ``grpc`` or ``http/protobuf`` (``OTEL_EXPORTER_OTLP_PROTOCOL``; default
            ``http/protobuf`` as the specification says).
        headers: OTLP headers, over ``OTEL_EXPORTER_OTLP_HEADERS``.
        insecure: gRPC without TLS (``OTEL_EXPORTER_OTLP_INSECURE``; default: when the
            endpoint scheme is ``http``).
        certificate_file: CA bundle (``OTEL_EXPORTER_OTLP_CERTIFICATE``).
        client_key_file: client key for mTLS (``OTEL_EXPORTER_OTLP_CLIENT_KEY``).
        client_certificate_file: client certificate for mTLS
            (``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE``).
        compression: ``gzip`` or ``none`` (``OTEL_EXPORTER_OTLP_COMPRESSION``).

    >>> OtlpOptions(endpoint="http://collector:4318").protocol is None
    True
    """

    endpoint: str | None = None
    protocol: str | None = None
    headers: Mapping[str, str] | None = None
    insecure: bool | None = None
    certificate_file: str | None = None
    client_key_file: str | None = None
    client_certificate_file: str | None = None
    compression: str | None = None


@dataclass(frozen=True)
class FileOptions:
    """The ``file`` and ``perfetto`` exporters' settings, for :func:`configure` (``files=``).

    Attributes:
        dir: their folder (``OTEL_EXT_FILE_DIR``, default ``.``).
        max_bytes: rotation size of the OTLP-JSON files (``OTEL_EXT_FILE_MAX_BYTES``).
        gzip: gzip the OTLP-JSON files (``OTEL_EXT_FILE_GZIP``).
    """

    dir: str | os.PathLike[str] | None = None
    max_bytes: int | None = None
    gzip: bool | None = None


@dataclass(frozen=True)
class ExportOptions:
    """How telemetry is batched and exported, for :func:`configure` (``export=``).

    Attributes:
        timeout_s: longest time one export may take, and the default bound of
            :meth:`Telemetry.shutdown` (``OTEL_EXT_EXPORT_TIMEOUT_S``, else
            ``OTEL_BSP_EXPORT_TIMEOUT`` in ms, else ``OTEL_EXPORTER_OTLP_TIMEOUT`` in ms,
            else 10 s).
        metric_interval_s: ``OTEL_METRIC_EXPORT_INTERVAL`` (ms), default 60 s.
        max_queue_size: spans queued at most (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048).
        schedule_delay_s: ``OTEL_BSP_SCHEDULE_DELAY`` (ms), default 5 s.
        max_export_batch_size: ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, default 512.
    """

    timeout_s: float | None = None
    metric_interval_s: float | None = None
    max_queue_size: int | None = None
    schedule_delay_s: float | None = None
    max_export_batch_size: int | None = None


@dataclass(frozen=True)
class ActiveSpanOptions:
    """The active-span records for the node agent's exemplars, for :func:`configure`
    (``active_spans=``; see :mod:`otel_ext.instrumentation.active_span_record`).

    Attributes:
        publish: publish the span running on each device (``accel.device.id``)
            (``OTEL_EXT_ACTIVE_SPANS``, default true).
        dir: the records' folder (``OTEL_EXT_ACTIVE_SPAN_DIR``).
    """

    publish: bool | None = None
    dir: str | os.PathLike[str] | None = None


_Options = TypeVar("_Options", OtlpOptions, FileOptions, ExportOptions, ActiveSpanOptions)


def _merge(given: _Options | None, keywords: _Options, name: str) -> _Options:
    """The option object ``name=``: ``given`` (else the defaults) with the settings given as
    single keywords (``keywords``'s fields that are not ``None``) set on it.

    >>> _merge(FileOptions(dir="out"), FileOptions(gzip=True), "files")
    FileOptions(dir='out', max_bytes=None, gzip=True)
    >>> _merge(FileOptions(dir="out"), FileOptions(dir="elsewhere"), "files")
    Traceback (most recent call last):
    ...
    otel_ext.errors.ConfigError: FileOptions.dir is given twice (in files= and as a keyword)

    Raises:
        ConfigError: a setting given both in the object and as a keyword.
    """
    if given is None:
        return keywords
    set_here = [f.name for f in fields(keywords) if getattr(keywords, f.name) is not None]
    for field_name in set_here:
        if getattr(given, field_name) is not None:
            raise ConfigError(
                f"{type(given).__name__}.{field_name} is given twice (in {name}= and as a keyword)"
            )
    return replace(given, **{field_name: getattr(keywords, field_name) for field_name in set_here})


def configure(
    *,
    service_name: str | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    traces_exporter: str | Sequence[str] | None = None,
    metrics_exporter: str | Sequence[str] | None = None,
    otlp: OtlpOptions | None = None,
    files: FileOptions | None = None,
    export: ExportOptions | None = None,
    active_spans: ActiveSpanOptions | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    insecure: bool | None = None,
    certificate_file: str | None = None,
    client_key_file: str | None = None,
    client_certificate_file: str | None = None,
    compression: str | None = None,
    file_dir: str | os.PathLike[str] | None = None,
    file_max_bytes: int | None = None,
    file_gzip: bool | None = None,
    export_timeout_s: float | None = None,
    metric_export_interval_s: float | None = None,
    max_queue_size: int | None = None,
    schedule_delay_s: float | None = None,
    max_export_batch_size: int | None = None,
    detect_accelerator: bool = True,
    publish_active_spans: bool | None = None,
    active_span_dir: str | os.PathLike[str] | None = None,
    disabled: bool | None = None,
    set_global: bool = True,
    env: Mapping[str, str] | None = None,
) -> Telemetry:
    """Set up tracing and metrics in one call; see the module docstring.

    Each setting is the argument, else its environment variable, else the default. The
    settings of one part come as its option object (``otlp=``: :class:`OtlpOptions`,
    ``files=``: :class:`FileOptions`, ``export=``: :class:`ExportOptions`,
    ``active_spans=``: :class:`ActiveSpanOptions`, where each field is documented) or one
    by one as the single keywords (every keyword of earlier versions, kept: ``endpoint``,
    ``protocol``, ``headers``, ``insecure``, ``certificate_file``, ``client_key_file``,
    ``client_certificate_file``, ``compression`` are :class:`OtlpOptions`'s fields;
    ``file_dir``, ``file_max_bytes``, ``file_gzip`` :class:`FileOptions`'s ``dir``,
    ``max_bytes``, ``gzip``; ``export_timeout_s``, ``metric_export_interval_s``,
    ``max_queue_size``, ``schedule_delay_s``, ``max_export_batch_size``
    :class:`ExportOptions`'s ``timeout_s``, ``metric_interval_s`` and the same names;
    ``publish_active_spans``, ``active_span_dir`` :class:`ActiveSpanOptions`'s ``publish``,
    ``dir``). A setting given both ways raises :class:`~otel_ext.errors.ConfigError`.

    Args:
        service_name: ``service.name`` (else ``OTEL_SERVICE_NAME``, else
            ``OTEL_RESOURCE_ATTRIBUTES``, else ``unknown_service:python``).
        resource_attributes: extra resource attributes, over ``OTEL_RESOURCE_ATTRIBUTES``
            and the detected accelerator attributes.
        traces_exporter: names, list or comma-separated (else ``OTEL_TRACES_EXPORTER``).
            Default: ``otlp``, as the specification says (without a collector the spans
            are dropped and counted, and one warning says so and how to write files).
        metrics_exporter: likewise (``OTEL_METRICS_EXPORTER``).
        detect_accelerator: add host, device, rank and world size to the resource.
        disabled: return no-op providers (``OTEL_SDK_DISABLED``).
        set_global: install the providers as the OpenTelemetry globals.
        env: the environment to read (defaults to ``os.environ``).

    Returns:
        The :class:`Telemetry` handle.

    Raises:
        ConfigError: an unknown exporter, protocol or compression, an unreadable
            certificate file, or a setting given twice.
    """
    return _configure(_Setup.of(locals()))


#: configure()'s single keywords: the option object (its keyword) and the field each sets
_KEYWORD_FIELDS: dict[str, tuple[str, str]] = {
    **{name: ("otlp", name) for name in (f.name for f in fields(OtlpOptions))},
    "file_dir": ("files", "dir"),
    "file_max_bytes": ("files", "max_bytes"),
    "file_gzip": ("files", "gzip"),
    "export_timeout_s": ("export", "timeout_s"),
    "metric_export_interval_s": ("export", "metric_interval_s"),
    "max_queue_size": ("export", "max_queue_size"),
    "schedule_delay_s": ("export", "schedule_delay_s"),
    "max_export_batch_size": ("export", "max_export_batch_size"),
    "publish_active_spans": ("active_spans", "publish"),
    "active_span_dir": ("active_spans", "dir"),
}


def _keywords_of(group: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of option object ``group`` that ``given`` sets as single keywords."""
    return {fld: given[kw] for kw, (grp, fld) in _KEYWORD_FIELDS.items() if grp == group}


@dataclass(frozen=True)
class _Setup:
    """:func:`configure`'s arguments with each part's settings in its option object."""

    service_name: str | None
    resource_attributes: Mapping[str, Any] | None
    traces_exporter: str | Sequence[str] | None
    metrics_exporter: str | Sequence[str] | None
    otlp: OtlpOptions
    files: FileOptions
    export: ExportOptions
    active_spans: ActiveSpanOptions
    detect_accelerator: bool
    disabled: bool | None
    set_global: bool
    env: Mapping[str, str] | None

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> _Setup:
        """:func:`configure`'s arguments (its ``locals()``), each option object merged with
        the single keywords that set its fields.

        Raises:
            ConfigError: a setting given both in an option object and as a keyword.
        """
        return cls(
            service_name=given["service_name"],
            resource_attributes=given["resource_attributes"],
            traces_exporter=given["traces_exporter"],
            metrics_exporter=given["metrics_exporter"],
            otlp=_merge(given["otlp"], OtlpOptions(**_keywords_of("otlp", given)), "otlp"),
            files=_merge(given["files"], FileOptions(**_keywords_of("files", given)), "files"),
            export=_merge(
                given["export"], ExportOptions(**_keywords_of("export", given)), "export"
            ),
            active_spans=_merge(
                given["active_spans"],
                ActiveSpanOptions(**_keywords_of("active_spans", given)),
                "active_spans",
            ),
            detect_accelerator=given["detect_accelerator"],
            disabled=given["disabled"],
            set_global=given["set_global"],
            env=given["env"],
        )

    def keywords(self) -> dict[str, Any]:
        """The arguments as :func:`configure`'s single keywords, ``None`` left out, as JSON
        values (what another process passes to call it the same way)."""
        given = {
            "service_name": self.service_name,
            "resource_attributes": self.resource_attributes,
            "traces_exporter": self.traces_exporter,
            "metrics_exporter": self.metrics_exporter,
            **{kw: getattr(getattr(self, grp), fld) for kw, (grp, fld) in _KEYWORD_FIELDS.items()},
            "detect_accelerator": self.detect_accelerator,
            "disabled": self.disabled,
            "set_global": self.set_global,
            "env": self.env,
        }
        return _arguments(given)


def _configure(setup: _Setup) -> Telemetry:
    """:func:`configure` once its settings are grouped: the resource, then (unless
    disabled) the exporter settings, the exporters by name, both providers, the handle."""
    arguments = setup.keywords()
    env = os.environ if setup.env is None else setup.env
    disabled = setup.disabled
    if disabled is None:
        disabled = bool(_bool(env, "OTEL_SDK_DISABLED"))
    resource = _resource(
        env, setup.service_name, setup.resource_attributes, setup.detect_accelerator
    )
    if disabled:
        return Telemetry(trace_api.NoOpTracerProvider(), metrics_api.NoOpMeterProvider(), resource)
    drops = DropCounter()
    settings = _exporter_settings(setup, env, resource, drops)
    span_names = _names(setup.traces_exporter, env, "OTEL_TRACES_EXPORTER", "otlp")
    metric_names = _names(setup.metrics_exporter, env, "OTEL_METRICS_EXPORTER", "otlp")
    _warn_unused_file_dir(setup.files.dir, env, span_names, metric_names)
    span_factories = {
        n: _lookup(n, _SPAN_FACTORIES, _builtin_span, "OTEL_TRACES_EXPORTER") for n in span_names
    }
    metric_factories = {
        n: _lookup(n, _METRIC_FACTORIES, _builtin_metric, "OTEL_METRICS_EXPORTER")
        for n in metric_names
    }
    tracer_provider = TracerProvider(resource=resource)
    publisher = _add_active_span_publisher(tracer_provider, setup.active_spans, env)
    processors, span_exporters = _add_span_processors(
        tracer_provider, span_factories, settings, setup.export, env
    )
    readers = {name: factory(settings) for name, factory in metric_factories.items()}
    if "perfetto" in settings.shared and "perfetto" not in span_exporters:
        # Only the metric side writes the timeline: release the span side's hold on it.
        settings.shared["perfetto"].shutdown()
    meter_provider = MeterProvider(resource=resource, metric_readers=list(readers.values()))
    drops.bind(meter_provider)
    if setup.set_global:
        trace_api.set_tracer_provider(tracer_provider)
        metrics_api.set_meter_provider(meter_provider)
    telemetry = Telemetry(
        tracer_provider,
        meter_provider,
        resource,
        processors=processors,
        span_exporters=span_exporters,
        metric_readers=readers,
        drops=drops,
        active_spans=publisher,
        shutdown_timeout_s=settings.export_timeout_s,
    )
    telemetry.arguments = arguments
    from otel_ext.instrumentation.collective_drain_process import remember_telemetry

    remember_telemetry(telemetry)  # for instrument(drain="process"): the same providers there
    return telemetry


def _export_timeout(env: Mapping[str, str], given: float | None) -> float:
    """One export's time bound: the argument, else ``OTEL_EXT_EXPORT_TIMEOUT_S``, else
    ``OTEL_BSP_EXPORT_TIMEOUT`` (ms), else ``OTEL_EXPORTER_OTLP_TIMEOUT`` (ms), else 10 s."""
    timeout_s = given
    if timeout_s is None and _get(env, config.EXPORT_TIMEOUT_S.name) is None:
        fallback = _number(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 10_000.0) / 1000
        timeout_s = _number(env, "OTEL_BSP_EXPORT_TIMEOUT", fallback * 1000) / 1000
    return config.resolve(config.EXPORT_TIMEOUT_S, timeout_s, env=env)


def _exporter_settings(
    setup: _Setup, env: Mapping[str, str], resource: Resource, drops: DropCounter
) -> ExporterSettings:
    """What every exporter factory gets: the file settings, the export timing and each
    signal's OTLP settings, resolved from the arguments, then the environment."""
    files, otlp = setup.files, setup.otlp
    timeout_s = _export_timeout(env, setup.export.timeout_s)
    otlp_args = {f.name: getattr(otlp, f.name) for f in fields(otlp)}
    return ExporterSettings(
        env=env,
        resource=resource,
        file_dir=Path(
            config.resolve(config.FILE_DIR, None if files.dir is None else str(files.dir), env=env)
        ),
        file_max_bytes=config.resolve(config.FILE_MAX_BYTES, files.max_bytes, env=env),
        file_gzip=config.resolve(config.FILE_GZIP, files.gzip, env=env),
        export_timeout_s=timeout_s,
        metric_export_interval_s=setup.export.metric_interval_s
        or _number(env, "OTEL_METRIC_EXPORT_INTERVAL", 60_000.0) / 1000,
        otlp_traces=_otlp(env, "traces", timeout_s=timeout_s, **otlp_args),
        otlp_metrics=_otlp(env, "metrics", timeout_s=timeout_s, **otlp_args),
        drops=drops,
    )


def _add_active_span_publisher(
    tracer_provider: TracerProvider, options: ActiveSpanOptions, env: Mapping[str, str]
) -> SpanProcessor | None:
    """The active-span publisher added first to the tracer provider, when enabled and it
    can run here; the publisher, else ``None``."""
    if not config.resolve(config.ACTIVE_SPANS, options.publish, env=env):
        return None
    publisher = _active_span_processor(options.dir, env)
    if publisher is not None:
        tracer_provider.add_span_processor(publisher)
    return publisher


def _add_span_processors(
    tracer_provider: TracerProvider,
    span_factories: Mapping[str, SpanExporterFactory],
    settings: ExporterSettings,
    export: ExportOptions,
    env: Mapping[str, str],
) -> tuple[list[BoundedBatchSpanProcessor], dict[str, SpanExporter]]:
    """One bounded batch processor per span exporter, added to the tracer provider (a
    network exporter can be remade by its processor); the processors and exporters."""
    queue = int(export.max_queue_size or _number(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048))
    delay = export.schedule_delay_s or _number(env, "OTEL_BSP_SCHEDULE_DELAY", 5000.0) / 1000
    batch = int(export.max_export_batch_size or _number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
    processors: list[BoundedBatchSpanProcessor] = []
    span_exporters: dict[str, SpanExporter] = {}
    for name, span_factory in span_factories.items():

        def make(f: SpanExporterFactory = span_factory) -> SpanExporter:
            return f(settings)

        exporter = make()
        span_exporters[name] = exporter
        processor = BoundedBatchSpanProcessor(
            exporter,
            max_queue_size=queue,
            schedule_delay_s=delay,
            max_export_batch_size=min(batch, queue),
            drops=settings.drops,
            exporter_factory=None if name in ("file", "perfetto") else make,
        )
        processors.append(processor)
        tracer_provider.add_span_processor(processor)
    return processors, span_exporters


def _arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """configure()'s arguments as given, as JSON values (what another process needs to
    call it the same way: the collective drain process)."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        if value is None or name == "set_global":
            continue
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif isinstance(value, Mapping):
            value = {str(k): v for k, v in value.items()}
        out[name] = value
    return out
