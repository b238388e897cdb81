"""What the host was doing while the GPU had nothing queued: the host-activity classes.

The attribution's ``launch_overhead_ns`` is the GPU idle while the host was **issuing** the
next work. A launch call alone is the smallest part of that on a modern GPU: the host
thread also spends time in the framework ops that produce the next kernel (PyTorch
dispatch, Python between ops, the caching allocator). :func:`issuing_intervals` finds that
time from the trace's own host ranges:

* For every GPU activity launched by a non-blocking call ``c`` (a ``launch`` call of
  :func:`traceparse.analyses.attribution.classify_calls`), the host stretch from the end of
  the previous CUDA/HIP call on the same thread to ``c`` (clipped to the activity's start)
  is **issuing** when some host range of that thread (an op, a Python function, a user or
  NVTX range; never a ``ProfilerStep``) contains both calls: the thread went from one call
  to the next inside one unit of work that produces GPU work. Without such a range the
  stretch is not explained (the gap analysis calls it ``unknown``).
* Removed from it: **non-issuing** ranges of the thread, i.e. host ranges that are not
  framework ops (``cpu_op``: dispatch and allocation are part of issuing) and that contain
  no CUDA/HIP call, plus every range named as data loading (:data:`DATA_LOADING_RE`) or as
  the profiler's own code (:data:`PROFILER_RANGE_RE`), whatever it contains. These are
  "other CPU work", the input pipeline and profiler overhead, not issuing.

The launch windows themselves stay in the launch set; blocking calls and warm-up keep their
own parts (they are subtracted where they overlap an issuing stretch).

Data-loading evidence (:func:`is_data_loading`): a host range (not a framework op) named
like a data loader, ``__next__``, collate, prefetching, a dataset or sampler, or a user
range named for fetching or preparing batches/inputs; an OS-runtime call that reads a file
or a socket (:data:`IO_READ_RE`). Only with such evidence may a gap be called
``input_pipeline``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Host ranges that load or prepare input data (names, case-insensitive).
DATA_LOADING_RE = (r"(?i)data.?loader|_next_data|__next__|collate|prefetch|dataset|"
                   r"sampler|worker_loop|pin_memory_loop|data.?load|input.?pipeline|"
                   r"(^|[^a-z])(make|get|load|next|read|fetch|prepare)_?(batch|data|input|"
                   r"sample)(es|s)?([^a-z]|$)")
#: OS-runtime calls that read a file or a socket (nsys ``osrt`` ranges).
IO_READ_RE = r"^(read|pread64|pread|readv|preadv|fread|recv|recvfrom|recvmsg|open|open64|" \
             r"openat|openat64|fopen|fopen64|mmap|mmap64|stat|fstat|lstat)$"
#: Host ranges of the profiler's own code (torch.profiler's step(), its record ranges).
PROFILER_RANGE_RE = r"(?i)torch/(autograd/)?profiler|^\[?profiler\w*\]?$|cupti"
#: Range kinds that are not host work of a thread (or are handled elsewhere).
_NOT_HOST = ("gpu_user_annotation", "profiler_step", "nvtx_mark", "osrt", "cpu_sample",
             "profiler_overhead")
_THREAD = ["rank", "process_id", "thread_id"]


def is_data_loading(name: pl.Expr, kind: pl.Expr) -> pl.Expr:
    """Data-loading evidence of a host row (``name``, ``kind`` as strings): a non-op range
    named like data loading, or an OS-runtime read of a file or socket."""
    return (((kind != "cpu_op") & (kind != "osrt") & name.str.contains(DATA_LOADING_RE))
            | ((kind == "osrt") & name.str.contains(IO_READ_RE))).fill_null(False)


def host_ranges(tl: Timeline) -> pl.DataFrame:
    """Finished host ranges of threads (``rank, process_id, thread_id, kind, name,
    start_ns, end_ns``; kind and name as strings), profiler steps and GPU-side rows left
    out."""
    return cached(tl, "issuing_host_ranges", ("ranges",), lambda: (
        tl.ranges.filter(pl.col("end_ns").is_not_null() & pl.col("device_id").is_null()
                         & ~pl.col("kind").cast(pl.String).is_in(list(_NOT_HOST)))
        .select("rank", pl.col("process_id").fill_null(0), pl.col("thread_id").fill_null(0),
                pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String),
                "start_ns", "end_ns")))


def _calls(tl: Timeline) -> pl.DataFrame:
    """Finished CUDA/HIP calls by thread then start: ``rank, process_id, thread_id,
    start_ns, end_ns, _row`` (row in ``tl.api``)."""
    return (tl.api.with_row_index("_row")
            .filter(pl.col("end_ns").is_not_null() & pl.col("start_ns").is_not_null())
            .select("rank", pl.col("process_id").fill_null(0),
                    pl.col("thread_id").fill_null(0), "start_ns", "end_ns", "_row")
            .sort(*_THREAD, "start_ns"))


def non_issuing(tl: Timeline) -> pl.DataFrame:
    """Host ranges that are not issuing (module docstring): ``rank, process_id, thread_id,
    kind, name, start_ns, end_ns``."""
    return cached(tl, "non_issuing", ("api", "ranges"), lambda: _non_issuing(tl))


def _non_issuing(tl: Timeline) -> pl.DataFrame:
    r = host_ranges(tl)
    calls = _calls(tl)
    n_inside = np.zeros(r.height, np.int64)
    if r.height and calls.height:
        keys = r.select(_THREAD).unique()
        for key in keys.iter_rows(named=True):
            rm = r.select(*(pl.col(k) == v for k, v in key.items())).select(
                pl.all_horizontal(pl.all())).to_series().to_numpy()
            cm = calls.filter(*(pl.col(k) == v for k, v in key.items()))
            cs = cm["start_ns"].to_numpy()
            idx = np.flatnonzero(rm)
            lo = np.searchsorted(cs, r["start_ns"].to_numpy()[idx], side="left")
            hi = np.searchsorted(cs, r["end_ns"].to_numpy()[idx], side="left")
            n_inside[idx] = hi - lo
    named = (pl.col("name").str.contains(DATA_LOADING_RE)
             | pl.col("name").str.contains(PROFILER_RANGE_RE)).fill_null(False)
    return r.filter(((pl.Series(n_inside) == 0) & (pl.col("kind") != "cpu_op")) | named)


def issuing_stretches(tl: Timeline, group: Sequence[str], launched: pl.DataFrame,
                      not_issuing: pl.DataFrame, bounds: pl.Series) -> pl.DataFrame:
    """The issuing stretches (module docstring) per group: group columns, ``thread_id``,
    ``start_ns``, ``end_ns`` (merged per group and thread; non-issuing ranges removed).

    Args:
        tl: the timeline.
        group: the group columns.
        launched: the activities launched by a non-blocking call: group columns,
            ``start_ns`` (activity), ``api_start_ns`` and ``_row`` (the call's row in
            ``tl.api``); :func:`traceparse.analyses.attribution.issuing_intervals` builds it.
        not_issuing: :func:`non_issuing` copied to the groups (group columns,
            ``thread_id``, ``start_ns``, ``end_ns``).
        bounds: the rows of ``tl.api`` that end a stretch: the calls of GPU activities and
            the blocking calls (another call, e.g. ``cudaStreamIsCapturing`` or
            ``cudaEventRecord`` inside an op, is part of the issuing between them).
    """
    from traceparse.analyses import intervals

    group = list(group)
    schema: dict[str, pl.DataType] = {c: tl.gpu.schema[c] for c in group}
    schema.update({"thread_id": pl.Int64(), "start_ns": pl.Int64(), "end_ns": pl.Int64()})
    empty = pl.DataFrame(schema=schema)
    ranges = host_ranges(tl)
    if ranges.height == 0 or tl.api.height == 0 or launched.height == 0:
        return empty
    calls = _calls(tl).filter(pl.col("_row").is_in(bounds.implode()))
    # the previous call on the same thread (calls are sorted by thread, then start)
    same = pl.all_horizontal(*(pl.col(c) == pl.col(c).shift(1) for c in _THREAD))
    calls = calls.with_columns(
        pl.when(same).then(pl.col("start_ns").shift(1)).alias("_pstart"),
        pl.when(same).then(pl.col("end_ns").shift(1)).alias("_pend"))
    j = launched.join(calls.select(*_THREAD, "_row", "_pstart", "_pend",
                                   pl.col("end_ns").alias("_cend")), on="_row", how="inner")
    if j.height == 0:
        return empty
    # the time each stretch lies inside a range of the thread that contains the previous
    # call (its op still returning) or the launch (the op producing the next kernel)
    cover = _producing_cover(ranges, j)
    iv = j.with_columns(cover).select(*group, "thread_id", *_STRETCH_PIECES)
    iv = pl.concat([iv.select(*group, "thread_id", pl.col(s).alias("start_ns"),
                              pl.col(e).alias("end_ns")) for s, e in _PIECES]
                   ).filter(pl.col("end_ns") > pl.col("start_ns"))
    if iv.height == 0:
        return empty
    ni = not_issuing.select(*group, "thread_id", "start_ns", "end_ns")
    iv = intervals.subtract(iv, ni.cast(iv.schema), by=[*group, "thread_id"])
    return iv.cast(schema)  # type: ignore[arg-type]


#: The two pieces of a stretch (:func:`_producing_cover`): after the previous call, inside a
#: range containing it; before the launch, inside a range containing the launch.
_PIECES = (("_ps", "_pe"), ("_is", "_ie"))
_STRETCH_PIECES = ("_ps", "_pe", "_is", "_ie")


def _producing_cover(ranges: pl.DataFrame, j: pl.DataFrame) -> list[pl.Series]:
    """For each stretch of ``j`` (thread columns, ``_pstart``/``_pend`` of the previous
    call, null for a thread's first call; ``api_start_ns``/``_cend`` of the launch call;
    ``start_ns`` of the activity), the issuing time (the rule of the module docstring) as
    two pieces: ``[_ps, _pe)``, from the previous call's end to the latest end of a range
    of the thread containing that call, and ``[_is, _ie)``, from the earliest start of a
    range containing the launch call to the stretch's end (the launch, or the activity's
    start if earlier). Empty pieces have ``end <= start``.

    The ranges of one thread, sorted by start with ``reach`` the running maximum of their
    ends: a range containing the previous call exists when ``reach`` at the last range
    starting before it passes the call's end, and reaches that far; the ranges containing
    the launch start at the first range whose ``reach`` passes the launch's end (no
    nesting assumed)."""
    n = j.height
    stop = j.select(pl.min_horizontal("api_start_ns", "start_ns")).to_series().to_numpy()
    pend = j["_pend"].fill_null(np.iinfo(np.int64).min).to_numpy()
    pstart = j["_pstart"].fill_null(0).to_numpy()
    has_p = j["_pend"].is_not_null().to_numpy()
    cstart, cend = j["api_start_ns"].to_numpy(), j["_cend"].to_numpy()
    pe = np.full(n, np.iinfo(np.int64).min, np.int64)
    is_ = np.full(n, np.iinfo(np.int64).max, np.int64)
    for key in j.select(_THREAD).unique().iter_rows(named=True):
        idx = np.flatnonzero(j.select(pl.all_horizontal(
            *(pl.col(k) == v for k, v in key.items()))).to_series().to_numpy())
        rm = ranges.filter(*(pl.col(k) == v for k, v in key.items())).sort("start_ns")
        if rm.height == 0:
            continue
        rs = rm["start_ns"].to_numpy()
        reach = np.maximum.accumulate(rm["end_ns"].to_numpy())
        pi = idx[has_p[idx]]
        k = np.searchsorted(rs, pstart[pi], side="right") - 1
        pe[pi] = np.where(k >= 0, reach[np.maximum(k, 0)], pe[pi])
        k = np.searchsorted(reach, cend[idx], side="left")
        first = rs[np.minimum(k, rs.size - 1)]
        is_[idx] = np.where((k < rs.size) & (first <= cstart[idx]), first, is_[idx])
    lo = np.where(has_p, pend, 0)
    return [pl.Series("_ps", lo, pl.Int64),
            pl.Series("_pe", np.minimum(pe, stop), pl.Int64),
            pl.Series("_is", np.where(has_p, np.maximum(is_, pend), is_), pl.Int64),
            pl.Series("_ie", stop, pl.Int64)]


def subtract_host_parts(iv: pl.DataFrame, others: Sequence[pl.DataFrame],
                        group: Sequence[str]) -> pl.DataFrame:
    """``iv`` (group, ``start_ns``, ``end_ns``) minus the union of ``others`` per group."""
    from traceparse.analyses import intervals

    group = list(group)
    cols = [*group, "start_ns", "end_ns"]
    rest = [o.select(cols) for o in others if o.height]
    if not rest or iv.height == 0:
        return iv.select(cols)
    b = pl.concat([r.cast(iv.select(cols).schema) for r in rest])  # type: ignore[arg-type]
    return intervals.subtract(iv.select(cols), b, by=group)
