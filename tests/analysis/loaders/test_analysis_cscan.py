"""The compiled Kineto column extractor (``_cscan``) against the ``msgspec`` path it speeds up.

Differential: on every real trace and on generated documents (escapes, unicode, numbers of
every form, missing and mistyped fields, duplicate keys, truncated and corrupted text), the
loader gives exactly the same table with the extractor as without it; on anything irregular
the extractor hands the chunk back (None), never crashes.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from conftest import require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_ext.analysis.loaders import _kineto_fast
from otel_ext.analysis.loaders._common import LoadContext
from otel_ext.analysis.loaders.kineto import table_from_fast
from otel_ext.errors import InputError

pytestmark = pytest.mark.slow

CSCAN = _kineto_fast._cscan
LIMIT = _kineto_fast._SCAN_LIMIT_NS
needs_cscan = pytest.mark.skipif(CSCAN is None, reason="compiled extractor not built")


def test_extension_is_built() -> None:
    """CI builds it (``pip install -e .`` compiles setup.py's optional extension)."""
    require(CSCAN is not None, "the compiled extractor otel_ext.analysis.loaders._cscan")


class _Counting:
    """Wraps the extension, counting the chunks it read and those it handed back."""

    def __init__(self) -> None:
        self.read = 0
        self.handed_back = 0

    def scan(self, *args: Any) -> Any:
        res = CSCAN.scan(*args)
        if res is None:
            self.handed_back += 1
        else:
            self.read += 1
        return res


def _outcome(text: bytes, *, cscan: Any, chunk: int | None = None, piece: int = 1 << 20) -> Any:
    """The table (or the error, or None for 'careful path') the fast path gives for ``text``."""
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(_kineto_fast, "_cscan", cscan))
            if chunk is not None:
                stack.enter_context(mock.patch.object(_kineto_fast, "_CHUNK", chunk))
            pieces = (text[i : i + piece] for i in range(0, len(text), piece))
            fast = _kineto_fast.decode_stream(pieces)
        if fast is None:
            return None
        return table_from_fast(fast, LoadContext("g.json"), "g.json")
    except InputError as e:
        return f"error: {e}"
    except TypeError as e:  # unhashable pid/tid: the loader's own behaviour, either way
        return f"TypeError: {e}"


def _assert_same(a: Any, b: Any) -> None:
    if a is None or isinstance(a, str):
        assert a == b
        return
    assert b is not None and not isinstance(b, str)
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        assert a.columns[c].dtype == b.columns[c].dtype, c
        assert np.array_equal(a.columns[c], b.columns[c]), c
    assert a.strings == b.strings  # the very same dictionaries, in the same order
    assert a.meta == b.meta


@needs_cscan
def test_same_table_on_every_real_trace(shared_traces: Path) -> None:
    """The extractor's table, read in the default chunks and in 256 KiB ones (many chunk
    edges), is the Python path's read in the default chunks: a table does not depend on where
    the chunks fall. The Python path runs once per file (it is the slow part)."""
    files = sorted(shared_traces.glob("*/*.json.gz"))
    assert len(files) >= 14
    for f in files:
        data = gzip.decompress(f.read_bytes())
        without = _outcome(data, cscan=None)
        for chunk in (None, 256 << 10):
            counting = _Counting()
            with_c = _outcome(data, cscan=counting, chunk=chunk)
            assert with_c is not None and not isinstance(with_c, str), (f, chunk)
            _assert_same(with_c, without)
            # the extractor really read every chunk of these files (none handed back), except
            # where it hands chunks back by design: text pids or tids (the pre-2022 schema)
            if not _has_text_ids(data):
                assert counting.read >= 1 and counting.handed_back == 0, (f, vars(counting))


def _has_text_ids(data: bytes) -> bool:
    doc = json.loads(data)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return any(
        isinstance(e, dict) and (type(e.get("pid")) is str or type(e.get("tid")) is str)
        for e in events
    )


# ------------------------------------------------------------------ generated documents

_names = st.sampled_from(
    ["gemm", "a},{b", 'x"}, {"ph": "X"', "c}\\n,{d", "é€😀", "tab\there", "nul\x00", "Trace",
     "ncclDevKernel_AllReduce_Sum", "\u2028", "", "cudaLaunchKernel", "ProfilerStep#3"]
)  # fmt: skip
_cats = st.sampled_from(
    ["kernel", "cuda_runtime", "cpu_op", "Trace", "mtia_ccp_events", "gpu_memcpy", "",
     "user_annotation", "ac2g"]
)  # fmt: skip
_odd = st.sampled_from([None, True, False, "7", [1], {"a": 1}, 1.5, 2**63, -(2**63) - 1, 2**62])
_times = st.one_of(
    st.integers(0, 4 * 10**15),
    st.integers(-(10**6), 10**6),
    st.tuples(st.integers(0, 10**12), st.integers(0, 10**6 - 1), st.integers(1, 6)).map(
        lambda p: f"{p[0]}.{p[1]:06d}"[: len(str(p[0])) + 1 + p[2]]
    ),
    st.sampled_from(["1e3", "1.5E+2", "-0", "-0.0005", "0.0004999", "68.0", "4611686018427387"]),
)


def _num(text: Any) -> str:
    """A JSON number written exactly as given (str) or by json (int)."""
    return text if isinstance(text, str) else json.dumps(text)


def _sometimes_odd(draw: st.DrawFn, usual: st.SearchStrategy, regular: bool) -> Any:
    """A usual value, or (in irregular documents, one time in four) an odd one."""
    if not regular and draw(st.integers(0, 3)) == 0:
        return draw(_odd)
    return draw(usual)


@st.composite
def _args(draw: st.DrawFn, regular: bool) -> str:
    members: list[str] = []
    keys = ["correlation", "stream", "device", "External id", "Collective name", "Seq", "dtype",
            "In msg nelems", "Group size", "Process Group Name", "pg_name", "labels", "other",
            "Input Dims"]  # fmt: skip
    for key in draw(st.lists(st.sampled_from(keys), max_size=6)):
        value = draw(
            st.one_of(
                st.integers(-3, 300).map(json.dumps),
                _odd.map(json.dumps),
                st.sampled_from(['"allreduce"', '"Float"', '"bfloat16"', "[[1, 2], [3]]"]),
            )
        )
        if regular and key in ("device", "labels"):
            value = "0" if key == "device" else '"MTIA 0"'
        members.append(f"{json.dumps(key)}: {value}")
    return "{" + ", ".join(members) + "}"


@st.composite
def _event(draw: st.DrawFn, regular: bool) -> str:
    phases = ["X"] * 6 + ["s", "f", "M", "i", "B"]
    ph = draw(st.sampled_from(phases if regular else [*phases, "Q", 7]))
    fields: dict[str, str] = {"ph": json.dumps(ph)}
    cat = draw(_cats)
    if draw(st.integers(0, 9)):
        fields["cat"] = json.dumps(cat, ensure_ascii=draw(st.booleans()))
    if ph == "M" and draw(st.booleans()):
        fields["name"] = '"process_labels"'
    elif draw(st.integers(0, 9)):
        fields["name"] = json.dumps(draw(_names), ensure_ascii=draw(st.booleans()))
    if regular or draw(st.integers(0, 9)):
        fields["ts"] = _num(draw(_times))
    if draw(st.integers(0, 3)):
        fields["dur"] = _num(draw(_times if regular else st.one_of(_times, st.integers(-2, 0))))
    fields["pid"] = json.dumps(_sometimes_odd(draw, st.sampled_from([0, 1, 2]), regular))
    fields["tid"] = json.dumps(_sometimes_odd(draw, st.sampled_from([2, 3, 7]), regular))
    if ph in ("s", "f"):
        fields["id"] = json.dumps(draw(st.one_of(st.integers(0, 5), _odd)))
    if draw(st.integers(0, 3)):
        fields["args"] = (
            draw(_args(regular))
            if regular
            else draw(st.one_of(_args(regular), _odd.map(json.dumps)))
        )
    if draw(st.integers(0, 20)) == 0:
        fields["ph"] = '"\\u0058"'  # an escaped "X"
    members = [f"{json.dumps(k)}: {v}" for k, v in fields.items()]
    if not regular and draw(st.integers(0, 15)) == 0:
        members.append(draw(st.sampled_from(list(members))))  # a duplicate member
    draw(st.randoms(use_true_random=False)).shuffle(members)
    sep = draw(st.sampled_from([", ", ",", ",\n  "]))
    return "{" + sep.join(members) + "}"


@st.composite
def kineto_texts(draw: st.DrawFn) -> bytes:
    regular = draw(st.booleans())  # regular: what the extractor reads itself, mostly
    events = draw(st.lists(_event(regular), max_size=25))
    sep = draw(st.sampled_from([", ", ",\n", ","]))
    header = '"schemaVersion": 1, "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 5'
    tail = draw(st.sampled_from(["", ', "otherData": {"x": [1, 2]}', ', "traceEvents": []']))
    text = ("{" + header + ', "traceEvents": [' + sep.join(events) + "]" + tail + "}").encode()
    mutation = draw(st.integers(0, 5)) if not regular else 0
    if mutation == 1 and text:  # truncated
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif mutation == 2 and text:  # one byte changed
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + bytes([draw(st.integers(0, 255))]) + text[i + 1 :]
    return text


@needs_cscan
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip
@given(kineto_texts(), st.sampled_from([None, 64, 300]), st.integers(1, 400))
def test_same_outcome_on_generated_documents(text: bytes, chunk: int | None, piece: int) -> None:
    """Cut into chunks anywhere (false cuts included), with or without the extractor: the same
    table, the same error, or both sending the file to the careful path."""
    _assert_same(
        _outcome(text, cscan=CSCAN, chunk=chunk, piece=piece),
        _outcome(text, cscan=None, chunk=chunk, piece=piece),
    )


@needs_cscan
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 400), st.booleans())
def test_scan_never_crashes_on_arbitrary_bytes(data: bytes, stop: int, final: bool) -> None:
    stop = min(stop, len(data))
    res = CSCAN.scan(data, 0, stop, final, LIMIT)
    assert res is None or (isinstance(res, tuple) and len(res) == 22)


@needs_cscan
def test_scan_never_crashes_on_mutated_real_events(shared_traces: Path) -> None:
    data = gzip.decompress((shared_traces / "nccl_collectives" / "nccl_data.json.gz").read_bytes())
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    piece = data[start : start + 20000]
    rnd = random.Random(8)
    for _ in range(2000):
        m = bytearray(piece)
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(len(m))
            m[i] = rnd.choice(b'{}[]",:\\ue0-.9\x00\xff')
        res = CSCAN.scan(m, 0, rnd.randrange(len(m)), rnd.random() < 0.5, LIMIT)
        assert res is None or len(res) == 22


# ------------------------------------------------------------------ ground truth


@needs_cscan
def test_scan_values_against_ground_truth() -> None:
    text = (
        '{"ph": "X", "cat": "ker\\u006eel", "name": "a\\"b\\\\\\u00e9\\ud83d\\ude00", "pid": 1,'
        ' "tid": 9, "ts": 1712195495505582.988, "dur": 0.0005, "args": {"correlation": 5,'
        ' "stream": 7, "device": 3, "External id": 4611686018427387904, "x": [{"y": null}]}},'
        ' {"ph": "X", "cat": "Trace", "name": null, "pid": "Spans", "tid": "x", "ts": "?"},'
        ' {"ph": "s", "cat": "ac2g", "id": 12, "pid": 1, "tid": 9, "ts": 10.5},'
        ' {"ph": "f", "cat": "ac2g", "id": "12", "pid": 0, "tid": 7},'
        ' {"ph": "X", "name": "é€", "pid": -1, "tid": 2, "ts": -3, "args": null}'
    ).encode()
    res = CSCAN.scan(text, 0, len(text), False, LIMIT)
    assert res is not None
    rows, names, name_codes, cats, cat_codes, start, dur, pid, tid, corr, stream, ext, dev = res[
        :13
    ]
    i64 = lambda b: np.frombuffer(b, np.int64).tolist()  # noqa: E731
    i32 = lambda b: np.frombuffer(b, np.int32).tolist()  # noqa: E731
    assert rows == 2
    assert names == ['a"b\\é😀', "é€"] and i32(name_codes) == [0, 1]
    assert cats == ["kernel", ""] and i32(cat_codes) == [0, 1]
    assert i64(start) == [1712195495505582988, -3000] and i64(dur) == [1, 0]
    assert i64(pid) == [1, -1] and i64(tid) == [9, 2]
    assert i64(corr) == [5, -1] and i64(stream) == [7, -1] and i64(ext) == [-1, -1]
    assert i64(dev) == [3, -1]  # device, else the pid
    flow_ph, flow_pid, flow_tid, flow_ts, flow_id, flow_ok = res[14:20]
    assert flow_ph == b"sf" and i64(flow_pid) == [1, 0] and i64(flow_tid) == [9, 7]
    assert i64(flow_ts)[0] == 10500 and i64(flow_id)[0] == 12
    assert list(flow_ok) == [3, 0]  # ts and integer id; neither


@needs_cscan
@pytest.mark.parametrize(
    "event",
    [
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": 1e3}',  # exponent
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": "5"}',  # text time
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": 1, "ts": 2}',  # dup
        '{"ph": "X", "cat": "k", "name": "\\ud800", "pid": 1, "tid": 1, "ts": 1}',  # surrogate
        '{"ph": "X", "cat": "k", "name": "n", "pid": 9223372036854775808, "tid": 1, "ts": 1}',
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": -1}',
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": 1, "args": [1]}',
        '{"ph": "Q", "name": "unknown phase"}',
        '{"name": "no phase"}',
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": 1,}',  # trailing comma
        '{"ph": "i", "x": "\xff"}',  # not UTF-8
        '{"ph": "i", "x": ' + "[" * 70 + "]" * 70 + "}",  # deeper than 64
        '{"ph": "X", "cat": "k", "name": "n", "pid": 1, "tid": 1, "ts": 4611686018427388}',
    ],
)
def test_scan_hands_irregular_events_back(event: str) -> None:
    """Each is either malformed, or a form the extractor leaves to msgspec (whose answer the
    loader then takes: a table, or the careful path)."""
    text = event.encode("latin-1")
    assert CSCAN.scan(text, 0, len(text), False, LIMIT) is None
    doc = b'{"traceEvents": [' + text + b"]}"
    _assert_same(_outcome(doc, cscan=CSCAN), _outcome(doc, cscan=None))


@needs_cscan
def test_final_mode_finds_the_closing_bracket() -> None:
    text = b' {"ph": "i"} ,{"ph": "M", "name": "process_labels", "args": {"labels": "MTIA 0"}}] ,"x": 1}'
    res = CSCAN.scan(text, 0, len(text), True, LIMIT)
    assert res is not None and text[res[-1] : res[-1] + 1] == b"]"
    a, b = np.frombuffer(res[20], np.int64).tolist()
    assert json.loads(text[a:b])["args"]["labels"] == "MTIA 0"
    assert CSCAN.scan(b"]", 0, 1, True, LIMIT)[-1] == 0  # an empty array
    assert CSCAN.scan(text, 0, len(text), False, LIMIT) is None  # not events alone


@needs_cscan
def test_scan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        CSCAN.scan(b"{}", 0, 3, False, LIMIT)
    with pytest.raises(TypeError):
        CSCAN.scan("{}", 0, 2, False, LIMIT)


# ------------------------------------------------------------------ OTLP-JSON spans

_OTLP_KEYS = (b"accel.rank", b"accel.kernel.name", b"accel.host.id")


@needs_cscan
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_scan_otlp_never_crashes_on_arbitrary_bytes(data: bytes) -> None:
    res = CSCAN.scan_otlp_lines(data, _OTLP_KEYS, 1, 1 << 30)
    assert isinstance(res, tuple) and len(res) == 16
    res = CSCAN.scan_otlp_metrics_lines(data, 1, 1 << 30)
    assert isinstance(res, tuple) and len(res) == 17


@needs_cscan
def test_scan_otlp_never_crashes_on_mutated_requests(tmp_path: Path) -> None:
    """Byte mutations of a simulated run's OTLP line: None or a consistent set of columns."""
    out = tmp_path / "sim"
    subprocess.run(
        [sys.executable, "-m", "otel_ext.cli", "simulate", "--hosts", "1", "--chips", "2",
         "--requests", "2", "--no-timeline", "--quiet", "--out", str(out)],
        check=True, timeout=120,
    )  # fmt: skip
    req = json.loads((out / "traces.jsonl").read_bytes().split(b"\n")[0])
    for rs in req["resourceSpans"]:  # a few spans of every resource: a small valid request
        for ss in rs["scopeSpans"]:
            ss["spans"] = ss["spans"][:3]
    line = json.dumps(req).encode()
    k = len(_OTLP_KEYS)
    assert CSCAN.scan_otlp_lines(line, _OTLP_KEYS, 1, 1 << 30)[13] == b""  # read, not handed back
    read = 0
    rnd = random.Random(3)
    for _ in range(2000):
        m = bytearray(line)
        for _ in range(rnd.randint(1, 4)):
            m[rnd.randrange(len(m))] = rnd.choice(b'{}[]",:\\0123456789abcdefx \xff\x00')
        res = CSCAN.scan_otlp_lines(bytes(m), _OTLP_KEYS, 1, 1 << 30)
        if res[13] == b"":  # the line was read, not handed back
            read += 1
            n = res[0]
            assert len(res[2]) == 4 * n and len(res[3]) == 8 * n and len(res[5]) == 8 * n
            assert len(res[9]) == 8 * n and len(res[10]) == k * n and len(res[11]) == 8 * k * n
            types = np.frombuffer(res[10], np.uint8)
            vals = np.frombuffer(res[11], np.int64)
            strs = vals[types == 0]  # string slots hold codes of the strings returned
            assert ((strs >= 0) & (strs < len(res[12]))).all()
    assert read > 0  # some mutations (inside strings, say) are still valid requests
