"""An nsys SQLite export read in pieces: rowid blocks and time windows, never whole.

The chunked executors (:mod:`traceparse.executor`) work through an export without building
its timeline. :func:`plan` scans the GPU activity tables once with SQL aggregates (no row
reaches Python): per rowid block of about ``block_rows`` rows, the earliest start, the
latest end and the row count of the rows the reader keeps (times present and ordered),
plus what makes a row's values depend on the rest of the file:

* the **ranks**: one per GPU process (:mod:`traceparse.nsys.procs`), from the distinct
  process ids of the activity tables and the NVTX thread names;
* the kernels launched inside **communication NVTX ranges** (category ``communication``,
  :func:`traceparse.categorize.by_nvtx`): only when the export has such ranges, the
  runtime-API table is streamed block by block and the ``(process_id, correlation_id)`` of
  the calls inside them kept (one row per such launch).

:func:`read_rows` then reads the GPU rows of some rowid ranges, optionally only those that
overlap a time window ``[t0, t1)`` or start in it, through the reader's own functions
(:func:`traceparse.nsys.gpu.read_gpu`, :func:`traceparse.nsys.graphs.read_graph_trace`),
so names, categories, skipped rows and sentinel handling are exactly the reader's. Each
call opens the file read-only itself: a Dask worker needs only the path and the plan.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import polars as pl

from traceparse.categorize import nvtx_comm_launches, nvtx_comm_spans, relabel_comm
from traceparse.errors import TraceError
from traceparse.nsys.db import NsysDB, q
from traceparse.nsys.gpu import KERNEL, MEMCPY, MEMSET, _columns_sql, _kernel_rows, read_gpu
from traceparse.nsys.graphs import GRAPH_TRACE, read_graph_trace
from traceparse.nsys.procs import process_ranks, recorded_ranks
from traceparse.nsys.ranges import read_ranges

R = TypeVar("R")

#: The tables whose rows become ``gpu`` rows.
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE)
#: Rows per rowid block of :func:`plan` (the unit a worker reads).
BLOCK_ROWS = 1 << 18
#: The end of the last time window (every start is below it).
END = 2 ** 63 - 1
_VALID = 'start IS NOT NULL AND "end" IS NOT NULL AND "end" >= start'


@dataclass(frozen=True)
class Block:
    """Rows ``lo..hi`` (rowids, inclusive) of ``table``: ``rows`` rows with ordered times,
    the earliest start ``tmin`` and the latest end ``tmax`` among them."""

    table: str
    lo: int
    hi: int
    rows: int
    tmin: int
    tmax: int
    #: the smallest and largest ``correlationId`` (None: no such column, or none set)
    cmin: int | None = None
    cmax: int | None = None


@dataclass(frozen=True)
class Plan:
    """What a worker needs to read its part of ``path`` (picklable, small)."""

    path: str
    blocks: tuple[Block, ...]
    #: process id -> rank, for the GPU processes (empty: every row keeps rank 0)
    ranks: dict[int, int] = field(default_factory=dict)
    #: ``process_id, correlation_id`` of the launches inside communication NVTX ranges
    comm: pl.DataFrame | None = None
    #: rowid blocks of the other time-stamped tables (host calls and ranges), when the
    #: reader of time spans needs them (:func:`traceparse.nsys.spans.span_plan`)
    host: tuple[Block, ...] = ()
    #: ``(process_id, device_id)`` of every GPU row, and ``(process_id, thread_id)`` of
    #: every runtime call (the whole-file facts :mod:`traceparse.nsys.spancheck` reads)
    pairs: frozenset[tuple[int, int]] = frozenset()
    threads: frozenset[tuple[int, int]] = frozenset()
    #: ``(process_id, thread_id)`` of the threads that call a stream wait, and
    #: ``(device_id, stream_id)`` of the streams in the synchronization records
    waiters: frozenset[tuple[int, int]] = frozenset()
    waited: frozenset[tuple[int, int]] = frozenset()
    #: the file has stream-capture calls (their windows are warm-up and may cross a span)
    captures: bool = False

    def windows(self, rows: int) -> list[tuple[int, int]]:
        """Time windows ``[t0, t1)`` that together cover every start, each starting at a
        block's earliest start and holding about ``rows`` rows (whole blocks, in order of
        their earliest start); the last ends at :data:`END`."""
        blocks = sorted((b for b in self.blocks if b.rows), key=lambda b: b.tmin)
        edges: list[int] = []
        held = rows
        for b in blocks:
            if held >= rows and (not edges or b.tmin > edges[-1]):
                edges.append(b.tmin)
                held = 0
            held += b.rows
        return [(t0, edges[i + 1] if i + 1 < len(edges) else END)
                for i, t0 in enumerate(edges)]

    def blocks_for(self, t0: int, t1: int) -> list[Block]:
        """The blocks that may hold a row overlapping ``[t0, t1)`` or starting in it."""
        return [b for b in self.blocks if b.rows and b.tmin < t1 and b.tmax >= t0]


class RangeDB(NsysDB):
    """An :class:`NsysDB` whose bulk reads of the tables in ``where`` see only the rows
    that pass the SQL condition given for the table (``(condition, params)``)."""

    def __init__(self, path: str | os.PathLike[str],
                 where: dict[str, tuple[str, tuple[int, ...]]]) -> None:
        super().__init__(path)
        self.where = where

    def table_chunks(self, table: str, select: str, transform: Callable[[pl.DataFrame], R],
                     *, workers: int | None = None) -> list[R]:
        if table not in self.where:
            return super().table_chunks(table, select, transform, workers=workers)
        cond, params = self.where[table]
        frame = self.frame(f"SELECT {select} FROM {q(table)} WHERE {cond}", params)
        if frame.height == 0:  # typed as the sqlite3 reader types an empty result
            frame = frame.with_columns(pl.col(c).cast(pl.Int64) for c, t in
                                       frame.schema.items() if t == pl.Null)
        return [transform(frame)]


def read_strings(db: NsysDB) -> pl.DataFrame:
    """``id, value`` (Int64, String) of the export's StringIds; empty when it has none."""
    if not db.has("StringIds"):
        return pl.DataFrame(schema={"id": pl.Int64, "value": pl.String})
    s = db.frame("SELECT id, value FROM StringIds")
    return s.with_columns(pl.col("id").cast(pl.Int64), pl.col("value").cast(pl.String))


def _blocks(db: NsysDB, table: str, block_rows: int, scan: bool
            ) -> tuple[list[Block], set[int]]:
    """The rowid blocks of ``table`` and the process ids of its kept rows. Without
    ``scan`` only the rowid ranges (``rows`` an upper bound, no times, no process ids)."""
    lo, hi = db.fetchall(f"SELECT MIN(rowid), MAX(rowid) FROM {q(table)}", ())[0]
    if lo is None:
        return [], set()
    spans = [(a, min(a + block_rows - 1, int(hi)))
             for a in range(int(lo), int(hi) + 1, block_rows)]
    if not scan:
        return [Block(table, a, b, b - a + 1, 0, 0) for a, b in spans], set()
    has_pid = "globalPid" in db.columns(table)
    pid = "globalPid" if has_pid else "NULL"
    # one aggregate per block (~4x cheaper than grouping by process); a block whose
    # globalPid varies is grouped by process to list them
    corr = "correlationId" if "correlationId" in db.columns(table) else "NULL"
    sql = (f'SELECT MIN(start), MAX("end"), COUNT(*), MIN({pid}), MAX({pid}), '
           f"MIN({corr}), MAX({corr}) "
           f"FROM {q(table)} WHERE rowid BETWEEN ? AND ? AND {_VALID}")
    by_pid = (f"SELECT DISTINCT (globalPid >> 24) & 16777215 FROM {q(table)} "
              f"WHERE rowid BETWEEN ? AND ? AND {_VALID}")

    def one(span: tuple[int, int]) -> tuple[Block | None, set[int]]:
        con = sqlite3.connect(db.uri, uri=True)  # one per thread: reads run in parallel
        try:
            tmin, tmax, n, p0, p1, c0, c1 = con.execute(sql, span).fetchone()
            if not n:
                return None, set()
            if not (isinstance(tmin, int) and isinstance(tmax, int)):
                raise TraceError(db.path, f"{table}: start or end is not an integer in "
                                          f"some rows (rowids {span[0]}-{span[1]})")
            pids: set[int] = set()
            if isinstance(p0, int) and p0 == p1:
                pids = {(p0 >> 24) & 0xFFFFFF}
            elif has_pid:
                pids = {int(r[0]) for r in con.execute(by_pid, span) if isinstance(r[0], int)}
            cb = (c0, c1) if isinstance(c0, int) and isinstance(c1, int) else (None, None)
            return Block(table, span[0], span[1], int(n), tmin, tmax, *cb), pids
        except sqlite3.DatabaseError as exc:
            raise TraceError(db.path, f"corrupt or truncated SQLite file ({exc})") from None
        finally:
            con.close()

    out: list[Block] = []
    pids: set[int] = set()
    with ThreadPoolExecutor(min(os.cpu_count() or 1, 4)) as ex:
        for block, p in ex.map(one, spans):
            if block is not None:
                out.append(block)
                pids |= p
    return out, pids


def plan(path: str | os.PathLike[str], *, block_rows: int = BLOCK_ROWS,
         tables: Sequence[str] = GPU_TABLES, categories: bool = True) -> Plan:
    """Scan ``path``'s GPU activity ``tables`` into rowid blocks (see the module docstring).

    ``categories``: also find the blocks' times, the ranks and the launches inside
    communication NVTX ranges (what time windows and the ``category`` and ``rank`` of a
    row depend on); a kernel summary needs none of them (its blocks are rowid ranges
    only, nothing is scanned).

    Raises:
        TraceError: not a readable nsys export, or a GPU table without its columns.
    """
    from traceparse.nsys.reader import read_thread_names, require_strings

    with NsysDB(path) as db:
        require_strings(db)
        blocks: list[Block] = []
        pids: set[int] = set()
        for table in tables:
            if not db.has(table):
                continue
            if table == GRAPH_TRACE:
                db.require(table, ("start", "end"))
            else:
                db.require_activity(table)
            b, p = _blocks(db, table, block_rows, categories)
            blocks += b
            pids |= p
        if not categories:
            return Plan(str(path), tuple(blocks))
        strings = read_strings(db)
        ranks, _ = process_ranks(pl.DataFrame({"process_id": sorted(pids)},
                                              schema={"process_id": pl.Int64}), 0,
                                 recorded_ranks(read_thread_names(db, strings)))
        comm = _comm_launches(db, strings, block_rows)
    return Plan(str(path), tuple(blocks), ranks, comm)


def _comm_launches(db: NsysDB, strings: pl.DataFrame, block_rows: int) -> pl.DataFrame | None:
    """The launches inside communication NVTX ranges, the runtime table read block by
    block (None when the export has no such range or no runtime table)."""
    from traceparse.nsys.reader import RUNTIME, read_api

    if not db.has(RUNTIME):
        return None
    spans = nvtx_comm_spans(read_ranges(db, strings, 0)[0])
    if not spans:
        return None
    lo, hi = db.fetchall(f"SELECT MIN(rowid), MAX(rowid) FROM {q(RUNTIME)}", ())[0]
    found = []
    for a in range(int(lo), int(hi) + 1, block_rows):
        part = RangeDB(db.path, {RUNTIME: ("rowid BETWEEN ? AND ?",
                                           (a, min(a + block_rows - 1, int(hi))))})
        with part:
            api = read_api(part, strings, 0)[0]
        found.append(nvtx_comm_launches(api, spans))
    return pl.concat(found).unique()


def read_rows(p: Plan, blocks: Sequence[Block], window: tuple[int, int] | None = None,
              *, grid: bool = False) -> pl.DataFrame:
    """The ``gpu`` rows (the reader's columns and values, rank included) of ``blocks``;
    with ``window = (t0, t1)`` only those that overlap ``[t0, t1)`` or start in it. Rows
    are in start order per table (as :func:`traceparse.nsys.gpu.read_gpu` sorts them).
    ``grid``: the kernels' grid and block dimensions too (:data:`GRID_COLUMNS`)."""
    where: dict[str, tuple[str, tuple[int, ...]]] = {}
    for table in {b.table for b in blocks}:
        mine = [b for b in blocks if b.table == table]
        cond = "(" + " OR ".join("rowid BETWEEN ? AND ?" for _ in mine) + ")"
        params: tuple[int, ...] = tuple(v for b in mine for v in (b.lo, b.hi))
        if window is not None:
            cond += ' AND start < ? AND ("end" > ? OR start >= ?)'
            params += (window[1], window[0], window[0])
        where[table] = (cond, params)
    with RangeDB(p.path, where) as db:
        strings = read_strings(db)
        parts = []
        if KERNEL in where:
            parts.append(_kernels(db, strings, where[KERNEL], grid))
        if where.keys() & {MEMCPY, MEMSET}:
            gpu, _ = read_gpu(_Only(db, where), strings, 0)  # type: ignore[arg-type]
            parts.append(gpu)
        if GRAPH_TRACE in where:
            parts.append(read_graph_trace(db, 0)[0])
    gpu = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
    if p.comm is not None:
        gpu = relabel_comm(gpu, p.comm)
    if p.ranks and gpu.height:
        mapped = pl.col("process_id").replace_strict(
            list(p.ranks), list(p.ranks.values()), default=None, return_dtype=pl.Int32)
        gpu = gpu.with_columns(pl.coalesce(mapped, pl.col("rank")).cast(pl.Int32)
                               .alias("rank"))
    return gpu


#: The kernel columns a chunked analysis reads (names are added; the others stay null).
KERNEL_COLUMNS = (("start", "start_ns"), ("end", "end_ns"), ("deviceId", "device_id"),
                  ("streamId", "stream_id"), ("correlationId", "correlation_id"))
#: The launch dimensions :func:`read_rows` adds with ``grid=True`` (the under-filled
#: launches of the chunked report, :mod:`traceparse.underfilled_chunks`).
GRID_COLUMNS = (("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"),
                ("blockX", "block_x"), ("blockY", "block_y"), ("blockZ", "block_z"))


def _kernels(db: NsysDB, strings: pl.DataFrame, where: tuple[str, tuple[int, ...]],
             grid: bool = False) -> pl.DataFrame:
    """The kernel rows passing ``where``, through the reader's own row builder
    (:func:`traceparse.nsys.gpu._kernel_rows`) but reading only :data:`KERNEL_COLUMNS`,
    the process and the name ids (a third of the bytes of every column)."""
    db.require_activity(KERNEL)
    cols = set(db.columns(KERNEL))
    names: list[str] = [c for c in ("demangledName", "shortName", "mangledName") if c in cols]
    extra = GRID_COLUMNS if grid else ()
    select = _columns_sql(db, KERNEL, KERNEL_COLUMNS + extra + tuple((c, c) for c in names))
    frame = db.frame(f"SELECT {select} FROM {q(KERNEL)} WHERE {where[0]}", where[1])
    frame = frame.with_columns(pl.col(c).cast(pl.Int64) for c, t in frame.schema.items()
                               if t == pl.Null)
    return _kernel_rows(db, frame, strings, names, 0, {})


class _Only:
    """``db`` seen as having only the GPU tables of ``where`` (the others are not read)."""

    def __init__(self, db: NsysDB, where: dict[str, Any]) -> None:
        self._db, self._where = db, where

    def has(self, table: str) -> bool:  # kernels are read by _kernels
        return table in self._where and table != KERNEL and self._db.has(table)

    def has_rows(self, table: str) -> bool:
        return self.has(table)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)
