"""The rules of :func:`traceparse.analyses.attribution.classify_calls`, run on codes.

A million launched activities carry a few dozen distinct call names and a handful of
activity kinds and memory kinds: the regexes and string tests run on the distinct values of
each categorical column (its physical codes index a boolean table), never on a million
strings; the first launch of a name is one ``arg_min`` per group instead of a rank over
every row.

Example (``call_part`` of joined rows, median non-blocking call 10 us):
    cudaLaunchKernel 5 us, name ``k`` seen before            -> launch
    cudaStreamSynchronize 2 ms                                -> host_sync
    cudaMemcpyAsync of a memcpy from ``Pageable`` memory      -> host_sync
    first cudaLaunchKernel of name ``k2`` on its process, 3 ms -> warmup
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["call_parts"]


def _matches(values: pl.Series, test: pl.Expr) -> pl.Series:
    """``test`` (an expression on ``pl.col("v")``, a string) of each value of ``values``,
    evaluated once per distinct value for a categorical series; null where the value is null.

    Example: ``["a", "b", "a", null]`` with ``v == "a"`` -> ``[true, false, true, null]``
    (``test`` ran on ``"a"`` and ``"b"`` only)."""
    if values.dtype != pl.Categorical:
        return values.cast(pl.String).to_frame("v").select(test).to_series()
    distinct = values.unique().drop_nulls()
    hit = distinct.filter(distinct.cast(pl.String).to_frame("v").select(test).to_series())
    return values.is_in(hit.implode())


def call_parts(j: pl.DataFrame, blocking_re: str, min_ns: int) -> pl.Series:
    """``call_part`` of each row of ``j`` (columns ``rank``, ``process_id``, ``name``,
    ``kind``, ``call_name``, ``api_start_ns``, ``api_end_ns`` and optionally ``src_kind``,
    ``dst_kind``): ``host_sync`` where ``call_name`` matches ``blocking_re`` or a
    memcpy/memset moves pageable memory, else ``warmup`` for the first call (earliest
    ``api_start_ns``, ties in row order) of a ``name`` on its ``(rank, process_id)`` that
    lasted at least ``min_ns`` and ten times the process's median non-blocking call, else
    ``launch``. Same result as the row-wise rules of
    :func:`traceparse.analyses.attribution.classify_calls` (``tests/test_callparts.py``)."""
    if j.height == 0:
        return pl.Series("call_part", [], dtype=pl.String)
    pageable = pl.Series(np.zeros(j.height, dtype=bool))
    for c in ("src_kind", "dst_kind"):
        if c in j.columns:
            pageable = pageable | _matches(j[c], pl.col("v") == "Pageable").fill_null(False)
    copy = _matches(j["kind"], pl.col("v").is_in(["memcpy", "memset"])).fill_null(False)
    name_hit = _matches(j["call_name"], pl.col("v").str.contains(blocking_re))
    # null call name: the row rules gave null (neither blocking nor not) unless a pageable copy
    blocking = name_hit | (copy & pageable)
    keys = ["rank", "process_id"]
    f = pl.DataFrame({"_blk": blocking}).hstack(
        j.select(*keys, "name", (pl.col("api_end_ns") - pl.col("api_start_ns")).alias("_dur"),
                 "api_start_ns")).with_row_index("_r")
    first = (f.group_by(*keys, "name")
             .agg(pl.col("_r").get(pl.col("api_start_ns").arg_min()))
             .get_column("_r").drop_nulls())
    is_first = np.zeros(j.height, dtype=bool)
    is_first[first.to_numpy()] = True
    med = (f.select(pl.col("_dur").filter(~pl.col("_blk")).median().over(keys))
           .to_series())
    out = f.select(pl.Series("_first", is_first), "_blk", "_dur", med.alias("_med"))
    lazy = (pl.col("_first") & ~pl.col("_blk") & (pl.col("_dur") >= min_ns)
            & (pl.col("_dur") >= 10 * pl.col("_med").fill_null(0)))
    return out.select(pl.when(pl.col("_blk")).then(pl.lit("host_sync")).when(lazy)
                      .then(pl.lit("warmup")).otherwise(pl.lit("launch"))
                      .alias("call_part")).to_series()
