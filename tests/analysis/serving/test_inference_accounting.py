"""Per-request accelerator time and energy under continuous batching, against ground truth.

The simulated cluster emits one ``accel.engine.step`` span per engine step (the requests it
served and their tokens, its device time) and per-chip energy counters; it writes each
request's true device time and energy (its share of the arithmetic of every step that served
it) to ``truth.json``, which the analysis never reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.loaders.serving_inputs import engine_steps_from_otlp
from otel_ext.analysis.serving.requests import (
    EngineStep,
    engine_step_from_attributes,
    fit_token_costs,
    request_accounting,
    step_shares,
)
from otel_ext.errors import InputError
from otel_ext.instrumentation.inference import InferenceInstrumentation, RequestAccounting
from otel_ext.sim import SimConfig, run_simulation


def _relative_errors(out: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    steps = engine_steps_from_otlp([out / "traces.jsonl"])
    metrics = load_paths([out / "metrics.jsonl"]).metrics
    acc = request_accounting(steps, metrics=metrics, limit=10**6)
    truth = {r["id"]: r for r in json.loads((out / "truth.json").read_text())["requests"]}
    assert {r["request"] for r in acc["requests"]} == set(truth)
    t_err, e_err = [], []
    for r in acc["requests"]:
        t = truth[r["request"]]
        t_err.append(abs(r["accelerator_ms"] * 1e6 - t["accelerator_ns"]) / t["accelerator_ns"])
        e_err.append(abs(r["joules"] - t["energy_j"]) / t["energy_j"])
    return acc, np.asarray(t_err), np.asarray(e_err)


@pytest.mark.parametrize(
    "config",
    [
        SimConfig(requests=80, seed=3),  # disaggregated: prefill and decode on their own hosts
        SimConfig(hosts=1, requests=80, seed=4, mode="replicas"),  # mixed steps
    ],
    ids=["disaggregated", "replicas"],
)
def test_per_request_time_and_energy_match_the_simulation_truth(
    tmp_path: Path, config: SimConfig
) -> None:
    run_simulation(config, tmp_path, timeline=False)
    acc, t_err, e_err = _relative_errors(tmp_path)
    assert acc["conservation_max_error_pct"] < 1.0
    assert acc["energy_steps"] == acc["steps"] > 0
    assert float(np.percentile(t_err, 95)) <= 0.10, np.percentile(t_err, [50, 95])
    assert float(np.percentile(e_err, 95)) <= 0.10, np.percentile(e_err, [50, 95])
    s = acc["summary"]
    assert 0 < s["accelerator_ms_p50"] <= s["accelerator_ms_p99"]
    assert 0 < s["joules_p50"] <= s["joules_p99"]


def test_parts_add_up_to_each_steps_device_time(tmp_path: Path) -> None:
    """Conservation, recomputed here step by step from the shares."""
    run_simulation(SimConfig(requests=40, seed=5), tmp_path, timeline=False)
    steps = engine_steps_from_otlp([tmp_path / "traces.jsonl"])
    costs = fit_token_costs(steps)
    assert costs["fit"] == "least_squares"
    total = 0.0
    for s in steps:
        parts = step_shares(s, costs) * s.device_ns
        assert abs(parts.sum() - s.device_ns) <= 0.01 * s.device_ns
        total += s.device_ns
    acc = request_accounting(steps, limit=10**6)
    got = sum(r["accelerator_ms"] for r in acc["requests"]) * 1e6
    assert abs(got - total) <= 0.01 * total


@given(
    # integer costs: a step's device time (integer ns) is then exact, the steps noiseless (with
    # fractional costs the rounding to whole ns is noise, which tiny token counts amplify)
    st.integers(1, 10**6),
    st.integers(1, 10**6),
    st.integers(0, 10**8),
    st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 64)), min_size=6, max_size=40),
)
@settings(max_examples=60, deadline=None)
def test_token_costs_are_recovered_from_noiseless_steps(cp, cd, cs, tokens) -> None:
    tokens = [(p, d) for p, d in tokens if p + d > 0]
    x = np.asarray([[p, d, 1.0] for p, d in tokens])
    if len(tokens) < 3 or np.linalg.matrix_rank(x) < 3:
        return  # not identifiable: nothing to check
    steps = [
        EngineStep("h", i, 0, 1, cp * p + cd * d + cs, 1, ("r",), (p,), (d,))
        for i, (p, d) in enumerate(tokens)
    ]
    got = fit_token_costs(steps)
    scale = max(cp * 4096, cd * 64, cs, 1.0)
    assert abs(got["prefill_ns_per_token"] - cp) * 4096 <= 1e-3 * scale + 1
    assert abs(got["decode_ns_per_token"] - cd) * 64 <= 1e-3 * scale + 1


@given(
    st.lists(st.tuples(st.integers(0, 2048), st.integers(0, 1)), min_size=1, max_size=64),
    st.floats(0.0, 1e6),
    st.floats(0.0, 1e6),
    st.floats(0.0, 1e8),
)
def test_shares_sum_to_one_and_are_order_invariant(served, cp, cd, cs) -> None:
    ids = tuple(f"r{i}" for i in range(len(served)))
    s = EngineStep(
        "h", 0, 0, 1, 100, 1, ids, tuple(p for p, _ in served), tuple(d for _, d in served)
    )
    costs = {"prefill_ns_per_token": cp, "decode_ns_per_token": cd, "step_ns": cs}
    w = step_shares(s, costs)
    assert abs(w.sum() - 1.0) < 1e-9 and (w >= 0).all()
    rev = EngineStep("h", 0, 0, 1, 100, 1, ids[::-1], s.prefill_tokens[::-1], s.decode_tokens[::-1])
    assert np.allclose(step_shares(rev, costs)[::-1], w)


def test_misaligned_step_lists_are_a_clear_error() -> None:
    attrs = {
        "accel.engine.step.index": 9,
        "accel.engine.step.request_ids": ["a", "b"],
        "accel.engine.step.prefill_tokens": [3],
        "accel.engine.step.decode_tokens": [0, 1],
    }
    with pytest.raises(InputError, match="not aligned") as err:
        engine_step_from_attributes(attrs, start_ns=0, end_ns=1, where="traces.jsonl:7")
    assert "traces.jsonl:7" in str(err.value) and "step 9" in str(err.value)


def _sim_steps(tmp_path: Path) -> list[EngineStep]:
    run_simulation(SimConfig(hosts=1, requests=30, seed=8, mode="replicas"), tmp_path,
                   timeline=False)  # fmt: skip
    return engine_steps_from_otlp([tmp_path / "traces.jsonl"])


def test_online_accounting_equals_the_batch_split_with_the_same_costs(tmp_path: Path) -> None:
    """Streaming equals batch: fed the run's steps one at a time with the costs the analysis
    fitted, the online totals are the analysis's per-request totals."""
    steps = _sim_steps(tmp_path)
    costs = fit_token_costs(steps)
    acc = RequestAccounting(costs=costs)
    for s in steps:
        acc.step(list(zip(s.request_ids, s.prefill_tokens, s.decode_tokens)),
                 device_time_ns=s.device_ns)  # fmt: skip
    batch = request_accounting(steps, limit=10**6)
    for r in batch["requests"]:
        got = acc.pop(r["request"])
        assert got is not None and got[1] is None
        assert got[0] / 1e6 == pytest.approx(r["accelerator_ms"], rel=1e-9, abs=1e-6)


def test_online_accounting_conserves_each_step_and_ends_on_the_request_span(
    tmp_path: Path,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    steps = _sim_steps(tmp_path)
    acc = RequestAccounting()  # costs fitted online from the steps seen so far
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = InferenceInstrumentation(model="m", tracer_provider=provider, accounting=acc)
    ids = sorted({rid for s in steps for rid in s.request_ids})
    traces = {rid: inst.start_request(rid, input_tokens=1, start_time=0) for rid in ids}
    total_device = 0.0
    for s in steps:
        acc.step(list(zip(s.request_ids, s.prefill_tokens, s.decode_tokens)),
                 device_time_ns=s.device_ns, energy_j=s.device_ns * 1e-9)  # fmt: skip
        total_device += s.device_ns
    assert acc.costs()["prefill_ns_per_token"] > 0  # identifiable by now: mixed steps
    for rid in ids:
        traces[rid].finish(end_time=10)
    spans = {s.attributes["accel.request.id"]: s for s in exporter.get_finished_spans()}
    got = sum(s.attributes["accel.request.device_time_ns"] for s in spans.values())
    assert abs(got - total_device) <= 0.01 * total_device  # conserved (rounding per request)
    energy = sum(s.attributes["accel.request.energy"] for s in spans.values())
    assert energy == pytest.approx(total_device * 1e-9, rel=1e-9)


def test_online_accounting_never_raises_and_bounds_its_memory() -> None:
    acc = RequestAccounting(max_requests=2)
    acc.step([("a", 1, 0)], device_time_ns="not a number")  # type: ignore[arg-type]
    assert acc.dropped_steps == 1
    for rid in ("a", "b", "c"):
        acc.step([(rid, 0, 1)], device_time_ns=10)
    assert acc.dropped_requests == 1 and acc.pop("a") is None and acc.pop("c") == (10.0, None)


def test_simulated_request_spans_carry_their_online_device_time(tmp_path: Path) -> None:
    """The simulator keeps the accounting online as a serving process would: every request
    span ends with ``accel.request.device_time_ns``, within 10 % of the truth at p95."""
    from otel_ext.analysis.loaders.serving_inputs import read_serving_spans

    run_simulation(SimConfig(requests=40, seed=9), tmp_path, timeline=False)
    spans = [
        s for s in read_serving_spans([tmp_path / "traces.jsonl"]) if s.name == "accel.request"
    ]
    truth = {r["id"]: r for r in json.loads((tmp_path / "truth.json").read_text())["requests"]}
    assert len(spans) == len(truth) == 40
    err = [
        abs(
            s.attributes["accel.request.device_time_ns"]
            - truth[s.attributes["accel.request.id"]]["accelerator_ns"]
        )
        / truth[s.attributes["accel.request.id"]]["accelerator_ns"]
        for s in spans
    ]
    assert float(np.percentile(err, 95)) <= 0.10
