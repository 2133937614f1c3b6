"""Benchmark: the merged timeline's writer from 64 to 512 ranks, against linear scaling.

    python benchmarks/analysis_timeline.py [--ranks 64,128,256,512] [--collectives 40]
                                           [--steps 4] [--kernels 10] [--repeat 2]
                                           [--timeout 600]

Each size is ``benchmarks/analysis_scale.py``'s synthetic table (the same work on every
rank, 8 ranks a host, each host's clock off by a few milliseconds, one straggler). Each size
runs in fresh subprocesses: ``analyze(table)`` alone (the baseline, measured in the same
run), and ``analyze(table, timeline=TimelineFile(...))``; each analyses the table twice,
once timed (CPU seconds) and once under ``tracemalloc`` (the peak of traced allocations,
numpy's included, above what was allocated before). Printed per size: rows; the analysis's
CPU seconds; the writer's CPU seconds (the timeline callback alone) and its share of the
analysis; the file's size; the rows parked on disk for the writer (memory-mapped, so not in
the traced allocations); the analysis's own memory peak, what the timeline adds to it in MB
and %, and the writer's own transient peak; and the
writer's CPU seconds and its transient memory against linear scaling from the smallest size,
``(x(n) / x(n0)) / (n / n0)`` (1.0 = linear; the issue asks for at most 1.3). With
``--repeat`` the run with the least CPU is kept. ``--gzip`` writes ``.json.gz``.

``--formats N`` answers "would a protobuf ``.pftrace`` pay?" on the N-rank timeline: the
written JSON's events encoded as Perfetto ``TracePacket`` s (a minimal hand-written encoder of
the wire format: interned event names, one track descriptor per thread track, a slice as
``SLICE_BEGIN``/``SLICE_END`` packets with their timestamps, the arguments as debug
annotations, flows as ``flow_ids``), against the JSON writer: bytes per event plain and
gzipped, and CPU per event of each encoder (both pure Python).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(args: argparse.Namespace) -> None:
    """One size, one mode: build the table, analyse it (with the timeline or not), print JSON."""
    import tracemalloc

    from analysis_scale import make_table

    from otel_ext.analysis.engine import analyze
    from otel_ext.analysis.report.timeline import TimelineFile

    analyze(make_table(16, collectives=args.steps, steps=args.steps, kernels=2))  # warm-up
    table = make_table(
        args.child, collectives=args.collectives, steps=args.steps, kernels=args.kernels
    )
    # CPU s, own transient MB, the traced peak before it (bytes), parked MB on disk
    writer = [0.0, 0.0, 0.0, 0.0]
    out = Path(args.out) if args.out else None

    def make_timeline() -> Any:
        if out is None:
            return None
        inner = TimelineFile(out)

        def timeline(inputs: Any) -> dict[str, Any]:
            park = inputs.rows.meta.get("timeline_park")
            if park is not None:
                writer[3] = sum(f.stat().st_size for f in Path(park.name).iterdir()) / 2**20
            c0 = time.process_time()
            if tracemalloc.is_tracing():
                here, writer[2] = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
            try:
                return inner(inputs)
            finally:
                if tracemalloc.is_tracing():  # the writer's own transient memory
                    writer[1] = (tracemalloc.get_traced_memory()[1] - here) / 2**20
                else:
                    writer[0] = time.process_time() - c0

        return timeline

    c0 = time.process_time()
    doc = analyze(table, timeline=make_timeline())
    cpu = time.process_time() - c0
    tracemalloc.start()  # a second run for memory (traced allocations: numpy's included)
    base = tracemalloc.get_traced_memory()[0]
    analyze(table, timeline=make_timeline())
    peak = (max(tracemalloc.get_traced_memory()[1], writer[2]) - base) / 2**20
    tracemalloc.stop()
    print(
        json.dumps(
            {
                "rows": len(table),
                "table_mb": table.nbytes() / 2**20 if hasattr(table, "nbytes") else 0.0,
                "cpu_s": cpu,
                "writer_cpu_s": writer[0],
                "writer_mb": writer[1],
                "parked_mb": writer[3],
                "peak_mb": peak,
                "file_mb": out.stat().st_size / 2**20 if out is not None else 0.0,
                "events": (doc.get("timeline") or {}).get("events", 0),
            }
        )
    )


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, payload: bytes | int) -> bytes:
    """A protobuf field: a varint (int) or length-delimited (bytes) value."""
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def pftrace_of(trace: dict[str, Any], base: int) -> bytes:
    """The JSON timeline's events as Perfetto trace packets (field numbers of perfetto's
    trace_packet.proto, track_event.proto, track_descriptor.proto, interned_data.proto)."""
    from otel_ext.analysis.loaders import us_to_ns

    f = _field
    seq = f(10, 1)  # trusted_packet_sequence_id
    out = bytearray()
    names: dict[str, int] = {}
    tracks: dict[tuple[int, int], int] = {}
    flow_of: dict[tuple[str, int], int] = {}
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f"):
            flow_of[(e["cat"], e["id"])] = len(flow_of) + 1
    for e in trace["traceEvents"]:
        ph = e["ph"]
        if ph not in ("X", "i", "C"):
            continue
        key = (e["pid"], e.get("tid", 0))
        uuid = tracks.get(key)
        if uuid is None:
            uuid = tracks[key] = len(tracks) + 1
            desc = f(1, uuid) + f(2, f"{key[0]}/{key[1]}".encode())
            out += f(1, f(60, desc) + seq)  # track_descriptor
        name = str(e.get("name", ""))
        iid = names.get(name)
        interned = b""
        if iid is None:
            iid = names[name] = len(names) + 1
            interned = f(12, f(2, f(1, iid) + f(2, name.encode())))  # interned_data.event_names
        args = b"".join(
            f(4, f(10, str(k).encode()) + f(6, json.dumps(v).encode()))  # debug annotations
            for k, v in (e.get("args") or {}).items()
        )
        ts = base + int(us_to_ns(str(e["ts"])) or 0)
        kind = {"X": 1, "i": 3, "C": 4}[ph]
        ev = f(9, kind) + f(11, uuid) + f(10, iid) + args
        out += f(1, f(8, ts) + f(11, ev) + seq + interned)
        if ph == "X":
            end = ts + int(us_to_ns(str(e["dur"])) or 0)
            out += f(1, f(8, end) + f(11, f(9, 2) + f(11, uuid)) + seq)
    for (_cat, _id), fid in flow_of.items():  # each flow's id on its two ends' packets
        out += f(1, f(11, f(47, fid)) + seq) * 2
    return bytes(out)


def formats(args: argparse.Namespace, ranks: int) -> None:
    """Bytes and CPU per event of the JSON timeline and of a protobuf encoding of it."""
    import gzip

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        got = _run(args, ranks, out)
        raw = Path(out).read_bytes()
        trace = json.loads(raw, parse_float=str)
        base = int(trace["baseTimeNanoseconds"])
        c0 = time.process_time()
        pb = pftrace_of(trace, base)
        pb_cpu = time.process_time() - c0
    n = len(trace["traceEvents"])
    rows = [
        ("json", len(raw), len(gzip.compress(raw, 6)), got["writer_cpu_s"]),
        ("pftrace", len(pb), len(gzip.compress(pb, 6)), pb_cpu),
    ]
    print(f"{ranks} ranks, {n} trace events (all kinds)")
    print(f"{'format':>8} {'B/event':>8} {'gz B/event':>10} {'us/event':>9} {'size/json':>9}")
    for name, size, gz, cpu in rows:
        print(
            f"{name:>8} {size / n:>8.1f} {gz / n:>10.1f} {cpu / n * 1e6:>9.2f} "
            f"{size / rows[0][1]:>9.2f}"
        )
    print(
        "us/event: json, the writer's CPU per event; pftrace, this minimal encoder's from the "
        "parsed JSON (times parsed again, arguments dumped one by one: an upper bound)"
    )


def _run(args: argparse.Namespace, ranks: int, out: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(ranks), "--collectives",
           str(args.collectives), "--steps", str(args.steps), "--kernels", str(args.kernels)]  # fmt: skip
    if out:
        cmd += ["--out", out]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if got.returncode:
        raise SystemExit(f"{ranks} ranks failed:\n{got.stderr[-3000:]}")
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="64,128,256,512")
    p.add_argument("--collectives", type=int, default=40)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--kernels", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--formats", type=int, default=0, metavar="N",
                   help="compare JSON and protobuf on the N-rank timeline, then stop")  # fmt: skip
    p.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if args.formats:
        formats(args, args.formats)
        return
    sizes = [int(x) for x in args.ranks.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            out = os.path.join(tmp, f"t{n}.json" + (".gz" if args.gzip else ""))
            plain = min((_run(args, n, None) for _ in range(args.repeat)),
                        key=lambda r: r["cpu_s"])  # fmt: skip
            withs = min((_run(args, n, out) for _ in range(args.repeat)),
                        key=lambda r: r["writer_cpu_s"])  # fmt: skip
            rows.append((n, plain, withs))
    n0, _, w0 = rows[0]
    print(
        f"{'ranks':>6} {'rows':>9} {'analysis s':>10} {'writer s':>9} {'share':>6} "
        f"{'file MB':>8} {'parked MB':>9} {'peak MB':>8} {'+tl MB':>7} {'+tl %':>6} "
        f"{'writer MB':>9} "
        f"{'writer/lin':>10} {'wMB/lin':>7}"
    )
    for n, plain, withs in rows:
        added = withs["peak_mb"] - plain["peak_mb"]
        lin = n / n0
        print(
            f"{n:>6} {plain['rows']:>9} {plain['cpu_s']:>10.2f} {withs['writer_cpu_s']:>9.2f} "
            f"{withs['writer_cpu_s'] / plain['cpu_s']:>6.2f} {withs['file_mb']:>8.1f} "
            f"{withs['parked_mb']:>9.1f} "
            f"{plain['peak_mb']:>8.1f} {added:>7.1f} {100 * added / plain['peak_mb']:>6.1f} "
            f"{withs['writer_mb']:>9.1f} "
            f"{withs['writer_cpu_s'] / w0['writer_cpu_s'] / lin:>10.2f} "
            f"{withs['writer_mb'] / w0['writer_mb'] / lin:>7.2f}"
        )
    print(
        "parked MB: the rows parked on disk for the writer (memory-mapped, not traced); peak "
        "MB: the analysis's own peak of traced allocations (tracemalloc); +tl: what the "
        "timeline adds to it; writer MB: the writer's own transient peak; /lin: "
        "(x(n)/x(n0))/(n/n0), 1.0 = linear"
    )


if __name__ == "__main__":
    main()
