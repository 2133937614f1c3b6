"""Sensitivity and specificity of ``analyze`` on real profiled gloo jobs (the truth harness).

Records ``--runs`` N runs of each variant in one ``--world``-rank gloo launch
(``tests/gloo_profiled_job.py``: real processes on loopback, ``torch.profiler`` on every
rank), seeds 0..N-1:

* ``healthy``: every rank does the same work;
* ``sleep``: rank ``seed % world`` sleeps ``--sleep-ms`` (5) before each collective;
* ``matmul``: rank ``(seed + 1) % world`` does ``--extra-matmuls`` (10) more 256x256 matmuls
  before each collective (every rank does 2).

Then runs ``otel_ext.analysis.engine.analyze`` on each run's folder and prints, per run, the
ground truth seen in the raw traces (how often the slow rank called the collective last, and
which ranks were last beyond chance: ``late(raw)``, one-sided binomial p < 0.05), the
collectives matched, the top straggler, the root-cause findings and the slow rank's straggler
evidence as ``analyze`` states it; and at the end

* sensitivity: slow runs where ``stragglers[0]`` is the slow rank *and* the straggler
  findings target exactly that rank, as a count and a ratio;
* specificity: healthy runs with no straggler, slow-link or throttle finding, as a count and
  a ratio, and how many of those had any collective matched (with none, "no finding" is
  vacuous; it is printed beside the ratio);
* no false alarm: healthy runs whose root-cause findings are at most a straggler finding on a
  rank the raw traces show last beyond chance (on a loaded machine the scheduler can keep a
  healthy rank late for a whole run: a real straggler nobody injected).

It also prints what the raw traces show about gloo's CPU-side events (:func:`trace_facts`),
the figures of docs/analysis.md's "CPU-side collectives in PyTorch profiler traces (gloo)".

Run: ``.venv/bin/python benchmarks/truth_gloo.py --runs 3`` (about 20-40 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gloo_profiled_job import (  # noqa: E402
    RunSpec,
    collective_calls,
    last_arrivals,
    persistently_last,
    record_runs,
    slow_site,
    trace_files,
    truth_visible,
)

from otel_ext.analysis.engine import analyze  # noqa: E402
from otel_ext.analysis.findings.build import CAUSE_KINDS  # noqa: E402

ROOT_CAUSE_KINDS = CAUSE_KINDS


def _specs(
    runs: int,
    world: int,
    *,
    steps: int,
    sleep_ms: float,
    matmuls: int,
    pattern: str = "ar_ag",
    ddp_matmuls: int = 40,
) -> list[RunSpec]:
    out = []
    if pattern != "ar_ag":
        # a slow rank at one collective site of several: healthy runs and one slow rank doing
        # ``ddp_matmuls`` extra matmuls before the step's first all-reduce
        for seed in range(runs):
            out.append(RunSpec(name=f"{pattern}-healthy-s{seed}", seed=seed, steps=steps,
                               pattern=pattern))  # fmt: skip
            out.append(
                RunSpec(
                    name=f"{pattern}-matmul-s{seed}",
                    slow_rank=(seed + 2) % world,
                    mode="matmul",
                    extra=ddp_matmuls,
                    seed=seed,
                    steps=steps,
                    pattern=pattern,
                )
            )
        return out
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
    real = persistently_last(last, len(device))
    row: dict[str, Any] = {
        "name": spec.name,
        "slow_rank": spec.slow_rank,
        "collectives": doc["collectives"]["count"],
        "top": top,
        "causes": causes,
        "persistently_last": real,
        "visible": truth_visible(spec, last, len(device)),
    }
    if spec.slow_rank is None:
        row["ok"] = not causes
        row["no_false_alarm"] = all(
            k == "straggler" and t in {device[r] for r in real} for k, t in causes
        )
        row["truth_last"] = "-"
        row["evidence"] = ""
    else:
        row["ok"] = top == spec.slow_rank and stragglers == [device.get(spec.slow_rank)]
        at_site = slow_site(spec, last)
        row["truth_last"] = f"{at_site.count(spec.slow_rank)}/{len(at_site)}"
        mine: dict[str, Any] = next(
            (s for s in doc["stragglers"] if s["rank"] == spec.slow_rank), {}
        )
        row["evidence"] = (
            f"analyze: last {mine.get('last_arrivals')}/{mine.get('collectives')}, "
            f"p={mine.get('p_last', float('nan')):.2g}, "
            f"effect={mine.get('lateness_effect', float('nan')):.2f}; "
            f"site {mine.get('site')} p={mine.get('site_p', float('nan')):.2g}"
        )
    return row


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))] if ordered else float("nan")


def trace_facts(folders: list[Path]) -> dict[str, Any]:
    """What the raw traces say about gloo's CPU-side events (standard library only).

    Per rank and collective k: the k-th ``c10d::*`` op on the calling thread and the k-th
    ``gloo:*`` op (by start) on any other thread. Returns the pick-up lag (``gloo:`` start −
    ``c10d::`` start, µs), the gap from the ``gloo:`` op's end to the calling thread's next op
    (µs; negative would mean the caller ran on before the collective ended), the worker threads
    each rank used, and whether every rank issued the same ``c10d::`` names in the same order.
    """
    lags: list[float] = []
    gaps: list[float] = []
    threads: list[int] = []
    same_order = True
    for folder in folders:
        sequences = []
        for path in trace_files(folder):
            events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
            calls = sorted((e for e in events if e["name"].startswith("c10d::")), key=_ts)
            caller = {e["tid"] for e in calls}
            ops = sorted((e for e in events if e["name"].startswith("gloo:")), key=_ts)
            ops = [e for e in ops if e["tid"] not in caller]
            on_caller = sorted((e for e in events if e["tid"] in caller), key=_ts)
            threads.append(len({e["tid"] for e in ops}))
            sequences.append([e["name"] for e in calls])
            for call, op in zip(calls, ops):
                lags.append(op["ts"] - call["ts"])
                end = op["ts"] + op["dur"]
                after = [e["ts"] for e in on_caller if e["ts"] > call["ts"] + call["dur"]]
                if after:
                    gaps.append(after[0] - end)
        same_order = same_order and all(seq == sequences[0] for seq in sequences)
    return {
        "calls": len(lags),
        "lag_us": {q: _quantile(lags, v) for q, v in (("median", 0.5), ("p90", 0.9), ("max", 1.0))},
        "gap_us": {
            "n": len(gaps),
            "min": min(gaps, default=float("nan")),
            "median": _quantile(gaps, 0.5),
        },
        "worker_threads_per_rank": sorted(set(threads)),
        "same_order_on_every_rank": same_order,
    }


def _ts(event: dict[str, Any]) -> float:
    return float(event["ts"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per variant (seeds 0..N-1)")
    parser.add_argument("--world", type=int, default=4, help="ranks")
    parser.add_argument("--steps", type=int, default=6, help="profiled steps per run")
    parser.add_argument("--sleep-ms", type=float, default=5.0)
    parser.add_argument("--extra-matmuls", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="record into this folder")
    parser.add_argument(
        "--patterns",
        default="ar_ag",
        help="comma-separated step patterns (ar_ag, ddp, mixed; see tests/gloo_profiled_job.py)",
    )
    parser.add_argument(
        "--site-matmuls", type=int, default=40, help="extra matmuls of ddp/mixed slow runs"
    )
    args = parser.parse_args(argv)
    specs = [
        spec
        for pattern in args.patterns.split(",")
        for spec in _specs(
            args.runs,
            args.world,
            steps=args.steps,
            sleep_ms=args.sleep_ms,
            matmuls=args.extra_matmuls,
            pattern=pattern.strip(),
            ddp_matmuls=args.site_matmuls,
        )
    ]
    with tempfile.TemporaryDirectory(prefix="truth_gloo_") as tmp:
        root = args.keep or Path(tmp)
        t0 = time.perf_counter()
        folders = record_runs(root, specs, world=args.world, timeout_s=60.0 + 20.0 * len(specs))
        t_record = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = [_judge(s, folders[s.name], analyze(folders[s.name])) for s in specs]
        t_analyze = time.perf_counter() - t0
        facts = trace_facts([folders[s.name] for s in specs])
    print(f"{len(specs)} runs of {args.world} ranks x {args.steps} steps: recorded in "
          f"{t_record:.1f} s, analysed in {t_analyze:.1f} s")  # fmt: skip
    print(f"{'run':<20} {'slow':>4} {'last(raw)':>9} {'late(raw)':>9} {'colls':>5} {'top':>4}  ok"
          "  root causes; the slow rank's straggler row")  # fmt: skip
    for r in rows:
        slow = "-" if r["slow_rank"] is None else r["slow_rank"]
        late = ",".join(map(str, r["persistently_last"])) or "-"
        print(
            f"{r['name']:<20} {slow!s:>4} {r['truth_last']:>9} {late:>9} {r['collectives']:>5} "
            f"{r['top']!s:>4}  {'y' if r['ok'] else 'n'}   {r['causes'] or '-'}  {r['evidence']}"
        )
    lag, gap = facts["lag_us"], facts["gap_us"]
    print(f"raw traces: {facts['calls']} c10d:: calls; gloo: pick-up lag median {lag['median']:.0f} "
          f"us, p90 {lag['p90']:.0f} us, max {lag['max']:.0f} us; caller's next op after the "
          f"gloo: end by >= {gap['min']:.0f} us (median {gap['median']:.0f} us, {gap['n']} calls); "
          f"worker threads per rank {facts['worker_threads_per_rank']}; same c10d:: order on "
          f"every rank: {facts['same_order_on_every_rank']}")  # fmt: skip
    slow_rows = [r for r in rows if r["slow_rank"] is not None]
    healthy = [r for r in rows if r["slow_rank"] is None]
    hits = sum(r["ok"] for r in slow_rows)
    clean = sum(r["ok"] for r in healthy)
    with_coll = sum(r["collectives"] > 0 for r in healthy)
    for variant in dict.fromkeys(r["name"].rsplit("-s", 1)[0] for r in slow_rows):
        vr = [r for r in slow_rows if r["name"].rsplit("-s", 1)[0] == variant]
        print(f"sensitivity[{variant}]: {sum(r['ok'] for r in vr)}/{len(vr)} = "
              f"{sum(r['ok'] for r in vr) / len(vr):.2f}")  # fmt: skip
    print(f"sensitivity: {hits}/{len(slow_rows)} = {hits / len(slow_rows):.2f} "
          "(slow rank first in stragglers and the only straggler finding)")  # fmt: skip
    seen = [r for r in slow_rows if r["visible"]]
    if seen:
        got = sum(r["ok"] for r in seen)
        print(f"sensitivity where the raw traces show the slow rank last at > half the "
              f"collectives: {got}/{len(seen)} = {got / len(seen):.2f}")  # fmt: skip
    fair = sum(r["no_false_alarm"] for r in healthy)
    made = sum(bool(r["persistently_last"]) for r in healthy)
    print(f"specificity: {clean}/{len(healthy)} = {clean / len(healthy):.2f} "
          f"(no straggler/slow-link/throttle finding; {with_coll}/{len(healthy)} healthy runs "
          "had collectives matched)")  # fmt: skip
    print(f"no false alarm: {fair}/{len(healthy)} = {fair / len(healthy):.2f} (a straggler finding "
          f"on a rank the raw traces show last beyond chance is not one; {made}/{len(healthy)} "
          "healthy runs had such a rank)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
