"""Which brackets belong to one run of the device counter: outliers out, resets split.

Two brackets ``a`` (earlier) and ``j`` of one running counter agree when the ticks between
them could have elapsed in the host time between them at a rate within ``max_rate_error``
of nominal::

    max(0, hb_j - ha_a) * r * (1 - e) - 1  <=  x_j - x_a  <=  (ha_j - hb_a + res) * r * (1 + e) + 1

A torn 64-bit read (one half from before a carry, ``+2**32`` ticks), a corrupt read or a
read that ran backwards disagrees with both neighbours: it is one bracket dropped. A counter
reset (or any lasting jump) disagrees with everything before it and agrees with everything
after: the brackets split into **counter epochs**. Brackets are chained in host order; each
joins the longest recent chain whose last bracket it agrees with, else starts a chain; when
it disagrees with a chain's last bracket but agrees with the one before, that last bracket
was the outlier and is replaced. Chains enclosed in time by a longer chain are outliers (two
torn reads in a row); chains of one bracket are outliers; the rest are epochs, in order.

Pure numpy; when some neighbours disagree, one Python pass over the brackets (linear).

>>> import numpy as np
>>> hb = np.arange(0, 1_000_000_000, 100_000_000)            # a bracket every 100 ms
>>> x = hb.copy(); x[4] += 1 << 32                            # one torn read
>>> runs = counter_epochs(x, hb, hb + 1_000, ticks_per_second=1e9)
>>> [r.tolist() for r in runs.epochs], runs.outliers.tolist()
([[0, 1, 2, 3, 5, 6, 7, 8, 9]], [4])
>>> x = hb.copy(); x[4:6] += 1 << 32                          # two in a row
>>> runs = counter_epochs(x, hb, hb + 1_000, ticks_per_second=1e9)
>>> len(runs.epochs), runs.outliers.tolist()
(1, [4, 5])
>>> x = hb.copy(); x[6:] -= x[6] - 5                          # the counter reset at bracket 6
>>> [r.tolist() for r in counter_epochs(x, hb, hb + 1_000, ticks_per_second=1e9).epochs]
[[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["CounterEpochs", "counter_epochs"]

#: chains kept open for a bracket to join (older chains are closed)
_OPEN_CHAINS = 8
#: how far back a disagreeing bracket looks for the chain member it agrees with
_LOOK_BACK = 3


@dataclass(frozen=True)
class CounterEpochs:
    """Positions (into the host-ordered brackets) of each counter epoch, and the outliers."""

    epochs: tuple[NDArray[np.intp], ...]
    outliers: NDArray[np.intp]


class _Agreement:
    """Whether two brackets could be reads of one running counter (see the module doc)."""

    def __init__(
        self,
        x: NDArray[np.int64],
        hb: NDArray[np.int64],
        ha: NDArray[np.int64],
        *,
        ticks_per_second: float,
        max_rate_error_ppm: float,
        host_resolution_ns: float,
    ) -> None:
        r = ticks_per_second / 1e9
        self.r_lo = r * (1.0 - max_rate_error_ppm * 1e-6)
        self.r_hi = r * (1.0 + max_rate_error_ppm * 1e-6)
        self.res = host_resolution_ns
        self.xf = x.astype(np.float64)
        self.hbf = hb.astype(np.float64)
        self.haf = ha.astype(np.float64)

    def agree(self, a: int, j: int) -> bool:
        """Bracket ``j`` agrees with the earlier bracket ``a``."""
        dx = self.xf[j] - self.xf[a]
        lo = max(0.0, self.hbf[j] - self.haf[a]) * self.r_lo - 1.0
        hi = (self.haf[j] - self.hbf[a] + self.res) * self.r_hi + 1.0
        return bool(lo <= dx <= hi)

    def all_consecutive(self) -> bool:
        """Every bracket agrees with the one before it (the fast path, vectorised)."""
        dx = np.diff(self.xf)
        lo = np.maximum(0.0, self.hbf[1:] - self.haf[:-1]) * self.r_lo - 1.0
        hi = (self.haf[1:] - self.hbf[:-1] + self.res) * self.r_hi + 1.0
        return bool(np.all((lo <= dx) & (dx <= hi)))


def _cut_outlier_tail(chain: list[int], j: int, ok: _Agreement, dropped: list[int]) -> bool:
    """When ``j`` agrees with one of the few brackets before ``chain``'s last, that last
    bracket (or those after the one it agrees with) were outliers: cut them into
    ``dropped`` and say ``True``."""
    back = next(
        (b for b in range(2, min(_LOOK_BACK + 1, len(chain)) + 1) if ok.agree(chain[-b], j)),
        0,
    )
    if back:
        dropped.extend(chain[-back + 1 :])
        del chain[-back + 1 :]
    return bool(back)


def _chains(n: int, ok: _Agreement) -> tuple[list[list[int]], list[int]]:
    """The brackets chained in host order (each joins the longest open chain whose last
    bracket it agrees with, else starts one), and the outliers cut from chain tails."""
    chains: list[list[int]] = []
    open_ids: list[int] = []  # most recently extended last
    dropped: list[int] = []
    for j in range(n):
        best = -1
        for cid in open_ids:
            if ok.agree(chains[cid][-1], j) and (best < 0 or len(chains[cid]) > len(chains[best])):
                best = cid
        if best < 0:  # a chain's last bracket(s) may be the outlier: agree with an earlier one?
            best = next(
                (c for c in reversed(open_ids) if _cut_outlier_tail(chains[c], j, ok, dropped)),
                -1,
            )
        if best < 0:
            chains.append([j])
            best = len(chains) - 1
        else:
            chains[best].append(j)
        if best in open_ids:
            open_ids.remove(best)
        open_ids.append(best)
        if len(open_ids) > _OPEN_CHAINS:
            open_ids.pop(0)
    return chains, dropped


def _epochs(chains: list[list[int]], dropped: list[int]) -> CounterEpochs:
    """The chains as epochs in time order; chains of one bracket, and chains enclosed in time
    by a longer chain, join the outliers."""
    long = [(c[0], c[-1], len(c)) for c in chains if len(c) > 1]
    epochs: list[NDArray[np.intp]] = []
    for chain in chains:
        first, last, size = chain[0], chain[-1], len(chain)
        enclosed = size > 1 and any(s <= first and last <= e and sz > size for s, e, sz in long)
        if size < 2 or enclosed:
            dropped.extend(chain)
        else:
            epochs.append(np.asarray(chain, dtype=np.intp))
    epochs.sort(key=lambda e: int(e[0]))
    return CounterEpochs(tuple(epochs), np.asarray(sorted(dropped), dtype=np.intp))


def counter_epochs(
    x: NDArray[np.int64],
    hb: NDArray[np.int64],
    ha: NDArray[np.int64],
    *,
    ticks_per_second: float,
    max_rate_error_ppm: float = 1000.0,
    host_resolution_ns: float = 1.0,
) -> CounterEpochs:
    """Split host-ordered brackets into counter epochs and outliers (see the module doc).

    Args:
        x: unwrapped device ticks of each bracket (any common origin), in host order.
        hb, ha: host time before and after each read (ns), sorted by ``hb``.
        ticks_per_second: nominal tick rate.
        max_rate_error_ppm: largest rate error of the counter against the host clock.
        host_resolution_ns: resolution of the host clock reads.

    Returns:
        The epochs (each a sorted array of positions, in time order) and the outliers.
    """
    n = x.size
    ok = _Agreement(
        x,
        hb,
        ha,
        ticks_per_second=ticks_per_second,
        max_rate_error_ppm=max_rate_error_ppm,
        host_resolution_ns=host_resolution_ns,
    )
    if n < 2 or ok.all_consecutive():
        return CounterEpochs((np.arange(n, dtype=np.intp),), np.zeros(0, dtype=np.intp))
    return _epochs(*_chains(n, ok))
