"""How much GPU kernel time the roofline covers, and what bounds the covered time.

Definitions (docs/roofline.md):

* ``total_ns``: GPU kernel time of the timeline (sum of kernel durations); for an ncu file
  alone, the sum of the profiled launch durations (ncu clocks).
* ``measured_ns`` / ``estimated_ns``: kernel time of points on the chart (``placed``) with
  provenance ``measured (ncu)`` / ``estimated (shapes)``.
* ``not_placed_ns = total_ns - measured_ns - estimated_ns`` (never negative).
* ``bound_ns``: placed time split by the point's ``bound`` (compute, memory, latency; see
  :func:`traceparse.roofline.model.classify`), ``unknown`` when a roof is missing.
* ``achieved_flop_per_s`` = placed FLOPs / placed time; ``mfu`` = that over the time-weighted
  peak of the placed points (Model FLOPs Utilisation of the placed work only).
"""

from __future__ import annotations

from typing import Any

import polars as pl


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
        "not_placed_ns": max(0.0, total - measured - estimated),
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
    s = (f"kernel time {tot / 1e6:,.3f} ms: measured {pct(c['measured_ns'])}, estimated "
         f"{pct(c['estimated_ns'])}, not placed {pct(c['not_placed_ns'])}; placed time "
         f"compute-bound {pct(b['compute'])}, memory-bound {pct(b['memory'])}, "
         f"latency-bound {pct(b['latency'])}")
    if c.get("achieved_flop_per_s"):
        s += f"; achieved {c['achieved_flop_per_s'] / 1e12:,.2f} TFLOP/s"
    if c.get("mfu") is not None:
        s += f", {100.0 * c['mfu']:.1f}% of peak (placed work)"
    return s
