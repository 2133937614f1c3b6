"""Collectives matched across ranks: arrival, wait, skew, pure transfer time, bandwidth.

Every member of a collective (all-reduce, all-gather, ...) must arrive before any member can
leave. Matching the same collective on every rank shows who arrived last, how long the others
waited for it (``wait_ns`` = last arrival − own arrival), the start and end skew, and the pure
transfer time (the median member's end − last arrival), from which algorithm and bus bandwidth
follow (NCCL's definitions: ``algbw = bytes / transfer``; ``busbw = algbw × factor``, the
factor ``2(n−1)/n`` for all-reduce, ``(n−1)/n`` for all-gather, reduce-scatter and
all-to-all, 1 otherwise).

Matching key, strongest first: the collective id (``coll_id``); the process group and its
sequence number (``coll_group``, ``coll_seq``); failing both (PyTorch profiler traces without
``Seq``), the operation and group with each rank's ordinal of that operation in time order.
Rows come from device-side communication kernels when they carry a key, else from collective
spans; one rank's several rows of one collective merge (first start, last end).

>>> from otel_ext.analysis.table import Category, EventTable
>>> rows = [dict(start_ns=s, end_ns=e, rank=r, category=Category.KERNEL_COMM,
...              coll_op="allreduce", coll_group="tp", coll_seq=0, coll_bytes=1000)
...         for r, s, e in [(0, 100, 400), (1, 250, 400), (2, 150, 400)]]
>>> m = match_collectives(EventTable.from_rows(rows))
>>> m.n_instances, [int(w) for w in m.wait_ns], int(m.transfer_ns[0]), int(m.last_rank[0])
(1, [150, 0, 100], 150, 1)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Required, TypedDict

import numpy as np

from otel_ext._arrays import distinct, distinct_rows, group_median, median
from otel_ext.analysis.runs import rank_runs
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "HOST_COLLECTIVE_FAMILIES",
    "CollectiveMatch",
    "CollectiveMismatch",
    "CollectiveRow",
    "CollectiveSummary",
    "bus_factor",
    "host_collective_rows",
    "match_collectives",
    "normalize_op",
    "sampled_fraction",
]

_OPS = (
    ("allreduce", "allreduce"),
    ("reducescatter", "reducescatter"),
    ("reduce_scatter", "reducescatter"),
    ("allgather", "allgather"),
    ("all_gather", "allgather"),
    ("all_reduce", "allreduce"),
    ("alltoall", "alltoall"),
    ("all_to_all", "alltoall"),
    ("dispatch", "alltoall"),
    ("combine", "alltoall"),
    ("broadcast", "broadcast"),
    ("sendrecv", "sendrecv"),
    ("send", "send"),
    ("recv", "recv"),
    ("reduce", "reduce"),
    ("barrier", "barrier"),
)
_CLEAN = re.compile(r"[^a-z_]")
#: operations whose members all pass the same number of bytes
_SAME_BYTES_OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


def normalize_op(text: str) -> str:
    """A collective's operation, normalised from its metadata or kernel name.

    >>> normalize_op("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), normalize_op("all_gather")
    ('allreduce', 'allgather')
    >>> normalize_op("ncclKernel_SendRecv_RING_SIMPLE"), normalize_op("mystery")
    ('sendrecv', 'mystery')
    """
    low = _CLEAN.sub("", text.lower())
    squashed = low.replace("_", "")
    for needle, op in _OPS:
        if needle in low or needle in squashed:
            return op
    return low or text


def bus_factor(op: str, n: int) -> float:
    """NCCL's bus-bandwidth factor for ``op`` over ``n`` ranks.

    >>> bus_factor("allreduce", 4), bus_factor("allgather", 4), bus_factor("broadcast", 4)
    (1.5, 0.75, 1.0)
    """
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


class CollectiveMismatch(TypedDict, total=False):
    """One entry of :meth:`CollectiveMatch.mismatches` (the report's ``mismatches``).

    ``kind`` ``bytes``: an instance whose members name different sizes (``key``, ``op``,
    ``group``, ``bytes_min``, ``bytes_max``), or only ``more``: how many such instances the
    list leaves out. ``kind`` ``count``: ranks whose number of calls of one ``op`` in one
    ``group`` differs from the ``typical_calls`` (``ranks``: rank -> its calls).
    """

    kind: Required[str]
    key: str
    op: str
    group: str
    bytes_min: int
    bytes_max: int
    more: int
    typical_calls: int
    ranks: dict[str, int]


class CollectiveRow(TypedDict):
    """One collective instance of :meth:`CollectiveMatch.rows` (the report's ``instances``)."""

    key: str
    op: str
    group: str
    n_ranks: int
    group_size: int
    group_size_from: str  # "metadata" or "ranks seen"
    bytes: int
    first_arrival_ns: int
    last_arrival_ns: int
    last_rank: int
    start_skew_ns: int
    end_skew_ns: int
    transfer_ns: int
    total_wait_ns: int
    algbw: float | None
    busbw: float | None


class CollectiveSummary(TypedDict):
    """One (operation, group) of :meth:`CollectiveMatch.summary` (the report's ``summary``)."""

    op: str
    group: str
    count: int
    total_wait_ns: int
    median_transfer_ns: int
    median_start_skew_ns: int
    median_busbw: float | None


@dataclass
class CollectiveMatch:
    """Collectives matched across ranks.

    Member arrays (one entry per collective and rank, sorted by instance then rank):
    ``member_instance``, ``member_rank``, ``member_start_ns``, ``member_end_ns``,
    ``member_rows`` (the rows of the table merged into that member, as a list of index
    arrays is too costly: the first row), ``wait_ns``.
    Instance arrays (one per collective): ``op``, ``group``, ``key``, ``n_ranks``, ``bytes``,
    ``first_arrival_ns``, ``last_arrival_ns``, ``second_last_arrival_ns``, ``last_rank``,
    ``start_skew_ns``, ``end_skew_ns``, ``end_ns`` (median member end), ``transfer_ns``,
    ``algbw``, ``busbw`` (bytes per second; NaN when unknown).
    """

    member_instance: np.ndarray
    member_rank: np.ndarray
    member_start_ns: np.ndarray
    member_end_ns: np.ndarray
    member_row: np.ndarray
    row_member: np.ndarray  # for each selected table row, its member index
    row_index: np.ndarray  # the selected table rows
    op: list[str]
    group: list[str]
    key: list[str]
    bytes: np.ndarray
    source: str  # "kernel", "span" or "ordinal"
    group_size: np.ndarray | None = None  # from metadata per instance, -1 where unknown
    bytes_min: np.ndarray | None = None  # the smallest and largest bytes its members name
    bytes_max: np.ndarray | None = None
    count_mismatches: list[CollectiveMismatch] | None = None

    def __post_init__(self) -> None:
        self._derive()

    @property
    def n_instances(self) -> int:
        return len(self.op)

    def _derive(self) -> None:
        inst = self.member_instance
        n = self.n_instances
        start, end = self.member_start_ns, self.member_end_ns
        if n == 0:
            z = np.zeros(0, dtype=np.int64)
            self.n_ranks = z.astype(np.int32)
            self.first_arrival_ns = self.last_arrival_ns = self.second_last_arrival_ns = z
            self.last_rank = z
            self.start_skew_ns = self.end_skew_ns = self.end_ns = self.transfer_ns = z
            self.algbw = self.busbw = np.zeros(0)
            self.wait_ns = z
            self.group_size_known = np.zeros(0, dtype=bool)
            self.effective_group_size = z
            return
        bounds = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
        self.n_ranks = np.diff(np.r_[bounds, len(inst)]).astype(np.int32)
        self.first_arrival_ns = np.minimum.reduceat(start, bounds)
        self.last_arrival_ns = np.maximum.reduceat(start, bounds)
        self.end_skew_ns = np.maximum.reduceat(end, bounds) - np.minimum.reduceat(end, bounds)
        self.start_skew_ns = self.last_arrival_ns - self.first_arrival_ns
        # order members by (instance, start) to find the last and second-last arrival
        order = np.lexsort((start, inst))
        last_pos = np.r_[bounds[1:], len(inst)] - 1
        self.last_rank = self.member_rank[order[last_pos]].astype(np.int64)
        second = np.where(self.n_ranks > 1, last_pos - 1, last_pos)
        self.second_last_arrival_ns = start[order[second]]
        # median end per instance
        order_e = np.lexsort((end, inst))
        mid = bounds + (self.n_ranks - 1) // 2
        self.end_ns = end[order_e[mid]]
        self.transfer_ns = np.maximum(self.end_ns - self.last_arrival_ns, 0)
        self.wait_ns = np.maximum(self.last_arrival_ns[inst] - start, 0)
        secs = self.transfer_ns / 1e9
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = np.where((self.bytes > 0) & (secs > 0), self.bytes / secs, np.nan)
        # the bus factor is the collective's group size (metadata), not the ranks loaded:
        # two ranks of an eight-rank all-reduce move 2·7/8 of the bytes over the bus, not 1
        gs = self.group_size if self.group_size is not None else np.full(n, -1)
        self.group_size_known = gs > 0
        self.effective_group_size = np.where(gs > 0, gs, self.n_ranks).astype(np.int64)
        factor_of: dict[tuple[str, int], float] = {}
        factors = np.array(
            [
                factor_of.setdefault((op, int(k)), bus_factor(op, int(k)))
                for op, k in zip(self.op, self.effective_group_size.tolist())
            ],
            dtype=np.float64,
        )
        self.algbw = algbw
        self.busbw = algbw * factors

    def retime(self, table: EventTable) -> CollectiveMatch:
        """The same matching with member times re-read from ``table`` (e.g. after alignment).

        ``table`` must have the same rows, in the same order, as the matched one.
        """
        start = table["start_ns"][self.row_index]
        end = table["end_ns"][self.row_index]
        m = len(self.member_instance)
        ms = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
        me = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(ms, self.row_member, start)
        np.maximum.at(me, self.row_member, end)
        return CollectiveMatch(
            self.member_instance,
            self.member_rank,
            ms,
            me,
            self.member_row,
            self.row_member,
            self.row_index,
            self.op,
            self.group,
            self.key,
            self.bytes,
            self.source,
            self.group_size,
            self.bytes_min,
            self.bytes_max,
            self.count_mismatches,
        )

    def mismatches(self) -> list[CollectiveMismatch]:
        """Members matched as one collective that disagree (a desync, or a wrong match).

        Two kinds: an instance whose members name different sizes for an operation where
        every member must pass the same (all-reduce, all-gather, reduce-scatter, broadcast,
        reduce); and, when matched by order, ranks that recorded different numbers of one
        operation in one group (their n-th calls cannot all be the same collective).
        """
        out: list[CollectiveMismatch] = []
        if self.bytes_min is not None and self.bytes_max is not None and self.n_instances:
            bad = np.flatnonzero(
                (self.bytes_min > 0)
                & (self.bytes_max != self.bytes_min)
                & np.isin(np.asarray(self.op, dtype=object), list(_SAME_BYTES_OPS))
            )
            for k in bad[:20].tolist():
                out.append(
                    {
                        "kind": "bytes",
                        "key": self.key[k],
                        "op": self.op[k],
                        "group": self.group[k],
                        "bytes_min": int(self.bytes_min[k]),
                        "bytes_max": int(self.bytes_max[k]),
                    }
                )
            if len(bad) > 20:
                out.append({"kind": "bytes", "more": int(len(bad) - 20)})
        out.extend(self.count_mismatches or [])
        return out

    def rows(self, *, limit: int | None = None) -> list[CollectiveRow]:
        """One JSON-ready row per collective instance, most waited-for first (up to ``limit``)."""
        inst = self.member_instance
        total_wait = np.zeros(self.n_instances, dtype=np.int64)
        np.add.at(total_wait, inst, self.wait_ns)
        order = np.argsort(-total_wait, kind="stable")
        if limit is not None:
            order = order[:limit]
        out: list[CollectiveRow] = []
        for k in order:
            out.append(
                {
                    "key": self.key[k],
                    "op": self.op[k],
                    "group": self.group[k],
                    "n_ranks": int(self.n_ranks[k]),
                    "group_size": int(self.effective_group_size[k]),
                    "group_size_from": "metadata" if self.group_size_known[k] else "ranks seen",
                    "bytes": int(self.bytes[k]),
                    "first_arrival_ns": int(self.first_arrival_ns[k]),
                    "last_arrival_ns": int(self.last_arrival_ns[k]),
                    "last_rank": int(self.last_rank[k]),
                    "start_skew_ns": int(self.start_skew_ns[k]),
                    "end_skew_ns": int(self.end_skew_ns[k]),
                    "transfer_ns": int(self.transfer_ns[k]),
                    "total_wait_ns": int(total_wait[k]),
                    "algbw": _num(self.algbw[k]),
                    "busbw": _num(self.busbw[k]),
                }
            )
        return out

    def summary(self) -> list[CollectiveSummary]:
        """Per operation and group: count, total wait, median transfer time and bus bandwidth.

        One pass: instances coded by (op, group) once, then grouped sums and medians (no mask
        over every instance per group).
        """
        if self.n_instances == 0:
            return []
        pairs: dict[tuple[str, str], int] = {}
        code = np.fromiter(
            (pairs.setdefault(k, len(pairs)) for k in zip(self.op, self.group)),
            dtype=np.int64,
            count=self.n_instances,
        )
        n = len(pairs)
        count = np.bincount(code, minlength=n)
        wait = np.zeros(n, dtype=np.int64)  # exact integer sums
        np.add.at(wait, code[self.member_instance], self.wait_ns)
        transfer = group_median(self.transfer_ns, code, n)
        skew = group_median(self.start_skew_ns, code, n)
        finite = np.isfinite(self.busbw)
        bw = group_median(self.busbw[finite], code[finite], n)
        out: list[CollectiveSummary] = []
        for (op, grp), i in sorted(pairs.items()):
            out.append(
                {
                    "op": op,
                    "group": grp,
                    "count": int(count[i]),
                    "total_wait_ns": int(wait[i]),
                    "median_transfer_ns": int(transfer[i]),
                    "median_start_skew_ns": int(skew[i]),
                    "median_busbw": None if np.isnan(bw[i]) else float(bw[i]),
                }
            )
        return out


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _ranked_not_p2p(table: EventTable) -> np.ndarray:
    """Rows of a rank that are not point-to-point operations naming their peer (those, NCCL's
    in profiler traces, are paired by :mod:`otel_ext.analysis.cross.nccl_p2p`)."""
    ranked = table["rank"] >= 0
    peer = table.columns.get("coll_peer")
    return ranked if peer is None else ranked & (peer < 0)


def match_collectives(table: EventTable) -> CollectiveMatch:
    """Match each collective across the ranks that took part.

    Args:
        table: an event table (all ranks together).

    Returns:
        A :class:`CollectiveMatch`; collectives seen on one rank only are left out.

    >>> from otel_ext.analysis.table import EventTable
    >>> match_collectives(EventTable.empty()).n_instances
    0
    """
    cat = table["category"]
    has_id = table["coll_id"] > 0
    has_seq = table["coll_seq"] >= 0
    ranked = _ranked_not_p2p(table)
    keyed = (has_id | has_seq) & ranked
    kern = (cat == Category.KERNEL_COMM) & ranked
    span = (cat == Category.COLLECTIVE) & ranked
    n_kern, n_span = int((kern & keyed).sum()), int((span & keyed).sum())
    if n_kern and n_kern >= n_span:
        rows, source = np.flatnonzero(kern & keyed), "kernel"
    elif n_span:
        rows, source = np.flatnonzero(span & keyed), "span"
    elif kern.any() or span.any():
        rows = np.flatnonzero(kern if kern.any() else span)
        source = "ordinal"
    else:
        # a CPU-only job (gloo): the host-side collective operations are the collectives
        rows, alias = host_collective_members(table)
        return _match(table, rows, "ordinal", alias=alias)
    return _match(table, rows, source)


#: host-side collective operations, the backend's own execution first: gloo runs each
#: collective on a worker thread (``gloo:all_reduce``) that starts when the collective starts
#: executing and ends when it completed; ``record_param_comms`` and ``c10d::*`` are the
#: calling thread's enqueue (asynchronous work returns before the collective ran)
HOST_COLLECTIVE_FAMILIES: tuple[str, ...] = ("gloo:", "nccl:", "record_param_comms", "c10d::")


def host_collective_rows(table: EventTable) -> np.ndarray:
    """The rows of a trace's host-side collective operations, one family: the first of
    :data:`HOST_COLLECTIVE_FAMILIES` that at least two ranks recorded.

    >>> from otel_ext.analysis.table import Category as C
    >>> t = EventTable.from_rows([dict(category=C.CPU_OP, rank=r, name=n)
    ...     for r in (0, 1) for n in ("c10d::allreduce_", "gloo:all_reduce", "aten::mm")])
    >>> host_collective_rows(t).tolist()
    [1, 4]
    """
    cat = table["category"]
    rank = table["rank"]
    cand = np.flatnonzero((cat == Category.CPU_OP) & _ranked_not_p2p(table))
    if len(cand) == 0:
        return cand
    names = table.strings["name"]
    codes = distinct(table["name"][cand])
    family_of = {}
    for c in codes.tolist():
        text = names[int(c)]
        for i, fam in enumerate(HOST_COLLECTIVE_FAMILIES):
            if text.startswith(fam):
                family_of[c] = i
                break
    if not family_of:
        return cand[:0]
    lut = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
    for c, i in family_of.items():
        lut[c] = i
    fam = lut[table["name"][cand]]
    for i in range(len(HOST_COLLECTIVE_FAMILIES)):
        sel = cand[fam == i]
        if len(sel) and len(distinct(rank[sel])) >= 2:
            return sel
    return cand[:0]


#: point-to-point operations: their n-th calls on two ranks are not one collective (a send's
#: partner is a receive elsewhere), so host-side matching by order leaves them out
_P2P_HOST_OPS = re.compile(r"^(?:c10d::(?:send|recv_|recv_any_source_)|gloo:(?:send|recv))$")


def host_collective_members(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a CPU-only job's collectives, and for each the row whose key it takes (-1: its
    own).

    With gloo the caller's ``c10d::*`` operation is the arrival (it starts when the rank calls
    the collective; an asynchronous call returns at once) and the ``gloo:*`` operation on the
    process group's worker thread ends when the collective completed: each rank's k-th
    ``gloo:*`` row is merged into its k-th ``c10d::*`` row's member (first start, last end),
    keyed by the caller's operation (``c10d::_reduce_scatter_base_`` runs as
    ``gloo:all_reduce``). Where the two families' counts differ on a rank, or only one family
    was recorded, the first family of :data:`HOST_COLLECTIVE_FAMILIES` seen on two ranks is
    used alone. Point-to-point operations are left out.
    """
    cand = np.flatnonzero((table["category"] == Category.CPU_OP) & (table["rank"] >= 0))
    names = table.strings["name"]
    codes = distinct(table["name"][cand]) if len(cand) else cand
    p2p = {int(c) for c in codes.tolist() if _P2P_HOST_OPS.match(names[int(c)])}
    if p2p:
        cand = cand[~np.isin(table["name"][cand], np.asarray(sorted(p2p)))]
    picked = cand[host_collective_rows(table.select(cand))] if len(cand) else cand
    # family per name code (1 caller c10d::, 2 gloo worker), looked up for every row at once
    fam = np.zeros(int(codes.max()) + 1 if len(codes) else 1, dtype=np.int8)
    for c in codes.tolist():
        text = names[int(c)]
        fam[int(c)] = 2 if text.startswith("gloo:") else 1 if text.startswith("c10d::") else 0
    row_fam = fam[table["name"][cand]] if len(cand) else np.zeros(0, np.int8)
    caller = cand[row_fam == 1].astype(np.int64)
    worker = cand[row_fam == 2].astype(np.int64)
    none = np.full(len(picked), -1, dtype=np.int64)
    if len(caller) == 0 or len(worker) == 0:
        return picked, none
    rank = table["rank"]
    start = table["start_ns"]
    oc = caller[np.lexsort((start[caller], rank[caller]))]
    ow = worker[np.lexsort((start[worker], rank[worker]))]
    rc, rw = rank[oc], rank[ow]
    if not np.array_equal(
        np.unique(rc, return_counts=True)[1], np.unique(rw, return_counts=True)[1]
    ) or not np.array_equal(np.unique(rc), np.unique(rw)):
        return picked, none
    rows = np.concatenate([oc, ow])
    alias = np.concatenate(
        [np.full(len(oc), -1, dtype=np.int64), np.arange(len(oc), dtype=np.int64)]
    )
    return rows, alias


def _op_codes(table: EventTable, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Normalised operation per row (codes into a list of names)."""
    op_col = table["coll_op"][rows]
    name_col = table["name"][rows]
    ops: dict[str, int] = {}
    cache: dict[tuple[int, int], int] = {}
    codes = np.empty(len(rows), dtype=np.int64)
    for i, (oc, nc) in enumerate(zip(op_col.tolist(), name_col.tolist())):
        c = cache.get((oc, nc))
        if c is None:
            text = table.strings["coll_op"][oc] or table.strings["name"][nc]
            c = ops.setdefault(normalize_op(text), len(ops))
            cache[(oc, nc)] = c
        codes[i] = c
    return codes, list(ops)


def _ordinal_keys(
    rank: np.ndarray,
    start: np.ndarray,
    op_code: np.ndarray,
    group: np.ndarray,
    alias: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys ``(0, op, group, ordinal)`` when matching by order: each rank's n-th collective
    of an (op, group) is the same collective. Rows with ``alias >= 0`` are not numbered but
    copy their partner's op, group and ordinal; returns the keys and the (copied) op and
    group codes."""
    aliased = alias is not None and bool((alias >= 0).any())
    # numbered among the primary rows only; an aliased row copies its partner's key
    prim = np.flatnonzero(alias < 0) if alias is not None and aliased else np.arange(len(rank))
    order = prim[np.lexsort((start[prim], group[prim], op_code[prim], rank[prim]))]
    k_rank, k_op, k_grp = rank[order], op_code[order], group[order]
    new = np.r_[True, (k_rank[1:] != k_rank[:-1]) | (k_op[1:] != k_op[:-1])]
    new |= np.r_[True, k_grp[1:] != k_grp[:-1]]
    idx = np.arange(len(order))
    first = np.maximum.accumulate(np.where(new, idx, 0))
    ordinal = np.zeros(len(rank), dtype=np.int64)
    ordinal[order] = idx - first
    if alias is not None and aliased:
        al = np.flatnonzero(alias >= 0)
        op_code = op_code.copy()
        group = group.copy()
        ordinal[al] = ordinal[alias[al]]
        op_code[al] = op_code[alias[al]]
        group[al] = group[alias[al]]
    key = np.stack([np.zeros_like(rank), op_code, group, ordinal], axis=1)
    return key, op_code, group


def _id_keys(
    table: EventTable, rows: np.ndarray, op_code: np.ndarray, group: np.ndarray
) -> np.ndarray:
    """Keys ``(1, id, 0, -1)`` for rows with a collective id, else ``(0, op, group, seq)``
    (group and sequence number alone may repeat across operations in some producers)."""
    cid = table["coll_id"][rows].astype(np.int64)
    seq = table["coll_seq"][rows]
    use_id = cid > 0
    key = np.stack(
        [
            use_id.astype(np.int64),
            np.where(use_id, cid, op_code * 0),
            np.where(use_id, 0, group),
            np.where(use_id, -1, seq),
        ],
        axis=1,
    )
    if not use_id.all():
        key[:, 1] = np.where(use_id, cid, op_code)
    return key


def _within_runs(table: EventTable, rank: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``key`` with each row's run prepended when the table holds files of separate runs (a
    collective is within one run)."""
    runs = rank_runs(table)
    if len(set(runs.values())) <= 1:
        return key
    rk = np.array(sorted(runs), dtype=np.int64)
    run_ids = np.array([runs[r] for r in rk.tolist()], dtype=np.int64)
    return np.column_stack([run_ids[np.searchsorted(rk, rank)], key])


@dataclass
class _Members:
    """Rows merged into members, one per (instance, rank): first start, last end, first
    row."""

    ids: np.ndarray  # (instance, rank) per member, sorted
    of_row: np.ndarray  # each row's member
    start_ns: np.ndarray
    end_ns: np.ndarray
    row: np.ndarray  # the member's first row of the table


def _merge_members(
    inst: np.ndarray, rank: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray
) -> _Members:
    """Merge the rows of one (instance, rank) into one member."""
    umk, member_of_row = np.unique(np.stack([inst, rank], axis=1), axis=0, return_inverse=True)
    member_of_row = member_of_row.reshape(-1)
    m = len(umk)
    ms = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    me = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(ms, member_of_row, start)
    np.maximum.at(me, member_of_row, end)
    mrow = np.zeros(m, dtype=np.int64)
    mrow[member_of_row[::-1]] = rows[::-1]
    return _Members(umk, member_of_row, ms, me, mrow)


def _instance_sizes(
    table: EventTable, rows: np.ndarray, inst: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per instance: the largest and smallest bytes its rows name (-1 none) and the largest
    group size (-1 unknown)."""
    nbytes = np.full(n, -1, dtype=np.int64)
    row_bytes = table["coll_bytes"][rows]
    np.maximum.at(nbytes, inst, row_bytes)
    bmin = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    has_b = row_bytes > 0
    np.minimum.at(bmin, inst[has_b], row_bytes[has_b])
    bmin[bmin == np.iinfo(np.int64).max] = -1
    gsize = np.full(n, -1, dtype=np.int64)
    np.maximum.at(gsize, inst, table["coll_group_size"][rows].astype(np.int64))
    return nbytes, bmin, gsize


def _instance_labels(
    table: EventTable,
    kept: np.ndarray,
    first_row: np.ndarray,
    ukeys: np.ndarray,
    codes: tuple[np.ndarray, list[str], np.ndarray],
    source: str,
) -> tuple[list[str], list[str], list[str]]:
    """The op, group and key text of each kept instance, from its first row; ``codes`` are
    the rows' op codes, the op names and the rows' group codes."""
    op_code, op_names, group = codes
    ops, groups, keys = [], [], []
    gstrings = table.strings["coll_group"]
    istrings = table.strings["coll_id"]
    for k in kept:
        r = first_row[k]
        op = op_names[int(op_code[r])]
        grp = gstrings[int(group[r])]
        ops.append(op)
        groups.append(grp)
        kk = ukeys[k]
        if kk[0] == 1:
            keys.append(istrings[int(kk[1])])
        elif source == "ordinal":
            keys.append(f"{op}/{grp}#{int(kk[3])}" if grp else f"{op}#{int(kk[3])}")
        else:
            keys.append(f"{grp}#{int(kk[3])}" if grp else f"{op}#{int(kk[3])}")
    return ops, groups, keys


def _match(
    table: EventTable, rows: np.ndarray, source: str, *, alias: np.ndarray | None = None
) -> CollectiveMatch:
    """Match ``rows`` into collective instances; a row with ``alias[i] >= 0`` takes the key of
    row ``alias[i]`` (and merges into its member) instead of being numbered itself."""
    rank = table["rank"][rows].astype(np.int64)
    start = table["start_ns"][rows]
    group = table["coll_group"][rows].astype(np.int64)
    op_code, op_names = _op_codes(table, rows)
    if source == "ordinal":
        key, op_code, group = _ordinal_keys(rank, start, op_code, group, alias)
    else:
        key = _id_keys(table, rows, op_code, group)
    if len(rows) == 0:
        return _empty(source)
    ukeys, inst = np.unique(_within_runs(table, rank, key), axis=0, return_inverse=True)
    inst = inst.reshape(-1)
    mem = _merge_members(inst, rank, start, table["end_ns"][rows], rows)
    # keep instances with at least two ranks
    keep_inst = np.bincount(mem.ids[:, 0], minlength=len(ukeys)) >= 2
    new_id = np.cumsum(keep_inst) - 1
    keep_member = keep_inst[mem.ids[:, 0]]
    member_new = np.cumsum(keep_member) - 1
    keep_row = keep_member[mem.of_row]
    kept = np.flatnonzero(keep_inst)
    first_row = np.zeros(len(ukeys), dtype=np.int64)
    first_row[inst[::-1]] = np.arange(len(rows))[::-1]
    nbytes, bmin, gsize = _instance_sizes(table, rows, inst, len(ukeys))
    ops, groups, keys = _instance_labels(
        table, kept, first_row, ukeys, (op_code, op_names, group), source
    )
    count_mm = (
        _count_mismatches(table, rank, op_code, op_names, group) if source == "ordinal" else []
    )
    return CollectiveMatch(
        member_instance=new_id[mem.ids[keep_member, 0]].astype(np.int64),
        member_rank=mem.ids[keep_member, 1].astype(np.int64),
        member_start_ns=mem.start_ns[keep_member],
        member_end_ns=mem.end_ns[keep_member],
        member_row=mem.row[keep_member],
        row_member=member_new[mem.of_row[keep_row]].astype(np.int64),
        row_index=rows[keep_row],
        op=ops,
        group=groups,
        key=keys,
        bytes=nbytes[kept],
        source=source,
        group_size=gsize[kept],
        bytes_min=bmin[kept],
        bytes_max=nbytes[kept],
        count_mismatches=count_mm,
    )


def _count_mismatches(
    table: EventTable,
    rank: np.ndarray,
    op_code: np.ndarray,
    op_names: list[str],
    group: np.ndarray,
) -> list[CollectiveMismatch]:
    """Per (operation, group): ranks whose number of calls differs from the others'."""
    runs = rank_runs(table)
    run = (
        np.array([runs.get(int(r), 0) for r in rank.tolist()], dtype=np.int64)
        if len(runs) > 1
        else np.zeros(len(rank), np.int64)
    )
    key = np.stack([run, op_code, group, rank], axis=1)
    ukey, counts = np.unique(key, axis=0, return_counts=True)
    out: list[CollectiveMismatch] = []
    bounds = np.flatnonzero(np.r_[True, np.any(ukey[1:, :3] != ukey[:-1, :3], axis=1)])
    for b, e in zip(bounds.tolist(), np.r_[bounds[1:], len(ukey)].tolist()):
        c = counts[b:e]
        if e - b >= 2 and c.min() != c.max():
            typical = int(np.median(c))
            odd = {int(ukey[b + i, 3]): int(c[i]) for i in range(e - b) if c[i] != typical}
            out.append(
                {
                    "kind": "count",
                    "op": op_names[int(ukey[b, 1])],
                    "group": table.strings["coll_group"][int(ukey[b, 2])],
                    "typical_calls": typical,
                    "ranks": {str(k): v for k, v in sorted(odd.items())[:20]},
                }
            )
    return out


def _empty(source: str) -> CollectiveMatch:
    z = np.zeros(0, dtype=np.int64)
    return CollectiveMatch(z, z, z, z, z, z, z, [], [], [], z, source)


def sampled_fraction(table: EventTable) -> dict[str, float]:
    """Per collective group: the share of its collectives the trace holds.

    A profiler schedule (or the simulator) records one step in N; the group's sequence
    numbers then come in blocks with gaps between. The fraction is the distinct sequence
    numbers seen over the sequence numbers the run spanned: from the first block's start to
    the last block's start plus one period (the median distance between block starts), as
    the last traced block is on average followed by as many untraced ones as the others.
    A contiguous trace gives 1.0. Costs measured on the traced collectives divided by it
    estimate the whole run's.

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> t = EventTable.from_rows([dict(category=Category.COLLECTIVE, coll_group="g",
    ...     coll_seq=s, rank=0) for s in (0, 1, 8, 9, 16, 17, 40, 41, 42)])
    >>> sampled_fraction(t)
    {'g': 0.1875}
    """
    cat = table["category"]
    sel = ((cat == Category.COLLECTIVE) | (cat == Category.KERNEL_COMM)) & (table["coll_seq"] >= 0)
    out: dict[str, float] = {}
    groups = table["coll_group"][sel].astype(np.int64)
    seqs = table["coll_seq"][sel].astype(np.int64)
    if len(groups) == 0:
        return out
    # distinct (group, seq) pairs once; each group's sequence numbers are then one slice
    pairs = distinct_rows(np.stack([groups, seqs], axis=1))
    bounds = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    for b, e in zip(bounds.tolist(), np.r_[bounds[1:], len(pairs)].tolist()):
        g = int(pairs[b, 0])
        q = pairs[b:e, 1]
        starts = q[np.r_[True, np.diff(q) > 1]]
        if len(starts) >= 2:
            span = float(starts[-1] - starts[0] + median(np.diff(starts)))
        else:
            span = float(q[-1] - q[0] + 1)
        frac = min(1.0, len(q) / max(span, float(q[-1] - q[0] + 1)))
        out[table.strings["coll_group"][int(g)]] = round(frac, 6)
    return out
