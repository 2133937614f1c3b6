"""The UCUM subset: parsing, printing and dimension arithmetic."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_ext.semconv.units import (
    DIMENSIONLESS,
    Unit,
    UnitError,
    conversion_factor,
    parse_unit,
)

# Ground truth written out independently of the module's tables: symbol -> (scale, dims).
KNOWN: dict[str, tuple[Fraction, dict[str, int]]] = {
    "s": (Fraction(1), {"s": 1}),
    "ms": (Fraction(1, 1000), {"s": 1}),
    "us": (Fraction(1, 10**6), {"s": 1}),
    "ns": (Fraction(1, 10**9), {"s": 1}),
    "min": (Fraction(60), {"s": 1}),
    "h": (Fraction(3600), {"s": 1}),
    "By": (Fraction(1), {"By": 1}),
    "kBy": (Fraction(1000), {"By": 1}),
    "MBy": (Fraction(10**6), {"By": 1}),
    "GBy": (Fraction(10**9), {"By": 1}),
    "TBy": (Fraction(10**12), {"By": 1}),
    "KiBy": (Fraction(1024), {"By": 1}),
    "bit": (Fraction(1, 8), {"By": 1}),
    "Gbit": (Fraction(10**9, 8), {"By": 1}),
    "Hz": (Fraction(1), {"s": -1}),
    "GHz": (Fraction(10**9), {"s": -1}),
    "W": (Fraction(1), {"J": 1, "s": -1}),
    "kW": (Fraction(1000), {"J": 1, "s": -1}),
    "J": (Fraction(1), {"J": 1}),
    "mJ": (Fraction(1, 1000), {"J": 1}),
    "K": (Fraction(1), {"K": 1}),
    "Cel": (Fraction(1), {"K": 1}),
    "1": (Fraction(1), {}),
    "%": (Fraction(1, 100), {}),
    "[ppm]": (Fraction(1, 10**6), {}),
    "{cycle}": (Fraction(1), {"{cycle}": 1}),
    "{flop}": (Fraction(1), {"{flop}": 1}),
    "{token}": (Fraction(1), {"{token}": 1}),
}


def truth(scale: Fraction, dims: dict[str, int]) -> Unit:
    return Unit(scale, tuple(sorted((d, e) for d, e in dims.items() if e)))


@pytest.mark.parametrize("symbol", sorted(KNOWN))
def test_each_known_symbol(symbol: str) -> None:
    assert parse_unit(symbol) == truth(*KNOWN[symbol])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("J/s", "W"),
        ("Hz", "/s"),
        ("Hz", "1/s"),
        ("Hz", "s-1"),
        ("{cycle}/{cycle}", "1"),
        ("By/s", "By.s-1"),
        ("{flop}/By", "{flop}.By-1"),
        ("{token}/J", "{token}/(W.s)"),
        ("GBy", "10*9.By"),
        ("GBy", "10^9.By"),
        ("GBy", "1000000000.By"),
        ("By", "8.bit"),
        ("ms", "s/1000"),
        ("a/b.c".replace("a", "By").replace("b", "s").replace("c", "s"), "By"),  # left to right
    ],
)
def test_equivalent_spellings(a: str, b: str) -> None:
    assert parse_unit(a) == parse_unit(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("{flop}/s", "{token}/s"), ("s", "ms"), ("By", "bit"), ("{cycle}", "1"), ("W", "J")],
)
def test_different_units_differ(a: str, b: str) -> None:
    assert parse_unit(a) != parse_unit(b)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0",
        "/0",
        "0.By",
        "furlong",
        "By/",
        "(By",
        "By)",
        "2s",
        "kK",
        "Kis",
        "{a",
        "By//s",
        "s^2",
        "xBy",
    ],
)
def test_unknown_or_malformed_units_are_errors(text: str) -> None:
    with pytest.raises(UnitError):
        parse_unit(text)


def test_conversion_factor() -> None:
    assert conversion_factor("ms", "s") == 0.001
    assert conversion_factor("GBy/s", "By/s") == 1e9
    assert conversion_factor("W", "J/s") == 1.0
    with pytest.raises(UnitError):
        conversion_factor("s", "By")


# ---- properties --------------------------------------------------------------------------

symbols = st.sampled_from(sorted(KNOWN))
exponents = st.integers(min_value=-3, max_value=3).filter(lambda e: e != 0)


@st.composite
def unit_expressions(draw: st.DrawFn) -> tuple[str, Unit]:
    """A random unit expression and its ground-truth value, built from KNOWN."""
    n = draw(st.integers(min_value=1, max_value=4))
    text = ""
    value = DIMENSIONLESS
    for i in range(n):
        sym = draw(symbols)
        scale, dims = KNOWN[sym]
        exp = 1
        if sym not in ("1", "%") and not sym.startswith("["):
            exp = draw(st.sampled_from([1, 1, 2, -1]))
        part = sym if exp == 1 else f"{sym}{exp}"
        unit = truth(scale, dims) ** exp
        if i == 0:
            text, value = part, unit
        elif draw(st.booleans()):
            text, value = f"{text}.{part}", value * unit
        else:
            text, value = f"({text})/{part}", value / unit
    return text, value


@given(unit_expressions())
def test_parse_matches_ground_truth(expr: tuple[str, Unit]) -> None:
    text, value = expr
    assert parse_unit(text) == value


@given(unit_expressions())
def test_printing_then_parsing_round_trips(expr: tuple[str, Unit]) -> None:
    unit = parse_unit(expr[0])
    assert parse_unit(str(unit)) == unit


@given(unit_expressions(), unit_expressions())
def test_products_and_quotients(a: tuple[str, Unit], b: tuple[str, Unit]) -> None:
    ua, ub = parse_unit(a[0]), parse_unit(b[0])
    assert parse_unit(f"({a[0]}).({b[0]})") == ua * ub
    assert parse_unit(f"({a[0]})/({b[0]})") == ua / ub
    assert parse_unit(f"({a[0]}).({b[0]})") == parse_unit(f"({b[0]}).({a[0]})")
    assert (ua / ub) * ub == ua


@given(st.text(alphabet="abBysJW{}[]().*/^-0123456789 kMG%", max_size=20))
def test_arbitrary_text_parses_or_raises_unit_error(text: str) -> None:
    try:
        parse_unit(text)
    except UnitError:
        pass
