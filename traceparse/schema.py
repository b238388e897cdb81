"""The unified timeline schema: every table and column traceparse produces.

Each parser (Nsight Systems SQLite, PyTorch/Kineto JSON, Nsight Compute CSV) maps its raw
fields onto these tables; every analysis and report reads only these tables. A column is a
:class:`Column` (name, dtype, unit, meaning); a table is an ordered tuple of columns.

Conventions:
    * Time is int64 nanoseconds on one clock per trace (``*_ns``). For multi-rank Kineto
      traces the clock is absolute (epoch) nanoseconds so ranks line up.
    * Units are in column names (``_ns``, ``_bytes``, ``_hz``); counts are plain integers.
    * Names, kinds, categories are ``pl.Categorical``; ids are ``pl.Int64`` (64-bit ids
      never pass through floats).
    * Every table has a ``rank`` column (0 for single-process captures), so many ranks live in
      one long frame.
    * Optional content is a null, never a missing column: :func:`conform` adds absent
      optional columns as typed nulls.

Bump :data:`SCHEMA_VERSION` when a column's meaning or dtype changes; cached and saved
timelines with another version are re-parsed, not trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SCHEMA_VERSION = "1.4"

CAT = pl.Categorical()
I32 = pl.Int32()
I64 = pl.Int64()
F64 = pl.Float64()
STR = pl.String()

#: GPU activity kinds (``gpu.kind``); ``graph`` is a whole CUDA graph execution recorded
#: without its kernels (nsys ``--cuda-graph-trace=graph``).
KINDS = ("kernel", "memcpy", "memset", "sync", "graph")
#: GPU activity categories (``gpu.category``), decided by :mod:`traceparse.categorize`.
CATEGORIES = ("compute", "memory", "communication", "sync")


class SchemaError(ValueError):
    """A frame does not match the schema (a bug in a parser, not bad user input)."""


@dataclass(frozen=True)
class Column:
    """One column of a timeline table.

    Attributes:
        name: snake_case column name, unit suffix included.
        dtype: polars dtype of the column.
        unit: physical unit ("ns", "bytes", "Hz", "count", "" for none).
        meaning: one sentence of what the value is.
        required: if True a parser must fill it (never all-null); optional columns may be null.
    """

    name: str
    dtype: pl.DataType
    unit: str
    meaning: str
    required: bool = False


def _c(name: str, dtype: pl.DataType, unit: str, meaning: str, *,
       required: bool = False) -> Column:
    return Column(name, dtype, unit, meaning, required)


RANK = _c("rank", I32, "", "Distributed rank of the process that produced the row (0 if unknown).",
          required=True)

GPU = (
    RANK,
    _c("kind", CAT, "", "Activity kind: kernel, memcpy, memset, sync, or graph (a CUDA graph "
       "execution recorded without its kernels).", required=True),
    _c("category", CAT, "", "compute, memory, communication or sync (see categorize.py).",
       required=True),
    _c("start_ns", I64, "ns", "Start on the GPU, on the trace clock.", required=True),
    _c("end_ns", I64, "ns", "End on the GPU, on the trace clock.", required=True),
    _c("dur_ns", I64, "ns", "end_ns - start_ns.", required=True),
    _c("device_id", I32, "", "CUDA/HIP device ordinal as seen by the process.", required=True),
    _c("stream_id", I64, "", "Stream id (per context in nsys; Kineto tid on the GPU side)."),
    _c("context_id", I64, "", "CUDA context id."),
    _c("process_id", I64, "", "OS process id that launched the work."),
    _c("correlation_id", I64, "", "Id linking the activity to its launching API call "
       "(unique per process)."),
    _c("name", CAT, "", "Full (demangled) name; memcpy/memset get a descriptive name.",
       required=True),
    _c("short_name", CAT, "", "Base name without template arguments or parameters."),
    _c("grid_x", I32, "", "Grid dimension x (kernels)."),
    _c("grid_y", I32, "", "Grid dimension y."),
    _c("grid_z", I32, "", "Grid dimension z."),
    _c("block_x", I32, "", "Block dimension x (kernels)."),
    _c("block_y", I32, "", "Block dimension y."),
    _c("block_z", I32, "", "Block dimension z."),
    _c("registers_per_thread", I32, "count", "Registers per thread."),
    _c("static_smem_bytes", I64, "bytes", "Static shared memory per block."),
    _c("dynamic_smem_bytes", I64, "bytes", "Dynamic shared memory per block."),
    _c("bytes", I64, "bytes", "Bytes copied or set (memcpy/memset)."),
    _c("copy_kind", CAT, "", "Copy direction: HtoD, DtoH, DtoD, HtoH, PtoP, HtoA, ... "
       "(memcpy only)."),
    _c("src_kind", CAT, "", "Source memory kind: Pageable, Pinned, Device, Managed, ..."),
    _c("dst_kind", CAT, "", "Destination memory kind (memcpy) or memory kind (memset)."),
    _c("graph_id", I64, "", "CUDA graph id when launched from a graph."),
    _c("graph_node_id", I64, "", "CUDA graph node id when launched from a graph."),
    _c("external_id", I64, "", "Kineto External id (links to the cpu_op that launched it)."),
    _c("coll_name", CAT, "", "Collective name (allreduce, allgather, ...) for NCCL/RCCL work."),
    _c("coll_in_nelems", I64, "count", "Collective input message size in elements."),
    _c("coll_out_nelems", I64, "count", "Collective output message size in elements."),
    _c("coll_dtype", CAT, "", "Collective element dtype (Float, BFloat16, ...)."),
    _c("coll_group_size", I32, "count", "Number of ranks in the collective's group."),
    _c("coll_pg", CAT, "", "Process group name or id of the collective."),
)

API = (
    RANK,
    _c("kind", CAT, "", "runtime, driver or other host API family.", required=True),
    _c("name", CAT, "", "API name as recorded (nsys keeps the _vNNNN suffix).", required=True),
    _c("start_ns", I64, "ns", "Call entry on the trace clock.", required=True),
    _c("end_ns", I64, "ns", "Call return on the trace clock.", required=True),
    _c("dur_ns", I64, "ns", "end_ns - start_ns.", required=True),
    _c("process_id", I64, "", "OS process id."),
    _c("thread_id", I64, "", "OS thread id."),
    _c("correlation_id", I64, "", "Id shared with the GPU activity the call launched."),
    _c("external_id", I64, "", "Kineto External id (links to the enclosing cpu_op)."),
    _c("return_value", I64, "", "Return code of the call when recorded."),
    _c("stream_id", I64, "", "Stream the call acted on, where the source records it (nsys "
       "CUPTI synchronization and CUDA-event records: the waiting stream of a "
       "cudaStreamWaitEvent, the recording stream of a cudaEventRecord)."),
    _c("event_id", I64, "", "CUDA event the call waited on or recorded, where the source "
       "records it (same records)."),
)

RANGES = (
    RANK,
    _c("kind", CAT, "", "nvtx_push_pop, nvtx_start_end, nvtx_mark, cpu_op, user_annotation, "
       "gpu_user_annotation, python_function, profiler_step, cuda_graph (nsys graph/node "
       "creation events), osrt (an nsys OS-runtime call: poll, read, futex, "
       "pthread_cond_wait ...; name = the function), cpu_sample (a run of nsys CPU samples of "
       "one thread with the same top frame; name = 'symbol (module)'), profiler_overhead (an "
       "nsys PROFILER_OVERHEAD range such as 'CUPTI Buffer flush') or other.",
       required=True),
    _c("name", CAT, "", "Range text / op name.", required=True),
    _c("start_ns", I64, "ns", "Range start on the trace clock.", required=True),
    _c("end_ns", I64, "ns", "Range end; null for marks and ranges never closed."),
    _c("dur_ns", I64, "ns", "end_ns - start_ns; null when end_ns is null."),
    _c("process_id", I64, "", "OS process id."),
    _c("thread_id", I64, "", "OS thread id that opened the range."),
    _c("end_thread_id", I64, "", "Thread that closed a start/end range, if different."),
    _c("device_id", I32, "", "Device of GPU-side ranges (gpu_user_annotation)."),
    _c("stream_id", I64, "", "Stream of GPU-side ranges."),
    _c("domain", CAT, "", "NVTX domain name (null = default domain)."),
    _c("depth", I32, "count", "Nesting depth on its thread, 0 = outermost."),
    _c("range_id", I64, "", "Unique id of the row within the timeline."),
    _c("external_id", I64, "", "Kineto External id."),
    _c("correlation_id", I64, "", "Correlation id where the source has one."),
    _c("sequence_number", I64, "", "Autograd sequence number (forward/backward link)."),
    _c("flops", F64, "FLOP", "FLOPs reported by the profiler (Kineto with_flops)."),
    _c("input_dims", STR, "", "JSON text of input shapes (Kineto 'Input Dims')."),
    _c("input_types", STR, "", "JSON text of input dtypes (Kineto 'Input type')."),
    _c("concrete_inputs", STR, "", "JSON text of scalar inputs (Kineto 'Concrete Inputs')."),
    _c("payload", STR, "", "NVTX payload or extra args as text (JSON where structured)."),
)

DEVICES = (
    RANK,
    _c("device_id", I32, "", "Device ordinal used by gpu.device_id.", required=True),
    _c("name", STR, "", "Marketing name, e.g. 'NVIDIA H100 80GB HBM3'."),
    _c("vendor", CAT, "", "nvidia or amd."),
    _c("chip_name", STR, "", "Chip, e.g. GH100."),
    _c("sm_count", I32, "count", "Streaming multiprocessors (compute units on AMD)."),
    _c("clock_hz", I64, "Hz", "Max SM clock."),
    _c("memory_bytes", I64, "bytes", "Device memory size."),
    _c("memory_bandwidth_bps", F64, "bytes/s", "Theoretical memory bandwidth."),
    _c("l2_bytes", I64, "bytes", "L2 cache size."),
    _c("compute_major", I32, "", "Compute capability major."),
    _c("compute_minor", I32, "", "Compute capability minor."),
    _c("uuid", STR, "", "Device UUID."),
)

NCU = (
    RANK,
    _c("launch_id", I64, "", "ncu result ID (0-based launch index in the report).",
       required=True),
    _c("kernel_name", STR, "", "Kernel name as printed by ncu.", required=True),
    _c("process_id", I64, "", "Profiled process id."),
    _c("context_id", I64, "", "CUDA context."),
    _c("stream_id", I64, "", "CUDA stream."),
    _c("device_id", I32, "", "Device ordinal."),
    _c("device_name", STR, "", "device__attribute_display_name when present."),
    _c("cc", STR, "", "Compute capability, e.g. '9.0'."),
    _c("grid_x", I32, "", "Grid x."),
    _c("grid_y", I32, "", "Grid y."),
    _c("grid_z", I32, "", "Grid z."),
    _c("block_x", I32, "", "Block x."),
    _c("block_y", I32, "", "Block y."),
    _c("block_z", I32, "", "Block z."),
    _c("dur_ns", F64, "ns", "gpu__time_duration.sum."),
    _c("sm_clock_hz", F64, "Hz", "Measured SM clock during the kernel."),
    _c("dram_clock_hz", F64, "Hz", "Measured DRAM clock during the kernel."),
    _c("flop_fp64", F64, "FLOP", "FP64 FLOPs (add + mul + 2*fma, thread-level SASS)."),
    _c("flop_fp32", F64, "FLOP", "FP32 FLOPs."),
    _c("flop_fp16", F64, "FLOP", "FP16 FLOPs."),
    _c("flop_tensor", F64, "FLOP", "Tensor-core FLOPs (from pipe or ops counters)."),
    _c("dram_bytes", F64, "bytes", "DRAM bytes read + written."),
    _c("l2_bytes", F64, "bytes", "L2 bytes."),
    _c("l1_bytes", F64, "bytes", "L1/TEX bytes."),
    _c("sm_throughput_pct", F64, "%", "Compute (SM) throughput, % of peak."),
    _c("memory_throughput_pct", F64, "%", "Memory throughput, % of peak."),
    _c("source_page", CAT, "", "raw, raw_base, details or roofline: the page it came from."),
    _c("nvtx", STR, "", "NVTX context columns (ncu --nvtx), joined with ' | '."),
    _c("dram_throughput_pct", F64, "%", "DRAM throughput, % of peak (SpeedOfLight)."),
    _c("fp64_flop_per_s", F64, "FLOP/s", "Achieved FP64 FLOP/s as ncu's roofline computes it."),
    _c("fp32_flop_per_s", F64, "FLOP/s", "Achieved FP32 FLOP/s as ncu's roofline computes it."),
    _c("fp16_flop_per_s", F64, "FLOP/s", "Achieved FP16 (non-tensor) FLOP/s."),
    _c("tensor_flop_per_s", F64, "FLOP/s", "Tensor-path ops per second (ops_path counters)."),
    _c("dram_bytes_per_s", F64, "bytes/s", "Achieved DRAM bandwidth."),
    _c("l2_bytes_per_s", F64, "bytes/s", "Achieved L2 bandwidth (lts2xbar, or lts__t_bytes)."),
    _c("l1_bytes_per_s", F64, "bytes/s", "Achieved L1 bandwidth (LSU writeback, or l1tex__t)."),
    _c("peak_fp64_flop_per_s", F64, "FLOP/s", "ncu's FP64 peak at the measured SM clock."),
    _c("peak_fp32_flop_per_s", F64, "FLOP/s", "ncu's FP32 peak at the measured SM clock."),
    _c("peak_fp16_flop_per_s", F64, "FLOP/s", "ncu's FP16 (non-tensor) peak at the measured "
       "SM clock."),
    _c("peak_dram_bytes_per_s", F64, "bytes/s", "ncu's DRAM peak at the measured DRAM clock."),
    _c("peak_l2_bytes_per_s", F64, "bytes/s", "ncu's L2 peak at the measured L2 clock."),
    _c("peak_l1_bytes_per_s", F64, "bytes/s", "ncu's L1 peak at the measured L1 clock."),
    _c("peak_sm_clock_hz", F64, "Hz", "SM clock the ncu peaks assume (measured; base clock "
       "unless --clock-control none)."),
    _c("roofline_method", CAT, "", "'ncu chart' (per-cycle metrics) or 'nersc counts' "
       "(--metrics counters)."),
    _c("peak_tensor_flop_per_s", F64, "ops/s", "Tensor peak for the kernel's dominant tensor "
       "dtype (ops counter peak_sustained x SM clock), as ncu's hierarchical roofline."),
    _c("tensor_dtype", CAT, "", "Tensor source dtype with the most ops (ops_path counters): "
       "bf16, fp16, tf32, fp8, int8, fp64."),
    _c("tensor_pipe", CAT, "", "Busiest MMA pipe (imma, hmma, dmma, gmma, ...) from the pipe "
       "activity counters; null when idle or not collected."),
    _c("tensor_pipe_pct", F64, "%", "That pipe's activity, % of peak (elapsed, else active)."),
    _c("tensor_inst", F64, "count", "Warp MMA instructions (sm__inst_executed_pipe_tensor.sum)."),
)

SOURCES = (
    RANK,
    _c("file", STR, "", "Input file name (base name, never a full path).", required=True),
    _c("format", CAT, "", "nsys-sqlite, kineto-json or ncu-csv.", required=True),
    _c("tool_version", STR, "", "Producer version (nsys version, PyTorch/Kineto schema, ncu)."),
    _c("format_version", STR, "", "Export schema version where the file states it."),
    _c("rank_source", CAT, "", "Where rank came from: distributedInfo, file name, file order, "
       "process order, NVTX thread name 'MPI Rank N' (nsys), default."),
    _c("start_ns", I64, "ns", "First event start in this file."),
    _c("end_ns", I64, "ns", "Last event end in this file."),
    _c("recorded_start_ns", I64, "ns", "Start of the profiler's recording span where the file "
       "states it (Kineto: the 'Trace' event, torch.profiler's start); null otherwise."),
    _c("recorded_end_ns", I64, "ns", "End of that span (torch.profiler's stop): activities "
       "after it were not recorded, although a host range open at the stop may end later."),
)

INGEST = (
    RANK,
    _c("table", CAT, "", "Timeline table the source rows feed (gpu, api, ranges, ...); "
       "api_ids: rows that add no row but give api calls their stream and event ids "
       "(nsys synchronization and CUDA-event records); files: a file of a Kineto rank "
       "directory that is no trace (one row, outcome 'not read').", required=True),
    _c("source", STR, "", "Raw source: nsys table name, Kineto category, ncu page, or "
       "the file name (table files).", required=True),
    _c("outcome", CAT, "", "parsed or skipped (rows of a source the readers map); lookup "
       "(a table read only to resolve other tables' ids) or 'not read' (a table the "
       "timeline does not model; reason says why).", required=True),
    _c("reason", STR, "", "Why rows were skipped (null for parsed)."),
    _c("count", I64, "count", "Number of source rows.", required=True),
)

METRICS = (
    RANK,
    _c("device_id", I32, "", "Device ordinal the sample was taken on.", required=True),
    _c("start_ns", I64, "ns", "Sample time on the trace clock (start of the sampling period).",
       required=True),
    _c("end_ns", I64, "ns", "End of the sampling period (next sample of the same metric on the "
       "device; the last sample's period is the median period).", required=True),
    _c("dur_ns", I64, "ns", "end_ns - start_ns.", required=True),
    _c("metric", CAT, "", "Metric name as the source names it, e.g. 'SM Active', "
       "'DRAM Read Bandwidth', 'GPC Clock Frequency'.", required=True),
    _c("value", F64, "", "Sample value in ``unit``.", required=True),
    _c("unit", CAT, "", "Unit of ``value``: '%', 'Hz', 'bytes/s', 'count', ... "
       "(normalised from the source's own unit)."),
    _c("source", CAT, "", "Where the sample came from: 'nsys GPU_METRICS', ..."),
)

MEMORY = (
    RANK,
    _c("device_id", I32, "", "Device ordinal of the allocation (-1 for host memory).",
       required=True),
    _c("ts_ns", I64, "ns", "Event time on the trace clock.", required=True),
    _c("kind", CAT, "", "alloc, free or other (a usage sample with no size change).",
       required=True),
    _c("bytes", I64, "bytes", "Size change: positive for alloc, negative for free.",
       required=True),
    _c("allocated_bytes", I64, "bytes", "Total allocated on the device after the event, as "
       "the source recorded it (null when it does not)."),
    _c("reserved_bytes", I64, "bytes", "Total reserved by the caching allocator after the "
       "event (null when not recorded)."),
    _c("address", I64, "", "Address of the block (pairs frees with allocs)."),
    _c("memory_kind", CAT, "", "Memory kind where the source says: Device, Managed, Device "
       "Static, Pinned, ... (nsys memKind; Kineto CPU/CUDA device type)."),
    _c("process_id", I64, "", "OS process id."),
    _c("thread_id", I64, "", "OS thread id."),
    _c("source", CAT, "", "Where the event came from: 'kineto [memory]', "
       "'nsys CUDA_GPU_MEMORY_USAGE_EVENTS', ..."),
)

TABLES: dict[str, tuple[Column, ...]] = {
    "gpu": GPU,
    "api": API,
    "ranges": RANGES,
    "devices": DEVICES,
    "ncu": NCU,
    "metrics": METRICS,
    "memory": MEMORY,
    "sources": SOURCES,
    "ingest": INGEST,
}


def polars_schema(table: str) -> pl.Schema:
    """Return the polars schema of ``table`` in column order."""
    return pl.Schema([(c.name, c.dtype) for c in TABLES[table]])


def empty(table: str) -> pl.DataFrame:
    """An empty frame of ``table`` with every column typed."""
    return pl.DataFrame(schema=polars_schema(table))


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Cast ``frame`` to the schema of ``table``: add missing columns as typed nulls, cast
    present ones, order columns as the schema does.

    Columns not in the schema raise :class:`SchemaError` (a parser bug).

    Example:
        >>> conform("sources", pl.DataFrame({"rank": [0], "file": ["a.sqlite"],
        ...                                  "format": ["nsys-sqlite"]})).columns[:4]
        ['rank', 'file', 'format', 'tool_version']
    """
    cols = TABLES[table]
    extra = set(frame.columns) - {c.name for c in cols}
    if extra:
        raise SchemaError(f"{table}: columns not in schema: {sorted(extra)}")
    exprs = []
    for c in cols:
        if c.name in frame.columns:
            exprs.append(pl.col(c.name).cast(c.dtype, strict=True))
        else:
            exprs.append(pl.lit(None, dtype=c.dtype).alias(c.name))
    return frame.select(exprs)


def validate(table: str, frame: pl.DataFrame) -> None:
    """Check ``frame`` against the schema of ``table``; raise :class:`SchemaError` if not.

    Checks: exact column names and order, dtypes, no nulls in required columns, and for
    tables with a time span ``end_ns >= start_ns`` and ``dur_ns == end_ns - start_ns``.
    """
    want = polars_schema(table)
    if list(frame.schema.items()) != list(want.items()):
        raise SchemaError(f"{table}: schema {dict(frame.schema)} != {dict(want)}")
    for c in TABLES[table]:
        if c.required and frame.height and frame[c.name].null_count():
            raise SchemaError(f"{table}.{c.name}: {frame[c.name].null_count()} nulls in a "
                              "required column")
    if {"start_ns", "end_ns", "dur_ns"} <= set(frame.columns) and frame.height:
        # a count over the three time columns: filtering the frame would first copy every
        # column of a multi-chunk frame into one chunk (+27 MiB for the ranges of DLRM x20)
        bad = frame.select((
            pl.col("end_ns").is_not_null()
            & ((pl.col("end_ns") < pl.col("start_ns"))
               | (pl.col("dur_ns") != pl.col("end_ns") - pl.col("start_ns")))
        ).sum()).item()  # counted, not filtered: no copy of the table
        if bad:
            raise SchemaError(f"{table}: {bad} rows with end < start or dur != end-start")
    if table == "gpu" and frame.height:
        for col, allowed in (("kind", KINDS), ("category", CATEGORIES)):
            unknown = set(frame[col].unique().cast(pl.String).to_list()) - set(allowed)
            if unknown:
                raise SchemaError(f"gpu.{col}: unknown values {sorted(unknown)}")


def describe() -> str:
    """Markdown description of every table (used for docs/schema.md)."""
    lines = [f"# Unified timeline schema (version {SCHEMA_VERSION})", ""]
    for table, cols in TABLES.items():
        lines += [f"## `{table}`", "", "| column | dtype | unit | required | meaning |",
                  "|---|---|---|---|---|"]
        for c in cols:
            lines.append(f"| `{c.name}` | {c.dtype} | {c.unit} | {'yes' if c.required else ''} "
                         f"| {c.meaning} |")
        lines.append("")
    return "\n".join(lines)
