"""One entry point for the roofline command: inputs -> (points, ceilings, notes).

* an ncu CSV: measured points from its launches, ceilings measured by ncu (base clock);
* a timeline (nsys/torch) with ``--ncu CSV``: measured points, plus the join report;
* a timeline alone: estimated points from op shapes (``estimated (shapes)``), with datasheet
  ceilings for the GPU named by ``--gpu`` or found in the devices table;
* an nsys trace with GPU metrics and no op shapes: one ``measured (nsys GPU metrics, ...)``
  point per kernel name from the DRAM throughput samples (:mod:`.metrics_points`); these
  have DRAM bytes but no FLOPs ("bandwidth-only", ``flop_per_s`` null, ``bound`` null).

One GPU per chart: the ceilings are those of the GPU the points were measured on (ncu's
``device__attribute_display_name`` for measured points), at the clock they were measured at
(ncu's SM clock, else the time-weighted GPC clock of nsys GPU metrics over the kernels;
datasheet compute roofs are rescaled to it, ``notes["clock_source"]`` says which). When the
timeline ran on a different GPU, ``notes["gpu_mismatch"]`` says so (the CLI warns, the
report shows a banner).
"""

from __future__ import annotations

import os
from typing import Any

import polars as pl

from traceparse import units
from traceparse.analyses.metrics import kernel_clock
from traceparse.analyses.steps import step_windows
from traceparse.roofline import gpus
from traceparse.roofline.coverage import coverage, step_split
from traceparse.roofline.estimate import estimated_kernels, estimated_points
from traceparse.roofline.join import join_ncu
from traceparse.roofline.metrics_points import bandwidth_points
from traceparse.roofline.model import measured_points
from traceparse.timeline import Timeline


def _device_name(r: dict[str, Any]) -> str | None:
    """The GPU a devices-table row names; a generic or empty name (ROCm) is identified from
    its GFXIP, CU count and memory (:func:`traceparse.roofline.gpus.identify`)."""
    if r["name"] is None:
        return None
    if not str(r["name"]).strip() or str(r["name"]).strip().lower() in gpus.GENERIC_NAMES:
        row, _ = gpus.identify(r["name"], sm_count=r["sm_count"],
                               memory_bytes=r["memory_bytes"],
                               compute=(r.get("compute_major"), r.get("compute_minor")),
                               vendor=str(r.get("vendor") or ""))
        return str(row["name"]) if row else None
    return str(r["name"])


def _device(tl: Timeline) -> tuple[str | None, int | None, int | None]:
    d = tl.devices.filter(pl.col("name").is_not_null())
    if not d.height:
        return None, None, None
    r = d.row(0, named=True)
    return _device_name(r), r["sm_count"], r["memory_bytes"]


def _unknown_device(tl: Timeline) -> str | None:
    """Why the trace's device is not in the ceiling table (None when it is, or none)."""
    d = tl.devices
    if not d.height:
        return None
    r = d.row(0, named=True)
    _, why = gpus.identify(r["name"], sm_count=r["sm_count"], memory_bytes=r["memory_bytes"],
                           compute=(r.get("compute_major"), r.get("compute_minor")),
                           vendor=str(r.get("vendor") or ""))
    return why


def _ncu_device(ncu: pl.DataFrame) -> str | None:
    """The device the ncu launches ran on (most common display name)."""
    names = ncu["device_name"].drop_nulls().cast(pl.String) if "device_name" in ncu.columns \
        else pl.Series([], dtype=pl.String)
    if not names.len():
        return None
    return str(names.mode().sort()[0])


def _same_gpu(a: str, b: str) -> bool:
    ra, rb = gpus.match(a), gpus.match(b)
    if ra is not None and rb is not None:
        return ra["name"] == rb["name"]
    return gpus.normalise(a) == gpus.normalise(b)


def gpu_mismatch(timeline_names: list[str], ncu_name: str | None) -> str | None:
    """A one-line warning when the ncu launches ran on another GPU than the timeline.

    Example:
        >>> gpu_mismatch(["NVIDIA A100-SXM4-80GB"], "NVIDIA H800")[:70]
        'ncu measured on NVIDIA H800 but the timeline ran on NVIDIA A100-SXM4-8'
    """
    if not ncu_name:
        return None
    other = sorted({n for n in timeline_names if n and not _same_gpu(n, ncu_name)})
    if not other:
        return None
    return (f"ncu measured on {ncu_name} but the timeline ran on {', '.join(other)}: the "
            f"roofline shows {ncu_name} (points and ceilings), not the timeline GPU")


def other_gpu_launches(ncu: pl.DataFrame, name: str | None) -> pl.Series:
    """Mask of the ncu launches that ran on another GPU than ``name`` (launches without a
    device name are taken to be on it: nothing says otherwise).

    Example:
        >>> n = pl.DataFrame({"device_name": ["NVIDIA H800", None, "NVIDIA H100 PCIe"]})
        >>> other_gpu_launches(n, "NVIDIA H800").to_list()
        [False, False, True]
    """
    if not name or "device_name" not in ncu.columns:
        return pl.Series("other", [False] * ncu.height, dtype=pl.Boolean)
    names = ncu["device_name"].cast(pl.String)
    same = {n: _same_gpu(n, name) for n in names.drop_nulls().unique().to_list()}
    return pl.Series("other", [n is not None and not same[n] for n in names.to_list()],
                     dtype=pl.Boolean)


def _gpu_count_line(names: pl.Series) -> str:
    counts = names.drop_nulls().cast(pl.String).value_counts(sort=True)
    return ", ".join(f"{n} ({units.plural(c, 'launch', 'launches')})"
                     for n, c in counts.iter_rows())


def other_gpu_ranks(tl: Timeline, name: str | None) -> tuple[list[int], str | None]:
    """Ranks whose kernels ran on another GPU than ``name`` (the chart's), and a line naming
    them; ([], None) when every device with kernels is that GPU."""
    if not name or not tl.gpu.height or not tl.devices.height:
        return [], None
    used = tl.gpu.select("rank", "device_id").unique().join(
        tl.devices, on=["rank", "device_id"], how="inner")
    # a device whose GPU is not known is taken to be the chart's (nothing says otherwise)
    off = [(int(r["rank"]), n) for r in used.iter_rows(named=True)
           if (n := _device_name(r)) is not None and not _same_gpu(n, name)]
    if not off:
        return [], None
    ranks = sorted({r for r, _ in off})
    gpus_off = ", ".join(sorted({n for _, n in off}))
    many = len(ranks) > 1
    return ranks, (f"the inputs ran on several GPUs: the roofline shows {name} only (one GPU "
                   f"per chart); rank{'s' if many else ''} {', '.join(map(str, ranks))} ran "
                   f"on {gpus_off} and {'are' if many else 'is'} left out: run roofline on "
                   f"{'their' if many else 'its'} inputs alone")


def _off_chart(points: pl.DataFrame, off: pl.DataFrame, name: str | None) -> pl.DataFrame:
    """Points of launches that ran on another GPU than the chart's: their measured rates
    stay, nothing that needs a ceiling does, and they are not placed."""
    where = {str(k): str(v) for k, v in off.select(
        pl.col("kernel_name").cast(pl.String), pl.col("device_name").cast(pl.String))
        .unique("kernel_name", keep="first").iter_rows()}
    none = ("peak_flop_per_s", "peak_dram_bytes_per_s", "ridge", "attainable_flop_per_s",
            "pct_of_roof", "bound")
    return points.with_columns(
        pl.lit(False).alias("placed"),
        *[pl.lit(None, points.schema[c]).alias(c) for c in none if c in points.columns],
        pl.format("ran on {}, not on {} (the chart's GPU): one GPU per chart; run roofline on "
                  "its inputs alone", pl.col("kernel_name").replace_strict(
                      where, default=None, return_dtype=pl.String), pl.lit(str(name)))
        .alias("note"))


def _drop_ranks(tl: Timeline, ranks: list[int]) -> Timeline:
    """``tl`` without the rows of ``ranks`` in the tables the estimate reads."""
    keep = ~pl.col("rank").is_in(ranks)
    tables = {t: tl.table(t).filter(keep) if "rank" in tl.table(t).columns else tl.table(t)
              for t in ("gpu", "ranges", "api", "devices", "metrics")}
    return Timeline(**{**tl.tables(), **tables}, meta=tl.meta)


#: Where the chart clock comes from for nsys traces with GPU metrics.
METRICS_CLOCK = "nsys GPU metrics GPC clock over the kernels"


def _metrics_clock(tl: Timeline) -> float | None:
    """Time-weighted GPC clock over all kernels of ``tl`` (None without clock samples)."""
    kc = kernel_clock(tl)
    if not kc.height:
        return None
    w = kc.select((pl.col("gpc_clock_hz") * pl.col("covered_ns")).sum() / pl.col("covered_ns")
                  .sum()).item()
    return float(w)


def build(trace: Timeline, *, ncu: Timeline | None = None, gpu: str | None = None,
          ceilings_file: str | os.PathLike[str] | None = None,
          by: str = "kernel") -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Roofline points and ceilings for ``trace`` (see module docstring).

    Notes: ``gpu`` (device the ceilings are for), ``ceiling_table_row``, ``sm_clock_hz``
    (clock of the compute roofs), ``clock_source`` (set when that clock was measured by nsys
    GPU metrics), ``gpu_mismatch``, ``join`` (ncu <-> timeline counts),
    ``coverage`` (kernel time placed measured / estimated / not placed) and ``unplaced``
    (reason -> kernels).
    """
    notes: dict[str, Any] = {}
    over = gpus.read_overrides(ceilings_file) if ceilings_file else None
    launches = ncu.ncu if ncu is not None else trace.ncu
    if launches.height:
        name = _ncu_device(launches)
        d_name, sms, mem = _device(ncu if ncu is not None else trace)
        if name is None:
            name = d_name
        elif d_name is None or not _same_gpu(d_name, name):
            sms, mem = None, None
        other = other_gpu_launches(launches, name)
        off = launches.filter(other)
        if off.height:  # one GPU per chart: the others' launches are listed, not placed
            counts = _gpu_count_line(launches["device_name"])
            several = (f"ncu launches ran on several GPUs, {counts}: the roofline shows "
                       f"{name} only (one GPU per chart); the launches on the others are "
                       "listed, not placed")
            launches = launches.filter(~other)
        timeline_names = [str(n) for n in trace.devices["name"].drop_nulls().to_list()
                          if ncu is not None or not off.height]
        mismatch = gpu_mismatch(timeline_names, name)
        if off.height:
            mismatch = f"{mismatch}; {several}" if mismatch else several
        if gpu and name and not _same_gpu(gpu, name):
            mismatch = (f"--gpu {gpu} ignored for measured points: ncu measured on {name}; "
                        "ceilings must be those of the measured GPU")
            gpu = None
        if mismatch:
            notes["gpu_mismatch"] = mismatch
        gpu = gpu or name
    else:
        name, sms, mem = _device(trace)
        if not gpu:  # --gpu names the ceilings for every device; else one GPU per chart
            ranks, notes["gpu_mismatch"] = other_gpu_ranks(trace, name)
            if ranks:
                trace = _drop_ranks(trace, ranks)
            else:
                del notes["gpu_mismatch"]
        gpu = gpu or name
    notes["gpu"] = gpu
    row = gpus.match(gpu, sm_count=sms, memory_bytes=mem) if gpu else None
    notes["ceiling_table_row"] = row["name"] if row else None
    if launches.height:
        if ncu is not None and trace.gpu.height:
            _, notes["join"] = join_ncu(trace.gpu, launches)
        ceil = gpus.ceilings(ncu=launches, gpu=gpu, sm_count=sms, memory_bytes=mem,
                             overrides=over)
        points = measured_points(launches, ceil, by=by)
        if off.height:
            points = pl.concat([points, _off_chart(measured_points(off, ceil.head(0), by=by),
                                                   off, name)], how="diagonal_relaxed")
    else:
        ceil = gpus.ceilings(gpu=gpu, sm_count=sms, memory_bytes=mem, overrides=over)
        clock = _metrics_clock(trace)
        if clock is not None:
            ceil = gpus.at_clock(ceil, clock, METRICS_CLOCK)
            if ceil.filter(pl.col("clock_hz") == clock).height:  # some roof is at that clock
                notes["clock_source"] = METRICS_CLOCK
        linked = estimated_kernels(trace.ranges, trace.gpu, trace.api, ceil=ceil)
        points = estimated_points(trace.ranges, trace.gpu, ceil, linked=linked)
        if not points.height:  # nsys-only: the DRAM counters give bandwidth-only points
            points = bandwidth_points(trace, ceil)
        if linked[1].height and points.height:
            notes["steps"] = step_split(linked[1], points, step_windows(trace),
                                        trace.gpu.filter(pl.col("kind") == "kernel"))
        if gpu is None:
            notes["gpu_unknown"] = _unknown_device(trace) or (
                "unknown GPU: no device in the trace; pass --gpu NAME for datasheet ceilings")
        elif row is None:
            notes["gpu_unknown"] = f"unknown GPU {gpu!r}: not in the ceiling table; use --gpu NAME"
    if not ceil.height and "gpu_unknown" not in notes:
        notes["gpu_unknown"] = (f"unknown GPU {gpu!r}" if gpu else "unknown GPU") + (
            ": no ceilings (no device attributes or peak metrics in the input); use --gpu NAME")
    clk = ceil.filter(pl.col("kind") == "compute")["clock_hz"].drop_nulls()
    notes["sm_clock_hz"] = float(clk.median()) if clk.len() else None  # type: ignore[arg-type]
    # measured points: coverage of the profiled launches (ncu durations); estimated points:
    # of the timeline's kernel time
    kernels = trace.gpu.filter(pl.col("kind") == "kernel") \
        if trace.gpu.height and not launches.height else None
    notes["coverage"] = coverage(points, kernels)
    un = points.filter(~pl.col("placed")) if "placed" in points.columns else points.head(0)
    notes["unplaced"] = {str(k): int(v) for k, v in
                         un.group_by("note").len().sort("note").iter_rows()} if un.height else {}
    return points, ceil, notes
