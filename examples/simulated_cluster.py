"""Run the simulated cluster with a straggler and find it from the telemetry alone.

Usage: ``python examples/simulated_cluster.py [OUT_DIR]``

The simulation writes ``traces.jsonl``, ``metrics.jsonl``, ``timeline.json`` (open it in
https://ui.perfetto.dev) and ``truth.json``. This script then reads the traces back with the
exporters' reader, exactly as an analysis would, and ranks the chips by how late they arrive
at their all-reduces: the all-reduce kernel of the last chip to arrive is the shortest, since
it waits for nobody. Only at the end does it open ``truth.json`` to check the answer.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from otel_ext.exporters import read_spans
from otel_ext.sim import SimConfig, parse_fault, run_simulation


def main(out_dir: str = "sim-example") -> None:
    config = SimConfig(
        hosts=2,
        chips=4,
        requests=100,
        seed=7,
        faults=(parse_fault("straggler@host1/chip2"),),
    )
    result = run_simulation(config, out_dir)
    print(
        f"{result.requests} requests, {result.virtual_seconds:.2f} s simulated in "
        f"{result.wall_seconds:.1f} s; {result.spans} spans, {result.metric_points} points"
    )
    # per collective id: each member's all-reduce kernel duration (device clock, aligned)
    members: dict[str, dict[str, int]] = defaultdict(dict)
    for span in read_spans(Path(out_dir) / "traces.jsonl"):
        attrs = span.attributes
        if span.name == "accel.kernel" and attrs.get("accel.kernel.kind") == "communication":
            members[attrs["accel.collective.id"]][attrs["accel.device.id"]] = (
                span.end_ns - span.start_ns
            )
    # lateness of a member = longest wait in its collective minus its own wait
    lateness: dict[str, list[int]] = defaultdict(list)
    for waits in members.values():
        longest = max(waits.values())
        for device, wait in waits.items():
            lateness[device].append(longest - wait)
    ranked = sorted(lateness, key=lambda d: -statistics.median(lateness[d]))
    print("median lateness at all-reduces (us):")
    for device in ranked[:4]:
        print(f"  {device:<12} {statistics.median(lateness[device]) / 1e3:8.1f}")
    truth = json.loads((Path(out_dir) / "truth.json").read_text())
    print(f"most likely straggler: {ranked[0]}; injected: {truth['faults'][0]['target']}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
