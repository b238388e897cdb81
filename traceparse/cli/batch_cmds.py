"""CLI commands: batch. Each command parses options, calls one library function and
writes the output.

* ``batch DIR_OR_GLOB -o OUT_DIR [--executor local|dask[=ADDRESS]]`` - ingest and summarise
  many traces into one partitioned Parquet dataset plus a per-trace summary table.
"""

from __future__ import annotations

from pathlib import Path

import click

from traceparse.cli.common import cache_of, check_output, emit, render
from traceparse.cli.main import main
from traceparse.errors import TraceError

_SHOWN = ["trace", "status", "kernels", "kernel_time_ns", "window_ns", "top_kernel",
          "compute_pct", "idle_pct", "error"]


@main.command("batch")
@click.argument("traces", type=str)
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory for the dataset (gpu/, api/, ranges/) and summary.")
@click.option("--executor", default="local", show_default=True,
              help="local (process pool), dask (a local Dask cluster) or dask=ADDRESS "
              "(an existing scheduler, e.g. dask=tcp://10.0.0.5:8786).")
@click.option("-j", "--workers", type=click.IntRange(1, 4096), default=None,
              help="Parallel workers (default: the CPU count).")
@click.option("--force", "force", is_flag=True,
              help="Write into OUT_DIR even if it already holds a batch summary (partitions "
                   "of the same traces are replaced, others kept).")
def batch(traces: str, out_dir: str, executor: str, workers: int | None,
          force: bool) -> None:
    """Ingest and summarise every trace in TRACES (a directory, searched recursively, or a
    glob pattern) into OUT_DIR: a Parquet dataset partitioned by trace
    (OUT_DIR/gpu/trace=<id>/part.parquet, also api/ and ranges/) and OUT_DIR/summary.parquet
    + summary.csv (one row per trace: kernels, GPU time, window, top kernel, attribution).

    Traces that fail are listed with their error in the summary; the exit code is then 2.
    Files that are no trace at all (a capture's *.meta.json sidecar, an unrelated CSV) are
    listed as skipped, with the reason, and do not fail the batch.
    """
    from traceparse.batch import discover, run_batch
    from traceparse.progress import Progress

    check_output(Path(out_dir) / "summary.parquet", force=force)
    paths = discover(traces)
    cache = cache_of()
    with Progress("batch", total=len(paths), unit="traces") as bar:
        summary = run_batch(paths, out_dir, executor=executor, workers=workers,
                            cache_dir=cache.directory if cache else None, on_done=bar.advance)
    cols = [c for c in _SHOWN if c in summary.columns]
    emit(render(summary.select(cols), "table", decimals={"compute_pct": 1, "idle_pct": 1}),
         None)
    failed = summary.filter(summary["status"] == "error").height
    skipped = summary.filter(summary["status"] == "skipped").height
    note = (f" ({skipped} file{'s' if skipped != 1 else ''} skipped: not a trace, see the "
            "error column of summary.csv)" if skipped else "")
    click.echo(f"wrote {out_dir}: {summary.height - failed - skipped} of "
               f"{summary.height - skipped} traces{note}", err=True)
    if failed:
        raise TraceError(out_dir, f"{failed} of {summary.height - skipped} traces failed (see "
                                  "the error column of summary.csv)")
