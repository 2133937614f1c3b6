"""Test oracle: the cross-rank critical path found by brute force.

Every edge the walk may take is found from its definition (``docs/analysis.md``, "Critical
path") by scanning all the walk rows for the row at hand: no sorted orders, no search
structures, no per-rank pieces, no memoised walks. It is slow (each step scans every row) and
short, so that a disagreement with :func:`otel_ext.analysis.cross.critical_path.critical_path`
points at the library.

The walk rows are the rows of a rank (``rank >= 0``) that are device work or runtime calls;
"latest" among rows means the largest ``(time, row index)``, the library's tie rule. From the
row the walk is at, the edges are:

* **program order**: the row of the same rank, kind (device or host) and lane (stream, else
  the device for device rows; thread for calls) that starts latest before it;
* **cross-stream**: the same rank's device row that ended latest at or before it started, a
  row starting at the same instant later in row order excepted;
* **launch**: the call (same file, rank and correlation id; the first such call) that launched
  a device row; for a graph replay (one call, several device rows) only the first row of each
  stream, released at the call's start;
* **peer**: a collective member's last arriver (latest start in its instance), released at
  its start;
* **sync**: for a blocking call, the device row it launched that ended latest, else the rank's
  device row that ended latest before the call returned, if that end falls inside the call;
* **device-bound host gap**: a call whose release leaves a gap the rank's device was busy for
  at least ``device_bound_share`` of goes to the device row that ended latest before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.cross.critical_path import runtime_label
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable

_LABEL = {Category.KERNEL_COMPUTE: "compute", Category.KERNEL_COMM: "communication",
          Category.COLLECTIVE: "communication", Category.MEMCPY: "memory",
          Category.MEMSET: "memory"}  # fmt: skip


def _latest(mask: np.ndarray, time: np.ndarray) -> int:
    """The row among ``mask`` with the largest ``(time, index)``, or -1."""
    hits = np.flatnonzero(mask)
    if not hits.shape[0]:
        return -1
    return int(hits[time[hits] == time[hits].max()][-1])


def _union_inside(starts: np.ndarray, ends: np.ndarray, a: int, b: int) -> int:
    """The length of the union of ``[start, end)`` intervals inside ``[a, b)``."""
    total, reach = 0, a
    for s, e in sorted(zip(np.clip(starts, a, b).tolist(), np.clip(ends, a, b).tolist())):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


class _Rows:
    """The walk rows as columns, and each edge of one row found by a scan over all of them."""

    def __init__(self, table: EventTable, match: CollectiveMatch) -> None:
        cat = table["category"]
        dev = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
        self.table_row = np.flatnonzero((table["rank"] >= 0) & (dev | (cat == Category.RUNTIME)))
        t = self.table_row
        self.start, self.end = table["start_ns"][t], table["end_ns"][t]
        self.rank, self.cat, self.dev = table["rank"][t], cat[t], dev[t]
        self.names = [table.strings["name"][int(c)] for c in table["name"][t]]
        stream, device = table["stream"][t], table["device"][t].astype(np.int64)
        self.stream = stream
        self.lane = np.where(self.dev, np.where(stream >= 0, stream, -2 - device), table["tid"][t])
        corr = table["correlation"][t]
        self.corr = np.where((corr >= 0) & (corr < (1 << 40)), corr, -1)
        self.source = table["source"][t]
        self.index = np.arange(len(t))
        self.peer_of = self._peers(match)

    def __len__(self) -> int:
        return len(self.table_row)

    def _peers(self, match: CollectiveMatch) -> dict[int, int]:
        """Walk row → the walk row of its collective's last arriver (not itself)."""
        pos = {int(r): p for p, r in enumerate(self.table_row)}
        out: dict[int, int] = {}
        for row, member in zip(match.row_index.tolist(), match.row_member.tolist()):
            inst = match.member_instance == match.member_instance[member]
            last = _latest(inst, match.member_start_ns)
            target = pos.get(int(match.member_row[last]), -1)
            if row in pos:
                out[pos[row]] = target if target != pos[row] else -1
        return out

    def before(self, p: int, time: np.ndarray, t: int) -> np.ndarray:
        """Device rows of row ``p``'s rank whose ``time`` is at or before ``t``."""
        return self.dev & (self.rank == self.rank[p]) & (time <= t)

    def lane_prev(self, p: int) -> int:
        same = (self.rank == self.rank[p]) & (self.dev == self.dev[p]) & (self.lane == self.lane[p])
        earlier = (self.start < self.start[p]) | ((self.start == self.start[p]) & (self.index < p))
        return _latest(same & earlier, self.start)

    def device_prev(self, p: int) -> int:
        if not self.dev[p]:
            return -1
        later_twin = (self.start == self.start[p]) & (self.index >= p)
        return _latest(self.before(p, self.end, int(self.start[p])) & ~later_twin, self.end)

    def same_call(self, p: int) -> np.ndarray:
        """Rows of row ``p``'s file, rank and correlation id."""
        return (
            (self.source == self.source[p])
            & (self.rank == self.rank[p])
            & (self.corr == self.corr[p])
        )

    def launched_by(self, p: int) -> tuple[int, np.ndarray]:
        """The call that launched device row ``p`` (-1) and every row that call launched."""
        if not self.dev[p] or self.corr[p] < 0:
            return -1, np.zeros(0, dtype=np.int64)
        same = self.same_call(p)
        calls = np.flatnonzero(same & (self.cat == Category.RUNTIME))
        if not calls.shape[0]:
            return -1, np.zeros(0, dtype=np.int64)
        return int(calls[0]), np.flatnonzero(same & self.dev)

    def launch(self, p: int) -> tuple[int, bool]:
        """The launch edge of row ``p`` (-1 for a replay's later rows) and whether ``p`` is a
        graph replay's row."""
        call, launched = self.launched_by(p)
        if call < 0 or launched.shape[0] == 1:
            return call, False
        mine = launched[self.stream[launched] == self.stream[p]]
        first = mine[np.lexsort((mine, self.start[mine]))][0]
        return (call if first == p else -1), True

    def sync(self, p: int) -> int:
        if self.cat[p] != Category.RUNTIME or runtime_label(self.names[p]) != "sync":
            return -1
        mine = np.flatnonzero(self.same_call(p) & self.dev)
        own = np.array([q for q in mine if self.launch(int(q))[0] == p])
        if own.shape[0]:
            q = int(own[self.end[own] == self.end[own].max()][-1])
        else:
            q = _latest(self.before(p, self.end, int(self.end[p])), self.end)
        return q if q >= 0 and self.start[p] < self.end[q] <= self.end[p] else -1

    def busy_inside(self, p: int, a: int, b: int) -> int:
        mine = self.dev & (self.rank == self.rank[p])
        return _union_inside(self.start[mine], self.end[mine], a, b) if b > a else 0


def critical_path_by_brute_force(
    table: EventTable,
    match: CollectiveMatch,
    *,
    straggler_rank: int | None = None,
    steps: int | None = None,
    max_steps: int = 2_000_000,
    device_bound_share: float = 0.9,
) -> dict[str, Any]:
    """The critical path of ``table`` as ``CriticalPath.as_dict`` gives it (every segment)."""
    w = _Rows(table, match)
    if not len(w):
        return _as_dict([], [], None)
    names, start, end = w.names, w.start.tolist(), w.end.tolist()
    i = int(np.flatnonzero(w.end == w.end.max())[0])  # the start: ties the first row
    seg_end, allow_peer, walked, seen = end[i], True, 0, set()
    segments: list[dict[str, Any]] = []
    replays: dict[int, list[int]] = {}
    while walked < max_steps and (i, seg_end, allow_peer) not in seen:
        walked += 1
        seen.add((i, seg_end, allow_peer))
        launch, is_graph = w.launch(i)
        edges = [(w.lane_prev(i), "stream"), (launch, "launch"), (w.device_prev(i), "device"),
                 (w.peer_of.get(i, -1) if allow_peer else -1, "peer"), (w.sync(i), "sync")]  # fmt: skip
        best, release, via = -1, -(1 << 62), ""
        for cand, kind in edges:  # the first of equal releases in this order wins
            rel = start[cand] if kind == "peer" or (kind == "launch" and is_graph) else end[cand]
            if cand >= 0 and release < rel <= seg_end:
                best, release, via = cand, rel, kind
        s_i = min(start[i], seg_end)
        is_call = w.cat[i] == Category.RUNTIME
        d = _latest(w.before(i, w.end, s_i), w.end) if is_call and release < s_i else -1
        share = device_bound_share * (s_i - release)
        if d >= 0 and end[d] > release and w.busy_inside(i, release, s_i) >= share:
            best, release, via = d, end[d], "device"
        label = runtime_label(names[i]) if is_call else _LABEL.get(w.cat[i], "other")
        call, launched = w.launched_by(i)
        if launched.shape[0] > 1:
            acc = replays.setdefault(call, [0, 0, launched.shape[0]])
            acc[0], acc[1] = acc[0] + 1, acc[1] + seg_end - s_i
        if via in ("peer", "sync") and release > s_i:  # waited: only the rest is on the path
            segments.append(_seg(w.rank[i], label, release, seg_end, names[i]))
            i, seg_end, allow_peer = best, release, via != "peer"
            continue
        segments.append(_seg(w.rank[i], label, s_i, seg_end, names[i]))
        if best < 0:
            break
        if release < s_i:
            gap = "host" if is_call else "queue" if via == "launch" and is_graph else "idle"
            segments.append(_seg(w.rank[i], gap, release, s_i, ""))
        i, seg_end, allow_peer = best, min(release, s_i), True
    segments = [s for s in reversed(segments) if s["end_ns"] > s["start_ns"]]
    what_if = None
    if straggler_rank is not None:
        saved = straggler_saving_by_brute_force(match, straggler_rank)
        length = segments[-1]["end_ns"] - segments[0]["start_ns"] if segments else 0
        what_if = {"rank": straggler_rank, "saved_ns": saved,
                   "saved_pct": round(100.0 * saved / length, 4) if length else 0.0,
                   "saved_per_step_ns": int(saved / steps) if steps else None}  # fmt: skip
    return _as_dict(segments, _replays(w, replays), what_if)


def straggler_saving_by_brute_force(match: CollectiveMatch, rank: int) -> int:
    """Σ over the collectives ``rank`` arrived last at of min(its lateness against the median
    arrival, the gap to the second-last arrival), never below 0 each."""
    saved = 0
    for k in range(match.n_instances):
        if match.last_rank[k] != rank:
            continue
        arrivals = sorted(match.member_start_ns[match.member_instance == k].tolist())
        n = len(arrivals)
        median = (arrivals[(n - 1) // 2] + arrivals[n // 2]) // 2
        gap = arrivals[-1] - (arrivals[-2] if n > 1 else arrivals[-1])
        saved += max(0, min(gap, arrivals[-1] - median))
    return saved


def _replays(w: _Rows, on_path: dict[int, list[int]]) -> list[dict[str, Any]]:
    """The graph replays the path passed through, most time on the path first."""
    out = [{"rank": int(w.rank[call]), "launch": w.names[call], "launch_start_ns": int(w.start[call]),
            "kernels": kernels, "kernels_on_path": k, "on_path_ns": int(ns)}
           for call, (k, ns, kernels) in on_path.items()]  # fmt: skip
    return sorted(out, key=lambda g: -int(g["on_path_ns"]))


def _seg(rank: Any, category: str, start: int, end: int, name: str) -> dict[str, Any]:
    return {"rank": int(rank), "category": category, "start_ns": int(start),
            "end_ns": int(end), "name": name}  # fmt: skip


def _as_dict(
    segments: list[dict[str, Any]], replays: list[dict[str, Any]], what_if: Any
) -> dict[str, Any]:
    by_rank: dict[int, int] = {}
    by_category: dict[str, int] = {}
    for s in segments:
        by_rank[s["rank"]] = by_rank.get(s["rank"], 0) + s["end_ns"] - s["start_ns"]
        by_category[s["category"]] = by_category.get(s["category"], 0) + s["end_ns"] - s["start_ns"]
    return {
        "length_ns": segments[-1]["end_ns"] - segments[0]["start_ns"] if segments else 0,
        "by_rank": [{"rank": r, "ns": ns} for r, ns in sorted(by_rank.items())],
        "by_category": [
            {"category": c, "ns": ns} for c, ns in sorted(by_category.items(), key=lambda x: -x[1])
        ],
        "straggler_what_if": what_if,
        "graph_replays": replays,
        "segments": segments,
        "segments_total": len(segments),
    }
