"""Order statistics on 1-D arrays, without the first-call import of ``numpy.ma``.

``np.unique``, ``np.median`` and ``np.percentile`` (numpy 2.4) ask ``np.ma.is_masked`` of their
input, and the first such call imports ``numpy.ma``: about 10 ms and 1.3 MB, as much as the
whole analysis of a small trace. These functions give the same results for the plain arrays
the analyses and clock estimators hold (tested against numpy's, value for value) and never
touch ``numpy.ma``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "distinct",
    "distinct_rows",
    "group_median",
    "median",
    "percentile",
    "weighted_group_median",
]


def _flat(values: Any) -> np.ndarray:
    a = np.asarray(values)
    return a.ravel() if a.ndim != 1 else a


def _has_nan(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" and bool(np.isnan(a).any())


def distinct(values: Any) -> np.ndarray:
    """The sorted distinct values: ``np.unique(values)``.

    Integers in a compact range (ranks, string codes, sequence numbers) are counted instead of
    sorted; a constant column (a zero-stride view of one element) is its one value; NaNs are
    one value, last, as ``np.unique`` has them.

    >>> distinct([3, 1, 3, -2]).tolist(), distinct(np.broadcast_to(np.int32(7), 5)).tolist()
    ([-2, 1, 3], [7])
    """
    a = _flat(values)
    if a.size == 0:
        return np.empty(0, a.dtype)
    if a.strides[0] == 0:
        return a[:1].copy()
    if a.dtype.kind not in "iubf":
        return np.unique(a)
    if a.dtype.kind in "iu":
        lo, hi = int(a.min()), int(a.max())
        if hi - lo <= 4 * a.size + 1024:
            if a.dtype == np.uint64:
                off = (a - np.uint64(lo)).astype(np.intp)
            else:
                off = a.astype(np.int64) - lo  # in the dtype itself it could wrap
            present = np.bincount(off, minlength=hi - lo + 1)
            # offsets added in the dtype itself: lo may not fit a C long (uint64 above 2**63)
            return np.flatnonzero(present).astype(a.dtype) + a.dtype.type(lo)
    s = np.sort(a)  # NaNs sort last
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    if a.dtype.kind == "f" and np.isnan(s[-1]):  # one NaN, as ``np.unique`` keeps
        first_nan = int(np.searchsorted(s, s[-1]))
        keep[first_nan + 1 :] = False
        keep[first_nan] = True
    return s[keep]


def distinct_rows(rows: Any) -> np.ndarray:
    """The sorted distinct rows of a 2-D array: ``np.unique(rows, axis=0)``.

    Asking ``np.unique`` for the first indices as well takes its sorting path, which never
    looks at ``numpy.ma``.

    >>> distinct_rows([[2, 1], [0, 5], [2, 1]]).tolist()
    [[0, 5], [2, 1]]
    """
    return np.unique(np.asarray(rows), axis=0, return_index=True)[0]


def median(values: Any) -> Any:
    """``np.median(values)``: the middle value, or the mean of the two middle values.

    NaN when any value is NaN or there are none.

    >>> float(median([5, 1, 3])), float(median([4, 1, 3, 2])), float(median([]))
    (3.0, 2.5, nan)
    """
    a = _flat(values)
    n = a.size
    if n == 0 or _has_nan(a):
        return np.float64(np.nan)
    half = n // 2
    if n % 2:
        return np.mean(np.partition(a, half)[half : half + 1])
    return np.mean(np.partition(a, [half - 1, half])[half - 1 : half + 1])


def percentile(values: Any, q: Any) -> Any:
    """``np.percentile(values, q)`` (its default linear method), ``q`` a number or a list.

    >>> float(percentile([10, 20, 30, 40], 50)), percentile(np.arange(11), [0, 90, 100]).tolist()
    (25.0, [0.0, 9.0, 10.0])
    """
    a = _flat(values)
    n = a.size
    if n == 0:
        raise ValueError("percentile of no values")
    qs = np.true_divide(np.asarray(q, dtype=np.float64), 100)
    if bool(((qs < 0) | (qs > 1)).any()):
        raise ValueError("percentiles must be in the range [0, 100]")
    virtual = (n - 1) * np.atleast_1d(qs)
    below = np.floor(virtual)
    upper = np.minimum(below + 1, n - 1).astype(np.intp)
    lower = np.minimum(below, n - 1).astype(np.intp)
    gamma = virtual - below
    gamma[virtual >= n - 1] = 0.0
    if _has_nan(a):
        out = np.full(virtual.shape, np.nan)
    else:
        s = np.partition(a, sorted({*lower.tolist(), *upper.tolist()}))
        lo, hi = s[lower], s[upper]
        diff = hi - lo
        out = np.add(lo, diff * gamma)
        np.subtract(hi, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    return out[0] if np.ndim(q) == 0 else out


def group_median(values: Any, groups: Any, n_groups: int) -> np.ndarray:
    """The median of ``values`` within each group ``0 .. n_groups - 1`` (NaN where empty).

    One sort of all values at once: linear in the number of values plus the sort, however
    many groups (a loop over groups with a mask each would be quadratic). NaN values are left
    out.

    >>> group_median([5.0, 1.0, 3.0, 2.0, np.nan], [0, 0, 0, 2, 2], 3).tolist()
    [3.0, nan, 2.0]
    """
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups, dtype=np.int64)
    ok = ~np.isnan(v)
    v, g = v[ok], g[ok]
    out = np.full(n_groups, np.nan)
    if v.size == 0:
        return out
    order = np.lexsort((v, g))
    counts = np.bincount(g, minlength=n_groups)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    has = counts > 0
    sv = v[order]
    lo = sv[(starts + (counts - 1) // 2)[has]]
    hi = sv[(starts + counts // 2)[has]]
    out[has] = (lo + hi) / 2
    return out


def weighted_group_median(values: Any, weights: Any, groups: Any, n_groups: int) -> np.ndarray:
    """:func:`group_median` of values that each stand for ``weights`` equal copies.

    Exactly what :func:`group_median` returns on the expanded values (``np.repeat(values,
    weights)``): per group, the values sorted, the elements at positions ``(n - 1) // 2`` and
    ``n // 2`` of the ``n`` copies found from the cumulative counts, ``(lo + hi) / 2``. NaN
    values (and zero weights) are left out; NaN where a group has none.

    >>> weighted_group_median([5.0, 1.0, 3.0, 2.0, 9.0], [1, 3, 1, 2, 2], [0, 0, 0, 2, 2], 3)
    array([1. , nan, 5.5])
    """
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.int64)
    g = np.asarray(groups, dtype=np.int64)
    ok = ~np.isnan(v) & (w > 0)
    v, w, g = v[ok], w[ok], g[ok]
    out = np.full(n_groups, np.nan)
    if v.size == 0:
        return out
    order = np.lexsort((v, g))
    sv, cum = v[order], np.cumsum(w[order])
    counts = np.bincount(g, weights=w, minlength=n_groups).astype(np.int64)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    has = counts > 0
    # the element holding copy p (0-based, over all groups) is the first whose cumulative
    # count exceeds p
    lo = sv[np.searchsorted(cum, (starts + (counts - 1) // 2)[has], side="right")]
    hi = sv[np.searchsorted(cum, (starts + counts // 2)[has], side="right")]
    out[has] = (lo + hi) / 2
    return out
