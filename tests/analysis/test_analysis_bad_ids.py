"""A pid or tid that is a list or an object is a bad record, named, never a crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ext.analysis.loaders import load_paths
from otel_ext.errors import InputError


@pytest.mark.parametrize("field", ["pid", "tid"])
@pytest.mark.parametrize("value", [[1], {"a": 1}])
def test_unhashable_ids_are_named_errors(field: str, value: object, tmp_path: Path) -> None:
    ok = {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 1.0, "dur": 2.0}
    bad = {**ok, field: value, "ts": 5.0}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [ok, bad]}))
    with pytest.raises(InputError, match=r"t\.json: event 1: 'pid' or 'tid'"):
        load_paths([path], workers=1)
    got = load_paths([path], workers=1, keep_going=True)
    assert len(got.table) == 1 and len(got.skipped) == 1
    proc = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "analyze", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
