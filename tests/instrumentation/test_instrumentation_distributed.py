"""TorchDistributedInstrumentor on a real 4-rank gloo job (torch.multiprocessing, spawn).

Every rank runs every wrapped op, sync and async, with its own tracer provider and an
in-memory exporter, and writes its finished spans to a JSON file; the test then checks the
spans of all ranks together: sequence numbers and collective ids agree across ranks, bytes
are the buffer sizes, the ops' results are what plain torch.distributed gives, and async
spans end when the work completes (the instrumentor hooks the ``c10d`` dispatcher ops, so
``isend``/``irecv`` are ``send``/``recv`` spans and a ``batch_isend_irecv`` is its member
spans). Each rank also has its own meter provider with an
``InMemoryMetricReader``: the ``accel.collective.*`` counters and duration histogram must
add up to what the spans say, with exemplars pointing at the collective spans.

The job runs twice: with the native (C++) recording kernels, the default, and with the
pure-Python hook (``native=False``, the fallback without a compiler); every check holds for
both.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from conftest import require  # noqa: E402

from otel_ext.instrumentation.collectives import bus_factor  # noqa: E402

pytestmark = pytest.mark.slow

WORLD = 4
N = 6  # elements per rank buffer (float32): 24 bytes
COLLECTIVES = [
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "reduce",
    "barrier",
]


def _run_op(op: str, rank: int, async_op: bool) -> tuple[str, Any]:
    """Run one collective; return ("ok", result) or ("error", exception class name)."""
    t = torch.full((N,), float(rank + 1))
    try:
        if op == "all_reduce":
            w = dist.all_reduce(t, async_op=async_op)
            out: Any = t
        elif op == "all_gather":
            out = [torch.empty(N) for _ in range(WORLD)]
            w = dist.all_gather(out, t, async_op=async_op)
        elif op == "all_gather_into_tensor":
            out = torch.empty(N * WORLD)
            w = dist.all_gather_into_tensor(out, t, async_op=async_op)
        elif op == "reduce_scatter":
            out = torch.empty(N)
            w = dist.reduce_scatter(out, [t.clone() for _ in range(WORLD)], async_op=async_op)
        elif op == "reduce_scatter_tensor":
            out = torch.empty(N)
            w = dist.reduce_scatter_tensor(out, torch.cat([t] * WORLD), async_op=async_op)
        elif op == "all_to_all":
            out = [torch.empty(N) for _ in range(WORLD)]
            w = dist.all_to_all(out, [t.clone() for _ in range(WORLD)], async_op=async_op)
        elif op == "all_to_all_single":
            out = torch.empty(N * WORLD)
            w = dist.all_to_all_single(out, torch.cat([t] * WORLD), async_op=async_op)
        elif op == "broadcast":
            w = dist.broadcast(t, src=0, async_op=async_op)
            out = t
        elif op == "reduce":
            w = dist.reduce(t, dst=0, async_op=async_op)
            out = t
        else:
            w = dist.barrier(async_op=async_op)
            out = None
        if async_op:
            w.wait()
        if isinstance(out, list):
            out = torch.cat(out)
        return "ok", None if out is None else out.tolist()
    except Exception as exc:
        return "error", type(exc).__name__


def _span_json(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "attributes": dict(span.attributes),
        "start": span.start_time,
        "end": span.end_time,
        "span_id": span.context.span_id,
        "parent": span.parent.span_id if span.parent else None,
        "status": span.status.status_code.name,
    }


def _run_all(rank: int, exporter: Any) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for async_op in (False, True):
        for op in COLLECTIVES:
            results[f"{op}:{async_op}"] = _run_op(op, rank, async_op)
    # Point-to-point, sync: even ranks send to the next rank, odd ranks receive.
    t = torch.full((N,), float(rank + 1))
    if rank % 2 == 0:
        dist.send(t, dst=rank + 1)
    else:
        dist.recv(t, src=rank - 1)
    results["send_recv"] = t.tolist()
    # Async: the receiver checks its span is still open until the sender has been released.
    store = dist.distributed_c10d._get_default_store()
    t = torch.full((N,), float(rank + 1))
    if rank % 2 == 0:
        store.wait([f"posted{rank + 1}"])
        dist.isend(t, dst=rank + 1).wait()
    else:
        w = dist.irecv(t, src=rank - 1)
        released = time.time_ns()
        store.set(f"posted{rank}", "1")
        w.wait()
        results["irecv_released_ns"] = released
    results["isend_irecv"] = t.tolist()
    # Batched ring exchange.
    send = torch.full((N,), float(rank + 1))
    recv = torch.empty(N)
    ops = [
        dist.P2POp(dist.isend, send, (rank + 1) % WORLD),
        dist.P2POp(dist.irecv, recv, (rank - 1) % WORLD),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    results["batch"] = recv.tolist()
    return results


def _metrics_json(reader: Any) -> list[dict[str, Any]]:
    out = []
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    point: dict[str, Any] = {
                        "name": m.name,
                        "unit": m.unit,
                        "scope": sm.scope.name,
                        "attributes": dict(p.attributes),
                        "exemplars": [
                            {"span_id": e.span_id, "trace_id": e.trace_id, "value": e.value}
                            for e in p.exemplars
                        ],
                    }
                    if hasattr(p, "bucket_counts"):
                        point.update(
                            count=p.count,
                            sum=p.sum,
                            bounds=list(p.explicit_bounds),
                            buckets=list(p.bucket_counts),
                        )
                    else:
                        point.update(value=p.value, monotonic=m.data.is_monotonic)
                    out.append(point)
    return out


def _worker(rank: int, port: int, out_dir: str, native: bool) -> None:
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
    original = dist.all_reduce
    plain = _run_all(rank, exporter)
    dist.barrier()
    inst = TorchDistributedInstrumentor()
    inst.instrument(
        tracer_provider=provider,
        meter_provider=meters,
        host_id=f"host{rank}",
        device="cpu",
        native=native,
    )
    uses_native = inst.native
    traced = _run_all(rank, exporter)
    dist.barrier()
    traced["flushed"] = inst.flush(60)
    traced["dropped"] = inst.dropped
    traced["native"] = uses_native
    inst.uninstrument()
    traced["restored"] = (
        dist.all_reduce is original and dist.distributed_c10d.all_reduce is original
    )
    spans = [_span_json(s) for s in exporter.get_finished_spans()]
    points = _metrics_json(reader)
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps({"spans": spans, "results": traced, "plain": plain, "metrics": points})
    )
    dist.destroy_process_group()
    provider.shutdown()
    meters.shutdown()


@pytest.fixture(scope="module", params=["native", "python"])
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    native = request.param == "native"
    if native:
        from otel_ext.instrumentation.torch import _c10d_native

        require(
            _c10d_native.load() is not None,
            f"native collective hook ({_c10d_native.STATUS['reason']})",
        )
    out = tmp_path_factory.mktemp("gloo")
    mp.spawn(_worker, args=(free_port(), str(out), native), nprocs=WORLD, join=True)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert [r["results"]["native"] for r in ranks] == [native] * WORLD
    return ranks


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_results_unchanged_by_instrumentation(job: Any) -> None:
    for r in range(WORLD):
        skip = ("irecv_released_ns", "restored", "flushed", "dropped", "native")
        t_res = {k: v for k, v in job[r]["results"].items() if k not in skip}
        p_res = {k: v for k, v in job[r]["plain"].items() if k not in skip}
        assert t_res == p_res
        assert job[r]["results"]["restored"] is True
        assert job[r]["results"]["flushed"] is True and job[r]["results"]["dropped"] == 0
    # The values themselves: all_reduce sums 1+2+3+4; the batched ring receives rank-1's value.
    assert job[2]["results"]["all_reduce:False"] == ["ok", [10.0] * N]
    assert job[1]["results"]["all_gather:True"][1] == [
        float(v) for v in range(1, WORLD + 1) for _ in range(N)
    ]
    assert job[1]["results"]["batch"] == [1.0] * N


def _expected_bytes(op: str) -> int:
    per = N * 4
    if op in ("all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
              "all_to_all", "all_to_all_single"):  # fmt: skip
        return per * WORLD
    return 0 if op == "barrier" else per


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_collective_spans_match_across_ranks(job: Any) -> None:
    traced = job
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in range(WORLD):
        spans = [
            s for s in traced[r]["spans"] if s["attributes"]["accel.collective.op"] in COLLECTIVES
        ]
        ops_seen = [
            (s["attributes"]["accel.collective.op"], s["attributes"]["accel.collective.async"])
            for s in spans
        ]
        # Every op sync and async, plus the barrier that closes the traced run.
        expected = [(op, a) for a in (False, True) for op in COLLECTIVES] + [("barrier", False)]
        assert sorted(ops_seen) == sorted(expected)
        for s in spans:
            a = s["attributes"]
            op = a["accel.collective.op"]
            outcome = traced[r]["results"][f"{op}:{a['accel.collective.async']}"]
            assert s["status"] == ("ERROR" if outcome[0] == "error" else "UNSET")
            duration = s["end"] - s["start"]
            algbw = _expected_bytes(op) * 1e9 / duration
            assert a == {
                "accel.collective.op": op,
                "accel.collective.group": "default_pg",
                "accel.collective.group_size": WORLD,
                "accel.collective.rank": r,
                "accel.collective.seq": a["accel.collective.seq"],
                "accel.collective.id": f"default_pg:{a['accel.collective.seq']}",
                "accel.collective.bytes": _expected_bytes(op),
                "accel.collective.async": a["accel.collective.async"],
                **({} if op == "barrier" else {"accel.collective.dtype": "float32"}),
                "accel.collective.enqueue_start_ns": s["start"],
                "accel.collective.enqueue_end_ns": a["accel.collective.enqueue_end_ns"],
                "accel.collective.timing": "enqueue" if op.startswith("reduce_scatter") else "host",
                **(
                    {"accel.clock.uncertainty_ns": a["accel.clock.uncertainty_ns"]}
                    if "accel.clock.uncertainty_ns" in a
                    else {}
                ),
                "accel.collective.algbw": pytest.approx(algbw),
                "accel.collective.busbw": pytest.approx(algbw * bus_factor(op, WORLD)),
                "accel.host.id": f"host{r}",
                "accel.device.id": f"host{r}/cpu",
                "accel.rank": r,
                **({"error.type": outcome[1]} if outcome[0] == "error" else {}),
            }
            assert s["start"] <= a["accel.collective.enqueue_end_ns"] <= s["end"]
            by_id[a["accel.collective.id"]].append(s)
        seqs = [s["attributes"]["accel.collective.seq"] for s in spans]
        assert sorted(seqs) == list(range(len(expected)))
    # One id names the same op on every rank.
    for _cid, members in by_id.items():
        assert len(members) == WORLD
        assert (
            len(
                {
                    (
                        m["attributes"]["accel.collective.op"],
                        m["attributes"]["accel.collective.async"],
                    )
                    for m in members
                }
            )
            == 1
        )


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_point_to_point_spans_pair_up(job: Any) -> None:
    traced = job
    p2p: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for r in range(WORLD):
        mine = [
            s
            for s in traced[r]["spans"]
            if s["attributes"]["accel.collective.op"] in ("send", "recv")
        ]
        # one sync and one async transfer, then the batched ring (one send, one receive)
        ops = sorted(s["attributes"]["accel.collective.op"] for s in mine)
        assert ops == (["recv", "send", "send", "send"] if r % 2 == 0 else ["recv"] * 3 + ["send"])
        for s in mine:
            a = s["attributes"]
            assert a["accel.collective.bytes"] == N * 4
            assert "accel.collective.async" not in a  # not known at the process-group level
            p2p[a["accel.collective.id"]].append((r, s))
        assert not [
            s
            for s in traced[r]["spans"]
            if s["attributes"]["accel.collective.op"] == "batch_isend_irecv"
        ]
    for cid, ends in p2p.items():
        assert len(ends) == 2, cid
        (ra, a), (rb, b) = sorted(ends, key=lambda e: e[0])
        ops = {a["attributes"]["accel.collective.op"], b["attributes"]["accel.collective.op"]}
        assert ops == {"send", "recv"}
        assert a["attributes"]["accel.collective.peer"] == rb
        assert b["attributes"]["accel.collective.peer"] == ra
    # 2 sync pairs + 2 async pairs + 4 batched pairs.
    assert len(p2p) == 8


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_async_span_ends_when_work_completes(job: Any) -> None:
    traced = job
    for r in (1, 3):
        res = traced[r]["results"]
        # the second transfer from rank r-1 to r is the irecv that waited for the sender
        (irecv,) = [
            s
            for s in traced[r]["spans"]
            if s["attributes"].get("accel.collective.id") == f"default_pg:{r - 1}->{r}:1"
        ]
        assert irecv["attributes"]["accel.collective.op"] == "recv"
        # The end is the middle of the poller's bracket (last look open, first look done),
        # half the bracket as the uncertainty: the bracket's top is after the release, the
        # completion is inside it, and the middle itself may fall before the release.
        half = irecv["attributes"]["accel.clock.uncertainty_ns"]
        assert irecv["end"] + half >= res["irecv_released_ns"]
        assert irecv["attributes"]["accel.collective.timing"] == "host"
        assert irecv["attributes"]["accel.collective.enqueue_end_ns"] < res["irecv_released_ns"]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_collective_metrics_add_up_to_the_spans_with_exemplars(job: Any) -> None:
    for r in range(WORLD):
        spans = job[r]["spans"]
        points = job[r]["metrics"]
        assert {p["scope"] for p in points} == {"otel_ext.instrumentation"}
        by: dict[tuple[str, str], dict[str, Any]] = {}
        for p in points:
            op = p["attributes"]["accel.collective.op"]
            assert p["attributes"] == {
                "accel.collective.op": op,
                "accel.collective.group": "default_pg",
                "accel.device.id": f"host{r}/cpu",
            }
            by[(p["name"], op)] = p
        # what the spans say: completed (not failed) ops, batches counted through members
        done: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in spans:
            op = s["attributes"]["accel.collective.op"]
            if s["status"] != "ERROR":
                done[op].append(s)
        assert {op for _, op in by} == set(done)
        # even ranks send, odd ranks receive; every rank sends and receives in the batch
        assert {"all_reduce", "barrier", "send", "recv"} <= set(done)
        for op, members in done.items():
            payload = sum(s["attributes"]["accel.collective.bytes"] for s in members)
            if op in COLLECTIVES:
                assert payload == _expected_bytes(op) * len(members)
            io = by[("accel.collective.io", op)]
            bus = by[("accel.collective.bus.io", op)]
            t = by[("accel.collective.time", op)]
            hist = by[("accel.collective.duration", op)]
            assert (io["unit"], bus["unit"], t["unit"], hist["unit"]) == ("By", "By", "s", "s")
            assert io["monotonic"] and bus["monotonic"] and t["monotonic"]
            assert io["value"] == payload
            assert bus["value"] == pytest.approx(payload * bus_factor(op, WORLD))
            seconds = sum((s["end"] - s["start"]) / 1e9 for s in members)
            assert t["value"] == pytest.approx(seconds, rel=1e-9, abs=1e-12)
            assert hist["count"] == len(members) and sum(hist["buckets"]) == len(members)
            assert hist["sum"] == pytest.approx(seconds, rel=1e-9, abs=1e-12)
            assert hist["bounds"][0] == 1e-6 and hist["bounds"][-1] == 10.0
            # exemplars (the SDK's trace-based filter) name spans of this op on this rank
            ids = {s["span_id"] for s in members}
            assert hist["exemplars"] and io["exemplars"]
            for p in (io, bus, t, hist):
                assert {e["span_id"] for e in p["exemplars"]} <= ids
            for e in hist["exemplars"]:
                (span,) = [s for s in members if s["span_id"] == e["span_id"]]
                assert e["value"] == pytest.approx((span["end"] - span["start"]) / 1e9)
