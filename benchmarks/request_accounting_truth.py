"""Per-request accelerator time and energy against the simulated cluster's ground truth.

Runs the simulator (the given options), splits every engine step's device time and energy
across its requests with :func:`otel_ext.analysis.serving.requests.request_accounting` (from the
telemetry files only), then reads ``truth.json`` and prints each request's relative error's
p50, p95 and maximum, for device time and for energy, and the worst per-step conservation
error.

Run: ``.venv/bin/python benchmarks/request_accounting_truth.py [--seed 0] [--requests 200]
[--mode auto|disaggregated|replicas] [--hosts 2]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.loaders.serving_inputs import engine_steps_from_otlp
from otel_ext.analysis.serving.requests import request_accounting
from otel_ext.sim import SimConfig, run_simulation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--mode", default="auto")
    args = ap.parse_args()
    cfg = SimConfig(hosts=args.hosts, requests=args.requests, seed=args.seed, mode=args.mode)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run_simulation(cfg, out, timeline=False)
        steps = engine_steps_from_otlp([out / "traces.jsonl"])
        metrics = load_paths([out / "metrics.jsonl"]).metrics
        acc = request_accounting(steps, metrics=metrics, limit=10**9)
        truth = {r["id"]: r for r in json.loads((out / "truth.json").read_text())["requests"]}
    t_err, e_err = [], []
    for r in acc["requests"]:
        t = truth[r["request"]]
        t_err.append(abs(r["accelerator_ms"] * 1e6 - t["accelerator_ns"]) / t["accelerator_ns"])
        if r["joules"] is not None:
            e_err.append(abs(r["joules"] - t["energy_j"]) / t["energy_j"])
    print(f"{cfg.resolved_mode()}, {len(t_err)} requests, {acc['steps']} steps, "
          f"conservation error {acc['conservation_max_error_pct']:.2g} %")  # fmt: skip
    for name, err in (("device time", t_err), ("energy", e_err)):
        p50, p95, mx = (100 * float(x) for x in np.percentile(err, [50, 95, 100]))
        print(f"  {name:<12} relative error p50 {p50:.2f} %  p95 {p95:.2f} %  max {mx:.2f} %")


if __name__ == "__main__":
    main()
