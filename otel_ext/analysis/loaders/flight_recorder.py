"""PyTorch Flight Recorder dumps written as JSON: collectives in flight when a job hung.

PyTorch's Flight Recorder keeps, per rank, a ring of the last collectives each process group
issued (``entries``: ``process_group`` as ``[name, desc]``, ``collective_seq_id``,
``profiling_name`` such as ``nccl:all_reduce``, ``input_sizes``, ``input_dtypes``,
``state``: ``scheduled``, ``started`` or ``completed``, ``time_created_ns``,
``time_discovered_started_ns``, ``time_discovered_completed_ns``) and dumps it on a
watchdog timeout. The JSON form (``torch._C._distributed_c10d._dump_fr_trace_json()``, which
gloo groups answer too with ``TORCH_FR_BUFFER_SIZE`` set; or the ``fr_trace`` tools' JSON) is read here; the default
pickle form is **never** unpickled (a pickle can run code): convert it with PyTorch's own
tools first.

Each entry becomes one row for :mod:`otel_ext.analysis.cross.hangs`: a collective not completed is
a :data:`~otel_ext.analysis.cross.hangs.FLIGHT_RECORDER_PENDING` row (start: when it was created,
end: the latest time the dump shows, so its wait is a lower bound), a completed one a
:data:`FLIGHT_RECORDER_COMPLETED` row; both of category ``OTHER`` (the ring is partial and
its sequence numbers are the recorder's, so the collective analyses never see them). The
rank is the dump's ``rank`` when it has one, else the trailing number of the file name
(``nccl_trace_rank_3`` → 3), as PyTorch's own reader does. Point-to-point entries are left
out. A work counts as completed when its state says so or its entry is ``retired`` (gloo's
recorder leaves the state ``scheduled``); the default group is named ``default_pg`` as the
spans name it, other groups by their name. The recorder's sequence numbers start at 1
where the spans' start at 0: a dump is compared only with dumps.

>>> doc = {"version": "2.4", "pg_config": {}, "rank": 1, "entries": [
...     {"process_group": ["0", "default_pg"], "collective_seq_id": 6, "p2p_seq_id": 0,
...      "profiling_name": "nccl:all_reduce", "input_sizes": [[1024]],
...      "input_dtypes": ["Float"], "state": "started", "time_created_ns": 100,
...      "time_discovered_started_ns": 150, "time_discovered_completed_ns": None}]}
>>> looks_like_flight_recorder(json.dumps(doc)[:4096])
True
>>> [(r["name"], r["rank"], r["coll_op"], r["coll_seq"], r["coll_bytes"])
...  for r in flight_recorder_rows(doc, path="nccl_trace_rank_1")]
[('flight_recorder.pending', 1, 'all_reduce', 6, 4096)]
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, TypedDict

from otel_ext.analysis.cross.hangs import FLIGHT_RECORDER_COMPLETED, FLIGHT_RECORDER_PENDING
from otel_ext.analysis.loaders._common import JsonValue
from otel_ext.analysis.table import Category, EventTable
from otel_ext.errors import InputError

__all__ = [
    "FlightRecorderRow",
    "flight_recorder_rows",
    "load_flight_recorder_text",
    "looks_like_flight_recorder",
]

_RANK_IN_NAME = re.compile(r"(\d+)(?:\.json)?$")
#: element sizes of the dtype names the recorder writes (``Float``, ``BFloat16``...)
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}  # fmt: skip
_P2P = frozenset({"send", "recv", "isend", "irecv"})
#: the recorder's description of the default group, named ``default_pg`` as in spans
_DEFAULT_DESC = "default_pg"


def looks_like_flight_recorder(head: str) -> bool:
    """Whether a JSON document's first characters are a Flight Recorder dump."""
    first = head.lstrip()[:4096]
    return (
        first.startswith("{")
        and '"entries"' in first
        and ('"collective_seq_id"' in first or '"profiling_name"' in first)
    )


class FlightRecorderRow(TypedDict):
    """One collective of a dump, as an event-table row (see the module doc)."""

    name: str
    category: int
    rank: int
    coll_op: str
    coll_group: str
    coll_seq: int
    coll_bytes: int
    start_ns: int
    end_ns: int
    source: str


def _rank(doc: dict[str, JsonValue], path: str) -> int | None:
    """The dump's rank: its ``rank`` member, else the number ending its file name."""
    rank = doc.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return rank
    found = _RANK_IN_NAME.search(Path(path).name)
    return int(found.group(1)) if found else None


def _payload_bytes(entry: dict[str, JsonValue]) -> int:
    """An entry's input bytes from its sizes and dtypes (-1: not known)."""
    sizes, dtypes = entry.get("input_sizes"), entry.get("input_dtypes")
    if not isinstance(sizes, list) or not isinstance(dtypes, list) or len(dtypes) != len(sizes):
        return -1
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=True):
        size = _DTYPE_BYTES.get(str(dtype).lower())
        if size is None or not isinstance(shape, list):
            return -1
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            return -1
        total += math.prod(shape) * size
    return total


def _int(entry: dict[str, JsonValue], key: str) -> int | None:
    """An entry's integer member (None: missing or not an integer)."""
    v = entry.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def flight_recorder_rows(doc: Any, *, path: str) -> list[FlightRecorderRow]:
    """One row per collective entry of a dump (see the module doc).

    Raises:
        InputError: the document is not a dump (no ``entries`` list), its rank cannot be
            told, or an entry lacks its group, sequence number or op (naming the entry).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise InputError("a Flight Recorder dump without an 'entries' list", path=path,
                         record="file")  # fmt: skip
    rank = _rank(doc, path)
    if rank is None:
        raise InputError("a Flight Recorder dump whose rank is neither in the dump ('rank') "
                         "nor at the end of its file name", path=path, record="file")  # fmt: skip
    entries = [e for e in doc["entries"] if isinstance(e, dict)]
    times = [
        t
        for e in entries
        for k in ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")
        if (t := _int(e, k)) is not None
    ]
    latest = max(times, default=0)
    rows: list[FlightRecorderRow] = []
    for i, e in enumerate(entries):
        group, seq, name = (
            e.get("process_group"),
            _int(e, "collective_seq_id"),
            e.get("profiling_name"),
        )
        if not (isinstance(group, list) and group and isinstance(name, str) and seq is not None):
            raise InputError("an entry without process_group, collective_seq_id or "
                             "profiling_name", path=path, record=f"entries[{i}]")  # fmt: skip
        op = name.split(":", 1)[-1]
        if op in _P2P or e.get("is_p2p") is True:
            continue
        created = _int(e, "time_created_ns") or 0
        # gloo's recorder leaves state "scheduled"; a finished work's entry is retired
        done = e.get("state") == "completed" or e.get("retired") is True
        pg_name = str(group[0])
        desc = str(group[1]) if len(group) > 1 else ""
        end = _int(e, "time_discovered_completed_ns") if done else latest
        rows.append(
            {
                "name": FLIGHT_RECORDER_COMPLETED if done else FLIGHT_RECORDER_PENDING,
                "category": int(Category.OTHER),
                "rank": rank,
                "coll_op": op,
                "coll_group": desc if desc == _DEFAULT_DESC else pg_name,
                "coll_seq": seq,
                "coll_bytes": _payload_bytes(e),
                "start_ns": created,
                "end_ns": max(end or created, created),
                "source": path,
            }
        )
    return rows


def load_flight_recorder_text(text: str, *, path: str) -> EventTable:
    """The rows of one JSON dump as an event table (never unpickles).

    Raises:
        InputError: not JSON, or not a dump (see :func:`flight_recorder_rows`).
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"a Flight Recorder dump that is not valid JSON ({exc})", path=path,
                         record="file") from None  # fmt: skip
    return EventTable.from_rows(flight_recorder_rows(doc, path=path))
