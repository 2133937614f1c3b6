"""``opentelemetry-instrument`` support: otel-ext's distro and configurator entry points.

``opentelemetry-instrument python app.py`` loads one *distro*
(``opentelemetry_distro`` entry points), then one *configurator*
(``opentelemetry_configurator``), then every *instrumentor*
(``opentelemetry_instrumentor``). Installing otel-ext declares:

* :class:`OtelExtDistro` (``otel_ext``): nothing to preset, since :func:`otel_ext.exporters.configure`
  already follows the specification's defaults (``otlp`` for both signals);
* :class:`OtelExtConfigurator` (``otel_ext``): calls :func:`otel_ext.exporters.configure` with the
  standard ``OTEL_*`` and our ``OTEL_EXT_*`` variables, so the process gets the accelerator
  resource (host, device, rank, world size), the bounded batch span processor, the
  active-span records for the node agent and the drop counter; the handle is shut down
  (bounded by the export timeout) at exit;
* the torch layer and distributed instrumentors, and the ``otel_ext_accelerator`` resource
  detector (for another distro's SDK setup: ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS``).

The separate ``opentelemetry-distro`` package is not needed. When it is installed too,
choose ours with ``OTEL_PYTHON_DISTRO=otel_ext OTEL_PYTHON_CONFIGURATOR=otel_ext``.

>>> OtelExtDistro() is OtelExtDistro()   # one instance, as BaseDistro makes it
True
"""

from __future__ import annotations

import atexit
import logging
from typing import Any

from opentelemetry.instrumentation.distro import BaseDistro  # type: ignore[attr-defined]
from opentelemetry.sdk._configuration import _BaseConfigurator

__all__ = ["OtelExtConfigurator", "OtelExtDistro"]

_log = logging.getLogger(__name__)


class OtelExtDistro(BaseDistro):
    """otel-ext's distro: the default instrumentor loading, no preset variables."""

    def _configure(self, **kwargs: Any) -> None:
        """Nothing to preset (configure() follows the specification's defaults)."""


class OtelExtConfigurator(_BaseConfigurator):
    """Sets up the SDK through :func:`otel_ext.exporters.configure` (see the module docs).

    Attributes:
        telemetry: the handle, once configured (``None`` before, or if it failed).
    """

    telemetry: Any = None

    def _configure(self, **kwargs: Any) -> None:
        if self.telemetry is not None:
            return
        from otel_ext.errors import OtelExtError
        from otel_ext.exporters import configure

        try:
            self.telemetry = configure()
        except OtelExtError as exc:
            # A bad variable must not stop the application: say so once, run untraced.
            _log.error("otel-ext: telemetry is off: %s", exc)
            return
        atexit.register(self.telemetry.shutdown)
