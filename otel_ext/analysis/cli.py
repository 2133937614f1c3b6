"""``otel-ext analyze PATH... [--format text|json|html|perfetto] [--out FILE]
[--timeline FILE] [--keep-going] [--scheduler ADDRESS]``.

Loads every recognised telemetry file under the paths (folders included; derived outputs and
ground truth are left out with a line saying so), runs the analyses and writes the report to
stdout or ``--out``. Progress goes to stderr: a live bar when stderr is a terminal, otherwise
one final line. Bad input is one line naming the file, the record and the problem, and exit
status 1 (the dispatcher prints :class:`~otel_ext.errors.OtelExtError`); never a traceback.
``--format perfetto --out FILE`` writes the merged, clock-aligned timeline of every rank
(:mod:`otel_ext.analysis.report.timeline`) instead of a report; ``--timeline FILE`` writes it beside
the report, and an HTML report then links to it. ``--scheduler`` (default ``OTEL_EXT_DASK_SCHEDULER``) reads the files on a Dask cluster
(:mod:`otel_ext.analysis.scaleout.dask_cluster`); a malformed address, or Dask not installed, is one
line and exit status 2, as other usage errors.

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_arguments(p)
>>> a = p.parse_args(["trace.json", "--format", "json"])
>>> a.paths, a.format, a.keep_going, a.scheduler
(['trace.json'], 'json', False, None)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from otel_ext.analysis.report.sections import InputEntry, SkippedEntry, TimelineSection
from otel_ext.errors import ConfigError, InputError, OtelExtError

if TYPE_CHECKING:
    from otel_ext.analysis.report.timeline import TimelineFile

__all__ = ["ProgressBar", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``analyze`` options on ``parser``."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="telemetry files or folders")
    parser.add_argument(
        "--format",
        choices=("text", "json", "html", "perfetto"),
        default="text",
        help="report format; perfetto: the merged, clock-aligned trace-event timeline of every "
        "rank (needs --out; a .gz name is gzipped)",
    )
    parser.add_argument("--out", metavar="FILE", help="write the report here (default: stdout)")
    parser.add_argument(
        "--timeline",
        metavar="FILE",
        default=None,
        help="also write the merged Perfetto timeline here (the HTML report links to it)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="load what is valid; list the bad files and records that were skipped",
    )
    parser.add_argument(
        "--workers", type=int, default=None, metavar="N", help="loader processes (default: cores)"
    )
    parser.add_argument(
        "--device-model", default=None, help="device model for roofline peaks (registry name)"
    )
    parser.add_argument(
        "--steps",
        default="complete",
        metavar="SEL",
        help="profiler steps analysed: complete (default: each trace's last step dropped, as "
        "HTA does), all, N or N-M",
    )
    clocks = parser.add_mutually_exclusive_group()
    clocks.add_argument(
        "--same-clock",
        action="store_true",
        help="every rank's times are on one clock (one host): no per-rank clock shifts",
    )
    clocks.add_argument(
        "--host-of",
        metavar="SPEC",
        default=None,
        help="ranks sharing a clock, e.g. '0-3=hostA;4-7=hostB' (one correction per host)",
    )
    parser.add_argument(
        "--one-run",
        action="store_true",
        help="analyse every file as one run (default: separate captures are separate runs)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="read the files and run the per-file passes on a Dask cluster: local:N (N local "
        "worker processes), tcp://HOST:PORT of a running scheduler, or a scheduler file "
        "(default: OTEL_EXT_DASK_SCHEDULER; needs the dask extra)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress or notes on stderr")


class ProgressBar:
    """Loading progress on a stream: redrawn in place on a terminal, else one final line.

    >>> import io
    >>> buf = io.StringIO()
    >>> bar = ProgressBar(buf, tty=False)
    >>> bar(1, 2, "a.json"); bar(2, 2, "b.json"); bar.close()
    >>> buf.getvalue()
    'loaded 2/2 files\\n'
    """

    def __init__(self, stream: IO[str], *, tty: bool | None = None, width: int = 30) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.width = width
        self.done = 0
        self.total = 0
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int, path: str) -> None:
        self.done, self.total = done, total
        if not self.tty:
            return
        filled = int(self.width * done / total) if total else self.width
        bar = "#" * filled + "-" * (self.width - filled)
        name = os.path.basename(path)[-40:]
        self.stream.write(f"\rloading [{bar}] {done}/{total} {name:<40}")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.total:
            self.stream.write("\r" + " " * (self.width + 60) + "\r")
        if self.total:
            secs = time.monotonic() - self.t0
            tail = f" in {secs:.1f} s" if self.tty else ""
            self.stream.write(f"loaded {self.done}/{self.total} files{tail}\n")
        self.stream.flush()


def _render(doc: dict[str, Any], fmt: str) -> str:
    """The report in format ``fmt`` (json, html or text)."""
    if fmt == "json":
        from otel_ext.analysis.engine import to_json

        return to_json(doc) + "\n"
    if fmt == "html":
        from otel_ext.analysis.report.html import render_html

        return render_html(doc)
    from otel_ext.analysis.report.text import render_text

    return render_text(doc)


def _timeline_path(args: argparse.Namespace) -> str | None:
    """Where the timeline goes: ``--out`` for ``--format perfetto``, else ``--timeline``."""
    if args.format == "perfetto":
        return str(args.out) if args.out else None
    return getattr(args, "timeline", None) or None


def run(args: argparse.Namespace) -> int:
    """Run ``otel-ext analyze``; returns the exit status.

    Raises:
        OtelExtError: bad input (the dispatcher turns it into one line and status 1).
    """
    quiet = bool(getattr(args, "quiet", False))
    scheduler = _scheduler(args)
    if scheduler is None:
        return 2
    timeline_path = _timeline_path(args)
    if args.format == "perfetto" and not timeline_path:
        print("otel-ext analyze: error: --format perfetto needs --out FILE", file=sys.stderr)
        return 2
    bar = None if quiet else ProgressBar(sys.stderr)
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers must be at least 1")
    timeline = None
    if timeline_path:
        from otel_ext.analysis.report.timeline import TimelineFile

        timeline = TimelineFile(timeline_path)
    try:
        doc = _analyze(args, scheduler=scheduler, bar=bar, timeline=timeline)
    finally:
        if bar is not None:
            bar.close()
    if not quiet:
        _print_left_out(doc.get("inputs", []), doc.get("skipped", []))
    if not any(i.get("status") == "loaded" for i in doc.get("inputs", [])):
        raise InputError(
            "no telemetry loaded (no recognised file, or every file was left out)",
            path=", ".join(str(p) for p in args.paths),
        )
    if timeline is not None:
        _note_timeline(doc["timeline"], timeline, out=args.out, quiet=quiet)
    if args.format == "perfetto":
        return 0
    _write_report(_render(doc, args.format), args, quiet=quiet)
    return 0


def _scheduler(args: argparse.Namespace) -> str | None:
    """The Dask scheduler address (``""``: none), checked before any file is read; None
    (after a line on stderr) for a malformed address or Dask not installed."""
    from otel_ext.config import DASK_SCHEDULER, resolve

    scheduler = resolve(DASK_SCHEDULER, getattr(args, "scheduler", None)).strip()
    if scheduler:
        from otel_ext.analysis.scaleout.dask_cluster import parse_scheduler, require_distributed

        try:  # usage errors, before any file is read
            parse_scheduler(scheduler)
            require_distributed()
        except ConfigError as e:
            print(f"otel-ext analyze: error: {e}", file=sys.stderr)
            return None
    return scheduler


def _analyze(
    args: argparse.Namespace,
    *,
    scheduler: str,
    bar: ProgressBar | None,
    timeline: TimelineFile | None,
) -> dict[str, Any]:
    """The analysis of ``args.paths`` with the command line's options."""
    from otel_ext.analysis.cross.alignment import parse_host_of
    from otel_ext.analysis.engine import analyze

    clock_of = None
    if getattr(args, "host_of", None):
        clock_of = parse_host_of(args.host_of)
    return analyze(
        args.paths,
        keep_going=args.keep_going,
        progress=bar,
        workers=args.workers,
        device_model=args.device_model,
        steps=getattr(args, "steps", "complete"),
        same_clock=bool(getattr(args, "same_clock", False)),
        clock_of=clock_of,
        one_run=bool(getattr(args, "one_run", False)),
        scheduler=scheduler,
        timeline=timeline,
    )


def _print_left_out(inputs: list[InputEntry], skipped: list[SkippedEntry]) -> None:
    """On stderr: the files left out (with a note), and the bad files and records skipped."""
    for item in inputs:
        if item.get("status") != "loaded" and item.get("note"):
            print(f"left out {item['path']}: {item['note']}", file=sys.stderr)
    bad = [s for s in skipped if not str(s.get("reason", "")).startswith("left out")]
    if bad:
        total = sum(int(s.get("count", 1)) for s in bad)
        print(f"skipped {total} bad files or records (--keep-going):", file=sys.stderr)
        for s in bad[:20]:
            print(f"  {s['path']}: {s['record']}: {s['reason']}", file=sys.stderr)


def _note_timeline(
    section: TimelineSection, timeline: TimelineFile, *, out: str | None, quiet: bool
) -> None:
    """Say where the timeline went; link the report's ``timeline`` section to it when the
    report is a file."""
    done = timeline.summary
    if done is not None and not quiet:
        print(
            f"wrote the timeline to {done['path']} ({done['events']} events, "
            f"{sum(done['flows'].values())} flows, {done['findings']} findings)",
            file=sys.stderr,
        )
    if out:  # the report links to the timeline beside it
        section["link"] = os.path.relpath(str(timeline.path), os.path.dirname(os.path.abspath(out)))


def _write_report(text: str, args: argparse.Namespace, *, quiet: bool) -> None:
    """The report to ``--out`` (saying so on stderr), else to stdout."""
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as e:
            raise OtelExtError(f"cannot write the report: {e.strerror or e}", path=args.out) from e
        if not quiet:
            print(f"wrote {args.format} report to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
