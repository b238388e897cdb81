"""The under-filled launches of the chunked report payload (``evidence``,
:mod:`traceparse.payload_chunks`): :func:`traceparse.analyses.occupancy.underfilled` of one
nsys export, exactly, from pass 1's windows.

**What the function reads.** For each device with an SM count (``sm_count``, from the
devices table or the GPU table by name), the kernels of category ``compute`` whose name is
not a library GEMM and whose grid is known (every ``grid_*`` set and positive): per
``(rank, device_id, name)`` their count and summed duration (``launches``, ``time_ns``),
per device their shortest positive duration (``floor``), the device's window (first start
to last end of its non-``sync`` rows), and, row by row, the launches with fewer blocks than
the SMs (``blocks < sm_count``, the candidates): every other output column (the
under-filled counts and time, ``at_stake_ns``, the blocks and configurations, ``rows``) is
a function of the candidates only, given floor, window and SM count, because a launch is
under-filled only when ``blocks < reach <= sm_count``. ``rows`` (the launching op's input
shape) is null for every nsys launch: the nsys reader never sets ``ranges.input_dims``, so
``_row_counts`` returns no row in memory as on any timeline without shapes.

**Pass 1** (:func:`under_part`, from the rows that start in the window, so each counts
once): those counts and sums per name, the floor and window per device (minima and
maxima) and the candidate rows, with ``blocks`` below the largest SM count of any device
the export describes (:func:`sm_bound`, read before the passes: no device has more, so no
under-filled launch is left out). Merges are sums, minima, maxima and concatenation.

**The frame** (:func:`underfilled_rows`) is the function itself run on a small timeline:
the candidate rows in the memory path's order (stably by start: rows of equal start come
from one window, in the reader's order), per device one kernel row of the floor's duration
with as many blocks as the largest SM count (never a candidate, so it only sets the floor)
and one ``memset`` row spanning the window. Within each name the under-filled launches are
the memory path's, in its order, so the float ``at_stake_ns`` sum runs over the same values
in the same order; ``launches`` and ``time_ns`` (integers) are then replaced by the
whole-file ones, and ``share_pct``, the :data:`~traceparse.analyses.occupancy.MIN_SHARE`
filter and the sort are applied as the function applies them (it is run with
``min_share=0`` so that no name is dropped on its partial time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import polars as pl

from traceparse.timeline import Timeline

__all__ = ["UnderPart", "merge_under_parts", "sm_bound", "under_part", "underfilled_rows"]

#: The floor row's name (a control character: no kernel is named so; not a GEMM).
FLOOR_NAME = "\x00traceparse floor"
_KEY = ["rank", "device_id", "name"]
_DIMS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
_CAND = ("rank", "device_id", "name", "start_ns", "end_ns", "dur_ns", *_DIMS)


class UnderPart(NamedTuple):
    """Pass 1's partial of the under-filled launches (module docstring)."""

    totals: pl.DataFrame
    floor: pl.DataFrame
    window: pl.DataFrame
    cand: pl.DataFrame


def sm_bound(path: str) -> int | None:
    """The largest SM count of the devices ``path`` describes (the devices table, else the
    GPU table by name); None when none has one (no launch can be under-filled)."""
    from traceparse import schema
    from traceparse.analyses.occupancy import sm_counts
    from traceparse.nsys.db import NsysDB
    from traceparse.nsys.reader import read_devices

    with NsysDB(path) as db:
        devices = read_devices(db, schema.empty("gpu"), 0)[0]
    sms = sm_counts(Timeline(devices=devices))
    return int(sms["sm_count"].max()) if sms.height else None  # type: ignore[arg-type]


def under_part(rows: pl.DataFrame, t0: int, t1: int, bound: int | None) -> UnderPart:
    """The partial of the rows of ``rows`` that start in ``[t0, t1)`` (``rows`` read with
    the grid columns: :func:`traceparse.nsys.chunks.read_rows` ``grid=True``)."""
    from traceparse.analyses.kclass import class_expr

    own = rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
    window = (own.filter(pl.col("kind").cast(pl.String) != "sync")
              .group_by("rank", "device_id")
              .agg(pl.col("start_ns").min(), pl.col("end_ns").max()))
    k = (own.filter((pl.col("kind").cast(pl.String) == "kernel")
                    & (pl.col("category").cast(pl.String) == "compute"))
         .select(*_CAND).with_columns(pl.col("name").cast(pl.String)))
    names = k.select(pl.col("name").unique()).with_columns(
        pl.lit("compute").alias("category")).with_columns(class_expr())
    gemm = names.filter(pl.col("kclass") == "gemm")["name"]
    grid = [pl.col(c).cast(pl.Int64) for c in _DIMS[:3]]
    k = k.filter(~pl.col("name").is_in(gemm.implode()).fill_null(False)
                 & pl.all_horizontal(*(d.is_not_null() & (d > 0) for d in grid)))
    cand = k.filter(pl.lit(bound is not None)
                    & (grid[0] * grid[1] * grid[2] < (bound or 0)))
    return UnderPart(
        k.group_by(_KEY).agg(pl.len().cast(pl.Int64).alias("launches"),
                             pl.col("dur_ns").sum().alias("time_ns")),
        k.filter(pl.col("dur_ns") > 0).group_by("rank", "device_id")
        .agg(pl.col("dur_ns").min().alias("floor_ns")),
        window, cand)


def merge_under_parts(parts: Sequence[UnderPart]) -> UnderPart:
    """The partial of several windows' rows (in any order)."""
    def cat(i: int) -> pl.DataFrame:
        return pl.concat([p[i] for p in parts], how="vertical_relaxed")

    return UnderPart(
        cat(0).group_by(_KEY).agg(pl.col("launches", "time_ns").sum()),
        cat(1).group_by("rank", "device_id").agg(pl.col("floor_ns").min()),
        cat(2).group_by("rank", "device_id").agg(pl.col("start_ns").min(),
                                                 pl.col("end_ns").max()),
        cat(3))


def underfilled_rows(devices: pl.DataFrame, part: UnderPart, *,
                     min_share: float | None = None) -> pl.DataFrame:
    """:func:`~traceparse.analyses.occupancy.underfilled` of the whole export from the
    merged partial ``part`` and the export's ``devices`` (module docstring)."""
    from traceparse import schema
    from traceparse.analyses.occupancy import MIN_SHARE, UNDERFILLED_SCHEMA, sm_counts, underfilled

    share = MIN_SHARE if min_share is None else min_share
    sms = sm_counts(Timeline(devices=devices))
    if part.cand.height == 0 or sms.height == 0:
        return pl.DataFrame(schema=UNDERFILLED_SCHEMA)
    most = int(sms["sm_count"].max())  # type: ignore[arg-type]
    cand = part.cand.sort("start_ns", maintain_order=True).with_columns(
        pl.lit("kernel").alias("kind"), pl.lit("compute").alias("category"))
    floor = part.floor.join(part.window, on=["rank", "device_id"], how="inner").select(
        "rank", "device_id", pl.lit("kernel").alias("kind"),
        pl.lit("compute").alias("category"), pl.lit(FLOOR_NAME).alias("name"), "start_ns",
        (pl.col("start_ns") + pl.col("floor_ns")).alias("end_ns"),
        pl.col("floor_ns").alias("dur_ns"), pl.lit(most, pl.Int64).alias("grid_x"),
        *(pl.lit(1, pl.Int64).alias(c) for c in _DIMS[1:]))
    span = part.window.select(
        "rank", "device_id", pl.lit("memset").alias("kind"),
        pl.lit("memory").alias("category"), pl.lit("memset").alias("name"), "start_ns",
        "end_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    gpu = schema.conform("gpu", pl.concat([cand, floor, span], how="diagonal_relaxed"))
    got = underfilled(Timeline(gpu=gpu, devices=devices), min_share=0.0)
    totals = part.totals.with_columns(pl.col("rank").cast(pl.Int32),
                                      pl.col("device_id").cast(pl.Int32))
    out = (got.drop("launches", "time_ns", "share_pct")
           .join(totals, on=_KEY, how="left")
           .with_columns((100.0 * pl.col("time_ns") / pl.col("window_ns")).alias("share_pct"))
           .filter(pl.col("time_ns") >= share * pl.col("window_ns")))
    return (out.select(list(UNDERFILLED_SCHEMA)).cast(pl.Schema(UNDERFILLED_SCHEMA))
            .sort(["at_stake_ns", "name"], descending=[True, False]))
