"""Reading a file's bytes a bounded piece at a time, gunzipped on the fly, gzip bombs refused.

The one gzip reader of the project: the analysis loaders (profiler traces, OTLP-JSON) and
:func:`otel_ext.exporters.read_spans` / :func:`~otel_ext.exporters.read_metrics` read files
through :func:`iter_file_bytes`, so that a file is never held whole for inflating, concatenated
gzip members are read one after the other, and inflation beyond the limits
(``OTEL_EXT_MAX_INFLATED_BYTES`` in all, ``OTEL_EXT_MAX_INFLATE_RATIO`` times the compressed
size once 64 MiB are out) stops at once with an :class:`~otel_ext.errors.InputError`. ISA-L
inflates where installed (about twice as fast as zlib, the same results).

>>> import gzip, tempfile, pathlib
>>> f = pathlib.Path(tempfile.mkdtemp()) / "x.json.gz"
>>> _ = f.write_bytes(gzip.compress(b"abc") + gzip.compress(b"def"))
>>> b"".join(iter_file_bytes(f))
b'abcdef'
>>> _ = f.write_bytes(gzip.compress(b"abcdef")[:-6])  # cut short (a file still being written)
>>> b"".join(iter_file_bytes(f, truncated_ok=True))
b'abcdef'
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from otel_ext.errors import InputError

__all__ = ["GZIP_MAGIC", "InflateLimits", "iter_file_bytes"]

GZIP_MAGIC = b"\x1f\x8b"

_inflate: Any
try:  # ISA-L inflates gzip about twice as fast as zlib; the same interface
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - where isal is not installed
    _inflate = zlib
_INFLATE_ERRORS: tuple[type[BaseException], ...] = (zlib.error, _inflate.error)


class InflateLimits:
    """How far a gzip file may inflate (``OTEL_EXT_MAX_INFLATED_BYTES`` in all, and
    ``OTEL_EXT_MAX_INFLATE_RATIO`` times its compressed size once 64 MiB are out)."""

    RATIO_FROM = 64 << 20

    def __init__(self) -> None:
        from otel_ext.config import MAX_INFLATE_RATIO, MAX_INFLATED_BYTES, resolve

        self.max_bytes = resolve(MAX_INFLATED_BYTES)
        self.max_ratio = resolve(MAX_INFLATE_RATIO)

    def check(self, path: Path, inflated: int, compressed: int) -> None:
        if inflated > self.max_bytes:
            raise InputError(
                f"gzip data inflates to more than {self.max_bytes} bytes "
                "(OTEL_EXT_MAX_INFLATED_BYTES); refused as a possible gzip bomb",
                path=str(path),
                record="file",
            )
        if inflated > self.RATIO_FROM and inflated > self.max_ratio * max(compressed, 1):
            raise InputError(
                f"gzip data inflates more than {self.max_ratio} times its compressed size "
                f"({inflated} bytes from {compressed}; OTEL_EXT_MAX_INFLATE_RATIO); refused as "
                "a possible gzip bomb",
                path=str(path),
                record="file",
            )


def iter_file_bytes(
    path: Path, size: int = 1 << 18, *, truncated_ok: bool = False
) -> Iterator[bytes]:
    """The file's bytes a piece (at most ``size`` bytes) at a time, gunzipped on the fly (gzip
    members concatenated): a small gzip file that inflates tenfold is never whole in memory,
    and one that inflates beyond the limits (:class:`InflateLimits`) is stopped as soon as it does.

    With ``truncated_ok`` a gzip stream that ends early (a file still being written) ends
    the bytes quietly; corrupt data is an error all the same.

    Raises:
        InputError: unreadable file, truncated or corrupt gzip data, a gzip bomb.
    """
    try:
        f = path.open("rb")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(path), record="file") from e
    with f:
        first = f.read(size)
        if first[:2] != GZIP_MAGIC:
            while first:
                yield first
                first = f.read(size)
            return
        limits = InflateLimits()
        compressed = len(first)
        inflated = 0
        d = _inflate.decompressobj(wbits=31)
        data = first
        pending = False  # the current member has begun and not ended
        full = False  # the last piece was cut at ``size``: more may come without more input
        try:
            while True:
                if not data and not full:
                    data = f.read(size)
                    compressed += len(data)
                    if not data:
                        break
                pending = True
                out = d.decompress(data, size)  # pieces of at most ``size`` bytes
                full = len(out) == size
                if out:
                    inflated += len(out)
                    limits.check(path, inflated, compressed)
                    yield out
                if d.eof:  # end of a member; another may follow
                    data = d.unused_data
                    d = _inflate.decompressobj(wbits=31)
                    pending = False
                    full = False
                else:
                    data = d.unconsumed_tail
        except _INFLATE_ERRORS as e:
            raise InputError(
                f"truncated or corrupt gzip data ({e})", path=str(path), record="file"
            ) from e
        if pending and not truncated_ok:
            raise InputError(
                "truncated or corrupt gzip data (the compressed stream ends early)",
                path=str(path),
                record="file",
            )
