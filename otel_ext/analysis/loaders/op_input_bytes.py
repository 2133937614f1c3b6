"""PyTorch profiler traces read again for the input sizes of their host operations.

Communication kernels without size metadata (PyTorch symmetric memory's all-reduces, vLLM's
custom all-reduce) take their call's size from the launching host operation's first input
tensor (:mod:`otel_ext.analysis.rank.comm_calls`). The loaders keep no operator inputs, so
the engine's load phase (or a Dask worker, one job per file) reads them here and hands the
pass a table of sizes; the file goes through the project's bounded gzip reader
(:func:`otel_ext._gzip.iter_file_bytes`) and a bad one raises an
:class:`~otel_ext.errors.InputError` naming it.

>>> import json, tempfile, pathlib
>>> f = pathlib.Path(tempfile.mkdtemp()) / "t.json"
>>> _ = f.write_text(json.dumps({"traceEvents": [{"cat": "cpu_op", "args": {
...     "External id": 7, "Input Dims": [[4, 8]], "Input type": ["float"]}}]}))
>>> input_bytes_by_external_id(f) == {(str(f), 7): 128}
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from otel_ext._gzip import iter_file_bytes
from otel_ext.analysis.rank.comm_calls import tensor_bytes
from otel_ext.errors import InputError

__all__ = ["input_bytes_by_external_id", "input_bytes_of_events"]


def input_bytes_by_external_id(path: str | Path) -> dict[tuple[str, int], int]:
    """``{(source, external id): bytes}`` of the first sized input of each host operation in a
    PyTorch profiler trace (``source`` is the path as the loader names the file).

    Args:
        path: the trace (plain or gzip JSON).

    Returns:
        The sizes (:func:`input_bytes_of_events`).

    Raises:
        InputError: the file cannot be read or is not a JSON trace.
    """
    p = Path(path)
    raw = b"".join(iter_file_bytes(p))
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not JSON: {exc}", path=str(p)) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError("no 'traceEvents' list", path=str(p))
    return input_bytes_of_events(events, source=str(p))


def input_bytes_of_events(events: list[Any], *, source: str) -> dict[tuple[str, int], int]:
    """``{(source, external id): bytes}`` of the first sized input of each host operation
    (``cpu_op``) among a trace's ``traceEvents``.

    >>> input_bytes_of_events([{"cat": "cpu_op", "args": {"External id": 3,
    ...     "Input Dims": [[], [2]], "Input type": ["", "double"]}}], source="a")
    {('a', 3): 16}
    """
    out: dict[tuple[str, int], int] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("cat") != "cpu_op":
            continue
        args = ev.get("args")
        if not isinstance(args, dict):
            continue
        ext = args.get("External id")
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not isinstance(ext, int) or not isinstance(dims, list) or not isinstance(types, list):
            continue
        for d, ty in zip(dims, types):
            b = tensor_bytes(d, ty)
            if b >= 0:
                out[(source, ext)] = b
                break
    return out
