"""CLI commands: report. Each command parses options, calls one library function and
writes the output."""

from __future__ import annotations

from pathlib import Path

import click

from traceparse.atomic import write_text
from traceparse.cli.common import cache_of
from traceparse.cli.main import main
from traceparse.errors import UsageError


@main.command("report")
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=True))
@click.option("--ncu", "ncu_csv", type=click.Path(dir_okay=False), default=None,
              help="Nsight Compute CSV for the roofline section.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Report file (default: <trace>.html for one trace, report.html otherwise).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--top", type=click.IntRange(1, 10_000), default=50, show_default=True,
              help="Kernels listed individually; the rest are summed as 'other'.")
@click.option("--title", default=None, help="Report title (default: the input names).")
def report(traces: tuple[str, ...], ncu_csv: str | None, output: str | None, force: bool,
           top: int, title: str | None) -> None:
    """Write a self-contained HTML bottleneck report of TRACE... (several files = several
    ranks, one report). With no TRACE, report on the bundled sample training step.

    The page works offline (no external URL), opens in any browser, and starts with the
    verdict: what bounds the run and which fixes could save the most time. An existing
    output file is kept unless --force is given.
    """
    from traceparse.reports.build import default_output, report_html
    from traceparse.reports.payload import ReportOptions

    out = Path(output) if output else default_output(traces)
    if out.exists() and not force:
        raise UsageError(out, "exists; pass --force to overwrite it or -o to choose another "
                              "name")
    html = report_html(traces, ncu=ncu_csv, options=ReportOptions(top_n=top, title=title),
                       cache=cache_of())
    write_text(out, html)
    click.echo(f"wrote {out} ({len(html.encode('utf-8')):,} bytes)", err=True)
