"""Benchmark: compute kernels as samples, against the row passes they replace.

For each set: loads every file into its own table (its own string dictionaries, as a worker
has it), joins them, and on the joined table (unaligned: the cost does not depend on the
times) measures, best of ``--repeats`` in the same process:

* ``rows``: the row passes before the samples (``tests/_reference_compute_ratios.py``,
  verbatim): ``compute_ratio_stats`` and ``load_imbalance``'s compute totals;
* ``samples``: :func:`~otel_ext.analysis.rank.compute_samples.samples_of` per file,
  :meth:`~otel_ext.analysis.rank.compute_samples.ComputeSamples.join`, then
  :func:`~otel_ext.analysis.rank.compute_samples.ratio_stats` and ``rank_totals`` (the whole work,
  wherever it runs);
* ``client``: the client's share (join, ratio stats, totals);

checks the samples give the same ratios, and prints the ratios of the times and the travel:
the compute-kernel rows against the sample rows, their column bytes (the kernel rows' columns
that are not constant against the samples' six columns) and their pickled bytes with the
string dictionaries (each file's kernel rows as an ``EventTable`` with that file's whole
dictionaries, against each file's samples with only the strings they use).

Run: ``.venv/bin/python benchmarks/compute_samples.py [--repeats 5] FOLDER...``
(folders of profiler files, such as ``../shared/traces/pytorch-profiler/v100_train``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _reference_compute_ratios as reference  # noqa: E402
from _timing import best_of  # noqa: E402

from otel_ext.analysis.cross.stragglers import window_edges  # noqa: E402
from otel_ext.analysis.loaders import load_file  # noqa: E402
from otel_ext.analysis.rank.compute_samples import ComputeSamples, ratio_stats, samples_of  # noqa: E402
from otel_ext.analysis.runs import rank_runs  # noqa: E402
from otel_ext.analysis.table import Category, EventTable  # noqa: E402


def _rows(table: EventTable, edges: Any) -> Any:
    return reference.compute_ratio_stats(table, edges), reference.compute_totals(table)


def _per_file(parts: list[EventTable], edges: Any) -> list[ComputeSamples]:
    return [samples_of(p, edges) for p in parts]


def _client(samples: list[ComputeSamples], runs: dict[int, int], n_win: int) -> Any:
    joined = ComputeSamples.join(samples)
    return ratio_stats(joined, runs, n_win), joined.rank_totals()


def _kernels(table: EventTable) -> EventTable:
    return table.select((table["category"] == Category.KERNEL_COMPUTE) & (table["rank"] >= 0))


def _column_bytes(s: ComputeSamples) -> int:
    return sum(c.nbytes for c in (s.name, s.host, s.rank, s.window, s.duration_ns, s.count))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for folder in args.folders:
        loaded = [load_file(f).table for f in sorted(folder.iterdir()) if f.is_file()]
        parts = [t for t in loaded if t is not None]
        table = EventTable.concat(parts)
        edges = window_edges(table, 8)
        runs, n_win = rank_runs(table), max(len(edges) - 1, 1)

        t_rows, (want, _) = best_of(args.repeats, partial(_rows, table, edges))
        t_files, samples = best_of(args.repeats, partial(_per_file, parts, edges))
        t_client, (got, _) = best_of(args.repeats, partial(_client, samples, runs, n_win))
        if got != want:
            raise SystemExit(f"{folder}: the samples' ratios differ from the rows'")
        kernels = [_kernels(p) for p in parts]
        n_rows = sum(len(k) for k in kernels)
        n_samples = sum(len(s.count) for s in samples)
        b_rows = sum(len(pickle.dumps(k)) for k in kernels)
        b_samples = sum(len(pickle.dumps(s)) for s in samples)
        c_rows = sum(k.nbytes() for k in kernels)
        c_samples = sum(_column_bytes(s) for s in samples)
        print(
            f"{folder.name}: {n_rows} kernel rows -> {n_samples} sample rows "
            f"({n_samples / max(n_rows, 1):.3f}); columns {c_rows} -> {c_samples} B "
            f"({c_samples / max(c_rows, 1):.3f}); pickled with dictionaries {b_rows} -> "
            f"{b_samples} B ({b_samples / max(b_rows, 1):.3f}); time rows "
            f"{t_rows * 1e3:.2f} ms, samples {(t_files + t_client) * 1e3:.2f} ms "
            f"({(t_files + t_client) / t_rows:.2f}x), client {t_client * 1e3:.2f} ms "
            f"({t_client / t_rows:.2f}x)"
        )


if __name__ == "__main__":
    main()
