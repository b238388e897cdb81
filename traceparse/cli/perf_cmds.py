"""CLI commands: launches, comm, steps, nvtx. Each parses options, calls one library
function, renders and writes."""

from __future__ import annotations

import click
import polars as pl

from traceparse.cli.common import emit, load_trace, output_options, render
from traceparse.cli.main import main

_TRACE = click.argument("trace", type=click.Path(exists=False))


def render_nsys_csv(frame: pl.DataFrame, decimals: dict[str, int]) -> str:
    """CSV exactly as ``nsys stats --format csv`` writes it: a field is quoted only when it
    holds a comma or a line break (a bare ``"`` stays as is); floats to ``decimals``."""
    def cell(col: str, v: object) -> str:
        if v is None:
            return ""
        text = f"{v:.{decimals[col]}f}" if isinstance(v, float) and col in decimals else str(v)
        if "," in text or "\n" in text:
            return '"' + text.replace('"', '""') + '"'
        return text

    lines = [",".join(frame.columns)]
    lines += [",".join(cell(c, v) for c, v in zip(frame.columns, row, strict=True))
              for row in frame.iter_rows()]
    return "\n".join(lines) + "\n"


@main.command("launches")
@_TRACE
@click.option("--report", type=click.Choice(["summary", "kernels", "kern_exec_sum", "graphs"]),
              default="summary", show_default=True,
              help="summary: distributions; kernels: one row per kernel; kern_exec_sum: the "
                   "nsys report (CSV identical to nsys stats); graphs: CUDA-graph estimate.")
@output_options
def launches_cmd(trace: str, report: str, fmt: str, output: str | None) -> None:
    """Kernel launch cost, queueing latency and what CUDA graphs could recover."""
    from analyses import launches

    tl = load_trace(trace)
    if report == "kern_exec_sum":
        frame = launches.kern_exec_sum(tl)
        decimals = dict.fromkeys(launches.KERN_EXEC_FLOAT_COLS, 1)
        if fmt == "csv":
            emit(render_nsys_csv(frame, decimals), output)
            return
    elif report == "kernels":
        frame, decimals = launches.launch_table(tl), {}
    elif report == "graphs":
        frame, decimals = launches.graph_recoverable(tl), {}
    else:
        frame, decimals = launches.launch_summary(tl), {}
    emit(render(frame, fmt, decimals=decimals), output)


@main.command("comm")
@_TRACE
@click.option("--report", type=click.Choice(["summary", "kernels", "skew", "stragglers"]),
              default="summary", show_default=True)
@output_options
def comm_cmd(trace: str, report: str, fmt: str, output: str | None) -> None:
    """NCCL collectives: time, exposed vs overlapped, bandwidth, cross-rank skew."""
    from analyses import comm

    tl = load_trace(trace)
    fn = {"summary": comm.comm_summary, "kernels": comm.collectives,
          "skew": comm.collective_skew, "stragglers": comm.straggler_summary}[report]
    emit(render(fn(tl), fmt), output)


@main.command("steps")
@_TRACE
@click.option("--step", "step_regex", default=None,
              help="Regex of step range names (default: ProfilerStep#N ranges).")
@click.option("--summary", is_flag=True, help="P50/P95/P99 over steps instead of per step.")
@output_options
def steps_cmd(trace: str, step_regex: str | None, summary: bool, fmt: str,
              output: str | None) -> None:
    """Per-step wall time, GPU busy time, attribution and outlier steps."""
    from analyses import steps

    table = steps.step_table(load_trace(trace), step_regex=step_regex)
    emit(render(steps.step_summary(table) if summary else table, fmt), output)


@main.command("nvtx")
@_TRACE
@click.option("--report", type=click.Choice(["sum", "gpu"]), default="sum", show_default=True,
              help="sum: nsys nvtx_sum; gpu: GPU time projected onto ranges.")
@output_options
def nvtx_cmd(trace: str, report: str, fmt: str, output: str | None) -> None:
    """NVTX range statistics (as nsys nvtx_sum) or GPU time per innermost range."""
    from analyses import ranges

    tl = load_trace(trace)
    if report == "gpu":
        emit(render(ranges.gpu_projection(tl), fmt), output)
        return
    dec = dict.fromkeys(["Time (%)", "Avg (ns)", "Med (ns)", "StdDev (ns)"], 1)
    frame = ranges.nvtx_sum(tl)
    emit(render_nsys_csv(frame, dec) if fmt == "csv" else render(frame, fmt, decimals=dec),
         output)
