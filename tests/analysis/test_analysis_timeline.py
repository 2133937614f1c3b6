"""The merged, clock-aligned timeline ``otel-ext analyze --format perfetto`` writes.

Checked on every file written here: valid trace-event JSON; every thread track nests (no
two events of one track overlap without one holding the other); no negative duration;
every flow has exactly one start and one end, each inside an event of its track. Round trip
through otel-ext's own Kineto loader (``load_kineto_text``): the rows come back at their
aligned times, names, categories and streams. Generated runs whose ranks' clocks are off by
drawn offsets (hypothesis): every event moved by its rank's reported offset. The repair's
rows at the repair's times, marked. On the real DLRM 8-rank set: collective flows across
ranks, the critical path and the findings. On the two-host harness (integration): host B's
events moved by exactly the offset the report gives.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import require, require_binary
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.alignment import align_ranks
from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.critical_path import critical_path
from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import load_kineto_text, load_paths, us_to_ns
from otel_ext.analysis.report.timeline import (
    CRITICAL_PATH_PID,
    FINDINGS_PID,
    TimelineFile,
    TimelineInputs,
    _Lanes,
    _us,
    write_timeline,
)
from otel_ext.analysis.table import Category as C
from otel_ext.analysis.table import EventTable

DLRM = "param_dlrm_v100_8rank"


# ------------------------------------------------------------------------------ helpers


def _read(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=str)  # the times' decimal text, as written


def _ns(ts: Any) -> int:
    """A written time (µs, decimal text) as integer nanoseconds."""
    return int(us_to_ns(str(ts)))


def _slices(trace: dict[str, Any]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    out: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            s, d = _ns(e["ts"]), _ns(e["dur"])
            out[(e["pid"], e["tid"])].append((s, s + d))
    return out


def check_well_formed(trace: dict[str, Any]) -> None:
    """Nesting per thread track, no negative duration, every flow paired and bound; process
    and thread ids as the trace processors read them (32-bit; a thread id that is some
    process's id would be read as that process's main thread)."""
    events = trace["traceEvents"]
    pids = {e["pid"] for e in events if "pid" in e}
    tids = {e["tid"] for e in events if "tid" in e}
    assert all(0 <= x < 2**32 for x in pids | tids)
    assert not pids & tids
    owner: dict[int, int] = {}
    for e in events:  # a thread belongs to one process
        if "tid" in e:
            assert owner.setdefault(e["tid"], e["pid"]) == e["pid"], e
    tracks = _slices(trace)
    for key, spans in tracks.items():
        stack: list[int] = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            assert e >= s, f"{key}: negative duration {s}..{e}"
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1], f"{key}: {s}..{e} overlaps an open event"
            stack.append(e)
    ends: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f", "t"):
            ends[(e["cat"], e["id"])].append(e)
    for key, pair in ends.items():
        assert sorted(p["ph"] for p in pair) == ["f", "s"], f"flow {key}: {pair}"
        for p in pair:
            ts = _ns(p["ts"])
            assert any(s <= ts <= e for s, e in tracks[(p["pid"], p["tid"])]), (
                f"flow {key}: no event of track {(p['pid'], p['tid'])} holds {ts}"
            )
    assert trace["otherData"]["generator"] == "otel-ext"


def _rank_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["pid"] not in (CRITICAL_PATH_PID, FINDINGS_PID)
    ]


def _flows(trace: dict[str, Any], cat: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    by_id: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f") and e["cat"] == cat:
            by_id[e["id"]][e["ph"]] = e
    return [(p["s"], p["f"]) for p in by_id.values()]


# ------------------------------------------------------------------- generated runs


def _run(offsets: list[int], seed: int, n_coll: int = 6) -> EventTable:
    """Ranks launching kernels and meeting at all-reduces; rank r's clock off by
    ``offsets[r]``; exits jittered a little."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    t0 = 1_700_000_000_000_000_000
    for r in range(len(offsets)):
        host = dev = 0
        for k in range(n_coll):
            corr = k + 1
            call = int(rng.integers(100, 400))
            rows.append(dict(start_ns=host, end_ns=host + call, category=C.RUNTIME, tid=11,
                             name="cudaLaunchKernel", correlation=corr, rank=r))  # fmt: skip
            dev = max(dev, host + call) + int(rng.integers(0, 300))
            dur = int(rng.integers(1_000, 8_000))
            rows.append(dict(start_ns=dev, end_ns=dev + dur, category=C.KERNEL_COMPUTE,
                             stream=7, name="gemm", correlation=corr, rank=r))  # fmt: skip
            dev += dur
            host += call + 50
            rows.append(dict(start_ns=dev, end_ns=dev, category=C.KERNEL_COMM, stream=9,
                             name="ncclAllReduce", coll_seq=k, coll_group="g",
                             coll_op="allreduce", rank=r))  # fmt: skip
            rows.append(dict(start_ns=host, end_ns=host + 40, category=C.CPU_OP, tid=11,
                             name="aten::add", rank=r))  # fmt: skip
            host += 60
    comm = [row for row in rows if row["category"] == C.KERNEL_COMM]
    for k in range(n_coll):
        members = [row for row in comm if row["coll_seq"] == k]
        leave = max(m["start_ns"] for m in members) + 2_000
        for m in members:
            m["end_ns"] = leave + int(rng.integers(0, 200))
    for row in rows:
        row["start_ns"] += t0 + offsets[row["rank"]]
        row["end_ns"] += t0 + offsets[row["rank"]]
        row["source"] = f"/run/rank{row['rank']}.json"
    return EventTable.from_rows(rows)


@settings(max_examples=25, deadline=None)
@given(
    offsets=st.lists(st.integers(-80_000_000, 80_000_000), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_every_event_moved_by_its_ranks_reported_offset(
    tmp_path_factory: pytest.TempPathFactory, offsets: list[int], seed: int
) -> None:
    table = _run([0, *offsets], seed)
    out = tmp_path_factory.mktemp("tl") / "timeline.json"
    doc = analyze(table, steps="all", timeline=TimelineFile(out))
    trace = _read(out)
    check_well_formed(trace)
    assert doc["timeline"]["events"] == len(table)
    base = int(trace["baseTimeNanoseconds"])
    for entry in doc["ranks"]:
        r = entry["rank"]
        assert entry["clock_drift_ppm"] == 0.0  # constant offsets: no drift to apply
        mine = table.select(np.flatnonzero(table["rank"] == r))
        got = sorted(  # before the event-level repair (its shifts are in the args)
            (
                e["name"],
                base + _ns(e["ts"]) - e["args"].get("repair_shift_ns", 0),
                base + _ns(e["ts"]) + _ns(e["dur"]) - e["args"].get("repair_end_shift_ns", 0),
            )
            for e in _rank_events(trace)
            if e["pid"] == r
        )
        off = round(entry["clock_offset_ns"])  # integers: 1.7e18 ns is beyond a float's ns
        want = sorted(
            (mine.string("name", i), int(mine["start_ns"][i]), int(mine["end_ns"][i]))
            for i in range(len(mine))
        )
        assert [g[0] for g in got] == [w[0] for w in want]
        for (_, gs, ge), (_, ws, we) in zip(got, want):
            assert abs(gs - (ws - off)) <= 1 and abs(ge - (we - off)) <= 1
        if entry["clock_status"] == "applied":  # the offset found is the one put in
            assert abs(off - offsets[r - 1]) <= 3_000


def test_round_trip_through_the_kineto_loader(tmp_path: Path) -> None:
    table = _run([0, 5_000_000, -3_000_000], seed=3)
    out = tmp_path / "timeline.json.gz"
    doc = analyze(table, steps="all", timeline=TimelineFile(out))
    trace = _read(out)
    check_well_formed(trace)
    text = gzip.decompress(out.read_bytes()).decode()
    back = load_kineto_text(text, path=str(out))
    # the rank rows come back (the critical path's segments are rows of no category)
    rows = back.select(np.flatnonzero(back["category"] != C.OTHER))
    assert len(rows) == len(table)
    base = int(trace["baseTimeNanoseconds"])
    category = {table.string("name", i): int(table["category"][i]) for i in range(len(table))}
    written = sorted(
        (e["name"], category[e["name"]], e["args"].get("stream", -1), base + _ns(e["ts"]),
         base + _ns(e["ts"]) + _ns(e["dur"]))
        for e in _rank_events(trace)
    )  # fmt: skip
    loaded = sorted(
        (rows.string("name", i), int(rows["category"][i]), int(rows["stream"][i]),
         int(rows["start_ns"][i]), int(rows["end_ns"][i]))
        for i in range(len(rows))
    )  # fmt: skip
    assert loaded == written
    # and the written rows are the analysed ones, moved (the offsets: the test above)
    assert sorted(w[:3] for w in written) == sorted(
        (table.string("name", i), int(table["category"][i]), int(table["stream"][i]))
        for i in range(len(table))
    )
    assert doc["timeline"]["events"] == len(table)
    # the launch flows join each launch to its kernel, one per correlation and rank
    launches = _flows(trace, "launch")
    assert len(launches) == int((table["category"] == C.KERNEL_COMPUTE).sum())
    # each collective's members chained across ranks: ranks - 1 flows per instance
    coll = _flows(trace, "collective")
    assert len(coll) == 6 * 2 and all(s["pid"] != f["pid"] for s, f in coll)
    assert all(_ns(s["ts"]) <= _ns(f["ts"]) for s, f in coll)  # in arrival order


def test_repaired_rows_at_the_repairs_times_and_marked(tmp_path: Path) -> None:
    """The event-level repair is rare on real data (see test_analysis_walk_split): its rows
    are drawn here, the aligned table taking the drawn times there."""
    table = _run([0, 2_000_000], seed=9)
    match = match_collectives(table)
    alignment = align_ranks(table, match)
    rng = np.random.default_rng(1)
    picked = np.sort(rng.choice(np.flatnonzero(table["category"] == C.KERNEL_COMM), 3, False))
    shift = np.array([700, 1_500, 90], dtype=np.int64)
    aligned = alignment.table
    start, end = aligned["start_ns"].copy(), aligned["end_ns"].copy()
    start[picked] += shift
    end[picked] += shift
    moved = EventTable({**aligned.columns, "start_ns": start, "end_ns": end}, aligned.strings)
    alignment = replace(alignment, table=moved, repaired_rows=picked)
    inputs = TimelineInputs(
        table, np.arange(len(table)), alignment, critical_path(moved, alignment.match), [], []
    )
    summary = write_timeline(inputs, tmp_path / "t.json")
    trace = _read(tmp_path / "t.json")
    check_well_formed(trace)
    assert summary["repaired_events"] == 3
    base = int(trace["baseTimeNanoseconds"])
    marked = sorted(
        (base + _ns(e["ts"]), e["args"]["repair_shift_ns"])
        for e in _rank_events(trace)
        if e["args"].get("repaired")
    )
    assert marked == sorted(zip(start[picked].tolist(), shift.tolist()))
    plain = sorted(
        base + _ns(e["ts"]) for e in _rank_events(trace) if not e["args"].get("repaired")
    )
    others = np.setdiff1d(np.arange(len(table)), picked)
    assert plain == sorted(aligned["start_ns"][others].tolist())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300)), max_size=60))
def test_lanes_nest_whatever_the_intervals(spans: list[tuple[int, int]]) -> None:
    lanes = _Lanes()
    placed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for s, d in sorted(spans, key=lambda x: (x[0], -x[1])):
        placed[lanes.place(s, s + d)].append((s, s + d))
    assert sum(len(v) for v in placed.values()) == len(spans)
    for lane in placed.values():
        check_well_formed(
            {
                "traceEvents": [
                    {"ph": "X", "pid": 0, "tid": 1, "ts": _us(s), "dur": _us(e - s)}
                    for s, e in lane
                ],
                "otherData": {"generator": "otel-ext"},
            }
        )


@given(st.integers(0, 10**18))  # relative to the base: up to 30 years
def test_written_times_read_back_to_the_nanosecond(ns: int) -> None:
    assert us_to_ns(_us(ns)) == ns


# ------------------------------------------------------------------ the real DLRM set


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    from conftest import SHARED_TRACES

    require((SHARED_TRACES / DLRM).is_dir(), f"real traces {SHARED_TRACES / DLRM}")
    out = tmp_path_factory.mktemp("dlrm") / "dlrm.timeline.json"
    doc = analyze(SHARED_TRACES / DLRM, timeline=TimelineFile(out))
    return doc, out


def test_dlrm_timeline(dlrm: tuple[dict[str, Any], Path]) -> None:
    doc, out = dlrm
    trace = _read(out)
    check_well_formed(trace)
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    for entry in doc["ranks"]:
        assert names[entry["rank"]].startswith(f"rank {entry['rank']}")
        assert entry["device"] in names[entry["rank"]]
    meta = {r["rank"]: r for r in trace["otherData"]["ranks"]}
    assert {r: m["clock_status"] for r, m in meta.items()} == {
        e["rank"]: e["clock_status"] for e in doc["ranks"]
    }
    # collectives: every matched instance's members chained across ranks
    coll = _flows(trace, "collective")
    per_instance = sum(s["n_ranks"] - 1 for s in doc["collectives"]["instances"])
    assert doc["collectives"]["count"] == len(doc["collectives"]["instances"])
    assert len(coll) == per_instance > 0
    assert all(s["pid"] != f["pid"] for s, f in coll)
    assert _flows(trace, "launch")
    # the critical path: every segment, flagged
    cp = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == CRITICAL_PATH_PID]
    assert len(cp) == doc["critical_path"]["segments_total"] > 0
    assert all(e["args"]["critical_path"] is True for e in cp)
    ranks_on_path = {e["args"]["rank"] for e in cp}
    assert len(_flows(trace, "critical_path")) >= len(ranks_on_path) - 1
    # the findings, each with its summary and statistic
    found = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert doc["findings"]
    assert [e["args"]["summary"] for e in found] == [f["summary"] for f in doc["findings"]]
    assert [e["args"]["statistic"] for e in found] == [
        json.loads(json.dumps(f["evidence"], default=str), parse_float=str) for f in doc["findings"]
    ]
    # every analysed row: the events the report counts
    assert trace["otherData"]["events"] == doc["run"]["events"] == len(_rank_events(trace))


def test_dlrm_timeline_in_a_folder_is_left_out(
    dlrm: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    from conftest import SHARED_TRACES

    doc, out = dlrm
    for p in (SHARED_TRACES / DLRM).iterdir():
        (tmp_path / p.name).symlink_to(p)
    (tmp_path / "merged.json").write_bytes(out.read_bytes())  # a name that says nothing
    load = load_paths([tmp_path])
    fmt = {Path(i["path"]).name: (i["format"], i["status"]) for i in load.inputs}
    assert fmt["merged.json"] == ("derived-timeline", "left out")
    assert len(load.table) == sum(i["events"] for i in doc["inputs"])


# --------------------------------------------------- the simulated cluster: counters


def test_simulated_run_counters_on_their_device_and_finding_at_its_onset(tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    got = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "simulate", "--requests", "20", "--quiet",
         "--fault", "throttle@host1/chip2", "--out", str(sim)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    out = tmp_path / "sim.timeline.json"
    doc = analyze(sim, timeline=TimelineFile(out))
    trace = _read(out)
    check_well_formed(trace)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == doc["timeline"]["counters"] > 0
    for entry in doc["ranks"]:  # each chip's counters on its rank's process
        names = {e["name"] for e in counters if e["pid"] == entry["rank"]}
        assert "accel.device.clock.frequency" in names, entry["device"]
    base = int(trace["baseTimeNanoseconds"])
    throttle = [f for f in doc["findings"] if f["kind"] == "throttle"]
    assert throttle and throttle[0]["target"] == "host1/chip2"
    [instant] = [e for e in trace["traceEvents"] if e["ph"] == "i" and "throttle" in e["name"]]
    assert base + _ns(instant["ts"]) == throttle[0]["evidence"]["clock_change_ns"]
    assert instant["args"]["summary"] == throttle[0]["summary"]


# ------------------------------------------------------------------------------- CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_perfetto_needs_out_and_html_links_the_timeline(tmp_path: Path) -> None:
    from conftest import SHARED_TRACES

    require((SHARED_TRACES / DLRM).is_dir(), f"real traces {SHARED_TRACES / DLRM}")
    bad = _cli(str(SHARED_TRACES / DLRM), "--format", "perfetto")
    assert bad.returncode == 2 and "--out" in bad.stderr and "Traceback" not in bad.stderr
    html, tl = tmp_path / "report.html", tmp_path / "tl" / "job.json.gz"
    tl.parent.mkdir()
    got = _cli(str(SHARED_TRACES / DLRM), "--format", "html", "--out", str(html),
               "--timeline", str(tl), "--quiet")  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert 'href="tl/job.json.gz"' in html.read_text()
    check_well_formed(_read(tl))


def test_cli_unwritable_timeline_is_one_line_naming_the_file(tmp_path: Path) -> None:
    from conftest import SHARED_TRACES

    require((SHARED_TRACES / DLRM).is_dir(), f"real traces {SHARED_TRACES / DLRM}")
    target = tmp_path / "no-such-folder" / "job.json"
    got = _cli(str(SHARED_TRACES / DLRM), "--format", "perfetto", "--out", str(target), "--quiet")
    assert got.returncode == 1
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and str(target) in lines[0] and "timeline" in lines[0], got.stderr
    assert "Traceback" not in got.stderr


def test_a_failed_write_leaves_no_file(tmp_path: Path) -> None:
    table = _run([0, 1_000_000], seed=4)
    out = tmp_path / "t.json"

    def findings_that_fail() -> Any:  # the writer fails part-way, after the ranks
        raise RuntimeError("boom")
        yield

    class Failing(TimelineFile):
        def __call__(self, inputs: TimelineInputs) -> dict[str, Any]:
            return super().__call__(replace(inputs, findings=findings_that_fail()))

    with pytest.raises(RuntimeError, match="boom"):
        analyze(table, timeline=Failing(out))
    assert list(tmp_path.iterdir()) == []


def test_parked_rows_are_gone_after_the_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import tempfile

    park = tmp_path / "park"
    park.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(park))
    seen: list[list[str]] = []

    class Watching(TimelineFile):
        def __call__(self, inputs: TimelineInputs) -> dict[str, Any]:
            seen.append(sorted(p.name for p in park.iterdir()))
            return super().__call__(inputs)

    analyze(_run([0, 1_000_000], seed=5), timeline=Watching(tmp_path / "t.json"))
    gc.collect()
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith("otel-ext-timeline-")
    assert list(park.iterdir()) == []


@pytest.mark.slow
def test_cli_perfetto_on_a_dask_cluster(tmp_path: Path) -> None:
    from conftest import SHARED_TRACES

    require((SHARED_TRACES / DLRM).is_dir(), f"real traces {SHARED_TRACES / DLRM}")
    require(importlib.util.find_spec("distributed") is not None, "dask distributed")
    out = tmp_path / "dask.json"
    got = _cli(str(SHARED_TRACES / DLRM), "--format", "perfetto", "--out", str(out),
               "--scheduler", "local:1", "--quiet")  # fmt: skip
    assert got.returncode == 0, got.stderr
    trace = _read(out)
    check_well_formed(trace)
    assert trace["otherData"]["complete"] is False  # host operators stay on the workers
    kernels = sum(e.get("cat") == "kernel" for e in _rank_events(trace))
    assert kernels == 2104  # every kernel of the set (as in process)
    assert len(_flows(trace, "collective")) > 0


# --------------------------------------------------------------- two hosts (integration)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_multihost_host_b_moved_by_the_reported_offset(tmp_path: Path) -> None:
    require(importlib.util.find_spec("torch") is not None, "torch (the test extra)")
    require_binary("faketime")
    from multihost_job import HOSTS, MultiHostRun, host_of, missing_parts, record_runs

    missing = missing_parts()
    require(not missing, "two emulated hosts: " + "; ".join(missing))
    run = MultiHostRun.draw("healthy", 29, steps=4)
    folder = record_runs(tmp_path, [run])[run.name] / "kineto"
    out = tmp_path / "job.json"
    doc = analyze(folder, steps="all", timeline=TimelineFile(out))
    trace = _read(out)
    check_well_formed(trace)
    raw = load_paths([folder]).table
    base = int(trace["baseTimeNanoseconds"])
    ranks = {e["rank"]: e for e in doc["ranks"]}
    on_b = [r for r in ranks if host_of(r) == HOSTS[1]]
    assert on_b and all(ranks[r]["clock_status"] == "applied" for r in on_b)
    for r, entry in ranks.items():
        off = entry["clock_offset_ns"] if r in on_b else 0.0
        if r in on_b:
            assert abs(off / 1e6 - run.offset_ms) < 5.0  # the real shift, within the job's
            assert entry["clock_drift_ppm"] == 0.0
        mine = np.sort(raw["start_ns"][raw["rank"] == r])
        written = np.sort(
            np.array(
                [
                    base + _ns(e["ts"]) - int(e["args"].get("repair_shift_ns", 0))
                    for e in _rank_events(trace)
                    if e["pid"] == r
                ],
                dtype=np.int64,
            )
        )
        assert len(written) == len(mine) > 0
        assert np.abs((mine - written) - off).max() <= 1.0, f"rank {r}"
    # the collectives' flows cross the hosts
    coll = _flows(trace, "collective")
    assert any(host_of(s["pid"]) != host_of(f["pid"]) for s, f in coll)
