"""Per-rank passes: what one rank's table says on its own (time breakdown, overlap, memory,
roofline, compute samples, collective calls, data dependencies) and the per-rank phase that runs them.

Thin on purpose: modules are imported by their full name, so importing the package
imports no pass (the passes import each other; an eager ``__init__`` would make cycles).
"""
