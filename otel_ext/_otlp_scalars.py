"""How an OTLP/JSON scalar written as text is read: one rule for the exporters' decoder and the
analysis' fast readers, so both accept and refuse the same values."""

from __future__ import annotations

__all__ = ["is_int_text"]


def is_int_text(val: str) -> bool:
    """An OTLP/JSON ``intValue`` string: ASCII digits after at most one ``-`` (``"²"`` is a
    digit to :meth:`str.isdigit` but not to :func:`int`; ``"--5"`` is not a number).

    >>> [is_int_text(v) for v in ("42", "-7", "²", "--5", "", "-")]
    [True, True, False, False, False, False]
    """
    digits = val[1:] if val.startswith("-") else val
    return digits.isascii() and digits.isdigit()
