"""The communication-kernel table: its entries, its extension without code, and the B200 trace.

``tracelens_vllm_tp8_b200`` is one vLLM tensor-parallel-8 step: 73 of its 74 communication
kernels are PyTorch symmetric memory's ``multimem_all_reduce_kernel`` (no metadata), one is
an NCCL all-gather with metadata (facts in ``../shared/traces/README.md``).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_ext.analysis import classify
from otel_ext.analysis.intervals import union_length
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.loaders.kernel_tables import load_comm_kernel_table
from otel_ext.analysis.loaders.op_input_bytes import input_bytes_by_external_id
from otel_ext.analysis.rank.comm_calls import collective_calls
from otel_ext.analysis.rank.overlap import comm_comp_overlap
from otel_ext.analysis.table import Category
from otel_ext.errors import InputError

B200 = "tracelens_vllm_tp8_b200/eager_trace.json.gz"
TABLE = load_comm_kernel_table(env={})


@pytest.mark.parametrize("pat", TABLE, ids=lambda p: p.id)
def test_every_entry_matches_its_examples_and_not_its_counter_examples(pat) -> None:
    assert pat.examples, "every entry shows a real name it matches"
    for name in pat.examples:
        assert classify.comm_kernel_pattern(name) is not None, name
        assert classify.classify_kernel(name) is Category.KERNEL_COMM
        assert any(h in name.casefold() for h in pat.hints), (pat.id, name)
    for name in pat.counter_examples:
        assert classify.classify_kernel(name) is Category.KERNEL_COMPUTE, name


def test_fixed_ops_of_the_table() -> None:
    assert classify.comm_kernel_op("void vllm::cross_device_reduce_2stage<half, 4>(x)") == (
        "allreduce"
    )
    assert classify.comm_kernel_op("multimem_all_gather_kernel") == "allgather"
    assert classify.comm_kernel_op("void dpsk::ep::internode::dispatch<false, 8>(int4*)") == (
        "alltoall"
    )
    assert classify.comm_kernel_op("volta_sgemm_128x64_nn") is None


_FRAGMENTS = st.sampled_from(
    ["quickreduce::", "cross_device_reduce", "oneShot", "AllReduce", "Kernel", "multimem_",
     "one_shot_", "all_gather", "nccl", "ep::", "internode::", "combine", "\u212a", "\u017f",
     "\u0130", "ß", "void ", "gemm", " ", ":", "_kernel", "x"]
)  # fmt: skip


@given(st.lists(_FRAGMENTS, max_size=8).map("".join))
def test_prefilter_hints_never_change_a_verdict(name: str) -> None:
    assert classify.is_comm_kernel_name(name) == (classify._COMM_NAME_RE.search(name) is not None)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_an_extra_table_extends_the_patterns_without_code(tmp_path: Path) -> None:
    extra = _write(
        tmp_path / "mine.yaml",
        "patterns:\n  - id: acme_ring\n    regex: 'acme::(ring|tree)_allreduce'\n"
        "    op: allreduce\n    examples: ['acme::ring_allreduce<8>']\n",
    )
    name = "void acme::ring_allreduce<8>(float*)"
    assert classify.classify_kernel(name) is Category.KERNEL_COMPUTE
    table = load_comm_kernel_table(env={"OTEL_EXT_COMM_KERNELS": str(extra)})
    assert [p.id for p in table][-1] == "acme_ring"
    before = load_comm_kernel_table(env={})
    try:
        classify.use_comm_kernel_table(table)
        assert classify.classify_kernel(name) is Category.KERNEL_COMM
        assert classify.comm_kernel_op(name) == "allreduce"
        # an entry without hints turns the prefilter off rather than missing names
        assert classify._NAMES.hints is None
    finally:
        classify.use_comm_kernel_table(before)
    assert classify.classify_kernel(name) is Category.KERNEL_COMPUTE


def test_classify_imports_first_and_reads_the_table_on_its_first_match() -> None:
    """classify imports no loader (the loaders import it): the packaged table is read by
    loaders.kernel_tables on the first name matched, in a process that imported classify
    alone."""
    code = (
        "import sys; from otel_ext.analysis import classify as c; "
        "assert c._NAMES is None and 'otel_ext.analysis.loaders' not in sys.modules; "
        "print(c.is_comm_kernel_name('ncclDevKernel_Generic(x)'), c._NAMES is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("patterns: 3\n", "'patterns' list"),
        ("patterns:\n  - regex: x\n", "needs an 'id'"),
        ("patterns:\n  - id: a\n    regex: '('\n", "does not compile"),
        ("patterns:\n  - id: a\n    regex: x\n    hints: [Ring]\n", "casefolded"),
        ("patterns:\n  - id: nccl\n    regex: x\n", "duplicate id"),
        ("patterns: [\n", "not valid YAML"),
        ("patterns:\n  - id: a\n    regex: '(?P<p0>x)'\n", "must not name groups"),
    ],
)
def test_bad_tables_name_file_entry_and_problem(tmp_path: Path, text: str, problem: str) -> None:
    bad = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(InputError) as err:
        load_comm_kernel_table(extra_tables=[bad])
    assert problem in str(err.value) and str(bad) in str(err.value)


def _raw_comm_kernels(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return [
        e
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel"
        and ("multimem_all_reduce" in e["name"] or e["name"].startswith("nccl"))
    ]


def test_b200_all_74_communication_kernels_count_and_overlap(shared_traces: Path) -> None:
    path = shared_traces / B200
    raw = _raw_comm_kernels(path)
    assert len(raw) == 74
    table = load_paths([path]).table
    comm = table["category"] == Category.KERNEL_COMM
    assert int(comm.sum()) == 74
    # overlap and exposed communication cover exactly those kernels' time
    (ov,) = comm_comp_overlap(table)
    assert ov.comm_ns == union_length(table["start_ns"][comm], table["end_ns"][comm])
    assert ov.comm_ns > 2_000_000
    assert ov.exposed_comm_ns == ov.comm_ns - ov.overlap_ns


def test_b200_all_reduces_grouped_with_sizes_from_input_shapes(shared_traces: Path) -> None:
    path = shared_traces / B200
    table = load_paths([path]).table
    sizes = input_bytes_by_external_id(path)
    calls = collective_calls(table, input_bytes=sizes)
    by_op = {g["op"]: g for g in calls["by_op"]}
    assert set(by_op) == {"allreduce", "allgather"}
    assert by_op["allreduce"]["calls"] == 73 and by_op["allreduce"]["bytes_known"] == 73
    # sizes computed independently: the launching host op's first input, bf16 (2 bytes)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ops = {
        e["args"]["External id"]: e["args"]
        for e in doc["traceEvents"]
        if e.get("cat") == "cpu_op" and e["name"] == "symm_mem::multimem_all_reduce_"
    }
    want = sum(2 * int(np.prod(a["Input Dims"][0])) for a in ops.values())
    assert len(ops) == 73 and by_op["allreduce"]["bytes_total"] == want
    ag = [c for c in calls["calls"] if c["op"] == "allgather"]
    assert ag[0]["bytes_from"] == "metadata" and ag[0]["bytes"] > 0
