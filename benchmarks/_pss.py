"""Peak proportional memory of a process and its pool workers, sampled every 10 ms.

Used alike by ``analysis_load.py``'s measured script (ours) and by ``hta_runner.py`` (HTA, in
its own virtual environment), so both tools' memory is measured the same way: shared pages
counted once, workers included (both parse files in process pools). Standard library only.
"""

from __future__ import annotations

import os
import threading


def _pss_kb(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def start_pss_sampler() -> tuple[list[int], threading.Event]:
    """Start sampling this process and its children; returns ``([peak_kb], stop)``."""
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        me = str(os.getpid())
        while not stop.wait(0.01):
            kids: list[str] = []
            for task in os.listdir(f"/proc/{me}/task"):
                try:
                    with open(f"/proc/{me}/task/{task}/children") as f:
                        kids += f.read().split()
                except OSError:
                    pass
            peak[0] = max(peak[0], _pss_kb(me) + sum(_pss_kb(k) for k in kids))

    threading.Thread(target=sample, daemon=True).start()
    return peak, stop
