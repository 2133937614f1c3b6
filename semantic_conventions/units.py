"""A UCUM subset: parse unit strings and do dimension arithmetic on them.

The registry's units are UCUM case-sensitive codes, as OpenTelemetry uses them. This module
understands the subset the registry needs and checks that derived-metric formulas combine
their inputs' units into the declared unit.

What is understood:

* base units ``s``, ``By``, ``J``, ``K``; units defined from them: ``bit`` (1/8 ``By``),
  ``Hz`` (1/``s``), ``W`` (``J/s``), ``Cel`` (same dimension and scale as ``K``; the offset
  is not tracked), ``min``, ``h``, ``d``;
* dimensionless ``1``, ``%`` (1/100), ``[ppm]`` (10^-6), ``[ppb]`` (10^-9);
* decimal prefixes ``k M G T P`` and ``m u n p`` on ``s By bit Hz W J``, binary prefixes
  ``Ki Mi Gi Ti`` on ``By`` and ``bit``;
* annotations ``{cycle}``, ``{flop}``, ``{token}``...: dimensionless in UCUM, but here each
  is its own named count dimension, so ``{flop}/s`` does not match ``{token}/s`` while
  ``{cycle}/{cycle}`` is ``1``. An annotation after a unit (``By{compressed}``) multiplies it;
  an annotation may carry an exponent (``{cycle}2``), an extension of UCUM;
* integer factors (``1000``, ``10*3``, ``10^3``), exponents (``s2``, ``s-1``), products
  ``.``, quotients ``/`` (left to right, as in UCUM: ``a/b.c`` is ``(a/b).c``), a leading
  ``/`` (``/s``) and parentheses.

>>> parse_unit("J/s") == parse_unit("W")
True
>>> parse_unit("Hz") == parse_unit("/s")
True
>>> parse_unit("{cycle}/{cycle}") == DIMENSIONLESS
True
>>> str(parse_unit("{flop}/By"))
'{flop}/By'
>>> conversion_factor("ms", "s")
0.001
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from otel_ext.errors import RegistryError

__all__ = [
    "DIMENSIONLESS",
    "SECOND",
    "Unit",
    "UnitError",
    "conversion_factor",
    "parse_unit",
]


class UnitError(RegistryError):
    """A unit string is not in the understood UCUM subset, or units do not combine."""


@dataclass(frozen=True)
class Unit:
    """A unit as an exact scale times a product of named dimensions with integer exponents.

    Attributes:
        scale: the factor relative to the base units (``ms`` has ``Fraction(1, 1000)``).
        dims: sorted ``(dimension, exponent)`` pairs with non-zero exponents; dimensions are
            ``s``, ``By``, ``J``, ``K`` and annotations such as ``{flop}``.
    """

    scale: Fraction
    dims: tuple[tuple[str, int], ...]

    @staticmethod
    def of(scale: Fraction | int, dims: dict[str, int]) -> Unit:
        """Build a unit from a scale and a dimension -> exponent mapping (zeros dropped).

        >>> str(Unit.of(1, {"By": 1, "s": -1}))
        'By/s'
        """
        return Unit(Fraction(scale), tuple(sorted((d, e) for d, e in dims.items() if e != 0)))

    def _dim_map(self) -> dict[str, int]:
        return dict(self.dims)

    def __mul__(self, other: Unit) -> Unit:
        dims = self._dim_map()
        for d, e in other.dims:
            dims[d] = dims.get(d, 0) + e
        return Unit.of(self.scale * other.scale, dims)

    def __truediv__(self, other: Unit) -> Unit:
        return self * other**-1

    def __pow__(self, exponent: int) -> Unit:
        return Unit.of(self.scale**exponent, {d: e * exponent for d, e in self.dims})

    @property
    def is_dimensionless(self) -> bool:
        """True when the unit has no dimension (its scale may still differ from 1)."""
        return not self.dims

    def same_dimension(self, other: Unit) -> bool:
        """True when both units measure the same kind of quantity (scales may differ)."""
        return self.dims == other.dims

    def __str__(self) -> str:
        num: list[str] = []
        den: list[str] = []
        if self.scale.numerator != 1:
            num.append(_factor_text(self.scale.numerator))
        if self.scale.denominator != 1:
            den.append(_factor_text(self.scale.denominator))
        for d, e in self.dims:
            (num if e > 0 else den).append(d if abs(e) == 1 else f"{d}{abs(e)}")
        top = ".".join(num) or "1"
        if not den:
            return top
        bottom = den[0] if len(den) == 1 else "(" + ".".join(den) + ")"
        return f"{top}/{bottom}"


def _factor_text(n: int) -> str:
    k = len(str(n)) - 1
    if n >= 10 and n == 10**k:
        return f"10*{k}"
    return str(n)


DIMENSIONLESS = Unit.of(1, {})
SECOND = Unit.of(1, {"s": 1})

_ATOMS: dict[str, Unit] = {
    "s": SECOND,
    "min": Unit.of(60, {"s": 1}),
    "h": Unit.of(3600, {"s": 1}),
    "d": Unit.of(86400, {"s": 1}),
    "By": Unit.of(1, {"By": 1}),
    "bit": Unit.of(Fraction(1, 8), {"By": 1}),
    "Hz": Unit.of(1, {"s": -1}),
    "J": Unit.of(1, {"J": 1}),
    "W": Unit.of(1, {"J": 1, "s": -1}),
    "K": Unit.of(1, {"K": 1}),
    "Cel": Unit.of(1, {"K": 1}),
    "%": Unit.of(Fraction(1, 100), {}),
    "[ppm]": Unit.of(Fraction(1, 10**6), {}),
    "[ppb]": Unit.of(Fraction(1, 10**9), {}),
}
_DECIMAL_PREFIXES: dict[str, Fraction] = {
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "m": Fraction(1, 10**3),
    "u": Fraction(1, 10**6),
    "n": Fraction(1, 10**9),
    "p": Fraction(1, 10**12),
}
_BINARY_PREFIXES: dict[str, Fraction] = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
}
_DECIMAL_PREFIXABLE = frozenset({"s", "By", "bit", "Hz", "W", "J"})
_BINARY_PREFIXABLE = frozenset({"By", "bit"})

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<ann>\{[^{}]*\})
  | (?P<pow10>10[*^][+-]?\d+)
  | (?P<factor>\d+)
  | (?P<atom>\[[^\[\]]+\]|[A-Za-z%]+)
  | (?P<exp>[+-]?\d+)
  | (?P<op>[./()])
    """,
    re.VERBOSE,
)


def _atom(symbol: str, text: str) -> Unit:
    if symbol in _ATOMS:
        return _ATOMS[symbol]
    p, rest = symbol[:2], symbol[2:]
    if p in _BINARY_PREFIXES and rest in _BINARY_PREFIXABLE:
        return Unit(_BINARY_PREFIXES[p] * _ATOMS[rest].scale, _ATOMS[rest].dims)
    p, rest = symbol[:1], symbol[1:]
    if p in _DECIMAL_PREFIXES and rest in _DECIMAL_PREFIXABLE:
        return Unit(_DECIMAL_PREFIXES[p] * _ATOMS[rest].scale, _ATOMS[rest].dims)
    raise UnitError(f"unknown unit {symbol!r} in {text!r}")


class _UnitParser:
    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise UnitError(f"unexpected {text[pos]!r} at position {pos} in unit {text!r}")
            pos = m.end()
            kind = m.lastgroup or ""
            if kind != "ws":
                self.tokens.append((kind, m.group()))
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise UnitError(f"unit {self.text!r} ends too early")
        self.i += 1
        return tok

    def parse(self) -> Unit:
        if not self.tokens:
            raise UnitError("empty unit (use '1' for dimensionless)")
        if self.peek() == ("op", "/"):
            self.take()
            unit = DIMENSIONLESS / self.term()
        else:
            unit = self.term()
        if self.peek() is not None:
            raise UnitError(f"unexpected {self.peek()[1]!r} in unit {self.text!r}")  # type: ignore[index]
        return unit

    def term(self) -> Unit:
        unit = self.component()
        while self.peek() in (("op", "."), ("op", "/")):
            op = self.take()[1]
            rhs = self.component()
            unit = unit * rhs if op == "." else unit / rhs
        return unit

    def _exponent(self) -> int:
        tok = self.peek()
        if tok is not None and tok[0] in ("exp", "factor"):
            self.take()
            return int(tok[1])
        return 1

    def component(self) -> Unit:
        kind, value = self.take()
        if kind == "op" and value == "(":
            unit = self.term()
            if self.take() != ("op", ")"):
                raise UnitError(f"missing ')' in unit {self.text!r}")
            return unit
        if kind == "ann":
            return Unit.of(1, {value: 1}) ** self._exponent()
        if kind == "factor":
            if int(value) == 0:
                raise UnitError(f"a factor of 0 in unit {self.text!r}")
            return Unit.of(int(value), {})
        if kind == "pow10":
            return Unit(Fraction(10) ** int(value[3:]), ())
        if kind == "atom":
            unit = _atom(value, self.text) ** self._exponent()
            nxt = self.peek()
            if nxt is not None and nxt[0] == "ann":
                self.take()
                unit = unit * Unit.of(1, {nxt[1]: 1})
            return unit
        raise UnitError(f"unexpected {value!r} in unit {self.text!r}")


_CACHE: dict[str, Unit] = {}


def parse_unit(text: str | Unit) -> Unit:
    """Parse a UCUM unit string of the understood subset (a :class:`Unit` passes through).

    Args:
        text: the unit, e.g. ``"By/s"``, ``"{token}/J"``, ``"ns"``.

    Returns:
        The unit.

    Raises:
        UnitError: an unknown unit symbol or a malformed expression.

    >>> parse_unit("GBy/s") == parse_unit("10*9.By/s")
    True
    >>> parse_unit("furlong")
    Traceback (most recent call last):
    ...
    otel_ext.semconv.units.UnitError: unknown unit 'furlong' in 'furlong'
    """
    if isinstance(text, Unit):
        return text
    cached = _CACHE.get(text)
    if cached is None:
        cached = _UnitParser(text).parse()
        if len(_CACHE) < 4096:
            _CACHE[text] = cached
    return cached


def conversion_factor(from_unit: str | Unit, to_unit: str | Unit) -> float:
    """The factor that turns a value in ``from_unit`` into one in ``to_unit``.

    Raises:
        UnitError: the units measure different quantities.

    >>> conversion_factor("ns", "s")
    1e-09
    >>> conversion_factor("By", "bit")
    8.0
    """
    a, b = parse_unit(from_unit), parse_unit(to_unit)
    if not a.same_dimension(b):
        raise UnitError(f"cannot convert {from_unit!s} to {to_unit!s}: different dimensions")
    return float(a.scale / b.scale)
