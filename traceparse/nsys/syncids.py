"""Stream and event ids of host calls, from CUPTI's synchronization and CUDA-event records.

The runtime API record of a call carries no stream or event. nsys exports two tables that do,
each row tied to its call by ``correlationId`` and the process (``globalPid``):

* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``: one row per synchronising call
  (``cudaStreamWaitEvent``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``,
  ``cudaEventQuery``, ``cudaDeviceSynchronize``) with ``streamId`` and ``eventId``;
* ``CUPTI_ACTIVITY_KIND_CUDA_EVENT``: one row per ``cudaEventRecord`` with the recording
  stream and the event.

:func:`join_ids` copies ``streamId`` / ``eventId`` onto the ``api`` row of the call
(``api.stream_id``, ``api.event_id``). Unused ids are the unsigned sentinel 4294967295 and
become null.

**What a row is comes from its ids, not from** ``syncType``: the shared exports disagree on
the enum. Older exports (no ``deprecatedSyncType`` column) write ``cudaStreamWaitEvent`` rows
with ``syncType`` 3, the code their own ``ENUM_CUPTI_SYNC_TYPE`` table labels "stream sync",
and ``cudaEventSynchronize`` rows with 2 ("stream wait"); a newer one writes
``cudaStreamSynchronize`` with 2. The ids are consistent in every export: a stream wait has
both a stream and an event, a stream sync only a stream, an event sync or query only an
event, a context/device sync neither (checked on every shared export, with the call each row
correlates to). So a call is a stream wait when its API name says so and its row has both ids.

Accounting (``parsed + skipped = input`` per table): a row whose call is in ``api`` is
parsed (its ids are on that call); a row without such a call is skipped with the reason.
"""

from __future__ import annotations

import polars as pl

from traceparse.nsys.db import NsysDB

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
SENTINEL_U32 = 4294967295
NO_CALL = "no API call with its correlation id in the export"


def _ids(db: NsysDB, table: str) -> pl.DataFrame | None:
    cols = set(db.columns(table))
    if not {"correlationId", "globalPid", "streamId", "eventId"} <= cols:
        return None
    frame = db.frame(f"SELECT correlationId AS correlation_id, "
                     f"(globalPid >> 24) & 16777215 AS process_id, streamId AS _s, "
                     f"eventId AS _e FROM {table}")
    none = pl.lit(None, pl.Int64)
    return frame.select(
        pl.col("correlation_id").cast(pl.Int64), pl.col("process_id").cast(pl.Int64),
        pl.when(pl.col("_s").cast(pl.Int64) == SENTINEL_U32).then(none)
        .otherwise(pl.col("_s").cast(pl.Int64)).alias("_stream"),
        pl.when(pl.col("_e").cast(pl.Int64) == SENTINEL_U32).then(none)
        .otherwise(pl.col("_e").cast(pl.Int64)).alias("_event"))


def join_ids(db: NsysDB, api: pl.DataFrame
             ) -> tuple[pl.DataFrame, list[tuple[str, int, dict[str, int]]]]:
    """``api`` with ``stream_id`` / ``event_id`` from the two tables (module docstring),
    and ``(table, parsed, skipped)`` accounting for each table the export has."""
    acct: list[tuple[str, int, dict[str, int]]] = []
    found: list[pl.DataFrame] = []
    for table in (SYNC, CUDA_EVENT):
        if not db.has(table):
            continue
        n = db.count(table)
        ids = _ids(db, table) if n else None
        if ids is None or api.height == 0 or "correlation_id" not in api.columns:
            acct.append((table, 0, {NO_CALL if n and ids is not None else
                                    "no stream/event id columns": n}))
            continue
        # the api rows of these correlation ids first: a few hundred calls, where the
        # distinct keys of every call were 13M rows at 10M kernels
        calls = _calls_of(api, ids)
        hit = ids.join(calls.select("process_id", "correlation_id").unique(),
                       on=["process_id", "correlation_id"], how="semi")
        acct.append((table, hit.height, {NO_CALL: n - hit.height}))
        found.append(hit)
    if not found:
        return api, acct
    # one row per call (a call has one synchronization or one event record)
    ids = (pl.concat(found).unique(["process_id", "correlation_id"], keep="first",
                                   maintain_order=True))
    # the ids written at the matching rows only: a left join and a sort by row copied every
    # column of every call (+1 GB at 13M calls) to set two columns on a few hundred rows
    rows = _calls_of(api, ids).join(ids, on=["process_id", "correlation_id"], how="inner")
    return api.with_columns(_scatter(api.height, rows["_row"], rows["_stream"], "stream_id"),
                            _scatter(api.height, rows["_row"], rows["_event"], "event_id")
                            ).select(api.columns), acct


def _calls_of(api: pl.DataFrame, ids: pl.DataFrame) -> pl.DataFrame:
    """``_row`` (api row number), ``process_id``, ``correlation_id`` of the api rows whose
    correlation id is one of ``ids``'."""
    return (api.select("process_id", "correlation_id").with_row_index("_row")
            .filter(pl.col("correlation_id").is_in(ids["correlation_id"].unique().implode())))


def _scatter(n: int, rows: pl.Series, values: pl.Series, name: str) -> pl.Series:
    """An Int64 column of ``n`` nulls with ``values`` at ``rows``."""
    out = pl.Series(name, [], dtype=pl.Int64).extend_constant(None, n)
    return out.scatter(rows, values.cast(pl.Int64)) if rows.len() else out
