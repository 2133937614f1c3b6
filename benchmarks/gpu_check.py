"""Real-GPU check of what the CPU test suite can only fake (one script, under 5 minutes).

Run on a machine with an NVIDIA GPU: ``python benchmarks/gpu_check.py [--out DIR]``.
Without CUDA it prints one line saying so and exits with status 2; no test depends on it.

Four checks, each printed as ``PASS``/``FAIL`` with its figures:

1. **NVML source vs nvidia-smi**: ``NvmlSource`` samples (memory used, power, SM clock,
   temperature) against ``nvidia-smi --query-gpu`` read just before and after.
2. **Layer span device time vs torch.cuda.Event**: a CUDA ``nn.Linear`` traced by
   ``TorchLayerInstrumentor`` (eager mode records a CUDA event pair per layer and emits an
   ``accel.kernel`` child span); its duration against our own events around the same call.
3. **NCCL all-reduce, world size 1**: the ``accel.collective`` span's device duration
   (``CudaCollectiveTimer``: PyTorch's per-work timing) against CUDA events recorded on the
   current stream around a synchronised call, and against its enqueue time (the issuing
   call), which on NCCL is far shorter than the device time for a large payload.
4. **Kineto trace**: checks 2 and 3 run under ``torch.profiler`` (CPU + CUDA activities);
   that trace, exported as a Chrome trace, is loaded by ``otel-ext analyze`` (must exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS: list[tuple[str, bool, str]] = []


def _report(name: str, ok: bool, detail: str) -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)


def _smi() -> dict[str, float]:
    fields = "memory.used,power.draw,clocks.sm,temperature.gpu"
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    mem, power, sm, temp = (float(v) for v in out.split(","))
    return {"memory_bytes": mem * 2**20, "power_w": power, "sm_hz": sm * 1e6, "temp_c": temp}


def check_nvml() -> None:
    from otel_ext.counters import NvmlSource
    from otel_ext.semconv import metrics as M

    if shutil.which("nvidia-smi") is None:
        _report("nvml vs nvidia-smi", False, "nvidia-smi not found")
        return
    before = _smi()
    source = NvmlSource(indices=[0])
    samples = source.sample()
    after = _smi()
    got = {s.metric: float(s.value) for s in samples if not hasattr(s.value, "buckets")}  # type: ignore[arg-type]
    pairs = [
        ("memory_bytes", M.METRIC_HW_GPU_MEMORY_USAGE, 0.05, 64 * 2**20),
        ("power_w", M.METRIC_HW_POWER, 0.25, 15.0),
        ("sm_hz", M.METRIC_ACCEL_DEVICE_CLOCK_FREQUENCY, 0.10, 50e6),
        ("temp_c", M.METRIC_HW_TEMPERATURE, 0.0, 3.0),
    ]
    for key, metric, rel, absolute in pairs:
        if metric not in got:
            _report(f"nvml {key}", False, f"{metric} not sampled")
            continue
        lo = min(before[key], after[key])
        hi = max(before[key], after[key])
        slack = max(rel * hi, absolute)
        value = got[metric]
        ok = lo - slack <= value <= hi + slack
        _report(f"nvml {key}", ok, f"NvmlSource {value:.4g}, nvidia-smi {lo:.4g}..{hi:.4g}")


def _provider() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def check_layer(torch: Any) -> None:
    from otel_ext.instrumentation.torch import TorchLayerInstrumentor

    provider, exporter = _provider()
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192)).cuda()
    x = torch.randn(4096, 8192, device="cuda")
    for _ in range(3):
        model(x)
    torch.cuda.synchronize()
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model)
    try:
        ours = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            ours.append(start.elapsed_time(end) * 1e6)
        inst.flush()
    finally:
        inst.uninstrument()
    kernels = [
        s
        for s in exporter.get_finished_spans()
        if s.name == "accel.kernel" and s.attributes.get("accel.kernel.name") == "0"
    ]
    if len(kernels) != 5:
        _report("layer device time", False, f"{len(kernels)} accel.kernel spans for layer 0")
        return
    spans = sorted(s.end_time - s.start_time for s in kernels)
    ref = sorted(ours)
    med_span, med_ref = spans[2], ref[2]
    ok = abs(med_span - med_ref) <= 0.10 * med_ref + 20_000
    _report(
        "layer device time",
        ok,
        f"span median {med_span / 1e6:.3f} ms vs torch.cuda.Event {med_ref / 1e6:.3f} ms",
    )


def check_nccl(torch: Any) -> None:
    import torch.distributed as dist

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    provider, exporter = _provider()
    t = torch.ones(64 * 2**20 // 4, device="cuda")  # 64 MiB
    busy = torch.randn(8192, 8192, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        ours = []
        for _ in range(5):
            busy @ busy  # queue work first: the all-reduce's enqueue returns long before it runs
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(t)
            end.record()
            torch.cuda.synchronize()
            ours.append(start.elapsed_time(end) * 1e6)
        inst.flush(60)
    finally:
        inst.uninstrument()
        dist.destroy_process_group()
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes.get("accel.collective.op") == "all_reduce"
    ]
    if len(spans) != 5:
        _report("nccl device time", False, f"{len(spans)} all_reduce spans")
        return
    timing = {s.attributes.get("accel.collective.timing") for s in spans}
    device = sorted(s.end_time - s.start_time for s in spans)[2]
    enqueue = sorted(
        s.attributes["accel.collective.enqueue_end_ns"]
        - s.attributes["accel.collective.enqueue_start_ns"]
        for s in spans
    )[2]
    ref = sorted(ours)[2]
    _report("nccl span timed on device", timing == {"device"}, f"accel.collective.timing {timing}")
    # the reference events also cover the wait the collective's stream does for the matmul
    # queued before it: the device duration must not exceed it
    _report(
        "nccl device duration vs CUDA events",
        0 < device <= ref * 1.05 + 20_000,
        f"span {device / 1e6:.3f} ms, events around the call {ref / 1e6:.3f} ms",
    )
    _report(
        "nccl device vs enqueue",
        enqueue < device,
        f"enqueue {enqueue / 1e3:.1f} us vs device {device / 1e3:.1f} us",
    )


def check_kineto(torch: Any, out: Path, prof: Any) -> None:
    """Export the profile of checks 2 and 3 (the same run) and load it with ``otel-ext analyze``."""
    trace = out / "gpu_check_kineto.json"
    prof.export_chrome_trace(str(trace))
    exe = shutil.which("otel-ext") or str(Path(sys.executable).with_name("otel-ext"))
    done = subprocess.run(
        [exe, "analyze", str(trace), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    ok = done.returncode == 0
    detail = f"exit {done.returncode}"
    if ok:
        try:
            doc = json.loads(done.stdout)
            detail += f", top-level keys {sorted(doc)[:6]}"
        except json.JSONDecodeError:
            ok, detail = False, "exit 0 but output is not JSON"
    else:
        detail += f": {done.stderr.strip()[-300:]}"
    _report("kineto trace loaded by otel-ext analyze", ok, detail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for the Kineto trace")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_check: PyTorch is not installed; nothing to check.")
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
              "run it on a GPU machine.")  # fmt: skip
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="otel-ext-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    print(f"gpu_check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    from torch.profiler import ProfilerActivity, profile

    def guarded(name: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:  # one failed check must not hide the others
            _report(name, False, f"{type(exc).__name__}: {exc}")

    guarded("nvml", check_nvml)
    # Checks 2 and 3 run under the PyTorch profiler: its Kineto trace is check 4's input.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        guarded("layer", lambda: check_layer(torch))
        guarded("nccl", lambda: check_nccl(torch))
    guarded("kineto", lambda: check_kineto(torch, out, prof))
    failed = [r for r in RESULTS if not r[1]]
    print(
        f"gpu_check: {len(RESULTS) - len(failed)}/{len(RESULTS)} passed "
        f"in {time.monotonic() - t0:.0f} s (trace in {out})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
    sys.exit(main())
