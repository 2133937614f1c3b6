"""``otel-ext semconv``: check, generate, list and query the semantic-conventions registry.

Subcommands:

* ``check [--registry PATH] [--root DIR]``: validate the registry
  (:mod:`otel_ext.semconv.validate`) and that the generated files under ``DIR`` are in
  sync; prints every problem (file, definition, problem) and exits 1 when there is any.
* ``generate [--registry PATH] [--root DIR]``: rewrite the generated files.
* ``list [--format text|json] [--kind KIND]``: every definition.
* ``coverage --counters FILE [--device MODEL] [--format text|json]``: which derived metrics
  and analyses a device's base counters support (:mod:`otel_ext.semconv.coverage`).

``--root`` defaults to this checkout's root when ``--registry`` is the packaged registry;
with another ``--registry``, the generated files are checked only when ``--root`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from otel_ext.errors import RegistryError
from otel_ext.semconv.coverage import (
    compute_coverage,
    format_text,
    load_counters,
    report_to_json,
)
from otel_ext.semconv.generate import PROJECT_ROOT, write_generated
from otel_ext.semconv.registry import DEFAULT_REGISTRY, Registry, load_registry
from otel_ext.semconv.validate import validate_registry

__all__ = ["add_arguments", "definitions", "run"]

KINDS = ("attribute", "span", "metric", "analysis")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``semconv`` subcommands to ``parser``."""
    sub = parser.add_subparsers(dest="semconv_command", metavar="SUBCOMMAND", required=True)

    def registry_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--registry",
            type=Path,
            default=None,
            metavar="PATH",
            help=f"registry folder (default: the packaged one, {DEFAULT_REGISTRY})",
        )

    def root_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--root",
            type=Path,
            default=None,
            metavar="DIR",
            help="project root holding semantic_conventions/*.py and docs/ "
            "(default: this checkout, when --registry is the packaged registry)",
        )

    p = sub.add_parser(
        "check",
        help="validate the registry and that the generated files are in sync",
        description="Validate the registry: units, names, formulas, references, device specs, "
        "and that the generated files are up to date. Exits 1 when there is any problem.",
    )
    registry_option(p)
    root_option(p)

    p = sub.add_parser(
        "generate",
        help="rewrite the generated constants modules and docs",
        description="Rewrite semantic_conventions/{attributes,spans,metrics}.py, "
        "docs/semantic-conventions.md and docs/configuration.md from the registry.",
    )
    registry_option(p)
    root_option(p)

    p = sub.add_parser(
        "list",
        help="print every definition",
        description="Print every definition: attributes, spans, metrics (with class, unit, "
        "instrument, and formula and inputs for derived ones) and analyses.",
    )
    registry_option(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--kind", choices=KINDS, default=None, help="only definitions of this kind")

    p = sub.add_parser(
        "coverage",
        help="which derived metrics and analyses a device's counters support",
        description="Given the base counters a device exposes (YAML or JSON, with their "
        "sampling intervals), tell which derived metrics and analyses it supports and which "
        "base counters it would need for the rest.",
    )
    registry_option(p)
    p.add_argument("--counters", type=Path, required=True, metavar="FILE")
    p.add_argument(
        "--device", default=None, metavar="MODEL", help="device model (overrides the file's)"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")


def definitions(reg: Registry) -> list[dict[str, Any]]:
    """Every definition of the registry as JSON-ready dictionaries (``semconv list``).

    >>> from otel_ext.semconv.registry import load_registry
    >>> d = {x["name"]: x for x in definitions(load_registry())}
    >>> d["accel.device.mfu"]["formula"], d["accel.device.mfu"]["inputs"]
    ('rate(ops) / spec.peak_flops_bf16', {'ops': 'accel.device.operations'})
    """
    out: list[dict[str, Any]] = []
    for name in sorted(reg.attributes):
        a = reg.attributes[name]
        item: dict[str, Any] = {"name": name, "kind": "attribute", "type": a.type}
        if a.members:
            item["members"] = list(a.members)
        item.update(brief=a.brief, external=a.external, file=a.source)
        out.append(item)
    for name in sorted(reg.spans):
        s = reg.spans[name]
        out.append(
            {
                "name": name,
                "kind": "span",
                "span_kind": s.span_kind,
                "attributes": list(s.attributes),
                "brief": s.brief,
                "file": s.source,
            }
        )
    for name in sorted(reg.metrics):
        m = reg.metrics[name]
        item = {
            "name": name,
            "kind": "metric",
            "class": m.metric_class,
            "unit": m.unit,
            "instrument": m.instrument,
            "monotonic": m.monotonic,
            "scope": m.scope,
            "attributes": list(m.attributes),
            "brief": m.brief,
            "external": m.external,
            "file": m.source,
        }
        if m.metric_class == "derived":
            item["formula"] = m.formula
            item["inputs"] = dict(sorted(m.inputs.items()))
        out.append(item)
    for name in sorted(reg.analyses):
        an = reg.analyses[name]
        out.append(
            {
                "name": name,
                "kind": "analysis",
                "requires": list(an.requires),
                "max_interval_s": an.max_interval_s,
                "brief": an.brief,
                "file": an.source,
            }
        )
    return out


def _text_line(d: dict[str, Any]) -> str:
    if d["kind"] == "attribute":
        extra = d["type"] + (" (" + ", ".join(d["members"]) + ")" if "members" in d else "")
    elif d["kind"] == "span":
        extra = d["span_kind"]
    elif d["kind"] == "metric":
        extra = f"{d['class']} {d['instrument']} {d['unit']}"
        if d["class"] == "derived":
            inputs = ", ".join(f"{k}={v}" for k, v in d["inputs"].items())
            extra += f" = {d['formula']}  [{inputs}]"
    else:
        extra = "requires " + ", ".join(d["requires"])
    return f"{d['kind']:<9} {d['name']}  {extra}"


def _root_for(args: argparse.Namespace) -> Path | None:
    if args.root is not None:
        return Path(args.root)
    if args.registry is None or Path(args.registry).resolve() == DEFAULT_REGISTRY:
        return PROJECT_ROOT
    return None


def run(args: argparse.Namespace) -> int:
    """Run ``otel-ext semconv SUBCOMMAND``.

    Returns:
        0 on success.

    Raises:
        RegistryError: the registry is invalid (``check``), or unreadable.
        InputError: the counters file of ``coverage`` is unusable.
    """
    cmd = args.semconv_command
    reg = load_registry(args.registry)
    if cmd == "check":
        root = _root_for(args)
        problems = validate_registry(reg, generated_root=root)
        for problem in problems:
            print(problem)
        if problems:
            raise RegistryError(f"{len(problems)} problem(s) in the registry", path=str(reg.root))
        n_derived = sum(1 for m in reg.metrics.values() if m.metric_class == "derived")
        print(
            f"registry OK: {len(reg.attributes)} attributes, {len(reg.spans)} spans, "
            f"{len(reg.metrics)} metrics ({len(reg.metrics) - n_derived} base, {n_derived} "
            f"derived), {len(reg.analyses)} analyses, {len(reg.device_specs)} device models"
        )
        if root is None:
            print(
                "generated files not checked: pass --root DIR for a registry outside this checkout"
            )
        else:
            print(f"generated files under {root} are in sync")
        return 0
    if cmd == "generate":
        root = _root_for(args)
        if root is None:
            raise RegistryError(
                "a registry outside this checkout needs --root DIR to generate into",
                path=str(reg.root),
            )
        problems = validate_registry(reg, generated_root=None)
        if problems:
            for problem in problems:
                print(problem)
            raise RegistryError(
                f"{len(problems)} problem(s) in the registry; nothing generated",
                path=str(reg.root),
            )
        changed = write_generated(reg, root=root)
        for path in changed:
            print(f"wrote {path}")
        if not changed:
            print("generated files are up to date")
        return 0
    if cmd == "list":
        defs = definitions(reg)
        if args.kind is not None:
            defs = [d for d in defs if d["kind"] == args.kind]
        if args.format == "json":
            json.dump(defs, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            for d in defs:
                print(_text_line(d))
        return 0
    if cmd == "coverage":
        counters, device = load_counters(args.counters, registry=reg)
        if args.device is not None:
            if args.device not in reg.device_specs:
                known = ", ".join(sorted(reg.device_specs))
                raise RegistryError(f"unknown device model {args.device!r} (known: {known})")
            device = args.device
        report = compute_coverage(counters, registry=reg, device=device)
        if args.format == "json":
            json.dump(report_to_json(report), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(format_text(report))
        return 0
    raise RegistryError(f"unknown semconv subcommand {cmd!r}")  # argparse prevents this
