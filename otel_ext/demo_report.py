"""What both demos print and write at the end: the analysis, the clock summary, the report.

``otel-ext demo`` (the simulated cluster, :mod:`otel_ext.demo`) and ``otel-ext demo --real``
(real PyTorch on gloo, :mod:`otel_ext.demo_real`) end the same way: :func:`analyze_run`
analyses the output folder from its telemetry files alone and writes ``report.json`` and
``report.html``; :func:`clock_summary` writes ``clock-alignment.json``; :func:`print_report`
prints what holds the cluster back with its evidence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

__all__ = ["analyze_run", "clock_summary", "print_report"]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _evidence(ev: dict[str, Any], limit: int = 6) -> str:
    parts = []
    for key, value in list(ev.items())[:limit]:
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, (list, dict)):
            continue
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def clock_summary(doc: dict[str, Any], out: Path) -> dict[str, Any]:
    """The clock-alignment summary: per-rank offsets and bounds, causality before/after."""
    ranks = doc.get("ranks", [])
    bounds = [float(r.get("clock_bound_ns") or 0.0) for r in ranks]
    summary = {
        "schema": "otel-ext.clock-alignment/1",
        # marks the file as derived output, so `otel-ext analyze` of the folder leaves it out
        "derived_from": "otel-ext.analysis/1",
        "method": doc.get("alignment", {}).get("method", "collective-based"),
        "ranks": ranks,
        "max_bound_ns": max(bounds) if bounds else None,
        "causality": doc.get("causality", {}),
    }
    (out / "clock-alignment.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def print_report(
    doc: dict[str, Any],
    *,
    out: Path,
    files: dict[str, Path],
    cluster: str,
    clock: dict[str, Any],
    metrics_url: str | None,
    stream: TextIO,
) -> None:
    p = lambda *a: print(*a, file=stream)  # noqa: E731
    p("")
    p(f"== otel-ext demo: {cluster}")
    findings = doc.get("findings", [])
    if not findings:
        p("   No finding stands out: the run looks healthy.")
    else:
        p("   What holds the cluster back, most costly first:")
        for i, f in enumerate(findings[:5], 1):
            impact = f.get("impact_pct")
            impact_s = f"{impact:.1f}% " if isinstance(impact, (int, float)) else ""
            p(
                f"   {i}. {f.get('kind')} at {f.get('target')}: costs {impact_s}"
                f"({_ms(float(f.get('impact_ns') or 0))})"
            )
            if f.get("summary"):
                p(f"      {f['summary']}")
            ev = f.get("evidence") or {}
            if ev:
                p(f"      evidence: {_evidence(ev)}")
    causality = clock.get("causality", {})
    bound = clock.get("max_bound_ns")
    p("")
    p(
        "   Clock alignment: "
        + (f"worst per-rank bound {bound / 1e3:.1f} µs; " if bound is not None else "")
        + f"causality violations {causality.get('violations_before', '?')} before repair, "
        f"{causality.get('violations_after', '?')} after"
    )
    p("")
    p(f"   Outputs in {out}/:")
    for label, name, how in (
        ("traces", "traces.jsonl", "OTLP-JSON; `otel-ext analyze` or any Collector file receiver"),
        ("metrics", "metrics.jsonl", "OTLP-JSON metric points"),
        ("timeline", "timeline.json", "open in https://ui.perfetto.dev or chrome://tracing"),
        ("report", "report.html", "open in a browser (self-contained)"),
        ("analysis", "report.json", "stable JSON, see docs/analysis.md"),
        ("clocks", "clock-alignment.json", "per-rank clock offsets and bounds"),
        ("truth", "truth.json", "what was injected: hold the findings against it"),
    ):
        if (out / name).exists():
            p(f"     {label:9s} {name:21s} {how}")
        else:  # one file per rank (demo --real)
            stem, dot, ext = name.partition(".")
            ranks = sorted(out.glob(f"{stem}-rank*.{ext}"))
            if ranks and dot:
                pattern = f"{stem}-rank*.{ext}"
                p(f"     {label:9s} {pattern:21s} {how} ({len(ranks)} files)")
    if metrics_url:
        p(f"   Live counters were served at {metrics_url}")
    p("   Grafana and Jaeger: `docker compose -f deploy/compose.yaml up`, see docs/deploy.md")


def analyze_run(out: Path, err: TextIO) -> dict[str, Any]:
    """Analyse the output folder, write ``report.json`` and ``report.html``."""
    from otel_ext.analysis.engine import analyze, to_json
    from otel_ext.analysis.report.html import render_html

    print("  aligning clocks and analysing the telemetry files ...", file=err, flush=True)
    for stale in ("report.json", "report.html", "clock-alignment.json"):
        (out / stale).unlink(missing_ok=True)
    doc = analyze([str(out)])
    (out / "report.json").write_text(to_json(doc))
    (out / "report.html").write_text(render_html(doc, title="otel-ext demo"), encoding="utf-8")
    return doc
