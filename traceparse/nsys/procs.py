"""Ranks of an nsys export with several GPU processes (``torchrun``, ``mpirun`` captured in
one report).

Each process with GPU work is its own rank. nsys records no rank of its own. The evidence
read, first match wins:

1. **NVTX thread names** ``MPI Rank N`` (``NVTX_EVENTS`` eventType 39 ``NvtxThread``, written
   by nsys' MPI tracing on each rank's main thread, e.g. ``p2p-acc__mpiV100``): when every
   GPU process has exactly one such name and the numbers differ, process -> ``base + N``,
   ``rank_source = "NVTX thread name 'MPI Rank N'"``.
2. Otherwise **process order**: the GPU processes sorted by process id get ``base, base + 1,
   ...`` (``rank_source = "process order"``).

The per-process environment (``RANK``, ``OMPI_COMM_WORLD_RANK`` ...) is not exported:
``TARGET_INFO_SYSTEM_ENV`` holds the session's launch environment (one
``DeviceEnvironment`` string for the whole capture, without the ranks torchrun or mpirun
set per child), and NVTX domains in the corpus name no rank (``MPI``, ``cuBLAS``,
``TensorRT`` ...). ``base`` is the ``rank`` argument of :func:`traceparse.nsys.reader.read`.
``sources`` gets one row per rank with its ``rank_source``, and ``meta["processes"]`` gives
each process its ``rank`` (``info`` prints both). Host rows (API calls, ranges) follow their
process; rows of processes without GPU work keep ``base``. A file with at most one GPU
process is unchanged.

Example:
    ``torchrun --nproc_per_node=2``: python pid 148 runs on GPU 0 and pid 149 on GPU 1 ->
    rank 0 = pid 148, rank 1 = pid 149 (process order). ``mpirun -np 4`` with MPI tracing:
    the thread names ``MPI Rank 0..3`` of pids 60666, 60668, 60670, 60672 give their ranks.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import schema
from traceparse.timeline import Timeline

RANK_SOURCE = "process order"
NVTX_RANK_SOURCE = "NVTX thread name 'MPI Rank N'"
#: Thread names nsys' MPI tracing gives each rank's main thread.
MPI_RANK_RE = r"^MPI Rank (\d+)$"


def process_ranks(gpu: pl.DataFrame, base: int,
                  recorded: dict[int, int] | None = None) -> tuple[dict[int, int], str]:
    """``{pid: rank}`` for the processes with GPU work and where the ranks come from: the
    ``recorded`` ranks (``{pid: N}``, e.g. from :func:`recorded_ranks`) when every GPU
    process has a distinct one, else pid order from ``base``; empty when there are fewer
    than two GPU processes."""
    pids = sorted(int(p) for p in gpu["process_id"].drop_nulls().unique().to_list())
    if len(pids) < 2:
        return {}, RANK_SOURCE
    rec = recorded or {}
    if all(p in rec for p in pids) and len({rec[p] for p in pids}) == len(pids):
        return {pid: base + rec[pid] for pid in pids}, NVTX_RANK_SOURCE
    return {pid: base + i for i, pid in enumerate(pids)}, RANK_SOURCE


def recorded_ranks(thread_names: pl.DataFrame) -> dict[int, int]:
    """``{pid: N}`` from NVTX thread names (``process_id``, ``name``) matching
    :data:`MPI_RANK_RE`; a process naming two different ranks has none."""
    n = thread_names.select(
        "process_id", pl.col("name").cast(pl.String).str.extract(MPI_RANK_RE, 1)
        .cast(pl.Int64).alias("_r")).drop_nulls().unique()
    one = n.group_by("process_id").agg(pl.col("_r").first(), pl.len().alias("_n"))
    return {int(p): int(r) for p, r, k in one.iter_rows() if k == 1}


def split_ranks(tl: Timeline, base: int, recorded: dict[int, int] | None = None) -> Timeline:
    """Give each GPU process of ``tl`` (one nsys export read as rank ``base``) its own rank
    (see the module docstring); ``recorded`` as in :func:`process_ranks`. Returns ``tl``
    itself, changed in place."""
    ranks, source = process_ranks(tl.gpu, base, recorded)
    if not ranks:
        return tl
    pids, values = list(ranks), list(ranks.values())

    def remap(frame: pl.DataFrame) -> pl.DataFrame:
        if frame.height == 0:
            return frame
        mapped = pl.col("process_id").replace_strict(pids, values, default=None,
                                                    return_dtype=pl.Int32)
        return frame.with_columns(pl.coalesce(mapped, pl.col("rank")).cast(pl.Int32)
                                  .alias("rank"))

    tl.gpu, tl.api, tl.ranges = remap(tl.gpu), remap(tl.api), remap(tl.ranges)
    used = tl.gpu.select("rank", "device_id").unique()
    if tl.devices.height:
        per_rank = tl.devices.drop("rank").join(used, on="device_id", how="inner")
        unused = tl.devices.join(used.select("device_id"), on="device_id", how="anti")
        tl.devices = schema.conform("devices", pl.concat(
            [unused, per_rank.select(tl.devices.columns)], how="vertical_relaxed")
            .sort("rank", "device_id"))
    if tl.sources.height:
        src = tl.sources.row(0, named=True)
        rows = []
        for pid, rank in ranks.items():
            g = tl.gpu.filter(pl.col("process_id") == pid)
            rows.append({**src, "rank": rank, "rank_source": source,
                         "start_ns": g["start_ns"].min(), "end_ns": g["end_ns"].max()})
        tl.sources = schema.conform("sources", pl.DataFrame(rows, schema=tl.sources.schema))
    return tl


def annotate_processes(processes: list[dict[str, Any]], gpu: pl.DataFrame
                       ) -> list[dict[str, Any]]:
    """Add ``rank`` (or None for processes without GPU work) to each process dict."""
    by_pid: dict[int, int] = {}
    if gpu.height:
        for pid, rank in gpu.select("process_id", "rank").unique().drop_nulls().iter_rows():
            by_pid[int(pid)] = int(rank)
    return [{**p, "rank": by_pid.get(int(p["pid"]))} for p in processes]
