"""Reference definition for tests/test_replay_engine.py: the what-if replay engine as it
was before issue 16 (each replay joined, sorted and windowed its own copy of the activities,
and looped over the epochs of every process with numpy inside). Kept verbatim, only this
docstring is new; the algorithm is described in :mod:`traceparse.analyses.replay`."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceparse.links import launch_join
from traceparse.timeline import Timeline

#: API calls that block the host until GPU work is done.
SYNC_RE = (r"(?i)synchroni[sz]e|^cudaMemcpy(_v\d+)?$|^cuMemcpy[DH]to[DH](_v\d+)?$"
           r"|^cudaMemcpy[23]D(_v\d+)?$|^hipMemcpy$")
_NEG = -(1 << 62)
#: Offset of the lane communication moves to under ``overlap_comm`` (stream ids are far
#: smaller: nsys and Kineto number streams from small integers).
_COMM_LANE = 1 << 48
_STREAM = ["rank", "process_id", "device_id", "stream_id"]
_PROC = ["rank", "process_id"]


#: The gpu/launch columns the replay reads or returns (the rest is never carried through its
#: sorts and windows: on 1M kernels the full 40-column frame was the command's memory peak).
_COLS = ("rank", "process_id", "device_id", "stream_id", "kind", "category", "name",
         "correlation_id", "api_start_ns", "api_end_ns", "start_ns", "end_ns", "dur_ns")


def _activities(tl: Timeline, durations: pl.Series | None) -> pl.DataFrame:
    rows = launch_join(tl).with_row_index("_i").select("_i", *_COLS)
    if durations is not None:
        rows = rows.with_columns(pred_dur_ns=durations.cast(pl.Int64))
    else:
        rows = rows.with_columns(pred_dur_ns=pl.col("dur_ns"))
    rows = rows.filter(pl.col("kind").cast(pl.String) != "sync").with_columns(
        pl.col("process_id").fill_null(0), pl.col("stream_id").fill_null(-1))
    return rows


def _not_launch(tl: Timeline) -> pl.DataFrame:
    """``rank, process_id, correlation_id`` of calls that are not issuing cost: blocking
    calls and warm-up (:func:`traceparse.analyses.attribution.classify_calls`)."""
    from traceparse.analyses.attribution import classify_calls

    return (classify_calls(tl, columns=[*_PROC, "correlation_id"])
            .filter(pl.col("call_part") != "launch")
            .select(*_PROC, "correlation_id", "call_part", "api_start_ns", "api_end_ns")
            .with_columns(pl.col("process_id").fill_null(0))
            .unique(subset=[*_PROC, "correlation_id"], keep="first"))


def _launch_cum(tl: Timeline) -> pl.DataFrame:
    """Per call: the rank's **launch overhead** (GPU idle while the host was issuing work,
    :func:`traceparse.analyses.attribution.part_intervals`) that had ended before the call
    began (cumulative). Removing launch cost moves later host work earlier by at most the
    time the GPU actually waited for launches, so the saving never exceeds the rank's
    launch overhead; a blocking or warm-up call is not launch overhead."""
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import part_intervals

    lo = intervals.union(part_intervals(tl, "launch_overhead_ns").select(
        "rank", "start_ns", "end_ns"), by=["rank"])
    lo = lo.sort("rank", "end_ns").with_columns(
        _cum=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over("rank"))
    calls = (tl.api.filter(pl.col("correlation_id").is_not_null())
             .select(*_PROC, "correlation_id", "start_ns")
             .with_columns(pl.col("process_id").fill_null(0))
             .unique(subset=[*_PROC, "correlation_id"], keep="first")
             .sort("start_ns"))
    return _before(calls, lo, "start_ns", "_cum")


def _before(q: pl.DataFrame, lo: pl.DataFrame, at: str, name: str) -> pl.DataFrame:
    """``q`` with ``name``: the length of ``lo`` (merged, ``_cum`` cumulative) before
    ``q[at]`` on its rank (an interval open at that time counts up to it)."""
    iv = lo.select(pl.col("rank").cast(q.schema["rank"]), pl.col("start_ns").alias(at),
                   pl.col("end_ns").alias("_e"),
                   (pl.col("_cum") - (pl.col("end_ns") - pl.col("start_ns"))).alias("_b"))
    j = q.sort(at).join_asof(iv, on=at, by="rank", strategy="backward",
                             check_sortedness=False)
    # the matched interval started at or before `at` (join_asof on its start)
    starts = lo.select(pl.col("rank").cast(q.schema["rank"]), pl.col("start_ns").alias("_s"),
                       pl.col("start_ns").alias(at))
    j = j.join_asof(starts, on=at, by="rank", strategy="backward", check_sortedness=False)
    val = pl.col("_b") + pl.min_horizontal("_e", at) - pl.col("_s")
    return j.with_columns(pl.when(pl.col("_s").is_null()).then(0).otherwise(val)
                          .cast(pl.Int64).alias(name)).drop("_e", "_b", "_s")


def _cum_at(tl: Timeline, q: pl.DataFrame) -> pl.DataFrame:
    """``q`` (``rank, process_id, _epoch, _t``) with ``_c``: the rank's launch overhead
    that had ended by ``_t``."""
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import part_intervals

    lo = intervals.union(part_intervals(tl, "launch_overhead_ns").select(
        "rank", "start_ns", "end_ns"), by=["rank"])
    lo = lo.sort("rank", "end_ns").with_columns(
        _c=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over("rank"))
    lo = lo.rename({"_c": "_cum"})
    return _before(q, lo, "_t", "_c").drop("_t")


def _syncs(tl: Timeline, acts: pl.DataFrame, overlap_comm: bool) -> pl.DataFrame:
    """Blocking sync calls: ``rank, process_id, sync_start, sync_end, w`` (measured end of
    the work launched before the call), ``tail`` (return - w). A sync call is blocking when
    it was entered before ``w`` and returned at or after it (a stream sync on an idle
    stream, or one that returned before other streams' work ended, is not)."""
    s = (tl.api.filter(pl.col("name").cast(pl.String).str.contains(SYNC_RE))
         .select(*_PROC, pl.col("start_ns").alias("sync_start"),
                 pl.col("end_ns").alias("sync_end"))
         .with_columns(pl.col("process_id").fill_null(0)))
    # copies to/from pageable memory block the host too (attribution's host_sync calls)
    paged = (_not_launch(tl).filter(pl.col("call_part") == "host_sync")
             .select(*_PROC, pl.col("api_start_ns").alias("sync_start"),
                     pl.col("api_end_ns").alias("sync_end")))
    s = pl.concat([s, paged.cast(s.schema)]).unique().sort("sync_start")
    if s.height == 0:
        return s.with_columns(w=pl.lit(0, pl.Int64), tail=pl.lit(0, pl.Int64))
    a = acts
    if overlap_comm:
        a = a.filter(pl.col("category").cast(pl.String) != "communication")
    t = pl.coalesce("api_start_ns", "start_ns")
    a = (a.select(*_PROC, t.alias("sync_start"), pl.col("end_ns").alias("_e"))
         .sort("sync_start").with_columns(_e=pl.col("_e").cum_max().over(_PROC)))
    s = s.join_asof(a, on="sync_start", by=_PROC, strategy="backward",
                    check_sortedness=False)
    # blocking: the call was entered before that work ended and returned after it
    s = s.filter(pl.col("_e").is_not_null() & (pl.col("_e") > pl.col("sync_start"))
                 & (pl.col("sync_end") >= pl.col("_e")))
    return s.select(*_PROC, "sync_start", "sync_end", pl.col("_e").alias("w"),
                    (pl.col("sync_end") - pl.col("_e")).clip(0).alias("tail"))


def _comm_overlap(acts: pl.DataFrame) -> pl.Series:
    """Per activity: time in its pre-gap ``[prev_end, start)`` covered by **exposed**
    communication of the same (rank, device): a communication activity running while no
    compute kernel runs (the attribution's ``communication_ns``)."""
    from traceparse.analyses import intervals
    from traceparse.analyses.comm import _overlap_ns

    cat = pl.col("category").cast(pl.String)
    by = ["rank", "device_id"]
    cover = intervals.subtract(
        intervals.union(acts.filter(cat == "communication"), by=by),
        intervals.union(acts.filter(cat == "compute"), by=by), by=by)
    q = acts.select("rank", "device_id",
                    pl.col("_prev_end").fill_null(pl.col("start_ns")).alias("start_ns"),
                    pl.max_horizontal(pl.col("_prev_end").fill_null(pl.col("start_ns")),
                                      "start_ns").alias("end_ns"))
    return _overlap_ns(q, cover, ["rank", "device_id"])


def replay(tl: Timeline, *, durations: pl.Series | None = None,
           no_launch_overhead: bool = False, overlap_comm: bool = False) -> pl.DataFrame:
    """Replay ``tl``'s GPU work (see the module docstring).

    Args:
        tl: the timeline.
        durations: one duration (ns) per ``tl.gpu`` row, in its order (sync rows ignored);
            None keeps the measured durations.
        no_launch_overhead: remove launch-call time and launch-to-start latency.
        overlap_comm: communication never delays other work.

    Returns:
        The non-sync GPU rows (``rank, process_id, device_id, stream_id, kind, category,
        name, api_start_ns, start_ns, end_ns, dur_ns``) plus ``pred_start_ns, pred_end_ns,
        pred_dur_ns`` and ``_i`` (the row's index in ``tl.gpu``).

    Example:
        One stream, kernels A (API 0..5, GPU 10..20) and B (API 6..8, GPU 25..35; queued:
        its call began before A ended, gap 5 kept). With A's duration halved: A 10..15,
        B max(15 + 5, 6) = 20..30.
    """
    a = _activities(tl, durations)
    if overlap_comm:
        # communication on a lane of its own: it no longer holds back the stream's other
        # work (the original stream id is restored on output)
        a = a.with_columns(_sid=pl.col("stream_id"), stream_id=pl.when(
            pl.col("category").cast(pl.String) == "communication")
            .then(pl.col("stream_id") + _COMM_LANE).otherwise(pl.col("stream_id")))
    a = a.sort(*_STREAM, "start_ns", "_i")
    # _prev_end: end of the stream's previous activity; _busy_until: latest end before it
    a = a.with_columns(_prev_end=pl.col("end_ns").shift(1).over(_STREAM),
                       _busy_until=pl.col("end_ns").shift(1).cum_max().over(_STREAM))
    # host-bound: the launch call was still in progress when the stream went idle (it began
    # after, or returned after, the previous activity ended): the host, not the stream
    # order, decided the start
    host_bound = pl.col("_prev_end").is_null() | (
        pl.col("api_start_ns").is_not_null()
        & (pl.max_horizontal("api_start_ns", "api_end_ns") > pl.col("_busy_until"))
        & (pl.col("start_ns") >= pl.col("_busy_until")))
    # queued rows keep their measured gap, negative when the stream overlapped itself
    gap = (pl.col("start_ns") - pl.col("_prev_end")).fill_null(0)
    a = a.with_columns(_hb=host_bound, _g=pl.when(host_bound).then(0).otherwise(gap))
    if overlap_comm:
        ov = _comm_overlap(a)
        is_comm = pl.col("category").cast(pl.String) == "communication"
        a = a.with_columns(_ov=ov).with_columns(
            _g=pl.when(is_comm).then(pl.col("_g"))
            .otherwise(pl.min_horizontal(pl.col("_g"), (pl.col("_g") - pl.col("_ov"))
                                         .clip(0)))).drop("_ov")
    # host time of the call (or of the activity itself when no call is known)
    launched = pl.col("api_start_ns").is_not_null()
    lat = pl.when(pl.col("_hb") & launched).then(pl.col("start_ns") - pl.col("api_start_ns"))
    a = a.with_columns(_host=pl.coalesce("api_start_ns", "start_ns"),
                       _lat=pl.when(launched).then(lat.fill_null(0)).otherwise(0))
    if no_launch_overhead:
        lc = _launch_cum(tl).select(*_PROC, "correlation_id", "_cum")
        a = a.join(lc, on=[*_PROC, "correlation_id"], how="left", maintain_order="left")
        # each activity keeps its measured launch-to-start latency (its own call, an event
        # wait, a busy engine, a blocking copy, a module load): only the launch overhead
        # before its call is removed (_cum)
        a = a.with_columns(_cum=pl.col("_cum").fill_null(0))
    else:
        a = a.with_columns(_cum=pl.lit(0, pl.Int64))
    syncs = _syncs(tl, a, overlap_comm)
    # epoch = number of blocking syncs of the process that returned before the call
    if syncs.height:
        se = syncs.sort("sync_end").with_columns(
            _epoch=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(_PROC),
            _cum_at=pl.lit(0, pl.Int64))
        a = a.sort("_host").join_asof(
            se.select(*_PROC, pl.col("sync_end").alias("_host"), "_epoch"), on="_host",
            by=_PROC, strategy="backward", check_sortedness=False)
    else:
        se = syncs.with_columns(_epoch=pl.lit(0, pl.Int64))
        a = a.with_columns(_epoch=pl.lit(0, pl.Int64))
    a = a.with_columns(pl.col("_epoch").fill_null(0).cast(pl.Int64))
    if no_launch_overhead and syncs.height:
        # launch time is only removed since the last sync returned: rebase the cumulative
        # sum at the previous sync's return (a process without syncs: at its first call);
        # a sync's entry moves earlier by the launch time removed before it (_adv)
        at = _cum_at(tl, se.select(*_PROC, "_epoch", pl.col("sync_end").alias("_t")))
        base = at.select(*_PROC, "_epoch", pl.col("_c").alias("_base"))
        a = a.join(base, on=[*_PROC, "_epoch"], how="left")
        first = a.group_by(*_PROC, "_epoch").agg(pl.col("_cum").min().alias("_min"))
        a = a.join(first, on=[*_PROC, "_epoch"], how="left").with_columns(
            _base=pl.when(pl.col("_epoch") == 0).then(
                pl.when(pl.struct(*_PROC).is_in(se.select(pl.struct(*_PROC)).to_series()
                                                .implode())).then(0).otherwise(pl.col("_min")))
            .otherwise(pl.col("_base")))
        a = a.with_columns(_cum=(pl.col("_cum") - pl.col("_base")).clip(0, None)).drop(
            "_base", "_min")
        ent = _cum_at(tl, se.select(*_PROC, "_epoch", pl.col("sync_start").alias("_t")))
        prev = base.with_columns(pl.col("_epoch") + 1)
        se = (se.join(ent, on=[*_PROC, "_epoch"], how="left")
              .join(prev, on=[*_PROC, "_epoch"], how="left")
              .with_columns(_adv=(pl.col("_c") - pl.col("_base").fill_null(0)).clip(0, None))
              .drop("_c", "_base"))
    out = []
    for key, part in a.group_by(_PROC):
        ps = se.filter((pl.col("rank") == key[0]) & (pl.col("process_id") == key[1]))
        out.append(_replay_process(part, ps))
    res = pl.concat(out) if out else a.with_columns(
        pred_start_ns=pl.col("start_ns"), pred_end_ns=pl.col("end_ns"))
    if overlap_comm:
        res = res.with_columns(stream_id=pl.col("_sid"))
    return res.sort("_i").select(
        "_i", "rank", "process_id", "device_id", "stream_id", "kind", "category",
        pl.col("name").cast(pl.String), "api_start_ns", "start_ns", "end_ns", "dur_ns",
        "pred_start_ns", "pred_end_ns",
        (pl.col("pred_end_ns") - pl.col("pred_start_ns")).alias("pred_dur_ns"))


def _seg_cummax(v: np.ndarray, run_start: np.ndarray) -> np.ndarray:
    """Cumulative max of ``v`` restarting at every index where ``run_start`` is True."""
    run = np.cumsum(run_start) - 1
    lo = v.min() if v.size else 0
    span = int(v.max() - lo) + 1 if v.size else 1
    off = (v - lo) + run.astype(np.int64) * span  # runs never reach into the next one
    return np.maximum.accumulate(off) - run.astype(np.int64) * span + lo


def _replay_process(a: pl.DataFrame, syncs: pl.DataFrame) -> pl.DataFrame:
    """Replay one process epoch by epoch (see the module docstring); numpy inside."""
    a = a.sort("_epoch", "device_id", "stream_id", "start_ns", "_i")
    ep = a["_epoch"].to_numpy()
    dev = a["device_id"].fill_null(-1).to_numpy().astype(np.int64)
    st = a["stream_id"].to_numpy().astype(np.int64)
    t0 = int(a.select(pl.min_horizontal(pl.col("_host").min(), pl.col("start_ns").min()))
             .item())
    g = a["_g"].to_numpy().astype(np.int64)
    d = a["pred_dur_ns"].to_numpy().astype(np.int64)
    host = a["_host"].to_numpy().astype(np.int64) - t0
    base_h = host + a["_lat"].to_numpy().astype(np.int64) - a["_cum"].to_numpy().astype(
        np.int64)
    sync_rows = syncs.sort("_epoch").rows(named=True) if syncs.height else []
    bounds = np.searchsorted(ep, np.arange(int(ep.max()) + 2 if ep.size else 1))
    pred_end = np.zeros(ep.size, dtype=np.int64)
    state: dict[tuple[int, int], int] = {}
    shift = 0
    older_max: int | None = None
    last_epoch = max(int(ep.max()) if ep.size else 0, len(sync_rows))
    prev_lo = prev_hi = 0
    for e in range(last_epoch + 1):
        if e > 0:
            sr = sync_rows[e - 1]
            w_pred = older_max
            if prev_hi > prev_lo:
                sel = host[prev_lo:prev_hi] <= sr["sync_start"] - t0
                if sel.any():
                    w_pred = max(w_pred if w_pred is not None else _NEG,
                                 int(pred_end[prev_lo:prev_hi][sel].max()))
                older_max = max(older_max if older_max is not None else _NEG,
                                int(pred_end[prev_lo:prev_hi].max()))
                prev_lo = prev_hi = 0
            w = w_pred if w_pred is not None else int(sr["w"]) - t0
            adv = sr.get("_adv") or 0
            shift = max(sr["sync_start"] - t0 + shift - adv, w) + sr["tail"] \
                - (sr["sync_end"] - t0)
        lo = int(bounds[e]) if e < bounds.size else ep.size
        hi = int(bounds[e + 1]) if e + 1 < bounds.size else ep.size
        if hi <= lo:
            continue
        dv, sv = dev[lo:hi], st[lo:hi]
        new_run = np.ones(hi - lo, dtype=bool)
        new_run[1:] = (dv[1:] != dv[:-1]) | (sv[1:] != sv[:-1])
        step = g[lo:hi] + d[lo:hi]
        cs = np.cumsum(step)
        run_first = np.flatnonzero(new_run)
        run_id = np.cumsum(new_run) - 1
        c = cs - (cs[run_first] - step[run_first])[run_id]
        m = _seg_cummax(base_h[lo:hi] + shift + d[lo:hi] - c, new_run)
        init = np.array([state.get((int(dv[i]), int(sv[i])), _NEG) for i in run_first],
                        dtype=np.int64)[run_id]
        pe = c + np.maximum(init, m)
        pred_end[lo:hi] = pe
        run_last = np.append(run_first[1:], hi - lo) - 1
        for i in run_last:
            state[(int(dv[i]), int(sv[i]))] = int(pe[i])
        prev_lo, prev_hi = lo, hi
    pred_end = pred_end + t0
    return a.with_columns(pred_end_ns=pl.Series(pred_end)).with_columns(
        pred_start_ns=pl.col("pred_end_ns") - pl.col("pred_dur_ns"))
