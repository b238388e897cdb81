"""The timeline overview's lanes (:func:`traceparse.reports.lanes.timeline_lanes`) from
time windows of GPU rows, merged exactly (pure functions).

Two passes over the same windows ``[t0, t1)`` (they tile time; a window reads every row
that overlaps it or starts in it):

1. **Counts** (:func:`lane_counts`, merged by :func:`merge_counts`): per lane (rank,
   device, stream) the summed duration, the number of rows, the first start and the last
   end of the rows that *start* in the window, each row counted once. From them
   :func:`lane_plan` takes the window of the trace, the drawn lanes and the mode as
   ``timeline_lanes`` does (the same functions: :func:`~traceparse.reports.lanes.
   drawn_lanes`, :func:`~traceparse.reports.lanes.lane_mode`).
2. **Segments** (:func:`window_segments`, merged by :func:`merge_segments`):

   * *exact* mode: the drawn lanes' rows that start in the window, in the reader's order;
     concatenated in window order they are the timeline's rows of those lanes (at most
     ``budget`` of them), and :func:`~traceparse.reports.lanes.exact_segments` draws them;
   * *binned* mode: per drawn lane, category and bin the exact busy time (int64 ns,
     :func:`~traceparse.reports.lanes.bin_busy`) of the drawn lanes' rows that start in
     the window, each counted whole (a row that crosses the window's end is counted here,
     by the window it starts in, and by no other). Busy time per bin of disjoint sets of
     rows adds up to that of their union, so the partials are plain int64 arrays summed
     in any order, and :func:`~traceparse.reports.lanes.bin_segments` draws the sum as
     it draws the whole frame's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from traceparse.reports.lanes import (
    LANE_CATEGORIES,
    LANE_KEYS,
    bin_busy,
    bin_edges,
    bin_segments,
    category_index,
    drawn_lanes,
    exact_segments,
    finish_lanes,
    lane_mode,
)

#: Columns of a counts partial.
COUNTS = (*LANE_KEYS, "busy_ns", "events", "first_ns", "last_ns")


def _own(rows: pl.DataFrame, t0: int, t1: int) -> pl.Expr:
    return (pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1)


def lane_counts(rows: pl.DataFrame, t0: int, t1: int) -> pl.DataFrame:
    """Pass-1 partial of the window ``[t0, t1)``: per lane of the rows of ``rows`` that
    start in it, ``busy_ns`` (summed ``dur_ns``), ``events``, ``first_ns`` (earliest
    start) and ``last_ns`` (latest end).

    Example (window [100, 200)): rows [50, 150) and [120, 260) on stream 7 -> one lane,
    events 1, busy_ns 140, first 120, last 260 (the first row started before the window).
    """
    own = rows.filter(_own(rows, t0, t1))
    return _typed_counts(own.group_by(LANE_KEYS).agg(
        pl.col("dur_ns").sum().alias("busy_ns"), pl.len().alias("events"),
        pl.col("start_ns").min().alias("first_ns"), pl.col("end_ns").max().alias("last_ns")))


def _typed_counts(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int64),
                        pl.col("stream_id").cast(pl.Int64),
                        *(pl.col(c).cast(pl.Int64) for c in COUNTS[3:]))


def merge_counts(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Counts partials of disjoint windows -> the partial of their union."""
    if not parts:
        return _typed_counts(pl.DataFrame(schema={c: pl.Int64 for c in COUNTS}))
    return _typed_counts(pl.concat(list(parts), how="vertical").group_by(LANE_KEYS).agg(
        pl.col("busy_ns").sum(), pl.col("events").sum(), pl.col("first_ns").min(),
        pl.col("last_ns").max()))


class LanePlan(NamedTuple):
    """What pass 2 needs from pass 1: the trace's window ``[t0, t1]``, the drawn lanes
    (in lane order, their index the lane number ``li``), the mode, the bin edges (int64,
    relative to ``t0``), and the whole-trace counts (``events``, ``lanes_total``)."""

    t0: int
    t1: int
    drawn: pl.DataFrame
    mode: str
    edges: np.ndarray
    events: int
    lanes_total: int


def lane_plan(counts: pl.DataFrame, *, budget: int, bins: int, max_lanes: int
              ) -> LanePlan | None:
    """The :class:`LanePlan` of a merged counts partial; None when it has no row."""
    if counts.height == 0:
        return None
    t0 = int(counts["first_ns"].min())  # type: ignore[arg-type]
    t1 = int(counts["last_ns"].max())  # type: ignore[arg-type]
    drawn = drawn_lanes(counts.select(*LANE_KEYS, "busy_ns", "events"), max_lanes)
    return LanePlan(t0, t1, drawn, lane_mode(drawn, budget), bin_edges(t0, t1, bins),
                    int(counts["events"].sum()), counts.height)


def _drawn_rows(rows: pl.DataFrame, lp: LanePlan) -> pl.DataFrame:
    """``rows`` of the drawn lanes with their lane number ``li`` (row order kept)."""
    keys = lp.drawn.select(pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int64),
                           pl.col("stream_id").cast(pl.Int64)).with_row_index("li")
    r = rows.with_columns(pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int64),
                          pl.col("stream_id").cast(pl.Int64))
    return r.join(keys, on=LANE_KEYS, how="inner", nulls_equal=True, maintain_order="left")


@dataclass
class Segments:
    """Pass-2 partial of some windows. ``rows``: exact mode, the drawn lanes' own rows in
    the windows' order. ``busy``: binned mode, the exact busy time (int64 ns) of their own
    rows per drawn lane, category and bin (lanes x categories x bins)."""

    rows: pl.DataFrame | None = None
    busy: np.ndarray | None = None


def window_segments(rows: pl.DataFrame, t0: int, t1: int, lp: LanePlan) -> Segments:
    """Pass-2 partial of the window ``[t0, t1)``.

    ``rows`` holds every GPU row that overlaps the window or starts in it (others are cut
    away), in the reader's order; only those that start in it (its own) are used. Exact
    mode keeps the drawn lanes' own rows; binned mode their busy time per bin.
    """
    d = _drawn_rows(rows, lp).filter(_own(rows, t0, t1))
    if lp.mode == "exact":
        return Segments(rows=d.select("li", pl.col("category").cast(pl.String), "start_ns",
                                      "end_ns", "dur_ns"))
    d = d.select("li", category_index(), "start_ns", "end_ns").drop_nulls("ci")
    cats, bins = len(LANE_CATEGORIES), len(lp.edges) - 1
    key = d["li"].cast(pl.Int64).to_numpy() * cats + d["ci"].to_numpy()
    busy = bin_busy(key, d["start_ns"].to_numpy() - lp.t0, d["end_ns"].to_numpy() - lp.t0,
                    lp.edges, lp.drawn.height * cats)
    return Segments(busy=busy.reshape(lp.drawn.height, cats, bins))


def merge_segments(parts: Sequence[Segments], lp: LanePlan) -> Segments:
    """Pass-2 partials of consecutive windows, in time order -> the partial of all of them
    (exact mode: the rows concatenated; binned mode: the busy times summed, in any order)."""
    if lp.mode == "exact":
        frames = [p.rows for p in parts if p.rows is not None]
        return Segments(rows=pl.concat(frames, how="vertical"))
    busy = [p.busy for p in parts if p.busy is not None]
    return Segments(busy=np.sum(busy, axis=0))


def finish(lp: LanePlan | None, seg: Segments | None, *, budget: int, bins: int
           ) -> dict[str, Any]:
    """:func:`traceparse.reports.lanes.timeline_lanes`' dict from the plan and the merged
    segments (``lp`` None: no GPU row, the empty overview)."""
    out: dict[str, Any] = {"categories": list(LANE_CATEGORIES), "budget": budget,
                           "events": 0 if lp is None else lp.events, "lanes": []}
    if lp is None:
        out.update(mode="empty", window_start_ns=0, window_ns=0, drawn_events=0,
                   lanes_total=0, bin_ns=0)
        return out
    assert seg is not None
    if lp.mode == "exact":
        assert seg.rows is not None
        # the timeline's order: by start, ties in the reader's order (kernels, copies,
        # sets, graphs), as read_gpu's stable sort leaves them
        rows = seg.rows.sort("start_ns", maintain_order=True)
    else:
        assert seg.busy is not None
        per_bin = seg.busy
    for li, (rank, dev, stream, busy, events) in enumerate(lp.drawn.iter_rows()):
        if lp.mode == "exact":
            lane = rows.filter(pl.col("li") == li).select(
                "category", "start_ns", "end_ns", "dur_ns")
            segs = exact_segments(lane, lp.t0)
        else:
            segs = bin_segments(per_bin[li], lp.edges)
        out["lanes"].append({"rank": rank, "device_id": dev, "stream_id": stream,
                             "busy_ns": int(busy), "events": int(events), "segments": segs})
    return finish_lanes(out, mode=lp.mode, t0=lp.t0, t1=lp.t1, drawn=lp.drawn,
                        lanes_total=lp.lanes_total, bins=bins)
