"""Validation of the semantic-conventions registry (``otel-ext semconv check``).

Every problem names the file, the definition and what is wrong; all problems are collected
so that one run reports them all. The rules:

**Names** (OpenTelemetry naming rules, made concrete):

* a name is lowercase ASCII, two or more components separated by ``.`` (a namespace, then
  the name); each component starts with a letter and holds only ``a-z``, ``0-9`` and ``_``,
  with ``_`` only *within* a component (no leading, trailing or doubled ``_``); no ``-``;
* at most 255 characters;
* names defined here live under the ``accel.`` namespace; names marked ``external`` (reused
  from OpenTelemetry) must not;
* an attribute name must not also be a namespace of another attribute (``a.b`` and
  ``a.b.c`` cannot both be attributes);
* a metric name carries no unit: its last component must not end in a unit word such as
  ``_seconds``, ``_ms``, ``_bytes``, ``_hz``, ``_watts``, ``_joules``, ``_percent``, nor in
  ``_total`` (exporters add those). Attributes may (``accel.clock.uncertainty_ns``), since an
  attribute has no unit field;
* two names must not map to the same generated Python constant, and a name is not defined
  twice.

**Definitions**: attribute types are ``string``, ``int``, ``double``, ``boolean``, their
``[]`` arrays, or an enum with members; span and metric attributes exist in the registry;
metric ``instrument`` is ``counter``, ``updowncounter``, ``gauge`` or ``histogram``; a
``counter`` is ``monotonic: true`` and only a counter is; ``scope`` is ``device``, ``link``,
``host``, ``collective`` or ``request``; ``class`` is ``base`` or ``derived``; the unit is in
the understood UCUM subset (:mod:`otel_ext.semconv.units`).

**Base and derived**: a base metric has no formula and no inputs; a derived metric has a
formula that parses, every input it declares is a known *base* metric and is used, every
name it uses is declared, every ``spec.FIELD`` is a column of the device-spec table,
``rate()`` is applied only to monotonic inputs, and the units combine to its declared unit
(scale included: ``ms`` is not ``s``).

**Device specs**: every field has a known unit; every device row gives every field as a
non-negative number.

**Analyses**: every metric an analysis requires exists; ``max_interval_s`` is positive.

**Generated files**: ``attributes.py``, ``spans.py``, ``metrics.py`` and the generated docs
equal a fresh generation.

>>> from otel_ext.semconv.registry import load_registry
>>> validate_registry(load_registry(), generated_root=None)
[]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from otel_ext.semconv.formula import FormulaError, infer_unit, parse_formula
from otel_ext.semconv.registry import Registry
from otel_ext.semconv.units import UnitError, parse_unit

__all__ = [
    "INSTRUMENTS",
    "SCOPES",
    "Problem",
    "check_name",
    "validate_registry",
]

INSTRUMENTS = frozenset({"counter", "updowncounter", "gauge", "histogram"})
SCOPES = frozenset({"device", "link", "host", "collective", "request"})
CLASSES = frozenset({"base", "derived"})
ATTRIBUTE_TYPES = frozenset(
    {"string", "int", "double", "boolean", "string[]", "int[]", "double[]", "boolean[]", "enum"}
)
NAMESPACE = "accel"
MAX_NAME_LENGTH = 255
_COMPONENT = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_UNIT_SUFFIXES = (
    "s",
    "sec",
    "secs",
    "seconds",
    "ms",
    "us",
    "ns",
    "milliseconds",
    "microseconds",
    "nanoseconds",
    "bytes",
    "kb",
    "mb",
    "gb",
    "kib",
    "mib",
    "gib",
    "bits",
    "hz",
    "khz",
    "mhz",
    "ghz",
    "watts",
    "joules",
    "celsius",
    "kelvin",
    "percent",
    "pct",
    "ratio_percent",
    "total",
)


@dataclass(frozen=True, order=True)
class Problem:
    """One validation problem: the file, the definition and what is wrong."""

    file: str
    definition: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.definition}: {self.message}"


def check_name(name: str, *, kind: str, external: bool = False) -> list[str]:
    """The naming-rule violations of one name (empty when the name is fine).

    Args:
        name: the attribute, span, metric or analysis name.
        kind: ``attribute``, ``span``, ``metric`` or ``analysis`` (analyses are single
            identifiers, not namespaced).
        external: whether the name is reused from OpenTelemetry.

    >>> check_name("accel.device.cycles.active", kind="metric")
    []
    >>> check_name("accel.Device.latency_ms", kind="metric")
    ["component 'Device' of 'accel.Device.latency_ms' is not lowercase letters, digits and '_' within a word", "metric name 'accel.Device.latency_ms' ends in the unit '_ms'; the unit belongs in 'unit'"]
    """
    out: list[str] = []
    if len(name) > MAX_NAME_LENGTH:
        out.append(f"name is longer than {MAX_NAME_LENGTH} characters")
    if kind == "analysis":
        if not _COMPONENT.fullmatch(name):
            out.append(f"analysis name {name!r} is not a lowercase identifier with '_'")
        return out
    parts = name.split(".")
    if len(parts) < 2:
        out.append(f"{name!r} has no namespace (expected NAMESPACE.NAME)")
    for part in parts:
        if not _COMPONENT.fullmatch(part):
            out.append(
                f"component {part!r} of {name!r} is not lowercase letters, digits and '_' "
                "within a word"
            )
    if not external and parts[0] != NAMESPACE:
        out.append(
            f"{name!r} is not under the {NAMESPACE!r} namespace (mark reused names external)"
        )
    if external and parts[0] == NAMESPACE:
        out.append(f"{name!r} is marked external but is in our own {NAMESPACE!r} namespace")
    if kind == "metric":
        last = parts[-1].lower()
        for suffix in _UNIT_SUFFIXES:
            if last.endswith("_" + suffix) or (suffix != "s" and last == suffix):
                out.append(
                    f"metric name {name!r} ends in the unit {'_' + suffix!r}; the unit belongs in 'unit'"
                )
                break
    return out


def _check_names(reg: Registry, add: _Adder) -> None:
    from otel_ext.semconv.generate import constant_name

    for a in reg.attributes.values():
        for msg in check_name(a.name, kind="attribute", external=a.external):
            add(a.source, a.name, msg)
    for s in reg.spans.values():
        for msg in check_name(s.name, kind="span"):
            add(s.source, s.name, msg)
    for m in reg.metrics.values():
        for msg in check_name(m.name, kind="metric", external=m.external):
            add(m.source, m.name, msg)
    for an in reg.analyses.values():
        for msg in check_name(an.name, kind="analysis"):
            add(an.source, an.name, msg)
    names = set(reg.attributes)
    for a in reg.attributes.values():
        parts = a.name.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in names:
                other = reg.attributes[prefix]
                add(
                    other.source,
                    prefix,
                    f"attribute name is also the namespace of attribute {a.name!r}",
                )
    for kind, table, prefix in (
        ("attribute", reg.attributes, ""),
        ("span", reg.spans, "SPAN_"),
        ("metric", reg.metrics, "METRIC_"),
    ):
        seen: dict[str, str] = {}
        for name, d in table.items():
            const = constant_name(name, prefix=prefix)
            if const in seen:
                add(
                    d.source,
                    name,
                    f"{kind} name maps to the same constant {const} as {seen[const]!r}",
                )
            seen[const] = name


class _Adder:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def __call__(self, file: str, definition: str, message: str) -> None:
        self.problems.append(Problem(file, definition, message))


def _unit_ok(text: str, add: _Adder, file: str, definition: str) -> bool:
    try:
        parse_unit(text)
    except UnitError as exc:
        add(file, definition, f"unknown unit: {exc.message}")
        return False
    return True


def _check_attributes_and_spans(reg: Registry, add: _Adder) -> None:
    for a in reg.attributes.values():
        if a.type not in ATTRIBUTE_TYPES:
            add(a.source, a.name, f"unknown attribute type {a.type!r}")
        if a.type == "enum" and not a.members:
            add(a.source, a.name, "enum attribute without members")
        if not a.brief:
            add(a.source, a.name, "no 'brief' description")
    for s in reg.spans.values():
        if s.span_kind not in ("internal", "server", "client", "producer", "consumer"):
            add(s.source, s.name, f"unknown span_kind {s.span_kind!r}")
        for attr in s.attributes:
            if attr not in reg.attributes:
                add(s.source, s.name, f"span lists unknown attribute {attr!r}")


def _check_metric(reg: Registry, name: str, add: _Adder) -> None:
    m = reg.metrics[name]
    f, d = m.source, m.name
    if not m.brief:
        add(f, d, "no 'brief' description")
    if m.instrument not in INSTRUMENTS:
        add(f, d, f"unknown instrument {m.instrument!r} (expected one of {sorted(INSTRUMENTS)})")
    elif m.instrument == "counter" and not m.monotonic:
        add(f, d, "a counter must be 'monotonic: true'")
    elif m.instrument != "counter" and m.monotonic:
        add(f, d, f"only a counter is monotonic, not a {m.instrument}")
    if m.scope not in SCOPES:
        add(f, d, f"unknown scope {m.scope!r} (expected one of {sorted(SCOPES)})")
    unit_ok = _unit_ok(m.unit, add, f, d)
    for attr in m.attributes:
        if attr not in reg.attributes:
            add(f, d, f"metric lists unknown attribute {attr!r}")
    if m.metric_class not in CLASSES:
        add(f, d, f"unknown class {m.metric_class!r} (expected base or derived)")
        return
    if m.metric_class == "base":
        if m.formula is not None:
            add(f, d, "base metric has a formula (only derived metrics have one)")
        if m.inputs:
            add(f, d, "base metric has inputs (only derived metrics have them)")
        return
    if m.formula is None:
        add(f, d, "derived metric without a formula")
        return
    try:
        formula = parse_formula(m.formula)
    except FormulaError as exc:
        add(f, d, f"formula does not parse: {exc.message}")
        return
    inputs_ok = True
    for local, target in sorted(m.inputs.items()):
        if target not in reg.metrics:
            add(f, d, f"input {local!r} names unknown metric {target!r}")
            inputs_ok = False
            continue
        tm = reg.metrics[target]
        if tm.metric_class != "base":
            add(f, d, f"input {local!r} names derived metric {target!r}; inputs must be base")
            inputs_ok = False
        if local in formula.rate_names and not tm.monotonic:
            add(f, d, f"rate() of input {local!r}, but {target!r} is not monotonic")
        if local not in formula.names:
            add(f, d, f"input {local!r} is declared but the formula does not use it")
    for used in sorted(formula.names - set(m.inputs)):
        add(f, d, f"formula references unknown input {used!r} (declare it under 'inputs')")
        inputs_ok = False
    for spec_field in sorted(formula.spec_fields - set(reg.spec_fields)):
        add(f, d, f"formula references unknown spec field {spec_field!r}")
        inputs_ok = False
    if not (inputs_ok and unit_ok):
        return
    input_units = {local: reg.metrics[target].unit for local, target in m.inputs.items()}
    try:
        got = infer_unit(formula, input_units, reg.spec_fields)
    except (UnitError, FormulaError) as exc:
        add(f, d, f"formula units do not combine: {exc.message}")
        return
    if got != parse_unit(m.unit):
        add(f, d, f"formula gives unit {got} but the metric declares {m.unit!r}")


def _check_specs(reg: Registry, add: _Adder) -> None:
    specs_file = "devices/specs.yaml"
    for fld, unit in reg.spec_fields.items():
        _unit_ok(unit, add, specs_file, f"field {fld}")
    for model, row in reg.device_specs.items():
        for fld in reg.spec_fields:
            v = row.get(fld)
            if v is None:
                add(specs_file, model, f"no value for spec field {fld!r}")
            elif isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                add(specs_file, model, f"spec field {fld!r} is {v!r}, not a non-negative number")


def _check_analyses(reg: Registry, add: _Adder) -> None:
    for an in reg.analyses.values():
        if not an.requires:
            add(an.source, an.name, "analysis requires no metric")
        for metric in an.requires:
            if metric not in reg.metrics:
                add(an.source, an.name, f"analysis requires unknown metric {metric!r}")
        if an.max_interval_s is not None and an.max_interval_s <= 0:
            add(an.source, an.name, "max_interval_s must be positive")


def _check_generated(reg: Registry, root: Path, add: _Adder) -> None:
    from otel_ext.semconv.generate import generated_files

    for path, text in generated_files(reg, root=root).items():
        rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old is None:
            add(rel, "generated file", "missing; run `otel-ext semconv generate`")
        elif old != text:
            add(rel, "generated file", "stale; run `otel-ext semconv generate`")


def validate_registry(reg: Registry, *, generated_root: Path | None) -> list[Problem]:
    """Every problem of a loaded registry, sorted by file and definition.

    Args:
        reg: the registry (its load-time problems, such as duplicates, are included).
        generated_root: the project root whose generated files must be in sync with
            ``reg``; ``None`` skips that check.

    Returns:
        The problems; empty when the registry is valid.
    """
    add = _Adder()
    for file, definition, message in reg.problems:
        add(file, definition, message)
    _check_names(reg, add)
    _check_attributes_and_spans(reg, add)
    for name in reg.metrics:
        _check_metric(reg, name, add)
    _check_specs(reg, add)
    _check_analyses(reg, add)
    if generated_root is not None:
        _check_generated(reg, generated_root, add)
    return sorted(set(add.problems))
