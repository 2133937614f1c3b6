"""Counter correlation grouped once (``otel_ext.analysis.counters``): the same series and the
same summaries as a scan per series, on a simulated run's counters and on generated points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis import counters
from otel_ext.analysis.counters import correlate_counters, series_of
from otel_ext.analysis.loaders import MetricPoints, load_paths


def _scan_series(points: Any, name: str, column: str, value: str) -> tuple[np.ndarray, np.ndarray]:
    """The reference: one boolean mask over every point per series (the former way)."""
    mask = points.where("name", name) & points.where(column, value)
    if not mask.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    t = points.time_ns[mask]
    v = points.values[mask]
    kinds = points.codes["kind"][mask]
    is_sum = points.strings["kind"][int(kinds[0])] == "sum"
    ut, inv = np.unique(t, return_inverse=True)
    agg = np.zeros(len(ut))
    np.add.at(agg, inv.reshape(-1), v)
    if is_sum and name not in counters._COUNTS:
        return counters._rate(ut, agg)
    return ut, agg


@pytest.fixture(scope="module")
def sim_metrics(tmp_path_factory: pytest.TempPathFactory) -> MetricPoints:
    out = tmp_path_factory.mktemp("sim")
    subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", "2", "--chips", "4",
         "--requests", "20", "--fault", "throttle@host1/chip2", "--no-timeline", "--quiet",
         "--out", str(out)],
        check=True, timeout=300,
    )  # fmt: skip
    return load_paths([Path(out) / "metrics.jsonl"], workers=1).metrics


def test_every_series_equals_the_scan(sim_metrics: MetricPoints) -> None:
    m = sim_metrics
    assert len(m) > 1000
    checked = 0
    for column in ("device", "link", "host"):
        for value in m.strings[column][1:]:
            for name in m.strings["name"][1:]:
                t, v = series_of(m, name, column, value)
                rt, rv = _scan_series(m, name, column, value)
                assert np.array_equal(t, rt) and np.array_equal(v, rv), (name, column, value)
                checked += len(t) > 0
    assert checked > 50


def test_correlation_equals_the_scan_on_every_target(
    sim_metrics: MetricPoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = sim_metrics
    targets = [d for d in m.strings["device"][1:]] + [x for x in m.strings["link"][1:]]
    targets += sorted({h for h in m.strings["host"][1:]})
    new = {t: correlate_counters(m, t, window=(0, 2**62)) for t in targets}
    monkeypatch.setattr(counters, "series_of", _scan_series)
    old = {t: correlate_counters(m, t, window=(0, 2**62)) for t in targets}
    assert new == old
    assert any(s.get("change_ns") for c in new.values() for s in c["series"].values())


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["accel.device.clock.frequency", "accel.link.io", "hw.errors"]),
            st.sampled_from(["gauge", "sum"]),
            st.integers(0, 6),
            st.floats(-1e6, 1e6, allow_nan=False),
            st.sampled_from(["h0/chip0", "h0/chip1", ""]),
            st.sampled_from(["a", "b"]),
        ),
        max_size=60,
    )
)
def test_generated_points_equal_the_scan(rows: list[tuple[Any, ...]]) -> None:
    m = MetricPoints.from_rows(
        dict(name=n, kind=k, time_ns=t, value=v, device=d, attrs=a) for n, k, t, v, d, a in rows
    )
    for name in m.strings["name"][1:]:
        for dev in m.strings["device"][1:]:
            t, v = series_of(m, name, "device", dev)
            rt, rv = _scan_series(m, name, "device", dev)
            assert np.array_equal(t, rt) and np.array_equal(v, rv)
