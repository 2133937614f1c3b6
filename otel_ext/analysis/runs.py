"""What a run is: which ranks and files belong to one job, and a unique rank for every trace.

Profiler traces carry host wall-clock times (epoch-based), and the ranks of one job cover the
same steps, within the hosts' clock differences (milliseconds with NTP, seconds without).
Ranks whose time spans lie more than :data:`RUN_GAP_NS` apart are from separate runs (two
captures compared side by side, such as an A100 run and a V100 run): their collectives are
not one collective, and aligning one run's clock to the other's would move it by days.
Collectives are therefore matched within a run only (:mod:`otel_ext.analysis.cross.collective_match`),
and the report lists the runs.

A folder may also hold traces that are not one job: the capture and execution traces of a
serving engine, one rank profiled several times, or unrelated single-device traces. Merging
them makes one timeline of days ("99.9 % idle") and compares work that never ran together.
:func:`separate_captures` applies these rules before any analysis:

* every PyTorch-profiler (Kineto) or XPlane file is one capture: one profiler session of one
  process;
* captures join one run when their spans overlap or lie within :data:`RUN_GAP_NS` of each
  other and their ranks are distinct; a rank seen again (the same rank profiled twice) starts
  a new run;
* a capture without a rank is rank 0 of its own run (it names no job it belongs to);
* OpenTelemetry telemetry (OTLP, Jaeger: many files of one continuous export) is grouped per
  rank and joins runs by the same time rule;
* ``one_run`` (``--one-run``) puts every capture in one run.

Ranks are unique across the table afterwards: a rank number taken by an earlier run is given
the next free number, and the report keeps the trace's own rank as ``trace_rank``. Each run's
ranks are recorded in ``table.meta["rank_runs"]``, which :func:`runs_summary` reads.

>>> from otel_ext.analysis.table import Category as C
>>> day = 86_400 * 10**9
>>> rows = [dict(start_ns=s, end_ns=s + 10, rank=r, category=C.KERNEL_COMPUTE, source=f)
...         for f, r, s in (("a", 0, 0), ("b", 0, day), ("c", -1, 5))]
>>> t, caps = separate_captures(EventTable.from_rows(rows), formats={})
>>> [(c["source"], c["run"], c["trace_rank"], c["rank"]) for c in caps]
[('a', 0, 0, 0), ('c', 1, None, 1), ('b', 2, 0, 2)]
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from otel_ext._arrays import distinct, distinct_rows
from otel_ext.analysis.table import EventTable, is_constant

__all__ = [
    "RUN_GAP_NS",
    "Capture",
    "RunRecord",
    "hosts_from_file_names",
    "rank_runs",
    "runs_summary",
    "separate_captures",
]

#: ranks further apart in time than this are separate runs (10 minutes)
RUN_GAP_NS = 600 * 10**9

#: ``tensorboard_trace_handler``'s default file name: ``{hostname}_{pid}.{ms}.pt.trace.json``
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")

_KINETO = "kineto"
#: formats whose every file is one profiler capture (one session of one process)
_CAPTURE_FORMATS = frozenset({_KINETO, "xplane", "rocprofv3"})


class RunRecord(TypedDict):
    """One run of the report's ``runs`` section."""

    run: int
    #: ascending
    ranks: list[int]
    start_ns: int
    end_ns: int


class Capture(TypedDict):
    """One record of the report's ``captures`` section: a profiler file, or one rank's
    OpenTelemetry telemetry."""

    #: the file ("" for OpenTelemetry telemetry, which many files hold)
    source: str
    format: str
    run: int
    #: the rank in the report (unique across runs)
    rank: int
    #: the trace's own rank, None when it had none
    trace_rank: int | None
    start_ns: int
    end_ns: int


def _rank_spans(table: EventTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each rank's time span: ranks (ascending), their first start and last end."""
    rank = table["rank"]
    empty = np.zeros(0, dtype=np.int64)
    if len(rank) == 0:
        return empty, empty, empty
    if is_constant(rank):  # one file: one rank (or none)
        if rank[0] < 0:
            return empty, empty, empty
        one = np.array([int(rank[0])], dtype=np.int64)
        start, end = table["start_ns"], table["end_ns"]
        return one, np.array([start.min()], np.int64), np.array([end.max()], np.int64)
    sel = rank >= 0
    if not sel.any():
        return empty, empty, empty
    r = rank[sel].astype(np.intp)
    top = int(r.max()) + 1
    direct = top <= 4 * r.size + 1024  # rank numbers index the spans directly (no sort)
    if direct:
        ranks, inv = np.arange(top, dtype=np.int64), r
    else:
        ranks, inv = np.unique(r, return_inverse=True)
    lo = np.full(ranks.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(ranks.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inv, table["start_ns"][sel])
    np.maximum.at(hi, inv, table["end_ns"][sel])
    if direct:
        present = hi != np.iinfo(np.int64).min
        return ranks[present], lo[present], hi[present]
    return ranks.astype(np.int64), lo, hi


def rank_runs(table: EventTable, gap_ns: int = RUN_GAP_NS) -> dict[int, int]:
    """Run index of each rank (0 for the earliest run): ranks whose spans overlap or lie
    within ``gap_ns`` of each other, transitively, are one run.

    >>> from otel_ext.analysis.table import Category as C
    >>> day = 86_400 * 10**9
    >>> t = EventTable.from_rows([
    ...     dict(start_ns=0, end_ns=10, rank=0, category=C.KERNEL_COMPUTE),
    ...     dict(start_ns=5, end_ns=20, rank=1, category=C.KERNEL_COMPUTE),
    ...     dict(start_ns=9 * day, end_ns=9 * day + 10, rank=3, category=C.KERNEL_COMPUTE)])
    >>> rank_runs(t)
    {0: 0, 1: 0, 3: 1}
    """
    return {r: run["run"] for run in runs_summary(table, gap_ns) for r in run["ranks"]}


def runs_summary(table: EventTable, gap_ns: int = RUN_GAP_NS) -> list[RunRecord]:
    """One record per run, earliest first: ``run``, ``ranks`` (ascending), ``start_ns``,
    ``end_ns``. Runs assigned by :func:`separate_captures` (``table.meta["rank_runs"]``) are
    kept; else ranks further apart than ``gap_ns`` are separate runs."""
    ranks, lo, hi = _rank_spans(table)
    assigned = table.meta.get("rank_runs")
    if assigned:
        return _assigned_runs(assigned, ranks, lo, hi)
    out: list[RunRecord] = []
    for i in np.argsort(lo, kind="stable").tolist():
        if not out or int(lo[i]) > out[-1]["end_ns"] + gap_ns:
            out.append({"run": len(out), "ranks": [], "start_ns": int(lo[i]), "end_ns": 0})
        run = out[-1]
        run["ranks"].append(int(ranks[i]))
        run["end_ns"] = max(run["end_ns"], int(hi[i]))
    for run in out:
        run["ranks"].sort()
    return out


def _assigned_runs(
    assigned: dict[int, int], ranks: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> list[RunRecord]:
    """The runs :func:`separate_captures` assigned (rank -> run), with their ranks' spans,
    numbered earliest first as the gap rule numbers them."""
    by_run: dict[int, RunRecord] = {}
    for r, a, b in zip(ranks.tolist(), lo.tolist(), hi.tolist()):
        k = int(assigned.get(r, -1))
        if k < 0:
            continue
        rec = by_run.setdefault(k, {"run": k, "ranks": [], "start_ns": a, "end_ns": b})
        rec["ranks"].append(r)
        rec["start_ns"], rec["end_ns"] = min(rec["start_ns"], a), max(rec["end_ns"], b)
    ordered = sorted(by_run.values(), key=lambda x: (x["start_ns"], x["run"]))
    for i, rec in enumerate(ordered):
        rec["run"] = i
        rec["ranks"].sort()
    return ordered


# -- separate captures ------------------------------------------------------------------------


@dataclass
class _Unit:
    """What joins a run as a whole: a capture (one profiler file), one rank's stream telemetry
    (its rows of every OpenTelemetry file), or a passive file (no work rows: metrics only)."""

    sources: list[int]
    ranks: list[int]
    lo: int
    hi: int
    format: str
    capture: bool
    passive: bool = False
    run: int = -1


@dataclass
class _Run:
    """A run being assembled: its ranks and span; ``closed`` when nothing else may join."""

    run: int
    ranks: set[int] = field(default_factory=set)
    lo: int = 0
    hi: int = 0
    closed: bool = False


def _source_spans(
    table: EventTable,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, list[int]]]:
    """Per source file (by string code): the codes present, every code's first start and
    last end (indexed by code), and the ranks its rows hold (ascending)."""
    src = table["source"].astype(np.int64)
    rank = table["rank"].astype(np.int64)
    codes = distinct(src)
    nc = int(codes.max()) + 1
    lo = np.full(nc, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(nc, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, src, table["start_ns"])
    np.maximum.at(hi, src, table["end_ns"])
    pairs = distinct_rows(np.stack([src, rank], axis=1))
    ranks_of: dict[int, list[int]] = {}
    for s, r in pairs.tolist():
        if r >= 0:
            ranks_of.setdefault(s, []).append(r)
    return codes, lo, hi, ranks_of


def _units(table: EventTable, formats: dict[str, str]) -> list[_Unit]:
    """The table's units (captures, each rank's stream telemetry, passive files), earliest
    first."""
    codes, lo, hi, ranks_of = _source_spans(table)
    names = table.strings["source"]
    units: list[_Unit] = []
    stream_ranks: dict[int, list[int]] = {}
    for c in codes.tolist():
        fmt = formats.get(names[c], "")
        ranks = ranks_of.get(c, [])
        if fmt in _CAPTURE_FORMATS or (not fmt and len(ranks) <= 1):
            units.append(_Unit([c], ranks, int(lo[c]), int(hi[c]), fmt or "", capture=True))
            continue
        for r in ranks:
            stream_ranks.setdefault(r, []).append(c)
        if not ranks:  # metrics only, or rows without ranks: a unit with no work rows
            units.append(_Unit([c], [], int(lo[c]), int(hi[c]), fmt, False, passive=True))
    for r, srcs in stream_ranks.items():
        units.append(
            _Unit(srcs, [r], int(min(lo[s] for s in srcs)), int(max(hi[s] for s in srcs)),
                  formats.get(names[srcs[0]], ""), capture=False)
        )  # fmt: skip
    units.sort(key=lambda u: (u.lo, u.sources[0]))
    return units


def _assign_runs(units: list[_Unit], *, one_run: bool, gap_ns: int) -> None:
    """Set each unit's ``run`` (passive units: -1): a unit joins the first open run near it in
    time that holds none of its ranks, else starts one."""
    runs: list[_Run] = []
    for u in units:
        if u.passive:
            u.run = -1
            continue
        home = None
        if one_run and runs:
            home = runs[0]
        elif u.ranks:
            for run in runs:
                near = u.lo <= run.hi + gap_ns and u.hi >= run.lo - gap_ns
                if near and not run.closed and not (set(u.ranks) & run.ranks):
                    home = run
                    break
        if home is None:
            # a capture without a rank names no job: nothing else joins its run
            home = _Run(len(runs), set(), u.lo, u.hi, closed=not u.ranks and not one_run)
            runs.append(home)
        home.ranks.update(u.ranks)
        home.lo, home.hi = min(home.lo, u.lo), max(home.hi, u.hi)
        u.run = home.run


def _unique_ranks(
    units: list[_Unit], names: Sequence[str], *, one_run: bool
) -> tuple[dict[int, int], dict[tuple[int, int], int], list[Capture]]:
    """Unique ranks: the first run keeps its numbers, later collisions get the next free one.

    Returns:
        ``(rank_runs, remap, captures)``: new rank -> run; (source, old rank) -> new rank for
        the rows renumbered; the capture records.
    """
    taken: set[int] = set()
    every = {r for u in units for r in u.ranks}
    next_free = (max(every) + 1) if every else 0
    remap: dict[tuple[int, int], int] = {}
    rank_runs: dict[int, int] = {}
    captures: list[Capture] = []
    for u in sorted(units, key=lambda u: (u.run, u.lo)):
        if u.run < 0:
            continue
        for old in u.ranks or [-1]:
            if old >= 0 and old not in taken and not (one_run and old in rank_runs):
                new = old
            elif old < 0 and 0 not in taken and 0 not in every:
                new = 0
            else:
                while next_free in taken or next_free in every:
                    next_free += 1
                new = next_free
                next_free += 1
            taken.add(new)
            rank_runs[new] = u.run
            for s in u.sources:
                if new != old:
                    remap[(s, old)] = new
            if u.capture or old >= 0:
                captures.append(
                    {"source": names[u.sources[0]] if u.capture else "", "format": u.format,
                     "run": u.run, "rank": new, "trace_rank": old if old >= 0 else None,
                     "start_ns": u.lo, "end_ns": u.hi}
                )  # fmt: skip
    return rank_runs, remap, captures


def _renumbered(table: EventTable, remap: dict[tuple[int, int], int]) -> np.ndarray:
    """The rank column with ``remap`` ((source, old rank) -> new rank) applied, in one
    sorted lookup of every row's (source, rank) key."""
    src = table["source"].astype(np.int64)
    rank = table["rank"].astype(np.int64)
    width = int(max(rank.max(), max(o for _, o in remap))) + 2
    key = src * width + (rank + 1)
    from_keys = np.array([s * width + (o + 1) for s, o in remap], dtype=np.int64)
    to_rank = np.array(list(remap.values()), dtype=np.int64)
    order = np.argsort(from_keys)
    from_keys, to_rank = from_keys[order], to_rank[order]
    pos = np.clip(np.searchsorted(from_keys, key), 0, len(from_keys) - 1)
    hit = from_keys[pos] == key
    return np.where(hit, to_rank[pos], rank).astype(table["rank"].dtype)


def separate_captures(
    table: EventTable,
    *,
    formats: dict[str, str],
    one_run: bool = False,
    gap_ns: int = RUN_GAP_NS,
) -> tuple[EventTable, list[Capture]]:
    """Runs and ranks for every capture (see the module docstring).

    Args:
        table: every loaded file's events.
        formats: file path -> loader format (``kineto``, ``otlp-json``, ...); a file not
            named is treated as a profiler capture when it holds one rank or none.
        one_run: every capture in one run.
        gap_ns: captures further apart than this are separate runs.

    Returns:
        ``(table, captures)``: the table with unique ranks and ``meta["rank_runs"]``, and one
        :class:`Capture` per capture.
    """
    if len(table) == 0:
        return table, []
    units = _units(table, formats)
    _assign_runs(units, one_run=one_run, gap_ns=gap_ns)
    rank_runs, remap, captures = _unique_ranks(units, table.strings["source"], one_run=one_run)
    meta = dict(table.meta)
    meta["rank_runs"] = rank_runs
    cols = dict(table.columns)
    if remap:
        cols["rank"] = _renumbered(table, remap)
    return EventTable(cols, table.strings, meta), captures


def hosts_from_file_names(
    table: EventTable,
    captures: Sequence[Capture],
    *,
    named_ranks: set[int] | None = None,
) -> dict[int, str]:
    """Rank -> host for profiler captures whose rows name no host but whose file name is
    ``tensorboard_trace_handler``'s default, ``HOSTNAME_PID.MS.pt.trace.json``: ranks of one
    host share its clock.

    >>> hosts_from_file_names(EventTable.empty(), [
    ...     {"source": "/x/vm_19564.1796125765109029543.pt.trace.json", "rank": 0},
    ...     {"source": "/x/rank1.json", "rank": 1}])
    {0: 'vm'}
    """
    named: dict[int, str] = {}
    if named_ranks is not None:  # the ranks whose rows name a host, counted per rank
        known = named_ranks
    elif len(table) and (table["host"] != 0).any():
        known = set(distinct(table["rank"][table["host"] != 0]).tolist())
    else:
        known = set()
    for c in captures:
        if not c.get("source") or c["rank"] in known:
            continue
        m = _HANDLER_NAME.match(os.path.basename(c["source"]))
        if m:
            named[int(c["rank"])] = m.group("host")
    return named
