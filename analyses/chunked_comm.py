"""Collectives' exposure in time-ordered pieces: :func:`traceparse.analyses.comm.collectives`
of one export from its GPU rows read window by window (the chunked summary's
``communication`` and ``stragglers`` sections, :mod:`traceparse.comm_chunks`;
docs/performance.md, "Chunked summary").

A communication kernel's ``overlapped_ns`` is the length of its ``[start, end)`` under
the union ``U`` of the compute rows of its ``(rank, device)``. Cut at the window edges
``t0 < t1 < ...``, the overlap is the sum over the windows of ``|[start, end) ∩ [t0, t1)
∩ U|``, and inside ``[t0, t1)`` the union is known from two things only:

* the compute rows that **start** in the window (read with it), and
* the **reach**: per device, the latest end of the compute rows that started before
  ``t0``. Every such row that runs into the window covers ``[t0, its end)``, so together
  they cover ``[t0, reach)`` and nothing else of the window.

So each window (:func:`step`) takes the kernels that start in it plus the kernels still
running at ``t0`` (their overlap so far carried), clips each to ``[t0, t1)``, adds the
clipped kernel's overlap with ``U ∩ [t0, t1)`` (the memory path's own ``_overlap_ns``
on the union of the window's compute rows and ``[t0, reach)``), finishes the kernels that
end by ``t1`` and carries the others. Every length is integer ns, so the sums are exact
in any grouping. State across an edge (:class:`Carry`): one reach per device and the
collective kernels running at the edge (as many as run at once on the devices).

The finished kernels are kept (:data:`~traceparse.analyses.comm.KERNEL_COLUMNS` and the
overlap, in the order they were read: start order, as the memory frame holds them): one
row per collective kernel. From them :func:`traceparse.analyses.comm.kernel_rows` gives
the memory path's rows, so ``comm_summary`` and the stragglers are the memory functions
on the same frame. The same windows give the length of the union of collective kernels
under compute (:attr:`Carry.under`: per window, the union of the clipped active
kernels against the window's compute union), the one figure of
:func:`~traceparse.analyses.comm.concurrency` not read off the kernels' frame.

Example:
    device 0, windows [0, 100) and [100, 200): compute [50, 150) starts in the first,
    compute [170, 180) in the second; allreduce [80, 190) starts in the first. Window 1:
    the kernel clipped to [80, 100) under [50, 150): 20; reach 150. Window 2: clipped to
    [100, 190) under [100, 150) (the reach) and [170, 180): 50 + 10 = 60. Overlapped
    80, exposed 110 - 80 = 30, as the whole union [50, 150), [170, 180) gives.
"""

from __future__ import annotations

from typing import NamedTuple

import polars as pl

from traceparse.analyses import intervals
from traceparse.analyses.comm import KERNEL_COLUMNS, _overlap_ns

BY = ["rank", "device_id"]
#: Carried columns: the kernel's columns, the read order and the overlap so far.
_ORDER = "_i"
_OV = "_ov"


class Carry(NamedTuple):
    """What one window hands the next: per device the latest end of the compute rows
    started so far (``reach``), the collective kernels not yet ended (``open``), how
    many kernels were read (``seen``, the next read-order index) and the length so far
    of the union of collective kernels under compute, summed over devices (``under``,
    what :func:`traceparse.analyses.comm.concurrency` subtracts)."""

    reach: pl.DataFrame
    open: pl.DataFrame
    seen: int = 0
    under: int = 0


def start(rows: pl.DataFrame) -> Carry:
    """The carry before the first window (``rows``: any frame of the GPU schema, for the
    dtypes)."""
    kern = _kernels(rows.clear(), 0)
    return Carry(rows.clear().select(*BY, "end_ns"), kern.with_columns(pl.lit(0, pl.Int64)
                                                                       .alias(_OV)))


def _kernels(rows: pl.DataFrame, seen: int) -> pl.DataFrame:
    """The collective kernels of ``rows`` (the memory path's filter), numbered from
    ``seen`` in their order."""
    comm = rows.filter((pl.col("kind") == "kernel") & (pl.col("category") == "communication"))
    cols = [c for c in (*KERNEL_COLUMNS, "correlation_id") if c in rows.columns]
    return comm.select(*cols).with_columns(
        pl.int_range(seen, seen + comm.height, dtype=pl.Int64).alias(_ORDER))


def step(rows: pl.DataFrame, t0: int, t1: int, carry: Carry
         ) -> tuple[pl.DataFrame, Carry]:
    """One window ``[t0, t1)``: ``rows`` holds at least the GPU rows that start in it
    (others are dropped). Returns the kernels that end by ``t1`` with their whole
    overlap (``_ov``) and the carry for the next window.

    Example:
        (module docstring) window [0, 100): compute [50, 150), allreduce [80, 190) ->
        nothing finished; reach 150, the allreduce carried with 20.
    """
    own = rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
    comp = own.filter(pl.col("category") == "compute").select(*BY, "start_ns", "end_ns")
    new = _kernels(own, carry.seen)
    seen = carry.seen + new.height
    reach = pl.concat([carry.reach, comp.select(*BY, "end_ns")], how="vertical_relaxed")
    reach = reach.group_by(BY).agg(pl.col("end_ns").max())
    active = pl.concat([carry.open, new.with_columns(pl.lit(0, pl.Int64).alias(_OV))],
                       how="vertical_relaxed")
    if active.height == 0:
        return active, Carry(reach, active, seen, carry.under)
    before = carry.reach.filter(pl.col("end_ns") > t0).select(
        *BY, pl.lit(t0, pl.Int64).alias("start_ns"), pl.col("end_ns").cast(pl.Int64))
    cover = intervals.union(pl.concat([comp.cast({"start_ns": pl.Int64, "end_ns": pl.Int64}),
                                       before.cast(comp.schema)], how="vertical_relaxed"),
                            by=BY)
    clipped = active.select(*BY, pl.max_horizontal("start_ns", pl.lit(t0)).alias("start_ns"),
                            pl.min_horizontal("end_ns", pl.lit(t1)).alias("end_ns"))
    got = _overlap_ns(clipped, cover, BY) if cover.height else pl.Series(
        [0] * active.height, dtype=pl.Int64)
    under = carry.under
    if cover.height:  # every collective kernel overlapping the window is active
        under += int(_overlap_ns(intervals.union(clipped, by=BY), cover, BY).sum())
    active = active.with_columns((pl.col(_OV) + got.cast(pl.Int64)).alias(_OV))
    done = pl.col("end_ns") <= t1
    return active.filter(done), Carry(reach, active.filter(~done), seen, under)


def finish(done: list[pl.DataFrame], carry: Carry) -> pl.DataFrame:
    """The finished kernels of every window in read order, the memory frame's
    communication kernels with ``_ov``: their time under compute."""
    if carry.open.height:
        raise ValueError(f"{carry.open.height} collective kernels still open after the "
                         "last window")
    frames = [d for d in done if d.height]
    if not frames:
        return carry.open.drop(_ORDER)
    return pl.concat(frames, how="vertical_relaxed").sort(_ORDER).drop(_ORDER)
