"""The code-shape figures of issue 28: long functions, untyped result dictionaries, modules.

    python tools/code_shape.py            # every library function over 80 lines, longest first
    python tools/code_shape.py PATH...    # only functions in these files or folders

Prints the functions over 80 lines (and how many exceed 120), the ``dict[str, Any]`` count in
``otel_ext/analysis`` and the number of modules at its top. ``tests/test_code_shape.py`` holds
the limits.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "otel_ext"


def long_functions(paths: list[Path], limit: int = 80) -> list[tuple[int, str]]:
    """(lines, "file:line name") of every function longer than ``limit`` lines."""
    found = []
    for path in paths:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            tree = ast.parse(file.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        found.append(
                            (length, f"{file.relative_to(ROOT)}:{node.lineno} {node.name}")
                        )
    return sorted(found, reverse=True)


def untyped_dicts(folder: Path) -> int:
    """How many times ``dict[str, Any]`` is written in the folder's modules."""
    return sum(p.read_text(encoding="utf-8").count("dict[str, Any]") for p in folder.rglob("*.py"))


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or [PACKAGE]
    long = long_functions(paths)
    for length, where in long:
        print(f"{length:5d} {where}")
    print(f"functions over 80 lines: {len(long)}; over 120: {sum(1 for n, _ in long if n > 120)}")
    print(f"dict[str, Any] in otel_ext/analysis: {untyped_dicts(PACKAGE / 'analysis')}")
    print(
        f"modules at the top of otel_ext/analysis: {len(list((PACKAGE / 'analysis').glob('*.py')))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
