"""Sensitivity and specificity of ``analyze`` on real two-host gloo jobs (multi-host truth harness).

Records, for each seed ``S`` of ``--seeds N`` (from ``--first-seed``), one run of each kind
of ``--kinds`` in one launch of ``tests/multihost_job.py`` (two emulated hosts: network
namespaces joined by a veth, host B's real-time clock shifted by ±20–80 ms with libfaketime,
4 gloo ranks, each step an all-reduce, a ring of 1 MiB send/recv and an all-gather, recorded
by ``torch.profiler`` and by otel-ext):

* ``healthy``: nothing injected;
* ``slow-rank``: a random rank does 60–140 more 256x256 matmuls before each all-reduce;
* ``slow-link``: the veth limited to 80–200 Mbit/s both ways (``tc ... tbf``).

Each run's folder (``OUT/KIND-sS``) keeps ``truth.json``, ``kineto/`` and ``spans/``; runs
already recorded there are not recorded again. ``OUT/READY`` lists, once each kind has one,
the first folder of each kind. ``--record-only`` stops there.

Then ``otel_ext.analysis.engine.analyze`` reads each recording on its own (``RUN/kineto`` and
``RUN/spans``) and the table shows, per run and recording: what the raw data show
(``tests/multihost_job.visibility``: the slow rank's share of last arrivals and lateness, the
cross-host against within-host receive times), the first finding, the top straggler row, the
link or network finding, and host B's clock offset as estimated against the truth (error
and bound). At the end, per kind and recording:

* sensitivity (slow-rank): runs whose raw data show the slow rank where the first straggler
  finding names it and no other rank gets one;
* sensitivity (slow-link): runs whose raw data show the slow link where a link or network
  finding exists and no rank is named a straggler;
* specificity (healthy): runs without a straggler, link, network or throttle finding;
* clocks: runs where host B's offset is recovered within its stated bound.

It also prints, as the ratio against the same seed's healthy run, each fault's cost on the
median profiler step.

Run: ``.venv/bin/python benchmarks/multihost_truth.py --seeds 3 --out /tmp/multihost-runs``
(root, ``ip``, ``tc`` and libfaketime needed; about 30 s per seed on 2 cores, plus the
analysis).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from multihost_job import (  # noqa: E402
    HOSTS,
    KINDS,
    WORLD,
    MultiHostRun,
    kineto_arrivals,
    kineto_files,
    missing_parts,
    record_runs,
    span_files,
    visibility,
)

RECORDINGS = ("kineto", "spans")
LINK_KINDS = ("slow-link", "slow-nic", "slow-network-path", "slow-transfers")
ROOT_CAUSE_KINDS = ("straggler", "throttle", *LINK_KINDS)


def _complete(folder: Path) -> bool:
    return (
        (folder / "truth.json").is_file()
        and len(kineto_files(folder)) == WORLD
        and all(span_files(folder, r) for r in range(WORLD))
    )


def record(out: Path, seeds: range, kinds: list[str], *, steps: int = 8) -> list[Path]:
    """Record every (seed, kind) run not yet complete in ``out``; one launch per seed."""
    folders = []
    for seed in seeds:
        runs = [MultiHostRun.draw(kind, seed, steps=steps) for kind in kinds]
        todo = [r for r in runs if not _complete(out / r.name)]
        if todo:
            t0 = time.monotonic()
            record_runs(out, todo)
            print(
                f"recorded seed {seed}: {', '.join(r.name for r in todo)} "
                f"in {time.monotonic() - t0:.1f} s",
                flush=True,
            )
        folders += [out / r.name for r in runs]
        _write_ready(out, kinds)
    return folders


def _write_ready(out: Path, kinds: list[str]) -> None:
    ready = out / "READY"
    if ready.exists():
        return
    firsts = []
    for kind in kinds:
        done = sorted(
            (p for p in out.glob(f"{kind}-s*") if _complete(p)),
            key=lambda p: int(p.name.rsplit("-s", 1)[1]),
        )
        if not done:
            return
        firsts.append(str(done[0]))
    ready.write_text("\n".join(firsts) + "\n")


def _step_ms(folder: Path) -> float:
    """The median ``ProfilerStep#N`` duration over the run's Kineto files, in ms."""
    durations = []
    for path in kineto_files(folder):
        for e in json.loads(path.read_text())["traceEvents"]:
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"):
                durations.append(float(e["dur"]) / 1e3)
    return statistics.median(durations) if durations else float("nan")


def raw_summary(folders: list[Path]) -> None:
    """What the raw data show, per kind (standard library only, no otel-ext)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        truth = json.loads((folder / "truth.json").read_text())
        vis = visibility(folder)
        vis["truth"] = truth
        by_kind.setdefault(truth["kind"], []).append(vis)
    print("raw data (both recordings must show the fault):")
    for kind, runs in by_kind.items():
        shown = sum(v["visible"] for v in runs)
        line = f"  {kind:<10} " + (
            f"nothing injected ({len(runs)} runs)"
            if kind == "healthy"
            else f"fault shows in {shown}/{len(runs)}"
        )
        for rec in ("kineto", "spans"):
            ratios = [v[rec]["recv_ratio"] for v in runs]
            line += f"; {rec}: cross/within-host receive {min(ratios):.1f}-{max(ratios):.1f}x"
            if kind == "slow-rank":
                share, factor = [], []
                for v in runs:
                    r = int(v["truth"]["slow_rank"])
                    late = v[rec]["lateness_ms"]
                    share.append(v[rec]["last"].count(r) / len(v[rec]["last"]))
                    factor.append(late[r] / max(x for q, x in late.items() if q != r))
                line += (
                    f", slow rank last at {min(share):.0%}-{max(share):.0%} of all-reduces, "
                    f"lateness {min(factor):.1f}-{max(factor):.1f}x the next rank's"
                )
        print(line)
    print()


def persistently_late(folder: Path, *, alpha: float = 0.05) -> list[int]:
    """Ranks the raw Kineto arrivals show last at more collectives than chance (one-sided
    binomial at ``alpha``, uncorrected on purpose: it excuses more than the analysis' own
    test would): on a loaded machine the scheduler can make a real straggler of a healthy
    rank, and naming it is no false alarm. Standard library only, on the known offsets."""
    truth = json.loads((folder / "truth.json").read_text())
    offsets = {h: float(v) for h, v in truth["clock_offsets_ms"].items()}
    kin = kineto_arrivals(folder, offsets)
    by_op: dict[str, dict[int, list[float]]] = {}
    for rank, v in kin.items():
        for name, t in v["calls"]:
            if name in ("c10d::allreduce_", "c10d::allgather_"):
                by_op.setdefault(name, {}).setdefault(rank, []).append(t)
    last: list[int] = []
    for arrivals in by_op.values():
        if len(arrivals) == WORLD:
            last += _last_of_each(arrivals)
    n = len(last)
    out = []
    for rank in range(WORLD):
        k = last.count(rank)
        p0 = 1.0 / WORLD
        tail = sum(math.comb(n, i) * p0**i * (1 - p0) ** (n - i) for i in range(k, n + 1))
        if n and tail < alpha:
            out.append(rank)
    return out


def _last_of_each(arrivals: dict[int, list[float]]) -> list[int]:
    ranks = sorted(arrivals)
    n = min(len(v) for v in arrivals.values())
    return [max(ranks, key=lambda r: arrivals[r][k]) for k in range(n)]


def judge(folder: Path, recording: str) -> dict[str, Any]:
    """``analyze`` of one recording of one run, against the run's ground truth."""
    from otel_ext.analysis.engine import analyze

    truth = json.loads((folder / "truth.json").read_text())
    try:
        doc = analyze(folder / recording)
    except Exception as exc:  # one bad analysis is a row of the table, not the end of it
        return {
            "first": f"error: {type(exc).__name__}: {exc}"[:120],
            "top_straggler": None,
            "links": [],
            "correct": False,
            "no_false_alarm": False,
            "clock": {"status": "error"},
        }
    findings = [(f["kind"], str(f.get("target"))) for f in doc.get("findings", [])]
    causes = [f for f in findings if f[0] in ROOT_CAUSE_KINDS]
    device = {int(r["rank"]): str(r.get("device")) for r in doc.get("ranks", [])}
    stragglers = [t for k, t in findings if k == "straggler"]
    links = [f"{k}:{t}" for k, t in findings if k in LINK_KINDS]
    top = doc.get("stragglers") or [{}]
    kind = truth["kind"]
    if kind == "slow-rank":
        correct = bool(stragglers) and stragglers == [device.get(int(truth["slow_rank"]))]
        correct = correct and causes[0][0] == "straggler"
    elif kind == "slow-link":
        correct = bool(links) and not stragglers
    else:
        correct = not causes
    real = {device.get(r) for r in persistently_late(folder)} if kind == "healthy" else set()
    # a straggler finding on a rank the raw data show late beyond chance is no false alarm
    no_false_alarm = all(k == "straggler" and t in real for k, t in causes)
    # host B's clock: the estimate of any of its ranks against the true offset
    clock = {"status": "absent"}
    for row in doc.get("ranks", []):
        if truth["hosts"].get(str(row["rank"])) != HOSTS[1]:
            continue
        est, bound = row.get("clock_offset_estimate_ns"), row.get("clock_bound_ns")
        if est is None:
            continue
        err_ms = float(est) / 1e6 - float(truth["clock_offsets_ms"][HOSTS[1]])
        clock = {
            "status": str(row.get("clock_status")),
            "estimate_ms": float(est) / 1e6,
            "error_ms": err_ms,
            "bound_ms": None if bound is None else float(bound) / 1e6,
            "within": bound is not None and abs(err_ms) <= float(bound) / 1e6,
        }
        break
    return {
        "first": f"{causes[0][0]}:{causes[0][1]}" if causes else "-",
        "top_straggler": top[0].get("rank"),
        "links": links,
        "correct": correct,
        "no_false_alarm": no_false_alarm,
        "clock": clock,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per kind")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--out", type=Path, default=Path("/tmp/multihost-runs"))
    parser.add_argument("--record-only", action="store_true", help="record, do not analyse")
    parser.add_argument("--json", type=Path, help="also write the per-run results here")
    parser.add_argument(
        "--steps", type=int, default=8, help="profiled steps per run (the analysis keeps N-1)"
    )
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        parser.error(f"--kinds: unknown {bad}; known: {', '.join(KINDS)}")
    missing = missing_parts()
    if missing:
        print("multihost_truth: cannot emulate two hosts here: " + "; ".join(missing))
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    folders = record(args.out, seeds, kinds, steps=args.steps)
    raw_summary(folders)
    if args.record_only:
        return 0

    rows = []
    header = f"{'run':<16} {'raw':<9} {'rec':<6} {'first finding':<34} {'top':>3} "
    header += f"{'link finding':<28} {'B offset err/bound ms':<22} ok"
    print(header)
    for folder in folders:
        truth = json.loads((folder / "truth.json").read_text())
        vis = visibility(folder)
        for recording in RECORDINGS:
            t0 = time.monotonic()
            got = judge(folder, recording)
            got.update(
                run=folder.name,
                kind=truth["kind"],
                recording=recording,
                visible=vis["visible"],
                analyze_s=time.monotonic() - t0,
            )
            rows.append(got)
            c = got["clock"]
            clock = f"{c['error_ms']:+.3f}/{c['bound_ms']:.3f}" if "error_ms" in c else c["status"]
            print(
                f"{folder.name:<16} {'shows' if vis['visible'] else 'hidden':<9} "
                f"{recording:<6} {got['first'][:34]:<34} {got['top_straggler']!s:>3} "
                f"{(','.join(got['links']) or '-')[:28]:<28} {clock:<22} "
                f"{'yes' if got['correct'] else 'NO'}",
                flush=True,
            )

    print()
    for kind in kinds:
        for recording in RECORDINGS:
            mine = [r for r in rows if r["kind"] == kind and r["recording"] == recording]
            judged = [r for r in mine if r["visible"]]
            ok = sum(r["correct"] for r in judged)
            what = "specificity" if kind == "healthy" else "sensitivity"
            ratio = ok / len(judged) if judged else float("nan")
            within = sum(bool(r["clock"].get("within")) for r in mine)
            print(
                f"{kind:<10} {recording:<6} {what}: {ok}/{len(judged)} = {ratio:.2f} "
                f"(raw data hide the fault in {len(mine) - len(judged)} of {len(mine)}); "
                f"host B offset within bound: {within}/{len(mine)}"
            )
            if kind == "healthy":
                fair = sum(r["no_false_alarm"] for r in mine)
                print(
                    f"{'':<10} {recording:<6} no false alarm: {fair}/{len(mine)} (a straggler "
                    "finding on a rank the raw arrivals show last beyond chance is a real one)"
                )
    print()
    for kind in kinds:
        if kind == "healthy" or "healthy" not in kinds:
            continue
        ratios = []
        for seed in seeds:
            base = _step_ms(args.out / f"healthy-s{seed}")
            ratios.append(_step_ms(args.out / f"{kind}-s{seed}") / base)
        print(
            f"{kind}: median profiler step {statistics.median(ratios):.2f}x the same seed's "
            f"healthy run (range {min(ratios):.2f}-{max(ratios):.2f})"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
