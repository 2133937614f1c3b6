"""The OpenTelemetry SDK versions whose private parts otel-ext's short cuts were tested on.

:class:`~otel_ext.instrumentation.finished_spans.FinishedSpans` (ended spans handed to the
SDK's processors as ``ReadableSpan``) and
:class:`~otel_ext.instrumentation.bound_histogram.BoundHistogram` (a histogram value handed
to the SDK's aggregation) read parts of the SDK that are not its API. A later SDK may keep
their names and change what they mean, so each short cut is taken only on a version its
tests passed on (``tests/instrumentation/test_finished_spans.py``, ``tests/instrumentation/test_drain_identity.py``,
``tests/instrumentation/test_bound_histogram.py``); on any other the public API is used, slower and the same.
Add a version to :data:`CHECKED_SDK` once those tests pass on it.

>>> sdk_version() in CHECKED_SDK
True
"""

from __future__ import annotations

__all__ = ["CHECKED_SDK", "sdk_checked", "sdk_version"]

#: opentelemetry-sdk (major, minor) versions the short cuts' tests passed on
CHECKED_SDK = frozenset({(1, 45)})


def sdk_version() -> tuple[int, int] | None:
    """The installed opentelemetry-sdk's (major, minor), or None."""
    try:
        from opentelemetry.sdk.version import __version__
    except ImportError:
        return None
    parts = __version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def sdk_checked() -> bool:
    """Whether the installed SDK is one of :data:`CHECKED_SDK`."""
    return sdk_version() in CHECKED_SDK
