"""Benchmark of the simulated cluster: wall time, peak memory and telemetry events per second.

Usage: ``python benchmarks/sim_cluster.py [--hosts 2] [--chips 8] [--requests 200]``

Each row runs in a fresh child process (so its peak RSS is its own):

* ``engine only``: the discrete-event engine and counter model, no telemetry (the baseline);
* ``telemetry, no timeline``: spans and metrics through the instrumentation API and the
  OTLP/JSON file exporters;
* ``full (otel-ext simulate)``: the same plus the Perfetto timeline, as the CLI runs it.

The ratio column is each row's wall time over the baseline's, measured in the same run.
Target (issue 7): the full run of 2 hosts x 8 chips, 200 requests under 20 s and 1 GB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

ROWS = ("engine only", "telemetry, no timeline", "full (otel-ext simulate)")


def _child(row: str, hosts: int, chips: int, requests: int, seed: int) -> dict[str, float]:
    from otel_ext.sim import SimConfig, run_simulation

    cfg = SimConfig(hosts=hosts, chips=chips, requests=requests, seed=seed)
    start = time.perf_counter()
    if row == ROWS[0]:
        from otel_ext.semconv.registry import device_specs
        from otel_ext.sim._counters import SimCounterModel
        from otel_ext.sim._engine import Engine

        class _Null:
            def __getattr__(self, name: str):
                return lambda *a, **k: None

        cfg = cfg.validated()
        specs = device_specs(cfg.device_model)
        engine = Engine(cfg, specs, sink=_Null(), counters=None)  # type: ignore[arg-type]
        model = SimCounterModel(cfg, specs, clock_ratio=engine.clock_ratio)
        engine.counters = model
        engine.sink = type(
            "S",
            (),
            {
                "on_step": lambda s, r: None,
                "on_kv_transfer": lambda s, t: None,
                "on_request_done": lambda s, r: None,
                "on_sample": lambda s, t: model.read(t),
            },
        )()
        engine.run()
        events, steps = 0, sum(h.step for h in engine.hosts)
    else:
        with tempfile.TemporaryDirectory() as out:
            result = run_simulation(cfg, out, timeline=row == ROWS[2])
            events, steps = result.events, result.steps
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"wall_s": wall, "peak_mib": peak_mib, "events": events, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--chips", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.hosts, args.chips, args.requests, args.seed)))
        return
    size = f"{args.hosts} hosts x {args.chips} chips, {args.requests} requests"
    print(f"simulated cluster benchmark: {size}")
    print(
        f"{'row':<26} {'wall s':>8} {'ratio':>7} {'peak MiB':>9} {'steps':>6} {'events':>8} {'events/s':>9}"
    )
    base = None
    for row in ROWS:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                row,
                "--hosts",
                str(args.hosts),
                "--chips",
                str(args.chips),
                "--requests",
                str(args.requests),
                "--seed",
                str(args.seed),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        base = base or r["wall_s"]
        rate = r["events"] / r["wall_s"] if r["events"] else 0.0
        print(
            f"{row:<26} {r['wall_s']:>8.2f} {r['wall_s'] / base:>7.1f} {r['peak_mib']:>9.0f} "
            f"{r['steps']:>6} {r['events']:>8} {rate:>9.0f}"
        )


if __name__ == "__main__":
    main()
