"""Benchmark: the critical path walked per rank and stitched, against the walk in process.

For each set: loads it, separates its captures and selects its steps as the engine does,
keeps every row (the walk rows among them), matches and aligns it (``align_ranks``), then
times, best of ``--repeats`` in the same process:

* ``in process`` (the baseline): :func:`otel_ext.analysis.cross.critical_path.critical_path`,
  which walks only the entries the walk from the table's start reaches;
* what a cluster does: ``peer_edges`` (client), ``walk_pieces`` from every entry (the workers'
  work, all ranks together), ``stitch`` (client);

checks that the pieces of each rank computed from that rank's rows only, joined and stitched,
give the in-process document, and prints the ratios. (Until 2026-12-03 the baseline was the
one-loop walk from before the split, a frozen copy in ``tests/``; the tests now check the walk
against a brute-force oracle, ``tests/_brute_force_critical_path.py``, and the figures measured
against the copy are reproduced at commit ``ff613b8``.) Then the travel: the bytes of the
rows the walk reads (runtime calls and device rows of ranked rows: the non-constant
columns' bytes, and pickled) against the pieces of every rank computed one rank at a time
(``WalkPieces.nbytes`` and pickled) and the peer edges, with the steps stored against the path's.

Run: ``.venv/bin/python benchmarks/critical_path_pieces.py [--repeats 3] PATH...``
(each a folder or file ``otel-ext analyze`` takes: a profiler set, a simulated run's folder).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _critical_path_inputs import engine_inputs  # noqa: E402
from _timing import best_of  # noqa: E402

from otel_ext.analysis.cross.critical_path import (  # noqa: E402
    WalkPieces,
    critical_path,
    peer_edges,
    stitch,
    walk_mask,
    walk_pieces,
)
from otel_ext.analysis.table import Category, EventTable, is_constant  # noqa: E402


def column_bytes(table: EventTable, mask: np.ndarray) -> int:
    """Bytes of ``table``'s rows under ``mask``: its non-constant columns."""
    n = int(mask.sum())
    return sum(c.dtype.itemsize * n for c in table.columns.values() if not is_constant(c))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for path in args.paths:
        measure(path, args.repeats)


def measure(path: str, repeats: int) -> None:
    """Time, check and weigh one set (see the module docstring)."""
    table, match, kw = engine_inputs(path)
    stitch_kw = {k: v for k, v in kw.items() if k != "device_bound_share"}
    t_new, new = best_of(repeats, lambda: critical_path(table, match, **kw))
    want = new.as_dict(max_segments=10**9)
    keys = np.arange(len(table), dtype=np.int64)
    t_peer, peers = best_of(repeats, lambda: peer_edges(table, match, keys))
    t_walk, pieces = best_of(repeats, lambda: walk_pieces(table, keys, peers))
    t_stitch, _ = best_of(repeats, lambda: stitch(pieces, match, **stitch_kw))
    # travel: each rank's pieces computed from that rank's rows only, as a worker would
    mask = walk_mask(table)
    rt = mask & (table["category"] == Category.RUNTIME)
    rank = table["rank"]
    ranks = sorted({int(x) for x in rank[mask].tolist()})
    # each worker gets the edges of its rows only (member or target)
    edges_b = sum(peers.of_rows(keys[rank == r]).nbytes() for r in ranks)
    per_rank = [
        walk_pieces(table.select(rank == r), keys[rank == r], peers.of_rows(keys[rank == r]))
        for r in ranks
    ]
    joined = WalkPieces.join(per_rank)
    same_split = stitch(joined, match, **stitch_kw).as_dict(max_segments=10**9) == want
    rows_b, rt_b = column_bytes(table, mask), column_bytes(table, rt)
    rows_p = len(pickle.dumps(table.select(mask)))
    pieces_b = sum(p.nbytes() for p in per_rank)
    pieces_p = sum(len(pickle.dumps(p)) for p in per_rank)
    peers_b = peers.nbytes()
    print(
        f"{Path(path).name}: {len(table)} rows, {int(mask.sum())} walk rows "
        f"({int(rt.sum())} runtime), {len(new.segments)} segments; "
        f"same from per-rank pieces {same_split}\n"
        f"  in process: critical_path {t_new:.3f} s (the baseline)\n"
        f"  every entry (as workers do): peer_edges {t_peer:.4f} s, walk_pieces {t_walk:.3f} s "
        f"(ratio to in process {t_walk / t_new:.2f}), stitch {t_stitch:.4f} s (ratio "
        f"{t_stitch / t_new:.2f}); "
        f"{joined.n_steps} steps stored in {joined.n_pieces} pieces over {len(per_rank)} ranks\n"
        f"  travel: walk rows {rows_b / 1e6:.3f} MB (runtime {rt_b / 1e6:.3f} MB; "
        f"pickled {rows_p / 1e6:.3f} MB); pieces {pieces_b / 1e6:.3f} MB (pickled "
        f"{pieces_p / 1e6:.3f} MB); peer edges {peers_b / 1e6:.3f} MB (to the rank that "
        f"holds each member or target: {edges_b / 1e6:.3f} MB in all); "
        f"pieces / walk rows {pieces_b / rows_b:.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
