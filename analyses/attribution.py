"""Time attribution: where did each device's wall time go?

:func:`breakdown` splits a time window of every (rank, device) into five parts that sum to the
window **to the nanosecond**:

``compute_ns``
    Some compute kernel (category ``compute``) was running on any stream.
``communication_ns``
    *Exposed* communication: a communication activity (NCCL/RCCL kernel or peer copy) ran and
    no compute kernel did. Communication hidden under compute is reported separately as
    ``overlapped_comm_ns`` (it is already inside ``compute_ns``), and
    ``comm_overlap_pct = overlapped / (overlapped + exposed) * 100`` (null without comm).
``memory_ns``
    A memcpy/memset ran and neither compute nor communication did.
``launch_overhead_ns``
    Nothing ran on the device while the host was *issuing* work of this device: inside a
    non-blocking launch call (kernel launch, async copy between device and pinned memory,
    graph launch, ...) of an activity that had not started yet. An activity's *launch
    window* is ``[api.start_ns, min(api.end_ns, activity.start_ns))``, the API call found by
    joining ``gpu`` to ``api`` on ``(rank, process_id, correlation_id)``; activities without
    a matching call have no launch window. Queueing latency after the call returned, with no
    other launch in flight, is idle. A call that *waits* is host synchronisation, a first
    launch that loads a module is warm-up (below). Plus the host's **issuing stretches**
    (:func:`issuing_intervals`; the one rule, :mod:`traceparse.analyses.issuing`, which the
    gap causes read through this part): the launching thread inside a host range that
    contains its next launch (the ops producing the work). Neither while a stream held
    issued work back behind an event wait (as for host sync below).
``warmup_ns``
    Nothing ran and no launch was in flight while the host was warming up (see
    :func:`warmup_intervals` and :mod:`traceparse.analyses.warmup`): in a module-load / link /
    runtime-compile call, a compile or autotune range, a compiler process the launching
    thread spawned or waited for, a CUPTI lazy-loading record, the first call of an op and
    shape that cost many times the op's median, or in the first launch call of a kernel
    name on its process when that call lasted at least :data:`LAZY_LOAD_MIN_NS` and ten
    times the process's median launch call (lazy loading). Reported apart from steady state.
``host_sync_ns``
    Nothing ran, nothing was being issued and no warm-up was under way while a thread of a
    process with work on this device sat in a call that **waits** (see
    :func:`blocking_intervals`), except while a stream of the device held issued work back
    behind an event wait (:mod:`traceparse.analyses.streamwait`: that time is the stream's
    wait, left to ``idle_ns`` and named ``stream_wait`` by the gaps):
    ``cuda{Device,Stream,Event,Ctx}Synchronize``, synchronous
    ``cudaMemcpy*``, a ``cudaMemcpyAsync`` to or from pageable memory, a copy call that
    returned only after its copy had finished, ``cudaMalloc``/``cudaFree`` (implicit
    device syncs: only while work was in flight, :mod:`traceparse.analyses.waiting`; the
    rest of an allocation is the allocator's own work, idle with cause ``cuda_api``), and
    their ``cu*``/``hip*`` twins. Never launch overhead.
``idle_ns``
    The rest: nothing ran and the host was not issuing, warming up or blocked (CPU work,
    data loading, ...; :func:`traceparse.analyses.gaps.idle_gaps` explains the stretches).

Priority where streams overlap (each nanosecond goes to the first that applies):
**compute > communication > memory > launch overhead > warm-up > host sync > idle**.
Activities of kind ``sync`` (host waits recorded on a GPU lane) are never busy time and never
define a window.

The window is, by default, the first start to the last end of the non-sync activities of the
group; pass ``window=(start_ns, end_ns)`` for a fixed window (the same for every group), or use
:func:`breakdown_windows` with :func:`traceparse.analyses.steps.range_windows` to get one row per
step or NVTX range.

Example (one device, a 100 ns kernel, a 50 ns gap whose second half the next launch call was
in flight, then a 30 ns copy)::

    gpu:  kernel [0, 100)   memcpy [150, 180)      api of the memcpy: [125, 140)
    ->    window 180 = compute 100 + memory 30 + launch_overhead 15 + idle 35

and if the memcpy's call were a synchronous ``cudaMemcpy`` [60, 185) instead, the 50 ns gap
would be host synchronisation: ``compute 100 + memory 30 + host_sync 50``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse import links
from traceparse.analyses import intervals, sweep
from traceparse.analyses import warmup as _warmup
from traceparse.analyses.callparts import STATE_SLOT, call_parts
from traceparse.analyses.hostrows import distinct_rows, name_matches, per_group
from traceparse.analyses.waiting import ALLOC_API_RE, waiting_parts
from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Attribution parts in priority order (first wins where they overlap).
PARTS = ("compute_ns", "communication_ns", "memory_ns", "launch_overhead_ns", "warmup_ns",
         "host_sync_ns", "idle_ns")
#: Host calls that wait for the GPU (or for an implicit device synchronisation).
BLOCKING_API_RE = (r"^(cuda|cu|hip)(Device|Stream|Event|Ctx|Thread)Synchroni[sz]e(_v\d+)*$"
                   r"|^(cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|cudaMemcpyToSymbol|"
                   r"cudaMemcpyFromSymbol|cudaMemcpyPeer|cuMemcpy|cuMemcpyDtoH|cuMemcpyHtoD|"
                   r"cuMemcpyDtoD|cuMemcpy2D|cuMemcpy3D|hipMemcpy|hipMemcpy2D|hipMemcpyDtoH|"
                   r"hipMemcpyHtoD|hipMemcpyDtoD|hipMemcpyWithStream)(_v\d+)*$"
                   r"|" + ALLOC_API_RE)
#: Module load and runtime compilation calls, compile ranges (warm-up): see
#: :mod:`traceparse.analyses.warmup`, which finds every warm-up signal.
WARMUP_API_RE = _warmup.WARMUP_API_RE
WARMUP_RANGE_RE = _warmup.WARMUP_RANGE_RE
#: A first launch of a kernel name is lazy loading when it lasts at least this long (and
#: ten times the process's median launch call).
LAZY_LOAD_MIN_NS = 100_000
DEFAULT_GROUP = ("rank", "device_id")


class AttributionError(AssertionError):
    """An attribution row whose parts do not sum to its window (a bug, not bad input)."""


def busy_activities(tl: Timeline) -> pl.DataFrame:
    """GPU activities that count as busy time: every row whose category is not ``sync``,
    with ``category`` as a plain string. Computed once per timeline (the same frame object
    for every caller, :func:`traceparse.derived.cached`)."""
    return cached(tl, "busy_activities", ("gpu",), lambda: (
        tl.gpu.filter(pl.col("category") != "sync")
        .with_columns(pl.col("category").cast(pl.String))))


#: The values of ``call_part`` (:func:`classify_calls`), one byte a row.
CALL_PART = pl.Enum(["host_sync", "warmup", "launch"])


def classify_calls(tl: Timeline, acts: pl.DataFrame | None = None, *,
                   columns: Sequence[str] | None = None) -> pl.DataFrame:
    """Each GPU activity of ``acts`` (default :func:`busy_activities`) joined to its call in
    ``tl.api`` on ``(rank, process_id, correlation_id)`` (API rows duplicated on that key
    keep the first in file order: :func:`traceparse.links.launch_links`'s
    ``api_row_file``), with ``call_name``, ``api_start_ns``, ``api_end_ns`` and
    ``call_part``: ``host_sync`` (the call waits: :data:`BLOCKING_API_RE`, or a copy to or
    from pageable memory), ``warmup`` (the first launch of the activity's name on its
    process lasted at least :data:`LAZY_LOAD_MIN_NS` and ten times the process's median
    non-blocking call: lazy module loading) or ``launch`` (issuing work). Activities
    without a call are left out; the rows keep ``acts``' order. ``call_name`` has the
    dtype of ``tl.api``'s ``name`` (Categorical: codes, not strings) and ``call_part`` is
    the Enum :data:`CALL_PART`.

    For the default activities the classification is computed once per timeline and
    shared by every analysis of the command (breakdown, gaps, savings, replay).
    ``columns``: keep only these columns of ``acts`` (a narrow result is cheaper)."""
    busy = busy_activities(tl)
    if acts is None or acts is busy:
        calls = cached(tl, "classify_calls", ("gpu", "api"), lambda: _classify(tl, busy, True))
    else:
        calls = _classify(tl, acts, False)
    rows = busy if acts is None else acts
    if columns is not None:
        rows = rows.select(list(dict.fromkeys(columns)))
    return pl.concat([rows[calls["_b"]], calls.drop("_b")], how="horizontal")


def _classify(tl: Timeline, acts: pl.DataFrame, busy: bool) -> pl.DataFrame:
    """:func:`classify_calls` of ``acts`` as ``_b`` (row index in ``acts``) and the four
    call columns. ``busy``: ``acts`` is :func:`busy_activities` (the calls then come from
    the launch-link table, no join)."""
    cols = {"name": "call_name", "start_ns": "api_start_ns", "end_ns": "api_end_ns"}
    # a timeline holding part of a trace carries the trace's first launches and median
    state = tl.__dict__.get(STATE_SLOT)
    # only the columns the rules read (a copy of every gpu column was the memory peak)
    acts = acts.select(["rank", "process_id", "correlation_id", "name", "kind",
                        *(c for c in ("src_kind", "dst_kind") if c in acts.columns),
                        *(["start_ns"] if state is not None else [])])
    if busy:
        g = tl.gpu.select(pl.col("category") != "sync").to_series().arg_true()
        a = links.launch_links(tl)["api_row_file"].gather(g)
        calls = tl.api.select(pl.col(c).gather(a).alias(n) for c, n in cols.items())
        j = (pl.concat([acts.with_row_index("_b"), calls, a.alias("_a").to_frame()],
                       how="horizontal")
             .filter(pl.col("_a").is_not_null()).drop("_a"))
    else:
        key = ["rank", "process_id", "correlation_id"]
        api = (tl.api.filter(pl.col("correlation_id").is_not_null())
               .select(*key, *(pl.col(c).alias(n) for c, n in cols.items()))
               .unique(subset=key, keep="first", maintain_order=True))
        j = (acts.with_row_index("_b").filter(pl.col("correlation_id").is_not_null())
             .join(api, on=key, how="inner", maintain_order="left"))
    # the rules run on the distinct names and kinds (analyses/callparts.py)
    part = call_parts(j, BLOCKING_API_RE, LAZY_LOAD_MIN_NS, state).cast(CALL_PART)
    # the call name stays the API table's dictionary code (a String copy per launched
    # activity was ~40 bytes a row, kept for the whole command); decoded where printed
    return j.select("_b", "call_name", "api_start_ns", "api_end_ns", part)


def call_windows(tl: Timeline, acts: pl.DataFrame | None = None, *,
                 columns: Sequence[str] | None = None) -> pl.DataFrame:
    """:func:`classify_calls` with ``start_ns``/``end_ns`` replaced by the host window of
    the call: the whole call ``[api.start, api.end)`` for ``host_sync`` (the host was
    blocked throughout), ``[api.start, min(api.end, start))`` otherwise (the call is only
    in the way until its work starts). Empty windows are dropped.

    Example:
        kernel [200, 300) launched by cudaLaunchKernel [100, 150) -> launch [100, 150);
        a synchronous cudaMemcpy [100, 400) whose copy ran [250, 390) -> host_sync
        [100, 400).

    ``columns``: as in :func:`classify_calls` (``start_ns`` is always read).
    """
    j = classify_calls(tl, acts, columns=None if columns is None else [*columns, "start_ns"])
    end = pl.when(pl.col("call_part") == "host_sync").then(pl.col("api_end_ns")) \
        .otherwise(pl.min_horizontal("api_end_ns", "start_ns"))
    return (j.with_columns(end.alias("end_ns"), pl.col("api_start_ns").alias("start_ns"))
            .filter(pl.col("end_ns") > pl.col("start_ns"))
            .drop("api_start_ns", "api_end_ns"))


def launch_windows(tl: Timeline, acts: pl.DataFrame | None = None) -> pl.DataFrame:
    """Launch windows of GPU activities: :func:`call_windows` whose ``call_part`` is
    ``launch`` (the host issuing work, not waiting or loading modules), without the two
    call columns.

    Example:
        kernel [200, 300) launched by cudaLaunchKernel [100, 150) -> window [100, 150);
        a synchronous cudaMemcpy [100, 400) -> no launch window (host synchronisation).
    """
    return (call_windows(tl, acts).filter(pl.col("call_part") == "launch")
            .drop("call_name", "call_part"))


def _busy_host_calls(tl: Timeline, group: list[str]) -> dict[str, pl.DataFrame]:
    """:func:`_compose_host_calls` of the busy activities, once per timeline and group."""
    return dict(cached(tl, "host_calls:" + ",".join(group), ("gpu", "api", "ranges"),
                       lambda: _compose_host_calls(tl, busy_activities(tl), group)))


def _compose_host_calls(tl: Timeline, acts: pl.DataFrame, group: list[str]
                        ) -> dict[str, pl.DataFrame]:
    """The host calls of ``acts`` per group, from one :func:`call_windows` (not kept):
    ``host_sync`` (:func:`blocking_intervals`), ``warmup`` (:func:`warmup_intervals`), both
    with ``name`` and ``thread_id``, and ``launch`` (group columns and window): the launch
    windows and the issuing stretches (:func:`issuing_intervals`) less the blocking calls
    and warm-up they overlap and the stream waits (:func:`_minus_stream_waits`)."""
    from traceparse.analyses.issuing import subtract_host_parts

    windows = call_windows(tl, acts, columns=group)
    sync = _host_calls(tl, acts, group, windows, "host_sync")
    warm = _host_calls(tl, acts, group, windows, "warmup")
    launch = windows.filter(pl.col("call_part") == "launch").select(*group, "start_ns",
                                                                      "end_ns")
    issuing = subtract_host_parts(issuing_intervals(tl, group), [sync, warm], group)
    launch = pl.concat([launch, issuing.cast(launch.schema)]) if issuing.height else launch
    return {"launch": _minus_stream_waits(tl, launch, group), "host_sync": sync, "warmup": warm}


def issuing_intervals(tl: Timeline, group: Sequence[str]) -> pl.DataFrame:
    """The host's issuing stretches per group (:func:`~traceparse.analyses.issuing.
    issuing_stretches`): group, ``thread_id``, ``start_ns``, ``end_ns``; once per timeline
    and group."""
    from traceparse.analyses.issuing import issuing_stretches, non_issuing

    group = list(group)

    def compute() -> pl.DataFrame:
        busy = busy_activities(tl)
        g = tl.gpu.select(pl.col("category") != "sync").to_series().arg_true()
        rows = links.launch_links(tl)["api_row_file"].gather(g)
        classified = (classify_calls(tl, columns=[*group, "start_ns"])
                      .with_columns(rows.filter(rows.is_not_null()).alias("_row")))
        blocking = tl.api.select(name_matches(tl.api, BLOCKING_API_RE)).to_series().arg_true()
        bounds = pl.concat([classified["_row"].cast(pl.UInt32), blocking.cast(pl.UInt32)])
        return issuing_stretches(tl, group, classified.filter(pl.col("call_part") == "launch"),
                                 per_group(non_issuing(tl), busy, group), bounds, blocking)
    return cached(tl, "issuing:" + ",".join(group), ("gpu", "api", "ranges"), compute)


def blocking_intervals(tl: Timeline, acts: pl.DataFrame, group: Sequence[str], *,
                       windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Host calls that wait, per group: every :data:`BLOCKING_API_RE` call of a process
    with work in the group, plus the calls :func:`call_windows` marks ``host_sync``.
    Columns: group, ``name``, ``thread_id``, ``start_ns``, ``end_ns``. ``windows``:
    :func:`call_windows` of ``acts`` when the caller already has it. Computed once per
    timeline and group for the busy activities (host sets and idle gaps share it)."""
    group = list(group)
    if windows is None and acts is busy_activities(tl):
        return _busy_host_calls(tl, group)["host_sync"]
    return _host_calls(tl, acts, group, windows, "host_sync")


def warmup_intervals(tl: Timeline, acts: pl.DataFrame, group: Sequence[str], *,
                     windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Warm-up per group: :data:`WARMUP_API_RE` calls and :data:`WARMUP_RANGE_RE` host
    ranges of a process with work in the group, and lazy-loading first launches
    (:func:`call_windows` ``warmup``). Columns as :func:`blocking_intervals`; shared the
    same way."""
    group = list(group)
    if windows is None and acts is busy_activities(tl):
        return _busy_host_calls(tl, group)["warmup"]
    return _host_calls(tl, acts, group, windows, "warmup")


def _host_calls(tl: Timeline, acts: pl.DataFrame, group: list[str],
                windows: pl.DataFrame | None, part: str) -> pl.DataFrame:
    """:func:`blocking_intervals` (``part`` ``host_sync``) or :func:`warmup_intervals`
    (``warmup``)."""
    if part == "host_sync":
        # the columns per_group reads; one filter copies only the blocking calls (warm-up
        # reads no API copy: a filtered copy of every call was made for it too)
        # an allocation call waits only while work is in flight (analyses/waiting.py)
        api = tl.api.select("rank", "process_id", "name", "thread_id", "start_ns", "end_ns")
        out = per_group(waiting_parts(tl, api.filter(pl.col("end_ns").is_not_null()
                                                     & name_matches(api, BLOCKING_API_RE))),
                        acts, group)
    else:  # every warm-up signal (module loads, compiles, compiler processes, first calls)
        out = per_group(_warmup.warmup_signals(tl, BLOCKING_API_RE), acts, group)
    corr = (call_windows(tl, acts) if windows is None else windows).filter(
        pl.col("call_part") == part)
    extra = corr.select(*group, pl.col("call_name").alias("name"),
                        pl.lit(None, pl.Int64).alias("thread_id"), "start_ns", "end_ns")
    return pl.concat([out, extra.cast(out.schema)], how="vertical").unique(maintain_order=True)


def host_sets(tl: Timeline, acts: pl.DataFrame, group: Sequence[str]
              ) -> dict[str, pl.DataFrame]:
    """The host-side interval sets of the attribution, each with the group columns:
    ``launch`` (launch windows and issuing stretches), ``warmup`` (:func:`warmup_intervals`)
    and ``host_sync`` (:func:`blocking_intervals`, less the time a stream-wait rule gives to
    the wait: idle, cause ``stream_wait``). Computed once per timeline and group for the
    default activities (:func:`busy_activities`)."""
    group = list(group)
    if acts is busy_activities(tl):
        return dict(cached(tl, "host_sets:" + ",".join(group), ("gpu", "api", "ranges"),
                           lambda: _as_sets(tl, _busy_host_calls(tl, group), group)))
    return _host_sets(tl, acts, group)


def _minus_stream_waits(tl: Timeline, sync: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Host intervals (host sync, issuing) without the time a stream of the group sat
    blocked behind an event wait (:func:`traceparse.analyses.streamwait.stream_waits`): the
    work was issued and the stream waited on the event, so the wait is the cause, not the
    host (idle, gap cause ``stream_wait``)."""
    from traceparse.analyses.streamwait import stream_waits

    sw = stream_waits(tl)
    if sw.height == 0 or sync.height == 0 or not set(group) <= set(sw.columns):
        return sync
    cols = [*group, "start_ns", "end_ns"]
    return intervals.subtract(sync.select(cols), sw.select(cols).cast(sync.select(cols).schema),
                              by=group).select(cols)


def _host_sets(tl: Timeline, acts: pl.DataFrame, group: list[str]) -> dict[str, pl.DataFrame]:
    """:func:`host_sets` computed afresh (nothing read from or stored in the cache)."""
    return _as_sets(tl, _compose_host_calls(tl, acts, group), group)


def _as_sets(tl: Timeline, calls: dict[str, pl.DataFrame], group: list[str]
             ) -> dict[str, pl.DataFrame]:
    cols = [*group, "start_ns", "end_ns"]
    return {"launch": calls["launch"],  # less the stream waits already (_compose_host_calls)
            "warmup": calls["warmup"].select(cols),
            "host_sync": _minus_stream_waits(tl, calls["host_sync"].select(cols), group)}


def part_expr() -> pl.Expr:
    """The attribution part of a segment of :func:`traceparse.analyses.intervals.segments`
    over the sets ``compute, communication, memory, launch, warmup, host_sync`` (first
    that applies, in :data:`PARTS` order)."""
    c = {k: pl.col(k) > 0 for k in ("compute", "communication", "memory", "launch", "warmup",
                                      "host_sync")}
    return (pl.when(c["compute"]).then(pl.lit("compute_ns"))
            .when(c["communication"]).then(pl.lit("communication_ns"))
            .when(c["memory"]).then(pl.lit("memory_ns"))
            .when(c["launch"]).then(pl.lit("launch_overhead_ns"))
            .when(c["warmup"]).then(pl.lit("warmup_ns"))
            .when(c["host_sync"]).then(pl.lit("host_sync_ns"))
            .otherwise(pl.lit("idle_ns")))


def part_intervals(tl: Timeline, part: str, *, group: Sequence[str] = DEFAULT_GROUP
                   ) -> pl.DataFrame:
    """Where on the time line one attribution part (e.g. ``launch_overhead_ns``) lies:
    the group columns, ``start_ns``, ``end_ns`` (merged intervals inside each group's
    default window). Their lengths sum to that part of :func:`breakdown`. The intervals
    of all parts are computed together once per timeline and group."""
    every = default_segments(tl, group)["parts"]
    return every.filter(pl.col("_part") == part).drop("_part")


def default_segments(tl: Timeline, group: Sequence[str]) -> dict[str, pl.DataFrame]:
    """What the default-window attribution, :func:`part_intervals` and
    :func:`traceparse.analyses.gaps.idle_gaps` need from one
    :func:`~traceparse.analyses.intervals.segments` pass over each group's window, the
    three busy categories and the host sets (one per timeline and group; the ~4 boundaries
    per kernel are cut once, not once per analysis):

    * ``sums``: per group, the segment lengths summed per part (:data:`PARTS`) and
      ``overlapped_comm_ns``;
    * ``parts``: the merged intervals of every part, the part in ``_part`` (an Enum of
      :data:`PARTS`);
    * ``free``: the segments no GPU activity covers (group columns, ``start_ns``,
      ``end_ns``, ``launch``, ``warmup``, ``host_sync`` counts, Int32), in group then
      time order.

    The GPU categories other than ``sync`` are exactly compute, communication and memory
    (:data:`traceparse.schema.CATEGORIES`), so "no busy activity" is those three at 0.
    The sweep is :func:`traceparse.analyses.sweep.attribute` (numpy arrays, one sort of
    the boundaries); it equals ``intervals.segments`` over the same sets
    (``tests/test_default_segments.py``).
    """
    group = list(group)
    return dict(cached(tl, "default_segments:" + ",".join(group), ("gpu", "api", "ranges"),
                       lambda: _default_segments(tl, group)))


def _default_segments(tl: Timeline, group: list[str]) -> dict[str, pl.DataFrame]:
    acts = busy_activities(tl)
    # the groups in the order the general sweep sorts them (intervals.sort_within)
    keys = distinct_rows(acts.select(group)).sort(group)
    code = sweep.group_codes(keys, acts, group)
    wins = acts.group_by(group).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    sets = [(sweep.group_codes(keys, wins, group), wins["start_ns"], wins["end_ns"])]
    cat = acts["category"]
    for label in ("compute", "communication", "memory"):
        m = (cat == label).fill_null(False).to_numpy()
        sets.append((np.where(m, code, -1), acts["start_ns"], acts["end_ns"]))
    hosts = host_sets(tl, acts, group)
    for label in _HOST_LABELS:
        h = hosts[label]
        sets.append((sweep.group_codes(keys, h, group), h["start_ns"], h["end_ns"]))
    del code
    return sweep.attribute(keys, sets, PARTS, _HOST_LABELS)


_HOST_LABELS = ("launch", "warmup", "host_sync")


def _part_sums(seg: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Per ``key``: the lengths of the ``seg`` segments summed per part, and the
    compute-overlapped communication."""
    length = pl.col("end_ns") - pl.col("start_ns")
    comp, comm = pl.col("compute") > 0, pl.col("communication") > 0
    return (seg.with_columns(part_expr().alias("_part"), length.alias("_len"))
            .group_by(key)
            .agg(*(pl.col("_len").filter(pl.col("_part") == p).sum().alias(p) for p in PARTS),
                 pl.col("_len").filter(comp & comm).sum().alias("overlapped_comm_ns")))


def breakdown(tl: Timeline, *, window: tuple[int, int] | None = None,
              group: Sequence[str] = DEFAULT_GROUP) -> pl.DataFrame:
    """Attribute each group's window to compute, communication, memory, launch overhead and
    idle (see the module docstring for the definitions and priority).

    Args:
        tl: the timeline.
        window: ``(start_ns, end_ns)`` applied to every group; default: each group's first
            to last non-sync GPU activity.
        group: ``gpu`` columns defining one row; default one row per (rank, device).
            ``("rank", "device_id", "stream_id")`` gives a per-stream breakdown.

    Returns:
        One row per group: the group columns, ``window_start_ns``, ``window_end_ns``,
        ``window_ns``, the five parts (:data:`PARTS`), ``overlapped_comm_ns`` and
        ``comm_overlap_pct``. Empty (with those columns) when there is no GPU activity.
    """
    if window is None:
        # one computation per timeline and group: summary, savings and report share it
        return cached(tl, "breakdown:" + ",".join(group), ("gpu", "api", "ranges"),
                      lambda: breakdown_windows(tl, _default_windows(tl, group), group=group,
                                                _shared=True))
    else:
        start, end = int(window[0]), int(window[1])
        if end < start:
            raise ValueError(f"window end {end} < start {start}")
        wins = pl.DataFrame({"window_start_ns": [start], "window_end_ns": [end]},
                            schema={"window_start_ns": pl.Int64, "window_end_ns": pl.Int64})
    return breakdown_windows(tl, wins, group=group)


def breakdown_by_stream(tl: Timeline, *, window: tuple[int, int] | None = None
                        ) -> pl.DataFrame:
    """:func:`breakdown` with one row per (rank, device, stream): what each stream did
    during its own first-to-last activity (or ``window``)."""
    return breakdown(tl, window=window, group=("rank", "device_id", "stream_id"))


def _default_windows(tl: Timeline, group: Sequence[str]) -> pl.DataFrame:
    return (busy_activities(tl).group_by(list(group))
            .agg(pl.col("start_ns").min().alias("window_start_ns"),
                 pl.col("end_ns").max().alias("window_end_ns")))


def breakdown_windows(tl: Timeline, windows: pl.DataFrame, *,
                      group: Sequence[str] = DEFAULT_GROUP, _shared: bool = False
                      ) -> pl.DataFrame:
    """:func:`breakdown` over many windows at once (e.g. one per step).

    Args:
        tl: the timeline.
        windows: ``window_start_ns``, ``window_end_ns``, optionally ``window_name`` and any of
            the ``group`` columns. Group columns present restrict a window to matching groups
            (e.g. a ``rank`` column from :func:`~traceparse.analyses.steps.range_windows` keeps a
            step's window on its own rank); absent ones broadcast it to every group with GPU
            activity.
        group: as in :func:`breakdown`.

    Returns:
        As :func:`breakdown`, plus ``window_name`` when ``windows`` has it; sorted by group
        then window start.
    """
    group = list(group)
    acts = busy_activities(tl)
    w = window_frame(acts, windows, group)
    if _shared:
        # each group's own default window (one per group): the segments shared with the
        # part intervals and idle gaps, summed per group, are this window's
        sums = w.select("_wid", *group).join(default_segments(tl, group)["sums"], on=group,
                                             how="inner", nulls_equal=True).drop(group)
    else:
        sums = _part_sums(window_segments(tl, acts, w, group), ["_wid"])
    return finish_rows(w.join(sums, on="_wid", how="left"), group)


def window_frame(acts: pl.DataFrame, windows: pl.DataFrame, group: list[str]
                  ) -> pl.DataFrame:
    """``windows`` per group with busy activity, numbered ``_wid`` (breakdown_windows)."""
    named = "window_name" in windows.columns
    keys = [c for c in group if c in windows.columns]
    groups = acts.select(group).unique(maintain_order=True)
    w = windows.select(*keys, *(["window_name"] if named else []),
                       pl.col("window_start_ns").cast(pl.Int64),
                       pl.col("window_end_ns").cast(pl.Int64))
    if keys:
        w = groups.join(w.with_columns(pl.col(k).cast(groups.schema[k]) for k in keys),
                        on=keys, how="inner", nulls_equal=True)
    else:
        w = groups.join(w, how="cross")
    return w.select(*group, *(["window_name"] if named else []), "window_start_ns",
                    "window_end_ns").with_row_index("_wid")


def window_segments(tl: Timeline, acts: pl.DataFrame, w: pl.DataFrame, group: list[str]
                    ) -> pl.DataFrame:
    """The attribution's segments inside the numbered windows ``w`` (:func:`window_frame`);
    :func:`part_expr` names each segment's part."""
    sets: dict[str, pl.DataFrame] = {
        "_win": w.select("_wid", pl.col("window_start_ns").alias("start_ns"),
                         pl.col("window_end_ns").alias("end_ns")),
    }
    for label in ("compute", "communication", "memory"):
        sets[label] = _clip_to_windows(acts.filter(pl.col("category") == label), w, group)
    for label, frame in host_sets(tl, acts, group).items():
        sets[label] = _clip_to_windows(frame, w, group)
    return intervals.segments(sets, by=["_wid"]).filter(pl.col("_win") > 0)


def finish_rows(sums: pl.DataFrame, group: Sequence[str]) -> pl.DataFrame:
    """Attribution rows from their part sums: ``sums`` has the group columns, optionally
    ``window_name``, ``window_start_ns``, ``window_end_ns``, the :data:`PARTS` and
    ``overlapped_comm_ns`` (null: 0); adds ``window_ns`` and ``comm_overlap_pct`` and
    gives :func:`breakdown_windows`' columns and order (the chunked breakdown, which sums
    the parts of time windows, finishes its rows here too)."""
    group = list(group)
    named = "window_name" in sums.columns
    out = sums.with_columns(
        *(pl.col(c).fill_null(0).cast(pl.Int64) for c in (*PARTS, "overlapped_comm_ns")),
        (pl.col("window_end_ns") - pl.col("window_start_ns")).alias("window_ns"))
    denom = pl.col("overlapped_comm_ns") + pl.col("communication_ns")
    out = out.with_columns(
        pl.when(denom > 0).then(pl.col("overlapped_comm_ns") * 100.0 / denom)
        .otherwise(None).cast(pl.Float64).alias("comm_overlap_pct"))
    cols = [*group, *(["window_name"] if named else []), "window_start_ns", "window_end_ns",
            "window_ns", "compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns",
            "warmup_ns", "host_sync_ns", "idle_ns", "overlapped_comm_ns", "comm_overlap_pct"]
    return out.select(cols).sort([*group, "window_start_ns"], nulls_last=True)


def _clip_to_windows(frame: pl.DataFrame, wins: pl.DataFrame, group: list[str]
                     ) -> pl.DataFrame:
    """Intervals of ``frame`` clipped to each window of their group, keyed by ``_wid``."""
    w = wins.select("_wid", *group, "window_start_ns", "window_end_ns")
    j = frame.select(*group, "start_ns", "end_ns").join(w, on=group, how="inner",
                                                        nulls_equal=True)
    return (j.select("_wid",
                     pl.max_horizontal("start_ns", "window_start_ns").alias("start_ns"),
                     pl.min_horizontal("end_ns", "window_end_ns").alias("end_ns"))
            .filter(pl.col("end_ns") > pl.col("start_ns")))


def check_attribution(frame: pl.DataFrame) -> pl.DataFrame:
    """Raise :class:`AttributionError` unless every row's parts are non-negative and sum to
    ``window_ns == window_end_ns - window_start_ns``, and ``overlapped_comm_ns`` is at most
    ``compute_ns``. Returns ``frame`` so it can be chained."""
    if frame.height == 0:
        return frame
    parts = pl.sum_horizontal(*PARTS)
    bad = frame.filter(
        (parts != pl.col("window_ns"))
        | (pl.col("window_ns") != pl.col("window_end_ns") - pl.col("window_start_ns"))
        | pl.any_horizontal(*(pl.col(p) < 0 for p in (*PARTS, "overlapped_comm_ns")))
        | (pl.col("overlapped_comm_ns") > pl.col("compute_ns")))
    if bad.height:
        row = bad.row(0, named=True)
        raise AttributionError(f"{bad.height} attribution rows do not add up, e.g. {row}")
    return frame
