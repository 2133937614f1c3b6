"""Reading the communication-kernel name tables (YAML) that :mod:`otel_ext.analysis.classify`
matches kernel names against.

The packaged table is ``semantic_conventions/model/kernels/communication.yaml`` (see its header
for the fields); more tables of the same shape extend it without code, named by
``OTEL_EXT_COMM_KERNELS``. Every entry is validated here (its regular expression compiles and
names no groups, its prefilter hints are casefolded) and becomes a
:class:`~otel_ext.analysis.classify.CommKernelPattern`; a bad table raises
:class:`~otel_ext.errors.InputError` naming the file, the entry and the problem.

>>> pats = load_comm_kernel_table(env={})
>>> pats[0].source == str(COMM_KERNEL_TABLE), len({p.id for p in pats}) == len(pats)
(True, True)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from otel_ext.analysis.classify import CommKernelPattern
from otel_ext.config import COMM_KERNELS, resolve
from otel_ext.errors import InputError

__all__ = ["COMM_KERNEL_TABLE", "load_comm_kernel_table", "read_comm_kernel_table"]

#: the packaged table of communication-kernel name patterns (see its header for the fields)
COMM_KERNEL_TABLE = (
    Path(__file__).resolve().parents[3]
    / "semantic_conventions"
    / "model"
    / "kernels"
    / "communication.yaml"
)


def _table_error(path: Path | str, record: str, problem: str) -> InputError:
    return InputError(problem, path=str(path), record=record)


def _strings(path: Path, rec: str, raw: dict[str, Any], key: str) -> tuple[str, ...]:
    """An entry's optional list of non-empty strings (``hints``, ``examples`` ...)."""
    v = raw.get(key) or []
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise _table_error(path, rec, f"'{key}' must be a list of non-empty strings")
    return tuple(v)


def _yaml_patterns(path: Path) -> list[Any]:
    """The ``patterns`` list of a table file, parsed but not yet validated."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except OSError as exc:
        raise _table_error(
            path, "-", f"cannot read the kernel table: {exc.strerror or exc}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "-"
        raise _table_error(path, where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("patterns"), list):
        raise _table_error(path, "-", "expected a mapping with a 'patterns' list")
    return doc["patterns"]


def _pattern(path: Path, k: int, raw: Any) -> CommKernelPattern:
    """Entry ``k`` of a table, validated."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise _table_error(path, f"patterns[{k}]", "every pattern needs an 'id' (a string)")
    rec = f"pattern {raw['id']!r}"
    regex = raw.get("regex")
    if not isinstance(regex, str) or not regex:
        raise _table_error(path, rec, "'regex' must be a non-empty string")
    if "(?P<" in regex:
        raise _table_error(path, rec, "'regex' must not name groups (use (?:...))")
    try:
        re.compile(regex, re.IGNORECASE)
    except re.error as exc:
        raise _table_error(path, rec, f"'regex' does not compile: {exc}") from None
    hints = _strings(path, rec, raw, "hints")
    for h in hints:
        if h != h.casefold() or "i" in h or "ss" in h:
            raise _table_error(path, rec, f"hint {h!r} must be casefolded, without 'i' or 'ss'")
    op = raw.get("op")
    if op is not None and not isinstance(op, str):
        raise _table_error(path, rec, "'op' must be a string")
    return CommKernelPattern(
        id=raw["id"], library=str(raw.get("library", "")), regex=regex, hints=hints,
        op=op, examples=_strings(path, rec, raw, "examples"),
        counter_examples=_strings(path, rec, raw, "counter_examples"), source=str(path),
    )  # fmt: skip


def read_comm_kernel_table(path: Path) -> list[CommKernelPattern]:
    """The patterns of one table file, in its order.

    Raises:
        InputError: the file is unreadable, not YAML, or an entry is malformed (the message
            names the file and the entry).
    """
    return [_pattern(path, k, raw) for k, raw in enumerate(_yaml_patterns(path))]


def load_comm_kernel_table(
    *, extra_tables: Sequence[str | Path] | None = None, env: Mapping[str, str] | None = None
) -> list[CommKernelPattern]:
    """The communication-kernel patterns: the packaged table, then the extra tables.

    Args:
        extra_tables: more table files of the same shape; default: the paths in
            ``OTEL_EXT_COMM_KERNELS`` (separated by ``os.pathsep``).
        env: the environment to read (default ``os.environ``).

    Raises:
        InputError: a table is unreadable, not YAML, or an entry is malformed (the message
            names the file and the entry), or two entries share an id.

    >>> ids = [p.id for p in load_comm_kernel_table(env={})]
    >>> "torch_symm_mem_multimem" in ids and "vllm_custom_all_reduce" in ids
    True
    """
    if extra_tables is None:
        raw = resolve(COMM_KERNELS, env=env)
        extra_tables = [p for p in raw.split(os.pathsep) if p.strip()] if raw else []
    out: list[CommKernelPattern] = []
    seen: dict[str, str] = {}
    for path in [COMM_KERNEL_TABLE, *(Path(p) for p in extra_tables)]:
        for pat in read_comm_kernel_table(Path(path)):
            if pat.id in seen:
                raise _table_error(
                    path, f"pattern {pat.id!r}", f"duplicate id (also in {seen[pat.id]})"
                )
            seen[pat.id] = str(path)
            out.append(pat)
    return out
