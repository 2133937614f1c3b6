"""``otel-ext demo`` end to end: the files it writes load, and its top finding is the fault.

The demo reads only the telemetry files for its analysis; ``truth.json`` is read here, by the
test, to hold the finding against what was injected.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from otel_ext.cli import main
from otel_ext.demo import default_fault
from otel_ext.exporters import read_metrics, read_spans

pytestmark = pytest.mark.slow


def _top_matches_truth(out: Path) -> tuple[dict, dict]:
    report = json.loads((out / "report.json").read_text())
    truth = json.loads((out / "truth.json").read_text())
    return report["findings"][0], truth["faults"][0]


def test_demo_writes_every_output_and_names_the_injected_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    rc = main(["demo", "--requests", "120", "--seed", "0", "--out", str(out)])
    assert rc == 0
    for name in (
        "traces.jsonl",
        "metrics.jsonl",
        "timeline.json",
        "truth.json",
        "report.json",
        "report.html",
        "clock-alignment.json",
    ):
        assert (out / name).stat().st_size > 0, name
    spans = list(read_spans(out / "traces.jsonl"))
    points = list(read_metrics(out / "metrics.jsonl"))
    assert len(spans) > 1000 and len(points) > 1000
    timeline = json.loads((out / "timeline.json").read_text())
    assert timeline["traceEvents"]
    top, fault = _top_matches_truth(out)
    assert fault["target"] == default_fault(2, 4, 0).split("@")[1]
    assert (top["kind"], top["target"]) == (fault["kind"], fault["target"])
    printed = capsys.readouterr()
    assert f"{fault['kind']} at {fault['target']}" in printed.out
    assert "serving live counters at http://127.0.0.1:" in printed.err
    clock = json.loads((out / "clock-alignment.json").read_text())
    assert clock["causality"]["violations_after"] == 0


def test_demo_serves_metrics_while_kept_up(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_ext.cli",
            "demo",
            "--requests",
            "30",
            "--seed",
            "2",
            "--out",
            str(tmp_path / "d"),
            "--serve-seconds",
            "120",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    url = None
    try:
        for line in proc.stderr:
            if "serving live counters at" in line:
                url = line.rsplit(" ", 1)[1].strip()
            if "keeping" in line and "up for" in line:
                break
        assert url is not None, "the demo never printed its /metrics address"
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "accel_device_cycles_active" in body or "hw_power" in body, body[:500]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode in (0, 130)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["demo", "--hosts", "0"], "--hosts must be at least 1"),
        (["demo", "--fault", "melted@host0/chip0"], "unknown kind"),
        (["demo", "--fault", "straggler@host9/chip0"], "no host host9"),
        (["demo", "--hosts", "two"], "invalid int value"),
        (["demo", "--real", "--ranks", "3"], "--ranks must be"),
    ],
)
def test_bad_options_give_one_line_errors(argv: list[str], needle: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", *argv, "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.integration
def test_demo_real_runs_real_torch_ranks_and_finds_the_straggler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "real"
    rc = main(["demo", "--real", "--steps", "3", "--seed", "1", "--out", str(out)])
    assert rc == 0
    files = sorted(out.glob("traces-rank*.jsonl"))
    assert len(files) == 4
    names = {s.name for f in files for s in read_spans(f)}
    assert "accel.collective" in names and "accel.layer" in names
    top, fault = _top_matches_truth(out)
    assert (top["kind"], top["target"]) == (fault["kind"], fault["target"])
