"""The fast path of the Kineto loader: one typed decode, then whole columns at a time.

The careful path (:mod:`otel_ext.analysis.loaders.kineto`) walks the events one by one in
Python, about 4 µs an event. Here the document is decoded in one call by ``msgspec`` into
small typed records that hold only the fields we read (the dozens of other ``args`` members
are skipped by the decoder, never built), and every column is then pulled out with C-level
``map``/``attrgetter`` passes and numpy, validated in bulk.

Exactness is the careful path's: non-integer numbers reach us as their decimal text
(``float_hook=str``), never as floats, and are converted by
:func:`~otel_ext.analysis.loaders._common.us_to_ns`; integers are exact anyway.

Anything unusual (malformed JSON, an event that is not an object, a field of the wrong type, a
negative duration, a number out of range) makes :func:`decode_fast` return ``None``, and the
caller runs the careful path, which names the file, the record and the problem, or skips the
record in ``keep_going`` mode. So the fast path never has to produce an error message and
gives the same table as the careful path on every input it accepts (a differential test checks
this on every real trace and on generated documents).

``msgspec`` is optional: without it every file takes the careful path.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Sequence
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np

from otel_ext.analysis.classify import classify_kineto
from otel_ext.analysis.loaders._common import MAX_ABS_NS, us_to_ns
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category

__all__ = ["FastColumns", "decode_fast"]

try:  # optional accelerator
    import msgspec
except ImportError:  # pragma: no cover - exercised only where msgspec is absent
    msgspec = None  # type: ignore[assignment]

_LIM = 2**62
_MILLI = re.compile(r"-?[0-9]{1,16}\.[0-9]{3}")
_NO_POINT = methodcaller("replace", ".", "")
_DEVICE_SIDE_CATS = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation", "mtia_ccp_events"}
)
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu", "async_gpu"})

#: ``args`` members the loader reads: struct field -> JSON key (collective keys first)
_COLL_KEYS = {
    "coll_name": "Collective name",
    "pg_name_": "Process Group Name",
    "pg_id": "Process Group ID",
    "pg_ranks": "Process Group Ranks",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "pg_name": "pg_name",
    "collective_name": "collective_name",
}
_OTHER_COLL_KEYS = {"seq_": "Seq", "seq": "seq", "group_size": "Group size", "dtype": "dtype"}
_ARG_KEYS = {**_COLL_KEYS, **_OTHER_COLL_KEYS, "correlation": "correlation", "stream": "stream"}
_ARG_KEYS.update(device="device", external_id="External id")


class FastColumns:
    """What the fast path extracted: numeric columns, string dictionaries, header, flows."""

    def __init__(
        self,
        numeric: dict[str, np.ndarray],
        strings: dict[str, tuple[np.ndarray, list[str]]],
        header: dict[str, Any],
        device_keys: list[tuple[Any, str, Any]],
        device_codes: np.ndarray,
        uncorrelated: list[tuple[int, Any, Any, int, bool]],
        flows: tuple[dict[tuple[Any, Any, int], int], dict[tuple[Any, Any, int], int]],
        labels: dict[Any, str],
    ) -> None:
        self.numeric = numeric
        self.strings = strings
        self.header = header
        self.device_keys = device_keys
        self.device_codes = device_codes
        self.uncorrelated = uncorrelated
        self.flows = flows
        self.labels = labels


if msgspec is not None:
    _U: Any = msgspec.UNSET

    class _Args(msgspec.Struct, rename=_ARG_KEYS, gc=False):  # type: ignore[call-arg]
        coll_name: Any = _U
        pg_name_: Any = _U
        pg_id: Any = _U
        pg_ranks: Any = _U
        in_nelems: Any = _U
        out_nelems: Any = _U
        pg_name: Any = _U
        collective_name: Any = _U
        seq_: Any = _U
        seq: Any = _U
        group_size: Any = _U
        dtype: Any = _U
        correlation: Any = -1
        stream: Any = -1
        device: Any = _U
        external_id: Any = -1
        labels: Any = _U

    class _Event(msgspec.Struct, gc=False):
        ph: Any = None
        cat: Any = ""
        name: Any = None
        ts: Any = _U
        dur: Any = 0
        pid: Any = None
        tid: Any = None
        id: Any = None
        args: _Args | None = None

    class _Doc(msgspec.Struct, gc=False):
        traceEvents: list[_Event] = []  # noqa: N815 - the JSON member's name
        distributedInfo: Any = _U  # noqa: N815
        baseTimeNanoseconds: Any = _U  # noqa: N815
        host_name: Any = _U
        hostname: Any = _U
        deviceProperties: Any = _U  # noqa: N815

    _DECODER = msgspec.json.Decoder(_Doc | list[_Event], float_hook=str)
    _EMPTY = _Args()
    _COLL_GET = attrgetter(*_COLL_KEYS)
    _NO_COLL = (_U,) * len(_COLL_KEYS)


class _Reject(Exception):
    """The input needs the careful path."""


def _args_dict(a: Any) -> dict[str, Any]:
    """The members of a decoded ``args`` record that were present, under their JSON keys."""
    return {key: v for f, key in _ARG_KEYS.items() if (v := getattr(a, f)) is not _U}


def _int_column(values: Sequence[Any], n: int) -> np.ndarray:
    """Integers in (-2**62, 2**62) as they are; anything else (bools, floats, text) as -1."""
    if n == 0:
        return np.zeros(0, np.int64)
    if set(map(type, values)) == {int}:
        try:
            arr = np.fromiter(values, np.int64, count=n)
        except OverflowError:
            pass
        else:
            bad = (arr <= -_LIM) | (arr >= _LIM)
            if bad.any():
                arr[bad] = -1
            return arr
    return np.fromiter(
        (v if type(v) is int and -_LIM < v < _LIM else -1 for v in values), np.int64, count=n
    )


def _us_column(values: Sequence[Any], n: int) -> np.ndarray:
    """Microseconds (JSON ints, or decimal text of JSON numbers) to exact integer ns."""
    if n == 0:
        return np.zeros(0, np.int64)
    types = set(map(type, values))
    if types == {int}:
        try:
            arr = np.fromiter(values, np.int64, count=n)
        except OverflowError:
            raise _Reject from None
        lim = MAX_ABS_NS // 1000
        if ((arr <= -lim) | (arr >= lim)).any():
            raise _Reject
        return arr * 1000
    if not types <= {int, str}:
        raise _Reject
    if types == {str} and all(map(_MILLI.fullmatch, values)):
        # the profiler's "%.3f" form: the digits without the point are the nanoseconds
        arr = np.fromiter(map(int, map(_NO_POINT, values)), np.int64, count=n)
        if ((arr <= -MAX_ABS_NS) | (arr >= MAX_ABS_NS)).any():
            raise _Reject
        return arr
    ns = list(map(us_to_ns, values))
    if None in ns:
        raise _Reject
    return np.fromiter(ns, np.int64, count=n)


def _encode(values: Sequence[Any], n: int) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode strings in order of first appearance (code 0 is the empty string)."""
    lookup: dict[str, int] = {"": 0}
    for s in dict.fromkeys(values):
        lookup.setdefault(s, len(lookup))
    return np.fromiter(map(lookup.__getitem__, values), np.int32, count=n), list(lookup)


def decode_fast(data: bytes | str) -> FastColumns | None:
    """Decode a whole Kineto document into columns, or None when the careful path must run."""
    if msgspec is None:
        return None
    # JSON data has no reference cycles: the cyclic collector would only re-walk the
    # hundreds of thousands of new containers again and again (a third of the time)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            doc = _DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        try:
            return _columns(doc)
        except _Reject:
            return None
    finally:
        if was_enabled:
            gc.enable()


def _columns(doc: Any) -> FastColumns:
    header: dict[str, Any] = {}
    if isinstance(doc, list):
        events = doc
    else:
        events = doc.traceEvents
        for key in ("distributedInfo", "baseTimeNanoseconds", "host_name", "hostname"):
            v = getattr(doc, key)
            if v is not _U:
                header[key] = v
        if doc.deviceProperties is not _U:
            header["deviceProperties"] = doc.deviceProperties
    del doc
    phs = list(map(attrgetter("ph"), events))
    xs = [e for e, ph in zip(events, phs) if ph == "X"]
    others = [e for e, ph in zip(events, phs) if ph != "X" and (ph == "s" or ph == "f" or ph == "M")]
    del phs, events
    # the profiler's own "Trace" span is not an event of the run
    cats_all = list(map(attrgetter("cat"), xs))
    if "Trace" in cats_all:
        xs = [e for e, c in zip(xs, cats_all) if c != "Trace"]
        cats = [c for c in cats_all if c != "Trace"]
    else:
        cats = cats_all
    del cats_all
    n = len(xs)
    names = list(map(attrgetter("name"), xs))
    if n and (set(map(type, names)) != {str} or set(map(type, cats)) != {str}):
        raise _Reject
    start = _us_column(list(map(attrgetter("ts"), xs)), n)
    dur = _us_column(list(map(attrgetter("dur"), xs)), n)
    if n and (dur < 0).any():
        raise _Reject
    end = start + dur
    del dur
    args = [a if a is not None else _EMPTY for a in map(attrgetter("args"), xs)]
    coll_rows = (
        np.flatnonzero(np.fromiter(map(_NO_COLL.__ne__, map(_COLL_GET, args)), bool, count=n))
        if n
        else np.zeros(0, np.int64)
    )
    # category: once per distinct (cat, name), then the few collective rows with their args
    name_codes, name_dict = _encode(names, n)
    cat_codes, cat_dict = _encode(cats, n)
    pair = cat_codes.astype(np.int64) * len(name_dict) + name_codes
    upair, inverse = np.unique(pair, return_inverse=True)
    kinds = np.array(
        [classify_kineto(cat_dict[p // len(name_dict)], name_dict[p % len(name_dict)], None)
         for p in upair.tolist()],
        dtype=np.int8,
    )  # fmt: skip
    category = kinds[inverse.reshape(-1)] if n else np.zeros(0, np.int8)
    del pair, inverse
    coll_dicts = {int(i): _args_dict(args[i]) for i in coll_rows.tolist()}
    for i, d in coll_dicts.items():
        category[i] = classify_kineto(cats[i], names[i], d)
    side = np.array([c in _DEVICE_SIDE_CATS for c in cat_dict], dtype=bool)
    on_device = np.isin(category, np.asarray(DEVICE_CATEGORIES, np.int8)) | side[cat_codes]
    corr = _int_column(list(map(attrgetter("correlation"), args)), n)
    stream = np.where(on_device, _int_column(list(map(attrgetter("stream"), args)), n), -1)
    tid = np.where(on_device, -1, _int_column(list(map(attrgetter("tid"), xs)), n))
    ext = _int_column(list(map(attrgetter("external_id"), args)), n)
    # devices: (pid, cat, device) of each device row, named once the process labels are known
    dev_rows = np.flatnonzero(on_device).tolist()
    keys = [(xs[i].pid, cats[i], _device_of(args[i], xs[i].pid)) for i in dev_rows]
    key_codes: dict[tuple[Any, str, Any], int] = {}
    dev_codes = np.zeros(n, np.int32)
    if keys:
        dev_codes[dev_rows] = [key_codes.setdefault(k, len(key_codes) + 1) for k in keys]
    uncorrelated: list[tuple[int, Any, Any, int, bool]] = []
    need = np.flatnonzero((corr < 0) & (on_device | (category == Category.RUNTIME)))
    for i in need.tolist():
        e = xs[i]
        uncorrelated.append((i, e.pid, e.tid, int(start[i]), bool(on_device[i])))
    flow_s: dict[tuple[Any, Any, int], int] = {}
    flow_f: dict[tuple[Any, Any, int], int] = {}
    labels: dict[Any, str] = {}
    for e in others:
        if e.ph == "M":
            if e.name == "process_labels" and e.args is not None:
                lab = e.args.labels
                if isinstance(lab, str):
                    labels[e.pid] = lab
        elif uncorrelated and e.cat in _LAUNCH_FLOW_CATS and type(e.id) is int:
            t = us_to_ns(e.ts)
            if t is not None:
                (flow_s if e.ph == "s" else flow_f)[(e.pid, e.tid, t)] = e.id
    seq = np.full(n, -1, np.int64)
    nbytes = np.full(n, -1, np.int64)
    gsize = np.full(n, -1, np.int32)
    op_codes = np.zeros(n, np.int32)
    group_codes = np.zeros(n, np.int32)
    ops: dict[str, int] = {"": 0}
    groups: dict[str, int] = {"": 0}
    if coll_dicts:
        from otel_ext.analysis.loaders.kineto import _coll_fields

        for i, d in coll_dicts.items():
            op, group, sq, nb, gs = _coll_fields(d)
            op_codes[i] = ops.setdefault(op, len(ops)) if op else 0
            group_codes[i] = groups.setdefault(group, len(groups)) if group else 0
            seq[i] = sq if -_LIM < sq < _LIM else -1
            nbytes[i] = nb if nb < _LIM else -1
            gsize[i] = gs
    numeric = {
        "start_ns": start,
        "end_ns": end,
        "category": category,
        "stream": stream,
        "tid": tid,
        "correlation": corr,
        "external_id": ext,
        "coll_seq": seq,
        "coll_bytes": nbytes,
        "coll_group_size": gsize,
    }
    strings = {
        "name": (name_codes, name_dict),
        "coll_op": (op_codes, list(ops)),
        "coll_group": (group_codes, list(groups)),
    }
    return FastColumns(
        numeric, strings, header, list(key_codes), dev_codes, uncorrelated,
        (flow_s, flow_f), labels,
    )  # fmt: skip


def _device_of(a: Any, pid: Any) -> Any:
    d = a.device
    return pid if d is _U else d

