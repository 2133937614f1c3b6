"""The analysis passes made linear in the ranks give the answers of their former forms.

Each pass that grew as the square of the cluster (a peer scan per chip, a device query per
request, a mask per link or per trace) now groups once; each test sets the new form against
the former computation, written out here as the reference, on a simulated run with faults
and on generated inputs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext._arrays import median
from otel_ext.analysis import collectives, counters, requests
from otel_ext.analysis.counters import correlate_counters, series_of
from otel_ext.analysis.loaders import MetricPoints, load_paths
from otel_ext.analysis.requests import _Coverage, engine_steps_from_otlp, request_latency
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category
from otel_ext.sim import SimConfig, parse_fault, run_simulation


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("sim")
    cfg = SimConfig(
        hosts=2,
        chips=4,
        requests=30,
        seed=5,
        faults=tuple(map(parse_fault, ("throttle@host1/chip2", "slow-link@host0/chip1-chip2"))),
    )
    run_simulation(cfg, out, timeline=False)
    return out, load_paths([out], workers=1)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _scan_peer_median(points: Any, name: str, column: str, value: str) -> float | None:
    """The reference: the peers' series medians, one series per peer, then their median."""
    nic = "nic" in value.rsplit("/", 1)[-1]
    peers = [p for p in points.strings[column] if p and p != value]
    if column == "link":
        peers = [p for p in peers if ("nic" in p.rsplit("/", 1)[-1]) == nic]
    meds = [float(median(v)) for p in peers if len(v := series_of(points, name, column, p)[1])]
    return float(median(meds)) if meds else None


def _targets(m: Any) -> list[str]:
    return [*m.strings["device"][1:], *m.strings["link"][1:], *sorted(set(m.strings["host"][1:]))]


def test_peer_medians_equal_the_scan_on_every_target(sim_run: tuple[Path, Any]) -> None:
    m = sim_run[1].metrics
    checked = 0
    for target in _targets(m):
        got = correlate_counters(m, target)
        column, value, _names = counters._target_column(m, target)
        for name, s in got["series"].items():
            ref = _scan_peer_median(m, name, column, value)
            assert _same(s["peer_median"], ref), (target, name)
            checked += s["peer_median"] is not None
        # the windowed path (the former loop, kept) over the whole run agrees too
        whole = correlate_counters(m, target, window=(0, 2**62))
        assert _same(got, whole)
    assert checked >= 30


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["hw.power", "accel.link.io"]),
            st.integers(0, 5),
            st.one_of(st.sampled_from([1.0, 2.0, 3.0, float("nan")]), st.floats(-9, 9)),
            st.sampled_from(["h0/chip0", "h0/chip1", "h1/chip0", "h1/chip1", "h1/chip2"]),
            st.sampled_from(["h0/chip0-chip1", "h0/nic0", "h1/nic0", "h1/chip1-chip2", ""]),
        ),
        max_size=50,
    )
)
def test_generated_peer_medians_equal_the_scan(rows: list[tuple[Any, ...]]) -> None:
    m = MetricPoints.from_rows(
        dict(name=n, kind="gauge", time_ns=t, value=v, device=d, link=ln) for n, t, v, d, ln in rows
    )
    for target in _targets(m):
        got = correlate_counters(m, target)
        column, value, _names = counters._target_column(m, target)
        for name, s in got["series"].items():
            ref = _scan_peer_median(m, name, column, value)
            assert _same(s["peer_median"], ref), (target, name)


@settings(max_examples=150, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=25),
    windows=st.lists(st.tuples(st.integers(-20, 260), st.integers(-20, 260)), max_size=25),
)
def test_coverage_queries_at_once_equal_one_at_a_time(
    spans: list[tuple[int, int]], windows: list[tuple[int, int]]
) -> None:
    start = np.asarray([s for s, _ in spans], dtype=np.int64)
    end = np.asarray([s + d for s, d in spans], dtype=np.int64)
    cov = _Coverage(start, end)
    a = np.asarray([x for x, _ in windows], dtype=np.int64)
    b = np.asarray([y for _, y in windows], dtype=np.int64)
    assert cov.within_many(a, b).tolist() == [cov.within(int(x), int(y)) for x, y in windows]


def test_request_devices_busy_equal_a_query_per_device(sim_run: tuple[Path, Any]) -> None:
    table = sim_run[1].table
    got = request_latency(table, limit=10**6)
    cat, dev = table["category"], table["device"]
    sel = np.isin(cat, [int(c) for c in DEVICE_CATEGORIES])
    covs = {
        table.strings["device"][int(c)] or "?": _Coverage(
            table["start_ns"][sel & (dev == c)], table["end_ns"][sel & (dev == c)]
        )
        for c in np.unique(dev[sel])
    }
    listed = [r for r in got["requests"] if r["ttft_ns"] is not None]
    assert len(listed) == got["count"] == 30
    for r in listed:
        a, b = r["start_ns"], r["start_ns"] + r["ttft_ns"]
        busy = {d: c.within(a, b) for d, c in sorted(covs.items())}
        assert r["ttft_devices_ns"] == {d: v for d, v in busy.items() if v > 0}
    assert any(r["ttft_devices_ns"] for r in listed)
    # the rows listed are the slowest first, whatever the limit
    few = request_latency(table, limit=5)["requests"]
    assert few == got["requests"][:5]


def test_engine_steps_lean_decoding_equals_the_generic_reading(
    sim_run: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = sim_run[0] / "traces.jsonl"
    # a line the lean structs do not fit (resourceSpans null) among the real ones, and a line
    # whose step has no resource: both read as before
    odd = tmp_path / "odd.jsonl"
    lines = traces.read_bytes().splitlines()
    doc = json.loads(next(ln for ln in lines if b"accel.engine.step" in ln))
    for rs in doc["resourceSpans"]:
        rs.pop("resource", None)
    odd.write_bytes(
        b"\n".join([b'{"resourceSpans": null, "x": "accel.engine.step"}', *lines[:3]])
        + b"\n"
        + json.dumps(doc).encode()
        + b"\n"
    )
    new = engine_steps_from_otlp([traces, odd])
    monkeypatch.setattr(requests, "_steps_of_line", requests._steps_of_line_generic)
    old = engine_steps_from_otlp([traces, odd])
    assert new == old
    assert len(new) > len(engine_steps_from_otlp([traces])) > 100


def test_link_peers_equal_a_mask_per_link(sim_run: tuple[Path, Any]) -> None:
    table = sim_run[1].table
    stats = collectives.link_stats(table)
    rows = np.flatnonzero(table["category"] == Category.LINK_TRANSFER)
    dev = table["device"][rows]
    inst, _group = collectives._instances(table, rows)
    same = [s for s in stats if s["basis"] == "same collective"]
    assert len(same) >= 4 and any(s["slow"] for s in same)
    for s in same:
        c = table.strings["device"].index(s["link"])
        m = dev == c
        ref = {int(dev[j]) for j in np.flatnonzero(np.isin(inst, inst[m & (inst >= 0)]))} - {c}
        assert s["peers"] == len(ref)
        assert s["transfers"] == int(m.sum())
