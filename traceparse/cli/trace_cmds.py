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

from traceparse import units
from traceparse.analyses import nsys_stats
from traceparse.cli.common import (
    check_output,
    emit,
    emit_bytes,
    emit_frame,
    no_events,
    output_options,
    render,
    traces_argument,
    wrote,
)
from traceparse.cli.executors import chunked_input, executor_options, split_executor
from traceparse.cli.inputs import combined, load_inputs, load_traces, resolve
from traceparse.cli.main import main
from traceparse.roofline import gpus
from traceparse.timeline import Timeline

#: ``kernels`` and ``memops`` use only the ``gpu`` table: an nsys export read without the
#: cache skips the host tables for them (``traceparse.loader.load(tables=...)``).
GPU_ONLY = ("gpu",)


def multiprocessor_words(vendor: str | None) -> tuple[str, str]:
    """How a vendor names its multiprocessors: NVIDIA ``SM``, AMD ``compute unit``."""
    if vendor and vendor.lower() in ("amd", "advanced micro devices, inc."):
        return "compute unit", "compute units"
    return "SM", "SMs"


def info_frame(tl: Timeline) -> pl.DataFrame:
    """A two-column (``item``, ``value``) summary of a timeline, one fact per row."""
    rows: list[tuple[str, str]] = []
    for src in tl.sources.iter_rows(named=True):
        if tl.sources.height > 1 or src["rank_source"] not in (None, "default"):
            rows.append(("rank", f"{src['rank']} (from {src['rank_source']})"))
        rows += [("file", str(src["file"])), ("format", str(src["format"])),
                 ("tool version", str(src["tool_version"] or "unknown")),
                 ("format version", str(src["format_version"] or "unknown"))]
    devices, hidden = tl.devices, 0
    if devices["rank"].n_unique() > 1 and tl.gpu.height:
        # several ranks each list every GPU of their node (8 DLRM ranks x 8 GPUs = 64 rows,
        # 8 of which ran work): list the devices that ran something, count the others
        active = tl.gpu.select("rank", "device_id").unique()
        shown = devices.join(active, on=["rank", "device_id"], how="semi")
        if shown.height:
            hidden, devices = devices.height - shown.height, shown
    for dev in devices.iter_rows(named=True):
        desc = dev["name"] or ""
        if not desc.strip() or desc.strip().lower() in gpus.GENERIC_NAMES:
            # ROCm often names no device, or a generic one: identified as the roofline does
            row, _ = gpus.identify(dev["name"], sm_count=dev["sm_count"],
                                   memory_bytes=dev.get("memory_bytes"),
                                   compute=(dev.get("compute_major"), dev.get("compute_minor")),
                                   vendor=str(dev.get("vendor") or ""))
            desc = (f"{row['name']} (identified)" if row
                    else "unknown device")
        if dev["sm_count"]:
            desc += ", " + units.plural(int(dev["sm_count"]), *multiprocessor_words(
                dev.get("vendor")))
        if dev["clock_hz"]:
            desc += f", {units.clock(dev['clock_hz'])}"
        if dev.get("memory_bytes"):  # as the trace states it (bytes; also in --format json)
            desc += f", {units.size(dev['memory_bytes'])} memory"
        rows.append((f"device {dev['rank']}:{dev['device_id']}", desc))
    if hidden:
        rows.append(("devices without GPU activity",
                     f"{hidden} more listed by the ranks' traces (not shown)"))
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
    if tl.metrics.height:
        per = tl.metrics.group_by("rank", "device_id").agg(
            pl.len(), pl.col("metric").n_unique().alias("m"), pl.col("dur_ns").median())
        for rank, dev, n, m, med in per.sort("rank", "device_id").iter_rows():
            rate = f", sampled at {1e6 / med:.3g} kHz" if med else ""
            rows.append((f"metrics {rank}:{dev}", f"{n} samples of {m} GPU metrics{rate}"))
    if tl.memory.height:
        rows.append(("memory events", str(tl.memory.height)))
    span = tl.span_ns()
    if span:  # a duration; the raw clock values are in --format json (span_ns)
        rows.append(("time span", units.duration(span[1] - span[0])))
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
    unread: list[tuple[str, str]] = []
    for (rank, source), part in ingest.group_by(["rank", "source"], maintain_order=True):
        label = f"{source} (rank {rank})" if ranks else str(source)
        other = part.filter(pl.col("outcome").cast(pl.String).is_in(["lookup", "not read"]))
        for r in other.iter_rows(named=True):
            if r["table"] == "files":  # a file of a rank directory that is no trace
                unread.append((f"{r['outcome']} {source}", f"({r['reason']})"))
            else:
                unread.append((f"{r['outcome']} {label}", f"{r['count']} rows ({r['reason']})"))
        if other.height == part.height:
            continue
        parsed = int(part.filter(pl.col("outcome") == "parsed")["count"].sum())
        skipped = part.filter(pl.col("outcome") == "skipped")
        total = parsed + int(skipped["count"].sum())
        rows.append((f"input {label}", f"{total} = {parsed} parsed + {total - parsed} skipped"))
        for r in skipped.iter_rows(named=True):
            rows.append((f"skipped {label}", f"{r['count']} ({r['reason']})"))
    return rows + unread


@main.command()
@traces_argument
@output_options
def info(traces: tuple[str, ...], fmt: str, output: str | None, force: bool) -> None:
    """What is in TRACE...: format, versions, devices, processes, counts, time span, skipped
    rows and why.

    Without TRACE, describe the bundled sample trace.
    """
    paths, tls = load_inputs(traces, sample_default=True)
    tl = combined(paths, tls)
    frame = info_frame(tl)
    if fmt == "json":
        payload = {"facts": dict(frame.iter_rows()), "span_ns": tl.span_ns(),
                   "sources": tl.sources.to_dicts(), "devices": tl.devices.to_dicts(),
                   "processes": tl.meta.get("processes", []),
                   "ingest": tl.ingest.with_columns(pl.col(pl.Categorical).cast(pl.String))
                   .to_dicts()}
        emit(json.dumps(payload, indent=1, default=str) + "\n", output)
        return
    emit(render(frame, fmt, title=f"trace: {', '.join(paths)}"), output)


def _nothing(tl: Timeline, traces: tuple[str, ...], what: str) -> str:
    return no_events(tl, traces) or f"no {what} in {', '.join(traces)}"


@main.command()
@traces_argument
@click.option("--name", "name", type=click.Choice(["demangled", "short"]),
              default="demangled", show_default=True, help="Kernel name to group by.")
@click.option("--by", "by", type=click.Choice(["device", "stream"]), default=None,
              help="Also group by device or stream.")
@output_options
@executor_options
def kernels(traces: tuple[str, ...], name: str, by: str | None, fmt: str,
            output: str | None, force: bool, executor: str, chunk_rows: int,
            workers: int) -> None:
    """Kernel time per kernel name (nsys stats cuda_gpu_kern_sum)."""
    kind, address = split_executor(executor)
    if kind != "memory":
        from traceparse import executor as ex

        path = chunked_input(resolve(traces), kind)
        chunked = ex.kern_sum(path, name=name, by=by, executor=kind,  # type: ignore[arg-type]
                              chunk_rows=chunk_rows, workers=workers, scheduler=address)
        if chunked is not None:  # else no kernel: the in-memory path words it
            emit_frame(chunked, fmt, output, empty="", decimals=nsys_stats.DECIMALS_NS,
                       nsys_csv=True)
            return
    tl = load_traces(traces, tables=GPU_ONLY, timeline=True)
    frame = nsys_stats.kern_sum(tl, name=name, by=by)  # type: ignore[arg-type]
    emit_frame(frame, fmt, output, empty=_nothing(tl, traces, "kernels"),
               decimals=nsys_stats.DECIMALS_NS, nsys_csv=True)


@main.command()
@traces_argument
@click.option("--report", "report", type=click.Choice(["time", "size", "both"]),
              default=None, help="time (cuda_gpu_mem_time_sum), size (cuda_gpu_mem_size_sum) "
              "or both (JSON: one object with keys time and size). Default: both for "
              "table/json, time for csv.")
@output_options
def memops(traces: tuple[str, ...], report: str | None, fmt: str, output: str | None,
           force: bool) -> None:
    """Memory copy/set time and size per operation (nsys stats cuda_gpu_mem_*_sum)."""
    tl = load_traces(traces, tables=GPU_ONLY, timeline=True)
    report = report or ("time" if fmt == "csv" else "both")
    if fmt == "table" and not tl.gpu.filter(pl.col("kind").is_in(["memcpy", "memset"])).height:
        emit(_nothing(tl, traces, "memory copies or sets") + ".\n", output)
        return
    if fmt == "json" and report == "both":  # one document: {"time": [...], "size": [...]}
        emit(json.dumps({"time": nsys_stats.mem_time_sum(tl).to_dicts(),
                         "size": nsys_stats.mem_size_sum(tl).to_dicts()},
                        default=str, indent=1) + "\n", output)
        return
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
@traces_argument
@output_options
def api(traces: tuple[str, ...], fmt: str, output: str | None, force: bool) -> None:
    """Host API (CUDA/HIP runtime + driver) time per call name (nsys stats cuda_api_sum)."""
    tl = load_traces(traces, timeline=True)
    emit_frame(nsys_stats.api_sum(tl), fmt, output,
               empty=_nothing(tl, traces, "runtime or driver API calls"),
               decimals=nsys_stats.DECIMALS_NS, nsys_csv=True)


@main.command()
@traces_argument
@click.option("-o", "--output", "output", required=True, type=click.Path(), metavar="PATH",
              help="Output path: a directory of Parquet files for --to parquet; a .json or "
                   ".json.gz (gzip) file for --to chrome.")
@click.option("--to", "to", type=click.Choice(["parquet", "chrome"]), default="parquet",
              show_default=True, help="Output kind: parquet (a timeline directory) or chrome "
              "(Chrome-trace JSON for the Perfetto UI, with an attribution lane per GPU).")
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
def convert(traces: tuple[str, ...], output: str, to: str, force: bool) -> None:
    """Convert TRACE... to the unified timeline and save it (parse once, analyse many
    times), or export it as Chrome-trace JSON (gzip-compressed when PATH ends in .gz)."""
    check_output(output, force=force)
    # a Chrome trace of an ncu page alone had no event at all
    tl = load_traces(traces, timeline=to == "chrome")
    if to == "parquet":
        if os.path.lexists(output) and not os.path.isdir(output):
            os.remove(output)  # --force given; Timeline.save replaces directories only
        path = tl.save(output)
        ncu = f", {units.plural(tl.ncu.height, 'ncu row')}" if tl.ncu.height else ""
        wrote(path, f"{units.plural(tl.gpu.height, 'gpu row')}, "
                    f"{units.plural(tl.api.height, 'api row')}, "
                    f"{units.plural(tl.ranges.height, 'range row')}{ncu}")
    elif to == "chrome":
        from traceparse.reports.chrome import attribution_intervals, to_chrome

        data = to_chrome(tl, attribution=attribution_intervals(tl), flows=True)
        if output.lower().endswith(".gz"):
            import gzip

            data = gzip.compress(data, mtime=0)
        emit_bytes(data, output, f"{len(data):,} bytes; open it in the Perfetto UI")
