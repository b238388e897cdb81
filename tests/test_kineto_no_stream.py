"""A Kineto GPU event without a stream (a context-wide ``Context Sync``: ``args.stream``
4294967295, CUPTI's unsigned -1, and ``tid`` -1) has a null ``stream_id``, as the nsys reader
reads the same sentinel; the Chrome export puts it on lane -1 ("stream ?"), the raw ``tid``,
not on a "stream 4294967295" that does not exist.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import TRACES
from traceparse.kineto.reader import read
from traceparse.reports.chrome import to_chrome


def _doc() -> dict:
    return {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 5,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        # a context sync: no stream (args.stream = 2**32 - 1, tid -1)
        {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": -1,
         "ts": 110, "dur": 9, "args": {"device": 0, "stream": 4294967295, "correlation": 2,
                                       "cuda_sync_kind": "Context Sync"}},
        # a stream sync keeps its stream
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
         "ts": 120, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 3}},
    ]}


def test_context_sync_has_no_stream(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc()))
    tl = read(path)
    got = dict(zip(tl.gpu["name"].cast(pl.String), tl.gpu["stream_id"], strict=True))
    assert got == {"k": 7, "Context Sync": None, "Stream Sync": 7}
    doc = json.loads(to_chrome(tl))
    lanes = {e["name"]: e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert lanes == {"k": 7, "Context Sync": -1, "Stream Sync": 7}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert "stream 4294967295" not in names


ALEXNET = TRACES / "torch" / "hta__alexnet_benchmark_trace.json.gz"


@pytest.mark.shared
def test_alexnet_context_syncs_have_no_stream() -> None:
    """hta__alexnet_benchmark_trace: the cuda_sync events the raw file puts on tid -1 (read
    with gzip/json) are the sync rows without a stream, and no row has stream 4294967295."""
    with gzip.open(ALEXNET, "rt") as f:
        raw = json.load(f)["traceEvents"]
    no_stream = sorted(e["args"]["correlation"] for e in raw
                       if e.get("cat") == "cuda_sync" and e.get("tid") == -1)
    assert len(no_stream) == 5
    g = read(ALEXNET).gpu
    assert g.filter(pl.col("stream_id") == 4294967295).height == 0
    nulls = g.filter((pl.col("kind") == "sync") & pl.col("stream_id").is_null())
    assert sorted(nulls["correlation_id"].to_list()) == no_stream
