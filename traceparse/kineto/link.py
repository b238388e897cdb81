"""Linking and derived columns of a parsed Kineto trace (pure frame -> frame functions).

* :func:`link_gpu` sets ``gpu.process_id`` to the host pid of the launching runtime/driver
  call (equal ``correlation_id``), so ``gpu(rank, process_id, correlation_id)`` joins
  ``api(rank, process_id, correlation_id)`` exactly as for Nsight Systems files.
* :func:`attach_collectives` copies collective args of ``record_param_comms`` ops onto NCCL
  kernels that lack them.
* :func:`nesting_depth` computes ``ranges.depth`` per thread (or GPU stream).
* :func:`link_stats` reports how many GPU activities were linked to a launch call.
"""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl

COLL_COLS = ("coll_name", "coll_in_nelems", "coll_out_nelems", "coll_dtype",
             "coll_group_size", "coll_pg")


def _launches(api: pl.DataFrame) -> pl.DataFrame:
    """One launch call per correlation id (the first, if a trace repeats one)."""
    return (api.filter(pl.col("correlation_id").is_not_null())
            .sort("start_ns")
            .unique("correlation_id", keep="first", maintain_order=True)
            .select("correlation_id", launch_pid="process_id", launch_tid="thread_id",
                    launch_ns="start_ns"))


def link_gpu(gpu: pl.DataFrame, api: pl.DataFrame) -> pl.DataFrame:
    """Add ``process_id`` (host pid of the launch call) to GPU rows; null when unlinked.

    Example (before -> after):
        gpu ``correlation_id`` [5, 9] with api rows (pid 42, correlation 5) ->
        ``process_id`` [42, null].
    """
    launches = _launches(api).select("correlation_id", process_id="launch_pid")
    return gpu.drop("process_id", strict=False).join(launches, on="correlation_id",
                                                     how="left")


def attach_collectives(gpu: pl.DataFrame, api: pl.DataFrame,
                       comms: pl.DataFrame) -> pl.DataFrame:
    """Fill ``coll_*`` of kernels that lack them from the ``record_param_comms`` op.

    ``comms`` has ``process_id, thread_id, start_ns, end_ns, external_id`` and ``coll_*``
    per record_param_comms op carrying a ``Collective name``. A kernel takes the op with its
    External id; otherwise the op on the launching thread whose span encloses the launch
    call (HTA-style CPU-stack check, immune to External-id collisions).
    """
    if not comms.height or not gpu.height:
        return gpu
    need = (pl.col("kind") == "kernel") & pl.col("coll_name").is_null()
    by_ext = (comms.filter(pl.col("external_id").is_not_null())
              .unique("external_id", keep="first")
              .select("external_id", *[pl.col(c).alias(c + "_x") for c in COLL_COLS]))
    out = gpu.with_row_index("_row").join(by_ext, on="external_id", how="left")
    launches = _launches(api).filter(pl.col("launch_pid").is_not_null()
                                     & pl.col("launch_tid").is_not_null())
    ops = comms.filter(pl.col("process_id").is_not_null() & pl.col("thread_id").is_not_null())
    if launches.height and ops.height:
        enclosing = (
            launches.sort("launch_ns")
            .join_asof(ops.sort("start_ns").rename({"process_id": "launch_pid",
                                                    "thread_id": "launch_tid"}),
                       left_on="launch_ns", right_on="start_ns",
                       by=["launch_pid", "launch_tid"], strategy="backward",
                       check_sortedness=False)
            .filter(pl.col("end_ns") >= pl.col("launch_ns"))
            .select("correlation_id", *[pl.col(c).alias(c + "_t") for c in COLL_COLS])
        )
        out = out.join(enclosing, on="correlation_id", how="left")
    else:
        out = out.with_columns(pl.lit(None).alias(c + "_t") for c in COLL_COLS)
    has_x = pl.col("coll_name_x").is_not_null()
    has_t = pl.col("coll_name_t").is_not_null()
    fills = [
        pl.when(need & has_x).then(pl.col(c + "_x"))
        .when(need & has_t).then(pl.col(c + "_t"))
        .otherwise(pl.col(c)).cast(gpu.schema[c]).alias(c)
        for c in COLL_COLS
    ]
    return (out.with_columns(fills).sort("_row")
            .select(gpu.columns))


def nesting_depth(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add ``depth``: how many earlier ranges of the same lane are still open at the start.

    Lane = (kind side, process_id, thread_id) on the CPU, (device_id, stream_id) for GPU
    annotations. Ranges are visited by (start asc, end desc); a range that ends at or before
    another starts is closed (back-to-back ranges are siblings). Properly nested ranges get
    0 for the outermost, 1 for its children, and so on.

    Example:
        spans (0, 10), (2, 5), (5, 8), (10, 12) on one thread -> depth 0, 1, 1, 0.
    """
    if not ranges.height:
        return ranges.with_columns(depth=pl.lit(None, dtype=pl.Int32))
    lane = pl.struct(pl.col("kind") == "gpu_user_annotation", "process_id", "thread_id",
                     "device_id", "stream_id")
    order = (ranges.select(lane.rank("dense").alias("lane"), "start_ns", "end_ns")
             .with_row_index("_row").sort(["lane", "start_ns", "end_ns"],
                                          descending=[False, False, True]))
    # one stack per lane, each lane a slice of the sorted rows (no lane test per range)
    cuts = [0, *order["lane"].cast(pl.Int64).diff().fill_null(0).ne(0).arg_true().to_list(),
            order.height]
    starts = order["start_ns"].to_list()
    ends = order["end_ns"].to_list()
    depth: list[int] = []
    put = depth.append
    for a, b in itertools.pairwise(cuts):
        stack: list[int] = []
        push, pop = stack.append, stack.pop
        for s, e in zip(starts[a:b], ends[a:b], strict=True):
            while stack and stack[-1] <= s:
                pop()
            put(len(stack))
            push(e)
    by_row = pl.DataFrame({"_row": order["_row"], "depth": pl.Series(depth, dtype=pl.Int32)})
    return ranges.with_columns(by_row.sort("_row")["depth"])


def link_stats(gpu: pl.DataFrame, api: pl.DataFrame) -> dict[str, Any]:
    """Share of kernels/memcpy/memset linked to a launch call by correlation id.

    GPU work whose correlation id is below the smallest recorded launch correlation was
    launched before the profiler window opened (its launch call is not in the trace); it is
    counted separately as ``launched_before_window``, and ``link_share_in_window`` excludes
    it. Returns nulls when the GPU rows carry no correlation ids.
    """
    work = gpu.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    with_corr = work.filter(pl.col("correlation_id").is_not_null())
    n, m = work.height, with_corr.height
    if not m:
        return {"gpu_work": n, "with_correlation": 0, "linked": 0, "link_share": None,
                "launched_before_window": 0, "link_share_in_window": None}
    linked = with_corr.filter(pl.col("process_id").is_not_null()).height
    first = api["correlation_id"].min() if api.height else None
    before = (with_corr.filter(pl.col("process_id").is_null()
                               & (pl.col("correlation_id") < first)).height
              if first is not None else 0)
    in_window = m - before
    return {"gpu_work": n, "with_correlation": m, "linked": linked,
            "link_share": linked / m, "launched_before_window": before,
            "link_share_in_window": linked / in_window if in_window else None}
