"""Replay a trace's GPU work with other durations or without some costs (a what-if engine).

Every non-sync GPU activity (kernel, memcpy, memset) is replayed on its (rank, process,
device, stream) in measured stream order. Its predicted start is the latest of:

* **stream order**: the previous activity on the stream has ended, plus the measured gap
  between them when the GPU (not the host) caused it (``gap_ns``, see below);
* **the host**: its launch call was made. Host time is the measured API entry shifted by
  ``shift``: the host is delayed (or advanced) only at **blocking sync points** (a
  ``*Synchronize*`` call or synchronous ``cudaMemcpy`` that returned after GPU work it was
  waiting for had ended). Such a sync returns, in the replay, at ``max(call entry, replayed
  end of the work launched before it) + (measured return - measured end of that work)``;
  every later call on that process moves by the difference.

A gap before an activity is **host-caused** when its launch call was still in progress when
the previous activity on the stream ended (it began, or returned, after that end: the stream
sat idle waiting for the host): the host constraint then reproduces it, with the measured
launch-to-start latency. Otherwise the
activity was queued, and the measured gap (dispatch, cross-stream event waits) is kept. With
measured durations the replay therefore reproduces every start and end exactly.

What-ifs (:func:`replay` options):

* ``no_launch_overhead``: launch calls take no time and launch-to-start latency is zero:
  each call happens earlier by the launch-call time spent on its thread since the last
  blocking sync, and host-caused gaps shrink accordingly. CPU work between calls is kept.
* ``overlap_comm``: communication never delays other work, and the time it can give back
  is the **exposed** communication (no compute kernel running on the device, as in the
  attribution): sync points do not wait for communication; communication activities move
  to a lane of their own (a compute kernel queued behind an all-reduce on the same stream
  no longer follows it in stream order); and the measured gap before a non-communication
  activity (from the previous non-communication activity on its stream) is shortened by the
  exposed communication inside it. Host-bound activities keep their host time: when the
  host issued the next kernel only after the collective ended, overlapping the collective
  saves nothing, and the replay says so. Each gap shrinks by at most the exposed
  communication inside it, so a rank's saving stays within its exposed communication.
* ``durations``: replace each activity's duration (e.g. a calibrated model, or a
  ``--speedup REGEX=FACTOR`` scaling).

Within one epoch (between two blocking syncs of a process) each stream is solved in closed
form: with ``E_i = max(E_{i-1} + g_i + d_i, h_i + d_i)``, ``E_i = c_i + max(E_-1,
s + cummax_k(h_k + d_k - c_k))`` where ``c_i`` is the running sum of ``g + d`` and ``s``
the epoch's host shift. ``c`` and the cumulative max do not depend on ``s`` or ``E_-1``,
so they are computed for every run (process, epoch, stream) of the trace at once (numpy);
only the runs are looped (a few scalars each: the shift of the next sync needs the
previous epoch's predicted ends, which are ``max(E_-1 + max c, s + max(c + cummax))``).

**In pieces** (:mod:`traceparse.analyses.replay_pieces`, docs/performance.md "Chunked
replay"): everything a row's replay reads lies before it in host time (the syncs that
returned before its call, the work launched before a sync's entry, the stream's previous
activity), so host-time pieces replayed in order are exact when each starts from the
state the earlier ones leave: per lane the previous activity's end and the latest end
(:func:`_stream_gaps`' ``before``), per process the latest end launched so far
(:func:`_blocking`'s ``before``), the blocking syncs in flight and :class:`Carry` (the
epoch's shift, the epochs' predicted maxima, each stream's predicted end). A run cut by
an edge continues from the carried stream end. The whole trace is the one-piece case.

The work both what-ifs share (the activities with their launch calls, the stream and
process codes, the sync candidates) is prepared once per timeline
(:func:`traceparse.derived.cached`), so ``savings`` runs two replays for little more than
one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from traceparse.analyses._arrays import lex_codes, seg_cummax
from traceparse.analyses.codes import matches
from traceparse.analyses.profiler_cost import GRAPH_LAUNCH_RE
from traceparse.analyses.replay_carry import _NEG, Carry, _carry
from traceparse.analyses.replay_removed import (
    Profiler,
    _cum_at,
    _launch_cum,
    _rank_union,
    outside_removed,
    profiler_parts,
)
from traceparse.derived import cached
from traceparse.links import launch_join, launch_links
from traceparse.timeline import Timeline

#: API calls that block the host until GPU work is done.
SYNC_RE = (r"(?i)synchroni[sz]e|^cudaMemcpy(_v\d+)?$|^cuMemcpy[DH]to[DH](_v\d+)?$"
           r"|^cudaMemcpy[23]D(_v\d+)?$|^hipMemcpy$")
_PROC = ["rank", "process_id"]
_I64 = np.int64


@dataclass(frozen=True)
class _Prep:
    """The non-sync GPU activities of a timeline (``tl.gpu`` order) as numpy arrays, and
    what every replay of it shares. Codes are ordered like the columns they encode."""

    gi: np.ndarray  #: row index in ``tl.gpu``
    rank: np.ndarray
    proc: np.ndarray  #: code of (rank, process_id)
    procs: pl.DataFrame  #: ``rank, process_id, _p`` (the proc codes)
    sid: np.ndarray  #: code of (rank, process, device (null first), stream): stream order
    #: code of (rank, process, device (null as -1), stream): replay runs (the same array
    #: as ``sid`` when no device is null: both orders are then one)
    rid: np.ndarray
    comm: np.ndarray  #: category is communication
    launched: np.ndarray  #: a launch call is known
    graph: np.ndarray  #: launched by a graph launch (``*GraphLaunch``)
    api_s: np.ndarray  #: call entry (0 where none)
    api_e: np.ndarray  #: call return (_NEG where none)
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    host: np.ndarray  #: call entry, or the activity's start without a call
    cand: pl.DataFrame  #: sync candidates ``_p, sync_start, sync_end`` (deduplicated)
    memo: dict[bool, _Stage]  #: :func:`_stage` per lane mode


def _prepare(tl: Timeline) -> _Prep:
    return cached(tl, "replay_prep", ("gpu", "api"), lambda: _build_prep(tl))


def profiler_instants(p: _Prep, rows: np.ndarray) -> np.ndarray:
    """The host instant at which each row's start reads the profiler's removed time: its
    call's entry, or its call's return for work a graph launch started (under the profiler
    a graph's first kernel starts only after ``cudaGraphLaunch`` returns, so the time
    removed inside that call moves the graph's kernels too; docs/calibration.md)."""
    return np.where(p.graph[rows], p.api_e[rows], p.host[rows])


def _build_prep(tl: Timeline) -> _Prep:
    idx = launch_links(tl)["api_row"]
    # kinds compared and the graph-launch regex run on codes (a String copy of every api
    # name and gpu kind was ~0.6 GB at 10M kernels, the replay's peak); each column is
    # gathered through the kept rows' indices on its own (a filtered frame of all of them
    # was ~0.9 GB at 10M kernels, held beside the arrays taken from it)
    keep = tl.gpu.select(pl.col("kind") != "sync").to_series().fill_null(False)
    gi = np.flatnonzero(keep.to_numpy()).astype(_I64)
    rows = pl.Series(gi)

    def col(name: str, fill: int | None = None) -> np.ndarray:
        s = tl.gpu.get_column(name).gather(rows)
        return (s if fill is None else s.fill_null(fill)).to_numpy().astype(_I64)

    call = idx.gather(rows)
    at = call.fill_null(0).to_numpy().astype(_I64)
    launched = call.is_not_null().to_numpy()
    if launched.any() and tl.api["start_ns"].null_count():
        launched &= tl.api["start_ns"].is_not_null().to_numpy()[at]

    def api(name: str, fill: int) -> np.ndarray:
        if not launched.any():
            return np.full(gi.size, fill, _I64)
        v = tl.api.get_column(name)
        return np.where(launched, (v.fill_null(fill) if v.null_count() else v)
                        .to_numpy()[at], fill).astype(_I64)

    graph = (tl.api.select(matches(tl.api["name"], GRAPH_LAUNCH_RE)).to_series()
             .to_numpy()[at] & launched) if launched.any() else np.zeros(gi.size, bool)
    rank = col("rank")
    pid = col("process_id", 0)
    dev = tl.gpu.get_column("device_id").gather(rows).cast(pl.Int64)
    stream = col("stream_id", -1)
    sid = lex_codes(rank, pid, dev.fill_null(int(dev.min() or 0) - 1)  # type: ignore[arg-type]
                    .to_numpy(), stream)
    rid = (sid if not dev.null_count() else
           lex_codes(rank, pid, dev.fill_null(-1).to_numpy(), stream))
    del dev
    api_s = api("start_ns", 0)
    start = col("start_ns")
    proc = lex_codes(rank, pid)
    procs = (pl.DataFrame({"rank": pl.Series(rank).cast(tl.gpu.schema["rank"]),
                           "process_id": pid, "_p": proc})
             .unique(subset="_p"))
    comm = (tl.gpu.get_column("category").gather(rows) == "communication"
            ).fill_null(False).to_numpy()
    return _Prep(
        gi=gi, rank=rank, proc=proc, procs=procs,
        sid=sid, rid=rid,
        comm=comm, launched=launched, graph=graph,
        api_s=api_s, api_e=api("end_ns", _NEG),
        start=start, end=col("end_ns"), dur=col("dur_ns"),
        host=np.where(launched, api_s, start),
        cand=_sync_candidates(tl, procs), memo={})


def _not_launch(tl: Timeline) -> pl.DataFrame:
    """``rank, process_id, correlation_id`` of calls that are not issuing cost: blocking
    calls and warm-up (:func:`traceparse.analyses.attribution.classify_calls`)."""
    from traceparse.analyses.attribution import classify_calls

    return (classify_calls(tl, columns=[*_PROC, "correlation_id"])
            .filter(pl.col("call_part") != "launch")
            .select(*_PROC, "correlation_id", "call_part", "api_start_ns", "api_end_ns")
            .with_columns(pl.col("process_id").fill_null(0))
            .unique(subset=[*_PROC, "correlation_id"], keep="first"))


def _sync_candidates(tl: Timeline, procs: pl.DataFrame) -> pl.DataFrame:
    """Calls that may block: ``_p`` (process code), ``sync_start``, ``sync_end``; sync
    calls by name and copies to or from pageable memory (attribution's host_sync calls).
    Calls of processes without GPU activity are left out (they replay nothing)."""
    names = tl.api.get_column("name")
    kinds = names.unique()
    hit = kinds.filter(kinds.cast(pl.String).str.contains(SYNC_RE).fill_null(False))
    # select, then filter: the filter copies 4 columns, not every api column
    s = (tl.api.select(*_PROC, pl.col("start_ns").alias("sync_start"),
                       pl.col("end_ns").alias("sync_end"))
         .filter(names.is_in(hit.implode()))
         .with_columns(pl.col("process_id").fill_null(0)))
    paged = (_not_launch(tl).filter(pl.col("call_part") == "host_sync")
             .select(*_PROC, pl.col("api_start_ns").alias("sync_start"),
                     pl.col("api_end_ns").alias("sync_end")))
    s = pl.concat([s, paged.cast(s.schema)]).unique()
    return (s.join(procs.cast({"rank": s.schema["rank"], "process_id": s.schema["process_id"]}),
                   on=_PROC, how="inner")
            .select("_p", "sync_start", "sync_end").sort("_p", "sync_end", "sync_start"))


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


def _stream_gaps(tl: Timeline, p: _Prep, o: np.ndarray, lane: np.ndarray,
                 overlap_comm: bool, before: tuple[np.ndarray, ...] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """In stream order ``o``: the gap each activity keeps (``_g``: 0 when host-bound) and
    its host latency (``_lat``: start - call entry when host-bound and launched).
    ``before``: per row of ``o`` (read at each lane's first row), whether its lane had
    activities earlier in the trace, the end of the last and the latest end among them
    (a piece of the trace replayed in time order); None: the trace starts here."""
    n = o.size
    first = np.ones(n, bool)
    s1 = lane[o]
    first[1:] = s1[1:] != s1[:-1]
    e1, st, api_s, launched = p.end[o], p.start[o], p.api_s[o], p.launched[o]
    # _prev_end: end of the stream's previous activity; busy: latest end before it
    prev = np.zeros(n, _I64)
    prev[1:] = e1[:-1]
    cm = seg_cummax(e1, first)
    busy = np.zeros(n, _I64)
    busy[1:] = cm[:-1]
    if before is not None:
        seen, prev0, busy0 = before
        at = np.flatnonzero(first)
        lens = np.diff(np.append(at, n))
        sb, b0 = np.repeat(seen[at], lens), np.repeat(busy0[at], lens)
        busy = np.where(sb, np.maximum(np.where(first, _NEG, busy), b0), busy)
        prev = np.where(first & seen, prev0, prev)
        first = first & ~seen
    # host-bound: the launch call was still in progress when the stream went idle (it began
    # after, or returned after, the previous activity ended): the host, not the stream
    # order, decided the start
    hb = first | (launched & (np.maximum(api_s, p.api_e[o]) > busy) & (st >= busy))
    # queued rows keep their measured gap, negative when the stream overlapped itself
    g = np.where(hb, 0, np.where(first, 0, st - prev))
    if overlap_comm and p.comm.any():
        acts = tl.gpu.select("rank", "device_id", "category", "start_ns", "end_ns")[
            p.gi[o]].with_columns(
            _prev_end=pl.when(pl.Series(first)).then(None).otherwise(pl.Series(prev)))
        ov = _comm_overlap(acts).to_numpy().astype(_I64)
        g = np.where(p.comm[o], g, np.minimum(g, np.clip(g - ov, 0, None)))
    lat = np.where(hb & launched, st - api_s, 0)
    return g, lat


def _blocking(p: _Prep, o: np.ndarray, pb: dict[int, tuple[int, int]], overlap_comm: bool,
              before: dict[int, int] | None = None) -> dict[int, tuple[list[int], ...]]:
    """Blocking sync calls per process code: ``(sync_start, sync_end, w, tail)`` lists in
    ``sync_end`` order, ``w`` the measured end of the work launched before the call
    (communication left out under ``overlap_comm``), ``tail`` = return - w (>= 0). A call
    is blocking when it was entered before ``w`` and returned at or after it (a stream sync
    on an idle stream, or one that returned before other streams' work ended, is not).
    ``before``: per process code, the latest end of its activities launched earlier in
    the trace (a piece replayed in time order; every call before the piece is before
    every call in it)."""
    cp = p.cand["_p"].to_numpy()
    css = p.cand["sync_start"].to_numpy().astype(_I64)
    cse = p.cand["sync_end"].to_numpy().astype(_I64)
    out: dict[int, tuple[list[int], ...]] = {}
    for q in np.unique(cp).tolist():
        a, b = np.searchsorted(cp, q), np.searchsorted(cp, q, side="right")
        i = o[slice(*pb[q])] if q in pb else o[:0]
        if overlap_comm:
            i = i[~p.comm[i]]
        oh = np.argsort(p.host[i], kind="stable")
        hs, em = p.host[i][oh], np.maximum.accumulate(p.end[i][oh])
        ss, se = css[a:b], cse[a:b]
        k = np.searchsorted(hs, ss, side="right") - 1
        w = em[np.maximum(k, 0)] if em.size else np.zeros(ss.size, _I64)
        if before is not None and q in before:
            w = np.where(k >= 0, np.maximum(w, before[q]), before[q])
            k = np.zeros(ss.size, _I64)
        ok = (k >= 0) & (w > ss) & (se >= w)
        if ok.any():
            out[q] = (ss[ok].tolist(), se[ok].tolist(), w[ok].tolist(),
                      np.clip(se[ok] - w[ok], 0, None).tolist())
    return out


def blocking_syncs(tl: Timeline) -> pl.DataFrame:
    """``rank, sync_start, sync_end`` of the blocking sync calls the replay waits at
    (:func:`_blocking`: entered before the work launched ahead of it ended, returned
    at or after it), the calls ``drop_syncs=True`` stops."""
    p = _prepare(tl)
    ranks = {int(q): int(r) for r, _, q in p.procs.iter_rows()}
    rk: list[int] = []
    ss: list[int] = []
    se: list[int] = []
    for q, sy in (_stage(tl, p, False).syncs if p.gi.size else {}).items():
        rk += [ranks[int(q)]] * len(sy[0])
        ss += sy[0]
        se += sy[1]
    return pl.DataFrame({"rank": rk, "sync_start": ss, "sync_end": se},
                        schema={"rank": tl.gpu.schema["rank"], "sync_start": pl.Int64,
                                "sync_end": pl.Int64})


def _solve(rows: np.ndarray, ep: np.ndarray, key: np.ndarray, p: _Prep, g: np.ndarray,
           d: np.ndarray, base_h: np.ndarray, syncs: tuple[list[int], ...] | None, t0: int
           ) -> np.ndarray:
    """Predicted ends (relative to ``t0``) of one process's ``rows`` (sorted by epoch,
    then stream order; ``ep`` their epochs, ``key`` their streams), see the module
    docstring."""
    return solve_runs(rows, ep, key, p, g, d, base_h, syncs, t0)[0]


def solve_runs(rows: np.ndarray, ep: np.ndarray, key: np.ndarray, p: _Prep, g: np.ndarray,
               d: np.ndarray, base_h: np.ndarray, syncs: tuple[list[int], ...] | None,
               t0: int, ss_adj: list[int] | None = None, carry: Carry | None = None
               ) -> tuple[np.ndarray, list[int], list[int]]:
    """:func:`_solve`'s predicted ends, with the host shift of each run and its epoch.
    ``ss_adj``: the syncs' entry times as replayed (a host with time removed,
    :mod:`traceparse.analyses.replay_host`); which rows a sync waits for is still decided
    by the measured entries ``syncs[0]``. ``carry``: the process's state before these
    rows (a piece of a trace replayed in time order, :class:`Carry`); it is updated to
    the state after them. None: the process starts here (the whole trace)."""
    n = rows.size
    new = np.ones(n, bool)
    new[1:] = (ep[1:] != ep[:-1]) | (key[1:] != key[:-1])
    rf = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    step = g + d
    c = np.cumsum(step)  # then less each run's sum before it, in place
    c -= (c[rf] - step[rf])[run]
    del step
    m = base_h + d
    m -= c
    m = seg_cummax(m, new)
    cm = c + m
    rl = np.append(rf[1:], n) - 1
    ss = syncs[0] if syncs is not None else []
    # rows of epoch e that the (e+1)-th sync waits for: launched before it was entered
    # (the rows of the last epoch wait for no known sync: all of them count for the next
    # one, which a later piece of the trace may hold)
    thr = np.append(np.asarray(ss, _I64) - t0, -_NEG)
    sel = (p.host[rows] - t0) <= thr[ep]
    c_all, cm_all = np.maximum.reduceat(c, rf), np.maximum.reduceat(cm, rf)
    c_sel = np.maximum.reduceat(np.where(sel, c, _NEG), rf)
    cm_sel = np.maximum.reduceat(np.where(sel, cm, _NEG), rf)
    any_sel = np.logical_or.reduceat(sel, rf)
    sy = syncs if syncs is not None else ([], [], [], [])
    if ss_adj is not None and syncs is not None:
        sy = (ss_adj, *syncs[1:])
    shifts, inits = _carry(
        ep[rf].tolist(), key[rf].tolist(), c_all.tolist(), cm_all.tolist(), c_sel.tolist(),
        cm_sel.tolist(), any_sel.tolist(), c[rl].tolist(), m[rl].tolist(), sy, t0,
        Carry() if carry is None else carry)
    ends = c + np.maximum(np.asarray(inits, _I64)[run], np.asarray(shifts, _I64)[run] + m)
    return ends, shifts, ep[rf].tolist()


def predicted(tl: Timeline, *, durations: pl.Series | None = None,
              no_launch_overhead: bool = False, overlap_comm: bool = False,
              remove: pl.DataFrame | None = None,
              drop_syncs: pl.DataFrame | bool = False,
              profiler: Profiler | None = None) -> pl.DataFrame:
    """The replay's predictions alone: ``rank, start_ns, end_ns, pred_start_ns,
    pred_end_ns`` per non-sync GPU row (``tl.gpu`` order), what :func:`replay` returns
    without its descriptive columns (the savings engine needs only these). ``profiler``:
    also remove the profiler's own host cost (:mod:`traceparse.analyses.replay_removed`)."""
    p = _prepare(tl)
    dur = p.dur if durations is None else (
        durations.cast(pl.Int64).to_numpy()[p.gi].astype(_I64))
    pred_end = _pred_end(tl, p, dur, no_launch_overhead, overlap_comm, remove, drop_syncs,
                         profiler)
    pd = pl.Series("pred_dur_ns", dur) if durations is None else (
        durations.cast(pl.Int64).gather(p.gi))
    return pl.DataFrame({"rank": pl.Series(p.rank).cast(tl.gpu.schema["rank"]),
                         "start_ns": p.start, "end_ns": p.end,
                         "pred_end_ns": pred_end, "_pd": pd}).with_columns(
        pred_start_ns=pl.col("pred_end_ns") - pl.col("_pd")).select(
        "rank", "start_ns", "end_ns", "pred_start_ns", "pred_end_ns")


@dataclass(frozen=True)
class _Stage:
    """What a replay computes before the durations and the launch-cost removal matter,
    for one lane mode (communication on its own lane or not): the measured gaps and host
    latencies (``tl.gpu`` order of the non-sync rows), the blocking syncs, and per process
    its rows in epoch then stream order, their epochs and stream keys."""

    g: np.ndarray
    lat: np.ndarray
    syncs: dict[int, tuple[list[int], ...]]
    procs: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int]]  #: q, rows, ep, key, t0


def _stage(tl: Timeline, p: _Prep, overlap_comm: bool) -> _Stage:
    hit = p.memo.get(overlap_comm)
    if hit is None:
        hit = p.memo[overlap_comm] = _build_stage(tl, p, overlap_comm)
    return hit


def _build_stage(tl: Timeline, p: _Prep, overlap_comm: bool) -> _Stage:
    n = p.gi.size
    # communication on a lane of its own under overlap_comm: it no longer holds back the
    # stream's other work
    lane = p.sid * 2 + p.comm if overlap_comm else p.sid
    run_key = p.rid * 2 + p.comm if overlap_comm else p.rid
    by_start = np.argsort(p.start, kind="stable")
    o = by_start[np.argsort(lane[by_start], kind="stable")]  # stream order
    del by_start
    g1, lat1 = _stream_gaps(tl, p, o, lane, overlap_comm)
    g, lat = np.empty(n, _I64), np.empty(n, _I64)
    g[o], lat[o] = g1, lat1
    qs, qa = np.unique(p.proc[o], return_index=True)
    pb = {q: (a, b) for q, a, b in zip(qs.tolist(), qa.tolist(), [*qa[1:].tolist(), n],
                                       strict=True)}
    syncs = _blocking(p, o, pb, overlap_comm)
    procs = []
    for q, (a, b) in pb.items():
        rows = o[a:b]
        sy = syncs.get(q)
        # epoch = number of the process's blocking syncs that returned before the call
        ep = (np.searchsorted(np.asarray(sy[1], _I64), p.host[rows], side="right")
              if sy else np.zeros(b - a, _I64))
        oe = np.argsort(ep, kind="stable")
        rows = rows[oe]
        t0 = int(min(p.host[rows].min(), p.start[rows].min()))
        procs.append((q, rows, ep[oe], run_key[rows], t0))
    return _Stage(g=g, lat=lat, syncs=syncs, procs=procs)


def _pred_end(tl: Timeline, p: _Prep, d: np.ndarray, no_launch_overhead: bool,
              overlap_comm: bool, remove: pl.DataFrame | None = None,
              drop_syncs: pl.DataFrame | bool = False,
              profiler: Profiler | None = None) -> np.ndarray:
    """Predicted end of every activity (``tl.gpu`` order of the non-sync rows).

    ``remove``: host time taken away (``rank, start_ns, end_ns``; with
    ``no_launch_overhead`` the launch-overhead part is added to it): every call and sync
    entry moves earlier by the removed time that had ended before it since the epoch
    began. ``drop_syncs``: blocking syncs that no longer wait (True: all; a frame: those
    whose ``rank, process_id, start_ns`` it lists): the host goes on at the call's entry.
    ``profiler``: the profiler's recording cost is removed too (ops inside ``remove`` not
    counted twice)."""
    from traceparse.analyses.attribution import part_intervals

    out = np.zeros(p.gi.size, _I64)
    if p.gi.size == 0:
        return out
    # without communication the lanes, gaps and syncs of overlap_comm are the plain ones
    st = _stage(tl, p, overlap_comm and bool(p.comm.any()))
    sets = [] if remove is None else [remove.select("rank", "start_ns", "end_ns")]
    if no_launch_overhead:
        sets.append(part_intervals(tl, "launch_overhead_ns").select("rank", "start_ns",
                                                                    "end_ns"))
    lo = _rank_union(pl.concat([x.cast(sets[0].schema) for x in sets])) if sets else None
    cum = _launch_cum(tl, p, lo) if lo is not None else None
    dropped = _dropped(p, drop_syncs)
    keys = {int(q): (int(r), int(pid)) for r, pid, q in p.procs.iter_rows()}
    for q, rows, ep, key, t0 in st.procs:
        base_h = p.host[rows] - t0 + st.lat[rows]
        sy = st.syncs.get(q)
        pa, pa_ss = None, None
        if profiler is not None:
            pk = keys[int(q)]
            ev, cost = outside_removed(profiler[0].get(pk, np.zeros(0, _I64)),
                                       profiler[1].get(pk, np.zeros(0)), lo, pk[0])
            pa, pa_ss = profiler_parts(ev, cost, profiler_instants(p, rows), ep, sy)
        if sy is not None and (cum is not None or dropped is not None or pa is not None):
            ss, se = np.asarray(sy[0], _I64), np.asarray(sy[1], _I64)
            rk = np.full(ss.size, p.rank[rows[0]], _I64)
            adv = np.zeros(ss.size, _I64)
            if lo is not None:
                # removed time counts from the previous sync's return
                base = np.append(0, _cum_at(lo, rk, se)[:-1])
                adv = np.clip(_cum_at(lo, rk, ss) - base, 0, None)
            drop = (np.ones(ss.size, bool) if dropped is True else
                    np.isin(ss, dropped.get(q, np.zeros(0, _I64)))
                    if isinstance(dropped, dict) else np.zeros(ss.size, bool))
            if pa_ss is not None:
                adv = adv + pa_ss
            sy = (*sy[:4], adv.tolist(), drop.tolist())
        if cum is not None:
            c = cum[rows]
            if st.syncs.get(q) is not None and lo is not None:
                # removed time is only counted since the last sync's return
                se = np.asarray(st.syncs[q][1], _I64)
                rk = np.full(se.size, p.rank[rows[0]], _I64)
                base = np.append(0, _cum_at(lo, rk, se))
                c = np.clip(c - base[ep], 0, None)
            elif st.syncs:
                ef = np.flatnonzero(np.append(True, ep[1:] != ep[:-1]))
                c = c - np.repeat(np.minimum.reduceat(c, ef), np.diff(np.append(ef, c.size)))
            base_h = base_h - c
        if pa is not None:
            base_h = base_h - pa
        out[rows] = _solve(rows, ep, key, p, st.g[rows], d[rows], base_h, sy, t0) + t0
    return out


def _dropped(p: _Prep, drop_syncs: pl.DataFrame | bool) -> dict[int, np.ndarray] | bool | None:
    """``drop_syncs`` as True, None (none) or the sync starts to drop per process code."""
    if drop_syncs is True:
        return True
    if not isinstance(drop_syncs, pl.DataFrame) or drop_syncs.height == 0:
        return None
    f = drop_syncs.select(pl.col("rank").cast(pl.Int64), pl.col("process_id").fill_null(0)
                          .cast(pl.Int64), pl.col("start_ns").cast(pl.Int64)).join(
        p.procs.select(pl.col("rank").cast(pl.Int64), pl.col("process_id").cast(pl.Int64),
                       "_p"), on=_PROC)
    return {int(q): g["start_ns"].to_numpy() for (q,), g in f.group_by("_p")}


def replay(tl: Timeline, *, durations: pl.Series | None = None,
           no_launch_overhead: bool = False, overlap_comm: bool = False,
           remove: pl.DataFrame | None = None,
           drop_syncs: pl.DataFrame | bool = False) -> pl.DataFrame:
    """Replay ``tl``'s GPU work (see the module docstring).

    Args:
        tl: the timeline.
        durations: one duration (ns) per ``tl.gpu`` row, in its order (sync rows ignored);
            None keeps the measured durations.
        no_launch_overhead: remove launch-call time and launch-to-start latency.
        overlap_comm: communication never delays other work.
        remove: host time taken away (``rank, start_ns, end_ns``), e.g. the input
            pipeline's exposed preparation; calls and sync entries move earlier by it.
        drop_syncs: blocking syncs that no longer wait (True: all of them; a frame of
            ``rank, process_id, start_ns``: those calls).

    Returns:
        The non-sync GPU rows (``rank, process_id, device_id, stream_id, kind, category,
        name, api_start_ns, start_ns, end_ns, dur_ns``) plus ``pred_start_ns, pred_end_ns,
        pred_dur_ns`` and ``_i`` (the row's index in ``tl.gpu``).

    Example:
        One stream, kernels A (API 0..5, GPU 10..20) and B (API 6..8, GPU 25..35; queued:
        its call began before A ended, gap 5 kept). With A's duration halved: A 10..15,
        B max(15 + 5, 6) = 20..30.
    """
    pred = predicted(tl, durations=durations, no_launch_overhead=no_launch_overhead,
                     overlap_comm=overlap_comm, remove=remove, drop_syncs=drop_syncs)
    rows = (launch_join(tl).with_row_index("_i")
            .filter(pl.col("kind").cast(pl.String) != "sync")
            .select("_i", "rank", pl.col("process_id").fill_null(0), "device_id",
                    pl.col("stream_id").fill_null(-1), "kind", "category",
                    pl.col("name").cast(pl.String), "api_start_ns", "start_ns", "end_ns",
                    "dur_ns"))
    return pl.concat([rows, pred.select("pred_start_ns", "pred_end_ns")],
                     how="horizontal").with_columns(
        (pl.col("pred_end_ns") - pl.col("pred_start_ns")).alias("pred_dur_ns"))
