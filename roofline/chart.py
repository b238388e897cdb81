"""Render a roofline chart (matplotlib, Agg) to PNG or SVG bytes, deterministically.

* Roofs: one horizontal line per compute ceiling (FLOP/s) and one diagonal per memory level
  that has points (DRAM always; L2/L1 only when some point has that level's bytes). Each
  roof is labelled on the line with its value, precision and clock; roofs with equal values
  get distinct line styles so none hides another.
* Points: placed kernels (``placed``) at (AI_dram, FLOP/s); marker area ~ kernel time, shape
  by provenance (measured o, estimated s), colour by precision; the top kernels by time
  (by FLOP/s when the input has no durations) labelled. The legend sits outside the plot area.
* FP-only points (a page with no tensor-core counter: FLOPs are a lower bound) carry an arrow
  up and to the right along slope 1: more FLOPs over the same bytes move the point that way.
* Bandwidth-only points (nsys GPU metrics: DRAM bytes, no FLOPs): the kernel lies somewhere
  on FLOP/s = intensity x its DRAM bandwidth, so it is drawn as that line (dotted, capped by
  the highest compute roof) with its bounds as a shaded band, for the top kernels by time.
* Title: the GPU and the SM clock of the compute roofs (and where that clock comes from).

Same input -> same bytes (fixed SVG hash salt, no dates).
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

from traceparse.kernelname import short_kernel_name
from traceparse.roofline.model import BLIND_NOTE

MARKERS = {"measured (ncu)": "o", "estimated (shapes)": "s"}
PREC_COLOURS = {"fp64": "#8c564b", "fp32": "#1f77b4", "fp16": "#17becf", "bf16_tensor": "#d62728",
                "fp16_tensor": "#ff7f0e", "tf32_tensor": "#9467bd", "fp8_tensor": "#e377c2",
                "int8_tensor": "#bcbd22", "fp64_tensor": "#7f7f7f"}
STYLES = ["-", "--", "-.", ":"]
LEVEL_COL = {"dram": "dram_bytes_per_s", "l2": "l2_bytes_per_s", "l1": "l1_bytes_per_s"}


def _short(name: str) -> str:
    """A chart label: the bare kernel name (:func:`traceparse.kernelname.short_kernel_name`).

    Example:
        >>> _short("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
        ...        "at::native::(anonymous namespace)::TensorListMetadata<4>>(T1, T2)")
        'multi_tensor_apply_kernel'
    """
    return short_kernel_name(name, 36, bare=True)


def _rate(v: float, unit: str) -> str:
    for scale, pre in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if v >= scale:
            return f"{v / scale:,.3g} {pre}{unit}"
    return f"{v:,.3g} {unit}"


def _mixed_roofs(ax: Any, pts: pl.DataFrame, bw: float | None = None) -> None:
    """A short dashed roof at each mixed-precision point's time-weighted ceiling (the
    ``peak_flop_per_s`` its % of roof is against), a factor 3 either side of the point,
    never left of where that ceiling meets the DRAM roof (``bw``): left of it the kernel
    is held by memory, and a roof drawn there floated above the DRAM line (the A100
    dropout's 9.56 TFLOP/s at intensity 0.1-0.9, where 1.55 TB/s allows 0.16-1.4)."""
    if "peak_flop_per_s" not in pts.columns:
        return
    mixed = pts.filter(pl.col("precision").cast(pl.String).str.contains("+", literal=True)
                       & pl.col("peak_flop_per_s").is_not_null()
                       & pl.col("ai_dram").is_not_null())
    for n, r in enumerate(mixed.iter_rows(named=True)):
        x, v = float(r["ai_dram"]), float(r["peak_flop_per_s"])
        lo = max(x / 3, v / bw) if bw else x / 3
        col = PREC_COLOURS.get(str(r["precision"]).split("+")[0], "#2ca02c")
        ax.plot([lo, lo * 9], [v, v], "--", color=col, lw=1.2,
                label="time-weighted roof of a\nmixed-precision kernel" if n == 0 else None)


def title_for(gpu: str | None, clock_hz: float | None, *, what: str = "Roofline",
              clock_source: str | None = None) -> str:
    """Chart title naming the GPU and the SM clock of its compute roofs.

    Example:
        >>> title_for("NVIDIA H800", 1.485e9)
        'Roofline: NVIDIA H800 @ 1,485 MHz SM clock'
        >>> title_for("RTX 3090", 1.9545e9, clock_source="nsys GPU metrics GPC clock")
        'Roofline: RTX 3090 @ 1,954 MHz SM clock (nsys GPU metrics GPC clock)'
    """
    s = f"{what}: {gpu or 'GPU not named in the input'}"
    if not clock_hz:
        return s
    return s + f" @ {clock_hz / 1e6:,.0f} MHz SM clock" + (
        f" ({clock_source})" if clock_source else "")


def render(points: pl.DataFrame, ceilings: pl.DataFrame, *, fmt: str = "png",
           title: str = "Roofline", top: int = 5) -> bytes:
    """Draw ``points`` (columns ``kernel_name, time_ns, ai_dram, flop_per_s, provenance``,
    optional ``placed``, ``precision``, ``l2_bytes_per_s``, ``l1_bytes_per_s``) against
    ``ceilings`` (``name, kind, value``, optional ``clock_hz``) and return the file bytes."""
    plt.rcParams["svg.hashsalt"] = "traceparse"
    pts = points
    if "placed" in pts.columns:
        pts = pts.filter(pl.col("placed").fill_null(False))
    bw_pts = _bandwidth_only(pts, top)
    if pts.height:
        pts = pts.filter(pl.col("ai_dram").is_not_null() & (pl.col("ai_dram") > 0)
                         & pl.col("flop_per_s").is_not_null() & (pl.col("flop_per_s") > 0))
    if "time_ns" not in pts.columns:
        pts = pts.with_columns(pl.lit(None, pl.Float64).alias("time_ns"))
    fig, ax = plt.subplots(figsize=(11, 6), dpi=100)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ai = pts["ai_dram"].to_list()
    fl = pts["flop_per_s"].to_list()
    x_lo = min([*ai, 0.05]) / 4
    x_hi = max([*ai, 100.0]) * 40  # room on the right for the roof labels
    comp = ceilings.filter(pl.col("kind") == "compute").sort(["value", "name"],
                                                             descending=[True, False])
    if pts.height and "precision" in pts.columns and comp.height:
        # the roofs of the precisions on the chart, plus the highest roof for reference
        # (a mixed-precision point "fp64+fp32": the roof of each of its precisions)
        want = {q for p in pts["precision"].to_list() for q in str(p).split("+")} \
            | {str(comp["name"][0])}
        comp = comp.filter(pl.col("name").is_in(list(want)))
    levels = [lv for lv, col in LEVEL_COL.items() if lv == "dram" or (
        col in pts.columns and pts[col].drop_nulls().len() and pts.height)]
    mem = ceilings.filter((pl.col("kind") == "memory") & pl.col("name").is_in(levels)) \
        .sort("value", descending=True)
    top_peak = float(comp["value"].max()) if comp.height else None  # type: ignore[arg-type]
    xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    seen: dict[float, int] = {}
    for i, r in enumerate(mem.iter_rows(named=True)):
        v = float(r["value"])
        k = seen.get(round(v, -6), 0)
        seen[round(v, -6)] = k + 1
        ys = [min(x * v, top_peak) if top_peak else x * v for x in xs]
        ax.plot(xs, ys, STYLES[k % len(STYLES)], color="0.25", lw=1.4 - 0.3 * i)
        xl = x_lo * 1.6
        ax.annotate(f"{r['name'].upper()} {_rate(v, 'B/s')}", (xl, xl * v),
                    textcoords="offset points", xytext=(2, 4), fontsize=7, rotation=24,
                    color="0.15")
    dram = mem.filter(pl.col("name") == "dram")["value"].to_list()
    bw = float(dram[0]) if dram else None
    seen = {}
    # roofs of the same height (RTX 3090: bf16 and fp16 tensor at 81.9 TFLOP/s) share one
    # label: two labels 9 points apart overlapped
    same: dict[float, list[str]] = {}
    for r in comp.iter_rows(named=True):
        same.setdefault(round(float(r["value"]), -9), []).append(str(r["name"]))
    for r in comp.iter_rows(named=True):
        v = float(r["value"])
        k = seen.get(round(v, -9), 0)
        seen[round(v, -9)] = k + 1
        start = max(v / bw if bw else x_lo, x_lo)
        col = PREC_COLOURS.get(str(r["name"]), "#444444")
        ax.plot([start, x_hi], [v, v], STYLES[k % len(STYLES)], color=col, lw=1.5)
        if k:
            continue
        clk = r.get("clock_hz")
        names = " / ".join(same[round(v, -9)])
        lab = f"{names} {_rate(v, 'FLOP/s')}" + (f" @ {clk / 1e6:,.0f} MHz" if clk else "")
        ax.annotate(lab, (x_hi, v), textcoords="offset points", xytext=(-4, 2),
                    ha="right", va="bottom", fontsize=7, color=col)
    if pts.height:
        t = [x or 0.0 for x in pts["time_ns"].to_list()]
        tmax = max(t) or 1.0
        sizes = [25 + 500 * (v / tmax if tmax else 0) for v in t] if any(t) else [60] * len(t)
        precs = pts["precision"].to_list() if "precision" in pts.columns else [None] * len(t)
        provs = pts["provenance"].to_list()
        for prov, mk in MARKERS.items():
            for prec in sorted({str(p) for p in precs}):
                idx = [i for i in range(pts.height) if provs[i] == prov and str(precs[i]) == prec]
                if not idx:
                    continue
                ax.scatter([ai[i] for i in idx], [fl[i] for i in idx],
                           s=[sizes[i] for i in idx], marker=mk,
                           c=PREC_COLOURS.get(prec.split("+")[0], "#2ca02c"), alpha=0.75,
                           edgecolors="k",
                           linewidths=0.5, zorder=3, label=f"{prec}, {prov}")
        _mixed_roofs(ax, pts, bw)
        notes = pts["note"].to_list() if "note" in pts.columns else [None] * len(t)
        blind = [i for i in range(pts.height) if BLIND_NOTE in str(notes[i] or "")]
        for i in blind:  # FLOPs a lower bound: the kernel lies up the slope-1 line
            ax.annotate("", xy=(ai[i] * 4, fl[i] * 4), xytext=(ai[i], fl[i]), zorder=4,
                        arrowprops={"arrowstyle": "->", "lw": 0.8, "color": "0.3"})
        if blind:
            ax.plot([], [], color="0.3", lw=0.8, label="FP FLOPs only (page without tensor\n"
                    "counters): a lower bound, the kernel\nlies along its arrow")
        for lv, mk in (("l2", "^"), ("l1", "v")):  # the same kernels at L2 / L1 intensity
            col = LEVEL_COL[lv]
            if col not in pts.columns or lv not in levels:
                continue
            hp = pts.filter(pl.col(col).is_not_null() & (pl.col(col) > 0))
            if hp.height:
                ax.scatter((hp["flop_per_s"] / hp[col]).to_list(), hp["flop_per_s"].to_list(),
                           s=30, marker=mk, facecolors="none", edgecolors="0.3",
                           linewidths=0.8, zorder=3, label=f"same kernels, {lv.upper()} bytes")
        # the top kernels by time; without durations (roofline-chart pages) by FLOP/s
        order = pts.with_row_index("_i").sort(["time_ns", "flop_per_s", "_i"],
                                              descending=[True, True, False],
                                              nulls_last=True).head(top)
        roof_ys = [float(v) for v in comp["value"].to_list()]
        for n, r in enumerate(order.iter_rows(named=True)):
            # a label just under a compute roof goes below its point, off the roof line
            near = any(v / 4 <= r["flop_per_s"] <= v and (not bw or r["ai_dram"] >= v / bw)
                       for v in roof_ys)
            # ... unless a lower roof (and its right-aligned label) is just below too: then
            # the label goes left of the point, between the two roofs (SGLang's bf16 GEMMs
            # between the bf16 and fp32 roofs wrote 'mm' over the fp32 roof label)
            below = any(v < r["flop_per_s"] <= 4 * v for v in roof_ys)
            if near and below:
                ax.annotate(_short(r["kernel_name"]), (r["ai_dram"], r["flop_per_s"]),
                            textcoords="offset points", xytext=(-9, -3 - 10 * (n % 2)),
                            ha="right", fontsize=7,
                            arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.4"})
                continue
            dy = -14 - 10 * (n % 3) if near else 5 - 10 * (n % 3)
            ax.annotate(_short(r["kernel_name"]), (r["ai_dram"], r["flop_per_s"]),
                        textcoords="offset points", xytext=(7, dy), fontsize=7,
                        arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.4"})
        y_lo = min(fl) / 10
    if bw_pts.height:
        y_bw = _draw_bandwidth_lines(ax, bw_pts, xs, top_peak)
        y_lo = min(y_lo, y_bw) if pts.height else y_bw
    elif not pts.height:
        ax.text(0.5, 0.5, "no kernel placed (see the notes: missing counters or shapes)",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.3")
        y_lo = (float(mem["value"].min()) * x_lo) if mem.height else 1e9  # type: ignore[arg-type]
    if not comp.height and not mem.height:  # say so in the figure, not only on stderr
        ax.text(0.5, 0.03, "no roofs: unknown GPU and no peak metrics in the input "
                "(use --gpu NAME)", transform=ax.transAxes, ha="center", va="bottom",
                fontsize=8, color="0.3")
    y_hi = (top_peak or max([*fl, 1e12])) * 3
    ax.set_ylim(max(min(y_lo, y_hi / 1e6), 1.0), y_hi)
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("Arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("Performance (FLOP/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    if pts.height or bw_pts.height:
        leg = ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                        frameon=False, title="precision, provenance" if pts.height else
                        f"bandwidth-only: {bw_pts['provenance'][0]}", title_fontsize=7)
        for h in leg.legend_handles:  # legend markers at one size (the data's vary by time)
            set_sizes = getattr(h, "set_sizes", None)
            if set_sizes is not None:
                set_sizes([40.0])
    fig.tight_layout()
    buf = io.BytesIO()
    meta = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buf, format=fmt, metadata=meta)
    plt.close(fig)
    return buf.getvalue()


def _bandwidth_only(pts: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` placed points by time with a DRAM bandwidth and no FLOP/s."""
    if not pts.height or "dram_bytes_per_s" not in pts.columns or "flop_per_s" not in pts.columns:
        return pts.head(0)
    bw = pts.filter(pl.col("flop_per_s").is_null() & (pl.col("dram_bytes_per_s") > 0))
    if "note" in bw.columns:  # copies/fills do 0 FLOPs: intensity 0, not "somewhere on a line"
        from traceparse.roofline.estimate import DATA_MOVEMENT_NOTE

        bw = bw.filter(~pl.col("note").fill_null("").str.starts_with(DATA_MOVEMENT_NOTE))
    return bw.sort(["time_ns", "kernel_name"], descending=[True, False],
                   nulls_last=True).head(top)


def _draw_bandwidth_lines(ax: plt.Axes, bw: pl.DataFrame, xs: list[float],
                          top_peak: float | None) -> float:
    """Each bandwidth-only kernel as the line FLOP/s = x * its DRAM B/s (capped by the top
    roof), its bounds shaded; returns the lowest y drawn."""
    colours = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]
    y_lo = float("inf")
    for n, r in enumerate(bw.iter_rows(named=True)):
        col = colours[n % len(colours)]
        b = float(r["dram_bytes_per_s"])

        def line(v: float) -> list[float]:
            return [min(x * v, top_peak) if top_peak else x * v for x in xs]

        lo, hi = r.get("dram_bytes_per_s_lo"), r.get("dram_bytes_per_s_hi")
        bounds = f" (bounds {_rate(float(lo), 'B/s')} to {_rate(float(hi), 'B/s')})" \
            if lo is not None and hi is not None else ""
        ax.plot(xs, line(b), ":", color=col, lw=1.6, zorder=2,
                label=f"{_short(r['kernel_name'])}\nDRAM {_rate(b, 'B/s')}{bounds}, "
                      "FLOPs unknown")
        if lo is not None and hi is not None and float(lo) > 0:  # log axis: no zero bound
            ax.fill_between(xs, line(float(lo)), line(float(hi)), color=col, alpha=0.08,
                            lw=0, zorder=1)
        y_lo = min(y_lo, xs[0] * b)
    return y_lo
