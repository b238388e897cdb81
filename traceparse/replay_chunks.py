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
from traceparse.analyses.replay_pieces import NotOrdered, State, replay_piece
from traceparse.nsys import chunks

__all__ = ["CHUNKED_FIXES", "NotOrdered", "pieces", "replay_summary", "whatif"]


def pieces(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS, drop_syncs: bool = False,
           pinned: bool = False) -> Iterator[pl.DataFrame]:
    """The replayed activities of ``path``, one frame per piece in time order
    (:func:`traceparse.analyses.replay_pieces.replay_piece`'s columns); measured
    durations, and with ``drop_syncs`` every blocking sync no longer waits; with
    ``pinned`` the copies from pageable memory run at the pinned rate and their blocking
    calls no longer wait (:func:`pinned_rates`; the measured replay when there is none).

    Raises:
        NotOrdered: a piece could not continue the carried state exactly, or the pieces
            did not replay every GPU activity of the file once (the caller replays the
            file in memory instead).
    """
    from traceparse.nsys.spans import read_span, span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return
    edges = [-chunks.END, *(w[0] for w in wins[1:]), chunks.END]
    rates = pinned_rates(plan) if pinned else None
    state = State()
    for t0, t1 in pairwise(edges):
        tl, _ = read_span(plan, t0, t1)
        yield replay_piece(tl, t0, t1, state, drop_syncs=drop_syncs, rates=rates)
        del tl
    total = sum(b.rows for b in plan.blocks)
    if state.rows != total:
        raise NotOrdered(f"{state.rows:,} GPU activities replayed of {total:,} in the file")


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
                   drop_syncs: bool = False, pinned: bool = False) -> pl.DataFrame | None:
    """:func:`traceparse.analyses.predict.summary_parts` of the replay of ``path``
    (:func:`pieces`), folded piece by piece; None when the export has no GPU activity.

    Raises:
        NotOrdered: as :func:`pieces`.
    """
    acc: list[pl.DataFrame] = []
    for rows in pieces(path, chunk_rows=chunk_rows, drop_syncs=drop_syncs, pinned=pinned):
        rep = rows.with_columns(
            pl.col("host_ns").alias("api_start_ns"),
            (pl.col("pred_end_ns") - pl.col("pred_dur_ns")).alias("pred_start_ns"))
        acc.append(summary_parts(rep))
        if len(acc) >= 8:
            acc = [merge_summary_parts(acc)]
    return merge_summary_parts(acc) if acc else None


#: ``whatif`` changes the chunked replay makes: the savings-engine change of each fix.
CHUNKED_FIXES = {"host-sync": "host_sync", "pinned-memory": "pinned_memory"}


def whatif(path: str, *, fix: str, chunk_rows: int = chunks.BLOCK_ROWS
           ) -> pl.DataFrame | None:
    """``whatif --fix FIX`` (:func:`traceparse.analyses.predict.whatif`) of one nsys
    export, read in pieces: the replay piece by piece (:func:`replay_summary`) and the
    window rows the savings engine's: a host change's capped at the GPU's busy time
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
