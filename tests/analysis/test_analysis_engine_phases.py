"""The engine's phases and its one per-rank back-end interface; the inputs read again.

The analyses open no file: the serving spans, the engine steps and the operators' input sizes
are read by the loaders (:mod:`otel_ext.analysis.loaders.serving_inputs`,
:mod:`otel_ext.analysis.loaders.op_input_bytes`) through the bounded gzip reader, gzip or
plain alike, and a bad file is named. The engine runs its phases on a
:class:`~otel_ext.analysis.per_rank_backend.PerRankBackend`: any implementation gives the
same document, and every file read again goes through its ``map_files``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from otel_ext.analysis import engine
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.loaders.op_input_bytes import input_bytes_by_external_id
from otel_ext.analysis.loaders.serving_inputs import (
    engine_steps_from_otlp,
    otlp_trace_paths,
    read_serving_spans,
    serving_span_paths,
)
from otel_ext.analysis.per_rank_backend import InProcessBackend, PerRankBackend, PerRankOptions
from otel_ext.analysis.rank.per_rank import per_rank_tables
from otel_ext.analysis.table import Category, EventTable
from otel_ext.errors import InputError
from otel_ext.sim import SimConfig, run_simulation

T = TypeVar("T")


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated serving run (OTLP-JSON traces with engine steps and requests)."""
    out = tmp_path_factory.mktemp("sim")
    run_simulation(SimConfig(requests=12, seed=3), out, timeline=False)
    return out


def _gzipped(path: Path, into: Path) -> Path:
    target = into / (path.name + ".gz")
    target.write_bytes(gzip.compress(path.read_bytes()))
    return target


def test_engine_steps_and_spans_read_alike_from_gzip_and_plain(
    sim_run: Path, tmp_path: Path
) -> None:
    plain = sim_run / "traces.jsonl"
    packed = _gzipped(plain, tmp_path)
    steps = engine_steps_from_otlp([plain])
    assert len(steps) > 10
    assert engine_steps_from_otlp([packed]) == steps
    spans = read_serving_spans([plain])
    assert spans and read_serving_spans([packed]) == spans


def test_a_gzip_bomb_is_refused_and_the_file_named(
    sim_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = _gzipped(sim_run / "traces.jsonl", tmp_path)
    monkeypatch.setenv("OTEL_EXT_MAX_INFLATED_BYTES", "1000")
    for read in (engine_steps_from_otlp, read_serving_spans):
        with pytest.raises(InputError, match="gzip bomb") as err:
            read([packed])
        assert err.value.path == str(packed)


def test_a_step_line_past_the_record_limit_names_file_and_line(
    sim_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXT_MAX_RECORD_BYTES", "64")
    with pytest.raises(InputError, match="OTEL_EXT_MAX_RECORD_BYTES") as err:
        engine_steps_from_otlp([sim_run / "traces.jsonl"])
    assert err.value.path == str(sim_run / "traces.jsonl")
    assert err.value.record == "line 1"


def test_operator_input_sizes_from_gzip_and_bad_files_named(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {"cat": "cpu_op", "args": {"External id": 5, "Input Dims": [[8]], "Input type": ["c10::BFloat16"]}},
            {"cat": "kernel", "args": {"External id": 5}},
        ]
    }  # fmt: skip
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert input_bytes_by_external_id(f) == {(str(f), 5): 16}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not JSON") as err:
        input_bytes_by_external_id(bad)
    assert err.value.path == str(bad)
    with pytest.raises(InputError, match="cannot read") as err:
        input_bytes_by_external_id(tmp_path / "missing.json")
    assert err.value.path == str(tmp_path / "missing.json")


def test_input_records_choose_the_files_read_again() -> None:
    inputs = [
        {"path": "a.jsonl", "format": "otlp-traces", "status": "loaded"},
        {"path": "b.json", "format": "jaeger", "status": "loaded"},
        {"path": "c.jsonl", "format": "otlp-traces", "status": "skipped"},
        {"path": "d.json", "format": "kineto", "status": "loaded"},
    ]
    assert serving_span_paths(inputs) == ["a.jsonl", "b.json"]
    assert otlp_trace_paths(inputs) == ["a.jsonl"]


def _rows() -> EventTable:
    rows = [
        dict(start_ns=k * 1000 + (300 if r == 1 else 0) + 40_000 * r, end_ns=k * 1000 + 600 + 40_000 * r,
             rank=r, device=f"h0/chip{r}", stream=1, category=Category.KERNEL_COMM, coll_seq=k,
             coll_group="tp")
        for k in range(12)
        for r in range(2)
    ]  # fmt: skip
    return EventTable.from_rows(rows)


def test_in_process_per_rank_phase_is_the_per_rank_passes() -> None:
    table = _rows()
    out = InProcessBackend().per_rank(table, PerRankOptions())
    direct = per_rank_tables(table, positions=np.arange(len(table), dtype=np.int64))
    assert out.ranks.events == direct.events == len(table)
    assert out.keys.tolist() == direct.reduced_positions[0].tolist()
    assert len(out.reduced) == len(direct.reduced[0])
    assert out.kept is None and not InProcessBackend().holds()


class _CountingBackend(InProcessBackend):
    """The in-process back-end, counting the files it is asked to read again."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def map_files(self, fn: Callable[[list[str]], list[T]], paths: list[str]) -> list[T]:
        self.read.extend(paths)
        return super().map_files(fn, paths)


def test_any_back_end_gives_the_same_document_and_reads_files_through_it(sim_run: Path) -> None:
    paths = [sim_run / "traces.jsonl", sim_run / "metrics.jsonl"]
    backend = _CountingBackend()
    seam: PerRankBackend = backend
    with_seam = engine._analyze(paths, seam, PerRankOptions(workers=1), engine.CrossRankOptions())
    assert engine.to_json(dict(with_seam)) == engine.to_json(engine.analyze(paths, workers=1))
    # the engine steps (and the serving spans, when the rows name an engine's requests)
    # were read through the back-end, not by a pass
    assert str(sim_run / "traces.jsonl") in backend.read
    assert with_seam["requests"]["accounting"] is not None


def test_loaded_rows_give_the_document_of_their_files(sim_run: Path) -> None:
    paths = [sim_run / "traces.jsonl", sim_run / "metrics.jsonl"]
    loaded = load_paths(paths, workers=1)
    doc = engine.analyze(loaded)
    assert doc["run"] == engine.analyze(paths, workers=1)["run"]
