"""Tensor-core activity and tensor precision from ncu counters (never from kernel names).

Three families of counters say what the tensor cores did (FORMATS B.6):

* **ops counters** ``sm__ops_path_tensor_src_<dtype>[_dst_<dtype>][_sparsity_off].sum``
  (hierarchical tensor roofline sections, ``--metrics``): math ops per source dtype. These
  give tensor FLOPs and the precision (``bf16``, ``fp16``, ``tf32``, ``fp8``, ``int8``,
  ``fp64``). The aggregate ``src_*`` counters are used; the per-instruction variants
  (``op_hgmma_*``, ``op_hmma_*``) count the same work again and are only a fallback.
* **pipe activity** ``sm__pipe_tensor_{op,subpipe}_<pipe>_cycles_active`` and
  ``sm__inst_executed_pipe_tensor_{op,subpipe}_<pipe>`` as % of peak (ComputeWorkloadAnalysis,
  ``--set full``): which MMA pipe ran and how busy it was, but not how many FLOPs (the FLOPs
  per instruction depend on the MMA shape). ``imma`` -> int8, ``dmma`` -> fp64, ``hmma`` ->
  fp16/bf16/tf32 (not told apart by the pipe), ``gmma`` -> Hopper warpgroup MMA (any dtype).
* **instruction counts** ``sm__inst_executed_pipe_tensor.sum`` (NERSC ``--metrics``): warp
  MMA instructions, dtype unknown.

Output columns (one per launch): ``tensor_dtype`` (from ops counters), ``tensor_pipe`` and
``tensor_pipe_pct`` (the busiest MMA pipe and its % of peak, elapsed when printed, else
active), ``tensor_inst`` (warp MMA instructions).
"""

from __future__ import annotations

import re

import polars as pl

#: MMA pipe -> the precision family it implies.
PIPE_DTYPE = {"imma": "int8", "igmma": "int8", "dmma": "fp64", "hmma": "fp16/bf16/tf32",
              "gmma": "warpgroup MMA", "hgmma": "fp16/bf16/tf32", "qgmma": "fp8",
              "bmma": "int1", "bgmma": "int1"}

#: ops-counter source dtype token -> precision name (ceiling ``<name>_tensor``).
OPS_DTYPE = {"fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "fp8": "fp8", "int8": "int8",
             "fp64": "fp64", "int4": "int4", "int1": "int1",
             "fp16_bf16_tf32": "fp16"}

_OPS = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_([a-z0-9]+))?"
                  r"(?:_sparsity_(off|on))?\.sum$")
_OPS_INST = re.compile(r"^sm__ops_path_tensor_op_([a-z]+)_src_([a-z0-9]+?)(?:_dst_([a-z0-9]+))?"
                       r"(?:_sparsity_(off|on))?\.sum$")
_PIPE = re.compile(r"^sm__(?:pipe_tensor_(?:op_|subpipe_|type_)([a-z_]+)_cycles_active"
                   r"|inst_executed_pipe_tensor_(?:op|subpipe)_([a-z]+))"
                   r"\.avg\.pct_of_peak_sustained_(elapsed|active)$")
#: Precisions without a sparse MMA path: their aggregate counter's peak is the dense peak.
NO_SPARSE = ("fp64", "int1")


def _parse(cols: set[str]) -> list[tuple[str, str, str | None, str | None, str]]:
    """(dtype, instruction or "", dst, sparsity, column) of every tensor ops counter."""
    out = []
    for c in sorted(cols):
        m = _OPS.match(c)
        if m and m.group(1) in OPS_DTYPE:
            out.append((OPS_DTYPE[m.group(1)], "", m.group(2), m.group(3), c))
            continue
        m = _OPS_INST.match(c)
        if m and m.group(2) in OPS_DTYPE:
            out.append((OPS_DTYPE[m.group(2)], m.group(1), m.group(3), m.group(4), c))
    return out


def _disjoint(found: list[tuple[str, str, str | None, str | None, str]]) -> list[str]:
    """Counters of one precision that count each op once: ncu prints an aggregate
    (``src_fp8.sum``) next to its parts (``src_fp8_sparsity_off.sum``, ``_sparsity_on``, or
    per destination type), and the aggregate equals the sum of its parts (measured on an
    H200: ``src_fp8.sum`` = ``src_fp8_sparsity_off.sum`` for an fp8 GEMM). The least
    qualified level present is used: plain, per destination, per sparsity, both."""
    for level in ((False, False), (True, False), (False, True), (True, True)):
        hit = [c for _d, _i, dst, sp, c in found
               if (dst is not None, sp is not None) == level]
        if hit:
            return hit
    return []


def ops_counters(cols: set[str]) -> dict[str, list[str]]:
    """Tensor ops counters to sum, grouped by precision, each op counted once (aggregate
    ``src_*`` counters; the per-instruction ``op_*`` ones only when no aggregate is present).

    Example:
        >>> ops_counters({"sm__ops_path_tensor_src_bf16_dst_fp32.sum",
        ...               "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"})
        {'bf16': ['sm__ops_path_tensor_src_bf16_dst_fp32.sum']}
        >>> ops_counters({"sm__ops_path_tensor_src_fp8.sum",
        ...               "sm__ops_path_tensor_src_fp8_sparsity_off.sum",
        ...               "sm__ops_path_tensor_src_fp8_sparsity_on.sum"})
        {'fp8': ['sm__ops_path_tensor_src_fp8.sum']}
    """
    parsed = _parse(cols)
    out: dict[str, list[str]] = {}
    for want_inst in (False, True):
        rows = [r for r in parsed if bool(r[1]) == want_inst]
        for dtype in dict.fromkeys(r[0] for r in rows):
            mine = [r for r in rows if r[0] == dtype]
            if want_inst:  # different instructions (hgmma, hmma) are different work
                hit: list[str] = []
                for inst in dict.fromkeys(r[1] for r in mine):
                    hit += _disjoint([r for r in mine if r[1] == inst])
            else:
                hit = _disjoint(mine)
            if hit:
                out[dtype] = hit
        if out:
            return out
    return out


def dense_peak_counters(cols: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Per precision: (dense, sparse) ``.peak_sustained`` columns (ops per cycle).

    ncu's aggregate counter (``src_bf16_dst_fp32``) peaks at the *sparse* rate where a sparse
    path exists: on an H200 its ``peak_sustained`` is 1,081,344 ops/cycle, twice the
    ``hgmma ..._sparsity_off`` peak of 540,672 (= 989.4 TFLOP/s at 1.83 GHz, the datasheet
    dense peak). The dense roof is therefore the largest ``_sparsity_off`` peak of the
    precision, or the aggregate peak for precisions without sparse MMA (``NO_SPARSE``);
    without either the caller falls back to the datasheet's dense peak."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for dtype, _inst, _dst, sp, c in _parse(cols):
        pk = c + ".peak_sustained"
        if pk not in cols:
            continue
        dense, sparse = out.setdefault(dtype, ([], []))
        if sp == "off" or (sp is None and dtype in NO_SPARSE):
            dense.append(pk)
        elif sp == "on":
            sparse.append(pk)
    return out


def pipe_counters(cols: set[str]) -> dict[str, str]:
    """MMA pipe -> the % of peak counter to read for it (cycles-active over instructions
    executed, elapsed over active)."""
    found: dict[str, tuple[int, str]] = {}
    for c in sorted(cols):
        m = _PIPE.match(c)
        if not m:
            continue
        pipe = (m.group(1) or m.group(2)).replace("_", "|")
        rank = (0 if m.group(1) else 2) + (0 if m.group(3) == "elapsed" else 1)
        if pipe not in found or rank < found[pipe][0]:
            found[pipe] = (rank, c)
    return {p: c for p, (_, c) in found.items()}


def tensor_exprs(cols: set[str]) -> dict[str, pl.Expr]:
    """Expressions for ``flop_tensor`` (ops counters, all precisions), ``tensor_dtype``,
    ``tensor_pipe``, ``tensor_pipe_pct`` and ``tensor_inst`` over the wide metric frame."""
    ops = ops_counters(cols)
    out: dict[str, pl.Expr] = {}
    if ops:
        per = {d: pl.sum_horizontal([pl.col(c) for c in cs]) for d, cs in ops.items()}
        seen = pl.any_horizontal([pl.col(c).is_not_null() for cs in ops.values() for c in cs])
        out["flop_tensor"] = pl.when(seen).then(pl.sum_horizontal(list(per.values())))
        names = list(per)
        vals = pl.concat_list([e.fill_null(0.0) for e in per.values()])
        out["tensor_dtype"] = (pl.when(vals.list.max() > 0)
                               .then(vals.list.arg_max().replace_strict(
                                   dict(enumerate(names)), return_dtype=pl.String))
                               .otherwise(None))
    else:
        out["flop_tensor"] = pl.lit(None, pl.Float64)
        out["tensor_dtype"] = pl.lit(None, pl.String)
    pipes = pipe_counters(cols)
    if pipes:
        names = list(pipes)
        vals = pl.concat_list([pl.col(c).fill_null(0.0) for c in pipes.values()])
        out["tensor_pipe"] = (pl.when(vals.list.max() > 0)
                              .then(vals.list.arg_max().replace_strict(
                                  dict(enumerate(names)), return_dtype=pl.String))
                              .otherwise(None))
        out["tensor_pipe_pct"] = vals.list.max()
    else:
        total = next((c for c in ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_"
                                  "elapsed", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_"
                                  "sustained_active") if c in cols), None)
        out["tensor_pipe"] = (pl.when(pl.col(total) > 0).then(pl.lit("tensor"))
                              .otherwise(None)) if total else pl.lit(None, pl.String)
        out["tensor_pipe_pct"] = pl.col(total) if total else pl.lit(None, pl.Float64)
    inst = "sm__inst_executed_pipe_tensor.sum"
    out["tensor_inst"] = pl.col(inst) if inst in cols else pl.lit(None, pl.Float64)
    return out


def tensor_peak_expr(cols: set[str]) -> pl.Expr:
    """Tensor FLOPs per cycle at the dense peak of the kernel's dominant precision (the
    sparse peak when most of its ops ran on the sparse path); multiplied by the SM clock it
    is the kernel's tensor roof at its measured clock. Null when the page has no dense peak
    for that precision (see :func:`dense_peak_counters`): the datasheet's dense peak at the
    measured clock is used then."""
    ops = ops_counters(cols)
    peaks = dense_peak_counters(cols)
    if not ops or not peaks:
        return pl.lit(None, pl.Float64)
    sparse_ops = {d: [c for dd, _i, _dst, sp, c in _parse(cols) if dd == d and sp == "on"
                      and c in cs] for d, cs in ops.items()}
    counts, roofs = [], []
    for d, cs in ops.items():
        total = pl.sum_horizontal([pl.col(c).fill_null(0.0) for c in cs])
        dense_c, sparse_c = peaks.get(d, ([], []))
        dense = pl.max_horizontal([pl.col(c) for c in dense_c]) if dense_c \
            else pl.lit(None, pl.Float64)
        sparse = pl.max_horizontal([pl.col(c) for c in sparse_c]) if sparse_c \
            else pl.lit(None, pl.Float64)
        on = pl.sum_horizontal([pl.col(c).fill_null(0.0) for c in sparse_ops[d]]) \
            if sparse_ops[d] else pl.lit(0.0)
        counts.append(total)
        roofs.append(pl.when(on * 2 > total).then(sparse).otherwise(dense))
    vals = pl.concat_list(counts)
    return pl.concat_list(roofs).list.get(vals.list.arg_max())
