"""The schema, the Timeline container and its Parquet round trip."""

from __future__ import annotations

import hashlib

import polars as pl
import pytest

from traceparse import schema
from traceparse.categorize import category_expr
from traceparse.errors import TraceError
from traceparse.timeline import Timeline, concat, ingest_frame, ingest_rows


def _gpu(rows: list[dict]) -> pl.DataFrame:
    frame = pl.DataFrame(rows, infer_schema_length=None)
    frame = frame.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    frame = frame.with_columns(kind=pl.col("kind").cast(pl.Categorical),
                               copy_kind=pl.col("copy_kind").cast(pl.Categorical))
    frame = frame.with_columns(category_expr())
    return schema.conform("gpu", frame)


def small_timeline() -> Timeline:
    big_id = 2**62 + 12345  # beyond 2**53: must survive exactly
    gpu = _gpu([
        {"rank": 0, "kind": "kernel", "start_ns": 100, "end_ns": 250, "device_id": 0,
         "stream_id": 7, "correlation_id": big_id, "name": "void gemm<float>(float*)",
         "copy_kind": None},
        {"rank": 0, "kind": "kernel", "start_ns": 300, "end_ns": 900, "device_id": 0,
         "stream_id": 13, "correlation_id": 5,
         "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *)", "copy_kind": None},
        {"rank": 0, "kind": "memcpy", "start_ns": 0, "end_ns": 40, "device_id": 0,
         "stream_id": 7, "correlation_id": 1, "name": "[CUDA memcpy Host-to-Device]",
         "copy_kind": "HtoD", "bytes": 4096},
        {"rank": 0, "kind": "memcpy", "start_ns": 950, "end_ns": 990, "device_id": 0,
         "stream_id": 7, "correlation_id": 2, "name": "[CUDA memcpy Peer-to-Peer]",
         "copy_kind": "PtoP", "bytes": 8},
        {"rank": 0, "kind": "memset", "start_ns": 40, "end_ns": 60, "device_id": 0,
         "stream_id": 7, "correlation_id": 3, "name": "[CUDA memset]", "copy_kind": None},
    ])
    src = schema.conform("sources", pl.DataFrame(
        {"rank": [0], "file": ["x.sqlite"], "format": ["nsys-sqlite"], "start_ns": [0],
         "end_ns": [990]}))
    ing = ingest_frame(ingest_rows(0, "gpu", "CUPTI_ACTIVITY_KIND_KERNEL", 2,
                                   {"end before start": 1}))
    return Timeline(gpu=gpu, sources=src, ingest=ing, meta={"source_format": "nsys-sqlite"})


def test_category_rules_applied():
    cats = small_timeline().gpu["category"].cast(pl.String).to_list()
    assert cats == ["compute", "communication", "memory", "communication", "memory"]


def test_validate_accepts_conformed_and_rejects_bad():
    tl = small_timeline().validate()
    bad = tl.gpu.with_columns(dur_ns=pl.col("dur_ns") + 1)
    with pytest.raises(schema.SchemaError, match="dur != end-start"):
        schema.validate("gpu", bad)
    # a multi-chunk frame (ranks concatenated): the bad rows of every chunk are counted
    good = tl.gpu
    two = pl.concat([good, bad.head(2), bad.tail(1)], rechunk=False)
    assert two["dur_ns"].n_chunks() == 3
    with pytest.raises(schema.SchemaError, match=r"^gpu: 3 rows with end < start"):
        schema.validate("gpu", two)
    with pytest.raises(schema.SchemaError, match="columns not in schema"):
        schema.conform("gpu", tl.gpu.with_columns(extra=pl.lit(1)))
    with pytest.raises(schema.SchemaError, match="nulls in a required column"):
        schema.validate("gpu", tl.gpu.with_columns(name=pl.lit(None, dtype=pl.Categorical)))


def test_every_table_has_rank_and_units_in_time_names():
    for table, cols in schema.TABLES.items():
        assert cols[0].name == "rank", table
        for c in cols:
            if c.unit == "ns":
                assert c.name.endswith("_ns"), (table, c.name)


def test_save_load_round_trip_is_exact(tmp_path):
    tl = small_timeline()
    out = tl.save(tmp_path / "t.parquet")
    back = Timeline.load(out)
    for name in schema.TABLES:
        assert back.table(name).equals(tl.table(name)), name
        assert back.table(name).schema == tl.table(name).schema, name
    assert back.gpu["correlation_id"][0] == 2**62 + 12345
    assert back.meta == tl.meta


def test_load_rejects_non_timeline_and_other_schema(tmp_path):
    with pytest.raises(TraceError, match="not a saved traceparse timeline"):
        Timeline.load(tmp_path)
    out = small_timeline().save(tmp_path / "t.parquet")
    (out / "timeline.json").write_text('{"schema_version": "0.0", "meta": {}}')
    with pytest.raises(TraceError, match=r"saved with schema 0\.0"):
        Timeline.load(out)


def test_save_into_missing_directory_leaves_nothing(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        small_timeline().save(tmp_path / "missing" / "t.parquet")
    assert list(tmp_path.iterdir()) == []


def test_concat_keeps_ranks_and_rows():
    a = small_timeline()
    b = small_timeline()
    b.gpu = b.gpu.with_columns(rank=pl.lit(1, dtype=pl.Int32))
    both = concat([a, b]).validate()
    assert both.gpu.height == 10
    assert both.gpu.group_by("rank").len().sort("rank")["len"].to_list() == [5, 5]


def test_ingest_rows_account_for_every_row():
    rows = ingest_rows(0, "gpu", "K", 7, {"a": 2, "b": 1, "zero": 0})
    assert sum(r["count"] for r in rows) == 10
    assert [r["outcome"] for r in rows] == ["parsed", "skipped", "skipped"]


def test_describe_names_every_column():
    text = schema.describe()
    for cols in schema.TABLES.values():
        for c in cols:
            assert f"`{c.name}`" in text


def test_docs_schema_is_current():
    """docs/schema.md is generated from schema.describe(); regenerate it when this fails."""
    from pathlib import Path

    doc = Path(__file__).resolve().parent.parent / "docs" / "schema.md"
    assert hashlib.sha256(doc.read_bytes()).hexdigest() == hashlib.sha256(
        (schema.describe() + "\n").encode()).hexdigest()


def test_span_covers_all_gpu_rows():
    # gpu rows span 0 (first memcpy start) .. 990 (peer copy end)
    assert small_timeline().span_ns() == (0, 990)
    assert Timeline().span_ns() is None
