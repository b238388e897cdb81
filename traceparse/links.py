"""Links between timeline tables: GPU work to its launch call, a call to its enclosing range.

Two joins every attribution needs:

* :func:`launch_join` — each GPU activity (kernel, memcpy, memset) with the host API call
  that launched it. The key is ``(rank, process_id, correlation_id)``: CUPTI correlation ids
  are unique only within one process, and one ``cudaGraphLaunch`` call maps to many
  kernels, so the join is a many-to-one left join (GPU rows are never duplicated or lost).
* :func:`enclosing_ranges` — each API call with the innermost range (NVTX push/pop, torch
  ``cpu_op``, ``user_annotation``, ``profiler_step``) that was open on the same
  ``(rank, process_id, thread_id)`` when the call started. Together they say which op,
  module and step owns a kernel.

Both are vectorised (sorts, cumulative sums and ``join_asof``), never per-row Python.

How the innermost range is found (:func:`innermost_range`): on one thread properly nested
ranges behave as a stack. Sort all range starts (+1) and ends (-1) by time; the running sum
is the stack height. A range that starts at height ``d`` occupies stack slot ``d`` until it
ends, and slot ``d`` is only reused after it closes. So for a query instant ``t`` where the
height is ``d``, the innermost open range is the **last range that started at level ``d``
before ``t``**: one ``join_asof`` by ``(group, level)``. Ranges that are not properly nested
(process-wide NVTX start/end ranges that cross, torch ops with rounded timestamps) can
break the stack; every answer is therefore checked (``range start <= t < range end``) and
set to null when the check fails, so an answer is never wrong, at worst missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceparse.timeline import Timeline

#: Range kinds that describe host-side code regions (the default for :func:`enclosing_ranges`).
HOST_RANGE_KINDS = ("nvtx_push_pop", "nvtx_start_end", "cpu_op", "user_annotation",
                    "profiler_step")

_KEY = ["rank", "process_id", "correlation_id"]
_API_COLS = {"name": "api_name", "kind": "api_kind", "start_ns": "api_start_ns",
             "end_ns": "api_end_ns", "thread_id": "api_thread_id"}


def launch_join(tl: Timeline, *, kinds: Sequence[str] | None = None,
                unique_calls: bool = True) -> pl.DataFrame:
    """GPU rows joined (left, many-to-one) to their launching API call.

    Args:
        tl: the timeline.
        kinds: GPU kinds to keep (e.g. ``("kernel",)``); None keeps every GPU row.
        unique_calls: keep one API call per key (the earliest). False joins every call
            with the key, as ``nsys stats`` does: some exports record a launch twice (a
            runtime row and an eventClass-67 row with the same correlation id), and the
            nsys report then counts the kernel twice.

    Returns:
        The ``gpu`` rows (same count, same order) plus ``api_name``, ``api_kind``,
        ``api_start_ns``, ``api_end_ns``, ``api_thread_id`` (null where no call matched).

    Example:
        gpu ``(rank 0, pid 7, corr 5, kernel k, start 100)`` and api
        ``(rank 0, pid 7, corr 5, cudaLaunchKernel, 40..60, tid 9)`` give one row
        ``k, start 100, api_name cudaLaunchKernel, api_start_ns 40, api_end_ns 60,
        api_thread_id 9``. A kernel of pid 8 with corr 5 stays unmatched (null api columns).
    """
    gpu = tl.gpu
    if kinds is not None:
        gpu = gpu.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    api = tl.api.filter(pl.col("correlation_id").is_not_null()).sort("start_ns")
    if unique_calls:
        # a correlation id names one call per process; keep the first if a source repeats it
        api = api.unique(subset=_KEY, keep="first", maintain_order=True)
    api = api.select(_KEY + list(_API_COLS)).rename(_API_COLS)
    return gpu.join(api, on=_KEY, how="left", nulls_equal=False, maintain_order="left")


def _range_events(ranges: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Start rows of ``ranges`` with their stack level (1 = outermost open range)."""
    r = ranges.with_row_index("_rid")
    starts = r.select(*group, pl.col("start_ns").alias("_t"), pl.lit(1, pl.Int64).alias("_d"),
                      pl.col("end_ns").alias("_e"), "_rid")
    ends = r.select(*group, pl.col("end_ns").alias("_t"), pl.lit(-1, pl.Int64).alias("_d"),
                    pl.col("end_ns").alias("_e"), "_rid")
    # at equal times: ends before starts (half-open ranges), and among starts the longer
    # range (later end) first so that it is the parent
    ev = (pl.concat([starts, ends])
          .sort([*group, "_t", "_d", "_e"], descending=[False] * len(group) + [False, False, True])
          .with_columns(_level=pl.col("_d").cum_sum().over(group)))
    return ev.filter(pl.col("_d") == 1).select([*group, "_t", "_level", "_rid"])


def innermost_range(points: pl.DataFrame, ranges: pl.DataFrame, *, time_col: str,
                    group: Sequence[str], prefix: str = "range_") -> pl.DataFrame:
    """For each row of ``points``, the innermost range of ``ranges`` open at ``time_col``.

    ``points`` and ``ranges`` must both carry the ``group`` columns (e.g. ``rank``,
    ``process_id``, ``thread_id``); a range contains instant ``t`` when
    ``start_ns <= t < end_ns``. Ranges without ``end_ns`` are ignored.

    Args:
        points: any frame; its rows are returned unchanged and in order.
        ranges: rows of the ``ranges`` table (at least group columns, ``name``, ``kind``,
            ``start_ns``, ``end_ns``; ``domain`` and ``range_id`` are kept when present).
        time_col: column of ``points`` holding the query instant (ns).
        group: columns that must be equal between a point and its range.
        prefix: prefix for the added columns.

    Returns:
        ``points`` plus ``{prefix}name``, ``{prefix}kind``, ``{prefix}domain``,
        ``{prefix}start_ns``, ``{prefix}end_ns``, ``{prefix}level`` (1 = outermost).

    Example:
        Ranges on one thread: A [0, 100), B [10, 50) inside A, C [60, 90) inside A.
        Query t=20 -> B (level 2); t=55 -> A (level 1: B closed, C not yet open);
        t=60 -> C; t=100 -> none.
    """
    g = list(group)
    keep: list[str] = [c for c in ("name", "kind", "domain", "start_ns", "end_ns")
                       if c in ranges.columns]
    r = ranges.filter((pl.col("end_ns") > pl.col("start_ns")) & pl.all_horizontal(
        [pl.col(c).is_not_null() for c in g])).select(g + keep)
    if "domain" not in keep:
        r = r.with_columns(domain=pl.lit(None, pl.String))
    info = r.with_row_index("_rid").select(
        ["_rid"] + [pl.col(c).alias(prefix + c) for c in ("name", "kind", "domain",
                                                            "start_ns", "end_ns")])
    out_cols = [prefix + c for c in ("name", "kind", "domain", "start_ns", "end_ns", "level")]
    p = points.with_row_index("_pid")
    if r.height == 0 or p.height == 0:
        return points.with_columns(
            [pl.lit(None, dtype=info.schema[c] if c in info.columns else pl.Int64).alias(c)
             for c in out_cols])
    starts = _range_events(r, g)  # g, _t, _level, _rid
    # stack height at each query instant: (#starts <= t) - (#ends <= t) per group
    q = p.select(["_pid", *g, pl.col(time_col).alias("_t")]).filter(
        pl.col("_t").is_not_null() & pl.all_horizontal([pl.col(c).is_not_null() for c in g]))
    cnt_s = r.select([*g, pl.col("start_ns").alias("_t")]).sort([*g, "_t"]).with_columns(
        _ns=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(g))
    cnt_e = r.select([*g, pl.col("end_ns").alias("_t")]).sort([*g, "_t"]).with_columns(
        _ne=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(g))
    q = q.sort("_t")
    q = q.join_asof(cnt_s.sort("_t"), on="_t", by=g, strategy="backward", check_sortedness=False)
    q = q.join_asof(cnt_e.sort("_t"), on="_t", by=g, strategy="backward", check_sortedness=False)
    q = q.with_columns(_level=(pl.col("_ns").fill_null(0) - pl.col("_ne").fill_null(0)))
    q = q.filter(pl.col("_level") > 0).select(["_pid", *g, "_t", "_level"])
    hit = q.sort("_t").join_asof(
        starts.sort("_t"), on="_t", by=[*g, "_level"], strategy="backward",
        check_sortedness=False
    ).join(info, on="_rid", how="left")
    hit = hit.filter((pl.col(prefix + "start_ns") <= pl.col("_t"))
                     & (pl.col("_t") < pl.col(prefix + "end_ns")))
    hit = hit.select(["_pid", *[pl.col(c) for c in out_cols[:-1]],
                      pl.col("_level").alias(prefix + "level")])
    return p.join(hit, on="_pid", how="left", maintain_order="left").drop("_pid")


def enclosing_ranges(tl: Timeline, *, kinds: Sequence[str] = HOST_RANGE_KINDS,
                     prefix: str = "range_") -> pl.DataFrame:
    """Each API call with the innermost range of ``kinds`` open on its thread at call entry.

    The match is on ``(rank, process_id, thread_id)`` and the call's ``start_ns``. NVTX
    start/end ranges are matched on the thread that opened them (nsys projects them
    process-wide; here they only own calls of their opening thread).

    Args:
        tl: the timeline.
        kinds: range kinds to consider, e.g. ``("nvtx_push_pop",)`` or
            ``("cpu_op", "user_annotation")``; mixed kinds share one stack.
        prefix: prefix of the added columns.

    Returns:
        ``tl.api`` plus ``range_name``, ``range_kind``, ``range_domain``,
        ``range_start_ns``, ``range_end_ns``, ``range_level`` (null where no range was open).
    """
    ranges = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    return innermost_range(tl.api, ranges, time_col="start_ns",
                           group=("rank", "process_id", "thread_id"), prefix=prefix)


def kernel_ranges(tl: Timeline, *, kinds: Sequence[str] = HOST_RANGE_KINDS,
                  gpu_kinds: Sequence[str] | None = ("kernel",),
                  prefix: str = "range_") -> pl.DataFrame:
    """GPU rows with their launch call and the innermost range enclosing that call.

    :func:`launch_join` followed by :func:`innermost_range` at ``api_start_ns`` on
    ``(rank, process_id, api_thread_id)``. GPU rows without a launch call get null ranges.
    """
    rows = launch_join(tl, kinds=gpu_kinds)
    ranges = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    ranges = ranges.rename({"thread_id": "api_thread_id"})
    return innermost_range(rows, ranges, time_col="api_start_ns",
                           group=("rank", "process_id", "api_thread_id"), prefix=prefix)
