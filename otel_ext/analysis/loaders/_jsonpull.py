"""A pull reader over a JSON document that arrives in pieces: members and array elements one
at a time, each element decoded whole by :mod:`json`'s C scanner and then dropped.

The profiler formats other than Kineto (rocprofv3's JSON, PyTorch's memory timeline) are one
JSON document whose few large arrays hold every record. Here the document is decompressed and
decoded a piece at a time: the reader holds the unread rest of the current piece and at most
one record, never the whole text, so memory stays at the size of the columns a loader keeps.
A single value larger than ``max_record`` characters is an error (the caller names it),
never a reason to read the whole file.

>>> r = JsonPull([b'{"a": 1, "xs": [{"k": 1}', b', {"k": 2}]}'])
>>> r.begin_object()
>>> out = []
>>> for key in r.members():
...     if key == "xs":
...         out.extend(r.elements())
...     else:
...         out.append(r.value())
>>> r.end_document()
>>> out
[1, {'k': 1}, {'k': 2}]
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["JsonPull", "PullError"]

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


class PullError(ValueError):
    """Malformed, truncated or oversized JSON; ``where`` names the position (the member path
    and element index the reader was in, e.g. ``buffer_records.kernel_dispatch[12]``)."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.message = message
        self.where = where


class JsonPull:
    """Members and elements of a JSON document read from ``pieces`` (bytes, UTF-8).

    Args:
        pieces: the document's bytes, in pieces (a gunzipped stream, a file's chunks).
        max_record: the largest value (in characters) decoded in one piece.
    """

    def __init__(self, pieces: Iterable[bytes], *, max_record: int = 256 << 20) -> None:
        self._pieces: Iterator[bytes] = iter(pieces)
        self._dec = codecs.getincrementaldecoder("utf-8")()
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._max = max_record
        self.path: list[str] = []  # where the reader is: member names and ``[i]``
        self._reads = 0  # values and tokens consumed (tells a member left unread)

    # -- buffer ---------------------------------------------------------------------------
    def where(self) -> str:
        """The reader's position as a record name (``a.b[3]``; ``file`` at the top)."""
        out = ""
        for p in self.path:
            out += p if p.startswith("[") else (f".{p}" if out else p)
        return out or "file"

    def _fail(self, message: str) -> PullError:
        return PullError(message, self.where())

    def _fill(self) -> bool:
        """Read the next piece into the buffer; False at the end of the document."""
        if self._eof:
            return False
        if self._pos > 65536 and self._pos * 2 > len(self._buf):
            self._buf = self._buf[self._pos :]
            self._pos = 0
        for piece in self._pieces:
            try:
                text = self._dec.decode(piece)
            except UnicodeDecodeError as e:
                raise self._fail(f"not UTF-8 text: {e.reason}") from None
            if text:
                if not self._buf and text.startswith("\ufeff"):
                    text = text[1:]
                self._buf += text
                return True
        try:
            self._buf += self._dec.decode(b"", final=True)
        except UnicodeDecodeError as e:
            raise self._fail(f"not UTF-8 text: {e.reason}") from None
        self._eof = True
        return False

    def _peek(self) -> str:
        """The next character that is not white space ('' at the end), not consumed."""
        while True:
            buf, pos, n = self._buf, self._pos, len(self._buf)
            while pos < n and buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < n:
                return buf[pos]
            if not self._fill():
                return ""

    def _expect(self, ch: str, what: str) -> None:
        got = self._peek()
        if got != ch:
            found = "the end of the file" if not got else repr(got)
            raise self._fail(f"expected {what}, found {found} (truncated or not this format)")
        self._pos += 1
        self._reads += 1

    # -- values ---------------------------------------------------------------------------
    def value(self) -> Any:
        """The next value, decoded whole (up to ``max_record`` characters)."""
        self._peek()
        want = 0
        while True:
            buf, pos = self._buf, self._pos
            try:
                val, end = _DECODER.raw_decode(buf, pos)
            except json.JSONDecodeError as e:
                at_end = e.pos >= len(buf) - 1 or e.msg.startswith("Unterminated string")
                if self._eof:
                    if at_end:
                        raise self._fail("the file ends inside this value (truncated)") from None
                    raise self._fail(f"malformed JSON: {e.msg}") from None
                # the piece may end inside the value: a string, or a token or escape
                # (``\\uXXXX`` pairs: 12 characters) near its end, is read on, not refused
                if not at_end and e.pos < len(buf) - 16:
                    raise self._fail(f"malformed JSON: {e.msg}") from None
            except RecursionError:
                raise self._fail("a value nested too deeply") from None
            else:
                # a number (or literal) that touches the buffer's end may go on in the next
                # piece: decided only once a character follows it
                if end - pos > self._max:
                    break
                if end < len(buf) or self._eof:
                    self._pos = end
                    self._reads += 1
                    return val
            if len(buf) - pos > self._max:
                break
            want = min(max(want * 2, len(buf) - pos + 65536), self._max + 1)
            while len(self._buf) - self._pos < want and self._fill():
                pass
        raise self._fail(f"a value larger than {self._max} characters (OTEL_EXT_MAX_RECORD_BYTES)")

    def skip(self) -> None:
        """Step over the next value; an array is stepped over an element at a time."""
        if self._peek() == "[":
            for _ in self.elements():
                pass
        else:
            self.value()

    # -- containers -----------------------------------------------------------------------
    def begin_object(self) -> None:
        self._expect("{", "a JSON object")

    def members(self) -> Iterator[str]:
        """The keys of the object just begun (after :meth:`begin_object`); the caller reads
        or skips each member's value before asking for the next key."""
        first = True
        while True:
            ch = self._peek()
            if ch == "}":
                self._pos += 1
                return
            if not first:
                self._expect(",", "',' or '}' in an object")
                ch = self._peek()
            if ch != '"':
                raise self._fail("expected a member name (a string)")
            key = self.value()
            self._expect(":", "':' after a member name")
            self.path.append(str(key))
            reads = self._reads
            yield str(key)
            if self._reads == reads:  # the caller left the value unread
                self.skip()
            self.path.pop()
            first = False

    def elements(self) -> Iterator[Any]:
        """The elements of the array that comes next, each decoded whole."""
        self.begin_array()
        for _ in self.array_items():
            yield self.value()

    def begin_array(self) -> None:
        self._expect("[", "a JSON array")

    def array_items(self) -> Iterator[int]:
        """After :meth:`begin_array`: yields each element's index with the reader before it,
        for the caller to read (:meth:`begin_object` and so on) before the next."""
        i = 0
        while True:
            ch = self._peek()
            if ch == "]":
                self._pos += 1
                return
            if i:
                self._expect(",", "',' or ']' in an array")
            self.path.append(f"[{i}]")
            yield i
            self.path.pop()
            i += 1

    def end_document(self) -> None:
        """Check that nothing but white space follows the document."""
        if self._peek():
            raise self._fail("text after the end of the JSON document")
