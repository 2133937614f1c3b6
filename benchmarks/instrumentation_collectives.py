"""Workload-thread cost of collective tracing: bare vs instrumented vs instrumented + metrics.

Run: ``python benchmarks/instrumentation_collectives.py [--world 2] [--iters 300]``.
Every rank runs gloo ``all_reduce`` (sync) of 1 KiB and 1 MiB float32 payloads, in these
configurations measured in the same run, interleaved round by round (median of the rounds):

* ``bare``: uninstrumented;
* ``kernel only``: a pass-through Python kernel registered the way the Python hook is
  (``torch.library`` ``impl`` on ``c10d::allreduce_`` at ``AutogradCPU``, continuing with
  ``redispatch``), recording nothing: the floor of any Python-level hook below the wrappers;
* ``no-op providers``: ``TorchDistributedInstrumentor`` (native kernels) with a no-op tracer
  and meter: the hook, the C++ poller and the drain, without the SDK's span and metric work;
* ``traced``: the same with an SDK tracer provider (batch processor) and a no-op meter;
* ``traced+metrics``: the same with an SDK ``MeterProvider`` (in-memory reader): the issue's
  figure (target: at most 3 us added per call on the workload thread);
* ``python hook+metrics``: ``traced+metrics`` with ``native=False`` (the fallback without a
  compiler).

Two figures per call: **wall** (what the call takes, waiting for the peers included) and
**workload-thread CPU** (``time.thread_time_ns`` of the calling thread: what the workload
thread itself executes; spans and metrics are made on background threads and do not count).
The added cost is the difference to ``bare``; rank 0 prints it with the ratio.

Last, **Python hot path alone**: the Python recording kernel called directly in a loop, with a
stub in place of the original kernel and a consumer that discards the records (the fallback's
own code, without the dispatcher's boxing and without background threads).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = {"1 KiB": 256, "1 MiB": 256 * 1024}


def _per_call(fn: Callable[[], object], iters: int) -> tuple[float, float]:
    """``(wall us, thread-CPU us)`` per call, one round."""
    dist.barrier()
    w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(iters):
        fn()
    c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
    return (w1 - w0) / iters / 1e3, (c1 - c0) / iters / 1e3


def _passthrough_kernel() -> object:
    import warnings

    op = torch.ops.c10d.allreduce_.default
    redispatch, below = op.redispatch, torch._C._after_autograd_keyset

    def kernel(keyset: object, *args: object) -> object:
        return redispatch(keyset & below, *args)  # type: ignore[operator]

    lib = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("allreduce_", kernel, "AutogradCPU", with_keyset=True)
    return lib


def _rank(rank: int, world: int, port: int, iters: int, rounds: int, only: str) -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import NoOpTracerProvider

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    configs: dict[str, tuple[object, bool]] = {
        "bare": (None, True),
        "kernel only": ("passthrough", True),
        "no-op providers": ("noop", True),
        "traced": (NoOpMeterProvider(), True),
        "traced+metrics": (meters, True),
        "python hook+metrics": (meters, False),
    }
    if only:
        wanted = {"bare", *only.split(",")}
        configs = {k: v for k, v in configs.items() if k in wanted}
    inst = TorchDistributedInstrumentor()
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for label, n in SIZES.items():
        t = torch.ones(n)

        def call(t: torch.Tensor = t) -> None:
            dist.all_reduce(t)

        for _ in range(20):
            call()
        for _ in range(rounds):
            for name, (meter, native) in configs.items():
                if meter == "passthrough":
                    lib = _passthrough_kernel()
                    results.setdefault((label, name), []).append(_per_call(call, iters))
                    lib._destroy()
                    continue
                if meter == "noop":
                    inst.instrument(
                        tracer_provider=NoOpTracerProvider(),
                        meter_provider=NoOpMeterProvider(),
                        native=native,
                    )
                elif meter is not None:
                    inst.instrument(tracer_provider=provider, meter_provider=meter, native=native)
                    if native and not inst.native:
                        raise SystemExit("native hook unavailable: " + str(_native_status()))
                results.setdefault((label, name), []).append(_per_call(call, iters))
                if meter is not None:
                    inst.flush(60)
                    inst.uninstrument()
                    exporter.clear()
    if rank == 0:
        print(
            f"gloo all_reduce (sync), {world} rank(s), {iters} calls x {rounds} rounds; "
            "medians over rounds; added = median over rounds of (config - bare) in the same "
            "round (paired, interleaved)"
        )
        head = f"{'payload':8s} {'config':20s} {'wall us':>9s} {'added':>8s} {'ratio':>6s}"
        print(f"{head} {'thread-CPU us':>14s} {'added':>8s}")
        for label in SIZES:
            base = results[(label, "bare")]
            for name in configs:
                mine = results[(label, name)]
                w = statistics.median(r[0] for r in mine)
                c = statistics.median(r[1] for r in mine)
                dw = statistics.median(m[0] - b[0] for m, b in zip(mine, base, strict=True))
                dc = statistics.median(m[1] - b[1] for m, b in zip(mine, base, strict=True))
                ratio = w / statistics.median(r[0] for r in base)
                print(f"{label:8s} {name:20s} {w:9.1f} {dw:8.1f} {ratio:5.2f}x {c:14.1f} {dc:8.1f}")
        _hot_path_alone(provider, iters * rounds)
    dist.destroy_process_group()
    provider.shutdown()
    meters.shutdown()


def _native_status() -> dict[str, str]:
    from otel_ext.instrumentation.torch import _c10d_native

    return _c10d_native.STATUS


def _hot_path_alone(provider: object, n: int) -> None:
    from otel_ext.instrumentation.deferred import BoundedHandoff
    from otel_ext.instrumentation.torch import _distributed as D

    class _Stub:
        def __init__(self, result: object):
            self.result = result

        def redispatch(self, keyset: object, *args: object) -> object:
            return self.result

    state = D._State(
        tracer_provider=provider,
        meter_provider=None,
        link_provider=None,
        device=None,
        host_id=None,
        timer=None,
        capacity=1 << 20,
    )
    state.tracker.close()
    state.tracker = BoundedHandoff(lambda batch: None, capacity=1 << 20, name="discard")
    args = ([torch.ones(4)], object(), object(), None, False)
    stub = _Stub(([args[0][0]], object()))
    stub_kernel = stub.redispatch
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)
    kernel = state.kernel(D._OPS["allreduce_"], stub)
    samples = {"stub alone": [], "recording kernel": []}
    for _ in range(5):
        for name, fn in (("stub alone", stub_kernel), ("recording kernel", kernel)):
            c0 = time.thread_time_ns()
            for _ in range(n):
                fn(keyset, *args)
            samples[name].append((time.thread_time_ns() - c0) / n / 1e3)
    base = statistics.median(samples["stub alone"])
    rec = statistics.median(samples["recording kernel"])
    print(
        f"Python hot path alone ({n} calls x 5, median, thread-CPU): stub {base:.2f} us, "
        f"recording kernel {rec:.2f} us, added {rec - base:.2f} us per collective"
    )
    state.close(5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--configs", default="", help="comma-separated subset (bare is always measured)"
    )
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(
        _rank,
        args=(args.world, port, args.iters, args.rounds, args.configs),
        nprocs=args.world,
        join=True,
    )


if __name__ == "__main__":
    main()
