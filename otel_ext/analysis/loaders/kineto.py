"""PyTorch profiler (Kineto) traces: one JSON file per rank, plain or gzipped.

What is read, and how:

* **Rank** from ``distributedInfo`` (a JSON member, parsed as JSON, wherever it appears in the
  file, minified or not), ``-1`` when absent. ``world_size``, ``backend`` and the process
  group table are kept in the table's ``meta``.
* **Times** in integer nanoseconds: ``ts``/``dur`` are microseconds, often with three decimals;
  they are converted from their decimal text, never through a float, so nanosecond-resolution
  traces keep every nanosecond. When the file has ``baseTimeNanoseconds``, ``ts`` is relative
  to it and the base is added.
* **Events** (``ph: "X"``): CPU ops and annotations, runtime and driver calls (CUDA, HIP,
  MTIA), kernels, memcpy/memset, MTIA device events; ``ProfilerStep#N`` becomes a ``STEP``
  row. The profiler's own ``Trace`` span and instant events are skipped.
* **Launch → kernel**: ``args.correlation`` on both sides; files without it are linked through
  their ``ac2g`` flow events (``s`` on the launch, ``f`` on the kernel, same id).
* **Collective metadata** in ``args`` (``Collective name``, ``In/Out msg nelems``, ``dtype``,
  ``Group size``, ``Process Group Name``/``pg_name``/``Process Group ID``, ``Seq``) fills the
  collective columns; a point-to-point operation's peer (``Dst Rank`` of a send, ``Src Rank``
  of a receive: global ranks, recent PyTorch) fills ``coll_peer``; kernels launched from
  inside a host op that carries it inherit it and count as communication (see
  :mod:`otel_ext.analysis.classify`).
* **Devices** are named ``gpu<device>`` or ``mtia<device>`` (MTIA from the event's category or
  the process's ``process_labels``, wherever in the file they are), prefixed by the host.
* **Two paths, one table**: a fast one (streamed, chunked, typed decode and bulk column
  extraction; :mod:`otel_ext.analysis.loaders._kineto_fast`) for regular input, and the careful
  event-by-event one below, which any irregularity falls back to and which names the bad
  record.

>>> import json
>>> doc = {"distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 1000000,
...        "traceEvents": [
...   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
...    "ts": 1.5, "dur": 2, "args": {"correlation": 7}},
...   {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7,
...    "ts": 4.0005, "dur": 10, "args": {"correlation": 7, "stream": 7, "device": 0}}]}
>>> t = load_kineto_text(json.dumps(doc), path="r3.json")
>>> t.meta["rank"], [int(x) for x in t["start_ns"]], t.string("name", 1)
(3, [1001500, 1004001], 'ncclDevKernel_AllReduce')
>>> [int(x) for x in t["category"]], [int(x) for x in t["stream"]]
([2, 4], [-1, 7])
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np

from otel_ext.analysis.classify import classify_kineto, has_collective_metadata
from otel_ext.analysis.loaders._common import (
    ColumnBuilder,
    JsonValue,
    LoadContext,
    int_or_none,
    us_to_ns,
)
from otel_ext.analysis.loaders._jsonstream import JsonSyntaxError, iter_array, iter_object
from otel_ext.analysis.loaders._kineto_fast import (
    _DEVICE_SIDE_CATS,
    _LAUNCH_FLOW_CATS,
    KNOWN_PHASES,
    FastColumns,
    decode_fast,
)
from otel_ext.analysis.table import (
    DEVICE_CATEGORIES,
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    Category,
    EventTable,
    constant_column,
)

__all__ = [
    "DTYPE_BYTES",
    "load_kineto_careful",
    "load_kineto_text",
    "looks_like_kineto",
    "table_from_fast",
]

#: bytes per element of the ``dtype`` names PyTorch writes in ``record_param_comms``
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1, "complexfloat": 8,
    "complexdouble": 16, "complexhalf": 4, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}  # fmt: skip

_KINETO_KEYS = re.compile(r'"(traceEvents|schemaVersion|deviceProperties|distributedInfo)"\s*:')
_NUMERIC = [
    "start_ns", "end_ns", "category", "stream", "tid", "correlation", "external_id",
    "coll_seq", "coll_bytes", "coll_group_size", "coll_peer",
]  # fmt: skip
_STRINGS = ["name", "device", "coll_op", "coll_group"]


def looks_like_kineto(head: str) -> bool:
    """Whether the first characters of a JSON document are those of a Kineto trace.

    >>> looks_like_kineto('{"schemaVersion": 1, "deviceProperties": []')
    True
    >>> looks_like_kineto('{"resourceSpans": []}')
    False
    """
    s = head.lstrip()
    if s.startswith("{"):
        return _KINETO_KEYS.search(s) is not None
    if s.startswith("["):  # the Chrome trace "JSON array" form
        return '"ph"' in s
    return False


def _coll_fields(args: dict[str, JsonValue]) -> tuple[str, str, int, int, int]:
    op = args.get("Collective name") or args.get("collective_name") or ""
    group = args.get("Process Group Name")
    if group is None:
        group = args.get("pg_name")
    if group is None:
        group = args.get("Process Group ID")
    group_s = "" if group is None else str(group)
    seq = int_or_none(args.get("Seq", args.get("seq")))
    size = int_or_none(args.get("Group size"))
    dtype = args.get("dtype")
    nbytes = -1
    per = DTYPE_BYTES.get(dtype.lower()) if isinstance(dtype, str) else None
    if per is not None:
        key = "Out msg nelems" if "gather" in str(op).lower() else "In msg nelems"
        n = int_or_none(args.get(key))
        if n is not None and n >= 0:
            nbytes = n * per
    return (
        str(op),
        group_s,
        -1 if seq is None else seq,
        nbytes,
        -1 if size is None or not -(2**31) < size < 2**31 else size,
    )


def _coll_peer(args: dict[str, JsonValue]) -> int:
    """A point-to-point operation's peer, a global rank: ``Dst Rank`` (a send's) or ``Src
    Rank`` (a receive's), as PyTorch's ``saveNcclMeta`` writes them; -1 when absent or out
    of range.

    >>> _coll_peer({"Collective name": "send", "Dst Rank": 3}), _coll_peer({"Src Rank": "2"})
    (3, 2)
    >>> _coll_peer({"Collective name": "allreduce"})
    -1
    """
    peer = int_or_none(args.get("Dst Rank", args.get("Src Rank")))
    return peer if peer is not None and 0 <= peer < 2**31 else -1


def load_kineto_text(
    text: str | bytes,
    *,
    path: str,
    ctx: LoadContext | None = None,
    events_key: str = "traceEvents",
) -> EventTable:
    """Parse one Kineto trace (already decompressed text) into an :class:`EventTable`.

    The document is first decoded in one typed pass and its columns extracted in bulk
    (:mod:`otel_ext.analysis.loaders._kineto_fast`); any irregularity sends it down the
    careful event-by-event path, which names the bad record. Both give the same table.

    Args:
        text: the whole JSON document (``str``, or UTF-8 ``bytes``).
        path: the file's name, for error messages and the ``source`` column.
        ctx: where bad records go; by default they raise.
        events_key: the member holding the events.

    Returns:
        The table, with ``meta`` holding ``rank``, ``world_size``, ``host``, ``base_ns``,
        ``distributed_info`` and ``format`` (``"kineto"``).

    Raises:
        InputError: malformed JSON, a bad header or a bad event (unless ``ctx.keep_going``).
    """
    ctx = ctx or LoadContext(path)
    if events_key == "traceEvents":
        fast = decode_fast(text)
        if fast is not None:
            return table_from_fast(fast, ctx, path)
    return load_kineto_careful(text, path=path, ctx=ctx, events_key=events_key)


def load_kineto_careful(
    text: str | bytes, *, path: str, ctx: LoadContext, events_key: str = "traceEvents"
) -> EventTable:
    """The careful path alone (event by event; exact error messages).

    Bytes that are not UTF-8 cost the events (or header member) holding them, not the file.
    """
    if isinstance(text, bytes):
        data = text[3:] if text.startswith(b"\xef\xbb\xbf") else text
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="surrogateescape")
        del data
    return _load_careful(text, path=path, ctx=ctx, events_key=events_key)


def _looks_like_event(v: Any) -> bool:
    return type(v) is dict and "ph" in v


def _load_careful(text: str, *, path: str, ctx: LoadContext, events_key: str) -> EventTable:
    """The event-by-event path: exact error messages, ``keep_going`` per record."""
    from otel_ext.analysis.loaders._jsonstream import surrogate_positions

    b = ColumnBuilder(_NUMERIC, _STRINGS)
    header: dict[str, JsonValue] = {}
    state = _State(b, ctx)
    bad_positions = surrogate_positions(text) or None
    skip = ctx.bad if ctx.keep_going else None
    try:
        stripped = text.lstrip()
        if not stripped:
            ctx.bad("file", "empty file")
            return b.build({"format": "kineto", "rank": -1})
        end = [-1]
        if stripped.startswith("["):
            state.consume(iter_array(text, 0, end, on_skip=skip, looks_like=_looks_like_event,
                                     label="event", bad_positions=bad_positions))  # fmt: skip
        else:
            for key, value in iter_object(
                text, stream_key=events_key, end=end, keep_going=ctx.keep_going, on_skip=ctx.bad,
                looks_like=_looks_like_event, label="event", bad_positions=bad_positions,
            ):  # fmt: skip
                if key == events_key and not isinstance(value, list):
                    if isinstance(value, dict) or not hasattr(value, "__next__"):
                        ctx.bad(events_key, "traceEvents is not an array")
                        continue
                    state.consume(value)
                else:
                    header[key] = value
        tail = end[0]
        if tail >= 0 and text[tail:].strip():
            ctx.bad("file", f"unexpected text after the JSON document at offset {tail}")
    except JsonSyntaxError as e:
        record = e.record or (f"event {e.index}" if e.index is not None else "file")
        kept = f" (kept the {len(b)} rows before it)" if ctx.keep_going else ""
        ctx.bad(record, f"malformed JSON{kept}: {e}")
    return state.finish(header, path)


def table_from_fast(fast: FastColumns, ctx: LoadContext, path: str) -> EventTable:
    """The table of what the fast path extracted (header checks as in the careful path)."""
    n = len(fast.numeric["start_ns"])
    columns: dict[str, np.ndarray] = {}
    for name, (dtype, default) in NUMERIC_COLUMNS.items():
        col = fast.numeric.get(name)
        columns[name] = (
            col.astype(dtype, copy=False) if col is not None else constant_column(default, dtype, n)
        )
    strings: dict[str, list[str]] = {}
    for name in STRING_COLUMNS:
        enc = fast.strings.get(name)
        if enc is not None:
            columns[name], strings[name] = enc
        else:
            columns[name] = constant_column(0, np.int32, n)
            strings[name] = [""]
    columns["device"] = fast.device_codes
    t = EventTable(columns, strings, {})
    return _finish(
        t, fast.header, ctx, path, fast.device_keys, fast.labels, fast.uncorrelated, fast.flows
    )


def _hashable(v: Any) -> bool:
    return isinstance(v, int | str | float) or v is None


def device_ordinals(props: list[dict[str, JsonValue]], devices: list[Any]) -> dict[Any, int]:
    """The GPU ordinal (a ``deviceProperties`` id) of each device number kernels carry.

    NVIDIA traces number devices by ordinal (the mapping is the identity). On AMD traces
    (ROCm: an ``AMD`` device name or a 64-wide wavefront in ``deviceProperties``) kernels carry
    the ROCm agent number, which counts the host's CPU agents first: device 9 on a one-GPU
    run, 2 on an eight-GPU one. The agent numbers seen are then shifted down onto the
    ordinals, when the trace decides the shift: with one GPU, or when the agents seen span
    all of the GPUs. Otherwise the numbers are left as they are.

    >>> amd = [{"id": 0, "name": "AMD Instinct MI300X", "warpSize": 64}]
    >>> device_ordinals(amd, [9, 9]), device_ordinals([{"id": 0, "warpSize": 32}], [0])
    ({9: 0}, {})
    >>> eight = [{"id": i, "name": "AMD Instinct MI300X"} for i in range(8)]
    >>> device_ordinals(eight, [2, 3, 4, 5, 6, 7, 8, 9])[9], device_ordinals(eight, [2])
    (7, {})
    """
    if not props:
        return {}
    amd = any(str(p.get("name", "")).startswith("AMD") or p.get("warpSize") == 64 for p in props)
    seen = sorted({d for d in devices if type(d) is int})
    if not amd or not seen:
        return {}
    ids = sorted(i for p in props if type(i := p.get("id")) is int)
    if len(ids) != len(props) or ids != list(range(len(ids))):
        return {}
    n = len(ids)
    lo, hi = seen[-1] - n + 1, seen[0]  # the shifts that keep every agent on an ordinal
    if lo != hi or lo < 0:
        return {}
    return {d: d - lo for d in seen}


def _device_prefix(pid: Any, cat: str, labels: dict[Any, str]) -> str:
    if cat.startswith("mtia"):
        return "mtia"
    if labels.get(pid, "").startswith("MTIA"):
        return "mtia"
    return "gpu"


class _Header(NamedTuple):
    """The header members :func:`_finish` reads, checked."""

    rank: int
    world_size: int
    base_ns: int
    host: str
    distributed_info: dict[str, JsonValue] | None
    device_properties: list[dict[str, JsonValue]] | None


def _checked_header(header: dict[str, JsonValue], ctx: LoadContext) -> _Header:
    """The rank, world size, base time, host and device properties of a trace's header,
    each bad one reported to ``ctx`` and left at its default."""
    dist = header.get("distributedInfo")
    rank = -1
    world = -1
    if dist is not None:
        if not isinstance(dist, dict):
            ctx.bad("distributedInfo", "distributedInfo is not a JSON object")
            dist = {}
        r = dist.get("rank")
        if r is not None:
            if type(r) is int and 0 <= r < 2**31:
                rank = r
            else:
                ctx.bad("distributedInfo.rank", f"rank is not a non-negative integer: {r!r:.40}")
        w = dist.get("world_size")
        if type(w) is int and 0 < w < 2**31:
            world = w
    base = header.get("baseTimeNanoseconds", 0)
    if type(base) is not int or not 0 <= base < 2**62:
        ctx.bad("baseTimeNanoseconds", f"not a non-negative integer: {base!r:.40}")
        base = 0
    host = header.get("host_name") or header.get("hostname") or ""
    if not isinstance(host, str):
        host = str(host)
    props = header.get("deviceProperties")
    if props is not None and not (
        isinstance(props, list) and all(isinstance(p, dict) for p in props)
    ):
        ctx.bad("deviceProperties", "deviceProperties is not a list of objects")
        props = None
    return _Header(rank, world, base, host, dist if isinstance(dist, dict) else None, props)


def _finish(
    t: EventTable,
    header: dict[str, JsonValue],
    ctx: LoadContext,
    path: str,
    device_keys: list[tuple[Any, str, Any]],
    labels: dict[Any, str],
    uncorrelated: list[tuple[int, Any, Any, int, bool]],
    flows: tuple[dict[tuple[Any, Any, int], int], dict[tuple[Any, Any, int], int]],
) -> EventTable:
    """Header (rank, base time, host), device names, flow links and inherited collectives.

    ``t["device"]`` holds codes into ``device_keys`` (1-based; 0 = host row); they become
    names such as ``gpu0`` or ``host/mtia1`` once every process label is known.
    """
    h = _checked_header(header, ctx)
    props = h.device_properties
    n = len(t)
    if h.base_ns:
        for col in ("start_ns", "end_ns"):
            t.writable(col)[:] += np.int64(h.base_ns)
    t.columns["rank"] = constant_column(h.rank, np.int32, n)
    ordinal = device_ordinals(props or [], [dv for _, _, dv in device_keys])
    _name_devices(t, device_keys, labels, ordinal, h.host)
    if h.host:
        t.strings["host"] = ["", h.host]
        t.columns["host"] = constant_column(1, np.int32, n)
    t.strings["source"] = ["", path]
    t.columns["source"] = constant_column(1, np.int32, n)
    if uncorrelated:
        _link_flows(t, uncorrelated, flows, ctx)
    _inherit_collectives(t)
    t.meta.update(
        format="kineto",
        path=path,
        rank=h.rank,
        world_size=h.world_size,
        host=h.host,
        base_ns=h.base_ns,
        distributed_info=h.distributed_info,
        devices=[p.get("name") for p in props or []],
    )
    return t.compact()


def _name_devices(
    t: EventTable,
    device_keys: list[tuple[Any, str, Any]],
    labels: dict[Any, str],
    ordinal: dict[Any, int],
    host: str,
) -> None:
    """The device column's codes (1-based into ``device_keys``) as device names: ``gpu0``,
    ``host/mtia1`` (the ordinal where the properties give one, the host when named)."""
    names: dict[str, int] = {"": 0}
    remap = np.zeros(len(device_keys) + 1, dtype=np.int32)
    for k, (pid, cat, dv) in enumerate(device_keys, start=1):
        d = f"{_device_prefix(pid, cat, labels)}{ordinal.get(dv, dv) if _hashable(dv) else dv}"
        if host:
            d = f"{host}/{d}"
        remap[k] = names.setdefault(d, len(names))
    t.columns["device"] = remap[t.columns["device"]]
    t.strings["device"] = list(names)


def _link_flows(
    t: EventTable,
    uncorrelated: list[tuple[int, Any, Any, int, bool]],
    flows: tuple[dict[tuple[Any, Any, int], int], dict[tuple[Any, Any, int], int]],
    ctx: LoadContext,
) -> None:
    """Rows without a correlation id take their launch flow's id (a flow's start on the
    host, its finish on the device, keyed by pid, tid and time)."""
    corr = t.writable("correlation")
    flow_s, flow_f = flows
    for row, pid, tid, ts, on_device in uncorrelated:
        try:
            fid = (flow_f if on_device else flow_s).get((pid, tid, ts))
        except TypeError:  # a list or an object where pid/tid should be
            ctx.bad(
                f"event row {row}",
                f"pid or tid is not a number or a string: {pid!r:.40}, {tid!r:.40}",
            )
            continue
        if fid is not None:
            corr[row] = fid


#: the collective columns of a row that is no collective
_NO_COLLECTIVE = (0, 0, -1, -1, -1)

#: the JSON types a pid or tid may have (they key dictionaries)
_ID_TYPES = frozenset({int, str, type(None)})


class _State:
    """The per-file parsing state (kept in one object so the loop binds locals once)."""

    def __init__(self, b: ColumnBuilder, ctx: LoadContext) -> None:
        self.b = b
        self.ctx = ctx
        self.flow_s: dict[tuple[Any, Any, int], int] = {}
        self.flow_f: dict[tuple[Any, Any, int], int] = {}
        self.uncorrelated: list[tuple[int, Any, Any, int, bool]] = []
        self.device_pids: dict[Any, str] = {}
        self.device_keys: dict[tuple[Any, str, Any], int] = {}

    def consume(self, events: Any) -> None:
        """Append ``events``' complete events as rows; remember flows and process labels."""
        b, ctx = self.b, self.ctx
        num, strs = b.num, b.str
        a_start, a_end, a_cat = num["start_ns"].append, num["end_ns"].append, num["category"].append
        a_stream, a_tid, a_corr = num["stream"].append, num["tid"].append, num["correlation"].append
        a_ext, a_seq = num["external_id"].append, num["coll_seq"].append
        a_bytes, a_gsize = num["coll_bytes"].append, num["coll_group_size"].append
        a_peer = num["coll_peer"].append
        a_name, a_dev = strs["name"].append, strs["device"].append
        a_op, a_group = strs["coll_op"].append, strs["coll_group"].append
        name_codes = b.dicts["name"]
        cache: dict[tuple[str, str], Category] = {}
        device_side = _DEVICE_SIDE_CATS
        dev_cats = DEVICE_CATEGORIES
        row = len(b)
        for i, ev in enumerate(events):
            if type(ev) is not dict:
                ctx.bad(f"event {i}", "event is not a JSON object")
                continue
            ph = ev.get("ph")
            if type(ev.get("pid")) not in _ID_TYPES or type(ev.get("tid")) not in _ID_TYPES:
                ctx.bad(f"event {i}", "'pid' or 'tid' is not a number or a string")
                continue
            if ph != "X":
                self._not_complete(i, ev, ph)
                continue
            checked = self._complete_event(i, ev)
            if checked is None:
                continue
            name, cat, ts, dur, args = checked
            coll = has_collective_metadata(args) if args else False
            if coll:
                category = classify_kineto(cat, name, args)
            else:
                ck = (cat, name)
                category = cache.get(ck)  # type: ignore[assignment]
                if category is None:
                    category = cache[ck] = classify_kineto(cat, name, None)
            corr = args.get("correlation", -1) if args else -1
            if type(corr) is not int:
                corr = -1
            on_device = category in dev_cats or cat in device_side
            if on_device:
                s = args.get("stream", -1)
                a_stream(s if type(s) is int and -(2**62) < s < 2**62 else -1)
                a_tid(-1)
                pid = ev.get("pid")
                dkey = (pid, cat, args.get("device", pid))
                dk = self.device_keys.get(dkey)
                if dk is None:
                    dk = self.device_keys[dkey] = len(self.device_keys) + 1
                a_dev(dk)
            else:
                a_stream(-1)
                tid = ev.get("tid")
                a_tid(tid if type(tid) is int and -(2**62) < tid < 2**62 else -1)
                a_dev(0)
            if corr < 0 and (on_device or category == Category.RUNTIME):
                self.uncorrelated.append((row, ev.get("pid"), ev.get("tid"), ts, on_device))
            ext = args.get("External id", -1) if args else -1
            a_start(ts)
            a_end(ts + dur)
            a_cat(category)
            a_corr(corr if -(2**62) < corr < 2**62 else -1)
            a_ext(ext if type(ext) is int and -(2**62) < ext < 2**62 else -1)
            c = name_codes.get(name)
            if c is None:
                c = name_codes[name] = len(name_codes)
            a_name(c)
            op, group, seq, nbytes, gsize = self._coll_codes(args) if coll else _NO_COLLECTIVE
            a_op(op)
            a_group(group)
            a_seq(seq)
            a_bytes(nbytes)
            a_gsize(gsize)
            a_peer(_coll_peer(args) if coll else -1)
            row += 1

    def _coll_codes(self, args: dict[str, JsonValue]) -> tuple[int, int, int, int, int]:
        """A collective's columns from its arguments: operation and group codes, sequence
        number, bytes and group size (out-of-range numbers as -1)."""
        code = self.b.code
        op, group, seq, nbytes, gsize = _coll_fields(args)
        return (
            code("coll_op", op) if op else 0,
            code("coll_group", group) if group else 0,
            seq if -(2**62) < seq < 2**62 else -1,
            nbytes if nbytes < 2**62 else -1,
            gsize,
        )

    def _not_complete(self, i: int, ev: dict[str, JsonValue], ph: Any) -> None:
        """An event that is not a complete event (``ph`` other than ``X``): a launch flow's
        end is remembered, a device's process label kept; the others are passed over."""
        ctx = self.ctx
        if type(ph) is not str or ph not in KNOWN_PHASES:
            ctx.bad(f"event {i}", f"'ph' is missing or not a known phase: {ph!r:.40}")
            return
        fcat = ev.get("cat")
        if fcat is not None and type(fcat) is not str:
            ctx.bad(f"event {i}", "'cat' is not a string")
            return
        if (ph == "s" or ph == "f") and fcat in _LAUNCH_FLOW_CATS:
            fid = ev.get("id")
            t = us_to_ns(ev.get("ts"))
            if type(fid) is int and t is not None:
                key = (ev.get("pid"), ev.get("tid"), t)
                (self.flow_s if ph == "s" else self.flow_f)[key] = fid
        elif ph == "M" and ev.get("name") == "process_labels":
            a = ev.get("args")
            if type(a) is dict and isinstance(a.get("labels"), str):
                self.device_pids[ev.get("pid")] = a["labels"]

    def _complete_event(
        self, i: int, ev: dict[str, JsonValue]
    ) -> tuple[str, str, int, int, dict[str, JsonValue]] | None:
        """A complete event's name, category text, start, duration (ns) and arguments,
        checked; None for a bad one (reported) or a ``Trace`` span (passed over)."""
        ctx = self.ctx
        name = ev.get("name")
        if type(name) is not str:
            ctx.bad(f"event {i}", "'name' is missing or not a string")
            return None
        cat = ev.get("cat", "")
        if type(cat) is not str:
            ctx.bad(f"event {i}", "'cat' is not a string")
            return None
        if cat == "Trace":
            return None
        ts = us_to_ns(ev.get("ts"))
        if ts is None:
            ctx.bad(
                f"event {i}",
                f"'ts' is missing, not a number or out of range: {ev.get('ts')!r:.40}",
            )
            return None
        d = ev.get("dur", 0)
        dur = us_to_ns(d)
        if dur is None:
            ctx.bad(f"event {i}", f"'dur' is not a number or out of range: {d!r:.40}")
            return None
        if dur < 0:
            ctx.bad(f"event {i}", f"negative duration {d}")
            return None
        args = ev.get("args")
        if args is None:
            args = {}
        elif type(args) is not dict:
            ctx.bad(f"event {i}", "'args' is not a JSON object")
            return None
        return name, cat, ts, dur, args

    def finish(self, header: dict[str, JsonValue], path: str) -> EventTable:
        """The table of the events consumed, with the header's rank, base time and host."""
        return _finish(
            self.b.build(), header, self.ctx, path, list(self.device_keys), self.device_pids,
            self.uncorrelated, (self.flow_s, self.flow_f),
        )  # fmt: skip


def _inherit_collectives(t: EventTable) -> None:
    """Kernels launched inside a collective host op are communication, with its metadata."""
    cat = t.columns["category"]
    ext = t.columns["external_id"]
    host_coll = (t.columns["coll_op"] > 0) & (t.columns["stream"] < 0) & (ext >= 0)
    if not host_coll.any():
        return
    kern = ((cat == Category.KERNEL_COMPUTE) | (cat == Category.KERNEL_COMM)) & (ext >= 0)
    if not kern.any():
        return
    host_rows = np.flatnonzero(host_coll)
    order = np.argsort(ext[host_rows], kind="stable")
    keys = ext[host_rows][order]
    krows = np.flatnonzero(kern)
    pos = np.searchsorted(keys, ext[krows])
    pos_c = np.minimum(pos, len(keys) - 1)
    hit = keys[pos_c] == ext[krows]
    krows, src = krows[hit], host_rows[order][pos_c[hit]]
    if not len(krows):
        return
    t.writable("category")[krows] = Category.KERNEL_COMM
    for col in ("coll_op", "coll_group", "coll_seq", "coll_bytes", "coll_group_size", "coll_peer"):
        c = t.columns[col]
        empty = c[krows] <= (0 if col in ("coll_op", "coll_group") else -1)
        if empty.any():
            t.writable(col)[krows[empty]] = c[src[empty]]
