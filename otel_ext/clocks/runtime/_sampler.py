"""Collecting clock brackets from a device-timestamp reader, on a background thread.

:class:`ClockSampler` reads ``host_clock()``, ``reader()``, ``host_clock()`` back to back,
``burst`` times in a row, and keeps the narrowest bracket of each burst (the one least
disturbed). Brackets older than ``window_s`` are forgotten; :meth:`ClockSampler.mapping`
fits the current window (cached until new brackets arrive). The host clock is injected:
it must be the clock of the spans to align (OpenTelemetry's SDK uses ``time.time_ns``).

Threading: :meth:`sample_burst` may be called from any thread; :meth:`start` runs it every
``interval_s`` on one daemon thread until :meth:`stop`. Reader errors never propagate: they
are counted (``read_errors``) and logged once. A bad read (a torn 64-bit read, a counter
reset) costs the fit that bracket, or the brackets before the reset (see
:func:`~otel_ext.clocks.fit_clock`), never the window; a fit that still fails is counted
(``fit_errors``), logged once with the brackets it names, and :meth:`ClockSampler.mapping`
returns ``None`` until the window fits again.

:class:`ClockRegistry` holds, per clock domain, a sampler or a fixed mapping; span
processors and telemetry look mappings up there.

>>> ticks = iter(range(1_000, 10**9, 1_000))
>>> host = iter(range(0, 10**9, 500))
>>> s = ClockSampler(lambda: next(ticks), domain="chip0", host_clock=lambda: next(host), burst=2)
>>> s.sample_burst(), s.samples_taken
(True, 1)
>>> reg = ClockRegistry()
>>> reg.add_sampler(s)
>>> reg.domains()
['chip0']
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from otel_ext._drops import LEDGER
from otel_ext.clocks._errors import COMPONENT, ClockFitError
from otel_ext.clocks._fit import fit_clock
from otel_ext.clocks._mapping import ClockMapping, TimeMapping

__all__ = ["ClockRegistry", "ClockSampler"]

_log = logging.getLogger(__name__)


class ClockSampler:
    """Brackets of one clock domain, taken in bursts; fits them on demand.

    Args:
        reader: returns the device counter now (raw ticks, any int).
        domain: the clock domain's name (``accel.clock.domain``).
        counter_bits: counter width.
        ticks_per_second: nominal tick rate.
        host_clock: the host clock in ns (default ``time.time_ns``, OpenTelemetry's span clock).
        interval_s: seconds between bursts on the background thread.
        burst: reads per burst; the narrowest bracket is kept.
        window_s: brackets older than this (host time) are dropped.
        fit_options: extra keyword options for :func:`fit_clock`.
    """

    def __init__(
        self,
        reader: Callable[[], int],
        *,
        domain: str,
        counter_bits: int = 64,
        ticks_per_second: float = 1e9,
        host_clock: Callable[[], int] = time.time_ns,
        interval_s: float = 0.1,
        burst: int = 8,
        window_s: float = 120.0,
        fit_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.reader = reader
        self.domain = domain
        self.counter_bits = counter_bits
        self.ticks_per_second = ticks_per_second
        self.host_clock = host_clock
        self.interval_s = interval_s
        self.burst = max(1, int(burst))
        self.window_ns = int(window_s * 1e9)
        self.fit_options = dict(fit_options or {})
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._brackets: deque[tuple[int, int, int]] = deque()
        self._mapping: ClockMapping | None = None
        self._fitted_at = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_taken = 0
        self.read_errors = 0
        self.fit_errors = 0

    def sample_burst(self) -> bool:
        """Take one burst now and keep its narrowest bracket; never raises.

        Returns:
            Whether a bracket was stored.
        """
        best: tuple[int, int, int] | None = None
        try:
            for _ in range(self.burst):
                before = int(self.host_clock())
                ticks = int(self.reader())
                after = int(self.host_clock())
                if after <= before:
                    continue
                if best is None or after - before < best[2] - best[0]:
                    best = (before, ticks, after)
        except Exception as exc:  # the reader is foreign code: never let it escape
            self.read_errors += 1
            LEDGER.drop(
                COMPONENT,
                "reader_failed",
                message="clock reader for %s failed (logged once): %r",
                args=(self.domain, exc),
                logger=_log,
                once_per=self,
            )
            return False
        if best is None:
            return False
        with self._cond:
            self._brackets.append(best)
            while self._brackets and best[0] - self._brackets[0][0] > self.window_ns:
                self._brackets.popleft()
            self.samples_taken += 1
            self._cond.notify_all()
        return True

    def wait_for_samples(self, count: int, timeout: float | None = None) -> bool:
        """Block until ``samples_taken >= count`` (or the timeout); returns whether it was reached."""
        with self._cond:
            return self._cond.wait_for(lambda: self.samples_taken >= count, timeout)

    def brackets(self) -> tuple[NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64]]:
        """The current window's brackets: ``(host_before_ns, device_ticks, host_after_ns)``."""
        with self._lock:
            rows = list(self._brackets)
        before = np.array([r[0] for r in rows], dtype=np.int64)
        ticks = np.array([r[1] % (1 << 64) for r in rows], dtype=np.uint64)
        after = np.array([r[2] for r in rows], dtype=np.int64)
        return before, ticks, after

    def brackets_since(
        self, seq: int
    ) -> tuple[int, int, tuple[NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64]]]:
        """The brackets stored after the first ``seq`` ones (for exporters that poll).

        Brackets are numbered ``0, 1, ...`` in the order they were stored; ``samples_taken``
        is the next number. Pass the ``next_seq`` of the previous call to get only new ones.

        Returns:
            ``(next_seq, dropped, (host_before_ns, device_ticks, host_after_ns))``:
            ``dropped`` counts brackets after ``seq`` that already left the window.

        >>> host = iter(range(0, 10**9, 500))
        >>> s = ClockSampler(lambda: 7, domain="c", host_clock=lambda: next(host), burst=1)
        >>> _ = s.sample_burst(), s.sample_burst()
        >>> seq, dropped, (before, ticks, after) = s.brackets_since(1)
        >>> seq, dropped, before.tolist(), after.tolist()
        (2, 0, [1000], [1500])
        """
        with self._lock:
            taken = self.samples_taken
            rows = list(self._brackets)
        new = max(0, taken - max(0, int(seq)))
        kept = rows[len(rows) - min(new, len(rows)) :] if new else []
        before = np.array([r[0] for r in kept], dtype=np.int64)
        ticks = np.array([r[1] % (1 << 64) for r in kept], dtype=np.uint64)
        after = np.array([r[2] for r in kept], dtype=np.int64)
        return taken, new - len(kept), (before, ticks, after)

    def mapping(self) -> ClockMapping | None:
        """A mapping fitted to the current window (cached), or ``None`` if it cannot be fitted yet."""
        with self._lock:
            taken = self.samples_taken
            if self._fitted_at == taken:
                return self._mapping
        before, ticks, after = self.brackets()
        try:
            fitted: ClockMapping | None = fit_clock(
                before,
                ticks,
                after,
                counter_bits=self.counter_bits,
                ticks_per_second=self.ticks_per_second,
                domain=self.domain,
                **self.fit_options,
            )
        except ClockFitError as exc:  # its message names the domain and the brackets
            fitted = None
            self.fit_errors += 1
            LEDGER.drop(
                COMPONENT,
                "fit_failed",
                message="clock fit for %s failed (logged once): %s",
                args=(self.domain, exc),
                logger=_log,
                once_per=self,
            )
        with self._lock:
            self._mapping, self._fitted_at = fitted, taken
        return fitted

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_burst()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        """Start sampling every ``interval_s`` on a daemon thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"clock-sampler-{self.domain}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the background thread and wait for it (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> ClockSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClockRegistry:
    """Per clock domain: a sampler (fitted on demand) or a fixed mapping. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samplers: dict[str, ClockSampler] = {}
        self._mappings: dict[str, TimeMapping] = {}

    def add_sampler(self, sampler: ClockSampler) -> None:
        """Register ``sampler`` under its domain (replacing any earlier entry)."""
        with self._lock:
            self._samplers[sampler.domain] = sampler
            self._mappings.pop(sampler.domain, None)

    def set_mapping(self, domain: str, mapping: TimeMapping) -> None:
        """Register a fixed mapping for ``domain`` (replacing any earlier entry)."""
        with self._lock:
            self._mappings[domain] = mapping
            self._samplers.pop(domain, None)

    def domains(self) -> list[str]:
        """Registered domain names, sorted."""
        with self._lock:
            return sorted({*self._samplers, *self._mappings})

    def sampler(self, domain: str) -> ClockSampler | None:
        """The sampler of ``domain``, if one is registered."""
        with self._lock:
            return self._samplers.get(domain)

    def mapping(self, domain: str) -> TimeMapping | None:
        """The current mapping of ``domain`` (``None`` when unknown or not fittable yet)."""
        with self._lock:
            fixed = self._mappings.get(domain)
            sampler = self._samplers.get(domain)
        if fixed is not None:
            return fixed
        return sampler.mapping() if sampler is not None else None

    __call__ = mapping
