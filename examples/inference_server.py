"""A continuous-batching inference loop with request spans and TTFT/TPOT histograms.

A toy engine serves a tiny PyTorch language model (embedding + linear head, greedy
decoding) on CPU. Requests wait in a queue; each engine iteration admits waiting requests up
to the batch limit (their prefill), then runs one decode step for every running request.
Every request gets an ``accel.request`` span with ``queue``/``prefill``/``decode`` phase
children (one decode span per iteration), and the ``gen_ai.server.time_to_first_token`` /
``time_per_output_token`` histograms are recorded with the request's trace as exemplar.

Run: ``python examples/inference_server.py --requests 8 --out-dir /tmp/otel-ext-serve``
(writes ``traces.jsonl`` and ``metrics.jsonl``), or ``run(requests=8)`` from code.
"""

from __future__ import annotations

import argparse
import collections
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from otel_ext.instrumentation.inference import InferenceInstrumentation, RequestTrace

VOCAB, DIM = 128, 64


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(dim=1))


@dataclass
class Request:
    rid: str
    prompt: list[int]
    max_tokens: int
    trace: RequestTrace
    output: list[int] = field(default_factory=list)


def run(
    *,
    requests: int = 8,
    max_batch: int = 4,
    max_tokens: int = 6,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> dict[str, list[int]]:
    """Serve ``requests`` prompts; return each request's generated tokens."""
    torch.manual_seed(0)
    model = TinyLM().eval()
    inst = InferenceInstrumentation(
        model="tiny-lm", tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    gen = torch.Generator().manual_seed(7)
    queue: collections.deque[Request] = collections.deque()
    for i in range(requests):
        prompt = torch.randint(0, VOCAB, (4 + i % 5,), generator=gen).tolist()
        trace = inst.start_request(f"req-{i:04d}", input_tokens=len(prompt))
        queue.append(Request(f"req-{i:04d}", prompt, max_tokens - i % 3, trace))
    running: list[Request] = []
    done: dict[str, list[int]] = {}
    step = 0
    with torch.no_grad():
        while queue or running:
            step += 1
            while queue and len(running) < max_batch:  # admit: prefill
                req = queue.popleft()
                req.trace.queued()
                t0 = time.time_ns()
                token = int(model(torch.tensor([req.prompt])).argmax())
                t1 = time.time_ns()
                req.trace.prefill(start_time=t0, end_time=t1, step=step, batch_size=1)
                req.trace.token(time=t1)
                req.output.append(token)
                running.append(req)
            if not running:
                continue
            t0 = time.time_ns()  # one decode iteration for the whole batch
            width = max(len(r.prompt) + len(r.output) for r in running)
            batch = torch.tensor([([0] * width + r.prompt + r.output)[-width:] for r in running])
            tokens = model(batch).argmax(dim=-1).tolist()
            t1 = time.time_ns()
            for req, token in zip(running, tokens):
                req.output.append(int(token))
                req.trace.decode_step(
                    start_time=t0, end_time=t1, step=step, batch_size=len(running)
                )
            for req in [r for r in running if len(r.output) >= r.max_tokens]:
                req.trace.finish(end_time=t1)
                done[req.rid] = req.output
                running.remove(req)
    return done


def main() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_ext.exporters import OtlpJsonFileMetricExporter, OtlpJsonFileSpanExporter

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--out-dir", default="otel-ext-serve")
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OtlpJsonFileSpanExporter(out / "traces.jsonl"))
    )
    reader = PeriodicExportingMetricReader(OtlpJsonFileMetricExporter(out / "metrics.jsonl"))
    meter_provider = MeterProvider(metric_readers=[reader])
    results = run(
        requests=args.requests, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    tracer_provider.shutdown()
    meter_provider.shutdown()
    for rid, tokens in results.items():
        print(rid, tokens)
    print(f"traces: {out / 'traces.jsonl'}\nmetrics: {out / 'metrics.jsonl'}")


if __name__ == "__main__":
    main()
