"""Nsight Systems: SQLite exports (``nsys export --type sqlite``) and ``.nsys-rep`` reports.

Exports from nsys 2019.6 to 2026.x are read (schema differences by version: FORMATS.md in the
shared reference). :func:`read` (``traceparse.nsys.read``) turns one export into a
:class:`~traceparse.timeline.Timeline`; ``traceparse.load`` calls it for ``.sqlite`` inputs.

Modules:
    reader   ``read``: the tables of an export -> the unified timeline, ranks, devices.
    db       read-only SQLite access (ADBC/sqlite3), column probing, bulk reads.
    gpu      kernels, memcpy and memset -> the ``gpu`` table.
    host     OS-runtime calls, CPU samples, profiler overhead, thread names.
    ranges   NVTX events -> the ``ranges`` table.
    graphs   CUDA graph tables (graph ids, node ids, graph launches).
    memory   CUDA memory-usage events -> the ``memory`` table.
    metrics  GPU metrics (``--gpu-metrics-devices``) -> the ``metrics`` table.
    procs    several GPU processes in one export -> ranks.
    tables   accounting of every table no reader maps (``ingest`` rows).
    rep      ``.nsys-rep``/``.qdrep`` input, exported with the user's own ``nsys``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceparse.lazy import lazy_exports

if TYPE_CHECKING:
    from traceparse.nsys.reader import not_read_tables, read

__all__ = ["not_read_tables", "read"]

__getattr__ = lazy_exports(__name__, "reader", __all__)
