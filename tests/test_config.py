"""``OTEL_EXT_*`` variables: parsing as the OpenTelemetry specification says, and their docs."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_ext import config
from otel_ext.config import ALL_VARIABLES, EnvVar, resolve
from otel_ext.semconv.configdoc import STANDARD_VARIABLES

ROOT = Path(__file__).resolve().parent.parent
BOOL = EnvVar("OTEL_EXT_TEST_BOOL", bool, False, "test")
BOOL_ON = EnvVar("OTEL_EXT_TEST_BOOL_ON", bool, True, "test")
INT = EnvVar("OTEL_EXT_TEST_INT", int, 7, "test")
FLOAT = EnvVar("OTEL_EXT_TEST_FLOAT", float, 2.5, "test")
STR = EnvVar("OTEL_EXT_TEST_STR", str, "dflt", "test")


def test_precedence_argument_then_environment_then_default() -> None:
    env = {STR.name: "from-env"}
    assert resolve(STR, "from-code", env=env) == "from-code"
    assert resolve(STR, env=env) == "from-env"
    assert resolve(STR, env={}) == "dflt"


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INT.name, "42")
    assert resolve(INT) == 42
    monkeypatch.delenv(INT.name)
    assert resolve(INT) == 7


@pytest.mark.parametrize("var", [BOOL, INT, FLOAT, STR])
@pytest.mark.parametrize("raw", ["", "   "])
def test_empty_means_unset(var: EnvVar, raw: str) -> None:
    assert resolve(var, env={var.name: raw}) == var.default


@pytest.mark.parametrize(
    ("raw", "expected", "warns"),
    [
        ("true", True, False),
        ("TRUE", True, False),
        (" True ", True, False),
        ("false", False, False),
        ("False", False, False),
        ("1", False, True),
        ("yes", False, True),
        ("on", False, True),
    ],
)
def test_booleans_are_true_only_for_true(
    raw: str, expected: bool, warns: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_ext.config"):
        assert resolve(BOOL, env={BOOL.name: raw}) is expected
        # a default of true does not leak into a bad value: bad is false
        assert resolve(BOOL_ON, env={BOOL_ON.name: raw}) is expected
    assert bool(caplog.records) is warns


@pytest.mark.parametrize(("var", "raw"), [(INT, "12x"), (INT, "1.5"), (FLOAT, "fast"), (FLOAT, "")])
def test_bad_numbers_warn_and_fall_back(
    var: EnvVar, raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_ext.config"):
        assert resolve(var, env={var.name: raw}) == var.default
    assert bool(caplog.records) is (raw != "")
    if raw:
        assert var.name in caplog.text


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_ints_parse(n: int) -> None:
    assert resolve(INT, env={INT.name: f" {n} "}) == n


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_parse(x: float) -> None:
    assert resolve(FLOAT, env={FLOAT.name: repr(x)}) == x


@given(st.text(alphabet=st.characters(categories=["L"]), min_size=1, max_size=12))
def test_words_are_not_numbers(word: str) -> None:
    if word.strip().lower() in ("nan", "inf", "infinity"):
        return  # Python's float() reads these
    assert resolve(FLOAT, env={FLOAT.name: word}) == FLOAT.default
    assert resolve(BOOL, env={BOOL.name: word}) is (word.strip().lower() == "true")


def test_declarations_are_unique_typed_and_documented() -> None:
    names = [v.name for v in ALL_VARIABLES]
    assert len(names) == len(set(names))
    for v in ALL_VARIABLES:
        assert re.fullmatch(r"OTEL_EXT_[A-Z0-9_]+", v.name), v.name
        assert v.kind in (str, int, float, bool)
        assert type(v.default) is v.kind, v.name
        assert v.doc.strip(), v.name
    assert config.REQUIRE_INTEGRATION in ALL_VARIABLES


def _literals(pattern: str) -> set[str]:
    found: set[str] = set()
    for pkg in ("otel_ext", "exporters", "semantic_conventions"):
        for path in (ROOT / pkg).rglob("*.py"):
            found.update(re.findall(pattern, path.read_text(encoding="utf-8")))
    return found


def test_every_otel_ext_variable_used_in_the_code_is_declared() -> None:
    used = _literals(r"[\"'](OTEL_EXT_[A-Z0-9_]+)[\"']")
    assert used <= {v.name for v in ALL_VARIABLES}


def test_every_standard_variable_read_by_the_code_is_documented() -> None:
    used = _literals(r"[\"'f](OTEL_(?!EXT_)[A-Z0-9_{}a-z]+)[\"']")
    documented = set(STANDARD_VARIABLES)
    for name in used:
        normal = re.sub(
            r"^OTEL_EXPORTER_OTLP_(TRACES|METRICS|LOGS|\{sig\})_",
            "OTEL_EXPORTER_OTLP_{SIGNAL}_",
            name,
        )
        assert normal in documented, f"{name} is read but not in STANDARD_VARIABLES"


def test_configuration_page_lists_every_variable() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for v in ALL_VARIABLES:
        assert f"| `{v.name}` | {v.kind.__name__} |" in text
    for name in STANDARD_VARIABLES:
        assert f"| `{name}` |" in text
