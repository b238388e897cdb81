"""Calibrate a performance model from traces: ``calibration.json`` (see docs/calibration.md).

:func:`calibrate` turns a :class:`~traceparse.timeline.Timeline` into a JSON-serialisable
dict (schema ``traceparse.calibration``, version :data:`VERSION`, JSON Schema in
``analyses/data/calibration.schema.json``) with one entry per **device model** (the
``devices.name`` of the GPU each activity ran on; ``unknown`` when the trace does not say):

* ``launch`` - launch call time (API entry to return), launch-to-start latency (API entry to
  GPU start) and the inter-kernel gap on a busy stream (a kernel whose launch call began
  before the previous kernel on its stream ended: the gap is the GPU's own dispatch cost),
  P50/P95, separately for ``eager`` launches and ``graph`` launches (``graph_id`` set or a
  ``*GraphLaunch*`` call);
* ``kernels`` - per class and dtype (:mod:`traceparse.analyses.kclass`): count, time, duration
  percentiles and, where the work of kernels is known (FLOPs/bytes from op shapes via
  :mod:`traceparse.roofline.estimate`, or from ncu counters), the achieved efficiency against the
  ceiling and a saturating fit ``eff(w) = e_max * w / (w + w_half)``
  (:mod:`traceparse.analyses.fit`);
* ``kernel_table`` - per kernel name and launch grid: count and duration P50/P95/mean (the
  lookup model);
* ``memcpy`` / ``memset`` - alpha-beta fits per direction and host memory kind;
* ``collectives`` - alpha-beta fits per collective and group size on the message bytes;
  for multi-rank traces the *i*-th call of a collective in a process group on every rank is
  one instance and its duration is the **minimum** over ranks (the others waited for a
  straggler; the minimum is closest to the transfer time);
* ``ceilings`` - the ceilings used, their clocks and where they came from
  (:func:`traceparse.roofline.gpus.ceilings`: datasheet table, ncu-measured, or none).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse import __version__
from traceparse.analyses import fit
from traceparse.analyses.comm import collectives
from traceparse.analyses.kclass import COMPUTE_CLASSES, ceiling_for, class_expr, dtype_expr
from traceparse.analyses.launches import launch_table
from traceparse.timeline import Timeline

SCHEMA = "traceparse.calibration"
VERSION = "1.0"
UNKNOWN = "unknown"


def _pct(values: Any) -> dict[str, float | None]:
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return {"p50": None, "p95": None}
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95))}


def device_models(tl: Timeline) -> pl.DataFrame:
    """``rank, device_id, device_model, sm_count, memory_bytes`` for every (rank, device)
    with GPU work; the model is ``devices.name`` or ``unknown``."""
    used = tl.gpu.select("rank", "device_id").unique()
    d = (tl.devices.select("rank", "device_id", pl.col("name").alias("device_model"),
                           "sm_count", "memory_bytes")
         .unique(subset=["rank", "device_id"], keep="first"))
    return (used.join(d, on=["rank", "device_id"], how="left")
            .with_columns(pl.col("device_model").fill_null(UNKNOWN)).sort("rank", "device_id"))


def _in_window(frame: pl.DataFrame, window: tuple[int, int] | None,
               col: str = "start_ns") -> pl.DataFrame:
    if window is None:
        return frame
    return frame.filter((pl.col(col) >= window[0]) & (pl.col(col) < window[1]))


def _tag(frame: pl.DataFrame, models: pl.DataFrame) -> pl.DataFrame:
    return frame.join(models.select("rank", "device_id", "device_model"),
                      on=["rank", "device_id"], how="left").with_columns(
        pl.col("device_model").fill_null(UNKNOWN))


# ------------------------------------------------------------------ launch overhead
def launch_stats(lt: pl.DataFrame) -> dict[str, Any]:
    """Launch overhead of the kernels of :func:`traceparse.analyses.launches.launch_table` rows
    ``lt``.

    Returns ``{"eager": {...} | None, "graph": {...} | None}``; each has ``count``,
    ``launch_call_ns``, ``launch_to_start_ns`` and ``busy_gap_ns`` (P50/P95) and
    ``busy_gaps`` (how many gaps were on a busy stream).

    Example:
        Kernels on one stream: k1 (API 0..4, GPU 5..15), k2 (API 6..9, GPU 16..20):
        launch calls [4, 3], launch-to-start [5, 10]; k2's call began at 6 < 15 (busy),
        gap 16 - 15 = 1.
    """
    grp = ["rank", "device_id", "stream_id"]
    t = lt.sort(*grp, "start_ns").with_columns(
        _prev_end=pl.col("end_ns").shift(1).over(grp).cum_max().over(grp))
    busy = pl.col("_prev_end").is_not_null() & (pl.col("api_start_ns") < pl.col("_prev_end"))
    t = t.with_columns(
        _gap=pl.when(busy).then((pl.col("start_ns") - pl.col("_prev_end")).clip(0)),
        _graph=pl.col("graph_id").is_not_null()
        | pl.col("api_name").cast(pl.String).str.contains("(?i)graphlaunch"))
    out: dict[str, Any] = {}
    for label, is_graph in (("eager", False), ("graph", True)):
        s = t.filter(pl.col("_graph") == is_graph)
        if s.height == 0:
            out[label] = None
            continue
        gaps = s["_gap"].drop_nulls()
        out[label] = {
            "count": s.height,
            "launch_call_ns": _pct(s["launch_ns"].to_numpy()),
            "launch_to_start_ns": _pct((s["start_ns"] - s["api_start_ns"]).to_numpy()),
            "busy_gap_ns": _pct(gaps.to_numpy()),
            "busy_gaps": int(gaps.len()),
        }
    return out


# ------------------------------------------------------------------ kernels
def _shape_points(tl: Timeline, est: pl.DataFrame) -> pl.DataFrame:
    """Kernels linked to estimated ops exactly as the roofline links them
    (:func:`traceparse.roofline.link.link_kernels`: the innermost estimated op around the
    kernel's launch, else the op with the kernel's external id); one point per op, time =
    its kernels' summed duration, class and dtype of its longest kernel."""
    from traceparse.roofline.estimate import CONV_BWD_OPS, CONV_OPS
    from traceparse.roofline.link import link_kernels

    est = est.with_row_index("op_row")
    linked = link_kernels(est, tl.gpu, tl.api).with_columns(class_expr(), dtype_expr())
    per = (linked.sort("dur_ns", descending=True)
           .group_by("op_row")
           .agg(pl.col("dur_ns").sum().cast(pl.Float64).alias("time_ns"),
                pl.col("kclass").first(), pl.col("kdtype").first(),
                pl.col("device_id").first()))
    j = est.join(per, on="op_row", how="inner")
    # the kernel name's dtype where it says one (fp32 ops run as TF32 on tensor cores),
    # else the op's
    dt = (pl.when(pl.col("kdtype") != "unknown").then(pl.col("kdtype"))
          .otherwise(pl.col("precision").str.replace("_tensor", "")))
    # a convolution's FLOPs (direct-convolution count) are conv work whatever kernel cuDNN
    # picked: a Winograd convolution (transforms + an sgemm) has an sgemm as longest kernel
    conv = pl.col("name").is_in(sorted(CONV_OPS | CONV_BWD_OPS))
    j = j.with_columns(pl.when(conv).then(pl.lit("conv")).otherwise(pl.col("kclass"))
                       .alias("kclass"))
    return j.filter(pl.col("kclass").is_in(list(COMPUTE_CLASSES))).select(
        "rank", "device_id", "kclass", dt.alias("kdtype"), pl.col("flops").alias("work"),
        pl.lit("flop").alias("metric"), "time_ns", pl.lit("shapes").alias("source"),
        pl.col("kdtype").alias("row_dtype"))


def kernel_work(tl: Timeline) -> pl.DataFrame:
    """Work points: ``rank, device_id, kclass, kdtype, work, metric, time_ns, source``.

    * ``shapes``: one point per torch op with an estimated FLOP count
      (:func:`traceparse.roofline.estimate.estimate_ops`), time = summed duration of its kernels
      (linked as the roofline links them), class of its longest kernel (``conv`` for every
      convolution), dtype from the kernel name, else from the op.
    * ``ncu``: one point per ncu launch: FLOPs (tensor, else fp16+fp32+fp64) for compute
      classes, DRAM bytes for the others.

    ``row_dtype`` is the dtype its longest kernel's name says (``unknown`` when it says
    none): the ``kernels[]`` row (class, dtype by name) whose kernels the point's are, which
    :func:`kernel_classes` matches it to; ``kdtype`` (the name's dtype, else the op's) picks
    the ceiling.
    """
    from traceparse.roofline.estimate import estimate_ops

    cols = {"rank": pl.Int32, "device_id": pl.Int32, "kclass": pl.String,
            "kdtype": pl.String, "work": pl.Float64, "metric": pl.String,
            "time_ns": pl.Float64, "source": pl.String, "row_dtype": pl.String}
    parts = []
    if tl.ranges.height and tl.kernels.height:
        est = estimate_ops(tl.ranges)
        if est.height:
            parts.append(_shape_points(tl, est))
    n = tl.ncu.filter(pl.col("dur_ns").is_not_null() & (pl.col("dur_ns") > 0))
    if n.height:
        n = n.with_columns(pl.col("kernel_name").alias("name"),
                           pl.lit("compute").alias("category"))
        n = n.with_columns(class_expr(), dtype_expr())
        flops = (pl.when(pl.col("flop_tensor").fill_null(0) > 0).then(pl.col("flop_tensor"))
                 .otherwise(pl.sum_horizontal(pl.col("flop_fp16").fill_null(0),
                                              pl.col("flop_fp32").fill_null(0),
                                              pl.col("flop_fp64").fill_null(0))))
        comp = pl.col("kclass").is_in(list(COMPUTE_CLASSES))
        parts.append(n.select(
            pl.col("rank"), pl.col("device_id").fill_null(0), "kclass", "kdtype",
            pl.when(comp).then(flops).otherwise(pl.col("dram_bytes")).alias("work"),
            pl.when(comp).then(pl.lit("flop")).otherwise(pl.lit("bytes")).alias("metric"),
            pl.col("dur_ns").alias("time_ns"), pl.lit("ncu").alias("source"),
            pl.col("kdtype").alias("row_dtype")))
    if not parts:
        return pl.DataFrame(schema=cols)
    return pl.concat([p.cast(cols) for p in parts]).filter(  # type: ignore[arg-type]
        pl.col("work").is_not_null() & (pl.col("work") > 0))


def _ceiling_map(ceil: pl.DataFrame) -> dict[str, float]:
    return dict(zip(ceil["name"].to_list(), ceil["value"].to_list(), strict=True))


def kernel_classes(k: pl.DataFrame, work: pl.DataFrame,
                   roofs: dict[str, float]) -> list[dict[str, Any]]:
    """Per (class, dtype) of kernels ``k`` (with ``kclass``/``kdtype``): duration stats and,
    where ``work`` has points, efficiency percentiles and the saturating fit.

    A row's work points are those of its own kernels (``row_dtype``, the dtype by kernel
    name, equal to the row's). The ceiling is the row dtype's; for a row whose kernel names
    say no dtype (``unknown``, e.g. cuBLAS ``nvjet_*`` GEMMs), the dtype of its points' ops
    when they all have one.

    Example:
        gemm kernels named ``nvjet_sm90_tst_192x192_*`` (dtype unknown) launched by
        ``aten::mm`` on BFloat16 tensors: one ``gemm unknown`` row whose 441 points (bf16)
        are relative to the ``bf16_tensor`` ceiling (before, the points were looked for
        under ``gemm bf16``, a row that does not exist, and the row said no work data).
    """
    out = []
    stats = (k.group_by("kclass", "kdtype")
             .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("time_ns"),
                  pl.col("dur_ns")).sort("time_ns", descending=True))
    for r in stats.iter_rows(named=True):
        cls, dt = r["kclass"], r["kdtype"]
        entry: dict[str, Any] = {"class": cls, "dtype": dt, "count": int(r["count"]),
                                 "time_ns": int(r["time_ns"]),
                                 "duration_ns": _pct(r["dur_ns"]), "efficiency": None}
        w = work.filter((pl.col("kclass") == cls) & (pl.col("row_dtype") == dt))
        if cls in ("communication", "nccl") or w.height == 0:
            out.append(entry)
            continue
        op_dts = set(w["kdtype"].to_list())
        cname = ceiling_for(cls, op_dts.pop() if dt == UNKNOWN and len(op_dts) == 1 else dt)
        if cname not in roofs and cname.endswith("_tensor"):
            cname = "fp32" if "fp32" in roofs else cname
        peak = roofs.get(cname)
        metric = str(w["metric"][0])
        eff_block: dict[str, Any] = {"metric": metric, "ceiling": cname, "ceiling_value": peak,
                                     "points": w.height,
                                     "sources": sorted(set(w["source"].to_list()))}
        if peak:
            eff = (w["work"] / (w["time_ns"] * 1e-9) / peak).to_numpy()
            eff_block["achieved"] = _pct(eff)
            eff_block["achieved_per_s"] = _pct(eff * peak)
            eff_block["fit"] = fit.saturating(w["work"].to_numpy(), w["time_ns"].to_numpy(),
                                              peak)
        else:
            eff_block["achieved"] = None
            eff_block["achieved_per_s"] = _pct((w["work"] / (w["time_ns"] * 1e-9)).to_numpy())
            eff_block["fit"] = None
        entry["efficiency"] = eff_block
        out.append(entry)
    return out


def grid_expr() -> pl.Expr:
    """The launch grid as ``"GXxGYxGZ"`` (``""`` when the trace does not record it)."""
    return pl.concat_str(pl.col("grid_x").cast(pl.String), pl.col("grid_y").cast(pl.String),
                         pl.col("grid_z").cast(pl.String), separator="x").fill_null("")


def kernel_table(k: pl.DataFrame) -> list[dict[str, Any]]:
    """Per (kernel name, launch grid): class, count, P50/P95/mean duration (sorted by total
    time). The grid separates shapes of one kernel (flash_fwd_kernel at grid 244x1x6 runs
    7.9 ms, at 122x1x12 0.16 ms on nsys-ai__mfu_2gpu_after: a per-name median prices both at
    4.0 ms)."""
    if "grid_x" in k.columns:
        k = k.with_columns(grid_expr().alias("grid"))
    else:
        k = k.with_columns(pl.lit("").alias("grid"))
    t = (k.group_by(pl.col("name").cast(pl.String), "grid")
         .agg(pl.col("kclass").first(), pl.len().alias("count"),
              pl.col("dur_ns").sum().alias("time_ns"),
              pl.col("dur_ns").quantile(0.5, "linear").alias("p50_ns"),
              pl.col("dur_ns").quantile(0.95, "linear").alias("p95_ns"),
              pl.col("dur_ns").mean().alias("mean_ns"))
         .sort(["time_ns", "name"], descending=[True, False]))
    return [{**r, "count": int(r["count"]), "time_ns": int(r["time_ns"])}
            for r in t.iter_rows(named=True)]


# ------------------------------------------------------------------ copies
def host_memory_expr() -> pl.Expr:
    """Host-side memory kind of a copy: pinned, pageable, device (D2D/P2P), managed or
    unknown."""
    ck = pl.col("copy_kind").cast(pl.String)
    side = (pl.when(ck.str.starts_with("Hto")).then(pl.col("src_kind").cast(pl.String))
            .when(ck.str.ends_with("toH")).then(pl.col("dst_kind").cast(pl.String))
            .otherwise(pl.lit("device")))
    return side.str.to_lowercase().fill_null(UNKNOWN).alias("host_memory")


def copy_fits(g: pl.DataFrame) -> list[dict[str, Any]]:
    """Alpha-beta fits of memcpy rows per (direction, host memory kind)."""
    c = g.filter(pl.col("bytes").is_not_null()).with_columns(
        pl.col("copy_kind").cast(pl.String).fill_null(UNKNOWN).alias("direction"),
        host_memory_expr())
    out = []
    for (d, h), s in sorted(c.group_by("direction", "host_memory"), key=lambda x: str(x[0])):
        f = fit.alpha_beta(s["bytes"].to_numpy(), s["dur_ns"].to_numpy())
        out.append({"direction": d, "host_memory": h, "count": s.height,
                    "bytes_total": int(s["bytes"].sum()), "fit": f})
    return out


def memset_fit(g: pl.DataFrame) -> dict[str, Any] | None:
    """Alpha-beta fit of memset rows (bytes set vs time)."""
    s = g.filter(pl.col("bytes").is_not_null())
    if s.height == 0:
        return None
    return {"count": s.height, "bytes_total": int(s["bytes"].sum()),
            "fit": fit.alpha_beta(s["bytes"].to_numpy(), s["dur_ns"].to_numpy())}


# ------------------------------------------------------------------ collectives
def collective_instances(tl: Timeline) -> pl.DataFrame:
    """One row per collective call: ``device_model, collective, coll_pg, seq, group_size,
    bytes, dur_ns`` (minimum over the ranks that ran it), ``start_ns``, ``ranks``,
    ``same_call``.

    Calls are matched as :func:`traceparse.analyses.comm.matched_calls` matches them (the
    definition :func:`traceparse.analyses.comm.collective_skew` uses): the *i*-th kernel
    of a collective in a process group on each (rank, device) is call ``seq = i``, and
    ``same_call`` is false when its kernels cannot be one call (one ended before another
    started in an all-to-all-dependent collective); such a call's minimum is not a call's
    duration, and :func:`collective_fits` leaves it out.
    """
    from traceparse.analyses.comm import matched_calls

    models = device_models(tl)
    c = matched_calls(_tag(collectives(tl), models))
    return (c.group_by("device_model", "collective", "coll_pg", "seq")
            .agg(pl.col("coll_group_size").max().alias("group_size"),
                 pl.col("bytes").max(), pl.col("dur_ns").min(),
                 pl.col("start_ns").min(),
                 pl.struct("rank", "device_id").n_unique().alias("ranks"),
                 pl.col("same_call").first())
            .sort("device_model", "collective", "coll_pg", "seq"))


def collective_fits(inst: pl.DataFrame) -> list[dict[str, Any]]:
    """Alpha-beta fits per (collective, group size) of :func:`collective_instances`, with
    how many ranks (``max_ranks_seen``) and message sizes (``sizes_seen``) each fit saw and
    ``includes_peer_wait``: true when the collective was seen on a single rank, so its
    kernel times include waiting for the peers (the multi-rank minimum over ranks cannot
    remove it). Calls whose kernels cannot be one call (``same_call`` false) are counted
    in ``unmatched_calls`` and left out of ``instances``, the durations and the fit.

    Example:
        allreduce calls of 2 ranks: #0 kernels [0, 10) and [2, 9) -> one call, 7 ns;
        #1 kernels [20, 30) and [40, 45) (rank 1's starts after rank 0's ended) -> not one
        call: instances 1, unmatched_calls 1, duration P50 7 ns (not min(7, 10, 5) = 5).
    """
    out = []
    keyed = inst.with_columns(pl.col("group_size").fill_null(0))
    if "same_call" not in keyed.columns:
        keyed = keyed.with_columns(same_call=pl.lit(None, pl.Boolean))
    for (coll, gs), s_all in sorted(keyed.group_by("collective", "group_size"),
                                    key=lambda x: (str(x[0][0]),
                                                   int(x[0][1]))):  # type: ignore[arg-type]
        s = s_all.filter(pl.col("same_call").fill_null(True))
        sized = s.filter(pl.col("bytes").is_not_null())
        ranks_seen = int(s_all["ranks"].max())  # type: ignore[arg-type]
        out.append({"collective": coll, "group_size": int(gs) or None, "instances": s.height,
                    "unmatched_calls": s_all.height - s.height,
                    "max_ranks_seen": ranks_seen,
                    # distinct message sizes the fit saw (one size: alpha and beta are not
                    # separable)
                    "sizes_seen": int(sized["bytes"].n_unique()),
                    # seen on one rank only: each kernel's time includes waiting for the
                    # peers (no minimum over ranks could remove it), so alpha is inflated
                    "includes_peer_wait": ranks_seen < 2 and (int(gs) or 0) != 1,
                    "duration_ns": _pct(s["dur_ns"].to_numpy()),
                    "fit": fit.alpha_beta(sized["bytes"].to_numpy(), sized["dur_ns"].to_numpy())
                    if sized.height else None})
    return out


# ------------------------------------------------------------------ entry point
def _ceilings(tl: Timeline, model: str, models: pl.DataFrame) -> pl.DataFrame:
    from traceparse.roofline import gpus

    if model == UNKNOWN:
        return gpus.ceilings(ncu=tl.ncu if tl.ncu.height else None)
    r = models.filter(pl.col("device_model") == model).row(0, named=True)
    return gpus.ceilings(ncu=tl.ncu if tl.ncu.height else None, gpu=model,
                         sm_count=r["sm_count"], memory_bytes=r["memory_bytes"])


def scale_calibration(tl: Timeline, roofs: dict[str, float],
                      window: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """The batch the trace ran at and the per-class curves of op time against roofline
    time that ``predict --scale`` uses (:mod:`traceparse.analyses.scale_work`); None
    without recorded shapes."""
    from traceparse.analyses import scale_work

    batch = scale_work.infer_batch(tl)
    if batch is None or not roofs:
        return None
    t = scale_work.op_table(tl, batch, 1.0, roofs)
    if window is not None:
        st = tl.gpu["start_ns"]
        t = t.filter(((st >= window[0]) & (st < window[1])).to_numpy())
    return {"batch": batch[0], "tokens": batch[1],
            "curves": scale_work.fit_curves(scale_work.curve_points(t))}


def calibrate(tl: Timeline, *, window: tuple[int, int] | None = None) -> dict[str, Any]:
    """Calibration of every device model in ``tl`` (see the module docstring).

    Args:
        tl: the timeline (one or many ranks).
        window: optional ``(start_ns, end_ns)``: only GPU activities that start in it (and
            launches whose GPU work starts in it) are used; e.g. calibrate on some steps and
            predict the others.

    Returns:
        A dict following ``analyses/data/calibration.schema.json``.
    """
    from traceparse.roofline import gpus

    models = device_models(tl)
    g = _tag(_in_window(tl.gpu, window), models)
    k = g.filter(pl.col("kind") == "kernel").with_columns(class_expr(), dtype_expr())
    work = _tag(kernel_work(tl), models)
    lt = _tag(_in_window(launch_table(tl), window), models)
    inst = collective_instances(tl)
    if window is not None:
        inst = _in_window(inst, window)
    devices = []
    for model in sorted(set(models["device_model"].to_list())):
        ceil = _ceilings(tl, model, models)
        row = gpus.match(model) if model != UNKNOWN else None
        gm = g.filter(pl.col("device_model") == model)
        km = k.filter(pl.col("device_model") == model)
        mm = models.filter(pl.col("device_model") == model)
        devices.append({
            "device_model": model,
            "ranks": sorted(set(mm["rank"].to_list())),
            "gpus": mm.height,
            "ceiling_table_row": row["name"] if row else None,
            "ceilings": [{**c, "unit": "FLOP/s" if c["kind"] == "compute" else "bytes/s"}
                         for c in ceil.to_dicts()],
            "launch": launch_stats(lt.filter(pl.col("device_model") == model)),
            "kernels": kernel_classes(km, work.filter(pl.col("device_model") == model),
                                      _ceiling_map(ceil)),
            "kernel_table": kernel_table(km),
            "memcpy": copy_fits(gm.filter(pl.col("kind") == "memcpy")),
            "memset": memset_fit(gm.filter(pl.col("kind") == "memset")),
            "collectives": collective_fits(inst.filter(pl.col("device_model") == model)),
            "scale": scale_calibration(tl, _ceiling_map(ceil), window),
        })
    files = tl.sources.select("file", pl.col("format").cast(pl.String)).unique(
        maintain_order=True).to_dicts()
    return {"schema": SCHEMA, "version": VERSION, "generator": f"traceparse {__version__}",
            "sources": files, "window_ns": list(window) if window else None,
            "devices": devices}


def merge(calibrations: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine per-trace calibrations (``calibrate TRACE...``): device entries are listed
    per source; the first entry of a device model is the one :mod:`traceparse.analyses.predict`
    uses."""
    if len(calibrations) == 1:
        return calibrations[0]
    out = dict(calibrations[0])
    out["sources"] = [s for c in calibrations for s in c["sources"]]
    out["devices"] = [d for c in calibrations for d in c["devices"]]
    out["window_ns"] = None
    return out


def _clean(obj: Any) -> Any:
    """Replace non-finite floats by None and numpy scalars by Python numbers (JSON-safe)."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def to_json(calibration: dict[str, Any]) -> str:
    """Serialise a calibration deterministically (sorted keys, NaN/inf as null)."""
    import json

    return json.dumps(_clean(calibration), indent=1, sort_keys=True) + "\n"


def read(path: str) -> dict[str, Any]:
    """Read a calibration file; :class:`~traceparse.errors.TraceError` when it is not one
    (unreadable, not JSON, another schema or version)."""
    import json

    from traceparse.errors import TraceError

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise TraceError(path, f"cannot read calibration: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TraceError(path, f"calibration is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise TraceError(path, f"not a {SCHEMA} file")
    if data.get("version") != VERSION:
        raise TraceError(path, f"calibration version {data.get('version')!r}; this traceparse "
                               f"reads {VERSION}")
    if not isinstance(data.get("devices"), list):
        raise TraceError(path, "calibration has no devices list")
    return data


def schema_path() -> Any:
    """Traversable of the shipped JSON Schema (``analyses/data/calibration.schema.json``)."""
    from importlib import resources

    return resources.files("traceparse.analyses") / "data" / "calibration.schema.json"
