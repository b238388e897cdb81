"""Time attribution: where did each device's wall time go?

:func:`breakdown` splits a time window of every (rank, device) into five parts that sum to the
window **to the nanosecond**:

``compute_ns``
    Some compute kernel (category ``compute``) was running on any stream.
``communication_ns``
    *Exposed* communication: a communication activity (NCCL/RCCL kernel or peer copy) ran and
    no compute kernel did. Communication hidden under compute is reported separately as
    ``overlapped_comm_ns`` (it is already inside ``compute_ns``), and
    ``comm_overlap_pct = overlapped / (overlapped + exposed) * 100`` (null without comm).
``memory_ns``
    A memcpy/memset ran and neither compute nor communication did.
``launch_overhead_ns``
    Nothing ran on the device while the host was inside the launch call of some activity of
    this device that had not started yet: the GPU waited for the CPU to issue work. An
    activity's *launch window* is ``[api.start_ns, min(api.end_ns, activity.start_ns))``, the
    API call found by joining ``gpu`` to ``api`` on ``(rank, process_id, correlation_id)``;
    activities without a matching call have no launch window. Queueing latency after the call
    returned, with no other launch in flight, is idle, not launch overhead.
``idle_ns``
    The rest: nothing ran and no launch was in flight (host synchronisation, CPU work, data
    loading, ...; :func:`traceparse.analyses.gaps.idle_gaps` explains the stretches).

Priority where streams overlap (each nanosecond goes to the first that applies):
**compute > communication > memory > launch overhead > idle**. Activities of kind ``sync``
(host waits recorded on a GPU lane) are never busy time and never define a window.

The window is, by default, the first start to the last end of the non-sync activities of the
group; pass ``window=(start_ns, end_ns)`` for a fixed window (the same for every group), or use
:func:`breakdown_windows` with :func:`range_windows` to get one row per step or NVTX range.

Example (one device, a 100 ns kernel, a 50 ns gap whose second half the next launch call was
in flight, then a 30 ns copy)::

    gpu:  kernel [0, 100)   memcpy [150, 180)      api of the memcpy: [125, 140)
    ->    window 180 = compute 100 + memory 30 + launch_overhead 15 + idle 35
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceparse.analyses import intervals
from traceparse.timeline import Timeline

#: Attribution parts in priority order (first wins where they overlap).
PARTS = ("compute_ns", "communication_ns", "memory_ns", "launch_overhead_ns", "idle_ns")
DEFAULT_GROUP = ("rank", "device_id")
_BUSY = {"compute": "compute", "communication": "communication", "memory": "memory"}


class AttributionError(AssertionError):
    """An attribution row whose parts do not sum to its window (a bug, not bad input)."""


def busy_activities(tl: Timeline) -> pl.DataFrame:
    """GPU activities that count as busy time: every row whose category is not ``sync``,
    with ``category`` as a plain string."""
    return (tl.gpu.filter(pl.col("category").cast(pl.String) != "sync")
            .with_columns(pl.col("category").cast(pl.String)))


def launch_windows(tl: Timeline, acts: pl.DataFrame | None = None) -> pl.DataFrame:
    """Launch windows of GPU activities: ``[api.start_ns, min(api.end_ns, start_ns))``.

    Joins ``acts`` (default: :func:`busy_activities`) to ``tl.api`` on
    ``(rank, process_id, correlation_id)``; API rows duplicated on that key keep the first.
    Returns the activity columns with ``start_ns``/``end_ns`` replaced by the launch window;
    empty windows (the activity started before the call) are dropped.

    Example:
        kernel [200, 300) launched by cudaLaunchKernel [100, 150) -> window [100, 150);
        a synchronous cudaMemcpy [100, 400) whose copy ran [250, 390) -> window [100, 250).
    """
    if acts is None:
        acts = busy_activities(tl)
    key = ["rank", "process_id", "correlation_id"]
    api = (tl.api.filter(pl.col("correlation_id").is_not_null())
           .select(*key, pl.col("start_ns").alias("_api_start"),
                   pl.col("end_ns").alias("_api_end"))
           .unique(subset=key, keep="first", maintain_order=True))
    joined = acts.filter(pl.col("correlation_id").is_not_null()).join(api, on=key, how="inner")
    return (joined.with_columns(pl.min_horizontal("_api_end", "start_ns").alias("end_ns"),
                                pl.col("_api_start").alias("start_ns"))
            .filter(pl.col("end_ns") > pl.col("start_ns"))
            .drop("_api_start", "_api_end"))


def range_windows(tl: Timeline, pattern: str, *, kinds: Sequence[str] | None = None
                  ) -> pl.DataFrame:
    """Windows from host ranges whose name matches the regex ``pattern`` (e.g. steps).

    Returns ``rank``, ``window_name``, ``window_start_ns``, ``window_end_ns`` (ranges with no
    end are dropped), ready for :func:`breakdown_windows`.

    Example:
        ``range_windows(tl, r"^(step \\d+|ProfilerStep#\\d+)$")`` -> one window per step.
    """
    r = tl.ranges.filter(pl.col("end_ns").is_not_null()
                         & pl.col("name").cast(pl.String).str.contains(pattern))
    if kinds is not None:
        r = r.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    return (r.select("rank", pl.col("name").cast(pl.String).alias("window_name"),
                     pl.col("start_ns").alias("window_start_ns"),
                     pl.col("end_ns").alias("window_end_ns"))
            .sort("rank", "window_start_ns"))


def breakdown(tl: Timeline, *, window: tuple[int, int] | None = None,
              group: Sequence[str] = DEFAULT_GROUP) -> pl.DataFrame:
    """Attribute each group's window to compute, communication, memory, launch overhead and
    idle (see the module docstring for the definitions and priority).

    Args:
        tl: the timeline.
        window: ``(start_ns, end_ns)`` applied to every group; default: each group's first
            to last non-sync GPU activity.
        group: ``gpu`` columns defining one row; default one row per (rank, device).
            ``("rank", "device_id", "stream_id")`` gives a per-stream breakdown.

    Returns:
        One row per group: the group columns, ``window_start_ns``, ``window_end_ns``,
        ``window_ns``, the five parts (:data:`PARTS`), ``overlapped_comm_ns`` and
        ``comm_overlap_pct``. Empty (with those columns) when there is no GPU activity.
    """
    if window is None:
        acts = busy_activities(tl)
        wins = (acts.group_by(list(group))
                .agg(pl.col("start_ns").min().alias("window_start_ns"),
                     pl.col("end_ns").max().alias("window_end_ns")))
    else:
        start, end = int(window[0]), int(window[1])
        if end < start:
            raise ValueError(f"window end {end} < start {start}")
        wins = pl.DataFrame({"window_start_ns": [start], "window_end_ns": [end]},
                            schema={"window_start_ns": pl.Int64, "window_end_ns": pl.Int64})
    return breakdown_windows(tl, wins, group=group)


def breakdown_by_stream(tl: Timeline, *, window: tuple[int, int] | None = None
                        ) -> pl.DataFrame:
    """:func:`breakdown` with one row per (rank, device, stream): what each stream did
    during its own first-to-last activity (or ``window``)."""
    return breakdown(tl, window=window, group=("rank", "device_id", "stream_id"))


def _group_keys(acts: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    return acts.select(group).unique(maintain_order=True)


def breakdown_windows(tl: Timeline, windows: pl.DataFrame, *,
                      group: Sequence[str] = DEFAULT_GROUP) -> pl.DataFrame:
    """:func:`breakdown` over many windows at once (e.g. one per step).

    Args:
        tl: the timeline.
        windows: ``window_start_ns``, ``window_end_ns``, optionally ``window_name`` and any of
            the ``group`` columns. Group columns present restrict a window to matching groups
            (e.g. a ``rank`` column from :func:`range_windows` keeps a step's window on its
            own rank); absent ones broadcast it to every group with GPU activity.
        group: as in :func:`breakdown`.

    Returns:
        As :func:`breakdown`, plus ``window_name`` when ``windows`` has it; sorted by group
        then window start.
    """
    group = list(group)
    acts = busy_activities(tl)
    named = "window_name" in windows.columns
    keys = [c for c in group if c in windows.columns]
    groups = _group_keys(acts, group)
    w = windows.select(*keys, *(["window_name"] if named else []),
                       pl.col("window_start_ns").cast(pl.Int64),
                       pl.col("window_end_ns").cast(pl.Int64))
    if keys:
        w = groups.join(w.with_columns(pl.col(k).cast(groups.schema[k]) for k in keys),
                        on=keys, how="inner", nulls_equal=True)
    else:
        w = groups.join(w, how="cross")
    w = w.select(*group, *(["window_name"] if named else []), "window_start_ns",
                 "window_end_ns").with_row_index("_wid")
    launch = launch_windows(tl, acts)
    sets: dict[str, pl.DataFrame] = {
        "_win": w.select("_wid", pl.col("window_start_ns").alias("start_ns"),
                         pl.col("window_end_ns").alias("end_ns")),
    }
    for label, frame in (("compute", acts.filter(pl.col("category") == "compute")),
                         ("communication", acts.filter(pl.col("category") == "communication")),
                         ("memory", acts.filter(pl.col("category") == "memory")),
                         ("launch", launch)):
        sets[label] = _clip_to_windows(frame, w, group)
    seg = intervals.segments(sets, by=["_wid"]).filter(pl.col("_win") > 0)
    length = pl.col("end_ns") - pl.col("start_ns")
    comp, comm = pl.col("compute") > 0, pl.col("communication") > 0
    mem, lau = pl.col("memory") > 0, pl.col("launch") > 0
    part = (pl.when(comp).then(pl.lit("compute_ns"))
            .when(comm).then(pl.lit("communication_ns"))
            .when(mem).then(pl.lit("memory_ns"))
            .when(lau).then(pl.lit("launch_overhead_ns"))
            .otherwise(pl.lit("idle_ns")))
    sums = (seg.with_columns(part.alias("_part"), length.alias("_len"))
            .group_by("_wid")
            .agg(*(pl.col("_len").filter(pl.col("_part") == p).sum().alias(p) for p in PARTS),
                 pl.col("_len").filter(comp & comm).sum().alias("overlapped_comm_ns")))
    out = w.join(sums, on="_wid", how="left").with_columns(
        *(pl.col(c).fill_null(0).cast(pl.Int64) for c in (*PARTS, "overlapped_comm_ns")),
        (pl.col("window_end_ns") - pl.col("window_start_ns")).alias("window_ns"))
    denom = pl.col("overlapped_comm_ns") + pl.col("communication_ns")
    out = out.with_columns(
        pl.when(denom > 0).then(pl.col("overlapped_comm_ns") * 100.0 / denom)
        .otherwise(None).cast(pl.Float64).alias("comm_overlap_pct"))
    cols = [*group, *(["window_name"] if named else []), "window_start_ns", "window_end_ns",
            "window_ns", "compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns",
            "idle_ns", "overlapped_comm_ns", "comm_overlap_pct"]
    return out.select(cols).sort([*group, "window_start_ns"], nulls_last=True)


def _clip_to_windows(frame: pl.DataFrame, wins: pl.DataFrame, group: list[str]
                     ) -> pl.DataFrame:
    """Intervals of ``frame`` clipped to each window of their group, keyed by ``_wid``."""
    w = wins.select("_wid", *group, "window_start_ns", "window_end_ns")
    j = frame.select(*group, "start_ns", "end_ns").join(w, on=group, how="inner",
                                                        nulls_equal=True)
    return (j.select("_wid",
                     pl.max_horizontal("start_ns", "window_start_ns").alias("start_ns"),
                     pl.min_horizontal("end_ns", "window_end_ns").alias("end_ns"))
            .filter(pl.col("end_ns") > pl.col("start_ns")))


def check_attribution(frame: pl.DataFrame) -> pl.DataFrame:
    """Raise :class:`AttributionError` unless every row's parts are non-negative and sum to
    ``window_ns == window_end_ns - window_start_ns``, and ``overlapped_comm_ns`` is at most
    ``compute_ns``. Returns ``frame`` so it can be chained."""
    if frame.height == 0:
        return frame
    parts = pl.sum_horizontal(*PARTS)
    bad = frame.filter(
        (parts != pl.col("window_ns"))
        | (pl.col("window_ns") != pl.col("window_end_ns") - pl.col("window_start_ns"))
        | pl.any_horizontal(*(pl.col(p) < 0 for p in (*PARTS, "overlapped_comm_ns")))
        | (pl.col("overlapped_comm_ns") > pl.col("compute_ns")))
    if bad.height:
        row = bad.row(0, named=True)
        raise AttributionError(f"{bad.height} attribution rows do not add up, e.g. {row}")
    return frame
