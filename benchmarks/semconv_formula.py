"""Benchmark: evaluating derived-metric formulas (the counter bridge does this per scrape).

Compares ``Formula.evaluate`` (parsed once, compiled into closures) against two baselines
measured in the same run: a hand-written Python function for the same formula (the floor),
and walking the syntax tree on each evaluation (what the closures replace).

    python benchmarks/semconv_formula.py [--n 200000]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

from otel_ext.semconv.formula import BinOp, Name, Neg, Node, Num, Rate, Spec, parse_formula
from otel_ext.semconv.registry import load_registry


def walk(node: Node, values: dict, rates: dict, spec: dict) -> float:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        return values.get(node.name, math.nan)
    if isinstance(node, Rate):
        return rates.get(node.name, math.nan)
    if isinstance(node, Spec):
        return spec.get(node.field, math.nan)
    if isinstance(node, Neg):
        return -walk(node.operand, values, rates, spec)
    assert isinstance(node, BinOp)
    a, b = walk(node.left, values, rates, spec), walk(node.right, values, rates, spec)
    if node.op == "+":
        return a + b
    if node.op == "-":
        return a - b
    if node.op == "*":
        return a * b
    return math.nan if b == 0 else a / b


def timeit(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    n = ap.parse_args().n
    reg = load_registry()
    spec = reg.device_specs["H100-SXM5-80GB"]
    rates = {"ops": 3.1e14, "rd": 1.2e12, "wr": 0.4e12}
    values: dict[str, float] = {}
    text = reg.metrics["accel.device.arithmetic_intensity"].formula or ""
    f = parse_formula(text)

    def hand() -> float:
        den = rates["rd"] + rates["wr"]
        return math.nan if den == 0 else rates["ops"] / den

    rows = [
        ("hand-written function (floor)", timeit(hand, n)),
        (
            "Formula.evaluate (closures)",
            timeit(lambda: f.evaluate(values=values, rates=rates, spec=spec), n),
        ),
        ("tree walk per evaluation", timeit(lambda: walk(f.root, values, rates, spec), n)),
    ]
    t_parse = timeit(lambda: parse_formula(text), max(n // 50, 1))
    base = rows[1][1]
    print(f"formula: {text}   evaluations: {n}")
    print(f"{'variant':34} {'ns/eval':>10} {'vs evaluate':>12}")
    for name, ns in rows:
        print(f"{name:34} {ns:10.0f} {ns / base:11.2f}x")
    print(f"{'parse_formula (once per metric)':34} {t_parse:10.0f} {t_parse / base:11.2f}x")
    all_derived = [parse_formula(m.formula) for m in reg.metrics.values() if m.formula]
    ones = dict.fromkeys("abcdefghijklmnopqrstuvwxyz", 1.0)
    every = {
        **{k: 1.0 for fm in all_derived for k in fm.names},
        **ones,
    }
    t_all = timeit(
        lambda: [fm.evaluate(values=every, rates=every, spec=spec) for fm in all_derived],
        max(n // 20, 1),
    )
    print(
        f"all {len(all_derived)} derived metrics of the registry: {t_all / 1000:.1f} us per device"
    )


if __name__ == "__main__":
    main()
