"""Collective span overhead: instrumented vs bare gloo ``all_reduce`` (2 ranks, CPU).

Run: ``python benchmarks/instrumentation_collectives.py [--iters 400] [--elements 1024]``.
Rank 0 prints the per-call time of the bare call and of the instrumented call (sync and
``async_op=True`` + ``wait()``), with the ratio, measured in the same run.
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


def _per_call(fn: Callable[[], object], iters: int) -> float:
    samples = []
    for _ in range(5):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def _rank(rank: int, port: int, iters: int, elements: int) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.ones(elements)
    sync = lambda: dist.all_reduce(t)  # noqa: E731
    async_ = lambda: dist.all_reduce(t, async_op=True).wait()  # noqa: E731
    sync()
    bare_sync, bare_async = _per_call(sync, iters), _per_call(async_, iters)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=1 << 16))
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=provider)
    inst_sync, inst_async = _per_call(sync, iters), _per_call(async_, iters)
    inst.uninstrument()
    if rank == 0:
        print(f"gloo all_reduce, 2 ranks, {elements} float32, {iters} calls x 5 (median)")
        print(f"{'call':28s} {'bare us':>9s} {'traced us':>10s} {'ratio':>7s} {'added us':>9s}")
        for name, b, i in (
            ("sync", bare_sync, inst_sync),
            ("async_op=True + wait()", bare_async, inst_async),
        ):
            print(f"{name:28s} {b * 1e6:9.1f} {i * 1e6:10.1f} {i / b:6.2f}x {(i - b) * 1e6:9.1f}")
    dist.destroy_process_group()
    provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--elements", type=int, default=1024)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, args.iters, args.elements), nprocs=2, join=True)


if __name__ == "__main__":
    main()
