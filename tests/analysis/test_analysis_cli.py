"""``otel-ext analyze``: formats, folders, left-out files, and one-line errors on bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ext.cli import main

KINETO = {
    "distributedInfo": {"rank": 0, "world_size": 2},
    "traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 2, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 13, "dur": 20,
         "args": {"correlation": 1, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
         "pid": 0, "tid": 9, "ts": 40, "dur": 30, "args": {"stream": 9, "device": 0}},
    ],
}  # fmt: skip


def _ranks(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    for rank, (shift, late) in enumerate([(0, 0), (5_000, 7)]):
        doc = json.loads(json.dumps(KINETO))
        doc["distributedInfo"]["rank"] = rank
        for e in doc["traceEvents"]:
            e["ts"] += shift
        comm = doc["traceEvents"][2]
        comm["ts"] += late
        comm["dur"] -= late
        (d / f"rank{rank}.json").write_text(json.dumps(doc))
    (d / "truth.json").write_text('{"faults": []}')
    return d


def test_text_json_html_from_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _ranks(tmp_path)
    assert main(["analyze", str(d), "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("otel-ext analysis:") and "2 ranks" in out
    assert "truth.json" in err and "left out" in err
    assert "loaded 2/2 files" in err or "loaded 3/3 files" in err
    assert main(["analyze", str(d), "--format", "json", "--workers", "1", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("schema", "inputs", "ranks", "temporal_breakdown", "idle_breakdown",
                "comm_comp_overlap", "kernel_breakdown", "collectives", "stragglers",
                "critical_path", "causality", "requests", "findings"):  # fmt: skip
        assert key in doc, key
    assert doc["schema"] == "otel-ext.analysis/1"
    offsets = {r["rank"]: r["clock_offset_ns"] for r in doc["ranks"]}
    assert offsets == {0: 0.0, 1: pytest.approx(5_000_000, abs=1)}
    assert doc["stragglers"][0]["rank"] == 1 and doc["stragglers"][0]["late_ns"] == 3_500
    out_file = tmp_path / "r.html"
    assert main(["analyze", str(d), "--format", "html", "--out", str(out_file), "--quiet"]) == 0
    assert out_file.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("name", "data", "needle"),
    [
        ("empty.json", b"", "empty file"),
        ("trunc.json.gz", gzip.compress(json.dumps(KINETO).encode())[:-20], "gzip"),
        (
            "types.json",
            json.dumps(
                {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 3}]}
            ).encode(),
            "event 0",
        ),
        (
            "neg.json",
            json.dumps(
                {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": -3}]}
            ).encode(),
            "event 0",
        ),
        (
            "huge.json",
            json.dumps(
                {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e300, "dur": 3}]}
            ).encode(),
            "event 0",
        ),
        ("junk.json", b'{"hello": 1}', "not a recognised"),
    ],
)
def test_malformed_input_is_one_line(tmp_path: Path, name: str, data: bytes, needle: str) -> None:
    p = tmp_path / name
    p.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "analyze", str(p), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("otel-ext analyze: error:")]
    assert len(lines) == 1, proc.stderr
    assert str(p) in lines[0] and needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_keep_going_loads_what_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _ranks(tmp_path)
    (d / "bad.json").write_text('{"traceEvents": [')
    assert main(["analyze", str(d), "--workers", "1"]) == 1
    assert "bad.json" in capsys.readouterr().err
    assert main(["analyze", str(d), "--keep-going", "--format", "json", "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert len(doc["ranks"]) == 2
    assert any("bad.json" in s["path"] for s in doc["skipped"])
    assert "skipped 1 bad" in err


def test_nothing_loadable_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "truth.json").write_text("{}")
    assert main(["analyze", str(tmp_path)]) == 1
    assert "no telemetry loaded" in capsys.readouterr().err


def test_missing_path_and_bad_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path / "nope")]) == 1
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(tmp_path), "--format", "pdf"])
    assert exc.value.code == 2
