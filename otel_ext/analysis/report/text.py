"""The terminal report: the analysis document as a readable summary, top findings first.

A function of the JSON document alone (:func:`otel_ext.analysis.engine.analyze`), so what
the terminal says and what the JSON says cannot disagree.

>>> doc = {"schema": "otel-ext.analysis/1", "inputs": [], "findings": [
...     {"kind": "straggler", "target": "host1/chip2", "impact_ns": 2_500_000,
...      "impact_pct": 4.2, "summary": "host1/chip2 is a straggler", "evidence": {"late_ns": 7}}]}
>>> print(render_text(doc).splitlines()[2])
 1. straggler      host1/chip2         impact   2.500 ms (  4.2%)  host1/chip2 is a straggler
"""

from __future__ import annotations

from typing import Any

from otel_ext.analysis.loaders.partial import unfinished_lines
from otel_ext.analysis.rank.memory import memory_text
from otel_ext.analysis.report.sections import (
    BreakdownRow,
    CausalitySection,
    CollectivesView,
    CriticalPathView,
    Evidence,
    FindingEntry,
    InputEntry,
    LinkView,
    NetworkView,
    OverlapView,
    RankView,
    RequestsSection,
    RunEntry,
    RunView,
    SkippedEntry,
    StragglerView,
)

__all__ = ["render_text"]


def _ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds, three decimals (``-`` for none)."""
    if ns is None:
        return "-"
    return f"{float(ns) / 1e6:.3f} ms"


def _pct(x: float | None) -> str:
    """A percentage, five wide, one decimal (``-`` for none)."""
    return "-" if x is None else f"{float(x):5.1f}%"


def _evidence_line(ev: Evidence, limit: int = 8) -> str:
    """The evidence's scalar values as ``key=value``, at most ``limit`` of them."""
    parts = []
    for k, v in ev.items():
        if isinstance(v, dict | list):
            continue
        if isinstance(v, float):
            text = f"{v:.4g}"
            # four digits, more where they would round a fraction to a whole number (a
            # 0.99995 share is not "1")
            v = f"{v:.7g}" if float(text).is_integer() and float(text) != v else text
        parts.append(f"{k}={v}")
        if len(parts) >= limit:
            break
    return ", ".join(parts)


def _clock_status(rank: RankView) -> str:
    """How a rank's clock was treated: the reference, shifted, or left as recorded."""
    status = rank.get("clock_status", "")
    if status == "unidentifiable":
        est = rank.get("clock_offset_estimate_ns", 0.0)
        return f"kept (estimate {_ms(est)} within its bound)"
    return status


def _causality_line(cz: CausalitySection) -> str:
    """The causality sentence: violations before, within the bounds, and after repair."""
    before = cz.get("violations_before", 0)
    within = cz.get("violations_within_bound", 0)
    text = f"{before} violations on the raw clocks"
    if within:
        text += f", {within} of them within the clocks' bounds (no evidence of error)"
    moved = cz.get("repaired_events", 0)
    after = cz.get("violations_after", 0)
    if not cz.get("constraints_consistent", True) and after:
        return (
            text + f"; {after} beyond them, on constraints that contradict each other (no clock "
            "offsets satisfy them: members matched by order may not be one collective); "
            "nothing moved"
        )
    return (
        text + f"; {after} after alignment and repair ({moved} events moved, at most "
        f"{_ms(cz.get('max_repair_shift_ns', 0))})"
    )


def render_text(doc: dict[str, Any], *, top: int = 10) -> str:
    """Render the analysis document for a terminal.

    Args:
        doc: the document :func:`~otel_ext.analysis.engine.analyze` returned.
        top: how many findings, stragglers and collectives to list.

    Returns:
        The report text (ends with a newline).
    """
    findings: list[FindingEntry] = doc.get("findings") or []
    run: RunView = doc.get("run") or RunView()
    coll: CollectivesView = doc.get("collectives") or CollectivesView()
    net: NetworkView = doc.get("network") or NetworkView()
    cp: CriticalPathView = doc.get("critical_path") or CriticalPathView()
    cz: CausalitySection = doc.get("causality") or CausalitySection()
    req: RequestsSection = doc.get("requests") or RequestsSection()
    out = [_headline(run, doc.get("inputs", []), len(doc.get("ranks", [])))]
    out.extend(unfinished_lines(doc))  # files of processes killed before their shutdown
    out.extend(_runs_lines(doc.get("runs") or []))
    out.extend(_findings_lines(findings, top))
    tb: list[BreakdownRow] = doc.get("temporal_breakdown") or []
    ov: list[OverlapView] = doc.get("comm_comp_overlap") or []
    out.extend(_ranks_lines(doc.get("ranks") or [], tb, ov))
    out.extend(_stragglers_lines(doc.get("stragglers") or [], findings, top))
    out.extend(_collectives_lines(coll, top))
    out.extend(_calls_lines(coll))
    out.extend(_links_lines(doc.get("links") or [], top))
    out.extend(_network_lines(net, top))
    out.extend(_critical_path_lines(cp))
    out.extend(_causality_lines(cz, top))
    out.extend(_requests_lines(req))
    out.extend(memory_text(doc.get("memory")))  # a memory timeline was loaded
    out.extend(_skipped_lines(doc.get("skipped") or [], top))
    return "\n".join(out) + "\n"


def _headline(run: RunView, inputs: list[InputEntry], n_ranks: int) -> str:
    """The first line: events, metric points, files loaded, ranks and the run's length."""
    n_in = sum(1 for i in inputs if i.get("status") == "loaded")
    return (
        f"otel-ext analysis: {run.get('events', 0)} events, {run.get('metric_points', 0)} "
        f"metric points from {n_in} files; {n_ranks} ranks; run "
        f"{_ms(run.get('duration_ns', 0))}"
    )


def _runs_lines(runs: list[RunEntry]) -> list[str]:
    """A line naming the separate runs, when there is more than one."""
    if len(runs) <= 1:
        return []
    return [
        f"{len(runs)} separate runs (separate captures, or hours apart; ranks "
        + "; ".join(",".join(str(r) for r in x["ranks"]) for x in runs)
        + "): collectives are matched and ranks compared within a run only"
    ]


def _findings_lines(findings: list[FindingEntry], top: int) -> list[str]:
    """The findings, most important first, each with its evidence's scalars."""
    out = ["Findings (most important first):" if findings else "Findings: none"]
    for i, f in enumerate(findings[:top], 1):
        out.append(
            f"{i:2d}. {f['kind']:<14} {f['target']:<19} impact {_ms(f['impact_ns']):>10} "
            f"({_pct(f['impact_pct'])})  {f.get('summary', '')}"
        )
        ev = _evidence_line(f.get("evidence") or {})
        if ev:
            out.append(f"    evidence: {ev}")
    return out


def _ranks_lines(
    ranks: list[RankView], breakdown: list[BreakdownRow], overlap: list[OverlapView]
) -> list[str]:
    """Per rank: device, clock offset and bound, time breakdown, overlap, clock status."""
    if not ranks:
        return []
    tb = {r["rank"]: r for r in breakdown}
    ov = {r["rank"]: r for r in overlap}
    out = [
        "",
        "Ranks:  rank device               clock offset    bound     idle  compute  non-comp  overlap  clock",
    ]
    for r in ranks:
        t = tb.get(r["rank"], {})
        o = ov.get(r["rank"], {})
        out.append(
            f"        {r['rank']:>4} {r['device'][:20]:<20} {_ms(r['clock_offset_ns']):>12} "
            f"{_ms(r['clock_bound_ns']):>10} {_pct(t.get('idle_pct'))} "
            f"{_pct(t.get('compute_pct'))}   {_pct(t.get('non_compute_pct'))}   "
            f"{_pct(o.get('overlap_pct'))}  {_clock_status(r)}"
        )
    return out


def _stragglers_lines(
    strag: list[StragglerView], findings: list[FindingEntry], top: int
) -> list[str]:
    """The likeliest stragglers; when no finding names one, why none cleared the threshold."""
    if not strag:
        return []
    out = [
        "",
        "Stragglers (most likely first): rank  score  late      others waited  "
        "last/joined (chance)  p",
    ]
    for s in strag[: min(top, 5)]:
        out.append(
            f"        {s['rank']:>4} {s['device'][:20]:<20} {s['score']:.2f}  "
            f"{_ms(s['late_ns']):>12} {_ms(s['blame_ns']):>12}  "
            f"{s['last_arrivals']}/{s.get('collectives', 0)} ({s.get('expected_last', 0):.1f})"
            f"  {s.get('p_last', 1.0):.2g}"
        )
    if not any(f["kind"] in ("straggler", "throttle") for f in findings) and len(strag) > 1:
        out.append(_no_straggler_line(strag))
    return out


def _no_straggler_line(strag: list[StragglerView]) -> str:
    """Why no rank is a straggler: the closest one, and the latest site when its test says
    something."""
    c = strag[0]
    best = min(strag, key=lambda s: s.get("site_p", 1.0))
    site = (
        f"; latest site: rank {best['rank']} at {best['site']}, order test "
        f"p={best.get('site_p', 1.0):.2g}"
        if best.get("site") and best.get("site_p", 1.0) < 0.5
        else ""
    )
    return (
        f"        no straggler: no rank's lateness clears the threshold (closest: rank "
        f"{c['rank']}, last at {c['last_arrivals']} of {c.get('collectives', 0)} "
        f"collectives, chance {c.get('expected_last', 0):.1f}, p={c.get('p_last', 1.0):.2g}"
        f"{site})"
    )


def _collectives_lines(coll: CollectivesView, top: int) -> list[str]:
    """The collectives matched across ranks, per operation and group."""
    if not coll.get("count"):
        return []
    out = [
        "",
        f"Collectives: {coll['count']} matched across ranks (by {coll.get('matched_by')}), "
        f"total wait {_ms(coll.get('total_wait_ns'))}",
    ]
    for s in coll.get("summary", [])[:top]:
        bw = s.get("median_busbw")
        out.append(
            f"        {s['op']:<14} group {s['group'] or '-':<10} x{s['count']:<6} wait "
            f"{_ms(s['total_wait_ns'])}, median transfer {_ms(s['median_transfer_ns'])}, "
            f"busbw {'-' if bw is None else f'{bw / 1e9:.2f} GB/s'}"
        )
    return out


def _calls_lines(coll: CollectivesView) -> list[str]:
    """The collective calls, by operation, when none was matched across ranks."""
    calls = coll.get("calls") or {}
    if coll.get("count") or not calls.get("count"):
        return []
    parts = ", ".join(
        f"{c['op']} x{c['calls']}"
        + (f" ({c['bytes_total'] / 1e6:.1f} MB)" if c.get("bytes_known") else "")
        for c in calls.get("by_op", [])
    )
    return ["", f"Collective calls (not matched across ranks): {calls['count']}: {parts}"]


def _links_lines(links: list[LinkView], top: int) -> list[str]:
    """The links with a slowness, slowest first."""
    slow = [s for s in links if s.get("slowness")]
    if not slow:
        return []
    out = ["", "Links: link                      transfers  median      slowness"]
    for s in sorted(slow, key=lambda x: -x["slowness"])[:top]:
        out.append(
            f"        {s['link']:<26} {s['transfers']:>8}  {_ms(s['median_ns']):>10}  "
            f"{s['slowness']:.2f}x"
        )
    return out


def _network_lines(net: NetworkView, top: int) -> list[str]:
    """The network model: host paths, or each rank's transfers when no peer is named; then
    the collectives' transfer phase per host set, where the run has one."""
    return _path_lines(net, top) + _collective_transfer_lines(net, top)


def _collective_transfer_lines(net: NetworkView, top: int) -> list[str]:
    """Collectives' bus bandwidth in their transfer phase, per host set, against within-host
    collectives of the same operation and size (evidence, no verdict)."""
    rows = net.get("collective_transfer") or []
    if not rows:
        return []
    out = [
        "",
        "Collectives' transfer phase by hosts: hosts  op  size  instances  bus bandwidth  vs within-host",
    ]
    for r in rows[:top]:
        out.append(
            f"        {r['host_set'][:28]:<28} {r['op'][:14]:<14} {r['size_class_bytes']:>10} B "
            f"x{r['instances']:<5} {r['median_busbw'] / 1e6:9.1f} MB/s  {r['ratio']:.2f}x"
        )
    return out


def _path_lines(net: NetworkView, top: int) -> list[str]:
    """Host paths' bandwidth, or each rank's transfers when the trace names no peer."""
    if net.get("paths"):
        out = [
            "",
            "Network paths: path                 transfers  median      bandwidth   vs reference",
        ]
        for p in net["paths"][:top]:
            bw = p.get("median_bw")
            out.append(
                f"        {p['path'][:28]:<28} {p['transfers']:>8}  "
                f"{_ms(p['median_transfer_ns']):>10}  "
                f"{'-' if bw is None else f'{bw / 1e6:9.1f} MB/s'}  "
                + (
                    f"{p['slowness']:.1f}x below {p['reference_bw'] / 1e6:.1f} MB/s"
                    if p.get("slow")
                    else (
                        f"ref {p['reference_bw'] / 1e6:.1f} MB/s ({p['reference']})"
                        if p.get("reference_bw")
                        else "-"
                    )
                )
                + (" SLOW" if p.get("slow") else "")
            )
        return out
    if not net.get("unpaired"):
        return []
    out = ["", "Transfers (the trace names no peers): rank  sends/receives  median  vs other ranks"]
    for u in net["unpaired"][: 2 * top]:
        out.append(
            f"        {u['rank']:>4} {u['host'][:16]:<16} {u['direction']:<5} x{u['count']:<5} "
            f"{_ms(u['median_ns']):>10}  {u['ratio']:.1f}x" + (" SLOW" if u["slow"] else "")
        )
    return out


def _critical_path_lines(cp: CriticalPathView) -> list[str]:
    """The critical path's length by category and rank, its graph replays and what a
    straggler at the median pace would save."""
    if not cp.get("length_ns"):
        return []
    comp = ", ".join(f"{c['category']} {_ms(c['ns'])}" for c in cp.get("by_category", []))
    ranks_on = ", ".join(f"rank {c['rank']} {_ms(c['ns'])}" for c in cp.get("by_rank", []))
    out = ["", f"Critical path: {_ms(cp['length_ns'])} ({comp})", f"        by rank: {ranks_on}"]
    for g in cp.get("graph_replays", [])[:3]:  # one launch, many kernels queued by it
        out.append(f"        graph replay: {g['kernels']} kernels from one launch ({g['launch']}, "
                   f"{_ms(g['on_path_ns'])} on the path)")  # fmt: skip
    wi = cp.get("straggler_what_if")
    if wi:
        frac = wi.get("sampled_fraction", 1.0)
        whole = (
            f"; about {_ms(wi['saved_run_ns'])} over the whole run "
            f"({frac:.0%} of its collectives traced)"
            if frac < 1.0 and "saved_run_ns" in wi
            else ""
        )
        out.append(
            f"        if rank {wi['rank']} ran at the median pace: {_ms(wi['saved_ns'])} "
            f"saved on the traced path ({wi['saved_pct']:.1f}%){whole}"
        )
    return out


def _causality_lines(cz: CausalitySection, top: int) -> list[str]:
    """The causality sentence and the events moved per rank."""
    if not cz:
        return []
    out = ["", f"Causality: {_causality_line(cz)}"]
    for pr in cz.get("per_rank", [])[:top]:
        out.append(
            f"        rank {pr['rank']}: {pr['moved_events']} events moved, at most "
            f"{_ms(pr['max_shift_ns'])}"
        )
    return out


def _requests_lines(req: RequestsSection) -> list[str]:
    """Serving requests: latency percentiles, where the time to first token went, and the
    accelerator time and energy per request."""
    if not req.get("count"):
        return []
    s = req["summary"]
    out = [
        "",
        f"Requests: {req['count']}; TTFT p50 {_ms(s['ttft_p50_ns'])}, p99 "
        f"{_ms(s['ttft_p99_ns'])}; TPOT p50 {_ms(s['tpot_p50_ns'])}, p99 "
        f"{_ms(s['tpot_p99_ns'])}; TTFT is queue {_pct(s['ttft_queue_pct'])}, prefill "
        f"{_pct(s['ttft_prefill_pct'])}, layers {_pct(s['ttft_layers_pct'])}, "
        f"collectives {_pct(s['ttft_collectives_pct'])}",
    ]
    acc = (req.get("accounting") or {}).get("summary")  # per-request device time, energy
    if acc:
        j = ""
        if acc["joules_p50"] is not None:
            j = f"; energy p50 {acc['joules_p50']:.2f} J, p99 {acc['joules_p99']:.2f} J"
        out.append(
            f"        accelerator time per request p50 {acc['accelerator_ms_p50']:.3f} ms, "
            f"p99 {acc['accelerator_ms_p99']:.3f} ms{j}"
        )
    return out


def _skipped_lines(skipped: list[SkippedEntry], top: int) -> list[str]:
    """The files and records left out, at most ``top`` of them."""
    if not skipped:
        return []
    out = ["", f"Left out ({len(skipped)}):"]
    for s in skipped[:top]:
        out.append(f"        {s['path']}: {s['record']}: {s['reason']}")
    if len(skipped) > top:
        out.append(f"        ... and {len(skipped) - top} more (see the JSON output)")
    return out
