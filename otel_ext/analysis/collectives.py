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
from typing import Any

import numpy as np

from otel_ext.analysis.table import Category, EventTable

__all__ = ["CollectiveMatch", "bus_factor", "link_stats", "match_collectives", "normalize_op"]

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
        factors = np.array(
            [bus_factor(op, int(k)) for op, k in zip(self.op, self.n_ranks)], dtype=np.float64
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
        )

    def rows(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """One JSON-ready row per collective instance, most waited-for first (up to ``limit``)."""
        inst = self.member_instance
        total_wait = np.zeros(self.n_instances, dtype=np.int64)
        np.add.at(total_wait, inst, self.wait_ns)
        order = np.argsort(-total_wait, kind="stable")
        if limit is not None:
            order = order[:limit]
        out = []
        for k in order:
            out.append(
                {
                    "key": self.key[k],
                    "op": self.op[k],
                    "group": self.group[k],
                    "n_ranks": int(self.n_ranks[k]),
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

    def summary(self) -> list[dict[str, Any]]:
        """Per operation and group: count, total wait, median transfer time and bus bandwidth."""
        out = []
        keys = sorted(set(zip(self.op, self.group)))
        op_arr = np.asarray(self.op, dtype=object)
        grp_arr = np.asarray(self.group, dtype=object)
        for op, grp in keys:
            sel = np.flatnonzero((op_arr == op) & (grp_arr == grp))
            msel = np.isin(self.member_instance, sel)
            bw = self.busbw[sel]
            bw = bw[np.isfinite(bw)]
            out.append(
                {
                    "op": op,
                    "group": grp,
                    "count": len(sel),
                    "total_wait_ns": int(self.wait_ns[msel].sum()),
                    "median_transfer_ns": int(np.median(self.transfer_ns[sel])),
                    "median_start_skew_ns": int(np.median(self.start_skew_ns[sel])),
                    "median_busbw": float(np.median(bw)) if len(bw) else None,
                }
            )
        return out


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


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
    rank = table["rank"]
    has_id = table["coll_id"] > 0
    has_seq = table["coll_seq"] >= 0
    keyed = (has_id | has_seq) & (rank >= 0)
    kern = (cat == Category.KERNEL_COMM) & (rank >= 0)
    span = (cat == Category.COLLECTIVE) & (rank >= 0)
    n_kern, n_span = int((kern & keyed).sum()), int((span & keyed).sum())
    if n_kern and n_kern >= n_span:
        rows, source = np.flatnonzero(kern & keyed), "kernel"
    elif n_span:
        rows, source = np.flatnonzero(span & keyed), "span"
    else:
        rows = np.flatnonzero(kern if kern.any() else span)
        source = "ordinal"
    return _match(table, rows, source)


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


def _match(table: EventTable, rows: np.ndarray, source: str) -> CollectiveMatch:
    rank = table["rank"][rows].astype(np.int64)
    start = table["start_ns"][rows]
    end = table["end_ns"][rows]
    group = table["coll_group"][rows].astype(np.int64)
    op_code, op_names = _op_codes(table, rows)
    if source == "ordinal":
        # each rank's n-th collective of an (op, group) is the same collective
        order = np.lexsort((start, group, op_code, rank))
        k_rank, k_op, k_grp = rank[order], op_code[order], group[order]
        new = np.r_[True, (k_rank[1:] != k_rank[:-1]) | (k_op[1:] != k_op[:-1])]
        new |= np.r_[True, k_grp[1:] != k_grp[:-1]]
        idx = np.arange(len(order))
        first = np.maximum.accumulate(np.where(new, idx, 0))
        ordinal = np.empty(len(order), dtype=np.int64)
        ordinal[order] = idx - first
        key = np.stack([np.zeros_like(rank), op_code, group, ordinal], axis=1)
    else:
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
            # group + seq alone may repeat across operations in some producers: add the op
            key[:, 1] = np.where(use_id, cid, op_code)
    if len(rows) == 0:
        return _empty(source)
    ukeys, inst = np.unique(key, axis=0, return_inverse=True)
    inst = inst.reshape(-1)
    # merge rows of one (instance, rank)
    mk = np.stack([inst, rank], axis=1)
    umk, member_of_row = np.unique(mk, axis=0, return_inverse=True)
    member_of_row = member_of_row.reshape(-1)
    m = len(umk)
    ms = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    me = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(ms, member_of_row, start)
    np.maximum.at(me, member_of_row, end)
    mrow = np.zeros(m, dtype=np.int64)
    mrow[member_of_row[::-1]] = rows[::-1]
    # keep instances with at least two ranks
    counts = np.bincount(umk[:, 0], minlength=len(ukeys))
    keep_inst = counts >= 2
    new_id = np.cumsum(keep_inst) - 1
    keep_member = keep_inst[umk[:, 0]]
    member_new = np.cumsum(keep_member) - 1
    keep_row = keep_member[member_of_row]
    kept_insts = np.flatnonzero(keep_inst)
    # per-instance descriptors
    first_row_of_inst = np.zeros(len(ukeys), dtype=np.int64)
    first_row_of_inst[inst[::-1]] = np.arange(len(rows))[::-1]
    nbytes = np.full(len(ukeys), -1, dtype=np.int64)
    np.maximum.at(nbytes, inst, table["coll_bytes"][rows])
    ops, groups, keys = [], [], []
    gstrings = table.strings["coll_group"]
    istrings = table.strings["coll_id"]
    for k in kept_insts:
        r = first_row_of_inst[k]
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
    return CollectiveMatch(
        member_instance=new_id[umk[keep_member, 0]].astype(np.int64),
        member_rank=umk[keep_member, 1].astype(np.int64),
        member_start_ns=ms[keep_member],
        member_end_ns=me[keep_member],
        member_row=mrow[keep_member],
        row_member=member_new[member_of_row[keep_row]].astype(np.int64),
        row_index=rows[keep_row],
        op=ops,
        group=groups,
        key=keys,
        bytes=nbytes[kept_insts],
        source=source,
    )


def _empty(source: str) -> CollectiveMatch:
    z = np.zeros(0, dtype=np.int64)
    return CollectiveMatch(z, z, z, z, z, z, z, [], [], [], z, source)


def link_stats(table: EventTable) -> list[dict[str, Any]]:
    """Per link: transfers, median duration and bandwidth, and slowness against its peers.

    Link-transfer rows (``Category.LINK_TRANSFER``) name their link in the ``device`` column
    (``host0/chip1-chip2``, ``host1/nic0``). Peers are the other links of the same kind (a
    link between chips, or a host's network port); ``slowness`` is the median bandwidth of
    all links of that kind over this link's (or, without byte counts, this link's median duration over
    the peers'): 1 is normal, 2 means half speed.

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> rows = [dict(start_ns=i * 100, end_ns=i * 100 + d, category=Category.LINK_TRANSFER,
    ...              device=l, coll_bytes=1000)
    ...         for i in range(4) for l, d in [("h0/chip0-chip1", 10), ("h0/chip1-chip2", 30),
    ...                                        ("h0/chip2-chip3", 10)]]
    >>> [(s["link"], s["slowness"]) for s in link_stats(EventTable.from_rows(rows))]
    [('h0/chip0-chip1', 1.0), ('h0/chip1-chip2', 3.0), ('h0/chip2-chip3', 1.0)]
    """
    rows = np.flatnonzero(table["category"] == Category.LINK_TRANSFER)
    if len(rows) == 0:
        return []
    dev = table["device"][rows]
    dur = (table["end_ns"][rows] - table["start_ns"][rows]).astype(np.float64)
    nbytes = table["coll_bytes"][rows].astype(np.float64)
    stats: list[dict[str, Any]] = []
    for code in np.unique(dev):
        if code == 0:
            continue
        sel = dev == code
        link = table.strings["device"][int(code)]
        d = dur[sel]
        b = nbytes[sel]
        with np.errstate(divide="ignore", invalid="ignore"):
            bw = np.where((b > 0) & (d > 0), b / (d / 1e9), np.nan)
        bw = bw[np.isfinite(bw)]
        stats.append(
            {
                "link": link,
                "kind": "nic" if "nic" in link.rsplit("/", 1)[-1] else "chip",
                "host": link.split("/", 1)[0] if "/" in link else "",
                "transfers": int(sel.sum()),
                "bytes": int(b[b > 0].sum()),
                "busy_ns": int(d.sum()),
                "median_ns": float(np.median(d)),
                "median_bw": float(np.median(bw)) if len(bw) else None,
            }
        )
    for s in stats:
        peers = [p for p in stats if p["kind"] == s["kind"] and p is not s]
        s["peers"] = len(peers)
        if not peers:
            s["slowness"] = None
            s["peer_median_ns"] = None
            continue
        kin = [*peers, s]  # the median over all links of the kind, robust with three or more
        peer_bw = [p["median_bw"] for p in kin if p["median_bw"]]
        s["peer_median_ns"] = float(np.median([p["median_ns"] for p in kin]))
        if s["median_bw"] and peer_bw:
            s["slowness"] = round(float(np.median(peer_bw)) / s["median_bw"], 6)
        elif s["peer_median_ns"] > 0:
            s["slowness"] = round(s["median_ns"] / s["peer_median_ns"], 6)
        else:
            s["slowness"] = None
    return stats
