"""How long a thread that needs the GIL waits while a busy Python thread holds it.

Run: ``python benchmarks/gil_yield.py [--seconds 1.0] [--every 16]``.

A background thread does pure-Python work for ``--seconds`` (as the collective drain does when
it makes spans), once without giving the GIL away and once calling ``time.sleep(0)`` every
``--every`` units of work (what the drain does every 16 records). Meanwhile the main thread
sleeps 0.2 ms again and again (it drops the GIL and needs it back, as a workload does after a
call that released it); each wake-up's delay past its 0.2 ms is how long it waited for the
GIL. Prints the median and the largest wait for both, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time


def _busy(seconds: float, every: int) -> None:
    stop = time.monotonic() + seconds
    n = 0
    while time.monotonic() < stop:
        sum(range(200))  # a unit of pure-Python work, a few µs
        n += 1
        if every and n % every == 0:
            time.sleep(0)


def _waits(seconds: float, every: int) -> list[float]:
    worker = threading.Thread(target=_busy, args=(seconds, every))
    worker.start()
    waits = []
    while worker.is_alive():
        t0 = time.perf_counter()
        time.sleep(0.0002)
        waits.append(time.perf_counter() - t0 - 0.0002)
    worker.join()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=16)
    args = parser.parse_args()
    rows = {}
    for label, every in (
        ("never gives the GIL away", 0),
        (f"sleep(0) every {args.every}", args.every),
    ):
        w = _waits(args.seconds, every)
        rows[label] = statistics.median(w)
        print(
            f"busy thread {label:28s}: median wait {statistics.median(w) * 1e3:7.3f} ms, "
            f"largest {max(w) * 1e3:7.3f} ms, {len(w)} wake-ups"
        )
    a, b = rows.values()
    print(f"median wait, yielding / not yielding: {b / a:.3f}x")


if __name__ == "__main__":
    main()
