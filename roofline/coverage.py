"""How much GPU kernel time the roofline covers, and what bounds the covered time.

Definitions (docs/roofline.md):

* ``total_ns``: GPU kernel time of the timeline (sum of kernel durations); for an ncu file
  alone, the sum of the profiled launch durations (ncu clocks).
* ``measured_ns`` / ``estimated_ns``: kernel time of points on the chart (``placed``) with
  provenance ``measured (ncu)`` / ``estimated (shapes)``.
* ``bandwidth_only_ns``: placed time in points without FLOPs: nsys GPU metrics (DRAM bytes
  only, bound unknown: ``bound_ns["unknown"]``) and copies/fills/gathers, which do no
  arithmetic (bound memory).
* ``not_placed_ns = total_ns - measured_ns - estimated_ns`` (never negative);
  ``communication_ns``: the part of the kernel time in communication kernels (NCCL/RCCL,
  ``gpu.category``), which no FLOP roofline places.
* ``bound_ns``: placed time split by the point's ``bound`` (compute, memory, latency; see
  :func:`traceparse.roofline.model.classify`), ``unknown`` when a roof is missing.
* ``achieved_flop_per_s`` = placed FLOPs / placed time; ``mfu`` = that over the time-weighted
  peak of the placed points (Model FLOPs Utilisation of the placed work only).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import units


def coverage(points: pl.DataFrame, kernels: pl.DataFrame | None = None) -> dict[str, Any]:
    """Coverage and bound split of ``points`` (see module docstring).

    Example (two placed points of 3 and 1 ms, 6 ms of kernels):
        >>> p = pl.DataFrame({"time_ns": [3e6, 1e6], "placed": [True, True],
        ...     "provenance": ["measured (ncu)"] * 2, "bound": ["memory", "compute"],
        ...     "flop_per_s": [1e12, 4e12], "peak_flop_per_s": [1e13, 1e13]})
        >>> k = pl.DataFrame({"dur_ns": [4e6, 2e6]})
        >>> c = coverage(p, k)
        >>> c["measured_ns"], c["not_placed_ns"], c["bound_ns"]["memory"], c["mfu"]
        (4000000.0, 2000000.0, 3000000.0, 0.175)
    """
    t = pl.col("time_ns").fill_null(0.0)
    placed = points.filter(pl.col("placed")) if points.height else points
    total_pts = float(points.select(t.sum()).item()) if points.height else 0.0
    total = float(kernels["dur_ns"].sum()) if kernels is not None and kernels.height \
        else total_pts

    def by_prov(prefix: str) -> float:
        if not placed.height:
            return 0.0
        return float(placed.filter(pl.col("provenance").str.starts_with(prefix))
                     .select(t.sum()).item())

    measured, estimated = by_prov("measured"), by_prov("estimated")
    bw_only = float(placed.filter(pl.col("flop_per_s").is_null()).select(t.sum()).item()) \
        if placed.height and "flop_per_s" in placed.columns else 0.0
    comm = 0.0
    if kernels is not None and kernels.height and "category" in kernels.columns:
        comm = float(kernels.filter(pl.col("category").cast(pl.String) == "communication")
                     ["dur_ns"].sum())
    elif points.height and "note" in points.columns:  # measured points: ncu durations
        comm = float(points.filter(pl.col("note").str.starts_with("communication kernel"))
                     .select(t.sum()).item())
    bound: dict[str, float] = {"compute": 0.0, "memory": 0.0, "latency": 0.0, "unknown": 0.0}
    flops = secs = peak_w = 0.0
    for r in placed.iter_rows(named=True):
        ns = float(r.get("time_ns") or 0.0)
        bound[str(r.get("bound") or "unknown")] = bound.get(str(r.get("bound") or "unknown"),
                                                            0.0) + ns
        fl = r.get("flop_per_s")
        if fl and ns:
            flops += fl * ns * 1e-9
            secs += ns * 1e-9
            if r.get("peak_flop_per_s"):
                peak_w += r["peak_flop_per_s"] * ns * 1e-9
    achieved = flops / secs if secs else None
    return {
        "total_ns": total, "measured_ns": measured, "estimated_ns": estimated,
        "bandwidth_only_ns": bw_only,
        "not_placed_ns": max(0.0, total - measured - estimated),
        "communication_ns": comm,
        "placed_pct": 100.0 * (measured + estimated) / total if total else None,
        "points": int(placed.height), "not_placed_points": int(points.height - placed.height),
        "bound_ns": bound, "achieved_flop_per_s": achieved,
        "mfu": flops / peak_w if peak_w else None,
    }


def coverage_line(c: dict[str, Any]) -> str:
    """One line for the CLI and the report: shares of kernel time by placement and bound."""
    tot = c.get("total_ns") or 0.0
    if not tot:
        return f"{c.get('points', 0)} points; kernel time unknown (no durations in the input)"

    def pct(v: float) -> str:
        return f"{100.0 * v / tot:.1f}%"

    b = c["bound_ns"]
    bw = c.get("bandwidth_only_ns") or 0.0
    s = (f"kernel time {tot / 1e6:,.3f} ms: measured {pct(c['measured_ns'])}, estimated "
         f"{pct(c['estimated_ns'])}"
         + (f" (bandwidth-only {pct(bw)}: DRAM bytes, no FLOPs)" if bw else "")
         + f", not placed {pct(c['not_placed_ns'])}"
         + (f" (communication kernels {pct(c['communication_ns'])})"
            if c.get("communication_ns") else "") + "; by bound "
         f"(share of kernel time): compute {pct(b['compute'])}, memory {pct(b['memory'])}, "
         f"latency {pct(b['latency'])}" + (f", unknown {pct(b['unknown'])}"
                                          if b.get("unknown") else ""))
    if c.get("achieved_flop_per_s"):
        s += f"; achieved {units.tflops(c['achieved_flop_per_s'])}"
    if c.get("mfu") is not None:
        s += f", {100.0 * c['mfu']:.1f}% of peak (placed work)"
    return s


def step_split(kernels: pl.DataFrame, points: pl.DataFrame, steps: pl.DataFrame,
               all_kernels: pl.DataFrame) -> list[dict[str, Any]]:
    """Per (rank, device, step): kernel time, placed time split by bound, FLOPs, achieved
    FLOP/s over the step's wall time and MFU.

    A kernel belongs to the step whose ``[start, end)`` on its rank contains its start. Its
    bound is the bound of its point (op name and precision); its FLOPs are its op's FLOPs
    shared among the op's kernels by duration. ``mfu`` = FLOPs / (wall time x peak of the
    precision that carries most of the step's FLOPs).

    Example (one step of 10 us, one 4 us kernel of a memory-bound point with 8e6 FLOPs):
        >>> k = pl.DataFrame({"rank": [0], "device_id": [0], "start_ns": [2000],
        ...     "dur_ns": [4000], "name": ["aten::add"], "precision": ["fp32"],
        ...     "flops": [8e6]})
        >>> p = pl.DataFrame({"kernel_name": ["aten::add"], "precision": ["fp32"],
        ...     "bound": ["memory"], "peak_flop_per_s": [1e13]})
        >>> s = pl.DataFrame({"rank": [0], "step": ["s1"], "start_ns": [0], "end_ns": [10000]})
        >>> a = pl.DataFrame({"rank": [0, 0], "device_id": [0, 0], "start_ns": [2000, 7000],
        ...     "dur_ns": [4000, 1000]})
        >>> r = step_split(k, p, s, a)[0]
        >>> r["kernel_ns"], r["memory_ns"], r["not_placed_ns"], round(r["achieved_flop_per_s"])
        (5000.0, 4000.0, 1000.0, 800000000000)
    """
    if not all_kernels.height:
        return []
    if not steps.height:  # no step ranges: one window per rank over all its kernels
        steps = (all_kernels.group_by("rank")
                 .agg(pl.col("start_ns").min(), (pl.col("start_ns") + pl.col("dur_ns")).max()
                      .alias("end_ns"))
                 .with_columns(pl.lit("(whole trace)").alias("step"),
                               (pl.col("end_ns") + 1).alias("end_ns"))
                 .select("rank", "step", "start_ns", "end_ns"))
    w = steps.select("rank", "step", pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"))

    def in_step(f: pl.DataFrame) -> pl.DataFrame:
        f = f.with_columns(pl.col("device_id").fill_null(0))
        return (f.join(w, on="rank", how="inner")
                .filter((pl.col("start_ns") >= pl.col("_s")) & (pl.col("start_ns") < pl.col("_e"))))

    tot = (in_step(all_kernels.select("rank", "device_id", "start_ns", "dur_ns"))
           .group_by("rank", "device_id", "step", "_s", "_e")
           .agg(pl.col("dur_ns").sum().cast(pl.Float64).alias("kernel_ns"),
                (pl.col("start_ns") + pl.col("dur_ns")).max().alias("_gpu_end")))
    op_prec = "op_precision" if "op_precision" in points.columns else "precision"
    pb = points.select(pl.col("kernel_name").alias("name"), pl.col(op_prec).alias("precision"),
                       "bound", "peak_flop_per_s")
    k = in_step(kernels.join(pb, on=["name", "precision"], how="left"))
    out = []
    for r in tot.sort("rank", "device_id", "_s").iter_rows(named=True):
        g = k.filter((pl.col("rank") == r["rank"]) & (pl.col("device_id") == r["device_id"])
                     & (pl.col("step") == r["step"]))
        by = {b: float(g.filter(pl.col("bound") == b)["dur_ns"].sum())
              for b in ("compute", "memory", "latency")}
        placed = float(g["dur_ns"].sum())
        # the GPU runs behind the host: the step's kernels may end after its host range,
        # and FLOP/s over the step is over the time they actually took
        wall = float(max(r["_e"], r["_gpu_end"]) - r["_s"])
        flops = float(g["flops"].sum())
        peak = None
        if g.height and flops > 0:
            dom = g.group_by("precision").agg(pl.col("flops").sum(),
                                              pl.col("peak_flop_per_s").first())
            top = dom.sort("flops", descending=True).row(0, named=True)
            peak = top["peak_flop_per_s"]
        ach = flops / (wall * 1e-9) if wall > 0 and flops > 0 else None
        out.append({"rank": r["rank"], "device_id": r["device_id"], "step": r["step"],
                    "wall_ns": wall, "kernel_ns": r["kernel_ns"], "placed_ns": placed,
                    "not_placed_ns": max(0.0, r["kernel_ns"] - placed),
                    **{f"{b}_ns": v for b, v in by.items()}, "flops": flops,
                    "achieved_flop_per_s": ach,
                    "mfu": ach / peak if ach and peak else None})
    return out


def step_line(st: dict[str, Any]) -> str:
    """One line per step for the CLI: kernel time, placed share, bound split, TFLOP/s, MFU."""
    k = st["kernel_ns"] or 1.0

    def pct(v: float) -> str:
        return f"{100.0 * v / k:.0f}%"

    s = (f"{st['step']} (rank {st['rank']}, device {st['device_id']}): kernels "
         f"{st['kernel_ns'] / 1e6:,.2f} ms, placed {pct(st['placed_ns'])} (compute "
         f"{pct(st['compute_ns'])}, memory {pct(st['memory_ns'])}, latency "
         f"{pct(st['latency_ns'])})")
    if st.get("achieved_flop_per_s"):
        s += f"; {units.tflops(st['achieved_flop_per_s'])} over the step"
    if st.get("mfu") is not None:
        s += f", MFU {100.0 * st['mfu']:.1f}%"
    return s
