"""Fault specs and configuration of the simulated cluster: parsing, validation, the CLI."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_ext.errors import ConfigError, OtelExtError
from otel_ext.sim import FAULT_KINDS, Fault, SimConfig, parse_fault
from otel_ext.sim.cli import add_arguments, config_from_args

chip_targets = st.builds(lambda h, c: f"host{h}/chip{c}", st.integers(0, 99), st.integers(0, 99))
link_targets = st.builds(
    lambda h, a, b: (h, a, b), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)
).filter(lambda t: t[1] != t[2])


@given(chip_targets, st.sampled_from(["straggler", "throttle"]))
def test_chip_faults_parse_to_their_target(target: str, kind: str) -> None:
    assert parse_fault(f"{kind}@{target}") == Fault(
        kind, target, parse_fault(f"{kind}@{target}").factor
    )
    assert parse_fault(f"{kind}@{target}").target == target


@given(link_targets)
def test_links_are_named_low_chip_first_whatever_the_order_given(
    link: tuple[int, int, int],
) -> None:
    h, a, b = link
    fault = parse_fault(f"slow-link@host{h}/chip{a}-chip{b}")
    assert fault.target == f"host{h}/chip{min(a, b)}-chip{max(a, b)}"


@given(st.text(max_size=40))
def test_any_text_either_parses_or_raises_config_error(text: str) -> None:
    try:
        fault = parse_fault(text)
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert fault.kind in FAULT_KINDS


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("straggler", "expected KIND@TARGET"),
        ("melt@host0/chip0", "unknown kind 'melt'"),
        ("straggler@host0", "is not a chip"),
        ("slow-link@host0/chip1", "is not a link"),
        ("slow-link@host0/chip1-chip1", "two different chips"),
        ("slow-nic@host0/chip1", "is not a host"),
        ("straggler@host0/chip1:fast", "is not a number"),
        ("slow-link@host0/chip0-chip1:2", "at most 1"),
        ("throttle@host0/chip0:-1", "positive"),
    ],
)
def test_bad_fault_specs_name_the_spec_and_the_problem(spec: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fault(spec)
    assert fragment in str(info.value)
    assert repr(spec) in str(info.value)


def test_factors_and_nic_alias() -> None:
    assert parse_fault("straggler@host1/chip2:1.5").factor == 1.5
    assert parse_fault("slow-nic@host1/nic0") == Fault("slow-nic", "host1", 0.1)


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (SimConfig(hosts=0), "--hosts"),
        (SimConfig(chips=0), "--chips"),
        (SimConfig(requests=0), "--requests"),
        (SimConfig(hosts=1, mode="disaggregated"), "at least 2 hosts"),
        (SimConfig(mode="pipeline"), "mode"),
        (SimConfig(faults=(parse_fault("straggler@host2/chip0"),)), "no host host2"),
        (SimConfig(faults=(parse_fault("throttle@host1/chip4"),)), "no chip host1/chip4"),
        (
            SimConfig(chips=8, faults=(parse_fault("slow-link@host0/chip1-chip3"),)),
            "not neighbours",
        ),
        (SimConfig(arrival_rate=0), "arrival_rate"),
        (SimConfig(layer_groups=100), "layer_groups"),
    ],
)
def test_validation_rejects_what_the_cluster_cannot_be(config: SimConfig, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        config.validated()


def test_ring_closing_link_and_mesh_links_are_valid() -> None:
    SimConfig(chips=4, faults=(parse_fault("slow-link@host0/chip0-chip3"),)).validated()
    SimConfig(
        chips=8, topology="mesh", faults=(parse_fault("slow-link@host0/chip1-chip5"),)
    ).validated()


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_arguments_become_a_validated_config() -> None:
    args = _parse(
        [
            "--hosts",
            "3",
            "--chips",
            "2",
            "--requests",
            "9",
            "--seed",
            "7",
            "--fault",
            "slow-nic@host2",
            "--fault",
            "straggler@host0/chip1",
            "--out",
            "somewhere",
        ]
    )
    cfg = config_from_args(args)
    assert (cfg.hosts, cfg.chips, cfg.requests, cfg.seed, cfg.mode) == (3, 2, 9, 7, "disaggregated")
    assert [f.kind for f in cfg.faults] == ["slow-nic", "straggler"]


def test_cli_bad_fault_is_a_one_line_error_with_exit_status_1(tmp_path, capsys) -> None:
    from otel_ext.cli import main

    status = main(["simulate", "--fault", "straggler@host9/chip0", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1 and "no host host9" in err
    assert isinstance(ConfigError("x"), OtelExtError)
