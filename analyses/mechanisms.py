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
* ``host_sync``: every blocking sync stops waiting (the host goes on at the call's entry),
  so the host can queue the next work while the GPU runs.
* ``pinned_memory``: each copy to or from pageable memory runs at the pinned rate of the
  same direction measured in this trace, else at the host link's nominal rate
  (:data:`HOST_LINK_GBPS`), and its call no longer blocks the host.
* ``input_pipeline``: only with data-loading evidence (:func:`traceparse.analyses.issuing.
  is_data_loading`): the GPU idle while the launching thread was in a data-loading range is
  removed from the host (preparation moved to loader workers running ahead). This assumes
  the workers keep up; a preparation longer than the step divided by the workers still
  bounds the step.
* ``fusion``: each chain of at least two consecutive memory-bound elementwise/normalisation
  kernels (:data:`FUSIBLE_RE`) of a stream, launched one after another with nothing else
  between them, becomes one kernel as long as the chain's longest kernel (the fused kernel
  reads the chain's inputs and writes its output once: about the traffic of its largest
  step, at the bandwidth these kernels reached); the host issuing time between the
  chain's launches goes away with the launches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.timeline import Timeline

#: Memory-bound kernels a compiler fuses (elementwise, normalisation, softmax, casts).
FUSIBLE_RE = (r"(?i)elementwise|pointwise|vectorized|unrolled|triton_poi|triton_per|"
              r"norm|softmax|dropout|cast|convert|fill|reduce_kernel|reduction")
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
        return {"no_launch_overhead": True}, _graph_cuts(tl)
    if change == "overlap_comm":
        return {"overlap_comm": True}, []
    if change == "host_sync":
        return {"drop_syncs": True}, []
    if change == "pinned_memory":
        return _pinned(tl)
    if change == "input_pipeline":
        return _input(tl)
    if change == "fusion":
        return _fusion(tl)
    raise ValueError(f"unknown change {change!r}")


def _graph_cuts(tl: Timeline) -> list[str]:
    from traceparse.analyses.attribution import BLOCKING_API_RE

    names = tl.api.get_column("name").cast(pl.String)
    hit = names.filter(names.str.contains(BLOCKING_API_RE).fill_null(False))
    if hit.len() == 0:
        return []
    counts = hit.value_counts().sort(["count", "name"], descending=[True, False])
    listed = ", ".join(f"{n} x{c}" for n, c in counts.head(3).iter_rows())
    return [f"regions cut at {hit.len():,} blocking calls ({listed}): a graph cannot hold a "
            "host read of a device value, a synchronisation or an allocation"]


def _pageable(tl: Timeline) -> pl.DataFrame:
    host = pl.when(pl.col("copy_kind").cast(pl.String) == "HtoD").then(
        pl.col("src_kind").cast(pl.String)).otherwise(pl.col("dst_kind").cast(pl.String))
    return (tl.gpu.with_row_index("_i")
            .filter((pl.col("kind").cast(pl.String) == "memcpy")
                    & pl.col("copy_kind").cast(pl.String).is_in(["HtoD", "DtoH"]))
            .with_columns(host.alias("_host"), pl.col("copy_kind").cast(pl.String)))


def link_gbps(tl: Timeline) -> float | None:
    """The host link's nominal rate for the trace's first named device."""
    import re

    names = tl.devices["name"].drop_nulls().to_list() if tl.devices.height else []
    for rx, gbps in HOST_LINK_GBPS:
        if any(re.search(rx, str(n)) for n in names):
            return gbps
    return None


def _pinned(tl: Timeline) -> tuple[dict[str, Any] | None, list[str]]:
    m = _pageable(tl)
    pg = m.filter(pl.col("_host") == "Pageable")
    if pg.height == 0:
        return None, []
    rate: dict[str, float] = {}
    notes = []
    for d in ("HtoD", "DtoH"):
        pn = m.filter((pl.col("_host") == "Pinned") & (pl.col("copy_kind") == d)
                      & (pl.col("dur_ns") > 0))
        if pn.height and int(pn["dur_ns"].sum()):
            rate[d] = float(pn["bytes"].sum()) / float(pn["dur_ns"].sum())
            notes.append(f"{d} at {rate[d]:.1f} GB/s, the rate this trace's pinned {d} "
                         "copies reached")
    link = link_gbps(tl)
    for d in ("HtoD", "DtoH"):
        if d not in rate and link and pg.filter(pl.col("copy_kind") == d).height:
            rate[d] = link
            notes.append(f"{d} at {link:g} GB/s, the host link's nominal rate (no pinned "
                         f"{d} copy in the trace to measure)")
    if not rate:
        return None, ["no pinned copy in the trace and no known host link for its GPU"]
    dur = tl.gpu["dur_ns"].to_numpy().copy()
    for d, gbps in rate.items():
        rows = pg.filter(pl.col("copy_kind") == d)
        new = np.ceil(rows["bytes"].fill_null(0).to_numpy() / gbps).astype(np.int64)
        idx = rows["_i"].to_numpy()
        dur[idx] = np.minimum(dur[idx], new)
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
    from traceparse.analyses.attribution import busy_activities, part_intervals, per_group
    from traceparse.analyses.issuing import DATA_LOADING_RE, host_ranges

    r = host_ranges(tl).filter((pl.col("kind") != "cpu_op")
                               & pl.col("name").str.contains(DATA_LOADING_RE).fill_null(False))
    if r.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "device_id": pl.Int32,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64})
    g = ["rank", "device_id"]
    pr = per_group(r, busy_activities(tl), g)
    idle = part_intervals(tl, "idle_ns", group=g)
    return intervals.intersect(idle, pr.select(*g, "start_ns", "end_ns").cast(
        {c: idle.schema[c] for c in g}), by=g)  # type: ignore[arg-type]


def _input(tl: Timeline) -> tuple[dict[str, Any] | None, list[str]]:
    from traceparse.analyses.issuing import DATA_LOADING_RE, host_ranges

    iv = data_loading_idle(tl)
    if iv.height == 0:
        return None, []
    names = (host_ranges(tl).filter((pl.col("kind") != "cpu_op")
                                    & pl.col("name").str.contains(DATA_LOADING_RE)
                                    .fill_null(False))["name"].value_counts()
             .sort(["count", "name"], descending=[True, False]).head(3))
    listed = ", ".join(f"{n} x{c}" for n, c in names.iter_rows())
    return ({"remove": iv.select("rank", "start_ns", "end_ns")},
            [f"data-loading ranges: {listed}",
             "assumes loader workers keep up (preparation per batch / workers <= step)"])


def fusion_chains(tl: Timeline) -> pl.DataFrame:
    """Fusible kernels with their chain: ``_i`` (row in ``tl.gpu``), ``chain`` (id),
    ``name``, ``start_ns``, ``dur_ns``; chains of at least two kernels only. A chain is a
    run of consecutive fusible kernels of one stream (in start order) inside one step
    (``ProfilerStep`` ranges, when the trace has them)."""
    k = (tl.gpu.with_row_index("_i").filter(pl.col("kind").cast(pl.String) != "sync")
         .select("_i", "rank", "process_id", "device_id", "stream_id", "kind", "start_ns",
                 "dur_ns", pl.col("name").cast(pl.String))
         .sort("rank", "process_id", "device_id", "stream_id", "start_ns"))
    fus = ((pl.col("kind").cast(pl.String) == "kernel")
           & pl.col("name").str.contains(FUSIBLE_RE).fill_null(False))
    same = pl.all_horizontal(*(pl.col(c).eq_missing(pl.col(c).shift(1))
                               for c in ("rank", "process_id", "device_id", "stream_id")))
    # a fused kernel cannot span two steps (the host runs the loop and the profiler's
    # step between them): the step a kernel starts in cuts chains
    from traceparse.analyses.steps import step_windows

    sw = step_windows(tl)
    step = (np.searchsorted(sw["start_ns"].to_numpy(), k["start_ns"].to_numpy(), side="right")
            if sw.height else np.zeros(k.height, np.int64))
    k = k.with_columns(fus.alias("_f"), pl.Series("_s", step))
    same = same & (pl.col("_s") == pl.col("_s").shift(1))
    new = ~(same.fill_null(False) & pl.col("_f") & pl.col("_f").shift(1).fill_null(False))
    k = k.with_columns(new.cum_sum().alias("chain")).filter(pl.col("_f"))
    n = k.group_by("chain").len()
    return k.join(n.filter(pl.col("len") >= 2), on="chain", how="semi").select(
        "_i", "chain", "name", "start_ns", "dur_ns")


def _fusion(tl: Timeline) -> tuple[dict[str, Any] | None, list[str]]:
    from traceparse.analyses import intervals
    from traceparse.analyses.attribution import part_intervals

    ch = fusion_chains(tl)
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
    dur[lm["_i"].to_numpy()] = lm["_max"].to_numpy()
    # the issuing time between the chain's launches goes away with them
    lo = part_intervals(tl, "launch_overhead_ns", group=["rank", "device_id"])
    span = (ch.join(tl.gpu.with_row_index("_i").select("_i", "rank", "device_id"), on="_i")
            .group_by("chain", "rank", "device_id")
            .agg(pl.col("start_ns").min(), pl.col("start_ns").max().alias("end_ns")))
    g = ["rank", "device_id"]
    rem = intervals.intersect(lo, span.select(*g, "start_ns", "end_ns").cast(
        {c: lo.schema[c] for c in g}), by=g)  # type: ignore[arg-type]
    return ({"durations": pl.Series("dur_ns", dur), "remove": rem.select("rank", "start_ns",
                                                                         "end_ns")},
            [f"{per.height:,} chains of {int(per['len'].sum()):,} fusible kernels, each "
             "fused into one kernel as long as the chain's longest"])
