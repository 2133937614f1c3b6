"""The counter bridge: samples the sources, keeps the current series, derives, guards.

:class:`CounterBridge` owns the state the exposition (Prometheus) and the OTLP bridge read:
one :class:`SeriesState` per series, counters unfolded into monotonic totals (wrap-around
and resets handled, see :mod:`otel_ext.counters._rates`), derived metrics recomputed every
round from the registry's formulas, exemplars taken from the :class:`ActiveSpanRegistry`.

Staleness: when a source's round succeeds, its series that were not in the round (a device
that vanished) are dropped at once; when a source fails, its series are kept until
``stale_after_s`` has passed since they were last read, then dropped. Cardinality: a
metric keeps at most ``max_series_per_metric`` series; new label sets beyond that are
dropped and counted (``accel.counters.series.dropped``).

Threading: :meth:`CounterBridge.sample_once` runs on one thread at a time (the sampling
thread); readers call :meth:`CounterBridge.families` from any thread. Sampling never
raises: a source that raises is logged (rate-limited), counted
(``accel.counters.source.errors``) and marked down (``accel.counters.source.up`` = 0).

>>> from otel_ext.counters._sim import SimulatedSource, BuiltinSimModel
>>> bridge = CounterBridge([SimulatedSource(BuiltinSimModel(chips=1))])
>>> bridge.open()
['sim']
>>> bridge.sample_once(); bridge.sample_once()
>>> "accel.device.utilization" in bridge.families()
True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from otel_ext import config
from otel_ext._drops import LEDGER
from otel_ext.counters._derived import DerivedEvaluator, DerivedPoint, InputSeries, Provenance
from otel_ext.counters._exemplars import ActiveSpanRegistry, ExemplarRef
from otel_ext.counters._rates import CounterTracker
from otel_ext.counters._source import (
    AttributeValue,
    CounterSource,
    HistogramValue,
    Sample,
    SeriesKey,
)
from otel_ext.errors import SourceUnavailableError
from otel_ext.semconv.attributes import (
    ACCEL_COUNTERS_METRIC,
    ACCEL_DEVICE_ID,
    ACCEL_LINK_ID,
    ACCEL_SOURCE,
)
from otel_ext.semconv.metrics import (
    METRIC_ACCEL_COUNTERS_SERIES_DROPPED,
    METRIC_ACCEL_COUNTERS_SOURCE_ERRORS,
    METRIC_ACCEL_COUNTERS_SOURCE_UP,
    METRIC_SPECS,
)

__all__ = ["CounterBridge", "Exemplar", "SeriesLabeller", "SeriesState"]

_log = logging.getLogger(__name__)
#: the ``accel.telemetry.component`` of the counters' failures
COMPONENT = "counters"
#: the ``accel.telemetry.reason`` of each kind of bridge failure
_REASONS = {
    "src": "source_failed",
    "hook": "round_hook_failed",
    "bad": "unhashable_attribute",
    "unk": "unknown_metric",
    "label": "series_labeller_failed",
}
_DERIVED_SOURCE = "derived"
_BRIDGE_SOURCE = "bridge"
_MAX_DROPPED_KEYS = 100_000


class SeriesLabeller(Protocol):
    """Adds labels to series (see :class:`CounterBridge`'s ``labeller``)."""

    #: the label names it may add (derived metrics are computed without them, then labelled)
    label_keys: frozenset[str]

    def refresh(self, samples: Sequence[Sample], now_ns: int) -> None: ...

    def label_sets(
        self, attributes: Mapping[str, AttributeValue]
    ) -> Sequence[Mapping[str, AttributeValue]]: ...


@dataclass(frozen=True, slots=True)
class Exemplar:
    """An exemplar: the span active on the series' device when the value was read.

    Attributes:
        ref: the span's ids.
        value: the increase (counters) or observation (histograms) it stands for.
        timestamp_s: when, in seconds since the epoch (host clock).
        bucket: for histograms, the bucket index it belongs to.
    """

    ref: ExemplarRef
    value: float
    timestamp_s: float
    bucket: int | None = None


@dataclass(slots=True)
class SeriesState:
    """The current state of one series (what one exposition line shows).

    Attributes:
        metric: registry metric name.
        attributes: the series' attributes.
        instrument: ``counter``, ``updowncounter``, ``gauge`` or ``histogram``.
        source: the source name (``derived`` for derived metrics, ``bridge`` for the
            bridge's own statistics).
        value: the current value; for counters the monotonic total.
        raw: the last raw reading (counters: before unfolding).
        timestamp_ns: when it was read (in ``clock_domain``).
        clock_domain: the timestamp's clock.
        seen_ns: when the bridge last updated it (bridge clock).
        tracker: the counter's rate state (counters only).
        exemplar: the latest exemplar, if any.
        provenance: how a derived value was computed.
        cache: per-renderer cached text (label string); owned by the renderer.
    """

    metric: str
    attributes: dict[str, AttributeValue]
    instrument: str
    source: str
    value: float | HistogramValue = 0.0
    raw: float = 0.0
    timestamp_ns: int = 0
    clock_domain: str = ""
    seen_ns: int = 0
    tracker: CounterTracker | None = None
    exemplar: Exemplar | None = None
    provenance: Provenance | None = None
    cache: dict[str, Any] = field(default_factory=dict)


class CounterBridge:
    """Sources -> current series (+ derived), read by the Prometheus collector and OTLP.

    Args:
        sources: the counter sources.
        interval_s: seconds between rounds when started (default
            ``OTEL_EXT_COUNTER_INTERVAL_S``).
        window_s: rate window in seconds; ``None`` or 0: since the previous reading.
        max_series_per_metric: cardinality guard (default
            ``OTEL_EXT_MAX_SERIES_PER_METRIC``).
        stale_after_s: how long a failing source's series survive (default 3 intervals).
        active_spans: where exemplars come from (a new registry by default).
        derive: whether to evaluate derived metrics.
        metric_specs: the registry table (``METRIC_SPECS``).
        evaluator: a derived-metric evaluator (built from ``metric_specs`` by default).
        clock: the bridge's clock in nanoseconds (for staleness and exemplar times).
        labeller: adds labels to a device's series (the pod of its workload,
            :class:`~otel_ext.counters.PodAttributor`): told every round's samples first
            (``refresh``), then asked per sample for its extra label sets (``label_sets``:
            none, one, or one per workload sharing the device, each a copy of the series).
    """

    def __init__(
        self,
        sources: Sequence[CounterSource],
        *,
        interval_s: float | None = None,
        window_s: float | None = None,
        max_series_per_metric: int | None = None,
        stale_after_s: float | None = None,
        active_spans: ActiveSpanRegistry | None = None,
        derive: bool = True,
        metric_specs: Mapping[str, Mapping[str, Any]] = METRIC_SPECS,
        evaluator: DerivedEvaluator | None = None,
        clock: Callable[[], int] = time.time_ns,
        labeller: SeriesLabeller | None = None,
    ):
        self.sources: list[CounterSource] = list(sources)
        self.labeller = labeller
        self.interval_s = config.resolve(config.COUNTER_INTERVAL_S, interval_s)
        self.window_ns = int((window_s or 0.0) * 1e9)
        self.max_series = config.resolve(config.MAX_SERIES_PER_METRIC, max_series_per_metric)
        self.stale_after_ns = int(
            (stale_after_s if stale_after_s is not None else 3 * self.interval_s) * 1e9
        )
        self.active_spans = active_spans if active_spans is not None else ActiveSpanRegistry()
        self.metric_specs = metric_specs
        self.evaluator = (evaluator or DerivedEvaluator(metric_specs)) if derive else None
        self._clock = clock
        self._lock = threading.Lock()
        self._sample_lock = threading.Lock()
        self._families: dict[str, dict[SeriesKey, SeriesState]] = {}
        self._active: list[CounterSource] = []
        self._up: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._dropped: dict[str, set[SeriesKey]] = {}
        self._dropped_total = 0
        self._refs: dict[str, ExemplarRef | None] = {}
        self._interval = (0, 0)
        #: source name -> why it could not start (filled by :meth:`open`)
        self.unavailable: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        #: called after every round with the bridge (the OTLP bridge hooks in here)
        self.on_round: list[Callable[[CounterBridge], None]] = []

    # ---- lifecycle ---------------------------------------------------------------------
    def open(self, *, require_all: bool = False, quiet: bool = False) -> list[str]:
        """Open every source; return the names of those that started.

        A source that cannot start is skipped with a warning (``quiet``: logged at debug
        level, for sources that were only probed) when others work; its one-line reason
        stays in :attr:`unavailable`.

        Raises:
            SourceUnavailableError: no source could start (or one could not and
                ``require_all``); the message joins the sources' one-line reasons.
        """
        reasons = []
        self._active = []
        for src in self.sources:
            try:
                src.open()
            except SourceUnavailableError as exc:
                if require_all:
                    raise
                reasons.append(f"{src.name}: {exc}")
                self.unavailable[src.name] = str(exc)
                _log.log(
                    logging.DEBUG if quiet else logging.WARNING,
                    "counter source %s skipped: %s",
                    src.name,
                    exc,
                )
                continue
            self._active.append(src)
            self._up[src.name] = 1
            self._errors.setdefault(src.name, 0)
        if not self._active:
            raise SourceUnavailableError(
                "no counter source could start (" + "; ".join(reasons) + ")"
            )
        return [s.name for s in self._active]

    def start(self) -> None:
        """Sample every ``interval_s`` on a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="otel-ext-counters", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind: skip the missed rounds rather than bursting
                next_t = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def stop(self, *, close_sources: bool = True) -> None:
        """Stop sampling (waits for the running round) and close the sources."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))
            self._thread = None
        if close_sources:
            for src in self._active:
                try:
                    src.close()
                except Exception as exc:  # closing must not fail the shutdown
                    _log.warning("closing counter source %s failed: %r", src.name, exc)

    # ---- sampling ----------------------------------------------------------------------
    def _warn(self, key: str, msg: str, *args: object) -> None:
        """One failure of kind ``key`` (``src:NAME``, ``hook``, ...): logged once per bridge
        and key, counted and exported (:data:`otel_ext._drops.LEDGER`, component
        ``counters``, reason the kind)."""
        kind = key.partition(":")[0]
        LEDGER.drop(
            COMPONENT,
            _REASONS.get(kind, kind),
            message=msg,
            args=args,
            logger=_log,
            once_per=(id(self), key),
        )

    def sample_once(self) -> None:
        """Run one round: sample every source, update series, derive. Never raises."""
        with self._sample_lock:
            now = self._clock()
            previous = self._interval[1]
            self._interval = (
                previous if 0 < previous < now else now - int(self.interval_s * 1e9),
                now,
            )
            results: list[tuple[CounterSource, list[Sample] | None]] = []
            for src in self._active or self.sources:
                try:
                    results.append((src, list(src.sample())))
                except Exception as exc:
                    self._warn(f"src:{src.name}", "counter source %s failed: %r", src.name, exc)
                    results.append((src, None))
            if self.labeller is not None:
                try:
                    self.labeller.refresh([s for _, got in results if got for s in got], now)
                except Exception as exc:
                    self._warn("label", "series labeller failed: %r", exc)
            with self._lock:
                for src, samples in results:
                    if samples is None:
                        self._up[src.name] = 0
                        self._errors[src.name] = self._errors.get(src.name, 0) + 1
                        continue
                    self._up[src.name] = 1
                    self._apply(src.name, samples, now)
                self._expire(now)
                if self.evaluator is not None:
                    self._derive(now)
                self._bridge_stats(now)
                self.rounds += 1
        for hook in self.on_round:
            try:
                hook(self)
            except Exception as exc:
                self._warn("hook", "counter round hook failed: %r", exc)

    def _apply(self, source: str, samples: Iterable[Sample], now: int) -> None:
        seen: set[SeriesKey] = set()
        self._refs = {}  # one span lookup per device per round
        for s in self._labelled(samples):
            try:
                key = s.key()
            except TypeError:
                self._warn(f"bad:{source}", "source %s gave an unhashable attribute", source)
                continue
            fam = self._families.get(s.metric)
            if fam is None:
                fam = self._families[s.metric] = {}
            st = fam.get(key)
            if st is None:
                if len(fam) >= self.max_series:
                    self._drop(s.metric, key)
                    continue
                spec = self.metric_specs.get(s.metric)
                if spec is None:
                    self._warn(f"unk:{s.metric}", "metric %s is not in the registry", s.metric)
                    instrument = "histogram" if isinstance(s.value, HistogramValue) else "gauge"
                    monotonic = False
                else:
                    instrument = str(spec.get("instrument", "gauge"))
                    monotonic = bool(spec.get("monotonic", False))
                st = SeriesState(s.metric, dict(s.attributes), instrument, source)
                if instrument == "counter" and monotonic:
                    st.tracker = CounterTracker(self.window_ns, s.wrap_bits)
                fam[key] = st
            seen.add(key)
            self._update(st, s, now)
        # A successful round replaces the source's series: absent ones (a vanished device)
        # go now.
        for metric, fam in list(self._families.items()):
            gone = [k for k, st in fam.items() if st.source == source and k not in seen]
            for k in gone:
                del fam[k]
            if not fam:
                del self._families[metric]

    def _labelled(self, samples: Iterable[Sample]) -> Iterable[Sample]:
        """The samples with the labeller's labels (a copy per label set); as they are
        without a labeller or when it fails."""
        labeller = self.labeller
        for s in samples:
            sets: Sequence[Mapping[str, AttributeValue]] = ()
            if labeller is not None:
                try:
                    sets = labeller.label_sets(s.attributes)
                except Exception as exc:
                    self._warn("label", "series labeller failed: %r", exc)
            if not sets:
                yield s
                continue
            for extra in sets:
                yield replace(s, attributes={**s.attributes, **extra})

    def _ref_of(self, attrs: Mapping[str, AttributeValue]) -> ExemplarRef | None:
        dev = attrs.get(ACCEL_DEVICE_ID)
        if dev is None:
            dev = attrs.get(ACCEL_LINK_ID)
        if dev is None:
            return None
        key = str(dev)
        if key not in self._refs:
            self._refs[key] = self.active_spans.covering(key, *self._interval)
        return self._refs[key]

    def _update(self, st: SeriesState, s: Sample, now: int) -> None:
        st.timestamp_ns = s.timestamp_ns
        st.clock_domain = s.clock_domain
        st.seen_ns = now
        value = s.value
        if isinstance(value, HistogramValue):
            st.value = value
            if value.last_observation is not None:
                ref = self._ref_of(s.attributes)
                if ref is not None:
                    st.exemplar = Exemplar(
                        ref,
                        value.last_observation,
                        now / 1e9,
                        value.bucket_of(value.last_observation),
                    )
            return
        v = float(value)
        st.raw = v
        if st.tracker is not None:
            st.tracker.update(v, s.timestamp_ns, wrap_bits=s.wrap_bits)
            st.value = st.tracker.total
            delta = st.tracker.last_delta
            if delta > 0:
                ref = self._ref_of(s.attributes)
                if ref is not None:
                    st.exemplar = Exemplar(ref, delta, now / 1e9)
        else:
            st.value = v

    def _drop(self, metric: str, key: SeriesKey) -> None:
        keys = self._dropped.setdefault(metric, set())
        if key not in keys and self._dropped_total < _MAX_DROPPED_KEYS:
            keys.add(key)
            self._dropped_total += 1
            self._warn(
                f"card:{metric}",
                "metric %s has more than %d series; new label sets are dropped",
                metric,
                self.max_series,
            )

    def _expire(self, now: int) -> None:
        for metric, fam in list(self._families.items()):
            stale = [
                k
                for k, st in fam.items()
                if st.source not in (_DERIVED_SOURCE, _BRIDGE_SOURCE)
                and now - st.seen_ns > self.stale_after_ns
            ]
            for k in stale:
                del fam[k]
            if not fam:
                del self._families[metric]

    def _derive(self, now: int) -> None:
        assert self.evaluator is not None
        inputs: dict[str, list[InputSeries]] = {}
        # the labeller's copies of a series (one per pod on a shared device) are one input;
        # the derived points get the labels of their device afterwards
        strip = self.labeller.label_keys if self.labeller is not None else frozenset()
        for metric in self.evaluator.input_metrics:
            fam = self._families.get(metric)
            if not fam:
                continue
            lst = []
            seen: set[tuple[tuple[str, AttributeValue], ...]] = set()
            for st in fam.values():
                if isinstance(st.value, HistogramValue):
                    continue
                attrs: Mapping[str, AttributeValue] = st.attributes
                if strip and not strip.isdisjoint(attrs):
                    attrs = {k: v for k, v in attrs.items() if k not in strip}
                    unlabelled = tuple(sorted(attrs.items()))
                    if unlabelled in seen:
                        continue
                    seen.add(unlabelled)
                rate = st.tracker.rate() if st.tracker is not None else None
                lst.append(InputSeries(attrs, st.value, rate, st.timestamp_ns))
            inputs[metric] = lst
        points = self.evaluator.evaluate(inputs)
        self._replace_derived(self._labelled_points(points), now)

    def _labelled_points(self, points: Iterable[DerivedPoint]) -> Iterable[DerivedPoint]:
        if self.labeller is None:
            yield from points
            return
        for p in points:
            try:
                sets = self.labeller.label_sets(p.attributes)
            except Exception as exc:
                self._warn("label", "series labeller failed: %r", exc)
                sets = ()
            if not sets:
                yield p
            for extra in sets:
                yield replace(p, attributes={**p.attributes, **extra})

    def _replace_derived(self, points: Iterable[DerivedPoint], now: int) -> None:
        new: dict[str, dict[SeriesKey, SeriesState]] = {}
        for p in points:
            key: SeriesKey = (p.metric, tuple(sorted(p.attributes.items())))
            old = self._families.get(p.metric, {}).get(key)
            fam = new.setdefault(p.metric, {})
            if old is None and len(fam) >= self.max_series:
                self._drop(p.metric, key)
                continue
            st = old or SeriesState(p.metric, dict(p.attributes), "gauge", _DERIVED_SOURCE)
            st.value = p.value
            st.timestamp_ns = p.timestamp_ns
            st.seen_ns = now
            st.provenance = p.provenance
            fam[key] = st
        for metric in [m for m, f in self._families.items() if _is_source(f, _DERIVED_SOURCE)]:
            del self._families[metric]
        self._families.update(new)

    def _bridge_stats(self, now: int) -> None:
        stats: list[tuple[str, dict[str, AttributeValue], float, str]] = []
        for name in sorted(self._up):
            stats.append(
                (METRIC_ACCEL_COUNTERS_SOURCE_UP, {ACCEL_SOURCE: name}, self._up[name], "gauge")
            )
            stats.append(
                (
                    METRIC_ACCEL_COUNTERS_SOURCE_ERRORS,
                    {ACCEL_SOURCE: name},
                    self._errors.get(name, 0),
                    "counter",
                )
            )
        for metric, keys in sorted(self._dropped.items()):
            stats.append(
                (
                    METRIC_ACCEL_COUNTERS_SERIES_DROPPED,
                    {ACCEL_COUNTERS_METRIC: metric},
                    len(keys),
                    "counter",
                )
            )
        for metric, attrs, value, instrument in stats:
            key: SeriesKey = (metric, tuple(sorted(attrs.items())))
            fam = self._families.setdefault(metric, {})
            st = fam.get(key)
            if st is None:
                st = fam[key] = SeriesState(metric, attrs, instrument, _BRIDGE_SOURCE)
            st.value = float(value)
            st.timestamp_ns = now
            st.seen_ns = now

    # ---- reading -----------------------------------------------------------------------
    def families(self) -> dict[str, list[SeriesState]]:
        """A consistent copy of the current series, by metric name (sorted)."""
        with self._lock:
            return {m: list(self._families[m].values()) for m in sorted(self._families)}

    def read(self, fn: Callable[[Mapping[str, Mapping[SeriesKey, SeriesState]]], Any]) -> Any:
        """Call ``fn`` with the live series table under the bridge's lock (fast readers)."""
        with self._lock:
            return fn(self._families)

    def health(self) -> dict[str, Any]:
        """Per-source status for ``/healthz``: up, errors, series count; overall ``ok``."""
        with self._lock:
            counts: dict[str, int] = {}
            for fam in self._families.values():
                for st in fam.values():
                    counts[st.source] = counts.get(st.source, 0) + 1
            sources = {
                name: {
                    "up": bool(self._up.get(name)),
                    "errors": self._errors.get(name, 0),
                    "series": counts.get(name, 0),
                }
                for name in self._up
            }
            return {
                "ok": any(v["up"] for v in sources.values()),
                "rounds": self.rounds,
                "sources": sources,
                "dropped_series": {m: len(k) for m, k in self._dropped.items()},
            }


def _is_source(fam: Mapping[SeriesKey, SeriesState], source: str) -> bool:
    return any(st.source == source for st in fam.values())
