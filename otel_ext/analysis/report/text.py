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

__all__ = ["render_text"]


def _ms(ns: Any) -> str:
    if ns is None:
        return "-"
    return f"{float(ns) / 1e6:.3f} ms"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{float(x):5.1f}%"


def _evidence_line(ev: dict[str, Any], limit: int = 8) -> str:
    parts = []
    for k, v in ev.items():
        if isinstance(v, dict | list):
            continue
        if isinstance(v, float):
            v = f"{v:.4g}"
        parts.append(f"{k}={v}")
        if len(parts) >= limit:
            break
    return ", ".join(parts)


def _clock_status(rank: dict[str, Any]) -> str:
    """How a rank's clock was treated: the reference, shifted, or left as recorded."""
    status = rank.get("clock_status", "")
    if status == "unidentifiable":
        est = rank.get("clock_offset_estimate_ns", 0.0)
        return f"kept (estimate {_ms(est)} within its bound)"
    return status


def _causality_line(cz: dict[str, Any]) -> str:
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
    out: list[str] = []
    w = out.append
    run = doc.get("run") or {}
    n_in = sum(1 for i in doc.get("inputs", []) if i.get("status") == "loaded")
    w(
        f"otel-ext analysis: {run.get('events', 0)} events, {run.get('metric_points', 0)} "
        f"metric points from {n_in} files; {len(doc.get('ranks', []))} ranks; run "
        f"{_ms(run.get('duration_ns', 0))}"
    )
    out.extend(unfinished_lines(doc))  # files of processes killed before their shutdown
    runs = doc.get("runs") or []
    if len(runs) > 1:
        w(
            f"{len(runs)} separate runs (separate captures, or hours apart; ranks "
            + "; ".join(",".join(str(r) for r in x["ranks"]) for x in runs)
            + "): collectives are matched and ranks compared within a run only"
        )
    findings = doc.get("findings") or []
    w("Findings (most important first):" if findings else "Findings: none")
    for i, f in enumerate(findings[:top], 1):
        w(
            f"{i:2d}. {f['kind']:<14} {f['target']:<19} impact {_ms(f['impact_ns']):>10} "
            f"({_pct(f['impact_pct'])})  {f.get('summary', '')}"
        )
        ev = _evidence_line(f.get("evidence") or {})
        if ev:
            w(f"    evidence: {ev}")
    ranks = doc.get("ranks") or []
    if ranks:
        tb = {r["rank"]: r for r in doc.get("temporal_breakdown") or []}
        ov = {r["rank"]: r for r in doc.get("comm_comp_overlap") or []}
        w("")
        w(
            "Ranks:  rank device               clock offset    bound     idle  compute  non-comp  overlap  clock"
        )
        for r in ranks:
            t = tb.get(r["rank"], {})
            o = ov.get(r["rank"], {})
            w(
                f"        {r['rank']:>4} {r['device'][:20]:<20} {_ms(r['clock_offset_ns']):>12} "
                f"{_ms(r['clock_bound_ns']):>10} {_pct(t.get('idle_pct'))} "
                f"{_pct(t.get('compute_pct'))}   {_pct(t.get('non_compute_pct'))}   "
                f"{_pct(o.get('overlap_pct'))}  {_clock_status(r)}"
            )
    strag = doc.get("stragglers") or []
    if strag:
        w("")
        w(
            "Stragglers (most likely first): rank  score  late      others waited  "
            "last/joined (chance)  p"
        )
        for s in strag[: min(top, 5)]:
            w(
                f"        {s['rank']:>4} {s['device'][:20]:<20} {s['score']:.2f}  "
                f"{_ms(s['late_ns']):>12} {_ms(s['blame_ns']):>12}  "
                f"{s['last_arrivals']}/{s.get('collectives', 0)} ({s.get('expected_last', 0):.1f})"
                f"  {s.get('p_last', 1.0):.2g}"
            )
        if not any(f["kind"] in ("straggler", "throttle") for f in findings) and len(strag) > 1:
            c = strag[0]
            best = min(strag, key=lambda s: s.get("site_p", 1.0))
            site = (
                f"; latest site: rank {best['rank']} at {best['site']}, order test "
                f"p={best.get('site_p', 1.0):.2g}"
                if best.get("site") and best.get("site_p", 1.0) < 0.5
                else ""
            )
            w(
                f"        no straggler: no rank's lateness clears the threshold (closest: rank "
                f"{c['rank']}, last at {c['last_arrivals']} of {c.get('collectives', 0)} "
                f"collectives, chance {c.get('expected_last', 0):.1f}, p={c.get('p_last', 1.0):.2g}"
                f"{site})"
            )
    coll = doc.get("collectives") or {}
    if coll.get("count"):
        w("")
        w(
            f"Collectives: {coll['count']} matched across ranks (by {coll.get('matched_by')}), "
            f"total wait {_ms(coll.get('total_wait_ns'))}"
        )
        for s in coll.get("summary", [])[:top]:
            bw = s.get("median_busbw")
            w(
                f"        {s['op']:<14} group {s['group'] or '-':<10} x{s['count']:<6} wait "
                f"{_ms(s['total_wait_ns'])}, median transfer {_ms(s['median_transfer_ns'])}, "
                f"busbw {'-' if bw is None else f'{bw / 1e9:.2f} GB/s'}"
            )
    calls = coll.get("calls") or {}
    if not coll.get("count") and calls.get("count"):
        w("")
        parts = ", ".join(
            f"{c['op']} x{c['calls']}"
            + (f" ({c['bytes_total'] / 1e6:.1f} MB)" if c.get("bytes_known") else "")
            for c in calls.get("by_op", [])
        )
        w(f"Collective calls (not matched across ranks): {calls['count']}: {parts}")
    links = [s for s in doc.get("links") or [] if s.get("slowness")]
    if links:
        w("")
        w("Links: link                      transfers  median      slowness")
        for s in sorted(links, key=lambda x: -x["slowness"])[:top]:
            w(
                f"        {s['link']:<26} {s['transfers']:>8}  {_ms(s['median_ns']):>10}  "
                f"{s['slowness']:.2f}x"
            )
    net = doc.get("network") or {}
    if net.get("paths"):
        w("")
        w("Network paths: path                 transfers  median      bandwidth   vs reference")
        for p in net["paths"][:top]:
            bw = p.get("median_bw")
            w(
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
    elif net.get("unpaired"):
        w("")
        w("Transfers (the trace names no peers): rank  sends/receives  median  vs other ranks")
        for u in net["unpaired"][: 2 * top]:
            w(
                f"        {u['rank']:>4} {u['host'][:16]:<16} {u['direction']:<5} x{u['count']:<5} "
                f"{_ms(u['median_ns']):>10}  {u['ratio']:.1f}x" + (" SLOW" if u["slow"] else "")
            )
    cp = doc.get("critical_path") or {}
    if cp.get("length_ns"):
        w("")
        comp = ", ".join(f"{c['category']} {_ms(c['ns'])}" for c in cp.get("by_category", []))
        w(f"Critical path: {_ms(cp['length_ns'])} ({comp})")
        ranks_on = ", ".join(f"rank {c['rank']} {_ms(c['ns'])}" for c in cp.get("by_rank", []))
        w(f"        by rank: {ranks_on}")
        for g in cp.get("graph_replays", [])[:3]:  # one launch, many kernels queued by it
            w(f"        graph replay: {g['kernels']} kernels from one launch ({g['launch']}, "
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
            w(
                f"        if rank {wi['rank']} ran at the median pace: {_ms(wi['saved_ns'])} "
                f"saved on the traced path ({wi['saved_pct']:.1f}%){whole}"
            )
    cz = doc.get("causality") or {}
    if cz:
        w("")
        w(f"Causality: {_causality_line(cz)}")
        for pr in cz.get("per_rank", [])[:top]:
            w(
                f"        rank {pr['rank']}: {pr['moved_events']} events moved, at most "
                f"{_ms(pr['max_shift_ns'])}"
            )
    req = doc.get("requests") or {}
    if req.get("count"):
        s = req["summary"]
        w("")
        w(
            f"Requests: {req['count']}; TTFT p50 {_ms(s['ttft_p50_ns'])}, p99 "
            f"{_ms(s['ttft_p99_ns'])}; TPOT p50 {_ms(s['tpot_p50_ns'])}, p99 "
            f"{_ms(s['tpot_p99_ns'])}; TTFT is queue {_pct(s['ttft_queue_pct'])}, prefill "
            f"{_pct(s['ttft_prefill_pct'])}, layers {_pct(s['ttft_layers_pct'])}, "
            f"collectives {_pct(s['ttft_collectives_pct'])}"
        )
        acc = (req.get("accounting") or {}).get("summary")  # per-request device time, energy
        if acc:
            j = ""
            if acc["joules_p50"] is not None:
                j = f"; energy p50 {acc['joules_p50']:.2f} J, p99 {acc['joules_p99']:.2f} J"
            w(
                f"        accelerator time per request p50 {acc['accelerator_ms_p50']:.3f} ms, "
                f"p99 {acc['accelerator_ms_p99']:.3f} ms{j}"
            )
    for line in memory_text(doc):  # a memory timeline was loaded
        w(line)
    skipped = doc.get("skipped") or []
    if skipped:
        w("")
        w(f"Left out ({len(skipped)}):")
        for s in skipped[:top]:
            w(f"        {s['path']}: {s['record']}: {s['reason']}")
        if len(skipped) > top:
            w(f"        ... and {len(skipped) - top} more (see the JSON output)")
    return "\n".join(out) + "\n"
