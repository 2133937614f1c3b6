"""Reading one large JSON document a record at a time, with exact numbers.

A profiler trace is one JSON object whose ``traceEvents`` array holds every event. Parsing it
whole builds a Python dict per event (several times the file's size). Here the text is kept
as one string and the events are decoded one by one with the C scanner of :mod:`json`, then
dropped: memory stays near the size of the text. Non-integer numbers are kept as their
decimal strings (``parse_float=str``) so that time stamps lose no digits.

Bad input is named and, when asked (``on_skip``), stepped over:

* a record nested too deeply is a :class:`JsonSyntaxError` naming it (never a
  ``RecursionError``);
* with ``on_skip``, a record that is malformed, too deep or holds text that was not UTF-8
  is reported through ``on_skip(record, problem)`` and the reader *resyncs* at the next
  element that decodes and looks like one (``looks_like``), so later records are kept; the
  number of resyncs is bounded (:data:`MAX_RESYNCS`), each one a single report naming the
  byte range skipped;
* :func:`iter_object` reports where the document ends (``end``) so that text after it is an
  error, not ignored.

>>> text = '{"a": 1, "traceEvents": [{"ts": 1.5}, {"ts": 2}], "b": [3]}'
>>> [(k, v if k != "traceEvents" else list(v)) for k, v in iter_object(text, stream_key="traceEvents")]
[('a', 1), ('traceEvents', [{'ts': '1.5'}, {'ts': 2}]), ('b', [3])]
>>> bad = '[{"ph": "X"}, {"ph": oops}, {"ph": "X", "n": 3}]'
>>> skipped = []
>>> list(iter_array(bad, 0, on_skip=lambda r, p: skipped.append(r)))
[{'ph': 'X'}, {'ph': 'X', 'n': 3}]
>>> skipped
['record 1']
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "MAX_RESYNCS",
    "JsonSyntaxError",
    "decode_value",
    "iter_array",
    "iter_object",
    "read_text",
    "surrogate_positions",
]

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=str, parse_constant=str)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]
_NEXT_ELEMENT = re.compile(r",[ \t\n\r]*\{")
_SURROGATE = re.compile("[\udc80-\udcff]")
#: resyncs per array (and candidate decodes per resync) before the rest is given up
MAX_RESYNCS = 1000
_MAX_TRIES = 10000

OnSkip = Callable[[str, str], None]


class JsonSyntaxError(ValueError):
    """Malformed or truncated JSON; ``pos`` is the character offset, ``index`` the record,
    ``record`` its name (``event 12``, a header member) when known."""

    def __init__(
        self, message: str, pos: int, index: int | None = None, record: str | None = None
    ) -> None:
        super().__init__(message)
        self.pos = pos
        self.index = index
        self.record = record


def read_text(data: bytes) -> str:
    """Decode file bytes (UTF-8, optional BOM)."""
    return data.decode("utf-8-sig")


def surrogate_positions(text: str) -> list[int]:
    """Offsets of the characters that stand for bytes that were not UTF-8 (a text decoded
    with ``errors="surrogateescape"``).

    >>> surrogate_positions(b'{"a": "x\\xff"}'.decode("utf-8", "surrogateescape"))
    [8]
    """
    return [m.start() for m in _SURROGATE.finditer(text)]


def _skip(text: str, idx: int) -> int:
    m = _WS.match(text, idx)
    return m.end() if m else idx


def decode_value(text: str, idx: int) -> tuple[Any, int]:
    """Decode the JSON value starting at ``idx`` (after whitespace); returns (value, end)."""
    idx = _skip(text, idx)
    try:
        return _SCAN(text, idx)  # type: ignore[no-any-return]
    except StopIteration:
        raise JsonSyntaxError(f"expected a JSON value at offset {idx}", idx) from None
    except json.JSONDecodeError as e:
        raise JsonSyntaxError(f"{e.msg} at offset {e.pos}", e.pos) from None
    except RecursionError:
        raise JsonSyntaxError(f"JSON nested too deeply at offset {idx}", idx) from None


def _element(text: str, idx: int, n: int, label: str) -> tuple[Any, int]:
    try:
        return _SCAN(text, idx)  # type: ignore[no-any-return]
    except StopIteration:
        raise JsonSyntaxError(
            f"{label} {n}: expected a JSON value at offset {idx} (truncated file?)", idx, n
        ) from None
    except json.JSONDecodeError as e:
        raise JsonSyntaxError(f"{label} {n}: {e.msg} at offset {e.pos}", e.pos, n) from None
    except RecursionError:
        raise JsonSyntaxError(
            f"{label} {n}: nested too deeply (JSON nesting beyond the decoder's limit)", idx, n
        ) from None


def _resync(
    text: str, idx: int, looks_like: Callable[[Any], bool] | None
) -> tuple[int, Any, int] | None:
    """The next element start after ``idx`` that decodes, looks like an element and is
    followed by ``,`` or ``]``: (its start, its value, its end), or None."""
    pos = idx
    for _ in range(_MAX_TRIES):
        m = _NEXT_ELEMENT.search(text, pos)
        if m is None:
            return None
        start = m.end() - 1
        pos = start
        try:
            value, end = _SCAN(text, start)
        except (StopIteration, ValueError, RecursionError):
            continue
        after = text[_skip(text, end) : _skip(text, end) + 1]
        if after in (",", "]") and (looks_like is None or looks_like(value)):
            return start, value, end
    return None


def iter_array(
    text: str,
    idx: int,
    end: list[int] | None = None,
    *,
    on_skip: OnSkip | None = None,
    looks_like: Callable[[Any], bool] | None = None,
    label: str = "record",
    bad_positions: list[int] | None = None,
) -> Iterator[Any]:
    """Yield the elements of the JSON array whose ``[`` is at ``idx`` (after whitespace).

    When ``end`` is given, ``end[0]`` is set to the offset after the closing ``]``. With
    ``on_skip``, bad elements are reported and stepped over (see the module docstring);
    ``bad_positions`` (sorted offsets of text that was not UTF-8) makes the elements holding
    one bad records.
    """
    idx = _skip(text, idx)
    if text[idx : idx + 1] != "[":
        raise JsonSyntaxError(f"expected '[' at offset {idx}", idx)
    idx = _skip(text, idx + 1)
    if text[idx : idx + 1] == "]":
        if end is not None:
            end[0] = idx + 1
        return
    n = 0
    resyncs = 0
    while True:
        start = idx
        try:
            value, idx = _element(text, idx, n, label)
        except JsonSyntaxError as e:
            if on_skip is None:
                raise
            found = _resync(text, start, looks_like) if resyncs < MAX_RESYNCS else None
            resyncs += 1
            if found is None:
                on_skip(f"{label} {n}", f"{e} (the rest of the array, from offset {start}, is "
                                        "unreadable and was skipped)")  # fmt: skip
                if end is not None:
                    end[0] = -2  # unknown: the caller must not look after it
                return
            on_skip(f"{label} {n}", f"{e} (skipped offsets {start}-{found[0]}; reading resumed "
                                    "at the next element)")  # fmt: skip
            n += 1
            start, value, idx = found
        if bad_positions:
            k = bisect.bisect_left(bad_positions, start)
            if k < len(bad_positions) and bad_positions[k] < idx:
                problem = f"not UTF-8 text (byte at offset {bad_positions[k]})"
                if on_skip is None:
                    raise JsonSyntaxError(f"{label} {n}: {problem}", start, n)
                on_skip(f"{label} {n}", problem)
                value = _SKIPPED
        if value is not _SKIPPED:
            yield value
        n += 1
        idx = _skip(text, idx)
        c = text[idx : idx + 1]
        if c == ",":
            idx = _skip(text, idx + 1)
        elif c == "]":
            if end is not None:
                end[0] = idx + 1
            return
        else:
            what = "end of text" if not c else repr(c)
            err = JsonSyntaxError(
                f"{label} {n}: expected ',' or ']' at offset {idx}, found {what} (truncated file?)",
                idx,
                n,
            )
            if on_skip is None:
                raise err
            found = _resync(text, idx, looks_like) if resyncs < MAX_RESYNCS else None
            resyncs += 1
            if found is None:
                on_skip(f"{label} {n}", f"{err} (the rest of the array is unreadable)")
                if end is not None:
                    end[0] = -2
                return
            on_skip(f"{label} {n}", f"{err} (skipped offsets {idx}-{found[0]})")
            idx = found[0]


_SKIPPED = object()


def iter_object(
    text: str,
    *,
    stream_key: str,
    idx: int = 0,
    end: list[int] | None = None,
    keep_going: bool = False,
    on_skip: OnSkip | None = None,
    looks_like: Callable[[Any], bool] | None = None,
    label: str = "record",
    bad_positions: list[int] | None = None,
) -> Iterator[tuple[str, Any]]:
    """Yield ``(key, value)`` for each member of the top-level object.

    The value of ``stream_key`` is yielded as a lazy iterator over its array elements (it
    must be consumed before the next member is read); other values are decoded whole. With
    ``keep_going`` and ``on_skip``, a header member that cannot be read is reported and
    reading resumes at the ``stream_key`` array when it has not been read yet; the array's
    elements are read as :func:`iter_array` does with ``on_skip``. ``end[0]`` is set to the
    offset after the closing ``}`` (-2 when the end could not be found).
    """
    skip = on_skip if keep_going else None
    idx = _skip(text, idx)
    if text[idx : idx + 1] != "{":
        raise JsonSyntaxError(f"expected '{{' at offset {idx}", idx)
    idx = _skip(text, idx + 1)
    if text[idx : idx + 1] == "}":
        if end is not None:
            end[0] = idx + 1
        return
    streamed = False
    while True:
        key, idx = decode_value(text, idx)
        if not isinstance(key, str):
            raise JsonSyntaxError(f"expected a member name at offset {idx}", idx)
        idx = _skip(text, idx)
        if text[idx : idx + 1] != ":":
            raise JsonSyntaxError(f"expected ':' at offset {idx}", idx, record=key)
        idx = _skip(text, idx + 1)
        if key == stream_key and text[idx : idx + 1] == "[":
            streamed = True
            arr_end = [-1]
            elements = iter_array(
                text, idx, arr_end, on_skip=skip, looks_like=looks_like, label=label,
                bad_positions=bad_positions,
            )  # fmt: skip
            yield key, elements
            if arr_end[0] == -1:  # the caller did not read it all: skip the rest
                for _ in elements:
                    pass
            if arr_end[0] == -2:
                if end is not None:
                    end[0] = -2
                return
            idx = arr_end[0]
        else:
            try:
                value, idx = decode_value(text, idx)
            except JsonSyntaxError as e:
                e.record = key
                if skip is None:
                    raise
                m = None if streamed else re.compile(
                    r'"' + re.escape(stream_key) + r'"[ \t\n\r]*:[ \t\n\r]*\['
                ).search(text, idx)  # fmt: skip
                if m is None:
                    skip(key, f"{e} (the rest of the document is unreadable and was skipped)")
                    if end is not None:
                        end[0] = -2
                    return
                skip(key, f"{e} (skipped to the {stream_key} member at offset {m.start()})")
                idx = m.start()
                continue
            if bad_positions and _has_surrogate(value):
                if skip is None:
                    raise JsonSyntaxError(f"{key}: not UTF-8 text", idx, record=key)
                skip(key, "not UTF-8 text")
                value = None
            yield key, value
        idx = _skip(text, idx)
        c = text[idx : idx + 1]
        if c == ",":
            idx = _skip(text, idx + 1)
        elif c == "}":
            if end is not None:
                end[0] = idx + 1
            return
        else:
            what = "end of text" if not c else repr(c)
            raise JsonSyntaxError(
                f"expected ',' or '}}' at offset {idx}, found {what} (truncated file?)", idx
            )


def _has_surrogate(value: Any) -> bool:
    return _SURROGATE.search(json.dumps(value, ensure_ascii=False)) is not None
