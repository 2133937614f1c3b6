"""Enqueue-vs-device semantics of collective spans, with an injected fake ``CollectiveTimer``.

On NCCL a collective's call returns when it is enqueued; the span must carry the device's
start and end instead, keep the enqueue times as attributes, and compute algbw/busbw and the
duration metrics from the device duration. The real provider needs a GPU
(``benchmarks/gpu_check.py``); here a fake one "times" the float32 tensors of a real 2-rank
gloo job: its device interval starts 2 ms after the call returned and lasts 3 ms (a stream
that runs the collective after the launch), it reports "not complete yet" twice before
resolving, and float64 tensors are left to the host path.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from otel_ext.instrumentation.collectives import bus_factor  # noqa: E402

pytestmark = pytest.mark.slow

WORLD = 2
DELAY_NS = 2_000_000
DEVICE_NS = 3_000_000
UNCERTAINTY_NS = 750.0


class FakeTimer:
    """Times float32 tensors: device start = enqueue end + 2 ms, duration 3 ms."""

    def __init__(self) -> None:
        self.begun = 0
        self.polls = 0

    def begin(self, tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
            return None
        self.begun += 1
        return "token"

    def end(self, token: Any, work: Any) -> Any:
        import time

        assert token == "token"
        return {"enqueued": time.time_ns(), "not_ready": 2}

    def resolve(self, handle: Any) -> Any:
        from otel_ext.instrumentation.torch import DeviceTiming

        self.polls += 1
        if handle["not_ready"]:
            handle["not_ready"] -= 1
            return None
        start = handle["enqueued"] + DELAY_NS
        return DeviceTiming(
            start_ns=start,
            end_ns=start + DEVICE_NS,
            uncertainty_ns=UNCERTAINTY_NS,
            domain="fake/stream",
            raw_start_ticks=7,
            raw_end_ticks=7 + DEVICE_NS,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, port: int, out_dir: str) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    timer = FakeTimer()
    inst = TorchDistributedInstrumentor()
    inst.instrument(
        tracer_provider=provider,
        meter_provider=meters,
        collective_timer=timer,
        host_id=f"host{rank}",
        device="gpu0",
    )
    for _ in range(3):
        dist.all_reduce(torch.ones(256))  # float32: device-timed
    dist.all_reduce(torch.ones(64, dtype=torch.float64))  # host-timed
    work = dist.all_reduce(torch.ones(256), async_op=True)
    work.wait()
    flushed = inst.flush(30)
    inst.uninstrument()
    points = []
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    points.append(
                        {
                            "name": m.name,
                            "value": getattr(p, "value", None),
                            "sum": getattr(p, "sum", None),
                            "count": getattr(p, "count", None),
                        }
                    )
    spans = [
        {"attributes": dict(s.attributes), "start": s.start_time, "end": s.end_time}
        for s in exporter.get_finished_spans()
    ]
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps(
            {
                "spans": spans,
                "metrics": points,
                "flushed": flushed,
                "begun": timer.begun,
                "polls": timer.polls,
            }
        )
    )
    dist.destroy_process_group()
    provider.shutdown()
    meters.shutdown()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("devtime")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_device_timed_spans_use_device_times_and_keep_enqueue(job: list[dict[str, Any]]) -> None:
    for r in range(WORLD):
        got = job[r]
        assert got["flushed"] is True
        assert got["begun"] == 4  # the float32 calls only
        assert got["polls"] >= 3 * 4  # twice "not complete yet", then resolved
        timed = [s for s in got["spans"] if s["attributes"]["accel.collective.timing"] == "device"]
        host = [s for s in got["spans"] if s["attributes"]["accel.collective.timing"] == "host"]
        assert len(timed) == 4 and len(host) == 1
        for s in timed:
            a = s["attributes"]
            enq_start = a["accel.collective.enqueue_start_ns"]
            enq_end = a["accel.collective.enqueue_end_ns"]
            assert enq_start <= enq_end
            # the fake's device interval: after the enqueue, not the call itself
            assert s["start"] > enq_end
            assert s["end"] - s["start"] == DEVICE_NS
            assert a["accel.clock.domain"] == "fake/stream"
            assert a["accel.clock.uncertainty_ns"] == UNCERTAINTY_NS
            assert (a["accel.clock.raw_start_ticks"], a["accel.clock.raw_end_ticks"]) == (
                7,
                7 + DEVICE_NS,
            )
            algbw = 256 * 4 * 1e9 / DEVICE_NS
            assert a["accel.collective.algbw"] == pytest.approx(algbw)
            assert a["accel.collective.busbw"] == pytest.approx(
                algbw * bus_factor("all_reduce", WORLD)
            )
        (h,) = host
        a = h["attributes"]
        assert a["accel.collective.dtype"] == "float64"
        assert h["start"] == a["accel.collective.enqueue_start_ns"]
        assert "accel.clock.domain" not in a
        # ids still in issue order across device- and host-timed calls
        assert sorted(s["attributes"]["accel.collective.seq"] for s in got["spans"]) == list(
            range(5)
        )
        assert a["accel.collective.seq"] == 3


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_duration_metrics_come_from_device_time(job: list[dict[str, Any]]) -> None:
    for r in range(WORLD):
        got = job[r]
        host_s = [
            (s["end"] - s["start"]) / 1e9
            for s in got["spans"]
            if s["attributes"]["accel.collective.timing"] == "host"
        ]
        (hist,) = [p for p in got["metrics"] if p["name"] == "accel.collective.duration"]
        (total,) = [p for p in got["metrics"] if p["name"] == "accel.collective.time"]
        assert hist["count"] == 5
        expected = 4 * DEVICE_NS / 1e9 + sum(host_s)
        assert hist["sum"] == pytest.approx(expected, rel=1e-9)
        assert total["value"] == pytest.approx(expected, rel=1e-9)
