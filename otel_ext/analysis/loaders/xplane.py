"""JAX/XLA (and TensorFlow) profiler XPlane protobufs (``*.xplane.pb``) to event-table rows.

An ``XSpace`` holds *planes* (a device, the host, metadata); a plane holds *lines* (a stream,
a host thread) of *events*, each naming an entry of the plane's event metadata and carrying
*stats* (typed key/value pairs whose keys name the plane's stat metadata). The message
definitions are those of the public schema (``xplane.proto`` in tensorflow/tsl), decoded here
from the wire format by :mod:`~otel_ext.analysis.loaders._protowire`, field by field:

=================  ==========================================================================
message            fields read (number: name)
=================  ==========================================================================
XSpace             1: planes, 4: hostnames
XPlane             1: id, 2: name, 3: lines, 4: event_metadata (map), 5: stat_metadata (map),
                   6: stats
XLine              1: id, 2: name, 3: timestamp_ns, 4: events, 11: display_name
XEvent             1: metadata_id, 2: offset_ps, 3: duration_ps, 4: stats,
                   5: num_occurrences (an aggregate without a time: left out)
XStat              1: metadata_id, 2: double, 3: uint64, 4: int64, 5: str, 6: bytes,
                   7: ref (a stat-metadata id whose name is the value)
XEventMetadata     1: id, 2: name, 4: display_name
XStatMetadata      1: id, 2: name
=================  ==========================================================================

What becomes what:

* ``/device:<KIND>:<N>`` planes (GPU, TPU; not ``CUSTOM``) are devices. Their stream lines hold
  the device ops; a plane with no stream line (TPU) has its ops on the ``XLA Ops`` line; the
  other derived lines (``XLA Modules``, ``Framework Ops``, ``Source code``, ...) repeat those
  ops and are left out; ``Steps`` lines are steps. A device op is a copy or a set when it
  carries ``memcpy_details`` / ``memset_details`` or its launch (same ``correlation_id``) was
  a copy or set call; communication when its ``hlo_op`` is an HLO collective
  (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
  ``collective-permute``...: the compiler's own metadata) or its name is in the conventions'
  communication-kernel table (:func:`~otel_ext.analysis.classify.classify_kernel`); else
  computation.
* ``/host:CPU`` lines are host threads (the line id is the thread id): an event with a
  ``correlation_id`` is a runtime call (its device op has the same id), an event with a
  ``step_num`` stat is a step (``name#step``), other timed events are host ops, instants
  (allocator records, thread-pool markers) are ``OTHER``.
* Times: ``line.timestamp_ns + offset_ps / 1000`` (integer nanoseconds, picoseconds floored
  once, end and start alike). The profiler stores line times relative to the profile's start;
  when the ``Task Environment`` plane gives ``profile_start_time`` and the line times are
  within the profile's length of zero, it is added, so the rows are epoch times like a
  Kineto trace's.

The whole ``XSpace`` is one message, read whole (gunzipped when gzipped) up to
``OTEL_EXT_MAX_RECORD_BYTES``, and walked in place (no copy per plane, line or event); rows
go to compact column buffers. A malformed plane, line or event is named (``plane 2
(/device:GPU:0) line 16 event 5``); with ``keep_going`` it costs that record only.

>>> from otel_ext.analysis.loaders._common import LoadContext
>>> t = load_xplane_bytes(_example_space(), ctx=LoadContext("x.xplane.pb"))
>>> [(t.string("name", i), int(t["category"][i]), int(t["start_ns"][i])) for i in range(len(t))]
[('hipLaunchKernel', 2, 1000), ('gemm_kernel', 3, 2500)]
>>> int(t["correlation"][0]) == int(t["correlation"][1]) == 7
True
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypedDict

from otel_ext.analysis.classify import classify_kernel
from otel_ext.analysis.loaders._common import MAX_ABS_NS, ColumnBuilder, LoadContext
from otel_ext.analysis.loaders._protowire import (
    FIXED64,
    LENGTH,
    VARINT,
    WireError,
    iter_fields,
    signed64,
    unpack_double,
)
from otel_ext.analysis.table import Category, EventTable

__all__ = ["load_xplane_bytes", "looks_like_xspace"]

_NUMERIC = ["start_ns", "end_ns", "category", "stream", "tid", "correlation"]
_STRINGS = ["name", "device", "host", "source", "coll_op"]

#: an XSpace's first bytes: field 1 (a plane), its length, an optional plane id, then the
#: plane's name (field 2), which starts like every plane name the profilers write
_XSPACE_HEAD = re.compile(
    rb"\A\n[\x80-\xff]{0,30}[\x00-\x7f](?:\x08[\x80-\xff]{0,30}[\x00-\x7f])?"
    rb"\x12[\x80-\xff]{0,30}[\x00-\x7f](?:/host:|/device:|Task Environment)"
)
_DEVICE_PLANE = re.compile(r"^/device:(?!CUSTOM)[A-Z_]+:\d+$")
_HOST_PLANE = "/host:CPU"
#: lines of a device plane that the profiler derives from its streams (left out)
_DERIVED_LINES = frozenset(
    {"XLA Modules", "XLA Ops", "XLA TraceMe", "Framework Ops", "Framework Name Scope",
     "Source code", "Launch Stats", "Async XLA Ops", "SparseCore Ops", "SparseCore Modules"}
)  # fmt: skip
_STEP_LINES = frozenset({"Steps"})
#: HLO opcodes of the collectives (XLA's own name for the op a kernel runs), and the
#: operation each is in the collectives' normalised names
_HLO_COLLECTIVE = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute"
    r"|collective-broadcast)(?:-start|-done)?(?:[.\-]\d+)*$"
)
_HLO_OP = {
    "all-reduce": "allreduce", "all-gather": "allgather", "reduce-scatter": "reducescatter",
    "all-to-all": "alltoall", "ragged-all-to-all": "alltoall",
    "collective-permute": "sendrecv", "collective-broadcast": "broadcast",
}  # fmt: skip


def looks_like_xspace(head: bytes | str) -> bool:
    """Whether a file's first bytes are an XSpace's (see :data:`_XSPACE_HEAD`).

    A ``str`` head (the first bytes decoded as UTF-8 with replacement characters) is encoded
    back: a replacement character stands for the varint bytes it replaced.

    >>> looks_like_xspace(b"\\n\\x9c\\x01\\x12\\x0e/host:metadata")
    True
    >>> looks_like_xspace(b'{"traceEvents": []}'), looks_like_xspace("\\n\\ufffd\\x01\\x12\\x0e/device:GPU:0")
    (False, True)
    """
    if isinstance(head, str):
        head = head[:256].encode("utf-8", errors="surrogatepass")
    return _XSPACE_HEAD.match(head[:256]) is not None


#: an XStat's value: a number or a text (opaque bytes are not kept)
StatValue: TypeAlias = int | float | str | None


class PlaneSummary(TypedDict):
    """One of the table's ``meta["planes"]``: a plane, its lines and the rows it gave."""

    plane: str
    lines: int
    rows: int


@dataclass
class _Plane:
    index: int
    name: str = ""
    lines: list[tuple[int, int]] = field(default_factory=list)
    event_names: dict[int, str] = field(default_factory=dict)
    stat_names: dict[int, str] = field(default_factory=dict)
    stats: dict[str, StatValue] = field(default_factory=dict)

    @property
    def record(self) -> str:
        return f"plane {self.index} ({self.name[:60]})"


def _text(buf: memoryview, span: tuple[int, int]) -> str:
    return bytes(buf[span[0] : span[1]]).decode("utf-8", errors="replace")


def _expect(wire: int, want: int, what: str, offset: int) -> None:
    if wire != want:
        raise WireError(f"{what} has wire type {wire}, not {want}", offset)


def _map_entry(buf: memoryview, span: tuple[int, int]) -> tuple[int, tuple[int, int] | None]:
    """A ``map<int64, Message>`` entry: its key and its value's span."""
    key = 0
    value: tuple[int, int] | None = None
    for f, w, v in iter_fields(buf, *span):
        if f == 1 and w == VARINT:
            key = signed64(v)  # type: ignore[arg-type]
        elif f == 2 and w == LENGTH:
            value = v  # type: ignore[assignment]
    return key, value


def _read_plane(buf: memoryview, span: tuple[int, int], index: int) -> _Plane:
    plane = _Plane(index)
    stat_spans: list[tuple[int, int]] = []
    for f, w, v in iter_fields(buf, *span):
        if f == 2:
            _expect(w, LENGTH, "plane name", span[0])
            plane.name = _text(buf, v)  # type: ignore[arg-type]
        elif f == 3:
            _expect(w, LENGTH, "plane line", span[0])
            plane.lines.append(v)  # type: ignore[arg-type]
        elif f in (4, 5):
            _expect(w, LENGTH, "plane metadata entry", span[0])
            key, value = _map_entry(buf, v)  # type: ignore[arg-type]
            if value is None:
                continue
            for mf, mw, mv in iter_fields(buf, *value):
                if mf == 2 and mw == LENGTH:
                    (plane.event_names if f == 4 else plane.stat_names)[key] = _text(buf, mv)  # type: ignore[arg-type]
                elif mf == 4 and mw == LENGTH and f == 4:
                    shown = _text(buf, mv)  # type: ignore[arg-type]
                    if shown and not plane.event_names.get(key):
                        plane.event_names[key] = shown
        elif f == 6:
            _expect(w, LENGTH, "plane stat", span[0])
            stat_spans.append(v)  # type: ignore[arg-type]
    for s in stat_spans:
        stat_name, stat_value = _read_stat(buf, s, plane.stat_names)
        if stat_name:
            plane.stats[stat_name] = stat_value
    return plane


def _read_stat(
    buf: memoryview, span: tuple[int, int], names: dict[int, str]
) -> tuple[str, StatValue]:
    """An XStat's name (from the stat metadata) and value."""
    mid = 0
    value: StatValue = None
    for f, w, v in iter_fields(buf, *span):
        if f == 1 and w == VARINT:
            mid = signed64(v)  # type: ignore[arg-type]
        elif f == 2 and w == FIXED64:
            value = unpack_double(v)  # type: ignore[arg-type]
        elif f == 3 and w == VARINT:
            value = v  # type: ignore[assignment]
        elif f == 4 and w == VARINT:
            value = signed64(v)  # type: ignore[arg-type]
        elif f == 5 and w == LENGTH:
            value = _text(buf, v)  # type: ignore[arg-type]
        elif f == 6 and w == LENGTH:
            value = None  # opaque bytes (serialised protos): not kept
        elif f == 7 and w == VARINT:
            value = names.get(signed64(v), "")  # type: ignore[arg-type]
        elif f in (2, 3, 4, 5, 6, 7):
            raise WireError(f"stat value field {f} has wire type {w}", span[0])
    return names.get(mid, ""), value


@dataclass
class _Event:
    name: str
    start_ns: int
    end_ns: int
    stats: dict[str, StatValue]


def _line_events(
    buf: memoryview, span: tuple[int, int], plane: _Plane, ctx: LoadContext, record: str
) -> tuple[int, str, Iterator[tuple[int, _Event | None]]]:
    """A line's id and name, and its events (an event that is bad comes as None, reported)."""
    lid, name, display, ts = 0, "", "", 0
    events: list[tuple[int, int]] = []
    for f, w, v in iter_fields(buf, *span):
        if f == 1 and w == VARINT:
            lid = signed64(v)  # type: ignore[arg-type]
        elif f == 2 and w == LENGTH:
            name = _text(buf, v)  # type: ignore[arg-type]
        elif f == 11 and w == LENGTH:
            display = _text(buf, v)  # type: ignore[arg-type]
        elif f == 3 and w == VARINT:
            ts = signed64(v)  # type: ignore[arg-type]
        elif f == 4 and w == LENGTH:
            events.append(v)  # type: ignore[arg-type]
        elif f in (1, 2, 3, 4, 11):
            raise WireError(f"line field {f} has wire type {w}", span[0])

    def gen() -> Iterator[tuple[int, _Event | None]]:
        for k, ev in enumerate(events):
            try:
                yield k, _read_event(buf, ev, plane, ts)
            except (WireError, ValueError) as e:
                ctx.bad(f"{record} event {k}", f"malformed event: {e}")
                yield k, None

    return lid, name or display, gen()


def _read_event(buf: memoryview, span: tuple[int, int], plane: _Plane, ts_ns: int) -> _Event | None:
    mid, off, dur, occurrences = 0, 0, 0, False
    stat_spans: list[tuple[int, int]] = []
    for f, w, v in iter_fields(buf, *span):
        if f == 1 and w == VARINT:
            mid = signed64(v)  # type: ignore[arg-type]
        elif f == 2 and w == VARINT:
            off = signed64(v)  # type: ignore[arg-type]
        elif f == 3 and w == VARINT:
            dur = signed64(v)  # type: ignore[arg-type]
        elif f == 4 and w == LENGTH:
            stat_spans.append(v)  # type: ignore[arg-type]
        elif f == 5 and w == VARINT:
            occurrences = True
        elif f in (1, 2, 3, 4, 5):
            raise WireError(f"event field {f} has wire type {w}", span[0])
    if occurrences:
        return None  # an aggregate count, not a timed event
    if dur < 0:
        raise ValueError(f"negative duration {dur} ps")
    start_ps = ts_ns * 1000 + off
    start, end = start_ps // 1000, (start_ps + dur) // 1000
    if not (-MAX_ABS_NS < start < MAX_ABS_NS and -MAX_ABS_NS < end < MAX_ABS_NS):
        raise ValueError(f"time out of range: line {ts_ns} ns + {off} ps")
    stats: dict[str, StatValue] = {}
    for s in stat_spans:
        k, stat_value = _read_stat(buf, s, plane.stat_names)
        if k:
            stats[k] = stat_value
    return _Event(plane.event_names.get(mid, ""), start, end, stats)


def _profile_base(planes: list[_Plane], line_times: list[int]) -> int:
    """The epoch time to add to line times (0 when they already look absolute)."""
    for p in planes:
        start = p.stats.get("profile_start_time")
        stop = p.stats.get("profile_stop_time")
        if isinstance(start, int) and start > 0:
            length = stop - start if isinstance(stop, int) and stop > start else 0
            # relative times lie within the profile (plus a margin: a line may start before)
            limit = max(length, 0) + 3600 * 10**9
            if line_times and max(abs(t) for t in line_times) <= limit:
                return start
    return 0


def _int(v: Any) -> int | None:
    return v if type(v) is int and -(2**63) <= v < 2**63 else None


def load_xplane_bytes(data: bytes | bytearray | memoryview, *, ctx: LoadContext) -> EventTable:
    """The events of one serialised ``XSpace`` (see the module docstring).

    Args:
        data: the XSpace's bytes (already gunzipped).
        ctx: where bad records go (raised, or listed with ``keep_going``).

    Returns:
        The table, with ``meta`` holding ``format`` (``xplane``), ``path``, ``rank`` (-1: the
        XSpace names none), ``host``, ``devices`` (device plane names and their stats) and
        ``planes`` (every plane's name, lines and rows).

    Raises:
        InputError: a malformed XSpace, plane, line or event (unless ``keep_going``).
    """
    buf = memoryview(data)
    plane_spans: list[tuple[int, int]] = []
    hostnames: list[str] = []
    try:
        for f, w, v in iter_fields(buf):
            if f == 1:
                _expect(w, LENGTH, "XSpace plane", 0)
                plane_spans.append(v)  # type: ignore[arg-type]
            elif f == 4 and w == LENGTH:
                hostnames.append(_text(buf, v))  # type: ignore[arg-type]
    except WireError as e:
        ctx.bad(f"plane {len(plane_spans)}", f"malformed XSpace: {e}")
    planes: list[_Plane] = []
    for k, span in enumerate(plane_spans):
        try:
            planes.append(_read_plane(buf, span, k))
        except WireError as e:
            ctx.bad(f"plane {k}", f"malformed plane: {e}")
    if not plane_spans:
        ctx.bad("file", "an XSpace with no planes")
    b = ColumnBuilder(_NUMERIC, _STRINGS)
    host = hostnames[0] if hostnames else ""
    source = ctx.path
    line_times: list[int] = []
    for p in planes:
        for span in p.lines:
            try:
                for f, w, v in iter_fields(buf, *span):
                    if f == 3 and w == VARINT:
                        line_times.append(signed64(v))  # type: ignore[arg-type]
            except WireError:
                pass  # reported when the line is read
    base = _profile_base(planes, line_times)
    # host planes first: a device op's launch (same correlation id) tells a copy from a kernel
    order = sorted(planes, key=lambda p: p.name != _HOST_PLANE)
    launch_kind: dict[int, Category] = {}
    summary: list[PlaneSummary] = []
    devices: list[dict[str, StatValue]] = []
    for p in order:
        is_device = _DEVICE_PLANE.match(p.name) is not None
        is_host = p.name == _HOST_PLANE
        if is_device:
            devices.append({"name": p.name, **{k: v for k, v in p.stats.items() if _scalar(v)}})
        info: PlaneSummary = {"plane": p.name, "lines": len(p.lines), "rows": 0}
        summary.append(info)
        if not (is_device or is_host):
            continue
        line_names = _line_names(buf, p)
        has_streams = any(n and n not in _DERIVED_LINES | _STEP_LINES for n in line_names)
        before = len(b)
        for li, span in enumerate(p.lines):
            record = f"{p.record} line {li}"
            try:
                lid, lname, events = _line_events(buf, span, p, ctx, record)
                if is_device:
                    if lname in _STEP_LINES:
                        kind = "steps"
                    elif lname in _DERIVED_LINES:
                        if has_streams or lname != "XLA Ops":
                            continue
                        kind = "ops"
                    else:
                        kind = "ops"
                    for _k, ev in events:
                        if ev is not None:
                            _device_row(b, ev, kind, p.name, lid, base, host, source, launch_kind)
                else:
                    for _k, ev in events:
                        if ev is not None:
                            _host_row(b, ev, lid, base, host, source, launch_kind)
            except WireError as e:
                ctx.bad(record, f"malformed line: {e}")
        info["rows"] = len(b) - before
    t = b.build(
        {"format": "xplane", "path": ctx.path, "rank": -1, "host": host, "devices": devices,
         "planes": summary, "base_ns": base}
    )  # fmt: skip
    return t


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str))


def _line_names(buf: memoryview, p: _Plane) -> list[str]:
    out = []
    for span in p.lines:
        name = ""
        try:
            for f, w, v in iter_fields(buf, *span):
                if f in (2, 11) and w == LENGTH and not name:
                    name = _text(buf, v)  # type: ignore[arg-type]
        except WireError:
            pass  # reported when the line is read
        out.append(name)
    return out


def _copy_kind(text: str) -> Category | None:
    low = text.lower()
    if "memcpy" in low:
        return Category.MEMCPY
    if "memset" in low:
        return Category.MEMSET
    return None


def _host_row(
    b: ColumnBuilder, ev: _Event, lid: int, base: int, host: str, source: str,
    launch_kind: dict[int, Category],
) -> None:  # fmt: skip
    corr = _int(ev.stats.get("correlation_id"))
    step = _int(ev.stats.get("step_num"))
    name = ev.name
    if step is not None:
        cat, name = Category.STEP, f"{ev.name}#{step}"
    elif corr is not None:
        cat = Category.RUNTIME
        kind = _copy_kind(ev.name)
        if kind is not None:
            launch_kind[corr] = kind
    elif ev.end_ns > ev.start_ns:
        cat = Category.CPU_OP
    else:
        cat = Category.OTHER
    b.add(start_ns=ev.start_ns + base, end_ns=ev.end_ns + base, category=int(cat), tid=lid,
          correlation=corr if corr is not None else -1, name=name, host=host, source=source)  # fmt: skip


def _device_row(
    b: ColumnBuilder, ev: _Event, kind: str, device: str, lid: int, base: int, host: str,
    source: str, launch_kind: dict[int, Category],
) -> None:  # fmt: skip
    corr = _int(ev.stats.get("correlation_id"))
    op = ""
    if kind == "steps":
        cat = Category.STEP
        step = _int(ev.stats.get("step_num"))
        name = f"{ev.name}#{step}" if step is not None else ev.name
    else:
        name = ev.name
        hlo = ev.stats.get("hlo_op")
        m = _HLO_COLLECTIVE.match(hlo) if isinstance(hlo, str) else None
        if "memcpy_details" in ev.stats:
            cat = Category.MEMCPY
        elif "memset_details" in ev.stats:
            cat = Category.MEMSET
        elif corr is not None and corr in launch_kind:
            cat = launch_kind[corr]
        elif m is not None:
            cat, op = Category.KERNEL_COMM, _HLO_OP[m.group(1)]
        else:
            cat = classify_kernel(ev.name)
    b.add(start_ns=ev.start_ns + base, end_ns=ev.end_ns + base, category=int(cat), stream=lid,
          correlation=corr if corr is not None else -1, name=name, device=device, host=host,
          source=source, coll_op=op)  # fmt: skip


def _example_space() -> bytes:
    """A tiny XSpace (a host launch and its kernel), encoded here for the doctest."""

    def key(f: int, w: int) -> bytes:
        return _varint(f << 3 | w)

    def msg(f: int, body: bytes) -> bytes:
        return key(f, LENGTH) + _varint(len(body)) + body

    def num(f: int, v: int) -> bytes:
        return key(f, VARINT) + _varint(v)

    def entry(f: int, k: int, name: str) -> bytes:
        return msg(f, num(1, k) + msg(2, num(1, k) + msg(2, name.encode())))

    corr_stat = msg(4, num(1, 1) + num(3, 7))
    host = (msg(2, b"/host:CPU") + entry(5, 1, "correlation_id") + entry(4, 1, "hipLaunchKernel")
            + msg(3, num(1, 11) + num(3, 1000) + msg(4, num(1, 1) + num(2, 0) + num(3, 500_000)
                                                  + corr_stat)))  # fmt: skip
    dev = (msg(2, b"/device:GPU:0") + entry(5, 1, "correlation_id") + entry(4, 2, "gemm_kernel")
           + msg(3, num(1, 3) + num(3, 2000) + msg(4, num(1, 2) + num(2, 500_000)
                                                 + num(3, 4_000_000) + corr_stat)))  # fmt: skip
    return msg(1, host) + msg(1, dev)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        low = v & 0x7F
        v >>= 7
        if v:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)
