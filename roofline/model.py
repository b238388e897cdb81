"""Roofline points: achieved FLOP/s, bytes per level, intensity, bound and % of roof.

Measured points come from the ``ncu`` table, whose rates are computed exactly as Nsight
Compute's roofline does (see :mod:`traceparse.ncu_roofline`): per precision
``FLOP/s = (add + mul + 2*fma per cycle) * SM clock``. This module only divides and compares:

* arithmetic intensity per level ``AI_level = FLOP/s / bytes_per_s(level)`` (FLOP/byte; the
  time cancels, so it equals FLOPs / bytes);
* ridge point ``ridge = peak FLOP/s / DRAM bandwidth``;
* attainable ``min(peak, AI_dram * bandwidth)`` and ``pct_of_roof = FLOP/s / attainable``;
* bound: ``latency`` when both FLOP/s < ``latency_fraction`` * peak and DRAM B/s <
  ``latency_fraction`` * bandwidth; else ``compute`` when AI_dram >= ridge, else ``memory``.

Provenance is ``measured (ncu)`` for these points; estimated points come from
:mod:`traceparse.roofline.estimate` and are never mixed in silently (the column says which is
which).
"""

from __future__ import annotations

import polars as pl

#: ncu precision -> ceiling name used for its compute roof.
PRECISION_ROOF = {"fp64": "fp64", "fp32": "fp32", "fp16": "fp16", "tensor": "fp16_tensor"}
MEASURED = "measured (ncu)"


def _roof(ceil: pl.DataFrame, name: str) -> float | None:
    hit = ceil.filter(pl.col("name") == name)
    if hit.height:
        return float(hit["value"][0])
    if name == "fp16_tensor":  # tensor roof: bf16 when fp16 is not listed
        return _roof(ceil, "bf16_tensor") if "bf16_tensor" in ceil["name"].to_list() else None
    return None


def measured_points(ncu: pl.DataFrame, ceil: pl.DataFrame, *, by: str = "kernel",
                    latency_fraction: float = 0.05) -> pl.DataFrame:
    """Roofline points from ncu launches.

    Args:
        ncu: the timeline's ``ncu`` table.
        ceil: ceilings from :func:`traceparse.roofline.gpus.ceilings`.
        by: ``"launch"`` (one point per launch) or ``"kernel"`` (launches of one kernel name
            merged: rates weighted by duration, i.e. total work / total time).
        latency_fraction: below this fraction of both roofs a kernel is ``latency`` bound.

    Example (one FP32 launch; peaks 10 TFLOP/s, 1 TB/s; ridge 10 FLOP/B):
        >>> n = pl.DataFrame({"kernel_name": ["k"], "launch_id": [0], "dur_ns": [1e6],
        ...     "fp64_flop_per_s": [0.0], "fp32_flop_per_s": [2e12], "fp16_flop_per_s": [None],
        ...     "tensor_flop_per_s": [None], "dram_bytes_per_s": [5e11],
        ...     "l2_bytes_per_s": [None], "l1_bytes_per_s": [None]})
        >>> c = pl.DataFrame({"name": ["fp32", "dram"], "value": [1e13, 1e12]})
        >>> measured_points(n, c).select("ai_dram", "bound", "pct_of_roof").row(0)
        (4.0, 'memory', 50.0)
    """
    rates = ["fp64_flop_per_s", "fp32_flop_per_s", "fp16_flop_per_s", "tensor_flop_per_s",
             "dram_bytes_per_s", "l2_bytes_per_s", "l1_bytes_per_s"]
    f = ncu.filter(pl.col("dur_ns").is_not_null() & (pl.col("dur_ns") > 0))
    if by == "kernel":
        w = pl.col("dur_ns")
        f = (f.group_by("kernel_name", maintain_order=True)
             .agg(pl.len().alias("launches"), w.sum().alias("time_ns"),
                  *[((pl.col(r) * w).sum() / w.filter(pl.col(r).is_not_null()).sum())
                    .alias(r) for r in rates],
                  *[pl.col(r).is_not_null().any().alias(f"_has_{r}") for r in rates])
             .with_columns([pl.when(pl.col(f"_has_{r}")).then(pl.col(r)).otherwise(None)
                            .alias(r) for r in rates])
             .drop([f"_has_{r}" for r in rates]))
    else:
        f = f.select(pl.col("kernel_name"), pl.col("launch_id"), pl.lit(1).alias("launches"),
                     pl.col("dur_ns").alias("time_ns"), *rates)
    prec = ["fp64", "fp32", "fp16", "tensor"]
    best = pl.concat_list([pl.col(f"{p}_flop_per_s").fill_null(-1.0) for p in prec])
    f = f.with_columns(
        best.list.arg_max().replace_strict(dict(enumerate(prec)), return_dtype=pl.String)
        .alias("precision"),
        best.list.max().alias("flop_per_s"))
    f = f.with_columns(pl.when(pl.col("flop_per_s") < 0).then(None)
                       .otherwise(pl.col("flop_per_s")).alias("flop_per_s"))
    roofs = {p: _roof(ceil, r) for p, r in PRECISION_ROOF.items()}
    bw = _roof(ceil, "dram")
    f = f.with_columns(
        pl.col("precision").replace_strict(roofs, default=None, return_dtype=pl.Float64)
        .alias("peak_flop_per_s"),
        pl.lit(bw, pl.Float64).alias("peak_dram_bytes_per_s"))
    return classify(f.with_columns(pl.lit(MEASURED).alias("provenance")),
                    latency_fraction=latency_fraction)


def classify(points: pl.DataFrame, *, latency_fraction: float = 0.05) -> pl.DataFrame:
    """Add intensities, ridge, attainable, % of roof and bound to a point frame with
    ``flop_per_s``, ``dram_bytes_per_s`` (+ optional ``l2_/l1_bytes_per_s``),
    ``peak_flop_per_s`` and ``peak_dram_bytes_per_s``."""
    def safe_div(a: pl.Expr, b: pl.Expr) -> pl.Expr:
        return pl.when(b > 0).then(a / b).otherwise(None)

    for lvl in ("l2", "l1"):
        if f"{lvl}_bytes_per_s" not in points.columns:
            points = points.with_columns(pl.lit(None, pl.Float64).alias(f"{lvl}_bytes_per_s"))
    fl, dr = pl.col("flop_per_s"), pl.col("dram_bytes_per_s")
    pk, bw = pl.col("peak_flop_per_s"), pl.col("peak_dram_bytes_per_s")
    out = points.with_columns(
        safe_div(fl, dr).alias("ai_dram"),
        safe_div(fl, pl.col("l2_bytes_per_s")).alias("ai_l2"),
        safe_div(fl, pl.col("l1_bytes_per_s")).alias("ai_l1"),
        safe_div(pk, bw).alias("ridge"),
    )
    attain = pl.min_horizontal(pk, pl.col("ai_dram") * bw)
    latency = (fl < latency_fraction * pk) & (dr < latency_fraction * bw)
    return out.with_columns(
        attain.alias("attainable_flop_per_s"),
        safe_div(fl * 100.0, attain).alias("pct_of_roof"),
        pl.when(pk.is_null() | bw.is_null() | fl.is_null() | dr.is_null()).then(None)
        .when(latency).then(pl.lit("latency"))
        .when(pl.col("ai_dram") >= pl.col("ridge")).then(pl.lit("compute"))
        .otherwise(pl.lit("memory")).alias("bound"),
    )
