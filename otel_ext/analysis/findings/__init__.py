"""Findings: the rules that turn the passes' evidence into ranked, evidence-backed verdicts.

* :mod:`~otel_ext.analysis.findings.build`: :func:`build_findings`, every rule then the ranking;
* :mod:`~otel_ext.analysis.findings.finding`: ``Finding``, ``Thresholds``, ``CAUSE_KINDS``;
* :mod:`~otel_ext.analysis.findings.evidence`: the typed rows and sections the rules read;
* the rules, one function per kind: :mod:`~otel_ext.analysis.findings.slow_ranks` (on the
  straggler test of :mod:`~otel_ext.analysis.findings.verdicts`),
  :mod:`~otel_ext.analysis.findings.network`, :mod:`~otel_ext.analysis.findings.symptoms`;
* :mod:`~otel_ext.analysis.findings.ranking`: grouped, rated, causes before symptoms.

Thin on purpose: modules are imported by their full name, so importing the package
imports no pass (the passes import each other; an eager ``__init__`` would make cycles).
"""
