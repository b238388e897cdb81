"""The replay of :mod:`traceparse.analyses.replay` with a faster host: every host instant
moves earlier by the host time spent before it that the program would not spend (the
profiler's own recording cost, :mod:`traceparse.analyses.profiler_cost`), and the step
times of the result.

The engine is the same (stream order, host-caused vs queued gaps, blocking syncs, one
closed form per epoch); only the host side changes. In epoch ``e`` of a process (after its
``e``-th blocking sync returned at measured ``R``), a launch call entered at measured ``t``
is entered, in the replay, at ``t + shift_e - (A(t) - A(R))`` where ``A`` is the removed
host time before an instant and ``shift_e`` the epoch's shift that the sync's replayed
return gave (replay docstring). The sync calls themselves are entered earlier by the same
rule, so a host-bound stretch that ends in a sync (``.item()``) shortens. With ``A = 0``
this is exactly :func:`traceparse.analyses.replay.predicted` (tested): same trace, same
durations, same ends.

Step time (:func:`step_times`): the measured step time of a configuration run without the
profiler is ``perf_counter`` around the step plus a synchronize, i.e. from the step's host
start to the end of its last GPU work, the steps not overlapping. In the replay, step
``s`` runs from ``max(replayed host start of s, replayed end of step s-1)`` to
``max(replayed end of the last GPU activity launched in s, replayed host end of s)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceparse.analyses.replay import (
    _NEG,
    _Prep,
    _prepare,
    _stage,
    profiler_instants,
    solve_runs,
)
from traceparse.timeline import Timeline

_I64 = np.int64
#: ``(process code key (rank, process_id), instants) -> removed host time before each``
Advance = Callable[[tuple[int, int], np.ndarray], np.ndarray]


@dataclass(frozen=True)
class HostReplay:
    """A replay's result: per non-sync GPU row (``gi`` = its ``tl.gpu`` index) the
    replayed start and end, and per process the epoch shifts to map host instants."""

    gi: np.ndarray
    pred_start: np.ndarray
    pred_end: np.ndarray
    #: per (rank, process_id): (measured sync returns, shift per epoch, t0, its advance)
    epochs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    advance: Advance

    def host_time(self, key: tuple[int, int], t: np.ndarray) -> np.ndarray:
        """Replayed instants of measured host instants ``t`` of process ``key`` (an
        instant equal to a sync's return is taken just before it: a step's end is the
        entry of the synchronize that follows it)."""
        t = np.asarray(t, _I64)
        ret, shift = self.epochs.get(key, (np.zeros(0, _I64), np.zeros(1, _I64)))
        ep = np.searchsorted(ret, t, side="left")
        base = np.where(ep > 0, self.advance(key, ret[np.maximum(ep - 1, 0)]), 0) \
            if ret.size else np.zeros(t.shape, _I64)
        return t + shift[np.minimum(ep, shift.size - 1)] - (self.advance(key, t) - base)


def _no_advance(key: tuple[int, int], t: np.ndarray) -> np.ndarray:
    return np.zeros(np.asarray(t).shape, _I64)


def _syncs(p: _Prep, q: int, rows: np.ndarray, extra: np.ndarray | None = None
           ) -> tuple[list[int], ...] | None:
    """Every sync call of process ``q`` as ``(sync_start, sync_end, w, tail)`` in
    ``sync_end`` order. A call that blocked in the trace (entered before the end ``w`` of
    the work launched before it, returned after) keeps ``tail = return - w``; one that
    did not because the GPU had already finished gets ``w = entry`` and ``tail = its own
    duration``: with longer GPU work it may now wait, and the replay makes it. A call that
    returned while work launched before it was still running (an async copy, a stream
    sync on another stream) is left out: it does not wait for that work."""
    cp = p.cand["_p"].to_numpy()
    a, b = np.searchsorted(cp, q), np.searchsorted(cp, q, side="right")
    ss = p.cand["sync_start"].to_numpy().astype(_I64)[a:b]
    se = p.cand["sync_end"].to_numpy().astype(_I64)[a:b]
    oh = np.argsort(p.host[rows], kind="stable")
    hs, em = p.host[rows][oh], np.maximum.accumulate(p.end[rows][oh])
    k = np.searchsorted(hs, ss, side="right") - 1
    w = em[np.maximum(k, 0)] if em.size else np.zeros(ss.size, _I64)
    blocked = (k >= 0) & (w > ss) & (se >= w)
    # the GPU had finished everything launched before the call: it may wait next time.
    # A call that returned while earlier work still ran (an async copy, a sync on another
    # stream) does not wait for it and is left out.
    idle = (k < 0) | (w <= ss)
    keep = blocked | idle
    ss, se, w = ss[keep], se[keep], np.where(blocked, w, ss)[keep]
    if extra is not None and extra.size:  # zero-length syncs at these instants
        ss, se, w = np.append(ss, extra), np.append(se, extra), np.append(w, extra)
        o = np.lexsort((ss, se))
        ss, se, w = ss[o], se[o], w[o]
    if ss.size == 0:
        return None
    return (ss.tolist(), se.tolist(), w.tolist(), np.clip(se - w, 0, None).tolist())


def replay_host(tl: Timeline, *, durations: np.ndarray | None = None,
                advance: Advance | None = None, all_syncs: bool = False,
                step_syncs: dict[tuple[int, int], np.ndarray] | None = None) -> HostReplay:
    """Replay ``tl`` with ``durations`` (one per ``tl.gpu`` row, int64 ns; None =
    measured) and the host made faster by ``advance`` (see the module docstring).
    ``all_syncs``: every sync call may wait for the GPU (:func:`_syncs`), not only those
    that blocked in the trace (needed when durations grow: a sync the GPU had beaten may
    now wait); with measured durations both replay the trace exactly. ``step_syncs``:
    per ``(rank, process_id)``, instants where the program synchronizes (a
    ``torch.cuda.synchronize()`` after each step, as step times are measured without the
    profiler): zero-length sync calls added there (implies ``all_syncs``)."""
    adv = advance or _no_advance
    p = _prepare(tl)
    st = _stage(tl, p, False)
    d = p.dur if durations is None else np.asarray(durations, _I64)[p.gi]
    out = np.zeros(p.gi.size, _I64)
    procs = p.procs.sort("_p")
    keys = {int(q): (int(r), int(pid)) for q, r, pid in
            procs.select("_p", "rank", "process_id").iter_rows()}
    epochs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for q, rows0, _ep0, _key0, t0 in st.procs:
        pk = keys[int(q)]
        extra = (step_syncs or {}).get(pk)
        sy = (_syncs(p, q, rows0, extra) if all_syncs or step_syncs is not None
              else st.syncs.get(q))
        ep = (np.searchsorted(np.asarray(sy[1], _I64), p.host[rows0], side="right")
              if sy else np.zeros(rows0.size, _I64))
        oe = np.argsort(ep, kind="stable")  # new epochs refine the old: stream order kept
        rows, ep = rows0[oe], ep[oe]
        key = _key0[oe]
        host = p.host[rows]
        a = adv(pk, profiler_instants(p, rows))
        ss_adj: list[int] = []
        ret = np.zeros(0, _I64)
        if sy:
            ss, se = np.asarray(sy[0], _I64), np.asarray(sy[1], _I64)
            a_se = adv(pk, se)
            base_rows = np.where(ep > 0, a_se[np.maximum(ep - 1, 0)], 0)
            a = a - base_rows
            a_ss = adv(pk, ss)
            k = np.searchsorted(se, ss, side="left")  # syncs returned before its entry
            base_ss = np.where(k > 0, a_se[np.maximum(k - 1, 0)], 0)
            ss_adj = (ss - (a_ss - base_ss)).tolist()
            ret = se
        base_h = host - t0 + st.lat[rows] - a
        ends, shifts, run_ep = solve_runs(rows, ep, key, p, st.g[rows], d[rows], base_h, sy,
                                          t0, ss_adj)
        out[rows] = ends + t0
        n_ep = (ret.size + 1)
        sh = np.zeros(n_ep, _I64)
        have = np.zeros(n_ep, bool)
        sh[run_ep], have[run_ep] = shifts, True
        # epochs without GPU rows keep the previous epoch's shift
        idx = np.maximum.accumulate(np.where(have, np.arange(n_ep), 0))
        epochs[pk] = (ret, sh[idx])
    return HostReplay(gi=p.gi, pred_start=out - d, pred_end=out, epochs=epochs,
                      advance=adv)


def step_times(tl: Timeline, rep: HostReplay, steps: pl.DataFrame) -> pl.DataFrame:
    """Measured and replayed time of each step window (see the module docstring):
    ``rank, step, measured_ns, predicted_ns, pred_start_ns, pred_end_ns`` in step order
    (``measured_ns``: step start to the later of its end and its GPU work's end). A
    step's host process is the one that launched most of its GPU work. A step's process is that of
    the GPU work launched in it (the first process of its rank when none)."""
    from traceparse.links import launch_join

    lj = launch_join(tl).select("rank", pl.col("process_id").fill_null(0), "api_start_ns",
                                "start_ns", "end_ns")
    g = lj[rep.gi.tolist()].with_columns(
        pl.Series("pe", rep.pred_end), pl.coalesce("api_start_ns", "start_ns").alias("_t"))
    rows = []
    prev_end: dict[int, int] = {}
    for r in steps.sort("rank", "start_ns").iter_rows(named=True):
        rank, s, e = int(r["rank"]), int(r["start_ns"]), int(r["end_ns"])
        inside = g.filter((pl.col("rank") == rank) & (pl.col("_t") >= s) & (pl.col("_t") < e))
        if inside.height:
            launched = inside.filter(pl.col("api_start_ns").is_not_null())
            pid = int((launched if launched.height else inside)["process_id"].mode()[0])
            last = int(inside["pe"].max())  # type: ignore[arg-type]
            meas_end = max(int(inside["end_ns"].max()), e)  # type: ignore[arg-type]
        else:
            same = g.filter(pl.col("rank") == rank)
            pid = int(same["process_id"][0]) if same.height else 0
            last, meas_end = _NEG, e
        hs, he = rep.host_time((rank, pid), np.array([s, e], _I64)).tolist()
        start = max(hs, prev_end.get(rank, _NEG))
        end = max(last, he)
        prev_end[rank] = end
        rows.append({"rank": rank, "step": r["step"], "measured_ns": meas_end - s,
                     "predicted_ns": end - start, "pred_start_ns": start,
                     "pred_end_ns": end})
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "step": pl.String,
                                      "measured_ns": pl.Int64, "predicted_ns": pl.Int64,
                                      "pred_start_ns": pl.Int64, "pred_end_ns": pl.Int64})


#: Pending launches a CUDA stream queue holds before a launch call blocks (the driver's
#: launch queue; the most ever outstanding in the sweep traces is 1023 on
#: train_gpt2s_b32). A call entered with at least half of it outstanding is taken as
#: throttled by the queue.
QUEUE_DEPTH = 1024


def queue_waits(tl: Timeline) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Host time spent waiting for a full launch queue, per ``(rank, process_id)``: the
    ends of the enqueueing calls (launches, async copies and sets; not syncs) that were
    entered with at least ``QUEUE_DEPTH / 2`` GPU activities launched and not finished,
    and the cumulative excess of their duration over the median of calls of their name.
    That time was the GPU's, not the host's: a faster GPU (a smaller batch) does not make
    the host wait. ``(ends, cumulative excess)`` arrays, sorted."""
    from traceparse.analyses.replay import SYNC_RE
    from traceparse.links import launch_join

    # the columns read, selected before the filters copy them; kind as a code
    lj = (launch_join(tl).select("rank", pl.col("process_id").fill_null(0), "api_start_ns",
                                 "end_ns", "kind")
          .filter(pl.col("api_start_ns").is_not_null() & (pl.col("kind") != "sync"))
          .drop("kind"))
    api = (tl.api.select("rank", pl.col("process_id").fill_null(0), pl.col("name")
                         .cast(pl.String), "start_ns", "end_ns", "dur_ns")
           .filter(~pl.col("name").str.contains(SYNC_RE).fill_null(False))
           .filter(pl.col("dur_ns").is_not_null())
           .with_columns(pl.col("dur_ns").median().over("name").alias("_med")))
    out: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for (r, pid), calls in api.group_by("rank", "process_id"):
        la = lj.filter((pl.col("rank") == r) & (pl.col("process_id") == pid))
        a = np.sort(la["api_start_ns"].to_numpy())
        e = np.sort(la["end_ns"].to_numpy())
        t = calls["start_ns"].to_numpy()
        pending = np.searchsorted(a, t, side="left") - np.searchsorted(e, t, side="right")
        ex = np.where(pending >= QUEUE_DEPTH // 2,
                      np.clip(calls["dur_ns"].to_numpy() - calls["_med"].to_numpy(), 0, None),
                      0).astype(_I64)
        if not ex.any():
            continue
        ends = calls["end_ns"].to_numpy().astype(_I64)
        o = np.argsort(ends, kind="stable")
        out[(int(r), int(pid))] = (ends[o], np.cumsum(ex[o]))  # type: ignore[arg-type]
    return out


def waited(waits: tuple[np.ndarray, np.ndarray] | None, t: np.ndarray) -> np.ndarray:
    """Queue waiting (ns) that ended at or before each instant of ``t``."""
    if waits is None:
        return np.zeros(np.asarray(t).shape, _I64)
    ends, cum = waits
    k = np.searchsorted(ends, np.asarray(t, _I64), side="right")
    return np.where(k > 0, cum[np.maximum(k - 1, 0)], 0).astype(_I64)
