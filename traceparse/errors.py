"""One exception hierarchy; the CLI maps it to exit codes in one place.

* :class:`TraceError` - bad user input (unreadable, truncated, corrupt, wrong kind, missing
  tables or keys, absurd values): exit code 2 with one line naming the file and the problem.
* Anything else escaping a command is an internal error: exit code 1.
"""

from __future__ import annotations

import os


class TraceError(Exception):
    """Bad input. ``str()`` is the one-line message shown to the user."""

    def __init__(self, path: str | os.PathLike[str] | None, problem: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(f"{self.path}: {self.problem}" if self.path else self.problem)

    def __reduce__(self) -> tuple[type, tuple[str | None, str]]:
        # rebuilt from (path, problem) when it crosses processes (a Dask worker's error)
        return type(self), (self.path, self.problem)


class NotATrace(TraceError):
    """Well-formed input of another kind: a JSON document without trace events, an SQLite
    database without Nsight Systems tables, a CSV without an Nsight Compute header or log.
    Not a damaged trace but no trace at all: ``batch`` skips such files (a capture's
    ``*.meta.json`` sidecar beside its trace) where it fails on a damaged one."""


class UsageError(TraceError):
    """Bad command-line usage that is about input or output paths (exit code 2)."""


def wrong_values(path: str | os.PathLike[str], exc: Exception) -> TraceError:
    """The :class:`TraceError` for a polars cast or comparison that failed on the input's
    values: an id of the wrong type, or a value out of range for its schema type (a device
    id of 2**40 for Int32). polars' first line names the column."""
    first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
    return TraceError(path, f"a column holds values of the wrong type or out of range: {first}")
