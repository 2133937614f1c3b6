"""Loading the semantic-conventions registry from its YAML files.

The registry is a folder of YAML files (``model/`` by default) in the OpenTelemetry
semantic-conventions group style: ``attribute_group`` groups define attributes, ``span``
groups name span kinds, ``metric`` groups define metrics with a ``class`` of ``base`` or
``derived`` (derived ones carry a ``formula`` over named ``inputs``). ``devices/specs.yaml``
is the device peak-specification table.

>>> reg = load_registry()
>>> reg.attributes["accel.collective.op"].type
'string'
>>> reg.metrics["accel.device.mfu"].metric_class
'derived'
>>> reg.device_specs["sim-accel-v1"]["memory_bandwidth"]
2000000000000.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from otel_ext.errors import RegistryError

__all__ = [
    "DEFAULT_REGISTRY",
    "Attribute",
    "Metric",
    "Registry",
    "Span",
    "device_specs",
    "load_registry",
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


@dataclass
class Registry:
    attributes: dict[str, Attribute] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    device_specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    spec_fields: dict[str, str] = field(default_factory=dict)
    #: (file, definition, problem) found while loading; validation adds more
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    root: Path = DEFAULT_REGISTRY


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RegistryError(f"not valid YAML: {exc}", path=str(path)) from None
    except OSError as exc:
        raise RegistryError(f"cannot read: {exc.strerror}", path=str(path)) from None


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
                reg.problems.append((rel, attr.name, "duplicate attribute name"))
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
            reg.problems.append((rel, name, "duplicate span name"))
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
            reg.problems.append((rel, name, "duplicate metric name"))
        reg.metrics[name] = metric
    else:
        raise RegistryError(f"unknown group type {gtype!r}", path=rel, record=gid)


def _load_specs(reg: Registry, doc: Any, rel: str) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), dict):
        raise RegistryError("expected 'fields' and a 'devices' mapping", path=rel)
    reg.spec_fields.update({str(k): str(v) for k, v in (doc.get("fields") or {}).items()})
    for model, row in doc["devices"].items():
        if not isinstance(row, dict):
            raise RegistryError("a device row must be a mapping", path=rel, record=str(model))
        reg.device_specs[str(model)] = dict(row)


def device_specs(model: str, *, registry: Registry | None = None) -> dict[str, Any]:
    """The peak-specification row of device ``model``.

    Raises:
        RegistryError: the model is not in the device-spec table.

    >>> device_specs("H100-SXM5-80GB")["power_limit"]
    700.0
    """
    reg = registry or _default()
    try:
        return reg.device_specs[model]
    except KeyError:
        known = ", ".join(sorted(reg.device_specs))
        raise RegistryError(
            f"unknown device model {model!r} (known: {known})", path="devices/specs.yaml"
        ) from None


_DEFAULT: Registry | None = None


def _default() -> Registry:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_registry()
    return _DEFAULT
