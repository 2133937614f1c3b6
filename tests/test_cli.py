"""The ``otel-ext`` dispatcher and the ``semconv`` subcommands, run in-process and as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from otel_ext.cli import SUBCOMMANDS, main
from otel_ext.semconv.registry import DEFAULT_REGISTRY, load_registry

REG = load_registry()


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's --help and errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_help_of_each_subcommand(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main([command, "--help"], capsys)
    assert code == 0
    assert out.startswith(f"usage: otel-ext {command}")


@pytest.mark.parametrize("sub", ["check", "generate", "list", "coverage"])
def test_help_of_each_semconv_subcommand(sub: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["semconv", sub, "--help"], capsys)
    assert code == 0
    assert out.startswith(f"usage: otel-ext semconv {sub}")


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["frobnicate"],
        ["semconv"],
        ["semconv", "frobnicate"],
        ["semconv", "list", "--format", "xml"],
        ["semconv", "list", "--kind", "planet"],
        ["semconv", "coverage"],
        ["semconv", "check", "--registry"],
    ],
)
def test_bad_arguments_give_one_line_and_status_2(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(args, capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "error:" in err


def test_no_command_prints_help_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main([], capsys)
    assert code == 2
    assert "usage: otel-ext" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--version"], capsys)
    assert code == 0
    assert out.startswith("otel-ext ")


def test_semconv_check_passes_on_the_real_registry(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["semconv", "check"], capsys)
    assert (code, err) == (0, "")
    assert "registry OK" in out
    assert "in sync" in out


def test_semconv_check_reports_problems_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    model = tmp_path / "model"
    shutil.copytree(DEFAULT_REGISTRY, model)
    path = model / "accel" / "metrics.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    for g in doc["groups"]:
        if g["id"] == "metric.accel.device.mbu":
            g["unit"] = "By/s"
        if g["id"] == "metric.accel.device.kernels":
            g["unit"] = "furlong"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    code, out, err = run_main(["semconv", "check", "--registry", str(model)], capsys)
    assert code == 1
    lines = out.strip().splitlines()
    assert any(
        line.startswith("accel/metrics.yaml: accel.device.mbu: formula gives unit 1")
        for line in lines
    ), out
    assert any(
        line.startswith("accel/metrics.yaml: accel.device.kernels: unknown unit") for line in lines
    )
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("otel-ext semconv: error: ") and "2 problem(s)" in err
    # generate refuses an invalid registry and writes nothing
    root = tmp_path / "out"
    code, _, err = run_main(
        ["semconv", "generate", "--registry", str(model), "--root", str(root)], capsys
    )
    assert code == 1 and not root.exists()


def test_semconv_check_detects_stale_files_under_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "project"
    reg_args = ["--registry", str(DEFAULT_REGISTRY), "--root", str(root)]
    code, out, _ = run_main(["semconv", "generate", *reg_args], capsys)
    assert code == 0 and out.count("wrote ") == 5
    code, out, _ = run_main(["semconv", "generate", *reg_args], capsys)
    assert code == 0 and "up to date" in out
    assert run_main(["semconv", "check", *reg_args], capsys)[0] == 0
    metrics_py = root / "semantic_conventions" / "metrics.py"
    metrics_py.write_text(metrics_py.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    code, out, _ = run_main(["semconv", "check", *reg_args], capsys)
    assert code == 1
    assert "semantic_conventions/metrics.py: generated file: stale" in out


def test_semconv_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["semconv", "list", "--format", "json"], capsys)
    assert code == 0
    items = json.loads(out)
    by_name = {(d["kind"], d["name"]): d for d in items}
    assert {d["kind"] for d in items} == {"attribute", "span", "metric", "analysis"}
    assert sum(d["kind"] == "metric" for d in items) == len(REG.metrics)
    assert sum(d["kind"] == "attribute" for d in items) == len(REG.attributes)
    assert sum(d["kind"] == "span" for d in items) == len(REG.spans)
    mfu = by_name[("metric", "accel.device.mfu")]
    assert {k: mfu[k] for k in ("class", "unit", "instrument", "formula", "inputs")} == {
        "class": "derived",
        "unit": "1",
        "instrument": "gauge",
        "formula": "rate(ops) / spec.peak_flops_bf16",
        "inputs": {"ops": "accel.device.operations"},
    }
    power = by_name[("metric", "hw.power")]
    assert (power["class"], power["unit"], power["instrument"]) == ("base", "W", "gauge")
    assert "formula" not in power
    for d in items:
        if d["kind"] == "metric":
            assert {"class", "unit", "instrument"} <= set(d)


def test_semconv_list_text_and_kind_filter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["semconv", "list", "--kind", "span"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == len(REG.spans)
    assert all(line.startswith("span ") for line in lines)


def test_semconv_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counters = tmp_path / "counters.json"
    counters.write_text(
        json.dumps(
            {
                "device": "sim-accel-v1",
                "counters": [
                    {"name": "accel.device.cycles.active", "interval_s": 0.5},
                    {"name": "accel.device.cycles.elapsed", "rate_hz": 2},
                    {"name": "accel.device.cycles.tensor_active", "interval_s": 0.5},
                ],
            }
        ),
        encoding="utf-8",
    )
    code, out, _ = run_main(
        ["semconv", "coverage", "--counters", str(counters), "--format", "json"], capsys
    )
    assert code == 0
    report = json.loads(out)
    supported = {d["name"] for d in report["derived_metrics"] if d["supported"]}
    assert supported == {"accel.device.utilization", "accel.device.tensor.utilization"}
    analyses = {a["name"]: a for a in report["analyses"]}
    assert analyses["utilization"]["supported"] is True
    assert analyses["throttling"]["supported"] is False
    code, out, _ = run_main(["semconv", "coverage", "--counters", str(counters)], capsys)
    assert code == 0 and "Analyses: 1 of" in out


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[accel.device.mfu]", "is a derived metric"),
        ("[accel.no.such]", "not a metric of the registry"),
        ("[{name: hw.power, interval_s: -1}]", "must be a positive number"),
        ("{device: TPU-v99, counters: [hw.power]}", "unknown device model"),
        ("[hw.power, hw.power]", "listed twice"),
        ("counters: [", "not valid YAML"),
    ],
)
def test_semconv_coverage_bad_counters_file(
    tmp_path: Path, content: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    counters = tmp_path / "c.yaml"
    counters.write_text(content, encoding="utf-8")
    code, _, err = run_main(["semconv", "coverage", "--counters", str(counters)], capsys)
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert str(counters) in err and fragment in err


def test_console_script_end_to_end() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "semconv", "list", "--kind", "analysis"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "analysis  roofline" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "semconv", "list", "--format", "yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "invalid choice" in proc.stderr


def test_an_internal_error_is_one_line_and_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug (not bad input) still reaches the user as one line, never a traceback."""
    import otel_ext.semconv.cli as semconv_cli

    def broken(args: object) -> int:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(semconv_cli, "run", broken)
    monkeypatch.delenv("OTEL_EXT_DEBUG", raising=False)
    from otel_ext.cli import main

    assert main(["semconv", "check"]) == 70
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error: ZeroDivisionError: boom" in err[0]
    monkeypatch.setenv("OTEL_EXT_DEBUG", "true")
    with pytest.raises(ZeroDivisionError):
        main(["semconv", "check"])
