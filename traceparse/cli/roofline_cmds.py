"""CLI commands: roofline, gpus. Each command parses options, calls one library function and
writes the output."""

from __future__ import annotations

from pathlib import Path

import click

from traceparse.atomic import write_bytes
from traceparse.cli.common import emit, load_trace, render
from traceparse.cli.main import main
from traceparse.errors import UsageError

POINT_COLS = ["kernel_name", "launches", "time_ns", "precision", "provenance", "flop_per_s",
              "dram_bytes_per_s", "ai_dram", "ai_l2", "ai_l1", "peak_flop_per_s",
              "peak_dram_bytes_per_s", "ridge", "pct_of_roof", "bound"]


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

    tl = load_trace(trace)
    extra = load_trace(ncu_csv) if ncu_csv else None
    points, ceil, _notes = build(tl, ncu=extra, gpu=gpu, ceilings_file=ceilings_file)
    if fmt == "chart":
        from traceparse.roofline.chart import render as draw

        if not output:
            raise UsageError(None, "--format chart needs -o FILE.png or FILE.svg")
        kind = "svg" if output.lower().endswith(".svg") else "png"
        write_bytes(output, draw(points, ceil, fmt=kind, title=f"Roofline: {Path(trace).name}"))
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
