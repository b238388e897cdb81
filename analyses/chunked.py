"""Analyses that work on pieces of a trace and merge exactly (pure functions).

Two results, each as a *partial* (what one piece contributes), a *merge* (associative, so
pieces can be reduced in any grouping, on Dask workers or in one loop) and a *finish*:

**Kernel summary** (``kernels``, :func:`traceparse.analyses.nsys_stats.kern_sum`): the
partial of a set of kernel rows is their exact histogram, one row per distinct (name,
``--by`` key, duration) with its count (:func:`kernel_histogram`); merging adds counts
(:func:`merge_histograms`). Every printed statistic follows exactly from it
(:func:`kern_sum_from_histogram`): Total and Count are sums, Min and Max the extreme
durations, the median the middle duration(s) found by cumulative counts, the sample
standard deviation from the integer moments ``n, sum(d), sum(d^2)`` with exact integer
arithmetic, rounded half up like the in-memory path. Memory: one row per distinct duration
of each name (16-24 bytes a row plus the name), never more rows than kernels; on the
scaled instant-ngp exports 8-9% of the kernel count (see docs/performance.md).

**GPU-only breakdown** (``breakdown --gpu-only``): per ``(rank, device_id)`` the time some
compute kernel ran, the communication not under compute, the memory operations under
neither, the communication under compute, and the rest of the window (no GPU activity:
the launch overhead, warm-up, host sync and idle of :func:`~traceparse.analyses.
attribution.breakdown` together). Pieces are **time windows**: a window's partial
(:func:`window_parts`) clips every activity to ``[t0, t1)`` and measures unions of
intervals inside it, so lengths from different windows never overlap and add up exactly;
an activity crossing an edge is read by both windows and each keeps its own part. The
group's window (first start, last end) comes from the activities that *start* in the
piece, each counted once. A partial is one row per group: nothing else is carried.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import isqrt

import polars as pl

from traceparse.analyses import nsys_stats
from traceparse.analyses.nsys_stats import ByChoice, NameChoice

_BY_COL = {"device": "device_id", "stream": "stream_id"}
#: Columns of a kernel histogram besides the keys.
_HIST = ("dur_ns", "n")


def kernel_keys(name: NameChoice, by: ByChoice) -> list[str]:
    """The key columns of a kernel histogram: ``name`` (the printed name as a String) and
    the ``--by`` column."""
    return ["name"] + ([_BY_COL[by]] if by else [])


def kernel_histogram(gpu: pl.DataFrame, *, name: NameChoice = "demangled",
                     by: ByChoice = None) -> pl.DataFrame:
    """The exact duration histogram of the kernels of ``gpu`` (rows of kind ``kernel``):
    key columns (:func:`kernel_keys`), ``dur_ns`` and ``n`` (how many kernels of that key
    lasted exactly ``dur_ns``)."""
    k = gpu.lazy().filter(pl.col("kind") == "kernel")
    label = (pl.coalesce(pl.col("short_name").cast(pl.String), pl.col("name").cast(pl.String))
             if name == "short" else pl.col("name").cast(pl.String))
    keys = kernel_keys(name, by)
    return (k.select(label.alias("name"), *(pl.col(c) for c in keys[1:]), "dur_ns")
            .group_by([*keys, "dur_ns"]).agg(pl.len().cast(pl.Int64).alias("n"))
            .collect())


def merge_histograms(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Kernel histograms of disjoint sets of kernels -> the histogram of their union."""
    parts = [p for p in parts if p.height] or list(parts[:1])
    if len(parts) == 1:
        return parts[0]
    keys = [c for c in parts[0].columns if c not in _HIST]
    return (pl.concat(parts, how="vertical").group_by([*keys, "dur_ns"])
            .agg(pl.col("n").sum()))


def _std_tenths(n: int, s1: int, s2: int) -> int:
    """``round_half_up(10 * sample_std)`` of ``n`` integers with sum ``s1`` and sum of
    squares ``s2``, exactly: the largest ``m`` with ``(2m - 1)^2 <= 400 var``."""
    if n < 2:
        return 0
    num, den = n * s2 - s1 * s1, n * (n - 1)  # var = num / den
    return (isqrt(400 * num // den) + 1) // 2


def kern_sum_from_histogram(hist: pl.DataFrame, *, name: NameChoice = "demangled",
                            by: ByChoice = None) -> pl.DataFrame:
    """:func:`traceparse.analyses.nsys_stats.kern_sum` of the kernels a histogram
    describes (the same frame, value for value)."""
    keys = kernel_keys(name, by)
    d, n = pl.col("dur_ns").cast(pl.Int128), pl.col("n").cast(pl.Int128)
    h = hist.sort([*keys, "dur_ns"], nulls_last=True).with_columns(
        pl.col("n").cum_sum().over(keys).alias("_cum"))
    count = pl.col("n").sum()
    agg = h.group_by(keys).agg(
        total=(d * n).sum().cast(pl.Int64), count=count.cast(pl.UInt32),
        vmin=pl.col("dur_ns").min(), vmax=pl.col("dur_ns").max(),
        # the durations at 0-based ranks (count - 1) // 2 and count // 2
        _lo=pl.col("dur_ns").filter(pl.col("_cum") > (count - 1) // 2).first(),
        _hi=pl.col("dur_ns").filter(pl.col("_cum") > count // 2).first(),
        _s1=(d * n).sum(), _s2=(d * d * n).sum())
    tenths = [_std_tenths(int(c), int(a), int(b)) for c, a, b in
              zip(agg["count"], agg["_s1"], agg["_s2"], strict=True)]
    stats = agg.with_columns(
        avg=nsys_stats.ratio_half_up(pl.col("total"), pl.col("count").cast(pl.Int64), 10),
        med=nsys_stats.ratio_half_up(pl.col("_lo") + pl.col("_hi"), pl.lit(2, pl.Int64), 10),
        std=(pl.Series(tenths, dtype=pl.Float64) / 10).round(1),
    ).drop("_lo", "_hi", "_s1", "_s2")
    if by:
        # the in-memory sort leaves ties of (total, count, name) in group order: order
        # those by the --by column here (a tie needs the same name, count and total)
        stats = stats.sort(keys[1], nulls_last=True)
    out = nsys_stats.finish_summary(stats, "name", "Name", "Instances", by)
    return out


# ---------------------------------------------------------------- GPU-only breakdown

GROUP = ["rank", "device_id"]
#: Union lengths measured per window: compute; compute or communication; any busy
#: category; communication.
_UNIONS = {"_c": ("compute",), "_cm": ("compute", "communication"),
           "_all": ("compute", "communication", "memory"), "_m": ("communication",)}
#: Columns of a window partial besides the group.
PARTIAL = ("first_ns", "last_ns", *_UNIONS)


def _union_lengths(seg: pl.DataFrame, cats: Sequence[str]) -> pl.DataFrame:
    """Per group, the length of the union of the ``[s, e)`` of ``seg`` rows whose category
    is in ``cats`` (``seg`` sorted by group then ``s``)."""
    f = seg.filter(pl.col("category").is_in(list(cats)))
    if f.height == 0:
        return f.select(*GROUP, pl.col("s").alias("_len")).clear()
    # each interval adds what reaches past everything before it in its group
    f = f.with_columns(pl.col("e").cum_max().over(GROUP).alias("_reach"))
    f = f.with_columns(pl.col("_reach").shift(1).over(GROUP).alias("_before"))
    add = (pl.col("_reach") - pl.max_horizontal("s", pl.col("_before").fill_null(pl.col("s"))))
    return f.group_by(GROUP).agg(add.clip(0).sum().alias("_len"))


def window_parts(acts: pl.DataFrame, t0: int, t1: int) -> pl.DataFrame:
    """The partial GPU-only breakdown of the window ``[t0, t1)``.

    ``acts``: GPU activities (``rank``, ``device_id``, ``start_ns``, ``end_ns``,
    ``category``; rows of category ``sync`` are ignored) that include every activity
    overlapping the window or starting in it (others may be present: they are cut away).

    Returns one row per group: ``first_ns``/``last_ns`` (the first start and last end of the
    activities starting in the window; null when none does) and the union lengths inside
    the window ``_c`` (compute), ``_cm`` (compute or communication), ``_all`` (any busy
    category) and ``_m`` (communication).

    Example (t0=100, t1=200): a compute kernel [50, 150) and a copy [120, 250) -> ``_c`` 50,
    ``_cm`` 50, ``_all`` 100, ``_m`` 0; first/last come from the copy only: 120 / 250.
    """
    a = acts.select(*GROUP, "start_ns", "end_ns",
                    pl.col("category").cast(pl.String)).filter(pl.col("category") != "sync")
    own = (a.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
           .group_by(GROUP).agg(pl.col("start_ns").min().alias("first_ns"),
                                pl.col("end_ns").max().alias("last_ns")))
    seg = (a.select(*GROUP, "category",
                    pl.max_horizontal("start_ns", pl.lit(t0, pl.Int64)).alias("s"),
                    pl.min_horizontal("end_ns", pl.lit(t1, pl.Int64)).alias("e"))
           .filter(pl.col("e") > pl.col("s")).sort([*GROUP, "s"]))
    out = own
    for col, cats in _UNIONS.items():
        u = _union_lengths(seg, cats).rename({"_len": col})
        out = out.join(u, on=GROUP, how="full", coalesce=True, nulls_equal=True)
    return _typed(out.with_columns(pl.col(c).fill_null(0) for c in _UNIONS))


def _typed(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(pl.col(GROUP).cast(pl.Int32),
                        *(pl.col(c).cast(pl.Int64) for c in PARTIAL))


def merge_parts(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Window partials of disjoint windows -> one partial (their union)."""
    if not parts:
        return _typed(pl.DataFrame(schema={c: pl.Int64 for c in (*GROUP, *PARTIAL)}))
    return _typed(pl.concat(list(parts), how="vertical").group_by(GROUP).agg(
        pl.col("first_ns").min(), pl.col("last_ns").max(),
        *(pl.col(c).sum() for c in _UNIONS)))


def gpu_breakdown_from_parts(part: pl.DataFrame) -> pl.DataFrame:
    """The GPU-only breakdown of a merged partial: one row per group with GPU activity,
    ``window_start_ns``, ``window_end_ns``, ``window_ns``, ``compute_ns``, ``memory_ns``,
    ``communication_ns`` (exposed), ``no_gpu_activity_ns``, ``overlapped_comm_ns`` and
    ``comm_overlap_pct``, sorted by group."""
    p = part.filter(pl.col("first_ns").is_not_null()).with_columns(
        pl.col(c).fill_null(0) for c in _UNIONS)
    out = p.select(
        *GROUP, pl.col("first_ns").alias("window_start_ns"),
        pl.col("last_ns").alias("window_end_ns"),
        (pl.col("last_ns") - pl.col("first_ns")).alias("window_ns"),
        pl.col("_c").alias("compute_ns"), (pl.col("_all") - pl.col("_cm")).alias("memory_ns"),
        (pl.col("_cm") - pl.col("_c")).alias("communication_ns"),
        (pl.col("last_ns") - pl.col("first_ns") - pl.col("_all")).alias("no_gpu_activity_ns"),
        (pl.col("_c") + pl.col("_m") - pl.col("_cm")).alias("overlapped_comm_ns"))
    denom = pl.col("overlapped_comm_ns") + pl.col("communication_ns")
    return out.with_columns(
        pl.when(denom > 0).then(pl.col("overlapped_comm_ns") * 100.0 / denom)
        .otherwise(None).cast(pl.Float64).alias("comm_overlap_pct")).sort(GROUP)


def gpu_breakdown(acts: pl.DataFrame) -> pl.DataFrame:
    """The GPU-only breakdown of all of ``acts`` at once (one window holding every start):
    the in-memory path the chunked ones are compared against."""
    return gpu_breakdown_from_parts(window_parts(acts, -(2 ** 63), 2 ** 63 - 1))
