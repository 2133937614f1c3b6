"""Shared fixtures: in-memory OpenTelemetry pipelines and the integration-test gate."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_ext import config

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces" / "pytorch-profiler"


@pytest.fixture(autouse=True)
def _fresh_drop_ledger() -> Iterator[None]:
    """Each test starts with the process-wide drop ledger empty: a drop an earlier test
    counted (and the ledger exports to every meter provider it was bound to) is not this
    test's."""
    from otel_ext._drops import LEDGER

    LEDGER.reset()
    yield


def require(condition: bool, what: str) -> None:
    """Skip the calling test when ``condition`` is false, or fail it when CI requires integration.

    Args:
        condition: whether the real part the test needs is present.
        what: the missing part, for the message.
    """
    if condition:
        return
    if config.resolve(config.REQUIRE_INTEGRATION):
        pytest.fail(f"integration part missing and OTEL_EXT_REQUIRE_INTEGRATION=true: {what}")
    pytest.skip(f"integration part missing: {what}")


def require_binary(name: str) -> str:
    """Return the path of executable ``name``, or skip/fail as :func:`require` does."""
    path = shutil.which(name)
    require(path is not None, f"executable {name!r} not on PATH")
    assert path is not None
    return path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_prometheus(
    prometheus: str, tmp_path: Path, targets: dict[str, int], *, exemplars: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """A real Prometheus scraping ``targets`` (job name -> port on 127.0.0.1) every second,
    its data under ``tmp_path``; returns the process (the caller stops it) and its API URL."""
    port = free_port()
    jobs = "".join(
        f"  - {{job_name: {job}, static_configs: [{{targets: ['127.0.0.1:{p}']}}]}}\n"
        for job, p in targets.items()
    )
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n" + jobs
    )
    args = [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    if exemplars:
        args.append("--enable-feature=exemplar-storage")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}/api/v1"


def make_cert(tmp_path: Path, openssl: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made by the real ``openssl`` (the
    caller's ``require_binary("openssl")``, so that the test file is the one named for it)."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def shared_traces() -> Path:
    """The folder of real PyTorch profiler traces (``../shared/traces/pytorch-profiler``)."""
    require(SHARED_TRACES.is_dir(), f"real traces folder {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.fixture
def span_exporter() -> Iterator[object]:
    """A tracer provider wired to an in-memory exporter: yields ``(provider, exporter)``."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()
