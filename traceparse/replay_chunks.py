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

from itertools import pairwise

import polars as pl

from traceparse.analyses.predict import merge_summary_parts, summary_parts
from traceparse.analyses.replay_pieces import NotOrdered, State, replay_piece
from traceparse.nsys import chunks

__all__ = ["NotOrdered", "replay_summary"]


def replay_summary(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS,
                   drop_syncs: bool = False) -> pl.DataFrame | None:
    """:func:`traceparse.analyses.predict.summary_parts` of the replay of ``path``
    (measured durations; ``drop_syncs``: every blocking sync no longer waits), computed
    piece by piece; None when the export has no GPU activity.

    Raises:
        NotOrdered: a piece could not continue the carried state exactly (the caller
            replays the file in memory instead).
    """
    from traceparse.nsys.spans import read_span, span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return None
    edges = [-chunks.END, *(w[0] for w in wins[1:]), chunks.END]
    state = State()
    acc: list[pl.DataFrame] = []
    for t0, t1 in pairwise(edges):
        tl, _ = read_span(plan, t0, t1)
        rows = replay_piece(tl, t0, t1, state, drop_syncs=drop_syncs)
        del tl
        rep = rows.with_columns(
            pl.col("host_ns").alias("api_start_ns"),
            (pl.col("pred_end_ns") - pl.col("dur_ns")).alias("pred_start_ns"),
            pl.col("dur_ns").alias("pred_dur_ns"))
        acc.append(summary_parts(rep))
        if len(acc) >= 8:
            acc = [merge_summary_parts(acc)]
    total = sum(b.rows for b in plan.blocks)
    if state.rows != total:
        raise NotOrdered(f"{state.rows:,} GPU activities replayed of {total:,} in the file")
    return merge_summary_parts(acc)
