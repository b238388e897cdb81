"""Nsight Systems SQLite export (``nsys export --type sqlite``) -> :class:`Timeline`.

Use :func:`read`::

    tl = read("report.sqlite")          # validated Timeline
    tl.kernels.group_by("name").agg(pl.col("dur_ns").sum())

Mapping (see FORMATS.md section A and :mod:`traceparse.nsys.gpu`):

* ``gpu`` <- CUPTI KERNEL / MEMCPY / MEMSET tables.
* ``api.stream_id`` / ``api.event_id`` <- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` and
  ``CUPTI_ACTIVITY_KIND_CUDA_EVENT`` rows, joined to their call by correlation id
  (:mod:`traceparse.nsys.syncids`).
* ``api`` <- ``CUPTI_ACTIVITY_KIND_RUNTIME``: runtime **and** driver calls; ``eventClass``
  0 -> ``runtime``, 1 -> ``driver``, others -> ``other``. ``name`` keeps the ``_vNNNN`` suffix.
* ``ranges`` <- ``NVTX_EVENTS``: push/pop (59), start/end (60), marks (34) and the NVTXT
  variants (70 push/pop, 71 start/end). Domain names come from the eventType-75 rows of the
  same process. Other event types (domain/category/thread naming) are counted as skipped.
* CUDA graphs (:mod:`traceparse.nsys.graphs`): ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` -> ``gpu``
  rows of kind ``graph``; ``CUDA_GRAPH_EVENTS`` / ``CUDA_GRAPH_NODE_EVENTS`` -> ``ranges`` of
  kind ``cuda_graph``.
* ``metrics`` <- ``GPU_METRICS`` (:mod:`traceparse.nsys.metrics`); ``memory`` <-
  ``CUDA_GPU_MEMORY_USAGE_EVENTS`` (:mod:`traceparse.nsys.memory`).
* every other table: one ``ingest`` row (lookup / not read, and why;
  :mod:`traceparse.nsys.tables`).
* ``devices`` <- ``TARGET_INFO_GPU`` (``clockRate`` Hz, ``memoryBandwidth`` B/s), or the
  old ``TARGET_INFO_CUDA_GPU`` (kHz, kB/s); devices used by GPU rows but not described get
  a row with only ``device_id``.
* ``sources`` / ``ingest``: file name, nsys version, export schema version; per source
  table rows parsed and skipped with the reason.

Process and thread ids are decoded from ``globalPid`` / ``globalTid`` in SQL:
``pid = (g >> 24) & 0xFFFFFF``, ``tid = g & 0xFFFFFF`` (64-bit integers never pass through
floats). ``correlation_id`` is unique per process only: join GPU rows to API rows on
``(process_id, correlation_id)``.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

import polars as pl

from traceparse import schema
from traceparse.categorize import by_nvtx
from traceparse.errors import TraceError, wrong_values
from traceparse.nsys.db import NsysDB, q
from traceparse.nsys.gpu import drop_bad_times, id_names, read_gpu, sort_by_start
from traceparse.nsys.graphs import (
    GRAPH_EVENTS,
    GRAPH_TRACE,
    NODE_EVENTS,
    fill_graph_ids,
    node_graph_map,
    read_graph_events,
    read_graph_trace,
)
from traceparse.nsys.host import (
    OSRT,
    OVERHEAD,
    SAMPLES,
    read_osrt,
    read_profiler_overhead,
    read_samples,
)
from traceparse.nsys.memory import TABLE as MEMORY_TABLE
from traceparse.nsys.memory import read_memory
from traceparse.nsys.metrics import METRICS_TABLE, read_metrics
from traceparse.nsys.procs import annotate_processes, recorded_ranks, split_ranks
from traceparse.nsys.ranges import NVTX, read_ranges
from traceparse.nsys.syncids import CUDA_EVENT, join_ids
from traceparse.nsys.syncids import SYNC as SYNC_TABLE
from traceparse.nsys.tables import unread_rows
from traceparse.timeline import NOT_REQUESTED, Timeline, ingest_frame, ingest_rows

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_API_KIND = {0: "runtime", 1: "driver"}
#: Timeline tables a caller of :func:`read` may leave out, and the source tables feeding them.
OPTIONAL_TABLES: dict[str, tuple[str, ...]] = {
    "api": (RUNTIME, SYNC_TABLE, CUDA_EVENT),
    "ranges": (NVTX, OSRT, SAMPLES, OVERHEAD, GRAPH_EVENTS, NODE_EVENTS),
    "metrics": (METRICS_TABLE,),
    "memory": (MEMORY_TABLE,),
}


def read(path: str | os.PathLike[str], *, rank: int = 0, use_adbc: bool = True,
         tables: Collection[str] | None = None) -> Timeline:
    """Read an nsys SQLite export into a validated :class:`Timeline`.

    Args:
        path: the ``.sqlite`` file (opened read-only; never modified).
        rank: value of the ``rank`` column for every row.
        use_adbc: bulk-read through ADBC (faster) or plain ``sqlite3`` only.
        tables: the timeline tables the caller needs (None: all). Tables of
            :data:`OPTIONAL_TABLES` left out are not read (a *partial* timeline, see
            :func:`not_read_tables`); ``gpu``, ``devices``, ``sources`` and ``ingest`` are
            always built, and a file without GPU rows is always read whole.

    A partial timeline is the full one with the left-out tables empty, except that
    ``ingest`` gives each of their source tables one ``not read`` row (:data:`NOT_REQUESTED`,
    its row count), ``sources`` start/end and ``meta["processes"]`` cover only the tables
    read, ``meta["tables_not_read"]`` lists what was left out, and the left-out source tables'
    layouts are not checked. It must not be cached (:meth:`traceparse.cache.Cache.store`
    refuses it) nor given to an analysis that needs a left-out table.

    Raises:
        TraceError: not an SQLite database, truncated/corrupt, a directory, or an SQLite
            database of another application.
    """
    with NsysDB(path, use_adbc=use_adbc) as db:
        try:
            return read_db(db, rank, _left_out(tables))
        except (pl.exceptions.InvalidOperationError, pl.exceptions.SchemaError,
                pl.exceptions.ComputeError) as exc:
            # SQLite is dynamically typed: an id column holding text/blobs, or a value out
            # of range for its schema type (deviceId 2**31 for Int32), fails a cast or a
            # comparison here
            raise wrong_values(db.path, exc) from None


def _left_out(tables: Collection[str] | None) -> frozenset[str]:
    """The :data:`OPTIONAL_TABLES` not among ``tables`` (None = all wanted)."""
    if tables is None:
        return frozenset()
    unknown = set(tables) - set(schema.TABLES)
    if unknown:
        raise ValueError(f"unknown timeline tables {sorted(unknown)}; "
                         f"known: {', '.join(schema.TABLES)}")
    return frozenset(OPTIONAL_TABLES) - set(tables)


def not_read_tables(tl: Timeline) -> list[str]:
    """The timeline tables a partial :func:`read` left out ([] for a whole timeline)."""
    return list(tl.meta.get("tables_not_read", []))


def read_db(db: NsysDB, rank: int, skip: frozenset[str]) -> Timeline:
    """The timeline of the open export ``db`` as ``rank`` (the GPU processes split into
    ranks as :func:`~traceparse.nsys.procs.split_ranks` does), without the optional
    tables named in ``skip`` (:data:`OPTIONAL_TABLES`); its ``ingest`` accounts for each
    table. :func:`read` reads a file with it; the chunked readers read a
    :class:`~traceparse.nsys.chunks.RangeDB` view of one."""
    require_strings(db)
    strings = (db.frame("SELECT id, value FROM StringIds") if db.has("StringIds")
               else pl.DataFrame({"id": [], "value": []},
                                 schema={"id": pl.Int64, "value": pl.String}))
    strings = strings.with_columns(pl.col("id").cast(pl.Int64), pl.col("value").cast(pl.String))
    rows: list[dict[str, Any]] = []

    gpu, acct = read_gpu(db, strings, rank)
    for table, parsed, skipped in acct:
        rows += ingest_rows(rank, "gpu", table, parsed, skipped)

    graphs, parsed, skipped = read_graph_trace(db, rank)
    if db.has(GRAPH_TRACE):
        rows += ingest_rows(rank, "gpu", GRAPH_TRACE, parsed, skipped)
    if graphs.height:
        gpu = sort_by_start(gpu).merge_sorted(graphs, key="start_ns") if gpu.height \
            else graphs
    gpu = fill_graph_ids(gpu, node_graph_map(db))
    if gpu.height == 0:
        skip = frozenset()  # nothing saved, and "no events" must see every table
    for name in sorted(skip):
        rows += [{"rank": rank, "table": name, "source": src, "outcome": "not read",
                  "reason": NOT_REQUESTED, "count": db.count(src)}
                 for src in OPTIONAL_TABLES[name] if db.has(src)]

    api = schema.empty("api")
    if "api" not in skip:
        api, parsed, skipped = read_api(db, strings, rank)
        if db.has(RUNTIME):
            rows += ingest_rows(rank, "api", RUNTIME, parsed, skipped)
        api, ids_acct = join_ids(db, api)  # stream/event ids of waits, syncs and records
        for table, parsed, skipped in ids_acct:
            rows += ingest_rows(rank, "api_ids", table, parsed, skipped)

    ranges = (_host_ranges(db, strings, rank, rows) if "ranges" not in skip
              else schema.empty("ranges"))
    # kernels launched inside NCCL's own NVTX ranges are communication, whatever their name
    gpu = by_nvtx(gpu, api, ranges)

    devices, dev_source, n_dev = read_devices(db, gpu, rank)
    if dev_source:
        rows += ingest_rows(rank, "devices", dev_source, n_dev)

    metrics, memory = schema.empty("metrics"), schema.empty("memory")
    if "metrics" not in skip:
        metrics, parsed, skipped = read_metrics(db, devices, rank)
        if db.has(METRICS_TABLE):
            rows += ingest_rows(rank, "metrics", METRICS_TABLE, parsed, skipped)
    if "memory" not in skip:
        memory, parsed, skipped = read_memory(db, rank)
        if db.has(MEMORY_TABLE):
            rows += ingest_rows(rank, "memory", MEMORY_TABLE, parsed, skipped)

    rows += unread_rows(db, rank, {str(r["source"]) for r in rows})

    meta = db.meta()
    tl = Timeline(gpu=gpu, api=api, ranges=ranges, devices=devices, metrics=metrics,
                  memory=memory, ingest=ingest_frame(rows))
    span = tl.span_ns()
    tl.sources = schema.conform("sources", pl.DataFrame({
        "rank": [rank], "file": [db.path.name], "format": ["nsys-sqlite"],
        "tool_version": [meta.get("EXPORT_PRODUCT_VERSION")],
        "format_version": [meta.get("EXPORT_SCHEMA_VERSION")],
        "rank_source": ["default"],
        "start_ns": [span[0] if span else None], "end_ns": [span[1] if span else None],
    }, schema_overrides={"tool_version": pl.String, "format_version": pl.String,
                         "start_ns": pl.Int64, "end_ns": pl.Int64}))
    # one rank per GPU process (traceparse.nsys.procs), from MPI thread names when recorded
    split_ranks(tl, rank, recorded_ranks(read_thread_names(db, strings)))
    tl.meta = {"format": "nsys-sqlite", "file": db.path.name,
               "processes": annotate_processes(_processes(db, tl), tl.gpu),
               "export_meta": {k: v for k, v in meta.items() if k.startswith("EXPORT_")}}
    if db.has("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in db.columns(
            "TARGET_INFO_SESSION_START_TIME"):
        start = db.frame("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if start.height and start.item() is not None:  # the session clock's zero, in UTC
            tl.meta["session_start_utc_ns"] = int(start.item())
    driver = _driver(db)
    if driver:
        tl.meta["driver_version"] = driver
    if skip:
        tl.meta["tables_not_read"] = sorted(skip)
    return tl.validate()


def _driver(db: NsysDB) -> str | None:
    """The GPU driver of the capture from ``TARGET_INFO_SYSTEM_ENV``: ``CudaDriverVersion``
    (12080 -> ``CUDA 12.8``) and ``NvDriverVersion`` as written (``570.86.15``; older
    exports write digits only: seven are decoded, ``5156501`` = 515.65.01, other lengths
    are kept as written; ``0`` is absent), e.g. ``CUDA 12.8 (NVIDIA 570.86.15)``."""
    env = "TARGET_INFO_SYSTEM_ENV"
    if not db.has(env) or not {"name", "value"} <= set(db.columns(env)):
        return None
    vals = dict(db.frame(f"SELECT name, value FROM {env} WHERE name IN "
                         "('CudaDriverVersion', 'NvDriverVersion')").iter_rows())
    out = []
    cuda = str(vals.get("CudaDriverVersion") or "")
    if cuda.isdigit() and int(cuda):
        out.append(f"CUDA {int(cuda) // 1000}.{int(cuda) % 1000 // 10}")
    nv = str(vals.get("NvDriverVersion") or "")
    if nv.isdigit() and len(nv) == 7:  # 5156501 -> 515.65.01
        nv = f"{nv[:3]}.{nv[3:5]}.{nv[5:]}"
    if nv.strip("0"):
        out.append(f"(NVIDIA {nv})" if out else f"NVIDIA {nv}")
    return " ".join(out) or None


def _host_ranges(db: NsysDB, strings: pl.DataFrame, rank: int, rows: list[dict[str, Any]]
                 ) -> pl.DataFrame:
    """The ``ranges`` table: NVTX, OS-runtime calls, CPU samples, profiler overhead and CUDA
    graph host events; their accounting is appended to ``rows``."""
    ranges, nvtx_acct = read_ranges(db, strings, rank)
    if nvtx_acct is not None:
        rows += ingest_rows(rank, "ranges", NVTX, nvtx_acct[0], nvtx_acct[1])
    host = [ranges]
    # OS-runtime calls, CPU samples, the profiler's own overhead (host)
    for reader in (read_osrt, read_samples, read_profiler_overhead):
        frame, seen = reader(db, strings, rank)
        if seen is not None:
            rows += ingest_rows(rank, "ranges", seen[0], seen[1], seen[2])
            host.append(frame)
    if len(host) > 1:
        ranges = pl.concat(host, how="vertical").sort("start_ns", maintain_order=True)

    graph_events, graph_acct = read_graph_events(db, strings, rank)
    for table, parsed, skipped in graph_acct:
        rows += ingest_rows(rank, "ranges", table, parsed, skipped)
    if graph_events.height:
        base = int(ranges.select(pl.col("range_id").max().fill_null(-1)).item() + 1) \
            if ranges.height else 0
        graph_events = graph_events.with_columns(
            range_id=pl.int_range(base, base + graph_events.height, dtype=pl.Int64))
        ranges = pl.concat([ranges, graph_events]).sort("start_ns", maintain_order=True)
    return ranges


def require_strings(db: NsysDB) -> None:
    """Refuse an export whose rows name strings by id but that has no StringIds table."""
    if db.has("StringIds"):
        return
    for table, col in (("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
                       ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"), (RUNTIME, "nameId"),
                       ("NVTX_EVENTS", "textId")):
        if col in db.columns(table) and db.count(table):
            raise TraceError(db.path, f"no StringIds table, but {table}.{col} refers to it: "
                                      "names cannot be resolved (incomplete export)")


def read_api(db: NsysDB, strings: pl.DataFrame, rank: int
             ) -> tuple[pl.DataFrame, int, dict[str, int]]:
    """The ``api`` frame of the runtime calls of ``db`` (names from ``strings``, sorted by
    start), its row count and the rows skipped per reason (bad times)."""
    if not db.has_rows(RUNTIME):
        return schema.empty("api"), 0, {}
    cols = set(db.columns(RUNTIME))
    parts = ['start AS start_ns', '"end" AS end_ns']
    for src, dst in (("eventClass", "_ec"), ("correlationId", "correlation_id"),
                     ("nameId", "_nid"), ("returnValue", "return_value")):
        if src in cols:
            parts.append(f"{q(src)} AS {dst}")
    if "globalTid" in cols:
        parts += ["(globalTid >> 24) & 16777215 AS process_id",
                  "globalTid & 16777215 AS thread_id"]
    db.require(RUNTIME, ("start", "end"))
    frame = db.table_frame(RUNTIME, ", ".join(parts))
    db.check_int(frame, RUNTIME, ("start_ns", "end_ns"))
    skipped: dict[str, int] = {}
    frame = drop_bad_times(frame, skipped)
    if "_nid" in frame.columns:
        frame = frame.with_columns(id_names(strings, frame["_nid"]).alias("name"))
        frame = frame.with_columns(pl.col("name").cast(pl.String).fill_null(
            pl.lit("<unknown api>")).cast(pl.Categorical)) if frame["name"].null_count() \
            else frame
        frame = frame.drop("_nid")
    else:
        frame = frame.with_columns(name=pl.lit("<unknown api>"))
    ec = pl.col("_ec") if "_ec" in frame.columns else pl.lit(None, dtype=pl.Int64)
    frame = frame.with_columns(
        kind=pl.when(ec == 0).then(pl.lit("runtime")).when(ec == 1).then(pl.lit("driver"))
        .otherwise(pl.lit("other")),
        dur_ns=pl.col("end_ns") - pl.col("start_ns"),
        rank=pl.lit(rank, dtype=pl.Int32),
    )
    if "_ec" in frame.columns:
        frame = frame.drop("_ec")
    if "correlation_id" in frame.columns:
        frame = frame.with_columns(
            pl.when(pl.col("correlation_id") == 4294967295).then(None)
            .otherwise(pl.col("correlation_id")).alias("correlation_id"))
    frame = sort_by_start(schema.conform("api", frame))
    return frame, frame.height, skipped


def read_thread_names(db: NsysDB, strings: pl.DataFrame) -> pl.DataFrame:
    """``process_id, name`` of NVTX thread-naming events (eventType 39, ``NvtxThread``)."""
    empty = pl.DataFrame(schema={"process_id": pl.Int64, "name": pl.String})
    if not db.has("NVTX_EVENTS"):
        return empty
    cols = set(db.columns("NVTX_EVENTS"))
    if not {"eventType", "globalTid"} <= cols:
        return empty
    text = "text" if "text" in cols else "NULL"
    tid = "textId" if "textId" in cols else "NULL"
    raw = db.frame(f"SELECT (globalTid >> 24) & 16777215 AS process_id, {text} AS _t, "
                   f"{tid} AS _tid FROM NVTX_EVENTS WHERE eventType = ?", (39,))
    if raw.height == 0:
        return empty
    named = raw.with_columns(pl.col("_tid").cast(pl.Int64)).join(
        strings.select(pl.col("id").alias("_tid"), pl.col("value").alias("_s")),
        on="_tid", how="left")
    return named.select(pl.col("process_id").cast(pl.Int64),
                        pl.coalesce(pl.col("_t").cast(pl.String), "_s").alias("name"))


def read_devices(db: NsysDB, gpu: pl.DataFrame, rank: int) -> tuple[pl.DataFrame, str | None, int]:
    """The ``devices`` frame from TARGET_INFO_GPU (or TARGET_INFO_CUDA_GPU) plus any that
    ``gpu`` uses but the export does not describe, the table read (None: neither) and how
    many rows it gave."""
    source: str | None = None
    frame = None
    cols = set(db.columns("TARGET_INFO_GPU"))
    if {"id", "clockRate"} <= cols:
        source = "TARGET_INFO_GPU"
        spec: tuple[tuple[str, str], ...] = (
                ("id", "device_id"), ("name", "name"), ("chipName", "chip_name"),
                ("smCount", "sm_count"), ("clockRate", "clock_hz"),
                ("totalMemory", "memory_bytes"), ("memoryBandwidth", "memory_bandwidth_bps"),
                ("l2CacheSize", "l2_bytes"), ("computeMajor", "compute_major"),
                ("computeMinor", "compute_minor"), ("uuid", "uuid"))
        sel = ", ".join(f"{q(s)} AS {d}" for s, d in spec if s in cols)
        frame = db.frame(f"SELECT {sel} FROM TARGET_INFO_GPU")
    elif "deviceId" in set(db.columns("TARGET_INFO_CUDA_GPU")):
        # old schema (no export metadata): clock in kHz, bandwidth in kB/s
        source = "TARGET_INFO_CUDA_GPU"
        ccols = set(db.columns("TARGET_INFO_CUDA_GPU"))
        spec = (("deviceId", "device_id"), ("name", "name"),
                ("numMultiprocessors", "sm_count"), ("coreClockRate * 1000", "clock_hz"),
                ("globalMemorySize", "memory_bytes"),
                ("globalMemoryBandwidth * 1000", "memory_bandwidth_bps"),
                ("l2CacheSize", "l2_bytes"), ("computeCapabilityMajor", "compute_major"),
                ("computeCapabilityMinor", "compute_minor"))
        sel = ", ".join(f"{s if ' ' in s else q(s)} AS {d}" for s, d in spec
                        if s.split(" ")[0] in ccols)
        frame = db.frame(f"SELECT {sel} FROM TARGET_INFO_CUDA_GPU")
    elif "deviceId" in cols or "id" in cols:
        source = "TARGET_INFO_GPU"
        idc = "id" if "id" in cols else "deviceId"
        name = ", name" if "name" in cols else ""
        frame = db.frame(f"SELECT {q(idc)} AS device_id{name} FROM TARGET_INFO_GPU")
    n_source = 0 if frame is None else frame.height
    if frame is None or frame.height == 0:
        frame = schema.empty("devices")
    else:
        # 0 means "not recorded" for these (seen for one GPU of an 8-GPU 2021.5 export)
        zero_null = [c for c in ("sm_count", "clock_hz", "memory_bytes",
                                 "memory_bandwidth_bps", "l2_bytes") if c in frame.columns]
        frame = frame.with_columns(
            [pl.when(pl.col(c) == 0).then(None).otherwise(pl.col(c)).alias(c)
             for c in zero_null] + [pl.lit("nvidia").alias("vendor"),
                                    pl.lit(rank, dtype=pl.Int32).alias("rank")])
        frame = schema.conform("devices", frame).unique("device_id", keep="first",
                                                        maintain_order=True)
    used = gpu["device_id"].unique().to_list() if gpu.height else []
    missing = sorted(set(used) - set(frame["device_id"].to_list()))
    if missing:
        extra = schema.conform("devices", pl.DataFrame({
            "rank": [rank] * len(missing), "device_id": missing,
            "vendor": ["nvidia"] * len(missing)}))
        frame = pl.concat([frame, extra], how="vertical")
    return frame.sort("device_id"), source, n_source


def _processes(db: NsysDB, tl: Timeline) -> list[dict[str, Any]]:
    """Processes seen in the data, with names from PROCESSES where present."""
    pids: set[int] = set()
    for frame in (tl.gpu, tl.api, tl.ranges):
        if frame.height:
            pids |= {int(p) for p in frame["process_id"].drop_nulls().unique().to_list()}
    names: dict[int, str] = {}
    cols = set(db.columns("PROCESSES"))
    if {"pid", "name"} <= cols:
        for pid, name in db.frame("SELECT pid, name FROM PROCESSES").iter_rows():
            if pid is not None and name:
                names.setdefault(int(pid), str(name))
    return [{"pid": p, "name": names.get(p)} for p in sorted(pids)]


