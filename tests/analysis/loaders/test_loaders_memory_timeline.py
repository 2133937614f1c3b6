"""PyTorch memory-timeline exports: read, summed up in the report's memory section, and the
``memory-near-capacity`` finding when the device's capacity is known.

The real export (``../shared/traces/other-formats/pytorch_memory_timeline``) is recognised by
content and its peak reported; generated timelines check the peak against a direct replay of
the events (a property test), streaming against whole reading, the coalesced export, bad
events named, and the finding's threshold on both sides.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SHARED_TRACES, require
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import detect_format, load_paths
from otel_ext.analysis.loaders._common import LoadContext
from otel_ext.analysis.loaders.memory_timeline import CATEGORIES, load_memory_timeline_pieces
from otel_ext.analysis.rank.memory import NEAR_CAPACITY, memory_findings, memory_section
from otel_ext.analysis.report.html import render_html
from otel_ext.analysis.report.text import render_text
from otel_ext.errors import InputError

FOLDER = SHARED_TRACES.parent / "other-formats" / "pytorch_memory_timeline"


def _timeline(events: list[list[int]], *, piece: int = 1 << 20, keep_going: bool = False) -> Any:
    data = json.dumps(events).encode()
    ctx = LoadContext("m.raw.json", keep_going=keep_going)
    pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
    return load_memory_timeline_pieces(pieces, ctx=ctx).meta["memory"], ctx


@st.composite
def _raw_events(draw: Any) -> list[list[int]]:
    """A valid raw export: tensors created (or pre-existing) and later destroyed."""
    n = draw(st.integers(1, 40))
    out: list[list[int]] = []
    live: list[tuple[int, int]] = []
    t = 1_000
    for _ in range(n):
        t += draw(st.integers(0, 5_000))
        if live and draw(st.booleans()):
            size, cat = live.pop(draw(st.integers(0, len(live) - 1)))
            out.append([t, 4, -size, cat])
        else:
            size, cat = draw(st.integers(1, 2**34)), draw(st.integers(0, 7))
            pre = not out and draw(st.booleans())
            out.append([-1 if pre else t, 1 if pre else 2, size, cat])
            live.append((size, cat))
    return out


def _replay_peak(events: list[list[int]]) -> int:
    """The peak by a plain replay: bytes held after the last event of each time."""
    real = [e[0] for e in events if e[0] >= 0]
    t0 = min(real) if real else 0
    held, peak = 0, 0
    timed = sorted(((t0 if e[0] < 0 else e[0]), k, e[2]) for k, e in enumerate(events))
    for k, (t, _, b) in enumerate(timed):
        held += b
        if k + 1 == len(timed) or timed[k + 1][0] != t:
            peak = max(peak, held)
    return peak


@settings(max_examples=80, deadline=None)
@given(events=_raw_events(), piece=st.integers(1, 300))
def test_the_peak_is_the_replayed_peak_in_pieces_of_any_size(
    events: list[list[int]], piece: int
) -> None:
    m, _ = _timeline(events, piece=piece)
    assert m.peak_bytes() == _replay_peak(events)
    whole, _ = _timeline(events)
    assert np.array_equal(m.times_ns, whole.times_ns) and np.array_equal(m.held, whole.held)
    assert (np.diff(m.times_ns) > 0).all()
    s = m.summary(bins=7)
    assert max(s["series"]["peak_bytes"]) == s["peak_bytes"]
    assert sum(s["peak_by_category"].values()) == s["peak_bytes"]


@settings(max_examples=40, deadline=None)
@given(events=_raw_events(), shift=st.integers(0, 2**50))
def test_a_clock_shift_moves_the_peak_time_only(events: list[list[int]], shift: int) -> None:
    assume(any(e[0] >= 0 for e in events))  # only pre-existing memory: no clock to shift
    moved = [[t + shift if t >= 0 else t, a, b, c] for t, a, b, c in events]
    a, b = _timeline(events)[0].summary(), _timeline(moved)[0].summary()
    assert (a["peak_bytes"], a["peak_by_category"]) == (b["peak_bytes"], b["peak_by_category"])
    assert b["peak_ns"] - a["peak_ns"] == shift


def test_categories_and_versions() -> None:
    events = [
        [-1, 1, 100, 0],  # a parameter, there before profiling
        [10, 2, 50, 4],  # an activation
        [20, 3, -50, 4],  # ... incremented: its old version's bytes leave activation
        [20, 3, 50, 5],  # ... and its new version is a gradient
        [30, 2, 8, 3],
        [40, 4, -8, 3],
    ]
    m, ctx = _timeline(events)
    assert not ctx.skipped
    s = m.summary()
    assert (s["peak_bytes"], s["peak_ns"], s["final_bytes"]) == (158, 30, 150)
    assert s["peak_by_category"] == {"parameter": 100, "temporary": 8, "gradient": 50}
    assert s["max_by_category"] == {"parameter": 100, "temporary": 8, "activation": 50,
                                    "gradient": 50}  # fmt: skip
    assert m.times_ns.tolist() == [10, 20, 30, 40]  # the pre-existing at the first time


def test_the_coalesced_export_reads_the_same() -> None:
    times = [5, 6, 9]
    sizes = [[0, 100, 0, 0, 0, 0, 0, 0, 0], [0, 100, 0, 0, 0, 70, 0, 0, 0],
             [0, 100, 0, 0, 0, 20, 0, 0, 0]]  # fmt: skip
    data = json.dumps([times, sizes]).encode()
    m = load_memory_timeline_pieces([data], ctx=LoadContext("m.json")).meta["memory"]
    assert (m.kind, m.peak_bytes(), m.times_ns.tolist()) == ("coalesced", 170, [5000, 6000, 9000])


@pytest.mark.parametrize(
    ("events", "record", "problem"),
    [
        ([[1, 2, 5, 0], [2, 9, 5, 0]], "event 1", "unknown action"),
        ([[1, 2, 5, 0], [2, 2, 5, 8]], "event 1", "unknown category"),
        ([[1, 2, 5, 0], [2, 2, 5]], "event 1", "[time_ns, action, bytes, category]"),
        ([[1, 2, 5, 0], [2, 2, "5", 0]], "event 1", "[time_ns, action, bytes, category]"),
        ([[1, 2, 5, 0], [2, 4, 5, 0]], "event 1", "wrong sign"),
        ([[1, 2, 5, 0], [-7, 2, 5, 0]], "event 1", "time out of range"),
    ],
)
def test_a_bad_event_is_named_and_skipped_with_keep_going(
    events: list[list[Any]], record: str, problem: str
) -> None:
    with pytest.raises(InputError) as e:
        _timeline(events)
    assert (e.value.path, e.value.record) == ("m.raw.json", record)
    assert problem in e.value.message
    m, ctx = _timeline(events, keep_going=True)
    assert [s.record for s in ctx.skipped] == [record]
    assert m.peak_bytes() == 5


def test_every_truncation_is_a_named_error() -> None:
    data = json.dumps([[-1, 1, 512, 0], [1000, 2, 4096, 4], [2500, 4, -4096, 4]]).encode()
    for cut in range(1, len(data)):
        with pytest.raises(InputError) as e:
            load_memory_timeline_pieces([data[:cut]], ctx=LoadContext("m.raw.json"))
        assert e.value.path == "m.raw.json" and e.value.record


def test_recognised_by_content(tmp_path: Path) -> None:
    raw = "[[-1, 1, 37888, 7], [-1, 1, 512, 7]]"
    assert detect_format("anything.json", raw) == "memory-timeline"
    assert detect_format("x.json", "[[0, 10], [[0, 1, 2, 3, 4, 5, 6, 7, 8]]]") == "memory-timeline"
    assert detect_format("x.json", '[{"a": 1}]') == "unknown"
    f = tmp_path / "trace.json.gz"
    f.write_bytes(gzip.compress(raw.encode()))
    r = load_paths([f], workers=1)
    assert [(i["format"], i["status"], i["memory"]["peak_bytes"]) for i in r.inputs] == [
        ("memory-timeline", "loaded", 38400)
    ]
    assert len(r.table) == 0  # no rows: the timeline is not events


def _section(peak: int, capacity: float | None) -> dict[str, Any] | None:
    brief = {"peak_bytes": peak, "peak_ns": 1, "peak_by_category": {"activation": peak}}
    return memory_section([{"path": "m", "memory": brief}], capacity_bytes=capacity,
                          capacity_source="device model X")  # fmt: skip


def test_the_finding_at_the_threshold_and_below() -> None:
    cap = 32e9
    at = int(NEAR_CAPACITY * cap) + 1
    (f,) = memory_findings(_section(at, cap))
    assert f.kind == "memory-near-capacity" and f.impact_ns == 0
    assert f.evidence["peak_bytes"] == at and f.evidence["capacity_bytes"] == int(cap)
    assert f.evidence["peak_share"] >= NEAR_CAPACITY
    assert memory_findings(_section(int(NEAR_CAPACITY * cap) - 10**6, cap)) == []
    assert memory_findings(_section(at, None)) == []  # capacity unknown: no claim


def test_the_finding_from_the_device_model_end_to_end(tmp_path: Path) -> None:
    """V100-SXM2-32GB from the registry: a 30 GB peak (93.75 %) is a finding, 20 GB is not."""
    for peak, expect in ((30 * 10**9, ["memory-near-capacity"]), (20 * 10**9, [])):
        f = tmp_path / f"m{peak}.raw.json"
        f.write_text(json.dumps([[-1, 1, 10**9, 0], [5, 2, peak - 10**9, 4], [9, 4, -5, 4]]))
        doc = analyze([f], workers=1, device_model="V100-SXM2-32GB")
        assert [x["kind"] for x in doc["findings"] if x["kind"].startswith("memory")] == expect
        t = doc["memory"]["timelines"][0]
        assert (t["peak_bytes"], t["capacity_bytes"]) == (peak, 32 * 10**9)
        assert doc["memory"]["capacity_source"] == "device model V100-SXM2-32GB"
        assert "memory" not in doc["inputs"][0]  # moved into the section, not repeated


@pytest.fixture(scope="module")
def real_file() -> Path:
    require(FOLDER.is_dir(), f"memory timeline folder {FOLDER}")
    return next(FOLDER.glob("*.json.gz"))


def test_the_real_timeline_in_the_report(real_file: Path) -> None:
    events = json.loads(gzip.decompress(real_file.read_bytes()))
    doc = analyze([real_file.parent], workers=1)
    (t,) = doc["memory"]["timelines"]
    assert t["events"] == len(events) == 16_845
    assert t["peak_bytes"] == _replay_peak(events) == 3_082_832_104
    assert max(t["peak_by_category"], key=t["peak_by_category"].get) == "activation"
    assert set(t["peak_by_category"]) <= set(CATEGORIES)
    assert (
        len(t["series"]["peak_bytes"]) == 60 and max(t["series"]["peak_bytes"]) == t["peak_bytes"]
    )
    assert doc["memory"]["capacity_bytes"] is None  # the file does not say the device
    assert "peak 2.87 GiB" in render_text(doc)
    assert "<h2>Memory</h2>" in render_html(doc)


_HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=5), st.just([]), st.just({}), st.just([[1, 2, 3, 4]]),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(events=_raw_events(), pick=st.integers(min_value=0), value=_HOSTILE, whole=st.booleans())
def test_one_hostile_value_is_an_input_error_naming_its_event(
    events: list[list[Any]], pick: int, value: Any, whole: bool
) -> None:
    """An event (or one of its fields) replaced by a value of another kind: an InputError
    naming the file and that event, or a load; with keep_going never raised, and every other
    event kept."""
    k = pick % len(events)
    bad = [list(e) for e in events]
    if whole:
        bad[k] = value
    else:
        bad[k][pick % 4] = value
    try:
        _timeline(bad)
    except InputError as e:
        assert e.path == "m.raw.json" and e.record in (f"event {k}", "file")
    m, ctx = _timeline(bad, keep_going=True)
    kept = [e for i, e in enumerate(bad) if i != k] if ctx.skipped else bad
    if ctx.skipped:
        assert [s.record for s in ctx.skipped] == [f"event {k}"]
    assert m.events == len(bad) and len(kept) >= len(bad) - 1
