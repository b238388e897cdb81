"""CLI commands: report. Each command parses options, calls one library function and
writes the output (conventions: :mod:`traceparse.cli.common`)."""

from __future__ import annotations

from pathlib import Path

import click

from traceparse.cli.common import check_output, gpu_option, traces_argument, wrote
from traceparse.cli.executors import executor_options, run_chunked
from traceparse.cli.main import main
from traceparse.reports.options import ReportOptions


@main.command("report")
@traces_argument
@click.option("--ncu", "ncu_csv", type=click.Path(dir_okay=False), default=None,
              metavar="CSV", help="Nsight Compute CSV for the roofline section.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              metavar="FILE",
              help="Report file (default: <trace>.html for one trace, report.html otherwise).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option("--top", type=click.IntRange(1, 10_000), default=50, show_default=True,
              help="Kernels listed individually; the rest are summed as 'other'.")
@click.option("--title", default=None, help="Report title (default: the input names).")
@gpu_option
@executor_options
def report(traces: tuple[str, ...], ncu_csv: str | None, output: str | None, force: bool,
           top: int, title: str | None, gpu: str | None, executor: str, chunk_rows: int,
           workers: int) -> None:
    """Write a self-contained HTML bottleneck report of TRACE... (several files = several
    ranks, one report). With no TRACE, report on the bundled sample training step.

    The page works offline (no external URL), opens in any browser, and starts with the
    verdict: what bounds the run and which fixes could save the most time. An existing
    output file is kept unless --force is given. --executor chunks|dask computes it from
    pieces of one nsys export (or, with one stderr line, in memory).
    """
    from traceparse.cli.common import load_trace
    from traceparse.cli.inputs import check_one_job, expand, load_inputs, override_gpu
    from traceparse.reports.build import default_output
    from traceparse.reports.html import render_html
    from traceparse.reports.payload import build_payload

    out = Path(output) if output else default_output(expand(traces))
    check_output(out, force=force)
    options = ReportOptions(top_n=top, title=title)
    payload = None
    if executor != "memory":
        from traceparse import payload_chunks

        refused = None
        if gpu is not None or ncu_csv is not None:
            refused = ("reads an nsys export: it takes no "
                       f"{'--gpu' if gpu is not None else '--ncu'}")
        payload = run_chunked(
            payload_chunks.report_payload, traces, executor=executor, chunk_rows=chunk_rows,
            workers=workers, word="report", falls_back=payload_chunks.NotInPieces,
            refused=refused, sample_default=True, options=options)
    if payload is None:
        paths, tls = load_inputs(traces, sample_default=True)
        check_one_job(paths, tls)
        if gpu:
            tls = [override_gpu(t, gpu) for t in tls]
        ncu = load_trace(ncu_csv) if ncu_csv else None
        payload = build_payload(tls, ncu=ncu, options=options)
    html = render_html(payload)
    from traceparse.atomic import write_text

    write_text(out, html)
    wrote(out, f"{len(html.encode('utf-8')):,} bytes")

