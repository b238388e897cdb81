"""CLI command: ``memory TRACE...`` - device memory peaks per device, memory kind, step,
top-level op, or the allocated/reserved timeline (definitions: docs/memory.md)."""

from __future__ import annotations

import click
import polars as pl

from traceparse.analyses.memory import VIEWS, memory_view
from traceparse.cli.common import (
    emit,
    emit_frame,
    no_events,
    output_options,
    steps_option,
    trace_start,
    traces_argument,
)
from traceparse.cli.inputs import load_traces
from traceparse.cli.main import main


@main.command("memory")
@traces_argument
@click.option("--by", "by", type=click.Choice(VIEWS), default="device", show_default=True,
              help="Peaks per device, memory kind, step or top-level op; or the timeline.")
@click.option("--top", type=click.IntRange(1, 100_000), default=20, show_default=True,
              help="Top-level ops listed (--by op), largest rise first.")
@steps_option
@output_options
def memory(traces: tuple[str, ...], by: str, top: int, steps: str | None, fmt: str,
           output: str | None, force: bool) -> None:
    """Device memory of TRACE...: allocated/reserved peaks from Kineto [memory] events or
    nsys CUDA memory-usage events (--cuda-memory-usage=true)."""
    tl = load_traces(traces, timeline=True)
    if (why := no_events(tl, traces)) is not None:
        emit(why + "\n", output)
        return
    if tl.memory.height:
        frame, empty = memory_view(tl, by, top=top, step_regex=steps), f"no memory figures by {by}"
    else:
        frame = pl.DataFrame()
        empty = ("the timeline holds no memory events (capture with nsys "
                 "--cuda-memory-usage=true or torch.profiler profile_memory=True; "
                 "`traceparse info` lists what was read)")
    emit_frame(frame, fmt, output, empty=empty, start_ns=trace_start(tl))
