"""Work of each torch op from its recorded shapes, at the traced batch and at a scaled one,
and the per-class curves that turn work into kernel time (docs/calibration.md, "predict
--scale").

**Batch.** The traced batch ``B`` and tokens per sample ``T`` are read off the program's
input: the first recorded tensor of integer type (``long int``: token ids, labels, indices)
in the trace, ``[B, T...]`` (``[B]`` gives ``T = 1``). A tensor **carries the batch** when
its leading dimension is ``B`` or ``B * T`` (activations ``[B, T, D]``, flattened
``[B*T, D]``, attention ``[B, H, T, d]``, a decoder's ``[B, D]``); weights, optimizer state
and masks (``[1, 1, T, T]``) do not. An op is batch-dependent when one of its tensors
carries the batch.

**Work at scale F.** FLOPs from :func:`traceparse.roofline.estimate.op_flops` (GEMM,
attention, convolution; the batch is a factor of exactly one of their index dimensions,
so a batch-dependent op's FLOPs scale by ``F``). Bytes: every tensor input read once plus an
output the size of the largest input (:func:`traceparse.roofline.estimate.memory_op_work`
for its ops, the same count for any other op with tensor inputs); tensors that carry the
batch scale by ``F``, the others not (a GEMV's weight does not grow with the batch, its
activations do).

**Roofline time** of an op: ``max(FLOPs / P, bytes / BW)`` with ``P`` the ceiling of its
precision (the tensor ceiling of its input dtype for GEMM/attention/convolution, FP32 for
the others) and ``BW`` the DRAM ceiling of the calibrated GPU.

**Curves.** Per (kernel class of the op's longest kernel, ceiling name), the op's measured
time (its kernels' summed duration) against its roofline time is fitted by the saturating
efficiency :func:`traceparse.analyses.fit.saturating` (``t = (r + r_half) / e_max``, ``r``
in ns): ``e_max`` is the best fraction of the roofline the class reaches, ``r_half`` the
roofline time at which it reaches half of it (small problems do not fill the GPU).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses import fit
from traceparse.analyses.kclass import class_expr
from traceparse.timeline import Timeline

#: A class needs this many ops with distinct roofline times for a curve of its own.
MIN_POINTS = 3


def infer_batch(tl: Timeline) -> tuple[int, int] | None:
    """``(B, T)`` from the first integer tensor the trace recorded (module docstring);
    None when the trace has no recorded shapes of integer type."""
    ops = (tl.ranges.filter((pl.col("kind").cast(pl.String) == "cpu_op")
                            & pl.col("input_types").str.contains("long int").fill_null(False))
           .sort("start_ns").select("input_dims", "input_types").head(200))
    for dims_s, types_s in ops.iter_rows():
        try:
            dims, types = json.loads(dims_s), json.loads(types_s)
        except (TypeError, ValueError):
            continue
        for d, t in zip(dims, types, strict=False):
            if t == "long int" and isinstance(d, list) and d and all(
                    isinstance(v, int) and v > 0 for v in d):
                return int(d[0]), int(np.prod(d[1:])) if len(d) > 1 else 1
    return None


#: Element size assumed for the tensors of a ``TensorList`` (Kineto records their shapes,
#: not their dtype): the op's first typed tensor's, else 4 bytes.
LIST_ELEMENT_BYTES = 4


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[list[int], int]]:
    """``(shape, element bytes)`` of every tensor input, the members of a ``TensorList``
    (``aten::cat``'s ``[[0], [2, 12, 512, 64]]``) included."""
    from traceparse.roofline.estimate import DTYPES

    def shape(d: Any) -> bool:
        return isinstance(d, list) and bool(d) and all(isinstance(v, int) for v in d)

    out = [(d, DTYPES[t][0]) for d, t in zip(dims, types, strict=False)
           if t in DTYPES and shape(d)]
    elem = out[0][1] if out else LIST_ELEMENT_BYTES
    for d, t in zip(dims, types, strict=False):
        if t == "TensorList" and isinstance(d, list):
            out += [(m, elem) for m in d if shape(m) and int(np.prod(m)) > 0]
    return out


def carries(shape: list[int], batch: tuple[int, int]) -> bool:
    """Whether a tensor of ``shape`` carries the batch (module docstring)."""
    b, t = batch
    return bool(shape) and shape[0] in (b, b * t)


def op_work(name: str, dims: list[Any], types: list[Any], concrete: Any,
            batch: tuple[int, int], factor: float) -> dict[str, Any] | None:
    """Work of one op at the traced batch and at ``factor`` times it: ``{flops, bytes,
    flops_f, bytes_f, batched, precision}`` (``flops`` None without a FLOP model); None
    when the op records no tensor shapes."""
    from traceparse.roofline.estimate import DTYPES, GATHER_OPS, memory_op_work, op_flops

    tens = _tensors(dims, types)
    if not tens:
        return None
    sizes = [float(np.prod(d)) * b for d, b in tens]
    scaled = [s * (factor if carries(d, batch) else 1.0) for (d, _), s in zip(tens, sizes,
                                                                              strict=True)]
    batched = any(carries(d, batch) for d, _ in tens)
    flops = op_flops(name, dims, concrete)
    dt = next((t for t in types if t in DTYPES), None)
    if flops is not None:
        prec = DTYPES[dt][1] if dt else "fp32"
        by, by_f = sum(sizes), sum(scaled)
    else:
        prec = "fp64" if dt == "double" else "fp32"
        mem = memory_op_work(name, dims, types) if name in GATHER_OPS else None
        if mem is not None:  # gathers read the gathered rows, not the table
            flops, by = mem
            by_f = by * (factor if batched else 1.0)
        else:
            i = int(np.argmax(sizes))
            by, by_f = sum(sizes) + sizes[i], sum(scaled) + scaled[i]
    return {"flops": flops, "flops_f": None if flops is None else
            flops * (factor if batched else 1.0), "bytes": by, "bytes_f": by_f,
            "batched": batched, "precision": prec}


def kernel_ops(tl: Timeline) -> pl.DataFrame:
    """Per ``tl.gpu`` row (same order): its launching op (the innermost ``cpu_op`` open
    at its launch call on the calling thread): ``op_name, op_start_ns, op_thread_id,
    input_dims, input_types, concrete_inputs`` (null where none)."""
    from traceparse.links import kernel_ranges

    k = kernel_ranges(tl, kinds=("cpu_op",), gpu_kinds=None).select(
        "rank", pl.col("api_thread_id").alias("thread_id"),
        pl.col("range_name").cast(pl.String).alias("op_name"),
        pl.col("range_start_ns").alias("op_start_ns"), pl.col("range_end_ns").alias("_oe"))
    ops = (tl.ranges.filter(pl.col("kind").cast(pl.String) == "cpu_op")
           .select("rank", "thread_id", pl.col("name").cast(pl.String).alias("op_name"),
                   pl.col("start_ns").alias("op_start_ns"), pl.col("end_ns").alias("_oe"),
                   "input_dims", "input_types", "concrete_inputs")
           .unique(subset=["rank", "thread_id", "op_name", "op_start_ns", "_oe"],
                   keep="first"))
    return (k.join(ops, on=["rank", "thread_id", "op_name", "op_start_ns", "_oe"],
                   how="left", maintain_order="left", nulls_equal=False)
            .rename({"thread_id": "op_thread_id"}).drop("_oe"))


def ceiling_map(ceilings: list[dict[str, Any]]) -> dict[str, float]:
    """``{name: value}`` of a calibration device's ceilings."""
    return {str(c["name"]): float(c["value"]) for c in ceilings if c.get("value")}


def roofline_ns(flops: Any, nbytes: Any, precision: Any, roofs: dict[str, float]
                ) -> np.ndarray:
    """``max(flops / P(precision), bytes / DRAM)`` in ns per row (NaN where neither is
    known); ``P`` falls back to FP32 when the precision has no ceiling."""
    fl = np.asarray(flops, dtype=np.float64)
    by = np.asarray(nbytes, dtype=np.float64)
    peak = np.array([roofs.get(str(p), roofs.get("fp32", np.nan)) for p in precision],
                    dtype=np.float64) if len(precision) else np.zeros(0)
    dram = roofs.get("dram", np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tc = np.where(np.isfinite(fl) & (peak > 0), fl / peak * 1e9, 0.0)
        tm = np.where(np.isfinite(by), by / dram * 1e9, 0.0)
    r = np.maximum(tc, tm)
    return np.where(r > 0, r, np.nan)


def op_table(tl: Timeline, batch: tuple[int, int] | None, factor: float,
             roofs: dict[str, float]) -> pl.DataFrame:
    """Per ``tl.gpu`` row: ``_i``, its op's work (``op_work``), class of the op's longest
    kernel ``kclass``, roofline times ``roof_ns``/``roof_f_ns``, ``op_time_ns`` (summed
    duration of the op's GPU rows) and ``op_id`` (one id per op)."""
    ko = kernel_ops(tl).with_row_index("_i")
    g = tl.gpu.select("kind", "dur_ns", pl.col("name").cast(pl.String), "category")
    ko = pl.concat([ko, g], how="horizontal").with_columns(class_expr())
    has = ko.filter(pl.col("input_dims").is_not_null())
    cache: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    recs = []
    for r in has.select("op_name", "input_dims", "input_types", "concrete_inputs"
                        ).iter_rows():
        w = cache.get(r, ...)  # type: ignore[call-overload]
        if w is ...:
            w = None
            if batch is not None:
                try:
                    w = op_work(str(r[0]), json.loads(r[1]),
                                json.loads(r[2]) if r[2] else [],
                                json.loads(r[3]) if r[3] else None, batch, factor)
                except (TypeError, ValueError):
                    w = None
            cache[r] = w
        recs.append(w or {})
    cols = {"flops": pl.Float64, "flops_f": pl.Float64, "bytes": pl.Float64,
            "bytes_f": pl.Float64, "batched": pl.Boolean, "precision": pl.String}
    wf = pl.DataFrame([{k: rec.get(k) for k in cols} for rec in recs], schema=cols)
    has = pl.concat([has.select("_i"), wf], how="horizontal")
    out = ko.join(has, on="_i", how="left").sort("_i").with_columns(
        pl.struct("rank", "op_thread_id", "op_name", "op_start_ns").rank("dense")
        .alias("op_id"))
    out = out.with_columns(
        pl.when(pl.col("op_name").is_not_null()).then(pl.col("op_id")).alias("op_id"))
    prec = out["precision"].fill_null("fp32").to_list()
    out = out.with_columns(
        pl.Series("roof_ns", roofline_ns(out["flops"].to_numpy(), out["bytes"].to_numpy(),
                                         prec, roofs)),
        pl.Series("roof_f_ns", roofline_ns(out["flops_f"].to_numpy(),
                                           out["bytes_f"].to_numpy(), prec, roofs)))
    per_op = (out.filter(pl.col("op_id").is_not_null())
              .sort("dur_ns", descending=True)
              .group_by("op_id").agg(pl.col("dur_ns").sum().alias("op_time_ns"),
                                     pl.col("kclass").first().alias("op_class")))
    return out.join(per_op, on="op_id", how="left").sort("_i").with_columns(
        _op_class_expr().fill_null(pl.col("op_class")).alias("op_class"))


def _op_class_expr() -> pl.Expr:
    """The class of an op with a FLOP model by its name (GEMM kernels' names vary by
    library and GPU: ``nvjet_*`` on Hopper is not recognisably a GEMM); null for others."""
    from traceparse.roofline.estimate import (
        CONV_BWD_OPS,
        CONV_OPS,
        GROUPED_MM_OPS,
        MATMUL_OPS,
    )

    n = pl.col("op_name")
    return (pl.when(n.is_in(sorted(MATMUL_OPS | GROUPED_MM_OPS | {"aten::_scaled_mm"})))
            .then(pl.lit("gemm"))
            .when(n.is_in(sorted(CONV_OPS | CONV_BWD_OPS))).then(pl.lit("conv"))
            .when(n.str.contains("(?i)attention|flash_attn")).then(pl.lit("attention"))
            .otherwise(pl.lit(None, pl.String)))


def curve_points(table: pl.DataFrame) -> pl.DataFrame:
    """One point per op with a roofline time: ``op_class, precision, roof_ns,
    op_time_ns`` (kernels only; communication left out)."""
    return (table.filter((pl.col("kind").cast(pl.String) == "kernel")
                         & pl.col("roof_ns").is_not_null() & pl.col("roof_ns").is_not_nan()
                         & (pl.col("category").cast(pl.String) != "communication"))
            .group_by("op_id").agg(pl.col("op_class").first(), pl.col("precision").first(),
                                   pl.col("roof_ns").first(), pl.col("op_time_ns").first()))


def fit_curves(points: pl.DataFrame) -> list[dict[str, Any]]:
    """Per (class, precision) with enough points, then per class, then ``all``: the
    saturating fit of op time on roofline time, with what it was fitted on (count,
    roofline-time range, precisions). A fit is kept only when it is determined by its
    points: at least :data:`MIN_POINTS` distinct roofline times and a half-efficiency
    point inside their range (else its class falls back to the pooled curve)."""
    out = []

    def one(cls: str, prec: str, s: pl.DataFrame) -> None:
        r, t = s["roof_ns"].to_numpy(), s["op_time_ns"].to_numpy().astype(float)
        if s.height < MIN_POINTS or np.unique(np.round(r, 1)).size < MIN_POINTS:
            return
        f = fit.saturating(r, t, 1e9)
        # a half-efficiency point beyond every point fitted means the class's time did
        # not grow with its work over the range seen (fixed costs dominate, or the byte
        # estimate does not track the kernels): such a curve cannot say how time grows
        if f["model"] != "saturating" or f["w_half"] > float(r.max()):
            return
        out.append({"class": cls, "precision": prec, "points": s.height,
                    "roof_ns_min": float(r.min()), "roof_ns_max": float(r.max()),
                    "precisions": sorted(set(s["precision"].cast(pl.String).to_list())),
                    "e_max": f["e_max"], "roof_half_ns": f["w_half"],
                    "mape_pct": f["mape_pct"]})

    for (cls, prec), s in sorted(points.group_by("op_class", "precision"),
                                 key=lambda x: (str(x[0][0]), str(x[0][1]))):
        one(str(cls), str(prec), s)
    for (cls,), s in sorted(points.group_by("op_class"), key=lambda x: str(x[0][0])):
        one(str(cls), "any", s)
    if points.height:
        one("all", "any", points)
    return out
