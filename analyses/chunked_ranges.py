"""The summary's ranged sections in pieces (``summary --executor chunks|dask`` of an nsys
export with NVTX ranges; docs/performance.md, "Chunked summary"): ``op_tree``, ``layers``,
``phases``, ``phase_mix`` and the verdict's step clause, equal to memory's.

**The ranges are read whole, the GPU rows never are.** An export's NVTX ranges are few
beside its GPU rows on most exports, and every rule here reads them across the whole file
(a range's parent, its path, the steps, the layer groups), so they are kept whole
(:class:`RangeTree`, built once from the timeline of the ranges alone); the GPU rows and
their calls are folded window by window in pass 1:

* each kernel that starts in the window is joined to its launch call by ``(rank,
  process_id, correlation_id)`` (the call that started first, as
  :func:`traceparse.links.launch_links`' ``api_row``: the window's calls by correlation id
  hold every call with its key), and its owner is the innermost range open at the call's
  start on its thread (:func:`traceparse.analyses.optree.launch_owners` against the whole
  ranges: one kernel's owner depends on its call and the ranges only), else the step of
  its process whose window holds the call (``[thread without ranges]``), else
  ``[outside any range]``; a kernel without a call is ``[no launch call]``;
* the window's partial is per ``(rank, node, thread without ranges)`` the kernels' count,
  summed duration and summed duration per category (:func:`owner_part`); partials merge by
  adding (:func:`merge_owner_parts`);
* :func:`tree` makes the nodes as :func:`~traceparse.analyses.optree.op_tree` makes them
  (the range paths in start order, then the ``[thread without ranges]`` nodes, then with
  several ranks each rank's ``[no launch call]`` and ``[outside any range]`` in rank
  order) and gives memory's frame from the sums.

``[thread without ranges]`` nodes are made in the order their first kernel comes in the
timeline; with two or more of them that order is not kept in pieces, and
:func:`tree` raises :class:`NotExact`. The phases and phase mix are empty when the ranges
give no step whose phase is known (:func:`steps_of`); the step clause is empty without
steps. A trace with steps has a step clause from the steps' attribution, which is not
computed in pieces: :func:`steps_of` says so and the caller falls back.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl

from traceparse.analyses import optree
from traceparse.timeline import Timeline

_KEY = ["rank", "process_id", "correlation_id"]
_SUMS = ["kernels", "dur_ns", *(f"{c}_ns" for c in optree.TREE_CATEGORIES)]


class NotExact(Exception):
    """A ranged section cannot be given exactly from the pieces: ``str`` says why."""


class RangeTree(NamedTuple):
    """The whole ranges' part of the op tree in ``view``: the view's ranges
    (:func:`~traceparse.analyses.optree.view_ranges`), each one's parent (steps adopting
    other threads' top ranges, as :func:`~traceparse.analyses.optree.op_tree`), each one's
    path node and the step ranges (for ``[thread without ranges]``)."""

    ranges: pl.DataFrame
    parent: np.ndarray
    r_path: np.ndarray
    steps: pl.DataFrame
    view: str
    by_rank: bool


def range_tree(tl: Timeline, view: str, by_rank: bool) -> RangeTree:
    """The :class:`RangeTree` of ``tl`` (its ranges whole; its GPU rows are not read)."""
    ranges = optree.view_ranges(tl, view)
    parent = optree.adopt_into_steps(tl, ranges, optree.nest_ranges(ranges))
    _, r_path, _ = optree.path_nodes(ranges, parent, by_rank)
    steps = optree.step_ranges(tl, ranges) if ranges.height else pl.DataFrame()
    return RangeTree(ranges, parent, r_path, steps, view, by_rank)


def _empty_part() -> pl.DataFrame:
    return pl.DataFrame(schema={"rank": pl.Int32, "node": pl.Int64, "other": pl.Boolean,
                                **{c: pl.Int64 for c in _SUMS}})


def owner_part(rt: RangeTree, rows: pl.DataFrame, api: pl.DataFrame, t0: int, t1: int
               ) -> pl.DataFrame:
    """Per ``(rank, node, other)`` the count, summed duration and summed duration per
    category of the kernels of ``rows`` that start in ``[t0, t1)``; ``api``: every call
    that may share a key with them (:func:`traceparse.executor.own_calls`). ``node``: the
    owning range's path node, 1 without a launch call, 2 outside any range; ``other``:
    the node is the path of the step whose ``[thread without ranges]`` holds the kernel.

    Example (hand-computed): ranges ``a`` [0, 100) and ``b`` [10, 20) inside it on thread
    5; kernels launched on thread 5 at 12 (30 ns) and 50 (20 ns), on thread 6 at 12
    (7 ns), one without a call (4 ns): ``b`` 30, ``a`` 20, node 2 (outside) 7, node 1 4.
    """
    k = rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1)
                    & (pl.col("kind") == "kernel"))
    if k.height == 0:
        return _empty_part()
    calls = (api.filter(pl.all_horizontal(pl.col(_KEY).is_not_null())
                        & pl.col("start_ns").is_not_null())
             .select(*_KEY, pl.col("thread_id").alias("_tid"),
                     pl.col("start_ns").cast(pl.Int64).alias("api_start_ns"))
             .sort("api_start_ns", maintain_order=True)
             .unique(subset=_KEY, keep="first", maintain_order=True))
    acts = (k.select(*_KEY, "dur_ns", pl.col("category").cast(pl.String))
            .join(calls.cast({c: k.schema[c] for c in _KEY}), on=_KEY, how="left")
            .select(pl.col("rank").cast(pl.Int32), pl.col("process_id").fill_null(-1),
                    pl.col("_tid").fill_null(-1).alias("thread_id"), "api_start_ns",
                    pl.col("dur_ns").cast(pl.Int64), "category"))
    linked = acts["api_start_ns"].is_not_null().to_numpy()
    node = np.full(acts.height, 1, dtype=np.int64)
    other = np.zeros(acts.height, dtype=bool)
    if linked.any():
        la = acts.filter(pl.col("api_start_ns").is_not_null())
        la = la.cast({c: rt.ranges.schema[c] for c in ("rank", "process_id", "thread_id")})
        # only a range open at a call's start can own its kernel: the ranges that overlap
        # the window's call starts (a filter, not the whole table, sorted per window)
        t = la["api_start_ns"]
        near = (rt.ranges.with_row_index("_ri")
                .filter((pl.col("start_ns") <= t.max()) & (pl.col("end_ns") > t.min())))
        hit = optree.launch_owners(near.drop("_ri"), la)
        ri = near["_ri"].cast(pl.Int64).to_numpy()
        owner = np.where(hit >= 0, ri[np.maximum(hit, 0)] if ri.size else -1, -1)
        got = np.where(owner >= 0, rt.r_path[np.maximum(owner, 0)], 2)
        step = _step_of(rt, la, owner)
        has = step >= 0
        got[has] = rt.r_path[step[has]]
        node[linked] = got
        other[np.flatnonzero(linked)[has]] = True
    cat = pl.col("category")
    return (acts.with_columns(pl.Series("node", node), pl.Series("other", other))
            .group_by("rank", "node", "other")
            .agg(pl.len().cast(pl.Int64).alias("kernels"), pl.col("dur_ns").sum(),
                 *(pl.col("dur_ns").filter(cat == c).sum().alias(f"{c}_ns")
                   for c in optree.TREE_CATEGORIES))
            .select(_empty_part().columns).cast(_empty_part().schema))


def _step_of(rt: RangeTree, linked: pl.DataFrame, owner: np.ndarray) -> np.ndarray:
    """:func:`traceparse.analyses.optree.orphans_in_steps` on the tree's own step ranges."""
    return optree.orphans_in_steps(rt.steps, linked, owner)


def merge_owner_parts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The partial of several windows (sums added)."""
    return (pl.concat(parts).group_by("rank", "node", "other").agg(pl.col(_SUMS).sum())
            .select(_empty_part().columns).cast(_empty_part().schema))


def tree(rt: RangeTree, sums: pl.DataFrame, *, max_depth: int | None = None
         ) -> pl.DataFrame:
    """:func:`~traceparse.analyses.optree.op_tree` (kernels, ``rt``'s view and ranks) from
    the merged partial ``sums``.

    Raises:
        NotExact: kernels of threads without ranges fall under two or more step paths.
    """
    nodes, _, child = optree.path_nodes(rt.ranges, rt.parent, rt.by_rank)
    sums = sums.filter(pl.col("kernels") > 0)
    at = dict[tuple[int, bool, int], int]()
    paths = sorted(set(sums.filter(pl.col("other"))["node"].to_list()))
    if len(paths) > 1:
        raise NotExact(f"kernels of threads without ranges fall under {len(paths)} step "
                       "paths (the order of their nodes is not kept in pieces)")
    for p in paths:
        made = child(int(p), optree.OTHER_THREAD, "")
        for r in sums["rank"].unique().to_list():
            at[(int(p), True, int(r))] = made
    if rt.by_rank:
        for fixed in (1, 2):
            mine = sums.filter(~pl.col("other") & (pl.col("node") == fixed))
            for r in sorted(mine["rank"].unique().to_list()):
                at[(fixed, False, int(r))] = child(0, nodes.name[fixed], "", int(r))
    n = len(nodes.name)
    excl, kexcl = np.zeros(n, np.int64), np.zeros(n, np.int64)
    cat_excl = {c: np.zeros(n, np.int64) for c in optree.TREE_CATEGORIES}
    for row in sums.iter_rows(named=True):
        key = (int(row["node"]), bool(row["other"]), int(row["rank"]))
        node = at.get(key, key[0])
        excl[node] += row["dur_ns"]
        kexcl[node] += row["kernels"]
        for c in optree.TREE_CATEGORIES:
            cat_excl[c][node] += row[f"{c}_ns"]
    return optree.tree_frame(nodes, excl, kexcl, cat_excl, max_depth=max_depth,
                              keep_empty=False, by_rank=rt.by_rank)


def steps_of(tl: Timeline) -> tuple[int, int]:
    """How many steps the ranges of ``tl`` give (:func:`traceparse.analyses.phases.
    find_steps`) and how many of them have a known phase (the phase rules read ranges
    only: annotations, names, op shapes)."""
    from traceparse.analyses import phases

    wins, _ = phases.find_steps(tl)
    if wins.height == 0:
        return 0, 0
    host = phases._ByStart(phases._host(tl), "start_ns")
    known = 0
    for w in wins.iter_rows(named=True):
        s, e = w["start_ns"], w["end_ns"]
        inside = host.window(w["rank"], s, e).filter(pl.col("end_ns") <= e)
        known += phases._classify(w, inside, w["step"])["phase"] != "unknown"
    return wins.height, known
