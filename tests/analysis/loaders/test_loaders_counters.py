"""Counter correlation grouped once (``otel_ext.analysis.cross.counter_evidence``): the same series and the
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

from otel_ext.analysis.cross import counter_evidence as counters
from otel_ext.analysis.cross.counter_evidence import correlate_counters, series_of
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
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", "2", "--chips", "4",
         "--requests", "20", "--fault", "throttle@host1/chip2", "--no-timeline", "--quiet",
         "--out", str(out)],
        check=True, timeout=300,
    )  # fmt: skip
    return Path(out)


@pytest.fixture(scope="module")
def sim_metrics(sim_run: Path) -> MetricPoints:
    return load_paths([sim_run / "metrics.jsonl"], workers=1).metrics


def test_the_read_metrics_alone_give_the_same_report(sim_run: Path) -> None:
    """Only the metrics an analysis reads travel from a cluster's workers (``READ_METRICS``):
    the report from them alone is the report from every point, counter evidence included."""
    from otel_ext.analysis.engine import analyze, to_json

    load = load_paths([sim_run], workers=1)
    whole = to_json(analyze(load, workers=1))
    every = load.metrics
    load.metrics = every.only_names(counters.READ_METRICS)
    assert 0 < len(load.metrics) < 0.5 * len(every)  # most points are of metrics not read
    assert load.metrics.total == len(every)
    doc = analyze(load, workers=1)
    assert to_json(doc) == whole
    assert any("counters" in f["evidence"] for f in doc["findings"])  # the throttled chip's
    assert doc["requests"]["accounting"]["energy_steps"] > 0  # from the energy counters


@settings(max_examples=80, deadline=None)
@given(
    parts=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["hw.power", "hw.energy", "accel.collective.io", "x"]),
                      st.sampled_from(["h0/chip0", "h0/chip1", ""]), st.integers(0, 9)),
            max_size=12,
        ),
        min_size=1, max_size=4,
    ),
    names=st.sets(st.sampled_from(["hw.power", "hw.energy", "x"])),
)  # fmt: skip
def test_points_left_out_are_counted_and_the_codes_kept(
    parts: list[list[tuple[str, str, int]]], names: set[str]
) -> None:
    """Each file's points of some metrics, joined: the points and codes of joining every
    point and then choosing, and every point counted."""
    files = [
        MetricPoints.from_rows(dict(name=n, device=d, time_ns=t) for n, d, t in rows)
        for rows in parts
    ]
    chosen = MetricPoints.concat([f.only_names(names) for f in files])
    ref = MetricPoints.concat(files)
    keep = np.isin(np.asarray([ref.string("name", i) for i in range(len(ref))]), list(names))
    assert chosen.total == len(ref) and len(chosen) == int(keep.sum())
    assert chosen.strings == ref.strings
    for column in ("name", "device"):
        assert chosen.codes[column].tolist() == ref.codes[column][keep].tolist()
    assert chosen.time_ns.tolist() == ref.time_ns[keep].tolist()


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
