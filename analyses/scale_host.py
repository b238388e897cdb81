"""Host time that grows with the batch: the input pipeline (``predict --scale``; issue 27,
docs/calibration.md "Predicting another batch").

The host's cost of dispatch and Python per op does not depend on the batch: the op count
does not change with it. Preparing the input does: a data loader reads, decodes and
collates every sample of the batch, so at ``F`` times the batch the time a launching
thread spends in data-loading ranges grows ``F`` times. Those ranges are the ones the gap
causes and the ``input-pipeline`` fix already read as the input pipeline
(:func:`traceparse.analyses.issuing.is_data_loading`: ``DataLoader`` ``__next__``, collate,
a user range named ``make_batch`` ...), on the threads that launch GPU work (a loader on a
thread of its own overlaps them and delays nothing). A multi-process loader's main thread
waits in ``__next__`` for its workers: the wait grows with the work the workers do, to
first order ``F`` times too, and stays near zero where they keep up.

The profiler's recording cost inside those ranges (:mod:`traceparse.analyses.profiler_cost`)
is not part of the loader's work: it is removed first, and the rest is scaled. In the
host replay (:mod:`traceparse.analyses.replay_host`) every host instant after such time
moves later by ``(F - 1)`` times the profiler-free loader time before it (earlier for
``F < 1``).

Example:
    A launching thread in ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``
    over [0, 60) ms with 1 ms of the profiler's recording inside, then launching work: at
    ``F = 2`` the launches move 59 ms later (the loader now takes 118 ms).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceparse.analyses._arrays import length_before
from traceparse.analyses.intervals import union
from traceparse.analyses.issuing import host_ranges, is_data_loading
from traceparse.timeline import Timeline

#: ``(rank, process_id) -> (starts, ends)``: sorted disjoint stretches.
Stretches = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]


def loader_stretches(tl: Timeline) -> Stretches:
    """Per process (``(rank, process_id)``, the host replay's key): the sorted disjoint
    stretches its launching threads (those that made a CUDA/HIP call that launched GPU
    work) spent in data-loading ranges."""
    r = host_ranges(tl).filter(is_data_loading(pl.col("name"), pl.col("kind")))
    if r.height == 0:
        return {}
    from traceparse.links import launch_join

    launching = (launch_join(tl).filter(pl.col("api_thread_id").is_not_null()).select(
        "rank", pl.col("process_id").fill_null(0), pl.col("api_thread_id").alias("thread_id"))
        .unique())
    r = r.join(launching, on=["rank", "process_id", "thread_id"], how="semi")
    if r.height == 0:
        return {}
    u = union(r.select("rank", "process_id", "start_ns", "end_ns"), by=["rank", "process_id"])
    return {(int(k[0]), int(k[1])): (g["start_ns"].to_numpy().astype(np.int64),
                                     g["end_ns"].to_numpy().astype(np.int64))
            for k, g in u.partition_by("rank", "process_id", as_dict=True,
                                       maintain_order=True).items()}


def loader_time(st: tuple[np.ndarray, np.ndarray] | None, events: np.ndarray | None,
                costs: float | np.ndarray, t: np.ndarray) -> np.ndarray:
    """Profiler-free loader time before each instant of ``t`` (int64 ns): the stretches'
    length before it less the recording cost of the profiler's events (``events``: sorted
    starts, ``costs``: one per event or one for all) that began inside a stretch before
    it."""
    t = np.asarray(t, np.int64)
    if st is None or st[0].size == 0:
        return np.zeros(t.shape, np.int64)
    s, e = st
    length = length_before(s, e, t)
    if events is None or events.size == 0:
        return length
    k = np.searchsorted(s, events, side="right") - 1
    inside = (k >= 0) & (events < e[np.maximum(k, 0)])
    per = np.broadcast_to(np.asarray(costs, float), events.shape) * inside
    cum = np.concatenate([[0.0], np.cumsum(per)])
    before = cum[np.searchsorted(events, t, side="left")]
    return np.maximum(length - np.rint(before).astype(np.int64), 0)
