"""Payload sections backed by the analyses package (attribution, gaps, launches, comm,
steps, summary, roofline) and the small evidence aggregates the recommendations need.

Each ``_section`` function calls one analysis function and converts its frame into a
``{"note": ..., "table": {"columns": [...], "rows": [...]}, ...}`` dict; ``columns`` name
the row keys and how to print them (``ms``, ``us``, ``pct``, ``int``, ``num``, ``bytes``,
``text``). A section is only built when its analysis module is part of this build.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from reports.payload import _module, rows
from traceparse.timeline import Timeline

if TYPE_CHECKING:
    from reports.payload import ReportOptions

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


def _attribution(tl: Timeline) -> dict[str, Any] | None:
    mod = _module("analyses.attribution")
    if mod is None:
        return None
    frame: pl.DataFrame = mod.breakdown(tl).sort("rank", "device_id")
    mod.check_attribution(frame)
    data = rows(frame)
    for r in data:
        r["label"] = f"rank {r['rank']} GPU {r['device_id']}"
        w = r["window_ns"] or 0
        for part in ("compute", "memory", "communication", "launch_overhead", "idle"):
            r[f"{part}_pct"] = 100.0 * r[f"{part}_ns"] / w if w else None
    parts = ("compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns", "idle_ns",
             "window_ns", "overlapped_comm_ns")
    totals = {p: int(frame[p].sum()) if frame.height else 0 for p in parts}
    columns = [col("label", "rank / device"), col("window_ns", "window (ms)", "ms")]
    for part in ("compute", "memory", "communication", "launch_overhead", "idle"):
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
                 "communication > memory > launch overhead > idle. Communication is the "
                 "exposed part; communication hidden under compute is counted as compute."),
    }


def tiny_memory_kernels(tl: Timeline, *, max_ns: int = TINY_KERNEL_NS,
                        top: int = 5) -> dict[str, Any]:
    """Evidence for fusion: compute kernels shorter than ``max_ns`` whose name matches
    :data:`MEMORY_BOUND_RE` (elementwise, reduction, copy, normalisation ...).

    Returns count, total_ns, and the ``top`` names by count (name, count, total_ns).
    """
    k = tl.kernels.filter((pl.col("category").cast(pl.String) == "compute")
                          & (pl.col("dur_ns") < max_ns)
                          & pl.col("name").cast(pl.String).str.contains(MEMORY_BOUND_RE))
    by = (k.group_by(pl.col("name").cast(pl.String))
          .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
          .sort(["count", "total_ns", "name"], descending=[True, True, False]).head(top))
    return {"max_ns": max_ns, "count": k.height,
            "total_ns": int(k["dur_ns"].sum()) if k.height else 0, "top": rows(by)}


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

    return {"pageable": agg(pageable), "pinned": agg(pinned)}


def _gaps(tl: Timeline, opts: ReportOptions) -> dict[str, Any] | None:
    mod = _module("analyses.gaps")
    if mod is None:
        return None
    frame: pl.DataFrame = mod.idle_gaps(tl, min_ns=opts.gap_min_ns)
    by_cause = (frame.group_by("cause").agg(pl.len().alias("count"),
                                            pl.col("dur_ns").sum().alias("total_ns"),
                                            pl.col("idle_ns").sum().alias("idle_ns"),
                                            pl.col("launch_overhead_ns").sum()
                                            .alias("launch_overhead_ns"))
                .sort(["total_ns", "cause"], descending=[True, False]))
    listed = frame.head(opts.max_gaps)
    t0 = tl.gpu["start_ns"].min() if tl.gpu.height else 0
    data = rows(listed.with_columns((pl.col("start_ns") - t0).alias("at_ns")))
    for r in data:
        r["label"] = f"rank {r['rank']} GPU {r['device_id']}"
    columns = [col("label", "rank / device"), col("at_ns", "at (ms from first activity)", "ms"),
               col("dur_ns", "gap (µs)", "us"), col("idle_ns", "idle (µs)", "us"),
               col("launch_overhead_ns", "launch overhead (µs)", "us"), col("kind", "kind"),
               col("cause", "cause"), col("cause_name", "host call / range"),
               col("cause_thread_id", "thread", "int")]
    more = frame.height - listed.height
    return {
        "count": frame.height,
        "total_ns": int(frame["dur_ns"].sum()) if frame.height else 0,
        "min_ns": opts.gap_min_ns,
        "by_cause": rows(by_cause),
        "table": {"columns": columns, "rows": data},
        "cause_table": {"columns": [col("cause", "cause"), col("count", "gaps", "int"),
                                    col("total_ns", "total (ms)", "ms"),
                                    col("idle_ns", "idle (ms)", "ms"),
                                    col("launch_overhead_ns", "launch overhead (ms)", "ms")],
                        "rows": rows(by_cause)},
        "note": (f"{frame.height:,} stretches of at least {opts.gap_min_ns / 1e3:g} µs where "
                 "a device ran nothing, longest first"
                 + (f" (the {listed.height} longest shown; {more:,} more)" if more else "")
                 + ". Cause: host_sync = the host was blocked in a synchronising call when the "
                 "gap began; cpu_work = a host range (NVTX, torch op, data loading) overlapped "
                 "it; unknown otherwise."),
    }


def analysis_sections(tl: Timeline, opts: ReportOptions) -> dict[str, Any]:
    """Every analysis-backed section this build can produce, keyed by payload name."""
    out: dict[str, Any] = {
        "evidence": {"tiny_memory_kernels": tiny_memory_kernels(tl),
                     "pageable_copies": pageable_copies(tl)},
    }
    attr = _attribution(tl)
    if attr is not None:
        out["attribution"] = attr
    gaps = _gaps(tl, opts)
    if gaps is not None:
        out["gaps"] = gaps
    return out
