"""The native (C++) recording kernels of ``TorchDistributedInstrumentor``.

Real gloo jobs (torch.multiprocessing, spawn): a full ring drops records and counts them while
sequence numbers, and so ids, stay aligned across ranks; spans keep the caller's context as
parent, on the workload thread and on another Python thread, and a forked child's copy of the
hook records nothing and never waits; symmetric-memory all-reduce has
a recording kernel, and a call through it (Meta-dispatched: its real kernels are CUDA-only)
records a span. In fresh interpreters: without a C++ compiler, or with
``OTEL_EXT_TORCH_NATIVE_HOOK=off``, the instrumentor uses the Python hook, says why, and still
traces. The loader's configuration parsing and cache key are unit-tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from conftest import require  # noqa: E402

from otel_ext.instrumentation.torch import _c10d_native  # noqa: E402

WORLD = 2
BURST = 10
CAPACITY = 4  # the ring holds 4 records (a power of two)


def _providers() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _collective_spans(exporter: Any) -> list[dict[str, Any]]:
    return [
        {
            "attributes": dict(s.attributes),
            "parent": s.parent.span_id if s.parent else None,
            "status": s.status.status_code.name,
        }
        for s in exporter.get_finished_spans()
        if s.name == "accel.collective"
    ]


def _worker(rank: int, port: int, out_dir: str) -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor
    from otel_ext.instrumentation.torch import _dist_hooks as H

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    provider, exporter = _providers()
    result: dict[str, Any] = {}
    # 1. A burst into a full ring: the poller is paused, so exactly CAPACITY records fit.
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider(), capacity=CAPACITY)
    result["native"] = inst.native
    state = inst._state
    assert state is not None and state.native is not None
    state.native.pause(True)
    t = torch.ones(4)
    for _ in range(BURST):
        dist.all_reduce(t)
    state.native.pause(False)
    result["flushed"] = inst.flush(30)
    result["dropped"] = inst.dropped
    dist.all_reduce(t)  # after the burst: its seq counts the dropped calls too
    inst.flush(30)
    result["burst"] = _collective_spans(exporter)
    inst.uninstrument()
    exporter.clear()

    # 2. Parents: the current span on the workload thread and on another Python thread.
    # symm_mem: the recording kernel at AutogradMeta too, so a Meta call goes through it.
    H._SYMM_MEM_KEYS = ("AutogradCUDA", "AutogradMeta")
    inst.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider())
    result["recording_ops"] = inst.recording_ops
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("step") as step:
        dist.all_reduce(t)
        result["step_span"] = step.get_span_context().span_id

    def other_thread() -> None:
        with tracer.start_as_current_span("thread-step") as span:
            dist.broadcast(t, src=0)
            result["thread_span"] = span.get_span_context().span_id

    th = threading.Thread(target=other_thread)
    th.start()
    th.join()
    dist.barrier()
    group_name = dist.group.WORLD.group_name
    meta = torch.empty(16, device="meta")
    out = torch.ops.symm_mem.one_shot_all_reduce(meta, "sum", group_name)
    result["meta_out"] = [str(out.device), list(out.shape)]
    inst.flush(30)
    result["spans"] = _collective_spans(exporter)
    result["dropped_after"] = inst.dropped
    inst.uninstrument()
    result["recording_after"] = inst.recording_ops
    # 3. A forked child: its copy of the hook has no poller; it records nothing, never waits.
    inst.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider())
    pid = os.fork()
    if pid == 0:
        child = inst._state
        ok = child is not None and child.native.forked() and inst.flush(5) is False
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    result["fork_child_exit"] = os.waitstatus_to_exitcode(status)
    result["parent_forked"] = inst._state.native.forked()  # type: ignore[union-attr]
    inst.uninstrument()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    provider.shutdown()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    require(
        _c10d_native.load() is not None,
        f"native collective hook ({_c10d_native.STATUS['reason']})",
    )
    out = tmp_path_factory.mktemp("native")
    mp.spawn(_worker, args=(free_port(), str(out)), nprocs=WORLD, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(180)
def test_full_ring_drops_are_counted_and_ids_stay_aligned(job: Any) -> None:
    for r in range(WORLD):
        res = job[r]
        assert res["native"] is True
        assert res["flushed"] is True
        assert res["dropped"] == BURST - CAPACITY
        seqs = [s["attributes"]["accel.collective.seq"] for s in res["burst"]]
        # the first CAPACITY calls were kept; the one after the burst is number BURST
        assert sorted(seqs) == [*range(CAPACITY), BURST]
        ids = sorted(s["attributes"]["accel.collective.id"] for s in res["burst"])
        assert ids == sorted(f"default_pg:{q}" for q in [*range(CAPACITY), BURST])
    assert {s["attributes"]["accel.collective.id"] for s in job[0]["burst"]} == {
        s["attributes"]["accel.collective.id"] for s in job[1]["burst"]
    }


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_spans_keep_the_callers_context_on_every_thread(job: Any) -> None:
    for r in range(WORLD):
        res = job[r]
        by_op = {
            s["attributes"]["accel.collective.op"]: s
            for s in res["spans"]
            if not s["attributes"]["accel.device.id"].endswith("/meta")
        }
        assert len(by_op) == 3
        assert by_op["all_reduce"]["parent"] == res["step_span"]
        assert by_op["broadcast"]["parent"] == res["thread_span"]
        assert by_op["barrier"]["parent"] is None
        assert res["dropped_after"] == 0
        assert res["fork_child_exit"] == 0 and res["parent_forked"] is False


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_symmetric_memory_all_reduce_is_hooked_and_recorded(job: Any) -> None:
    for r in range(WORLD):
        res = job[r]
        hooked = set(res["recording_ops"])
        assert {
            "c10d::allreduce_",
            "symm_mem::one_shot_all_reduce",
            "symm_mem::two_shot_all_reduce_",
            "symm_mem::multimem_all_reduce_",
        } <= hooked
        assert res["recording_after"] == []
        assert res["meta_out"] == ["meta", [16]]
        (symm,) = [
            s
            for s in res["spans"]
            if s["attributes"]["accel.collective.op"] == "all_reduce"
            and s["attributes"]["accel.device.id"].endswith("/meta")
        ]
        a = symm["attributes"]
        # after all_reduce (0), broadcast (1) and barrier (2) on the same group
        assert {k: a[k] for k in a if not k.endswith("_ns") and "bw" not in k} == {
            "accel.collective.op": "all_reduce",
            "accel.collective.group": "default_pg",
            "accel.collective.group_size": WORLD,
            "accel.collective.rank": r,
            "accel.collective.bytes": 16 * 4,
            "accel.collective.seq": 3,
            "accel.collective.id": "default_pg:3",
            "accel.collective.dtype": "float32",
            "accel.collective.timing": "enqueue",
            "accel.host.id": a["accel.host.id"],
            "accel.device.id": a["accel.device.id"],
            "accel.rank": r,
        }
        assert a["accel.collective.enqueue_start_ns"] <= a["accel.collective.enqueue_end_ns"]


_FALLBACK_SCRIPT = textwrap.dedent(
    """
    import json, os, socket
    import torch, torch.distributed as dist
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor, _c10d_native

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider())
    dist.all_reduce(torch.ones(3))
    inst.flush(30)
    spans = [dict(s.attributes) for s in exporter.get_finished_spans()]
    print(json.dumps({"native": inst.native, "status": _c10d_native.STATUS,
                      "ops": [a["accel.collective.op"] for a in spans],
                      "seqs": [a["accel.collective.seq"] for a in spans]}))
    inst.uninstrument()
    dist.destroy_process_group()
    """
)


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("why", ["no compiler", "off"])
def test_python_hook_when_native_unavailable(why: str, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["OTEL_EXT_NATIVE_CACHE"] = str(tmp_path / "cache")  # empty: a build would be needed
    if why == "no compiler":
        empty = tmp_path / "bin"
        empty.mkdir()
        env["PATH"] = str(empty)
        env.pop("CXX", None)
    else:
        env["OTEL_EXT_TORCH_NATIVE_HOOK"] = "off"
    proc = subprocess.run(
        [sys.executable, "-c", _FALLBACK_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["native"] is False
    assert out["ops"] == ["all_reduce"] and out["seqs"] == [0]
    if why == "no compiler":
        assert out["status"] == {
            "state": "unavailable",
            "reason": "RuntimeError: no C++ compiler found (CXX, c++, g++, clang++)",
        }
        assert "native collective hook unavailable" in proc.stderr
    else:
        assert out["status"] == {"state": "off", "reason": "OTEL_EXT_TORCH_NATIVE_HOOK=off"}
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.so"))


def test_mode_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXT_TORCH_NATIVE_HOOK", raising=False)
    assert _c10d_native.mode() == "auto"
    for value, expected in (("", "auto"), ("OFF", "off"), (" cached ", "cached")):
        monkeypatch.setenv("OTEL_EXT_TORCH_NATIVE_HOOK", value)
        assert _c10d_native.mode() == expected
    monkeypatch.setenv("OTEL_EXT_TORCH_NATIVE_HOOK", "fast")
    assert _c10d_native.mode() == "auto"


def test_cache_key_changes_with_source_torch_and_python() -> None:
    base = _c10d_native.cache_key("src", torch_version="2.13.0", python="cpython-311")
    assert len(base) == 16
    assert base != _c10d_native.cache_key("src2", torch_version="2.13.0", python="cpython-311")
    assert base != _c10d_native.cache_key("src", torch_version="2.14.0", python="cpython-311")
    assert base != _c10d_native.cache_key("src", torch_version="2.13.0", python="cpython-312")


def test_native_cuda_record_becomes_device_timing() -> None:
    """The Python half of the native CUDA path (the C++ half needs a GPU: gpu_check)."""
    from otel_ext.instrumentation.torch._distributed import _native_device_timing

    def record(device_ns: int, uncertainty: float | None) -> tuple[Any, ...]:
        fields: list[Any] = [0] * 21
        fields[10], fields[14], fields[15], fields[20] = "cuda:1", 10_000, uncertainty, device_ns
        return tuple(fields)

    timing = _native_device_timing(record(2_500, 250.0))
    assert timing is not None
    assert (timing.start_ns, timing.end_ns, timing.uncertainty_ns) == (7_500, 10_000, 250.0)
    assert (timing.domain, timing.raw_start_ticks, timing.raw_end_ticks) == (
        "cuda:1/nccl-work-events",
        0,
        2_500,
    )
    assert _native_device_timing(record(-1, 250.0)) is None  # not timed (gloo, CPU)
    assert _native_device_timing(record(2_500, None)) is None  # never observed complete


_EXIT_SCRIPT = textwrap.dedent(
    """
    import socket, sys
    import torch, torch.distributed as dist
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from otel_ext.exporters import OtlpJsonFileSpanExporter
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    provider = TracerProvider()  # its own exit hook shuts it down (registered first, runs last)
    provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileSpanExporter(sys.argv[1])))
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider())
    print("native", inst.native, flush=True)
    dist.all_reduce(torch.ones(3))
    # no flush, no uninstrument, no shutdown: the process just ends
    """
)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_process_that_just_exits_keeps_its_spans_and_exits_cleanly(tmp_path: Path) -> None:
    """The poller and the drain thread stop before the interpreter finalises (an exit hook):
    no abort at exit (a daemon thread torn down inside the native drain once did), and the
    collective still in flight becomes a span that the SDK exports on its way out."""
    from otel_ext.exporters import read_spans

    out = tmp_path / "traces.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(out)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr
    require("native True" in proc.stdout, f"native hook not loaded: {_c10d_native.STATUS}")
    spans = [s for s in read_spans(out) if s.name == "accel.collective"]
    assert [s.attributes["accel.collective.op"] for s in spans] == ["all_reduce"]


def _last_json_line(script: str) -> Any:
    """Run ``script`` in a fresh interpreter; it must succeed; its last line, as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: a one-rank gloo group, an in-memory span exporter and an instrumentor (``inst``)
_ONE_RANK = textwrap.dedent(
    """
    import json, os, socket, sys, time
    import torch, torch.distributed as dist
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = TorchDistributedInstrumentor()
    """
)

_DRAIN_INTERVAL_SCRIPT = _ONE_RANK + textwrap.dedent(
    """
    inst.instrument(tracer_provider=provider, drain_interval_s=3600)
    native = inst.native
    t = torch.ones(8)
    for _ in range(5):
        dist.all_reduce(t)
    time.sleep(0.3)  # several of the drain's 50 ms looks: nothing is due yet
    before = len(exporter.get_finished_spans())
    flushed = inst.flush(20)
    after = [s.attributes["accel.collective.seq"] for s in exporter.get_finished_spans()]
    inst.uninstrument()
    print(json.dumps({"native": native, "before": before, "flushed": flushed, "after": after}))
    """
)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_long_drain_interval_holds_spans_until_flush_and_never_blocks_it() -> None:
    """``drain_interval_s``: records wait in the ring for the interval; ``flush()`` makes them
    at once (it used to wait for the drain thread, which held its lock while waiting, for the
    whole interval), and ``uninstrument()`` stops the drain without waiting for it."""
    got = _last_json_line(_DRAIN_INTERVAL_SCRIPT)
    require(got["native"], f"native hook not loaded: {_c10d_native.STATUS}")
    assert got["before"] == 0
    assert got["flushed"] is True
    assert got["after"] == [0, 1, 2, 3, 4]


def test_drain_interval_is_checked() -> None:
    from otel_ext.errors import ConfigError
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    inst = TorchDistributedInstrumentor()
    for bad in (0, -1, "soon", 7200):
        with pytest.raises(ConfigError, match="drain_interval_s"):
            inst.instrument(drain_interval_s=bad)
        assert not inst.is_instrumented_by_opentelemetry


_TOGGLE_SCRIPT = _ONE_RANK + textwrap.dedent(
    """
    inst.instrument(tracer_provider=provider)
    native = inst.native
    t = torch.ones(8)
    state = inst._state
    dist.all_reduce(t)
    state.set_native_kernels(False)
    state.set_native_kernels(False)  # twice: still out, no error
    for _ in range(3):
        dist.all_reduce(t)
    t.fill_(2.0); dist.all_reduce(t); out_value = t.tolist()
    state.set_native_kernels(True)
    state.set_native_kernels(True)  # twice: registered once
    dist.all_reduce(t); dist.all_reduce(t, async_op=True).wait()
    inst.flush(20)
    seqs = [s.attributes["accel.collective.seq"] for s in exporter.get_finished_spans()]
    inst.uninstrument()
    print(json.dumps({"native": native, "seqs": seqs, "out_value": out_value}))
    """
)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_kernels_taken_out_record_nothing_and_put_back_record_again() -> None:
    """``_CollectiveRecording.set_native_kernels`` (the paired benchmark's bare windows): with the kernels
    out the collectives run as uninstrumented (same result) and are neither recorded nor
    sequenced; put back, recording goes on from the next sequence number."""
    got = _last_json_line(_TOGGLE_SCRIPT)
    require(got["native"], f"native hook not loaded: {_c10d_native.STATUS}")
    assert got["out_value"] == [2.0] * 8
    assert got["seqs"] == [0, 1, 2]
