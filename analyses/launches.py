"""Kernel launch analysis: launch cost, queueing, and what CUDA graphs could recover.

For every kernel joined to its launching API call (:func:`traceparse.links.launch_join`):

* ``launch_ns`` (**A**) = API call duration (``cudaLaunchKernel`` / ``cuLaunchKernel`` /
  ``cudaGraphLaunch`` entry to return);
* ``queue_ns`` = kernel start - API return. Positive: the kernel waited in the stream
  queue after the call returned (the GPU was busy: good). Negative or zero: the kernel was
  already running before the call returned (the GPU was waiting for the host);
* ``kernel_ns`` (**K**) = kernel duration;
* ``total_ns`` (**T**) = max(kernel end, API return) - API entry: from the call until both
  the call and the kernel are done (a short kernel can finish before its launch call
  returns; nsys then counts the call's end, which this reproduces).

:func:`kern_exec_sum` reproduces ``nsys stats -r cuda_kern_exec_sum`` exactly (verified on
the shared nsys exports, see ``tests/test_launches.py``); :func:`launch_summary` gives the
distributions, the share of kernels shorter than their own launch call, and an estimate of
the GPU idle time CUDA graphs could recover (:func:`graph_recoverable`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceparse.analyses._arrays import lex_codes, seg_cummax
from traceparse.analyses._dist import nsys_stats, percentiles, round_half_up
from traceparse.analyses.codes import matches
from traceparse.derived import cached
from traceparse.links import launch_join
from traceparse.timeline import Timeline

#: The float columns of :func:`kern_exec_sum` (printed with one decimal by nsys).
KERN_EXEC_FLOAT_COLS = [f"{p}{n} (ns)" for p in "TAQK" for n in ("Avg", "Med", "StdDev")]

#: Time left between graph nodes when a graph replaces launches (:func:`graph_recoverable`).
GRAPH_GAP_NS = 1000

#: ``nsys stats`` drops a trailing ``_v`` + exactly four digits from API names.
_API_SUFFIX_RE = r"_v\d{4}$"


#: The launch-joined columns :func:`launch_table` reads.
_TABLE_COLS = ("kind", "rank", "process_id", "api_thread_id", "device_id", "stream_id", "name",
               "api_name", "api_start_ns", "api_end_ns", "start_ns", "end_ns", "dur_ns",
               "graph_id")


def launch_table(tl: Timeline, *, unique_calls: bool = True) -> pl.DataFrame:
    """One row per kernel that has a launch call: the launch/queue/kernel decomposition.

    Returns:
        Columns ``rank, process_id, api_thread_id, device_id, stream_id, name, api_name,
        api_start_ns, api_end_ns, start_ns, end_ns, launch_ns, queue_ns, kernel_ns,
        total_ns, graph_id``. Kernels without a matching call are dropped (the nsys report
        does the same: it is an inner join).

    Example:
        API 100..110, kernel 130..150 -> launch 10, queue 20, kernel 20, total 50.
        API 100..110, kernel 105..150 -> launch 10, queue -5, kernel 45, total 50.
        API 100..110, kernel 104..108 -> launch 10, queue -2, kernel 4, total 10.
    """
    return _launch_rows(tl, unique_calls=unique_calls).with_columns(
        pl.col("api_name").cast(pl.String))


def _launch_rows(tl: Timeline, *, unique_calls: bool = True) -> pl.DataFrame:
    """:func:`launch_table` with ``api_name`` still the api table's dictionary codes (the
    analyses that only test it read no per-row string; 10M launches as strings are
    ~0.4 GB)."""
    return _launch_base(tl, unique_calls=unique_calls).select(
        "rank", "process_id", "api_thread_id", "device_id", "stream_id", "name",
        "api_name", "api_start_ns", "api_end_ns", "start_ns", "end_ns",
        *(e.alias(c) for c, e in _METRICS.items()), "graph_id")


#: The launch decomposition of a launch row, as expressions over :func:`_launch_base`'s
#: (or :func:`launch_table`'s) columns.
_METRICS = {
    "launch_ns": pl.col("api_end_ns") - pl.col("api_start_ns"),
    "queue_ns": pl.col("start_ns") - pl.col("api_end_ns"),
    "kernel_ns": pl.col("kernel_ns"),
    "total_ns": pl.max_horizontal("end_ns", "api_end_ns") - pl.col("api_start_ns"),
}


def _launch_base(tl: Timeline, *, unique_calls: bool = True) -> pl.DataFrame:
    """The launch rows' measured columns (``kernel_ns`` = the kernel's ``dur_ns``), without
    the derived launch/queue/total times (:data:`_METRICS`), which a summary computes one at
    a time (three int64 columns are ~0.25 GB at 10M kernels)."""
    if unique_calls:
        # the linked rows of every gpu row cost nothing (the links are computed once); the
        # filter then copies only the columns kept, not every gpu column
        k = launch_join(tl).select(_TABLE_COLS)
    else:
        k = launch_join(tl, kinds=("kernel",), unique_calls=False).select(_TABLE_COLS)
    return (k.filter((pl.col("kind") == "kernel") & pl.col("api_start_ns").is_not_null())
            .drop("kind").rename({"dur_ns": "kernel_ns"}))


def kern_exec_sum(tl: Timeline) -> pl.DataFrame:
    """``nsys stats --report cuda_kern_exec_sum``: launch and execution time per kernel name.

    Groups kernels by (launching process, launching thread, device, API name, kernel name)
    and gives count and Avg/Med/Min/Max/StdDev of four times per kernel:

    * T = max(kernel end, API end) - API start (total), A = API duration,
    * Q = kernel start - API end, **only where positive** (``QCount`` kernels; their
      statistics ignore the others; with ``QCount == 0`` the Q columns are null and
      QStdDev 0.0), K = kernel duration.

    Medians of even counts average the two middle values; StdDev is the sample standard
    deviation (0.0 for one value); floats are rounded half up to 1 decimal as nsys prints
    them. API names lose a ``_vNNNN`` suffix. Sorted by TAvg descending (nsys orders ties
    its own way).

    Example:
        Two kernels ``k`` launched by ``cudaLaunchKernel_v7000`` on pid 1 / tid 2, device 0:
        (API 0..10, kernel 15..25) and (API 30..40, kernel 38..48):
        T = [25 - 0, 48 - 30] = [25, 18] -> TAvg 21.5; A = [10, 10];
        Q = [5, -2] -> QCount 1, QAvg 5.0;
        K = [10, 10]; API Name ``cudaLaunchKernel``.
    """
    t = launch_table(tl, unique_calls=False)
    q = pl.col("queue_ns")
    out = (
        t.with_columns(pl.col("api_name").str.replace(_API_SUFFIX_RE, ""),
                       pl.col("name").cast(pl.String))
        .group_by("process_id", "api_thread_id", "device_id", "api_name", "name")
        .agg(
            pl.len().cast(pl.Int64).alias("Count"),
            (q > 0).sum().cast(pl.Int64).alias("QCount"),
            *nsys_stats("total_ns", "T"),
            *nsys_stats("launch_ns", "A"),
            *nsys_stats(q.filter(q > 0), "Q"),
            *nsys_stats("kernel_ns", "K"),
        )
        .rename({"process_id": "PID", "api_thread_id": "TID", "device_id": "DevId",
                 "api_name": "API Name", "name": "Kernel Name"})
    )
    cols = ["PID", "TID", "DevId", "Count", "QCount"]
    for p in "TAQK":
        cols += [f"{p}{n} (ns)" for n in ("Avg", "Med", "Min", "Max", "StdDev")]
    cols += ["API Name", "Kernel Name"]
    out = out.select(cols).sort(["TAvg (ns)", "Count", "Kernel Name"],
                                descending=[True, True, False])
    return round_half_up(out, KERN_EXEC_FLOAT_COLS)


def in_graph(t: pl.DataFrame) -> pl.Series:
    """Whether each launch row's kernel was replayed from a CUDA/HIP graph: it carries a
    graph id, or its launch call is a graph launch (one call for all the graph's nodes)."""
    return t["graph_id"].is_not_null() | t.select(matches(t["api_name"],
                                                          "GraphLaunch")).to_series()


def graph_recoverable(tl: Timeline, *, graph_gap_ns: int = GRAPH_GAP_NS,
                      table: pl.DataFrame | None = None) -> pl.DataFrame:
    """Launch-bound gaps per (rank, device, stream): a per-stream *upper estimate* of the
    launch latency a graph would remove. Not a saving: streams overlap and it ignores what
    the rank's launch overhead allows; the saving quoted anywhere is the savings engine's
    (:func:`launch_summary` ``graph_recoverable_ns``).

    The estimate (documented in docs/analyses.md): a kernel is **launch-bound** when its
    launch call *began* after the previous kernel on the same stream had ended: the stream
    sat idle because the host had not yet submitted the next kernel. Of the idle gap before
    it (``start - previous end``) only the part from the launch call's start to the kernel's
    start is launch latency (``min(gap, start - api_start)``); host work before the call
    (Python, data loading) is not removed by a graph. Replaying the sequence as a CUDA graph
    submits all kernels at once, leaving about ``graph_gap_ns`` between graph nodes. So
    recoverable = sum over launch-bound kernels **not already launched from a graph** of
    ``max(0, min(gap, start - api_start) - graph_gap_ns)``. It ignores cross-stream
    dependencies, so it is an upper bound on launch latency removed, not a promised
    speed-up.

    Returns:
        Columns ``rank, device_id, stream_id, kernels, launch_bound_kernels,
        launch_bound_gap_ns, graph_recoverable_ns``.

    Example:
        One stream: k1 5..15 (API 0..4), k2 40..50 (API 30..38), k3 50..60 (API 12..20).
        k2: API began at 30 >= 15 (k1 end) -> launch-bound, gap 40 - 15 = 25,
        recoverable 25 - 1 = 24 with graph_gap_ns=1. k3: API began at 12 < 50 -> not
        launch-bound. Totals: launch_bound_kernels 1, gap 25, recoverable 24.

    ``table`` is :func:`launch_table` of ``tl`` when the caller already has it (the
    kernel-to-launch join is the expensive part: ~1 s per 1M kernels).
    """
    grp = ["rank", "device_id", "stream_id"]
    t = _launch_rows(tl) if table is None else table
    keys = t.select(grp)
    # stream order: by (rank, device, stream) with nulls first, then start (ties in table
    # order), one stable sort of the start and one of the stream codes (numpy)
    codes = [(c.is_null().to_numpy(), c.cast(pl.Int64).fill_null(0).to_numpy())
             for c in keys.iter_columns()]
    code = lex_codes(*(k for null, val in codes for k in (~null, val)))
    del codes  # (each temporary is ~80 MB at 10M kernels: dropped once read)
    start = t["start_ns"].to_numpy()
    o = np.argsort(start, kind="stable")
    o = o[np.argsort(code[o], kind="stable")]
    n = o.size
    code = code[o]
    first = np.ones(n, bool)
    first[1:] = code[1:] != code[:-1]
    del code
    st, en, api = start[o], t["end_ns"].to_numpy()[o], t["api_start_ns"].to_numpy()[o]
    # prev_end: the latest end of the stream's earlier kernels
    prev = np.zeros(n, np.int64)
    prev[1:] = seg_cummax(en, first)[:-1]
    del en
    gap = np.clip(st - prev, 0, None)
    bound = ~first & (api >= prev)
    del prev
    node = in_graph(t).to_numpy()[o]
    latency = np.minimum(gap, np.clip(st - api, 0, None))
    del st, api
    rec = np.where(bound & ~node, np.clip(latency - graph_gap_ns, 0, None), 0)
    rf = np.flatnonzero(first)
    sums = [np.add.reduceat(v, rf) if n else np.zeros(0, np.int64)
            for v in (bound.astype(np.int64), np.where(bound, gap, 0), rec)]
    return keys[o[rf]].with_columns(
        pl.Series("kernels", np.diff(np.append(rf, n)), pl.Int64),
        *(pl.Series(c, v, pl.Int64) for c, v in zip(
            ("launch_bound_kernels", "launch_bound_gap_ns", "graph_recoverable_ns"), sums,
            strict=True)))


def launch_summary(tl: Timeline, *, graph_gap_ns: int = GRAPH_GAP_NS,
                   table: pl.DataFrame | None = None,
                   savings: pl.DataFrame | None = None) -> pl.DataFrame:
    """Distributions of launch, queue and kernel time over all launched kernels.

    Returns:
        One row per metric (``launch_ns``, ``queue_ns``, ``kernel_ns``, ``total_ns``) with
        ``count, mean, p50, p95, p99, min, max, sum`` over the kernels launched by a call
        of their own, followed by rows ``metric`` =
        ``kernels_shorter_than_launch`` (``count`` = those kernels whose duration is below
        their own launch call's duration, ``mean`` = that share in 0..1),
        ``graph_launches`` (kernels replayed from a CUDA/HIP graph, whose one launch call
        serves all the graph's nodes, so its duration is no node's launch cost: ``count`` =
        graph launch calls, ``sum`` = kernels they replayed, ``mean`` = kernels per launch,
        ``p50 .. max`` = the calls' durations; absent without graph launches) and
        ``graph_recoverable_ns``: ``sum`` = what CUDA/HIP graphs could save on the rank
        where they save most, from the savings engine
        (:func:`traceparse.analyses.savings.savings`, change ``no_launch_overhead``: the
        number ``whatif --fix cuda-graphs`` prints; never more than that rank's non-busy
        time), ``rank`` = that rank, ``count`` = :func:`graph_recoverable`'s
        launch-bound kernels (all ranks).

    Example:
        Kernels with (launch, kernel) = (10, 5), (10, 20): one kernel of two is shorter
        than its launch -> count 1, mean 0.5.

    ``table``: a precomputed :func:`launch_table` of ``tl`` (see :func:`graph_recoverable`);
    ``savings``: a precomputed :func:`traceparse.analyses.savings.savings` of ``tl``. With
    the default ``graph_gap_ns`` the result is computed once per timeline
    (:func:`traceparse.derived.cached`): the summary's launches section and the report's
    launch section share it.
    """
    if graph_gap_ns == GRAPH_GAP_NS:
        return cached(tl, "launch_summary", ("gpu", "api", "ranges"),
                      lambda: _launch_summary(tl, graph_gap_ns, table, savings))
    return _launch_summary(tl, graph_gap_ns, table, savings)


def _launch_summary(tl: Timeline, graph_gap_ns: int, table: pl.DataFrame | None,
                    savings: pl.DataFrame | None) -> pl.DataFrame:
    from traceparse.analyses import savings as savings_mod

    # the savings' what-if replays first: their peak then does not hold the launch rows
    # (~1 GB at 10M kernels) as well
    sv = savings_mod.savings(tl) if savings is None else savings
    t_all = _launch_base(tl) if table is None else table
    g = in_graph(t_all)
    t = t_all.filter(~g)
    # each time computed, summarised and dropped in turn (never all four at once)
    out = pl.concat([_dist(t.select(e.alias(c)), c, c) for c, e in _METRICS.items()],
                    how="vertical_relaxed")
    n = t.height
    short = int(t.select((pl.col("kernel_ns") < _METRICS["launch_ns"]).sum()).item())
    rec = graph_recoverable(tl, graph_gap_ns=graph_gap_ns, table=t_all)
    top = savings_mod.best(sv, "no_launch_overhead")
    extra = pl.DataFrame({
        "metric": ["kernels_shorter_than_launch", "graph_recoverable_ns"],
        "count": [short, int(rec["launch_bound_kernels"].sum())],
        "mean": [short / n if n else None, None],
        "sum": [None, float(top["saving_ns"]) if top else 0.0],
        "rank": [None, top["rank"] if top else None],
    }, schema_overrides={"count": pl.Int64, "mean": pl.Float64, "sum": pl.Float64,
                         "rank": pl.Int32})
    graphs = (t_all.filter(g).group_by("rank", "process_id", "api_start_ns")
              .agg(_METRICS["launch_ns"].first().alias("launch_ns"), pl.len().alias("_nodes")))
    if graphs.height:  # per call: count the calls, mean/sum their nodes
        extra = pl.concat([extra, _dist(graphs, "graph_launches", "launch_ns", count=pl.len(),
                                        mean=pl.col("_nodes").mean(),
                                        total=pl.col("_nodes").sum())],
                          how="diagonal_relaxed")
    return pl.concat([out, extra], how="diagonal_relaxed")


def _dist(frame: pl.DataFrame, metric: str, c: str, *, count: pl.Expr | None = None,
          mean: pl.Expr | None = None, total: pl.Expr | None = None) -> pl.DataFrame:
    """One :func:`launch_summary` row: ``metric``, ``count``/``mean``/``sum`` (of ``c``
    unless given) and the percentiles, min and max of ``c``."""
    return frame.select(
        pl.lit(metric).alias("metric"),
        (pl.col(c).count() if count is None else count).cast(pl.Int64).alias("count"),
        (pl.col(c).mean() if mean is None else mean).alias("mean"), *percentiles(c),
        pl.col(c).min().cast(pl.Float64).alias("min"),
        pl.col(c).max().cast(pl.Float64).alias("max"),
        (pl.col(c).sum() if total is None else total).cast(pl.Float64).alias("sum"))
