"""The LLM sections of ``traceparse summary`` and the HTML report: per-phase table and the
top of the op / module tree. Both outputs take their numbers from these two functions.

* ``phases``: :func:`traceparse.analyses.phases.phase_summary` of the trace's steps, empty
  when no step has a phase (no serving annotation, runner frame, or ProfilerStep whose ops
  decide one).
* ``phase_mix``: :func:`traceparse.analyses.phases.phase_kernel_mix` of the same steps (top
  3 kernel classes per phase).
* ``layers``: :func:`traceparse.analyses.layers.layer_groups` in the tree's view, the
  :data:`LAYER_GROUPS` heaviest groups.
* ``op_tree``: :func:`traceparse.analyses.optree.op_tree` down to :data:`TREE_DEPTH`, nodes
  with at least :data:`TREE_MIN_PCT` % of the kernel time, at most ``2 * top`` rows (the root
  always first). View: ``modules`` when the trace has ``nn.Module`` frames that own kernels,
  else ``ops``. Empty when the trace has no kernels.

Several ranks (:func:`optree.splits_by_rank`): both sections follow ``traceparse tree`` /
``layers`` (``--by rank``, their default): the tree is ``op_tree(..., by_rank=True)`` and the groups
``layer_groups(..., by_rank=True)``, each with a ``rank`` column, so a node's calls and time
are one GPU's. The screen is shared out rank by rank rather than cut after the first rows
(which would show rank 0 alone): each rank keeps the first
``max(RANK_MIN_ROWS, (2 * top - 1) // ranks)`` rows of its own depth-first subtree (its
heaviest top-level ranges and what lies under them, as ``tree`` prints them) and its
:data:`LAYER_GROUPS` heaviest layer groups, so the ranks can be read against each other.
A single-rank trace gives the frames it gave before (no ``rank`` column).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse.analyses import layers, optree, phases
from traceparse.timeline import Timeline

TREE_DEPTH = 4
TREE_MIN_PCT = 1.0
LAYER_GROUPS = 3
MIX_TOP = 3
RANK_MIN_ROWS = 3


def _per_rank_head(frame: pl.DataFrame, rows: int) -> pl.DataFrame:
    """The first ``rows`` rows of each rank, in ``frame``'s order; rows without a rank (the
    tree's root) are kept."""
    return frame.filter(pl.col("rank").is_null()
                        | (pl.int_range(pl.len()).over("rank") < rows))


def tree_view(tl: Timeline) -> str:
    """``modules`` when ``nn.Module`` frames own kernel time, else ``ops``."""
    has_modules = tl.ranges.filter(
        (pl.col("kind").cast(pl.String) == "python_function")
        & pl.col("name").cast(pl.String).str.starts_with("nn.Module: ")).height > 0
    if has_modules:
        t = optree.op_tree(tl, view="modules", max_depth=None)
        if t.filter(pl.col("kind") == "python_function")["exclusive_ns"].sum() > 0:
            return "modules"
    return "ops"


def _has_kernels(tl: Timeline) -> bool:
    """Whether ``tl`` has a kernel (counted on the one column, not a filtered copy)."""
    return bool(tl.gpu.select((pl.col("kind") == "kernel").any()).item())


def phases_section(tl: Timeline, opts: Any) -> pl.DataFrame:
    """Per-phase figures (empty when no step has a phase other than ``unknown``)."""
    st = phases.phase_steps(tl)
    if st.height == 0 or st.filter(pl.col("phase") != "unknown").height == 0:
        return pl.DataFrame()
    return phases.phase_summary(st)


def phase_mix_section(tl: Timeline, opts: Any) -> pl.DataFrame:
    """Kernel classes per phase (empty when :func:`phases_section` is)."""
    st = phases.phase_steps(tl, attribution=False)
    if st.height == 0 or st.filter(pl.col("phase") != "unknown").height == 0:
        return pl.DataFrame()
    return phases.phase_kernel_mix(tl, st, top=MIX_TOP)


def layers_section(tl: Timeline, opts: Any) -> pl.DataFrame:
    """The heaviest repeated-layer groups (empty when there are none)."""
    if not _has_kernels(tl):
        return pl.DataFrame()
    if optree.splits_by_rank(tl):
        return _per_rank_head(layers.layer_groups(tl, view=tree_view(tl), by_rank=True),
                              LAYER_GROUPS)
    return layers.layer_groups(tl, view=tree_view(tl)).head(LAYER_GROUPS)


def op_tree_section(tl: Timeline, opts: Any) -> pl.DataFrame:
    """The top of the op / module tree (see the module docstring)."""
    if not _has_kernels(tl):
        return pl.DataFrame()
    view = tree_view(tl)
    by_rank = optree.splits_by_rank(tl)
    return tree_top(optree.op_tree(tl, view=view, max_depth=TREE_DEPTH, by_rank=by_rank),
                    view, by_rank, opts)


def tree_top(t: pl.DataFrame, view: str, by_rank: bool, opts: Any) -> pl.DataFrame:
    """The section's rows of the tree ``t`` (:func:`~traceparse.analyses.optree.op_tree`
    down to :data:`TREE_DEPTH` in ``view``, ``by_rank`` or not): the nodes of at least
    :data:`TREE_MIN_PCT` % and the root, at most ``2 * top`` rows shared out by rank (see
    the module docstring)."""
    t = t.filter((pl.col("inclusive_pct") >= TREE_MIN_PCT) | (pl.col("depth") == 0))
    budget = max(2 * int(getattr(opts, "top", 10)), 1)
    if by_rank:
        ranks = t["rank"].drop_nulls().n_unique()
        t = _per_rank_head(t, max(RANK_MIN_ROWS, (budget - 1) // max(ranks, 1)))
    else:
        t = t.head(budget)
    return t.with_columns(pl.lit(view).alias("view"))
