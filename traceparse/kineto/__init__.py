"""PyTorch profiler (Kineto) Chrome-trace JSON: ``.json``, ``.json.gz``, one file per rank.

Traces from PyTorch 1.8 (2020) to 2.x (2025), CUDA and ROCm, with or without the
``traceEvents`` wrapper, are read (FORMATS.md in the shared reference). :func:`read`
(``traceparse.kineto.read``) parses one file, :func:`read_dir` a directory of per-rank files;
``traceparse.load`` calls them.

Modules:
    reader   ``read``: events -> the unified timeline, ranks, devices, ingest.
    ranks    ``read_dir``: a directory of per-rank files (in helper processes), files that
             are no trace counted as not read.
    io       file bytes, gzip limit, header and raw event list, exact time conversion.
    decode   typed, field-selective msgspec decoding into ``Event`` records.
    times    exact ``ts``/``dur`` nanosecond columns from the raw JSON text.
    events   column-wise frames for the ``gpu``, ``api`` and ``ranges`` tables.
    link     correlation linking and derived columns (pure frame -> frame functions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceparse.lazy import lazy_exports

if TYPE_CHECKING:
    from traceparse.kineto.ranks import read_dir
    from traceparse.kineto.reader import read

__all__ = ["read", "read_dir"]

_read = lazy_exports(__name__, "reader", ["read"])
_read_dir = lazy_exports(__name__, "ranks", ["read_dir"])


def __getattr__(name: str) -> object:
    return _read_dir(name) if name == "read_dir" else _read(name)
