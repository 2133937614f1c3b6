"""The report's ``memory`` section and the ``memory-near-capacity`` finding.

A PyTorch memory timeline (:mod:`otel_ext.analysis.loaders.memory_timeline`) says how many
bytes one device held, by category, over time. Its loader hands a brief of it (peak, peak by
category, largest per category, the peak in each of 60 windows) with the file's input record;
:func:`memory_section` moves those briefs into one section of the report:

``{"timelines": [{"source", "peak_bytes", "peak_ns", "peak_by_category", "max_by_category",
"final_bytes", "start_ns", "end_ns", "events", "changes", "kind", "series",
"capacity_bytes", "peak_pct_of_capacity"}], "capacity_bytes", "capacity_source",
"near_capacity_threshold"}``.

**Capacity.** The export does not carry the device or its memory size (PyTorch writes the
timeline of the device named in the call, nothing more), and a timeline alone cannot tell
an H100 from a laptop GPU. The capacity is therefore only the one the analysis knows: the
registry's ``memory_size`` of the device model (``--device-model``, or the metrics'
``accel.device.model``; ``semantic_conventions/model/devices/specs.yaml``). Without one the
section says ``capacity_bytes: null`` and no capacity finding is made.

**Finding.** ``memory-near-capacity``: a timeline whose peak is at least
:data:`NEAR_CAPACITY` (90 %) of the known capacity. PyTorch's caching allocator reserves
more than the tensors hold (fragmentation, the caching itself), so a tensor peak at 90 % of
the device leaves next to no room: the next larger batch or sequence fails with an
out-of-memory error. Its evidence: the peak, the capacity and its source, the share, when,
and the peak's largest categories. It costs no run time (``impact_ns`` 0): it ranks with the
symptoms.

>>> brief = {"peak_bytes": 75 * 10**9, "peak_ns": 5, "peak_by_category": {"activation": 6 * 10**10}}
>>> sec = memory_section([{"path": "m.raw.json.gz", "memory": brief}], capacity_bytes=80e9,
...                      capacity_source="device model h100")
>>> sec["timelines"][0]["peak_pct_of_capacity"]
93.75
>>> [f.kind for f in memory_findings(sec)]
['memory-near-capacity']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from otel_ext.analysis.findings.finding import Finding
from otel_ext.analysis.loaders.memory_timeline import MemorySeries

__all__ = [
    "NEAR_CAPACITY",
    "MemoryInput",
    "MemorySection",
    "MemorySeries",
    "MemoryTimelineEntry",
    "memory_findings",
    "memory_html",
    "memory_section",
    "memory_text",
]

#: a peak at least this share of the device's capacity is a ``memory-near-capacity`` finding
NEAR_CAPACITY = 0.90


class MemoryInput(TypedDict, total=False):
    """A memory timeline in brief, as its loader hands it with the file's input record
    (:meth:`~otel_ext.analysis.loaders.memory_timeline.MemoryTimeline.summary`)."""

    kind: str
    events: int
    changes: int
    peak_bytes: int
    peak_ns: int | None
    start_ns: int | None
    end_ns: int | None
    peak_by_category: dict[str, int]
    max_by_category: dict[str, int]
    final_bytes: int
    series: MemorySeries


class MemoryTimelineEntry(MemoryInput):
    """One timeline of the memory section: its file, its brief, and its peak's share of the
    device's capacity (None when the capacity is unknown)."""

    source: str
    capacity_bytes: int | None
    peak_pct_of_capacity: float | None


class MemorySection(TypedDict):
    """The report's ``memory`` section."""

    timelines: list[MemoryTimelineEntry]
    capacity_bytes: int | None
    capacity_source: str | None
    near_capacity_threshold: float


def memory_section(
    inputs: Sequence[dict[str, Any]],
    *,
    capacity_bytes: float | None = None,
    capacity_source: str | None = None,
) -> MemorySection | None:
    """The report's memory section from the input records' memory briefs (moved out of them:
    each record's ``memory`` key is removed, the section holds it), or None when no input
    was a memory timeline.

    Args:
        inputs: the report's input records (as :func:`~otel_ext.analysis.loaders.load_paths`
            gives them).
        capacity_bytes: the device's memory, when known (else no share, no finding).
        capacity_source: where the capacity came from (``device model h100``).
    """
    cap = float(capacity_bytes) if capacity_bytes and capacity_bytes > 0 else None
    timelines: list[MemoryTimelineEntry] = []
    for rec in inputs:
        brief: MemoryInput | None = rec.pop("memory", None) if isinstance(rec, dict) else None
        if not isinstance(brief, dict):
            continue
        peak = float(brief.get("peak_bytes") or 0)
        timelines.append(
            {
                "source": rec.get("path", ""),
                **brief,
                "capacity_bytes": int(cap) if cap else None,
                "peak_pct_of_capacity": round(100.0 * peak / cap, 2) if cap else None,
            }
        )
    if not timelines:
        return None
    return {
        "timelines": timelines,
        "capacity_bytes": int(cap) if cap else None,
        "capacity_source": capacity_source if cap else None,
        "near_capacity_threshold": NEAR_CAPACITY,
    }


def memory_findings(section: MemorySection | None) -> list[Finding]:
    """``memory-near-capacity`` findings of a memory section (see the module docstring)."""
    capacity = section.get("capacity_bytes") if section else None
    if not section or not capacity:
        return []
    cap = float(capacity)
    out: list[Finding] = []
    for t in section["timelines"]:
        peak = float(t.get("peak_bytes") or 0)
        share = peak / cap
        if share < NEAR_CAPACITY:
            continue
        top = sorted((t.get("peak_by_category") or {}).items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in top)
        out.append(
            Finding(
                "memory-near-capacity",
                t.get("source", ""),
                0,
                0.0,
                f"memory peaks at {_gib(peak)}, {100 * share:.1f} % of the device's "
                f"{_gib(cap)} ({section.get('capacity_source')}): little room before an "
                f"out-of-memory error" + (f"; at the peak: {parts}" if parts else ""),
                {
                    "peak_bytes": int(peak),
                    "capacity_bytes": int(cap),
                    "capacity_source": section.get("capacity_source"),
                    "peak_share": round(share, 4),
                    "threshold": NEAR_CAPACITY,
                    "peak_ns": t.get("peak_ns"),
                    "peak_by_category": t.get("peak_by_category"),
                },
            )
        )
    return out


def _gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB"


def memory_text(sec: MemorySection | None) -> list[str]:
    """The report's memory section as text lines (none when the report has no section).

    >>> memory_text({"timelines": [{"source": "m", "peak_bytes": 2**31, "peak_ns": 7,
    ...     "peak_by_category": {"activation": 2**30}}], "capacity_bytes": None})[1]
    '  m: peak 2.00 GiB at 7 ns (capacity unknown); at the peak: activation 1.00 GiB'
    """
    if not sec:
        return []
    lines = ["Memory (PyTorch memory timeline):"]
    for t in sec.get("timelines", []):
        cap = t.get("peak_pct_of_capacity")
        share = f"{cap:.1f} % of capacity" if cap is not None else "capacity unknown"
        top = sorted((t.get("peak_by_category") or {}).items(), key=lambda kv: -kv[1])
        cats = ", ".join(f"{k} {_gib(v)}" for k, v in top)
        lines.append(
            f"  {t.get('source', '')}: peak {_gib(t.get('peak_bytes') or 0)} at "
            f"{t.get('peak_ns')} ns ({share})" + (f"; at the peak: {cats}" if cats else "")
        )
    return lines


def memory_html(sec: MemorySection | None) -> str:
    """The report's memory section as an HTML fragment: a table per timeline and its peak
    over time as a small bar chart (empty when the report has no section)."""
    from html import escape

    if not sec:
        return ""
    parts = ["<h2>Memory</h2>"]
    for t in sec.get("timelines", []):
        cap = t.get("peak_pct_of_capacity")
        rows = "".join(
            f"<tr><td>{escape(str(k))}</td><td class=num>{_gib(v)}</td></tr>"
            for k, v in sorted((t.get("peak_by_category") or {}).items(), key=lambda kv: -kv[1])
        )
        windows = t.get("series")
        series = (windows.get("peak_bytes") if windows else None) or []
        top = max(series) if series else 0
        bars = "".join(
            f'<rect x="{4 * k}" y="{60 - 60 * v / top:.1f}" width="3" '
            f'height="{60 * v / top:.1f}" fill="#4a7"/>'
            for k, v in enumerate(series)
            if top > 0 and v > 0
        )
        parts.append(
            f"<p>{escape(str(t.get('source', '')))}: peak {_gib(t.get('peak_bytes') or 0)}"
            + (f", {cap:.1f} % of the device's memory" if cap is not None else ", capacity unknown")
            + "</p>"
            + f'<svg width="{4 * len(series)}" height="60" role="img" '
            f'aria-label="memory held over time">{bars}</svg>'
            + f"<table><tr><th>category at the peak</th><th>bytes</th></tr>{rows}</table>"
        )
    return "\n".join(parts)
