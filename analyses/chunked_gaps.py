"""Idle gaps found on pieces of a trace, merged exactly (pure functions).

The first pass of ``gaps`` on a chunked executor (:func:`traceparse.executor.idle_gaps`):
which stretches of each ``(rank, device_id)`` are gaps of
:func:`traceparse.analyses.gaps.idle_gaps`. A gap there is a maximal stretch inside the
group's window (first start to last end of its busy activities,
:func:`~traceparse.analyses.attribution.busy_activities`: every GPU row but ``sync``) that
no busy activity covers, kept when it lasts at least ``min_ns``. It depends on the busy
activities only, so it is found in time windows with one number carried per group.

**Partial** of a window ``[t0, t1)`` (:func:`window_gaps`): the busy activities that
*start* in it (each row is owned by one window), per group their first start, their
latest end, and the holes between them (a hole follows a row that starts after every
earlier row of the window has ended) of at least ``min_ns``. **Merge** (:func:`merge_gaps`,
ordered, associative): the later partial's holes are cut to start at the earlier one's
latest end (an earlier activity may run into them; one that shrinks below ``min_ns`` is
dropped: cutting only shortens), the stretch between the earlier latest end and the later
first start becomes a gap, first and latest end combine by min and max. The state carried
across an edge is one row per group; the holes are the output itself.

Example (``min_ns`` 10): window A has [0, 100) and [150, 400); window B has [300, 320)
and [450, 500). A: first 0, end 400, hole [100, 150). B: first 300, end 500, hole
[320, 450). Merged: hole [320, 450) cut to [400, 450); gaps [100, 150), [400, 450).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

#: The group of :func:`traceparse.analyses.gaps.idle_gaps` (``DEFAULT_GROUP``).
GROUP = ["rank", "device_id"]
_SCHEMA = {"rank": pl.Int32, "device_id": pl.Int32, "_bound": pl.Boolean,
           "start_ns": pl.Int64, "end_ns": pl.Int64}


def _typed(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(pl.col(c).cast(t) for c, t in _SCHEMA.items())


def window_gaps(acts: pl.DataFrame, t0: int, t1: int, min_ns: int) -> pl.DataFrame:
    """The partial of window ``[t0, t1)`` (module docstring) from GPU rows that include
    every row starting in it (others are ignored; ``category`` ``sync`` is not busy).
    Rows with ``_bound`` true: per group, ``start_ns`` = first start, ``end_ns`` = latest
    end; false: the holes of at least ``min_ns``."""
    own = (acts.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1)
                       & (pl.col("category").cast(pl.String) != "sync"))
           .select(*GROUP, "start_ns", "end_ns").sort([*GROUP, "start_ns"], nulls_last=True))
    if own.height == 0:
        return _typed(pl.DataFrame(schema=_SCHEMA))
    prev = pl.col("end_ns").cum_max().shift(1).over(GROUP)
    holes = (own.with_columns(prev.alias("_p"))
             .filter(pl.col("_p").is_not_null() & (pl.col("start_ns") - pl.col("_p") >= min_ns))
             .select(*GROUP, pl.lit(False).alias("_bound"), pl.col("_p"),
                     pl.col("start_ns").alias("end_ns"))
             .rename({"_p": "start_ns"}))
    bounds = own.group_by(GROUP).agg(pl.lit(True).alias("_bound"), pl.col("start_ns").min(),
                                     pl.col("end_ns").max())
    return _typed(pl.concat([_typed(bounds), _typed(holes)]))


def merge_gaps(parts: Sequence[pl.DataFrame], min_ns: int) -> pl.DataFrame:
    """Merge partials given in time order (each from later windows than the one before):
    one partial with the same layout (module docstring)."""
    acc = _typed(parts[0])
    for nxt in parts[1:]:
        acc = _merge_two(acc, _typed(nxt), min_ns)
    return acc


def _merge_two(a: pl.DataFrame, b: pl.DataFrame, min_ns: int) -> pl.DataFrame:
    ab, bb = a.filter(pl.col("_bound")), b.filter(pl.col("_bound"))
    carried = ab.select(*GROUP, pl.col("end_ns").alias("_last"))
    # b's holes cut by a's latest end of their group; a hole it passes is covered
    holes = (b.filter(~pl.col("_bound")).join(carried, on=GROUP, how="left", nulls_equal=True)
             .with_columns(pl.max_horizontal("start_ns", pl.col("_last").fill_null(
                 np.iinfo(np.int64).min)).alias("start_ns"))
             .filter(pl.col("end_ns") - pl.col("start_ns") >= min_ns).drop("_last"))
    # the stretch between a's latest end and b's first start
    joint = (bb.join(carried, on=GROUP, how="inner", nulls_equal=True)
             .filter(pl.col("start_ns") - pl.col("_last") >= min_ns)
             .select(*GROUP, pl.lit(False).alias("_bound"), pl.col("_last").alias("start_ns"),
                     pl.col("start_ns").alias("end_ns")))
    bounds = (pl.concat([ab, bb]).group_by(GROUP, maintain_order=True)
              .agg(pl.lit(True).alias("_bound"), pl.col("start_ns").min(),
                   pl.col("end_ns").max()))
    return _typed(pl.concat([_typed(bounds), a.filter(~pl.col("_bound")), _typed(joint),
                             _typed(holes)]))


def gap_list(part: pl.DataFrame) -> pl.DataFrame:
    """The gaps of a merged partial: group, ``start_ns``, ``end_ns``, by group and start."""
    return (part.filter(~pl.col("_bound")).select(*GROUP, "start_ns", "end_ns")
            .sort([*GROUP, "start_ns"], nulls_last=True))
