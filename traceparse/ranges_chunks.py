"""The ranged sections of ``summary --executor chunks|dask`` (docs/performance.md,
"Chunked summary"): an nsys export's NVTX ranges read **whole** (the GPU rows never are),
the op tree's range part built once from them (:mod:`traceparse.analyses.chunked_ranges`),
each window's kernels given their owner in pass 1, and ``phases``, ``phase_mix``,
``layers``, ``op_tree`` composed from the merged sums."""

from __future__ import annotations

from typing import Any, NamedTuple

import polars as pl

from traceparse.analyses import chunked_ranges as cr
from traceparse.nsys import chunks
from traceparse.timeline import Timeline

#: The range kinds the NVTX table gives (:data:`traceparse.nsys.ranges.KIND_BY_TYPE`): what
#: the sections here read from the ranges read whole; marks (no end) none of them reads.
NVTX_KINDS = frozenset({"nvtx_push_pop", "nvtx_start_end", "nvtx_mark"})
#: NVTX event types that become ranges (:data:`traceparse.nsys.ranges.KIND_BY_TYPE`).
_NVTX_RANGE_TYPES = (34, 59, 60, 70, 71)
#: The op tree's view of an nsys export: ``modules`` needs ``nn.Module`` Python frames,
#: which nsys does not record (:func:`traceparse.analyses.llm_summary.tree_view`).
VIEW = "ops"


class Ranged(NamedTuple):
    """The whole ranges of an export: their timeline (the NVTX ranges, memory's rows in
    memory's order, nothing else), the op tree's range part, and the steps they give and
    how many have a known phase (:func:`traceparse.analyses.chunked_ranges.steps_of`)."""

    tl: Timeline
    tree: cr.RangeTree
    steps: int
    known: int


def read_nvtx(plan: chunks.Plan) -> pl.DataFrame:
    """The export's NVTX ranges as the reader gives them in ``ranges`` (stably sorted by
    start, as the reader sorts them among the other host ranges; each GPU process's rank
    from the plan)."""
    from traceparse import schema
    from traceparse.nsys.db import NsysDB
    from traceparse.nsys.ranges import read_ranges

    with NsysDB(plan.path) as db:
        frame = read_ranges(db, chunks.read_strings(db), 0)[0]
    frame = frame.sort("start_ns", maintain_order=True)
    if plan.ranks and frame.height:
        mapped = pl.col("process_id").replace_strict(
            list(plan.ranks), list(plan.ranks.values()), default=None, return_dtype=pl.Int32)
        frame = frame.with_columns(pl.coalesce(mapped, pl.col("rank")).cast(pl.Int32)
                                   .alias("rank"))
    return schema.conform("ranges", frame)


def has_nvtx_ranges(db: Any) -> bool:
    """Whether the export (an open :class:`~traceparse.nsys.db.NsysDB`) has an NVTX range
    or mark (:data:`_NVTX_RANGE_TYPES`)."""
    from traceparse.nsys.db import q
    from traceparse.nsys.ranges import NVTX

    if not (db.has(NVTX) and "eventType" in db.columns(NVTX)):
        return False
    marks = ",".join("?" * len(_NVTX_RANGE_TYPES))
    return bool(db.fetchall(f"SELECT 1 FROM {q(NVTX)} WHERE eventType IN ({marks}) LIMIT 1",
                            _NVTX_RANGE_TYPES))


def ranged_of(plan: chunks.Plan) -> Ranged | None:
    """:func:`prepare` of an export with NVTX ranges (:func:`has_nvtx_ranges`), None
    without."""
    from traceparse.nsys.db import NsysDB

    with NsysDB(plan.path) as db:
        if not has_nvtx_ranges(db):
            return None
    return prepare(plan)


def without_nvtx(tl: Timeline) -> Timeline:
    """``tl``'s GPU rows and its ranges less the NVTX ones: the stub the verdict and the
    payload read once the whole NVTX ranges gave no step, so that no stub row looks like
    a step."""
    kind = pl.col("kind").cast(pl.String)
    return Timeline(gpu=tl.gpu, ranges=tl.ranges.filter(~kind.is_in(list(NVTX_KINDS))))


def prepare(plan: chunks.Plan) -> Ranged:
    """The :class:`Ranged` of the export (its NVTX ranges read once, whole). The op tree
    is split by rank when the plan gives two or more ranks (every GPU process its own:
    :mod:`traceparse.nsys.procs`), which :func:`sections` checks against the pieces."""
    tl = Timeline(ranges=read_nvtx(plan))
    by_rank = len(set(plan.ranks.values())) > 1
    steps, known = cr.steps_of(tl)
    return Ranged(tl, cr.range_tree(tl, VIEW, by_rank), steps, known)


def sections(ranged: Ranged, owners: pl.DataFrame, kernels: int, by_rank: bool,
             opts: Any) -> dict[str, pl.DataFrame]:
    """``phases``, ``phase_mix``, ``layers`` and ``op_tree`` of the export from the whole
    ranges and the merged owner sums of pass 1 (``owners``; ``kernels``: the file's kernel
    count; ``by_rank``: :func:`traceparse.analyses.optree.splits_by_rank` of the file).

    Raises:
        NotExact: a section is not exact from them (the caller names it).
    """
    from traceparse.analyses import layers, llm_summary

    if ranged.known:
        raise cr.NotExact(f"phases: {ranged.known} of the {ranged.steps} steps have a known "
                          "phase (the steps' figures are not computed in pieces)")
    if by_rank != ranged.tree.by_rank:
        raise cr.NotExact("op_tree: the ranks of the pieces are not the plan's")
    out = {"phases": pl.DataFrame(), "phase_mix": pl.DataFrame(),
           "layers": pl.DataFrame(), "op_tree": pl.DataFrame()}
    if not kernels:
        return out
    try:
        full = cr.tree(ranged.tree, owners)
    except cr.NotExact as exc:
        raise cr.NotExact(f"op_tree: {exc}") from None
    if by_rank:
        out["layers"] = llm_summary._per_rank_head(
            layers.layer_groups(None, view=VIEW, by_rank=True, tree=full),
            llm_summary.LAYER_GROUPS)
    else:
        out["layers"] = layers.layer_groups(None, view=VIEW, tree=full).head(
            llm_summary.LAYER_GROUPS)
    top = full.filter(pl.col("depth") <= llm_summary.TREE_DEPTH)
    out["op_tree"] = llm_summary.tree_top(top, VIEW, by_rank, opts)
    return out
