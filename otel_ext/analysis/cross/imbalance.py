"""Load imbalance across ranks: ``max / mean − 1`` per step, per layer and for compute.

When ranks must meet at every collective, the slowest sets the pace: the imbalance is the
fraction of the mean rank's time that the slowest rank adds. 0 means perfectly balanced;
0.25 means the slowest rank took a quarter longer than the mean.

* per step: the (mean) duration of each step annotation (``ProfilerStep#N``, engine
  steps) on every rank that has it;
* per layer: the mean duration of each layer's spans on every rank (ranks may record
  different numbers of spans when steps are sampled);
* compute: the summed duration of compute kernels on every rank.

Ranks are compared only with the ranks they wait for: those that meet at collectives
(``groups``: rank -> peer-group id, e.g. the tensor-parallel group of one host). Ranks of
different groups may do very different work (a prefill host and a decode host), which is no
imbalance. Each row names its ``group`` (the lowest rank of the peer group; -1 when all
ranks are compared together).

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([dict(start_ns=0, end_ns=d, rank=r, category=C.STEP,
...     name="ProfilerStep#1") for r, d in [(0, 100), (1, 100), (2, 160)]])
>>> s = load_imbalance(t)["steps"][0]
>>> s["name"], s["imbalance"], s["max_rank"]
('ProfilerStep#1', 0.333333, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.significance import adjusted, binomial_upper_tail
from otel_ext.analysis.table import Category, EventTable

__all__ = [
    "ComputeImbalance",
    "ImbalanceRow",
    "LoadImbalance",
    "PersistenceTest",
    "imbalance_of",
    "load_imbalance",
    "persistence_test",
]


class ComputeImbalance(TypedDict):
    """The ranks of one peer group compared by their summed compute-kernel time."""

    ranks: int
    imbalance: float  # max / mean − 1
    max_rank: int
    max_ns: int
    mean_ns: int
    group: int  # the lowest rank of the peer group; -1: all ranks together


class ImbalanceRow(ComputeImbalance):
    """One step (or layer) name across the ranks of one peer group."""

    name: str


class PersistenceTest(TypedDict):
    """Whether one rank is the slowest in more of the rows than chance
    (:func:`persistence_test`)."""

    rank: int
    times_slowest: int
    rows: int
    expected: float
    p: float
    median_imbalance: float
    group: int


class SlowestRank(TypedDict):
    """What :func:`persistence_test` reads of a row: its group, how many ranks it compares
    and which was the slowest, by how much."""

    group: int
    ranks: int
    max_rank: int
    imbalance: float


class LoadImbalance(TypedDict):
    """:func:`load_imbalance`: the document's ``load_imbalance`` section."""

    steps: list[ImbalanceRow]
    layers: list[ImbalanceRow]
    compute: ComputeImbalance | None  # the most imbalanced peer group
    steps_test: PersistenceTest | None
    layers_test: PersistenceTest | None


def imbalance_of(values: np.ndarray) -> float:
    """``max / mean − 1`` (0 for an empty or all-zero input).

    >>> imbalance_of(np.array([1.0, 1.0, 2.0]))
    0.5
    """
    if len(values) == 0:
        return 0.0
    mean = float(np.mean(values))
    return round(float(np.max(values)) / mean - 1.0, 6) if mean > 0 else 0.0


def _group_codes(ranks: np.ndarray, groups: dict[int, int] | None) -> np.ndarray:
    if not groups:
        return np.full(len(ranks), -1, dtype=np.int64)
    lut = {int(r): int(g) for r, g in groups.items()}
    return np.asarray([lut.get(int(r), -2 - int(r)) for r in ranks.tolist()], dtype=np.int64)


def persistence_test(rows: Sequence[SlowestRank]) -> PersistenceTest | None:
    """Whether one rank is the slowest in more of the rows (steps or layers) than chance.

    Every step of a synchronous job has a slowest rank; an imbalance is a rank that is the
    slowest *persistently*. For each peer group, the rank that is slowest most often is
    tested against chance (``1/ranks`` per row, binomial, adjusted for the ranks it was
    picked from); the group with the smallest p-value is returned: ``rank``, ``times_slowest``,
    ``rows``, ``expected``, ``p``, ``median_imbalance`` (of that group's rows), ``group``.

    >>> rows = [dict(group=-1, ranks=4, max_rank=2, imbalance=0.2) for _ in range(8)]
    >>> t = persistence_test(rows)
    >>> t["rank"], t["times_slowest"], t["p"] < 0.001
    (2, 8, True)
    """
    if not rows:
        return None
    best: PersistenceTest | None = None
    by_group: dict[int, list[SlowestRank]] = {}
    for r in rows:
        by_group.setdefault(int(r["group"]), []).append(r)
    for g, rs in by_group.items():
        counts: dict[int, int] = {}
        for r in rs:
            counts[int(r["max_rank"])] = counts.get(int(r["max_rank"]), 0) + 1
        rank = min(counts, key=lambda k: (-counts[k], k))
        n_ranks = max(int(np.median([r["ranks"] for r in rs])), 2)
        n = len(rs)
        p0 = 1.0 / n_ranks
        p = float(adjusted(binomial_upper_tail([counts[rank]], [n], [p0]), n_ranks)[0])
        test: PersistenceTest = {
            "rank": rank,
            "times_slowest": counts[rank],
            "rows": n,
            "expected": round(n * p0, 4),
            "p": p,
            "median_imbalance": round(float(np.median([r["imbalance"] for r in rs])), 6),
            "group": g,
        }
        if best is None or p < best["p"]:
            best = test
    return best


def _per_name(
    table: EventTable, category: Category, *, limit: int, groups: dict[int, int] | None
) -> tuple[list[ImbalanceRow], PersistenceTest | None]:
    """The ``category`` rows' names compared across the ranks of each peer group: the
    ``limit`` most imbalanced, and :func:`persistence_test` over all of them."""
    sel = (table["category"] == category) & (table["rank"] >= 0)
    rows = np.flatnonzero(sel)
    if len(rows) == 0:
        return [], None
    ranks = table["rank"][rows].astype(np.int64)
    gcode = _group_codes(ranks, groups)
    out: list[ImbalanceRow] = []
    # each group's rows from one stable sort (a mask per group would be quadratic in them)
    order = np.argsort(gcode, kind="stable")
    sorted_g = gcode[order]
    bounds = np.flatnonzero(np.r_[True, sorted_g[1:] != sorted_g[:-1]])
    for b, e in zip(bounds.tolist(), np.r_[bounds[1:], len(order)].tolist()):
        g, pos = sorted_g[b], order[b:e]
        out.extend(_per_name_in(table, rows[pos], ranks[pos], int(g) if g >= -1 else -1))
    test = persistence_test(out)  # over every row, before the listing is cut
    out.sort(key=lambda x: -x["imbalance"])
    return out[:limit], test


def _per_name_in(
    table: EventTable, rows: np.ndarray, ranks: np.ndarray, group: int
) -> list[ImbalanceRow]:
    """The names of ``rows`` (one peer group's) that two ranks or more have: each rank's
    mean duration per span, compared."""
    names = table["name"][rows]
    dur = (table["end_ns"][rows] - table["start_ns"][rows]).astype(np.float64)
    key = np.stack([names.astype(np.int64), ranks], axis=1)
    ukey, inv = np.unique(key, axis=0, return_inverse=True)
    tot = np.zeros(len(ukey))
    np.add.at(tot, inv.reshape(-1), dur)
    # per span: ranks may record different numbers of spans of a layer (sampled steps)
    tot /= np.bincount(inv.reshape(-1), minlength=len(ukey))
    out: list[ImbalanceRow] = []
    bounds = np.flatnonzero(np.r_[True, ukey[1:, 0] != ukey[:-1, 0]])
    for b, e in zip(bounds, np.r_[bounds[1:], len(ukey)]):
        if e - b < 2:
            continue
        v = tot[b:e]
        k = int(np.argmax(v))
        out.append(
            {
                "name": table.strings["name"][int(ukey[b, 0])],
                "ranks": int(e - b),
                "imbalance": imbalance_of(v),
                "max_rank": int(ukey[b + k, 1]),
                "max_ns": int(v[k]),
                "mean_ns": int(np.mean(v)),
                "group": group,
            }
        )
    return out


def _compute_totals(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """The ranks with compute kernels (ascending) and each one's summed kernel time (float64,
    summed in row order)."""
    sel = (table["category"] == Category.KERNEL_COMPUTE) & (table["rank"] >= 0)
    if not sel.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    r = table["rank"][sel]
    d = (table["end_ns"] - table["start_ns"])[sel].astype(np.float64)
    ur, inv = np.unique(r, return_inverse=True)
    tot = np.zeros(len(ur))
    np.add.at(tot, inv.reshape(-1), d)
    return ur, tot


def _given_totals(totals: dict[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_compute_totals` from rank -> (summed ns, rows): ranks with no rows left out.

    The float64 sums of integer durations that the rows give are exact (below 2**53 ns, 104
    days, per rank), so they equal the exact integer sums converted once.
    """
    ranks = sorted(r for r, (_, n) in totals.items() if n > 0)
    return (
        np.array(ranks, dtype=np.int64),
        np.array([float(totals[r][0]) for r in ranks], dtype=np.float64),
    )


def load_imbalance(
    table: EventTable,
    *,
    limit: int = 50,
    groups: dict[int, int] | None = None,
    compute_totals: dict[int, tuple[int, int]] | None = None,
) -> LoadImbalance:
    """Per-step, per-layer and compute imbalance across ranks (within peer groups).

    Args:
        table: the (aligned) event table.
        limit: at most this many step and layer rows, most imbalanced first.
        groups: rank -> peer-group id (ranks that meet at collectives); None or empty
            compares all ranks together.
        compute_totals: rank -> (summed compute-kernel ns, kernel rows) when the caller has
            them (:meth:`~otel_ext.analysis.rank.compute_samples.ComputeSamples.rank_totals`);
            else the table's compute kernels are summed.

    Returns:
        ``{"steps": [...], "layers": [...], "compute": {...} | None, "steps_test",
        "layers_test"}``; each row has name, ranks, imbalance, max_rank, max_ns, mean_ns;
        the tests are :func:`persistence_test` over every step (layer) row, or None.
    """
    steps, steps_test = _per_name(table, Category.STEP, limit=limit, groups=groups)
    layers, layers_test = _per_name(table, Category.LAYER, limit=limit, groups=groups)
    if compute_totals is None:
        ur, tot = _compute_totals(table)
    else:
        ur, tot = _given_totals(compute_totals)
    return {
        "steps": steps,
        "layers": layers,
        "compute": _compute_imbalance(ur, tot, groups),
        "steps_test": steps_test,
        "layers_test": layers_test,
    }


def _compute_imbalance(
    ranks: np.ndarray, totals: np.ndarray, groups: dict[int, int] | None
) -> ComputeImbalance | None:
    """The most imbalanced peer group (of two ranks or more) by the ``ranks``' summed
    compute time ``totals``, or None."""
    if not len(ranks):
        return None
    compute: ComputeImbalance | None = None
    gcode = _group_codes(ranks, groups)
    for g in distinct(gcode):
        m = gcode == g
        if m.sum() < 2:
            continue
        k = int(np.argmax(np.where(m, totals, -np.inf)))
        row: ComputeImbalance = {
            "ranks": int(m.sum()),
            "imbalance": imbalance_of(totals[m]),
            "max_rank": int(ranks[k]),
            "max_ns": int(totals[k]),
            "mean_ns": int(totals[m].mean()),
            "group": int(g) if g >= -1 else -1,
        }
        if compute is None or row["imbalance"] > compute["imbalance"]:
            compute = row
    return compute
