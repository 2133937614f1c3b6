"""Generate the Python constants and the Markdown reference from the registry.

``python -m semantic_conventions.generate`` (or ``otel-ext semconv generate``) rewrites
``attributes.py``, ``spans.py``, ``metrics.py`` and ``docs/semantic-conventions.md``.
Generation is deterministic, so ``otel-ext semconv check`` can regenerate in memory and diff.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from semantic_conventions.registry import Registry, load_registry

__all__ = ["constant_name", "generated_files", "write_generated"]

PACKAGE_DIR = Path(__file__).resolve().parent
DOCS_FILE = PACKAGE_DIR.parent / "docs" / "semantic-conventions.md"
_HEADER = (
    '"""{what}\n\nGenerated from the registry by ``otel-ext semconv generate``. Do not edit.\n"""\n\n'
    "# fmt: off\n"
)


def constant_name(name: str, *, prefix: str = "") -> str:
    """The Python constant for a registry name.

    >>> constant_name("accel.collective.op")
    'ACCEL_COLLECTIVE_OP'
    >>> constant_name("accel.layer", prefix="SPAN_")
    'SPAN_ACCEL_LAYER'
    """
    return prefix + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _attributes_py(reg: Registry) -> str:
    out = [
        _HEADER.format(
            what="Attribute names of the otel-ext registry (and the OpenTelemetry ones it reuses)."
        )
    ]
    names = sorted(reg.attributes)
    out.append("__all__ = [\n" + "".join(f'    "{constant_name(n)}",\n' for n in names) + "]\n\n")
    for n in names:
        a = reg.attributes[n]
        out.append(f"#: {a.brief}\n{constant_name(n)} = {n!r}\n")
    return "".join(out)


def _spans_py(reg: Registry) -> str:
    out = [_HEADER.format(what="Span names of the otel-ext registry.")]
    names = sorted(reg.spans)
    out.append(
        "__all__ = [\n"
        + "".join(f'    "{constant_name(n, prefix="SPAN_")}",\n' for n in names)
        + "]\n\n"
    )
    for n in names:
        out.append(f"#: {reg.spans[n].brief}\n{constant_name(n, prefix='SPAN_')} = {n!r}\n")
    return "".join(out)


def _metrics_py(reg: Registry) -> str:
    out = [_HEADER.format(what="Metric names and specifications of the otel-ext registry.")]
    names = sorted(reg.metrics)
    out.append("from typing import Any\n\n")
    out.append(
        '__all__ = [\n    "METRIC_SPECS",\n'
        + "".join(f'    "{constant_name(n, prefix="METRIC_")}",\n' for n in names)
        + "]\n\n"
    )
    for n in names:
        out.append(f"#: {reg.metrics[n].brief}\n{constant_name(n, prefix='METRIC_')} = {n!r}\n")
    out.append("\n#: name -> class, instrument, unit, monotonic, scope, formula, inputs\n")
    out.append("METRIC_SPECS: dict[str, dict[str, Any]] = {\n")
    for n in names:
        m = reg.metrics[n]
        spec = {
            "class": m.metric_class,
            "instrument": m.instrument,
            "unit": m.unit,
            "monotonic": m.monotonic,
            "scope": m.scope,
            "formula": m.formula,
            "inputs": dict(sorted(m.inputs.items())),
            "attributes": list(m.attributes),
        }
        out.append(f"    {n!r}: {spec!r},\n")
    out.append("}\n")
    return "".join(out)


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _docs_md(reg: Registry) -> str:
    lines = [
        "# Semantic conventions",
        "",
        "<!-- Generated from semantic_conventions/model by `otel-ext semconv generate`. Do not edit. -->",
        "",
        "Names marked *OpenTelemetry* are reused from the OpenTelemetry semantic conventions, not redefined.",
        "",
        "## Attributes",
        "",
        "| name | type | description | examples |",
        "|---|---|---|---|",
    ]
    for n in sorted(reg.attributes):
        a = reg.attributes[n]
        typ = (
            "enum: " + ", ".join(f"`{m}`" for m in a.members) if a.type == "enum" else f"`{a.type}`"
        )
        ext = " *OpenTelemetry*" if a.external else ""
        ex = ", ".join(f"`{e}`" for e in a.examples[:3])
        lines.append(f"| `{n}`{ext} | {typ} | {_md_escape(a.brief)} | {_md_escape(ex)} |")
    lines += ["", "## Spans", "", "| name | kind | description | attributes |", "|---|---|---|---|"]
    for n in sorted(reg.spans):
        s = reg.spans[n]
        attrs = ", ".join(f"`{x}`" for x in s.attributes)
        lines.append(f"| `{n}` | {s.span_kind} | {_md_escape(s.brief)} | {attrs} |")
    for cls, title in (
        ("base", "Base metrics (read from hardware or runtime)"),
        ("derived", "Derived metrics"),
    ):
        lines += ["", f"## {title}", ""]
        if cls == "base":
            lines += ["| name | instrument | unit | scope | description |", "|---|---|---|---|---|"]
        else:
            lines += [
                "| name | unit | scope | formula | inputs | description |",
                "|---|---|---|---|---|---|",
            ]
        for n in sorted(reg.metrics):
            m = reg.metrics[n]
            if m.metric_class != cls:
                continue
            ext = " *OpenTelemetry*" if m.external else ""
            if cls == "base":
                mono = ", monotonic" if m.monotonic else ""
                lines.append(
                    f"| `{n}`{ext} | {m.instrument}{mono} | `{m.unit}` | {m.scope} | {_md_escape(m.brief)} |"
                )
            else:
                inputs = ", ".join(f"`{k}` = `{v}`" for k, v in sorted(m.inputs.items()))
                lines.append(
                    f"| `{n}` | `{m.unit}` | {m.scope} | `{_md_escape(m.formula or '')}` | {inputs} | {_md_escape(m.brief)} |"
                )
    lines += ["", "## Device peak specifications", ""]
    fields = list(reg.spec_fields)
    lines.append("| model | " + " | ".join(f"{f} (`{reg.spec_fields[f]}`)" for f in fields) + " |")
    lines.append("|---|" + "---|" * len(fields))
    for model in sorted(reg.device_specs):
        row = reg.device_specs[model]
        lines.append(f"| `{model}` | " + " | ".join(f"{row.get(f, '')}" for f in fields) + " |")
    return "\n".join(lines) + "\n"


def generated_files(reg: Registry | None = None) -> dict[Path, str]:
    """Path -> the text the generator would write, without writing anything."""
    reg = reg or load_registry()
    return {
        PACKAGE_DIR / "attributes.py": _attributes_py(reg),
        PACKAGE_DIR / "spans.py": _spans_py(reg),
        PACKAGE_DIR / "metrics.py": _metrics_py(reg),
        DOCS_FILE: _docs_md(reg),
    }


def write_generated(reg: Registry | None = None) -> list[Path]:
    """Write the generated files; return the paths that changed."""
    changed = []
    for path, text in generated_files(reg).items():
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


if __name__ == "__main__":
    for p in write_generated():
        print(f"wrote {p}")
    sys.exit(0)
