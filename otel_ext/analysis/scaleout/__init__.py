"""The scale-out back end: the per-rank phase as jobs on a Dask cluster and the packed rows
its workers send back.

Thin on purpose: modules are imported by their full name, so importing the package
imports no pass (the passes import each other; an eager ``__init__`` would make cycles).
"""
