"""CLI commands: analysis. Each command parses options, calls one library function and
writes the output.

* ``breakdown TRACE`` - time attribution per device (compute / communication / memory /
  launch overhead / idle), optionally per step or per stream;
* ``gaps TRACE`` - the largest idle gaps per device and their causes;
* ``summary [TRACE]`` - one screen: window, attribution bars, top kernels, top gaps, verdict.
"""

from __future__ import annotations

import json
from typing import Any

import click
import polars as pl

from traceparse.cli.common import emit, load_trace, output_options, render, render_csv
from traceparse.cli.main import main
from traceparse.errors import UsageError

_TRACE = click.Path(exists=False, dir_okay=True)
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
@click.argument("trace", type=_TRACE)
@click.option("--window", "window", default=None, metavar="START_NS:END_NS",
              help="Fixed window on the trace clock (default: each device's first to last "
              "activity).")
@click.option("--steps", "steps", default=None, metavar="REGEX",
              help="One row per host range whose name matches REGEX (e.g. '^step').")
@click.option("--by-stream", "by_stream", is_flag=True, help="One row per stream.")
@output_options
def breakdown(trace: str, window: str | None, steps: str | None, by_stream: bool, fmt: str,
              output: str | None) -> None:
    """Where each device's time went: compute, exposed communication, memory copies,
    launch overhead and idle (parts sum to the window; priority in that order)."""
    from traceparse.analyses import attribution as at

    tl = load_trace(trace)
    group = ("rank", "device_id", "stream_id") if by_stream else at.DEFAULT_GROUP
    if steps is not None:
        frame = at.breakdown_windows(tl, at.range_windows(tl, steps), group=group)
    else:
        frame = at.breakdown(tl, window=_window(window), group=group)
    emit(render(at.check_attribution(frame), fmt, decimals=_PCT), output)


@main.command()
@click.argument("trace", type=_TRACE)
@click.option("--min-us", "min_us", type=float, default=10.0, show_default=True,
              help="Shortest gap listed, in microseconds.")
@click.option("--top", "top", type=int, default=None, help="List at most N gaps.")
@output_options
def gaps(trace: str, min_us: float, top: int | None, fmt: str, output: str | None) -> None:
    """Idle gaps per device, largest first, with their cause (host sync, CPU work)."""
    from traceparse.analyses.gaps import idle_gaps

    frame = idle_gaps(load_trace(trace), min_ns=round(min_us * 1000))
    emit(render(frame if top is None else frame.head(top), fmt), output)


def _jsonable(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.with_columns(pl.col(pl.Categorical).cast(pl.String)).to_dicts()


@main.command()
@click.argument("trace", required=False, type=_TRACE)
@click.option("--top", "top", type=int, default=10, show_default=True,
              help="Rows in the top-N sections.")
@click.option("--min-gap-us", "min_gap_us", type=float, default=10.0, show_default=True,
              help="Shortest idle gap listed, in microseconds.")
@output_options
def summary(trace: str | None, top: int, min_gap_us: float, fmt: str,
            output: str | None) -> None:
    """One screen: window, attribution per device, top kernels, top gaps and a verdict.

    Without TRACE, summarise the bundled sample trace.
    """
    from traceparse.analyses.summary import summarize
    from traceparse.analyses.summary_render import render_text

    if trace is None:
        from traceparse.samplegen import default_sample

        trace = str(default_sample())
    result = summarize(load_trace(trace), top=top, min_gap_ns=round(min_gap_us * 1000))
    if fmt == "json":
        payload = {"trace": trace, "verdict": result["verdict"],
                   "sections": {k: _jsonable(v) for k, v in result["sections"].items()}}
        emit(json.dumps(payload, indent=1, default=str) + "\n", output)
    elif fmt == "csv":
        parts = [f"# {k}\n{render_csv(v, decimals=_PCT)}" for k, v in result["sections"].items()]
        emit("\n".join([*parts, f"# verdict\n{result['verdict']}\n"]), output)
    else:
        emit(render_text(result), output)
