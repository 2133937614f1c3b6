"""Analysis: telemetry files to one columnar event table, passes over it, findings, reports.

Sub-packages: ``loaders`` (every input format to the table), ``rank`` (per-rank passes),
``cross`` (cross-rank passes), ``serving`` (request attribution), ``findings`` (rules and
ranking), ``report`` (text, HTML, Perfetto), ``scaleout`` (the Dask back end); ``engine`` runs
them as named phases (docs/architecture.md, "The analysis package").
"""

from otel_ext.analysis.table import Category, EventTable

__all__ = ["Category", "EventTable"]
