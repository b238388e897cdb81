"""Kineto events -> column-wise polars frames for the ``gpu``, ``api`` and ``ranges`` tables.

Events are first bucketed by ``cat`` (one pass), then each bucket is turned into columns
with list comprehensions and one frame construction, never one Python object per row.
Category spellings of every Kineto era are normalised by :data:`CATEGORIES` (lower-cased
lookup): ``Kernel``/``kernel``, ``Memcpy``/``gpu_memcpy``, ``Runtime``/``cuda_runtime``,
``Operator``/``cpu_op``, ``gpu_user_Annotation``/``gpu_user_annotation`` ...

Time: ``start_ns = round(ts * 1000)`` and ``dur_ns = round(dur * 1000)`` exactly, converted
by the caller (:mod:`traceparse.kineto.times`) and passed in as ``times``;
``end_ns = start_ns + dur_ns``; the caller adds the clock base.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import attrgetter
from typing import Any

import orjson
import polars as pl

from traceparse.kineto.decode import Event

#: lower-cased ``cat`` -> (table, kind). Everything else is counted and skipped.
CATEGORIES: dict[str, tuple[str, str]] = {
    "kernel": ("gpu", "kernel"),
    "gpu_memcpy": ("gpu", "memcpy"),
    "memcpy": ("gpu", "memcpy"),
    "gpu_memset": ("gpu", "memset"),
    "memset": ("gpu", "memset"),
    "cuda_sync": ("gpu", "sync"),
    "cuda_runtime": ("api", "runtime"),
    "runtime": ("api", "runtime"),
    "cuda_driver": ("api", "driver"),
    "cpu_op": ("ranges", "cpu_op"),
    "operator": ("ranges", "cpu_op"),
    "user_annotation": ("ranges", "user_annotation"),
    "user": ("ranges", "user_annotation"),
    "gpu_user_annotation": ("ranges", "gpu_user_annotation"),
    "python_function": ("ranges", "python_function"),
    "profilerstep": ("ranges", "profiler_step"),
    # CUPTI's own records ("Lazy Function Loading", buffer flushes), pid -1
    "overhead": ("ranges", "profiler_overhead"),
}
#: Flow categories (links are taken from ``args.correlation`` instead).
FLOW_CATEGORIES = {"ac2g", "fwdbwd", "async", "async_gpu", "async_cpu_to_gpu"}

_EXT = ("External id", "external id")
_NAME, _PID, _TID = attrgetter("name"), attrgetter("pid"), attrgetter("tid")
#: cpu_op args that get their own column (everything else useful goes to ``payload``).
_RANGE_OWN_ARGS = frozenset({
    "External id", "external id", "Sequence number", "flops", "Input Dims", "Input dims",
    "Input type", "Concrete Inputs", "Ev Idx", "Record function id", "Profiler Event Index",
    "Trace name", "Trace iteration", "correlation",
})
_COLL = (("coll_name", "Collective name"), ("coll_in_nelems", "In msg nelems"),
         ("coll_out_nelems", "Out msg nelems"), ("coll_dtype", "dtype"),
         ("coll_group_size", "Group size"))


def _get(args: list[dict[str, Any]], *keys: str) -> list[Any]:
    """Value of the first present key of each args dict (None if absent)."""
    if len(keys) == 1:  # ``dict.get`` mapped in C: no bytecode per event
        return list(map(dict.get, args, repeat(keys[0])))
    out = []
    for a in args:
        v = None
        for k in keys:
            v = a.get(k)
            if v is not None:
                break
        out.append(v)
    return out


def _getter(args: list[dict[str, Any]]) -> Callable[..., list[Any]]:
    """:func:`_get` bound to ``args``, skipping keys that no event has (one C-level union
    of the key sets instead of a ``dict.get`` per event for an absent key)."""
    present: set[str] = set().union(*args)
    nothing = [None] * len(args)

    def get(*keys: str) -> list[Any]:
        have = [k for k in keys if k in present]
        return _get(args, *have) if have else nothing.copy()

    return get


def _int(values: list[Any], name: str) -> pl.Series:
    """Int64 column from ints / digit strings ("7", "0x0" -> null); other values -> null."""
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        pass
    fixed: list[int | None] = []
    for v in values:
        if type(v) is int:
            fixed.append(v)
        elif isinstance(v, str):
            s = v.strip().split()[-1] if v.strip() else ""  # "stream 7" -> "7"
            fixed.append(int(s) if s.lstrip("-").isdigit() else None)
        elif isinstance(v, float) and v.is_integer():
            fixed.append(int(v))
        else:
            fixed.append(None)
    return pl.Series(name, fixed, dtype=pl.Int64)


def _str(values: list[Any], name: str) -> pl.Series:
    return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)


def _name(events: list[Event]) -> pl.Series:
    """Event names as text; an event without one (malformed, but seen in fuzzing) is
    ``<unnamed>`` so the required ``name`` column stays filled."""
    names = list(map(_NAME, events))
    try:  # the usual case: every name a string (polars refuses any other type here)
        col = pl.Series("name", names, dtype=pl.String, strict=True)
        if not col.null_count():
            return col
    except TypeError:
        pass
    return pl.Series("name", ["<unnamed>" if v is None else str(v) for v in names],
                     dtype=pl.String)


def _json(values: list[Any], name: str) -> pl.Series:
    """JSON text of each value (None stays null)."""
    if values.count(None) == len(values):  # an absent key: no per-value work
        return pl.Series(name, values, dtype=pl.String)
    return pl.Series(name, [None if v is None else orjson.dumps(v).decode() for v in values],
                     dtype=pl.String)


def _times(times: tuple[pl.Series, pl.Series]) -> dict[str, pl.Series]:
    """``start_ns`` and ``dur_ns`` columns from the converted (ts, dur) of the events."""
    return {"start_ns": times[0].alias("start_ns"), "dur_ns": times[1].alias("dur_ns")}


def _args(decoded: list[Any]) -> list[dict[str, Any]]:
    """Decoded ``args`` values -> dicts (anything else, absent included, -> ``{}``)."""
    if set(map(type, decoded)) <= {dict}:  # the usual case: the list itself, unchanged
        return decoded
    return [a if isinstance(a, dict) else {} for a in decoded]


def _dims(args: list[dict[str, Any]], key: str) -> tuple[pl.Series, ...]:
    vals = [v if isinstance(v := a.get(key), list) else None for a in args]
    return tuple(
        pl.Series(f"{key[0]}_{axis}",
                  [v[i] if v is not None and len(v) > i else None for v in vals],
                  dtype=pl.Int64)
        for i, axis in enumerate("xyz")
    )


#: ``cuda_sync`` args of a stream wait -> private gpu columns (``traceparse.kineto.syncids``).
WAIT_ARGS = {"wait_on_cuda_event_id": "_wait_event",
             "wait_on_cuda_event_record_corr_id": "_wait_record_corr",
             "wait_on_stream": "_wait_record_stream"}


#: CUPTI's "no stream" (unsigned 32-bit -1) in ``args.stream``.
NO_STREAM = 4294967295


def gpu_frame(events: list[Event], decoded_args: list[Any], kinds: pl.Series,
              times: tuple[pl.Series, pl.Series]) -> pl.DataFrame:
    """Columns of the ``gpu`` table (without rank, category, process_id and clock base).

    ``device_id`` comes from ``args.device`` (else ``pid``), ``stream_id`` from
    ``args.stream`` (else ``tid``; legacy ``"stream 7"`` strings are understood).
    """
    args = _args(decoded_args)
    get = _getter(args)
    cols: dict[str, Any] = {"kind": kinds}
    cols.update(_times(times))
    cols["name"] = _name(events)
    cols["device_id"] = _int(get("device"), "a").fill_null(
        _int(list(map(_PID, events)), "b")).fill_null(0)
    # no stream: CUPTI's unsigned -1 (a context-wide "Context Sync": args.stream 4294967295,
    # tid -1) is null, as the nsys reader does with the same sentinel
    stream = _int(get("stream"), "a").fill_null(_int(list(map(_TID, events)), "b"))
    cols["stream_id"] = stream.set((stream == NO_STREAM) | (stream < 0), None)
    cols["context_id"] = _int(get("context"), "context_id")
    cols["correlation_id"] = _int(get("correlation"), "correlation_id")
    cols["external_id"] = _int(get(*_EXT), "external_id")
    # a "Stream Wait Event" cuda_sync row names the event, its record call and the recording
    # stream (read by traceparse.kineto.syncids, then dropped)
    for key, col in WAIT_ARGS.items():
        vals = get(key)
        if any(v is not None for v in vals):
            cols[col] = _int(vals, col)
    gx, gy, gz = _dims(args, "grid")
    bx, by, bz = _dims(args, "block")
    cols.update(grid_x=gx, grid_y=gy, grid_z=gz, block_x=bx, block_y=by, block_z=bz)
    cols["registers_per_thread"] = _int(get("registers per thread"), "r")
    # Kineto writes only static + dynamic shared memory combined ("shared memory"): it is
    # stored as static_smem_bytes with dynamic_smem_bytes left null (see docs/kineto.md).
    cols["static_smem_bytes"] = _int(get("shared memory"), "s")
    cols["bytes"] = _int(get("bytes"), "bytes")
    cols["graph_id"] = _int(get("graph id"), "g")
    cols["graph_node_id"] = _int(get("graph node id"), "gn")
    for col, key in _COLL:
        cols[col] = (_str(get(key), col) if col in ("coll_name", "coll_dtype")
                     else _int(get(key), col))
    cols["coll_pg"] = _str(get("Process Group Name", "Process Group ID"), "coll_pg")
    cols["rocm_kind"] = _str(get("kind"), "rocm_kind")
    frame = pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
    name = pl.col("name")
    copy = name.str.extract_groups(r"^Memcpy (\w+) \((\w[\w ]*?) -> (\w[\w ]*?)\)")
    mset = name.str.extract(r"^Memset \((\w[\w ]*?)\)", 1)
    is_copy = pl.col("kind") == "memcpy"
    return frame.with_columns(
        end_ns=pl.col("start_ns") + pl.col("dur_ns"),
        copy_kind=pl.when(is_copy).then(
            copy.struct.field("1").fill_null(pl.col("rocm_kind"))),
        src_kind=pl.when(is_copy).then(copy.struct.field("2")),
        dst_kind=pl.when(is_copy).then(copy.struct.field("3"))
        .when(pl.col("kind") == "memset").then(mset),
    ).drop("rocm_kind")


def api_frame(events: list[Event], decoded_args: list[Any], kinds: pl.Series,
              times: tuple[pl.Series, pl.Series]) -> pl.DataFrame:
    """Columns of the ``api`` table (without rank and clock base)."""
    args = _args(decoded_args)
    get = _getter(args)
    cols: dict[str, Any] = {"kind": kinds}
    cols.update(_times(times))
    cols["name"] = _name(events)
    cols["process_id"] = _int(list(map(_PID, events)), "process_id")
    cols["thread_id"] = _int(list(map(_TID, events)), "thread_id")
    cols["correlation_id"] = _int(get("correlation"), "correlation_id")
    cols["external_id"] = _int(get(*_EXT), "external_id")
    frame = pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
    return frame.with_columns(end_ns=pl.col("start_ns") + pl.col("dur_ns"))


def ranges_frame(events: list[Event], decoded_args: list[Any], kinds: pl.Series,
                 times: tuple[pl.Series, pl.Series]) -> pl.DataFrame:
    """Columns of the ``ranges`` table (without rank, depth, range_id and clock base).

    CPU ranges keep ``pid``/``tid`` as process/thread; GPU user annotations keep the device
    and stream instead. Argument lists are stored as JSON text (``input_dims`` ...), and
    remaining useful args (call stack, module hierarchy, collective args, strides ...) as one
    JSON object in ``payload``.
    """
    args = _args(decoded_args)
    get = _getter(args)
    name, kind = _name(events), kinds
    on_gpu = kind == "gpu_user_annotation"
    # a CPU range named ProfilerStep#N is a profiler step (column-wise: a non-string name
    # never starts so, its text is "<unnamed>" or a number, list or object)
    step = name.str.starts_with("ProfilerStep#") & ~on_gpu
    if step.any():
        kind = pl.select(pl.when(step).then(pl.lit("profiler_step")).otherwise(kind)
                         ).to_series()
    cols: dict[str, Any] = {"kind": kind}
    cols.update(_times(times))
    cols["name"] = name
    pid = _int(list(map(_PID, events)), "pid")
    tid = _int(list(map(_TID, events)), "tid")
    none = pl.Series(dtype=pl.Int64).extend_constant(None, len(events))
    cols["process_id"] = pid.zip_with(~on_gpu, none)
    cols["thread_id"] = tid.zip_with(~on_gpu, none)
    dev = _int(get("device"), "d").fill_null(pid)
    cols["device_id"] = dev.zip_with(on_gpu, none)
    cols["stream_id"] = tid.zip_with(on_gpu, none)
    cols["external_id"] = _int(get(*_EXT), "external_id")
    cols["correlation_id"] = _int(get("correlation"), "correlation_id")
    cols["sequence_number"] = _int(get("Sequence number"), "sequence_number")
    flops = get("flops")
    cols["flops"] = pl.Series("flops", flops if flops.count(None) == len(flops) else
                              [v if isinstance(v, (int, float)) else None for v in flops],
                              dtype=pl.Float64)
    cols["input_dims"] = _json(get("Input Dims", "Input dims"), "input_dims")
    cols["input_types"] = _json(get("Input type"), "input_types")
    cols["concrete_inputs"] = _json(get("Concrete Inputs"), "concrete_inputs")
    # most ops carry only own-column args: a C-level key-set test skips their dict copy
    rest = [None if a.keys() <= _RANGE_OWN_ARGS
            else {k: v for k, v in a.items() if k not in _RANGE_OWN_ARGS} for a in args]
    cols["payload"] = _json([r if r else None for r in rest], "payload")
    frame = pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
    return frame.with_columns(end_ns=pl.col("start_ns") + pl.col("dur_ns"))


#: ``args["Device Type"]`` of a host (CPU) allocation (c10::DeviceType::CPU).
_CPU_DEVICE_TYPE = 0


def is_memory_event(e: Event) -> bool:
    """True for a Kineto allocator event: an instant (``ph`` ``i``) named ``[memory]``
    (``cat`` ``cpu_instant_event``, or none in 2021-era traces)."""
    return e.name == "[memory]" and e.ph == "i"


def memory_frame(events: list[Event], decoded_args: list[Any],
                 ts_ns: pl.Series) -> pl.DataFrame:
    """Columns of the ``memory`` table (without rank and clock base) from ``[memory]``
    instants, one row each.

    ``bytes`` is ``args.Bytes`` (negative = free), ``kind`` alloc/free/other by its sign,
    ``device_id`` is ``args["Device Id"]``, or -1 for host memory (``Device Type`` 0);
    ``allocated_bytes``/``reserved_bytes`` are ``Total Allocated``/``Total Reserved`` and
    ``address`` is ``Addr`` (null where the trace does not record them, as 2021 traces).
    The caller drops events without ``ts`` or ``Bytes`` (counted as skipped).
    """
    args = _args(decoded_args)
    get = _getter(args)
    size = _int(get("Bytes"), "bytes")
    dev_type = _int(get("Device Type"), "device_type")
    frame = pl.DataFrame({
        "ts_ns": ts_ns.alias("ts_ns"),
        "device_type": dev_type,
        "device_id": _int(get("Device Id"), "device_id"),
        "bytes": size,
        "allocated_bytes": _int(get("Total Allocated"), "allocated_bytes"),
        "reserved_bytes": _int(get("Total Reserved"), "reserved_bytes"),
        "address": _int(get("Addr"), "address"),
        "process_id": _int(list(map(_PID, events)), "process_id"),
        "thread_id": _int(list(map(_TID, events)), "thread_id"),
    })
    return frame.with_columns(
        device_id=pl.when(pl.col("device_type") == _CPU_DEVICE_TYPE).then(pl.lit(-1))
        .otherwise(pl.col("device_id")),
        kind=pl.when(pl.col("bytes") > 0).then(pl.lit("alloc"))
        .when(pl.col("bytes") < 0).then(pl.lit("free")).otherwise(pl.lit("other")),
        source=pl.lit("kineto [memory]"),
    ).drop("device_type")
