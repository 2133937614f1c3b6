"""otel-ext: performance telemetry for multi-accelerator AI systems, built on OpenTelemetry.

The package is organised by responsibility:

* :mod:`otel_ext.instrumentation` — layer, collective, device-activity and request spans;
* :mod:`otel_ext.clocks` — clock alignment (pure math) and the clock sampler;
* :mod:`otel_ext.counters` — counter sources, the base/derived taxonomy and the bridge;
* :mod:`otel_ext.analysis` — loaders, analyses and reports;
* :mod:`otel_ext.sim` — the simulated cluster (a labelled backend);
* :mod:`otel_ext.cli` — the ``otel-ext`` command.

``otel_ext.configure`` (one-call OpenTelemetry setup) calls :func:`otel_ext.exporters.configure`
with the same arguments. Type checkers see that function's real signature (imported under
``TYPE_CHECKING``); at run time ``otel_ext.configure`` is a plain function that imports the
exporters on its first call, so that ``import otel_ext`` stays cheap (about 6 ms, against
about 175 ms for the SDK exporters ``configure`` needs).

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

from typing import TYPE_CHECKING, Any

from otel_ext.errors import OtelExtError

if TYPE_CHECKING:
    from otel_ext.exporters import configure as configure

__all__ = ["OtelExtError", "__version__", "configure"]
__version__ = "0.1.0"

if not TYPE_CHECKING:

    def configure(*args: Any, **kwargs: Any) -> Any:
        """Set up OpenTelemetry the otel-ext way: :func:`otel_ext.exporters.configure`."""
        from otel_ext.exporters import configure as _configure

        return _configure(*args, **kwargs)
