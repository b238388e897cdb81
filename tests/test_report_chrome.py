"""Chrome-trace export (traceparse.reports.chrome) on hand-built timelines and a real nsys file."""

from __future__ import annotations

import orjson
import polars as pl
import pytest
from conftest import shared_files
from report_helpers import gpu_rows, timeline

from traceparse import schema
from traceparse.reports.chrome import HOST_PID_BASE, to_chrome
from traceparse.timeline import Timeline, concat

EPOCH = 1_700_000_000_123_456_789  # an epoch-ns clock (Kineto) : doubles lose the ns here


def _tl() -> Timeline:
    gpu = gpu_rows([("gemm", "compute", EPOCH + 1_000, EPOCH + 2_501, 7, "kernel", 11),
                    ("copy", "memory", EPOCH + 3_000, EPOCH + 3_333, 8, "memcpy", 12)])
    api = [{"rank": 0, "kind": "runtime", "name": "cudaLaunchKernel", "start_ns": EPOCH,
            "end_ns": EPOCH + 400, "dur_ns": 400, "process_id": 100, "thread_id": 5,
            "correlation_id": 11},
           {"rank": 0, "kind": "runtime", "name": "cudaMemcpyAsync", "start_ns": EPOCH + 500,
            "end_ns": EPOCH + 700, "dur_ns": 200, "process_id": 100, "thread_id": 5,
            "correlation_id": 12}]
    return timeline(gpu, api)


def test_events_lanes_and_exact_times() -> None:
    doc = orjson.loads(to_chrome(_tl()))
    assert doc["otherData"]["base_ns"] == EPOCH  # earliest event: the first API call
    ev = doc["traceEvents"]
    x = {e["name"]: e for e in ev if e["ph"] == "X"}
    # gemm: start EPOCH+1000 -> ts 1.000 us; dur 1501 ns -> 1.501 us; pid = device 0, tid 7
    assert (x["gemm"]["ts"], x["gemm"]["dur"], x["gemm"]["pid"], x["gemm"]["tid"]) == \
        (1.0, 1.501, 0, 7)
    assert x["gemm"]["cat"] == "compute" and x["copy"]["cat"] == "memory"
    # exact ns back from the microsecond float
    assert round(x["copy"]["ts"] * 1000) + EPOCH == EPOCH + 3_000
    assert round(x["copy"]["dur"] * 1000) == 333
    # API calls on the host lane pid = OS pid 100, tid = thread 5
    assert (x["cudaLaunchKernel"]["pid"], x["cudaLaunchKernel"]["tid"]) == (100, 5)
    names = {(e["name"], e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    assert names[("process_name", 0, 0)] == "GPU 0"
    assert names[("thread_name", 0, 7)] == "stream 7"
    assert names[("thread_name", 0, 8)] == "stream 8"
    assert names[("process_name", 100, 0)] == "host pid 100"
    # flows: one s/f pair per correlated launch, the f bound to the enclosing kernel slice
    flows = sorted((e["id"], e["ph"], e["pid"], e["ts"]) for e in ev if e.get("cat") == "flow")
    assert flows == [(1, "f", 0, 1.0), (1, "s", 100, 0.0), (2, "f", 0, 3.0), (2, "s", 100, 0.5)]
    assert all(e.get("bp") == "e" for e in ev if e["ph"] == "f")
    # no null-valued keys (Perfetto's importer expects absent, not null)
    assert not [e for e in ev if any(v is None for v in e.values())]


def test_same_timeline_same_bytes_and_hostile_names() -> None:
    bad = '</script><img src=x onerror=alert(1)>"\\\n'
    tl = timeline(gpu_rows([(bad, "compute", 0, 10, 1)]))
    a, b = to_chrome(tl), to_chrome(tl)
    assert a == b
    doc = orjson.loads(a)
    assert [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"] == [bad]


def test_multi_rank_pids_and_ranges_and_attribution_lane() -> None:
    r0 = timeline(gpu_rows([("k", "compute", 0, 100, 7)], rank=0, device=0), rank=0)
    r1 = timeline(gpu_rows([("k", "compute", 50, 80, 7)], rank=1, device=0), rank=1)
    rng = schema.conform("ranges", pl.DataFrame({
        "rank": [1, 1], "kind": ["nvtx_push_pop", "nvtx_mark"], "name": ["step 1", "mark"],
        "start_ns": [10, 20], "end_ns": [90, None], "dur_ns": [80, None],
        "thread_id": [3, 3]}))
    tl = concat([r0, r1])
    tl = Timeline(**{**tl.tables(), "ranges": rng})
    attr = pl.DataFrame({"rank": [0, 0], "device_id": [0, 0], "start_ns": [0, 60],
                         "end_ns": [60, 100], "category": ["compute", "idle"]})
    ev = orjson.loads(to_chrome(tl, attribution=attr))["traceEvents"]
    kern = sorted((e["pid"], e["ts"]) for e in ev if e["ph"] == "X" and e["name"] == "k")
    assert kern == [(0, 0.0), (1000, 0.05)]  # pid = rank * 1000 + device
    step = next(e for e in ev if e["name"] == "step 1")
    assert (step["pid"], step["tid"], step["ts"], step["dur"]) == (HOST_PID_BASE + 1, 3,
                                                                   0.01, 0.08)
    mark = next(e for e in ev if e["name"] == "mark")
    assert mark["ph"] == "i" and mark["s"] == "t" and "dur" not in mark
    lane = [(e["name"], e["ts"], e["dur"]) for e in ev if e.get("cat") == "attribution"]
    assert lane == [("compute", 0.0, 0.06), ("idle", 0.06, 0.04)]
    assert {"ph": "M", "name": "thread_name", "pid": 0, "tid": -2,
            "args": {"name": "attribution"}} in ev


@pytest.mark.shared
@pytest.mark.parametrize("path", shared_files("nsys", "fuser__report1_h200.sqlite"),
                         ids=lambda p: p.name)
def test_real_nsys_counts(path) -> None:  # type: ignore[no-untyped-def]
    from traceparse import loader

    tl = loader.load(path)
    ev = orjson.loads(to_chrome(tl))["traceEvents"]
    # every gpu row, api call and closed range is one complete event
    gpu_x = [e for e in ev if e["ph"] == "X" and e["pid"] in set(tl.gpu["device_id"].to_list())
             and e["cat"] in ("compute", "memory", "communication", "sync")]
    assert len(gpu_x) == tl.gpu.height
    closed = tl.ranges.filter(pl.col("end_ns").is_not_null()).height
    assert sum(e["ph"] == "X" for e in ev) == tl.gpu.height + tl.api.height + closed
    base = orjson.loads(to_chrome(tl))["otherData"]["base_ns"]
    first = min(gpu_x, key=lambda e: e["ts"])
    assert round(first["ts"] * 1000) + base == tl.gpu["start_ns"].min()
