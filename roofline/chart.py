"""Render a roofline chart (matplotlib, Agg) to PNG or SVG bytes, deterministically.

Roofs: one horizontal line per compute ceiling (FLOP/s), one diagonal per memory ceiling
(DRAM/L2/L1, bytes/s x intensity). Points: one per kernel at (AI_dram, FLOP/s), marker area
proportional to total kernel time, colour by provenance (measured vs estimated), the top
kernels by time labelled. Same input -> same bytes (fixed SVG hash salt, no dates).
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

COLOURS = {"measured (ncu)": "#1f77b4", "estimated (shapes)": "#ff7f0e"}


def _short(name: str, n: int = 40) -> str:
    base = name.split("(")[0].replace("void ", "").strip()
    return base if len(base) <= n else base[: n - 1] + "…"


def render(points: pl.DataFrame, ceilings: pl.DataFrame, *, fmt: str = "png",
           title: str = "Roofline", top: int = 5) -> bytes:
    """Draw ``points`` (columns ``kernel_name, time_ns, ai_dram, flop_per_s, provenance``)
    against ``ceilings`` (``name, kind, value, clock_note``) and return the file bytes."""
    plt.rcParams["svg.hashsalt"] = "traceparse"
    pts = points.filter(pl.col("ai_dram").is_not_null() & (pl.col("ai_dram") > 0)
                        & pl.col("flop_per_s").is_not_null() & (pl.col("flop_per_s") > 0))
    fig, ax = plt.subplots(figsize=(9, 6), dpi=100)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ai = pts["ai_dram"].to_list()
    x_lo = min([*ai, 0.01]) / 3
    x_hi = max([*ai, 1000.0]) * 3
    comp = ceilings.filter(pl.col("kind") == "compute").sort("value", descending=True)
    mem = ceilings.filter(pl.col("kind") == "memory").sort("value", descending=True)
    top_peak = float(comp["value"].max()) if comp.height else None  # type: ignore[arg-type]
    xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    for r in mem.iter_rows(named=True):
        ys = [x * r["value"] for x in xs]
        if top_peak:
            ys = [min(y, top_peak) for y in ys]
        ax.plot(xs, ys, "--", lw=1.2, label=f"{r['name'].upper()} {r['value'] / 1e9:,.0f} GB/s")
    bw = float(mem["value"].max()) if mem.height else None  # type: ignore[arg-type]
    for r in comp.iter_rows(named=True):
        start = r["value"] / bw if bw else x_lo
        ax.plot([max(start, x_lo), x_hi], [r["value"], r["value"]], "-", lw=1.5,
                label=f"{r['name']} {r['value'] / 1e12:,.1f} TFLOP/s ({r['clock_note']})")
    if pts.height:
        t = pts["time_ns"].to_list()
        tmax = max(t) or 1.0
        sizes = [20 + 600 * v / tmax for v in t]
        cols = [COLOURS.get(p, "#2ca02c") for p in pts["provenance"].to_list()]
        ax.scatter(ai, pts["flop_per_s"].to_list(), s=sizes, c=cols, alpha=0.7,
                   edgecolors="k", linewidths=0.5, zorder=3)
        for r in pts.sort("time_ns", descending=True).head(top).iter_rows(named=True):
            ax.annotate(_short(r["kernel_name"]), (r["ai_dram"], r["flop_per_s"]),
                        textcoords="offset points", xytext=(6, 6), fontsize=7)
        for prov, col in COLOURS.items():
            if prov in pts["provenance"].to_list():
                ax.scatter([], [], c=col, s=40, label=prov)
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("Arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("Performance (FLOP/s)")
    ax.set_title(title)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    meta = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buf, format=fmt, metadata=meta)
    plt.close(fig)
    return buf.getvalue()
