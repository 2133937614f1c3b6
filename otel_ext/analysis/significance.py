"""Significance of cross-rank verdicts: is a pattern more than chance?

A straggler verdict rests on two statistics, both computed here without scipy:

* **last arrivals against chance.** In a collective of ``n`` equally fast members each is the
  last to arrive with probability ``1/n``. A rank that joined ``J`` collectives and was last
  in ``L`` of them is tested against the binomial with the mean chance ``p̄`` of its
  collectives: ``P(X >= L)``. With groups of unequal size the true null is Poisson-binomial;
  Hoeffding (1956) shows the binomial with the same mean has the heavier upper tail for
  ``L >= J p̄ + 1``, so the p-value is conservative where it matters.
* **the sign of compute ratios.** Each of a rank's kernels is slower or faster than the
  median of the same work on all ranks; a slow chip is slower in most of them. Under the
  null the signs are fair coins: the sign test ``P(X >= slower | n, 1/2)``.

P-values are adjusted for the number of ranks tested (Bonferroni): with 512 ranks one of them
is last more often than the others by chance alone, and that is not a finding.

>>> round(float(binomial_upper_tail([5], [10], [0.5])[0]), 4)  # two_rank: 5 of 10, p=1/2
0.623
>>> float(binomial_upper_tail([10], [10], [0.5])[0]) < 0.001
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ALPHA", "adjusted", "binomial_upper_tail", "fisher_upper_tail"]

#: family-wise significance level of every cross-rank verdict (after adjustment)
ALPHA = 0.01


def _log_factorials(n: int) -> np.ndarray:
    out = np.zeros(n + 1)
    if n > 0:
        np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)), out=out[1:])
    return out


def binomial_upper_tail(successes: Any, trials: Any, p: Any) -> np.ndarray:
    """``P(X >= successes)`` for ``X ~ Binomial(trials, p)``, element-wise.

    Exact (a sum of the probability masses in log space), vectorised over all elements at once:
    the work is the total of ``trials - successes + 1``, linear in the input.

    >>> binomial_upper_tail([0, 3, 4], [3, 3, 3], [0.5, 0.5, 0.5]).round(6).tolist()
    [1.0, 0.125, 0.0]
    """
    k = np.asarray(successes, dtype=np.int64)
    n = np.asarray(trials, dtype=np.int64)
    q = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    k, n, q = np.broadcast_arrays(k, n, q)
    out = np.ones(k.shape, dtype=np.float64)
    some = (k > 0) & (k <= n)
    out[k > n] = 0.0
    idx = np.flatnonzero(some.ravel())
    if idx.size == 0:
        return out
    kk, nn, qq = k.ravel()[idx], n.ravel()[idx], q.ravel()[idx]
    lf = _log_factorials(int(nn.max()))
    terms = nn - kk + 1
    owner = np.repeat(np.arange(idx.size), terms)
    within = np.arange(int(terms.sum())) - np.repeat(np.cumsum(terms) - terms, terms)
    j = kk[owner] + within  # every j from k to n, for each element
    nj = nn[owner]
    qj = qq[owner]
    with np.errstate(divide="ignore", invalid="ignore"):
        logq = np.where(qj > 0, np.log(np.where(qj > 0, qj, 1.0)), -np.inf)
        log1q = np.where(qj < 1, np.log1p(-np.where(qj < 1, qj, 0.0)), -np.inf)
        logpmf = lf[nj] - lf[j] - lf[nj - j] + j * logq + (nj - j) * log1q
        logpmf = np.where((j == 0) & (qj == 0), 0.0, logpmf)
        logpmf = np.where((j == nj) & (qj == 1), 0.0, logpmf)
    tail = np.bincount(owner, weights=np.exp(logpmf), minlength=idx.size)
    flat = out.ravel()
    flat[idx] = np.minimum(tail, 1.0)
    return flat.reshape(out.shape)


def adjusted(p_values: Any, tests: int) -> np.ndarray:
    """Bonferroni-adjusted p-values for ``tests`` simultaneous tests.

    >>> adjusted([0.001, 0.5], 8).tolist()
    [0.008, 1.0]
    """
    return np.minimum(np.asarray(p_values, dtype=np.float64) * max(int(tests), 1), 1.0)


def fisher_upper_tail(k: int, n: int, j: int, m: int) -> float:
    """One-sided Fisher exact test: ``P(X >= k)`` for ``X`` the successes in a group of ``n``
    drawn from ``n + m`` items of which ``k + j`` are successes (hypergeometric): is a share
    of ``k`` of ``n`` higher than ``j`` of ``m`` by more than chance?

    >>> round(fisher_upper_tail(8, 8, 0, 16), 9)  # 8 of 8 slow against 0 of 16
    1.36e-06
    >>> fisher_upper_tail(0, 8, 3, 16), round(fisher_upper_tail(2, 4, 2, 4), 4)
    (1.0, 0.7571)
    """
    if k <= 0:
        return 1.0
    total, succ = n + m, k + j
    lf = _log_factorials(total)

    def log_comb(a: int, b: int) -> float:
        return float(lf[a] - lf[b] - lf[a - b])

    hi = min(n, succ)
    terms = [
        log_comb(succ, x) + log_comb(total - succ, n - x) - log_comb(total, n)
        for x in range(k, hi + 1)
        if n - x <= total - succ
    ]
    return float(min(1.0, sum(np.exp(terms)))) if terms else 0.0
