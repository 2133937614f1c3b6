"""``otel-ext demo``: run the simulated cluster, analyse it, and report what holds it back.

(The full demo is assembled once the simulated cluster and the analysis engine land.)
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="otel-ext-demo", help="output folder")


def run(args: argparse.Namespace) -> int:
    print(
        "otel-ext demo: the simulated-cluster demo is not built yet in this version; "
        "`otel-ext semconv list` shows the registry in the meantime.",
        file=sys.stderr,
    )
    return 0
