"""Sensitivity and specificity of the network model on synthetic NCCL point-to-point traces.

For each seed ``S`` of ``--seeds N`` (from ``--first-seed``), ``tests/nccl_p2p_traces.py``
writes two jobs of Kineto traces (3 or 4 ranks over two hosts, a ring of sends and receives
each step, recent PyTorch's comms metadata with the peer, ``Dst Rank``/``Src Rank``):

* ``slow``: one direction between the hosts (drawn) ``slowdown`` times slower (drawn in
  ``--slowdown LO HI``, 4-10x by default; healthy rates 50 GB/s within a host, 12.5 GB/s between hosts), transfer-time
  jitter sigma drawn in 0.05-0.3; half the seeds (drawn) also run, each step, an all-reduce
  within each host and one across both;
* ``healthy``: the same job, nothing slowed.

``otel_ext.analysis.engine.analyze`` reads each. Counted:

* detected: slow runs whose ``slow-network-path`` finding names the planted host pair, whose
  only slow path is the planted direction, and where no rank is named a straggler;
* false findings: healthy runs with a ``slow-network-path``, ``straggler`` or
  ``slow-transfers`` finding.

Run: ``.venv/bin/python benchmarks/nccl_p2p_truth.py --seeds 20`` (about 5 s per seed on 2
cores).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from nccl_p2p_traces import NcclP2pTruth, write_nccl_p2p_job  # noqa: E402

from otel_ext.analysis.document import AnalysisDocument  # noqa: E402
from otel_ext.analysis.engine import analyze  # noqa: E402

_FALSE = ("slow-network-path", "straggler", "slow-transfers")


@dataclass(frozen=True)
class _Case:
    """One seed's job: its shape and the planted slow direction."""

    seed: int
    world: int
    noise: float
    allreduces: bool
    slow: tuple[str, str]
    slowdown: float

    @classmethod
    def draw(cls, seed: int, slowdown: tuple[float, float]) -> _Case:
        """The seed's job, drawn."""
        rnd = random.Random(seed)
        world = rnd.choice([3, 4])
        slow = rnd.choice([("hostA", "hostB"), ("hostB", "hostA")])
        factor = rnd.uniform(*slowdown)
        noise = rnd.uniform(0.05, 0.3)
        return cls(seed, world, noise, rnd.random() < 0.5, slow, factor)

    def run(self, folder: Path, *, healthy: bool) -> tuple[NcclP2pTruth, AnalysisDocument]:
        """Write the job (slowed, or healthy) into ``folder`` and analyse it."""
        folder.mkdir()
        truth = write_nccl_p2p_job(
            folder, world=self.world, noise=self.noise, allreduces=self.allreduces,
            seed=self.seed, slow=None if healthy else self.slow, slowdown=self.slowdown,
        )  # fmt: skip
        return truth, cast(AnalysisDocument, analyze([str(folder)], workers=1))


def _detected(truth: NcclP2pTruth, doc: AnalysisDocument) -> bool:
    """The planted direction is the only slow path, its host pair's finding exists and no
    rank is named a straggler."""
    slow = [p["path"] for p in doc["network"]["paths"] if p["slow"]]
    kinds = [f["kind"] for f in doc["findings"]]
    pair = sorted((truth.slow_path or "").split("->"))
    named = any(
        f["kind"] == "slow-network-path" and sorted(f["evidence"]["hosts"]) == pair
        for f in doc["findings"]
    )
    return slow == [truth.slow_path] and named and "straggler" not in kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--slowdown", type=float, nargs=2, default=(4.0, 10.0), metavar=("LO", "HI"))
    args = ap.parse_args()
    detected = false = 0
    t0 = time.perf_counter()
    print("seed  world  all-reduces  slow          slowdown  noise  detected  healthy findings")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            case = _Case.draw(seed, tuple(args.slowdown))
            truth, doc = case.run(Path(tmp) / f"slow-{seed}", healthy=False)
            _, ok_doc = case.run(Path(tmp) / f"ok-{seed}", healthy=True)
            hit = _detected(truth, doc)
            wrong = [f["kind"] for f in ok_doc["findings"] if f["kind"] in _FALSE]
            detected += hit
            false += bool(wrong)
            print(f"{seed:>4}  {case.world:>5}  {'yes' if case.allreduces else 'no':>11}  "
                  f"{truth.slow_path:<12}  {case.slowdown:>7.1f}x  {case.noise:>5.2f}  "
                  f"{'yes' if hit else 'NO':>8}  {','.join(wrong) or '-'}")  # fmt: skip
    n = args.seeds
    print(f"sensitivity: {detected}/{n} slow directions found (no straggler named)")
    print(f"specificity: {n - false}/{n} healthy runs without a network or straggler finding")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
