"""Registry validation: the real registry is valid, and each defect of a crafted copy is found."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_ext.errors import RegistryError
from otel_ext.semconv.formula import infer_unit, parse_formula
from otel_ext.semconv.generate import PROJECT_ROOT, generated_files, write_generated
from otel_ext.semconv.registry import DEFAULT_REGISTRY, load_registry
from otel_ext.semconv.units import parse_unit
from otel_ext.semconv.validate import Problem, check_name, validate_registry

METRICS = "accel/metrics.yaml"
SPANS = "accel/spans.yaml"
SPECS = "devices/specs.yaml"
ANALYSES = "accel/analyses.yaml"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A private copy of the real registry to break."""
    dst = tmp_path / "model"
    shutil.copytree(DEFAULT_REGISTRY, dst)
    return dst


def edit(root: Path, rel: str, change: Callable[[Any], None]) -> None:
    path = root / rel
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def group(doc: Any, gid: str) -> dict[str, Any]:
    for g in doc["groups"]:
        if g["id"] == gid:
            return g
    raise KeyError(gid)


def problems_of(root: Path) -> list[Problem]:
    return validate_registry(load_registry(root), generated_root=None)


def assert_found(root: Path, file: str, definition: str, fragment: str) -> None:
    found = problems_of(root)
    assert any(
        p.file == file and p.definition == definition and fragment in p.message for p in found
    ), "\n".join(map(str, found))


# ---- the real registry ---------------------------------------------------------------------


def test_real_registry_is_valid_and_generated_files_in_sync() -> None:
    assert validate_registry(load_registry(), generated_root=PROJECT_ROOT) == []


def test_committed_generated_files_equal_a_fresh_generation() -> None:
    for path, text in generated_files().items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale"


REAL = load_registry()
DERIVED = sorted(n for n, m in REAL.metrics.items() if m.metric_class == "derived")


@pytest.mark.parametrize("name", DERIVED)
def test_every_derived_metric_formula_and_units(name: str) -> None:
    m = REAL.metrics[name]
    assert m.formula is not None
    f = parse_formula(m.formula)
    assert f.names == set(m.inputs)
    assert f.spec_fields <= set(REAL.spec_fields)
    for local in f.rate_names:
        assert REAL.metrics[m.inputs[local]].monotonic
    units = {k: REAL.metrics[v].unit for k, v in m.inputs.items()}
    assert infer_unit(f, units, REAL.spec_fields) == parse_unit(m.unit)
    # and it evaluates to a finite number on plausible positive inputs
    ones = dict.fromkeys(m.inputs, 2.0)
    spec = REAL.device_specs["sim-accel-v1"]
    assert f.evaluate(values=ones, rates=ones, spec=spec) > 0


def test_device_spec_values_are_floats() -> None:
    # PyYAML reads 989.0e12 as a string; the loader must convert it
    assert REAL.device_specs["H100-SXM5-80GB"]["peak_flops_bf16"] == 989.0e12


# ---- one defect each ----------------------------------------------------------------------


def set_field(gid: str, key: str, value: Any, rel: str = METRICS) -> tuple[str, Callable]:
    def change(doc: Any) -> None:
        if value is None:
            group(doc, gid).pop(key, None)
        else:
            group(doc, gid)[key] = value

    return rel, change


CASES: list[tuple[str, tuple[str, Callable], str, str, str]] = [
    # (id, (file, change), problem file, definition, message fragment)
    (
        "unknown unit",
        set_field("metric.accel.device.cycles.active", "unit", "furlong"),
        METRICS,
        "accel.device.cycles.active",
        "unknown unit",
    ),
    (
        "uppercase name",
        set_field("metric.accel.device.kernels", "metric_name", "accel.device.Kernels"),
        METRICS,
        "accel.device.Kernels",
        "is not lowercase",
    ),
    (
        "unit in metric name",
        set_field("metric.accel.device.kernels", "metric_name", "accel.device.kernel_time_ms"),
        METRICS,
        "accel.device.kernel_time_ms",
        "ends in the unit '_ms'",
    ),
    (
        "total suffix",
        set_field("metric.accel.device.kernels", "metric_name", "accel.device.kernels_total"),
        METRICS,
        "accel.device.kernels_total",
        "'_total'",
    ),
    (
        "outside namespace",
        set_field("metric.accel.device.kernels", "metric_name", "gpu.kernels"),
        METRICS,
        "gpu.kernels",
        "not under the 'accel' namespace",
    ),
    (
        "no namespace",
        set_field("metric.accel.device.kernels", "metric_name", "kernels"),
        METRICS,
        "kernels",
        "no namespace",
    ),
    (
        "double underscore",
        set_field("metric.accel.device.kernels", "metric_name", "accel.device.kern__els"),
        METRICS,
        "accel.device.kern__els",
        "'_' within a word",
    ),
    (
        "dash",
        set_field("span.accel.layer", "span_name", "accel.model-layer", SPANS),
        SPANS,
        "accel.model-layer",
        "'_' within a word",
    ),
    (
        "unknown formula input",
        set_field("metric.accel.device.mfu", "formula", "rate(ops) / rate(nope)"),
        METRICS,
        "accel.device.mfu",
        "unknown input 'nope'",
    ),
    (
        "unknown spec field",
        set_field("metric.accel.device.mfu", "formula", "rate(ops) / spec.peak_flops_bf17"),
        METRICS,
        "accel.device.mfu",
        "unknown spec field 'peak_flops_bf17'",
    ),
    (
        "declared unit differs",
        set_field("metric.accel.device.mbu", "unit", "By/s"),
        METRICS,
        "accel.device.mbu",
        "formula gives unit 1 but the metric declares 'By/s'",
    ),
    (
        "scale differs",
        set_field("metric.accel.memory.bandwidth", "unit", "GBy/s"),
        METRICS,
        "accel.memory.bandwidth",
        "formula gives unit By/s",
    ),
    (
        "adding different units",
        set_field("metric.accel.memory.bandwidth", "formula", "rate(rd) + wr"),
        METRICS,
        "accel.memory.bandwidth",
        "cannot add By/s and By",
    ),
    (
        "formula does not parse",
        set_field("metric.accel.memory.bandwidth", "formula", "rate(rd) + (rate(wr)"),
        METRICS,
        "accel.memory.bandwidth",
        "formula does not parse",
    ),
    (
        "base metric with formula",
        set_field("metric.accel.device.kernels", "formula", "rate(x)"),
        METRICS,
        "accel.device.kernels",
        "base metric has a formula",
    ),
    (
        "derived without formula",
        set_field("metric.accel.device.mfu", "formula", None),
        METRICS,
        "accel.device.mfu",
        "derived metric without a formula",
    ),
    (
        "input names unknown metric",
        set_field("metric.accel.device.mfu", "inputs", {"ops": "accel.device.opz"}),
        METRICS,
        "accel.device.mfu",
        "names unknown metric 'accel.device.opz'",
    ),
    (
        "input names derived metric",
        set_field("metric.accel.device.mfu", "inputs", {"ops": "accel.device.flops.achieved"}),
        METRICS,
        "accel.device.mfu",
        "inputs must be base",
    ),
    (
        "unused input",
        set_field(
            "metric.accel.device.mfu",
            "inputs",
            {"ops": "accel.device.operations", "k": "accel.device.kernels"},
        ),
        METRICS,
        "accel.device.mfu",
        "input 'k' is declared but the formula does not use it",
    ),
    (
        "rate of non-monotonic",
        set_field("metric.accel.device.clock.ratio", "formula", "rate(freq) / spec.max_clock * 1"),
        METRICS,
        "accel.device.clock.ratio",
        "rate() of input 'freq'",
    ),
    (
        "counter not monotonic",
        set_field("metric.accel.device.kernels", "monotonic", False),
        METRICS,
        "accel.device.kernels",
        "a counter must be 'monotonic: true'",
    ),
    (
        "monotonic gauge",
        set_field("metric.accel.device.clock.frequency", "monotonic", True),
        METRICS,
        "accel.device.clock.frequency",
        "only a counter is monotonic",
    ),
    (
        "unknown instrument",
        set_field("metric.accel.device.clock.frequency", "instrument", "meter"),
        METRICS,
        "accel.device.clock.frequency",
        "unknown instrument 'meter'",
    ),
    (
        "unknown scope",
        set_field("metric.accel.device.clock.frequency", "scope", "galaxy"),
        METRICS,
        "accel.device.clock.frequency",
        "unknown scope 'galaxy'",
    ),
    (
        "unknown class",
        set_field("metric.accel.device.clock.frequency", "class", "magic"),
        METRICS,
        "accel.device.clock.frequency",
        "unknown class 'magic'",
    ),
    (
        "metric lists unknown attribute",
        set_field("metric.accel.device.kernels", "attributes", ["accel.device.idd"]),
        METRICS,
        "accel.device.kernels",
        "unknown attribute 'accel.device.idd'",
    ),
    (
        "span lists unknown attribute",
        set_field("span.accel.layer", "attributes", ["accel.layer.nam"], SPANS),
        SPANS,
        "accel.layer",
        "unknown attribute 'accel.layer.nam'",
    ),
    (
        "unknown span kind",
        set_field("span.accel.layer", "span_kind", "sideways", SPANS),
        SPANS,
        "accel.layer",
        "unknown span_kind",
    ),
    (
        "analysis requires unknown metric",
        set_field("analysis.roofline", "requires", ["accel.device.mfuu"], ANALYSES),
        ANALYSES,
        "roofline",
        "unknown metric 'accel.device.mfuu'",
    ),
    (
        "analysis interval not positive",
        set_field("analysis.roofline", "max_interval_s", 0, ANALYSES),
        ANALYSES,
        "roofline",
        "max_interval_s must be positive",
    ),
]


@pytest.mark.parametrize(
    ("change", "file", "definition", "fragment"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_each_defect_is_reported(
    model: Path, change: tuple[str, Callable], file: str, definition: str, fragment: str
) -> None:
    assert problems_of(model) == []
    edit(model, *change)
    assert_found(model, file, definition, fragment)


def test_duplicate_metric_name(model: Path) -> None:
    def dup(doc: Any) -> None:
        doc["groups"].append(dict(group(doc, "metric.accel.device.kernels")))

    edit(model, METRICS, dup)
    assert_found(
        model,
        METRICS,
        "accel.device.kernels",
        "duplicate metric name (also defined in accel/metrics.yaml)",
    )


def test_duplicate_attribute_across_files(model: Path) -> None:
    def dup(doc: Any) -> None:
        doc["groups"][0]["attributes"].append({"id": "accel.rank", "type": "int", "brief": "again"})

    edit(model, "accel/clock.yaml", dup)
    # files load in sorted order, so the second definition is the one in device.yaml
    assert_found(
        model,
        "accel/device.yaml",
        "accel.rank",
        "duplicate attribute name (also defined in accel/clock.yaml)",
    )


def test_attribute_that_is_also_a_namespace(model: Path) -> None:
    def add(doc: Any) -> None:
        doc["groups"][0]["attributes"].append(
            {"id": "accel.layer", "type": "string", "brief": "clashes with accel.layer.*"}
        )

    edit(model, "accel/clock.yaml", add)
    assert_found(model, "accel/clock.yaml", "accel.layer", "also the namespace")


def test_two_names_with_one_constant(model: Path) -> None:
    def add(doc: Any) -> None:
        doc["groups"][0]["attributes"] += [
            {"id": "accel.a_b.c", "type": "string", "brief": "one"},
            {"id": "accel.a.b_c", "type": "string", "brief": "two"},
        ]

    edit(model, "accel/clock.yaml", add)
    found = [str(p) for p in problems_of(model)]
    assert any("same constant ACCEL_A_B_C" in p for p in found), found


def test_external_name_in_our_namespace(model: Path) -> None:
    edit(
        model,
        "otel/references.yaml",
        set_field("metric.hw.power", "metric_name", "accel.power", "")[1],
    )
    assert_found(model, "otel/references.yaml", "accel.power", "marked external")


def test_spec_row_missing_a_field_or_not_a_number(model: Path) -> None:
    def change(doc: Any) -> None:
        del doc["devices"]["MI250X"]["max_clock"]
        doc["devices"]["A100-SXM4-80GB"]["power_limit"] = "lots"
        doc["devices"]["V100-SXM2-32GB"]["memory_size"] = -1
        doc["fields"]["power_limit"] = "horsepower"

    edit(model, SPECS, change)
    assert_found(model, SPECS, "MI250X", "no value for spec field 'max_clock'")
    assert_found(model, SPECS, "A100-SXM4-80GB", "'power_limit' is 'lots'")
    assert_found(model, SPECS, "V100-SXM2-32GB", "'memory_size' is -1.0")
    assert_found(model, SPECS, "field power_limit", "unknown unit")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("groups: [{id: x, type: wormhole}]", "unknown group type 'wormhole'"),
        ("groups: [{type: metric}]", "every group needs an 'id' and a 'type'"),
        ("just: text", "expected a mapping with a 'groups' list"),
        ("groups: [", "not valid YAML"),
    ],
)
def test_malformed_files_raise_with_the_file_name(model: Path, text: str, fragment: str) -> None:
    (model / "accel" / "broken.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(RegistryError, match=fragment) as info:
        load_registry(model)
    assert "broken.yaml" in str(info.value)


# ---- generated files ----------------------------------------------------------------------


def test_stale_and_missing_generated_files(model: Path, tmp_path: Path) -> None:
    root = tmp_path / "project"
    reg = load_registry(model)
    write_generated(reg, root=root)
    assert validate_registry(reg, generated_root=root) == []
    edit(model, METRICS, set_field("metric.accel.device.kernels", "brief", "Kernels, renamed.")[1])
    (root / "semantic_conventions" / "spans.py").unlink()
    found = validate_registry(load_registry(model), generated_root=root)
    assert (
        Problem(
            "semantic_conventions/metrics.py",
            "generated file",
            "stale; run `otel-ext semconv generate`",
        )
        in found
    )
    assert (
        Problem(
            "docs/semantic-conventions.md",
            "generated file",
            "stale; run `otel-ext semconv generate`",
        )
        in found
    )
    assert (
        Problem(
            "semantic_conventions/spans.py",
            "generated file",
            "missing; run `otel-ext semconv generate`",
        )
        in found
    )
    assert not any(p.file.endswith("attributes.py") for p in found)


def test_generation_keeps_the_hand_written_intro(tmp_path: Path) -> None:
    write_generated(root=tmp_path)
    docs = tmp_path / "docs" / "semantic-conventions.md"
    text = docs.read_text(encoding="utf-8")
    head, marker, tail = text.partition("<!-- Everything below is generated")
    assert marker and "## Metrics" not in head
    docs.write_text("# My intro\n\nHand-written words.\n\n" + marker + tail, encoding="utf-8")
    changed = write_generated(root=tmp_path)
    assert docs not in changed  # the body is still in sync, so nothing to rewrite
    docs.write_text(docs.read_text(encoding="utf-8") + "tampered\n", encoding="utf-8")
    assert docs in write_generated(root=tmp_path)
    new = docs.read_text(encoding="utf-8")
    assert new.startswith("# My intro\n\nHand-written words.\n")
    assert "tampered" not in new


def test_generated_constants_follow_the_naming_contract() -> None:
    from otel_ext.semconv import attributes, metrics, spans

    assert attributes.ACCEL_COLLECTIVE_OP == "accel.collective.op"
    assert spans.SPAN_ACCEL_LAYER == "accel.layer"
    assert metrics.METRIC_ACCEL_DEVICE_MFU == "accel.device.mfu"
    assert set(metrics.METRIC_SPECS) == set(REAL.metrics)
    assert metrics.METRIC_SPECS["accel.device.mfu"]["inputs"] == {"ops": "accel.device.operations"}
    assert len(attributes.__all__) == len(REAL.attributes)


@pytest.mark.parametrize(
    ("name", "kind", "external", "ok"),
    [
        ("accel.device.id", "attribute", False, True),
        ("accel.clock.uncertainty_ns", "attribute", False, True),  # attributes may carry units
        ("accel.clock.uncertainty_ns", "metric", False, False),
        ("accel.device.cycles.tensor_active", "metric", False, True),
        ("accel.inference.tokens_per_joule", "metric", False, True),
        ("accel.x.duration_seconds", "metric", False, False),
        ("accel.x.bytes", "metric", False, False),
        ("accel.x._y", "metric", False, False),
        ("accel.x.y_", "metric", False, False),
        ("accel.9x", "metric", False, False),
        ("hw.power", "metric", True, True),
        ("hw.power", "metric", False, False),
        ("accel." + "x" * 260, "metric", False, False),
        ("roofline", "analysis", False, True),
        ("Roofline", "analysis", False, False),
    ],
)
def test_check_name(name: str, kind: str, external: bool, ok: bool) -> None:
    assert (check_name(name, kind=kind, external=external) == []) is ok
