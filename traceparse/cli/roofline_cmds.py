"""CLI commands: roofline, gpus. Each command parses options, calls one library function and
writes the output."""

from __future__ import annotations

from pathlib import Path

import click

from traceparse.cli.common import (
    check_output,
    emit,
    emit_bytes,
    emit_frame,
    gpu_option,
    load_trace,
    output_options,
    render,
    traces_argument,
)
from traceparse.cli.inputs import gpu_row, load_traces
from traceparse.cli.main import main
from traceparse.errors import UsageError

POINT_COLS = ["kernel_name", "launches", "time_ns", "precision", "provenance", "placed",
              "flop_per_s", "dram_bytes_per_s", "dram_bytes_per_s_lo",
              "dram_bytes_per_s_hi", "dram_pct_of_peak", "ai_dram", "ai_l2", "ai_l1",
              "peak_flop_per_s", "peak_dram_bytes_per_s", "ridge", "pct_of_roof", "bound", "note"]


@main.command("roofline")
@traces_argument
@click.option("--ncu", "ncu_csv", type=click.Path(dir_okay=False), default=None,
              metavar="CSV", help="Nsight Compute CSV with the measured launches of TRACE.")
@gpu_option
@click.option("--ceilings", "ceilings_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE",
              help="CSV/JSON of measured ceilings (name,kind,value) overriding the others.")
@output_options(formats=("table", "csv", "json", "chart"), default="table",
                output_help="Write to FILE instead of stdout; a FILE ending in .png or .svg "
                            "gets the chart (as --format chart).")
def roofline_cmd(traces: tuple[str, ...], ncu_csv: str | None, gpu: str | None,
                 ceilings_file: str | None, fmt: str, output: str | None,
                 force: bool) -> None:
    """Roofline of TRACE... (an ncu CSV, or an nsys/torch trace with --ncu or op shapes):
    the points as a table/CSV/JSON, or a PNG/SVG chart."""
    from traceparse.roofline.build import build
    from traceparse.roofline.coverage import coverage_line, step_line

    if output and output.lower().endswith((".png", ".svg")):
        fmt = "chart"
    if output:
        check_output(output)
    tl = load_traces(traces)
    extra = load_trace(ncu_csv) if ncu_csv else None
    points, ceil, notes = build(tl, ncu=extra, gpu=str(gpu_row(gpu)["name"]) if gpu else None,
                                ceilings_file=ceilings_file)
    for key in ("gpu_mismatch", "gpu_unknown"):
        if notes.get(key):
            click.echo(f"traceparse: warning: {notes[key]}", err=True)
    click.echo(f"roofline: {coverage_line(notes['coverage'])}", err=True)
    for st in notes.get("steps", [])[:20]:
        click.echo(f"roofline: {step_line(st)}", err=True)
    for reason, n in notes.get("unplaced", {}).items():
        click.echo(f"roofline: not placed ({n} kernel{'s' if n != 1 else ''}): {reason}",
                   err=True)
    if fmt == "chart":
        from traceparse.roofline.chart import render as draw
        from traceparse.roofline.chart import title_for

        if not output:
            raise UsageError(None, "--format chart needs -o FILE.png or FILE.svg")
        if not points.height or not points["placed"].any():
            why = "; ".join(notes.get("unplaced", {})) or (
                "no ncu counters and no op shapes (use --ncu CSV)")
            names = ", ".join(Path(t).name for t in traces)
            raise UsageError(None, f"{names}: no kernel placed on the roofline, "
                             f"no chart written: {why}")
        kind = "svg" if output.lower().endswith(".svg") else "png"
        title = title_for(notes.get("ceiling_table_row") or notes.get("gpu"),
                          notes.get("sm_clock_hz"), clock_source=notes.get("clock_source"))
        emit_bytes(draw(points, ceil, fmt=kind, title=title), output)
        return
    cols = [c for c in POINT_COLS if c in points.columns]
    emit_frame(points.select(cols), fmt, output,
               empty="no kernel could be placed on the roofline: no ncu metrics, and no op "
                     "with recorded shapes to estimate FLOPs and bytes from (give --ncu CSV)")


@main.command("gpus")
@output_options
def gpus_cmd(fmt: str, output: str | None, force: bool) -> None:
    """The shipped GPU ceiling table (dense peaks, bandwidth, clocks, sources); the names
    are what --gpu accepts."""
    from traceparse.roofline.gpus import table

    emit(render(table(), fmt), output)
