"""The full ``breakdown`` of one nsys export on a chunked executor (time windows, two passes).

``traceparse breakdown TRACE --executor chunks|dask`` (default group: one row per
``(rank, device_id)``, each device's default window) without building the timeline
(docs/performance.md, "Chunked breakdown"):

1. **Pass 1** over the time windows of about ``chunk_rows`` GPU activities, as the chunked
   ``gaps`` do (:func:`traceparse.executor.idle_gaps`): each device's window (first start,
   last end of its busy activities: :func:`traceparse.analyses.chunked.window_parts`), the
   trace-wide call state (each name's first launch, each process's median call) and the
   deepest launch queue (:func:`traceparse.executor.window_call_state`).
2. **Pass 2**, per time window ``[t0, t1)``: the timeline of a span reaching back at least
   the deepest queue (:func:`traceparse.nsys.spans.read_span`), checked to hold every row
   the attribution's host sets read for each **free** stretch of each device's part of the
   window (every nanosecond no busy activity covers: only there do the host sets decide a
   part; :func:`traceparse.nsys.spancheck.why_not_local`, widened as the gaps widen), then
   the in-memory :func:`traceparse.analyses.attribution.breakdown_windows` on it with the
   carried call state, per device over ``[max(t0, first), min(t1, last))``.

The windows do not overlap and tile each device's window, so the integer parts add up
exactly; the rows are finished as the memory path finishes them
(:func:`traceparse.analyses.attribution.finish_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import polars as pl

from traceparse.analyses import chunked
from traceparse.executor import (
    CHUNK_ROWS,
    NotLocal,
    Span,
    TraceState,
    WindowPart,
    earlier_spans,
    later_spans,
    local_span,
    local_span_at,
    map_jobs,
    map_reduce,
    merge_with_state,
    window_call_state,
)
from traceparse.nsys import chunks
from traceparse.timeline import Timeline

GROUP = chunked.GROUP
__all__ = ["NotLocal", "breakdown", "breakdown_window_task", "checked_span", "checked_span_at",
           "device_windows", "finish", "jobs_after", "launch_set_on", "span_parts_task",
           "windows_in"]


def breakdown_window_task(plan: chunks.Plan, window: tuple[int, int]) -> WindowPart:
    """Pass 1 of one time window: the devices' first start and last end (and unions)
    of :func:`~traceparse.analyses.chunked.window_parts`, the call-state partial of the
    GPU rows starting in it and their deepest queue (runs on a worker)."""
    rows = chunks.read_rows(plan, plan.blocks_for(*window), window)
    return chunked.window_parts(rows, *window), window_call_state(plan, rows, *window)


def free_stretches(tl: Timeline, wins: pl.DataFrame) -> pl.DataFrame:
    """The stretches of each device window of ``wins`` (``rank``, ``device_id``,
    ``window_start_ns``, ``window_end_ns``) that no busy activity of ``tl`` covers
    (``rank``, ``device_id``, ``start_ns``, ``end_ns``): where the host sets decide the
    attribution (busy time goes to compute, communication or memory first)."""
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import busy_activities

    w = wins.select(*GROUP, pl.col("window_start_ns").alias("start_ns"),
                    pl.col("window_end_ns").alias("end_ns"))
    busy = busy_activities(tl).select(*GROUP, "start_ns", "end_ns")
    return intervals.subtract(w, busy.cast(w.schema), by=GROUP)  # type: ignore[arg-type]


def span_parts_task(plan: chunks.Plan, span: Span, wins: pl.DataFrame, state: TraceState
                    ) -> tuple[pl.DataFrame, int | None]:
    """:func:`~traceparse.analyses.attribution.breakdown_windows` of the device windows
    ``wins`` (one time window's part of each device's window) on the timeline of ``span``
    with the trace-wide call ``state``, and that timeline's first event (runs on a worker).

    Raises:
        NotLocal: no span of ``span`` holds what the free stretches' rules read, or a
            device has a window here and no activity in the span.
    """
    from traceparse.analyses.attribution import breakdown_windows

    tl = checked_span(plan, span, wins, state)
    first = tl.span_ns()
    if wins.height == 0:
        return wins, None if first is None else first[0]
    rows = breakdown_windows(tl, wins, group=GROUP)
    return rows, None if first is None else first[0]


def span_launch_task(plan: chunks.Plan, span: Span, wins: pl.DataFrame, state: TraceState
                     ) -> pl.DataFrame:
    """Where the attribution's launch overhead lies in the device windows ``wins`` (one
    time window's part of each device's window), computed as :func:`span_parts_task`
    computes their sums: ``rank, start_ns, end_ns`` (the segments, not merged).

    Raises:
        NotLocal: as :func:`span_parts_task`.
    """
    from traceparse.analyses.attribution import (
        busy_activities,
        part_expr,
        window_frame,
        window_segments,
    )

    tl = checked_span(plan, span, wins, state)
    acts = busy_activities(tl)
    w = window_frame(acts, wins, GROUP)
    seg = window_segments(tl, acts, w, GROUP).filter(part_expr() == "launch_overhead_ns")
    return seg.join(w.select("_wid", "rank"), on="_wid").select("rank", "start_ns", "end_ns")


def checked_span(plan: chunks.Plan, span: Span, wins: pl.DataFrame, state: TraceState,
                  also: pl.DataFrame | None = None) -> Timeline:
    """The timeline of :func:`local_span` for the free stretches of ``wins`` (and the
    stretches ``also``: ``rank, device_id, start_ns, end_ns``), each device with a window
    there having activity in it."""
    return _with_devices(local_span(plan, span, _explain(wins, also), state), wins)


def checked_span_at(plan: chunks.Plan, span: Span, wins: pl.DataFrame, state: TraceState,
                    also: pl.DataFrame | None = None) -> tuple[Timeline, int, int]:
    """:func:`checked_span` and the span it read (``lo, hi``)."""
    tl, lo, hi = local_span_at(plan, span, _explain(wins, also), state)
    return _with_devices(tl, wins), lo, hi


def _explain(wins: pl.DataFrame, also: pl.DataFrame | None
             ) -> Callable[[Timeline], pl.DataFrame]:
    """The stretches :func:`checked_span` checks on a span's timeline."""
    def explain(t: Timeline) -> pl.DataFrame:
        free = free_stretches(t, wins)
        if also is None or also.height == 0:
            return free
        return pl.concat([free, also.select(free.columns).cast(free.schema)])

    return explain


def _with_devices(tl: Timeline, wins: pl.DataFrame) -> Timeline:
    """``tl``, each device with a window of ``wins`` having activity in it.

    Raises:
        NotLocal: a device has none.
    """
    from traceparse.analyses.attribution import busy_activities

    if wins.height == 0:
        return tl
    have = busy_activities(tl).select(GROUP).unique().cast(wins.select(GROUP).schema)
    missing = wins.join(have, on=GROUP, how="anti", nulls_equal=True)  # type: ignore[arg-type]
    if missing.height:
        r = missing.row(0, named=True)
        raise NotLocal(f"device {r['device_id']} (rank {r['rank']}) has no activity in a "
                       "span its window crosses (its processes' host calls count there)")
    return tl


def window_jobs(plan: chunks.Plan, wins: list[tuple[int, int]], executor: str = "chunks",
                workers: int = 4, scheduler: str | None = None
                ) -> tuple[pl.DataFrame, TraceState, list[tuple[int, tuple[Span, pl.DataFrame]]]
                           ] | None:
    """Pass 1 over the time windows ``wins`` and what pass 2 computes: each device's
    window (``rank, device_id, first_ns, last_ns``), the trace-wide call state and, per
    time window that a device window crosses (and the first), its number in ``wins``, the
    span to read and its part of each device's window (``rank, device_id,
    window_start_ns, window_end_ns``); None when no device has busy GPU activity."""
    if not wins:
        return None
    part, state = map_reduce(executor, plan, breakdown_window_task, wins, (),
                             partial(merge_with_state, merge=chunked.merge_parts), workers,
                             scheduler)
    return jobs_after(wins, device_windows(part), state)


def jobs_after(wins: list[tuple[int, int]], devices: pl.DataFrame, state: TraceState
               ) -> tuple[pl.DataFrame, TraceState, list[tuple[int, tuple[Span, pl.DataFrame]]]
                          ] | None:
    """:func:`window_jobs` after its pass 1 (``devices``: each device's window, as
    :func:`device_windows` gives it; ``state``: the merged trace state), for a caller
    that has run that pass already (the chunked summary's pass 1)."""
    if devices.height == 0:
        return None
    spans = window_spans(wins, state.depth)
    jobs: list[tuple[int, tuple[Span, pl.DataFrame]]] = []
    for i, (t0, t1) in enumerate(wins):
        mine = windows_in(devices, t0, t1)
        if mine.height == 0 and i > 0:
            continue
        jobs.append((i, (spans[i], mine)))
    return devices, state, jobs


def window_spans(wins: list[tuple[int, int]], depth: int) -> list[Span]:
    """Per time window of ``wins``, the span its pass-2 job reads: back at least the
    deepest queue ``depth``, as the gaps' spans (spancheck relies on it); the first from
    the file's beginning (the trace's first event)."""
    starts, ends = [w[0] for w in wins], [w[1] for w in wins]
    return [((earlier_spans(max(-chunks.END, t0 - depth - 1) if i else -chunks.END, starts)),
             later_spans(t1, ends)) for i, (t0, t1) in enumerate(wins)]


def span_launch_set_task(plan: chunks.Plan, span: Span, devices: pl.DataFrame,
                         state: TraceState, t0: int, t1: int
                         ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What ``whatif --fix cuda-graphs`` removes in the piece ``[t0, t1)`` (no step
    ranges): the attribution's whole ``launch`` host set less the graph launches
    (:func:`traceparse.analyses.mechanisms.graph_issuing`), clipped to the piece
    (``rank, start_ns, end_ns``), the blocking calls entered in it by name
    (:func:`~traceparse.analyses.mechanisms.blocking_counts`) and the whole ``launch``
    host set per device clipped to the piece (``rank, device_id, start_ns, end_ns``: what
    the fusion fix removes inside its chains, :mod:`traceparse.fusion_chunks`).

    **Locality rule.** The span is checked (:func:`local_span`) for **every** nanosecond
    of the piece, busy or not, on each device of ``devices`` (``rank, device_id,
    first_ns, last_ns``, pass 1) that has activity in the span or whose window crosses
    the piece: the launch set is a host set, so the lookups
    :func:`traceparse.nsys.spancheck.why_not_local` checks for the breakdown's free
    stretches are the ones it reads anywhere. A device left out has no activity in the
    span, so no launch window in the piece (a call overlapping the span is read with
    its activity, wherever it runs), and an issuing stretch reaching into the piece
    from a launch after the span is what the per-rank *issuing stretches* check looks
    for; so every rank must have a device checked.

    Raises:
        NotLocal: no span of ``span`` holds them, or a rank has no device with activity
            in the span.
    """
    stretches = _launch_set_stretches(devices, t0, t1)
    return _launch_set(local_span(plan, span, stretches, state), devices, stretches, t0, t1)


def launch_set_on(plan: chunks.Plan, tl: Timeline, lo: int, hi: int, devices: pl.DataFrame,
                  t0: int, t1: int
                  ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
    """:func:`span_launch_set_task`'s result on a timeline already read (``tl``, the
    span ``[lo, hi)``, with the trace state; the chunked summary's pass-2 span of the
    same window) when that span passes the same check
    (:func:`traceparse.nsys.spancheck.why_not_local` for every nanosecond of the piece
    on the devices the task checks, and a device checked for every rank): a span that
    passes it holds every row the launch set reads, as the task's own does. None when
    it does not (the caller then runs the task on its own span)."""
    from traceparse.nsys.spancheck import why_not_local

    stretches = _launch_set_stretches(devices, t0, t1)
    if why_not_local(plan, tl, stretches(tl), lo, hi) is not None:
        return None
    try:
        return _launch_set(tl, devices, stretches, t0, t1)
    except NotLocal:
        return None


def _launch_set_stretches(devices: pl.DataFrame, t0: int, t1: int
                          ) -> Callable[[Timeline], pl.DataFrame]:
    """The stretches :func:`span_launch_set_task` checks on a span's timeline: the
    whole piece ``[t0, t1)`` on each device of ``devices`` whose window crosses it or
    that has activity in the span."""
    from traceparse.analyses.attribution import busy_activities

    crossing = devices.filter((pl.col("first_ns") < t1) & (pl.col("last_ns") > t0))

    def stretches(tl: Timeline) -> pl.DataFrame:
        have = busy_activities(tl).select(GROUP).unique()
        dev = pl.concat([crossing.select(GROUP), have.cast(crossing.select(GROUP).schema)]
                        ).unique()
        return dev.select(*GROUP, pl.lit(t0, pl.Int64).alias("start_ns"),
                          pl.lit(t1, pl.Int64).alias("end_ns"))

    return stretches


def _launch_set(tl: Timeline, devices: pl.DataFrame,
                stretches: Callable[[Timeline], pl.DataFrame], t0: int, t1: int
                ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """:func:`span_launch_set_task`'s result on a checked span's timeline ``tl``.

    Raises:
        NotLocal: a rank has no device with activity in the span.
    """
    from traceparse.analyses.attribution import busy_activities, host_sets
    from traceparse.analyses.mechanisms import blocking_counts, graph_issuing

    left = set(devices["rank"].to_list()) - set(stretches(tl)["rank"].to_list())
    if left:
        raise NotLocal(f"rank {min(left)} has no GPU activity in a span (its issuing "
                       "stretches are not checked there)")
    rem = graph_issuing(tl).select(
        "rank", pl.max_horizontal("start_ns", pl.lit(t0, pl.Int64)).alias("start_ns"),
        pl.min_horizontal("end_ns", pl.lit(t1, pl.Int64)).alias("end_ns")).filter(
        pl.col("end_ns") > pl.col("start_ns"))
    api = tl.api.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
    # (graph_issuing's own set: host_sets is computed once per timeline)
    launch = host_sets(tl, busy_activities(tl), GROUP)["launch"].select(
        *GROUP, pl.max_horizontal("start_ns", pl.lit(t0, pl.Int64)).alias("start_ns"),
        pl.min_horizontal("end_ns", pl.lit(t1, pl.Int64)).alias("end_ns")).filter(
        pl.col("end_ns") > pl.col("start_ns"))
    return rem, blocking_counts(api), launch


def device_windows(part: pl.DataFrame) -> pl.DataFrame:
    """Each device's window (``rank, device_id, first_ns, last_ns``) from the merged pass-1
    partial (:func:`~traceparse.analyses.chunked.window_parts`); the devices with busy
    activity only."""
    return part.filter(pl.col("first_ns").is_not_null()).select(*GROUP, "first_ns",
                                                                 "last_ns")


def windows_in(devices: pl.DataFrame, t0: int, t1: int) -> pl.DataFrame:
    """The part of each device window of ``devices`` inside ``[t0, t1)`` (``rank,
    device_id, window_start_ns, window_end_ns``), for the devices whose window crosses it."""
    return (devices.filter((pl.col("first_ns") < t1) & (pl.col("last_ns") > t0))
            .select(*GROUP,
                    pl.max_horizontal("first_ns", pl.lit(t0, pl.Int64)).alias("window_start_ns"),
                    pl.min_horizontal("last_ns", pl.lit(t1, pl.Int64)).alias("window_end_ns")))


def finish(devices: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """The ``breakdown`` frame from the devices' windows and the rows of every time
    window (:func:`~traceparse.analyses.attribution.breakdown_windows`)."""
    from traceparse.analyses.attribution import PARTS, finish_rows

    sums = rows.group_by(GROUP).agg(pl.col(c).sum() for c in (*PARTS, "overlapped_comm_ns"))
    out = devices.join(sums.cast({c: devices.schema[c] for c in GROUP}), on=GROUP,
                       how="left", nulls_equal=True).rename(
        {"first_ns": "window_start_ns", "last_ns": "window_end_ns"})
    return finish_rows(out, GROUP)


def breakdown(path: str, *, executor: str = "chunks", chunk_rows: int = CHUNK_ROWS,
              workers: int = 4, scheduler: str | None = None
              ) -> tuple[pl.DataFrame, int | None] | None:
    """``breakdown`` of one nsys export on a chunked executor: the frame of
    :func:`traceparse.analyses.attribution.breakdown` (default window and group) and the
    trace's first event; None when no device has busy GPU activity (the caller words it
    from the timeline).

    Raises:
        NotLocal: a span may not hold every row the attribution reads for its free
            stretches; the caller computes the file in memory instead.
    """
    from traceparse.nsys.spans import span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    got = window_jobs(plan, plan.windows(chunk_rows), executor, workers, scheduler)
    if got is None:
        return None
    devices, state, indexed = got
    jobs = [j for _, j in indexed]
    results = map_jobs(executor, plan, span_parts_task, jobs, state, workers, scheduler)
    firsts = [r[1] for r in results if r[1] is not None]
    rows = pl.concat([r[0] for r in results if r[0].height], how="vertical_relaxed")
    return finish(devices, rows), min(firsts) if firsts else None
