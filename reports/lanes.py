"""Timeline overview data: GPU activity per (rank, device, stream) lane, downsampled.

The overview must stay small however big the trace is. Two modes:

* **exact** (at most ``budget`` activities in the drawn lanes): every activity is one
  segment ``[start_ns, dur_ns, category_index, 1.0]`` relative to the window start.
* **binned** (more than ``budget``): the window is cut into ``bins`` equal bins; in each bin
  of each lane the *dominant* category (most busy time) is drawn with a shade equal to the
  lane's busy fraction of the bin (rounded to quarters: 0.25, 0.5, 0.75, 1.0). Consecutive bins
  with the same category and shade are merged into one segment. The report shows a visible
  notice saying so.

At most ``max_lanes`` lanes are drawn (the busiest; ties by rank, device, stream); the
notice counts the rest.

Busy time per bin is computed without a Python loop over events: for a set of intervals the
busy time before ``t`` is ``B(t) = sum(max(0, min(t, end) - start))``, which with sorted
starts and ends is ``n_s(t)*t - S_s(t) - (n_e(t)*t - S_e(t))`` (counts and sums of starts /
ends before ``t``, by ``searchsorted`` on cumulative sums). Busy time in ``[a, b)`` is
``B(b) - B(a)``. Overlapping activities on one stream count twice (streams serialise, so this
only matters for malformed traces; the shade is capped at 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.schema import CATEGORIES

#: Category order used by the ``category_index`` of segments.
LANE_CATEGORIES = CATEGORIES


def _busy_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``B(t)`` above, for sorted ``starts`` and ``ends`` (int64 ns) at times ``t``."""
    cs = np.concatenate([[0], np.cumsum(starts, dtype=np.float64)])
    ce = np.concatenate([[0], np.cumsum(ends, dtype=np.float64)])
    ns = np.searchsorted(starts, t, side="left")
    ne = np.searchsorted(ends, t, side="left")
    return busy_from(ns, cs[ns], ne, ce[ne], t)


def busy_from(ns: np.ndarray, cs_at: np.ndarray, ne: np.ndarray, ce_at: np.ndarray,
              t: np.ndarray) -> np.ndarray:
    """``B(t)`` from the counts of starts (``ns``) and ends (``ne``) before each ``t`` and
    the float64 cumulative sums of the sorted starts (``cs_at``) and ends (``ce_at``) at
    those counts: the one float expression both the whole-frame and the chunked paths
    (:mod:`traceparse.reports.lanes_parts`) evaluate."""
    tf = t.astype(np.float64)
    out: np.ndarray = (ns * tf - cs_at) - (ne * tf - ce_at)
    return out


def _binned(lane: pl.DataFrame, t0: int, edges: np.ndarray) -> list[list[float]]:
    busy = np.zeros((len(LANE_CATEGORIES), len(edges) - 1))
    for ci, cat in enumerate(LANE_CATEGORIES):
        sub = lane.filter(pl.col("category") == cat)
        if sub.height == 0:
            continue
        starts = np.sort(sub["start_ns"].to_numpy() - t0)
        ends = np.sort(sub["end_ns"].to_numpy() - t0)
        b = _busy_before(starts, ends, edges)
        busy[ci] = b[1:] - b[:-1]
    return bin_segments(busy, edges)


def bin_segments(busy: np.ndarray, edges: np.ndarray) -> list[list[float]]:
    """Binned-mode segments of one lane from its busy time per category and bin
    (``busy``: float64, categories x bins) and the bin ``edges`` (int64, relative)."""
    width = edges[1:] - edges[:-1]
    total = busy.sum(axis=0)
    frac = np.minimum(total / np.maximum(width, 1), 1.0)
    level = np.ceil(frac * 4) / 4  # any activity shows as at least 0.25
    dom = busy.argmax(axis=0)
    segs: list[list[float]] = []
    i, n = 0, len(width)
    while i < n:
        if level[i] == 0:
            i += 1
            continue
        j = i
        while j + 1 < n and level[j + 1] == level[i] and dom[j + 1] == dom[i]:
            j += 1
        segs.append([int(edges[i]), int(edges[j + 1] - edges[i]), int(dom[i]),
                     float(level[i])])
        i = j + 1
    return segs


def timeline_lanes(gpu: pl.DataFrame, *, budget: int = 4000, bins: int = 600,
                   max_lanes: int = 32) -> dict[str, Any]:
    """GPU lanes of ``gpu`` (the timeline's gpu table) for the overview figure.

    Args:
        gpu: gpu table (schema columns rank, device_id, stream_id, category, start_ns,
            end_ns, dur_ns).
        budget: largest number of activities drawn exactly; above it lanes are binned.
        bins: number of time bins in binned mode.
        max_lanes: most lanes drawn.

    Returns:
        ``{"window_start_ns", "window_ns", "mode": "exact"|"binned"|"empty", "events",
        "drawn_events", "lanes_total", "lanes": [{"rank", "device_id", "stream_id",
        "busy_ns", "events", "segments"}], "categories", "bin_ns"}``; segment times are
        relative to ``window_start_ns``.

    Example:
        >>> from traceparse import schema
        >>> g = schema.conform("gpu", pl.DataFrame({"rank": [0, 0], "kind": ["kernel"] * 2,
        ...     "category": ["compute", "memory"], "start_ns": [100, 300],
        ...     "end_ns": [200, 350], "dur_ns": [100, 50], "device_id": [0, 0],
        ...     "stream_id": [7, 7], "name": ["a", "b"]}))
        >>> timeline_lanes(g)["lanes"][0]["segments"]
        [[0, 100, 0, 1.0], [200, 50, 1, 1.0]]
    """
    out: dict[str, Any] = {"categories": list(LANE_CATEGORIES), "budget": budget,
                           "events": gpu.height, "lanes": []}
    if gpu.height == 0:
        out.update(mode="empty", window_start_ns=0, window_ns=0, drawn_events=0,
                   lanes_total=0, bin_ns=0)
        return out
    t0 = int(gpu["start_ns"].min())  # type: ignore[arg-type]
    t1 = int(gpu["end_ns"].max())  # type: ignore[arg-type]
    stats = gpu.group_by(LANE_KEYS).agg(pl.col("dur_ns").sum().alias("busy_ns"),
                                        pl.len().alias("events"))
    drawn = drawn_lanes(stats, max_lanes)
    mode = lane_mode(drawn, budget)
    edges = bin_edges(t0, t1, bins)
    for rank, dev, stream, busy, events in drawn.iter_rows():
        pred = (pl.col("rank") == rank) & (pl.col("device_id") == dev)
        pred = pred & (pl.col("stream_id").is_null() if stream is None
                       else pl.col("stream_id") == stream)
        lane = gpu.filter(pred).select("category", "start_ns", "end_ns", "dur_ns")
        segs = (exact_segments(lane, t0) if mode == "exact" else
                _binned(lane.with_columns(pl.col("category").cast(pl.String)), t0, edges))
        out["lanes"].append({"rank": rank, "device_id": dev, "stream_id": stream,
                             "busy_ns": int(busy), "events": int(events), "segments": segs})
    return finish_lanes(out, mode=mode, t0=t0, t1=t1, drawn=drawn, lanes_total=stats.height,
                        bins=bins)


#: The columns that name a lane.
LANE_KEYS = ["rank", "device_id", "stream_id"]


def drawn_lanes(stats: pl.DataFrame, max_lanes: int) -> pl.DataFrame:
    """The ``max_lanes`` busiest lanes of ``stats`` (one row per lane: :data:`LANE_KEYS`,
    ``busy_ns``, ``events``; ties by rank, device, stream), in lane order."""
    order = stats.sort(["busy_ns", *LANE_KEYS], descending=[True, False, False, False],
                       nulls_last=True)
    return order.head(max_lanes).sort(LANE_KEYS, nulls_last=True)


def lane_mode(drawn: pl.DataFrame, budget: int) -> str:
    """``exact`` when the drawn lanes hold at most ``budget`` activities, else ``binned``."""
    return "exact" if int(drawn["events"].sum()) <= budget else "binned"


def bin_edges(t0: int, t1: int, bins: int) -> np.ndarray:
    """The ``bins + 1`` bin edges (int64 ns, relative to ``t0``) of the window ``[t0, t1]``."""
    span = max(t1 - t0, 1)
    edges: np.ndarray = np.linspace(0, span, bins + 1).round().astype(np.int64)
    return edges


def exact_segments(lane: pl.DataFrame, t0: int) -> list[list[float]]:
    """Exact-mode segments of one lane's rows (``category``, ``start_ns``, ``end_ns``,
    ``dur_ns``, in the timeline's row order), ordered by start then end."""
    cat_index = {c: i for i, c in enumerate(LANE_CATEGORIES)}
    lane = lane.with_columns(pl.col("category").cast(pl.String)).sort("start_ns", "end_ns")
    return [[int(s - t0), int(d), cat_index[c], 1.0] for c, s, _e, d in lane.iter_rows()]


def finish_lanes(out: dict[str, Any], *, mode: str, t0: int, t1: int, drawn: pl.DataFrame,
                 lanes_total: int, bins: int) -> dict[str, Any]:
    """``out`` (with its ``lanes``) completed with the window, mode and counts."""
    span = max(t1 - t0, 1)
    out.update(mode=mode, window_start_ns=t0, window_ns=t1 - t0,
               drawn_events=int(drawn["events"].sum()), lanes_total=lanes_total,
               bin_ns=int(span // bins) if mode == "binned" else 0)
    return out
