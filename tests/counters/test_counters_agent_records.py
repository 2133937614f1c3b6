"""Active-span records: layout, writer, reader, coverage, lifetime and permissions."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from otel_ext.counters import (
    ActiveSpanRegistry,
    BuiltinSimModel,
    CounterBridge,
    SharedActiveSpanReader,
    SimulatedSource,
    best_span,
    running_time,
)
from otel_ext.instrumentation.active_span import (
    ActiveSpanPublisher,
    ActiveSpanPublishingProcessor,
)
from otel_ext.instrumentation.active_span_record import (
    RECORD_BYTES,
    RING_SLOTS,
    W_SEQ,
    ActiveSpanRecord,
    RecordEntry,
    decode_record,
    parse_record_name,
    prepare_directory,
    record_directory,
    remove_stale_records,
)


def test_record_round_trip_and_layout(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("node/chip7", tmp_path)
    trace = (1 << 127) | 0xFEED
    rec.started(trace, 0xA1, 100)
    rec.started(trace, 0xA2, 150)
    rec.ended(trace, 0xA2, 150, 180)
    data = rec.path.read_bytes()
    assert len(data) == RECORD_BYTES == 11_136
    snap = decode_record(data)
    assert snap is not None
    assert (snap.device_id, snap.pid, snap.evicted_end_ns, snap.dropped) == (
        "node/chip7",
        os.getpid(),
        0,
        0,
    )
    assert snap.open == [RecordEntry(trace, 0xA1, 100, 0)]
    assert snap.ring == [RecordEntry(trace, 0xA2, 150, 180)]
    assert parse_record_name(rec.path.name) == ("node/chip7", os.getpid())
    rec.close()
    assert not rec.path.exists()
    rec.started(trace, 0xA3, 200)  # after close: ignored, never raises


def test_a_record_being_written_is_not_decoded(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    data = bytearray(rec.path.read_bytes())
    data[W_SEQ * 8] |= 1  # the writer is in the middle of an update
    assert decode_record(bytes(data)) is None
    assert decode_record(b"\0" * RECORD_BYTES) is None  # no magic
    assert decode_record(b"short") is None
    rec.close()


def test_impossible_entries_are_skipped(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    rec.ended(0, 1, 10, 20)  # no trace id
    rec.ended(5, 2, 30, 25)  # ends before it starts
    rec.ended(5, 3, 30, 40)
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None and [e.span_id for e in snap.ring] == [3]
    rec.close()


def test_ring_wrap_records_what_was_evicted(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    for i in range(1, RING_SLOTS + 11):
        rec.ended(1, i, i * 10, i * 10 + 5)
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None
    assert len(snap.ring) == RING_SLOTS
    assert [e.span_id for e in snap.ring] == list(range(11, RING_SLOTS + 11))
    assert snap.evicted_end_ns == 10 * 10 + 5  # span 10 was the last overwritten
    rec.close()


def test_open_slots_are_bounded_and_overflow_is_counted(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    for i in range(1, 21):
        rec.started(1, i, i)
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None and len(snap.open) == 16 and snap.dropped == 4
    for i in range(1, 21):
        rec.ended(1, i, i, 100 + i)  # ends of unopened spans still reach the ring
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None and snap.open == [] and len(snap.ring) == 20
    rec.close()


def test_threads_of_one_process_never_corrupt_a_record(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    per_thread = 3000

    def work(base: int) -> None:
        for i in range(per_thread):
            sid = base + i + 1
            rec.started(7, sid, sid)
            rec.ended(7, sid, sid, sid + 1)

    threads = [threading.Thread(target=work, args=(k * 1_000_000,)) for k in range(4)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None
    # whether threads met inside a write depends on the scheduler (counted, not asserted:
    # the next test takes the queued path for certain)
    assert snap.open == [] and snap.dropped == 0  # nothing left queued, nothing out of order
    assert len(snap.ring) == RING_SLOTS and snap.ring[-1].span_id > 0
    assert all(e.end_ns == e.span_id + 1 for e in snap.ring)
    rec.close()


def test_an_update_that_finds_the_record_busy_is_queued_and_applied_by_the_writer(
    tmp_path: Path,
) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    rec._token.pop()  # as if another thread of this process were writing the record
    other = threading.Thread(target=lambda: (rec.started(7, 1, 10), rec.ended(7, 1, 10, 20)))
    other.start()
    other.join()
    assert rec.contended == 2  # both updates queued, neither waited
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None and snap.ring == [] and snap.open == []  # not applied yet
    rec._token.append(True)  # the "writer" lets go; its next update applies the queue first
    rec.started(7, 2, 30)
    snap = decode_record(rec.path.read_bytes())
    assert snap is not None
    assert [(e.span_id, e.start_ns, e.end_ns) for e in snap.ring] == [(1, 10, 20)]
    assert [(e.span_id, e.start_ns) for e in snap.open] == [(2, 30)]
    rec.close()


def _running_reference(entries: list[RecordEntry], t0: int, t1: int) -> dict[int, int]:
    """Nanosecond by nanosecond: who runs (latest start, then first end, then latest listed)."""
    out: dict[int, int] = {}
    for t in range(t0, t1):
        best = None
        for order, e in enumerate(entries):
            end = min(e.end_ns if e.end_ns else t1, t1)
            key = (e.start_ns, -end, order)
            if e.start_ns <= t < end and (best is None or key >= best[0]):
                best = (key, e.span_id)
        if best is not None:
            out[best[1]] = out.get(best[1], 0) + 1
    return out


entries_strategy = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 40), st.booleans()), max_size=8
).map(
    lambda items: [
        RecordEntry(1, i + 1, start, 0 if still_open else start + length + 1)
        for i, (start, length, still_open) in enumerate(items)
    ]
)


@settings(max_examples=300, deadline=None)
@given(entries_strategy, st.integers(0, 50), st.integers(1, 60))
def test_running_time_matches_a_per_nanosecond_reference(entries, t0, width) -> None:
    t1 = t0 + width
    assert running_time(entries, t0, t1) == _running_reference(entries, t0, t1)


@settings(max_examples=100, deadline=None)
@given(entries_strategy, st.integers(-1000, 1000))
def test_running_time_is_invariant_to_a_clock_shift(entries, shift) -> None:
    base = 10_000
    shifted = [
        RecordEntry(
            e.trace_id, e.span_id, e.start_ns + base + shift, e.end_ns and e.end_ns + base + shift
        )
        for e in entries
    ]
    plain = [
        RecordEntry(e.trace_id, e.span_id, e.start_ns + base, e.end_ns and e.end_ns + base)
        for e in entries
    ]
    assert running_time(shifted, base + shift, base + shift + 80) == running_time(
        plain, base, base + 80
    )


def test_the_span_that_ran_most_wins_not_the_one_active_at_the_sampling_instant(
    tmp_path: Path,
) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    rec.started(0xA, 1, 0)  # the step, open throughout
    rec.started(0xA, 2, 0)  # a long collective: 0-700
    rec.ended(0xA, 2, 0, 700)
    rec.started(0xA, 3, 900)  # running at the sampling instant 1000, for 100 ns only
    reader = SharedActiveSpanReader(tmp_path)
    ref = reader.covering("d", 0, 1000)
    assert ref is not None and ref.span_id == format(2, "016x")
    assert ref.trace_id == format(0xA, "032x")
    assert reader.covering("d", 700, 1000).span_id == format(1, "016x")  # 200 vs 100
    assert reader.covering("other", 0, 1000) is None
    rec.close()
    reader.close()


def test_several_processes_on_one_device_each_scored_on_its_own(tmp_path: Path) -> None:
    a = ActiveSpanRecord("d", tmp_path)
    b = ActiveSpanRecord("d", tmp_path)
    a.ended(0xA, 1, 0, 400)
    b.ended(0xB, 2, 300, 1000)
    reader = SharedActiveSpanReader(tmp_path)
    assert reader.covering("d", 0, 1000).trace_id == format(0xB, "032x")
    assert len(reader.snapshots("d")) == 2
    a.close()
    b.close()
    assert reader.snapshots("d") == []
    reader.close()


def test_best_span_only_trusts_the_ring_after_its_evictions() -> None:
    from otel_ext.instrumentation.active_span_record import RecordSnapshot

    # the ring lost spans ending before 500: the open span 9 was not running 0-500 for sure
    snap = RecordSnapshot(
        "d", "", 1, 0, 500, 0, [RecordEntry(1, 9, 0, 0)], [RecordEntry(1, 5, 520, 900)]
    )
    assert best_span([snap], 0, 1000).span_id == 5  # 380 ns vs 9's 120 ns after 500


def test_records_match_the_agent_device_by_uuid_or_by_index(tmp_path: Path) -> None:
    uuid = "GPU-5f3c0d2e-1111-2222-3333-444455556666"
    in_container = ActiveSpanRecord("node1/cuda:0", tmp_path, uuid=uuid)  # host GPU 3
    bare_metal = ActiveSpanRecord("node1/chip1", tmp_path)  # no UUID: by index
    in_container.ended(0xA, 1, 0, 100)
    bare_metal.ended(0xB, 2, 0, 100)
    snap = decode_record(in_container.path.read_bytes())
    assert snap is not None and snap.device_uuid == uuid
    reader = SharedActiveSpanReader(tmp_path)
    reader.device_uuids.update({"node1/gpu3": uuid, "node1/gpu0": "GPU-other"})
    assert reader.covering("node1/gpu3", 0, 100).trace_id == format(0xA, "032x")
    assert reader.covering("node1/gpu0", 0, 100) is None  # its UUID is not the record's
    assert reader.covering("node1/gpu1", 0, 100).trace_id == format(0xB, "032x")
    assert reader.covering("node2/gpu1", 0, 100) is None  # another host
    in_container.close()
    bare_metal.close()
    reader.close()


def test_folders_made_after_the_reader_started_are_discovered(tmp_path: Path) -> None:
    later = tmp_path / "later"
    reader = SharedActiveSpanReader(
        tmp_path / "first", reap_interval_s=0, discover=lambda: [later] if later.exists() else []
    )
    assert reader.covering("d", 0, 10) is None
    later.mkdir()
    rec = ActiveSpanRecord("d", later)
    rec.ended(0xA, 1, 0, 10)
    assert reader.covering("d", 0, 11).span_id == format(1, "016x")
    rec.close()
    reader.close()


def test_records_of_killed_processes_are_reaped(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "from otel_ext.instrumentation.active_span_record import ActiveSpanRecord\n"
        "rec = ActiveSpanRecord('d', sys.argv[1]); rec.started(1, 2, 3)\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    reader = SharedActiveSpanReader(tmp_path, reap_interval_s=0)
    assert reader.covering("d", 0, 10) is not None  # the live writer's record is kept
    assert len(list(tmp_path.iterdir())) == 1
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert len(list(tmp_path.iterdir())) == 1  # nobody cleaned up
    assert reader.covering("d", 10, 20) is None
    assert list(tmp_path.iterdir()) == [] and reader.reaped == 1
    reader.close()


def test_a_starting_workload_removes_records_of_killed_workloads(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "from otel_ext.instrumentation.active_span_record import ActiveSpanRecord\n"
        "rec = ActiveSpanRecord('d', sys.argv[1])\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    live = ActiveSpanRecord("d", tmp_path)
    assert remove_stale_records(tmp_path) == 0  # both writers alive
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    publisher = ActiveSpanPublisher(tmp_path)
    mine = publisher.record("e")
    assert mine is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.path.name, mine.path.name])
    publisher.close()
    live.close()


def test_permissions_and_unsafe_folders(tmp_path: Path) -> None:
    folder = prepare_directory(tmp_path / "new")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750
    rec = ActiveSpanRecord("d", folder)
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o640
    rec.close()
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    with pytest.raises(OSError, match="world-writable"):
        prepare_directory(open_folder)
    assert str(record_directory(env={"XDG_RUNTIME_DIR": "/run/user/7"})) == "/run/user/7/otel-ext"
    assert str(record_directory(env={})) == f"/tmp/otel-ext-{os.getuid()}"


def test_publishing_never_raises_when_the_folder_is_unusable(tmp_path: Path, caplog) -> None:
    bad = tmp_path / "open"
    bad.mkdir()
    bad.chmod(0o777)
    provider = TracerProvider()
    processor = ActiveSpanPublishingProcessor(ActiveSpanPublisher(bad))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for _ in range(3):
        with tracer.start_as_current_span("s", attributes={"accel.device.id": "h/c0"}):
            pass
    assert list(bad.iterdir()) == []
    warnings = [r for r in caplog.records if "not published" in r.getMessage()]
    assert len(warnings) == 1 and "OTEL_EXT_ACTIVE_SPAN_DIR" in warnings[0].getMessage()
    provider.shutdown()


def test_forked_child_writes_its_own_record(tmp_path: Path) -> None:
    publisher = ActiveSpanPublisher(tmp_path)
    parent_rec = publisher.record("d")
    assert parent_rec is not None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            child_rec = publisher.record("d")
            ok = child_rec is not None and child_rec is not parent_rec
            ok = ok and child_rec.path != parent_rec.path
            os.write(w, b"1" if ok else b"0")
            publisher.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    assert [p.name for p in tmp_path.iterdir()] == [parent_rec.path.name]
    publisher.close()
    assert list(tmp_path.iterdir()) == []


def test_bridge_attaches_the_other_process_span_to_counters_and_buckets(tmp_path: Path) -> None:
    now = [10_000_000_000]
    rec = ActiveSpanRecord("host0/chip1", tmp_path)
    reader = SharedActiveSpanReader(tmp_path)
    bridge = CounterBridge(
        [SimulatedSource(BuiltinSimModel(chips=2))],
        derive=False,
        interval_s=1.0,
        active_spans=ActiveSpanRegistry(use_current_context=False, shared=reader),
        clock=lambda: now[0],
    )
    bridge.open()
    bridge.sample_once()
    rec.ended(0xC0FFEE, 0x77, now[0] + 100, now[0] + 900_000_000)
    now[0] += 1_000_000_000
    bridge.sample_once()
    got = {
        (st.metric, st.instrument, st.attributes.get("accel.device.id"), st.exemplar.ref.span_id)
        for series in bridge.families().values()
        for st in series
        if st.exemplar is not None
    }
    assert got, "no exemplar attached"
    assert {dev for _, _, dev, _ in got} == {"host0/chip1"}
    assert {span for *_, span in got} == {format(0x77, "016x")}
    assert {instrument for _, instrument, _, _ in got} >= {"counter", "histogram"}
    rec.close()
    reader.close()


def test_in_process_entry_wins_over_shared_records(tmp_path: Path) -> None:
    rec = ActiveSpanRecord("d", tmp_path)
    rec.ended(0xA, 1, 0, 100)
    reg = ActiveSpanRegistry(use_current_context=False, shared=SharedActiveSpanReader(tmp_path))
    assert reg.covering("d", 0, 100).span_id == format(1, "016x")
    reg.set_active("d", SpanContext(0xB, 0x2, is_remote=False, trace_flags=TraceFlags(1)))
    assert reg.covering("d", 0, 100).span_id == format(2, "016x")
    rec.close()


def test_nothing_is_published_after_shutdown(tmp_path: Path) -> None:
    provider = TracerProvider()
    provider.add_span_processor(ActiveSpanPublishingProcessor(ActiveSpanPublisher(tmp_path)))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("s", attributes={"accel.device.id": "h/c0"}):
        assert len(list(tmp_path.iterdir())) == 1
    provider.shutdown()
    with tracer.start_as_current_span("late", attributes={"accel.device.id": "h/c1"}):
        pass
    assert list(tmp_path.iterdir()) == []
