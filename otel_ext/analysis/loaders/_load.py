"""Finding, recognising and loading telemetry files, in parallel across cores."""

from __future__ import annotations

import gzip
import itertools
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_ext.analysis.loaders._common import LoadContext, SkippedRecord
from otel_ext.analysis.loaders._kineto_fast import decode_stream
from otel_ext.analysis.loaders.kineto import (
    load_kineto_careful,
    looks_like_kineto,
    table_from_fast,
)
from otel_ext.analysis.loaders.metrics import MetricPoints, load_otlp_metrics_text
from otel_ext.analysis.table import EventTable
from otel_ext.errors import InputError

__all__ = [
    "DERIVED_FORMATS",
    "FileResult",
    "LoadResult",
    "ProgressCallback",
    "detect_format",
    "load_file",
    "load_paths",
]

#: formats that are recognised and deliberately not loaded
DERIVED_FORMATS = {
    "ground-truth": "ground truth of a simulated run; analysis never reads it",
    "derived-report": "an otel-ext analysis report (derived output)",
    "derived-timeline": "an otel-ext Perfetto timeline (derived from the telemetry files)",
    "otlp-logs": "OTLP logs are not analysed",
}

#: ``progress(done, total, path)`` after each file
ProgressCallback = Callable[[int, int, str], None]

_CANDIDATE_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", ".html", ".htm", ".gz")
_HEAD = 65536
_OUR_GENERATOR = re.compile(r'"generator"\s*:\s*"otel-ext"')


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(path), record="file") from e
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise InputError(
                f"truncated or corrupt gzip data ({e})", path=str(path), record="file"
            ) from e
    return data


def _iter_bytes(path: Path, size: int = 1 << 18) -> Iterator[bytes]:
    """The file's bytes a piece at a time, gunzipped on the fly (gzip members concatenated).

    Raises:
        InputError: unreadable file, truncated or corrupt gzip data.
    """
    try:
        f = path.open("rb")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(path), record="file") from e
    with f:
        first = f.read(size)
        if first[:2] != b"\x1f\x8b":
            while first:
                yield first
                first = f.read(size)
            return
        d = zlib.decompressobj(wbits=31)
        data = first
        pending = False  # the current member has begun and not ended
        try:
            while True:
                if not data:
                    data = f.read(size)
                    if not data:
                        break
                pending = True
                out = d.decompress(data)
                if out:
                    yield out
                if d.eof:  # end of a member; another may follow
                    data = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                    pending = False
                else:
                    data = b""
        except zlib.error as e:
            raise InputError(
                f"truncated or corrupt gzip data ({e})", path=str(path), record="file"
            ) from e
        if pending:
            raise InputError(
                "truncated or corrupt gzip data (the compressed stream ends early)",
                path=str(path),
                record="file",
            )


def detect_format(path: str | Path, head: str, tail: str = "") -> str:
    """The format of a file from its name and first characters (its content decides).

    ``tail`` (the last characters) lets our Perfetto exporter's timelines, whose
    ``otherData.generator`` is ``otel-ext`` at the end of the file, be told from profiler
    traces. Returns one of ``kineto``, ``otlp-traces``, ``otlp-metrics``, ``jaeger``, a key of
    :data:`DERIVED_FORMATS`, ``empty`` or ``unknown``.

    >>> detect_format("x.json", '{"resourceSpans": [')
    'otlp-traces'
    >>> detect_format("run/truth.json", '{"faults": []}')
    'ground-truth'
    >>> detect_format("a.json", '{"data": [{"traceID": "ab", "spans": []}]}')
    'jaeger'
    >>> detect_format("rank0.pt.trace.json", '{"schemaVersion": 1, "traceEvents": [')
    'kineto'
    """
    name = Path(path).name.lower()
    if name in ("truth.json", "truth.json.gz", "ground_truth.json"):
        return "ground-truth"
    if name.endswith((".html", ".htm")):
        return "derived-report"
    s = head.lstrip()
    if not s:
        return "empty"
    if '"otel-ext.analysis/' in s[:4096] or name in ("report.json",):
        return "derived-report"
    first = s[:4096]
    if first.startswith("{") and '"resourceSpans"' in first:
        return "otlp-traces"
    if first.startswith("{") and '"resourceMetrics"' in first:
        return "otlp-metrics"
    if first.startswith("{") and '"resourceLogs"' in first:
        return "otlp-logs"
    if first.startswith("{") and '"data"' in first and '"traceID"' in first:
        return "jaeger"
    if looks_like_kineto(s):
        if (
            name in ("timeline.json", "timeline.json.gz")
            or name.endswith((".perfetto.json", ".perfetto.json.gz"))
            or _OUR_GENERATOR.search(tail or first)
        ):
            return "derived-timeline"
        return "kineto"
    return "unknown"


@dataclass
class FileResult:
    """What loading one file gave."""

    path: str
    format: str
    table: EventTable | None = None
    metrics: MetricPoints | None = None
    skipped: list[SkippedRecord] = field(default_factory=list)
    note: str = ""

    def info(self) -> dict[str, Any]:
        t = self.table
        return {
            "path": self.path,
            "format": self.format,
            "status": "loaded" if (t is not None or self.metrics is not None) else "left out",
            "events": 0 if t is None else len(t),
            "metric_points": 0 if self.metrics is None else len(self.metrics),
            "rank": -1 if t is None else t.meta.get("rank", -1),
            "note": self.note,
        }


def load_file(path: str | Path, *, keep_going: bool = False) -> FileResult:
    """Load one telemetry file of any supported format.

    Args:
        path: the file (``.gz`` or plain).
        keep_going: skip bad records (listed in ``skipped``) instead of raising.

    Returns:
        A :class:`FileResult`; derived outputs and ground truth come back with no table and
        a ``note`` saying why.

    Raises:
        InputError: unreadable, truncated, empty or unrecognised file, or a bad record.
    """
    p = Path(path)
    ps = str(p)
    ctx = LoadContext(ps, keep_going=keep_going)
    fmt = detect_format(p, "")  # name-only decisions first (no read needed)
    if fmt in DERIVED_FORMATS:
        return FileResult(ps, fmt, note=DERIVED_FORMATS[fmt])
    pieces = _iter_bytes(p)
    head_parts: list[bytes] = []
    size = 0
    for piece in pieces:
        head_parts.append(piece)
        size += len(piece)
        if size >= _HEAD:
            break
    head_bytes = b"".join(head_parts)
    if head_bytes.startswith(b"\xef\xbb\xbf"):
        head_bytes = head_bytes[3:]
    head = head_bytes[:_HEAD].decode("utf-8", errors="replace")
    fmt = detect_format(p, head, "")
    if fmt == "kineto":
        # streamed: decompressed and decoded a few MB at a time, never whole
        tail = bytearray()

        first = head_bytes

        def stream() -> Iterator[bytes]:
            for piece in itertools.chain([first], pieces):
                tail.extend(piece)
                del tail[:-4096]
                yield piece

        fast = decode_stream(stream())
        if fast is not None:
            if _OUR_GENERATOR.search(tail.decode("utf-8", errors="replace")):
                return FileResult(ps, "derived-timeline", note=DERIVED_FORMATS["derived-timeline"])
            return FileResult(ps, fmt, table=table_from_fast(fast, ctx, ps), skipped=ctx.skipped)
        data = _read_bytes(p)  # irregular input: the careful path, on the whole text
    else:
        data = head_bytes + b"".join(pieces)
    del head_parts
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    fmt = detect_format(p, data[:_HEAD].decode("utf-8", errors="replace"),
                        data[-4096:].decode("utf-8", errors="replace"))  # fmt: skip
    if fmt in DERIVED_FORMATS:
        return FileResult(ps, fmt, note=DERIVED_FORMATS[fmt])
    if fmt == "empty":
        raise InputError("empty file", path=ps, record="file")
    if fmt == "unknown":
        raise InputError(
            "not a recognised telemetry format (Kineto trace, OTLP-JSON traces or metrics, "
            "Jaeger JSON)",
            path=ps,
            record="file",
        )
    if fmt == "kineto":
        return FileResult(
            ps, fmt, table=load_kineto_careful(data, path=ps, ctx=ctx), skipped=ctx.skipped
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", path=ps, record="file") from e
    del data
    if fmt == "otlp-traces":
        from otel_ext.analysis.loaders.spans import load_otlp_traces_text

        return FileResult(ps, fmt, table=load_otlp_traces_text(text, ctx=ctx), skipped=ctx.skipped)
    if fmt == "jaeger":
        from otel_ext.analysis.loaders.spans import load_jaeger_text

        return FileResult(ps, fmt, table=load_jaeger_text(text, ctx=ctx), skipped=ctx.skipped)
    # otlp-metrics
    return FileResult(ps, fmt, metrics=load_otlp_metrics_text(text, ctx=ctx), skipped=ctx.skipped)


@dataclass
class LoadResult:
    """Everything :func:`load_paths` loaded.

    Attributes:
        table: all events of all files, one table (``source`` says which file a row is from).
        inputs: one dict per file seen (path, format, status, events, rank, note).
        skipped: bad records and files left out (``keep_going``), and derived files.
        metrics: the OTLP metric points of all metrics files.
    """

    table: EventTable
    inputs: list[dict[str, Any]]
    skipped: list[SkippedRecord]
    metrics: MetricPoints


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.name.lower().endswith(_CANDIDATE_SUFFIXES):
                    out.append(f)
        else:
            out.append(p)
    return out


def _load_one(args: tuple[str, bool]) -> FileResult:
    path, keep_going = args
    return load_file(path, keep_going=keep_going)


def load_paths(
    paths: Sequence[str | Path] | str | Path,
    *,
    keep_going: bool = False,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
) -> LoadResult:
    """Load files and folders of telemetry into one event table.

    A folder contributes every recognised telemetry file under it; derived outputs (Perfetto
    ``timeline.json``, ``report.json``, ``*.html``) and ground truth (``truth.json``) are
    recognised, left out, and listed in ``inputs`` with a note. Files load in parallel, one
    process per core, each holding one file at a time, so memory grows with the largest file
    and the compact tables, not with the raw size of the set.

    Args:
        paths: files and/or folders.
        keep_going: load what is valid; bad records and bad files go to ``skipped``.
        progress: called as ``progress(done, total, path)`` after each file.
        workers: processes to use (default: the cores, at most one per file; 1 = in-process).

    Returns:
        A :class:`LoadResult`.

    Raises:
        InputError: the first bad file or record, unless ``keep_going``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "truth.json").write_text("{}")
    >>> _ = (d / "r0.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", '
    ...     '"name": "gemm", "ts": 1, "dur": 2, "args": {"stream": 7}}]}')
    >>> r = load_paths([d], workers=1)
    >>> len(r.table), [(pathlib.Path(i["path"]).name, i["status"]) for i in r.inputs]
    (1, [('r0.json', 'loaded'), ('truth.json', 'left out')])
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    for p in paths:
        if not Path(p).exists() and not keep_going:
            raise InputError("no such file or folder", path=str(p), record="file")
    files = _expand(p for p in paths if Path(p).exists())
    missing = [
        SkippedRecord(str(p), "file", "no such file or folder")
        for p in paths
        if not Path(p).exists()
    ]
    total = len(files)
    if workers is None:
        workers = min(os.cpu_count() or 1, total) or 1
    results: list[FileResult] = []
    skipped: list[SkippedRecord] = list(missing)
    jobs = [(str(f), keep_going) for f in files]

    def handle(i: int, res: FileResult | InputError) -> None:
        if isinstance(res, InputError):
            if not keep_going:
                raise res
            skipped.append(SkippedRecord(res.path or jobs[i][0], res.record or "file", res.message))
            results.append(FileResult(jobs[i][0], "error", note=res.message))
        else:
            results.append(res)
            skipped.extend(res.skipped)
        if progress is not None:
            progress(len(results), total, jobs[i][0])

    if workers <= 1 or total <= 1:
        for i, job in enumerate(jobs):
            try:
                handle(i, _load_one(job))
            except InputError as e:
                handle(i, e)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_load_one, job) for job in jobs]
            for i, fut in enumerate(futures):
                try:
                    res = fut.result()
                except InputError as e:
                    for f in futures[i + 1 :]:
                        f.cancel()
                    handle(i, e)
                    continue
                handle(i, res)
    tables = [r.table for r in results if r.table is not None]
    metrics = [r.metrics for r in results if r.metrics is not None]
    for r in results:
        if r.format in DERIVED_FORMATS:
            skipped.append(SkippedRecord(r.path, "file", f"left out: {r.note}"))
    table = EventTable.concat(tables) if tables else EventTable.empty()
    return LoadResult(
        table=table,
        inputs=[r.info() for r in results],
        skipped=skipped,
        metrics=MetricPoints.concat(metrics),
    )
