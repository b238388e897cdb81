"""Text rendering of :func:`traceparse.analyses.summary.summarize` (one screen): pure, returns a
str."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from traceparse import units
from traceparse.reports.rec_base import unprofiled_clause

#: Bar glyph per attribution part, in priority order.
GLYPHS = {"compute_ns": "#", "communication_ns": "C", "memory_ns": "M",
          "launch_overhead_ns": "L", "warmup_ns": "W", "host_sync_ns": "S", "idle_ns": "."}
BAR_WIDTH = 50
_LABELS = {"launch_overhead_ns": "launch", "host_sync_ns": "host-sync"}


def fmt_ns(ns: float | int | None) -> str:
    """Human duration (:func:`traceparse.units.duration`): ``1.50 ms``, ``12.0 µs``."""
    return units.duration(ns)


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
    return [f"Trace: {fmt_ns(r['dur_ns'])}, {units.plural(r['devices'], 'device')}, "
            f"{units.plural(r['kernels'], 'kernel')}, "
            f"{units.plural(r['memops'], 'memory op')}, "
            f"{units.plural(r['api_calls'], 'API call')}"]


def _top_kernels(frame: pl.DataFrame) -> list[str]:
    lines = ["Top kernels (by total time)"]
    for r in frame.iter_rows(named=True):
        name = units.shorten(r["name"], 70)
        lines.append(f"  {r['pct']:5.1f}%  {fmt_ns(r['total_ns']):>10}  x{r['instances']:<5} "
                     f"{name}")
    return lines


def _top_gaps(frame: pl.DataFrame, t0: int | None = None) -> list[str]:
    lines = ["Largest idle gaps"]
    if frame.height == 0:
        return [*lines, "  (none above the threshold)"]
    for r in frame.iter_rows(named=True):
        thread = (f", thread {r['cause_thread_id']}" if r.get("cause_thread_id") is not None
                  else "")
        why = r["cause"] + (f" ({r['cause_name']}{thread})" if r["cause_name"] else "")
        if r.get("cause_detail"):
            why += f"; {r['cause_detail']}"
        lines.append(f"  {fmt_ns(r['dur_ns']):>10}  rank {r['rank']} dev {r['device_id']} "
                     f"at {units.timestamp(r['start_ns'], t0)}  {r['kind']}  {why}")
    return lines


def _launches(frame: pl.DataFrame, savings: pl.DataFrame | None = None) -> list[str]:
    rows = {r["metric"]: r for r in frame.iter_rows(named=True)}
    graphs = rows.get("graph_launches")
    if not rows or not (rows.get("launch_ns", {}).get("count") or graphs):
        return ["Launches", "  (no kernel linked to a launch call)"]
    lines = ["Launches (per kernel; p50 / p95 / p99)"]
    for metric, label in (("launch_ns", "launch call"), ("queue_ns", "launch-to-start"),
                          ("kernel_ns", "kernel")):
        r = rows.get(metric)
        if r and r["count"]:
            lines.append(f"  {label:<16} {fmt_ns(r['p50']):>10} {fmt_ns(r['p95']):>10} "
                         f"{fmt_ns(r['p99']):>10}   (n={r['count']})")
    if graphs:
        lines.append(f"  {'graph launch':<16} {fmt_ns(graphs['p50']):>10} "
                     f"{fmt_ns(graphs['p95']):>10} {fmt_ns(graphs['p99']):>10}   "
                     f"(n={graphs['count']} calls replaying {int(graphs['sum']):,} kernels, "
                     f"{graphs['mean']:,.0f} per launch"
                     + ("; not in the rows above)" if len(lines) > 1 else ")"))
    short = rows.get("kernels_shorter_than_launch")
    if short and short["mean"] is not None:
        lines.append(f"  kernels shorter than their launch call: {short['count']} "
                     f"({short['mean'] * 100:.1f}%)")
    rec = rows.get("graph_recoverable_ns")
    if rec and rec["sum"]:
        where = f" on rank {rec['rank']}" if rec.get("rank") is not None else ""
        # the same engine row's profiler-free figure, as "Could save" quotes it
        from traceparse.analyses.savings import best

        top = best(savings, "no_launch_overhead") if savings is not None else None
        unprof = unprofiled_clause(top) if top else ""
        lines.append(f"  CUDA graphs could save {fmt_ns(rec['sum'])}{where} (issuing time of "
                     f"each step removed = whatif --fix cuda-graphs; "
                     f"{units.plural(rec['count'], 'launch-bound kernel')}{unprof})")
    return lines


def _savings(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return []
    # a change whose part is absent (no communication to overlap) is not news, nor is one
    # whose replay saves exactly nothing (no sync holds the GPU back): skip them
    frame = frame.filter((pl.col("bound_ns") > 0) & (pl.col("saving_ns") != 0))
    if frame.height == 0:
        return []
    lines = ["Could save (per rank; the replay of whatif --fix FIX, bounded by the part it "
             "removes)"]
    # several ranks: mark the row every headline quotes (savings.best)
    mark = frame.get_column("rank").n_unique() > 1 and "bounds_job" in frame.columns
    for r in frame.iter_rows(named=True):
        # a replay longer than the measured window saves nothing: say so, with the
        # replay's own error, instead of quoting a negative saving
        saved = (f"{fmt_ns(r['saving_ns']):>10}" if r["saving_ns"] >= 0 else
                 f"{'none':>10} (the replay runs {fmt_ns(-r['saving_ns'])} longer)")
        unprof = unprofiled_clause(r)
        star = "*" if mark and r["bounds_job"] else " "
        lines.append(f" {star}rank {r['rank']:<3} {r.get('fix') or r['change']:<20} {saved} "
                     f"of {fmt_ns(r['bound_ns'])}  (window {fmt_ns(r['measured_ns'])} -> "
                     f"{fmt_ns(r['predicted_ns'])}{unprof})")
    if mark:
        lines.append("  * the rank each fix's headline quotes: where ranks wait for one another "
                     "in collectives, the one with the longest window after the fix (the job "
                     "is as fast as its slowest rank), else the one that saves most")
    return lines


def _stragglers(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return []
    lines = ["Stragglers (rank last to start a collective; summed skew; what the other "
             "ranks waited for it)"]
    for r in frame.iter_rows(named=True):
        lines.append(f"  rank {r['straggler_rank']} dev {r['straggler_device']}  "
                     f"{units.plural(r['calls'], 'call')}  {fmt_ns(r['skew_ns'])}  "
                     f"waited {fmt_ns(r['wait_ns'])}")
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


def _gpu_metrics(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return []
    khz = frame["sampled_khz"][0]
    src = f"nsys GPU metrics, sampled at {khz:.3g} kHz" if khz else "nsys GPU metrics"
    lines = [f"Measured GPU metrics per kernel ({src}; time-weighted over each launch)",
             "  SM act  SM iss  tensor  DRAM rd+wr     DRAM B/s      clock  vs spec  kernel"]
    def pct(r: dict[str, Any], col: str) -> str:
        v = r.get(col)
        return f"{v:5.1f}%" if v is not None else "     -"

    for r in frame.iter_rows(named=True):
        dram = (r.get("dram_read_pct") or 0.0) + (r.get("dram_write_pct") or 0.0)
        bw = r.get("dram_bytes_per_s")
        bw_s = f"{bw / 1e9:7.1f} GB/s" if bw is not None else "          -"
        clock = r.get("gpc_clock_hz")
        clk = f"{clock / 1e9:5.2f} GHz" if clock else "        -"
        ratio = r.get("clock_vs_spec")
        clk += f"  {ratio:6.2f}x" if ratio else "        -"
        name = r["name"] if len(r["name"]) <= 50 else r["name"][:49] + "…"
        lines.append(f"  {pct(r, 'sm_active_pct')}  {pct(r, 'sm_issue_pct')}  "
                     f"{pct(r, 'tensor_active_pct')}  {dram:9.1f}%  {bw_s}  {clk}  {name}")
    return lines


def _gpu_clock(frame: pl.DataFrame) -> list[str]:
    from traceparse.analyses.metrics import clock_line

    if frame.height == 0:
        return []
    return ["GPU clock during kernels vs the listed clock (throttling)"] + [
        f"  {clock_line(r)}" for r in frame.iter_rows(named=True)]


def _memory(frame: pl.DataFrame, t0: int | None = None) -> list[str]:
    """Peaks in the units of ``traceparse memory`` (sizes, times from the trace start)."""
    if frame.height == 0:
        return []
    lines = ["Device memory (peak allocated; replayed = levels from event sizes, relative to "
             "the capture start)"]
    for r in frame.iter_rows(named=True):
        res = (f", reserved peak {units.size(r['peak_reserved_bytes'])}"
               if r["peak_reserved_bytes"] is not None else "")
        how = " (replayed)" if r["replayed"] else ""
        off = (f"; not device memory (managed/host kinds, see memory --by kind): peak "
               f"{units.size(r['not_device_peak_bytes'])}"
               if r.get("not_device_peak_bytes") is not None else "")
        if r["peak_allocated_bytes"] is None:  # only unified/host memory on this device
            lines.append(f"  rank {r['rank']} dev {r['device_id']}: no device memory "
                         f"events{off}")
            continue
        lines.append(f"  rank {r['rank']} dev {r['device_id']}: peak "
                     f"{units.size(r['peak_allocated_bytes'])} at "
                     f"{units.timestamp(r['peak_ts_ns'], t0)}"
                     f"{how}{res}; {r['allocs']} allocs, {r['frees']} frees{off}")
    return lines


def _graphs(frame: pl.DataFrame) -> list[str]:
    if frame.height == 0:
        return []
    return ["CUDA/HIP graphs"] + [f"  {n}" for n in frame["note"].to_list()]


#: Section name -> text renderer; sections without one are printed as a table.
RENDERERS: dict[str, Callable[[pl.DataFrame], list[str]]] = {
    "window": _window, "breakdown": _breakdown, "top_kernels": _top_kernels,
    "top_gaps": _top_gaps, "launches": _launches, "communication": _communication,
    "gpu_metrics": _gpu_metrics, "gpu_clock": _gpu_clock, "memory": _memory, "graphs": _graphs,
    "savings": _savings, "stragglers": _stragglers,
}


#: Sections left out of the text when empty (they apply to some traces only).
OPTIONAL = ("phases", "phase_mix", "layers", "op_tree")


def _phases(frame: pl.DataFrame) -> list[str]:
    lines = ["Phases (steps: step time P50 / P95 / P99, tokens/s, compute %, achieved FLOP/s)"]
    for r in frame.iter_rows(named=True):
        tok = f"{r['tokens_per_s']:,.0f} tok/s" if r.get("tokens_per_s") is not None else ""
        comp, tf = r.get("compute_pct"), r.get("tflop_per_s")
        lines.append(f"  {r['phase']:<8} x{r['steps']:<4} {fmt_ns(r['step_p50_ns']):>10} "
                     f"{fmt_ns(r['step_p95_ns']):>10} {fmt_ns(r['step_p99_ns']):>10}  {tok:>14}"
                     + (f"  compute {comp:.1f}%" if comp is not None else "")
                     # in the unit the rate reaches: DLRM's 3.78 GFLOP/s read "0.0 TFLOP/s"
                     + (f"  {units.tflops(tf * 1e12)}" if tf is not None else ""))
    return lines


def _op_tree(frame: pl.DataFrame) -> list[str]:
    view = frame["view"][0] if "view" in frame.columns else "ops"
    ranked = "rank" in frame.columns  # several ranks: one subtree each (traceparse tree)
    lines = [f"Kernel time by {view} tree (inclusive, % of all kernel time)" if not ranked
             else f"Kernel time by {view} tree, one subtree per rank rN (inclusive, % of all "
                  "ranks' kernel time; the first rows of each rank's subtree)"]
    for r in frame.iter_rows(named=True):
        pre = "" if not ranked or r["rank"] is None else f"r{r['rank']:<3}"
        name = (pre + "  " * r["depth"] + r["name"])[:70]
        lines.append(f"  {name:<70} {fmt_ns(r['inclusive_ns']):>10} "
                     f"{r['inclusive_pct']:6.1f}%  x{r['kernels']}")
    return lines


def _phase_mix(frame: pl.DataFrame) -> list[str]:
    lines = ["Kernel mix per phase (class, % of the phase's kernel time)"]
    for r in frame.iter_rows(named=True):
        lines.append(f"  {r['phase']:<8} {r['kernel_class']:<12} {r['pct']:5.1f}%  "
                     f"{fmt_ns(r['kernel_ns']):>10}  e.g. {str(r['top_kernel'])[:50]}")
    return lines


def _layers(frame: pl.DataFrame) -> list[str]:
    ranked = "rank" in frame.columns  # several ranks: each rank's groups (traceparse layers)
    lines = ["Repeated layers (per-layer kernel time: median, slowest, spread)" if not ranked
             else "Repeated layers per rank rN (one GPU's per-layer kernel time: median, "
                  "slowest, spread)"]
    for r in frame.iter_rows(named=True):
        name = f"r{r['rank']:<3}{r['layer']}" if ranked else str(r["layer"])
        lines.append(f"  {name[:40]:<40} x{r['layers']:<3} median "
                     f"{fmt_ns(r['median_ns']):>10}  slowest #{r['slowest']} "
                     f"{fmt_ns(r['max_ns']):>10}  spread {r['spread_pct']:.1f}%"
                     + ("" if r["same_structure"] else "  (layers differ in ops)"))
    return lines


RENDERERS.update(phases=_phases, phase_mix=_phase_mix, layers=_layers, op_tree=_op_tree)


def render_text(summary: dict[str, Any]) -> str:
    """The summary as plain text: one block per section, the verdict last."""
    from traceparse.cli.common import render_table

    blocks = []
    window = summary["sections"].get("window")
    t0 = window["start_ns"][0] if window is not None and window.height else None
    for name, frame in summary["sections"].items():
        if name in OPTIONAL and frame.height == 0:
            continue
        fn = RENDERERS.get(name)
        if name == "launches":  # its CUDA-graph line quotes the savings' row too
            lines = _launches(frame, summary["sections"].get("savings"))
            if lines:
                blocks.append("\n".join(lines))
            continue
        if name in ("top_gaps", "memory"):  # their times are shown from the trace start
            lines = _top_gaps(frame, t0) if name == "top_gaps" else _memory(frame, t0)
            if lines:
                blocks.append("\n".join(lines))
            continue
        lines = fn(frame) if fn else [f"{name}\n{render_table(frame)}"]
        if lines:  # a renderer returns no lines for content the trace does not have
            blocks.append("\n".join(lines))
    blocks.append(f"Verdict: {summary['verdict']}")
    return "\n\n".join(blocks) + "\n"


def render_ncu_text(result: dict[str, Any]) -> str:
    """The ncu summary as plain text (the renderers' table rules: units, no exponents)."""
    from traceparse.cli.common import render

    w = result["sections"]["ncu_window"].row(0, named=True)
    lines = [f"Nsight Compute page: {units.plural(int(w['launches']), 'launch')}, "
             f"{units.plural(int(w['kernels']), 'kernel')}"
             + (f" on {w['device']}" if w["device"] else "")
             + (f", kernel time {units.duration(w['kernel_time_ns'])}"
                if w["kernel_time_ns"] else ", no kernel durations in this page")
             + (f", SM clock {units.clock(w['sm_clock_hz'])} (median, measured)"
                if w["sm_clock_hz"] else ""),
             "", f"Roofline: {result['coverage_line']}", "",
             "Kernels (by profiled time)"]
    k = result["sections"]["ncu_kernels"]
    lines.append(render(k, "table").rstrip() if k.height else "  (none)")
    lines += ["", f"Verdict: {result['verdict']}"]
    return "\n".join(lines) + "\n"
