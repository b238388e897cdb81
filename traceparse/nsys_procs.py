"""Ranks of an nsys export with several GPU processes (``torchrun``, ``mpirun`` captured in
one report).

Each process with GPU work is its own rank. nsys records no rank of its own; when the export
carries none of the rank evidence we know of (the processes' environments are not exported
by ``nsys export``, and NVTX domains name no rank in the shared corpus), ranks follow
**process order**: the GPU processes sorted by process id get ``base, base + 1, ...``
(``base`` is the ``rank`` argument of :func:`traceparse.nsys.read`). ``sources`` gets one row
per rank with ``rank_source = "process order"``, and ``meta["processes"]`` gives each
process its ``rank`` (``info`` prints both). Host rows (API calls, ranges) follow their
process; rows of processes without GPU work keep ``base``. A file with at most one GPU
process is unchanged.

Example:
    ``torchrun --nproc_per_node=2``: python pid 148 runs on GPU 0 and pid 149 on GPU 1 ->
    rank 0 = pid 148, rank 1 = pid 149.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import schema
from traceparse.timeline import Timeline

RANK_SOURCE = "process order"


def process_ranks(gpu: pl.DataFrame, base: int) -> dict[int, int]:
    """``{pid: rank}`` for the processes with GPU work, in pid order from ``base``; empty
    when there are fewer than two."""
    pids = sorted(int(p) for p in gpu["process_id"].drop_nulls().unique().to_list())
    if len(pids) < 2:
        return {}
    return {pid: base + i for i, pid in enumerate(pids)}


def split_ranks(tl: Timeline, base: int) -> Timeline:
    """Give each GPU process of ``tl`` (one nsys export read as rank ``base``) its own rank
    (see the module docstring). Returns ``tl`` itself, changed in place."""
    ranks = process_ranks(tl.gpu, base)
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
            rows.append({**src, "rank": rank, "rank_source": RANK_SOURCE,
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
