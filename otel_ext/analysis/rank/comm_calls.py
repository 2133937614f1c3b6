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
from typing import Any

import numpy as np

from otel_ext.analysis.classify import comm_kernel_op
from otel_ext.analysis.cross.collective_match import normalize_op
from otel_ext.analysis.table import Category, EventTable

__all__ = ["DTYPE_BYTES", "collective_calls", "tensor_bytes"]

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


def collective_calls(
    table: EventTable,
    *,
    input_bytes: Mapping[tuple[str, int], int] | None = None,
    limit: int = 200,
) -> dict[str, Any]:
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
    cat = table["category"]
    rows = np.flatnonzero(cat == Category.KERNEL_COMM)
    if not rows.shape[0]:
        return {"count": 0, "by_op": [], "calls": []}
    names = table.strings["name"]
    sources = table.strings["source"]
    ops_s = table.strings["coll_op"]
    ext = table["external_id"][rows]
    rank = table["rank"][rows].astype(np.int64)
    src = table["source"][rows].astype(np.int64)
    # one call per (source, rank, external id); kernels without an external id are their own
    solo = ext < 0
    key_ext = np.where(solo, -1 - rows, ext)
    order = np.lexsort((table["start_ns"][rows], key_ext, rank, src))
    k_src, k_rank, k_ext = src[order], rank[order], key_ext[order]
    new = np.r_[True, (k_src[1:] != k_src[:-1]) | (k_rank[1:] != k_rank[:-1])]
    new |= np.r_[True, k_ext[1:] != k_ext[:-1]]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(order)]
    # per call, at once: its members are rows[order[a:b]], its first member the earliest
    members = rows[order]
    first = members[starts]
    t0 = table["start_ns"][members]
    t1 = table["end_ns"][members]
    c_start = np.minimum.reduceat(t0, starts)
    c_end = np.maximum.reduceat(t1, starts)
    c_busy = np.add.reduceat((t1 - t0).astype(np.int64), starts)
    c_kernels = ends - starts
    meta_max = np.maximum.reduceat(table["coll_bytes"][members].astype(np.int64), starts)
    c_bytes = np.where(meta_max >= 0, meta_max, -1)
    c_how = np.where(meta_max >= 0, 1, 0)  # 0 unknown, 1 metadata, 2 input shapes
    first_ext = table["external_id"][first]
    first_src = table["source"][first]
    if input_bytes:
        for k in np.flatnonzero((meta_max < 0) & (first_ext >= 0)).tolist():
            got = input_bytes.get((sources[int(first_src[k])], int(first_ext[k])))
            if got is not None and got >= 0:
                c_bytes[k], c_how[k] = int(got), 2
    # the operation of each distinct (coll_op, name) of the first members, named once
    pair = table["coll_op"][first].astype(np.int64) * (len(names) + 1) + table["name"][first]
    uniq, c_op = np.unique(pair, return_inverse=True)
    op_names = []
    for u in uniq.tolist():
        oc, nc = divmod(int(u), len(names) + 1)
        op_names.append(
            normalize_op(ops_s[oc]) if ops_s[oc] else comm_kernel_op(names[nc]) or "unknown"
        )
    c_op = c_op.reshape(-1)
    by_op: dict[str, dict[str, Any]] = {}
    known = c_bytes >= 0
    for j, op in enumerate(op_names):
        sel = c_op == j
        g = by_op.setdefault(
            op,
            {"op": op, "calls": 0, "kernels": 0, "total_ns": 0, "bytes_total": 0,
             "bytes_known": 0},
        )  # fmt: skip
        g["calls"] += int(sel.sum())
        g["kernels"] += int(c_kernels[sel].sum())
        g["total_ns"] += int(c_busy[sel].sum())
        g["bytes_total"] += int(c_bytes[sel & known].sum())
        g["bytes_known"] += int((sel & known).sum())
    # longest first, then earliest (a stable sort, as the list's was); only those listed built
    top = np.lexsort((c_start, -c_busy))[:limit]
    how_names = ("unknown", "metadata", "input_shapes")
    ranks_col, name_col = table["rank"], table["name"]
    calls = [
        {
            "rank": int(ranks_col[first[k]]),
            "source": sources[int(first_src[k])],
            "op": op_names[int(c_op[k])],
            "name": names[int(name_col[first[k]])],
            "start_ns": int(c_start[k]),
            "end_ns": int(c_end[k]),
            "kernels": int(c_kernels[k]),
            "busy_ns": int(c_busy[k]),
            "bytes": int(c_bytes[k]),
            "bytes_from": how_names[int(c_how[k])],
        }
        for k in top.tolist()
    ]
    return {
        "count": len(starts),
        "by_op": sorted(by_op.values(), key=lambda g: g["op"]),
        "calls": calls,
    }
