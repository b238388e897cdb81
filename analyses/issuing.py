"""What the host was doing while the GPU had nothing queued: the host-activity classes.

The attribution's ``launch_overhead_ns`` is the GPU idle while the host was **issuing** the
next work. A launch call alone is the smallest part of that on a modern GPU: the host
thread also spends time in the framework ops that produce the next kernel (PyTorch
dispatch, the caching allocator, Python inside a traced function).
:func:`issuing_stretches` finds that time from the trace's own host ranges:

* For every GPU activity launched by a non-blocking call ``c`` (a ``launch`` call of
  :func:`traceparse.analyses.attribution.classify_calls`), the *stretch* runs from the end
  of the thread's previous call ``p`` that launched GPU work or waited (other CUDA calls on
  the way, e.g. ``cudaStreamIsCapturing`` or ``cudaEventRecord`` inside an op, are part of
  the issuing) to ``c`` (clipped to the activity's start). Its **issuing** time is where
  the thread is inside a host range (an op, a Python function, a user or NVTX range; never
  a ``ProfilerStep``) that contains ``c``: the ops producing the next kernel (dispatch, the
  allocator, the launch's own checks). Time inside no such range (Python between two
  top-level ops, the tail of the op that issued the previous kernel, the autograd engine
  handing over to its thread) is not explained: it stays idle (the gap analysis calls it
  ``unknown`` unless something else covers it). A range containing both ``p`` and ``c``
  makes the whole stretch issuing.
* **Unrecorded dispatch** (:func:`_unrecorded`): the part of a stretch outside every
  recorded host range of the thread is issuing too when the thread records its framework
  ops (``cpu_op``), the previous bounding call was a launch (not a wait), both calls lie
  in one ``ProfilerStep``, no other thread of the process made a bounding call during it
  and no non-issuing range overlaps it: the Python between two ops of a step, in a trace
  recorded without ``with_stack`` (docs/analyses.md says why and its limits).
* Removed from it: **non-issuing** ranges of the thread, i.e. host ranges that are not
  framework ops (``cpu_op``: dispatch and allocation are part of issuing) and that contain
  no CUDA/HIP call, every range named as the profiler's own code
  (:data:`PROFILER_RANGE_RE`), whatever it contains, and every range named as data loading
  (:data:`DATA_LOADING_RE`) less the issuing-capable ranges nested in it (innermost wins:
  :func:`_innermost_wins`). These are "other CPU work", the input pipeline and profiler
  overhead, not issuing.

This is the one definition of issuing: the attribution's ``launch_overhead_ns`` is the GPU
idle while it holds, the gap causes call a gap ``issuing`` when at least half of it is that
part (:func:`traceparse.analyses.gaps.is_issuing`), the verdict, the steps table and the
CUDA-graph and fusion fixes read the same intervals (docs/analyses.md, "Issuing time").

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
                   r"utils/data/|(batch|random|sequential|distributed|weighted_?random|subset_?random)_?sampler|"
                   r"worker_loop|pin_memory_loop|data.?load|input.?pipeline|"
                   r"(^|[^a-z])(make|get|load|next|read|fetch|prepare)_?(batch|data|input|"
                   r"sample)(es|s)?([^a-z]|$)")
#: OS-runtime calls that read a file or a socket (nsys ``osrt`` ranges).
IO_READ_RE = r"^(read|pread64|pread|readv|preadv|fread|recv|recvfrom|recvmsg|open|open64|" \
             r"openat|openat64|fopen|fopen64|mmap|mmap64|stat|fstat|lstat)$"
#: Host ranges of the profiler's own code (torch.profiler's step(), its record ranges).
PROFILER_RANGE_RE = r"(?i)torch/(autograd/)?profiler|^\[?profiler\w*\]?$|cupti"
#: The cause name of an issuing gap no recorded range or call overlaps (unrecorded
#: dispatch only, :func:`_unrecorded`).
UNRECORDED_NAME = "unrecorded dispatch"
#: Range kinds that are not host work of a thread (or are handled elsewhere).
_NOT_HOST = ("gpu_user_annotation", "profiler_step", "nvtx_mark", "osrt", "cpu_sample",
             "profiler_overhead")
_THREAD = ["rank", "process_id", "thread_id"]


def loading_range(name: pl.Expr, kind: pl.Expr) -> pl.Expr:
    """A host range (``name``, ``kind`` as strings) named like data loading that is not a
    framework op. A framework op's name holds its namespace (``aten::``, ``c10d::``); a
    ``record_function`` range has none, and profilers before 2022 recorded those ranges as
    ops too (every CPU range of ``kineto__resnet50_worker0`` is ``"cat": "Operator"``, its
    ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` among them)."""
    op = (kind == "cpu_op") & name.str.contains("::")
    return (~op & (kind != "osrt") & name.str.contains(DATA_LOADING_RE)).fill_null(False)


def is_data_loading(name: pl.Expr, kind: pl.Expr) -> pl.Expr:
    """Data-loading evidence of a host row (``name``, ``kind`` as strings): a range named
    like data loading (:func:`loading_range`), or an OS-runtime read of a file or socket."""
    return (loading_range(name, kind)
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
    # the columns kept, selected before the filter copies them (every api column of every
    # call was copied: ~1.1 GB at 13M calls)
    return (tl.api.select("rank", pl.col("process_id").fill_null(0),
                          pl.col("thread_id").fill_null(0), "start_ns", "end_ns")
            .with_row_index("_row")
            .filter(pl.col("end_ns").is_not_null() & pl.col("start_ns").is_not_null())
            .select(*_THREAD, "start_ns", "end_ns", "_row")
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
    loading = pl.col("name").str.contains(DATA_LOADING_RE).fill_null(False)
    prof = pl.col("name").str.contains(PROFILER_RANGE_RE).fill_null(False)
    idle_kind = (pl.Series(n_inside) == 0) & (pl.col("kind") != "cpu_op")
    r = r.with_columns(idle_kind.alias("_idle"), loading.alias("_dl"), prof.alias("_pr"))
    out = r.filter(pl.col("_idle") | pl.col("_pr") | pl.col("_dl"))
    return _innermost_wins(r, out).drop("_idle", "_dl", "_pr")


def _innermost_wins(r: pl.DataFrame, out: pl.DataFrame) -> pl.DataFrame:
    """A data-loading range explains its thread's time only where no range nested inside it
    does: an op or a function that issues CUDA work inside it (a ``.to(device)``, or the
    training step run from a generator's frame, which torch.profiler's Python tracer keeps
    open across ``yield``) classifies its own time. The data-loading ranges of ``out`` are
    replaced by their union per thread less the issuing-capable ranges (those not in
    ``out``) nested in it; the pieces keep the name of the first data-loading range."""
    from traceparse.analyses import intervals

    is_dl = pl.col("_dl") & ~pl.col("_pr") & ~pl.col("_idle")
    dl = out.filter(is_dl)
    inner = r.filter(~pl.col("_idle") & ~pl.col("_dl") & ~pl.col("_pr"))
    if dl.height == 0 or inner.height == 0:
        return out
    u = intervals.union(dl.select(*_THREAD, "start_ns", "end_ns"), by=_THREAD)
    cand = (inner.select(*_THREAD, "start_ns", "end_ns")
            .join(dl.select(*_THREAD, "start_ns", "end_ns"), on=[*_THREAD, "start_ns", "end_ns"],
                  how="anti").sort("start_ns"))
    hit = (cand.join_asof(u.select(*_THREAD, pl.col("start_ns").alias("_us"),
                                   pl.col("end_ns").alias("_ue")).sort("_us"),
                          left_on="start_ns", right_on="_us", by=_THREAD, strategy="backward",
                          check_sortedness=False)
           .filter(pl.col("_ue").is_not_null() & (pl.col("end_ns") <= pl.col("_ue"))))
    if hit.height == 0:
        return out
    pieces = intervals.subtract(u, hit.select(*_THREAD, "start_ns", "end_ns"), by=_THREAD)
    first = dl.sort("start_ns").group_by(_THREAD).agg(pl.col("kind", "name").first())
    cut = pieces.join(first, on=_THREAD).with_columns(
        pl.lit(True).alias("_dl"), pl.lit(False).alias("_pr"), pl.lit(False).alias("_idle"))
    return pl.concat([out.filter(~is_dl), cut.select(out.columns).cast(out.schema)])  # type: ignore[arg-type]


def issuing_stretches(tl: Timeline, group: Sequence[str], launched: pl.DataFrame,
                      not_issuing: pl.DataFrame, bounds: pl.Series,
                      blocking: pl.Series | None = None) -> pl.DataFrame:
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
        blocking: the rows of ``bounds`` that wait (blocking calls): a stretch after one
            has no unrecorded dispatch (:func:`_unrecorded`).
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
    blk = pl.col("_row").is_in(blocking.implode()) if blocking is not None else pl.lit(False)
    calls = calls.with_columns(pl.when(same).then(pl.col("end_ns").shift(1)).alias("_pend"),
                               pl.when(same).then(blk.shift(1)).alias("_pblk"))
    j = launched.join(calls.select(*_THREAD, "_row", "_pend", "_pblk",
                                   pl.col("end_ns").alias("_cend")), on="_row", how="inner")
    if j.height == 0:
        return empty
    # the time each stretch lies inside a range of the thread that contains the launch
    iv = (j.select(*group, "thread_id", _producing_start(ranges, j).alias("start_ns"),
                   pl.min_horizontal("api_start_ns", "start_ns").alias("end_ns"))
          .filter(pl.col("end_ns") > pl.col("start_ns")))
    un = _unrecorded(tl, ranges, calls, j, group)
    if un.height:
        iv = intervals.union(pl.concat([iv, un.cast(iv.schema)]),  # type: ignore[arg-type]
                             by=[*group, "thread_id"])
    if iv.height == 0:
        return empty
    ni = not_issuing.select(*group, "thread_id", "start_ns", "end_ns")
    iv = intervals.subtract(iv, ni.cast(iv.schema), by=[*group, "thread_id"])
    return iv.cast(schema)  # type: ignore[arg-type]


def _unrecorded(tl: Timeline, ranges: pl.DataFrame, calls: pl.DataFrame, j: pl.DataFrame,
                group: Sequence[str]) -> pl.DataFrame:
    """Unrecorded dispatch (module docstring): for each stretch of ``j`` (launches with the
    previous bounding call ``_pend``/``_pblk`` of their thread) the part outside every
    recorded host range of the thread, when the stretch is one of a step's dispatch loop:
    its thread records framework ops (``cpu_op``), the previous bounding call was a launch
    (not a wait), both lie in one ``ProfilerStep``, no other thread of the process made a
    bounding call in it and no non-issuing range of the thread overlaps it. Group columns,
    ``thread_id``, ``start_ns``, ``end_ns``."""
    from traceparse.analyses import intervals

    group = list(group)
    steps = tl.ranges.filter((pl.col("kind").cast(pl.String) == "profiler_step")
                             & pl.col("end_ns").is_not_null())
    ops = ranges.filter(pl.col("kind") == "cpu_op").select(_THREAD).unique()
    cand = (j.with_row_index("_id").join(ops, on=_THREAD, how="semi")
            .filter(pl.col("_pend").is_not_null() & ~pl.col("_pblk").fill_null(True))
            .select("_id", *group, *(c for c in _THREAD if c not in group),
                    pl.col("_pend").alias("start_ns"),
                    pl.min_horizontal("api_start_ns", "start_ns").alias("end_ns"))
            .filter(pl.col("end_ns") > pl.col("start_ns")))
    if cand.height == 0 or steps.height == 0:
        return pl.DataFrame(schema={**{c: j.schema[c] for c in group},
                                    "thread_id": pl.Int64, "start_ns": pl.Int64,
                                    "end_ns": pl.Int64})
    a, b = cand["start_ns"].to_numpy(), cand["end_ns"].to_numpy()
    ok = np.zeros(cand.height, bool)
    for (rank,), st in steps.group_by(["rank"]):
        st = st.sort("start_ns")
        ss, se = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
        i = np.flatnonzero(cand["rank"].to_numpy() == rank)
        k = np.searchsorted(ss, a[i], side="right") - 1
        kk = np.maximum(k, 0)
        ok[i] = (k >= 0) & (b[i] <= se[kk]) & (a[i] >= ss[kk])
    # no other thread of the process made a bounding call during the stretch (it was
    # waiting on, or handing over to, that thread: not this thread's dispatch)
    proc = ["rank", "process_id"]
    for key, cm in calls.group_by(proc):
        i = np.flatnonzero(cand.select(pl.all_horizontal(
            *(pl.col(c) == v for c, v in zip(proc, key, strict=True)))).to_series().to_numpy())
        cs = np.sort(cm["start_ns"].to_numpy())
        ok[i] &= np.searchsorted(cs, b[i], side="left") == np.searchsorted(cs, a[i],
                                                                           side="left")
    # no non-issuing range (data loading, the profiler's code, user ranges that issue
    # nothing) overlaps it
    ni = non_issuing(tl)
    for key, nm in ni.group_by(_THREAD):
        i = np.flatnonzero(cand.select(pl.all_horizontal(
            *(pl.col(c) == v for c, v in zip(_THREAD, key, strict=True)))).to_series().to_numpy())
        if i.size == 0:
            continue
        nm = nm.sort("start_ns")
        reach = np.maximum.accumulate(nm["end_ns"].to_numpy())
        k = np.searchsorted(nm["start_ns"].to_numpy(), b[i], side="left") - 1
        ok[i] &= ~((k >= 0) & (reach[np.maximum(k, 0)] > a[i]))
    cand = cand.filter(pl.Series(ok))
    if cand.height == 0:
        return cand.select(*group, "thread_id", "start_ns", "end_ns")
    # the part of it outside every recorded range of the thread
    rec = ranges.join(cand.select(*group, *(c for c in _THREAD if c not in group)).unique(),
                      on=_THREAD, how="inner")
    return intervals.subtract(cand.select(*group, "thread_id", "start_ns", "end_ns"),
                              rec.select(*group, "thread_id", "start_ns", "end_ns"),
                              by=[*group, "thread_id"])


def _producing_start(ranges: pl.DataFrame, j: pl.DataFrame) -> pl.Series:
    """For each stretch of ``j`` (thread columns, ``_pend``: the previous bounding call's
    end, null for a thread's first; ``api_start_ns``/``_cend``: the launch call), where its
    issuing begins: the earliest start of a range of the thread containing the launch call,
    or the previous call's end if later (the maximum int64 when no range contains it).

    With the thread's ranges sorted by start and ``reach`` the running maximum of their
    ends, the ranges containing the call start at the first range whose ``reach`` passes
    the call's end, if that range starts before the call (no nesting assumed)."""
    big = np.iinfo(np.int64).max
    out = np.full(j.height, big, np.int64)
    cstart, cend = j["api_start_ns"].to_numpy(), j["_cend"].to_numpy()
    for key in j.select(_THREAD).unique().iter_rows(named=True):
        idx = np.flatnonzero(j.select(pl.all_horizontal(
            *(pl.col(k) == v for k, v in key.items()))).to_series().to_numpy())
        rm = ranges.filter(*(pl.col(k) == v for k, v in key.items())).sort("start_ns")
        if rm.height == 0:
            continue
        rs = rm["start_ns"].to_numpy()
        reach = np.maximum.accumulate(rm["end_ns"].to_numpy())
        k = np.searchsorted(reach, cend[idx], side="left")
        first = rs[np.minimum(k, rs.size - 1)]
        out[idx] = np.where((k < rs.size) & (first <= cstart[idx]), first, big)
    pend = j["_pend"].fill_null(np.iinfo(np.int64).min).to_numpy()
    return pl.Series("start_ns", np.maximum(out, pend), pl.Int64)


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


def unrecorded_ns(tl: Timeline, frame: pl.DataFrame) -> pl.Series:
    """Per row of ``frame`` (``rank``, ``thread_id``, ``start_ns``, ``end_ns``): the time of
    ``[start_ns, end_ns)`` that lies in no recorded host range of that thread (the
    unrecorded part of a gap, :func:`_unrecorded`)."""
    from traceparse.analyses import intervals

    keys = ["rank", "thread_id"]
    f = frame.select(*keys, "start_ns", "end_ns").with_row_index("_k")
    r = host_ranges(tl).join(f.select(*keys).unique(), on=keys, how="semi")
    cov = intervals.intersect(f.select("_k", "start_ns", "end_ns"),
                              f.select("_k", *keys).join(r.select(*keys, "start_ns", "end_ns"),
                                                         on=keys).drop(keys), by=["_k"])
    got = cov.group_by("_k").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("_c"))
    out = f.join(got, on="_k", how="left").sort("_k")
    return (out["end_ns"] - out["start_ns"] - out["_c"].fill_null(0)).alias("unrecorded_ns")

