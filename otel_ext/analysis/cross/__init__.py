"""Cross-rank passes: clock alignment, collectives matched across ranks, stragglers and the
waits they cause, the network model, counter evidence, the critical path, hangs and imbalance.

Thin on purpose: modules are imported by their full name, so importing the package
imports no pass (the passes import each other; an eager ``__init__`` would make cycles).
"""
