"""CLI commands: trace. Each command parses options, calls one library function and
writes the output.

* ``info TRACE`` - what is in a trace (format, versions, devices, processes, counts, span,
  skipped rows and why);
* ``kernels TRACE`` - ``nsys stats`` cuda_gpu_kern_sum;
* ``memops TRACE`` - cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum;
* ``api TRACE`` - cuda_api_sum;
* ``convert TRACE -o OUT [--to parquet|chrome]`` - save the unified timeline (Parquet
  directory) or export it as Chrome-trace JSON for the Perfetto UI.
"""

from __future__ import annotations

import json
import os

import click
import polars as pl

from traceparse.analyses import nsys_stats
from traceparse.cli.common import emit, load_trace, output_options, render
from traceparse.cli.main import main
from traceparse.errors import UsageError
from traceparse.timeline import Timeline

_TRACE = click.Path(exists=False, dir_okay=True)



def info_frame(tl: Timeline) -> pl.DataFrame:
    """A two-column (``item``, ``value``) summary of a timeline, one fact per row."""
    rows: list[tuple[str, str]] = []
    for src in tl.sources.iter_rows(named=True):
        if tl.sources.height > 1 or src["rank_source"] not in (None, "default"):
            rows.append(("rank", f"{src['rank']} (from {src['rank_source']})"))
        rows += [("file", str(src["file"])), ("format", str(src["format"])),
                 ("tool version", str(src["tool_version"] or "unknown")),
                 ("format version", str(src["format_version"] or "unknown"))]
    for dev in tl.devices.iter_rows(named=True):
        desc = dev["name"] or "unknown device"
        if dev["sm_count"]:
            desc += f", {dev['sm_count']} SMs"
        if dev["clock_hz"]:
            desc += f", {dev['clock_hz'] / 1e9:.2f} GHz"
        rows.append((f"device {dev['rank']}:{dev['device_id']}", desc))
    for proc in tl.meta.get("processes", []):
        rank = "" if proc.get("rank") is None else f" (rank {proc['rank']})"
        rows.append((f"process {proc['pid']}", str(proc.get("name") or "") + rank))
    for name in ("gpu", "api", "ranges"):
        frame = tl.table(name)
        if frame.height:
            # value_counts: ~15x faster than group_by().len() on a Categorical column
            counts = frame["kind"].value_counts().sort("kind")
            for kind, n in counts.iter_rows():
                rows.append((f"{name} {kind}", str(n)))
        else:
            rows.append((f"{name}", "0"))
    span = tl.span_ns()
    if span:
        rows.append(("time span", f"{span[0]} .. {span[1]} ns ({(span[1] - span[0]) / 1e9:.6f} s)"))
    rows += accounting_rows(tl.ingest)
    return pl.DataFrame(rows, schema=["item", "value"], orient="row")


def accounting_rows(ingest: pl.DataFrame) -> list[tuple[str, str]]:
    """Per source (table or event category) of each rank: ``input = parsed + skipped``, then
    one ``skipped`` line per reason.

    Example:
        >>> from traceparse.timeline import ingest_frame, ingest_rows
        >>> ing = ingest_frame(ingest_rows(0, "gpu", "KERNEL", 3, {"end before start": 1}))
        >>> accounting_rows(ing)
        [('input KERNEL', '4 = 3 parsed + 1 skipped'), ('skipped KERNEL', '1 (end before start)')]
    """
    rows: list[tuple[str, str]] = []
    ranks = ingest["rank"].n_unique() > 1
    for (rank, source), part in ingest.group_by(["rank", "source"], maintain_order=True):
        label = f"{source} (rank {rank})" if ranks else str(source)
        parsed = int(part.filter(pl.col("outcome") == "parsed")["count"].sum())
        skipped = part.filter(pl.col("outcome") == "skipped")
        total = parsed + int(skipped["count"].sum())
        rows.append((f"input {label}", f"{total} = {parsed} parsed + {total - parsed} skipped"))
        for r in skipped.iter_rows(named=True):
            rows.append((f"skipped {label}", f"{r['count']} ({r['reason']})"))
    return rows


@main.command()
@click.argument("trace", required=False, type=_TRACE)
@output_options
def info(trace: str | None, fmt: str, output: str | None) -> None:
    """Summarise TRACE: format, versions, devices, processes, counts, time span, skips.

    Without TRACE, summarise the bundled sample trace.
    """
    if trace is None:
        from traceparse.samplegen import default_sample  # type: ignore[import-not-found]

        trace = str(default_sample())
    tl = load_trace(trace)
    frame = info_frame(tl)
    if fmt == "json":
        payload = {"facts": dict(frame.iter_rows()),
                   "sources": tl.sources.to_dicts(), "devices": tl.devices.to_dicts(),
                   "processes": tl.meta.get("processes", []),
                   "ingest": tl.ingest.with_columns(pl.col(pl.Categorical).cast(pl.String))
                   .to_dicts()}
        emit(json.dumps(payload, indent=1, default=str) + "\n", output)
        return
    emit(render(frame, fmt, title=f"trace: {trace}"), output)


@main.command()
@click.argument("trace", type=_TRACE)
@click.option("--name", "name", type=click.Choice(["demangled", "short"]),
              default="demangled", show_default=True, help="Kernel name to group by.")
@click.option("--by", "by", type=click.Choice(["device", "stream"]), default=None,
              help="Also group by device or stream.")
@output_options
def kernels(trace: str, name: str, by: str | None, fmt: str, output: str | None) -> None:
    """Kernel time per kernel name (nsys stats cuda_gpu_kern_sum)."""
    frame = nsys_stats.kern_sum(load_trace(trace), name=name, by=by)  # type: ignore[arg-type]
    emit(render(frame, fmt, decimals=nsys_stats.DECIMALS_NS, nsys_csv=True), output)


@main.command()
@click.argument("trace", type=_TRACE)
@click.option("--report", "report", type=click.Choice(["time", "size", "both"]),
              default=None, help="time (cuda_gpu_mem_time_sum), size (cuda_gpu_mem_size_sum) "
              "or both. Default: both for table/json, time for csv.")
@output_options
def memops(trace: str, report: str | None, fmt: str, output: str | None) -> None:
    """Memory copy/set time and size per operation (nsys stats cuda_gpu_mem_*_sum)."""
    tl = load_trace(trace)
    report = report or ("time" if fmt == "csv" else "both")
    parts = []
    if report in ("time", "both"):
        parts.append(render(nsys_stats.mem_time_sum(tl), fmt, decimals=nsys_stats.DECIMALS_NS,
                            title="GPU memory operations by time", nsys_csv=True))
    if report in ("size", "both"):
        parts.append(render(nsys_stats.mem_size_sum(tl), fmt, decimals=nsys_stats.DECIMALS_MB,
                            title="GPU memory operations by size (MB = 10^6 bytes)",
                            nsys_csv=True))
    emit("\n".join(parts), output)


@main.command()
@click.argument("trace", type=_TRACE)
@output_options
def api(trace: str, fmt: str, output: str | None) -> None:
    """Host API (CUDA runtime + driver) time per call name (nsys stats cuda_api_sum)."""
    frame = nsys_stats.api_sum(load_trace(trace))
    emit(render(frame, fmt, decimals=nsys_stats.DECIMALS_NS, nsys_csv=True), output)


@main.command()
@click.argument("trace", type=_TRACE)
@click.option("-o", "--output", "output", required=True, type=click.Path(),
              help="Output path (a directory of Parquet files for --to parquet).")
@click.option("--to", "to", type=click.Choice(["parquet", "chrome"]), default="parquet",
              show_default=True, help="Output kind: parquet (a timeline directory) or chrome "
              "(Chrome-trace JSON for the Perfetto UI, with an attribution lane per GPU).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def convert(trace: str, output: str, to: str, force: bool) -> None:
    """Convert TRACE to the unified timeline and save it (parse once, analyse many times)."""
    if os.path.exists(output) and not force:
        raise UsageError(output, "exists; use --force to replace it")
    tl = load_trace(trace)
    if to == "parquet":
        path = tl.save(output)
        click.echo(f"wrote {path} ({tl.gpu.height} gpu, {tl.api.height} api, "
                   f"{tl.ranges.height} ranges rows)")
    elif to == "chrome":
        from traceparse.reports.chrome import write_chrome

        size = write_chrome(tl, output)
        click.echo(f"wrote {output} ({size:,} bytes; open it in the Perfetto UI)")
