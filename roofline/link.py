"""Link GPU kernels to the torch op that launched them.

Kineto traces say which op launched a kernel in two ways, and the older traces only in one:

1. **Launch-time containment** (all versions): the kernel's runtime launch (``api`` row with
   the same ``(rank, correlation_id)``) happened on a CPU thread inside the op's
   ``[start_ns, end_ns]``; the innermost (latest-starting) estimated op containing the launch
   owns the kernel. This works for 2022-23 traces, where a kernel's ``External id`` equals
   its correlation id rather than the op's id.
2. **External id** (fallback, when no launch is recorded for a kernel): the kernel's
   ``external_id`` equals the op's.
"""

from __future__ import annotations

import bisect
from typing import Any

import polars as pl


def link_kernels(ops: pl.DataFrame, gpu: pl.DataFrame,
                 api: pl.DataFrame | None = None) -> pl.DataFrame:
    """Kernels with the ``op_row`` of their op (inner join: unlinked kernels are dropped).

    Args:
        ops: estimated ops with ``op_row, rank, external_id, thread_id, start_ns, end_ns``.
        gpu: the timeline's ``gpu`` table (kernels used).
        api: the timeline's ``api`` table (runtime launches), or None.

    Example (the launch at t=15 on thread 1 lies inside op 0 [10, 20]):
        >>> ops = pl.DataFrame({"op_row": [0], "rank": [0], "external_id": [7],
        ...     "thread_id": [1], "start_ns": [10], "end_ns": [20]})
        >>> gpu = pl.DataFrame({"rank": [0], "kind": ["kernel"], "correlation_id": [99],
        ...     "external_id": [99], "dur_ns": [5]})
        >>> api = pl.DataFrame({"rank": [0], "correlation_id": [99], "thread_id": [1],
        ...     "start_ns": [15]})
        >>> link_kernels(ops, gpu, api)["op_row"].to_list()
        [0]
    """
    k = gpu.filter(pl.col("kind") == "kernel")
    for c in ("correlation_id", "external_id"):
        if c not in k.columns:
            k = k.with_columns(pl.lit(None, pl.Int64).alias(c))
    k = k.with_row_index("_k")
    empty = k.head(0).with_columns(pl.lit(None, pl.UInt32).alias("op_row"))
    if not ops.height or not k.height:
        return empty
    linked: dict[int, int] = {}
    if api is not None and api.height and "correlation_id" in api.columns:
        launch = (api.filter(pl.col("correlation_id").is_not_null())
                  .unique(["rank", "correlation_id"], keep="first")
                  .select("rank", "correlation_id", pl.col("thread_id").alias("_tid"),
                          pl.col("start_ns").alias("_ts")))
        kl = k.join(launch, on=["rank", "correlation_id"], how="inner")
        index: dict[tuple[Any, Any], tuple[list[int], list[tuple[int, int, int]]]] = {}
        for (rank, tid), g in ops.filter(pl.col("start_ns").is_not_null()).group_by(
                "rank", "thread_id"):
            g = g.sort("start_ns")
            spans = list(zip(g["start_ns"].to_list(), g["end_ns"].to_list(),
                             g["op_row"].to_list(), strict=True))
            index[(rank, tid)] = ([s for s, _, _ in spans], spans)
        for kid, rank, tid, ts in kl.select("_k", "rank", "_tid", "_ts").iter_rows():
            hit = index.get((rank, tid))
            if hit is None or ts is None:
                continue
            starts, spans = hit
            i = bisect.bisect_right(starts, ts) - 1
            for j in range(i, max(-1, i - 64), -1):  # innermost = latest start containing ts
                s, e, row = spans[j]
                if e is not None and s <= ts <= e:
                    linked[kid] = row
                    break
        launched = set(kl["_k"].to_list())
    else:
        launched = set()
    rest = k.filter(~pl.col("_k").is_in(list(launched)) & pl.col("external_id").is_not_null())
    if rest.height:
        by_ext = (ops.filter(pl.col("external_id").is_not_null())
                  .sort("start_ns", descending=True, nulls_last=True)
                  .unique(["rank", "external_id"], keep="first")
                  .select("rank", "external_id", "op_row"))
        for kid, row in rest.join(by_ext, on=["rank", "external_id"], how="inner").select(
                "_k", "op_row").iter_rows():
            linked[kid] = row
    if not linked:
        return empty
    m = pl.DataFrame({"_k": list(linked), "op_row": list(linked.values())},
                     schema={"_k": pl.UInt32, "op_row": pl.UInt32})
    return k.join(m, on="_k", how="inner")
