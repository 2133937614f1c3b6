"""One rank of a real gloo job in which one rank stops before a collective (issue 31's tests).

Run as ``python tests/collective_hang_job.py RANK WORLD PORT OUT MODE`` (one process per
rank), with ``OTEL_EXT_ACTIVE_SPAN_DIR`` and ``OTEL_EXT_COLLECTIVE_HANG_S`` in the
environment. Every rank runs ``STEPS`` all-reduces of 1024 float32 under
``otel_ext.configure()`` (file exporter into ``OUT/rank<R>``) with the collective
instrumentor; then

* ``MODE=hang``: the last rank stops (sleeps) before its next all-reduce, the others enter it;
* ``MODE=desync``: the last rank issues a gather (to itself) at that sequence number, the
  others the usual all-reduce (gloo then waits on both sides).

With ``TORCH_FR_BUFFER_SIZE`` set, each rank also writes PyTorch's Flight Recorder ring as
JSON (``OUT/fr/fr_trace_rank_<R>.json``) at that point. Each rank prints ``entered <seq>``
(flushed) once it has issued its last call, or ``stopped <seq>`` for the rank that stops,
then waits to be killed.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

STEPS = 5


def dump_flight_recorder(out: str, rank: int) -> None:
    """PyTorch's Flight Recorder ring as JSON (``TORCH_FR_BUFFER_SIZE`` set): ``OUT/fr``."""
    if not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return
    import torch._C._distributed_c10d as c10d

    data = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    folder = os.path.join(out, "fr")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"fr_trace_rank_{rank}.json"), "wb") as f:
        f.write(data)


def main() -> None:
    rank, world, port, out, mode = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        sys.argv[5],
    )
    import torch
    import torch.distributed as dist

    from otel_ext.exporters import configure
    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    telemetry = configure(
        service_name="hang-job",
        traces_exporter="file",
        metrics_exporter="none",
        file_dir=os.path.join(out, f"rank{rank}"),
        set_global=True,
    )
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    inst = TorchDistributedInstrumentor()
    inst.instrument(tracer_provider=telemetry.tracer_provider)
    t = torch.ones(1024)
    for _ in range(STEPS):
        dist.all_reduce(t)
    telemetry.tracer_provider.force_flush()
    odd = rank == world - 1
    if mode == "hang" and odd:
        dump_flight_recorder(out, rank)
        print(f"stopped {STEPS}", flush=True)
        while True:
            time.sleep(3600)
    payload = torch.ones(1024)
    if mode == "desync" and odd:  # another op at the same seq (gloo waits: no size check)
        gathered = [torch.zeros(1024) for _ in range(world)]
        work = dist.gather(payload, gathered, dst=rank, async_op=True)
    else:
        work = dist.all_reduce(payload, async_op=True)
    dump_flight_recorder(out, rank)
    print(f"entered {STEPS}", flush=True)
    work.wait()
    print("completed", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
