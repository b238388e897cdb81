"""Export a unified :class:`~traceparse.timeline.Timeline` as Chrome-trace JSON.

The output opens in the Perfetto UI (ui.perfetto.dev, "Open trace file") and in
``chrome://tracing``. Layout of the lanes:

* **GPU**: one process per (rank, device): ``pid = device_id`` for a single-rank timeline,
  ``pid = rank * 1000 + device_id`` when several ranks are present; ``tid = stream_id``
  (-1 when the source has no stream). ``process_name`` / ``thread_name`` metadata events
  name them ``"GPU 0"`` / ``"stream 7"`` (``"rank 1 GPU 0"`` with several ranks).
* **Host**: API calls and host ranges on ``pid = process_id``, ``tid = thread_id`` (the OS
  ids); when a source has no process id the lane is ``pid = 900000 + rank``.
  GPU-side ranges (``ranges.device_id`` set) go on their device's GPU process.
* **Attribution** (optional): per (rank, device) a thread ``"attribution"`` (``tid =
  -2``) on the GPU process holding one complete event per classified interval (compute,
  memory, communication, idle ...), when an interval frame is given.
* **Counters**: GPU metrics and device memory as counter tracks on the GPU processes
  (:mod:`traceparse.reports.chrome_counters`).
* **Flows** (optional, ``flows=True``): a flow arrow from each launching API call to the GPU
  activity with the same ``(rank, process_id, correlation_id)``.

Times: ``ts``/``dur`` are microseconds as the format requires, with nanosecond fractions
(``1234.567`` = 1,234,567 ns). They are relative to the earliest event of the timeline,
whose absolute nanosecond value is kept in ``otherData.base_ns``: epoch-based Kineto clocks
(~1.7e18 ns) would otherwise lose their nanoseconds in a double. ``round(ts * 1000) +
base_ns`` gives back the exact integer nanoseconds for any trace shorter than ~100 days.

The writer is vectorised: each table becomes one polars frame of event columns serialised
with polars' NDJSON writer (strings escaped there), then joined into one JSON array.
"""

from __future__ import annotations

import io
import os

import orjson
import polars as pl

from traceparse.atomic import write_bytes
from traceparse.reports.chrome_ids import (
    ATTRIBUTION_TID,
    HOST_PID_BASE,
    _div1000,
    _gpu_pid,
    _host_pid,
    _us,
)
from traceparse.timeline import Timeline


def _ndjson(frame: pl.DataFrame) -> str:
    """Frame rows as JSON objects, one per line; all-null columns are left out."""
    if frame.height == 0:
        return ""
    frame = frame.select([c for c in frame.columns if frame[c].null_count() < frame.height])
    buf = io.BytesIO()
    frame.write_ndjson(buf)
    return buf.getvalue().decode("utf-8").strip()


def _strip_nulls_args(frame: pl.DataFrame, cols: list[str]) -> pl.Expr:
    present = [c for c in cols if c in frame.columns and frame[c].null_count() < frame.height]
    if not present:
        return pl.lit(None, dtype=pl.Struct({"_": pl.Int8})).alias("args")
    return pl.struct([pl.col(c).cast(pl.String) if frame.schema[c] == pl.Categorical else
                      pl.col(c) for c in present]).alias("args")


def _gpu_events(tl: Timeline, base: int, multi: bool) -> pl.DataFrame:
    g = tl.gpu
    arg_cols = ["kind", "correlation_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                "block_z", "registers_per_thread", "bytes", "copy_kind", "src_kind", "dst_kind",
                "graph_id", "coll_name", "rank"]
    return g.sort("rank", "device_id", "stream_id", "start_ns", nulls_last=True).select(
        pl.col("name").cast(pl.String).alias("name"),
        pl.col("category").cast(pl.String).alias("cat"),
        pl.lit("X").alias("ph"),
        _us("start_ns", base).alias("ts"),
        _us("dur_ns").alias("dur"),
        _gpu_pid(multi).alias("pid"),
        pl.col("stream_id").fill_null(-1).alias("tid"),
        _strip_nulls_args(g, arg_cols),
    )


def _api_events(tl: Timeline, base: int) -> pl.DataFrame:
    a = tl.api
    return a.sort("rank", "process_id", "thread_id", "start_ns", nulls_last=True).select(
        pl.col("name").cast(pl.String).alias("name"),
        pl.concat_str(pl.lit("api_"), pl.col("kind").cast(pl.String)).alias("cat"),
        pl.lit("X").alias("ph"),
        _us("start_ns", base).alias("ts"),
        _us("dur_ns").alias("dur"),
        _host_pid().alias("pid"),
        pl.col("thread_id").fill_null(0).alias("tid"),
        _strip_nulls_args(a, ["correlation_id", "return_value", "rank"]),
    )


def _range_events(tl: Timeline, base: int, multi: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    r = tl.ranges
    on_gpu = pl.col("device_id").is_not_null()
    closed = pl.col("end_ns").is_not_null()
    frame = r.sort("rank", "process_id", "thread_id", "start_ns", nulls_last=True).select(
        pl.col("name").cast(pl.String).alias("name"),
        pl.col("kind").cast(pl.String).alias("cat"),
        pl.when(closed).then(pl.lit("X")).otherwise(pl.lit("i")).alias("ph"),
        _us("start_ns", base).alias("ts"),
        _us("dur_ns").alias("dur"),
        pl.when(on_gpu).then(_gpu_pid(multi)).otherwise(_host_pid()).alias("pid"),
        pl.when(on_gpu).then(pl.col("stream_id").fill_null(-1))
        .otherwise(pl.col("thread_id").fill_null(0)).alias("tid"),
        pl.lit("t").alias("s"),
        _strip_nulls_args(r, ["domain", "depth", "payload", "rank"]),
    )
    spans = frame.filter(pl.col("ph") == "X").drop("s")
    marks = frame.filter(pl.col("ph") == "i").drop("dur")
    return spans, marks


def _flow_events(tl: Timeline, base: int, multi: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Flow start on the API call, flow end (binding to the enclosing slice) on the GPU
    activity with the same (rank, process_id, correlation_id)."""
    keys = ["rank", "process_id", "correlation_id"]
    api = tl.api.filter(pl.col("correlation_id").is_not_null()).select(
        *keys, pl.col("start_ns").alias("api_start"), pl.col("thread_id"))
    gpu = tl.gpu.filter(pl.col("correlation_id").is_not_null()).select(
        *keys, "start_ns", "device_id", "stream_id")
    pairs = gpu.join(api, on=keys, how="inner").sort("rank", "device_id", "start_ns")
    if pairs.height == 0:
        return pl.DataFrame(), pl.DataFrame()
    pairs = pairs.with_row_index("id", offset=1)
    common = [pl.lit("launch").alias("name"), pl.lit("flow").alias("cat")]
    start = pairs.select(
        *common, pl.lit("s").alias("ph"), _us("api_start", base).alias("ts"),
        _host_pid().alias("pid"), pl.col("thread_id").fill_null(0).alias("tid"),
        pl.col("id").cast(pl.Int64))
    end = pairs.select(
        *common, pl.lit("f").alias("ph"), _us("start_ns", base).alias("ts"),
        _gpu_pid(multi).alias("pid"), pl.col("stream_id").fill_null(-1).alias("tid"),
        pl.col("id").cast(pl.Int64), pl.lit("e").alias("bp"))
    return start, end


def _attribution_events(intervals: pl.DataFrame, base: int, multi: bool) -> pl.DataFrame:
    return intervals.sort("rank", "device_id", "start_ns").select(
        pl.col("category").cast(pl.String).alias("name"),
        pl.lit("attribution").alias("cat"),
        pl.lit("X").alias("ph"),
        _us("start_ns", base).alias("ts"),
        (pl.col("end_ns") - pl.col("start_ns")).map_batches(_div1000, return_dtype=pl.Float64)
        .alias("dur"),
        _gpu_pid(multi).alias("pid"),
        pl.lit(ATTRIBUTION_TID, dtype=pl.Int64).alias("tid"),
    )


def _metadata(tl: Timeline, multi: bool, with_attribution: bool) -> list[dict[str, object]]:
    """process_name / thread_name / sort-index metadata events, sorted."""
    meta: list[dict[str, object]] = []
    gpu_lanes = pl.concat([
        tl.gpu.select("rank", "device_id", "stream_id"),
        tl.ranges.filter(pl.col("device_id").is_not_null()).select("rank", "device_id",
                                                                   "stream_id"),
    ]).unique().sort("rank", "device_id", "stream_id", nulls_last=True)
    seen: set[int] = set()
    for rank, dev, stream in gpu_lanes.iter_rows():
        pid = rank * 1000 + dev if multi else dev
        if pid not in seen:
            seen.add(pid)
            label = f"rank {rank} GPU {dev}" if multi else f"GPU {dev}"
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                         "args": {"name": label}})
            meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                         "args": {"sort_index": pid}})
            if with_attribution:
                meta.append({"ph": "M", "name": "thread_name", "pid": pid,
                             "tid": ATTRIBUTION_TID, "args": {"name": "attribution"}})
        tid = -1 if stream is None else stream
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                     "args": {"name": f"stream {stream}" if stream is not None else "stream ?"}})
    host = pl.concat([
        tl.api.select("rank", "process_id", "thread_id"),
        tl.ranges.filter(pl.col("device_id").is_null()).select("rank", "process_id",
                                                               "thread_id"),
    ]).unique().sort("rank", "process_id", "thread_id", nulls_last=True)
    seen_host: set[int] = set()
    for rank, proc, thread in host.iter_rows():
        pid = proc if proc is not None else HOST_PID_BASE + rank
        if pid not in seen_host:
            seen_host.add(pid)
            label = f"host pid {proc}" if proc is not None else "host"
            if multi:
                label = f"rank {rank} {label}"
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                         "args": {"name": label}})
            meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                         "args": {"sort_index": 10_000_000 + (proc or 0)}})
        meta.append({"ph": "M", "name": "thread_name", "pid": pid,
                     "tid": thread if thread is not None else 0,
                     "args": {"name": f"thread {thread}" if thread is not None else "thread"}})
    return meta


def attribution_intervals(tl: Timeline) -> pl.DataFrame:
    """Each device's window cut into classified intervals for the attribution lane.

    Uses :mod:`traceparse.analyses.attribution`'s definitions (busy activities, launch windows,
    window =
    first to last busy activity) and its priority compute > communication > memory >
    launch overhead > warm-up > host sync > idle; adjacent intervals of one category are
    merged. Per (rank,
    device) the interval lengths of each category sum to the matching ``breakdown`` part
    (tested).

    Returns:
        ``rank``, ``device_id``, ``start_ns``, ``end_ns``, ``category`` (compute,
        communication, memory, launch_overhead, warmup, host_sync, idle), sorted.
    """
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import busy_activities, host_sets, part_expr

    group = ["rank", "device_id"]
    acts = busy_activities(tl)
    if acts.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "device_id": pl.Int32,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64,
                                    "category": pl.String})
    wins = acts.group_by(group).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    sets = {"_win": wins}
    for label, frame in host_sets(tl, acts, group).items():
        f = frame.join(wins.rename({"start_ns": "_ws", "end_ns": "_we"}), on=group)
        sets[label] = (f.select(*group, pl.max_horizontal("start_ns", "_ws").alias("start_ns"),
                                pl.min_horizontal("end_ns", "_we").alias("end_ns"))
                       .filter(pl.col("end_ns") > pl.col("start_ns")))
    for cat in ("compute", "communication", "memory"):
        sets[cat] = acts.filter(pl.col("category") == cat).select(*group, "start_ns", "end_ns")
    seg = intervals.segments(sets, by=group).filter(pl.col("_win") > 0)
    cat_expr = part_expr().str.strip_suffix("_ns")
    seg = seg.select(*group, "start_ns", "end_ns", cat_expr.alias("category")) \
        .sort(*group, "start_ns")
    # merge runs of the same category that touch
    new_run = ((pl.col("category") != pl.col("category").shift(1).over(group))
               | (pl.col("start_ns") != pl.col("end_ns").shift(1).over(group))
               | pl.col("category").shift(1).over(group).is_null())
    return (seg.with_columns(new_run.cum_sum().over(group).alias("_run"))
            .group_by(*group, "_run", "category")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
            .select(*group, "start_ns", "end_ns", "category").sort(*group, "start_ns"))


def to_chrome(tl: Timeline, *, attribution: pl.DataFrame | None = None,
              flows: bool = True) -> bytes:
    """Serialise ``tl`` as a Chrome-trace JSON object (UTF-8 bytes).

    Args:
        tl: the unified timeline (one or many ranks).
        attribution: optional frame of classified GPU intervals with columns ``rank``,
            ``device_id``, ``start_ns``, ``end_ns``, ``category``; drawn as an
            ``attribution`` thread on each GPU process.
        flows: add launch -> kernel flow arrows where correlation ids link them.

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}`` as bytes.
        Metadata events come first, then GPU activities, API calls, ranges, attribution
        and flows, each sorted by lane and start time, so the same timeline always gives
        the same bytes.

    Example:
        >>> import polars as pl
        >>> from traceparse import schema
        >>> g = schema.conform("gpu", pl.DataFrame({"rank": [0], "kind": ["kernel"],
        ...     "category": ["compute"], "start_ns": [1000], "end_ns": [2500],
        ...     "dur_ns": [1500], "device_id": [0], "stream_id": [7], "name": ["k"]}))
        >>> doc = orjson.loads(to_chrome(Timeline(gpu=g)))
        >>> [e for e in doc["traceEvents"] if e["ph"] == "X"][0]["dur"]
        1.5
    """
    span = tl.span_ns()
    base = span[0] if span else 0
    # counter samples may begin before the first activity (nsys samples from session start)
    firsts = [int(f.select(pl.col(c).min()).item()) for f, c in
              ((tl.metrics, "start_ns"), (tl.memory, "ts_ns")) if f.height]
    base = min([base, *firsts]) if span else min(firsts, default=0)
    ranks = set(tl.gpu["rank"].unique().to_list()) | set(tl.api["rank"].unique().to_list()) \
        | set(tl.ranges["rank"].unique().to_list())
    multi = len(ranks) > 1
    with_attr = attribution is not None and attribution.height > 0
    meta = _metadata(tl, multi, with_attr)
    parts = ["\n".join(orjson.dumps(m, option=orjson.OPT_SORT_KEYS).decode() for m in meta)]
    parts.append(_ndjson(_gpu_events(tl, base, multi)))
    parts.append(_ndjson(_api_events(tl, base)))
    parts.extend(_ndjson(f) for f in _range_events(tl, base, multi))
    if with_attr and attribution is not None:
        parts.append(_ndjson(_attribution_events(attribution, base, multi)))
    if flows:
        parts.extend(_ndjson(f) for f in _flow_events(tl, base, multi))
    from traceparse.reports.chrome_counters import memory_counters, metric_counters

    parts += [_ndjson(metric_counters(tl, base, multi)), _ndjson(memory_counters(tl, base, multi))]
    body = ",\n".join(p.replace("\n", ",\n") for p in parts if p)
    other = orjson.dumps({"base_ns": base, "producer": "traceparse",
                          "ranks": sorted(ranks)}, option=orjson.OPT_SORT_KEYS).decode()
    text = ('{"displayTimeUnit":"ns","otherData":' + other + ',"traceEvents":[\n' + body
            + "\n]}\n")
    return text.encode("utf-8")


def write_chrome(tl: Timeline, path: str | os.PathLike[str], *, flows: bool = True) -> int:
    """Write ``tl`` as Chrome-trace JSON at ``path`` (atomically), with the attribution
    lane; return the number of bytes written."""
    data = to_chrome(tl, attribution=attribution_intervals(tl), flows=flows)
    write_bytes(path, data)
    return len(data)
