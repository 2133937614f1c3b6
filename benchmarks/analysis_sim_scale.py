"""Benchmark: the whole ``otel-ext analyze`` of a simulated 2x8 and 16x8 cluster, per phase.

    python benchmarks/analysis_sim_scale.py [--sizes 2x8,16x8] [--requests 300]
                                            [--fixed-requests] [--dir DIR] [--repeat 1]
                                            [--profile] [--save-json DIR] [--timeout 900]

Each size is a folder written by ``otel-ext simulate --hosts H --chips C`` (kept in ``--dir``
and reused when its ``truth.json`` is there), then analysed by
``otel_ext.analysis.engine.analyze`` on that folder in a fresh process per size (its memory is
its own: the process's peak RSS), exactly what ``otel-ext analyze FOLDER`` runs.

**What "linear" means here.** The work must grow with the ranks. ``--requests`` is the
smallest size's request count; a larger size serves as many more requests, at an arrival rate
as many times higher, as it has more hosts (2x8 with 300 requests at 40/s, 16x8 with 2,400 at
320/s): every host (one serving replica of 8 chips) then serves the same load over the same
virtual time, so spans, metric points and bytes per rank stay the same and a linear analysis
takes 8x as long for 8x the ranks. (The issue's ``--requests 300`` for both sizes spreads 300
requests over 8 times the replicas: 5.5x the spans and 8x the metric points for 8x the ranks,
which flatters the ratio; ``--fixed-requests`` runs that case instead.)

Printed per size: spans, metric points, input MB; the load, the analysis after loading and the
whole (load plus analysis) in seconds, and per rank in ms; the whole's CPU seconds (the
loading pool's workers included: the steadier measure on a shared machine); the process's peak
RSS (MB and MB per rank); then each phase's CPU seconds (the loading's wall seconds). The
phases: every otel-ext function the engine's module calls, the breakdown and overlap
functions, the counter correlation (``correlate_counters``, inside the findings) and the
re-read of the OTLP trace files for the engine steps (``engine_steps_from_otlp``, inside the
request accounting), each timed exclusive of the others it calls, and summed into the groups
loading, preparation, breakdowns, alignment, collectives, stragglers (with the critical path,
imbalance and roofline), requests, counters, findings and report (the engine's own assembly).
Each figure against linear from the smallest size: ``vs linear = (t(large) / t(small)) /
(ranks(large) / ranks(small))``: 1.0 is linear, 2.0 twice what linear growth predicts; the
target is ``<= 1.3`` for the whole ``analyze``.

``--profile`` runs each size once more under ``cProfile`` (analysis only, after loading) and
lists the functions whose own CPU time grows faster than linear, and the largest size's top
functions by cumulative time. ``--save-json DIR`` writes each size's analysis document
(``DIR/HxC.json``): the same command before and after a change must give the same files.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: phase group of each timed function (anything else of the engine: "other engine steps")
GROUPS = {
    "load_paths": "loading",
    "separate_captures": "preparation",
    "select_steps": "preparation",
    "_serving_requests": "preparation",
    "hosts_from_file_names": "preparation",
    "_rank_names": "preparation",
    "runs_summary": "preparation",
    "_device_model": "preparation",
    "align_ranks": "alignment",
    "match_collectives": "collectives",
    "link_stats": "collectives",
    "port_stats": "collectives",
    "sampled_fraction": "collectives",
    "_collective_calls": "collectives",
    "wait_heatmap": "collectives",
    "_peer_groups": "collectives",
    "CollectiveMatch.summary": "collectives",
    "CollectiveMatch.rows": "collectives",
    "CollectiveMatch.mismatches": "collectives",
    "find_stragglers": "stragglers",
    "straggler_verdicts": "stragglers",
    "critical_path": "stragglers",
    "load_imbalance": "stragglers",
    "roofline": "stragglers",
    "request_latency": "requests",
    "request_accounting": "requests",
    "engine_steps_from_otlp": "requests",
    "correlate_counters": "counters",
    "build_findings": "findings",
}
GROUP_ORDER = (
    "loading",
    "preparation",
    "breakdowns",
    "alignment",
    "collectives",
    "stragglers",
    "requests",
    "counters",
    "findings",
    "other engine steps",
    "report",
)


def _group(name: str) -> str:
    if name in GROUPS:
        return GROUPS[name]
    if name.startswith(("breakdown.", "overlap.")):
        return "breakdowns"
    return "other engine steps"


# --- the measured child process ---------------------------------------------------------------


def _instrument() -> dict[str, list[float]]:
    """Wrap the engine's steps with exclusive timers (a wrapped step called inside another is
    taken out of the outer one's time).

    Returns ``{step: [wall s, CPU s, calls]}``, filled as the engine runs.
    """
    from otel_ext.analysis import engine
    from otel_ext.analysis.cross import collective_match as collectives
    from otel_ext.analysis.findings import network as findings_network
    from otel_ext.analysis.findings import slow_ranks as findings_slow_ranks
    from otel_ext.analysis.loaders import serving_inputs
    from otel_ext.analysis.rank import breakdown, overlap

    phases: dict[str, list[float]] = {}
    stack: list[list[float]] = []  # per open call: [wall, cpu] spent in nested timed calls

    def wrap(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack.append([0.0, 0.0])
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                inner = stack.pop()
                rec = phases.setdefault(name, [0.0, 0.0, 0])
                rec[0] += wall - inner[0]
                rec[1] += cpu - inner[1]
                rec[2] += 1
                if stack:
                    stack[-1][0] += wall
                    stack[-1][1] += cpu

        return timed

    for name, obj in list(vars(engine).items()):
        if name in ("analyze", "to_json") or not inspect.isfunction(obj):
            continue
        if getattr(obj, "__module__", "").startswith("otel_ext"):
            setattr(engine, name, wrap(name, obj))
    for mod in (breakdown, overlap):
        short = mod.__name__.rsplit(".", 1)[-1]
        for name, obj in list(vars(mod).items()):
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__ and name[0] != "_":
                setattr(mod, name, wrap(f"{short}.{name}", obj))
    for rules in (findings_slow_ranks, findings_network):  # the findings that read counters
        rules.correlate_counters = wrap("correlate_counters", rules.correlate_counters)
    serving_inputs.engine_steps_from_otlp = wrap(
        "engine_steps_from_otlp", serving_inputs.engine_steps_from_otlp
    )
    cls = collectives.CollectiveMatch
    for meth in ("summary", "rows", "mismatches"):
        setattr(cls, meth, wrap(f"CollectiveMatch.{meth}", getattr(cls, meth)))
    return phases


def child(args: argparse.Namespace) -> None:
    """Load and analyse one folder; print one JSON line."""
    import resource

    from otel_ext.analysis.engine import analyze, to_json
    from otel_ext.analysis.loaders import load_paths

    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    phases = {} if args.profile_out else _instrument()

    def children_cpu() -> float:  # the loading pool's workers, once they have exited
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    t0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
    load = load_paths([args.child])
    load_s = time.perf_counter() - t0
    load_cpu = time.process_time() - c0 + children_cpu() - k0
    prof = None
    if args.profile_out:
        import cProfile

        prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
        prof.enable()
    t1, c1 = time.perf_counter(), time.process_time()
    doc = analyze(load)
    seconds, cpu = time.perf_counter() - t1, time.process_time() - c1
    if prof is not None:
        prof.disable()
        _dump_profile(prof, args.profile_out)
        prof.dump_stats(args.profile_out + ".pstats")
    if args.save_json:
        Path(args.save_json).write_text(to_json(doc))
    ranks = sum(1 for r in doc["ranks"] if r["rank"] >= 0)
    print(
        json.dumps(
            {
                "folder": args.child,
                "ranks": ranks,
                "spans": int(doc["run"]["events"]),
                "metric_points": int(doc["run"]["metric_points"]),
                "input_mb": sum(f.stat().st_size for f in Path(args.child).glob("*.jsonl")) / 2**20,
                "load_s": load_s,
                "load_cpu_s": load_cpu,
                "seconds": seconds,
                "cpu_s": cpu,
                "rss_start_kb": rss_start,
                "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "findings": [f"{f['kind']} {f['target']}" for f in doc["findings"]][:4],
                "phases": phases,
            }
        )
    )


def _dump_profile(prof: Any, path: str) -> None:
    """Own and cumulative CPU time per function (``file:line(name)``: calls, own, cumulative)."""
    import pstats

    def short(key: tuple[str, int, str]) -> str:
        file, line, func = key
        file = file.split("/otel_ext/", 1)[1] if "/otel_ext/" in file else Path(file).name
        return f"{file}:{line}({func})"

    st = pstats.Stats(prof)
    out: dict[str, list[float]] = {}
    for key, (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if tt >= 1e-4 or ct >= 1e-3:
            out[short(key)] = [nc, tt, ct]
    Path(path).write_text(json.dumps(out))


# --- the parent: simulate, then one fresh process per size --------------------------------------


def simulate(folder: Path, hosts: int, chips: int, requests: int, rate: float) -> None:
    """Write the simulated folder unless a finished one is there."""
    if (folder / "truth.json").is_file():
        return
    cmd = [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", str(hosts)]
    cmd += ["--chips", str(chips), "--requests", str(requests), "--rate", f"{rate:g}"]
    cmd += ["--no-timeline", "--quiet", "--out", str(folder)]
    print("  $ otel-ext " + " ".join(cmd[3:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def run_size(args: argparse.Namespace, folder: Path, **extra: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(folder)]
    for k, v in extra.items():
        cmd += [f"--{k.replace('_', '-')}", v]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"folder": str(folder), "error": f"timed out after {args.timeout} s"}
    if out.returncode != 0:
        return {"folder": str(folder), "error": out.stderr.strip()[-600:]}
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each time its best run's (the machine is shared), memory its largest."""
    errors = [r for r in runs if "error" in r]
    if errors:
        return errors[0]
    best = dict(min(runs, key=lambda r: r["seconds"]))
    for k in ("load_s", "load_cpu_s", "cpu_s"):
        best[k] = min(r[k] for r in runs)
    best["maxrss_kb"] = max(r["maxrss_kb"] for r in runs)
    best["phases"] = {
        k: [min(r["phases"][k][i] for r in runs) for i in range(2)] + [v[2]]
        for k, v in runs[0]["phases"].items()
    }
    return best


def vs_linear(x: float, x0: float, n: int, n0: int) -> float:
    """``(x / x0) / (n / n0)``: 1.0 = linear.

    >>> vs_linear(16.0, 1.0, 128, 16)
    2.0
    """
    return (x / x0) / (n / n0) if x0 > 0 else float("nan")


def grouped(res: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per phase group (``loading``: wall seconds, its pool's CPU is not this
    process's; ``report``: the analysis's CPU outside every timed step)."""
    out = dict.fromkeys(GROUP_ORDER, 0.0)
    out["loading"] = res["load_s"]
    for k, (_wall, cpu, _n) in res["phases"].items():
        out[_group(k)] += cpu
    out["report"] = res["cpu_s"] - sum(v[1] for v in res["phases"].values())
    return out


def print_sizes(results: list[dict[str, Any]]) -> None:
    b = results[0]
    n0 = b["ranks"]
    print(
        "| size | ranks | spans | metric points | input MB | load s | analysis s | whole s |"
        " whole CPU s | ms per rank | peak RSS MB | MB per rank | load vs linear |"
        " analysis vs linear | whole vs linear | whole CPU vs linear | memory vs linear |"
    )
    print("|---" * 17 + "|")
    for r in results:
        n = r["ranks"]
        whole, whole0 = r["load_s"] + r["seconds"], b["load_s"] + b["seconds"]
        cpu, cpu0 = r["load_cpu_s"] + r["cpu_s"], b["load_cpu_s"] + b["cpu_s"]
        mem, mem0 = r["maxrss_kb"] / 1024, b["maxrss_kb"] / 1024
        print(
            f"| {r['size']} | {n} | {r['spans']:,} | {r['metric_points']:,} |"
            f" {r['input_mb']:.0f} | {r['load_s']:.2f} | {r['seconds']:.2f} | {whole:.2f} |"
            f" {cpu:.2f} | {whole / n * 1e3:.0f} | {mem:.0f} |"
            f" {mem / n:.2f} | {vs_linear(r['load_s'], b['load_s'], n, n0):.2f} |"
            f" {vs_linear(r['seconds'], b['seconds'], n, n0):.2f} |"
            f" **{vs_linear(whole, whole0, n, n0):.2f}** | {vs_linear(cpu, cpu0, n, n0):.2f} |"
            f" {vs_linear(mem, mem0, n, n0):.2f} |"
        )


def print_phases(results: list[dict[str, Any]], *, detail: bool) -> None:
    b = results[0]
    heads = ["phase (CPU s; loading: wall s)", *(r["size"] for r in results)]
    heads += [f"vs linear {r['size']}" for r in results[1:]]
    print("| " + " | ".join(heads) + " |")
    print("|---" * len(heads) + "|")
    groups = [grouped(r) for r in results]
    rows: list[tuple[str, list[float]]] = [(g, [x[g] for x in groups]) for g in GROUP_ORDER]
    if detail:
        names = sorted(
            {k for r in results for k in r["phases"]},
            key=lambda k: -results[-1]["phases"].get(k, [0, 0, 0])[1],
        )
        rows += [(f"  {k}", [r["phases"].get(k, [0, 0, 0])[1] for r in results]) for k in names]
    for label, vals in rows:
        if max(vals) < 0.0005:
            continue
        cells = [f"{v:.3f}" for v in vals]
        cells += [
            f"{vs_linear(v, vals[0], r['ranks'], b['ranks']):.2f}"
            for v, r in zip(vals[1:], results[1:])
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")


def print_profile(profiles: list[tuple[dict[str, Any], dict[str, Any]]], top: int = 25) -> None:
    (r0, p0), (r1, p1) = profiles[0], profiles[-1]
    n0, n1 = r0["ranks"], r1["ranks"]
    total1 = sum(v[1] for v in p1.values())
    rows = []
    for k, (nc, tt, ct) in p1.items():
        if tt < 0.004 * total1:
            continue
        base = p0.get(k, [0, 0.0, 0.0])
        ratio = vs_linear(tt, base[1], n1, n0) if base[1] > 0 else float("inf")
        rows.append((ratio, k, base[1], tt, base[0], nc, ct))
    rows.sort(reverse=True)
    print("\nOwn CPU time (cProfile, analysis after loading) of functions with >= 0.4 % of the")
    print(f"{r1['size']} total, vs linear from {r0['size']}:")
    print(
        f"| function | {r0['size']} s | {r1['size']} s | vs linear | calls | calls | cumulative s |"
    )
    print("|---" * 7 + "|")
    for ratio, k, t0, tt, c0, nc, ct in rows:
        print(f"| `{k}` | {t0:.3f} | {tt:.3f} | {ratio:.2f} | {c0} | {nc} | {ct:.3f} |")
    print(f"\nTop {top} functions of {r1['size']} by cumulative CPU time:")
    print("| function | calls | own s | cumulative s |")
    print("|---|---|---|---|")
    for k, (nc, tt, ct) in sorted(p1.items(), key=lambda kv: -kv[1][2])[:top]:
        print(f"| `{k}` | {nc} | {tt:.3f} | {ct:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="2x8,16x8", help="HOSTSxCHIPS, comma-separated")
    ap.add_argument("--requests", type=int, default=300, help="requests of the smallest size")
    ap.add_argument("--rate", type=float, default=40.0, help="arrivals/s of the smallest size")
    ap.add_argument(
        "--fixed-requests", action="store_true", help="the same requests and rate at every size"
    )
    ap.add_argument("--dir", default="/tmp/otel-ext-sim-scale", help="simulated folders")
    ap.add_argument("--repeat", type=int, default=1, help="fresh runs per size (best kept)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--profile", action="store_true", help="cProfile each size once more")
    ap.add_argument("--detail", action="store_true", help="every timed step, not only groups")
    ap.add_argument("--save-json", help="write each size's analysis document here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    h0 = sizes[0][0]
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    results: list[dict[str, Any]] = []
    folders = []
    for hosts, chips in sizes:
        scale = 1 if args.fixed_requests else hosts / h0
        req, rate = round(args.requests * scale), args.rate * scale
        folder = Path(args.dir) / f"h{hosts}c{chips}r{req}"
        simulate(folder, hosts, chips, req, rate)
        folders.append(folder)
        extra = {}
        if args.save_json:
            os.makedirs(args.save_json, exist_ok=True)
            extra["save_json"] = str(Path(args.save_json) / f"{hosts}x{chips}.json")
        runs = [run_size(args, folder, **extra) for _ in range(args.repeat)]
        res = _best(runs)
        if "error" in res:
            raise SystemExit(f"{hosts}x{chips}: {res['error']}")
        res["size"] = f"{hosts}x{chips}"
        print(
            f"  {res['size']} ({req} requests at {rate:g}/s): load {res['load_s']:.2f} s,"
            f" analysis {res['seconds']:.2f} s, peak RSS {res['maxrss_kb'] / 1024:.0f} MB;"
            f" findings {res['findings']}",
            flush=True,
        )
        results.append(res)
    print()
    print_sizes(results)
    print()
    print_phases(results, detail=args.detail)
    if args.profile and len(results) >= 2:
        import tempfile

        profiles = []
        with tempfile.TemporaryDirectory() as tmp:
            for res, folder in zip(results, folders):
                path = os.path.join(tmp, f"{res['size']}.json")
                got = run_size(args, folder, profile_out=path)
                if "error" in got:
                    raise SystemExit(f"profile {res['size']}: {got['error']}")
                profiles.append((res, json.loads(Path(path).read_text())))
        print_profile(profiles)


if __name__ == "__main__":
    main()
