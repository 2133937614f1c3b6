"""The ``c10d`` and ``symm_mem`` dispatcher ops the collective instrumentation hooks, and how
to read their arguments (process group, payload tensors, ``async_op``, peer).

A table and small pure readers, shared by the recording kernels (:mod:`._dist_hooks`) and the
tracker that sequences their records (:mod:`._dist_tracker`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from opentelemetry import context as otel_context


class _Op(NamedTuple):
    """How to read one ``c10d`` dispatcher op's arguments."""

    op: str  # accel.collective.op
    pg: int  # argument index of the process group
    payload: int | None  # argument index of the payload
    role: str  # "t" tensor, "list" tensors, "lists" lists of tensors, "" none
    async_at: int | None  # argument index of async_op (collectives)
    peer_at: int | None  # argument index of the peer group rank (p2p)
    send: bool = False


#: ``c10d`` dispatcher op -> how to read it (schemas of torch 2.13).
_OPS: dict[str, _Op] = {
    "allreduce_": _Op("all_reduce", 1, 0, "list", 4, None),
    "allreduce_coalesced_": _Op("all_reduce_coalesced", 1, 0, "list", 3, None),
    "allgather_": _Op("all_gather", 2, 0, "lists", 3, None),
    "_allgather_base_": _Op("all_gather_into_tensor", 2, 0, "t", 3, None),
    "allgather_coalesced_": _Op("all_gather_coalesced", 2, 0, "lists", 3, None),
    "allgather_into_tensor_coalesced_": _Op(
        "all_gather_into_tensor_coalesced", 2, 0, "list", 3, None
    ),
    "reduce_scatter_": _Op("reduce_scatter", 2, 1, "lists", 4, None),
    "_reduce_scatter_base_": _Op("reduce_scatter_tensor", 2, 1, "t", 4, None),
    "reduce_scatter_tensor_coalesced_": _Op(
        "reduce_scatter_tensor_coalesced", 2, 1, "list", 4, None
    ),
    "alltoall_": _Op("all_to_all", 2, 1, "list", 3, None),
    "alltoall_base_": _Op("all_to_all_single", 2, 1, "t", 5, None),
    "broadcast_": _Op("broadcast", 1, 0, "list", 4, None),
    "reduce_": _Op("reduce", 1, 0, "list", 5, None),
    "gather_": _Op("gather", 2, 1, "list", 4, None),
    "scatter_": _Op("scatter", 2, 0, "list", 4, None),
    "barrier": _Op("barrier", 1, None, "", 3, None),
    "send": _Op("send", 1, 0, "list", None, 2, send=True),
    "recv_": _Op("recv", 1, 0, "list", None, 2),
    "recv_any_source_": _Op("recv", 1, 0, "list", None, None),
}
#: The ``c10d`` dispatcher ops the instrumentor hooks.
HOOKED_OPS = tuple(_OPS)


class _SymmOp(NamedTuple):
    """How to read one ``symm_mem`` op (symmetric memory; the group is named by a string)."""

    op: str  # accel.collective.op
    payload: int  # argument index of the payload tensor
    group_name: int  # argument index of ``str group_name``


#: The symmetric-memory collectives (``torch.distributed._symmetric_memory``; CUDA kernels),
#: hooked by the native kernels where this torch has them. They return no ``Work``: the
#: collective runs on the issuing stream, and its span covers the issuing call (timing
#: ``enqueue``).
_SYMM_MEM_OPS: dict[str, _SymmOp] = {
    "one_shot_all_reduce": _SymmOp("all_reduce", 0, 2),
    "one_shot_all_reduce_out": _SymmOp("all_reduce", 0, 2),
    "one_shot_all_reduce_copy": _SymmOp("all_reduce", 1, 3),
    "one_shot_all_reduce_copy_out": _SymmOp("all_reduce", 1, 3),
    "two_shot_all_reduce_": _SymmOp("all_reduce", 0, 2),
    "two_shot_all_reduce_out": _SymmOp("all_reduce", 0, 2),
    "multimem_all_reduce_": _SymmOp("all_reduce", 0, 2),
    "multimem_one_shot_all_reduce": _SymmOp("all_reduce", 0, 2),
    "multimem_one_shot_all_reduce_out": _SymmOp("all_reduce", 0, 2),
    "multimem_all_gather_out": _SymmOp("all_gather_into_tensor", 2, 1),
    "reduce_scatter_out": _SymmOp("reduce_scatter_tensor", 0, 1),
}
#: Dispatch keys of the ``symm_mem`` recording kernels (their kernels are CUDA-only).
_SYMM_MEM_KEYS: tuple[str, ...] = ("AutogradCUDA",)
#: The recording kernels sit at the autograd keys, above the backends' kernels: from there
#: ``redispatch`` continues with the GIL released. (A kernel at the ``CPU`` key would have to
#: call the original with ``get_kernel(...).call_boxed``, which keeps the GIL across the
#: backend's enqueue; gloo's worker frees a finished work's tensors under the lock enqueue
#: takes, and that needs the GIL: a deadlock, seen in the benchmark.)
_DISPATCH_KEYS = ("AutogradCPU", "AutogradCUDA")


_ROLES = {"": 0, "t": 1, "list": 2, "lists": 3}


def _otel_context_var() -> Any:
    """The ``ContextVar`` holding OpenTelemetry's current context, or ``None``.

    The native kernel reads it directly (``PyContextVar_Get``); with another runtime context
    implementation (``OTEL_PYTHON_CONTEXT``) it has none and spans get no parent.
    """
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, contextvars.ContextVar) else None


def _functional_ops() -> list[str]:
    """The ``_c10d_functional`` ops that issue a collective (every one but ``wait_tensor``)."""
    names = []
    for full in torch._C._dispatch_get_all_op_names():
        if full.startswith("_c10d_functional::"):
            name = full.split("::", 1)[1].split(".", 1)[0]
            if name != "wait_tensor" and name not in names:
                names.append(name)
    return names


def _pass_through(op: Any) -> Callable[..., Any]:
    redispatch = op.redispatch
    below = torch._C._after_autograd_keyset

    def functional_kernel(keyset: Any, *args: Any) -> Any:
        return redispatch(keyset & below, *args)

    return functional_kernel


def _tensors(value: Any, role: str) -> list[torch.Tensor]:
    if role == "t":
        return [value] if isinstance(value, torch.Tensor) else []
    if role == "list":
        return [t for t in value if isinstance(t, torch.Tensor)]
    if role == "lists":
        return [t for inner in value for t in inner if isinstance(t, torch.Tensor)]
    return []


def _first_tensor(args: tuple[Any, ...]) -> Any:
    first = args[0] if args else None
    if isinstance(first, list):
        first = first[0] if first else None
        if isinstance(first, list):
            first = first[0] if first else None
    return first
