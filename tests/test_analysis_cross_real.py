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
    result = analyze([out], workers=1)
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
