"""Nsight Compute CSV -> Timeline (``ncu``, ``devices``, ``sources``, ``ingest`` tables).

:func:`read` accepts every page kind (raw, raw with ``--print-units base``, details, roofline
section details) and detects it from the header (:mod:`traceparse.ncu.csv`). Each launch
becomes one ``ncu`` row with identity (kernel name, launch index, grid/block, device), the
duration, clocks, SpeedOfLight percentages and the roofline inputs
(:mod:`traceparse.ncu.roofline`), all in base units whatever the page printed.

Example:
    >>> tl = read("report.raw.csv")                                    # doctest: +SKIP
    >>> tl.ncu.select("launch_id", "kernel_name", "dur_ns", "fp32_flop_per_s")  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import polars as pl

from traceparse import schema
from traceparse.ncu.csv import NcuPage, read_page
from traceparse.ncu.roofline import roofline_exprs
from traceparse.timeline import Timeline, ingest_frame, ingest_rows

#: Metrics whose *text* is kept (string-valued).
TEXT_METRICS = ("device__attribute_display_name",)

#: ncu column -> metric identifier (plain copies, base units).
COPY: dict[str, str | tuple[str, ...]] = {
    "dur_ns": "gpu__time_duration.sum",
    "sm_clock_hz": ("gpc__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second",
                    "sm__cycles_elapsed.avg.per_second"),
    "dram_clock_hz": "dram__cycles_elapsed.avg.per_second",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
}


def wide_metrics(page: NcuPage) -> pl.DataFrame:
    """One row per launch, one Float64 column per metric identifier (first value wins when a
    details page repeats a metric in several sections). NaN (an empty ncu result) -> null."""
    num = (page.metrics.filter(pl.col("metric").is_not_null() & pl.col("value").is_not_null())
           .unique(["launch_id", "metric"], keep="first", maintain_order=True)
           .with_columns(pl.when(pl.col("value").is_nan()).then(None)
                         .otherwise(pl.col("value")).alias("value")))
    ids = page.launches.select("launch_id")
    if num.height == 0:
        return ids
    wide = num.pivot(on="metric", index="launch_id", values="value")
    return ids.join(wide, on="launch_id", how="left")


def _text_metric(page: NcuPage, name: str) -> pl.DataFrame:
    return (page.metrics.filter(pl.col("metric") == name)
            .unique("launch_id", keep="first", maintain_order=True)
            .select("launch_id", pl.col("text").str.strip_chars().alias(name)))


def _dims(col: str, prefix: str) -> list[pl.Expr]:
    """``"(256, 1, 1)"`` -> ``{prefix}_x/_y/_z`` Int32 (null when absent or unparsable)."""
    parts = (pl.col(col).str.strip_chars("() ").str.split(",")
             .list.eval(pl.element().str.strip_chars().cast(pl.Int32, strict=False)))
    return [parts.list.get(i, null_on_oob=True).alias(f"{prefix}_{a}")
            for i, a in enumerate("xyz")]


def _ncu_frame(page: NcuPage, rank: int) -> pl.DataFrame:
    wide = wide_metrics(page)
    cols = set(wide.columns)
    exprs = roofline_exprs(cols)

    def pick(src: str | tuple[str, ...]) -> pl.Expr:
        names = (src,) if isinstance(src, str) else src
        have = [pl.col(n) for n in names if n in cols]
        return pl.coalesce(have) if have else pl.lit(None, pl.Float64)

    wide = wide.with_columns(
        *[e.alias(k) for k, e in exprs.items()],
        *[pick(src).alias(k) for k, src in COPY.items()],
        *[pick(f"launch__{k}").alias(f"_l_{k}") for k in
          ("grid_dim_x", "grid_dim_y", "grid_dim_z", "block_dim_x", "block_dim_y",
           "block_dim_z")],
        pick("device__attribute_compute_capability_major").alias("_ccmaj"),
        pick("device__attribute_compute_capability_minor").alias("_ccmin"),
    )
    keep = ["launch_id", *exprs, *COPY, "_ccmaj", "_ccmin", *[c for c in wide.columns
                                                          if c.startswith("_l_")]]
    wide = wide.select(keep)
    ident = page.launches
    out = ident.join(wide, on="launch_id", how="left")
    for name in TEXT_METRICS:
        out = out.join(_text_metric(page, name), on="launch_id", how="left") \
            if name not in out.columns else out
    if "device__attribute_display_name" not in out.columns:
        out = out.with_columns(pl.lit(None, pl.String).alias("device__attribute_display_name"))
    cc_attr = pl.when(pl.col("_ccmaj").is_not_null()).then(
        pl.format("{}.{}", pl.col("_ccmaj").cast(pl.Int64), pl.col("_ccmin").cast(pl.Int64)))
    out = out.with_columns(
        *_dims("grid_size", "grid"), *_dims("block_size", "block"),
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.col("kernel_name").str.strip_chars().alias("kernel_name"),
        pl.col("process_id").cast(pl.Int64, strict=False),
        pl.col("context").cast(pl.Int64, strict=False).alias("context_id"),
        pl.col("stream").cast(pl.Int64, strict=False).alias("stream_id"),
        pl.col("device").cast(pl.Int32, strict=False).fill_null(0).alias("device_id"),
        pl.col("device__attribute_display_name").alias("device_name"),
        pl.coalesce(pl.col("cc").str.strip_chars().replace("", None), cc_attr).alias("cc"),
        pl.lit(page.kind).alias("source_page"),
    )
    # Grid/Block columns absent (old versions): use launch__grid_dim_* when collected.
    out = out.with_columns(
        *[pl.coalesce(pl.col(f"{p}_{a}"), pl.col(f"_l_{p}_dim_{a}").cast(pl.Int32))
          .alias(f"{p}_{a}") for p in ("grid", "block") for a in "xyz"])
    # An empty result (replay failed) prints (0, 0, 0): not a real launch shape.
    for p in ("grid", "block"):
        zero = (pl.col(f"{p}_x") == 0) & (pl.col(f"{p}_y") == 0) & (pl.col(f"{p}_z") == 0)
        out = out.with_columns([pl.when(zero).then(None).otherwise(pl.col(f"{p}_{a}"))
                                .alias(f"{p}_{a}") for a in "xyz"])
    names = [c.name for c in schema.NCU]
    return schema.conform("ncu", out.select([c for c in names if c in out.columns]))


def _devices(page: NcuPage, ncu: pl.DataFrame, rank: int) -> pl.DataFrame:
    wide = wide_metrics(page)
    cols = set(wide.columns)
    a = "device__attribute_"

    def m(name: str) -> pl.Expr:
        return pl.col(a + name) if a + name in cols else pl.lit(None, pl.Float64)

    mem_khz = pl.coalesce(m("max_mem_frequency_khz"), m("memory_clock_rate"))
    attrs = wide.select(
        "launch_id",
        m("multiprocessor_count").cast(pl.Int32).alias("sm_count"),
        (pl.coalesce(m("max_gpu_frequency_khz"), m("clock_rate")) * 1e3).cast(pl.Int64)
        .alias("clock_hz"),
        m("total_memory").cast(pl.Int64).alias("memory_bytes"),
        (mem_khz * 1e3 * 2 * m("global_memory_bus_width") / 8).alias("memory_bandwidth_bps"),
        m("l2_cache_size").cast(pl.Int64).alias("l2_bytes"),
    )
    dev = (ncu.select("launch_id", "device_id", pl.col("device_name").alias("name"), "cc")
           .join(attrs, on="launch_id", how="left")
           .sort("launch_id").unique("device_id", keep="first", maintain_order=True)
           .with_columns(
               pl.lit(rank, pl.Int32).alias("rank"), pl.lit("nvidia").alias("vendor"),
               pl.col("cc").str.split(".").list.get(0, null_on_oob=True)
               .cast(pl.Int32, strict=False).alias("compute_major"),
               pl.col("cc").str.split(".").list.get(1, null_on_oob=True)
               .cast(pl.Int32, strict=False).alias("compute_minor"))
           .drop("launch_id", "cc"))
    return schema.conform("devices", dev)


def _ingest(page: NcuPage, rank: int, n_launch: int) -> pl.DataFrame:
    source = f"ncu {page.kind} page"
    skipped = dict(page.skipped)
    if page.kind.startswith("raw"):
        rows = ingest_rows(rank, "ncu", source + " launch rows", n_launch, skipped)
    else:
        if page.rules:
            skipped["rule row (advice text, not a metric)"] = page.rules
        rows = ingest_rows(rank, "ncu", source + " rows", page.metrics.height, skipped)
    return ingest_frame(rows)


def read(path: str | os.PathLike[str], *, rank: int = 0) -> Timeline:
    """Read one Nsight Compute CSV (any page) into a validated :class:`Timeline`.

    Args:
        path: the CSV file (``ncu --csv`` output, or ``ncu --import R --csv --page ...``).
        rank: rank to stamp on every row.

    Raises:
        TraceError: no ncu CSV in the file (e.g. an ncu error log saved as .csv), empty
            file, header without ``ID``/``Kernel Name``, or no launch rows.
    """
    page = read_page(path)
    ncu = _ncu_frame(page, rank)
    devices = _devices(page, ncu, rank)
    sources = schema.conform("sources", pl.DataFrame({
        "rank": [rank], "file": [Path(path).name], "format": ["ncu-csv"],
        "format_version": [page.kind]}))
    meta = {"ncu_page": page.kind, "ncu_log_lines": page.log_lines,
            "ncu_empty_results": int(ncu["dur_ns"].is_null().sum())}
    tl = Timeline(ncu=ncu, devices=devices, sources=sources,
                  ingest=_ingest(page, rank, ncu.height), meta=meta)
    return tl.validate()


def finite(x: float | None) -> bool:
    """True for a real number (not None, NaN or inf)."""
    return x is not None and math.isfinite(x)
