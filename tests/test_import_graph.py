"""The package's import graph: one top-level name, dependencies one way, no private reach-ins.

Read from the source (``ast``), every import counted, module level or inside a function, so a
cycle hidden behind a late import is still a cycle. The parts of ``otel_ext`` are its
subpackages (``otel_ext.analysis``, ``otel_ext.exporters``, …) and its root modules
(``otel_ext.config``, ``otel_ext.errors``, …); the rules (docs/architecture.md, "Import names"):

* nothing imports the old top-level names ``exporters`` or ``semantic_conventions``;
* no cycle between parts;
* a private module or name (``_x``) is imported only from inside the package that holds it;
* ``otel_ext.semconv`` imports only the leaf modules (errors, config);
* ``otel_ext.exporters`` never imports ``otel_ext.counters`` or ``otel_ext.analysis``;
* ``otel_ext.clocks`` imports no exporter and does no file I/O;
* the clock math (``otel_ext.clocks`` outside ``otel_ext.clocks.runtime``) starts no thread,
  logs nothing and emits no telemetry: only the runtime does.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "otel_ext"
#: Root modules anyone may import; they import nothing of otel_ext but each other.
LEAVES = {"otel_ext.errors", "otel_ext.config"}
#: Calls and imports that read or write files (the clocks must do neither).
FILE_IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir"}
FILE_IO_MODULES = {"gzip", "io", "pathlib", "shutil", "tempfile", "glob"}


def _modules() -> dict[str, Path]:
    """Module name -> source file, the links ``otel_ext/exporters`` and ``otel_ext/semconv``
    followed (that is how the wheel lays them out)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    # rglob does not descend into linked folders: walk them explicitly
    for link in ("exporters", "semconv"):
        base = PACKAGE / link
        assert base.is_dir(), f"otel_ext/{link} must link to the top-level folder"
        for path in sorted(base.resolve().rglob("*.py")):
            rel = path.relative_to(base.resolve()).with_suffix("")
            parts = ["otel_ext", link, *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, int, str | None]]:
    """(imported module, line, imported name or None) for every import in module ``name``."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"), str(MODULES[name]))
    here = name if _is_package(name) else name.rpartition(".")[0]
    out: list[tuple[str, int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                # ``from pkg import module`` imports the module; else it is a name of ``mod``
                out.append(
                    (sub, node.lineno, None) if sub in MODULES else (mod, node.lineno, a.name)
                )
    return out


def _part(module: str) -> str:
    """The part of otel_ext a module belongs to: ``otel_ext.analysis.loaders.x`` ->
    ``otel_ext.analysis``; a root module is its own part; the root package is ``otel_ext``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def _internal_edges() -> list[tuple[str, str, int]]:
    edges = []
    for name in MODULES:
        for target, line, _ in _imports(name):
            if target == "otel_ext" or target.startswith("otel_ext."):
                edges.append((name, target, line))
    return edges


EDGES = _internal_edges()


def test_the_linked_subpackages_are_found() -> None:
    assert "otel_ext.exporters._reader" in MODULES
    assert "otel_ext.semconv.registry" in MODULES
    assert "otel_ext.analysis.engine" in MODULES


@pytest.mark.parametrize(
    "folder", ["otel_ext", "tests", "benchmarks", "examples", "exporters", "semantic_conventions"]
)
def test_no_one_imports_the_old_top_level_names(folder: str) -> None:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for n in names:
                if n.split(".")[0] in {"exporters", "semantic_conventions"}:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {n}")
    assert not bad, "import otel_ext.exporters / otel_ext.semconv instead:\n" + "\n".join(bad)


def test_no_cycle_between_parts() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for src, dst, line in EDGES:
        a, b = _part(src), _part(dst)
        if a != b and a != "otel_ext":  # the root package is the facade: it may import anything
            graph[a].add(b)
            where.setdefault((a, b), f"{MODULES[src].relative_to(ROOT)}:{line} imports {dst}")
    cycles = _cycles(graph)
    assert not cycles, "\n".join(
        " -> ".join(c) + "\n  " + "\n  ".join(where[(c[i], c[i + 1])] for i in range(len(c) - 1))
        for c in cycles
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path) per strongly connected component of more than one part."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        members = set(comp)
        start = min(comp)
        path, seen = [start], {start}
        while True:  # walk inside the component until the path closes
            nxt = sorted(w for w in graph[path[-1]] if w in members)
            step = next((w for w in nxt if w == start), None) or next(
                (w for w in nxt if w not in seen), nxt[0]
            )
            path.append(step)
            if step in seen:
                break
            seen.add(step)
        out.append(path[path.index(path[-1]) :])
    return out


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _owner_of_private(target: str, name: str | None) -> str | None:
    """The package inside which ``target`` (or ``target.name``) may be imported, when private."""
    parts = target.split(".")
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__"):
            return ".".join(parts[:i])
    if name and name.startswith("_") and not name.startswith("__"):
        return target if _is_package(target) else target.rpartition(".")[0]
    return None


def test_no_private_import_across_packages() -> None:
    bad = []
    for src in MODULES:
        for target, line, name in _imports(src):
            if (
                not (target == "otel_ext" or target.startswith("otel_ext."))
                or target not in MODULES
            ):
                continue
            owner = _owner_of_private(target, name)
            if owner and not (src == owner or src.startswith(owner + ".")):
                what = f"{target}.{name}" if name else target
                bad.append(f"{MODULES[src].relative_to(ROOT)}:{line}: {what} (private to {owner})")
    assert not bad, "\n".join(bad)


def test_semconv_imports_only_the_leaf_modules() -> None:
    bad = [
        f"{MODULES[s].relative_to(ROOT)}:{line}: {d}"
        for s, d, line in EDGES
        if s.startswith("otel_ext.semconv")
        and not d.startswith("otel_ext.semconv")
        and _part(d) not in LEAVES
    ]
    assert not bad, "\n".join(bad)


def test_leaf_modules_import_only_each_other() -> None:
    bad = [
        f"{MODULES[s].relative_to(ROOT)}:{line}: {d}"
        for s, d, line in EDGES
        if _part(s) in LEAVES and _part(d) not in LEAVES
    ]
    assert not bad, "\n".join(bad)


def test_exporters_never_import_counters_or_analysis() -> None:
    bad = [
        f"{MODULES[s].relative_to(ROOT)}:{line}: {d}"
        for s, d, line in EDGES
        if s.startswith("otel_ext.exporters")
        and _part(d) in {"otel_ext.counters", "otel_ext.analysis"}
    ]
    assert not bad, "\n".join(bad)


def test_clocks_import_no_exporter_and_do_no_file_io() -> None:
    bad = []
    for name, path in MODULES.items():
        if not name.startswith("otel_ext.clocks"):
            continue
        for target, line, _ in _imports(name):
            if _part(target) == "otel_ext.exporters" or target.split(".")[0] in FILE_IO_MODULES:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                called = (
                    f.id
                    if isinstance(f, ast.Name)
                    else f.attr
                    if isinstance(f, ast.Attribute)
                    else ""
                )
                if called in FILE_IO_CALLS:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: calls {called}()")
    assert not bad, "\n".join(bad)


#: What only the clocks' runtime (``otel_ext.clocks.runtime``) may import: threads, logging,
#: the clock of the process, OpenTelemetry beyond its type aliases, the drop ledger.
CLOCK_RUNTIME_IMPORTS = {"threading", "logging", "time", "weakref", "opentelemetry"}


def test_clock_math_is_apart_from_the_clock_runtime() -> None:
    bad = []
    for name, path in MODULES.items():
        pure = name.startswith("otel_ext.clocks.") and not (
            name == "otel_ext.clocks.runtime" or name.startswith("otel_ext.clocks.runtime.")
        )
        if not pure:  # the package itself is the facade: it re-exports the runtime too
            continue
        for target, line, _ in _imports(name):
            runtime = (
                target.split(".")[0] in CLOCK_RUNTIME_IMPORTS
                and target != "opentelemetry.util.types"
            ) or target.startswith(("otel_ext.clocks.runtime", "otel_ext._drops"))
            if runtime:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
    assert not bad, (
        "the clock math must stay pure (runtime goes to otel_ext.clocks.runtime):\n"
        + "\n".join(bad)
    )
