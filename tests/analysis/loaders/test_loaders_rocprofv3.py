"""rocprofv3 JSON (``rocprofiler-sdk-tool``) read into the event table and analysed.

The real file (``../shared/traces/other-formats/rocprofv3_json_mi350x``: a 50-step training
run on an MI350X, 43,915 kernel dispatches of which 1,310 RCCL) is recognised by content,
loaded, and gives a breakdown, a critical path and findings; generated documents check
each record kind, the section order, the launch-context rule for communication, bad
records (named by their place in the document), truncation at every cut, and that reading
in pieces of any size gives the same table as reading whole.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SHARED_TRACES, require
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import detect_format, load_file, load_paths
from otel_ext.analysis.loaders._common import LoadContext
from otel_ext.analysis.loaders.rocprofv3 import load_rocprofv3_pieces
from otel_ext.analysis.table import Category
from otel_ext.errors import InputError

FOLDER = SHARED_TRACES.parent / "other-formats" / "rocprofv3_json_mi350x"

_OPS = [
    {"kind": "NONE", "operations": []},
    {"kind": "HIP_RUNTIME_API", "operations": ["hipApiName", "hipLaunchKernel", "hipMemcpy"]},
    {"kind": "MEMORY_COPY", "operations": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_DEVICE"]},
    {"kind": "RCCL_API", "operations": ["ncclAllGather", "ncclAllReduce"]},
]


def _dispatch(start: int, dur: int, kid: int, corr: int, *, agent: int = 11) -> dict[str, Any]:
    return {
        "size": 184,
        "kind": 11,
        "operation": 2,
        "thread_id": 908,
        "correlation_id": {"internal": corr, "external": 0},
        "start_timestamp": start,
        "end_timestamp": start + dur,
        "dispatch_info": {"agent_id": {"handle": agent}, "queue_id": {"handle": 3},
                          "kernel_id": kid},
        "stream_id": {"handle": 5},
    }  # fmt: skip


def _doc(order: list[str] | None = None) -> dict[str, Any]:
    """A small document: two GPUs, a compute kernel, an RCCL-named kernel, a kernel launched
    by ncclAllReduce (named like compute), a HIP call, an RCCL call and a copy."""
    tool = {
        "metadata": {"node": {"hostname": "nodeA"}, "pid": 42},
        "agents": [
            {"id": {"handle": 10}, "type": 1, "logical_node_type_id": 0, "name": "CPU"},
            {
                "id": {"handle": 11},
                "type": 2,
                "logical_node_type_id": 0,
                "product_name": "AMD Instinct MI350X",
            },
            {
                "id": {"handle": 12},
                "type": 2,
                "logical_node_type_id": 1,
                "product_name": "AMD Instinct MI350X",
            },
        ],
        "strings": {"buffer_records": _OPS},
        "kernel_symbols": [
            {"kernel_id": 0, "kernel_name": ""},
            {"kernel_id": 1, "kernel_name": "Cijk_gemm.kd"},
            {
                "kernel_id": 2,
                "kernel_name": "_Z23ncclDevKernel_Generic_1.kd",
                "demangled_kernel_name": "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
            },
            {"kernel_id": 3, "kernel_name": "my_fused_reduce_kernel.kd"},
        ],
        "buffer_records": {
            "kernel_dispatch": [
                _dispatch(1_000, 500, 1, 1),
                _dispatch(2_000, 900, 2, 2, agent=12),
                _dispatch(4_000, 700, 3, 7),
            ],
            "hip_api": [
                {
                    "kind": 1,
                    "operation": 1,
                    "thread_id": 908,
                    "start_timestamp": 900,
                    "end_timestamp": 950,
                    "correlation_id": {"internal": 1, "external": 0},
                },
            ],
            "rccl_api": [
                {
                    "kind": 3,
                    "operation": 1,
                    "thread_id": 908,
                    "start_timestamp": 3_900,
                    "end_timestamp": 3_990,
                    "correlation_id": {"internal": 7, "external": 0},
                },
            ],
            "memory_copy": [
                {
                    "kind": 2,
                    "operation": 1,
                    "thread_id": 908,
                    "start_timestamp": 5_000,
                    "end_timestamp": 5_400,
                    "correlation_id": {"internal": 9, "external": 0},
                    "dst_agent_id": {"handle": 11},
                    "src_agent_id": {"handle": 10},
                    "bytes": 4096,
                },
            ],
            "hsa_api": [],
            "marker_api": [],
        },
        "callback_records": {"counter_collection": []},
    }
    if order:
        tool = {k: tool[k] for k in order} | {k: v for k, v in tool.items() if k not in order}
    return {"rocprofiler-sdk-tool": [tool]}


def _load(doc: Any, *, keep_going: bool = False, piece: int = 1 << 20) -> Any:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    pieces = [data[i : i + piece] for i in range(0, len(data), piece)] or [b""]
    ctx = LoadContext("908_results.json", keep_going=keep_going)
    return load_rocprofv3_pieces(pieces, ctx=ctx), ctx


def _rows(t: Any) -> list[tuple[Any, ...]]:
    return [
        (int(t["start_ns"][i]), int(t["end_ns"][i]), Category(int(t["category"][i])).name,
         t.string("name", i), t.string("device", i), int(t["stream"][i]),
         int(t["correlation"][i]), int(t["tid"][i]), float(t["bytes_accessed"][i]))
        for i in range(len(t))
    ]  # fmt: skip


def test_each_record_kind_becomes_its_row() -> None:
    t, ctx = _load(_doc())
    assert not ctx.skipped
    assert _rows(t) == [
        (1000, 1500, "KERNEL_COMPUTE", "Cijk_gemm.kd", "nodeA/gpu0", 5, 1, 908, -1.0),
        (2000, 2900, "KERNEL_COMM", "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
         "nodeA/gpu1", 5, 2, 908, -1.0),
        # named like compute, but launched by ncclAllReduce (same internal correlation id)
        (4000, 4700, "KERNEL_COMM", "my_fused_reduce_kernel.kd", "nodeA/gpu0", 5, 7, 908, -1.0),
        (900, 950, "RUNTIME", "hipLaunchKernel", "", -1, 1, 908, -1.0),
        (3900, 3990, "RUNTIME", "ncclAllReduce", "", -1, 7, 908, -1.0),
        (5000, 5400, "MEMCPY", "MEMORY_COPY_HOST_TO_DEVICE", "nodeA/gpu0", -1, 9, 908, 4096.0),
    ]  # fmt: skip
    assert t.meta["format"] == "rocprofv3" and t.meta["host"] == "nodeA"
    assert t.meta["rank"] == -1 and t.meta["pid"] == 42
    assert t.meta["devices"] == ["AMD Instinct MI350X", "AMD Instinct MI350X"]


def test_the_name_alone_never_makes_compute_communication_without_the_table() -> None:
    doc = _doc()
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["rccl_api"] = []  # no launch context
    t, _ = _load(doc)
    cats = {t.string("name", i): Category(int(t["category"][i])).name for i in range(len(t))}
    assert cats["my_fused_reduce_kernel.kd"] == "KERNEL_COMPUTE"
    assert cats["ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"] == "KERNEL_COMM"


def test_section_order_does_not_matter() -> None:
    base = _rows(_load(_doc())[0])
    for order in (["buffer_records", "kernel_symbols", "agents", "strings", "metadata"],
                  ["callback_records", "buffer_records", "strings", "agents"]):  # fmt: skip
        assert _rows(_load(_doc(order))[0]) == base


@settings(max_examples=60, deadline=None)
@given(piece=st.integers(min_value=1, max_value=4096), spaces=st.booleans())
def test_pieces_of_any_size_give_the_same_table(piece: int, spaces: bool) -> None:
    """Streaming equals batch: cut anywhere (inside numbers, strings, UTF-8), with or
    without white space between tokens."""
    doc = _doc()
    doc["rocprofiler-sdk-tool"][0]["kernel_symbols"][1]["kernel_name"] = "gemm_ünïcode_✓.kd"
    data = json.dumps(doc, indent=2 if spaces else None).encode()
    assert _rows(_load(data, piece=piece)[0]) == _rows(_load(data)[0])


@settings(max_examples=40, deadline=None)
@given(shift=st.integers(min_value=0, max_value=2**40), seed=st.integers(0, 2**16))
def test_a_constant_time_shift_moves_every_row_alike(shift: int, seed: int) -> None:
    """Invariance to a constant clock offset and to the order of the records."""
    doc = _doc()
    br = doc["rocprofiler-sdk-tool"][0]["buffer_records"]
    moved = copy.deepcopy(doc)
    for recs in moved["rocprofiler-sdk-tool"][0]["buffer_records"].values():
        for r in recs:
            r["start_timestamp"] += shift
            r["end_timestamp"] += shift
        random.Random(seed).shuffle(recs)
    a, b = _load(doc)[0], _load(moved)[0]
    ra = sorted((s + shift, e + shift, *rest) for s, e, *rest in _rows(a))
    assert ra == sorted(_rows(b))
    assert len(a) == sum(len(v) for v in br.values())


@pytest.mark.parametrize(
    ("mutate", "record", "problem"),
    [
        (lambda d: d["buffer_records"]["kernel_dispatch"][1].update(end_timestamp=10),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[1]", "ends before it starts"),
        (lambda d: d["buffer_records"]["kernel_dispatch"][0].update(start_timestamp="1000"),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[0]", "must be integers"),
        (lambda d: d["buffer_records"]["kernel_dispatch"][2].pop("dispatch_info"),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[2]", "'dispatch_info'"),
        (lambda d: d["buffer_records"]["kernel_dispatch"][2]["dispatch_info"].update(kernel_id=99),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[2]", "names no kernel symbol"),
        (lambda d: d["buffer_records"]["kernel_dispatch"][0]["dispatch_info"].update(
            agent_id={"handle": 77}),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[0]", "not among the file's GPU"),
        (lambda d: d["buffer_records"]["hip_api"].__setitem__(0, [1, 2]),
         "rocprofiler-sdk-tool[0].buffer_records.hip_api[0]", "not a JSON object"),
        (lambda d: d["buffer_records"]["memory_copy"][0].update(operation=-3),
         "rocprofiler-sdk-tool[0].buffer_records.memory_copy[0]", "'operation'"),
        (lambda d: d["buffer_records"]["rccl_api"][0].update(correlation_id="x"),
         "rocprofiler-sdk-tool[0].buffer_records.rccl_api[0]", "'correlation_id'"),
        (lambda d: d["buffer_records"]["kernel_dispatch"][1]["dispatch_info"].update(
            queue_id={"handle": 2**64}),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[1]", "'queue_id.handle'"),
        (lambda d: d["buffer_records"]["kernel_dispatch"][0].update(start_timestamp=2**63),
         "rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[0]", "out of range"),
    ],
)  # fmt: skip
def test_a_bad_record_is_named_and_skipped_with_keep_going(
    mutate: Any, record: str, problem: str
) -> None:
    doc = _doc()
    mutate(doc["rocprofiler-sdk-tool"][0])
    with pytest.raises(InputError) as e:
        _load(doc)
    assert e.value.path == "908_results.json" and e.value.record == record
    assert problem in e.value.message
    t, ctx = _load(doc, keep_going=True)
    assert [(s.record, problem in s.reason) for s in ctx.skipped] == [(record, True)]
    assert len(t) in (5, 6)  # the bad record left out (an unknown agent keeps its row)


def test_every_truncation_is_a_named_error() -> None:
    data = json.dumps(_doc()).encode()
    for cut in range(1, len(data), 7):
        with pytest.raises(InputError) as e:
            _load(data[:cut])
        assert e.value.path == "908_results.json" and e.value.record
        assert "Traceback" not in str(e.value)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"rocprofiler-sdk-tool": [{"agents": [{"id": 1 x}]}]}', "malformed JSON"),
        (b'{"rocprofiler-sdk-tool": [{"agents": [1, 2}]}', "expected ',' or ']'"),
        (b'{"rocprofiler-sdk-tool": [{}]} trailing', "text after the end"),
        (b'{"rocprofiler-sdk-tool": {"a": 1}}', "expected a JSON array"),
        (b'{"rocprofiler-sdk-tool": [{"kernel_symbols": [' + b"[" * 100_000 + b"]}", "deeply"),
        (b'{"rocprofiler-sdk-tool": [{"strings": "\xff\xfe"}]}', "not UTF-8"),
        (b'{"other": 1}', "no 'rocprofiler-sdk-tool' member"),
    ],
)
def test_malformed_documents_are_named_errors(data: bytes, problem: str) -> None:
    with pytest.raises(InputError) as e:
        _load(data)
    assert problem in e.value.message, e.value.message


def test_a_record_larger_than_the_limit_is_refused_not_read_whole() -> None:
    doc = _doc()
    doc["rocprofiler-sdk-tool"][0]["kernel_symbols"][1]["kernel_name"] = "k" * 50_000
    data = json.dumps(doc).encode()
    ctx = LoadContext("908_results.json")
    with pytest.raises(InputError) as e:
        load_rocprofv3_pieces([data[i : i + 1000] for i in range(0, len(data), 1000)],
                              ctx=ctx, max_record=10_000)  # fmt: skip
    assert "OTEL_EXT_MAX_RECORD_BYTES" in e.value.message
    assert e.value.record == "rocprofiler-sdk-tool[0].kernel_symbols[1]"


def test_recognised_by_content_not_by_name(tmp_path: Path) -> None:
    f = tmp_path / "trace.json.gz"  # a Kineto-like name; the content decides
    f.write_bytes(gzip.compress(json.dumps(_doc()).encode()))
    assert detect_format(f, json.dumps(_doc())[:200]) == "rocprofv3"
    r = load_file(f)
    assert (r.format, len(r.table)) == ("rocprofv3", 6)


@pytest.fixture(scope="module")
def real_file() -> Path:
    require(FOLDER.is_dir(), f"rocprofv3 traces folder {FOLDER}")
    return next(FOLDER.glob("*.json.gz"))


def test_the_real_run_43915_kernels_1310_communication(real_file: Path) -> None:
    r = load_paths([real_file.parent], workers=1)
    t = r.table
    assert [(i["format"], i["status"], i["events"]) for i in r.inputs] == [
        ("rocprofv3", "loaded", 43_915)
    ]
    cats = Counter(Category(int(c)).name for c in t["category"])
    assert cats == {"KERNEL_COMPUTE": 42_605, "KERNEL_COMM": 1_310}
    comm = t["category"] == Category.KERNEL_COMM
    names = {t.strings["name"][c] for c in np.unique(t["name"][comm])}
    assert all("ncclDevKernel" in n for n in names)
    assert (t["end_ns"] >= t["start_ns"]).all()
    assert set(t.decoded("device").tolist()) == {"smci350-zts-gtu-c6-25/gpu0"}


def test_the_real_run_analysed(real_file: Path) -> None:
    doc = analyze([real_file.parent], workers=1)
    kb = {c["category"]: c for c in doc["kernel_breakdown"]["by_category"]}
    assert (kb["communication"]["count"], kb["compute"]["count"]) == (1_310, 42_605)
    (tb,) = doc["temporal_breakdown"]
    assert tb["comm_ns"] == kb["communication"]["total_ns"]
    assert 0 < tb["compute_pct"] < 100 and 0 < tb["idle_pct"] < 100
    assert doc["ranks"][0]["device"] == "smci350-zts-gtu-c6-25/gpu0"
    assert doc["run"]["duration_ns"] == tb["kernel_window_ns"]
    assert doc["critical_path"]["length_ns"] == doc["run"]["duration_ns"]
    assert doc["collectives"]["calls"]["count"] == 1_310
    assert "exposed-communication" in [f["kind"] for f in doc["findings"]]


def _paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*here, i))
    return out


_HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=5), st.just("12.5"), st.just([]), st.just({}), st.just([[[1]]]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(pick=st.integers(min_value=0), value=_HOSTILE, drop=st.booleans())
def test_one_hostile_value_anywhere_is_an_input_error_or_loads(
    pick: int, value: Any, drop: bool
) -> None:
    """A value replaced (or a key removed) anywhere in the document: never anything but an
    InputError naming the file and a record; with keep_going, nothing raised."""
    doc = _doc()
    paths = _paths(doc)[1:]
    path = paths[pick % len(paths)]
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if drop and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        _load(doc)
    except InputError as e:
        assert e.path == "908_results.json" and e.record
    try:
        _load(doc, keep_going=True)
    except InputError as e:  # a container that is not one (not a record to skip)
        assert e.record
        assert not re.search(r"(buffer_records\.\w+|kernel_symbols|agents)\[\d+\]$", e.record)
