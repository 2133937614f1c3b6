"""Reading one large JSON document a record at a time, with exact numbers.

A profiler trace is one JSON object whose ``traceEvents`` array holds every event. Parsing it
whole builds a Python dict per event (several times the file's size). Here the text is kept
as one string and the events are decoded one by one with the C scanner of :mod:`json`, then
dropped: memory stays near the size of the text. Non-integer numbers are kept as their
decimal strings (``parse_float=str``) so that time stamps lose no digits.

>>> text = '{"a": 1, "traceEvents": [{"ts": 1.5}, {"ts": 2}], "b": [3]}'
>>> [(k, v if k != "traceEvents" else list(v)) for k, v in iter_object(text, stream_key="traceEvents")]
[('a', 1), ('traceEvents', [{'ts': '1.5'}, {'ts': 2}]), ('b', [3])]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["JsonSyntaxError", "decode_value", "iter_array", "iter_object", "read_text"]

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=str, parse_constant=str)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


class JsonSyntaxError(ValueError):
    """Malformed or truncated JSON; ``pos`` is the character offset, ``index`` the record."""

    def __init__(self, message: str, pos: int, index: int | None = None) -> None:
        super().__init__(message)
        self.pos = pos
        self.index = index


def read_text(data: bytes) -> str:
    """Decode file bytes (UTF-8, optional BOM)."""
    return data.decode("utf-8-sig")


def _skip(text: str, idx: int) -> int:
    m = _WS.match(text, idx)
    return m.end() if m else idx


def decode_value(text: str, idx: int) -> tuple[Any, int]:
    """Decode the JSON value starting at ``idx`` (after whitespace); returns (value, end)."""
    idx = _skip(text, idx)
    try:
        return _SCAN(text, idx)
    except StopIteration:
        raise JsonSyntaxError(f"expected a JSON value at offset {idx}", idx) from None
    except json.JSONDecodeError as e:
        raise JsonSyntaxError(f"{e.msg} at offset {e.pos}", e.pos) from None
    except RecursionError:
        raise JsonSyntaxError(f"JSON nested too deeply at offset {idx}", idx) from None


def iter_array(text: str, idx: int, end: list[int] | None = None) -> Iterator[Any]:
    """Yield the elements of the JSON array whose ``[`` is at ``idx`` (after whitespace).

    When ``end`` is given, ``end[0]`` is set to the offset after the closing ``]``.
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
    while True:
        try:
            value, idx = _SCAN(text, idx)
        except StopIteration:
            raise JsonSyntaxError(
                f"record {n}: expected a JSON value at offset {idx} (truncated file?)", idx, n
            ) from None
        except json.JSONDecodeError as e:
            raise JsonSyntaxError(f"record {n}: {e.msg} at offset {e.pos}", e.pos, n) from None
        except RecursionError:
            raise JsonSyntaxError(f"record {n}: nested too deeply", idx, n) from None
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
            raise JsonSyntaxError(
                f"record {n}: expected ',' or ']' at offset {idx}, found {what} (truncated file?)",
                idx,
                n,
            )


def iter_object(text: str, *, stream_key: str, idx: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield ``(key, value)`` for each member of the top-level object.

    The value of ``stream_key`` is yielded as a lazy iterator over its array elements (it
    must be consumed before the next member is read); other values are decoded whole.
    """
    idx = _skip(text, idx)
    if text[idx : idx + 1] != "{":
        raise JsonSyntaxError(f"expected '{{' at offset {idx}", idx)
    idx = _skip(text, idx + 1)
    if text[idx : idx + 1] == "}":
        return
    while True:
        key, idx = decode_value(text, idx)
        if not isinstance(key, str):
            raise JsonSyntaxError(f"expected a member name at offset {idx}", idx)
        idx = _skip(text, idx)
        if text[idx : idx + 1] != ":":
            raise JsonSyntaxError(f"expected ':' at offset {idx}", idx)
        idx = _skip(text, idx + 1)
        if key == stream_key and text[idx : idx + 1] == "[":
            end = [-1]
            elements = iter_array(text, idx, end)
            yield key, elements
            if end[0] < 0:  # the caller did not read it all: skip the rest
                for _ in elements:
                    pass
            idx = end[0]
        else:
            value, idx = decode_value(text, idx)
            yield key, value
        idx = _skip(text, idx)
        c = text[idx : idx + 1]
        if c == ",":
            idx = _skip(text, idx + 1)
        elif c == "}":
            return
        else:
            what = "end of text" if not c else repr(c)
            raise JsonSyntaxError(
                f"expected ',' or '}}' at offset {idx}, found {what} (truncated file?)", idx
            )
