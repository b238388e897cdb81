"""Kernel classes and dtypes from kernel names, for performance models.

A performance model needs to know *what kind* of work a kernel does, to pick the ceiling its
efficiency is relative to. :func:`class_expr` decides the class by name patterns, first match
wins (case-insensitive; patterns are data in :data:`CLASS_RULES`):

* ``communication``: category ``communication`` (:mod:`traceparse.categorize`: NCCL/RCCL,
  NVLS ``multimem_*``, custom all-reduce, symmetric-memory/NVSHMEM kernels, kernels launched
  by a communication op, peer copies);
* ``copy``: memcpy/memset rows and copy kernels (``memcpy|memset|copy_kernel|direct_copy``);
* ``attention``: ``flash|fmha|attention|attn|mha_|sdpa`` (``flash_fwd_kernel``);
* ``conv``: ``conv|cudnn|winograd|implicit_gemm|dgrad|wgrad|fprop``
  (``implicit_convolve_sgemm``);
* ``gemm``: ``gemm|gemv|cublas|cutlass|xmma|matmul|wgmma|triton_tem|^cijk_|nvjet|bmm``
  (``sm90_xmma_gemm_bf16...``;
  ``nvjet_tst_...`` is cuBLAS' Hopper/Blackwell GEMM naming, ``Cijk_Alik_Bljk_...`` the
  Tensile/hipBLASLt one on ROCm);
* ``norm``: ``norm`` (``layer_norm``, ``rmsnorm``, ``batch_norm``, ``add_rmsnorm_quant``);
* ``reduction``: ``reduce|reduction|softmax|sum_|mean|argmax|topk|scan|triton_red|
  triton_per`` (``reduce_kernel``);
* ``elementwise``: ``elementwise|vectorized|unrolled|pointwise|copy|fill|triton_poi|index|
  cat_|gather|scatter`` (``vectorized_elementwise_kernel``);
* ``other``: every other compute kernel.

:data:`CLASSES` lists the names; :func:`select` turns a ``--speedup`` spec that is a class
name (``gemm``) into the rows of that class, so a class name is accepted wherever a kernel
regex is, from this one classifier (kernel mix, attribution's communication, ``whatif``,
calibrate, roofline, layers).

:func:`dtype_expr` reads the dtype from the name (first match): ``bf16|bfloat16`` -> bf16,
``fp8|e4m3|e5m2`` -> fp8, ``int8|imma|i8816|s8s8`` -> int8,
``tf32|tfloat32|tensorop_s1688|tensorop_s16816`` -> tf32 (FP32 I/O on
tensor cores),,
``fp16|f16|half|h884|h1688|h16816|hgemm`` -> fp16, ``fp64|double|dgemm|d884`` -> fp64,
``fp32|f32|float|sgemm|s884|s1688|s16816`` -> fp32, else ``unknown``.

Example:
    >>> import polars as pl
    >>> f = pl.DataFrame({"name": ["sm90_xmma_gemm_bf16bf16_bf16f32", "flash_fwd_kernel",
    ...                   "vectorized_elementwise_kernel<float>"], "category": ["compute"] * 3})
    >>> f.select(class_expr(), dtype_expr()).rows()
    [('gemm', 'bf16'), ('attention', 'unknown'), ('elementwise', 'fp32')]
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: (class, regex) in priority order, applied to compute kernels.
CLASS_RULES: tuple[tuple[str, str], ...] = (
    ("copy", r"memcpy|memset|copy_kernel|direct_copy"),
    ("attention", r"flash|fmha|attention|attn|mha_|sdpa"),
    ("conv", r"conv|cudnn|winograd|implicit_gemm|dgrad|wgrad|fprop"),
    ("gemm", r"gemm|gemv|cublas|cutlass|xmma|matmul|wgmma|triton_tem|^cijk_|nvjet|bmm"),
    ("norm", r"norm"),
    ("reduction", r"reduce|reduction|softmax|sum_|mean|argmax|topk|scan|triton_red"
                  r"|triton_per"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|copy|fill|triton_poi|index"
                    r"|cat_|gather|scatter"),
)

#: Every class name :func:`class_expr` can give.
CLASSES = ("communication", *(c for c, _ in CLASS_RULES), "other")

#: (dtype, regex) in priority order.
DTYPE_RULES: tuple[tuple[str, str], ...] = (
    ("bf16", r"bf16|bfloat16"),
    ("fp8", r"fp8|e4m3|e5m2"),
    ("int8", r"int8|imma|i8816|s8s8"),
    ("tf32", r"tf32|tfloat32|tensorop_s1688|tensorop_s16816"),
    ("fp16", r"fp16|f16|half|h884|h1688|h16816|hgemm"),
    ("fp64", r"fp64|double|dgemm|d884"),
    ("fp32", r"fp32|f32|float|sgemm|s884|s1688|s16816"),
)

#: Classes whose efficiency is FLOP/s relative to a compute ceiling; the others use bytes/s.
COMPUTE_CLASSES = ("gemm", "attention", "conv")

#: dtype -> compute ceiling name (traceparse.roofline.gpus) for tensor-core classes.
TENSOR_CEILING = {"bf16": "bf16_tensor", "fp16": "fp16_tensor", "tf32": "tf32_tensor",
                  "fp8": "fp8_tensor", "int8": "int8_tensor", "fp64": "fp64_tensor",
                  "fp32": "fp32", "unknown": "fp16_tensor"}


def class_expr(name: str = "name", category: str = "category") -> pl.Expr:
    """Polars expression: the kernel class of each row (column ``kclass``)."""
    n = pl.col(name).cast(pl.String).str.to_lowercase()
    cat = pl.col(category).cast(pl.String)
    expr: Any = (pl.when(cat == "communication").then(pl.lit("communication"))
                 .when(cat == "memory").then(pl.lit("copy")))
    for cls, rx in CLASS_RULES:
        expr = expr.when(n.str.contains(rx)).then(pl.lit(cls))
    return expr.otherwise(pl.lit("other")).alias("kclass")


def class_of(name: str, category: str = "compute") -> str:
    """The class :func:`class_expr` gives one kernel ``name`` of ``category``."""
    f = pl.DataFrame({"name": [name], "category": [category]})
    return str(f.select(class_expr()).item())


def select(frame: pl.DataFrame, spec: str) -> pl.Series:
    """Boolean mask of the rows of ``frame`` (``name``, ``category``) that ``spec`` picks: the
    rows of class ``spec`` when it is one of :data:`CLASSES` (case-insensitive), else the rows
    whose name matches ``spec`` as a regex."""
    if spec.lower() in CLASSES:
        return frame.select(class_expr() == spec.lower()).to_series().fill_null(False)
    return frame["name"].cast(pl.String).str.contains(spec).fill_null(False)


def dtype_expr(name: str = "name") -> pl.Expr:
    """Polars expression: the dtype read from the kernel name (column ``kdtype``)."""
    n = pl.col(name).cast(pl.String).str.to_lowercase()
    expr: Any = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
    for dt, rx in DTYPE_RULES:
        expr = expr.when(n.str.contains(rx)).then(pl.lit(dt))
    return expr.otherwise(pl.lit("unknown")).alias("kdtype")


def ceiling_for(kclass: str, dtype: str) -> str:
    """Ceiling name the efficiency of (class, dtype) is relative to: a compute ceiling for
    GEMM/attention/conv (tensor path by dtype), ``dram`` for the others."""
    if kclass in COMPUTE_CLASSES:
        return TENSOR_CEILING.get(dtype, "fp16_tensor")
    return "dram"
