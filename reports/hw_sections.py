"""Report sections for what the hardware saw: measured GPU metrics, device memory, graphs.

The numbers come from the same functions as ``traceparse summary`` (its ``gpu_metrics``,
``memory`` and ``graphs`` sections) and ``traceparse memory``; this module only shapes them
into ``{"note", "table": {"columns", "rows"}, ...}`` dicts and downsampled series for the
figures (:mod:`traceparse.reports.hw_figures`).

* ``counters``: per device, the GPU metrics SM Active, Tensor Active, DRAM read + write and
  GPC clock as at most :data:`COUNTER_BINS` time bins over the timeline figure's window
  (first to last GPU activity), each bin the time-weighted mean of the samples in it.
* ``memory.series``: per device, the allocated (and reserved) level after each event, or,
  above :data:`MEMORY_POINTS` events, the maximum of each of that many time bins (peaks stay
  visible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from traceparse.analyses import memory as memory_mod
from traceparse.analyses import summary as summary_mod
from traceparse.analyses.metrics import (
    SUMMARY_METRICS,
    clock_lines,
    idle_caveat,
    interval_means,
)
from traceparse.reports.options import rows
from traceparse.timeline import Timeline

if TYPE_CHECKING:
    from traceparse.reports.options import ReportOptions

COUNTER_BINS = 600
MEMORY_POINTS = 2000
#: Counter lanes drawn under the timeline: (label, metric names summed, unit).
COUNTER_LANES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("SM active", SUMMARY_METRICS["sm_active_pct"], "%"),
    ("Tensor active", SUMMARY_METRICS["tensor_active_pct"], "%"),
    ("DRAM read+write", SUMMARY_METRICS["dram_read_pct"] + SUMMARY_METRICS["dram_write_pct"],
     "%"),
    ("GPC clock", SUMMARY_METRICS["gpc_clock_hz"], "Hz"),
)


def _col(key: str, label: str, fmt: str = "text") -> dict[str, str]:
    return {"key": key, "label": label, "fmt": fmt}


def _counters(tl: Timeline) -> dict[str, Any] | None:
    if tl.metrics.height == 0 or tl.gpu.height == 0:
        return None
    t0 = int(tl.gpu["start_ns"].min())  # type: ignore[arg-type]
    t1 = int(tl.gpu["end_ns"].max())  # type: ignore[arg-type]
    span = max(t1 - t0, 1)
    edges = np.linspace(t0, t1, COUNTER_BINS + 1).round().astype(np.int64)
    series = []
    for rank, dev in tl.metrics.select("rank", "device_id").unique().sort(
            "rank", "device_id").iter_rows():
        wins = pl.DataFrame({"_w": np.arange(COUNTER_BINS, dtype=np.int64),
                             "rank": [rank] * COUNTER_BINS, "device_id": [dev] * COUNTER_BINS,
                             "start_ns": edges[:-1], "end_ns": edges[1:]},
                            schema_overrides={"rank": pl.Int32, "device_id": pl.Int32})
        for label, names, unit in COUNTER_LANES:
            present = [n for n in names if n in set(tl.metrics["metric"].cast(pl.String))]
            if not present:
                continue
            per = interval_means(tl.metrics, wins, present)
            if per.height == 0:
                continue
            # sum over the lane's metrics (read + write), each a time-weighted mean per bin
            agg = per.with_columns((pl.col("integral") / pl.col("covered_ns")).alias("v")) \
                .group_by("_w").agg(pl.col("v").sum(), pl.col("covered_ns").max()) \
                .filter(pl.col("covered_ns") > 0).sort("_w")
            series.append({"rank": rank, "device_id": dev, "label": label, "unit": unit,
                           "bin": agg["_w"].to_list(), "value": agg["v"].to_list()})
    if not series:
        return None
    return {"window_start_ns": t0, "window_ns": span, "bins": COUNTER_BINS,
            "bin_ns": span // COUNTER_BINS, "series": series}


def _gpu_metrics(tl: Timeline, opts: ReportOptions) -> dict[str, Any] | None:
    frame = summary_mod.gpu_metrics_section(tl, summary_mod.SummaryOptions(top=opts.top_n))
    if frame.height == 0:
        return None
    khz = frame["sampled_khz"][0]
    columns = [_col("name", "kernel"), _col("launches", "launches", "int"),
               _col("total_ns", "time (µs)", "us"), _col("sm_active_pct", "SM active", "pct"),
               _col("sm_issue_pct", "SM issue", "pct"),
               _col("tensor_active_pct", "tensor active", "pct"),
               _col("dram_read_pct", "DRAM read % of peak", "pct"),
               _col("dram_write_pct", "DRAM write % of peak", "pct"),
               _col("dram_bytes", "DRAM bytes (est.)", "bytes"),
               _col("dram_bytes_lo", "DRAM bytes low", "bytes"),
               _col("dram_bytes_hi", "DRAM bytes high", "bytes"),
               _col("gpc_clock_hz", "GPC clock", "hz"),
               _col("clock_vs_spec", "clock / spec clock", "num")]
    columns = [c for c in columns if c["key"] in frame.columns]
    return {
        "sampled_khz": khz,
        "note": (f"Measured by the GPU's own counters (nsys GPU metrics, sampled at "
                 f"{khz:.3g} kHz): the time-weighted mean of each metric over every launch "
                 "of the kernel. A launch shorter than one sample period shares its samples "
                 "with whatever else ran in them, so DRAM bytes are an estimate between the "
                 "low and high bounds shown (sample edges and the counters' 0.5 % "
                 "rounding). Clock / spec clock above 1 = boost above the device's listed "
                 "clock; below 1 = the ceilings derived from the spec clock are too high "
                 "for this run (throttling). Definitions: docs/metrics.md."),
        "table": {"columns": columns, "rows": rows(frame.drop("sampled_khz"))},
        "counters": _counters(tl),
        "caveat": idle_caveat(tl),
        "clock_lines": clock_lines(tl),
        **_window_tables(tl, opts),
    }


_METRIC_COLS = [_col("sm_active_pct", "SM active", "pct"), _col("sm_issue_pct", "SM issue", "pct"),
                _col("tensor_active_pct", "tensor active", "pct"),
                _col("dram_read_pct", "DRAM read % of peak", "pct"),
                _col("dram_write_pct", "DRAM write % of peak", "pct"),
                _col("gpc_clock_hz", "GPC clock", "hz")]


def _window_tables(tl: Timeline, opts: ReportOptions) -> dict[str, Any]:
    """Time-weighted metrics per step (ProfilerStep ranges, else numbered step annotations)
    and per NVTX range name."""
    from traceparse.analyses.metrics import range_metrics, window_metrics
    from traceparse.analyses.steps import step_windows

    out: dict[str, Any] = {}
    wins = step_windows(tl)  # ProfilerStep ranges, else the numbered step annotations
    sm = window_metrics(tl, wins, label="step") if wins.height else pl.DataFrame()
    if sm.height:
        cols = [_col("rank", "rank", "int"), _col("step", "step"),
                _col("device_id", "device", "int"), *_METRIC_COLS]
        out["steps"] = {"columns": [c for c in cols if c["key"] in sm.columns],
                        "rows": rows(sm.head(opts.top_n))}
    rm = range_metrics(tl)
    if rm.height:
        cols = [_col("name", "NVTX range"), _col("instances", "instances", "int"),
                _col("total_ns", "time (µs)", "us"), *_METRIC_COLS]
        out["ranges"] = {"columns": [c for c in cols if c["key"] in rm.columns],
                         "rows": rows(rm.head(opts.top_n))}
    return out


def _memory_series(tl: Timeline) -> list[dict[str, Any]]:
    lv = memory_mod.device_levels(tl)
    out = []
    for (rank, dev), part in lv.group_by(["rank", "device_id"], maintain_order=True):
        part = part.sort("ts_ns", maintain_order=True)
        # the level before the first event (what the capture started with), as the peak
        # table and the steps' rises read it
        initial = memory_mod.initial_level(part)
        downsampled = part.height > MEMORY_POINTS
        if downsampled:
            t0, t1 = int(part["ts_ns"].min()), int(part["ts_ns"].max())  # type: ignore[arg-type]
            width = max((t1 - t0) // MEMORY_POINTS, 1)
            part = part.with_columns(((pl.col("ts_ns") - t0) // width).alias("_b")) \
                .group_by("_b", maintain_order=True).agg(
                    pl.col("ts_ns").get(pl.col("allocated_bytes").arg_max()),
                    pl.col("allocated_bytes").max(), pl.col("reserved_bytes").max())
        out.append({"rank": rank, "device_id": dev, "downsampled": downsampled,
                    "initial_bytes": initial,
                    "ts_ns": part["ts_ns"].to_list(),
                    "allocated_bytes": part["allocated_bytes"].to_list(),
                    "reserved_bytes": part["reserved_bytes"].to_list()})
    return out


def _memory(tl: Timeline, opts: ReportOptions) -> dict[str, Any] | None:
    pk = summary_mod.memory_section(tl, summary_mod.SummaryOptions(top=opts.top_n))
    if pk.height == 0:
        return None
    span = tl.span_ns()
    # one origin for the table and the chart: the trace start (first event), as in the CLI
    t0 = span[0] if span else int(tl.memory["ts_ns"].min())  # type: ignore[arg-type]
    peak_rows = rows(pk)
    for r in peak_rows:
        r["peak_at_ns"] = r["peak_ts_ns"] - t0 if r["peak_ts_ns"] is not None else None
    peak_cols = [_col("rank", "rank", "int"), _col("device_id", "device", "int"),
                 _col("events", "events", "int"), _col("allocs", "allocs", "int"),
                 _col("frees", "frees", "int"),
                 _col("peak_allocated_bytes", "peak allocated", "bytes"),
                 _col("peak_at_ns", "peak at (ms from trace start)", "ms"),
                 _col("final_allocated_bytes", "allocated at end", "bytes"),
                 _col("peak_reserved_bytes", "peak reserved", "bytes"),
                 _col("replayed", "replayed from sizes", "bool")]
    if "not_device_peak_bytes" in pk.columns:  # unified/host memory beside the device's
        peak_cols.append(_col("not_device_peak_bytes", "not device memory (managed/host)",
                              "bytes"))
    out: dict[str, Any] = {
        "note": ("Device memory over time from the trace's own allocation events (Kineto "
                 "[memory] totals, or nsys CUDA memory-usage events replayed from their "
                 "sizes: levels relative to the capture start). Times count from the trace "
                 "start (first event). Peak of a step or op = the "
                 "highest allocated level inside it; rise = peak - level when it began. "
                 "Same numbers as traceparse memory. Definitions: docs/memory.md."),
        "peaks": {"columns": peak_cols, "rows": peak_rows},
        "series": _memory_series(tl),
        "t0_ns": t0,
    }
    steps = memory_mod.step_peaks(tl)
    if steps.height:
        out["steps"] = {"columns": [_col("rank", "rank", "int"), _col("step", "step"),
                                    _col("device_id", "device", "int"),
                                    _col("start_allocated_bytes", "at start", "bytes"),
                                    _col("peak_allocated_bytes", "peak", "bytes"),
                                    _col("rise_bytes", "rise", "bytes"),
                                    _col("peak_reserved_bytes", "peak reserved", "bytes")],
                        "rows": rows(steps.head(opts.top_n))}
    ops = memory_mod.op_peaks(tl, top=opts.top_n)
    if ops.height:
        out["ops"] = {"columns": [_col("name", "top-level op"),
                                  _col("device_id", "device", "int"),
                                  _col("instances", "instances", "int"),
                                  _col("peak_allocated_bytes", "peak", "bytes"),
                                  _col("max_rise_bytes", "max rise", "bytes"),
                                  _col("total_rise_bytes", "summed rise", "bytes")],
                      "rows": rows(ops)}
    return out


def hardware_sections(tl: Timeline, opts: ReportOptions) -> dict[str, Any]:
    """``gpu_metrics``, ``memory`` and ``graphs`` payload sections (only those the trace
    has content for)."""
    out: dict[str, Any] = {}
    gm = _gpu_metrics(tl, opts)
    if gm is not None:
        out["gpu_metrics"] = gm
    mem = _memory(tl, opts)
    if mem is not None:
        out["memory"] = mem
    notes = summary_mod.graphs_section(tl, summary_mod.SummaryOptions())
    if notes.height:
        out["graphs"] = {"notes": notes["note"].to_list()}
    unread = tl.ingest.filter(pl.col("outcome").cast(pl.String).is_in(["lookup", "not read"]))
    if unread.height:
        out["unread_tables"] = {
            "columns": [_col("rank", "rank", "int"), _col("source", "table or file"),
                        _col("outcome", "outcome"), _col("reason", "why"),
                        _col("count", "rows", "int")],
            # a file of a rank directory that is no trace belongs to no rank
            "rows": rows(unread.select(
                pl.when(pl.col("table").cast(pl.String) == "files").then(None)
                .otherwise(pl.col("rank")).alias("rank"), "source", "outcome", "reason",
                "count").sort("rank", "source", nulls_last=True))}
    return out
