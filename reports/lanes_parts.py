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
   * *binned* mode: the busy time per bin is ``B(b) - B(a)`` with
     ``B(t) = n_s(t)*t - C_s[n_s(t)] - (n_e(t)*t - C_e[n_e(t)])``, where ``C_s`` is the
     float64 **running sum** of the lane's sorted starts (``np.cumsum``, one rounding per
     addition) and ``C_e`` of its sorted ends. Past 2**53 ns those sums round (the x17
     instant-ngp export's busiest lane sums to 1.9e17), so exact integer partials
     converted once would not give the same sums, nor in general the same shades (the
     whole-frame path's rounding can even shade an idle bin 0.25: benchmarks/RESULTS.md,
     which the pieces must reproduce). Instead the running sums are **continued** window
     after window: a window owns the starts that fall in it and the ends of the rows it
     reads last (``end <= t1``), so the sorted starts (ends) of a lane are its windows'
     own sorted starts (ends) one after the other, and adding a window's values to the
     float carried from the windows before it performs the very additions ``np.cumsum``
     performs on the whole array. The counts and sums at the bin edges are then
     evaluated by the same expression (:func:`~traceparse.reports.lanes.busy_from`) and
     drawn by the same function (:func:`~traceparse.reports.lanes.bin_segments`).

A binned merge therefore runs in time order: a :class:`Segments` that begins at the first
window carries the folded state; one that does not keeps its windows' own values until it
is folded after its predecessor (the ``chunks`` executor folds each window in order as it
arrives; with Dask the folds form a chain, :mod:`traceparse.lanes_chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from traceparse.reports.lanes import (
    LANE_CATEGORIES,
    LANE_KEYS,
    bin_edges,
    bin_segments,
    busy_from,
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


#: Raw binned values of one window: (lane number, category index) -> (sorted own starts,
#: sorted own ends), int64 relative to the trace's start.
Raw = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]


@dataclass
class BinState:
    """Binned mode folded over the windows from the first: per (lane, category, edge)
    the count of starts (ends) before the edge and the running float sum at that count;
    per (lane, category) the count and running sum so far (the carry)."""

    ns: np.ndarray
    cs: np.ndarray
    ne: np.ndarray
    ce: np.ndarray
    n_s: np.ndarray
    acc_s: np.ndarray
    n_e: np.ndarray
    acc_e: np.ndarray
    seen: np.ndarray

    @classmethod
    def empty(cls, lanes: int, edges: int) -> BinState:
        shape, carry = (lanes, len(LANE_CATEGORIES), edges), (lanes, len(LANE_CATEGORIES))
        return cls(np.zeros(shape, np.int64), np.zeros(shape), np.zeros(shape, np.int64),
                   np.zeros(shape), np.zeros(carry, np.int64), np.zeros(carry),
                   np.zeros(carry, np.int64), np.zeros(carry), np.zeros(carry, bool))

    def copy(self) -> BinState:
        return BinState(*(getattr(self, f).copy() for f in self.__dataclass_fields__))


def _continue(n_at: np.ndarray, c_at: np.ndarray, n: np.ndarray, acc: np.ndarray,
              key: tuple[int, int], values: np.ndarray, edges: np.ndarray) -> None:
    """Continue the running sum of ``key`` by ``values`` (sorted, all at or after the
    values before them); set the edges that some of them precede."""
    if len(values) == 0:
        return
    # [carry, v0, v1, ...] accumulated: the additions np.cumsum does over the whole array
    run = np.cumsum(np.concatenate([[acc[key]], values.astype(np.float64)]))
    j = np.searchsorted(values, edges, side="left")
    hit = j > 0
    n_at[key][hit] = n[key] + j[hit]
    c_at[key][hit] = run[j[hit]]
    n[key] += len(values)
    acc[key] = run[-1]


def fold(state: BinState, raw: Raw, edges: np.ndarray) -> None:
    """Fold one window's :data:`Raw` values into ``state`` (the windows before it folded)."""
    for key, (starts, ends) in raw.items():
        state.seen[key] = True
        _continue(state.ns, state.cs, state.n_s, state.acc_s, key, starts, edges)
        _continue(state.ne, state.ce, state.n_e, state.acc_e, key, ends, edges)


@dataclass
class Segments:
    """Pass-2 partial of consecutive windows. ``rows``: exact mode, the drawn lanes' own
    rows in order. Binned mode: ``state`` when the windows begin at the first one (folded),
    else ``pending``, each window's :data:`Raw` values in order."""

    first: bool
    rows: pl.DataFrame | None = None
    state: BinState | None = None
    pending: list[Raw] = field(default_factory=list)


def window_segments(rows: pl.DataFrame, t0: int, t1: int, lp: LanePlan, first: bool
                    ) -> Segments:
    """Pass-2 partial of the window ``[t0, t1)`` (``first``: the trace's first window).

    ``rows`` holds every GPU row that overlaps the window or starts in it (others are cut
    away), in the reader's order. Exact mode keeps the drawn lanes' rows that start in it;
    binned mode the sorted starts in it and the sorted ends of the rows it is the last to
    read (overlapping it or starting in it, ``end <= t1``), per drawn lane and category.
    """
    d = _drawn_rows(rows, lp)
    if lp.mode == "exact":
        own = d.filter(_own(d, t0, t1)).select(
            "li", pl.col("category").cast(pl.String), "start_ns", "end_ns", "dur_ns")
        return Segments(first, rows=own)
    read = ((pl.col("start_ns") < t1)
            & ((pl.col("end_ns") > t0) | (pl.col("start_ns") >= t0)))
    cat = pl.col("category").cast(pl.String).replace_strict(
        list(LANE_CATEGORIES), list(range(len(LANE_CATEGORIES))), default=None,
        return_dtype=pl.Int64).alias("ci")
    d = d.filter(read).select("li", cat, "start_ns", "end_ns").drop_nulls("ci")
    starts = d.filter(_own(d, t0, t1)).select("li", "ci", pl.col("start_ns") - lp.t0)
    ends = d.filter(pl.col("end_ns") <= t1).select("li", "ci", pl.col("end_ns") - lp.t0)
    raw: Raw = {}
    for (li, ci), g in starts.sort("li", "ci", "start_ns").group_by(
            "li", "ci", maintain_order=True):
        raw[(int(li), int(ci))] = (g["start_ns"].to_numpy(), np.zeros(0, np.int64))  # type: ignore[call-overload]
    for (li, ci), g in ends.sort("li", "ci", "end_ns").group_by(
            "li", "ci", maintain_order=True):
        key = (int(li), int(ci))  # type: ignore[call-overload]
        raw[key] = (raw.get(key, (np.zeros(0, np.int64),))[0], g["end_ns"].to_numpy())
    if not first:
        return Segments(False, pending=[raw])
    state = BinState.empty(lp.drawn.height, len(lp.edges))
    fold(state, raw, lp.edges)
    return Segments(True, state=state)


def merge_segments(parts: Sequence[Segments], lp: LanePlan) -> Segments:
    """Pass-2 partials of consecutive windows, in time order -> the partial of all of them
    (associative: any grouping of consecutive partials gives the same result)."""
    head = parts[0]
    if lp.mode == "exact":
        frames = [p.rows for p in parts if p.rows is not None]
        return Segments(head.first, rows=pl.concat(frames, how="vertical"))
    if head.state is None:
        return Segments(False, pending=[r for p in parts for r in p.pending])
    state = head.state.copy()
    for p in parts[1:]:
        if p.state is not None:
            raise ValueError("binned lanes partials merged out of time order")
        for raw in p.pending:
            fold(state, raw, lp.edges)
    return Segments(True, state=state)


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
        if seg.state is None:
            raise ValueError("binned lanes partial does not begin at the first window")
        state = seg.state
    for li, (rank, dev, stream, busy, events) in enumerate(lp.drawn.iter_rows()):
        if lp.mode == "exact":
            lane = rows.filter(pl.col("li") == li).select(
                "category", "start_ns", "end_ns", "dur_ns")
            segs = exact_segments(lane, lp.t0)
        else:
            b = np.zeros((len(LANE_CATEGORIES), len(lp.edges) - 1))
            for ci in range(len(LANE_CATEGORIES)):
                if not state.seen[li, ci]:
                    continue
                at = busy_from(state.ns[li, ci], state.cs[li, ci], state.ne[li, ci],
                               state.ce[li, ci], lp.edges)
                b[ci] = at[1:] - at[:-1]
            segs = bin_segments(b, lp.edges)
        out["lanes"].append({"rank": rank, "device_id": dev, "stream_id": stream,
                             "busy_ns": int(busy), "events": int(events), "segments": segs})
    return finish_lanes(out, mode=lp.mode, t0=lp.t0, t1=lp.t1, drawn=lp.drawn,
                        lanes_total=lp.lanes_total, bins=bins)
