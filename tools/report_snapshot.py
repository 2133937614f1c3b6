"""Snapshot every report otel-ext writes, to prove a refactor changes none of them.

``snapshot OUT`` runs ``otel-ext analyze`` on every set under ``../shared/traces`` (each
folder as one input, ``--keep-going``) in JSON and text, the HTML report and the Perfetto
timeline on the multi-rank sets, and the same on seeded simulated runs (healthy and one of
each fault kind); each report lands in OUT under a name that says what produced it, with
the exit status and stderr beside it. ``compare A B`` lists every file that differs.

    python tools/report_snapshot.py snapshot /tmp/before
    python tools/report_snapshot.py compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import concurrent.futures
import filecmp
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
OTEL_EXT = [sys.executable, "-m", "otel_ext.cli"]
SIM_RUNS = {
    "sim_healthy": [],
    "sim_straggler": ["--fault", "straggler@host1/chip2"],
    "sim_slow_link": ["--fault", "slow-link@host0/chip1-chip2"],
    "sim_slow_nic": ["--fault", "slow-nic@host1"],
}
SIM_DIR = Path("/tmp/otel-ext-report-snapshot/sim-runs")
MULTI_RANK = {"param_dlrm_v100_8rank", "two_rank", "sim_healthy", "sim_straggler"}


def _sets() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for group in ("pytorch-profiler", "other-formats"):
        for folder in sorted((TRACES / group).iterdir()):
            if folder.is_dir():
                found[folder.name] = folder
    return found


def _run(cmd: list[str], out: Path, name: str) -> None:
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)
    (out / f"{name}.stdout").write_bytes(done.stdout)
    # Progress lines carry timings; keep only the lines that are not progress.
    kept = [
        line
        for line in done.stderr.decode(errors="replace").splitlines()
        if "s)" not in line and "%" not in line and " in " not in line
    ]
    (out / f"{name}.stderr").write_text("\n".join(kept) + f"\nrc={done.returncode}\n")


def _analyze_jobs(name: str, path: Path, out: Path) -> list[tuple[list[str], str]]:
    base = [*OTEL_EXT, "analyze", str(path), "--keep-going", "--workers", "1"]
    jobs = [
        ([*base, "--format", "json"], f"{name}.json"),
        ([*base, "--format", "text"], f"{name}.text"),
    ]
    if name in MULTI_RANK:
        jobs.append(([*base, "--format", "html"], f"{name}.html"))
        jobs.append(
            (
                [*base, "--format", "perfetto", "--out", str(out / f"{name}.perfetto.json")],
                f"{name}.perfetto",
            )
        )
    return jobs


def snapshot(out: Path, only: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # Reports name their input paths, so the simulated runs live at one fixed place.
    sims = SIM_DIR
    sims.mkdir(parents=True, exist_ok=True)
    sets = _sets()
    for name, extra in SIM_RUNS.items():
        folder = sims / name
        if not folder.exists():
            subprocess.run(
                [
                    *OTEL_EXT,
                    "simulate",
                    "--seed",
                    "3",
                    "--requests",
                    "60",
                    "--quiet",
                    "--out",
                    str(folder),
                    *extra,
                ],
                check=True,
                cwd=ROOT,
            )
        sets[name] = folder
    if only:
        sets = {k: v for k, v in sets.items() if k in only}
    jobs = [job for name, path in sets.items() for job in _analyze_jobs(name, path, out)]
    workers = max(1, (os.cpu_count() or 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(_run, cmd, out, name) for cmd, name in jobs]:
            future.result()
    print(f"{len(jobs)} reports of {len(sets)} sets in {out}")


def compare(a: Path, b: Path) -> int:
    names = sorted(
        {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
        | {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    )
    differ = [
        n
        for n in names
        if not ((a / n).exists() and (b / n).exists() and filecmp.cmp(a / n, b / n, shallow=False))
    ]
    for n in differ:
        print(f"differs: {n}")
    print(f"{len(names) - len(differ)} of {len(names)} files identical")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("out", type=Path)
    snap.add_argument("--only", nargs="*", default=[], help="set names (default: all)")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "snapshot":
        snapshot(args.out, args.only)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
