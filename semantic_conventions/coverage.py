"""Which derived metrics and analyses a device supports, given the base counters it exposes.

This is how the registry informs the instrumentation of the next hardware generation: list
the counters a chip (or its driver) exposes and how often they can be sampled, and
``otel-ext semconv coverage --counters FILE`` answers which derived metrics and analyses
work, which do not, and which base counters would unlock the rest.

The counters file is YAML or JSON, either a list or a mapping with ``counters`` (the list)
and optionally ``device`` (a model of the device-spec table; then a derived metric whose
``spec.FIELD`` is missing or zero for that model is unsupported too). Each list item is a
metric name, or a mapping with ``name`` and optionally ``interval_s`` (seconds between
samples) or ``rate_hz`` (samples per second)::

    device: H100-SXM5-80GB
    counters:
      - {name: accel.device.cycles.active, interval_s: 0.1}
      - {name: accel.device.cycles.elapsed, rate_hz: 10}
      - hw.power

>>> from otel_ext.semconv.registry import load_registry
>>> reg = load_registry()
>>> exposed = [ExposedCounter("accel.device.cycles.active", 0.1),
...            ExposedCounter("accel.device.cycles.elapsed", 0.1)]
>>> report = compute_coverage(exposed, registry=reg)
>>> [m.name for m in report.derived if m.supported]
['accel.device.utilization']
>>> report.by_name("accel.device.tensor.utilization").missing_counters
('accel.device.cycles.tensor_active',)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from otel_ext.errors import InputError
from otel_ext.semconv.formula import parse_formula
from otel_ext.semconv.registry import Registry, yaml_error_text

__all__ = [
    "AnalysisSupport",
    "CoverageReport",
    "ExposedCounter",
    "MetricSupport",
    "compute_coverage",
    "format_text",
    "load_counters",
    "report_to_json",
]


@dataclass(frozen=True)
class ExposedCounter:
    """A base counter a device exposes, and the seconds between two samples (if known)."""

    name: str
    interval_s: float | None = None


@dataclass(frozen=True)
class MetricSupport:
    """Whether one derived metric can be computed from the exposed counters.

    Attributes:
        name: the derived metric.
        missing_counters: base inputs the device does not expose.
        missing_spec: spec fields the device model lacks (missing or zero).
        interval_s: the slowest sampling interval among its inputs (``None`` if unknown).
    """

    name: str
    missing_counters: tuple[str, ...]
    missing_spec: tuple[str, ...]
    interval_s: float | None

    @property
    def supported(self) -> bool:
        return not self.missing_counters and not self.missing_spec


@dataclass(frozen=True)
class AnalysisSupport:
    """Whether one analysis is served by the exposed counters.

    Attributes:
        name: the analysis.
        missing_counters: base counters it needs (directly or through derived metrics) that
            the device does not expose.
        missing_spec: spec fields its derived metrics need that the device model lacks.
        too_slow: ``(counter, interval_s)`` for needed counters sampled more slowly than the
            analysis's ``max_interval_s``.
        max_interval_s: the slowest sampling interval the analysis accepts.
    """

    name: str
    missing_counters: tuple[str, ...]
    missing_spec: tuple[str, ...]
    too_slow: tuple[tuple[str, float], ...]
    max_interval_s: float | None

    @property
    def supported(self) -> bool:
        return not self.missing_counters and not self.missing_spec and not self.too_slow


@dataclass
class CoverageReport:
    """The coverage of a device's counters: derived metrics, analyses and what to add."""

    device: str | None
    counters: list[ExposedCounter]
    derived: list[MetricSupport]
    analyses: list[AnalysisSupport]
    #: base counter not exposed -> the derived metrics and analyses that need it
    needed: dict[str, list[str]] = field(default_factory=dict)

    def by_name(self, name: str) -> MetricSupport | AnalysisSupport:
        """The entry of a derived metric or analysis by name.

        Raises:
            KeyError: no such derived metric or analysis.
        """
        entries: list[MetricSupport | AnalysisSupport] = [*self.derived, *self.analyses]
        for entry in entries:
            if entry.name == name:
                return entry
        raise KeyError(name)


def _interval(item: dict[str, Any], path: str, record: str) -> float | None:
    if "interval_s" in item and "rate_hz" in item:
        raise InputError("give interval_s or rate_hz, not both", path=path, record=record)
    for key in ("interval_s", "rate_hz"):
        if key not in item:
            continue
        v = item[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise InputError(
                f"{key} must be a positive number, not {v!r}", path=path, record=record
            )
        return float(v) if key == "interval_s" else 1.0 / float(v)
    return None


def load_counters(
    path: str | Path, *, registry: Registry
) -> tuple[list[ExposedCounter], str | None]:
    """Read a counters file (YAML or JSON); see the module docstring for its shape.

    Returns:
        The exposed counters and the device model (or ``None``).

    Raises:
        InputError: the file is unreadable or malformed, names an unknown or derived metric,
            a counter twice, or an unknown device model.
    """
    p = Path(path)
    where = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read counters file: {exc.strerror}", path=where) from None
    try:
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc}", path=where) from None
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {yaml_error_text(exc)}", path=where) from None
    device: str | None = None
    if isinstance(doc, dict):
        if "counters" not in doc:
            raise InputError("expected a list of counters or a mapping with 'counters'", path=where)
        device = None if doc.get("device") is None else str(doc["device"])
        doc = doc["counters"]
    if not isinstance(doc, list):
        raise InputError("'counters' must be a list", path=where)
    if device is not None and device not in registry.device_specs:
        known = ", ".join(sorted(registry.device_specs))
        raise InputError(
            f"unknown device model {device!r} (known: {known})", path=where, record="device"
        )
    out: list[ExposedCounter] = []
    seen: set[str] = set()
    for i, item in enumerate(doc):
        record = f"counter {i}"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InputError(
                "a counter is a metric name or a mapping with 'name'", path=where, record=record
            )
        name = item["name"]
        record = f"counter {i} ({name})"
        metric = registry.metrics.get(name)
        if metric is None:
            raise InputError("not a metric of the registry", path=where, record=record)
        if metric.metric_class != "base":
            raise InputError(
                "is a derived metric; list the base counters the device exposes",
                path=where,
                record=record,
            )
        if name in seen:
            raise InputError("listed twice", path=where, record=record)
        seen.add(name)
        out.append(ExposedCounter(name, _interval(item, where, record)))
    return out, device


def _max_interval(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def compute_coverage(
    counters: Sequence[ExposedCounter], *, registry: Registry, device: str | None = None
) -> CoverageReport:
    """Which derived metrics and analyses the exposed counters support.

    Args:
        counters: the base counters the device exposes.
        registry: the registry.
        device: a device model of the spec table, to check the spec fields formulas use.

    Returns:
        The report (pure computation; no I/O).
    """
    exposed = {c.name: c.interval_s for c in counters}
    row = registry.device_specs.get(device, {}) if device is not None else None

    def metric_support(name: str) -> MetricSupport:
        m = registry.metrics[name]
        if m.metric_class == "base":
            missing = () if name in exposed else (name,)
            return MetricSupport(name, missing, (), exposed.get(name))
        missing_counters = tuple(sorted({t for t in m.inputs.values() if t not in exposed}))
        missing_spec: tuple[str, ...] = ()
        if row is not None and m.formula is not None:
            fields = parse_formula(m.formula).spec_fields
            missing_spec = tuple(
                sorted(f for f in fields if not isinstance(row.get(f), float) or not row.get(f))
            )
        interval = _max_interval([exposed.get(t) for t in m.inputs.values()])
        return MetricSupport(name, missing_counters, missing_spec, interval)

    derived = [
        metric_support(n)
        for n in sorted(registry.metrics)
        if registry.metrics[n].metric_class == "derived"
    ]
    analyses = []
    needed: dict[str, list[str]] = {}
    for d in derived:
        for c in d.missing_counters:
            needed.setdefault(c, []).append(d.name)
    for name in sorted(registry.analyses):
        an = registry.analyses[name]
        missing: set[str] = set()
        missing_spec: set[str] = set()
        used: set[str] = set()
        for req in an.requires:
            if req not in registry.metrics:
                continue  # reported by `semconv check`
            s = metric_support(req)
            missing.update(s.missing_counters)
            missing_spec.update(s.missing_spec)
            m = registry.metrics[req]
            used.update(m.inputs.values() if m.metric_class == "derived" else [req])
        too_slow: tuple[tuple[str, float], ...] = ()
        if an.max_interval_s is not None:
            too_slow = tuple(
                (c, iv)
                for c in sorted(used)
                if (iv := exposed.get(c)) is not None and iv > an.max_interval_s
            )
        analyses.append(
            AnalysisSupport(
                name,
                tuple(sorted(missing)),
                tuple(sorted(missing_spec)),
                too_slow,
                an.max_interval_s,
            )
        )
        for c in missing:
            needed.setdefault(c, []).append(name)
    return CoverageReport(
        device=device,
        counters=list(counters),
        derived=derived,
        analyses=analyses,
        needed={c: needed[c] for c in sorted(needed)},
    )


def report_to_json(report: CoverageReport) -> dict[str, Any]:
    """The report as a JSON-ready dictionary (stable keys)."""
    return {
        "device": report.device,
        "counters": [{"name": c.name, "interval_s": c.interval_s} for c in report.counters],
        "derived_metrics": [
            {
                "name": d.name,
                "supported": d.supported,
                "missing_counters": list(d.missing_counters),
                "missing_spec": list(d.missing_spec),
                "interval_s": d.interval_s,
            }
            for d in report.derived
        ],
        "analyses": [
            {
                "name": a.name,
                "supported": a.supported,
                "missing_counters": list(a.missing_counters),
                "missing_spec": list(a.missing_spec),
                "too_slow": [{"counter": c, "interval_s": iv} for c, iv in a.too_slow],
                "max_interval_s": a.max_interval_s,
            }
            for a in report.analyses
        ],
        "counters_to_add": [{"name": c, "needed_by": users} for c, users in report.needed.items()],
    }


def _why(entry: MetricSupport | AnalysisSupport) -> str:
    parts = []
    if entry.missing_counters:
        parts.append("needs " + ", ".join(entry.missing_counters))
    if entry.missing_spec:
        parts.append("device spec lacks " + ", ".join(entry.missing_spec))
    if isinstance(entry, AnalysisSupport) and entry.too_slow:
        slow = ", ".join(f"{c} every {iv:g} s" for c, iv in entry.too_slow)
        parts.append(f"sampled too slowly (needs <= {entry.max_interval_s:g} s): {slow}")
    return "; ".join(parts)


def format_text(report: CoverageReport) -> str:
    """The report as text for a terminal."""
    lines = [
        f"device: {report.device or '(not given)'}; {len(report.counters)} base counters exposed",
        "",
    ]
    for title, entries in (("Derived metrics", report.derived), ("Analyses", report.analyses)):
        n_ok = sum(1 for e in entries if e.supported)
        lines.append(f"{title}: {n_ok} of {len(entries)} supported")
        width = max((len(e.name) for e in entries), default=0)
        for e in entries:
            mark = "yes" if e.supported else "no "
            why = "" if e.supported else "  " + _why(e)
            lines.append(f"  {mark}  {e.name.ljust(width)}{why}".rstrip())
        lines.append("")
    if report.needed:
        lines.append("Base counters to add for the rest:")
        for c, users in report.needed.items():
            lines.append(f"  {c}  (needed by {', '.join(users)})")
    else:
        lines.append("No base counter is missing.")
    return "\n".join(lines) + "\n"
