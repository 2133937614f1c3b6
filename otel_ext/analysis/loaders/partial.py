"""The ``.partial`` files of a process that did not finish: loaded up to their last whole line.

The file exporters write ``traces.jsonl.<pid>.partial`` while the process runs and rename it
at shutdown (:mod:`otel_ext.exporters._files`). A job killed with SIGKILL, as operators end a
hung job, leaves the partial files as they were: whole lines (one export request each), and
perhaps a last line cut in the middle of a write. ``otel-ext analyze`` reads them as the
format their content says, without the cut line (one skipped record, named), and marks the
input as ``unfinished`` so that every report says the data came from a process that did not
finish.

>>> partial_of("run/traces.jsonl.4242.partial")
('traces.jsonl', 4242)
>>> partial_of("run/traces.jsonl") is None
True
>>> from otel_ext.analysis.loaders._common import SkippedRecord
>>> cut: list[SkippedRecord] = []
>>> b"".join(whole_lines(iter([b'{"a": 1}\\n{"b"', b': 2}\\n{"c": ']), "t.partial", cut))
b'{"a": 1}\\n{"b": 2}\\n'
>>> cut[0].record, cut[0].reason.split(":")[0]
('line 3', 'cut short')
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from otel_ext.analysis.loaders._common import SkippedRecord

__all__ = ["partial_of", "unfinished_inputs", "unfinished_lines", "unfinished_note", "whole_lines"]

_PARTIAL = re.compile(r"^(?P<base>.+)\.(?P<pid>\d+)\.partial$")
#: the name part of a partial file's note that reports and tests look for
DID_NOT_FINISH = "from a process that did not finish"


def partial_of(path: str | Path) -> tuple[str, int] | None:
    """``(final name, pid)`` of a file exporter's partial file; ``None`` for any other name."""
    m = _PARTIAL.match(Path(path).name)
    return None if m is None else (m["base"], int(m["pid"]))


def unfinished_note(path: str | Path) -> str:
    """What the report says about a partial file."""
    found = partial_of(path)
    pid = "?" if found is None else found[1]
    return (
        f"{DID_NOT_FINISH} (process {pid} was killed or crashed before its exporters shut "
        "down: read up to its last complete line)"
    )


def whole_lines(
    pieces: Iterator[bytes], path: str, skipped: list[SkippedRecord]
) -> Iterator[bytes]:
    """``pieces`` without what follows the last newline; that cut line, if any, is one
    :class:`SkippedRecord` (its line number) in ``skipped``."""
    carry = b""
    lines = 0
    for piece in pieces:
        if not piece:
            continue
        data = carry + piece if carry else piece
        cut = data.rfind(b"\n") + 1
        if cut:
            lines += data.count(b"\n", 0, cut)
            yield data[:cut]
        carry = data[cut:]
    if carry.strip():
        skipped.append(
            SkippedRecord(
                path,
                f"line {lines + 1}",
                f"cut short: the last line of a partial file ({len(carry)} bytes, no newline); "
                "the process did not finish writing it",
            )
        )


def unfinished_inputs(inputs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The loaded inputs that came from a process that did not finish."""
    return [i for i in inputs if i.get("unfinished") and i.get("status") == "loaded"]


def unfinished_lines(doc: Mapping[str, Any]) -> list[str]:
    """The report's sentences on unfinished inputs (none when every process finished)."""
    found = unfinished_inputs(doc.get("inputs") or [])
    if not found:
        return []
    return [
        f"{len(found)} file(s) {DID_NOT_FINISH} (killed or crashed before shutdown; read up to "
        "their last complete line): " + ", ".join(str(i.get("path", "")) for i in found)
    ]
