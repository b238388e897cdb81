"""NVTX events of an nsys export -> the ``ranges`` table.

``NVTX_EVENTS.eventType`` (ENUM_NSYS_EVENT_TYPE ids, stable across versions):

====  ===================  =================
id    meaning              ranges.kind
====  ===================  =================
34    NvtxMark             ``nvtx_mark`` (end NULL)
59    NvtxPushPopRange     ``nvtx_push_pop``
60    NvtxStartEndRange    ``nvtx_start_end``
70    NVTXT push/pop       ``nvtx_push_pop``
71    NVTXT start/end      ``nvtx_start_end``
75    NvtxDomainCreate     (names a domain; counted as skipped)
====  ===================  =================

Other types (category/thread naming, domain destroy) are counted as skipped with the type.
``name`` = ``COALESCE(text, StringIds[textId])`` ("" when neither is set); ``domain`` is the
text of the type-75 row with the same ``domainId`` in the same process; ``payload`` is the
one typed value column that is set (or the JSON text), as text. ``depth`` is the nesting
depth of push/pop ranges on their thread (0 = outermost), computed by one sorted sweep.
"""

from __future__ import annotations

import polars as pl

from traceparse import schema
from traceparse.nsys.db import NsysDB
from traceparse.nsys.gpu import drop_bad_times, sort_by_start

NVTX = "NVTX_EVENTS"
KIND_BY_TYPE = {34: "nvtx_mark", 59: "nvtx_push_pop", 60: "nvtx_start_end",
                70: "nvtx_push_pop", 71: "nvtx_start_end"}
TYPE_NAMES = {33: "NvtxCategory", 39: "NvtxThread", 75: "NvtxDomainCreate",
              76: "NvtxDomainDestroy"}
_PAYLOAD = ("uint64Value", "int64Value", "doubleValue", "uint32Value", "int32Value",
            "floatValue", "jsonText")


def nesting_depth(frame: pl.DataFrame) -> pl.Series:
    """Depth of each interval among the intervals of its thread (0 = outermost).

    ``frame`` has ``thread_id``, ``start_ns``, ``end_ns`` (null = never closed). An interval
    that starts when another one ends is not inside it; of two starting together the longer
    one is outside. Sweep: +1 at each start, -1 at each end, sorted by (thread, time, ends
    before starts, longer first); depth = running sum at the start - 1.

    Example:
        >>> f = pl.DataFrame({"thread_id": [1, 1, 1], "start_ns": [0, 1, 5],
        ...                   "end_ns": [10, 4, 6]})
        >>> nesting_depth(f).to_list()
        [0, 1, 1]
    """
    n = frame.height
    idx = pl.int_range(0, n, dtype=pl.Int64, eager=True)
    big = pl.lit(2**62, dtype=pl.Int64)
    base = frame.select(
        tid=pl.col("thread_id").fill_null(-1), s=pl.col("start_ns"),
        e=pl.col("end_ns").fill_null(big)).with_columns(idx=idx)
    starts = base.select("tid", t=pl.col("s"), order=pl.lit(1, dtype=pl.Int8),
                         neg_len=-(pl.col("e") - pl.col("s")), delta=pl.lit(1, dtype=pl.Int32),
                         idx=pl.col("idx"))
    ends = base.select("tid", t=pl.col("e"), order=pl.lit(0, dtype=pl.Int8),
                       neg_len=pl.lit(0, dtype=pl.Int64), delta=pl.lit(-1, dtype=pl.Int32),
                       idx=pl.lit(-1, dtype=pl.Int64))
    ev = (pl.concat([starts, ends]).sort(["tid", "t", "order", "neg_len"])
          .with_columns(level=pl.col("delta").cum_sum().over("tid")))
    depth = (ev.filter(pl.col("idx") >= 0).sort("idx")
             .select((pl.col("level") - 1).cast(pl.Int32)))
    return depth.to_series().alias("depth")


def read_ranges(db: NsysDB, strings: pl.DataFrame, rank: int
                ) -> tuple[pl.DataFrame, tuple[int, dict[str, int]] | None]:
    """Build ``ranges`` from NVTX_EVENTS; return it and (parsed, skipped) or None if absent."""
    if not db.has(NVTX):
        return schema.empty("ranges"), None
    db.require(NVTX, ("start", "end", "eventType"))
    cols = set(db.columns(NVTX))
    sel = ['start AS start_ns', '"end" AS end_ns', "eventType AS _type"]
    for src, dst in (("text", "_text"), ("textId", "_tid"), ("domainId", "_dom"),
                     ("rangeId", "_rid"), ("jsonTextId", "_jid")):
        if src in cols:
            sel.append(f'"{src}" AS {dst}')
    for c in _PAYLOAD:
        if c in cols:
            sel.append(f'"{c}" AS "_p_{c}"')
    if "globalTid" in cols:
        sel += ["(globalTid >> 24) & 16777215 AS process_id",
                "globalTid & 16777215 AS thread_id"]
    if "endGlobalTid" in cols:
        sel.append("endGlobalTid & 16777215 AS end_thread_id")
    raw = db.table_frame(NVTX, ", ".join(sel))
    total = raw.height
    if total == 0:
        return schema.empty("ranges"), (0, {})
    for c in ("process_id", "thread_id", "end_thread_id"):
        if c not in raw.columns:
            raw = raw.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    skipped: dict[str, int] = {}
    types = pl.col("_type")
    other = raw.filter(~types.is_in(list(KIND_BY_TYPE))).group_by("_type").len()
    for t, n in other.iter_rows():
        skipped[f"not a range or mark (eventType {t} {TYPE_NAMES.get(t, '')})".replace(
            " )", ")")] = n
    # domain names per (process, domainId) from type-75 rows
    domains = None
    if "_dom" in raw.columns:
        dom_rows = raw.filter(types == 75)
        if "_tid" in raw.columns:
            dom_rows = _with_text(dom_rows, strings)
        elif "_text" in raw.columns:
            dom_rows = dom_rows.with_columns(_name=pl.col("_text"))
        if "_name" in dom_rows.columns:
            domains = (dom_rows.select("process_id", "_dom", domain=pl.col("_name"))
                       .unique(["process_id", "_dom"], keep="first"))
    ev = raw.filter(types.is_in(list(KIND_BY_TYPE)))
    db.check_int(ev, NVTX, ("start_ns", "end_ns"))
    ev = drop_bad_times(ev, skipped, null_end_ok=True)
    ev = _with_text(ev, strings)
    kind = types.replace_strict(list(KIND_BY_TYPE), list(KIND_BY_TYPE.values()),
                                return_dtype=pl.String)
    ev = ev.with_columns(
        kind=kind, name=pl.col("_name").fill_null(""),
        end_ns=pl.when(types == 34).then(None).otherwise(pl.col("end_ns")),
        rank=pl.lit(rank, dtype=pl.Int32))
    ev = ev.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    ev = ev.with_columns(payload=_payload(ev, strings))
    if domains is not None:
        ev = ev.join(domains, on=["process_id", "_dom"], how="left", maintain_order="left")
        ev = ev.with_columns(domain=pl.when(pl.col("_dom") == 0).then(None)
                             .otherwise(pl.col("domain")))
    if "_rid" in ev.columns:
        ev = ev.with_columns(range_id=pl.col("_rid"))
    ev = sort_by_start(ev)
    pp = pl.col("kind") == "nvtx_push_pop"
    push = ev.filter(pp)
    depth = nesting_depth(push.select("thread_id", "start_ns", "end_ns")) if push.height \
        else pl.Series("depth", [], dtype=pl.Int32)
    push = push.with_columns(depth=depth)
    ev = pl.concat([push, ev.filter(~pp).with_columns(depth=pl.lit(None, dtype=pl.Int32))])
    ev = sort_by_start(ev)
    keep = [c.name for c in schema.RANGES if c.name in ev.columns]
    ranges = schema.conform("ranges", ev.select(keep))
    return ranges, (ranges.height, skipped)


def _with_text(frame: pl.DataFrame, strings: pl.DataFrame) -> pl.DataFrame:
    """Add ``_name`` = COALESCE(_text, StringIds[_tid])."""
    parts = []
    if "_text" in frame.columns:
        parts.append(pl.col("_text").cast(pl.String))
    if "_tid" in frame.columns:
        s = strings.rename({"id": "_tid", "value": "_tidv"})
        frame = frame.with_columns(pl.col("_tid").cast(pl.Int64)).join(
            s, on="_tid", how="left", maintain_order="left")
        parts.append(pl.col("_tidv"))
    if not parts:
        return frame.with_columns(_name=pl.lit(None, dtype=pl.String))
    return frame.with_columns(_name=pl.coalesce(parts))


def _payload(frame: pl.DataFrame, strings: pl.DataFrame) -> pl.Expr:
    parts = [pl.col(f"_p_{c}").cast(pl.String) for c in _PAYLOAD if f"_p_{c}" in frame.columns]
    if "_jid" in frame.columns and frame["_jid"].null_count() < frame.height:
        lookup = dict(zip(strings["id"].to_list(), strings["value"].to_list(), strict=True))
        ids = frame["_jid"].drop_nulls().unique().to_list()
        parts.append(pl.col("_jid").replace_strict(ids, [lookup.get(i) for i in ids],
                                                   default=None, return_dtype=pl.String))
    if not parts:
        return pl.lit(None, dtype=pl.String)
    return pl.coalesce(parts)
