"""Serving passes: request latency attribution and the serving engines' own telemetry.

Thin on purpose: modules are imported by their full name, so importing the package
imports no pass (the passes import each other; an eager ``__init__`` would make cycles).
"""
