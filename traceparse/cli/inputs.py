"""What every analysis command accepts as input, in one place (docs/cli.md, "Inputs").

``TRACE...`` is one or more of: a trace file (nsys ``.sqlite``, Kineto ``.json[.gz]``, ncu
``.csv``, a saved timeline directory), a directory of per-rank Kineto files, or a glob
pattern (expanded here too, so a quoted ``'runs/*.json'`` works without a shell). Several
inputs become one timeline, one rank per input when they do not say their rank
(:func:`traceparse.reports.payload.combine`), exactly as ``report`` always did, once they
agree that they are one job (:mod:`traceparse.jobcheck`; ``--as-one-job`` skips the check).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

import click
import polars as pl

from traceparse import schema
from traceparse.errors import UsageError
from traceparse.timeline import Timeline

_GLOB_CHARS = set("*?[")


def expand(traces: Sequence[str]) -> list[str]:
    """Each argument as given when it exists, else its glob matches (sorted).

    Raises:
        UsageError: an argument neither exists nor matches a file.
    """
    out: list[str] = []
    for t in traces:
        if os.path.exists(t) or not (_GLOB_CHARS & set(t)):
            out.append(t)  # a missing plain path is reported by the loader, naming it
            continue
        hits = sorted(glob.glob(t, recursive=True))
        if not hits:
            raise UsageError(t, "matches no file")
        out += hits
    return out


def resolve(traces: Sequence[str], *, sample_default: bool = False) -> list[str]:
    """The input paths of a command: ``traces`` expanded; with none, the bundled sample
    when ``sample_default``, else a usage error."""
    paths = expand(traces)
    if paths:
        return paths
    if sample_default:
        from traceparse.samplegen.scenarios import default_sample

        return [str(default_sample())]
    raise UsageError(None, "missing TRACE: give one or more trace files, a rank directory "
                           "or a glob")


def load_traces(traces: Sequence[str], *, sample_default: bool = False,
                gpu: str | None = None, ctx: click.Context | None = None,
                tables: Sequence[str] | None = None, timeline: bool = False) -> Timeline:
    """Load and combine the inputs of a command (see the module docstring); with ``gpu``,
    every device is taken to be that ceiling-table row (:func:`override_gpu`). ``tables``:
    the only timeline tables the command uses (None: all; an nsys export read without the
    cache then skips the others, see :func:`traceparse.loader.load`). ``timeline``: the
    command reads the timeline only, so an Nsight Compute page alone is the wrong kind of
    input (:func:`no_timeline`)."""
    paths, tls = load_inputs(traces, sample_default=sample_default, ctx=ctx, tables=tables)
    tl = combined(paths, tls, ctx)
    if timeline:
        no_timeline(tl, paths)
    return override_gpu(tl, gpu) if gpu else tl


def no_timeline(tl: Timeline, paths: Sequence[str]) -> None:
    """Raise a :class:`UsageError` for an Nsight Compute page given to a timeline command:
    ncu replays each kernel on its own, so the page has kernels but no timeline, and an
    empty answer ("no kernels in ...") would be false of it."""
    if not tl.ncu_only():
        return
    from traceparse import units

    cmd = click.get_current_context(silent=True)
    name = f"`{cmd.info_name}`" if cmd is not None and cmd.info_name else "this command"
    n = units.plural(tl.rows("ncu"), "kernel launch", "kernel launches")
    raise UsageError(paths[0] if len(paths) == 1 else None,
                     f"an Nsight Compute page has no timeline (ncu profiles each kernel "
                     f"launch on its own): {name} needs an nsys export or a Kineto trace; "
                     f"`traceparse summary`, `roofline`, `report` and `batch` read its {n}")


def combined(paths: Sequence[str], tls: Sequence[Timeline],
             ctx: click.Context | None = None) -> Timeline:
    """The inputs as one timeline, once they are one job (:func:`check_one_job`)."""
    if len(tls) == 1:
        return tls[0]  # what combine returns; its module (with numpy) is not imported
    from traceparse.reports.payload import combine

    check_one_job(paths, tls, ctx)
    return combine(list(tls))


def load_inputs(traces: Sequence[str], *, sample_default: bool = False,
                ctx: click.Context | None = None, tables: Sequence[str] | None = None
                ) -> tuple[list[str], list[Timeline]]:
    """The inputs' paths and timelines, each rank directory checked to be one job
    (:func:`check_rank_directory`). A file a glob matched that is no trace at all
    (:class:`~traceparse.errors.NotATrace`: ``'run/*.json'`` also matches the capture's
    ``*.meta.json``) is left out with one line on stderr, as a rank directory leaves it
    out; a file named as such that is no trace is an error (exit 2)."""
    from traceparse.cli.common import load_trace
    from traceparse.errors import NotATrace

    paths = resolve(traces, sample_default=sample_default)
    named = set(traces)
    kept: list[str] = []
    tls: list[Timeline] = []
    left_out: list[NotATrace] = []
    for p in paths:
        try:
            t = load_trace(p, ctx, tables=tables)
        except NotATrace as exc:
            if p in named:
                raise
            left_out.append(exc)
            continue
        check_rank_directory(p, t, ctx)
        kept.append(p)
        tls.append(t)
    if left_out and not tls:
        first = left_out[0]
        raise UsageError(", ".join(traces), "matches no trace (first: "
                         f"{os.path.basename(first.path or '')}: {first.problem})")
    if left_out:
        names = ", ".join(os.path.basename(e.path or "") for e in left_out)
        click.echo(f"traceparse: not read, no trace ({left_out[0].problem}): {names}",
                   err=True)
    return kept, tls


def check_one_job(paths: Sequence[str], tls: Sequence[Timeline],
                  ctx: click.Context | None = None) -> None:
    """Exit 2 with one line when several inputs are not one job
    (:func:`traceparse.jobcheck.disagreement`), unless ``--as-one-job`` was given."""
    if len(tls) < 2:
        return
    here = ctx or click.get_current_context(silent=True)
    if here is not None and here.meta.get("traceparse.as_one_job"):
        return
    from traceparse.jobcheck import disagreement

    why = disagreement(paths, tls)
    if why:
        raise UsageError(None, why)


def check_rank_directory(path: str, tl: Timeline, ctx: click.Context | None = None) -> None:
    """Exit 2 with one line when the files of a directory of per-rank Kineto traces are
    not the ranks of one job (:func:`traceparse.jobcheck.rank_disagreement`: different
    GPUs or drivers, captures that do not overlap in time), unless ``--as-one-job``."""
    if not os.path.isdir(path) or os.path.isfile(os.path.join(path, "timeline.json")):
        return
    here = ctx or click.get_current_context(silent=True)
    if here is not None and here.meta.get("traceparse.as_one_job"):
        return
    from traceparse.jobcheck import rank_disagreement

    why = rank_disagreement(tl)
    if why:
        raise UsageError(path, why)


def gpu_row(name: str) -> dict[str, object]:
    """The ceiling-table row ``--gpu NAME`` names.

    Raises:
        UsageError: no row matches NAME.
    """
    from traceparse.roofline import gpus

    row = gpus.match(name)
    if row is None:
        raise UsageError(None, f"--gpu {name!r} is not in the GPU table; "
                               "`traceparse gpus` lists the names")
    return row


def override_gpu(tl: Timeline, name: str) -> Timeline:
    """``tl`` with every device (every ``(rank, device_id)`` that has GPU work or a device
    row) described as the ceiling-table row ``name``: its name, vendor, SM/CU count and
    memory size, so every ceiling lookup (roofline, calibration, report) resolves to it."""
    from traceparse.roofline import gpus

    row = gpu_row(name)
    # a row may cover several sizes (V100 SXM2: 16 and 32 GB): the size NAME states wins
    keys = pl.concat([tl.devices.select("rank", "device_id"),
                      tl.gpu.select("rank", "device_id")]).unique().sort("rank", "device_id")
    mem = gpus.stated_memory_gb(name) or row.get("mem_gb")
    fixed = {"name": str(row["name"]), "vendor": str(row.get("vendor") or "").lower() or None,
             "sm_count": int(str(row["sm_count"])) if row.get("sm_count") else None,
             "memory_bytes": int(float(str(mem)) * 1e9) if mem else None}
    old = tl.devices.unique(subset=["rank", "device_id"], keep="first")
    devices = keys.join(old, on=["rank", "device_id"], how="left")
    devices = devices.with_columns(
        pl.lit(fixed["name"]).alias("name"), pl.lit(fixed["vendor"]).alias("vendor"),
        pl.lit(fixed["sm_count"]).alias("sm_count"),
        pl.lit(fixed["memory_bytes"]).alias("memory_bytes"))
    tables = tl.tables()
    tables["devices"] = schema.conform("devices", devices)
    return Timeline(**tables, meta=tl.meta)
