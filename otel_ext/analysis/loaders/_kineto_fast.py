"""The fast path of the Kineto loader: streamed, chunked, typed decode, whole columns at a time.

The careful path (:mod:`otel_ext.analysis.loaders.kineto`) walks the events one by one in
Python, about 4.5 µs an event. Here the document arrives in pieces (:func:`decode_stripe`);
complete events are cut off a few MB at a time and each chunk is decoded in one call by
``msgspec`` into small typed records, one type per event phase, holding only the fields we read
(the dozens of other ``args`` members are skipped by the decoder, never built); every column
is then pulled out with C-level ``map``/``attrgetter`` passes and numpy, validated in bulk
(:class:`Accumulator`). Several processes can each decode every n-th chunk of one file; their
accumulators :func:`merge` back in the file's order.

Exactness is the careful path's: non-integer numbers reach us as their decimal text
(``float_hook=str``), never as floats, and are converted by
:func:`~otel_ext.analysis.loaders._common.us_to_ns`; integers are exact anyway.

Anything unusual (malformed JSON, an event that is not an object, an unknown ``ph``, a field of
the wrong type, a negative duration, a number out of range) makes the decoders return ``None``,
and the
caller runs the careful path, which names the file, the record and the problem, or skips the
record in ``keep_going`` mode. So the fast path never has to produce an error message and
gives the same table as the careful path on every input it accepts (a differential test checks
this on every real trace and on generated documents).

When the compiled extractor :mod:`otel_ext.analysis.loaders._cscan` is built, each chunk is
first read by it instead: it scans the JSON bytes and writes the columns directly (no Python
object per event), and hands a chunk it is not sure to read exactly as ``msgspec`` would back
to the ``msgspec`` decoder (:meth:`Accumulator.add_scanned`). Both give the same columns.

``msgspec`` is optional: without it every file takes the careful path.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import repeat
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, Union

import numpy as np

from otel_ext.analysis.classify import classify_kineto
from otel_ext.analysis.loaders._common import MAX_ABS_NS, JsonValue, us_to_ns
from otel_ext.analysis.table import (
    DEVICE_CATEGORIES,
    Category,
    concat_columns,
    constant_column,
    is_constant,
    pack_columns,
    unpack_columns,
)

__all__ = [
    "Accumulator",
    "FastColumns",
    "decode_fast",
    "decode_stream",
    "decode_stripe",
    "merge",
]

try:  # optional accelerator
    import msgspec
except ImportError:  # pragma: no cover - exercised only where msgspec is absent
    msgspec = None  # type: ignore[assignment]

try:  # optional compiled extractor (setup.py builds it where a C compiler is found)
    from otel_ext.analysis.loaders import _cscan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised only where it was not built
    _cscan = None

_LIM = 2**62
#: times the compiled extractor converts itself (within every bound the decoders check)
_SCAN_LIMIT_NS = (MAX_ABS_NS // 1000 - 1) * 1000
_MILLI = re.compile(r"-?[0-9]{1,16}\.[0-9]{3}")
_NO_POINT = methodcaller("replace", ".", "")
_DEVICE_SIDE_CATS = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation", "mtia_ccp_events"}
)
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu", "async_gpu"})
#: the Trace Event Format's phases: events of the others than ``X`` are read (flows,
#: process labels) or deliberately not loaded (instants, counters, async, samples...)
KNOWN_PHASES = frozenset(
    [
        "X",
        "s",
        "f",
        "t",
        "M",
        "B",
        "E",
        "i",
        "I",
        "C",
        "b",
        "n",
        "e",
        "P",
        "O",
        "N",
        "D",
        "R",
        "c",
        "(",
        ")",
        "T",
        "p",
        "S",
        "F",
    ]
)

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
_OTHER_COLL_KEYS.update(dst_rank="Dst Rank", src_rank="Src Rank")  # a point-to-point's peer
_ARG_KEYS = {**_COLL_KEYS, **_OTHER_COLL_KEYS, "correlation": "correlation", "stream": "stream"}
_ARG_KEYS.update(device="device", external_id="External id")


class FastColumns:
    """What the fast path extracted: numeric columns, string dictionaries, header, flows."""

    def __init__(
        self,
        numeric: dict[str, np.ndarray],
        strings: dict[str, tuple[np.ndarray, list[str]]],
        header: dict[str, JsonValue],
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
        dst_rank: Any = _U
        src_rank: Any = _U
        correlation: Any = -1
        stream: Any = -1
        device: Any = _U
        external_id: Any = -1
        labels: Any = _U

    # one record type per event phase ("ph"), so that the decoder builds only what is read:
    # complete events in full, flow and metadata events in part, every other phase empty
    class _Base(msgspec.Struct, tag_field="ph", gc=False):
        pass

    class _X(_Base, tag="X", gc=False):
        cat: Any = ""
        name: Any = None
        ts: Any = _U
        dur: Any = 0
        pid: Any = None
        tid: Any = None
        args: _Args | None = None

    class _FlowS(_Base, tag="s", gc=False):
        cat: Any = None
        id: Any = None
        pid: Any = None
        tid: Any = None
        ts: Any = None

    class _FlowF(_FlowS, tag="f", gc=False):
        pass

    class _Meta(_Base, tag="M", gc=False):
        name: Any = None
        pid: Any = None
        args: _Args | None = None

    _OTHER_PHASES = [
        msgspec.defstruct(f"_Phase{i}", [], bases=(_Base,), tag=ph, gc=False)
        for i, ph in enumerate(sorted(KNOWN_PHASES - {"X", "s", "f", "M"}))
    ]
    _Event = Union[(_X, _FlowS, _FlowF, _Meta, *_OTHER_PHASES)]  # type: ignore[valid-type]

    class _Doc(msgspec.Struct, gc=False):
        traceEvents: list[_Event] = msgspec.field(default_factory=list)
        distributedInfo: Any = _U
        baseTimeNanoseconds: Any = _U
        host_name: Any = _U
        hostname: Any = _U
        deviceProperties: Any = _U
        otherData: Any = _U

    _DECODER = msgspec.json.Decoder(_Doc | list[_Event], float_hook=str)
    _EVENTS_DECODER = msgspec.json.Decoder(list[_Event], float_hook=str)
    _HEAD_DECODER = msgspec.json.Decoder(float_hook=str)
    _EMPTY = _Args()
    _ARGS_DECODER = msgspec.json.Decoder(_Args, float_hook=str)
    _ONE_EVENT_DECODER = msgspec.json.Decoder(_Event, float_hook=str)
    _COLL_GET = attrgetter(*_COLL_KEYS)
    _NO_COLL = (_U,) * len(_COLL_KEYS)


class _Reject(Exception):
    """The input needs the careful path."""


def _args_dict(a: Any) -> dict[str, JsonValue]:
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
    # other forms ("68.0", "1.5"): each distinct value once (durations repeat a lot)
    conv = {v: us_to_ns(v) for v in dict.fromkeys(values)}
    if None in conv.values():
        raise _Reject
    return np.fromiter(map(conv.__getitem__, values), np.int64, count=n)


@lru_cache(maxsize=1 << 16)
def _classify(cat: str, name: str) -> int:
    """The category of an event without collective metadata (shared by all files)."""
    return int(classify_kineto(cat, name, None))


class _Codes:
    """A string dictionary shared by all chunks of a file (code 0 is the empty string)."""

    def __init__(self) -> None:
        self.lookup: dict[str, int] = {"": 0}

    def encode(self, values: Sequence[str], n: int) -> np.ndarray:
        lookup = self.lookup
        for s in dict.fromkeys(values):
            if s not in lookup:
                lookup[s] = len(lookup)
        return np.fromiter(map(lookup.__getitem__, values), np.int32, count=n)

    def add(self, value: str) -> int:
        return self.lookup.setdefault(value, len(self.lookup)) if value else 0


#: the types a pid or tid may have on the fast path
_SCALARS = frozenset({int, str, type(None)})


class Accumulator:
    """Columns of one file (or of one stripe of its chunks), built chunk by chunk.

    Every per-chunk record carries its chunk's index, so that the stripes of a file decoded
    by different processes merge back in the file's order (:func:`merge`).
    """

    def __init__(self) -> None:
        self.names = _Codes()
        self.cats = _Codes()
        self.ops = _Codes()
        self.groups = _Codes()
        self.kinds: dict[int, int] = {}
        self.device_keys: dict[tuple[Any, str, Any], int] = {}
        #: (chunk, columns) with codes into this accumulator's dictionaries
        self.parts: list[tuple[int, dict[str, np.ndarray]]] = []
        #: (chunk, phase, pid, tid, ts, id) of the launch flow events
        self.flows: list[tuple[int, str, Any, Any, Any, Any]] = []
        self.labels: list[tuple[int, Any, str]] = []
        #: (chunk, row in chunk, pid, tid, ts, on device) of rows without a correlation id
        self.uncorrelated: list[tuple[int, int, Any, Any, int, bool]] = []
        #: (chunk, (phase, pid, tid, ts_ns, id, ok) as bytes) of the launch flow events
        #: the compiled extractor read (``ok``: bit 0 ts present, bit 1 id an integer)
        self.flow_cols: list[tuple[int, tuple[bytes, ...]]] = []
        self.header: dict[str, JsonValue] = {}

    def add(self, events: list[Any], chunk: int) -> None:
        """Extract the columns of a list of decoded events (raises _Reject when irregular)."""
        xs = [e for e in events if type(e) is _X]
        if len(xs) < len(events):
            for e in events:
                t = type(e)
                if t is _FlowS or t is _FlowF:
                    if e.cat is not None and type(e.cat) is not str:
                        raise _Reject  # the careful path names the record
                    if e.cat in _LAUNCH_FLOW_CATS:
                        if type(e.pid) not in _SCALARS or type(e.tid) not in _SCALARS:
                            raise _Reject  # they key the flow maps: named by the careful path
                        ph = "s" if t is _FlowS else "f"
                        self.flows.append((chunk, ph, e.pid, e.tid, e.ts, e.id))
                elif t is _Meta and e.name == "process_labels" and e.args is not None:
                    lab = e.args.labels
                    if isinstance(lab, str):
                        self.labels.append((chunk, e.pid, lab))
        del events
        cats = list(map(attrgetter("cat"), xs))
        for _ in range(cats.count("Trace")):  # the profiler's own span, not a run's event
            i = cats.index("Trace")
            del cats[i], xs[i]
        n = len(xs)
        if n == 0:
            return
        names = list(map(attrgetter("name"), xs))
        if set(map(type, names)) != {str} or set(map(type, cats)) != {str}:
            raise _Reject
        # pid and tid key dictionaries: anything but a number or a string (a list, an object)
        # goes to the careful path, which names the record
        if not _SCALARS.issuperset(map(type, map(attrgetter("pid"), xs))) or not (
            _SCALARS.issuperset(map(type, map(attrgetter("tid"), xs)))
        ):
            raise _Reject
        start = _us_column(list(map(attrgetter("ts"), xs)), n)
        dur = _us_column(list(map(attrgetter("dur"), xs)), n)
        if (dur < 0).any():
            raise _Reject
        end = start + dur
        del dur
        args = [a if a is not None else _EMPTY for a in map(attrgetter("args"), xs)]
        coll = np.fromiter(map(_NO_COLL.__ne__, map(_COLL_GET, args)), bool, count=n)
        name_codes = self.names.encode(names, n)
        cat_codes = self.cats.encode(cats, n)
        coll_dicts = {i: _args_dict(args[i]) for i in np.flatnonzero(coll).tolist()}
        category, on_device = self._category(name_codes, cat_codes, coll_dicts)
        corr = _int_column(list(map(attrgetter("correlation"), args)), n)
        stream = np.where(on_device, _int_column(list(map(attrgetter("stream"), args)), n), -1)
        tid = np.where(on_device, -1, _int_column(list(map(attrgetter("tid"), xs)), n))
        ext = _int_column(list(map(attrgetter("external_id"), args)), n)
        # devices: (pid, cat, device) of each device row, named once the labels are known
        dev_rows = np.flatnonzero(on_device).tolist()
        dev_codes = np.zeros(n, np.int32)
        if dev_rows:
            kc = self.device_keys
            dev_codes[dev_rows] = [
                kc.setdefault((xs[i].pid, cats[i], _device_of(args[i], xs[i].pid)), len(kc) + 1)
                for i in dev_rows
            ]
        need = np.flatnonzero((corr < 0) & (on_device | (category == Category.RUNTIME)))
        for i in need.tolist():
            e = xs[i]
            self.uncorrelated.append((chunk, i, e.pid, e.tid, int(start[i]), bool(on_device[i])))
        seq, nbytes, gsize, op_codes, group_codes, peer = self._collectives(n, coll_dicts)
        self.parts.append(
            (chunk,
             {"start_ns": start, "end_ns": end, "category": category, "stream": stream,
              "tid": tid, "correlation": corr, "external_id": ext, "coll_seq": seq,
              "coll_bytes": nbytes, "coll_group_size": gsize, "coll_peer": peer,
              "name": name_codes,
              "coll_op": op_codes, "coll_group": group_codes, "device": dev_codes})
        )  # fmt: skip

    def _category(
        self,
        name_codes: np.ndarray,
        cat_codes: np.ndarray,
        coll_dicts: dict[int, dict[str, JsonValue]],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Category and on-device flag of each row: once per distinct (cat, name), then the
        few collective rows with their args."""
        pair = (cat_codes.astype(np.int64) << 32) | name_codes
        upair, inverse = np.unique(pair, return_inverse=True)
        kinds = self.kinds
        cat_list = list(self.cats.lookup)
        missing = [p for p in upair.tolist() if p not in kinds]
        if missing:
            name_list = list(self.names.lookup)
            for p in missing:
                kinds[p] = _classify(cat_list[p >> 32], name_list[p & 0xFFFFFFFF])
        category = np.array([kinds[p] for p in upair.tolist()], np.int8)[inverse.reshape(-1)]
        del pair, inverse
        if coll_dicts:
            name_list = list(self.names.lookup)
            for i, d in coll_dicts.items():
                cat, name = cat_list[cat_codes[i]], name_list[name_codes[i]]
                category[i] = classify_kineto(cat, name, d)
        side = np.array([c in _DEVICE_SIDE_CATS for c in cat_list], dtype=bool)
        on_device = np.isin(category, np.asarray(DEVICE_CATEGORIES, np.int8)) | side[cat_codes]
        return category, on_device

    def _collectives(
        self, n: int, coll_dicts: dict[int, dict[str, JsonValue]]
    ) -> tuple[np.ndarray, ...]:
        """seq, bytes, group size, op and group codes and point-to-point peer of the collective
        rows (-1/0 elsewhere; constant columns when the chunk has no collective row)."""
        if not coll_dicts:
            return (
                constant_column(-1, np.int64, n), constant_column(-1, np.int64, n),
                constant_column(-1, np.int32, n), constant_column(0, np.int32, n),
                constant_column(0, np.int32, n), constant_column(-1, np.int32, n),
            )  # fmt: skip
        seq = np.full(n, -1, np.int64)
        nbytes = np.full(n, -1, np.int64)
        gsize = np.full(n, -1, np.int32)
        op_codes = np.zeros(n, np.int32)
        group_codes = np.zeros(n, np.int32)
        peer = np.full(n, -1, np.int32)
        if coll_dicts:
            from otel_ext.analysis.loaders.kineto import _coll_fields, _coll_peer

            for i, d in coll_dicts.items():
                op, group, sq, nb, gs = _coll_fields(d)
                op_codes[i] = self.ops.add(op)
                group_codes[i] = self.groups.add(group)
                seq[i] = sq if -_LIM < sq < _LIM else -1
                nbytes[i] = nb if nb < _LIM else -1
                gsize[i] = gs
                peer[i] = _coll_peer(d)
        return seq, nbytes, gsize, op_codes, group_codes, peer

    def add_scanned(self, res: tuple[Any, ...], chunk: int, buf: bytes | bytearray) -> None:
        """Add what the compiled extractor read from ``buf`` (the same columns as :meth:`add`
        gives for the same events; spans in ``res`` are offsets into ``buf``)."""
        (n, names, name_local, cats, cat_local, start_b, dur_b, pid_b, tid_b, corr_b,
         stream_b, ext_b, dev_b, coll_b, *flow, labels_b, _close) = res  # fmt: skip
        if flow[0]:
            self.flow_cols.append((chunk, tuple(flow)))
        for a, b in np.frombuffer(labels_b, np.int64).reshape(-1, 2).tolist():
            e: Any = _ONE_EVENT_DECODER.decode(buf[a:b])  # a process_labels event with args
            if isinstance(e.args.labels, str):
                self.labels.append((chunk, e.pid, e.args.labels))
        if n == 0:
            return
        name_codes = _remap(self.names, names)[np.frombuffer(name_local, np.int32)]
        cat_codes = _remap(self.cats, cats)[np.frombuffer(cat_local, np.int32)]
        start = np.frombuffer(start_b, np.int64)
        end = start + np.frombuffer(dur_b, np.int64)
        coll_dicts = {
            i: _args_dict(_ARGS_DECODER.decode(buf[a:b]))
            for i, a, b in np.frombuffer(coll_b, np.int64).reshape(-1, 3).tolist()
        }
        category, on_device = self._category(name_codes, cat_codes, coll_dicts)
        corr = np.frombuffer(corr_b, np.int64)
        stream = np.where(on_device, np.frombuffer(stream_b, np.int64), -1)
        tid_raw = np.frombuffer(tid_b, np.int64)
        tid = np.where(on_device | (tid_raw <= -_LIM) | (tid_raw >= _LIM), -1, tid_raw)
        pid = np.frombuffer(pid_b, np.int64)
        dev_rows = np.flatnonzero(on_device)
        dev_codes = np.zeros(n, np.int32)
        if len(dev_rows):
            # (pid, cat, device) keys numbered in the order they first appear, as in add()
            keys = np.stack(
                [pid[dev_rows], cat_codes[dev_rows].astype(np.int64),
                 np.frombuffer(dev_b, np.int64)[dev_rows]], axis=1
            )  # fmt: skip
            uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
            cat_list = list(self.cats.lookup)
            kc = self.device_keys
            codes = np.zeros(len(uniq), np.int32)
            for j in np.argsort(first, kind="stable").tolist():
                p, c, d = uniq[j].tolist()
                codes[j] = kc.setdefault((p, cat_list[c], d), len(kc) + 1)
            dev_codes[dev_rows] = codes[inverse.reshape(-1)]
        need = np.flatnonzero((corr < 0) & (on_device | (category == Category.RUNTIME)))
        if len(need):
            self.uncorrelated.extend(
                zip(repeat(chunk), need.tolist(), pid[need].tolist(), tid_raw[need].tolist(),
                    start[need].tolist(), on_device[need].tolist())
            )  # fmt: skip
        seq, nbytes, gsize, op_codes, group_codes, peer = self._collectives(n, coll_dicts)
        self.parts.append(
            (chunk,
             {"start_ns": start, "end_ns": end, "category": category, "stream": stream,
              "tid": tid, "correlation": corr, "external_id": np.frombuffer(ext_b, np.int64),
              "coll_seq": seq, "coll_bytes": nbytes, "coll_group_size": gsize, "coll_peer": peer,
              "name": name_codes, "coll_op": op_codes, "coll_group": group_codes,
              "device": dev_codes})
        )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:  # sent back from a worker: no caches
        state = dict(self.__dict__)
        state["kinds"] = {}
        state["cats"] = _Codes()
        state["parts"] = [(chunk, pack_columns(part)) for chunk, part in self.parts]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.parts = [(chunk, unpack_columns(part)) for chunk, part in state["parts"]]


def _remap(codes: _Codes, values: list[str]) -> np.ndarray:
    """The codes in ``codes`` of a chunk's distinct strings (given in first-seen order)."""
    lookup = codes.lookup
    return np.array([lookup.setdefault(s, len(lookup)) for s in values], np.int32)


_STRING_PARTS = ("name", "coll_op", "coll_group", "device")


def merge(stripes: Sequence[Accumulator]) -> FastColumns:
    """One file's columns from the accumulators of its stripes (or of the whole file)."""
    header = stripes[0].header
    dicts: dict[str, dict[Any, int]] = {c: {"": 0} for c in _STRING_PARTS}
    dicts["device"] = {None: 0}
    ordered: list[tuple[int, dict[str, np.ndarray]]] = []
    for acc in stripes:
        sources: dict[str, list[Any]] = {
            "name": list(acc.names.lookup),
            "coll_op": list(acc.ops.lookup),
            "coll_group": list(acc.groups.lookup),
            "device": [None, *acc.device_keys],
        }
        remaps = {}
        for c, values in sources.items():
            d = dicts[c]
            remaps[c] = np.array([d.setdefault(v, len(d)) for v in values], dtype=np.int32)
        for chunk, part in acc.parts:
            for c in _STRING_PARTS:
                col = part[c]
                if is_constant(col):  # a constant column stays one
                    part[c] = constant_column(remaps[c][col[0]], np.int32, len(col))
                else:
                    part[c] = remaps[c][col]
            ordered.append((chunk, part))
        acc.parts = []
    ordered.sort(key=lambda cp: cp[0])
    offsets: dict[int, int] = {}
    rows = 0
    for chunk, part in ordered:
        offsets[chunk] = rows
        rows += len(part["start_ns"])
    keys = list(ordered[0][1]) if ordered else []
    cols = {k: concat_columns([p[k] for _, p in ordered]) for k in keys}
    del ordered
    uncorrelated = sorted(u for acc in stripes for u in acc.uncorrelated)
    flow_s: dict[tuple[Any, Any, int], int] = {}
    flow_f: dict[tuple[Any, Any, int], int] = {}
    if uncorrelated and not any(acc.flows for acc in stripes):
        flow_s, flow_f = _scanned_flow_maps(stripes)
    elif uncorrelated:
        for _, ph, pid, tid, t, fid in sorted(_flow_entries(stripes), key=itemgetter(0)):
            if type(fid) is int and t is not None:
                (flow_s if ph == "s" else flow_f)[(pid, tid, t)] = fid
    labels = {
        pid: lab
        for _, pid, lab in sorted((x for acc in stripes for x in acc.labels), key=lambda x: x[0])
    }
    if not cols:
        cols = {k: np.zeros(0, np.int32) for k in _STRING_PARTS}
        cols["start_ns"] = np.zeros(0, np.int64)
    strings = {c: (cols.pop(c), list(dicts[c])) for c in ("name", "coll_op", "coll_group")}
    device_keys = list(dicts["device"])[1:]
    return FastColumns(
        cols, strings, header, device_keys, cols.pop("device"),
        [(offsets[c] + r, pid, tid, ts, dev) for c, r, pid, tid, ts, dev in uncorrelated],
        (flow_s, flow_f), labels,
    )  # fmt: skip


def _scanned_flow_maps(
    stripes: Sequence[Accumulator],
) -> tuple[dict[tuple[Any, Any, int], int], dict[tuple[Any, Any, int], int]]:
    """``(pid, tid, ts) -> id`` of the flow starts and of the other flow phases, from the
    compiled extractor's columns, in file order (a later duplicate wins, as in
    :func:`_flow_entries`' path); entries without a time or an integer id are left out."""
    parts = sorted((cf for acc in stripes for cf in acc.flow_cols), key=itemgetter(0))
    if not parts:
        return {}, {}

    def col(i: int, dtype: Any) -> np.ndarray:
        return np.concatenate([np.frombuffer(f[i], dtype) for _, f in parts])

    ph, pid, tid, ts, fid, ok = (col(0, np.uint8), col(1, np.int64), col(2, np.int64),
                                 col(3, np.int64), col(4, np.int64), col(5, np.uint8))  # fmt: skip
    valid = (ok & 3) == 3
    maps = []
    for m in (valid & (ph == ord("s")), valid & (ph != ord("s"))):
        keys = zip(pid[m].tolist(), tid[m].tolist(), ts[m].tolist())
        maps.append(dict(zip(keys, fid[m].tolist())))
    return maps[0], maps[1]


def _flow_entries(stripes: Sequence[Accumulator]) -> list[tuple[int, str, Any, Any, Any, Any]]:
    """(chunk, phase, pid, tid, ts in ns or None, id or None) of every launch flow event."""
    out: list[tuple[int, str, Any, Any, Any, Any]] = []
    for acc in stripes:
        out.extend((c, ph, pid, tid, us_to_ns(ts), fid) for c, ph, pid, tid, ts, fid in acc.flows)
        for c, (ph_b, pid_b, tid_b, ts_b, id_b, ok_b) in acc.flow_cols:
            ok = np.frombuffer(ok_b, np.uint8)
            ts = np.frombuffer(ts_b, np.int64).tolist()
            fid = np.frombuffer(id_b, np.int64).tolist()
            out.extend(
                zip(repeat(c), ph_b.decode("ascii"), np.frombuffer(pid_b, np.int64).tolist(),
                    np.frombuffer(tid_b, np.int64).tolist(),
                    [t if o & 1 else None for t, o in zip(ts, ok.tolist())],
                    [f if o & 2 else None for f, o in zip(fid, ok.tolist())])
            )  # fmt: skip
    return out


def _header(doc: Any) -> dict[str, JsonValue]:
    header: dict[str, JsonValue] = {}
    for key in ("distributedInfo", "baseTimeNanoseconds", "host_name", "hostname",
                "deviceProperties", "otherData"):  # fmt: skip
        v = getattr(doc, key)
        if v is not _U:
            header[key] = v
    return header


class _NoGC:
    """Pause the cyclic collector: JSON data has no reference cycles, and the collector would
    only re-walk the hundreds of thousands of new objects again and again."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()


def decode_fast(data: bytes | str) -> FastColumns | None:
    """Decode a whole Kineto document into columns, or None when the careful path must run."""
    if msgspec is None:
        return None
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogatepass")
    view = memoryview(data)
    return decode_stream(view[i : i + _CHUNK] for i in range(0, len(data), _CHUNK))


#: bytes of JSON text decoded at a time (the decoded events of one chunk are freed before
#: the next one is decoded, so a file never exists whole as Python objects)
_CHUNK = 1 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_AFTER_EVENT = re.compile(rb"\s*,\s*\{")


def _split_point(buf: bytes | bytearray, lo: int = 0) -> tuple[int, int] | None:
    """(end of the last complete-looking event, start of the next) in ``buf``, or None.

    A candidate is a ``}`` followed by ``,`` and ``{``. It may be a false one (inside a string
    or a nested array of objects); then the chunk before it is not valid JSON and the decoder
    says so. A chunk that decodes as an array of objects, starting at a true event start,
    can only end at a true event end: anything else leaves a string or an object open.
    """
    pos = len(buf)
    for _ in range(8):
        q = buf.rfind(b"}", lo, pos)
        if q < 0:
            return None
        m = _AFTER_EVENT.match(buf, q + 1)
        if m is not None:
            return q + 1, m.end() - 1
        pos = q
    return None


def decode_stream(pieces: Iterable[bytes | memoryview]) -> FastColumns | None:
    """Decode a Kineto document given as successive pieces of its bytes, chunk by chunk.

    Returns None when the careful path must run (malformed or irregular input, or no
    ``msgspec``).
    """
    acc = decode_stripe(pieces, 0, 1)
    return None if acc is None else merge([acc])


def decode_stripe(
    pieces: Iterable[bytes | memoryview], index: int, count: int
) -> Accumulator | None:
    """Decode the chunks ``index``, ``index + count``, ... of a Kineto document.

    The top-level object's text up to the ``traceEvents`` array is kept; complete events are
    cut off the front of the buffer as they arrive (the cut points depend on the bytes only,
    so every stripe cuts alike) and a stripe decodes its own chunks; at the end, the kept head
    and the rest (the last events, the closing ``]`` and any members after the array) are
    decoded as one small document, which also gives the header. With ``count == 1`` a cut
    that turns out false is simply read past; with more stripes it returns None, as for any
    irregular input.
    """
    if msgspec is None:
        return None
    from otel_ext.config import MAX_RECORD_BYTES, resolve

    max_record = resolve(MAX_RECORD_BYTES)
    acc = Accumulator()
    buf = bytearray()
    prefix: bytes | None = None
    splitting = True
    chunk = 0
    searched = 0  # bytes of ``buf`` already searched for a key or a cut
    with _NoGC():
        try:
            for piece in pieces:
                buf += piece
                if len(buf) > max_record:
                    # no event boundary (or no traceEvents key) for that long: one record that
                    # large is refused rather than held (memory stays bounded)
                    from otel_ext.errors import InputError

                    raise InputError(
                        f"no event boundary within {max_record} bytes "
                        "(OTEL_EXT_MAX_RECORD_BYTES): a record that large is refused",
                        record="file",
                    )
                if prefix is None:
                    m = _EVENTS_KEY.search(buf, max(0, searched - 64))
                    if m is None:
                        searched = len(buf)
                        continue
                    prefix = bytes(buf[: m.end()])
                    if not prefix.lstrip().startswith(b"{"):
                        return None
                    try:  # the key must be a member of the top-level object
                        _HEAD_DECODER.decode(prefix + b"]}")
                    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                        return None
                    del buf[: m.end()]
                    searched = 0
                if not splitting or len(buf) < _CHUNK // 2:
                    continue
                cut = _split_point(buf, max(0, searched - 64))
                if cut is None:
                    searched = len(buf)
                    continue
                scanned = None
                if chunk % count == index and _cscan is not None:
                    scanned = _cscan.scan(buf, 0, cut[0], False, _SCAN_LIMIT_NS)
                if scanned is not None:
                    acc.add_scanned(scanned, chunk, buf)
                    del buf[: cut[1]]
                    searched = 0
                elif chunk % count == index:
                    text = b"[" + buf[: cut[0]] + b"]"
                    try:
                        events = _EVENTS_DECODER.decode(text)
                    except msgspec.DecodeError:
                        if count > 1:
                            return None
                        splitting = len(buf) < 8 * _CHUNK  # stop trying if it keeps failing
                        continue
                    except (msgspec.ValidationError, RecursionError):
                        return None
                    del buf[: cut[1]]
                    searched = 0
                    del text
                    acc.add(events, chunk)
                    del events
                else:
                    del buf[: cut[1]]
                    searched = 0
                chunk += 1
            if prefix is not None and _scan_tail(acc, prefix, buf, chunk, chunk % count == index):
                return acc
            text = bytes(prefix) + bytes(buf) if prefix else bytes(buf)
            del buf
            try:
                doc = _DECODER.decode(text)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                return None
            del text
            if isinstance(doc, list):
                events, acc.header = doc, {}
            else:
                events, acc.header = doc.traceEvents, _header(doc)
            del doc
            if chunk % count == index:
                acc.add(events, chunk)
            return acc
        except (_Reject, TypeError, ValueError, RecursionError):
            # irregular input (a field of an unexpected type): the careful path names it
            return None


def _scan_tail(acc: Accumulator, prefix: bytes, buf: bytearray, chunk: int, own: bool) -> bool:
    """Read the last events with the compiled extractor and the header with ``msgspec``.

    The header is the document with its events array emptied (the head kept before it and
    whatever follows its ``]``). Returns False, having changed nothing, when the ``msgspec``
    path must read the tail: the extractor is absent or unsure, the rest is not a valid
    document, or it might name ``traceEvents`` again.
    """
    if _cscan is None:
        return False
    scanned = _cscan.scan(buf, 0, len(buf), True, _SCAN_LIMIT_NS)
    if scanned is None:
        return False
    rest = bytes(buf[scanned[-1] :])
    if b"traceEvents" in rest:
        return False
    try:
        doc = _DECODER.decode(prefix + rest)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    if not isinstance(doc, _Doc) or doc.traceEvents:
        return False
    acc.header = _header(doc)
    if own:
        acc.add_scanned(scanned, chunk, buf)
    return True


def _device_of(a: Any, pid: Any) -> Any:
    d = a.device
    return pid if d is _U else d
