"""One entry point for the roofline command: inputs -> (points, ceilings, notes).

* an ncu CSV: measured points from its launches, ceilings measured by ncu (base clock);
* a timeline (nsys/torch) with ``--ncu CSV``: measured points, plus the join report;
* a timeline alone: estimated points from op shapes (``estimated (shapes)``), with datasheet
  ceilings for the GPU named by ``--gpu`` or found in the devices table.
"""

from __future__ import annotations

import os
from typing import Any

import polars as pl

from traceparse.roofline import gpus
from traceparse.roofline.estimate import estimated_points
from traceparse.roofline.join import join_ncu
from traceparse.roofline.model import measured_points
from traceparse.timeline import Timeline


def _device(tl: Timeline) -> tuple[str | None, int | None, int | None]:
    d = tl.devices.filter(pl.col("name").is_not_null())
    if not d.height:
        return None, None, None
    r = d.row(0, named=True)
    return r["name"], r["sm_count"], r["memory_bytes"]


def build(trace: Timeline, *, ncu: Timeline | None = None, gpu: str | None = None,
          ceilings_file: str | os.PathLike[str] | None = None,
          by: str = "kernel") -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Roofline points and ceilings for ``trace`` (see module docstring)."""
    notes: dict[str, Any] = {}
    over = gpus.read_overrides(ceilings_file) if ceilings_file else None
    src = ncu if ncu is not None else (trace if trace.ncu.height else None)
    name, sms, mem = _device(src if src is not None else trace)
    if name is None and src is not None:
        name, sms, mem = _device(trace)
    gpu = gpu or name
    notes["gpu"] = gpu
    row = gpus.match(gpu, sm_count=sms, memory_bytes=mem) if gpu else None
    notes["ceiling_table_row"] = row["name"] if row else None
    if src is not None:
        launches = src.ncu
        if ncu is not None and trace.gpu.height:
            _, notes["join"] = join_ncu(trace.gpu, launches)
        ceil = gpus.ceilings(ncu=launches, gpu=gpu, sm_count=sms, memory_bytes=mem,
                             overrides=over)
        return measured_points(launches, ceil, by=by), ceil, notes
    ceil = gpus.ceilings(gpu=gpu, sm_count=sms, memory_bytes=mem, overrides=over)
    return estimated_points(trace.ranges, trace.gpu, ceil), ceil, notes
