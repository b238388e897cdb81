"""One savings engine: what removing a cost would save, per rank, from the replay.

Every "could save" figure (``summary``'s savings section, the report's recommendations,
``whatif``) comes from :func:`savings`, which runs the what-if replay
(:func:`traceparse.analyses.replay.replay`, the engine behind ``whatif``) once per change and
measures, **per rank**, the window it removes::

    saving_ns(rank, change) = measured window(rank) - replayed window(rank)

where a rank's window is its first GPU start to its last GPU end (what ``whatif`` prints as
``measured_ns`` / ``predicted_ns`` in its ``window`` rows). It is reported next to the part
of the attribution the change removes (``bound_ns``, summed over the rank's devices):

* ``no_launch_overhead`` (CUDA/HIP graphs): the GPU's non-busy parts; the host
  issuing time of each step's region is removed (:mod:`traceparse.analyses.mechanisms`).
  Blocking calls and warm-up are not issuing and a graph does not remove them.
* ``overlap_comm``: ``communication_ns``, the exposed communication.
* ``host_sync``, ``pinned_memory``, ``input_pipeline``, ``fusion``: the replay with that
  fix's mechanism (:mod:`traceparse.analyses.mechanisms`), bounded by the parts in
  :data:`CHANGES`; ``warm_up``: the leading steps' excess over the steady state (no
  replay). ``note`` says what the mechanism assumed and where it was cut.

**Without the profiler** (torch.profiler traces; null otherwise): ``window_unprofiled_ns``
is the trace replayed with the profiler's own recording cost removed
(:func:`traceparse.analyses.replay.predicted` with ``profiler``: each recorded op costs the
per-event estimate of the step it began in,
:func:`traceparse.analyses.profiler_cost.event_costs`, the same costs ``predict --scale``
removes), and
``saving_unprofiled_ns`` that window minus the same change's replay with the cost removed
too (ops inside host time the change already removes are not counted twice): one engine,
two replays per change. A host change's profiler-free saving lies between 0 and its part
(``bound_ns``), and its window is no shorter than the GPU's busy time, which does not
depend on the profiler (:func:`unprofiled_capped`). ``warm_up``: the leading steps'
excess over the steady median with each step less the cost of the ops recorded in it, at
most the profiled excess, and
never below the steady steps' GPU busy time. It
states what the fix would save in a run without the profiler; removing the profiler is
never a fix.

``within_bound`` says whether the replay stays within the part; the figure quoted anywhere is
``saving_ns`` itself (the same number ``whatif`` prints), never a sum over ranks: a job is
only as fast as its slowest rank, so multi-rank figures are per rank. The headline
(``bounds_job``, :func:`best`) is the rank where the change saves most, unless the ranks
wait for one another in collectives (:func:`coupled_ranks`): then it is the rank whose
replayed window is the longest, the one that still bounds the job after the change
(``nsys-ai__mfu_2gpu_after``'s host-sync fix: rank 0 alone 299 -> 246 ms, rank 1 299 ->
259 ms, so the job saves at most 40.7 ms, not 53.3).

Example:
    One rank whose window is 100 us with 20 us of launch overhead, and whose replay
    without launch cost takes 85 us: ``saving_ns`` 15 us, ``bound_ns`` 20 us.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from traceparse.derived import cached, released
from traceparse.timeline import Timeline

if TYPE_CHECKING:
    from traceparse.analyses.replay_removed import Profiler

#: The GPU's non-busy parts: all a change to the host can give back.
_IDLE = ("launch_overhead_ns", "warmup_ns", "host_sync_ns", "idle_ns")
#: change -> the attribution parts that bound what it can remove (summed).
CHANGES = {
    "no_launch_overhead": _IDLE,
    "overlap_comm": ("communication_ns",),
    "host_sync": _IDLE,
    "pinned_memory": ("memory_ns", *_IDLE),
    "input_pipeline": ("idle_ns",),
    "fusion": ("compute_ns", *_IDLE),
    "warm_up": ("compute_ns", "communication_ns", "memory_ns", *_IDLE),
}


#: change -> the fix (``fixes`` id, ``whatif --fix ID``) whose replay it is: the summary
#: prints the fix, since ``whatif --no-launch-overhead`` is another replay (it removes
#: every launch's cost, not a CUDA graph's issuing time) and gives another number.
FIX_OF = {"no_launch_overhead": "cuda-graphs", "overlap_comm": "overlap-comm",
          "host_sync": "host-sync", "pinned_memory": "pinned-memory",
          "input_pipeline": "input-pipeline", "fusion": "fusion", "warm_up": "warm-up"}

#: Changes that only move host work (their saving is capped at the GPU's non-busy time).
HOST_CHANGES = ("no_launch_overhead", "host_sync", "input_pipeline")


def windows(rep: pl.DataFrame) -> pl.DataFrame:
    """Per rank of a replay: ``measured_ns`` and ``predicted_ns`` windows (first start to
    last end), as in ``whatif``'s ``window`` rows."""
    return rep.group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("measured_ns"),
        (pl.col("pred_end_ns").max() - pl.col("pred_start_ns").min()).alias("predicted_ns"))


def savings(tl: Timeline, *, breakdown: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per (change, rank): ``measured_ns``, ``predicted_ns``, ``saving_ns``, ``bound_ns``
    (the attribution part the change removes, summed over the rank's devices) and
    ``within_bound``. Empty (with those columns) without GPU activity.

    Args:
        tl: the timeline.
        breakdown: :func:`traceparse.analyses.attribution.breakdown` of ``tl`` if the caller
            has it.
    """
    if breakdown is None:
        # one computation per timeline: the summary, launches and report sections share it
        # the replays' shared preparation is released with the result cached: nothing
        # later in a command needs it, and it is the largest value a replay keeps
        return cached(tl, "savings", ("gpu", "api", "ranges"),
                      lambda: released(tl, ("replay_prep",), lambda: _savings(tl, None)))
    return _savings(tl, breakdown)


def _savings(tl: Timeline, breakdown: pl.DataFrame | None) -> pl.DataFrame:
    from traceparse.analyses.attribution import breakdown as attribution
    from traceparse.analyses.mechanisms import replay_args
    from traceparse.analyses.replay import predicted

    if not tl.gpu.select((pl.col("kind") != "sync").any()).item():
        return pl.DataFrame(schema=SCHEMA)
    parts = rank_parts(attribution(tl) if breakdown is None else breakdown)
    prof = profiler(tl)
    # the trace itself replayed without the profiler's cost: the window a user running
    # without the profiler would see (null for traces not recorded by torch.profiler)
    base = (windows(predicted(tl, profiler=prof)).select(
        "rank", pl.col("predicted_ns").alias("window_unprofiled_ns")) if prof else None)
    out = []
    for change in CHANGES:
        if change == "warm_up":
            w, notes = _warm_up(tl)
            if w is None:
                continue
        else:
            args, notes = replay_args(tl, change)
            if args is None:
                continue
            # the replay's predictions alone (windows read no other column); every change
            # shares the replay's preparation
            w = windows(predicted(tl, **args))
            w = w.join(windows(predicted(tl, **args, profiler=prof)).select(
                "rank", pl.col("predicted_ns").alias("_pu")), on="rank", how="left") \
                if prof else w.with_columns(pl.lit(None, pl.Int64).alias("_pu"))
        w = (w.join(base, on="rank", how="left") if base is not None
             else w.with_columns(pl.lit(None, pl.Int64).alias("window_unprofiled_ns")))
        if change == "warm_up":
            # the excess of the steps without the profiler's cost: never more than with it
            # (the same one-off work, less the recording)
            ex_u = pl.min_horizontal("_exu", pl.col("measured_ns") - pl.col("predicted_ns"))
            w = w.with_columns(pl.max_horizontal(pl.col("window_unprofiled_ns") - ex_u,
                                                 "_busy").alias("_pu"))
            w = w.drop("_exu", "_busy")
        out.append(change_rows(w, parts, change, notes))
    return finish_rows(out, bool(out) and coupled_ranks(tl))


#: The columns and dtypes of :func:`savings`, in order.
SCHEMA = {"change": pl.String, "fix": pl.String, "rank": pl.Int32, "measured_ns": pl.Int64,
          "predicted_ns": pl.Int64, "saving_ns": pl.Int64, "bound_ns": pl.Int64,
          "within_bound": pl.Boolean, "note": pl.String,
          "window_unprofiled_ns": pl.Int64, "saving_unprofiled_ns": pl.Int64,
          "bounds_job": pl.Boolean}


def rank_parts(breakdown: pl.DataFrame) -> pl.DataFrame:
    """Per rank, the attribution's parts summed over its devices (``breakdown``:
    :func:`traceparse.analyses.attribution.breakdown`'s rows)."""
    from traceparse.analyses.attribution import PARTS

    return breakdown.group_by("rank").agg(*(pl.col(p).sum() for p in PARTS))


def change_rows(w: pl.DataFrame, parts: pl.DataFrame, change: str, notes: list[str]
                ) -> pl.DataFrame:
    """One change's rows before :func:`finish_rows`: its per-rank windows ``w``
    (``rank, measured_ns, predicted_ns, _pu, window_unprofiled_ns``) with its part
    (``bound_ns``, from :func:`rank_parts`' ``parts``), the non-busy parts (``_idle``),
    the saving and its notes."""
    return (w.join(parts.select("rank", pl.sum_horizontal(*CHANGES[change]).alias("bound_ns"),
                                pl.sum_horizontal(*_IDLE).alias("_idle")),
                   on="rank", how="left")
            .with_columns(pl.lit(change).alias("change"),
                          (pl.col("measured_ns") - pl.col("predicted_ns")).alias("saving_ns"),
                          pl.lit("; ".join(notes) or None, pl.String).alias("note")))


def finish_rows(out: list[pl.DataFrame], coupled: bool) -> pl.DataFrame:
    """:func:`savings`' frame of the changes' rows ``out`` (:func:`change_rows`): a host
    change capped at the GPU's non-busy time, the savings, ``within_bound``, ``fix`` and
    ``bounds_job`` (``coupled``: :func:`coupled_ranks`), in :data:`SCHEMA` order."""
    if not out:
        return pl.DataFrame(schema=SCHEMA)
    res = pl.concat(out, how="diagonal_relaxed").with_columns(pl.col("bound_ns").fill_null(0))
    # a change to the host gives back at most the time the GPU was not busy: where the
    # replay reads a cross-stream wait as host latency it would claim more, so it is capped
    host = pl.col("change").is_in(list(HOST_CHANGES))
    # (the GPU's busy time, measured - bound, is the same with or without the profiler)
    res = res.with_columns(
        pl.when(host).then(host_capped("predicted_ns"))
        .otherwise(pl.col("predicted_ns")).alias("predicted_ns"),
        pl.when(host).then(unprofiled_capped()).otherwise(pl.col("_pu")).alias("_pu"))
    res = res.with_columns(
        (pl.col("measured_ns") - pl.col("predicted_ns")).alias("saving_ns"),
        (pl.col("window_unprofiled_ns") - pl.col("_pu")).alias("saving_unprofiled_ns"),
        (pl.col("measured_ns") - pl.col("predicted_ns") <= pl.col("bound_ns").fill_null(0))
        .alias("within_bound"),
        pl.col("change").replace_strict(FIX_OF, return_dtype=pl.String).alias("fix"))
    res = _bounds_job(res, coupled)
    return res.select(list(SCHEMA)).cast(SCHEMA).sort("change", "rank")  # type: ignore[arg-type]


def coupled_ranks(tl: Timeline) -> bool:
    """Whether ranks of ``tl`` wait for one another: two or more ranks ran kernels of one
    collective call (:func:`traceparse.analyses.comm.matched_calls`)."""
    if tl.gpu.select(pl.col("rank").n_unique()).item() < 2:
        return False
    from traceparse.analyses.comm import collectives, matched_calls

    c = collectives(tl)
    if c.height == 0:
        return False
    m = matched_calls(c)
    return bool(m.group_by("collective", "coll_pg", "seq").agg(pl.col("rank").n_unique())
                .select((pl.col("rank") >= 2).any()).item())


def _bounds_job(res: pl.DataFrame, coupled: bool) -> pl.DataFrame:
    """``res`` with ``bounds_job``: per change, true on the one row every headline quotes
    (:func:`best`). With :func:`coupled_ranks`, the rank whose replayed window is the
    longest (ties: the longer measured window, then the lowest rank): a job whose ranks
    wait for one another in collectives is only as fast as its slowest rank after the
    change, so with equal windows it saves at most that rank's figure. Otherwise the rank
    where the change saves most (ties: the lowest rank)."""
    keys = ["predicted_ns", "measured_ns"] if coupled else ["saving_ns"]
    return (res.sort([*keys, "rank"], descending=[*([True] * len(keys)), False])
            .with_columns((pl.int_range(pl.len()).over("change") == 0).alias("bounds_job")))


def host_capped(predicted: str) -> pl.Expr:
    """A host change's replayed window ``predicted`` no shorter than the GPU's busy time
    (``measured_ns - bound_ns``, the bound being the rank's non-busy parts): removing host
    time gives back at most the time the GPU was not busy."""
    return pl.max_horizontal(predicted, pl.col("measured_ns") - pl.col("bound_ns"))


def unprofiled_capped() -> pl.Expr:
    """A host change's profiler-free window ``_pu`` against the profiler-free window of the
    trace itself (``window_unprofiled_ns``): no shorter than the GPU's busy time (``measured_ns``
    less all its non-busy parts, ``_idle``) nor than that window less the part the change
    removes (``bound_ns``), and no longer than that window: the profiler's removal does not
    add to the part, and moving host work earlier never delays the GPU. (The profiled
    window's floor, ``measured_ns - bound_ns``, held a profiler-free window to the profiled
    launch overhead the input-pipeline fix does not remove: -1.44 ms "saved" on a DLRM
    rank.)"""
    pu = pl.max_horizontal("_pu", pl.col("measured_ns") - pl.col("_idle"),
                           pl.col("window_unprofiled_ns") - pl.col("bound_ns"))
    return pl.min_horizontal(pu, "window_unprofiled_ns")


def profiler(tl: Timeline) -> Profiler | None:
    """The profiler's recording cost as the replay removes it: recorded-op starts per
    process and each op's cost, the per-event estimate of the step it began in
    (:func:`traceparse.analyses.profiler_cost.event_costs` over the step windows, the
    costs ``predict`` removes; the pooled estimate without steps); None for a trace not
    recorded by torch.profiler."""
    from traceparse.analyses import profiler_cost
    from traceparse.analyses.steps import step_windows

    ev = profiler_cost.advance_fn(tl)
    if not ev:
        return None
    steps = step_windows(tl)
    return ev, profiler_cost.event_costs(tl, steps if steps.height else None)


#: Leading steps slower than median + this many MADs are warm-up candidates.
WARMUP_SCREEN_K = 3.0


def _warm_up(tl: Timeline) -> tuple[pl.DataFrame | None, list[str]]:
    """Warm-up's cost: the leading outlier steps' wall time above the steady-state median
    step (:func:`traceparse.analyses.steps.step_table`, whose outliers are flagged on the
    period), per rank, as a window change."""
    from traceparse.analyses import intervals
    from traceparse.analyses.steps import step_table

    # the leading candidates are screened at median + 3 MAD, looser than the steps'
    # outlier rule (OUTLIER_Z); they count only when they hold one-off warm-up evidence
    # (below), never by their wall alone
    st = step_table(tl, attribution=False, mad_k=WARMUP_SCREEN_K, min_steps=3)
    if st.height < 3 or "outlier" not in st.columns:
        return None, []
    prof = profiler(tl)
    rows = []
    sp = _spans(tl)
    spans = {int(r): (int(a), int(b)) for r, a, b in sp.iter_rows()}
    for (rank,), g in st.sort("start_ns").group_by(["rank"] if "rank" in st.columns else
                                                   [pl.lit(0).alias("rank")]):
        flags = g["outlier"].to_list()
        lead = 0
        while lead < len(flags) and flags[lead]:
            lead += 1
        if not 0 < lead < len(flags):
            continue
        # warm-up is one-off: warm-up-like time that recurs in every steady step (a
        # compiled region's wrapper) is steady state, not warm-up
        each = [_warm_evidence(tl, g.slice(i, 1)) for i in range(len(flags))]
        typical = float(np.median(each[lead:]))
        warm = int(sum(max(0.0, x - typical) for x in each[:lead]))
        if warm <= 0:
            continue
        # host windows, not periods: a first step's period also holds the fill of a
        # pipelined loop (pageable_copy-twin: its copy overlaps step 1's compute, period
        # 3.91 ms inside the GPU window against 2.68 ms steady, on a GPU busy throughout),
        # which no warm-up removes (docs/analyses.md, the warm-up fix row)
        steady = float(g["wall_ns"][lead:].median() or 0)  # type: ignore[arg-type]
        # the window is the GPU's: only the part of a leading step inside it can shrink it
        lo, hi = spans.get(int(rank), (0, 0))
        walls = (g.head(lead).select(pl.min_horizontal("end_ns", pl.lit(hi))
                                     - pl.max_horizontal("start_ns", pl.lit(lo)))
                 .to_series().to_list())
        excess = int(sum(max(0.0, w - steady) for w in walls))
        if excess > 0:
            # without the profiler: each step less the profiler's cost of the events
            # recorded in it (:func:`profiler`: the costs the replays remove)
            cost = _recorded_cost(prof, int(rank), g["start_ns"].to_numpy(),
                                  g["end_ns"].to_numpy(), lo, hi)
            su = float(np.median(g["wall_ns"].to_numpy()[lead:] - cost[1][lead:]))
            ex_u = int(sum(max(0.0, w - c - su) for w, c in zip(walls, cost[0][:lead],
                                                                    strict=False)))
            # the steady steps' GPU work still runs: the window never falls below it
            first = int(g["start_ns"][lead])
            busy = intervals.total(intervals.union(
                tl.gpu.select("rank", "kind", "start_ns", "end_ns").filter(
                    (pl.col("rank") == rank) & (pl.col("kind") != "sync")
                    & (pl.col("start_ns") >= first))))
            rows.append((int(rank), lead, excess, ex_u, busy))
    if not rows:
        return None, []
    w = _measured(sp)
    ex = pl.DataFrame({"rank": [r[0] for r in rows], "_ex": [r[2] for r in rows],
                       "_exu": [r[3] for r in rows], "_busy": [r[4] for r in rows]},
                      schema={"rank": w.schema["rank"], "_ex": pl.Int64, "_exu": pl.Int64,
                              "_busy": pl.Int64})
    w = w.join(ex, on="rank", how="inner").with_columns(
        (pl.col("measured_ns") - pl.col("_ex")).alias("predicted_ns")).drop("_ex")
    lead = max(r[1] for r in rows)
    return w, [f"the first {lead} step(s) above the steady-state median step"]


def _recorded_cost(prof: Profiler | None, rank: int, s: np.ndarray, e: np.ndarray,
                   lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The profiler's cost of the ops recorded in each step ``[s, e)`` of ``rank``: inside
    the GPU window ``[lo, hi)`` and in the whole step (zeros without a profiler)."""
    clip = np.zeros(s.size), np.zeros(s.size)
    if prof is None:
        return clip
    ev, costs = prof
    for key, t in ev.items():
        if key[0] != rank:
            continue
        cum = np.concatenate([[0.0], np.cumsum(costs[key])])
        a, b = np.maximum(s, lo), np.minimum(e, hi)
        clip[0][:] += np.clip(cum[np.searchsorted(t, b)] - cum[np.searchsorted(t, a)], 0,
                              None)
        clip[1][:] += cum[np.searchsorted(t, e)] - cum[np.searchsorted(t, s)]
    return clip


def _warm_evidence(tl: Timeline, steps: pl.DataFrame) -> int:
    """Warm-up time (compile / autotune ranges, module loads, lazy-loading first launches:
    :func:`traceparse.analyses.attribution.warmup_intervals`, merged) inside ``steps``."""
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import busy_activities, warmup_intervals

    w = warmup_intervals(tl, busy_activities(tl), ["rank", "device_id"])
    if w.height == 0:
        return 0
    lo, hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())  # type: ignore[arg-type]
    clip = w.select(pl.max_horizontal("start_ns", pl.lit(lo)).alias("start_ns"),
                    pl.min_horizontal("end_ns", pl.lit(hi)).alias("end_ns"))
    return intervals.total(intervals.union(clip))


def windows_of(tl: Timeline) -> pl.DataFrame:
    """Per rank: the measured window of the non-sync GPU activity (``measured_ns``)."""
    return _measured(_spans(tl))


def _spans(tl: Timeline) -> pl.DataFrame:
    """Per rank, in rank order (a group_by's order varies from run to run, and whatif's
    rows with it): ``rank, start_ns, end_ns``, the first start and last end of its non-sync
    GPU activity."""
    # the three columns read, selected before the filter copies them; kind as a code
    return (tl.gpu.select("rank", "kind", "start_ns", "end_ns")
            .filter(pl.col("kind") != "sync").group_by("rank")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("rank"))


def _measured(spans: pl.DataFrame) -> pl.DataFrame:
    """``rank, measured_ns`` of :func:`_spans`' rows."""
    return spans.select("rank", (pl.col("end_ns") - pl.col("start_ns")).alias("measured_ns"))


def best(frame: pl.DataFrame, change: str) -> dict[str, Any] | None:
    """The row of :func:`savings` every headline quotes for ``change`` (``bounds_job``: the
    largest saving, or with ranks that wait in shared collectives the rank that bounds the
    job after the change), as a dict; None when there is none."""
    f = frame.filter((pl.col("change") == change) & pl.col("bounds_job"))
    return f.row(0, named=True) if f.height else None


def unprofiled_at(tl: Timeline, wanted: list[tuple[str, int]], scale: float
                  ) -> dict[tuple[str, int], tuple[int, int]]:
    """``(saving_ns, window_ns)`` of each ``(change, rank)`` of ``wanted`` without the
    profiler when each recorded op costs ``scale`` times the estimate :func:`savings`
    removes (the per-op estimate's band,
    :func:`traceparse.analyses.profiler_cost.profiler_cost`), the saving no less than 0;
    left out for a trace not recorded by torch.profiler, a change the engine does not
    replay here, or a rank without GPU work. Says how a profiler-free figure moves with
    the estimate; the trace's own profiler-free window is replayed once for all."""
    from traceparse.analyses.mechanisms import replay_args
    from traceparse.analyses.replay import predicted

    prof = profiler(tl)
    if prof is None or not wanted:
        return {}
    ev, costs = prof
    scaled = (ev, {k: v * scale for k, v in costs.items()})
    base = dict(windows(predicted(tl, profiler=scaled)).select("rank", "predicted_ns")
                .iter_rows())
    out = {}
    for change, rank in wanted:
        args, _ = replay_args(tl, change) if change != "warm_up" else (None, [])
        if args is None or rank not in base:
            continue
        after = dict(windows(predicted(tl, **args, profiler=scaled))
                     .select("rank", "predicted_ns").iter_rows())
        if rank in after:
            w = int(base[rank])
            out[(change, rank)] = (max(w - int(after[rank]), 0), w)
    return out
