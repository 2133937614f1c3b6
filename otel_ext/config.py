"""Our own ``OTEL_EXT_*`` environment variables, declared once, parsed as OpenTelemetry does.

The precedence is the OpenTelemetry one: a code argument, then the environment variable,
then the default. Parsing follows the specification's rules for environment variables:

* an empty value means unset;
* a boolean is true only for ``true`` (case-insensitive); anything else is false, and a
  value other than ``false`` logs a warning;
* a number that does not parse logs a warning and falls back to the default.

>>> env = {"OTEL_EXT_FILE_DIR": "", "OTEL_EXT_REQUIRE_INTEGRATION": "TRUE"}
>>> resolve(FILE_DIR, env=env)
'.'
>>> resolve(REQUIRE_INTEGRATION, env=env)
True
>>> resolve(EXPORT_TIMEOUT_S, 3.0, env=env)
3.0
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "ALL_VARIABLES",
    "EnvVar",
    "resolve",
]

_log = logging.getLogger(__name__)
T = TypeVar("T", str, int, float, bool)


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One environment variable of ours.

    Attributes:
        name: the variable name, ``OTEL_EXT_...``.
        kind: ``str``, ``int``, ``float`` or ``bool``.
        default: the value when neither argument nor variable is given.
        doc: one sentence on what it controls (rendered in ``docs/configuration.md``).
    """

    name: str
    kind: type[T]
    default: T
    doc: str


def resolve(var: EnvVar[T], value: T | None = None, *, env: Mapping[str, str] | None = None) -> T:
    """Return the effective value: ``value`` if given, else the variable, else the default.

    Args:
        var: the declared variable.
        value: a value passed in code; wins when not ``None``.
        env: the environment to read (defaults to ``os.environ``).

    Returns:
        The parsed value, of ``var.kind``.
    """
    if value is not None:
        return value
    raw = (os.environ if env is None else env).get(var.name, "").strip()
    if raw == "":
        return var.default
    if var.kind is bool:
        lowered = raw.lower()
        if lowered not in ("true", "false"):
            _log.warning("%s=%r is not 'true' or 'false'; treating it as false", var.name, raw)
        return lowered == "true"  # type: ignore[return-value]
    if var.kind in (int, float):
        try:
            return var.kind(raw)  # type: ignore[return-value]
        except ValueError:
            _log.warning(
                "%s=%r is not a valid %s; using the default %r",
                var.name,
                raw,
                var.kind.__name__,
                var.default,
            )
            return var.default
    return raw  # type: ignore[return-value]


ALL_VARIABLES: list[EnvVar] = []


def _declare(var: EnvVar[T]) -> EnvVar[T]:
    ALL_VARIABLES.append(var)
    return var


REQUIRE_INTEGRATION = _declare(
    EnvVar(
        "OTEL_EXT_REQUIRE_INTEGRATION",
        bool,
        False,
        "When true, an integration test whose real part is missing fails instead of skipping (CI sets it).",
    )
)
FILE_DIR = _declare(
    EnvVar(
        "OTEL_EXT_FILE_DIR",
        str,
        ".",
        "Folder where the `file` exporters write OTLP-JSON (`traces.jsonl`, `metrics.jsonl`); "
        "it chooses no exporter: set alone (the exporters stay `otlp`), one warning says the "
        "folder is unused.",
    )
)
FILE_MAX_BYTES = _declare(
    EnvVar(
        "OTEL_EXT_FILE_MAX_BYTES",
        int,
        256 * 1024 * 1024,
        "Size at which the OTLP-JSON file exporters rotate to a new file.",
    )
)
FILE_GZIP = _declare(
    EnvVar("OTEL_EXT_FILE_GZIP", bool, False, "When true, the file exporters write gzip files.")
)
EXPORT_TIMEOUT_S = _declare(
    EnvVar(
        "OTEL_EXT_EXPORT_TIMEOUT_S",
        float,
        10.0,
        "Longest time one export may block an exporter thread, in seconds.",
    )
)
PROMETHEUS_LISTEN = _declare(
    EnvVar(
        "OTEL_EXT_PROMETHEUS_LISTEN",
        str,
        "127.0.0.1:9464",
        "HOST:PORT where the Prometheus `/metrics` endpoint listens.",
    )
)
COUNTER_INTERVAL_S = _declare(
    EnvVar(
        "OTEL_EXT_COUNTER_INTERVAL_S",
        float,
        1.0,
        "Seconds between two samples of the counter sources.",
    )
)
MAX_SERIES_PER_METRIC = _declare(
    EnvVar(
        "OTEL_EXT_MAX_SERIES_PER_METRIC",
        int,
        2000,
        "Cardinality guard: label sets beyond this many per metric are dropped and counted.",
    )
)
HOST_ID = _declare(
    EnvVar(
        "OTEL_EXT_HOST_ID",
        str,
        "",
        "Name of this host in `accel.host.id` (default: the machine's hostname).",
    )
)

ACTIVE_SPANS = _declare(
    EnvVar(
        "OTEL_EXT_ACTIVE_SPANS",
        bool,
        True,
        "When false, `configure()` does not publish the span running on each device for the node agent's exemplars.",
    )
)
ACTIVE_SPAN_DIR = _declare(
    EnvVar(
        "OTEL_EXT_ACTIVE_SPAN_DIR",
        str,
        "",
        "Folder of the per-device active-span records shared by workloads and the node agent (default: `$XDG_RUNTIME_DIR/otel-ext`, else `/tmp/otel-ext-$UID`).",
    )
)

DEBUG = _declare(
    EnvVar(
        "OTEL_EXT_DEBUG",
        bool,
        False,
        "When true, the CLI shows the full traceback of an internal error instead of one line.",
    )
)

MAX_INFLATED_BYTES = _declare(
    EnvVar(
        "OTEL_EXT_MAX_INFLATED_BYTES",
        int,
        4 * 1024**3,
        "Largest size a gzip input file may inflate to when `otel-ext analyze` reads it; beyond it the file is an error (a gzip bomb guard).",
    )
)
MAX_INFLATE_RATIO = _declare(
    EnvVar(
        "OTEL_EXT_MAX_INFLATE_RATIO",
        int,
        250,
        "Largest ratio of inflated to compressed size of a gzip input file, checked once 64 MiB have been inflated (real traces compress 5-30 times).",
    )
)
MAX_RECORD_BYTES = _declare(
    EnvVar(
        "OTEL_EXT_MAX_RECORD_BYTES",
        int,
        256 * 1024**2,
        "Largest single record `otel-ext analyze` holds while reading: one OTLP-JSON line, one profiler event, a trace file's header.",
    )
)
MAX_SKIPPED_LISTED = _declare(
    EnvVar(
        "OTEL_EXT_MAX_SKIPPED_LISTED",
        int,
        1000,
        "With `--keep-going`, bad records listed one by one per file; the rest are counted in one summary record.",
    )
)


def host_id(value: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    """The name of this host in ``accel.host.id``: ``value``, else ``OTEL_EXT_HOST_ID``, else
    the machine's host name (a pod's name in Kubernetes unless the variable is set, which is
    why the exporter DaemonSet sets it to the node name).

    >>> host_id("node-3"), host_id(env={"OTEL_EXT_HOST_ID": "gpu-node-7"})
    ('node-3', 'gpu-node-7')
    """
    import socket

    return resolve(HOST_ID, value or None, env=env) or socket.gethostname() or "localhost"


COMM_KERNELS = _declare(
    EnvVar(
        "OTEL_EXT_COMM_KERNELS",
        str,
        "",
        "Extra communication-kernel name tables (YAML, the shape of `semantic_conventions/model/kernels/communication.yaml`), separated by the OS path separator; `otel-ext analyze` counts kernels they match as communication.",
    )
)

DASK_SCHEDULER = _declare(
    EnvVar(
        "OTEL_EXT_DASK_SCHEDULER",
        str,
        "",
        "Where `otel-ext analyze` reads the files when `--scheduler` is not given: `local:N` (a local Dask cluster of N worker processes), `tcp://HOST:PORT` of a Dask scheduler, or a scheduler file; empty: in process.",
    )
)

TORCH_NATIVE_HOOK = _declare(
    EnvVar(
        "OTEL_EXT_TORCH_NATIVE_HOOK",
        str,
        "auto",
        "Native (C++) collective recording kernels: `auto` (built once when needed, then loaded), `cached` (loaded only when already built), `off` (the Python hook).",
    )
)
COLLECTIVE_DRAIN = _declare(
    EnvVar(
        "OTEL_EXT_COLLECTIVE_DRAIN",
        str,
        "thread",
        "Where the native collective records become spans and metrics: `thread` (a background thread of the workload process) or `process` (a drain process of its own, off the workload's GIL; needs providers from `otel_ext.configure()`). The `drain=` argument of `instrument()` wins.",
    )
)
NATIVE_CACHE = _declare(
    EnvVar(
        "OTEL_EXT_NATIVE_CACHE",
        str,
        "",
        "Folder where the native collective hook is compiled and cached (default: `~/.cache/otel-ext/native`).",
    )
)
COLLECTIVE_HANG_S = _declare(
    EnvVar(
        "OTEL_EXT_COLLECTIVE_HANG_S",
        float,
        60.0,
        "Seconds a collective may stay in flight before the instrumentation's watchdog exports it as an `accel.collective.pending` span (flushed at once, so a job killed in the hang still names it); 0 or less: no watchdog.",
    )
)
COLLECTIVE_POLL_US = _declare(
    EnvVar(
        "OTEL_EXT_COLLECTIVE_POLL_US",
        int,
        500,
        "Microseconds between two looks of the native collective hook's poller at open works (the width of a host-timed collective span's completion bracket).",
    )
)
