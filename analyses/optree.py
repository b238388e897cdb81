"""GPU time rolled up the host call tree: ops, modules, Python stacks, annotations, NVTX.

Every GPU activity of the chosen kinds (kernels by default) is *owned* by the innermost host
range that was open, on the launching thread, when its launch call started:

1. the activity is joined to its launch call in ``api`` on ``(rank, process_id,
   correlation_id)`` (:func:`traceparse.links.launch_join`; one graph launch owns every
   kernel of the graph replay);
2. the call's thread and start time select the innermost range of the chosen ``view`` open
   at that instant on that (rank, process, thread) (:func:`traceparse.links.innermost_range`,
   as :func:`traceparse.links.kernel_ranges` does; NVTX start/end ranges are process-wide).
   Ranges nest by time on their thread (a range opened inside another and starting later
   is its child, as the profiler's own depth says). A step range is open on one thread
   only, so a range of another thread of the step's process (autograd's backward thread:
   ``autograd::engine::evaluate_function: ...``) that has no parent on its own thread and
   lies wholly inside the step's window is made a child of that step: the step's
   ``inclusive_ns`` then holds the backward pass it ran (on ``train_gpt2s_b8`` the steps
   held 45.6 % of the kernel time before, 99.7 % now: every launch call of the file but
   those of 3 unlinked kernels lies inside a ``ProfilerStep`` window).

Ranges are merged by *path* (the names from the root down, as pyinstrument and flame graphs
do): the 36 calls of ``aten::mm`` under the same parent are one node with ``calls = 36``.
``ProfilerStep#N`` ranges are named ``ProfilerStep#*``, and NVTX / ``record_function``
step annotations (``step 3``: :data:`traceparse.analyses.steps.AUTO_STEP_RE`) ``step *``
where the step rule takes them as the steps (two or more per rank, one after another, no
``ProfilerStep`` ranges: :func:`traceparse.analyses.steps.auto_step_ranks`), so
every step's work merges into one subtree (``merge_steps=False`` keeps one node per step),
and the per-call counters that
``torch.autograd.profiler.emit_nvtx`` appends to NVTX names (``aten::to, seq = 47933,
op_id = 995009``) are dropped, so those ops merge too.

Per node:

``exclusive_ns``
    Summed duration of the activities the node owns directly.
``inclusive_ns``
    ``exclusive_ns`` plus the ``inclusive_ns`` of its children.
``kernels`` / ``kernels_exclusive``
    Activity counts, inclusive / exclusive.
``compute_ns``, ``communication_ns``, ``memory_ns``
    ``inclusive_ns`` split by the activities' category (they sum to ``inclusive_ns``).

Nothing is dropped and nothing is counted twice: the root node ``[all kernels]`` has
``inclusive_ns`` equal to the summed duration of every activity of the chosen kinds. Two
synthetic children of the root hold the activities the call tree cannot place:
``[no launch call]`` (no API row with the activity's correlation id, e.g. a trace window cut
after the launch) and ``[outside any range]`` (a launch call with no enclosing range).
A launch on a thread with no range open, inside a step of its process (the steps of
:func:`traceparse.analyses.steps.step_windows`), goes under that step as
``[thread without ranges]`` instead: NVTX ranges are per thread, so under nsys every kernel
of the backward pass, launched by autograd's own thread, would otherwise sit outside the
step whose host range (on the main thread) holds it.

Views (which ranges take part; the rest are transparent):

``full``      every host range (annotations, steps, NVTX, cpu_op, python_function).
``ops``       everything but ``python_function``: the annotation / op tree.
``modules``   annotations, steps, NVTX and the ``nn.Module: X_N`` frames (``with_modules`` or
              ``with_stack``): the module hierarchy.
``python``    ``python_function`` frames only (plus steps): the Python stack.

Example (hand-computed): ``step`` [0, 100) holds ``aten::mm`` [10, 20) and ``aten::add``
[30, 40); the mm's launch at 12 runs a kernel of 50 ns, the add's launch at 32 a kernel of
20 ns, a launch at 50 (inside ``step`` only) a kernel of 5 ns, and one kernel of 7 ns has no
launch call::

    [all kernels]        inclusive 82  exclusive 0
      step               inclusive 75  exclusive 5
        aten::mm         inclusive 50
        aten::add        inclusive 20
      [no launch call]   inclusive 7
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from traceparse import links
from traceparse.timeline import Timeline

ROOT = "[all kernels]"
UNLINKED = "[no launch call]"
OUTSIDE = "[outside any range]"
OTHER_THREAD = "[thread without ranges]"
VIEWS = ("full", "ops", "modules", "python")
_HOST_KINDS = ("profiler_step", "user_annotation", "nvtx_push_pop", "nvtx_start_end",
               "cpu_op", "python_function", "other")
_MODULE_PREFIX = "nn.Module: "
TREE_CATEGORIES = ("compute", "communication", "memory")
#: Counters ``emit_nvtx`` appends to every range name (unique per call).
EMIT_NVTX_COUNTERS = r", (?:seq|op_id) = \d+"


def view_ranges(tl: Timeline, view: str = "full", *, merge_steps: bool = True
                ) -> pl.DataFrame:
    """The closed host ranges that take part in ``view`` (see the module docstring):
    ``rank, process_id, thread_id, kind, name, start_ns, end_ns`` as plain columns; with
    ``merge_steps`` profiler steps are all named ``ProfilerStep#*`` and numbered step
    annotations ``step *`` where they are the trace's steps (:mod:`.steps`)."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; choose one of {', '.join(VIEWS)}")
    kind = pl.col("kind").cast(pl.String)
    name = pl.col("name").cast(pl.String)
    r = tl.ranges.filter(pl.col("end_ns").is_not_null() & kind.is_in(_HOST_KINDS))
    if view == "ops":
        r = r.filter(kind != "python_function")
    elif view == "modules":
        r = r.filter(~kind.is_in(["cpu_op", "python_function"])
                     | ((kind == "python_function") & name.str.starts_with(_MODULE_PREFIX)))
    elif view == "python":
        r = r.filter(kind.is_in(["python_function", "profiler_step"]))
    name = name.str.replace_all(EMIT_NVTX_COUNTERS, "")
    if merge_steps:
        from traceparse.analyses.steps import AUTO_STEP_KINDS, AUTO_STEP_RE, auto_step_ranks

        # the annotations the step rule takes as steps (steps.step_windows: two or more
        # per rank, one after another, no ProfilerStep ranges), not every name that looks
        # like one
        numbered = (kind.is_in(AUTO_STEP_KINDS) & name.str.contains(AUTO_STEP_RE)
                    & pl.col("rank").is_in(auto_step_ranks(tl)))
        name = (pl.when(kind == "profiler_step")
                .then(name.str.replace(r"#\d+$", "#*"))
                .when(numbered).then(name.str.replace(r"\d+$", "*")).otherwise(name))
    return r.select("rank", pl.col("process_id").fill_null(-1),
                    pl.col("thread_id").fill_null(-1), kind.alias("kind"), name.alias("name"),
                    "start_ns", "end_ns")


def launched_activities(tl: Timeline, kinds: Sequence[str] = ("kernel",),
                        columns: Sequence[str] | None = None) -> pl.DataFrame:
    """GPU activities of ``kinds`` with their launch call (:func:`traceparse.links.launch_join`,
    the join every analysis shares): ``thread_id`` and ``api_start_ns`` of the call (null
    when none matched), ``process_id`` and ``thread_id`` with nulls as -1.

    Columns ``rank, process_id, correlation_id, dur_ns, start_ns, category, name, kind,
    thread_id, api_start_ns``; ``columns``: only these, in that order (the names as
    strings of 1M kernels are 0.1 GB that :func:`op_tree` never reads)."""
    # launch_join's rows narrowed before the join: only the columns kept are gathered
    # (ngp17, 1M kernels: the full 40-column frame was a 0.3 GB transient)
    idx = links.launch_links(tl)["api_row"]
    api = tl.api.select("thread_id")
    rows = tl.gpu.select(
        "rank", "process_id", "correlation_id", "dur_ns", "start_ns", "category", "name",
        "kind", links.launch_starts(tl), _row=idx
    ).filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    row = rows["_row"]
    def want(c: str) -> bool:
        return columns is None or c in columns

    out: list[pl.Expr | pl.Series] = [e for c, e in (
        ("rank", pl.col("rank")), ("process_id", pl.col("process_id").fill_null(-1)),
        ("correlation_id", pl.col("correlation_id")), ("dur_ns", pl.col("dur_ns")),
        ("start_ns", pl.col("start_ns")), ("category", pl.col("category").cast(pl.String)),
        ("name", pl.col("name").cast(pl.String)), ("kind", pl.col("kind").cast(pl.String)))
        if want(c)]
    if want("thread_id"):
        out.append(api["thread_id"].gather(row).fill_null(-1).alias("thread_id"))
    if want("api_start_ns"):
        out.append(pl.col("api_start_ns"))
    return rows.select(out)


def launch_owners(ranges: pl.DataFrame, linked: pl.DataFrame) -> np.ndarray:
    """Row index in ``ranges`` of the innermost range open around each launch call of
    ``linked`` (-1 = none), by :func:`traceparse.links.innermost_range`: the same rule as
    :func:`traceparse.links.kernel_ranges` (thread-local stack; NVTX start/end ranges are
    process-wide)."""
    if ranges.height == 0 or linked.height == 0:
        return np.full(linked.height, -1, dtype=np.int64)
    marked = ranges.with_columns(pl.int_range(0, ranges.height).cast(pl.String).alias("domain"))
    hit = links.innermost_range(
        linked.select("rank", "process_id", "thread_id", "api_start_ns"), marked,
        time_col="api_start_ns", group=("rank", "process_id", "thread_id"), prefix="_own_",
        wide_kinds=links.PROCESS_RANGE_KINDS, wide_group=("rank", "process_id"))
    out: np.ndarray = hit["_own_domain"].cast(pl.Int64).fill_null(-1).to_numpy()
    return out


def nest_ranges(ranges: pl.DataFrame) -> np.ndarray:
    """Parent (row index, -1 = none) of each range by time nesting per (rank, process_id,
    thread_id): sorted by start (longer first at equal starts), a range's parent is the
    innermost range still open when it starts."""
    ev = ranges.select(
        pl.struct("rank", "process_id", "thread_id").rank("dense").alias("_g"), "start_ns",
        "end_ns", pl.int_range(0, ranges.height, dtype=pl.Int64).alias("_i")
    ).sort("_g", "start_ns", pl.col("end_ns"), descending=[False, False, True])
    parent = np.full(ranges.height, -1, dtype=np.int64)
    stack: list[tuple[int, int]] = []  # (range idx, end_ns)
    last_grp = None
    for g, s, e, i in ev.iter_rows():
        if g != last_grp:
            stack.clear()
            last_grp = g
        while stack and stack[-1][1] <= s:
            stack.pop()
        parent[i] = stack[-1][0] if stack else -1
        stack.append((i, e))
    return parent


def step_ranges(tl: Timeline, ranges: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``ranges`` that are the steps of :func:`traceparse.analyses.steps.
    step_windows` (one per rank, process and start): ``_i`` (row index), ``rank,
    process_id, start_ns, end_ns``, sorted by rank, process and start."""
    from traceparse.analyses.steps import step_windows

    w = step_windows(tl).select("rank", "start_ns", "end_ns")
    return (ranges.with_row_index("_i").join(w, on=["rank", "start_ns", "end_ns"],
                                             how="semi")
            .unique(["rank", "process_id", "start_ns"], keep="first", maintain_order=True)
            .sort("rank", "process_id", "start_ns"))


def adopt_into_steps(tl: Timeline, ranges: pl.DataFrame, parent: np.ndarray) -> np.ndarray:
    """``parent`` with every top-level range (no parent on its own thread) that is not a
    step and lies wholly inside a step of its rank and process made a child of that step.

    Ranges nest per thread, and a step range is open on one thread only: the ranges of
    autograd's backward thread (``autograd::engine::evaluate_function: ...``) or of a data
    loader thread, inside the step's window, would otherwise sit beside the step as roots
    of their own, and the step's ``inclusive_ns`` would leave out the GPU work the step ran.
    A range that crosses a step's start or end stays where it is."""
    top = np.flatnonzero(parent < 0)
    if top.size == 0 or ranges.height == 0:
        return parent
    steps = step_ranges(tl, ranges)
    if steps.height == 0:
        return parent
    out = parent.copy()
    is_step = np.zeros(ranges.height, dtype=bool)
    is_step[steps["_i"].to_numpy()] = True
    top = top[~is_step[top]]
    rank = ranges["rank"].to_numpy()[top]
    proc = ranges["process_id"].to_numpy()[top]
    start = ranges["start_ns"].to_numpy()[top]
    end = ranges["end_ns"].to_numpy()[top]
    for (r, p), st in steps.group_by("rank", "process_id", maintain_order=True):
        rows = np.flatnonzero((rank == r) & (proc == p))
        if rows.size == 0:
            continue
        s0, s1 = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
        k = np.searchsorted(s0, start[rows], side="right") - 1
        kk = np.maximum(k, 0)
        ok = (k >= 0) & (end[rows] <= s1[kk])
        out[top[rows[ok]]] = st["_i"].to_numpy()[kk[ok]]
    return out


def _step_of_orphans(tl: Timeline, ranges: pl.DataFrame, linked: pl.DataFrame,
                     owner: np.ndarray) -> np.ndarray:
    """Per row of ``linked``: the index in ``ranges`` of the step of its rank and process
    whose window holds its launch call, for rows without an owning range (``owner < 0``);
    -1 elsewhere."""
    if not (owner < 0).any():
        return np.full(linked.height, -1, dtype=np.int64)
    return orphans_in_steps(step_ranges(tl, ranges), linked, owner)


def orphans_in_steps(steps: pl.DataFrame, linked: pl.DataFrame, owner: np.ndarray
                     ) -> np.ndarray:
    """Per row of ``linked`` without an owning range (``owner < 0``): the ``_i`` of the
    step in ``steps`` (``rank``, ``process_id``, ``start_ns``, ``end_ns``, ``_i``; sorted
    by start within each rank and process) whose window holds its launch call
    (``api_start_ns``); -1 elsewhere and for rows in no step."""
    out = np.full(linked.height, -1, dtype=np.int64)
    orphan = owner < 0
    if not orphan.any() or steps.height == 0:
        return out
    rank = linked["rank"].to_numpy()
    proc = linked["process_id"].to_numpy()
    t = linked["api_start_ns"].to_numpy()
    for (r, p), st in steps.group_by("rank", "process_id", maintain_order=True):
        rows = np.flatnonzero(orphan & (rank == r) & (proc == p))
        if rows.size == 0:
            continue
        starts, ends = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
        k = np.searchsorted(starts, t[rows], side="right") - 1
        ok = (k >= 0) & (t[rows] < ends[np.maximum(k, 0)])
        out[rows[ok]] = st["_i"].to_numpy()[k[ok]]
    return out


def op_tree(tl: Timeline, *, view: str = "full", max_depth: int | None = None,
            kinds: Sequence[str] = ("kernel",), keep_empty: bool = False,
            merge_steps: bool = True, by_rank: bool = False) -> pl.DataFrame:
    """The call tree with GPU time per node, top-down (depth-first, heaviest child first).

    Args:
        tl: the timeline.
        view: which ranges form the tree: ``full``, ``ops``, ``modules`` or ``python``.
        max_depth: keep nodes with ``depth <= max_depth`` (root is depth 0); their
            ``inclusive_ns`` still holds everything below.
        kinds: GPU activity kinds rolled up (default kernels only).
        keep_empty: also list ranges that own no GPU time (default: hidden).
        merge_steps: name every ``ProfilerStep#N`` ``ProfilerStep#*`` (one subtree).
        by_rank: one subtree per rank (see :func:`rank_count`): paths are merged within a
            rank only, so a range that each of two GPUs runs once is two nodes of
            ``calls = 1`` each with its own GPU time, not one node of ``calls = 2``
            holding both GPUs' time. The root stays the total of every rank; its
            children (``[no launch call]`` and ``[outside any range]`` included) are
            listed rank by rank, and a ``rank`` column follows ``depth`` (null at
            the root).

    Returns:
        ``node_id, parent_id, depth, name, kind, calls, inclusive_ns, exclusive_ns,
        inclusive_pct, kernels, kernels_exclusive, compute_ns, communication_ns,
        memory_ns`` (see the module docstring); ``node_id`` 0 is the root, whose
        ``inclusive_ns`` is the summed duration of every activity of ``kinds``.
    """
    ranges = view_ranges(tl, view, merge_steps=merge_steps)
    acts = launched_activities(tl, kinds, columns=("rank", "process_id", "dur_ns", "category",
                                                     "thread_id", "api_start_ns"))
    linked = acts.filter(pl.col("api_start_ns").is_not_null())
    parent = adopt_into_steps(tl, ranges, nest_ranges(ranges))
    owner = launch_owners(ranges, linked)

    nodes, r_path, child = path_nodes(ranges, parent, by_rank)
    p_name = nodes.name
    act_node = np.full(acts.height, 1, dtype=np.int64)
    is_linked = acts["api_start_ns"].is_not_null().to_numpy()
    if ranges.height:
        linked_node = np.where(owner >= 0, r_path[np.maximum(owner, 0)], 2)
        step = _step_of_orphans(tl, ranges, linked, owner)
        has = step >= 0
        # one [thread without ranges] node per step path, made in the order the orphans
        # first reach it, then every orphan mapped at once
        paths, first, inv = np.unique(r_path[step[has]], return_index=True,
                                      return_inverse=True)
        made = np.zeros(paths.size, dtype=np.int64)
        for k in np.argsort(first, kind="stable").tolist():
            made[k] = child(int(paths[k]), OTHER_THREAD, "")
        linked_node[has] = made[inv]
        act_node[is_linked] = linked_node
    else:
        act_node[is_linked] = 2
    if by_rank:
        # [no launch call] and [outside any range] of each rank, in rank order
        act_rank = acts["rank"].to_numpy()
        for fixed in (1, 2):
            on = act_node == fixed
            for r in np.unique(act_rank[on]).tolist():
                act_node[on & (act_rank == r)] = child(0, p_name[fixed], "", int(r))
    n = len(p_name)
    dur = acts["dur_ns"].to_numpy().astype(np.int64)
    excl = np.bincount(act_node, weights=dur, minlength=n).astype(np.int64)
    kexcl = np.bincount(act_node, minlength=n).astype(np.int64)
    # one mask per category compared in polars (an object array of every activity's
    # category string compared three times was 0.13 s per million kernels)
    cats = acts.select((pl.col("category") == c).fill_null(False).alias(c) for c in TREE_CATEGORIES)
    cat_excl: dict[str, np.ndarray] = {}
    for c in TREE_CATEGORIES:
        m = cats[c].to_numpy()
        cat_excl[c] = np.bincount(act_node[m], weights=dur[m], minlength=n).astype(np.int64)
    return tree_frame(nodes, excl, kexcl, cat_excl, max_depth=max_depth,
                       keep_empty=keep_empty, by_rank=by_rank)


class _Nodes(NamedTuple):
    """The tree's nodes by id (parents before children): parent (-1 for the root), name,
    kind, depth, calls and rank (-1: none)."""

    parent: list[int]
    name: list[str]
    kind: list[str]
    depth: list[int]
    calls: list[int]
    rank: list[int]


def path_nodes(ranges: pl.DataFrame, parent: np.ndarray, by_rank: bool
               ) -> tuple[_Nodes, np.ndarray, Callable[..., int]]:
    """:func:`op_tree`'s nodes of the range paths: node 0 the root, 1 ``[no launch
    call]``, 2 ``[outside any range]``, then one node per distinct path of ``ranges``
    (``parent``: each range's parent row, -1 none), made in start order; each range's
    node (``r_path``) and ``child(path, name, kind, rank=-1)``, which makes (or finds)
    the node of ``path`` + ``name`` (below the root of a ``by_rank`` tree ``rank`` is part
    of the path)."""
    nodes = _Nodes([-1, 0, 0], [ROOT, UNLINKED, OUTSIDE], ["", "", ""], [0, 1, 1],
                   [0, 0, 0], [-1, -1, -1])
    p_parent, p_name, p_kind, p_depth, p_calls, p_rank = nodes
    intern: dict[tuple[int, str, str, int], int] = {}

    def child(pp: int, name: str, kind: str, rank: int = -1) -> int:
        top = by_rank and pp == 0
        key = (pp, name, kind, rank if top else -1)
        node = intern.get(key)
        if node is None:
            node = len(p_name)
            intern[key] = node
            p_parent.append(pp)
            p_name.append(name)
            p_kind.append(kind)
            p_depth.append(p_depth[pp] + 1)
            p_calls.append(0)
            p_rank.append(rank if top else p_rank[pp])
        return node

    r_path = np.full(ranges.height, -1, dtype=np.int64)
    order = np.argsort(ranges["start_ns"].to_numpy(), kind="stable")
    names = ranges["name"].to_list()
    rkinds = ranges["kind"].to_list()
    rranks = ranges["rank"].to_list()
    for i in order.tolist():
        # a range's parent gets its path first, even one that starts at the same instant
        # and comes later in the table (else the child was filed under the root)
        chain = []
        j = i
        while j >= 0 and r_path[j] < 0:
            chain.append(j)
            j = int(parent[j])
        node = int(r_path[j]) if j >= 0 else 0
        for k in reversed(chain):
            node = child(node, names[k], rkinds[k], rranks[k])
            p_calls[node] += 1
            r_path[k] = node
    return nodes, r_path, child


def unranged_tree(sums: pl.DataFrame, *, max_depth: int | None = None,
                  by_rank: bool = False) -> pl.DataFrame:
    """:func:`op_tree` (kernels, any view) of a trace whose host ranges are none of the
    tree's kinds, from per-rank sums of its kernels: ``rank``, ``linked`` (the kernel has a
    launch call, :func:`traceparse.links.launch_links`), ``kernels``, ``dur_ns`` and
    ``compute_ns``, ``communication_ns``, ``memory_ns`` (``dur_ns`` by category). Such a
    tree is the root, ``[no launch call]`` and ``[outside any range]`` (one of each per
    rank with ``by_rank``, in rank order, made in that order as :func:`op_tree` makes
    them), so sums of pieces of the trace give it exactly.

    Example:
        rank 0: 3 linked kernels of 30 ns (compute), 1 unlinked of 5 ns (memory) ->
        ``[all kernels]`` 35 ns, ``[outside any range]`` 30 ns, ``[no launch call]`` 5 ns.
    """
    nodes = _Nodes([-1, 0, 0], [ROOT, UNLINKED, OUTSIDE], ["", "", ""], [0, 1, 1],
                   [0, 0, 0], [-1, -1, -1])
    at: dict[tuple[int, int], int] = {}
    for fixed, linked in ((1, False), (2, True)):
        for r in sorted(sums.filter(pl.col("linked") == linked)["rank"].unique().to_list()):
            if by_rank:
                at[(fixed, int(r))] = len(nodes.name)
                nodes.parent.append(0)
                nodes.name.append(nodes.name[fixed])
                nodes.kind.append("")
                nodes.depth.append(1)
                nodes.calls.append(0)
                nodes.rank.append(int(r))
            else:
                at[(fixed, int(r))] = fixed
    n = len(nodes.name)
    excl, kexcl = np.zeros(n, np.int64), np.zeros(n, np.int64)
    cat_excl = {c: np.zeros(n, np.int64) for c in TREE_CATEGORIES}
    for row in sums.iter_rows(named=True):
        node = at[(2 if row["linked"] else 1, int(row["rank"]))]
        excl[node] += row["dur_ns"]
        kexcl[node] += row["kernels"]
        for c in TREE_CATEGORIES:
            cat_excl[c][node] += row[f"{c}_ns"]
    return tree_frame(nodes, excl, kexcl, cat_excl, max_depth=max_depth, keep_empty=False,
                       by_rank=by_rank)


def tree_frame(nodes: _Nodes, excl: np.ndarray, kexcl: np.ndarray,
                cat_excl: dict[str, np.ndarray], *, max_depth: int | None, keep_empty: bool,
                by_rank: bool) -> pl.DataFrame:
    """:func:`op_tree`'s frame from its nodes and each node's own (exclusive) time, count
    and time per category: sums up the tree, orders it depth-first (heaviest child first)
    and cuts it."""
    p_parent, p_name, p_kind, p_depth, p_calls, p_rank = nodes
    n = len(p_name)
    incl, kincl = excl.copy(), kexcl.copy()
    cat_incl = {c: v.copy() for c, v in cat_excl.items()}
    for node in range(n - 1, 0, -1):  # children always have larger ids than parents
        par = p_parent[node]
        incl[par] += incl[node]
        kincl[par] += kincl[node]
        for c in TREE_CATEGORIES:
            cat_incl[c][par] += cat_incl[c][node]
    children: dict[int, list[int]] = {}
    for node in range(1, n):
        children.setdefault(p_parent[node], []).append(node)
    out: list[int] = []
    todo = [0]
    while todo:
        node = todo.pop()
        if node and ((not keep_empty and incl[node] == 0) or (by_rank and node in (1, 2))):
            continue
        if max_depth is not None and p_depth[node] > max_depth:
            continue
        out.append(node)
        kids = sorted(children.get(node, []), key=lambda k: (
            p_rank[k] if by_rank else 0, -incl[k], p_name[k]))
        todo.extend(reversed(kids))
    idx = np.array(out, dtype=np.int64)
    total = int(incl[0])
    frame = pl.DataFrame({
        "node_id": idx,
        "parent_id": np.array([p_parent[i] for i in out], dtype=np.int64),
        "depth": np.array([p_depth[i] for i in out], dtype=np.int32),
        **({"rank": pl.Series([p_rank[i] if i else None for i in out], dtype=pl.Int32)}
           if by_rank else {}),
        "name": [p_name[i] for i in out],
        "kind": [p_kind[i] for i in out],
        "calls": np.array([p_calls[i] for i in out], dtype=np.int64),
        "inclusive_ns": incl[idx],
        "exclusive_ns": excl[idx],
        "kernels": kincl[idx],
        "kernels_exclusive": kexcl[idx],
        **{f"{c}_ns": cat_incl[c][idx] for c in TREE_CATEGORIES},
    })
    frame = frame.with_columns(
        pl.when(pl.col("parent_id") < 0).then(None).otherwise(pl.col("parent_id"))
        .alias("parent_id"),
        (pl.col("inclusive_ns") * 100.0 / total if total else pl.lit(None, pl.Float64))
        .alias("inclusive_pct"))
    return frame.select("node_id", "parent_id", "depth", *(["rank"] if by_rank else []),
                        "name", "kind", "calls",
                        "inclusive_ns", "exclusive_ns", "inclusive_pct", "kernels",
                        "kernels_exclusive", *(f"{c}_ns" for c in TREE_CATEGORIES))


def rank_count(tl: Timeline) -> int:
    """Distinct ranks among the GPU rows and host ranges of ``tl`` (what ``tree`` and
    ``layers`` split by when it is more than one)."""
    ranks = pl.concat([tl.gpu.select(pl.col("rank").cast(pl.Int64)),
                       tl.ranges.select(pl.col("rank").cast(pl.Int64))])
    return int(ranks["rank"].drop_nulls().n_unique())


def splits_by_rank(tl: Timeline, by: str = "rank") -> bool:
    """Whether ``tree`` / ``layers`` (and the summary's tree and layer sections, which
    follow them) give one subtree per rank: ``by`` is ``"rank"`` (their default) and the
    trace has several ranks (:func:`rank_count`). The one place this rule is written."""
    return by == "rank" and rank_count(tl) > 1


def check_tree(tree: pl.DataFrame) -> pl.DataFrame:
    """Raise ``AssertionError`` unless every node of a tree built without ``max_depth`` has
    ``inclusive_ns == exclusive_ns + sum(children inclusive_ns)`` and category parts that
    sum to ``inclusive_ns``. Returns ``tree`` for chaining."""
    kids = (tree.filter(pl.col("parent_id").is_not_null())
            .group_by("parent_id").agg(pl.col("inclusive_ns").sum().alias("_kids")))
    j = tree.join(kids, left_on="node_id", right_on="parent_id", how="left")
    parts = pl.sum_horizontal(*(f"{c}_ns" for c in TREE_CATEGORIES))
    bad = j.filter(parts != pl.col("inclusive_ns"))
    if bad.height:
        raise AssertionError(f"category parts do not sum: {bad.row(0, named=True)}")
    bad = j.filter(pl.col("inclusive_ns")
                   != pl.col("exclusive_ns") + pl.col("_kids").fill_null(0))
    if bad.height:
        raise AssertionError(f"node != exclusive + children: {bad.row(0, named=True)}")
    return tree
