"""The timeline of one time span of an nsys SQLite export (the rows near some idle gaps).

The second pass of ``gaps`` on a chunked executor (:func:`traceparse.executor.idle_gaps`)
explains the gaps of one time window with the in-memory rules
(:func:`traceparse.analyses.gaps.idle_gaps`) run on the rows of every time-stamped table
(GPU activities, runtime calls, NVTX and OS-runtime ranges, profiler overhead, ...) that
overlap a span ``[t0, t1)`` or start in it, read by the reader itself
(:func:`traceparse.nsys.reader.read_db` on a :class:`~traceparse.nsys.chunks.RangeDB`), so
names, kinds and skipped rows are the reader's. Ranks come from the whole-file plan
(:attr:`traceparse.nsys.chunks.Plan.ranks`), not from the processes the span happens to
hold.

**The queue.** A call's launch window ends at its activity's start, which may lie far
past the span (a deep launch queue): the GPU rows whose ``correlationId`` lies in the
range of the span's runtime calls are read as well, wherever they run (true rows of the
trace; a gap's rules only read the rows near it, so extra rows change nothing else).

**Reading only the span.** :func:`span_plan` adds rowid blocks with their time and
correlation bounds for every time-stamped table (one SQL aggregate per block, as
:func:`traceparse.nsys.chunks.plan` does for the GPU tables), so a span read touches the
blocks that may hold its rows instead of scanning each table whole.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from traceparse.nsys.chunks import END, GPU_TABLES, Block, Plan, RangeDB, plan
from traceparse.nsys.db import NsysDB, q
from traceparse.timeline import Timeline

_SPAN = 'start < ? AND ("end" > ? OR start >= ?)'
#: correlation ids that are not one (the runtime reader nulls this sentinel)
_CORR_OK = "correlationId IS NOT NULL AND correlationId != 4294967295"


def span_plan(path: str | os.PathLike[str], *, block_rows: int) -> Plan:
    """:func:`traceparse.nsys.chunks.plan` of the GPU tables, plus rowid blocks of every
    other time-stamped table (:attr:`Plan.host`)."""
    from traceparse.analyses.graphs import CAPTURE_API_RE
    from traceparse.analyses.streamwait import WAIT_API_RE
    from traceparse.nsys.reader import RUNTIME

    p = plan(path, block_rows=block_rows)
    pairs: set[tuple[int, int]] = set()
    threads: set[tuple[int, int]] = set()
    with NsysDB(path) as db:
        host = [b for t in timed_tables(db) if t not in GPU_TABLES
                for b in _time_blocks(db, t, block_rows)]
        for t in GPU_TABLES:
            if db.has(t) and {"globalPid", "deviceId"} <= set(db.columns(t)):
                pairs |= {(int(a), int(b)) for a, b in db.fetchall(
                    f"SELECT DISTINCT (globalPid >> 24) & 16777215, deviceId FROM {q(t)} "
                    "WHERE globalPid IS NOT NULL AND deviceId IS NOT NULL", ())}
        if db.has(RUNTIME) and "globalTid" in db.columns(RUNTIME):
            threads = {(int(a), int(b)) for a, b in db.fetchall(
                "SELECT DISTINCT (globalTid >> 24) & 16777215, globalTid & 16777215 FROM "
                f"{q(RUNTIME)} WHERE globalTid IS NOT NULL", ())}
        # one pass over the strings for both name sets the checks need
        wait_ids, capture_ids = string_ids(db, WAIT_API_RE, CAPTURE_API_RE)
        waiters, waited = _waits(db, wait_ids)
        captures = calls_named(db, capture_ids)
    return dataclasses.replace(p, host=tuple(host), pairs=frozenset(pairs),
                               threads=frozenset(threads), waiters=waiters, waited=waited,
                               captures=captures)


def string_ids(db: NsysDB, *regexes: str) -> list[list[int]]:
    """Per regex, the ``StringIds`` ids whose string matches it (one pass over the strings
    for all of them)."""
    import re

    found: list[list[int]] = [[] for _ in regexes]
    if not db.has("StringIds"):
        return found
    pats = [re.compile(r) for r in regexes]
    for i, v in db.fetchall("SELECT id, value FROM StringIds", ()):
        if isinstance(v, str):
            for ids, pat in zip(found, pats, strict=True):
                if pat.search(v):
                    ids.append(i)
    return found


def calls_named(db: NsysDB, ids: list[int]) -> bool:
    """Whether the runtime table holds a call whose name id is one of ``ids``."""
    from traceparse.nsys.reader import RUNTIME

    if not ids or not db.has(RUNTIME) or "nameId" not in db.columns(RUNTIME):
        return False
    marks = ",".join("?" * len(ids))
    return bool(db.fetchall(f"SELECT 1 FROM {q(RUNTIME)} WHERE nameId IN ({marks}) LIMIT 1",
                         ids))


def _waits(db: NsysDB, ids: list[int]
           ) -> tuple[frozenset[tuple[int, int]], frozenset[tuple[int, int]]]:
    """The threads that call a stream wait (``ids``: the wait calls' name ids) and the
    streams of the synchronization records (:attr:`Plan.waiters`, :attr:`Plan.waited`)."""
    from traceparse.nsys.reader import RUNTIME
    from traceparse.nsys.syncids import SYNC as SYNC_TABLE

    waiters: set[tuple[int, int]] = set()
    waited: set[tuple[int, int]] = set()
    if ids and db.has(RUNTIME) and {"globalTid", "nameId"} <= set(db.columns(RUNTIME)):
        marks = ",".join("?" * len(ids))
        waiters = {(int(a), int(b)) for a, b in db.fetchall(
            "SELECT DISTINCT (globalTid >> 24) & 16777215, globalTid & 16777215 FROM "
            f"{q(RUNTIME)} WHERE nameId IN ({marks}) AND globalTid IS NOT NULL", ids)}
    if db.has(SYNC_TABLE) and {"deviceId", "streamId"} <= set(db.columns(SYNC_TABLE)):
        waited = {(int(a), int(b)) for a, b in db.fetchall(
            f"SELECT DISTINCT deviceId, streamId FROM {q(SYNC_TABLE)} WHERE deviceId IS NOT "
            "NULL AND streamId IS NOT NULL", ())}
    return frozenset(waiters), frozenset(waited)


def timed_tables(db: NsysDB) -> list[str]:
    """The names of the tables of ``db`` with ``start`` and ``end`` columns, sorted."""
    return [t for t in sorted(db.tables) if {"start", "end"} <= set(db.columns(t))]


def _time_blocks(db: NsysDB, table: str, block_rows: int) -> list[Block]:
    """Rowid blocks of ``table``: the earliest start, the latest start or end, and the
    correlation bounds of their rows; a block whose times are not all integers is read
    for every span (bounds ``-END``, ``END``)."""
    lo, hi = db.fetchall(f"SELECT MIN(rowid), MAX(rowid) FROM {q(table)}", ())[0]
    if lo is None:
        return []
    corr = (f"MIN(CASE WHEN {_CORR_OK} THEN correlationId END), "
            f"MAX(CASE WHEN {_CORR_OK} THEN correlationId END)"
            if "correlationId" in db.columns(table) else "NULL, NULL")
    sql = (f'SELECT MIN(start), MAX(start), MAX("end"), COUNT(*), {corr} '
           f"FROM {q(table)} WHERE rowid BETWEEN ? AND ?")
    spans = [(a, min(a + block_rows - 1, int(hi)))
             for a in range(int(lo), int(hi) + 1, block_rows)]

    def one(span: tuple[int, int]) -> Block | None:
        con = sqlite3.connect(db.uri, uri=True)
        try:
            t0, s1, e1, n, c0, c1 = con.execute(sql, span).fetchone()
        finally:
            con.close()
        if not n:
            return None
        ends = [v for v in (s1, e1) if v is not None]
        if not (isinstance(t0, int) and all(isinstance(v, int) for v in ends) and ends):
            t0, t1 = -END, END
        else:
            t1 = max(ends)
        ok = isinstance(c0, int) and isinstance(c1, int)
        return Block(table, span[0], span[1], int(n), t0, t1, c0 if ok else None,
                     c1 if ok else None)

    with ThreadPoolExecutor(min(os.cpu_count() or 1, 4)) as ex:
        return [b for b in ex.map(one, spans) if b is not None]


def rowids(blocks: Sequence[Block]) -> tuple[str, tuple[int, ...]]:
    """One SQL condition for the rowids of ``blocks`` (adjacent blocks joined)."""
    if not blocks:
        return "0", ()
    runs: list[list[int]] = []
    for b in sorted(blocks, key=lambda b: b.lo):
        if runs and b.lo <= runs[-1][1] + 1:
            runs[-1][1] = max(runs[-1][1], b.hi)
        else:
            runs.append([b.lo, b.hi])
    return ("(" + " OR ".join("rowid BETWEEN ? AND ?" for _ in runs) + ")",
            tuple(v for r in runs for v in r))


def _in_time(b: Block, t0: int, t1: int) -> bool:
    return b.tmin < t1 and b.tmax >= t0


def read_span(p: Plan, t0: int, t1: int) -> tuple[Timeline, int]:
    """The timeline of ``p.path``'s rows that overlap ``[t0, t1)`` or start in it, plus
    the GPU rows launched by the span's calls (module docstring), and the number of
    GPU rows read for the queue alone. Metrics and memory tables are not read."""
    from traceparse.nsys.reader import RUNTIME, read_db

    with NsysDB(p.path) as db:
        timed = timed_tables(db)
        has_corr = {t for t in timed if "correlationId" in db.columns(t)}
    by_table: dict[str, list[Block]] = {}
    for b in (*p.blocks, *p.host):
        by_table.setdefault(b.table, []).append(b)
    span = (t1, t0, t0)
    where: dict[str, tuple[str, tuple[int, ...]]] = {}
    for t in timed:
        if t not in by_table or t in GPU_TABLES:
            where[t] = (_SPAN, span)
            continue
        rid, params = rowids([b for b in by_table[t] if _in_time(b, t0, t1)])
        where[t] = (f"{rid} AND {_SPAN}", params + span)
    corr = _call_corr(p.path, where.get(RUNTIME)) if RUNTIME in where else None
    for t in GPU_TABLES:
        if t not in where or t not in by_table:
            continue
        mine = [b for b in by_table[t] if _in_time(b, t0, t1) or (
            corr is not None and b.cmin is not None and b.cmax is not None
            and b.cmin <= corr[1] and b.cmax >= corr[0])]
        rid, params = rowids(mine)
        if corr is None or t not in has_corr:
            where[t] = (f"{rid} AND {_SPAN}", params + span)
        else:
            where[t] = (f"{rid} AND ({_SPAN} OR correlationId BETWEEN ? AND ?)",
                        params + span + corr)
    with RangeDB(p.path, where) as db:
        tl = read_db(db, 0, frozenset({"metrics", "memory"}))
    tl.gpu, tl.api, tl.ranges = _remap(p, tl.gpu), _remap(p, tl.api), _remap(p, tl.ranges)
    queued = 0
    if corr is not None and tl.gpu.height:
        queued = tl.gpu.filter((pl.col("start_ns") >= t1)
                               | (pl.col("end_ns") <= t0) & (pl.col("start_ns") < t0)).height
    return tl, queued


def _call_corr(path: str, where: tuple[str, tuple[int, ...]] | None
               ) -> tuple[int, int] | None:
    """The smallest and largest correlation id of the runtime calls ``where`` selects."""
    from traceparse.nsys.reader import RUNTIME

    if where is None:
        return None
    with NsysDB(path) as db:
        if "correlationId" not in db.columns(RUNTIME):
            return None
        lo, hi = db.fetchall(f"SELECT MIN(correlationId), MAX(correlationId) FROM "
                          f"{q(RUNTIME)} WHERE ({where[0]}) AND {_CORR_OK}", where[1])[0]
    if not (isinstance(lo, int) and isinstance(hi, int)):
        return None
    return lo, hi


def calls_by_correlation(p: Plan, corr: pl.Series) -> pl.DataFrame:
    """The runtime calls (the reader's ``api`` rows, ranks from the plan) whose
    correlation id lies between the smallest and largest of ``corr``: every call that
    may share a key with those ids, from the runtime blocks whose correlation bounds
    meet that range (all of them when the plan has none)."""
    from traceparse import schema
    from traceparse.nsys.reader import RUNTIME, read_api

    ids = corr.drop_nulls()
    if ids.len() == 0:
        return schema.empty("api")
    lo, hi = int(ids.min()), int(ids.max())  # type: ignore[arg-type]
    blocks = [b for b in p.host if b.table == RUNTIME]
    if blocks:
        rid, params = rowids([b for b in blocks if b.cmin is None or b.cmax is None
                               or (b.cmin <= hi and b.cmax >= lo)])
    else:
        rid, params = "1", ()
    with RangeDB(p.path, {RUNTIME: (f"{rid} AND correlationId BETWEEN ? AND ?",
                                    (*params, lo, hi))}) as db:
        if not db.has(RUNTIME) or "correlationId" not in db.columns(RUNTIME):
            return schema.empty("api")
        strings = db.frame("SELECT id, value FROM StringIds").with_columns(
            pl.col("id").cast(pl.Int64), pl.col("value").cast(pl.String))
        api = read_api(db, strings, 0)[0]
    return _remap(p, api)


def _remap(p: Plan, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``rank`` from the plan's process ranks (0 for other processes)."""
    if not p.ranks or frame.height == 0:
        return frame
    mapped = pl.col("process_id").replace_strict(list(p.ranks), list(p.ranks.values()),
                                                default=None, return_dtype=pl.Int32)
    return frame.with_columns(pl.coalesce(mapped, pl.lit(0, pl.Int32)).cast(pl.Int32)
                              .alias("rank"))
