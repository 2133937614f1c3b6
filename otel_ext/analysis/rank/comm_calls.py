"""Communication kernels grouped into collective calls, one rank at a time.

Matching collectives across ranks (:mod:`otel_ext.analysis.cross.collective_match`) needs two or more
ranks and keys the metadata gives. A single rank's trace, or kernels without metadata (PyTorch
symmetric memory's ``multimem_all_reduce_kernel``, vLLM's custom all-reduce), still tell what
the rank communicated: each communication kernel, with the kernels launched from the same host
operation (``external_id``), is one collective call. Per call:

* ``op``: from the metadata (``coll_op``, normalised as the matcher does), else from the kernel-name table
  (:func:`otel_ext.analysis.classify.comm_kernel_op`), else ``"unknown"``;
* ``bytes``: from the metadata (``coll_bytes``), else from the launching host operation's first
  input tensor (its ``Input Dims`` and ``Input type`` in a PyTorch profiler trace, read by
  :func:`otel_ext.analysis.loaders.op_input_bytes.input_bytes_by_external_id`), else unknown (-1); ``bytes_from`` says which.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=50, category=C.KERNEL_COMM, rank=0, external_id=7,
...          name="void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>()"),
...     dict(start_ns=60, end_ns=80, category=C.KERNEL_COMM, rank=0, external_id=9,
...          name="ncclDevKernel_AllGather_RING_LL", coll_op="allgather", coll_bytes=4096)])
>>> g = collective_calls(t, input_bytes={("", 7): 5_114_880})
>>> [(r["op"], r["calls"], r["bytes_total"]) for r in g["by_op"]]
[('allgather', 1, 4096), ('allreduce', 1, 5114880)]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from otel_ext.analysis.classify import comm_kernel_op
from otel_ext.analysis.cross.collective_match import normalize_op
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "DTYPE_BYTES",
    "CollectiveCall",
    "CollectiveCalls",
    "OpCalls",
    "collective_calls",
    "tensor_bytes",
]

#: bytes per element of the ``Input type`` strings PyTorch's profiler writes
DTYPE_BYTES: dict[str, int] = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8,
    "int": 4, "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip


def tensor_bytes(dims: Any, dtype: Any) -> int:
    """Bytes of one tensor from its profiler ``Input Dims`` entry and ``Input type``, or -1.

    >>> tensor_bytes([2557440], "c10::BFloat16"), tensor_bytes([4, 8], "float")
    (5114880, 128)
    >>> tensor_bytes([], ""), tensor_bytes([3], "mystery")
    (-1, -1)
    """
    size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    if size is None or not isinstance(dims, list) or not dims:
        return -1
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        return -1
    return int(np.prod(np.asarray(dims, dtype=np.int64))) * size


class OpCalls(TypedDict):
    """The calls of one collective operation."""

    op: str
    calls: int
    kernels: int
    #: summed kernel time
    total_ns: int
    #: of the calls whose size is known
    bytes_total: int
    #: how many calls have a known size
    bytes_known: int


class CollectiveCall(TypedDict):
    """One collective call: a communication kernel and those launched by the same host op."""

    rank: int
    source: str
    op: str
    name: str
    start_ns: int
    end_ns: int
    kernels: int
    busy_ns: int
    #: -1 when unknown
    bytes: int
    #: ``metadata``, ``input_shapes`` or ``unknown``
    bytes_from: str


class CollectiveCalls(TypedDict):
    """The report's ``collectives.calls`` section (:func:`collective_calls`)."""

    count: int
    by_op: list[OpCalls]
    calls: list[CollectiveCall]


@dataclass(frozen=True)
class _Calls:
    """The calls of a table, one element per call in every array: its first (earliest)
    member row, its span, summed kernel time, kernel count, size and where the size came from
    (0 unknown, 1 metadata, 2 input shapes), and its operation (an index into ``op_names``)."""

    first: np.ndarray
    start: np.ndarray
    end: np.ndarray
    busy: np.ndarray
    kernels: np.ndarray
    nbytes: np.ndarray
    how: np.ndarray
    op: np.ndarray
    op_names: list[str]


def _call_members(table: EventTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The communication rows ordered by call (source, rank, external id; kernels without
    an external id are their own call), each call's rows by start, and where each call
    begins in that order."""
    ext = table["external_id"][rows]
    rank = table["rank"][rows].astype(np.int64)
    src = table["source"][rows].astype(np.int64)
    key_ext = np.where(ext < 0, -1 - rows, ext)
    order = np.lexsort((table["start_ns"][rows], key_ext, rank, src))
    k_src, k_rank, k_ext = src[order], rank[order], key_ext[order]
    new = np.r_[True, (k_src[1:] != k_src[:-1]) | (k_rank[1:] != k_rank[:-1])]
    new |= np.r_[True, k_ext[1:] != k_ext[:-1]]
    return rows[order], np.flatnonzero(new)


def _call_sizes(
    table: EventTable,
    members: np.ndarray,
    starts: np.ndarray,
    input_bytes: Mapping[tuple[str, int], int] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each call's size and where it came from: the metadata's (largest of its kernels),
    else its host operation's input size from ``input_bytes``, else -1 (unknown)."""
    first = members[starts]
    meta_max = np.maximum.reduceat(table["coll_bytes"][members].astype(np.int64), starts)
    c_bytes = np.where(meta_max >= 0, meta_max, -1)
    c_how = np.where(meta_max >= 0, 1, 0)  # 0 unknown, 1 metadata, 2 input shapes
    if input_bytes:
        sources = table.strings["source"]
        first_ext, first_src = table["external_id"][first], table["source"][first]
        for k in np.flatnonzero((meta_max < 0) & (first_ext >= 0)).tolist():
            got = input_bytes.get((sources[int(first_src[k])], int(first_ext[k])))
            if got is not None and got >= 0:
                c_bytes[k], c_how[k] = int(got), 2
    return c_bytes, c_how


def _call_ops(table: EventTable, first: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each call's operation (an index into the names returned): the metadata's, else the
    kernel-name table's, else ``unknown``; each distinct (op, name) of the first members
    named once."""
    names, ops_s = table.strings["name"], table.strings["coll_op"]
    pair = table["coll_op"][first].astype(np.int64) * (len(names) + 1) + table["name"][first]
    uniq, c_op = np.unique(pair, return_inverse=True)
    op_names = []
    for u in uniq.tolist():
        oc, nc = divmod(int(u), len(names) + 1)
        op_names.append(
            normalize_op(ops_s[oc]) if ops_s[oc] else comm_kernel_op(names[nc]) or "unknown"
        )
    return c_op.reshape(-1), op_names


def _calls_of(
    table: EventTable, rows: np.ndarray, input_bytes: Mapping[tuple[str, int], int] | None
) -> _Calls:
    """The calls of the communication rows ``rows``, their statistics computed at once."""
    members, starts = _call_members(table, rows)
    t0, t1 = table["start_ns"][members], table["end_ns"][members]
    c_bytes, c_how = _call_sizes(table, members, starts, input_bytes)
    first = members[starts]
    c_op, op_names = _call_ops(table, first)
    return _Calls(
        first=first,
        start=np.minimum.reduceat(t0, starts),
        end=np.maximum.reduceat(t1, starts),
        busy=np.add.reduceat((t1 - t0).astype(np.int64), starts),
        kernels=np.r_[starts[1:], len(members)] - starts,
        nbytes=c_bytes,
        how=c_how,
        op=c_op,
        op_names=op_names,
    )


def _by_op(c: _Calls) -> list[OpCalls]:
    """The calls summed per operation, by operation name."""
    by_op: dict[str, OpCalls] = {}
    known = c.nbytes >= 0
    for j, op in enumerate(c.op_names):
        sel = c.op == j
        g = by_op.setdefault(
            op,
            {"op": op, "calls": 0, "kernels": 0, "total_ns": 0, "bytes_total": 0,
             "bytes_known": 0},
        )  # fmt: skip
        g["calls"] += int(sel.sum())
        g["kernels"] += int(c.kernels[sel].sum())
        g["total_ns"] += int(c.busy[sel].sum())
        g["bytes_total"] += int(c.nbytes[sel & known].sum())
        g["bytes_known"] += int((sel & known).sum())
    return sorted(by_op.values(), key=lambda g: g["op"])


def _listed_calls(table: EventTable, c: _Calls, limit: int) -> list[CollectiveCall]:
    """The ``limit`` longest calls, then earliest (a stable sort, as the list's was): only
    those listed are built."""
    top = np.lexsort((c.start, -c.busy))[:limit]
    how_names = ("unknown", "metadata", "input_shapes")
    names, sources = table.strings["name"], table.strings["source"]
    ranks_col, name_col, src_col = table["rank"], table["name"], table["source"]
    return [
        {
            "rank": int(ranks_col[c.first[k]]),
            "source": sources[int(src_col[c.first[k]])],
            "op": c.op_names[int(c.op[k])],
            "name": names[int(name_col[c.first[k]])],
            "start_ns": int(c.start[k]),
            "end_ns": int(c.end[k]),
            "kernels": int(c.kernels[k]),
            "busy_ns": int(c.busy[k]),
            "bytes": int(c.nbytes[k]),
            "bytes_from": how_names[int(c.how[k])],
        }
        for k in top.tolist()
    ]


def collective_calls(
    table: EventTable,
    *,
    input_bytes: Mapping[tuple[str, int], int] | None = None,
    limit: int = 200,
) -> CollectiveCalls:
    """Communication kernels grouped into collective calls per rank (see the module docstring).

    Args:
        table: the events.
        input_bytes: host operations' input sizes, ``{(source, external id): bytes}``.
        limit: at most this many calls listed (longest first).

    Returns:
        ``{"count", "by_op", "calls"}``: ``by_op`` per operation ``op``, ``calls``,
        ``kernels``, ``total_ns`` (summed kernel time), ``bytes_total`` (of the calls whose
        size is known) and ``bytes_known`` (how many); ``calls`` each with ``rank``,
        ``source``, ``op``, ``name``, ``start_ns``, ``end_ns``, ``kernels``, ``bytes`` and
        ``bytes_from`` (``metadata``, ``input_shapes`` or ``unknown``).
    """
    rows = np.flatnonzero(table["category"] == Category.KERNEL_COMM)
    if not rows.shape[0]:
        return {"count": 0, "by_op": [], "calls": []}
    calls = _calls_of(table, rows, input_bytes)
    return {
        "count": len(calls.first),
        "by_op": _by_op(calls),
        "calls": _listed_calls(table, calls, limit),
    }
