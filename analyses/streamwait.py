"""Stream waits: GPU work that was queued in time but held back by a cross-stream event wait.

``cudaStreamWaitEvent(stream, event)`` (``cuStreamWaitEvent``, ``hipStreamWaitEvent``) makes
every later activity of ``stream`` wait until ``event`` completes on the GPU. The host does
not wait; the *stream* does. When the event's producer is slow, or was recorded by work the
trace does not hold (another process, before the capture began), the device can sit idle with
work queued, and a blocking host call that follows (a synchronous copy on that stream)
waits behind it. That time is neither host synchronisation nor idle host: it is the wait.

:func:`stream_waits` finds, per wait call:

* the **waiting stream**: the wait call's own ``api.stream_id`` where the trace records it
  (nsys CUPTI synchronization records, :mod:`traceparse.nsys.syncids`); the held activity is
  then the first one launched to that stream (by any thread) after the wait returned.
  Otherwise it is inferred: the stream of the first GPU activity the same host thread
  launched after the wait call returned (a wait is issued on the stream the thread launches
  to next, which is how frameworks use it: ``wait_stream`` then launch). ``stream_source``
  says which (:data:`EXACT`, :data:`INFERRED`);
* the **blocked interval** ``[max(wait end, launch call end, previous activity on the stream
  end), activity start)``: the activity had been issued, its stream had nothing of its own
  left to run, yet it did not start. Empty intervals (the event had already completed) are
  dropped;
* the **event and its producer**: with event ids on the record calls (nsys CUDA-event
  records), the last record of the waited event before the wait, and the producer is the
  last activity launched to the recording stream before that record; otherwise the last
  ``*EventRecord`` call of the same process before the wait, and the producer the last
  activity that process's recording thread launched before it. A known producer bounds the
  hold: the interval ends when the producer ends, and there is none when the producer had
  ended before the hold began (the event was complete: something else held the stream).
  Without a record call in the trace the producer is ``"producer not in this trace"`` (the
  event was recorded outside the capture or by another process).

Columns: ``rank, device_id, stream_id, start_ns, end_ns`` (the blocked interval),
``wait_name, wait_start_ns, wait_end_ns, thread_id, process_id, blocked_name``,
``event`` (the event id and its record, or the record call and its time, or null),
``producer``, ``event_id`` (null when not recorded) and ``stream_source``.

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

from collections.abc import Sequence

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
#: Where the waiting stream came from (``stream_source``).
EXACT = "stream and event from the CUPTI synchronization record"
INFERRED = "stream inferred from the thread's next launch"

_COLS = {"rank": pl.Int32, "device_id": pl.Int32, "stream_id": pl.Int64,
         "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_name": pl.String,
         "wait_start_ns": pl.Int64, "wait_end_ns": pl.Int64, "thread_id": pl.Int64,
         "process_id": pl.Int64, "blocked_name": pl.String, "event": pl.String,
         "producer": pl.String, "event_id": pl.Int64, "stream_source": pl.String}


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
    # the rows kept are chosen first (kind compared as a code), then only they are copied
    keep = tl.gpu.select((pl.col("kind") != "sync") & idx.is_not_null()).to_series()
    idx = idx.filter(keep)
    calls = tl.api.select(pl.col("start_ns").gather(idx).alias("api_start_ns"),
                          pl.col("end_ns").gather(idx).alias("api_end_ns"),
                          pl.col("thread_id").gather(idx).alias("api_thread_id"))
    acts = pl.concat([tl.gpu.select("rank", "process_id", "device_id", "stream_id",
                                    "start_ns", "end_ns", "name").filter(keep), calls],
                     how="horizontal")
    return acts.filter(pl.col("api_start_ns").is_not_null())


def _stream_waits(tl: Timeline) -> pl.DataFrame:
    api = tl.api
    if api.height == 0 or tl.gpu.height == 0:
        return _empty()
    waits = api.filter(matches(api["name"], WAIT_API_RE)).select(
        "rank", "process_id", "thread_id", pl.col("name").cast(pl.String).alias("wait_name"),
        pl.col("start_ns").alias("wait_start_ns"), pl.col("end_ns").alias("wait_end_ns"),
        pl.col("stream_id").alias("_w_stream"), pl.col("event_id").alias("_w_event"))
    if waits.height == 0:
        return _empty()
    acts = _launched(tl)
    if acts.height == 0:
        return _empty()
    # in start order (the nsys reader's gpu order already: no copy then); `_pos` names an
    # activity, its stream's backlog (`_prev_end`) is computed for the joined rows only
    if not acts["start_ns"].is_sorted():
        acts = acts.sort("start_ns")
    acts = acts.with_row_index("_pos")
    exact = waits.filter(pl.col("_w_stream").is_not_null())
    guess = waits.filter(pl.col("_w_stream").is_null())
    # each join below matches by thread or stream: only the activities of the threads and
    # streams the waits (records) name are copied, sorted or joined, and names stay codes
    # until the joined rows (a sorted String copy of every launched activity per join was
    # ~0.3 GB per million kernels, the summary's memory peak)
    parts = []
    if guess.height:
        # the waiting stream inferred: the first activity the thread launched next
        parts.append(_next_launch(acts, guess).with_columns(pl.lit(False).alias("_exact")))
    if exact.height:
        # the waiting stream from the synchronization record: the first activity launched
        # to it (by any thread) after the wait returned
        on_stream = (_keyed(acts, exact, ["rank", "process_id", "stream_id"],
                            ["rank", "process_id", "_w_stream"])
                     .sort("api_start_ns", "start_ns", maintain_order=True)
                     .select("rank", "process_id", pl.col("stream_id").alias("_w_stream"),
                             "api_start_ns", "api_end_ns", "device_id", "start_ns", "_pos",
                             pl.col("name").alias("blocked_name")))
        parts.append(exact.sort("wait_end_ns").join_asof(
            on_stream, left_on="wait_end_ns", right_on="api_start_ns",
            by=["rank", "process_id", "_w_stream"], strategy="forward",
            check_sortedness=False).with_columns(pl.col("_w_stream").alias("stream_id"),
                                                 pl.lit(True).alias("_exact")))
    j = pl.concat(parts, how="diagonal_relaxed")
    j = _prev_end(acts, j.filter(pl.col("start_ns").is_not_null())).with_columns(
        pl.max_horizontal("wait_end_ns", "api_end_ns", pl.col("_prev_end").fill_null(0))
        .alias("_from"), pl.col("blocked_name").cast(pl.String))
    # several waits before one activity (one per event): the last one names the interval
    j = (j.filter(pl.col("start_ns") > pl.col("_from"))
         .sort("wait_start_ns").unique(["rank", "device_id", "stream_id", "start_ns"],
                                       keep="last"))
    if j.height == 0:
        return _empty()
    j = _producers(api, acts, j)
    # a known producer that had finished cannot hold the stream: the hold ends when it
    # ends, and a hold that starts after it is not the wait's
    j = j.with_columns(pl.min_horizontal("start_ns", pl.col("_p_end").fill_null(
        pl.col("start_ns"))).alias("_to")).filter(pl.col("_to") > pl.col("_from"))
    if j.height == 0:
        return _empty()
    # the producer by its base name, as the gap cause names the held activity
    base = (pl.col("_p_name").str.replace(r"^void ", "")
            .str.replace_all(r"\(anonymous namespace\)::", "")
            .str.replace(r"[<(].*$", "").str.slice(0, 60))
    producer = (pl.when(pl.col("_p_name").is_not_null())
                .then(pl.format("{} (stream {})", base, pl.col("_p_stream")))
                .otherwise(pl.lit(NO_PRODUCER)))
    rec = pl.format("{} at {} ns", pl.col("_rec_name"), pl.col("_rec_ns"))
    event = (pl.when(pl.col("_w_event").is_null())
             .then(pl.when(pl.col("_rec_name").is_not_null()).then(rec)
                   .otherwise(pl.lit(None, pl.String)))
             .when(pl.col("_rec_exact") & pl.col("_rec_name").is_not_null())
             .then(pl.format("{} (recorded by {} at {} ns on stream {})", pl.col("_w_event"),
                             pl.col("_rec_name"), pl.col("_rec_ns"), pl.col("_rec_stream")))
             .when(pl.col("_rec_exact"))
             .then(pl.format("{} (its record not in this trace)", pl.col("_w_event")))
             .when(pl.col("_rec_name").is_not_null())
             .then(pl.format("{} (the process's last record before the wait: {} at {} ns)",
                             pl.col("_w_event"), pl.col("_rec_name"), pl.col("_rec_ns")))
             .otherwise(pl.format("{} (record not in this trace)", pl.col("_w_event"))))
    return (j.select(
        pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int32),
        pl.col("stream_id").cast(pl.Int64), pl.col("_from").cast(pl.Int64).alias("start_ns"),
        pl.col("_to").cast(pl.Int64).alias("end_ns"), "wait_name", "wait_start_ns",
        "wait_end_ns", pl.col("thread_id").cast(pl.Int64), pl.col("process_id").cast(pl.Int64),
        "blocked_name", event.alias("event"), producer.alias("producer"),
        pl.col("_w_event").cast(pl.Int64).alias("event_id"),
        pl.when(pl.col("_exact")).then(pl.lit(EXACT)).otherwise(pl.lit(INFERRED))
        .alias("stream_source"))
        .cast(pl.Schema(_COLS)).sort("start_ns"))


def _next_launch(acts: pl.DataFrame, guess: pl.DataFrame) -> pl.DataFrame:
    """``guess`` (waits without a recorded stream) by ``wait_end_ns``, each with the first
    activity (by start, then ``acts`` order) of its thread's first launch call starting at
    or after the wait's end: ``api_start_ns, api_end_ns, device_id, stream_id, start_ns,
    _pos, blocked_name`` (null without one). The call is found first (an as-of join on
    the thread's call starts), then its activities are read from the rows of those calls
    only (a ``group_by`` first of every launch call of the thread was the cost)."""
    key = ["rank", "process_id", "thread_id"]
    mine = _keyed(acts, guess, ["rank", "process_id", "api_thread_id"], key)
    calls = mine.select("rank", "process_id", pl.col("api_thread_id").alias("thread_id"),
                        pl.col("api_start_ns").alias("_next")).sort("_next")
    g = guess.sort("wait_end_ns").join_asof(
        calls, left_on="wait_end_ns", right_on="_next", by=key, strategy="forward",
        check_sortedness=False)
    cols = ["rank", "process_id", "api_thread_id", "api_start_ns"]
    first = (_keyed(mine, g.filter(pl.col("_next").is_not_null()), cols, [*key, "_next"])
             .sort("api_start_ns", "start_ns", maintain_order=True)
             .group_by(cols, maintain_order=True).first()
             .select("rank", "process_id", pl.col("api_thread_id").alias("thread_id"),
                     pl.col("api_start_ns").alias("_next"), "api_end_ns", "device_id",
                     "stream_id", "start_ns", "_pos", pl.col("name").alias("blocked_name")))
    return (g.join(first.cast({c: g.schema[c] for c in (*key, "_next")}), on=[*key, "_next"],
                   how="left", nulls_equal=True, maintain_order="left")
            .rename({"_next": "api_start_ns"}))


def _prev_end(acts: pl.DataFrame, j: pl.DataFrame) -> pl.DataFrame:
    """``j`` (joined activities, ``_pos`` in ``acts``) with ``_prev_end``: the latest end
    of the earlier activities (in ``acts``' start order) on the activity's stream, the
    stream's own backlog. Only the streams ``j`` names are read."""
    key = ["rank", "device_id", "stream_id"]
    backlog = (_keyed(acts.select(*key, "_pos", "end_ns"), j, key, key)
               .with_columns(pl.col("end_ns").cum_max().shift(1).over(key).alias("_prev_end"))
               .select("_pos", "_prev_end"))
    return j.join(backlog, on="_pos", how="left", maintain_order="left")


def _last_launch(frame: pl.DataFrame, acts: pl.DataFrame, key: str, source: str, *,
                 exact: bool) -> pl.DataFrame:
    """``frame`` (records at ``_rec_ns``) with the last activity launched before each record
    whose ``source`` column (stream or launching thread) equals the record's ``key``:
    ``_p_ns, _p_name, _p_stream, _p_end``, and ``_rec_exact``."""
    right = (_keyed(acts, frame, ["rank", "process_id", source], ["rank", "process_id", key])
             .select("rank", "process_id", pl.col(source).alias(key),
                     pl.col("api_start_ns").alias("_p_ns"), pl.col("name").alias("_p_name"),
                     pl.col("stream_id").alias("_p_stream"),
                     pl.col("end_ns").alias("_p_end")).sort("_p_ns", maintain_order=True))
    return frame.sort("_rec_ns").join_asof(
        right, left_on="_rec_ns", right_on="_p_ns", by=["rank", "process_id", key],
        strategy="backward", check_sortedness=False).with_columns(
        pl.col("_p_name").cast(pl.String), pl.lit(exact).alias("_rec_exact"))


def _keyed(acts: pl.DataFrame, frame: pl.DataFrame, cols: Sequence[str],
           keys: Sequence[str]) -> pl.DataFrame:
    """The rows of ``acts`` whose ``cols`` equal the ``keys`` of some row of ``frame``
    (null equal to null), in their order: the only rows a join of ``frame`` by those keys
    can match."""
    wanted = frame.select(pl.col(k).cast(acts.schema[c]).alias(c)
                          for k, c in zip(keys, cols, strict=True)).unique()
    if wanted.height <= _FEW_KEYS and all(acts.schema[c].is_integer() for c in cols):
        # a few keys (a thread, a stream or two): compared column by column, not hashed
        # (a semi join hashed every activity's key, 50-100 ms per million activities)
        hit = pl.lit(False)
        for row in wanted.iter_rows():
            hit = hit | pl.all_horizontal(
                pl.col(c).eq_missing(pl.lit(v, dtype=acts.schema[c]))
                for c, v in zip(cols, row, strict=True))
        return acts.filter(hit)
    return acts.join(wanted, on=list(cols), how="semi", nulls_equal=True,
                     maintain_order="left")


#: :func:`_keyed` compares up to this many distinct keys column by column.
_FEW_KEYS = 8


def _producers(api: pl.DataFrame, acts: pl.DataFrame, j: pl.DataFrame) -> pl.DataFrame:
    """The event's record call and producer of each wait in ``j`` (module docstring):
    ``_rec_name, _rec_ns, _rec_stream, _rec_exact, _p_name, _p_stream, _p_end``."""
    rec = api.filter(matches(api["name"], RECORD_API_RE)).select(
        "rank", "process_id", pl.col("thread_id").alias("_rec_tid"),
        pl.col("name").cast(pl.String).alias("_rec_name"),
        pl.col("start_ns").alias("_rec_ns"), pl.col("stream_id").alias("_rec_stream"),
        pl.col("event_id").alias("_w_event")).sort("_rec_ns")
    known = rec.filter(pl.col("_w_event").is_not_null())
    # the records carry their event (CUDA-event records in the export): match by event id
    by_id = pl.col("_w_event").is_not_null() & pl.lit(known.height > 0)
    ex, rest = j.filter(by_id), j.filter(~by_id)
    out = []
    if ex.height:
        ex = ex.sort("wait_start_ns").join_asof(
            known, left_on="wait_start_ns", right_on="_rec_ns",
            by=["rank", "process_id", "_w_event"], strategy="backward",
            check_sortedness=False)
        # the producer: the last activity launched to the recording stream before the record
        out.append(_last_launch(ex, acts, "_rec_stream", "stream_id", exact=True))
    if rest.height:
        # no event ids on the records: the process's last record before the wait, and the
        # last activity its thread launched before it
        rest = rest.sort("wait_start_ns").join_asof(
            rec.drop("_w_event"), left_on="wait_start_ns", right_on="_rec_ns",
            by=["rank", "process_id"], strategy="backward", check_sortedness=False)
        out.append(_last_launch(rest, acts, "_rec_tid", "api_thread_id", exact=False))
    return pl.concat(out, how="diagonal_relaxed")
