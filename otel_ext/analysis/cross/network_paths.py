"""The network as a suspect: point-to-point transfers matched across ranks, bandwidth per path.

**Transfers.** otel-ext's send and receive spans name their peer and size, and both ends carry
the same collective id (``group:src->dst:seq``), so collective matching pairs them as one
two-member instance. A transfer's time runs from when both ends were ready (the later of the
two starts) to when the data was there (the receive's end), on the aligned timeline: a send
may end as soon as its bytes are in the socket's buffer (gloo over TCP does), so the sender's
own duration says little. NCCL's sends and receives in PyTorch profiler traces carry no
collective id; :mod:`otel_ext.analysis.cross.nccl_p2p` pairs them (the k-th send of A to B
with the k-th receive of B from A, per process group) into the same :class:`Transfers`.
Across hosts the time carries the clock alignment's bound (the
report's ``clock_bound_ns``; sub-millisecond on the harness), small against a slow path's
tens of milliseconds and stated beside it. Its effective bandwidth is its bytes over that
time.

**Paths.** Transfers are grouped by the hosts of their two ends (``hostA->hostB``, hosts from
the ranks' resources or file names): within a host, or between two. An inter-host path is
*slow* when both hold:

* its median bandwidth is far below its reference: ``slowness`` (3×) below the network
  ports' nominal bandwidth when the device model gives it, else 3× below the median of the
  *other* inter-host paths when at least half of them are not themselves that slow, else
  ``intra_factor`` (10×) below the fastest within-host path (links between hosts are expected
  slower than those within one, so only a path beyond that margin is judged against them;
  within a host, a path whose ranks also make the slow transfers shares their worker
  threads, so the fastest one is the reference);
* more of its transfers are that far below the reference than of the transfers the
  reference comes from (within-host, or the other inter-host paths): a one-sided Fisher exact
  test, adjusted for the paths tested (Bonferroni), at ``alpha``; against a nominal rate,
  whether each transfer is that far below it is a fair coin under the null (a sign test).

Its cost is the time its transfers took beyond the slowest rate that is not slow (the
reference over the threshold). The two directions of one
host pair are reported as one network path when both are slow.

**No peers.** A profiler trace of gloo (``c10d::send``/``recv_`` and the ``gloo:send``/``recv``
worker annotations) carries no peer. What can still be said: per rank, the median duration of
its sends and of its receives against the other ranks'. Slow receives alone may be a late
sender; slow receives on some ranks *and* slow sends on as many others mean the transfers
themselves are slow (both ends busy for the whole transfer), a network path between them; the
trace cannot say which. Or, on the aligned timeline:
a receive that lasts long because its sender came late ends soon after that sender *called*
its send; when, for most of a rank's slow receives, no other rank called a send in the
receive's second half (``late_sender_share``), no sender was late: the transfers themselves
were slow.

>>> import numpy as np
>>> from otel_ext.analysis.table import Category, EventTable
>>> rows = []
>>> for k in range(12):
...     for src, dst, dur in ((0, 1, 500_000), (1, 2, 80_000_000), (2, 3, 500_000),
...                           (3, 0, 75_000_000)):
...         cid = f"pg:{src}->{dst}:{k}"
...         t0 = k * 100_000_000
...         rows.append(dict(rank=src, category=Category.COLLECTIVE, coll_op="send", coll_id=cid,
...                          coll_bytes=1 << 20, start_ns=t0, end_ns=t0 + dur))
...         rows.append(dict(rank=dst, category=Category.COLLECTIVE, coll_op="recv", coll_id=cid,
...                          coll_bytes=1 << 20, start_ns=t0, end_ns=t0 + dur))
>>> t = EventTable.from_rows(rows)
>>> from otel_ext.analysis.cross.collective_match import match_collectives
>>> hosts = {0: "hA", 1: "hA", 2: "hB", 3: "hB"}
>>> paths = path_stats(p2p_transfers(t, match_collectives(t)), hosts)
>>> [(p.path, p.slow) for p in paths]
[('hA->hA', False), ('hA->hB', True), ('hB->hA', True), ('hB->hB', False)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from otel_ext._arrays import group_median, median
from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.significance import (
    ALPHA,
    adjusted,
    binomial_upper_tail,
    fisher_upper_tail,
)
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "PathStat",
    "PathStatJson",
    "RankTransferJson",
    "RankTransferStat",
    "Transfers",
    "p2p_transfers",
    "path_stats",
    "unpaired_transfer_stats",
]

_SEND_NAMES = ("c10d::send", "gloo:send")
_RECV_NAMES = ("c10d::recv_", "c10d::recv_any_source_", "gloo:recv")


@dataclass
class Transfers:
    """Matched point-to-point transfers, one entry each."""

    src_rank: np.ndarray
    dst_rank: np.ndarray
    nbytes: np.ndarray
    transfer_ns: np.ndarray
    start_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.src_rank)


class PathStatJson(TypedDict):
    """:meth:`PathStat.as_dict`: the report's ``network.paths`` rows."""

    path: str
    src_host: str
    dst_host: str
    inter_host: bool
    transfers: int
    bytes: int
    median_transfer_ns: float
    median_bw: float | None
    reference_bw: float | None
    reference: str
    threshold: float | None
    slowness: float | None
    slower: int
    p: float
    slow: bool
    extra_ns: int
    rank_pairs: list[str]


class RankTransferJson(TypedDict):
    """:meth:`RankTransferStat.as_dict`: the report's ``network.unpaired`` rows."""

    rank: int
    host: str
    direction: str
    count: int
    median_ns: float
    peer_median_ns: float
    ratio: float
    slower: int
    p: float
    slow: bool
    late_sender_share: float | None


@dataclass(frozen=True)
class PathStat:
    """One directed path between hosts (or within one)."""

    path: str
    src_host: str
    dst_host: str
    inter_host: bool
    transfers: int
    bytes: int
    median_transfer_ns: float
    median_bw: float | None  # bytes/s
    reference_bw: float | None
    reference: str
    threshold: float | None  # how far below the reference a slow path is
    slowness: float | None
    slower: int
    p: float
    slow: bool
    extra_ns: int
    rank_pairs: list[str]

    def as_dict(self) -> PathStatJson:
        """The row as JSON-ready values."""
        return {
            "path": self.path,
            "src_host": self.src_host,
            "dst_host": self.dst_host,
            "inter_host": self.inter_host,
            "transfers": self.transfers,
            "bytes": self.bytes,
            "median_transfer_ns": self.median_transfer_ns,
            "median_bw": self.median_bw,
            "reference_bw": self.reference_bw,
            "reference": self.reference,
            "threshold": self.threshold,
            "slowness": self.slowness,
            "slower": self.slower,
            "p": self.p,
            "slow": self.slow,
            "extra_ns": self.extra_ns,
            "rank_pairs": list(self.rank_pairs),
        }


@dataclass(frozen=True)
class RankTransferStat:
    """One rank's unpaired sends or receives against the other ranks' (no peers known)."""

    rank: int
    host: str
    direction: str  # "send" or "recv"
    count: int
    median_ns: float
    peer_median_ns: float
    ratio: float
    slower: int
    p: float
    slow: bool
    #: receives only: of its slow receives, the share with a late sender (module docstring)
    late_sender_share: float | None = None

    def as_dict(self) -> RankTransferJson:
        """The row as JSON-ready values."""
        return {
            "rank": self.rank,
            "host": self.host,
            "direction": self.direction,
            "count": self.count,
            "median_ns": self.median_ns,
            "peer_median_ns": self.peer_median_ns,
            "ratio": self.ratio,
            "slower": self.slower,
            "p": self.p,
            "slow": self.slow,
            "late_sender_share": self.late_sender_share,
        }


def _row_is_send(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Per row: 1 for a send end, 0 for a receive end, -1 when it does not say."""
    ops = table.strings["coll_op"]
    names = table.strings["name"]
    out = np.full(len(rows), -1, dtype=np.int64)
    for i, (oc, nc) in enumerate(
        zip(table["coll_op"][rows].tolist(), table["name"][rows].tolist())
    ):
        text = (ops[int(oc)] or names[int(nc)]).lower()
        if "recv" in text:
            out[i] = 0
        elif "send" in text:
            out[i] = 1
    return out


def p2p_transfers(table: EventTable, match: CollectiveMatch) -> Transfers:
    """The matched instances that are point-to-point transfers (a ``src->dst`` key and two
    members, one a send and one a receive), with their clock-free transfer times.

    Args:
        table: the table ``match`` was made from (its rows name each end's operation).
        match: matched collectives (aligned or not: only each end's own duration is used).

    Returns:
        :class:`Transfers` (empty when the trace has none).
    """
    empty = Transfers(*(np.zeros(0, dtype=np.int64) for _ in range(5)))
    if match.n_instances == 0:
        return empty
    is_p2p = np.array(
        ["->" in k and n == 2 for k, n in zip(match.key, match.n_ranks.tolist())], dtype=bool
    )
    if not is_p2p.any():
        return empty
    mem = np.flatnonzero(is_p2p[match.member_instance])
    inst = match.member_instance[mem]
    send = _row_is_send(table, match.member_row[mem])
    mstart = match.member_start_ns[mem].astype(np.int64)
    mend = match.member_end_ns[mem].astype(np.int64)
    # per instance: exactly one send end and one receive end
    n = match.n_instances
    n_send = np.bincount(inst, weights=send == 1, minlength=n)
    n_recv = np.bincount(inst, weights=send == 0, minlength=n)
    ok_inst = (n_send == 1) & (n_recv == 1)
    keep = ok_inst[inst]
    inst, send, mem = inst[keep], send[keep], mem[keep]
    mstart, mend = mstart[keep], mend[keep]
    if len(inst) == 0:
        return empty
    src = np.zeros(n, dtype=np.int64)
    dst = np.zeros(n, dtype=np.int64)
    src[inst[send == 1]] = match.member_rank[mem[send == 1]]
    dst[inst[send == 0]] = match.member_rank[mem[send == 0]]
    # both ends ready at the later start; the data is there when the receive ends
    ready = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(ready, inst, mstart)
    arrived = np.zeros(n, dtype=np.int64)
    arrived[inst[send == 0]] = mend[send == 0]
    ids = np.flatnonzero(ok_inst)
    return Transfers(
        src_rank=src[ids],
        dst_rank=dst[ids],
        nbytes=match.bytes[ids].astype(np.int64),
        transfer_ns=np.maximum(arrived[ids] - ready[ids], 0),
        start_ns=ready[ids],
    )


@dataclass
class _Paths:
    """Transfers coded by their directed host path, with each path's median bandwidth."""

    keys: list[tuple[str, str]]  # (source host, destination host), sorted
    code: np.ndarray  # per transfer: its path
    bw: np.ndarray  # per transfer: bytes/s (NaN without a size or a duration)
    inter: np.ndarray  # per path: between two hosts
    med_bw: np.ndarray  # per path: median bandwidth (NaN without one)


def _paths(transfers: Transfers, host_of_rank: dict[int, str]) -> _Paths:
    """Group the transfers by the hosts of their two ends."""
    sh = [host_of_rank.get(int(r), f"rank{int(r)}") for r in transfers.src_rank.tolist()]
    dh = [host_of_rank.get(int(r), f"rank{int(r)}") for r in transfers.dst_rank.tolist()]
    keys = sorted(set(zip(sh, dh)))
    code_of = {k: i for i, k in enumerate(keys)}
    code = np.array([code_of[k] for k in zip(sh, dh)], dtype=np.int64)
    secs = transfers.transfer_ns / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = np.where((transfers.nbytes > 0) & (secs > 0), transfers.nbytes / secs, np.nan)
    inter = np.array([a != b for a, b in keys], dtype=bool)
    med_bw = np.array([float(median(bw[(code == i) & np.isfinite(bw)])) for i in range(len(keys))])
    return _Paths(keys, code, bw, inter, med_bw)


@dataclass(frozen=True)
class _Reference:
    """What one path is judged against: a rate, what it is, how far below it a slow path
    is, and the transfers its slow share is compared with (None: a sign test)."""

    rate: float
    basis: str
    threshold: float
    against: np.ndarray | None = None


_NO_REFERENCE = _Reference(np.nan, "", np.inf)


def _reference_of(
    i: int,
    ps: _Paths,
    intra_ref: float,
    *,
    slowness: float,
    intra_factor: float,
    nominal_bw: float | None,
) -> _Reference:
    """Inter-host path ``i``'s reference: nominal, else the other inter-host paths when at
    least half of them are not that slow themselves, else the fastest within-host path."""
    keys, med_bw, inter = ps.keys, ps.med_bw, ps.inter
    others = [
        j for j in range(len(keys)) if inter[j] and j != i and keys[j] != (keys[i][1], keys[i][0])
    ]
    other_bw = med_bw[others]
    other_bw = other_bw[np.isfinite(other_bw)]
    mine_bw = med_bw[i] if np.isfinite(med_bw[i]) else 0.0
    healthy = other_bw[other_bw >= mine_bw * slowness]
    healthy_paths = [j for j in others if med_bw[j] >= mine_bw * slowness]
    if nominal_bw:
        return _Reference(float(nominal_bw), "the NIC's nominal bandwidth", slowness)
    if len(healthy) and len(healthy) * 2 >= len(other_bw):
        return _Reference(
            float(median(healthy)),
            "other inter-host paths",
            slowness,
            np.isin(ps.code, healthy_paths),
        )
    if np.isfinite(intra_ref):
        return _Reference(intra_ref, "the fastest within-host path", intra_factor, ~inter[ps.code])
    return _Reference(np.nan, "none", np.inf)


def _references(
    ps: _Paths, *, slowness: float, intra_factor: float, nominal_bw: float | None
) -> list[_Reference]:
    """Each path's reference (within-host paths have none)."""
    intra = ps.med_bw[~ps.inter & np.isfinite(ps.med_bw)]
    # the fastest within-host path: a path within a host shares its ranks' worker threads with
    # the slow transfers they also make, so the median of all of them is no clean reference
    intra_ref = float(intra.max()) if len(intra) else np.nan
    return [
        _reference_of(
            i, ps, intra_ref, slowness=slowness, intra_factor=intra_factor, nominal_bw=nominal_bw
        )
        if ps.inter[i]
        else _NO_REFERENCE
        for i in range(len(ps.keys))
    ]


def _slow_share_tests(
    ps: _Paths, refs: list[_Reference], tested: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per path: its transfers below the reference by the threshold, and the raw p-value that
    so many are (Fisher against the reference group's share; a sign test against a nominal
    rate); 1 for paths not tested."""
    bw, code = ps.bw, ps.code
    slower = np.zeros(len(ps.keys), dtype=np.int64)
    p_raw = np.ones(len(ps.keys))
    for i in tested:
        mine = (code == i) & np.isfinite(bw)
        cut = refs[i].rate / refs[i].threshold
        slower[i] = int((bw[mine] < cut).sum())
        base = refs[i].against
        if base is None:  # a nominal rate: each transfer below it by the threshold or not
            p_raw[i] = float(binomial_upper_tail([slower[i]], [int(mine.sum())], [0.5])[0])
        else:  # more of its transfers that slow than of the reference group's (Fisher)
            ref_ok = base & np.isfinite(bw)
            p_raw[i] = fisher_upper_tail(
                int(slower[i]), int(mine.sum()), int((bw[ref_ok] < cut).sum()), int(ref_ok.sum())
            )
    return slower, p_raw


def _path_stat(
    i: int,
    transfers: Transfers,
    ps: _Paths,
    ref: _Reference,
    slower: int,
    p: float,
    *,
    tested: bool,
    alpha: float,
) -> PathStat:
    """Path ``i``'s row: its figures against its reference, whether it is slow, and the
    time its transfers took beyond the slowest rate that is not slow."""
    a, b = ps.keys[i]
    mine = ps.code == i
    med = ps.med_bw[i]
    has_ref = bool(np.isfinite(ref.rate) and np.isfinite(med) and med > 0)
    slow_by = float(ref.rate / med) if has_ref else None
    slow = bool(tested and slow_by is not None and slow_by >= ref.threshold and p <= alpha)
    extra = 0
    if slow:
        ok = mine & np.isfinite(ps.bw)
        expected_ns = transfers.nbytes[ok] / (ref.rate / ref.threshold) * 1e9
        extra = int(np.clip(transfers.transfer_ns[ok] - expected_ns, 0, None).sum())
    pairs = zip(transfers.src_rank[mine].tolist(), transfers.dst_rank[mine].tolist())
    return PathStat(
        path=f"{a}->{b}",
        src_host=a,
        dst_host=b,
        inter_host=bool(ps.inter[i]),
        transfers=int(mine.sum()),
        bytes=int(np.clip(transfers.nbytes[mine], 0, None).sum()),
        median_transfer_ns=float(median(transfers.transfer_ns[mine])),
        median_bw=float(med) if np.isfinite(med) else None,
        reference_bw=float(ref.rate) if np.isfinite(ref.rate) else None,
        reference=ref.basis,
        threshold=float(ref.threshold) if np.isfinite(ref.threshold) else None,
        slowness=round(slow_by, 4) if slow_by is not None else None,
        slower=slower,
        p=p,
        slow=slow,
        extra_ns=extra,
        rank_pairs=sorted({f"{int(s)}->{int(d)}" for s, d in pairs}),
    )


def path_stats(
    transfers: Transfers,
    host_of_rank: dict[int, str],
    *,
    slowness: float = 3.0,
    intra_factor: float = 10.0,
    nominal_bw: float | None = None,
    alpha: float = ALPHA,
) -> list[PathStat]:
    """Bandwidth per directed host path, and which inter-host paths are slow (see the module
    docstring). Transfers without a size are counted but give no bandwidth.

    Args:
        transfers: :func:`p2p_transfers`'s output.
        host_of_rank: each rank's host.
        slowness: how far below its reference (nominal, or other inter-host paths) a slow
            path's median bandwidth is.
        intra_factor: how far below the fastest within-host path a slow inter-host path is,
            when that is its reference.
        nominal_bw: the network ports' nominal bandwidth (bytes/s) when the device model or
            the NIC counters give it: then the reference of every inter-host path.
        alpha: the family-wise level of the sign test (Bonferroni over the paths tested).

    Returns:
        One :class:`PathStat` per path, sorted by path name.
    """
    if len(transfers) == 0:
        return []
    ps = _paths(transfers, host_of_rank)
    refs = _references(ps, slowness=slowness, intra_factor=intra_factor, nominal_bw=nominal_bw)
    tested = [i for i in range(len(ps.keys)) if ps.inter[i] and np.isfinite(refs[i].rate)]
    slower, p_raw = _slow_share_tests(ps, refs, tested)
    p_adj = adjusted(p_raw, max(len(tested), 1))
    return [
        _path_stat(
            i,
            transfers,
            ps,
            refs[i],
            int(slower[i]),
            float(p_adj[i]) if i in tested else 1.0,
            tested=i in tested,
            alpha=alpha,
        )
        for i in range(len(ps.keys))
    ]


@dataclass(frozen=True)
class _RankTest:
    """One rank's sends or receives against the other ranks' medians, before the p-value."""

    rank: int
    direction: str
    count: int
    median: float
    peer: float
    slower: int
    late_sender_share: float | None


def _direction_tests(
    table: EventTable,
    direction: str,
    family: tuple[str, ...],
    sends: _SendCalls,
    *,
    ratio: float,
) -> list[_RankTest]:
    """Per rank, its operations of one direction (``family``'s names: the worker's when the
    trace has them, else the caller's) against the other ranks' median; receives also with
    their late-sender share."""
    names = table.strings["name"]
    worker = [i for i, n in enumerate(names) if n in family and n.startswith("gloo:")]
    caller = [i for i, n in enumerate(names) if n in family and not n.startswith("gloo:")]
    codes = worker or caller
    if not codes:
        return []
    ranked = (table["category"] == Category.CPU_OP) & (table["rank"] >= 0)
    rows = np.flatnonzero(ranked & np.isin(table["name"], np.asarray(codes)))
    if len(rows) == 0:
        return []
    rows = rows[np.argsort(table["rank"][rows], kind="stable")]  # rows grouped by rank
    rank = table["rank"][rows].astype(np.int64)
    dur = (table["end_ns"][rows] - table["start_ns"][rows]).astype(np.float64)
    ranks, first, counts = np.unique(rank, return_index=True, return_counts=True)
    if len(ranks) < 2:
        return []
    meds = group_median(dur, np.repeat(np.arange(len(ranks)), counts), len(ranks))
    peers = _median_without_each(meds)
    out = []
    for i, r in enumerate(ranks.tolist()):
        mine = slice(first[i], first[i] + counts[i])
        late = None
        if direction == "recv":
            late = sends.late_share(rows[mine], r, peers[i] * ratio)
        out.append(
            _RankTest(
                rank=int(r),
                direction=direction,
                count=int(counts[i]),
                median=float(meds[i]),
                peer=float(peers[i]),
                slower=int((dur[mine] > peers[i]).sum()),
                late_sender_share=late,
            )
        )
    return out


def _rank_transfer_stat(
    t: _RankTest, p: float, host_of_rank: dict[int, str], *, ratio: float, alpha: float
) -> RankTransferStat:
    """One rank's row from its test and adjusted p-value: slow when its median is ``ratio``
    times its peers' and the p-value is at most ``alpha``."""
    rat = t.median / t.peer if t.peer > 0 else (np.inf if t.median > 0 else 1.0)
    return RankTransferStat(
        rank=t.rank,
        host=host_of_rank.get(t.rank, ""),
        direction=t.direction,
        count=t.count,
        median_ns=t.median,
        peer_median_ns=t.peer,
        ratio=round(float(rat), 4) if np.isfinite(rat) else float("inf"),
        slower=t.slower,
        p=float(p),
        slow=bool(rat >= ratio and p <= alpha),
        late_sender_share=t.late_sender_share,
    )


def unpaired_transfer_stats(
    table: EventTable,
    host_of_rank: dict[int, str],
    *,
    ratio: float = 5.0,
    alpha: float = ALPHA,
) -> list[RankTransferStat]:
    """Per rank, its sends' and receives' median duration against the other ranks', for
    traces whose point-to-point operations name no peer (see the module docstring).

    The worker-side annotations (``gloo:send``/``gloo:recv``: they last until the data
    moved) are used when the trace has them, else the caller's ``c10d::`` operations. A rank
    is slow in one direction when its median is ``ratio`` times the other ranks' median and
    more of its operations are above that median than chance allows (sign test, adjusted
    for the ranks tested in that direction).
    """
    sends = _SendCalls(table)
    tests = [
        t
        for direction, family in (("send", _SEND_NAMES), ("recv", _RECV_NAMES))
        for t in _direction_tests(table, direction, family, sends, ratio=ratio)
    ]
    if not tests:
        return []
    p_raw = binomial_upper_tail(
        [t.slower for t in tests], [t.count for t in tests], [0.5] * len(tests)
    )
    # each direction its own family (its ranks): receives decide a finding, sends add to it
    is_recv = np.array([t.direction == "recv" for t in tests])
    p_adj = np.where(
        is_recv,
        adjusted(p_raw, max(int(is_recv.sum()), 1)),
        adjusted(p_raw, max(int((~is_recv).sum()), 1)),
    )
    return [
        _rank_transfer_stat(t, p, host_of_rank, ratio=ratio, alpha=alpha)
        for t, p in zip(tests, p_adj.tolist())
    ]


def _median_without_each(values: np.ndarray) -> np.ndarray:
    """For each element, the median of the others (one sort, not one per element).

    >>> _median_without_each(np.array([1.0, 2.0, 10.0, 4.0])).tolist()
    [4.0, 4.0, 2.0, 2.0]
    """
    n = len(values)
    order = np.argsort(values, kind="stable")
    srt = values[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    m = n - 1  # the others: the sorted values without one position

    def kth(k: int, at: np.ndarray) -> np.ndarray:
        return srt[np.where(k < at, k, k + 1)]  # the k-th of the others, skipping ``at``

    lo, hi = (m - 1) // 2, m // 2
    return (kth(lo, pos) + kth(hi, pos)) / 2.0


class _SendCalls:
    """The trace's send calls (``c10d::send``, the caller's enqueue; ``gloo:send`` where the
    trace has no caller rows), sorted once, for :meth:`late_share`."""

    def __init__(self, table: EventTable) -> None:
        names = table.strings["name"]
        caller = [i for i, n in enumerate(names) if n == "c10d::send"]
        worker = [i for i, n in enumerate(names) if n == "gloo:send"]
        codes = caller or worker
        self.table = table
        rows = np.zeros(0, dtype=np.int64)
        if codes:
            rows = np.flatnonzero(
                (table["category"] == Category.CPU_OP)
                & (table["rank"] >= 0)
                & np.isin(table["name"], np.asarray(codes))
            )
        self.any = bool(codes)
        self.starts = np.sort(table["start_ns"][rows])
        order = np.lexsort((table["start_ns"][rows], table["rank"][rows]))
        self.rank = table["rank"][rows][order].astype(np.int64)
        self.rank_starts = table["start_ns"][rows][order]

    def late_share(self, recv_rows: np.ndarray, rank: int, slow_ns: float) -> float | None:
        """Of a rank's receives longer than ``slow_ns``, the share during whose second half
        some *other* rank called a send (a sender that came late); None when no receive is
        that slow or the trace has no send calls.

        Read on the aligned timeline: meaningful where the clocks' bounds are small against
        the receives (milliseconds against tens of milliseconds on the harness)."""
        t = self.table
        dur = t["end_ns"][recv_rows] - t["start_ns"][recv_rows]
        slow = recv_rows[dur > slow_ns]
        if len(slow) == 0 or not self.any:
            return None
        lo = t["start_ns"][slow] + (t["end_ns"][slow] - t["start_ns"][slow]) // 2
        hi = t["end_ns"][slow]

        def count(starts: np.ndarray) -> np.ndarray:
            return np.searchsorted(starts, hi, side="right") - np.searchsorted(starts, lo)

        a, b = np.searchsorted(self.rank, [rank, rank + 1])
        others = count(self.starts) - count(self.rank_starts[a:b])  # every send but its own
        return float(np.mean(others > 0))
