"""CLI commands: report. Each command parses options, calls one library function and
writes the output."""

from __future__ import annotations

from traceparse.cli.main import main  # noqa: F401  (commands register on this group)
