"""The semantic-conventions registry of otel-ext: what every attribute, span and metric means.

The YAML files under ``model/`` are the single source of truth. ``attributes.py``,
``spans.py`` and ``metrics.py`` are generated from them (``otel-ext semconv generate``) and
checked in; ``otel-ext semconv check`` fails when they are stale.
"""
