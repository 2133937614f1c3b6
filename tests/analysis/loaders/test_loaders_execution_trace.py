"""PyTorch Execution Traces (Chakra schema): read alone, joined to the Kineto trace of the same
process, their collectives' sizes in the collectives' analysis and their data dependencies in
the critical path.

Real data: ``../shared/traces/other-formats/pytorch_et_*`` beside
``../shared/traces/pytorch-profiler/param_dlrm_v100_8rank`` and ``hta_extra/execution_trace__*``.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SHARED_TRACES, require
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.critical_path import critical_path
from otel_ext.analysis.cross.critical_path_walk import _device_prev, walk_mask
from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import detect_format, load_file, load_paths
from otel_ext.analysis.loaders.execution_trace import parse_execution_trace
from otel_ext.analysis.rank.data_deps import with_data_dependencies
from otel_ext.analysis.table import DEVICE_CATEGORIES, Category, EventTable
from otel_ext.errors import InputError

OTHER = SHARED_TRACES.parent / "other-formats"
SIMPLE_ET = OTHER / "pytorch_et_hta_simple_add" / "benchmark_simple_add_et.json.gz"
SIMPLE_KINETO = SHARED_TRACES / "hta_extra" / "execution_trace__benchmark_simple_add_trace.json.gz"
DLRM_ET = OTHER / "pytorch_et_dlrm_v100_8rank"
DLRM_KINETO = SHARED_TRACES / "param_dlrm_v100_8rank"


def _need(*paths: Path) -> None:
    for p in paths:
        require(p.exists(), f"real trace {p}")


def _doc(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()))


# -- alone ------------------------------------------------------------------------------------


def test_the_simple_add_et_is_recognised_by_content_and_read_alone(tmp_path: Path) -> None:
    _need(SIMPLE_ET)
    text = gzip.decompress(SIMPLE_ET.read_bytes())
    assert detect_format("renamed.json", text[:65536].decode()) == "execution-trace"
    renamed = tmp_path / "whatever.json"
    renamed.write_bytes(text)
    res = load_file(renamed)
    assert res.format == "execution-trace" and res.info()["status"] == "loaded"
    et = res.execution_trace
    assert len(et.names) == len(_doc(SIMPLE_ET)["nodes"])
    assert et.collectives == [] and et.rank == -1
    # aten::add (rf_id 22 and 36) reads the two tensors the aten::uniform_ calls (4, 7) wrote
    by_rf = dict(zip(et.rf_id.tolist(), et.names))
    adds = {c for _p, c in et.deps if by_rf[c] == "aten::add"}
    assert adds == {22, 36}
    assert {p for p, c in et.deps if c in adds} == {4, 7}
    assert all(by_rf[p] == "aten::uniform_" for p, c in et.deps if c in adds)
    # a folder holding only the ET: loaded, no rows (no times), and the note says why
    doc = analyze([SIMPLE_ET.parent], workers=1)
    assert "not joined: no Kineto trace was loaded" in doc["inputs"][0]["note"]


def test_the_dlrm_ets_give_each_ranks_collectives_with_sizes_and_groups() -> None:
    _need(DLRM_ET)
    for r in range(8):
        et = load_file(DLRM_ET / f"dlrm_eg_{r}.json.gz").execution_trace
        assert et.rank == r
        ops = [c.op for c in et.collectives]
        assert ops.count("allreduce") == 3 and ops.count("alltoall") == 5
        assert all(c.nbytes > 0 and c.group_size == 8 for c in et.collectives)
        assert [c.seq for c in et.collectives] == sorted(c.seq for c in et.collectives)


# -- joined to Kineto -------------------------------------------------------------------------


def _kineto_allreduce_bytes(path: Path) -> list[int]:
    """The all-reduce input sizes the Kineto trace's own ``nccl:all_reduce`` ops show."""
    ops = [e for e in _doc(path)["traceEvents"] if e.get("name") == "nccl:all_reduce"]
    ops.sort(key=lambda e: e["ts"])
    assert all(e["args"]["Input type"] == ["float"] for e in ops)
    return [int(np.prod(e["args"]["Input Dims"][0])) * 4 for e in ops]


def test_dlrm_kineto_and_et_together_give_the_all_reduces_busbw() -> None:
    _need(DLRM_ET, DLRM_KINETO)
    doc = analyze([DLRM_KINETO, DLRM_ET], workers=1)
    notes = [i["note"] for i in doc["inputs"] if i["format"] == "execution-trace"]
    assert len(notes) == 8
    for n in notes:
        assert "by collective order (by rf_id " in n and ": 8 collectives sized" in n
        assert "(by operator order: " in n
    inst = doc["collectives"]["instances"]
    allreduce = sorted((i for i in inst if i["op"] == "allreduce"), key=lambda i: i["key"])
    assert len(allreduce) == 3
    for i in allreduce:
        assert i["n_ranks"] == 8 and i["group_size"] == 8
        assert i["busbw"] is not None and i["busbw"] > 0
        # busbw = algbw x 2(n-1)/n for an all-reduce of 8
        assert i["busbw"] == pytest.approx(i["algbw"] * 2 * 7 / 8, rel=1e-9)
    # the sizes the ETs give are the sizes the Kineto trace's own op shapes give
    kineto0 = sorted(DLRM_KINETO.glob("worker0_*"))[0]
    by_time = sorted(allreduce, key=lambda i: i["first_arrival_ns"])
    assert [i["bytes"] for i in by_time] == _kineto_allreduce_bytes(kineto0)
    # without the ETs the same all-reduces have no size, so no bandwidth
    bare = analyze([DLRM_KINETO], workers=1)["collectives"]["instances"]
    assert all(i["busbw"] is None for i in bare if i["op"] == "allreduce")


def test_every_rank_sizes_its_collectives_alike() -> None:
    _need(DLRM_ET, DLRM_KINETO)
    res = load_paths([DLRM_KINETO, DLRM_ET], workers=1)
    t = res.table
    comm = np.flatnonzero(t["category"] == Category.KERNEL_COMM)
    assert len(comm) == 64 and (t["coll_bytes"][comm] > 0).all()
    assert (t["coll_group_size"][comm] == 8).all()
    m = match_collectives(t)
    assert m.n_instances == 8
    assert (m.bytes_min == m.bytes_max).all()  # eight ETs, read apart, agree on every size
    # the data dependencies, joined by operator order rank by rank, agree across the ranks
    # (one program): the (producer kernel, consumer kernel) pairs of each rank and rank 0's
    names = t.decoded("name")
    dev = np.isin(t["category"], [int(c) for c in DEVICE_CATEGORIES])
    pairs = {}
    for r in range(8):
        mine = t["rank"] == r
        by_corr = dict(zip(t["correlation"][mine & dev].tolist(), np.flatnonzero(mine & dev)))
        has = np.flatnonzero(mine & (t["data_dep"] >= 0))
        pairs[r] = Counter((names[by_corr[int(t["data_dep"][i])]], names[i]) for i in has)
        assert sum(pairs[r].values()) >= 50
        for i in has.tolist():
            assert t["end_ns"][by_corr[int(t["data_dep"][i])]] <= t["start_ns"][i]
    for r in range(1, 8):
        common = sum((pairs[0] & pairs[r]).values())
        assert common >= 0.9 * max(sum(pairs[0].values()), sum(pairs[r].values()))


def test_an_et_whose_collectives_disagree_is_not_joined(tmp_path: Path) -> None:
    _need(DLRM_ET, DLRM_KINETO)
    doc = _doc(DLRM_ET / "dlrm_eg_0.json.gz")
    for n in doc["nodes"]:  # every all-to-all said to be an all-gather: no order join holds
        if n["name"] == "record_param_comms" and "all_to_all" in str(n["inputs"]):
            n["inputs"] = ["allgather" if x in ("all_to_all", "all_to_allv") else x
                           for x in n["inputs"]]  # fmt: skip
    bad = tmp_path / "et.json"
    bad.write_text(json.dumps(doc))
    kineto0 = sorted(DLRM_KINETO.glob("worker0_*"))[0]
    res = load_paths([kineto0, bad], workers=1)
    note = next(i["note"] for i in res.inputs if i["format"] == "execution-trace")
    assert "not joined" in note
    comm = res.table["category"] == Category.KERNEL_COMM
    assert (res.table["coll_bytes"][comm] < 0).all()


# -- the critical path ------------------------------------------------------------------------


def test_the_simple_add_et_is_joined_by_rf_id_and_its_dependencies_reach_the_walk() -> None:
    _need(SIMPLE_ET, SIMPLE_KINETO)
    res = load_paths([SIMPLE_KINETO, SIMPLE_ET], workers=1)
    note = next(i["note"] for i in res.inputs if i["format"] == "execution-trace")
    assert "by rf_id" in note and "2 device data dependencies" in note
    t = res.table
    has = np.flatnonzero(t["data_dep"] >= 0)
    assert len(has) == 2
    t0 = t
    assert (t0["rank"] == 0).all()  # the trace names rank 0: its rows are walk rows
    rows = np.flatnonzero(walk_mask(t0))
    guessed = _device_prev(rows, t0)
    recorded = with_data_dependencies(rows, t0, guessed)
    pos = {int(r): k for k, r in enumerate(rows)}
    names = t0.decoded("name")
    for r in has.tolist():
        p = rows[recorded[pos[r]]]
        assert "elementwise" in names[r]  # the add's kernel ...
        assert "distribution" in names[p]  # ... waited for a uniform_ kernel
        assert t0["correlation"][p] == t0["data_dep"][r]
        assert t0["end_ns"][p] <= t0["start_ns"][r]
    cp = analyze([SIMPLE_KINETO, SIMPLE_ET], workers=1)["critical_path"]
    assert cp["length_ns"] > 0 and any(s["category"] == "compute" for s in cp["segments"])


def test_a_recorded_dependency_replaces_the_cross_stream_guess_on_the_path() -> None:
    k = Category.KERNEL_COMPUTE
    rows = [
        dict(start_ns=0, end_ns=500, rank=0, stream=1, category=k, correlation=1, name="prod"),
        dict(start_ns=0, end_ns=900, rank=0, stream=2, category=k, correlation=2, name="other"),
        dict(start_ns=1000, end_ns=1100, rank=0, stream=3, category=k, correlation=3,
             name="cons"),
    ]  # fmt: skip
    guess = EventTable.from_rows(rows)
    rows[2]["data_dep"] = 1
    recorded = EventTable.from_rows(rows)
    path = [
        (s["name"], s["category"]) for s in critical_path(guess, match_collectives(guess)).segments
    ]
    assert ("other", "compute") in path and ("prod", "compute") not in path
    cp = critical_path(recorded, match_collectives(recorded))
    path = [(s["name"], s["category"]) for s in cp.segments]
    assert ("prod", "compute") in path and ("other", "compute") not in path
    assert cp.length_ns == 1100


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "record"),
    [
        ('{"schema": "1.0.1", "pid": 1, "nodes": [{"name": "a", "rf_id": 1', "file"),
        ('{"schema": "1.0.1", "pid": 1, "nodes": [{"name": "a", "id": 3, "op_schema": ""}]}',
         "node 0"),
        ('{"schema": "1.0.1", "pid": 1, "nodes": [7], "op_schema": "", "rf_id": 1}', "node 0"),
        ('{"schema": "1.0.1", "pid": 1, "rf_id": 1, "nodes": {"a": 1}}', "file"),
        ('{"schema": "1.0.1", "pid": 1, "nodes": [{"name": "record_param_comms", "id": 1, '
         '"rf_id": 2, "inputs": [1, 2], "input_types": ["Int", "Int"]}]}', "node 0"),
    ],
)  # fmt: skip
def test_malformed_ets_are_named_errors(tmp_path: Path, text: str, record: str) -> None:
    f = tmp_path / "et.json"
    f.write_text(text)
    with pytest.raises(InputError) as err:
        load_file(f)
    assert err.value.path == str(f) and err.value.record == record
    res = load_paths([f], keep_going=True, workers=1)
    assert [(s.path, s.record) for s in res.skipped] == [(str(f), record)]


def test_mutated_real_ets_give_named_errors_only(tmp_path: Path) -> None:
    _need(SIMPLE_ET)
    seed = gzip.decompress(SIMPLE_ET.read_bytes())
    rng = random.Random(30)
    raised = 0
    for case in range(80):
        data = bytearray(seed)
        if case % 2:
            del data[rng.randrange(200, len(data)) :]
        else:
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(200, len(data))] = rng.choice(b'[]{}",:0a\xff')
        f = tmp_path / f"et{case}.json"
        f.write_bytes(bytes(data))
        try:
            load_file(f)
        except InputError as e:
            assert e.path == str(f) and e.record
            raised += 1
        load_paths([f], keep_going=True, workers=1)  # never raises
    assert raised >= 40


# -- properties of the dependency graph -------------------------------------------------------

_op = st.tuples(
    st.lists(st.integers(0, 6), max_size=3),  # tensors read
    st.lists(st.integers(0, 6), max_size=2),  # tensors written
)


def _et_doc(ops: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    def tensor(i: int) -> list[Any]:
        return [i, 100 + i, 0, 4, 4, "cuda:0"]

    nodes = [
        {"name": f"op{k}", "id": 10 + k, "rf_id": k, "parent": 1, "tid": 1,
         "inputs": [tensor(i) for i in ins], "input_types": ["Tensor(float)"] * len(ins),
         "outputs": [tensor(i) for i in outs], "output_types": ["Tensor(float)"] * len(outs)}
        for k, (ins, outs) in enumerate(ops)
    ]  # fmt: skip
    return {"schema": "1.0.1", "pid": 1, "nodes": nodes}


@settings(max_examples=150)
@given(st.lists(_op, max_size=12), st.randoms(use_true_random=False))
def test_dependencies_are_last_writers_and_do_not_depend_on_node_order(
    ops: list[tuple[list[int], list[int]]], rnd: random.Random
) -> None:
    doc = _et_doc(ops)
    et = parse_execution_trace(json.dumps(doc).encode(), path="p.json")
    expected = set()
    last: dict[int, int] = {}
    for k, (ins, outs) in enumerate(ops):
        for i in ins:
            if i in last and last[i] != k:
                expected.add((last[i], k))
        for i in outs:
            last[i] = k
    assert set(et.deps) == expected
    assert all(p < c for p, c in et.deps)
    rnd.shuffle(doc["nodes"])  # the file's node order is not the record order
    again = parse_execution_trace(json.dumps(doc).encode(), path="p.json")
    assert again.deps == et.deps
