"""Does a span's timeline hold everything the gap rules read for its gaps?

The chunked ``gaps`` (:func:`traceparse.executor.idle_gaps`) explains the gaps of a window
with the in-memory rules run on the rows of a time span around them
(:mod:`traceparse.nsys.spans`), with the trace-wide call state and a span reaching back
at least the trace's deepest launch queue (so every call of an activity queued across a
gap is read). Some rules still look further for a gap: :func:`why_not_local` says, for
one span and the gaps it explains, which lookup may reach rows the span did not read
(None when none can), checked on the span's own rows and the whole-file facts of the
plan:

* **processes per device** (:func:`traceparse.analyses.hostrows.per_group`): a process's
  host rows count for every device it has work on anywhere in the trace; the span must
  see the same processes on the device of each gap;
* **launching threads**: OS-runtime calls and CPU samples count only on threads that made
  CUDA calls anywhere in the trace;
* **stream waits** (:mod:`traceparse.analyses.streamwait`) overlapping a gap: the event's
  record and its producer are looked up backwards without a bound (unless the span starts
  at the file's beginning they must be found inside it), and a wait before the span may
  hold back the first activity a stream or thread launches in the span, when that one is
  queued across a gap;
* **non-issuing ranges** (:func:`traceparse.analyses.issuing.non_issuing`): a range that
  overlaps a gap and sticks out of the span, with no call of its thread inside it in the
  span, must have none outside either (one SQL look-up per such range);
* **issuing stretches** (:func:`traceparse.analyses.issuing.issuing_stretches`): a
  launch's stretch starts at the end of its thread's previous bounding call, or at the
  start of a range of the thread holding the launch; a launch after the span can so
  start a stretch inside a gap when a range of its thread overlaps the gap and runs past
  the span, unless the thread makes a bounding call (a launch of GPU work, or a wait) in
  the span ending after the gap;
* **compiler processes** (:func:`traceparse.analyses.warmup.warmup_signals`): a spawn
  overlapping a gap is warm-up by the thread's next CUDA call, which must be in the span;
* **stream captures** (:func:`traceparse.analyses.warmup.warmup_signals`, reason
  ``graph_capture``): a capture window is warm-up from its begin call to its end call,
  which may lie on either side of a span; a file with capture calls is not explained in
  pieces;
* **framework-op first calls**: ``cpu_op`` ranges (never in nsys exports) are judged
  against every call of the op.

A span that fails a check is not explained in chunks: the caller computes the file in
memory and says why (docs/performance.md, "Chunked gaps").
"""

from __future__ import annotations

import polars as pl

from traceparse.nsys.chunks import END, Plan
from traceparse.timeline import Timeline

_RANK_DEV = ["rank", "device_id"]
#: The lookups that reach backwards only: a span that starts earlier may satisfy them.
NO_RECORD = "a stream wait's event record or producer may lie before the span"
HELD_BACK = "a stream wait before the span may hold back work queued across a gap"
BACKWARD = (NO_RECORD, HELD_BACK)
#: The lookups that reach forwards only: a span that ends later may satisfy them.
NEXT_CALL = ("a host range around a gap runs past the span with no later bounding call of "
             "its thread in it (an issuing stretch may start in the gap)")
FORWARD = (NEXT_CALL,)
#: The lookups a span wider on both sides may satisfy.
OUTSIDE_CALLS = ("a host range around a gap holds CUDA calls outside the span (whether it "
                 "is issuing depends on them)")
WIDER = (OUTSIDE_CALLS,)


def why_not_local(p: Plan, tl: Timeline, gaps: pl.DataFrame, lo: int, hi: int) -> str | None:
    """The first lookup of the module docstring that may reach past ``[lo, hi)`` for
    ``gaps`` (group columns, ``start_ns``, ``end_ns``), as a phrase; None when none can."""
    if gaps.height == 0:
        return None
    g = gaps.select(*_RANK_DEV, "start_ns", "end_ns").cast(
        {"rank": pl.Int32, "device_id": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    for check in (_processes, _threads, _cpu_ops, _stream_waits, _spawns, _captures,
                  _non_issuing, _next_call):
        why = check(p, tl, g, lo, hi)
        if why is not None:
            return why
    return None


def _rank(p: Plan, pid: int) -> int:
    return p.ranks.get(pid, 0) if p.ranks else 0


def _hits(rows: pl.DataFrame, g: pl.DataFrame, on: list[str], lo: str = "start_ns",
          hi: str = "end_ns") -> pl.Series:
    """Per row of ``rows``: does some stretch of ``g`` with the same ``on`` values start
    before its ``hi`` and end after its ``lo`` (overlap ``[lo, hi)``)? The stretches are
    merged per ``on`` first (a row overlaps one of them iff it overlaps their union), so
    the last merged stretch starting before ``hi`` decides: one as-of join, never a row
    per (row, stretch) pair (a span has as many free stretches as kernels: that join
    held 15 GB on a 262,144-kernel window)."""
    from traceparse.analyses import intervals

    if rows.height == 0 or g.height == 0:
        return pl.Series("_hit", [False] * rows.height, pl.Boolean)
    u = intervals.union(g.select(*on, "start_ns", "end_ns"), by=on)
    u = u.select(*on, (pl.col("start_ns") + 1).alias("_gs1"), pl.col("end_ns").alias("_ge"))
    left = rows.select(*on, pl.col(lo).alias("_lo"), pl.col(hi).alias("_hi")) \
        .with_row_index("_i").cast({c: u.schema[c] for c in on})
    # the last merged stretch with start < hi, i.e. start + 1 <= hi
    j = left.filter(pl.col("_hi").is_not_null()).sort("_hi").join_asof(
        u.sort("_gs1"), left_on="_hi", right_on="_gs1", by=on or None, strategy="backward",
        check_sortedness=False)
    hit = j.filter(pl.col("_ge") > pl.col("_lo"))["_i"]
    out = pl.Series("_hit", [False] * rows.height, pl.Boolean)
    return out.scatter(hit, True) if hit.len() else out


def _over(rows: pl.DataFrame, g: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """The rows of ``rows`` that overlap some gap of ``g`` with the same ``on`` values."""
    if rows.height == 0:
        return rows
    return rows.filter(_hits(rows, g, on))


def _processes(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    busy = tl.gpu.filter(pl.col("category").cast(pl.String) != "sync")
    for rank, dev in g.select(_RANK_DEV).unique().iter_rows():
        want = {pid for pid, d in p.pairs if d == dev and _rank(p, pid) == rank}
        have = set(busy.filter((pl.col("rank") == rank) & (pl.col("device_id") == dev))
                   ["process_id"].drop_nulls().to_list())
        if want != have:
            return (f"the processes with work on device {dev} (rank {rank}) are not all in "
                    "the span")
    return None


def _threads(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    kinds = pl.col("kind").cast(pl.String)
    rows = tl.ranges.filter(kinds.is_in(["osrt", "cpu_sample"]) & pl.col("end_ns").is_not_null())
    if rows.height == 0:
        return None
    near = rows.filter(_hits(rows, g, []))
    seen = set(tl.api.select("process_id", "thread_id").unique().iter_rows())
    for pid, tid in near.select("process_id", "thread_id").unique().iter_rows():
        if (pid, tid) in p.threads and (pid, tid) not in seen:
            return (f"thread {tid} makes CUDA calls in the trace but none in the span (its "
                    "OS-runtime calls and CPU samples count)")
    return None


def _cpu_ops(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    if tl.ranges.filter(pl.col("kind").cast(pl.String) == "cpu_op").height:
        return "framework-op ranges are judged against every call of the op"
    return None


def _stream_waits(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    from traceparse.analyses.streamwait import NO_PRODUCER, stream_waits

    if lo <= -END:
        return None  # the span starts at the file's beginning: every earlier row is read
    sw = _over(stream_waits(tl).cast({"rank": pl.Int32, "device_id": pl.Int32}), g, _RANK_DEV)
    if sw.height and (sw["event"].null_count() or (sw["producer"] == NO_PRODUCER).any()):
        return NO_RECORD
    if _held(p, tl, g).height:
        return HELD_BACK
    return None


def _held(p: Plan, tl: Timeline, g: pl.DataFrame) -> pl.DataFrame:
    """The first activity a waited stream (``_waited``) or a waiting thread (``_waiter``)
    launches in the span, where it is queued across a gap: a wait before the span may
    hold it back. Columns ``rank, process_id, device_id, stream_id, _tid`` and the two
    flags."""
    from traceparse import links

    idx = links.launch_links(tl)["api_row"]
    acts = pl.concat([tl.gpu.select("rank", "process_id", "device_id", "stream_id",
                                    "start_ns", "category"),
                      tl.api.select(pl.col("start_ns").gather(idx).alias("_cs"),
                                    pl.col("end_ns").gather(idx).alias("_ce"),
                                    pl.col("thread_id").gather(idx).alias("_tid"))],
                     how="horizontal").filter(
        (pl.col("category").cast(pl.String) != "sync") & pl.col("_cs").is_not_null())
    # only threads that call a wait (the stream inferred) and streams of a synchronization
    # record (the stream recorded) can be held by one
    waiter = pl.struct(pl.col("process_id"), pl.col("_tid")).is_in(
        pl.Series([{"process_id": a, "_tid": b} for a, b in p.waiters],
                  dtype=pl.Struct({"process_id": pl.Int64, "_tid": pl.Int64})).implode())
    waited = pl.struct(pl.col("device_id"), pl.col("stream_id")).is_in(
        pl.Series([{"device_id": a, "stream_id": b} for a, b in p.waited],
                  dtype=pl.Struct({"device_id": pl.Int64, "stream_id": pl.Int64})).implode())
    acts = acts.with_columns(pl.col("process_id").cast(pl.Int64), pl.col("_tid").cast(pl.Int64),
                             pl.col("device_id").cast(pl.Int64),
                             pl.col("stream_id").cast(pl.Int64))
    first = acts.with_columns(
        ((pl.col("_cs") == pl.col("_cs").min().over("rank", "device_id", "stream_id"))
         & waited).alias("_waited"),
        ((pl.col("_cs") == pl.col("_cs").min().over("rank", "process_id", "_tid"))
         & waiter).alias("_waiter")).filter(pl.col("_waited") | pl.col("_waiter"))
    # queued across a gap: some gap starts before the activity and ends after its call
    first = first.cast({"rank": pl.Int32, "device_id": pl.Int32})
    return first.filter(_hits(first, g, _RANK_DEV, lo="_ce", hi="start_ns")).select(
        "rank", "process_id", "device_id", "stream_id", "_tid", "_waited", "_waiter")


def held_back_start(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int,
                    launches: pl.DataFrame) -> int:
    """Where a span starting at ``lo`` that fails :data:`HELD_BACK` must start instead:
    just before the latest launch call before ``lo`` on each held stream or thread
    (``launches``: :attr:`traceparse.executor.TraceState.launches`, the latest launch
    call per window; the largest of them below ``lo`` is at most that launch's start).
    A wait that holds the span's first launch on a stream (thread) comes after the
    previous launch on it, so it ends inside the new span; and that previous launch,
    queued at most the deepest queue, starts before every gap the span explains. The
    file's beginning when a held stream or thread has no launch before ``lo``."""
    held = _held(p, tl, g)
    out = lo
    for kind, a, b, flag in (("stream", "device_id", "stream_id", "_waited"),
                             ("thread", "process_id", "_tid", "_waiter")):
        keys = held.filter(pl.col(flag)).select(
            "rank", pl.col(a).cast(pl.Int64).alias("a"), pl.col(b).cast(pl.Int64).alias("b")
        ).unique()
        if keys.height == 0:
            continue
        before = launches.filter((pl.col("kind") == kind) & (pl.col("cs") < lo)).group_by(
            "rank", "a", "b").agg(pl.col("cs").max())
        got = keys.join(before, on=["rank", "a", "b"], how="left", nulls_equal=True)
        if got["cs"].null_count():
            return -END
        out = min(out, int(got["cs"].min()) - 1)  # type: ignore[arg-type]
    return out


def _captures(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    return ("a stream capture (warm-up from its begin to its end call) may cross the span"
            if p.captures else None)


def _spawns(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    from traceparse.analyses.warmup import SPAWN_RE

    sp = tl.ranges.filter((pl.col("kind").cast(pl.String) == "osrt")
                          & pl.col("name").cast(pl.String).str.contains(SPAWN_RE)
                          & pl.col("end_ns").is_not_null())
    if sp.height == 0:
        return None
    near = _over(sp.with_columns(pl.col("rank").cast(pl.Int32)), g.drop("device_id").unique(),
                 ["rank"])
    for pid, tid, end in near.select("process_id", "thread_id", "end_ns").iter_rows():
        later = tl.api.filter((pl.col("process_id") == pid) & (pl.col("thread_id") == tid)
                              & (pl.col("start_ns") >= end))
        if later.height == 0:
            return "a process spawn's next CUDA call may lie after the span"
    return None


def _non_issuing(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    from traceparse.analyses.issuing import host_ranges

    r = host_ranges(tl).filter(((pl.col("start_ns") < lo) | (pl.col("end_ns") > hi))
                               & (pl.col("kind") != "cpu_op"))
    if r.height == 0:
        return None
    r = _over(r.with_columns(pl.col("rank").cast(pl.Int32)), g.drop("device_id").unique(),
              ["rank"])
    for pid, tid, s, e in r.select("process_id", "thread_id", "start_ns", "end_ns").iter_rows():
        inside = tl.api.filter((pl.col("process_id") == pid) & (pl.col("thread_id") == tid)
                               & (pl.col("start_ns") >= s) & (pl.col("start_ns") < e))
        if inside.height == 0 and _has_call(p, pid, tid, s, e):
            return OUTSIDE_CALLS
    return None


def _has_call(p: Plan, pid: int, tid: int, s: int, e: int) -> bool:
    """Whether thread ``tid`` of process ``pid`` starts a runtime call in ``[s, e)``."""
    from traceparse.nsys.db import NsysDB, q
    from traceparse.nsys.reader import RUNTIME
    from traceparse.nsys.spans import rowids

    rid, params = rowids([b for b in p.host if b.table == RUNTIME
                          and b.tmin < e and b.tmax >= s])
    with NsysDB(p.path) as db:
        if not db.has(RUNTIME) or "globalTid" not in db.columns(RUNTIME):
            return False
        got = db.fetchall(f"SELECT 1 FROM {q(RUNTIME)} WHERE {rid} AND start >= ? AND start < ? "
                       "AND ((globalTid >> 24) & 16777215) = ? AND (globalTid & 16777215) = ? "
                       "LIMIT 1", (*params, s, e, pid, tid))
    return bool(got)


def _next_call(p: Plan, tl: Timeline, g: pl.DataFrame, lo: int, hi: int) -> str | None:
    from traceparse import links
    from traceparse.analyses.attribution import BLOCKING_API_RE
    from traceparse.analyses.hostrows import name_matches
    from traceparse.analyses.issuing import host_ranges

    if hi >= END:
        return None
    r = host_ranges(tl).filter(pl.col("end_ns") >= hi)
    if r.height == 0:
        return None
    r = _over(r.with_columns(pl.col("rank").cast(pl.Int32)), g.drop("device_id").unique(),
              ["rank"])
    if r.height == 0:
        return None
    launched = links.launch_links(tl)["api_row_file"].drop_nulls().unique()
    bounding = tl.api.with_row_index("_row").filter(
        pl.col("_row").is_in(launched.cast(pl.UInt32).implode())
        | name_matches(tl.api, BLOCKING_API_RE))
    for rank, pid, tid, s, e in r.select("rank", "process_id", "thread_id", "start_ns",
                                         "end_ns").iter_rows():
        gend = g.filter((pl.col("rank") == rank) & (pl.col("start_ns") < e)
                        & (pl.col("end_ns") > s))["end_ns"].max()
        later = bounding.filter((pl.col("process_id").fill_null(0) == pid)
                                & (pl.col("thread_id").fill_null(0) == tid)
                                & (pl.col("end_ns") >= gend))
        if later.height == 0:
            return NEXT_CALL
    return None
