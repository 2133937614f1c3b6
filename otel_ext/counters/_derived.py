"""Base -> derived: evaluate the registry's derived-metric formulas over the current series.

Every ``class: derived`` metric of ``otel_ext.semconv.metrics.METRIC_SPECS`` is parsed
once (``otel_ext.semconv.formula.parse_formula``) and evaluated on each sampling round
from the current value and the windowed rate of its input series; ``spec.FIELD`` comes from
the device-spec table row named by the series' ``accel.device.model`` attribute. Nothing
here is hand-coded per metric.

Joining inputs: the input series are grouped by the attribute keys *all* of them share
(``accel.device.id`` and ``accel.host.id`` for device metrics; the whole label set for a
one-input link metric; ``accel.host.id`` for tokens per joule). Within a group, the first
input with several series fans out (one derived point each, keeping its extra attributes,
as ``gen_ai.token.type``); the other inputs with several series are summed (energy of all
the host's devices). Every point carries its :class:`Provenance`.

Pure computation: no I/O, no globals; never raises while evaluating (a point whose inputs
are missing, or whose formula gives ``nan``, is not emitted).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_ext._drops import LEDGER
from otel_ext.counters._rates import RatePoint
from otel_ext.counters._source import AttributeValue
from otel_ext.errors import RegistryError
from otel_ext.semconv.attributes import ACCEL_DEVICE_MODEL
from otel_ext.semconv.formula import Formula, parse_formula
from otel_ext.semconv.metrics import METRIC_SPECS

__all__ = ["DerivedEvaluator", "DerivedPoint", "InputSeries", "Provenance"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InputSeries:
    """The current state of one base series, as the evaluator sees it.

    Attributes:
        attributes: the series' attributes.
        value: its current value (a counter's monotonic total, a gauge's reading).
        rate: its windowed rate (counters only; ``None`` before two readings).
        timestamp_ns: when it was read.
    """

    attributes: Mapping[str, AttributeValue]
    value: float
    rate: RatePoint | None
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a derived point came from.

    Attributes:
        formula: the registry formula.
        inputs: ``(input name, metric, the attributes of each series used)`` per input.
        window_s: the longest rate window used (0 when the formula has no rate).
        device_model: the device-spec row used, if the formula reads ``spec.*``.
    """

    formula: str
    inputs: tuple[tuple[str, str, tuple[Mapping[str, AttributeValue], ...]], ...]
    window_s: float
    device_model: str | None = None


@dataclass(frozen=True, slots=True)
class DerivedPoint:
    """One derived value."""

    metric: str
    attributes: dict[str, AttributeValue]
    value: float
    timestamp_ns: int
    provenance: Provenance


@dataclass(frozen=True)
class _Derived:
    metric: str
    formula: Formula
    inputs: tuple[tuple[str, str], ...]  # (input name, metric), in registry order


def _first_use(text: str, name: str) -> int:
    m = re.search(rf"\b{re.escape(name)}\b", text)
    return m.start() if m else len(text)


def _default_specs(model: str) -> Mapping[str, Any]:
    from otel_ext.semconv.registry import device_specs

    return device_specs(model)


class DerivedEvaluator:
    """Evaluates every derived metric of a registry table.

    Args:
        metric_specs: name -> spec (``METRIC_SPECS`` shape); the derived ones are used.
        device_specs: model -> peak-spec row; raises :class:`RegistryError` when unknown.

    >>> from otel_ext.counters._rates import RatePoint
    >>> ev = DerivedEvaluator()
    >>> dev = {"accel.device.id": "h/c0", "accel.device.model": "sim-accel-v1"}
    >>> pts = ev.evaluate({
    ...     "accel.memory.io.read": [InputSeries(dev, 0.0, RatePoint(1.5e12, 1.5e12, 1.0), 1)],
    ...     "accel.memory.io.written": [InputSeries(dev, 0.0, RatePoint(0.5e12, 0.5e12, 1.0), 1)],
    ... })
    >>> {p.metric: p.value for p in pts}
    {'accel.device.mbu': 1.0, 'accel.memory.bandwidth': 2000000000000.0}
    """

    def __init__(
        self,
        metric_specs: Mapping[str, Mapping[str, Any]] = METRIC_SPECS,
        *,
        device_specs: Callable[[str], Mapping[str, Any]] = _default_specs,
    ):
        self._device_specs = device_specs
        self._spec_cache: dict[str, Mapping[str, Any] | None] = {}
        self.derived: list[_Derived] = []
        for name, spec in sorted(metric_specs.items()):
            if spec.get("class") != "derived" or not spec.get("formula"):
                continue
            text = str(spec["formula"])
            raw = [(str(k), str(v)) for k, v in (spec.get("inputs") or {}).items()]
            # Inputs in the order the formula first names them (the numerator fans out).
            raw.sort(key=lambda kv: _first_use(text, kv[0]))
            self.derived.append(_Derived(name, parse_formula(text), tuple(raw)))

    @property
    def input_metrics(self) -> frozenset[str]:
        """Every base metric some derived metric reads."""
        return frozenset(m for d in self.derived for _, m in d.inputs)

    def _spec(self, model: str | None) -> Mapping[str, Any] | None:
        if model is None:
            return None
        if model not in self._spec_cache:
            try:
                self._spec_cache[model] = self._device_specs(model)
            except RegistryError as exc:
                self._warn(f"model:{model}", "no device spec for %s: %s", model, exc)
                self._spec_cache[model] = None
        return self._spec_cache[model]

    def _warn(self, key: str, msg: str, *args: object) -> None:
        """Logged once per evaluator and key, counted and exported (the drop ledger)."""
        kind = key.partition(":")[0]
        LEDGER.drop(
            "counters",
            {"model": "no_device_spec", "fail": "derived_metric_failed"}.get(kind, kind),
            message=msg,
            args=args,
            logger=_log,
            once_per=(id(self), key),
        )

    def evaluate(self, series: Mapping[str, Sequence[InputSeries]]) -> list[DerivedPoint]:
        """Evaluate every derived metric whose inputs are present.

        Args:
            series: base metric name -> its current series.

        Returns:
            The derived points, by metric name then group.
        """
        out: list[DerivedPoint] = []
        for d in self.derived:
            try:
                out.extend(self._evaluate_one(d, series))
            except Exception as exc:  # never raise on the sampling path
                self._warn(f"fail:{d.metric}", "derived metric %s failed: %r", d.metric, exc)
        return out

    def _evaluate_one(
        self, d: _Derived, series: Mapping[str, Sequence[InputSeries]]
    ) -> list[DerivedPoint]:
        per_input: list[Sequence[InputSeries]] = []
        for _, metric in d.inputs:
            got = series.get(metric)
            if not got:
                return []
            per_input.append(got)
        keys: set[str] | None = None
        for group in per_input:
            for s in group:
                keys = set(s.attributes) if keys is None else keys & set(s.attributes)
        join = tuple(sorted(keys or ()))
        grouped: list[dict[tuple[Any, ...], list[InputSeries]]] = []
        for group in per_input:
            g: dict[tuple[Any, ...], list[InputSeries]] = {}
            for s in group:
                g.setdefault(tuple(s.attributes[k] for k in join), []).append(s)
            grouped.append(g)
        out: list[DerivedPoint] = []
        for gkey in sorted(grouped[0], key=repr):
            members = [g.get(gkey) or [] for g in grouped]
            if any(not m for m in members):
                continue
            fan = next((i for i, m in enumerate(members) if len(m) > 1), None)
            fan_list: list[InputSeries | None] = list(members[fan]) if fan is not None else [None]
            for fanned in fan_list:
                point = self._point(d, join, gkey, members, fan, fanned)
                if point is not None:
                    out.append(point)
        return out

    def _point(
        self,
        d: _Derived,
        join: tuple[str, ...],
        gkey: tuple[Any, ...],
        members: list[list[InputSeries]],
        fan: int | None,
        fanned: InputSeries | None,
    ) -> DerivedPoint | None:
        values: dict[str, float] = {}
        rates: dict[str, float] = {}
        used = []
        window = 0.0
        ts = 0
        model: str | None = None
        attrs: dict[str, AttributeValue] = dict(zip(join, gkey))
        for i, (name, metric) in enumerate(d.inputs):
            chosen = [fanned] if (i == fan and fanned is not None) else members[i]
            total, rate_total, have_rate = 0.0, 0.0, True
            for s in chosen:
                assert s is not None
                total += s.value
                if s.rate is None:
                    have_rate = False
                else:
                    rate_total += s.rate.rate
                    window = max(window, s.rate.window_s)
                ts = max(ts, s.timestamp_ns)
                m = s.attributes.get(ACCEL_DEVICE_MODEL)
                if model is None and isinstance(m, str):
                    model = m
            values[name] = total
            if have_rate:
                rates[name] = rate_total
            elif name in d.formula.rate_names:
                return None
            used.append((name, metric, tuple(s.attributes for s in chosen)))  # type: ignore[union-attr]
            if i == fan and fanned is not None:
                attrs.update(fanned.attributes)
        spec: Mapping[str, Any] = {}
        if d.formula.spec_fields:
            got = self._spec(model)
            if got is None:
                if model is None:
                    self._warn(
                        f"nomodel:{d.metric}",
                        "%s needs %s on its inputs",
                        d.metric,
                        ACCEL_DEVICE_MODEL,
                    )
                return None
            spec = got
        value = d.formula.evaluate(values=values, rates=rates, spec=spec)
        if math.isnan(value) or math.isinf(value):
            return None
        if model is not None:
            attrs[ACCEL_DEVICE_MODEL] = model
        prov = Provenance(
            d.formula.text, tuple(used), window, model if d.formula.spec_fields else None
        )
        return DerivedPoint(d.metric, attrs, value, ts, prov)
