"""Reports: the terminal summary, the HTML page and the merged Perfetto timeline.

Thin on purpose: modules are imported by their full name, so importing the package
imports no pass (the passes import each other; an eager ``__init__`` would make cycles).
"""
