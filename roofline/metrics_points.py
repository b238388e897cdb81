"""Roofline points measured by nsys GPU metrics (provenance
``measured (nsys GPU metrics, sampled at N kHz)``).

For nsys-only traces the GPU's own DRAM throughput counters give each kernel's DRAM traffic
(:func:`traceparse.analyses.metrics.kernel_metrics`): bytes = time-integral of
(read + write %) x the device's peak bandwidth over the kernel's launches, with the bounds
``dram_bytes_lo`` / ``dram_bytes_hi`` that sample edges and counter rounding allow
(docs/metrics.md). GPU metrics carry no FLOP counts, so ``flop_per_s`` is taken from the
``flops`` column of ``flops`` when given (one value per kernel name, e.g. shape estimates);
otherwise it stays null and the point is placed on the bandwidth axis only (``bound``
null; ``dram_pct_of_peak`` says how close to the memory roof it ran).
"""

from __future__ import annotations

import polars as pl

from traceparse.analyses.metrics import kernel_metrics, sample_rate_hz
from traceparse.roofline.model import classify
from traceparse.timeline import Timeline


def provenance(tl: Timeline) -> str:
    """``measured (nsys GPU metrics, sampled at N kHz)`` for ``tl``'s samples."""
    rate = sample_rate_hz(tl.metrics)
    if not rate:
        return "measured (nsys GPU metrics, sampled at an unknown rate)"
    text = f"{rate / 1e6:.3g} MHz" if rate >= 1e6 else f"{rate / 1e3:.3g} kHz"
    return f"measured (nsys GPU metrics, sampled at {text})"


def metrics_points(tl: Timeline, ceil: pl.DataFrame, *, flops: pl.DataFrame | None = None,
                   precision: str = "fp32") -> pl.DataFrame:
    """One roofline point per kernel name from the GPU-metric DRAM samples.

    Args:
        tl: timeline with ``metrics`` and ``devices.memory_bandwidth_bps``.
        ceil: ceilings (``name``, ``value``) from :func:`traceparse.roofline.gpus.ceilings`.
        flops: optional ``kernel_name, flops`` (total FLOPs over the kernel's launches).
        precision: ceiling name the FLOPs are compared with.

    Returns:
        ``kernel_name, launches, time_ns, dram_bytes, dram_bytes_lo, dram_bytes_hi,
        dram_bytes_per_s, dram_bytes_per_s_lo, dram_bytes_per_s_hi, dram_pct_of_peak,
        flop_per_s, precision, peak_flop_per_s, peak_dram_bytes_per_s, provenance`` plus
        the :func:`traceparse.roofline.model.classify` columns; empty without samples.
    """
    km = kernel_metrics(tl)
    if km.height == 0 or "dram_bytes" not in km.columns:
        return pl.DataFrame()
    roof = dict(zip(ceil["name"].to_list(), ceil["value"].to_list(), strict=True)) \
        if ceil.height else {}
    bw = roof.get("dram")
    pts = km.group_by(pl.col("name").alias("kernel_name"), maintain_order=True).agg(
        pl.col("launches").sum(), pl.col("total_ns").sum().cast(pl.Float64).alias("time_ns"),
        pl.col("dram_bytes", "dram_bytes_lo", "dram_bytes_hi").sum())
    secs = pl.col("time_ns") * 1e-9
    pts = pts.with_columns(
        (pl.col("dram_bytes") / secs).alias("dram_bytes_per_s"),
        (pl.col("dram_bytes_lo") / secs).alias("dram_bytes_per_s_lo"),
        (pl.col("dram_bytes_hi") / secs).alias("dram_bytes_per_s_hi"))
    if flops is not None and flops.height:
        pts = pts.join(flops.select("kernel_name", "flops"), on="kernel_name", how="left") \
            .with_columns((pl.col("flops") / secs).alias("flop_per_s")).drop("flops")
    else:
        pts = pts.with_columns(pl.lit(None, dtype=pl.Float64).alias("flop_per_s"))
    pts = pts.with_columns(
        pl.lit(precision).alias("precision"),
        pl.lit(roof.get(precision), pl.Float64).alias("peak_flop_per_s"),
        pl.lit(bw, pl.Float64).alias("peak_dram_bytes_per_s"),
        (pl.col("dram_bytes_per_s") * 100.0 / bw if bw else pl.lit(None, pl.Float64))
        .alias("dram_pct_of_peak"),
        pl.lit(provenance(tl)).alias("provenance"))
    return classify(pts).sort(["time_ns", "kernel_name"], descending=[True, False])


#: ``note`` of a point with DRAM bytes and no FLOPs (see :func:`bandwidth_points`).
BANDWIDTH_ONLY = ("bandwidth-only: nsys GPU metrics measure DRAM bytes, not FLOPs; drawn as "
                  "the line FLOP/s = intensity x its DRAM bandwidth (the kernel lies on it)")


def bandwidth_points(tl: Timeline, ceil: pl.DataFrame) -> pl.DataFrame:
    """:func:`metrics_points` without FLOPs, as roofline rows with ``placed`` and ``note``.

    A kernel with DRAM samples under it is ``placed`` with the note :data:`BANDWIDTH_ONLY`
    (``flop_per_s``, ``ai_dram`` and ``bound`` null: its position along the line is
    unknown; ``precision``, ``peak_flop_per_s`` and ``ridge`` null: no counter says which
    roof applies); one without samples is not placed ("no GPU-metric samples under it").
    """
    pts = metrics_points(tl, ceil)
    if not pts.height:
        return pts
    has = pl.col("dram_bytes_per_s").is_not_null()
    return pts.with_columns(
        pl.lit(None, pl.String).alias("precision"),
        pl.lit(None, pl.Float64).alias("peak_flop_per_s"),
        pl.lit(None, pl.Float64).alias("ridge"),
        pl.lit(None, pl.Float64).alias("attainable_flop_per_s"),
        has.alias("placed"),
        pl.when(has).then(pl.lit(BANDWIDTH_ONLY))
        .otherwise(pl.lit("no GPU-metric samples under this kernel")).alias("note"))
