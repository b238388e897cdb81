"""Category rules for GPU activities (``gpu.category``), applied by every parser.

Rules, first match wins:

1. ``kind == "sync"`` -> **sync** (waits recorded on a GPU lane, e.g. Kineto ``cuda_sync``).
2. ``kind == "memcpy"`` with ``copy_kind == "PtoP"`` -> **communication** (peer copies).
3. ``kind in ("memcpy", "memset")`` -> **memory**.
4. a kernel whose name matches :data:`COMM_KERNEL_RE` (NCCL/RCCL kernels such as
   ``ncclKernel_AllReduce_...``, ``ncclDevKernel_AllGather_...``, ``rccl...``) -> **communication**.
5. every other kernel -> **compute**.
"""

from __future__ import annotations

import re

import polars as pl

#: Kernel names counted as communication.
COMM_KERNEL_RE = r"(?i)^(void )?(nccl|rccl)|ncclKernel|ncclDevKernel"


def is_comm_kernel(name: str) -> bool:
    """True if ``name`` is a collective-communication kernel."""
    return re.search(COMM_KERNEL_RE, name) is not None


def category_expr() -> pl.Expr:
    """Polars expression computing ``category`` from ``kind``, ``copy_kind`` and ``name``."""
    kind = pl.col("kind").cast(pl.String)
    return (
        pl.when(kind == "sync").then(pl.lit("sync"))
        .when((kind == "memcpy") & (pl.col("copy_kind").cast(pl.String) == "PtoP"))
        .then(pl.lit("communication"))
        .when(kind.is_in(["memcpy", "memset"])).then(pl.lit("memory"))
        .when(pl.col("name").cast(pl.String).str.contains(COMM_KERNEL_RE))
        .then(pl.lit("communication"))
        .otherwise(pl.lit("compute"))
        .cast(pl.Categorical)
        .alias("category")
    )
