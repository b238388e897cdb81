"""The what-if replay of one nsys export read in time-ordered pieces
(``whatif --executor chunks``; docs/performance.md, "Chunked replay").

Each piece is a host-time span ``[t0, t1)`` whose edges are the time windows of
:meth:`traceparse.nsys.chunks.Plan.windows` (about ``chunk_rows`` GPU activities each);
its timeline is read by the reader itself (:func:`traceparse.nsys.spans.read_span`: the
rows overlapping the span, and the GPU rows its calls launched, wherever they run) and
replayed by :func:`traceparse.analyses.replay_pieces.replay_piece` with the state of the
pieces before it. Only the piece's timeline and the carried state are held; the result
is folded into :func:`traceparse.analyses.predict.summary_parts` per piece.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import polars as pl

from traceparse.analyses.predict import merge_summary_parts, summary_parts
from traceparse.analyses.replay_pieces import (
    NotOrdered,
    Removed,
    State,
    check_removed,
    replay_piece,
)
from traceparse.nsys import chunks

__all__ = ["CHUNKED_FIXES", "NotOrdered", "pieces", "replay_summary", "whatif"]


def pieces(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS, drop_syncs: bool = False,
           pinned: bool = False, no_launch_overhead: bool = False,
           steps: list[pl.DataFrame] | None = None) -> Iterator[pl.DataFrame]:
    """The replayed activities of ``path``, one frame per piece in time order
    (:func:`traceparse.analyses.replay_pieces.replay_piece`'s columns); measured
    durations, and with ``drop_syncs`` every blocking sync no longer waits; with
    ``pinned`` the copies from pageable memory run at the pinned rate and their blocking
    calls no longer wait (:func:`pinned_rates`; the measured replay when there is none);
    with ``no_launch_overhead`` the attribution's launch overhead is taken away from the
    host, each piece's from the chunked breakdown's time window of the same edges
    (:func:`launch_removed`). ``steps``: each piece's ranges that may be steps
    (:func:`step_candidates`) are appended to it.

    Raises:
        NotOrdered: a piece could not continue the carried state exactly, or the pieces
            did not replay every GPU activity of the file once, or a window's launch
            overhead could not be computed on a span (the caller replays the file in
            memory instead).
    """
    from traceparse.nsys.spans import read_span, span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return
    edges = [-chunks.END, *(w[0] for w in wins[1:]), chunks.END]
    rates = pinned_rates(plan) if pinned else None
    state = State()
    removed = launch_removed(plan, wins) if no_launch_overhead else None
    for t0, t1 in pairwise(edges):
        got = None if removed is None else next(removed)
        tl, _ = read_span(plan, t0, t1)
        if steps is not None:
            steps.append(step_candidates(tl.ranges))
        yield replay_piece(tl, t0, t1, state, drop_syncs=drop_syncs, rates=rates,
                           removed=got)
        del tl
    total = sum(b.rows for b in plan.blocks)
    if state.rows != total:
        raise NotOrdered(f"{state.rows:,} GPU activities replayed of {total:,} in the file")
    if removed is not None:
        check_removed(state)


def step_candidates(ranges: pl.DataFrame) -> pl.DataFrame:
    """The ranges (``rank, kind, name, start_ns, end_ns``) that
    :func:`traceparse.analyses.steps.step_windows` may take as steps without
    ``--steps``: ``ProfilerStep`` ranges and numbered step annotations."""
    from traceparse.analyses.codes import matches
    from traceparse.analyses.steps import AUTO_STEP_KINDS, AUTO_STEP_RE, PROFILER_STEP_KIND

    r = ranges.filter(pl.col("end_ns").is_not_null()).select(
        "rank", pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String), "start_ns",
        "end_ns")
    kind = pl.col("kind")
    return r.filter((kind == PROFILER_STEP_KIND)
                    | (kind.is_in(AUTO_STEP_KINDS) & matches(r["name"], AUTO_STEP_RE)))


def launch_removed(plan: chunks.Plan, wins: list[tuple[int, int]]) -> Iterator[Removed]:
    """The launch overhead ``whatif --no-launch-overhead`` removes, one piece at a time:
    the :class:`~traceparse.analyses.replay_pieces.Removed` state entered for each piece
    (the pieces' edges are the windows' starts, the first from the file's beginning),
    its intervals those the chunked breakdown attributes to launch overhead in the time
    window (:func:`traceparse.executor_breakdown.span_launch_task`, after its pass 1).

    Raises:
        NotOrdered: a window's span may not hold what its attribution reads
            (:class:`traceparse.executor.NotLocal`).
    """
    from traceparse import executor_breakdown as eb

    got = eb.window_jobs(plan, wins)
    jobs = {} if got is None else dict(got[2])
    none = pl.DataFrame(schema={"rank": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    removed = Removed()
    for i, (t0, t1) in enumerate(wins):
        job = jobs.get(i)
        try:
            segs = none if job is None or got is None else eb.span_launch_task(
                plan, job[0], job[1], got[1])
        except eb.NotLocal as exc:
            raise NotOrdered(f"launch overhead not local: {exc.why}") from exc
        removed.enter(segs, -chunks.END if i == 0 else t0, t1)
        yield removed


def pinned_rates(plan: chunks.Plan) -> dict[str, float] | None:
    """:func:`traceparse.analyses.mechanisms.pinned_rates` of the whole export, its copies
    read a few rowid blocks at a time (the sums add up) and the device names from the
    export's device table; None when it has no copy from pageable memory or no rate."""
    from traceparse.analyses import mechanisms as mech
    from traceparse.nsys.gpu import MEMCPY
    from traceparse.nsys.spans import read_span

    blocks = [b for b in plan.blocks if b.table == MEMCPY]
    sums = {d: (0, 0, 0) for d in ("HtoD", "DtoH")}
    for i in range(0, len(blocks), 8):
        part = mech.copy_sums(mech.host_copies(chunks.read_rows(plan, blocks[i:i + 8])))
        sums = {d: (sums[d][0] + part[d][0], sums[d][1] + part[d][1],
                    sums[d][2] + part[d][2]) for d in sums}
    if not (sums["HtoD"][2] or sums["DtoH"][2]):
        return None
    devices, _ = read_span(plan, -chunks.END, -chunks.END + 1)  # no rows: the devices
    rate, _notes = mech.pinned_rates(sums, mech.link_gbps(devices))
    return rate or None


def replay_summary(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS,
                   drop_syncs: bool = False, pinned: bool = False,
                   no_launch_overhead: bool = False) -> pl.DataFrame | None:
    """:func:`traceparse.analyses.predict.summary_parts` of the replay of ``path``
    (:func:`pieces`), folded piece by piece; None when the export has no GPU activity.

    Raises:
        NotOrdered: as :func:`pieces`, or the export has step ranges (its summary's step
            rows are not computed in pieces).
    """
    acc: list[pl.DataFrame] = []
    steps: list[pl.DataFrame] = []
    for rows in pieces(path, chunk_rows=chunk_rows, drop_syncs=drop_syncs, pinned=pinned,
                       no_launch_overhead=no_launch_overhead, steps=steps):
        rep = rows.with_columns(
            pl.col("host_ns").alias("api_start_ns"),
            (pl.col("pred_end_ns") - pl.col("pred_dur_ns")).alias("pred_start_ns"))
        acc.append(summary_parts(rep))
        if len(acc) >= 8:
            acc = [merge_summary_parts(acc)]
    if acc:
        _no_steps(steps)
    return merge_summary_parts(acc) if acc else None


def _no_steps(steps: list[pl.DataFrame]) -> None:
    """Raise :class:`NotOrdered` when the pieces' ranges hold steps
    (:func:`traceparse.analyses.steps.step_windows`: ``ProfilerStep`` ranges, or two
    numbered step annotations one after another on a rank): the memory summary then has
    step rows, which the pieces' summary does not compute."""
    from traceparse.analyses.steps import PROFILER_STEP_KIND, _auto_steps

    if not steps:
        return
    r = pl.concat(steps).unique()
    if r.height and (r.filter(pl.col("kind") == PROFILER_STEP_KIND).height
                     or _auto_steps(r).height):
        raise NotOrdered("the export has step ranges (per-step rows are computed in "
                         "memory only)")


#: ``whatif`` changes the chunked replay makes: the savings-engine change of each fix.
CHUNKED_FIXES = {"host-sync": "host_sync", "pinned-memory": "pinned_memory"}


def whatif(path: str, *, fix: str | None = None, no_launch_overhead: bool = False,
           chunk_rows: int = chunks.BLOCK_ROWS) -> pl.DataFrame | None:
    """``whatif --fix FIX`` or ``whatif --no-launch-overhead`` (alone;
    :func:`traceparse.analyses.predict.whatif`) of one nsys export, read in pieces. Without
    a fix, the summary of the replay without launch overhead. With one, the replay piece
    by piece (:func:`replay_summary`) and the window rows the savings engine's: a host
    change's capped at the GPU's busy time
    (:func:`traceparse.analyses.savings.host_capped`) with each rank's non-busy time from
    the chunked GPU-only breakdown (:func:`traceparse.executor.gpu_breakdown`: window less
    the union of busy activities per device, what the attribution's launch-overhead,
    warm-up, host-sync and idle parts sum to). None without GPU activity.

    Raises:
        NotOrdered: as :func:`replay_summary`.
    """
    from traceparse.analyses.predict import summary_from_parts, with_fix_windows
    from traceparse.analyses.savings import HOST_CHANGES, host_capped
    from traceparse.executor import gpu_breakdown

    if fix is None:
        got = replay_summary(path, chunk_rows=chunk_rows,
                             no_launch_overhead=no_launch_overhead)
        return None if got is None else summary_from_parts(got)
    change = CHUNKED_FIXES[fix]
    parts = replay_summary(path, chunk_rows=chunk_rows, drop_syncs=change == "host_sync",
                           pinned=change == "pinned_memory")
    if parts is None:
        return None
    out = summary_from_parts(parts)
    if change not in HOST_CHANGES:  # the replay's window itself
        return with_fix_windows(out, out.filter(pl.col("scope") == "window").select(
            "rank", "predicted_ns", pl.lit(None, pl.Int64).alias("window_unprofiled_ns"),
            pl.lit(None, pl.Int64).alias("saving_unprofiled_ns")))
    bd = gpu_breakdown(path, executor="chunks", chunk_rows=chunk_rows)
    bound = (bd.group_by("rank").agg(pl.col("no_gpu_activity_ns").sum().alias("bound_ns"))
             if bd is not None else pl.DataFrame(schema={"rank": pl.Int32,
                                                         "bound_ns": pl.Int64}))
    win = out.filter(pl.col("scope") == "window").select("rank", "measured_ns",
                                                         "predicted_ns")
    sv = (win.join(bound.cast({"rank": win.schema["rank"]}), on="rank", how="left")
          .with_columns(pl.col("bound_ns").fill_null(0))
          .select("rank", host_capped("predicted_ns").alias("predicted_ns"),
                  pl.lit(None, pl.Int64).alias("window_unprofiled_ns"),
                  pl.lit(None, pl.Int64).alias("saving_unprofiled_ns")))
    return with_fix_windows(out, sv)
