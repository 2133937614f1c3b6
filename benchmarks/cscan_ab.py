"""Benchmark: the compiled scanner (``_cscan.c``) of the working tree against a base revision's.

Run: ``python benchmarks/cscan_ab.py [--base HEAD] [--rounds 40] [--no-callgrind]``
(about a minute; the callgrind counts need ``valgrind``).

Both sources are compiled here the way ``setup.py`` builds the extension (the interpreter's
``CC``, ``CFLAGS`` and ``CCSHARED``, then ``-O2``) and loaded side by side in this process.
Inputs: the OTLP-JSON traces and metrics of ``otel-ext simulate --hosts 2 --chips 8
--requests 50`` (``scan_otlp_lines`` with the span loader's keys, ``scan_otlp_metrics_lines``)
and every ``scan`` call the Kineto loader makes on a real profiler trace (``a100_train``),
recorded once and replayed. Every call's result must be the same for both builds.

Printed per input: the median and the best of ``--rounds`` interleaved calls (order alternating
each round) and their ratios over the base, same run; then, where valgrind is present, the
instructions one call executes under ``valgrind --tool=callgrind`` (collection switched on
only inside the scanning function), which a busy machine does not disturb.
"""

from __future__ import annotations

import argparse
import importlib.util
import pickle
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "otel_ext/analysis/loaders/_cscan.c"
KINETO = ROOT.parent / "shared" / "traces" / "pytorch-profiler" / "a100_train" / "rank0.json.gz"
#: the function collected under callgrind, per input
ENTRY = {"otlp spans": "scan_otlp_lines", "otlp metrics": "scan_otlp_metrics_lines",
         "kineto": "scan"}  # fmt: skip


def build(source: Path, out: Path) -> Path:
    """``source`` compiled as setup.py compiles it, into ``out``; the shared object's path."""
    so = out / f"_cscan{sysconfig.get_config_var('EXT_SUFFIX')}"
    flags = [sysconfig.get_config_var(v) or "" for v in ("CC", "CFLAGS", "CCSHARED")]
    cmd = [*" ".join(flags).split(), f"-I{sysconfig.get_paths()['include']}", "-O2",
           "-shared", str(source), "-o", str(so)]  # fmt: skip
    subprocess.run(cmd, check=True)
    return so


def load(tag: str, so: Path) -> ModuleType:
    """The extension at ``so`` as a module of its own (``TAG._cscan``)."""
    spec = importlib.util.spec_from_file_location(f"{tag}._cscan", so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kineto_calls(trace: Path) -> list[tuple[Any, ...]]:
    """The arguments of every ``scan`` call the Kineto loader makes on ``trace``."""
    from otel_ext.analysis.loaders import _kineto_fast, load_file

    real, calls = _kineto_fast._cscan, []

    class Recorder:
        def scan(self, buf: Any, *args: Any) -> Any:
            calls.append((bytes(buf), *args))
            return real.scan(buf, *args)

    _kineto_fast._cscan = Recorder()
    try:
        load_file(trace)
    finally:
        _kineto_fast._cscan = real
    return calls


def inputs(work: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Per input, the argument tuples of the calls one pass makes."""
    from otel_ext.analysis.loaders.spans import _wanted

    sim = work / "sim"
    subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", "2", "--chips", "8",
         "--requests", "50", "--no-timeline", "--quiet", "--out", str(sim)],
        check=True, timeout=600,
    )  # fmt: skip
    keys = tuple(k.encode() for k in _wanted())
    out = {
        "otlp spans": [((sim / "traces.jsonl").read_bytes(), keys, 1, 1 << 30)],
        "otlp metrics": [((sim / "metrics.jsonl").read_bytes(), 1, 1 << 30)],
    }
    if KINETO.exists():
        out["kineto"] = kineto_calls(KINETO)
    return out


def one_pass(module: ModuleType, name: str, calls: list[tuple[Any, ...]]) -> list[Any]:
    fn = getattr(module, ENTRY[name])
    return [fn(*args) for args in calls]


def timings(builds: dict[str, ModuleType], work: dict[str, list[Any]], rounds: int) -> None:
    """Interleaved wall-clock timings, checked for equal results first."""
    base, new = builds["base"], builds["new"]
    print(f"{'input':14} {'base ms':>9} {'new ms':>9} {'median':>7} "
          f"{'base best':>9} {'new best':>9} {'best':>6}")  # fmt: skip
    for name, calls in work.items():
        if one_pass(base, name, calls) != one_pass(new, name, calls):
            raise SystemExit(f"{name}: the two builds give different results")
        t: dict[str, list[float]] = {"base": [], "new": []}
        for r in range(rounds):
            for tag in ("base", "new") if r % 2 == 0 else ("new", "base"):
                t0 = time.perf_counter()
                one_pass(builds[tag], name, calls)
                t[tag].append(time.perf_counter() - t0)
        mb, mn = statistics.median(t["base"]), statistics.median(t["new"])
        bb, bn = min(t["base"]), min(t["new"])
        print(f"{name:14} {mb * 1e3:9.2f} {mn * 1e3:9.2f} {mn / mb:7.3f} "
              f"{bb * 1e3:9.2f} {bn * 1e3:9.2f} {bn / bb:6.3f}")  # fmt: skip


_CHILD = """
import importlib.util, pickle, sys
spec = importlib.util.spec_from_file_location("x._cscan", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
fn = getattr(m, sys.argv[2])
for args in pickle.load(open(sys.argv[3], "rb")):
    fn(*args)
"""


def instructions(sos: dict[str, Path], work: dict[str, list[Any]], tmp: Path) -> None:
    """Instructions executed inside the scanning function, one pass, per build."""
    print("instructions per pass (callgrind, inside the scanning function):")
    for name, calls in work.items():
        data = tmp / f"{name.replace(' ', '_')}.pickle"
        data.write_bytes(pickle.dumps(calls))
        counts = {}
        for tag, so in sos.items():
            out = tmp / f"callgrind.{tag}.{data.stem}"
            subprocess.run(
                ["valgrind", "--tool=callgrind", f"--toggle-collect={ENTRY[name]}",
                 f"--callgrind-out-file={out}", sys.executable, "-c", _CHILD, str(so),
                 ENTRY[name], str(data)],
                check=True, capture_output=True, timeout=900,
            )  # fmt: skip
            totals = [ln for ln in out.read_text().splitlines() if ln.startswith("totals:")]
            counts[tag] = int(totals[0].split()[1])
        ratio = counts["new"] / counts["base"]
        print(f"  {name:14} base {counts['base']:>13,}  new {counts['new']:>13,}  "
              f"new/base {ratio:.4f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="the revision to compare with")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--no-callgrind", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        old_src = tmp / "base" / "_cscan.c"
        old_src.parent.mkdir()
        show = ["git", "-C", str(ROOT), "show", f"{args.base}:{SOURCE}"]
        old_src.write_bytes(subprocess.run(show, check=True, capture_output=True).stdout)
        (tmp / "new").mkdir()
        sos = {"base": build(old_src, tmp / "base"), "new": build(ROOT / SOURCE, tmp / "new")}
        builds = {tag: load(tag, so) for tag, so in sos.items()}
        work = inputs(tmp)
        print(f"base {args.base} against the working tree's {SOURCE}; {args.rounds} rounds")
        timings(builds, work, args.rounds)
        if args.no_callgrind:
            return
        if shutil.which("valgrind") is None:
            print("instructions: valgrind not found (apt-get install valgrind)")
            return
        instructions(sos, work, tmp)


if __name__ == "__main__":
    main()
