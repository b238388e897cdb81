"""FLOPs and bytes estimated from PyTorch op shapes (provenance ``estimated (shapes)``).

For timelines without ncu counters (nsys-only or Kineto traces), the ``ranges`` rows of kind
``cpu_op`` with ``input_dims`` / ``input_types`` (JSON text of Kineto's 'Input Dims' and
'Input type') give the work of the common dense ops. Forward ops only; FMA = 2 FLOPs; bytes
= every input tensor read once + the output written once (a lower bound on DRAM traffic).

| op | FLOPs |
|---|---|
| mm ``[M,K] x [K,N]`` | 2·M·N·K |
| addmm ``bias, [M,K], [K,N]`` | 2·M·N·K |
| bmm / baddbmm ``[B,M,K] x [B,K,N]`` | 2·B·M·N·K |
| matmul ``[...,M,K] x [...,K,N]`` | 2·batch·M·N·K (1-D operands promoted) |
| linear ``x[...,K], W[N,K]`` | 2·rows(x)·K·N |
| convolution ``x[N,C,H,W], W[O,C/g,kh,kw]`` | 2·N·O·Ho·Wo·(C/g)·kh·kw (only with stride and
padding in 'Concrete Inputs'; without them the op is not estimated) |
| sdpa / flash attention ``q[B,H,L,D], k[B,H,S,D], v[B,H,S,Dv]`` | 2·B·H·L·S·(D+Dv) |

Kernels link to their op by ``(rank, external_id)``; op FLOP/s = FLOPs / summed kernel time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import polars as pl

ESTIMATED = "estimated (shapes)"

#: Kineto dtype string -> (bytes per element, ceiling name).
DTYPES = {"float": (4, "fp32"), "double": (8, "fp64"), "c10::Half": (2, "fp16_tensor"),
          "c10::BFloat16": (2, "bf16_tensor"), "c10::Float8_e4m3fn": (1, "fp8_tensor"),
          "c10::Float8_e5m2": (1, "fp8_tensor"), "signed char": (1, "int8_tensor"),
          "int": (4, "fp32"), "long int": (8, "fp32")}

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
              "aten::linear"}
CONV_OPS = {"aten::convolution", "aten::_convolution", "aten::conv2d", "aten::conv1d",
            "aten::conv3d", "aten::cudnn_convolution"}
#: Gather ops: (table[V, D], ..., indices): FLOPs = gathered elements, bytes = indices
#: (int64) + gathered rows read + output written.
GATHER_OPS = {"aten::embedding", "aten::index_select"}
CONV_BWD_OPS = {"aten::cudnn_convolution_backward", "aten::convolution_backward_cudnn"}
GROUPED_MM_OPS = {"aten::_grouped_mm", "aten::_scaled_grouped_mm"}
#: Memory-bound ops: FLOPs per output element (bytes = tensor inputs read + output written).
MEMORY_OPS = {
    **{f"aten::{n}": 1.0 for n in ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_",
                                   "relu", "relu_", "threshold_backward", "clamp_min_",
                                   "gelu", "silu", "silu_", "sigmoid", "tanh", "where",
                                   "masked_fill_", "fill_", "zero_", "copy_", "clone",
                                   "contiguous", "to", "index_select", "embedding", "cat",
                                   "dropout", "native_dropout")},
    **{f"aten::{n}": 5.0 for n in ("batch_norm", "cudnn_batch_norm", "native_batch_norm",
                                   "layer_norm", "native_layer_norm", "rms_norm",
                                   "_fused_rms_norm", "group_norm", "softmax", "_softmax",
                                   "log_softmax", "_log_softmax")},
}
#: Ops that move data and do no arithmetic (copies, fills, gathers, concatenation): 0 FLOPs.
#: They are bandwidth points (DRAM bytes over time, drawn as a line), never FLOP points.
DATA_MOVEMENT_OPS = {f"aten::{n}" for n in ("fill_", "zero_", "copy_", "clone", "contiguous",
                                            "to", "index_select", "embedding", "cat")}
MEMORY_OPS.update({n: 0.0 for n in DATA_MOVEMENT_OPS})
#: ``note`` of a data-movement point.
DATA_MOVEMENT_NOTE = "no arithmetic (copy/fill/gather): a bandwidth point"
#: Memory-bound ops that only write their output (``self``): its old contents are not read.
WRITE_ONLY_OPS = {"aten::fill_", "aten::zero_"}
#: Argument positions (stride, padding, dilation) in 'Concrete Inputs' per conv op.
CONV_ARGS = {"aten::convolution": (3, 4, 5), "aten::_convolution": (3, 4, 5),
             "aten::conv1d": (3, 4, 5), "aten::conv2d": (3, 4, 5), "aten::conv3d": (3, 4, 5),
             "aten::cudnn_convolution": (3, 2, 4)}


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs) if xs else 1


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _ints(v: Any, n: int, default: int) -> list[int]:
    try:
        x = json.loads(v) if isinstance(v, str) and v else v
    except (ValueError, TypeError):
        x = None
    if isinstance(x, int):
        return [x] * n
    if isinstance(x, list) and x and all(isinstance(i, int) for i in x):
        return (x * n)[:n] if len(x) == 1 else x[:n]
    return [default] * n


#: Position of ``is_causal`` among the op's inputs (Kineto 'Concrete Inputs').
CAUSAL_ARG = {"aten::scaled_dot_product_attention": 5,
              "aten::_scaled_dot_product_flash_attention": 4,
              "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
              "aten::_scaled_dot_product_efficient_attention": 6,
              "aten::_scaled_dot_product_cudnn_attention": 6}


def _is_causal(name: str, concrete: list[Any]) -> bool:
    """True when the op's ``is_causal`` input is recorded as true (then only about half of
    the score matrix is computed)."""
    pos = CAUSAL_ARG.get(name)
    if pos is None or len(concrete) <= pos:
        return False
    return str(concrete[pos]).strip().lower() in ("true", "1")


def op_flops(name: str, dims: list[Any], concrete: list[Any] | None = None) -> float | None:
    """FLOPs of one op from its input shapes; None when the op or shapes are not covered.

    Example:
        >>> op_flops("aten::addmm", [[512], [128, 256], [256, 512]])  # 2*128*512*256
        33554432.0
    """
    t = [d for d in dims if isinstance(d, list)]
    c = concrete or []
    try:
        if name == "aten::mm":
            (m, k), (_, n) = t[0], t[1]
            return 2.0 * m * n * k
        if name == "aten::addmm":
            (m, k), (_, n) = t[1], t[2]
            return 2.0 * m * n * k
        if name in ("aten::bmm", "aten::baddbmm"):
            a, b = (t[0], t[1]) if name == "aten::bmm" else (t[1], t[2])
            return 2.0 * a[0] * a[1] * b[2] * a[2]
        if name == "aten::matmul":
            a, b = list(t[0]), list(t[1])
            a = [1, *a] if len(a) == 1 else a
            b = [*b, 1] if len(b) == 1 else b
            batch = _prod(a[:-2]) if len(a) >= len(b) else _prod(b[:-2])
            return 2.0 * batch * a[-2] * a[-1] * b[-1]
        if name == "aten::linear":
            x, w = t[0], t[1]
            return 2.0 * _prod(x[:-1]) * x[-1] * w[0]
        if name in CONV_BWD_OPS:  # (input, grad_out, weight): data + weight gradients
            x, g, w = t[0], t[1], t[2]
            return 2.0 * 2.0 * x[0] * w[0] * _prod(g[2:]) * w[1] * _prod(w[2:])
        if name == "aten::_scaled_mm":  # FP8 GEMM: a[M,K] x b[K,N]
            (m, k), (_, n) = t[0], t[1]
            return 2.0 * m * n * k
        if name in GROUPED_MM_OPS:  # a[T,K] x b[G,K,N] (per-group rows sum to T)
            a, b = t[0], t[1]
            if len(a) == 2 and len(b) == 3:
                return 2.0 * a[0] * a[1] * b[2]
            if len(a) == 3 and len(b) == 3:
                return 2.0 * a[0] * a[1] * a[2] * b[2]
            return None
        if name in CONV_OPS:
            x, w = t[0], t[1]
            if c and len(c) > 0 and c[0] == "__out__":  # output dims inferred from the consumer
                out = list(c[1])
                return 2.0 * x[0] * w[0] * _prod(out) * w[1] * _prod(w[2:])
            nsp = len(x) - 2
            pos = CONV_ARGS.get(name, (3, 4, 5))  # (stride, padding, dilation) arg index
            if len(c) <= max(pos) or not c[pos[0]]:
                return None  # stride/padding unknown: the output size would be a guess
            stride = _ints(c[pos[0]], nsp, 1)
            pad = _ints(c[pos[1]], nsp, 0)
            dil = _ints(c[pos[2]], nsp, 1)
            out = [_conv_out(x[2 + i], w[2 + i], stride[i], pad[i], dil[i]) for i in range(nsp)]
            return 2.0 * x[0] * w[0] * _prod(out) * w[1] * _prod(w[2:])
        if "scaled_dot_product" in name or "flash_attention" in name or "flash_attn" in name:
            bwd = "backward" in name
            if bwd:  # inputs (grad_out, q, k, v, ...): 2.5x the forward matmul work
                t = t[1:]
            q, k, v = t[0], t[1], t[2]
            if "flash_attn::" in name or name.startswith("FlashAttn"):  # [B, L, H, D] layout
                b, lq, h, d = q
                s, dv = k[1], v[3]
            else:  # aten layout [B, H, L, D]
                b, h, lq, d = q
                s, dv = k[-2], v[-1]
            causal = _is_causal(name, c)
            return (2.0 * b * h * lq * s * (d + dv) * (0.5 if causal else 1.0)
                    * (2.5 if bwd else 1.0))
    except (IndexError, TypeError, ValueError):
        return None
    return None


def op_bytes(dims: list[Any], types: list[Any], flops_name: str) -> float | None:
    """Bytes read (every tensor input once) + written (the output once, estimated as the
    largest input for elementwise-like ops, M x N for matmuls)."""
    total = 0.0
    for d, ty in zip(dims, types, strict=False):
        if isinstance(d, list) and d and ty in DTYPES:
            total += _prod(d) * DTYPES[ty][0]
    return total or None


def _first_dtype(types: list[Any]) -> str | None:
    return next((t for t in types if t in DTYPES), None)


def memory_op_work(name: str, dims: list[Any], types: list[Any]) -> tuple[float, float] | None:
    """(FLOPs, bytes) of a memory-bound op: ``MEMORY_OPS[name]`` FLOPs per output element,
    every tensor input read once and an output the size of the largest input written once
    (``WRITE_ONLY_OPS``: the output written only).

    Examples (add of two [1024, 1024] fp32 tensors: 1M FLOPs, 12 MiB; fill_ of one: 0 FLOPs,
    4 MiB):
        >>> memory_op_work("aten::add", [[1024, 1024], [1024, 1024], []],
        ...                ["float", "float", "Scalar"])
        (1048576.0, 12582912.0)
        >>> memory_op_work("aten::fill_", [[1024, 1024], []], ["float", "Int"])
        (0.0, 4194304.0)
    """
    per = MEMORY_OPS.get(name)
    if per is None:
        return None
    if name in GATHER_OPS:  # reads only the gathered rows, not the whole table
        table = next((d for d in dims if isinstance(d, list) and len(d) == 2), None)
        idx = [d for d in dims if isinstance(d, list) and d and d is not table]
        ty = next((t for t, d in zip(types, dims, strict=False) if d is table), None)
        if table and idx and ty in DTYPES:
            rows = _prod(idx[0])
            out = rows * table[1] * DTYPES[str(ty)][0]
            return float(rows * table[1]), float(rows * 8 + 2 * out)
    tens = [(_prod(d), DTYPES[ty][0]) for d, ty in zip(dims, types, strict=False)
            if isinstance(d, list) and d and ty in DTYPES]
    if not tens:
        return None
    out_n, out_b = max(tens)
    if name in WRITE_ONLY_OPS:
        return per * out_n, float(out_n * out_b)
    return per * out_n, float(sum(n * b for n, b in tens) + out_n * out_b)


def _conv_out_dims(x: list[int], w: list[int], later: list[dict[str, Any]]) -> list[int] | None:
    """Output spatial dims of a convolution recorded without 'Concrete Inputs': the first
    later op on the thread whose first tensor input is ``[N, O, *spatial]`` (the consumer of
    the conv output, e.g. batch_norm or relu)."""
    for r in later:
        try:
            d = json.loads(r["input_dims"]) if r["input_dims"] else []
        except ValueError:
            continue
        first = next((t for t in d if isinstance(t, list) and t), None)
        if first and len(first) == len(x) and first[0] == x[0] and first[1] == w[0] \
                and all(isinstance(v, int) for v in first):
            return first[2:]
    return None


OPS_SCHEMA = {"rank": pl.Int32, "external_id": pl.Int64, "name": pl.String,
              "flops": pl.Float64, "bytes": pl.Float64, "dtype": pl.String,
              "precision": pl.String, "provenance": pl.String, "op_kind": pl.String,
              "thread_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}


def estimate_ops(ranges: pl.DataFrame, *, memory_ops: bool = False) -> pl.DataFrame:
    """One row per covered cpu_op: ``rank, external_id, name, flops, bytes, dtype,
    precision, provenance, op_kind, thread_id, start_ns, end_ns``.

    ``op_kind`` is ``compute`` (GEMM, convolution, attention) or ``memory`` (the
    ``MEMORY_OPS`` models, only with ``memory_ops=True``). Convolutions without 'Concrete
    Inputs' take their output size from the next op on the thread that consumes it.
    """
    ops = ranges.filter((pl.col("kind") == "cpu_op") & pl.col("input_dims").is_not_null())
    for c in ("thread_id", "start_ns", "end_ns"):
        if c not in ops.columns:
            ops = ops.with_columns(pl.lit(None, pl.Int64).alias(c))
    ops = ops.sort("rank", "thread_id", "start_ns", nulls_last=True)
    recs = ops.select("rank", "external_id", pl.col("name").cast(pl.String), "input_dims",
                      "input_types", "concrete_inputs", "thread_id", "start_ns",
                      "end_ns").to_dicts()
    rows = []
    for i, r in enumerate(recs):
        name = str(r["name"])
        compute = (name in MATMUL_OPS or name in CONV_OPS or name in CONV_BWD_OPS
                   or name in GROUPED_MM_OPS or name == "aten::_scaled_mm"
                   or "attention" in name or "flash_attn" in name)
        if not compute and not (memory_ops and name in MEMORY_OPS):
            continue
        try:
            dims = json.loads(r["input_dims"])
            types = json.loads(r["input_types"]) if r["input_types"] else []
            conc = json.loads(r["concrete_inputs"]) if r["concrete_inputs"] else None
        except ValueError:
            continue
        dt = _first_dtype(types)
        if compute:
            fl = op_flops(name, dims, conc)
            if fl is None and name in CONV_OPS and len(dims) >= 2:
                x, w = dims[0], dims[1]
                later = [q for q in recs[i + 1:i + 40] if q["thread_id"] == r["thread_id"]
                         and (q["start_ns"] or 0) >= (r["end_ns"] or 0)]
                out = _conv_out_dims(x, w, later) if isinstance(x, list) and \
                    isinstance(w, list) and x and w else None
                fl = op_flops(name, dims, ["__out__", out]) if out else None
            if fl is None:
                continue
            by = op_bytes(dims, types, name)
            prec = DTYPES[dt][1] if dt else "fp32"
        else:
            work = memory_op_work(name, dims, types)
            if work is None:
                continue
            fl, by = work
            prec = "fp64" if dt == "double" else "fp32"
        rows.append({"rank": r["rank"], "external_id": r["external_id"], "name": name,
                     "flops": fl, "bytes": by, "dtype": dt, "precision": prec,
                     "provenance": ESTIMATED, "op_kind": "compute" if compute else "memory",
                     "thread_id": r["thread_id"], "start_ns": r["start_ns"],
                     "end_ns": r["end_ns"]})
    return pl.DataFrame(rows, schema=OPS_SCHEMA)


#: Note of an op with fp32 inputs whose own FLOP/s exceed the FP32 roof.
TF32_NOTE = "fp32 inputs above the FP32 roof: TF32 tensor cores"
#: Note of fp32 ops under the FP32 roof whose name also has ops above it (TF32 enabled).
FP32_OR_TF32_NOTE = ("fp32 inputs under the FP32 roof, while other ops of this name ran above "
                     "it (TF32 enabled): FP32 or TF32, shapes do not tell; % of roof is "
                     "against FP32, the bound is kept only where the TF32 roof gives the same")


def _tf32_ops(est: pl.DataFrame, op_t: pl.DataFrame, ceil: pl.DataFrame | None
              ) -> pl.DataFrame:
    """``est`` with ``precision`` tf32_tensor (and ``tf32`` True) for each fp32 compute op
    whose own FLOP/s (its FLOPs over its kernels' time) exceed the FP32 roof: physically the
    only way is the TF32 tensor cores. Decided per op, not per op name: a sweep running the
    same ``aten::mm`` with and without TF32 has ops on both sides of the FP32 roof."""
    roof = dict(zip(ceil["name"].to_list(), ceil["value"].to_list(), strict=True)) \
        if ceil is not None and ceil.height else {}
    if not roof.get("tf32_tensor") or not roof.get("fp32"):
        return est.with_columns(pl.lit(False).alias("tf32"))
    rate = pl.col("flops") / (pl.col("_op_ns") * 1e-9)
    over = ((pl.col("precision") == "fp32") & (pl.col("op_kind") == "compute")
            & (pl.col("_op_ns") > 0) & (rate > roof["fp32"])).fill_null(False)
    return (est.join(op_t, on="op_row", how="left", maintain_order="left")
            .with_columns(over.alias("tf32"))
            .with_columns(pl.when(pl.col("tf32")).then(pl.lit("tf32_tensor"))
                          .otherwise(pl.col("precision")).alias("precision"))
            .drop("_op_ns"))


def _fp32_or_tf32(pts: pl.DataFrame, roof: dict[str, float]) -> pl.DataFrame:
    """fp32 points of an op name that also has a tf32_tensor point: the ops under the FP32
    roof may have run either way, so their bound holds only if the TF32 roof gives it too."""
    tf32, bw = roof.get("tf32_tensor"), roof.get("dram")
    names = pts.filter(pl.col("precision") == "tf32_tensor")["kernel_name"].unique()
    if not tf32 or not bw or not names.len():
        return pts
    from traceparse.roofline.model import classify

    amb = ((pl.col("precision") == "fp32") & (pl.col("op_kind") == "compute")
           & pl.col("kernel_name").is_in(names.to_list()))
    # the bound each point would have under the TF32 roof: classify's own rule
    as_tf32 = classify(pts.with_columns(pl.lit(tf32, pl.Float64).alias("peak_flop_per_s"))
                       )["bound"]
    return pts.with_columns(
        pl.when(amb & (pl.col("bound") != as_tf32)).then(None).otherwise(pl.col("bound"))
        .alias("bound"),
        pl.when(amb).then(pl.lit(FP32_OR_TF32_NOTE)).otherwise(pl.col("note")).alias("note"))


def estimated_kernels(ranges: pl.DataFrame, gpu: pl.DataFrame,
                      api: pl.DataFrame | None = None, *, ceil: pl.DataFrame | None = None
                      ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(estimated ops with ``op_row``, linked kernels). Linked kernels carry ``rank,
    device_id, start_ns, dur_ns, op_row, name, precision`` and ``flops``: their op's FLOPs
    shared among its kernels by duration. With ``ceil``, fp32 ops faster than its FP32 roof
    are tf32_tensor ops (:func:`_tf32_ops`)."""
    from traceparse.roofline.link import link_kernels

    est = estimate_ops(ranges, memory_ops=True).with_row_index("op_row")
    linked = link_kernels(est, gpu, api)
    if not linked.height:
        return est.with_columns(pl.lit(False).alias("tf32")), linked
    op_t = linked.group_by("op_row").agg(pl.col("dur_ns").sum().alias("_op_ns"))
    est = _tf32_ops(est, op_t, ceil)
    kern = (linked.select([c for c in ("rank", "device_id", "start_ns", "dur_ns", "op_row")
                           if c in linked.columns])
            .join(op_t, on="op_row")
            .join(est.select("op_row", "name", "precision", pl.col("flops").alias("_fl")),
                  on="op_row")
            .with_columns(pl.when(pl.col("_op_ns") > 0)
                          .then(pl.col("_fl") * pl.col("dur_ns") / pl.col("_op_ns"))
                          .otherwise(0.0).alias("flops"))
            .drop("_op_ns", "_fl"))
    return est, kern


#: Note of an estimated point whose bytes per second exceed the GPU's DRAM peak.
ABOVE_DRAM_NOTE = ("bytes from shapes above the DRAM peak: not all can have come from DRAM "
                   "(L2 hits such as the previous op's output, or bytes the shapes "
                   "over-count), so the DRAM intensity is higher and the % of roof lower "
                   "than shown")


def estimated_points(ranges: pl.DataFrame, gpu: pl.DataFrame, ceil: pl.DataFrame,
                     api: pl.DataFrame | None = None,
                     linked: tuple[pl.DataFrame, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Roofline points for ops with shapes: each kernel is linked to the innermost estimated
    op around its launch (:func:`traceparse.roofline.link.link_kernels`); one point per op
    name and precision (FLOPs and bytes summed over the ops, time over their kernels).
    ``linked`` reuses the result of :func:`estimated_kernels`."""
    from traceparse.roofline.model import classify

    est, kern = linked if linked is not None else estimated_kernels(ranges, gpu, api,
                                                                    ceil=ceil)
    k = (kern.group_by("op_row").agg(pl.col("dur_ns").sum().alias("time_ns"),
                                     pl.len().alias("kernels")) if kern.height else
         pl.DataFrame(schema={"op_row": pl.UInt32, "time_ns": pl.Int64, "kernels": pl.UInt32}))
    # in the ops' order: the float sums below then add in one order every run (the hash
    # join's order varied, and with it the last digit of a point's FLOP/s)
    j = est.join(k, on="op_row", how="inner", maintain_order="left")
    pts = (j.group_by("name", "precision", "op_kind", maintain_order=True)
           .agg(pl.col("kernels").sum().alias("launches"),
                pl.col("time_ns").sum().cast(pl.Float64),
                pl.col("flops").sum(), pl.col("bytes").sum(),
                (pl.col("tf32").any() if "tf32" in j.columns else pl.lit(False)).alias("_tf32"))
           .filter(pl.col("time_ns") > 0))
    roof = dict(zip(ceil["name"].to_list(), ceil["value"].to_list(), strict=True))
    bw = roof.get("dram")
    pts = pts.with_columns(
        pl.col("name").alias("kernel_name"), pl.col("precision").alias("op_precision"),
        (pl.col("flops") / (pl.col("time_ns") * 1e-9)).alias("flop_per_s"),
        (pl.col("bytes") / (pl.col("time_ns") * 1e-9)).alias("dram_bytes_per_s"),
        pl.col("precision").replace_strict(roof, default=None, return_dtype=pl.Float64)
        .alias("peak_flop_per_s"),
        pl.lit(bw, pl.Float64).alias("peak_dram_bytes_per_s"),
        (pl.col("flops") > 0).alias("placed"), pl.lit(None, pl.String).alias("note"),
        pl.lit(ESTIMATED).alias("provenance")).drop("name")
    # fp32 ops faster than the FP32 roof ran on TF32 tensor cores (decided per op in
    # estimated_kernels): they are under the TF32 roof, and the note says why
    pts = pts.with_columns(pl.when(pl.col("_tf32")).then(pl.lit(TF32_NOTE))
                           .otherwise(pl.col("note")).alias("note")).drop("_tf32")
    if bw:
        # faster than DRAM can move: the shapes count every tensor an op reads and writes,
        # and what it found in L2 (a chain's previous output) never came from DRAM
        above = pl.col("dram_bytes_per_s") > bw
        pts = pts.with_columns(
            pl.when(above & pl.col("note").is_null()).then(pl.lit(ABOVE_DRAM_NOTE))
            .otherwise(pl.col("note")).alias("note"))
    pts = _fp32_or_tf32(classify(pts), roof)
    moves = pl.col("kernel_name").is_in(sorted(DATA_MOVEMENT_OPS))
    share = (pl.col("dram_bytes_per_s") * 100.0 / bw).round(0).cast(pl.Int64).cast(pl.String) \
        if bw else pl.lit("?")
    nulls = ("flop_per_s", "peak_flop_per_s", "precision", "ai_dram", "ai_l2", "ai_l1",
             "ridge", "attainable_flop_per_s", "pct_of_roof")
    return pts.with_columns(
        *[pl.when(moves).then(None).otherwise(pl.col(c)).alias(c) for c in nulls],
        pl.when(moves).then(pl.col("dram_bytes_per_s") > 0).otherwise(pl.col("placed"))
        .alias("placed"),
        pl.when(moves).then(pl.lit("memory")).otherwise(pl.col("bound")).alias("bound"),
        pl.when(moves).then(pl.format("{}, {}% of DRAM bandwidth", pl.lit(DATA_MOVEMENT_NOTE),
                                      share))
        .otherwise(pl.col("note")).alias("note"))
