"""CUDA graph tables of an nsys export (FORMATS.md A.13).

* ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE(start, end, deviceId, contextId, streamId, correlationId,
  globalPid, graphId, graphExecId)`` (2024.2+, ``--cuda-graph-trace=graph``): one GPU
  interval per graph execution, **without** the graph's kernels. Each row becomes a ``gpu``
  row of kind ``graph`` (category ``compute``: what the graph ran is not recorded), named
  ``CUDA graph <graphId>``, so its time counts as GPU busy instead of idle.
  :func:`traceparse.analyses.graphs.graph_notes` says what this means for attribution.
* ``CUDA_GRAPH_EVENTS`` (graph-level host events: creation, instantiation, clone; 2024.2+ with
  ``graphId, originalGraphId, graphExecId``; <= 2023.4 node-level with ``graphNodeId``) and
  ``CUDA_GRAPH_NODE_EVENTS`` (2024.2+, node-level, ``graphNodeId, originalGraphNodeId`` and
  ``graphId`` where present) become ``ranges`` of kind ``cuda_graph`` (host side) whose
  ``payload`` is JSON of the ids. Node rows that name both a ``graphNodeId`` and a
  ``graphId`` fill ``gpu.graph_id`` of kernels that carry only the node id.

Kernels launched from a graph carry ``graphNodeId`` (and ``graphId`` in newer exports) and
share the ``cudaGraphLaunch`` call's correlation id (read by :mod:`traceparse.nsys.gpu`).
"""

from __future__ import annotations

import json

import polars as pl

from traceparse import schema
from traceparse.categorize import category_expr
from traceparse.nsys.db import NsysDB, q
from traceparse.nsys.gpu import SENTINEL_U32, drop_bad_times

GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_EVENTS = "CUDA_GRAPH_EVENTS"
NODE_EVENTS = "CUDA_GRAPH_NODE_EVENTS"
_IDS = ("graphId", "originalGraphId", "graphExecId", "graphNodeId", "originalGraphNodeId")


def read_graph_trace(db: NsysDB, rank: int) -> tuple[pl.DataFrame, int, dict[str, int]]:
    """Graph-level GPU intervals as ``gpu`` rows of kind ``graph``."""
    if not db.has(GRAPH_TRACE) or db.count(GRAPH_TRACE) == 0:
        return schema.empty("gpu"), 0, {}
    db.require(GRAPH_TRACE, ("start", "end"))
    cols = set(db.columns(GRAPH_TRACE))
    pairs = (("start", "start_ns"), ("end", "end_ns"), ("deviceId", "device_id"),
             ("contextId", "context_id"), ("streamId", "stream_id"),
             ("correlationId", "correlation_id"), ("graphId", "graph_id"))
    parts = [f"{q(s)} AS {d}" for s, d in pairs if s in cols]
    if "globalPid" in cols:
        parts.append("(globalPid >> 24) & 16777215 AS process_id")
    frame = db.table_frame(GRAPH_TRACE, ", ".join(parts))
    db.check_int(frame, GRAPH_TRACE, ("start_ns", "end_ns"))
    skipped: dict[str, int] = {}
    frame = drop_bad_times(frame, skipped)
    gid = pl.col("graph_id") if "graph_id" in frame.columns else pl.lit(None, pl.Int64)
    frame = frame.with_columns(
        [pl.when(pl.col(c) == SENTINEL_U32).then(None).otherwise(pl.col(c)).alias(c)
         for c in ("correlation_id", "stream_id", "context_id") if c in frame.columns])
    frame = frame.with_columns(
        kind=pl.lit("graph"), dur_ns=pl.col("end_ns") - pl.col("start_ns"),
        name=pl.concat_str(pl.lit("CUDA graph "), gid.cast(pl.String).fill_null("?")),
        rank=pl.lit(rank, dtype=pl.Int32))
    if "device_id" not in frame.columns:
        frame = frame.with_columns(device_id=pl.lit(0, dtype=pl.Int32))
    frame = schema.conform("gpu", frame.with_columns(category=pl.lit("compute")))
    frame = frame.with_columns(category_expr()).sort("start_ns", maintain_order=True)
    return frame, frame.height, skipped


def read_graph_events(db: NsysDB, strings: pl.DataFrame, rank: int
                      ) -> tuple[pl.DataFrame, list[tuple[str, int, dict[str, int]]]]:
    """Host-side graph and node events as ``ranges`` of kind ``cuda_graph``."""
    frames: list[pl.DataFrame] = []
    acct: list[tuple[str, int, dict[str, int]]] = []
    for table in (GRAPH_EVENTS, NODE_EVENTS):
        if not db.has(table):
            continue
        if db.count(table) == 0:
            acct.append((table, 0, {}))
            continue
        db.require(table, ("start",))
        cols = set(db.columns(table))
        parts = ["start AS start_ns", ('"end" AS end_ns' if "end" in cols
                                       else "NULL AS end_ns")]
        parts += [f"{q(c)} AS {q(c)}" for c in _IDS if c in cols]
        if "nameId" in cols:
            parts.append("nameId AS _nid")
        if "globalTid" in cols:
            parts += ["(globalTid >> 24) & 16777215 AS process_id",
                      "globalTid & 16777215 AS thread_id"]
        frame = db.table_frame(table, ", ".join(parts))
        skipped: dict[str, int] = {}
        frame = drop_bad_times(frame, skipped, null_end_ok=True)
        ids = [c for c in _IDS if c in frame.columns]
        if "_nid" in frame.columns:
            names = strings.rename({"id": "_nid", "value": "_name"})
            frame = frame.with_columns(pl.col("_nid").cast(pl.Int64)).join(
                names, on="_nid", how="left", maintain_order="left")
        else:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("_name"))
        label = "CUDA graph node event" if table == NODE_EVENTS else "CUDA graph event"
        payload = [json.dumps({k: v for k, v in zip(ids, row, strict=True) if v is not None},
                              sort_keys=True) for row in frame.select(ids).iter_rows()] \
            if ids else [None] * frame.height
        frame = frame.with_columns(
            kind=pl.lit("cuda_graph"),
            name=pl.col("_name").cast(pl.String).fill_null(label),
            dur_ns=pl.col("end_ns") - pl.col("start_ns"),
            payload=pl.Series(payload, dtype=pl.String),
            rank=pl.lit(rank, dtype=pl.Int32))
        frame = frame.drop([c for c in frame.columns if c.startswith("_") or c in _IDS])
        frames.append(schema.conform("ranges", frame))
        acct.append((table, frame.height, skipped))
    if not frames:
        return schema.empty("ranges"), acct
    return pl.concat(frames).sort("start_ns", maintain_order=True), acct


def node_graph_map(db: NsysDB) -> pl.DataFrame | None:
    """``graph_node_id -> graph_id`` from node events that carry both; None otherwise."""
    for table in (NODE_EVENTS, GRAPH_EVENTS):
        cols = set(db.columns(table))
        if {"graphNodeId", "graphId"} <= cols:
            m = db.frame(f"SELECT DISTINCT graphNodeId AS graph_node_id, graphId AS _gid "
                         f"FROM {q(table)} WHERE graphNodeId IS NOT NULL AND graphId IS NOT "
                         "NULL")
            if m.height:
                return m.with_columns(pl.col("graph_node_id", "_gid").cast(pl.Int64)) \
                    .unique("graph_node_id", keep="first")
    return None


def fill_graph_ids(gpu: pl.DataFrame, mapping: pl.DataFrame | None) -> pl.DataFrame:
    """Fill ``graph_id`` of rows with only ``graph_node_id`` from ``mapping``."""
    if mapping is None or gpu.height == 0 or gpu["graph_node_id"].null_count() == gpu.height:
        return gpu
    out = gpu.join(mapping, on="graph_node_id", how="left", maintain_order="left")
    return out.with_columns(pl.coalesce("graph_id", "_gid").alias("graph_id")).drop("_gid")
