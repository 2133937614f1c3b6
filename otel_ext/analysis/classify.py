"""Recognising what a device activity does: computation, communication or memory traffic.

Holistic Trace Analysis decides "communication" by one regular expression on the kernel name
(``^nccl.*Kernel``). That misses every communication kernel not named ``nccl*``: DeepEP's
expert-parallel all-to-all (``dpsk::ep::internode::dispatch``, ``deep_ep::intranode::combine``),
NVSHMEM and symmetric-memory collectives, vLLM's custom all-reduce, Transformer Engine's
userbuffers, MSCCL. A time breakdown that counts those as compute is wrong: it hides exactly the
communication the user is trying to find.

We decide from three kinds of evidence, strongest first:

1. **Metadata.** A kernel whose ``args`` carry collective metadata (``Collective name``,
   ``Process Group Name``, ``In msg nelems`` ...) is communication, whatever its name.
2. **Launch context.** A kernel launched from inside a host operation that carries collective
   metadata (``record_param_comms``, ``c10d::*``, ``nccl:*``) is communication: the
   ``External id`` of the kernel is the host op's. The loader applies this after reading a file
   (:func:`is_collective_host_op`).
3. **Names**, as a last resort, with patterns for each library we know, not a single prefix:
   NCCL and RCCL of any version (``ncclKernel_*``, ``ncclDevKernel_*``,
   ``ncclDevKernel_Generic``), MSCCL, DeepEP (the ``internode``/``intranode``/``internode_ll``
   namespaces: ``dispatch``, ``combine``, ``notify_dispatch``, ``cached_notify``), NVSHMEM,
   PyTorch symmetric memory (``one_shot_all_reduce``, ``two_shot_all_reduce``,
   ``multimem_*``), vLLM's ``cross_device_reduce``, Transformer Engine ``userbuffers``, and
   generic all-to-all kernel names.

DeepEP's ``get_dispatch_layout`` only computes a routing table from local data; it moves
nothing between ranks, so it stays computation.

Memory activities come from the profiler category (``gpu_memcpy``, ``gpu_memset``; MTIA's
``dma_request``), not from the name.

>>> classify_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
<Category.KERNEL_COMM: 4>
>>> classify_kernel("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*)")
<Category.KERNEL_COMM: 4>
>>> classify_kernel("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*)")
<Category.KERNEL_COMPUTE: 3>
>>> classify_kernel("volta_sgemm_128x64_nn", {"Collective name": "allreduce"})
<Category.KERNEL_COMM: 4>
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from otel_ext.analysis.table import Category

__all__ = [
    "COLLECTIVE_ARG_KEYS",
    "classify_kernel",
    "classify_kineto",
    "has_collective_metadata",
    "is_collective_host_op",
    "is_comm_kernel_name",
]

#: ``args`` keys that only collective operations carry (PyTorch's ``record_param_comms`` and
#: the NCCL profiler's kernel annotations, across PyTorch versions)
COLLECTIVE_ARG_KEYS: tuple[str, ...] = (
    "Collective name",
    "Process Group Name",
    "Process Group ID",
    "Process Group Ranks",
    "In msg nelems",
    "Out msg nelems",
    "pg_name",
    "collective_name",
)

_COMM_NAME_RE = re.compile(
    r"""
    (?:^|[\s:])nccl\w*Kernel        # NCCL/RCCL: ncclKernel_*, ncclDevKernel_*, ncclDevKernel_Generic
    | (?:^|[\s:])rccl\w*            # RCCL-specific kernels
    | msccl\w*Kernel                # MSCCL
    | \b(?:deep_ep|dpsk::ep|ep)::(?:internode|intranode|internode_ll|low_latency)::
        (?:dispatch|combine|notify_dispatch|cached_notify|clean_low_latency_buffer|\w*dispatch|\w*combine)
    | \bnvshmem\w*                  # NVSHMEM device collectives / puts
    | \b(?:one|two)_shot_all_reduce # torch symmetric memory
    | \bmultimem_(?:all_reduce|all_gather|reduce_scatter)
    | \bcross_device_reduce         # vLLM custom all-reduce
    | \buserbuffers_                # Transformer Engine userbuffers
    | \b(?:all_?to_?all|alltoall|all_?gather|all_?reduce|reduce_?scatter)\w*_kernel
    """,
    re.VERBOSE | re.IGNORECASE,
)

#: a name matches ``_COMM_NAME_RE`` only if, case-folded, it holds one of these (each
#: alternative of the pattern needs one; none has an "i", whose case-insensitive matches are
#: not all case-folded to "i"); most kernel names hold none and skip the pattern, whose
#: case-insensitive alternatives are tried at every position of the name
_COMM_NAME_HINTS = ("ccl", "ep::", "nvshmem", "all", "reduce", "mem_", "userbuffers_")

_HOST_COLLECTIVE_RE = re.compile(r"^(?:record_param_comms|c10d::|nccl:|gloo:|mtia_ccl|deep_ep::)")


def is_comm_kernel_name(name: str) -> bool:
    """Whether a device-activity name is that of a known communication kernel.

    >>> is_comm_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)")
    True
    >>> is_comm_kernel_name("void at::native::vectorized_elementwise_kernel<4>")
    False
    """
    folded = name.casefold()
    if not any(h in folded for h in _COMM_NAME_HINTS):
        return False  # the usual compute kernel: its (often long, templated) name not scanned
    return _COMM_NAME_RE.search(name) is not None


def has_collective_metadata(args: Mapping[str, Any] | None) -> bool:
    """Whether an event's ``args`` carry collective metadata.

    >>> has_collective_metadata({"Collective name": "allreduce", "Group size": 2})
    True
    >>> has_collective_metadata({"stream": 7})
    False
    """
    if not args:
        return False
    return any(k in args for k in COLLECTIVE_ARG_KEYS)


def is_collective_host_op(name: str, args: Mapping[str, Any] | None = None) -> bool:
    """Whether a host operation issues a collective (so the kernels it launches communicate).

    >>> is_collective_host_op("record_param_comms")
    True
    >>> is_collective_host_op("aten::mm")
    False
    """
    return has_collective_metadata(args) or _HOST_COLLECTIVE_RE.match(name) is not None


def classify_kernel(name: str, args: Mapping[str, Any] | None = None) -> Category:
    """Computation or communication, for a device kernel (not a memcpy/memset).

    Args:
        name: the kernel's name.
        args: the event's ``args``, if any (collective metadata wins over the name).

    Returns:
        ``Category.KERNEL_COMM`` or ``Category.KERNEL_COMPUTE``.
    """
    if has_collective_metadata(args) or is_comm_kernel_name(name):
        return Category.KERNEL_COMM
    return Category.KERNEL_COMPUTE


_CAT_FIXED: dict[str, Category] = {
    "cpu_op": Category.CPU_OP,
    "user_annotation": Category.CPU_OP,
    "python_function": Category.CPU_OP,
    "cpu_instant_event": Category.CPU_OP,
    "cuda_runtime": Category.RUNTIME,
    "cuda_driver": Category.RUNTIME,
    "hip_runtime": Category.RUNTIME,
    "mtia_runtime": Category.RUNTIME,
    "runtime": Category.RUNTIME,
    "gpu_memcpy": Category.MEMCPY,
    "memcpy": Category.MEMCPY,
    "gpu_memset": Category.MEMSET,
    "memset": Category.MEMSET,
}


def classify_kineto(cat: str, name: str, args: Mapping[str, Any] | None = None) -> Category:
    """The category of one PyTorch-profiler (Kineto) event, from its ``cat``, name and args.

    ``cuda_sync`` (CUPTI synchronisation records) and ``gpu_user_annotation`` sit on device
    rows but are not device work, so they are ``OTHER``; MTIA's ``mtia_ccp_events`` are device
    work: DMA requests are copies, ``event_*`` are synchronisation markers, the rest compute.

    >>> classify_kineto("kernel", "ncclDevKernel_Generic(ncclDevKernelArgs)")
    <Category.KERNEL_COMM: 4>
    >>> classify_kineto("gpu_memcpy", "Memcpy DtoD (Device -> Device)")
    <Category.MEMCPY: 5>
    >>> classify_kineto("user_annotation", "ProfilerStep#3")
    <Category.STEP: 12>
    >>> classify_kineto("mtia_ccp_events", "dma_request")
    <Category.MEMCPY: 5>
    """
    low = cat.lower()
    if low == "kernel":
        return classify_kernel(name, args)
    fixed = _CAT_FIXED.get(low)
    if fixed is not None:
        if fixed is Category.CPU_OP and name.startswith("ProfilerStep#"):
            return Category.STEP
        return fixed
    if low == "mtia_ccp_events":
        if name.startswith("dma"):
            return Category.MEMCPY
        if name.startswith("event_"):
            return Category.OTHER
        return classify_kernel(name, args)
    return Category.OTHER
