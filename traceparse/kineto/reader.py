"""PyTorch profiler (Kineto) Chrome-trace JSON -> :class:`~traceparse.timeline.Timeline`.

Entry point: :func:`read` (one file); :func:`traceparse.kineto.ranks.read_dir` reads a
directory of per-rank files with it.

Mapping (see docs/kineto.md and FORMATS.md section C):

* ``kernel``/``gpu_memcpy``/``gpu_memset``/``cuda_sync`` (and legacy ``Kernel``, ``Memcpy``,
  ``Memset``) -> ``gpu``; ``process_id`` = host pid of the launch call (by correlation id).
* ``cuda_runtime``/``cuda_driver`` (``Runtime``; HIP calls in ROCm traces) -> ``api``.
* ``cpu_op``, ``user_annotation``, ``gpu_user_annotation``, ``python_function`` and
  ``ProfilerStep#N`` -> ``ranges``.
* ``deviceProperties`` -> ``devices``; ``distributedInfo`` -> rank / world size / backend.
* Every other event (flows, metadata, instants, other categories) is counted in ``ingest``
  as skipped with a reason, so parsed + skipped = events in the file.

Clock: every row is on the absolute epoch-ns clock: ``baseTimeNanoseconds + round(ts*1000)``
for relative traces, ``round(ts*1000)`` for absolute ones, so ranks line up.
"""

from __future__ import annotations

import gc
import os
import re
from collections import defaultdict
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any

import polars as pl

from traceparse import schema
from traceparse.categorize import by_launcher, category_expr
from traceparse.errors import TraceError, wrong_values
from traceparse.kineto import times
from traceparse.kineto.decode import Event, decode_args, decode_events, from_dicts
from traceparse.kineto.devices import device_frame, one_visible_gpu
from traceparse.kineto.devices import int_or_none as _int_or_none
from traceparse.kineto.events import (
    CATEGORIES,
    FLOW_CATEGORIES,
    api_frame,
    gpu_frame,
    is_memory_event,
    memory_frame,
    ranges_frame,
)
from traceparse.kineto.io import NeedsDecimalText, decode, needs_decimal_text, read_bytes
from traceparse.kineto.link import (
    COLL_COLS,
    attach_collectives,
    link_gpu,
    link_stats,
    nesting_depth,
)
from traceparse.kineto.syncids import join_ids
from traceparse.timeline import Timeline, ingest_frame, ingest_rows

_RANK_IN_NAME = re.compile(r"(?i)(?:rank|worker)[-_]?(\d+)")
_TS, _DUR = attrgetter("ts"), attrgetter("dur")


def rank_from_name(name: str) -> int | None:
    """Rank encoded in a file name (``rank-3``, ``rank_1``, ``worker5``), else None.

    Example:
        >>> rank_from_name("param__dlrm_8rank__worker5_step_12.pt.trace.json")
        5
    """
    found = _RANK_IN_NAME.findall(name)
    return int(found[-1]) if found else None


def _bucket(events: list[Event], path: Path) -> dict[tuple[Any, Any], list[Event]]:
    buckets: dict[tuple[Any, Any], list[Event]] = defaultdict(list)
    try:
        for e in events:
            buckets[(e.cat, e.ph)].append(e)
    except TypeError:
        raise TraceError(path, "an event has a cat or ph that is not a string") from None
    return buckets


def _skip_reason(cat: Any, ph: Any) -> tuple[str, str]:
    """(ingest table, reason) for events that feed no table."""
    if ph == "M":
        return "meta", "metadata event (process/thread names) not used"
    if isinstance(cat, str) and cat.lower() in FLOW_CATEGORIES:
        return "gpu", "flow event (links come from args.correlation)"
    if cat is None:
        return "meta", f"event without cat (ph {ph}) not used"
    return "meta", f"category {cat} not used"


def _rpc_frame(args: list[dict[str, Any]]) -> pl.DataFrame:
    """record_param_comms ops carrying a Collective name (see :func:`_comm_ops`) -> their
    ``external_id`` and ``coll_*`` columns for attach_collectives."""
    rows = []
    for a in args:
        rows.append({"external_id": a.get("External id"),
                     "coll_name": str(a.get("Collective name")),
                     "coll_in_nelems": _int_or_none(a.get("In msg nelems")),
                     "coll_out_nelems": _int_or_none(a.get("Out msg nelems")),
                     "coll_dtype": None if a.get("dtype") is None else str(a["dtype"]),
                     "coll_group_size": _int_or_none(a.get("Group size")),
                     "coll_pg": next((str(a[k]) for k in ("Process Group Name",
                                                          "Process Group ID") if k in a), None)})
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def _comm_ops(ranges: pl.DataFrame, args: list[Any]) -> tuple[list[int], list[dict[str, Any]]]:
    """(row numbers, args) of the cpu_op ``record_param_comms`` ranges that name a
    collective (``ranges``: the frame of :func:`ranges_frame`, one row per event, in
    order; its ``name`` is the event's name wherever that is a string)."""
    named = ranges.select((pl.col("name") == "record_param_comms")
                          & (pl.col("kind") == "cpu_op")).to_series().arg_true().to_list()
    rows = [i for i in named
            if isinstance(a := args[i], dict) and a.get("Collective name") is not None]
    return rows, [args[i] for i in rows]


def _split_memory(cat: Any, ph: Any, evs: list[Event]) -> tuple[list[Event], list[Event]]:
    """(``[memory]`` allocator instants, the rest) of one (cat, ph) bucket."""
    if ph != "i" or cat not in (None, "cpu_instant_event"):
        return [], evs
    mem = [e for e in evs if is_memory_event(e)]
    return mem, ([e for e in evs if not is_memory_event(e)] if mem else evs)


def parse(raw_header: dict[str, Any], events: list[Event], path: Path, *,
          rank: int | None = None, rank_fallback: tuple[int, str] = (0, "default")
          ) -> Timeline:
    """Build a validated Timeline from a decoded trace (see :func:`read`).

    Raises :class:`~traceparse.kineto.io.NeedsDecimalText` when a float time is too large
    for float64 to hold its ns digits (decode again with more times as text).
    """
    dist = raw_header.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    if rank is not None:
        rank_source = "argument"
    elif _int_or_none(dist.get("rank")) is not None:
        rank, rank_source = _int_or_none(dist.get("rank")), "distributedInfo"
    elif rank_from_name(path.name) is not None:
        rank, rank_source = rank_from_name(path.name), "file name"
    else:
        rank, rank_source = rank_fallback
    assert rank is not None

    buckets = _bucket(events, path)
    picked: dict[str, list[Event]] = {"gpu": [], "api": [], "ranges": []}
    kinds: dict[str, pl.Series] = {t: pl.Series("kind", [], dtype=pl.String) for t in picked}
    cols: dict[str, tuple[list[times.TimeColumn], list[times.TimeColumn]]] = {
        t: ([], []) for t in picked}
    ingest: list[dict[str, Any]] = []
    mem_events: list[Event] = []
    mem_args: list[Any] = []
    mem_ts: list[times.TimeColumn] = []
    trace_evs: list[Event] = []
    for (cat, ph), all_evs in buckets.items():
        target = CATEGORIES.get(cat.lower()) if isinstance(cat, str) else None
        source = cat if isinstance(cat, str) else f"(no cat, ph {ph})"
        mem, evs = _split_memory(cat, ph, all_evs)
        if mem:
            margs = decode_args(mem, path)
            ts_col = times.time_column([e.ts for e in mem], path)
            has_ts = times.present(ts_col)
            keep = [t and isinstance(a, dict) and a.get("Bytes") is not None
                    for t, a in zip(has_ts, margs, strict=True)]
            mem_events += compress(mem, keep)
            mem_args += compress(margs, keep)
            mem_ts.append(times.take(ts_col, keep))
            n_ts, n_keep = sum(has_ts), sum(keep)
            ingest += ingest_rows(rank, "memory", source, n_keep,
                                  {"missing ts": len(mem) - n_ts,
                                   "missing args.Bytes": n_ts - n_keep})
            if not evs:
                continue
        if cat == "Trace" and ph == "X":  # the profiler's recording span, read below
            trace_evs += evs
            continue
        if target is None or ph != "X":
            table, reason = (_skip_reason(cat, ph) if target is None
                             else (target[0], f"phase {ph} is not a complete event"))
            ingest += ingest_rows(rank, table, source, 0, {reason: len(evs)})
            continue
        table, kind = target
        ts_col = times.time_column(list(map(_TS, evs)), path)
        dur_col = times.time_column(list(map(_DUR, evs)), path)
        mask: list[bool] | None = None  # None: the usual bucket, every event kept
        if times.complete(ts_col) and times.complete(dur_col) and times.nonnegative(dur_col):
            n_timed, good = len(evs), evs
        else:
            timed = [a and b for a, b in zip(times.present(ts_col), times.present(dur_col),
                                             strict=True)]
            n_timed = sum(timed)
            mask = [t and not n for t, n in zip(timed, times.negative(dur_col), strict=True)]
            good = evs if all(mask) else list(compress(evs, mask))
        picked[table] += good
        # one run of the bucket's kind (ranges_frame marks the ProfilerStep#N ranges)
        kinds[table] = kinds[table].extend_constant(kind, len(good))
        cols[table][0].append(ts_col if mask is None else times.take(ts_col, mask))
        cols[table][1].append(dur_col if mask is None else times.take(dur_col, mask))
        ingest += ingest_rows(rank, table, source, len(good),
                              {"missing ts or dur": len(evs) - n_timed,
                               "negative duration": n_timed - len(good)})

    args = {t: decode_args(evs, path) for t, evs in picked.items()}
    base = _int_or_none(raw_header.get("baseTimeNanoseconds")) or 0
    ts_cols = {t: times.concat(c[0]) for t, c in cols.items()}
    ns = not base and _looks_like_ns([times.head(c, 100) for c in ts_cols.values()])
    unit = "ns" if ns else "us"
    conv = {t: (times.to_ns(ts_cols[t], "ts", path, ns_units=ns),
                times.to_ns(times.concat(cols[t][1]), "dur", path, ns_units=ns))
            for t in picked}
    # each table's decoded args are dropped once its frame is built (the cpu_op args of a
    # DLRM x20 rank alone are ~28 MiB of dicts)
    gpu = gpu_frame(picked["gpu"], args.pop("gpu"), kinds["gpu"], conv["gpu"])
    api = api_frame(picked["api"], args.pop("api"), kinds["api"], conv["api"])
    ranges = ranges_frame(picked["ranges"], args["ranges"], kinds["ranges"], conv["ranges"])
    comm_rows, comm_args = _comm_ops(ranges, args.pop("ranges"))
    for f in (gpu, api, ranges):
        _check_range(f, base, path)
    gpu, api, ranges = (_to_epoch(f, base) for f in (gpu, api, ranges))
    recorded, trace_rows = _recorded_span(trace_evs, path, ns, base, rank)
    ingest += trace_rows
    memory = _memory(mem_events, mem_args,
                     times.to_ns(times.concat(mem_ts), "ts", path, ns_units=ns), base, path)

    gpu, api = join_ids(gpu, api)  # stream/event ids of stream waits and their records
    gpu = link_gpu(gpu, api)
    if comm_rows:
        rpc = _rpc_frame(comm_args)
        rpc_times = ranges[comm_rows].select("process_id", "thread_id", "start_ns", "end_ns")
        comms = rpc_times.hstack(rpc.select(pl.col("external_id").cast(pl.Int64), *COLL_COLS))
        gpu = attach_collectives(gpu, api, comms)
    stats = link_stats(gpu, api)
    gpu = by_launcher(gpu.with_columns(category_expr()), ranges)
    ranges = nesting_depth(ranges)
    ranges = ranges.with_columns(range_id=pl.int_range(pl.len(), dtype=pl.Int64))

    add_rank = pl.lit(rank, dtype=pl.Int32).alias("rank")
    devs, memory, alias = one_visible_gpu(device_frame(raw_header, rank), gpu, memory)
    tl = Timeline(
        gpu=schema.conform("gpu", gpu.with_columns(add_rank)),
        api=schema.conform("api", api.with_columns(add_rank)),
        ranges=schema.conform("ranges", ranges.with_columns(add_rank)),
        devices=devs,
        memory=schema.conform("memory", memory.with_columns(add_rank)),
        ingest=ingest_frame(ingest),
    )
    span = tl.span_ns()
    version = raw_header.get("schemaVersion")
    tl.sources = schema.conform("sources", pl.DataFrame([{
        "rank": rank, "file": path.name, "format": "kineto-json",
        "tool_version": None if version is None else f"kineto schema {version}",
        "format_version": None if version is None else str(version),
        "rank_source": rank_source,
        "start_ns": span[0] if span else None, "end_ns": span[1] if span else None,
        "recorded_start_ns": recorded[0] if recorded else None,
        "recorded_end_ns": recorded[1] if recorded else None,
    }], infer_schema_length=None))
    tl.meta = {
        "format": "kineto-json", "file": path.name, "rank": rank, "rank_source": rank_source,
        "world_size": _int_or_none(dist.get("world_size")),
        "backend": dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        "base_time_ns": base or None, "time_unit_in_file": unit,
        "events": len(events), "correlation_link": stats,
    }
    if alias:
        tl.meta["device_alias"] = alias
    driver = _driver(raw_header)
    if driver:
        tl.meta["driver_version"] = driver
    return tl.validate()


def _driver(header: dict[str, Any]) -> str | None:
    """The GPU driver the trace names: ``cuda_driver_version`` 13000 -> ``CUDA 13.0``
    (CUDA's encoding, 1000 x major + 10 x minor); ROCm's ``hip_driver_version`` as written."""
    cuda = _int_or_none(header.get("cuda_driver_version"))
    if cuda:
        return f"CUDA {cuda // 1000}.{cuda % 1000 // 10}"
    hip = _int_or_none(header.get("hip_driver_version"))
    return f"HIP {hip}" if hip else None


def _memory(events: list[Event], args: list[Any], ts_ns: pl.Series, base: int,
            path: Path) -> pl.DataFrame:
    """The ``memory`` rows of ``[memory]`` instants on the epoch clock (see
    :func:`~traceparse.kineto.events.memory_frame`)."""
    frame = memory_frame(events, args, ts_ns)
    if frame.height:
        lo, hi = frame.select(lo=pl.col("ts_ns").min(), hi=pl.col("ts_ns").max()).row(0)
        if int(lo) + base < -(2**63) or int(hi) + base >= 2**63:
            raise TraceError(path, "timestamps out of range: base time + ts does not fit "
                                   "in int64 nanoseconds")
    return frame.with_columns(pl.col("ts_ns") + base) if base else frame


def _looks_like_ns(samples: list[list[Any]]) -> bool:
    """True for traces whose ``ts`` are already nanoseconds (non-Kineto Chrome writers).

    Kineto always writes microseconds; an absolute ``ts`` above 1e17 can only be epoch ns
    (1e17 us is the year 5138), so such a file is read as ns. The first 100 kept events
    of each table (``samples``; the caller asks only when there is no base time) decide.
    """
    values = [float(v) for sample in samples for v in sample
              if isinstance(v, (int, float, str))
              and str(v).lstrip("-").replace(".", "", 1).isdigit()]
    return bool(values) and sorted(values)[len(values) // 2] > 1e17


def _check_range(frame: pl.DataFrame, base: int, path: Path) -> None:
    """Refuse times whose epoch ns (base + start, base + start + dur) leave int64; checked
    with Python integers from the column extremes, so nothing wraps silently."""
    if frame.height == 0:
        return
    lo, hi = frame.select(pl.col("start_ns").min().alias("lo"),
                          pl.col("start_ns").max().alias("hi")).row(0)
    dmax = frame["dur_ns"].max()
    if lo is None or hi is None:
        return
    top = int(hi) + base + max(int(dmax or 0), 0)  # type: ignore[arg-type]
    if int(lo) + base < -(2**63) or top >= 2**63:
        raise TraceError(path, "timestamps out of range: base time + ts + dur does not fit "
                               "in int64 nanoseconds")


def _recorded_span(evs: list[Event], path: Path, ns: bool, base: int, rank: int
                   ) -> tuple[tuple[int, int] | None, list[dict[str, Any]]]:
    """The profiler's recording span from the ``Trace`` events (``PyTorch Profiler (0)``:
    torch.profiler's start to its stop) on the file's epoch clock, and their ingest rows
    (table ``sources``)."""
    if not evs:
        return None, []
    ts = times.time_column(list(map(_TS, evs)), path)
    dur = times.time_column(list(map(_DUR, evs)), path)
    ok = [a and b for a, b in zip(times.present(ts), times.present(dur), strict=True)]
    ok = [o and not n for o, n in zip(ok, times.negative(dur), strict=True)]
    rows = ingest_rows(rank, "sources", "Trace", sum(ok),
                       {"missing ts or dur, or negative duration": len(evs) - sum(ok)})
    if not any(ok):
        return None, rows
    start = times.to_ns(times.take(ts, ok), "ts", path, ns_units=ns)
    end = start + times.to_ns(times.take(dur, ok), "dur", path, ns_units=ns)
    return (int(start.min()) + base, int(end.max()) + base), rows  # type: ignore[arg-type]


def _to_epoch(frame: pl.DataFrame, base: int) -> pl.DataFrame:
    if base:
        frame = frame.with_columns(pl.col(c) + base for c in ("start_ns", "end_ns"))
    return frame


def read(path: str | os.PathLike[str], *, rank: int | None = None,
         _fallback: tuple[int, str] = (0, "default"), decoder: str = "typed") -> Timeline:
    """Parse one Kineto trace (``.json``, ``.json.gz``, object or bare list).

    Args:
        path: the trace file.
        rank: force this rank (else ``distributedInfo.rank``, else the file name, else 0).
        decoder: ``"typed"`` (msgspec, :mod:`traceparse.kineto.decode`; times converted
            from their JSON text) or ``"orjson"`` (full decode of the document with the
            float/quoted-text time modes of :mod:`traceparse.kineto.io`, then reduced to
            the same events; slower, kept as the reference the typed path is tested
            against).

    Raises:
        TraceError: unreadable, truncated, not JSON, not a trace, or wrongly typed content.
    """
    p = Path(path)
    raw = read_bytes(p)
    # Decoding creates millions of small dicts; the cyclic GC would rescan them again and
    # again (4-5x slower). They hold no cycles, so it is paused while parsing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read(p, raw, rank, _fallback, decoder)
    except pl.exceptions.InvalidOperationError as exc:
        # a JSON integer out of range for its schema type (a pid of 2**40 read as the
        # device of a GPU annotation, Int32) fails the schema's strict cast
        raise wrong_values(p, exc) from None
    finally:
        if was_enabled:
            gc.enable()


def _read(p: Path, raw: bytes, rank: int | None, _fallback: tuple[int, str],
          decoder: str) -> Timeline:
    """:func:`read` once the file's bytes are in memory (the cyclic GC paused)."""
    if decoder != "orjson":
        # times stay their JSON text (exact, no quoting pass): decoded once
        header, events = decode_events(raw, p)
        return parse(header, events, p, rank=rank, rank_fallback=_fallback)
    # Absolute decimal timestamps: decode once with the times float64 cannot hold
    # quoted as text (no decode-reject-decode); a float the fast patterns missed
    # (odd spacing) raises NeedsDecimalText and every time is read as text.
    modes = ["big", "text"] if needs_decimal_text(raw) else ["us", "big", "text"]
    for i, mode in enumerate(modes):
        header, dicts = decode(raw, p, quote_times=mode == "text",
                               quote_big=mode == "big")
        events = from_dicts(dicts, p)
        del dicts
        try:
            return parse(header, events, p, rank=rank, rank_fallback=_fallback)
        except NeedsDecimalText:
            if i == len(modes) - 1:
                raise
            del header, events
    raise AssertionError("unreachable")
