"""Predict the step time of the traced program at another batch size, without the
profiler (``traceparse predict TRACE --calibration CAL --scale batch=F``;
docs/calibration.md, "Predicting another batch").

* **GPU side** (:func:`scaled_durations`): each GPU activity's launching op (the innermost
  torch op around its launch call) gives its work from the recorded shapes at the traced
  batch and at ``F`` times it (:mod:`traceparse.analyses.scale_work`). A kernel of a
  batch-dependent op takes ``measured * (r_F + r_half) / (r + r_half)`` where ``r``,
  ``r_F`` are the op's roofline times and ``r_half`` the half-efficiency point of the
  calibration's curve for the op's class and precision (``source = shapes``), else of the
  curve fitted on every class (``source = curve``). Copies, sets and collectives launched
  by a batch-dependent op scale their bytes by the op's byte ratio through the
  calibration's alpha-beta fits (``curve``). Kernels of ops whose tensors do not carry the
  batch (optimizer, weight casts) and activities whose op recorded no shapes keep their
  measured time (``measured``; the latter are counted as ``measured_no_shapes``); so do
  activities of batch-dependent ops that no fit prices (``measured_unpriced``).
  Anchoring on the measured time makes ``F = 1`` reproduce every duration exactly; the
  curve only decides how the time grows.
* **Host side**: every host instant moves earlier by the profiler's recording cost before
  it (:mod:`traceparse.analyses.profiler_cost`); the rest of the host time is kept: it
  does not depend on the batch (dispatch and Python per op, and the op count does not
  change with the batch), but for the input pipeline, which prepares every sample of the
  batch: a launching thread's time in data-loading ranges grows ``F`` times
  (:mod:`traceparse.analyses.scale_host`).
* **Replay** (:mod:`traceparse.analyses.replay_host`): the trace's own order (host
  thread issuing, stream order, blocking syncs) with the new durations; the step time is
  the replayed step, median over steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses import fit, profiler_cost, replay_host, scale_host, scale_work
from traceparse.analyses.intervals import union
from traceparse.analyses.steps import step_windows
from traceparse.errors import TraceError
from traceparse.timeline import Timeline

#: Roofline times beyond the fitted range by more than this factor are extrapolations.
EXTRAPOLATION_MARGIN = 1.05
#: How a GPU activity's predicted time was obtained (``sources`` of the result, in order):
#: scaled (``shapes``, ``curve``) or kept at its measured time because the op's tensors do
#: not carry the batch (``measured``), because its op recorded no shapes
#: (``measured_no_shapes``), or because its op recorded shapes that carry the batch but no
#: fit prices it (``measured_unpriced``: a copy or set whose fit is constant or missing, a
#: kernel without a roofline time or curve).
SOURCES = ("shapes", "curve", "measured", "measured_no_shapes", "measured_unpriced")
#: The sources that keep the measured time.
KEPT = ("measured", "measured_no_shapes", "measured_unpriced")


def parse_scale(spec: str) -> float:
    """``"batch=F"`` -> F (> 0)."""
    key, sep, val = spec.partition("=")
    try:
        f = float(val)
    except ValueError:
        f = 0.0
    if key.strip() != "batch" or not sep or not np.isfinite(f) or f <= 0:
        raise TraceError(None, f"--scale needs batch=F with F > 0, got {spec!r}")
    return f


def _curve(curves: list[dict[str, Any]], cls: str, prec: str) -> tuple[dict[str, Any], str]:
    by = {(c["class"], c["precision"]): c for c in curves}
    for key, src in (((cls, prec), "shapes"), ((cls, "any"), "shapes"),
                     (("all", "any"), "curve")):
        c = by.get(key)
        if c is not None and c.get("roof_half_ns") is not None:
            return c, src
    return {}, "measured"


def _l2_bytes(device: dict[str, Any]) -> float | None:
    """L2 size of the calibrated GPU (``roofline/data/gpus.csv``), None when unknown."""
    from traceparse.roofline import gpus

    row = gpus.match(device.get("ceiling_table_row") or device.get("device_model"))
    mib = row.get("l2_mib") if row else None
    return float(mib) * 2**20 if isinstance(mib, int | float) and mib > 0 else None


def _ab_ratio(f: dict[str, Any] | None, nbytes: float, ratio: float) -> float | None:
    if not f or f.get("model") != "alpha_beta" or not np.isfinite(nbytes) or nbytes <= 0:
        return None
    t0 = float(fit.predict_alpha_beta(f, [nbytes])[0])
    t1 = float(fit.predict_alpha_beta(f, [nbytes * ratio])[0])
    return t1 / t0 if t0 > 0 else None


def copy_fits_per_row(tl: Timeline, memcpy: list[dict[str, Any]]) -> list[Any]:
    """For each ``tl.gpu`` row, the calibration's ``memcpy[]`` fit of its own (direction,
    host memory), else of its direction, else None (not another direction's fit).

    Example:
        fits DtoD/device (alpha 1 us) and HtoD/pinned (25 GB/s): an HtoD pinned copy takes
        the HtoD fit (before, every copy took the first fit in the list, DtoD's); a DtoH
        copy takes none.
    """
    from traceparse.analyses.calibrate import host_memory_expr

    exact = {(m["direction"], m["host_memory"]): m["fit"] for m in memcpy}
    by_dir: dict[str, Any] = {}
    for m in memcpy:
        by_dir.setdefault(m["direction"], m["fit"])
    if not memcpy or tl.gpu.height == 0:
        return [None] * tl.gpu.height
    g = tl.gpu.select(pl.col("copy_kind").cast(pl.String).fill_null("unknown"),
                      host_memory_expr())
    return [exact.get((d, h), by_dir.get(d)) for d, h in g.iter_rows()]


def scaled_durations(tl: Timeline, device: dict[str, Any], factor: float,
                     batch_size: int | None = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Per ``tl.gpu`` row (same order): ``pred_dur_ns, source`` (one of :data:`SOURCES`, or
    ``sync``) and ``extrapolated`` (the scaled
    roofline time is outside the range its curve was fitted on); plus what the curves were
    (batch, curve keys used). ``batch_size`` overrides the traced batch read off the
    program's input (:func:`traceparse.analyses.scale_work.infer_batch`)."""
    sc = device.get("scale") or {}
    curves = sc.get("curves") or []
    batch = (sc["batch"], sc["tokens"]) if sc.get("batch") else scale_work.infer_batch(tl)
    if batch_size is not None:  # the user's: tokens per sample kept only if B agrees
        batch = (batch_size, batch[1] if batch and batch[0] == batch_size else 1)
    roofs = scale_work.ceiling_map(device.get("ceilings") or [])
    t = scale_work.op_table(tl, batch, factor, roofs)
    n = t.height
    meas = t["dur_ns"].to_numpy().astype(np.float64)
    pred = meas.copy()
    src = np.array(["measured_no_shapes"] * n, dtype=object)
    extra = np.zeros(n, bool)
    kind = t["kind"].cast(pl.String).fill_null("").to_numpy()
    comm = (t["category"].cast(pl.String) == "communication").fill_null(False).to_numpy()
    batched = t["batched"].fill_null(False).to_numpy()
    has_op = t["bytes"].is_not_null().to_numpy()
    r0, r1 = t["roof_ns"].to_numpy(), t["roof_f_ns"].to_numpy()
    cls = t["op_class"].fill_null("other").to_list()
    prec = t["precision"].fill_null("fp32").to_list()
    byte_ratio = (t["bytes_f"] / t["bytes"]).fill_null(1.0).fill_nan(1.0).to_numpy()
    used: dict[str, int] = {}
    l2 = _l2_bytes(device)
    dram = roofs.get("dram", 0.0)
    l2 = l2 if dram > 0 else None
    bf = t["bytes_f"].fill_null(0.0).to_numpy()
    b0 = t["bytes"].fill_null(0.0).to_numpy()
    op_t = t["op_time_ns"].fill_null(0).to_numpy().astype(np.float64)
    memset = (device.get("memset") or {}).get("fit")
    copy_fit = copy_fits_per_row(tl, device.get("memcpy") or [])
    for i in range(n):
        if kind[i] == "sync":
            src[i] = "sync"
            continue
        if not has_op[i]:
            continue
        if not batched[i]:
            src[i] = "measured"
            continue
        # the op recorded shapes and carries the batch: kept as measured only when nothing
        # below prices it
        src[i] = "measured_unpriced"
        if kind[i] in ("memset", "memcpy") or comm[i]:
            f = memset if kind[i] == "memset" else (
                copy_fit[i] if kind[i] == "memcpy" else None)
            nb = t["bytes"][i] if kind[i] != "kernel" else None
            r = _ab_ratio(f, float(nb) if nb is not None else np.nan, byte_ratio[i])
            if r is None:
                r = byte_ratio[i] if comm[i] else None
            if r is not None:
                pred[i], src[i] = meas[i] * r, "curve"
            continue
        if not (np.isfinite(r0[i]) and np.isfinite(r1[i])):
            continue
        c, s = _curve(curves, cls[i], prec[i])
        if not c:
            continue
        h = float(c["roof_half_ns"])
        ratio = (r1[i] + h) / (r0[i] + h)
        if l2 and bf[i] > l2 and op_t[i] > 0:
            # the scaled op's bytes no longer fit in L2: it cannot beat DRAM bandwidth, so
            # its time grows at least as its DRAM time (from whichever is longer at the
            # traced size, the measurement or the DRAM time: F = 1 stays the measurement)
            ratio = max(ratio, bf[i] / max(op_t[i] * dram / 1e9, b0[i]))
        pred[i] = meas[i] * ratio
        src[i] = s
        key = f"{c['class']}/{c['precision']}"
        used[key] = used.get(key, 0) + 1
        lo, hi = float(c["roof_ns_min"]), float(c["roof_ns_max"])
        extra[i] = r1[i] > hi * EXTRAPOLATION_MARGIN or r1[i] < lo / EXTRAPOLATION_MARGIN
    out = pl.DataFrame({"pred_dur_ns": np.rint(np.maximum(pred, 0)).astype(np.int64),
                        "source": src.astype(str), "extrapolated": extra})
    info = {"batch": batch[0] if batch else None, "tokens": batch[1] if batch else None,
            "curves_used": used}
    return out, info


def _step_parts(tl: Timeline, rep: replay_host.HostReplay, steps: pl.DataFrame,
                bounds: pl.DataFrame) -> pl.DataFrame:
    """GPU busy and exposed communication of each replayed step (union of the replayed
    activities clipped to the step's replayed window)."""
    g = tl.gpu.select("rank", pl.col("category").cast(pl.String))[rep.gi.tolist()]
    g = g.with_columns(pl.Series("start_ns", rep.pred_start), pl.Series("end_ns", rep.pred_end))
    rows = []
    for r in bounds.iter_rows(named=True):
        w = g.filter((pl.col("rank") == r["rank"]) & (pl.col("end_ns") > r["start"])
                     & (pl.col("start_ns") < r["end"])).with_columns(
            pl.col("start_ns").clip(r["start"], r["end"]),
            pl.col("end_ns").clip(r["start"], r["end"]))
        busy = union(w, by=["rank"])
        b = int((busy["end_ns"] - busy["start_ns"]).sum()) if busy.height else 0
        cm = union(w.filter(pl.col("category") == "communication"), by=["rank"])
        cp = union(w.filter(pl.col("category") == "compute"), by=["rank"])
        from traceparse.analyses.intervals import subtract

        ex = subtract(cm, cp, by=["rank"]) if cm.height else cm
        e = int((ex["end_ns"] - ex["start_ns"]).sum()) if ex.height else 0
        rows.append({"gpu_busy_ns": b, "exposed_comm_ns": e})
    return pl.DataFrame(rows, schema={"gpu_busy_ns": pl.Int64, "exposed_comm_ns": pl.Int64})


def median_parts(st: pl.DataFrame, median_ns: int) -> dict[str, int]:
    """The parts of the median step ``median_ns`` (the median of ``st["predicted_ns"]``),
    from the steps ``st`` (``predicted_ns, gpu_busy_ns, exposed_comm_ns``) the median is
    taken over: the middle step's with an odd count, the mean of the two middle steps'
    with an even one (as the median is their mean). ``gpu_busy_ns + host_bound_ns =
    median_ns``; ``exposed_comm_ns`` is the part of ``gpu_busy_ns`` with communication and
    no compute.

    Example:
        steps predicted 10, 20, 30, 40 with GPU busy 4, 6, 8, 10: median (20 + 30) / 2 =
        25; GPU busy (6 + 8) / 2 = 7, host-bound 25 - 7 = 18 (before, the upper middle
        step's 8 and 22 were quoted: 30, not the median 25).
    """
    s = st.sort("predicted_ns")
    n = s.height
    rows = s[(n - 1) // 2:n // 2 + 1]
    busy = round(float(rows["gpu_busy_ns"].mean()))  # type: ignore[arg-type]
    comm = round(float(rows["exposed_comm_ns"].mean()))  # type: ignore[arg-type]
    return {"gpu_busy_ns": busy, "host_bound_ns": max(median_ns - busy, 0),
            "exposed_comm_ns": comm}


def _step_ends(tl: Timeline, steps: pl.DataFrame) -> dict[tuple[int, int], np.ndarray]:
    """The end of every step window, per ``(rank, process_id)`` of the processes that
    made API calls on its rank: where the unprofiled measurement synchronizes."""
    procs = tl.api.select("rank", pl.col("process_id").fill_null(0)).unique()
    out: dict[tuple[int, int], np.ndarray] = {}
    for r, pid in procs.iter_rows():
        e = steps.filter(pl.col("rank") == r)["end_ns"].to_numpy().astype(np.int64)
        if e.size:
            out[(int(r), int(pid))] = np.sort(e)
    return out


def _pick_device(tl: Timeline, cal: dict[str, Any], allow_other_gpu: bool) -> dict[str, Any]:
    from traceparse.analyses.calibrate import device_models
    from traceparse.analyses.predict import gpu_mismatch

    if not cal.get("devices"):
        raise TraceError(None, "calibration has no device entries")
    other = gpu_mismatch(tl, cal)
    if other and not allow_other_gpu:
        raise TraceError(None, "the calibration was not measured on this trace's GPU: "
                               + "; ".join(other)
                               + " (calibrate on this GPU, or pass --allow-other-gpu)")
    models = set(device_models(tl)["device_model"].to_list())
    return next((d for d in cal["devices"] if d["device_model"] in models), cal["devices"][0])


def predict_scaled(tl: Timeline, cal: dict[str, Any], factor: float = 1.0, *,
                   step_regex: str | None = None, per_event_ns: float | None = None,
                   allow_other_gpu: bool = False, batch_size: int | None = None
                   ) -> dict[str, Any]:
    """Predicted profiler-free step time of ``tl``'s program at ``factor`` times its batch
    (module docstring). ``batch_size``: the traced batch, when the trace's first integer
    tensor is not it (DLRM's first is a ``[1]``).

    Returns:
        ``predicted_step_ns`` (median over steps), ``parts`` (``gpu_busy_ns``,
        ``host_bound_ns`` = the step's time with the GPU idle, ``exposed_comm_ns``; of the
        median step), ``sources`` (predicted GPU time per source and its share),
        ``extrapolated_ns`` (GPU time priced beyond the fitted range),
        ``predicted_step_range_ns`` (``[low, high]``: the median step with the profiler's
        per-event cost at the high and low ends of its measured range; None where no
        profiler cost is removed), ``profiled_step_ns`` (measured step windows, median),
        ``profiler`` (the
        :func:`traceparse.analyses.profiler_cost.profiler_cost` estimate used), ``steps``
        (per-step rows), ``batch``, ``factor``.

    Raises:
        TraceError: no steps, or the calibration is from another GPU (unless
            ``allow_other_gpu``).
    """
    steps = step_windows(tl, step_regex=step_regex)
    if steps.height == 0:
        raise TraceError(None, "predict --scale needs step ranges (ProfilerStep#N, or "
                               "--steps REGEX naming a host range per step)")
    dev = _pick_device(tl, cal, allow_other_gpu)
    dur, info = scaled_durations(tl, dev, factor, batch_size)
    ev = profiler_cost.advance_fn(tl)
    # the band scales only the per-op estimate, not the graph launches' measured excess
    ops, graph = profiler_cost.event_cost_parts(tl, steps, per_event_ns=per_event_ns)

    waits = replay_host.queue_waits(tl)
    # the input pipeline's host time grows with the batch (scale_host)
    stretches = scale_host.loader_stretches(tl)
    loader = stretches if factor != 1 else {}

    def costs_at(scale: float) -> dict[tuple[int, int], Any]:
        """Each process's recorded events' costs, the per-op estimate times ``scale`` (the
        graph launches' measured excess unscaled)."""
        return {k: v * scale + graph[k] for k, v in ops.items()}

    def replay(scale: float) -> tuple[replay_host.HostReplay, pl.DataFrame]:
        """The replay with the profiler's per-op cost times ``scale``: rows, steps."""
        costs = costs_at(scale)

        def adv(key: tuple[int, int], t: np.ndarray) -> np.ndarray:
            a = (profiler_cost.advance(ev.get(key), t, costs.get(key, 0.0))
                 + replay_host.waited(waits.get(key), t))
            if key in loader:  # (F - 1) x the profiler-free loader time before t, later
                a = a - np.rint((factor - 1) * scale_host.loader_time(
                    loader[key], ev.get(key), costs.get(key, 0.0), t)).astype(np.int64)
            return a

        r = replay_host.replay_host(tl, durations=dur["pred_dur_ns"].to_numpy(), advance=adv,
                                    all_syncs=True, step_syncs=_step_ends(tl, steps))
        return r, replay_host.step_times(tl, r, steps)

    rep, st = replay(1.0)
    prof = profiler_cost.profiler_cost(tl, windows=steps, per_event_ns=per_event_ns)
    costs1 = costs_at(1.0)
    # the profiler-free loader time at the traced batch, all steps (every launching process)
    loader_ns = int(sum(int(scale_host.loader_time(
        st_, ev.get(k), costs1.get(k, 0.0), np.array([st_[1][-1]]))[0])
        for k, st_ in stretches.items()))
    # the step at the ends of the per-event cost's measured range (a larger cost removes
    # more host time: the low step); none when nothing is removed
    lo_hi = None
    gl = prof["graph_launch_ns"]
    op_ns = prof["overhead_ns"] - gl
    if prof["applies"] and op_ns > 0 and prof["overhead_low_ns"] is not None:
        k_lo = (prof["overhead_low_ns"] - gl) / op_ns
        k_hi = (prof["overhead_high_ns"] - gl) / op_ns
        lo_hi = [int(np.median(replay(k_hi)[1]["predicted_ns"].to_numpy())),
                 int(np.median(replay(k_lo)[1]["predicted_ns"].to_numpy()))]
    bounds = st.select("rank", pl.col("pred_start_ns").alias("start"),
                       pl.col("pred_end_ns").alias("end"))
    parts = _step_parts(tl, rep, steps, bounds)
    st = pl.concat([st, parts], how="horizontal").with_columns(
        (pl.col("predicted_ns") - pl.col("gpu_busy_ns")).clip(0).alias("host_bound_ns"))
    med = int(np.median(st["predicted_ns"].to_numpy()))
    keep = dur.filter(pl.col("source") != "sync")
    total = int(keep["pred_dur_ns"].sum())
    by_src = {s: int(keep.filter(pl.col("source") == s)["pred_dur_ns"].sum())
              for s in SOURCES}
    wall = (steps["end_ns"] - steps["start_ns"]).to_numpy()
    warnings = _unscaled_warning(tl, dur, factor, total, sum(by_src[s] for s in KEPT))
    return {
        "factor": factor, "batch": info["batch"], "tokens": info["tokens"],
        "predicted_batch": None if info["batch"] is None else info["batch"] * factor,
        "predicted_step_ns": med,
        "predicted_step_range_ns": lo_hi,
        "parts": median_parts(st, med),
        "sources": {"gpu_time_ns": total, **{f"{k}_ns": v for k, v in by_src.items()},
                    **{f"{k}_frac": (v / total if total else None)
                       for k, v in by_src.items()}},
        "extrapolated_ns": int(keep.filter(pl.col("extrapolated"))["pred_dur_ns"].sum()),
        "curves_used": info["curves_used"],
        "profiled_step_ns": int(np.median(wall)),
        "profiler": prof,
        "queue_wait_ns": int(sum(int(w[1][-1]) for w in waits.values())),
        "input_pipeline_ns": loader_ns,
        "input_pipeline_added_ns": round((factor - 1) * loader_ns),
        "steps": st.to_dicts(),
        "warnings": warnings,
    }


#: Share of the predicted GPU time kept as measured at and above which a prediction at
#: another batch warns that it does not scale most of the GPU work.
UNSCALED_WARN_FRAC = 0.5


def _unscaled_warning(tl: Timeline, dur: pl.DataFrame, factor: float, total: int,
                      kept: int) -> list[str]:
    """A warning when ``factor != 1`` and at least :data:`UNSCALED_WARN_FRAC` of the GPU
    time is kept as measured (no shapes, or tensors without the batch): the prediction then
    leaves that work at its traced size (for a larger batch it under-estimates). Names the
    graph launches when kernels replayed from a CUDA graph make up most of it (a graph
    replay records no op, so its kernels carry no shapes)."""
    if factor == 1 or total <= 0 or kept / total < UNSCALED_WARN_FRAC:
        return []
    from traceparse.links import launch_join

    lj = launch_join(tl).select(pl.col("api_name").cast(pl.String))
    no = dur.select(pl.col("source").is_in(list(KEPT)).alias("k"),
                    "pred_dur_ns")
    j = pl.concat([lj, no], how="horizontal").filter(pl.col("k"))
    graph = int(j.filter(pl.col("api_name").str.contains(profiler_cost.GRAPH_LAUNCH_RE)
                         .fill_null(False))["pred_dur_ns"].sum())
    why = (f": {100 * graph / kept:.0f}% of it replayed from a CUDA graph, whose kernels "
           "carry no op shapes (a graph launch records no op; trace the eager run to "
           "scale them)" if graph * 2 >= kept else
           ": its kernels' ops recorded no shapes that carry the batch")
    return [f"{100 * kept / total:.0f}% of the GPU time is kept at its traced size{why}; "
            f"at {factor:g}x the batch the prediction likely "
            + ("under" if factor > 1 else "over") + "-estimates the step"]


def summary_rows(result: dict[str, Any]) -> pl.DataFrame:
    """:func:`predict_scaled`'s result as ``quantity, value, note`` rows (table and CSV
    output; ``value`` as text: ns with thousands separators); every figure is one of the
    result's, unchanged."""
    p, s, pc = result["parts"], result["sources"], result["profiler"]
    rows: list[tuple[str, float | None, str]] = [
        ("batch (traced)", result["batch"], f"tokens per sample {result['tokens']}"),
        ("batch factor", result["factor"], "predicted batch = traced x factor"),
        ("predicted_step_ns", result["predicted_step_ns"], "median step, without the profiler"),
        *((("predicted_step_low_ns", rng[0], "with the profiler's per-event cost at the high "
            "end of its measured range"),
           ("predicted_step_high_ns", rng[1], "... at the low end"))
          if (rng := result.get("predicted_step_range_ns")) else ()),
        ("profiled_step_ns", result["profiled_step_ns"], "median step window in the trace"),
        ("gpu_busy_ns", p["gpu_busy_ns"], "median step: GPU running"),
        ("host_bound_ns", p["host_bound_ns"], "median step: GPU idle, waiting for the host"),
        ("exposed_comm_ns", p["exposed_comm_ns"], "median step: communication, no compute"),
        ("gpu_time_ns", s["gpu_time_ns"], "predicted GPU activity time, all steps"),
        ("from_shapes_ns", s["shapes_ns"], "scaled from op shapes through the class curve"),
        ("from_curve_ns", s["curve_ns"], "scaled through a pooled curve or alpha-beta fit"),
        ("measured_ns", s["measured_ns"], "kept: the op's tensors do not carry the batch"),
        ("measured_no_shapes_ns", s["measured_no_shapes_ns"],
         "kept: the launching op recorded no shapes"),
        ("measured_unpriced_ns", s["measured_unpriced_ns"],
         "kept: the op's shapes carry the batch, but no fit prices it"),
        ("extrapolated_ns", result["extrapolated_ns"],
         "priced beyond the sizes the curve was fitted on"),
        ("profiler_overhead_ns", pc["overhead_ns"],
         f"{pc['events']} recorded ops x {pc['per_event_ns']:.0f} ns "
         f"(+/- {pc['per_event_spread_ns']:.0f})"
         + (f" + {pc['graph_launches']} graph launches' recording "
            f"{pc['graph_launch_ns']:,} ns" if pc.get("graph_launches") else "")),
        ("queue_wait_ns", result["queue_wait_ns"], "host waiting for a full launch queue"),
        ("input_pipeline_ns", result.get("input_pipeline_ns"),
         "launching threads in data-loading ranges, profiler-free, all steps"),
        ("input_pipeline_added_ns", result.get("input_pipeline_added_ns"),
         "that time x (factor - 1): the loader prepares every sample of the batch"),
    ]
    def cell(v: float | None) -> str:
        if v is None:
            return ""
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:.4g}"

    return pl.DataFrame({"quantity": [r[0] for r in rows], "value": [cell(r[1]) for r in rows],
                         "note": [r[2] for r in rows]})
