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

import functools
import os
from typing import Any

import click
import polars as pl

from traceparse.cli.common import emit, load_trace, output_options, render
from traceparse.cli.main import main
from traceparse.cli.perf_cmds import steps_cmd
from traceparse.errors import UsageError
from traceparse.timeline import Timeline, concat

_TRACES = click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=True))
_FORCE = click.option("--force", is_flag=True, help="Overwrite an existing output file.")
_VIEW = click.option("--view", type=click.Choice(["full", "ops", "modules", "python"]),
                     default="ops", show_default=True,
                     help="Ranges forming the tree: ops (annotations, NVTX, cpu_op), modules "
                          "(nn.Module frames), python (python_function), full (all).")
_PCT = {"inclusive_pct": 2, "pct": 2, "spread_pct": 1, "slowest_vs_median_pct": 1,
        "vs_median_pct": 1}


def _load_all(traces: tuple[str, ...]) -> Timeline:
    return concat([load_trace(t) for t in traces])


def _check_output(output: str | None, force: bool) -> None:
    if output is not None and os.path.exists(output) and not force:
        raise UsageError(output, "exists; pass --force to overwrite it")


def indent_names(tree: pl.DataFrame, *, width: int = 60) -> pl.DataFrame:
    """The tree for a text table: ``name`` indented two spaces per depth level."""
    return tree.with_columns(
        (pl.lit("  ").repeat_by(pl.col("depth")).list.join("") + pl.col("name"))
        .str.slice(0, width).alias("name"))


@main.command("tree")
@_TRACES
@click.option("--depth", "depth", type=click.IntRange(0, None), default=4, show_default=True,
              help="Deepest level listed (the root is 0); deeper time stays in inclusive_ns.")
@_VIEW
@click.option("--min-pct", "min_pct", type=float, default=0.0, show_default=True,
              help="Hide nodes under this percentage of the total kernel time.")
@output_options
@_FORCE
def tree_cmd(traces: tuple[str, ...], depth: int, view: str, min_pct: float, fmt: str,
             output: str | None, force: bool) -> None:
    """Kernel time per node of the op / module / Python / NVTX tree, top-down.

    Every kernel is placed under the innermost range open around its launch call; the root
    is the total kernel time, and kernels without a launch call are their own node.
    """
    from traceparse.analyses.optree import op_tree

    _check_output(output, force)
    frame = op_tree(_load_all(traces), view=view, max_depth=depth)
    frame = frame.filter((pl.col("inclusive_pct") >= min_pct) | (pl.col("depth") == 0))
    if fmt == "table":
        frame = indent_names(frame).drop("node_id", "parent_id", "kind")
    emit(render(frame, fmt, decimals=_PCT), output)


@main.command("layers")
@_TRACES
@click.option("--view", type=click.Choice(["modules", "ops", "full"]), default="modules",
              show_default=True, help="Tree the layers are found in.")
@click.option("--per-layer", "per_layer", is_flag=True,
              help="One row per layer instead of one per group.")
@output_options
@_FORCE
def layers_cmd(traces: tuple[str, ...], view: str, per_layer: bool, fmt: str,
               output: str | None, force: bool) -> None:
    """Repeated layers (DecoderLayer_0.._N, layers.N, 'layer N' ranges) grouped into one row
    with the spread across layers, so one slow layer stands out."""
    from traceparse.analyses import layers

    _check_output(output, force)
    tl = _load_all(traces)
    frame = layers.layer_table(tl, view=view) if per_layer else layers.layer_groups(tl,
                                                                                 view=view)
    emit(render(frame, fmt, decimals=_PCT), output)


def phase_frames(tl: Timeline, *, steps: str | None, summary: bool) -> pl.DataFrame:
    """What ``steps --by phase`` prints: per-step phases, or one row per phase."""
    from traceparse.analyses import phases

    table = phases.phase_steps(tl, steps=steps)
    return phases.phase_summary(table) if summary else table


def _install_by_phase() -> None:
    """Add ``--by step|phase`` to the ``steps`` command (defined in perf_cmds)."""
    if any(p.name == "by" for p in steps_cmd.params):
        return
    steps_cmd.params.append(click.Option(
        ["--by"], type=click.Choice(["step", "phase"]), default="step", show_default=True,
        help="phase: classify each step prefill/decode/mixed/capture/train (serving "
             "annotations, model-runner frames, then op shapes; see docs/llm.md); with "
             "--summary one row per phase (P50/P95/P99, tokens/s, attribution)."))
    original = steps_cmd.callback
    assert original is not None

    @functools.wraps(original)
    def callback(**kw: Any) -> Any:
        if kw.pop("by", "step") == "step":
            return original(**kw)
        traces = kw.get("traces") or kw.get("trace") or ()
        paths = (traces,) if isinstance(traces, str) else tuple(traces)
        regex = kw.get("steps", kw.get("step_regex"))
        frame = phase_frames(_load_all(paths), steps=regex, summary=bool(kw.get("summary")))
        if kw.get("force") is False:
            _check_output(kw.get("output"), False)
        return emit(render(frame, kw.get("fmt", "table"), decimals=_PCT), kw.get("output"))

    steps_cmd.callback = callback


_install_by_phase()
