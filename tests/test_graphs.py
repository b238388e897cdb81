"""CUDA/HIP graphs: nsys graph tables (generated exports for node-level and graph-level
tracing) and the Kineto shapes of the SGLang decode and vLLM capture traces, checked against
the traces' own events read with the json module."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import TRACES
from tests.nsys_extra import add_table, write_base
from traceparse.analyses import graphs as G
from traceparse.analyses.attribution import breakdown
from traceparse.loader import load
from traceparse.nsys.reader import read

SGLANG = TRACES / "torch" / "tracelens__sglang_Qwen3-8B_decode.json.gz"
VLLM = TRACES / "torch" / ("tracelens__vllm_decode_full_graph_capture_rank_0."
                           "1773709742341309550.pt.trace.json.gz")


def _graph_export(tmp_path: Path, *, with_kernels: bool) -> Path:
    """One cudaGraphLaunch at 1000-1200 ns; its graph runs 2000-2600 ns on the GPU."""
    p = write_base(tmp_path / f"g{int(with_kernels)}.sqlite", [("eager", 500, 700)])
    con = sqlite3.connect(p)
    gtid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    name_id = 900
    con.execute("INSERT INTO StringIds VALUES (?, ?)", (name_id, "cudaGraphLaunch_v10000"))
    con.execute("INSERT INTO StringIds VALUES (?, ?)", (901, "gnode"))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, "
                "correlationId, nameId, returnValue) VALUES (1000, 1200, 0, ?, 555, ?, 0)",
                (gtid, name_id))
    gpid = gtid >> 24 << 24
    if with_kernels:
        row = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        cols = [d[0] for d in con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
                .description]
        for i, (s, e) in enumerate(((2000, 2100), (2100, 2400), (2400, 2600))):
            r = dict(zip(cols, row, strict=True))
            r.update(start=s, end=e, correlationId=555, graphNodeId=70 + i, demangledName=901,
                     shortName=901, gridId=10 + i)
            con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(cols)}) VALUES "
                        f"({', '.join('?' for _ in cols)})", [r[c] for c in cols])
    con.commit()
    con.close()
    if with_kernels:
        add_table(p, "CUDA_GRAPH_NODE_EVENTS", ["start", "end", "eventClass", "globalTid",
                                                "nameId", "graphNodeId", "originalGraphNodeId",
                                                "graphId"],
                  [(900 + i, 910 + i, 0, gtid, None, 70 + i, None, 5) for i in range(3)])
        add_table(p, "CUDA_GRAPH_EVENTS", ["start", "end", "eventClass", "globalTid",
                                           "nameId", "graphId", "originalGraphId",
                                           "graphExecId"], [(880, 890, 0, gtid, None, 5, None,
                                                             None)])
    else:
        add_table(p, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                  ["start", "end", "deviceId", "contextId", "greenContextId", "streamId",
                   "correlationId", "globalPid", "graphId", "graphExecId"],
                  [(2000, 2600, 0, 1, None, 7, 555, gpid, 5, 9)])
    return p


def test_node_level_graph_kernels_attributed_to_launch(tmp_path: Path) -> None:
    tl = read(_graph_export(tmp_path, with_kernels=True))
    k = tl.kernels.filter(pl.col("correlation_id") == 555).sort("start_ns")
    assert k["graph_node_id"].to_list() == [70, 71, 72]
    assert k["graph_id"].to_list() == [5, 5, 5]  # filled from CUDA_GRAPH_NODE_EVENTS
    gl = G.graph_launches(tl)
    assert gl["kernels"].to_list() == [3]
    assert gl["kernel_ns"].to_list() == [600]
    assert gl["gpu_start_ns"].to_list() == [2000] and gl["gpu_end_ns"].to_list() == [2600]
    assert gl["graph_ids"].to_list() == [[5]]
    notes = G.graph_notes(tl)
    # 600 of 800 ns kernel time (eager kernel 200 ns)
    assert notes and "ran 3 kernels (75.0% of kernel time)" in notes[0]
    ev = tl.ranges.filter(pl.col("kind") == "cuda_graph")
    assert ev.height == 4
    assert json.loads(ev.sort("start_ns")["payload"][0]) == {"graphId": 5}
    ing = tl.ingest.filter(pl.col("source").is_in(["CUDA_GRAPH_NODE_EVENTS",
                                                   "CUDA_GRAPH_EVENTS"]))
    assert sorted(ing["count"].to_list()) == [1, 3]


def test_graph_level_trace_without_kernels_is_busy_and_said(tmp_path: Path) -> None:
    tl = read(_graph_export(tmp_path, with_kernels=False))
    g = tl.gpu.filter(pl.col("kind") == "graph")
    assert g.height == 1
    assert g["name"].cast(pl.String).to_list() == ["CUDA graph 5"]
    assert g["category"].cast(pl.String).to_list() == ["compute"]
    assert g["dur_ns"].to_list() == [600]
    gl = G.graph_launches(tl)
    assert gl["kernels"].to_list() == [0] and gl["graph_records"].to_list() == [1]
    notes = " ".join(G.graph_notes(tl))
    assert "without their kernels" in notes and "0.001 ms" in notes
    # the graph's 600 ns are busy compute, not idle, in the attribution
    b = breakdown(tl, window=(2000, 2600))
    assert b["compute_ns"].to_list() == [600]
    assert b["idle_ns"].to_list() == [0]


def _events(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc if isinstance(doc, list) else doc["traceEvents"]


@pytest.mark.shared
def test_sglang_decode_graph_launch_owns_544_kernels() -> None:
    ev = _events(SGLANG)
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    launch = [e for e in ev if e.get("cat") == "cuda_runtime" and e.get("name") ==
              "hipGraphLaunch"]
    assert len(launch) == 1
    corr = launch[0]["args"]["correlation"]
    shared = [k for k in kernels if k["args"].get("correlation") == corr]
    assert (len(kernels), len(shared)) == (555, 544)
    gl = G.graph_launches(load(SGLANG))
    assert gl["kernels"].to_list() == [len(shared)]
    # kernel time of the launch = the sum of those kernels' own durations (us -> ns)
    want = sum(round(k["dur"] * 1000) for k in shared)
    assert abs(gl["kernel_ns"][0] - want) <= len(shared)


@pytest.mark.shared
def test_vllm_capture_launches_never_run() -> None:
    ev = _events(VLLM)
    begin = next(e for e in ev if e.get("name") == "hipStreamBeginCapture")
    end = next(e for e in ev if e.get("name") == "hipStreamEndCapture")
    rx = re.compile(r"(?i)(launchkernel|launchcooperativekernel|culaunch|memcpy|memset|"
                    r"extlaunch)")
    t0, t1 = begin["ts"] + begin["dur"], end["ts"] + end["dur"]
    inside = [e for e in ev if e.get("cat") == "cuda_runtime" and e.get("tid") == begin["tid"]
              and rx.search(e.get("name", "")) and t0 <= e["ts"] and e["ts"] + e["dur"] <= t1]
    gpu_corr = {e["args"].get("correlation") for e in ev
                if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    ran = [e for e in inside if e["args"].get("correlation") in gpu_corr]
    cap = G.captures(load(VLLM))
    assert cap["captured_launches"].to_list() == [len(inside)]
    assert cap["executed_launches"].to_list() == [len(ran)] == [0]
    assert len(inside) > 400
