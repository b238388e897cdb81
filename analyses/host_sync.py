"""Host-sync time by the call that waited and by the framework op that made the call.

Host sync (``host_sync_ns`` of the attribution, docs/analyses.md) is GPU time with nothing
to run while a host thread sat in a blocking call. To remove it a user needs the line of
their program that blocked: the CUDA call (``cudaStreamSynchronize``) says how, the
framework op around it says where (``aten::item`` is a ``.item()``, ``aten::to`` a
``.to()``/``.cpu()``, ``aten::nonzero`` a data-dependent shape).

* :func:`host_sync_by_call`: per blocking call name, the overlap of its calls with the
  host-sync intervals (the verdict's "mostly cudaStreamSynchronize").
* :func:`host_sync_by_op`: the same overlaps per op: the **outermost** ``cpu_op`` open on
  the call's thread when it began (the op the program called; its inner ops are how the
  framework implemented it), ``None`` where no op was recorded around it (nsys exports, a
  bare ``torch.cuda.synchronize()``, a copy's implicit sync). Kineto traces only carry ops.

Overlapping calls of two threads both count, so a sum can exceed the part.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse import schema
from traceparse.analyses._arrays import length_before
from traceparse.analyses.attribution import (
    DEFAULT_GROUP,
    blocking_intervals,
    busy_activities,
    part_intervals,
)
from traceparse.analyses.intervals import union
from traceparse.derived import cached
from traceparse.timeline import Timeline


def _overlaps(tl: Timeline, group: list[str]) -> pl.DataFrame:
    """Per blocking call (``name, thread_id, start_ns`` and the group): ``host_sync_ns``,
    its overlap with the host-sync intervals of its group; calls without any left out."""
    hs = part_intervals(tl, "host_sync_ns", group=group)
    calls = blocking_intervals(tl, busy_activities(tl), group)
    empty = pl.DataFrame(schema={**{c: calls.schema[c] for c in group}, "name": pl.String,
                                 "thread_id": pl.Int64, "start_ns": pl.Int64,
                                 "host_sync_ns": pl.Int64})
    if hs.height == 0 or calls.height == 0:
        return empty
    # per group, the host-sync intervals are disjoint and sorted: a call's overlap with
    # them is F(end) - F(start), F(t) their summed length before t, and it overlaps some
    # when an interval starts before its end and ends after its start (two binary searches
    # per call instead of an interval join of every call with every interval)
    by_group = {k: v.sort("start_ns") for k, v in hs.partition_by(
        group, as_dict=True, maintain_order=True).items()}
    out = []
    for key, c in calls.partition_by(group, as_dict=True, maintain_order=True).items():
        h = by_group.get(key)
        if h is None:
            continue
        hit, ov = overlap_with(h["start_ns"].to_numpy(), h["end_ns"].to_numpy(),
                               c["start_ns"].to_numpy(), c["end_ns"].to_numpy())
        out.append(c.filter(pl.Series(hit)).select(*group, "name", "thread_id", "start_ns")
                   .with_columns(pl.Series("host_sync_ns", ov[hit], pl.Int64)))
    if not out:
        return empty
    return pl.concat(out).with_columns(pl.col("name").cast(pl.String))


def overlap_with(h0: np.ndarray, h1: np.ndarray, s: np.ndarray, e: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For calls ``[s, e)`` and disjoint intervals ``[h0, h1)`` sorted by start: whether
    each call overlaps some interval (one starts before its end and ends after its start;
    a zero-length call inside one does) and its summed overlap in ns.

    Example:
        intervals [10, 20), [30, 40); calls [15, 35) -> True, 10; [20, 30) -> False, 0
        (touching is not overlapping); [12, 12) -> True, 0.
    """
    ov = length_before(h0, h1, e) - length_before(h0, h1, s)
    return np.searchsorted(h0, e, side="left") > np.searchsorted(h1, s, side="right"), ov


def host_sync_by_call(tl: Timeline, *, group: Sequence[str] = DEFAULT_GROUP) -> pl.DataFrame:
    """Host-sync time per blocking call name: ``name, host_sync_ns``, largest first (the
    calls of :func:`host_sync_by_op` summed over their ops)."""
    return by_call(host_sync_by_op(tl, group=group))


def by_call(by_op: pl.DataFrame) -> pl.DataFrame:
    """:func:`host_sync_by_op`'s rows summed per call: ``name, host_sync_ns``, largest
    first (ties by name)."""
    return (by_op.group_by(pl.col("call").alias("name")).agg(pl.col("host_sync_ns").sum())
            .sort(["host_sync_ns", "name"], descending=[True, False]))


def sync_origin(by_op: pl.DataFrame, call: str) -> str | None:
    """The op that made most of ``call``'s host-sync time in ``by_op``
    (:func:`host_sync_by_op`), when one op holds at least half of it; else None."""
    rows = by_op.filter(pl.col("call") == call)
    total = int(rows["host_sync_ns"].sum())
    top = rows.filter(pl.col("op").is_not_null()).head(1)
    if total <= 0 or top.height == 0 or 2 * int(top["host_sync_ns"][0]) < total:
        return None
    return str(top["op"][0])


def host_sync_by_op(tl: Timeline, *, group: Sequence[str] = DEFAULT_GROUP) -> pl.DataFrame:
    """Host-sync time per framework op and blocking call: ``op`` (the outermost ``cpu_op``
    open on the call's thread at its start; null: none recorded), ``call`` (the blocking
    call's name), ``calls``, ``host_sync_ns``; largest first.

    Example:
        A ``cudaStreamSynchronize`` [10, 50) on thread 7 inside ``aten::_local_scalar_dense``
        [8, 52) inside ``aten::item`` [5, 55), the GPU idle over [20, 50): op
        ``aten::item``, call ``cudaStreamSynchronize``, 1 call, 30 ns.
    """
    if tuple(group) == DEFAULT_GROUP:
        return cached(tl, "host_sync_by_op", tuple(schema.TABLES),
                      lambda: _by_op(tl, list(group)))
    return _by_op(tl, list(group))


def _with_threads(tl: Timeline, calls: pl.DataFrame) -> pl.DataFrame:
    """``calls`` (``rank, name, thread_id, start_ns`` ...) with a null ``thread_id`` filled:
    a copy's implicit sync is listed without its thread, and the runtime call it came from
    (same rank, name and start) has one (only the calls that need it are looked up: the api
    table can hold 10M rows)."""
    need = calls.filter(pl.col("thread_id").is_null()).select("rank", "start_ns").unique()
    if need.height == 0:
        return calls
    api = (tl.api.select("rank", "start_ns", "name", pl.col("thread_id").alias("_tid"))
           .join(need, on=["rank", "start_ns"], how="semi")
           .with_columns(pl.col("name").cast(pl.String))
           .unique(["rank", "name", "start_ns"], keep="first"))
    return (calls.with_columns(pl.col("name").cast(pl.String))
            .join(api, on=["rank", "name", "start_ns"], how="left")
            .with_columns(pl.coalesce("thread_id", "_tid").alias("thread_id")).drop("_tid"))


#: Host ranges whose own time :func:`op_waits` measures: framework ops, NVTX ranges and
#: ``record_function`` annotations.
WAIT_KINDS = ("cpu_op", "nvtx_push_pop", "nvtx_start_end", "user_annotation")


def op_waits(tl: Timeline) -> pl.DataFrame:
    """Every closed host range of :data:`WAIT_KINDS` (ops, NVTX ranges, annotations), in
    the ranges' order: ``rank, kind, name, dur_ns, wait_ns``, where ``wait_ns`` is the part
    of the range its thread spent in blocking calls
    (:func:`traceparse.analyses.attribution.blocking_intervals`: synchronise and
    synchronous copy calls whole, an allocation call while work was in flight), the time
    it waited for the GPU rather than ran (docs/diff.md, "Op time").

    Example:
        ``aten::item`` [5, 55) on thread 7 holding a ``cudaStreamSynchronize`` [10, 50)
        and ``aten::add`` [60, 70): ``wait_ns`` 40 and 0.
    """
    return cached(tl, "op_waits", ("gpu", "api", "ranges"), lambda: _op_waits(tl))


def _op_waits(tl: Timeline) -> pl.DataFrame:
    ops = (tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(WAIT_KINDS)
                            & pl.col("dur_ns").is_not_null())
           .select("rank", "thread_id", "start_ns", "end_ns", "dur_ns",
                   pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String))
           .with_row_index("_i"))
    calls = blocking_intervals(tl, busy_activities(tl), list(DEFAULT_GROUP))
    wait = np.zeros(ops.height, np.int64)
    if ops.height and calls.height:
        calls = _with_threads(tl, calls.select("rank", "name", "thread_id", "start_ns",
                                               "end_ns"))
        # a thread blocks in one call at a time, but a call shows once per device of its
        # rank: the union per thread counts it once
        held = {k: (h["start_ns"].to_numpy(), h["end_ns"].to_numpy()) for k, h in union(
            calls.filter(pl.col("thread_id").is_not_null()), by=["rank", "thread_id"])
            .partition_by("rank", "thread_id", as_dict=True, maintain_order=True).items()}
        for k, o in ops.partition_by("rank", "thread_id", as_dict=True).items():
            h = held.get(k)
            if h is not None:
                wait[o["_i"].to_numpy()] = overlap_with(*h, o["start_ns"].to_numpy(),
                                                        o["end_ns"].to_numpy())[1]
    return ops.select("rank", "kind", "name", "dur_ns", pl.Series("wait_ns", wait, pl.Int64))


def _by_op(tl: Timeline, group: list[str]) -> pl.DataFrame:
    return op_rows(with_ops(tl, _with_threads(tl, _overlaps(tl, group))))


def with_ops(tl: Timeline, calls: pl.DataFrame) -> pl.DataFrame:
    """``calls`` (``rank, thread_id, start_ns`` ...) with ``op``: the outermost ``cpu_op``
    of ``tl`` open on the call's thread at its start (null: none)."""
    ops = (tl.ranges.filter((pl.col("kind").cast(pl.String) == "cpu_op")
                            & pl.col("end_ns").is_not_null())
           .select(pl.col("rank").alias("_r"), pl.col("thread_id").alias("_t"),
                   pl.col("start_ns").alias("_os"), pl.col("end_ns").alias("_oe"),
                   pl.col("depth").fill_null(0).alias("_d"),
                   pl.col("name").cast(pl.String).alias("op")))
    calls = calls.with_row_index("_call")
    if ops.height and calls.height:
        j = (calls.select("_call", "rank", "thread_id", "start_ns")
             .join_where(ops, pl.col("_os") <= pl.col("start_ns"),
                         pl.col("_oe") > pl.col("start_ns"))
             .filter((pl.col("rank") == pl.col("_r")) & (pl.col("thread_id") == pl.col("_t")))
             .sort("_call", "_d", "_os").group_by("_call", maintain_order=True)
             .agg(pl.col("op").first()))
        calls = calls.join(j, on="_call", how="left")
    else:
        calls = calls.with_columns(pl.lit(None, pl.String).alias("op"))
    return calls.drop("_call")


def op_rows(calls: pl.DataFrame) -> pl.DataFrame:
    """:func:`host_sync_by_op`'s frame from one row per call (``op, name,
    host_sync_ns``)."""
    return (calls.group_by("op", "name").agg(pl.len().cast(pl.Int64).alias("calls"),
                                             pl.col("host_sync_ns").sum())
            .select("op", pl.col("name").alias("call"), "calls", "host_sync_ns")
            .pipe(sort_by_op))


def sort_by_op(frame: pl.DataFrame) -> pl.DataFrame:
    """:func:`host_sync_by_op`'s order: largest first, then op and call (nulls last)."""
    return frame.sort(["host_sync_ns", "op", "call"], descending=[True, False, False],
                      nulls_last=True)
