"""Sensitivity and specificity of ``analyze`` on real profiled gloo jobs (the truth harness).

Records ``--runs`` N runs of each variant in one ``--world``-rank gloo launch
(``tests/gloo_profiled_job.py``: real processes on loopback, ``torch.profiler`` on every
rank), seeds 0..N-1:

* ``healthy``: every rank does the same work;
* ``sleep``: rank ``seed % world`` sleeps ``--sleep-ms`` (5) before each collective;
* ``matmul``: rank ``(seed + 1) % world`` does ``--extra-matmuls`` (10) more 256x256 matmuls
  before each collective (every rank does 2).

Then runs ``otel_ext.analysis.engine.analyze`` on each run's folder and prints, per run, the
ground truth seen in the raw traces (how often the slow rank called the collective last), the
collectives matched, the top straggler and the root-cause findings; and at the end

* sensitivity: slow runs where ``stragglers[0]`` is the slow rank *and* the straggler
  findings target exactly that rank, as a count and a ratio;
* specificity: healthy runs with no straggler, slow-link or throttle finding, as a count and
  a ratio, and how many of those had any collective matched (with none, "no finding" is
  vacuous; it is printed beside the ratio).

Run: ``.venv/bin/python benchmarks/truth_gloo.py --runs 3`` (about 20-40 s on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gloo_profiled_job import RunSpec, collective_calls, last_arrivals, record_runs  # noqa: E402

from otel_ext.analysis.engine import analyze  # noqa: E402

ROOT_CAUSE_KINDS = ("straggler", "slow-link", "throttle")


def _specs(runs: int, world: int, *, steps: int, sleep_ms: float, matmuls: int) -> list[RunSpec]:
    out = []
    for seed in range(runs):
        out.append(RunSpec(name=f"healthy-s{seed}", seed=seed, steps=steps))
        out.append(
            RunSpec(
                name=f"sleep-s{seed}",
                slow_rank=seed % world,
                mode="sleep",
                extra=sleep_ms,
                seed=seed,
                steps=steps,
            )
        )
        out.append(
            RunSpec(
                name=f"matmul-s{seed}",
                slow_rank=(seed + 1) % world,
                mode="matmul",
                extra=matmuls,
                seed=seed,
                steps=steps,
            )
        )
    return out


def _judge(spec: RunSpec, folder: Path, doc: dict[str, Any]) -> dict[str, Any]:
    device = {int(r["rank"]): str(r["device"]) for r in doc["ranks"]}
    last = last_arrivals(collective_calls(folder))
    causes = [(f["kind"], f["target"]) for f in doc["findings"] if f["kind"] in ROOT_CAUSE_KINDS]
    stragglers = [t for k, t in causes if k == "straggler"]
    top = doc["stragglers"][0]["rank"] if doc["stragglers"] else None
    row: dict[str, Any] = {
        "name": spec.name,
        "slow_rank": spec.slow_rank,
        "collectives": doc["collectives"]["count"],
        "top": top,
        "causes": causes,
    }
    if spec.slow_rank is None:
        row["ok"] = not causes
        row["truth_last"] = "-"
    else:
        row["ok"] = top == spec.slow_rank and stragglers == [device.get(spec.slow_rank)]
        row["truth_last"] = f"{last.count(spec.slow_rank)}/{len(last)}"
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per variant (seeds 0..N-1)")
    parser.add_argument("--world", type=int, default=4, help="ranks")
    parser.add_argument("--steps", type=int, default=6, help="profiled steps per run")
    parser.add_argument("--sleep-ms", type=float, default=5.0)
    parser.add_argument("--extra-matmuls", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="record into this folder")
    args = parser.parse_args(argv)
    specs = _specs(
        args.runs, args.world, steps=args.steps, sleep_ms=args.sleep_ms, matmuls=args.extra_matmuls
    )
    with tempfile.TemporaryDirectory(prefix="truth_gloo_") as tmp:
        root = args.keep or Path(tmp)
        t0 = time.perf_counter()
        folders = record_runs(root, specs, world=args.world, timeout_s=60.0 + 20.0 * len(specs))
        t_record = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = [_judge(s, folders[s.name], analyze(folders[s.name])) for s in specs]
        t_analyze = time.perf_counter() - t0
    print(f"{len(specs)} runs of {args.world} ranks x {args.steps} steps: recorded in "
          f"{t_record:.1f} s, analysed in {t_analyze:.1f} s")  # fmt: skip
    print(f"{'run':<14} {'slow':>4} {'last(raw)':>9} {'colls':>5} {'top':>4}  ok  root causes")
    for r in rows:
        slow = "-" if r["slow_rank"] is None else r["slow_rank"]
        print(
            f"{r['name']:<14} {slow!s:>4} {r['truth_last']:>9} {r['collectives']:>5} "
            f"{r['top']!s:>4}  {'y' if r['ok'] else 'n'}   {r['causes'] or '-'}"
        )
    slow_rows = [r for r in rows if r["slow_rank"] is not None]
    healthy = [r for r in rows if r["slow_rank"] is None]
    hits = sum(r["ok"] for r in slow_rows)
    clean = sum(r["ok"] for r in healthy)
    with_coll = sum(r["collectives"] > 0 for r in healthy)
    for variant in ("sleep", "matmul"):
        vr = [r for r in slow_rows if r["name"].startswith(variant)]
        print(f"sensitivity[{variant}]: {sum(r['ok'] for r in vr)}/{len(vr)} = "
              f"{sum(r['ok'] for r in vr) / len(vr):.2f}")  # fmt: skip
    print(f"sensitivity: {hits}/{len(slow_rows)} = {hits / len(slow_rows):.2f} "
          "(slow rank first in stragglers and the only straggler finding)")  # fmt: skip
    print(f"specificity: {clean}/{len(healthy)} = {clean / len(healthy):.2f} "
          f"(no straggler/slow-link/throttle finding; {with_coll}/{len(healthy)} healthy runs "
          "had collectives matched)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
