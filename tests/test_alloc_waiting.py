"""An allocation call waits for the GPU only while work is in flight (analyses/waiting.py):
hand-made traces with hand-computed answers, then the shared traces' own events."""

from __future__ import annotations

import gzip
import json
import sqlite3

import polars as pl
import pytest
from conftest import TRACES
from perf_helpers import api, gpu, timeline

import traceparse
from traceparse.analyses.attribution import blocking_intervals, breakdown, busy_activities
from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.waiting import in_flight, waiting_parts

GROUP = ["rank", "device_id"]


def _flight_tl() -> traceparse.Timeline:
    """k0 launched at 10 runs 40..60, k1 launched at 70 runs 80..90: in flight
    [10, 60) and [70, 90)."""
    return timeline(
        gpu=gpu([{"name": "k0", "start_ns": 40, "end_ns": 60, "correlation_id": 1},
                 {"name": "k1", "start_ns": 80, "end_ns": 90, "correlation_id": 2}]),
        api=api([{"start_ns": 10, "end_ns": 12, "correlation_id": 1},
                 {"start_ns": 70, "end_ns": 72, "correlation_id": 2}]))


def test_allocation_calls_wait_only_while_work_is_in_flight() -> None:
    tl = _flight_tl()
    assert in_flight(tl).select("start_ns", "end_ns").rows() == [(10, 60), (70, 90)]
    calls = pl.DataFrame({"rank": [0, 0, 0], "name": ["cudaStreamSynchronize", "cudaMalloc",
                                                      "cudaFree_v3020"],
                          "start_ns": [0, 50, 95], "end_ns": [100, 80, 120]},
                         schema={"rank": pl.Int32, "name": pl.String, "start_ns": pl.Int64,
                                 "end_ns": pl.Int64})
    # the sync whole; the malloc's pieces [50, 60) and [70, 80); the free after the last
    # work finished (90) waits for nothing
    assert waiting_parts(tl, calls).rows() == [
        (0, "cudaStreamSynchronize", 0, 100), (0, "cudaMalloc", 50, 60),
        (0, "cudaMalloc", 70, 80)]


def _idle_malloc_tl() -> traceparse.Timeline:
    """k0 [0, 10) launched by [0, 2) (corr 1); thread 2 then sits in cudaMalloc [12, 90)
    with nothing in flight; k1 launched by [92, 94) (corr 3) runs [100, 110). The GPU is
    idle over [10, 100)."""
    return timeline(
        gpu=gpu([{"name": "k0", "start_ns": 0, "end_ns": 10, "correlation_id": 1},
                 {"name": "k1", "start_ns": 100, "end_ns": 110, "correlation_id": 3}]),
        api=api([{"start_ns": 0, "end_ns": 2, "correlation_id": 1},
                 {"name": "cudaMalloc_v3020", "start_ns": 12, "end_ns": 90,
                  "correlation_id": 2},
                 {"start_ns": 92, "end_ns": 94, "correlation_id": 3}]))


def test_an_allocation_with_nothing_in_flight_is_not_host_sync() -> None:
    tl = _idle_malloc_tl()
    assert blocking_intervals(tl, busy_activities(tl), GROUP).height == 0
    b = breakdown(tl).row(0, named=True)
    # window [0, 110): compute 20 (k0, k1); k1's launch call [92, 94) is launch overhead
    # (2); the other 88 ns idle (78 of them in the malloc), none of it host sync (before:
    # host_sync 78, idle 10)
    assert (b["compute_ns"], b["launch_overhead_ns"], b["host_sync_ns"], b["idle_ns"]) == (
        20, 2, 0, 88)
    g = idle_gaps(tl, min_ns=1).row(0, named=True)
    # the gap [10, 100): the malloc covers 78 of its 90 ns, a CUDA call of its own
    assert (g["start_ns"], g["end_ns"], g["host_sync_ns"]) == (10, 100, 0)
    assert (g["cause"], g["cause_name"]) == ("cuda_api", "cudaMalloc_v3020")


@pytest.mark.shared
def test_uvm_pytorch_cuda_free_waits_for_its_last_kernel_only() -> None:
    """uvm-pytorch__report4: a cudaFree of 240 ms. From the export's own rows: the kernels
    launched before it and unfinished when it began (joined to their launch calls by
    correlation id and process) end at most ~7.5 ms into it; then the GPU has nothing to
    run while the call goes on (the driver unmapping managed memory)."""
    path = TRACES / "nsys/uvm-pytorch__report4.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    s, e = db.execute(
        "SELECT r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n "
        "ON n.id = r.nameId WHERE n.value LIKE 'cudaFree%' ORDER BY r.end - r.start DESC "
        "LIMIT 1").fetchone()
    last = max(end for table in ("KERNEL", "MEMCPY", "MEMSET") for (end,) in db.execute(
        f"SELECT g.end FROM CUPTI_ACTIVITY_KIND_{table} g JOIN CUPTI_ACTIVITY_KIND_RUNTIME a "
        "ON a.correlationId = g.correlationId "
        "AND (a.globalTid >> 24) & 16777215 = (g.globalPid >> 24) & 16777215 "
        "WHERE MIN(a.start, g.start) < ? AND g.end > ?", (e, s)))
    db.close()
    assert e - s > 200_000_000 and 0 < last - s < 10_000_000
    tl = traceparse.load(path)
    blk = blocking_intervals(tl, busy_activities(tl), GROUP)
    pieces = blk.filter((pl.col("start_ns") >= s) & (pl.col("end_ns") <= e))
    assert pieces.select("start_ns", "end_ns").rows() == [(s, last)]
    gap = idle_gaps(tl).filter((pl.col("start_ns") < e) & (pl.col("end_ns") > last)).row(
        0, named=True)
    assert gap["dur_ns"] > 200_000_000
    assert (gap["cause"], gap["cause_name"], gap["cause_start_ns"]) == (
        "cuda_api", "cudaFree_v3020", s)
    assert gap["host_sync_ns"] < 100_000


@pytest.mark.shared
def test_alexnet_malloc_with_an_empty_queue_is_idle_in_a_cuda_call() -> None:
    """hta__alexnet_benchmark_trace: the longest cudaMalloc outside warm-up. From the
    file's events: no kernel, copy or set was launched before the call ended and finished
    after it began, so nothing could be waited for."""
    path = TRACES / "torch/hta__alexnet_benchmark_trace.json.gz"
    with gzip.open(path, "rt") as f:
        ev = [x for x in json.load(f)["traceEvents"] if x.get("ph") == "X"]
    launch = {x["args"]["correlation"]: x["ts"] for x in ev
              if x.get("cat") == "cuda_runtime" and "correlation" in x.get("args", {})}
    # each activity in flight from its launch call (its own start where earlier) to its end
    gpu_rows = [(min(launch.get(x["args"].get("correlation"), x["ts"]), x["ts"]),
                 x["ts"] + x["dur"])
                for x in ev if x.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    mallocs = sorted((x for x in ev if x.get("cat") == "cuda_runtime"
                      and x["name"] == "cudaMalloc"), key=lambda x: -x["dur"])
    empty = [m for m in mallocs if not any(
        a < m["ts"] + m["dur"] and end > m["ts"] for a, end in gpu_rows)]
    assert len(empty) >= 2 and empty[0]["dur"] > 700_000  # us
    tl = traceparse.load(path)
    blk = blocking_intervals(tl, busy_activities(tl), GROUP)
    for m in empty:  # no waiting piece inside a call with an empty queue
        ms, me = round(m["ts"] * 1000), round((m["ts"] + m["dur"]) * 1000)
        assert blk.filter((pl.col("start_ns") < me) & (pl.col("end_ns") > ms)).height == 0
    ms, me = round(empty[0]["ts"] * 1000), round((empty[0]["ts"] + empty[0]["dur"]) * 1000)
    gap = idle_gaps(tl).filter((pl.col("start_ns") <= ms) & (pl.col("end_ns") >= me)).row(
        0, named=True)
    # the GPU idles for the call (1.04 s gap); before: host_sync, "remove the sync"
    assert (gap["cause"], gap["cause_name"], gap["cause_start_ns"]) == (
        "cuda_api", "cudaMalloc", ms)
    assert gap["host_sync_ns"] == 0 and gap["idle_ns"] > 700_000_000


def test_verdict_names_the_call_behind_the_idle_gaps() -> None:
    """A window of 1000 ns: warm-up 600, idle 300, compute 100. Idle gaps: cudaMalloc 200
    and 50 ns of idle (cause cuda_api), a cpu_work range 100 ns, and a warm-up gap (kind
    warmup: not idle, not counted). Steady state (400 ns) is 75% idle, mostly cuda_api
    (250 ns), and of it mostly cudaMalloc."""
    from traceparse.analyses.summary import verdict

    bd = pl.DataFrame({"window_ns": [1000], "compute_ns": [100], "communication_ns": [0],
                       "memory_ns": [0], "launch_overhead_ns": [0], "warmup_ns": [600],
                       "host_sync_ns": [0], "idle_ns": [300]})
    gaps = pl.DataFrame({"kind": ["idle", "idle", "idle", "warmup"],
                         "cause": ["cuda_api", "cuda_api", "cpu_work", "cuda_api"],
                         "cause_name": ["cudaMalloc", "cudaFree", "step", "cuModuleLoad"],
                         "idle_ns": [200, 50, 100, 0], "dur_ns": [200, 50, 100, 600]})
    said = verdict(bd, gaps)
    assert said.endswith("steady state (without warm-up) is idle-bound: 75.0% idle (no GPU "
                         "work queued); largest gaps mostly cuda_api (cudaMalloc)"), said
    # idle-bound as a whole: the same clause
    bd2 = bd.with_columns(pl.lit(0).alias("warmup_ns"), pl.lit(900).alias("idle_ns"))
    assert verdict(bd2, gaps) == ("idle-bound: 90.0% of the window is idle (no GPU work "
                                  "queued); largest gaps mostly cuda_api (cudaMalloc)")
