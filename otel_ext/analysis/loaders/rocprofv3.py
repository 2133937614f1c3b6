"""rocprofv3's JSON output (``rocprofiler-sdk-tool``) into the event table.

AMD's profiler (``rocprofv3 --kernel-trace --memory-copy-trace --hip-trace --rccl-trace
--output-format json``) writes one document::

    {"rocprofiler-sdk-tool": [{"metadata": {"node": {"hostname": ...}, "pid": ...},
                               "agents": [...], "strings": {...}, "kernel_symbols": [...],
                               "buffer_records": {"kernel_dispatch": [...], "hip_api": [...],
                                                  "rccl_api": [...], "memory_copy": [...]},
                               ...}]}

What becomes rows (times are the records' own nanoseconds):

* ``kernel_dispatch``: device kernels, named by their kernel symbol (``kernel_symbols``,
  by ``kernel_id``; the demangled name when the tool wrote one). Communication or
  computation as :mod:`otel_ext.analysis.classify` decides for every loader: a kernel
  launched by an RCCL API call (same internal correlation id) is communication whatever its
  name; otherwise the conventions' communication-kernel table decides by name (RCCL's
  ``ncclDevKernel_Generic`` and the rest). ``stream`` is the HIP stream (``stream_id``) when
  the record has one, else the hardware queue; ``correlation`` the internal correlation id
  (a HIP launch and its kernel share it), ``external_id`` the external one when not 0.
* ``memory_copy``: copies (``MEMCPY``), named by direction (``MEMORY_COPY_HOST_TO_DEVICE``
  ...), on the GPU end's device, ``bytes_accessed`` the bytes when recorded.
* ``hip_api`` and ``rccl_api``: host runtime calls (``RUNTIME``), named by the operation
  (``hipLaunchKernel``, ``ncclAllReduce``), ``tid`` the thread.

Left out: HSA API calls (the layer below HIP), markers, memory allocations, scratch memory,
page-migration and counter records. Devices are named ``HOST/gpuN`` with ``N`` the agent's
GPU index (``logical_node_type_id``), as the Kineto loader names them; the rank is unknown
(-1) unless the file carries one: rocprofv3 knows processes, not ranks.

The document is read in pieces (:mod:`otel_ext.analysis.loaders._jsonpull`): one record at
a time in memory, the kept fields in compact columns. Sections may come in any order (names
are resolved at the end).

>>> doc = (b'{"rocprofiler-sdk-tool": [{"metadata": {"node": {"hostname": "n1"}},'
...        b' "agents": [{"id": {"handle": 7}, "type": 2, "logical_node_type_id": 0}],'
...        b' "kernel_symbols": [{"kernel_id": 1, "kernel_name": "gemm.kd"}],'
...        b' "buffer_records": {"kernel_dispatch": [{"start_timestamp": 10,'
...        b' "end_timestamp": 30, "correlation_id": {"internal": 5, "external": 0},'
...        b' "dispatch_info": {"agent_id": {"handle": 7}, "queue_id": {"handle": 3},'
...        b' "kernel_id": 1}}]}}]}')
>>> t = load_rocprofv3_pieces([doc], ctx=LoadContext("908_results.json"))
>>> len(t), t.string("name", 0), t.string("device", 0), int(t["stream"][0]), int(t["category"][0])
(1, 'gemm.kd', 'n1/gpu0', 3, 3)
"""

from __future__ import annotations

import array
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from otel_ext.analysis.classify import classify_kernel
from otel_ext.analysis.loaders._common import MAX_ABS_NS, ColumnBuilder, JsonValue, LoadContext
from otel_ext.analysis.loaders._jsonpull import JsonPull, PullError
from otel_ext.analysis.table import Category, EventTable, constant_column
from otel_ext.errors import InputError

__all__ = ["TOOL_KEY", "load_rocprofv3_pieces", "looks_like_rocprofv3"]

#: the document's one top-level member
TOOL_KEY = "rocprofiler-sdk-tool"
_HEAD_RE = re.compile(r'^\{\s*"rocprofiler-sdk-tool"\s*:\s*\[')
#: buffer-record sections read into rows (others are stepped over an element at a time)
_API_SECTIONS = ("hip_api", "rccl_api")
_AGENT_GPU = 2  # rocprofiler_agent_type_t: 1 CPU, 2 GPU
#: a record's name, made only when the record is bad
Where = Callable[[], str]


def looks_like_rocprofv3(head: str) -> bool:
    """Whether a document's first characters are rocprofv3's JSON.

    >>> looks_like_rocprofv3('{"rocprofiler-sdk-tool":[{"metadata":{')
    True
    >>> looks_like_rocprofv3('{"traceEvents": []}')
    False
    """
    return _HEAD_RE.match(head.lstrip()) is not None


def _handle(rec: Any, key: str) -> int | None:
    """``rec[key]["handle"]`` as an int (a signed 64-bit one), or None."""
    v = rec.get(key) if isinstance(rec, dict) else None
    h = v.get("handle") if isinstance(v, dict) else None
    return h if type(h) is int and -(2**63) <= h < 2**63 else None


def _times(rec: dict[str, JsonValue]) -> tuple[int, int] | str:
    """The record's start and end, or the problem with them."""
    s, e = rec.get("start_timestamp"), rec.get("end_timestamp")
    if type(s) is not int or type(e) is not int:
        return "'start_timestamp' and 'end_timestamp' must be integers (nanoseconds)"
    if not (0 <= s < MAX_ABS_NS and 0 <= e < MAX_ABS_NS):
        return f"time out of range: {s!r:.30} .. {e!r:.30}"
    if e < s:
        return f"ends before it starts ({e} < {s})"
    return s, e


def _correlation(rec: dict[str, JsonValue]) -> tuple[int, int] | str:
    c = rec.get("correlation_id")
    if c is None:
        return -1, -1
    if not isinstance(c, dict):
        return "'correlation_id' is not an object"
    internal, external = c.get("internal", -1), c.get("external", 0)
    if type(internal) is not int or type(external) is not int:
        return "'correlation_id' members must be integers"
    if not (-(2**63) <= internal < 2**63 and -(2**63) <= external < 2**63):
        return "'correlation_id' out of range"
    return internal, (external if external else -1)


class _Rows:
    """The columns being filled (compact buffers), and what resolves them at the end."""

    def __init__(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        self.b = ColumnBuilder(
            ["start_ns", "end_ns", "category", "stream", "tid", "correlation", "external_id",
             "bytes_accessed"],
            [],
        )  # fmt: skip
        # per row, resolved at the end: the agent (-1 host; a copy: its two ends), the
        # kernel id (-1: not a kernel), the operation (kind, op; -1: a kernel), the record
        self.agent = array.array("q")
        self.agent2 = array.array("q")
        self.kernel_id = array.array("q")
        self.kind = array.array("q")
        self.op = array.array("q")
        self.index = array.array("q")
        self.tool = 0
        self.rccl_corr: set[int] = set()
        self.metadata: dict[str, JsonValue] = {}
        self.agents: list[Any] = []
        self.kernel_names: dict[int, str] = {}
        self.op_names: list[Any] = []  # strings.buffer_records: [{"kind", "operations"}]

    def _common(self, rec: Any, where: Where, what: str) -> tuple[int, int, int, int] | None:
        """Times and correlation ids of a record, or None (reported) when bad."""
        if not isinstance(rec, dict):
            self.ctx.bad(where(), f"a {what} record is not a JSON object")
            return None
        times = _times(rec)
        corr = _correlation(rec)
        if isinstance(times, str) or isinstance(corr, str):
            self.ctx.bad(where(), times if isinstance(times, str) else str(corr))
            return None
        return times[0], times[1], corr[0], corr[1]

    def _row(
        self,
        got: tuple[int, int, int, int],
        rec: dict[str, JsonValue],
        cat: Category,
        *,
        stream: int = -1,
        bytes_accessed: float = -1.0,
    ) -> None:
        """One row, appended straight to the column buffers."""
        tid = rec.get("thread_id")
        num = self.b.num
        num["start_ns"].append(got[0])
        num["end_ns"].append(got[1])
        num["category"].append(int(cat))
        num["stream"].append(stream)
        num["tid"].append(tid if type(tid) is int and 0 <= tid < 2**63 else -1)
        num["correlation"].append(got[2])
        num["external_id"].append(got[3])
        num["bytes_accessed"].append(bytes_accessed)

    def dispatch(self, rec: Any, where: Where, index: int) -> None:
        got = self._common(rec, where, "kernel dispatch")
        if got is None:
            return
        info = rec.get("dispatch_info")
        if not isinstance(info, dict):
            self.ctx.bad(where(), "'dispatch_info' is missing or not an object")
            return
        kid, agent, queue = (
            info.get("kernel_id"),
            _handle(info, "agent_id"),
            _handle(info, "queue_id"),
        )
        if type(kid) is not int or agent is None or queue is None:
            self.ctx.bad(where(), "'dispatch_info' needs integer 'kernel_id', 'agent_id.handle' "
                                "and 'queue_id.handle'")  # fmt: skip
            return
        if not 0 <= kid < 2**63:
            self.ctx.bad(where(), f"'kernel_id' out of range: {kid}")
            return
        stream = _handle(rec, "stream_id")
        self._more(agent, -1, kid, -1, -1, index)
        self._row(got, rec, Category.KERNEL_COMPUTE, stream=stream if stream is not None else queue)

    def _kind_op(self, rec: Any, where: Where) -> tuple[int, int] | None:
        """A record's ``kind`` and ``operation`` codes, or None (a named bad record)."""
        kind, op = rec.get("kind"), rec.get("operation")
        if (
            type(kind) is not int
            or type(op) is not int
            or not (0 <= kind < 2**31 and 0 <= op < 2**31)
        ):
            self.ctx.bad(where(), "'kind' and 'operation' must be small non-negative integers")
            return None
        return kind, op

    def api(self, section: str, rec: Any, where: Where, index: int) -> None:
        got = self._common(rec, where, "API")
        if got is None:
            return
        kind_op = self._kind_op(rec, where)
        if kind_op is None:
            return
        kind, op = kind_op
        if section == "rccl_api" and got[2] >= 0:
            self.rccl_corr.add(got[2])
        self._more(-1, -1, -1, kind, op, index)
        self._row(got, rec, Category.RUNTIME)

    def copy(self, rec: Any, where: Where, index: int) -> None:
        got = self._common(rec, where, "memory copy")
        if got is None:
            return
        kind_op = self._kind_op(rec, where)
        if kind_op is None:
            return
        kind, op = kind_op
        dst, src = _handle(rec, "dst_agent_id"), _handle(rec, "src_agent_id")
        nbytes = rec.get("bytes")
        # the GPU end decides the device (resolved at the end: dst when it is a GPU, else src)
        self._more(-1 if dst is None else dst, -1 if src is None else src, -1, kind, op, index)
        ok = type(nbytes) is int and 0 <= nbytes < 2**62
        self._row(got, rec, Category.MEMCPY, bytes_accessed=float(nbytes) if ok else -1.0)

    def _more(self, agent: int, agent2: int, kid: int, kind: int, op: int, index: int) -> None:
        self.agent.append(agent if -(2**63) <= agent < 2**63 else -1)
        self.agent2.append(agent2 if -(2**63) <= agent2 < 2**63 else -1)
        self.kernel_id.append(kid)
        self.kind.append(kind)
        self.op.append(op)
        self.index.append(index)


def _read_tool(r: JsonPull, rows: _Rows) -> None:
    """One element of the ``rocprofiler-sdk-tool`` array (one process's records)."""
    ctx = rows.ctx
    r.begin_object()
    for key in r.members():
        if key == "metadata":
            md = r.value()
            if not isinstance(md, dict):
                ctx.bad(r.where(), "'metadata' is not an object")
            elif not rows.metadata:
                rows.metadata = md
        elif key == "agents":
            for agent in r.elements():
                rows.agents.append(agent)
        elif key == "strings":
            s = r.value()
            ops = s.get("buffer_records") if isinstance(s, dict) else None
            if isinstance(ops, list) and not rows.op_names:
                rows.op_names = ops
        elif key == "kernel_symbols":
            for sym in r.elements():
                kid = sym.get("kernel_id") if isinstance(sym, dict) else None
                if type(kid) is not int:
                    ctx.bad(r.where(), "a kernel symbol without an integer 'kernel_id'")
                    continue
                name = sym.get("demangled_kernel_name") or sym.get("kernel_name") or ""
                rows.kernel_names[kid] = name if isinstance(name, str) else str(name)
        elif key == "buffer_records":
            r.begin_object()
            for section in r.members():
                if section == "kernel_dispatch":
                    for i, rec in enumerate(r.elements()):
                        rows.dispatch(rec, r.where, i)
                elif section in _API_SECTIONS:
                    for i, rec in enumerate(r.elements()):
                        rows.api(section, rec, r.where, i)
                elif section == "memory_copy":
                    for i, rec in enumerate(r.elements()):
                        rows.copy(rec, r.where, i)
                else:
                    r.skip()
        else:
            r.skip()


def load_rocprofv3_pieces(
    pieces: Iterable[bytes], *, ctx: LoadContext, max_record: int | None = None
) -> EventTable:
    """Load a rocprofv3 JSON document given as byte pieces (see the module docstring).

    Args:
        pieces: the (gunzipped) document in pieces.
        ctx: the file's load context (its path names errors; ``keep_going`` skips bad
            records).
        max_record: the largest single value read whole (default
            ``OTEL_EXT_MAX_RECORD_BYTES``).

    Returns:
        The file's rows (``meta``: ``format``, ``path``, ``rank`` -1, ``host``, ``pid``,
        ``agents``: the GPU agents' product names).

    Raises:
        InputError: malformed or truncated JSON, not this format, or (unless ``keep_going``)
            a bad record, named by its path in the document
            (``rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[12]``).
    """
    if max_record is None:
        from otel_ext.config import MAX_RECORD_BYTES, resolve

        max_record = resolve(MAX_RECORD_BYTES)
    rows = _Rows(ctx)
    r = JsonPull(pieces, max_record=max_record)
    try:
        r.begin_object()
        seen = False
        for key in r.members():
            if key != TOOL_KEY:
                r.skip()
                continue
            seen = True
            r.begin_array()
            for k in r.array_items():
                rows.tool = k
                _read_tool(r, rows)
        r.end_document()
    except PullError as e:
        raise InputError(e.message, path=ctx.path, record=e.where) from None
    if not seen:
        raise InputError(f"no '{TOOL_KEY}' member: not rocprofv3 JSON", path=ctx.path,
                         record="file")  # fmt: skip
    return _finish(rows, ctx)


def _finish(rows: _Rows, ctx: LoadContext) -> EventTable:
    """Names, categories and devices resolved; the table built."""
    md = rows.metadata
    node = md.get("node")
    host = node.get("hostname") if isinstance(node, dict) else None
    host = host if isinstance(host, str) else ""
    gpus: dict[int, str] = {}
    products: list[str] = []
    for k, a in enumerate(rows.agents):
        h = _handle(a, "id")
        if h is None:
            ctx.bad(
                f"{TOOL_KEY}[{rows.tool}].agents[{k}]", "an agent without an integer 'id.handle'"
            )
            continue
        if a.get("type") == _AGENT_GPU:
            idx = a.get("logical_node_type_id")
            idx = idx if type(idx) is int else len(gpus)
            gpus[h] = f"{host}/gpu{idx}" if host else f"gpu{idx}"
            products.append(str(a.get("product_name") or a.get("name") or ""))
    t = rows.b.build()
    n = len(t)
    kid = np.frombuffer(rows.kernel_id, dtype=np.int64) if n else np.zeros(0, np.int64)
    kind = np.frombuffer(rows.kind, dtype=np.int64) if n else np.zeros(0, np.int64)
    op = np.frombuffer(rows.op, dtype=np.int64) if n else np.zeros(0, np.int64)
    names: dict[str, int] = {"": 0}
    name_col = np.zeros(n, dtype=np.int32)
    cat = t.writable("category")
    keep = np.ones(n, dtype=bool)
    # kernels: names from the symbols; communication by launch context, then the table
    is_k = kid >= 0
    corr = t["correlation"]
    by_launch = np.isin(corr, np.fromiter(rows.rccl_corr, np.int64, len(rows.rccl_corr)))
    for k in np.unique(kid[is_k]).tolist():
        sel = np.flatnonzero(kid == k)
        name = rows.kernel_names.get(k)
        if name is None:
            for row in sel.tolist():
                ctx.bad(_dispatch_record(rows, row), f"kernel_id {k} names no kernel symbol")
            keep[sel] = False
            continue
        name_col[sel] = names.setdefault(name, len(names))
        cat[sel] = int(classify_kernel(name))
    cat[is_k & by_launch] = int(Category.KERNEL_COMM)
    # API calls and copies: strings.buffer_records[kind].operations[op]
    is_op = ~is_k
    if is_op.any():
        pairs = np.unique(np.stack([kind[is_op], op[is_op]], axis=1), axis=0)
        for kd, o in pairs.tolist():
            label = f"kind{kd}:op{o}"
            if kd < len(rows.op_names) and isinstance(rows.op_names[kd], dict):
                ops = rows.op_names[kd].get("operations")
                if isinstance(ops, list) and o < len(ops) and isinstance(ops[o], str):
                    label = ops[o]
            name_col[is_op & (kind == kd) & (op == o)] = names.setdefault(label, len(names))
    # devices: a kernel's agent; a copy's GPU end (dst when a GPU, else src); host rows none
    agent = np.frombuffer(rows.agent, dtype=np.int64) if n else np.zeros(0, np.int64)
    agent2 = np.frombuffer(rows.agent2, dtype=np.int64) if n else np.zeros(0, np.int64)
    is_copy = cat == int(Category.MEMCPY)
    gpu_handles = np.fromiter(gpus, np.int64, len(gpus))
    agent = np.where(is_copy & ~np.isin(agent, gpu_handles), agent2, agent)
    devices: dict[str, int] = {"": 0}
    dev = np.zeros(n, dtype=np.int32)
    for a in np.unique(agent[agent >= 0]).tolist():
        sel = agent == a
        d = gpus.get(a)
        if d is None:
            d = f"{host}/agent{a}" if host else f"agent{a}"
            for row in np.flatnonzero(sel & is_k).tolist():
                ctx.bad(
                    _dispatch_record(rows, row), f"agent {a} is not among the file's GPU agents"
                )
        dev[sel] = devices.setdefault(d, len(devices))
    t.columns["name"] = name_col
    t.strings["name"] = list(names)
    t.columns["device"] = dev
    t.strings["device"] = list(devices)
    if host:
        t.strings["host"] = ["", host]
        t.columns["host"] = constant_column(1, np.int32, n)
    t.strings["source"] = ["", ctx.path]
    t.columns["source"] = constant_column(1, np.int32, n)
    if not keep.all():
        t = t.select(keep)
    pid = md.get("pid")
    t.meta.update(format="rocprofv3", path=ctx.path, rank=-1, world_size=-1, host=host,
                  pid=pid if type(pid) is int else None, devices=products)  # fmt: skip
    return t.compact()


def _dispatch_record(rows: _Rows, row: int) -> str:
    return f"{TOOL_KEY}[{rows.tool}].buffer_records.kernel_dispatch[{rows.index[row]}]"
