"""CUDA/HIP graphs as analysis-level facts, for nsys and Kineto alike.

* **Graph launch**: a host API call whose name contains ``GraphLaunch`` (``cudaGraphLaunch``,
  ``hipGraphLaunch``). The GPU work it started shares its correlation id (one call, many
  kernels), so :func:`graph_launches` attributes those kernels to the launch: count, kernel
  time, GPU span. nsys graph-level tracing records a ``graph`` activity instead of kernels.
* **Stream capture**: between ``*StreamBeginCapture`` and ``*StreamEndCapture`` on one
  thread, launch calls are recorded into a graph, not executed: their correlation ids have
  no GPU work. :func:`captures` counts them.
* :func:`graph_notes` turns these into sentences for ``summary`` and ``report``, including
  the warning when graphs ran without their kernels being recorded.
"""

from __future__ import annotations

import polars as pl

from traceparse import units
from traceparse.analyses.codes import matches
from traceparse.timeline import Timeline

#: Runtime calls that launch a CUDA graph (``cudaGraphLaunch``, ``cuGraphLaunch``, ...).
LAUNCH_API_RE = r"(?i)graphlaunch"
_BEGIN = r"(?i)streambegincapture"
_END = r"(?i)streamendcapture"
#: Either capture call (begin or end): what a file must hold to have capture windows.
CAPTURE_API_RE = r"(?i)stream(begin|end)capture"
#: Host calls that enqueue GPU work (captured into a graph inside a capture window).
_ENQUEUE = r"(?i)(launchkernel|launchcooperativekernel|culaunch|memcpy|memset|extlaunch)"


def _gpu_by_corr(tl: Timeline) -> pl.DataFrame:
    g = tl.gpu.filter(pl.col("correlation_id").is_not_null()
                      & (pl.col("kind") != "sync"))
    return g.group_by("rank", "correlation_id").agg(
        kernels=(pl.col("kind") == "kernel").sum(),
        graph_records=(pl.col("kind") == "graph").sum(),
        activities=pl.len(),
        kernel_ns=pl.col("dur_ns").filter(pl.col("kind") == "kernel").sum(),
        graph_ns=pl.col("dur_ns").filter(pl.col("kind") == "graph").sum(),
        gpu_start_ns=pl.col("start_ns").min(), gpu_end_ns=pl.col("end_ns").max(),
        graph_ids=pl.col("graph_id").drop_nulls().unique().sort(),
    )


def graph_launches(tl: Timeline) -> pl.DataFrame:
    """One row per graph launch call with the GPU work attributed to it.

    Returns ``rank, process_id, thread_id, name, start_ns, end_ns, correlation_id, kernels,
    graph_records, activities, kernel_ns, graph_ns, gpu_start_ns, gpu_end_ns, graph_ids``
    (zeros / nulls where the trace holds no GPU work for the launch).
    """
    a = tl.api.filter(matches(tl.api["name"], LAUNCH_API_RE))  # the regex on distinct names
    if a.height == 0:
        return pl.DataFrame()
    a = a.select("rank", "process_id", "thread_id", pl.col("name").cast(pl.String),
                 "start_ns", "end_ns", "correlation_id")
    out = a.join(_gpu_by_corr(tl), on=["rank", "correlation_id"], how="left")
    return out.with_columns(pl.col("kernels", "graph_records", "activities", "kernel_ns",
                                   "graph_ns").fill_null(0)).sort("rank", "start_ns")


def captures(tl: Timeline) -> pl.DataFrame:
    """Stream-capture windows and the launches recorded in them.

    Returns ``rank, process_id, thread_id, begin_ns, end_ns, captured_launches,
    executed_launches`` (the process and thread of the begin call)
    (``executed`` = captured launches whose correlation id has GPU work in the trace; 0
    is the expected value: captured work runs later, through a graph launch).
    """
    names = tl.api["name"]
    if not tl.api.select(matches(names, _BEGIN).any()).item():
        return pl.DataFrame()
    # only the calls the rules below read become strings (the regexes run on the distinct
    # names): begins, ends and enqueueing calls, not a String copy of every call
    api = tl.api.filter(matches(names, _BEGIN) | matches(names, _END)
                        | matches(names, _ENQUEUE)).with_columns(pl.col("name").cast(pl.String))
    begins = api.filter(pl.col("name").str.contains(_BEGIN))
    ends = api.filter(pl.col("name").str.contains(_END))
    rows = []
    work = set(tl.gpu.filter(pl.col("correlation_id").is_not_null())
               .select("rank", "correlation_id").unique().iter_rows())
    for b in begins.sort("start_ns").iter_rows(named=True):
        same = (pl.col("rank") == b["rank"]) & (
            pl.col("thread_id").is_null() | (pl.col("thread_id") == b["thread_id"])
            if b["thread_id"] is not None else pl.lit(True))
        e = ends.filter(same & (pl.col("start_ns") >= b["end_ns"])).sort("start_ns").head(1)
        stop = int(e["end_ns"][0]) if e.height else None
        inside = api.filter(same & pl.col("name").str.contains(_ENQUEUE)
                            & ~pl.col("name").str.contains(LAUNCH_API_RE)
                            & (pl.col("start_ns") >= b["end_ns"]))
        if stop is not None:
            inside = inside.filter(pl.col("end_ns") <= stop)
        executed = sum(1 for c in inside["correlation_id"].to_list()
                       if (b["rank"], c) in work)
        rows.append({"rank": b["rank"], "process_id": b["process_id"],
                     "thread_id": b["thread_id"],
                     "begin_ns": b["start_ns"], "end_ns": stop,
                     "captured_launches": inside.height, "executed_launches": executed})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "process_id": pl.Int64,
                                      "thread_id": pl.Int64,
                                      "begin_ns": pl.Int64, "end_ns": pl.Int64,
                                      "captured_launches": pl.Int64,
                                      "executed_launches": pl.Int64})


def graph_notes(tl: Timeline) -> list[str]:
    """Sentences stating what the trace's graph launches, graph-level records and stream
    captures mean for attribution (empty when the trace has none)."""
    notes: list[str] = []
    gl = graph_launches(tl)
    # summed on the gpu columns (tl.kernels is a filtered copy of every gpu column)
    kern_total = int(tl.gpu.select(pl.col("dur_ns").filter(pl.col("kind") == "kernel")
                                   .sum()).item() or 0)
    if gl.height:
        with_k = gl.filter(pl.col("kernels") > 0)
        if with_k.height:
            nk = int(with_k["kernels"].sum())
            kns = int(with_k["kernel_ns"].sum())
            share = f" ({100.0 * kns / kern_total:.1f}% of kernel time)" if kern_total else ""
            notes.append(
                f"{units.plural(with_k.height, 'graph launch')} ran "
                f"{units.plural(nk, 'kernel')}{share}; they share the launch call's "
                "correlation id, so their time is attributed to that "
                f"{with_k['name'][0]} call, not to per-kernel launches.")
        empty = gl.filter(pl.col("activities") == 0)
        if empty.height:
            notes.append(
                f"{units.plural(empty.height, 'graph launch')} have no GPU work recorded in "
                "this trace (graph traced without its kernels, or outside the capture "
                "window): their GPU time is missing, so busy time is understated and idle "
                "time overstated.")
    graphs = tl.gpu.filter(pl.col("kind") == "graph")
    if graphs.height:
        in_graph_kernels = int(tl.gpu.select(
            (pl.col("kind") == "kernel") & (pl.col("graph_id").is_not_null()
                                            | pl.col("graph_node_id").is_not_null()))
            .to_series().sum())
        ms = int(graphs["dur_ns"].sum()) / 1e6
        if in_graph_kernels == 0:
            notes.append(
                f"This trace records {units.plural(graphs.height, 'CUDA graph execution')} "
                f"({ms:.3f} ms of GPU time) at graph level, without their kernels (nsys "
                "--cuda-graph-trace=graph): that time is counted as busy 'compute', but it "
                "cannot be split into kernels, categories or roofline points. Capture with "
                "--cuda-graph-trace=node to see them.")
        else:
            notes.append(f"{units.plural(graphs.height, 'CUDA graph execution')} recorded at "
                         f"graph level ({ms:.3f} ms) beside {in_graph_kernels} graph kernels.")
    cap = captures(tl)
    if cap.height:
        n = int(cap["captured_launches"].sum())
        ran = int(cap["executed_launches"].sum())
        notes.append(
            f"{units.plural(cap.height, 'stream capture')} recorded "
            f"{units.plural(n, 'launch call')} into a graph; "
            f"{n - ran} of them have no GPU work here by design (captured work runs later "
            "through a graph launch): they are not launch overhead of this window.")
    return notes
