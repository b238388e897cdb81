"""Text rendering of :func:`traceparse.analyses.summary.summarize` (one screen): pure, returns a
str."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

#: Bar glyph per attribution part, in priority order.
GLYPHS = {"compute_ns": "#", "communication_ns": "C", "memory_ns": "M",
          "launch_overhead_ns": "L", "warmup_ns": "W", "host_sync_ns": "S", "idle_ns": "."}
BAR_WIDTH = 50
_LABELS = {"launch_overhead_ns": "launch", "host_sync_ns": "host-sync"}


def fmt_ns(ns: float | int | None) -> str:
    """Human duration: ``1.50 ms``, ``12.0 us``, ``800 ns``."""
    if ns is None:
        return ""
    v = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} ns"


def bar(row: dict[str, Any], width: int = BAR_WIDTH) -> str:
    """A text bar of the parts of one breakdown row; cells are rounded with the largest
    remainder method so the bar is always exactly ``width`` wide."""
    window = row["window_ns"] or 0
    if window <= 0:
        return " " * width
    exact = [(p, row[p] * width / window) for p in GLYPHS]
    cells = {p: int(x) for p, x in exact}
    rest = width - sum(cells.values())
    for p, _ in sorted(exact, key=lambda t: t[1] - int(t[1]), reverse=True)[:rest]:
        cells[p] += 1
    return "".join(GLYPHS[p] * cells[p] for p in GLYPHS)


def _breakdown(frame: pl.DataFrame) -> list[str]:
    lines = ["Where the time went (per device; "
             + ", ".join(f"{g} {p.removesuffix('_ns').replace('_', ' ')}"
                         for p, g in GLYPHS.items()) + ")"]
    for r in frame.iter_rows(named=True):
        w = r["window_ns"] or 1
        pct = "  ".join(f"{_LABELS.get(p, p.removesuffix('_ns'))} {r[p] * 100 / w:.1f}%"
                        for p in GLYPHS)
        lines.append(f"  rank {r['rank']} dev {r['device_id']}  [{bar(r)}]  "
                     f"{fmt_ns(r['window_ns'])}")
        lines.append(f"      {pct}")
        if r["comm_overlap_pct"] is not None:
            lines.append(f"      communication hidden under compute: "
                         f"{r['comm_overlap_pct']:.1f}% ({fmt_ns(r['overlapped_comm_ns'])})")
    return lines


def _window(frame: pl.DataFrame) -> list[str]:
    r = frame.row(0, named=True)
    return [f"Trace: {fmt_ns(r['dur_ns'])} ({r['start_ns']} .. {r['end_ns']} ns), "
            f"{r['devices']} device(s), {r['kernels']} kernels, {r['memops']} memory ops, "
            f"{r['api_calls']} API calls"]


def _top_kernels(frame: pl.DataFrame) -> list[str]:
    lines = ["Top kernels (by total time)"]
    for r in frame.iter_rows(named=True):
        name = r["name"] if len(r["name"]) <= 70 else r["name"][:69] + "…"
        lines.append(f"  {r['pct']:5.1f}%  {fmt_ns(r['total_ns']):>10}  x{r['instances']:<5} "
                     f"{name}")
    return lines


def _top_gaps(frame: pl.DataFrame) -> list[str]:
    lines = ["Largest idle gaps"]
    if frame.height == 0:
        return [*lines, "  (none above the threshold)"]
    for r in frame.iter_rows(named=True):
        why = r["cause"] + (f" ({r['cause_name']}, thread {r['cause_thread_id']})"
                            if r["cause_name"] else "")
        if r.get("cause_detail"):
            why += f"; {r['cause_detail']}"
        lines.append(f"  {fmt_ns(r['dur_ns']):>10}  rank {r['rank']} dev {r['device_id']} "
                     f"at {r['start_ns']} ns  {r['kind']}  {why}")
    return lines


def _launches(frame: pl.DataFrame) -> list[str]:
    rows = {r["metric"]: r for r in frame.iter_rows(named=True)}
    if not rows or not rows.get("launch_ns", {}).get("count"):
        return ["Launches", "  (no kernel linked to a launch call)"]
    lines = ["Launches (per kernel; p50 / p95 / p99)"]
    for metric, label in (("launch_ns", "launch call"), ("queue_ns", "launch-to-start"),
                          ("kernel_ns", "kernel")):
        r = rows.get(metric)
        if r and r["count"]:
            lines.append(f"  {label:<16} {fmt_ns(r['p50']):>10} {fmt_ns(r['p95']):>10} "
                         f"{fmt_ns(r['p99']):>10}   (n={r['count']})")
    short = rows.get("kernels_shorter_than_launch")
    if short and short["mean"] is not None:
        lines.append(f"  kernels shorter than their launch call: {short['count']} "
                     f"({short['mean'] * 100:.1f}%)")
    rec = rows.get("graph_recoverable_ns")
    if rec and rec["sum"]:
        where = f" on rank {rec['rank']}" if rec.get("rank") is not None else ""
        lines.append(f"  CUDA graphs could save {fmt_ns(rec['sum'])}{where} (replay without "
                     f"launch cost = whatif --no-launch-overhead; {rec['count']} launch-bound "
                     "kernels)")
    return lines


def _savings(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return []
    lines = ["Could save (per rank; the replay whatif runs, bounded by the part it removes)"]
    for r in frame.iter_rows(named=True):
        lines.append(f"  rank {r['rank']:<3} {r['change']:<20} {fmt_ns(r['saving_ns']):>10} "
                     f"of {fmt_ns(r['bound_ns'])}  (window {fmt_ns(r['measured_ns'])} -> "
                     f"{fmt_ns(r['predicted_ns'])})")
    return lines


def _stragglers(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return []
    lines = ["Stragglers (rank last to start a collective; summed skew)"]
    for r in frame.iter_rows(named=True):
        lines.append(f"  rank {r['straggler_rank']} dev {r['straggler_device']}  "
                     f"{r['calls']} call(s)  {fmt_ns(r['skew_ns'])}")
    return lines


def _communication(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return ["Communication", "  (no NCCL/RCCL activity)"]
    lines = ["Communication (per collective)"]
    for r in frame.iter_rows(named=True):
        bw = f"  busbw {r['busbw_gbps']:.1f} GB/s" if r["busbw_gbps"] is not None else ""
        lines.append(f"  {r['collective']:<16} x{r['count']:<5} {fmt_ns(r['time_ns']):>10}  "
                     f"exposed {r['exposed_pct']:.1f}%{bw}")
    return lines


#: Section name -> text renderer; sections without one are printed as a table.
RENDERERS: dict[str, Callable[[pl.DataFrame], list[str]]] = {
    "window": _window, "breakdown": _breakdown, "top_kernels": _top_kernels,
    "top_gaps": _top_gaps, "launches": _launches, "communication": _communication,
    "savings": _savings, "stragglers": _stragglers,
}


def render_text(summary: dict[str, Any]) -> str:
    """The summary as plain text: one block per section, the verdict last."""
    from traceparse.cli.common import render_table

    blocks = []
    for name, frame in summary["sections"].items():
        fn = RENDERERS.get(name)
        text = "\n".join(fn(frame)) if fn else f"{name}\n{render_table(frame)}"
        if text:
            blocks.append(text)
    blocks.append(f"Verdict: {summary['verdict']}")
    return "\n\n".join(blocks) + "\n"
