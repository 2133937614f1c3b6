"""On the simulated cluster, with each fault kind: the top finding names the injected fault.

The analysis reads only the telemetry files (``traces.jsonl``, ``metrics.jsonl``); the truth
file is read here, by the test, for the assertions: the injected fault's kind and target, and
the ground truth of what it cost (the same seed simulated without the fault gives the
baseline: the workload, its arrivals and its jitter are the same).

Runs are small (2 or 3 hosts x 4 chips, 40 requests) and cached per test session, so each is
simulated and analysed once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_ext.analysis.engine import analyze
from otel_ext.analysis.findings.build import CAUSE_KINDS
from otel_ext.cli import main

_CACHE: dict[tuple[str, int, int], tuple[Path, dict[str, Any]]] = {}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``sim(fault, seed, hosts)`` -> (run folder, analysis document), cached."""

    def run(fault: str | None, seed: int, hosts: int = 2) -> tuple[Path, dict[str, Any]]:
        key = (fault or "none", seed, hosts)
        if key not in _CACHE:
            name = f"{key[0]}-{seed}-{hosts}".replace("/", "_").replace("@", "_")
            out = tmp_path_factory.mktemp(name) / "run"
            args = ["simulate", "--hosts", str(hosts), "--chips", "4", "--requests", "40",
                    "--seed", str(seed), "--out", str(out), "--quiet"]  # fmt: skip
            if fault:
                args += ["--fault", fault]
            assert main(args) == 0
            _CACHE[key] = (out, analyze([out], workers=1))
        return _CACHE[key]

    return run


def _truth(out: Path) -> dict[str, Any]:
    return json.loads((out / "truth.json").read_text())


def _causes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["kind"] in CAUSE_KINDS]


@pytest.mark.parametrize(
    ("fault", "seed", "hosts"),
    [
        ("straggler@host1/chip2", 3, 2),  # decode host
        ("straggler@host0/chip1", 5, 2),  # prefill host
        ("throttle@host0/chip3", 3, 2),  # prefill host: slower compute from part-way
        ("throttle@host1/chip2", 6, 2),  # decode host: memory-bound, the clock counter shows it
        ("slow-link@host0/chip1-chip2", 3, 2),  # prefill host: large all-reduces
        ("slow-link@host1/chip2-chip3", 5, 2),  # decode host: latency-dominated transfers
        ("slow-link@host0/chip0-chip3", 7, 2),  # the ring's closing link
        ("slow-nic@host0", 3, 3),  # a prefill host's port: only its own transfers are slow
        ("slow-nic@host2", 4, 3),  # the decode host's port: every transfer crosses it
        ("slow-nic@host1", 5, 3),
    ],
)
def test_top_finding_is_the_injected_fault(fault: str, seed: int, hosts: int, sim: Any) -> None:
    out, doc = sim(fault, seed, hosts)
    truth = _truth(out)["faults"][0]
    assert not any(
        Path(i["path"]).name == "truth.json" and i["status"] == "loaded" for i in doc["inputs"]
    )
    top = doc["findings"][0]
    assert (top["kind"], top["target"]) == (truth["kind"], truth["target"]), doc["findings"][:3]
    assert top["impact_ns"] > 0 and 0 < top["impact_pct"] < 100
    # the one injected fault is the only root cause reported
    assert [(f["kind"], f["target"]) for f in _causes(doc)] == [(top["kind"], top["target"])]
    if truth["kind"] == "slow-nic":
        assert top["evidence"]["ambiguous"] is False


@pytest.mark.parametrize(("seed", "hosts"), [(3, 2), (5, 2), (3, 3)])
def test_healthy_runs_have_no_root_cause(seed: int, hosts: int, sim: Any) -> None:
    _, doc = sim(None, seed, hosts)
    assert _causes(doc) == []
    assert not any(s["slow"] for s in doc["links"])
    assert not any(p["chosen"] for p in doc["ports"])


def _collective_ns(out: Path, host: str) -> int:
    return sum(c["end_ns"] - c["start_ns"] for c in _truth(out)["collectives"] if c["host"] == host)


@pytest.mark.parametrize(
    ("fault", "seed"), [("slow-link@host0/chip1-chip2", 3), ("slow-link@host1/chip2-chip3", 5)]
)
def test_slow_link_impact_against_ground_truth(fault: str, seed: int, sim: Any) -> None:
    """Impact = the time the host's all-reduces waited for the link, scaled from the traced
    steps to the run; truth: the host's true all-reduce time with the fault minus without."""
    out, doc = sim(fault, seed)
    base, _ = sim(None, seed)
    host = fault.split("@")[1].split("/")[0]
    true_extra = _collective_ns(out, host) - _collective_ns(base, host)
    top = doc["findings"][0]
    assert true_extra > 0
    assert 0.6 * true_extra <= top["impact_ns"] <= 1.5 * true_extra, (top["impact_ns"], true_extra)
    ev = top["evidence"]
    assert ev["basis"] == "same collective" and ev["slowest_share"] >= 0.9
    assert 0 < ev["sampled_fraction"] < 0.5  # one step in eight is traced
    assert "counters" in ev and ev["counters"]["series"]


def test_slow_nic_impact_against_ground_truth(sim: Any) -> None:
    """Impact = extra KV-transfer time beyond the healthy rate; truth: the requests' true
    KV-transfer time with the fault minus without."""
    out, doc = sim("slow-nic@host2", 4, 3)
    base, _ = sim(None, 4, 3)

    def kv(o: Path) -> int:
        return sum(r["kv_end_ns"] - r["kv_start_ns"] for r in _truth(o)["requests"])

    true_extra = kv(out) - kv(base)
    top = doc["findings"][0]
    assert 0.8 * true_extra <= top["impact_ns"] <= 1.25 * true_extra, (top["impact_ns"], true_extra)
    assert top["evidence"]["reference"] == "nominal"
    assert top["evidence"]["slowness"] > 5  # the port runs at a tenth of its bandwidth


@pytest.mark.parametrize("target", ["host0", "host1"])
def test_two_host_slow_nic_is_named_by_its_port_errors(target: str, sim: Any) -> None:
    """With two hosts every KV transfer crosses both ports (host0 -> host1), so the transfers
    alone cannot tell which port is slow; the degraded port's error counter (it retransmits)
    does, and the finding names it."""
    out, doc = sim(f"slow-nic@{target}", 3)
    top = doc["findings"][0]
    assert (top["kind"], top["target"]) == ("slow-nic", _truth(out)["faults"][0]["target"])
    assert top["evidence"]["ambiguous"] is False
    errors = top["evidence"]["resolved"]["errors"]
    assert errors[target] > 0 and all(v == 0 for h, v in errors.items() if h != target)
    assert len(_causes(doc)) == 1


@pytest.mark.parametrize("target", ["host0", "host1"])
def test_two_host_slow_nic_without_error_counters_is_marked_ambiguous(
    target: str, sim: Any
) -> None:
    """Without the ports' error counters nothing tells the two ports apart: the finding says
    so and lists both, rather than guess."""
    from otel_ext.analysis.loaders import LoadResult, load_paths
    from otel_ext.semconv.metrics import METRIC_HW_ERRORS

    out, _ = sim(f"slow-nic@{target}", 3)
    load = load_paths([out], workers=1)
    keep = ~load.metrics.where("name", METRIC_HW_ERRORS)
    doc = analyze(LoadResult(load.table, load.inputs, load.skipped, load.metrics.select(keep)))
    top = doc["findings"][0]
    assert top["kind"] == "slow-nic"
    assert top["evidence"]["ambiguous"] is True
    assert top["evidence"]["candidates"] == ["host0", "host1"]
    assert target in top["evidence"]["candidates"]
    assert len(_causes(doc)) == 1


@pytest.mark.parametrize("seed", [1, 2])
def test_short_healthy_run_on_two_chips_has_no_straggler(seed: int, tmp_path: Path) -> None:
    """With two chips one of them is always last; only a share of last arrivals beyond chance
    makes a straggler, so a short healthy run has none."""
    out = tmp_path / "run"
    rc = main(["simulate", "--hosts", "2", "--chips", "2", "--requests", "10", "--seed",
               str(seed), "--out", str(out)])  # fmt: skip
    assert rc == 0
    doc = analyze([out], workers=1)
    assert [f for f in doc["findings"] if f["kind"] in ("straggler", "throttle")] == []
