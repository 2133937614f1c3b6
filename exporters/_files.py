"""Append-only file series with size-based rotation, optional gzip and atomic final names.

A :class:`FileSeries` named ``DIR/traces.jsonl`` writes like this:

* while the process runs, data goes to ``DIR/traces.jsonl.<pid>.partial`` (with gzip,
  ``DIR/traces.jsonl.gz.<pid>.partial``). Every :meth:`FileSeries.write` appends whole
  lines and hands them to the kernel before returning (gzip data is sync-flushed, so even
  a partial gzip file decompresses up to its last complete line);
* when the partial file reaches ``max_bytes`` it is closed and renamed to the next free
  numbered name, ``DIR/traces.1.jsonl``, ``DIR/traces.2.jsonl``, ...;
* on :meth:`FileSeries.close` the partial file is renamed to ``DIR/traces.jsonl`` or, if
  that name is already taken (an earlier run, another process), to the next free numbered
  name.

Names are claimed without ever replacing an existing file (a hard link then an unlink),
so processes sharing a folder never overwrite each other's data. A file under a final or
numbered name is complete and never changes again; only ``*.partial`` files grow. A forked
child writes its own ``<pid>.partial`` file and never touches its parent's.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> series = FileSeries(folder / "traces.jsonl", max_bytes=10)
>>> for line in (b'{"a":1}\\n', b'{"b":2}\\n', b'{"c":3}\\n'):
...     series.write(line)
>>> series.close()
>>> sorted(p.name for p in folder.iterdir())
['traces.1.jsonl', 'traces.jsonl']
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
import zlib
from pathlib import Path

__all__ = ["FileSeries", "numbered_name", "split_name"]

_log = logging.getLogger(__name__)


def split_name(name: str) -> tuple[str, str]:
    """Split a file name into its stem and all of its extensions.

    >>> split_name("traces.jsonl.gz")
    ('traces', '.jsonl.gz')
    >>> split_name("trace")
    ('trace', '')
    """
    stem, dot, ext = name.partition(".")
    return stem, dot + ext


def numbered_name(name: str, number: int) -> str:
    """The name of the ``number``-th rotated file of series ``name``.

    >>> numbered_name("traces.jsonl.gz", 3)
    'traces.3.jsonl.gz'
    """
    stem, ext = split_name(name)
    return f"{stem}.{number}{ext}"


def _claim(source: Path, target: Path) -> bool:
    """Rename ``source`` to ``target`` unless ``target`` exists; True when done."""
    try:
        os.link(source, target)
    except FileExistsError:
        return False
    except OSError:
        # No hard links on this filesystem: fall back to a checked rename.
        if target.exists():
            return False
        os.replace(source, target)
        return True
    os.unlink(source)
    return True


class FileSeries:
    """A growing series of files under one name; see the module docstring for the layout.

    Thread-safe; :meth:`write` is meant for exporter threads, never for a workload's hot
    path. Errors from the filesystem propagate to the caller (the exporter turns them
    into a failed export).

    Args:
        path: the final file name, e.g. ``DIR/traces.jsonl``; ``.gz`` is appended when
            ``gzip`` is true and the name does not already end in it.
        max_bytes: rotate once the current file holds at least this many bytes (as
            stored, i.e. compressed with gzip); ``0`` never rotates.
        gzip: compress with gzip.
        overwrite: on :meth:`close`, replace an existing file of the final name instead of
            taking the next numbered name (for one-shot outputs such as a conversion).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = 0,
        gzip: bool = False,
        overwrite: bool = False,
    ):
        final = Path(path)
        if gzip and not final.name.endswith(".gz"):
            final = final.with_name(final.name + ".gz")
        self.path = final
        self.max_bytes = max_bytes
        self.gzip = gzip
        self.overwrite = overwrite
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._partial: Path | None = None
        self._compressor: zlib._Compress | None = None
        self._size = 0
        self._closed = False
        self._pid = os.getpid()
        self.completed: list[Path] = []
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def _before() -> None:
                series = ref()
                if series is not None:
                    series._lock.acquire()

            def _parent() -> None:
                series = ref()
                if series is not None:
                    series._lock.release()

            def _child() -> None:
                series = ref()
                if series is not None:
                    series._after_fork_in_child()

            os.register_at_fork(before=_before, after_in_parent=_parent, after_in_child=_child)

    def _after_fork_in_child(self) -> None:
        # The parent's file stays the parent's: close our copy of the descriptor without
        # finishing the gzip stream, and start a file of our own on the next write.
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._partial = None
        self._compressor = None
        self._size = 0
        self._pid = os.getpid()
        self.completed = []
        self._lock = threading.Lock()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        self._fd = os.open(
            self._partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644
        )
        self._size = 0
        if self.gzip:
            self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31)

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) to the current file, rotating when it is full.

        Args:
            data: bytes to append; callers pass complete ``\\n``-terminated lines.

        Raises:
            OSError: the filesystem refused the write.
            ValueError: the series is closed.
        """
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: file series is closed")
            if self._fd is None:
                self._open()
            if self._compressor is not None:
                data = self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)
            self._write_all(data)
            if self.max_bytes and self._size >= self.max_bytes:
                self._finish(final=False)

    def _finish(self, *, final: bool) -> None:
        if self._fd is None or self._partial is None:
            return
        try:
            if self._compressor is not None:
                self._write_all(self._compressor.flush(zlib.Z_FINISH))
        finally:
            os.close(self._fd)
            self._fd = None
            self._compressor = None
        partial, self._partial = self._partial, None
        if final and self.overwrite:
            os.replace(partial, self.path)
            self.completed.append(self.path)
            return
        if final and _claim(partial, self.path):
            self.completed.append(self.path)
            return
        number = self._next_number()
        while not _claim(partial, self.path.with_name(numbered_name(self.path.name, number))):
            number += 1
        self.completed.append(self.path.with_name(numbered_name(self.path.name, number)))

    def _next_number(self) -> int:
        stem, ext = split_name(self.path.name)
        pattern = re.compile(re.escape(stem) + r"\.(\d+)" + re.escape(ext) + "$")
        numbers = [0]
        try:
            for entry in os.scandir(self.path.parent):
                match = pattern.match(entry.name)
                if match:
                    numbers.append(int(match.group(1)))
        except OSError:
            pass
        return max(numbers) + 1

    def rotate(self) -> None:
        """Close the current file now and give it the next numbered name (if it has data)."""
        with self._lock:
            self._finish(final=False)

    def close(self) -> None:
        """Finish the current file under its final name; later writes raise. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._finish(final=True)
