"""Host time a what-if replay takes away (:mod:`traceparse.analyses.replay`): removed
intervals and the profiler's own recording cost.

* **Removed intervals** (``remove``, and the launch overhead under ``no_launch_overhead``):
  unioned per rank (:func:`_rank_union`); a host instant moves earlier by the union's
  length that lies before it (:func:`_cum_at`), counted since the process's last blocking
  sync returned.
* **The profiler's cost** (``profiler``: :mod:`traceparse.analyses.profiler_cost`): every
  recorded host op (``cpu_op``, ``user_annotation``, ``profiler_step``,
  ``python_function``) costs the per-event estimate of the step it began in
  (:func:`traceparse.analyses.profiler_cost.event_costs`, the costs ``predict`` removes); a
  host instant moves earlier by the summed cost of the recorded ops of its process that
  began before it, as in :mod:`traceparse.analyses.replay_host`. The ops that began inside
  a removed interval count only their summed cost beyond its length: that much is already
  gone with the interval, so the two never remove the same host time twice, and never
  less than the profiler's cost alone (:func:`outside_removed`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses._arrays import length_before, seg_cummax
from traceparse.links import launch_links
from traceparse.timeline import Timeline

_I64 = np.int64
_PROC = ["rank", "process_id"]

def _rank_union(parts: pl.DataFrame) -> pl.DataFrame:
    """The union of ``parts``' intervals per rank (as :func:`traceparse.analyses.intervals.
    union` merges them: overlapping or touching intervals join) as ``rank, end_ns, _cum``
    (the merged length up to each end), sorted by rank and end."""
    f = parts.select(pl.col("rank").cast(pl.Int64), pl.col("start_ns").cast(pl.Int64),
                     pl.col("end_ns").cast(pl.Int64)).drop_nulls().filter(
        pl.col("end_ns") > pl.col("start_ns"))
    r, s, e = (f[c].to_numpy() for c in ("rank", "start_ns", "end_ns"))
    o = np.argsort(s, kind="stable")
    o = o[np.argsort(r[o], kind="stable")]
    r, s, e = r[o], s[o], e[o]
    first = np.ones(r.size, bool)
    first[1:] = r[1:] != r[:-1]
    reach = np.zeros(r.size, _I64)  # latest end before each interval of its rank
    reach[1:] = seg_cummax(e, first)[:-1]
    new = np.flatnonzero(first | (s > reach))
    ce = np.maximum.reduceat(e, new) if new.size else e[:0]
    cr, cl = r[new], ce - s[new]
    cum = np.cumsum(cl)
    rf = np.flatnonzero(np.append(True, cr[1:] != cr[:-1])) if cr.size else new[:0]
    cum = cum - np.repeat((cum - cl)[rf], np.diff(np.append(rf, cr.size)))
    return pl.DataFrame({"rank": cr, "end_ns": ce, "_cum": cum}).cast(
        {"rank": parts.schema["rank"]})


def _cum_at(lo: pl.DataFrame, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per (rank, time): the removal set's length (``_rank_union`` frame ``lo``) before
    ``t`` (an interval still open at ``t`` counts up to ``t``)."""
    out = np.zeros(t.size, _I64)
    if lo.height == 0 or t.size == 0:
        return out
    lr = lo["rank"].to_numpy().astype(_I64)
    ends = lo["end_ns"].to_numpy().astype(_I64)
    cums = lo["_cum"].to_numpy().astype(_I64)
    b = 0
    while b < lr.size:  # rank by rank: ``lo`` is sorted by rank (no np.unique sort of it)
        r = int(lr[b])
        a, b = b, int(np.searchsorted(lr, r, side="right"))
        e, c = ends[a:b], cums[a:b]
        starts = e - (c - np.append(0, c[:-1]))  # each interval's length off its end
        sel = np.flatnonzero(rank == r)
        out[sel] = length_before(starts, e, t[sel])
    return out


def _launch_cum(tl: Timeline, p: Any, lo: pl.DataFrame | None = None) -> np.ndarray:
    """Per activity: the rank's **launch overhead** (GPU idle while the host was issuing
    work, :func:`traceparse.analyses.attribution.part_intervals`) that had ended before
    its launch call began (cumulative; the call is the first in file order with the
    activity's key). Removing launch cost moves later host work earlier by at most the
    time the GPU actually waited for launches, so the saving never exceeds the rank's
    launch overhead; a blocking or warm-up call is not launch overhead."""
    from traceparse.analyses.attribution import part_intervals

    if lo is None:
        lo = _rank_union(part_intervals(tl, "launch_overhead_ns"))
    out = np.zeros(p.gi.size, _I64)
    if lo.height == 0 or p.gi.size == 0:
        return out
    if tl.gpu["process_id"].null_count() or tl.api["process_id"].null_count():
        return _launch_cum_join(tl, p, lo)
    row = launch_links(tl)["api_row_file"].gather(p.gi)
    call_start = tl.api["start_ns"].gather(row)
    has = call_start.is_not_null().to_numpy()
    t = call_start.fill_null(0).to_numpy().astype(_I64)
    return np.where(has, _cum_at(lo, p.rank, t), 0)


def _launch_cum_join(tl: Timeline, p: Any, lo: pl.DataFrame) -> np.ndarray:
    """:func:`_launch_cum` where process ids can be null (null ids are read as 0 on both
    sides, so the call is found by a join on the filled key)."""
    key = [*_PROC, "correlation_id"]
    calls = (tl.api.filter(pl.col("correlation_id").is_not_null())
             .select(*key, pl.col("start_ns").alias("_t"))
             .with_columns(pl.col("process_id").fill_null(0))
             .unique(subset=key, keep="first"))
    rows = (tl.gpu.select(*key).with_columns(pl.col("process_id").fill_null(0))[p.gi]
            .join(calls, on=key, how="left", maintain_order="left"))
    has = rows["_t"].is_not_null().to_numpy()
    t = rows["_t"].fill_null(0).to_numpy().astype(_I64)
    return np.where(has, _cum_at(lo, p.rank, t), 0)


#: The profiler's cost as the replay takes it: recorded-op start times per
#: ``(rank, process_id)`` (sorted; :func:`traceparse.analyses.profiler_cost.advance_fn`) and
#: each op's host cost (ns, aligned with the times;
#: :func:`traceparse.analyses.profiler_cost.event_costs`).
Profiler = tuple[dict[tuple[int, int], np.ndarray], dict[tuple[int, int], np.ndarray]]


def outside_removed(times: np.ndarray, costs: np.ndarray, lo: pl.DataFrame | None,
                    rank: int) -> tuple[np.ndarray, np.ndarray]:
    """``times`` (sorted) and their ``costs`` less what the removal union ``lo``
    (:func:`_rank_union` frame) of ``rank`` already takes away: the ops that began inside
    one of its intervals keep only the part of their summed cost beyond the interval's
    length (none, where the estimate fits in it). Removing the interval takes its whole
    length, the profiler's recording in it included; where the estimated cost of the ops
    in it is longer than the interval, the remainder is still the profiler's, so a fix
    never removes less host time than the profiler's removal alone (dropping those ops
    outright made a fusion "save" -25.8 us without the profiler on the MI250 trace)."""
    if lo is None or lo.height == 0 or times.size == 0:
        return times, costs
    f = lo.filter(pl.col("rank").cast(pl.Int64) == rank)
    if f.height == 0:
        return times, costs
    e = f["end_ns"].to_numpy().astype(_I64)
    c = f["_cum"].to_numpy().astype(_I64)
    length = c - np.append(0, c[:-1])
    starts = e - length
    k = np.searchsorted(starts, times, side="right") - 1
    inside = (k >= 0) & (times < e[np.maximum(k, 0)])
    if not inside.any():
        return times, costs
    ki = k[inside]
    summed = np.bincount(ki, weights=costs[inside], minlength=e.size)
    keep = np.clip(summed - length, 0, None) / np.where(summed > 0, summed, 1)
    out = np.asarray(costs, float).copy()
    out[inside] = out[inside] * keep[ki]
    left = ~inside | (out > 0)
    return times[left], out[left]


def profiler_parts(times: np.ndarray | None, per_event_ns: float | np.ndarray,
                   host: np.ndarray,
                   ep: np.ndarray, syncs: tuple[list[int], ...] | None
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """The profiler's cost removed before each launch (``host``: call entries, ``ep``: their
    epochs) and before each blocking sync's entry, both counted since the process's previous
    blocking sync returned (as the removed intervals are): ``(per row, per sync or None)``.
    ``times``: the recorded ops left to count (:func:`outside_removed`), each at
    ``per_event_ns`` (one cost, or one per op)."""
    from traceparse.analyses.profiler_cost import advance

    a = advance(times, host, per_event_ns)
    if syncs is None:
        return a, None
    ss, se = np.asarray(syncs[0], _I64), np.asarray(syncs[1], _I64)
    a_se = advance(times, se, per_event_ns)
    base = np.append(0, a_se)
    a_ss = np.clip(advance(times, ss, per_event_ns) - base[:-1], 0, None)
    return a - base[np.minimum(ep, se.size)], a_ss
