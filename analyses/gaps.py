"""Idle gaps: stretches where a device ran nothing, and what the host was doing meanwhile.

A **gap** is a maximal stretch inside the window (as in
:func:`traceparse.analyses.attribution.breakdown`)
where no non-sync GPU activity ran on any stream of the device. Gaps shorter than ``min_ns``
are dropped; the rest are listed largest first with:

* ``launch_overhead_ns`` / ``idle_ns``: the gap split exactly as the attribution splits it
  (launch overhead = a launch call of this device's work was in flight); ``kind`` is
  ``launch_overhead`` when that part is at least half the gap, else ``idle``.
* ``cause``, decided in this order:

  1. ``host_sync`` - a blocking host call on a process that launched work on the device was
     in progress when the gap began (``call.start <= gap.start <= call.end``: the host was
     waiting for the GPU to drain, so nothing was queued behind the last activity). Blocking
     calls: :data:`SYNC_API_RE` (device/stream/event/context synchronise, synchronous
     ``cudaMemcpy*``/``cuMemcpy*``). A sync that only starts inside the gap explains
     nothing. The one overlapping the gap the most is named.
  2. ``cpu_work`` - a host range (NVTX, torch ``cpu_op``, ``user_annotation``, data loading,
     ...) of such a process overlaps the gap; the range overlapping it the most is named,
     the innermost (shortest) on ties, so ``forward`` beats the ``step 3`` around it.
  3. ``unknown``.

  ``cause_name`` and ``cause_thread_id`` name the explaining call or range and its thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceparse.analyses import intervals
from traceparse.analyses.attribution import DEFAULT_GROUP, busy_activities, launch_windows
from traceparse.timeline import Timeline

#: Host API calls that block the calling thread until the GPU catches up.
SYNC_API_RE = (r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|"
               r"cudaThreadSynchronize|cuCtxSynchronize|cuStreamSynchronize|"
               r"cuEventSynchronize|hipDeviceSynchronize|hipStreamSynchronize|"
               r"hipEventSynchronize)|^(cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|"
               r"cudaMemcpyToSymbol|cudaMemcpyFromSymbol|cudaMemcpyPeer|cuMemcpy|cuMemcpyDtoH|"
               r"cuMemcpyHtoD|cuMemcpyDtoD|hipMemcpy)(_v\d+)*$")
#: Range kinds that are not host work (GPU-side annotations, whole profiler steps).
NON_HOST_RANGE_KINDS = ("gpu_user_annotation", "profiler_step", "nvtx_mark")
DEFAULT_MIN_NS = 10_000

_GAP_COLS = ["start_ns", "end_ns", "dur_ns", "launch_overhead_ns", "idle_ns", "kind",
             "cause", "cause_name", "cause_thread_id"]


def idle_gaps(tl: Timeline, *, min_ns: int = DEFAULT_MIN_NS,
              window: tuple[int, int] | None = None,
              group: Sequence[str] = DEFAULT_GROUP) -> pl.DataFrame:
    """List each device's idle gaps of at least ``min_ns``, largest first, with their cause.

    Args:
        tl: the timeline.
        min_ns: shortest gap reported (default 10 us).
        window: ``(start_ns, end_ns)``; default each device's first to last activity.
        group: as in :func:`traceparse.analyses.attribution.breakdown`.

    Returns:
        The ``group`` columns, ``start_ns``, ``end_ns``, ``dur_ns``, ``launch_overhead_ns``,
        ``idle_ns``, ``kind``, ``cause``, ``cause_name``, ``cause_thread_id`` (see the module
        docstring), sorted by ``dur_ns`` descending, then group and start.
    """
    group = list(group)
    acts = busy_activities(tl)
    if window is None:
        wins = acts.group_by(group).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    else:
        wins = (acts.select(group).unique()
                .with_columns(pl.lit(int(window[0]), pl.Int64).alias("start_ns"),
                              pl.lit(int(window[1]), pl.Int64).alias("end_ns")))
    seg = intervals.segments({"_win": wins, "_busy": acts, "_launch": launch_windows(tl, acts)},
                             by=group)
    free = seg.filter((pl.col("_win") > 0) & (pl.col("_busy") == 0))
    gaps = (intervals.union(free, by=group)
            .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
            .filter(pl.col("dur_ns") >= min_ns))
    if gaps.height == 0:
        return _empty(acts, group)
    launched = (intervals.sort_within(
                    free.filter(pl.col("_launch") > 0).select(
                        *group, "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("_l")),
                    group, "start_ns")
                .join_asof(gaps.select(*group, pl.col("start_ns").alias("_gap"),
                                       pl.col("end_ns").alias("_gap_end")).sort(*group, "_gap"),
                           left_on="start_ns", right_on="_gap", by=group, strategy="backward",
                           check_sortedness=False)
                .filter(pl.col("start_ns") < pl.col("_gap_end"))
                .group_by(*group, "_gap").agg(pl.col("_l").sum().alias("launch_overhead_ns")))
    gaps = (gaps.join(launched, left_on=[*group, "start_ns"], right_on=[*group, "_gap"],
                      how="left", nulls_equal=True)
            .with_columns(pl.col("launch_overhead_ns").fill_null(0))
            .with_columns((pl.col("dur_ns") - pl.col("launch_overhead_ns")).alias("idle_ns"))
            .with_columns(pl.when(pl.col("launch_overhead_ns") * 2 >= pl.col("dur_ns"))
                          .then(pl.lit("launch_overhead")).otherwise(pl.lit("idle"))
                          .alias("kind"))
            .with_row_index("_gid"))
    procs = acts.select(*group, "process_id").unique()
    sync = _explain(gaps, _host_rows(tl.api.filter(
        pl.col("name").cast(pl.String).str.contains(SYNC_API_RE)), procs, group),
        group, touching=True)
    cpu = _explain(gaps, _host_rows(tl.ranges.filter(
        pl.col("end_ns").is_not_null() & pl.col("device_id").is_null()
        & ~pl.col("kind").cast(pl.String).is_in(list(NON_HOST_RANGE_KINDS))), procs, group),
        group, touching=False)
    out = (gaps.join(sync, on="_gid", how="left")
           .join(cpu, on="_gid", how="left", suffix="_cpu")
           .with_columns(
               pl.when(pl.col("_name").is_not_null()).then(pl.lit("host_sync"))
               .when(pl.col("_name_cpu").is_not_null()).then(pl.lit("cpu_work"))
               .otherwise(pl.lit("unknown")).alias("cause"),
               pl.coalesce("_name", "_name_cpu").alias("cause_name"),
               pl.when(pl.col("_name").is_not_null()).then(pl.col("_tid"))
               .otherwise(pl.col("_tid_cpu")).alias("cause_thread_id")))
    return (out.select(*group, *_GAP_COLS)
            .sort(["dur_ns", *group, "start_ns"], descending=[True] + [False] * (len(group) + 1),
                  nulls_last=True))


def _host_rows(frame: pl.DataFrame, procs: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Host rows of the processes that launched work on each group (same rank; a null
    process id on either side matches any process of the rank)."""
    keys = [c for c in group if c != "rank"]
    rows = frame.select("rank", pl.col("process_id").alias("_pid"),
                        pl.col("name").cast(pl.String).alias("_name"),
                        pl.col("thread_id").alias("_tid"), "start_ns", "end_ns")
    j = procs.join(rows, on="rank", how="inner") if "rank" in group else procs.join(
        rows.drop("rank"), how="cross")
    return (j.filter(pl.col("process_id").is_null() | pl.col("_pid").is_null()
                     | (pl.col("process_id") == pl.col("_pid")))
            .select(*(["rank"] if "rank" in group else []), *keys, "_name", "_tid",
                    "start_ns", "end_ns")
            .unique())


def _explain(gaps: pl.DataFrame, rows: pl.DataFrame, group: list[str], *, touching: bool
             ) -> pl.DataFrame:
    """Best explaining row per gap: largest overlap, then shortest, then earliest."""
    g = gaps.select("_gid", *(pl.col(c).alias(f"_g_{c}") for c in group),
                    pl.col("start_ns").alias("_gs"), pl.col("end_ns").alias("_ge"))
    if touching:  # in progress when the gap began
        preds = [pl.col("start_ns") <= pl.col("_gs"), pl.col("end_ns") >= pl.col("_gs")]
    else:
        preds = [pl.col("start_ns") < pl.col("_ge"), pl.col("end_ns") > pl.col("_gs")]
    if rows.height == 0:
        return pl.DataFrame(schema={"_gid": pl.UInt32, "_name": pl.String, "_tid": pl.Int64})
    j = rows.join_where(g, *preds)
    for c in group:
        j = j.filter((pl.col(c) == pl.col(f"_g_{c}")) | (pl.col(c).is_null()
                                                        & pl.col(f"_g_{c}").is_null()))
    overlap = (pl.min_horizontal("end_ns", "_ge") - pl.max_horizontal("start_ns", "_gs"))
    return (j.with_columns(overlap.alias("_ov"), (pl.col("end_ns") - pl.col("start_ns"))
                           .alias("_d"))
            .sort(["_gid", "_ov", "_d", "start_ns", "_name"],
                  descending=[False, True, False, False, False])
            .group_by("_gid", maintain_order=True)
            .agg(pl.col("_name").first(), pl.col("_tid").first()))


def _empty(acts: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    schema: dict[str, pl.DataType] = {c: acts.schema[c] for c in group}
    schema.update({"start_ns": pl.Int64(), "end_ns": pl.Int64(), "dur_ns": pl.Int64(),
                   "launch_overhead_ns": pl.Int64(), "idle_ns": pl.Int64(),
                   "kind": pl.String(), "cause": pl.String(), "cause_name": pl.String(),
                   "cause_thread_id": pl.Int64()})
    return pl.DataFrame(schema=schema)
