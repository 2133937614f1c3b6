"""Reports: the terminal text and the HTML page (rendered in real headless Chromium)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import require_binary
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analysis_findings import _run

from otel_ext.analysis.engine import analyze, to_json
from otel_ext.analysis.report.html import json_for_script, render_html
from otel_ext.analysis.report.text import render_text


@pytest.fixture(scope="module")
def throttle_doc() -> dict[str, Any]:
    return analyze(_run("throttle", "host0/chip3"))


def test_text_report_top_finding_first(throttle_doc: dict[str, Any]) -> None:
    text = render_text(throttle_doc)
    lines = text.splitlines()
    assert lines[1].startswith("Findings")
    assert " 1. throttle" in lines[2] and "host0/chip3" in lines[2]
    assert "1.80 -> 1.20 GHz" in lines[2]
    assert "Critical path:" in text and "Causality:" in text and "Ranks:" in text


def test_json_document_round_trips(throttle_doc: dict[str, Any]) -> None:
    doc = json.loads(to_json(throttle_doc))
    assert doc["findings"][0]["kind"] == "throttle"
    assert doc["collectives"]["count"] == 2 * 40


def test_html_is_self_contained(throttle_doc: dict[str, Any]) -> None:
    page = render_html(throttle_doc)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script src" not in page and "@import" not in page
    assert page.count("<svg") >= 2  # breakdown bars and critical path, written here
    assert 'id="heatmap"' in page and 'id="counters"' in page
    # data blob cannot close its script element early
    blob = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(blob)["counters"]["target"] == "host0/chip3"


def _png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) to an array: a tiny decoder."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1)
        cur = line.astype(np.int64)
        if f == 1:
            cur = cur.reshape(-1, bpp).cumsum(axis=0).reshape(-1) % 256
        elif f == 2:
            cur = (cur + prev) % 256
        elif f in (3, 4):
            c = bytearray(line.tobytes())
            p = prev.tolist()
            for i in range(stride):
                a = c[i - bpp] if i >= bpp else 0
                b = p[i]
                if f == 3:
                    c[i] = (c[i] + (a + b) // 2) & 0xFF
                else:
                    cc = p[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - cc), abs(a - cc), abs(a + b - 2 * cc)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else cc)
                    c[i] = (c[i] + pred) & 0xFF
            cur = np.frombuffer(bytes(c), dtype=np.uint8).astype(np.int64)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)[:, :, :3]


def _chromium(binary: str, page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr",
         "--v=0", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.integration
def test_html_renders_in_chromium(throttle_doc: dict[str, Any], tmp_path: Path) -> None:
    binary = require_binary("chromium")
    page = tmp_path / "report.html"
    page.write_text(render_html(throttle_doc))
    dom = _chromium(binary, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<title>ok</title>" in dom.stdout, re.findall(r"<title>.*?</title>", dom.stdout)
    # the script drew the heatmap (one cell per rank and bin) and the counter charts
    assert dom.stdout.count("<rect") > 8 * 60
    assert "accel.device.clock.frequency" in dom.stdout
    errors = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not errors, errors

    shot = tmp_path / "shot.png"
    res = _chromium(binary, page, tmp_path, f"--screenshot={shot}", "--window-size=900,700")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    pixels = _png_pixels(shot.read_bytes())
    assert pixels.shape[:2] == (700, 900)
    assert float(pixels.std()) > 10.0  # not a blank page
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 8  # the plots' colours

    # the check can fail: a blank page is blank
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    shot2 = tmp_path / "blank.png"
    _chromium(binary, blank, tmp_path, f"--screenshot={shot2}", "--window-size=300,200")
    assert float(_png_pixels(shot2.read_bytes()).std()) == 0.0


HOSTILE_IDS = [
    "host1<!--<script>",
    "h</script><script>document.title='x'</script>",
    "a&amp;<b>",
    "l\u2028s\u2029",
]


def _hostile_doc(doc: dict[str, Any], host_id: str) -> dict[str, Any]:
    """``doc`` with the top finding's counter target (a host id as a user wrote it) replaced."""
    out = json.loads(json.dumps(doc))
    counters = next(
        f["evidence"]["counters"] for f in out["findings"] if f.get("evidence", {}).get("counters")
    )
    counters["target"] = host_id
    counters["series"] = {f"{host_id}/{k}": v for k, v in counters["series"].items()}
    return out


@pytest.mark.parametrize("host_id", HOSTILE_IDS)
def test_embedded_json_escapes_script_breakers(throttle_doc: dict[str, Any], host_id: str) -> None:
    page = render_html(_hostile_doc(throttle_doc, host_id))
    blob = page.split('<script type="application/json" id="report-data">', 1)[1]
    blob = blob.split("</script>", 1)[0]
    # nothing that could end the element, open a comment or a reference survives in the block
    assert not set(blob) & {"<", ">", "&", "\u2028", "\u2029"}
    data = json.loads(blob)
    assert data["counters"]["target"] == host_id
    assert all(name.startswith(host_id + "/") for name in data["counters"]["series"])


@pytest.mark.integration
def test_hostile_host_id_keeps_page_script_in_chromium(
    throttle_doc: dict[str, Any], tmp_path: Path
) -> None:
    binary = require_binary("chromium")
    host_id = "host1<!--<script>"
    page = tmp_path / "hostile.html"
    page.write_text(render_html(_hostile_doc(throttle_doc, host_id)))
    dom = _chromium(binary, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<title>ok</title>" in dom.stdout, re.findall(r"<title>.*?</title>", dom.stdout)
    assert dom.stdout.count("<rect") > 8 * 60  # the heatmap was drawn
    assert "host1&lt;!--&lt;script&gt;/accel.device.clock.frequency" in dom.stdout

    # the check can fail: with only "</" escaped (the old block) the comment swallows the script
    text = page.read_text()
    start = text.index('id="report-data">') + len('id="report-data">')
    end = text.index("</script>", start)
    old_blob = json.dumps(json.loads(text[start:end])).replace("</", "<\\/")
    broken = tmp_path / "broken.html"
    broken.write_text(text[:start] + old_blob + text[end:])
    dom2 = _chromium(binary, broken, tmp_path, "--dump-dom")
    assert "<title>ok</title>" not in dom2.stdout


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )
)
def test_json_for_script_round_trips_without_script_breakers(value: Any) -> None:
    blob = json_for_script(value)
    assert not set(blob) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(blob) == value


def test_the_evidence_line_never_rounds_a_fraction_to_a_whole_number() -> None:
    from otel_ext.analysis.report.text import _evidence_line

    ev = {"host_wait_share": 0.99995, "whole": 1.0, "late_ns": 5156000.0, "idle_pct": 69.4397}
    assert (
        _evidence_line(ev) == "host_wait_share=0.99995, whole=1, late_ns=5.156e+06, idle_pct=69.44"
    )
