"""The ``otel-ext`` command: a thin dispatcher to the subcommands.

Each subcommand lives beside the code it drives, in a module exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them up, turns
bad arguments into one-line errors and :class:`~otel_ext.errors.OtelExtError` into a
one-line message with a non-zero exit status (never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from otel_ext import __version__, config
from otel_ext.errors import OtelExtError

__all__ = ["SUBCOMMANDS", "main"]

#: subcommand -> (module implementing it, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "otel_ext.demo",
        "run the simulated cluster, analyse it and report what holds it back",
    ),
    "simulate": ("otel_ext.sim.cli", "run the simulated multi-host accelerator cluster"),
    "analyze": ("otel_ext.analysis.cli", "analyse traces and counters into ranked findings"),
    "exporter": ("otel_ext.counters.cli", "serve hardware, host and link counters on /metrics"),
    "semconv": ("otel_ext.semconv.cli", "check, generate, list and query the registry"),
}


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (each costs its own imports: the
    analysis alone needs none of the simulator's, the exporter's or the registry's)."""
    parser = _OneLineParser(
        prog="otel-ext",
        description="Performance telemetry for multi-accelerator AI systems.",
    )
    parser.add_argument("--version", action="version", version=f"otel-ext {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name != command:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            sp.set_defaults(_run=None, _missing=name)
            continue
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``otel-ext`` command line.

    Args:
        argv: the arguments after the program name (defaults to ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 on an otel-ext error, 2 on bad arguments.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(command)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args._run is None:
        print(f"otel-ext {args._missing}: not available in this version yet", file=sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except OtelExtError as exc:
        one_line = " ".join(str(exc).split())
        print(f"otel-ext {args.command}: error: {one_line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"otel-ext {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`otel-ext semconv list | head`): stop quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141

    except Exception as exc:
        # a bug of ours, not bad input: one line, and the traceback on request
        if config.resolve(config.DEBUG):
            raise
        print(
            f"otel-ext {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(a bug: OTEL_EXT_DEBUG=true shows the traceback; please report it)",
            file=sys.stderr,
        )
        return 70


if __name__ == "__main__":
    sys.exit(main())
