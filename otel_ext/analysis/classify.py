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
3. **Names**, as a last resort, with patterns for each library we know, not a single prefix,
   from a documented table in the conventions registry
   (``semantic_conventions/model/kernels/communication.yaml``: each entry's library,
   regular expression, prefilter hints, fixed operation, examples and counter-examples):
   NCCL and RCCL of any version (``ncclKernel_*``, ``ncclDevKernel_*``,
   ``ncclDevKernel_Generic``), MSCCL, DeepEP (the ``internode``/``intranode``/``internode_ll``
   namespaces: ``dispatch``, ``combine``, ``notify_dispatch``, ``cached_notify``), NVSHMEM,
   PyTorch symmetric memory (``one_shot_all_reduce``, ``two_shot_all_reduce``,
   ``multimem_*``), vLLM's and SGLang's custom all-reduce (``cross_device_reduce_*``), vLLM's
   quick all-reduce, TensorRT-LLM's one-/two-shot all-reduce, Transformer Engine
   ``userbuffers``, and generic collective kernel names. More tables of the same shape
   extend it without code: ``OTEL_EXT_COMM_KERNELS`` names them. The tables are read by
   :mod:`otel_ext.analysis.loaders.kernel_tables`; this module matches names against the
   parsed patterns (the packaged table and those of ``OTEL_EXT_COMM_KERNELS``, read on the
   first match, or any list given to :func:`use_comm_kernel_table`).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_ext.analysis.table import Category

__all__ = [
    "COLLECTIVE_ARG_KEYS",
    "CommKernelPattern",
    "classify_kernel",
    "classify_kineto",
    "comm_kernel_op",
    "comm_kernel_pattern",
    "has_collective_metadata",
    "is_collective_host_op",
    "is_comm_kernel_name",
    "read_comm_kernel_tables",
    "use_comm_kernel_table",
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


@dataclass(frozen=True)
class CommKernelPattern:
    """One entry of the communication-kernel table (``semantic_conventions/model/kernels``)."""

    id: str
    library: str
    regex: str
    hints: tuple[str, ...]
    op: str | None
    examples: tuple[str, ...]
    counter_examples: tuple[str, ...]
    source: str


class _CommNames:
    """The table compiled: one alternation (a named group per entry) and its prefilter."""

    def __init__(self, patterns: Sequence[CommKernelPattern]) -> None:
        self.patterns = list(patterns)
        alternatives = "|".join(f"(?P<p{k}>{p.regex})" for k, p in enumerate(self.patterns))
        self.regex = re.compile(alternatives or r"(?!)", re.IGNORECASE)
        # no prefilter when any pattern has no hints: every name is then searched
        self.hints: tuple[str, ...] | None = (
            tuple(sorted({h for p in self.patterns for h in p.hints}))
            if all(p.hints for p in self.patterns)
            else None
        )

    def match(self, name: str) -> CommKernelPattern | None:
        if self.hints is not None:
            folded = name.casefold()
            if not any(h in folded for h in self.hints):
                return None  # the usual compute kernel: its (often long) name not scanned
        m = self.regex.search(name)
        if m is None:
            return None
        # the entry whose group matched (an entry's own groups make lastgroup unreliable)
        for k, pat in enumerate(self.patterns):
            if m.group(f"p{k}") is not None:
                return pat
        return None  # pragma: no cover - one alternative always matched


#: the patterns names are matched against (None until the first match reads the tables)
_NAMES: _CommNames | None = None
#: the table as one pattern (every entry an alternative), once read
_COMM_NAME_RE: re.Pattern[str] | None = None


def use_comm_kernel_table(patterns: Sequence[CommKernelPattern]) -> None:
    """Classify with ``patterns`` from now on, in this process (e.g. a table loaded with
    :func:`~otel_ext.analysis.loaders.kernel_tables.load_comm_kernel_table` and
    ``extra_tables=``). Loader processes started later read ``OTEL_EXT_COMM_KERNELS``
    themselves: set it to extend a whole ``otel-ext analyze``.
    """
    global _NAMES, _COMM_NAME_RE
    _NAMES = _CommNames(patterns)
    _COMM_NAME_RE = _NAMES.regex


def _names() -> _CommNames:
    """The patterns in use: on the first call, the packaged table and those of
    ``OTEL_EXT_COMM_KERNELS`` (read by the loaders, which import this module: hence the
    import here)."""
    global _NAMES, _COMM_NAME_RE
    if _NAMES is None:
        from otel_ext.analysis.loaders.kernel_tables import load_comm_kernel_table

        _NAMES = _CommNames(load_comm_kernel_table())
        _COMM_NAME_RE = _NAMES.regex
    return _NAMES


def read_comm_kernel_tables() -> None:
    """Read the tables now if no table is in use yet. The loaders call it when they are
    imported, so that a process reads the tables with its imports (as it did when this module
    read them itself), not inside its first analysis; either way once per process."""
    _names()


def comm_kernel_pattern(name: str) -> CommKernelPattern | None:
    """The table entry a kernel name matches, or None.

    >>> comm_kernel_pattern("void vllm::cross_device_reduce_1stage<half, 8>(vllm::RankData*)").id
    'vllm_custom_all_reduce'
    >>> comm_kernel_pattern("volta_sgemm_128x64_nn") is None
    True
    """
    return _names().match(name)


#: operations spelled in kernel names (letters only, lower case), first match wins
_NAME_OPS = (
    ("allreduce", "allreduce"),
    ("reducescatter", "reducescatter"),
    ("allgather", "allgather"),
    ("alltoall", "alltoall"),
    ("sendrecv", "sendrecv"),
    ("broadcast", "broadcast"),
)


def comm_kernel_op(name: str) -> str | None:
    """The collective operation a communication kernel's name implies, or None.

    The table's ``op`` when the entry fixes one, else the operation spelled in the name.

    >>> comm_kernel_op("void (anonymous namespace)::multimem_all_reduce_kernel<float, 16>()")
    'allreduce'
    >>> comm_kernel_op("void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(nv_bfloat16*)")
    'alltoall'
    >>> comm_kernel_op("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") is None
    True
    """
    pat = _names().match(name)
    if pat is None:
        return None
    if pat.op:
        return pat.op
    low = re.sub(r"[^a-z]", "", name.lower())
    for needle, op in _NAME_OPS:
        if needle in low:
            return op
    return None


_HOST_COLLECTIVE_RE = re.compile(r"^(?:record_param_comms|c10d::|nccl:|gloo:|mtia_ccl|deep_ep::)")


def is_comm_kernel_name(name: str) -> bool:
    """Whether a device-activity name is that of a known communication kernel.

    >>> is_comm_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)")
    True
    >>> is_comm_kernel_name("void at::native::vectorized_elementwise_kernel<4>")
    False
    """
    return _names().match(name) is not None


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
