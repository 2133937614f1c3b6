"""What every finding rule shares: the run's facts (names, length, coverage, counters) and the
way the report prints numbers.

>>> ctx = RuleContext(names={3: ("host1", "host1/chip2")}, run_ns=4_000_000)
>>> ctx.device_of(3), ctx.device_of(4), ctx.pct(1_000_000)
('host1/chip2', 'rank4', 25.0)
>>> ms(1_234_567), p_text(0.00098), p_text(0.5), p_text(1e-9), bandwidth(12e6)
('1.235 ms', '0.00098', '0.5', '<1e-06', '12.0 MB/s')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_ext.analysis.cross.collective_match import CollectiveMatch
from otel_ext.analysis.findings.finding import Thresholds
from otel_ext.analysis.loaders.metrics import MetricPoints

__all__ = ["RuleContext", "bandwidth", "ms", "p_text"]


@dataclass(frozen=True)
class RuleContext:
    """The run-level facts a rule needs besides its own evidence.

    Attributes:
        names: rank -> (host, device) names.
        run_ns: the run's length (for ``impact_pct``).
        thresholds: where numbers become findings.
        coverage: per collective group, the share of its collectives traced (1.0 unknown).
        metrics: the loaded metric points when any were loaded (counter evidence), else None.
    """

    names: dict[int, tuple[str, str]] = field(default_factory=dict)
    run_ns: int = 0
    thresholds: Thresholds = field(default_factory=Thresholds)
    coverage: dict[str, float] | None = None
    metrics: MetricPoints | None = None

    def pct(self, ns: float) -> float:
        """``ns`` as a percentage of the run (0 for a run of no length)."""
        return 100.0 * ns / self.run_ns if self.run_ns > 0 else 0.0

    def device_of(self, rank: int) -> str:
        """A rank's device as telemetry names it (``host/rankN`` or ``rankN`` without one)."""
        host, dev = self.names.get(rank, ("", ""))
        return dev or (f"{host}/rank{rank}" if host else f"rank{rank}")

    def covered(self, group: str | None) -> float:
        """The traced share of a group's collectives (1.0 when unknown, never below 0.001)."""
        if not self.coverage or group is None:
            return 1.0
        return min(1.0, max(self.coverage.get(group, 1.0), 1e-3))


def group_of(match: CollectiveMatch, rank: int) -> str | None:
    """The collective group a rank meets its peers in most often."""
    inst = match.member_instance[match.member_rank == rank]
    if len(inst) == 0:
        return None
    groups = [match.group[int(i)] for i in inst]
    return max(set(groups), key=groups.count)


def ms(ns: float) -> str:
    """Nanoseconds as the report prints them: ``1.235 ms``."""
    return f"{ns / 1e6:.3f} ms"


def p_text(p: float) -> str:
    """A p-value as the report prints it: ``0.0098``, ``<1e-06``, ``1``."""
    if p < 1e-6:
        return "<1e-06"
    return f"{p:.2g}" if p < 0.01 else f"{p:.2f}".rstrip("0").rstrip(".")


def pct_text(x: float, decimals: int = 1) -> str:
    """A percentage with ``decimals`` places, more (up to four) where the rounding would print
    a bound the value does not reach: 99.95 % idle is not "100.0%", 0.04 % not "0.0%".

    >>> pct_text(69.44), pct_text(99.9501), pct_text(99.99, 0), pct_text(100.0), pct_text(0.04)
    ('69.4%', '99.95%', '99.99%', '100.0%', '0.04%')
    """
    for places in range(decimals, 5):
        text = f"{x:.{places}f}"
        if not (0 < x < 100 and float(text) in (0.0, 100.0)):
            return f"{text}%"
    return f"{text}%"


def bandwidth(x: float | None) -> str:
    """Bytes per second as the report prints them."""
    if x is None:
        return "-"
    return f"{x / 1e9:.2f} GB/s" if x >= 1e9 else f"{x / 1e6:.1f} MB/s"
