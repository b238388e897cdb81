"""Launch-bound gaps (:func:`traceparse.analyses.launches.graph_recoverable`) from
time-ordered pieces of a trace, exactly (pure functions).

A kernel is launch-bound when its launch call began at or after ``prev``, the latest end
of the earlier kernels on its stream (stream order: start, then table order). A piece
holds the launched kernels that *start* in its time window, so every kernel is in one
piece and the kernels of a stream keep their order across pieces. Inside a piece each
kernel knows ``wp``, the latest end of the piece's earlier kernels on its stream; the
earlier pieces add one number per stream, ``C``, their latest end, and
``prev = max(C, wp)``. So:

* a kernel whose call began before ``wp`` is not launch-bound, whatever came before;
* any other kernel (the piece's first on its stream, or one whose call began at or after
  every earlier end in the piece) is **open** until ``C`` is known: its start, call start,
  ``wp`` and whether a graph replayed it are kept (:data:`OPEN`).

The partial of a piece (:class:`LaunchPart`) is one row per stream (kernels, latest end,
the sums of its settled kernels) and the open kernels. Merging a piece after earlier ones
settles the later piece's open kernels of every stream the earlier ones hold, with ``C``
= their latest end; the rest stay open. Merges of neighbours are associative, so pieces
reduce in order here or pairwise on Dask workers. At the end a stream's first open
kernel has no earlier kernel at all (not launch-bound: the memory path's ``first``) and
its other open kernels settle against ``wp``. What stays open is bounded by the piece in
which a stream first appears; a merged prefix of the trace holds no other open kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceparse.analyses.launches import GRAPH_GAP_NS, in_graph

#: The stream key of a launch row, as :func:`graph_recoverable` groups them.
STREAM = ["rank", "device_id", "stream_id"]
#: Per-stream sums (:func:`graph_recoverable`'s columns after the key).
SUMS = ("kernels", "launch_bound_kernels", "launch_bound_gap_ns", "graph_recoverable_ns")
#: Columns of an open kernel besides the stream key: start, call start, ``wp`` (null:
#: first of the stream in its piece) and whether a graph replayed it.
OPEN = ("start_ns", "api_start_ns", "wp", "node")


@dataclass(frozen=True)
class LaunchPart:
    """What pieces contribute to :func:`graph_recoverable`: ``streams`` (one row per
    stream: :data:`STREAM`, :data:`SUMS` of its settled kernels, ``end`` = latest end of
    all its kernels), ``open`` (:data:`OPEN` kernels, still to settle) and ``starts``,
    the first and last kernel start of its pieces (None without a kernel)."""

    streams: pl.DataFrame
    open: pl.DataFrame
    starts: tuple[int, int] | None


def launch_part(rows: pl.DataFrame) -> LaunchPart:
    """The partial of one piece: ``rows`` are its launched kernels (the launch table's
    ``rank, device_id, stream_id, start_ns, end_ns, api_start_ns, api_name, graph_id``)
    in table order."""
    t = rows.select(*STREAM, "start_ns", "end_ns", "api_start_ns",
                    in_graph(rows).alias("node")).with_row_index("_pos")
    t = t.sort([pl.col(c) for c in STREAM] + [pl.col("start_ns"), pl.col("_pos")],
               nulls_last=False, maintain_order=True)
    t = t.with_columns(pl.col("end_ns").cum_max().shift(1).over(STREAM).alias("wp"))
    streams = t.group_by(STREAM, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("kernels"), pl.col("end_ns").max().alias("end"))
    openk = t.filter(pl.col("wp").is_null() | (pl.col("api_start_ns") >= pl.col("wp")))
    zero = [pl.lit(0, pl.Int64).alias(c) for c in SUMS[1:]]
    bounds = t.select(pl.col("start_ns").min().alias("a"), pl.col("start_ns").max().alias("b"))
    a, b = bounds.row(0)
    return LaunchPart(
        streams.with_columns(zero).select(*STREAM, *SUMS, "end"),
        openk.select(*STREAM, *OPEN), None if a is None else (int(a), int(b)))


def _settle(k: pl.DataFrame, prev: pl.Expr, graph_gap_ns: int) -> pl.DataFrame:
    """Per stream, the sums of the launch-bound kernels of ``k`` given each one's
    ``prev`` (a kernel is launch-bound when its call began at or after ``prev``)."""
    gap = (pl.col("start_ns") - pl.col("_prev")).clip(lower_bound=0)
    latency = pl.min_horizontal(gap, (pl.col("start_ns") - pl.col("api_start_ns"))
                                .clip(lower_bound=0))
    rec = pl.when(pl.col("node")).then(0).otherwise(
        (latency - graph_gap_ns).clip(lower_bound=0))
    b = k.with_columns(prev.alias("_prev")).filter(pl.col("api_start_ns") >= pl.col("_prev"))
    return b.group_by(STREAM, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("launch_bound_kernels"),
        gap.sum().cast(pl.Int64).alias("launch_bound_gap_ns"),
        rec.sum().cast(pl.Int64).alias("graph_recoverable_ns"))


def _add(streams: pl.DataFrame, sums: pl.DataFrame) -> pl.DataFrame:
    """``streams`` with ``sums`` (per stream) added to its launch-bound columns."""
    if sums.height == 0:
        return streams
    j = streams.join(sums, on=STREAM, how="left", nulls_equal=True, maintain_order="left",
                     suffix="_add")
    return j.select(*STREAM, "kernels",
                    *((pl.col(c) + pl.col(f"{c}_add").fill_null(0)).alias(c)
                      for c in SUMS[1:]), "end")


def merge_launch_parts(parts: Sequence[LaunchPart], *,
                       graph_gap_ns: int = GRAPH_GAP_NS) -> LaunchPart:
    """The partial of consecutive pieces given in time order (associative)."""
    acc = parts[0]
    for nxt in parts[1:]:
        if acc.starts and nxt.starts and nxt.starts[0] < acc.starts[1]:
            raise AssertionError("launch partials merged out of time order")
        earlier = acc.streams.select(*STREAM, pl.col("end").alias("_c"))
        o = nxt.open.join(earlier, on=STREAM, how="left", nulls_equal=True,
                          maintain_order="left")
        known = pl.col("_c").is_not_null()
        settled = _settle(o.filter(known), pl.max_horizontal("_c", "wp"), graph_gap_ns)
        streams = pl.concat([acc.streams, _add(nxt.streams, settled)])
        streams = streams.group_by(STREAM, maintain_order=True).agg(
            *(pl.col(c).sum() for c in SUMS), pl.col("end").max())
        starts = ((acc.starts[0], nxt.starts[1]) if acc.starts and nxt.starts
                  else acc.starts or nxt.starts)
        acc = LaunchPart(streams, pl.concat([acc.open, o.filter(~known).drop("_c")]), starts)
    return acc


def graph_recoverable_from_part(part: LaunchPart, *, graph_gap_ns: int = GRAPH_GAP_NS
                                ) -> pl.DataFrame:
    """:func:`traceparse.analyses.launches.graph_recoverable`'s frame from the partial of
    every piece, merged in order: what is still open belongs to the piece in which its
    stream first appears, whose first kernel of the stream (``wp`` null) is the stream's
    first in the trace (not launch-bound); the others settle against ``wp``."""
    o = part.open
    settled = _settle(o.filter(pl.col("wp").is_not_null()), pl.col("wp"), graph_gap_ns)
    out = _add(part.streams, settled)
    return (out.sort(STREAM, nulls_last=False, maintain_order=True)
            .select(*STREAM, *(pl.col(c).cast(pl.Int64) for c in SUMS)))


#: The launch distributions of :func:`traceparse.analyses.launches.launch_summary`, in
#: its row order.
METRICS = ("launch_ns", "queue_ns", "kernel_ns", "total_ns")
_QS = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class StatsPart:
    """What pieces contribute to the launch distributions: ``hist`` (exact histograms:
    ``metric`` index into :data:`METRICS`, ``value``, ``n``) of the kernels not replayed
    from a graph, ``short`` (how many of them ran shorter than their launch call) and
    ``graphs`` (per graph launch call ``rank, process_id, api_start_ns``: its duration
    ``launch_ns`` and the ``nodes`` it replayed in the pieces)."""

    hist: pl.DataFrame
    short: int
    graphs: pl.DataFrame


def stats_part(rows: pl.DataFrame) -> StatsPart:
    """The distribution partial of a piece's launched kernels (the launch table's
    ``rank, process_id, start_ns, end_ns, dur_ns, api_start_ns, api_end_ns, api_name,
    graph_id``)."""
    from traceparse.analyses.launches import _METRICS

    rows = rows.rename({"dur_ns": "kernel_ns"})
    g = in_graph(rows)
    t = rows.filter(~g)
    hist = pl.concat([
        t.select(pl.lit(i, pl.Int8).alias("metric"), _METRICS[m].alias("value"))
        .drop_nulls("value").group_by("metric", "value").agg(pl.len().cast(pl.Int64).alias("n"))
        for i, m in enumerate(METRICS)])
    short = int(t.select((pl.col("kernel_ns") < _METRICS["launch_ns"]).sum()).item())
    graphs = (rows.filter(g).group_by("rank", "process_id", "api_start_ns")
              .agg(_METRICS["launch_ns"].first().alias("launch_ns"),
                   pl.len().cast(pl.Int64).alias("nodes")))
    return StatsPart(hist, short, graphs)


def merge_stats_parts(parts: Sequence[StatsPart]) -> StatsPart:
    """The distribution partial of several pieces (in any order)."""
    hist = pl.concat([p.hist for p in parts]).group_by("metric", "value").agg(
        pl.col("n").sum())
    graphs = pl.concat([p.graphs for p in parts]).group_by(
        "rank", "process_id", "api_start_ns").agg(pl.col("launch_ns").first(),
                                                  pl.col("nodes").sum())
    return StatsPart(hist, sum(p.short for p in parts), graphs)


def _quantile(values: np.ndarray, cum: np.ndarray, q: float) -> float:
    """The linear-interpolated quantile ``q`` of the sorted distinct ``values`` with
    cumulative counts ``cum`` (the formula of polars' ``quantile(interpolation="linear")``:
    ``a + (b - a) * f`` at the float rank ``(n - 1) * q``)."""
    n = int(cum[-1])
    rank = (n - 1) * q
    lo = int(rank)
    hi = min(lo + 1, n - 1) if rank > lo else lo
    a = float(values[np.searchsorted(cum, lo, side="right")])
    if hi == lo:
        return a
    b = float(values[np.searchsorted(cum, hi, side="right")])
    return a + (b - a) * (rank - lo)


def launch_summary_from_part(part: StatsPart, *, launch_bound_kernels: int,
                             saving: dict[str, object] | None) -> pl.DataFrame:
    """:func:`traceparse.analyses.launches.launch_summary`'s frame from the partial of
    every piece; ``launch_bound_kernels`` (all ranks, :func:`graph_recoverable_from_part`)
    and ``saving`` (the savings engine's best ``no_launch_overhead`` row, or None) fill
    its ``graph_recoverable_ns`` row."""
    from traceparse.analyses.launches import _dist

    rows = []
    n_kernels = 0
    for i, metric in enumerate(METRICS):
        h = part.hist.filter(pl.col("metric") == i).sort("value")
        values = h["value"].to_numpy()
        counts = h["n"].to_numpy()
        n = int(counts.sum())
        n_kernels = n
        if n == 0:
            rows.append({"metric": metric, "count": 0, "mean": None, "p50": None, "p95": None,
                         "p99": None, "min": None, "max": None, "sum": 0.0})
            continue
        cum = np.cumsum(counts)
        total = int((values.astype(object) * counts.astype(object)).sum())
        rows.append({"metric": metric, "count": n, "mean": float(total) / n,
                     **{f"p{round(q * 100)}": _quantile(values, cum, q) for q in _QS},
                     "min": float(values[0]), "max": float(values[-1]),
                     "sum": float(total)})
    schema = {"metric": pl.String, "count": pl.Int64, "mean": pl.Float64,
              **{f"p{round(q * 100)}": pl.Float64 for q in _QS}, "min": pl.Float64,
              "max": pl.Float64, "sum": pl.Float64}
    out = pl.DataFrame(rows, schema=schema)
    extra = pl.DataFrame({
        "metric": ["kernels_shorter_than_launch", "graph_recoverable_ns"],
        "count": [part.short, launch_bound_kernels],
        "mean": [part.short / n_kernels if n_kernels else None, None],
        "sum": [None, float(saving["saving_ns"]) if saving else 0.0],  # type: ignore[arg-type]
        "rank": [None, saving["rank"] if saving else None],
    }, schema_overrides={"count": pl.Int64, "mean": pl.Float64, "sum": pl.Float64,
                         "rank": pl.Int32})
    if part.graphs.height:
        extra = pl.concat([extra, _dist(part.graphs, "graph_launches", "launch_ns",
                                        count=pl.len(), mean=pl.col("nodes").mean(),
                                        total=pl.col("nodes").sum())],
                          how="diagonal_relaxed")
    return pl.concat([out, extra], how="diagonal_relaxed")
