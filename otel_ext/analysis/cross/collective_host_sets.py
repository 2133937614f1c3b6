"""The transfer phase of collectives per host set: do collectives that cross hosts move their
bytes as fast as those within one?

A matched collective's *transfer phase* runs from its last member's arrival to its median
member's end (:mod:`otel_ext.analysis.cross.collective_match`): no member waits for another
then, the bytes move. Its bus bandwidth (bytes over that time, times NCCL's bus factor for the
operation and group size) is comparable across group sizes. Here the instances are grouped by
the set of hosts their members run on (one host, or several), their operation and their size
class (bytes rounded down to a power of two), and each group's median bus bandwidth is set
against the within-host groups' of the same operation and size class: ``ratio`` = the host
set's median / the median of every within-host instance of that operation and size class.

Only operations and size classes that have both within-host and cross-host instances give
rows (there is nothing to compare otherwise); instances with a member whose host is unknown,
without bytes or with no transfer phase are left out, as are point-to-point operations (the
network paths measure those). Cross-host times are read on the aligned timeline, so they
carry the clock alignment's bound. The rows are evidence beside the network paths, not a
finding: a cross-host collective is expected to be slower (its slowest link is the network),
and by how much depends on the topology and the algorithm NCCL chose, which the trace does
not say.

>>> from otel_ext.analysis.table import Category, EventTable
>>> from otel_ext.analysis.cross.collective_match import match_collectives
>>> rows = []
>>> for seq in range(4):
...     for grp, ranks, dur in (("intra", (0, 1), 1_000_000), ("inter", (1, 2), 8_000_000)):
...         t0 = seq * 100_000_000
...         rows += [dict(rank=r, category=Category.KERNEL_COMM, coll_op="allreduce",
...                       coll_group=grp, coll_seq=seq, coll_bytes=1 << 24, coll_group_size=2,
...                       start_ns=t0, end_ns=t0 + dur) for r in ranks]
>>> m = match_collectives(EventTable.from_rows(rows))
>>> out = collective_host_set_bandwidth(m, {0: "hA", 1: "hA", 2: "hB"})
>>> [(r.host_set, r.op, r.instances, r.ratio) for r in out]
[('hA', 'allreduce', 4, 1.0), ('hA+hB', 'allreduce', 4, 0.125)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from otel_ext._arrays import group_median
from otel_ext.analysis.cross.collective_match import CollectiveMatch

__all__ = ["HostSetBandwidth", "HostSetBandwidthJson", "collective_host_set_bandwidth"]

#: point-to-point operations, measured by the network paths instead
_P2P_OPS = ("send", "recv", "sendrecv")

#: most hosts a host set is coded for as a bit mask (more: coded by its count alone)
_MAX_MASK_HOSTS = 62


class HostSetBandwidthJson(TypedDict):
    """:meth:`HostSetBandwidth.as_dict`: the report's ``network.collective_transfer`` rows."""

    host_set: str
    hosts: int
    op: str
    size_class_bytes: int
    instances: int
    median_transfer_ns: float
    median_busbw: float
    within_host_busbw: float
    ratio: float


@dataclass(frozen=True)
class HostSetBandwidth:
    """One host set's collectives of one operation and size class, against within-host."""

    host_set: str  # "hA" (within a host) or "hA+hB" (the hosts its members run on)
    hosts: int
    op: str
    size_class_bytes: int  # bytes rounded down to a power of two
    instances: int
    median_transfer_ns: float
    median_busbw: float  # bytes/s
    within_host_busbw: float  # the median of every within-host instance of op and size class
    ratio: float  # median_busbw / within_host_busbw

    def as_dict(self) -> HostSetBandwidthJson:
        """The row as JSON-ready values."""
        return {
            "host_set": self.host_set,
            "hosts": self.hosts,
            "op": self.op,
            "size_class_bytes": self.size_class_bytes,
            "instances": self.instances,
            "median_transfer_ns": self.median_transfer_ns,
            "median_busbw": self.median_busbw,
            "within_host_busbw": self.within_host_busbw,
            "ratio": self.ratio,
        }


@dataclass(frozen=True)
class _HostSets:
    """Per instance: how many hosts its members run on (0: a host unknown) and a code of
    which (a bit mask, or the count beyond :data:`_MAX_MASK_HOSTS` hosts); the host names."""

    n_hosts: np.ndarray
    code: np.ndarray
    names: list[str]

    def label(self, code: int, n_hosts: int) -> str:
        """The host set's name: its hosts joined by ``+`` (or how many there are)."""
        if len(self.names) > _MAX_MASK_HOSTS:
            return f"{n_hosts} hosts"
        return "+".join(h for i, h in enumerate(self.names) if code >> i & 1)


def _host_sets(match: CollectiveMatch, host_of_rank: dict[int, str]) -> _HostSets:
    """Which hosts each instance's members run on."""
    names = sorted(set(host_of_rank.values()))
    code_of = {h: i for i, h in enumerate(names)}
    ranks = match.member_rank.astype(np.int64)
    lut = np.full(int(ranks.max()) + 1 if len(ranks) else 1, -1, dtype=np.int64)
    for r, h in host_of_rank.items():
        if 0 <= r < len(lut):
            lut[r] = code_of[h]
    host = np.where(ranks >= 0, lut[np.maximum(ranks, 0)], -1)
    n = match.n_instances
    unknown = np.bincount(match.member_instance[host < 0], minlength=n) > 0
    pairs = np.unique(match.member_instance * (len(names) + 1) + np.maximum(host, 0))
    n_hosts = np.bincount(pairs // (len(names) + 1), minlength=n)
    n_hosts[unknown] = 0
    if len(names) > _MAX_MASK_HOSTS:
        return _HostSets(n_hosts, n_hosts.astype(np.int64), names)
    code = np.zeros(n, dtype=np.int64)
    known = host >= 0
    np.bitwise_or.at(code, match.member_instance[known], np.left_shift(1, host[known]))
    return _HostSets(n_hosts, code, names)


def _comparable(match: CollectiveMatch, sets: _HostSets) -> np.ndarray:
    """The instances that can be compared: hosts known, bytes and a transfer phase, not
    point-to-point."""
    busbw = match.busbw
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(busbw) & (busbw > 0) & (sets.n_hosts > 0) & (match.n_ranks >= 2)
    p2p = np.isin(np.asarray(match.op, dtype=object), _P2P_OPS)
    return np.flatnonzero(ok & ~p2p)


def collective_host_set_bandwidth(
    match: CollectiveMatch, host_of_rank: dict[int, str]
) -> list[HostSetBandwidth]:
    """The transfer phase's bus bandwidth per host set, operation and size class, against
    the within-host instances of the same operation and size class (module docstring).

    Args:
        match: matched collectives (on the aligned timeline).
        host_of_rank: each rank's host, for the ranks whose host is known.

    Returns:
        Rows sorted by operation, size class, number of hosts and host set; empty unless
        some operation and size class has instances both within one host and across hosts.
    """
    if match.n_instances == 0 or not host_of_rank:
        return []
    sets = _host_sets(match, host_of_rank)
    idx = _comparable(match, sets)
    if len(idx) == 0:
        return []
    op_names, op_code = np.unique(np.asarray(match.op, dtype=object)[idx], return_inverse=True)
    size = np.floor(np.log2(match.bytes[idx].astype(np.float64))).astype(np.int64)
    cls_keys, cls = np.unique(np.stack([op_code.reshape(-1), size], axis=1), axis=0,
                              return_inverse=True)  # fmt: skip
    cls = cls.reshape(-1)
    within = sets.n_hosts[idx] == 1
    ref = group_median(match.busbw[idx][within], cls[within], len(cls_keys))
    crossing = np.bincount(cls[~within], minlength=len(cls_keys)) > 0
    usable = np.isfinite(ref) & crossing
    keep = usable[cls]
    if not keep.any():
        return []
    return _rows(match, sets, idx[keep], cls[keep], cls_keys, op_names, ref)


def _rows(
    match: CollectiveMatch,
    sets: _HostSets,
    idx: np.ndarray,
    cls: np.ndarray,
    cls_keys: np.ndarray,
    op_names: np.ndarray,
    ref: np.ndarray,
) -> list[HostSetBandwidth]:
    """One row per (operation and size class, host set) of the kept instances."""
    keys, grp = np.unique(np.stack([cls, sets.code[idx]], axis=1), axis=0, return_inverse=True)
    grp = grp.reshape(-1)
    n = len(keys)
    count = np.bincount(grp, minlength=n)
    bw = group_median(match.busbw[idx], grp, n)
    transfer = group_median(match.transfer_ns[idx].astype(np.float64), grp, n)
    n_hosts = np.zeros(n, dtype=np.int64)
    n_hosts[grp] = sets.n_hosts[idx]
    rows = []
    for g, (c, code) in enumerate(keys.tolist()):
        op_i, size = cls_keys[c].tolist()
        rows.append(
            HostSetBandwidth(
                host_set=sets.label(int(code), int(n_hosts[g])),
                hosts=int(n_hosts[g]),
                op=str(op_names[op_i]),
                size_class_bytes=int(1 << size) if size >= 0 else 0,
                instances=int(count[g]),
                median_transfer_ns=float(transfer[g]),
                median_busbw=float(bw[g]),
                within_host_busbw=float(ref[c]),
                ratio=round(float(bw[g] / ref[c]), 4),
            )
        )
    return sorted(rows, key=lambda r: (r.op, r.size_class_bytes, r.hosts, r.host_set))
