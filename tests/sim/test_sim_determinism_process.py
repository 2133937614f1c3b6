"""Two separate processes simulating with one seed write byte-identical files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_same_seed_in_two_processes_gives_identical_files(tmp_path: Path) -> None:
    for run in ("a", "b"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "otel_ext.cli",
                "simulate",
                "--hosts",
                "2",
                "--chips",
                "2",
                "--requests",
                "6",
                "--seed",
                "11",
                "--out",
                str(tmp_path / run),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    for name in ("traces.jsonl", "metrics.jsonl", "timeline.json", "truth.json"):
        a = (tmp_path / "a" / name).read_bytes()
        assert a, name
        assert a == (tmp_path / "b" / name).read_bytes(), name
