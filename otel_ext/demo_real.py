"""``otel-ext demo --real``: a real PyTorch model, on the CPU, across gloo processes.

Each process is one rank of a tensor-parallel decoder (Megatron-style: attention heads and
MLP columns split across ranks, an ``all_reduce`` after each attention and MLP block) that
serves a few batches of requests (a prefill forward, then greedy decode steps). The real
``TorchLayerInstrumentor`` and ``TorchDistributedInstrumentor`` trace it; each rank writes
OTLP-JSON through the project's file exporter; the analysis then reads those files exactly as
it reads the simulated cluster's.

A straggler is injected unless ``--fault none``: the chosen rank's attention and MLP shards
take 3× as long (at least 2 ms more) (default: a rank drawn from the seed), so the analysis has a true cause to find
and ``truth.json`` records it. Every process runs on this machine and stamps its spans with
this machine's clock, so all ranks are named on one host: ``host0/rank{rank}``.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from otel_ext.errors import ConfigError

__all__ = ["device_of_rank", "run_real", "run_workload"]

VOCAB, DIM, HEADS, LAYERS, PROMPT, DECODE, BATCH = 256, 128, 8, 4, 32, 8, 4


def device_of_rank(rank: int) -> tuple[str, str]:
    """``(host, device)`` names of a rank (every rank runs on this one machine).

    >>> device_of_rank(3)
    ('host0', 'host0/rank3')
    """
    return "host0", f"host0/rank{rank}"


def _build_model(world: int, rank: int, slow_factor: float) -> Any:
    """This rank's shard of the decoder, in eval mode: replicated parts identical on every
    rank (seed 0), each rank's attention and MLP shards its own (seed ``1 + rank``)."""
    import torch
    from torch import nn

    slow_down = _straggler_delay(slow_factor)
    block_class = _block_class(_attention_class(world, slow_down), _mlp_class(world, slow_down))
    torch.manual_seed(0)  # replicated parts identical on every rank
    model = _decoder_class(block_class)()
    torch.manual_seed(1 + rank)  # each rank's shard its own
    for block in list(model.blocks):
        for p in list(block.attn.parameters()) + list(block.mlp.parameters()):
            nn.init.normal_(p, std=0.02)
    return model.eval()


def _straggler_delay(slow_factor: float) -> Callable[[float], None]:
    """What a sharded block calls at its end with its start time: the injected straggler.

    On this rank, every sharded block takes ``slow_factor`` times as long (at least 2 ms more
    at 3x), as on a slow chip: the host thread waits (it does not spin, which on a shared
    CPU would slow its neighbours instead), so the rank arrives late at the all-reduce that
    follows.
    """

    def slow_down(t0: float) -> None:
        if slow_factor > 1.0:
            time.sleep((slow_factor - 1.0) * max(time.perf_counter() - t0, 1e-3))

    return slow_down


def _attention_class(world: int, slow_down: Callable[[float], None]) -> type:
    """``ShardedAttention``: this rank's heads (``HEADS // world``), then an all-reduce."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    heads = HEADS // world

    class ShardedAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(DIM, 3 * heads * (DIM // HEADS))
            self.out = nn.Linear(heads * (DIM // HEADS), DIM, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t0 = time.perf_counter()
            b, s, _ = x.shape
            hd = DIM // HEADS
            q, k, v = (
                t.reshape(b, s, heads, hd).transpose(1, 2)
                for t in self.qkv(x).split(heads * hd, -1)
            )
            o = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1)
            y = self.out(o.transpose(1, 2).reshape(b, s, heads * hd))
            slow_down(t0)
            dist.all_reduce(y)
            return y

    return ShardedAttention


def _mlp_class(world: int, slow_down: Callable[[float], None]) -> type:
    """``ShardedMlp``: this rank's columns of the MLP (``4 * DIM // world``), then an
    all-reduce."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    hidden = 4 * DIM // world

    class ShardedMlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(DIM, hidden)
            self.down = nn.Linear(hidden, DIM, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t0 = time.perf_counter()
            y = self.down(F.gelu(self.up(x)))
            slow_down(t0)
            dist.all_reduce(y)
            return y

    return ShardedMlp


def _block_class(attention: type, mlp: type) -> type:
    """``Block``: pre-norm attention and MLP, each with its residual."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(DIM)
            self.attn = attention()
            self.norm2 = nn.LayerNorm(DIM)
            self.mlp = mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    return Block


def _decoder_class(block: type) -> type:
    """``Decoder``: embedding, ``LAYERS`` blocks, final norm and the vocabulary head."""
    import torch
    from torch import nn

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.blocks = nn.ModuleList([block() for _ in range(LAYERS)])
            self.norm = nn.LayerNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))

    return Decoder


def run_workload(
    rank: int, world: int, port: int, steps: int, out_dir: str, slow_rank: int, factor: float
) -> None:
    """One rank's process: init gloo, instrument, serve ``steps`` batches, write telemetry."""
    import torch
    import torch.distributed as dist
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_ext.exporters import OtlpJsonFileMetricExporter, OtlpJsonFileSpanExporter
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor, TorchLayerInstrumentor
    from otel_ext.semconv import attributes as A

    torch.set_num_threads(1)
    host, device = device_of_rank(rank)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    resource = Resource.create(
        {
            "service.name": "otel-ext-demo-real",
            A.ACCEL_RANK: rank,
            A.ACCEL_WORLD_SIZE: world,
            A.ACCEL_HOST_ID: host,
            A.ACCEL_DEVICE_ID: device,
            A.ACCEL_DEVICE_KIND: "cpu",
        }
    )
    provider = TracerProvider(resource=resource)
    meters = MeterProvider(
        resource=resource,
        metric_readers=[
            PeriodicExportingMetricReader(
                OtlpJsonFileMetricExporter(Path(out_dir, f"metrics-rank{rank}.jsonl")),
                export_interval_millis=1000,
            )
        ],
    )
    provider.add_span_processor(
        BatchSpanProcessor(OtlpJsonFileSpanExporter(Path(out_dir, f"traces-rank{rank}.jsonl")))
    )
    model = _build_model(world, rank, factor if rank == slow_rank else 1.0)
    layers = TorchLayerInstrumentor()
    comms = TorchDistributedInstrumentor()
    comms.instrument(tracer_provider=provider, meter_provider=meters, host_id=host)
    layers.instrument(
        tracer_provider=provider, model=model, max_depth=2, host_id=host, rank=rank, device=device
    )
    tracer = provider.get_tracer("otel_ext.demo_real")
    gen = torch.Generator().manual_seed(7)  # same prompts on every rank (tensor parallel)
    try:
        with torch.no_grad():
            for step in range(steps):
                with tracer.start_as_current_span(f"batch {step}"):
                    ids = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=gen)
                    with tracer.start_as_current_span("prefill"):
                        logits = model(ids)
                    for _ in range(DECODE):
                        nxt = logits[:, -1:].argmax(-1)
                        with tracer.start_as_current_span("decode"):
                            logits = model(nxt)
        dist.barrier()
    finally:
        layers.uninstrument()
        comms.uninstrument()
        provider.shutdown()
        meters.shutdown()
        dist.destroy_process_group()


def run_real(args: argparse.Namespace) -> int:
    """``otel-ext demo --real``: run, analyse and report; returns the exit status."""
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise ConfigError(
            "--real needs PyTorch: pip install torch==2.13.0 (or `make venv`)"
        ) from None
    from otel_ext.demo_report import analyze_run, clock_summary, print_report

    world = args.ranks
    if world < 2 or HEADS % world or (4 * DIM) % world:
        raise ConfigError(f"--ranks must be 2, 4 or 8 for the real model (got {world})")
    if args.steps < 1:
        raise ConfigError("--steps must be at least 1")
    specs = args.fault or []
    slow_rank, factor = -1, 1.0
    if specs == ["none"]:
        pass
    elif specs:
        if len(specs) != 1 or not specs[0].startswith("straggler@"):
            raise ConfigError("--real injects only one straggler@host0/rankN fault (or 'none')")
        target = specs[0].split("@", 1)[1]
        names = {device_of_rank(r)[1]: r for r in range(world)}
        if target not in names:
            raise ConfigError(f"no rank runs {target} (ranks: {', '.join(names)})")
        slow_rank, factor = names[target], 3.0
    else:
        slow_rank, factor = random.Random(f"otel-ext-demo-real:{args.seed}").randrange(world), 3.0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for pattern in ("traces-rank*.jsonl", "metrics-rank*.jsonl"):
        for old in out.glob(pattern):
            old.unlink()
    err = sys.stderr
    cluster = (
        f"{world} gloo ranks on this CPU (real PyTorch {LAYERS}-block tensor-parallel decoder)"
    )
    print(f"otel-ext demo --real: {cluster}, {args.steps} batches", file=err, flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    mp.spawn(
        run_workload,
        args=(world, port, args.steps, str(out), slow_rank, factor),
        nprocs=world,
        join=True,
    )
    print(f"  ran in {time.perf_counter() - started:.1f} s", file=err, flush=True)
    truth = {
        "schema": "otel-ext.truth/1",
        "source": "otel-ext demo --real",
        "faults": (
            [{"kind": "straggler", "target": device_of_rank(slow_rank)[1], "factor": factor}]
            if slow_rank >= 0
            else []
        ),
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    doc = analyze_run(out, err)
    clock = clock_summary(doc, out)
    print_report(
        doc, out=out, files={}, cluster=cluster, clock=clock, metrics_url=None, stream=sys.stdout
    )
    return 0
