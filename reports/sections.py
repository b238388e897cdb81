"""Payload sections backed by the analyses package (attribution, gaps, launches, comm,
steps, summary, roofline) and the small evidence aggregates the recommendations need.

Each ``_section`` function calls one analysis function and converts its frame into a
``{"note": ..., "table": {"columns": [...], "rows": [...]}, ...}`` dict; ``columns`` name
the row keys and how to print them (``ms``, ``us``, ``pct``, ``int``, ``num``, ``bytes``,
``text``). A section is only built when its analysis module is part of this build.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl

from traceparse import units
from traceparse.analyses import comm as comm_mod
from traceparse.analyses import launches as launches_mod
from traceparse.analyses import steps as steps_mod
from traceparse.analyses import summary as summary_mod
from traceparse.analyses._dist import MIN_EFFECT_PCT
from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.streamwait import NO_PRODUCER
from traceparse.reports.options import rows
from traceparse.timeline import Timeline
from traceparse.vendor import speak_vendor

#: Attribution parts in priority order (without the ``_ns`` suffix).
ATTR_PARTS = ("compute", "memory", "communication", "launch_overhead", "warmup", "host_sync",
              "idle")

if TYPE_CHECKING:
    from traceparse.reports.options import ReportOptions

#: Kernels shorter than this (ns) count as "tiny" for the fusion recommendation.
TINY_KERNEL_NS = 10_000
#: Kernel names that denote memory-bound elementwise / reduction / copy work (PyTorch ATen,
#: Triton, nvFuser naming). Without Nsight Compute data this name rule is what decides
#: "memory-bound" for the fusion recommendation.
MEMORY_BOUND_RE = (r"(?i)elementwise|pointwise|vectorized|unrolled|reduce|reduction|copy|"
                   r"fill|memset|cat_|catarray|index|gather|scatter|norm|softmax|dropout|"
                   r"triton_poi|triton_red|transpose|permute|cast|convert")


def col(key: str, label: str, fmt: str = "text") -> dict[str, str]:
    """One column spec of a display table."""
    return {"key": key, "label": label, "fmt": fmt}


def attribution_section(frame: pl.DataFrame) -> dict[str, Any]:
    """Attribution section from the summary's (checked) breakdown frame."""
    frame = frame.sort("rank", "device_id")
    data = rows(frame)
    for r in data:
        r["label"] = f"rank {r['rank']} GPU {r['device_id']}"
        w = r["window_ns"] or 0
        for part in ATTR_PARTS:
            r[f"{part}_pct"] = 100.0 * r[f"{part}_ns"] / w if w else None
    parts = (*(f"{p}_ns" for p in ATTR_PARTS), "window_ns", "overlapped_comm_ns")
    totals = {p: int(frame[p].sum()) if frame.height else 0 for p in parts}
    columns = [col("label", "rank / device"), col("window_ns", "window (ms)", "ms")]
    for part in ATTR_PARTS:
        columns += [col(f"{part}_ns", f"{part.replace('_', ' ')} (ms)", "ms"),
                    col(f"{part}_pct", "%", "pct")]
    columns += [col("overlapped_comm_ns", "comm hidden under compute (ms)", "ms"),
                col("comm_overlap_pct", "comm overlap", "pct")]
    return {
        "rows": data,
        "totals": totals,
        "table": {"columns": columns, "rows": data},
        "note": ("Each device's window (first to last GPU activity) split so the parts sum to "
                 "the window exactly. Priority where streams overlap: compute > "
                 "communication > memory > launch overhead > warm-up > host sync > idle. Launch "
                 "overhead is the host issuing work; warm-up is module loading, compiling and "
                 "graph capture; host sync is the host blocked in a call that waits. "
                 "Communication is the "
                 "exposed part; communication hidden under compute is counted as compute."),
    }


def tiny_memory_kernels(tl: Timeline, *, max_ns: int = TINY_KERNEL_NS,
                        top: int = 5) -> dict[str, Any]:
    """Evidence for fusion: compute kernels shorter than ``max_ns`` whose name matches
    :data:`MEMORY_BOUND_RE` (elementwise, reduction, copy, normalisation ...).

    Returns count, total_ns, and the ``top`` names by count (name, count, total_ns).
    """
    # the columns read selected before the filter (tl.kernels copies every gpu column)
    k = tl.gpu.select("kind", "category", "rank", "name", "dur_ns").filter(
        (pl.col("kind") == "kernel") & (pl.col("category") == "compute")
        & (pl.col("dur_ns") < max_ns))
    # the name pattern on the distinct names (hundreds), not on every kernel (millions)
    names = k.select(pl.col("name").cast(pl.String).unique())["name"]
    hits = names.filter(names.str.contains(MEMORY_BOUND_RE))
    k = k.filter(pl.col("name").cast(pl.String).is_in(hits.implode()))
    by = (k.group_by(pl.col("name").cast(pl.String))
          .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
          .sort(["count", "total_ns", "name"], descending=[True, True, False]).head(top))
    per = (k.group_by("rank").agg(pl.len().alias("count"),
                                  pl.col("dur_ns").sum().alias("total_ns"))
           .sort(["total_ns", "rank"], descending=[True, False]))
    return {"max_ns": max_ns, "count": k.height,
            "total_ns": int(k["dur_ns"].sum()) if k.height else 0, "top": rows(by),
            "by_rank": rows(per)}


def pageable_copies(tl: Timeline) -> dict[str, Any]:
    """Evidence for pinned memory: host<->device memcpys from or to pageable memory, and
    the bandwidth pinned copies of the same trace reached (if any)."""
    m = tl.gpu.filter((pl.col("kind").cast(pl.String) == "memcpy")
                      & pl.col("copy_kind").cast(pl.String).is_in(["HtoD", "DtoH"]))
    host_kind = pl.when(pl.col("copy_kind").cast(pl.String) == "HtoD") \
        .then(pl.col("src_kind").cast(pl.String)).otherwise(pl.col("dst_kind").cast(pl.String))
    m = m.with_columns(host_kind.alias("_host"))
    pageable = m.filter(pl.col("_host") == "Pageable")
    pinned = m.filter((pl.col("_host") == "Pinned") & (pl.col("dur_ns") > 0))

    def agg(f: pl.DataFrame) -> dict[str, Any]:
        b = int(f["bytes"].sum()) if f.height else 0
        t = int(f["dur_ns"].sum()) if f.height else 0
        return {"count": f.height, "bytes": b, "total_ns": t,
                "gbps": (b / t) if t else None}  # bytes/ns == GB/s

    per = [{"rank": int(r), **agg(pageable.filter(pl.col("rank") == r))}
           for r in sorted(pageable["rank"].unique().to_list())]
    per.sort(key=lambda d: (-d["total_ns"], d["rank"]))
    return {"pageable": agg(pageable), "pinned": agg(pinned), "pageable_by_rank": per}


def gaps_section(tl: Timeline, opts: ReportOptions, frame: pl.DataFrame,
                 sync_ops: pl.DataFrame | None = None) -> dict[str, Any]:
    """The gaps section from ``frame`` (:func:`traceparse.analyses.gaps.idle_gaps`, computed
    once); ``sync_ops``: :func:`~traceparse.analyses.host_sync.host_sync_by_op` of the
    trace when the caller has it (the chunked report), else of ``tl``."""
    by_cause = (frame.group_by("cause").agg(pl.len().alias("count"),
                                            pl.col("dur_ns").sum().alias("total_ns"),
                                            pl.col("idle_ns").sum().alias("idle_ns"),
                                            pl.col("launch_overhead_ns").sum()
                                            .alias("launch_overhead_ns"),
                                            pl.col("warmup_ns").sum().alias("warmup_ns"),
                                            pl.col("host_sync_ns").sum().alias("host_sync_ns"))
                .sort(["total_ns", "cause"], descending=[True, False]))
    listed = frame.head(opts.max_gaps)
    t0 = tl.gpu["start_ns"].min() if tl.gpu.height else 0
    data = rows(listed.with_columns((pl.col("start_ns") - t0).alias("at_ns")))
    for r in data:
        r["label"] = f"rank {r['rank']} GPU {r['device_id']}"
    # durations auto-scaled per cell (ns, µs, ms, s), sorted by their ns value
    columns = [col("label", "rank / device"), col("at_ns", "at (ms from first activity)", "ms"),
               col("dur_ns", "gap", "dur"), col("idle_ns", "idle", "dur"),
               col("launch_overhead_ns", "launch overhead", "dur"),
               col("warmup_ns", "warm-up", "dur"), col("host_sync_ns", "host sync", "dur"),
               col("kind", "kind"),
               col("cause", "cause"), col("cause_name", "host call / range"),
               col("cause_thread_id", "thread", "id"), col("cause_detail", "detail")]
    more = frame.height - listed.height
    from traceparse.analyses.host_sync import host_sync_by_op

    # a fix's evidence quotes its own rank's largest gaps of a cause, which the table's
    # largest overall may not hold (a 2-GPU trace's top 50 can all be one rank's)
    keep = ["rank", "device_id", "dur_ns", "cause", "cause_name", "cause_thread_id",
            "cause_detail"]
    per_rank = frame.select(keep).group_by("rank", "cause", maintain_order=True).head(3)
    return {
        "count": frame.height,
        "evidence_rows": rows(per_rank),
        "sync_ops": rows(host_sync_by_op(tl) if sync_ops is None else sync_ops),
        "total_ns": int(frame["dur_ns"].sum()) if frame.height else 0,
        "min_ns": opts.gap_min_ns,
        "by_cause": rows(by_cause),
        # stream waits on an event whose producer the trace does not hold: the GPU most
        # likely ran that work (summary.UNRECORDED_PRODUCER), so no fix may count them
        "stream_wait_unrecorded_ns": int(frame.filter(
            (pl.col("cause") == "stream_wait")
            & pl.col("cause_name").cast(pl.String).str.contains(NO_PRODUCER, literal=True))
            ["dur_ns"].sum()) if frame.height else 0,
        "table": {"columns": columns, "rows": data},
        "cause_table": {"columns": [col("cause", "cause"), col("count", "gaps", "int"),
                                    col("total_ns", "total (ms)", "ms"),
                                    col("idle_ns", "idle (ms)", "ms"),
                                    col("launch_overhead_ns", "launch overhead (ms)", "ms"),
                                    col("warmup_ns", "warm-up (ms)", "ms"),
                                    col("host_sync_ns", "host sync (ms)", "ms")],
                        "rows": rows(by_cause)},
        "note": (f"{frame.height:,} stretches of at least {opts.gap_min_ns / 1e3:g} µs where "
                 "a device ran nothing, longest first"
                 + (f" (the {listed.height} longest shown; {more:,} more)" if more else "")
                 + ". Cause: the host activity covering at least half of the gap, innermost "
                 "first: host_sync (a call that waits), warmup (module load, compile, lazy "
                 "first launch), cuda_api (another CUDA call), os_wait (a launching thread in "
                 "an OS wait), cpu_work (a host range), cpu_busy (CPU samples); profiler (the "
                 "profiler's buffer flush) wins over all; unknown when nothing covers it."),
    }


def auto_columns(frame: pl.DataFrame, labels: dict[str, str] | None = None
                 ) -> list[dict[str, str]]:
    """Column specs for ``frame`` from names and dtypes: ``*_ns`` -> µs, ``*_pct`` -> %,
    ``*bytes`` -> bytes, integers -> int, floats -> num, the rest text."""
    labels = labels or {}
    out = []
    for name, dtype in frame.schema.items():
        if name.endswith("_ns"):
            fmt, label = "us", name[:-3].replace("_", " ") + " (µs)"
        elif name.endswith("_pct"):
            fmt, label = "pct", name[:-4].replace("_", " ") + " %"
        elif name.endswith("bytes"):
            fmt, label = "bytes", name.replace("_", " ")
        elif dtype == pl.Boolean:
            fmt, label = "bool", name.replace("_", " ")
        elif dtype.is_integer():
            fmt, label = "int", name.replace("_", " ")
        elif dtype.is_float():
            fmt, label = "num", name.replace("_", " ")
        else:
            fmt, label = "text", name.replace("_", " ")
        out.append(col(name, labels.get(name, label), fmt))
    return out


def _summary(tl: Timeline, opts: ReportOptions, gaps: pl.DataFrame
             ) -> tuple[dict[str, Any], pl.DataFrame]:
    """``traceparse summary``'s result (verdict and shared sections) and its breakdown; the
    summary's own gap list is ``gaps`` (already computed), so nothing is computed twice."""
    res = summary_mod.summarize(tl, top=opts.top_n, min_gap_ns=opts.gap_min_ns, gaps=gaps,
                                sections=("window", "breakdown", "top_kernels", "top_gaps",
                                          "savings", "stragglers"))
    secs = res["sections"]
    from traceparse.roofline.ncu_summary import summarize_ncu

    ncu: dict[str, Any] = {}
    if tl.ncu_only():  # an ncu page alone: `traceparse summary`'s verdict is the page's own
        page = summarize_ncu(tl, top=opts.top_n)
        res["verdict"] = page["verdict"]
        ncu = {"ncu_page": {**rows(page["sections"]["ncu_window"])[0],
                            "placed": page["placed"]}}
    out = {"verdict": res["verdict"], "untraced_gpu_work": res.get("untraced_gpu_work"),
           "window": rows(secs["window"])[0] if secs["window"].height else {},
           "top_kernels": rows(secs["top_kernels"]),
           "savings": rows(secs["savings"]), "stragglers": rows(secs["stragglers"]), **ncu}
    return out, secs["breakdown"]


def _launches(tl: Timeline, savings: pl.DataFrame | None = None) -> dict[str, Any] | None:
    import numpy as np

    table: pl.DataFrame = launches_mod.launch_table(tl)
    summ: pl.DataFrame = launches_mod.launch_summary(tl, table=table,  # one launch join
                                                     savings=savings)
    own = table.filter(~launches_mod.in_graph(table))
    lat = (own["start_ns"] - own["api_start_ns"]).to_numpy() if own.height else \
        np.array([], dtype=np.int64)
    return launches_section(tl, summ, table.height, own.height, latency_histogram(lat),
                            _unprofiled_graphs(tl))


def latency_histogram(lat: Any, weights: Any = None) -> dict[str, Any]:
    """The launches section's histogram of call entry to kernel start (ns values ``lat``,
    a numpy array; ``weights``: how many kernels each value stands for, None: one each, as
    the chunked report gives distinct values with their counts)."""
    import numpy as np

    pos = lat[lat > 0]
    if not pos.size:
        return {"edges_us": [], "counts": [], "log": True}
    lo, hi = max(float(pos.min()), 100.0), max(float(pos.max()), 101.0)
    edges = np.geomspace(lo, hi * 1.0001, 41) if hi > lo * 1.5 else \
        np.linspace(lo * 0.9, hi * 1.1, 21)
    w = None if weights is None else weights[lat > 0]
    counts, _ = np.histogram(np.clip(pos, edges[0], edges[-1]), bins=edges, weights=w)
    return {"edges_us": [float(e) / 1e3 for e in edges],
            "counts": [int(c) for c in counts], "log": bool(hi > lo * 1.5),
            "non_positive": int((lat <= 0).sum() if weights is None
                                else weights[lat <= 0].sum())}


def launches_section(tl: Timeline, summ: pl.DataFrame, linked: int, own: int,
                     hist: dict[str, Any], unprofiled: str) -> dict[str, Any]:
    """The launches section from :func:`traceparse.analyses.launches.launch_summary`'s
    frame ``summ``, the ``linked`` kernels (``own`` of them not replayed from a graph), the
    latency histogram and the CUDA-graph saving's profiler-free clause; ``tl`` only says
    whose words (NVIDIA's or AMD's) the note uses."""
    metrics = summ.filter(pl.col("metric").str.ends_with("_ns")
                          & (pl.col("metric") != "graph_recoverable_ns"))
    extra = {r["metric"]: r for r in rows(summ.filter(~pl.col("metric").is_in(
        metrics["metric"].to_list())))}
    spec = [col("metric", "metric"), col("count", "kernels", "int"),
            col("mean", "mean (µs)", "us"), col("p50", "P50 (µs)", "us"),
            col("p95", "P95 (µs)", "us"), col("p99", "P99 (µs)", "us"),
            col("min", "min (µs)", "us"), col("max", "max (µs)", "us")]
    rec = extra.get("graph_recoverable_ns", {})
    short = extra.get("kernels_shorter_than_launch", {})
    graphs = extra.get("graph_launches", {})
    graph_kernels = int(graphs.get("sum") or 0)
    graph_note = (f" {graph_kernels:,} kernels were replayed from "
                  f"{units.plural(int(graphs['count']), 'graph launch', 'graph launches')} "
                  f"(call P50 {units.duration(int(graphs['p50']))}, one call for all of a "
                  "graph's nodes): they are left out of the statistics and the histogram."
                  if graph_kernels else "")
    return {
        "linked": linked,
        "graph_kernels": graph_kernels,
        "histogram": hist,
        "graph_recoverable_ns": int(rec.get("sum") or 0),
        "graph_recoverable_rank": rec.get("rank"),
        "launch_bound_kernels": int(rec.get("count") or 0),
        "kernels_shorter_than_launch": int(short.get("count") or 0),
        "table": {"columns": spec, "rows": _metric_names(rows(metrics))},
        "note": speak_vendor(
                (f"{own:,} kernels linked to their own launch "
                 f"call.{graph_note} launch = API call "
                 "duration; queue = kernel start - call return (negative: the GPU was waiting "
                 "for the host); histogram: call entry to kernel start. "
                 f"{int(short.get('count') or 0):,} kernels ran shorter than their own launch "
                 f"call; CUDA graphs could save {units.duration(int(rec.get('sum') or 0))}"
                 + (f" on rank {rec['rank']}" if rec.get("rank") is not None else "")
                 + " (the replay of whatif --fix cuda-graphs, at most that rank's time with "
                 f"the GPU not busy{unprofiled}); "
                 f"{units.plural(int(rec.get('count') or 0), 'launch-bound kernel')}."), tl),
    }


def _unprofiled_graphs(tl: Timeline) -> str:
    """``; without the profiler X of Y``: the CUDA-graph saving's profiler-free figure
    (the savings engine's row, as the fix and ``summary`` quote it), else ""."""
    from traceparse.analyses.savings import best, savings
    from traceparse.reports.rec_base import unprofiled_clause

    top = best(savings(tl), "no_launch_overhead")
    return unprofiled_clause(top) if top else ""


def _metric_names(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Statistics rows named for a reader: ``queue_ns`` -> ``queue``, ``gpu_busy_ns`` ->
    ``gpu busy`` (the column headers carry the unit)."""
    for r in data:
        m = str(r.get("metric", ""))
        r["metric"] = (m[:-3] if m.endswith("_ns") else m).replace("_", " ")
    return data


def comm_section(tl: Timeline) -> dict[str, Any] | None:
    """The communication section of the timeline ``tl`` (:func:`comm_section_of` of its
    collectives' frames)."""
    summ: pl.DataFrame = comm_mod.comm_summary(tl)
    if not summ.height:
        return comm_section_of(summ, summ, summ, 0, comm_mod.concurrency(tl))
    return comm_section_of(summ, comm_mod.straggler_summary(tl), comm_mod.collective_skew(tl),
                           tl.gpu["start_ns"].min() if tl.gpu.height else 0,
                           comm_mod.concurrency(tl))


def comm_section_of(summ: pl.DataFrame, strag: pl.DataFrame, skew: pl.DataFrame, t0: Any,
                    conc: dict[str, int]) -> dict[str, Any]:
    """The payload's ``comm`` section from the collectives' summary, stragglers, skew
    (read only when ``summ`` has rows), the first GPU start ``t0`` and the concurrency
    (:mod:`traceparse.analyses.comm`); the chunked payload passes the frames it read in
    pieces (:mod:`traceparse.comm_chunks`)."""
    tables = []
    if summ.height:
        tables.append({"title": "Per collective", "columns": auto_columns(
            summ, {"algbw_gbps": "algbw (GB/s)", "busbw_gbps": "busbw (GB/s)"}),
            "rows": rows(summ)})
        if strag.height:
            tables.append({"title": "Stragglers (rank that started collectives last)",
                           "columns": auto_columns(strag), "rows": rows(strag)})
        if skew.height:
            worst = skew.sort(["skew_ns", "seq"], descending=[True, False]).head(20)
            # start times from the first GPU activity, like the gap table (not trace-clock
            # epochs: Kineto's are microseconds since 1970)
            worst = worst.with_columns(pl.col("first_start_ns", "last_start_ns") - t0)
            labels = {c: c[:-3].replace("_", " ") + " (ms from first activity)"
                      for c in ("first_start_ns", "last_start_ns")}
            columns = [col(c["key"], labels[c["key"]], "ms") if c["key"] in labels else c
                       for c in auto_columns(worst)]
            tables.append({"title": "Largest cross-rank start skews",
                           "columns": columns, "rows": rows(worst)})
    note = ("NCCL/RCCL collectives: time, exposed (no compute kernel running) vs "
            "overlapped time, algorithm and bus bandwidth where message sizes are "
            "known, and cross-rank skew (who arrives last) for multi-rank inputs.")
    if conc["concurrent_exposed_ns"] > 0:
        note += (f" Collective kernels ran at the same time as each other on one device "
                 f"(other streams) for {units.duration(conc['concurrent_ns'])}: each kernel "
                 f"counts that time, so the exposed column adds up to "
                 f"{units.duration(conc['concurrent_exposed_ns'])} more than the breakdown's "
                 f"exposed communication, which counts wall time once.")
    return {"tables": tables, "collectives": rows(summ), "note": note}


def steps_section(tl: Timeline) -> dict[str, Any] | None:
    """The steps section: one row per step and the wall-time statistics, from the
    ProfilerStep ranges, else the numbered step annotations (steps.step_windows)."""
    st: pl.DataFrame = steps_mod.step_table(tl)
    prof = (tl.ranges["kind"].cast(pl.String) == steps_mod.PROFILER_STEP_KIND).any()
    source = ("ProfilerStep ranges" if prof else "NVTX / record_function ranges named as "
              "numbered steps (step 3, train_step_7, decode_step_0, iteration 12: "
              "docs/analyses.md)")
    summ: pl.DataFrame = steps_mod.step_summary(st)
    wall = rows(summ.filter(pl.col("metric") == "wall_ns"))
    stats = wall[0] if wall else {}
    data = rows(st)
    for r in data:
        r["label"] = f"r{r['rank']} {r['step']}"
        r["dur_ns"] = r["wall_ns"]
    keep = [c for c in ("rank", "step", "wall_ns", "period_ns", "gpu_busy_ns", "gpu_busy_pct",
                        "outlier",
                        "compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns",
                        "warmup_ns", "host_sync_ns", "idle_ns") if c in st.columns]
    # one unit for every duration of a step row (step times are milliseconds)
    columns = [c if not c["key"].endswith("_ns") else
               col(c["key"], {"wall_ns": "step time (ms)", "period_ns": "period (ms)"}.get(
                   c["key"], c["label"].replace("(µs)", "(ms)")), "ms")
               for c in auto_columns(st.select(keep))]
    return {
        "rows": data, "stats": stats, "source": source,
        "summary": rows(summ),
        "table": {"columns": columns, "rows": data},
        "summary_table": {"columns": [col("metric", "metric"), col("steps", "steps", "int"),
                                      col("outliers", "outliers", "int"),
                                      col("mean", "mean (ms)", "ms"),
                                      col("p50", "P50 (ms)", "ms"),
                                      col("p95", "P95 (ms)", "ms"),
                                      col("p99", "P99 (ms)", "ms"), col("min", "min (ms)", "ms"),
                                      col("max", "max (ms)", "ms")],
                          "rows": _metric_names(rows(summ))},
        "note": (f"Steps from {source}. Step time = range end - start; period = from the "
                 "step's start, or the earlier steps' finish when later, to the end of the "
                 "GPU work it launched (longer than the step time where the GPU falls behind "
                 "the host); GPU busy = union of the "
                 "rank's GPU activity inside the step. Outlier: period > median + 5.19 MAD "
                 f"(modified z-score above 3.5) and at least {MIN_EFFECT_PCT:g}% above the "
                 "median"
                 + (f"; {st.height} steps are too few to call one an outlier (at least "
                    f"{steps_mod.MIN_OUTLIER_STEPS})" if 0 < st.height
                    < steps_mod.MIN_OUTLIER_STEPS else "") + "."),
    }


def roofline_section(tl: Timeline, top: int) -> dict[str, Any] | None:
    """The roofline section: the ``top`` placed kernels by time, the ceilings and notes;
    None when no kernel can be placed."""
    from traceparse.analyses.metrics import clock_lines
    from traceparse.roofline.build import build
    from traceparse.roofline.chart import title_for
    from traceparse.roofline.coverage import coverage_line

    ncu = Timeline(ncu=tl.ncu, devices=tl.devices) if tl.ncu.height else None
    points, ceilings, notes = build(tl, ncu=ncu)
    if points.height == 0:
        return None
    placed = points.filter(pl.col("placed"))
    pts = placed.sort(["time_ns", "kernel_name"], descending=[True, False], nulls_last=True)
    keep = [c for c in ("kernel_name", "launches", "time_ns", "precision", "flop_per_s",
                        "dram_bytes_per_s", "dram_bytes_per_s_lo", "dram_bytes_per_s_hi",
                        "l2_bytes_per_s", "l1_bytes_per_s", "ai_dram",
                        "attainable_flop_per_s", "pct_of_roof", "bound", "provenance",
                        "placed", "note") if c in pts.columns]
    shown = pts.head(top).select(keep)
    columns = [col("kernel_name", "kernel"), col("time_ns", "time (µs)", "us"),
               col("precision", "precision"), col("flop_per_s", "FLOP/s", "flops"),
               col("dram_bytes_per_s", "DRAM", "bps"),
               col("dram_bytes_per_s_lo", "DRAM low", "bps"),
               col("dram_bytes_per_s_hi", "DRAM high", "bps"),
               col("ai_dram", "FLOP/byte", "num"),
               col("pct_of_roof", "% of roof", "pct"), col("bound", "bound"),
               col("provenance", "provenance")]
    if "note" in shown.columns and shown["note"].drop_nulls().len():
        columns.append(col("note", "note"))
    ceil_rows = rows(ceilings)
    for r in ceil_rows:  # keep the datasheet's name, not its web address
        if isinstance(r.get("source"), str):
            r["source"] = re.sub(r":?\s*https?://\S+", "", r["source"]).strip()
    gpu = notes.get("ceiling_table_row") or notes.get("gpu")
    unplaced = [{"reason": k, "kernels": v} for k, v in notes.get("unplaced", {}).items()]
    return {"points": rows(shown), "ceilings": ceil_rows,
            "notes": clean_notes(notes), "count": pts.height,
            "title": title_for(gpu, notes.get("sm_clock_hz"),
                               clock_source=notes.get("clock_source")),
            "banner": notes.get("gpu_mismatch"),
            "clock_lines": clock_lines(tl) if notes.get("clock_source") else [],
            "coverage": notes.get("coverage"), "coverage_line": coverage_line(notes["coverage"]),
            "unplaced": unplaced,
            "steps_table": _roofline_steps(notes.get("steps") or []),
            "table": {"columns": [c for c in columns if c["key"] in keep],
                      "rows": rows(shown)},
            "note": (_placed_line(pts, gpu) + "; "
                     "marker area = kernel time; '% of roof' = achieved FLOP/s over the "
                     "attainable FLOP/s at the kernel's arithmetic intensity; bound: "
                     "compute when the intensity is past the ridge, memory below it, latency "
                     "when under 5% of both roofs."
                     + (" Bandwidth-only points (no FLOPs: nsys GPU metrics) are dotted lines "
                        "FLOP/s = intensity x their DRAM bandwidth, the kernel lying somewhere "
                        "on its line; their bound is unknown. Copies, fills and gathers do no "
                        "arithmetic: they are listed with their DRAM bandwidth, not drawn."
                        if (notes["coverage"].get("bandwidth_only_ns") or 0) > 0 else "")
                     + ("" if ceilings.height else " No ceilings: the GPU is not known (no "
                        "device description in the inputs), so no chart and no % of roof."))}


def _placed_line(pts: pl.DataFrame, gpu: str | None) -> str:
    """How many of the listed kernels the chart draws: copies, fills and gathers do no
    arithmetic and are listed with their DRAM bandwidth, not drawn (a vLLM graph capture's
    one listed kernel, an ``aten::fill_``, was once counted as placed on an empty chart)."""
    from traceparse.roofline.estimate import DATA_MOVEMENT_NOTE

    moved = (int(pts["note"].fill_null("").str.starts_with(DATA_MOVEMENT_NOTE).sum())
             if "note" in pts.columns else 0)
    line = (f"{units.plural(pts.height - moved, 'kernel')} placed on the roofline of "
            f"{gpu or 'the GPU'}")
    if moved:
        line += (f" ({units.plural(moved, 'data-movement kernel')} listed below with "
                 f"{'its' if moved == 1 else 'their'} DRAM bandwidth, not drawn)")
    return line


def _roofline_steps(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per-step kernel time split by bound, achieved TFLOP/s and MFU (roofline section)."""
    if not steps:
        return None
    rows_ = [{**s, "placed_pct": 100.0 * s["placed_ns"] / s["kernel_ns"] if s["kernel_ns"]
              else None, "mfu_pct": 100.0 * s["mfu"] if s.get("mfu") is not None else None}
             for s in steps]
    return {"columns": [col("rank", "rank", "int"), col("step", "step"),
                        col("kernel_ns", "kernel time (ms)", "ms"),
                        col("placed_pct", "placed %", "pct"),
                        col("compute_ns", "compute-bound (ms)", "ms"),
                        col("memory_ns", "memory-bound (ms)", "ms"),
                        col("latency_ns", "latency-bound (ms)", "ms"),
                        col("achieved_flop_per_s", "FLOP/s over the step", "flops"),
                        col("mfu_pct", "MFU %", "pct")],
            "rows": rows_}


def clean_notes(notes: dict[str, Any]) -> dict[str, Any]:
    """Roofline build notes as JSON-able values."""
    out: dict[str, Any] = {}
    for k, v in notes.items():
        out[k] = v if isinstance(v, str | int | float | dict | list) or v is None else str(v)
    return out


def analysis_sections(tl: Timeline, opts: ReportOptions) -> dict[str, Any]:
    """Every analysis-backed section this build can produce, keyed by payload name."""
    from traceparse.analyses.occupancy import underfilled

    out: dict[str, Any] = {
        "evidence": {"tiny_memory_kernels": tiny_memory_kernels(tl),
                     "pageable_copies": pageable_copies(tl),
                     "underfilled_launches": rows(underfilled(tl)),
                     # ROCm traces record HIP calls: recommendations say HIP graphs
                     "hip": bool(tl.api.height and tl.api["name"].cast(pl.String)
                                 .str.starts_with("hip").any())},
    }
    gap_frame = idle_gaps(tl, min_ns=opts.gap_min_ns)
    out["summary"], bd = _summary(tl, opts, gap_frame)
    out["attribution"] = attribution_section(bd)
    sv = pl.DataFrame(out["summary"]["savings"]) if out["summary"]["savings"] else None
    for name, fn in (("launches", lambda t: _launches(t, sv)), ("comm", comm_section),
                     ("steps", steps_section)):
        sec = fn(tl)
        if sec is not None:
            out[name] = sec
    out["gaps"] = gaps_section(tl, opts, gap_frame)
    roof = roofline_section(tl, opts.top_n)
    if roof is not None:
        out["roofline"] = roof
    from traceparse.reports.llm_sections import llm_sections

    out.update(llm_sections(tl, opts))
    from traceparse.reports.hw_sections import hardware_sections

    out.update(hardware_sections(tl, opts))
    return out
