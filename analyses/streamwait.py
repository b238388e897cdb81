"""Stream waits: GPU work that was queued in time but held back by a cross-stream event wait.

``cudaStreamWaitEvent(stream, event)`` (``cuStreamWaitEvent``, ``hipStreamWaitEvent``) makes
every later activity of ``stream`` wait until ``event`` completes on the GPU. The host does
not wait; the *stream* does. When the event's producer is slow, or was recorded by work the
trace does not hold (another process, before the capture began), the device can sit idle with
work queued, and a blocking host call that follows (a synchronous copy on that stream)
waits behind it. That time is neither host synchronisation nor idle host: it is the wait.

:func:`stream_waits` finds, per wait call:

* the **waiting stream**: the stream of the first GPU activity the same host thread launched
  after the wait call returned (the API record of the wait carries no stream; a wait is issued
  on the stream the thread launches to next, which is how frameworks use it:
  ``wait_stream`` then launch);
* the **blocked interval** ``[max(wait end, launch call end, previous activity on the stream
  end), activity start)``: the activity had been issued, its stream had nothing of its own
  left to run, yet it did not start. Empty intervals (the event had already completed) are
  dropped;
* the **event and its producer**: the last ``*EventRecord`` call of the same process before
  the wait; the producer is the last activity that process's recording thread launched before
  that record call. A known producer bounds the hold: the interval ends when the producer
  ends, and there is none when the producer had ended before the hold began (the event was
  complete: something else held the stream). Without a record call in the trace the producer is
  ``"producer not in this trace"`` (the event was recorded outside the capture or by another
  process). The event id is not in the host API record of either format, so it is named by
  its record call.

Columns: ``rank, device_id, stream_id, start_ns, end_ns`` (the blocked interval),
``wait_name, wait_start_ns, wait_end_ns, thread_id, process_id, blocked_name``,
``event`` (the record call and its time, or null) and ``producer``.

Consumers: the attribution removes blocked time from host synchronisation (the host waited on
the stream, the stream waited on the event: the wait is the cause, so the time is not
host-sync), and :func:`traceparse.analyses.gaps.idle_gaps` names ``stream_wait`` as the cause
of a gap the blocked interval covers.

Example:
    A thread calls ``cudaStreamWaitEvent`` [20, 30) us, then launches kernel K [40, 45) us
    on stream 3; K starts at 500 us; no event record is in the trace. Blocked interval
    [45, 500) us on stream 3, producer ``"producer not in this trace"``.
"""

from __future__ import annotations

import polars as pl

from traceparse import links
from traceparse.analyses.codes import matches
from traceparse.derived import cached
from traceparse.timeline import Timeline

#: Host calls that make a stream wait for an event.
WAIT_API_RE = r"^(cuda|cu|hip)StreamWaitEvent(_v\d+|_ptsz|_spt)*$"
#: Host calls that record an event.
RECORD_API_RE = r"^(cuda|cu|hip)EventRecord(WithFlags)?(_v\d+|_ptsz|_spt)*$"
NO_PRODUCER = "producer not in this trace"

_COLS = {"rank": pl.Int32, "device_id": pl.Int32, "stream_id": pl.Int64,
         "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_name": pl.String,
         "wait_start_ns": pl.Int64, "wait_end_ns": pl.Int64, "thread_id": pl.Int64,
         "process_id": pl.Int64, "blocked_name": pl.String, "event": pl.String,
         "producer": pl.String}


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=_COLS)


def stream_waits(tl: Timeline) -> pl.DataFrame:
    """Blocked intervals behind stream event waits (module docstring), by start."""
    return cached(tl, "stream_waits", ("gpu", "api"), lambda: _stream_waits(tl))


def _launched(tl: Timeline) -> pl.DataFrame:
    """The non-sync GPU activities with a launching call: only the columns the rules read
    (the activity's name and kind stay dictionary codes), their call's start, end and
    thread gathered through :func:`traceparse.links.launch_links` (``api_row``, as
    :func:`traceparse.links.launch_join` does)."""
    idx = links.launch_links(tl)["api_row"]
    calls = tl.api.select(pl.col("start_ns").gather(idx).alias("api_start_ns"),
                          pl.col("end_ns").gather(idx).alias("api_end_ns"),
                          pl.col("thread_id").gather(idx).alias("api_thread_id"))
    acts = pl.concat([tl.gpu.select("rank", "process_id", "device_id", "stream_id",
                                    "start_ns", "end_ns", "name", "kind"), calls],
                     how="horizontal")
    return acts.filter((pl.col("kind").cast(pl.String) != "sync")
                       & pl.col("api_start_ns").is_not_null()).drop("kind")


def _stream_waits(tl: Timeline) -> pl.DataFrame:
    api = tl.api
    if api.height == 0 or tl.gpu.height == 0:
        return _empty()
    waits = api.filter(matches(api["name"], WAIT_API_RE)).select(
        "rank", "process_id", "thread_id", pl.col("name").cast(pl.String).alias("wait_name"),
        pl.col("start_ns").alias("wait_start_ns"), pl.col("end_ns").alias("wait_end_ns"))
    if waits.height == 0:
        return _empty()
    acts = _launched(tl)
    if acts.height == 0:
        return _empty()
    # the previous activity's end on the same stream: the stream's own backlog
    acts = (acts.sort("start_ns")
            .with_columns(pl.col("end_ns").cum_max().shift(1)
                          .over(["rank", "device_id", "stream_id"]).alias("_prev_end")))
    first = (acts.sort("api_start_ns", "start_ns")
             .group_by(["rank", "process_id", "api_thread_id", "api_start_ns"],
                       maintain_order=True).first()
             .select("rank", "process_id", pl.col("api_thread_id").alias("thread_id"),
                     "api_start_ns", "api_end_ns", "device_id", "stream_id", "start_ns",
                     "_prev_end", pl.col("name").alias("blocked_name"))
             .sort("api_start_ns"))
    j = waits.sort("wait_end_ns").join_asof(
        first, left_on="wait_end_ns", right_on="api_start_ns",
        by=["rank", "process_id", "thread_id"], strategy="forward", check_sortedness=False)
    del first
    j = j.filter(pl.col("start_ns").is_not_null()).with_columns(
        pl.max_horizontal("wait_end_ns", "api_end_ns", pl.col("_prev_end").fill_null(0))
        .alias("_from"), pl.col("blocked_name").cast(pl.String))
    # several waits before one launch (one per event): the last one names the interval
    j = (j.filter(pl.col("start_ns") > pl.col("_from"))
         .sort("wait_start_ns").unique(["rank", "process_id", "thread_id", "api_start_ns"],
                                       keep="last"))
    if j.height == 0:
        return _empty()
    rec = api.filter(matches(api["name"], RECORD_API_RE)).select(
        "rank", "process_id", pl.col("thread_id").alias("_rec_tid"),
        pl.col("name").cast(pl.String).alias("_rec_name"),
        pl.col("start_ns").alias("_rec_ns")).sort("_rec_ns")
    j = j.sort("wait_start_ns").join_asof(rec, left_on="wait_start_ns", right_on="_rec_ns",
                                           by=["rank", "process_id"], strategy="backward",
                                           check_sortedness=False)
    launched = acts.select("rank", "process_id", pl.col("api_thread_id").alias("_rec_tid"),
                           pl.col("api_start_ns").alias("_p_ns"),
                           pl.col("name").alias("_p_name"),
                           pl.col("stream_id").alias("_p_stream"),
                           pl.col("end_ns").alias("_p_end")).sort("_p_ns")
    j = j.sort("_rec_ns").join_asof(launched, left_on="_rec_ns", right_on="_p_ns",
                                     by=["rank", "process_id", "_rec_tid"],
                                     strategy="backward", check_sortedness=False)
    del acts, launched
    j = j.with_columns(pl.col("_p_name").cast(pl.String))
    # a known producer that had finished cannot hold the stream: the hold ends when it
    # ends, and a hold that starts after it is not the wait's
    j = j.with_columns(pl.min_horizontal("start_ns", pl.col("_p_end").fill_null(
        pl.col("start_ns"))).alias("_to")).filter(pl.col("_to") > pl.col("_from"))
    if j.height == 0:
        return _empty()
    producer = (pl.when(pl.col("_p_name").is_not_null())
                .then(pl.format("{} (stream {})", pl.col("_p_name"), pl.col("_p_stream")))
                .otherwise(pl.lit(NO_PRODUCER)))
    return (j.select(
        pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int32),
        pl.col("stream_id").cast(pl.Int64), pl.col("_from").cast(pl.Int64).alias("start_ns"),
        pl.col("_to").cast(pl.Int64).alias("end_ns"), "wait_name", "wait_start_ns",
        "wait_end_ns", pl.col("thread_id").cast(pl.Int64), pl.col("process_id").cast(pl.Int64),
        "blocked_name",
        pl.when(pl.col("_rec_name").is_not_null())
        .then(pl.format("{} at {} ns", pl.col("_rec_name"), pl.col("_rec_ns")))
        .otherwise(pl.lit(None, pl.String)).alias("event"),
        producer.alias("producer"))
        .cast(pl.Schema(_COLS)).sort("start_ns"))
