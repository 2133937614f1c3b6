"""``semconv coverage``: which derived metrics and analyses a set of base counters supports."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_ext.errors import InputError
from otel_ext.semconv.coverage import (
    ExposedCounter,
    compute_coverage,
    format_text,
    load_counters,
    report_to_json,
)
from otel_ext.semconv.registry import load_registry

REG = load_registry()
BASE = sorted(n for n, m in REG.metrics.items() if m.metric_class == "base")


def base_needs(metric: str) -> set[str]:
    m = REG.metrics[metric]
    return set(m.inputs.values()) if m.metric_class == "derived" else {metric}


exposures = st.dictionaries(
    st.sampled_from(BASE), st.one_of(st.none(), st.sampled_from([0.1, 1.0, 5.0, 30.0]))
)


@given(exposures)
def test_support_matches_a_direct_reading_of_the_registry(exposed: dict[str, float | None]) -> None:
    counters = [ExposedCounter(n, iv) for n, iv in exposed.items()]
    report = compute_coverage(counters, registry=REG)
    for d in report.derived:
        inputs = set(REG.metrics[d.name].inputs.values())
        assert d.supported is (inputs <= set(exposed))
        assert set(d.missing_counters) == inputs - set(exposed)
    for a in report.analyses:
        an = REG.analyses[a.name]
        needs = set().union(*(base_needs(r) for r in an.requires))
        too_slow = {
            c
            for c in needs & set(exposed)
            if an.max_interval_s is not None
            and exposed[c] is not None
            and exposed[c] > an.max_interval_s  # type: ignore[operator]
        }
        assert set(a.missing_counters) == needs - set(exposed)
        assert {c for c, _ in a.too_slow} == too_slow
        assert a.supported is (needs <= set(exposed) and not too_slow)
    for counter, users in report.needed.items():
        assert counter not in exposed
        assert all(counter in report.by_name(u).missing_counters for u in users)


@given(exposures, st.sampled_from(BASE))
def test_adding_a_counter_never_loses_support(exposed: dict, extra: str) -> None:
    before = compute_coverage([ExposedCounter(n, None) for n in exposed], registry=REG)
    after = compute_coverage([ExposedCounter(n, None) for n in {*exposed, extra}], registry=REG)
    was = {e.name for e in [*before.derived, *before.analyses] if e.supported}
    now = {e.name for e in [*after.derived, *after.analyses] if e.supported}
    assert was <= now


def test_everything_and_nothing() -> None:
    full = compute_coverage([ExposedCounter(n, 0.1) for n in BASE], registry=REG)
    assert all(e.supported for e in [*full.derived, *full.analyses])
    assert full.needed == {}
    empty = compute_coverage([], registry=REG)
    assert not any(e.supported for e in [*empty.derived, *empty.analyses])
    needed_by_derived = set().union(
        *(set(m.inputs.values()) for m in REG.metrics.values() if m.metric_class == "derived")
    )
    assert needed_by_derived <= set(empty.needed)
    assert "No base counter is missing." in format_text(full)


def test_device_spec_gaps_make_metrics_unsupported() -> None:
    counters = [ExposedCounter("accel.device.operations", 1.0)]
    v100 = compute_coverage(counters, registry=REG, device="V100-SXM2-32GB")  # no bf16 peak
    h100 = compute_coverage(counters, registry=REG, device="H100-SXM5-80GB")
    assert v100.by_name("accel.device.mfu").missing_spec == ("peak_flops_bf16",)
    assert not v100.by_name("accel.device.mfu").supported
    assert h100.by_name("accel.device.mfu").supported
    assert report_to_json(v100)["derived_metrics"][0].keys() == {
        "name",
        "supported",
        "missing_counters",
        "missing_spec",
        "interval_s",
    }


def test_load_counters_yaml_forms(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "device: H100-SXM5-80GB\n"
        "counters:\n"
        "  - {name: accel.device.cycles.active, interval_s: 0.25}\n"
        "  - {name: accel.device.cycles.elapsed, rate_hz: 4}\n"
        "  - hw.power\n",
        encoding="utf-8",
    )
    counters, device = load_counters(f, registry=REG)
    assert device == "H100-SXM5-80GB"
    assert counters == [
        ExposedCounter("accel.device.cycles.active", 0.25),
        ExposedCounter("accel.device.cycles.elapsed", 0.25),
        ExposedCounter("hw.power", None),
    ]
    g = tmp_path / "c.json"
    g.write_text('["hw.power"]', encoding="utf-8")
    assert load_counters(g, registry=REG) == ([ExposedCounter("hw.power", None)], None)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[{name: hw.power, interval_s: 1, rate_hz: 1}]", "not both"),
        ("[{interval_s: 1}]", "a counter is a metric name"),
        ("{device: H100-SXM5-80GB}", "expected a list of counters"),
        ("{counters: 3}", "'counters' must be a list"),
        ("[{name: hw.power, rate_hz: true}]", "must be a positive number"),
    ],
)
def test_load_counters_errors_name_file_and_record(
    tmp_path: Path, content: str, fragment: str
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=fragment) as info:
        load_counters(f, registry=REG)
    assert str(f) in str(info.value)
