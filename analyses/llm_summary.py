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
    return layers.layer_groups(tl, view=tree_view(tl)).head(LAYER_GROUPS)


def op_tree_section(tl: Timeline, opts: Any) -> pl.DataFrame:
    """The top of the op / module tree (see the module docstring)."""
    if not _has_kernels(tl):
        return pl.DataFrame()
    view = tree_view(tl)
    t = optree.op_tree(tl, view=view, max_depth=TREE_DEPTH)
    t = t.filter((pl.col("inclusive_pct") >= TREE_MIN_PCT) | (pl.col("depth") == 0))
    top = int(getattr(opts, "top", 10))
    return t.head(max(2 * top, 1)).with_columns(pl.lit(view).alias("view"))
