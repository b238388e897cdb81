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
   ``record_param_comms``), whatever its name; :func:`by_nvtx` (run by the nsys reader) a
   kernel whose launch call lies inside an NVTX range of the ``NCCL``/``RCCL`` domain (the
   ranges NCCL itself emits around its API calls) or inside a range named as an NCCL/RCCL
   API call (``ncclAllReduce``, ``ncclSend``, ...) or a communication op (:data:`COMM_OP_RE`:
   ``nccl:all_reduce``, ``c10d::allreduce_``, ``record_param_comms`` as PyTorch's NVTX
   emission names them). A user range that merely contains a collective word
   (``allreduce_hook``) is not used: such ranges also wrap the compute around a collective.
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


#: NVTX domains whose ranges are communication (NCCL/RCCL annotate their API calls).
COMM_DOMAIN_RE = r"(?i)^(nccl|rccl)$"
#: NVTX range names that are communication calls: NCCL/RCCL API calls and communication ops.
COMM_RANGE_RE = r"^(nccl|rccl)[A-Z]\w*$|(?i:" + COMM_OP_RE.removeprefix("(?i)") + ")"
_NVTX_KINDS = ("nvtx_push_pop", "nvtx_start_end")


def by_nvtx(gpu: pl.DataFrame, api: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """``gpu`` with ``category`` set to ``communication`` for kernels whose launch call (same
    process and correlation id) started inside a communication NVTX range
    (:data:`COMM_DOMAIN_RE`, :data:`COMM_RANGE_RE`): on the calling thread for push/pop
    ranges, anywhere in the process for start/end ranges. Unchanged without such ranges."""
    if gpu.height == 0 or api.height == 0 or ranges.height == 0:
        return gpu
    spans = nvtx_comm_spans(ranges)
    if not spans:
        return gpu
    kernels = (gpu.filter(pl.col("kind").cast(pl.String) == "kernel")
               .select("process_id", "correlation_id").unique())
    ids = nvtx_comm_launches(api.join(kernels, on=["process_id", "correlation_id"],
                                      how="semi"), spans)
    return relabel_comm(gpu, ids)


def nvtx_comm_spans(ranges: pl.DataFrame) -> list[tuple[list[str], pl.DataFrame]]:
    """The communication NVTX ranges of ``ranges`` as disjoint intervals per key (``key``,
    ``start_ns``, ``_end``): the calling thread's for push/pop ranges, the process's for
    start/end ranges; [] when there are none (then no kernel is relabelled)."""
    if ranges.height == 0:
        return []
    kind = pl.col("kind").cast(pl.String)
    comm = ranges.filter(
        kind.is_in(_NVTX_KINDS) & pl.col("end_ns").is_not_null()
        & (pl.col("domain").cast(pl.String).fill_null("").str.contains(COMM_DOMAIN_RE)
           | pl.col("name").cast(pl.String).str.contains(COMM_RANGE_RE)))
    out: list[tuple[list[str], pl.DataFrame]] = []
    for rkind, key in (("nvtx_push_pop", ["process_id", "thread_id"]),
                       ("nvtx_start_end", ["process_id"])):
        iv = _disjoint(comm.filter(kind == rkind), key)
        if iv.height:
            out.append((key, iv))
    return out


def nvtx_comm_launches(api: pl.DataFrame, spans: list[tuple[list[str], pl.DataFrame]]
                       ) -> pl.DataFrame:
    """``process_id, correlation_id`` (unique) of the calls of ``api`` that started inside
    one of ``spans`` (:func:`nvtx_comm_spans`). Row by row: the calls of an export can be
    given in any number of pieces and the pieces' results concatenated."""
    calls = (api.filter(pl.col("correlation_id").is_not_null())
             .select("process_id", "thread_id", "correlation_id", "start_ns"))
    inside = [pl.DataFrame(schema={"process_id": pl.Int64, "correlation_id": pl.Int64})]
    for key, iv in spans:
        hit = (calls.sort("start_ns")
               .join_asof(iv, on="start_ns", by=key, strategy="backward",
                          check_sortedness=False)
               .filter(pl.col("_end").is_not_null() & (pl.col("start_ns") < pl.col("_end"))))
        inside.append(hit.select(pl.col("process_id").cast(pl.Int64),
                                 pl.col("correlation_id").cast(pl.Int64)))
    return pl.concat(inside).unique()


def relabel_comm(gpu: pl.DataFrame, ids: pl.DataFrame) -> pl.DataFrame:
    """``gpu`` with the kernels whose ``(process_id, correlation_id)`` is in ``ids``
    (:func:`nvtx_comm_launches`) in category ``communication``."""
    if ids.height == 0 or gpu.height == 0:
        return gpu
    ids = ids.with_columns(pl.col("process_id").cast(gpu.schema["process_id"]),
                           pl.col("correlation_id").cast(gpu.schema["correlation_id"]),
                           pl.lit(True).alias("_comm"))
    dtype = gpu.schema["category"]
    out = gpu.join(ids, on=["process_id", "correlation_id"], how="left", nulls_equal=False,
                   maintain_order="left")
    is_comm = (pl.col("kind").cast(pl.String) == "kernel") & pl.col("_comm").fill_null(False)
    return out.with_columns(pl.when(is_comm).then(pl.lit("communication"))
                            .otherwise(pl.col("category").cast(pl.String))
                            .cast(dtype).alias("category")).drop("_comm")


def _disjoint(rows: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """The union of the ``[start_ns, end_ns)`` intervals of ``rows`` per ``key``: ``key``,
    ``start_ns``, ``_end`` (disjoint, sorted)."""
    if rows.height == 0:
        return pl.DataFrame(schema={**{k: pl.Int64 for k in key}, "start_ns": pl.Int64,
                                    "_end": pl.Int64})
    r = rows.select(*key, "start_ns", "end_ns").sort([*key, "start_ns"])
    new = (pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1).over(key)).fill_null(True)
    return (r.with_columns(new.cum_sum().over(key).alias("_g"))
            .group_by([*key, "_g"], maintain_order=True)
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max().alias("_end"))
            .drop("_g").sort("start_ns"))
