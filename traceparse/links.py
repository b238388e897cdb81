"""Links between timeline tables: GPU work to its launch call, a call to its enclosing range.

Two joins every attribution needs:

* :func:`launch_join` — each GPU activity (kernel, memcpy, memset) with the host API call
  that launched it. The key is ``(rank, process_id, correlation_id)``: CUPTI correlation ids
  are unique only within one process, and one ``cudaGraphLaunch`` call maps to many
  kernels, so the join is a many-to-one left join (GPU rows are never duplicated or lost).
* :func:`enclosing_ranges` — each API call with the innermost range (NVTX push/pop, torch
  ``cpu_op``, ``user_annotation``, ``profiler_step``) that was open on the same
  ``(rank, process_id, thread_id)`` when the call started; NVTX start/end ranges are
  process-wide and match any thread of the same ``(rank, process_id)``. Together they say
  which op, module and step owns a kernel.

Both are vectorised (sorts, cumulative sums and ``join_asof``), never per-row Python.

How the innermost range is found (:func:`innermost_range`): on one thread properly nested
ranges behave as a stack. Sort all range starts (+1) and ends (-1) by time; the running sum
is the stack height. A range that starts at height ``d`` occupies stack slot ``d`` until it
ends, and slot ``d`` is only reused after it closes. So for a query instant ``t`` where the
height is ``d``, the innermost open range is the **last range that started at level ``d``
before ``t``**: one ``join_asof`` by ``(group, level)``. Ranges that are not properly nested
(process-wide NVTX start/end ranges that cross, torch ops with rounded timestamps) can
break the stack; every answer is therefore checked (``range start <= t < range end``) and
set to null when the check fails, so an answer is never wrong, at worst missing.

Process-wide NVTX start/end ranges are not a stack (they may cross, and start and end on
different threads), so they use an exact rule instead: the enclosing range that **started
last**, found by binary lifting over running maxima of range ends (:func:`_latest_hits`).
Where a thread-local and a process-wide range both enclose a call, the innermost is again
the one that started last.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse.analyses.hostrows import distinct_rows
from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Range kinds that describe host-side code regions (the default for :func:`enclosing_ranges`).
HOST_RANGE_KINDS = ("nvtx_push_pop", "nvtx_start_end", "cpu_op", "user_annotation",
                    "profiler_step")

#: Range kinds that are process-wide: they own calls of every thread of their process.
PROCESS_RANGE_KINDS = ("nvtx_start_end",)

_KEY = ["rank", "process_id", "correlation_id"]
_API_COLS = {"name": "api_name", "kind": "api_kind", "start_ns": "api_start_ns",
             "end_ns": "api_end_ns", "thread_id": "api_thread_id"}


def launch_links(tl: Timeline) -> pl.DataFrame:
    """The launch-link table of ``tl``: for each ``gpu`` row (same count, same order) the
    row index in ``tl.api`` of its launching call, computed once per timeline.

    The key is ``(rank, process_id, correlation_id)`` (nulls never match). A key that a
    source records more than once has two answers, both kept:

    * ``api_row``: the call that **started first** (file order among equal starts), used
      by :func:`launch_join` (launches, replay, ranges);
    * ``api_row_file``: the **first in file order**, used by the attribution's call
      classification (:func:`traceparse.analyses.attribution.classify_calls`).

    Both are null where no call has the key. Every analysis of a command reads this one
    table (:func:`traceparse.derived.cached`) instead of joining ``gpu`` with ``api`` again.

    Example:
        api rows 0 ``(r0, pid 7, corr 5, start 40)`` and 1 ``(r0, pid 7, corr 5, start 30)``
        and a kernel with key ``(r0, 7, 5)``: ``api_row`` 1, ``api_row_file`` 0.
    """
    return cached(tl, "launch_links", ("gpu", "api"), lambda: _launch_links(tl))


def launch_starts(tl: Timeline) -> pl.Series:
    """``api_start_ns``: for each ``gpu`` row (same count, same order) the start of its
    launching call (:func:`launch_links`' ``api_row``), null where none matched; computed
    once per timeline. For the analyses that read only when work was issued (the steps'
    launched work, the warm-up's work in flight, the op tree): :func:`launch_join` gathers
    every call column onto every GPU row.

    Example:
        api rows ``(r0, pid 7, corr 5, start 40)`` and ``(r0, pid 7, corr 5, start 30)``,
        a kernel with key ``(r0, 7, 5)`` and one of pid 8: ``[30, null]``.
    """
    def compute() -> pl.Series:
        rows = launch_links(tl)["api_row"]
        if tl.api.height == 0:
            return pl.Series("api_start_ns", [None] * rows.len(), dtype=pl.Int64)
        return tl.api["start_ns"].cast(pl.Int64).gather(rows).alias("api_start_ns")

    return cached(tl, "launch_starts", ("gpu", "api"), compute)


#: The numpy path of :func:`_launch_links` is taken when the keys' ``(rank, process_id)``
#: pairs are at most this many (one masked pass per pair).
_MAX_PAIRS = 64


def _launch_links(tl: Timeline) -> pl.DataFrame:
    fast = _launch_links_sorted(tl)
    return fast if fast is not None else _launch_links_grouped(tl)


def _key_codes(frame: pl.DataFrame, pairs: list[tuple[int, int]], c0: int, span: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per row of ``frame`` for its key (pair number * ``span`` + correlation id
    - ``c0``) and whether the row has one (no null, a pair of ``pairs``)."""
    rank = frame["rank"].fill_null(0).to_numpy()
    pid = frame["process_id"].fill_null(0).to_numpy()
    corr = frame["correlation_id"].fill_null(c0).to_numpy().astype(np.int64) - c0
    ok = frame.select(pl.all_horizontal(pl.col(_KEY).is_not_null())).to_series().to_numpy()
    code = np.full(frame.height, -1, dtype=np.int64)
    for i, (r, p) in enumerate(pairs):
        m = ok & (rank == r) & (pid == p)
        code[m] = i * span + corr[m]
    return code, code >= 0


def _launch_links_sorted(tl: Timeline) -> pl.DataFrame | None:
    """:func:`_launch_links` by one stable sort of integer key codes (ngp17, 1M kernels and
    1.3M calls: 0.5 -> 0.2 s CPU); None where the keys do not fit (many process pairs,
    correlation ids spanning more than an int64) or a call lacks its start, then the
    grouped join runs instead.

    Calls sorted stably by key keep file order within a key: the first of each run is
    ``api_row_file``; sorted by (key, start), again stably, the first is ``api_row``."""
    api = tl.api.select(*_KEY, "start_ns")
    gpu = tl.gpu.select(_KEY)
    valid = api.filter(pl.all_horizontal(pl.col(_KEY).is_not_null()))
    if valid.height == 0 or gpu.height == 0 or valid["start_ns"].null_count():
        return None
    # one (rank, process) in the usual trace: read off the columns' minima and maxima
    pair_rows = distinct_rows(valid.select("rank", "process_id")).sort("rank",
                                                                       "process_id").rows()
    bounds = pl.concat([valid.select("correlation_id"), gpu.select("correlation_id")]).select(
        lo=pl.col("correlation_id").min(), hi=pl.col("correlation_id").max()).row(0)
    span = int(bounds[1]) - int(bounds[0]) + 1
    if len(pair_rows) > _MAX_PAIRS or span * len(pair_rows) >= 1 << 62:
        return None
    pairs = [(int(r), int(p)) for r, p in pair_rows]
    code_a, ok_a = _key_codes(api, pairs, int(bounds[0]), span)
    code_g, ok_g = _key_codes(gpu, pairs, int(bounds[0]), span)
    rows_a = np.flatnonzero(ok_a)
    keys = code_a[rows_a]
    order = np.argsort(keys, kind="stable")
    ks = keys[order]
    first = np.ones(ks.size, dtype=bool)
    first[1:] = ks[1:] != ks[:-1]
    uniq = ks[first]
    row_file = rows_a[order[first]]
    if first.all():
        row_start = row_file
    else:
        start = api["start_ns"].to_numpy()[rows_a]
        by_start = np.lexsort((start, keys))  # stable: equal (key, start) keep file order
        row_start = rows_a[by_start[first]]
    pos = np.minimum(np.searchsorted(uniq, code_g), uniq.size - 1)
    hit = ok_g & (uniq[pos] == code_g)
    miss = pl.Series(~hit)
    return pl.DataFrame({
        "api_row": pl.Series(row_start[pos], dtype=pl.UInt32).set(miss, None),
        "api_row_file": pl.Series(row_file[pos], dtype=pl.UInt32).set(miss, None)})


def _launch_links_grouped(tl: Timeline) -> pl.DataFrame:
    calls = (tl.api.select(*_KEY, "start_ns").with_row_index("_a")
             .filter(pl.col("correlation_id").is_not_null()))
    per_key = calls.group_by(_KEY).agg(
        pl.col("_a").first().alias("api_row_file"),
        pl.col("_a").get(pl.col("start_ns").arg_min()).alias("api_row"))
    return (tl.gpu.select(_KEY)
            .join(per_key, on=_KEY, how="left", nulls_equal=False, maintain_order="left")
            .select("api_row", "api_row_file"))


def launch_join(tl: Timeline, *, kinds: Sequence[str] | None = None,
                unique_calls: bool = True) -> pl.DataFrame:
    """GPU rows joined (left, many-to-one) to their launching API call.

    Args:
        tl: the timeline.
        kinds: GPU kinds to keep (e.g. ``("kernel",)``); None keeps every GPU row.
        unique_calls: keep one API call per key (the earliest: :func:`launch_links`'s
            ``api_row``). False joins every call with the key, as ``nsys stats`` does: some
            exports record a launch twice (a runtime row and an eventClass-67 row with the
            same correlation id), and the nsys report then counts the kernel twice.

    Returns:
        The ``gpu`` rows (same count, same order) plus ``api_name``, ``api_kind``,
        ``api_start_ns``, ``api_end_ns``, ``api_thread_id`` (null where no call matched).

    Example:
        gpu ``(rank 0, pid 7, corr 5, kernel k, start 100)`` and api
        ``(rank 0, pid 7, corr 5, cudaLaunchKernel, 40..60, tid 9)`` give one row
        ``k, start 100, api_name cudaLaunchKernel, api_start_ns 40, api_end_ns 60,
        api_thread_id 9``. A kernel of pid 8 with corr 5 stays unmatched (null api columns).
    """
    gpu = tl.gpu
    if not unique_calls:
        if kinds is not None:
            gpu = gpu.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
        api = (tl.api.filter(pl.col("correlation_id").is_not_null()).sort("start_ns")
               .select(_KEY + list(_API_COLS)).rename(_API_COLS))
        return gpu.join(api, on=_KEY, how="left", nulls_equal=False, maintain_order="left")
    idx = launch_links(tl)["api_row"]
    api = tl.api.select(list(_API_COLS))
    rows = gpu.with_columns(api.select(pl.col(c).gather(idx).alias(n)
                                       for c, n in _API_COLS.items()))
    if kinds is not None:
        rows = rows.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    return rows


def _range_events(ranges: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Start rows of ``ranges`` (which carry ``_rid``) with their stack level (1 = outermost)."""
    starts = ranges.select(*group, pl.col("start_ns").alias("_t"),
                           pl.lit(1, pl.Int64).alias("_d"), pl.col("end_ns").alias("_e"), "_rid")
    ends = ranges.select(*group, pl.col("end_ns").alias("_t"), pl.lit(-1, pl.Int64).alias("_d"),
                         pl.col("end_ns").alias("_e"), "_rid")
    # at equal times: ends before starts (half-open ranges), and among starts the longer
    # range (later end) first so that it is the parent
    ev = (pl.concat([starts, ends])
          .sort([*group, "_t", "_d", "_e"], descending=[False] * len(group) + [False, False, True])
          .with_columns(_level=pl.col("_d").cum_sum().over(group)))
    return ev.filter(pl.col("_d") == 1).select([*group, "_t", "_level", "_rid"])


def _open_count(q: pl.DataFrame, r: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """``q`` (sorted by ``_t``) plus ``_h``: ranges of ``r`` open at ``_t`` in the same group.

    ``_h = (#starts <= t) - (#ends <= t)``: two backward ``join_asof`` on running counts.
    """
    cnt_s = r.select([*g, pl.col("start_ns").alias("_t")]).sort([*g, "_t"]).with_columns(
        _ns=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(g))
    cnt_e = r.select([*g, pl.col("end_ns").alias("_t")]).sort([*g, "_t"]).with_columns(
        _ne=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(g))
    q = q.join_asof(cnt_s.sort("_t"), on="_t", by=g, strategy="backward", check_sortedness=False)
    q = q.join_asof(cnt_e.sort("_t"), on="_t", by=g, strategy="backward", check_sortedness=False)
    return q.with_columns(_h=pl.col("_ns").fill_null(0) - pl.col("_ne").fill_null(0)).drop(
        "_ns", "_ne")


def _stack_hits(q: pl.DataFrame, r: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """Thread-local rule: the innermost range by the stack walk (see the module docstring).

    Returns ``_pid``, ``_h`` (open ranges at the instant) and ``_rid`` (the answer; null
    where no range is open or improper nesting broke the stack).
    """
    q = _open_count(q, r, g).filter(pl.col("_h") > 0)
    hit = q.join_asof(_range_events(r, g).sort("_t"), left_on="_t", right_on="_t",
                      by_left=[*g, "_h"], by_right=[*g, "_level"], strategy="backward",
                      check_sortedness=False)
    hit = hit.join(r.select("_rid", pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e")),
                   on="_rid", how="left")
    ok = (pl.col("_s") <= pl.col("_t")) & (pl.col("_t") < pl.col("_e"))
    return hit.select("_pid", "_h", pl.when(ok).then(pl.col("_rid")).alias("_rid"))


def _latest_hits(q: pl.DataFrame, r: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """Process-wide rule: the range that started last among those containing the instant.

    Exact for any set of intervals (crossing start/end ranges included). Ranges are sorted
    by (group, start, end descending), so among equal starts the shorter comes later. For a
    query ``t`` let ``k`` be the last range of its group with ``start <= t``; the answer is
    the largest index ``i <= k`` with ``end_i > t`` (then ``start_i <= t < end_i``). It is
    found for all queries at once by binary lifting over a sparse table of running maxima
    of ``end``: ``M[j][i] = max(end[i - 2^j + 1 .. i])``; from ``k``, skip each block of
    length ``2^j`` (largest first) whose maximum end is ``<= t``. O((ranges + queries) log
    ranges). An answer before the group's first index belongs to another group: null.

    Returns ``_pid``, ``_h`` (open ranges at the instant) and ``_rid`` (null if none).
    """
    rs = (r.select(*g, "start_ns", "end_ns", "_rid")
          .sort([*g, "start_ns", "end_ns"], descending=[False] * len(g) + [False, True])
          .with_row_index("_pos").with_columns(pl.col("_pos").cast(pl.Int64)))
    rs = rs.with_columns(_g0=pl.col("_pos").min().over(g))
    last = (rs.group_by([*g, "start_ns"]).agg(pl.col("_pos").max().alias("_k"),
                                               pl.col("_g0").first())
            .rename({"start_ns": "_t"}).sort("_t"))
    q = _open_count(q, r, g).filter(pl.col("_h") > 0)
    q = q.join_asof(last, on="_t", by=g, strategy="backward", check_sortedness=False)
    ends = rs["end_ns"].to_numpy()
    t = q["_t"].to_numpy()
    cur = q["_k"].fill_null(-1).to_numpy().astype(np.int64)
    table = [ends]
    while (1 << len(table)) <= ends.size:
        prev, w = table[-1], 1 << (len(table) - 1)
        nxt = prev.copy()
        nxt[w:] = np.maximum(prev[w:], prev[:-w])  # window [i - 2w + 1, i], clamped at 0
        table.append(nxt)
    for j in range(len(table) - 1, -1, -1):
        live = cur >= 0
        skip = np.zeros_like(live)
        skip[live] = table[j][cur[live]] <= t[live]
        cur = np.where(skip, cur - (1 << j), cur)
    g0 = q["_g0"].fill_null(0).to_numpy()
    found = (cur >= 0) & (cur >= g0)
    rid = rs["_rid"].to_numpy()[np.where(found, cur, 0)]
    return q.select("_pid", "_h").with_columns(
        _rid=pl.Series(rid, dtype=rs.schema["_rid"]).set(pl.Series(~found), None))


def innermost_range(points: pl.DataFrame, ranges: pl.DataFrame, *, time_col: str,
                    group: Sequence[str], prefix: str = "range_",
                    wide_kinds: Sequence[str] = (),
                    wide_group: Sequence[str] | None = None) -> pl.DataFrame:
    """For each row of ``points``, the innermost range of ``ranges`` open at ``time_col``.

    ``points`` and ``ranges`` must both carry the ``group`` columns (e.g. ``rank``,
    ``process_id``, ``thread_id``); a range contains instant ``t`` when
    ``start_ns <= t < end_ns``. Ranges without ``end_ns`` are ignored.

    Ranges whose ``kind`` is in ``wide_kinds`` (NVTX start/end ranges) are matched on the
    coarser ``wide_group`` instead (e.g. ``rank``, ``process_id``: any thread of the
    process), by the exact "started last" rule of :func:`_latest_hits`. When both a
    ``group`` range and a ``wide_group`` range contain ``t``, the innermost is **the one
    that started last**; at equal starts the shorter (earlier end), and at equal starts and
    ends the ``group`` (thread-local) one.

    Args:
        points: any frame; its rows are returned unchanged and in order.
        ranges: rows of the ``ranges`` table (at least group columns, ``name``, ``kind``,
            ``start_ns``, ``end_ns``; ``domain`` and ``range_id`` are kept when present).
        time_col: column of ``points`` holding the query instant (ns).
        group: columns that must be equal between a point and its range.
        prefix: prefix for the added columns.
        wide_kinds: range kinds matched on ``wide_group`` instead of ``group``.
        wide_group: the coarser key for ``wide_kinds``; required when they are given.

    Returns:
        ``points`` plus ``{prefix}name``, ``{prefix}kind``, ``{prefix}domain``,
        ``{prefix}start_ns``, ``{prefix}end_ns``, ``{prefix}level``. The level is the
        number of ranges open at ``t`` that apply to the point (thread-local stack height
        plus open wide ranges), so 1 = outermost; null where no range was found.

    Example:
        Ranges on one thread: A [0, 100), B [10, 50) inside A, C [60, 90) inside A.
        Query t=20 -> B (level 2); t=55 -> A (level 1: B closed, C not yet open);
        t=60 -> C; t=100 -> none. Add a wide range W [30, 200) opened on another thread
        of the process: t=20 -> B (level 2); t=40 -> W (started after B; level 3);
        t=55 -> W (level 2); t=100 -> W (level 1).
    """
    g = list(group)
    gw = list(wide_group) if wide_group is not None else []
    if wide_kinds and not gw:
        raise ValueError("wide_kinds needs wide_group")
    keep: list[str] = [c for c in ("name", "kind", "domain", "start_ns", "end_ns")
                       if c in ranges.columns]
    r = ranges.filter(pl.col("end_ns") > pl.col("start_ns")).select(
        list(dict.fromkeys(g + gw + keep)))
    if "domain" not in keep:
        r = r.with_columns(domain=pl.lit(None, pl.String))
    r = r.with_row_index("_rid")
    info = r.select(["_rid"] + [pl.col(c).alias(prefix + c) for c in ("name", "kind", "domain",
                                                                      "start_ns", "end_ns")])
    out_cols = [prefix + c for c in ("name", "kind", "domain", "start_ns", "end_ns", "level")]
    is_wide = (pl.col("kind").cast(pl.String).is_in(list(wide_kinds)) if wide_kinds
               else pl.lit(False))
    sides = [(r.filter(~is_wide), g, _stack_hits), (r.filter(is_wide), gw, _latest_hits)]
    p = points.with_row_index("_pid")
    found = []
    for i, (rr, key, fn) in enumerate(sides):
        if not key:
            continue
        rr = rr.filter(pl.all_horizontal([pl.col(c).is_not_null() for c in key]))
        if rr.height == 0 or p.height == 0:
            continue
        q = p.select(["_pid", *key, pl.col(time_col).alias("_t")]).filter(
            pl.col("_t").is_not_null()
            & pl.all_horizontal([pl.col(c).is_not_null() for c in key])).sort("_t")
        hit = fn(q, rr, key).join(r.select("_rid", "start_ns", "end_ns"), on="_rid", how="left")
        found.append(hit.rename({"_h": f"_h{i}", "_rid": f"_rid{i}", "start_ns": f"_s{i}",
                                 "end_ns": f"_e{i}"}))
    if not found:
        return points.with_columns(
            [pl.lit(None, dtype=info.schema[c] if c in info.columns else pl.Int64).alias(c)
             for c in out_cols])
    if len(found) == 1:
        hit = found[0].rename({c: c[:-1] for c in found[0].columns if c != "_pid"})
        hit = hit.with_columns(_level=pl.col("_h"))
    else:
        a, b = found
        hit = a.join(b, on="_pid", how="full", coalesce=True)
        # the wide range wins when it started later, or started together and ends sooner
        wide = pl.col("_rid1").is_not_null() & (
            pl.col("_rid0").is_null() | (pl.col("_s1") > pl.col("_s0"))
            | ((pl.col("_s1") == pl.col("_s0")) & (pl.col("_e1") < pl.col("_e0"))))
        hit = hit.select(
            "_pid", _rid=pl.when(wide).then(pl.col("_rid1")).otherwise(pl.col("_rid0")),
            _level=pl.col("_h0").fill_null(0) + pl.col("_h1").fill_null(0))
    hit = hit.filter(pl.col("_rid").is_not_null()).join(info, on="_rid", how="left")
    hit = hit.select(["_pid", *out_cols[:-1], pl.col("_level").alias(prefix + "level")])
    return p.join(hit, on="_pid", how="left", maintain_order="left").drop("_pid")


def enclosing_ranges(tl: Timeline, *, kinds: Sequence[str] = HOST_RANGE_KINDS,
                     prefix: str = "range_") -> pl.DataFrame:
    """Each API call with the innermost range of ``kinds`` enclosing its entry.

    Thread-local kinds (NVTX push/pop, torch ops) match on ``(rank, process_id,
    thread_id)`` and the call's ``start_ns``. NVTX start/end ranges
    (:data:`PROCESS_RANGE_KINDS`) are process-wide, as in nsys's projection: they match on
    ``(rank, process_id)``, so a range opened on thread A owns calls made on thread B. When
    a thread-local and a process-wide range both enclose a call, the one that started last
    is the innermost (see :func:`innermost_range`).

    Args:
        tl: the timeline.
        kinds: range kinds to consider, e.g. ``("nvtx_push_pop",)`` or
            ``("cpu_op", "user_annotation")``; mixed kinds share one stack.
        prefix: prefix of the added columns.

    Returns:
        ``tl.api`` plus ``range_name``, ``range_kind``, ``range_domain``,
        ``range_start_ns``, ``range_end_ns``, ``range_level`` (null where no range was open).
    """
    ranges = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    return innermost_range(tl.api, ranges, time_col="start_ns",
                           group=("rank", "process_id", "thread_id"), prefix=prefix,
                           wide_kinds=PROCESS_RANGE_KINDS, wide_group=("rank", "process_id"))


def kernel_ranges(tl: Timeline, *, kinds: Sequence[str] = HOST_RANGE_KINDS,
                  gpu_kinds: Sequence[str] | None = ("kernel",),
                  prefix: str = "range_") -> pl.DataFrame:
    """GPU rows with their launch call and the innermost range enclosing that call.

    :func:`launch_join` followed by :func:`innermost_range` at ``api_start_ns`` on
    ``(rank, process_id, api_thread_id)`` (``(rank, process_id)`` for NVTX start/end
    ranges, which are process-wide). GPU rows without a launch call get null ranges.
    """
    rows = launch_join(tl, kinds=gpu_kinds)
    ranges = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    ranges = ranges.rename({"thread_id": "api_thread_id"})
    return innermost_range(rows, ranges, time_col="api_start_ns",
                           group=("rank", "process_id", "api_thread_id"), prefix=prefix,
                           wide_kinds=PROCESS_RANGE_KINDS, wide_group=("rank", "process_id"))
