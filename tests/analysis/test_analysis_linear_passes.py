"""The analysis passes made linear in the ranks give the answers of the direct computation.

Each pass that grew as the square of the cluster (a peer scan per chip, a device query per
request, a mask per link or per trace) now groups once; each test sets it against the direct
computation, one pass, mask or test per item, written out here and named for what it does,
on a simulated run with faults and on generated inputs.
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
from otel_ext.analysis.cross import collective_match as collectives
from otel_ext.analysis.cross import counter_evidence as counters
from otel_ext.analysis.cross import link_stats as links
from otel_ext.analysis.cross.counter_evidence import correlate_counters, series_of
from otel_ext.analysis.loaders import MetricPoints, load_paths, serving_inputs
from otel_ext.analysis.loaders.serving_inputs import engine_steps_from_otlp
from otel_ext.analysis.loaders.spans import otlp_attrs, otlp_value
from otel_ext.analysis.serving import engine_telemetry as serving
from otel_ext.analysis.serving import requests
from otel_ext.analysis.serving.requests import _Coverage, request_latency
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable
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
    # the reference: every line read by json, every attribute by the loaders' otlp_attrs
    monkeypatch.setattr(serving_inputs, "engine_steps_of_line", requests._steps_of_line_generic)
    monkeypatch.setattr(requests, "_step_attrs", otlp_attrs)
    old = engine_steps_from_otlp([traces, odd])
    assert new == old
    assert len(new) > len(engine_steps_from_otlp([traces])) > 100


def test_link_peers_equal_a_mask_per_link(sim_run: tuple[Path, Any]) -> None:
    table = sim_run[1].table
    stats = links.link_stats(table)
    rows = np.flatnonzero(table["category"] == Category.LINK_TRANSFER)
    dev = table["device"][rows]
    inst, _group = links._instances(table, rows)
    same = [s for s in stats if s["basis"] == "same collective"]
    assert len(same) >= 4 and any(s["slow"] for s in same)
    for s in same:
        c = table.strings["device"].index(s["link"])
        m = dev == c
        ref = {int(dev[j]) for j in np.flatnonzero(np.isin(inst, inst[m & (inst >= 0)]))} - {c}
        assert s["peers"] == len(ref)
        assert s["transfers"] == int(m.sum())


_VALUES = st.one_of(
    st.text(max_size=4),
    st.integers(-(2**64), 2**64),
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["-0", "1_0", " 3", "", "+4", None, True, 1.5]),
)


@settings(max_examples=300, deadline=None)
@given(
    elems=st.lists(
        st.one_of(
            st.dictionaries(
                st.sampled_from(["stringValue", "intValue", "boolValue"]), _VALUES, max_size=2
            ),
            st.sampled_from([None, 3, "x", []]),
        ),
        max_size=6,
    ),
    extra=st.booleans(),
)
def test_plain_arrays_read_as_the_loaders_read_them(elems: list[Any], extra: bool) -> None:
    value: dict[str, Any] = {"arrayValue": {"values": elems}}
    if extra:
        value["stringValue"] = "first key wins"
    got = requests._plain_array(value)
    if got is not None:
        assert got == otlp_value(value)
    attrs = [{"key": "accel.engine.step.request_ids", "value": value}, {"key": ["x"]}]
    assert requests._step_attrs(attrs) == {
        k: v for k, v in otlp_attrs(attrs).items() if k in requests._STEP_KEYS
    }


def _calls_one_pass_per_call(
    table: Any, input_bytes: dict[tuple[str, int], int], limit: int
) -> Any:
    """The collective calls, one Python pass per call (kernels of one file, rank and external
    id), a dict per call."""
    from otel_ext.analysis.classify import comm_kernel_op

    rows = np.flatnonzero(table["category"] == Category.KERNEL_COMM)
    if not len(rows):
        return {"count": 0, "by_op": [], "calls": []}
    names, sources, ops_s = (table.strings[k] for k in ("name", "source", "coll_op"))
    ext, rank = table["external_id"][rows], table["rank"][rows].astype(np.int64)
    src = table["source"][rows].astype(np.int64)
    key_ext = np.where(ext < 0, -1 - rows, ext)
    order = np.lexsort((table["start_ns"][rows], key_ext, rank, src))
    k_src, k_rank, k_ext = src[order], rank[order], key_ext[order]
    new = np.r_[True, (k_src[1:] != k_src[:-1]) | (k_rank[1:] != k_rank[:-1])]
    new |= np.r_[True, k_ext[1:] != k_ext[:-1]]
    starts = np.flatnonzero(new)
    calls = []
    for a, b in zip(starts.tolist(), np.r_[starts[1:], len(order)].tolist()):
        members = rows[order[a:b]]
        first = int(members[0])
        oc, nc = int(table["coll_op"][first]), int(table["name"][first])
        op = (
            collectives.normalize_op(ops_s[oc])
            if ops_s[oc]
            else (comm_kernel_op(names[nc]) or "unknown")
        )
        meta = table["coll_bytes"][members]
        nbytes, how = -1, "unknown"
        if (meta >= 0).any():
            nbytes, how = int(meta.max()), "metadata"
        elif int(table["external_id"][first]) >= 0:
            got = input_bytes.get(
                (sources[int(table["source"][first])], int(table["external_id"][first]))
            )
            if got is not None and got >= 0:
                nbytes, how = int(got), "input_shapes"
        dur = table["end_ns"][members] - table["start_ns"][members]
        calls.append(
            {"rank": int(table["rank"][first]), "source": sources[int(table["source"][first])],
             "op": op, "name": names[nc], "start_ns": int(table["start_ns"][members].min()),
             "end_ns": int(table["end_ns"][members].max()), "kernels": len(members),
             "busy_ns": int(dur.sum()), "bytes": nbytes, "bytes_from": how}
        )  # fmt: skip
    by_op: dict[str, dict[str, Any]] = {}
    for c in calls:
        g = by_op.setdefault(c["op"], {"op": c["op"], "calls": 0, "kernels": 0, "total_ns": 0,
                                       "bytes_total": 0, "bytes_known": 0})  # fmt: skip
        g["calls"] += 1
        g["kernels"] += c["kernels"]
        g["total_ns"] += c["busy_ns"]
        if c["bytes"] >= 0:
            g["bytes_total"] += c["bytes"]
            g["bytes_known"] += 1
    calls.sort(key=lambda c: (-c["busy_ns"], c["start_ns"]))
    return {
        "count": len(calls),
        "by_op": sorted(by_op.values(), key=lambda g: g["op"]),
        "calls": calls[:limit],
    }


@settings(max_examples=120, deadline=None)
@given(
    kernels=st.lists(
        st.tuples(
            st.integers(0, 50),  # start
            st.integers(0, 9),  # duration
            st.integers(0, 2),  # rank
            st.integers(-1, 3),  # external id
            st.sampled_from(["", "allreduce", "all_gather", "broadcast"]),
            st.sampled_from(
                ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclKernel_SendRecv", "mystery"]
            ),
            st.sampled_from([-1, -1, 0, 64, 4096]),
            st.sampled_from(["a.json", "b.json"]),
        ),
        max_size=30,
    ),
    limit=st.integers(1, 40),
)
def test_collective_calls_equal_a_pass_per_call(kernels: list[tuple[Any, ...]], limit: int) -> None:
    from otel_ext.analysis.rank.comm_calls import collective_calls

    table = EventTable.from_rows(
        dict(start_ns=s, end_ns=s + d, category=Category.KERNEL_COMM, rank=r, external_id=e,
             coll_op=op, name=n, coll_bytes=b, source=src)
        for s, d, r, e, op, n, b, src in kernels
    )  # fmt: skip
    sizes = {("a.json", 1): 512, ("b.json", 2): -1, ("a.json", 3): 0}
    assert collective_calls(table, input_bytes=sizes, limit=limit) == _calls_one_pass_per_call(
        table, sizes, limit
    )


def test_collective_calls_on_the_simulated_run(sim_run: tuple[Path, Any]) -> None:
    from otel_ext.analysis.rank.comm_calls import collective_calls

    table = sim_run[1].table
    got = collective_calls(table, input_bytes={})
    assert got["count"] > 100
    assert got == _calls_one_pass_per_call(table, {}, 200)


def _port_stats_testing_each_host(
    table: EventTable,
    *,
    nominal_bw: float | None = None,
    efficiency: float = 0.8,
    slow_ratio: float = 1.3,
    slow_share: float = 0.6,
    min_transfers: int = 3,
) -> list[dict[str, Any]]:
    """The port statistics with a membership test per host per transfer; the greedy choice
    of the ports that explain the slow transfers is the library's."""
    rows = np.flatnonzero(table["category"] == Category.LINK_TRANSFER)
    nic = [
        r
        for r in rows.tolist()
        if links._link_kind(table.strings["device"][int(table["device"][r])]) == "nic"
    ]
    if not nic:
        return []
    idx = np.asarray(nic, dtype=np.int64)
    d = (table["end_ns"][idx] - table["start_ns"][idx]).astype(np.float64)
    b = table["coll_bytes"][idx].astype(np.float64)
    ok = (d > 0) & (b > 0)
    bw = np.where(ok, b / np.maximum(d, 1) * 1e9, np.nan)
    ends = [links._endpoints(table, r) for r in nic]
    named = [links._host_of(table.strings["device"][int(table["device"][r])]) for r in nic]
    hosts = sorted({h for e in ends for h in e})
    touch = {h: np.asarray([h in e for e in ends]) & ok for h in hosts}
    med = {h: float(median(bw[touch[h]])) if touch[h].any() else None for h in hosts}
    if nominal_bw:
        reference, basis = efficiency * float(nominal_bw), "nominal"
    else:
        best = [v for v in med.values() if v]
        if not best:
            return []
        reference, basis = max(best), "best port"
    slow = ok & (bw < reference / slow_ratio)
    fine = ok & ~slow
    healthy = float(median(bw[fine])) if fine.sum() >= min_transfers else reference
    extra = np.where(slow, d - b / healthy * 1e9, 0.0)
    out: dict[str, dict[str, Any]] = {}
    for h in hosts:
        t = touch[h]
        n, ns = int(t.sum()), int((t & slow).sum())
        partners = sorted({x for e, s in zip(ends, (t & slow).tolist()) if s for x in e} - {h})
        out[h] = {
            "host": h,
            "transfers": n,
            "slow_transfers": ns,
            "slow_share": round(ns / n, 6) if n else 0.0,
            "median_bw": med[h],
            "reference_bw": reference,
            "reference": basis,
            "slowness": round(reference / m_h, 6) if (m_h := med[h]) else None,
            "healthy_bw": healthy,
            "extra_ns": int(max(0.0, float(extra[t & slow].sum()))),
            "partners": partners,
            "implicated": bool(n >= min_transfers and ns / max(n, 1) >= slow_share),
            "chosen": False,
            "candidates": [h],
            "ambiguous": False,
        }
    # the greedy explanation of the slow transfers is the library's (this checks the per-host
    # tests that feed it)
    links._choose_ports(out, links._NicTransfers(d, b, ok, bw, ends, named, hosts, touch),
                        slow, min_transfers)  # fmt: skip
    return [out[h] for h in hosts]


@settings(max_examples=120, deadline=None)
@given(
    transfers=st.lists(
        st.tuples(
            st.sampled_from(["h0", "h1", "h2", "h3"]),  # the port's host
            st.sampled_from(["h0", "h1", "h2", "h3", ""]),  # the other end ("": unnamed)
            st.integers(1, 200),  # duration (us)
            st.sampled_from([0, 10**5, 10**6]),
        ),
        max_size=40,
    ),
    nominal=st.sampled_from([None, 2e10]),
)
def test_port_stats_equal_a_test_per_host(
    transfers: list[tuple[str, str, int, int]], nominal: float | None
) -> None:
    rows = [
        dict(start_ns=i * 10**6, end_ns=i * 10**6 + d * 1000, category=Category.LINK_TRANSFER,
             device=f"{a}/nic0", name=f"{a}->{b}" if b else "xfer", coll_bytes=n)
        for i, (a, b, d, n) in enumerate(transfers)
    ]  # fmt: skip
    rows.append(
        dict(start_ns=0, end_ns=5, category=Category.LINK_TRANSFER, device="h0/chip0-chip1")
    )
    table = EventTable.from_rows(rows)
    assert links.port_stats(table, nominal_bw=nominal, min_transfers=2) == (
        _port_stats_testing_each_host(table, nominal_bw=nominal, min_transfers=2)
    )


def test_port_stats_on_a_slow_nic_run(tmp_path: Path) -> None:
    cfg = SimConfig(hosts=3, chips=2, requests=20, seed=2, faults=(parse_fault("slow-nic@host1"),))
    run_simulation(cfg, tmp_path, timeline=False)
    table = load_paths([tmp_path / "traces.jsonl"], workers=1).table
    got = links.port_stats(table)
    assert got == _port_stats_testing_each_host(table)
    assert [p["host"] for p in got if p["chosen"]] == ["host1"]


def _per_name_a_mask_per_group(table: Any, category: Any, groups: dict[int, int] | None) -> Any:
    """The per-name imbalance rows, a mask over the rows per peer group."""
    from otel_ext._arrays import distinct
    from otel_ext.analysis.cross import imbalance

    rows = np.flatnonzero((table["category"] == category) & (table["rank"] >= 0))
    if len(rows) == 0:
        return []
    ranks = table["rank"][rows].astype(np.int64)
    gcode = imbalance._group_codes(ranks, groups)
    out: list[dict[str, Any]] = []
    for g in distinct(gcode):
        m = gcode == g
        out.extend(imbalance._per_name_in(table, rows[m], ranks[m], int(g) if g >= -1 else -1))
    return out


@settings(max_examples=100, deadline=None)
@given(
    spans=st.lists(
        st.tuples(
            st.integers(0, 7),  # rank
            st.sampled_from(["ProfilerStep#1", "ProfilerStep#2", "layer0", "layer1"]),
            st.integers(1, 1000),  # duration
        ),
        max_size=40,
    ),
    grouping=st.sampled_from(
        [None, {}, {r: r // 4 for r in range(8)}, {r: r % 3 for r in range(6)}]
    ),
)
def test_imbalance_groups_equal_a_mask_per_group(
    spans: list[tuple[int, str, int]], grouping: dict[int, int] | None
) -> None:
    from otel_ext.analysis.cross import imbalance

    table = EventTable.from_rows(
        dict(start_ns=k * 2000, end_ns=k * 2000 + d, rank=r, name=n,
             category=Category.STEP if n.startswith("Profiler") else Category.LAYER)
        for k, (r, n, d) in enumerate(spans)
    )  # fmt: skip
    for cat in (Category.STEP, Category.LAYER):
        got, test = imbalance._per_name(table, cat, limit=10**6, groups=grouping)
        ref = _per_name_a_mask_per_group(table, cat, grouping)
        has_rows = bool(((table["category"] == cat) & (table["rank"] >= 0)).any())
        assert test == (imbalance.persistence_test(ref) if has_rows else None)
        ref.sort(key=lambda x: -x["imbalance"])
        assert got == ref


def _join_a_mask_per_request(table: EventTable, engine: EventTable) -> dict[str, Any]:
    """The serving join, a mask over the whole table per request."""
    cat = engine["category"]
    req = np.flatnonzero(cat == Category.REQUEST)
    names = engine.strings["name"]
    t_trace = table.strings["trace_id"]
    code_of = {s: i for i, s in enumerate(t_trace) if s}
    start, end = table["start_ns"], table["end_ns"]
    tcat = table["category"]
    is_dev = np.isin(tcat, [int(c) for c in DEVICE_CATEGORIES])
    is_coll = (tcat == Category.COLLECTIVE) | (tcat == Category.KERNEL_COMM)
    hosts = table.strings["host"]
    host_code = {h: i for i, h in enumerate(hosts) if h}
    out = []
    for r in req.tolist():
        tid = engine.strings["trace_id"][int(engine["trace_id"][r])]
        host = engine.strings["host"][int(engine["host"][r])]
        a, b = int(engine["start_ns"][r]), int(engine["end_ns"][r])
        code = code_of.get(tid)
        mine = (table["trace_id"] == code) if code is not None else np.zeros(len(table), bool)
        how: str | None = "trace" if mine.any() else None
        if how is None:
            mine = (start < b) & (end > a) & (is_dev | is_coll)
            if host and host in host_code:
                mine &= table["host"] == host_code[host]
            elif host:
                mine &= False
            how = "time" if mine.any() else None
        busy: dict[str, int] = {}
        dev_rows = np.flatnonzero(mine & is_dev)
        for d in np.unique(table["device"][dev_rows]).tolist():
            rows = dev_rows[table["device"][dev_rows] == d]
            s_, e_ = np.clip(start[rows], a, b), np.clip(end[rows], a, b)
            busy[table.strings["device"][int(d)] or "?"] = serving.union_length(s_, e_)
        crow = np.flatnonzero(mine & is_coll)

        out.append(
            {
                "request": names[int(engine["name"][r])],
                "engine": engine.strings["source"][int(engine["source"][r])],
                "trace_id": tid,
                "host": host,
                "joined_by": how,
                "otel_ext_rows": int(mine.sum()),
                "device_busy_ns": dict(sorted(busy.items())),
                "collective_ns": serving.union_length(
                    np.clip(start[crow], a, b), np.clip(end[crow], a, b)
                ),
            }
        )
    return {
        "requests": len(out),
        "joined_by_trace": sum(1 for x in out if x["joined_by"] == "trace"),
        "joined_by_time": sum(1 for x in out if x["joined_by"] == "time"),
        "rows": out,
    }


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 100),  # start
            st.integers(0, 30),  # duration
            st.sampled_from(["t1", "t2", "t3", ""]),
            st.sampled_from(["h0", "h1", ""]),
            st.sampled_from(["h0/chip0", "h0/chip1", "h1/chip0", ""]),
            st.sampled_from(
                [
                    Category.KERNEL_COMPUTE,
                    Category.KERNEL_COMM,
                    Category.LAYER,
                    Category.COLLECTIVE,
                    Category.RUNTIME,
                ]
            ),
        ),
        max_size=30,
    ),
    reqs=st.lists(
        st.tuples(
            st.integers(0, 100),
            st.integers(1, 60),
            st.sampled_from(["t1", "t4", ""]),
            st.sampled_from(["h0", "h1", "", "h9"]),
        ),
        max_size=8,
    ),
)
def test_serving_join_equals_a_mask_per_request(
    rows: list[tuple[Any, ...]], reqs: list[tuple[Any, ...]]
) -> None:
    table = EventTable.from_rows(
        dict(start_ns=s, end_ns=s + d, trace_id=t, host=h, device=dv, category=c, rank=0)
        for s, d, t, h, dv, c in rows
    )
    engine = EventTable.from_rows(
        dict(start_ns=s, end_ns=s + d, trace_id=t, host=h, category=Category.REQUEST,
             name=f"req{k}", source="vllm")
        for k, (s, d, t, h) in enumerate(reqs)
    )  # fmt: skip
    assert serving.join_serving(table, engine) == _join_a_mask_per_request(table, engine)
