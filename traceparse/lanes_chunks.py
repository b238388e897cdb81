"""The report's ``timeline`` (:func:`traceparse.reports.lanes.timeline_lanes`) of one nsys
export, read in time windows instead of as a timeline.

Two passes over the windows of about ``chunk_rows`` GPU rows (:meth:`traceparse.nsys.
chunks.Plan.windows`), each window read by :func:`traceparse.nsys.chunks.read_rows` (the
reader's own code: kernels, copies, sets and CUDA-graph records, the ``gpu`` table's every
kind, with the reader's ranks and communication relabelling): the lane counts, then the
drawn lanes' segments (:mod:`traceparse.reports.lanes_parts`, where the merges and why they
are exact are described). The report folds the counts into its own pass 1
(:func:`traceparse.payload_chunks.pass1_task`) and passes them in: the counts merge exactly
over any windows that tile time, so they equal this pass 1's. The result is
``timeline_lanes(read(path).gpu, ...)``, equal as a dict (same ints, same floats, same
order).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import polars as pl

from traceparse.executor import CHUNK_ROWS, EXECUTORS, map_reduce
from traceparse.nsys import chunks
from traceparse.reports import lanes_parts
from traceparse.reports.lanes_parts import LanePlan, Segments

__all__ = ["timeline_lanes"]


def counts_task(plan: chunks.Plan, window: tuple[int, int]) -> Any:
    """Pass 1 of one window (runs on a worker)."""
    return lanes_parts.lane_counts(chunks.read_rows(plan, plan.blocks_for(*window), window),
                                   *window)


def segments_task(plan: chunks.Plan, window: tuple[int, int], lp: LanePlan) -> Segments:
    """Pass 2 of one window (runs on a worker)."""
    rows = chunks.read_rows(plan, plan.blocks_for(*window), window)
    return lanes_parts.window_segments(rows, *window, lp)


def timeline_lanes(path: str, *, budget: int = 4000, bins: int = 600, max_lanes: int = 32,
                   executor: str = "chunks", chunk_rows: int = CHUNK_ROWS, workers: int = 4,
                   scheduler: str | None = None, counts: pl.DataFrame | None = None
                   ) -> dict[str, Any]:
    """:func:`traceparse.reports.lanes.timeline_lanes` of the ``gpu`` table of the nsys
    export ``path``, computed in time windows of about ``chunk_rows`` GPU rows.

    Args:
        path: an nsys SQLite export.
        budget, bins, max_lanes: as for ``timeline_lanes``.
        executor: ``chunks`` (this process; pieces merged as they are read) or ``dask``
            (a local cluster of ``workers`` processes, or ``scheduler``; pairwise merges
            on the workers).
        chunk_rows: GPU rows per window (about).
        workers, scheduler: the Dask cluster.
        counts: pass 1's merged lane counts when the caller has read them already (the
            report folds them into its own pass 1:
            :func:`traceparse.payload_chunks.report_payload`); pass 1 is then skipped.

    Returns:
        The same dict as ``timeline_lanes(traceparse.nsys.reader.read(path).gpu, ...)``.

    Raises:
        ValueError: an unknown executor.
        TraceError: not a readable nsys export (:func:`traceparse.nsys.chunks.plan`).
        UsageError: ``dask`` without the ``distributed`` package.
    """
    if executor not in EXECUTORS or executor == "memory":
        raise ValueError(f"unknown executor {executor!r} for lanes in pieces; "
                         "known: chunks, dask")
    plan = chunks.plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return lanes_parts.finish(None, None, budget=budget, bins=bins)
    if counts is None:
        counts = map_reduce(executor, plan, counts_task, wins, (), lanes_parts.merge_counts,
                            workers, scheduler)
    lp = lanes_parts.lane_plan(counts, budget=budget, bins=bins, max_lanes=max_lanes)
    if lp is None:
        return lanes_parts.finish(None, None, budget=budget, bins=bins)
    merge = partial(lanes_parts.merge_segments, lp=lp)
    seg = map_reduce(executor, plan, segments_task, wins, (lp,), merge, workers, scheduler)
    return lanes_parts.finish(lp, seg, budget=budget, bins=bins)
