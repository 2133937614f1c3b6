"""The critical path across ranks: the chain of work that set the run's length.

Holistic Trace Analysis builds a critical path inside one rank. With several ranks the path
crosses between them at collectives: a collective cannot finish before its last member
arrives, so the path into a collective comes from the last arriver. Edges considered:

* **program order**: the previous event on the same device stream (or host thread for
  runtime calls);
* **launch → kernel**: the runtime call that launched a kernel (same rank, correlation id);
* **cross-stream**: the same rank's device event that ended last before a device event
  started (stream-to-stream waits are not in traces; this is the dependency they imply);
* **cross-rank collective**: a member of a collective depends on the last member's arrival;
* **device → host synchronisation**: a blocking runtime call (``cudaDeviceSynchronize``,
  ``cudaStreamSynchronize``, ``cudaEventSynchronize``, a synchronous ``cudaMemcpy`` /
  ``hipMemcpyWithStream`` ...) returns when device work ends: the device row it waited for
  (its own copy, by correlation id, else the rank's device row that ended last before the call
  returned) releases it. The call's time before that release was waiting, off the path; the
  rest is on the path as ``sync``. Where the device is the bottleneck the path so follows the
  device work the host waited for, not the host's blocked call.

**Device-bound host waits.** A host that waits for the device without a blocking runtime call
(DeepEP's dispatch polls a counter the GPU writes; ``.item()`` loops; event queries) shows as
a gap between two runtime calls. Where the rank's device was busy for at least
``device_bound_share`` of such a gap (default 90 %), the host was not what held the work back:
the path goes to the device row that ended last before the host resumed, and only the time from
that end to the host's next call is ``host``. Below that share the gap stays host-side work.

**Graph replays.** A CUDA/HIP graph launch is one runtime call whose correlation id hundreds
of kernels share. Only the replay's first kernel on each stream depends on the launch, and
from the launch's *start* (graph kernels begin while the call is still submitting); the
others depend on the kernel before them (they were queued by the launch, not launched late).
The wait between the launch's start and its first kernel is ``queue``. The path lists the
replays it passes through (``graph_replays``: launch, kernels in the replay, kernels and time
on the path).

Runtime calls on the path are ``launch`` (kernel and graph launches), ``sync`` (blocking
calls) or ``runtime`` (other calls: event records, asynchronous copies' submission ...).

The path is found backwards from the event that ends last: at each event the predecessor
that released it latest is the one it waited for. The time between that release and the
event's start is on the path as ``idle`` (before a device event) or ``host`` (before a
launch call: host-side work the trace does not break down); a collective entered early contributes only the part after
the last arrival (the rest was waiting, off the path). The result is a list of segments
``(rank, category, start, end)``, its composition by rank and category, and the time the run
would save if the top straggler ran at the median rank's pace (its lateness, capped by the
gap to the second-last arrival, summed over the collectives it arrived last at).

**Walked per rank, stitched across ranks.** Every edge but the collective one stays inside a
rank, so the walk is cut there: :func:`peer_edges` gives the cross-rank edges (where the
match is), :func:`walk_pieces` walks each rank from every place a walk can enter it (its
start, every row another rank's walk reaches through a collective) to where it leaves it,
with the walk states shared so that walks that meet store the rest once, and :func:`stitch`
joins the pieces into the path from the global start. :func:`critical_path` is the three in
one process; on a cluster the pieces are computed where each rank's rows are.

>>> from otel_ext.analysis.cross.collective_match import match_collectives
>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=100, rank=0, stream=1, category=C.KERNEL_COMPUTE, name="a"),
...     dict(start_ns=0, end_ns=300, rank=1, stream=1, category=C.KERNEL_COMPUTE, name="b"),
...     dict(start_ns=100, end_ns=400, rank=0, stream=2, category=C.KERNEL_COMM, coll_seq=0),
...     dict(start_ns=300, end_ns=400, rank=1, stream=2, category=C.KERNEL_COMM, coll_seq=0)])
>>> cp = critical_path(t, match_collectives(t))
>>> [(s["rank"], s["category"], s["start_ns"], s["end_ns"]) for s in cp.segments]
[(1, 'compute', 0, 300), (0, 'communication', 300, 400)]
>>> dict(sorted(cp.by_rank.items()))
{0: 100, 1: 300}
"""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

import numpy as np

from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.critical_path_walk import (
    ANY_FLAG,
    PIECE_CONTINUE,
    PIECE_END,
    SEGMENT_LABELS,
    PeerEdges,
    WalkPieces,
    peer_edges,
    runtime_label,
    walk_mask,
    walk_pieces,
)
from otel_ext.analysis.table import EventTable

__all__ = [
    "SEGMENT_LABELS",
    "CriticalPath",
    "CriticalPathSection",
    "GraphReplayOnPath",
    "PathCategoryTime",
    "PathSegment",
    "PeerEdges",
    "RankTime",
    "StragglerWhatIf",
    "WalkPieces",
    "critical_path",
    "peer_edges",
    "runtime_label",
    "start_of",
    "stitch",
    "straggler_saving",
    "walk_mask",
    "walk_pieces",
]


#: larger than any step number (a bisection bound)
_END_OF_STEPS = 1 << 62


class PathSegment(TypedDict):
    """One segment of the critical path (aligned times)."""

    rank: int
    category: str  # one of SEGMENT_LABELS
    start_ns: int
    end_ns: int
    name: str  # the row's name; "" for a gap (host, queue, idle)


class StragglerWhatIf(TypedDict):
    """The time the run would save if the straggler ran at the median rank's pace."""

    rank: int
    saved_ns: int
    saved_pct: float  # of the path's length
    saved_per_step_ns: int | None  # when the number of steps is known
    sampled_fraction: NotRequired[float]  # the engine's: the share of the run traced
    saved_run_ns: NotRequired[int]  # the engine's: the whole-run estimate


class GraphReplayOnPath(TypedDict):
    """A graph replay the path passes through: its launch, and its kernels on the path."""

    rank: int
    launch: str
    launch_start_ns: int
    kernels: int  # in the replay
    kernels_on_path: int
    on_path_ns: int


class RankTime(TypedDict):
    """A rank's time on the path."""

    rank: int
    ns: int


class PathCategoryTime(TypedDict):
    """A category's time on the path."""

    category: str
    ns: int


class CriticalPathSection(TypedDict):
    """:meth:`CriticalPath.as_dict`: the document's ``critical_path`` section."""

    length_ns: int
    by_rank: list[RankTime]
    by_category: list[PathCategoryTime]
    straggler_what_if: StragglerWhatIf | None
    graph_replays: list[GraphReplayOnPath]
    segments: list[PathSegment]
    segments_total: int


@dataclass
class CriticalPath:
    """Segments of the critical path (time order) and its composition."""

    segments: list[PathSegment]
    length_ns: int
    by_rank: dict[int, int]
    by_category: dict[str, int]
    straggler: StragglerWhatIf | None
    graph_replays: list[GraphReplayOnPath] = field(default_factory=list)

    def as_dict(self, *, max_segments: int = 2000) -> CriticalPathSection:
        """The path as the document holds it: the last ``max_segments`` segments."""
        return {
            "length_ns": self.length_ns,
            "by_rank": [{"rank": r, "ns": ns} for r, ns in sorted(self.by_rank.items())],
            "by_category": [
                {"category": c, "ns": ns}
                for c, ns in sorted(self.by_category.items(), key=lambda x: -x[1])
            ],
            "straggler_what_if": self.straggler,
            "graph_replays": self.graph_replays,
            "segments": self.segments[-max_segments:],
            "segments_total": len(self.segments),
        }


def straggler_saving(match: CollectiveMatch, rank: int) -> int:
    """Time saved if ``rank`` arrived at the median pace where it arrived last (ns).

    >>> from otel_ext.analysis.cross.collective_match import match_collectives
    >>> from otel_ext.analysis.table import Category as C, EventTable
    >>> t = EventTable.from_rows([dict(start_ns=s, end_ns=500, rank=r, coll_seq=0,
    ...     category=C.KERNEL_COMM) for r, s in [(0, 100), (1, 120), (2, 400)]])
    >>> straggler_saving(match_collectives(t), 2)
    280
    """
    if match.n_instances == 0:
        return 0
    inst = match.member_instance
    start = match.member_start_ns
    order = np.lexsort((start, inst))
    counts = np.bincount(inst, minlength=match.n_instances)
    firsts = np.r_[0, np.cumsum(counts)[:-1]]
    med = (start[order[firsts + (counts - 1) // 2]] + start[order[firsts + counts // 2]]) // 2
    last = match.last_rank == rank
    gap = match.last_arrival_ns - match.second_last_arrival_ns
    lateness = match.last_arrival_ns - med
    return int(np.minimum(gap, lateness)[last].clip(0).sum())


def start_of(key: np.ndarray, end: np.ndarray) -> int:
    """Which of the ranks' starts (their keys and ends) the path starts at: the one that ends
    last; ties: the smallest key.

    >>> start_of(np.array([7, 3, 5]), np.array([10, 10, 9]))
    1
    """
    return int(np.lexsort((key, -end))[0])


def stitch(
    pieces: WalkPieces,
    match: CollectiveMatch,
    *,
    straggler_rank: int | None = None,
    steps: int | None = None,
    max_steps: int = 2_000_000,
) -> CriticalPath:
    """The :class:`CriticalPath` the walk over the whole table gives, from the pieces of every rank.

    Starts at the global start (the rank start that ends last; ties: the smallest key) and
    follows the pieces through their exits (into the entry of the peer target) and
    continuations, counting steps as one walk over the whole table would (``max_steps`` cuts the same
    segments). ``match`` is read only for the straggler what-if.
    """
    p = pieces
    if p.start_key.shape[0] == 0:
        return CriticalPath([], 0, {}, {}, None)
    runs = _runs(p, max_steps)
    segments = _segments(p, runs)
    by_rank: dict[int, int] = {}
    by_cat: dict[str, int] = {}
    for s in segments:
        d = s["end_ns"] - s["start_ns"]
        by_rank[s["rank"]] = by_rank.get(s["rank"], 0) + d
        by_cat[s["category"]] = by_cat.get(s["category"], 0) + d
    length = (segments[-1]["end_ns"] - segments[0]["start_ns"]) if segments else 0
    what_if = None
    if straggler_rank is not None:
        what_if = _what_if(match, straggler_rank, length, steps)
    return CriticalPath(segments, int(length), by_rank, by_cat, what_if, _replays(p, runs))


def _entry_steps(p: WalkPieces) -> dict[tuple[int, int], int]:
    """The step each entry state ``(target key, allow_peer)`` starts at (an entry walked in
    either state, ``ANY_FLAG``, under both)."""
    entry: dict[tuple[int, int], int] = {}
    for k, a, s in zip(p.entry_key.tolist(), p.entry_allow.tolist(), p.entry_step.tolist()):
        for flag in (0, 1) if a == ANY_FLAG else (a,):
            entry[(k, flag)] = s
    return entry


def _runs(p: WalkPieces, max_steps: int) -> list[tuple[int, int]]:
    """The steps the path walks, as runs ``(first step, end)`` in walk order: from the global
    start through the pieces' exits and continuations, at most ``max_steps``; it ends where a
    piece ends or where it comes back to a step it walked.

    Raises:
        ValueError: a piece exits to a peer target no piece enters (its rank's are missing).
    """
    g = int(p.start_step[start_of(p.start_key, p.start_end)])
    entry = _entry_steps(p)
    piece_step = p.piece_step.tolist()
    piece_next = p.piece_next.tolist()
    piece_to = p.piece_to.tolist()
    piece_allow = p.piece_allow.tolist()
    runs: list[tuple[int, int]] = []
    walked: list[tuple[int, int]] = []  # the runs sorted by first step
    left = max_steps
    while left > 0:
        w = bisect_right(walked, (g, _END_OF_STEPS)) - 1
        if w >= 0 and g < walked[w][1]:
            # the walk came back to a state it was in (a cycle of zero-length rows at one
            # instant, whose segments are empty): going round adds nothing; the path ends
            break
        k = bisect_right(piece_step, g) - 1
        stop = piece_step[k + 1]
        take = min(left, stop - g)
        runs.append((g, g + take))
        insort(walked, (g, g + take))
        left -= take
        if g + take < stop or piece_next[k] == PIECE_END:
            break
        if piece_next[k] == PIECE_CONTINUE:
            g = piece_to[k]
            continue
        got = entry.get((piece_to[k], int(piece_allow[k])))
        if got is None:
            raise ValueError(
                f"walk pieces: no piece enters at the peer target row of key {piece_to[k]} "
                "(the pieces of its rank are missing)"
            )
        g = got
    return runs


def _segments(p: WalkPieces, runs: list[tuple[int, int]]) -> list[PathSegment]:
    """The segments of the steps of ``runs``, in time order (the walk goes backwards)."""
    if not runs:
        return []
    idx = np.concatenate([np.arange(p.step_seg[a], p.step_seg[b]) for a, b in runs])[::-1]
    names = p.names
    return [
        {"rank": r, "category": SEGMENT_LABELS[c], "start_ns": s, "end_ns": e, "name": names[m]}
        for r, c, s, e, m in zip(
            p.seg_rank[idx].tolist(),
            p.seg_label[idx].tolist(),
            p.seg_start[idx].tolist(),
            p.seg_end[idx].tolist(),
            p.seg_name[idx].tolist(),
        )
    ]


def _replays(p: WalkPieces, runs: list[tuple[int, int]]) -> list[GraphReplayOnPath]:
    """The graph replays whose kernels the steps of ``runs`` visit, the most time on the path
    first."""
    replay: dict[int, list[int]] = {}  # launch index -> [kernels on path, ns on path]
    for a, b in runs:
        lo, hi = np.searchsorted(p.graph_step, [a, b])
        for lx, ns in zip(p.graph_launch[lo:hi].tolist(), p.graph_ns[lo:hi].tolist()):
            acc = replay.setdefault(lx, [0, 0])
            acc[0] += 1
            acc[1] += ns
    replays: list[GraphReplayOnPath] = [
        {
            "rank": int(p.launch_rank[lx]),
            "launch": p.names[int(p.launch_name[lx])],
            "launch_start_ns": int(p.launch_start[lx]),
            "kernels": int(p.launch_kernels[lx]),
            "kernels_on_path": k_on,
            "on_path_ns": int(ns_on),
        }
        for lx, (k_on, ns_on) in replay.items()
    ]
    replays.sort(key=lambda r: -int(r["on_path_ns"]))
    return replays


def _what_if(match: CollectiveMatch, rank: int, length: int, steps: int | None) -> StragglerWhatIf:
    """The straggler what-if of ``rank`` (:func:`straggler_saving`), against the path's
    ``length`` and per step when the number of ``steps`` is known."""
    saved = straggler_saving(match, rank)
    return {
        "rank": rank,
        "saved_ns": saved,
        "saved_pct": round(100.0 * saved / length, 4) if length else 0.0,
        "saved_per_step_ns": int(saved / steps) if steps else None,
    }


def critical_path(
    table: EventTable,
    match: CollectiveMatch,
    *,
    straggler_rank: int | None = None,
    steps: int | None = None,
    max_steps: int = 2_000_000,
    device_bound_share: float = 0.9,
) -> CriticalPath:
    """The cross-rank critical path of ``table``: :func:`walk_pieces` of all its ranks,
    :func:`stitch` ed (what a cluster does with the pieces of each rank computed where its
    rows are).

    Args:
        table: the aligned event table.
        match: its collectives matched across ranks (aligned times).
        straggler_rank: the rank to evaluate "what if it ran at the median" for.
        steps: the number of steps in the run (for a per-step saving), if known.
        max_steps: a safety cap on the walk's length.
        device_bound_share: a host gap during which the rank's device was busy for at least
            this share is a wait for the device (see the module docstring).

    Returns:
        A :class:`CriticalPath`.
    """
    keys = np.arange(len(table), dtype=np.int64)
    peers = peer_edges(table, match, keys)
    # the table holds every rank: only the pieces a walk from its start reaches are needed
    pieces = walk_pieces(
        table, keys, peers, device_bound_share=device_bound_share, entries="reachable"
    )
    return stitch(pieces, match, straggler_rank=straggler_rank, steps=steps, max_steps=max_steps)
