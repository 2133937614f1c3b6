"""otel-ext: performance telemetry for multi-accelerator AI systems, built on OpenTelemetry.

The package is organised by responsibility:

* :mod:`otel_ext.instrumentation` — layer, collective, device-activity and request spans;
* :mod:`otel_ext.clocks` — clock alignment (pure math) and the clock sampler;
* :mod:`otel_ext.counters` — counter sources, the base/derived taxonomy and the bridge;
* :mod:`otel_ext.analysis` — loaders, analyses and reports;
* :mod:`otel_ext.sim` — the simulated cluster (a labelled backend);
* :mod:`otel_ext.cli` — the ``otel-ext`` command.

``otel_ext.configure`` (one-call OpenTelemetry setup) is :func:`exporters.configure`. Type
checkers see its real signature (imported under ``TYPE_CHECKING``); at run time it is
imported on first use, so that ``import otel_ext`` stays cheap (about 6 ms, against about
175 ms for the SDK exporters ``configure`` needs).

>>> import otel_ext, exporters
>>> otel_ext.configure is exporters.configure
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_ext.errors import OtelExtError

if TYPE_CHECKING:
    from exporters import configure as configure

__all__ = ["OtelExtError", "__version__", "configure"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # ``configure`` lives in the ``exporters`` package; import it lazily so that importing
    # ``otel_ext`` stays cheap and free of the SDK's exporter dependencies.
    if name == "configure":
        from exporters import configure

        return configure
    raise AttributeError(f"module 'otel_ext' has no attribute {name!r}")
