"""Accounting of every table of an nsys export that no reader maps to the timeline.

The readers account for the tables they read (parsed / skipped rows). Every other table of
the export gets one ``ingest`` row here, so ``info`` lists the whole file:

* outcome ``lookup``: read only to resolve ids of other tables (strings, process names,
  metric names, enum labels) - its rows are not events;
* outcome ``not read``: rows the unified timeline does not model, with why.

Reasons are by table name (FORMATS.md A.12-A.14); an unknown table says so.
"""

from __future__ import annotations

from typing import Any

from traceparse.nsys.db import NsysDB

#: Tables read to resolve other tables' ids.
LOOKUP = {
    "StringIds": "strings: names of kernels, API calls, NVTX ranges",
    "PROCESSES": "process names",
    "TARGET_INFO_GPU_METRICS": "GPU metric names and ids",
    "META_DATA_EXPORT": "export metadata (nsys version, schema)",
    "EXPORT_META_DATA": "export metadata (nsys version, schema)",
    "TARGET_INFO_CUDA_GPU": "device description (old schema)",
}

#: (prefix, reason) for tables not read; first match wins.
_NOT_READ: tuple[tuple[str, str], ...] = (
    ("ENUM_", "enum labels; traceparse decodes the codes it needs itself"),
    ("OSRT_", "OS runtime calls and their call chains: not in the unified timeline"),
    ("SAMPLING_", "CPU sampling call chains: not in the unified timeline"),
    ("COMPOSITE_EVENTS", "CPU sampling events: not in the unified timeline"),
    ("SCHED_EVENTS", "thread scheduling: not in the unified timeline"),
    ("DIAGNOSTIC_EVENT", "capture diagnostics (nsys warnings)"),
    ("CUDA_UM_", "unified-memory page faults: not modelled"),
    ("UNIFIED_MEMORY", "unified-memory migrations: not modelled"),
    ("CUPTI_ACTIVITY_KIND_OPENACC", "OpenACC activity: not modelled"),
    ("CUPTI_ACTIVITY_KIND_OPENMP", "OpenMP activity: not modelled"),
    ("GENERIC_EVENT", "generic event payloads (the GPU metrics are read from GPU_METRICS)"),
    ("CUDNN_EVENTS", "cuDNN API ranges: not in the unified timeline"),
    ("CUBLAS_EVENTS", "cuBLAS API ranges: not in the unified timeline"),
    ("MPI_", "MPI calls: not in the unified timeline"),
    ("UCP_", "UCX calls: not in the unified timeline"),
    ("NET_", "network counters: not in the unified timeline"),
    ("NVTX_", "NVTX naming tables"),
    ("OPENMP_", "OpenMP events: not modelled"),
    ("OPENACC_", "OpenACC events: not modelled"),
    ("GPU_MEMORY_USAGE_EVENTS", "older memory-usage table: not read"),
    ("CUDA_CALLCHAINS", "CUDA API call chains: not in the unified timeline"),
    ("TARGET_INFO_", "capture description (system, streams, contexts)"),
    ("ANALYSIS_", "capture session description"),
    ("META_DATA_", "capture metadata"),
    ("ThreadNames", "thread names: not used"),
    ("ProcessStreams", "process output streams: not used"),
)


def reason_for(table: str) -> str:
    """Why ``table`` is not read.

    Example:
        >>> reason_for("OSRT_API")
        'OS runtime calls and their call chains: not in the unified timeline'
    """
    for prefix, reason in _NOT_READ:
        if table.startswith(prefix):
            return reason
    return "not mapped to the unified timeline by this traceparse version"


def unread_rows(db: NsysDB, rank: int, accounted: set[str]) -> list[dict[str, Any]]:
    """One ``ingest`` row per table of ``db`` not in ``accounted`` (sorted by name)."""
    rows: list[dict[str, Any]] = []
    for table in sorted(db.tables - accounted):
        if table.startswith("sqlite_"):
            continue
        lookup = LOOKUP.get(table)
        rows.append({"rank": rank, "table": "none", "source": table,
                     "outcome": "lookup" if lookup else "not read",
                     "reason": lookup or reason_for(table), "count": db.count(table)})
    return rows
