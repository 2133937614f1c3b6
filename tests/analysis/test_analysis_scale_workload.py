"""The synthetic workload of ``benchmarks/analysis_scale.py`` is what its docs say it is.

The scaling figures in ``docs/performance.md`` are only comparable across sizes if every
rank does the same work and the table is well formed: these tests check the generator's
invariants at small sizes (the benchmark itself runs the large ones).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import numpy as np
import pytest
from conftest import REPO_ROOT

from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.engine import analyze
from otel_ext.analysis.table import Category

_PATH = REPO_ROOT / "benchmarks" / "analysis_scale.py"


@pytest.fixture(scope="module")
def scale() -> Any:
    spec = importlib.util.spec_from_file_location("analysis_scale", _PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("analysis_scale", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("ranks", [8, 24])
def test_same_rows_per_rank(scale: Any, ranks: int) -> None:
    t = scale.make_table(ranks, collectives=6, steps=3, kernels=4)
    per_rank = np.bincount(t["rank"])
    # steps + syncs + (compute kernels + all-reduces) x (CPU op, runtime, kernel)
    assert per_rank.tolist() == [3 + 3 + 3 * (3 * 4 + 6)] * ranks
    cat = t["category"]
    assert int((cat == Category.KERNEL_COMM).sum()) == 6 * ranks
    assert int((cat == Category.KERNEL_COMPUTE).sum()) == 12 * ranks
    assert int((cat == Category.STEP).sum()) == 3 * ranks


def test_every_kernel_has_its_launch(scale: Any) -> None:
    t = scale.make_table(16, collectives=4, steps=2, kernels=2)
    cat, src, corr = t["category"], t["source"], t["correlation"]
    dev = np.isin(cat, [Category.KERNEL_COMPUTE, Category.KERNEL_COMM])
    launch = cat == Category.RUNTIME
    keys = set(zip(src[launch].tolist(), corr[launch].tolist()))
    assert all(k in keys for k in zip(src[dev].tolist(), corr[dev].tolist()))
    # each launch ends before its kernel starts
    lk = {
        k: e for k, e in zip(zip(src[launch].tolist(), corr[launch].tolist()), t["end_ns"][launch])
    }
    starts = t["start_ns"][dev]
    ends = np.array([lk[k] for k in zip(src[dev].tolist(), corr[dev].tolist())])
    assert (ends < starts).all()


def test_host_thread_rows_nest(scale: Any) -> None:
    t = scale.make_table(16, collectives=4, steps=2, kernels=2)
    for r in (0, 9, 13):
        idx = np.flatnonzero((t["rank"] == r) & (t["tid"] >= 0))
        idx = idx[np.lexsort((-t["end_ns"][idx], t["start_ns"][idx]))]
        open_ends: list[int] = []
        for i in idx.tolist():
            s, e = int(t["start_ns"][i]), int(t["end_ns"][i])
            assert s < e
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            assert not open_ends or e <= open_ends[-1], f"rank {r} row {i} overlaps its parent"
            open_ends.append(e)


def test_collectives_leave_together_after_the_last_arrival(scale: Any) -> None:
    ranks = 24
    t = scale.make_table(ranks, collectives=6, steps=3, kernels=4)
    m = match_collectives(t)
    assert m.n_instances == 6
    assert m.n_ranks.tolist() == [ranks] * 6
    # on the true timeline (each host's offset removed) every member ends after the last
    # arrival, all within 2 us; the straggler arrives last everywhere
    host_off = np.asarray(t.meta["synthetic"]["host_offset_ns"])
    shift = host_off[m.member_rank // 8]
    start, end = m.member_start_ns - shift, m.member_end_ns - shift
    for k in range(m.n_instances):
        sel = m.member_instance == k
        assert end[sel].min() > start[sel].max()
        assert end[sel].max() - end[sel].min() <= 2_000
    assert m.last_rank.tolist() == [ranks - 3] * 6
    assert (np.abs(host_off) <= 5_000_000).all() and host_off[0] == 0


def test_analysis_names_the_straggler(scale: Any) -> None:
    ranks = 24
    doc = analyze(scale.make_table(ranks, collectives=20, steps=5, kernels=4))
    assert doc["stragglers"][0]["rank"] == ranks - 3
    assert any(f["kind"] == "straggler" for f in doc["findings"])


def test_chip_skew_moves_only_that_chips_times(scale: Any) -> None:
    a = scale.make_table(16, collectives=4, steps=2, kernels=2)
    b = scale.make_table(16, collectives=4, steps=2, kernels=2, chip_skew_ns=50_000)
    d = b["start_ns"] - a["start_ns"]
    for r in range(16):
        sel = a["rank"] == r
        assert len(np.unique(d[sel])) == 1  # one shift per chip, every row alike
        assert abs(int(d[sel][0])) <= 50_000
