"""Truth harness on real multi-rank data: the DLRM 8-rank job and two_rank, rewritten.

``param_dlrm_v100_8rank`` holds every rank of one real job (no collective metadata, matched
by order). Metamorphic rewrites made from a random seed give it a known truth: a chosen rank
made 4–10 ms late before each collective (the others wait; later events move), clocks of a
4-rank "host" shifted by a random offset, kernels shortened. The verdict must follow the
rewrite. two_rank is the null set: two ranks of a 128-rank job, last at collectives by chance.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from conftest import SHARED_TRACES, require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metamorphic import make_late, scale_kernels, shift_clock

from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import LoadResult, load_paths

SLOW = ("straggler", "throttle")


@functools.cache
def _dlrm_loaded() -> LoadResult:
    return load_paths([SHARED_TRACES / "param_dlrm_v100_8rank"], workers=1)


@pytest.fixture
def dlrm() -> LoadResult:
    folder = SHARED_TRACES / "param_dlrm_v100_8rank"
    require(folder.is_dir(), f"real traces folder {folder}")
    return _dlrm_loaded()


def _analyze(base: LoadResult, table: Any, **options: Any) -> dict[str, Any]:
    return analyze(LoadResult(table, base.inputs, [], base.metrics), **options)


def _slow_targets(doc: dict[str, Any]) -> list[int]:
    return [f["evidence"]["rank"] for f in doc["findings"] if f["kind"] in SLOW]


def _late(seed: int) -> tuple[int, list[int]]:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    return rank, rng.integers(4_000_000, 10_000_001, size=8).tolist()


SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    print_blob=True,
)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_late_rank_is_first_and_only_straggler(dlrm: LoadResult, seed: int) -> None:
    rank, delays = _late(seed)
    doc = _analyze(dlrm, make_late(dlrm.table, rank, delays))
    top = doc["stragglers"][0]
    assert top["rank"] == rank
    # 4 ms late is not always last: at the first all-to-all the ranks' own arrivals differ by
    # up to 7.6 ms; the verdict rests on the test, not on a clean sweep
    assert top["collectives"] == 8
    assert top["last_arrivals"] > 3 * top["expected_last"]
    assert top["p_last"] < 0.01
    assert _slow_targets(doc) == [rank]
    finding = next(f for f in doc["findings"] if f["kind"] == "straggler")
    # the summary states only what the evidence holds
    ev = finding["evidence"]
    assert f"last at {ev['last_arrivals']} of {ev['collectives']} collectives" in finding["summary"]


# Fixed examples (derandomize): with kernels shortened to a third, the other ranks' own
# host-bound lateness can carry more of the waiting than the injected delay, and the verdict
# rightly needs the rank to cause most of it: measured 19963 of 20000 seeds named (the misses
# all at factors 0.30-0.41; benchmarks/truth_dlrm.py prints the rate, docs/performance.md)
@settings(SETTINGS, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_late_rank_survives_shorter_kernels(dlrm: LoadResult, seed: int) -> None:
    rank, delays = _late(seed)
    factor = float(np.random.default_rng(seed).uniform(0.3, 0.9))
    doc = _analyze(dlrm, scale_kernels(make_late(dlrm.table, rank, delays), factor))
    assert doc["stragglers"][0]["rank"] == rank
    assert _slow_targets(doc) == [rank]


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_host_offset_recovered_within_its_bound(dlrm: LoadResult, seed: int) -> None:
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(5_000_000, 2_000_000_000)) * (1 if rng.random() < 0.5 else -1)
    table = shift_clock(dlrm.table, [4, 5, 6, 7], offset)
    hosts = {r: ("A" if r < 4 else "B") for r in range(8)}
    doc = _analyze(dlrm, table, clock_of=hosts)
    for r in doc["ranks"]:
        if r["rank"] < 4:
            assert r["clock_offset_ns"] == 0.0
            continue
        assert r["clock_status"] == "applied"
        assert r["clock_bound_ns"] <= 5_000_000  # whole-µs data: well under 5 ms
        assert abs(r["clock_offset_ns"] - offset) <= r["clock_bound_ns"]
    # one correction for the host: its four ranks share it exactly
    assert len({r["clock_offset_ns"] for r in doc["ranks"] if r["rank"] >= 4}) == 1
    # and the verdicts of the unshifted job come back
    assert _slow_targets(doc) == _slow_targets(_analyze(dlrm, dlrm.table))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_late_rank_found_through_per_rank_clock_offsets(dlrm: LoadResult, seed: int) -> None:
    rank, delays = _late(seed)
    rng = np.random.default_rng(seed + 1)
    table = make_late(dlrm.table, rank, delays)
    truth = {0: 0}
    for r in range(1, 8):
        truth[r] = int(rng.integers(-3_000_000_000, 3_000_000_000))
        table = shift_clock(table, [r], truth[r])
    doc = _analyze(dlrm, table)
    for r in doc["ranks"]:
        if r["clock_status"] == "applied":
            assert abs(r["clock_offset_ns"] - truth[r["rank"]]) <= r["clock_bound_ns"]
        else:  # kept as recorded only where its own bound allows no decision
            assert abs(r["clock_offset_estimate_ns"]) <= (r["clock_bound_ns"] or float("inf"))
    assert doc["stragglers"][0]["rank"] == rank
    assert _slow_targets(doc) == [rank]


def test_dlrm_as_recorded_names_rank_seven_with_its_statistic(dlrm: LoadResult) -> None:
    # the data's own fact: rank 7 arrives last (5 of the 8 collectives, against 1 by chance)
    doc = _analyze(dlrm, dlrm.table)
    slow = [f for f in doc["findings"] if f["kind"] in SLOW]
    assert [f["evidence"]["rank"] for f in slow] == [7]
    ev = slow[0]["evidence"]
    assert (ev["last_arrivals"], ev["collectives"]) == (5, 8)
    assert ev["expected_last"] == pytest.approx(1.0)
    assert ev["p_last"] < 0.01
    assert doc["causality"]["repaired_events"] == 0


def test_two_rank_null_no_straggler_no_shift_no_repair() -> None:
    folder = SHARED_TRACES / "two_rank"
    require(folder.is_dir(), f"real traces folder {folder}")
    doc = analyze([folder], workers=1)
    assert not [f for f in doc["findings"] if f["kind"] in (*SLOW, "slow-link", "slow-nic")]
    for r in doc["ranks"]:
        bound = r["clock_bound_ns"]
        if r["clock_status"] == "applied":
            assert abs(r["clock_offset_ns"]) > bound
        else:
            assert r["clock_offset_ns"] == 0.0
    assert doc["causality"]["repaired_events"] == 0
    assert doc["critical_path"].get("straggler_what_if") is None
