"""The collective drain process's entry point: ``python -m otel_ext.exporters.collective_drain FD``.

Started by ``TorchDistributedInstrumentor().instrument(drain="process")``; everything it does is
in :mod:`otel_ext.instrumentation.collective_drain_process`, which gets :func:`configure` from
here (the instrumentation never imports the exporters).
"""

from __future__ import annotations

from otel_ext.exporters._configure import configure
from otel_ext.instrumentation.collective_drain_process import run_drain_process

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Serve the inherited socket ``FD`` (``argv``: its number) until the workload ends it."""
    return run_drain_process(argv, configure)


if __name__ == "__main__":
    raise SystemExit(main())
