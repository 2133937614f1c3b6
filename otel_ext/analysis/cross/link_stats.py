"""Per link and per network port: transfers, achieved bandwidth, and which ones are slow.

Link-transfer rows (``Category.LINK_TRANSFER``) name their link in the ``device`` column
(``host0/chip1-chip2``, ``host1/nic0``) and carry their bytes in ``coll_bytes``.
:func:`link_stats` compares each chip-to-chip link with the links that served the same
collective (same bytes, same moment), else with same-size transfers elsewhere;
:func:`port_stats` compares each host's network port's achieved bandwidth with a healthy
port's (or its nominal rate) and names the ports that best explain the slow transfers.
Both return JSON-ready rows (:class:`LinkStat`, :class:`PortStat`) that the report and the
findings read by key.

>>> from otel_ext.analysis.table import Category, EventTable
>>> rows = [dict(start_ns=i * 100, end_ns=i * 100 + d, category=Category.LINK_TRANSFER,
...              device=l, coll_bytes=1000)
...         for i in range(3) for l, d in [("h0/chip0-chip1", 10), ("h0/chip1-chip2", 40)]]
>>> [(s["link"], s["slowness"]) for s in link_stats(EventTable.from_rows(rows))]
[('h0/chip0-chip1', 0.25), ('h0/chip1-chip2', 4.0)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from otel_ext._arrays import distinct, median
from otel_ext.analysis.table import Category, EventTable

__all__ = ["LinkStat", "PortStat", "link_stats", "port_stats"]


class LinkStat(TypedDict):
    """One link's row of :func:`link_stats` (the report's ``links``)."""

    link: str
    kind: str  # "chip" or "nic"
    host: str
    transfers: int
    bytes: int
    busy_ns: int
    median_ns: float
    median_bw: float | None
    peers: int
    peer_median_ns: float | None
    slowness: float | None
    basis: str | None  # "same collective", "same size" (a port's reference when merged)
    collectives: int
    slowest_share: float | None
    wait_ns: int
    slow: bool
    group: str | None


class PortStat(TypedDict):
    """One host's network port row of :func:`port_stats` (the report's ``ports``)."""

    host: str
    transfers: int
    slow_transfers: int
    slow_share: float
    median_bw: float | None
    reference_bw: float
    reference: str  # "nominal" or "best port"
    slowness: float | None
    healthy_bw: float
    extra_ns: int
    partners: list[str]
    implicated: bool
    chosen: bool
    candidates: list[str]
    ambiguous: bool


def _host_of(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else name


def _link_kind(link: str) -> str:
    return "nic" if "nic" in link.rsplit("/", 1)[-1] else "chip"


def _instances(table: EventTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which collective each link-transfer row served (an index per row, -1 unknown), and
    its group (a ``coll_group`` code per row, 0 unknown).

    A transfer's parent span is the collective (or communication kernel) it moved data for;
    its id (or group and sequence number) is the instance. Transfers without such a parent
    are grouped by host, size and start: transfers of one collective start together (within
    half the median duration of the group) and carry the same bytes.
    """
    keys: dict[tuple[int | str, ...], int] = {}
    inst, group = _instances_by_parent(table, rows, keys)
    rest = np.flatnonzero(inst < 0)
    if len(rest):
        inst[rest] = _instances_by_start(table, rows[rest], keys)
    return inst, group


def _instances_by_parent(
    table: EventTable, rows: np.ndarray, keys: dict[tuple[int | str, ...], int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the instance and group of the keyed collective span that is its parent (-1
    and 0 where none is); instances numbered in ``keys``."""
    cat = table["category"]
    comm = np.flatnonzero(
        ((cat == Category.COLLECTIVE) | (cat == Category.KERNEL_COMM)) & (table["span_id"] > 0)
    )
    key_of: dict[int, tuple[tuple[int, int, int], int]] = {}
    for r in comm.tolist():
        cid = int(table["coll_id"][r])
        grp = int(table["coll_group"][r])
        key = (1, cid, 0) if cid else (0, grp, int(table["coll_seq"][r]))
        if cid or table["coll_seq"][r] >= 0:
            key_of[int(table["span_id"][r])] = (key, grp)
    inst = np.full(len(rows), -1, dtype=np.int64)
    group = np.zeros(len(rows), dtype=np.int64)
    parents = table["parent_span_id"][rows].tolist()
    for i, p in enumerate(parents):
        kg = key_of.get(int(p))
        if kg is not None:
            inst[i] = keys.setdefault(kg[0], len(keys))
            group[i] = kg[1]
    return inst, group


def _instances_by_start(
    table: EventTable, rows: np.ndarray, keys: dict[tuple[int | str, ...], int]
) -> np.ndarray:
    """Instances of transfers without a collective parent: same host and size, starting
    within half their median duration of the previous one; numbered on in ``keys``."""
    start = table["start_ns"][rows]
    dur = table["end_ns"][rows] - start
    nbytes = table["coll_bytes"][rows]
    hosts = [_host_of(table.strings["device"][int(d)]) for d in table["device"][rows]]
    host_code = np.unique(np.asarray(hosts, dtype=object), return_inverse=True)[1]
    order = np.lexsort((start, nbytes, host_code))
    tol = max(1.0, float(median(dur)) / 2)
    out = np.full(len(rows), -1, dtype=np.int64)
    prev: tuple[int, int, int] | None = None
    cur = -1
    for j in order.tolist():
        here = (int(host_code[j]), int(nbytes[j]), int(start[j]))
        if prev is None or here[:2] != prev[:2] or here[2] - prev[2] > tol:
            cur = keys.setdefault(("start", *here), len(keys))
            prev = here
        out[j] = cur
    return out


@dataclass
class _LinkRows:
    """The table's link-transfer rows, one entry each, with the collective each served."""

    dev: np.ndarray  # the link (a ``device`` code)
    dur: np.ndarray  # duration, ns (float64)
    nbytes: np.ndarray  # bytes (float64)
    inst: np.ndarray  # the collective served (-1 unknown)
    group: np.ndarray  # its ``coll_group`` code (0 unknown)
    chip: np.ndarray  # on a chip-to-chip link
    codes: list[int]  # the links' codes, ascending
    names: dict[int, str]
    kinds: dict[int, str]  # "chip" or "nic"


def _link_rows(table: EventTable, rows: np.ndarray) -> _LinkRows:
    """The link-transfer ``rows``' columns, their instances and each link's name and kind."""
    dev = table["device"][rows]
    start = table["start_ns"][rows]
    inst, group = _instances(table, rows)
    codes = [int(c) for c in distinct(dev) if c != 0]
    names = {c: table.strings["device"][c] for c in codes}
    kinds = {c: _link_kind(names[c]) for c in codes}
    is_chip = np.zeros(int(dev.max()) + 1 if len(dev) else 1, dtype=bool)
    is_chip[[c for c in codes if kinds[c] == "chip"]] = True
    return _LinkRows(
        dev=dev,
        dur=(table["end_ns"][rows] - start).astype(np.float64),
        nbytes=table["coll_bytes"][rows].astype(np.float64),
        inst=inst,
        group=group,
        chip=is_chip[dev],
        codes=codes,
        names=names,
        kinds=kinds,
    )


@dataclass
class _PairedComparison:
    """Per chip link, over the collectives it served beside other links: its duration ÷ the
    collective's reference duration (one per collective), how many it finished last in, and
    the time those waited for it beyond the next-slowest link."""

    ratios: dict[int, list[float]]
    last: dict[int, int]
    wait: dict[int, float]


def _paired_comparison(lr: _LinkRows) -> _PairedComparison:
    """Each chip link against the other links of the same collective: the reference is the
    collective's median link (itself included: robust with three or more), with two links
    the other one."""
    out = _PairedComparison(
        {c: [] for c in lr.codes}, dict.fromkeys(lr.codes, 0), dict.fromkeys(lr.codes, 0.0)
    )
    inst, dev, dur = lr.inst, lr.dev, lr.dur
    sel = np.flatnonzero(lr.chip & (inst >= 0))
    order = sel[np.argsort(inst[sel], kind="stable")]
    bounds = np.flatnonzero(np.r_[True, inst[order][1:] != inst[order][:-1]])
    for b, e in zip(bounds.tolist(), np.r_[bounds[1:], len(order)].tolist()):
        # one duration per link (both directions of a link may be traced)
        per: dict[int, float] = {}
        for j in order[b:e].tolist():
            per[int(dev[j])] = max(per.get(int(dev[j]), 0.0), float(dur[j]))
        if len(per) < 2:
            continue
        items = sorted(per.items(), key=lambda kv: kv[1])
        every = [v for _, v in items]
        mid = float(median(every)) if len(every) >= 3 else None
        for c, d in items:
            ref = mid if mid is not None else sum(every) - d
            if ref > 0:
                out.ratios[c].append(d / ref)
        top_c, top_d = items[-1]
        out.last[top_c] += 1
        out.wait[top_c] += top_d - items[-2][1]
    return out


def _link_row(table: EventTable, lr: _LinkRows, c: int, pos: np.ndarray, n_coll: int) -> LinkStat:
    """Link ``c``'s own figures (rows ``pos``), before any comparison with other links."""
    d, bts = lr.dur[pos], lr.nbytes[pos]
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = np.where((bts > 0) & (d > 0), bts / (d / 1e9), np.nan)
    bw = bw[np.isfinite(bw)]
    link = lr.names[c]
    row: LinkStat = {
        "link": link,
        "kind": lr.kinds[c],
        "host": _host_of(link) if "/" in link else "",
        "transfers": len(pos),
        "bytes": int(bts[bts > 0].sum()),
        "busy_ns": int(d.sum()),
        "median_ns": float(median(d)),
        "median_bw": float(median(bw)) if len(bw) else None,
        "peers": 0,
        "peer_median_ns": None,
        "slowness": None,
        "basis": None,
        "collectives": n_coll,
        "slowest_share": None,
        "wait_ns": 0,
        "slow": False,
        "group": None,
    }
    g = lr.group[pos][lr.group[pos] > 0]
    if len(g):
        row["group"] = table.strings["coll_group"][int(np.bincount(g).argmax())]
    return row


def _judge_by_same_collective(
    row: LinkStat,
    lr: _LinkRows,
    pc: _PairedComparison,
    c: int,
    pos: np.ndarray,
    links_of: dict[int, set[int]],
) -> None:
    """Fill ``row``'s comparison from the collectives link ``c`` served beside others."""
    n = len(pc.ratios[c])
    slowness = round(float(median(pc.ratios[c])), 6)
    row["slowness"] = slowness
    row["slowest_share"] = round(pc.last[c] / n, 6)
    row["wait_ns"] = int(pc.wait[c])
    row["basis"] = "same collective"
    mine = lr.inst[pos]
    row["peers"] = len(
        set().union(*(links_of[int(i)] for i in distinct(mine[mine >= 0]).tolist())) - {c}
    )
    row["peer_median_ns"] = round(row["median_ns"] / slowness, 3)


def _judge_by_same_size(
    row: LinkStat, lr: _LinkRows, c: int, pos: np.ndarray, size_class: np.ndarray
) -> None:
    """Fill ``row``'s comparison from other chip links' transfers of the same size (within
    10 %), for a link without same-collective peers; left empty when none has such."""
    dur, dev = lr.dur, lr.dev
    m = np.zeros(len(dev), dtype=bool)
    m[pos] = True
    peer_m = lr.chip & (dev != c) & (size_class >= 0)
    rs = []
    for k in distinct(size_class[m & (size_class >= 0)]):
        pd = dur[peer_m & (size_class == k)]
        if len(pd):
            rs.extend((dur[m & (size_class == k)] / float(median(pd))).tolist())
    if not rs:
        return
    slowness = round(float(median(rs)), 6)
    row["slowness"] = slowness
    row["slowest_share"] = round(float(np.mean(np.asarray(rs) > 1.0)), 6)
    row["basis"] = "same size"
    row["peers"] = len({int(x) for x in dev[peer_m]})
    row["peer_median_ns"] = round(row["median_ns"] / slowness, 3)
    extra = dur[m] - dur[m] / slowness
    row["wait_ns"] = int(max(0.0, float(extra.sum())))


def link_stats(
    table: EventTable,
    *,
    paired_ratio: float = 1.1,
    slowest_share: float = 0.75,
) -> list[LinkStat]:
    """Per link: transfers, bandwidth, and how it compares with links doing the same work.

    A chip-to-chip link is compared with the other links of the *same collective* (the
    collective its transfers served, or transfers of the same host and size that start
    together): those carry the same bytes at the same moment, so the ratio of durations is
    the inverse ratio of achieved bandwidths (bytes / duration), free of the differences in
    size and load between hosts (prefill and decode hosts move very different amounts).
    ``slowness`` is the median over its collectives of its duration ÷ the collective's median
    link duration (the other link's with two); ``slowest_share`` the share of them in which
    it finished last; ``wait_ns`` the time those collectives waited for it beyond the
    next-slowest link (the all-reduce ends when its slowest link has delivered). A link is
    ``slow`` when its slowness is at least ``paired_ratio`` and it finished last in at least
    ``slowest_share`` of its collectives.

    Links without such peers (a host with one link) are compared with links of the same
    kind carrying transfers of the same size (within 10 %) elsewhere; network ports are
    judged by :func:`port_stats` (their rows here have ``slowness`` from it when merged by
    the caller, else None).

    Args:
        table: an event table (link-transfer rows of every host).
        paired_ratio: the slowness from which a link is slow.
        slowest_share: the share of its collectives a slow link finished last in.

    Returns:
        One :class:`LinkStat` per link, by link code (the order links were first seen).

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> rows = [dict(start_ns=i * 100, end_ns=i * 100 + d, category=Category.LINK_TRANSFER,
    ...              device=l, coll_bytes=1000)
    ...         for i in range(4) for l, d in [("h0/chip0-chip1", 10), ("h0/chip1-chip2", 30),
    ...                                        ("h0/chip2-chip3", 10)]]
    >>> [(s["link"], s["slowness"], s["slow"]) for s in link_stats(EventTable.from_rows(rows))]
    [('h0/chip0-chip1', 1.0, False), ('h0/chip1-chip2', 3.0, True), ('h0/chip2-chip3', 1.0, False)]
    """
    rows = np.flatnonzero(table["category"] == Category.LINK_TRANSFER)
    if len(rows) == 0:
        return []
    lr = _link_rows(table, rows)
    pc = _paired_comparison(lr)
    nbytes = lr.nbytes
    size_class = np.where(nbytes > 0, np.round(np.log(np.maximum(nbytes, 1)) / math.log(1.1)), -1)
    # each link's rows, and each collective's links, grouped once (a mask per link would be
    # quadratic in the links)
    rows_of = _positions_by_code(lr.dev)
    served = np.flatnonzero(lr.inst >= 0)
    links_of = {
        i: {int(x) for x in pos.tolist()}
        for i, pos in _positions_by_code(lr.inst[served], lr.dev[served]).items()
    }
    stats: list[LinkStat] = []
    for c in lr.codes:
        pos = rows_of[c]
        row = _link_row(table, lr, c, pos, len(pc.ratios[c]))
        if lr.kinds[c] == "chip" and len(pc.ratios[c]) >= 1:
            _judge_by_same_collective(row, lr, pc, c, pos, links_of)
        elif lr.kinds[c] == "chip":
            _judge_by_same_size(row, lr, c, pos, size_class)
        slowness = row["slowness"]
        if slowness is not None:
            row["slow"] = bool(
                slowness >= paired_ratio and (row["slowest_share"] or 0) >= slowest_share
            )
        stats.append(row)
    return stats


def _positions_by_code(
    codes: np.ndarray, values: np.ndarray | None = None
) -> dict[int, np.ndarray]:
    """Each distinct code's positions in ``codes`` (ascending), or its ``values`` at those
    positions; one stable sort.

    >>> {k: v.tolist() for k, v in _positions_by_code(np.array([4, 2, 4])).items()}
    {2: [1], 4: [0, 2]}
    """
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    if len(sc) == 0:
        return {}
    bounds = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    ends = np.r_[bounds[1:], len(sc)]
    src = order if values is None else values[order]
    return {int(sc[b]): src[b:e] for b, e in zip(bounds.tolist(), ends.tolist())}


def _endpoints(table: EventTable, row: int) -> tuple[str, ...]:
    """The hosts whose ports a network transfer crossed: from its ``SRC->DST`` name, else the
    host of the port its link id names."""
    name = table.strings["name"][int(table["name"][row])]
    if "->" in name:
        a, b = name.split("->", 1)
        ends = tuple(dict.fromkeys(_host_of(x.strip()) for x in (a, b) if x.strip()))
        if ends:
            return ends
    return (_host_of(table.strings["device"][int(table["device"][row])]),)


@dataclass
class _NicTransfers:
    """The network transfers (link-transfer rows on ``.../nicN`` links), one entry each, and
    the hosts whose ports they crossed."""

    d: np.ndarray  # duration, ns (float64)
    b: np.ndarray  # bytes (float64)
    ok: np.ndarray  # with a duration and a size
    bw: np.ndarray  # achieved bytes/s (NaN where not ok)
    ends: list[tuple[str, ...]]  # the hosts whose ports each crossed
    named: list[str]  # the host of the port its link id names
    hosts: list[str]  # every host crossed, sorted
    touch: dict[str, np.ndarray]  # per host: the transfers with a rate that crossed its port


def _nic_transfers(table: EventTable) -> _NicTransfers | None:
    """The table's network transfers and each host's share of them; None when it has none."""
    rows = np.flatnonzero(table["category"] == Category.LINK_TRANSFER)
    dev_names = table.strings["device"]
    is_nic = np.asarray([_link_kind(x) == "nic" for x in dev_names], dtype=bool)
    idx = rows[is_nic[table["device"][rows]]] if len(rows) else rows
    if not len(idx):
        return None
    nic = idx.tolist()
    d = (table["end_ns"][idx] - table["start_ns"][idx]).astype(np.float64)
    b = table["coll_bytes"][idx].astype(np.float64)
    ok = (d > 0) & (b > 0)
    bw = np.where(ok, b / np.maximum(d, 1) * 1e9, np.nan)
    # endpoints once per (name, link) pair, then each host's transfers from one grouping (a
    # membership test per host per transfer would be quadratic in the hosts)
    ends_of: dict[tuple[int, int], tuple[str, ...]] = {}
    ends = []
    for r, nm, dv in zip(nic, table["name"][idx].tolist(), table["device"][idx].tolist()):
        e = ends_of.get((nm, dv))
        if e is None:
            e = ends_of[(nm, dv)] = _endpoints(table, r)
        ends.append(e)
    named = [_host_of(dev_names[dv]) for dv in table["device"][idx].tolist()]
    hosts = sorted({h for e in ends_of.values() for h in e})
    host_ix = {h: i for i, h in enumerate(hosts)}
    pair_h = np.asarray([host_ix[h] for e in ends for h in e], dtype=np.int64)
    pair_t = np.asarray([k for k, e in enumerate(ends) for _h in e], dtype=np.int64)
    crossed = _positions_by_code(pair_h, pair_t)
    touch = {}
    for h in hosts:
        t = np.zeros(len(nic), dtype=bool)
        t[crossed[host_ix[h]]] = True
        touch[h] = t & ok
    return _NicTransfers(d, b, ok, bw, ends, named, hosts, touch)


@dataclass
class _PortVerdict:
    """What every port is judged against: the reference rate, which transfers are slow, the
    healthy rate and each transfer's time beyond it."""

    reference: float
    basis: str  # "nominal" or "best port"
    slow: np.ndarray
    healthy: float
    extra: np.ndarray


def _port_verdict(
    nt: _NicTransfers,
    med: dict[str, float | None],
    *,
    nominal_bw: float | None,
    efficiency: float,
    slow_ratio: float,
    min_transfers: int,
) -> _PortVerdict | None:
    """The reference rate (``efficiency`` × nominal, else the best port's median) and the
    transfers below it by ``slow_ratio``; None when no port has a rate to be the reference."""
    if nominal_bw:
        reference, basis = efficiency * float(nominal_bw), "nominal"
    else:
        best = [v for v in med.values() if v]
        if not best:
            return None
        reference, basis = max(best), "best port"
    ok, bw = nt.ok, nt.bw
    slow = ok & (bw < reference / slow_ratio)
    fine = ok & ~slow
    healthy = float(median(bw[fine])) if fine.sum() >= min_transfers else reference
    extra = np.where(slow, nt.d - nt.b / healthy * 1e9, 0.0)
    return _PortVerdict(reference, basis, slow, healthy, extra)


def _port_row(
    h: str,
    nt: _NicTransfers,
    med_h: float | None,
    pv: _PortVerdict,
    *,
    slow_share: float,
    min_transfers: int,
) -> PortStat:
    """Host ``h``'s port: its transfers, how many are slow, and whether it is implicated."""
    t = nt.touch[h]
    slow = pv.slow
    n, ns = int(t.sum()), int((t & slow).sum())
    partners = sorted({x for i in np.flatnonzero(t & slow).tolist() for x in nt.ends[i]} - {h})
    return {
        "host": h,
        "transfers": n,
        "slow_transfers": ns,
        "slow_share": round(ns / n, 6) if n else 0.0,
        "median_bw": med_h,
        "reference_bw": pv.reference,
        "reference": pv.basis,
        "slowness": round(pv.reference / med_h, 6) if med_h else None,
        "healthy_bw": pv.healthy,
        "extra_ns": int(max(0.0, float(pv.extra[t & slow].sum()))),
        "partners": partners,
        "implicated": bool(n >= min_transfers and ns / max(n, 1) >= slow_share),
        "chosen": False,
        "candidates": [h],
        "ambiguous": False,
    }


def _choose_ports(
    out: dict[str, PortStat], nt: _NicTransfers, slow: np.ndarray, min_transfers: int
) -> None:
    """Mark the implicated ports that explain the slow transfers, greedily: the one crossing
    the most unexplained slow transfers first; ports that crossed exactly the same ones are
    candidates of one choice (``ambiguous``), named by the port their link id names."""
    touch = nt.touch
    left = slow.copy()
    pool = [h for h in nt.hosts if out[h]["implicated"]]
    while pool:
        cover = {h: int((touch[h] & left).sum()) for h in pool}
        pool = [h for h in pool if cover[h] >= min_transfers]
        if not pool:
            break
        pool.sort(key=lambda h: (-cover[h], -out[h]["slow_share"], h))
        first = pool[0]
        same = [
            h
            for h in pool
            if np.array_equal(touch[h] & left, touch[first] & left)
            and out[h]["slow_share"] == out[first]["slow_share"]
        ]
        if len(same) > 1:
            # indistinguishable: name the port the transfers' link id names
            names_cnt = {h: sum(1 for nm, s in zip(nt.named, left.tolist()) if s and nm == h)
                         for h in same}  # fmt: skip
            first = max(same, key=lambda h: (names_cnt[h], -same.index(h)))
        row = out[first]
        row["chosen"] = True
        row["candidates"] = sorted(same)
        row["ambiguous"] = len(same) > 1
        left &= ~touch[first]
        pool = [h for h in pool if h not in same]


def port_stats(
    table: EventTable,
    *,
    nominal_bw: float | None = None,
    efficiency: float = 0.8,
    slow_ratio: float = 1.3,
    slow_share: float = 0.6,
    min_transfers: int = 3,
) -> list[PortStat]:
    """Per host network port: how its transfers' achieved bandwidth compares with a healthy
    port's, and which port best explains the slow transfers.

    Every network transfer (a link-transfer row on a ``.../nicN`` link) crosses the ports of
    both its endpoints (its ``SRC->DST`` name; else only the port its link names). The
    reference rate is ``efficiency`` × the port's nominal bandwidth when known (the device
    registry's ``nic_bandwidth``), else the best port's median achieved rate. A transfer is
    slow when its achieved bandwidth (bytes / duration) is below the reference ÷
    ``slow_ratio``. A port is *implicated* when at least ``slow_share`` of its (at least
    ``min_transfers``) transfers are slow; implicated ports are then chosen greedily, the one
    explaining the most slow transfers first, and a port whose slow transfers are all
    explained by a chosen one is dropped. When two ports crossed exactly the same transfers
    (two hosts, one talking only to the other) the telemetry cannot tell them apart: the
    chosen row lists both in ``candidates`` with ``ambiguous`` true, and names the port the
    transfers' link id names.

    Row keys (:class:`PortStat`): ``host``, ``transfers``, ``slow_transfers``,
    ``slow_share``, ``median_bw``, ``reference_bw``, ``reference`` (``nominal`` or ``best
    port``), ``slowness`` (reference ÷ median achieved bandwidth), ``healthy_bw`` (median
    rate of transfers that are not slow, else the reference), ``extra_ns`` (Σ over its slow
    transfers of duration − bytes ÷ healthy rate), ``partners``, ``implicated``, ``chosen``,
    ``candidates``, ``ambiguous``.

    >>> from otel_ext.analysis.table import Category, EventTable
    >>> rows = [dict(start_ns=i * 10**6, end_ns=i * 10**6 + d, category=Category.LINK_TRANSFER,
    ...              device=f"{src}/nic0", name=f"{src}->{dst}", coll_bytes=10**6)
    ...         for i in range(4) for src, dst, d in [("h0", "h2", 100_000), ("h1", "h2", 10_000)]]
    >>> [(p["host"], p["chosen"]) for p in port_stats(EventTable.from_rows(rows))]
    [('h0', True), ('h1', False), ('h2', False)]
    """
    nt = _nic_transfers(table)
    if nt is None:
        return []
    med = {h: float(median(nt.bw[nt.touch[h]])) if nt.touch[h].any() else None for h in nt.hosts}
    pv = _port_verdict(
        nt,
        med,
        nominal_bw=nominal_bw,
        efficiency=efficiency,
        slow_ratio=slow_ratio,
        min_transfers=min_transfers,
    )
    if pv is None:
        return []
    out = {
        h: _port_row(h, nt, med[h], pv, slow_share=slow_share, min_transfers=min_transfers)
        for h in nt.hosts
    }
    _choose_ports(out, nt, pv.slow, min_transfers)
    return [out[h] for h in nt.hosts]
