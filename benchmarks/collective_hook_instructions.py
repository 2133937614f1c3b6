"""Instructions the collective hook adds per call, counted by valgrind (load-independent).

Run: ``python benchmarks/collective_hook_instructions.py [--calls 200]`` (needs ``valgrind``;
about 1.5 minutes per mode on 2 cores). Each mode runs in a fresh interpreter under
``valgrind --tool=callgrind`` with collection switched on only inside
``c10d::ProcessGroup::allreduce`` (everything from the process group's entry down: the
dispatcher, the recording kernel, the backend's enqueue; not the Python wrapper nor the
``wait()``), on a world-size-1 gloo group with a 1 KiB float32 payload:

* ``bare``: no hook;
* ``native-noctx``: the native recording kernels without the context read (no GIL section);
* ``native``: the native recording kernels as ``instrument()`` installs them;
* ``python-passthrough``: a Python kernel at ``AutogradCPU`` that only redispatches: the
  floor of the Python hook.

Wall-clock benchmarks on a shared machine swing by more than the hook costs; instruction
counts do not. Printed: instructions per call and added over ``bare``, same run; the top
inclusive costs of each hook are left in ``--out`` for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = ("bare", "native-noctx", "native", "python-passthrough")
WARMUP = 10


def _child(mode: str, calls: int) -> None:
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    t = torch.ones(256)
    keep: list[object] = []
    if mode.startswith("native"):
        from opentelemetry.context import _RUNTIME_CONTEXT  # type: ignore[attr-defined]

        from otel_ext.instrumentation.torch import _c10d_native
        from otel_ext.instrumentation.torch import _distributed as D

        module = _c10d_native.load()
        if module is None:
            raise SystemExit(f"native hook unavailable: {_c10d_native.STATUS}")
        specs = [
            (
                s.pg,
                -1 if s.payload is None else s.payload,
                D._ROLES[s.role],
                -1 if s.async_at is None else s.async_at,
                -1 if s.peer_at is None else s.peer_at,
                s.send,
                s.op in ("send", "recv"),
                -1,
            )
            for s in D._OPS.values()
        ]
        var = _RUNTIME_CONTEXT._current_context if mode == "native" else None
        hook = module.Hook(specs, 1 << 12, var)
        keys = list(D._DISPATCH_KEYS)
        keep += [hook, module.Installation(hook, [("c10d", n, keys) for n in D._OPS], [], keys)]
    elif mode == "python-passthrough":
        from _passthrough import passthrough_allreduce_kernel

        keep.append(passthrough_allreduce_kernel())
    for _ in range(WARMUP + calls):
        dist.all_reduce(t)
    os._exit(0)  # no teardown inside the measurement


def _count(mode: str, calls: int, out: Path) -> int:
    target = out / f"callgrind.{mode}.out"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=c10d::ProcessGroup::allreduce*",
        f"--callgrind-out-file={target}",
        sys.executable,
        __file__,
        "--child",
        mode,
        "--calls",
        str(calls),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    match = re.search(r"^summary: (\d+)", target.read_text() if target.exists() else "", re.M)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"{mode}: valgrind run failed:\n{proc.stderr[-3000:]}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--child", choices=MODES)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.calls)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found (Debian: apt-get install valgrind)")
    out = args.out or Path(tempfile.mkdtemp(prefix="otel-ext-callgrind-"))
    out.mkdir(parents=True, exist_ok=True)
    counted = {m: _count(m, args.calls, out) / (args.calls + WARMUP) for m in MODES}
    print(f"instructions per gloo all_reduce inside ProcessGroup::allreduce (callgrind, {out})")
    for mode, per in counted.items():
        added = per - counted["bare"]
        print(f"{mode:20s} {per:10.0f} {added:+10.0f} ({per / counted['bare']:.2f}x)")


if __name__ == "__main__":
    main()
