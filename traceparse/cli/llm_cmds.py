"""CLI commands for LLM traces: ``tree``, ``layers`` and ``steps --by phase``.

* ``tree TRACES...`` - GPU time rolled up the op / module / Python / NVTX tree
  (:mod:`traceparse.analyses.optree`);
* ``layers TRACES...`` - repeated transformer layers, one row per group with its spread
  (:mod:`traceparse.analyses.layers`);
* ``steps TRACES --by phase`` - the ``steps`` command's ``--by`` option (added here):
  each step classified prefill / decode / mixed / capture / train
  (:mod:`traceparse.analyses.phases`); with ``--summary`` one row per phase.

Several TRACES are several ranks of one run (concatenated, as ``report`` does).
"""

from __future__ import annotations

import click
import polars as pl

from traceparse.cli.common import emit_frame, output_options, traces_argument
from traceparse.cli.inputs import load_traces
from traceparse.cli.main import main
from traceparse.timeline import Timeline

_VIEW = click.option("--view", type=click.Choice(["full", "ops", "modules", "python"]),
                     default="ops", show_default=True,
                     help="Ranges forming the tree: ops (annotations, NVTX, cpu_op), modules "
                          "(nn.Module frames), python (python_function), full (all).")
_BY = click.option(
    "--by", "by", type=click.Choice(["rank", "path"]), default="rank", show_default=True,
    help="rank: on a trace of several ranks (GPUs), one row per rank and path, each rank's "
         "calls and GPU time its own, with a rank column; path: merge every rank's ranges "
         "of the same path into one row (calls and time summed over ranks). A single-rank "
         "trace gives the same output either way.")
_PCT = {"inclusive_pct": 2, "pct": 2, "spread_pct": 1, "slowest_vs_median_pct": 1,
        "vs_median_pct": 1}


def indent_names(tree: pl.DataFrame, *, width: int = 60) -> pl.DataFrame:
    """The tree for a text table: ``name`` indented two spaces per depth level."""
    return tree.with_columns(
        (pl.lit("  ").repeat_by(pl.col("depth")).list.join("") + pl.col("name"))
        .str.slice(0, width).alias("name"))


@main.command("tree")
@traces_argument
@click.option("--depth", "depth", type=click.IntRange(0, None), default=4, show_default=True,
              help="Deepest level listed (the root is 0); deeper time stays in inclusive_ns.")
@_VIEW
@click.option("--min-pct", "min_pct", type=float, default=0.0, show_default=True,
              help="Hide nodes under this percentage of the total kernel time.")
@_BY
@output_options
def tree_cmd(traces: tuple[str, ...], depth: int, view: str, min_pct: float, by: str,
             fmt: str, output: str | None, force: bool) -> None:
    """Kernel time per node of the op / module / Python / NVTX tree, top-down.

    Every kernel is placed under the innermost range open around its launch call; the root
    is the total kernel time, and kernels without a launch call are their own node.
    """
    from traceparse.analyses.optree import op_tree, splits_by_rank

    tl = load_traces(traces, timeline=True)
    frame = op_tree(tl, view=view, max_depth=depth, by_rank=splits_by_rank(tl, by))
    frame = frame.filter((pl.col("inclusive_pct") >= min_pct) | (pl.col("depth") == 0))
    if fmt == "table":
        frame = indent_names(frame).drop("node_id", "parent_id", "kind")
    emit_frame(frame, fmt, output, empty="no kernels in the trace, so no tree",
               decimals=_PCT)


@main.command("layers")
@traces_argument
@click.option("--view", type=click.Choice(["modules", "ops", "full"]), default="modules",
              show_default=True, help="Tree the layers are found in.")
@click.option("--per-layer", "per_layer", is_flag=True,
              help="One row per layer instead of one per group.")
@_BY
@output_options
def layers_cmd(traces: tuple[str, ...], view: str, per_layer: bool, by: str, fmt: str,
               output: str | None, force: bool) -> None:
    """Repeated layers (DecoderLayer_0.._N, layers.N, 'layer N' ranges) grouped into one row
    with the spread across layers, so one slow layer stands out."""
    from traceparse.analyses import layers
    from traceparse.analyses.optree import splits_by_rank

    tl = load_traces(traces, timeline=True)
    split = splits_by_rank(tl, by)
    frame = (layers.layer_table(tl, view=view, by_rank=split) if per_layer
             else layers.layer_groups(tl, view=view, by_rank=split))
    emit_frame(frame, fmt, output, decimals=_PCT,
               empty="no repeated layers found (needs at least 3 ranges or module frames "
                     "named like DecoderLayer_N, layers.N or 'layer N' that own kernels)")


def phase_frames(tl: Timeline, *, steps: str | None, summary: bool) -> pl.DataFrame:
    """What ``steps --by phase`` prints: per-step phases, or one row per phase."""
    from traceparse.analyses import phases

    table = phases.phase_steps(tl, steps=steps)
    return phases.phase_summary(table) if summary and table.height else table
