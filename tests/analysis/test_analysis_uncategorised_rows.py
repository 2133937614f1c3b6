"""Rows of no category stay behind in the per-rank phase: the report is what keeping them gives.

No cross-rank pass reads a row of category ``OTHER`` (an old trace's host operators, an OTLP
run's engine steps and instant events); :func:`otel_ext.analysis.rank.per_rank.cross_rank_mask`
leaves them out but for each file and rank's first start and last end. Differential tests:
the whole analysis document with those rows left out against the same analysis with them
kept (the rule before), on random multi-rank tables (hypothesis) and on the real old trace
whose host operators are all of no category.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.engine import analyze, to_json
from otel_ext.analysis.rank import per_rank
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable

pytestmark = pytest.mark.slow

_KEEP = per_rank.cross_rank_mask


@contextmanager
def _uncategorised_kept() -> Iterator[None]:
    """The per-rank phase keeping every row of no category too (the rule before)."""

    def keep(table: EventTable) -> np.ndarray:
        return _KEEP(table) | (table["category"] == C.OTHER)

    with mock.patch.object(per_rank, "cross_rank_mask", keep):
        yield


def _both(source: Any) -> tuple[str, str, list[tuple[int, int, int]]]:
    """The document with the rows of no category left out and kept, and for each: the
    reduced rows, and the rows of no category and the files and ranks of the per-rank
    phase's table (the steps selected)."""
    counts: list[tuple[int, int, int]] = []
    tables = per_rank.per_rank_tables

    def counting(table: EventTable, **kw: Any) -> per_rank.RankTables:
        got = tables(table, **kw)
        other = int((table["category"] == C.OTHER).sum())
        files_ranks = len(set(zip(table["source"].tolist(), table["rank"].tolist())))
        counts.append((sum(len(t) for t in got.reduced), other, files_ranks))
        return got

    with mock.patch("otel_ext.analysis.per_rank_backend.per_rank_tables", counting):
        now = to_json(analyze(source, workers=1))
        with _uncategorised_kept():
            before = to_json(analyze(source, workers=1))
    return now, before, counts


_KINDS = [
    C.OTHER,
    C.OTHER,
    C.OTHER,
    C.CPU_OP,
    C.RUNTIME,
    C.KERNEL_COMPUTE,
    C.KERNEL_COMM,
    C.MEMCPY,
    C.STEP,
]


@st.composite
def run_tables(draw: Any) -> EventTable:
    """Two to four ranks in one or two files: kernels, launches, collectives (one sequence
    number per call, on every rank), steps, host operators, and rows of no category of
    any rank (none too) and at any time, some starting first or ending last."""
    n_ranks = draw(st.integers(2, 4))
    n_colls = draw(st.integers(0, 4))
    rows: list[dict[str, Any]] = []
    for r in range(n_ranks):
        src = f"/set/f{r % draw(st.integers(1, 2))}.json"
        skew = draw(st.integers(0, 3_000))
        t = skew
        for seq in range(n_colls):
            t += draw(st.integers(10, 2_000))
            d = draw(st.integers(5, 400))
            rows.append(dict(start_ns=t, end_ns=t + d, rank=r, category=C.KERNEL_COMM,
                             coll_seq=seq, coll_op="allreduce", stream=9, source=src,
                             name="ncclKernel_AllReduce"))  # fmt: skip
            t += d
        for _ in range(draw(st.integers(0, 16))):
            cat = draw(st.sampled_from(_KINDS))
            s = draw(st.integers(-2_000, t + 2_000))
            e = s + draw(st.integers(0, 1_500))
            corr = draw(st.integers(-1, 3))
            name = {
                C.STEP: f"ProfilerStep#{draw(st.integers(1, 3))}",
                C.RUNTIME: "cudaLaunchKernel",
            }
            rows.append(dict(start_ns=s, end_ns=e, category=cat, source=src,
                             rank=-1 if cat == C.OTHER and draw(st.booleans()) else r,
                             name=name.get(cat, draw(st.sampled_from(["aten::mm", "gemm", "x"]))),
                             stream=7 if cat in (C.KERNEL_COMPUTE, C.MEMCPY) else -1,
                             tid=1 if cat in (C.RUNTIME, C.CPU_OP, C.OTHER) else -1,
                             correlation=corr))  # fmt: skip
    rows.sort(key=lambda x: (x["source"], x["start_ns"]))
    return EventTable.from_rows(rows)


@settings(max_examples=60, deadline=None)
@given(run_tables())
def test_report_is_the_same_without_the_rows_of_no_category(table: EventTable) -> None:
    now, before, ((n_now, other, files_ranks), (n_before, *_)) = _both(table)
    assert now == before
    assert 0 <= n_before - n_now <= other
    # what is left of them: at most a first start and a last end per file and rank
    assert other - (n_before - n_now) <= 2 * files_ranks


def test_old_trace_operators_of_no_category_stay_behind(shared_traces: Path) -> None:
    """The 2021 TensorBoard-plugin trace names its host operators with no category: they no
    longer travel, and the report is the same."""
    folder = shared_traces / "kineto_tb_plugin_resnet50_v100_2021"
    now, before, ((n_now, *_), (n_before, *_)) = _both(folder)
    assert now == before
    assert n_now < 0.75 * n_before  # most of what travelled was those operators
