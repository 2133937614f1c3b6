"""PyTorch's memory-profiler timeline exports into a compact memory timeline.

``torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True)`` and then
``prof.export_memory_timeline("x.raw.json.gz", device="cuda:0")`` (any name ending
``.raw.json.gz``, or the ``_memory_profiler.MemoryProfileTimeline.export_memory_timeline_raw``
call) writes one JSON array of raw events::

    [[time_ns, action, bytes, category], ...]

``time_ns`` is the profiler's clock in nanoseconds (-1 for memory that existed before
profiling began), ``action`` 1 pre-existing, 2 create, 3 increment version, 4 destroy,
``bytes`` signed (a destroy, or the old version of an incremented tensor, is negative),
``category`` an index into PyTorch's categories: parameter, optimizer state, input,
temporary, activation, gradient, autograd detail, unknown. The coalesced export
(``export_memory_timeline`` to ``.json``: ``[times_us, [[0, c0, ..., c7], ...]]``, the
bytes held per category after each time) is read too.

Neither says the device or its capacity: the file is the memory of one device, named by
the profiler call, not in the file. The reader gives a :class:`MemoryTimeline` (times and
bytes held by category at each change, numpy arrays) in the ``memory`` entry of an empty
event table's ``meta``: a memory timeline has no events with durations, and the analyses
read it from there (:mod:`otel_ext.analysis.rank.memory`).

Read in pieces (:mod:`otel_ext.analysis.loaders._jsonpull`): memory is the arrays, 24 bytes
an event, never the text.

>>> t = load_memory_timeline_pieces([b"[[-1, 1, 512, 0], [1000, 2, 4096, 4], [2500, 4, -4096, 4]]"],
...                                 ctx=LoadContext("m.raw.json"))
>>> m = t.meta["memory"]
>>> len(t), m.peak_bytes(), m.categories[4]
(0, 4608, 'activation')
"""

from __future__ import annotations

import array
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from otel_ext.analysis.loaders._common import MAX_ABS_NS, LoadContext
from otel_ext.analysis.loaders._jsonpull import JsonPull, PullError
from otel_ext.analysis.table import EventTable
from otel_ext.errors import InputError

__all__ = [
    "CATEGORIES",
    "MemoryBrief",
    "MemorySeries",
    "MemoryTimeline",
    "load_memory_timeline_pieces",
    "looks_like_memory_timeline",
]

#: PyTorch's memory categories, in the order of the exported index (``_CATEGORY_TO_INDEX``)
CATEGORIES = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)
_END = object()  # the end of an array (None is a JSON null)
_RAW_HEAD = re.compile(r"^\[\s*\[\s*-?\d+\s*,\s*[1-4]\s*,\s*-?\d+\s*,\s*[0-7]\s*\]")
_COALESCED_HEAD = re.compile(r"^\[\s*\[\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*)?\]\s*,\s*\[\s*\[")


def looks_like_memory_timeline(head: str) -> bool:
    """Whether a document's first characters are a memory-timeline export (raw or coalesced).

    >>> looks_like_memory_timeline("[[-1, 1, 37888, 7], [-1, 1, 512, 7]")
    True
    >>> looks_like_memory_timeline("[[0, 10, 20], [[0, 1, 2, 3, 4, 5, 6, 7, 8]")
    True
    >>> looks_like_memory_timeline('[{"traceID": "ab"}]')
    False
    """
    s = head.lstrip()
    return bool(_RAW_HEAD.match(s) or _COALESCED_HEAD.match(s))


class MemorySeries(TypedDict):
    """A memory timeline's peaks over time: window edges and each window's peak (bytes)."""

    edges_ns: list[int]
    peak_bytes: list[int]


class MemoryBrief(TypedDict):
    """A memory timeline in brief (:meth:`MemoryTimeline.summary`), as plain JSON types."""

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


@dataclass
class MemoryTimeline:
    """The bytes one device held, by category, after each change.

    Attributes:
        times_ns: the change times, increasing (pre-existing memory at the first time).
        held: bytes held per category after each time, shape ``(len(times_ns), 8)``.
        events: raw events read.
        kind: ``raw`` or ``coalesced``.
    """

    times_ns: np.ndarray
    held: np.ndarray
    events: int
    kind: str
    categories: tuple[str, ...] = CATEGORIES

    def total(self) -> np.ndarray:
        """Bytes held (all categories) after each time."""
        return self.held.sum(axis=1) if len(self.times_ns) else np.zeros(0, np.int64)

    def peak_index(self) -> int:
        """The first time of the largest total (-1 when empty)."""
        tot = self.total()
        return int(np.argmax(tot)) if len(tot) else -1

    def peak_bytes(self) -> int:
        i = self.peak_index()
        return int(self.total()[i]) if i >= 0 else 0

    def summary(self, *, bins: int = 60) -> MemoryBrief:
        """The timeline in brief, as plain JSON types: the peak (bytes, time, by category),
        each category's own largest value, and over time the largest total in each of
        ``bins`` equal windows (``series``: window edges and peaks, the bytes held as a
        window begins included).

        >>> m = MemoryTimeline(np.array([0, 10, 20]), np.array([[5] + [0] * 7, [5, 0, 0, 0, 9, 0, 0, 0],
        ...                    [5] + [0] * 7]), 3, "raw")
        >>> s = m.summary(bins=2)
        >>> s["peak_bytes"], s["peak_ns"], s["peak_by_category"]["activation"], s["series"]["peak_bytes"]
        (14, 10, 9, [5, 14])
        """
        n = len(self.times_ns)
        if n == 0:
            return {"kind": self.kind, "events": self.events, "changes": n, "peak_bytes": 0,
                    "peak_ns": None, "start_ns": None, "end_ns": None, "peak_by_category": {},
                    "max_by_category": {}, "final_bytes": 0,
                    "series": {"edges_ns": [], "peak_bytes": []}}  # fmt: skip
        tot = self.total()
        i = int(np.argmax(tot))
        t0, t1 = int(self.times_ns[0]), int(self.times_ns[-1])
        edges = (
            np.linspace(t0, t1, bins + 1).round().astype(np.int64)
            if t1 > t0
            else np.array([t0, t1])
        )
        # the window of each change; a window with none holds what the last change left
        w = np.clip(np.searchsorted(edges, self.times_ns, side="right") - 1, 0, len(edges) - 2)
        peaks = np.full(len(edges) - 1, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(peaks, w, tot)
        # what is held as each window begins: the total after the last change before it
        before = np.searchsorted(self.times_ns, edges[:-1], side="left") - 1
        entering = np.where(before >= 0, tot[np.maximum(before, 0)], 0)
        series = np.maximum(peaks, entering)
        return {
            "kind": self.kind,
            "events": self.events,
            "changes": n,
            "peak_bytes": int(tot[i]),
            "peak_ns": int(self.times_ns[i]),
            "start_ns": t0,
            "end_ns": t1,
            "peak_by_category": {
                c: int(v) for c, v in zip(self.categories, self.held[i].tolist()) if v
            },
            "max_by_category": {
                c: int(v) for c, v in zip(self.categories, self.held.max(axis=0).tolist()) if v
            },
            "final_bytes": int(tot[-1]),
            "series": {"edges_ns": edges.tolist(), "peak_bytes": series.tolist()},
        }


def _raw(rec: Any) -> tuple[int, int, int, int] | str:
    if not isinstance(rec, list) or len(rec) != 4 or any(type(x) is not int for x in rec):
        return "a raw memory event must be [time_ns, action, bytes, category] (integers)"
    t, action, nbytes, cat = rec
    if not (-1 <= t < MAX_ABS_NS):
        return f"time out of range: {t}"
    if not 1 <= action <= 4:
        return f"unknown action {action} (1 pre-existing, 2 create, 3 increment, 4 destroy)"
    if not 0 <= cat < len(CATEGORIES):
        return f"unknown category index {cat} (0..{len(CATEGORIES) - 1})"
    if not -(2**62) < nbytes < 2**62:
        return f"bytes out of range: {nbytes}"
    if (action in (1, 2) and nbytes < 0) or (action == 4 and nbytes > 0):
        return f"bytes {nbytes} has the wrong sign for action {action}"
    return t, action, nbytes, cat


def load_memory_timeline_pieces(
    pieces: Iterable[bytes], *, ctx: LoadContext, max_record: int | None = None
) -> EventTable:
    """Read a memory-timeline export given as byte pieces (see the module docstring).

    Args:
        pieces: the (gunzipped) document in pieces.
        ctx: the file's load context (``keep_going`` skips bad events).
        max_record: the largest single value read whole (default
            ``OTEL_EXT_MAX_RECORD_BYTES``).

    Returns:
        An event table with no rows whose ``meta["memory"]`` is the :class:`MemoryTimeline`
        (``meta`` also: ``format``, ``path``, ``rank`` -1).

    Raises:
        InputError: malformed or truncated JSON, or (unless ``keep_going``) a bad event,
            named ``event N`` (raw) or ``times[N]``/``sizes[N]`` (coalesced).
    """
    if max_record is None:
        from otel_ext.config import MAX_RECORD_BYTES, resolve

        max_record = resolve(MAX_RECORD_BYTES)
    r = JsonPull(pieces, max_record=max_record)
    try:
        items = r.elements()
        first = next(items, _END)  # a sentinel: a null element is an event, a bad one
        second = next(items, _END)
        third = next(items, _END) if second is not _END else _END
        if (
            third is _END
            and isinstance(first, list)
            and isinstance(second, list)
            and len(first) == len(second) > 0
            and all(type(x) is int for x in first)
            and all(isinstance(x, list) for x in second)
        ):  # [times, sizes]: two lists, as many size rows as times
            timeline = _read_coalesced(first, second, items, ctx)
        else:  # raw events (or none)
            lead = [x for x in (first, second, third) if x is not _END]
            timeline = _read_raw(itertools.chain(lead, items), ctx)
        r.end_document()
    except PullError as e:
        raise InputError(e.message, path=ctx.path, record=e.where) from None
    t = EventTable.empty()
    t.meta.update(format="memory-timeline", path=ctx.path, rank=-1, memory=timeline)
    return t


def _read_raw(items: Iterable[Any], ctx: LoadContext) -> MemoryTimeline:
    ts, bs, cs = array.array("q"), array.array("q"), array.array("b")
    n = 0
    for i, rec in enumerate(items):
        n += 1
        got = _raw(rec)
        if isinstance(got, str):
            ctx.bad(f"event {i}", got)
            continue
        ts.append(got[0])
        bs.append(got[2])
        cs.append(got[3])
    t = np.frombuffer(ts, np.int64) if len(ts) else np.zeros(0, np.int64)
    b = np.frombuffer(bs, np.int64) if len(bs) else np.zeros(0, np.int64)
    c = np.frombuffer(cs, np.int8).astype(np.int64) if len(cs) else np.zeros(0, np.int64)
    if len(t):
        real = t[t >= 0]
        t = np.where(t < 0, real.min() if len(real) else 0, t)
    order = np.argsort(t, kind="stable")
    t, b, c = t[order], b[order], c[order]
    delta = np.zeros((len(t), len(CATEGORIES)), dtype=np.int64)
    delta[np.arange(len(t)), c] = b
    held = np.cumsum(delta, axis=0)
    last = np.r_[t[1:] != t[:-1], True] if len(t) else np.zeros(0, bool)
    return MemoryTimeline(t[last], held[last], n, "raw")


def _read_coalesced(
    times: Any, sizes: list[Any], items: Iterable[Any], ctx: LoadContext
) -> MemoryTimeline:
    if not isinstance(times, list) or next(iter(items), _END) is not _END:
        raise PullError("expected [times, sizes] (the coalesced memory timeline)", "file")
    if len(times) != len(sizes):
        raise PullError(f"{len(times)} times but {len(sizes)} sizes", "file")
    ts: list[int] = []
    rows: list[list[int]] = []
    for i, (t, s) in enumerate(zip(times, sizes)):
        ok_t = type(t) is int and -1 <= t < MAX_ABS_NS // 1000
        ok_s = (
            isinstance(s, list)
            and len(s) == len(CATEGORIES) + 1
            and all(type(x) is int and -(2**62) < x < 2**62 for x in s)
        )
        if not ok_t:
            ctx.bad(f"times[{i}]", f"not a time in microseconds: {t!r:.30}")
            continue
        if not ok_s:
            ctx.bad(f"sizes[{i}]", f"expected {len(CATEGORIES) + 1} integers (bytes by category)")
            continue
        ts.append(t * 1000)
        rows.append(s[1:])
    t_arr = np.asarray(ts, dtype=np.int64)
    held = np.asarray(rows, dtype=np.int64).reshape(len(rows), len(CATEGORIES))
    if len(t_arr) > 1 and np.any(np.diff(t_arr) < 0):
        order = np.argsort(t_arr, kind="stable")
        t_arr, held = t_arr[order], held[order]
    return MemoryTimeline(t_arr, held, len(ts), "coalesced")
