"""Timeline overview data: GPU activity per (rank, device, stream) lane, downsampled.

The overview must stay small however big the trace is. Two modes:

* **exact** (at most ``budget`` activities in the drawn lanes): every activity is one
  segment ``[start_ns, dur_ns, category_index, 1.0]`` relative to the window start.
* **binned** (more than ``budget``): the window is cut into ``bins`` equal bins; in each bin
  of each lane the *dominant* category (most busy time) is drawn with a shade equal to the
  lane's busy fraction of the bin (rounded up to quarters: 0.25, 0.5, 0.75, 1.0). Consecutive bins
  with the same category and shade are merged into one segment. The report shows a visible
  notice saying so.

At most ``max_lanes`` lanes are drawn (the busiest; ties by rank, device, stream); the
notice counts the rest.

Busy time per bin is **exact integer** nanoseconds (:func:`bin_busy`): an activity
``[s, e)`` adds ``e - s`` to its bin when it starts and ends in one; otherwise it adds the
part of its first bin, the part of its last bin, and the width of every bin in between
(counted with a difference array). No float enters, so a shade is drawn only where some
activity overlaps the bin: an idle bin's busy time is 0 however late in the trace it lies
(float64 running sums of start times, used before, round past 2**53 ns and shaded idle bins
0.25). The shade is ``ceil(4 * busy / width) / 4`` in integers. The sums per bin add across
any split of the activities, so the same numbers come from time windows of the trace
(:mod:`traceparse.reports.lanes_parts`). Overlapping activities on one stream count twice
(streams serialise, so this only matters for malformed traces; the shade is capped at 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.schema import CATEGORIES

#: Category order used by the ``category_index`` of segments.
LANE_CATEGORIES = CATEGORIES


def category_index() -> pl.Expr:
    """The ``category`` column as its index in :data:`LANE_CATEGORIES` (``ci``, Int64;
    null for a category outside them, which the overview does not draw)."""
    return pl.col("category").cast(pl.String).replace_strict(
        list(LANE_CATEGORIES), list(range(len(LANE_CATEGORIES))), default=None,
        return_dtype=pl.Int64).alias("ci")


def bin_busy(key: np.ndarray, starts: np.ndarray, ends: np.ndarray, edges: np.ndarray,
             keys: int) -> np.ndarray:
    """Exact busy time (int64 ns) per (key, bin) of the activities ``[starts, ends)``.

    Args:
        key: each activity's row of the result (int, ``0 <= key < keys``), e.g. its
            category index.
        starts, ends: int64 ns, relative to the window start (any order).
        edges: the bin edges (int64 ns, non-decreasing, :func:`bin_edges`); time outside
            ``[edges[0], edges[-1])`` is not counted.
        keys: number of result rows.

    Returns:
        int64 array ``(keys, len(edges) - 1)``: the summed overlap of each key's
        activities with each bin. Sums of the results of disjoint sets of activities are
        the result of their union.

    Example (bins of 10 ns; ``[5, 32)`` adds 5 to bin 0, 10 to bins 1 and 2, 2 to bin 3):
        >>> edges = np.array([0, 10, 20, 30, 40])
        >>> bin_busy(np.array([0, 1]), np.array([5, 12]), np.array([32, 14]), edges, 2)
        array([[ 5, 10, 10,  2],
               [ 0,  2,  0,  0]])
    """
    nb = len(edges) - 1
    edges = np.asarray(edges, dtype=np.int64)
    s = np.clip(np.asarray(starts, dtype=np.int64), edges[0], edges[-1])
    e = np.clip(np.asarray(ends, dtype=np.int64), edges[0], edges[-1])
    keep = e > s
    k, s, e = np.asarray(key, dtype=np.int64)[keep], s[keep], e[keep]
    # the bin of the first ns and of the last ns (side="right": of equal edges the last,
    # so never an empty bin)
    first = np.searchsorted(edges, s, side="right") - 1
    last = np.searchsorted(edges, e - 1, side="right") - 1
    out = np.zeros(keys * nb, np.int64)
    one = first == last
    np.add.at(out, k[one] * nb + first[one], e[one] - s[one])
    k, s, e, first, last = k[~one], s[~one], e[~one], first[~one], last[~one]
    np.add.at(out, k * nb + first, edges[first + 1] - s)
    np.add.at(out, k * nb + last, e - edges[last])
    # full bins first + 1 .. last - 1: +1 at first + 1, -1 at last, per key; cumsum
    row = nb + 1
    diff = (np.bincount(k * row + first + 1, minlength=keys * row)
            - np.bincount(k * row + last, minlength=keys * row))
    full = np.cumsum(diff.reshape(keys, row), axis=1)[:, :nb]
    busy: np.ndarray = out.reshape(keys, nb) + full * (edges[1:] - edges[:-1])
    return busy


def _binned(lane: pl.DataFrame, t0: int, edges: np.ndarray) -> list[list[float]]:
    rows = lane.select(category_index(), "start_ns", "end_ns").drop_nulls("ci")
    busy = bin_busy(rows["ci"].to_numpy(), rows["start_ns"].to_numpy() - t0,
                    rows["end_ns"].to_numpy() - t0, edges, len(LANE_CATEGORIES))
    return bin_segments(busy, edges)


def bin_segments(busy: np.ndarray, edges: np.ndarray) -> list[list[float]]:
    """Binned-mode segments of one lane from its busy time per category and bin
    (``busy``: int64 ns, categories x bins, :func:`bin_busy`) and the bin ``edges``
    (int64, relative). A bin's shade is ``ceil(4 * min(busy, width) / width) / 4``
    computed in integers: 0 (not drawn) only when nothing ran in it, else 0.25 to 1."""
    width = edges[1:] - edges[:-1]
    total = np.minimum(busy.sum(axis=0), width)
    level = -(-4 * total // np.maximum(width, 1)) / 4
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
        segs = exact_segments(lane, t0) if mode == "exact" else _binned(lane, t0, edges)
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
