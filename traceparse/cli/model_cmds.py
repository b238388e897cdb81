"""CLI commands: model (calibrate, predict, whatif, diff). Each command parses options,
calls one library function and writes the output (conventions: :mod:`traceparse.cli.common`).
"""

from __future__ import annotations

import click
import polars as pl

from traceparse.analyses._dist import MIN_EFFECT_PCT
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
from traceparse.cli.executors import (
    chunked_input,
    chunks_options,
    computed_in_memory,
    executor_options,
    run_chunked,
)
from traceparse.cli.inputs import (
    load_inputs,
    load_traces,
    no_timeline,
    override_gpu,
    resolve,
)
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
    paths, tls = load_inputs(traces)
    for path, t in zip(paths, tls, strict=True):  # a page alone gave an empty calibration
        no_timeline(t, [path])
    cal = merge([calibrate(override_gpu(t, gpu) if gpu else t) for t in tls])
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
@click.option("--scale", "scale", default=None, metavar="batch=F",
              help="Predict the step time at F times the traced batch (F may be < 1), "
                   "without the profiler (needs --calibration; docs/calibration.md).")
@click.option("--batch-size", "batch_size", type=click.IntRange(min=1), default=None,
              metavar="B", help="With --scale: the traced batch, when the trace's first "
                                "integer tensor is not it.")
@steps_option
@gpu_option
@click.option("--allow-other-gpu", is_flag=True,
              help="Use a calibration measured on another GPU (warns; refused otherwise).")
@chunks_options
@output_options
def predict_cmd(traces: tuple[str, ...], calibration: str | None, holdout_steps: int | None,
                scale: str | None, batch_size: int | None, steps: str | None,
                gpu: str | None, allow_other_gpu: bool, executor: str, chunk_rows: int,
                fmt: str, output: str | None, force: bool) -> None:
    """Replay TRACE... with a calibrated model: predicted vs measured window, step and
    category times (docs/modeling.md); with --scale batch=F, the profiler-free step time
    at F times the batch (docs/calibration.md). --executor chunks replays the measured
    durations of one nsys export a piece at a time (no other option)."""
    from traceparse.analyses import calibrate as cal_mod
    from traceparse.analyses import predict as pr

    if executor != "memory":
        if calibration or holdout_steps is not None or scale or batch_size or steps or gpu:
            raise UsageError(None, f"predict --executor {executor} replays the measured "
                                   "durations only (no --calibration, --holdout, --scale, "
                                   "--steps or --gpu); use --executor memory")
        frame = _chunked_replay(traces, executor, chunk_rows)
        if frame is not None:
            _emit_frame(frame, fmt, output)
            return

    if scale is not None:
        _predict_scaled(traces, calibration, scale, holdout_steps, batch_size, steps, gpu,
                        allow_other_gpu, fmt, output)
        return
    if batch_size is not None:
        raise UsageError(None, "--batch-size needs --scale batch=F")
    tl = load_traces(traces, gpu=gpu, timeline=True)
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


def _predict_scaled(traces: tuple[str, ...], calibration: str | None, scale: str,
                    holdout_steps: int | None, batch_size: int | None, steps: str | None,
                    gpu: str | None, allow_other_gpu: bool, fmt: str,
                    output: str | None) -> None:
    import json

    from traceparse.analyses import calibrate as cal_mod
    from traceparse.analyses import predict as pr
    from traceparse.analyses import scale as sc

    if calibration is None:
        raise UsageError(None, "--scale needs --calibration FILE (traceparse calibrate "
                               "TRACE -o FILE)")
    if holdout_steps is not None:
        raise UsageError(None, "--scale and --holdout cannot be combined")
    factor = sc.parse_scale(scale)
    if output is not None:
        check_output(output)
    cal = cal_mod.read(calibration)
    tl = load_traces(traces, gpu=gpu, timeline=True)
    if allow_other_gpu:
        for other in pr.gpu_mismatch(tl, cal):
            click.echo(f"traceparse: warning: predicting a trace from {other}: expect "
                       "large errors", err=True)
    result = sc.predict_scaled(tl, cal, factor, step_regex=steps,
                               allow_other_gpu=allow_other_gpu, batch_size=batch_size)
    if result["batch"] is None:
        click.echo("traceparse: warning: the trace recorded no integer input shapes "
                   "(record_shapes=True): the batch is unknown and nothing is scaled",
                   err=True)
    for w in result["warnings"]:
        click.echo(f"traceparse: warning: {w}", err=True)
    if fmt == "json":
        emit(json.dumps(cal_mod._clean(result), indent=1, sort_keys=True) + "\n", output)
    else:
        emit(render(sc.summary_rows(result), fmt), output)


def check_speedups(tl: Timeline, speedups: list[tuple[str, float]]) -> None:
    """Refuse a ``--speedup REGEX=F`` whose REGEX matches no GPU activity name (exit 2):
    the projection would silently equal the measurement."""
    from traceparse.analyses.kclass import select

    names = tl.gpu["name"].cast(pl.String).unique().drop_nulls()
    for regex, factor in speedups:
        if not select(tl.gpu, regex).any():
            raise UsageError(None, f"--speedup {regex}={factor:g}: the regex (or kernel "
                                   f"class) matches no kernel or GPU activity in the trace "
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
              help="Kernels whose name matches REGEX, or of kernel class REGEX (gemm, "
                   "attention, conv, norm, reduction, elementwise, communication, copy, "
                   "other), run FACTOR times faster (repeatable; a REGEX that matches "
                   "nothing is an error).")
@steps_option
@gpu_option
@chunks_options
@output_options
def whatif_cmd(traces: tuple[str, ...], no_launch_overhead: bool, overlap_comm: bool,
               fix: str | None, speedups: tuple[str, ...], steps: str | None,
               gpu: str | None, executor: str, chunk_rows: int, fmt: str,
               output: str | None, force: bool) -> None:
    """Projected window and step time of TRACE... under the chosen changes.

    --executor chunks replays one nsys export a piece at a time (--fix cuda-graphs,
    host-sync or pinned-memory, or --no-launch-overhead; the same output as memory,
    docs/performance.md "Chunked replay")."""
    from traceparse.analyses import predict as pr

    if not (no_launch_overhead or overlap_comm or speedups or fix):
        raise UsageError(None, "whatif needs --fix NAME, --no-launch-overhead, "
                               "--overlap-comm or --speedup REGEX=FACTOR")
    if executor != "memory":
        frame = _chunked_whatif(traces, executor, chunk_rows, fix, no_launch_overhead,
                                overlap_comm or bool(speedups) or bool(steps)
                                or gpu is not None)
        if frame is not None:
            _emit_frame(frame, fmt, output)
            return
    sp = [pr.parse_speedup(s) for s in speedups]
    tl = load_traces(traces, gpu=gpu, timeline=True)
    check_speedups(tl, sp)
    frame = pr.whatif(tl, no_launch_overhead=no_launch_overhead,
                      overlap_comm=overlap_comm, speedups=sp, step_regex=steps, fix=fix)
    _emit_frame(frame, fmt, output)


def _chunked_replay(traces: tuple[str, ...], executor: str, chunk_rows: int
                    ) -> pl.DataFrame | None:
    """``predict`` without a calibration on the chunked replay; None: in memory (as
    :func:`_chunked_whatif`)."""
    from traceparse import replay_chunks as rc
    from traceparse.analyses.predict import summary_from_parts

    path = chunked_input(resolve(traces), executor)
    try:
        parts = rc.replay_summary(path, chunk_rows=chunk_rows)
    except rc.NotOrdered as exc:
        computed_in_memory(path, "predict replayed", exc.why)
        return None
    return None if parts is None else summary_from_parts(parts)


def _chunked_whatif(traces: tuple[str, ...], executor: str, chunk_rows: int,
                    fix: str | None, no_launch_overhead: bool, other: bool
                    ) -> pl.DataFrame | None:
    """``whatif`` on the chunked replay (:mod:`traceparse.replay_chunks`); None: compute
    it in memory (no GPU activity, or a piece that could not continue the replay exactly:
    one stderr line says why)."""
    from traceparse import replay_chunks as rc

    if other or (fix is None) == (not no_launch_overhead) or (
            fix is not None and fix not in rc.CHUNKED_FIXES):
        raise UsageError(None, f"whatif --executor {executor}: only --executor chunks with "
                               f"--fix {' / '.join(rc.CHUNKED_FIXES)} or "
                               "--no-launch-overhead alone (no other change, --steps or "
                               "--gpu) is replayed in pieces; use --executor memory")
    path = chunked_input(resolve(traces), executor)
    try:
        return rc.whatif(path, fix=fix, no_launch_overhead=no_launch_overhead,
                         chunk_rows=chunk_rows)
    except rc.NotOrdered as exc:
        computed_in_memory(path, "whatif replayed", exc.why)
        return None


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """``536870912``, ``512MiB``, ``0.5 GB`` -> bytes; a bad size is a usage error (exit 2)."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = m[2].lower() if m else ""
    if not m or unit not in _SIZE_UNITS:
        raise UsageError(None, f"--fail-memory-above-bytes {text!r}: expected a size such as "
                               "536870912, 512MiB or 0.5GB")
    return int(float(m[1]) * _SIZE_UNITS[unit])


@main.command("diff")
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--fail-above", "fail_above", type=float, default=None, metavar="PCT",
              help="Exit 1 when a flagged time regression's median rose by more than PCT %.")
@click.option("--fail-tail-above", "fail_tail_above", type=float, default=None,
              metavar="PCT", help="Exit 1 when a step P50/P95/P99 flagged as a regression "
                                  "rose (or tokens/s fell) by more than PCT %.")
@click.option("--fail-memory-above", "fail_memory_above", type=float, default=None,
              metavar="PCT", help="Exit 1 when a peak (allocated or reserved; per device, "
                                  "step or top-level op) grew by more than PCT %.")
@click.option("--fail-memory-above-bytes", "fail_memory_above_bytes", default=None,
              metavar="SIZE", help="Exit 1 when a peak grew by more than SIZE (536870912, "
                                   "512MiB); with --fail-memory-above both must be exceeded.")
@click.option("--alpha", type=float, default=0.01, show_default=True,
              help="Significance level of the tests (Mann-Whitney; bootstrap interval "
                   "1 - alpha).")
@click.option("--min-effect", type=float, default=MIN_EFFECT_PCT, show_default=True,
              help="Smallest change (%) that is flagged.")
@steps_option
@output_options(formats=("table", "csv", "json", "markdown", "html"))
@click.pass_context
def diff_cmd(ctx: click.Context, base: str, new: str, fail_above: float | None,
             fail_tail_above: float | None, fail_memory_above: float | None,
             fail_memory_above_bytes: str | None, alpha: float, min_effect: float,
             steps: str | None, fmt: str, output: str | None, force: bool) -> None:
    """Time, tail latency and memory footprint of NEW against BASE (each one trace file or
    rank directory): per kernel, op, category and step medians, step P50/P95/P99 and
    tokens/s, peak allocated/reserved per device, step and op (docs/diff.md). Only changes
    that run-to-run noise does not explain are flagged. Exit 1 when a --fail-* threshold
    is exceeded."""
    import os

    from traceparse.analyses import diff as df
    from traceparse.reports import diff as diff_render

    if output is not None:
        check_output(output)
    th = df.Thresholds(time_pct=fail_above, tail_pct=fail_tail_above,
                       memory_pct=fail_memory_above,
                       memory_bytes=None if fail_memory_above_bytes is None
                       else parse_size(fail_memory_above_bytes))
    b, n = os.path.basename(base), os.path.basename(new)
    c = df.compare(load_traces([base], timeline=True), load_traces([new], timeline=True),
                   names=(b, n), thresholds=th, alpha=alpha, min_effect_pct=min_effect,
                   step_regex=steps)
    if fmt == "markdown":
        emit(diff_render.to_markdown(c, base=b, new=n), output)
    elif fmt == "html":
        emit(diff_render.to_html(c, base=b, new=n), output)
    elif fmt == "json":
        emit(diff_render.to_json(c, base=b, new=n), output)
    elif fmt == "csv":
        emit(render(diff_render.gated_rows(c), "csv"), output)
    else:
        emit(diff_render.to_text(c, base=b, new=n), output)
    if any(c.failed.values()):
        ctx.exit(1)


@main.command("fixes")
@traces_argument
@gpu_option
@output_options(formats=("table", "csv", "json"))
@executor_options
def fixes_cmd(traces: tuple[str, ...], gpu: str | None, fmt: str, output: str | None,
              executor: str, chunk_rows: int, workers: int, **_: object) -> None:
    """Ranked fixes of TRACE... (the report's "What to fix first"): id, title, saving_ns,
    window_ns, rank, evidence, how; an empty list and one line why when nothing is worth
    fixing. --executor chunks|dask computes them from pieces of one nsys export (or, with
    one stderr line, in memory)."""
    import json

    from traceparse.reports.fixes import fixes_frame, fixes_list, fixes_of

    got = None
    if executor != "memory":
        from traceparse import payload_chunks

        got = run_chunked(
            payload_chunks.payload, traces, executor=executor, chunk_rows=chunk_rows,
            workers=workers, word="fixes", falls_back=payload_chunks.NotInPieces,
            refused=None if gpu is None else "reads an nsys export: it takes no --gpu")
    items, why = fixes_of(got) if got is not None else fixes_list(load_traces(traces, gpu=gpu))
    if why:  # no fix and why, or the fixes withheld as the profiler's own cost
        click.echo(why, err=True)
    if fmt == "json":
        emit(json.dumps(items, indent=1) + "\n", output)
        return
    _emit_frame(fixes_frame(items), fmt, output)

