"""The Protocol Buffers wire format, read without generated code: fields of one message.

A message is a sequence of fields, each a key (a varint: ``field_number << 3 | wire_type``)
followed by its value: a varint (wire type 0), eight bytes (1), a length-prefixed run of
bytes (2: strings, bytes, nested messages, packed repeated numbers) or four bytes (5). Wire
types 3 and 4 (the deprecated groups) are refused. :func:`iter_fields` walks one message held
in a ``memoryview`` and yields each field with its value: an ``int`` for the fixed-size kinds,
a ``(start, end)`` pair of offsets into the buffer for length-prefixed ones, so nested
messages are walked in place, never copied.

Every read is bounded by the message's end: a varint longer than ten bytes, a length running
past the end, a key with field number 0 or an unknown wire type raises :class:`WireError`
with the offset where the problem is, never an ``IndexError``.

>>> buf = memoryview(bytes([0x08, 0x96, 0x01, 0x12, 0x02, 0x68, 0x69]))
>>> [(f, w, v) for f, w, v in iter_fields(buf)]
[(1, 0, 150), (2, 2, (5, 7))]
>>> bytes(buf[5:7]).decode()
'hi'
>>> signed64(2**64 - 1), zigzag(3)
(-1, -2)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = [
    "WireError",
    "iter_fields",
    "read_varint",
    "signed64",
    "unpack_double",
    "zigzag",
]

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

_DOUBLE = struct.Struct("<d")


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message (``offset`` says where)."""

    def __init__(self, problem: str, offset: int) -> None:
        super().__init__(f"{problem} at byte {offset}")
        self.problem = problem
        self.offset = offset


def read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the offset after it; at most ten bytes, within ``end``.

    >>> read_varint(memoryview(bytes([0xAC, 0x02])), 0, 2)
    (300, 2)
    """
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise WireError("varint cut short", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= 1 << 64:
                raise WireError("varint larger than 64 bits", start)
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than ten bytes", start)


def iter_fields(
    buf: memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int | tuple[int, int]]]:
    """The fields of the message in ``buf[start:end]``: ``(field number, wire type, value)``.

    ``value`` is an ``int`` for varints and fixed-size fields (their raw unsigned bits), and
    a ``(start, end)`` pair of offsets into ``buf`` for length-prefixed fields.

    Raises:
        WireError: a truncated or malformed field (the offset says where).
    """
    if end is None:
        end = len(buf)
    pos = start
    while pos < end:
        at = pos
        key, pos = read_varint(buf, pos, end)
        field = key >> 3
        wire = key & 7
        if field == 0:
            raise WireError("field number 0", at)
        if wire == VARINT:
            value, pos = _value_varint(buf, pos, end, at)
            yield field, wire, value
        elif wire == LENGTH:
            length, pos = _value_varint(buf, pos, end, at)
            if length > end - pos:
                raise WireError(f"length {length} runs past the end of its message", at)
            yield field, wire, (pos, pos + length)
            pos += length
        elif wire == FIXED64:
            if pos + 8 > end:
                raise WireError("fixed64 cut short", at)
            yield field, wire, int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise WireError("fixed32 cut short", at)
            yield field, wire, int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise WireError(f"wire type {wire} (groups and unknown types are not read)", at)


def _value_varint(buf: memoryview, pos: int, end: int, at: int) -> tuple[int, int]:
    """A field's varint value (or length); a problem is reported at the field's key."""
    try:
        return read_varint(buf, pos, end)
    except WireError as e:
        raise WireError(f"field value: {e.problem}", at) from None


def signed64(value: int) -> int:
    """A varint's 64 bits as a two's-complement ``int64`` (how ``int64`` fields are sent)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def zigzag(value: int) -> int:
    """A ``sint`` field's zigzag-encoded value decoded."""
    return (value >> 1) ^ -(value & 1)


def unpack_double(bits: int) -> float:
    """The ``double`` whose little-endian bits a fixed64 field carried.

    >>> unpack_double(0x3FF0000000000000)
    1.0
    """
    return float(_DOUBLE.unpack(bits.to_bytes(8, "little"))[0])
