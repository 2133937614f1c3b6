"""The collective drain in a process of its own (``instrument(drain="process")``).

The frame decoder against an encoder of the documented layout (property test, streamed in
random pieces); then real gloo jobs in fresh interpreters: the drain process makes the spans
and metric totals the in-process drain makes (same attributes in the same order, parents,
trace state, flags, resource), a killed drain process costs counted drops and never blocks
the workload, a workload that dies without closing leaves a drain process that finishes its
files and exits, and without ``configure()``'s providers the instrumentor says why and drains
in process. ``drain=`` and ``OTEL_EXT_COLLECTIVE_DRAIN`` are checked.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.instrumentation.collective_drain_process import END, decode_frames

torch = pytest.importorskip("torch")
from conftest import require  # noqa: E402

pytestmark = pytest.mark.slow

_NONE_INT = -(2**63)
_I64 = st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1)
_TEXT = st.one_of(st.none(), st.text(max_size=40))


def _put_text(text: str | None) -> bytes:
    if text is None:
        return struct.pack("=I", 0xFFFFFFFF)
    data = text.encode()
    return struct.pack("=I", len(data)) + data


def _encode(rec: tuple[Any, ...]) -> bytes:
    """A record frame as the native hook writes it (the module doc's layout)."""
    (op, group, gsize, grank, seq, src, dst, peer, nbytes, dtype, device, async_op, t0, t1,
     end, uncertainty, enqueue_only, err_type, err_msg, parent, device_ns) = rec  # fmt: skip
    valid, trace_id, span_id, flags, remote, state = parent

    def opt(v: int | None) -> int:
        return _NONE_INT if v is None else v

    fixed = struct.pack(
        "=i11qdb4B3Q",
        op, gsize, grank, seq, opt(src), opt(dst), opt(peer), nbytes, t0, t1, end, device_ns,
        -1.0 if uncertainty is None else uncertainty, -1 if async_op is None else int(async_op),
        int(enqueue_only), int(valid), flags, int(remote), trace_id >> 64,
        trace_id & (2**64 - 1), span_id,
    )  # fmt: skip
    body = (
        b"\x01"
        + fixed
        + b"".join(_put_text(t) for t in (group, dtype, device, err_type, err_msg, state))
    )
    return struct.pack("=I", len(body)) + body


def _marker(token: int) -> bytes:
    return struct.pack("=IBq", 9, 2, token)


@st.composite
def _records(draw: Any) -> tuple[Any, ...]:
    valid = draw(st.booleans())
    parent = (
        valid,
        draw(st.integers(0, 2**128 - 1)) if valid else 0,
        draw(st.integers(0, 2**64 - 1)) if valid else 0,
        draw(st.integers(0, 255)) if valid else 0,
        draw(st.booleans()) if valid else False,
        draw(st.text(max_size=30)) if valid else "",
    )
    return (
        draw(st.integers(0, 40)), draw(st.text(max_size=20)), draw(_I64), draw(_I64),
        draw(_I64), draw(st.one_of(st.none(), _I64)), draw(st.one_of(st.none(), _I64)),
        draw(st.one_of(st.none(), _I64)), draw(_I64), draw(_TEXT), draw(_TEXT),
        draw(st.one_of(st.none(), st.booleans())), draw(_I64), draw(_I64), draw(_I64),
        draw(st.one_of(st.none(), st.floats(0, 1e12))), draw(st.booleans()), draw(_TEXT),
        draw(_TEXT), parent, draw(_I64),
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.one_of(_records(), st.integers(1, 2**62), st.just(END)), max_size=12),
    cuts=st.lists(st.integers(0, 4000), max_size=6),
)
def test_frames_decode_to_what_was_encoded_whatever_the_pieces(
    items: list[Any], cuts: list[int]
) -> None:
    stream = b"".join(
        _marker(i) if isinstance(i, int) else struct.pack("=IB", 1, 3) if i == END else _encode(i)
        for i in items
    )
    got: list[Any] = []
    buf = bytearray()
    last = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        buf += stream[last:cut]
        last = cut
        out, used = decode_frames(buf)
        got.extend(out)
        del buf[:used]
    assert not buf
    want = [
        i
        if isinstance(i, int) or i == END
        else (*i[:1], i[1] or "", *i[2:19], _parent(i[19]), i[20])
        for i in items
    ]
    assert got == want


def _parent(p: tuple[Any, ...]) -> tuple[Any, ...]:
    return (p[0], p[1], p[2], p[3], p[4], p[5] or "")


def test_a_frame_of_an_unknown_kind_or_length_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="unknown kind 7"):
        decode_frames(struct.pack("=IB", 9, 7) + b"\0" * 8)
    with pytest.raises(ValueError, match="impossible length 0"):
        decode_frames(struct.pack("=IB", 0, 1))
    short = _encode(
        (0, "g", 1, 0, 0, None, None, None, 4, None, None, None, 1, 2, 3, None, False, None,
         None, (False, 0, 0, 0, False, ""), -1)
    )  # fmt: skip
    assert decode_frames(short[:-1]) == ([], 0)  # incomplete: nothing yet, nothing lost
    bad = bytearray(short)
    bad[0:4] = struct.pack("=I", len(short) - 4 + 3)  # says longer than its strings
    with pytest.raises(ValueError, match="left over"):
        decode_frames(bytes(bad) + b"xyz")


#: what every job script starts with: its imports and a one-rank gloo group
_PRELUDE = textwrap.dedent(
    """
    import json, logging, os, signal, socket, sys, threading, time
    import torch, torch.distributed as dist
    from otel_ext.exporters import configure
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    """
)

_JOB = _PRELUDE + textwrap.dedent(
    """
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    mode, out = sys.argv[1], sys.argv[2]
    tel = configure(traces_exporter="file", metrics_exporter="file", file_dir=out,
                    service_name="drain-test", env={}, set_global=False)
    inst = TorchDistributedInstrumentor()
    inst.instrument(telemetry=tel, drain=mode)
    tracer = tel.tracer_provider.get_tracer("job")
    t = torch.ones(256)
    with tracer.start_as_current_span("step"):
        for _ in range(40):
            dist.all_reduce(t)
        dist.all_reduce(t, async_op=True).wait()
        dist.broadcast(t, 0)
    remote = SpanContext(0x1234, 0x99, is_remote=True, trace_flags=TraceFlags(1),
                         trace_state=TraceState([("vendor", "x1")]))
    token = context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    dist.all_gather([torch.zeros(8)], torch.ones(8))
    context.detach(token)

    def other():
        with tracer.start_as_current_span("other-thread"):
            for _ in range(5):
                dist.all_reduce(torch.ones(4))
    th = threading.Thread(target=other); th.start(); th.join()
    dist.barrier()
    process = inst._state.drain_process
    flushed = inst.flush(30)
    inst.uninstrument()
    print(json.dumps({"process": process is not None, "flushed": flushed,
                      "dropped": inst.dropped, "native": True}))
    tel.shutdown()
    dist.destroy_process_group()
    """
)

_REMOTE_PARENT = f"{0x99:016x}"
_TIMING = {
    "accel.collective.enqueue_start_ns",
    "accel.collective.enqueue_end_ns",
    "accel.collective.algbw",
    "accel.collective.busbw",
    "accel.clock.uncertainty_ns",
}


def _run(
    args: list[str], timeout: float = 150, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run a job script (``args``: it and its arguments) in a fresh interpreter; it must
    succeed; its last line as JSON, with its ``stderr``."""
    proc = subprocess.run(
        [sys.executable, "-c", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), stderr=proc.stderr)


def _spans(folder: Path) -> tuple[list[Any], dict[str, Any]]:
    from otel_ext.exporters import read_spans

    spans = [s for f in sorted(folder.glob("traces*.jsonl")) for s in read_spans(f)]
    names = {s.span_id: s.name for s in spans}
    rows = []
    for s in spans:
        if s.name != "accel.collective":
            continue
        rows.append(
            (
                s.attributes["accel.collective.op"],
                s.attributes["accel.collective.seq"],
                [(k, v) for k, v in s.attributes.items() if k not in _TIMING],
                names.get(s.parent_span_id, s.parent_span_id),
                s.trace_id if s.parent_span_id == _REMOTE_PARENT else None,
                s.trace_state,
                s.flags,
                sorted(s.resource.items()),
                s.scope_name,
                s.end_ns >= s.start_ns,
            )
        )
    return sorted(rows, key=lambda r: (r[0], r[1])), _metric_totals(folder)


def _metric_totals(folder: Path) -> dict[str, Any]:
    """Per metric and attribute set, the last cumulative point (sum or histogram count)."""
    last: dict[str, Any] = {}
    for path in sorted(folder.glob("metrics*.jsonl")):
        for line in path.read_text().splitlines():
            for rm in json.loads(line)["resourceMetrics"]:
                for sm in rm["scopeMetrics"]:
                    for m in sm["metrics"]:
                        kind = "sum" if "sum" in m else "histogram"
                        for p in m[kind]["dataPoints"]:
                            key = m["name"] + json.dumps(p["attributes"], sort_keys=True)
                            value = p.get("count", p.get("asInt", p.get("asDouble")))
                            if kind == "histogram" or m["name"].endswith(".io"):
                                last[key] = (int(p["timeUnixNano"]), value)
    return {k: v for k, (_, v) in last.items()}


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_drain_process_makes_the_spans_and_metrics_the_thread_drain_makes(
    tmp_path: Path,
) -> None:
    got = {}
    for mode in ("process", "thread"):
        res = _run([_JOB, mode, str(tmp_path / mode)])
        require(res["native"], "native hook not loaded")
        assert res["process"] is (mode == "process"), res["stderr"][-2000:]
        assert res["flushed"] is True and res["dropped"] == 0
        got[mode] = _spans(tmp_path / mode)
    spans, totals = got["process"]
    assert len(spans) == 40 + 1 + 1 + 1 + 5 + 1
    assert spans == got["thread"][0]
    parents = {r[3] for r in spans}
    assert parents == {"step", "other-thread", _REMOTE_PARENT, None}  # barrier: none current
    remote = [r for r in spans if r[3] == _REMOTE_PARENT]
    assert [(r[4], r[5]) for r in remote] == [(f"{0x1234:032x}", "vendor=x1")]
    assert totals == got["thread"][1] and totals
    assert any(k.startswith("accel.collective.duration") for k in totals)


_KILLED = _PRELUDE + textwrap.dedent(
    """
    tel = configure(traces_exporter="file", metrics_exporter="none", file_dir=sys.argv[1],
                    env={}, set_global=False)
    inst = TorchDistributedInstrumentor()
    inst.instrument(telemetry=tel, drain="process", capacity=64)
    process = inst._state.drain_process
    t = torch.ones(64)
    dist.all_reduce(t)
    process.proc.kill(); process.proc.wait()
    t0 = time.monotonic()
    for _ in range(500):
        dist.all_reduce(t)
    loop = time.monotonic() - t0
    t.fill_(3.0); dist.all_reduce(t); value = t[0].item()
    t0 = time.monotonic(); flushed = inst.flush(5); flush_s = time.monotonic() - t0
    dropped = inst.dropped
    t0 = time.monotonic(); inst.uninstrument(); close_s = time.monotonic() - t0
    print(json.dumps({"flushed": flushed, "dropped": dropped, "flush_s": flush_s,
                      "close_s": close_s, "loop_s": loop, "value": value}))
    tel.shutdown()
    """
)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_a_killed_drain_process_costs_counted_drops_and_never_blocks(tmp_path: Path) -> None:
    got = _run([_KILLED, str(tmp_path)])
    assert got["value"] == 3.0
    assert got["flushed"] is False
    assert got["dropped"] >= 400  # the records after the kill (some sent before it broke)
    assert got["flush_s"] < 5.5 and got["close_s"] < 10
    assert got["loop_s"] < 60  # the workload went on (a blocked send would hang it)


_DIES = _PRELUDE + textwrap.dedent(
    """
    tel = configure(traces_exporter="file", metrics_exporter="none", file_dir=sys.argv[1],
                    schedule_delay_s=3600, env={}, set_global=False)
    inst = TorchDistributedInstrumentor()
    inst.instrument(telemetry=tel, drain="process")
    t = torch.ones(16)
    for _ in range(20):
        dist.all_reduce(t)
    ok = inst.flush(30)
    print(json.dumps({"pid": inst._state.drain_process.proc.pid, "flushed": ok}), flush=True)
    os._exit(0)  # no exit hooks: the drain process sees its socket close
    """
)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_a_workload_that_dies_leaves_a_drain_process_that_finishes_and_exits(
    tmp_path: Path,
) -> None:
    got = _run([_DIES, str(tmp_path)])
    assert got["flushed"] is True
    pid = got["pid"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}").exists() else ""
        if "State:\tZ" in status:
            break
        time.sleep(0.1)
    alive = (
        Path(f"/proc/{pid}").exists() and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    )
    assert not alive, "the drain process outlived its workload"
    from otel_ext.exporters import read_spans

    names = [s.name for f in tmp_path.glob("traces*.jsonl") for s in read_spans(f)]
    assert names.count("accel.collective") == 20
    assert not list(tmp_path.glob(f"*.{pid}.partial"))  # its file was finished, not left


_FALLBACK = _PRELUDE + textwrap.dedent(
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    logging.basicConfig(level=logging.WARNING)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=provider)
    process = inst._state.drain_process
    native = inst.native
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
    inst.flush(20)
    print(json.dumps({"process": process is not None, "native": native,
                      "spans": len(exporter.get_finished_spans())}))
    inst.uninstrument()
    """
)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_without_configure_providers_it_says_why_and_drains_in_process() -> None:
    got = _run([_FALLBACK], env=dict(os.environ, OTEL_EXT_COLLECTIVE_DRAIN="process"))
    stderr = got.pop("stderr")
    require(got["native"], "native hook not loaded")
    assert got == {"process": False, "native": True, "spans": 3}
    assert "needs the tracer provider of an otel_ext.configure() Telemetry" in stderr
    assert "draining in this process" in stderr


def test_drain_mode_and_link_provider_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_ext.errors import ConfigError
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    inst = TorchDistributedInstrumentor()
    with pytest.raises(ConfigError, match="drain='elsewhere'"):
        inst.instrument(drain="elsewhere")
    assert not inst.is_instrumented_by_opentelemetry
    monkeypatch.setenv("OTEL_EXT_COLLECTIVE_DRAIN", "nowhere")
    with pytest.raises(ConfigError, match="drain='nowhere'"):
        inst.instrument()
    monkeypatch.delenv("OTEL_EXT_COLLECTIVE_DRAIN")
    with pytest.raises(ConfigError, match="link_provider"):
        inst.instrument(drain="process", link_provider=lambda op, group, seq: [])
    assert not inst.is_instrumented_by_opentelemetry


def test_configure_records_its_arguments_for_the_drain_process(tmp_path: Path) -> None:
    from otel_ext.exporters import configure
    from otel_ext.instrumentation.collective_drain_process import telemetry_of

    tel = configure(
        traces_exporter="file",
        metrics_exporter="none",
        file_dir=tmp_path,
        headers={"a": "b"},
        env={},
        set_global=False,
    )
    try:
        assert telemetry_of(tel.tracer_provider) is tel
        assert telemetry_of(object()) is None
        args = json.loads(json.dumps(tel.arguments))
        assert args["file_dir"] == str(tmp_path)
        assert args["headers"] == {"a": "b"}
        assert args["traces_exporter"] == "file"
        assert "set_global" not in args
    finally:
        tel.shutdown()


_FORKED = _PRELUDE + textwrap.dedent(
    """
    tel = configure(traces_exporter="file", metrics_exporter="none", file_dir=sys.argv[1],
                    env={}, set_global=False)
    inst = TorchDistributedInstrumentor()
    inst.instrument(telemetry=tel, drain="process")
    process = inst._state.drain_process
    child = os.fork()
    if child == 0:  # a DataLoader-like worker: holds a copy of the socket, does nothing
        time.sleep(60)
        os._exit(0)
    for _ in range(10):
        dist.all_reduce(torch.ones(8))
    t0 = time.monotonic(); inst.uninstrument(); took = time.monotonic() - t0
    code = process.proc.returncode
    os.kill(child, signal.SIGKILL); os.waitpid(child, 0)
    tel.shutdown()
    print(json.dumps({"took": took, "code": code}))
    """
)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_a_forked_child_holding_the_socket_does_not_keep_the_drain_process_waiting(
    tmp_path: Path,
) -> None:
    got = _run([_FORKED, str(tmp_path)])
    assert got["code"] == 0  # it exited by itself, on the end frame (not killed)
    assert got["took"] < 10
    from otel_ext.exporters import read_spans

    names = [s.name for f in tmp_path.glob("traces*.jsonl") for s in read_spans(f)]
    assert names.count("accel.collective") == 10


_OTLP = _PRELUDE + textwrap.dedent(
    """
    tel = configure(traces_exporter="otlp", metrics_exporter="otlp", protocol="http/protobuf",
                    endpoint=sys.argv[1], service_name="otlp-drain", env={}, set_global=False)
    inst = TorchDistributedInstrumentor()
    inst.instrument(telemetry=tel, drain="process")
    process = inst._state.drain_process is not None
    with tel.tracer_provider.get_tracer("job").start_as_current_span("step"):
        for _ in range(7):
            dist.all_reduce(torch.ones(8))
    flushed = inst.flush(30)
    inst.uninstrument()
    tel.shutdown()
    print(json.dumps({"process": process, "flushed": flushed}))
    """
)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_the_drain_process_exports_over_otlp_http_to_a_real_receiver() -> None:
    """The drain process builds the workload's OTLP/HTTP exporters: a real receiver gets the
    collective spans (with the workload's resource) and the collective metrics."""
    from otlp_receivers import HttpOtlpReceiver

    receiver = HttpOtlpReceiver()
    receiver.start()
    try:
        got = _run([_OTLP, receiver.endpoint])
        assert got["process"] is True and got["flushed"] is True
        assert receiver.wait_for_spans({"accel.collective", "step"}, 20)
        assert receiver.span_names().count("accel.collective") == 7
        assert receiver.wait_for_metric("accel.collective.duration", 20)
        services = {
            kv.value.string_value
            for request in receiver.store.trace_requests
            for rs in request.resource_spans
            for kv in rs.resource.attributes
            if kv.key == "service.name"
        }
        assert services == {"otlp-drain"}
    finally:
        receiver.stop()


_UNKNOWN_THERE = _PRELUDE + textwrap.dedent(
    """
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_ext.exporters import configure, register_span_exporter
    logging.basicConfig(level=logging.WARNING)
    memory = InMemorySpanExporter()
    register_span_exporter("in-this-process", lambda settings: memory)
    tel = configure(traces_exporter="in-this-process", metrics_exporter="none", env={},
                    set_global=False)
    inst = TorchDistributedInstrumentor()
    inst.instrument(telemetry=tel, drain="process")
    process = inst._state.drain_process
    for _ in range(4):
        dist.all_reduce(torch.ones(4))
    inst.flush(20)
    tel.force_flush()
    print(json.dumps({"process": process is not None,
                      "spans": len(memory.get_finished_spans())}))
    inst.uninstrument()
    tel.shutdown()
    """
)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_drain_process_that_cannot_build_the_exporters_says_why_and_the_thread_drains() -> None:
    """An exporter registered in the workload's code is unknown in the drain process: it
    answers with the error, the workload logs it once and drains in process."""
    got = _run([_UNKNOWN_THERE])
    stderr = got.pop("stderr")
    assert got == {"process": False, "spans": 4}
    assert "drain process did not start" in stderr
    assert "in-this-process" in stderr
    assert "draining in this process" in stderr
