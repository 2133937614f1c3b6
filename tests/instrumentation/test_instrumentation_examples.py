"""The instrumentation examples run and produce the telemetry they promise."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from conftest import REPO_ROOT

pytestmark = pytest.mark.slow

pytest.importorskip("torch")
EXAMPLES = REPO_ROOT / "examples"


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Import an example by name (importable by spawned ranks too: the folder is on sys.path)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def _load(name: str) -> ModuleType:
        monkeypatch.delitem(sys.modules, name, raising=False)
        return importlib.import_module(name)

    return _load


def test_inference_server_example(span_exporter: object, load: Callable[[str], ModuleType]) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    provider, exporter = span_exporter  # type: ignore[misc]
    reader = InMemoryMetricReader()
    results = load("inference_server").run(
        requests=5, tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    assert sorted(results) == [f"req-{i:04d}" for i in range(5)]
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.name == "accel.request"]
    assert len(requests) == 5
    for req in requests:
        phases = [
            s for s in spans if s.parent is not None and s.parent.span_id == req.context.span_id
        ]
        kinds = [p.attributes["accel.request.phase"] for p in phases]
        assert kinds[:2] == ["queue", "prefill"] and set(kinds[2:]) == {"decode"}
        assert req.attributes["gen_ai.usage.output_tokens"] == len(
            results[req.attributes["accel.request.id"]]
        )
    names = {
        m.name
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {"gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token"} <= names


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_torch_model_example_writes_one_trace_file_per_rank(
    tmp_path: Path, load: Callable[[str], ModuleType]
) -> None:
    from otel_ext.exporters import read_spans

    paths = load("torch_model").run(world_size=2, steps=1, out_dir=tmp_path)
    assert [p.name for p in paths] == ["traces.jsonl", "traces.jsonl"]
    ids_per_rank = []
    for rank, path in enumerate(paths):
        spans = list(read_spans([path]))
        layers = [s for s in spans if s.name == "accel.layer"]
        colls = [s for s in spans if s.name == "accel.collective"]
        assert {s.attributes["accel.layer.pass"] for s in layers} == {"forward", "backward"}
        assert all(s.attributes["accel.rank"] == rank for s in layers + colls)
        ids_per_rank.append(sorted(s.attributes["accel.collective.id"] for s in colls))
    assert ids_per_rank[0] == ids_per_rank[1] and len(ids_per_rank[0]) > 0
