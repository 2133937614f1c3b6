"""``OTEL_EXT_HOST_ID`` names the host in every source and resource (a pod is not a host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_ext.counters import HostSource
from otel_ext.exporters._resource import accelerator_attributes
from otel_ext.semconv.attributes import ACCEL_HOST_ID

FIXTURES = Path(__file__).parent / "fixtures" / "proc" / "t0"


def test_sources_and_resource_take_the_host_id_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXT_HOST_ID", "gpu-node-7")
    source = HostSource(proc_root=str(FIXTURES))
    source.open()
    samples = source.sample()
    assert samples and {s.attributes[ACCEL_HOST_ID] for s in samples} == {"gpu-node-7"}
    assert accelerator_attributes(use_torch=False)[ACCEL_HOST_ID] == "gpu-node-7"


def test_an_argument_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXT_HOST_ID", "from-env")
    assert HostSource(proc_root=str(FIXTURES), host="from-arg").host == "from-arg"
