"""Inline SVG figures for the HTML report (matplotlib, Agg, deterministic bytes).

Every figure is drawn from payload data only (never from the timeline), so the report is a
pure function of its payload. Determinism: ``svg.hashsalt`` is fixed, the date metadata is
dropped, text is kept as ``<text>`` (``svg.fonttype = none``: smaller, and no font-dependent
glyph paths), and the ``<metadata>`` block, the XML prologue and the namespace URLs are
stripped so the SVG can be inlined in HTML5 and the report holds no external URL at all
(HTML5 parses inline ``<svg>`` without ``xmlns``; ``xlink:href`` becomes plain ``href``).
Matplotlib escapes the text it writes (``&``, ``<``, ``>``).
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

#: Colours per attribution / GPU category (colour-blind friendly palette).
COLORS = {
    "compute": "#4C72B0",
    "memory": "#DD8452",
    "communication": "#55A868",
    "launch_overhead": "#C44E52",
    "warmup": "#937860",
    "host_sync": "#DA8BC3",
    "sync": "#8172B3",
    "idle": "#D0D0D0",
    "overlapped_comm": "#A6D8B0",
}

_RC: dict[str, Any] = {
    "svg.hashsalt": "traceparse-report",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

_STRIP = [
    (re.compile(r"<\?xml[^>]*\?>\s*"), ""),
    (re.compile(r"<!DOCTYPE[^>]*>\s*"), ""),
    (re.compile(r"<metadata>.*?</metadata>\s*", re.S), ""),
    (re.compile(r'\s+xmlns(:xlink)?="[^"]*"'), ""),
    (re.compile(r"xlink:href="), "href="),
]


@contextmanager
def _style() -> Iterator[None]:
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        yield


#: Lane figures (timeline, GPU-metric and memory counter lanes) share one width and one
#: plot box (inches from the left and right edges), so their time axes line up on the page.
LANE_WIDTH_IN, LANE_LEFT_IN, LANE_RIGHT_IN = 11.0, 1.5, 0.15


def lane_figure(n: int, lane_in: float, *, top_in: float, bottom_in: float,
                sharex: bool = True) -> tuple[Figure, Any]:
    """A figure of ``n`` stacked axes (or one axes when ``n`` is 0) with the shared lane
    plot box; ``lane_in`` inches per lane, ``top_in``/``bottom_in`` for legend and axis."""
    rows = max(n, 1)
    h = top_in + bottom_in + lane_in * rows
    fig, axes = plt.subplots(rows if sharex else 1, 1, figsize=(LANE_WIDTH_IN, h),
                             sharex=sharex, squeeze=False)
    fig.subplots_adjust(left=LANE_LEFT_IN / LANE_WIDTH_IN,
                        right=1 - LANE_RIGHT_IN / LANE_WIDTH_IN,
                        top=1 - top_in / h, bottom=bottom_in / h, hspace=0.25)
    return fig, axes


def to_svg(fig: Figure, *, tight: bool = True) -> str:
    """Serialise ``fig`` as inline-ready SVG markup and close it (``tight=False`` keeps the
    figure's own box: lane figures, whose plot boxes must line up)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None},
                bbox_inches="tight" if tight else None)
    plt.close(fig)
    text = buf.getvalue()
    for pat, rep in _STRIP:
        text = pat.sub(rep, text)
    return text.strip()


def time_unit(span_ns: float) -> tuple[float, str]:
    """(ns per unit, unit) for a time axis spanning ``span_ns``: milliseconds, or seconds
    from 10 s on, so tick labels stay short numbers (a 73-minute capture drawn in ms read
    "4.0" under a "1e6" offset).

    Example:
        >>> time_unit(5e9), time_unit(4.4e12)
        ((1000000.0, 'ms'), (1000000000.0, 's'))
    """
    return (1e9, "s") if span_ns >= 1e10 else (1e6, "ms")


def attribution_bars(rows: Sequence[dict[str, Any]], parts: Sequence[str]) -> str:
    """Horizontal stacked bars, one per (rank, device): where the window's time went (ms).

    Args:
        rows: payload attribution rows with ``label`` and ``<part>_ns`` for each part.
        parts: the parts in drawing order (e.g. compute, memory, communication,
            launch_overhead, idle).
    """
    scale, unit = time_unit(max((sum(float(r.get(f"{p}_ns") or 0) for p in parts)
                                 for r in rows), default=0.0))
    with _style():
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * max(len(rows), 1)))
        labels = [r["label"] for r in rows]
        left = [0.0] * len(rows)
        for part in parts:
            vals = [float(r.get(f"{part}_ns") or 0) / scale for r in rows]
            ax.barh(labels, vals, left=left, color=COLORS.get(part, "#999999"),
                    label=part.replace("_", " "), height=0.6)
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel(f"time in window ({unit})")
        ax.legend(ncol=len(parts), loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False,
                  fontsize=8)
        return to_svg(fig)


def lane_label(lane: dict[str, Any], multi: bool) -> str:
    """``[rN ]GPUd sS`` for a timeline lane; a lane without a stream (device-wide
    synchronisation rows) reads ``no stream``, not ``sNone``."""
    stream = "no stream" if lane["stream_id"] is None else f"s{lane['stream_id']}"
    return (f"r{lane['rank']} " if multi else "") + f"GPU{lane['device_id']} {stream}"


def timeline_overview(lanes: dict[str, Any]) -> str:
    """Lane chart of GPU activity per (rank, device, stream) from :func:`traceparse.reports.lanes.
    timeline_lanes` data; binned segments are shaded by busy fraction."""
    cats = lanes["categories"]
    rows = lanes["lanes"]
    multi = len({r["rank"] for r in rows}) > 1
    scale, unit = time_unit(lanes["window_ns"])
    with _style():
        # up to 12 lanes at 0.24 in; more share ~3.4 in (at least 0.14 in, one label line)
        n = max(len(rows), 1)
        per = 0.24 if n <= 12 else max(0.14, 3.4 / n)
        fig, axes = lane_figure(1, per * n, top_in=0.3, bottom_in=0.45, sharex=False)
        ax = axes[0, 0]
        min_w = lanes["window_ns"] / scale / 1500  # keep sub-pixel activities visible
        for y, lane in enumerate(rows):
            groups: dict[tuple[int, float], list[tuple[float, float]]] = {}
            for start, dur, ci, level in lane["segments"]:
                # a segment narrower than the line width still shows as a sliver
                groups.setdefault((ci, level), []).append((start / scale,
                                                           max(dur / scale, min_w)))
            for (ci, level), spans in sorted(groups.items()):
                ax.broken_barh(spans, (y - 0.38, 0.76), facecolors=COLORS.get(cats[ci]),
                               alpha=level, linewidth=0)
        labels = [lane_label(r, multi) for r in rows]
        ax.set_yticks(range(len(rows)), labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, max(lanes["window_ns"] / scale, 1e-6))
        ax.set_xlabel(f"time since first GPU activity ({unit})")
        handles = [matplotlib.patches.Patch(color=COLORS[c], label=c) for c in cats]
        ax.legend(handles=handles, ncol=len(cats), loc="lower left", bbox_to_anchor=(0, 1.0),
                  frameon=False, fontsize=8, borderaxespad=0.1)
        ax.tick_params(axis="y", labelsize=7.5)
        return to_svg(fig, tight=False)


def histogram(edges: Sequence[float], counts: Sequence[int], *, xlabel: str,
              color: str = "#4C72B0", logx: bool = False) -> str:
    """Bar histogram from precomputed ``edges`` (len n+1) and ``counts`` (len n)."""
    with _style():
        fig, ax = plt.subplots(figsize=(7, 2.6))
        widths = [b - a for a, b in itertools.pairwise(edges)]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color=color, linewidth=0)
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count")
        return to_svg(fig)


def step_bars(labels: Sequence[str], values_ms: Sequence[float],
              marks: dict[str, float]) -> str:
    """Bars of per-step times (ms) with horizontal lines at the named marks (P50, P95...)."""
    with _style():
        fig, ax = plt.subplots(figsize=(9, 2.6))
        ax.bar(range(len(values_ms)), values_ms, color="#4C72B0", linewidth=0)
        styles = ["--", ":", "-."]
        for i, (name, v) in enumerate(sorted(marks.items())):
            ax.axhline(v, color="#C44E52", linestyle=styles[i % 3], linewidth=1,
                       label=f"{name} {v:.3f} ms")
        step = max(1, len(labels) // 20)
        ax.set_xticks(range(0, len(labels), step), [labels[i] for i in
                                                    range(0, len(labels), step)],
                      rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("step time (ms)")
        if marks:  # above the axes: inside, it covered the first bars
            ax.legend(frameon=False, fontsize=8, ncol=len(marks), loc="lower left",
                      bbox_to_anchor=(0, 1.0))
        return to_svg(fig)


def roofline(points: Sequence[dict[str, Any]], ceilings: Sequence[dict[str, Any]], *,
             title: str = "Roofline") -> str:
    """The roofline chart of :mod:`traceparse.roofline.chart` from payload rows, as inline SVG
    (``title`` names the GPU and the SM clock of the roofs)."""
    import polars as pl

    from traceparse.roofline.chart import render

    pts = pl.DataFrame(list(points), infer_schema_length=None)
    ceil = pl.DataFrame(list(ceilings), infer_schema_length=None)
    with _style():
        data = render(pts, ceil, fmt="svg", title=title)
    text = data.decode("utf-8")
    for pat, rep in _STRIP:
        text = pat.sub(rep, text)
    return text.strip()
