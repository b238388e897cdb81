"""The what-if replay (:mod:`traceparse.analyses.replay`) over time-ordered pieces of a
trace, with bounded carried state (docs/performance.md, "Chunked replay").

A **piece** is a host-time span ``[t0, t1)``: the non-sync GPU activities whose host
instant (launch call entry, else their own start) lies in it, and the sync calls entered
in it. Pieces are replayed in time order by the replay's own functions
(:func:`~traceparse.analyses.replay._build_prep`, ``_stream_gaps``, ``_blocking``,
:func:`~traceparse.analyses.replay.solve_runs`) with the state of everything before the
piece:

* per stream lane: its last activity's start and end and the latest end so far (the
  measured gap and host-bound test of the lane's next activity,
  :func:`~traceparse.analyses.replay._stream_gaps`);
* per process: the latest end of its activities launched so far (what a sync entered in
  the piece waits for), its blocking syncs not yet passed, and the solver's
  :class:`~traceparse.analyses.replay.Carry` (host shift, latest predicted ends of the
  current and earlier epochs, each stream's predicted end);
* the identities of activities already replayed that start at or after the piece (a
  queued activity is read again by a later span, without its call).

**Why it is exact.** Every input of a row is decided by things before it in host time:
its epoch by the syncs that returned before its call (entered before it, so in this or
an earlier piece), a sync's wait by the activities launched before its entry, the
recurrence ``E_i = max(E_{i-1} + g_i + d_i, h_i + d_i)`` by the stream's previous end. A
run (process, epoch, stream) cut by an edge continues from the carried stream end (the
closed form of a run's tail with ``E_-1`` = that end is the sequential recurrence). What
must hold, and is checked (:class:`NotOrdered`): on every lane the piece's activities
start after the lane's carried last start (stream order is start order, so host order
and stream order agree across the edge), and every replayed activity was read once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceparse.analyses._arrays import length_before, lex_codes
from traceparse.analyses.replay import (
    Carry,
    _blocking,
    _build_prep,
    _Prep,
    _rank_union,
    _stream_gaps,
    solve_runs,
)
from traceparse.timeline import Timeline

_I64 = np.int64
_KEY = ["rank", "process_id", "device_id", "stream_id", "correlation_id", "start_ns",
        "end_ns"]


class NotOrdered(Exception):
    """A piece cannot continue the carried state exactly: ``why`` says what broke."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class Proc:
    """One process's carried state."""

    t0: int  #: the origin its replayed times are counted from (its first host instant)
    end: int | None = None  #: latest end of its activities launched so far
    #: blocking syncs not yet passed: ``(sync_start, sync_end, w, tail, dropped, at_start,
    #: at_end)`` by (end, start); ``dropped`` (1): it no longer waits; ``at_*``: the
    #: removed length before its entry and its return (:class:`Removed`; 0 without, -1
    #: while the return lies past the pieces replayed)
    syncs: list[tuple[int, ...]] = field(default_factory=list)
    carry: Carry = field(default_factory=Carry)
    #: the removed length before the return of the last blocking sync passed
    base: int = 0
    synced: bool = False  #: a blocking sync of the process was found
    #: the least removed length before a launch of its activities (0 for one without a
    #: call; None: no activity yet), what ``_pred_end`` subtracts for a process without
    #: blocking syncs when another process has some (:func:`check_removed`)
    low: int | None = None


@dataclass
class State:
    """Everything a piece needs from the pieces before it (bounded: per lane, per
    process, the queue of activities already replayed that start later)."""

    #: per lane ``(rank, process, device, stream)``: its last start, last end, latest end
    lanes: dict[tuple[int, ...], tuple[int, int, int]] = field(default_factory=dict)
    codes: dict[tuple[int, ...], int] = field(default_factory=dict)  #: lane -> run key
    procs: dict[tuple[int, ...], Proc] = field(default_factory=dict)  #: (rank, process)
    queued: set[tuple[int, ...]] = field(default_factory=set)
    rows: int = 0
    #: per rank: the blocking syncs found and their summed wait (entry to return), what
    #: :func:`traceparse.analyses.mechanisms.blocking_waits` counts
    waits: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: the last piece's activities: their rows in its timeline's ``gpu`` (file order)
    last: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))


@dataclass
class Removed:
    """Host time taken away per rank as the pieces see it (the launch overhead under
    ``no_launch_overhead``, :func:`traceparse.analyses.replay._pred_end`): the union's
    length before the current piece ``[t0, t1)`` (``before``, per rank) and the piece's
    own intervals (``here``: per rank the merged starts and ends,
    :func:`~traceparse.analyses.replay_removed._rank_union`), all inside it. The union
    of disjoint pieces' intervals has their summed length, so the length before an
    instant of the piece is ``before`` plus ``here``'s (as ``_cum_at`` counts it)."""

    before: dict[int, int] = field(default_factory=dict)
    here: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    t0: int = 0
    t1: int = 0

    def enter(self, intervals: pl.DataFrame, t0: int, t1: int) -> None:
        """Move on to the piece ``[t0, t1)`` whose removed intervals (``rank, start_ns,
        end_ns``, inside it) are ``intervals``."""
        for r, (s, e) in self.here.items():
            self.before[r] = self.before.get(r, 0) + int((e - s).sum())
        u = _rank_union(intervals)
        rank = u["rank"].to_numpy().astype(_I64)
        ends = u["end_ns"].to_numpy().astype(_I64)
        cum = u["_cum"].to_numpy().astype(_I64)
        self.here = {}
        b = 0
        while b < rank.size:  # sorted by rank
            a, b = b, int(np.searchsorted(rank, rank[b], side="right"))
            e, c = ends[a:b], cum[a:b]
            self.here[int(rank[a])] = (e - (c - np.append(0, c[:-1])), e)
        self.t0, self.t1 = t0, t1

    def at(self, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The removed length of each ``rank`` before ``t`` (instants in the piece).

        Raises:
            NotOrdered: an instant lies outside the piece.
        """
        if ((t < self.t0) | (t >= self.t1)).any():
            raise NotOrdered("a launch call of the piece's activities lies outside it")
        out = np.zeros(t.size, _I64)
        for r in np.unique(rank).tolist():
            sel = np.flatnonzero(rank == r)
            s, e = self.here.get(r, (out[:0], out[:0]))
            out[sel] = length_before(s, e, t[sel]) + self.before.get(r, 0)
        return out

    def known(self, rank: int, t: np.ndarray) -> np.ndarray:
        """:meth:`at` of one rank at instants at or after the piece's start; -1 for
        those past the piece (known once the piece holding them is entered)."""
        out = np.full(t.size, -1, _I64)
        k = np.flatnonzero(t < self.t1)
        out[k] = self.at(np.full(k.size, rank, _I64), t[k])
        return out


def check_removed(state: State) -> None:
    """After the last piece: the replay with removed time is exact only if no process
    without blocking syncs needs the whole trace's least removed length
    (:func:`traceparse.analyses.replay._pred_end` subtracts it from such a process's
    launches when another process has blocking syncs; the pieces subtract nothing).

    Raises:
        NotOrdered: a process's launches would move by that least length.
    """
    if not any(p.synced for p in state.procs.values()):
        return
    for key, p in state.procs.items():
        if not p.synced and p.low:
            raise NotOrdered(f"process {key[1]} of rank {key[0]} has no blocking sync and "
                             "launch overhead before its first launch")


#: The columns of a piece's result (:func:`replay_piece`).
COLUMNS = ("rank", "category", "host_ns", "start_ns", "end_ns", "dur_ns", "pred_dur_ns",
           "pred_end_ns")


def replay_piece(tl: Timeline, t0: int, t1: int, state: State, *,
                 drop_syncs: bool = False, rates: dict[str, float] | None = None,
                 removed: Removed | None = None, durations: np.ndarray | None = None
                 ) -> pl.DataFrame:
    """Replay the piece ``[t0, t1)`` of a trace whose timeline around it is ``tl`` (every
    row overlapping the span or starting in it, and the GPU rows its calls launched),
    continuing ``state`` (updated in place). Returns the piece's activities:
    :data:`COLUMNS` (``host_ns``: the call entry, else the start; ``pred_dur_ns``: the
    replayed duration; ``pred_end_ns``: the replayed end, the replayed start being that
    less ``pred_dur_ns``).

    ``drop_syncs``: every blocking sync no longer waits (``whatif --fix host-sync``).
    ``rates``: copies from pageable memory run at these rates (GB/s per direction) and
    the blocking calls that issued them no longer wait (``whatif --fix pinned-memory``,
    :func:`traceparse.analyses.mechanisms.pinned_rates`: whole-trace sums).
    ``removed``: host time taken away (``whatif --no-launch-overhead``), entered for this
    piece (:meth:`Removed.enter`): each launch and sync entry moves earlier by its length
    since the process's last blocking sync returned, as in the whole replay.
    ``durations``: one replayed duration per ``tl.gpu`` row (the fusion fix's,
    :mod:`traceparse.fusion_chunks`), as the whole replay's ``durations``.

    Raises:
        NotOrdered: the piece does not continue the state exactly (module docstring).
    """
    full = _build_prep(tl)
    ident = (tl.gpu.select(pl.col(c) for c in _KEY)[full.gi]
             .with_columns(pl.col("process_id").fill_null(0),
                           pl.col("device_id").fill_null(-1).cast(pl.Int64),
                           pl.col("stream_id").fill_null(-1).cast(pl.Int64),
                           pl.col("correlation_id").fill_null(-1).cast(pl.Int64)))
    cols = [ident[c].to_numpy().astype(_I64) for c in _KEY]

    def keys_at(idx: np.ndarray) -> list[tuple[int, ...]]:
        return list(zip(*(c[idx].tolist() for c in cols), strict=True))

    state.queued = {k for k in state.queued if k[5] >= t0}
    mine = (full.host >= t0) & (full.host < t1)
    # an activity replayed before and queued past the edge is read here without its call
    maybe = np.flatnonzero(mine & ~full.launched) if state.queued else np.zeros(0, _I64)
    mine[[i for i, k in zip(maybe.tolist(), keys_at(maybe), strict=True)
          if k in state.queued]] = False
    sel = np.flatnonzero(mine)
    state.last = full.gi[sel]
    p = _sub(full, sel)
    lc = None if removed is None else _launch_at(tl, full, sel, removed)
    state.rows += sel.size
    state.queued.update(keys_at(sel[full.start[sel] >= t1]))
    # the piece's lanes and processes, each distinct one coded once
    lane_keys, linv = _distinct([c[sel] for c in cols[:4]])
    lane = np.asarray([state.codes.setdefault(k, len(state.codes)) for k in lane_keys],
                      _I64)[linv]
    pkeys, proc = _distinct([c[sel] for c in cols[:2]])
    pcode_of = {k: i for i, k in enumerate(pkeys)}
    for k in state.procs:  # processes seen before: their syncs in the piece count too
        pcode_of.setdefault(k, len(pcode_of))
    codes = pl.DataFrame({"_r": [k[0] for k in pcode_of], "_q": [k[1] for k in pcode_of],
                          "_c": list(pcode_of.values())},
                         schema={"_r": pl.Int64, "_q": pl.Int64, "_c": pl.Int64})
    # sync candidates of the piece: entered in it, of the processes seen so far
    cand = (p.cand.filter((pl.col("sync_start") >= t0) & (pl.col("sync_start") < t1))
            .join(full.procs.select("_p", pl.col("rank").cast(pl.Int64).alias("_r"),
                                    pl.col("process_id").cast(pl.Int64).alias("_q")),
                  on="_p")
            .join(codes, on=["_r", "_q"])
            .select(pl.col("_c").alias("_p"), "sync_start", "sync_end")
            .sort("_p", "sync_end", "sync_start"))
    p = dataclasses.replace(p, proc=proc, sid=lane, rid=lane, cand=cand)
    # stream order of the piece (as the whole replay orders it: process, lane, start)
    o = np.argsort(p.start, kind="stable")
    o = o[np.argsort(lane[o], kind="stable")]
    o = o[np.argsort(proc[o], kind="stable")]
    first = np.ones(o.size, bool)
    first[1:] = lane[o][1:] != lane[o][:-1]
    seen = np.zeros(o.size, bool)
    prev0 = np.zeros(o.size, _I64)
    busy0 = np.zeros(o.size, _I64)
    for j in np.flatnonzero(first).tolist():
        got = state.lanes.get(lane_keys[linv[o[j]]])
        if got is not None:
            if p.start[o[j]] <= got[0]:
                raise NotOrdered("a lane's activity launched after the edge starts before "
                                 "one launched before it")
            seen[j], prev0[j], busy0[j] = True, got[1], got[2]
    g1, lat1 = _stream_gaps(tl, p, o, lane, False, (seen, prev0, busy0))
    g, lat = np.empty(o.size, _I64), np.empty(o.size, _I64)
    g[o], lat[o] = g1, lat1
    # the lanes' state after the piece
    heads = np.flatnonzero(first)
    for a, b in zip(heads.tolist(), (np.append(heads[1:], o.size)[:heads.size] - 1).tolist(),
                    strict=True):
        k = lane_keys[linv[o[b]]]
        hi = int(p.end[o[a:b + 1]].max())
        got = state.lanes.get(k)
        state.lanes[k] = (int(p.start[o[b]]), int(p.end[o[b]]),
                          hi if got is None else max(hi, got[2]))
    by_code = {c: k for k, c in pcode_of.items()}
    before = {pcode_of[k]: st.end for k, st in state.procs.items() if st.end is not None}
    qs, qa = np.unique(p.proc[o], return_index=True)
    pb = {q: (a, b) for q, a, b in zip(qs.tolist(), qa.tolist(),
                                       np.append(qa[1:], o.size)[:qa.size].tolist(),
                                       strict=True)}
    found = _blocking(p, o, pb, False, before)
    d, paged = _pinned(tl, p, rates)
    if durations is not None:
        d = durations[p.gi].astype(_I64)
    pred = np.zeros(sel.size, _I64)
    if removed is not None:  # the returns the earlier pieces could not place
        for key, pr in state.procs.items():
            if pr.syncs and pr.syncs[-1][6] < 0:  # by return: the unplaced ones last
                i = next(i for i, x in enumerate(pr.syncs) if x[6] < 0)
                at = removed.known(key[0], np.asarray([x[1] for x in pr.syncs[i:]], _I64))
                pr.syncs[i:] = [(*x[:6], v) for x, v in zip(pr.syncs[i:], at.tolist(),
                                                             strict=True)]
    for q, key in by_code.items():
        a, b = pb.get(q, (0, 0))
        rows = o[a:b]
        st = state.procs.get(key)
        if st is None:
            if rows.size == 0:
                continue
            st = state.procs[key] = Proc(int(min(p.host[rows].min(), p.start[rows].min())))
        new = found.get(q)
        if new is not None:
            n, ns = state.waits.get(key[0], (0, 0))
            state.waits[key[0]] = (n + len(new[0]),
                                   ns + int(np.subtract(new[1], new[0]).sum()))
            off = paged.get(q, set())
            st.synced = True
            st.syncs = sorted([*st.syncs, *((*x, int(drop_syncs or x[0] in off), *at)
                                            for x, at in zip(zip(*new, strict=True),
                                                             _removed_at(removed, key[0], new),
                                                             strict=True))],
                              key=lambda s: (s[1], s[0]))
        if rows.size:
            pred[rows] = _solve_proc(p, rows, g, lat, d, st,
                                     None if lc is None else lc[rows])
            end = int(p.end[rows].max())
            st.end = end if st.end is None else max(st.end, end)
    out = pl.DataFrame({"rank": p.rank, "category": tl.gpu["category"].gather(p.gi),
                        "host_ns": p.host, "start_ns": p.start, "end_ns": p.end,
                        "dur_ns": p.dur, "pred_dur_ns": d, "pred_end_ns": pred})
    return out.cast({"rank": tl.gpu.schema["rank"]})


def _pinned(tl: Timeline, p: _Prep, rates: dict[str, float] | None
            ) -> tuple[np.ndarray, dict[int, set[int]]]:
    """The piece's durations with its pageable copies at ``rates`` (the measured ones
    without), and per process code the entries of the calls that issued them (as
    :func:`traceparse.analyses.mechanisms._pageable_calls` lists them)."""
    from traceparse.analyses.mechanisms import host_copies, pinned_durations

    if not rates:
        return p.dur, {}
    at = np.full(tl.gpu.height, -1, _I64)
    at[p.gi] = np.arange(p.gi.size)
    cp = host_copies(tl.gpu.select("kind", "copy_kind", "src_kind", "dst_kind", "bytes",
                                   "dur_ns"))
    cp = cp.with_columns(pl.Series("_i", at[cp["_i"].to_numpy()])).filter(pl.col("_i") >= 0)
    i = cp.filter(pl.col("_host") == "Pageable")["_i"].to_numpy()
    i = i[p.launched[i]]
    paged: dict[int, set[int]] = {}
    for q, t in zip(p.proc[i].tolist(), p.api_s[i].tolist(), strict=True):
        paged.setdefault(q, set()).add(t)
    return pinned_durations(cp, p.dur, rates), paged


def _solve_proc(p: _Prep, rows: np.ndarray, g: np.ndarray, lat: np.ndarray, d: np.ndarray,
                st: Proc, lc: np.ndarray | None = None) -> np.ndarray:
    """Replayed ends of one process's rows of the piece (any order), continuing ``st``.
    ``lc``: per row the removed length before its launch call (:func:`_launch_at`)."""
    ss, se, w, tail = ([s[i] for s in st.syncs] for i in range(4))
    # epochs counted from the first sync not yet passed
    ep = np.searchsorted(np.asarray(se, _I64), p.host[rows], side="right")
    oe = np.argsort(ep, kind="stable")
    rows, ep = rows[oe], ep[oe]
    # the removed length at each passed sync's return: what later launches count from
    bases = [st.base, *(s[6] for s in st.syncs)]
    adv = [0] * len(ss)
    if lc is not None:
        # a sync passed in this piece returned before one of its launches: known here
        adv = [max(0, s[5] - b) if b >= 0 else 0
               for s, b in zip(st.syncs, bases, strict=False)]
    sy: tuple[list[int], ...] | None = None
    if st.syncs:  # the dropped syncs no longer wait
        sy = (ss, se, w, tail, adv, [s[4] for s in st.syncs])
    base_h = p.host[rows] - st.t0 + lat[rows]
    if lc is not None:
        c = lc[oe]
        low = int(c.min())
        st.low = low if st.low is None else min(st.low, low)
        base = np.clip(np.asarray(bases, _I64), 0, None)
        base_h = base_h - np.clip(c - base[ep], 0, None)
    before = st.carry.cur
    ends = solve_runs(rows, ep, p.rid[rows], p, g[rows], d[rows], base_h, sy, st.t0,
                      carry=st.carry)[0] + st.t0
    passed = st.carry.cur - before
    if passed:
        st.base = st.syncs[passed - 1][6]
    del st.syncs[:passed]
    out = np.empty(rows.size, _I64)
    out[oe] = ends
    return out


def _removed_at(removed: Removed | None, rank: int, syncs: tuple[list[int], ...]
                ) -> list[tuple[int, int]]:
    """Per sync of ``syncs`` (entries, returns, ...): the removed lengths before its
    entry (in the piece) and its return (-1: past the piece); ``(0, 0)`` without
    removed time."""
    if removed is None:
        return [(0, 0)] * len(syncs[0])
    ss = removed.at(np.full(len(syncs[0]), rank, _I64), np.asarray(syncs[0], _I64))
    se = removed.known(rank, np.asarray(syncs[1], _I64))
    return list(zip(ss.tolist(), se.tolist(), strict=True))


def _launch_at(tl: Timeline, full: _Prep, sel: np.ndarray, removed: Removed) -> np.ndarray:
    """Per activity of ``sel``: the removed length before its launch call, the first call
    in file order with its key (as :func:`traceparse.analyses.replay_removed._launch_cum`
    reads it), 0 without one.

    Raises:
        NotOrdered: an activity has no process id (the whole replay then joins on a
            filled key), or its call lies outside the piece.
    """
    from traceparse.links import launch_links

    gi = pl.Series(full.gi[sel])
    if tl.gpu.get_column("process_id").gather(gi).null_count():
        raise NotOrdered("an activity without a process id")
    if sel.size == 0:
        return np.zeros(0, _I64)
    t = tl.api.get_column("start_ns").gather(launch_links(tl)["api_row_file"].gather(gi))
    has = t.is_not_null().to_numpy()
    out = np.zeros(sel.size, _I64)
    at = np.flatnonzero(has)
    out[at] = removed.at(full.rank[sel][at], t.fill_null(0).to_numpy().astype(_I64)[at])
    return out


def _distinct(cols: list[np.ndarray]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The distinct rows of the columns ``cols`` (as tuples) and each row's number among
    them."""
    if cols[0].size == 0:
        return [], np.zeros(0, _I64)
    _, at, inv = np.unique(lex_codes(*cols), return_index=True, return_inverse=True)
    return (list(zip(*(c[at].tolist() for c in cols), strict=True)),
            inv.reshape(-1).astype(_I64))


def _sub(p: _Prep, sel: np.ndarray) -> _Prep:
    """``p`` restricted to the rows ``sel`` (the per-row arrays; the rest shared)."""
    arrays = {f.name: getattr(p, f.name)[sel] for f in dataclasses.fields(p)
              if isinstance(getattr(p, f.name), np.ndarray)}
    return dataclasses.replace(p, **arrays, memo={})
