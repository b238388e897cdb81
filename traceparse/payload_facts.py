"""Whole-file facts of the chunked report payload (:mod:`traceparse.payload_chunks`): the
reader's accounting (``provenance``, ``unread_tables``), the ``sources`` and ``devices``
rows, the HIP flag and the underfilled-launch evidence (from pass 1's partial:
:mod:`traceparse.underfilled_chunks`), without reading any time-stamped
table whole.

**Accounting.** The reader itself (:func:`traceparse.nsys.reader.read_db`) reads the export
through a view whose time-stamped tables are empty, so every ingest row it writes is the
memory path's (the tables it does not read, lookups, devices, CPU samples), except the
``parsed`` counts of the time-stamped tables, which are then filled in: a GPU table's from
pass 1 (its rows that start in each window, counted once), any other's from SQL when every
row has a start, an end at or after it and no negative time (the reader parses such a row;
otherwise the section is refused: the reasons of skipped rows are not counted in pieces),
and the stream and event id tables' by the reader's own join
(:func:`traceparse.nsys.syncids.join_ids`) on the calls of their correlation ids only.

**Sources and devices** come from the reader's own :func:`~traceparse.nsys.procs.split_ranks`
on a timeline of one row per GPU process and device (its first start and last end, from
pass 1) and the devices the view gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import polars as pl

from traceparse.nsys import chunks
from traceparse.summary_chunks import SectionNotInPieces as NotInPieces

if TYPE_CHECKING:
    from traceparse.underfilled_chunks import UnderPart

_GOOD = 'start IS NOT NULL AND "end" IS NOT NULL AND "end" >= start AND start >= 0'


class Facts(NamedTuple):
    """The payload's whole-file facts (module docstring)."""

    devices: pl.DataFrame
    sources: pl.DataFrame
    ingest: pl.DataFrame
    hip: bool
    underfilled: list[dict[str, Any]]


def file_facts(plan: chunks.Plan, kinds: pl.DataFrame, procs: pl.DataFrame,
               under: UnderPart) -> Facts:
    """The facts of ``plan``'s export given pass 1's report partial
    (:class:`traceparse.payload_chunks.PayloadPart`: its GPU rows per ``kinds``, per
    process and device span ``procs``, and the under-filled launches' partial ``under``);
    the ``sources`` of an export of one GPU process still without its span
    (:func:`with_span`).

    Raises:
        NotInPieces: ``provenance`` (rows the reader skips).
    """
    from traceparse import schema
    from traceparse.nsys.db import NsysDB
    from traceparse.nsys.procs import recorded_ranks, split_ranks
    from traceparse.nsys.reader import read_db, read_thread_names
    from traceparse.nsys.spans import timed_tables
    from traceparse.reports.options import rows
    from traceparse.timeline import Timeline
    from traceparse.underfilled_chunks import underfilled_rows

    with NsysDB(plan.path) as db:
        timed = timed_tables(db)
    none: tuple[int, ...] = ()
    with chunks.RangeDB(plan.path, {t: ("0", none) for t in timed}) as view:
        bare = read_db(view, 0, frozenset())
        recorded = recorded_ranks(read_thread_names(view, chunks.read_strings(view)))
    ingest = _ingest(plan, bare.ingest, set(timed), kinds)
    procs = procs.sort("process_id", "device_id")
    gpu = schema.conform("gpu", procs.with_columns(pl.lit(0, pl.Int32).alias("rank")))
    # one process: start and end are the trace's span (``with_span``); several: split_ranks
    # sets each rank's from its GPU rows
    # (the bare read's own span counts the tables it reads whole, e.g. CPU samples: not
    # the trace's, sglang's first event is a profiler-overhead range before them)
    sources = bare.sources.with_columns(pl.lit(None, pl.Int64).alias("start_ns"),
                                        pl.lit(None, pl.Int64).alias("end_ns"))
    tl = Timeline(gpu=gpu, devices=bare.devices, sources=sources)
    _add_used(tl, procs)
    split_ranks(tl, 0, recorded)
    hip = _hip(plan.path)
    tl.devices = tl.devices.sort("rank", "device_id")
    return Facts(tl.devices, tl.sources, ingest, hip,
                 rows(underfilled_rows(tl.devices, under)))


def with_span(sources: pl.DataFrame, span: tuple[int, int]) -> pl.DataFrame:
    """``sources`` with the trace's first event and last end where the reader sets them
    from the whole timeline (an export of one GPU process: no rank split, ``rank_source``
    ``default``). The bare read may have set them from a table it reads whole (the CPU
    samples of ``pipit saxpy``, with NVTX ranges): its rows are part of the trace, so the
    span holds them."""
    one = pl.col("rank_source").cast(pl.String) == "default"
    return sources.with_columns(
        pl.when(one).then(pl.min_horizontal("start_ns", pl.lit(span[0], pl.Int64)))
        .otherwise(pl.col("start_ns")).alias("start_ns"),
        pl.when(one).then(pl.max_horizontal("end_ns", pl.lit(span[1], pl.Int64)))
        .otherwise(pl.col("end_ns")).alias("end_ns"))


def _add_used(tl: Any, procs: pl.DataFrame) -> None:
    """Add the devices the GPU rows use that the export does not describe (as the
    reader's ``read_devices`` does)."""
    from traceparse import schema

    used = sorted(set(procs["device_id"].drop_nulls().to_list()))
    missing = sorted(set(used) - set(tl.devices["device_id"].to_list()))
    if missing:
        extra = schema.conform("devices", pl.DataFrame({
            "rank": [0] * len(missing), "device_id": missing,
            "vendor": ["nvidia"] * len(missing)}))
        tl.devices = pl.concat([tl.devices, extra], how="vertical").sort("device_id")


def _ingest(plan: chunks.Plan, bare: pl.DataFrame, timed: set[str], kinds: pl.DataFrame
            ) -> pl.DataFrame:
    """The memory path's ``ingest`` frame: ``bare`` (the reader's, its time-stamped
    tables read as empty) with their parsed counts filled in (module docstring).

    Raises:
        NotInPieces: ``provenance``, a time-stamped table with rows the reader skips.
    """
    from traceparse.nsys.db import NsysDB, q
    from traceparse.nsys.ranges import NVTX
    from traceparse.nsys.syncids import CUDA_EVENT, SYNC

    by_kind = dict(kinds.iter_rows())
    counts: dict[str, int] = {}
    api_ids: pl.DataFrame | None = None
    nvtx: pl.DataFrame | None = None
    with NsysDB(plan.path) as db:
        for source in bare.filter(pl.col("outcome") == "parsed")["source"].to_list():
            if source not in timed:
                continue
            if source == NVTX:  # read whole, as the summary's ranged sections read it
                nvtx = _nvtx_rows(db)
                continue
            total = db.count(source)
            if source in (SYNC, CUDA_EVENT):
                if api_ids is None:
                    api_ids = _api_ids(plan.path)
                continue
            if source in chunks.GPU_TABLES:
                n = sum(v for k, v in by_kind.items() if chunks_table(k) == source)
            else:
                n = int(db.fetchall(f"SELECT COUNT(*) FROM {q(source)} WHERE {_GOOD}", ())[0][0])
            if n != total:
                raise NotInPieces("provenance", f"{total - n:,} rows of {source} are "
                                                "skipped by the reader (their reasons are "
                                                "not counted in pieces)")
            counts[source] = n
    src, out = pl.col("source"), pl.col("outcome")
    frame = bare
    if api_ids is not None:
        frame = pl.concat([frame.filter(~src.is_in(api_ids["source"].implode())),
                           api_ids.cast(frame.schema)], how="vertical")
    if nvtx is not None:  # the reader's rows in the place of the bare parsed row
        at = frame.with_row_index("_i").filter(src == NVTX)["_i"].to_list()
        frame = pl.concat([frame.head(at[0]), nvtx.cast(frame.schema),
                           frame.slice(at[-1] + 1)], how="vertical")
    if counts:
        new = src.replace_strict(list(counts), list(counts.values()), default=None,
                                 return_dtype=pl.Int64)
        frame = frame.with_columns(pl.when((out == "parsed") & src.is_in(list(counts)))
                                   .then(new).otherwise(pl.col("count")).alias("count"))
    return frame


def _nvtx_rows(db: Any) -> pl.DataFrame:
    """The reader's ``ingest`` rows of ``NVTX_EVENTS`` (parsed, and skipped per reason:
    :func:`traceparse.nsys.ranges.read_ranges` on the whole table, which the chunked
    summary reads whole too, docs/performance.md "Ranged sections in pieces")."""
    from traceparse.nsys.ranges import NVTX, read_ranges
    from traceparse.timeline import ingest_frame, ingest_rows

    acct = read_ranges(db, chunks.read_strings(db), 0)[1]
    parsed, skipped = acct if acct is not None else (0, {})
    return ingest_frame(ingest_rows(0, "ranges", NVTX, parsed, skipped))


def chunks_table(kind: str) -> str | None:
    """The GPU table a row of ``kind`` comes from."""
    return {"kernel": chunks.KERNEL, "memcpy": chunks.MEMCPY, "memset": chunks.MEMSET,
            "graph": chunks.GRAPH_TRACE}.get(kind)


def _api_ids(path: str) -> pl.DataFrame:
    """The ingest rows of the stream and event id tables: the reader's own join
    (:func:`traceparse.nsys.syncids.join_ids`) on the runtime calls of their correlation
    ids (the calls it matches; the others cannot match)."""
    from traceparse import schema
    from traceparse.nsys.db import NsysDB, q
    from traceparse.nsys.reader import RUNTIME, read_api
    from traceparse.nsys.syncids import CUDA_EVENT, SYNC, join_ids
    from traceparse.timeline import ingest_frame, ingest_rows

    with NsysDB(path) as db:
        have = [t for t in (SYNC, CUDA_EVENT)
                if db.has(t) and "correlationId" in db.columns(t)]
        runtime = db.has(RUNTIME) and "correlationId" in db.columns(RUNTIME)
    union = " UNION ".join(f"SELECT correlationId FROM {q(t)}" for t in have) or "SELECT NULL"
    none: tuple[int, ...] = ()
    where = {RUNTIME: (f"correlationId IN ({union})", none)} if runtime else {}
    with chunks.RangeDB(path, where) as db:
        api = read_api(db, chunks.read_strings(db), 0)[0] if runtime else None
        _, acct = join_ids(db, api if api is not None else schema.empty("api"))
    rows = []
    for table, parsed, skipped in acct:
        rows += ingest_rows(0, "api_ids", table, parsed, skipped)
    return ingest_frame(rows)


def _hip(path: str) -> bool:
    """Whether a runtime call is named ``hip*`` (the report's HIP-graphs wording)."""
    from traceparse.nsys.db import NsysDB, q
    from traceparse.nsys.reader import RUNTIME

    with NsysDB(path) as db:
        if not (db.has(RUNTIME) and db.has("StringIds")
                and "nameId" in db.columns(RUNTIME)):
            return False
        return bool(db.fetchall(
            f"SELECT 1 FROM {q(RUNTIME)} WHERE nameId IN (SELECT id FROM StringIds "
            "WHERE value GLOB 'hip*') LIMIT 1", ()))
