"""What each fix changes in the replay (:mod:`traceparse.analyses.replay`): its mechanism.

:func:`replay_args` turns a fix into the replay's options (what host time goes away, which
syncs stop waiting, which durations change) plus the notes that say what the mechanism
assumed and where it was cut; :mod:`traceparse.analyses.savings` runs the replay and
measures the window it removes. One replay per fix, the same figure everywhere.

* ``cuda_graphs`` (``no_launch_overhead``): the host issuing time of each captured region
  (the attribution's ``launch_overhead_ns``: the GPU idle while the host was in launch
  calls or in the framework ops issuing the next kernel, :mod:`traceparse.analyses.issuing`)
  is removed; the region's kernels then run back to back, started by the region's first
  launch. Regions are cut at blocking syncs (a graph cannot contain a host read of a device
  value); ``cudaMalloc``/``cudaFree`` in the loop (allocation changes) are named as cuts.
  The note gives, per rank, the host issuing time removed: issuing that ran while the GPU
  was busy goes too, so the saving can exceed the launch overhead (the host reaches its
  later work sooner), never the GPU's non-busy time.
* ``host_sync``: every blocking sync stops waiting (the host goes on at the call's entry),
  so the host can queue the next work while the GPU runs. The note names, per rank, the
  calls that blocked and how long they held the host (:func:`blocking_waits`): the most
  the host can gain on the GPU. The saving can exceed the attribution's ``host_sync_ns``
  (the GPU's drain inside the calls): after a sync the GPU's queue is empty and it waits
  on the host's issuing, which a host that runs ahead hides.
* ``pinned_memory``: each copy to or from pageable memory runs at the pinned rate of the
  same direction measured in this trace, else at the host link's nominal rate
  (:data:`HOST_LINK_GBPS`), and its call no longer blocks the host.
* ``input_pipeline``: only with data-loading evidence (:func:`traceparse.analyses.issuing.
  is_data_loading`): the GPU idle while the launching thread was in a data-loading range is
  removed from the host (preparation moved to loader workers running ahead). This assumes
  the workers keep up; a preparation longer than the step divided by the workers still
  bounds the step.
* ``fusion``: each chain of at least two consecutive elementwise/normalisation kernels
  (:data:`FUSIBLE_RE`, by the kernel's or its launching op's name) of a stream, launched
  one after another with nothing else between them, that holds a memory-bound kernel
  (traffic to save; a chain of launch-bound kernels is the CUDA-graphs fix) becomes one
  kernel that reads the chain's inputs and writes its output once: with op shapes, the
  chain's distinct bytes (a run of kernels on data of one size moves its first kernel's
  bytes) at the median rate its memory-bound kernels reached, and no shorter than its
  longest kernel below that rate; without shapes, as long as the chain's longest kernel
  (about the traffic of its largest step), and a kernel chains only when it lasted longer
  than a kernel's fixed cost (:data:`FIXED_KERNEL_NS`) or than its own launch call; the
  host issuing time between the chain's launches goes away with the launches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses.codes import matches
from traceparse.analyses.profiler_cost import GRAPH_LAUNCH_RE
from traceparse.timeline import Timeline

#: Memory-bound kernels a compiler fuses (elementwise, normalisation, softmax, casts).
FUSIBLE_RE = (r"(?i)elementwise|pointwise|vectorized|unrolled|triton_poi|triton_per|"
              r"norm|softmax|dropout|cast|convert|fill|reduce_kernel|reduction")
#: A kernel's fixed cost on the GPU (ns): an empty or one-element kernel lasts about 1-2 µs
#: in CUPTI's timestamps on Volta to Hopper GPUs (0.8-1.1 µs for the one-element adds of
#: the launch-bound scenario on H100/H200); a kernel longer than this moved or computed
#: something a fused kernel need not repeat.
FIXED_KERNEL_NS = 2_000
#: Nominal host-link rate per direction (GB/s) by GPU name, for a trace without pinned
#: copies of its own: PCIe 5.0 x16 63, PCIe 4.0 x16 31.5, PCIe 3.0 x16 15.75 (spec
#: figures), NVLink-C2C (GH200/GB200) 450. First match wins.
HOST_LINK_GBPS = ((r"(?i)gh200|gb200|gb300", 450.0),
                  (r"(?i)h100|h200|h800|h20\b|b200|b100|l40|l4\b|mi300|mi325|rtx 50|rtx pro",
                   63.0),
                  (r"(?i)a100|a800|a10\b|a30|a40|a6000|l20|rtx 30|rtx 40|mi2\d\d|mi100", 31.5),
                  (r"(?i)v100|t4\b|p100|rtx 20|titan", 15.75))

CHANGES = ("no_launch_overhead", "overlap_comm", "host_sync", "pinned_memory",
           "input_pipeline", "fusion")


def replay_args(tl: Timeline, change: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The replay options of ``change`` and its notes; None when the trace gives the
    mechanism nothing to act on."""
    if change == "no_launch_overhead":
        return _graphs(tl)
    if change == "overlap_comm":
        # nothing to overlap without communication: no replay, no row (its replay would be
        # the unchanged one, 0.3 s per million kernels for a saving of 0 of a bound of 0)
        comm = tl.gpu.select((pl.col("category") == "communication").any()).item()
        return ({"overlap_comm": True}, []) if comm else (None, [])
    if change == "host_sync":
        return {"drop_syncs": True}, _sync_note(tl)
    if change == "pinned_memory":
        return _pinned(tl)
    if change == "input_pipeline":
        return _input(tl)
    if change == "fusion":
        return _fusion(tl)
    raise ValueError(f"unknown change {change!r}")


def blocking_waits(tl: Timeline) -> pl.DataFrame:
    """Per rank: ``calls`` and ``wait_ns`` (summed entry to return) of the blocking syncs
    the replay finds (entered before the work launched ahead of them ended and returned
    after it: :func:`traceparse.analyses.replay.blocking_syncs`), the waits the
    ``host_sync`` fix removes."""
    from traceparse.analyses.replay import blocking_syncs

    return (blocking_syncs(tl).group_by("rank")
            .agg(pl.len().cast(pl.Int64).alias("calls"),
                 (pl.col("sync_end") - pl.col("sync_start")).sum().alias("wait_ns"))
            .sort("rank"))


def _per_rank_note(head: str, parts: list[str], shown: int = 4) -> list[str]:
    """One note ``head`` + the first ``shown`` per-rank ``parts`` ("rank R: ..."), and how
    many ranks are left out; none without parts."""
    if not parts:
        return []
    more = f"; {len(parts) - shown:,} more ranks" if len(parts) > shown else ""
    return [head + "; ".join(parts[:shown]) + more]


def _sync_note(tl: Timeline) -> list[str]:
    return sync_note(blocking_waits(tl))


def sync_note(waits: pl.DataFrame) -> list[str]:
    """The ``host_sync`` fix's note of :func:`blocking_waits`' rows ``waits`` (``rank,
    calls, wait_ns`` in rank order)."""
    from traceparse import units

    return _per_rank_note("the blocking syncs that stop waiting, ", [
        f"rank {r}: {units.plural(c, 'call')} that held the host {units.duration(ns)}"
        for r, c, ns in waits.iter_rows()])


def _graphs(tl: Timeline) -> tuple[dict[str, Any], list[str]]:
    """CUDA graphs: the host's issuing time (launch calls and the framework ops issuing
    the next kernel: the attribution's ``launch`` host set) inside each captured region is
    removed, so the region's kernels run at GPU speed after its first launch; a graph
    launch the program already makes is kept (the region's one launch). With step
    ranges a region is one step from its first launch call on (the graph launch; host time
    before it, e.g. the loop between steps, stays); without them, the replay's epochs
    between blocking syncs."""
    from traceparse.analyses import intervals
    from traceparse.analyses.steps import step_windows

    notes = graph_cuts_note(blocking_counts(tl.api))
    issuing = graph_issuing(tl)
    sw = step_windows(tl)
    if sw.height == 0:
        return {"remove": issuing}, [*notes, *_removed_note(issuing)]
    calls = tl.api.select("rank", "start_ns").filter(pl.col("start_ns").is_not_null())
    first = (sw.join(calls, on="rank", how="inner", suffix="_c")
             .filter((pl.col("start_ns_c") >= pl.col("start_ns"))
                     & (pl.col("start_ns_c") < pl.col("end_ns")))
             .group_by("rank", "start_ns", "end_ns")
             .agg(pl.col("start_ns_c").min().alias("_first")))
    regions = first.select("rank", pl.col("_first").alias("start_ns"), "end_ns")
    rem = intervals.intersect(issuing, regions.cast(issuing.schema),  # type: ignore[arg-type]
                              by=["rank"])
    notes.append(f"one region per step ({sw.height:,} steps), from its first launch")
    return {"remove": rem}, [*notes, *_removed_note(rem)]


def graph_issuing(tl: Timeline) -> pl.DataFrame:
    """``rank, start_ns, end_ns``: the attribution's ``launch`` host set (busy time
    included) less the program's own graph launches, what the CUDA-graphs fix removes
    before step regions cut it (:func:`_graphs`)."""
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import busy_activities, host_sets

    issuing = host_sets(tl, busy_activities(tl), ["rank", "device_id"])["launch"].select(
        "rank", "start_ns", "end_ns")
    # a region keeps one graph launch: where the program already launches a graph, that
    # call is it and stays (under the profiler it also holds the recording of every node)
    glaunch = (tl.api.select("rank", "start_ns", "end_ns", "name")
               .filter(matches(tl.api["name"], GRAPH_LAUNCH_RE)).drop("name").drop_nulls())
    if glaunch.height:
        issuing = intervals.subtract(issuing, glaunch.cast(issuing.schema),  # type: ignore[arg-type]
                                     by=["rank"])
    return issuing


def _removed_note(rem: pl.DataFrame) -> list[str]:
    """Per rank, the host issuing time the graphs remove (the union of ``rem``): more than
    the launch overhead wherever the issuing ran while the GPU was busy; without it the
    host reaches its later work sooner."""
    from traceparse.analyses import intervals

    if rem.height == 0:
        return []
    return removed_note(intervals.union(rem, by=["rank"])
                        .group_by("rank").agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                              .alias("ns")))


def removed_note(lengths: pl.DataFrame) -> list[str]:
    """:func:`_removed_note` of the per-rank union lengths ``lengths`` (``rank, ns``)."""
    from traceparse import units

    return _per_rank_note("host issuing time removed, ",
                          [f"rank {r}: {units.duration(ns)}"
                           for r, ns in lengths.sort("rank").iter_rows()])


def blocking_counts(api: pl.DataFrame) -> pl.DataFrame:
    """``name`` (String), ``count``: the calls of ``api`` matching the attribution's
    blocking calls (:data:`~traceparse.analyses.attribution.BLOCKING_API_RE`) per name;
    counts of pieces of the calls add up."""
    from traceparse.analyses.attribution import BLOCKING_API_RE

    # the regex on the distinct names, the hits alone cast to strings
    hit = (api.select(pl.col("name").filter(matches(api["name"], BLOCKING_API_RE)))
           .to_series().cast(pl.String))
    return hit.value_counts().cast({"count": pl.Int64})


def graph_cuts_note(counts: pl.DataFrame) -> list[str]:
    """Where the graphs' regions are cut: the blocking calls counted by name (``counts``:
    :func:`blocking_counts`, summed over pieces)."""
    total = int(counts["count"].sum() or 0)
    if total == 0:
        return []
    counts = counts.sort(["count", "name"], descending=[True, False])
    listed = ", ".join(f"{n} x{c}" for n, c in counts.head(3).iter_rows())
    return [f"regions cut at {total:,} blocking calls ({listed}): a graph cannot hold a "
            "host read of a device value, a synchronisation or an allocation"]


def _pageable(tl: Timeline) -> pl.DataFrame:
    return host_copies(tl.gpu)


def host_copies(gpu: pl.DataFrame) -> pl.DataFrame:
    """The host-device copies of ``gpu`` (``kind`` memcpy, ``copy_kind`` HtoD or DtoH,
    cast to a string) with ``_i`` (the row's index) and ``_host``, the host side's memory
    kind (``Pageable``, ``Pinned``, ...)."""
    host = pl.when(pl.col("copy_kind").cast(pl.String) == "HtoD").then(
        pl.col("src_kind").cast(pl.String)).otherwise(pl.col("dst_kind").cast(pl.String))
    # the kind compared as a code; the copies alone have their copy kind cast
    return (gpu.with_row_index("_i").filter(pl.col("kind") == "memcpy")
            .filter(pl.col("copy_kind").cast(pl.String).is_in(["HtoD", "DtoH"]))
            .with_columns(host.alias("_host"), pl.col("copy_kind").cast(pl.String)))


def link_gbps(tl: Timeline) -> float | None:
    """The host link's nominal rate for the trace's first named device."""
    import re

    names = tl.devices["name"].drop_nulls().to_list() if tl.devices.height else []
    for rx, gbps in HOST_LINK_GBPS:
        if any(re.search(rx, str(n)) for n in names):
            return gbps
    return None


#: Per direction (HtoD, DtoH): the pinned copies' summed bytes and durations (those of
#: positive duration) and the number of pageable copies; sums of pieces add up.
CopySums = dict[str, tuple[int, int, int]]


def copy_sums(copies: pl.DataFrame) -> CopySums:
    """:data:`CopySums` of :func:`host_copies` rows."""
    out: CopySums = {}
    for d in ("HtoD", "DtoH"):
        mine = copies.filter(pl.col("copy_kind") == d)
        pn = mine.filter((pl.col("_host") == "Pinned") & (pl.col("dur_ns") > 0))
        out[d] = (int(pn["bytes"].sum() or 0), int(pn["dur_ns"].sum() or 0),
                  mine.filter(pl.col("_host") == "Pageable").height)
    return out


def pinned_rates(sums: CopySums, link: float | None) -> tuple[dict[str, float], list[str]]:
    """The rate (GB/s = bytes/ns) a pageable copy of each direction would reach pinned:
    the trace's pinned copies' rate, else the host link's nominal rate (only for a
    direction with pageable copies), and the notes saying which."""
    rate: dict[str, float] = {}
    notes = []
    for d in ("HtoD", "DtoH"):
        if sums[d][1]:
            rate[d] = float(sums[d][0]) / float(sums[d][1])
            notes.append(f"{d} at {rate[d]:.1f} GB/s, the rate this trace's pinned {d} "
                         "copies reached")
    for d in ("HtoD", "DtoH"):
        if d not in rate and link and sums[d][2]:
            rate[d] = link
            notes.append(f"{d} at {link:g} GB/s, the host link's nominal rate (no pinned "
                         f"{d} copy in the trace to measure)")
    return rate, notes


def pinned_durations(copies: pl.DataFrame, dur: np.ndarray, rate: dict[str, float]
                     ) -> np.ndarray:
    """``dur`` (one per row the copies' ``_i`` index) with each pageable copy's duration
    no longer than its bytes at ``rate`` of its direction."""
    dur = dur.copy()
    for d, gbps in rate.items():
        rows = copies.filter((pl.col("_host") == "Pageable") & (pl.col("copy_kind") == d))
        new = np.ceil(rows["bytes"].fill_null(0).to_numpy() / gbps).astype(np.int64)
        idx = rows["_i"].to_numpy()
        dur[idx] = np.minimum(dur[idx], new)
    return dur


def _pinned(tl: Timeline) -> tuple[dict[str, Any] | None, list[str]]:
    m = _pageable(tl)
    pg = m.filter(pl.col("_host") == "Pageable")
    if pg.height == 0:
        return None, []
    rate, notes = pinned_rates(copy_sums(m), link_gbps(tl))
    if not rate:
        return None, ["no pinned copy in the trace and no known host link for its GPU"]
    dur = pinned_durations(m, tl.gpu["dur_ns"].to_numpy(), rate)
    calls = _pageable_calls(tl, pg)
    return {"durations": pl.Series("dur_ns", dur), "drop_syncs": calls}, notes


def _pageable_calls(tl: Timeline, pg: pl.DataFrame) -> pl.DataFrame:
    """``rank, process_id, start_ns`` of the calls that issued the pageable copies."""
    from traceparse.links import launch_links

    rows = launch_links(tl)["api_row_file"].gather(pg["_i"]).drop_nulls()
    return tl.api.select("rank", "process_id", "start_ns")[rows]


def data_loading_idle(tl: Timeline) -> pl.DataFrame:
    """GPU idle (the attribution's ``idle_ns``) while a launching thread was in a
    data-loading range: ``rank, device_id, start_ns, end_ns, name``."""
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import busy_activities, part_intervals
    from traceparse.analyses.hostrows import per_group
    from traceparse.analyses.issuing import host_ranges, loading_range

    r = host_ranges(tl).filter(loading_range(pl.col("name"), pl.col("kind")))
    if r.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "device_id": pl.Int32,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64})
    g = ["rank", "device_id"]
    pr = per_group(r, busy_activities(tl), g)
    idle = part_intervals(tl, "idle_ns", group=g)
    return intervals.intersect(idle, pr.select(*g, "start_ns", "end_ns").cast(
        {c: idle.schema[c] for c in g}), by=g)  # type: ignore[arg-type]


def _input(tl: Timeline) -> tuple[dict[str, Any] | None, list[str]]:
    from traceparse.analyses.issuing import host_ranges, loading_range

    iv = data_loading_idle(tl)
    if iv.height == 0:
        return None, []
    names = (host_ranges(tl).filter(loading_range(pl.col("name"), pl.col("kind")))
             ["name"].value_counts()
             .sort(["count", "name"], descending=[True, False]).head(3))
    listed = ", ".join(f"{n} x{c}" for n, c in names.iter_rows())
    return ({"remove": iv.select("rank", "start_ns", "end_ns")},
            [f"data-loading ranges: {listed}",
             "assumes loader workers keep up (preparation per batch / workers <= step)"])


def fusion_chains(tl: Timeline) -> pl.DataFrame:
    """Fusible kernels with their chain: ``_i`` (row in ``tl.gpu``), ``chain`` (id),
    ``name``, ``start_ns``, ``dur_ns``; chains of at least two kernels only. A chain is a
    run of consecutive fusible kernels of one stream (in start order) inside one step
    (``ProfilerStep`` ranges, when the trace has them). Fusible: named like
    :data:`FUSIBLE_RE` and, with shapes, with known bytes (:func:`memory_bound`; a chain is
    kept when one of its kernels is memory-bound), without shapes at least as long as its
    own launch call."""
    return _chains(tl)[0]


def _chains(tl: Timeline) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """:func:`fusion_chains` and the :func:`memory_bound` frame it was built from (None
    without shapes), which :func:`_fusion` prices the chains with."""
    # the columns read selected before the filter copies them (a filter of every gpu
    # column was the cost); kinds compared as codes
    k = (tl.gpu.with_row_index("_i")
         .select("_i", "rank", "process_id", "device_id", "stream_id", "kind", "start_ns",
                 "dur_ns", "name").filter(pl.col("kind") != "sync"))
    k = _stream_sorted(k, ["rank", "process_id", "device_id", "stream_id", "start_ns"])
    # the name stays a dictionary code: the regex runs on the distinct names
    kernel = pl.col("kind") == "kernel"
    fus = kernel & matches(tl.gpu["name"], FUSIBLE_RE)
    same = pl.all_horizontal(*(pl.col(c).eq_missing(pl.col(c).shift(1))
                               for c in ("rank", "process_id", "device_id", "stream_id")))
    # a fused kernel cannot span two steps (the host runs the loop and the profiler's
    # step between them): the step a kernel starts in cuts chains
    from traceparse.analyses.steps import step_windows

    sw = step_windows(tl)
    step = (np.searchsorted(sw["start_ns"].to_numpy(), k["start_ns"].to_numpy(), side="right")
            if sw.height else np.zeros(k.height, np.int64))
    mb = memory_bound(tl)
    if mb is not None:
        # shapes known: every kernel with known bytes that its own or its launching op's
        # name calls fusible chains (LayerNorm backward's weight-gradient kernel is named
        # for its columns, its op for the normalisation), and a chain is kept when one of
        # its kernels moved its bytes at memory speed (traffic for the fused kernel to
        # save); its neighbours below that rate (reductions, small kernels, launch-bound
        # ones) fuse with it and bound the fused kernel's time (:func:`_fusion`). A chain
        # without a memory-bound kernel is left to the CUDA-graphs fix
        k = k.join(mb.select("_i", "_mb", "op"), on="_i", how="left", maintain_order="left")
        fus = ((fus | (kernel & pl.col("op").str.contains(FUSIBLE_RE).fill_null(False)))
               & pl.col("_mb").is_not_null())
        seed = pl.col("_mb").fill_null(False)
    else:
        # no shapes: a kernel no longer than a kernel's fixed cost (:data:`FIXED_KERNEL_NS`)
        # and shorter than its own launch call is bound by fixed launch costs, not by bytes
        # (that is a CUDA-graph problem), so it does not chain. A longer one did work
        # beyond the fixed cost even when a profiler's launch call outlasts it (nsys and
        # torch.profiler both lengthen launch calls, not kernels)
        from traceparse.links import launch_links

        rows = launch_links(tl)["api_row"].gather(k["_i"])
        call = (tl.api["end_ns"] - tl.api["start_ns"]).gather(rows)
        k = k.with_columns(call.alias("_call"))
        fus = fus & (pl.col("_call").is_null() | (pl.col("dur_ns") >= pl.col("_call"))
                     | (pl.col("dur_ns") > FIXED_KERNEL_NS))
        seed = pl.lit(True)
    k = k.with_columns(fus.alias("_f"), seed.alias("_g"), pl.Series("_s", step))
    same = same & (pl.col("_s") == pl.col("_s").shift(1))
    new = ~(same.fill_null(False) & pl.col("_f") & pl.col("_f").shift(1).fill_null(False))
    k = k.with_columns(new.cum_sum().alias("chain")).filter(pl.col("_f"))
    n = k.group_by("chain").agg(pl.len(), pl.col("_g").any())
    return k.join(n.filter((pl.col("len") >= 2) & pl.col("_g")), on="chain", how="semi").select(
        "_i", "chain", pl.col("name").cast(pl.String), "start_ns", "dur_ns"), mb


def _stream_sorted(k: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``k.sort(by)``; integer columns without nulls or ties on ``by`` are ordered by one
    argsort of an int64 code (:func:`~traceparse.analyses._arrays.unique_order`: the
    same rows in the same order, the only one there is)."""
    from traceparse.analyses._arrays import unique_order

    order = None
    if all(k.schema[c].is_integer() and not k[c].null_count() for c in by):
        order = unique_order([k[c].to_numpy() for c in by[:-1]], k[by[-1]].to_numpy())
    return k.sort(by) if order is None else k[order]


_DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "half": 2,
                "bfloat16": 2, "long int": 8, "int": 4, "bool": 1, "unsigned char": 1,
                "signed char": 1, "short int": 2, "c10::Float8_e4m3fn": 1,
                "c10::Float8_e5m2": 1}


def kernel_bytes(tl: Timeline) -> pl.DataFrame:
    """``_i`` (row in ``tl.gpu``), ``bytes`` and ``elems``: what a kernel's launching op
    reads and writes, from the op's recorded input shapes and dtypes (Kineto
    ``record_shapes``; the op is the ``cpu_op`` with the kernel's ``external_id``): every
    tensor input once plus an output as large as its largest input (elementwise), and the
    element count of that largest input (the data the op works on). Kernels without shapes are left
    out."""
    import json

    if "external_id" not in tl.gpu.columns or tl.ranges.height == 0:
        return pl.DataFrame(schema={"_i": pl.UInt32, "bytes": pl.Int64, "elems": pl.Int64,
                                    "op": pl.String})
    ops = (tl.ranges.filter((pl.col("kind").cast(pl.String) == "cpu_op")
                            & pl.col("input_dims").is_not_null()
                            & pl.col("external_id").is_not_null())
           .select("rank", "external_id", "input_dims", "input_types",
                   pl.col("name").cast(pl.String).alias("op"))
           .unique(subset=["rank", "external_id"], keep="first"))
    sizes: list[int | None] = []
    elems: list[int | None] = []
    for dims, types in ops.select("input_dims", "input_types").iter_rows():
        try:
            d, t = json.loads(dims), json.loads(types or "[]")
        except ValueError:
            d, t = [], []
        each = [(int(np.prod(x)) * _DTYPE_BYTES[ty], int(np.prod(x)))
                for x, ty in zip(d, t, strict=False)
                if isinstance(x, list) and x and ty in _DTYPE_BYTES]
        big = max(each) if each else None
        sizes.append(sum(b for b, _ in each) + big[0] if big else None)
        elems.append(big[1] if big else None)
    ops = ops.with_columns(pl.Series("bytes", sizes, pl.Int64),
                           pl.Series("elems", elems, pl.Int64)).drop_nulls("bytes")
    k = (tl.gpu.with_row_index("_i").select("_i", "rank", "external_id", "kind")
         .filter(pl.col("kind") == "kernel").drop("kind"))
    return k.join(ops.select("rank", "external_id", "bytes", "elems", "op"),
                  on=["rank", "external_id"], how="inner").select("_i", "bytes", "elems", "op")


def memory_bound(tl: Timeline) -> pl.DataFrame | None:
    """``_i, bytes, _mb``: kernels with known bytes and whether they are memory-bound
    (moved their bytes at least half as fast as the device's DRAM bandwidth, from the GPU
    table; without a known GPU, the highest rate any kernel of the trace reached). None
    when no kernel has shapes."""
    kb = kernel_bytes(tl)
    if kb.height == 0:
        return None
    rate = kb.join(tl.gpu.with_row_index("_i").select("_i", "dur_ns"), on="_i").with_columns(
        (pl.col("bytes") / pl.col("dur_ns").clip(1, None)).alias("_gbps"))
    peak = _dram_gbps(tl) or float(rate["_gbps"].max() or 0.0)  # type: ignore[arg-type]
    return rate.with_columns((pl.col("_gbps") >= 0.5 * peak).alias("_mb"))


def _dram_gbps(tl: Timeline) -> float | None:
    from traceparse.roofline.gpus import identify

    for name in (tl.devices["name"].drop_nulls().to_list() if tl.devices.height else []):
        row, _why = identify(str(name))
        if row and row.get("mem_bandwidth_gbs"):
            return float(row["mem_bandwidth_gbs"])  # type: ignore[arg-type]
    return None


def _fusion(tl: Timeline) -> tuple[dict[str, Any] | None, list[str]]:
    from traceparse.analyses import intervals

    ch, mb = _chains(tl)
    if ch.height == 0:
        return None, []
    per = ch.group_by("chain").agg(pl.col("dur_ns").max().alias("_max"),
                                   pl.col("_i").max().alias("_last"),
                                   pl.col("start_ns").min().alias("start_ns"),
                                   pl.col("start_ns").max().alias("end_ns"), pl.len())
    dur = tl.gpu["dur_ns"].to_numpy().copy()
    dur[ch["_i"].to_numpy()] = 0
    last = ch.sort("start_ns").group_by("chain").agg(pl.col("_i").last())
    lm = last.join(per.select("chain", "_max"), on="chain")
    by_bytes = 0
    if mb is not None:
        # the fused kernel moves the chain's distinct bytes at the median rate the chain's
        # memory-bound kernels reached, and is no shorter than any member that DRAM traffic
        # does not explain (below the memory-bound rate: fixed costs of a small kernel, or
        # arithmetic). Distinct bytes: a chain is read as runs of members working on data
        # of one size (the largest input's element count, so a view is the same data); a
        # run is one tensor carried through elementwise steps and moves its first member's
        # input and output; a new size is new data (the optimizer's next parameter, a
        # reduction's output), so the runs' bytes add up
        cb = (ch.join(mb.select("_i", "bytes", "elems", "_gbps", "_mb"), on="_i", how="inner")
              .sort("start_ns")
              .with_columns(pl.col("elems").ne_missing(pl.col("elems").shift(1))
                            .over("chain").alias("_run")))
        fused = cb.group_by("chain").agg(pl.max_horizontal(
            (pl.col("bytes").filter("_run").sum() / pl.col("_gbps").filter("_mb").median())
            .round(0).cast(pl.Int64),
            pl.col("dur_ns").filter(~pl.col("_mb")).max()).alias("_fused"))
        lm = lm.join(fused, on="chain", how="left")
        by_bytes = int(lm["_fused"].is_not_null().sum())
        lm = lm.with_columns(pl.coalesce("_fused", "_max").alias("_max"))
    dur[lm["_i"].to_numpy()] = lm["_max"].to_numpy()
    # the host's issuing time between the chain's first and last launch calls goes away
    # with the launches (all of it: the fused chain no longer keeps the GPU busy while the
    # host issues, so time that overlapped the chain's kernels counts too)
    from traceparse.analyses.attribution import busy_activities, host_sets
    from traceparse.links import launch_links

    g = ["rank", "device_id"]
    issuing = host_sets(tl, busy_activities(tl), g)["launch"]
    rows = launch_links(tl)["api_row"].gather(ch["_i"])
    calls = pl.DataFrame({"_i": ch["_i"], "chain": ch["chain"],
                          "_c": tl.api["start_ns"].gather(rows)}).drop_nulls("_c")
    span = (calls.join(tl.gpu.with_row_index("_i").select("_i", *g), on="_i")
            .group_by("chain", *g)
            .agg(pl.col("_c").min().alias("start_ns"), pl.col("_c").max().alias("end_ns")))
    rem = intervals.intersect(issuing.select(*g, "start_ns", "end_ns"), span.select(
        *g, "start_ns", "end_ns").cast({c: issuing.schema[c] for c in g}),  # type: ignore[arg-type]
        by=g)
    return ({"durations": pl.Series("dur_ns", dur), "remove": rem.select("rank", "start_ns",
                                                                         "end_ns")},
            [fusion_note(per.height, int(per['len'].sum()), by_bytes),
             _largest_chain(tl, ch, lm.select("chain", "_max"))])


def fusion_note(chains: int, kernels: int, by_bytes: int) -> str:
    """The fusion fix's first note (``by_bytes`` chains priced from the op shapes)."""
    return (f"{chains:,} chains of {kernels:,} fusible kernels, each fused into one kernel: "
            + (f"{by_bytes:,} moving their distinct bytes (from the op shapes) at the "
               "median rate of their memory-bound kernels, no shorter than their slowest "
               "kernel below that rate" if by_bytes else "")
            + ("; " if by_bytes and by_bytes < chains else "")
            + (f"{chains - by_bytes:,} as long as the chain's longest"
               if by_bytes < chains else ""))


def _largest_chain(tl: Timeline, ch: pl.DataFrame, fused: pl.DataFrame) -> str:
    """Where to find the chain whose fusion saves the most kernel time: its kernels, first
    and last by name, rank, stream and start (from the rank's first GPU activity), and its
    kernel time before and after."""
    g = tl.gpu.with_row_index("_i").select("_i", "rank", "stream_id")
    c = (ch.sort("start_ns").join(g, on="_i").group_by("chain", maintain_order=True)
         .agg(pl.len(), pl.col("dur_ns").sum(), pl.col("name").first().alias("first"),
              pl.col("name").last().alias("last"), pl.col("rank").first(),
              pl.col("stream_id").first(), pl.col("start_ns").min())
         .join(fused, on="chain").with_columns((pl.col("dur_ns") - pl.col("_max")).alias("_s"))
         .sort("_s", "chain", descending=[True, False]).row(0, named=True))
    t0 = tl.gpu.filter(pl.col("rank") == c["rank"])["start_ns"].min()
    return largest_chain_note(c, t0)  # type: ignore[arg-type]


def largest_chain_note(c: dict[str, Any], t0: int) -> str:
    """The note on chain ``c`` (:func:`_largest_chain`'s row: ``len``, ``dur_ns``,
    ``first``, ``last``, ``rank``, ``stream_id``, ``start_ns``, ``_max``), ``t0`` the
    rank's first GPU activity."""
    from traceparse.kernelname import short_kernel_name

    return (f"the largest saving: {c['len']:,} kernels from {short_kernel_name(c['first'])} "
            f"to {short_kernel_name(c['last'])} (rank {c['rank']}, stream {c['stream_id']}, "
            f"{(c['start_ns'] - t0) / 1e6:,.3f} ms after the rank's first GPU activity): "
            f"{c['dur_ns'] / 1e3:,.1f} µs of kernel time fused into {c['_max'] / 1e3:,.1f} µs")

