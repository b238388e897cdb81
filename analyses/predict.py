"""Predict a trace's time from a calibration, and project what-ifs, with one replay engine.

* :func:`model_durations` - one predicted duration per GPU activity from a calibration
  (:mod:`traceparse.analyses.calibrate`): memcpy/memset by their alpha-beta fit on bytes;
  collectives
  by the alpha-beta fit of (collective, group size) on message bytes; other kernels by the
  P50 of their (name, launch grid) in ``kernel_table``, else of their name (its most
  launched grid), else of their (class, dtype); anything the model
  cannot price keeps its measured duration (``source = measured``).
* :func:`predict` - replay (:func:`traceparse.analyses.replay.replay`) with those durations; the
  window, per-step and per-category times, measured vs predicted.
* :func:`holdout` - calibrate on the first steps, predict every step; errors for the
  calibration steps and the held-out steps separately.
* :func:`whatif` - projected window/step time with no launch overhead, perfectly overlapped
  communication, or kernels matching a regex sped up by a factor.

Times: **window** = last replayed end - first replayed start of the rank's GPU work;
**step** = the same span over the activities launched inside the step's range (by launch
call, or start when unlaunched); **category** = summed activity time.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses import fit
from traceparse.analyses.calibrate import (
    UNKNOWN,
    calibrate,
    device_models,
    grid_expr,
    host_memory_expr,
)
from traceparse.analyses.comm import DTYPE_BYTES, collective_expr
from traceparse.analyses.kclass import class_expr, dtype_expr, select
from traceparse.analyses.replay import replay
from traceparse.analyses.steps import step_windows
from traceparse.errors import TraceError
from traceparse.timeline import Timeline


def gpu_mismatch(tl: Timeline, cal: dict[str, Any]) -> list[str]:
    """The trace's device models the calibration has no entry for, each as ``"H100 (the
    calibration has A100)"``; empty when every model is calibrated."""
    have = [d["device_model"] for d in cal["devices"]]
    models = sorted(set(device_models(tl)["device_model"].to_list()))
    return [f"{m} (the calibration has {', '.join(have) or 'no device'})"
            for m in models if m not in have]


def _device_entry(cal: dict[str, Any], model: str) -> dict[str, Any]:
    for d in cal["devices"]:
        if d["device_model"] == model:
            return dict(d)
    if not cal["devices"]:
        raise TraceError(None, "calibration has no device entries")
    return dict(cal["devices"][0])  # only with allow_other_gpu (see predict)


def _lookup(frame: pl.DataFrame, keys: list[str], table: list[dict[str, Any]],
            value: str) -> pl.Series:
    if not table:
        return pl.Series(value, [None] * frame.height, pl.Float64)
    t = pl.DataFrame(table).select(*keys, pl.col(value).cast(pl.Float64))
    t = t.unique(subset=keys, keep="first")
    return frame.select(*keys).join(t, on=keys, how="left", maintain_order="left")[value]


def _per_name(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kernel-table rows merged per name (rows keyed by grid): the P50 of the grid with the
    most launches stands for the name."""
    best: dict[str, dict[str, Any]] = {}
    for r in table:
        cur = best.get(r["name"])
        if cur is None or r["count"] > cur["count"]:
            best[r["name"]] = r
    return list(best.values())


def model_durations(tl: Timeline, cal: dict[str, Any]) -> pl.DataFrame:
    """Predicted duration of every ``tl.gpu`` row (same order): ``pred_dur_ns, source``.

    Sources: ``memcpy fit``, ``memset fit``, ``collective fit``, ``kernel table``,
    ``class p50``, ``measured`` (nothing in the calibration prices it; sync rows too).
    """
    models = device_models(tl)
    g = tl.gpu.with_row_index("_i").join(
        models.select("rank", "device_id", "device_model"), on=["rank", "device_id"],
        how="left", maintain_order="left").with_columns(
        pl.col("device_model").fill_null(UNKNOWN), class_expr(), dtype_expr(),
        host_memory_expr(), pl.col("copy_kind").cast(pl.String).fill_null(UNKNOWN)
        .alias("direction"), pl.col("name").cast(pl.String).alias("_name"))
    size = pl.max_horizontal("coll_in_nelems", "coll_out_nelems")
    elem = (pl.col("coll_dtype").cast(pl.String).str.to_lowercase()
            .replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64))
    g = g.with_columns(collective_expr().alias("collective"),
                       (size * elem).cast(pl.Float64).alias("_cbytes"),
                       pl.col("coll_group_size").fill_null(0).alias("_gs"))
    parts = []
    for (model,), part in g.group_by("device_model"):
        d = _device_entry(cal, str(model))
        pred = np.full(part.height, np.nan)
        src = np.array(["measured"] * part.height, dtype=object)
        kind = part["kind"].cast(pl.String).to_numpy()
        nbytes = part["bytes"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        # copies
        for c in d.get("memcpy") or []:
            m = ((kind == "memcpy")
                 & (part["direction"] == c["direction"]).fill_null(False).to_numpy()
                 & (part["host_memory"] == c["host_memory"]).fill_null(False).to_numpy()
                 & np.isfinite(nbytes))
            if m.any() and c["fit"]["alpha_ns"] is not None:
                pred[m] = fit.predict_alpha_beta(c["fit"], nbytes[m])
                src[m] = "memcpy fit"
        ms = d.get("memset")
        m = (kind == "memset") & np.isfinite(nbytes)
        if ms and m.any() and ms["fit"]["alpha_ns"] is not None:
            pred[m] = fit.predict_alpha_beta(ms["fit"], nbytes[m])
            src[m] = "memset fit"
        # collectives with a message size
        cb = part["_cbytes"].fill_null(np.nan).to_numpy()
        for c in d.get("collectives") or []:
            f = c.get("fit")
            if not f or f["model"] != "alpha_beta":
                continue
            m = ((part["collective"] == c["collective"]).fill_null(False).to_numpy()
                 & (part["_gs"] == (c["group_size"] or 0)).fill_null(False).to_numpy()
                 & np.isfinite(cb)
                 & (kind == "kernel"))
            if m.any():
                pred[m] = fit.predict_alpha_beta(f, cb[m])
                src[m] = "collective fit"
        # kernels: name table, then class P50
        todo = (kind == "kernel") & ~np.isfinite(pred)
        table = d.get("kernel_table") or []
        keyed = part.select(pl.col("_name").alias("name"), grid_expr().alias("grid"))
        if table and all("grid" in r for r in table):  # same name and grid first
            by_grid = _lookup(keyed, ["name", "grid"], table, "p50_ns").to_numpy()
            m = todo & np.isfinite(by_grid.astype(float))
            pred[m], src[m] = by_grid[m], "kernel table"
            todo = todo & ~m
        # then the name alone: the P50 of its most launched grid
        by_name = _lookup(keyed, ["name"], _per_name(table), "p50_ns").to_numpy()
        m = todo & np.isfinite(by_name.astype(float))
        pred[m], src[m] = by_name[m], "kernel table"
        cls = [{"kclass": k["class"], "kdtype": k["dtype"], "p50": k["duration_ns"]["p50"]}
               for k in d.get("kernels") or []]
        by_cls = _lookup(part, ["kclass", "kdtype"], cls, "p50").to_numpy()
        m = (kind == "kernel") & ~np.isfinite(pred) & np.isfinite(by_cls.astype(float))
        pred[m], src[m] = by_cls[m], "class p50"
        meas = part["dur_ns"].to_numpy().astype(float)
        pred = np.where(np.isfinite(pred), np.maximum(np.rint(pred), 0), meas)
        parts.append(pl.DataFrame({"_i": part["_i"], "pred_dur_ns": pred.astype(np.int64),
                                   "source": src.astype(str)}))
    if not parts:
        return pl.DataFrame(schema={"pred_dur_ns": pl.Int64, "source": pl.String})
    return pl.concat(parts).sort("_i").drop("_i")


def _assign_steps(rep: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    t = pl.coalesce("api_start_ns", "start_ns").alias("_t")
    r = rep.with_columns(t).sort("_t")
    w = steps.select("rank", pl.col("start_ns").alias("_t"), pl.col("end_ns").alias("_se"),
                     "step").sort("_t")
    r = r.join_asof(w, on="_t", by="rank", strategy="backward", check_sortedness=False)
    return r.with_columns(pl.when(pl.col("_t") < pl.col("_se")).then(pl.col("step"))
                          .alias("step")).drop("_se", "_t")


def summarize(rep: pl.DataFrame, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Measured vs predicted times of a replay: rows ``scope`` (window, step, category),
    ``rank``, ``name``, ``measured_ns``, ``predicted_ns``, ``error_pct``.

    Example:
        A replay of one rank whose activities span 100..300 measured and 100..250
        predicted gives a window row with measured 200, predicted 150, error -25 %.
    """
    return summary_from_parts(summary_parts(rep, steps))


def summary_parts(rep: pl.DataFrame, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """What :func:`summarize` reads of ``rep``, per ``scope, rank, name``: ``activities``
    and the extremes and sums it takes differences of (``_s``, ``_e``, ``_ps``, ``_pe``:
    first start, last end, first and last replayed ones; ``_d``, ``_pd``: summed
    durations). Parts of pieces of a replay merge by :func:`merge_summary_parts`."""
    agg = [pl.len().cast(pl.Int64).alias("activities"),
           pl.col("start_ns").min().cast(pl.Int64).alias("_s"),
           pl.col("end_ns").max().cast(pl.Int64).alias("_e"),
           pl.col("pred_start_ns").min().cast(pl.Int64).alias("_ps"),
           pl.col("pred_end_ns").max().cast(pl.Int64).alias("_pe"),
           pl.col("dur_ns").sum().cast(pl.Int64).alias("_d"),
           pl.col("pred_dur_ns").sum().cast(pl.Int64).alias("_pd")]
    win = rep.group_by("rank").agg(*agg).with_columns(
        pl.lit("window").alias("scope"), pl.lit("all").alias("name"))
    parts = [win]
    if steps is not None and steps.height:
        s = _assign_steps(rep, steps).filter(pl.col("step").is_not_null())
        parts.append(s.group_by("rank", "step").agg(*agg).with_columns(
            pl.lit("step").alias("scope")).rename({"step": "name"}))
    parts.append(rep.group_by("rank", pl.col("category").cast(pl.String).alias("name"))
                 .agg(*agg).with_columns(pl.lit("category").alias("scope")))
    cols = ["scope", "rank", "name", "activities", "_s", "_e", "_ps", "_pe", "_d", "_pd"]
    return pl.concat([p.select(cols) for p in parts])


def merge_summary_parts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """:func:`summary_parts` of several pieces of one replay as one (counts and sums
    added, extremes taken)."""
    return pl.concat(parts).group_by("scope", "rank", "name").agg(
        pl.col("activities").sum(), pl.col("_s").min(), pl.col("_e").max(),
        pl.col("_ps").min(), pl.col("_pe").max(), pl.col("_d").sum(), pl.col("_pd").sum())


def summary_from_parts(parts: pl.DataFrame) -> pl.DataFrame:
    """:func:`summarize`'s rows from :func:`summary_parts`."""
    cat = pl.col("scope") == "category"
    out = parts.select(
        "scope", "rank", "name", "activities",
        pl.when(cat).then(pl.col("_d")).otherwise(pl.col("_e") - pl.col("_s"))
        .alias("measured_ns"),
        pl.when(cat).then(pl.col("_pd")).otherwise(pl.col("_pe") - pl.col("_ps"))
        .alias("predicted_ns"))
    out = out.with_columns(error_pct=pl.when(pl.col("measured_ns") > 0).then(
        (pl.col("predicted_ns") - pl.col("measured_ns")) * 100.0 / pl.col("measured_ns")))
    order = {"window": 0, "step": 1, "category": 2}
    return out.with_columns(pl.col("scope").replace_strict(order).alias("_o")).sort(
        "_o", "rank", "name").drop("_o")


def predict(tl: Timeline, cal: dict[str, Any] | None, *,
            step_regex: str | None = None, allow_other_gpu: bool = False) -> pl.DataFrame:
    """Replay ``tl`` with durations from ``cal`` (None: measured durations, which must
    reproduce the trace exactly) and :func:`summarize` it: the window error per rank next
    to the error of each category (compute, communication, memory), so a small window
    error cannot hide large compensating ones.

    Raises:
        TraceError: the trace ran on a GPU the calibration has no entry for (a model
            measured on one GPU says little about another), unless ``allow_other_gpu``;
            then the calibration's first device prices it and the CLI warns.
    """
    if cal is not None and not allow_other_gpu:
        other = gpu_mismatch(tl, cal)
        if other:
            raise TraceError(None, "the calibration was not measured on this trace's GPU: "
                                   + "; ".join(other)
                                   + " (calibrate on this GPU, or pass --allow-other-gpu)")
    durations = None if cal is None else model_durations(tl, cal)["pred_dur_ns"]
    rep = replay(tl, durations=durations)
    return summarize(rep, step_windows(tl, step_regex=step_regex))


def holdout(tl: Timeline, *, train_steps: int | None = None,
            step_regex: str | None = None) -> pl.DataFrame:
    """Calibrate on the first ``train_steps`` steps (default: half, at least one) and
    predict all steps; the ``split`` column says ``calibration`` or ``held-out``.

    Raises:
        TraceError: the trace has fewer than two steps.
    """
    steps = step_windows(tl, step_regex=step_regex)
    order = (steps.group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
             .sort("start_ns"))
    if order.height < 2:
        raise TraceError(None, "held-out prediction needs at least two steps "
                               "(profiler_step ranges or --steps REGEX)")
    n = train_steps if train_steps is not None else max(1, order.height // 2)
    n = min(max(n, 1), order.height - 1)
    train = order.head(n)
    window = (int(train["start_ns"].min()), int(train["end_ns"].max()))  # type: ignore[arg-type]
    cal = calibrate(tl, window=window)
    rep = replay(tl, durations=model_durations(tl, cal)["pred_dur_ns"])
    out = summarize(rep, steps).filter(pl.col("scope") == "step")
    names = set(train["step"].to_list())
    return out.with_columns(pl.when(pl.col("name").is_in(list(names)))
                            .then(pl.lit("calibration")).otherwise(pl.lit("held-out"))
                            .alias("split"))


def parse_speedup(spec: str) -> tuple[str, float]:
    """``"REGEX=FACTOR"`` -> (regex, factor); FACTOR 2 halves matching durations."""
    regex, sep, factor = spec.rpartition("=")
    try:
        f = float(factor)
        re.compile(regex)
    except (ValueError, re.error):
        f = 0.0
    if not sep or not regex or f <= 0:
        raise TraceError(None, f"--speedup needs REGEX=FACTOR with FACTOR > 0, got {spec!r}")
    return regex, f


def whatif(tl: Timeline, *, no_launch_overhead: bool = False, overlap_comm: bool = False,
           speedups: list[tuple[str, float]] | None = None,
           step_regex: str | None = None, fix: str | None = None) -> pl.DataFrame:
    """Projected times under the chosen changes (together), vs measured.

    Args:
        tl: the timeline.
        no_launch_overhead: launch calls and launch latency cost nothing.
        overlap_comm: communication never delays other work.
        speedups: ``(regex, factor)`` pairs: activities whose name matches ``regex`` (or
            whose kernel class is ``regex``, :func:`traceparse.analyses.kclass.select`) take
            ``duration / factor`` (applied in order, compounding).
        step_regex: step ranges when the trace has no ``ProfilerStep`` ranges.

    Returns:
        :func:`summarize` columns, ``predicted_ns`` being the projection.
    """
    args: dict[str, Any] = {}
    if fix is not None:
        from traceparse.analyses.mechanisms import replay_args
        from traceparse.analyses.savings import savings

        change = FIXES[fix]
        if change == "warm_up":  # not a replay: the first steps' excess (savings engine)
            return _warm_window(tl, savings(tl))
        got, _notes = replay_args(tl, change)
        args = got or {}
    dur = (args.pop("durations") if "durations" in args else tl.gpu["dur_ns"]).cast(pl.Float64)
    for regex, factor in speedups or []:
        hit = select(tl.gpu, regex)
        dur = pl.select(pl.when(hit).then(dur / factor).otherwise(dur)).to_series()
    changed = bool(speedups) or fix is not None
    durations = dur.round(0).cast(pl.Int64) if changed else None
    if args.pop("no_launch_overhead", False):
        no_launch_overhead = True
    if args.pop("overlap_comm", False):
        overlap_comm = True
    rep = replay(tl, durations=durations, no_launch_overhead=no_launch_overhead,
                 overlap_comm=overlap_comm, **args)
    out = summarize(rep, step_windows(tl, step_regex=step_regex))
    if fix is not None and not speedups:
        # the window rows are the savings engine's (the same number everywhere; a host
        # change is capped there at the GPU's non-busy time)
        from traceparse.analyses.savings import savings

        out = with_fix_windows(out, savings(tl).filter(pl.col("change") == FIXES[fix]))
    return out


def with_fix_windows(out: pl.DataFrame, sv: pl.DataFrame) -> pl.DataFrame:
    """``whatif --fix``'s rows: :func:`summarize`'s ``out`` whose window rows take the
    savings engine's prediction and profiler-free windows (``sv``: its rows of the fix's
    change, :func:`traceparse.analyses.savings.savings`), the error recomputed."""
    sv = sv.select("rank", pl.col("predicted_ns").alias("_p"), *_UNPROF)
    win = pl.col("scope") == "window"
    out = out.join(sv.cast({"rank": out.schema["rank"]}), on="rank", how="left",
                   maintain_order="left").with_columns(
        pl.when(win & pl.col("_p").is_not_null())
        .then(pl.col("_p")).otherwise(pl.col("predicted_ns")).alias("predicted_ns"),
        *(pl.when(win).then(pl.col(c)).alias(c) for c in _UNPROF_COLS))
    return out.drop("_p").with_columns(error_pct=pl.when(pl.col("measured_ns") > 0).then(
        (pl.col("predicted_ns") - pl.col("measured_ns")) * 100.0 / pl.col("measured_ns")))


#: ``whatif --fix``'s window rows also give the savings engine's profiler-free replay
#: (torch.profiler traces; null otherwise): the window before and after the fix.
_UNPROF_COLS = ("unprofiled_before_ns", "unprofiled_after_ns")
_UNPROF = (pl.col("window_unprofiled_ns").alias("unprofiled_before_ns"),
           (pl.col("window_unprofiled_ns") - pl.col("saving_unprofiled_ns"))
           .alias("unprofiled_after_ns"))


#: ``whatif --fix`` names -> savings-engine changes (:mod:`traceparse.analyses.savings`).
FIXES = {"cuda-graphs": "no_launch_overhead", "fusion": "fusion",
         "pinned-memory": "pinned_memory", "host-sync": "host_sync",
         "input-pipeline": "input_pipeline", "warm-up": "warm_up",
         "overlap-comm": "overlap_comm"}


def _warm_window(tl: Timeline, sv: pl.DataFrame) -> pl.DataFrame:
    """``whatif --fix warm-up``: the window rows of the savings engine's ``warm_up``
    change (measured vs measured minus the first steps' excess)."""
    from traceparse.analyses.savings import windows_of

    w = sv.filter(pl.col("change") == "warm_up").select("rank", "measured_ns", "predicted_ns",
                                                         *_UNPROF)
    if w.height == 0:  # nothing to warm up: predicted = measured
        w = windows_of(tl).with_columns(pl.col("measured_ns").alias("predicted_ns"),
                                        *(pl.lit(None, pl.Int64).alias(c)
                                          for c in _UNPROF_COLS))
    n = tl.gpu.select("rank", "kind").filter(pl.col("kind") != "sync").group_by("rank").len()
    return (w.join(n, on="rank", how="left")
            .select(pl.lit("window").alias("scope"), "rank", pl.lit("all").alias("name"),
                    pl.col("len").cast(pl.Int64).alias("activities"),
                    pl.col("measured_ns").cast(pl.Int64), pl.col("predicted_ns").cast(pl.Int64),
                    *(pl.col(c).cast(pl.Int64) for c in _UNPROF_COLS))
            .with_columns(error_pct=(pl.col("predicted_ns") - pl.col("measured_ns")) * 100.0
                          / pl.col("measured_ns")))
