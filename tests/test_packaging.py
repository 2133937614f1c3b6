"""The built wheel: one top-level name (``otel_ext``), the linked subpackages inside it.

Builds the real wheel from the source tree (``pip wheel --no-build-isolation``, the venv's
setuptools), so a change to the build configuration that leaks a second top-level name, or
loses ``otel_ext.exporters``, ``otel_ext.semconv`` or the registry's YAML, fails here.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
        ],
        check=True,
        cwd=build,
        capture_output=True,
        timeout=300,
    )
    (path,) = out.glob("otel_ext-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_the_wheel_adds_one_top_level_name(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"otel_ext"}
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert wheel.read(top_level).decode().split() == ["otel_ext"]


@pytest.mark.slow
def test_the_wheel_holds_the_namespaced_packages(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for module in (
        "exporters/__init__.py",
        "exporters/_reader.py",
        "semconv/registry.py",
        "instrumentation/torch/_c10d_hook.cpp",  # compiled on the user's machine
    ):
        assert f"otel_ext/{module}" in names
    yaml = [n for n in names if n.startswith("otel_ext/semconv/model/") and n.endswith(".yaml")]
    expected = list((ROOT / "semantic_conventions" / "model").rglob("*.yaml"))
    assert len(yaml) == len(expected) > 0
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "otel_ext.exporters:AcceleratorResourceDetector" in text
    assert "= exporters" not in text and "= semantic_conventions" not in text
