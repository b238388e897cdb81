"""NVTX range statistics and the projection of GPU time onto ranges and torch ops.

* :func:`nvtx_sum` reproduces ``nsys stats --report nvtx_sum`` (verified on the shared nsys
  exports, see ``tests/test_ranges.py``).
* :func:`gpu_projection` answers "which range or op owns which GPU time": each kernel
  belongs to the **innermost** range of the chosen kinds that was open on the launching
  thread (NVTX start/end ranges: in the launching process) when its launch call started
  (:func:`traceparse.links.kernel_ranges`), the rule of
  ``nsys stats --report cuda_gpu_kern_sum:nvtx-name``.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceparse.analyses._dist import nsys_stats, round_half_up
from traceparse.links import HOST_RANGE_KINDS, kernel_ranges
from traceparse.timeline import Timeline

#: Label of kernels whose launch call was inside no range of the requested kinds.
NO_RANGE = "(no range)"

_STYLE = {"nvtx_push_pop": "PushPop", "nvtx_start_end": "StartEnd"}


def range_label() -> pl.Expr:
    """``domain:name`` for ranges of a named NVTX domain, ``name`` in the default domain.

    This is how ``nsys stats`` prints ranges of non-default domains (e.g. NCCL's
    ``NCCL:ncclAllReduce``, MPI wrappers' ``MPI:MPI_Send``, cuBLAS's
    ``cuBLAS:cublasSgemmEx``).
    """
    name = pl.col("name").cast(pl.String)
    dom = pl.col("domain").cast(pl.String)
    return pl.when(dom.is_not_null()).then(dom + pl.lit(":") + name).otherwise(name)


def nvtx_sum(tl: Timeline) -> pl.DataFrame:
    """``nsys stats --report nvtx_sum``: NVTX push/pop and start/end range statistics.

    Groups closed NVTX ranges by (style, label) where style is ``PushPop`` or ``StartEnd``
    and the label is :func:`range_label`. Columns: ``Time (%)`` (share of the summed range
    time of all groups, 1 decimal), ``Total Time (ns)``, ``Instances``, ``Avg``, ``Med``,
    ``Min``, ``Max``, ``StdDev`` (sample, 0.0 for one instance) ``(ns)``, ``Style``,
    ``Range``. Sorted by total time descending. Ranges never closed are left out; marks are
    not ranges.

    Example:
        Push/pop ``step`` 0..10 and 20..50, and ``MPI:MPI_Send`` (domain ``MPI``) 60..70:
        ``step`` total 40, 2 instances, Avg 20.0, Med 20.0, StdDev sqrt(2 * 10^2 / 1) =
        14.1, Time 40/50 = 80.0 %; ``MPI:MPI_Send`` total 10, 20.0 %.
    """
    r = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(_STYLE))
                         & pl.col("end_ns").is_not_null())
    r = r.with_columns(
        Style=pl.col("kind").cast(pl.String).replace_strict(_STYLE),
        Range=range_label(),
    )
    out = (r.group_by("Style", "Range")
           .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("Total Time (ns)"),
                pl.len().cast(pl.Int64).alias("Instances"),
                *nsys_stats("dur_ns", "")))
    total = out["Total Time (ns)"].sum()
    out = out.with_columns(
        (pl.col("Total Time (ns)") / (total if total else 1) * 100.0).alias("Time (%)"))
    out = out.select("Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                     "Min (ns)", "Max (ns)", "StdDev (ns)", "Style", "Range")
    out = out.sort(["Total Time (ns)", "Instances", "Range"], descending=[True, True, False])
    return round_half_up(out, ["Time (%)", "Avg (ns)", "Med (ns)", "StdDev (ns)"])


def gpu_projection(tl: Timeline, *, kinds: Sequence[str] = HOST_RANGE_KINDS,
                   gpu_kinds: Sequence[str] | None = ("kernel",)) -> pl.DataFrame:
    """GPU time projected onto ranges / ops: one row per innermost range name.

    Each GPU row of ``gpu_kinds`` is owned by the innermost range of ``kinds`` open on its
    launching thread when the launch call started; NVTX start/end ranges are process-wide
    and own launches of every thread of their process, and where they and a thread-local
    range both enclose a launch the one that started last wins (NVTX domains are shown as
    ``domain:name``). Kernels with no launch call, or launched outside every range, are
    reported as :data:`NO_RANGE`, so ``gpu_ns`` sums to the total GPU time of
    ``gpu_kinds``.

    The **launcher** is a separate fact, shown where the trace records it: Kineto tags
    each kernel with the ``External id`` of the torch op (``cpu_op``) whose dispatch
    launched it, which is how HTA and TraceLens attribute kernels to ops. A user
    annotation opened *inside* that op (``ProcessGroupNCCL`` opens ``nccl:all_reduce``
    inside ``record_param_comms``) is the innermost range holding the launch call, so it
    owns the kernel here, and the ``launcher`` column names ``record_param_comms``. The
    External-id op counts as launcher only when it holds the launch call on the launching
    thread (a stale id naming an op that had already ended is ignored); see
    :func:`launcher_ops`. The column appears only when at least one kernel has a
    launcher, so NVTX-only traces (nsys) keep their columns.

    Args:
        tl: the timeline.
        kinds: range kinds, e.g. ``("nvtx_push_pop", "nvtx_start_end")`` for NVTX or
            ``("cpu_op",)`` for torch ops.
        gpu_kinds: GPU kinds to project (default kernels only).

    Returns:
        Columns ``range`` (label), ``range_kind``, ``launcher`` (Kineto only, see
        above; ``""`` where none), ``kernels``, ``gpu_ns``, ``share``
        (of the projected GPU time, 0..1), ``avg_ns``; sorted by ``gpu_ns`` descending.

    Example:
        Thread 5 has ranges fwd [0, 100) and, inside it, attn [10, 40). Kernels of 30 ns
        launched at 20 (inside attn), 20 ns launched at 50 (fwd only) and 50 ns launched
        at 200 (no range) give attn 1 kernel 30 ns 0.3; fwd 1 kernel 20 ns 0.2;
        (no range) 1 kernel 50 ns 0.5.
    """
    k = launcher_ops(kernel_ranges(tl, kinds=kinds, gpu_kinds=gpu_kinds, prefix="r_"), tl)
    k = k.with_columns(
        range=pl.when(pl.col("r_name").is_null()).then(pl.lit(NO_RANGE)).otherwise(
            pl.when(pl.col("r_domain").is_not_null())
            .then(pl.col("r_domain").cast(pl.String) + pl.lit(":")
                  + pl.col("r_name").cast(pl.String))
            .otherwise(pl.col("r_name").cast(pl.String))),
        range_kind=pl.col("r_kind").cast(pl.String),
    )
    total = k["dur_ns"].sum()
    keys = ["range", "range_kind"]
    if k["launcher"].is_not_null().any():
        k = k.with_columns(pl.col("launcher").fill_null(""))
        keys.append("launcher")
    out = (k.group_by(keys)
           .agg(pl.len().cast(pl.Int64).alias("kernels"),
                pl.col("dur_ns").sum().cast(pl.Int64).alias("gpu_ns"))
           .with_columns(share=pl.col("gpu_ns") / (total if total else 1),
                         avg_ns=pl.col("gpu_ns") / pl.col("kernels"))
           .sort(["gpu_ns", "range", *keys[2:]], descending=[True] + [False] * (len(keys) - 1)))
    return out


def launcher_ops(k: pl.DataFrame, tl: Timeline) -> pl.DataFrame:
    """Add ``launcher``: the ``cpu_op`` that Kineto's ``External id`` names for each GPU row.

    ``k`` holds GPU rows with their launch call (:func:`traceparse.links.launch_join`
    columns). The op is looked up on ``(rank, process_id, external_id)``; it is kept only
    if it was open on the launching thread when the launch call started
    (``op start <= api_start_ns < op end``), else null, as it is for rows without an
    External id or launch call (every nsys row).

    Example:
        Kernel with External id 7 launched at 50 on thread 3; ``cpu_op``
        ``record_param_comms`` with External id 7 on thread 3 spans [40, 90) -> launcher
        ``record_param_comms``. Had the op spanned [10, 30), the launcher would be null.
    """
    if "external_id" not in k.columns or "external_id" not in tl.ranges.columns:
        return k.with_columns(launcher=pl.lit(None, pl.String))
    key = ["rank", "process_id", "external_id"]
    ops = (tl.ranges.filter((pl.col("kind").cast(pl.String) == "cpu_op")
                            & pl.col("external_id").is_not_null())
           .sort("start_ns").unique(key, keep="first", maintain_order=True)
           .select(*key, pl.col("name").cast(pl.String).alias("_op"),
                   pl.col("thread_id").alias("_op_tid"), pl.col("start_ns").alias("_op_s"),
                   pl.col("end_ns").alias("_op_e")))
    j = k.join(ops, on=key, how="left", nulls_equal=False, maintain_order="left")
    holds = ((pl.col("_op_tid") == pl.col("api_thread_id"))
             & (pl.col("_op_s") <= pl.col("api_start_ns"))
             & (pl.col("api_start_ns") < pl.col("_op_e")))
    return j.with_columns(launcher=pl.when(holds).then(pl.col("_op"))).drop(
        "_op", "_op_tid", "_op_s", "_op_e")
