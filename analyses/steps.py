"""Training/inference steps: per-step wall time, GPU busy time, percentiles and outliers.

Steps come from ``ProfilerStep#N`` ranges (Kineto, kind ``profiler_step``) or, with
``step_regex``, from any host range whose name matches (NVTX ranges in nsys captures,
e.g. ``r"^step \\d+$"``). Each step is a window ``[start, end)`` on its rank.

Without ``ProfilerStep`` ranges and without ``step_regex``, NVTX ranges and
``record_function`` annotations named as a numbered step (:data:`AUTO_STEP_RE`: ``step 3``,
``train_step_3``, ``decode_step_3``, ``eval iter 2``, ``iteration 12``, ``iter#4``: a
step word after an optional phase word, then the number) are the steps, when each rank has at least
two of them and they follow one another without overlapping (a nested or concurrent range
so named is not a step loop): this is how an nsys capture marks its steps.

* A step is cut to its rank's recording span when the file states one (Kineto's ``Trace``
  event): a ``ProfilerStep`` still open at torch.profiler's stop ends when it closes, but
  nothing after the stop was recorded (``hta__triton_example``: a 13.3 s step of which the
  profiler recorded 1.67 ms).
* ``wall_ns`` = end - start.
* ``gpu_busy_ns`` = length of the union of the rank's non-sync GPU activities (kernels,
  copies, sets; all devices and streams of the rank) clipped to the window.
* Outliers: a step is an outlier when its modified z-score ``0.6745 * (period_ns -
  median) / MAD`` exceeds :data:`OUTLIER_Z` = 3.5 over the steps of all ranks (Iglewicz
  and Hoaglin's rule; MAD = the median absolute deviation of ``period_ns``, the step's
  time where the host runs ahead: :func:`step_periods`), i.e. ``period_ns > median +
  5.19 * MAD``. MAD is robust: one very slow step does not hide itself by
  inflating the spread, as it would with a standard deviation. With MAD = 0 (all steps
  equal but the outliers) the step must still be slow: **a step is an outlier only when
  its period also exceeds the median by** :data:`~traceparse.analyses._dist.MIN_EFFECT_PCT`
  **(5 %)**, the smallest change ``diff`` flags. On a tight loop the MAD is a fraction of a
  percent of the step and the z-score alone flagged jitter:
  ``hta__negative_queue_length_rank0``'s step +1.6 % above the median,
  ``kineto__resnet50_worker0_bare-list``'s +2.4 % and +4.1 %.
  (The rule was
  ``median + 3 * MAD``, about two standard deviations of normal noise: on 3-20 steps of
  pure noise it flagged a step in 20-44% of runs, against 5-14% now.) **At least
  :data:`MIN_OUTLIER_STEPS` (5) steps**, else ``outlier`` is null (too few to tell): of
  3 steps the MAD is the nearer neighbour's distance from the median, set by one other
  step, so any spread between the other two made the slowest an "outlier"
  (``train_gpt2s_b8``: walls 62.8, 65.3, 63.1 ms, MAD 0.3 ms, so the step 3.5% above the
  median was flagged); of 4, by the two middle steps alone. From 5 steps on the MAD is
  the middle of 5 deviations and two steps lie on each side of the median. The warm-up
  screen (the warm-up fix's candidates, ``analyses/savings.py``) keeps 3 steps: it
  counts a leading step only with one-off warm-up evidence, never by its wall alone.
* When :func:`traceparse.analyses.attribution.breakdown_windows` is available, :func:`step_table`
  adds its per-step attribution (compute, memory, communication, launch overhead, idle)
  summed over the rank's devices, from the step's start or, where the rank's first GPU
  activity was queued behind unrecorded work, from that activity (:func:`gpu_known_from`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse import links
from traceparse.analyses import intervals
from traceparse.analyses._dist import MIN_EFFECT_PCT, percentiles
from traceparse.analyses.streamwait import NO_PRODUCER, stream_waits
from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Default: Kineto's profiler step ranges.
PROFILER_STEP_KIND = "profiler_step"
#: Without profiler steps: host annotations named as a numbered step (module docstring).
AUTO_STEP_RE = (r"(?i)^(?:(?:train(?:ing)?|decode|decoding|prefill|eval|val(?:idation)?|"
                r"infer(?:ence)?|forward|fwd|gen(?:erate|eration)?)[ _-]?)?"
                r"(?:step|iteration|iter)[ _#:=-]*\d+$")
#: The annotation kinds :data:`AUTO_STEP_RE` is matched against.
AUTO_STEP_KINDS = ("nvtx_push_pop", "nvtx_start_end", "user_annotation")


def step_windows(tl: Timeline, *, step_regex: str | None = None) -> pl.DataFrame:
    """The step windows: ``rank, step, start_ns, end_ns`` sorted by rank and start.

    Args:
        tl: the timeline.
        step_regex: None -> ranges of kind ``profiler_step``; else host ranges (any kind but
            GPU-side annotations) whose name matches this regular expression.
    """
    r = tl.ranges.filter(pl.col("end_ns").is_not_null())
    if step_regex is None:
        prof = r.filter(pl.col("kind").cast(pl.String) == PROFILER_STEP_KIND)
        r = prof if prof.height else auto_steps(r)
    else:
        r = r.filter((pl.col("kind").cast(pl.String) != "gpu_user_annotation")
                     & pl.col("name").cast(pl.String).str.contains(step_regex))
    return recorded_part(tl, r.select("rank", pl.col("name").cast(pl.String).alias("step"),
                                       "start_ns", "end_ns")
                          .unique(maintain_order=True).sort("rank", "start_ns"))


#: A rank's first recorded GPU activity that started this long after its launch call
#: returned was queued behind GPU work the trace does not hold (:func:`gpu_known_from`).
#: An idle GPU starts launched work within microseconds, and a fresh context's first
#: launches within a few milliseconds (shared nsys exports: 1.07 and 2.14 ms).
UNRECORDED_QUEUE_NS = 10_000_000


def gpu_known_from(tl: Timeline) -> pl.DataFrame:
    """``rank, gpu_known_from_ns``: the ranks whose first recorded non-sync GPU activity
    started more than :data:`UNRECORDED_QUEUE_NS` after its launch call returned, and
    that activity's start. Before it the GPU ran work the trace did not record (launched
    before the recording began, or cut away with the rest of a longer profile), so what
    the GPU did there is unknown: not idle, not waiting for launches. Step attribution
    starts there (:func:`step_table`, ``phases.phase_steps``), as the attribution window
    of :func:`traceparse.analyses.attribution.breakdown` starts at the first activity.
    ``tracelens__vllm_prefilldecode_piecewise_graph_execution``: the host issues its step
    in 26 ms from +0; the first copy, launched at +0.1 ms, starts at +151 ms. Also the end
    of a hold at the capture's start on an event the trace does not record, with nothing
    recorded running (:func:`_unrecorded_hold_end`). Computed once per timeline (both step
    tables of a summary read it)."""
    return cached(tl, "gpu_known_from", ("gpu", "api"), lambda: _gpu_known_from(tl))


def _gpu_known_from(tl: Timeline) -> pl.DataFrame:
    schema = pl.Schema([("rank", tl.gpu.schema["rank"]), ("gpu_known_from_ns", pl.Int64())])
    acts = (tl.gpu.select("rank", "kind", "start_ns").with_row_index("_r")
            .filter(pl.col("kind").cast(pl.String) != "sync"))
    if acts.height == 0:
        return pl.DataFrame(schema=schema)
    # per rank the earliest start, the first such row in table order (arg_min: no sort)
    first = acts.group_by("rank").agg(pl.col("_r").get(pl.col("start_ns").arg_min()),
                                      pl.col("start_ns").min())
    calls = links.launch_links(tl)["api_row"].gather(first["_r"])
    ret = (tl.api["end_ns"].cast(pl.Int64).gather(calls) if tl.api.height
           else pl.Series([None] * first.height, dtype=pl.Int64))
    late = (first.select("rank", pl.col("start_ns").alias("gpu_known_from_ns"))
            .filter((pl.col("gpu_known_from_ns") - ret) > UNRECORDED_QUEUE_NS))
    held = _unrecorded_hold_end(tl, first.select("rank", pl.col("start_ns").alias("_first")))
    out = late.cast(schema)
    if held.height:
        out = (pl.concat([out, held.cast(schema)]).group_by("rank")
               .agg(pl.col("gpu_known_from_ns").max()).sort("rank"))
    return out


def _unrecorded_hold_end(tl: Timeline, first: pl.DataFrame) -> pl.DataFrame:
    """``rank, gpu_known_from_ns``: per rank, the end of a stream-wait hold at the start
    of the capture on a producer the trace does not hold (:mod:`.streamwait`), where the
    GPU ran nothing recorded: the hold begins within :data:`UNRECORDED_QUEUE_NS` of the
    rank's first activity (``first``: ``rank, _first``), lasts longer than that, and no
    recorded activity of the rank overlaps it. An event completes when its stream reaches
    it, so the GPU ran the unrecorded producer until then (the SGLang decode capture on
    an MI300X: one kernel at +0.05 ms, then its next kernel held 463 ms on an event whose
    record is not in the trace, every other stream empty)."""
    w = stream_waits(tl)
    long_ = ((pl.col("producer") == NO_PRODUCER)
             & (pl.col("end_ns") - pl.col("start_ns") > UNRECORDED_QUEUE_NS))
    w = (w.filter(long_).select(pl.col("rank").cast(first.schema["rank"]), "start_ns",
                                "end_ns")
         .join(first, on="rank", how="inner")
         .filter(pl.col("start_ns") - pl.col("_first") <= UNRECORDED_QUEUE_NS)
         .sort("start_ns").unique("rank", keep="first"))
    if w.height == 0:
        return pl.DataFrame(schema={"rank": first.schema["rank"],
                                    "gpu_known_from_ns": pl.Int64})
    acts = (tl.gpu.select("rank", "kind", "start_ns", "end_ns")
            .filter(pl.col("kind") != "sync").drop("kind")
            .join(w.select("rank", pl.col("start_ns").alias("_hs"),
                           pl.col("end_ns").alias("_he")), on="rank", how="inner")
            .filter((pl.col("start_ns") < pl.col("_he")) & (pl.col("end_ns") > pl.col("_hs"))))
    return (w.join(acts.select("rank"), on="rank", how="anti")
            .select("rank", pl.col("end_ns").cast(pl.Int64).alias("gpu_known_from_ns")))


def unrecorded_queue_rows(tl: Timeline) -> pl.Series:
    """``unrecorded``: for each ``gpu`` row (same count, same order) whether it is work
    queued before the recording began. A stream runs its work in launch order, so on a
    stream with at least one recorded launch the activities (``sync`` rows left out)
    without a launch call that start before the stream's first activity with one were
    launched before any recorded call: the profiler's warm-up step, whose calls a schedule
    does not record (a stream with no recorded launch at all tells nothing:
    ``uvm-pytorch__report4``'s 59,918 unlinked activities). Computed once per timeline.

    Example:
        stream 7: an unlinked kernel 0..50, a linked one 60..90, an unlinked one 95..99;
        stream 8: only unlinked work: ``[true, false, false, false]``.
    """
    def compute() -> pl.Series:
        key = ["rank", "device_id", "stream_id"]
        api = links.launch_starts(tl)
        g = tl.gpu.select(*key, "kind", "start_ns", api)
        first = (pl.when(pl.col("api_start_ns").is_not_null()).then(pl.col("start_ns"))
                 .min().over(key))
        return g.select((pl.col("api_start_ns").is_null() & (pl.col("kind") != "sync")
                         & (pl.col("start_ns") < first)).fill_null(False)
                        .alias("unrecorded")).to_series()

    return cached(tl, "unrecorded_queue_rows", ("gpu", "api"), compute)


def unrecorded_queue_end(tl: Timeline) -> pl.DataFrame:
    """``rank, queue_end_ns``: per rank, the end of the GPU work queued before the
    recording began (:func:`unrecorded_queue_rows`). Ranks without such work are absent.
    Computed once per timeline.

    ``train_gpt2s_b32``: 849 kernels without a call run first, to +41.2 ms; the first
    ``ProfilerStep``'s own kernels wait behind them, so its period (:func:`step_periods`)
    starts there, not at its host start (119 ms otherwise, against 77.5 ms for the next
    steps, and a 41 ms "warm-up" that was the previous step's work).

    Example:
        stream 7: an unlinked kernel 0..50, a linked one 60..90, an unlinked one 95..99;
        stream 8: only unlinked work: queue end 50.
    """
    def compute() -> pl.DataFrame:
        return (tl.gpu.select("rank", "end_ns").filter(unrecorded_queue_rows(tl))
                .group_by("rank").agg(pl.col("end_ns").max().cast(pl.Int64)
                                      .alias("queue_end_ns"))
                .sort("rank"))

    return cached(tl, "unrecorded_queue_end", ("gpu", "api"), compute)


def unrecorded_work_end(tl: Timeline) -> pl.DataFrame:
    """``rank, queue_end_ns``: per rank, until when the GPU ran work launched before the
    recording began, which a step's own work waited behind: the end of the recorded
    activities queued before it (:func:`unrecorded_queue_end`) or, later, the start of a
    rank's first activity where the GPU ran nothing recorded before it and started it
    long after its launch (:func:`gpu_known_from`). The queue a step's period leaves out
    (:func:`step_periods`); ranks with neither are absent.
    ``tracelens__vllm_prefilldecode_piecewise_graph_execution``: its one step's first copy,
    launched at +2.2 ms (its first launch), starts at +151.2 ms; its kernels end at
    +307.7 ms: period 158.7 ms, the 2.2 ms before its first launch and the GPU's 156.5 ms
    (307.7 ms before the rule; its tokens/s are over this period, phases.phase_summary).

    Example:
        rank 0: recorded queue to 50, first activity at 40 (known from the start): 50;
        rank 1: no recorded queue, first activity 30 ms after its call: its start.
    """
    queue = unrecorded_queue_end(tl)
    known = gpu_known_from(tl).rename({"gpu_known_from_ns": "_known"})
    return (queue.join(known.cast({"rank": queue.schema["rank"]}), on="rank", how="full",
                       coalesce=True)
            .select("rank", pl.max_horizontal("queue_end_ns", "_known").alias("queue_end_ns"))
            .sort("rank"))


def known_start(start: str = "start_ns") -> pl.Expr:
    """Where a step's attribution starts: the later of its ``start`` column and its
    rank's ``gpu_known_from_ns`` (:func:`gpu_known_from`, joined on ``rank``)."""
    return pl.max_horizontal(start, pl.col("gpu_known_from_ns").fill_null(pl.col(start)))


def recorded_part(tl: Timeline, w: pl.DataFrame) -> pl.DataFrame:
    """Each step of ``w`` (``rank, start_ns, end_ns``, any other columns) cut to its
    rank's recording span (``sources.recorded_*_ns``, the Kineto ``Trace`` event),
    dropping a step wholly outside it. A ``ProfilerStep`` open when torch.profiler stopped
    ends when it closes, maybe seconds later, while nothing after the stop was recorded:
    the trace can say nothing of that part of the step."""
    src = tl.sources
    if w.height == 0 or "recorded_end_ns" not in src.columns:
        return w
    rec = (src.select("rank", "recorded_start_ns", "recorded_end_ns").drop_nulls()
           .group_by("rank").agg(pl.col("recorded_start_ns").min(),
                                 pl.col("recorded_end_ns").max()))
    if rec.height == 0:
        return w
    cut = w.join(rec.cast({"rank": w.schema["rank"]}), on="rank", how="left").with_columns(
        start_ns=pl.max_horizontal("start_ns", "recorded_start_ns"),
        end_ns=pl.min_horizontal("end_ns", "recorded_end_ns"))
    return cut.filter(pl.col("end_ns") > pl.col("start_ns")).select(w.columns)


def auto_steps(r: pl.DataFrame) -> pl.DataFrame:
    """The ranges of ``r`` that :data:`AUTO_STEP_RE` calls steps, or none: each rank needs
    two or more, one after another (no range starts before the previous one ended)."""
    from traceparse.analyses.codes import matches

    kinds = r["kind"].cast(pl.String).is_in(AUTO_STEP_KINDS)
    c = r.filter(kinds & matches(r["name"], AUTO_STEP_RE)).sort("rank", "start_ns")
    if c.height < 2:
        return c.clear()
    overlap = pl.col("start_ns") < pl.col("end_ns").shift(1).over("rank")
    ok = (c.with_columns(overlap.fill_null(False).alias("_ov")).group_by("rank")
          .agg(((pl.len() >= 2) & ~pl.col("_ov").any()).alias("_ok")))
    return c.filter(pl.col("rank").is_in(ok.filter(pl.col("_ok"))["rank"].implode()))


def auto_step_ranks(tl: Timeline) -> list[int]:
    """The ranks whose numbered step annotations are the steps (:func:`step_windows`
    without ``step_regex``): none when the trace has ``ProfilerStep`` ranges."""
    r = tl.ranges.filter(pl.col("end_ns").is_not_null())
    if r.filter(pl.col("kind").cast(pl.String) == PROFILER_STEP_KIND).height:
        return []
    return sorted(auto_steps(r)["rank"].unique().to_list())


def step_ends(tl: Timeline, end: np.ndarray | None = None, *,
              step_regex: str | None = None) -> list[int]:
    """The last GPU end of each step that has GPU work, in step order: a GPU activity (sync
    rows left out, in ``tl.gpu`` order) belongs to the step its
    launching call, else the activity itself, started in. ``end``: the activities' ends
    to read (a replay's, aligned with those rows); None: the measured ones."""
    w = step_windows(tl, step_regex=step_regex)
    # the columns read, selected before the filter copies them; kind as a code
    lj = (tl.gpu.select("kind", links.launch_starts(tl), "start_ns", "end_ns")
          .filter(pl.col("kind") != "sync"))
    t = lj.select(pl.coalesce("api_start_ns", "start_ns")).to_series().to_numpy()
    ends = lj["end_ns"].to_numpy() if end is None else np.asarray(end)
    starts = np.sort(w["start_ns"].to_numpy())
    step = np.searchsorted(starts, t, side="right") - 1
    return [int(ends[step == i].max()) for i in range(starts.size) if (step == i).any()]


def gpu_periods(tl: Timeline, *, step_regex: str | None = None) -> list[int]:
    """Per-step GPU periods (ns) of a single-rank trace: the time between consecutive
    steps' last GPU end (:func:`step_ends`). Where the host runs ahead of the GPU (no
    per-step sync), a step's host range says when the step was issued, not how long the
    GPU took; this says how often the GPU finished one."""
    return [b - a for a, b in itertools.pairwise(step_ends(tl, step_regex=step_regex))]


def _busy_in_windows(tl: Timeline, w: pl.DataFrame) -> pl.Series:
    # the columns the union reads, selected before the filter copies them; the kind
    # compared as a code (a filter of the whole frame with a String cast of every kind
    # copied all 35 columns: +1.5 GB at 10M kernels)
    u = cached(tl, "busy_union:rank", ("gpu",), lambda: intervals.union(
        tl.gpu.select("rank", "kind", "start_ns", "end_ns").filter(pl.col("kind") != "sync")
        .drop("kind"), by=["rank"]))
    j = (w.select("_wid", "rank", pl.col("start_ns").alias("ws"), pl.col("end_ns").alias("we"))
         .join(u, on="rank", how="inner")
         .filter((pl.col("end_ns") > pl.col("ws")) & (pl.col("start_ns") < pl.col("we")))
         .group_by("_wid")
         .agg((pl.min_horizontal("end_ns", "we") - pl.max_horizontal("start_ns", "ws"))
              .sum().alias("busy")))
    return w.join(j, on="_wid", how="left").sort("_wid")["busy"].fill_null(0)


#: The modified z-score above which a step is an outlier (Iglewicz and Hoaglin).
OUTLIER_Z = 3.5
#: The modified z-score's constant: the MAD of a normal distribution in standard deviations.
_MAD_SIGMA = 0.6745
#: Fewest steps (all ranks) whose spread can call one an outlier (module docstring).
MIN_OUTLIER_STEPS = 5


def step_table(tl: Timeline, *, step_regex: str | None = None,
               mad_k: float = OUTLIER_Z / _MAD_SIGMA,
               attribution: bool = True,
               min_steps: int = MIN_OUTLIER_STEPS) -> pl.DataFrame:
    """One row per step: wall time, GPU busy time, outlier flag (and attribution).

    Returns:
        ``rank, step, start_ns, end_ns, wall_ns, period_ns`` (the step's time where the
        GPU falls behind the host: :func:`_with_periods`), ``gpu_busy_ns, gpu_busy_pct,
        outlier`` (a period above the median by more than ``mad_k`` MADs and by at least
        ``MIN_EFFECT_PCT`` %; null with fewer
        than ``min_steps`` steps: too few to tell) and,
        with ``attribution``, ``compute_ns, memory_ns, communication_ns,
        launch_overhead_ns, idle_ns`` (from
        :func:`traceparse.analyses.attribution.breakdown_windows`,
        summed over the rank's devices; a device's parts sum to the step's wall time, less
        its part before the rank's :func:`gpu_known_from`).

    Example:
        Steps 0..100 (kernels 10..30 and 20..50 -> busy 40) and 100..400 (kernel
        100..130 -> busy 30): walls (and periods) 100 and 300. With three more steps of
        100 the median is 100, MAD 0, so the 300 step is the outlier.
    """
    w = step_windows(tl, step_regex=step_regex).with_row_index("_wid")
    w = w.with_columns(wall_ns=pl.col("end_ns") - pl.col("start_ns"))
    w = _with_periods(tl, w)
    w = w.with_columns(gpu_busy_ns=_busy_in_windows(tl, w).cast(pl.Int64))
    w = w.with_columns(gpu_busy_pct=pl.when(pl.col("wall_ns") > 0)
                       .then(pl.col("gpu_busy_ns") * 100.0 / pl.col("wall_ns")))
    # outliers by the step's period, not its host window: where the host runs ahead, a
    # short host window is followed by one that absorbs the wait (pageable_copy-twin:
    # windows 2.39, 0.27, 3.39, 2.59 ms flagged the third step; periods 5.83, 2.68, 2.69,
    # 2.67 ms: the first step is the slow one)
    med = w["period_ns"].median() if w.height >= max(1, min_steps) else None
    if med is not None:
        mad = (w["period_ns"] - med).abs().median()
        # and by at least MIN_EFFECT_PCT: with tight steps the MAD is a fraction of a
        # percent of the step and jitter of 1-4% read as outliers (negative_queue_length:
        # +1.6%)
        limit = max(float(med) + mad_k * float(mad or 0.0),  # type: ignore[arg-type]
                    float(med) * (1 + MIN_EFFECT_PCT / 100))  # type: ignore[arg-type]
        w = w.with_columns(outlier=pl.col("period_ns") > limit)
    else:
        w = w.with_columns(outlier=pl.lit(None, pl.Boolean))
    if attribution and w.height:
        from traceparse.analyses.attribution import PARTS, breakdown_windows

        known = gpu_known_from(tl)
        wins = w.join(known.cast({"rank": w.schema["rank"]}), on="rank", how="left").select(
            "rank", pl.col("_wid").cast(pl.Int64).alias("window_name"),
            pl.min_horizontal(known_start(), "end_ns").alias("window_start_ns"),
            pl.col("end_ns").alias("window_end_ns"))
        b = breakdown_windows(tl, wins.with_columns(pl.col("window_name").cast(pl.String)))
        if b.height:
            per = (b.with_columns(pl.col("window_name").cast(pl.UInt32).alias("_wid"))
                   .group_by("_wid").agg(pl.col(p).sum() for p in PARTS))
            w = w.join(per, on="_wid", how="left")
    return w.sort("_wid").drop("_wid")


def _with_periods(tl: Timeline, w: pl.DataFrame) -> pl.DataFrame:
    """``w`` (step windows with ``_wid``) plus ``period_ns``: each step's time by
    :func:`step_periods`, its finish being the later of its end and the end of the GPU work
    launched inside it (the rule of :func:`traceparse.analyses.phases.phase_steps`): where
    the GPU falls behind the host the host window (``wall_ns``) is shorter than what a step
    costs (``launch_bound-twin``: 0.32 ms against 0.49 ms)."""
    if w.height == 0:
        return w.with_columns(pl.lit(None, pl.Int64).alias("period_ns"))
    hit = launched_work(tl, w)
    done = pl.max_horizontal("end_ns", "gpu_end_ns") - pl.col("start_ns")
    queue = unrecorded_work_end(tl)
    per = step_periods(w.join(hit, on="_wid", how="left")
                       .join(queue.cast({"rank": w.schema["rank"]}), on="rank", how="left")
                       .select("_wid", "rank", "start_ns", done.alias("wall_ns"),
                               "queue_end_ns", "first_launch_ns"))
    return w.join(per.select("_wid", "period_ns"), on="_wid", how="left").sort("_wid")


def launched_work(tl: Timeline, w: pl.DataFrame) -> pl.DataFrame:
    """The GPU work launched inside each step window of ``w`` (``_wid, rank, start_ns,
    end_ns``): a kernel, copy or set belongs to the step its launch call started in (the
    rank's latest step started at or before the call, when the call starts before that
    step's end; work without a linked call belongs to none). One row per step that
    launched any: ``_wid``, ``gpu_end_ns`` (the latest end of its work: where a step
    finishes when the GPU falls behind the host, :func:`_with_periods` and
    :func:`traceparse.analyses.phases.phase_steps`), ``kernels`` and ``kernel_ns`` (its
    kernels' count and summed duration), ``first_launch_ns`` (its first launch call's
    start).

    Example:
        Steps 0 [0, 100) and 1 [100, 200) of rank 0; kernels launched at 10 (runs 50..90)
        and 90 (runs 120..260), a copy launched at 150 (runs 300..310): step 0 ends its
        work at 260 with 2 kernels of 40 + 140 = 180 ns (first launch 10), step 1 at 310
        with no kernel (first launch 150).
    """
    acts = step_of_launch(tl, w, ["kind", "start_ns", "dur_ns", "api_start_ns"])
    end = (pl.col("start_ns") + pl.col("dur_ns")).max().cast(pl.Int64)
    return acts.with_columns((pl.col("kind") == "kernel").alias("_k")).group_by("_wid").agg(
        end.alias("gpu_end_ns"), pl.col("_k").sum().cast(pl.Int64).alias("kernels"),
        pl.col("dur_ns").filter("_k").sum().cast(pl.Int64).alias("kernel_ns"),
        pl.col("api_start_ns").min().cast(pl.Int64).alias("first_launch_ns"))


def step_of_launch(tl: Timeline, w: pl.DataFrame, columns: list[str],
                   kinds: tuple[str, ...] | None = ("kernel", "memcpy", "memset"),
                   own_start: bool = False) -> pl.DataFrame:
    """The GPU activities of ``kinds`` launched inside a step window of ``w`` (``_wid,
    rank, start_ns, end_ns``), each with the ``_wid`` of its step: of the rank's steps open
    at its launch call's start, the one that started last (an activity belongs to one
    step, the innermost where steps nest; work without a linked call to none, or with
    ``own_start`` to the step open at its own start, unless it was queued before the
    recording began, :func:`unrecorded_queue_rows`). ``kinds``: None keeps every kind but
    ``sync``. Columns: ``_wid``, ``rank`` and ``columns`` of ``tl.gpu``, in ``tl.gpu``
    order. The one rule of :func:`launched_work`, the phases' kernel mix
    (:func:`traceparse.analyses.phases.phase_kernel_mix`) and ``diff``'s time per step
    (:func:`traceparse.analyses.diff.category_per_step`)."""
    keep = [c for c in columns if c not in ("rank", "kind", "api_start_ns")]
    kind = pl.col("kind")
    acts = tl.gpu.select(*dict.fromkeys(["rank", "kind", *keep, "start_ns"]),
                         links.launch_starts(tl))
    if own_start:  # work queued before the recording was launched by no recorded step
        own = pl.when(pl.lit(~unrecorded_queue_rows(tl))).then(pl.col("start_ns"))
        acts = acts.with_columns(pl.coalesce("api_start_ns", own).alias("api_start_ns"))
    acts = (acts.filter((kind != "sync" if kinds is None
                         else kind.cast(pl.String).is_in(list(kinds)))
                        & pl.col("api_start_ns").is_not_null())
            .with_columns(pl.col("rank").cast(w.schema["rank"])))
    # the step as a range whose domain is its _wid, matched by the "started last" rule
    steps = w.select("rank", "start_ns", "end_ns", pl.lit("step").alias("name"),
                     pl.lit("step").alias("kind"), pl.col("_wid").cast(pl.String).alias("domain"))
    hit = links.innermost_range(acts, steps, time_col="api_start_ns", group=["rank"],
                                prefix="_s_", wide_kinds=("step",), wide_group=["rank"])
    return (hit.filter(pl.col("_s_domain").is_not_null())
            .select(pl.col("_s_domain").cast(w.schema["_wid"]).alias("_wid"), "rank",
                    *(c for c in columns if c != "rank")))


def step_periods(steps: pl.DataFrame) -> pl.DataFrame:
    """``period_ns``: each step's time, from its start or, when later, the finish of the
    rank's earlier steps (the running maximum of ``start + wall``) to its own finish
    (``start + wall``); 0 for a step that finished before an earlier one.

    A step's wall runs from its host start to the end of the GPU work it launched, so where
    the host runs ahead of the GPU the walls of consecutive steps overlap and each holds the
    queue behind the earlier ones: it grows with every step the host gets ahead, and is not
    what a step costs. The period is what the run pays per step in steady state: the wall
    where a step waits for its work (a synchronising loop), the GPU's time per step where
    the GPU falls behind. The periods of one rank tile the union of its steps' walls, like
    :func:`attribution_windows`, but anchored at the finishes. ``launch_bound-twin`` (one
    CUDA-graph launch per step): host windows of 0.30-0.34 ms, walls 0.80-1.40 ms growing
    by ~0.15 ms a step, periods 0.48-0.50 ms (the GPU finishes a step every ~0.49 ms);
    ``train_gpt2s_b32``: walls 133 ms, periods 77.6 ms, the step measured without the
    profiler 78.1 ms. A graph-capture step (``phase`` ``capture``, when the column is
    there) keeps its wall and is not an earlier step of the loop. With
    ``queue_end_ns`` (:func:`unrecorded_work_end`) and ``first_launch_ns`` (the step's
    first launch call) columns, a step's period also leaves out the time its own work
    waited behind work launched before the recording began: from its first launch (or
    its start) to the queue's end.

    Example:
        One rank, steps at 0 (wall 150), 100 (wall 150), 300 (wall 50): finishes 150, 250,
        350; periods 150, 250 - 150 = 100, 350 - 300 = 50.
    """
    done = pl.col("start_ns") + pl.col("wall_ns")
    loop = done
    if "phase" in steps.columns:  # a graph capture records work, it is not a loop step
        loop = pl.when(pl.col("phase") == "capture").then(None).otherwise(done)
    before = loop.cum_max().forward_fill().shift(1).over("rank", order_by="start_ns")
    # work queued before the recording began runs ahead of every step's own
    # (:func:`unrecorded_queue_end`): a step's own work waited behind it from its first
    # launch to the queue's end, and that wait is not the step's
    start = pl.col("start_ns")
    if {"queue_end_ns", "first_launch_ns"} <= set(steps.columns):
        wait = pl.col("queue_end_ns") - pl.max_horizontal("start_ns", "first_launch_ns")
        start = start + pl.when(pl.col("first_launch_ns").is_null()).then(0).otherwise(
            pl.max_horizontal(wait, pl.lit(0))).fill_null(0)
    since = pl.max_horizontal(start, before)
    period = pl.max_horizontal(done - since, pl.lit(0))
    if "phase" in steps.columns:
        period = pl.when(pl.col("phase") == "capture").then(pl.col("wall_ns")).otherwise(period)
    return steps.with_columns(period.cast(pl.Int64).alias("period_ns"))


def step_summary(steps: pl.DataFrame) -> pl.DataFrame:
    """P50/P95/P99, mean, min and max of ``wall_ns``, ``period_ns`` and ``gpu_busy_ns``
    over the steps of :func:`step_table`, plus the step count and, on the ``period_ns``
    row only, the outlier count (one row per metric). Outliers are flagged on the period:
    the other rows' ``outliers`` is null, not the period's count (on ``warmup-bottleneck``
    the GPU busy row said 2 outliers where the rule, applied to GPU busy, flags 1).

    Example:
        Periods 100, 100, 100, 100, 300 with one outlier: ``period_ns`` row outliers 1,
        ``wall_ns`` and ``gpu_busy_ns`` rows outliers null.
    """
    rows = []
    for c in ("wall_ns", "period_ns", "gpu_busy_ns"):
        # too few steps to tell (every flag null): no count, not 0
        out = (pl.when(pl.col("outlier").is_not_null().any())
               .then(pl.col("outlier").sum().cast(pl.Int64)) if c == "period_ns"
               else pl.lit(None, dtype=pl.Int64))
        rows.append(steps.select(
            pl.lit(c).alias("metric"), pl.len().cast(pl.Int64).alias("steps"),
            out.alias("outliers"),
            pl.col(c).mean().alias("mean"), *percentiles(c),
            pl.col(c).min().cast(pl.Float64).alias("min"),
            pl.col(c).max().cast(pl.Float64).alias("max")))
    return pl.concat(rows, how="vertical_relaxed")


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
