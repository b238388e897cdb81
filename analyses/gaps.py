"""Idle gaps: stretches where a device ran nothing, and what the host was doing meanwhile.

A **gap** is a maximal stretch inside the window (as in
:func:`traceparse.analyses.attribution.breakdown`)
where no non-sync GPU activity ran on any stream of the device. Gaps shorter than ``min_ns``
are dropped; the rest are listed largest first with:

* ``launch_overhead_ns`` / ``warmup_ns`` / ``host_sync_ns`` / ``idle_ns``: the gap split
  exactly as the attribution splits it; ``kind`` names the largest of the four
  (``launch_overhead``, ``warmup``, ``host_sync``, ``idle``; ties in that order).
* ``cause``: **host activity that covers the gap**. Candidates are everything the trace
  recorded about the host of a process with work on the device: CUDA/HIP API calls,
  host ranges (NVTX, ``cpu_op``, ``user_annotation``, ...), and, from nsys exports that
  have them, OS-runtime calls (``osrt`` ranges) and CPU-sample runs (``cpu_sample``
  ranges) *of threads that made CUDA calls*. A candidate covers the gap when it overlaps
  at least half of it (:data:`COVER_FRACTION`); among covering candidates the
  **innermost** (shortest) wins, so the NVRTC compile beats the fusion range around it
  and a data loader's ``__next__`` beats the step around it. A call that ended at the
  gap's start covers nothing. The winner's kind gives the cause:

  - ``stream_wait``: a stream of the device held issued work back behind an event wait
    (:mod:`traceparse.analyses.streamwait`); it wins over every candidate but a profiler
    range, since a blocking host call inside it only waits on the waiting stream. Named by
    the wait call, the stream, the activity held back, the event's record call and its
    producer (``producer not in this trace`` when the record is not in the trace);
  - ``host_sync``: a call that waits (:data:`traceparse.analyses.attribution.BLOCKING_API_RE`,
    or a copy to or from pageable memory);
  - ``warmup``: a module-load / compile call, a lazy-loading first launch or a compile or
    autotune range (:func:`traceparse.analyses.attribution.warmup_intervals`);
  - ``cuda_api``: another CUDA call (issuing work, querying events, ...), or an
    allocation call (``cudaMalloc``, ``cudaFree`` ...) where the GPU had nothing in flight:
    it waits only for work in flight (:mod:`traceparse.analyses.waiting`), so the rest of
    it is the allocator's own work, not a sync;
  - ``os_wait``: an OS-runtime call (``poll``, ``read``, ``futex``, ``pthread_cond_wait``,
    ``sem_wait``, ``sleep``, ...): the launching thread waited on I/O, another thread or
    process;
  - ``cpu_work``: a host range;
  - ``cpu_busy``: when nothing above covers the gap, CPU samples of a launching thread
    that cover at least half of it (summed over the thread's sample runs in the gap): the
    top frame with the most sampled time is named with its share of the gap;
  - ``unknown``: nothing covers the gap.

  Profiler rule: a ``profiler_overhead`` range of the process (nsys ``PROFILER_OVERHEAD``,
  e.g. ``CUPTI Buffer flush``, on the profiler's own thread) that covers the gap wins over
  every other candidate: cause ``profiler``, and ``cause_detail`` names the call or range
  it held up (the innermost other covering candidate). While CUPTI flushes, the
  application's CUDA calls stall, so the gap is the measurement's, not the application's
  (nsys' own ``gpu_gaps`` rule leaves such time out for the same reason).

  One more rule: when nothing but CPU activity covers the gap (``cpu_busy``,
  ``cpu_work``, ``os_wait`` or ``unknown``) and the **first CUDA call the host made inside
  the gap** is warm-up (``cuModuleLoadData``, ``nvrtcCompileProgram``, a lazy-loading
  first launch ...), the host spent the gap preparing that code (JIT compile, cache
  lookups): the cause is ``warmup``, named by that call, and the covering activity becomes
  ``cause_detail`` (``first CUDA call in the gap; covered by cpu_busy: ...``).

  Host-activity classes (issue 24, :func:`_host_classes`; vocabulary :data:`CAUSES`): a
  CPU-only cause whose gap is mostly launch overhead becomes ``issuing`` (the host was
  issuing the next work); a data-loading range covering the gap (or a covering range or
  OS read named so, :mod:`traceparse.analyses.issuing`) makes it ``input_pipeline``; the
  profiler's own code makes it ``profiler``; and a gap that began while a blocking call
  was waiting is ``host_sync`` named by that call (the GPU drained while the host waited;
  ``cause_detail`` keeps what covered the rest), unless it is data loading, warm-up or
  profiler time.

  ``cause_name``, ``cause_thread_id``, ``cause_start_ns`` and ``cause_end_ns`` identify the
  explaining call or range (its interval always overlaps the gap); ``cause_detail`` holds
  the covering CPU activity when the cause is the warm-up rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse.analyses import intervals, sweep
from traceparse.analyses.attribution import (
    BLOCKING_API_RE,
    DEFAULT_GROUP,
    WARMUP_API_RE,
    blocking_intervals,
    busy_activities,
    default_segments,
    host_sets,
    warmup_intervals,
)
from traceparse.analyses.gapjoin import COVER_FRACTION
from traceparse.analyses.gapjoin import join_gaps as _join_gaps
from traceparse.analyses.gapjoin import name_issuing as _name_issuing
from traceparse.analyses.gapjoin import near_gaps as _near_gaps
from traceparse.analyses.gapjoin import next_launch_threads as _next_launch_threads
from traceparse.analyses.hostrows import distinct_rows, per_group
from traceparse.analyses.waiting import ALLOC_API_RE
from traceparse.analyses.warmup import LAZY_MARKER_RE
from traceparse.derived import cached
from traceparse.kernelname import short_kernel_name
from traceparse.timeline import Timeline

#: Kept for callers: host API calls that block the calling thread until the GPU catches up.
SYNC_API_RE = BLOCKING_API_RE
#: Range kinds that are not host work (GPU-side annotations, whole profiler steps, marks)
#: or are read as their own cause (OS-runtime calls, CPU samples).
NON_HOST_RANGE_KINDS = ("gpu_user_annotation", "profiler_step", "nvtx_mark")
OSRT_KIND = "osrt"
SAMPLE_KIND = "cpu_sample"
PROFILER_KIND = "profiler_overhead"
DEFAULT_MIN_NS = 10_000
_GAP_PARTS = ("launch_overhead_ns", "warmup_ns", "host_sync_ns", "idle_ns")
_CPU_CAUSES = ("cpu_busy", "cpu_work", "os_wait")
_CAUSE_ORDER = ("profiler", "stream_wait", "host_sync", "warmup", "cuda_api", "os_wait", "cpu_busy",
                "cpu_work")
#: Every cause a gap can have (docs/analyses.md, "Gap causes").
CAUSES = ("issuing", "input_pipeline", "host_sync", "warmup", "cpu_work", "profiler",
          "cuda_api", "os_wait", "cpu_busy", "unknown")

_GAP_COLS = ["start_ns", "end_ns", "dur_ns", *_GAP_PARTS, "kind", "cause", "cause_name",
             "cause_thread_id", "cause_start_ns", "cause_end_ns", "cause_detail"]


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
        The ``group`` columns and :data:`_GAP_COLS` (see the module docstring), sorted by
        ``dur_ns`` descending, then group and start.

    Example:
        A kernel [0, 100) us, a blocking ``cudaMemcpy`` [90, 400) whose copy runs
        [380, 390), then the next kernel [400, 450): the gap [100, 380) is 280 us of
        ``host_sync`` (the call blocks throughout), cause ``host_sync`` ``cudaMemcpy``.
    """
    key = f"idle_gaps:{min_ns}:{window}:{','.join(group)}"
    # one computation per timeline and options: summary, its verdict and the report share it
    return cached(tl, key, ("gpu", "api", "ranges"),
                  lambda: _idle_gaps(tl, min_ns, window, list(group)))


def _idle_gaps(tl: Timeline, min_ns: int, window: tuple[int, int] | None, group: list[str]
               ) -> pl.DataFrame:
    acts = busy_activities(tl)
    if window is None:
        # the segments of each group's own window, cut once with the attribution's
        free = default_segments(tl, group)["free"]
    else:
        wins = (acts.select(group).unique()
                .with_columns(pl.lit(int(window[0]), pl.Int64).alias("start_ns"),
                              pl.lit(int(window[1]), pl.Int64).alias("end_ns")))
        hs = host_sets(tl, acts, group)
        seg = intervals.segments({"_win": wins, "_busy": acts, **hs}, by=group)
        free = seg.filter((pl.col("_win") > 0) & (pl.col("_busy") == 0))
    gaps = _merge_free(free, group).filter(pl.col("dur_ns") >= min_ns).with_row_index("_gid")
    if gaps.height == 0:
        return _empty(acts, group)
    top = pl.max_horizontal(*_GAP_PARTS)  # the largest part; ties in _GAP_PARTS order
    kind = (pl.when(pl.col("launch_overhead_ns") == top).then(pl.lit("launch_overhead"))
            .when(pl.col("warmup_ns") == top).then(pl.lit("warmup"))
            .when(pl.col("host_sync_ns") == top).then(pl.lit("host_sync"))
            .otherwise(pl.lit("idle")))
    gaps = gaps.with_columns(kind.alias("kind"))
    # the thread that launched the work ending each gap: its own host activity explains
    # the gap before another thread's (docs/analyses.md, "Gap causes"), and an issuing gap
    # is named on it
    launchers = _next_launch_threads(tl, gaps.select("_gid", *group, "end_ns"), group)
    best, held, first_warm = _causes(tl, acts, gaps, group, launchers)
    out = (gaps.join(best, on="_gid", how="left")
           .join(first_warm, on="_gid", how="left", suffix="_w")
           .join(held, on="_gid", how="left"))
    cpu_only = pl.col("_cause").is_null() | pl.col("_cause").is_in(list(_CPU_CAUSES))
    warm = cpu_only & pl.col("_name_w").is_not_null()
    detail = pl.lit("first CUDA call in the gap; ") + pl.when(pl.col("_name").is_not_null()) \
        .then(pl.lit("covered by ") + pl.col("_cause") + pl.lit(": ") + pl.col("_name")) \
        .otherwise(pl.lit("nothing else covers the gap"))

    def pick(a: str, b: str) -> pl.Expr:
        return pl.when(warm).then(pl.col(b)).otherwise(pl.col(a))

    out = out.with_columns(
        pl.when(warm).then(pl.lit("warmup")).otherwise(pl.col("_cause").fill_null("unknown"))
        .alias("cause"),
        pick("_name", "_name_w").alias("cause_name"),
        pick("_tid", "_tid_w").cast(pl.Int64).alias("cause_thread_id"),
        pick("_cs", "_cs_w").cast(pl.Int64).alias("cause_start_ns"),
        pick("_ce", "_ce_w").cast(pl.Int64).alias("cause_end_ns"),
        pl.when(warm).then(detail)
        .when(pl.col("_cause") == "profiler").then(pl.col("_held"))
        .otherwise(None).cast(pl.String).alias("cause_detail"))
    out = out.join(launchers, on="_gid", how="left")
    return sort_gaps(_host_classes(tl, acts, out, group), group)


def sort_gaps(frame: pl.DataFrame, group: Sequence[str]) -> pl.DataFrame:
    """The gap columns in the output order: largest first, then group and start (the
    chunked executors sort their merged rows with it too)."""
    group = list(group)
    return (frame.select(*group, *_GAP_COLS)
            .sort(["dur_ns", *group, "start_ns"], descending=[True] + [False] * (len(group) + 1),
                  nulls_last=True))


def _host_classes(tl: Timeline, acts: pl.DataFrame, gaps: pl.DataFrame, group: list[str]
                  ) -> pl.DataFrame:
    """The host-activity classes (module docstring, last rules): ``host_sync`` when the
    GPU drained while a blocking call waited, ``input_pipeline`` with data-loading
    evidence, ``profiler`` for the profiler's own code, ``issuing`` when the gap is mostly
    the host issuing the next work (the attribution's launch overhead)."""
    from traceparse.analyses.issuing import (
        DATA_LOADING_RE,
        IO_READ_RE,
        PROFILER_RANGE_RE,
        loading_range,
    )

    cpu = pl.col("cause").is_in(["cpu_work", "cpu_busy", "os_wait", "cuda_api", "unknown"])
    name = pl.col("cause_name").fill_null("")
    loading = (((pl.col("cause") == "cpu_work") & ~name.str.starts_with("aten::")
                & name.str.contains(DATA_LOADING_RE))
               | ((pl.col("cause") == "os_wait") & name.str.contains(IO_READ_RE)))
    prof = (pl.col("cause") == "cpu_work") & name.str.contains(PROFILER_RANGE_RE)
    issuing = cpu & is_issuing()
    from traceparse.analyses.issuing import host_ranges

    dl = host_ranges(tl).filter(loading_range(pl.col("name"), pl.col("kind")))
    if dl.height:
        # a data-loading range around the covering one names the gap
        pg = per_group(dl.with_columns((pl.col("kind") == "python_function").alias("_py"))
                       .select("rank", "process_id", "thread_id", "name", "start_ns",
                               "end_ns"), acts, group)
        gi = gaps.with_row_index("_r")
        j = _join_gaps(gi.select(*group, "start_ns", "end_ns", pl.col("_r").alias("_gid")),
                       pg, group, cover=True)
        if j.height:
            j = (j.with_columns(pl.col("name").str.contains(r"\.py\(\d+\)").alias("_py"))
                 .sort("_gid", "_py", "_d").group_by("_gid", maintain_order=True).first())
            gi = gi.join(j.select(pl.col("_gid").alias("_r"), pl.col("name").alias("_dl"),
                                  pl.col("thread_id").alias("_dt"),
                                  pl.col("start_ns").alias("_ds"),
                                  pl.col("end_ns").alias("_de")), on="_r", how="left")
            # a gap mostly spent issuing the next work is issuing, even inside a
            # data-loading range (the issuing rule already gives nested ops their time)
            hit = pl.col("_dl").is_not_null() & cpu & ~is_issuing()
            # the gap is named by the data-loading range: its thread and times, not those
            # of the candidate it replaces
            gaps = gi.with_columns(
                pl.when(hit).then(pl.lit("input_pipeline")).otherwise(pl.col("cause"))
                .alias("cause"),
                *(pl.when(hit).then(pl.col(new)).otherwise(pl.col(old)).alias(old)
                  for new, old in (("_dl", "cause_name"), ("_dt", "cause_thread_id"),
                                   ("_ds", "cause_start_ns"), ("_de", "cause_end_ns")))
                ).drop("_r", "_dl", "_dt", "_ds", "_de")
    gaps = _name_issuing(tl, acts, gaps.with_columns(
        pl.when(loading).then(pl.lit("input_pipeline")).when(prof).then(pl.lit("profiler"))
        .when(issuing).then(pl.lit("issuing")).otherwise(pl.col("cause")).alias("cause")),
        group)
    # the GPU ran out of work while the host waited in a blocking call: the sync, not the
    # host work after it, kept the GPU from being fed
    blk = blocking_intervals(tl, acts, group)
    if blk.height == 0:
        return gaps
    g = gaps.with_row_index("_r")
    j = _join_gaps(g.select(*group, "start_ns", "end_ns", pl.col("_r").alias("_gid")),
                   blk.select(*group, "name", "thread_id", "start_ns", "end_ns"), group)
    j = (j.filter((pl.col("start_ns") <= pl.col("_gs")) & (pl.col("end_ns") > pl.col("_gs")))
         # stable: of two blocking rows starting together, the API call (with its thread)
         # comes first and names the gap (docs/analyses.md)
         .sort("_gid", "start_ns", maintain_order=True)
         .group_by("_gid", maintain_order=True).first())
    if j.height == 0:
        return gaps
    drained = g.join(j.select(pl.col("_gid").alias("_r"), pl.col("name").alias("_sn"),
                              pl.col("thread_id").alias("_st"), pl.col("start_ns").alias("_ss"),
                              pl.col("end_ns").alias("_se")), on="_r", how="left")
    # a gap already covered by a blocking call keeps that call
    hit = pl.col("_sn").is_not_null() & pl.col("cause").is_in(
        ["cpu_work", "cpu_busy", "os_wait", "cuda_api", "unknown", "issuing"])
    detail = pl.lit("the GPU drained while the host waited; then ") + pl.when(
        pl.col("cause_name").is_null()).then(pl.lit("nothing covers the gap")).otherwise(
        pl.col("cause") + pl.lit(": ") + pl.col("cause_name"))
    return drained.with_columns(
        pl.when(hit).then(detail).otherwise(pl.col("cause_detail")).alias("cause_detail"),
        pl.when(hit).then(pl.lit("host_sync")).otherwise(pl.col("cause")).alias("cause"),
        pl.when(hit).then(pl.col("_sn")).otherwise(pl.col("cause_name")).alias("cause_name"),
        pl.when(hit).then(pl.col("_st")).otherwise(pl.col("cause_thread_id"))
        .alias("cause_thread_id"),
        pl.when(hit).then(pl.col("_ss")).otherwise(pl.col("cause_start_ns"))
        .alias("cause_start_ns"),
        pl.when(hit).then(pl.col("_se")).otherwise(pl.col("cause_end_ns"))
        .alias("cause_end_ns")).drop("_r", "_sn", "_st", "_ss", "_se")


def is_issuing() -> pl.Expr:
    """A gap is ``issuing`` when at least half of it is issuing time: the attribution's
    ``launch_overhead_ns`` of the gap (launch windows and the issuing stretches of
    :mod:`traceparse.analyses.issuing`, one set for both). Such a gap's ``kind`` is
    ``launch_overhead``; a gap of ``kind`` ``idle`` is never issuing."""
    return 2 * pl.col("launch_overhead_ns") >= pl.col("dur_ns")


#: At most about this many host rows are copied to groups at once: with many groups
#: (836 streams) the causes are found for a batch of groups at a time (each gap's cause
#: reads only rows of its own group, so the batches are independent).
CHUNK_ROWS = 4_000_000


def _causes(tl: Timeline, acts: pl.DataFrame, gaps: pl.DataFrame, group: list[str],
            launchers: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Per gap: the covering cause (``_gid, _cause, _name, _tid, _cs, _ce``, CPU samples
    filling in where no candidate covers; ``launchers``: ``_gid, _ithr`` for
    :func:`_cover`), the call a profiler range held up (``_held``) and the warm-up first
    call (:func:`_first_call_warmup`), batch by batch of groups.

    Only host rows that overlap some gap (:func:`_near_gaps`) are copied to their groups
    (:func:`per_group`), and only to the groups of one batch (:data:`CHUNK_ROWS`): every
    use joins them with the gaps of their own group, so the pairs are the same."""
    # only the columns per_group copies (a filter of every api column was ~0.9 GB at 13M
    # calls)
    api = _near_gaps(tl.api.select("rank", "process_id", "name", "thread_id", "start_ns",
                                   "end_ns").filter(pl.col("end_ns").is_not_null()), gaps)
    keys = gaps.select(group).unique().sort(group)
    # the host calls already per group (cached with the attribution), cut once by batch
    fixed = pl.concat([_label(_near_gaps(blocking_intervals(tl, acts, group), gaps),
                              group, "host_sync"),
                       _label(_near_gaps(warmup_intervals(tl, acts, group), gaps),
                              group, "warmup"),
                       _stream_wait_rows(tl, group)], how="vertical_relaxed")
    code = sweep.group_codes(keys, fixed, group)
    order = np.argsort(code, kind="stable")
    fixed, code = fixed[order], code[order]
    copied = api.height + tl.ranges.height
    step = max(1, CHUNK_ROWS // max(1, copied))
    out: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]] = []
    for lo in range(0, keys.height, step):
        batch = keys.slice(lo, step)
        g = gaps.join(batch, on=group, how="semi", nulls_equal=True)
        # the batch's (group, process) rows: all that per_group reads of them (a semi-join
        # of every activity column was a copy of the gpu frame, 1.5 GB at 10M kernels)
        a = acts.select(*group, "process_id").join(batch, on=group, how="semi",
                                                   nulls_equal=True)
        cut = np.searchsorted(code, [lo, lo + step])
        calls = per_group(api, a, group)
        cands = _candidates(tl, a, group, calls, g, fixed.slice(cut[0], cut[1] - cut[0]))
        best = _cover(g, cands, group, launchers)
        held = _cover(g, cands.filter(pl.col("_cause") != "profiler"), group).select(
            "_gid", (pl.lit("profiler overhead; it held up ")
                     + pl.col("_cause") + pl.lit(": ") + pl.col("_name")
                     + pl.lit(" (thread ") + pl.col("_tid").cast(pl.String) + pl.lit(")"))
            .alias("_held"))
        sampled = _sample_cover(tl, a, g, group)
        best = (g.select("_gid").join(best, on="_gid", how="left")
                .join(sampled, on="_gid", how="left", suffix="_s")
                .with_columns(*(pl.when(pl.col("_cause").is_null()).then(pl.col(f"{c}_s"))
                                .otherwise(pl.col(c)).alias(c)
                                for c in ("_cause", "_name", "_tid", "_cs", "_ce")))
                .select("_gid", "_cause", "_name", "_tid", "_cs", "_ce"))
        out.append((best, held, _first_call_warmup(tl, acts, g, group, calls)))
        del calls, cands
    return (pl.concat([o[0] for o in out]), pl.concat([o[1] for o in out]),
            pl.concat([o[2] for o in out]))


def _stream_wait_rows(tl: Timeline, group: list[str]) -> pl.DataFrame:
    """Blocked intervals behind stream event waits
    (:func:`traceparse.analyses.streamwait.stream_waits`) as ``stream_wait`` candidates,
    named by the wait call, the stream, what it held back and the event's producer."""
    from traceparse.analyses.streamwait import stream_waits

    sw = stream_waits(tl)
    if not set(group) <= set(sw.columns):
        return pl.DataFrame()
    # the held activity by its bare name (traceparse.kernelname)
    held = pl.col("blocked_name").map_elements(lambda n: short_kernel_name(n, 60, bare=True),
                                               return_dtype=pl.String)
    name = pl.format("{} on stream {}: held {} back; event {}; {}; {}", pl.col("wait_name"),
                     pl.col("stream_id"), held,
                     pl.col("event").fill_null("record not in this trace"),
                     pl.col("producer"), pl.col("stream_source"))
    return sw.select(*group, name.alias("name"), "thread_id", "start_ns", "end_ns",
                     pl.lit("stream_wait").alias("_cause"))


def _merge_free(free: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """The gaps: ``intervals.union`` of the free segments (disjoint, in group then time
    order, so a gap is a run of segments each starting where the previous ended), with
    ``dur_ns`` and each gap's length per part (:data:`_GAP_PARTS`: the segment's first
    host set in launch, warm-up, host sync order, else idle)."""
    part = (pl.when(pl.col("launch") > 0).then(0).when(pl.col("warmup") > 0).then(1)
            .when(pl.col("host_sync") > 0).then(2).otherwise(3))
    new = pl.col("start_ns") != pl.col("end_ns").shift(1)
    for c in group:
        new = new | pl.col(c).ne_missing(pl.col(c).shift(1))
    f = free.select(new.fill_null(True).alias("_new"), part.alias("_p"),
                    (pl.col("end_ns") - pl.col("start_ns")).alias("_l"))
    first = np.flatnonzero(f["_new"].to_numpy())
    last = np.append(first[1:], free.height)[:first.size] - 1
    p, length = f["_p"].to_numpy(), f["_l"].to_numpy()
    sums = {name: np.add.reduceat(np.where(p == i, length, 0), first) if first.size
            else np.zeros(0, np.int64) for i, name in enumerate(_GAP_PARTS)}
    return (free[first].select(*group, "start_ns")
            .with_columns(free["end_ns"].gather(last).alias("end_ns"),
                          *(pl.Series(n, v, pl.Int64) for n, v in sums.items()))
            .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns")))


def _launching_threads(tl: Timeline) -> pl.DataFrame:
    """``rank, process_id, thread_id`` of threads that made CUDA/HIP calls, once per
    timeline (the candidates and the sampled cover both read it)."""
    return cached(tl, "launching_threads", ("api",), lambda: distinct_rows(
        tl.api.select("rank", "process_id", "thread_id")))


def _label(frame: pl.DataFrame, group: list[str], cause: str) -> pl.DataFrame:
    return (frame.select(*group, "name", "thread_id", "start_ns", "end_ns")
            .with_columns(pl.lit(cause).alias("_cause")))


def _candidates(tl: Timeline, acts: pl.DataFrame, group: list[str], calls: pl.DataFrame,
                gaps: pl.DataFrame | None = None, fixed: pl.DataFrame | None = None
                ) -> pl.DataFrame:
    """Every host interval that may explain a gap: group columns, ``_cause``, ``_name``,
    ``_tid``, ``start_ns``, ``end_ns``. ``calls``: the finished CUDA calls per group
    (:func:`~traceparse.analyses.hostrows.per_group`). With ``gaps``, only the host
    rows that overlap some gap (:func:`_near_gaps`, taken before they are copied to their
    groups; the only use, :func:`_cover`, joins them with the gaps). ``fixed``: the
    ``host_sync`` and ``warmup`` candidates when the caller has them (labelled)."""

    def near(frame: pl.DataFrame) -> pl.DataFrame:
        return frame if gaps is None else _near_gaps(frame, gaps)

    def label(frame: pl.DataFrame, cause: str) -> pl.DataFrame:
        return _label(frame, group, cause)

    # the regexes run on the distinct call names, not on every call; an allocation call
    # is a CUDA call of its own where nothing was in flight (its waiting pieces are among
    # the host_sync rows: analyses/waiting.py)
    names = tl.api.get_column("name").unique().drop_nulls().cast(pl.String)
    special = names.filter((names.str.contains(BLOCKING_API_RE)
                            & ~names.str.contains(ALLOC_API_RE))
                           | names.str.contains(WARMUP_API_RE))
    plain = calls.filter(pl.col("name").is_not_null() & ~pl.col("name").is_in(special.implode()))
    kinds = pl.col("kind").cast(pl.String)
    host = near(tl.ranges.filter(pl.col("end_ns").is_not_null()
                                 & pl.col("device_id").is_null()))
    ranges = host.filter(~kinds.is_in([*NON_HOST_RANGE_KINDS, OSRT_KIND, SAMPLE_KIND,
                                       PROFILER_KIND]))
    threads = _launching_threads(tl)
    by_thread = host.filter(kinds.is_in([OSRT_KIND, SAMPLE_KIND])).join(
        threads, on=["rank", "process_id", "thread_id"], how="semi")
    if fixed is None:
        fixed = pl.concat([label(blocking_intervals(tl, acts, group), "host_sync"),
                           label(warmup_intervals(tl, acts, group), "warmup")],
                          how="vertical_relaxed")
    parts = [fixed,
             label(plain, "cuda_api"),
             label(per_group(by_thread.filter(kinds == OSRT_KIND), acts, group), "os_wait"),
             label(per_group(ranges, acts, group), "cpu_work"),
             # the profiler's thread, not a launching one: any thread of the process
             # (CUPTI's lazy-loading records are warm-up, not the profiler's)
             label(per_group(host.filter((kinds == PROFILER_KIND) & ~pl.col("name").cast(
                 pl.String).str.contains(LAZY_MARKER_RE)), acts, group), "profiler")]
    return (pl.concat(parts, how="vertical_relaxed")
            .rename({"name": "_name", "thread_id": "_tid"}))


#: Candidates that issue nothing: one of another thread than the one that launched the
#: work ending the gap comes after the launching thread's own (:func:`_cover`).
_OTHER_THREAD_LAST = ("cpu_work", "os_wait", "cuda_api")


def _cover(gaps: pl.DataFrame, cands: pl.DataFrame, group: list[str],
           launchers: pl.DataFrame | None = None) -> pl.DataFrame:
    """Innermost candidate covering at least :data:`COVER_FRACTION` of each gap:
    ``_gid, _cause, _name, _tid, _cs, _ce``. With ``launchers`` (``_gid, _ithr``: the
    thread that launched the work ending the gap), a ``cpu_work``, ``os_wait`` or
    ``cuda_api`` candidate of another thread ranks after every other covering candidate."""
    schema: dict[str, pl.DataType] = {"_gid": pl.UInt32(), "_cause": pl.String(),
                                      "_name": pl.String(), "_tid": pl.Int64(),
                                      "_cs": pl.Int64(), "_ce": pl.Int64()}
    if cands.height == 0:
        return pl.DataFrame(schema=schema)
    j = _join_gaps(gaps, cands, group, cover=True)
    # the same call can be a candidate twice (a lazy first launch is warm-up and a CUDA
    # call): the more specific cause wins
    j = j.with_columns(pl.col("_cause").replace_strict(list(_CAUSE_ORDER),
                                                       list(range(len(_CAUSE_ORDER))),
                                                       return_dtype=pl.Int32).alias("_o"))
    # a profiler overhead range covering the gap wins (it stalls the calls inside it), then
    # a stream held back by an event wait (a blocking call inside it waits on the wait);
    # otherwise the innermost candidate
    j = j.with_columns(pl.when(pl.col("_cause") == "profiler").then(0)
                       .when(pl.col("_cause") == "stream_wait").then(1).otherwise(2)
                       .alias("_np"))
    # then a host activity that issues nothing (a range, an OS wait, another CUDA call) of
    # the thread that launched the work ending the gap before one of another thread: the
    # main thread's range before autograd's thread waiting for work
    if launchers is not None:
        j = j.join(launchers, on="_gid", how="left")
        other = (pl.col("_cause").is_in(list(_OTHER_THREAD_LAST))
                 & (pl.col("_tid") != pl.col("_ithr")).fill_null(False))
    else:
        other = pl.lit(False)
    j = j.with_columns(other.cast(pl.Int8).alias("_oth"))
    return (j.sort(["_gid", "_np", "_oth", "_d", "_ov", "_o", "start_ns", "_name"],
                   descending=[False, False, False, False, True, False, False, False],
                   nulls_last=True)
            .group_by("_gid", maintain_order=True)
            .agg(pl.col("_cause").first(), pl.col("_name").first(), pl.col("_tid").first(),
                 pl.col("start_ns").first().alias("_cs"), pl.col("end_ns").first().alias("_ce"))
            .cast(pl.Schema(schema)))


def _sample_cover(tl: Timeline, acts: pl.DataFrame, gaps: pl.DataFrame, group: list[str]
                  ) -> pl.DataFrame:
    """CPU samples of a launching thread covering at least :data:`COVER_FRACTION` of a gap
    (summed over its sample runs): ``_cause`` ``cpu_busy``, ``_name`` = the top frame with
    the most sampled time in the gap and its share of the gap, the thread, and the sampled
    stretch's first start / last end."""
    schema: dict[str, pl.DataType] = {"_gid": pl.UInt32(), "_cause": pl.String(),
                                      "_name": pl.String(), "_tid": pl.Int64(),
                                      "_cs": pl.Int64(), "_ce": pl.Int64()}
    kinds = pl.col("kind").cast(pl.String)
    s = tl.ranges.filter((kinds == SAMPLE_KIND) & pl.col("end_ns").is_not_null()).join(
        _launching_threads(tl), on=["rank", "process_id", "thread_id"], how="semi")
    if s.height == 0:
        return pl.DataFrame(schema=schema)
    # only the samples that overlap some gap are copied to their groups (the join keeps
    # only overlapping pairs anyway)
    j = _join_gaps(gaps, per_group(_near_gaps(s, gaps), acts, group), group)
    if j.height == 0:
        return pl.DataFrame(schema=schema)
    per_thread = (j.group_by("_gid", "thread_id")
                  .agg(pl.col("_ov").sum().alias("_tot"), (pl.col("_ge") - pl.col("_gs"))
                       .first().alias("_len"), pl.col("start_ns").min().alias("_cs"),
                       pl.col("end_ns").max().alias("_ce"))
                  .filter(pl.col("_tot") >= COVER_FRACTION * pl.col("_len")))
    top = (j.group_by("_gid", "thread_id", "name").agg(pl.col("_ov").sum().alias("_f"))
           .sort(["_gid", "thread_id", "_f", "name"], descending=[False, False, True, False])
           .group_by("_gid", "thread_id", maintain_order=True).first())
    out = (per_thread.join(top, on=["_gid", "thread_id"])
           .sort(["_gid", "_tot", "thread_id"], descending=[False, True, False])
           .group_by("_gid", maintain_order=True).first()
           .select("_gid", pl.lit("cpu_busy").alias("_cause"),
                   (pl.col("name") + pl.lit(" (") + (pl.col("_f") * 100 / pl.col("_len"))
                    .round(0).cast(pl.Int64).cast(pl.String) + pl.lit("% of the gap)"))
                   .alias("_name"), pl.col("thread_id").alias("_tid"), "_cs", "_ce"))
    return out.cast(pl.Schema(schema))


def _first_call_warmup(tl: Timeline, acts: pl.DataFrame, gaps: pl.DataFrame,
                       group: list[str], calls: pl.DataFrame) -> pl.DataFrame:
    """Per gap whose first CUDA call started inside it is a warm-up call: ``_gid``,
    ``_name``, ``_tid``, ``_cs``, ``_ce`` of that call."""
    schema: dict[str, pl.DataType] = {"_gid": pl.UInt32(), "_name": pl.String(),
                                      "_tid": pl.Int64(), "_cs": pl.Int64(), "_ce": pl.Int64()}
    warm = warmup_intervals(tl, acts, group).select(*group, "name", "start_ns",
                                                    pl.lit(True).alias("_warm"))
    if calls.height == 0:
        return pl.DataFrame(schema=schema)
    # the calls that start inside a gap, then their warm-up flag (the join commutes with
    # the filter: it reads only the call's own columns)
    j = _join_gaps(gaps, calls, group, inside=True).join(
        warm, on=[*group, "name", "start_ns"], how="left", nulls_equal=True)
    first = (j.sort("_gid", "start_ns", "name").group_by("_gid", maintain_order=True)
             .agg(pl.all().first()))
    return (first.filter(pl.col("_warm").fill_null(False))
            .select("_gid", pl.col("name").alias("_name"), pl.col("thread_id").alias("_tid"),
                    pl.col("start_ns").alias("_cs"), pl.col("end_ns").alias("_ce"))
            .cast(pl.Schema(schema)))


def _empty(acts: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    schema: dict[str, pl.DataType] = {c: acts.schema[c] for c in group}
    schema.update({"start_ns": pl.Int64(), "end_ns": pl.Int64(), "dur_ns": pl.Int64()})
    schema.update({p: pl.Int64() for p in _GAP_PARTS})
    schema.update({"kind": pl.String(), "cause": pl.String(), "cause_name": pl.String(),
                   "cause_thread_id": pl.Int64(), "cause_start_ns": pl.Int64(),
                   "cause_end_ns": pl.Int64(), "cause_detail": pl.String()})
    return pl.DataFrame(schema=schema)
