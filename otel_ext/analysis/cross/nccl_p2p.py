"""NCCL point-to-point transfers in PyTorch profiler traces, paired across ranks.

otel-ext's own send and receive spans carry one collective id on both ends; a PyTorch
profiler (Kineto) trace of NCCL does not. What it has, per rank: the ``record_param_comms``
CPU op (and, in recent PyTorch, ``nccl:send``/``nccl:recv``) whose ``args`` carry the comms
metadata, and the ``ncclDevKernel_SendRecv`` / ``ncclKernel_SendRecv_*`` kernel it launched
(linked by the correlation and external ids; recent PyTorch writes the same metadata on the
kernel too). The loader keeps ``Collective name`` (``send``/``recv``), the bytes (``In msg
nelems`` × ``dtype``), the ``Process Group Name`` and, where PyTorch writes it, the peer in
``coll_peer``: ``Dst Rank`` on a send, ``Src Rank`` on a receive, both global ranks
(``torch/csrc/profiler/util.cpp``, ``saveNcclMeta``: ``groupRanks[rank]`` where ``rank`` is
the peer's rank in the group). A trace without those fields has no ``coll_peer`` and gives
no pairs: the network model then treats it as before (no peers).

**Rows.** Per rank, the NCCL point-to-point rows (``coll_op`` send or recv, a peer known):
its kernels when it has as many as host ops (the transfer's times are the GPU's), else its
host ops; among host ops, ``record_param_comms`` when the rank has it (``nccl:send`` of the
same call would count it twice).

**Pairing.** NCCL delivers the messages between two ranks of one group in order, per
direction: the k-th send of rank A to B in process group g is the k-th receive of B from A in
g (k in time order on each rank). Each end gets the key (group, source, destination, k); a
send and a receive with the same key are one transfer. A key seen on one side only (the
other rank's trace is missing, or cut by the profiler's window) is left unpaired and
counted. The transfer's time is as for otel-ext's spans
(:func:`otel_ext.analysis.cross.network_paths.p2p_transfers`): from the later of the two
starts to the receive's end, on the aligned timeline; its bytes the send's (else the
receive's).

>>> from otel_ext.analysis.table import Category, EventTable
>>> rows = []
>>> for k in range(3):
...     t0 = k * 1_000_000
...     rows.append(dict(rank=0, category=Category.KERNEL_COMM, coll_op="send", coll_peer=1,
...                      coll_group="0", coll_bytes=1 << 20, start_ns=t0, end_ns=t0 + 900_000))
...     rows.append(dict(rank=1, category=Category.KERNEL_COMM, coll_op="recv", coll_peer=0,
...                      coll_group="0", coll_bytes=1 << 20, start_ns=t0 + 100_000,
...                      end_ns=t0 + 600_000))
>>> p = pair_nccl_p2p(EventTable.from_rows(rows))
>>> len(p.transfers), p.unpaired_sends, p.unpaired_recvs
(3, 0, 0)
>>> p.transfers.src_rank.tolist(), p.transfers.transfer_ns.tolist()
([0, 0, 0], [500000, 500000, 500000])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otel_ext.analysis.cross.collective_match import CollectiveMatch, normalize_op
from otel_ext.analysis.cross.network_paths import Transfers, p2p_transfers
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "NcclP2pPairing",
    "P2pEnds",
    "all_p2p_transfers",
    "nccl_p2p_rows",
    "pair_ends",
    "pair_nccl_p2p",
]


def _empty_transfers() -> Transfers:
    return Transfers(*(np.zeros(0, dtype=np.int64) for _ in range(5)))


@dataclass(frozen=True)
class P2pEnds:
    """Point-to-point ends, one entry each: the rank that recorded it, its peer, its process
    group (a code), whether it is a send, its times and bytes (-1 unknown)."""

    rank: np.ndarray
    peer: np.ndarray
    group: np.ndarray
    is_send: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    nbytes: np.ndarray

    def __len__(self) -> int:
        return len(self.rank)


@dataclass(frozen=True)
class NcclP2pPairing:
    """:func:`pair_nccl_p2p`'s result: the transfers and the ends left without a partner."""

    transfers: Transfers
    sends: int
    recvs: int
    unpaired_sends: int
    unpaired_recvs: int


def _p2p_op_codes(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """The ``coll_op`` codes that name a send, and those that name a receive."""
    ops = [normalize_op(s) if s else "" for s in table.strings["coll_op"]]
    send = np.asarray([i for i, o in enumerate(ops) if o == "send"], dtype=np.int64)
    recv = np.asarray([i for i, o in enumerate(ops) if o == "recv"], dtype=np.int64)
    return send, recv


def nccl_p2p_rows(table: EventTable) -> np.ndarray:
    """The rows of a table's NCCL point-to-point ends that name their peer, per rank its
    kernels when it has as many as host ops, else its host ops (``record_param_comms``
    alone when the rank has it); sorted.

    Args:
        table: an event table, all ranks (the ``coll_peer`` column from the Kineto loader;
            a table without it has no such rows).

    Returns:
        Row indices (empty when the trace names no peers).
    """
    peer = table.columns.get("coll_peer")
    if peer is None or len(table) == 0 or not (peer >= 0).any():
        return np.zeros(0, dtype=np.int64)
    send, recv = _p2p_op_codes(table)
    cand = (peer >= 0) & (table["rank"] >= 0) & np.isin(table["coll_op"], np.r_[send, recv])
    kern = cand & (table["category"] == Category.KERNEL_COMM)
    host = cand & (table["stream"] < 0) & ~kern
    rpc = table.code_of("name", "record_param_comms")
    if rpc > 0:  # a rank with record_param_comms: those alone (nccl:send is the same call)
        has_rpc = _per_rank_any(table, host & (table["name"] == rpc))
        host &= ~has_rpc[_rank_index(table)] | (table["name"] == rpc)
    n_kern = _per_rank_count(table, kern)
    n_host = _per_rank_count(table, host)
    use_kern = (n_kern > 0) & ((n_host == 0) | (n_kern == n_host))
    chosen = np.where(use_kern[_rank_index(table)], kern, host)
    return np.flatnonzero(chosen)


def _rank_index(table: EventTable) -> np.ndarray:
    """Each row's rank as an index into the per-rank arrays (row of rank -1: index 0)."""
    return np.maximum(table["rank"].astype(np.int64), 0)


def _per_rank_count(table: EventTable, mask: np.ndarray) -> np.ndarray:
    """Per rank (index = rank): how many rows ``mask`` selects."""
    size = int(table["rank"].max()) + 1 if len(table) else 0
    return np.bincount(_rank_index(table)[mask], minlength=max(size, 1))


def _per_rank_any(table: EventTable, mask: np.ndarray) -> np.ndarray:
    """Per rank (index = rank): whether ``mask`` selects any of its rows."""
    return _per_rank_count(table, mask) > 0


def _ends(table: EventTable, rows: np.ndarray) -> P2pEnds:
    """The chosen rows as point-to-point ends."""
    send, _ = _p2p_op_codes(table)
    return P2pEnds(
        rank=table["rank"][rows].astype(np.int64),
        peer=table["coll_peer"][rows].astype(np.int64),
        group=table["coll_group"][rows].astype(np.int64),
        is_send=np.isin(table["coll_op"][rows], send),
        start_ns=table["start_ns"][rows].astype(np.int64),
        end_ns=table["end_ns"][rows].astype(np.int64),
        nbytes=table["coll_bytes"][rows].astype(np.int64),
    )


def _transfer_keys(ends: P2pEnds) -> np.ndarray:
    """Per end, its transfer's key (group, source, destination, k) as an (n, 4) array: k is
    the end's ordinal among its rank's ends of the same group, peer and direction in time
    order."""
    src = np.where(ends.is_send, ends.rank, ends.peer)
    dst = np.where(ends.is_send, ends.peer, ends.rank)
    order = np.lexsort((ends.start_ns, ends.is_send, dst, src, ends.group))
    cols = np.stack([ends.group, src, dst, ends.is_send.astype(np.int64)], axis=1)[order]
    new_run = np.ones(len(order), dtype=bool)
    new_run[1:] = (cols[1:] != cols[:-1]).any(axis=1)
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(len(order)), 0))
    k = np.empty(len(order), dtype=np.int64)
    k[order] = np.arange(len(order)) - run_start
    return np.stack([ends.group, src, dst, k], axis=1)


def pair_ends(ends: P2pEnds) -> tuple[np.ndarray, np.ndarray]:
    """The k-th send of A to B in a group paired with the k-th receive of B from A in it.

    Args:
        ends: point-to-point ends of every rank.

    Returns:
        ``(send_index, recv_index)``: indices into ``ends`` of each pair's two ends, sorted
        by the send's index.

    >>> e = P2pEnds(rank=np.array([0, 1, 0, 1]), peer=np.array([1, 0, 1, 0]),
    ...             group=np.zeros(4, np.int64), is_send=np.array([True, False, True, False]),
    ...             start_ns=np.array([0, 5, 10, 12]), end_ns=np.array([4, 8, 11, 20]),
    ...             nbytes=np.full(4, 8))
    >>> [a.tolist() for a in pair_ends(e)]
    [[0, 2], [1, 3]]
    """
    if len(ends) == 0:
        none = np.zeros(0, dtype=np.int64)
        return none, none
    keys = _transfer_keys(ends)
    _, code = np.unique(keys, axis=0, return_inverse=True)
    code = code.reshape(-1)
    sends, recvs = np.flatnonzero(ends.is_send), np.flatnonzero(~ends.is_send)
    recv_of_code = np.full(int(code.max()) + 1, -1, dtype=np.int64)
    recv_of_code[code[recvs]] = recvs
    partner = recv_of_code[code[sends]]
    ok = partner >= 0
    return sends[ok], partner[ok]


def pair_nccl_p2p(table: EventTable) -> NcclP2pPairing:
    """A trace's NCCL point-to-point transfers, each send paired with its receive (see the
    module docstring).

    Args:
        table: the aligned event table of every rank.

    Returns:
        :class:`NcclP2pPairing` (no transfers when the trace names no peers).
    """
    ends = _ends(table, nccl_p2p_rows(table))
    s, r = pair_ends(ends)
    n_send = int(ends.is_send.sum())
    n_recv = len(ends) - n_send
    if len(s) == 0:
        return NcclP2pPairing(_empty_transfers(), n_send, n_recv, n_send, n_recv)
    ready = np.maximum(ends.start_ns[s], ends.start_ns[r])
    nbytes = np.where(ends.nbytes[s] >= 0, ends.nbytes[s], ends.nbytes[r])
    transfers = Transfers(
        src_rank=ends.rank[s],
        dst_rank=ends.rank[r],
        nbytes=nbytes,
        transfer_ns=np.maximum(ends.end_ns[r] - ready, 0),
        start_ns=ready,
    )
    return NcclP2pPairing(transfers, n_send, n_recv, n_send - len(s), n_recv - len(r))


def all_p2p_transfers(table: EventTable, match: CollectiveMatch) -> Transfers:
    """Every point-to-point transfer the trace shows: otel-ext's matched spans
    (:func:`~otel_ext.analysis.cross.network_paths.p2p_transfers`) and the NCCL pairs of
    profiler traces (:func:`pair_nccl_p2p`); the two never overlap (spans name no
    ``coll_peer``, profiler rows no collective id).

    Args:
        table: the aligned table ``match`` was made from.
        match: matched collectives.

    Returns:
        :class:`~otel_ext.analysis.cross.network_paths.Transfers`, spans first.
    """
    spans = p2p_transfers(table, match)
    nccl = pair_nccl_p2p(table).transfers
    if len(nccl) == 0:
        return spans
    if len(spans) == 0:
        return nccl
    return Transfers(
        *(
            np.concatenate([getattr(spans, f), getattr(nccl, f)])
            for f in ("src_rank", "dst_rank", "nbytes", "transfer_ns", "start_ns")
        )
    )
