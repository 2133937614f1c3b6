"""One merged, clock-aligned trace-event timeline of every rank, written from an analysis.

``otel-ext analyze PATH... --format perfetto --out FILE`` (or ``--timeline FILE`` beside
another format) writes Chrome trace-event JSON (the "JSON object format") that the Perfetto
UI (ui.perfetto.dev) and ``chrome://tracing`` open. What is on it (``docs/analysis.md``,
"The merged timeline"):

* one **process track per rank**, named ``rank R · HOST · DEVICE``; its labels and its
  ``process_name`` arguments carry the clock offset applied, its bound and its status
  (``otherData.ranks`` lists the same per rank); under it one **thread track per host
  thread** and per **device stream** (``stream N``), as the profiler recorded them; where
  two events of one track overlap without nesting (a repaired end, overlapping spans) the
  later goes to an extra lane (``stream 7 #2``), so every track nests;
* every event at its **aligned** time: the rank's clock correction
  (:class:`~otel_ext.analysis.cross.alignment.RankClocks`), then the event-level causality repair
  for the rows it moved (marked ``args.repaired = true``, with ``repair_shift_ns`` and
  ``repair_end_shift_ns``: how far the repair moved the start and the end);
* **flows** joining the members of each matched collective in arrival order (category
  ``collective``) and each launch to its kernel (category ``launch``); every flow has both
  ends;
* the **critical path** as its own process (``critical path``), one thread per rank it
  crosses, each segment flagged ``args.critical_path = true``, its cross-rank edges as flows
  (category ``critical_path``);
* each **finding** as an instant event on the ``findings`` process, at its onset where the
  finding names one, else at the run's start, with its summary and evidence;
* **metric points** as counter tracks on their device's process.

Times are microseconds with three decimals (exact nanoseconds, written from integers, never
through a float) relative to ``baseTimeNanoseconds`` (the earliest aligned start), so the
file reads back through otel-ext's own Kineto loader
(:func:`~otel_ext.analysis.loaders.load_kineto_text`) with every nanosecond. The file ends
with ``otherData.generator = "otel-ext"``: ``otel-ext analyze`` on a folder holding it leaves
it out as a derived timeline.

**Memory.** The writer streams: it goes through the ranks one at a time and writes each
rank's events before the next is read; what it keeps across ranks is one entry per flow end
(the collective members', the critical path's) and per track. In process the rows it
writes wait on disk while the cross-rank passes run (:func:`park_rows`). The file is written
as ``NAME.partial`` and renamed when complete. A ``.gz`` name writes it gzipped.

>>> import json, tempfile, pathlib
>>> from otel_ext.analysis.table import Category as C, EventTable
>>> from otel_ext.analysis.engine import analyze
>>> rows = [dict(start_ns=k * 1000 + 50_000 * r, end_ns=k * 1000 + 600 + 50_000 * r, rank=r,
...              stream=7, category=C.KERNEL_COMM, coll_seq=k, coll_group="tp",
...              name="ncclKernel") for k in range(4) for r in range(2)]
>>> out = pathlib.Path(tempfile.mkdtemp()) / "t.json"
>>> doc = analyze(EventTable.from_rows(rows), timeline=TimelineFile(out))
>>> trace = json.loads(out.read_text())
>>> sorted({e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"})
[0, 1, 1000000]
>>> sum(e["ph"] == "s" and e["cat"] == "collective" for e in trace["traceEvents"])
4
>>> trace["otherData"]["generator"], doc["timeline"]["events"]
('otel-ext', 8)
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict

import numpy as np

from otel_ext.analysis.report.sections import Evidence, JsonValue
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable, is_constant
from otel_ext.errors import OtelExtError

if TYPE_CHECKING:
    from otel_ext.analysis.cross.alignment import Alignment
    from otel_ext.analysis.cross.critical_path import CriticalPath
    from otel_ext.analysis.document import RankEntry

__all__ = [
    "SCHEMA",
    "TimelineFile",
    "TimelineInputs",
    "TimelineSummary",
    "park_rows",
    "write_timeline",
]

SCHEMA = "otel-ext.timeline/1"

#: process ids of the tracks that are not a rank's
CRITICAL_PATH_PID = 1_000_000
FINDINGS_PID = 1_000_001
NO_RANK_PID = 1_000_002
_DEVICE_PID0 = 1_000_100  # metric devices that are no rank's

#: the first thread id written: thread ids are numbered from here across the whole file
#: (the trace processors read ``pid`` and ``tid`` as 32-bit numbers; a thread id equal to a
#: process id would name that process's main thread)
_TID0 = 2_000_000

#: the Kineto ``cat`` of each category (so the file reads back as the same rows)
_KINETO_CAT = {
    Category.CPU_OP: "cpu_op",
    Category.RUNTIME: "cuda_runtime",
    Category.KERNEL_COMPUTE: "kernel",
    Category.KERNEL_COMM: "kernel",
    Category.MEMCPY: "gpu_memcpy",
    Category.MEMSET: "gpu_memset",
    Category.STEP: "user_annotation",
}

#: the ``cat`` written for each category code
_CAT_TEXT = {int(c): _KINETO_CAT.get(c, "user_annotation") for c in Category}

#: finding evidence keys that name a time on the aligned timeline, in order of preference
_FINDING_TIMES = ("onset_ns", "clock_change_ns", "start_ns", "at_ns")


class TimelineSummary(TypedDict):
    """What :func:`write_timeline` wrote (the report's ``timeline`` section)."""

    path: str
    events: int
    repaired_events: int
    flows: dict[str, int]
    critical_path_segments: int
    findings: int
    counters: int
    complete: bool


@dataclass
class TimelineInputs:
    """What the writer needs from an analysis (the engine fills it; see ``analyze``).

    Attributes:
        rows: the rows written, on their own clocks (in process: every row of the analysed
            steps; on a Dask cluster: the cross-rank rows, see ``complete``).
        positions: for each row of ``alignment.table``, its position in ``rows`` (or ``-1``:
            a row that is not in ``rows``, e.g. a serving engine's request joined later).
        alignment: the clock alignment (its per-rank correction, repair, offsets and match).
        critical_path: the stitched critical path (aligned times).
        findings: the report's findings.
        ranks: the report's ``ranks`` entries (host, device, clock offset, bound, status).
        metrics: the metric points loaded, or None.
        complete: ``rows`` holds every row (host operators included).
    """

    rows: EventTable
    positions: np.ndarray
    alignment: Alignment
    critical_path: CriticalPath
    findings: Sequence[dict[str, Any]]
    ranks: Sequence[RankEntry]
    metrics: Any = None
    complete: bool = True


@dataclass
class TimelineFile:
    """Where ``analyze(..., timeline=...)`` writes the timeline, and what it wrote.

    Args:
        path: the file (``.gz``: gzipped).

    After the analysis, :attr:`summary` holds :func:`write_timeline`'s summary (also the
    report's ``timeline`` key).
    """

    path: Path | str
    summary: TimelineSummary | None = None

    def __call__(self, inputs: TimelineInputs) -> TimelineSummary:
        """Write the timeline; returns its summary as the document's ``timeline`` section."""
        self.summary = write_timeline(inputs, self.path)
        return self.summary.copy()


#: the columns the writer reads
_WRITER_COLUMNS = ("start_ns", "end_ns", "rank", "category", "stream", "tid", "name",
                   "correlation", "external_id", "coll_op", "coll_group", "coll_seq",
                   "coll_bytes")  # fmt: skip


def park_rows(table: EventTable, *, folder: str | None = None) -> EventTable:
    """``table``'s columns the writer reads, parked in a temporary folder until it runs.

    The analysis holds every row through its per-rank pass, then only the compact rows its
    cross-rank passes read; the timeline needs every row again at the end. Parked, the rows
    cost no memory in between: each column the writer reads is written to a file and mapped
    back read-only (constant columns stay constant, the others are dropped), and the writer
    reads them rank by rank. The folder (``folder``, default the system's temporary folder)
    goes when the returned table does.

    Args:
        table: every analysed row.
        folder: where the temporary folder is made.

    Returns:
        A table of the same rows with the writer's columns only, memory-mapped.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=s + 4, rank=0, category=C.KERNEL_COMPUTE)
    ...                           for s in (5, 20)])
    >>> parked = park_rows(t)
    >>> parked["end_ns"].tolist(), type(parked["start_ns"]).__name__, "flops" in parked.columns
    ([9, 24], 'memmap', False)
    """
    tmp = tempfile.TemporaryDirectory(prefix="otel-ext-timeline-", dir=folder)
    columns: dict[str, np.ndarray] = {}
    for name in _WRITER_COLUMNS:
        col = table.columns[name]
        if is_constant(col) or not len(col):
            columns[name] = col
            continue
        path = os.path.join(tmp.name, name + ".npy")
        np.save(path, np.ascontiguousarray(col), allow_pickle=False)
        columns[name] = np.load(path, mmap_mode="r")
    # the folder lives as long as the table (its finaliser removes it)
    return EventTable(columns, dict(table.strings), {"timeline_park": tmp})


def _us(ns: int) -> str:
    """Nanoseconds as microseconds with three decimals, from the integer (exact)."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}"


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_plain, allow_nan=False, separators=(",", ":"))


def _plain(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        f = float(o)
        return f if np.isfinite(f) else None
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


class _Lanes:
    """One track's lanes: an event goes to the first lane where it nests (its stack of open
    intervals, by start order, either ends before it or encloses it)."""

    __slots__ = ("stacks",)

    def __init__(self) -> None:
        self.stacks: list[list[int]] = [[]]

    def place(self, start: int, end: int) -> int:
        for lane, stack in enumerate(self.stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                return lane
        self.stacks.append([end])
        return len(self.stacks) - 1


class _Tids:
    """Thread ids, one per (process, track, lane), numbered across the file from
    :data:`_TID0`; each named (``thread_name``) and placed (``thread_sort_index``: the
    order the tracks first appear in) when first asked for."""

    def __init__(self, out: _Out) -> None:
        self.out = out
        self.ids: dict[tuple[int, Any, int], int] = {}
        self.per_pid: dict[int, int] = {}

    def of(self, pid: int, track: Any, lane: int, label: str) -> int:
        key = (pid, track, lane)
        tid = self.ids.get(key)
        if tid is None:
            tid = self.ids[key] = _TID0 + len(self.ids)
            order = self.per_pid[pid] = self.per_pid.get(pid, -1) + 1
            name = label if not lane else f"{label} #{lane + 1}"
            self.out.event(_meta("thread_name", pid, tid, {"name": name}))
            self.out.event(_meta("thread_sort_index", pid, tid, {"sort_index": order}))
        return tid


class _Out:
    """The file, written in pieces of about 256 KiB (gzipped for a ``.gz`` name) to
    ``NAME.partial``, which gets the file's name once it is complete (:meth:`close`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.partial = path.with_name(path.name + ".partial")
        try:
            raw: IO[bytes] = open(self.partial, "wb")  # noqa: SIM115 (closed in close())
        except OSError as e:
            raise OtelExtError(
                f"cannot write the timeline: {e.strerror or e}", path=str(path)
            ) from e
        self.raw = raw
        self.stream: IO[bytes] | gzip.GzipFile = raw
        if path.name.endswith(".gz"):
            self.stream = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)
        self.parts: list[str] = []
        self.size = 0
        self.first = True
        self.events = 0

    def event(self, text: str) -> None:
        if not self.first:
            self.parts.append(",\n")
        self.first = False
        self.parts.append(text)
        self.size += len(text) + 2
        self.events += 1
        if self.size > 1 << 18:
            self.flush()

    def many(self, texts: list[str]) -> None:
        """Several events at once (what :meth:`event` does for each)."""
        if not texts:
            return
        joined = ",\n".join(texts)
        self.event(joined)
        self.events += len(texts) - 1

    def text(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def flush(self) -> None:
        if self.parts:
            try:
                self.stream.write("".join(self.parts).encode("utf-8"))
            except OSError as e:
                raise OtelExtError(
                    f"cannot write the timeline: {e.strerror or e}", path=str(self.path)
                ) from e
            self.parts.clear()
            self.size = 0

    def close(self, *, complete: bool) -> None:
        """Close the file: give it its name when ``complete``, else remove it."""
        try:
            if complete:
                self.flush()
            if self.stream is not self.raw:
                self.stream.close()
            self.raw.close()
            if complete:
                os.replace(self.partial, self.path)
        except OSError as e:
            raise OtelExtError(
                f"cannot write the timeline: {e.strerror or e}", path=str(self.path)
            ) from e
        finally:
            self.partial.unlink(missing_ok=True)  # gone already once renamed


def _meta(name: str, pid: int, tid: int | None, args: dict[str, JsonValue]) -> str:
    """A metadata event (``ph: M``) with its arguments."""
    tid_part = f',"tid":{tid}' if tid is not None else ""
    return f'{{"ph":"M","name":"{name}","pid":{pid}{tid_part},"args":{_dumps(args)}}}'


def _rank_slices(rank: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(rank, its row positions in order) for each rank present, ranks ascending."""
    if not len(rank):
        return
    order = np.argsort(rank, kind="stable")
    sorted_ranks = rank[order]
    cuts = np.flatnonzero(np.r_[True, sorted_ranks[1:] != sorted_ranks[:-1], True])
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        yield int(sorted_ranks[a]), order[a:b]


def _clock_label(offset_ns: float | None, bound: float | None, status: str) -> str:
    """A rank's clock treatment as its process label: offset, bound and status."""
    off = float(offset_ns or 0.0)
    pm = f" ± {float(bound) / 1e6:.3f} ms" if bound is not None else " (unbounded)"
    return f"clock offset {off / 1e6:+.3f} ms{pm}, {status}"


class _Flows:
    """The flows written (a start and a finish event each), counted by category."""

    def __init__(self, out: _Out, base: int) -> None:
        self.out = out
        self.base = base
        self.counts: dict[str, int] = {"collective": 0, "launch": 0, "critical_path": 0}
        self.last_id = 0

    def __call__(
        self, cat: str, name: str, a: tuple[int, int, int], b: tuple[int, int, int]
    ) -> None:
        """A flow of category ``cat`` from ``a`` to ``b`` (each ``(pid, tid, start_ns)``)."""
        self.last_id += 1
        i = self.last_id
        nm = json.dumps(name)
        base = self.base
        self.out.event(f'{{"ph":"s","id":{i},"cat":"{cat}","name":{nm},"pid":{a[0]},'
                       f'"tid":{a[1]},"ts":{_us(a[2] - base)}}}')  # fmt: skip
        self.out.event(f'{{"ph":"f","bp":"e","id":{i},"cat":"{cat}","name":{nm},"pid":{b[0]},'
                       f'"tid":{b[1]},"ts":{_us(b[2] - base)}}}')  # fmt: skip
        self.counts[cat] += 1


@dataclass
class _RankRows:
    """What the rank writer reads and fills across ranks.

    Attributes:
        rows: the rows written (own clocks).
        base: the file's time origin (ns).
        clocks: the ranks' clock corrections.
        repaired: the event-level repair's (start, end) by position in ``rows``.
        wanted: the positions whose flow ends are kept (the collective members').
        ends: the kept flow ends: position -> (pid, tid, start_ns), filled as ranks are written.
        name_text: each name code's JSON text, filled as names are first written.
        flow: the flow writer.
        tids: the thread ids.
    """

    rows: EventTable
    base: int
    clocks: Any
    repaired: dict[int, tuple[int, int]]
    wanted: np.ndarray
    ends: dict[int, tuple[int, int, int]]
    name_text: dict[int, str]
    flow: _Flows
    tids: _Tids


def write_timeline(inputs: TimelineInputs, path: Path | str) -> TimelineSummary:
    """Write the merged timeline of an analysis to ``path``.

    Args:
        inputs: what the analysis kept for it (:class:`TimelineInputs`).
        path: the file (``.gz``: gzipped).

    Returns:
        A summary: ``path``, ``events`` (complete events of the ranks), ``repaired_events``,
        ``flows`` by category, ``critical_path_segments``, ``findings``, ``counters``,
        ``complete``.

    Raises:
        OtelExtError: the file cannot be written.
    """
    p = Path(path)
    rows, alignment = inputs.rows, inputs.alignment
    n = len(rows)
    pos = np.asarray(inputs.positions, dtype=np.int64)
    inside = (pos >= 0) & (pos < n)
    member_pos, wanted = _member_positions(alignment, pos, inside, n)
    base = _base_ns(rows, alignment.clocks)
    out = _Out(p)
    tids = _Tids(out)
    flow = _Flows(out, base)
    state = _RankRows(rows, base, alignment.clocks, _repaired_times(alignment, pos, inside),
                      wanted, {}, {}, flow, tids)  # fmt: skip
    rank_of_device = {str(r.get("device")): int(r["rank"]) for r in inputs.ranks if r.get("device")}
    out.text(f'{{"displayTimeUnit":"ns","baseTimeNanoseconds":{base},"traceEvents":[\n')
    complete = False
    try:
        written, n_repaired = _write_ranks(out, state, inputs.ranks)
        _write_collective_flows(alignment, member_pos, state.ends, flow)
        summary: TimelineSummary = {
            "path": str(p),
            "events": written,
            "repaired_events": n_repaired,
            "flows": flow.counts,
            "critical_path_segments": _write_critical_path(
                out, inputs.critical_path, base=base, flow=flow, tids=tids
            ),
            "findings": _write_findings(out, inputs.findings, base=base, tids=tids),
            "counters": _write_counters(
                out, inputs.metrics, rank_of_device, alignment.clocks, base=base
            ),
            "complete": inputs.complete,
        }
        out.text(f'\n],\n"otherData":{_dumps(_other_data(inputs, summary, base))}}}\n')
        complete = True
    finally:
        out.close(complete=complete)
    return summary


def _repaired_times(
    alignment: Alignment, pos: np.ndarray, inside: np.ndarray
) -> dict[int, tuple[int, int]]:
    """The event-level repair's (start, end), by position in the rows written."""
    aligned = alignment.table
    rep = np.asarray(alignment.repaired_rows, dtype=np.int64)
    rep = rep[inside[rep]] if len(rep) else rep
    return {
        int(q): (int(s), int(e))
        for q, s, e in zip(
            pos[rep].tolist(), aligned["start_ns"][rep].tolist(), aligned["end_ns"][rep].tolist()
        )
    }


def _member_positions(
    alignment: Alignment, pos: np.ndarray, inside: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The collective members' positions in the rows written (``-1``: not there), and a mask
    of the positions whose flow ends are remembered as the ranks are written."""
    match = alignment.match
    m_rows = match.member_row.astype(np.int64) if match.n_instances else np.zeros(0, np.int64)
    m_ok = inside[m_rows] if len(m_rows) else np.zeros(0, dtype=bool)
    member_pos = np.where(m_ok, pos[m_rows] if len(m_rows) else m_rows, -1)
    wanted = np.zeros(n, dtype=bool)
    wanted[member_pos[member_pos >= 0]] = True
    return member_pos, wanted


def _write_ranks(out: _Out, state: _RankRows, ranks: Sequence[RankEntry]) -> tuple[int, int]:
    """Every rank's process and events, rank by rank; returns (events, repaired events)."""
    rank_info = {int(r["rank"]): r for r in ranks}
    written = n_repaired = 0
    for rank, idx in _rank_slices(np.asarray(state.rows["rank"])):
        pid = rank if rank >= 0 else NO_RANK_PID
        _write_rank_process(out, rank, pid, rank_info.get(rank))
        w, r = _write_rank(out, state, idx, rank=rank, pid=pid)
        written += w
        n_repaired += r
    return written, n_repaired


def _write_rank_process(out: _Out, rank: int, pid: int, entry: RankEntry | None) -> None:
    """A rank's process: its name (host, device), its clock's label and its place."""
    if rank >= 0:
        label = f"rank {rank}"
        if entry is not None:
            label = " · ".join(x for x in (label, entry.get("host"), entry.get("device")) if x)
        args: dict[str, JsonValue] = {"name": label}
        if entry is not None:
            args.update(_clock_fields(entry))
        out.event(_meta("process_name", pid, None, args))
        if entry is not None:
            label = _clock_label(entry.get("clock_offset_ns"), entry.get("clock_bound_ns"),
                                 entry.get("clock_status", "none"))  # fmt: skip
            out.event(_meta("process_labels", pid, None, {"labels": label}))
    else:
        out.event(_meta("process_name", pid, None, {"name": "rows of no rank"}))
    out.event(_meta("process_sort_index", pid, None, {"sort_index": pid}))


def _rank_fields(entry: RankEntry) -> dict[str, JsonValue]:
    """What the file's ``otherData.ranks`` says of a rank (from the report's ``ranks``)."""
    return {
        "rank": entry.get("rank"),
        "host": entry.get("host"),
        "device": entry.get("device"),
        **_clock_fields(entry),
    }


def _clock_fields(entry: RankEntry) -> dict[str, JsonValue]:
    """A rank's clock treatment, as its process's arguments carry it."""
    return {
        "clock_offset_ns": entry.get("clock_offset_ns"),
        "clock_bound_ns": entry.get("clock_bound_ns"),
        "clock_status": entry.get("clock_status"),
        "clock": entry.get("clock"),
        "clock_drift_ppm": entry.get("clock_drift_ppm"),
    }


def _write_collective_flows(
    alignment: Alignment,
    member_pos: np.ndarray,
    ends: dict[int, tuple[int, int, int]],
    flow: _Flows,
) -> None:
    """Each matched collective's members written, chained by flows in arrival order."""
    match = alignment.match
    if not match.n_instances:
        return
    inst = match.member_instance
    bounds = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        members = [ends[q] for q in member_pos[a:b].tolist() if q in ends]
        members.sort(key=lambda x: x[2])
        op = match.op[int(inst[a])] or "collective"
        for x, y in itertools.pairwise(members):
            flow("collective", op, x, y)


def _other_data(
    inputs: TimelineInputs, summary: TimelineSummary, base: int
) -> dict[str, JsonValue]:
    """The file's ``otherData``: what was written, the alignment method and the ranks."""
    return {
        "schema": SCHEMA,
        "base_ns": base,
        "complete": inputs.complete,
        "events": summary["events"],
        "repaired_events": summary["repaired_events"],
        "flows": summary["flows"],
        "critical_path_segments": summary["critical_path_segments"],
        "findings": summary["findings"],
        "counters": summary["counters"],
        "alignment_method": inputs.alignment.method,
        "ranks": [_rank_fields(r) for r in inputs.ranks],
        "generator": "otel-ext",  # last: the loaders read it from the file's tail
    }


def _base_ns(rows: EventTable, clocks: Any) -> int:
    """The earliest aligned start (never below 0: Kineto's base is non-negative)."""
    lo: int | None = None
    for rank, idx in _rank_slices(np.asarray(rows["rank"])):
        s = clocks.move(rank, rows["start_ns"][idx]) if rank >= 0 else rows["start_ns"][idx]
        if len(s):
            m = int(np.min(s))
            lo = m if lo is None else min(lo, m)
    return max(0, lo or 0)


def _write_rank(
    out: _Out, state: _RankRows, idx: np.ndarray, *, rank: int, pid: int
) -> tuple[int, int]:
    """One rank's events (its tracks, in start order per track); returns (events, repaired)."""
    rows = state.rows
    start, end, shift, end_shift, moved = _rank_times(state, idx, rank)
    cat = rows["category"][idx]
    stream = rows["stream"][idx]
    on_device = np.isin(cat, np.asarray([int(c) for c in DEVICE_CATEGORIES])) | (stream >= 0)
    track = np.where(on_device, stream, rows["tid"][idx])  # a stream, or a host thread
    # per track (host threads first), in start order, the outer event first
    o = np.lexsort((-(end - start), start, track, on_device))
    ts_q, ts_r = np.divmod(start - state.base, 1000)  # the times' text: µs, three decimals
    dur_q, dur_r = np.divmod(end - start, 1000)
    columns = [
        a[o].tolist()
        for a in (start, ts_q, ts_r, dur_q, dur_r, track, on_device, rows["name"][idx], cat, stream, rows["correlation"][idx],
                  rows["external_id"][idx], rows["coll_op"][idx], rows["coll_group"][idx],
                  rows["coll_seq"][idx], rows["coll_bytes"][idx], idx, moved, shift, end_shift,
                  state.wanted[idx])
    ]  # fmt: skip
    n_moved = _write_events(out, state, columns, rank=rank, pid=pid)
    return len(idx), n_moved


def _rank_times(
    state: _RankRows, idx: np.ndarray, rank: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A rank's rows' aligned (start, end), the event-level repair applied: also how far
    the repair moved each start and end, and which rows it moved."""
    rows, clocks, repaired = state.rows, state.clocks, state.repaired
    raw_s = rows["start_ns"][idx]
    raw_e = rows["end_ns"][idx]
    start = clocks.move(rank, raw_s) if rank >= 0 else raw_s
    end = clocks.move(rank, raw_e) if rank >= 0 else raw_e
    start = np.array(start, dtype=np.int64)
    end = np.array(end, dtype=np.int64)
    shift = np.zeros(len(idx), dtype=np.int64)
    end_shift = np.zeros(len(idx), dtype=np.int64)
    moved = np.zeros(len(idx), dtype=bool)
    if repaired:
        hits = np.flatnonzero(np.isin(idx, np.fromiter(repaired, dtype=np.int64)))
        for j in hits.tolist():
            rs, re_ = repaired[int(idx[j])]
            shift[j], end_shift[j] = rs - int(start[j]), re_ - int(end[j])
            moved[j] = True
            start[j], end[j] = rs, re_
    end = np.maximum(end, start)  # no negative duration on the timeline
    return start, end, shift, end_shift, moved


def _write_events(
    out: _Out, state: _RankRows, columns: list[list[Any]], *, rank: int, pid: int
) -> int:
    """A rank's complete events from its sorted columns (each on its track's first lane
    where it nests), then its launch flows; returns how many the repair moved."""
    rows, names, name_text, tids = (
        state.rows,
        state.rows.strings["name"],
        state.name_text,
        state.tids,
    )
    op_text = [json.dumps(x) for x in rows.strings["coll_op"]]
    group_text = [json.dumps(x) for x in rows.strings["coll_group"]]
    batch: list[str] = []
    lanes: dict[tuple[bool, int], _Lanes] = {}
    launches: dict[int, tuple[int, int, int]] = {}
    kernels: list[tuple[int, tuple[int, int, int]]] = []
    n_moved = 0
    runtime = int(Category.RUNTIME)
    ends = state.ends
    for row in zip(*columns):
        s, tq, tr_, dq, dr, tr, dev, code, c, st, cj, ex, op, grp, seq, nb, q, mv, sh, esh, want = (
            row
        )
        key = (dev, tr)
        lane_set = lanes.get(key)
        if lane_set is None:
            lane_set = lanes[key] = _Lanes()
        lane = lane_set.place(s, s + dq * 1000 + dr)
        t = tids.of(pid, key, lane, f"stream {tr}" if dev else f"thread {tr}")
        nm = name_text.get(code)
        if nm is None:
            nm = name_text[code] = json.dumps(names[code] or "(unnamed)")
        args = f'"rank":{rank}'
        if dev:
            args += f',"stream":{st}'
        if cj >= 0:
            args += f',"correlation":{cj}'
        if ex >= 0:
            args += f',"External id":{ex}'
        if op > 0:
            args += f',"Collective name":{op_text[op]}'
        if grp > 0:
            args += f',"Process Group Name":{group_text[grp]}'
        if seq >= 0:
            args += f',"Seq":{seq}'
        if nb >= 0:
            args += f',"bytes":{nb}'
        if mv:
            args += f',"repaired":true,"repair_shift_ns":{sh},"repair_end_shift_ns":{esh}'
            n_moved += 1
        batch.append(
            f'{{"ph":"X","cat":"{_CAT_TEXT.get(c, "other")}","name":{nm},"pid":{pid},'
            f'"tid":{t},"ts":{tq}.{tr_:03d},"dur":{dq}.{dr:03d},"args":{{{args}}}}}'
        )
        if len(batch) >= 2048:
            out.many(batch)
            batch.clear()
        if want:
            ends[q] = (pid, t, s)
        if cj >= 0:
            if c == runtime:
                launches.setdefault(cj, (pid, t, s))
            elif dev:
                kernels.append((cj, (pid, t, s)))
    out.many(batch)
    for cj, k in kernels:
        src = launches.get(cj)
        if src is not None:
            state.flow("launch", "launch", src, k)
    return n_moved


def _write_critical_path(
    out: _Out, cp: CriticalPath, *, base: int, flow: _Flows, tids: _Tids
) -> int:
    """The critical path's process: a thread per rank, its segments, its cross-rank flows."""
    segs = list(cp.segments)
    if not segs:
        return 0
    pid = CRITICAL_PATH_PID
    out.event(_meta("process_name", pid, None, {"name": "critical path"}))
    out.event(_meta("process_labels", pid, None,
                    {"labels": f"length {cp.length_ns / 1e6:.3f} ms, {len(segs)} segments"}))  # fmt: skip
    out.event(_meta("process_sort_index", pid, None, {"sort_index": -1}))
    lanes: dict[int, _Lanes] = {}
    for rank in sorted({int(seg["rank"]) for seg in segs}):  # the threads in rank order
        lanes[rank] = _Lanes()
        tids.of(pid, rank, 0, f"rank {rank}")
    prev: tuple[int, tuple[int, int, int]] | None = None
    for seg in segs:
        rank = int(seg["rank"])
        s, e = int(seg["start_ns"]), max(int(seg["end_ns"]), int(seg["start_ns"]))
        tid = tids.of(pid, rank, lanes[rank].place(s, e), f"rank {rank}")
        name = seg.get("name") or seg["category"]
        args = {"critical_path": True, "rank": rank, "category": seg["category"]}
        out.event(
            f'{{"ph":"X","cat":"critical_path","name":{json.dumps(name)},"pid":{pid},'
            f'"tid":{tid},"ts":{_us(s - base)},"dur":{_us(e - s)},"args":{_dumps(args)}}}'
        )
        here = (pid, tid, s)
        if prev is not None and prev[0] != rank:
            flow("critical_path", "critical path", prev[1], here)
        prev = (rank, here)
    return len(segs)


def _finding_time(ev: Evidence) -> tuple[int | None, str]:
    """Where a finding goes on the timeline: the first of its evidence's times (and which),
    else nowhere in particular (the run's start)."""
    for key in _FINDING_TIMES:
        v = ev.get(key)
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            return int(v), key
    return None, "run start (the finding is about the whole run)"


def _write_findings(
    out: _Out, findings: Sequence[dict[str, Any]], *, base: int, tids: _Tids
) -> int:
    """Each finding as an instant event on the ``findings`` process."""
    if not findings:
        return 0
    pid = FINDINGS_PID
    out.event(_meta("process_name", pid, None, {"name": "findings"}))
    out.event(_meta("process_sort_index", pid, None, {"sort_index": -2}))
    tid = tids.of(pid, "findings", 0, "findings")
    for i, f in enumerate(findings):
        at, basis = _finding_time(f.get("evidence") or {})
        ts = max(at, base) if at is not None else base
        args = {
            "rank_in_report": i + 1,
            "kind": f.get("kind"),
            "target": f.get("target"),
            "summary": f.get("summary"),
            "impact_ns": f.get("impact_ns"),
            "impact_pct": f.get("impact_pct"),
            "statistic": f.get("evidence"),
            "at": basis,
        }
        name = f"{f.get('kind')}: {f.get('target')}"
        out.event(
            f'{{"ph":"i","s":"t","cat":"finding","name":{json.dumps(name)},"pid":{pid},'
            f'"tid":{tid},"ts":{_us(ts - base)},"args":{_dumps(args)}}}'
        )
    return len(findings)


def _write_counters(
    out: _Out, metrics: Any, rank_of_device: dict[str, int], clocks: Any, *, base: int
) -> int:
    """Metric points as counter events on their device's process (a rank's when the device
    is a rank's, moved by that rank's clock correction; else a process of its own)."""
    if metrics is None or not len(metrics):
        return 0
    dev_codes = metrics.codes["device"]
    dev_names = metrics.strings["device"]
    own: dict[str, int] = {}
    written = 0
    for code in np.unique(dev_codes).tolist():
        device = dev_names[int(code)] or "(no device)"
        sel = np.flatnonzero(dev_codes == code)
        times = metrics.time_ns[sel]
        rank = rank_of_device.get(device)
        if rank is not None:
            pid, times = rank, clocks.move(rank, times)
        else:
            if device not in own:
                own[device] = _DEVICE_PID0 + len(own)
                out.event(_meta("process_name", own[device], None, {"name": f"device {device}"}))
            pid = own[device]
        names = metrics.strings["name"]
        links = metrics.strings["link"]
        ncode, lcode = metrics.codes["name"][sel], metrics.codes["link"][sel]
        for t, v, nc, lc in zip(times.tolist(), metrics.values[sel].tolist(), ncode.tolist(),
                                lcode.tolist()):  # fmt: skip
            if t < base or not np.isfinite(v):
                continue  # before the first event (the file's origin) or not a number
            name = names[int(nc)] + (f" {links[int(lc)]}" if int(lc) > 0 else "")
            out.event(
                f'{{"ph":"C","name":{json.dumps(name)},"pid":{pid},"ts":{_us(int(t) - base)},'
                f'"args":{{"value":{_dumps(float(v))}}}}}'
            )
            written += 1
    return written
