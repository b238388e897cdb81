"""Partials of ``summary``'s sections that the chunked breakdown, gaps and launches do not
already give, for one nsys export read in time windows (:mod:`traceparse.summary_chunks`).

A window's partial (:class:`SummaryPart`, from the GPU rows that **start** in it, so each
row counts once) holds:

* ``kernels``: per kernel name, instances and summed duration (``top_kernels``);
* ``counts``: kernels, memory copies and sets, communication rows and graph records (the
  ``window`` section's counts, and the whole-file facts that prove ``communication``,
  ``stragglers`` and ``graphs`` empty);
* ``devices``: the distinct ``(rank, device_id)`` pairs (``window``'s ``devices``);
* ``tree``: per rank and whether the kernel has a launch call, kernels, summed duration
  and duration per category (the op tree of a trace without tree ranges,
  :func:`traceparse.analyses.optree.unranged_tree`);
* ``sample``: the first row of each ``(rank, kind)``: the GPU rows of the small timeline
  on which the sections proven empty are computed by their own functions.

Partials merge by sums, unions and firsts in time order; every merge is exact.

Example:
    Two windows, kernel ``k`` of 10 ns starting in the first and of 30 ns in the second:
    ``kernels`` ``k, 2, 40``; ``top_kernels`` avg 20.0, pct 100.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import polars as pl

from traceparse.analyses.chunked_ranges import merge_owner_parts
from traceparse.analyses.optree import TREE_CATEGORIES

_KEY = ["rank", "process_id", "correlation_id"]
#: The count columns of :attr:`SummaryPart.counts`.
COUNTS = ("kernels", "memops", "communication", "graphs")


class SummaryPart(NamedTuple):
    """The summary partial of the GPU rows starting in one or more time windows (module
    docstring)."""

    kernels: pl.DataFrame
    counts: pl.DataFrame
    devices: pl.DataFrame
    tree: pl.DataFrame
    sample: pl.DataFrame
    #: per owning node, the kernels' sums of an export with ranges
    #: (:func:`traceparse.analyses.chunked_ranges.owner_part`), None without them
    owners: pl.DataFrame | None = None


def summary_part(rows: pl.DataFrame, api: pl.DataFrame, t0: int, t1: int) -> SummaryPart:
    """The partial of the rows of ``rows`` (a window's GPU rows,
    :func:`traceparse.nsys.chunks.read_rows`) that start in ``[t0, t1)``; ``api``: every
    runtime call that may share a key with them (a kernel is linked when one does, as
    :func:`traceparse.links.launch_links` links it)."""
    own = rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
    kind = pl.col("kind")  # compared as codes: no string per row
    k = own.filter(kind == "kernel")
    # grouped on the name's dictionary codes; only the distinct names become strings
    kernels = (k.group_by("name")
               .agg(pl.len().cast(pl.Int64).alias("instances"),
                    pl.col("dur_ns").sum().cast(pl.Int64).alias("total_ns"))
               .with_columns(pl.col("name").cast(pl.String)))
    counts = own.select(
        (kind == "kernel").sum().cast(pl.Int64).alias("kernels"),
        kind.is_in(["memcpy", "memset"]).sum().cast(pl.Int64).alias("memops"),
        (pl.col("category") == "communication").sum().cast(pl.Int64)
        .alias("communication"),
        (kind == "graph").sum().cast(pl.Int64).alias("graphs"))
    keys = (api.filter(pl.all_horizontal(pl.col(_KEY).is_not_null())
                       & pl.col("start_ns").is_not_null())
            .select(_KEY).unique().with_columns(pl.lit(True).alias("linked")))
    cat = pl.col("category")
    tree = (k.select(*_KEY, "dur_ns", "category")
            .join(keys.cast({c: k.schema[c] for c in _KEY}), on=_KEY, how="left")
            .group_by("rank", pl.col("linked").fill_null(False))
            .agg(pl.len().cast(pl.Int64).alias("kernels"),
                 pl.col("dur_ns").sum().cast(pl.Int64),
                 *(pl.col("dur_ns").filter(cat == c).sum().cast(pl.Int64).alias(f"{c}_ns")
                   for c in TREE_CATEGORIES)))
    return SummaryPart(kernels, counts, own.select("rank", "device_id").unique(), tree,
                       own.unique(subset=["rank", "kind"], keep="first", maintain_order=True))


def merge_summary_parts(parts: Sequence[SummaryPart]) -> SummaryPart:
    """The partial of several windows' rows (``sample`` keeps the earliest part's first
    rows: parts are given in time order)."""
    tree = pl.concat([p.tree for p in parts])
    owners = [p.owners for p in parts if p.owners is not None]
    return SummaryPart(
        pl.concat([p.kernels for p in parts]).group_by("name").agg(
            pl.col("instances").sum(), pl.col("total_ns").sum()),
        pl.concat([p.counts for p in parts]).sum(),
        pl.concat([p.devices for p in parts]).unique(),
        tree.group_by("rank", "linked").agg(pl.exclude("rank", "linked").sum()),
        pl.concat([p.sample for p in parts], how="vertical_relaxed")
        .unique(subset=["rank", "kind"], keep="first", maintain_order=True),
        merge_owner_parts(owners) if owners else None)


def top_kernels(part: SummaryPart, top: int) -> pl.DataFrame:
    """``summary``'s ``top_kernels`` section
    (:func:`traceparse.analyses.summary.top_kernels_section`) from the merged partial."""
    k = part.kernels
    if k.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "instances": pl.UInt32,
                                    "total_ns": pl.Int64, "avg_ns": pl.Float64,
                                    "pct": pl.Float64})
    total = int(k["total_ns"].sum())
    return (k.select("name", pl.col("instances").cast(pl.UInt32), "total_ns",
                     (pl.col("total_ns") / pl.col("instances")).alias("avg_ns"),
                     (pl.col("total_ns") * 100.0 / max(total, 1)).alias("pct"))
            .sort(["total_ns", "name"], descending=[True, False])
            .head(top))


def window(part: SummaryPart, span: tuple[int, int], api_calls: int) -> pl.DataFrame:
    """``summary``'s ``window`` section (:func:`traceparse.analyses.summary.window_section`)
    from the merged partial, the trace's first event and last end (``span``: over the GPU
    rows, calls and ranges) and the number of runtime calls."""
    c = part.counts.row(0, named=True)
    return pl.DataFrame({
        "start_ns": [span[0]], "end_ns": [span[1]], "dur_ns": [span[1] - span[0]],
        "devices": [part.devices.height], "kernels": [int(c["kernels"] or 0)],
        "memops": [int(c["memops"] or 0)], "api_calls": [api_calls]})
