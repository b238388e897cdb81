"""Host rows copied to the groups (rank, device, ...) whose activities their process has
work in, and name matching that keeps categorical names as codes: shared by the
attribution, the gap causes and the fix mechanisms."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def per_group(frame: pl.DataFrame, acts: pl.DataFrame, group: Sequence[str]) -> pl.DataFrame:
    """Host rows (``rank, process_id, name, thread_id, start_ns, end_ns``) copied to every
    group of ``acts`` their process has work in (same rank; a null process id on either
    side matches any process of the rank). Returns the group columns, ``name`` (string),
    ``thread_id``, ``start_ns``, ``end_ns``."""
    group = list(group)
    procs = distinct_rows(acts.select(*group, "process_id"))
    rows = frame.select("rank", pl.col("process_id").alias("_pid"),
                        pl.col("name").cast(pl.String), "thread_id", "start_ns", "end_ns")
    if "rank" in group:
        j = procs.join(rows, on="rank", how="inner")
    else:
        j = procs.join(rows.drop("rank"), how="cross")
    return (j.filter(pl.col("process_id").is_null() | pl.col("_pid").is_null()
                     | (pl.col("process_id") == pl.col("_pid")))
            .select(*group, "name", "thread_id", "start_ns", "end_ns")
            .unique(maintain_order=True))


def distinct_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame.unique()``; a frame of integer columns that each hold one value (one
    device, one process: the usual trace) gives that row from the columns' minima and
    maxima, without hashing every row (35 ms per million activities, paid by each of the
    attribution's and gap causes' host sets)."""
    if (frame.height and all(t.is_integer() for t in frame.dtypes)
            and not any(frame.null_count().row(0))):
        lo = frame.min()
        if lo.equals(frame.max()):
            return lo
    return frame.unique()


def name_matches(frame: pl.DataFrame, pattern: str) -> pl.Expr:
    """``name`` matches the regex ``pattern``; for a categorical ``name`` the regex runs
    on the distinct names only (hundreds, not a million calls)."""
    names = frame.get_column("name")
    if names.dtype != pl.Categorical:
        return pl.col("name").cast(pl.String).str.contains(pattern)
    distinct = names.unique().drop_nulls()
    hit = distinct.filter(distinct.cast(pl.String).str.contains(pattern))
    return pl.col("name").is_in(hit.implode())  # categorical codes, no million strings
