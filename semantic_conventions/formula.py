"""The derived-metric formula language of the registry: parse, evaluate, infer the unit.

A formula is an arithmetic expression over:

* input names (identifiers such as ``ops`` or ``rd``, declared under the metric's ``inputs``),
  standing for the input's current value (a gauge reading, or a counter's value);
* ``rate(NAME)``: the per-second rate of the monotonic counter ``NAME`` over the evaluation
  window (the caller computes rates; the formula only names them);
* ``spec.FIELD``: a peak specification of the device (``devices/specs.yaml``);
* numbers (``2``, ``0.5``, ``1e-9``), ``+ - * /``, unary minus and parentheses.

There is no ``eval``: the text is tokenised and parsed by recursive descent into a small
syntax tree, which is compiled once into nested closures for evaluation.

>>> f = parse_formula("(rate(rd) + rate(wr)) / spec.memory_bandwidth")
>>> sorted(f.names), sorted(f.rate_names), sorted(f.spec_fields)
(['rd', 'wr'], ['rd', 'wr'], ['memory_bandwidth'])
>>> f.evaluate(values={}, rates={"rd": 1.5e12, "wr": 0.5e12}, spec={"memory_bandwidth": 4e12})
0.5
>>> str(infer_unit(f, {"rd": "By", "wr": "By"}, {"memory_bandwidth": "By/s"}))
'1'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from otel_ext.errors import RegistryError
from otel_ext.semconv.units import DIMENSIONLESS, SECOND, Unit, UnitError, parse_unit

__all__ = [
    "BinOp",
    "Formula",
    "FormulaError",
    "Name",
    "Neg",
    "Node",
    "Num",
    "Rate",
    "Spec",
    "infer_unit",
    "parse_formula",
]


class FormulaError(RegistryError):
    """A formula does not parse, or names something that is not declared."""


# ---- syntax tree --------------------------------------------------------------------------


@dataclass(frozen=True)
class Num:
    """A number literal."""

    value: float


@dataclass(frozen=True)
class Name:
    """An input's current value."""

    name: str


@dataclass(frozen=True)
class Rate:
    """The per-second rate of a monotonic input over the window: ``rate(name)``."""

    name: str


@dataclass(frozen=True)
class Spec:
    """A device peak specification: ``spec.field``."""

    field: str


@dataclass(frozen=True)
class Neg:
    """Unary minus."""

    operand: Node


@dataclass(frozen=True)
class BinOp:
    """A binary operation, ``op`` one of ``+ - * /``."""

    op: str
    left: Node
    right: Node


Node = Num | Name | Rate | Spec | Neg | BinOp

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _format(node: Node) -> str:
    """Print with the fewest parentheses that keep the tree (left-associative operators)."""
    if isinstance(node, Num):
        return repr(node.value)
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Rate):
        return f"rate({node.name})"
    if isinstance(node, Spec):
        return f"spec.{node.field}"
    if isinstance(node, Neg):
        inner = _format(node.operand)
        if isinstance(node.operand, BinOp):
            inner = f"({inner})"
        return f"-{inner}"
    prec = _PRECEDENCE[node.op]
    left = _format(node.left)
    if isinstance(node.left, BinOp) and _PRECEDENCE[node.left.op] < prec:
        left = f"({left})"
    right = _format(node.right)
    if isinstance(node.right, BinOp) and _PRECEDENCE[node.right.op] <= prec:
        right = f"({right})"
    return f"{left} {node.op} {right}"


# ---- parser -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>[-+*/().])
    """,
    re.VERBOSE,
)
_RESERVED = frozenset({"rate", "spec"})


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise FormulaError(f"unexpected {text[pos]!r} at position {pos} in {text!r}")
            if m.lastgroup != "ws":
                self.tokens.append((m.lastgroup or "", m.group(), pos))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, what: str) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise FormulaError(f"formula {self.text!r} ends where {what} was expected")
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.take(repr(value))
        if tok[1] != value:
            raise FormulaError(
                f"expected {value!r} at position {tok[2]} in {self.text!r}, found {tok[1]!r}"
            )

    def ident(self, what: str) -> str:
        tok = self.take(what)
        if tok[0] != "ident" or tok[1] in _RESERVED:
            raise FormulaError(
                f"expected {what} at position {tok[2]} in {self.text!r}, found {tok[1]!r}"
            )
        return tok[1]

    def parse(self) -> Node:
        if not self.tokens:
            raise FormulaError("empty formula")
        node = self.expr()
        tok = self.peek()
        if tok is not None:
            raise FormulaError(f"unexpected {tok[1]!r} at position {tok[2]} in {self.text!r}")
        return node

    def expr(self) -> Node:
        node = self.term()
        while (tok := self.peek()) is not None and tok[1] in ("+", "-"):
            self.i += 1
            node = BinOp(tok[1], node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while (tok := self.peek()) is not None and tok[1] in ("*", "/"):
            self.i += 1
            node = BinOp(tok[1], node, self.unary())
        return node

    def unary(self) -> Node:
        tok = self.peek()
        if tok is not None and tok[1] == "-":
            self.i += 1
            return Neg(self.unary())
        if tok is not None and tok[1] == "+":
            self.i += 1
            return self.unary()
        return self.primary()

    def primary(self) -> Node:
        kind, value, pos = self.take("a value")
        if kind == "num":
            return Num(float(value))
        if kind == "ident":
            if value == "rate":
                self.expect("(")
                name = self.ident("an input name inside rate()")
                self.expect(")")
                return Rate(name)
            if value == "spec":
                self.expect(".")
                return Spec(self.ident("a spec field after 'spec.'"))
            return Name(value)
        if value == "(":
            node = self.expr()
            self.expect(")")
            return node
        raise FormulaError(f"unexpected {value!r} at position {pos} in {self.text!r}")


# ---- evaluation ---------------------------------------------------------------------------

_Eval = Callable[[Mapping[str, float], Mapping[str, float], Mapping[str, float]], float]
_NAN = math.nan


def _compile(node: Node) -> _Eval:
    if isinstance(node, Num):
        v = node.value
        return lambda values, rates, spec: v
    if isinstance(node, Name):
        n = node.name
        return lambda values, rates, spec: float(values.get(n, _NAN))
    if isinstance(node, Rate):
        r = node.name
        return lambda values, rates, spec: float(rates.get(r, _NAN))
    if isinstance(node, Spec):
        s = node.field
        return lambda values, rates, spec: float(spec.get(s, _NAN))
    if isinstance(node, Neg):
        inner = _compile(node.operand)
        return lambda values, rates, spec: -inner(values, rates, spec)
    a, b = _compile(node.left), _compile(node.right)
    if node.op == "+":
        return lambda values, rates, spec: a(values, rates, spec) + b(values, rates, spec)
    if node.op == "-":
        return lambda values, rates, spec: a(values, rates, spec) - b(values, rates, spec)
    if node.op == "*":
        return lambda values, rates, spec: a(values, rates, spec) * b(values, rates, spec)

    def divide(
        values: Mapping[str, float], rates: Mapping[str, float], spec: Mapping[str, float]
    ) -> float:
        num, den = a(values, rates, spec), b(values, rates, spec)
        if den == 0.0:
            return _NAN
        return num / den

    return divide


def _walk(node: Node) -> list[Node]:
    out: list[Node] = [node]
    if isinstance(node, Neg):
        out += _walk(node.operand)
    elif isinstance(node, BinOp):
        out += _walk(node.left) + _walk(node.right)
    return out


@dataclass(frozen=True)
class Formula:
    """A parsed formula.

    Attributes:
        text: the source text.
        root: the syntax tree.
        names: every input name the formula uses (plainly or under ``rate()``).
        rate_names: the input names used under ``rate()``.
        value_names: the input names used plainly (their current value).
        spec_fields: the ``spec.FIELD`` names used.
    """

    text: str
    root: Node
    names: frozenset[str]
    rate_names: frozenset[str]
    value_names: frozenset[str]
    spec_fields: frozenset[str]
    _eval: _Eval = field(repr=False, compare=False)

    def evaluate(
        self,
        *,
        values: Mapping[str, float],
        rates: Mapping[str, float],
        spec: Mapping[str, float],
    ) -> float:
        """Evaluate the formula; never raises.

        Args:
            values: input name -> current value (for inputs used plainly).
            rates: input name -> per-second rate over the window (for ``rate(name)``).
            spec: spec field -> the device's peak value.

        Returns:
            The value; ``nan`` when a division has a zero denominator, or when a needed
            input, rate or spec field is missing or not a number.

        >>> parse_formula("a / b").evaluate(values={"a": 1.0, "b": 0.0}, rates={}, spec={})
        nan
        """
        try:
            return self._eval(values, rates, spec)
        except (TypeError, ValueError, ArithmeticError):
            return _NAN

    def __str__(self) -> str:
        return _format(self.root)


def parse_formula(text: str) -> Formula:
    """Parse a derived-metric formula.

    Args:
        text: the formula, e.g. ``"rate(ops) / spec.peak_flops_bf16"``.

    Returns:
        The parsed :class:`Formula`.

    Raises:
        FormulaError: the text is not a formula of the language.

    >>> str(parse_formula("rate(a)/(rate(b)+ 2*c)"))
    'rate(a) / (rate(b) + 2.0 * c)'
    >>> parse_formula("rate(a) +")
    Traceback (most recent call last):
    ...
    otel_ext.semconv.formula.FormulaError: formula 'rate(a) +' ends where a value was expected
    """
    root = _Parser(text).parse()
    nodes = _walk(root)
    rate_names = frozenset(n.name for n in nodes if isinstance(n, Rate))
    value_names = frozenset(n.name for n in nodes if isinstance(n, Name))
    return Formula(
        text=text,
        root=root,
        names=rate_names | value_names,
        rate_names=rate_names,
        value_names=value_names,
        spec_fields=frozenset(n.field for n in nodes if isinstance(n, Spec)),
        _eval=_compile(root),
    )


def infer_unit(
    formula: Formula | str,
    input_units: Mapping[str, str | Unit],
    spec_units: Mapping[str, str | Unit],
) -> Unit:
    """The unit of a formula's result, from its inputs' and spec fields' units.

    ``rate(x)`` has x's unit divided by ``s``; numbers are dimensionless; ``+`` and ``-``
    need operands of the same unit; ``*`` and ``/`` combine them.

    Args:
        formula: the formula (parsed or text).
        input_units: input name -> unit.
        spec_units: spec field -> unit.

    Returns:
        The inferred unit.

    Raises:
        FormulaError: the formula names an input or spec field with no unit given.
        UnitError: a unit is unknown, or ``+``/``-`` mixes different units.

    >>> str(infer_unit("rate(tokens) / rate(energy)", {"tokens": "{token}", "energy": "J"}, {}))
    '{token}/J'
    >>> infer_unit("rate(a) + b", {"a": "By", "b": "By"}, {})
    Traceback (most recent call last):
    ...
    otel_ext.semconv.units.UnitError: cannot add By/s and By in 'rate(a) + b'
    """
    f = parse_formula(formula) if isinstance(formula, str) else formula

    def unit_of(node: Node) -> Unit:
        if isinstance(node, Num):
            return DIMENSIONLESS
        if isinstance(node, Name | Rate):
            if node.name not in input_units:
                raise FormulaError(f"unknown input {node.name!r} in {f.text!r}")
            u = parse_unit(input_units[node.name])
            return u / SECOND if isinstance(node, Rate) else u
        if isinstance(node, Spec):
            if node.field not in spec_units:
                raise FormulaError(f"unknown spec field {node.field!r} in {f.text!r}")
            return parse_unit(spec_units[node.field])
        if isinstance(node, Neg):
            return unit_of(node.operand)
        left, right = unit_of(node.left), unit_of(node.right)
        if node.op == "*":
            return left * right
        if node.op == "/":
            return left / right
        if left != right:
            verb = "add" if node.op == "+" else "subtract"
            raise UnitError(f"cannot {verb} {left} and {right} in {f.text!r}")
        return left

    return unit_of(f.root)
