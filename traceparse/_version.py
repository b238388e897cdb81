"""The version of traceparse: the one place it is written (pyproject.toml reads it from here,
and modules that the package ``__init__`` imports take it from here, not from ``traceparse``,
so no import cycle runs through the package root)."""

__version__ = "0.1.0"
