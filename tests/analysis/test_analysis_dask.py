"""The analysis on a real Dask cluster (``--scheduler``) gives the in-process report.

One ``distributed.LocalCluster`` (2 worker processes, 1 thread each) serves most tests; the
CLI's ``local:2`` starts its own; one test runs ``dask scheduler`` and ``dask worker`` as
separate processes. The report has no timing fields (load times go to stderr only), so the
JSON texts are compared whole.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import require

from otel_ext.analysis.engine import analyze, to_json
from otel_ext.analysis.rank.per_rank import HELD_CATEGORIES
from otel_ext.analysis.scaleout import dask_cluster as dask_backend
from otel_ext.analysis.table import Category
from otel_ext.cli import main
from otel_ext.errors import ConfigError, InputError, OtelExtError

try:
    import distributed
except ImportError:  # the dask extra is not installed
    distributed = None

needs_dask = pytest.mark.integration


def _require_dask() -> None:
    require(distributed is not None, f"dask.distributed ({dask_backend.INSTALL_HINT})")


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    """The scheduler address of a real LocalCluster: 2 worker processes, 1 thread each."""
    _require_dask()
    import logging

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    )
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated run: OTLP-JSON spans and metrics, a timeline and ground truth."""
    out = tmp_path_factory.mktemp("dask-sim") / "run"
    args = ["simulate", "--hosts", "2", "--chips", "2", "--requests", "20", "--seed", "3",
            "--out", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    return out


def _same_report(paths: list[Path], address: str, **options: Any) -> dict[str, Any]:
    local = analyze(paths, workers=1, scheduler="", **options)
    remote = analyze(paths, scheduler=address, **options)
    assert to_json(remote) == to_json(local)
    return local


@needs_dask
def test_dlrm_8_ranks_same_report(shared_traces: Path, address: str) -> None:
    doc = _same_report([shared_traces / "param_dlrm_v100_8rank"], address)
    assert len(doc["ranks"]) == 8
    assert doc["collectives"]["count"] > 0


@needs_dask
def test_two_rank_same_report(shared_traces: Path, address: str) -> None:
    doc = _same_report([shared_traces / "two_rank"], address)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]


@needs_dask
def test_simulated_run_same_report(simulated: Path, address: str) -> None:
    doc = _same_report([simulated], address)
    # the passes that read files again ran on the workers: engine steps of the span file
    assert doc["requests"]["accounting"]["steps"] > 0
    assert doc["run"]["metric_points"] > 0
    assert {Path(s["path"]).name for s in doc["skipped"]} == {"timeline.json", "truth.json"}


@needs_dask
def test_simulated_requests_read_the_held_rows_busy_time(simulated: Path, address: str) -> None:
    """An OTLP run with requests: the partitions hold their device rows and send each
    device's busy intervals (their union per rank), which request latency reads after the
    clock correction; the report is the in-process one, device busy times included."""
    paths = [simulated]
    with dask_backend.connect(address) as cluster:
        phase = cluster.per_rank_phase(paths, steps="complete", one_run=False)
        assert phase.holds and phase.ranks.device_busy
        held = sum(len(s) for spans in phase.ranks.device_busy.values() for _, s, _ in spans)
        assert 0 < held <= phase.ranks.held_rows  # merged: no more intervals than rows
        doc = analyze(paths, scheduler=cluster)
    assert to_json(doc) == to_json(analyze(paths, workers=1, scheduler=""))
    assert any(r.get("ttft_devices_ns") for r in doc["requests"]["requests"])


@needs_dask
def test_simulated_rows_travel_packed(simulated: Path, address: str) -> None:
    """An OTLP run's reduced rows (nearly every row of it) and metric points travel packed
    (:class:`~otel_ext.analysis.scaleout.packed_rows.PackedTable`): the client unpacks the rows a
    partition computed, every category counted, the per-rank round in well under half the
    bytes it weighs unpacked; the report is the in-process one."""
    paths = [simulated]
    with dask_backend.connect(address) as cluster:
        cluster.measure = True
        phase = cluster.per_rank_phase(paths, steps="complete", one_run=False)
        by = dict(cluster.received_by_category)
        unpacked = cluster.unpacked_round_bytes
        packed = cluster.received_by_round["per-rank"]
        doc = analyze(paths, scheduler=cluster)
    assert to_json(doc) == to_json(analyze(paths, workers=1, scheduler=""))
    cats, counts = np.unique(phase.reduced["category"], return_counts=True)
    for c, n in zip(cats.tolist(), counts.tolist()):
        assert by[Category(c).name.lower()][0] == n
    assert by["layer"][0] > 0 and by["collective"][0] > 0 and by["link_transfer"][0] > 0
    assert 0 < packed < 0.45 * unpacked  # the per-rank round's answers, packed and not
    assert by["metric points (of the summaries)"][0] > 0


def _shifted_copy(folder: Path, out: Path, ranks: set[int], shift_us: int) -> Path:
    """The profiler files of ``folder`` with the ``workerN`` files of ``ranks`` stamped
    ``shift_us`` later (one host whose clock is off)."""
    out.mkdir()
    for f in sorted(folder.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        if int(f.name.split("_")[0].removeprefix("worker")) in ranks:
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += shift_us
        (out / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


@needs_dask
def test_dlrm_with_a_host_clock_off_same_report(
    shared_traces: Path, address: str, tmp_path: Path
) -> None:
    """Ranks 4-7 on a clock 3.7 s ahead: the alignment applies the offset, and the critical
    path walked on the workers (whose runtime calls never travel) moves them by it as the
    aligned rows the client holds were moved."""
    folder = _shifted_copy(
        shared_traces / "param_dlrm_v100_8rank", tmp_path / "dlrm", {4, 5, 6, 7}, 3_700_000
    )
    doc = _same_report([folder], address)
    status = {r["rank"]: r["clock_status"] for r in doc["ranks"]}
    assert {status[r] for r in (4, 5, 6, 7)} == {"applied"}
    assert doc["critical_path"]["segments_total"] > 0
    # the run as recorded is 3.7 s longer than the critical path; aligned, it is not
    assert doc["critical_path"]["length_ns"] < 3_700_000_000


def _loaded_bytes(paths: list[Path]) -> tuple[int, int]:
    """What the loading-only backend sent the client (each file's pickled load result), and
    the set's events."""
    import pickle

    from otel_ext.analysis.loaders import load_file, load_paths

    loaded = load_paths(paths, workers=1)
    sent = sum(len(pickle.dumps(load_file(i["path"]), protocol=5)) for i in loaded.inputs)
    return sent, len(loaded.table)


@needs_dask
@pytest.mark.parametrize("folder", ["param_dlrm_v100_8rank", "two_rank"])
def test_only_compact_tables_travel(shared_traces: Path, address: str, folder: str) -> None:
    """The files stay on the workers: the client gets sketches (two rows per file and rank),
    the per-rank tables and the rows the cross-rank passes read, never a file's table."""
    paths = [shared_traces / folder]
    sent_before, events = _loaded_bytes(paths)
    with dask_backend.connect(address) as cluster:
        cluster.measure = True
        phase = cluster.per_rank_phase(paths, steps="complete", one_run=False)
        received = cluster.received_bytes
        doc = analyze(paths, scheduler=cluster)
    assert to_json(doc) == to_json(analyze(paths, workers=1, scheduler=""))
    n_files = len(phase.load.inputs)
    ranks = len(doc["ranks"])
    assert len(phase.load.table) <= 2 * n_files * max(1, ranks)  # the sketches, not the events
    assert phase.ranks.events == doc["run"]["events"] <= events
    assert len(phase.reduced) < 0.6 * phase.ranks.events  # host operators stayed behind
    # the device rows stayed too, but each file's and rank's first and last
    assert phase.holds and phase.ranks.held_rows > 0
    assert not phase.ranks.device_busy  # no requests: no busy intervals travel
    device = np.isin(phase.reduced["category"], [int(c) for c in HELD_CATEGORIES])
    pairs = np.stack([phase.reduced["source"], phase.reduced["rank"]], 1)[device]
    assert np.unique(pairs.astype(np.int64), axis=0, return_counts=True)[1].max(initial=0) <= 2
    assert [r.as_dict() for r in phase.ranks.temporal] == doc["temporal_breakdown"]
    assert 0 < received < 0.65 * sent_before


@needs_dask
def test_only_the_partitions_the_path_reaches_send_pieces(
    shared_traces: Path, address: str
) -> None:
    """Separate captures analysed together (DLRM, two_rank, v100_train: no collective joins
    them): the critical path starts in one run and never leaves it, so only the pieces of
    that run's partitions travel; the report is the in-process one."""
    paths = [shared_traces / f for f in ("param_dlrm_v100_8rank", "two_rank", "v100_train")]
    with dask_backend.connect(address) as cluster:
        doc = analyze(paths, scheduler=cluster)
        walked, fetched = cluster.walked_partitions, cluster.pieces_fetched
    assert to_json(doc) == to_json(analyze(paths, workers=1, scheduler=""))
    assert len(doc["runs"]) == 3
    on_path = {s["rank"] for s in doc["critical_path"]["segments"]}
    run_of = {r["rank"]: r["run"] for r in doc["ranks"]}
    assert len({run_of[r] for r in on_path}) == 1
    assert walked == 11 and 1 <= fetched < walked  # one partition per file


@needs_dask
def test_a_repair_fetches_the_held_device_rows(
    shared_traces: Path, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the alignment calls for the event-level causality repair, which reads every
    device row, the client fetches the rows the partitions held and aligns again with them:
    the in-process report. No real set calls for the repair, so this run is told it does."""
    from otel_ext.analysis import engine

    real = engine.align_ranks
    calls: list[tuple[bool, int]] = []

    def told(table: Any, match: Any, *, repair: bool = True, **options: Any) -> Any:
        alignment = real(table, match, repair=repair, **options)
        calls.append((repair, len(table)))
        if not repair:
            alignment.repair_skipped = True
        return alignment

    paths = [shared_traces / "param_dlrm_v100_8rank"]
    monkeypatch.setattr(engine, "align_ranks", told)
    with dask_backend.connect(address) as cluster:
        remote = analyze(paths, scheduler=cluster)
    monkeypatch.undo()
    assert [repair for repair, _ in calls] == [False, True]
    assert calls[1][1] > calls[0][1]  # aligned again with the held rows back
    assert to_json(remote) == to_json(analyze(paths, workers=1, scheduler=""))


@needs_dask
@pytest.mark.parametrize("steps", ["x", "5-9"])
def test_bad_step_selection_is_the_same_error(
    shared_traces: Path, address: str, steps: str
) -> None:
    """A malformed selection, or steps no file has: decided on the client, as in process."""
    paths = [shared_traces / "two_rank"]
    with pytest.raises(OtelExtError) as here:
        analyze(paths, workers=1, scheduler="", steps=steps)
    with pytest.raises(OtelExtError) as there:
        analyze(paths, scheduler=address, steps=steps)
    assert str(there.value) == str(here.value)
    assert str(here.value).startswith(f"--steps {steps}:")


@needs_dask
def test_selected_steps_same_report(shared_traces: Path, address: str) -> None:
    doc = _same_report([shared_traces / "two_rank"], address, steps="all")
    assert doc["run"]["steps"]["selection"] == "all"


@needs_dask
def test_ranks_split_across_files_same_report(
    simulated: Path, address: str, tmp_path: Path
) -> None:
    """An OTLP export rotated into several files, each holding rows of every rank: each
    partition of ranks takes its rows from every file (where the file is kept), and each
    file's reduced rows are put back in its own order."""
    folder = tmp_path / "rotated"
    folder.mkdir()
    halves: list[list[str]] = [[], []]
    for line in (simulated / "traces.jsonl").read_text().splitlines():
        for k in range(2):  # every export's spans dealt alternately to the two files
            request = json.loads(line)
            for rs in request["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    ss["spans"] = ss["spans"][k::2]
            halves[k].append(json.dumps(request))
    for k in range(2):
        (folder / f"traces-{k}.jsonl").write_text("\n".join(halves[k]) + "\n")
    shutil.copy(simulated / "metrics.jsonl", folder / "metrics.jsonl")
    with dask_backend.connect(address) as cluster:
        phase = cluster.per_rank_phase([folder], steps="complete", one_run=False)
        doc = analyze([folder], scheduler=cluster)
    assert to_json(doc) == to_json(analyze([folder], workers=1, scheduler=""))
    assert len(doc["ranks"]) == 4
    spans = [i for i in doc["inputs"] if i["format"] == "otlp-traces"]
    assert len(spans) == 2 and all(i["events"] > 0 for i in spans)
    from otel_ext.analysis.loaders import load_file

    ranks = [set(load_file(i["path"]).table["rank"].tolist()) - {-1} for i in spans]
    assert ranks[0] & ranks[1]  # ranks whose rows are in both files
    assert len(phase.reduced) <= phase.ranks.events


def _bad_folder(shared_traces: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(shared_traces / "two_rank" / "sampled_rank-0.json.gz", folder / "a.json.gz")
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}] * 3
    events.append({"ph": "X", "cat": "kernel", "name": "k", "ts": "late", "dur": 2})
    (folder / "b.json").write_text(json.dumps({"traceEvents": events}))
    with gzip.open(folder / "c.json.gz", "wb") as f:  # a truncated gzip file
        f.write(b'{"traceEvents": []}')
    (folder / "c.json.gz").write_bytes((folder / "c.json.gz").read_bytes()[:-6])
    return folder


@needs_dask
def test_bad_record_on_a_worker_is_the_same_error(
    shared_traces: Path, address: str, tmp_path: Path
) -> None:
    folder = _bad_folder(shared_traces, tmp_path)
    with pytest.raises(InputError) as here:
        analyze([folder], workers=1, scheduler="")
    with pytest.raises(InputError) as there:
        analyze([folder], scheduler=address)
    assert (there.value.path, there.value.record, there.value.message) == (
        here.value.path,
        here.value.record,
        here.value.message,
    )
    assert there.value.path == str(folder / "b.json")
    assert there.value.record == "event 3"


@needs_dask
def test_keep_going_skips_the_same(shared_traces: Path, address: str, tmp_path: Path) -> None:
    folder = _bad_folder(shared_traces, tmp_path)
    doc = _same_report([folder], address, keep_going=True)
    bad = [(Path(s["path"]).name, s["record"]) for s in doc["skipped"]]
    assert bad == [("b.json", "event 3"), ("c.json.gz", "file")]
    assert [(i["format"], i["status"]) for i in doc["inputs"]] == [
        ("kineto", "loaded"),
        ("kineto", "loaded"),
        ("error", "left out"),
    ]


@needs_dask
def test_cli_local_cluster_and_environment_default(
    simulated: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["analyze", str(simulated), "--format", "json", "--quiet", "--out"]
    assert main([*base, str(tmp_path / "local.json"), "--scheduler", ""]) == 0
    assert main([*base, str(tmp_path / "dask.json"), "--scheduler", "local:2"]) == 0
    assert (tmp_path / "dask.json").read_text() == (tmp_path / "local.json").read_text()
    # no flag: OTEL_EXT_DASK_SCHEDULER decides
    used: list[str] = []
    real = dask_backend.connect

    def spy(where: str) -> Any:
        used.append(where)
        return real(where)

    monkeypatch.setattr(dask_backend, "connect", spy)
    monkeypatch.setenv("OTEL_EXT_DASK_SCHEDULER", "local:1")
    assert main([*base, str(tmp_path / "env.json")]) == 0
    assert used == ["local:1"]
    assert (tmp_path / "env.json").read_text() == (tmp_path / "local.json").read_text()
    assert "Traceback" not in capsys.readouterr().err


def _wait_for(path: Path, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() or not path.read_text().strip():
        assert proc.poll() is None, "dask scheduler exited"
        assert time.monotonic() < deadline, f"no {path.name} after {seconds} s"
        time.sleep(0.1)


@pytest.mark.slow
@needs_dask
def test_separate_scheduler_and_worker_processes(shared_traces: Path, tmp_path: Path) -> None:
    _require_dask()
    dask_cli = Path(sys.executable).with_name("dask")
    require(dask_cli.is_file(), f"the dask command next to {sys.executable}")
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sched_cmd = [str(dask_cli), "scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--no-dashboard", "--scheduler-file", str(sched_file)]  # fmt: skip
        scheduler = subprocess.Popen(
            sched_cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        procs.append(scheduler)
        _wait_for(sched_file, scheduler, 60)
        addr = json.loads(sched_file.read_text())["address"]
        assert addr.startswith("tcp://127.0.0.1:")
        worker_cmd = [str(dask_cli), "worker", addr, "--nworkers", "1", "--nthreads", "1",
                      "--no-dashboard", "--host", "127.0.0.1"]  # fmt: skip
        worker = subprocess.Popen(
            worker_cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        procs.append(worker)
        folder = shared_traces / "two_rank"
        cmd = [sys.executable, "-m", "otel_ext.cli", "analyze", str(folder), "--format", "json"]
        here = subprocess.run([*cmd, "--scheduler", ""], capture_output=True, timeout=120)
        there = subprocess.run([*cmd, "--scheduler", addr], capture_output=True, timeout=120)
        assert here.returncode == 0, here.stderr.decode()
        assert there.returncode == 0, there.stderr.decode()
        assert there.stdout == here.stdout
        by_file = subprocess.run(
            [*cmd, "--scheduler", str(sched_file)], capture_output=True, timeout=120
        )
        assert by_file.returncode == 0, by_file.stderr.decode()
        assert by_file.stdout == here.stdout
        # a worker that cannot import otel-ext joins: one line naming the cluster, status 1
        block = tmp_path / "no_otel_ext.py"
        block.write_text("import sys\nsys.modules['otel_ext'] = None\n")
        procs.append(subprocess.Popen([*worker_cmd, "--preload", str(block)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        with distributed.Client(addr, timeout="60s") as client:
            client.wait_for_workers(2, timeout=60)
        broken = subprocess.run([*cmd, "--scheduler", addr], capture_output=True, timeout=120)
        err = broken.stderr.decode()
        assert broken.returncode == 1, err
        assert f"a Dask worker of {addr} cannot import otel_ext" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return rc, lines[0]


def test_missing_dask_is_one_line_with_the_install_command(
    shared_traces: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    rc, line = _one_line_error(
        ["analyze", str(shared_traces / "two_rank"), "--scheduler", "local:2"], capsys
    )
    assert rc == 2
    assert line.startswith("otel-ext analyze: error: ")
    assert "pip install 'otel-ext[dask]'" in line
    with pytest.raises(dask_backend.DaskUnavailableError, match=r"otel-ext\[dask\]"):
        analyze([shared_traces / "two_rank"], scheduler="local:2")


@pytest.mark.parametrize("bad", ["local:0", "local:x", "8786", "http://host:8786"])
def test_malformed_address_is_a_usage_error(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, line = _one_line_error(["analyze", str(tmp_path), "--scheduler", bad], capsys)
    assert rc == 2
    assert "--scheduler" in line
    with pytest.raises(ConfigError):
        dask_backend.parse_scheduler(bad)


@pytest.mark.parametrize(
    ("text", "kind", "target", "workers"),
    [
        ("local:3", "local", "", 3),
        (" tcp://10.1.2.3:8786 ", "remote", "tcp://10.1.2.3:8786", 0),
        ("tls://sched.example:8786", "remote", "tls://sched.example:8786", 0),
        ("/shared/scheduler.json", "file", "/shared/scheduler.json", 0),
    ],
)
def test_parse_scheduler(text: str, kind: str, target: str, workers: int) -> None:
    assert dask_backend.parse_scheduler(text) == dask_backend.SchedulerAddress(
        kind, target, workers
    )


@needs_dask
def test_unreachable_scheduler_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _require_dask()
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(dask_backend, "CONNECT_TIMEOUT_S", 1.0)
    (tmp_path / "r.json").write_text('{"traceEvents": []}')
    rc, line = _one_line_error(
        ["analyze", str(tmp_path), "--scheduler", f"tcp://127.0.0.1:{port}"], capsys
    )
    assert rc == 1
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in line


def _exit_worker(paths: list[str]) -> list[str]:
    """A per-file job that kills its worker process (as the kernel's OOM killer would)."""
    os._exit(1)


@needs_dask
def test_a_worker_dying_is_one_error_naming_the_cluster() -> None:
    _require_dask()
    import logging

    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            silence_logs=logging.CRITICAL,
        )
    try:
        with (
            dask_backend.connect(str(cluster.scheduler_address)) as dc,
            pytest.raises(OtelExtError, match=r"a Dask worker of tcp://.* died running"),
        ):
            dc.map_files(_exit_worker, ["rank0.json"])
    finally:
        cluster.close()
