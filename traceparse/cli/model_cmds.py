"""CLI commands: model (calibrate, predict, whatif, diff). Each command parses options,
calls one library function and writes the output (conventions: :mod:`traceparse.cli.common`).
"""

from __future__ import annotations

import click
import polars as pl

from traceparse.cli.common import (
    check_output,
    emit,
    gpu_option,
    output_options,
    render,
    steps_option,
    traces_argument,
    wrote,
)
from traceparse.cli.inputs import load_traces, resolve
from traceparse.cli.main import main
from traceparse.errors import UsageError
from traceparse.timeline import Timeline


@main.command("calibrate")
@traces_argument
@click.option("-o", "--output", "output", type=click.Path(), default="calibration.json",
              show_default=True, metavar="PATH",
              help="calibration.json path, or the directory for --export.")
@click.option("--force", "force", is_flag=True, help="Replace PATH if it exists.")
@click.option("--export", "export", type=click.Choice(["vidur", "astra-sim", "genz"]),
              default=None, help="Also write simulator inputs into the -o directory.")
@gpu_option
def calibrate_cmd(traces: tuple[str, ...], output: str, force: bool, export: str | None,
                  gpu: str | None) -> None:
    """Fit a performance model (launch overhead, kernel efficiency, copies, collectives)
    from TRACE... and write calibration.json (docs/calibration.md). Each TRACE is
    calibrated on its own and the results are merged."""
    from traceparse.analyses.calibrate import calibrate, merge, to_json

    check_output(output, force=force)
    paths = resolve(traces)
    cal = merge([calibrate(load_traces([p], gpu=gpu)) for p in paths])
    if export is None:
        emit(to_json(cal), output)
        return
    from traceparse.analyses.export import export_files
    from traceparse.atomic import atomic_path

    files = export_files(cal, export)
    for line in files.get("WARNINGS.txt", "").splitlines():
        click.echo(f"warning: {line}", err=True)
    files["calibration.json"] = to_json(cal)
    with atomic_path(output, directory=True) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
    wrote(output, f"{len(files)} files: {', '.join(sorted(files))}")


def _emit_frame(frame: pl.DataFrame, fmt: str, output: str | None) -> None:
    emit(render(frame, fmt, decimals={"error_pct": 2, "delta_pct": 2}), output)


@main.command("predict")
@traces_argument
@click.option("--calibration", "calibration", type=click.Path(), default=None,
              metavar="FILE", help="calibration.json; without it the measured durations "
                                   "are replayed.")
@click.option("--holdout", "holdout_steps", type=int, default=None, metavar="N",
              help="Calibrate on the first N steps of TRACE and predict every step.")
@steps_option
@gpu_option
@click.option("--allow-other-gpu", is_flag=True,
              help="Use a calibration measured on another GPU (warns; refused otherwise).")
@output_options
def predict_cmd(traces: tuple[str, ...], calibration: str | None, holdout_steps: int | None,
                steps: str | None, gpu: str | None, allow_other_gpu: bool, fmt: str,
                output: str | None, force: bool) -> None:
    """Replay TRACE... with a calibrated model: predicted vs measured window, step and
    category times (docs/modeling.md)."""
    from traceparse.analyses import calibrate as cal_mod
    from traceparse.analyses import predict as pr

    tl = load_traces(traces, gpu=gpu)
    if holdout_steps is not None:
        frame = pr.holdout(tl, train_steps=holdout_steps, step_regex=steps)
    else:
        cal = cal_mod.read(calibration) if calibration else None
        if cal is not None and allow_other_gpu:
            for other in pr.gpu_mismatch(tl, cal):
                click.echo(f"traceparse: warning: predicting a trace from {other}: expect "
                           "large errors", err=True)
        frame = pr.predict(tl, cal, step_regex=steps, allow_other_gpu=allow_other_gpu)
    _emit_frame(frame, fmt, output)


def check_speedups(tl: Timeline, speedups: list[tuple[str, float]]) -> None:
    """Refuse a ``--speedup REGEX=F`` whose REGEX matches no GPU activity name (exit 2):
    the projection would silently equal the measurement."""
    names = tl.gpu["name"].cast(pl.String).unique().drop_nulls()
    for regex, factor in speedups:
        if not names.str.contains(regex).any():
            raise UsageError(None, f"--speedup {regex}={factor:g}: the regex matches no "
                                   f"kernel or GPU activity name in the trace "
                                   f"({names.len()} distinct names; `traceparse kernels` "
                                   "lists them)")


@main.command("whatif")
@traces_argument
@click.option("--no-launch-overhead", is_flag=True, help="Launch calls cost nothing.")
@click.option("--overlap-comm", is_flag=True, help="Communication never delays other work.")
@click.option("--fix", "fix", type=click.Choice(["cuda-graphs", "fusion", "pinned-memory",
                                                 "host-sync", "input-pipeline", "warm-up",
                                                 "overlap-comm"]), default=None,
              help="Replay the trace with one fix's mechanism applied (docs/analyses.md).")
@click.option("--speedup", "speedups", multiple=True, metavar="REGEX=FACTOR",
              help="Kernels whose name matches REGEX run FACTOR times faster (repeatable; "
                   "a REGEX that matches nothing is an error).")
@steps_option
@gpu_option
@output_options
def whatif_cmd(traces: tuple[str, ...], no_launch_overhead: bool, overlap_comm: bool,
               fix: str | None, speedups: tuple[str, ...], steps: str | None,
               gpu: str | None, fmt: str, output: str | None, force: bool) -> None:
    """Projected window and step time of TRACE... under the chosen changes."""
    from traceparse.analyses import predict as pr

    if not (no_launch_overhead or overlap_comm or speedups or fix):
        raise UsageError(None, "whatif needs --fix NAME, --no-launch-overhead, "
                               "--overlap-comm or --speedup REGEX=FACTOR")
    sp = [pr.parse_speedup(s) for s in speedups]
    tl = load_traces(traces, gpu=gpu)
    check_speedups(tl, sp)
    frame = pr.whatif(tl, no_launch_overhead=no_launch_overhead,
                      overlap_comm=overlap_comm, speedups=sp, step_regex=steps, fix=fix)
    _emit_frame(frame, fmt, output)


@main.command("diff")
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--fail-above", "fail_above", type=float, default=None, metavar="PCT",
              help="Exit 1 when a flagged regression's median rose by more than PCT %.")
@click.option("--alpha", type=float, default=0.01, show_default=True,
              help="Significance level of the Mann-Whitney U test.")
@click.option("--min-effect", type=float, default=5.0, show_default=True,
              help="Smallest median change (%) that is flagged.")
@steps_option
@output_options(formats=("table", "csv", "json", "markdown", "html"))
@click.pass_context
def diff_cmd(ctx: click.Context, base: str, new: str, fail_above: float | None, alpha: float,
             min_effect: float, steps: str | None, fmt: str, output: str | None,
             force: bool) -> None:
    """Per kernel, op, category and step deltas of NEW against BASE (each one trace file or
    rank directory); only changes that run-to-run noise does not explain are flagged. Exit 1
    when --fail-above is exceeded."""
    import os

    from traceparse.analyses import diff as df
    from traceparse.reports import diff as diff_render

    if output is not None:
        check_output(output)
    d = df.diff(load_traces([base]), load_traces([new]), alpha=alpha,
                min_effect_pct=min_effect, step_regex=steps)
    b, n = os.path.basename(base), os.path.basename(new)
    if fmt == "markdown":
        emit(diff_render.to_markdown(d, base=b, new=n), output)
    elif fmt == "html":
        emit(diff_render.to_html(d, base=b, new=n), output)
    else:
        _emit_frame(d, fmt, output)
    if df.gate(d, fail_above):
        ctx.exit(1)


@main.command("fixes")
@traces_argument
@gpu_option
@output_options(formats=("table", "csv", "json"))
def fixes_cmd(traces: tuple[str, ...], gpu: str | None, fmt: str, output: str | None,
              **_: object) -> None:
    """Ranked fixes of TRACE... (the report's "What to fix first"): id, title, saving_ns,
    window_ns, rank, evidence, how; an empty list and one line why when nothing is worth
    fixing."""
    import json

    from traceparse.reports.fixes import fixes_frame, fixes_list

    tl = load_traces(traces, gpu=gpu)
    items, why = fixes_list(tl)
    if not items:
        click.echo(why, err=True)
    if fmt == "json":
        emit(json.dumps(items, indent=1) + "\n", output)
        return
    _emit_frame(fixes_frame(items), fmt, output)
