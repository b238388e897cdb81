"""Nsight Systems CUDA memory-usage events (``--cuda-memory-usage=true``) -> ``memory`` table.

Source: ``CUDA_GPU_MEMORY_USAGE_EVENTS(start, globalPid, deviceId, contextId, address, pc,
bytes, memKind, memoryOperationType, name, correlationId, ...)`` (FORMATS.md A.14).

* ``memoryOperationType`` 0 is an allocation, 1 a deallocation (``ENUM_CUDA_DEV_MEM_EVENT_OPER``);
  ``bytes`` is the (positive) block size in both, so a free becomes ``-bytes``. Other
  operation codes become kind ``other`` with ``bytes`` 0.
* ``memKind`` (``ENUM_CUDA_MEM_KIND``: Pageable, Pinned, Device, Array, Managed, Device
  Static, Managed Static, Unknown) goes to ``memory_kind``.
* nsys records no running totals: ``allocated_bytes`` / ``reserved_bytes`` stay null and the
  analysis (:mod:`traceparse.analyses.memory`) replays the signed sizes. A block allocated
  before the capture started and freed inside it makes that replay dip below its start; the
  analysis reports the level relative to the capture start.
"""

from __future__ import annotations

import polars as pl

from traceparse import schema
from traceparse.nsys.db import NsysDB

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
SOURCE = "nsys " + TABLE
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}


def read_memory(db: NsysDB, rank: int) -> tuple[pl.DataFrame, int, dict[str, int]]:
    """Read memory-usage events; returns (frame, parsed rows, skipped rows by reason)."""
    if not db.has(TABLE):
        return schema.empty("memory"), 0, {}
    db.require(TABLE, ("start", "deviceId", "bytes", "memoryOperationType"))
    cols = set(db.columns(TABLE))
    parts = ["start AS ts_ns", "deviceId AS device_id", "bytes AS _size",
             "memoryOperationType AS _op"]
    for src, dst in (("address", "address"), ("memKind", "_mk")):
        if src in cols:
            parts.append(f"{src} AS {dst}")
    if "globalPid" in cols:
        parts.append("(globalPid >> 24) & 16777215 AS process_id")
    frame = db.table_frame(TABLE, ", ".join(parts))
    if frame.height == 0:
        return schema.empty("memory"), 0, {}
    skipped: dict[str, int] = {}
    bad = pl.col("ts_ns").is_null() | pl.col("_size").is_null() | (pl.col("_size") < 0)
    n_bad = frame.filter(bad).height
    if n_bad:
        skipped["null time or size, or negative size"] = n_bad
        frame = frame.filter(~bad)
    op = pl.col("_op")
    mk = pl.col("_mk") if "_mk" in frame.columns else pl.lit(None, dtype=pl.Int64)
    frame = frame.with_columns(
        kind=pl.when(op == 0).then(pl.lit("alloc")).when(op == 1).then(pl.lit("free"))
        .otherwise(pl.lit("other")),
        bytes=pl.when(op == 0).then(pl.col("_size")).when(op == 1).then(-pl.col("_size"))
        .otherwise(0),
        memory_kind=mk.replace_strict(_MEM_KIND, default="Unknown", return_dtype=pl.String),
        rank=pl.lit(rank, dtype=pl.Int32), source=pl.lit(SOURCE),
    ).drop([c for c in ("_size", "_op", "_mk") if c in frame.columns])
    frame = schema.conform("memory", frame).sort("ts_ns", maintain_order=True)
    return frame, frame.height, skipped
