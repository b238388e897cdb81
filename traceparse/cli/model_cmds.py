"""CLI commands: model (calibrate, predict, whatif, diff). Each command parses options,
calls one library function and writes the output."""

from __future__ import annotations

import click

from traceparse.cli.main import main


@main.command("calibrate")
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), default="calibration.json",
              show_default=True, help="calibration.json path, or the directory for --export.")
@click.option("--export", "export", type=click.Choice(["vidur", "astra-sim", "genz"]),
              default=None, help="Also write simulator inputs into the -o directory.")
def calibrate_cmd(traces: tuple[str, ...], output: str, export: str | None) -> None:
    """Fit a performance model (launch overhead, kernel efficiency, copies, collectives)
    from TRACE... and write calibration.json (docs/calibration.md)."""
    from traceparse.analyses.calibrate import calibrate, merge, to_json
    from traceparse.loader import load

    cal = merge([calibrate(load(t)) for t in traces])
    if export is None:
        from traceparse.cli.common import emit

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
    click.echo(f"wrote {len(files)} files to {output}: {', '.join(sorted(files))}")


def _emit_frame(frame, fmt: str, output: str | None) -> None:  # type: ignore[no-untyped-def]
    from traceparse.cli.common import emit, render

    emit(render(frame, fmt, decimals={"error_pct": 2, "delta_pct": 2}), output)


@main.command("predict")
@click.argument("trace", type=click.Path())
@click.option("--calibration", "calibration", type=click.Path(), default=None,
              help="calibration.json; without it the measured durations are replayed.")
@click.option("--holdout", "holdout_steps", type=int, default=None,
              help="Calibrate on the first N steps of TRACE and predict every step.")
@click.option("--step-regex", default=None, help="Host ranges that are steps (NVTX).")
@click.option("--allow-other-gpu", is_flag=True,
              help="Use a calibration measured on another GPU (warns; refused otherwise).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]),
              default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
def predict_cmd(trace: str, calibration: str | None, holdout_steps: int | None,
                step_regex: str | None, allow_other_gpu: bool, fmt: str,
                output: str | None) -> None:
    """Replay TRACE with a calibrated model: predicted vs measured window, step and
    category times (docs/modeling.md)."""
    from traceparse.analyses import calibrate as cal_mod
    from traceparse.analyses import predict as pr
    from traceparse.loader import load

    tl = load(trace)
    if holdout_steps is not None:
        frame = pr.holdout(tl, train_steps=holdout_steps, step_regex=step_regex)
    else:
        cal = cal_mod.read(calibration) if calibration else None
        if cal is not None and allow_other_gpu:
            for other in pr.gpu_mismatch(tl, cal):
                click.echo(f"warning: predicting a trace from {other}: expect large errors",
                           err=True)
        frame = pr.predict(tl, cal, step_regex=step_regex, allow_other_gpu=allow_other_gpu)
    _emit_frame(frame, fmt, output)


@main.command("whatif")
@click.argument("trace", type=click.Path())
@click.option("--no-launch-overhead", is_flag=True, help="Launch calls cost nothing.")
@click.option("--overlap-comm", is_flag=True, help="Communication never delays other work.")
@click.option("--speedup", "speedups", multiple=True, metavar="REGEX=FACTOR",
              help="Kernels whose name matches REGEX run FACTOR times faster (repeatable).")
@click.option("--step-regex", default=None, help="Host ranges that are steps (NVTX).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]),
              default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
def whatif_cmd(trace: str, no_launch_overhead: bool, overlap_comm: bool,
               speedups: tuple[str, ...], step_regex: str | None, fmt: str,
               output: str | None) -> None:
    """Projected window and step time of TRACE under the chosen changes."""
    from traceparse.analyses import predict as pr
    from traceparse.errors import UsageError
    from traceparse.loader import load

    if not (no_launch_overhead or overlap_comm or speedups):
        raise UsageError(None, "whatif needs --no-launch-overhead, --overlap-comm or "
                               "--speedup REGEX=FACTOR")
    sp = [pr.parse_speedup(s) for s in speedups]
    frame = pr.whatif(load(trace), no_launch_overhead=no_launch_overhead,
                      overlap_comm=overlap_comm, speedups=sp, step_regex=step_regex)
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
@click.option("--step-regex", default=None, help="Host ranges that are steps (NVTX).")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "html", "json"]),
              default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
@click.pass_context
def diff_cmd(ctx: click.Context, base: str, new: str, fail_above: float | None, alpha: float,
             min_effect: float, step_regex: str | None, fmt: str, output: str | None) -> None:
    """Per kernel, op, category and step deltas of NEW against BASE; only changes that
    run-to-run noise does not explain are flagged. Exit 1 when --fail-above is exceeded."""
    import os

    from traceparse.analyses import diff as df
    from traceparse.analyses import diff_render
    from traceparse.cli.common import emit
    from traceparse.loader import load

    d = df.diff(load(base), load(new), alpha=alpha, min_effect_pct=min_effect,
                step_regex=step_regex)
    b, n = os.path.basename(base), os.path.basename(new)
    if fmt == "markdown":
        emit(diff_render.to_markdown(d, base=b, new=n), output)
    elif fmt == "html":
        emit(diff_render.to_html(d, base=b, new=n), output)
    else:
        _emit_frame(d, fmt, output)
    if df.gate(d, fail_above):
        ctx.exit(1)
