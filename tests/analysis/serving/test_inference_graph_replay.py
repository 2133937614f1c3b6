"""Graph replays and device-bound runs on real traces: what the critical path blames.

SGLang's and vLLM's decode steps replay a HIP graph: one ``hipGraphLaunch``, hundreds of
kernels sharing its correlation id (facts in ``../shared/traces/README.md``). Those kernels
are queued by one launch, not launched late, so the critical path must not call the step
"launch". DeepSeek-V3's training rank is device-bound (its temporal breakdown: 96 % compute),
so its critical path must hold device work, not the host blocked in waits for it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.critical_path import critical_path
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.rank.breakdown import (
    graph_replays,
    idle_breakdown,
    launch_fanout,
    launch_stats,
    temporal_breakdown,
)
from otel_ext.analysis.table import Category, EventTable

SGLANG_DECODE = "tracelens_sglang_qwen3_8b_mi300x/sglang_Qwen3-8B_decode.json.gz"
VLLM_DECODE = "tracelens_vllm_mi300x/decode_full__graph_execution.json.gz"
VLLM_PIECEWISE = "tracelens_vllm_mi300x/prefilldecode_piecewise__graph_execution.json.gz"
DEEPSEEK = "deepseek_v3_train_ep64/train.json.gz"


def _load(shared_traces: Path, rel: str) -> EventTable:
    return load_paths([shared_traces / rel]).table


def _shares(table: EventTable) -> dict[str, float]:
    cp = critical_path(table, match_collectives(table))
    assert cp.length_ns > 0
    return {c: ns / cp.length_ns for c, ns in cp.by_category.items()}


@pytest.mark.parametrize("rel", [SGLANG_DECODE, VLLM_DECODE, VLLM_PIECEWISE])
def test_graph_replay_is_not_called_launch(shared_traces: Path, rel: str) -> None:
    table = _load(shared_traces, rel)
    shares = _shares(table)
    assert shares.get("launch", 0.0) < 0.03, shares
    cp = critical_path(table, match_collectives(table))
    # the replay the path passed through is named, with its size from the trace
    replays = graph_replays(table)
    assert cp.graph_replays, "a graph replay on the path"
    sizes = {g["launch_start_ns"]: g["kernels"] for g in replays["replays"]}
    for g in cp.graph_replays:
        assert g["launch"] == "hipGraphLaunch"
        assert sizes[g["launch_start_ns"]] == g["kernels"]
        assert 0 < g["kernels_on_path"] <= g["kernels"]


def test_sglang_decode_replay_size_and_launch_statistics(shared_traces: Path) -> None:
    """One launch, 544 kernels with its correlation id (counted independently here); launch
    delay statistics cover the replay's first kernel only, the queue holds all of them."""
    table = _load(shared_traces, SGLANG_DECODE)
    launched = table["correlation"][table["category"] == Category.KERNEL_COMPUTE]
    _values, counts = np.unique(launched, return_counts=True)
    biggest = int(counts.max())
    assert biggest > 500
    g = graph_replays(table)
    assert g["count"] == int((counts > 1).sum()) == 1
    assert g["replays"][0]["kernels"] == biggest
    (ls,) = launch_stats(table)
    assert ls.graph_launches == 1 and ls.graph_kernels == biggest
    assert ls.delayed == ls.launched - biggest + 1
    assert ls.queue_max >= biggest
    # the replay's kernels start after its launch began (a sound trace)
    fan = launch_fanout(table)
    assert int((fan > 1).sum()) == biggest
    assert ls.before_launch == 0


def test_idle_inside_a_replay_is_graph_wait(shared_traces: Path) -> None:
    table = _load(shared_traces, SGLANG_DECODE)
    rows = idle_breakdown(table)
    for r in rows:
        total = r.host_wait_ns + r.kernel_wait_ns + r.other_ns + r.graph_wait_ns
        assert total == r.idle_ns
    graph_stream = [r for r in rows if r.graph_wait_ns > 0]
    assert len(graph_stream) == 1
    # brute force: gaps between consecutive kernels of the replay on that stream
    fan = launch_fanout(table)
    sel = (fan > 1) & (table["stream"] == graph_stream[0].stream)
    s = np.sort(table["start_ns"][sel])
    e = table["end_ns"][sel][np.argsort(table["start_ns"][sel])]
    assert graph_stream[0].graph_wait_ns == int((s[1:] - e[:-1]).sum())


def test_device_bound_run_path_holds_device_work(shared_traces: Path) -> None:
    table = _load(shared_traces, DEEPSEEK)
    (tb,) = temporal_breakdown(table)
    assert tb.compute_pct > 90.0  # the device is the bottleneck
    shares = _shares(table)
    device = shares.get("compute", 0.0) + shares.get("communication", 0.0)
    assert device > 0.8, shares
    assert shares.get("host", 0.0) + shares.get("launch", 0.0) < 0.1, shares


def test_device_bound_share_is_the_switch(shared_traces: Path) -> None:
    """With the device-bound rule off (share above 1), the same trace's path is host-side: the
    rule, not something else, moves it onto the device."""
    table = _load(shared_traces, DEEPSEEK)
    cp = critical_path(table, match_collectives(table), device_bound_share=1.01)
    host = cp.by_category.get("host", 0) + cp.by_category.get("launch", 0)
    assert host / cp.length_ns > 0.5


def test_sync_call_hands_the_path_to_the_device_work_it_waited_for() -> None:
    C = Category
    t = EventTable.from_rows([
        dict(start_ns=0, end_ns=10, category=C.RUNTIME, correlation=1, rank=0, tid=1,
             name="cudaLaunchKernel"),
        dict(start_ns=12, end_ns=900, category=C.KERNEL_COMPUTE, correlation=1, rank=0,
             stream=7, name="gemm"),
        dict(start_ns=20, end_ns=910, category=C.RUNTIME, correlation=2, rank=0, tid=1,
             name="cudaDeviceSynchronize"),
    ])  # fmt: skip
    cp = critical_path(t, match_collectives(t))
    cats = [(s["category"], s["start_ns"], s["end_ns"]) for s in cp.segments]
    assert cats == [("launch", 0, 10), ("idle", 10, 12), ("compute", 12, 900), ("sync", 900, 910)]


def test_graph_kernels_after_the_first_are_queued_not_launched() -> None:
    C = Category
    rows = [dict(start_ns=0, end_ns=50, category=C.RUNTIME, correlation=5, rank=0, tid=1,
                 name="cudaGraphLaunch")]  # fmt: skip
    for k in range(4):
        rows.append(dict(start_ns=5 + 100 * k, end_ns=95 + 100 * k, category=C.KERNEL_COMPUTE,
                         correlation=5, rank=0, stream=7, name=f"k{k}"))  # fmt: skip
    t = EventTable.from_rows(rows)
    cp = critical_path(t, match_collectives(t))
    assert cp.by_category == {"compute": 360, "idle": 30, "queue": 5}
    assert cp.graph_replays[0]["kernels"] == 4 and cp.graph_replays[0]["kernels_on_path"] == 4
