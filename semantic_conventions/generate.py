"""Generate the Python constants and the Markdown references from the registry.

``python -m otel_ext.semconv.generate`` (or ``otel-ext semconv generate``) rewrites
``semantic_conventions/attributes.py``, ``spans.py``, ``metrics.py``,
``docs/semantic-conventions.md`` and ``docs/configuration.md``. Generation is deterministic,
so ``otel-ext semconv check`` regenerates in memory and diffs. Each Markdown page keeps the
hand-written introduction above its "generated below" marker line.

>>> files = generated_files()
>>> sorted(p.name for p in files)
['attributes.py', 'configuration.md', 'metrics.py', 'semantic-conventions.md', 'spans.py']
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from otel_ext.semconv.configdoc import DEFAULT_INTRO as CONFIG_INTRO
from otel_ext.semconv.configdoc import MARKER as CONFIG_MARKER
from otel_ext.semconv.configdoc import render_configuration_md
from otel_ext.semconv.registry import Registry, load_registry

__all__ = ["PROJECT_ROOT", "constant_name", "generated_files", "write_generated"]

PACKAGE_DIR = Path(__file__).resolve().parent
#: The project root the generated files are written under by default.
PROJECT_ROOT = PACKAGE_DIR.parent
DOCS_FILE = PROJECT_ROOT / "docs" / "semantic-conventions.md"
_HEADER = (
    '"""{what}\n\nGenerated from the registry by ``otel-ext semconv generate``. Do not edit.\n"""\n\n'
    "# fmt: off\n"
)
DOCS_MARKER = (
    "<!-- Everything below is generated from semantic_conventions/model by "
    "`otel-ext semconv generate`. Do not edit below this line. -->"
)
DOCS_INTRO = """# Semantic conventions

The registry under `semantic_conventions/model/` is the single source of truth for what
otel-ext's telemetry means. This page, and the constants modules `otel_ext.semconv.attributes`,
`.spans` and `.metrics`, are generated from it; `otel-ext semconv check` fails when they are
stale. Names marked *OpenTelemetry* are reused from the OpenTelemetry semantic conventions,
not redefined; our own names live under `accel.`.

Every metric is **base** (read directly from hardware or runtime) or **derived** (computed
from base metrics by its formula). A formula uses its declared input names (the input's
current value), `rate(x)` (the per-second rate of monotonic counter `x` over the evaluation
window), `spec.FIELD` (the device's peak specification from the table at the end), numbers,
`+ - * /` and parentheses. `otel-ext semconv check` verifies that the inputs' units combine
into the declared unit (UCUM codes; annotations such as `{flop}` count as named units that
must match). A new chip generation is a new row of the spec table, not new code.

Commands (see `otel-ext semconv SUBCOMMAND --help`):

- `otel-ext semconv check` validates the registry and fails when the generated files are
  stale. The rules (naming, units, formulas, references, device specs) are listed in the
  docstring of `semantic_conventions/validate.py`; every problem names its file, definition
  and what is wrong.
- `otel-ext semconv generate` rewrites the generated files (this page keeps the text above
  the marker line below).
- `otel-ext semconv list --format json|text [--kind attribute|span|metric|analysis]` prints
  every definition.
- `otel-ext semconv coverage --counters FILE [--device MODEL]` tells which derived metrics and
  analyses a device supports from the base counters it exposes (a YAML or JSON list of
  metric names, or of `{name, interval_s | rate_hz}`; optionally under `counters:` with a
  `device:` model of the spec table), and which base counters it would need for the rest.

To add a name: append it to the right file under `semantic_conventions/model/`, run
`otel-ext semconv generate`, then `otel-ext semconv check`.
"""


def _kept_intro(path: Path, marker: str, default: str) -> str:
    """The hand-written part of a generated page: the text above ``marker``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return default
    head, sep, _ = text.partition(marker)
    return head.rstrip("\n") + "\n" if sep else default


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


def _docs_md(reg: Registry, intro: str = DOCS_INTRO) -> str:
    lines = [
        intro.rstrip("\n"),
        "",
        DOCS_MARKER,
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
    lines += [
        "",
        "## Analyses and the metrics they need",
        "",
        "| analysis | requires | slowest sampling interval | description |",
        "|---|---|---|---|",
    ]
    for n in sorted(reg.analyses):
        an = reg.analyses[n]
        req = ", ".join(f"`{x}`" for x in an.requires)
        interval = "any" if an.max_interval_s is None else f"{an.max_interval_s:g} s"
        lines.append(f"| `{n}` | {req} | {interval} | {_md_escape(an.brief)} |")
    lines += ["", "## Device peak specifications", ""]
    fields = list(reg.spec_fields)
    lines.append("| model | " + " | ".join(f"{f} (`{reg.spec_fields[f]}`)" for f in fields) + " |")
    lines.append("|---|" + "---|" * len(fields))
    for model in sorted(reg.device_specs):
        row = reg.device_specs[model]
        lines.append(f"| `{model}` | " + " | ".join(f"{row.get(f, '')}" for f in fields) + " |")
    return "\n".join(lines) + "\n"


def generated_files(reg: Registry | None = None, *, root: Path | None = None) -> dict[Path, str]:
    """Path -> the text the generator would write, without writing anything.

    Args:
        reg: the registry (default: the packaged one).
        root: the project root to generate under (default: this checkout's root). The
            Markdown pages keep the introduction found in the existing files there.
    """
    reg = reg or load_registry()
    base = PROJECT_ROOT if root is None else Path(root)
    pkg = base / "semantic_conventions"
    docs = base / "docs"
    return {
        pkg / "attributes.py": _attributes_py(reg),
        pkg / "spans.py": _spans_py(reg),
        pkg / "metrics.py": _metrics_py(reg),
        docs / "semantic-conventions.md": _docs_md(
            reg, _kept_intro(docs / "semantic-conventions.md", DOCS_MARKER, DOCS_INTRO)
        ),
        docs / "configuration.md": render_configuration_md(
            _kept_intro(docs / "configuration.md", CONFIG_MARKER, CONFIG_INTRO)
        ),
    }


def write_generated(reg: Registry | None = None, *, root: Path | None = None) -> list[Path]:
    """Write the generated files; return the paths that changed."""
    changed = []
    for path, text in generated_files(reg, root=root).items():
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
