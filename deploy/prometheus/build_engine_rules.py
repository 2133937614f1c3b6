"""Write ``rules/otel-ext-serving-engines.yaml`` from ``engine-metrics.yaml``.

Each engine histogram mapped to a ``gen_ai.server.*`` metric gets the quantile recording
rules the otel-ext histogram has (same record names, so the same dashboards and alerts), with
the engine's model label renamed to ``gen_ai_request_model`` and an ``engine`` label.

Run: ``python deploy/prometheus/build_engine_rules.py`` (``--check`` exits 1 when stale).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
TABLE = HERE / "engine-metrics.yaml"
OUT = HERE / "rules" / "otel-ext-serving-engines.yaml"
#: quantiles recorded per gen_ai.server metric (as otel-ext-recording.yaml records them)
QUANTILES = {
    "gen_ai.server.time_to_first_token": ("0.5", "0.9", "0.99"),
    "gen_ai.server.time_per_output_token": ("0.5", "0.99"),
    "gen_ai.server.request.duration": ("0.5", "0.99"),
}


def prometheus_family(otel_name: str) -> str:
    """``gen_ai.server.time_to_first_token`` -> ``gen_ai_server_time_to_first_token_seconds``.

    >>> prometheus_family("gen_ai.server.request.duration")
    'gen_ai_server_request_duration_seconds'
    """
    return otel_name.replace(".", "_") + "_seconds"


def render(table: dict[str, Any]) -> str:
    label = table["model_label"]
    # one rule per engine and gen_ai.server metric; an engine's older and newer names for it
    # (vLLM's time_per_output_token, now inter_token_latency) are one series set by `or`
    sources: dict[tuple[str, str], list[str]] = {}
    for m in table["metrics"]:
        sources.setdefault((m["engine"], m["maps_to"]), []).append(m["source"])
    rules = []
    for (engine, maps_to), names in sources.items():
        family = prometheus_family(maps_to)
        rates = " or ".join(f"rate({n}_bucket[1m])" for n in names)
        inner = f'label_replace({rates}, "gen_ai_request_model", "$1", "{label}", "(.*)")'
        for q in QUANTILES[maps_to]:
            rules.append(
                {
                    "record": f"model:{family}:quantile_rate1m",
                    "expr": f"histogram_quantile({q}, sum by (le, gen_ai_request_model) ({inner}))",
                    "labels": {"quantile": q, "engine": engine},
                }
            )
    doc = {"groups": [{"name": "otel-ext-serving-engines", "interval": "15s", "rules": rules}]}
    head = (
        "# Generated from deploy/prometheus/engine-metrics.yaml by\n"
        "# deploy/prometheus/build_engine_rules.py. Do not edit.\n"
        "# vLLM's and SGLang's latency histograms as gen_ai.server.* quantiles, recorded under the\n"
        "# same names as otel-ext's own (engine label: which engine served them).\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, width=200)


def main(argv: list[str]) -> int:
    text = render(yaml.safe_load(TABLE.read_text(encoding="utf-8")))
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run python deploy/prometheus/build_engine_rules.py")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
