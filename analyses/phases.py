"""Serving and training steps classified as prefill, decode, mixed, capture or train.

**Step windows** (the first source that finds any, per trace):

1. ``steps`` regex given: host ranges whose name matches it.
2. Serving step annotations (user annotations or NVTX ranges): SGLang
   ``step[EXTEND bs=15 toks=15360]`` / ``step[DECODE bs=32]``, vLLM
   ``execute_{tokens}_context_{n}(sq..)_generation_{m}(sq..)``, graph captures
   ``capture_{bs}_{MODE}``. Nested candidates collapse into the outermost one.
3. Model-runner frames (``python_function``, with_stack): SGLang ``forward_extend`` /
   ``forward_decode`` / ``forward_mixed``, vLLM ``execute_model`` (outermost only).
4. ``ProfilerStep#N`` ranges.
5. NVTX ranges and ``record_function`` annotations named as numbered steps (``step 3``,
   ``iteration 12``: :data:`traceparse.analyses.steps.AUTO_STEP_RE`, the rule of
   :func:`traceparse.analyses.steps.step_windows`), source ``step_annotation``.

A step's **GPU end** is the end of the last GPU activity launched (launch call start) inside
its host window; ``wall_ns = max(end_ns, gpu_end_ns) - start_ns``, so asynchronous work
launched by the step counts toward it.

**Phase rule**, first that applies (``phase_source`` says which):

``annotation``
    A serving step annotation inside or equal to the window: ``step[EXTEND|PREFILL ..]`` ->
    prefill, ``step[DECODE ..]`` -> decode, ``step[MIXED ..]`` -> mixed; ``execute_..``
    with ``context > 0`` and ``generation > 0`` -> mixed, only context -> prefill, only
    generation -> decode; ``capture_..`` -> capture (a CUDA/HIP graph capture).
``name``
    A range inside the window named (or a frame ending in) ``forward_extend`` / ``prefill``
    -> prefill, ``forward_decode`` / ``decode`` / ``decode_step`` -> decode,
    ``forward_mixed`` -> mixed, ``train_step`` -> train.
``shapes``
    Autograd backward ops (``autograd::engine::evaluate_function``) -> train; else the first
    input of ``aten::linear`` / ``aten::matmul`` / ``aten::addmm`` / ``aten::mm`` /
    ``aten::bmm`` calls: a 3-D input ``[B, S, H]`` with ``S == 1`` for every call -> decode
    (one new token per sequence), ``S > 1`` for every call -> prefill, both -> mixed.
    2-D inputs ``[T, H]`` (serving engines flatten the batch) do not tell a prompt from a
    batch of decodes, so they decide nothing.
``none``
    ``unknown``.

**Tokens and batch**: from the annotation only (``toks=`` and ``bs=`` of SGLang, where a
DECODE step without ``toks=`` advances ``bs`` tokens; vLLM's leading token count and
``context + generation`` requests), else from shapes ``B * S`` / ``B`` of the first 3-D
linear input (``tokens_source`` says which). ``tokens_per_s = tokens / period`` (the step's
time, :func:`traceparse.analyses.steps.step_periods`).
**FLOPs** (``flops_source``): the summed ``flops`` of the cpu_ops in the window (Kineto
``with_flops``: ``profiler``); without them, the shape estimate of
:func:`traceparse.roofline.estimate.op_flops` summed over the outermost covered ops (a
covered op inside another covered op, e.g. ``aten::mm`` under ``aten::linear``, is not
counted twice: ``shapes``). A step that replays a CUDA/HIP graph (a ``*GraphLaunch`` call
in its window) gets no shape estimate: the graph's ops never ran on the host, so their
shapes are not in the trace and a partial sum would understate the work; nor does a graph
capture step (its kernels are recorded, not run).
``tflop_per_s = flops / period``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses._dist import percentiles
from traceparse.analyses.steps import (
    gpu_known_from,
    known_start,
    launched_work,
    recorded_part,
    step_of_launch,
    step_periods,
    step_windows,
    unrecorded_work_end,
)
from traceparse.timeline import Timeline

PHASES = ("prefill", "decode", "mixed", "capture", "train", "unknown")
SGLANG_STEP = re.compile(r"^step\[(?P<mode>[A-Z_]+)(?:\s+bs=(?P<bs>\d+))?"
                         r"(?:\s+toks=(?P<toks>\d+))?")
VLLM_EXECUTE = re.compile(r"^execute_(?P<toks>\d+)_context_(?P<ctx>\d+)\((?P<ctxa>[^)]*)\)"
                          r"_generation_(?P<gen>\d+)\((?P<gena>[^)]*)\)")
CAPTURE = re.compile(r"^capture_(?P<bs>\d+)_(?P<mode>[A-Za-z_]+)$")
_SERVING = "|".join(re.sub(r"\?P<\w+>", "", p.pattern)
                    for p in (SGLANG_STEP, VLLM_EXECUTE, CAPTURE))
_RUNNER = r"(^|\): )(forward_extend|forward_decode|forward_mixed|execute_model)$"
_NAMES = {"forward_extend": "prefill", "prefill": "prefill", "forward_decode": "decode",
          "decode": "decode", "decode_step": "decode", "forward_mixed": "mixed",
          "train_step": "train"}
_SGLANG_MODES = {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode",
                 "MIXED": "mixed"}
_LINEAR_OPS = ("aten::linear", "aten::matmul", "aten::addmm", "aten::mm", "aten::bmm")
_BACKWARD = "autograd::engine::evaluate_function"
_HOST = ("profiler_step", "user_annotation", "nvtx_push_pop", "nvtx_start_end", "cpu_op",
         "python_function", "other")


def parse_step_annotation(name: str) -> dict[str, Any] | None:
    """Phase, batch and tokens from one serving step annotation, or None.

    Example:
        >>> parse_step_annotation("step[EXTEND bs=15 toks=15360]")
        {'phase': 'prefill', 'batch_size': 15, 'tokens': 15360}
        >>> parse_step_annotation("execute_8_context_1(sq5sk5)_generation_3(sq3sk90)")
        {'phase': 'mixed', 'batch_size': 4, 'tokens': 8}
    """
    m = SGLANG_STEP.match(name)
    if m:
        bs = int(m["bs"]) if m["bs"] else None
        phase = _SGLANG_MODES.get(m["mode"], "unknown")
        toks = int(m["toks"]) if m["toks"] else (bs if phase == "decode" else None)
        return {"phase": phase, "batch_size": bs, "tokens": toks}
    m = VLLM_EXECUTE.match(name)
    if m:
        ctx, gen = int(m["ctx"]), int(m["gen"])
        phase = ("mixed" if ctx and gen else "prefill" if ctx else "decode" if gen
                 else "unknown")
        return {"phase": phase, "batch_size": ctx + gen, "tokens": int(m["toks"])}
    m = CAPTURE.match(name)
    if m:
        return {"phase": "capture", "batch_size": int(m["bs"]), "tokens": None}
    return None


def _host(tl: Timeline) -> pl.DataFrame:
    return tl.ranges.filter(pl.col("end_ns").is_not_null()
                            & pl.col("kind").cast(pl.String).is_in(_HOST)).select(
        "rank", pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String), "start_ns",
        "end_ns", "input_dims", "flops")


def _outermost(r: pl.DataFrame) -> pl.DataFrame:
    """Drop rows contained in an earlier row of the same rank (sorted by start, end desc)."""
    srt = r.sort("rank", "start_ns", "end_ns", descending=[False, False, True])
    keep: list[bool] = []
    cur_rank, cur_end = None, -1
    for rank, end in srt.select("rank", "end_ns").iter_rows():
        inside = rank == cur_rank and end <= cur_end
        keep.append(not inside)
        if not inside:
            cur_rank, cur_end = rank, end
    return srt.filter(pl.Series(keep, dtype=pl.Boolean))


def find_steps(tl: Timeline, *, steps: str | None = None) -> tuple[pl.DataFrame, str]:
    """Step windows (``rank, step, start_ns, end_ns``) and the source that found them:
    ``regex``, ``annotation``, ``runner`` or ``profiler_step`` (see the module docstring)."""
    host = _host(tl)
    nonop = host.filter(pl.col("kind") != "cpu_op")
    tries: list[tuple[str, pl.DataFrame]]
    if steps is not None:
        tries = [("regex", host.filter(pl.col("name").str.contains(steps)))]
    else:
        tries = [("annotation", nonop.filter(pl.col("kind") != "python_function")
                  .filter(pl.col("name").str.contains(_SERVING))),
                 ("runner", nonop.filter((pl.col("kind") == "python_function")
                                         & pl.col("name").str.contains(_RUNNER))),
                 ("profiler_step", host.filter(pl.col("kind") == "profiler_step"))]

    for source, r in tries:
        if r.height:
            w = r if source == "regex" else _outermost(r)
            # cut to the recording span, as step_windows does (a range open at the stop)
            return recorded_part(tl, w.select("rank", pl.col("name").alias("step"),
                                              "start_ns", "end_ns")
                                 .unique(maintain_order=True).sort("rank", "start_ns")), source
    if steps is None:

        auto = step_windows(tl)  # no profiler steps here: the numbered step annotations
        if auto.height:
            return auto.cast({"rank": pl.Int32}), "step_annotation"
    return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.String, "start_ns": pl.Int64,
                                "end_ns": pl.Int64}), "none"


def _shape_rule(inside: pl.DataFrame) -> tuple[str | None, int | None, int | None]:
    """(phase, batch, tokens) from op shapes inside one window; None where undecided."""
    if inside.filter(pl.col("name").str.starts_with(_BACKWARD)).height:
        return "train", None, None
    seqs: list[tuple[int, int]] = []
    for dims in inside.filter(pl.col("name").is_in(_LINEAR_OPS)
                              & pl.col("input_dims").is_not_null())["input_dims"].to_list():
        try:
            first = json.loads(dims)[0]
        except (ValueError, IndexError, TypeError):
            continue
        if isinstance(first, list) and len(first) == 3 and all(isinstance(d, int)
                                                                for d in first):
            seqs.append((first[0], first[1]))
    if not seqs:
        return None, None, None
    ones = {s == 1 for _, s in seqs}
    phase = "mixed" if len(ones) == 2 else "decode" if True in ones else "prefill"
    b, s = seqs[0]
    return phase, b, b * s


def _classify(win: dict[str, Any], inside: pl.DataFrame, own: str) -> dict[str, Any]:
    out: dict[str, Any] = {"phase": "unknown", "phase_source": "none", "batch_size": None,
                           "tokens": None, "tokens_source": None}
    names = [own, *inside.filter(pl.col("kind") != "cpu_op")["name"].to_list()]
    for n in names:
        info = parse_step_annotation(n)
        if info is not None:
            out.update(info, phase_source="annotation",
                       tokens_source="annotation" if info["tokens"] is not None else None)
            return out
    for n in names:
        leaf = n.rsplit("): ", 1)[-1]
        if leaf in _NAMES:
            out.update(phase=_NAMES[leaf], phase_source="name")
            break
    phase, b, toks = _shape_rule(inside)
    if out["phase_source"] == "none" and phase is not None:
        out.update(phase=phase, phase_source="shapes")
    if toks is not None and out["phase"] in ("prefill", "decode", "mixed"):
        out.update(batch_size=b, tokens=toks, tokens_source="shapes")
    return out


class _ByStart:
    """Rows of ``frame`` per rank sorted by ``col``, sliced by ``[start, end)`` with a
    binary search (one pass over the steps instead of one scan of the frame per step)."""

    def __init__(self, frame: pl.DataFrame, col: str) -> None:
        self.col = col
        self.parts = {k[0]: f.sort(col) for k, f in frame.partition_by("rank", as_dict=True,
                                                                      maintain_order=True
                                                                      ).items()}
        self.keys = {r: f[col].to_numpy() for r, f in self.parts.items()}
        self.empty = frame.clear()

    def window(self, rank: int, start: int, end: int) -> pl.DataFrame:
        f = self.parts.get(rank)
        if f is None:
            return self.empty
        k = self.keys[rank]
        lo, hi = (int(i) for i in np.searchsorted(k, [start, end], side="left"))
        return f.slice(lo, hi - lo)


def _step_flops(inside: pl.DataFrame, replays_graph: bool) -> tuple[float | None, str | None]:
    """(FLOPs, source) of one step's ops (see the module docstring)."""
    from traceparse.roofline.estimate import op_flops

    ops = inside.filter(pl.col("kind") == "cpu_op")
    fl = ops["flops"].drop_nulls()
    if fl.len():
        return float(fl.sum()), "profiler"
    if replays_graph:
        return None, None
    total, covered_end, found = 0.0, -1, False
    for name, end, dims in (ops.filter(pl.col("input_dims").is_not_null())
                                   .sort("start_ns", pl.col("end_ns"),
                                         descending=[False, True])
                                   .select("name", "end_ns", "input_dims")
                                   .iter_rows()):
        if end <= covered_end:
            continue
        try:
            f = op_flops(name, json.loads(dims))
        except (ValueError, TypeError, IndexError):
            f = None
        if f is not None:
            total += f
            covered_end = end
            found = True
    return (total, "shapes") if found else (None, None)


def _step_rows(tl: Timeline, wins: pl.DataFrame, source: str) -> list[dict[str, Any]]:
    """The rows of :func:`phase_steps` for step windows ``wins`` (not empty): the host
    ranges, graph launches and launched GPU activities are gathered only when a trace has
    steps (a 1M-kernel trace without steps skipped 0.3 s CPU and 0.4 GB per call)."""
    host = _ByStart(_host(tl), "start_ns")
    graphs = _ByStart(tl.api.filter(pl.col("name").cast(pl.String).str.contains("GraphLaunch"))
                      .select("rank", "start_ns"), "start_ns")
    work = {r[0]: r[1:] for r in launched_work(tl, wins.with_row_index("_wid")).select(
        "_wid", "gpu_end_ns", "kernels", "kernel_ns", "first_launch_ns").iter_rows()}
    rows: list[dict[str, Any]] = []
    for i, w in enumerate(wins.iter_rows(named=True)):
        s, e, rank = w["start_ns"], w["end_ns"], w["rank"]
        inside = host.window(rank, s, e).filter(pl.col("end_ns") <= e)
        row = {**w, **_classify(w, inside, w["step"]), "step_source": source}
        gpu_end, row["kernels"], row["kernel_ns"], row["first_launch_ns"] = work.get(
            i, (None, 0, 0, None))
        row["gpu_end_ns"] = gpu_end
        row["wall_ns"] = max(e, gpu_end or e) - s
        replays = graphs.window(rank, s, e).height > 0
        row["flops"], row["flops_source"] = ((None, None) if row["phase"] == "capture"
                                             else _step_flops(inside, replays))
        rows.append(row)
    return rows


def phase_steps(tl: Timeline, *, steps: str | None = None, attribution: bool = True
                ) -> pl.DataFrame:
    """One row per step with its phase (see the module docstring for every rule).

    Returns:
        ``rank, step, phase, phase_source, step_source, batch_size, tokens,
        tokens_source, start_ns, end_ns, gpu_end_ns, wall_ns, kernels, kernel_ns, flops,
        flops_source, period_ns`` (:func:`traceparse.analyses.steps.step_periods`: the
        step's time),
        tflop_per_s, tokens_per_s, attributed_ns`` (the length of the step's window of
        :func:`attribution_windows`, never overlapping another step's, less its part
        before the rank's first GPU activity where the trace shows that the GPU ran
        unrecorded work there: :func:`traceparse.analyses.steps.gpu_known_from`) and, with
        ``attribution``, the parts of
        :func:`traceparse.analyses.attribution.breakdown_windows` over that window summed
        over the rank's devices.
    """
    wins, source = find_steps(tl, steps=steps)
    rows = _step_rows(tl, wins, source) if wins.height else []
    schema = {"rank": pl.Int32, "step": pl.String, "phase": pl.String,
              "phase_source": pl.String, "step_source": pl.String, "batch_size": pl.Int64,
              "tokens": pl.Int64, "tokens_source": pl.String, "start_ns": pl.Int64,
              "end_ns": pl.Int64, "gpu_end_ns": pl.Int64, "wall_ns": pl.Int64,
              "kernels": pl.Int64, "kernel_ns": pl.Int64, "flops": pl.Float64,
              "flops_source": pl.String, "first_launch_ns": pl.Int64}
    out = pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
    queue = unrecorded_work_end(tl).cast({"rank": out.schema["rank"]})
    # first_launch_ns is read by step_periods only
    out = step_periods(out.join(queue, on="rank", how="left")).drop("queue_end_ns",
                                                                     "first_launch_ns")
    # a step's rates over its period, the time its phase's rates sum (phase_summary): over
    # the wall, the latency, a step that waited 463 ms behind work the trace does not hold
    # read 67.5 tokens/s beside its phase's 3,041; over its attribution window, host time
    # where the host runs ahead, a GEMM sweep's steps read 5,757 TFLOP/s on an H200
    secs = pl.col("period_ns") / 1e9
    rates = [pl.when(pl.col("period_ns") > 0).then(pl.col("flops") / secs / 1e12)
             .alias("tflop_per_s"),
             pl.when(pl.col("period_ns") > 0).then(pl.col("tokens") / secs)
             .alias("tokens_per_s")]
    # in their place before the period (the columns' order is the output's)
    keep = [c for c in out.columns if c != "period_ns"]
    out = out.with_columns(rates).select(*keep, "tflop_per_s", "tokens_per_s", "period_ns")

    known = gpu_known_from(tl) if out.height else pl.DataFrame(
        schema={"rank": out.schema["rank"], "gpu_known_from_ns": pl.Int64})
    out = (attribution_windows(out)
           .join(known.cast({"rank": out.schema["rank"]}), on="rank", how="left")
           .with_columns(pl.min_horizontal(known_start(), "attr_end_ns").alias("_attr_start"))
           .with_columns((pl.col("attr_end_ns") - pl.col("_attr_start")).alias("attributed_ns"))
           .drop("attr_end_ns", "gpu_known_from_ns"))
    if attribution and out.height:
        out = _attribute(tl, out)
    return out.drop("_attr_start")


def attribution_windows(steps: pl.DataFrame) -> pl.DataFrame:
    """``attr_end_ns``: where each step's attribution window ``[start_ns, attr_end_ns)``
    ends. The windows of one rank tile the union of its steps' ``[start, start + wall)``:
    a window ends at the next step's start or where the rank's steps so far have finished
    (the running maximum of ``start + wall``), whichever is first; the last runs to that
    maximum. So no nanosecond is attributed twice: where the GPU falls behind the host,
    ``[start, start + wall)`` of consecutive steps overlap, and their summed parts counted
    the overlap once per step (``launch_bound-twin``: 4.60 ms of compute over walls summing
    to 6.96 ms, in 3.98 ms from the first step's start to the last GPU end, with 2.27 ms of
    kernels).

    Example:
        One rank, steps at 0 (wall 150), 100 (wall 150), 300 (wall 50): running ends 150,
        250, 350; windows [0, 100), [100, 250), [300, 350): 300 ns, each attributed once
        (the walls sum to 350).
    """
    end = pl.col("start_ns") + pl.col("wall_ns")
    run = end.cum_max().over("rank", order_by="start_ns")
    nxt = pl.col("start_ns").shift(-1).over("rank", order_by="start_ns")
    return steps.with_columns(
        pl.when(nxt.is_null()).then(run).otherwise(pl.min_horizontal(run, nxt))
        .alias("attr_end_ns"))


def _attribute(tl: Timeline, steps: pl.DataFrame) -> pl.DataFrame:
    from traceparse.analyses.attribution import PARTS, breakdown_windows

    w = steps.with_row_index("_wid")
    wins = w.select("rank", pl.col("_wid").cast(pl.String).alias("window_name"),
                    pl.col("_attr_start").alias("window_start_ns"),
                    (pl.col("_attr_start") + pl.col("attributed_ns")).alias("window_end_ns"))
    b = breakdown_windows(tl, wins)
    per = (b.with_columns(pl.col("window_name").cast(pl.UInt32).alias("_wid"))
           .group_by("_wid").agg(pl.col(p).sum() for p in PARTS))
    return (w.join(per, on="_wid", how="left")
            .with_columns(pl.col(p).fill_null(0) for p in PARTS).sort("_wid").drop("_wid"))


def phase_summary(steps: pl.DataFrame) -> pl.DataFrame:
    """One row per phase of :func:`phase_steps`: ``steps``, step time ``p50/p95/p99`` and
    mean (ns; ``step_*_ns``, of ``period_ns``: a step's wall holds the queue behind earlier
    steps where the host runs ahead of the GPU,
    :func:`traceparse.analyses.steps.step_periods`),
    ``tokens_per_step`` (mean where recorded), ``tokens_per_s`` (summed tokens over the
    summed ``period_ns`` of the steps with tokens), ``kernel_ns``, ``tflop_per_s``
    (summed FLOPs over the summed ``period_ns`` of the steps with FLOPs) and each
    attribution part as a percentage of the phase's summed attribution windows. A rate is
    over the time the steps took, each nanosecond once: the walls overlap where the GPU
    falls behind the host, and a sum of walls exceeds it; the periods tile the same union as
    the attribution windows but leave out a step's wait behind work queued before the
    recording, whose FLOPs and tokens are no step's (``train_gpt2s_b32``: 130 TFLOP/s over
    the windows, whose first holds 41 ms of the previous step's kernels, against 152.8 over
    the 77.6 ms periods the row's step time gives: the rate and the step time are one
    computation)."""
    from traceparse.analyses.attribution import PARTS

    if steps.height == 0:
        return pl.DataFrame(schema={"phase": pl.String, "steps": pl.UInt32})
    parts = [p for p in PARTS if p in steps.columns]
    tok = pl.col("tokens").is_not_null()
    fl = pl.col("flops").is_not_null()
    aggs = [pl.len().alias("steps"), pl.col("period_ns").mean().alias("step_mean_ns"),
            *(e.alias(f"step_{e.meta.output_name()}_ns") for e in percentiles("period_ns")),
            pl.col("tokens").mean().alias("tokens_per_step"),
            (pl.col("tokens").filter(tok).sum()
             / (pl.col("period_ns").filter(tok).sum() / 1e9)).alias("tokens_per_s"),
            pl.col("kernels").sum(), pl.col("kernel_ns").sum(),
            (pl.col("flops").filter(fl).sum() / pl.col("period_ns").filter(fl).sum()
             / 1e3).alias("tflop_per_s")]
    if parts:
        total = pl.sum_horizontal(*(pl.col(p).sum() for p in parts))
        aggs += [(pl.col(p).sum() * 100.0 / total).alias(p.replace("_ns", "_pct"))
                 for p in parts]
    order = {p: i for i, p in enumerate(PHASES)}
    out = steps.group_by("phase").agg(aggs)
    out = out.with_columns(pl.col("tflop_per_s", "tokens_per_s").fill_nan(None))
    return (out.with_columns(pl.col("phase").replace_strict(order, default=99).alias("_o"))
            .sort("_o").drop("_o"))


def phase_kernel_mix(tl: Timeline, steps: pl.DataFrame, *, top: int = 8) -> pl.DataFrame:
    """Kernel time per phase and kernel class (:mod:`traceparse.analyses.kclass`):
    ``phase, kernel_class, kernels, kernel_ns, pct`` (of the phase's kernel time),
    ``top_kernel`` (the class's longest-running kernel name); ``top`` classes per phase.
    A kernel belongs to the step its launch call started in
    (:func:`traceparse.analyses.steps.step_of_launch`)."""
    from traceparse.analyses.kclass import class_expr

    empty = pl.DataFrame(schema={"phase": pl.String, "kernel_class": pl.String,
                                 "kernels": pl.UInt32, "kernel_ns": pl.Int64,
                                 "pct": pl.Float64, "top_kernel": pl.String})
    if steps.height == 0:
        return empty
    w = steps.with_row_index("_wid")
    j = step_of_launch(tl, w, ["name", "category", "dur_ns"], kinds=("kernel",))
    if j.height == 0:
        return empty
    j = (j.join(w.select("_wid", "phase"), on="_wid", how="left")
         .with_columns(pl.col("name").cast(pl.String), pl.col("category").cast(pl.String))
         .with_columns(class_expr().alias("kernel_class")))
    per_name = (j.group_by("phase", "kernel_class", "name").agg(pl.col("dur_ns").sum())
                .sort("dur_ns", "name", descending=[True, False])
                .group_by("phase", "kernel_class", maintain_order=True)
                .agg(pl.col("name").first().alias("top_kernel")))
    mix = (j.group_by("phase", "kernel_class")
           .agg(pl.len().alias("kernels"), pl.col("dur_ns").sum().alias("kernel_ns"))
           .join(per_name, on=["phase", "kernel_class"], how="left")
           .with_columns((pl.col("kernel_ns") * 100.0 / pl.col("kernel_ns").sum().over("phase"))
                         .alias("pct")))
    return (mix.sort("phase", "kernel_ns", descending=[False, True])
            .group_by("phase", maintain_order=True).head(top)
            .select("phase", "kernel_class", "kernels", "kernel_ns", "pct", "top_kernel"))
