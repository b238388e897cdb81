"""Stream and event ids of waits and records in a Kineto trace.

Newer Kineto traces record each ``cudaStreamWaitEvent`` as a ``cuda_sync`` event named
``Stream Wait Event`` whose ``args`` give the waiting ``stream``, the event
(``wait_on_cuda_event_id``), the correlation id of the ``cudaEventRecord`` that recorded it
(``wait_on_cuda_event_record_corr_id``) and the recording stream (``wait_on_stream``), e.g.
``hta__alexnet_benchmark_trace``. :func:`join_ids` puts them on the calls, as the nsys reader
does from CUPTI's records (:mod:`traceparse.nsys.syncids`): the wait call (same correlation
id) gets ``stream_id`` = the waiting stream and ``event_id``; the record call gets
``stream_id`` = the recording stream and the same ``event_id``. The ``cuda_sync`` rows stay in
``gpu`` (kind ``sync``); only the private columns are dropped.
"""

from __future__ import annotations

import polars as pl

from traceparse.kineto.events import WAIT_ARGS


def join_ids(gpu: pl.DataFrame, api: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(gpu without the private wait columns, api with stream_id/event_id)``."""
    cols = [c for c in WAIT_ARGS.values() if c in gpu.columns]
    if not cols:
        return gpu, api
    if "_wait_event" not in cols or api.height == 0 or "correlation_id" not in api.columns:
        return gpu.drop(cols), api
    w = gpu.filter(pl.col("_wait_event").is_not_null())
    waits = w.select("correlation_id", pl.col("stream_id").alias("_s"),
                     pl.col("_wait_event").alias("_e"))
    parts = [waits]
    if "_wait_record_corr" in cols:
        parts.append(w.select(pl.col("_wait_record_corr").alias("correlation_id"),
                              pl.col("_wait_record_stream").alias("_s") if
                              "_wait_record_stream" in cols else pl.lit(None, pl.Int64)
                              .alias("_s"), pl.col("_wait_event").alias("_e")))
    ids = (pl.concat(parts, how="vertical_relaxed")
           .filter(pl.col("correlation_id").is_not_null())
           .unique("correlation_id", keep="first", maintain_order=True))
    base = api.drop([c for c in ("stream_id", "event_id") if c in api.columns])
    out = (base.join(ids, on="correlation_id", how="left", maintain_order="left")
           .rename({"_s": "stream_id", "_e": "event_id"}))
    return gpu.drop(cols), out
