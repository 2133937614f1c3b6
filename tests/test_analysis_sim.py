"""On the simulated cluster, with each fault kind: the top finding names the injected fault.

The analysis reads only the telemetry files (``traces.jsonl``, ``metrics.jsonl``); the truth
file is read here, by the test, for the assertion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_ext.analysis.engine import analyze
from otel_ext.cli import main

@pytest.mark.parametrize(
    "fault",
    [
        "straggler@host1/chip2",
        "throttle@host0/chip3",
        "slow-link@host0/chip1-chip2",
        "slow-nic@host1",
    ],
)
def test_top_finding_is_the_injected_fault(fault: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    rc = main(["simulate", "--hosts", "2", "--chips", "4", "--requests", "40", "--seed", "3",
               "--fault", fault, "--out", str(out)])  # fmt: skip
    assert rc == 0
    doc = analyze([out], workers=1)
    truth = json.loads((out / "truth.json").read_text())["faults"][0]
    assert not any(
        Path(i["path"]).name == "truth.json" and i["status"] == "loaded" for i in doc["inputs"]
    )
    top = doc["findings"][0]
    assert (top["kind"], top["target"]) == (truth["kind"], truth["target"]), doc["findings"][:3]
