"""`make test` on a fresh machine: `.ci/install-system-deps` installs what it can, or says in
one line which integration tests cannot run and why (issue 18)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / ".ci" / "install-system-deps"


def _bin_without_binaries(tmp_path: Path, *, present: tuple[str, ...] = ()) -> Path:
    """A PATH folder with the script's tools, an unprivileged ``id``, and only ``present``
    of the integration binaries."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True)
    for tool in ("grep", "dirname", *present):
        real = shutil.which(tool) or f"/nonexistent/{tool}"
        (folder / tool).symlink_to(real)
    fake_id = folder / "id"
    fake_id.write_text("#!/bin/sh\necho 1000\n")
    fake_id.chmod(0o755)
    return folder


def _run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, str(SCRIPT), *args],
        env={"PATH": str(path), "HOME": os.environ.get("HOME", "/tmp")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_unprivileged_machine_gets_one_line_naming_the_tests(tmp_path: Path) -> None:
    res = _run(_bin_without_binaries(tmp_path))
    lines = res.stdout.splitlines()
    assert res.returncode == 0 and res.stderr == "" and len(lines) == 1, res
    line = lines[0]
    assert "not root" in line and "missing prometheus promtool chromium openssl kubectl" in line
    for test_file in (
        "tests/analysis/test_analysis_report.py",  # chromium
        "tests/counters/test_counters_prometheus.py",  # prometheus
        "tests/counters/test_counters_server.py",  # openssl
        "tests/deploy/test_deploy_config.py",  # kubectl, promtool
    ):
        assert test_file in line
    strict = _run(_bin_without_binaries(tmp_path / "strict"), "--strict")
    assert strict.returncode == 1 and strict.stdout == res.stdout


def test_only_the_missing_binaries_are_named(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl on this machine to leave it present")
    res = _run(_bin_without_binaries(tmp_path, present=("openssl",)))
    assert "openssl" not in res.stdout.split("):")[0]
    assert "tests/counters/test_counters_server.py" not in res.stdout


def test_nothing_printed_when_everything_is_there(tmp_path: Path) -> None:
    present = ("prometheus", "promtool", "chromium", "openssl", "kubectl", "faketime", "ip", "tc")
    if any(shutil.which(b) is None for b in present):
        pytest.skip("this machine lacks one of the integration binaries")
    res = _run(_bin_without_binaries(tmp_path, present=present))
    assert res.returncode == 0 and res.stdout == "" and res.stderr == ""


def test_make_test_and_ci_run_share_the_script() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "test: system-deps" in makefile and ".ci/install-system-deps" in makefile
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert ".ci/install-system-deps --strict" in ci
    assert ci.index("install-system-deps") < ci.index("OTEL_EXT_REQUIRE_INTEGRATION=true")
    assert ci.rstrip().endswith("make test")
