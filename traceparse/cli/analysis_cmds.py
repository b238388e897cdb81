"""CLI commands: analysis. Each command parses options, calls one library function and
writes the output.

Every command takes ``TRACE...`` (files, rank directories, globs; several = one timeline,
see :mod:`traceparse.cli.inputs`) and the output options of :mod:`traceparse.cli.common`.

* ``breakdown TRACE`` - time attribution per device (compute / communication / memory /
  launch overhead / idle), optionally per step or per stream;
* ``gaps TRACE`` - the largest idle gaps per device and their causes;
* ``summary [TRACE]`` - one screen: window, attribution bars, top kernels, top gaps, verdict.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
import polars as pl

from traceparse import units
from traceparse.cli.common import (
    emit,
    emit_frame,
    gpu_option,
    min_gap_ns,
    min_gap_option,
    no_events,
    output_options,
    render_csv,
    steps_option,
    trace_start,
    traces_argument,
)
from traceparse.cli.executors import (
    chunked_input,
    computed_in_memory,
    executor_options,
    run_chunked,
    split_executor,
)
from traceparse.cli.inputs import load_traces, resolve
from traceparse.cli.main import main
from traceparse.errors import UsageError
from traceparse.vendor import speak_vendor

_PCT = {"comm_overlap_pct": 2, "pct": 2, "avg_ns": 1}



def _window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise UsageError(None, f"--window must be START_NS:END_NS, got {text!r}") from None
    if end < start:
        raise UsageError(None, f"--window end {end} is before start {start}")
    return start, end


@main.command()
@traces_argument
@click.option("--window", "window", default=None, metavar="START_NS:END_NS",
              help="Fixed window on the trace clock (default: each device's first to last "
              "activity).")
@steps_option
@click.option("--by-stream", "by_stream", is_flag=True, help="One row per stream.")
@click.option("--gpu-only", "gpu_only", is_flag=True,
              help="Only what the GPU activities decide: compute, exposed communication, "
              "memory and the time without GPU activity (launch overhead, warm-up, host "
              "sync and idle together).")
@output_options
@executor_options
def breakdown(traces: tuple[str, ...], window: str | None, steps: str | None,
              by_stream: bool, gpu_only: bool, fmt: str, output: str | None, force: bool,
              executor: str, chunk_rows: int, workers: int) -> None:
    """Where each device's time went: compute, exposed communication, memory copies,
    launch overhead and idle (parts sum to the window; priority in that order). With
    --steps, one row per step range."""
    from traceparse.analyses import attribution as at

    if gpu_only:
        _gpu_breakdown(traces, window, steps, by_stream, fmt, output, executor, chunk_rows,
                       workers)
        return
    found = None
    if executor != "memory":
        found = _chunked_breakdown(traces, window, steps, by_stream, executor, chunk_rows,
                                   workers)
    if found is not None:
        frame, first = found
        emit_frame(at.check_attribution(frame), fmt, output,
                   empty="no GPU activity in the window", decimals=_PCT,
                   start_ns=first)
        return
    tl = load_traces(traces, timeline=True)
    if (why := no_events(tl, traces)) is not None:
        emit(why + "\n", output)
        return
    group = ("rank", "device_id", "stream_id") if by_stream else at.DEFAULT_GROUP
    if steps is not None:
        from traceparse.analyses.steps import range_windows

        frame = at.breakdown_windows(tl, range_windows(tl, steps), group=group)
        empty = f"no host range matches --steps {steps!r}"
    else:
        frame = at.breakdown(tl, window=_window(window), group=group)
        empty = ("no GPU activity in the window" if tl.gpu.height else
                 "no GPU activity (kernel, memory copy or set) in the trace")
    emit_frame(at.check_attribution(frame), fmt, output, empty=empty, decimals=_PCT,
               start_ns=trace_start(tl))


def _chunked_breakdown(traces: tuple[str, ...], window: str | None, steps: str | None,
                       by_stream: bool, executor: str, chunk_rows: int, workers: int
                       ) -> tuple[pl.DataFrame, int | None] | None:
    """``breakdown`` (each device's own window) on a chunked executor: the frame and the
    trace's first event; None when the memory path must compute it (no GPU activity, or
    a span that may not hold what its free stretches' rules read: stderr says so)."""
    from traceparse import executor_breakdown as eb

    kind, address = split_executor(executor)
    if window is not None or steps is not None or by_stream:
        raise UsageError(None, f"--executor {kind} gives each device's own window: it "
                               "takes no --window, --steps or --by-stream")
    path = chunked_input(resolve(traces), kind)
    try:
        return eb.breakdown(path, executor=kind, chunk_rows=chunk_rows, workers=workers,
                            scheduler=address)
    except eb.NotLocal as exc:  # exact in memory; the chunked spans may not be
        computed_in_memory(path, "breakdown computed", exc.why)
    return None


def _gpu_breakdown(traces: tuple[str, ...], window: str | None, steps: str | None,
                   by_stream: bool, fmt: str, output: str | None, executor: str,
                   chunk_rows: int, workers: int) -> None:
    """``breakdown --gpu-only`` on any executor (table times count from the first GPU
    activity: the one start every executor knows without the host tables)."""
    from traceparse.analyses import chunked

    kind, address = split_executor(executor)
    if window is not None or steps is not None or by_stream:
        raise UsageError(None, "--gpu-only gives each device's own window: it takes no "
                               "--window, --steps or --by-stream")
    empty = "no GPU activity (kernel, memory copy or set) in the trace"
    frame = None
    if kind != "memory":
        from traceparse import executor as ex

        frame = ex.gpu_breakdown(chunked_input(resolve(traces), kind), executor=kind,
                                 chunk_rows=chunk_rows, workers=workers, scheduler=address)
    if frame is None:  # the memory executor, or no GPU row: the whole timeline words it
        from traceparse.analyses import attribution as at

        tl = load_traces(traces, timeline=True)
        if (why := no_events(tl, traces)) is not None:
            emit(why + "\n", output)
            return
        frame = chunked.gpu_breakdown(at.busy_activities(tl))
    first = frame["window_start_ns"].min() if frame.height else None
    emit_frame(frame, fmt, output, empty=empty, decimals=_PCT,
               start_ns=None if first is None else int(first))  # type: ignore[arg-type]


@main.command()
@traces_argument
@min_gap_option
@click.option("--top", "top", type=int, default=None, help="List at most N gaps.")
@executor_options
@output_options
def gaps(traces: tuple[str, ...], min_gap_us: float | None, top: int | None, fmt: str,
         output: str | None, force: bool, executor: str, chunk_rows: int, workers: int
         ) -> None:
    """Idle gaps per device, largest first, with their cause (host sync, CPU work)."""
    from traceparse.analyses.gaps import idle_gaps

    kind, address = split_executor(executor)
    found = None
    if kind != "memory":
        from traceparse import executor as ex

        path = chunked_input(resolve(traces), kind)
        try:
            found = ex.idle_gaps(path, executor=kind, min_ns=min_gap_ns(min_gap_us),
                                 chunk_rows=chunk_rows, workers=workers, scheduler=address)
        except ex.NotLocal as exc:  # exact in memory; the chunked spans may not be
            computed_in_memory(path, "gaps computed", exc.why)
    if found is None:  # the memory executor, or no GPU row: the whole timeline words it
        tl = load_traces(traces, timeline=True)
        if (why := no_events(tl, traces)) is not None:
            emit(why + "\n", output)
            return
        found = idle_gaps(tl, min_ns=min_gap_ns(min_gap_us)), trace_start(tl)
    frame, first = found
    emit_frame(frame if top is None else frame.head(top), fmt, output,
               empty=f"no idle gap of at least {units.duration(min_gap_ns(min_gap_us))} "
                     "between GPU activities", start_ns=first)


def _jsonable(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.with_columns(pl.col(pl.Categorical).cast(pl.String)).to_dicts()


@main.command()
@traces_argument
@click.option("--top", "top", type=int, default=10, show_default=True,
              help="Rows in the top-N sections.")
@min_gap_option
@gpu_option
@output_options
@executor_options
def summary(traces: tuple[str, ...], top: int, min_gap_us: float | None, gpu: str | None,
            fmt: str, output: str | None, force: bool, executor: str, chunk_rows: int,
            workers: int) -> None:
    """One screen: window, attribution per device, top kernels, top gaps and a verdict.

    Without TRACE, summarise the bundled sample trace. --executor chunks|dask computes it
    from pieces of one nsys export (or, with one stderr line, in memory).
    """
    from traceparse.analyses.summary import summarize
    from traceparse.reports.summary_text import render_text

    paths = resolve(traces, sample_default=True)
    if executor != "memory":
        from traceparse import summary_chunks

        result = run_chunked(
            summary_chunks.summary, paths, executor=executor, chunk_rows=chunk_rows,
            workers=workers, word="summary", falls_back=summary_chunks.SectionNotInPieces,
            refused=None if gpu is None else "summarises an nsys export: it takes no --gpu",
            top=top, min_gap_ns=min_gap_ns(min_gap_us))
        if result is not None:  # an nsys export: NVIDIA wording, no ncu page
            _emit_summary(result, paths, fmt, output, render_text)
            return
    tl = load_traces(traces, sample_default=True, gpu=gpu)
    if (why := no_events(tl, paths)) is not None:
        emit(why + "\n", output)
        return
    ncu_only = tl.ncu_only()
    if ncu_only:  # an Nsight Compute page alone: its own summary, no timeline to attribute
        from traceparse.reports.summary_text import render_ncu_text
        from traceparse.roofline.ncu_summary import summarize_ncu

        result = summarize_ncu(tl, top=top, gpu=gpu)
    else:
        result = summarize(tl, top=top, min_gap_ns=min_gap_ns(min_gap_us))
    _emit_summary(result, paths, fmt, output,
                  lambda r: speak_vendor(render_ncu_text(r) if ncu_only else render_text(r),
                                         tl))


def _emit_summary(result: dict[str, Any], paths: list[str], fmt: str, output: str | None,
                  text: Callable[[dict[str, Any]], str]) -> None:
    """Write the summary ``result`` in ``fmt`` (``text``: its text rendering)."""
    if fmt == "json":
        payload = {"trace": paths[0] if len(paths) == 1 else paths,
                   "verdict": result["verdict"],
                   "sections": {k: _jsonable(v) for k, v in result["sections"].items()}}
        emit(json.dumps(payload, indent=1, default=str) + "\n", output)
    elif fmt == "csv":
        parts = [f"# {k}\n{render_csv(v, decimals=_PCT)}" for k, v in result["sections"].items()]
        emit("\n".join([*parts, f"# verdict\n{result['verdict']}\n"]), output)
    else:
        emit(text(result), output)
