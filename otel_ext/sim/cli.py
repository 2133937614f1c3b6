"""``otel-ext simulate``: run the simulated cluster and write its telemetry and ground truth.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_arguments(parser)
>>> args = parser.parse_args(["--hosts", "2", "--fault", "straggler@host1/chip0", "--out", "x"])
>>> config_from_args(args).faults
(Fault(kind='straggler', target='host1/chip0', factor=1.3),)
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from otel_ext.sim._config import SimConfig, parse_fault
from otel_ext.sim._run import run_simulation

__all__ = ["add_arguments", "config_from_args", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``otel-ext simulate``."""
    defaults = SimConfig()
    parser.add_argument(
        "--hosts", type=int, default=defaults.hosts, help="hosts (default %(default)s)"
    )
    parser.add_argument(
        "--chips", type=int, default=defaults.chips, help="chips per host (default %(default)s)"
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=defaults.requests,
        help="requests to serve (default %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="random seed (default %(default)s)"
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND@TARGET",
        help="inject a fault (repeatable): straggler@HOST/CHIP, throttle@HOST/CHIP, "
        "slow-link@HOST/CHIPA-CHIPB, slow-nic@HOST; an optional :FACTOR sets its severity",
    )
    parser.add_argument(
        "--mode",
        choices=("auto", "disaggregated", "replicas"),
        default=defaults.mode,
        help="serving layout (default: disaggregated with 2+ hosts)",
    )
    parser.add_argument("--topology", choices=("ring", "mesh"), default=defaults.topology)
    parser.add_argument(
        "--rate", type=float, default=defaults.arrival_rate, help="mean request arrivals per second"
    )
    parser.add_argument(
        "--layer-groups", type=int, default=defaults.layer_groups, help="layer groups per step"
    )
    parser.add_argument(
        "--no-timeline", action="store_true", help="skip the Perfetto timeline.json"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--out", required=True, help="output folder")


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The :class:`SimConfig` the arguments describe (validated).

    Raises:
        ConfigError: a bad fault spec or value.
    """
    faults = tuple(parse_fault(spec) for spec in args.fault)
    defaults = SimConfig()
    return SimConfig(
        hosts=args.hosts,
        chips=args.chips,
        requests=args.requests,
        seed=args.seed,
        faults=faults,
        mode=getattr(args, "mode", defaults.mode),
        topology=getattr(args, "topology", defaults.topology),
        arrival_rate=getattr(args, "rate", defaults.arrival_rate),
        layer_groups=getattr(args, "layer_groups", defaults.layer_groups),
    ).validated()


class _Progress:
    """Prints ``requests done/total, virtual time`` on one line, at most ten times a second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = 0.0
        self.tty = stream.isatty()
        self.finished = False

    def __call__(self, done: int, total: int, virtual_s: float) -> None:
        now = time.monotonic()
        if self.finished or (now - self.last < (0.1 if self.tty else 2.0) and done < total):
            return
        self.finished = done >= total
        self.last = now
        end = "\r" if self.tty and done < total else "\n"
        self.stream.write(f"simulate: {done}/{total} requests, {virtual_s:.2f} s simulated{end}")
        self.stream.flush()


def run(args: argparse.Namespace) -> int:
    """Run ``otel-ext simulate``; returns the exit status."""
    config = config_from_args(args)
    progress = None if args.quiet else _Progress(sys.stderr)
    result = run_simulation(config, args.out, progress=progress, timeline=not args.no_timeline)
    if not args.quiet:
        print(
            f"simulate: {result.requests} requests on {config.hosts}x{config.chips} chips, "
            f"{result.virtual_seconds:.2f} s simulated in {result.wall_seconds:.1f} s: "
            f"{result.spans} spans, {result.metric_points} metric points",
            file=sys.stderr,
        )
        for name, path in sorted(result.files.items()):
            print(f"  {name}: {path}", file=sys.stderr)
    return 0
