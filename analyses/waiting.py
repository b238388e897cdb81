"""Which part of a blocking host call waits for the GPU (docs/analyses.md, "Host sync").

An explicit synchronise or copy call (``cudaStreamSynchronize``, ``cudaMemcpy`` ...) is
there to wait: all of it counts as waiting, also where the trace shows nothing in flight
(what it waits for may be work the trace does not hold, issued before the capture began).

An allocation call (:data:`ALLOC_API_RE`: ``cudaMalloc``, ``cudaFree``, ``cuMemAlloc`` ...)
synchronises only implicitly: it waits only while its rank's GPU has work **in flight**
(:func:`in_flight`: issued and not finished, from the launch call's entry to the
activity's end). The rest of the call is the allocator's and driver's own work (mapping or
unmapping pages): the GPU is idle because the host is busy in a CUDA call, not because the
host waits for it. ``uvm-pytorch__report4``: two ``cudaFree`` calls of 240 and 141 ms with
7.5 ms of work in flight between them; ``hta__alexnet_benchmark_trace``: ``cudaMalloc``
calls of 764 and 277 ms with nothing issued and unfinished.

:func:`waiting_parts` turns blocking calls into the intervals that wait: every other call
whole, an allocation call cut to its in-flight pieces. The attribution's host-sync set
(:func:`traceparse.analyses.attribution.blocking_intervals`), the gap causes and the
warm-up first-call rule (:mod:`traceparse.analyses.warmup`) all read it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceparse import links
from traceparse.analyses.intervals import union
from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Allocation calls: blocking only while work is in flight (module docstring).
ALLOC_API_RE = r"^(cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|hipMalloc|hipFree)(_v\d+)*$"


def in_flight(tl: Timeline) -> pl.DataFrame:
    """``rank, start_ns, end_ns``: per rank, the sorted disjoint stretches when its GPU had
    work issued and not finished: each activity (but ``sync`` rows) from its launch call's
    entry (:func:`traceparse.links.launch_starts`; its own start where no call is linked
    or the call is later) to its end, so work queued behind a stream wait counts while it
    waits. Computed once per timeline.

    Example:
        a kernel launched at 10 that runs 40..60 and one launched at 70 that runs 80..90:
        ``[10, 60), [70, 90)``.
    """
    def compute() -> pl.DataFrame:
        acts = (tl.gpu.select("rank", "category", links.launch_starts(tl), "start_ns",
                              "end_ns")
                .filter(pl.col("category") != "sync")
                .select("rank", pl.min_horizontal(pl.col("api_start_ns").fill_null(pl.col(
                    "start_ns")), pl.col("start_ns")).alias("start_ns"), "end_ns"))
        return union(acts, by=["rank"]).sort("rank", "start_ns")

    return cached(tl, "in_flight", ("gpu", "api"), compute)


def waiting_parts(tl: Timeline, calls: pl.DataFrame) -> pl.DataFrame:
    """The parts of the blocking ``calls`` (``rank, name, start_ns, end_ns`` and any other
    columns) that wait for the GPU (module docstring): every call whole but an allocation,
    which is replaced by its pieces that overlap :func:`in_flight` of its rank (none when
    nothing was in flight). Same columns and types; rows in the calls' order, an
    allocation's pieces in time order in its place.

    Example:
        in flight ``[10, 60), [70, 90)`` on rank 0; ``cudaStreamSynchronize [0, 100)`` stays
        whole, ``cudaMalloc [50, 80)`` becomes ``[50, 60), [70, 80)``, ``cudaFree
        [95, 120)`` goes.
    """
    alloc = pl.col("name").cast(pl.String).str.contains(ALLOC_API_RE)
    if calls.height == 0 or not calls.select(alloc.any()).item():
        return calls
    rows = calls.with_row_index("_i")
    keep = rows.filter(~alloc)
    flight = {k[0]: (f["start_ns"].to_numpy(), f["end_ns"].to_numpy())
              for k, f in in_flight(tl).partition_by("rank", as_dict=True).items()}
    pieces = [keep]
    for k, a in rows.filter(alloc).partition_by("rank", as_dict=True,
                                                maintain_order=True).items():
        s, e = flight.get(k[0], (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        cs, ce = a["start_ns"].to_numpy(), a["end_ns"].to_numpy()
        # the stretches each call overlaps: [first ending after its start, first starting
        # at or after its end)
        lo = np.searchsorted(e, cs, side="right")
        n = np.maximum(np.searchsorted(s, ce, side="left") - lo, 0)
        call = np.repeat(np.arange(a.height), n)
        k_ = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        ps, pe = np.maximum(s[k_], cs[call]), np.minimum(e[k_], ce[call])
        hit = pe > ps
        pieces.append(a[call[hit]].with_columns(
            pl.Series("start_ns", ps[hit]).cast(calls.schema["start_ns"]),
            pl.Series("end_ns", pe[hit]).cast(calls.schema["end_ns"])))
    return pl.concat(pieces).sort("_i", "start_ns", maintain_order=True).drop("_i")
