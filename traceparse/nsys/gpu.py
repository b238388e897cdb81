"""GPU activity of an nsys export -> the ``gpu`` table (kernels, memcpy, memset).

Source tables (each optional; lazy exports omit empty ones):

* ``CUPTI_ACTIVITY_KIND_KERNEL`` -> kind ``kernel``; ``name`` = demangled name (falling back
  to the short, then the mangled name), ``short_name`` = ``shortName``.
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` -> kind ``memcpy``; ``name`` = what ``nsys stats`` prints
  as Operation, ``[CUDA memcpy <label>]`` with the label of ``ENUM_CUDA_MEMCPY_OPER``
  (e.g. ``[CUDA memcpy Host-to-Device]``); ``copy_kind`` a short code (``HtoD``, ``PtoP``, ...).
* ``CUPTI_ACTIVITY_KIND_MEMSET`` -> kind ``memset``, ``name`` = ``[CUDA memset]``.
* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` rows are host-side blocking intervals (a CPU
  thread waiting in cudaStreamSynchronize & co), not GPU work: they are **not** put in
  ``gpu``; their stream and event ids go onto the API call (:mod:`traceparse.nsys.syncids`).

Rows whose ``start`` or ``end`` is NULL, or whose ``end < start``, are skipped and counted.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import schema
from traceparse.categorize import category_expr
from traceparse.nsys.db import NsysDB, q

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"

#: Unsigned 32-bit "no value" sentinel used by CUPTI/nsys for unused ids.
SENTINEL_U32 = 4294967295

#: ENUM_CUDA_MEMCPY_OPER fallback (id -> (name suffix, label)) for exports without the table.
MEMCPY_OPER = {
    0: ("UNKNOWN", "Unknown"), 1: ("HTOD", "Host-to-Device"), 2: ("DTOH", "Device-to-Host"),
    3: ("HTOA", "Host-to-Array"), 4: ("ATOH", "Array-to-Host"), 5: ("ATOA", "Array-to-Array"),
    6: ("ATOD", "Array-to-Device"), 7: ("DTOA", "Device-to-Array"),
    8: ("DTOD", "Device-to-Device"), 9: ("HTOH", "Host-to-Host"), 10: ("PTOP", "Peer-to-Peer"),
    11: ("UVM_HTOD", "Unified Host-to-Device"), 12: ("UVM_DTOH", "Unified Device-to-Host"),
    13: ("UVM_DTOD", "Unified Device-to-Device"),
}
#: ENUM_CUDA_MEM_KIND fallback (nsys numbering, NOT CUPTI's).
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
            5: "Device Static", 6: "Managed Static", 7: "Unknown"}
#: ENUM_CUDA_MEMCPY_OPER name suffix -> gpu.copy_kind short code.
COPY_CODE = {"UNKNOWN": "Unknown", "HTOD": "HtoD", "DTOH": "DtoH", "HTOA": "HtoA",
             "ATOH": "AtoH", "ATOA": "AtoA", "ATOD": "AtoD", "DTOA": "DtoA", "DTOD": "DtoD",
             "HTOH": "HtoH", "PTOP": "PtoP", "UVM_HTOD": "UvmHtoD", "UVM_DTOH": "UvmDtoH",
             "UVM_DTOD": "UvmDtoD"}

# (source column, gpu column) pairs copied when the source column exists.
_COMMON = (("start", "start_ns"), ("end", "end_ns"), ("deviceId", "device_id"),
           ("contextId", "context_id"), ("streamId", "stream_id"),
           ("correlationId", "correlation_id"), ("graphNodeId", "graph_node_id"),
           ("graphId", "graph_id"))
_KERNEL_ONLY = (("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"),
                ("blockX", "block_x"), ("blockY", "block_y"), ("blockZ", "block_z"),
                ("registersPerThread", "registers_per_thread"),
                ("staticSharedMemory", "static_smem_bytes"),
                ("dynamicSharedMemory", "dynamic_smem_bytes"))
_SENTINEL_COLS = ("stream_id", "context_id", "correlation_id", "graph_node_id", "graph_id")


def enum_map(db: NsysDB, table: str, fallback: dict[int, Any], value_col: str) -> dict[int, Any]:
    """Read ``ENUM_*`` table ``id -> value_col``; the fallback when absent or empty."""
    cols = db.columns(table)
    if "id" not in cols or value_col not in cols:
        return dict(fallback)
    rows = db.frame(f"SELECT id, {q(value_col)} AS v FROM {q(table)}")
    if rows.height == 0:
        return dict(fallback)
    return {int(i): v for i, v in zip(rows["id"].to_list(), rows["v"].to_list(), strict=True)}


def _columns_sql(db: NsysDB, table: str, pairs: tuple[tuple[str, str], ...]) -> str:
    cols = set(db.columns(table))
    parts = [f"{q(src)} AS {dst}" for src, dst in pairs if src in cols]
    if "globalPid" in cols:
        parts.append("(globalPid >> 24) & 16777215 AS process_id")
    return ", ".join(parts)


def _select(db: NsysDB, table: str, pairs: tuple[tuple[str, str], ...],
            extra: tuple[tuple[str, str], ...] = ()) -> pl.DataFrame:
    return db.table_frame(table, _columns_sql(db, table, pairs + extra))


def _clean_times(frame: pl.DataFrame, skipped: dict[str, int], db: NsysDB | None = None,
                 table: str = "") -> pl.DataFrame:
    """Drop rows with NULL times, end < start, or a duration that overflows int64 (counted
    in ``skipped``); add dur_ns. Non-integer times (text, reals) raise TraceError."""
    if db is not None:
        db.check_int(frame, table, ("start_ns", "end_ns"))
    return drop_bad_times(frame, skipped).with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))


def drop_bad_times(frame: pl.DataFrame, skipped: dict[str, int], *,
                   null_end_ok: bool = False) -> pl.DataFrame:
    """Filter out (and count in ``skipped``) rows whose ``start_ns``/``end_ns`` are NULL,
    ordered backwards, or so far apart that ``end - start`` overflows int64. Each row is
    counted under the first of those reasons it meets; the frame is filtered (copied) only
    when some row is dropped.

    Example:
        >>> f = pl.DataFrame({"start_ns": [0, 5, None, -(2**63) + 1],
        ...                   "end_ns": [10, 4, 1, 2**63 - 1]})
        >>> s = {}
        >>> drop_bad_times(f, s).height, s["end before start"], s["null start or end"]
        (1, 1, 1)
        >>> s["duration overflows int64"]
        1
    """
    start, end = pl.col("start_ns"), pl.col("end_ns")
    present = start.is_not_null() if null_end_ok else start.is_not_null() & end.is_not_null()
    ordered = end.is_null() | (end >= start)
    fits = end.is_null() | ((end - start) >= 0)  # wrapped subtraction
    n_absent, n_backwards, n_overflow = frame.select(
        (~present).sum().alias("a"), (present & ~ordered).sum().alias("b"),
        (present & ordered & ~fits).sum().alias("c")).row(0)
    for reason, n in (("null start" if null_end_ok else "null start or end", n_absent),
                      ("end before start", n_backwards),
                      ("duration overflows int64", n_overflow)):
        if n:
            skipped[reason] = n
    if n_absent or n_backwards or n_overflow:
        frame = frame.filter(present & ordered & fits)
    return frame


def _null_sentinels(frame: pl.DataFrame) -> pl.DataFrame:
    """Sentinel ids as nulls; a column without any is kept as it is (not rewritten)."""
    present = [c for c in _SENTINEL_COLS if c in frame.columns]
    if not present or frame.height == 0:
        return frame
    hits = frame.select((pl.col(c) == SENTINEL_U32).any().alias(c) for c in present).row(0)
    exprs = [pl.when(pl.col(c) == SENTINEL_U32).then(None).otherwise(pl.col(c)).alias(c)
             for c, hit in zip(present, hits, strict=True) if hit]
    return frame.with_columns(exprs) if exprs else frame


#: Id -> string lookups go through an array indexed by id when the largest id is below
#: this many times the number of strings (plus :data:`_DENSE_SLACK`); StringIds ids run
#: densely from 0 in every export of the corpus but two (126 strings, ids up to 3.4M).
_DENSE_FACTOR = 4
_DENSE_SLACK = 1024


def id_names(strings: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """The StringIds ``value`` (Categorical) of each of ``ids`` (``strings``: ``id`` Int64,
    ``value`` String; the first row of a repeated id counts), null for a null id or one
    StringIds lacks: a left join's values, without copying the frame ``ids`` comes from.

    Example:
        >>> s = pl.DataFrame({"id": [0, 1, 2], "value": ["a", "b", "c"]})
        >>> id_names(s, pl.Series("x", [2, None, 0, 7])).to_list()
        ['c', None, 'a', None]
    """
    ids = ids.cast(pl.Int64)
    table = strings.unique("id", keep="first", maintain_order=True).drop_nulls("id")
    top = table["id"].max() if table.height else None
    if (isinstance(top, int) and table["id"].min() >= 0  # type: ignore[operator]
            and top < _DENSE_FACTOR * table.height + _DENSE_SLACK):
        lut = (pl.repeat(None, top + 1, dtype=pl.String, eager=True)
               .scatter(table["id"], table["value"]).cast(pl.Categorical))
        index = ids.to_frame("i").select(
            pl.when(pl.col("i").is_between(0, top)).then(pl.col("i"))).to_series()
        return lut.gather(index).alias(ids.name)
    want = table.filter(pl.col("id").is_in(ids.drop_nulls().unique().implode()))
    return (ids.to_frame("id")
            .join(want.with_columns(pl.col("value").cast(pl.Categorical)), on="id",
                  how="left", maintain_order="left")["value"].alias(ids.name))


def _kernels(db: NsysDB, strings: pl.DataFrame, rank: int) -> tuple[pl.DataFrame, dict[str, int]]:
    cols = set(db.columns(KERNEL))
    name_cols: list[str] = [c for c in ("demangledName", "shortName", "mangledName")
                            if c in cols]
    select = _columns_sql(db, KERNEL, _COMMON + _KERNEL_ONLY + tuple((c, c) for c in name_cols))

    def finish(raw: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
        skipped: dict[str, int] = {}
        return _kernel_rows(db, raw, strings, name_cols, rank, skipped), skipped

    # each rowid chunk becomes gpu rows as it is read (db.NsysDB.table_chunks)
    chunks = db.table_chunks(KERNEL, select, finish)
    skipped: dict[str, int] = {}
    for _, part in chunks:
        for reason, n in part.items():
            skipped[reason] = skipped.get(reason, 0) + n
    frames = [frame for frame, _ in chunks]
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)
    return frame, skipped


def _kernel_rows(db: NsysDB, frame: pl.DataFrame, strings: pl.DataFrame, name_cols: list[str],
                 rank: int, skipped: dict[str, int]) -> pl.DataFrame:
    """``gpu`` rows of the kernel table rows ``frame`` (bad times dropped into ``skipped``)."""
    frame = _clean_times(frame, skipped, db, KERNEL)
    # an all-NULL id column comes back as dtype Null from the sqlite3 reader: make it joinable
    frame = frame.with_columns(pl.col(name_cols).cast(pl.Int64))
    frame = frame.with_columns(id_names(strings, frame[c]).alias(f"_{c}") for c in name_cols)
    name_parts = [pl.col(f"_{c}").cast(pl.String) for c in name_cols]
    no_name = pl.lit("<unnamed kernel>")
    short = (pl.col("_shortName") if "shortName" in name_cols
             else pl.lit(None, dtype=pl.Categorical))
    frame = frame.with_columns(
        kind=pl.lit("kernel"),
        # categorical already when the demangled name is present (the usual case)
        name=(pl.col("_demangledName") if name_cols[:1] == ["demangledName"]
              else pl.coalesce([*name_parts, no_name]).cast(pl.Categorical)),
        short_name=short,
    )
    if name_cols[:1] == ["demangledName"] and frame["name"].null_count():
        frame = frame.with_columns(
            name=pl.coalesce([*name_parts, no_name]).cast(pl.Categorical))
    frame = frame.drop([c for c in frame.columns if c.startswith("_")] + name_cols)
    return _finish(frame, rank)


def _memcpy(db: NsysDB, rank: int) -> tuple[pl.DataFrame, dict[str, int]]:
    oper_name = enum_map(db, "ENUM_CUDA_MEMCPY_OPER", {k: f"CUDA_MEMCPY_KIND_{v[0]}"
                                                       for k, v in MEMCPY_OPER.items()}, "name")
    oper_label = enum_map(db, "ENUM_CUDA_MEMCPY_OPER", {k: v[1] for k, v in
                                                        MEMCPY_OPER.items()}, "label")
    mem_kind = enum_map(db, "ENUM_CUDA_MEM_KIND", MEM_KIND, "label")
    frame = _select(db, MEMCPY, _COMMON, (("bytes", "bytes"), ("copyKind", "_ck"),
                                          ("srcKind", "_sk"), ("dstKind", "_dk")))
    skipped: dict[str, int] = {}
    frame = _clean_times(frame, skipped, db, MEMCPY)
    # a layout without copyKind/srcKind/dstKind: Unknown copy kind, no memory kinds
    frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(c)
                               for c in ("_ck", "_sk", "_dk") if c not in frame.columns)
    ids = sorted(oper_label)
    code = [COPY_CODE.get(str(oper_name.get(i, "")).removeprefix("CUDA_MEMCPY_KIND_"),
                          str(oper_label[i])) for i in ids]
    labels = [f"[CUDA memcpy {oper_label[i]}]" for i in ids]
    kids = sorted(mem_kind)
    kinds = [str(mem_kind[i]) for i in kids]
    frame = frame.with_columns(
        kind=pl.lit("memcpy"),
        name=pl.col("_ck").replace_strict(ids, labels, default="[CUDA memcpy Unknown]",
                                          return_dtype=pl.String),
        copy_kind=pl.col("_ck").replace_strict(ids, code, default="Unknown",
                                               return_dtype=pl.String),
        src_kind=pl.col("_sk").replace_strict(kids, kinds, default=None, return_dtype=pl.String),
        dst_kind=pl.col("_dk").replace_strict(kids, kinds, default=None, return_dtype=pl.String),
    ).drop(["_ck", "_sk", "_dk"])
    return _finish(frame, rank), skipped


def _memset(db: NsysDB, rank: int) -> tuple[pl.DataFrame, dict[str, int]]:
    mem_kind = enum_map(db, "ENUM_CUDA_MEM_KIND", MEM_KIND, "label")
    frame = _select(db, MEMSET, _COMMON, (("bytes", "bytes"), ("memKind", "_mk")))
    skipped: dict[str, int] = {}
    frame = _clean_times(frame, skipped, db, MEMSET)
    kids = sorted(mem_kind)
    exprs: dict[str, pl.Expr] = {"kind": pl.lit("memset"), "name": pl.lit("[CUDA memset]")}
    if "_mk" in frame.columns:
        exprs["dst_kind"] = pl.col("_mk").replace_strict(
            kids, [str(mem_kind[i]) for i in kids], default=None, return_dtype=pl.String)
    frame = frame.with_columns(**exprs)
    if "_mk" in frame.columns:
        frame = frame.drop("_mk")
    return _finish(frame, rank), skipped


def _finish(frame: pl.DataFrame, rank: int) -> pl.DataFrame:
    frame = _null_sentinels(frame).with_columns(rank=pl.lit(rank, dtype=pl.Int32))
    if "device_id" not in frame.columns:
        frame = frame.with_columns(device_id=pl.lit(0, dtype=pl.Int32))
    frame = frame.with_columns(pl.col("device_id").fill_null(-1))
    frame = schema.conform("gpu", frame.with_columns(category=pl.lit("compute")))
    # categorize each distinct (kind, copy_kind, name) once, not every row
    keys = ["kind", "copy_kind", "name"]
    cats = frame.select(keys).unique().with_columns(category_expr())
    # joined on the key columns alone: the other columns are not copied
    category = frame.select(keys).join(cats, on=keys, how="left", nulls_equal=True,
                                       maintain_order="left")["category"]
    return frame.with_columns(category)


def sort_by_start(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` sorted by ``start_ns`` (stable); free when it already is."""
    if frame.height < 2 or bool((frame["start_ns"].diff().drop_nulls() >= 0).all()):
        return frame
    return frame.sort("start_ns", maintain_order=True)


def read_gpu(db: NsysDB, strings: pl.DataFrame, rank: int
             ) -> tuple[pl.DataFrame, list[tuple[str, int, dict[str, int]]]]:
    """Build the ``gpu`` table; return it and (source table, parsed, skipped) accounting."""
    parts: list[pl.DataFrame] = []
    acct: list[tuple[str, int, dict[str, int]]] = []
    for table, fn in ((KERNEL, lambda: _kernels(db, strings, rank)),
                      (MEMCPY, lambda: _memcpy(db, rank)),
                      (MEMSET, lambda: _memset(db, rank))):
        if not db.has(table):
            continue
        db.require_activity(table)  # the layout is checked even when the table is empty
        if not db.has_rows(table):
            acct.append((table, 0, {}))
            continue
        frame, skipped = fn()
        parts.append(frame)
        acct.append((table, frame.height, skipped))
    if not parts:
        return schema.empty("gpu"), acct
    # one stable sort by start: ties keep table order (kernel, memcpy, memset), as merging
    # the stably sorted parts would
    gpu = [pl.concat(parts, how="vertical", rechunk=False)]
    parts.clear()
    return _sort_columnwise(gpu), acct


#: Columns gathered together by :func:`_sort_columnwise`.
_SORT_GROUP = 6


def _sort_columnwise(holder: list[pl.DataFrame]) -> pl.DataFrame:
    """``sort_by_start`` of the one frame in ``holder`` (which is emptied), gathering
    :data:`_SORT_GROUP` columns at a time and dropping their old copies before the next
    group: only a group is held twice, not the whole frame (when the caller holds no other
    reference to it). ngp17: peak RSS of the read about 80 MiB lower, same CPU time."""
    frame = holder.pop()
    if frame.height < 2 or bool((frame["start_ns"].diff().drop_nulls() >= 0).all()):
        return frame
    order = frame.select(pl.arg_sort_by("start_ns", maintain_order=True)).to_series()
    sorted_parts = []
    while frame.width:
        group = frame.columns[:_SORT_GROUP]
        sorted_parts.append(frame.select(group)[order])
        frame = frame.drop(group)  # the group's old columns can go now
    return pl.concat(sorted_parts, how="horizontal")
