"""Loading the semantic-conventions registry from its YAML files.

The registry is a folder of YAML files (``model/`` by default) in the OpenTelemetry
semantic-conventions group style: ``attribute_group`` groups define attributes, ``span``
groups name span kinds, ``metric`` groups define metrics with a ``class`` of ``base`` or
``derived`` (derived ones carry a ``formula`` over named ``inputs``), ``analysis`` groups
declare which metrics each analysis of ``otel-ext analyze`` needs (``requires``, and
optionally ``max_interval_s``, the slowest sampling interval that still serves it).
``devices/specs.yaml`` is the device peak-specification table.

Loading checks only the shape of the files; :mod:`otel_ext.semconv.validate` checks the
meaning (units, names, formulas, references).

>>> reg = load_registry()
>>> reg.attributes["accel.collective.op"].type
'string'
>>> reg.metrics["accel.device.mfu"].metric_class
'derived'
>>> reg.device_specs["sim-accel-v1"]["memory_bandwidth"]
2000000000000.0
>>> "accel.device.mfu" in reg.analyses["roofline"].requires
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from otel_ext.errors import RegistryError

__all__ = [
    "DEFAULT_REGISTRY",
    "Analysis",
    "Attribute",
    "Metric",
    "Registry",
    "Span",
    "device_specs",
    "device_table",
    "load_registry",
    "yaml_error_text",
]

DEFAULT_REGISTRY = Path(__file__).resolve().parent / "model"


@dataclass(frozen=True)
class Attribute:
    name: str
    type: str  # string, int, double, boolean, string[], or "enum"
    brief: str
    members: tuple[str, ...] = ()
    examples: tuple[Any, ...] = ()
    external: bool = False
    source: str = ""


@dataclass(frozen=True)
class Span:
    name: str
    brief: str
    span_kind: str
    attributes: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Metric:
    name: str
    brief: str
    instrument: str  # counter, updowncounter, gauge, histogram
    unit: str
    metric_class: str  # base or derived
    scope: str  # device, link, host, collective, request
    monotonic: bool = False
    formula: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    attributes: tuple[str, ...] = ()
    external: bool = False
    source: str = ""


@dataclass(frozen=True)
class Analysis:
    """An analysis and the metrics it needs (declared so ``semconv coverage`` can tell
    which analyses a device's counters support)."""

    name: str
    brief: str
    requires: tuple[str, ...] = ()
    max_interval_s: float | None = None
    source: str = ""


@dataclass
class Registry:
    attributes: dict[str, Attribute] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    analyses: dict[str, Analysis] = field(default_factory=dict)
    device_specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    spec_fields: dict[str, str] = field(default_factory=dict)
    #: (file, definition, problem) found while loading; validation adds more
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    root: Path = DEFAULT_REGISTRY


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RegistryError(f"not valid YAML: {yaml_error_text(exc)}", path=str(path)) from None
    except OSError as exc:
        raise RegistryError(f"cannot read: {exc.strerror}", path=str(path)) from None


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """A one-line description of a YAML error, with its line and column.

    >>> try:
    ...     yaml.safe_load("a: [")
    ... except yaml.YAMLError as exc:
    ...     print(yaml_error_text(exc))
    line 1, column 5: expected the node content, but found '<stream end>'
    """
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def _attr_type(raw: Any) -> tuple[str, tuple[str, ...]]:
    if isinstance(raw, dict):
        return "enum", tuple(str(m) for m in raw.get("members", []))
    return str(raw), ()


def load_registry(root: str | Path | None = None) -> Registry:
    """Load every YAML file under ``root`` (default: the packaged ``model/`` folder).

    Duplicate names are recorded in ``Registry.problems`` rather than raised, so that
    ``otel-ext semconv check`` can report every problem at once.

    Raises:
        RegistryError: a file is unreadable, not YAML, or not shaped as a registry file.
    """
    base = Path(root) if root is not None else DEFAULT_REGISTRY
    if not base.is_dir():
        raise RegistryError("registry folder does not exist", path=str(base))
    reg = Registry(root=base)
    for path in sorted(base.rglob("*.yaml")):
        rel = str(path.relative_to(base))
        doc = _read_yaml(path)
        if path.parent.name == "devices":
            _load_specs(reg, doc, rel)
            continue
        if path.parent.name == "kernels":  # kernel-name tables: otel_ext.analysis.classify
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
            raise RegistryError("expected a mapping with a 'groups' list", path=rel)
        for group in doc["groups"]:
            _load_group(reg, group, rel)
    return reg


def _load_group(reg: Registry, group: Any, rel: str) -> None:
    if not isinstance(group, dict) or "id" not in group or "type" not in group:
        raise RegistryError(
            "every group needs an 'id' and a 'type'", path=rel, record=str(group)[:60]
        )
    gid, gtype = str(group["id"]), group["type"]
    external = bool(group.get("external", False))
    if gtype == "attribute_group":
        for a in group.get("attributes") or []:
            if not isinstance(a, dict) or "id" not in a:
                raise RegistryError("attribute without an 'id'", path=rel, record=gid)
            typ, members = _attr_type(a.get("type"))
            attr = Attribute(
                name=str(a["id"]),
                type=typ,
                brief=str(a.get("brief", "")).strip(),
                members=members,
                examples=tuple(a.get("examples") or ()),
                external=external,
                source=rel,
            )
            if attr.name in reg.attributes:
                reg.problems.append(
                    (rel, attr.name, _duplicate("attribute", reg.attributes[attr.name].source))
                )
            reg.attributes[attr.name] = attr
    elif gtype == "span":
        name = str(group.get("span_name", gid.removeprefix("span.")))
        span = Span(
            name=name,
            brief=str(group.get("brief", "")).strip(),
            span_kind=str(group.get("span_kind", "internal")),
            attributes=tuple(str(x) for x in group.get("attributes") or ()),
            source=rel,
        )
        if name in reg.spans:
            reg.problems.append((rel, name, _duplicate("span", reg.spans[name].source)))
        reg.spans[name] = span
    elif gtype == "metric":
        name = str(group.get("metric_name", gid.removeprefix("metric.")))
        inputs = group.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise RegistryError(
                "'inputs' must map input names to metric names", path=rel, record=name
            )
        metric = Metric(
            name=name,
            brief=str(group.get("brief", "")).strip(),
            instrument=str(group.get("instrument", "")),
            unit=str(group.get("unit", "")),
            metric_class=str(group.get("class", "")),
            scope=str(group.get("scope", "")),
            monotonic=bool(group.get("monotonic", False)),
            formula=None if group.get("formula") is None else str(group["formula"]),
            inputs={str(k): str(v) for k, v in inputs.items()},
            attributes=tuple(str(x) for x in group.get("attributes") or ()),
            external=external,
            source=rel,
        )
        if name in reg.metrics:
            reg.problems.append((rel, name, _duplicate("metric", reg.metrics[name].source)))
        reg.metrics[name] = metric
    elif gtype == "analysis":
        name = str(group.get("analysis_name", gid.removeprefix("analysis.")))
        requires = group.get("requires") or []
        if not isinstance(requires, list):
            raise RegistryError("'requires' must be a list of metric names", path=rel, record=name)
        max_interval = group.get("max_interval_s")
        if max_interval is not None and (
            isinstance(max_interval, bool) or not isinstance(max_interval, int | float)
        ):
            raise RegistryError("'max_interval_s' must be a number", path=rel, record=name)
        analysis = Analysis(
            name=name,
            brief=str(group.get("brief", "")).strip(),
            requires=tuple(str(x) for x in requires),
            max_interval_s=None if max_interval is None else float(max_interval),
            source=rel,
        )
        if name in reg.analyses:
            reg.problems.append((rel, name, _duplicate("analysis", reg.analyses[name].source)))
        reg.analyses[name] = analysis
    else:
        raise RegistryError(f"unknown group type {gtype!r}", path=rel, record=gid)


def _duplicate(kind: str, first: str) -> str:
    return f"duplicate {kind} name (also defined in {first})"


def _load_specs(reg: Registry, doc: Any, rel: str) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), dict):
        raise RegistryError("expected 'fields' and a 'devices' mapping", path=rel)
    reg.spec_fields.update({str(k): str(v) for k, v in (doc.get("fields") or {}).items()})
    for model, row in doc["devices"].items():
        if not isinstance(row, dict):
            raise RegistryError("a device row must be a mapping", path=rel, record=str(model))
        reg.device_specs[str(model)] = {
            str(k): _spec_number(v) if k in reg.spec_fields else v for k, v in row.items()
        }


def _spec_number(value: Any) -> Any:
    """Spec values as floats. YAML 1.1 (PyYAML) reads ``989.0e12`` as a string, so numeric
    strings are converted; anything else is kept for validation to report."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def device_specs(model: str, *, registry: Registry | None = None) -> dict[str, Any]:
    """The peak-specification row of device ``model``.

    Raises:
        RegistryError: the model is not in the device-spec table.

    >>> device_specs("H100-SXM5-80GB")["power_limit"]
    700.0
    """
    table = registry.device_specs if registry is not None else device_table()
    try:
        return table[model]
    except KeyError:
        known = ", ".join(sorted(table))
        raise RegistryError(
            f"unknown device model {model!r} (known: {known})", path="devices/specs.yaml"
        ) from None


_DEVICES: Registry | None = None


def device_table() -> dict[str, dict[str, Any]]:
    """The packaged peak-specification table, model -> row, read once per process.

    Only ``devices/*.yaml`` is read: the whole registry takes about 0.15 s to parse, as long
    as the analysis of a small trace.

    >>> device_table()["H100-SXM5-80GB"]["power_limit"]
    700.0
    """
    global _DEVICES
    if _DEVICES is None:
        reg = Registry(root=DEFAULT_REGISTRY)
        for path in sorted((DEFAULT_REGISTRY / "devices").glob("*.yaml")):
            _load_specs(reg, _read_yaml(path), str(path.relative_to(DEFAULT_REGISTRY)))
        _DEVICES = reg
    return _DEVICES.device_specs
