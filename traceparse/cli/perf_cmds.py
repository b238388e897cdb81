"""CLI commands: launches, comm, steps, nvtx. Each parses options, calls one library
function, renders and writes."""

from __future__ import annotations

import click

from traceparse.cli.common import emit, load_trace, output_options, render
from traceparse.cli.main import main

_TRACE = click.argument("trace", type=click.Path(exists=False))


@main.command("launches")
@_TRACE
@click.option("--report", type=click.Choice(["summary", "kernels", "kern_exec_sum", "graphs"]),
              default="summary", show_default=True,
              help="summary: distributions; kernels: one row per kernel; kern_exec_sum: the "
                   "nsys report (CSV identical to nsys stats); graphs: CUDA-graph estimate.")
@output_options
def launches_cmd(trace: str, report: str, fmt: str, output: str | None) -> None:
    """Kernel launch cost, queueing latency and what CUDA graphs could recover."""
    from traceparse.analyses import launches

    tl = load_trace(trace)
    if report == "kern_exec_sum":
        frame = launches.kern_exec_sum(tl)
        decimals = dict.fromkeys(launches.KERN_EXEC_FLOAT_COLS, 1)
    elif report == "kernels":
        frame, decimals = launches.launch_table(tl), {}
    elif report == "graphs":
        frame, decimals = launches.graph_recoverable(tl), {}
    else:
        frame, decimals = launches.launch_summary(tl), {}
    emit(render(frame, fmt, decimals=decimals, nsys_csv=report == "kern_exec_sum"), output)


@main.command("comm")
@_TRACE
@click.option("--report", type=click.Choice(["summary", "kernels", "skew", "stragglers"]),
              default="summary", show_default=True)
@output_options
def comm_cmd(trace: str, report: str, fmt: str, output: str | None) -> None:
    """NCCL collectives: time, exposed vs overlapped, bandwidth, cross-rank skew."""
    from traceparse.analyses import comm

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
    from traceparse.analyses import steps

    table = steps.step_table(load_trace(trace), step_regex=step_regex)
    emit(render(steps.step_summary(table) if summary else table, fmt), output)


@main.command("nvtx")
@_TRACE
@click.option("--report", type=click.Choice(["sum", "gpu"]), default="sum", show_default=True,
              help="sum: nsys nvtx_sum; gpu: GPU time projected onto ranges.")
@output_options
def nvtx_cmd(trace: str, report: str, fmt: str, output: str | None) -> None:
    """NVTX range statistics (as nsys nvtx_sum) or GPU time per innermost range."""
    from traceparse.analyses import ranges

    tl = load_trace(trace)
    if report == "gpu":
        emit(render(ranges.gpu_projection(tl), fmt), output)
        return
    dec = dict.fromkeys(["Time (%)", "Avg (ns)", "Med (ns)", "StdDev (ns)"], 1)
    frame = ranges.nvtx_sum(tl)
    emit(render(frame, fmt, decimals=dec, nsys_csv=True), output)
