"""Collective communication (NCCL/RCCL): time, overlap with compute, bandwidth, rank skew.

* :func:`collectives` — one row per communication kernel: the collective (``coll_name``
  when the trace has it, else the communication op whose span holds the kernel's launch
  call, else parsed from ``ncclKernel_<Coll>_...`` / ``ncclDevKernel_<Coll>_...``: NCCL
  runs all-to-all, and in older versions other collectives too, as ``SendRecv`` kernels),
  its time **exposed** (no compute kernel ran on the same
  (rank, device)) and **overlapped** (some compute kernel ran: interval intersection with
  the union of compute kernels), message size and bandwidths where sizes are known.
* :func:`comm_summary` — per (collective, process group): count, time, exposed/overlapped,
  bytes, mean algbw/busbw.
* :func:`collective_skew` — multi-rank: the *i*-th instance of the same collective in the
  same process group on every rank is one collective call; its skew is the spread of the
  kernel start times across ranks. The rank that starts last is the **straggler**: the others
  sit in the kernel waiting for it, so their kernel time is inflated by the skew.

Bandwidth (nccl-tests conventions): ``bytes`` = max(in, out) elements x dtype size (the
full buffer: allgather's output, reducescatter's input), ``algbw = bytes / time``,
``busbw = algbw x factor(n)`` with n the group size: allreduce 2(n-1)/n, allgather,
reducescatter and alltoall (n-1)/n, broadcast, reduce and send/recv 1. Bandwidths are in
GB/s (10^9 bytes/s = bytes/ns).
"""

from __future__ import annotations

import polars as pl

from traceparse import units
from traceparse.analyses import intervals
from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Collectives in which every participant needs data from every other: no participant's
#: kernel can end before the last one starts (:func:`collective_skew`'s ``same_call``).
ALL_TO_ALL_DEPENDENT = ("allreduce", "allgather", "reducescatter", "alltoall", "barrier")

#: Bytes per element for the dtype strings of Kineto's ``record_param_comms``.
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2,
    "byte": 1, "char": 1, "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}

_KERNEL_COLL_RE = r"(?i)(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)"
#: Host ops that name the collective they launch: PyTorch's c10d ops and its NCCL
#: annotations, the inference engines' custom ops (``c10d::alltoall_base_``,
#: ``nccl:_all_gather_base``, ``vllm::all_reduce``); group 1 is the name after the prefix.
#: What follows a comma is ``emit_nvtx``'s counters (nsys: ``nccl:all_to_all, op_id =
#: 993361``; with shapes also ``, sizes = [...]``), not part of the name.
_OP_COLL_RE = (r"(?i)^(?:c10d::|c10d_functional::|_c10d_functional::|nccl:|vllm::|sglang::"
               r"|_C_custom_ar::|trtllm::|sgl_kernel::)(\w*(?:all_?reduce|all_?gather"
               r"|reduce_?scatter|all_?to_?all|broadcast|barrier|send|recv|reduce|gather"
               r"|scatter)\w*)(?:,.*)?$")
#: Range kinds that sit on the thread that launched a kernel.
_THREAD_RANGE_KINDS = ("cpu_op", "user_annotation", "nvtx_push_pop")


def collective_expr(cols: tuple[str, ...] = ()) -> pl.Expr:
    """Normalised collective name: allreduce, allgather, reducescatter, alltoall, broadcast,
    reduce, sendrecv, barrier, or the lower-cased raw name.

    Uses ``coll_name`` when present, else ``op_coll`` (the launching op's collective, see
    :func:`launch_op_collective`; optional column), else the ``<Coll>`` of the kernel name.

    Example:
        ``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` -> allreduce;
        ``ncclDevKernel_SendRecv(...)`` -> sendrecv; coll_name ``_allgather_base`` ->
        allgather; ``reduce_scatter_tensor_coalesced`` -> reducescatter.
    """
    raw = pl.coalesce(pl.col("coll_name").cast(pl.String),
                      pl.col("op_coll") if "op_coll" in cols else pl.lit(None, pl.String),
                      pl.col("name").cast(pl.String).str.extract(_KERNEL_COLL_RE, 1))
    n = raw.str.to_lowercase().str.replace_all("_", "")
    return (pl.when(n.str.contains("allreduce")).then(pl.lit("allreduce"))
            .when(n.str.contains("allgather")).then(pl.lit("allgather"))
            .when(n.str.contains("reducescatter")).then(pl.lit("reducescatter"))
            .when(n.str.contains("alltoall")).then(pl.lit("alltoall"))
            .when(n.str.contains("broadcast")).then(pl.lit("broadcast"))
            .when(n.str.contains("barrier")).then(pl.lit("barrier"))
            .when(n.str.contains("send|recv")).then(pl.lit("sendrecv"))
            .when(n.str.contains("reduce")).then(pl.lit("reduce"))
            .otherwise(n))


def busbw_factor() -> pl.Expr:
    """Bus-bandwidth factor of ``collective`` for group size ``coll_group_size`` (null when
    the size is unknown)."""
    n = pl.col("coll_group_size").cast(pl.Float64)
    c = pl.col("collective")
    return (pl.when(c == "allreduce").then(2.0 * (n - 1) / n)
            .when(c.is_in(["allgather", "reducescatter", "alltoall"])).then((n - 1) / n)
            .when(c.is_in(["broadcast", "reduce", "sendrecv"])).then(pl.lit(1.0))
            .otherwise(None))


def launch_op_collective(tl: Timeline, kernels: pl.DataFrame) -> pl.Series:
    """For each row of ``kernels`` (GPU rows with ``rank, process_id, correlation_id``), the
    collective named by the communication op whose span holds the kernel's launch call on
    the launching thread (:data:`_OP_COLL_RE`, the name after the prefix); null without one.

    The innermost such op (the latest to start before the launch) must still be open at the
    launch; ``record_param_comms`` names no collective in older PyTorch and is not used.

    Example:
        ``cudaLaunchKernel`` (correlation 7) at t=50 on thread 3 inside ``nccl:all_to_all``
        [10, 90) and ``c10d::alltoall_base_`` [20, 80) on thread 3 -> ``alltoall_base_``;
        a launch at t=95 -> null.
    """
    key = ["rank", "process_id", "thread_id"]
    none = pl.Series("op_coll", [None] * kernels.height, pl.String)
    if kernels.height == 0 or tl.ranges.height == 0 or tl.api.height == 0:
        return none
    ops = (tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(_THREAD_RANGE_KINDS))
           .with_columns(op_coll=pl.col("name").cast(pl.String).str.extract(_OP_COLL_RE, 1))
           .filter(pl.col("op_coll").is_not_null())
           .select(*[pl.col(k).cast(pl.Int64) for k in key], "start_ns", "end_ns", "op_coll"))
    if ops.height == 0:
        return none
    ids = ["rank", "process_id", "correlation_id"]
    calls = (tl.api.filter(pl.col("correlation_id").is_not_null())
             .select(*[pl.col(k).cast(pl.Int64) for k in (*ids, "thread_id")],
                     launch_ns=pl.col("start_ns"))
             .sort("launch_ns").unique(ids, keep="first"))
    k = (kernels.select(*[pl.col(c).cast(pl.Int64) for c in ids]).with_row_index("_i")
         .join(calls, on=ids, how="inner").sort("launch_ns"))
    hit = (k.join_asof(ops.sort("start_ns"), left_on="launch_ns", right_on="start_ns",
                       by=key, strategy="backward", check_sortedness=False)
           .filter(pl.col("end_ns") >= pl.col("launch_ns")).select("_i", "op_coll"))
    return (pl.DataFrame({"_i": pl.int_range(kernels.height, dtype=pl.UInt32, eager=True)})
            .join(hit, on="_i", how="left").sort("_i")["op_coll"])


def _overlap_ns(rows: pl.DataFrame, cover: pl.DataFrame, by: list[str]) -> pl.Series:
    """For each row interval, the length covered by the disjoint intervals ``cover``.

    covered(t) = length of ``cover`` before t = (cumulative length of the intervals that
    started before t, minus the part of the last one after t); overlap = covered(end) -
    covered(start). Two ``join_asof`` lookups, no per-row loop.
    """
    u = cover.sort([*by, "start_ns"]).with_columns(
        _cum=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over(by))
    u = u.select(*by, pl.col("start_ns").alias("_t"), pl.col("start_ns").alias("_us"),
                 pl.col("end_ns").alias("_ue"), "_cum").sort("_t")

    def covered(col: str) -> pl.Series:
        q = rows.select(*by, pl.col(col).alias("_t")).with_row_index("_i").sort("_t")
        j = q.join_asof(u, on="_t", by=by, strategy="backward", check_sortedness=False)
        val = (pl.col("_cum") - (pl.col("_ue") - pl.min_horizontal("_t", "_ue"))).fill_null(0)
        return j.with_columns(_v=val).sort("_i")["_v"]

    if rows.height == 0:
        return pl.Series("overlap", [], pl.Int64)
    return (covered("end_ns") - covered("start_ns")).alias("overlap")


def collectives(tl: Timeline) -> pl.DataFrame:
    """One row per communication kernel with collective, exposure and bandwidth.

    Returns:
        ``rank, device_id, stream_id, process_id, name, collective, coll_pg, start_ns,
        end_ns, dur_ns, overlapped_ns, exposed_ns, coll_group_size, coll_dtype, bytes,
        algbw_gbps, busbw_gbps`` sorted by rank, device, start. ``bytes`` and the
        bandwidths are null when the trace has no message sizes (nsys) or an unknown dtype.

    Example:
        Device 0: compute kernel [0, 100), allreduce kernel [60, 160) of 25 float elements
        in a group of 4 -> overlapped 40, exposed 60, bytes 100, algbw 100/100 = 1.0 GB/s,
        busbw 1.0 * 2 * 3 / 4 = 1.5 GB/s.
    """
    # one computation per timeline: comm_summary, the stragglers and calibrate share it
    return cached(tl, "collectives", ("gpu", "api", "ranges"), lambda: _collectives(tl))


def _collectives(tl: Timeline) -> pl.DataFrame:
    g = tl.gpu
    by = ["rank", "device_id"]
    comm = g.filter((pl.col("kind") == "kernel") & (pl.col("category") == "communication"))
    # without communication kernels nothing overlaps them: skip the union of every kernel;
    # the four columns the union reads are selected before the filter copies them (a
    # filter of the whole frame copied every column of every compute kernel: +0.6 GB at
    # 10M kernels for a trace without communication)
    spans = g.select(*by, "start_ns", "end_ns", "category")
    compute = (spans.filter(pl.col("category") == "compute") if comm.height
               else spans.head(0)).drop("category")
    comp = intervals.union(compute, by=by)
    cols: tuple[str, ...] = ()
    if comm.height and comm["coll_name"].null_count():
        comm = comm.with_columns(launch_op_collective(tl, comm).alias("op_coll"))
        cols = ("op_coll",)
    return kernel_rows(comm, _overlap_ns(comm, comp, by), cols)


#: The GPU columns :func:`kernel_rows` reads (with ``op_coll`` when named by the op).
KERNEL_COLUMNS = ("rank", "device_id", "stream_id", "process_id", "name", "coll_name",
                  "coll_pg", "start_ns", "end_ns", "dur_ns", "coll_group_size",
                  "coll_dtype", "coll_in_nelems", "coll_out_nelems")


def kernel_rows(comm: pl.DataFrame, overlapped: pl.Series, cols: tuple[str, ...] = ()
                ) -> pl.DataFrame:
    """:func:`collectives`' rows from the communication kernels ``comm`` (GPU rows with
    :data:`KERNEL_COLUMNS`, and ``op_coll`` when ``cols`` names it) and each one's time
    under compute (``overlapped``, ns): the collective, exposure, bytes and bandwidths."""
    comm = comm.with_columns(collective_expr(cols).alias("collective"))
    comm = comm.with_columns(overlapped_ns=overlapped.cast(pl.Int64)).with_columns(
        exposed_ns=pl.col("dur_ns") - pl.col("overlapped_ns"))
    size = pl.coalesce(pl.max_horizontal("coll_in_nelems", "coll_out_nelems"))
    elem = (pl.col("coll_dtype").cast(pl.String).str.to_lowercase()
            .replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64))
    comm = comm.with_columns(bytes=(size * elem).cast(pl.Int64))
    comm = comm.with_columns(
        algbw_gbps=pl.when(pl.col("dur_ns") > 0)
        .then(pl.col("bytes").cast(pl.Float64) / pl.col("dur_ns")).otherwise(None))
    comm = comm.with_columns(busbw_gbps=pl.col("algbw_gbps") * busbw_factor())
    return comm.select(
        "rank", "device_id", "stream_id", "process_id", pl.col("name").cast(pl.String),
        "collective", pl.col("coll_pg").cast(pl.String), "start_ns", "end_ns", "dur_ns",
        "overlapped_ns", "exposed_ns", "coll_group_size",
        pl.col("coll_dtype").cast(pl.String), "bytes", "algbw_gbps", "busbw_gbps",
    ).sort("rank", "device_id", "start_ns")


def concurrency(tl: Timeline) -> dict[str, int]:
    """How much collective-kernel time overlapped other collective kernels on the same
    (rank, device) (different streams or process groups): ``concurrent_ns`` = summed kernel
    time - length of its union, ``concurrent_exposed_ns`` = summed ``exposed_ns`` - length
    of the union not under compute. The per-kernel columns of :func:`collectives` (and the
    sums of :func:`comm_summary`) count such time once per kernel; the breakdown's exposed
    communication counts wall time once, so the two differ by ``concurrent_exposed_ns``.

    Example:
        device 0: compute [0, 50); allreduce [0, 100) and alltoall [80, 120) on two streams
        -> kernel time 100 + 40 = 140, union [0, 120) = 120: concurrent 20; exposed 50 + 40
        = 90, union not under compute 120 - 50 = 70: concurrent exposed 20.
    """
    c = collectives(tl)
    if c.height == 0:
        return {"concurrent_ns": 0, "concurrent_exposed_ns": 0}
    by = ["rank", "device_id"]
    u = intervals.union(c.select(*by, "start_ns", "end_ns"), by=by)
    compute = tl.gpu.filter(pl.col("category") == "compute").select(*by, "start_ns", "end_ns")
    return concurrency_of(c, int(_overlap_ns(u, intervals.union(compute, by=by), by).sum()))


def concurrency_of(c: pl.DataFrame, under: int) -> dict[str, int]:
    """:func:`concurrency` of a :func:`collectives` frame ``c``, ``under`` the length of
    the union of its kernels (per rank and device) under compute, summed."""
    if c.height == 0:
        return {"concurrent_ns": 0, "concurrent_exposed_ns": 0}
    by = ["rank", "device_id"]
    u = intervals.union(c.select(*by, "start_ns", "end_ns"), by=by)
    wall = int((u["end_ns"] - u["start_ns"]).sum())
    return {"concurrent_ns": int(c["dur_ns"].sum()) - wall,
            "concurrent_exposed_ns": int(c["exposed_ns"].sum()) - (wall - under)}


def no_collectives_reason(tl: Timeline) -> str:
    """Why :func:`collectives` is empty, in words: no collective kernels, and, when the
    trace has other communication (peer-to-peer copies, which the breakdown counts as
    communication), how much, so the two never seem to disagree.

    Example:
        a trace with 3 ``PtoP`` copies of 10 ns and no NCCL kernel -> "no NCCL/RCCL
        collective kernels in the trace; its communication is 3 peer-to-peer copies
        (30 ns, in the breakdown's communication), which are not collectives".
    """
    comm = tl.gpu.filter((pl.col("category").cast(pl.String) == "communication")
                         & (pl.col("kind").cast(pl.String) != "kernel"))
    if comm.height == 0:
        return ("no NCCL/RCCL collective kernels in the trace, so no communication to "
                "analyse")
    return (f"no NCCL/RCCL collective kernels in the trace; its communication is "
            f"{units.plural(comm.height, 'peer-to-peer copy', 'peer-to-peer copies')} "
            f"({units.duration(int(comm['dur_ns'].sum()))}, in the breakdown's communication), "
            f"which are not collectives")


def comm_summary(tl: Timeline) -> pl.DataFrame:
    """Per (collective, process group): count, total/exposed/overlapped time, bandwidth.

    Returns:
        ``collective, coll_pg, count, ranks, time_ns, exposed_ns, overlapped_ns,
        exposed_pct, bytes, avg_bytes, algbw_gbps, busbw_gbps`` (bandwidths are
        time-weighted: total bytes / total time of the kernels with a known size), sorted by
        time descending.
    """
    return summarize(collectives(tl))


def summarize(c: pl.DataFrame) -> pl.DataFrame:
    """:func:`comm_summary` of a :func:`collectives` frame ``c`` (the chunked summary's
    collectives read in pieces, :mod:`traceparse.comm_chunks`, take this way in)."""
    known = pl.col("bytes").is_not_null()
    out = (c.group_by("collective", "coll_pg")
           .agg(pl.len().cast(pl.Int64).alias("count"),
                pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"),
                pl.col("dur_ns").sum().cast(pl.Int64).alias("time_ns"),
                pl.col("exposed_ns").sum().cast(pl.Int64).alias("exposed_ns"),
                pl.col("overlapped_ns").sum().cast(pl.Int64).alias("overlapped_ns"),
                pl.col("bytes").sum().cast(pl.Int64).alias("bytes"),
                pl.col("bytes").mean().alias("avg_bytes"),
                (pl.col("bytes").sum() / pl.col("dur_ns").filter(known).sum())
                .fill_nan(None).alias("algbw_gbps"),
                ((pl.col("busbw_gbps") * pl.col("dur_ns")).sum()
                 / pl.col("dur_ns").filter(pl.col("busbw_gbps").is_not_null()).sum())
                .fill_nan(None).alias("busbw_gbps"))
           .with_columns(exposed_pct=pl.col("exposed_ns") * 100.0 / pl.col("time_ns"),
                         bytes=pl.when(pl.col("avg_bytes").is_null()).then(None)
                         .otherwise(pl.col("bytes")))
           .sort(["time_ns", "collective"], descending=[True, False]))
    return out.select("collective", "coll_pg", "count", "ranks", "time_ns", "exposed_ns",
                      "overlapped_ns", "exposed_pct", "bytes", "avg_bytes", "algbw_gbps",
                      "busbw_gbps")


def matched_calls(c: pl.DataFrame) -> pl.DataFrame:
    """Match the kernels of :func:`collectives` rows ``c`` into collective calls: the one
    definition :func:`collective_skew` and the calibration's collective fits
    (:func:`traceparse.analyses.calibrate.collective_instances`) share.

    The *i*-th kernel of collective C in process group G (a null group is ``"(default)"``)
    on each (rank, device) is call ``seq = i``. ``same_call`` (the same value on every row
    of a call) says whether the matched kernels can be one call: in
    :data:`ALL_TO_ALL_DEPENDENT` collectives every participant needs data from every other,
    so no kernel of one call ends before the last one starts: ``min(end) >= max(start)``
    over the call's rows -> true, else false (one rank's window holds a call the other's
    does not, or their clocks disagree); null for the other collectives (send/recv,
    broadcast, reduce), where it cannot be checked, and for a call seen on one participant.

    Returns:
        ``c`` with ``coll_pg`` filled, sorted by rank, device, start, plus ``seq``,
        ``same_call``.

    Example:
        allreduce kernels rank 0 [100, 150), [300, 320); rank 1 [130, 160), [200, 250) ->
        seq 0: min end 150 >= max start 130, same call; seq 1: rank 1 ends at 250 before
        rank 0 starts at 300: not one call (same_call false on both rows).
    """
    key = ["collective", "coll_pg", "seq"]
    c = c.with_columns(pl.col("coll_pg").fill_null("(default)"))
    c = c.sort("rank", "device_id", "start_ns").with_columns(
        seq=pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "device_id", "collective",
                                                         "coll_pg"))
    checked = (pl.col("collective").is_in(ALL_TO_ALL_DEPENDENT)
               & (pl.struct("rank", "device_id").n_unique().over(key) >= 2))
    return c.with_columns(
        same_call=pl.when(checked)
        .then(pl.col("end_ns").min().over(key) >= pl.col("start_ns").max().over(key))
        .otherwise(None))


def collective_skew(tl: Timeline) -> pl.DataFrame:
    """Skew of each collective call across ranks, and its straggler.

    Participants are (rank, device) pairs, so a single-process multi-GPU trace and a
    one-GPU-per-rank trace both work. Instances are matched by order: the *i*-th kernel of
    collective C in process group G on each participant is call ``seq = i`` (a null group is
    its own group). Only calls seen on at least two participants are returned.

    Returns:
        ``collective, coll_pg, seq, participants, first_start_ns, last_start_ns, skew_ns``
        (last start - first start), ``straggler_rank``, ``straggler_device`` (the one whose
        kernel started last: the others waited for it), ``end_skew_ns`` (spread of the
        kernel ends), ``wait_ns`` (sum over participants of their start's lead over the
        straggler's: kernel time spent waiting), ``same_call``: whether the matched kernels
        can be one call. In allreduce, allgather, reducescatter, alltoall and barrier every
        participant needs data from every other, so no kernel of one call ends before the
        last one starts: ``min(end) >= max(start)`` -> true, else false (the instances are
        mismatched, e.g. one rank's window holds a call the other's does not, or the ranks'
        clocks disagree); null for the collectives this cannot be checked on (send/recv,
        broadcast, reduce). A call that is not ``same_call`` has no straggler
        (``straggler_rank``, ``straggler_device``, ``wait_ns`` null) and sorts last; sorted
        by skew descending otherwise.

    Example:
        allreduce #0 starts at 100 on rank 0, 130 on rank 1, 110 on rank 2 -> skew 30,
        straggler rank 1, wait (130-100) + 0 + (130-110) = 50; if rank 0's kernel ended at
        120 (before rank 1 started at 130) -> same_call false, no straggler.
    """
    return skew(collectives(tl))


def skew(c: pl.DataFrame) -> pl.DataFrame:
    """:func:`collective_skew` of a :func:`collectives` frame ``c``."""
    c = matched_calls(c)
    key = ["collective", "coll_pg", "seq"]
    last = pl.col("start_ns").max()
    out = (c.group_by(key)
           .agg(pl.len().cast(pl.Int64).alias("participants"),
                pl.col("start_ns").min().alias("first_start_ns"),
                last.alias("last_start_ns"),
                pl.col("rank").sort_by("start_ns").last().alias("straggler_rank"),
                pl.col("device_id").sort_by("start_ns").last().alias("straggler_device"),
                (pl.col("end_ns").max() - pl.col("end_ns").min()).alias("end_skew_ns"),
                (last - pl.col("start_ns")).sum().alias("wait_ns"),
                pl.col("same_call").first())
           .filter(pl.col("participants") >= 2)
           .with_columns(skew_ns=pl.col("last_start_ns") - pl.col("first_start_ns")))
    blamed = pl.col("same_call").fill_null(True)
    out = out.with_columns(pl.when(blamed).then(pl.col(c)).otherwise(None).alias(c)
                           for c in ("straggler_rank", "straggler_device", "wait_ns"))
    return out.select(*key, "participants", "first_start_ns", "last_start_ns", "skew_ns",
                      "straggler_rank", "straggler_device", "end_skew_ns", "wait_ns",
                      "same_call"
                      ).sort([blamed.not_(), "skew_ns", "collective", "seq"],
                             descending=[False, True, False, False])


def straggler_summary(tl: Timeline) -> pl.DataFrame:
    """How often each (rank, device) was the straggler, and the skew it caused.

    Returns:
        ``straggler_rank, straggler_device, calls`` (number of collective calls it was
        last to start), ``skew_ns`` (their summed skew: what the earliest participant of
        each call waited), ``wait_ns`` (what all the other participants waited for it in
        those calls, summed: :func:`collective_skew`'s ``wait_ns``), ``share`` (of all
        matched calls); sorted by summed skew descending. Calls whose kernels cannot be one
        call (``same_call`` false in :func:`collective_skew`) blame no one and are not
        counted.

    Example:
        calls straggled by rank 1: skew 30 (wait 50) and skew 10 (wait 15) -> calls 2,
        skew_ns 40, wait_ns 65.
    """
    return stragglers(collective_skew(tl))


def stragglers(skewed: pl.DataFrame) -> pl.DataFrame:
    """:func:`straggler_summary` of a :func:`collective_skew` frame ``skewed``."""
    s = skewed.filter(pl.col("straggler_rank").is_not_null())
    n = s.height
    return (s.group_by("straggler_rank", "straggler_device")
            .agg(pl.len().cast(pl.Int64).alias("calls"),
                 pl.col("skew_ns").sum().cast(pl.Int64).alias("skew_ns"),
                 pl.col("wait_ns").sum().cast(pl.Int64).alias("wait_ns"))
            .with_columns(share=pl.col("calls") / (n if n else 1))
            .sort(["skew_ns", "straggler_rank"], descending=[True, False]))
