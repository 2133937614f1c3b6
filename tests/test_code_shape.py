"""The code's shape, held where a newcomer can read it (issue 28; ``tools/code_shape.py``).

* no library function over 120 lines, at most 15 over 80 (the loaders' hot decode loops);
* at most 60 ``dict[str, Any]`` in ``otel_ext/analysis``: results between passes are typed
  (dataclasses, NamedTuples, TypedDicts for the document's sections);
* ``otel_ext/analysis`` groups its modules in sub-packages, at most 16 at its top;
* the passes open no files: reading is the loaders' (``analysis/loaders``), writing the
  reports' and the command line's (``analysis/report``, ``analysis/cli.py``); the scale-out
  back end only checks that a scheduler file exists.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANALYSIS = ROOT / "otel_ext" / "analysis"
_spec = importlib.util.spec_from_file_location("code_shape", ROOT / "tools" / "code_shape.py")
assert _spec and _spec.loader
code_shape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_shape)

#: calls and imports that read or write files
FILE_IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir"}
FILE_IO_MODULES = {"gzip", "io", "shutil", "tempfile", "glob"}
#: the parts of the analysis that may touch files
IO_ALLOWED = ("loaders", "report", "scaleout", "cli.py")


def test_no_library_function_is_long() -> None:
    long = code_shape.long_functions([ROOT / "otel_ext"])
    over_120 = [where for n, where in long if n > 120]
    assert not over_120, f"functions over 120 lines: {over_120}"
    assert len(long) <= 15, f"{len(long)} functions over 80 lines (at most 15): {long}"


def test_analysis_results_are_typed() -> None:
    count = code_shape.untyped_dicts(ANALYSIS)
    assert count <= 60, f"{count} dict[str, Any] in otel_ext/analysis (at most 60)"


def test_analysis_is_grouped_in_sub_packages() -> None:
    top = sorted(p.name for p in ANALYSIS.glob("*.py"))
    assert len(top) <= 16, top
    packages = {p.name for p in ANALYSIS.iterdir() if (p / "__init__.py").is_file()}
    assert {"loaders", "rank", "cross", "serving", "findings", "report", "scaleout"} <= packages


def _file_io(path: Path) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.split(".")[0] in FILE_IO_MODULES:
                    bad.append(f"{where}:{node.lineno}: imports {name}")
        elif isinstance(node, ast.Call):
            f = node.func
            called = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if called in FILE_IO_CALLS:
                bad.append(f"{where}:{node.lineno}: calls {called}()")
    return bad


def test_analysis_passes_open_no_files() -> None:
    bad = []
    for path in sorted(ANALYSIS.rglob("*.py")):
        if path.relative_to(ANALYSIS).parts[0] in IO_ALLOWED:
            continue
        bad += _file_io(path)
    assert not bad, "\n".join(bad)


def test_the_file_io_check_sees_a_reader(tmp_path: Path) -> None:
    """The check above can fail: a pass that opens a file is caught."""
    src = tmp_path / "x.py"
    src.write_text(
        "import gzip\n\ndef f(p):\n    with open(p) as fh:\n        return p.read_text()\n"
    )
    assert len(_file_io(src)) == 3
