"""otel-ext: performance telemetry for multi-accelerator AI systems, built on OpenTelemetry.

The package is organised by responsibility:

* :mod:`otel_ext.instrumentation` — layer, collective, device-activity and request spans;
* :mod:`otel_ext.clocks` — clock alignment (pure math) and the clock sampler;
* :mod:`otel_ext.counters` — counter sources, the base/derived taxonomy and the bridge;
* :mod:`otel_ext.analysis` — loaders, analyses and reports;
* :mod:`otel_ext.sim` — the simulated cluster (a labelled backend);
* :mod:`otel_ext.cli` — the ``otel-ext`` command.

``otel_ext.configure`` (one-call OpenTelemetry setup) calls :func:`otel_ext.exporters.configure`
with the same arguments. It has that function's real signature (``help()``,
``inspect.signature``; ``tests/instrumentation/test_flush_contract.py`` keeps the two equal) and imports the
exporters on its first call, so that ``import otel_ext`` stays cheap (neither the
OpenTelemetry SDK nor torch is imported by it; about 6 ms, against about 175 ms for the SDK
exporters ``configure`` needs).

The package's parts: :mod:`otel_ext.semconv` (the conventions registry, imported by everything
and importing nothing else of otel-ext), :mod:`otel_ext.exporters` (never imports the counters
or the analysis), :mod:`otel_ext.clocks` (pure clock math, no file I/O),
:mod:`otel_ext.counters`, :mod:`otel_ext.instrumentation`, :mod:`otel_ext.analysis`,
:mod:`otel_ext.sim`. ``tests/test_import_graph.py`` keeps the dependencies one way.

>>> import otel_ext
>>> otel_ext.configure.__doc__.split(":")[0]
'Set up OpenTelemetry the otel-ext way'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from otel_ext.errors import OtelExtError

if TYPE_CHECKING:
    from otel_ext.exporters import (
        ActiveSpanOptions,
        ExportOptions,
        FileOptions,
        OtlpOptions,
        Telemetry,
    )

__all__ = ["OtelExtError", "__version__", "configure"]
__version__ = "0.1.0"


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
    """Set up OpenTelemetry the otel-ext way: tracer and meter providers with the accelerator
    resource and the chosen exporters, from arguments, then ``OTEL_*``/``OTEL_EXT_*``
    variables, then defaults.

    The arguments are those of :func:`otel_ext.exporters.configure` (every one keyword-only;
    ``None`` means "from the environment, else the default"; a part's settings as its option
    object, ``otlp=``, ``files=``, ``export=``, ``active_spans=``, or one by one as single
    keywords); see its documentation for each. Returns the :class:`~otel_ext.exporters.Telemetry` handle; raises
    :class:`~otel_ext.errors.ConfigError` for an unknown exporter, protocol or compression.
    """
    from otel_ext.exporters import configure as _configure

    return _configure(**{name: value for name, value in locals().items() if name != "_configure"})
