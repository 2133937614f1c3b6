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
from typing import NamedTuple, TypedDict

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.rank.breakdown import device_mask, launch_rows
from otel_ext.analysis.table import Category, EventTable
from otel_ext.errors import OtelExtError

__all__ = [
    "DEFAULT_STEPS",
    "StepSelection",
    "merge_step_records",
    "parse_steps",
    "select_steps",
]

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


class StepSelection(TypedDict):
    """The report's ``run.steps``: the selection and what it kept."""

    selection: str
    #: the files the selection applied to (those with profiler steps)
    files: int
    #: the step numbers kept in any file
    kept_steps: list[int]
    dropped_rows: int


class _Windows(NamedTuple):
    """Per source file (by code): the host rows kept start in ``[lo, cut)`` where
    ``applies``; per step row, whether it is kept."""

    lo: np.ndarray
    cut: np.ndarray
    applies: np.ndarray
    kept_steps: np.ndarray


def _step_numbers(table: EventTable) -> np.ndarray:
    """Each row's profiler step number (``ProfilerStep#N``), -1 for other rows."""
    step_rows = np.flatnonzero(table["category"] == Category.STEP)
    names = table.strings["name"]
    number = np.full(len(table), -1, dtype=np.int64)
    for code in distinct(table["name"][step_rows]).tolist():
        m = _STEP.match(names[int(code)])
        if m:
            number[step_rows[table["name"][step_rows] == code]] = int(m.group(1))
    return number


def _complete_windows(table: EventTable, src: np.ndarray, steps: np.ndarray) -> _Windows:
    """Each file with two or more steps keeps the rows that start before its last step."""
    start = table["start_ns"]
    n_src = int(src.max()) + 1
    s_src = src[steps]
    count = np.bincount(s_src, minlength=n_src)
    cut = np.full(n_src, np.iinfo(np.int64).max, dtype=np.int64)  # keep rows starting before it
    last = np.full(n_src, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, s_src, start[steps])
    cut[count >= 2] = last[count >= 2]
    lo = np.full(n_src, np.iinfo(np.int64).min, dtype=np.int64)
    return _Windows(lo, cut, count >= 2, start[steps] < cut[s_src])


def _range_windows(
    table: EventTable, src: np.ndarray, steps: np.ndarray, number: np.ndarray, first: int, last: int
) -> _Windows:
    """Each file with steps keeps the rows that start within its steps ``first`` to ``last``
    (a file with steps, none of them selected, keeps nothing)."""
    start, end = table["start_ns"], table["end_ns"]
    n_src = int(src.max()) + 1
    count = np.bincount(src[steps], minlength=n_src)
    sel = steps[(number[steps] >= first) & (number[steps] <= last)]
    lo = np.full(n_src, np.iinfo(np.int64).max, dtype=np.int64)
    cut = np.full(n_src, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, src[sel], start[sel])
    np.maximum.at(cut, src[sel], end[sel])
    return _Windows(lo, cut, count >= 1, np.isin(steps, sel))


def _rows_kept(table: EventTable, src: np.ndarray, w: _Windows, *, by_time: bool) -> np.ndarray:
    """The rows kept: host rows inside their file's window, device rows whose launching
    host row is kept (``by_time``: device rows no launch names, such as graph replays'
    kernels, kept when they start inside the window); files the selection does not apply to
    kept whole."""
    start = table["start_ns"]
    dev = device_mask(table)
    in_scope = w.applies[src]
    host_keep = (start >= w.lo[src]) & (start < w.cut[src])
    keep = np.ones(len(table), dtype=bool)
    host = in_scope & ~dev
    keep[host] = host_keep[host]
    d = np.flatnonzero(in_scope & dev)
    if len(d):
        launch = launch_rows(table)[d]
        ok = launch >= 0
        kept = np.zeros(len(d), dtype=bool)
        kept[ok] = keep[launch[ok]] & ~dev[launch[ok]]
        if by_time:
            kept[~ok] = host_keep[d[~ok]]
        keep[d] = kept
    return keep


def select_steps(
    table: EventTable, spec: str = DEFAULT_STEPS, *, none_ok: bool = False
) -> tuple[EventTable, StepSelection]:
    """The rows of the selected steps, per file, and a record of the selection.

    Args:
        table: the loaded events (every file).
        spec: ``all``, ``complete`` (drop each file's last step, as HTA does) or ``N`` /
            ``N-M`` (the profiler's step numbers, inclusive).
        none_ok: a range no file's steps meet is no error (for one file of several: the
            selection is per file, and :func:`merge_step_records` says it of them all).

    Returns:
        ``(table, record)``: the kept rows in their order, and ``{"selection", "files",
        "kept_steps", "dropped_rows"}`` (the step numbers kept in any file).

    Raises:
        OtelExtError: a malformed ``spec``, or a range that no file's steps meet.
    """
    kind, first, last_n = parse_steps(spec)
    record: StepSelection = {"selection": spec, "files": 0, "kept_steps": [], "dropped_rows": 0}
    if kind == "all" or len(table) == 0:
        return table, record
    number = _step_numbers(table)
    steps = np.flatnonzero(number >= 0)
    if len(steps) == 0:
        return table, record
    # per file, in one pass each (no mask over every row per file)
    src = table["source"].astype(np.int64)
    if kind == "complete":
        w = _complete_windows(table, src, steps)
    else:
        w = _range_windows(table, src, steps, number, int(first or 0), int(last_n or 0))
    record["files"] = int(np.count_nonzero(w.applies))
    kept_steps = {int(x) for x in number[steps][w.kept_steps].tolist()}
    keep = _rows_kept(table, src, w, by_time=kind == "range")
    if kind == "range" and not kept_steps and not none_ok:
        raise OtelExtError(f"--steps {spec}: no file has profiler steps {first}-{last_n}")
    record["kept_steps"] = sorted(kept_steps)
    record["dropped_rows"] = int(len(table) - int(keep.sum()))
    if keep.all():
        return table, record
    return table.select(keep), record


def merge_step_records(spec: str, records: list[StepSelection]) -> StepSelection:
    """The record :func:`select_steps` gives for several files together, from each file's
    (the selection is per file).

    Raises:
        OtelExtError: a range that no file's steps meet.

    >>> merge_step_records("complete", [
    ...     {"selection": "complete", "files": 1, "kept_steps": [1, 2], "dropped_rows": 4},
    ...     {"selection": "complete", "files": 1, "kept_steps": [2, 3], "dropped_rows": 1}])
    {'selection': 'complete', 'files': 2, 'kept_steps': [1, 2, 3], 'dropped_rows': 5}
    """
    kind, first, last_n = parse_steps(spec)
    kept = sorted({int(k) for r in records for k in r["kept_steps"]})
    out: StepSelection = {
        "selection": spec,
        "files": sum(int(r["files"]) for r in records),
        "kept_steps": kept,
        "dropped_rows": sum(int(r["dropped_rows"]) for r in records),
    }
    if kind == "range" and not kept and any(r["files"] for r in records):
        raise OtelExtError(f"--steps {spec}: no file has profiler steps {first}-{last_n}")
    return out
