"""The HTML report: one self-contained page (inline CSS, SVG and JavaScript; no network).

Plots a person would rather look at than read: per-rank breakdown bars (compute,
non-compute, idle), a collective-wait heatmap (ranks × time), the critical path on a timeline
(one lane per rank, coloured by category), and the implicated chip's or link's counters over
the run. Static parts are SVG written here; the heatmap and the counter charts are drawn by
the page's own script from the embedded data, which then sets ``document.title`` to
``"ok"`` (or ``"error: ..."``), so a headless browser can tell that the page rendered.

A function of the analysis document alone.

>>> page = render_html({"schema": "otel-ext.analysis/1", "findings": [], "ranks": []})
>>> page.startswith("<!DOCTYPE html>"), "http" in page.split("<body>")[0]
(True, False)
"""

from __future__ import annotations

import html
import json
from typing import Any

from otel_ext.analysis.loaders.partial import unfinished_lines
from otel_ext.analysis.rank.memory import memory_html
from otel_ext.analysis.report.sections import (
    BreakdownRow,
    CausalitySection,
    CollectivesView,
    CriticalPathView,
    FindingEntry,
    JsonValue,
    NetworkView,
    RankView,
    RequestsSection,
    RunView,
    StragglerView,
    TimelineSection,
    WhatIf,
)

__all__ = ["json_for_script", "render_html"]

# Characters that must not appear raw inside an HTML <script> element: "<" starts "</script>"
# and "<!--" (which, followed by "<script", swallows the page's own script), ">" ends "-->",
# "&" keeps the block free of character references, U+2028/U+2029 are line terminators to
# pre-2019 JavaScript. Each becomes its JSON \\u escape, which JSON.parse reads back unchanged.
_SCRIPT_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_SCRIPT_UNSAFE_TABLE = str.maketrans(_SCRIPT_UNSAFE)


def json_for_script(data: Any) -> str:
    """``data`` as JSON that is safe to embed in an HTML ``<script>`` element.

    Every ``<``, ``>``, ``&``, U+2028 and U+2029 is written as its ``\\uXXXX`` escape (inside
    strings, the only place JSON can hold them), so no value can end the element, open an HTML
    comment or change how the page's own script parses; ``JSON.parse`` returns ``data`` unchanged.

    Args:
        data: a JSON-serialisable value (others are written with ``str``).

    Returns:
        The JSON text, free of the five characters.

    >>> json_for_script({"host": "host1<!--<script>"})
    '{"host": "host1\\\\u003c!--\\\\u003cscript\\\\u003e"}'
    >>> json.loads(json_for_script(["</script>&\u2028"])) == ["</script>&\u2028"]
    True
    """
    return json.dumps(data, default=str).translate(_SCRIPT_UNSAFE_TABLE)


_COLORS = {
    "compute": "#4e79a7",
    "communication": "#f28e2b",
    "memory": "#59a14f",
    "launch": "#b07aa1",
    "idle": "#d3d3d3",
    "host": "#9c755f",
    "queue": "#edc948",
    "sync": "#e15759",
    "runtime": "#76b7b2",
    "other": "#bab0ac",
    "non_compute": "#f28e2b",
}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}th{background:#f6f6f6}.num{text-align:right;
font-variant-numeric:tabular-nums}.kind{font-weight:600}.muted{color:#777;font-size:12px}
.legend span{display:inline-block;margin-right:12px;font-size:12px}.legend i{display:inline-block;
width:10px;height:10px;margin-right:4px;vertical-align:middle}svg text{font-size:11px;
fill:#333}details{font-size:12px}pre{white-space:pre-wrap;margin:4px 0}
"""

_JS = r"""
(function(){
function el(name, attrs, parent){var e=document.createElementNS('http://www.w3.org/2000/svg',name);
 for(var k in attrs){e.setAttribute(k,attrs[k]);} if(parent){parent.appendChild(e);} return e;}
function txt(parent,x,y,s,anchor){var t=el('text',{x:x,y:y,'text-anchor':anchor||'start'},parent);
 t.textContent=s; return t;}
function fmtNs(ns){ if(ns>=1e9) return (ns/1e9).toFixed(2)+' s'; if(ns>=1e6) return (ns/1e6).toFixed(2)+' ms';
 if(ns>=1e3) return (ns/1e3).toFixed(1)+' us'; return Math.round(ns)+' ns';}
function heatmap(data, host){
 if(!data||!data.ranks||!data.ranks.length){host.textContent='No collectives matched across ranks.';return;}
 var rows=data.ranks.length, cols=data.wait_ns[0].length, cw=Math.max(6,Math.floor(900/cols)),
     ch=Math.max(8,Math.min(22,Math.floor(360/rows))), left=70, top=10;
 var svg=el('svg',{width:left+cols*cw+20,height:top+rows*ch+40,role:'img'},host);
 var max=0; data.wait_ns.forEach(function(r){r.forEach(function(v){if(v>max)max=v;});});
 for(var i=0;i<rows;i++){ txt(svg,left-6,top+i*ch+ch*0.75,'rank '+data.ranks[i],'end');
  for(var j=0;j<cols;j++){ var v=data.wait_ns[i][j], a=max>0?v/max:0;
   var c='rgb('+Math.round(255-a*(255-200))+','+Math.round(255-a*(255-40))+','+Math.round(255-a*(255-40))+')';
   var r=el('rect',{x:left+j*cw,y:top+i*ch,width:cw-1,height:ch-1,fill:c},svg);
   el('title',{},r).textContent='rank '+data.ranks[i]+', bin '+j+': waited '+fmtNs(v);}}
 var span=data.edges_ns[data.edges_ns.length-1]-data.edges_ns[0];
 txt(svg,left,top+rows*ch+16,'0'); txt(svg,left+cols*cw,top+rows*ch+16,fmtNs(span),'end');
 txt(svg,left+cols*cw/2,top+rows*ch+32,'time (darker = longer wait in collectives)','middle');
}
function lineChart(name, s, host){
 var vals=s.values||[]; if(vals.length<2) return;
 var w=560,h=150,l=70,b=24,t=18; var div=document.createElement('div'); host.appendChild(div);
 var svg=el('svg',{width:w,height:h,role:'img'},div);
 var t0=vals[0][0], t1=vals[vals.length-1][0], lo=Infinity, hi=-Infinity;
 vals.forEach(function(p){if(p[1]<lo)lo=p[1]; if(p[1]>hi)hi=p[1];});
 if(s.peer_median!==null&&s.peer_median!==undefined){lo=Math.min(lo,s.peer_median);hi=Math.max(hi,s.peer_median);}
 if(hi-lo<=Math.abs(hi)*1e-6){var pad=Math.abs(hi)*0.05||1; lo-=pad; hi+=pad;}
 function X(x){return l+(w-l-10)*(t1>t0?(x-t0)/(t1-t0):0);} function Y(y){return t+(h-t-b)*(1-(y-lo)/(hi-lo));}
 var d=vals.map(function(p,i){return (i?'L':'M')+X(p[0]).toFixed(1)+' '+Y(p[1]).toFixed(1);}).join(' ');
 el('path',{d:d,fill:'none',stroke:'#e15759','stroke-width':1.8},svg);
 if(s.peer_median!==null&&s.peer_median!==undefined){
  el('line',{x1:l,x2:w-10,y1:Y(s.peer_median),y2:Y(s.peer_median),stroke:'#4e79a7','stroke-dasharray':'4 3'},svg);
  txt(svg,w-12,Y(s.peer_median)-3,'peers (median)','end');}
 txt(svg,l,12,name); txt(svg,l-4,Y(hi)+4,hi.toPrecision(3),'end'); txt(svg,l-4,Y(lo),lo.toPrecision(3),'end');
 txt(svg,w-10,h-6,fmtNs(t1-t0),'end');
}
try{
 var data=JSON.parse(document.getElementById('report-data').textContent);
 heatmap(data.heatmap, document.getElementById('heatmap'));
 var ch=document.getElementById('counters');
 if(data.counters&&data.counters.series){
  var names=Object.keys(data.counters.series);
  if(!names.length){ch.textContent='No counters recorded for '+data.counters.target+'.';}
  names.forEach(function(n){lineChart(n,data.counters.series[n],ch);});
 } else { ch.textContent='No counter data for the top finding.'; }
 document.title='ok';
}catch(e){ document.title='error: '+e; }
})();
"""


def _e(x: object) -> str:
    """``x`` as escaped HTML text."""
    return html.escape(str(x), quote=True)


def _ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds, three decimals (``-`` for none)."""
    return "-" if ns is None else f"{float(ns) / 1e6:.3f} ms"


def _legend(keys: list[str]) -> str:
    """A colour legend for ``keys``."""
    items = "".join(f'<span><i style="background:{_COLORS[k]}"></i>{_e(k)}</span>' for k in keys)
    return f'<div class="legend">{items}</div>'


def _breakdown_svg(rows: list[BreakdownRow], ranks: list[RankView]) -> str:
    """Per rank, a bar of its compute, non-compute and idle time."""
    if not rows:
        return '<p class="muted">No device events.</p>'
    names = {r["rank"]: r.get("device", "") for r in ranks}
    bar_w, left, h = 640, 170, 18
    parts = [f'<svg width="{left + bar_w + 80}" height="{len(rows) * (h + 4) + 10}" role="img">']
    for i, r in enumerate(rows):
        y = 4 + i * (h + 4)
        label = f"rank {r['rank']} {names.get(r['rank'], '')}"[:28]
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{_e(label)}</text>')
        x: float = left
        for key, pct in (
            ("compute", r.get("compute_pct", 0.0)),
            ("non_compute", r.get("non_compute_pct", 0.0)),
            ("idle", r.get("idle_pct", 0.0)),
        ):
            w = bar_w * max(float(pct or 0.0), 0.0) / 100.0
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}" fill="{_COLORS[key]}">'
                f"<title>{_e(key)}: {float(pct or 0):.1f}%</title></rect>"
            )
            x += w
        parts.append(
            f'<text x="{left + bar_w + 6}" y="{y + 13}">{float(r.get("idle_pct", 0)):.1f}% idle</text>'
        )
    parts.append("</svg>")
    return _legend(["compute", "non_compute", "idle"]) + "".join(parts)


def _critical_path_svg(cp: CriticalPathView) -> str:
    """The critical path on a timeline: one lane per rank, coloured by category, its
    cross-rank edges as lines."""
    segs = cp.get("segments") or []
    if not segs:
        return '<p class="muted">No critical path (no device events).</p>'
    ranks = sorted({s["rank"] for s in segs})
    lane = {r: i for i, r in enumerate(ranks)}
    t0 = min(s["start_ns"] for s in segs)
    t1 = max(s["end_ns"] for s in segs)
    span = max(t1 - t0, 1)
    width, left, h = 900, 70, 16
    parts = [f'<svg width="{left + width + 20}" height="{len(ranks) * (h + 6) + 30}" role="img">']
    for r, i in lane.items():
        parts.append(
            f'<text x="{left - 6}" y="{8 + i * (h + 6) + 12}" text-anchor="end">rank {r}</text>'
        )
    prev = None
    for s in segs:
        x = left + width * (s["start_ns"] - t0) / span
        w = max(width * (s["end_ns"] - s["start_ns"]) / span, 0.5)
        y = 8 + lane[s["rank"]] * (h + 6)
        color = _COLORS.get(s["category"], _COLORS["other"])
        tip = f"rank {s['rank']} {s['category']} {s.get('name', '')}: {_ms(s['end_ns'] - s['start_ns'])}"
        parts.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{h}" fill="{color}">'
            f"<title>{_e(tip)}</title></rect>"
        )
        if prev is not None and prev["rank"] != s["rank"]:
            py = 8 + lane[prev["rank"]] * (h + 6) + h / 2
            parts.append(
                f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{py:.1f}" y2="{y + h / 2:.1f}" '
                'stroke="#333" stroke-width="1"/>'
            )
        prev = s
    y = len(ranks) * (h + 6) + 22
    parts.append(f'<text x="{left}" y="{y}">0</text>')
    parts.append(f'<text x="{left + width}" y="{y}" text-anchor="end">{_e(_ms(span))}</text>')
    parts.append("</svg>")
    keys = [k for k in _COLORS if k != "non_compute" and any(s["category"] == k for s in segs)]
    return _legend(keys) + "".join(parts)


def _table(rows: list[list[Any]], header: list[str], num: set[int] | None = None) -> str:
    """A table of ``rows`` under ``header``; the columns in ``num`` right-aligned."""
    num = num or set()
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="num">{_e(c)}</td>' if i in num else f"<td>{_e(c)}</td>"
            for i, c in enumerate(r)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _network_html(net: NetworkView) -> str:
    """The network model's table (docs/analysis.md, "The network model"): per host path from
    matched transfers, or per rank's sends and receives when the trace names no peers."""
    if net.get("paths"):
        rows = [
            [
                p["path"],
                p["transfers"],
                f"{p['median_transfer_ns'] / 1e6:.3f} ms",
                "-" if (bw := p.get("median_bw")) is None else f"{bw / 1e6:.1f} MB/s",
                (
                    f"{p['slowness']:.1f}x below {p['reference']}"
                    if p.get("slow")
                    else (p.get("reference") or "-")
                ),
                "slow" if p.get("slow") else "",
            ]
            for p in net["paths"]
        ]
        return "<h2>Network paths</h2>" + _table(
            rows, ["path", "transfers", "median", "bandwidth", "against", ""], {1, 2, 3}
        )
    if net.get("unpaired"):
        rows = [
            [
                u["rank"],
                u["host"],
                u["direction"],
                u["count"],
                f"{u['median_ns'] / 1e6:.3f} ms",
                f"{u['ratio']:.1f}x",
                "slow" if u.get("slow") else "",
            ]
            for u in net["unpaired"]
        ]
        return "<h2>Transfers (the trace names no peers)</h2>" + _table(
            rows,
            ["rank", "host", "direction", "count", "median", "vs other ranks", ""],
            {0, 3, 4, 5},
        )
    return ""


def _findings_html(findings: list[FindingEntry]) -> str:
    """The findings table, each with its evidence (counters aside) folded."""
    if not findings:
        return '<p class="muted">No findings: nothing stands out.</p>'
    rows = []
    for i, f in enumerate(findings, 1):
        ev = {k: v for k, v in (f.get("evidence") or {}).items() if k != "counters"}
        rows.append(
            "<tr>"
            f'<td class="num">{i}</td><td class="kind">{_e(f["kind"])}</td>'
            f"<td>{_e(f['target'])}</td>"
            f'<td class="num">{_e(_ms(f["impact_ns"]))}</td>'
            f'<td class="num">{float(f["impact_pct"]):.2f}%</td>'
            f"<td>{_e(f.get('summary', ''))}<details><summary>evidence</summary>"
            f"<pre>{_e(json.dumps(ev, indent=1, default=str))}</pre></details></td>"
            "</tr>"
        )
    head = "<tr><th>#</th><th>kind</th><th>target</th><th>impact</th><th>%</th><th>why</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _top_counters(findings: list[FindingEntry]) -> dict[str, JsonValue] | None:
    """The counters of the first finding that carries a series of them."""
    for f in findings:
        c = (f.get("evidence") or {}).get("counters")
        if c and isinstance(c, dict) and c.get("series"):
            return c
    return None


def _timeline_html(tl: TimelineSection) -> str:
    """A link to the merged timeline written beside the report (``--timeline``), if any."""
    link = tl.get("link")
    if not link:
        return ""
    return (
        f"<p>Merged timeline of every rank (aligned clocks, collective flows, critical path, "
        f'findings): <a id="timeline-link" href="{_e(link)}">{_e(link)}</a> '
        f'<span class="muted">({_e(tl.get("events", 0))} events; open it in '
        f"ui.perfetto.dev or chrome://tracing)</span></p>"
    )


def render_html(doc: dict[str, Any], *, title: str = "otel-ext analysis") -> str:
    """The self-contained HTML page for ``doc``.

    Args:
        doc: the analysis document.
        title: the page heading (the browser title becomes ``ok`` once the script ran).

    Returns:
        The HTML text.
    """
    findings: list[FindingEntry] = doc.get("findings") or []
    coll: CollectivesView = doc.get("collectives") or CollectivesView()
    counters = _top_counters(findings)
    blob = json_for_script({"heatmap": coll.get("wait_heatmap"), "counters": counters})
    body = _body_html(doc, title=title, findings=findings, coll=coll, counters=counters)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>{body}"
        f'<script type="application/json" id="report-data">{blob}</script>'
        f"<script>{_JS}</script></body></html>\n"
    )


def _body_html(
    doc: dict[str, Any],
    *,
    title: str,
    findings: list[FindingEntry],
    coll: CollectivesView,
    counters: dict[str, JsonValue] | None,
) -> str:
    """The page's body: heading, findings, plots and tables, section by section."""
    run: RunView = doc.get("run") or RunView()
    cz: CausalitySection = doc.get("causality") or CausalitySection()
    cp: CriticalPathView = doc.get("critical_path") or CriticalPathView()
    net: NetworkView = doc.get("network") or NetworkView()
    req: RequestsSection = doc.get("requests") or RequestsSection()
    tl: TimelineSection = doc.get("timeline") or TimelineSection()
    ranks: list[RankView] = doc.get("ranks") or []
    counters_title = f" ({_e(counters['target'])})" if counters else ""
    return f"""
<h1>{_e(title)}</h1>
<p class="muted">{_e(run.get("events", 0))} events, {_e(run.get("metric_points", 0))} metric points,
{len(ranks)} ranks, run {_e(_ms(run.get("duration_ns", 0)))}.
Schema {_e(doc.get("schema", ""))}.</p>
{"".join(f'<p class="muted"><b>{_e(line)}</b></p>' for line in unfinished_lines(doc))}
{_timeline_html(tl)}
<h2>Findings</h2>{_findings_html(findings)}
<h2>Per-rank breakdown</h2>{_breakdown_svg(doc.get("temporal_breakdown") or [], ranks)}
<h2>Collective wait (ranks × time)</h2><div id="heatmap"></div>
<h2>Critical path</h2>
<p class="muted">Length {_e(_ms(cp.get("length_ns")))}.{_what_if_html(cp.get("straggler_what_if"))}</p>{_critical_path_svg(cp)}
<h2>Counters of the implicated target{counters_title}</h2><div id="counters"></div>
<h2>Stragglers</h2>{_stragglers_table(doc.get("stragglers") or [])}
<h2>Collectives</h2>{_collectives_table(coll)}
{_network_html(net)}
<h2>Clocks and causality</h2>{_ranks_table(ranks)}
<p>Causality violations: {_e(cz.get("violations_before", 0))} on the raw clocks,
{_e(cz.get("violations_after", 0))} after alignment and repair.</p>
<h2>Requests</h2>{_requests_html(req)}
{memory_html(doc.get("memory"))}
"""


def _what_if_html(wi: WhatIf | None) -> str:
    """What the straggler at the median pace would save (the critical path's sentence)."""
    if not wi:
        return ""
    whole = (
        f"; about {_e(_ms(wi['saved_run_ns']))} over the whole run ({float(wi['sampled_fraction']):.0%} of its collectives traced)."
        if float(wi.get("sampled_fraction", 1.0)) < 1.0 and "saved_run_ns" in wi
        else "."
    )
    return (
        f" If rank {_e(wi['rank'])} ran at the median pace: {_e(_ms(wi['saved_ns']))} saved on the traced path ({float(wi['saved_pct']):.1f}%)"
        + whole
    )


def _stragglers_table(strag: list[StragglerView]) -> str:
    """The stragglers table, at most 16 rows."""
    rows = [
        [s["rank"], s.get("device", ""), f"{s['score']:.2f}", _ms(s["late_ns"]), _ms(s["blame_ns"]),
         s["last_arrivals"], "-" if s.get("compute_ratio") is None else f"{s['compute_ratio']:.3f}"]
        for s in strag[:16]
    ]  # fmt: skip
    return _table(
        rows,
        ["rank", "device", "score", "late", "others waited", "last arrivals", "compute ratio"],
        {0, 2, 3, 4, 5, 6},
    )


def _collectives_table(coll: CollectivesView) -> str:
    """The matched collectives per operation and group."""
    rows = [
        [s["op"], s["group"] or "-", s["count"], _ms(s["total_wait_ns"]),
         _ms(s["median_transfer_ns"]),
         "-" if (bw := s.get("median_busbw")) is None else f"{bw / 1e9:.2f} GB/s"]
        for s in coll.get("summary") or []
    ]  # fmt: skip
    return _table(
        rows,
        ["op", "group", "count", "total wait", "median transfer", "median busbw"],
        {2, 3, 4, 5},
    )


def _ranks_table(ranks: list[RankView]) -> str:
    """Each rank's host, device, clock offset and bound."""
    rows = [
        [r["rank"], r.get("host", ""), r.get("device", ""), _ms(r["clock_offset_ns"]),
         _ms(r["clock_bound_ns"])]
        for r in ranks
    ]  # fmt: skip
    return _table(rows, ["rank", "host", "device", "clock offset", "bound"], {0, 3, 4})


def _requests_html(req: RequestsSection) -> str:
    """The serving requests' latency percentiles (or a note that there are none)."""
    if not req.get("count"):
        return '<p class="muted">No request spans.</p>'
    s = req["summary"]
    return _table(
        [[req["count"], _ms(s["ttft_p50_ns"]), _ms(s["ttft_p99_ns"]), _ms(s["tpot_p50_ns"]),
          _ms(s["tpot_p99_ns"]), s["ttft_queue_pct"], s["ttft_prefill_pct"]]],
        ["requests", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "queue % of TTFT",
         "prefill % of TTFT"],
    )  # fmt: skip
