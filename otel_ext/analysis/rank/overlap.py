"""Communication/computation overlap and exposed communication, per rank.

``overlap_pct`` = time both merged communication and merged compute kernels are active ÷
merged communication time × 100 (HTA's ``comp_comm_overlap_pctg``, with communication
recognised by :mod:`otel_ext.analysis.classify`). ``exposed_comm_ns`` is the communication
time not hidden under compute: the time a perfect overlap would save.

>>> from otel_ext.analysis.table import Category, EventTable
>>> t = EventTable.from_rows([
...     dict(start_ns=0, end_ns=60, category=Category.KERNEL_COMPUTE, rank=0, stream=7),
...     dict(start_ns=40, end_ns=80, category=Category.KERNEL_COMM, rank=0, stream=9),
... ])
>>> r = comm_comp_overlap(t)[0]
>>> (r.comm_ns, r.overlap_ns, r.overlap_pct, r.exposed_comm_ns)
(40, 20, 50.0, 20)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from otel_ext.analysis.intervals import union_length
from otel_ext.analysis.rank.breakdown import device_mask, rank_groups
from otel_ext.analysis.table import Category, EventTable

__all__ = ["OverlapDict", "OverlapRow", "comm_comp_overlap"]


class OverlapDict(TypedDict):
    """An :class:`OverlapRow` as the report's JSON row."""

    rank: int
    source: str
    comm_ns: int
    compute_ns: int
    overlap_ns: int
    overlap_pct: float | None
    exposed_comm_ns: int
    exposed_comm_pct_of_window: float


@dataclass(frozen=True)
class OverlapRow:
    """Overlap of one rank; ``overlap_pct`` is None when the rank has no communication."""

    rank: int
    source: str
    comm_ns: int
    compute_ns: int
    overlap_ns: int
    overlap_pct: float | None
    exposed_comm_ns: int
    exposed_comm_pct_of_window: float

    def as_dict(self) -> OverlapDict:
        """The row as the report's JSON row (fields in order)."""
        return {
            "rank": self.rank,
            "source": self.source,
            "comm_ns": self.comm_ns,
            "compute_ns": self.compute_ns,
            "overlap_ns": self.overlap_ns,
            "overlap_pct": self.overlap_pct,
            "exposed_comm_ns": self.exposed_comm_ns,
            "exposed_comm_pct_of_window": self.exposed_comm_pct_of_window,
        }


def comm_comp_overlap(table: EventTable) -> list[OverlapRow]:
    """Overlap of communication with computation per rank (see the module docstring)."""
    start, end, cat = table["start_ns"], table["end_ns"], table["category"]
    out = []
    for rank, source, rows in rank_groups(table, device_mask(table), by_start=True):
        s, e, c = start[rows], end[rows], cat[rows]
        comm = c == Category.KERNEL_COMM
        comp = c == Category.KERNEL_COMPUTE
        comm_ns = union_length(s[comm], e[comm])
        comp_ns = union_length(s[comp], e[comp])
        # |A ∩ B| = |A| + |B| − |A ∪ B|; rows are in start order, so no union sorts anything
        both = comm | comp
        inter = comm_ns + comp_ns - union_length(s[both], e[both]) if comm_ns else 0
        window = int(e.max() - s.min())
        exposed = comm_ns - inter
        out.append(
            OverlapRow(
                rank=rank,
                source=source,
                comm_ns=comm_ns,
                compute_ns=comp_ns,
                overlap_ns=inter,
                overlap_pct=round(100.0 * inter / comm_ns, 4) if comm_ns else None,
                exposed_comm_ns=exposed,
                exposed_comm_pct_of_window=round(100.0 * exposed / window, 4) if window else 0.0,
            )
        )
    return out
