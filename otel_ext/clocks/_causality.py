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
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from otel_ext._arrays import median
from otel_ext.clocks._collectives import pair_indices
from otel_ext.errors import InputError

__all__ = ["CausalityRepair", "count_violations", "repair_causality"]


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

    def report(self) -> list[dict[str, Any]]:
        """One record per domain offset and per event shifted beyond it."""
        out: list[dict[str, Any]] = [
            {
                "kind": "domain_offset",
                "domain": d.item() if hasattr(d, "item") else d,
                "shift_ns": int(o),
            }
            for d, o in zip(self.domains, self.domain_offset_ns)
            if o != 0
        ]
        out.extend(
            {
                "kind": "event",
                "event": int(i),
                "start_shift_ns": int(self.shift_start_ns[i]),
                "end_shift_ns": int(self.shift_end_ns[i]),
            }
            for i in self.shifted
        )
        return out


def _constraints(
    start: NDArray[np.int64],
    end: NDArray[np.int64],
    send: NDArray[np.intp],
    recv: NDArray[np.intp],
    coll: NDArray[np.int64] | None,
    latency: float,
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]:
    """Point constraints ``(a, b, L)``; point ``2i`` is start of event ``i``, ``2i+1`` its end."""
    a = [2 * send]
    b = [2 * recv + 1]
    lat = [np.full(send.size, float(latency))]
    if coll is not None:
        pi, pj = pair_indices(coll)
        a.append(2 * pj)
        b.append(2 * pi + 1)
        lat.append(np.zeros(pi.size))
    return np.concatenate(a).astype(np.intp), np.concatenate(b).astype(np.intp), np.concatenate(lat)


def count_violations(
    start_ns: ArrayLike,
    end_ns: ArrayLike,
    *,
    send_event: ArrayLike | None = None,
    recv_event: ArrayLike | None = None,
    collective: ArrayLike | None = None,
    min_latency_ns: float = 0.0,
) -> int:
    """Messages received before sent (+latency) plus collective members leaving too early.

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
            keys, gi = np.unique(g[member], return_inverse=True)
            latest = np.full(keys.size, np.iinfo(np.int64).min)
            np.maximum.at(latest, gi, s[member])
            n += int(np.sum(e[member] < latest[gi]))
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
) -> tuple[NDArray[np.int64], bool]:
    """Controlled-logical-clock forward pass: integer shifts, and whether it converged."""
    delta = np.zeros(t.size, dtype=np.int64)
    for _round in range(rounds):
        tp = t + delta
        need = np.full(t.size, -_INF, dtype=np.int64)
        np.maximum.at(need, cb, tp[ca] + cl - t[cb])
        jump = np.maximum(delta, need)
        prop = _seg_accumulate((jump + cost[pos])[order], seg, reverse=False)
        new = np.empty(t.size, dtype=np.int64)
        new[order] = prop
        new = np.maximum(new - cost[pos], 0)
        if np.array_equal(new, delta):
            return new, True
        delta = new
    return delta, False


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
    max_rounds: int = 10_000,
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
        max_rounds: cap on forward iterations (also capped by the number of constraints + 2;
            constraints still violated then form a causal cycle and are dropped, counted
            in ``unresolved``).

    Returns:
        :class:`CausalityRepair`.

    Raises:
        InputError: mismatched lengths, end before start, indices out of range.
    """
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
    before = count_violations(
        s0, e0, send_event=send, recv_event=recv, collective=coll, min_latency_ns=min_latency_ns
    )
    domains, dom = np.unique(dom_raw, return_inverse=True)
    nd = domains.size
    pa, pb, lat = _constraints(s0, e0, send, recv, coll, min_latency_ns)
    t0 = np.empty(2 * n, dtype=np.int64)
    t0[0::2], t0[1::2] = s0, e0
    pdom = np.repeat(dom, 2)

    offsets = np.zeros(nd)
    if domain_offsets and pa.size:
        offsets = np.rint(
            _domain_offsets(
                dom, nd, t0[pa].astype(float), t0[pb].astype(float), pdom[pa], pdom[pb], lat
            )
        )
    t = t0 + offsets.astype(np.int64)[pdom]

    # duration constraints: end >= start + duration
    ev = np.arange(n)
    ca = np.concatenate([pa, 2 * ev]).astype(np.intp)
    cb = np.concatenate([pb, 2 * ev + 1]).astype(np.intp)
    cl = np.concatenate([np.ceil(lat).astype(np.int64), e0 - s0])

    # domain sequences: points sorted by (domain, time, start-before-end, event)
    kind = np.tile([0, 1], n)
    order = np.lexsort((np.arange(2 * n), kind, t, pdom))
    seg = pdom[order].astype(np.int64)
    ts = t[order]
    gaps = np.diff(ts, prepend=ts[:1])
    gaps[np.concatenate([[True], seg[1:] != seg[:-1]])] = 0
    # integer decay per step, never more than the gap: order is preserved exactly
    cost = np.cumsum(np.floor((1.0 - gamma) * gaps).astype(np.int64))
    pos = np.empty(2 * n, dtype=np.intp)
    pos[order] = np.arange(2 * n)

    n_cross = pa.size
    rounds = min(max_rounds, ca.size + 2)
    active = np.ones(ca.size, dtype=bool)
    unresolved = 0
    converged = False
    for _attempt in range(4):
        delta, converged = _forward(
            t, ca[active], cb[active], cl[active], order, seg, cost, pos, rounds
        )
        if converged:
            break
        # a causal cycle: drop the cross-domain constraints still violated, and retry
        tp = t + delta
        bad = active & (tp[cb] < tp[ca] + cl)
        bad[n_cross:] = False
        if not bad.any():
            break
        unresolved += int(bad.sum())
        active &= ~bad
    if not converged:
        # give up on phase 2 rather than return half-propagated shifts
        delta = np.zeros(2 * n, dtype=np.int64)
        tp = t + delta
        unresolved = max(
            unresolved, int(np.sum(tp[cb[:n_cross]] < tp[ca[:n_cross]] + cl[:n_cross])), 1
        )
        active = np.zeros(ca.size, dtype=bool)
        active[n_cross:] = True

    if backward and gamma < 1.0:
        barrier = np.zeros(2 * n, dtype=bool)
        for _round in range(200):
            tp = t + delta
            cap = np.full(2 * n, _INF, dtype=np.int64)
            np.minimum.at(cap, ca[active], tp[cb[active]] - cl[active] - t[ca[active]])
            # never pass the next point of the same domain
            nxt = np.full(2 * n, _INF, dtype=np.int64)
            same = seg[1:] == seg[:-1]
            nxt_sorted = np.where(same, tp[order][1:] - ts[:-1], _INF)
            nxt[order[:-1]] = nxt_sorted
            cap = np.minimum(cap, nxt)
            # barriers split the ramp: the segment id increments after each barrier point
            bsorted = barrier[order]
            split = np.concatenate([[0], np.cumsum(bsorted[:-1] | ~same)])
            vals = (delta - cost[pos])[order]
            ramp_sorted = _seg_accumulate(vals, split.astype(np.int64), reverse=True)
            ramp = np.empty(2 * n, dtype=np.int64)
            ramp[order] = ramp_sorted
            ramp = ramp + cost[pos]
            capped = cap < ramp
            new = np.maximum(delta, np.minimum(cap, ramp))
            new_barrier = barrier | (capped & (ramp > delta))
            if np.array_equal(new, delta) and np.array_equal(new_barrier, barrier):
                break
            delta, barrier = new, new_barrier

    final = t + delta
    start, end = final[0::2], final[1::2]
    after = count_violations(
        start, end, send_event=send, recv_event=recv, collective=coll, min_latency_ns=min_latency_ns
    )
    moved = np.flatnonzero((delta[0::2] != 0) | (delta[1::2] != 0))
    return CausalityRepair(
        start_ns=start,
        end_ns=end,
        shift_start_ns=start - s0,
        shift_end_ns=end - e0,
        domains=domains,
        domain_offset_ns=offsets.astype(np.int64),
        violations_before=before,
        violations_after=after,
        unresolved=unresolved,
        shifted=moved,
    )
