"""Category rules for GPU activities (``gpu.category``), applied by every parser.

Rules, first match wins:

1. ``kind == "sync"`` -> **sync** (waits recorded on a GPU lane, e.g. Kineto ``cuda_sync``).
2. ``kind == "memcpy"`` with ``copy_kind == "PtoP"`` -> **communication** (peer copies).
3. ``kind in ("memcpy", "memset")`` -> **memory**.
4. a kernel whose name matches :data:`COMM_KERNEL_RE` -> **communication**: kernels whose
   job is moving data between GPUs, named by family (documented in docs/analyses.md,
   "Communication kernels"):

   - NCCL/RCCL/MSCCL: ``ncclKernel_AllReduce_...``, ``ncclDevKernel_AllGather_...``,
     ``rccl...``, ``msccl...``;
   - NVLink SHARP (NVLS) multimem collectives: ``multimem_all_reduce_kernel``, ``multimem_*``;
   - custom all-reduce kernels of inference engines: vLLM/SGLang
     ``cross_device_reduce_1stage/2stage``, one-/two-shot all-reduce
     (``one_shot_all_reduce``, ``two_shot_all_reduce``, ``oneshot_*``, ``twoshot_*``),
     TensorRT-LLM ``allreduce_fusion_*``/``lamport*``, ``custom_ar``/``quick_all_reduce``;
   - symmetric memory and PGAS: ``symm_mem*``, ``nvshmem*``/``nvshmemi_*``, ``rocshmem*``,
     DeepEP ``deep_ep::...`` dispatch/combine, Transformer Engine ``userbuffers`` kernels;
   - any kernel whose name spells a collective: ``all_reduce``/``allreduce``,
     ``all_gather``/``allgather``, ``reduce_scatter``/``reducescatter``, ``all_to_all``/
     ``alltoall``.

   :func:`by_launcher` (run by the Kineto reader) additionally makes communication a kernel
   launched by a communication op (``c10d::``, ``vllm::``/``sglang::`` all-reduce,
   ``record_param_comms``), whatever its name. (NVTX domains are not read for this yet.)
5. every other kernel -> **compute**.
"""

from __future__ import annotations

import re

import polars as pl

#: Kernel names counted as communication.
COMM_KERNEL_RE = (r"(?i)^(void )?(nccl|rccl|msccl)|ncclKernel|ncclDevKernel|multimem_"
                  r"|cross_device_reduce|one_?shot_?all_?reduce|two_?shot_?all_?reduce"
                  r"|oneshot|twoshot|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
                  r"|custom_ar|lamport|symm_?mem|nvshmem|rocshmem|deep_ep::|userbuffers")


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


#: Host ops whose kernels are communication whatever their name: PyTorch distributed
#: (``c10d::allreduce_``, ``record_param_comms``), and the all-reduce/all-gather/... custom ops
#: of inference engines (``vllm::all_reduce``, ``sglang::...``, ``_C_custom_ar::...``,
#: ``trtllm::allreduce``).
COMM_OP_RE = (r"(?i)^(c10d::|c10d_functional::|_c10d_functional::|record_param_comms|nccl:)"
              r"|^(vllm|sglang|_C_custom_ar|trtllm|sgl_kernel)::\w*"
              r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|custom_ar)")


def by_launcher(gpu: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """``gpu`` with ``category`` set to ``communication`` for kernels that a communication op
    (:data:`COMM_OP_RE`, a ``cpu_op`` range) launched: the op shares the kernel's Kineto
    ``External id``. Frames without ``external_id`` come back unchanged."""
    if "external_id" not in gpu.columns or "external_id" not in ranges.columns \
            or gpu.height == 0 or ranges.height == 0:
        return gpu
    ops = (ranges.filter(pl.col("name").cast(pl.String).str.contains(COMM_OP_RE)
                         & pl.col("external_id").is_not_null())
           .select(pl.col("external_id").cast(pl.Int64)).unique())
    if ops.height == 0:
        return gpu
    hit = (pl.col("kind").cast(pl.String) == "kernel") & pl.col("external_id").is_in(
        ops["external_id"].to_list())
    dtype = gpu.schema["category"]
    return gpu.with_columns(pl.when(hit).then(pl.lit("communication"))
                            .otherwise(pl.col("category").cast(pl.String))
                            .cast(dtype).alias("category"))
