"""A small transformer trained data-parallel across N gloo ranks, traced per layer and per collective.

Each rank runs a tiny decoder-style transformer on CPU with ``TorchLayerInstrumentor``
(forward and backward layer spans, FLOP/byte estimates) and ``TorchDistributedInstrumentor``
(gradient all-reduces, a broadcast of the initial weights, a barrier), under one ``step``
span per training step, and writes its spans as OTLP-JSON lines to
``OUT_DIR/rank<R>/traces.jsonl`` (the exporters' ``OtlpJsonFileSpanExporter``).

Run: ``python examples/torch_model.py --world-size 4 --steps 3 --out-dir /tmp/otel-ext-demo``
or from code: ``run(world_size=4, steps=3, out_dir=...)`` returns the trace file paths.
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 64, 32, 4, 2, 16, 4


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (
            t.reshape(b, s, HEADS, d // HEADS).transpose(1, 2) for t in self.qkv(x).split(d, -1)
        )
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _rank_main(rank: int, world_size: int, port: int, steps: int, out_dir: str) -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_ext.exporters import OtlpJsonFileSpanExporter
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor, TorchLayerInstrumentor

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    path = Path(out_dir, f"rank{rank}", "traces.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    provider = TracerProvider(
        resource=Resource.create({"service.name": "otel-ext-torch-example", "accel.rank": rank})
    )
    provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileSpanExporter(path)))
    host = f"host{rank // 2}"  # two ranks per (pretend) host
    torch.manual_seed(0)
    model = TinyTransformer()
    layers = TorchLayerInstrumentor()
    comms = TorchDistributedInstrumentor()
    comms.instrument(tracer_provider=provider, host_id=host)
    layers.instrument(tracer_provider=provider, model=model, backward=True, host_id=host, rank=rank)
    tracer = provider.get_tracer("examples.torch_model")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    try:
        with tracer.start_as_current_span("init"):
            for p in model.parameters():
                dist.broadcast(p.data, src=0)
        gen = torch.Generator().manual_seed(1000 + rank)
        for step in range(steps):
            with tracer.start_as_current_span(f"step {step}"):
                ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
                logits = model(ids[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                works = [
                    dist.all_reduce(p.grad, async_op=True)
                    for p in model.parameters()
                    if p.grad is not None
                ]
                for w in works:
                    w.wait()
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad /= world_size
                opt.step()
        dist.barrier()
    finally:
        layers.uninstrument()
        comms.uninstrument()
        provider.shutdown()
        dist.destroy_process_group()


def run(
    *, world_size: int = 4, steps: int = 3, out_dir: str | Path = "otel-ext-torch-example"
) -> list[Path]:
    """Train ``steps`` steps on ``world_size`` gloo ranks; return each rank's ``traces.jsonl``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank_main, args=(world_size, port, steps, str(out)), nprocs=world_size, join=True)
    return [out / f"rank{r}" / "traces.jsonl" for r in range(world_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out-dir", default="otel-ext-torch-example")
    args = parser.parse_args()
    for path in run(world_size=args.world_size, steps=args.steps, out_dir=args.out_dir):
        print(path)


if __name__ == "__main__":
    main()
