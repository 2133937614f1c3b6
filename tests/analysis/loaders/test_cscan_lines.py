"""The compiled OTLP scanners' one line walk (``_cscan.scan_lines``), span and metric alike.

Both ``scan_otlp_lines`` and ``scan_otlp_metrics_lines`` walk a chunk of newline-separated
lines with the same loop: blank lines skipped, lines numbered from ``first_line``, a line the
scanner is not sure of listed as ``(number, start, stop)`` with its rows taken out again, the
walk stopped at a line longer than ``max_line``. The lines here are built with a known
outcome (their rows, or handed back, or blank), so each scanner's report is checked against
that ground truth, and a whole chunk against the same lines scanned one at a time.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import require
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ext.analysis.loaders import _kineto_fast

CSCAN = _kineto_fast._cscan
needs_cscan = pytest.mark.skipif(CSCAN is None, reason="compiled extractor not built")

_KEYS = (b"accel.rank", b"accel.host.id")


def _span_request(rows: int, seed: int) -> bytes:
    spans = [
        {"traceId": f"{seed + 1:032x}", "spanId": f"{seed * 100 + i + 1:016x}",
         "name": f"s{i}", "startTimeUnixNano": str(1000 * seed + i),
         "endTimeUnixNano": str(1000 * seed + i + 5),
         "attributes": [{"key": "accel.rank", "value": {"intValue": str(i)}}]}
        for i in range(rows)
    ]  # fmt: skip
    res = {"attributes": [{"key": "accel.host.id", "value": {"stringValue": f"h{seed}"}}]}
    req = {"resourceSpans": [{"resource": res, "scopeSpans": [{"spans": spans}]}]}
    return json.dumps(req, separators=(",", ":")).encode()


def _metric_request(rows: int, seed: int) -> bytes:
    points = [{"timeUnixNano": str(1000 * seed + i), "asDouble": i + 0.5} for i in range(rows)]
    metric = {"name": f"m{seed}", "gauge": {"dataPoints": points}}
    req = {"resourceMetrics": [{"resource": {"attributes": []},
                                "scopeMetrics": [{"metrics": [metric]}]}]}  # fmt: skip
    return json.dumps(req, separators=(",", ":")).encode()


class Scanner:
    """One of the two scanners: how to call it, build a request, and read its report."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return self.kind

    def request(self, rows: int, seed: int) -> bytes:
        return (_span_request if self.kind == "spans" else _metric_request)(rows, seed)

    def scan(self, buf: Any, first_line: int = 1, max_line: int = 1 << 30) -> tuple[Any, ...]:
        assert CSCAN is not None
        res: tuple[Any, ...]
        if self.kind == "spans":
            res = CSCAN.scan_otlp_lines(buf, _KEYS, first_line, max_line)
        else:
            res = CSCAN.scan_otlp_metrics_lines(buf, first_line, max_line)
        return res

    def report(self, res: tuple[Any, ...]) -> dict[str, Any]:
        """The rows, their line numbers, the fallback triples and the walk's end."""
        line_of = res[9] if self.kind == "spans" else res[10]
        return {
            "rows": res[0],
            "line_of": np.frombuffer(line_of, np.int64).tolist(),
            "fallback": [tuple(t) for t in np.frombuffer(res[-3], np.int64).reshape(-1, 3)],
            "long_line": res[-2],
            "last_line": res[-1],
        }

    def columns(self, res: tuple[Any, ...]) -> list[Any]:
        """Every column but the line numbers, fallback and walk's end, texts decoded."""
        if self.kind == "spans":
            names, traces, strs = res[1], res[7], res[12]
            cols = [np.array(names)[np.frombuffer(res[2], np.int32)].tolist(),
                    res[3], res[4], res[5], res[6],
                    np.array(traces)[np.frombuffer(res[8], np.int32)].tolist()]  # fmt: skip
            types = np.frombuffer(res[10], np.uint8)
            vals = np.frombuffer(res[11], np.int64)
            strings = [strs[v] if t == 0 else v for t, v in zip(types.tolist(), vals.tolist())]
            return [*cols, types.tobytes(), strings]
        names, texts = res[1], res[12]
        return [np.array(names)[np.frombuffer(res[2], np.int32)].tolist(), *res[3:8],
                [texts[c] for c in np.frombuffer(res[8], np.int32).tolist()],
                res[11]]  # fmt: skip


SCANNERS = [Scanner("spans"), Scanner("metrics")]

#: a line and its outcome: ("rows", n), ("blank",), ("back",) -- handed back to the typed path
_LINE = st.one_of(
    st.tuples(
        st.just("rows"),
        st.integers(1, 4),
        st.sampled_from(["", " ", "\t ", "\r"]),
        st.sampled_from(["", " ", " \t", "\r"]),
    ),
    st.tuples(st.just("blank"), st.text(" \t\r\x0b\x0c", max_size=4)),
    st.tuples(st.just("back"), st.sampled_from(["{", "not json", "{}x", "[1]", '{"a":'])),
    st.tuples(st.just("trailing"), st.integers(1, 3)),
)


def _build(scanner: Scanner, specs: list[Any], final_newline: bool) -> tuple[bytes, list[Any]]:
    """The chunk's bytes and per line (number from 1, start, stop, expected outcome)."""
    parts, lines, pos = [], [], 0
    for i, spec in enumerate(specs):
        if spec[0] == "rows":
            text = spec[2].encode() + scanner.request(spec[1], i) + spec[3].encode()
            outcome: Any = ("rows", spec[1])
        elif spec[0] == "blank":
            text, outcome = spec[1].encode(), ("blank",)
        elif spec[0] == "back":
            text, outcome = spec[1].encode(), ("back",)
        else:  # a good request followed by other text: the whole line goes back
            text, outcome = scanner.request(spec[1], i) + b" x", ("back",)
        parts.append(text)
        lines.append((i + 1, pos, pos + len(text), outcome))
        pos += len(text) + 1
    buf = b"\n".join(parts) + (b"\n" if final_newline else b"")
    return buf, lines


@needs_cscan
@pytest.mark.parametrize("scanner", SCANNERS, ids=repr)
@settings(max_examples=150, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=8), st.booleans(), st.integers(-5, 1000))
def test_each_line_read_skipped_or_handed_back_as_built(
    scanner: Scanner, specs: list[Any], final_newline: bool, first: int
) -> None:
    buf, lines = _build(scanner, specs, final_newline)
    got = scanner.report(scanner.scan(buf, first))
    off = first - 1
    want_rows = [(n + off, o[1]) for n, _, _, o in lines if o[0] == "rows"]
    assert got["rows"] == sum(k for _, k in want_rows)
    assert got["line_of"] == [n for n, k in want_rows for _ in range(k)]
    assert got["fallback"] == [(n + off, a, b) for n, a, b, o in lines if o[0] == "back"]
    assert got["long_line"] == 0
    # the walk's last line: the one before the final newline; without one, an empty last
    # line is no line (the walk ends at the buffer's end)
    empty_last = not final_newline and lines[-1][1] == lines[-1][2]
    assert got["last_line"] == len(lines) - empty_last + off


@needs_cscan
@pytest.mark.parametrize("scanner", SCANNERS, ids=repr)
@settings(max_examples=60, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=6), st.booleans())
def test_a_chunk_reads_as_its_lines_one_at_a_time(
    scanner: Scanner, specs: list[Any], final_newline: bool
) -> None:
    """Streaming equals batch: the whole chunk's columns are the lines' columns joined."""
    buf, lines = _build(scanner, specs, final_newline)
    whole = scanner.scan(buf)
    joined: list[Any] = []
    fallback = []
    for n, a, b, _ in lines:
        one = scanner.scan(buf[a:b], n)
        cols = scanner.columns(one)
        joined = cols if not joined else [x + y for x, y in zip(joined, cols)]
        fallback += [(n, a + s, a + e) for _, s, e in scanner.report(one)["fallback"]]
    assert scanner.columns(whole) == joined
    assert scanner.report(whole)["fallback"] == fallback


@needs_cscan
@pytest.mark.parametrize("scanner", SCANNERS, ids=repr)
def test_the_walk_stops_at_a_line_too_long(scanner: Scanner) -> None:
    short, long = scanner.request(1, 0), scanner.request(3, 1)
    buf = b"\n".join([short, b"", long, short]) + b"\n"
    got = scanner.report(scanner.scan(buf, 10, len(long) - 1))
    assert got == {"rows": 1, "line_of": [10], "fallback": [], "long_line": 12, "last_line": 12}
    # at exactly max_line bytes the line is read
    got = scanner.report(scanner.scan(buf, 10, len(long)))
    assert got["long_line"] == 0 and got["rows"] == 5 and got["last_line"] == 13


@needs_cscan
@pytest.mark.parametrize("scanner", SCANNERS, ids=repr)
def test_any_buffer_reads_alike_and_a_non_buffer_is_refused(scanner: Scanner) -> None:
    buf, _ = _build(scanner, [("rows", 2, "", ""), ("back", "{"), ("rows", 1, " ", "")], True)
    want = scanner.scan(buf)
    assert scanner.report(want)["rows"] == 3
    for other in (bytearray(buf), memoryview(buf), memoryview(b"xx" + buf)[2:]):
        assert scanner.scan(other) == want
    with pytest.raises(TypeError):
        scanner.scan("text")


def test_extension_is_built() -> None:
    """CI builds it (``pip install -e .`` compiles setup.py's optional extension)."""
    require(CSCAN is not None, "the compiled extractor otel_ext.analysis.loaders._cscan")
