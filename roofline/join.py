"""Join ncu launches to timeline kernels (nsys or torch) by name and launch order.

ncu profiles launches in program order, so the k-th ncu launch of kernel ``N`` is the k-th
timeline kernel named ``N`` (by start time) when ncu profiled every launch from the start.
Names are compared after stripping whitespace and a leading ``void ``; when grid and block
are known on both sides and differ, the pair is counted as a mismatch, not joined.
"""

from __future__ import annotations

import polars as pl


def _key(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.String).str.strip_chars().str.strip_prefix("void ")


def join_ncu(gpu: pl.DataFrame, ncu: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Return (joined rows, counts). Joined rows carry the timeline kernel's ``start_ns``,
    ``dur_ns`` (production clocks) and every ``ncu`` column (suffix ``_ncu`` on clashes).

    Counts: ``ncu_launches``, ``timeline_kernels``, ``matched``, ``shape_mismatch``,
    ``ncu_unmatched`` (ncu launches with no timeline kernel of that name and order).

    Example:
        >>> g = pl.DataFrame({"kind": ["kernel"] * 3, "name": ["a", "b", "a"],
        ...                   "start_ns": [0, 1, 2], "dur_ns": [5, 5, 7]})
        >>> n = pl.DataFrame({"launch_id": [0, 1], "kernel_name": ["a", "a"]})
        >>> join_ncu(g, n)[1]["matched"]
        2
    """
    k = (gpu.filter(pl.col("kind") == "kernel").sort("start_ns")
         .with_columns(_key("name").alias("_k"))
         .with_columns(pl.int_range(pl.len()).over("_k").alias("_ord")))
    n = (ncu.sort("launch_id").with_columns(_key("kernel_name").alias("_k"))
         .with_columns(pl.int_range(pl.len()).over("_k").alias("_ord")))
    j = k.join(n, on=["_k", "_ord"], how="inner", suffix="_ncu")
    dims = [f"{p}_{a}" for p in ("grid", "block") for a in "xyz"]
    mismatch = pl.lit(False)
    for d in dims:
        if d in j.columns and f"{d}_ncu" in j.columns:
            mismatch = mismatch | (pl.col(d).is_not_null() & pl.col(f"{d}_ncu").is_not_null()
                                   & (pl.col(d) != pl.col(f"{d}_ncu")))
    j = j.with_columns(mismatch.alias("_bad"))
    bad = int(j["_bad"].sum())
    good = j.filter(~pl.col("_bad")).drop("_k", "_ord", "_bad")
    counts = {"ncu_launches": n.height, "timeline_kernels": k.height, "matched": good.height,
              "shape_mismatch": bad, "ncu_unmatched": n.height - good.height - bad}
    return good, counts
