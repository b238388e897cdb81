"""Pairs of idle gaps and host rows (calls, ranges) that overlap them, found by binary
searches over each group's disjoint gaps (:func:`traceparse.analyses.sweep.overlap_pairs`);
the joins of :mod:`traceparse.analyses.gaps`, and the naming of an issuing gap no single
range covers (:func:`name_issuing`)."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceparse.analyses import intervals, sweep
from traceparse.timeline import Timeline

#: A host row covers a gap when it overlaps at least this fraction of it.
COVER_FRACTION = 0.5


def near_gaps(rows: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``rows`` that overlap some gap of any group (a superset of those that
    overlap a gap of their own group; the filter reads only the row's own bounds, so it
    commutes with :func:`~traceparse.analyses.hostrows.per_group`)."""
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


def next_launch_threads(tl: Timeline, gaps: pl.DataFrame, group: list[str]
                        ) -> pl.DataFrame:
    """Per row of ``gaps`` (its first column an id, then ``group`` and ``end_ns``): the
    id and ``_ithr``, the thread whose call launched the activity that ends the gap (the
    smallest thread id when several start together; null when none was linked). Only the
    activities starting where a gap ends get their call's thread (one gather of the
    cached launch links, not a launch join of every activity)."""
    from traceparse.links import launch_links

    gid = gaps.columns[0]
    ends = (tl.gpu.select(*group, "kind", pl.col("start_ns").alias("end_ns"),
                          launch_links(tl)["api_row"].alias("_row"))
            .filter((pl.col("kind") != "sync") & pl.col("_row").is_not_null())
            .join(gaps.select(*group, "end_ns").unique(), on=[*group, "end_ns"],
                  how="semi", nulls_equal=True))
    nxt = (ends.select(*group, "end_ns",
                       tl.api["thread_id"].gather(ends["_row"]).cast(pl.Int64).alias("_ithr"))
           .filter(pl.col("_ithr").is_not_null())
           .sort([*group, "end_ns", "_ithr"])
           .unique([*group, "end_ns"], keep="first", maintain_order=True))
    return gaps.select(gid, *group, "end_ns").join(
        nxt, on=[*group, "end_ns"], how="left", nulls_equal=True).select(gid, "_ithr")


def name_issuing(tl: Timeline, acts: pl.DataFrame, gaps: pl.DataFrame, group: list[str]
                  ) -> pl.DataFrame:
    """An ``issuing`` gap is named on the thread that issued the work ending it: the
    thread whose call launched the first activity after the gap. A gap that no single
    candidate covered (the host issued it in several ops or calls), or whose covering
    candidate is another thread's (the main thread waiting in ``pthread_cond_wait`` while
    autograd's thread issues the backward), is named by that thread's host range or CUDA
    call overlapping it the most (ties: the shorter, then the earlier); ``cause_detail``
    says that it covers less than half. ``gaps`` carries ``_ithr``
    (:func:`next_launch_threads`)."""
    iss = gaps.with_row_index("_r").filter(pl.col("cause") == "issuing")
    if iss.height == 0:
        return gaps
    other = (pl.col("cause_thread_id") != pl.col("_ithr")).fill_null(False)
    todo = iss.filter(pl.col("cause_name").is_null() | other)
    if todo.height == 0:
        return gaps
    from traceparse.analyses.hostrows import per_group
    from traceparse.analyses.issuing import host_ranges

    hr = host_ranges(tl).drop("kind")
    # the calls' columns selected before the filter copies them (every api column of every
    # call was copied first: ~1 GB at 13M calls)
    rows = pl.concat([hr, tl.api.select(hr.columns).filter(pl.col("end_ns").is_not_null())],
                     how="vertical_relaxed")
    j = join_gaps(todo.select(*group, "start_ns", "end_ns", pl.col("_r").alias("_gid")),
                   per_group(near_gaps(rows, todo), acts, group), group)
    j = (j.join(todo.select(pl.col("_r").alias("_gid"), "_ithr"), on="_gid", how="left")
         .filter(pl.col("_ithr").is_null() | (pl.col("thread_id") == pl.col("_ithr")))
         .drop("_ithr"))
    if j.height == 0:
        return _unrecorded_names(tl, gaps, todo, None, group)
    best = (j.sort(["_gid", "_ov", "_d", "start_ns"], descending=[False, True, False, False])
            .group_by("_gid", maintain_order=True).first())
    from traceparse.analyses.issuing import unrecorded_ns

    # unrecorded dispatch (analyses/issuing.py): the gap mostly lies in no recorded range
    un = unrecorded_ns(tl, best.select("rank", "thread_id", pl.col("_gs").alias("start_ns"),
                                       pl.col("_ge").alias("end_ns")))
    pct = (pl.col("_ov") * 100 / (pl.col("_ge") - pl.col("_gs"))).round(0).cast(pl.Int64)
    upct = (pl.col("unrecorded_ns") * 100 / (pl.col("_ge") - pl.col("_gs"))).round(0) \
        .cast(pl.Int64)
    # the dispatch claim needs a thread that records its framework ops (the issuing rule's
    # condition): there, time in no range is Python between ops; elsewhere (an nsys
    # capture without op ranges) the trace cannot say what the thread ran
    ops = host_ranges(tl).filter(pl.col("kind") == "cpu_op").select("rank", "thread_id") \
        .unique()
    best = best.with_columns(un).join(ops.with_columns(pl.lit(True).alias("_ops")),
                                      on=["rank", "thread_id"], how="left").select(
        pl.col("_gid").alias("_r"), pl.col("name").alias("_in"),
        pl.col("thread_id").alias("_it"), pl.col("start_ns").alias("_is"),
        pl.col("end_ns").alias("_ie"),
        # it covers the gap (a candidate of the issuing thread, found here because the
        # first one was another thread's): named without a caveat
        pl.when(pl.col("_ov") >= COVER_FRACTION * (pl.col("_ge") - pl.col("_gs")))
        .then(pl.lit(None, pl.String))
        .when(2 * (pl.col("_ov") + pl.col("unrecorded_ns")) >= pl.col("_ge") - pl.col("_gs"))
        .then(pl.when(pl.col("_ops").fill_null(False))
              .then(pl.format("unrecorded dispatch: {}% of the gap lies in no recorded range "
                              "of the thread (Python between two launches of one step); "
                              "this one overlaps {}%", upct, pct))
              .otherwise(pl.format("issued by this thread: {}% of the gap lies in no "
                                   "recorded range of it (the trace records no framework "
                                   "ops to say what ran); this one overlaps {}%", upct, pct)))
        .otherwise(pl.format("issued in several ops or calls; this one overlaps {}% of "
                             "the gap", pct)).alias("_id"))
    return _unrecorded_names(tl, gaps, todo, best, group)


def _unrecorded_names(tl: Timeline, gaps: pl.DataFrame, todo: pl.DataFrame,
                      best: pl.DataFrame | None, group: list[str]) -> pl.DataFrame:
    """Write the names of ``best`` into ``gaps``; an issuing gap no host row overlaps at
    all is issuing only through unrecorded dispatch: named ``unrecorded dispatch`` with
    the thread and the part of the issuing stretch that overlaps it most."""
    from traceparse.analyses.attribution import issuing_intervals
    from traceparse.analyses.issuing import UNRECORDED_NAME

    cols = {"_r": pl.UInt32, "_in": pl.String, "_it": pl.Int64, "_is": pl.Int64,
            "_ie": pl.Int64, "_id": pl.String}
    best = pl.DataFrame(schema=cols) if best is None else best.cast(cols)  # type: ignore[arg-type]
    left = todo.filter(~pl.col("_r").is_in(best["_r"].implode()))
    if left.height:
        j = join_gaps(left.select(*group, "start_ns", "end_ns", pl.col("_r").alias("_gid")),
                      issuing_intervals(tl, group), group)
        more = (j.sort(["_gid", "_ov", "start_ns"], descending=[False, True, False])
                .group_by("_gid", maintain_order=True).first()
                .select(pl.col("_gid").alias("_r"), pl.lit(UNRECORDED_NAME).alias("_in"),
                        pl.col("thread_id").alias("_it"),
                        pl.max_horizontal("start_ns", "_gs").alias("_is"),
                        pl.min_horizontal("end_ns", "_ge").alias("_ie"),
                        pl.format("unrecorded dispatch: {}% of the gap lies in no recorded "
                                  "range of the thread (Python between two launches of one "
                                  "step)", (pl.col("_ov") * 100 / (pl.col("_ge")
                                                                  - pl.col("_gs")))
                                  .round(0).cast(pl.Int64)).alias("_id")))
        best = pl.concat([best, more.cast(cols)])  # type: ignore[arg-type]
    hit = pl.col("_in").is_not_null()
    return (gaps.with_row_index("_r").join(best, on="_r", how="left")
            .with_columns(*(pl.when(hit).then(pl.col(n)).otherwise(pl.col(c)).alias(c)
                            for n, c in (("_in", "cause_name"), ("_it", "cause_thread_id"),
                                         ("_is", "cause_start_ns"), ("_ie", "cause_end_ns"),
                                         ("_id", "cause_detail"))))
            .drop("_r", "_in", "_it", "_is", "_ie", "_id"))
