"""The one exception family for setup, CLI and analysis errors.

Hot paths (span processors, wrappers, ``collect()``, export) never raise; they log once
and count a drop. Everything else validates early and raises a subclass of
:class:`OtelExtError` whose message names the file, the record and the problem.

>>> err = InputError("bad duration", path="rank0.json", record="event 12")
>>> str(err)
'rank0.json: event 12: bad duration'
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "InputError",
    "OtelExtError",
    "RegistryError",
    "SourceUnavailableError",
]


class OtelExtError(Exception):
    """Base class of every error otel-ext raises on purpose.

    Args:
        message: what is wrong.
        path: the file (or other input) concerned, if any.
        record: the record inside it (an event index, a definition name), if any.
    """

    def __init__(self, message: str, *, path: str | None = None, record: str | None = None):
        self.message = message
        self.path = path
        self.record = record
        parts = [p for p in (path, record) if p]
        super().__init__(": ".join([*parts, message]))


class ConfigError(OtelExtError):
    """A configuration value (argument or environment variable) is unusable."""


class InputError(OtelExtError):
    """An input file or record cannot be read or does not make sense."""


class RegistryError(OtelExtError):
    """The semantic-conventions registry is invalid or its generated files are stale."""


class SourceUnavailableError(OtelExtError):
    """A counter source cannot start (no driver, no device, no permission)."""
