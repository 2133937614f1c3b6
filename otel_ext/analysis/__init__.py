"""Analysis: loaders to one columnar event table, one module per analysis, reports."""

from otel_ext.analysis.table import Category, EventTable

__all__ = ["Category", "EventTable"]
