"""Test and benchmark helper: a set's aligned table and match as the engine builds them.

Every row is kept (the walk rows among them: the engine's reduced rows no longer hold the
runtime calls), so the brute-force walk (``tests/_brute_force_critical_path.py``) and the
split one can both run on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from otel_ext.analysis.cross.alignment import align_ranks
from otel_ext.analysis.cross.collective_match import CollectiveMatch, match_collectives
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.runs import separate_captures
from otel_ext.analysis.steps import DEFAULT_STEPS, select_steps
from otel_ext.analysis.table import EventTable


def engine_inputs(path: str | Path) -> tuple[EventTable, CollectiveMatch, dict[str, Any]]:
    """The set loaded, its captures separated and steps selected as the engine does, matched
    and aligned; and the rank arriving last most often as the straggler."""
    load = load_paths([path], workers=1)
    formats = {i.get("path", ""): i.get("format", "") for i in load.inputs}
    whole, _ = separate_captures(load.table, formats=formats)
    whole, _ = select_steps(whole, DEFAULT_STEPS)
    alignment = align_ranks(whole, match_collectives(whole))
    match = alignment.match
    last = int(np.bincount(match.last_rank).argmax()) if match.n_instances else None
    return alignment.table, match, {"straggler_rank": last}
