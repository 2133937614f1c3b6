"""XPlane protobufs (JAX/XLA profiler) read into the event table, and the wire decoder under it.

Real files: ``../shared/traces/other-formats/jax_xplane_amd`` (MI300X, MI355X). Synthetic
XSpaces are encoded here by a small writer of the wire format (independent of the reader).
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_TRACES, require
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import detect_format, load_file, load_paths
from otel_ext.analysis.loaders._common import LoadContext
from otel_ext.analysis.loaders._protowire import WireError, iter_fields
from otel_ext.analysis.loaders.xplane import load_xplane_bytes, looks_like_xspace
from otel_ext.analysis.table import Category
from otel_ext.errors import InputError

XPLANE_DIR = SHARED_TRACES.parent / "other-formats" / "jax_xplane_amd"


def _xplane_files() -> list[Path]:
    require(XPLANE_DIR.is_dir(), f"real XPlane folder {XPLANE_DIR}")
    files = sorted(XPLANE_DIR.glob("*.xplane.pb*"))
    assert len(files) == 2, files
    return files


# -- a writer of the wire format, for synthetic inputs ---------------------------------------


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, v = v & 0x7F, v >> 7
        out.append(low | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _num(field: int, v: int) -> bytes:
    return _varint(field << 3) + _varint(v)


def _msg(field: int, body: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(body)) + body


class _Plane:
    """Builds one XPlane: names registered on first use, lines of events with stats."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: dict[str, int] = {}
        self.stats: dict[str, int] = {}
        self.lines: list[bytes] = []

    def _stat_id(self, name: str) -> int:
        return self.stats.setdefault(name, len(self.stats) + 1)

    def stat(self, name: str, value: int | str) -> bytes:
        sid = self._stat_id(name)
        if isinstance(value, str):
            return _msg(4, _num(1, sid) + _msg(5, value.encode()))
        return _msg(4, _num(1, sid) + _num(4, value))

    def line(self, lid: int, name: str, ts_ns: int, events: list[tuple]) -> None:
        body = _num(1, lid) + _msg(2, name.encode()) + _num(3, ts_ns)
        for ev_name, off_ps, dur_ps, stats in events:
            mid = self.events.setdefault(ev_name, len(self.events) + 1)
            ev = _num(1, mid) + _num(2, off_ps) + _num(3, dur_ps)
            ev += b"".join(self.stat(k, v) for k, v in stats.items())
            body += _msg(4, ev)
        self.lines.append(body)

    def encode(self) -> bytes:
        out = _msg(2, self.name.encode()) + b"".join(_msg(3, x) for x in self.lines)
        for name, i in self.events.items():
            out += _msg(4, _num(1, i) + _msg(2, _num(1, i) + _msg(2, name.encode())))
        for name, i in self.stats.items():
            out += _msg(5, _num(1, i) + _msg(2, _num(1, i) + _msg(2, name.encode())))
        return _msg(1, out)


def _space(*planes: _Plane, hostname: str = "node7") -> bytes:
    return b"".join(p.encode() for p in planes) + _msg(4, hostname.encode())


def _load(data: bytes, *, keep_going: bool = False) -> tuple:
    ctx = LoadContext("synthetic.xplane.pb", keep_going=keep_going)
    return load_xplane_bytes(data, ctx=ctx), ctx


def _rows(t) -> list[tuple[str, int]]:
    return [(t.string("name", i), int(t["category"][i])) for i in range(len(t))]


# -- the real files ---------------------------------------------------------------------------


def test_each_real_xplane_file_is_detected_by_content_and_loads_device_and_host_ops() -> None:
    for f in _xplane_files():
        head = f.read_bytes()[:65536]
        assert looks_like_xspace(head)
        assert detect_format("renamed.bin", head.decode("utf-8", errors="replace")) == "xplane"
        res = load_file(f)
        t = res.table
        assert res.format == "xplane" and t is not None and not res.skipped
        cat = t["category"]
        assert (cat == Category.KERNEL_COMPUTE).sum() >= 30
        assert (cat == Category.RUNTIME).sum() >= 50
        assert (cat == Category.CPU_OP).sum() >= 1000
        assert t.meta["host"] and t.meta["base_ns"] > 1.7e18  # epoch times from the profile
        assert (t["end_ns"] >= t["start_ns"]).all()
        # every device op has its launch (same correlation id) on the host, never after it
        dev = np.isin(cat, [Category.KERNEL_COMPUTE, Category.MEMCPY, Category.MEMSET])
        launch = cat == Category.RUNTIME
        by_corr = dict(zip(t["correlation"][launch].tolist(), t["start_ns"][launch].tolist()))
        for c, s in zip(t["correlation"][dev].tolist(), t["start_ns"][dev].tolist()):
            assert c in by_corr and by_corr[c] <= s
        # copies launched by hipMemcpy*/hipMemset* are copies, whatever the blit kernel's name
        names = t.decoded("name")
        assert set(names[np.isin(cat, [Category.MEMCPY, Category.MEMSET])]) <= {
            "__amd_rocclr_copyBuffer.kd",
            "__amd_rocclr_fillBufferAligned.kd",
        }


def test_a_gzipped_xplane_file_loads_the_same_rows(tmp_path: Path) -> None:
    f = _xplane_files()[0]
    gz = tmp_path / "space.pb.gz"
    gz.write_bytes(gzip.compress(f.read_bytes()))
    a, b = load_file(f).table, load_file(gz).table
    assert a is not None and b is not None
    assert a["start_ns"].tolist() == b["start_ns"].tolist()
    assert a.decoded("name").tolist() == b.decoded("name").tolist()


def test_the_xplane_folder_analyses_as_one_run_per_file_each_with_compute_time() -> None:
    _xplane_files()
    doc = analyze([XPLANE_DIR], workers=1)
    assert [i["format"] for i in doc["inputs"]] == ["xplane", "xplane"]
    assert len(doc["runs"]) == 2
    by_rank = {r["rank"]: r for r in doc["temporal_breakdown"]}
    assert len(by_rank) == 2
    for row in by_rank.values():
        assert row["compute_ns"] > 1_000_000  # milliseconds of kernels in each capture
        assert 0 < row["compute_pct"] <= 100
    assert doc["kernel_breakdown"]["by_category"][0]["category"] == "compute"
    # both captures call their device "/device:GPU:0": told apart by rank, one slash between
    assert sorted(r["device"] for r in doc["ranks"]) == ["rank0/device:GPU:0", "rank1/device:GPU:0"]


# -- synthetic spaces: what becomes what ------------------------------------------------------


def test_device_ops_are_classified_from_metadata_launches_and_the_comm_table() -> None:
    host = _Plane("/host:CPU")
    host.line(77, "Host Threads/77", 1_000, [
        ("hipMemcpyHtoDAsync", 0, 2_000_000, {"correlation_id": 1}),
        ("hipLaunchKernel", 3_000_000, 1_000_000, {"correlation_id": 2}),
        ("train", 0, 90_000_000, {"step_num": 4}),
        ("MemoryAllocation", 5_000, 0, {"bytes_allocated": 256}),
    ])  # fmt: skip
    dev = _Plane("/device:GPU:0")
    dev.line(5, "Stream #5(Kernel)", 1_000, [
        ("blit.kd", 10_000_000, 1_000_500, {"correlation_id": 1}),
        ("gemm.kd", 20_000_000, 7_000_000, {"correlation_id": 2}),
        ("fusion_reduce.kd", 30_000_000, 1_000_000, {"hlo_op": "all-reduce-start.3"}),
        ("ncclDevKernel_AllGather_RING_LL", 40_000_000, 1_000_000, {}),
        ("copy_kernel.kd", 50_000_000, 1_000_000, {"memcpy_details": "kind:DtoD"}),
    ])  # fmt: skip
    dev.line(0, "XLA Ops", 1_000, [("gemm", 20_000_000, 7_000_000, {})])  # derived: left out
    t, _ = _load(_space(host, dev))
    assert _rows(t) == [
        ("hipMemcpyHtoDAsync", Category.RUNTIME),
        ("hipLaunchKernel", Category.RUNTIME),
        ("train#4", Category.STEP),
        ("MemoryAllocation", Category.OTHER),
        ("blit.kd", Category.MEMCPY),
        ("gemm.kd", Category.KERNEL_COMPUTE),
        ("fusion_reduce.kd", Category.KERNEL_COMM),
        ("ncclDevKernel_AllGather_RING_LL", Category.KERNEL_COMM),
        ("copy_kernel.kd", Category.MEMCPY),
    ]
    assert t.string("coll_op", 6) == "allreduce"
    # line time in ns plus picosecond offsets, floored once: 1000 ns + 10 us, 1000.5 ns long
    assert (int(t["start_ns"][4]), int(t["end_ns"][4])) == (11_000, 12_000)
    assert int(t["tid"][0]) == 77 and int(t["stream"][5]) == 5
    assert t.string("device", 5) == "/device:GPU:0" and t.string("host", 0) == "node7"


def test_a_device_plane_without_streams_reads_its_xla_ops_line() -> None:
    dev = _Plane("/device:TPU:0")
    dev.line(
        1,
        "XLA Ops",
        0,
        [
            ("fusion.1", 0, 5_000_000, {}),
            ("all-reduce.2", 6_000_000, 1_000_000, {"hlo_op": "all-reduce.2"}),
        ],
    )
    dev.line(2, "XLA Modules", 0, [("jit_step", 0, 9_000_000, {})])
    dev.line(3, "Steps", 0, [("3", 0, 9_000_000, {"step_num": 3})])
    t, _ = _load(_space(dev))
    assert _rows(t) == [
        ("fusion.1", Category.KERNEL_COMPUTE),
        ("all-reduce.2", Category.KERNEL_COMM),
        ("3#3", Category.STEP),
    ]


@pytest.mark.parametrize(
    ("data", "record"),
    [
        (b"\x0a\x05\x12\x03ab", "plane 0"),  # length runs past the end
        (_msg(1, _msg(2, b"/host:CPU") + _msg(3, _num(1, 3) + _msg(4, b"\x08"))), "line 0 event 0"),
        (_msg(1, _msg(2, b"/host:CPU") + _msg(3, _varint(4 << 3 | 3))), "line 0"),
        (_msg(1, _msg(2, b"/device:GPU:0") + _msg(3, _msg(4, _num(3, 2**64 - 5)))), "event 0"),
        (_msg(4, b"host"), "file"),  # no planes at all
    ],
)
def test_malformed_records_are_named_and_skipped_with_keep_going(data: bytes, record: str) -> None:
    with pytest.raises(InputError) as err:
        _load(data)
    assert err.value.path == "synthetic.xplane.pb" and record in (err.value.record or "")
    _, ctx = _load(data, keep_going=True)
    assert ctx.skipped and record in ctx.skipped[0].record


# -- hostile bytes: only named errors ---------------------------------------------------------


def test_mutated_real_xplane_files_give_named_errors_only(tmp_path: Path) -> None:
    rng = random.Random(30)
    seeds = [f.read_bytes() for f in _xplane_files()]
    raised = 0
    for case in range(150):
        data = bytearray(seeds[case % 2])
        kind = case % 3
        if kind == 0:
            del data[rng.randrange(64, len(data)) :]
        elif kind == 1:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(16, len(data))] = rng.randrange(256)
        else:
            at = rng.randrange(16, len(data))
            data[at:at] = rng.randbytes(rng.randint(1, 40))
        f = tmp_path / f"case{case}.xplane.pb"
        f.write_bytes(bytes(data) if case % 4 else gzip.compress(bytes(data)))
        try:
            load_file(f)
        except InputError as e:
            assert e.path == str(f) and e.record, e
            raised += 1
        res = load_paths([f], keep_going=True, workers=1)  # never raises
        assert all(s.path == str(f) and s.record for s in res.skipped)
    assert raised >= 30  # the mutations do reach the decoder's checks


# -- the wire decoder, property by property ---------------------------------------------------

_field = st.tuples(
    st.integers(1, 2**29 - 1),
    st.one_of(st.integers(0, 2**64 - 1), st.binary(max_size=40)),
)


@given(st.lists(_field, max_size=20))
def test_wire_fields_round_trip(fields: list[tuple[int, int | bytes]]) -> None:
    data = b"".join(
        _varint(f << 3) + _varint(v) if isinstance(v, int) else _msg(f, v) for f, v in fields
    )
    buf = memoryview(data)
    got = [
        (f, v if w == 0 else bytes(buf[v[0] : v[1]]))  # type: ignore[index]
        for f, w, v in iter_fields(buf)
    ]
    assert got == fields


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_decode_or_raise_wire_error_within_bounds(data: bytes) -> None:
    buf = memoryview(data)
    try:
        for _f, w, v in iter_fields(buf):
            if w == 2:
                assert 0 <= v[0] <= v[1] <= len(data)  # type: ignore[index]
    except WireError as e:
        assert 0 <= e.offset < len(data)


@given(st.lists(_field, min_size=1, max_size=10), st.data())
def test_a_truncated_message_never_yields_a_field_past_its_end(
    fields: list[tuple[int, int | bytes]], data: st.DataObject
) -> None:
    whole = b"".join(
        _varint(f << 3) + _varint(v) if isinstance(v, int) else _msg(f, v) for f, v in fields
    )
    cut = data.draw(st.integers(0, len(whole) - 1))
    buf = memoryview(whole[:cut])
    seen = []
    try:
        for f, w, v in iter_fields(buf):
            seen.append(f)
            if w == 2:
                assert v[1] <= cut  # type: ignore[index]
    except WireError:
        pass
    assert seen == [f for f, _ in fields[: len(seen)]]  # a prefix of the fields, in order
    assert len(seen) < len(fields)


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_random_bytes_after_an_xspace_head_give_named_errors_only(tail: bytes) -> None:
    data = _msg(1, _msg(2, b"/host:CPU") + tail)
    try:
        _load(data)
    except InputError as e:
        assert e.path == "synthetic.xplane.pb" and e.record
    _load(data, keep_going=True)
