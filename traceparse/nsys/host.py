"""What the host threads were doing, from an nsys export: OS-runtime calls, CPU samples and
the profiler's own overhead.

Both become rows of the ``ranges`` table (see ``schema.RANGES``) so the gap analysis
(:mod:`traceparse.analyses.gaps`) can name what a launching thread did while the GPU idled:

``osrt`` (table ``OSRT_API``, present when the capture traced OS runtime libraries)
    One range per call: ``name`` = the function (``poll``, ``read``, ``futex``,
    ``pthread_cond_wait``, ``sem_wait``, ``sleep`` ...), process and thread from
    ``globalTid``. Rows with ``end < start`` are skipped and counted.
``cpu_sample`` (tables ``COMPOSITE_EVENTS`` + ``SAMPLING_CALLCHAINS``, present with CPU
sampling)
    Each sample names its **top frame** (``stackDepth = 0``): ``symbol (module file
    name)``. A sample stands for the time until the thread's next sample, at most
    :data:`MAX_SAMPLE_SPAN` sampling intervals (the thread's median interval), so a thread
    that stopped being sampled (blocked, not running) is not covered. Consecutive samples of
    a thread with the same top frame are merged into one range (counted as skipped rows
    "merged into the previous sample's range"); samples without a callchain are skipped.

Example:
    samples of thread 7 at 0, 1, 2, 10 ms with top frames A, A, B, B (median interval
    1 ms, cap 2 ms): ranges A [0, 2), B [2, 3), B [10, 12) -> [2, 3) and [10, 12) are not
    merged (not contiguous).

``profiler_overhead`` (table ``PROFILER_OVERHEAD``)
    One range per row: ``name`` = its text (``CUPTI Buffer flush`` ...), process and thread
    from ``globalTid`` (the profiler's thread inside the application's process). While
    CUPTI flushes its buffers the process's CUDA calls can stall (on
    ``nsys-ai__mfu_2gpu_after`` a ``cudaMemsetAsync`` that usually takes 8 us lasts
    5.7 ms, begun during a 6.0 ms flush and returning just after it). Rows with
    ``end < start`` are skipped and counted.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import polars as pl

from traceparse import schema
from traceparse.nsys.db import NsysDB

OSRT = "OSRT_API"
OVERHEAD = "PROFILER_OVERHEAD"
SAMPLES = "COMPOSITE_EVENTS"
CALLCHAINS = "SAMPLING_CALLCHAINS"
#: A sample covers at most this many of its thread's median sampling intervals.
MAX_SAMPLE_SPAN = 2
_NO_INTERVAL_NS = 1_000_000  # a thread sampled once: assume 1 ms (nsys' default is ~1 kHz)

Accounting = tuple[str, int, dict[str, int]]


def _strings(db: NsysDB, strings: pl.DataFrame, col: str) -> pl.DataFrame:
    return strings.select(pl.col("id").alias(col), pl.col("value").alias(f"{col}_s"))


def _read_calls(db: NsysDB, strings: pl.DataFrame, rank: int, table: str, kind: str
                ) -> tuple[pl.DataFrame, Accounting | None]:
    """Ranges of ``kind`` from an nsys table of named thread intervals (start, end, nameId,
    globalTid) and their accounting; None without the table."""
    if not db.has(table):
        return schema.empty("ranges"), None
    db.require(table, ("start", "end", "nameId", "globalTid"))
    raw = db.table_frame(table, 'start AS start_ns, "end" AS end_ns, nameId AS _nid, '
                                "(globalTid >> 24) & 16777215 AS process_id, "
                                "globalTid & 16777215 AS thread_id")
    total = raw.height
    bad = raw.filter(pl.col("end_ns") < pl.col("start_ns")).height
    ev = (raw.filter(pl.col("end_ns") >= pl.col("start_ns"))
          .join(_strings(db, strings, "_nid"), on="_nid", how="left")
          .with_columns(name=pl.col("_nid_s").fill_null(""), kind=pl.lit(kind),
                        rank=pl.lit(rank, pl.Int32),
                        dur_ns=pl.col("end_ns") - pl.col("start_ns")))
    skipped = {"end before start": bad} if bad else {}
    out = schema.conform("ranges", ev.select(
        [c.name for c in schema.RANGES if c.name in ev.columns]).sort("start_ns"))
    assert out.height + bad == total
    return out, (table, out.height, skipped)


def read_osrt(db: NsysDB, strings: pl.DataFrame, rank: int
              ) -> tuple[pl.DataFrame, Accounting | None]:
    """``osrt`` ranges from ``OSRT_API`` and their accounting (None without the table)."""
    return _read_calls(db, strings, rank, OSRT, "osrt")


def read_profiler_overhead(db: NsysDB, strings: pl.DataFrame, rank: int
                           ) -> tuple[pl.DataFrame, Accounting | None]:
    """``profiler_overhead`` ranges from ``PROFILER_OVERHEAD`` and their accounting (None
    without the table)."""
    return _read_calls(db, strings, rank, OVERHEAD, "profiler_overhead")


def read_samples(db: NsysDB, strings: pl.DataFrame, rank: int
                 ) -> tuple[pl.DataFrame, Accounting | None]:
    """``cpu_sample`` ranges (see the module docstring) and their accounting (None without
    the sampling tables)."""
    if not (db.has(SAMPLES) and db.has(CALLCHAINS)):
        return schema.empty("ranges"), None
    db.require(SAMPLES, ("id", "start", "globalTid"))
    db.require(CALLCHAINS, ("id", "symbol", "module", "stackDepth"))
    raw = db.frame(f"SELECT c.start AS start_ns, (c.globalTid >> 24) & 16777215 AS process_id, "
                   f"c.globalTid & 16777215 AS thread_id, k.symbol AS _sym, k.module AS _mod "
                   f"FROM {SAMPLES} c LEFT JOIN {CALLCHAINS} k "
                   f"ON k.id = c.id AND k.stackDepth = 0")
    total = raw.height
    named = (raw.join(_strings(db, strings, "_sym"), on="_sym", how="left")
             .join(_strings(db, strings, "_mod"), on="_mod", how="left"))
    no_chain = named.filter(pl.col("_sym_s").is_null()).height
    ev = named.filter(pl.col("_sym_s").is_not_null())
    module = pl.col("_mod_s").fill_null("").map_elements(
        lambda m: PurePosixPath(m).name if m else "", return_dtype=pl.String)
    ev = ev.with_columns(name=pl.col("_sym_s") + pl.lit(" (") + module + pl.lit(")"))
    thread = ["process_id", "thread_id"]
    ev = ev.sort(*thread, "start_ns").with_columns(
        _next=pl.col("start_ns").shift(-1).over(thread))
    ev = ev.with_columns(_med=(pl.col("_next") - pl.col("start_ns")).median().over(thread))
    cap = pl.col("_med").fill_null(_NO_INTERVAL_NS).cast(pl.Int64) * MAX_SAMPLE_SPAN
    ev = ev.with_columns(end_ns=pl.min_horizontal(
        pl.col("_next").fill_null(pl.col("start_ns") + cap), pl.col("start_ns") + cap))
    # merge contiguous samples of a thread with the same top frame
    new = ((pl.col("name") != pl.col("name").shift(1).over(thread))
           | (pl.col("start_ns") != pl.col("end_ns").shift(1).over(thread))
           | pl.col("name").shift(1).over(thread).is_null())
    runs = (ev.with_columns(_run=new.cum_sum().over(thread))
            .group_by(*thread, "_run", "name")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
            .with_columns(kind=pl.lit("cpu_sample"), rank=pl.lit(rank, pl.Int32),
                          dur_ns=pl.col("end_ns") - pl.col("start_ns")))
    out = schema.conform("ranges", runs.select(
        [c.name for c in schema.RANGES if c.name in runs.columns]).sort("start_ns"))
    skipped = {}
    if no_chain:
        skipped["no callchain"] = no_chain
    merged = ev.height - out.height
    if merged:
        skipped["merged into the previous sample's range (same top frame)"] = merged
    assert out.height + no_chain + merged == total
    return out, (SAMPLES, out.height, skipped)
