"""The derived-metric formula language: parser, evaluator and unit inference."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.semconv.formula import (
    BinOp,
    FormulaError,
    Name,
    Neg,
    Node,
    Num,
    Rate,
    Spec,
    infer_unit,
    parse_formula,
)
from otel_ext.semconv.units import UnitError, parse_unit

NAMES = ["a", "b", "ops", "rd", "wr_2", "_x"]
FIELDS = ["memory_bandwidth", "peak_flops_bf16", "max_clock"]

leaves = st.one_of(
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False).map(Num),
    st.sampled_from(NAMES).map(Name),
    st.sampled_from(NAMES).map(Rate),
    st.sampled_from(FIELDS).map(Spec),
)
trees = st.recursive(
    leaves,
    lambda kids: st.one_of(
        kids.map(Neg),
        st.tuples(st.sampled_from("+-*/"), kids, kids).map(lambda t: BinOp(*t)),
    ),
    max_leaves=12,
)
env_floats = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False).map(
    lambda x: 0.0 if abs(x) < 1e-3 else x  # zeros are common on purpose: division by zero
)


def full_text(node: Node) -> str:
    """A fully parenthesised rendering, independent of the module's printer."""
    if isinstance(node, Num):
        return repr(node.value)
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Rate):
        return f"rate( {node.name} )"
    if isinstance(node, Spec):
        return f"spec.{node.field}"
    if isinstance(node, Neg):
        return f"-({full_text(node.operand)})"
    return f"({full_text(node.left)}{node.op}{full_text(node.right)})"


def reference(node: Node, values: dict, rates: dict, spec: dict) -> float:
    """Straightforward recursive evaluation: the ground truth."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        return values[node.name]
    if isinstance(node, Rate):
        return rates[node.name]
    if isinstance(node, Spec):
        return spec[node.field]
    if isinstance(node, Neg):
        return -reference(node.operand, values, rates, spec)
    x = reference(node.left, values, rates, spec)
    y = reference(node.right, values, rates, spec)
    if node.op == "+":
        return x + y
    if node.op == "-":
        return x - y
    if node.op == "*":
        return x * y
    return math.nan if y == 0.0 else x / y


def same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


@given(trees)
def test_fully_parenthesised_text_parses_to_the_same_tree(tree: Node) -> None:
    assert parse_formula(full_text(tree)).root == tree


@given(trees)
def test_printing_then_parsing_round_trips(tree: Node) -> None:
    printed = str(parse_formula(full_text(tree)))
    assert parse_formula(printed).root == tree
    assert str(parse_formula(printed)) == printed


@settings(max_examples=300)
@given(
    trees,
    st.fixed_dictionaries({n: env_floats for n in NAMES}),
    st.fixed_dictionaries({n: env_floats for n in NAMES}),
    st.fixed_dictionaries({f: env_floats for f in FIELDS}),
)
def test_evaluation_equals_reference(tree: Node, values: dict, rates: dict, spec: dict) -> None:
    got = parse_formula(full_text(tree)).evaluate(values=values, rates=rates, spec=spec)
    assert same(got, reference(tree, values, rates, spec))


@given(trees)
def test_names_are_collected(tree: Node) -> None:
    f = parse_formula(full_text(tree))
    text = full_text(tree)
    assert f.rate_names == {n for n in NAMES if f"rate( {n} )" in text}
    assert f.spec_fields == {s for s in FIELDS if f"spec.{s}" in text}
    assert f.names == f.rate_names | f.value_names


@given(st.text(alphabet="ab()+-*/. 0123456789rates_", max_size=30))
def test_arbitrary_text_parses_or_raises_formula_error(text: str) -> None:
    try:
        f = parse_formula(text)
    except FormulaError:
        return
    # whatever parsed evaluates without raising
    f.evaluate(values={}, rates={}, spec={})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a +",
        "rate(a",
        "rate()",
        "rate(1)",
        "spec.",
        "spec",
        "rate",
        "a b",
        "(a",
        "a)",
        "a $ b",
        "spec.rate",
        "rate(spec)",
        "1..2",
    ],
)
def test_malformed_formulas_are_rejected(text: str) -> None:
    with pytest.raises(FormulaError):
        parse_formula(text)


def test_precedence_and_associativity() -> None:
    env: dict[str, dict[str, float]] = {"values": {}, "rates": {}, "spec": {}}
    assert parse_formula("2 + 3 * 4").evaluate(**env) == 14.0
    assert parse_formula("(2 + 3) * 4").evaluate(**env) == 20.0
    assert parse_formula("8 / 4 / 2").evaluate(**env) == 1.0
    assert parse_formula("8 - 4 - 2").evaluate(**env) == 2.0
    assert parse_formula("-2 * -3").evaluate(**env) == 6.0
    assert parse_formula("1e3 + .5").evaluate(**env) == 1000.5


def test_division_by_zero_and_missing_inputs_give_nan_not_errors() -> None:
    f = parse_formula("rate(a) / rate(b) + c * spec.x")
    assert math.isnan(f.evaluate(values={"c": 1.0}, rates={"a": 1.0, "b": 0.0}, spec={"x": 1}))
    assert math.isnan(f.evaluate(values={}, rates={"a": 1.0, "b": 2.0}, spec={"x": 1}))
    assert math.isnan(f.evaluate(values={"c": "junk"}, rates={"a": 1, "b": 2}, spec={"x": 1}))  # type: ignore[dict-item]
    assert f.evaluate(values={"c": 2.0}, rates={"a": 1.0, "b": 4.0}, spec={"x": 3.0}) == 6.25


def test_value_and_rate_names_are_told_apart() -> None:
    f = parse_formula("rate(ops) / (freq * spec.max_clock)")
    assert f.rate_names == {"ops"}
    assert f.value_names == {"freq"}
    assert f.names == {"ops", "freq"}
    assert f.spec_fields == {"max_clock"}


@pytest.mark.parametrize(
    ("formula", "inputs", "specs", "expected"),
    [
        ("rate(a) / rate(b)", {"a": "{cycle}", "b": "{cycle}"}, {}, "1"),
        ("rate(ops)", {"ops": "{flop}"}, {}, "{flop}/s"),
        ("rate(e)", {"e": "J"}, {}, "W"),
        ("rate(t)", {"t": "s"}, {}, "1"),
        ("rate(bus) / rate(t)", {"bus": "By", "t": "s"}, {}, "By/s"),
        ("f / spec.max_clock", {"f": "Hz"}, {"max_clock": "Hz"}, "1"),
        ("rate(n) / rate(e)", {"n": "{token}", "e": "J"}, {}, "{token}/J"),
        ("2 * x - x", {"x": "ms"}, {}, "ms"),
        ("-x", {"x": "W"}, {}, "J/s"),
    ],
)
def test_unit_inference(formula: str, inputs: dict, specs: dict, expected: str) -> None:
    assert infer_unit(formula, inputs, specs) == parse_unit(expected)


@pytest.mark.parametrize(
    ("formula", "inputs", "specs", "error"),
    [
        ("rate(a) + a", {"a": "By"}, {}, UnitError),
        ("a - 1", {"a": "s"}, {}, UnitError),
        ("rate(a) + rate(b)", {"a": "{flop}", "b": "{token}"}, {}, UnitError),
        ("a + b", {"a": "ms", "b": "s"}, {}, UnitError),
        ("a", {}, {}, FormulaError),
        ("spec.nope", {}, {"max_clock": "Hz"}, FormulaError),
        ("a", {"a": "parsec"}, {}, UnitError),
    ],
)
def test_unit_inference_errors(formula: str, inputs: dict, specs: dict, error: type) -> None:
    with pytest.raises(error):
        infer_unit(formula, inputs, specs)
