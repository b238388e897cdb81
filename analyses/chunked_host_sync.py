""":func:`traceparse.analyses.host_sync.host_sync_by_op` in time windows: each window's
partial from its pass-2 span (:func:`window_part`), merged exactly (:func:`merge`).

A window ``[t0, t1)`` reads the host-sync intervals of its part of each device's window
(the breakdown's ``host_sync_ns`` segments, the same ones
:func:`~traceparse.analyses.attribution.breakdown_windows` sums there) and the blocking
calls of the span (:func:`~traceparse.analyses.attribution.blocking_intervals`, threads
filled as in memory) that overlap the window. Split at the window edges, the whole
file's merged intervals are the windows' intervals, so a call's overlap is the sum of its
overlaps per window (integers: exact in any order).

* A call **inside** the window (it starts at or after ``t0`` and ends by ``t1``) is
  summed there per ``(op, call)`` when it overlaps an interval.
* A call that **crosses** an edge is kept as a row (group, name, thread as listed, start,
  end) in every window it overlaps, with its overlap there and whether it hits an
  interval there; the rows merge by call: the ns summed, counted once when any hit.
* A zero-length call is a hit in memory when it lies strictly inside an interval; at a
  window's start ``t0`` it is, when an interval of its group starts at ``t0`` in the
  window and another ends at ``t0`` in the window before (:attr:`SyncPart.ends`).
* The **op** is the outermost ``cpu_op`` open on the call's thread at its start: ranges
  open then overlap the span of the window where the call starts, so that window reads
  it (its row is marked ``own``). A hit call without such a row, in a trace with ops,
  is refused (:class:`NoOwnRow`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from traceparse.analyses.attribution import (
    blocking_intervals,
    busy_activities,
    part_expr,
    window_frame,
    window_segments,
)
from traceparse.analyses.host_sync import (
    _with_threads,
    op_rows,
    overlap_with,
    sort_by_op,
    with_ops,
)
from traceparse.analyses.intervals import union
from traceparse.timeline import Timeline

GROUP = ["rank", "device_id"]
#: A crossing call's identity: as the blocking calls list it (thread before fill-in).
KEY = [*GROUP, "name", "_raw", "start_ns", "end_ns"]


class NoOwnRow(Exception):
    """A call with host-sync time crosses into a window from one whose span did not list
    it, and the trace has ``cpu_op`` ranges: its op is not known exactly."""


class SyncPart(NamedTuple):
    """One window's partial: ``inner`` (``op, name, calls, host_sync_ns``, the calls
    inside it), ``edge`` (one row per crossing call, :data:`KEY` and ``thread_id, op,
    own, hit, at_start, host_sync_ns``), ``ends`` (group and ``edge_ns``: the groups
    whose host-sync time runs up to the window's end) and whether the span has ops."""

    inner: pl.DataFrame
    edge: pl.DataFrame
    ends: pl.DataFrame
    ops: bool


def window_part(tl: Timeline, wins: pl.DataFrame, t0: int, t1: int) -> SyncPart:
    """The partial of window ``[t0, t1)`` from its span ``tl`` and its part of each
    device's window ``wins`` (``rank, device_id, window_start_ns, window_end_ns``)."""
    acts = busy_activities(tl)
    hs = _intervals(tl, acts, wins)
    start, end = pl.col("start_ns"), pl.col("end_ns")
    calls = blocking_intervals(tl, acts, GROUP).select(*GROUP, "name", "thread_id",
                                                       "start_ns", "end_ns")
    calls = calls.filter((start < t1) & ((end > t0) | ((end == start) & (start >= t0))))
    by = {k: (h["start_ns"].to_numpy(), h["end_ns"].to_numpy())
          for k, h in hs.partition_by(GROUP, as_dict=True, maintain_order=True).items()}
    out = []
    for key, c in calls.partition_by(GROUP, as_dict=True, maintain_order=True).items():
        h = by.get(key)
        s, e = c["start_ns"].to_numpy(), c["end_ns"].to_numpy()
        hit, ov = np.zeros(c.height, bool), np.zeros(c.height, np.int64)
        at = np.zeros(c.height, bool)
        if h is not None:
            hit, ov = overlap_with(h[0], h[1], s, e)
            # an interval of the group starts at t0 (they are sorted): one may run into it
            at = (s == t0) & (e == t0) & bool(h[0][:1].size and h[0][0] == t0)
        out.append(c.with_columns(pl.Series("hit", hit, pl.Boolean),
                                  pl.Series("host_sync_ns", ov, pl.Int64),
                                  pl.Series("at_start", at, pl.Boolean)))
    ops = bool(tl.ranges.height) and bool(
        (tl.ranges["kind"].cast(pl.String) == "cpu_op").any())
    ends = (hs.filter(end == t1).select(*GROUP, pl.lit(t1, pl.Int64).alias("edge_ns"))
            .unique())
    if not out:
        return SyncPart(_empty_inner(), _empty_edge(), ends, ops)
    every = pl.concat(out).with_columns(pl.col("thread_id").alias("_raw"))
    every = with_ops(tl, _with_threads(tl, every))
    own = (start >= t0) & (start < t1)
    every = every.with_columns(own.alias("own"),
                               pl.when(own).then(pl.col("op")).otherwise(None).alias("op"))
    crossing = ~pl.col("own") | (end > t1) | pl.col("at_start")
    inner = every.filter(~crossing & pl.col("hit"))
    edge = every.filter(crossing).select(*KEY, "thread_id", "op", "own", "hit", "at_start",
                                         "host_sync_ns")
    return SyncPart(inner.group_by("op", "name").agg(
        pl.len().cast(pl.Int64).alias("calls"), pl.col("host_sync_ns").sum()),
        edge, ends, ops)


def _intervals(tl: Timeline, acts: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """The host-sync intervals inside ``wins``, merged per group (group columns,
    ``start_ns``, ``end_ns``, sorted)."""
    empty = pl.DataFrame(schema={"rank": pl.Int64, "device_id": pl.Int64,
                                 "start_ns": pl.Int64, "end_ns": pl.Int64})
    if wins.height == 0 or acts.height == 0:
        return empty
    w = window_frame(acts, wins, GROUP)
    seg = window_segments(tl, acts, w, GROUP)
    seg = seg.filter(part_expr() == "host_sync_ns").select("_wid", "start_ns", "end_ns")
    if seg.height == 0:
        return empty
    seg = seg.join(w.select("_wid", *GROUP), on="_wid").drop("_wid")
    return union(seg, by=GROUP)


def _empty_inner() -> pl.DataFrame:
    return pl.DataFrame(schema={"op": pl.String, "name": pl.String, "calls": pl.Int64,
                                "host_sync_ns": pl.Int64})


def _empty_edge() -> pl.DataFrame:
    return pl.DataFrame(schema={"rank": pl.Int64, "device_id": pl.Int64, "name": pl.String,
                                "_raw": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                "thread_id": pl.Int64, "op": pl.String, "own": pl.Boolean,
                                "hit": pl.Boolean, "at_start": pl.Boolean,
                                "host_sync_ns": pl.Int64})


def merge(parts: Sequence[SyncPart]) -> pl.DataFrame:
    """:func:`~traceparse.analyses.host_sync.host_sync_by_op`'s frame from every window's
    partial (in any order).

    Raises:
        NoOwnRow: see the class.
    """
    inner = pl.concat([_empty_inner(), *(p.inner.with_columns(pl.col("name").cast(pl.String))
                                         for p in parts)], how="vertical_relaxed")
    edge = pl.concat([_empty_edge(), *(p.edge.with_columns(pl.col("name").cast(pl.String))
                                       for p in parts)], how="vertical_relaxed")
    ends = pl.concat([p.ends.cast({c: pl.Int64 for c in GROUP}) for p in parts],
                     how="vertical_relaxed") if parts else None
    if edge.height and ends is not None and ends.height:
        # a zero-length call at a window's start inside an interval running across it
        joined = edge.join(ends.with_columns(pl.lit(True).alias("_open")),
                           left_on=[*GROUP, "start_ns"], right_on=[*GROUP, "edge_ns"],
                           how="left", nulls_equal=True)
        edge = joined.with_columns(
            (pl.col("hit") | (pl.col("at_start") & pl.col("_open").fill_null(False)))
            .alias("hit")).drop("_open")
    calls = (edge.group_by(KEY, maintain_order=True)
             .agg(pl.col("thread_id").first(), pl.col("op").filter(pl.col("own")).first(),
                  pl.col("own").any(), pl.col("hit").any(), pl.col("host_sync_ns").sum())
             .filter(pl.col("hit")))
    if calls.filter(~pl.col("own")).height and any(p.ops for p in parts):
        raise NoOwnRow("a blocking call's op: the window where it starts did not list it")
    crossed = op_rows(calls.select("op", "name", "host_sync_ns"))
    both = pl.concat([inner.select("op", "name", "calls", "host_sync_ns"),
                      crossed.select("op", pl.col("call").alias("name"), "calls",
                                     "host_sync_ns")], how="vertical_relaxed")
    return sort_by_op(both.group_by("op", "name").agg(pl.col("calls", "host_sync_ns").sum())
                      .select("op", pl.col("name").alias("call"), "calls", "host_sync_ns"))
