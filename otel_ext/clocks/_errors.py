"""Errors raised by clock fitting and alignment (setup and analysis paths only).

>>> raise InsufficientSamplesError("need 2 brackets, got 1", record="domain host0/chip1")
Traceback (most recent call last):
...
otel_ext.clocks._errors.InsufficientSamplesError: domain host0/chip1: need 2 brackets, got 1
"""

from __future__ import annotations

from otel_ext.errors import InputError

__all__ = ["AmbiguousTicksError", "ClockFitError", "InsufficientSamplesError"]


class ClockFitError(InputError):
    """Clock samples that cannot give a mapping (NaN values, mismatched lengths, ...)."""


class InsufficientSamplesError(ClockFitError):
    """Fewer usable brackets than a fit needs (at least two)."""


class AmbiguousTicksError(ClockFitError):
    """Wrapped device ticks that cannot be placed without a host-time hint."""


#: the ``accel.telemetry.component`` of the clocks' failures (logged once, counted, exported
#: through :data:`otel_ext._drops.LEDGER`)
COMPONENT = "clocks"
