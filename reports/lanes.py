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
    tf = t.astype(np.float64)
    out: np.ndarray = (ns * tf - cs[ns]) - (ne * tf - ce[ne])
    return out


def _binned(lane: pl.DataFrame, t0: int, edges: np.ndarray) -> list[list[float]]:
    width = edges[1:] - edges[:-1]
    busy = np.zeros((len(LANE_CATEGORIES), len(width)))
    for ci, cat in enumerate(LANE_CATEGORIES):
        sub = lane.filter(pl.col("category") == cat)
        if sub.height == 0:
            continue
        starts = np.sort(sub["start_ns"].to_numpy() - t0)
        ends = np.sort(sub["end_ns"].to_numpy() - t0)
        b = _busy_before(starts, ends, edges)
        busy[ci] = b[1:] - b[:-1]
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
    keys = ["rank", "device_id", "stream_id"]
    stats = (gpu.group_by(keys).agg(pl.col("dur_ns").sum().alias("busy_ns"),
                                    pl.len().alias("events"))
             .sort(["busy_ns", *keys], descending=[True, False, False, False], nulls_last=True))
    drawn = stats.head(max_lanes).sort(keys, nulls_last=True)
    n_drawn = int(drawn["events"].sum())
    mode = "exact" if n_drawn <= budget else "binned"
    span = max(t1 - t0, 1)
    edges = np.linspace(0, span, bins + 1).round().astype(np.int64)
    cat_index = {c: i for i, c in enumerate(LANE_CATEGORIES)}
    for rank, dev, stream, busy, events in drawn.iter_rows():
        pred = (pl.col("rank") == rank) & (pl.col("device_id") == dev)
        pred = pred & (pl.col("stream_id").is_null() if stream is None
                       else pl.col("stream_id") == stream)
        lane = gpu.filter(pred).select("category", "start_ns", "end_ns", "dur_ns") \
            .with_columns(pl.col("category").cast(pl.String)).sort("start_ns", "end_ns")
        if mode == "exact":
            segs = [[int(s - t0), int(d), cat_index[c], 1.0]
                    for c, s, _e, d in lane.iter_rows()]
        else:
            segs = _binned(lane, t0, edges)
        out["lanes"].append({"rank": rank, "device_id": dev, "stream_id": stream,
                             "busy_ns": int(busy), "events": int(events), "segments": segs})
    out.update(mode=mode, window_start_ns=t0, window_ns=t1 - t0, drawn_events=n_drawn,
               lanes_total=stats.height, bin_ns=int(span // bins) if mode == "binned" else 0)
    return out
