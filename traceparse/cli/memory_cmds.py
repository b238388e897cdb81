"""CLI command: ``memory TRACES...`` - device memory peaks per device, memory kind, step,
top-level op, or the allocated/reserved timeline (definitions: docs/memory.md)."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from traceparse.analyses.memory import VIEWS, memory_view
from traceparse.cli.common import FORMATS, emit, load_trace, render
from traceparse.cli.main import main
from traceparse.errors import UsageError


@main.command("memory")
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--by", "by", type=click.Choice(VIEWS), default="device", show_default=True,
              help="Peaks per device, memory kind, step or top-level op; or the timeline.")
@click.option("--top", type=click.IntRange(1, 100_000), default=20, show_default=True,
              help="Top-level ops listed (--by op), largest rise first.")
@click.option("--step-regex", default=None,
              help="Steps are host ranges matching this regex (default: ProfilerStep#N).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True, help="Output format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def memory(traces: tuple[str, ...], by: str, top: int, step_regex: str | None, fmt: str,
           output: str | None, force: bool) -> None:
    """Device memory of TRACES...: allocated/reserved peaks from Kineto [memory] events or
    nsys CUDA memory-usage events (--cuda-memory-usage=true)."""
    if output and Path(output).exists() and not force:
        raise UsageError(output, "exists; pass --force to overwrite it")
    frames = []
    for trace in traces:
        tl = load_trace(trace)
        if tl.memory.height == 0:
            click.echo(f"traceparse: {Path(trace).name}: the timeline holds no memory events "
                       "(captured with nsys --cuda-memory-usage=true or torch.profiler "
                       "profile_memory=True; `traceparse info` lists what was skipped)",
                       err=True)
            continue
        frame = memory_view(tl, by, top=top, step_regex=step_regex)
        if frame.height:
            frames.append(frame.with_columns(pl.lit(Path(trace).name).alias("trace"))
                          .select("trace", pl.exclude("trace")))
    out = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(
        {"trace": []}, schema={"trace": pl.String})
    emit(render(out, fmt, title=f"memory by {by}"), output)
