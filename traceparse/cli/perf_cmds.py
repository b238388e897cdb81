"""CLI commands: launches, comm, steps, nvtx. Each parses options, calls one library
function, renders and writes (inputs and outputs as in :mod:`traceparse.cli.common`)."""

from __future__ import annotations

import click

from traceparse.cli.common import (
    emit,
    emit_frame,
    no_events,
    output_options,
    steps_option,
    trace_start,
    traces_argument,
)
from traceparse.cli.executors import chunked_input, executor_options, split_executor
from traceparse.cli.inputs import load_traces, resolve
from traceparse.cli.main import main
from traceparse.errors import UsageError

_NO_LAUNCH = ("no kernel is linked to a launch call (the trace has no kernels, or no "
              "runtime/driver API calls with correlation ids)")


@main.command("launches")
@traces_argument
@click.option("--report", type=click.Choice(["summary", "kernels", "kern_exec_sum", "graphs"]),
              default="summary", show_default=True,
              help="summary: distributions; kernels: one row per kernel; kern_exec_sum: the "
                   "nsys report (CSV identical to nsys stats); graphs: what replaying the "
                   "launches as a CUDA graph (HIP graph on AMD) could recover (runs on "
                   "--executor chunks/dask).")
@executor_options
@output_options
def launches_cmd(traces: tuple[str, ...], report: str, fmt: str, output: str | None,
                 force: bool, executor: str, chunk_rows: int, workers: int) -> None:
    """Kernel launch cost, queueing latency and what CUDA/HIP graphs could recover."""
    from traceparse.analyses import launches

    kind, address = split_executor(executor)
    if kind != "memory":
        if report != "graphs":
            raise UsageError(None, f"--executor {kind} computes --report graphs only: the "
                                   "distributions' savings row needs the what-if replay, "
                                   "which is not read in pieces yet")
        from traceparse import launch_chunks

        found = launch_chunks.graph_recoverable(
            chunked_input(resolve(traces), kind), executor=kind, chunk_rows=chunk_rows,
            workers=workers, scheduler=address)
        if found is not None:  # None: no GPU row; the whole timeline words it
            emit_frame(found, fmt, output, empty=_NO_LAUNCH)
            return
    tl = load_traces(traces, timeline=True)
    if (why := no_events(tl, traces)) is not None:
        emit(why + "\n", output)
        return
    if report == "kern_exec_sum":
        frame = launches.kern_exec_sum(tl)
        decimals = dict.fromkeys(launches.KERN_EXEC_FLOAT_COLS, 1)
    elif report == "kernels":
        frame, decimals = launches.launch_table(tl), {}
    elif report == "graphs":
        frame, decimals = launches.graph_recoverable(tl), {}
    else:
        frame, decimals = launches.launch_summary(tl), {}
    linked = launches.launch_table(tl).height if report == "summary" else frame.height
    if not linked:
        frame = frame.clear()
    emit_frame(frame, fmt, output, empty=_NO_LAUNCH, decimals=decimals,
               nsys_csv=report == "kern_exec_sum", start_ns=trace_start(tl))


@main.command("comm")
@traces_argument
@click.option("--report", type=click.Choice(["summary", "kernels", "skew", "stragglers"]),
              default="summary", show_default=True,
              help="summary: per collective; kernels: one row per collective kernel; skew: "
                   "cross-rank start/end spread per collective call; stragglers: the rank "
                   "that arrives last, per call.")
@output_options
def comm_cmd(traces: tuple[str, ...], report: str, fmt: str, output: str | None,
             force: bool) -> None:
    """NCCL/RCCL collectives: time, exposed vs overlapped, bandwidth, cross-rank skew."""
    from traceparse.analyses import comm

    tl = load_traces(traces, timeline=True)
    if (why := no_events(tl, traces)) is not None:
        emit(why + "\n", output)
        return
    fn = {"summary": comm.comm_summary, "kernels": comm.collectives,
          "skew": comm.collective_skew, "stragglers": comm.straggler_summary}[report]
    frame = fn(tl)
    if comm.collectives(tl).height == 0:
        why = comm.no_collectives_reason(tl)
    elif report in ("skew", "stragglers"):
        why = "no collective call seen on more than one rank (skew needs several ranks)"
    else:
        why = "no collectives"
    emit_frame(frame, fmt, output, empty=why, start_ns=trace_start(tl))


@main.command("steps")
@traces_argument
@steps_option
@click.option("--summary", is_flag=True, help="P50/P95/P99 over steps instead of per step.")
@click.option("--by", "by", type=click.Choice(["step", "phase"]), default="step",
              show_default=True,
              help="phase: classify each step prefill/decode/mixed/capture/train (serving "
                   "annotations, model-runner frames, then op shapes; see docs/llm.md); with "
                   "--summary one row per phase (P50/P95/P99, tokens/s, attribution).")
@output_options
def steps_cmd(traces: tuple[str, ...], steps: str | None, summary: bool, by: str, fmt: str,
              output: str | None, force: bool) -> None:
    """Per-step wall time, GPU busy time, attribution and outlier steps (or, with
    ``--by phase``, LLM serving/training phases)."""
    from traceparse.analyses import steps as steps_mod

    tl = load_traces(traces, timeline=True)
    if (why := no_events(tl, traces)) is not None:
        emit(why + "\n", output)
        return
    if by == "phase":
        from traceparse.cli.llm_cmds import phase_frames

        emit_frame(phase_frames(tl, steps=steps, summary=summary), fmt, output,
                   empty="no serving or training steps found (no step[...] / execute_model "
                         "annotations, ProfilerStep#N ranges or --steps matches)",
                   start_ns=trace_start(tl))
        return
    table = steps_mod.step_table(tl, step_regex=steps)
    why = (f"no host range matches --steps {steps!r}" if steps is not None else
           "no step markers in the trace (no ProfilerStep#N ranges); name the step ranges "
           "with --steps REGEX")
    emit_frame(steps_mod.step_summary(table) if summary and table.height else table, fmt,
               output, empty=why, start_ns=trace_start(tl))


@main.command("nvtx")
@traces_argument
@click.option("--report", type=click.Choice(["sum", "gpu"]), default="sum", show_default=True,
              help="sum: nsys nvtx_sum; gpu: GPU time projected onto ranges.")
@output_options
def nvtx_cmd(traces: tuple[str, ...], report: str, fmt: str, output: str | None,
             force: bool) -> None:
    """NVTX range statistics (as nsys nvtx_sum) or GPU time per innermost range."""
    from traceparse.analyses import ranges

    tl = load_traces(traces, timeline=True)
    if (why := no_events(tl, traces)) is not None:
        emit(why + "\n", output)
        return
    if report == "gpu":
        emit_frame(ranges.gpu_projection(tl), fmt, output,
                   empty="no GPU activity inside a host range (NVTX or annotation)")
        return
    dec = dict.fromkeys(["Time (%)", "Avg (ns)", "Med (ns)", "StdDev (ns)"], 1)
    emit_frame(ranges.nvtx_sum(tl), fmt, output,
               empty="no NVTX ranges in the trace (nvtx_sum lists NVTX push/pop and "
                     "start/end ranges)", decimals=dec, nsys_csv=True)

