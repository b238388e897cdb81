"""``nsys stats``-compatible summaries over any :class:`~traceparse.timeline.Timeline`.

Pure functions: each takes a Timeline (from any source format) and returns a polars frame
with exactly the columns ``nsys stats`` prints (FORMATS.md A.16):

* :func:`kern_sum` - ``cuda_gpu_kern_sum``;
* :func:`mem_time_sum` - ``cuda_gpu_mem_time_sum``;
* :func:`mem_size_sum` - ``cuda_gpu_mem_size_sum`` (MB = 10**6 bytes);
* :func:`api_sum` - ``cuda_api_sum``.

Semantics: Total = sum of durations; Avg = mean; Med = median (mean of the two middle
values for an even count); StdDev = sample standard deviation (n - 1; 0 for one
instance); Time (%) = Total / sum of all Totals x 100. Rows are sorted by Total
descending. Values are already rounded **half up** to the printed precision (1 decimal for
ns columns and Time (%), 3 for MB) with exact integer arithmetic where the value is a
ratio of integers, so printing them with ``f"{x:.1f}"`` gives nsys's text.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from traceparse.timeline import Timeline

NameChoice = Literal["demangled", "short"]
ByChoice = Literal["device", "stream"] | None

#: Decimal places nsys prints per column (for renderers).
DECIMALS_NS = {"Time (%)": 1, "Avg (ns)": 1, "Med (ns)": 1, "StdDev (ns)": 1}
DECIMALS_MB = {"Total (MB)": 3, "Avg (MB)": 3, "Med (MB)": 3, "Min (MB)": 3, "Max (MB)": 3,
               "StdDev (MB)": 3}

_BY_COLS = {"device": ("device_id", "Device"), "stream": ("stream_id", "Stream")}


def _ratio_half_up(num: pl.Expr, den: pl.Expr, scale: int) -> pl.Expr:
    """``round_half_up(num / den, log10(scale))`` for non-negative integers, exactly.

    ``floor((2 * num * scale + den) / (2 * den)) / scale``.
    """
    n = num.cast(pl.Int128) * (2 * scale) + den.cast(pl.Int128)
    digits = len(str(scale)) - 1
    # the quotient is on the 1/scale grid; .round() only removes the binary-division error
    return ((n // (den.cast(pl.Int128) * 2)).cast(pl.Float64) / scale).round(digits)


#: Public name of the exact half-up ratio (the chunked kernel summary rounds with it too).
ratio_half_up = _ratio_half_up


def _float_half_up(x: pl.Expr, scale: int) -> pl.Expr:
    return ((x * scale + 0.5).floor() / scale).round(len(str(scale)) - 1)


def _stats(frame: pl.DataFrame, value: str, keys: list[str], *, scale: int,
           divisor: int = 1) -> pl.DataFrame:
    """Total, Count, Avg, Med, Min, Max, StdDev of ``value`` per ``keys`` (raw numbers).

    With ``divisor`` > 1 (bytes -> MB) every statistic is divided and rounded to
    ``1/scale``; Total/Min/Max stay integers when ``divisor`` is 1.
    """
    v = pl.col(value)
    agg = frame.group_by(keys).agg(
        total=v.sum(), count=v.len(), vmin=v.min(), vmax=v.max(),
        # median of integers: (a + b) / 2 exactly -> keep twice the median as an integer
        med2=(v.sort().gather((v.len() - 1) // 2) + v.sort().gather(v.len() // 2)).first(),
        std=v.cast(pl.Float64).std(ddof=1).fill_null(0.0).fill_nan(0.0),
    )
    d = pl.lit(divisor, dtype=pl.Int64)
    out = agg.with_columns(
        avg=_ratio_half_up(pl.col("total"), pl.col("count") * d, scale),
        med=_ratio_half_up(pl.col("med2"), d * 2, scale),
        std=_float_half_up(pl.col("std") / divisor, scale),
    )
    if divisor != 1:
        out = out.with_columns(
            total=_ratio_half_up(pl.col("total"), d, scale),
            vmin=_ratio_half_up(pl.col("vmin"), d, scale),
            vmax=_ratio_half_up(pl.col("vmax"), d, scale))
    return out


def _pct(frame: pl.DataFrame) -> pl.Expr:
    grand = pl.lit(max(int(frame["total"].sum() or 0), 1), dtype=pl.Int64)
    return _ratio_half_up(pl.col("total").cast(pl.Int128) * 100, grand, 10)


def _group_keys(name_col: str, by: ByChoice) -> tuple[list[str], list[pl.Expr]]:
    """Grouping keys (the name, plus the ``--by`` column) and the printed ``--by`` column."""
    if by is None:
        return [name_col], []
    col, title = _BY_COLS[by]
    return [name_col, col], [pl.col(col).alias(title)]


def _summary(frame: pl.DataFrame, value: str, name_col: str, label: str, count_label: str,
             by: ByChoice) -> pl.DataFrame:
    keys, _ = _group_keys(name_col, by)
    if frame.height == 0:
        stats = pl.DataFrame(schema={k: frame.schema[k] for k in keys} | {
            "total": pl.Int64, "count": pl.UInt32, "avg": pl.Float64, "med": pl.Float64,
            "vmin": pl.Int64, "vmax": pl.Int64, "std": pl.Float64})
    else:
        stats = _stats(frame, value, keys, scale=10)
    return finish_summary(stats, name_col, label, count_label, by)


def finish_summary(stats: pl.DataFrame, name_col: str, label: str, count_label: str,
                   by: ByChoice) -> pl.DataFrame:
    """The printed frame of per-group ``total, count, avg, med, vmin, vmax, std`` (as
    :func:`_stats` makes them, or :mod:`traceparse.analyses.chunked` from merged chunks):
    Time (%), the nsys column names, sorted by Total descending."""
    _, extra = _group_keys(name_col, by)
    stats = stats.with_columns(pct=_pct(stats) if stats.height else pl.lit(0.0))
    stats = stats.sort(["total", "count", name_col], descending=[True, True, False])
    return stats.select(
        pl.col("pct").alias("Time (%)"),
        pl.col("total").cast(pl.Int64).alias("Total Time (ns)"),
        pl.col("count").cast(pl.Int64).alias(count_label),
        pl.col("avg").alias("Avg (ns)"), pl.col("med").alias("Med (ns)"),
        pl.col("vmin").cast(pl.Int64).alias("Min (ns)"),
        pl.col("vmax").cast(pl.Int64).alias("Max (ns)"),
        pl.col("std").alias("StdDev (ns)"), *extra,
        pl.col(name_col).cast(pl.String).alias(label))


def kern_sum(tl: Timeline, *, name: NameChoice = "demangled", by: ByChoice = None
             ) -> pl.DataFrame:
    """``cuda_gpu_kern_sum``: kernel time per kernel name (optionally per device/stream).

    Args:
        tl: any timeline.
        name: ``"demangled"`` (full name, nsys default) or ``"short"`` (``:base``: base
            name, falling back to the full name where a source has none).
        by: also group by ``"device"`` or ``"stream"`` (adds a Device / Stream column).

    Example (two launches of ``k`` of 10 and 30 ns, one of ``m`` of 20 ns):
        Time (%) 66.7 / 33.3; ``k``: Total 40, Instances 2, Avg 20.0, Med 20.0,
        Min 10, Max 30, StdDev 14.1 (sqrt(((10-20)^2 + (30-20)^2) / 1)).
    """
    # only the columns the summary reads: filtering all of gpu would copy every column
    k = tl.gpu.lazy().filter(pl.col("kind") == "kernel").select(
        "name", "short_name", "dur_ns", *(c for c, _ in _BY_COLS.values())).collect()
    col = "name"
    if name == "short":
        k = k.with_columns(_n=pl.coalesce(pl.col("short_name").cast(pl.String),
                                          pl.col("name").cast(pl.String)))
        col = "_n"
    return _summary(k, "dur_ns", col, "Name", "Instances", by)


def _memops(tl: Timeline) -> pl.DataFrame:
    return tl.gpu.filter(pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"]))


def mem_time_sum(tl: Timeline, *, by: ByChoice = None) -> pl.DataFrame:
    """``cuda_gpu_mem_time_sum``: time per memory operation (``[CUDA memcpy ...]``)."""
    return _summary(_memops(tl), "dur_ns", "name", "Operation", "Count", by)


def mem_size_sum(tl: Timeline, *, by: ByChoice = None) -> pl.DataFrame:
    """``cuda_gpu_mem_size_sum``: bytes per memory operation, in MB (10**6 bytes).

    Example: 3 HtoD copies of 1,000,000 / 1,000,000 / 500,000 bytes -> Total 2.500,
    Count 3, Avg 0.833, Med 1.000, Min 0.500, Max 1.000, StdDev 0.289.
    """
    m = _memops(tl).filter(pl.col("bytes").is_not_null())
    keys, extra = _group_keys("name", by)
    if m.height == 0:
        stats = pl.DataFrame(schema={k: m.schema[k] for k in keys} | {
            "total": pl.Float64, "count": pl.UInt32, "avg": pl.Float64, "med": pl.Float64,
            "vmin": pl.Float64, "vmax": pl.Float64, "std": pl.Float64, "raw": pl.Int64})
    else:
        raw = m.group_by(keys).agg(raw=pl.col("bytes").sum())
        stats = _stats(m, "bytes", keys, scale=1000, divisor=10**6).join(raw, on=keys)
    stats = stats.sort(["raw", "count", "name"], descending=[True, True, False])
    return stats.select(
        pl.col("total").alias("Total (MB)"), pl.col("count").cast(pl.Int64).alias("Count"),
        pl.col("avg").alias("Avg (MB)"), pl.col("med").alias("Med (MB)"),
        pl.col("vmin").alias("Min (MB)"), pl.col("vmax").alias("Max (MB)"),
        pl.col("std").alias("StdDev (MB)"), *extra,
        pl.col("name").cast(pl.String).alias("Operation"))


def strip_api_version(name: pl.Expr) -> pl.Expr:
    """Drop a trailing ``_v`` + exactly four digits (``cudaMalloc_v3020`` -> ``cudaMalloc``;
    ``cudaLaunchKernelExC_v11060`` and ``cuMemAlloc_v2`` stay)."""
    return name.str.replace(r"_v[0-9]{4}$", "")


def api_sum(tl: Timeline) -> pl.DataFrame:
    """``cuda_api_sum``: time per host API (runtime + driver), grouped by the raw name (the
    string nsys groups by) and printed with the four-digit version suffix stripped."""
    out = _summary(tl.api, "dur_ns", "name", "Name", "Num Calls", None)
    return out.with_columns(strip_api_version(pl.col("Name")))
