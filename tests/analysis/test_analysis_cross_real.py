"""Multi-rank sets built from a real rank file: known clock offsets and an injected straggler.

Rank 0 of ``two_rank`` (a real PyTorch profiler trace with NCCL kernels) is copied into four
rank files. Each copy's clock is shifted by a known offset (whole microseconds, far larger than
the collectives, so the raw clocks violate causality). In one copy, before every
communication kernel, the compute kernel that precedes it runs longer by a known delay and
the communication kernel starts that much later (it arrives late) and ends at the same instant
as on the other ranks (a collective's members leave together). Ground truth is therefore
exact: offsets, the straggler, its lateness.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from otel_ext.analysis.engine import analyze

OFFSETS_US = [0, 250_000, -180_000, 90_000]
STRAGGLER = 2
DELAY_US = 1_500


def _is_comm(e: dict[str, Any]) -> bool:
    return e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()


def _build(shared_traces: Path, out: Path) -> list[int]:
    src = shared_traces / "two_rank" / "sampled_rank-0.json.gz"
    base = json.loads(gzip.decompress(src.read_bytes()))
    delays = []
    for rank, off in enumerate(OFFSETS_US):
        doc = json.loads(json.dumps(base))
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": 4}
        events = doc["traceEvents"]
        if rank == STRAGGLER:
            kernels = sorted(
                (e for e in events if e.get("cat") == "kernel" and not _is_comm(e)),
                key=lambda e: e["ts"] + e["dur"],
            )
            for comm in sorted((e for e in events if _is_comm(e)), key=lambda e: e["ts"]):
                d = min(DELAY_US, int(comm["dur"] // 2))
                before = [k for k in kernels if k["ts"] + k["dur"] <= comm["ts"]]
                if before:
                    before[-1]["dur"] += d
                comm["ts"] += d
                comm["dur"] -= d
                delays.append(d)
        for e in events:
            if isinstance(e.get("ts"), int | float):
                e["ts"] += off
        (out / f"rank{rank}.json").write_text(json.dumps(doc, separators=(",", ":")))
    return delays


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from conftest import SHARED_TRACES, require

    require(SHARED_TRACES.is_dir(), f"real traces folder {SHARED_TRACES}")
    out = tmp_path_factory.mktemp("ranks")
    delays = _build(SHARED_TRACES, out)
    assert delays and all(d > 0 for d in delays)
    result = analyze([out], workers=1, steps="all")  # every injected delay counted
    result["_delays"] = delays
    return result


def test_offsets_recovered(doc: dict[str, Any]) -> None:
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, off in enumerate(OFFSETS_US):
        est = by_rank[rank]["clock_offset_ns"]
        assert abs(est - off * 1000) <= 1_000, (rank, est, off)
        # the bound holds
        assert abs(est - off * 1000) <= by_rank[rank]["clock_bound_ns"] + 1


def test_causality_repaired(doc: dict[str, Any]) -> None:
    c = doc["causality"]
    assert c["violations_before"] > 0
    assert c["violations_after"] == 0


def test_straggler_found(doc: dict[str, Any]) -> None:
    top = doc["stragglers"][0]
    assert top["rank"] == STRAGGLER
    assert top["last_arrivals"] == len(doc["_delays"])
    # lateness against the median rank: exactly the injected delays
    assert top["late_ns"] == pytest.approx(sum(doc["_delays"]) * 1000, abs=len(doc["_delays"]))
    f = doc["findings"][0]
    assert f["kind"] == "straggler" and f["target"] == f"rank{STRAGGLER}/gpu0", doc["findings"][:2]
    assert f["impact_ns"] == pytest.approx(sum(doc["_delays"]) * 1000, abs=len(doc["_delays"]))


def test_collectives_waits_match_injection(doc: dict[str, Any]) -> None:
    coll = doc["collectives"]
    assert coll["count"] == len(doc["_delays"])
    for inst in coll["instances"]:
        assert inst["last_rank"] == STRAGGLER
        assert inst["n_ranks"] == 4


DAY_US = 86_400 * 10**6


def test_separate_runs_are_not_one_job(tmp_path: Path) -> None:
    """The same two rank files, one of them captured nine days later: two runs. Their
    collectives are not matched with each other (no clock offset of nine days, no causality
    repair, no straggler across runs), the report lists the runs and rates impact against
    their own spans."""
    from conftest import SHARED_TRACES, require

    require(SHARED_TRACES.is_dir(), f"real traces folder {SHARED_TRACES}")
    for rank, name in enumerate(["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]):
        doc = json.loads(gzip.decompress((SHARED_TRACES / "two_rank" / name).read_bytes()))
        for e in doc["traceEvents"]:
            if rank == 1 and isinstance(e.get("ts"), int | float):
                e["ts"] += 9 * DAY_US
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    together = analyze([SHARED_TRACES / "two_rank"], workers=1)
    apart = analyze([tmp_path], workers=1)
    assert [r["ranks"] for r in together["runs"]] == [[0, 1]]
    assert together["collectives"]["count"] > 0
    assert [r["ranks"] for r in apart["runs"]] == [[0], [1]]
    assert apart["collectives"]["count"] == 0
    assert all(r["clock_offset_ns"] == 0 for r in apart["ranks"])
    assert apart["causality"]["violations_before"] == 0
    assert apart["causality"]["method"] == "none"
    assert not [f for f in apart["findings"] if f["kind"] in ("straggler", "load-imbalance")]
    spans = sum(r["end_ns"] - r["start_ns"] for r in apart["runs"])
    assert apart["run"]["duration_ns"] == spans < 10 * 10**9
    # each rank's own numbers do not depend on the other's clock
    by_rank = {r["rank"]: r for r in together["temporal_breakdown"]}
    for r in apart["temporal_breakdown"]:
        assert r["idle_pct"] == by_rank[r["rank"]]["idle_pct"]


def test_real_a100_and_v100_files_are_two_runs() -> None:
    """``diff_a100_vs_v100``: an A100 and a V100 capture, nine days apart."""
    from conftest import SHARED_TRACES, require

    require(SHARED_TRACES.is_dir(), f"real traces folder {SHARED_TRACES}")
    doc = analyze([SHARED_TRACES / "diff_a100_vs_v100"], workers=1)
    assert [r["ranks"] for r in doc["runs"]] == [[3], [1]]
    assert doc["collectives"]["count"] == 0 and doc["causality"]["violations_after"] == 0
