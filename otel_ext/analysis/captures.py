"""Separate captures told apart: which files of a folder are one run, and a rank for every trace.

A folder may hold traces that are not one job: the capture and execution traces of a serving
engine, one rank profiled several times, or unrelated single-device traces. Merging them
makes one timeline of days ("99.9 % idle") and compares work that never ran together. The
rules, applied before any analysis:

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
ranks are recorded in ``table.meta["rank_runs"]``, which :mod:`otel_ext.analysis.runs` reads.

>>> from otel_ext.analysis.table import Category as C, EventTable
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
from typing import Any

import numpy as np

from otel_ext._arrays import distinct, distinct_rows
from otel_ext.analysis.runs import RUN_GAP_NS
from otel_ext.analysis.table import EventTable

__all__ = ["hosts_from_file_names", "separate_captures"]

#: ``tensorboard_trace_handler``'s default file name: ``{hostname}_{pid}.{ms}.pt.trace.json``
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")

_KINETO = "kineto"
#: formats whose every file is one profiler capture (one session of one process)
_CAPTURE_FORMATS = frozenset({_KINETO, "xplane", "rocprofv3"})


def separate_captures(
    table: EventTable,
    *,
    formats: dict[str, str],
    one_run: bool = False,
    gap_ns: int = RUN_GAP_NS,
) -> tuple[EventTable, list[dict[str, Any]]]:
    """Runs and ranks for every capture (see the module docstring).

    Args:
        table: every loaded file's events.
        formats: file path -> loader format (``kineto``, ``otlp-json``, ...); a file not
            named is treated as a profiler capture when it holds one rank or none.
        one_run: every capture in one run.
        gap_ns: captures further apart than this are separate runs.

    Returns:
        ``(table, captures)``: the table with unique ranks and ``meta["rank_runs"]``, and one
        record per capture: ``source``, ``format``, ``run``, ``rank`` (after), ``trace_rank``
        (the trace's own, None when it had none), ``start_ns``, ``end_ns``.
    """
    n = len(table)
    if n == 0:
        return table, []
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
    names = table.strings["source"]
    units: list[dict[str, Any]] = []  # a capture (profiler file), or one rank's stream data
    stream_ranks: dict[int, list[int]] = {}
    for c in codes.tolist():
        path = names[c]
        fmt = formats.get(path, "")
        ranks = ranks_of.get(c, [])
        capture = fmt in _CAPTURE_FORMATS or (not fmt and len(ranks) <= 1)
        if capture:
            units.append(
                {"sources": [c], "ranks": ranks, "lo": int(lo[c]), "hi": int(hi[c]),
                 "format": fmt or "", "capture": True}
            )  # fmt: skip
        else:
            for r in ranks:
                stream_ranks.setdefault(r, []).append(c)
            if not ranks:  # metrics only, or rows without ranks: a unit with no work rows
                units.append(
                    {"sources": [c], "ranks": [], "lo": int(lo[c]), "hi": int(hi[c]),
                     "format": fmt, "capture": False, "passive": True}
                )  # fmt: skip
    for r, srcs in stream_ranks.items():
        units.append(
            {"sources": srcs, "ranks": [r], "lo": int(min(lo[s] for s in srcs)),
             "hi": int(max(hi[s] for s in srcs)), "format": formats.get(names[srcs[0]], ""),
             "capture": False}
        )  # fmt: skip
    units.sort(key=lambda u: (u["lo"], u["sources"][0]))
    runs: list[dict[str, Any]] = []
    for u in units:
        if u.get("passive"):
            u["run"] = -1
            continue
        home = None
        if one_run and runs:
            home = runs[0]
        elif u["ranks"]:
            for run in runs:
                near = u["lo"] <= run["hi"] + gap_ns and u["hi"] >= run["lo"] - gap_ns
                if near and not run["closed"] and not (set(u["ranks"]) & run["ranks"]):
                    home = run
                    break
        if home is None:
            # a capture without a rank names no job: nothing else joins its run
            home = {"run": len(runs), "ranks": set(), "lo": u["lo"], "hi": u["hi"],
                    "closed": not u["ranks"] and not one_run}  # fmt: skip
            runs.append(home)
        home["ranks"].update(u["ranks"])
        home["lo"], home["hi"] = min(home["lo"], u["lo"]), max(home["hi"], u["hi"])
        u["run"] = home["run"]
    # unique ranks: the first run keeps its numbers, later collisions get the next free one
    taken: set[int] = set()
    every = {r for u in units for r in u["ranks"]}
    next_free = (max(every) + 1) if every else 0
    remap: dict[tuple[int, int], int] = {}  # (source, old rank) -> new rank
    rank_runs: dict[int, int] = {}
    captures: list[dict[str, Any]] = []
    for u in sorted(units, key=lambda u: (u["run"], u["lo"])):
        if u["run"] < 0:
            continue
        olds = u["ranks"] or [-1]
        for old in olds:
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
            rank_runs[new] = u["run"]
            for s in u["sources"]:
                if new != old:
                    remap[(s, old)] = new
            if u["capture"] or old >= 0:
                captures.append(
                    {"source": names[u["sources"][0]] if u["capture"] else "",
                     "format": u["format"], "run": u["run"], "rank": new,
                     "trace_rank": old if old >= 0 else None,
                     "start_ns": u["lo"], "end_ns": u["hi"]}
                )  # fmt: skip
    meta = dict(table.meta)
    meta["rank_runs"] = rank_runs
    if not remap:
        return EventTable(dict(table.columns), table.strings, meta), captures
    width = int(max(rank.max(), max(o for _, o in remap))) + 2
    key = src * width + (rank + 1)
    from_keys = np.array([s * width + (o + 1) for s, o in remap], dtype=np.int64)
    to_rank = np.array(list(remap.values()), dtype=np.int64)
    order = np.argsort(from_keys)
    from_keys, to_rank = from_keys[order], to_rank[order]
    pos = np.clip(np.searchsorted(from_keys, key), 0, len(from_keys) - 1)
    hit = from_keys[pos] == key
    new_rank = np.where(hit, to_rank[pos], rank).astype(table["rank"].dtype)
    cols = dict(table.columns)
    cols["rank"] = new_rank
    return EventTable(cols, table.strings, meta), captures


def hosts_from_file_names(
    table: EventTable,
    captures: list[dict[str, Any]],
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
