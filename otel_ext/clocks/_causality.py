"""Causality repair: shift events as little as possible so no message is received before it is sent.

Constraints, each ``t'(b) >= t'(a) + L`` between two event *points* (starts and ends):

* a message from send event ``s`` to receive event ``r``: ``end(r) >= start(s) + min_latency``;
* a collective: every member's end is at or after every member's start;
* every event keeps at least its duration: ``end(i) >= start(i) + (end(i) - start(i))``.

Repair runs in two phases:

1. **Per-domain offsets.** Cross-domain constraints become difference constraints between
   domain offsets; the least non-negative solution (longest paths, Bellman–Ford) is centred
   by its median (the L1-smallest of its translates). When offsets alone cannot satisfy
   everything (drift, jitter), the constraints are relaxed by the smallest uniform slack that
   makes them feasible, and phase 2 handles the rest.
2. **Controlled logical clock** (Rabenseifner; Scalasca's timestamp correction). *Forward*:
   a point that must move forward moves, and the shift propagates to the following points
   of its domain, decaying by ``(1 - gamma)`` per ns of local gap, so local intervals are
   preserved near the jump and the trace returns to its own times further on. *Backward
   amortization*: points before a jump are moved forward on a ramp (same rate), capped so
   no send moves past what its receive allows and no point passes its successor.

Each domain's point order is preserved; every shift is reported.

>>> import numpy as np
>>> rep = repair_causality(
...     domain=np.array([0, 1]), start_ns=np.array([1_000, 900]), end_ns=np.array([1_100, 950]),
...     send_event=np.array([0]), recv_event=np.array([1]), min_latency_ns=10)
>>> rep.violations_before, rep.violations_after
(1, 0)
>>> int(rep.end_ns[1] - rep.start_ns[0]) >= 10
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypedDict

import numpy as np
from numpy.typing import ArrayLike, NDArray

from otel_ext._arrays import median
from otel_ext.clocks._collectives import pair_indices
from otel_ext.errors import InputError

__all__ = [
    "CausalityRepair",
    "DomainOffsetRecord",
    "EventShiftRecord",
    "count_violations",
    "repair_causality",
]


class DomainOffsetRecord(TypedDict):
    """A domain moved as a whole by phase 1 (:meth:`CausalityRepair.report`)."""

    kind: Literal["domain_offset"]
    domain: int | float | str  # the domain id as given (a rank, a device name)
    shift_ns: int


class EventShiftRecord(TypedDict):
    """An event moved by phase 2 beyond its domain's offset (:meth:`CausalityRepair.report`)."""

    kind: Literal["event"]
    event: int
    start_shift_ns: int
    end_shift_ns: int


@dataclass(frozen=True)
class CausalityRepair:
    """The repaired times and what moved.

    Attributes:
        start_ns: repaired start times (int64).
        end_ns: repaired end times (int64).
        shift_start_ns: ``start_ns - original start`` per event.
        shift_end_ns: ``end_ns - original end`` per event.
        domains: the domain ids.
        domain_offset_ns: phase-1 offset applied to each domain.
        violations_before: violated constraints in the input.
        violations_after: violated constraints after repair (0 unless ``unresolved``).
        unresolved: constraints that form a causal cycle and could not be satisfied.
        shifted: indices of events that moved in phase 2 (beyond their domain offset).
    """

    start_ns: NDArray[np.int64]
    end_ns: NDArray[np.int64]
    shift_start_ns: NDArray[np.int64]
    shift_end_ns: NDArray[np.int64]
    domains: NDArray[Any]
    domain_offset_ns: NDArray[np.int64]
    violations_before: int
    violations_after: int
    unresolved: int
    shifted: NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, dtype=np.intp))

    def report(self) -> list[DomainOffsetRecord | EventShiftRecord]:
        """One record per domain offset and per event shifted beyond it."""
        out: list[DomainOffsetRecord | EventShiftRecord] = [
            DomainOffsetRecord(
                kind="domain_offset",
                domain=d.item() if hasattr(d, "item") else d,
                shift_ns=int(o),
            )
            for d, o in zip(self.domains, self.domain_offset_ns)
            if o != 0
        ]
        out.extend(
            EventShiftRecord(
                kind="event",
                event=int(i),
                start_shift_ns=int(self.shift_start_ns[i]),
                end_shift_ns=int(self.shift_end_ns[i]),
            )
            for i in self.shifted
        )
        return out


@dataclass(frozen=True)
class _Members:
    """The members of every collective instance with two or more events: ``event``, its
    ``inst`` index (``0 .. n_inst - 1``) and its ``slack`` (the clock uncertainty allowed)."""

    event: NDArray[np.intp]
    inst: NDArray[np.intp]
    n_inst: int
    slack: NDArray[np.int64]

    @staticmethod
    def of(coll: NDArray[np.int64] | None, slack: NDArray[np.int64]) -> _Members:
        empty = np.zeros(0, dtype=np.intp)
        if coll is None:
            return _Members(empty, empty, 0, np.zeros(0, dtype=np.int64))
        cand = np.flatnonzero(coll >= 0)
        if cand.size == 0:
            return _Members(empty, empty, 0, np.zeros(0, dtype=np.int64))
        _, inv, counts = np.unique(coll[cand], return_inverse=True, return_counts=True)
        members = cand[counts[inv.reshape(-1)] >= 2]
        ids, inst = np.unique(coll[members], return_inverse=True)
        return _Members(
            members.astype(np.intp), inst.reshape(-1).astype(np.intp), ids.size, slack[members]
        )

    def latest_start(
        self, tp: NDArray[np.int64], alive: NDArray[np.bool_] | None = None
    ) -> NDArray[np.int64]:
        """Per instance, the latest member start less its slack (over ``alive`` members)."""
        out = np.full(self.n_inst, -_INF, dtype=np.int64)
        sel = slice(None) if alive is None else alive
        np.maximum.at(out, self.inst[sel], tp[2 * self.event[sel]] - self.slack[sel])
        return out

    def earliest_end(
        self, tp: NDArray[np.int64], alive: NDArray[np.bool_] | None = None
    ) -> NDArray[np.int64]:
        """Per instance, the earliest member end plus its slack (over ``alive`` members)."""
        out = np.full(self.n_inst, _INF, dtype=np.int64)
        sel = slice(None) if alive is None else alive
        np.minimum.at(out, self.inst[sel], tp[2 * self.event[sel] + 1] + self.slack[sel])
        return out


def _constraints(
    send: NDArray[np.intp],
    recv: NDArray[np.intp],
    members: _Members,
    dom: NDArray[np.intp],
    t0: NDArray[np.int64],
    latency: float,
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]:
    """Point constraints ``(a, b, L)`` across domains, for phase 1 (per-domain offsets).

    Point ``2i`` is the start of event ``i``, ``2i+1`` its end. A collective contributes, for
    each pair of *domains* among its members, the pair of points that binds hardest (the
    domain's latest start, the other's earliest end): quadratic in the clock domains per
    collective (one per host, usually), never in its events.
    """
    a = [2 * send]
    b = [2 * recv + 1]
    lat = [np.full(send.size, float(latency))]
    if members.n_inst:
        ev, inst, sl = members.event, members.inst, members.slack
        d = dom[ev].astype(np.int64)
        nd = int(dom.max()) + 1
        cell = inst.astype(np.int64) * nd + d
        ucell, ci = np.unique(cell, return_inverse=True)
        ci = ci.reshape(-1)
        # per (instance, domain): the event with the latest start - slack, earliest end + slack
        sval = t0[2 * ev] - sl
        eval_ = t0[2 * ev + 1] + sl
        o_s = np.lexsort((-sval, ci))
        o_e = np.lexsort((eval_, ci))
        first = np.r_[0, np.flatnonzero(ci[o_s][1:] != ci[o_s][:-1]) + 1]
        first_e = np.r_[0, np.flatnonzero(ci[o_e][1:] != ci[o_e][:-1]) + 1]
        late_ev, early_ev = ev[o_s[first]], ev[o_e[first_e]]
        late_sl, early_sl = sl[o_s[first]], sl[o_e[first_e]]
        cinst = ucell // nd
        pi, pj = pair_indices(cinst)  # pairs of domains within one instance
        a.append(2 * late_ev[pj])
        b.append(2 * early_ev[pi] + 1)
        lat.append(-(late_sl[pj] + early_sl[pi]).astype(np.float64))
    return np.concatenate(a).astype(np.intp), np.concatenate(b).astype(np.intp), np.concatenate(lat)


def count_violations(
    start_ns: ArrayLike,
    end_ns: ArrayLike,
    *,
    send_event: ArrayLike | None = None,
    recv_event: ArrayLike | None = None,
    collective: ArrayLike | None = None,
    min_latency_ns: float = 0.0,
    slack_ns: ArrayLike | None = None,
) -> int:
    """Messages received before sent (+latency) plus collective members leaving too early
    (beyond the members' ``slack_ns``, when given: a member violates when its end plus its
    slack precedes the latest member start less that member's slack).

    >>> count_violations([0, 5], [10, 8], send_event=[0], recv_event=[1], min_latency_ns=10)
    1
    """
    s = np.asarray(start_ns, dtype=np.int64)
    e = np.asarray(end_ns, dtype=np.int64)
    send = np.asarray([] if send_event is None else send_event, dtype=np.intp)
    recv = np.asarray([] if recv_event is None else recv_event, dtype=np.intp)
    n = int(np.sum(e[recv] < s[send] + min_latency_ns))
    if collective is not None:
        g = np.asarray(collective, dtype=np.int64)
        member = g >= 0
        if member.any():
            sl = np.zeros(s.size, np.int64) if slack_ns is None else np.asarray(slack_ns, np.int64)
            keys, gi = np.unique(g[member], return_inverse=True)
            gi = gi.reshape(-1)
            latest = np.full(keys.size, np.iinfo(np.int64).min)
            np.maximum.at(latest, gi, s[member] - sl[member])
            n += int(np.sum(e[member] + sl[member] < latest[gi]))
    return n


def _domain_offsets(
    dom: NDArray[np.intp],
    nd: int,
    ta: NDArray[np.float64],
    tb: NDArray[np.float64],
    da: NDArray[np.intp],
    db: NDArray[np.intp],
    lat: NDArray[np.float64],
) -> NDArray[np.float64]:
    cross = da != db
    req = np.full((nd, nd), -np.inf)
    np.maximum.at(req, (da[cross], db[cross]), lat[cross] + ta[cross] - tb[cross])
    if not np.any(req > 0):
        return np.zeros(nd)

    def longest(slack: float) -> tuple[NDArray[np.float64], bool]:
        delta = np.zeros(nd)
        w = req - slack
        for _ in range(nd + 1):
            new = np.maximum(delta, np.max(delta[:, None] + w, axis=0))
            if np.allclose(new, delta, rtol=0, atol=1e-6):
                return new, True
            delta = new
        return delta, False

    delta, ok = longest(0.0)
    if not ok:
        lo, hi = 0.0, float(np.max(req[np.isfinite(req)])) + 1.0
        for _ in range(50):
            mid = (lo + hi) / 2.0
            if longest(mid)[1]:
                hi = mid
            else:
                lo = mid
        delta, _ = longest(hi)
    return delta - median(delta)


_INF = np.int64(1) << np.int64(60)


def _seg_accumulate(
    values: NDArray[np.int64], seg: NDArray[np.int64], reverse: bool
) -> NDArray[np.int64]:
    """Running max within segments (contiguous, ids non-decreasing); exact int64 arithmetic."""
    if values.size == 0:
        return values
    v = np.clip(values[::-1] if reverse else values, -_INF, _INF)
    s = seg[::-1] if reverse else seg
    order_id = s - s.min() if not reverse else (s.max() - s)
    big = np.int64(2) * np.int64(np.max(np.abs(v))) + np.int64(1)
    acc = np.maximum.accumulate(v + order_id * big) - order_id * big
    return acc[::-1] if reverse else acc


def _forward(
    t: NDArray[np.int64],
    ca: NDArray[np.intp],
    cb: NDArray[np.intp],
    cl: NDArray[np.int64],
    order: NDArray[np.intp],
    seg: NDArray[np.int64],
    cost: NDArray[np.int64],
    pos: NDArray[np.intp],
    rounds: int,
    members: _Members,
) -> tuple[NDArray[np.int64], bool]:
    """Controlled-logical-clock forward pass: integer shifts, and whether it converged.

    A collective member's end must follow the latest member start (each less its slack): one
    maximum per instance, so a collective of ``m`` members costs ``O(m)`` per round."""
    delta = np.zeros(t.size, dtype=np.int64)
    end_pt = 2 * members.event + 1
    for _round in range(rounds):
        tp = t + delta
        need = np.full(t.size, -_INF, dtype=np.int64)
        np.maximum.at(need, cb, tp[ca] + cl - t[cb])
        if members.n_inst:
            latest = members.latest_start(tp)
            np.maximum.at(need, end_pt, latest[members.inst] - members.slack - t[end_pt])
        jump = np.maximum(delta, need)
        prop = _seg_accumulate((jump + cost[pos])[order], seg, reverse=False)
        new = np.empty(t.size, dtype=np.int64)
        new[order] = prop
        new = np.maximum(new - cost[pos], 0)
        if np.array_equal(new, delta):
            return new, True
        delta = new
    return delta, False


def _longest_paths(
    n_nodes: int,
    src: NDArray[np.intp],
    dst: NDArray[np.intp],
    wgt: NDArray[np.int64],
    floor: list[int],
) -> tuple[list[int], list[int]]:
    """Longest paths from ``floor`` along the edges, in Kahn's topological order (a node is
    settled when its last predecessor is), and the nodes left over (on or after a cycle)."""
    by_src = np.argsort(src, kind="stable")
    succ = dst[by_src].tolist()
    w = wgt[by_src].tolist()
    first = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n_nodes), out=first[1:])
    off = first.tolist()
    indeg = np.bincount(dst, minlength=n_nodes).tolist()
    best = floor[:]
    ready = [v for v in range(n_nodes) if indeg[v] == 0]
    while ready:
        v = ready.pop()
        bv = best[v]
        for k in range(off[v], off[v + 1]):
            b = succ[k]
            c = bv + w[k]
            if c > best[b]:
                best[b] = c
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    return best, [v for v in range(n_nodes) if indeg[v] > 0]


def _cyclic_components(nodes: list[int], src: list[int], dst: list[int]) -> dict[int, int]:
    """Strongly connected components of more than one node among ``nodes``: node -> id
    (Tarjan's algorithm, iterative)."""
    inside = set(nodes)
    out: dict[int, list[int]] = {v: [] for v in nodes}
    for a, b in zip(src, dst):
        if a in inside and b in inside:
            out[a].append(b)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    comp: dict[int, int] = {}
    n_comp = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            succ = out[v]
            while i < len(succ):
                w = succ[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                if low[v] == index[v]:
                    members = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        members.append(w)
                        if w == v:
                            break
                    if len(members) > 1:
                        for w in members:
                            comp[w] = n_comp
                        n_comp += 1
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
    return comp


def _forward_exact(
    t: NDArray[np.int64],
    s0: NDArray[np.int64],
    e0: NDArray[np.int64],
    send: NDArray[np.intp],
    recv: NDArray[np.intp],
    latency: int,
    mem: _Members,
    order: NDArray[np.intp],
    seg: NDArray[np.int64],
    cost: NDArray[np.int64],
    pos: NDArray[np.intp],
) -> tuple[NDArray[np.int64], NDArray[np.bool_], NDArray[np.bool_], NDArray[np.bool_]]:
    """The forward pass as longest paths in topological order: the least shifts that satisfy
    every constraint (what the rounds of :func:`_forward` converge to), in one pass.

    Collectives go through one node per instance (every member's start before it, every
    member's end after it), so an instance of ``m`` members costs ``2m`` edges, not ``m²``.
    Constraints on a causal cycle (a strongly connected component) are dropped: those
    violated in the input first, then, if a cycle remains, every message and collective edge
    of it. Returns the shifts and what was dropped: per message, per event's start into its
    instance, per event's end out of it.
    """
    n = s0.size
    points = 2 * n
    # chain edges: consecutive points of a domain, the shift carried on with its decay
    same = np.flatnonzero(seg[1:] == seg[:-1])
    p, q = order[same], order[same + 1]
    ev = np.arange(n)
    srcs = [p, 2 * ev, 2 * send]
    dsts = [q, 2 * ev + 1, 2 * recv + 1]
    wgts = [(t[q] - t[p]) - (cost[pos[q]] - cost[pos[p]]), e0 - s0, np.full(send.size, latency)]
    fixed = p.size + n  # chain and duration edges (before here) are never dropped
    n_msg = send.size
    members, inst, n_inst = mem.event, mem.inst, mem.n_inst
    if n_inst:
        vnode = points + inst
        srcs += [2 * members, vnode]
        dsts += [vnode, 2 * members + 1]
        wgts += [-mem.slack, -mem.slack]
    src = np.concatenate(srcs).astype(np.intp)
    dst = np.concatenate(dsts).astype(np.intp)
    wgt = np.concatenate(wgts).astype(np.int64)
    n_nodes = points + n_inst
    floor = t.tolist() + [-(1 << 62)] * n_inst
    alive = np.ones(src.size, dtype=bool)
    best, left = _longest_paths(n_nodes, src, dst, wgt, floor)
    if left:
        # an instance's last arrival in the input: member ends before it are violations
        last_in = np.full(n_inst, -(1 << 62), dtype=np.int64)
        if n_inst:
            np.maximum.at(last_in, inst, t[2 * members] - mem.slack)
        ref = np.concatenate([t, last_in])
        droppable = np.arange(src.size) >= fixed
        violated = (dst < points) & (ref[dst] < ref[src] + wgt)
        for attempt in range(2):
            if not left:
                break
            inside = np.zeros(n_nodes, dtype=bool)
            inside[left] = True
            sub = np.flatnonzero(alive & inside[src] & inside[dst])
            comp = _cyclic_components(left, src[sub].tolist(), dst[sub].tolist())
            cid = np.full(n_nodes, -1, dtype=np.int64)
            if comp:
                cid[list(comp)] = list(comp.values())
            cyc = alive & droppable & (cid[src] >= 0) & (cid[src] == cid[dst])
            alive &= ~(cyc & (violated if attempt == 0 else True))
            best, left = _longest_paths(n_nodes, src[alive], dst[alive], wgt[alive], floor)
    delta = np.asarray(best[:points], dtype=np.int64) - t
    dropped_msg = ~alive[fixed : fixed + n_msg]
    dropped_in = np.zeros(n, dtype=bool)
    dropped_out = np.zeros(n, dtype=bool)
    if members.size:
        base = fixed + n_msg
        dropped_in[members[~alive[base : base + members.size]]] = True
        dropped_out[members[~alive[base + members.size :]]] = True
    return delta, dropped_msg, dropped_in, dropped_out


class _Events(NamedTuple):
    """The events and their links, validated: domain ids, start/end (int64 ns), messages
    (send and receive event indices), collective ids (or ``None``) and slacks."""

    domain: NDArray[Any]
    s0: NDArray[np.int64]
    e0: NDArray[np.int64]
    send: NDArray[np.intp]
    recv: NDArray[np.intp]
    coll: NDArray[np.int64] | None
    slack: NDArray[np.int64]

    def points(self) -> NDArray[np.int64]:
        """The event points: ``2i`` the start of event ``i``, ``2i + 1`` its end."""
        t0 = np.empty(2 * self.s0.size, dtype=np.int64)
        t0[0::2], t0[1::2] = self.s0, self.e0
        return t0

    def violations(
        self, start: NDArray[np.int64], end: NDArray[np.int64], min_latency_ns: float
    ) -> int:
        """:func:`count_violations` of these links at the given times."""
        return count_violations(
            start,
            end,
            send_event=self.send,
            recv_event=self.recv,
            collective=self.coll,
            min_latency_ns=min_latency_ns,
            slack_ns=self.slack,
        )


def _validated_events(
    domain: ArrayLike,
    start_ns: ArrayLike,
    end_ns: ArrayLike,
    send_event: ArrayLike | None,
    recv_event: ArrayLike | None,
    collective: ArrayLike | None,
    gamma: float,
    slack_ns: ArrayLike | None,
) -> _Events:
    """The inputs as arrays, or :class:`InputError` naming the problem."""
    dom_raw = np.asarray(domain)
    s0 = np.asarray(start_ns, dtype=np.int64)
    e0 = np.asarray(end_ns, dtype=np.int64)
    n = s0.size
    if dom_raw.shape != (n,) or e0.shape != (n,):
        raise InputError("domain, start_ns and end_ns must be 1-D arrays of one length")
    if np.any(e0 < s0):
        raise InputError("event ends before it starts", record=f"event {int(np.argmax(e0 < s0))}")
    send = np.asarray([] if send_event is None else send_event, dtype=np.intp)
    recv = np.asarray([] if recv_event is None else recv_event, dtype=np.intp)
    if send.shape != recv.shape or (
        send.size and (send.min() < 0 or max(send.max(), recv.max()) >= n or recv.min() < 0)
    ):
        raise InputError("send_event and recv_event must be equal-length event indices")
    coll = None if collective is None else np.asarray(collective, dtype=np.int64)
    if coll is not None and coll.shape != (n,):
        raise InputError("collective must have one id per event")
    if not 0.0 <= gamma <= 1.0:
        raise InputError(f"gamma must be in [0, 1], got {gamma}")
    slack = np.zeros(n, dtype=np.int64) if slack_ns is None else np.asarray(slack_ns, np.int64)
    if slack.shape != (n,) or np.any(slack < 0):
        raise InputError("slack_ns must be one non-negative value per event")
    return _Events(dom_raw, s0, e0, send, recv, coll, slack)


def _phase1_offsets(
    ev: _Events,
    members: _Members,
    dom: NDArray[np.intp],
    nd: int,
    t0: NDArray[np.int64],
    min_latency_ns: float,
) -> NDArray[np.float64]:
    """Phase 1: each domain's integer offset (as float) from the cross-domain constraints
    (zeros when there are none)."""
    pa, pb, lat = _constraints(ev.send, ev.recv, members, dom, t0, min_latency_ns)
    if not pa.size:
        return np.zeros(nd)
    pdom = np.repeat(dom, 2)
    return np.rint(
        _domain_offsets(
            dom, nd, t0[pa].astype(float), t0[pb].astype(float), pdom[pa], pdom[pb], lat
        )
    )


class _Links(NamedTuple):
    """Point constraints ``t(cb) >= t(ca) + cl``: first the messages (receive end after send
    start plus the latency), then every event's duration; collectives go via members."""

    ca: NDArray[np.intp]
    cb: NDArray[np.intp]
    cl: NDArray[np.int64]

    @staticmethod
    def of(ev: _Events, min_latency_ns: float) -> _Links:
        """The message and duration constraints of the events."""
        n = ev.s0.size
        events = np.arange(n)
        latency = np.full(ev.send.size, int(np.ceil(min_latency_ns)), dtype=np.int64)
        return _Links(
            np.concatenate([2 * ev.send, 2 * events]).astype(np.intp),
            np.concatenate([2 * ev.recv + 1, 2 * events + 1]).astype(np.intp),
            np.concatenate([latency, ev.e0 - ev.s0]),
        )


@dataclass(frozen=True)
class _Sequences:
    """Every domain's points in order (domain, time, start before end, event): ``order``
    the points so sorted, ``seg`` their domain, ``ts`` their times, ``cost`` the cumulative
    integer decay of a carried shift (``(1 - gamma)`` per ns of gap, never more than the
    gap, so order is kept exactly), ``pos`` each point's place in ``order``."""

    order: NDArray[np.intp]
    seg: NDArray[np.int64]
    ts: NDArray[np.int64]
    cost: NDArray[np.int64]
    pos: NDArray[np.intp]

    @property
    def same(self) -> NDArray[np.bool_]:
        """Per point in ``order`` but the last: the next point is of the same domain."""
        return self.seg[1:] == self.seg[:-1]

    @staticmethod
    def of(t: NDArray[np.int64], pdom: NDArray[np.intp], gamma: float) -> _Sequences:
        """The sequences of the points at times ``t`` in domains ``pdom``."""
        points = t.size
        kind = np.tile([0, 1], points // 2)
        order = np.lexsort((np.arange(points), kind, t, pdom))
        seg = pdom[order].astype(np.int64)
        ts = t[order]
        gaps = np.diff(ts, prepend=ts[:1])
        gaps[np.concatenate([[True], seg[1:] != seg[:-1]])] = 0
        cost = np.cumsum(np.floor((1.0 - gamma) * gaps).astype(np.int64))
        pos = np.empty(points, dtype=np.intp)
        pos[order] = np.arange(points)
        return _Sequences(order, seg, ts, cost, pos)


class _Forward(NamedTuple):
    """The forward pass's shifts, the constraints it kept (``active`` links, member starts
    ``in_alive`` that bind, member ends ``out_alive`` that follow) and how many dropped
    constraints stay violated."""

    delta: NDArray[np.int64]
    active: NDArray[np.bool_]
    in_alive: NDArray[np.bool_]
    out_alive: NDArray[np.bool_]
    unresolved: int


def _forward_phase(
    t: NDArray[np.int64],
    ev: _Events,
    links: _Links,
    seq: _Sequences,
    members: _Members,
    max_rounds: int,
    min_latency_ns: float,
) -> _Forward:
    """Phase 2, forward: the vectorised rounds, or the exact pass when they do not settle
    (then constraints on causal cycles may be dropped; those left violated are counted)."""
    ca, cb, cl = links
    order, seg, cost, pos = seq.order, seq.seg, seq.cost, seq.pos
    active = np.ones(ca.size, dtype=bool)
    delta, converged = _forward(t, ca, cb, cl, order, seg, cost, pos, max(0, max_rounds), members)
    if converged:
        alive = np.ones(members.event.size, dtype=bool)
        return _Forward(delta, active, alive, alive.copy(), 0)
    latency = int(np.ceil(min_latency_ns))
    delta, msg_dropped, in_dropped, out_dropped = _forward_exact(
        t, ev.s0, ev.e0, ev.send, ev.recv, latency, members, order, seg, cost, pos
    )
    n_msg = ev.send.size
    active[:n_msg] = ~msg_dropped
    in_alive = ~in_dropped[members.event]
    out_alive = ~out_dropped[members.event]
    tp = t + delta
    unresolved = int(np.sum(msg_dropped & (tp[cb[:n_msg]] < tp[ca[:n_msg]] + cl[:n_msg])))
    if members.n_inst:
        latest = members.latest_start(tp, in_alive)
        end_pt = 2 * members.event + 1
        late = tp[end_pt] + members.slack < latest[members.inst]
        unresolved += int(np.sum(late & ~out_alive))
    return _Forward(delta, active, in_alive, out_alive, unresolved)


def _backward_caps(
    t: NDArray[np.int64],
    tp: NDArray[np.int64],
    fwd: _Forward,
    links: _Links,
    seq: _Sequences,
    same: NDArray[np.bool_],
    members: _Members,
) -> NDArray[np.int64]:
    """How far each point may move in total (from ``t``) without breaking a kept constraint
    or passing the next point of its domain, at the current times ``tp``."""
    ca, cb, cl = links
    act, in_alive = fwd.active, fwd.in_alive
    cap = np.full(t.size, _INF, dtype=np.int64)
    np.minimum.at(cap, ca[act], tp[cb[act]] - cl[act] - t[ca[act]])
    if members.n_inst:
        # a member's start may not pass the earliest end that must follow it
        early = members.earliest_end(tp, fwd.out_alive)
        st = 2 * members.event[in_alive]
        np.minimum.at(cap, st, early[members.inst[in_alive]] + members.slack[in_alive] - t[st])
    # never pass the next point of the same domain
    nxt = np.full(t.size, _INF, dtype=np.int64)
    nxt[seq.order[:-1]] = np.where(same, tp[seq.order][1:] - seq.ts[:-1], _INF)
    return np.minimum(cap, nxt)


def _backward_ramp(
    delta: NDArray[np.int64],
    barrier: NDArray[np.bool_],
    seq: _Sequences,
    same: NDArray[np.bool_],
) -> NDArray[np.int64]:
    """The shift each point would take from the jumps after it, decaying backwards along
    its domain; a barrier (a point that was capped) splits the ramp."""
    order = seq.order
    # barriers split the ramp: the segment id increments after each barrier point
    split = np.concatenate([[0], np.cumsum(barrier[order][:-1] | ~same)])
    vals = (delta - seq.cost[seq.pos])[order]
    ramp_sorted = _seg_accumulate(vals, split.astype(np.int64), reverse=True)
    ramp = np.empty(delta.size, dtype=np.int64)
    ramp[order] = ramp_sorted
    return ramp + seq.cost[seq.pos]


def _backward_amortization(
    t: NDArray[np.int64], fwd: _Forward, links: _Links, seq: _Sequences, members: _Members
) -> NDArray[np.int64]:
    """Phase 2, backward: points before a jump move forward on a ramp, capped so no kept
    constraint breaks and no point passes its successor (at most 200 rounds)."""
    delta = fwd.delta
    barrier = np.zeros(t.size, dtype=bool)
    same = seq.same
    for _round in range(200):
        cap = _backward_caps(t, t + delta, fwd, links, seq, same, members)
        ramp = _backward_ramp(delta, barrier, seq, same)
        capped = cap < ramp
        new = np.maximum(delta, np.minimum(cap, ramp))
        new_barrier = barrier | (capped & (ramp > delta))
        if np.array_equal(new, delta) and np.array_equal(new_barrier, barrier):
            break
        delta, barrier = new, new_barrier
    return delta


def _repaired(
    ev: _Events,
    t: NDArray[np.int64],
    delta: NDArray[np.int64],
    domains: NDArray[Any],
    offsets: NDArray[np.float64],
    unresolved: int,
    min_latency_ns: float,
) -> CausalityRepair:
    """The result: points ``t`` (after the domain ``offsets``) shifted by ``delta``, what
    moved, and the violations before and after."""
    final = t + delta
    start, end = final[0::2], final[1::2]
    return CausalityRepair(
        start_ns=start,
        end_ns=end,
        shift_start_ns=start - ev.s0,
        shift_end_ns=end - ev.e0,
        domains=domains,
        domain_offset_ns=offsets.astype(np.int64),
        violations_before=ev.violations(ev.s0, ev.e0, min_latency_ns),
        violations_after=ev.violations(start, end, min_latency_ns),
        unresolved=unresolved,
        shifted=np.flatnonzero((delta[0::2] != 0) | (delta[1::2] != 0)),
    )


def repair_causality(
    domain: ArrayLike,
    start_ns: ArrayLike,
    end_ns: ArrayLike,
    *,
    send_event: ArrayLike | None = None,
    recv_event: ArrayLike | None = None,
    collective: ArrayLike | None = None,
    min_latency_ns: float = 0.0,
    gamma: float = 0.95,
    domain_offsets: bool = True,
    backward: bool = True,
    max_rounds: int = 32,
    slack_ns: ArrayLike | None = None,
) -> CausalityRepair:
    """Shift events minimally so every message and collective is causal.

    Args:
        domain: clock domain of each event (any comparable ids: ranks, device names).
        start_ns: event start times on the aligned timeline (int ns).
        end_ns: event end times.
        send_event: for each message, the index of its send event ...
        recv_event: ... and of its receive event (the receive must end ``min_latency_ns``
            after the send started).
        collective: collective instance id per event (``-1`` for none).
        min_latency_ns: smallest possible message latency.
        gamma: interval preservation in ``[0, 1]``: 1 carries a jump to every later event
            of the domain, 0 only keeps order.
        domain_offsets: run phase 1 (per-domain offsets) first.
        backward: run backward amortization after the forward pass.
        max_rounds: rounds of the vectorised forward pass tried first; when they do not
            settle (long chains of jumps, or a causal cycle), the exact pass runs instead:
            longest paths in topological order, same answer, one pass. Constraints on a
            causal cycle are dropped (those violated in the input first) and those left
            violated are counted in ``unresolved``.
        slack_ns: per event, the clock uncertainty a collective constraint allows it (a
            member's end may precede another's start by up to the sum of their slacks:
            violations within the clocks' bounds are not evidence, and repair moves an event
            only by what exceeds them). Default 0.

    Every constraint costs time linear in its members: a collective is one node (or one
    maximum per round) that every member's start feeds and every member's end follows.

    Returns:
        :class:`CausalityRepair`.

    Raises:
        InputError: mismatched lengths, end before start, indices out of range.
    """
    ev = _validated_events(
        domain, start_ns, end_ns, send_event, recv_event, collective, gamma, slack_ns
    )
    domains, dom = np.unique(ev.domain, return_inverse=True)
    dom = dom.reshape(-1)
    t0 = ev.points()
    members = _Members.of(ev.coll, ev.slack)
    offsets = (
        _phase1_offsets(ev, members, dom, domains.size, t0, min_latency_ns)
        if domain_offsets
        else np.zeros(domains.size)
    )
    pdom = np.repeat(dom, 2)
    t = t0 + offsets.astype(np.int64)[pdom]
    links = _Links.of(ev, min_latency_ns)
    seq = _Sequences.of(t, pdom, gamma)
    fwd = _forward_phase(t, ev, links, seq, members, max_rounds, min_latency_ns)
    delta = fwd.delta
    if backward and gamma < 1.0:
        delta = _backward_amortization(t, fwd, links, seq, members)
    return _repaired(ev, t, delta, domains, offsets, fwd.unresolved, min_latency_ns)
