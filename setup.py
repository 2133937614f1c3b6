"""Declares the optional C extension; all other metadata is in pyproject.toml.

``_cscan`` (the compiled Kineto column extractor) is optional: where it cannot be built the
loader uses its ``msgspec`` path and gives the same tables.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "otel_ext.analysis.loaders._cscan",
            ["otel_ext/analysis/loaders/_cscan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
