"""A hung or desynchronised collective, named while it hangs and after the job is killed.

Two real 4-rank gloo jobs (``tests/collective_hang_job.py``, one process per rank, under
``otel_ext.configure()`` with the collective instrumentor, ``OTEL_EXT_COLLECTIVE_HANG_S=2``)
run at once: in one the last rank stops before its 6th all-reduce (seq 5) while the others
enter it; in the other the last rank issues a gather at that seq instead. Beside the hang job
run the node agent (``otel-ext exporter``, reading the job's record folder) and a real
Prometheus with the deploy rule ``AccelCollectiveHang`` (threshold 2 s, ``for: 0s``, 1 s
scrape and evaluation). Then: the agent's ``/metrics`` shows the waiting ranks' pending
all-reduce and the stopped rank's lower seq; the rule fires naming the stopped rank; after
SIGKILL, ``otel-ext analyze`` on the jobs' ``.partial`` files names the rank that never
joined (and, in the other job, the one that issued a gather), and the agent drops the dead
processes' series. Property tests cover the record's encoding and the hang rule's
invariance to row order.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from conftest import REPO_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.cross.hangs import find_hangs
from otel_ext.analysis.table import Category, EventTable
from otel_ext.instrumentation.collective_state_record import (
    CollectiveStateRecord,
    GroupState,
    read_states,
)
from otel_ext.semconv.spans import SPAN_ACCEL_COLLECTIVE, SPAN_ACCEL_COLLECTIVE_PENDING

pytest.importorskip("torch")
from conftest import require_binary

pytestmark = pytest.mark.slow

REPO = REPO_ROOT
JOB = REPO / "tests" / "collective_hang_job.py"
RULES = REPO / "deploy" / "prometheus" / "rules" / "otel-ext-alerts.yaml"
WORLD = 4
HANG_S = 2.0
DEADLINE_S = 120.0
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _poll(what: str, fn: Callable[[], T | None], deadline: float) -> T:
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except OSError as exc:  # not listening yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@dataclass
class Job:
    mode: str
    out: Path
    records: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    lines: dict[int, str] = field(default_factory=dict)

    def start(self) -> None:
        port = _free_port()
        env = {
            **os.environ,
            "OTEL_EXT_ACTIVE_SPAN_DIR": str(self.records),
            "OTEL_EXT_COLLECTIVE_HANG_S": str(HANG_S),
            "OTEL_EXT_HOST_ID": "node0",
            "TORCH_FR_BUFFER_SIZE": "64",
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }
        for rank in range(WORLD):
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, str(JOB), str(rank), str(WORLD), str(port), str(self.out),
                     self.mode],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )  # fmt: skip

    def wait_entered(self) -> dict[int, str]:
        """Each rank's line: ``entered 5`` or ``stopped 5``."""
        for rank, proc in enumerate(self.procs):
            if rank not in self.lines:
                assert proc.stdout is not None
                self.lines[rank] = proc.stdout.readline().strip()
        return self.lines

    def files(self) -> list[str]:
        return sorted(str(p) for p in self.out.glob("rank*/traces.jsonl*"))

    def pending_flushed(self) -> bool:
        """Whether the waiting ranks' watchdog spans reached their files."""
        found = 0
        for path in self.files():
            found += SPAN_ACCEL_COLLECTIVE_PENDING.encode() in Path(path).read_bytes()
        return found >= WORLD - 1

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(10)


@dataclass
class Scene:
    hang: Job
    desync: Job
    agent_port: int
    prom_api: str
    deadline: float

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.agent_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prom_api}/query?query={urllib.parse.quote(expr)}"
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())["data"]["result"]


def _hang_rule(tmp: Path) -> Path:
    """The deploy's AccelCollectiveHang rule with a 2 s threshold and ``for: 0s``."""
    doc = yaml.safe_load(RULES.read_text())
    rule = next(
        r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "AccelCollectiveHang"
    )
    assert "> 300)" in rule["expr"]
    rule["expr"] = rule["expr"].replace("> 300)", f"> {HANG_S:g})")
    rule["for"] = "0s"
    path = tmp / "hang-rule.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "hang", "rules": [rule]}]}))
    return path


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    prometheus = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("hang")
    hang = Job("hang", tmp / "hang", tmp / "hang-records")
    desync = Job("desync", tmp / "desync", tmp / "desync-records")
    hang.start()
    desync.start()
    agent_port, prom_port = _free_port(), _free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "otel_ext.cli", "exporter", "--source", "sim", "--sim-chips",
         "1", "--interval", "0.5", "--listen", f"127.0.0.1:{agent_port}", "--active-span-dir",
         str(hang.records)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{_hang_rule(tmp)}']\n"
        "scrape_configs:\n"
        f"  - {{job_name: agent, static_configs: [{{targets: ['127.0.0.1:{agent_port}']}}]}}\n"
    )
    prom = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield Scene(
            hang, desync, agent_port, f"http://127.0.0.1:{prom_port}/api/v1",
            time.monotonic() + DEADLINE_S,
        )  # fmt: skip
    finally:
        hang.kill()
        desync.kill()
        _stop(prom)
        _stop(agent)


def _series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    ]


def test_agent_series_name_the_pending_all_reduce_and_the_stopped_ranks_lower_seq(
    scene: Scene,
) -> None:
    lines = scene.hang.wait_entered()
    assert lines == {0: "entered 5", 1: "entered 5", 2: "entered 5", 3: "stopped 5"}

    def hung() -> Any:
        text = scene.metrics()
        pending = _series(text, "accel_collective_pending_duration_seconds")
        last = _series(text, "accel_collective_last_seq")
        return (pending, last) if len(pending) == WORLD - 1 and len(last) == WORLD else None

    pending, last = _poll("the agent's pending series", hung, scene.deadline)
    by_rank = {int(labels["accel_rank"]): (labels, value) for labels, value in pending}
    assert sorted(by_rank) == [0, 1, 2]  # the stopped rank waits in nothing
    for labels, value in by_rank.values():
        assert {k: v for k, v in labels.items() if k != "accel_rank"} == {
            "accel_collective_group": "default_pg",
            "accel_collective_op": "all_reduce",
            "accel_collective_seq": "5",
            "accel_device_id": "node0/cpu",
            "accel_host_id": "node0",
        }
        assert value >= 1.0  # the agent's minimum age
    seqs = {int(labels["accel_rank"]): value for labels, value in last}
    # every rank completed seq 4; the stopped rank never reached the seq the others wait in
    assert seqs == {0: 4.0, 1: 4.0, 2: 4.0, 3: 4.0}
    assert seqs[3] < int(by_rank[0][0]["accel_collective_seq"])


def test_prometheus_rule_fires_naming_the_stopped_rank(scene: Scene) -> None:
    def firing() -> list[dict[str, Any]]:
        return scene.query('ALERTS{alertname="AccelCollectiveHang",alertstate="firing"}')

    alerts = _poll("AccelCollectiveHang firing", firing, scene.deadline)
    assert [(a["metric"]["accel_rank"], a["metric"]["accel_collective_group"]) for a in alerts] == [
        ("3", "default_pg")
    ]
    assert alerts[0]["metric"]["severity"] == "critical"


def _analyze(files: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "analyze", "--format", "json", *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_killed_job_analyze_names_the_rank_that_never_joined(scene: Scene) -> None:
    job = scene.hang
    job.wait_entered()
    _poll("the watchdog's spans in the files", job.pending_flushed, scene.deadline)
    job.kill()
    files = job.files()
    assert files and all(f.endswith(".partial") for f in files)
    report = _analyze(files)
    hangs = [f for f in report["findings"] if f["kind"] == "collective-hang"]
    assert len(hangs) == 1
    assert report["findings"][0]["kind"] == "collective-hang"  # ranked first
    ev = hangs[0]["evidence"]
    waited = ev.pop("waited_ns")
    assert ev == {
        "hang": "hang",
        "group": "default_pg",
        "seq": 5,
        "collective_id": "default_pg:5",
        "op": "all_reduce",
        "bytes": 4096,
        "missing_ranks": [3],
        "missing_last_seq": {"3": 4},
        "waiting_ranks": [0, 1, 2],
        "group_size": 4,
        "ranks_seen": [0, 1, 2, 3],
        "source": "watchdog",
    }
    assert sorted(waited) == ["0", "1", "2"]
    assert all(w >= HANG_S * 1e9 for w in waited.values())
    assert hangs[0]["target"] == "rank 3"
    assert "never joined all_reduce default_pg:5" in hangs[0]["summary"]

    # the agent forgets the killed processes (their records' locks are free)
    _poll(
        "the agent to drop the dead ranks' series",
        lambda: "accel_collective_last_seq{" not in scene.metrics(),
        scene.deadline,
    )


def test_flight_recorder_dumps_name_the_rank_that_never_joined(scene: Scene) -> None:
    # PyTorch's own ring, dumped as JSON by each rank when it stopped or entered seq 5 (the
    # recorder counts from 1: its seq 6); read without the spans
    job = scene.hang
    job.wait_entered()
    dumps = sorted(str(p) for p in (job.out / "fr").glob("fr_trace_rank_*.json"))
    assert len(dumps) == WORLD
    report = _analyze(dumps)
    assert {i["format"] for i in report["inputs"]} == {"flight-recorder"}
    (hang,) = [f for f in report["findings"] if f["kind"] == "collective-hang"]
    ev = hang["evidence"]
    assert (ev["hang"], ev["group"], ev["seq"], ev["op"], ev["bytes"]) == (
        "hang", "default_pg", 6, "all_reduce", 4096,
    )  # fmt: skip
    assert ev["missing_ranks"] == [3] and ev["waiting_ranks"] == [0, 1, 2]
    assert ev["missing_last_seq"] == {"3": 5} and ev["source"] == "flight-recorder"


def test_desync_is_named_with_the_op_the_rank_issued(scene: Scene) -> None:
    job = scene.desync
    assert job.wait_entered() == {r: "entered 5" for r in range(WORLD)}
    state = _poll(
        "the desync job's records",
        lambda: (s := read_states([job.records])) and len(s) == WORLD and s,
        scene.deadline,
    )
    ops = {s.rank: (g.op, g.seq) for s in state for g in s.groups}
    assert ops == {0: ("all_reduce", 5), 1: ("all_reduce", 5), 2: ("all_reduce", 5),
                   3: ("gather", 5)}  # fmt: skip
    _poll("the watchdog's spans in the files", lambda: job.pending_flushed(), scene.deadline)
    job.kill()
    report = _analyze(job.files())
    hangs = [f for f in report["findings"] if f["kind"] == "collective-hang"]
    assert len(hangs) == 1
    ev = hangs[0]["evidence"]
    assert (ev["hang"], ev["group"], ev["seq"], ev["op"]) == (
        "desync",
        "default_pg",
        5,
        "all_reduce",
    )
    assert ev["missing_ranks"] == [3] and ev["waiting_ranks"] == [0, 1, 2]
    assert ev["issued"] == {"3": {"op": "gather", "bytes": 4096}}
    assert "desync at all_reduce default_pg:5" in hangs[0]["summary"]


# ----------------------------------------------------------------------- property tests
_GROUPS = st.builds(
    GroupState,
    group=st.text(min_size=1, max_size=12),
    group_size=st.integers(1, 4096),
    group_rank=st.integers(0, 4095),
    device=st.one_of(st.none(), st.text(max_size=20)),
    op=st.sampled_from(["all_reduce", "all_gather", "broadcast"]),
    seq=st.integers(0, 2**40),
    bytes=st.integers(0, 2**40),
    since_ns=st.integers(0, 2**62),
    last_seq=st.integers(-1, 2**40),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_GROUPS, max_size=6), st.one_of(st.none(), st.integers(0, 10**6)))
def test_record_reads_back_what_was_published(groups: list[GroupState], rank: int | None) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        rec = CollectiveStateRecord(folder, host="h", rank=rank)
        try:
            rec.publish(groups)
            (state,) = read_states([folder])
            assert (state.rank, state.host, state.groups) == (rank, "h", groups)
            assert state.pid == os.getpid()
        finally:
            rec.close()
        assert read_states([folder]) == []


def _rows(missing: int, waiters: list[int], offset: int) -> list[dict[str, Any]]:
    members = sorted({missing, *waiters})
    rows = []
    for r in members:
        for seq in range(3):
            rows.append(dict(name=SPAN_ACCEL_COLLECTIVE, rank=r, coll_seq=seq,
                             coll_op="all_reduce", coll_group="g", coll_bytes=64,
                             coll_group_size=len(members), start_ns=offset + seq * 10,
                             end_ns=offset + seq * 10 + 5, category=int(Category.COLLECTIVE)))  # fmt: skip
    for r in waiters:
        rows.append(dict(name=SPAN_ACCEL_COLLECTIVE_PENDING, rank=r, coll_seq=3,
                         coll_op="all_reduce", coll_group="g", coll_bytes=64,
                         coll_group_size=len(members), start_ns=offset + 40,
                         end_ns=offset + 40 + 3 * 10**9, category=int(Category.OTHER)))  # fmt: skip
    return rows


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 7),
    st.sets(st.integers(0, 7), min_size=1, max_size=7),
    st.integers(0, 2**50),
    st.randoms(use_true_random=False),
)
def test_hang_verdict_is_invariant_to_row_order_and_clock_offset(
    missing: int, waiters: set[int], offset: int, rnd: Any
) -> None:
    waiters.discard(missing)
    if not waiters:
        return
    rows = _rows(missing, sorted(waiters), offset)
    reference = [(h.kind, h.missing, h.waiting, h.seq, h.last_seq)
                 for h in find_hangs(EventTable.from_rows(_rows(missing, sorted(waiters), 0)))]  # fmt: skip
    rnd.shuffle(rows)
    got = [(h.kind, h.missing, h.waiting, h.seq, h.last_seq)
           for h in find_hangs(EventTable.from_rows(rows))]  # fmt: skip
    assert got == reference == [("hang", [missing], sorted(waiters), 3, {missing: 2})]


def test_every_member_arrived_late_is_no_hang() -> None:
    # all members waited in seq 3 (a slow collective, not a hang): no finding
    rows = _rows(0, [0, 1, 2], 0)
    assert find_hangs(EventTable.from_rows(rows)) == []


# ------------------------------------------------------------- the watch, on its own
class _HookState:
    """The native hook's ``watch_state()`` answer (its tuple layout), set by the test."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def watch_state(self) -> list[tuple[Any, ...]]:
        return list(self.rows)


def test_watchdog_exports_each_hung_collective_once_and_names_the_rank_when_known(
    tmp_path: Path, span_exporter: Any
) -> None:
    from otel_ext.instrumentation.torch._collective_watch import CollectiveWatch

    provider, exporter = span_exporter
    hook, now = _HookState(), [10 * 10**9]
    ranks: list[int | None] = [None]
    record = CollectiveStateRecord(tmp_path, host="h", rank=None)
    watch = CollectiveWatch(
        hook,
        op_of=["all_reduce", "broadcast"].__getitem__,
        group_name=lambda g: "default_pg" if g == "0" else g,
        identity=lambda raw: {"accel.device.id": f"h/{raw}", "accel.rank": 2},
        record=record,
        tracer=provider.get_tracer("t"),
        tracer_provider=provider,
        hang_s=2.0,
        clock=lambda: now[0],
        rank_of=lambda: ranks[0],
    )
    try:
        # seq 7 issued at 9 s: pending 1 s, under the threshold
        hook.rows = [
            ("0", 0, 4, 1, 7, 64, 9 * 10**9, "cpu", 6),
            ("tp", -1, 2, 0, -1, 0, 0, None, 3),
        ]
        watch.tick()
        assert exporter.get_finished_spans() == ()
        (state,) = read_states([tmp_path])
        assert state.rank is None and [g.group for g in state.groups] == ["default_pg", "tp"]
        ranks[0] = 2  # init_process_group ran
        now[0] = 11 * 10**9 + 1
        watch.tick()
        watch.tick()  # the same collective is exported once
        (span,) = exporter.get_finished_spans()
        assert span.name == SPAN_ACCEL_COLLECTIVE_PENDING
        assert (span.start_time, span.end_time) == (9 * 10**9, 11 * 10**9 + 1)
        assert dict(span.attributes) == {
            "accel.collective.op": "all_reduce",
            "accel.collective.group": "default_pg",
            "accel.collective.group_size": 4,
            "accel.collective.rank": 1,
            "accel.collective.seq": 7,
            "accel.collective.id": "default_pg:7",
            "accel.collective.bytes": 64,
            "accel.device.id": "h/cpu",
            "accel.rank": 2,
        }
        (state,) = read_states([tmp_path])
        assert state.rank == 2
        assert state.groups[0] == GroupState(
            "default_pg", 4, 1, "h/cpu", "all_reduce", 7, 64, 9 * 10**9, 6
        )
        assert state.groups[1] == GroupState("tp", 2, 0, None, None, None, None, None, 3)
    finally:
        watch.stop()
    assert read_states([tmp_path]) == []
