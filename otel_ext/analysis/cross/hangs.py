"""Collective hangs and desyncs in a killed (or hung) job's telemetry: who never arrived.

The instrumentation's watchdog exports a collective that a member waited on longer than
``OTEL_EXT_COLLECTIVE_HANG_S`` as an ``accel.collective.pending`` span (start: when the
member issued it, end: when the watchdog fired), flushed at once, so the files of a job
killed in the hang keep it. PyTorch's Flight Recorder, dumped as JSON, gives the same facts
per rank (:mod:`otel_ext.analysis.loaders.flight_recorder` turns them into the same rows).
This module reads them from the event table, beside the completed ``accel.collective``
spans, and names, per hung collective (group, seq):

* **hang**: the members that never reached that sequence number (no record at it, and their
  last completed sequence number of the group is lower), the members that waited in it and
  for how long;
* **desync**: members that did reach it but issued a different op, or a different payload
  size for an op whose members all pass the same, at the same sequence number.

Both are ``collective-hang`` findings. A hang is a claim about the files read: a member
whose files are missing cannot be named, and the finding says how many of the group's
members it saw. Point-to-point operations (sequenced per pair) are left out.

>>> from otel_ext.analysis.table import Category, EventTable
>>> from otel_ext.semconv.spans import SPAN_ACCEL_COLLECTIVE, SPAN_ACCEL_COLLECTIVE_PENDING
>>> def row(name, rank, seq, start, end, nbytes=64, cat=Category.COLLECTIVE):
...     return dict(name=name, rank=rank, coll_seq=seq, coll_op="all_reduce", coll_group="g",
...                 coll_bytes=nbytes, coll_group_size=3, start_ns=start, end_ns=end,
...                 category=int(cat))
>>> rows = [row(SPAN_ACCEL_COLLECTIVE, r, 0, 0, 10) for r in range(3)]
>>> rows += [row(SPAN_ACCEL_COLLECTIVE_PENDING, r, 1, 20, 5_000_000_020, cat=Category.OTHER)
...          for r in (0, 1)]
>>> [(h.kind, h.group, h.seq, h.missing, h.waiting) for h in find_hangs(EventTable.from_rows(rows))]
[('hang', 'g', 1, [2], [0, 1])]
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from otel_ext.analysis.table import Category, EventTable
from otel_ext.semconv.spans import SPAN_ACCEL_COLLECTIVE_PENDING

if TYPE_CHECKING:
    from otel_ext.analysis.findings.finding import Finding

__all__ = [
    "FLIGHT_RECORDER_COMPLETED",
    "FLIGHT_RECORDER_PENDING",
    "Hang",
    "find_hangs",
    "hang_findings",
]

#: the ``name`` of a pending row made from a Flight Recorder entry (not completed)
FLIGHT_RECORDER_PENDING = "flight_recorder.pending"
#: the ``name`` of a completed Flight Recorder entry's row
FLIGHT_RECORDER_COMPLETED = "flight_recorder.completed"
_P2P = frozenset({"send", "recv"})
#: ops whose members may pass different payload sizes (uneven gathers and scatters)
_UNEVEN = frozenset({"all_to_all", "gather", "scatter", "all_gather", "reduce_scatter"})


@dataclass
class Hang:
    """One hung collective (``kind`` ``hang``) or desync (``kind`` ``desync``).

    Attributes:
        kind: ``hang`` or ``desync``.
        group: the process group.
        seq: the sequence number.
        op: the op the waiting members issued (the most common one at ``seq``).
        bytes: their payload bytes.
        missing: members that never reached ``seq`` (hang), or that issued another op or size
            (desync).
        waiting: members that waited in it.
        waited_ns: per waiting member, how long it had waited when last seen.
        last_seq: per missing member, its last completed sequence number in the group (-1:
            none seen).
        issued: per desynchronised member, the (op, bytes) it issued at ``seq``.
        group_size: members of the group, as the spans say.
        seen: members of the group the files show.
        source: where the pending records came from (``watchdog``, ``flight-recorder``).
    """

    kind: str
    group: str
    seq: int
    op: str
    bytes: int
    missing: list[int]
    waiting: list[int]
    waited_ns: dict[int, int] = field(default_factory=dict)
    last_seq: dict[int, int] = field(default_factory=dict)
    issued: dict[int, tuple[str, int]] = field(default_factory=dict)
    group_size: int = -1
    seen: list[int] = field(default_factory=list)
    source: str = "watchdog"


def _pending_and_done(table: EventTable) -> tuple[EventTable, np.ndarray] | None:
    """The rows of sequenced collectives (pending and completed) of ranked members, and
    which are pending; None when no row is pending."""
    codes = [
        table.code_of("name", n) for n in (SPAN_ACCEL_COLLECTIVE_PENDING, FLIGHT_RECORDER_PENDING)
    ]
    pending_mask = np.isin(table["name"], [c for c in codes if c >= 0])
    if not pending_mask.any():
        return None
    done_mask = (table["category"] == int(Category.COLLECTIVE)) & (table["coll_seq"] >= 0)
    fr_done = table.code_of("name", FLIGHT_RECORDER_COMPLETED)
    if fr_done >= 0:
        done_mask |= table["name"] == fr_done
    keep = (pending_mask | done_mask) & (table["rank"] >= 0) & (table["coll_seq"] >= 0)
    return table.select(keep), pending_mask[keep]


@dataclass
class _Ledger:
    """What the rows say per process group: its members, and per (group, seq) and member
    what each issued, reached, completed and waited in."""

    members: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    group_size: dict[str, int] = field(default_factory=lambda: defaultdict(lambda: -1))
    #: (group, rank) -> its last completed seq
    last: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (group, rank) -> the highest seq it issued (any record)
    reached: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (group, seq) -> rank -> the (op, bytes) it issued there (its first record)
    at: dict[tuple[str, int], dict[int, tuple[str, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    #: (group, seq) -> rank -> the longest it was seen waiting there (ns)
    waits: dict[tuple[str, int], dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    #: (group, seq) -> where its first pending record came from
    source: dict[tuple[str, int], str] = field(default_factory=dict)


def _ledger(sub: EventTable, pend: np.ndarray) -> _Ledger:
    """Read every sequenced collective row into a :class:`_Ledger` (point-to-point
    operations and rows without a group left out)."""
    ranks, seqs = sub["rank"].tolist(), sub["coll_seq"].tolist()
    ops = [str(v) for v in sub.decoded("coll_op").tolist()]
    groups = [str(v) for v in sub.decoded("coll_group").tolist()]
    nbytes, sizes = sub["coll_bytes"].tolist(), sub["coll_group_size"].tolist()
    starts, ends = sub["start_ns"].tolist(), sub["end_ns"].tolist()
    kinds = [str(v) for v in sub.decoded("name").tolist()]
    led = _Ledger()
    for i in range(len(sub)):
        op, group, rank, seq = ops[i], groups[i], int(ranks[i]), int(seqs[i])
        if op in _P2P or not group:
            continue
        led.members[group].add(rank)
        led.group_size[group] = max(led.group_size[group], int(sizes[i]))
        key = (group, rank)
        led.reached[key] = max(led.reached.get(key, -1), seq)
        led.at[(group, seq)].setdefault(rank, (op, int(nbytes[i])))
        if pend[i]:
            span_ns = int(ends[i]) - int(starts[i])
            waits = led.waits[(group, seq)]
            waits[rank] = max(waits.get(rank, 0), span_ns)
            src = "flight-recorder" if kinds[i] == FLIGHT_RECORDER_PENDING else "watchdog"
            led.source.setdefault((group, seq), src)
        else:
            led.last[key] = max(led.last.get(key, -1), seq)
    return led


def _common_issue(issued: dict[int, tuple[str, int]]) -> tuple[str, int]:
    """The (op, bytes) most members issued; ties: the smallest rank's."""
    votes: dict[tuple[str, int], list[int]] = defaultdict(list)
    for rank in sorted(issued):
        votes[issued[rank]].append(rank)
    return max(votes.items(), key=lambda kv: (len(kv[1]), -kv[1][0]))[0]


def _hang_at(group: str, seq: int, waited: dict[int, int], led: _Ledger) -> Hang | None:
    """The hang or desync at ``(group, seq)``, where members ``waited``; None when every
    member reached it with the same op and size (slow, not hung)."""
    issued = led.at[(group, seq)]
    op, size = _common_issue(issued)
    seen = sorted(led.members[group])
    odd = sorted(
        r
        for r, (o, b) in issued.items()
        if o != op or (b != size and op not in _UNEVEN and b >= 0 and size >= 0)
    )
    if odd:
        kind, missing = "desync", odd
    else:
        missing = sorted(r for r in seen if led.reached.get((group, r), -1) < seq)
        if not missing and led.group_size[group] <= len(seen):
            return None  # every member reached it: slow, not hung
        kind = "hang"
    return Hang(
        kind=kind,
        group=group,
        seq=seq,
        op=op,
        bytes=size,
        missing=missing,
        waiting=sorted(r for r in waited if r not in odd),
        waited_ns={r: w for r, w in sorted(waited.items()) if r not in odd},
        last_seq={r: led.last.get((group, r), -1) for r in missing},
        issued={r: issued[r] for r in odd},
        group_size=led.group_size[group],
        seen=seen,
        source=led.source.get((group, seq), "watchdog"),
    )


def find_hangs(table: EventTable) -> list[Hang]:
    """The hung and desynchronised collectives the table shows (see the module doc).

    Args:
        table: the event table (completed ``accel.collective`` rows, pending rows).

    Returns:
        One :class:`Hang` per (group, seq) that some member was seen waiting in and that not
        every seen member reached with the same op and size; ordered by group and seq.
    """
    if len(table) == 0:
        return []
    got = _pending_and_done(table)
    if got is None:
        return []
    led = _ledger(*got)
    found = (
        _hang_at(group, seq, waited, led) for (group, seq), waited in sorted(led.waits.items())
    )
    return [h for h in found if h is not None]


def _who(ranks: list[int], names: dict[int, tuple[str, str]]) -> str:
    parts = []
    for r in ranks:
        device = names.get(r, ("", ""))[1]
        parts.append(f"rank {r} ({device})" if device else f"rank {r}")
    return ", ".join(parts) if parts else "no rank in the files"


def hang_findings(
    table: EventTable,
    *,
    names: dict[int, tuple[str, str]] | None = None,
    run_ns: int = 0,
) -> list[Finding]:
    """``collective-hang`` findings (:class:`~otel_ext.analysis.findings.build.Finding`) of
    :func:`find_hangs`; their impact is the longest wait (a hang costs the rest of the job).

    Args:
        table: the event table.
        names: rank -> (host, device) names.
        run_ns: the run's length (for ``impact_pct``).
    """
    from otel_ext.analysis.findings.finding import Finding

    names = names or {}
    out = []
    for h in find_hangs(table):
        longest = max(h.waited_ns.values(), default=0)
        cid = f"{h.group}:{h.seq}"
        waiters = ", ".join(str(r) for r in h.waiting) or "none"
        if h.kind == "desync":
            what = "; ".join(
                f"{_who([r], names)} issued {op} of {b} B" for r, (op, b) in h.issued.items()
            )
            summary = (
                f"desync at {h.op} {cid}: {what} where ranks {waiters} issued {h.op} of "
                f"{h.bytes} B and waited up to {longest / 1e9:.1f} s"
            )
        else:
            lasts = ", ".join(f"rank {r}: {s}" for r, s in h.last_seq.items())
            unseen = h.group_size - len(h.seen) if h.group_size > 0 else 0
            tail = f"; {unseen} member(s) of the group have no files here" if unseen > 0 else ""
            summary = (
                f"{_who(h.missing, names)} never joined {h.op} {cid} ({h.bytes} B); ranks "
                f"{waiters} waited in it up to {longest / 1e9:.1f} s (last completed seq "
                f"{lasts or 'unknown'}){tail}"
            )
        evidence = {
            "hang": h.kind,
            "group": h.group,
            "seq": h.seq,
            "collective_id": cid,
            "op": h.op,
            "bytes": h.bytes,
            "missing_ranks": h.missing,
            "missing_last_seq": {str(r): s for r, s in h.last_seq.items()},
            "waiting_ranks": h.waiting,
            "waited_ns": {str(r): w for r, w in h.waited_ns.items()},
            "group_size": h.group_size,
            "ranks_seen": h.seen,
            "source": h.source,
        }
        if h.issued:
            evidence["issued"] = {str(r): {"op": o, "bytes": b} for r, (o, b) in h.issued.items()}
        target = ", ".join(f"rank {r}" for r in h.missing) or cid
        out.append(
            Finding(
                kind="collective-hang",
                target=target,
                impact_ns=longest,
                impact_pct=min(100.0, 100.0 * longest / run_ns) if run_ns > 0 else 0.0,
                summary=summary,
                evidence=evidence,
            )
        )
    return out
