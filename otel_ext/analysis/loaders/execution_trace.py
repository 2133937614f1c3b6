"""PyTorch Execution Traces (Chakra schema): operators, their tensors, collectives; joined to the
Kineto trace of the same process.

An Execution Trace (``ExecutionTraceObserver``) is one JSON object: ``schema``, ``pid``,
``nodes`` (one per recorded operator: ``id``, ``name``, ``parent``, ``rf_id``, ``tid``, inputs
and outputs with their types). It records *what* ran and on which tensors, not *when*: no node
has a time. So an Execution Trace alone gives no timeline rows; it gives

* **collectives**: each ``record_param_comms`` node (``wait`` left out) with its operation,
  bytes (its input tensors' ``numel × element size``), sequence number, process group
  (PyTorch's handle or name), the rank that recorded it, and the group's size (a trailing
  world size, or the length of the split-size lists of an all-to-all on the same group);
* **data dependencies**: operator B depends on operator A when B reads a tensor whose last
  writer before B (in record order) is A, and neither contains the other.

Both schemas are read: ``1.0.x`` (``inputs`` a list beside ``input_types``) and ``1.1.x``
(``inputs``/``outputs`` objects of ``values``/``types``, ids in ``attrs``). A tensor value is
``[tensor id, storage id, offset, numel, element size, device]``.

**Joined to the Kineto trace of the same process** (:func:`join_execution_traces`, after
every file is loaded): a Kineto file is the ET's partner when it has the ET's rank (or, for an
ET that names none, any Kineto file) and their operators agree. Operators are matched by
record-function id: the ET's ``rf_id`` is the Kineto operator's ``External id`` when both
were recorded in one profiler session; the join is used when at least
:data:`RF_ID_AGREEMENT` of the ET operators found by id have the same name there. Otherwise
(an ET recorded in another iteration than the Kineto trace, as in the DLRM set) the
collectives alone are joined by order: the ET's collectives in record order against the
Kineto ``record_param_comms`` operators that launched communication kernels, in time order,
used only when the counts and every pair's operation agree. Then

* each matched collective's communication kernels (launched, same thread, inside the
  operator) get its ``coll_op``, ``coll_bytes`` and ``coll_group_size``, so the collectives'
  analysis computes bandwidths (``algbw``, ``busbw``) for traces whose kernels carry no
  metadata;
* each data dependency whose two operators launched device work becomes a ``data_dep`` on
  the consumer's first device row: the ``correlation`` of the producer's last device row
  (:mod:`otel_ext.analysis.rank.data_deps` gives it to the critical path).

>>> import json
>>> doc = {"schema": "1.0.1", "pid": 7, "nodes": [
...   {"id": 2, "name": "aten::rand", "rf_id": 4, "parent": 1, "tid": 1, "inputs": [[8]],
...    "input_types": ["GenericList[Int]"], "outputs": [[6, 7, 0, 8, 4, "cuda:0"]],
...    "output_types": ["Tensor(float)"]},
...   {"id": 3, "name": "record_param_comms", "rf_id": 5, "parent": 1, "tid": 1,
...    "inputs": [[[6, 7, 0, 8, 4, "cuda:0"]], 3, 99, 1, "allreduce", [], [], 4],
...    "input_types": ["GenericList[Tensor(float)]", "Int", "Int", "Int", "String",
...                    "GenericList[]", "GenericList[]", "Int"],
...    "outputs": [], "output_types": []}]}
>>> et = parse_execution_trace(json.dumps(doc).encode(), path="et.json")
>>> et.rank, [(c.op, c.nbytes, c.seq, c.group_size) for c in et.collectives]
(1, [('allreduce', 32, 3, 4)])
>>> et.deps
[(4, 5)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from otel_ext.analysis.loaders._common import JsonValue
from otel_ext.errors import InputError

__all__ = [
    "RF_ID_AGREEMENT",
    "EtCollective",
    "ExecutionTrace",
    "join_execution_traces",
    "join_into_results",
    "looks_like_execution_trace",
    "parse_execution_trace",
]

#: share of the ET operators found by record-function id whose names must agree for the join
RF_ID_AGREEMENT = 0.9

_HEAD_SCHEMA = re.compile(r'\A\{\s*"schema"\s*:\s*"[0-9][^"]{0,60}"')


def looks_like_execution_trace(head: str) -> bool:
    """Whether a file's first characters are an Execution Trace's (a ``schema`` version first,
    a ``nodes`` list, operator fields).

    >>> looks_like_execution_trace('{"schema": "1.0.1", "pid": 5, "nodes": [{"name": "a", "rf_id": 1')
    True
    >>> looks_like_execution_trace('{"schemaVersion": 1, "traceEvents": []}')
    False
    """
    first = head.lstrip()[:8192]
    return (
        _HEAD_SCHEMA.match(first) is not None
        and '"nodes"' in first
        and ('"rf_id"' in first or '"op_schema"' in first or '"attrs"' in first)
    )


@dataclass
class EtCollective:
    """One collective an Execution Trace recorded (a ``record_param_comms`` node)."""

    rf_id: int
    op: str
    nbytes: int
    seq: int
    group: str
    rank: int
    group_size: int = -1


class EtSummary(TypedDict):
    """An Execution Trace in brief (:meth:`ExecutionTrace.summary`)."""

    operators: int
    collectives: int
    data_dependencies: int
    rank: int


class EtJoin(TypedDict, total=False):
    """How an Execution Trace was joined (:func:`join_execution_traces`)."""

    path: str
    partner: str | None
    join: str | None
    collectives: int
    data_dependencies: int
    rf_id_names_agree: tuple[int, int]
    why: str
    operators_aligned: tuple[int, int]
    dependencies_by: str


@dataclass
class ExecutionTrace:
    """What the join needs of one Execution Trace (a few integers per operator)."""

    path: str
    pid: int
    schema: str
    rank: int
    #: per operator, in record (``rf_id``) order
    rf_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    names: list[str] = field(default_factory=list)
    collectives: list[EtCollective] = field(default_factory=list)
    #: ``(producer rf_id, consumer rf_id)``
    deps: list[tuple[int, int]] = field(default_factory=list)

    def summary(self) -> EtSummary:
        """How many operators, collectives and data dependencies the trace has, its rank."""
        return {
            "operators": len(self.names),
            "collectives": len(self.collectives),
            "data_dependencies": len(self.deps),
            "rank": self.rank,
        }


def _attrs(node: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A node's ``attrs`` list as a dict by name."""
    out: dict[str, JsonValue] = {}
    attrs = node.get("attrs")
    if isinstance(attrs, list):
        for a in attrs:
            if isinstance(a, dict) and isinstance(a.get("name"), str):
                out[a["name"]] = a.get("value")
    return out


def _io(node: dict[str, JsonValue], key: str) -> tuple[list[Any], list[str]]:
    """A node's input or output values and types, in either schema."""
    raw = node.get(key)
    if isinstance(raw, dict):  # schema 1.1: {"values": [...], "types": [...], ...}
        values, types = raw.get("values"), raw.get("types")
    else:
        values, types = raw, node.get(key[:-1] + "_types")
    values = values if isinstance(values, list) else []
    types = types if isinstance(types, list) else []
    return values, [t if isinstance(t, str) else "" for t in types]


def _tensors(value: Any, typ: str) -> list[list[Any]]:
    """The tensor values (``[id, storage, offset, numel, itemsize, device]``) in one input."""
    if typ.startswith("Tensor") and _is_tensor(value):
        return [value]
    if typ.startswith("GenericList[Tensor") and isinstance(value, list):
        return [v for v in value if _is_tensor(v)]
    return []


def _is_tensor(v: Any) -> bool:
    return (
        isinstance(v, list)
        and len(v) >= 5
        and all(type(x) is int for x in v[:5])
        and v[3] >= 0
        and v[4] >= 0
    )


def _int(v: Any, default: int = -1) -> int:
    return v if type(v) is int and -(2**63) <= v < 2**63 else default


#: Execution-Trace collective names to the collectives' normalised operations
_ET_OPS = {
    "allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather",
    "all_gather": "allgather", "_allgather_base": "allgather", "allgather_into_tensor_coalesced":
    "allgather", "reduce_scatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter", "all_to_all": "alltoall",
    "all_to_allv": "alltoall", "alltoall": "alltoall", "alltoall_base": "alltoall",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "barrier": "barrier",
}  # fmt: skip
_NOT_COLLECTIVES = frozenset({"wait", ""})


def _collective(
    node: dict[str, JsonValue], rf_id: int, record: str, path: str
) -> EtCollective | None:
    values, types = _io(node, "inputs")
    k = next((i for i, t in enumerate(types) if t == "String"), -1)
    if k < 0 or k >= len(values) or not isinstance(values[k], str):
        raise InputError("record_param_comms without a collective name", path=path, record=record)
    name = values[k]
    if name in _NOT_COLLECTIVES:
        return None
    nbytes = 0
    scalars: list[Any] = []
    for v, t in zip(values[:k], types[:k]):
        ts = _tensors(v, t)
        if ts:
            nbytes += sum(int(x[3]) * int(x[4]) for x in ts)
        else:
            scalars.append(v)
    seq, group, rank = -1, "", -1
    if len(scalars) >= 3:
        seq = _int(scalars[-3])
        g = scalars[-2]
        group = str(g) if isinstance(g, (int, str)) else ""
        if isinstance(g, list) and g and isinstance(g[0], (str, int)):
            group = str(g[0])  # (name, description) in later versions
        rank = _int(scalars[-1])
    after = values[k + 1 :]
    splits = [v for v in after if isinstance(v, list)]
    size = next((v for v in after if type(v) is int and v > 0), -1)
    if size < 0 and splits and splits[0]:
        size = len(splits[0])
    op = _ET_OPS.get(name.lstrip("_"), _ET_OPS.get(name, name.lower()))
    return EtCollective(rf_id, op, nbytes if nbytes > 0 else -1, seq, group, rank, size)


def parse_execution_trace(data: bytes, *, path: str) -> ExecutionTrace:
    """An Execution Trace's operators, collectives and data dependencies.

    Raises:
        InputError: not JSON, not an object with a ``nodes`` list, or a node of the wrong
            shape (named ``node K``).
    """
    import msgspec

    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise InputError(f"malformed JSON: {e}", path=path, record="file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InputError("an Execution Trace without a 'nodes' list", path=path, record="file")
    nodes = doc["nodes"]
    parsed: list[tuple[int, int, int, int, str, list[int], list[int], int]] = []
    colls: list[EtCollective] = []
    for k, node in enumerate(nodes):
        record = f"node {k}"
        if not isinstance(node, dict):
            raise InputError("node is not an object", path=path, record=record)
        attrs = _attrs(node)
        name = node.get("name")
        nid = _int(node.get("id"), -2)
        rf = _int(node.get("rf_id", attrs.get("rf_id")), -2)
        parent = _int(node.get("parent", attrs.get("parent")), -1)
        tid = _int(node.get("tid", attrs.get("tid")), -1)
        if not isinstance(name, str) or nid == -2 or rf == -2:
            raise InputError(
                "node needs a string 'name' and integer 'id' and 'rf_id'", path=path, record=record
            )
        ins, in_types = _io(node, "inputs")
        outs, out_types = _io(node, "outputs")
        in_ids = [int(x[0]) for v, t in zip(ins, in_types) for x in _tensors(v, t)]
        out_ids = [int(x[0]) for v, t in zip(outs, out_types) for x in _tensors(v, t)]
        parsed.append((rf, nid, parent, tid, name, in_ids, out_ids, k))
        if name == "record_param_comms":
            c = _collective(node, rf, record, path)
            if c is not None:
                colls.append(c)
    parsed.sort(key=lambda p: (p[0], p[7]))
    # ancestors by id, for "neither contains the other"
    parent_of = {p[1]: p[2] for p in parsed}
    rf_of_id = {p[1]: p[0] for p in parsed}

    def ancestors(nid: int) -> set[int]:
        out: set[int] = set()
        while nid in parent_of and nid not in out and len(out) < 10_000:
            out.add(nid)
            nid = parent_of[nid]
        return out

    writer: dict[int, int] = {}  # tensor id -> node id of its last writer so far
    deps: set[tuple[int, int]] = set()
    for rf, nid, _parent, _tid, _name, in_ids, out_ids, _k in parsed:
        if in_ids:
            mine = None
            for t in in_ids:
                w = writer.get(t)
                if w is None or w == nid:
                    continue
                if mine is None:
                    mine = ancestors(nid)
                if w in mine or nid in ancestors(w):
                    continue
                deps.add((rf_of_id[w], rf))
        for t in out_ids:
            writer[t] = nid
    ranks = {c.rank for c in colls if c.rank >= 0}
    sizes: dict[str, int] = {}
    for c in colls:
        if c.group_size > 0:
            sizes.setdefault(c.group, c.group_size)
    for c in colls:
        if c.group_size < 0 and c.group in sizes:
            c.group_size = sizes[c.group]
    colls.sort(key=lambda c: c.rf_id)
    return ExecutionTrace(
        path=path,
        pid=_int(doc.get("pid")),
        schema=str(doc.get("schema", "")),
        rank=ranks.pop() if len(ranks) == 1 else -1,
        rf_id=np.asarray([p[0] for p in parsed], dtype=np.int64),
        names=[p[4] for p in parsed],
        collectives=colls,
        deps=sorted(deps),
    )


# -- the join ---------------------------------------------------------------------------------


@dataclass
class _Partner:
    """One Kineto table's operators, as the join reads them."""

    table: Any  # EventTable
    ops: np.ndarray  # rows of host operators, by external id
    ext: np.ndarray  # their external ids (sorted)


def _host_ops(table: Any) -> _Partner:
    from otel_ext.analysis.table import Category

    cat = table["category"]
    rows = np.flatnonzero(
        ((cat == Category.CPU_OP) | (cat == Category.STEP)) & (table["external_id"] >= 0)
    )
    ext = table["external_id"][rows]
    o = np.argsort(ext, kind="stable")
    return _Partner(table, rows[o], ext[o])


def _rows_of(p: _Partner, rf_ids: np.ndarray) -> np.ndarray:
    """The Kineto operator row of each record-function id (-1 where none)."""
    if len(p.ext) == 0:
        return np.full(len(rf_ids), -1, dtype=np.int64)
    pos = np.clip(np.searchsorted(p.ext, rf_ids), 0, len(p.ext) - 1)
    return np.where(p.ext[pos] == rf_ids, p.ops[pos], -1)


def _rf_agreement(et: ExecutionTrace, p: _Partner) -> tuple[int, int]:
    """(operators found by id, of which the same name)."""
    rows = _rows_of(p, et.rf_id)
    found = rows >= 0
    if not found.any():
        return 0, 0
    names = p.table.strings["name"]
    codes = p.table["name"][rows[found]].tolist()
    ours = [n for n, f in zip(et.names, found.tolist()) if f]
    same = sum(1 for c, n in zip(codes, ours) if names[int(c)] == n)
    return int(found.sum()), same


def _device_rows_of_ops(table: Any, op_rows: np.ndarray) -> list[np.ndarray]:
    """Per host operator row, the device rows launched from inside it (same thread), in
    start order."""
    from otel_ext.analysis.table import DEVICE_CATEGORIES, Category

    cat = table["category"]
    rt = np.flatnonzero((cat == Category.RUNTIME) & (table["correlation"] >= 0))
    dev = np.flatnonzero(
        np.isin(cat, [int(c) for c in DEVICE_CATEGORIES]) & (table["correlation"] >= 0)
    )
    out: list[np.ndarray] = []
    if len(rt) == 0 or len(dev) == 0:
        return [np.zeros(0, np.int64) for _ in op_rows]
    dev_by_corr = dev[np.argsort(table["correlation"][dev], kind="stable")]
    dcorr = table["correlation"][dev_by_corr]
    rt_tid, rt_start = table["tid"][rt], table["start_ns"][rt]
    o = np.lexsort((rt_start, rt_tid))
    rt, rt_tid, rt_start = rt[o], rt_tid[o], rt_start[o]
    start, end, tid = table["start_ns"], table["end_ns"], table["tid"]
    for r in op_rows.tolist():
        lo = np.searchsorted(rt_tid, tid[r], side="left")
        hi = np.searchsorted(rt_tid, tid[r], side="right")
        a = lo + np.searchsorted(rt_start[lo:hi], start[r], side="left")
        b = lo + np.searchsorted(rt_start[lo:hi], end[r], side="right")
        corr = table["correlation"][rt[a:b]]
        i0 = np.searchsorted(dcorr, corr, side="left")
        i1 = np.searchsorted(dcorr, corr, side="right")
        got = [dev_by_corr[x:y] for x, y in zip(i0.tolist(), i1.tolist()) if y > x]
        rows = np.concatenate(got) if got else np.zeros(0, np.int64)
        out.append(rows[np.argsort(start[rows], kind="stable")])
    return out


def _collective_op_rows(table: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """Kineto ``record_param_comms`` rows that launched communication kernels (time order)
    and those kernels."""
    from otel_ext.analysis.table import Category

    code = table.code_of("name", "record_param_comms")
    if code < 0:
        return np.zeros(0, np.int64), []
    rows = np.flatnonzero(table["name"] == code)
    rows = rows[np.argsort(table["start_ns"][rows], kind="stable")]
    launched = _device_rows_of_ops(table, rows)
    keep = [
        i for i, d in enumerate(launched) if (table["category"][d] == Category.KERNEL_COMM).any()
    ]
    return rows[keep], [
        launched[i][table["category"][launched[i]] == Category.KERNEL_COMM] for i in keep
    ]


def _compatible(et_op: str, kernel_name: str) -> bool:
    from otel_ext.analysis.classify import comm_kernel_op

    k = comm_kernel_op(kernel_name)
    if k is None or k == et_op:
        return True
    return et_op == "alltoall" and k == "sendrecv"  # NCCL runs all-to-all as send/recv pairs


def _apply_collectives(table: Any, pairs: list[tuple[EtCollective, np.ndarray, int]]) -> int:
    """Write each collective's fields into its kernels (and its host operator)."""
    if not pairs:
        return 0
    op_col = table.writable("coll_op")
    nbytes = table.writable("coll_bytes")
    gsize = table.writable("coll_group_size")
    strings = table.strings["coll_op"] = list(table.strings["coll_op"])
    codes = {s: i for i, s in enumerate(strings)}
    n = 0
    for c, kernels, op_row in pairs:
        code = codes.get(c.op)
        if code is None:
            code = codes[c.op] = len(strings)
            strings.append(c.op)
        rows = np.r_[kernels, [op_row]].astype(np.int64)
        op_col[rows] = code
        if c.nbytes > 0:
            nbytes[rows] = c.nbytes
        if c.group_size > 0:
            gsize[rows] = c.group_size
        n += len(kernels) > 0
    return n


#: an operator-order alignment counts only runs of at least this many operators named alike
_MIN_ALIGNED_RUN = 8
#: and is used when those runs hold at least this share of the ET's operators
ORDER_ALIGNMENT = 0.8


def _aligned_rows(et: ExecutionTrace, p: _Partner) -> tuple[dict[int, int], int]:
    """The ET operators aligned by name with the Kineto operators, both in record order
    (``rf_id``; ``External id``), counting only runs of :data:`_MIN_ALIGNED_RUN` or more:
    ``{rf_id: Kineto row}`` and how many ET operators it holds."""
    import difflib

    names = p.table.strings["name"]
    theirs = [names[int(c)] for c in p.table["name"][p.ops].tolist()]
    sm = difflib.SequenceMatcher(None, et.names, theirs, autojunk=False)
    out: dict[int, int] = {}
    rf = et.rf_id.tolist()
    for a, b, size in sm.get_matching_blocks():
        if size >= _MIN_ALIGNED_RUN:
            for k in range(size):
                out[rf[a + k]] = int(p.ops[b + k])
    return out, len(out)


def _apply_deps(
    table: Any, et: ExecutionTrace, p: _Partner, aligned: dict[int, int] | None = None
) -> int:
    """``data_dep`` of each consumer's first device row: the producer's last device row's
    correlation (the producer that ended last, when several). Operators are found by id, or
    through ``aligned`` (``{rf_id: row}``) when given."""
    if not et.deps:
        return 0
    prod = np.asarray([d[0] for d in et.deps], dtype=np.int64)
    cons = np.asarray([d[1] for d in et.deps], dtype=np.int64)
    if aligned is None:
        pr, cr = _rows_of(p, prod), _rows_of(p, cons)
    else:
        pr = np.asarray([aligned.get(x, -1) for x in prod.tolist()], dtype=np.int64)
        cr = np.asarray([aligned.get(x, -1) for x in cons.tolist()], dtype=np.int64)
    ok = (pr >= 0) & (cr >= 0)
    if not ok.any():
        return 0
    ops = np.unique(np.r_[pr[ok], cr[ok]])
    launched = dict(zip(ops.tolist(), _device_rows_of_ops(table, ops)))
    end, start = table["end_ns"], table["start_ns"]
    best: dict[int, int] = {}  # consumer's first device row -> producer's last device row
    for a, b in zip(pr[ok].tolist(), cr[ok].tolist()):
        da, db = launched[a], launched[b]
        if len(da) == 0 or len(db) == 0:
            continue
        last = int(da[np.argmax(end[da])])
        first = int(db[0])
        if end[last] > start[first] or last == first:
            continue  # not a wait the trace shows (the producer was still running)
        if first not in best or end[last] > end[best[first]]:
            best[first] = last
    if not best:
        return 0
    col = table.writable("data_dep")
    corr = table["correlation"]
    for first, last in best.items():
        col[first] = corr[last]
    return len(best)


def join_execution_traces(traces: Sequence[ExecutionTrace], kineto: Sequence[Any]) -> list[EtJoin]:
    """Join each Execution Trace to the Kineto table of the same process (see the module
    docstring), writing collective fields and data dependencies into that table in place.

    Args:
        traces: the parsed Execution Traces.
        kineto: the loaded Kineto tables (their ``meta`` has ``rank`` and ``path``).

    Returns:
        One record per trace: ``path``, ``partner`` (the Kineto file, or None), ``join``
        (``rf_id``, ``collective order`` or None), ``collectives`` (kernels' collectives
        given sizes), ``data_dependencies`` (device edges written), ``why`` (when not joined).
    """
    out = []
    partners = [(_host_ops(t), t) for t in kineto]
    taken: set[int] = set()
    for et in traces:
        rec: EtJoin = {"path": et.path, "partner": None, "join": None,
                               "collectives": 0, "data_dependencies": 0}  # fmt: skip
        cands = [
            (i, p)
            for i, (p, t) in enumerate(partners)
            if i not in taken and (et.rank < 0 or t.meta.get("rank", -1) in (et.rank, -1))
        ]
        scored = []
        for i, p in cands:
            found, same = _rf_agreement(et, p)
            scored.append((same, found, i, p))
        scored.sort(key=lambda s: (-s[0], s[2]))
        chosen = None
        for same, found, i, p in scored:
            if found >= 5 and same >= RF_ID_AGREEMENT * found:
                chosen, rec["join"] = (i, p), "rf_id"
                break
        if chosen is None and et.collectives:
            for same, found, i, p in scored:
                pairs = _order_pairs(et, p.table)
                if pairs is not None:
                    chosen, rec["join"] = (i, p), "collective order"
                    rec["rf_id_names_agree"] = (same, found)
                    rec["collectives"] = _apply_collectives(p.table, pairs)
                    break
        if chosen is None:
            rec["why"] = (
                "no Kineto trace was loaded"
                if not partners
                else f"no Kineto trace of rank {et.rank} was loaded"
                if not cands
                else "no loaded Kineto trace has its operators (record-function ids, names) "
                "or its collectives (count and operations, in order)"
            )
            out.append(rec)
            continue
        i, p = chosen
        taken.add(i)
        rec["partner"] = p.table.meta.get("path")
        if rec["join"] == "rf_id":
            rows = _rows_of(p, np.asarray([c.rf_id for c in et.collectives], dtype=np.int64))
            launched = _device_rows_of_ops(p.table, rows[rows >= 0])
            from otel_ext.analysis.table import Category

            pairs = []
            for c, r, d in zip(
                [c for c, r in zip(et.collectives, rows.tolist()) if r >= 0],
                rows[rows >= 0].tolist(),
                launched,
            ):
                pairs.append((c, d[p.table["category"][d] == Category.KERNEL_COMM], r))
            rec["collectives"] = _apply_collectives(p.table, pairs)
            rec["data_dependencies"] = _apply_deps(p.table, et, p)
        else:
            aligned, n_aligned = _aligned_rows(et, p)
            rec["operators_aligned"] = (n_aligned, len(et.names))
            if n_aligned >= ORDER_ALIGNMENT * len(et.names):
                rec["data_dependencies"] = _apply_deps(p.table, et, p, aligned)
                rec["dependencies_by"] = "operator order"
        out.append(rec)
    return out


def _order_pairs(
    et: ExecutionTrace, table: Any
) -> list[tuple[EtCollective, np.ndarray, int]] | None:
    """The ET's collectives against the Kineto collective operators by order, or None when
    their counts or any pair's operation disagree."""
    rows, kernels = _collective_op_rows(table)
    colls = [c for c in et.collectives if c.op not in ("barrier",)]
    if len(rows) != len(colls) or not colls:
        return None
    names = table.strings["name"]
    for c, ks in zip(colls, kernels):
        if not all(_compatible(c.op, names[int(x)]) for x in table["name"][ks].tolist()):
            return None
    return [(c, ks, int(r)) for c, ks, r in zip(colls, kernels, rows.tolist())]


def join_into_results(results: Sequence[Any]) -> None:
    """:func:`join_execution_traces` over loaded files (``FileResult`` objects): the Execution
    Traces joined to the Kineto tables, each trace's ``note`` saying with what and how."""
    traces = [r for r in results if r.execution_trace is not None]
    kineto = [r.table for r in results if r.format == "kineto" and r.table is not None]
    joined = join_execution_traces([r.execution_trace for r in traces], kineto)
    for r, rec in zip(traces, joined):
        if rec["partner"] is None:
            r.note += f"; not joined: {rec['why']}"
        else:
            why = ""
            if "rf_id_names_agree" in rec:
                same, found = rec["rf_id_names_agree"]
                why = f" (by rf_id {same} of {found} operators found agree on the name)"
            deps = ""
            if "operators_aligned" in rec:
                n, m = rec["operators_aligned"]
                how = "by operator order" if "dependencies_by" in rec else "none: too few"
                deps = f" ({how}: {n} of {m} operators aligned by name)"
            r.note += (
                f"; joined to {rec['partner']} by {rec['join']}{why}: {rec['collectives']} "
                f"collectives sized, {rec['data_dependencies']} device data dependencies{deps}"
            )
