"""Run Holistic Trace Analysis 0.5.0 on one folder of traces and print its numbers as JSON.

Runs in HTA's own virtual environment (pandas < 3, numpy < 2), never in the project's:
``/tmp/otel-ext-hta-venv/bin/python benchmarks/hta_runner.py FOLDER``. Prints
``{"temporal": [...], "overlap": [...], "seconds": s, "maxrss_kb": k}``. Timestamps are kept
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


def main() -> None:
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
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"temporal": temporal, "overlap": overlap, "seconds": seconds, "maxrss_kb": maxrss}
        )
    )


if __name__ == "__main__":
    main()
