"""Communication kernels grouped into collective calls, one rank at a time.

Matching collectives across ranks (:mod:`otel_ext.analysis.collectives`) needs two or more
ranks and keys the metadata gives. A single rank's trace, or kernels without metadata (PyTorch
symmetric memory's ``multimem_all_reduce_kernel``, vLLM's custom all-reduce), still tell what
the rank communicated: each communication kernel, with the kernels launched from the same host
operation (``external_id``), is one collective call. Per call:

* ``op``: from the metadata (``coll_op``, normalised as the matcher does), else from the kernel-name table
  (:func:`otel_ext.analysis.classify.comm_kernel_op`), else ``"unknown"``;
* ``bytes``: from the metadata (``coll_bytes``), else from the launching host operation's first
  input tensor (its ``Input Dims`` and ``Input type`` in a PyTorch profiler trace, read by
  :func:`input_bytes_by_external_id`), else unknown (-1); ``bytes_from`` says which.

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

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from otel_ext.analysis.classify import comm_kernel_op
from otel_ext.analysis.collectives import normalize_op
from otel_ext.analysis.table import Category, EventTable
from otel_ext.errors import InputError

__all__ = ["DTYPE_BYTES", "collective_calls", "input_bytes_by_external_id", "tensor_bytes"]

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


def input_bytes_by_external_id(path: str | Path) -> dict[tuple[str, int], int]:
    """``{(source, external id): bytes}`` of the first sized input of each host operation in a
    PyTorch profiler trace (``source`` is the path as the loader names the file).

    Raises:
        InputError: the file cannot be read or is not a JSON trace.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"cannot read the trace: {exc}", path=str(p)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not JSON: {exc}", path=str(p)) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError("no 'traceEvents' list", path=str(p))
    out: dict[tuple[str, int], int] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("cat") != "cpu_op":
            continue
        args = ev.get("args")
        if not isinstance(args, dict):
            continue
        ext = args.get("External id")
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not isinstance(ext, int) or not isinstance(dims, list) or not isinstance(types, list):
            continue
        for d, ty in zip(dims, types):
            b = tensor_bytes(d, ty)
            if b >= 0:
                out[(str(p), ext)] = b
                break
    return out


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
    op_cache: dict[tuple[int, int], str] = {}
    calls: list[dict[str, Any]] = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        members = rows[order[a:b]]
        first = int(members[0])
        oc, nc = int(table["coll_op"][first]), int(table["name"][first])
        op = op_cache.get((oc, nc))
        if op is None:
            op = normalize_op(ops_s[oc]) if ops_s[oc] else comm_kernel_op(names[nc]) or "unknown"
            op_cache[(oc, nc)] = op
        meta = table["coll_bytes"][members]
        nbytes, how = -1, "unknown"
        if (meta >= 0).any():
            nbytes, how = int(meta.max()), "metadata"
        elif input_bytes is not None and int(table["external_id"][first]) >= 0:
            got = input_bytes.get(
                (sources[int(table["source"][first])], int(table["external_id"][first]))
            )
            if got is not None and got >= 0:
                nbytes, how = int(got), "input_shapes"
        dur = table["end_ns"][members] - table["start_ns"][members]
        calls.append(
            {
                "rank": int(table["rank"][first]),
                "source": sources[int(table["source"][first])],
                "op": op,
                "name": names[nc],
                "start_ns": int(table["start_ns"][members].min()),
                "end_ns": int(table["end_ns"][members].max()),
                "kernels": int(members.shape[0]),
                "busy_ns": int(dur.sum()),
                "bytes": nbytes,
                "bytes_from": how,
            }
        )
    by_op: dict[str, dict[str, Any]] = {}
    for c in calls:
        g = by_op.setdefault(
            c["op"],
            {
                "op": c["op"],
                "calls": 0,
                "kernels": 0,
                "total_ns": 0,
                "bytes_total": 0,
                "bytes_known": 0,
            },
        )
        g["calls"] += 1
        g["kernels"] += c["kernels"]
        g["total_ns"] += c["busy_ns"]
        if c["bytes"] >= 0:
            g["bytes_total"] += c["bytes"]
            g["bytes_known"] += 1
    calls.sort(key=lambda c: (-c["busy_ns"], c["start_ns"]))
    return {
        "count": len(calls),
        "by_op": sorted(by_op.values(), key=lambda g: g["op"]),
        "calls": calls[:limit],
    }
