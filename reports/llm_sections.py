"""Report sections for LLM traces: the per-phase table and the op / module tree with an
icicle chart.

The numbers are those of ``traceparse summary`` (the ``phases`` and ``op_tree`` sections of
:func:`traceparse.analyses.summary.summarize`, computed once there and copied here), plus a
deeper cut of the same tree (per rank on several ranks, as the summary's) for the icicle
(:data:`ICICLE_DEPTH` levels, nodes narrower than :data:`ICICLE_MIN_PCT` % of the root left
out, with a visible note).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from traceparse import units
from traceparse.analyses import llm_summary, optree
from traceparse.analyses import summary as summary_mod
from traceparse.analyses.steps import unrecorded_work_end
from traceparse.reports.options import rows
from traceparse.timeline import Timeline

if TYPE_CHECKING:
    from traceparse.reports.options import ReportOptions

ICICLE_DEPTH = 8
ICICLE_MIN_PCT = 0.2
_ROW_PX, _WIDTH_PX = 20, 960
_KIND_COLORS = {"": "#9aa5b1", "profiler_step": "#8172B3", "user_annotation": "#4C72B0",
                "nvtx_push_pop": "#4C72B0", "nvtx_start_end": "#4C72B0",
                "cpu_op": "#DD8452", "python_function": "#55A868", "other": "#C44E52"}


def _col(key: str, label: str, fmt: str = "text") -> dict[str, str]:
    return {"key": key, "label": label, "fmt": fmt}


def icicle_svg(nodes: list[dict[str, Any]]) -> str:
    """An icicle chart (root on top, children below, width = inclusive kernel time) as an
    inline ``<svg>`` without external references; every name is HTML-escaped.

    ``nodes`` are :func:`traceparse.analyses.optree.op_tree` rows in its depth-first order
    (``node_id``, ``parent_id``, ``depth``, ``name``, ``kind``, ``inclusive_ns``,
    ``inclusive_pct``; ``rank`` in a per-rank tree: named in the hover text, and before the
    name of each rank's top ranges)."""
    if not nodes or not nodes[0]["inclusive_ns"]:
        return ""
    total = nodes[0]["inclusive_ns"]
    x_of: dict[int, float] = {nodes[0]["node_id"]: 0.0}
    next_x: dict[int, float] = {}
    depth = max(n["depth"] for n in nodes) + 1
    parts = [f'<svg class="icicle" viewBox="0 0 {_WIDTH_PX} {depth * _ROW_PX}" '
             f'width="100%" role="img" aria-label="kernel time icicle">']
    for n in nodes:
        nid, par = n["node_id"], n["parent_id"]
        if par is not None:
            if par not in x_of:
                continue
            x_of[nid] = next_x.get(par, x_of[par])
        w = n["inclusive_ns"] / total * _WIDTH_PX
        next_x[par if par is not None else -1] = x_of[nid] + w
        x, y = x_of[nid], n["depth"] * _ROW_PX
        rank = f'rank {n["rank"]}: ' if n.get("rank") is not None else ""
        tip = html.escape(f'{rank}{n["name"]} — {n["inclusive_ns"] / 1e6:.3f} ms '
                          f'({n["inclusive_pct"]:.1f}% of kernel time)')
        color = _KIND_COLORS.get(str(n.get("kind") or ""), "#9aa5b1")
        parts.append(f'<g><title>{tip}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
                     f'height="{_ROW_PX - 2}" fill="{color}" stroke="#fff"/>')
        chars = int(w / 7)
        if chars >= 4:
            # a rank's top ranges carry its number, so the side-by-side ranks read apart
            text = (f'r{n["rank"]} {n["name"]}' if rank and n["depth"] == 1
                    else str(n["name"]))
            label = html.escape(text) if len(text) <= chars else html.escape(
                text[: chars - 1] + "…")
            parts.append(f'<text x="{x + 3:.2f}" y="{y + 14}" font-size="11">{label}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def llm_sections(tl: Timeline, opts: ReportOptions) -> dict[str, Any]:
    """``phases`` (with its kernel mix), ``layers`` and ``op_tree`` payload sections (each
    only when the trace has it)."""
    res = summary_mod.summarize(tl, top=opts.top_n,
                                sections=("phases", "phase_mix", "layers", "op_tree"))
    return sections_of(tl, res["sections"],
                       lambda view, ranked: optree.op_tree(tl, view=view,
                                                           max_depth=ICICLE_DEPTH,
                                                           by_rank=ranked))


def sections_of(tl: Timeline, secs: dict[str, pl.DataFrame],
                icicle: Callable[[str, bool], pl.DataFrame]) -> dict[str, Any]:
    """:func:`llm_sections` from the summary's ``phases``, ``phase_mix``, ``layers`` and
    ``op_tree`` sections ``secs`` and ``icicle(view, by_rank)``, the op tree cut at
    :data:`ICICLE_DEPTH` levels (the chunked report gives both from its pieces)."""
    out: dict[str, Any] = {}
    ph: pl.DataFrame = secs["phases"]
    if ph.height:
        cols = [_col("phase", "phase"), _col("steps", "steps", "int"),
                _col("step_p50_ns", "P50 (ms)", "ms"), _col("step_p95_ns", "P95 (ms)", "ms"),
                _col("step_p99_ns", "P99 (ms)", "ms"),
                _col("tokens_per_step", "tokens/step", "int"),
                _col("tokens_per_s", "tokens/s", "int"), _col("kernel_ns", "kernel (ms)", "ms"),
                _col("tflop_per_s", "TFLOP/s", "num"), _col("compute_pct", "compute %", "pct"),
                _col("launch_overhead_pct", "launch %", "pct"), _col("idle_pct", "idle %", "pct")]
        out["phases"] = {
            # the heading names the phases this trace has (a training trace: train only)
            "names": list(dict.fromkeys(str(p) for p in ph["phase"].to_list())),
            "table": {"columns": [c for c in cols if c["key"] in ph.columns], "rows": rows(ph)},
            "note": ("Steps found from serving annotations (SGLang step[...], vLLM "
                     "execute_..., capture_...), model-runner frames or ProfilerStep#N and "
                     "classified by the rule in docs/llm.md; step time runs from the step's "
                     "start (or the earlier steps' finish) to the end of the last GPU work "
                     "the step launched, less any wait of its work behind GPU work launched "
                     "before the recording began. Tokens come from the annotations (or "
                     "[B, S, H] op shapes); percentages are of the summed step windows."
                     + _unrecorded_note(tl))}
        mix: pl.DataFrame = secs["phase_mix"]
        if mix.height:
            out["phases"]["mix_table"] = {
                "columns": [_col("phase", "phase"), _col("kernel_class", "kernel class"),
                            _col("kernels", "kernels", "int"),
                            _col("kernel_ns", "kernel (ms)", "ms"),
                            _col("pct", "% of phase kernel time", "pct"),
                            _col("top_kernel", "longest-running kernel")],
                "rows": rows(mix)}
    lay: pl.DataFrame = secs["layers"]
    if lay.height:
        ranked = "rank" in lay.columns  # several ranks: each rank's groups (traceparse layers)
        out["layers"] = {
            "table": {"columns": [*([_col("rank", "rank", "int")] if ranked else []),
                                  _col("parent", "under"), _col("layer", "layer"),
                                  _col("layers", "layers", "int"), _col("calls", "calls", "int"),
                                  _col("median_ns", "median (ms)", "ms"),
                                  _col("min_ns", "min (ms)", "ms"),
                                  _col("max_ns", "max (ms)", "ms"),
                                  _col("slowest", "slowest layer", "int"),
                                  _col("spread_pct", "spread %", "pct"),
                                  _col("same_structure", "same ops", "bool")],
                      "rows": rows(lay)},
            "note": ("Repeated layers (siblings named by a layer word and an index: "
                     "DecoderLayer_N, Block_N, layers.N, blocks.N; at least 3) in one row: "
                     "per-layer kernel time, spread = (max - min) / median. 'same ops' = every "
                     "layer runs the same op sequence and kernel counts."
                     + (f" Several ranks: each rank's layers are its own groups (one GPU's "
                        f"calls and times, as traceparse layers prints them), its "
                        f"{llm_summary.LAYER_GROUPS} heaviest shown." if ranked else ""))}
    tree: pl.DataFrame = secs["op_tree"]
    if tree.height:
        view = str(tree["view"][0])
        ranked = "rank" in tree.columns  # several ranks: one subtree each (traceparse tree)
        rank_col = ["rank"] if ranked else []
        full = icicle(view, ranked)
        shown = full.filter((pl.col("inclusive_pct") >= ICICLE_MIN_PCT) | (pl.col("depth") == 0))
        out["op_tree"] = {
            "view": view,
            "nodes": rows(shown.select("node_id", "parent_id", "depth", *rank_col, "name",
                                       "kind", "inclusive_ns", "inclusive_pct")),
            "table": {"columns": [*([_col("rank", "rank", "int")] if ranked else []),
                                  _col("depth", "depth", "int"), _col("name", "node"),
                                  _col("calls", "calls", "int"),
                                  _col("inclusive_ns", "inclusive (ms)", "ms"),
                                  _col("exclusive_ns", "exclusive (ms)", "ms"),
                                  _col("inclusive_pct", "% of kernel time", "pct"),
                                  _col("kernels", "kernels", "int")],
                      "rows": rows(tree.with_columns(
                          (pl.lit("\u2003").repeat_by(pl.col("depth")).list.join("")
                           + pl.col("name")).alias("name")))},
            "note": (f"Kernel time rolled up the {view} tree: every kernel sits under the "
                     "innermost range open around its launch call (graph replays under the "
                     "graph launch); the root is the total kernel time. Icicle: "
                     f"{ICICLE_DEPTH} levels, nodes under {ICICLE_MIN_PCT}% of the root "
                     f"omitted ({full.height - shown.height} of {full.height}). Table: "
                     f"{llm_summary.TREE_DEPTH} levels, nodes of at least "
                     f"{llm_summary.TREE_MIN_PCT}%."
                     + (" Several ranks: one subtree per rank (calls and times are one GPU's, "
                        "as traceparse tree prints them; the root is every rank's total and "
                        "percentages are of it); the table keeps the first rows of each "
                        "rank's subtree, the icicle puts the ranks side by side (hover: rank)."
                        if ranked else ""))}
    return out


def _unrecorded_note(tl: Timeline) -> str:
    """Where the GPU ran work launched before the recording, ahead of the steps' own (the
    queue of :func:`traceparse.analyses.steps.unrecorded_work_end`): until when, per rank,
    from the first GPU activity; empty where it did not."""
    q = unrecorded_work_end(tl)
    if not q.height:
        return ""
    t0 = tl.gpu["start_ns"].min()
    at = ", ".join(f"+{units.duration(int(e) - int(t0))} on rank {r}"  # type: ignore[arg-type]
                   for r, e in q.iter_rows())
    # launched before the recording: its activities may be in the trace without their
    # launch calls (train_gpt2s_b32's 849 kernels) or missing (the SGLang capture's hold)
    return (" Here the GPU ran work launched before the recording began until "
            f"{at} (from the first GPU activity); the steps' times leave out their work's "
            "wait behind it.")

