"""Which profiler steps an analysis covers: all, the complete ones (HTA's default), or a range.

A PyTorch profiler trace annotates each step (``ProfilerStep#N``). Holistic Trace Analysis
keeps by default, in a trace with two or more step annotations, only the host operations that
start before the last step and the device work they launched: the last step is usually cut
short by the end of the capture. ``otel-ext analyze`` does the same by default (``--steps
complete``) so both tools give the same numbers side by side; ``--steps all`` keeps every
event, and ``--steps N-M`` (or ``N``) keeps the host rows that start within steps N to M and
the device rows launched from them. The selection is recorded in the report's
``run.steps``.

Only ``ProfilerStep#N`` annotations select: engine steps in OpenTelemetry spans (and files
without step annotations) are kept whole.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> rows = [dict(start_ns=s, end_ns=s + 10, category=C.STEP, name=f"ProfilerStep#{i}", source="f")
...         for i, s in ((1, 0), (2, 10), (3, 20))]
>>> rows += [dict(start_ns=s, end_ns=s + 2, category=C.CPU_OP, name="aten::mm", source="f")
...          for s in (1, 11, 21)]
>>> kept, record = select_steps(EventTable.from_rows(rows), "complete")
>>> len(kept), record["kept_steps"], record["dropped_rows"]
(4, [1, 2], 2)
>>> len(select_steps(EventTable.from_rows(rows), "2-3")[0])
4
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.breakdown import device_mask, launch_rows
from otel_ext.analysis.table import Category, EventTable
from otel_ext.errors import OtelExtError

__all__ = ["DEFAULT_STEPS", "parse_steps", "select_steps"]

#: the default selection: what HTA 0.5.0 keeps by default
DEFAULT_STEPS = "complete"

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def parse_steps(spec: str) -> tuple[str, int | None, int | None]:
    """``(kind, first, last)`` from ``all``, ``complete``, ``N`` or ``N-M``.

    >>> parse_steps("3-5"), parse_steps("all")
    (('range', 3, 5), ('all', None, None))
    >>> parse_steps("5-3")
    Traceback (most recent call last):
    ...
    otel_ext.errors.OtelExtError: --steps 5-3: the first step is after the last
    """
    text = spec.strip().lower()
    if text in ("all", "complete"):
        return text, None, None
    m = _RANGE.match(text)
    if not m:
        raise OtelExtError(f"--steps {spec}: expected all, complete, N or N-M")
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else first
    if first > last:
        raise OtelExtError(f"--steps {spec}: the first step is after the last")
    return "range", first, last


def select_steps(table: EventTable, spec: str = DEFAULT_STEPS) -> tuple[EventTable, dict[str, Any]]:
    """The rows of the selected steps, per file, and a record of the selection.

    Args:
        table: the loaded events (every file).
        spec: ``all``, ``complete`` (drop each file's last step, as HTA does) or ``N`` /
            ``N-M`` (the profiler's step numbers, inclusive).

    Returns:
        ``(table, record)``: the kept rows in their order, and ``{"selection", "files",
        "kept_steps", "dropped_rows"}`` (the step numbers kept in any file).

    Raises:
        OtelExtError: a malformed ``spec``, or a range that no file's steps meet.
    """
    kind, first, last = parse_steps(spec)
    record: dict[str, Any] = {"selection": spec, "files": 0, "kept_steps": [], "dropped_rows": 0}
    if kind == "all" or len(table) == 0:
        return table, record
    cat, start, src = table["category"], table["start_ns"], table["source"]
    step_rows = np.flatnonzero(cat == Category.STEP)
    names = table.strings["name"]
    number = np.full(len(table), -1, dtype=np.int64)
    for code in distinct(table["name"][step_rows]).tolist():
        m = _STEP.match(names[int(code)])
        if m:
            number[step_rows[table["name"][step_rows] == code]] = int(m.group(1))
    steps = number >= 0
    if not steps.any():
        return table, record
    keep = np.ones(len(table), dtype=bool)
    dev = device_mask(table)
    launch = None
    kept_steps: set[int] = set()
    for code in distinct(src[steps]).tolist():
        in_file = src == code
        mine = np.flatnonzero(in_file & steps)
        if kind == "complete":
            if len(mine) < 2:
                kept_steps.update(int(x) for x in number[mine])
                continue
            cut = start[mine].max()
            host_keep = in_file & ~dev & (start < cut)
            kept_steps.update(
                int(x) for x in number[mine] if start[mine][number[mine] == x].min() < cut
            )
        else:
            sel = mine[(number[mine] >= int(first or 0)) & (number[mine] <= int(last or 0))]
            if len(sel) == 0:
                host_keep = np.zeros(len(table), dtype=bool)
            else:
                lo = start[sel].min()
                hi = table["end_ns"][sel].max()
                host_keep = in_file & ~dev & (start >= lo) & (start < hi)
                kept_steps.update(int(x) for x in number[sel])
        record["files"] += 1
        keep[in_file & ~dev] = host_keep[in_file & ~dev]
        if launch is None:
            launch = launch_rows(table)
        d = in_file & dev
        lr = launch[d]
        ok = lr >= 0
        kept = np.zeros(int(d.sum()), dtype=bool)
        kept[ok] = host_keep[lr[ok]]
        if kind == "range" and len(sel):
            # device work no launch names (kernels of graph replays, or missing correlation)
            # stays when it ran within the steps
            kept[~ok] = (start[d][~ok] >= lo) & (start[d][~ok] < table["end_ns"][sel].max())
        keep[d] = kept
    if kind == "range" and not kept_steps:
        raise OtelExtError(f"--steps {spec}: no file has profiler steps {first}-{last}")
    record["kept_steps"] = sorted(kept_steps)
    record["dropped_rows"] = int(len(table) - int(keep.sum()))
    if keep.all():
        return table, record
    return table.select(keep), record
