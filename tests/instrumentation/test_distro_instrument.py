"""`opentelemetry-instrument` sets up otel-ext: resource, bounded processor, instrumentors.

Runs the real ``opentelemetry-instrument`` command (from the venv) on a small script; the
distro and configurator come from otel-ext's entry points, with no ``opentelemetry-distro``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import require

from otel_ext.exporters import read_spans

SCRIPT = """
import json
from opentelemetry import trace
from otel_ext.instrumentation import device_attributes, layer
from otel_ext.instrumentation.torch import TorchLayerInstrumentor

provider = trace.get_tracer_provider()
processors = [type(p).__name__ for p in provider._active_span_processor._span_processors]
with layer("blocks.0", index=0, attributes=device_attributes("chip0")):
    pass
print(json.dumps({"processors": processors,
                  "torch_layers": TorchLayerInstrumentor().is_instrumented_by_opentelemetry}))
"""


def test_opentelemetry_instrument_uses_otel_ext_configure(tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("opentelemetry-instrument")
    require(command.exists(), f"{command}")
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_TRACES_EXPORTER": "file",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXT_FILE_DIR": str(tmp_path / "out"),
        "OTEL_EXT_ACTIVE_SPAN_DIR": str(tmp_path / "spans"),
        "OTEL_EXT_HOST_ID": "node9",
        "OTEL_SERVICE_NAME": "trainer",
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
    }
    done = subprocess.run(
        [str(command), sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "processors": [
            "BackgroundSpanDrain",
            "ActiveSpanPublishingProcessor",
            "BoundedBatchSpanProcessor",
        ],
        "torch_layers": True,
    }
    (span,) = read_spans(tmp_path / "out" / "traces.jsonl")
    assert span.name == "accel.layer"
    assert {k: span.resource[k] for k in span.resource if k.startswith("accel.")} == {
        "accel.host.id": "node9",
        "accel.rank": 5,
        "accel.world_size": 8,
        "accel.local_rank": 1,
        "accel.device.id": "node9/chip1",
    }
    assert span.resource["service.name"] == "trainer"
    assert list((tmp_path / "spans").iterdir()) == []  # the records went at exit


def test_resource_detector_entry_point(monkeypatch) -> None:
    from opentelemetry.sdk.resources import Resource

    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "otel_ext_accelerator")
    monkeypatch.setenv("OTEL_EXT_HOST_ID", "node4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    attrs = Resource.create().attributes
    assert attrs["accel.host.id"] == "node4" and attrs["accel.device.id"] == "node4/chip3"


def test_opentelemetry_instrument_without_a_collector_says_so_once(tmp_path: Path) -> None:
    import socket

    command = Path(sys.executable).with_name("opentelemetry-instrument")
    require(command.exists(), f"{command}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nobody listens here
    script = tmp_path / "app.py"
    script.write_text(
        "from otel_ext.instrumentation import layer\n"
        "for i in range(50):\n"
        "    with layer('blocks.0', index=0):\n"
        "        pass\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",  # the spec's default: otlp
        "OTEL_EXT_ACTIVE_SPAN_DIR": str(tmp_path / "spans"),
    }
    done = subprocess.run(
        [str(command), sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert not [line for line in lines if "Transient error" in line]
    (line,) = [line for line in lines if "OTLP collector" in line]
    assert f"127.0.0.1:{port}" in line and "OTEL_TRACES_EXPORTER=file" in line
