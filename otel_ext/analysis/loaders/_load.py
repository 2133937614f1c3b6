"""Finding, recognising and loading telemetry files, in parallel across cores."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from otel_ext._gzip import GZIP_MAGIC
from otel_ext._gzip import iter_file_bytes as _iter_bytes
from otel_ext.analysis import classify
from otel_ext.analysis.loaders._common import LoadContext, SkippedRecord
from otel_ext.analysis.loaders._kineto_fast import Accumulator, decode_stripe, merge
from otel_ext.analysis.loaders.execution_trace import looks_like_execution_trace
from otel_ext.analysis.loaders.flight_recorder import looks_like_flight_recorder
from otel_ext.analysis.loaders.kineto import (
    load_kineto_careful,
    looks_like_kineto,
    table_from_fast,
)
from otel_ext.analysis.loaders.memory_timeline import looks_like_memory_timeline
from otel_ext.analysis.loaders.metrics import MetricPoints, load_otlp_metrics_pieces
from otel_ext.analysis.loaders.partial import partial_of, unfinished_note, whole_lines
from otel_ext.analysis.loaders.rocprofv3 import looks_like_rocprofv3
from otel_ext.analysis.loaders.xplane import looks_like_xspace
from otel_ext.analysis.table import EventTable
from otel_ext.errors import InputError

# the communication-kernel tables are read with the loaders' imports, not in the first load
classify.read_comm_kernel_tables()

if TYPE_CHECKING:  # the pool's modules are imported only when a pool runs
    from concurrent.futures import Executor
    from contextlib import AbstractContextManager

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

_CANDIDATE_SUFFIXES = (
    ".json", ".json.gz", ".jsonl", ".jsonl.gz", ".html", ".htm", ".gz", ".pb"
)  # fmt: skip
_HEAD = 65536
_OUR_GENERATOR = re.compile(r'"generator"\s*:\s*"otel-ext"')


def _read_bytes(path: Path) -> bytes:
    """The whole (gunzipped) file, within the inflation limits."""
    return b"".join(_iter_bytes(path))


def detect_format(path: str | Path, head: str, tail: str = "") -> str:
    """The format of a file from its name and first characters (its content decides).

    ``tail`` (the last characters) lets our Perfetto exporter's timelines, whose
    ``otherData.generator`` is ``otel-ext`` at the end of the file, be told from profiler
    traces. Returns one of ``kineto``, ``otlp-traces``, ``otlp-metrics``, ``jaeger``,
    ``xplane``, ``execution-trace``, a key of :data:`DERIVED_FORMATS`, ``empty`` or
    ``unknown``.

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
    if looks_like_xspace(head):  # binary: before any whitespace is stripped
        return "xplane"
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
    if looks_like_flight_recorder(first):
        return "flight-recorder"
    if looks_like_rocprofv3(first):
        return "rocprofv3"
    if looks_like_memory_timeline(first):
        return "memory-timeline"
    if looks_like_execution_trace(s):
        return "execution-trace"
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
    #: a ``.partial`` file of a process that did not finish (see ``loaders.partial``)
    unfinished: bool = False
    #: a PyTorch Execution Trace (no times: joined to its process's Kineto table when loaded)
    execution_trace: Any = None

    def info(self) -> dict[str, Any]:
        t = self.table
        return {
            "path": self.path,
            "format": self.format,
            "status": "loaded"
            if (t is not None or self.metrics is not None or self.execution_trace is not None)
            else "left out",
            "events": 0 if t is None else len(t),
            "metric_points": 0 if self.metrics is None else len(self.metrics),
            "rank": -1 if t is None else t.meta.get("rank", -1),
            "note": self.note,
            "unfinished": self.unfinished,
            # a memory timeline's brief travels with its record (the engine moves it to the
            # report's memory section: otel_ext.analysis.rank.memory)
            **(
                {"memory": t.meta["memory"].summary()}
                if t is not None and "memory" in t.meta
                else {}
            ),
        }


def _open_stream(p: Path) -> tuple[str, bytes, Iterator[bytes]]:
    """The format the first 64 KiB suggest, those bytes (no BOM), and the rest of the pieces."""
    pieces = _iter_bytes(p, truncated_ok=partial_of(p) is not None)  # a partial gzip ends early
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
    fmt = detect_format(p, head_bytes[:_HEAD].decode("utf-8", errors="replace"), "")
    return fmt, head_bytes, pieces


def _tracking_tail(first: bytes, pieces: Iterator[bytes], tail: bytearray) -> Iterator[bytes]:
    """The pieces, keeping the last 4 KiB in ``tail`` (our timelines say so at the end)."""
    for piece in itertools.chain([first], pieces):
        tail.extend(piece[-4096:])
        del tail[:-4096]
        yield piece


def _is_ours(tail: bytearray) -> bool:
    return _OUR_GENERATOR.search(tail.decode("utf-8", errors="replace")) is not None


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
    head_fmt, head_bytes, pieces = _open_stream(p)
    if partial_of(p) is not None:  # a process that did not finish: its whole lines only
        lines = whole_lines(itertools.chain([head_bytes], pieces), ps, ctx.skipped)
        result = load_file_parts(p, head_fmt, lines, ctx)
        result.unfinished, result.note = True, unfinished_note(p)
        return result
    return load_file_parts(p, head_fmt, itertools.chain([head_bytes], pieces), ctx)


def load_file_parts(
    p: Path, head_fmt: str, source: Iterator[bytes], ctx: LoadContext
) -> FileResult:
    """:func:`load_file` once the format is known: ``source`` is the file's bytes in pieces."""
    ps = str(p)
    head_bytes, pieces = next(source, b""), source
    if head_fmt == "unknown":  # decided by the first characters: the rest need not be read
        raise InputError(NOT_TELEMETRY, path=ps, record="file")
    if head_fmt == "xplane":
        return _load_xplane(p, head_bytes, pieces, ctx)
    if head_fmt == "execution-trace":
        return _load_execution_trace(p, head_bytes, pieces)
    if head_fmt in ("rocprofv3", "memory-timeline"):  # streamed, a record at a time
        return _load_pulled(p, head_fmt, head_bytes, pieces, ctx)
    if head_fmt == "kineto":
        # streamed: decompressed and decoded a few MB at a time, never whole
        tail = bytearray()
        try:
            acc = decode_stripe(_tracking_tail(head_bytes, pieces, tail), 0, 1)
        except InputError as e:
            if e.path is None:
                raise InputError(e.message, path=ps, record=e.record) from None
            raise
        if acc is not None:
            if _is_ours(tail):
                return FileResult(ps, "derived-timeline", note=DERIVED_FORMATS["derived-timeline"])
            return FileResult(ps, "kineto", table=table_from_fast(merge([acc]), ctx, ps),
                              skipped=ctx.skipped)  # fmt: skip
        data = _read_bytes(p)  # irregular input: the careful path, on the whole text
        return _load_whole(p, data, ctx)
    if head_fmt in ("otlp-traces", "otlp-metrics"):
        return _load_otlp(p, head_fmt, head_bytes, pieces, ctx)
    if head_fmt in ("jaeger", "flight-recorder"):  # one document: read whole, within the limit
        from otel_ext.config import MAX_RECORD_BYTES, resolve

        limit = resolve(MAX_RECORD_BYTES)
        parts, size = [head_bytes], len(head_bytes)
        for piece in pieces:
            size += len(piece)
            if size > limit:
                raise InputError(
                    f"{'a Jaeger export' if head_fmt == 'jaeger' else 'a Flight Recorder dump'} "
                    f"larger than {limit} bytes (OTEL_EXT_MAX_RECORD_BYTES: "
                    "the export is one JSON document, read whole)",
                    path=ps,
                    record="file",
                )
            parts.append(piece)
        return _load_whole(p, b"".join(parts), ctx)
    data = head_bytes + b"".join(pieces)
    del head_bytes
    return _load_whole(p, data, ctx)


def _load_otlp(
    p: Path, fmt: str, head: bytes, pieces: Iterator[bytes], ctx: LoadContext
) -> FileResult:
    """An OTLP-JSON file: read whole when plain (up to :data:`_OTLP_WHOLE_MAX`), else streamed,
    and decoded in chunks of whole lines (one export request each)."""
    from otel_ext.analysis.loaders.spans import load_otlp_traces_pieces
    from otel_ext.config import MAX_RECORD_BYTES, resolve

    ps = str(p)
    max_line = resolve(MAX_RECORD_BYTES)
    source: Iterable[bytes] | bytes = itertools.chain([head], pieces)
    try:
        if not _is_gzip(p) and p.stat().st_size <= _OTLP_WHOLE_MAX and not partial_of(p):
            # a plain file is read whole (its lines cut as views), a larger one streamed
            pieces_close = getattr(pieces, "close", None)
            if pieces_close is not None:
                pieces_close()
            source = _plain_bytes(p)
        if fmt == "otlp-traces":
            table = load_otlp_traces_pieces(source, ctx=ctx, max_line=max_line)
            return FileResult(ps, fmt, table=table, skipped=ctx.skipped)
        points = load_otlp_metrics_pieces(source, ctx=ctx, max_line=max_line)
        return FileResult(ps, fmt, metrics=points, skipped=ctx.skipped)
    except InputError as e:
        if e.path is None:  # a line over the size limit
            raise InputError(e.message, path=ps, record=e.record) from None
        raise


#: plain OTLP-JSON traces files up to this size are read whole rather than streamed
_OTLP_WHOLE_MAX = 512 << 20


def _is_gzip(p: Path) -> bool:
    try:
        with p.open("rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(p), record="file") from e


def _plain_bytes(p: Path) -> bytes:
    """A plain file's bytes (without a UTF-8 BOM)."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(p), record="file") from e
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data


def _load_whole(p: Path, data: bytes, ctx: LoadContext) -> FileResult:
    """A file read whole (Jaeger, irregular Kineto; formats decided on the whole text)."""
    ps = str(p)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    fmt = detect_format(p, data[:_HEAD].decode("utf-8", errors="replace"),
                        data[-4096:].decode("utf-8", errors="replace"))  # fmt: skip
    if fmt in DERIVED_FORMATS:
        return FileResult(ps, fmt, note=DERIVED_FORMATS[fmt])
    if fmt == "empty":
        raise InputError("empty file", path=ps, record="file")
    if fmt == "unknown":
        raise InputError(NOT_TELEMETRY, path=ps, record="file")
    if fmt == "kineto":
        return FileResult(
            ps, fmt, table=load_kineto_careful(data, path=ps, ctx=ctx), skipped=ctx.skipped
        )
    if fmt in ("otlp-traces", "otlp-metrics"):  # recognised only once read whole
        return _load_otlp(p, fmt, data, iter(()), ctx)
    if fmt == "flight-recorder":  # JSON dumps only: a pickled dump is never unpickled
        from otel_ext.analysis.loaders.flight_recorder import load_flight_recorder_text

        text = data.decode("utf-8", errors="replace")
        return FileResult(ps, fmt, table=load_flight_recorder_text(text, path=ps))
    from otel_ext.analysis.loaders._jsonstream import surrogate_positions
    from otel_ext.analysis.loaders.jaeger import load_jaeger_text

    try:
        text = data.decode("utf-8")
        bad = None
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="surrogateescape")
        bad = surrogate_positions(text)
    del data
    return FileResult(ps, fmt, table=load_jaeger_text(text, ctx=ctx, bad_positions=bad),
                      skipped=ctx.skipped)  # fmt: skip


def _read_whole(p: Path, head: bytes, pieces: Iterator[bytes], what: str) -> bytearray:
    """A file that is one message or document, read whole up to the record limit
    (``OTEL_EXT_MAX_RECORD_BYTES``); past it, an error naming the file."""
    from otel_ext.config import MAX_RECORD_BYTES, resolve

    limit = resolve(MAX_RECORD_BYTES)
    data = bytearray(head)
    for piece in pieces:
        if len(data) + len(piece) > limit:
            raise InputError(
                f"{what} larger than {limit} bytes (OTEL_EXT_MAX_RECORD_BYTES: it is read whole)",
                path=str(p),
                record="file",
            )
        data += piece
    return data


def _load_xplane(p: Path, head: bytes, pieces: Iterator[bytes], ctx: LoadContext) -> FileResult:
    """An XPlane protobuf (one ``XSpace`` message): read whole, up to the record limit."""
    from otel_ext.analysis.loaders.xplane import load_xplane_bytes

    data = _read_whole(p, head, pieces, "an XPlane file (one XSpace protobuf message)")
    table = load_xplane_bytes(data, ctx=ctx)
    return FileResult(str(p), "xplane", table=table, skipped=ctx.skipped)


def _load_execution_trace(p: Path, head: bytes, pieces: Iterator[bytes]) -> FileResult:
    """A PyTorch Execution Trace (one JSON document): read whole, up to the record limit."""
    from otel_ext.analysis.loaders.execution_trace import parse_execution_trace

    data = _read_whole(p, head, pieces, "an Execution Trace (one JSON document)")
    et = parse_execution_trace(bytes(data), path=str(p))
    s = et.summary()
    note = (f"Execution Trace: {s['operators']} operators, {s['collectives']} collectives, "
            f"{s['data_dependencies']} data dependencies; no times (joined to the Kineto "
            "trace of the same process when one is loaded)")  # fmt: skip
    return FileResult(str(p), "execution-trace", execution_trace=et, note=note)


def _load_pulled(
    p: Path, fmt: str, head: bytes, pieces: Iterator[bytes], ctx: LoadContext
) -> FileResult:
    """rocprofv3 JSON or a PyTorch memory timeline: read in pieces, one record at a time."""
    from otel_ext.analysis.loaders.memory_timeline import load_memory_timeline_pieces
    from otel_ext.analysis.loaders.rocprofv3 import load_rocprofv3_pieces

    load = load_rocprofv3_pieces if fmt == "rocprofv3" else load_memory_timeline_pieces
    table = load(itertools.chain([head], pieces), ctx=ctx)
    return FileResult(str(p), fmt, table=table, skipped=ctx.skipped)


#: the message of a file that is no telemetry format we read
NOT_TELEMETRY = (
    "not a recognised telemetry format (Kineto trace, OTLP-JSON traces or metrics, Jaeger JSON)"
)


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
                elif (
                    f.is_file()
                    and (part := partial_of(f))
                    and part[0].endswith(_CANDIDATE_SUFFIXES)
                ):
                    out.append(f)  # a file exporter's, left by a process that did not finish
        else:
            out.append(p)
    return out


#: a gzipped (plain) file at least this large is split into stripes when cores are idle
_STRIPE_MIN_GZ = 16 << 20  # with the compiled extractor a 5 MB gzip decodes in ~0.15 s
_STRIPE_MIN_PLAIN = 128 << 20
#: below this much input (on disk) a process pool costs more than it saves
_POOL_MIN_BYTES = 2 << 20


def _load_one(args: tuple[str, bool, int, int]) -> FileResult | Accumulator | bool | None:
    """One job: a whole file, or stripe ``index`` of ``count`` of a Kineto file.

    A stripe job answers with its :class:`Accumulator`, ``True`` as well as its accumulator
    when the file is one of our timelines (see the tail), or None when the file must be loaded
    whole (not a Kineto trace, or irregular); stripe 0 then loads it whole itself.
    """
    path, keep_going, index, count = args
    if count == 1:
        return load_file(path, keep_going=keep_going)
    p = Path(path)
    if detect_format(p, "") not in DERIVED_FORMATS:
        head_fmt, head_bytes, pieces = _open_stream(p)
        if head_fmt == "kineto":
            tail = bytearray()
            try:
                acc = decode_stripe(_tracking_tail(head_bytes, pieces, tail), index, count)
            except InputError as e:
                if e.path is None:
                    raise InputError(e.message, path=path, record=e.record) from None
                raise
            if acc is not None:
                acc.header["_ours"] = _is_ours(tail)
                return acc
    return load_file(path, keep_going=keep_going) if index == 0 else None


def _join_stripes(
    path: str, keep_going: bool, parts: list[FileResult | Accumulator | bool | None]
) -> FileResult:
    """One file's result from its stripes' answers (loading it whole when they could not)."""
    if all(isinstance(x, Accumulator) for x in parts):
        accs = [x for x in parts if isinstance(x, Accumulator)]
        if accs[0].header.pop("_ours", False):
            return FileResult(path, "derived-timeline", note=DERIVED_FORMATS["derived-timeline"])
        for acc in accs[1:]:
            acc.header.pop("_ours", None)
        ctx = LoadContext(path, keep_going=keep_going)
        table = table_from_fast(merge(accs), ctx, path)
        return FileResult(path, "kineto", table=table, skipped=ctx.skipped)
    if isinstance(parts[0], FileResult):
        return parts[0]
    return load_file(path, keep_going=keep_going)


def _stripes_for(files: list[Path], workers: int) -> list[int]:
    """How many stripes each file is cut into: idle cores go to the large files."""
    counts = [1] * len(files)
    if workers <= len(files):
        return counts
    per = workers // len(files)
    for i, f in enumerate(files):
        try:
            size = f.stat().st_size
        except OSError:
            continue
        gz = f.name.lower().endswith(".gz")
        if size >= (_STRIPE_MIN_GZ if gz else _STRIPE_MIN_PLAIN):
            counts[i] = per
    return counts


def load_paths(
    paths: Sequence[str | Path] | str | Path,
    *,
    keep_going: bool = False,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
    executor: Executor | None = None,
) -> LoadResult:
    """Load files and folders of telemetry into one event table.

    A folder contributes every recognised telemetry file under it; derived outputs (Perfetto
    ``timeline.json``, ``report.json``, ``*.html``) and ground truth (``truth.json``) are
    recognised, left out, and listed in ``inputs`` with a note. Files load in parallel, one
    process per core, each streaming one file at a time (decompressed and decoded a few MB at
    a time), so memory grows with the compact tables, not with the raw size of the set.

    Args:
        paths: files and/or folders.
        keep_going: load what is valid; bad records and bad files go to ``skipped``.
        progress: called as ``progress(done, total, path)`` after each file.
        workers: processes to use (default: the cores, when the set is at least 2 MiB on
            disk; 1 = in-process). With fewer files than workers, each large Kineto file is
            decoded in stripes by several processes and put back together in order.
        executor: run the file and stripe jobs on this executor (a Dask cluster's, see
            :mod:`otel_ext.analysis.scaleout.dask_cluster`) instead of a local process pool, even for
            one file; ``workers`` is then its number of job slots. The caller owns it.

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
    files, missing = _existing_files(paths, keep_going=keep_going)
    if workers is None:
        workers = _default_workers(files)
    paths_s = [str(f) for f in files]
    explicit = {str(Path(p)) for p in paths if not Path(p).is_dir()}
    found = _Results(paths_s, explicit, keep_going, progress, missing)
    stripes = _stripes_for(files, workers) if workers > 1 else [1] * len(files)
    if executor is None and (workers <= 1 or sum(stripes) <= 1):
        for i, f in enumerate(paths_s):
            try:
                found.add(i, load_file(f, keep_going=keep_going))
            except InputError as e:
                found.add(i, e)
    else:
        _load_in_pool(found, stripes, workers=workers, executor=executor)
    return found.load_result()


def _existing_files(
    paths: Sequence[str | Path], *, keep_going: bool
) -> tuple[list[Path], list[SkippedRecord]]:
    """The files under ``paths`` (folders expanded), and a record for each missing path.

    Raises:
        InputError: a path does not exist, unless ``keep_going``.
    """
    for p in paths:
        if not Path(p).exists() and not keep_going:
            raise InputError("no such file or folder", path=str(p), record="file")
    files = _expand(p for p in paths if Path(p).exists())
    missing = [
        SkippedRecord(str(p), "file", "no such file or folder")
        for p in paths
        if not Path(p).exists()
    ]
    return files, missing


def _default_workers(files: list[Path]) -> int:
    """The cores when the set is at least :data:`_POOL_MIN_BYTES` on disk (at most one per
    file when there are several), else 1."""
    size = sum(f.stat().st_size for f in files if f.exists())
    workers = (os.cpu_count() or 1) if size >= _POOL_MIN_BYTES else 1
    if len(files) > 1:
        workers = min(workers, len(files))
    return workers


class _Results:
    """The files' results in order as they come in, their skipped records, and progress."""

    def __init__(
        self,
        paths: list[str],
        explicit: set[str],
        keep_going: bool,
        progress: ProgressCallback | None,
        missing: list[SkippedRecord],
    ) -> None:
        self.paths = paths
        self.explicit = explicit
        self.keep_going = keep_going
        self.progress = progress
        self.results: list[FileResult] = []
        self.skipped: list[SkippedRecord] = list(missing)

    def stray(self, i: int, e: InputError) -> bool:
        """``e`` says file ``i`` is not telemetry, and a folder (not the user) named it."""
        return e.message == NOT_TELEMETRY and self.paths[i] not in self.explicit

    def add(self, i: int, res: FileResult | InputError) -> None:
        """File ``i``'s result, or its error (raised unless ``keep_going``).

        Raises:
            InputError: ``res``, unless ``keep_going`` or a stray non-telemetry file.
        """
        if isinstance(res, InputError) and self.stray(i, res):
            # a stray non-telemetry file found in a folder: left out and listed, not fatal
            res = FileResult(self.paths[i], "not-telemetry", note=NOT_TELEMETRY)
        if isinstance(res, InputError):
            if not self.keep_going:
                raise res
            self.skipped.append(
                SkippedRecord(res.path or self.paths[i], res.record or "file", res.message)
            )
            self.results.append(FileResult(self.paths[i], "error", note=res.message))
        else:
            self.results.append(res)
            self.skipped.extend(res.skipped)
        if self.progress is not None:
            self.progress(len(self.results), len(self.paths), self.paths[i])

    def load_result(self) -> LoadResult:
        """Every file's results as one: Execution Traces joined, tables and metric points
        concatenated, derived and non-telemetry files listed as left out."""
        results, skipped = self.results, self.skipped
        if any(r.execution_trace is not None for r in results):
            from otel_ext.analysis.loaders.execution_trace import join_into_results

            join_into_results(results)
        tables = [r.table for r in results if r.table is not None]
        metrics = [r.metrics for r in results if r.metrics is not None]
        for r in results:
            if r.format in DERIVED_FORMATS or r.format == "not-telemetry":
                skipped.append(SkippedRecord(r.path, "file", f"left out: {r.note}"))
        table = EventTable.concat(tables) if tables else EventTable.empty()
        return LoadResult(
            table=table,
            inputs=[r.info() for r in results],
            skipped=skipped,
            metrics=MetricPoints.concat(metrics),
        )


def _load_in_pool(
    found: _Results, stripes: list[int], *, workers: int, executor: Executor | None
) -> None:
    """The file and stripe jobs on a local process pool (or on ``executor``), each file's
    answers taken in order; after a fatal error the later files' jobs are cancelled."""
    # imported here: the pool's modules cost 3 MB and a few ms, spent only when it runs
    from concurrent.futures import ProcessPoolExecutor
    from contextlib import nullcontext

    keep_going = found.keep_going
    pool_cm: AbstractContextManager[Executor]  # the caller's executor stays open
    if executor is None:
        pool_cm = ProcessPoolExecutor(max_workers=workers)
    else:
        pool_cm = nullcontext(executor)
    with pool_cm as pool:
        futures = [
            [pool.submit(_load_one, (f, keep_going, k, n)) for k in range(n)]
            for f, n in zip(found.paths, stripes)
        ]
        for i, futs in enumerate(futures):
            try:
                answers = [fut.result() for fut in futs]
                one = answers[0]
                if len(answers) == 1 and isinstance(one, FileResult):
                    res = one
                else:
                    res = _join_stripes(found.paths[i], keep_going, answers)
            except InputError as e:
                # in keep-going mode the later files are still wanted: cancelling them
                # here made their ``result()`` raise CancelledError
                if not keep_going and not found.stray(i, e):
                    for later in futures[i + 1 :]:
                        for pending in later:
                            pending.cancel()
                found.add(i, e)
                continue
            found.add(i, res)
