"""OTLP-JSON traces to table columns through the compiled extractor, a chunk of lines at a time.

The file's bytes are cut into chunks of whole lines (about :data:`CHUNK_BYTES` each); each
chunk is read by ``_cscan.scan_otlp_lines`` on a worker thread (the extractor releases the
GIL, so chunks of one file decode in parallel), which gives per span its ids, times, name and
one slot per attribute the table wants (type and value, the resource's filling in what the
span does not set). The columns are then built with a fixed number of numpy operations per
chunk: categories, display names and string codes are worked out once per *distinct* value,
never per span. A line the extractor is not sure to read exactly as the typed decoder does
is handed back and read by that decoder (:func:`otel_ext.analysis.loaders.spans.decode_line`),
in its place, so that the table and the records reported are those of the typed path.

The tables equal those of the typed path span for span (``tests/analysis/loaders/test_loaders_otlp.py``,
``tests/analysis/loaders/test_otlp_columns.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from otel_ext.analysis.table import Category

__all__ = [
    "CHUNK_BYTES",
    "LineTooLong",
    "ScannedChunk",
    "buffer_chunks",
    "chunks_of",
    "line_chunks",
    "line_too_long",
    "scan_chunks",
]

#: bytes of whole lines per chunk handed to a thread
CHUNK_BYTES = 2 << 20

_STR, _INT, _DBL, _BOOL, _NONE, _ABSENT = 0, 1, 2, 3, 5, 255
_LIM = 2**62
#: per set of types read in bulk: which type codes are read one by one
_ODD: dict[tuple[int, ...], np.ndarray] = {}


class LineTooLong(Exception):
    """A line longer than the limit is being read (after the chunks of the lines before it);
    its number is the one after the last line of those chunks."""


def line_chunks(
    pieces: Iterable[bytes], *, max_line: int, target: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """Runs of whole lines of about ``target`` bytes (at least) from byte pieces of any cut;
    the last may lack its newline.

    Raises:
        LineTooLong: a line longer than ``max_line`` is being read (before it is held whole).

    >>> list(line_chunks([b"a\\nb", b"c\\n\\nd"], max_line=10, target=2))
    [b'a\\n', b'bc\\n\\n', b'd']
    """
    parts: list[bytes] = []
    size = 0
    tail = 0  # bytes after the last newline
    last = -1  # index in parts of the piece holding the last newline
    nl = -1
    for piece in pieces:
        k = piece.rfind(b"\n")
        if k < 0:
            tail += len(piece)
        else:
            tail, last, nl = len(piece) - k - 1, len(parts), k
        parts.append(piece)
        size += len(piece)
        if (size >= target or tail > max_line) and last >= 0:
            head = parts[last]
            yield b"".join([*parts[:last], head[: nl + 1]])
            parts = [head[nl + 1 :], *parts[last + 1 :]] if tail else []
            size, last = tail, -1
        if tail > max_line:
            raise LineTooLong
    if size:
        yield b"".join(parts)


def buffer_chunks(data: bytes, *, target: int = CHUNK_BYTES) -> Iterator[memoryview]:
    """Runs of whole lines of about ``target`` bytes (at least) of a whole buffer, as views.

    >>> [bytes(v) for v in buffer_chunks(b"ab\\ncd\\nef", target=1)]
    [b'ab\\n', b'cd\\n', b'ef']
    """
    view = memoryview(data)
    pos, n = 0, len(data)
    while pos < n:
        nl = data.find(b"\n", pos + target - 1) if pos + target < n else -1
        stop = n if nl < 0 else nl + 1
        yield view[pos:stop]
        pos = stop


def chunks_of(
    pieces: Iterable[bytes] | bytes, *, max_line: int, chunk_bytes: int | None = None
) -> Iterable[Any]:
    """The chunks of whole lines the extractor reads: views of a whole buffer, or runs of
    byte pieces (:func:`line_chunks`, which raises :class:`LineTooLong`)."""
    target = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    if isinstance(pieces, bytes | bytearray):
        return buffer_chunks(pieces, target=target)
    return line_chunks(pieces, max_line=max_line, target=target)


def line_too_long(max_line: int, line: int) -> Exception:
    """The error for line ``line`` longer than ``max_line`` bytes (the file set by the caller)."""
    from otel_ext.errors import InputError

    return InputError(
        f"a line longer than {max_line} bytes (OTEL_EXT_MAX_RECORD_BYTES)", record=f"line {line}"
    )


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _threads() -> int:
    """Threads for the chunks of one file: the cores that are idle (this process's own
    included, from the one-minute load average), at least 1 and at most 4. On a busy
    machine a second thread only adds hand-offs (measured: ``benchmarks/
    analysis_otlp_vs_kineto.py``)."""
    cores = _cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - no load average
        load = 0.0
    return max(1, min(4, cores, int(cores - load + 1)))


def scan_chunks(
    chunks: Iterable[Any],
    scan: Callable[[Any], tuple[Any, ...]],
    *,
    threads: int | None = None,
) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """``(chunk, what scan(chunk) gave)`` in order, up to ``threads`` chunks scanned at once
    (one more read ahead: memory stays bounded). An exception of ``chunks`` comes after the
    results of the chunks before it."""
    n = _threads() if threads is None else threads
    if n <= 1:
        for chunk in chunks:
            yield chunk, scan(chunk)
        return
    with ThreadPoolExecutor(n, thread_name_prefix="otel-ext-otlp") as pool:
        pending: list[tuple[Any, Future[tuple[Any, ...]]]] = []
        error: Exception | None = None
        it = iter(chunks)
        while True:
            while error is None and len(pending) <= n:
                try:
                    chunk = next(it)
                except StopIteration:
                    break
                except Exception as e:
                    error = e
                    break
                pending.append((chunk, pool.submit(scan, chunk)))
            if not pending:
                break
            chunk, fut = pending.pop(0)
            yield chunk, fut.result()
        if error is not None:
            raise error


class ScannedChunk:
    """What the extractor read of one chunk, as numpy views (see ``scan_otlp_lines``)."""

    def __init__(self, res: tuple[Any, ...], n_keys: int, line_offset: int) -> None:
        (n, self.names, name_codes, start, end, sid, pid, self.traces, trace_codes, line_of,
         stype, sval, strs, fallback, long_line, last_line) = res  # fmt: skip
        #: the number of the line too long (0: none), of the chunk's last line
        self.long_line = long_line + line_offset if long_line else 0
        self.last_line = last_line + line_offset
        self.n = int(n)
        self.name_codes = np.frombuffer(name_codes, np.int32)
        self.start = np.frombuffer(start, np.int64)
        self.end = np.frombuffer(end, np.int64)
        self.span_id = np.frombuffer(sid, np.uint64)
        self.parent = np.frombuffer(pid, np.uint64)
        self.trace_codes = np.frombuffer(trace_codes, np.int32)
        self.line_of = np.frombuffer(line_of, np.int64) + line_offset
        self.types = np.frombuffer(stype, np.uint8).reshape(self.n, n_keys)
        self.vals = np.frombuffer(sval, np.int64).reshape(self.n, n_keys)
        self._by_key: tuple[np.ndarray, np.ndarray] | None = None
        self.fallback = np.frombuffer(fallback, np.int64).reshape(-1, 3) + np.array(
            [line_offset, 0, 0]
        )
        #: the chunk's text space: attribute strings, then names, then strings made here
        self.texts: list[str] = list(strs)
        self.n_strs = len(strs)
        self.name_off = len(self.texts)
        self.texts.extend(self.names)
        self._made: dict[str, int] = {}

    def select(self, rows: np.ndarray) -> ScannedChunk:
        """The same chunk reduced to ``rows`` (sharing its texts)."""
        out = object.__new__(ScannedChunk)
        out.__dict__.update(self.__dict__)
        for name in ("name_codes", "start", "end", "span_id", "parent", "trace_codes",
                     "line_of"):  # fmt: skip
            setattr(out, name, getattr(self, name)[rows])
        out.types = self.types[rows]
        out.vals = self.vals[rows]
        out._by_key = None
        out.n = len(rows)
        return out

    def by_key(self) -> tuple[np.ndarray, np.ndarray]:
        """The slot types and values as keys x spans (each key's column contiguous)."""
        if self._by_key is None:
            self._by_key = (self.types.T.copy(), self.vals.T.copy())
        return self._by_key

    def code_of(self, text: str) -> int:
        """The text-space code of a string made here (a number shown as text, a link name)."""
        c = self._made.get(text)
        if c is None:
            c = self._made[text] = len(self.texts)
            self.texts.append(text)
        return c


class Slots:
    """One wanted attribute over a chunk's spans: its type and value columns, read as the
    typed path reads that attribute (the same results, see ``spans._Attr``)."""

    def __init__(self, chunk: ScannedChunk, key: int) -> None:
        self.c = chunk
        self.t, self.v = (c[key] for c in chunk.by_key())

    def value(self, k: int) -> Any:
        """Row ``k``'s Python value (None where absent or without a value)."""
        t, v = int(self.t[k]), int(self.v[k])
        if t == _STR:
            return self.c.texts[v]
        if t == _INT:
            return v
        if t == _DBL:
            return float(np.int64(v).view(np.float64))
        if t == _BOOL:
            return v != 0
        return None

    def _odd(self, ok: tuple[int, ...]) -> np.ndarray:
        """Rows whose type is none of ``ok`` and that hold a value (read one by one)."""
        table = _ODD.get(ok)
        if table is None:
            table = _ODD[ok] = np.ones(256, bool)
            table[[_ABSENT, _NONE, *ok]] = False
        return np.flatnonzero(table[self.t])

    def present(self) -> np.ndarray:
        return self.t != _ABSENT  # type: ignore[no-any-return]

    def ints(self, convert: Callable[[Any], int]) -> np.ndarray:
        out = np.where(self.t == _INT, self.v, -1)
        out[(out <= -_LIM) | (out >= _LIM)] = -1
        for k in self._odd((_INT,)).tolist():
            out[k] = convert(self.value(k))
        return out

    def floats(self, convert: Callable[[Any], float]) -> np.ndarray:
        t = self.t
        out = np.full(len(t), -1.0)
        m = t == _INT
        out[m] = self.v[m]
        m = t == _DBL
        out[m] = self.v[m].view(np.float64)
        for k in self._odd((_INT, _DBL, _BOOL)).tolist():
            out[k] = convert(self.value(k))
        return out

    def str_codes(self) -> np.ndarray:
        """Text codes as ``_s`` gives them ('' where absent, numbers as their text)."""
        out = np.where(self.t == _STR, self.v, 0)
        for k in self._odd((_STR,)).tolist():
            out[k] = self.c.code_of(str(self.value(k)))
        return out

    def nonempty_str(self) -> np.ndarray:
        """Where the value is a string other than ''."""
        return (self.t == _STR) & (self.v != 0)  # type: ignore[no-any-return]

    def truthy(self) -> np.ndarray:
        """Where the value is true in Python's sense (a non-empty string, a non-zero number)."""
        t, v = self.t, self.v
        whole = ((t == _STR) | (t == _INT) | (t == _BOOL)) & (v != 0)
        return whole | ((t == _DBL) & (v.view(np.float64) != 0))  # type: ignore[no-any-return]


def categories(chunk: ScannedChunk, kind: Slots, kname: Slots, category_of: Callable[..., int],
               kernel_span: str) -> np.ndarray:  # fmt: skip
    """Each span's category, worked out once per distinct (name, kernel kind, kernel name)."""
    names = chunk.names
    by_name = np.array(
        [0 if nm == kernel_span else category_of(nm, None, None) for nm in names], np.int8
    )
    cat = by_name[chunk.name_codes]
    if kernel_span in names:
        is_kernel = chunk.name_codes == names.index(kernel_span)
        if is_kernel.any():
            s = chunk.n_strs + 1
            kd = np.where(kind.t == _STR, kind.v + 1, 0)[is_kernel]
            kn = np.where(kname.t == _STR, kname.v + 1, 0)[is_kernel]
            u, inv = np.unique(kd * s + kn, return_inverse=True)
            texts = chunk.texts
            got = [
                category_of(kernel_span, texts[d - 1] if d else None, texts[m - 1] if m else None)
                for d, m in zip((u // s).tolist(), (u % s).tolist())
            ]
            cat[is_kernel] = np.asarray(got, np.int8)[inv.reshape(-1)]
    return cat  # type: ignore[no-any-return]


def display_and_device(
    chunk: ScannedChunk, cat: np.ndarray, slot: Callable[[str], Slots], A: Any, kernel_span: str
) -> tuple[np.ndarray, np.ndarray]:
    """The rows' display names and devices as text codes (see the ``spans`` docstring)."""
    names = chunk.names
    disp = chunk.name_codes.astype(np.int64) + chunk.name_off
    if kernel_span in names:
        kn = slot(A.ACCEL_KERNEL_NAME)
        m = (chunk.name_codes == names.index(kernel_span)) & kn.nonempty_str()
        disp[m] = kn.v[m]
    for which, key in (
        (Category.LAYER, A.ACCEL_LAYER_NAME),
        (Category.PHASE, A.ACCEL_REQUEST_PHASE),
    ):
        s = slot(key)
        m = (cat == which) & s.nonempty_str()
        disp[m] = s.v[m]
    device = slot(A.ACCEL_DEVICE_ID).str_codes()
    link = cat == Category.LINK_TRANSFER
    if link.any():
        lid = slot(A.ACCEL_LINK_ID)
        m = link & lid.truthy()
        device[m] = lid.str_codes()[m]
        src, dst = slot(A.ACCEL_LINK_SRC), slot(A.ACCEL_LINK_DST)
        m = link & src.nonempty_str() & dst.nonempty_str()
        if m.any():
            width = chunk.n_strs
            u, inv = np.unique(src.v[m] * width + dst.v[m], return_inverse=True)
            texts = chunk.texts
            made = [chunk.code_of(f"{texts[a]}->{texts[b]}") for a, b in
                    zip((u // width).tolist(), (u % width).tolist())]  # fmt: skip
            disp[m] = np.asarray(made, np.int64)[inv.reshape(-1)]
    return disp, device


def encode(lookup: dict[str, int], texts: list[str], codes: np.ndarray) -> np.ndarray:
    """Text codes as codes of a column's string dictionary (``lookup``, extended in place),
    one dictionary look-up per distinct string."""
    if not len(codes):
        return np.zeros(0, np.int32)
    used = np.zeros(len(texts), bool)
    used[codes] = True
    idx = np.flatnonzero(used)
    lut = np.zeros(len(texts), np.int32)
    out = []
    for i in idx.tolist():
        s = texts[i]
        c = lookup.get(s)
        if c is None:
            c = lookup[s] = len(lookup)
        out.append(c)
    lut[idx] = out
    return lut[codes]
