"""Device memory over time from the ``memory`` table: timeline, peaks per device, step, op.

Definitions (docs/memory.md):

* **allocated bytes** after an event: the source's own running total where it records one
  (Kineto ``[memory]`` ``Total Allocated``); otherwise (nsys memory-usage events, which log
  only block sizes) the replay ``sum(bytes)`` of the events so far on that device and memory
  kind, i.e. relative to the capture start: memory allocated before the capture is not
  seen, so a free of such a block can take the level below zero.
* **reserved bytes**: the caching allocator's reservation (Kineto ``Total Reserved``); null
  where the source does not record it.
* Events are ordered by time, ties in source order; the level holds until the next event.
* **Peak of a device**: the highest level it held, the level before its first event
  included (a recorded series' total minus that event's bytes, :func:`initial_level`):
  a capture that opens on a free began above every level recorded after it (the peak's
  time is then the first event's).
* **Peak of a window** ``[s, e)`` (a step, a top-level op) = max of the level in force at
  ``s`` and the levels after every event inside the window; **rise** = peak - level at ``s``
  (what the window itself added at its worst).
* Host memory (``device_id`` -1, Kineto CPU events) is kept as its own device.
* **Device memory** (the per-device level, its peaks, steps and ops) counts only the kinds
  that live in the device's memory: nsys ``Device``, ``Device Static``, ``Array``, and
  Kineto's caching-allocator events (no kind). ``Managed`` / ``Managed Static`` (unified
  memory: it migrates between host and device and may exceed the device's memory),
  ``Pinned`` / ``Pageable`` (host memory) and ``Unknown`` are not device memory: they are
  listed by memory kind, and the device peaks carry ``not_device_peak_bytes`` (their summed
  level's peak) when the input has any.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from traceparse.timeline import Timeline

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI loads this module for every
    import numpy as np  # command, and `info` must not pay numpy's import (~0.07 s)

_KEYS = ["rank", "device_id", "memory_kind"]
#: Memory kinds that are not memory of the device they are recorded on (nsys memKind).
NOT_DEVICE = ("Managed", "Managed Static", "Pinned", "Pageable", "Unknown")


def _on_device(t: pl.DataFrame, on: bool = True) -> pl.DataFrame:
    """Rows of kinds in the device's own memory (``on``), or the others."""
    off = pl.col("memory_kind").is_in(NOT_DEVICE).fill_null(False)
    return t.filter(~off if on else off)


def timeline(tl: Timeline) -> pl.DataFrame:
    """Allocated/reserved level after each event, per rank, device and memory kind.

    Returns ``rank, device_id, memory_kind, ts_ns, bytes, allocated_bytes, reserved_bytes,
    replayed`` (``replayed`` True where the level is the replay of sizes, not recorded).
    """
    m = tl.memory
    if m.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "device_id": pl.Int32,
                                    "memory_kind": pl.String, "ts_ns": pl.Int64,
                                    "bytes": pl.Int64, "allocated_bytes": pl.Int64,
                                    "reserved_bytes": pl.Int64, "replayed": pl.Boolean})
    m = m.with_row_index("_i").with_columns(pl.col("memory_kind").cast(pl.String))
    m = m.sort(["rank", "device_id", "ts_ns", "_i"], nulls_last=True)
    recorded = pl.col("allocated_bytes").is_not_null().any().over(_KEYS)
    replay = pl.col("bytes").cum_sum().over(_KEYS)
    return m.with_columns(
        pl.when(recorded).then(pl.col("allocated_bytes").forward_fill().over(_KEYS))
        .otherwise(replay).alias("allocated_bytes"),
        (~recorded).alias("replayed"),
    ).select("rank", "device_id", "memory_kind", "ts_ns", "bytes", "allocated_bytes",
             "reserved_bytes", "replayed")


def device_levels(tl: Timeline, *, on_device: bool = True) -> pl.DataFrame:
    """Total allocated/reserved per (rank, device) over the memory kinds in the device's own
    memory after each event (``on_device=False``: over the other kinds, see ``NOT_DEVICE``).

    Example (nsys: 10 B Device, then 100 B Managed; the device level stays 10 B):
        >>> m = pl.DataFrame({"rank": [0, 0], "device_id": [0, 0], "ts_ns": [1, 2],
        ...     "bytes": [10, 100], "allocated_bytes": [None, None],
        ...     "reserved_bytes": [None, None], "memory_kind": ["Device", "Managed"]})
        >>> device_levels(Timeline(memory=m))["allocated_bytes"].to_list()
        [10]
    """
    t = _on_device(timeline(tl), on_device)
    if t.height == 0:
        return t.drop("memory_kind")
    # the level of each kind holds between its events: total = sum over kinds of the
    # latest level of each kind, i.e. a running sum of each kind's level changes
    t = t.with_columns(
        (pl.col("allocated_bytes") - pl.col("allocated_bytes").shift(1, fill_value=0)
         .over(_KEYS)).alias("_d"),
        (pl.col("reserved_bytes").fill_null(0) - pl.col("reserved_bytes").fill_null(0)
         .shift(1, fill_value=0).over(_KEYS)).alias("_dr"),
    ).sort(["rank", "device_id", "ts_ns"], maintain_order=True)
    has_res = pl.col("reserved_bytes").is_not_null().any().over("rank", "device_id")
    return t.with_columns(
        pl.col("_d").cum_sum().over("rank", "device_id").alias("allocated_bytes"),
        pl.when(has_res).then(pl.col("_dr").cum_sum().over("rank", "device_id"))
        .alias("reserved_bytes"),
    ).select("rank", "device_id", "ts_ns", "bytes", "allocated_bytes", "reserved_bytes",
             "replayed")


def peaks(tl: Timeline, *, by_kind: bool = False) -> pl.DataFrame:
    """Peak allocated (and reserved) per rank and device (and memory kind with ``by_kind``).

    Returns ``rank, device_id, [memory_kind,] events, allocs, frees, alloc_bytes,
    free_bytes, peak_allocated_bytes, peak_ts_ns, final_allocated_bytes,
    peak_reserved_bytes, replayed``.
    """
    t = timeline(tl) if by_kind else device_levels(tl)
    keys = _KEYS if by_kind else ["rank", "device_id"]
    off = pl.DataFrame() if by_kind else device_levels(tl, on_device=False)
    if t.height == 0 and off.height == 0:
        return pl.DataFrame()
    # a recorded series' level before its first event (initial_level) is a level the
    # device held too: a capture opening on a free started above every level recorded
    first = pl.col("allocated_bytes").first() - pl.col("bytes").first().fill_null(0)
    before = pl.when(pl.col("replayed").any()).then(None).otherwise(first)
    out = t.group_by(keys, maintain_order=True).agg(
        events=pl.len(),
        allocs=(pl.col("bytes") > 0).sum(), frees=(pl.col("bytes") < 0).sum(),
        alloc_bytes=pl.col("bytes").filter(pl.col("bytes") > 0).sum(),
        free_bytes=-pl.col("bytes").filter(pl.col("bytes") < 0).sum(),
        peak_allocated_bytes=pl.col("allocated_bytes").max(),
        peak_ts_ns=pl.col("ts_ns").get(pl.col("allocated_bytes").arg_max()),
        _before=before, _first_ts=pl.col("ts_ns").first(),
        final_allocated_bytes=pl.col("allocated_bytes").last(),
        peak_reserved_bytes=pl.col("reserved_bytes").max(),
        replayed=pl.col("replayed").all(),
    ).sort(keys)
    higher = pl.col("_before").is_not_null() & (pl.col("_before")
                                                 > pl.col("peak_allocated_bytes"))
    out = out.with_columns(
        pl.when(higher).then(pl.col("_before")).otherwise(pl.col("peak_allocated_bytes"))
        .cast(out.schema["peak_allocated_bytes"]).alias("peak_allocated_bytes"),
        pl.when(higher).then(pl.col("_first_ts")).otherwise(pl.col("peak_ts_ns"))
        .alias("peak_ts_ns")).drop("_before", "_first_ts")
    if off.height:  # unified/host memory recorded on a device: beside, not in, its peak
        op = off.group_by(keys).agg(not_device_peak_bytes=pl.col("allocated_bytes").max())
        out = out.join(op, on=keys, how="full", coalesce=True).sort(keys)
    return out


def window_peaks(tl: Timeline, windows: pl.DataFrame, *, label: str = "name"
                 ) -> pl.DataFrame:
    """Peak and rise of the allocated level inside each window, per device of its rank.

    Args:
        windows: ``rank, start_ns, end_ns`` and a ``label`` column (steps, ops).

    Returns:
        ``rank, <label>, start_ns, end_ns, device_id, start_allocated_bytes,
        peak_allocated_bytes, rise_bytes, peak_reserved_bytes``.
    """
    import numpy as np

    lv = device_levels(tl)
    out: list[pl.DataFrame] = []
    if lv.height == 0 or windows.height == 0:
        return pl.DataFrame()
    for (rank, dev), part in lv.group_by(["rank", "device_id"], maintain_order=True):
        w = windows.filter(pl.col("rank") == rank)
        if w.height == 0:
            continue

        ts = part["ts_ns"].to_numpy()
        alloc = part["allocated_bytes"].to_numpy().astype(np.int64)
        res = part["reserved_bytes"]
        res_np = res.fill_null(0).to_numpy().astype(np.int64)
        s, e = w["start_ns"].to_numpy(), w["end_ns"].to_numpy()
        start_lv, peak = _range_max(ts, alloc, s, e, initial=initial_level(part))
        _, peak_res = _range_max(ts, res_np, s, e)
        out.append(w.select("rank", label, "start_ns", "end_ns").with_columns(
            pl.lit(dev, dtype=pl.Int32).alias("device_id"),
            pl.Series("start_allocated_bytes", start_lv),
            pl.Series("peak_allocated_bytes", peak),
            pl.Series("rise_bytes", peak - start_lv),
            pl.Series("peak_reserved_bytes", peak_res).cast(pl.Int64)
            if res.null_count() < res.len() else
            pl.lit(None, dtype=pl.Int64).alias("peak_reserved_bytes")))
    return pl.concat(out) if out else pl.DataFrame()


def initial_level(part: pl.DataFrame) -> int:
    """The allocated level before a device's first event: for a recorded series (Kineto
    ``Total Allocated``, the total after the event) that total minus the event's own bytes,
    i.e. what was allocated before the capture; 0 for a replayed one (relative levels).

    Example (the first event allocates 2,048 B and reports 343,345,664 B allocated):
        >>> initial_level(pl.DataFrame({"allocated_bytes": [343_345_664], "bytes": [2_048],
        ...                        "replayed": [False]}))
        343343616
    """
    if not part.height or part["replayed"].any():
        return 0
    return int(part["allocated_bytes"][0]) - int(part["bytes"][0] or 0)


def _range_max(ts: np.ndarray, level: np.ndarray, s: np.ndarray, e: np.ndarray, *,
               initial: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(level in force at s, max level over [s, e)) for each window; ``initial`` before the
    first event."""
    import numpy as np

    i0 = np.searchsorted(ts, s, side="left")   # first event at or after s
    i1 = np.searchsorted(ts, e, side="left")   # first event at or after e
    before = np.where(i0 > 0, level[np.clip(i0 - 1, 0, None)], initial)
    peak = before.copy()
    nonempty = i1 > i0
    if nonempty.any():
        # sparse table for O(1) range maxima
        table = [level]
        k = 1
        while (1 << k) <= len(level):
            prev = table[-1]
            table.append(np.maximum(prev[:-(1 << (k - 1))], prev[(1 << (k - 1)):]))
            k += 1
        a, b = i0[nonempty], i1[nonempty]
        j = np.floor(np.log2(b - a)).astype(int)
        inside = np.array([max(table[jj][aa], table[jj][bb - (1 << jj)])
                           for aa, bb, jj in zip(a, b, j, strict=True)], dtype=np.int64)
        peak[nonempty] = np.maximum(before[nonempty], inside)
    return before.astype(np.int64), peak.astype(np.int64)


def top_level_ops(tl: Timeline, *, kinds: Sequence[str] = ("cpu_op",)) -> pl.DataFrame:
    """Outermost host ranges of ``kinds``: not inside another range of those kinds on the
    same (rank, process, thread). The ``depth`` column is not used: it also counts
    Python-function and annotation ranges, under which every op of an SGLang trace sits."""
    r = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(kinds))
                         & pl.col("end_ns").is_not_null())
    if r.height == 0:
        return r
    lane = ["rank", "process_id", "thread_id"]
    r = r.sort(*lane, "start_ns", "end_ns", descending=[False, False, False, False, True],
               nulls_last=True)
    prev_end = pl.col("end_ns").cum_max().shift(1).over(lane)
    return r.filter(prev_end.is_null() | (pl.col("start_ns") >= prev_end))


def op_peaks(tl: Timeline, *, top: int | None = None) -> pl.DataFrame:
    """Per top-level op name: instances, max peak and max rise of the allocated level
    (and the max reserved level, null where the source records none).

    Kineto ``cpu_op`` ranges at depth 0; for nsys, outermost NVTX push/pop ranges.
    """
    ops = top_level_ops(tl)
    if ops.height == 0:
        ops = top_level_ops(tl, kinds=("nvtx_push_pop", "nvtx_start_end"))
    if ops.height == 0:
        return pl.DataFrame()
    per = window_peaks(tl, ops.select("rank", "start_ns", "end_ns",
                                      pl.col("name").cast(pl.String)))
    if per.height == 0:
        return per
    out = per.group_by("rank", "device_id", "name").agg(
        instances=pl.len(), peak_allocated_bytes=pl.col("peak_allocated_bytes").max(),
        max_rise_bytes=pl.col("rise_bytes").max(),
        total_rise_bytes=pl.col("rise_bytes").sum(),
        peak_reserved_bytes=pl.col("peak_reserved_bytes").max(),
    ).sort(["max_rise_bytes", "name", "rank", "device_id"],
           descending=[True, False, False, False])
    return out.head(top) if top else out


def step_peaks(tl: Timeline, *, step_regex: str | None = None) -> pl.DataFrame:
    """Peak and rise of the allocated level per step (windows of
    :func:`traceparse.analyses.steps.step_windows`) and device."""
    from traceparse.analyses.steps import step_windows

    wins = step_windows(tl, step_regex=step_regex)
    if wins.height == 0:
        return pl.DataFrame()
    return window_peaks(tl, wins.with_columns(pl.col("step").cast(pl.String)), label="step")


#: Views of :func:`memory_view` (``traceparse memory --by``).
VIEWS = ("device", "kind", "step", "op", "timeline")


def memory_view(tl: Timeline, by: str = "device", *, top: int = 20,
                step_regex: str | None = None) -> pl.DataFrame:
    """One frame per view: peaks per ``device`` or memory ``kind``, per ``step``, per
    top-level ``op`` (the ``top`` with the largest rise), or the device ``timeline``."""
    if by == "device":
        return peaks(tl)
    if by == "kind":
        return peaks(tl, by_kind=True)
    if by == "step":
        return step_peaks(tl, step_regex=step_regex)
    if by == "op":
        return op_peaks(tl, top=top)
    if by == "timeline":
        return device_levels(tl)
    raise ValueError(f"unknown view {by!r}; expected one of {VIEWS}")
