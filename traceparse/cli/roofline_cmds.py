"""CLI commands: roofline, gpus. Each command parses options, calls one library function and
writes the output."""

from __future__ import annotations

from pathlib import Path

import click

from traceparse.atomic import write_bytes
from traceparse.cli.common import emit, load_trace, render
from traceparse.cli.main import main
from traceparse.errors import UsageError

POINT_COLS = ["kernel_name", "launches", "time_ns", "precision", "provenance", "placed",
              "flop_per_s", "dram_bytes_per_s", "ai_dram", "ai_l2", "ai_l1", "peak_flop_per_s",
              "peak_dram_bytes_per_s", "ridge", "pct_of_roof", "bound", "note"]


@main.command("roofline")
@click.argument("trace", type=click.Path(dir_okay=True))
@click.option("--ncu", "ncu_csv", type=click.Path(dir_okay=False), default=None,
              help="Nsight Compute CSV with the measured launches of TRACE.")
@click.option("--gpu", default=None, help="GPU name for datasheet ceilings (e.g. 'H100 SXM').")
@click.option("--ceilings", "ceilings_file", type=click.Path(dir_okay=False), default=None,
              help="CSV/JSON of measured ceilings (name,kind,value) overriding the others.")
@click.option("--format", "fmt", type=click.Choice(["chart", "csv", "json", "table"]),
              default="chart", show_default=True,
              help="chart writes PNG/SVG (by -o suffix); csv/json/table print the points.")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Output file (roofline.png / roofline.svg for charts).")
def roofline_cmd(trace: str, ncu_csv: str | None, gpu: str | None,
                 ceilings_file: str | None, fmt: str, output: str | None) -> None:
    """Roofline of TRACE (an ncu CSV, or an nsys/torch trace with --ncu or op shapes)."""
    from traceparse.roofline.build import build
    from traceparse.roofline.coverage import coverage_line, step_line

    tl = load_trace(trace)
    extra = load_trace(ncu_csv) if ncu_csv else None
    points, ceil, notes = build(tl, ncu=extra, gpu=gpu, ceilings_file=ceilings_file)
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
            raise UsageError(None, f"{Path(trace).name}: no kernel placed on the roofline, "
                             f"no chart written: {why}")
        kind = "svg" if output.lower().endswith(".svg") else "png"
        title = title_for(notes.get("ceiling_table_row") or notes.get("gpu"),
                          notes.get("sm_clock_hz"))
        write_bytes(output, draw(points, ceil, fmt=kind, title=title))
        return
    cols = [c for c in POINT_COLS if c in points.columns]
    emit(render(points.select(cols), fmt), output)


@main.command("gpus")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False))
def gpus_cmd(fmt: str, output: str | None) -> None:
    """The shipped GPU ceiling table (dense peaks, bandwidth, clocks, sources)."""
    from traceparse.roofline.gpus import table

    emit(render(table(), fmt), output)
