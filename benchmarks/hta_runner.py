"""Run Holistic Trace Analysis 0.5.0 on one folder of traces and print its numbers as JSON.

Runs in HTA's own virtual environment (pandas < 3, numpy < 2), never in the project's:
``/tmp/otel-ext-hta-venv/bin/python benchmarks/hta_runner.py FOLDER``. Prints
``{"temporal": [...], "overlap": [...], "seconds": s, "maxrss_kb": k, "cpu": s}`` (``seconds``
from after the import of HTA; ``cpu``: the CPU seconds of the process and of its pool's
workers; ``sampled_total_kb``: the peak, sampled every 10 ms, of their PSS together). Timestamps are kept
at the traces' own resolution (``HTA_DISABLE_NS_ROUNDING=1``).
"""

import json
import logging
import os
import resource
import sys
import time

os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
logging.disable(logging.CRITICAL)

from _pss import start_pss_sampler  # noqa: E402  (benchmarks/, this script's folder)


def main() -> None:
    peak, stop = start_pss_sampler()  # this process and its pool workers, every 10 ms
    from hta.trace_analysis import TraceAnalysis

    folder = sys.argv[1]
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=folder)
    tb = analyzer.get_temporal_breakdown(visualize=False)
    try:
        ov = analyzer.get_comm_comp_overlap(visualize=False)
        overlap = [
            {
                "rank": int(r["rank"]),
                "overlap_pct": None
                if r["comp_comm_overlap_pctg"] != r["comp_comm_overlap_pctg"]
                else float(r["comp_comm_overlap_pctg"]),
            }
            for _, r in ov.iterrows()
        ]
    except Exception as e:  # HTA fails on ranks without communication
        overlap = [{"error": repr(e)}]
    seconds = time.perf_counter() - t0
    temporal = [
        {
            "rank": int(r["rank"]),
            "idle_us": float(r["idle_time(us)"]),
            "compute_us": float(r["compute_time(us)"]),
            "non_compute_us": float(r["non_compute_time(us)"]),
            "kernel_us": float(r["kernel_time(us)"]),
            "idle_pct": float(r["idle_time_pctg"]),
            "compute_pct": float(r["compute_time_pctg"]),
            "non_compute_pct": float(r["non_compute_time_pctg"]),
        }
        for _, r in tb.iterrows()
    ]
    stop.set()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "temporal": temporal,
                "overlap": overlap,
                "seconds": seconds,
                "maxrss_kb": usage.ru_maxrss,
                "children_kb": kids.ru_maxrss,
                "sampled_total_kb": peak[0],
                "cpu": usage.ru_utime + usage.ru_stime + kids.ru_utime + kids.ru_stime,
            }
        )
    )


if __name__ == "__main__":
    main()
