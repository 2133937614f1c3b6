"""Time to first token decomposed for disaggregated serving, against the simulation's truth.

A request's client-seen TTFT under prefill/decode disaggregation is queue → prefill → KV
transfer (on the prefill host) → decode queue → first decode step (on the decode host). Each
part is measured on the clock of the host that recorded it, so their sum is free of the hosts'
clock offset; ``truth.json`` holds the true arrival and the true time the client got its
first token.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from otel_ext.analysis.serving.requests import TTFT_PARTS, request_latency
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable
from otel_ext.sim import SimConfig, run_simulation


def _analysed(out: Path) -> tuple[list[dict], list[dict], dict]:
    from otel_ext.analysis.loaders import load_paths

    table = load_paths([out / "traces.jsonl"]).table
    doc = request_latency(table, limit=10**6)
    truth = json.loads((out / "truth.json").read_text())
    return doc["requests"], truth["requests"], doc


def test_parts_add_up_to_the_client_ttft_within_1_ms(tmp_path: Path) -> None:
    run_simulation(SimConfig(requests=60, seed=6), tmp_path, timeline=False)
    rows, truth, doc = _analysed(tmp_path)
    assert len(rows) == len(truth) == 60
    arrivals = np.asarray([t["arrival_ns"] for t in truth])
    offsets = json.loads((tmp_path / "truth.json").read_text())["clocks"]["hosts"]
    assert abs(offsets["host1"]["offset_ns"] - offsets["host0"]["offset_ns"]) > 1_000
    for r in rows:
        t = truth[int(np.argmin(np.abs(arrivals - r["start_ns"])))]
        assert list(r["ttft_parts_ns"]) == list(TTFT_PARTS)
        assert all(v >= 0 for v in r["ttft_parts_ns"].values())
        client = t["client_first_token_ns"] - t["arrival_ns"]
        assert abs(r["ttft_client_ns"] - client) <= 1_000_000, (r["request"], r["ttft_parts_ns"])
        # the parts on the prefill host end where the server-side TTFT ends
        assert r["ttft_parts_ns"]["queue"] + r["ttft_parts_ns"]["prefill"] == r["ttft_ns"]
    b = doc["ttft_breakdown"]
    assert b["requests"] == 60
    assert abs(sum(b["share_pct"].values()) - 100.0) < 1e-6


def test_one_engine_per_request_has_no_disaggregated_parts(tmp_path: Path) -> None:
    run_simulation(SimConfig(hosts=1, requests=20, seed=6, mode="replicas"), tmp_path,
                   timeline=False)  # fmt: skip
    rows, _, doc = _analysed(tmp_path)
    assert rows and all("ttft_parts_ns" not in r for r in rows)
    assert doc["ttft_breakdown"] is None


def test_parts_from_phase_rows() -> None:
    rows = [dict(start_ns=0, end_ns=100, category=C.REQUEST, trace_id="a", name="req")]
    bounds = [("queue", 0, 10), ("prefill", 10, 40), ("kv_transfer", 40, 45),
              ("decode_queue", 52, 60), ("first_decode_step", 60, 71), ("decode", 60, 100)]  # fmt: skip
    rows += [
        dict(start_ns=s, end_ns=e, category=C.PHASE, trace_id="a", name=n) for n, s, e in bounds
    ]
    (r,) = request_latency(EventTable.from_rows(rows))["requests"]
    assert r["ttft_parts_ns"] == {"queue": 10, "prefill": 30, "kv_transfer": 5,
                                  "decode_queue": 8, "first_decode_step": 11}  # fmt: skip
    assert r["ttft_client_ns"] == 64
    # the hand-over phases are not decode time
    assert (r["queue_ns"], r["prefill_ns"], r["decode_ns"]) == (10, 30, 40)
