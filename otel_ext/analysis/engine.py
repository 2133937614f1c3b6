"""The analysis facade: telemetry files in, one stable JSON document out.

:func:`analyze` loads (or takes loaded) telemetry, aligns the ranks' clocks, runs every
analysis and ranks the findings. The document's top-level keys (schema
``"otel-ext.analysis/1"``, documented key by key in ``docs/analysis.md``):

``schema``, ``inputs``, ``skipped``, ``run``, ``ranks``, ``temporal_breakdown``,
``idle_breakdown``, ``comm_comp_overlap``, ``kernel_breakdown``, ``collectives``, ``links``,
``ports``, ``stragglers``, ``critical_path``, ``causality``, ``load_imbalance``, ``roofline``,
``requests``, ``findings``.

Per-rank breakdowns (temporal, idle, overlap, kernels) are computed on each rank's own clock
(alignment does not change them); everything that compares ranks runs on the aligned times.
The text and HTML reports are functions of this document alone.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> rows = [dict(start_ns=k * 1000 + (400 if r == 1 else 0) + 50_000 * r,
...              end_ns=k * 1000 + 600 + 50_000 * r, rank=r, device=f"h0/chip{r}", stream=1,
...              category=C.KERNEL_COMM, coll_seq=k, coll_group="tp") for k in range(20)
...         for r in range(3)]
>>> doc = analyze(EventTable.from_rows(rows))
>>> doc["schema"], [round(r["clock_offset_ns"]) for r in doc["ranks"]]
('otel-ext.analysis/1', [0, 50000, 100000])
>>> doc["stragglers"][0]["rank"], doc["causality"]["violations_after"]
(1, 0)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from otel_ext._arrays import distinct
from otel_ext.analysis.cross.alignment import Alignment, align_ranks
from otel_ext.analysis.cross.collective_match import (
    CollectiveMatch,
    match_collectives,
    sampled_fraction,
)
from otel_ext.analysis.cross.critical_path import peer_edges, stitch
from otel_ext.analysis.cross.hangs import hang_findings
from otel_ext.analysis.cross.imbalance import load_imbalance
from otel_ext.analysis.cross.link_stats import link_stats, port_stats
from otel_ext.analysis.cross.network_paths import p2p_transfers, path_stats, unpaired_transfer_stats
from otel_ext.analysis.cross.stragglers import (
    find_stragglers,
    rank_devices_from_counts,
    window_edges,
)
from otel_ext.analysis.findings.build import Thresholds, build_findings, straggler_verdicts
from otel_ext.analysis.rank.memory import memory_findings, memory_section
from otel_ext.analysis.rank.per_rank import (
    RankTables,
    RepairedRows,
    merge_name_counts,
    name_counts,
    per_rank_tables,
    serving_mark_codes,
    walk_of,
    walk_of_aligned,
)
from otel_ext.analysis.rank.roofline import roofline
from otel_ext.analysis.runs import (
    hosts_from_file_names,
    rank_runs,
    runs_summary,
    separate_captures,
)
from otel_ext.analysis.serving.requests import (
    engine_step_order,
    request_accounting,
    request_latency,
)
from otel_ext.analysis.steps import DEFAULT_STEPS, select_steps
from otel_ext.analysis.table import Category, EventTable

if TYPE_CHECKING:
    from otel_ext.analysis.cross.critical_path_walk import WalkPieces
    from otel_ext.analysis.rank.compute_samples import ComputeSamples
    from otel_ext.analysis.report.timeline import TimelineInputs
    from otel_ext.analysis.scaleout.dask_cluster import DaskCluster, PerRankPhase

__all__ = ["SCHEMA", "analyze", "to_json", "wait_heatmap"]

SCHEMA = "otel-ext.analysis/1"


def _rows(items: Any) -> list[dict[str, Any]]:
    out = []
    for x in items or []:
        out.append(x.as_dict() if hasattr(x, "as_dict") else dict(x))
    return out


def wait_heatmap(match: CollectiveMatch, *, bins: int = 60) -> dict[str, Any]:
    """Collective wait per rank and time bin (for the report's heatmap).

    Returns ``{"ranks", "edges_ns", "wait_ns"}`` with ``wait_ns[i][j]`` the wait of
    ``ranks[i]`` in collectives that began in bin ``j``.
    """
    if match.n_instances == 0:
        return {"ranks": [], "edges_ns": [], "wait_ns": []}
    lo = int(match.member_start_ns.min())
    hi = int(match.member_start_ns.max()) + 1
    edges = np.linspace(lo, hi, bins + 1)
    ranks = distinct(match.member_rank)
    b = np.clip(np.searchsorted(edges, match.member_start_ns, side="right") - 1, 0, bins - 1)
    r = np.searchsorted(ranks, match.member_rank)
    grid = np.zeros((len(ranks), bins), dtype=np.int64)
    np.add.at(grid, (r, b), match.wait_ns)
    return {
        "ranks": [int(x) for x in ranks],
        "edges_ns": [int(e) for e in edges],
        "wait_ns": grid.tolist(),
    }


def _device_model(load: Any) -> str | None:
    from otel_ext.semconv.attributes import ACCEL_DEVICE_MODEL
    from otel_ext.semconv.registry import device_table

    known = set(device_table())
    metrics = getattr(load, "metrics", None)
    if metrics is not None and metrics.total:  # the dictionaries are whole
        for text in metrics.strings.get("attrs", []):
            if ACCEL_DEVICE_MODEL in text:
                try:
                    model = json.loads(text).get(ACCEL_DEVICE_MODEL)
                except ValueError:
                    continue
                if model in known:
                    return str(model)
    return None


def _spec(model: str | None, field: str) -> float | None:
    """A device model's registry value (``nic_bandwidth``, ...), or None."""
    if not model:
        return None
    from otel_ext.semconv.registry import device_table

    value = device_table().get(model, {}).get(field)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _peer_groups(match: CollectiveMatch) -> dict[int, int]:
    """Ranks that meet at collectives, as connected components: rank -> component id."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    inst, ranks = match.member_instance.tolist(), match.member_rank.tolist()
    first: dict[int, int] = {}
    for i, r in zip(inst, ranks):
        f = first.setdefault(i, r)
        a, b = find(f), find(r)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {r: find(r) for r in parent}


def _rank_names(
    counts: dict[int, dict[str, dict[str, int]]], table: EventTable
) -> dict[int, tuple[str, str]]:
    """Rank -> (host, device) from the rows' names counted per rank (``counts``), the
    device made unique where ranks of separate traces share one name."""
    ranks = [int(r) for r in distinct(table["rank"][table["rank"] >= 0]).tolist()]
    names = rank_devices_from_counts(counts, ranks, table.strings)
    seen: dict[str, int] = {}
    for _, dev in names.values():
        seen[dev] = seen.get(dev, 0) + 1
    out = {}
    for r, (host, dev) in names.items():
        if not dev or seen.get(dev, 0) > 1:
            # ranks of separate traces may all call their device "gpu0"
            dev = f"rank{r}/{dev}" if dev else f"rank{r}"
        out[r] = (host, dev)
    return out


#: profiler files re-read for the input sizes of collectives without metadata: at most this
#: many events of them in all (a second parse of large traces would double the analysis)
_CALL_SIZES_MAX_EVENTS = 50_000


def _per_file(
    cluster: DaskCluster | None, fn: Callable[[list[str]], list[Any]], paths: list[str]
) -> list[Any]:
    """``fn(paths)``, one job per path on the cluster's workers (where the files are) when
    there is one; ``fn`` answers for several paths with its per-path answers in order."""
    if cluster is None or not paths:
        return fn(paths)
    return cluster.map_files(fn, paths)


def _collective_calls(
    table: EventTable,
    inputs: list[dict[str, Any]],
    *,
    matched: int,
    cluster: DaskCluster | None = None,
) -> dict[str, Any]:
    """Communication kernels grouped into calls per rank (:mod:`otel_ext.analysis.rank.comm_calls`),
    each call's size from metadata or, for kernels without it (symmetric-memory all-reduces),
    from the launching operation's input shapes: small profiler files that hold such kernels
    are read once more for those shapes, when no collective matched across ranks (a single
    rank's trace) and they are small (:data:`_CALL_SIZES_MAX_EVENTS` in all)."""
    from otel_ext.analysis.rank import comm_calls

    comm = table["category"] == Category.KERNEL_COMM
    if not comm.any():
        return {"count": 0, "by_op": [], "calls": []}
    sizes: dict[tuple[str, int], int] = {}
    unsized = comm & (table["coll_bytes"] <= 0) & (table["external_id"] >= 0)
    if unsized.any() and matched == 0:
        wanted = {table.strings["source"][int(c)] for c in distinct(table["source"][unsized])}
        chosen = [i for i in inputs if i.get("path") in wanted and i.get("format") == "kineto"]
        if sum(int(i.get("events") or 0) for i in chosen) <= _CALL_SIZES_MAX_EVENTS:
            for one in _per_file(cluster, _call_sizes, [str(i["path"]) for i in chosen]):
                sizes.update(one)
    return comm_calls.collective_calls(table, input_bytes=sizes)


def _call_sizes(paths: list[str]) -> list[dict[tuple[str, int], int]]:
    """Each profiler file's collective input sizes by external id (a per-file job)."""
    from otel_ext.analysis.loaders.op_input_bytes import input_bytes_by_external_id

    return [input_bytes_by_external_id(p) for p in paths]


def _serving_requests(
    table: EventTable, inputs: list[dict[str, Any]], *, cluster: DaskCluster | None = None
) -> tuple[EventTable, dict[str, Any] | None]:
    """vLLM's and SGLang's request spans as otel-ext requests, joined with otel-ext's rows.

    Only the span files whose loaded rows carry an engine's request or stage names are read
    again for the engines' attributes (:mod:`otel_ext.analysis.serving.engine_telemetry`); other inputs cost
    nothing.
    """
    from otel_ext.analysis.serving import engine_telemetry as serving

    marks = serving_mark_codes(table)
    if not marks or not len(table):
        return table, None
    src = distinct(table["source"][np.isin(table["name"], np.asarray(marks))])
    paths = {table.strings["source"][int(c)] for c in src.tolist()}
    chosen = [i for i in inputs if i.get("path") in paths]
    if not chosen:
        return table, None
    from otel_ext.analysis.loaders.serving_inputs import read_serving_spans, serving_span_paths

    spans = _per_file(cluster, read_serving_spans, serving_span_paths(chosen))
    return serving.with_serving_requests(table, spans)


def _request_accounting(
    inputs: list[dict[str, Any]], metrics: Any, *, cluster: DaskCluster | None
) -> dict[str, Any]:
    """Per-request device time and energy (:mod:`otel_ext.analysis.serving.requests`), the engine
    steps read from the OTLP span files on the cluster's workers when there is one."""
    from otel_ext.analysis.loaders.serving_inputs import engine_steps_from_otlp, otlp_trace_paths

    steps = _per_file(cluster, engine_steps_from_otlp, otlp_trace_paths(inputs))
    steps.sort(key=engine_step_order)  # as one reading of every file orders them
    return request_accounting(steps, metrics=metrics)


def _load(
    source: Any,
    *,
    keep_going: bool,
    progress: Any,
    workers: int | None,
) -> Any:
    if isinstance(source, EventTable):
        from otel_ext.analysis.loaders import LoadResult, MetricPoints

        return LoadResult(source, [], [], MetricPoints.from_rows([]))
    if hasattr(source, "table") and hasattr(source, "inputs"):
        return source
    from otel_ext.analysis.loaders import load_paths

    paths = [source] if isinstance(source, (str, Path)) else list(source)
    return load_paths(paths, keep_going=keep_going, progress=progress, workers=workers)


def _without_events(load: Any) -> Any:
    """``load`` without its event table (its records, skipped records and metric points)."""
    from otel_ext.analysis.loaders import LoadResult

    return LoadResult(EventTable.empty(), load.inputs, load.skipped, load.metrics)


def _is_paths(source: Any) -> bool:
    return not isinstance(source, EventTable) and not (
        hasattr(source, "table") and hasattr(source, "inputs")
    )


def analyze(
    source: Any,
    *,
    keep_going: bool = False,
    progress: Any = None,
    workers: int | None = None,
    device_model: str | None = None,
    thresholds: Thresholds | None = None,
    max_collectives: int = 200,
    windows: int = 8,
    steps: str = DEFAULT_STEPS,
    same_clock: bool = False,
    clock_of: dict[int, str] | None = None,
    one_run: bool = False,
    scheduler: str | DaskCluster | None = None,
    timeline: Callable[[TimelineInputs], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Analyse telemetry into the stable JSON document.

    Args:
        source: paths (files or folders), a ``LoadResult`` or an ``EventTable``.
        keep_going: load what is valid and list what was skipped (else the first bad record
            raises).
        progress: ``progress(done, total, path)`` after each file loaded.
        workers: loader processes (default: one per core).
        device_model: the registry's device model for roofline peaks (default: from the
            metrics' ``accel.device.model``).
        thresholds: where numbers become findings.
        max_collectives: at most this many collective instances listed (most waited for).
        windows: time windows for persistence and part-way slowdowns.
        steps: profiler steps analysed (:mod:`otel_ext.analysis.steps`): ``complete`` (each
            trace's last step dropped, as HTA does), ``all``, ``N`` or ``N-M``.
        same_clock: every rank's times are on one clock (no per-rank shifts).
        clock_of: rank -> clock name, for ranks known to share a clock.
        one_run: every file one run (default: separate captures are separate runs, see
            :mod:`otel_ext.analysis.runs`).
        scheduler: read the files on a Dask cluster (:mod:`otel_ext.analysis.scaleout.dask_cluster`):
            ``local:N``, ``tcp://HOST:PORT`` or a scheduler file (default:
            ``OTEL_EXT_DASK_SCHEDULER``; empty: in process), or a connected
            :class:`~otel_ext.analysis.scaleout.dask_cluster.DaskCluster`. The document is the same.
        timeline: called once with what the merged timeline needs
            (:class:`~otel_ext.analysis.report.timeline.TimelineInputs`), e.g. a
            :class:`~otel_ext.analysis.report.timeline.TimelineFile`; what it returns is the
            document's ``timeline`` key. In process every analysed row is parked for it in a
            temporary folder (:func:`~otel_ext.analysis.report.timeline.park_rows`); on a cluster
            it gets the cross-rank rows, every device row among them.

    Returns:
        The analysis document (plain JSON types).

    Raises:
        InputError: a bad input file or record (unless ``keep_going``).
        OtelExtError: the Dask cluster is unreachable or unusable (``scheduler``).
    """
    from otel_ext.config import DASK_SCHEDULER, resolve

    options = dict(
        keep_going=keep_going,
        progress=progress,
        workers=workers,
        device_model=device_model,
        thresholds=thresholds,
        max_collectives=max_collectives,
        windows=windows,
        steps=steps,
        same_clock=same_clock,
        clock_of=clock_of,
        one_run=one_run,
        timeline=timeline,
    )
    if scheduler is not None and not isinstance(scheduler, str):
        return _analyze(source, cluster=scheduler, **options)
    address = resolve(DASK_SCHEDULER, scheduler).strip()
    if address and _is_paths(source):
        from otel_ext.analysis.scaleout import dask_cluster as dask_backend

        with dask_backend.connect(address) as cluster:
            return _analyze(source, cluster=cluster, **options)
    return _analyze(source, cluster=None, **options)


def _held_busy(
    per: RankTables, alignment: Alignment
) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The held device rows' busy intervals per device (their unions, sent by the
    partitions), moved by the clock correction; None when nothing was held."""
    if not per.device_busy:
        return None
    out = {}
    for name, spans in per.device_busy.items():
        starts = [alignment.clocks.move(r, s) for r, s, _ in spans]
        ends = [alignment.clocks.move(r, e) for r, _, e in spans]
        out[name] = (np.concatenate(starts), np.concatenate(ends))
    return out


def _walk(
    alignment: Alignment,
    keys: np.ndarray,
    per: RankTables,
    phase: PerRankPhase | None,
    *,
    cluster: DaskCluster | None,
    edges: np.ndarray,
) -> tuple[WalkPieces, ComputeSamples | None]:
    """The critical path's pieces: each rank's walk where its rows are (here, or on the
    workers that keep them), after the alignment decided here; stitched here
    (``docs/analysis.md``, "Per-rank and cross-rank passes"). On a cluster whose partitions
    hold compute rows, also the samples of every compute row on the aligned timeline (the
    held rows' from the workers, in the same round, and the reduced rows'), else None."""
    aligned, amatch = alignment.table, alignment.match
    peers = peer_edges(aligned, amatch, keys)
    rep = alignment.repaired_rows
    repaired = RepairedRows(keys[rep], aligned["start_ns"][rep], aligned["end_ns"][rep])
    if phase is not None and cluster is not None:
        holds = phase.holds
        runs = rank_runs(aligned)
        sizes = Counter(runs.values())
        pieces, held = cluster.walk_phase(
            phase, alignment.clocks, repaired, peers, aligned=aligned, keys=keys, edges=edges,
            alone=frozenset(r for r, run in runs.items() if sizes[run] == 1),
        )  # fmt: skip
        if not holds:
            return pieces, None
        from otel_ext.analysis.rank.compute_samples import ComputeSamples, samples_of

        return pieces, ComputeSamples.join([samples_of(aligned, edges), *held])
    if per.walk_travels:  # the walk rows are the aligned rows here
        return walk_of_aligned(aligned, keys, peers, every_rank=True), None
    return walk_of(per, alignment.clocks, repaired, peers, every_rank=True), None


def _network(
    aligned: EventTable,
    amatch: CollectiveMatch,
    names: dict[int, tuple[str, str]],
    th: Thresholds,
    *,
    nominal_bw: float | None = None,
) -> dict[str, Any]:
    """The network model (:mod:`otel_ext.analysis.cross.network_paths`): bandwidth per host path from
    matched point-to-point transfers, or, where the trace names no peers, each rank's sends and
    receives against the other ranks'."""
    host_of = {r: (h or f"rank{r}") for r, (h, _) in names.items()}
    transfers = p2p_transfers(aligned, amatch)
    paths = path_stats(
        transfers,
        host_of,
        slowness=th.path_slowness,
        intra_factor=th.path_intra_factor,
        nominal_bw=nominal_bw,
        alpha=th.alpha,
    )
    unpaired = (
        []
        if len(transfers)
        else unpaired_transfer_stats(aligned, host_of, ratio=th.unpaired_ratio, alpha=th.alpha)
    )
    return {
        "peers_known": bool(len(transfers)),
        "paths": [p.as_dict() for p in paths],
        "unpaired": [u.as_dict() for u in unpaired],
    }


def _analyze(
    source: Any,
    *,
    cluster: DaskCluster | None,
    keep_going: bool,
    progress: Any,
    workers: int | None,
    device_model: str | None,
    thresholds: Thresholds | None,
    max_collectives: int,
    windows: int,
    steps: str,
    same_clock: bool,
    clock_of: dict[int, str] | None,
    one_run: bool,
    timeline: Callable[[TimelineInputs], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """:func:`analyze` with the cluster (or None) that reads the files.

    Two phases (``docs/analysis.md``, "Per-rank and cross-rank passes"): the per-rank passes
    (:mod:`otel_ext.analysis.rank.per_rank`) over every rank's rows, leaving the compact rows the
    cross-rank passes read; then those passes over the compact rows. In process both run
    here; with a cluster the first runs on the workers, where the files are loaded and kept.
    """
    if cluster is not None and _is_paths(source):
        paths = [source] if isinstance(source, (str, Path)) else list(source)
        phase = cluster.per_rank_phase(
            paths, keep_going=keep_going, progress=progress, steps=steps, one_run=one_run
        )
        load, captures, step_record, per = phase.load, phase.captures, phase.steps, phase.ranks
        table, keys = phase.reduced, phase.keys
        kept = None
    else:
        load = _load(source, keep_going=keep_going, progress=progress, workers=workers)
        formats = {i.get("path", ""): i.get("format", "") for i in getattr(load, "inputs", [])}
        whole, captures = separate_captures(load.table, formats=formats, one_run=one_run)
        if _is_paths(source):  # loaded here: ``whole`` holds its rows from now on (issue 30:
            load = _without_events(load)  # kept through the per-rank phase, a second copy)
        whole, step_record = select_steps(whole, steps)
        per = per_rank_tables(whole, positions=np.arange(len(whole), dtype=np.int64))
        table, keys = per.reduced[0], per.reduced_positions[0]
        phase = None
        kept = None
        if timeline is not None:  # every row, for the timeline: parked on disk meanwhile
            from otel_ext.analysis.report.timeline import park_rows

            kept = park_rows(whole)
        del whole
    n_reduced = len(table)
    table, serving_join = _serving_requests(table, getattr(load, "inputs", []), cluster=cluster)
    if len(table) > n_reduced:  # the serving engines' request rows: keys after every row's
        top = int(keys.max()) + 1 if len(keys) else 0
        keys = np.r_[keys, top + np.arange(len(table) - n_reduced, dtype=np.int64)]
    counts = per.names
    if len(table) > n_reduced:  # the serving engines' request rows, named like the others
        counts = merge_name_counts(
            [counts, name_counts(table.select(np.arange(n_reduced, len(table))))]
        )
    n_events = per.events + len(table) - n_reduced
    trace_rank = {c["rank"]: c["trace_rank"] for c in captures}
    if same_clock:
        clock_of = {int(r): "shared" for r in distinct(table["rank"]) if r >= 0}
    elif clock_of is None:
        # profiler files named HOSTNAME_PID.*: ranks of one host share its clock
        named = {r for r, c in counts.items() if c.get("host")}
        clock_of = hosts_from_file_names(table, captures, named_ranks=named) or None
    metrics = getattr(load, "metrics", None)
    temporal = _rows(per.temporal)
    idle = _rows(per.idle)
    ovl = _rows(per.overlap)
    kernel_doc: dict[str, Any] = per.kernels.breakdown().as_dict()
    kernel_doc["launch"] = _rows(per.launch)

    match = match_collectives(table)
    # the partitions' held device rows are fetched only if the event-level repair is needed
    holds = phase is not None and cluster is not None and phase.holds
    alignment = align_ranks(table, match, clock_of=clock_of, repair=not holds)
    # the timeline writes every device row: it has them fetched as the repair does
    fetch = alignment.repair_skipped or timeline is not None
    if holds and fetch and phase is not None and cluster is not None:
        table, keys = cluster.restore_held(phase)
        per.device_busy = {}  # every device row is here now
        match = match_collectives(table)
        alignment = align_ranks(table, match, clock_of=clock_of)
    aligned, amatch = alignment.table, alignment.match
    names = _rank_names(counts, aligned)
    edges = window_edges(aligned, windows)
    pieces, compute = _walk(alignment, keys, per, phase, cluster=cluster, edges=edges)
    th = thresholds or Thresholds()
    strag = find_stragglers(
        aligned,
        amatch,
        windows=windows,
        devices=names,
        compute=compute,
        alpha=th.alpha,
        min_effect=th.lateness_effect,
    )
    n_steps = None
    step_rows = aligned["category"] == Category.STEP
    if step_rows.any():
        ranks_with = aligned["rank"][step_rows]
        r0 = int(ranks_with.min())
        n_steps = len(distinct(aligned["name"][step_rows & (aligned["rank"] == r0)]))
    # the what-if is asked only of a rank whose lateness is a verdict, not of a chance leader
    verdicts = straggler_verdicts(strag, th, amatch)
    cp = stitch(
        pieces, amatch, straggler_rank=verdicts[0]["rank"] if verdicts else None, steps=n_steps
    )
    if cp.straggler is not None:
        # the what-if is measured on the traced collectives; a profiler schedule (or the
        # simulator) traces one step in N, so say so and give the whole-run estimate too, as
        # the findings do
        wi = cp.straggler
        groups = [
            amatch.group[int(i)] for i in amatch.member_instance[amatch.member_rank == wi["rank"]]
        ]
        coverage = sampled_fraction(table)
        frac = coverage.get(max(set(groups), key=groups.count), 1.0) if groups else 1.0
        wi["sampled_fraction"] = frac
        wi["saved_run_ns"] = int(wi["saved_ns"] / frac) if frac > 0 else wi["saved_ns"]
    model = device_model or _device_model(load)
    # link durations on each host's own clock (alignment shifts whole ranks, repairs ends)
    links = link_stats(
        table, paired_ratio=th.link_paired_ratio, slowest_share=th.link_slowest_share
    )
    ports = port_stats(
        table,
        nominal_bw=_spec(model, "nic_bandwidth"),
        efficiency=th.nic_efficiency,
        slow_ratio=th.link_slowness,
        slow_share=th.port_slow_share,
    )
    by_host = {p["host"]: p for p in ports}
    for row in links:
        port = by_host.get(row["host"]) if row["kind"] == "nic" else None
        if port is not None:
            row.update(
                {"slowness": port["slowness"], "basis": port["reference"], "slow": port["chosen"]}
            )
    network = _network(aligned, amatch, names, th, nominal_bw=_spec(model, "nic_bandwidth"))
    peers = _peer_groups(amatch)
    run_list = runs_summary(aligned)
    if not peers and len(run_list) > 1:
        # ranks of separate runs are never compared with each other
        peers = {r: run["run"] for run in run_list for r in run["ranks"]}
    imb = load_imbalance(
        aligned, groups=peers, compute_totals=None if compute is None else compute.rank_totals()
    )
    roof = roofline(aligned, device_model=model)
    reqs = request_latency(aligned, busy=_held_busy(per, alignment))
    reqs["accounting"] = _request_accounting(getattr(load, "inputs", []), metrics, cluster=cluster)
    dev = aligned["rank"] >= 0
    run_start = int(aligned["start_ns"][dev].min()) if dev.any() else 0
    run_end = int(aligned["end_ns"][dev].max()) if dev.any() else 0
    run_ns = run_end - run_start
    if len(run_list) > 1:  # separate runs: their own spans, not the days between them
        run_ns = sum(r["end_ns"] - r["start_ns"] for r in run_list)
    findings = build_findings(
        match=amatch,
        stragglers=strag,
        links=links,
        ports=ports,
        coverage=sampled_fraction(table),
        metrics=metrics,
        overlap=ovl,
        temporal=temporal,
        idle=idle,
        imbalance=imb,
        run_ns=run_ns,
        run_ns_of_rank={
            r: int(run["end_ns"] - run["start_ns"]) for run in run_list for r in run["ranks"]
        },
        run_of_rank={r: int(run["run"]) for run in run_list for r in run["ranks"]},
        rank_names=names,
        thresholds=th,
        paths=network["paths"],
        unpaired=network["unpaired"],
    )
    # memory timelines: their briefs moved from the input records; capacity from the model
    memory = memory_section(getattr(load, "inputs", []), capacity_bytes=_spec(model, "memory_size"),
                            capacity_source=f"device model {model}" if model else None)  # fmt: skip
    findings += memory_findings(memory)
    # a hung or desynchronised collective (a killed job's watchdog records) comes first
    findings[:0] = [f.as_dict() for f in hang_findings(table, names=names, run_ns=run_ns)]
    run_of = {r: run["run"] for run in run_list for r in run["ranks"]}
    ranks = []
    for r in sorted(names):
        host, device = names[r]
        ranks.append(
            {
                "rank": r,
                "host": host,
                "device": device,
                "clock_offset_ns": round(alignment.offsets_ns.get(r, 0.0), 3),
                "clock_drift_ppm": round(alignment.drift_ppm.get(r, 0.0), 6),
                "clock_bound_ns": _finite(alignment.bounds_ns.get(r, 0.0)),
                "clock_offset_estimate_ns": round(alignment.estimate_ns.get(r, 0.0), 3),
                "clock_status": alignment.status.get(r, "none"),
                "clock": alignment.clock_of.get(r, f"rank{r}"),
                "trace_rank": trace_rank.get(r, r),
                "run": run_of.get(r, 0),
            }
        )
    collectives = {
        "matched_by": amatch.source,
        "count": amatch.n_instances,
        "total_wait_ns": int(amatch.wait_ns.sum()) if amatch.n_instances else 0,
        "summary": amatch.summary(),
        "mismatches": amatch.mismatches(),
        "instances": amatch.rows(limit=max_collectives),
        "wait_heatmap": wait_heatmap(amatch),
        "calls": _collective_calls(
            table, getattr(load, "inputs", []), matched=amatch.n_instances, cluster=cluster
        ),
    }
    written = None
    if timeline is not None:
        written = timeline(
            _timeline_inputs(kept, table, keys, alignment, cp, findings, ranks, metrics)
        )
    return {
        "schema": SCHEMA,
        "inputs": list(getattr(load, "inputs", [])),
        "skipped": [s.as_dict() if hasattr(s, "as_dict") else s for s in load.skipped],
        "run": {
            "start_ns": run_start,
            "end_ns": run_end,
            "duration_ns": run_ns,
            "events": n_events,
            "metric_points": metrics.total if metrics is not None else 0,
            "device_model": model,
            "steps": step_record,
        },
        "captures": captures,
        "ranks": ranks,
        "runs": run_list,
        "temporal_breakdown": temporal,
        "idle_breakdown": idle,
        "comm_comp_overlap": ovl,
        "kernel_breakdown": kernel_doc,
        "collectives": collectives,
        "links": links,
        "ports": ports,
        "network": network,
        "stragglers": strag.rows,
        "critical_path": cp.as_dict(),
        "causality": alignment.causality(),
        "load_imbalance": imb,
        "roofline": roof,
        "requests": reqs,
        "serving": serving_join,
        "findings": findings,
        **({"memory": memory} if memory is not None else {}),
        **({"timeline": written} if written is not None else {}),
    }


def _timeline_inputs(
    kept: EventTable | None,
    table: EventTable,
    keys: np.ndarray,
    alignment: Alignment,
    cp: Any,
    findings: list[dict[str, Any]],
    ranks: list[dict[str, Any]],
    metrics: Any,
) -> TimelineInputs:
    """What the timeline writer needs: every analysed row when they were kept here (the
    aligned rows' keys are their positions there), else (on a cluster) the rows aligned:
    the cross-rank rows, every device row among them (host operators stay there)."""
    from otel_ext.analysis.report.timeline import TimelineInputs

    rest = (findings, ranks, metrics)
    if kept is not None:
        pos = np.where(keys < len(kept), keys, -1)
        return TimelineInputs(kept, pos, alignment, cp, *rest, complete=True)
    every = np.arange(len(table), dtype=np.int64)
    return TimelineInputs(table, every, alignment, cp, *rest, complete=False)


def _finite(x: float) -> float | None:
    """A bound as JSON has it: rounded, ``None`` when nothing bounds it."""
    return round(float(x), 3) if np.isfinite(x) else None


def to_json(doc: dict[str, Any]) -> str:
    """The document as JSON text (numpy scalars made plain; key order kept).

    >>> print(to_json({"a": np.int64(3)}))
    {
      "a": 3
    }
    """
    return json.dumps(doc, indent=2, default=_default, allow_nan=False)


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
