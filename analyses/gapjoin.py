"""Pairs of idle gaps and host rows (calls, ranges) that overlap them, found by binary
searches over each group's disjoint gaps (:func:`traceparse.analyses.sweep.overlap_pairs`);
the joins of :mod:`traceparse.analyses.gaps`."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceparse.analyses import intervals, sweep

#: A host row covers a gap when it overlaps at least this fraction of it.
COVER_FRACTION = 0.5


def near_gaps(rows: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``rows`` that overlap some gap of any group (a superset of those that
    overlap a gap of their own group; the filter reads only the row's own bounds, so it
    commutes with :func:`~traceparse.analyses.attribution.per_group`)."""
    u = intervals.union(gaps.select("start_ns", "end_ns"))
    ok = (rows["start_ns"].is_not_null() & rows["end_ns"].is_not_null()).to_numpy()
    s = rows["start_ns"].fill_null(0).to_numpy()
    e = rows["end_ns"].fill_null(0).to_numpy()
    lo = np.searchsorted(u["end_ns"].to_numpy(), s, side="right")
    hi = np.searchsorted(u["start_ns"].to_numpy(), e, side="left")
    return rows.filter(pl.Series(ok & (hi > lo)))


def join_gaps(gaps: pl.DataFrame, rows: pl.DataFrame, group: list[str], *,
              cover: bool = False, inside: bool = False) -> pl.DataFrame:
    """Rows overlapping a gap of their own group (``start_ns < gap end`` and ``end_ns >
    gap start``), with ``_gid``, ``_gs``, ``_ge``, ``_ov`` (overlap) and ``_d`` (row
    duration). ``cover``: only pairs whose overlap is at least :data:`COVER_FRACTION` of
    the gap; ``inside``: only rows that start inside the gap. The gaps of a group are
    disjoint, so the pairs come from binary searches (:func:`sweep.overlap_pairs`)."""
    keys = gaps.select(group).unique()
    gs, ge = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy()
    code = sweep.group_codes(keys, rows, group)
    ok = (rows["start_ns"].is_not_null() & rows["end_ns"].is_not_null()).to_numpy()
    s = rows["start_ns"].fill_null(0).cast(pl.Int64).to_numpy()
    e = rows["end_ns"].fill_null(0).cast(pl.Int64).to_numpy()
    ri, gi = sweep.overlap_pairs(sweep.group_codes(keys, gaps, group), gs, ge,
                                 np.where(ok, code, -1), s, e)
    ov = np.minimum(e[ri], ge[gi]) - np.maximum(s[ri], gs[gi])
    keep = np.ones(ri.size, dtype=bool)
    if cover:
        keep &= ov >= COVER_FRACTION * (ge[gi] - gs[gi])
    if inside:
        keep &= s[ri] >= gs[gi]
    ri, gi, ov = ri[keep], gi[keep], ov[keep]
    return rows[ri].with_columns(
        gaps["_gid"].gather(gi).alias("_gid"), pl.Series("_gs", gs[gi], pl.Int64),
        pl.Series("_ge", ge[gi], pl.Int64), pl.Series("_ov", ov, pl.Int64),
        pl.Series("_d", e[ri] - s[ri], pl.Int64))
