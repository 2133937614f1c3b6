"""``otel-ext demo``: the first thing a new user runs.

With no external services it runs the simulated cluster (a labelled backend: 2 hosts × 4
chips serving tensor-parallel inference, one fault injected at a place drawn from the seed),
serves the live counters on a local ``/metrics`` endpoint while it runs, writes OTLP-JSON
traces and metrics, a Perfetto timeline, the clock-alignment summary and the simulation's
``truth.json``, then aligns the clocks, analyses the run from the telemetry files alone,
prints what holds the cluster back with its evidence, and writes the HTML report.

``otel-ext demo --real`` does the same for a real PyTorch model on the CPU across gloo
processes, instrumented with the real instrumentors.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from otel_ext.demo_report import analyze_run, clock_summary, print_report
from otel_ext.errors import ConfigError

__all__ = ["add_arguments", "default_fault", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``demo`` options."""
    parser.add_argument("--hosts", type=int, default=2, help="simulated hosts (default 2)")
    parser.add_argument("--chips", type=int, default=4, help="chips per host (default 4)")
    parser.add_argument(
        "--requests", type=int, default=300, help="inference requests to serve (default 300)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="KIND@TARGET",
        help="inject a fault (repeatable): straggler@HOST/CHIP, throttle@HOST/CHIP, "
        "slow-link@HOST/CHIPA-CHIPB, slow-nic@HOST; default: one drawn from the seed; "
        "'none' for a healthy run",
    )
    parser.add_argument(
        "--out", default="otel-ext-demo", help="output folder (default ./otel-ext-demo)"
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:0",
        help="HOST:PORT of the live /metrics endpoint (default: a free local port)",
    )
    parser.add_argument(
        "--serve-seconds",
        type=float,
        default=0.0,
        help="keep /metrics up this many seconds after the run (default 0: exit when done)",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="run a real PyTorch model on CPU across gloo processes instead of the simulation",
    )
    parser.add_argument(
        "--ranks", type=int, default=4, help="gloo processes for --real (default 4)"
    )
    parser.add_argument(
        "--steps", type=int, default=6, help="training/inference steps for --real (default 6)"
    )


def default_fault(hosts: int, chips: int, seed: int) -> str:
    """The fault the demo injects when none is given: kind and place drawn from ``seed``.

    >>> default_fault(2, 4, 0)
    'straggler@host1/chip3'
    >>> default_fault(2, 4, 0) == default_fault(2, 4, 0)
    True
    """
    rng = random.Random(f"otel-ext-demo:{seed}")
    kinds = ["straggler", "throttle", "slow-link"] + (["slow-nic"] if hosts >= 2 else [])
    kind = rng.choice(kinds)
    host = rng.randrange(hosts)
    chip = rng.randrange(chips)
    if kind == "slow-nic":
        return f"slow-nic@host{host}"
    if kind == "slow-link":
        if chips < 2:
            return f"straggler@host{host}/chip{chip}"
        return f"slow-link@host{host}/chip{chip}-chip{(chip + 1) % chips}"
    return f"{kind}@host{host}/chip{chip}"


class _Progress:
    """A one-line progress display on a terminal, a few plain lines elsewhere."""

    def __init__(self, stream: TextIO, label: str) -> None:
        self.stream = stream
        self.label = label
        self.tty = stream.isatty()
        self._last_quarter = -1
        self._started = time.perf_counter()

    def __call__(self, done: int, total: int, virtual_s: float) -> None:
        frac = done / total if total else 1.0
        if self.tty:
            width = 30
            bar = "#" * int(frac * width)
            self.stream.write(
                f"\r  {self.label} [{bar:<{width}}] {done}/{total} requests, "
                f"{virtual_s:6.2f} s simulated"
            )
            self.stream.flush()
            return
        quarter = int(frac * 4)
        if quarter > self._last_quarter:
            self._last_quarter = quarter
            print(
                f"  {self.label}: {done}/{total} requests, {virtual_s:.2f} s simulated",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit status.

    Raises:
        ConfigError: bad options (one line through the dispatcher).
    """
    if args.real:
        from otel_ext.demo_real import run_real

        return run_real(args)
    from otel_ext.sim import SimConfig, parse_fault, run_simulation

    for name in ("hosts", "chips", "requests"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name} must be at least 1")
    if args.serve_seconds < 0:
        raise ConfigError("--serve-seconds must not be negative")
    specs = args.fault or [default_fault(args.hosts, args.chips, args.seed)]
    if specs == ["none"]:
        specs = []
    faults = tuple(parse_fault(s) for s in specs)
    cfg = SimConfig(
        hosts=args.hosts, chips=args.chips, requests=args.requests, seed=args.seed, faults=faults
    ).validated()
    out = Path(args.out)
    err = sys.stderr
    cluster = (
        f"{cfg.hosts} host(s) x {cfg.chips} chip(s) of {cfg.device_model} (simulated), "
        f"{cfg.requests} requests, {cfg.resolved_mode()} serving"
    )
    print(f"otel-ext demo: simulating {cluster}", file=err)
    print(
        f"  a fault is injected ({len(faults)}); the analysis must find it from the telemetry "
        f"alone (truth.json says which)",
        file=err,
    )

    state: dict[str, Any] = {}

    def on_start(live: Any) -> None:
        state["server"], state["bridge"], state["url"] = _serve_live(live, args.listen)
        print(f"  serving live counters at {state['url']}", file=err, flush=True)

    bar = _Progress(err, "simulating")
    started = time.perf_counter()
    try:
        result = run_simulation(cfg, out, progress=bar, on_start=on_start)
        bar.close()
        print(
            f"  simulated {result.virtual_seconds:.1f} s of cluster time in "
            f"{result.wall_seconds:.1f} s: {result.spans} spans, {result.metric_points} metric points",
            file=err,
        )
        doc = analyze_run(out, err)
        clock = clock_summary(doc, out)
        print_report(
            doc,
            out=out,
            files=result.files,
            cluster=cluster,
            clock=clock,
            metrics_url=state.get("url"),
            stream=sys.stdout,
        )
        print(f"\n  done in {time.perf_counter() - started:.1f} s", file=err)
        if args.serve_seconds > 0 and "server" in state:
            print(
                f"  keeping {state['url']} up for {args.serve_seconds:g} s (Ctrl-C to stop)",
                file=err,
                flush=True,
            )
            time.sleep(args.serve_seconds)
    finally:
        if "server" in state:
            state["server"].stop()
            state["bridge"].stop()
    return 0


def _serve_live(live: Any, listen: str) -> tuple[Any, Any, str]:
    """Start ``/metrics`` over the simulation's live counter view."""
    from otel_ext.counters import CounterBridge, CounterCollector, SimulatedSource
    from otel_ext.exporters.prometheus import PrometheusExpositionServer, parse_listen

    host, port = parse_listen(listen)
    bridge = CounterBridge([SimulatedSource(live)], interval_s=0.5)
    bridge.open()
    bridge.sample_once()
    server = PrometheusExpositionServer(
        [CounterCollector(bridge)], host=host, port=port, health=bridge.health
    )
    bound_host, bound_port = server.start()
    bridge.start()
    return server, bridge, f"http://{bound_host}:{bound_port}/metrics"
