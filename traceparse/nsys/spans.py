"""The timeline of one time span of an nsys SQLite export (the rows near some idle gaps).

The second pass of ``gaps`` on a chunked executor (:func:`traceparse.executor.idle_gaps`)
explains the gaps of one time window with the in-memory rules
(:func:`traceparse.analyses.gaps.idle_gaps`) run on the rows of every time-stamped table
(GPU activities, runtime calls, NVTX and OS-runtime ranges, profiler overhead, ...) that
overlap a span ``[t0, t1)`` or start in it, read by the reader itself
(:func:`traceparse.nsys.reader._read` on a :class:`~traceparse.nsys.chunks.RangeDB`), so
names, kinds and skipped rows are the reader's. Ranks come from the whole-file plan
(:attr:`traceparse.nsys.chunks.Plan.ranks`), not from the processes the span happens to
hold.
"""

from __future__ import annotations

import polars as pl

from traceparse.nsys.chunks import Plan, RangeDB
from traceparse.nsys.db import NsysDB
from traceparse.timeline import Timeline

_SPAN = 'start < ? AND ("end" > ? OR start >= ?)'


def read_span(p: Plan, t0: int, t1: int) -> Timeline:
    """The timeline of ``p.path``'s rows that overlap ``[t0, t1)`` or start in it (module
    docstring); metrics and memory tables are not read."""
    from traceparse.nsys.reader import _read

    with NsysDB(p.path) as db:
        timed = [t for t in sorted(db.tables) if {"start", "end"} <= set(db.columns(t))]
    where: dict[str, tuple[str, tuple[int, ...]]] = {t: (_SPAN, (t1, t0, t0)) for t in timed}
    with RangeDB(p.path, where) as db:
        tl = _read(db, 0, frozenset({"metrics", "memory"}))
    if p.ranks:
        pids, values = list(p.ranks), list(p.ranks.values())

        def remap(frame: pl.DataFrame) -> pl.DataFrame:
            if frame.height == 0:
                return frame
            mapped = pl.col("process_id").replace_strict(pids, values, default=None,
                                                        return_dtype=pl.Int32)
            return frame.with_columns(pl.coalesce(mapped, pl.lit(0, pl.Int32)).cast(pl.Int32)
                                      .alias("rank"))
        tl.gpu, tl.api, tl.ranges = remap(tl.gpu), remap(tl.api), remap(tl.ranges)
    return tl
