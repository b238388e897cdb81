"""Benchmark nsys SQLite ingest: ADBC vs sqlite3 bulk reads, and end-to-end ``nsys.read``.

Measures (medians of ``--repeat`` runs, default 3):

1. the raw reader choice the issue asked about: all columns of the kernel table read with
   ``sqlite3`` ``fetchall`` -> polars vs ``adbc-driver-sqlite`` -> Arrow -> polars;
2. a *bare Arrow read*: the same SELECTs :func:`traceparse.nsys.reader.read` issues (kernel,
   memcpy, memset, runtime, NVTX, StringIds columns), through ADBC, with no processing;
3. end to end: ``traceparse.nsys.reader.read(path)`` with ADBC (default) and with ``sqlite3``.

Usage::

    python3 benchmarks/gen_nsys.py /tmp/nsys_1m.sqlite --kernels 1000000
    python3 benchmarks/bench_nsys_ingest.py /tmp/nsys_1m.sqlite \
        ../shared/traces/nsys/instant-ngp__report13.sqlite
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from traceparse.nsys import reader as nsys
from traceparse.nsys.db import NsysDB


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _sqlite3_kernels(path: Path) -> pl.DataFrame:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    cur = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    con.close()
    return pl.DataFrame(rows, schema=names, orient="row", infer_schema_length=None)


def _adbc_kernels(path: Path) -> pl.DataFrame:
    db = NsysDB(path)
    try:
        return db.frame("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    finally:
        db.close()


def _bare(path: Path) -> int:
    """ADBC-read the raw columns ``nsys.read`` reads, no processing; return rows read."""
    queries = {
        "CUPTI_ACTIVITY_KIND_KERNEL": "start, \"end\", deviceId, contextId, streamId, "
        "correlationId, globalPid, demangledName, shortName, mangledName, gridX, gridY, "
        "gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory, "
        "dynamicSharedMemory, graphNodeId",
        "CUPTI_ACTIVITY_KIND_MEMCPY": "start, \"end\", deviceId, contextId, streamId, "
        "correlationId, globalPid, bytes, copyKind, srcKind, dstKind",
        "CUPTI_ACTIVITY_KIND_MEMSET": "start, \"end\", deviceId, contextId, streamId, "
        "correlationId, globalPid, bytes, memKind",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "start, \"end\", eventClass, globalTid, correlationId, "
        "nameId, returnValue",
        "NVTX_EVENTS": "start, \"end\", eventType, text, globalTid, textId, domainId",
        "StringIds": "id, value",
    }
    n = 0
    db = NsysDB(path)
    try:
        for table, cols in queries.items():
            if db.has(table):
                have = set(db.columns(table))
                sel = ", ".join(c for c in cols.split(", ") if c.strip('"') in have)
                n += db.frame(f"SELECT {sel} FROM {table}").height
    finally:
        db.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    nsys.read(a.files[0])  # warm up imports and the ADBC driver
    for path in a.files:
        tl = nsys.read(path)
        k, rows = tl.kernels.height, tl.gpu.height + tl.api.height + tl.ranges.height
        t_sql = _median(lambda p=path: _sqlite3_kernels(p), a.repeat)
        t_adbc = _median(lambda p=path: _adbc_kernels(p), a.repeat)
        t_bare = _median(lambda p=path: _bare(p), a.repeat)
        t_e2e = _median(lambda p=path: nsys.read(p), a.repeat)
        t_e2e_sql = _median(lambda p=path: nsys.read(p, use_adbc=False), a.repeat)
        print(f"## {path.name}: {k:,} kernels, {rows:,} timeline rows "
              f"(gpu {tl.gpu.height:,}, api {tl.api.height:,}, ranges {tl.ranges.height:,})")
        print(f"kernel table SELECT *: sqlite3 fetchall->polars {t_sql:.3f} s, "
              f"ADBC->Arrow->polars {t_adbc:.3f} s ({t_sql / t_adbc:.2f}x)")
        print(f"bare ADBC read of the same columns: {t_bare:.3f} s")
        print(f"nsys.read (ADBC): {t_e2e:.3f} s = {rows / t_e2e:,.0f} rows/s, "
              f"{k / t_e2e:,.0f} kernels/s, {t_e2e / t_bare:.2f}x the bare read")
        print(f"nsys.read (sqlite3 only): {t_e2e_sql:.3f} s = {rows / t_e2e_sql:,.0f} rows/s")
        print()


if __name__ == "__main__":
    main()
