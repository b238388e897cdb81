"""The summary of an Nsight Compute page read alone (no timeline): its launches, kernel time,
roofline position and bound, from the same roofline points as the ``roofline`` command.

An ncu CSV has no timeline (no idle gaps, no attribution of wall time), so the timeline
summary would say "0 ns, 0 devices, no GPU activity" about a page that profiled real
kernels. This one says what the page measured:

* ``ncu_window``: device, launches, distinct kernels, profiled kernel time (sum of ncu's
  ``gpu__time_duration``; null when the page prints none) and the median SM clock;
* ``ncu_kernels``: one row per kernel (name and precision, as the roofline), by time
  (launches when the page has no durations): share of the profiled time, FLOP/s, DRAM B/s,
  % of roof, bound and the note that says why a kernel is not placed;
* the verdict: the bound that holds most of the profiled time, the top kernel and where it
  sits against its roof.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import units
from traceparse.roofline.build import build
from traceparse.roofline.coverage import coverage_line
from traceparse.timeline import Timeline

KERNEL_COLS = ("kernel_name", "launches", "time_ns", "time_pct", "precision", "flop_per_s",
               "dram_bytes_per_s", "pct_of_roof", "bound", "note")


def summarize_ncu(tl: Timeline, *, top: int = 10, gpu: str | None = None) -> dict[str, Any]:
    """``{"verdict": str, "sections": {"ncu_window": frame, "ncu_kernels": frame},
    "coverage_line": str, "placed": int}`` (``placed``: kernels on the roofline) for a
    timeline whose only table is ``ncu``."""
    n = tl.ncu
    pts, _ceil, notes = build(tl, gpu=gpu, by="kernel")
    t = pts["time_ns"].fill_null(0.0) if pts.height else pl.Series([], dtype=pl.Float64)
    total = float(t.sum()) if pts.height else 0.0
    names = n["device_name"].drop_nulls().cast(pl.String) if "device_name" in n.columns \
        else pl.Series([], dtype=pl.String)
    clk = n["sm_clock_hz"].drop_nulls() if "sm_clock_hz" in n.columns else pl.Series([])
    window = pl.DataFrame({
        "device": [str(names.mode().sort()[0]) if names.len() else None],
        "launches": [n.height], "kernels": [n["kernel_name"].n_unique()],
        "kernel_time_ns": [total if total > 0 else None],
        "sm_clock_hz": [float(clk.median()) if clk.len() else None]},  # type: ignore[arg-type]
        schema={"device": pl.String, "launches": pl.Int64, "kernels": pl.Int64,
                "kernel_time_ns": pl.Float64, "sm_clock_hz": pl.Float64})
    order = ["time_ns", "launches"] if total > 0 else ["launches"]
    k = (pts.with_columns((pl.col("time_ns") * 100.0 / total if total > 0
                           else pl.lit(None, pl.Float64)).alias("time_pct"))
         .sort(order, descending=True, nulls_last=True).head(top)
         .select([c for c in KERNEL_COLS if c in pts.columns or c == "time_pct"]))
    return {"verdict": _verdict(window.row(0, named=True), k, notes),
            "sections": {"ncu_window": window, "ncu_kernels": k},
            "coverage_line": coverage_line(notes["coverage"]),
            "placed": int(pts["placed"].sum()) if pts.height else 0}


def _verdict(w: dict[str, Any], k: pl.DataFrame, notes: dict[str, Any]) -> str:
    head = (f"Nsight Compute page: {units.plural(int(w['launches']), 'launch')} of "
            f"{units.plural(int(w['kernels']), 'kernel')}"
            + (f" on {w['device']}" if w["device"] else ""))
    if not k.height:
        return head + "; no kernel placed on the roofline"
    b = notes["coverage"]["bound_ns"]
    tot = notes["coverage"].get("total_ns") or 0.0
    if tot > 0:
        head += f", {units.duration(tot)} profiled"
        placed = {x: v for x, v in b.items() if v > 0 and x != "unknown"}
        if placed:
            top_b = max(placed, key=lambda x: placed[x])
            head += f"; {100.0 * placed[top_b] / tot:.0f}% of it {top_b}-bound"
    r = k.row(0, named=True)
    top = f"top kernel {units.shorten(str(r['kernel_name']), 60)}"
    if r.get("time_pct") is not None:
        top += f" ({r['time_pct']:.0f}% of the time)"
    if r.get("flop_per_s") is not None and r.get("pct_of_roof") is not None:
        top += (f" at {units.tflops(r['flop_per_s'])}, {r['pct_of_roof']:.0f}% of its "
                f"{r['precision']} roof ({r['bound']}-bound)")
    elif r.get("note"):
        top += f": {r['note']}"
    return f"{head}; {top}"
