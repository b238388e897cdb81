"""Builders of small hand-made timelines for the launch/range/comm/step tests."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import schema
from traceparse.categorize import category_expr
from traceparse.timeline import Timeline


def gpu(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """GPU rows: defaults rank 0, kind kernel, device 0, stream 7, pid 1; dur and category
    computed."""
    base = {"rank": 0, "kind": "kernel", "device_id": 0, "stream_id": 7, "process_id": 1}
    f = pl.DataFrame([{**base, **r} for r in rows], infer_schema_length=None)
    f = f.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    if "copy_kind" not in f.columns:
        f = f.with_columns(copy_kind=pl.lit(None, pl.String))
    return schema.conform("gpu", f.with_columns(category_expr()))


def api(rows: list[dict[str, Any]]) -> pl.DataFrame:
    base = {"rank": 0, "kind": "runtime", "name": "cudaLaunchKernel_v7000", "process_id": 1,
            "thread_id": 2}
    f = pl.DataFrame([{**base, **r} for r in rows], infer_schema_length=None)
    return schema.conform("api", f.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")))


def ranges(rows: list[dict[str, Any]]) -> pl.DataFrame:
    base = {"rank": 0, "kind": "nvtx_push_pop", "process_id": 1, "thread_id": 2}
    f = pl.DataFrame([{**base, **r} for r in rows], infer_schema_length=None)
    return schema.conform("ranges", f.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")))


def timeline(**tables: pl.DataFrame) -> Timeline:
    return Timeline(**tables).validate()


def activities(rows: list[tuple[int, int, int, str]]) -> pl.DataFrame:
    """(device, start, end, category) -> activities of rank 0."""
    return pl.DataFrame({"rank": [0] * len(rows), "device_id": [r[0] for r in rows],
                         "start_ns": [r[1] for r in rows], "end_ns": [r[2] for r in rows],
                         "category": [r[3] for r in rows]},
                        schema={"rank": pl.Int32, "device_id": pl.Int32, "start_ns": pl.Int64,
                                "end_ns": pl.Int64, "category": pl.String})
