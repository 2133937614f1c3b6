"""The collective drain's CPU per record: this tree against a baseline revision, same run.

Run: ``python benchmarks/drain_cost.py [--records 4096] [--rounds 5] [--run 8] [--baseline f0d9277]
[--profile] [--real-hook]``.

The native hook's drain thread (``_CollectiveRecording._drain_once``) turns each completed record into an
``accel.collective`` span and the collective metrics, under the GIL: that is the background
cost a Python-bound workload waits for. This feeds it synthetic records of exactly the shape
``Hook.drain`` returns (the 21-field tuples of ``_c10d_hook.cpp``; a seeded mix of sync and
async all-reduces, sends and receives with their group ranks, broadcasts, failures,
enqueue-only and device-timed records; in issue order, so the parent context changes every
``--run`` records, as when a layer's span is current for its few collectives, and one record
in ten comes from a thread with no current span) through
the real drain (a stand-in hook object whose ``drain`` hands them over), with real SDK
providers, two set-ups:

* ``sdk``: a ``TracerProvider`` with a ``BatchSpanProcessor`` and an ``InMemorySpanExporter``,
  a ``MeterProvider`` with an ``InMemoryMetricReader``;
* ``configure``: what :func:`otel_ext.exporters.configure` builds with the OTLP-JSON file
  exporters (the project's bounded batch processor, the active-span publisher, the file
  metric reader), into a temporary folder.

Measured: the drain thread's CPU (``time.thread_time_ns``) around one ``_drain_once`` of
``--records`` records, per record; configurations ``spans+metrics`` (the SDK meter) and
``spans`` (a no-op meter: the difference is the metric work), and in this tree ``SDK objects
only`` (see :func:`_floor`: what any drain feeding the SDK must make), interleaved. The baseline is the
``otel_ext`` package of ``--baseline`` (``git archive``), run in its own interpreter; the two
trees alternate child by child (``--rounds`` children each, 5 drains per configuration per
child, the child's median); printed: the median over children, the ratio of the medians, the
median of the ratios within a round (the two children of a round ran back to back), and the
smallest child figure of each tree (the least disturbed by other load on the machine) with
its ratio. This tree's child also runs the drain with ``native_templates = False`` (native
records through ``_native_entry`` and ``_emit``, the Python hook's path) to separate what the
templates save from what the shared span and metric code saves. ``--profile`` adds a cProfile
split of one drain per tree (the parts' shares of the profiled time, scaled to the measured
CPU per record).

Each timed drain starts after a full ``gc.collect()``: the spans the in-memory exporter holds
make the interpreter's full collection (of everything alive, torch included) land at random
in some drains of either tree; it is the whole process's collection, not the drain's work,
so it is kept out of the per-record figure.

``--real-hook`` instead drives the real native hook on a world-size-1 gloo group, in each
tree's child: ``--records`` all-reduces of 1 KiB with the drain held, then the C++
``Hook.drain`` (records to Python tuples) timed alone, and the drain's Python part over those
real records (this tree: templates on and off), ``REPS`` times.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the revision before the drain's templates and the sampler's short cut
DEFAULT_BASELINE = "f0d9277"
REPS = 5

#: (name, function's file suffix, function name) of the parts the profile reports
PARTS = (
    ("SDK histogram record", "metrics/_internal/instrument.py", "record"),
    ("histogram record (BoundHistogram)", "bound_histogram.py", "record"),
    ("FinishedSpans.write (span, sampler, ids)", "finished_spans.py", "write"),
    ("FinishedSpans writer (span, sampler, ids)", "finished_spans.py", "write_short"),
    ("  of which processors' on_end", "sdk/trace/__init__.py", "on_end"),
    ("set_span_in_context", "trace/propagation/__init__.py", "set_span_in_context"),
    ("record -> attributes (_native_entry)", "_dist_drain.py", "_native_entry"),
    ("device timing (_native_device_timing)", "_dist_drain.py", "_native_device_timing"),
    ("the per-batch counter adds", "_dist_tracker.py", "_add_counted"),
    ("record -> span and metrics, all (_emit_native)", "_dist_drain.py", "_emit_native"),
    ("record -> span and metrics, all (_emit)", "_dist_tracker.py", "_emit"),
    ("the drain, all (_drain_once)", "_dist_drain.py", "_drain_once"),
)


def _records(n: int, contexts: list[Any], run: int, seed: int = 7) -> list[tuple[Any, ...]]:
    """``n`` records as ``Hook.drain`` returns them (see ``_c10d_hook.cpp``), seeded; the
    context the next of ``contexts`` every ``run`` records, ``None`` for one in ten.

    Spec indices: 0 all_reduce, 1 broadcast, 2 send, 3 recv (see ``SPECS``).
    """
    rng = random.Random(seed)
    out = []
    seqs: dict[Any, int] = {}
    t = 1_800_000_000_000_000_000
    for i in range(n):
        t += rng.randrange(20_000, 200_000)
        kind = rng.random()
        idx = 0 if kind < 0.7 else 1 if kind < 0.8 else 2 if kind < 0.9 else 3
        group, gsize, grank = ("0", 4, 1) if rng.random() < 0.8 else ("3", 2, 0)
        src = dst = peer = None
        if idx >= 2:
            peer = 1 - grank if gsize == 2 else (grank + 1) % gsize
            src, dst = (grank, peer) if idx == 2 else (peer, grank)
            key: Any = (group, src, dst)
        else:
            key = group
        seq = seqs.get(key, 0)
        seqs[key] = seq + 1
        nbytes = rng.choice((1024, 65536, 1 << 20))
        t1 = t + rng.randrange(2_000, 9_000)
        end = t1 + rng.randrange(1_000, 500_000)
        uncertainty: float | None = float(rng.randrange(250, 250_000)) / 2
        enqueue_only = rng.random() < 0.03
        failed = rng.random() < 0.02
        device_ns = rng.randrange(1_000, 400_000) if rng.random() < 0.1 else -1
        if enqueue_only:
            end, uncertainty = t1, None
        out.append(
            (
                idx, group, gsize, grank, seq, src, dst, peer, nbytes,
                "float32" if idx != 1 else "bfloat16", "cpu" if device_ns < 0 else "cuda:1",
                (rng.random() < 0.5) if idx < 2 else None,
                t, t1, end, uncertainty, enqueue_only,
                "DistBackendError" if failed else None,
                "connection reset by peer" if failed else None,
                None if rng.random() < 0.1 else contexts[i // run % len(contexts)], device_ns,
            )
        )  # fmt: skip
    return out


class _Hook:
    """Stands in for the native ``Hook``: ``drain`` hands over the prepared records."""

    def __init__(self, records: list[tuple[Any, ...]]):
        self.records = records

    def drain(self, max_records: int, timeout_s: float) -> list[tuple[Any, ...]]:
        batch, self.records = self.records[:max_records], self.records[max_records:]
        return batch

    def in_flight(self) -> int:
        return len(self.records)


def _setup(name: str, folder: str) -> tuple[Any, Any, Any]:
    """(tracer provider, meter provider, clear) for one set-up."""
    if name == "sdk":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
        mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
        return tp, mp, exporter.clear
    from otel_ext.exporters import configure

    telemetry = configure(
        traces_exporter="file",
        metrics_exporter="file",
        file_dir=folder,
        max_queue_size=1 << 16,
        set_global=False,
        env={},
    )
    return telemetry.tracer_provider, telemetry.meter_provider, lambda: None


def _child(args: argparse.Namespace) -> None:
    from opentelemetry import trace
    from opentelemetry.metrics import NoOpMeterProvider

    from otel_ext.instrumentation.torch import _distributed as D

    specs = [D._OPS["allreduce_"], D._OPS["broadcast_"], D._OPS["send"], D._OPS["recv_"]]
    import otel_ext
    import otel_ext.exporters

    package = f"{Path(otel_ext.__file__).parent}, {Path(otel_ext.exporters.__file__).parent}"
    result: dict[str, Any] = {"tree": args.tree, "package": package}
    with tempfile.TemporaryDirectory() as folder:
        for setup in args.setups.split(","):
            tp, mp, clear = _setup(setup, folder)
            tracer = tp.get_tracer("bench")
            contexts = []
            for i in range(4):
                with tracer.start_as_current_span(f"step{i}") as step:
                    contexts.append(trace.set_span_in_context(step))
            records = _records(args.records, contexts, args.run)
            configs: list[tuple[str, Any, bool]] = [
                ("spans+metrics", mp, True),
                ("spans", NoOpMeterProvider(), True),
            ]
            if args.tree == "this":
                configs.append(("spans+metrics, no templates", mp, False))
            states = []
            # the recording state's class (``_State`` in a baseline before issue 28)
            recording = getattr(D, "_CollectiveRecording", None) or D._State
            for label, meter_provider, templates in configs:
                state = recording(
                    tracer_provider=tp, meter_provider=meter_provider, link_provider=None,
                    device=None, host_id="bench-host", timer=None, capacity=1024,
                )  # fmt: skip
                state.native_specs = specs
                state.default_name = "0"
                state.native_templates = templates
                states.append((label, state))
            floor = _floor(states[0][1], records) if args.tree == "this" else None
            if floor is not None:
                states.append((FLOOR, None))
            times: dict[str, list[float]] = {label: [] for label, _ in states}
            for rep in range(REPS + 1):  # the first one warms up; configurations interleaved
                for label, state in states if rep % 2 else states[::-1]:
                    if state is not None:
                        state.native = _Hook(list(records))
                    gc.collect()  # see the module doc: no full collection inside the drain
                    c0 = time.thread_time_ns()
                    state._drain_once(0.0) if state is not None else floor()  # type: ignore[misc]
                    c1 = time.thread_time_ns()
                    if rep:
                        times[label].append((c1 - c0) / len(records) / 1e3)
                    tp.force_flush()
                    clear()
            for label, state in states:
                result[f"{setup}: {label}"] = statistics.median(times[label])
                if state is None:
                    continue
                if args.profile and label == "spans+metrics":
                    result[f"{setup}: profile"] = _profile(state, records, tp, clear)
                state.closed = True
                state.poll_wake.set()
            tp.shutdown()
            mp.shutdown()
    print(json.dumps(result))


FLOOR = "SDK objects only"


def _floor(state: Any, records: list[Any]) -> Any:
    """What no Python drain can skip while the SDK's processors and meter see the spans and
    values: per record a span context, a ``ReadableSpan`` (its own attribute dict) to the
    processors' ``on_end``, and the duration through the drain's own ``BoundHistogram`` in
    a span's context. ``None`` where the drain would not take the short path."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, TraceFlags

    state.native = _Hook(records[:64])
    state._drain_once(0.0)  # the templates, with their bound histograms
    tracer = state.spans._short()
    if tracer is None or not state.templates:
        return None
    on_end, ids = tracer.span_processor.on_end, tracer.id_generator
    resource, info = tracer.resource, tracer.instrumentation_info
    scope = tracer._instrumentation_scope
    sampled, unset, internal = TraceFlags(TraceFlags.SAMPLED), Status(), SpanKind.INTERNAL
    tpl = next(iter(state.templates.values()))
    attrs = {**tpl.head, **tpl.identity, **{f"accel.collective.k{i}": i for i in range(14)}}
    bound = tpl.metric.duration

    def floor() -> None:
        for r in records:
            context = SpanContext(r[12], ids.generate_span_id(), False, sampled)
            span = ReadableSpan("accel.collective", context, None, resource, dict(attrs), (),
                                (), internal, info, unset, r[12], r[14], scope)  # fmt: skip
            on_end(span)
            bound.record(
                (r[14] - r[12]) / 1e9, trace.set_span_in_context(NonRecordingSpan(context))
            )

    return floor


def _profile(state: Any, records: list[Any], tp: Any, clear: Any) -> dict[str, float]:
    """The parts' cumulative shares of one profiled drain."""
    import cProfile
    import pstats

    state.native = _Hook(list(records))
    profiler = cProfile.Profile()
    profiler.enable()
    state._drain_once(0.0)
    profiler.disable()
    tp.force_flush()
    clear()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    shares = {}
    for label, suffix, func in PARTS:
        cum = sum(
            ct
            for (file, _, name), (_, _, _, ct, _) in stats.items()
            if name == func and file.endswith(suffix)
        )
        shares[label] = cum / total
    return shares


def _real_hook(args: argparse.Namespace) -> None:
    """The real native hook on a world-size-1 gloo group: ``--records`` all-reduces of 1 KiB
    with the drain held, then the C++ ``Hook.drain`` (records to Python tuples) timed alone,
    and the drain's Python part over those real records, templates on and off."""
    import socket

    import torch
    import torch.distributed as dist
    from opentelemetry import trace

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    tp, mp, clear = _setup("sdk", "")
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=tp, meter_provider=mp, drain_interval_s=3600)
    state = inst._state
    if state is None or state.native is None:
        raise SystemExit("the native hook did not load")
    hook = state.native
    tensor = torch.ones(256)
    cpp, python = [], {True: [], False: []}
    for rep in range(REPS + 1):
        with trace.get_tracer("bench", tracer_provider=tp).start_as_current_span("step"):
            for _ in range(args.records):
                dist.all_reduce(tensor)
        deadline = time.monotonic() + 30
        while hook.in_flight() < args.records and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the poller's last looks (every 0.5 ms) move the records to done
        gc.collect()
        c0 = time.thread_time_ns()
        records = hook.drain(args.records, 0.0)
        c1 = time.thread_time_ns()
        if rep:
            cpp.append((c1 - c0) / len(records) / 1e3)
        real = state.native
        for templates in (True, False) if rep % 2 else (False, True):
            state.native, state.native_templates = _Hook(list(records)), templates
            gc.collect()
            c0 = time.thread_time_ns()
            state._drain_once(0.0)
            c1 = time.thread_time_ns()
            if rep:
                python[templates].append((c1 - c0) / len(records) / 1e3)
            tp.force_flush()
            clear()
        state.native = real
    result = {
        "tree": args.tree,
        "real: C++ Hook.drain": statistics.median(cpp),
        "real: spans+metrics": statistics.median(python[True]),
    }
    if args.tree == "this":
        result["real: spans+metrics, no templates"] = statistics.median(python[False])
    print(json.dumps(result))
    inst.uninstrument()
    dist.destroy_process_group()


def _baseline_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "otel_ext", "exporters", "semantic_conventions"],
        capture_output=True,
        check=True,
    ).stdout
    path = into / "baseline.tar"
    path.write_bytes(archive)
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    return into


def _run_child(tree: str, src: Path, args: argparse.Namespace, profile: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src), OTEL_SDK_DISABLED="")
    cmd = [sys.executable, __file__, "--child", "--tree", tree, "--records", str(args.records),
           "--setups", args.setups, "--run", str(args.run)] + (["--profile"] if profile else [])  # fmt: skip
    if args.real_hook:
        cmd.append("--real-hook")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=src)
    if proc.returncode != 0:
        raise SystemExit(f"{tree} child failed:\n{proc.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--run", type=int, default=8, help="records per parent context")
    parser.add_argument("--setups", default="sdk,configure")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--real-hook", action="store_true", help="the native hook, gloo")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", default="this", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _real_hook(args) if args.real_hook else _child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"baseline": _baseline_tree(args.baseline, Path(tmp)), "this": ROOT}
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
        for r in range(args.rounds):
            order = ("baseline", "this") if r % 2 == 0 else ("this", "baseline")
            for tree in order:
                runs[tree].append(_run_child(tree, trees[tree], args, args.profile and r == 0))
    load = os.getloadavg()[0]
    print(
        f"drain CPU per record, {args.records} records x {REPS} drains per child, "
        f"{args.rounds} children per tree, median (load average {load:.1f}; baseline "
        f"{args.baseline})"
    )
    keys = [k for k in runs["this"][0] if ": " in k and not k.endswith("profile")]
    for tree in ("baseline", "this"):
        print(f"  {tree}: {runs[tree][0].get('package', 'the native hook')}")
    med: dict[str, dict[str, float]] = {"baseline": {}, "this": {}}
    low: dict[str, dict[str, float]] = {"baseline": {}, "this": {}}
    for tree in ("baseline", "this"):
        for k in keys:
            vals = [run[k] for run in runs[tree] if k in run]
            if vals:
                med[tree][k], low[tree][k] = statistics.median(vals), min(vals)
    print(
        f"  {'configuration':34s} {'baseline':>9s} {'this':>9s} {'ratio':>6s} {'paired':>7s}"
        f"   {'min: baseline':>13s} {'this':>6s} {'ratio':>6s}"
    )
    for k in keys:
        base, this = med["baseline"].get(k), med["this"][k]
        if base is None:
            print(f"  {k:34s} {'—':>9s} {this:9.2f}   {'':>29s} {low['this'][k]:6.2f}")
            continue
        # each round's children ran back to back: the ratio within a round, then the median
        paired = statistics.median(a[k] / b[k] for a, b in zip(runs["this"], runs["baseline"]))
        print(
            f"  {k:34s} {base:9.2f} {this:9.2f} {this / base:6.2f} {paired:7.2f}"
            f"   {low['baseline'][k]:13.2f} {low['this'][k]:6.2f}"
            f" {low['this'][k] / low['baseline'][k]:6.2f}"
        )
    for setup in [] if args.real_hook else args.setups.split(","):
        full = {t: med[t].get(f"{setup}: spans+metrics") for t in med}
        spans = {t: med[t].get(f"{setup}: spans") for t in med}
        parts = ", ".join(
            f"{t} metrics {full[t] - spans[t]:.2f} / spans+drain {spans[t]:.2f}"
            for t in ("baseline", "this")
            if full[t] is not None and spans[t] is not None
        )
        print(f"  {setup}: {parts} (µs per record)")
    if args.profile:
        for tree in ("baseline", "this"):
            for setup in args.setups.split(","):
                prof = runs[tree][0].get(f"{setup}: profile")
                if not prof:
                    continue
                cpu = med[tree][f"{setup}: spans+metrics"]
                print(f"  profile, {tree}, {setup} (share of the profiled drain x {cpu:.1f} µs):")
                for label, share in prof.items():
                    print(f"    {label:44s} {share * 100:5.1f} %  {share * cpu:6.2f} µs")


if __name__ == "__main__":
    main()
